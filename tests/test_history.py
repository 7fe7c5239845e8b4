"""Ledger history: versions from git commits, copies, working files and turn snapshots, and the
changes between them (``ledger_versions``, ``ledger_entry_versions``, ``ledger_changes``)."""

from __future__ import annotations

import os
import shutil
import unicodedata
from pathlib import Path

import pytest

from tests._history_helpers import Project, SideRepo, entry_a, entry_b, run
from tests.conftest import modes, run_unprivileged
from toolkit import config as config_mod
from toolkit.loaders import SOURCES
from toolkit.store import Store


def _cfg(root: Path, home: Path, **flags: str) -> config_mod.Config:
    return config_mod.resolve(cwd=root, env={"HOME": str(home)}, **flags)


def _load(root: Path, home: Path, full: bool = False):  # type: ignore[no-untyped-def]
    cfg = _cfg(root, home)
    store = Store.open(cfg.db_path, sources=SOURCES)
    report = store.refresh(cfg, full=full, only=["snapshots", "history"])
    return store, {r.source: r for r in report.results}


def _changes(store: Store, timeline: str = "main") -> list[tuple[int, str, str]]:
    return store.fetch("SELECT seq, change, entry_key FROM ledger_changes WHERE timeline = ? "
                       "ORDER BY seq, change_order, entry_key", [timeline])[1]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """Five commits: add, reinforce+promote, demote+edit, remove, and a meta-only commit."""
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect: two lessons", {"patterns": [entry_b("Retry budget"),
                                                   entry_b("Idempotency keys")]})
    p.commit("reflect: reinforce", {
        "patterns": [entry_b("Retry budget", "medium", 2), entry_b("Idempotency keys")],
        "edge-cases": [entry_a("Leap day billing")]})
    p.commit("prune: demote; reword", {
        "patterns": [entry_b("Retry budget", "low", 2),
                     entry_b("Idempotency keys", pattern="Send an Idempotency-Key header.")],
        "edge-cases": [entry_a("Leap day billing")]})
    p.commit("prune: remove", {
        "patterns": [entry_b("Retry budget", "low", 2)],
        "edge-cases": [entry_a("Leap day billing")]})
    (p.ledger / "meta.yaml").write_text("last_updated: 2026-04-05\n")
    p.commit("meta only")
    return p


def test_every_commit_that_changed_the_ledger_is_a_version(project, isolated_env):
    store, res = _load(project.root, isolated_env)
    rows = store.fetch("SELECT ref, seq, entries, high, medium, low, base_version_id "
                       "FROM ledger_versions WHERE source = 'git' ORDER BY seq")[1]
    assert [r[0] for r in rows] == project.commits[:4]  # the meta-only commit is no version
    assert [r[2:6] for r in rows] == [(2, 0, 0, 2), (3, 0, 1, 2), (3, 0, 0, 3), (2, 0, 0, 2)]
    assert [r[6] for r in rows] == [None] + [f"git:{c}" for c in project.commits[:3]]
    assert res["history"].note == "4 versions (4 git)"
    assert res["history"].change == "4 new commits read"
    # the working files equal HEAD: no extra version
    assert store.scalar("SELECT count(*) FROM ledger_versions WHERE source = 'working'") == 0


def test_every_change_kind_between_consecutive_versions(project, isolated_env):
    store, _ = _load(project.root, isolated_env)
    assert _changes(store) == [
        (1, "added", "patterns/idempotency keys"),
        (1, "added", "patterns/retry budget"),
        (2, "added", "edge-cases/leap day billing"),
        (2, "promoted", "patterns/retry budget"),
        (2, "reinforced", "patterns/retry budget"),
        (3, "demoted", "patterns/retry budget"),
        (3, "edited", "patterns/idempotency keys"),
        (4, "removed", "patterns/idempotency keys"),
    ]
    row = store.fetch_dicts("SELECT * FROM ledger_changes WHERE change = 'promoted'")[0]
    assert (row["old_confidence"], row["new_confidence"]) == ("low", "medium")
    assert (row["old_reflections"], row["new_reflections"]) == (1, 2)
    assert row["ref"] == project.commits[1] and row["subject"] == "reflect: reinforce"


