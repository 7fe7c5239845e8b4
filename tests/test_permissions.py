"""A file or folder the toolkit may not read or write (FAULTS.md I18).

A permission denied is not bad data, nor a store to delete: a command that needs the file
ends with exit 1 and one line naming the path to change and the ``chmod`` that changes it.
The suite runs as root, where ``chmod`` binds nothing: each case runs the toolkit through
``run_unprivileged``."""

from __future__ import annotations

from pathlib import Path

from tests._audit_helpers import insert
from tests.conftest import run_unprivileged


def _modes(*pairs: tuple[Path, int]) -> list[tuple[Path, int]]:
    """Set each path's mode; the (path, old mode) pairs to put back."""
    old = [(p, p.stat().st_mode & 0o7777) for p, _ in pairs]
    for p, mode in pairs:
        p.chmod(mode)
    return old


def _back(old: list[tuple[Path, int]]) -> None:
    for p, mode in reversed(old):
        p.chmod(mode)


def test_a_permission_denied_is_exit_1_naming_what_to_chmod(project, cli_run):
    """Permission errors said "Permission denied" with no what-to-do, in four exit codes and
    three wordings: toolkit.yaml 000 was exit 65 (bad data); a read-only store was exit 65
    with the advice to delete it; a read-only .toolkit folder gave DuckDB's text about the
    .wal; a read-only slop folder was told to make a .backups folder writable that did not
    exist. Each is now exit 1 and names the path to change and the chmod that changes it;
    nothing is written."""
    assert cli_run("load").exit_code == 0
    toolkit_yaml = project.root / "toolkit.yaml"
    toolkit_yaml.write_text("", encoding="utf-8")
    store = project.root / ".toolkit" / "ledger.duckdb"
    slop_dir = project.slop.parent
    slop_bytes = project.slop.read_bytes()
    insert(project.audit_db, "actions", ts="2026-05-09 10:00:00", tier=0, category="test",
           description="a change for the query's refresh to write")
    runs = {}
    for name, modes, args in (
            ("yaml", [(toolkit_yaml, 0)], ("status",)),
            ("store", [(store, 0o444)], ("status",)),
            ("store folder", [(store.parent, 0o555)], ("query", "SELECT 1")),
            ("slop folder", [(slop_dir, 0o555)],
             ("slop", "append", "--title", "x", "--bucket", "suspected_dead_code",
              "--severity", "low", "--confidence", "low", "--description", "d"))):
        old = _modes(*modes)
        try:
            runs[name] = run_unprivileged(*args, cwd=project.root)
        finally:
            _back(old)
    for name, run in runs.items():
        assert run.returncode == 1, (name, run.stderr)
        assert len(run.stderr.splitlines()) == 1, (name, run.stderr)
    assert runs["yaml"].stderr == (f"Error: {toolkit_yaml}: Permission denied: the file is not "
                                   f"readable. Make it readable: chmod u+r {toolkit_yaml}\n")
    assert runs["store"].stderr == (f"Error: {store}: Permission denied: the file is not "
                                    f"writable. Make it writable: chmod u+w {store}\n")
    assert runs["store folder"].stderr == (
        f"Error: {store.parent}: Permission denied: the folder is not writable (to write "
        f"ledger.duckdb.wal). Make it writable: chmod u+w {store.parent}\n")
    assert runs["slop folder"].stderr.startswith(
        f"Error: {slop_dir}: cannot create the backup folder: Permission denied: the folder "
        "is not writable (to write .backups/")
    assert runs["slop folder"].stderr.endswith(
        f"); nothing written. Make it writable: chmod u+w {slop_dir}\n")
    assert project.slop.read_bytes() == slop_bytes
