"""A file or folder the toolkit may not read or write (FAULTS.md A33, I18).

A permission denied is not bad data: a source the store reads that may not be read is that
source's problem, said by a warning while the command goes on (as a damaged source is, A28);
a command that needs it ends with exit 1 and one line naming the path to change and the
``chmod`` that changes it. The suite runs as root, where ``chmod`` binds nothing: each case
runs the toolkit through ``run_unprivileged``."""

from __future__ import annotations

from tests._audit_helpers import insert
from tests.conftest import modes, run_unprivileged


def test_an_unreadable_source_is_a_warning_and_the_command_goes_on(project, cli_run):
    """An audit DB that could not be read (mode 000) stopped every command that reads the
    store with a bare "Permission denied" (exit 1), as did a snapshots home the toolkit may
    not enter, while an unreadable slop ledger was a warning; a sessions folder it may not
    list loaded as "0 sessions", unsaid. Each is now its source's problem: a Warning line
    naming it and the chmod that fixes it, and the command answers (exit 0). `audit brief`
    warned for the DB but failed for its folder: it warns for both."""
    assert cli_run("load").exit_code == 0
    insert(project.audit_db, "actions", ts="2026-05-09 10:00:00", tier=0, category="test",
           description="changed since the load")
    sessions = project.vault / "sessions"
    snapshots = project.home / ".codesmith" / "snapshots"
    snapshots.mkdir()
    with modes((project.audit_db, 0), (sessions, 0), (snapshots, 0)):
        status = run_unprivileged("status", cwd=project.root)
    assert status.returncode == 0, status.stderr
    warned = status.stderr.splitlines()
    db = project.audit_db
    assert (f"Warning: audit could not be read ({db}: Permission denied: the file is not "
            f"readable. Make it readable: chmod u+r {db}); showing the last good read of"
            in "\n".join(warned)), status.stderr
    assert any(line.startswith(f"Warning: sessions could not be read ({sessions}: Permission "
                               f"denied: the folder is not readable. Make it readable: chmod "
                               f"u+rx {sessions}); showing the last good read of")
               for line in warned), status.stderr
    assert f"Warning: snapshots could not be read ({snapshots}: Permission denied" in \
        status.stderr
    assert "Sources:" in status.stdout
    # the history, which reads the snapshots too, met the same problem: listed once
    listed = status.stdout.split("Warnings (", 1)[1].splitlines()[1:]
    assert sum(line.startswith(f"  {snapshots}: Permission denied") for line in listed) == 1
    # readable again: the next command reads each source again, and no warning is left
    again = cli_run("status")
    assert again.exit_code == 0, again.output
    assert "Permission denied" not in again.output and "Warning" not in again.stderr

    nagi = project.audit_db.parent
    with modes((nagi, 0)):
        brief = run_unprivileged("audit", "brief", cwd=project.root)
    assert brief.returncode == 0, brief.stderr
    assert (f"Warning: the audit DB's sections are left out: {nagi}: Permission denied: the "
            f"folder cannot be entered (to reach ledger.db). Make it readable: chmod u+rx "
            f"{nagi}") in brief.stderr.splitlines()


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
    for name, changed, args in (
            ("yaml", [(toolkit_yaml, 0)], ("status",)),
            ("store", [(store, 0o444)], ("status",)),
            ("store folder", [(store.parent, 0o555)], ("query", "SELECT 1")),
            ("slop folder", [(slop_dir, 0o555)],
             ("slop", "append", "--title", "x", "--bucket", "suspected_dead_code",
              "--severity", "low", "--confidence", "low", "--description", "d"))):
        with modes(*changed):
            runs[name] = run_unprivileged(*args, cwd=project.root)
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
