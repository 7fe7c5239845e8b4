"""CodeSmith turn snapshots: `toolkit snapshots` list / diff / restore, and the store's
snapshot tables surviving CodeSmith's pruning. Side repos are built with CodeSmith's plumbing."""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests._history_helpers import SideRepo, git_env, run
from tests._terminal_helpers import run_on_a_terminal
from tests.conftest import isolate, make_audit_db, tree_digest
from toolkit import config as config_mod
from toolkit.loaders import SOURCES
from toolkit.sources.snapshots import side_repo_for
from toolkit.store import Store


def _build_world(ws: Path, snapshots_home: Path) -> SideRepo:
    """The workspace and side repo of ``world``, built at ``ws``."""
    (ws / "src").mkdir(parents=True)
    (ws / ".gitignore").write_text(".toolkit/\n*.log\n")
    (ws / "src" / "app.py").write_text("def main():\n    return 1\n")
    (ws / "README.md").write_text("# acme\n")
    run(["git", "init", "-q", "-b", "main", str(ws)])
    side = SideRepo.create(ws, snapshots_home)
    side.snapshot("pre-turn:1: add a helper")
    (ws / "src" / "app.py").write_text("def main():\n    return helper()\n")
    side.snapshot("tool:call_A1")
    (ws / "lib").mkdir()
    (ws / "lib" / "util.py").write_text("def helper():\n    return 2\n")
    (ws / "docs").mkdir()
    (ws / "docs" / "notes.md").write_text("one\ntwo\nthree\n")
    side.snapshot("post-turn:1: add a helper")
    side.snapshot("pre-turn:2: tidy up")
    (ws / "docs" / "notes.md").unlink()
    (ws / "docs").rmdir()
    (ws / "src" / "app.py").write_text("def main():\n    return helper() + 0\n")
    side.snapshot("post-turn:2: tidy up")
    commit_all(ws)
    return side


@pytest.fixture(scope="module")
def _world_made(tmp_path_factory: pytest.TempPathFactory) -> SideRepo:
    """``world``'s workspace and side repo, built once per module (in the tests'
    environment) for each test to copy: never used in place."""
    base = tmp_path_factory.mktemp("snapshots-world")
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, base / "home")
        return _build_world(base / "acme-api", base / "home" / ".codesmith" / "snapshots")


@pytest.fixture
def world(tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
          _world_made: SideRepo):
    """A workspace that is the user's own git repo (all committed), and a side repo with two
    turns: turn 1 edits app.py (tool step), adds lib/util.py and docs/notes.md; turn 2 deletes
    docs/notes.md and edits app.py again. Each test has its own copy of the module's one
    build: the workspace, and the side repo where CodeSmith keeps it for the copy's path
    (its config names its work tree, as ``git init --work-tree`` wrote it)."""
    ws = tmp_path / "acme-api"
    shutil.copytree(_world_made.workspace, ws, symlinks=True)
    git_dir = side_repo_for(ws, isolated_env / ".codesmith" / "snapshots")
    git_dir.parent.mkdir(parents=True)
    shutil.copytree(_world_made.git_dir, git_dir, symlinks=True)
    config = git_dir / "config"
    made = f"\tworktree = {_world_made.workspace}\n"
    assert made in config.read_text()
    config.write_text(config.read_text().replace(made, f"\tworktree = {ws}\n"))
    side = SideRepo(ws, git_dir, clock=_world_made.clock)
    monkeypatch.chdir(ws)
    return ws, side


def commit_all(ws: Path) -> None:
    run(["git", "add", "-A"], cwd=ws)
    run(["git", "commit", "-q", "--allow-empty", "-m", "work"], cwd=ws, when=1_777_990_000)


def index_digest(side: SideRepo) -> str:
    p = side.git_dir / "index"
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else "-"


def tree_files(side: SideRepo, sha: str) -> dict[str, bytes]:
    names = side.git("ls-tree", "-r", "--name-only", sha).splitlines()
    out = {}
    for n in names:
        out[n] = subprocess.run(["git", f"--git-dir={side.git_dir}", "cat-file", "blob",
                                 f"{sha}:{n}"], capture_output=True, env=git_env(),
                                check=True).stdout
    return out


def workspace_files(ws: Path) -> dict[str, bytes]:
    return {p.relative_to(ws).as_posix(): p.read_bytes() for p in ws.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(ws).parts
            and ".toolkit" not in p.relative_to(ws).parts}


# --------------------------------------------------------------------------- list and diff

