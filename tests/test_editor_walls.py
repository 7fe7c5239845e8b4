"""The editor's rules cannot be walked around (issue 11, item 6; FAULTS A8/I4, A14/G3).

* a ledger file over ``max_file_mb`` is never read as empty: every ledger command names the
  file and the limit (exit 65);
* a ledger file without read permission is never counted as empty: a write that recounts the
  ledger refuses, naming it, and a promote says the entry may be in it;
* a ``ledger/`` folder (or the vault, ``.smith``, ``.backups``, ``archive``) that is a symlink
  to a folder outside is refused like a symlinked file, and nothing outside is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import FixtureProject, modes, run_unprivileged, tree_digest

BIG_LIMIT_ENV = {"TOOLKIT_MAX_FILE_MB": "1"}

# Every command that reads or edits the ledger (the dashboard is `toolkit ledger`).
LEDGER_COMMANDS = [
    ("ledger",),
    ("ledger", "list"),
    ("ledger", "list", "--file", "antipatterns"),
    ("ledger", "show", "route table"),
    ("ledger", "search", "migration"),
    ("ledger", "prune", "--auto"),
    ("ledger", "prune", "--dry-run"),
    ("ledger", "promote", "route table"),
    ("ledger", "demote", "route table"),
    ("ledger", "export"),
    ("ledger", "reset", "--yes"),
    ("ledger", "reconcile"),
    ("ledger", "reconcile", "--force"),
    ("ledger", "reconcile", "--status"),
]


def _grow(path: Path, size: int = 1_200_000) -> None:
    """Push a ledger file over a 1 MB limit with one long line at its end."""
    path.write_bytes(path.read_bytes() + b"\n" + b"x" * size + b"\n")


@pytest.mark.parametrize("args", LEDGER_COMMANDS, ids=" ".join)
def test_i4_a_file_over_the_limit_is_named_never_read_as_empty(
        project: FixtureProject, cli_run, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    big = project.ledger / "patterns.md"
    _grow(big)
    before = tree_digest(project.root)
    r = cli_run("--today", "2026-09-01", *args, env=BIG_LIMIT_ENV)
    assert r.exit_code == 65, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1 and str(big) in lines[0] and "over the 1 MB limit" in lines[0] \
        and "TOOLKIT_MAX_FILE_MB" in lines[0], r.output
    assert "No entries" not in r.output and "Traceback" not in r.output
    assert tree_digest(project.root) == before


def test_i4_the_limit_from_toolkit_yaml_counts_too(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    big = project.ledger / "antipatterns.md"
    _grow(big)
    (project.root / "toolkit.yaml").write_text("max_file_mb: 1\n")
    r = cli_run("ledger", "promote", "route table")
    assert r.exit_code == 65
    assert f"{big}: file is 1.1 MB, over the 1 MB limit" in r.stderr
    # raising the limit reads the file: the command works again
    (project.root / "toolkit.yaml").write_text("max_file_mb: 5\n")
    r = cli_run("ledger", "list", "--file", "antipatterns")
    assert r.exit_code == 0 and "No entries match" not in r.output
    assert "Editing an applied migration in place" in r.output


def test_i4_the_loader_keeps_loading_and_warns(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    """`toolkit load`/`status` read every source: the big file is a warning there (shown by
    status and the site), the other files load."""
    big = project.ledger / "patterns.md"
    _grow(big)
    r = cli_run("status", env=BIG_LIMIT_ENV)
    assert r.exit_code == 0
    assert "over the 1 MB limit" in r.output and "patterns.md" in r.output


# --------------------------------------------------------------------------- G3: symlinked folders


def _outside_ledger(project: FixtureProject, tmp_path: Path) -> Path:
    """Move ledger/ out of the vault and leave a symlink to it in its place."""
    outside = tmp_path / "elsewhere" / "ledger"
    outside.parent.mkdir()
    project.ledger.rename(outside)
    project.ledger.symlink_to(outside, target_is_directory=True)
    return outside


MUTATIONS = [
    ("ledger", "promote", "route table"),
    ("ledger", "demote", "route table"),
    ("ledger", "prune", "--auto"),
    ("ledger", "prune", "--dry-run"),
    ("ledger", "reset", "--yes"),
    ("ledger", "reconcile", "--force"),
]


@pytest.mark.parametrize("args", MUTATIONS, ids=" ".join)
def test_g3_ledger_folder_linked_outside_the_vault_is_refused(
        project: FixtureProject, cli_run, tmp_path: Path, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    outside = _outside_ledger(project, tmp_path)
    before = tree_digest(outside.parent)
    r = cli_run("--today", "2026-09-01", *args)
    assert r.exit_code == 1, r.output
    [err] = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert err.startswith(f"Error: {project.ledger}: is a symlink to {outside}, outside the "
                          "vault"), err
    assert tree_digest(outside.parent) == before  # no edit, no .backups, no archive out there
    assert "Traceback" not in r.output


@pytest.mark.parametrize("link", [".smith", ".smith/vault"])
def test_g3_vault_linked_outside_the_project_is_refused(
        project: FixtureProject, cli_run, tmp_path: Path, link: str) -> None:  # type: ignore[no-untyped-def]
    folder = project.root / link
    outside = tmp_path / "elsewhere" / Path(link).name
    outside.parent.mkdir()
    folder.rename(outside)
    folder.symlink_to(outside, target_is_directory=True)
    before = tree_digest(outside)
    for args in (("ledger", "promote", "route table"), ("ledger", "reset", "--yes"),
                 ("ledger", "reconcile", "--force")):
        r = cli_run(*args)
        assert r.exit_code == 1
        assert f"Error: {folder}: is a symlink to {outside}, outside the project folder" \
            in r.stderr
    assert tree_digest(outside) == before


@pytest.mark.parametrize("name,args", [(".backups", ("ledger", "promote", "route table")),
                                       (".backups", ("ledger", "reconcile", "--force")),
                                       ("archive", ("ledger", "reset", "--yes"))])
def test_g3_backups_or_archive_linked_outside_is_refused(
        project: FixtureProject, cli_run, tmp_path: Path, name: str,
        args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    folder = project.ledger / name
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    if folder.exists():
        folder.rename(outside)
    else:
        outside.mkdir()
    folder.symlink_to(outside, target_is_directory=True)
    before_out, before_in = tree_digest(outside), tree_digest(project.root)
    r = cli_run(*args)
    assert r.exit_code == 1
    assert f"Error: {folder}: is a symlink to {outside}, outside the vault" in r.stderr
    assert tree_digest(outside) == before_out
    assert tree_digest(project.root) == before_in


@pytest.mark.parametrize("name", ["meta.yaml", ".meta.json", "reconcile-log.md"])
@pytest.mark.parametrize("args", [("ledger", "promote", "route table"),
                                  ("ledger", "reconcile", "--force")], ids=" ".join)
def test_g3_a_meta_or_log_file_linked_outside_the_vault_is_refused(
        project: FixtureProject, cli_run, tmp_path: Path, name: str,
        args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    # only the five ledger files had the link rule (A14): meta.yaml, .meta.json and
    # reconcile-log.md linked to a file outside were rewritten through the link
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    link = project.ledger / name
    if link.exists():
        link.rename(outside)
    else:
        outside.write_text("# Reconcile Log\n")
    link.symlink_to(outside)
    before_out, before_in = outside.read_bytes(), tree_digest(project.root)
    r = cli_run(*args)
    assert r.exit_code == 1, r.output
    assert r.stderr.splitlines()[-1] == (
        f"Error: {link}: is a symlink to {outside}, outside the vault ({project.vault}); "
        "refusing to edit the ledger through it. Replace the link with the file itself; "
        "nothing was written")
    assert outside.read_bytes() == before_out
    assert tree_digest(project.root) == before_in


def test_g3_a_link_that_stays_inside_the_vault_is_followed(
        project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    real = project.vault / "ledger-real"
    project.ledger.rename(real)
    project.ledger.symlink_to("ledger-real", target_is_directory=True)
    r = cli_run("ledger", "promote", "route table")
    assert r.exit_code == 0, r.output
    assert project.ledger.is_symlink()
    assert any((real / ".backups").iterdir())


def test_i4_reconcile_backs_up_with_the_projects_limit(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    """A limit raised in toolkit.yaml holds for reconcile's backup as for its reads: a ledger
    file over the 20 MB default is backed up, not refused half-way through the run."""
    big = project.ledger / "patterns.md"
    _grow(big, 21 * 1024 * 1024)
    before = big.read_bytes()
    (project.root / "toolkit.yaml").write_text("max_file_mb: 30\n")
    r = cli_run("--today", "2026-09-01", "ledger", "reconcile", "--force")
    assert r.exit_code == 0, r.output
    [backup] = (project.vault / "ledger" / ".backups").glob("reconcile-*")
    assert (backup / "patterns.md").read_bytes() == before


def test_a_ledger_file_that_cannot_be_read_is_never_counted_as_empty(
        project: FixtureProject) -> None:
    """``chmod 000 patterns.md``: prune and reconcile would recount meta.yaml and .meta.json
    from the other files, so they refuse before writing anything, naming the file; a promote
    of an entry that may be in it says so; a promote elsewhere moves the recorded counts by
    what it changed (never a recount without the file)."""
    unreadable = project.ledger / "patterns.md"
    meta = project.ledger / "meta.yaml"
    before = tree_digest(project.ledger)
    # (the file is not read while it may not be: as a user, not root, this process could not)
    others = {k: v for k, v in before.items() if k != unreadable.name}
    with modes((unreadable, 0)):
        for args, doing in ((("--today", "2026-09-01", "ledger", "prune", "--auto"), "prune"),
                            (("ledger", "reconcile", "--force"), "reconcile")):
            r = run_unprivileged(*args, cwd=project.root)
            assert (r.returncode, r.stdout) == (1, ""), r.stderr
            assert r.stderr == (
                f"Error: {unreadable}: cannot {doing}: cannot read: Permission denied; the "
                "ledger's counts (meta.yaml, .meta.json) cannot be recomputed without its "
                f"entries. Make it readable: chmod u+r {unreadable}, then run the "
                f"{doing} again; nothing was changed\n")
            assert tree_digest(project.ledger, skip=unreadable) == others
        # a reconcile that is not due writes nothing: it says so, as before, not refused
        r = run_unprivileged("ledger", "reconcile", cwd=project.root)
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        assert "No reconciliation needed" in r.stdout, r.stdout
        assert tree_digest(project.ledger, skip=unreadable) == others
        r = run_unprivileged("ledger", "promote", "Run the migration dry-run", cwd=project.root)
        assert r.returncode == 1
        assert r.stderr == (f'Error: {unreadable}: no entry matching "Run the migration '
                                   'dry-run" in the ledger files that could be read; this one '
                                   "could not be read and may hold it: cannot read: "
                                   f"Permission denied. Make it readable: chmod u+r "
                                   f"{unreadable} and run the command again\n"), r.stderr
        assert tree_digest(project.ledger, skip=unreadable) == others
        r = run_unprivileged("ledger", "promote", "Editing an applied migration in place",
                             cwd=project.root)
        assert r.returncode == 0, r.stderr
    assert tree_digest(project.ledger)[unreadable.name] == before[unreadable.name]
    # low 2 -> 1, medium 2 -> 3; the entry counts and .meta.json's total stay as recorded
    assert meta.read_text().endswith("confidence_distribution:\n  high: 0\n  medium: 3\n"
                                     "  low: 1\n")
    assert '"total_patterns": 4' in (project.ledger / ".meta.json").read_text()
    # meta.yaml unreadable: reconcile fails after its lock (logged), in one line with the file
    # and what to do, not Python's "[Errno 13] Permission denied: '...'"
    with modes((meta, 0)):
        r = run_unprivileged("ledger", "reconcile", "--force", cwd=project.root)
    assert r.returncode == 1
    assert r.stderr == (f"Error: reconcile failed: {meta}: Permission denied: the file is not "
                        f"readable. Make it readable: chmod u+r {meta}, then run the reconcile "
                        "again; the failure is logged in reconcile-log.md\n")


@pytest.mark.parametrize("what", ["folder", "link to nothing"])
def test_a_folder_or_a_link_to_nothing_in_a_ledger_files_place_is_named_by_every_edit(
        project: FixtureProject, cli_run, what: str) -> None:  # type: ignore[no-untyped-def]
    """The same refusal, in process: a folder in a ledger file's place is no empty file, and
    nor is a link to a file that is not there (prune took it for a missing file, and
    reconcile, refusing it, said to chmod it)."""
    target = project.ledger / "patterns.md"
    target.unlink()
    if what == "folder":
        target.mkdir()
        why = "is a folder, not a file"
    else:
        target.symlink_to("gone.md")
        why = "is a link to a file that does not exist"
    before = tree_digest(project.ledger)

    def as_it_was() -> bool:  # the files' bytes, and the folder or link itself
        return tree_digest(project.ledger) == before and (
            target.is_dir() if what == "folder" else os.readlink(target) == "gone.md")

    for args, doing in ((("--today", "2026-09-01", "ledger", "prune", "--auto"), "prune"),
                        (("ledger", "reconcile", "--force"), "reconcile")):
        r = cli_run(*args)
        assert (r.exit_code, r.stdout) == (1, ""), r.output
        assert r.stderr == (
            f"Error: {target}: cannot {doing}: {why}; the ledger's counts "
            "(meta.yaml, .meta.json) cannot be recomputed without its entries. Move it away, "
            f"put the ledger file back (from .backups/ or git), then run the {doing} again; "
            "nothing was changed\n")
    assert as_it_was()
    # a promote of an entry the folder's place may hold: what to do is the same (it said
    # "Make it readable: chmod u+r" of the folder), and why, in the same words (a link to
    # nothing was "cannot read: No such file or directory" here and in the reset's refusal)
    r = cli_run("ledger", "promote", "Run the migration dry-run")
    assert (r.exit_code, r.stdout) == (1, ""), r.output
    assert r.stderr == (
        f'Error: {target}: no entry matching "Run the migration dry-run" in the ledger files '
        f"that could be read; this one could not be read and may hold it: {why}. Move it "
        "away, put the ledger file back (from .backups/ or git) and run the command again\n")
    r = cli_run("ledger", "reset", "--yes")
    assert (r.exit_code, r.stdout) == (1, ""), r.output
    assert r.stderr == (f"Error: {target}: cannot archive: {why}. Restore the file or move it "
                        "away, then run the reset again; nothing was changed\n")
    assert as_it_was()
    # an entry of another file is promoted; the file is named as skipped, with why
    r = cli_run("ledger", "promote", "Redis client drops")
    assert r.exit_code == 0, r.output
    assert f"note: skipped: {target}: {why}\n" in r.stderr
