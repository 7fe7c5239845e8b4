"""FAULTS.md I: one error boundary. Every path option and setting, given a path that cannot
work, ends as one `Error:` line with a documented exit code, never a traceback or a hang.

Rows: each path option (and its toolkit.yaml key and environment variable). Columns: a
missing parent folder, a file where a folder belongs, a folder where a file belongs,
``/dev/null/x``, a FIFO, a symlink loop and an unreadable file. Cells run in-process (click's
CliRunner) except where a child process is the point. ``status``, ``load`` and ``query`` on a
FIFO run in a child forked from the test's process (the toolkit already imported), so that a
hang is a timeout, not a stuck suite. Unreadable cells run in such a child too: the suite runs
as root, which ignores mode bits, so the child drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
before it runs the command, and the kernel then refuses the mode-000 file to it as to anyone.
The first cell of each (cell kind, exit code) of those commands runs through the real
``toolkit`` console script, which must end as the in-process run did, so the entry point meets
every kind of bad path and every exit code.
"""
from __future__ import annotations

import ctypes
import functools
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests._store_helpers import give_store
from toolkit.cli import cli

EXIT_CODES = {0, 1, 2, 65, 75}  # documented in the README and toolkit/errors.py
TOOLKIT = shutil.which("toolkit", path=str(Path(sys.executable).parent))
CLICK_USAGE_LINES = ("Usage: ", "Try '")

FILE_OPTIONS = ("--db", "--slop", "--audit-db", "--audit-json", "--config")
FOLDER_OPTIONS = ("--vault", "--snapshots-home")
CELLS = ("missing-parent", "file-for-folder", "folder-for-file", "dev-null", "fifo",
         "symlink-loop", "unreadable")

# (yaml key, environment variable) of each path option
SETTINGS = {"--db": ("db", "TOOLKIT_DB"), "--vault": ("vault", "SMITH_VAULT"),
            "--slop": ("slop", "CODESMITH_SLOP_LEDGER"),
            "--audit-db": ("audit_db", "NAGI_LEDGER_DB"),
            "--audit-json": ("audit_json", "NAGI_LEDGER_EXPORT"),
            "--snapshots-home": ("snapshots_home", "CODESMITH_SNAPSHOTS")}

# the in-process commands each option meets
IN_PROCESS = {
    "--db": [["schema"], ["audit", "stats"], ["ledger", "list"], ["slop", "query"],
             ["snapshots", "list"]],
    "--vault": [["ledger", "list"], ["ledger", "prune", "--dry-run"]],
    "--slop": [["slop", "query"], ["slop", "append", "--title", "x", "--bucket",
                                   "suspected_dead_code"]],
    "--audit-db": [["audit", "stats"], ["audit", "log-action", "did x", "--tier", "0",
                                        "--category", "test"]],
    "--audit-json": [["audit", "stats"]],
    "--snapshots-home": [["snapshots", "list"]],
    "--config": [["schema"], ["audit", "stats"]],
}
SUBPROCESS_COMMANDS = (["status"], ["load"], ["query", "SELECT 1"])
CHILD_CELLS = ("fifo", "unreadable")  # may block on open / need dropped capabilities
# (cell, exit code) of SUBPROCESS_COMMANDS run through the console script so far in this
# process (under --dist loadscope the whole module; a worker that gets only some of its tests
# still runs each class it meets once)
CONSOLE_CLASSES: set[tuple[str, int]] = set()


