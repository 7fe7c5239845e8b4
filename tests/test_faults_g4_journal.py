"""FAULTS G4: a multi-file edit is all-or-nothing across a crash.

A real ``python -m toolkit`` child is SIGKILLed at every point of a journaled set of renames
(``after_journal``: none renamed; ``after_rename@<n>``: n renamed; a reset's ``after_archive``:
its archive made once the journal is written, none renamed). Right after the kill the
ledger is half-applied; the next command that opens the vault (a reader or an editor) finishes
or undoes the edit from the journal, says which on stderr, and the files are then all-new or
all-old as a set. The killed child is forked from the test's process (the toolkit already
imported, as in tests/test_error_matrix.py): a process of its own, killed as one, without the
start-up of a new interpreter. The next command runs in the test's process (the CLI
in-process), except where another live process is the point (a journal whose run still holds
the lock).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import FixtureProject, kill_at_pause, tree_digest

NOW = "2026-06-15T12:00:00Z"
NAMES = ("patterns.md", "antipatterns.md", "tool-preferences.md", "edge-cases.md",
         "project-quirks.md", "meta.yaml", ".meta.json")
JOURNAL = ".toolkit-journal.json"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TOOLKIT_EDITOR_PAUSE", None)
    env["TOOLKIT_NOW"] = NOW
    env.update(extra)
    return env


@dataclass
class Ran:
    """What a command did: its exit code and its two outputs."""

    returncode: int
    stdout: str
    stderr: str


def _run(args: list[str], cwd: Path) -> Ran:
    """The next command, run in this process (as ``toolkit`` in ``cwd``): only the edit that
    is killed needs a process of its own; the recovery reads and writes files like any run."""
    from toolkit.cli import cli

    with contextlib.chdir(cwd):
        result = CliRunner().invoke(cli, ["--today", NOW[:10], *args],
                                    env={"TOOLKIT_NOW": NOW, "TOOLKIT_EDITOR_PAUSE": None},
                                    catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def _run_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The next command as a process of its own (where another live process matters)."""
    return subprocess.run([sys.executable, "-m", "toolkit", "--today", NOW[:10], *args],
                          cwd=cwd, env=_env(), capture_output=True, text=True, timeout=60,
                          check=False)


class _Forked:
    """``toolkit ARGS`` in a child forked from this process, in ``cwd`` with ``env``: its
    stderr is readable as ``stderr``, its output goes nowhere; as much of ``subprocess.Popen``
    as ``kill_at_pause`` uses."""

    stdin = stdout = None  # (no pipes but its stderr)

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the CLI as the console script runs it, then leave at once
            code = 70
            try:
                os.close(read)
                os.dup2(write, 2)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                os.environ.clear()
                os.environ.update(env)
                os.chdir(cwd)
                from toolkit.cli import cli

                try:
                    cli(args, prog_name="toolkit")
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
            finally:
                os._exit(code)
        os.close(write)
        self.pid = pid
        self.returncode: int | None = None
        self.stderr = open(read, encoding="utf-8")  # noqa: SIM115 - closed by kill_at_pause

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _kill_at(args: list[str], cwd: Path, point: str) -> None:
    """Start the command, wait for it to reach ``point``, SIGKILL it there."""
    child = _Forked(["--today", NOW[:10], *args], cwd, _env(TOOLKIT_EDITOR_PAUSE=point))
    kill_at_pause(child, point)  # type: ignore[arg-type]


def _state(ledger: Path) -> dict[str, bytes | None]:
    return {n: (ledger / n).read_bytes() if (ledger / n).exists() else None for n in NAMES}


def _without_lock(state: dict[str, bytes | None]) -> dict[str, object]:
    """The set with .meta.json's lock field left out: a run killed before its first rename
    leaves its (dead) lock there, which the next editor run takes over (FAULTS B3/B8)."""
    out: dict[str, object] = dict(state)
    raw = state[".meta.json"]
    if raw is not None:
        data = json.loads(raw)
        data.pop("lock", None)
        out[".meta.json"] = data
    return out