def test_entry_versions_keep_each_entry_as_it_was(project, isolated_env):
    store, _ = _load(project.root, isolated_env)
    rows = store.fetch(
        "SELECT v.seq, e.confidence, e.reflections, e.pattern FROM ledger_entry_versions e "
        "JOIN ledger_versions v USING (version_id) WHERE e.entry_key = 'patterns/idempotency keys'"
        " ORDER BY v.seq")[1]
    assert rows == [(1, "low", 1, "Do the thing."), (2, "low", 1, "Do the thing."),
                    (3, "low", 1, "Send an Idempotency-Key header.")]


def test_a_commit_already_read_is_not_read_again(project, isolated_env, monkeypatch):
    from toolkit.sources import history as hs

    requested: list[list[str]] = []
    real = hs.read_blobs

    def spy(args, cwd, oids, what):  # type: ignore[no-untyped-def]
        requested.append(list(oids))
        return real(args, cwd, oids, what)

    monkeypatch.setattr(hs, "read_blobs", spy)
    store, _ = _load(project.root, isolated_env)
    store.close()
    first = {o for batch in requested for o in batch}
    assert len(requested) == 1 and len(first) == 9  # one cat-file --batch; 9 distinct files
    requested.clear()
    sha = project.commit("reflect: one more", {
        "patterns": [entry_b("Retry budget", "low", 2), entry_b("Feature flags")],
        "edge-cases": [entry_a("Leap day billing")]})
    store, res = _load(project.root, isolated_env)
    state = store.source_state("history")["state"]
    assert state["commits_read"] == [sha]
    new_blob = run(["git", "rev-parse", f"{sha}:.smith/vault/ledger/patterns.md"],
                   cwd=project.root)
    assert requested == [[new_blob]]  # only the one file content never seen before
    assert res["history"].note == "5 versions (5 git)"
    assert res["history"].change == "1 new commit read"
    assert _changes(store)[-1] == (5, "added", "patterns/feature flags")
    store.close()
    # unchanged: skipped by fingerprint; --full: everything again
    store, res = _load(project.root, isolated_env)
    assert res["history"].skipped
    store.close()
    store, res = _load(project.root, isolated_env, full=True)
    assert store.source_state("history")["state"]["commits_read_count"] == 5


def test_uncommitted_working_files_are_the_newest_version(project, isolated_env):
    project.write({"patterns": [entry_b("Retry budget", "medium", 3)],
                   "edge-cases": [entry_a("Leap day billing")]})
    store, _ = _load(project.root, isolated_env)
    v = store.fetch_dicts("SELECT * FROM ledger_versions WHERE source = 'working'")[0]
    assert (v["timeline"], v["seq"], v["base_version_id"]) == (
        "main", 5, f"git:{project.commits[3]}")
    assert _changes(store)[-2:] == [(5, "promoted", "patterns/retry budget"),
                                    (5, "reinforced", "patterns/retry budget")]


def test_titles_match_across_unicode_forms_and_case(tmp_path, isolated_env):
    p = Project.create(tmp_path / "u")
    nfc = unicodedata.normalize("NFC", "Café retries")
    nfd = unicodedata.normalize("NFD", "CAFÉ retries")
    p.commit("one", {"patterns": [entry_b(nfc)]})
    p.commit("two", {"patterns": [entry_b(nfd, "medium", 2)]})
    store, _ = _load(p.root, isolated_env)
    assert _changes(store) == [(1, "added", "patterns/café retries"),
                               (2, "promoted", "patterns/café retries"),
                               (2, "reinforced", "patterns/café retries"),
                               (2, "edited", "patterns/café retries")]