def bad_path(root: Path, cell: str, want_folder: bool) -> Path:
    """A path of kind ``cell`` under ``root`` for an option that wants a folder or a file."""
    root.mkdir(parents=True, exist_ok=True)
    a_file = root / "a-file.txt"
    a_file.write_text("not a folder\n", encoding="utf-8")
    if cell == "missing-parent":
        return root / "no" / "such" / "folder" / "x.json"
    if cell == "file-for-folder":
        return a_file if want_folder else a_file / "x.json"
    if cell == "folder-for-file":
        folder = root / "a-folder"
        folder.mkdir(exist_ok=True)
        return folder / "sub" if want_folder else folder
    if cell == "dev-null":
        return Path("/dev/null/x")
    if cell == "fifo":
        fifo = root / "a-fifo"
        if not fifo.exists():
            os.mkfifo(fifo)
        return fifo
    if cell == "symlink-loop":
        (root / "loop-a").unlink(missing_ok=True)
        (root / "loop-b").unlink(missing_ok=True)
        (root / "loop-a").symlink_to(root / "loop-b")
        (root / "loop-b").symlink_to(root / "loop-a")
        return root / "loop-a"
    assert cell == "unreadable"
    target = root / ("locked-folder" if want_folder else "locked.json")
    if want_folder:
        target.mkdir(exist_ok=True)
        (target / "ledger").mkdir(exist_ok=True)
    else:
        target.write_text("{}\n", encoding="utf-8")
    target.chmod(0)
    return target


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_root_read_override() -> None:
    """In a forked child: root without the capabilities that skip mode bits (capset(2), on
    this process's one thread; threads it starts later inherit the reduced sets)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    keep = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[0], field, getattr(data[0], field) & keep)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


@functools.cache
def _can_drop_capabilities() -> bool:
    if os.geteuid() != 0:
        return True  # mode bits already apply
    pid = os.fork()
    if pid == 0:
        try:
            _drop_root_read_override()
            code = 0
        except BaseException:
            code = 1
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def check_outcome(code: int, stdout: str, stderr: str, shown: str) -> None:
    """One documented exit code, no traceback; on failure one `Error:` line, last."""
    assert "Traceback" not in stdout + stderr, stderr
    assert code in EXIT_CODES, (code, stderr)
    if code == 0:
        # a source is optional: one that is not there (or cannot be read, for status) is
        # reported under its name, and the command still answers from the others
        assert shown not in stderr or "Warning" in stderr, stderr
        return
    lines = stderr.splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    others = [line for line in lines[:-1] if line.strip()]
    assert all(line.startswith(CLICK_USAGE_LINES) for line in others), stderr


@pytest.fixture
def fresh_world(tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project (a toolkit.yaml makes the folder one) with HOME isolated; its store
    is made by the first command that opens it."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "toolkit.yaml").write_text("", encoding="utf-8")
    monkeypatch.chdir(project)
    return project


@pytest.fixture
def world(fresh_world: Path, empty_store: Path) -> Path:
    """``fresh_world`` whose store a command already made (a copy of ``empty_store``: every
    cell after the first of a test meets one; the console-script test starts from none)."""
    give_store(fresh_world, empty_store)
    return fresh_world


def _run_subprocess(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """``toolkit ARGS`` through the installed console script."""
    assert TOOLKIT is not None, "the toolkit console script is installed with the package"
    proc = subprocess.run([TOOLKIT, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _start_forked(args: list[str], drop: bool) -> tuple[int, int]:
    """``toolkit ARGS`` run in-process (as ``_run_in_process``) in a child forked from this
    process, in its current folder, with the capabilities that skip mode bits dropped first
    when ``drop``: (pid, the pipe its outcome comes back on; ``_wait_forked`` reads it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer on the pipe, then leave without pytest's exit handlers
        code = 0
        try:
            os.close(read)
            if drop:
                _drop_root_read_override()
            result = CliRunner().invoke(cli, args, catch_exceptions=True)
            err = result.stderr
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                assert result.exc_info is not None
                err += "".join(traceback.format_exception(*result.exc_info))  # "Traceback..."
            with os.fdopen(write, "wb") as fh:
                fh.write(pickle.dumps((result.exit_code, result.stdout, err)))
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _wait_forked(pid: int, fd: int, timeout: float = 120) -> tuple[int, str, str]:
    """The outcome of a ``_start_forked`` child; one that has not answered within ``timeout``
    seconds (a hang) is killed and fails the test."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"no answer within {timeout:.0f} s: it hangs")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
        status = os.waitpid(pid, 0)[1]
    assert chunks, f"the child ended without an answer ({status})"
    outcome: tuple[int, str, str] = pickle.loads(b"".join(chunks))
    return outcome


def _run_forked(args: list[str], drop: bool) -> tuple[int, str, str]:
    return _wait_forked(*_start_forked(args, drop))


def _run_cells(jobs: list[tuple[str, Callable[[], tuple[int, str, str]], str]]) -> None:
    failures = []
    for name, job, shown in jobs:
        code, out, err = job()
        try:
            check_outcome(code, out, err, shown)
        except AssertionError as exc:
            failures.append(f"{name}: exit {code}\n{err or out}\n{exc}")
    assert not failures, "\n\n".join(failures)


def _run_in_process(args: list[str], env: dict[str, str] | None = None, name: str = ""
                    ) -> tuple[int, str, str]:
    """``toolkit ARGS`` through click's CliRunner; a traceback fails the test here."""
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{name or ' '.join(args)}: traceback") from result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("option", [*FILE_OPTIONS, *FOLDER_OPTIONS])
def test_every_bad_path_through_the_console_script(fresh_world, tmp_path, option):
    env = {**os.environ, "HOME": os.environ["HOME"]}
    drop_ok = _can_drop_capabilities()
    jobs = []
    in_process = []
    for cell in CELLS:
        if cell == "unreadable" and not drop_ok:
            continue
        path = bad_path(tmp_path / "bad" / cell, cell, option in FOLDER_OPTIONS)
        for command in SUBPROCESS_COMMANDS:
            args = [option, str(path), *command]
            name = f"{option} {cell} {' '.join(command)}"
            if cell in CHILD_CELLS:  # started now, all at once; their answers are read below
                child = _start_forked(args, drop=cell == "unreadable" and os.geteuid() == 0)
                jobs.append((name, lambda child=child: _wait_forked(*child), str(path)))
            else:
                outcome = _run_in_process(args)
                jobs.append((name, lambda outcome=outcome: outcome, str(path)))
                in_process.append((name, cell, args, outcome[0]))
    _run_cells(jobs)
    # the console script meets each kind of bad path with each exit code it ends in, and ends
    # as the in-process run did
    for name, cell, args, code in in_process:
        if (cell, code) in CONSOLE_CLASSES:
            continue
        CONSOLE_CLASSES.add((cell, code))
        child = _run_subprocess(args, env, fresh_world)
        check_outcome(*child, args[1])
        assert child[0] == code, f"{name}: exit {child[0]} from the console script, " \
                                 f"{code} in-process\n{child[2]}"
    if not drop_ok:
        pytest.skip("the unreadable cell needs capset(2) to drop root's read override")


@pytest.mark.parametrize("option", [*FILE_OPTIONS, *FOLDER_OPTIONS])
def test_every_bad_path_in_the_other_commands(world, tmp_path, option):
    jobs = []
    for cell in CELLS:
        if cell == "unreadable":
            continue  # run by the console-script test above (it needs a child process)
        path = bad_path(tmp_path / "bad" / cell, cell, option in FOLDER_OPTIONS)
        for command in IN_PROCESS[option]:
            outcome = _run_in_process([option, str(path), *command])
            jobs.append((f"{option} {cell} {' '.join(command)}", lambda o=outcome: o,
                         str(path)))
    _run_cells(jobs)


@pytest.mark.parametrize("option", list(SETTINGS))
@pytest.mark.parametrize("how", ["toolkit.yaml", "environment"])
def test_every_bad_path_setting(world, tmp_path, option, how):
    key, var = SETTINGS[option]
    jobs = []
    for cell in CELLS:
        if cell == "unreadable":
            continue
        path = bad_path(tmp_path / "bad" / cell, cell, option in FOLDER_OPTIONS)
        env = None
        if how == "toolkit.yaml":
            (world / "toolkit.yaml").write_text(f"{key}: '{path}'\n", encoding="utf-8")
        else:
            (world / "toolkit.yaml").write_text("", encoding="utf-8")
            env = {var: str(path)}
        for command in (["status"], ["load"], *IN_PROCESS[option]):
            name = f"{how} {key} {cell} {' '.join(command)}"
            outcome = _run_in_process(command, env, name)
            jobs.append((name, lambda o=outcome: o, str(path)))
    _run_cells(jobs)


@pytest.mark.parametrize("command", [["export"], ["build-site"]])
@pytest.mark.parametrize("cell", [c for c in CELLS if c not in ("folder-for-file",
                                                                 "missing-parent")])
def test_every_bad_out_folder(world, tmp_path, cell, command):
    path = bad_path(tmp_path / "bad" / cell, cell, want_folder=True)
    if cell == "unreadable":
        code, out, err = _run_forked([*command, "--out", str(path / "x")],
                                     drop=os.geteuid() == 0)
    else:
        code, out, err = _run_in_process([*command, "--out", str(path)])
    assert code != 0
    check_outcome(code, out, err, str(path))


@pytest.mark.parametrize("command", [["ledger", "export"], ["slop", "export"], ["handoff"]])
@pytest.mark.parametrize("cell", [c for c in CELLS if c not in ("fifo", "missing-parent")])
def test_every_bad_output_file(world, tmp_path, cell, command):
    """--output FILE of the exports (a FIFO there is written through, so it is not a failure:
    tests/test_output_files.py; a missing parent folder is refused and named)."""
    path = bad_path(tmp_path / "bad" / cell, cell, want_folder=False)
    if cell == "unreadable":  # a file in a folder the toolkit may not enter
        folder = tmp_path / "bad" / "locked-out"
        folder.mkdir()
        folder.chmod(0)
        code, out, err = _run_forked([*command, "--output", str(folder / "x.md")],
                                     drop=os.geteuid() == 0)
    else:
        code, out, err = _run_in_process([*command, "--output", str(path)])
    assert code != 0, out
    check_outcome(code, out, err, str(path))


# --------------------------------------------------------------------------- not UTF-8
# b"caf\xe9" (Latin-1 bytes in a file name or an argument) as Python hands them on
NOT_UTF8 = os.fsdecode(b"caf\xe9")


def test_a_path_that_is_not_utf8_is_refused_before_anything_is_written(world, tmp_path):
    """A path option given bytes that are not UTF-8 is a usage error naming the option, and
    nothing is written: the store (DuckDB), the site (MkDocs' settings) and the exports name
    their paths as UTF-8 text, and these commands used to fail half-way (a build folder, a
    Parquet staging folder, a whole ledger export written, then the error)."""
    out = tmp_path / "out"
    out.mkdir()
    path = str(out / NOT_UTF8)
    jobs = []
    for args in (["export", "--out", path], ["build-site", "--out", path],
                 ["fleet", "build-site", "--out", path], ["ledger", "export", "--output", path],
                 ["slop", "export", "--output", path], ["handoff", "--output", path],
                 ["--db", path, "status"], ["--vault", path, "ledger", "list"]):
        code, stdout, stderr = _run_in_process(args)
        assert code == 2 and "is not a UTF-8 path" in stderr, (args, stderr)
        assert "caf<U+DCE9>" in stderr  # shown, not written out as a raw byte
        jobs.append((" ".join(args), lambda o=(code, stdout, stderr): o, path))
    _run_cells(jobs)
    assert list(out.iterdir()) == []


def test_text_that_is_not_utf8_given_to_the_store_is_a_usage_error(world, tmp_path):
    """Bytes that are not UTF-8 in a query or in a value the store is asked about (a task, a
    project name) are refused as any writer refuses them: exit 2, one line, no traceback
    (the query's was a TypeError's traceback, the others "the store failed", exit 1), and an
    export so refused writes nothing."""
    lake = tmp_path / "lake"
    assert _run_in_process(["audit", "log-action", "did x", "--tier", "0",
                            "--category", "test"])[0] == 0  # an audit DB to ask
    jobs = []
    for args in (["query", f"SELECT 1 -- {NOT_UTF8}"], ["audit", "task-status", NOT_UTF8],
                 ["export", "--out", str(lake), "--project-name", NOT_UTF8]):
        code, stdout, stderr = _run_in_process(args)
        assert code == 2 and "lone surrogate (\\udce9)" in stderr, (args, stderr)
        jobs.append((args[0], lambda o=(code, stdout, stderr): o, ""))
    _run_cells(jobs)
    assert not lake.exists()


def test_a_project_in_a_folder_whose_name_is_not_utf8_is_told_where_its_store_can_go(
        tmp_path, isolated_env, monkeypatch):
    """DuckDB cannot open a store whose path is not UTF-8 (it raised std::bad_cast, a
    traceback): the error names the store and says to rename the folders (another --db is no
    way out: the store records the project's source paths, which are not UTF-8 either), and
    no store folder is made. The ledger, which needs no store, still reads there."""
    project = tmp_path / NOT_UTF8 / "proj"
    (project / ".smith" / "vault" / "ledger").mkdir(parents=True)
    (project / ".smith" / "vault" / "ledger" / "patterns.md").write_text(
        "# Patterns\n\n## Grep first\n- **Confidence**: high\n", encoding="utf-8")
    monkeypatch.chdir(project)
    code, stdout, stderr = _run_in_process(["status"])
    check_outcome(code, stdout, stderr, "")
    assert code == 2 and "ledger.duckdb: is not a UTF-8 path" in stderr
    assert "Rename the folders on the way to a UTF-8 name" in stderr
    assert not (project / ".toolkit").exists()
    listed = _run_in_process(["ledger", "list"])
    assert listed[0] == 0 and "Grep first" in listed[1], listed