def test_list_numbers_newest_first_like_restore(world, cli_run):
    ws, side = world
    shas = side.git("log", "--format=%H").splitlines()
    result = cli_run("snapshots")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"Snapshots of {ws} (newest first; `toolkit snapshots restore N` to revert):",
        f"  #1   {shas[0][:8]}  2026-05-04 13:11:40  post-turn:2: tidy up",
        f"  #2   {shas[1][:8]}  2026-05-04 13:10:40  pre-turn:2: tidy up",
        f"  #3   {shas[2][:8]}  2026-05-04 13:09:40  post-turn:1: add a helper",
        f"  #4   {shas[3][:8]}  2026-05-04 13:08:40  tool:call_A1",
        f"  #5   {shas[4][:8]}  2026-05-04 13:07:40  pre-turn:1: add a helper"]
    result = cli_run("snapshots", "list", "--limit", "2")
    hint = result.output.splitlines()[-1]
    assert hint == "(2 of 5 shown; `toolkit snapshots list --all` for every one)"
    every = cli_run(*hint.split("`")[1].split()[1:])  # the command the hint gives works
    assert every.exit_code == 0 and len(every.output.splitlines()) == 6, every.output


def test_diff_shows_what_the_turn_changed_and_each_step(world, cli_run):
    result = cli_run("snapshots", "diff", "4")  # the tool snapshot inside turn 1
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "Turn 1: add a helper"
    assert lines[2] == "  3 files changed, +6 -1"
    assert lines[4:7] == ["  A  docs/notes.md  +3 -0",
                          "  A  lib/util.py    +2 -0",
                          "  M  src/app.py     +1 -1"]
    assert lines[8:] == [
        "Steps:",
        "  #5 pre-turn:1 -> #4 tool:call_A1: src/app.py (+1 -1)",
        "  #4 tool:call_A1 -> #3 post-turn:1: docs/notes.md (+3 -0), lib/util.py (+2 -0)"]
    assert lines[1] == ("  from #5 pre-turn:1 (2026-05-04 13:07:40) "
                        "to #3 post-turn:1 (2026-05-04 13:09:40)")


def test_diff_by_turn_number_with_patch(world, cli_run):
    result = cli_run("snapshots", "diff", "--turn", "2", "--patch")
    assert result.exit_code == 0, result.output
    assert "  D  docs/notes.md  +0 -3" in result.output
    assert "-    return helper()\n+    return helper() + 0" in result.output
    result = cli_run("snapshots", "diff", "--turn", "7")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: no turn 7 among the snapshots (turns: 1, 2). Run `toolkit snapshots` to list "
        "them")


def test_diff_needs_a_number_or_a_turn(world, cli_run):
    result = cli_run("snapshots", "diff")
    assert result.exit_code == 2
    assert (result.output.splitlines()[-1]
            == "Error: give a snapshot NUMBER or --turn N (one of them)")


def test_no_side_repo_is_a_clear_error(tmp_path, cli_run, monkeypatch, isolated_env):
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    result = cli_run("snapshots")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1].startswith(
        f"Error: {isolated_env}/.codesmith/snapshots/")
    assert result.output.splitlines()[-1].endswith(
        f"no CodeSmith snapshots for workspace {tmp_path / 'other'}. CodeSmith snapshots a "
        "workspace at every turn; set `workspace:` in toolkit.yaml if it ran in another folder")


# --------------------------------------------------------------------------- restore

def test_restore_gives_the_snapshot_byte_for_byte(world, cli_run):
    ws, side = world
    (ws / "debug.log").write_text("ignored by .gitignore: kept\n")
    (ws / ".git" / "info" / "exclude").write_text("node_modules/\n")  # the user's own exclude
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "dep.js").write_text("excluded by the side repo: kept\n")
    head, index = side.head(), index_digest(side)
    target = side.git("rev-parse", "HEAD~2")  # #3 post-turn:1
    result = cli_run("snapshots", "restore", "3", "--yes")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == [
        "  1 to change, 1 to create, 0 to delete (3 unchanged)",
        "  change  src/app.py",
        "  create  docs/notes.md",
        "Restored snapshot #3: 2 file(s) written, 0 deleted, 0 empty folder(s) removed. The "
        "snapshot repo's HEAD is unchanged."]
    files = workspace_files(ws)
    assert {k: v for k, v in files.items() if k not in ("debug.log", "node_modules/dep.js")} \
        == tree_files(side, target)
    assert (ws / "debug.log").exists() and (ws / "node_modules" / "dep.js").exists()
    assert side.head() == head and index_digest(side) == index


def test_a_folder_the_restore_cannot_change_is_refused_before_anything_is_restored(
        world, cli_run, immutable):
    """A read-only (or unreadable) workspace folder the restore must write in (FAULTS G13):
    the restore deleted and wrote what it could, then stopped part-way, the workspace mixed
    between two snapshots. Every folder it deletes in or writes to is checked first, before
    the question: refused (exit 1) naming the folder and what to do, nothing changed."""
    ws, side = world
    before, head = workspace_files(ws), side.head()
    src = ws / "src"
    immutable(src)
    result = cli_run("snapshots", "restore", "3", input="y\n")
    assert result.exit_code == 1, result.output
    assert "Restore these files?" not in result.output
    assert result.stderr == (f"Error: {src}: folder is not writable; nothing restored. Make "
                             f"it writable: chmod u+w {src}\n")
    assert workspace_files(ws) == before and side.head() == head