def test_merged_branch_changes_are_compared_with_the_first_parent(tmp_path, isolated_env):
    p = Project.create(tmp_path / "m")
    p.commit("base", {"patterns": [entry_b("A")]})
    run(["git", "checkout", "-q", "-b", "feature"], cwd=p.root)
    p.commit("feature", {"patterns": [entry_b("A"), entry_b("B")]})
    run(["git", "checkout", "-q", "main"], cwd=p.root)
    p.commit("main", {"patterns": [entry_b("A", "medium", 2)]})
    run(["git", "merge", "-q", "--no-ff", "feature", "-m", "merge"], cwd=p.root)
    store, _ = _load(p.root, isolated_env)
    merge = run(["git", "rev-parse", "HEAD"], cwd=p.root)
    by_commit = dict(store.fetch(
        "SELECT subject, list(change || ' ' || entry_key ORDER BY change_order, entry_key) "
        "FROM ledger_changes GROUP BY subject")[1])
    assert by_commit == {"base": ["added patterns/a"], "feature": ["added patterns/b"],
                         "main": ["promoted patterns/a", "reinforced patterns/a"],
                         # against its first parent ("main"), the merge brought B in
                         "merge": ["added patterns/b"]}
    assert store.scalar("SELECT entries FROM ledger_versions WHERE ref = ?", [merge]) == 2


def test_unreadable_version_is_reported_and_the_rest_load(tmp_path, isolated_env):
    p = Project.create(tmp_path / "j")
    p.commit("good", {"patterns": [entry_b("A")]})
    (p.ledger / "patterns.md").write_bytes(b"# Ledger\n\xff\xfe junk\n")
    p.commit("junk")
    p.commit("good again", {"patterns": [entry_b("A"), entry_b("B")]})
    store, res = _load(p.root, isolated_env)
    assert [m.message for m in res["history"].problems] == [
        "invalid UTF-8 at byte offset 9; its entries are left out of the history"]
    assert store.fetch("SELECT entries FROM ledger_versions ORDER BY seq")[1] == [(1,), (0,),
                                                                                 (2,)]


def test_vault_without_git_uses_archive_backup_and_working_files(tmp_path, isolated_env):
    p = Project.create(tmp_path / "nogit", git=False)
    p.write({"patterns": [entry_b("A", "high", 6), entry_b("C")]})
    arch = p.ledger / "archive" / "2026-05-01-101500"
    back = p.ledger / ".backups" / "reconcile-2026-05-03-221504"
    for folder, entries in ((arch, [entry_b("A")]),
                            (back, [entry_b("A", "medium", 3), entry_b("B")])):
        folder.mkdir(parents=True)
        (folder / "patterns.md").write_text("# Patterns\n\n" + "".join(entries))
    (p.ledger / "archive" / "empty").mkdir()  # no ledger files: no version
    store, res = _load(p.root, isolated_env)
    rows = store.fetch("SELECT version_id, timeline, seq, CAST(ts AS VARCHAR), entries "
                       "FROM ledger_versions ORDER BY seq")[1]
    assert [r[:4] for r in rows[:2]] == [
        ("archive:2026-05-01-101500", "main", 1, "2026-05-01 10:15:00"),
        ("backup:reconcile-2026-05-03-221504", "main", 2, "2026-05-03 22:15:04")]
    assert rows[2][:3] == ("working", "main", 3)
    assert "ledger not in a git repository: no git versions" in res["history"].note
    assert _changes(store) == [
        (1, "added", "patterns/a"),
        (2, "added", "patterns/b"), (2, "promoted", "patterns/a"),
        (2, "reinforced", "patterns/a"),
        (3, "added", "patterns/c"), (3, "removed", "patterns/b"),
        (3, "promoted", "patterns/a"), (3, "reinforced", "patterns/a")]