def _temps(ledger: Path) -> list[str]:
    return sorted(p.name for p in ledger.iterdir() if ".toolkit-tmp-" in p.name)


# The uninterrupted runs already made: (args, every file of the project as it was) -> the
# ledger they left. Each test starts from the same fixture project, so the reference run is
# made once per input, not once per test (it already ran on a copy in another folder).
_SERIAL: dict[tuple[tuple[str, ...], tuple[tuple[str, object], ...]], dict[str, bytes | None]] = {}


def _before_and_after(project: FixtureProject, tmp_path: Path,
                      args: list[str]) -> tuple[dict[str, bytes | None], dict[str, bytes | None]]:
    """The ledger as it is, and as one uninterrupted run of ``args`` leaves it (on a copy)."""
    key = (tuple(args), tuple(sorted(tree_digest(project.root).items())))
    if key not in _SERIAL:
        serial = tmp_path / "serial"
        shutil.copytree(project.root, serial, symlinks=True)
        r = _run(args, serial)
        assert r.returncode == 0, r.stderr
        _SERIAL[key] = _state(serial / ".smith" / "vault" / "ledger")
    return _state(project.ledger), dict(_SERIAL[key])


def _note(stderr: str) -> str:
    [line] = [ln for ln in stderr.splitlines() if ln.startswith("note:") and "interrupted" in ln]
    return line


# prune on 2026-06-15: one entry removed from patterns.md and one from antipatterns.md, so the
# set is patterns.md, antipatterns.md, meta.yaml, .meta.json (4 renames).
PRUNE = ["ledger", "prune", "--auto"]
PRUNE_POINTS = ["after_journal", "after_rename@1", "after_rename@2", "after_rename@3",
                "after_rename@4"]


@pytest.mark.parametrize("point", PRUNE_POINTS)
@pytest.mark.parametrize("reader", [["ledger", "list"], ["ledger"], ["status"],
                                    ["ledger", "prune", "--auto"]], ids=" ".join)
def test_g4_killed_prune_is_completed_or_rolled_back_by_the_next_command(
        project: FixtureProject, tmp_path: Path, point: str, reader: list[str]) -> None:
    old, new = _before_and_after(project, tmp_path, PRUNE)
    _kill_at(PRUNE, project.root, point)
    renamed = 0 if point == "after_journal" else int(point.split("@")[1])
    killed = _state(project.ledger)
    assert (project.ledger / JOURNAL).exists()
    if 0 < renamed < 4:  # really half-applied: some files new, some old
        assert killed != new and _without_lock(killed) != _without_lock(old)

    r = _run(reader, project.root)
    assert r.returncode == 0, r.stderr
    note = _note(r.stderr)
    after = _state(project.ledger)
    if renamed == 0:
        assert note == (f"note: {project.ledger}: an interrupted prune (0 of 4 files replaced "
                        "when it stopped) was rolled back from its journal; the files are as "
                        "before it")
        if reader[1:] == ["prune", "--auto"]:  # rolled back, then pruned for real
            assert after == new
        else:
            assert _without_lock(after) == _without_lock(old)
    else:
        assert note == (f"note: {project.ledger}: an interrupted prune ({renamed} of 4 files "
                        "replaced when it stopped) was completed from its journal")
        assert after == new
    assert not (project.ledger / JOURNAL).exists()
    assert _temps(project.ledger) == []
    # the next command has nothing left to say
    again = _run(["ledger", "list"], project.root)
    assert "interrupted" not in again.stderr


def test_g4_the_reader_warnings_name_the_recovery(project: FixtureProject, tmp_path: Path) -> None:
    _, new = _before_and_after(project, tmp_path, PRUNE)
    _kill_at(PRUNE, project.root, "after_rename@2")
    r = _run(["ledger", "--json"], project.root)
    assert r.returncode == 0, r.stderr
    warnings = json.loads(r.stdout)["warnings"]
    assert any("an interrupted prune (2 of 4 files replaced when it stopped) was completed"
               in w for w in warnings)
    assert _state(project.ledger) == new
    assert _temps(project.ledger) == []