def test_a_restore_git_cannot_finish_says_what_it_did_why_and_how_to_finish(
        world, cli_run, immutable, monkeypatch):
    """A file the checkout cannot write (a full disk, a busy file; here a read-only folder,
    with the check that refuses it before the restore, above, left out) stopped the restore
    with git's last stderr line, its "Updated 1 path" summary, as if bad data (exit 65),
    naming the side repo. It now says what was written, git's own error line, and that the
    same restore with --force writes the rest."""
    import toolkit.safewrite

    ws, side = world
    src = ws / "src"
    writable_again = immutable(src)
    monkeypatch.setattr(toolkit.safewrite, "check_changeable", lambda folder, done: None)
    result = cli_run("snapshots", "restore", "3", "--yes")
    assert result.exit_code == 1, result.output
    line = result.stderr.splitlines()[-1]
    assert line.startswith(f"Error: {ws}: restore of snapshot #3 stopped part-way: 0 deleted, "
                           "1 of 2 file(s) written; git checkout failed: error: "), line
    assert "src/app.py" in line and line.endswith(
        "Fix what git names, then run the same restore again with --force (the workspace now "
        "differs from the last snapshot); it writes the rest")
    writable_again()  # the cause fixed
    result = cli_run("snapshots", "restore", "3", "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert workspace_files(ws) == tree_files(side, side.git("rev-parse", "HEAD~2"))


def test_restore_removes_files_absent_from_the_snapshot_and_empty_folders(world, cli_run):
    ws, side = world
    target = side.git("rev-parse", "HEAD~4")  # #5 pre-turn:1
    (ws / "scratch").mkdir()
    (ws / "scratch" / "new.txt").write_text("untracked, would be snapshotted\n")
    commit_all(ws)
    result = cli_run("snapshots", "restore", "5", "--yes")
    assert result.exit_code == 0, result.output
    assert "  delete  lib/util.py" in result.output.splitlines()
    assert "  delete  scratch/new.txt" in result.output.splitlines()
    assert workspace_files(ws) == tree_files(side, target)
    assert not (ws / "lib").exists() and not (ws / "scratch").exists()
    assert (ws / ".git").is_dir()
    # every snapshot is still there: restore the newest again (over our own restore: --force)
    result = cli_run("snapshots", "restore", "1", "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert workspace_files(ws) == tree_files(side, side.head() or "")


def test_restore_refuses_a_workspace_with_uncommitted_changes(world, cli_run):
    ws, _ = world
    (ws / "src" / "app.py").write_text("my unsaved work\n")
    before = tree_digest(ws)
    result = cli_run("snapshots", "restore", "5", "--yes")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"Error: {ws}: the workspace's git repository has 1 uncommitted change (git status); "
        "nothing restored. Commit or stash them first, or pass --force to restore anyway")
    assert tree_digest(ws) == before
    result = cli_run("snapshots", "restore", "5", "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert (ws / "src" / "app.py").read_text() == "def main():\n    return 1\n"


def test_dry_run_lists_and_changes_nothing(world, cli_run):
    ws, side = world
    before, head, index = tree_digest(ws), side.head(), index_digest(side)
    result = cli_run("snapshots", "restore", "5", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == [
        "  1 to change, 0 to create, 1 to delete (2 unchanged)",
        "  change  src/app.py",
        "  delete  lib/util.py",
        "Dry run: nothing changed."]
    assert tree_digest(ws) == before and side.head() == head and index_digest(side) == index


def test_dry_run_notes_uncommitted_changes_only_without_force(world, cli_run):
    ws, _ = world
    (ws / "src" / "app.py").write_text("my unsaved work\n")
    note = (f"Note: {ws} has 1 uncommitted change(s); a real restore needs --force.")
    result = cli_run("snapshots", "restore", "5", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [note, "Dry run: nothing changed."]
    result = cli_run("snapshots", "restore", "5", "--dry-run", "--force")
    assert result.exit_code == 0, result.output
    assert note not in result.output.splitlines()
    assert result.output.splitlines()[-1] == "Dry run: nothing changed."


def test_restore_asks_first(world, cli_run):
    """Declining (or no answer at all: end of input) cancels, as ledger prune and reset do:
    exit 0, nothing changed."""
    ws, _ = world
    before = tree_digest(ws)
    for answer in ("n\n", ""):
        result = cli_run("snapshots", "restore", "5", input=answer)
        assert result.exit_code == 0, result.output
        assert "Restore these files? [y/N]: " in result.output
        assert result.output.splitlines()[-1] == "Restore cancelled. Nothing changed."
        assert tree_digest(ws) == before


def test_restore_number_out_of_range(world, cli_run):
    result = cli_run("snapshots", "restore", "9")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: no snapshot #9: there are 5 (1 = newest). Run `toolkit snapshots` to list them")


# --------------------------------------------------------------------------- the store

def test_the_files_of_many_diffs_read_at_once_are_those_of_each_diff(world):
    """The store's loader reads every snapshot's files and every turn's in one git process
    (diff-tree --stdin): the same files, statuses and line counts as one diff at a time,
    also for names with a tab, a newline or the look of git's own pair line, a binary file,
    a pair without a difference and a pair from the empty tree."""
    from toolkit.sources import snapshots as snap

    ws, side = world
    trees = [side.git("rev-parse", f"HEAD~{n}^{{tree}}") for n in range(4, -1, -1)]
    (ws / "odd\tname.txt").write_text("a\nb\n")
    (ws / "line\nbreak.md").write_text("x\n")
    (ws / f"{trees[0]} {trees[1]}\nlook-alike").write_text("y\n")
    (ws / "blob.bin").write_bytes(b"\0\1\2")
    side.snapshot("pre-turn:3: odd names")
    (ws / "odd\tname.txt").write_text("a\nc\nd\n")
    (ws / "blob.bin").write_bytes(b"\0\3")
    (ws / "line\nbreak.md").unlink()
    side.snapshot("post-turn:3: odd names")
    trees += [side.git("rev-parse", f"HEAD~{n}^{{tree}}") for n in (1, 0)]
    pairs = [(None, trees[0]), *itertools.pairwise(trees), (trees[2], trees[2]),
             (trees[0], trees[-1]), (None, trees[-1])]
    one_at_a_time = [snap.diff_trees(side.git_dir, old, new) for old, new in pairs]
    assert snap.diff_tree_pairs(side.git_dir, pairs) == one_at_a_time
    assert one_at_a_time[7] == []  # the pair without a difference
    odd = {f.path: (f.status, f.added, f.deleted) for f in one_at_a_time[6]}
    assert odd == {"odd\tname.txt": ("M", 2, 1), "blob.bin": ("M", None, None),
                   "line\nbreak.md": ("D", 0, 1)}
    added = {f.path: f.status for f in one_at_a_time[5]}
    assert added[f"{trees[0]} {trees[1]}\nlook-alike"] == "A" and added["blob.bin"] == "A"
    assert snap.diff_tree_pairs(side.git_dir, []) == []


def _store(ws: Path, home: Path) -> Store:
    cfg = config_mod.resolve(cwd=ws, env={"HOME": str(home)})
    store = Store.open(cfg.db_path, sources=SOURCES)
    store.refresh(cfg, only=["snapshots", "audit", "history"])
    return store


def test_turns_in_the_store_with_audit_activity_in_their_window(world, isolated_env):
    ws, _ = world
    db = make_audit_db(isolated_env / ".nagi" / "ledger.db", samples=False)
    conn = sqlite3.connect(db)
    conn.executemany("INSERT INTO actions (ts, tier, category, description) VALUES (?, 1, 'x', ?)",
                     [("2026-05-04 13:08:00", "during turn 1"),
                      ("2026-05-04 13:10:00", "between turns"),
                      ("2026-05-04 13:11:00", "during turn 2")])
    conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary) VALUES "
                 "('2026-05-04 13:09:40', 't', 'a', 'm', 'at the end of turn 1')")
    conn.commit()
    conn.close()
    with _store(ws, isolated_env) as store:
        rows = store.fetch("SELECT number, turn, snippet, files_changed, lines_added, "
                           "lines_deleted, files, actions, dispatches, tool_snapshots "
                           "FROM snapshot_turns ORDER BY number")[1]
    assert rows == [
        (1, 2, "tidy up", 2, 1, 4, ["docs/notes.md", "src/app.py"], 1, 0, 0),
        (2, 1, "add a helper", 3, 6, 1, ["docs/notes.md", "lib/util.py", "src/app.py"], 1, 1,
         1)]


def test_identities_survive_codesmith_pruning(world, isolated_env):
    ws, side = world
    store = _store(ws, isolated_env)
    cols = "position, label, snap_key, turn_key, CAST(ts AS VARCHAR), files_changed"
    before = store.fetch(f"SELECT {cols} FROM snapshots ORDER BY position")[1]
    files_before = store.fetch("SELECT snap_key, path FROM snapshot_files ORDER BY ALL")[1]
    versions_before = store.fetch("SELECT version_id FROM ledger_versions ORDER BY ALL")[1]
    store.close()
    old_shas = set(side.git("log", "--format=%H").splitlines())
    side.prune_keep_last(4, when=1_778_500_000)  # drops pre-turn:1, rewrites the other four
    assert not old_shas & set(side.git("log", "--format=%H").splitlines())
    store = _store(ws, isolated_env)
    after = store.fetch(f"SELECT {cols} FROM snapshots ORDER BY position")[1]
    # the four survivors: same position, label, key and first-seen time; the tool snapshot
    # whose pre-turn was pruned now starts its turn, so its turn's key is its own
    assert [r[:3] + r[4:] for r in after] == [r[:3] + r[4:] for r in before[:3]] + [
        (*before[3][:3], before[3][4], 3)]  # now the root: .gitignore, README.md, src/app.py
    assert [r[3] for r in after[:2]] == [r[3] for r in before[:2]]
    assert after[3][3] == after[3][2] == "tool:call_A1@" + after[3][2].split("@")[1]
    files_after = store.fetch("SELECT snap_key, path FROM snapshot_files ORDER BY ALL")[1]
    survivors = {r[2] for r in after}
    assert [f for f in files_after if f[0] != after[3][2]] == [
        f for f in files_before if f[0] in survivors and f[0] != after[3][2]]
    git_ts = store.fetch("SELECT DISTINCT CAST(CAST(git_ts AS DATE) AS VARCHAR) FROM snapshots")[1]
    assert git_ts == [("2026-05-11",)]  # the rewritten commits' own times, kept apart
    assert store.fetch("SELECT version_id FROM ledger_versions ORDER BY ALL")[1] == \
        versions_before
    store.close()


def test_restore_turns_a_file_into_a_folder_and_back(world, cli_run):
    ws, side = world
    (ws / "lib" / "util.py").unlink()
    (ws / "lib").rmdir()
    (ws / "lib").write_text("now a file\n")  # lib/ was a folder in the snapshots
    side.snapshot("post-turn:3: lib becomes a file")
    commit_all(ws)
    result = cli_run("snapshots", "restore", "2", "--yes")  # post-turn:2: lib/ is a folder
    assert result.exit_code == 0, result.output
    assert workspace_files(ws) == tree_files(side, side.git("rev-parse", "HEAD~1"))
    result = cli_run("snapshots", "restore", "1", "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert (ws / "lib").read_text() == "now a file\n"


def test_workspace_option_picks_another_workspace(world, cli_run, tmp_path, monkeypatch):
    ws, _ = world
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = cli_run("snapshots", "--workspace", str(ws), "list", "--limit", "1")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        f"Snapshots of {ws} (newest first; `toolkit snapshots restore N` to revert):")
    assert "post-turn:2: tidy up" in result.output.splitlines()[1]


def test_restore_leaves_the_toolkit_state_folder_alone(world, cli_run):
    ws, side = world
    (side.git_dir / "info" / "exclude").write_text("")  # CodeSmith snapshots .toolkit/ too
    (ws / ".toolkit").mkdir(exist_ok=True)
    (ws / ".toolkit" / "keep.txt").write_text("v1\n")
    side.snapshot("pre-turn:3: with state")
    (ws / ".toolkit" / "keep.txt").write_text("v2\n")
    (ws / ".toolkit" / "new.txt").write_text("new\n")
    (ws / "README.md").write_text("# changed\n")
    commit_all(ws)
    result = cli_run("snapshots", "restore", "1", "--yes")
    assert result.exit_code == 0, result.output
    assert ".toolkit" not in result.output
    assert (ws / "README.md").read_text() == "# acme\n"
    assert (ws / ".toolkit" / "keep.txt").read_text() == "v2\n"
    assert (ws / ".toolkit" / "new.txt").exists()


def test_restore_leaves_the_toolkit_outputs_named_in_toolkit_yaml_alone(world, cli_run):
    """A site folder (and its ``.build`` folder) and a store that toolkit.yaml puts in the
    workspace, outside ``.toolkit/`` and not ignored, are the toolkit's outputs, not the
    user's files: restoring a snapshot taken before they existed leaves them as they are."""
    ws, side = world
    (ws / "toolkit.yaml").write_text("site_dir: site\ndb: ledger.duckdb\n")
    commit_all(ws)
    side.snapshot("pre-turn:3: before the site")
    outputs = {"site/index.html": b"<html>my site</html>\n",
               "site.build/docs/index.md": b"# my site\n",
               "ledger.duckdb": b"store\n", "ledger.duckdb.wal": b"wal\n",
               "ledger.duckdb.cache/parse.bin": b"cache\n",
               "handoff-state.json": b"{}\n", "site-build.json": b"{}\n"}
    for rel, data in outputs.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
    (ws / "README.md").write_text("# changed\n")
    side.snapshot("post-turn:3: site built")  # CodeSmith snapshots them with the user's files
    commit_all(ws)
    result = cli_run("snapshots", "restore", "2", "--yes")
    assert result.exit_code == 0, result.output
    assert (ws / "README.md").read_text() == "# acme\n"  # restored: the user's file
    assert {rel: (ws / rel).read_bytes() for rel in outputs} == outputs
    assert result.output.splitlines()[1:3] == [
        "  1 to change, 0 to create, 0 to delete (4 unchanged)", "  change  README.md"]


# --------------------------------------------------------------------------- restore stays inside
# FAULTS G1/G2: nothing outside the workspace is written or deleted; a path git refuses, or one
# below a symlinked folder that stays, is refused and listed; the counts are what was done.

def blob(side: SideRepo, data: bytes) -> str:
    return run(["git", f"--git-dir={side.git_dir}", "hash-object", "-w", "--stdin"], input=data)


def raw_tree(side: SideRepo, entries: list[tuple[str, bytes, str]]) -> str:
    """A tree object exactly as given (mode, name, object id), as ``git mktree`` would write
    it but without its checks (``hash-object --literally``), entries in git's order."""
    def key(e: tuple[str, bytes, str]) -> bytes:
        return e[1] + (b"/" if e[0] == "40000" else b"")

    body = b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(oid)
                    for mode, name, oid in sorted(entries, key=key))
    return run(["git", f"--git-dir={side.git_dir}", "hash-object", "-t", "tree", "--literally",
                "-w", "--stdin"], input=body)


def root_entries(side: SideRepo, sha: str) -> list[tuple[str, bytes, str]]:
    out = subprocess.run(["git", f"--git-dir={side.git_dir}", "ls-tree", "-z", sha],
                         capture_output=True, env=git_env(), check=True).stdout
    entries = []
    for rec in out.split(b"\0"):
        if rec:
            meta, name = rec.split(b"\t", 1)
            mode, _, oid = meta.decode().split()
            entries.append(("40000" if mode == "040000" else mode, name, oid))
    return entries


def crafted_snapshot(side: SideRepo, tree: str, label: str) -> str:
    side.clock += 60
    sha = side.git("commit-tree", tree, "-p", "HEAD", "-m", label, when=side.clock)
    side.git("update-ref", "HEAD", sha)
    return sha


def with_entry(side: SideRepo, name: bytes, content: bytes = b"evil\n",
               inner: bytes | None = b"victim.txt", mode: str = "100644") -> str:
    """The newest snapshot's root tree plus one entry: a file ``name``, or a folder ``name``
    holding the file ``inner``."""
    oid = blob(side, content)
    if inner is not None:
        oid, mode = raw_tree(side, [(mode, inner, oid)]), "40000"
    return raw_tree(side, [*root_entries(side, "HEAD"), (mode, name, oid)])


def refused_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("  refuse  ")]