def test_git_is_started_only_where_a_repository_can_be_found(tmp_path, isolated_env,
                                                            monkeypatch):
    """Every command that loads asks which repository holds the vault: a vault in none is
    answered without starting git, a vault in a linked worktree (a ``.git`` file) or below
    a repository's subfolder still has its commits as versions, and a load asks once."""
    calls = tmp_path / "git-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{shutil.which("git")}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    lone = Project.create(tmp_path / "nogit", git=False)
    lone.write({"patterns": [entry_b("A")]})
    store, res = _load(lone.root, isolated_env)
    assert "ledger not in a git repository: no git versions" in res["history"].note
    assert not calls.exists(), calls.read_text()
    store.close()

    repo = Project.create(tmp_path / "repo")
    (repo.root / ".gitignore").write_text(".toolkit/\n")
    repo.commit("reflect", {"patterns": [entry_b("A")]})
    run(["git", "worktree", "add", "-q", "-b", "side", str(tmp_path / "linked")], cwd=repo.root)
    assert (tmp_path / "linked" / ".git").is_file()
    for root in (tmp_path / "linked", repo.root / "sub" / "folder"):
        if not root.exists():  # a project folder below the repository's top
            (root / ".smith" / "vault").mkdir(parents=True)
            (root / ".smith" / "vault" / "ledger").symlink_to(repo.ledger)
        store, res = _load(root, isolated_env)
        git_versions = store.fetch("SELECT count(*) FROM ledger_versions "
                                   "WHERE source = 'git'")[1]
        assert git_versions == [(1,)], (root, res["history"].note)
        store.close()
    # each load asked git once which repository holds the vault (its fingerprint and its
    # reading of the commits share the answer)
    asked = calls.read_text().splitlines()
    assert sum(line.startswith("rev-parse --show-toplevel") for line in asked) == 2, asked


def test_copies_next_to_git_are_compared_with_the_commit_of_their_time(project, isolated_env):
    back = project.ledger / ".backups" / "reconcile-2026-04-01-033000"  # after commit 3
    back.mkdir(parents=True)
    (back / "patterns.md").write_text("# Patterns\n\n" + entry_b("Retry budget", "low", 2) +
                                      entry_b("Idempotency keys",
                                              pattern="Send an Idempotency-Key header."))
    store, _ = _load(project.root, isolated_env)
    v = store.fetch_dicts("SELECT * FROM ledger_versions WHERE source = 'backup'")[0]
    assert (v["timeline"], v["base_version_id"]) == ("copies", f"git:{project.commits[2]}")
    # same patterns as that commit; only the edge-cases file is absent from the copy
    assert _changes(store, "copies") == [(1, "removed", "edge-cases/leap day billing")]


def test_a_folder_file_that_cannot_be_read_is_unknown_never_all_removed(project, tmp_path,
                                                                       isolated_env):
    """A working or copied ledger file over the size limit (as one without read permission:
    the same path) is taken as it was in the version the folder is compared with: no entry of
    it is recorded as removed, and a working folder equal to HEAD but for it is no version."""
    (project.root / "toolkit.yaml").write_text("max_file_mb: 0.002\n")  # 2,097 bytes
    big = "# Patterns\n\n" + entry_b("Retry budget", "low", 2) + "x" * 3000 + "\n"
    (project.ledger / "patterns.md").write_text(big)
    store, res = _load(project.root, isolated_env)
    assert "patterns.md could not be read: taken as in HEAD, not as removed" in (
        res["history"].note)
    assert store.scalar("SELECT count(*) FROM ledger_versions WHERE source = 'working'") == 0
    # (the working file's own warning is the ledger source's, said once)
    assert not [m for m in res["history"].problems if "patterns.md" in m.path]
    store.close()
    # a real change next to it is a version, with that change only
    project.write({"patterns": [], "edge-cases": [entry_a("Leap day billing", "medium", 2)]})
    (project.ledger / "patterns.md").write_text(big)
    back = project.ledger / ".backups" / "reconcile-2026-04-01-033000"  # after commit 3
    back.mkdir(parents=True)
    (back / "patterns.md").write_text(big)
    (back / "edge-cases.md").write_text("# Edge\n\n" + entry_a("Leap day billing"))
    store, res = _load(project.root, isolated_env)
    assert _changes(store)[-2:] == [(5, "promoted", "edge-cases/leap day billing"),
                                    (5, "reinforced", "edge-cases/leap day billing")]
    assert _changes(store, "copies") == []  # its patterns as in commit 3, not removed
    assert [m.message for m in res["history"].problems if "reconcile-" in m.path] == [
        "file is 3.2 KB, over the 2.0 KB limit; the history takes it as in the version "
        "before, not as removed"]
    store.close()
    # without git, a copy's unreadable file is taken as in the copy before it
    lone = Project.create(tmp_path / "lone", git=False)
    (lone.root / "toolkit.yaml").write_text("max_file_mb: 0.002\n")
    lone.write({"patterns": [entry_b("A")]})
    for name, body in (("2026-05-01-101500", "# P\n\n" + entry_b("A")),
                       ("2026-05-02-101500", big)):
        (lone.ledger / "archive" / name).mkdir(parents=True)
        (lone.ledger / "archive" / name / "patterns.md").write_text(body)
    store, res = _load(lone.root, isolated_env)
    assert _changes(store) == [(1, "added", "patterns/a")]