def _assert_prune_rolled_back_after_one_rename(project: FixtureProject,
                                               old: dict[str, bytes | None]) -> None:
    """The next command rolls a prune killed after its first rename back, and says so."""
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 0, r.stderr
    assert _note(r.stderr).endswith("an interrupted prune (1 of 4 files replaced when it "
                                    "stopped) was rolled back from its journal; the files are "
                                    "as before it")
    assert _without_lock(_state(project.ledger)) == _without_lock(old)
    assert not (project.ledger / JOURNAL).exists()
    assert _temps(project.ledger) == []  # the killed run's temp files went with its journal


def test_g4_lost_temp_files_roll_the_edit_back(project: FixtureProject, tmp_path: Path) -> None:
    old, _ = _before_and_after(project, tmp_path, PRUNE)
    _kill_at(PRUNE, project.root, "after_rename@1")
    for name in _temps(project.ledger):  # the rest of the edit cannot be finished
        (project.ledger / name).unlink()
    _assert_prune_rolled_back_after_one_rename(project, old)


def test_g4_a_file_edited_since_the_kill_stops_the_recovery(project: FixtureProject) -> None:
    _kill_at(PRUNE, project.root, "after_rename@1")
    edited = project.ledger / "antipatterns.md"
    edited.write_bytes(edited.read_bytes() + b"\nmy own note\n")
    mine = edited.read_bytes()
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 1
    assert r.stderr == (f"Error: {edited}: an interrupted edit cannot be finished or undone: "
                        "this file changed since. Compare the files with the backups it names, "
                        f"then delete {JOURNAL}; nothing was changed\n")
    assert edited.read_bytes() == mine and (project.ledger / JOURNAL).exists()


# reset: meta.yaml, the five files, .meta.json (7 renames); the archive and the backup of
# .meta.json are removed on undo.
RESET = ["ledger", "reset", "--yes"]


@pytest.mark.parametrize("point", ["after_archive", "after_journal", "after_rename@1",
                                   "after_rename@3", "after_rename@6", "after_rename@7"])
def test_g4_killed_reset_is_completed_or_rolled_back(project: FixtureProject, tmp_path: Path,
                                                     point: str) -> None:
    old, new = _before_and_after(project, tmp_path, RESET)
    archive = project.ledger / "archive" / "2026-06-15-120000"
    _kill_at(RESET, project.root, point)
    renamed = int(point.split("@")[1]) if "@" in point else 0
    assert archive.is_dir() and (project.ledger / JOURNAL).exists()
    # the folder of the backup of .meta.json as it was before the reset's lock
    [json_backup] = (project.ledger / ".backups").glob("reset-*")
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 0, r.stderr
    note = _note(r.stderr)
    if renamed == 0:
        assert note.endswith("an interrupted reset (0 of 7 files replaced when it stopped) was "
                             "rolled back from its journal; the files are as before it")
        assert _without_lock(_state(project.ledger)) == _without_lock(old)
        # no trace of a reset that never happened: no archive, no backup of it
        assert not archive.exists() and not json_backup.exists()
    else:
        assert note.endswith(f"an interrupted reset ({renamed} of 7 files replaced when it "
                             "stopped) was completed from its journal")
        assert _state(project.ledger) == new
        assert {p.name: p.read_bytes() for p in archive.iterdir()} == {
            n: b for n, b in old.items() if b is not None and n != ".meta.json"}
    assert not (project.ledger / JOURNAL).exists() and _temps(project.ledger) == []