def test_a_dotdot_entry_in_the_newest_snapshot_deletes_nothing_outside(world, cli_run, tmp_path):
    ws, side = world
    victim = tmp_path / "victim.txt"  # beside the workspace: what ../victim.txt names
    victim.write_text("the user's file\n")
    crafted_snapshot(side, with_entry(side, b".."), "post-turn:3: hostile")
    (ws / "README.md").write_text("# changed\n")
    commit_all(ws)
    result = cli_run("snapshots", "restore", "2", "--yes")  # #2 has no ../victim.txt
    assert result.exit_code == 1, result.output
    assert victim.read_text() == "the user's file\n"
    assert refused_lines(result.output) == [
        "  refuse  ../victim.txt  (git refuses this path: a '..' component)"]
    assert result.output.splitlines()[-2:] == [
        ("Restored snapshot #2: 1 file(s) written, 0 deleted, 0 empty folder(s) removed, "
         "1 refused. The snapshot repo's HEAD is unchanged."),
        ("Error: 1 path of snapshot #2 refused (listed above); the rest was restored. Nothing "
         "outside the workspace was touched; each reason is listed above")]
    assert (ws / "README.md").read_text() == "# acme\n"


BAD_NAMES = [
    (b"..", "a '..' component"),
    (b".", "a '.' component"),
    (b".git", "a '.git' component"),
    (b".GIT", "a '.git' component"),
    (b".Git. ", "a '.git' component"),  # NTFS drops trailing dots and spaces
    (b"GIT~1", "a '.git' component"),  # NTFS short name
    (".g\u200cit".encode(), "a '.git' component"),  # HFS+ ignores U+200C
    (b"sub/x", "a slash inside a name"),
]