def test_a_committed_file_over_the_size_limit_is_unknown_never_all_removed(tmp_path,
                                                                           isolated_env):
    """A commit whose ledger file is over the size limit is taken as it was in the commit
    before (with a warning that says so, kept while the commit is): read as empty, every
    entry of it was recorded as removed by that commit and added again by the next one."""
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    (p.root / "toolkit.yaml").write_text("max_file_mb: 0.002\n")  # 2,097 bytes
    p.commit("reflect", {"patterns": [entry_b("Retry budget"), entry_b("Idempotency keys")]})
    pad = "x" * 3000 + "\n"
    p.commit("paste a log", {"patterns": [entry_b("Retry budget", "medium", 2) + pad,
                                          entry_b("Idempotency keys")]})
    p.commit("trim the log", {"patterns": [entry_b("Retry budget", "medium", 2),
                                           entry_b("Idempotency keys")],
                              "edge-cases": [entry_a("Leap day billing")]})
    store, res = _load(p.root, isolated_env)
    assert _changes(store) == [
        (1, "added", "patterns/idempotency keys"), (1, "added", "patterns/retry budget"),
        # the commit over the limit: nothing known of patterns.md; the next one against the
        # last content read
        (3, "added", "edge-cases/leap day billing"),
        (3, "promoted", "patterns/retry budget"), (3, "reinforced", "patterns/retry budget")]
    assert store.fetch("SELECT seq, entries FROM ledger_versions ORDER BY seq")[1] == [
        (1, 2), (2, 2), (3, 3)]
    warned = [m.message for m in res["history"].problems if m.path.endswith(")")]
    assert len(warned) == 1 and warned[0].endswith(
        "bytes, over the size limit; the history takes it as in the version before, not as "
        "removed"), warned
    store.close()
    # a later load keeps the commits read and their warning, and takes a new commit's file
    # over the limit as the kept commit before it reads it
    p.commit("paste again", {"patterns": [entry_b("Retry budget", "low", 2) + pad,
                                          entry_b("Idempotency keys")],
                             "edge-cases": [entry_a("Leap day billing", "medium", 2)]})
    store, res = _load(p.root, isolated_env)
    assert res["history"].change == "1 new commit read"
    assert _changes(store)[5:] == [(4, "promoted", "edge-cases/leap day billing"),
                                   (4, "reinforced", "edge-cases/leap day billing")]
    again = [m.message for m in res["history"].problems if m.path.endswith(")")]
    assert len(again) == 2 and warned[0] in again, again
    store.close()
    # so is a turn snapshot's, against the snapshot before it
    side = SideRepo.create(p.root, _cfg(p.root, isolated_env).snapshots_home)
    side.snapshot("pre-turn:1: learn")
    p.write({"patterns": [entry_b("Retry budget", "low", 3) + pad,
                          entry_b("Idempotency keys")]})
    side.snapshot("post-turn:1: learn")
    p.write({"patterns": [entry_b("Retry budget", "low", 3), entry_b("Idempotency keys")]})
    side.snapshot("post-turn:2: trim")
    store, res = _load(p.root, isolated_env)
    assert _changes(store, "snapshots") == [
        (2, "removed", "edge-cases/leap day billing"),  # (patterns.md: unknown)
        # against the last content read: the first snapshot's, as its commit reads it
        (3, "demoted", "patterns/retry budget"), (3, "reinforced", "patterns/retry budget")]
    assert len([m for m in res["history"].problems if m.path.endswith(")")]) == 4
    store.close()