def test_g4_a_reset_killed_before_its_journal_leaves_no_archive_and_no_backup(
        project: FixtureProject) -> None:
    """Killed after it took the lock and before its journal was written: nothing of the
    reset is left but its (dead) lock, which the next edit takes over; before, the backup of
    .meta.json stayed in .backups/, and an archive made before the journal stayed too."""
    old = _state(project.ledger)
    _kill_at(RESET, project.root, "after_replace@.meta.json")  # the lock field written
    assert not (project.ledger / JOURNAL).exists()
    assert not (project.ledger / "archive" / "2026-06-15-120000").exists()
    assert list((project.ledger / ".backups").glob("reset-*")) == []
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 0 and "interrupted" not in r.stderr, r.stderr
    assert _without_lock(_state(project.ledger)) == _without_lock(old)


@pytest.mark.parametrize("point", ["after_journal", "after_rename@3"])
def test_g4_a_killed_reset_of_a_ledger_missing_a_file_is_completed_or_rolled_back(
        project: FixtureProject, tmp_path: Path, point: str) -> None:
    """A ledger file that is not there, which the reset creates from its template: the
    journal records no old version of it. The recovery took that file, still missing, for
    one "changed since" and refused, keeping the journal: every later command that opened
    the vault failed until the journal was deleted by hand."""
    (project.ledger / "edge-cases.md").unlink()
    old, new = _before_and_after(project, tmp_path, RESET)
    assert old["edge-cases.md"] is None and new["edge-cases.md"] is not None
    _kill_at(RESET, project.root, point)
    assert (project.ledger / JOURNAL).exists()
    assert not (project.ledger / "edge-cases.md").exists()  # (its rename is the 5th)
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 0, r.stderr
    if point == "after_journal":
        assert _note(r.stderr).endswith(
            "an interrupted reset (0 of 7 files replaced when it stopped) was rolled back "
            "from its journal; the files are as before it")
        assert _without_lock(_state(project.ledger)) == _without_lock(old)
    else:
        assert _note(r.stderr).endswith(
            "an interrupted reset (3 of 7 files replaced when it stopped) was completed "
            "from its journal")
        assert _state(project.ledger) == new
    assert not (project.ledger / JOURNAL).exists() and _temps(project.ledger) == []


def test_g4_a_journal_of_a_run_that_holds_the_lock_is_left_to_it(project: FixtureProject) -> None:
    """A reader never finishes an edit whose run is alive (it holds the ledger lock)."""
    from toolkit.safewrite import FileLock

    _kill_at(PRUNE, project.root, "after_rename@1")
    killed = _state(project.ledger)
    with FileLock(project.vault, 0):  # as a live writer would hold it
        r = _run_process(["ledger", "list"], project.root)
        assert r.returncode == 0 and "interrupted" not in r.stderr
        assert _state(project.ledger) == killed and (project.ledger / JOURNAL).exists()
    r = _run(["ledger", "list"], project.root)
    assert "was completed from its journal" in _note(r.stderr)


def test_g4_a_readers_recovery_takes_the_killed_runs_other_temp_files_too(
        project: FixtureProject) -> None:
    """A run killed while it wrote a file the journal does not name (the .meta.json lock
    field, written before the journal's files) leaves that temp file too: the reader that
    rolls the edit back removes it with the journal's, since its writer is dead. Before, it
    stayed (a hidden file in the vault, which a git commit of it takes along) until the next
    edit."""
    _killed_prune_with_a_stray_temp(project)
    r = _run(["ledger", "list"], project.root)
    assert "was rolled back from its journal" in _note(r.stderr)
    assert _temps(project.ledger) == []


def test_g4_an_editors_recovery_names_the_killed_runs_temp_files_it_removes(
        project: FixtureProject) -> None:
    """The editor that finishes or undoes a killed edit removes that run's stray temp files
    as it removes any dead run's: each named in a note (the reader's recovery above removes
    them silently, having no notes to print them in)."""
    stray = _killed_prune_with_a_stray_temp(project)
    r = _run(["ledger", "demote", "migration dry-run"], project.root)
    assert r.returncode == 0, r.stderr
    assert "was rolled back from its journal" in _note(r.stderr)
    assert f"removed {stray.name}, left by a run that was killed" in r.stdout + r.stderr
    assert _temps(project.ledger) == []