@pytest.mark.parametrize("name, why", BAD_NAMES, ids=[repr(n) for n, _ in BAD_NAMES])
def test_a_snapshot_path_git_refuses_is_refused_and_not_counted(world, cli_run, tmp_path,
                                                                 name, why):
    _, side = world
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    digest = tree_digest(tmp_path)
    crafted_snapshot(side, with_entry(side, name, inner=b"victim.txt" if name != b"sub/x"
                                      else None), "post-turn:3: hostile")
    shown = (name.decode().replace("\u200c", "<U+200C>") + ("/victim.txt" if name != b"sub/x"
                                                              else ""))
    expected = [f"  refuse  {shown}  (git refuses this path: {why})"]
    dry = cli_run("snapshots", "restore", "1", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert refused_lines(dry.output) == expected
    result = cli_run("snapshots", "restore", "1", "--yes")
    assert result.exit_code == 1, result.output
    assert refused_lines(result.output) == expected
    assert result.output.splitlines()[-1].startswith(
        "Error: 1 path of snapshot #1 refused (listed above); nothing restored.")
    assert tree_digest(tmp_path) == digest  # nothing written anywhere, inside or out
    assert victim.read_text() == "the user's file\n"


def test_an_absolute_name_is_refused(world, cli_run, tmp_path):
    ws, side = world
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's file\n")
    oid = blob(side, b"evil\n")
    tree = raw_tree(side, [*root_entries(side, "HEAD"), ("100644", os.fsencode(outside), oid)])
    crafted_snapshot(side, tree, "post-turn:3: hostile")
    (ws / "README.md").write_text("# changed\n")
    commit_all(ws)
    result = cli_run("snapshots", "restore", "1", "--yes")
    assert result.exit_code == 1, result.output
    assert refused_lines(result.output) == [
        f"  refuse  {outside}  (git refuses this path: an absolute name)"]
    assert "1 file(s) written, 0 deleted" in result.output  # README.md, not the refused one
    assert outside.read_text() == "the user's file\n"


@pytest.mark.parametrize("entry", [b"100644 ok\0x", b"100644 \0"], ids=["NUL", "empty"])
def test_a_tree_with_a_nul_in_a_name_is_a_one_line_error(world, cli_run, tmp_path, entry):
    _, side = world
    oid = blob(side, b"evil\n")
    body = entry + bytes.fromhex(oid)  # a NUL ends a name: "ok\0x" breaks the tree
    tree = run(["git", f"--git-dir={side.git_dir}", "hash-object", "-t", "tree", "--literally",
                "-w", "--stdin"], input=body)
    crafted_snapshot(side, tree, "post-turn:3: broken")
    before = tree_digest(tmp_path)
    result = cli_run("snapshots", "restore", "1", "--yes")
    assert result.exit_code == 65
    assert result.output.splitlines()[-1].startswith("Error: ")
    assert "git ls-tree failed: fatal: " in result.output.splitlines()[-1]
    assert "Traceback" not in result.output
    assert tree_digest(tmp_path) == before


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace with the user's own files."""
    out = tmp_path / "elsewhere"
    out.mkdir()
    (out / "b.txt").write_text("outside: keep me\n")
    (out / "other.txt").write_text("outside too\n")
    return out


def test_a_folder_that_was_a_symlink_in_the_snapshot_carries_no_delete_outside(
        world, cli_run, outside):
    ws, side = world
    (ws / "shared").symlink_to(outside)  # the target: shared is a link
    side.snapshot("pre-turn:3: shared is a link")
    (ws / "shared").unlink()
    (ws / "shared").mkdir()
    (ws / "shared" / "b.txt").write_text("inside\n")
    side.snapshot("post-turn:3: shared is a folder")  # the newest: shared/b.txt tracked
    (ws / "shared" / "b.txt").unlink()
    (ws / "shared").rmdir()
    (ws / "shared").symlink_to(outside)  # and the user links it again
    commit_all(ws)
    before = tree_digest(outside)
    reason = (f"below the symlink shared -> {outside} (outside the workspace); restore never "
              "deletes through a link")
    dry = cli_run("snapshots", "restore", "2", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert refused_lines(dry.output) == [f"  refuse  shared/b.txt  ({reason})"]
    result = cli_run("snapshots", "restore", "2", "--yes")
    assert result.exit_code == 1, result.output
    assert refused_lines(result.output) == [f"  refuse  shared/b.txt  ({reason})"]
    assert tree_digest(outside) == before
    assert os.readlink(ws / "shared") == str(outside)


@pytest.mark.parametrize("ignored", [True, False], ids=["link kept", "link tracked"])
def test_a_symlinked_workspace_folder_carries_no_write_or_delete_outside(
        world, cli_run, outside, ignored):
    ws, side = world
    (ws / "shared").mkdir()
    (ws / "shared" / "a.txt").write_text("from the snapshot\n")
    side.snapshot("pre-turn:3: shared/a.txt")  # the target: a real folder
    (ws / "shared" / "a.txt").unlink()
    (ws / "shared" / "b.txt").write_text("newer\n")
    side.snapshot("post-turn:3: shared/b.txt")  # the newest: shared/b.txt
    (ws / "shared" / "b.txt").unlink()
    (ws / "shared").rmdir()
    (ws / "shared").symlink_to(outside)  # now shared/ leads outside, holding a b.txt
    if ignored:  # the side repo does not snapshot it, so the restore leaves the link alone
        with open(side.git_dir / "info" / "exclude", "a") as fh:
            fh.write("/shared\n")
    commit_all(ws)
    before = tree_digest(outside)
    result = cli_run("snapshots", "restore", "2", "--yes")
    assert tree_digest(outside) == before  # no b.txt deleted, no a.txt written there
    if ignored:  # the restore keeps the user's link, so both paths are refused
        assert result.exit_code == 1, result.output
        link = f"below the symlink shared -> {outside} (outside the workspace)"
        assert refused_lines(result.output) == [
            f"  refuse  shared/a.txt  ({link}; restore never writes through a link)",
            f"  refuse  shared/b.txt  ({link}; restore never deletes through a link)"]
        assert os.readlink(ws / "shared") == str(outside)
        assert result.output.splitlines()[-1].startswith(
            "Error: 2 paths of snapshot #2 refused (listed above); nothing restored.")
    else:  # the link is a tracked file: deleted itself, then the real folder comes back
        assert result.exit_code == 0, result.output
        assert refused_lines(result.output) == []
        assert "  delete  shared" in result.output.splitlines()
        assert "1 file(s) written, 1 deleted" in result.output
        assert not (ws / "shared").is_symlink()
        assert (ws / "shared" / "a.txt").read_text() == "from the snapshot\n"


def test_a_file_that_is_a_symlink_outside_is_replaced_not_written_through(
        world, cli_run, outside):
    ws, _ = world
    (ws / "README.md").unlink()
    (ws / "README.md").symlink_to(outside / "b.txt")
    commit_all(ws)
    before = tree_digest(outside)
    result = cli_run("snapshots", "restore", "1", "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert "  change  README.md" in result.output.splitlines()
    assert "1 file(s) written, 0 deleted" in result.output
    assert tree_digest(outside) == before
    assert not (ws / "README.md").is_symlink()
    assert (ws / "README.md").read_text() == "# acme\n"


def test_a_symlink_to_a_folder_inside_the_workspace_is_not_deleted_through(world, cli_run):
    ws, side = world
    (ws / "alias").symlink_to("src")
    side.snapshot("pre-turn:3: alias links to src")  # the target: alias is a link
    (ws / "alias").unlink()
    (ws / "alias").mkdir()
    (ws / "alias" / "app.py").write_text("a copy\n")
    side.snapshot("post-turn:3: alias is a folder")  # the newest: alias/app.py tracked
    (ws / "alias" / "app.py").unlink()
    (ws / "alias").rmdir()
    (ws / "alias").symlink_to("src")
    commit_all(ws)
    app = (ws / "src" / "app.py").read_bytes()
    result = cli_run("snapshots", "restore", "2", "--yes")
    assert result.exit_code == 1, result.output
    assert refused_lines(result.output) == [
        (f"  refuse  alias/app.py  (below the symlink alias -> {ws / 'src'} (inside the "
         "workspace); restore never deletes through a link)")]
    assert (ws / "src" / "app.py").read_bytes() == app  # alias/app.py is src/app.py


def test_a_snapshot_with_a_link_and_a_file_below_it_is_refused(world, cli_run, outside):
    ws, side = world
    link = blob(side, os.fsencode(outside))
    x = raw_tree(side, [("100644", b"x", blob(side, b"evil\n"))])
    tree = raw_tree(side, [*root_entries(side, "HEAD"), ("120000", b"door", link),
                           ("40000", b"door", x)])
    crafted_snapshot(side, tree, "post-turn:3: hostile")
    before = tree_digest(outside)
    result = cli_run("snapshots", "restore", "1", "--yes")
    assert result.exit_code == 1, result.output
    assert refused_lines(result.output) == [
        "  refuse  door  (git refuses this path: both a file and a folder in the snapshot)",
        "  refuse  door/x  (git refuses this path: both a file and a folder in the snapshot)"]
    assert tree_digest(outside) == before
    assert not os.path.lexists(ws / "door")


def test_a_link_made_after_planning_cannot_redirect_a_delete(world, outside, isolated_env):
    from toolkit.snapshot_ops import apply_restore, plan_restore

    ws, side = world
    (ws / "data").mkdir()
    (ws / "data" / "b.txt").write_text("inside\n")
    side.snapshot("post-turn:3: data/b.txt")
    commit_all(ws)
    cfg = config_mod.resolve(cwd=ws, env={"HOME": str(isolated_env)})
    plan = plan_restore(cfg, 2)  # the snapshot before: no data/b.txt
    assert plan.delete == ["data/b.txt"] and plan.refused == []
    (ws / "data" / "b.txt").unlink()  # between the plan and the answer to "Restore?"
    (ws / "data").rmdir()
    (ws / "data").symlink_to(outside)
    before = tree_digest(outside)
    result = apply_restore(plan, force=True)
    assert tree_digest(outside) == before
    assert (result.deleted, result.dirs_removed) == (0, [])
    assert result.refused == [("data/b.txt", ("a symlink appeared above it since the plan; "
                                              "restore never deletes through a link"))]
    assert os.readlink(ws / "data") == str(outside)


def test_patch_shows_a_files_escape_codes_on_a_terminal_and_keeps_them_when_piped(world,
                                                                                   cli_run):
    """A turn that wrote escape codes into a file: on a terminal `--patch` shows them as
    <U+001B>, never lets them act; piped, the patch is printed as it is (click, as for every
    command, drops colour codes from output that is not a terminal)."""
    ws, side = world
    side.snapshot("pre-turn:3: colours")
    (ws / "src" / "app.py").write_text("print('\x1b]0;pwned\x07\x1b[2J')\n")
    side.snapshot("post-turn:3: colours")
    shown = run_on_a_terminal(["snapshots", "diff", "--turn", "3", "--patch"], ws)
    assert "\x1b" not in shown and "\x07" not in shown
    assert "print('<U+001B>]0;pwned<U+0007><U+001B>[2J')" in shown
    piped = cli_run("snapshots", "diff", "--turn", "3", "--patch")
    assert piped.exit_code == 0 and "+print('\x1b]0;pwned\x07" in piped.output
    assert "<U+001B>" not in piped.output