def test_the_default_size_limit_holds_for_commits_as_for_the_working_files(
        tmp_path, isolated_env, monkeypatch):
    """With no max_file_mb set, a committed file over the default limit (20 MB; made small
    here) was read whole while the same working file was refused: the history's reads of
    commits now have the working files' default limit."""
    from toolkit import textio

    monkeypatch.setattr(textio, "DEFAULT_MAX_FILE_BYTES", 2097)
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect", {"patterns": [entry_b("Retry budget")]})
    p.commit("paste a log", {"patterns": [entry_b("Retry budget", "medium", 2) + "x" * 3000]})
    p.commit("trim the log", {"patterns": [entry_b("Retry budget", "medium", 2)]})
    store, res = _load(p.root, isolated_env)
    assert _changes(store) == [(1, "added", "patterns/retry budget"),
                               (3, "promoted", "patterns/retry budget"),
                               (3, "reinforced", "patterns/retry budget")]
    warned = [m.message for m in res["history"].problems if m.path.endswith(")")]
    assert len(warned) == 1 and warned[0].endswith(
        "bytes, over the size limit; the history takes it as in the version before, not as "
        "removed"), warned
    store.close()


def test_a_ledger_file_without_read_permission_is_no_false_removal(project, isolated_env):
    """``chmod 000 patterns.md``: the history records no working version (the rest is as in
    HEAD) and ``status`` lists the file's warning once (the ledger source's), not twice."""
    target = project.ledger / "patterns.md"
    with modes((target, 0)):
        r = run_unprivileged("status", cwd=project.root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("patterns.md: Permission denied: the file is not readable") == 1, r.stdout
    store = Store.open(_cfg(project.root, isolated_env).db_path, sources=SOURCES)
    assert store.scalar("SELECT count(*) FROM ledger_versions WHERE source = 'working'") == 0
    assert store.scalar("SELECT count(*) FROM ledger_changes WHERE source = 'working'") == 0
    store.close()


def test_the_vault_in_turn_snapshots_is_a_timeline(project, isolated_env):
    cfg = _cfg(project.root, isolated_env)
    side = SideRepo.create(project.root, cfg.snapshots_home)
    side.snapshot("pre-turn:1: learn")  # same as HEAD
    project.write({"patterns": [entry_b("Retry budget", "low", 2), entry_b("New one")],
                   "edge-cases": [entry_a("Leap day billing")]})
    side.snapshot("post-turn:1: learn")
    side.snapshot("pre-turn:2: again")  # unchanged: no new version
    store, _ = _load(project.root, isolated_env)
    rows = store.fetch("SELECT ref, seq, base_version_id FROM ledger_versions "
                       "WHERE source = 'snapshot' ORDER BY seq")[1]
    assert [(r[0], r[1]) for r in rows] == [("pre-turn:1: learn", 1), ("post-turn:1: learn", 2)]
    assert rows[0][2] == f"git:{project.commits[3]}"  # the committed ledger of its time
    assert _changes(store, "snapshots") == [(2, "added", "patterns/new one")]
    # contents shared by commits and snapshots are stored once and counted once per version
    assert store.fetch("SELECT source, entries FROM ledger_versions WHERE source = 'snapshot' "
                       "OR ref = ? ORDER BY source, seq", [project.commits[3]])[1] == [
        ("git", 2), ("snapshot", 2), ("snapshot", 3)]
    assert store.scalar("SELECT count(*) FROM (SELECT version_id, entry_key "
                        "FROM ledger_entry_versions GROUP BY ALL HAVING count(*) > 1)") == 0


# --------------------------------------------------------------------------- the command

@pytest.fixture
def cli_with_history(cli_run):  # type: ignore[no-untyped-def]
    """`toolkit ledger history ...`"""
    return lambda *a, **kw: cli_run("ledger", "history", *a, **kw)


def test_history_command_shows_counts_by_confidence(project, cli_with_history, monkeypatch):
    monkeypatch.chdir(project.root)
    result = cli_with_history("--format", "csv")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "when,source,version,high,medium,low,total,changes"
    assert lines[1:] == [
        f"2026-04-01 00:33,git,{project.commits[0][:8]},0,0,2,2,2 added",
        f"2026-04-01 01:33,git,{project.commits[1][:8]},0,1,2,3,"
        "\"1 added, 1 promoted, 1 reinforced\"",
        f"2026-04-01 02:33,git,{project.commits[2][:8]},0,0,3,3,\"1 demoted, 1 edited\"",
        f"2026-04-01 03:33,git,{project.commits[3][:8]},0,0,2,2,1 removed"]


def test_history_command_shows_one_entry_timeline(project, cli_with_history, monkeypatch):
    monkeypatch.chdir(project.root)
    result = cli_with_history("RETRY budget")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "patterns.md: Retry budget"
    assert lines[1].split() == ["when", "source", "version", "change", "confidence",
                                "reflections", "subject"]
    assert [ln.split()[4:6] for ln in lines[3:]] == [
        ["added", "low"], ["promoted,", "reinforced"], ["demoted", "low"]]


def test_history_command_unknown_title(project, cli_with_history, monkeypatch):
    monkeypatch.chdir(project.root)
    result = cli_with_history("no such lesson")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: no ledger entry titled 'no such lesson' in any version. Run `toolkit ledger "
        "history` for the whole ledger, or `toolkit ledger list` for current titles")


def test_history_command_without_any_history(tmp_path, cli_with_history, monkeypatch):
    (tmp_path / "plain").mkdir()
    monkeypatch.chdir(tmp_path / "plain")
    result = cli_with_history()
    assert result.exit_code == 0
    assert result.output.startswith("No ledger history yet")


def test_a_vault_outside_git_without_copies_has_no_history(tmp_path, cli_with_history,
                                                         monkeypatch):
    """The working files alone are no past version: `has_ledger_history()` is False and
    `toolkit ledger history` says there is no history yet (docs/guide/api.md), until a copy
    (here a backup) gives one."""
    from toolkit import Project as ApiProject

    p = Project.create(tmp_path / "solo", git=False)
    p.write({"patterns": [entry_b("Retry budget")]})
    monkeypatch.chdir(p.root)
    result = cli_with_history()
    assert result.exit_code == 0
    assert result.output == ("No ledger history yet: the vault's ledger is not in a git "
                             "repository with commits, and there are no archive, backup or "
                             "snapshot copies.\n")
    with ApiProject.open() as project:
        assert not project.has_ledger_history()
    backup = p.ledger / ".backups" / "reconcile-2026-04-02-120000"
    backup.mkdir(parents=True)
    shutil.copy2(p.ledger / "patterns.md", backup / "patterns.md")
    with ApiProject.open() as project:
        assert project.has_ledger_history()
    result = cli_with_history()
    assert result.exit_code == 0 and "backup" in result.output and "working" in result.output


def test_history_command_all_sources_and_file_filter(project, cli_with_history, monkeypatch):
    back = project.ledger / ".backups" / "reconcile-2026-04-01-033000"
    back.mkdir(parents=True)
    (back / "patterns.md").write_text("# Patterns\n\n" + entry_b("Retry budget", "high", 6))
    monkeypatch.chdir(project.root)
    result = cli_with_history("--all", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == \
        "when,timeline,source,version,high,medium,low,total,changes"
    assert result.output.splitlines()[-1] == (
        "2026-04-01 03:30,copies,backup,reconcile-2026-04-01-033000,1,0,0,1,"
        "\"2 removed, 1 promoted, 1 reinforced\"")
    result = cli_with_history("retry budget", "--file", "antipatterns")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1].startswith(
        "Error: no ledger entry titled 'retry budget' in any version.")
    result = cli_with_history("retry budget", "--file", "nonsense")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: unknown ledger file 'nonsense'. Use patterns, antipatterns, tool-preferences "
        "(tools), edge-cases or project-quirks (quirks)")


