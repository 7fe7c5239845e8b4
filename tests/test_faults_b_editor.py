"""FAULTS.md B1-B9: concurrency, crashes and disk faults of the ledger editor, with real second
processes (``python -m toolkit ...``) stopped or killed at the editor's pause points. The
uninterrupted reference runs and the dry runs, where no second process is involved, run
in-process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import FixtureProject, modes, reap, run_unprivileged, tree_digest

TODAY = "2026-09-01"  # every fixture entry is then a prune candidate
LEDGER_NAMES = ("patterns.md", "antipatterns.md", "tool-preferences.md", "edge-cases.md",
                "project-quirks.md", "meta.yaml", ".meta.json")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TOOLKIT_EDITOR_PAUSE", None)
    env.update(extra)
    return env


def _start(args: list[str], cwd: Path, today: str = TODAY, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "toolkit", "--today", today, *args],
                            cwd=cwd, env=_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _run(args: list[str], cwd: Path, today: str = TODAY,
         **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolkit", "--today", today, *args], cwd=cwd,
                          env=_env(**env), capture_output=True, text=True, timeout=60)


def _run_here(args: list[str], cwd: Path, today: str = TODAY
              ) -> subprocess.CompletedProcess[str]:
    """``_run`` in this process (click's CliRunner), where no other process is involved."""
    from toolkit.cli import cli

    with contextlib.chdir(cwd):
        result = CliRunner().invoke(cli, ["--today", today, *args], catch_exceptions=False)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _wait_marker(proc: subprocess.Popen[str], point: str) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if line.startswith(f"TOOLKIT_EDITOR_PAUSE {point}"):
            return
    raise AssertionError(f"no pause marker {point}; exit {proc.poll()}")


def _ledger_bytes(ledger: Path) -> dict[str, bytes]:
    return {n: (ledger / n).read_bytes() for n in LEDGER_NAMES if (ledger / n).exists()}


def _temps(ledger: Path) -> list[Path]:
    return sorted(ledger.glob(".*toolkit-tmp-*"))


def _error_line(stderr: str) -> str:
    return [line for line in stderr.splitlines() if line.startswith("Error:")][-1]


# --------------------------------------------------------------------------- B1


def test_b1_read_only_vault_is_refused_before_anything_is_touched(
        project: FixtureProject, immutable) -> None:  # type: ignore[no-untyped-def]
    before = tree_digest(project.root)
    immutable(project.ledger)
    r = _run(["ledger", "promote", "route table"], project.root)
    assert r.returncode == 1, r.stderr
    assert _error_line(r.stderr) == (f"Error: {project.ledger}: folder is not writable; nothing "
                                     f"written. Make it writable: chmod u+w {project.ledger}")
    assert tree_digest(project.root) == before


@pytest.mark.parametrize("where,kind,args,code,says", [
    # the writers opened what they read or replace without asking what it was: a FIFO made
    # the open wait for a writer that never came (prune had replaced the ledger files when it
    # hung on the session pointer); a folder at meta.yaml was "2 hard links"
    ("vault/.current-session", "fifo", ["ledger", "prune", "--yes"], 0, "Pruned:"),
    ("ledger/meta.yaml", "fifo", ["ledger", "reset", "--yes"], 65,
     "meta.yaml: is not a regular file (a FIFO, socket or device). Move it away"),
    ("ledger/meta.yaml", "folder", ["ledger", "reset", "--yes"], 65,
     "meta.yaml: is a folder, not a file. Move it away"),
    ("ledger/meta.yaml", "fifo", ["ledger", "promote", "route table"], 0,
     "note: meta.yaml is not a regular file; entry counts were not recorded"),
    # (said as a ledger file that is a link to nothing is: it was "a broken link" here)
    ("ledger/meta.yaml", "link to nothing", ["ledger", "promote", "route table"], 0,
     "note: meta.yaml is a link to a file that does not exist; entry counts were not "
     "recorded"),
    ("ledger/meta.yaml", "link loop", ["ledger", "promote", "route table"], 0,
     "note: meta.yaml is a symbolic link loop; entry counts were not recorded"),
    ("home/.nagi/goal.json", "fifo", ["audit", "brief"], 0, None),  # as with no goal file
    ("ledger/patterns.md", "folder", ["ledger", "reset", "--yes"], 1,
     "patterns.md: cannot archive: is a folder, not a file. Restore the file or move it away, "
     "then run the reset again; nothing was changed"),
    ("slop", "fifo", ["slop", "update", "4b7e", "--status", "done"], 65,
     "slop_ledger.json: is not a regular file (a FIFO, socket or device)"),
])
def test_a_fifo_folder_or_dangling_link_where_a_file_belongs_is_named_never_waited_on(
        project: FixtureProject, where: str, kind: str, args: list[str], code: int,
        says: str | None) -> None:
    place = {"vault": project.vault, "ledger": project.ledger, "home": project.home}
    path = project.slop if where == "slop" else \
        place[where.split("/")[0]].joinpath(*where.split("/")[1:])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "link loop":
        path.symlink_to(path.name)  # (itself)
    else:
        assert kind == "link to nothing"
        path.symlink_to(path.parent / "gone")
    others = {p: p.read_bytes() for p in project.ledger.glob("*.md") if p.is_file()}
    r = _run(args, project.root)  # (a subprocess with a timeout: a wait fails, never hangs)
    assert r.returncode == code, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    if says is None:  # read as no file at all: the same output as without one there
        path.unlink()
        without = _run(args, project.root)
        assert (r.stdout, r.stderr) == (without.stdout, without.stderr)
    else:
        assert says in r.stdout + r.stderr
    if code:  # refused: no ledger file was touched
        assert {p: p.read_bytes() for p in project.ledger.glob("*.md") if p.is_file()} \
            == others
        assert _temps(project.ledger) == []


def test_a_session_log_that_cannot_be_looked_at_never_fails_an_edit_already_written(
        project: FixtureProject) -> None:
    """The session log is looked for after the edit is written: a `sessions/` folder the user
    may not enter (or, as here where root enters every folder, a pointer whose name is too
    long) made `stat` raise there, so promote wrote its change, then said "Error" with exit
    1, and a second run promoted again. Logging never fails a command; reads are not
    stopped by it either."""
    (project.vault / ".current-session").write_text(f".smith/vault/sessions/{'x' * 300}.md\n")
    patterns = project.ledger / "patterns.md"
    before = patterns.read_bytes()
    r = _run_here(["ledger", "promote", "route table"], project.root)
    assert r.returncode == 0, r.stderr
    assert "Promoted" in r.stdout and patterns.read_bytes() != before
    for args in (["ledger", "list"], ["ledger", "show", "route table"]):
        r = _run_here(args, project.root)
        assert r.returncode == 0, (args, r.stderr)


def test_a_backup_or_archive_still_linked_after_a_killed_run_is_made_a_copy(
        project: FixtureProject) -> None:
    """An edit backs its files up, and a reset archives them, as hard links until the files
    are replaced: a run killed between the two leaves a ledger file with 2 links, which every
    later edit refused ("has 2 hard links", use --force). A reset's archive was not healed as
    the backups were: both are now made copies, with a note, and the edit goes on."""
    patterns = project.ledger / "patterns.md"
    old = patterns.read_bytes()
    for root in (".backups/20260101T000000Z", "archive/2026-01-01-000000"):
        (project.ledger / root).mkdir(parents=True)
        os.link(patterns if root.startswith("archive") else project.ledger / "antipatterns.md",
                project.ledger / root / ("patterns.md" if root.startswith("archive")
                                         else "antipatterns.md"))
    r = _run_here(["ledger", "promote", "route table"], project.root)
    assert r.returncode == 0, r.stderr
    for copy in ("archive/2026-01-01-000000/patterns.md",
                 ".backups/20260101T000000Z/antipatterns.md"):
        assert f"{project.ledger / copy} was still linked to " in r.stdout + r.stderr
        assert (project.ledger / copy).stat().st_nlink == 1
    assert (project.ledger / "archive/2026-01-01-000000/patterns.md").read_bytes() == old
    assert patterns.stat().st_nlink == 1 and patterns.read_bytes() != old


def test_b1_unwritable_backup_folder_is_refused_before_anything_is_touched(
        project: FixtureProject) -> None:
    """A file in the backup folder's place, or a backup folder that may not be written, is
    refused before any change, in the words reconcile and every other folder check use (it
    said "backup folder is not writable" of a file, and gave no chmod for a folder)."""
    backups = project.ledger / ".backups"
    shutil.rmtree(backups)
    backups.write_text("a file where the backup folder should be\n")
    before = tree_digest(project.root)
    r = _run(["ledger", "prune", "--yes"], project.root)
    assert r.returncode == 1
    assert _error_line(r.stderr) == (
        f"Error: {backups}: is not a folder, so no backup can be made there; nothing written. "
        "Move it away so the .backups folder can be created")
    assert tree_digest(project.root) == before
    backups.unlink()
    backups.mkdir()
    before = tree_digest(project.root)
    with modes((backups, 0o555)):
        r = run_unprivileged("--today", TODAY, "ledger", "prune", "--yes", cwd=project.root)
    assert r.returncode == 1
    assert _error_line(r.stderr) == (
        f"Error: {backups}: folder is not writable; nothing written. Make it writable: "
        f"chmod u+w {backups}")
    assert tree_digest(project.root) == before


# --------------------------------------------------------------------------- B2


_DISK_FULL = textwrap.dedent("""
    import errno, os, sys
    real_write = os.write
    def write(fd, data):
        if len(data) > 1000:  # patterns.md (not the small meta files): short write, then full
            if getattr(write, "short", False):
                raise OSError(errno.ENOSPC, "No space left on device")
            write.short = True
            return real_write(fd, bytes(data[:100]))
        return real_write(fd, data)
    os.write = write
    from toolkit.cli import cli
    cli(sys.argv[1:], prog_name="toolkit")
""")


def test_b2_disk_full_during_temp_write_keeps_the_original(project: FixtureProject) -> None:
    before = _ledger_bytes(project.ledger)
    r = subprocess.run([sys.executable, "-c", _DISK_FULL, "--today", TODAY, "ledger", "promote",
                        "route table"], cwd=project.root, env=_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert _error_line(r.stderr) == (
        f"Error: {project.ledger / 'patterns.md'}: no space left on device; nothing written. "
        "Free some disk space and run the command again")
    assert _ledger_bytes(project.ledger) == before  # .meta.json's lock field given back too
    assert _temps(project.ledger) == []
    assert [p.name for p in (project.ledger / ".backups").iterdir()] == [
        "reconcile-2026-05-03-221504"]  # the unused backup was removed


# --------------------------------------------------------------------------- B10

# No hard links here (another filesystem), and the disk returns the backup copy's bytes with
# one byte flipped: the copy's SHA-256 check must stop the edit before anything is written.
_NO_LINK_BAD_COPY = textwrap.dedent("""
    import errno, os, sys
    def link(*a, **kw):
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    real_write = os.write
    def write(fd, data):
        if "/.backups/" in os.readlink(f"/proc/self/fd/{fd}") and len(data):
            data = bytes([data[0] ^ 1]) + bytes(data[1:])
        return real_write(fd, data)
    os.link, os.write = link, write
    from toolkit.cli import cli
    cli(sys.argv[1:], prog_name="toolkit")
""")


def test_b10_a_backup_copy_that_does_not_verify_stops_the_edit(project: FixtureProject) -> None:
    before = tree_digest(project.root)
    backups = sorted(p.name for p in (project.ledger / ".backups").iterdir())
    r = subprocess.run([sys.executable, "-c", _NO_LINK_BAD_COPY, "--today", TODAY, "ledger",
                        "promote", "route table"], cwd=project.root, env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    line = _error_line(r.stderr)
    assert line.startswith(f"Error: {project.ledger / '.backups'}/edit-")
    assert line.endswith("backup verification failed: copy differs from the original; nothing "
                         "written")
    assert tree_digest(project.root) == before  # the unverified backup folder is gone too
    assert sorted(p.name for p in (project.ledger / ".backups").iterdir()) == backups


# --------------------------------------------------------------------------- B3, B4


def test_b3_sigkill_after_temp_write_leaves_original_and_next_run_recovers(
        project: FixtureProject) -> None:
    before = _ledger_bytes(project.ledger)
    proc = _start(["ledger", "promote", "route table"], project.root,
                  TOOLKIT_EDITOR_PAUSE="after_temp_write@patterns.md")
    _wait_marker(proc, "after_temp_write@patterns.md")
    proc.send_signal(signal.SIGKILL)
    reap(proc)
    patterns = project.ledger / "patterns.md"
    assert patterns.read_bytes() == before["patterns.md"]  # byte-identical
    assert any(p.name.startswith(".patterns.md.toolkit-tmp-")
               for p in _temps(project.ledger))  # the orphan
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is not None

    # No waiting allowed: the dead run's lock must be taken over at once.
    r = _run(["ledger", "promote", "route table"], project.root, TOOLKIT_LOCK_TIMEOUT="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ('Promoted "Grep the route table before adding a new endpoint" '
                                "from low to medium confidence.")
    assert "left by a run that was killed" in r.stderr
    assert _temps(project.ledger) == []
    assert patterns.stat().st_nlink == 1
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is None
    # the killed run's backup (a hard link then) is now an independent copy of the original
    killed_backup = sorted((project.ledger / ".backups").glob("edit-*"))[0] / "patterns.md"
    assert killed_backup.read_bytes() == before["patterns.md"]


def test_b4_sigkill_after_rename_gives_complete_file_and_rerun_is_noop(
        project: FixtureProject, tmp_path: Path) -> None:
    serial = tmp_path / "serial"
    shutil.copytree(project.root, serial, symlinks=True)
    assert _run_here(["ledger", "prune", "--auto"], serial, today="2026-06-15").returncode == 0
    expected = _ledger_bytes(serial / ".smith" / "vault" / "ledger")
    # On 2026-06-15 the prune removes one low entry from patterns.md and one from
    # antipatterns.md (no demotions: a demoted entry keeps its Date, as in the seed, so it
    # would be a removal candidate at the next prune). Killed right after the last ledger
    # file's rename (meta.yaml and .meta.json not yet renamed):
    proc = _start(["ledger", "prune", "--auto"], project.root, today="2026-06-15",
                  TOOLKIT_EDITOR_PAUSE="after_replace@antipatterns.md")
    _wait_marker(proc, "after_replace@antipatterns.md")
    proc.send_signal(signal.SIGKILL)
    reap(proc)
    patterns = (project.ledger / "patterns.md").read_text()
    assert "Grep the route table" not in patterns and patterns.count("**Title:**") == 1
    assert "**Title:**" not in (project.ledger / "antipatterns.md").read_text()
    # meta.yaml's and .meta.json's new versions were waiting, complete, in temp files
    orphans = {p.name.split(".toolkit-tmp-")[0] for p in _temps(project.ledger)}
    assert orphans <= {".meta.yaml", "..meta.json"}

    # The next run finishes the killed edit from its journal (G4), then has nothing to do.
    r = _run(["ledger", "prune", "--auto"], project.root, today="2026-06-15")
    assert r.returncode == 0, r.stderr
    assert "an interrupted prune (2 of 4 files replaced when it stopped) was completed" \
        in r.stderr
    assert r.stdout.strip() == "No prune candidates found. Ledger is clean."
    assert _temps(project.ledger) == [] and not (project.ledger / ".toolkit-journal.json").exists()
    assert _ledger_bytes(project.ledger) == expected



@pytest.mark.parametrize(("command", "point", "signum"), [
    ("prune", "after_temp_write", signal.SIGINT), ("prune", "after_rename@1", signal.SIGINT),
    ("prune", "after_rename@3", signal.SIGINT), ("reset", "after_rename@1", signal.SIGINT),
    ("reset", "after_rename@3", signal.SIGINT), ("prune", "after_rename@1", signal.SIGTERM),
    ("reset", "after_rename@3", signal.SIGTERM)])
def test_b4_ctrl_c_or_kill_during_a_prune_or_reset_puts_every_file_back_and_frees_the_lock(
        project: FixtureProject, command: str, point: str, signum: int) -> None:
    """Ctrl-C (SIGINT) while a prune or reset writes: "Interrupted.", exit 130, and the vault
    exactly as before -- the ledger files put back, ``.meta.json``'s lock field null again (a
    Smith session is not kept waiting 10 minutes on a run that has ended), no temp file, no
    backup or archive folder of an edit that wrote nothing. ``kill`` (SIGTERM) the same,
    "Terminated.", exit 143: it killed the command on the spot, leaving the journal to put
    the files back on the next run and the lock of a dead run in ``.meta.json``."""
    before = tree_digest(project.vault)
    proc = _start(["ledger", command, "--yes"], project.root, TOOLKIT_EDITOR_PAUSE=point)
    _wait_marker(proc, point)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == ((130, "Interrupted.\n") if signum == signal.SIGINT
                                      else (143, "Terminated.\n"))
    assert tree_digest(project.vault) == before
    r = _run(["ledger", command, "--yes"], project.root)
    assert r.returncode == 0, r.stderr
    assert "taken over" not in r.stderr  # no lock of a killed run left behind


# --------------------------------------------------------------------------- B5


def test_b5_two_prunes_one_waits_then_exits_75_result_equals_one_run(
        project: FixtureProject, tmp_path: Path) -> None:
    serial = tmp_path / "serial"
    shutil.copytree(project.root, serial, symlinks=True)
    r = _run_here(["ledger", "prune", "--auto"], serial)
    assert r.returncode == 0, r.stderr
    expected = _ledger_bytes(serial / ".smith" / "vault" / "ledger")

    release = tmp_path / "go"
    first = _start(["ledger", "prune", "--auto"], project.root,
                   TOOLKIT_EDITOR_PAUSE=f"after_read:{release}")
    _wait_marker(first, "after_read")
    second = _run(["ledger", "prune", "--auto"], project.root, TOOLKIT_LOCK_TIMEOUT="0.5")
    assert second.returncode == 75
    assert _error_line(second.stderr) == (
        f"Error: {project.vault}: the ledger is locked by another run (waited 0.5 s). "
        "Wait for it to finish and try again")
    release.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert out.startswith("Auto-prune complete: 2 removed, 2 demoted.")
    assert _ledger_bytes(project.ledger) == expected


def test_b5_two_prunes_started_together_equal_one_serial_run(
        project: FixtureProject, tmp_path: Path) -> None:
    args = ["ledger", "prune", "--auto"]
    serial = tmp_path / "serial"
    shutil.copytree(project.root, serial, symlinks=True)
    _run_here(args, serial, today="2026-06-15")  # removals only: a second run is a no-op
    expected = _ledger_bytes(serial / ".smith" / "vault" / "ledger")
    procs = [_start(args, project.root, today="2026-06-15") for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 75]), outs
    assert _ledger_bytes(project.ledger) == expected


# --------------------------------------------------------------------------- B6, B7


def test_b6_user_edit_in_place_during_the_write_is_kept(project: FixtureProject,
                                                        tmp_path: Path) -> None:
    release = tmp_path / "go"
    proc = _start(["ledger", "promote", "route table"], project.root,
                  TOOLKIT_EDITOR_PAUSE=f"after_temp_write@patterns.md:{release}")
    _wait_marker(proc, "after_temp_write@patterns.md")
    patterns = project.ledger / "patterns.md"
    with open(patterns, "a", encoding="utf-8") as fh:
        fh.write("\nThe user's own note.\n")
    user_version = patterns.read_bytes()
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert _error_line(err) == (
        f"Error: {patterns}: changed on disk since it was read; nothing written. Run the "
        "command again to work on the current version")
    assert patterns.read_bytes() == user_version
    assert _temps(project.ledger) == []
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is None


def test_b6_save_via_rename_between_read_and_write_is_refused(project: FixtureProject,
                                                              tmp_path: Path) -> None:
    before = tree_digest(project.root)
    release = tmp_path / "go"
    proc = _start(["ledger", "demote", "dry-run"], project.root,
                  TOOLKIT_EDITOR_PAUSE=f"after_read:{release}")
    _wait_marker(proc, "after_read")
    patterns = project.ledger / "patterns.md"
    saved = project.ledger / ".patterns.md.swp"
    saved.write_bytes(patterns.read_bytes())  # same bytes, saved by rename: a new inode
    os.replace(saved, patterns)
    digest_after_save = tree_digest(project.root)
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "changed on disk since it was read; nothing written" in _error_line(err)
    assert tree_digest(project.root) == digest_after_save
    assert {k: v for k, v in before.items() if k != ".smith/vault/ledger/patterns.md"} == \
        {k: v for k, v in digest_after_save.items() if k != ".smith/vault/ledger/patterns.md"}


def _edit_same_size_same_mtime(path: Path, old: bytes, new: bytes) -> bytes:
    """Replace ``old`` by ``new`` (as long) in place -- same inode, same size -- and put the
    mtime back: only the bytes tell the versions apart. Returns the edited bytes."""
    st = path.stat()
    data = path.read_bytes()
    edited = data.replace(old, new, 1)
    assert len(edited) == len(data) and edited != data
    with open(path, "r+b") as fh:
        fh.write(edited)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return edited


def test_b7_same_size_edit_in_the_same_mtime_tick_is_detected(project: FixtureProject,
                                                              tmp_path: Path) -> None:
    release = tmp_path / "go"
    proc = _start(["ledger", "promote", "route table"], project.root,
                  TOOLKIT_EDITOR_PAUSE=f"after_read:{release}")
    _wait_marker(proc, "after_read")
    patterns = project.ledger / "patterns.md"
    edited = _edit_same_size_same_mtime(patterns, b"two index-name collisions",
                                        b"TWO index-name collisions")
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "changed on disk since it was read; nothing written" in _error_line(err)
    assert patterns.read_bytes() == edited


def test_b7_same_size_edit_of_meta_json_while_the_files_are_flushed_is_detected(
        project: FixtureProject, tmp_path: Path) -> None:
    """The seed's lock field is written with the ledger's temp files and checked right before
    its rename: an in-place edit of .meta.json (same size, same mtime) made meanwhile is
    caught, and nothing at all is written."""
    before = _ledger_bytes(project.ledger)
    release = tmp_path / "go"
    proc = _start(["ledger", "promote", "route table"], project.root,
                  TOOLKIT_EDITOR_PAUSE=f"after_temp_write@.meta.json:{release}")
    _wait_marker(proc, "after_temp_write@.meta.json")
    meta = project.ledger / ".meta.json"
    assert (project.ledger / "patterns.md").read_bytes() == before["patterns.md"]
    edited = _edit_same_size_same_mtime(meta, b'"lock": null', b'"lock": NULL')
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert _error_line(err).startswith(f"Error: {meta}: changed on disk since it was read; "
                                       "nothing written")
    assert _ledger_bytes(project.ledger) == {**before, ".meta.json": edited}
    assert _temps(project.ledger) == []
    assert not (project.ledger / ".toolkit-journal.json").exists()


def test_the_seed_lock_is_in_place_before_the_first_ledger_file_is_renamed(
        project: FixtureProject, tmp_path: Path) -> None:
    """The lock field's temp file is flushed with the others; it is renamed before the journal
    and before any ledger file, and the commit's last write gives it back. It is stamped with
    the run's time (SOURCE_DATE_EPOCH here), not moved to `--today`: other sessions read it
    by their clock."""
    before = _ledger_bytes(project.ledger)
    release = tmp_path / "go"
    proc = _start(["ledger", "promote", "route table"], project.root,
                  TOOLKIT_EDITOR_PAUSE=f"after_journal:{release}",
                  SOURCE_DATE_EPOCH="2026-09-05T12:00:00")
    _wait_marker(proc, "after_journal")
    lock = json.loads((project.ledger / ".meta.json").read_text())["lock"]
    assert lock is not None and lock["acquired"] == "2026-09-05T12:00:00Z"
    assert {n: b for n, b in _ledger_bytes(project.ledger).items() if n != ".meta.json"} == \
        {n: b for n, b in before.items() if n != ".meta.json"}
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is None
    assert _ledger_bytes(project.ledger)["patterns.md"] != before["patterns.md"]


# --------------------------------------------------------------------------- B8


def _set_lock(project: FixtureProject, acquired: str) -> None:
    path = project.ledger / ".meta.json"
    data = json.loads(path.read_text())
    data["lock"] = {"pid": "c3f1a9e2-5b7d-4e11-9a0c-2d8e6f4b1a77", "acquired": acquired}
    path.write_text(json.dumps(data, indent=2) + "\n")


def test_b8_stale_meta_json_lock_is_taken_over_with_a_note(project: FixtureProject) -> None:
    _set_lock(project, "2026-09-01T11:40:00Z")
    r = _run(["ledger", "promote", "route table"], project.root,
             TOOLKIT_NOW="2026-09-01T12:00:00Z")
    assert r.returncode == 0, r.stderr
    assert ("note: stale lock taken over: held by c3f1a9e2-5b7d-4e11-9a0c-2d8e6f4b1a77 "
            "(acquired 2026-09-01T11:40:00Z, 20 min ago)") in r.stderr
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is None


def _locked(project: FixtureProject, acquired: str) -> str:
    """The error of a run that meets the fixture's lock, taken at ``acquired`` 2 min ago."""
    return (f"Error: {project.ledger / '.meta.json'}: ledger is locked by another run: "
            f"c3f1a9e2-5b7d-4e11-9a0c-2d8e6f4b1a77 (acquired {acquired}, 2 min ago). "
            "Wait for it to finish (the lock expires after 10 minutes), or use --force if that "
            "run is dead")


def test_b8_fresh_meta_json_lock_waits_then_exits_75_naming_the_holder(
        project: FixtureProject) -> None:
    _set_lock(project, "2026-09-01T11:58:00Z")
    before = tree_digest(project.root)
    r = _run(["ledger", "promote", "route table"], project.root,
             TOOLKIT_NOW="2026-09-01T12:00:00Z", TOOLKIT_LOCK_TIMEOUT="0.3")
    assert r.returncode == 75
    assert _error_line(r.stderr) == _locked(project, "2026-09-01T11:58:00Z")
    assert tree_digest(project.root) == before


def test_b8_the_lock_is_judged_by_the_real_clock_not_the_today_setting(
        project: FixtureProject) -> None:
    """`today` (here `--today 2026-09-01`) moves ages and pruning, not the instant another
    session took the `.meta.json` lock: a lock taken 2 minutes before the run's real time
    (SOURCE_DATE_EPOCH, days after `today`) is fresh and blocks; one taken at 11:58 on the
    `today` day, days before the real time, is stale and taken over."""
    real = {"SOURCE_DATE_EPOCH": "2026-09-05T12:00:00"}
    _set_lock(project, "2026-09-05T11:58:00Z")
    before = tree_digest(project.root)
    r = _run(["ledger", "promote", "route table"], project.root, TOOLKIT_LOCK_TIMEOUT="0.3",
             **real)
    assert r.returncode == 75, r.stdout + r.stderr
    assert _error_line(r.stderr) == _locked(project, "2026-09-05T11:58:00Z")
    assert tree_digest(project.root) == before
    _set_lock(project, "2026-09-01T11:58:00Z")
    r = _run(["ledger", "promote", "route table"], project.root, TOOLKIT_LOCK_TIMEOUT="0.3",
             **real)
    assert r.returncode == 0, r.stderr
    assert ("note: stale lock taken over: held by c3f1a9e2-5b7d-4e11-9a0c-2d8e6f4b1a77 "
            "(acquired 2026-09-01T11:58:00Z, 5762 min ago)") in r.stderr
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is None



@pytest.mark.parametrize(("pid", "acquired", "note"), [
    ("toolkit-editor@{host}:99999999999999999999", "2026-09-01T11:58:00Z",
     "lock left by a run that was killed (toolkit-editor@{host}:99999999999999999999 "
     "(acquired 2026-09-01T11:58:00Z, 2 min ago)) taken over"),
    ("c3f1a9e2", "0001-01-01T00:00:00+01:00",
     "stale lock taken over: held by c3f1a9e2 (acquired 0001-01-01T00:00:00+01:00)"),
    ("c3f1a9e2", "9999-12-31T23:59:59-01:00",
     "stale lock taken over: held by c3f1a9e2 (acquired 9999-12-31T23:59:59-01:00)"),
], ids=["pid-past-any-process", "time-before-year-1-in-utc", "time-past-year-9999-in-utc"])
def test_b8_a_lock_whose_pid_or_time_cannot_be_real_is_stale_not_a_usage_error(
        project: FixtureProject, pid: str, acquired: str, note: str) -> None:
    """A garbage ``.meta.json`` lock (a process id no process can have, a time that is out of
    range once moved to UTC) holds nobody: taken over with a note, as a lock with an unreadable
    time is; never "Error: a number is too large" (exit 2) for every ledger edit."""
    import socket

    host = socket.gethostname()
    path = project.ledger / ".meta.json"
    data = json.loads(path.read_text())
    data["lock"] = {"pid": pid.format(host=host), "acquired": acquired}
    path.write_text(json.dumps(data, indent=2) + "\n")
    for args in (["ledger", "reconcile", "--status"], ["ledger", "promote", "route table"]):
        r = _run(args, project.root, TOOLKIT_NOW="2026-09-01T12:00:00Z")
        assert r.returncode == 0, r.stderr
    assert f"note: {note.format(host=host)}" in r.stderr
    assert json.loads(path.read_text())["lock"] is None


# --------------------------------------------------------------------------- B9


@pytest.mark.parametrize("args", [
    ["ledger", "prune", "--dry-run"],
    ["ledger", "promote", "route table", "--dry-run"],
    ["ledger", "demote", "dry-run", "--dry-run"],
    ["ledger", "reset", "--dry-run"],
])
def test_b9_dry_run_prints_a_diff_and_leaves_the_vault_identical(
        project: FixtureProject, args: list[str]) -> None:
    session = project.vault / "sessions" / "jane-doe_86e0b9_2026-05-04_141502.md"
    (project.vault / ".current-session").write_text(f"{session}\n")  # logging is on
    before = tree_digest(project.root)
    r = _run_here(args, project.root)
    assert r.returncode == 0, r.stderr
    assert "--- a/" in r.stdout and "+++ b/" in r.stdout and "\n@@ -" in r.stdout
    assert "Dry run: nothing written." in r.stdout
    assert tree_digest(project.root) == before
    assert _temps(project.ledger) == []