def _killed_prune_with_a_stray_temp(project: FixtureProject) -> Path:
    """A prune killed after writing its journal, and the temp file of a write the journal does
    not name (the .meta.json lock field, written before the journal's files) that a run
    killed there leaves too: that file."""
    _kill_at(PRUNE, project.root, "after_journal")
    stray = project.ledger / f"..meta.json.toolkit-tmp-{_gone_pid()}-c8efa081"
    stray.write_text("{}")
    return stray


def _gone_pid() -> int:
    """A pid no process has: one past the kernel's largest (a reaped child's pid could be
    given to a new process of the busy test run before the toolkit looks)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_g4_a_journal_naming_paths_outside_the_vault_is_refused(project: FixtureProject,
                                                                tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    temp = project.ledger / ".patterns.md.toolkit-tmp-1-abcd"
    temp.write_text("evil\n")
    journal = {"toolkit_journal": 1, "operation": "prune", "files": [
        {"target": str(victim), "temp": str(temp), "backup": None, "backup_sha256": None,
         "old_sha256": None, "new_sha256": "0" * 64}]}
    (project.ledger / JOURNAL).write_text(json.dumps(journal))
    r = _run(["ledger", "promote", "route table"], project.root)
    assert r.returncode == 65
    assert r.stderr.startswith(f"Error: {project.ledger / JOURNAL}: the journal names a path "
                               f"outside {project.vault}")
    assert victim.read_text() == "keep me\n" and temp.exists()


def test_g4_a_journal_cut_short_while_written_is_discarded(project: FixtureProject) -> None:
    """The journal is written at its own name and flushed with the temp files, before any
    rename: one cut short (the run killed while writing it) is removed with a note, the files
    are as before, and the next edit runs. A whole journal that does not parse still stops
    every command, as before."""
    old = _state(project.ledger)
    _kill_at(PROMOTE, project.root, "after_journal")
    journal = project.ledger / JOURNAL
    whole = journal.read_bytes()
    journal.write_bytes(whole[:len(whole) // 2])
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 0, r.stderr
    assert _note(r.stderr).endswith("an interrupted edit was stopped while writing its "
                                    "journal, before it replaced any file; its journal was "
                                    "removed and the files are as before it")
    assert not journal.exists()
    assert _without_lock(_state(project.ledger)) == _without_lock(old)
    r = _run(PROMOTE, project.root)
    assert r.returncode == 0, r.stderr
    assert _temps(project.ledger) == []

    _kill_at(PROMOTE, project.root, "after_journal")
    journal.write_bytes(b"[" + journal.read_bytes()[1:])  # whole (it ends as written), broken
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 65
    assert r.stderr.startswith(f"Error: {journal}: the journal of an interrupted edit is "
                               "unreadable")
    assert journal.exists()


def test_g4_a_lock_field_lost_at_a_power_loss_still_counts_as_the_old_version(
        project: FixtureProject) -> None:
    """The seed's lock field is renamed into .meta.json without its own folder fsync before
    the ledger renames: after a power loss .meta.json may be back at the version before the
    lock. Recovery takes either as its old version (and does not refuse)."""
    old = _state(project.ledger)
    _kill_at(PROMOTE, project.root, "after_rename@1")
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is not None
    (project.ledger / ".meta.json").write_bytes(old[".meta.json"] or b"")  # the lock "lost"
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 0, r.stderr
    assert "an interrupted promote (1 of 3 files replaced when it stopped) was completed" \
        in r.stderr
    assert not (project.ledger / JOURNAL).exists()
    assert json.loads((project.ledger / ".meta.json").read_text())["lock"] is None


PROMOTE = ["ledger", "promote", "route table"]


def test_g4_a_small_edit_is_journaled_as_its_edits_and_recognised_by_them(
        project: FixtureProject) -> None:
    """A one-line edit's journal records the edit (offset, old and new bytes) and the old
    version's digest, not a digest of the new bytes: the file renamed before the kill is
    recognised as the new version by them and the edit is completed. The same file with one
    other byte changed (same size) is neither version: the recovery stops."""
    _kill_at(PROMOTE, project.root, "after_rename@1")
    body = json.loads((project.ledger / JOURNAL).read_text())
    [md] = [f for f in body["files"] if f["target"].endswith(".md")]
    assert "new_sha256" not in md and len(md["new_edits"]["edits"]) == 1
    target = Path(md["target"])
    renamed = target.read_bytes()
    at = md["new_edits"]["edits"][0]["at"]
    flip = 0 if at > 10 else len(renamed) - 2  # a byte away from the edit
    changed = bytearray(renamed)
    changed[flip] = ord("#") if changed[flip] != ord("#") else ord("x")
    target.write_bytes(bytes(changed))
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 1
    assert "an interrupted edit cannot be finished or undone: this file changed since" \
        in r.stderr
    assert target.read_bytes() == bytes(changed) and (project.ledger / JOURNAL).exists()

    target.write_bytes(renamed)  # as the killed run left it: completed
    r = _run(["ledger", "list"], project.root)
    assert r.returncode == 0, r.stderr
    assert "an interrupted promote (1 of 3 files replaced when it stopped) was completed" \
        in r.stderr
    assert target.read_bytes() == renamed and not (project.ledger / JOURNAL).exists()


def test_g4_a_damaged_temp_file_of_an_edit_journaled_as_edits_rolls_back(
        project: FixtureProject, tmp_path: Path) -> None:
    """prune edits two ledger files (each journaled as its edits); killed after the first
    rename, with one byte of the second file's temp file changed, the edit cannot be finished
    and is rolled back from the backups."""
    old, _ = _before_and_after(project, tmp_path, PRUNE)
    _kill_at(PRUNE, project.root, "after_rename@1")
    body = json.loads((project.ledger / JOURNAL).read_text())
    second = body["files"][1]
    assert second["target"].endswith(".md") and "new_edits" in second
    temp = Path(second["temp"])
    data = bytearray(temp.read_bytes())
    data[0] = ord("#") if data[0] != ord("#") else ord("x")
    temp.write_bytes(bytes(data))
    _assert_prune_rolled_back_after_one_rename(project, old)


def test_g4_an_unreadable_journal_is_reported_by_an_incremental_load_and_status(
        project: FixtureProject) -> None:
    """A journal that stops every ledger command stops the ledger's load too, even when the
    ledger files are as the last load read them: ``load`` and ``status`` (and the site's
    warnings, read from the same store) say what ``ledger list`` says, not "unchanged"."""
    r = _run(["load"], project.root)
    assert r.returncode == 0, r.stderr
    journal = project.ledger / JOURNAL
    journal.write_bytes(b"[]")
    listed = _run(["ledger", "list"], project.root)
    assert listed.returncode == 65
    said = listed.stderr.removeprefix(f"Error: {journal}: ").strip()
    assert said.startswith("the journal of an interrupted edit is unreadable")

    r = _run(["load"], project.root)
    assert r.returncode == 65
    assert "ledger     unchanged" not in r.stdout
    assert f"{journal}: {said}" in r.stdout and r.stderr == listed.stderr
    r = _run(["status", "--json"], project.root)
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    ledger = next(s for s in status["sources"] if s["source"] == "ledger")
    assert ledger["note"] == f"error: {journal}: {said}"
    assert {"source": "ledger", "path": str(journal), "line": None,
            "message": said} in status["warnings"]
    assert journal.read_bytes() == b"[]"  # left for the user, as the ledger commands leave it

    journal.unlink()  # the user compared the files and deleted it: the ledger loads again
    r = _run(["load"], project.root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ledger     loaded")
    r = _run(["status", "--json"], project.root)
    assert not any("journal" in w["message"] for w in json.loads(r.stdout)["warnings"])