def test_history_command_file_filter_without_title_counts_that_file(project, cli_with_history,
                                                                    monkeypatch):
    monkeypatch.chdir(project.root)
    result = cli_with_history("--file", "patterns", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == [
        f"2026-04-01 00:33,git,{project.commits[0][:8]},0,0,2,2,2 added",
        f"2026-04-01 01:33,git,{project.commits[1][:8]},0,1,1,2,"
        "\"1 promoted, 1 reinforced\"",
        f"2026-04-01 02:33,git,{project.commits[2][:8]},0,0,2,2,\"1 demoted, 1 edited\"",
        f"2026-04-01 03:33,git,{project.commits[3][:8]},0,0,1,1,1 removed"]
    result = cli_with_history("--file", "edge-cases")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "Ledger history of edge-cases.md: 1 version(s), " \
        "oldest first"
    assert result.output.splitlines()[3].split()[4:] == ["0", "0", "1", "1", "1", "added"]
    result = cli_with_history("--file", "nonsense")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: unknown ledger file 'nonsense'. Use patterns, antipatterns, tool-preferences "
        "(tools), edge-cases or project-quirks (quirks)")


def test_two_files_with_the_same_content_both_get_their_entries(tmp_path, isolated_env):
    """Two ledger files of one commit holding the same bytes are one blob in git; the
    history reads each content once, as it parses it, and both files get their entries."""
    p = Project.create(tmp_path / "twins")
    same = "# Ledger\n\n" + entry_b("Same lesson", "medium")
    p.commit("twins", {"patterns": [], "antipatterns": []})
    (p.ledger / "patterns.md").write_text(same)
    (p.ledger / "antipatterns.md").write_text(same)
    p.commit("the same lesson in two files")
    store, res = _load(p.root, isolated_env)
    assert not res["history"].problems
    assert store.fetch(
        "SELECT v.seq, e.entry_key, e.confidence FROM ledger_entry_versions e "
        "JOIN ledger_versions v USING (version_id) ORDER BY v.seq, e.entry_key")[1] == [
        (2, "antipatterns/same lesson", "medium"), (2, "patterns/same lesson", "medium")]
    store.close()


def test_blobs_are_read_in_the_order_asked_and_a_missing_one_is_none(tmp_path):
    """``cat_blobs`` answers each object asked for, in order, one at a time: a blob's bytes
    (also an empty one), None for an object that is no blob or is missing; a folder that is
    no repository is a DataError naming it."""
    from toolkit.errors import DataError
    from toolkit.sources.snapshots import cat_blobs

    repo = tmp_path / "r"
    repo.mkdir()
    run(["git", "init", "-q"], cwd=repo)
    blobs = [run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data)
             for data in (b"one\n", b"", b"three\nlines\n" * 1000)]
    (repo / "f").write_text("x")
    run(["git", "add", "f"], cwd=repo)
    tree = run(["git", "write-tree"], cwd=repo)
    absent = "0123456789abcdef0123456789abcdef01234567"
    got = list(cat_blobs([], [blobs[2], tree, blobs[0], absent, blobs[1]], cwd=repo))
    assert got == [(blobs[2], b"three\nlines\n" * 1000), (tree, None), (blobs[0], b"one\n"),
                   (absent, None), (blobs[1], b"")]
    stream = cat_blobs([], blobs, cwd=repo)
    assert next(stream) == (blobs[0], b"one\n")
    stream.close()  # a reader that stops early ends git (no process is left behind)
    with pytest.raises(DataError) as err:
        list(cat_blobs([f"--git-dir={tmp_path / 'none'}"], blobs, what=tmp_path / "none"))
    assert "git cat-file failed" in err.value.message


def test_a_files_blob_id_read_a_chunk_at_a_time_is_gits_and_refusals_are_read_bytes(
        tmp_path: Path) -> None:
    """The history reads the id of a file it need not parse a MB at a time: the id is what
    ``git hash-object`` prints (a file of several chunks, an empty one), and a file over the
    size limit, a folder or a FIFO is refused with the same message as a whole read."""
    from toolkit.errors import DataError
    from toolkit.sources.history import file_blob_id
    from toolkit.textio import read_bytes

    big = tmp_path / "big.md"
    big.write_bytes(b"- a line of evidence, caf\xc3\xa9\n" * 100_000)  # 3 MB: 3 chunks
    empty = tmp_path / "empty.md"
    empty.write_bytes(b"")
    for f in (big, empty):
        assert file_blob_id(f, None) == run(["git", "hash-object", str(f)], cwd=tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for f, limit in ((big, 1_000_000), (tmp_path, None), (fifo, None)):
        with pytest.raises(DataError) as whole:
            read_bytes(f, limit)
        with pytest.raises(DataError) as chunked:
            file_blob_id(f, limit)
        assert chunked.value.message == whole.value.message
