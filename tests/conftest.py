"""Shared fixtures: every test builds its world in tmp_path; HOME and env vars are isolated."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pickle
import shutil
import signal
import sqlite3
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from toolkit.loaders import settings as source_settings

# Fixtures defined in helper modules, available to every test module without importing them.
pytest_plugins = ["tests._publish_helpers", "tests._browser_helpers", "tests._store_helpers",
                  "tests._cpu_report"]

REPO = Path(__file__).resolve().parents[1]

# The tests that press Ctrl-C send SIGINT to a child process, as a terminal would. A suite run
# as a shell's background job (`./scripts/test &`, nohup, some CI runners) starts with SIGINT
# ignored, and a child inherits an ignored signal through exec (a handler it does not): each
# test process takes Python's own handler, so its children start as a terminal's would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The source systems' example files, kept inside the repository (a fresh clone has nothing else).
FORMATS = Path(__file__).resolve().parent / "fixtures" / "formats"

# The sources' settings name their own variables (toolkit.loaders.settings); these are the rest.
_ENV_VARS = (*(s.env for s in source_settings() if s.env), "CODESMITH_HOME", "TOOLKIT_DB",
             "TOOLKIT_MAX_FILE_MB", "TOOLKIT_TODAY", "TOOLKIT_SITE_URL", "GH_TOKEN",
             "GITHUB_TOKEN", "SOURCE_DATE_EPOCH", "TOOLKIT_EDITOR_PAUSE", "NAGI_BRIEF_REPOS",
             "TOOLKIT_FLEET", "TOOLKIT_FLEET_DB", "XDG_CACHE_HOME", "TOOLKIT_NOW",
             "TOOLKIT_LOCK_TIMEOUT", "TOOLKIT_SITE_SCOPE", "TOOLKIT_SITE_BUILD",
             "TOOLKIT_RECONCILE_FAULT", "TOOLKIT_LABEL")


# The shell's settings isolate() removes besides the toolkit's own (_ENV_VARS) and the
# GIT_*, LC_* and JUPYTER_* variables.
_SHELL_SETTINGS = frozenset({
    "LANG", "LANGUAGE", "TERM", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "PY_COLORS",
    "CLICOLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "MPLBACKEND",
    "MPLCONFIGDIR", "MATPLOTLIBRC", "IPYTHONDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
    "PYTHONSTARTUP", "PYTHONWARNINGS"})


@pytest.fixture(scope="session")
def _homes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of this process's test HOMEs (its own under xdist)."""
    return tmp_path_factory.mktemp("homes", numbered=False)


@pytest.fixture(scope="session", autouse=True)
def _isolated_session(_homes: Path) -> Iterator[None]:
    """The environment of :func:`isolated_env` (:func:`isolate`, with a HOME of its own) for
    the whole run, set before any other fixture: the worlds, sites and kernels that session
    and module fixtures make, before a test's own ``isolated_env`` is in place, are made as
    the tests' are, not in the shell's environment (with TZ set in the shell, a module's
    kernel printed other times than the committed notebooks)."""
    home = _homes / "session"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, home)
        yield


_HOME_NUMBERS = itertools.count()


@pytest.fixture(autouse=True)
def isolated_env(_homes: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME and no toolkit-related environment variables for every test. The HOME is
    a new empty folder, made with one mkdir (every test pays for it: pytest's ``mktemp``
    also resolves the whole path and traces it, about half a millisecond more)."""
    home = _homes / str(next(_HOME_NUMBERS))
    home.mkdir()
    isolate(monkeypatch, home)
    return home


def isolate(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """``isolated_env``'s environment with ``home`` as HOME (also for a module's fixture)."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TZ", "UTC")
    for var in _ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    # A site build starts no Jupyter kernel unless the test is about the analyses (they opt
    # in with TOOLKIT_ANALYSES=1: tests/test_analyses.py, whose CLI builds report them, and
    # the browser's demo).
    monkeypatch.setenv("TOOLKIT_ANALYSES", "0")
    # No setting of the shell's for git, the terminal, the locale, matplotlib or Jupyter:
    # a git hook that runs the tests (pre-commit, pre-push) sets GIT_DIR, GIT_INDEX_FILE...,
    # and the tests' own git commands acted on the developer's repository; FORCE_COLOR put
    # escape codes in a pytest run's report, MPLBACKEND took the notebooks' kernel off its
    # inline charts, LC_ALL=C made the Spark JVM read the export's non-ASCII folder names as
    # "?". Children get one UTF-8 locale.
    for var in [name for name in os.environ
                if name.startswith(("GIT_", "LC_", "JUPYTER_")) or name in _SHELL_SETTINGS]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.com")


# --------------------------------------------------------------------------- shared, read-only
#
# Worlds that are expensive to build and that tests only read are built once per test run, in
# the run's temp folder: under pytest-xdist the first worker to ask builds it while the others
# wait on a file lock, then every worker reads the same folder (pytest-xdist's documented
# pattern). A test that changes its world builds its own.

T = TypeVar("T")


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test run's temp folder, shared by its xdist workers."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(scope="session", autouse=True)
def child_bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Python processes the tests start (the console script, killed editors, the MCP server,
    pytest runs) keep the bytecode they compile in one folder of the run, so that each one
    does not compile the toolkit from source again (as every start does when the environment
    sets PYTHONDONTWRITEBYTECODE). Nothing is written into the repository. (Without that
    variable, as under scripts/test, they use the __pycache__ folders as usual.)"""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        mp.setenv("PYTHONPYCACHEPREFIX", str(_run_folder(tmp_path_factory) / "pycache"))
        yield


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               make: Callable[[Path], T]) -> T:
    """``make(folder)``, run once per test run for ``name``; every later caller (in any xdist
    worker) gets its result (pickled beside the folder). When ``make`` fails, its folder is
    removed, so that the next caller tries again from nothing (and fails with the same error,
    in its own test)."""
    root = _run_folder(tmp_path_factory)
    done = root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            folder = root / name
            folder.mkdir()
            try:
                made = make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.write_bytes(pickle.dumps(made))
        result: T = pickle.loads(done.read_bytes())
        return result


def _formats_site(base: Path):  # type: ignore[no-untyped-def]
    from tests._site_helpers import build, make_world

    world = make_world(base)
    result = build(world)
    assert result.mode == "full" and result.warnings == []
    return world, result.out


def _hostile_site(base: Path):  # type: ignore[no-untyped-def]
    from tests._site_helpers import build, make_world

    world = make_world(base, hostile=True)
    result = build(world)
    assert result.warnings == []
    return world, result.out


@pytest.fixture(scope="session")
def formats_site(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The tests/fixtures/formats project and its site, fully built: (World, site folder).
    Read it only; build into your own ``out=`` for anything else."""
    return built_once(tmp_path_factory, "formats-site", _formats_site)


@pytest.fixture(scope="session")
def hostile_site(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The formats project with hostile entries in every source (FAULTS.md E1) and its built
    site: (World, site folder). Several modules inspect it; none may change it."""
    return built_once(tmp_path_factory, "hostile-site", _hostile_site)


@pytest.fixture(scope="session")
def shared_fleet_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site of tests/_fleet_helpers.py's fleet (alpha, beta, gone, ci-only), built once per
    test run by `toolkit fleet build-site` (tests/test_fleet.py reads its pages,
    tests/test_browser.py opens them). Read it only; build your own for anything else."""
    from tests._fleet_helpers import build_fleet_site

    return built_once(tmp_path_factory, "fleet-site", build_fleet_site)


def copy_tree_writable(src: Path, dest: Path) -> Path:
    """Copy a fixture tree (its files may be read-only) and make the copy writable."""
    shutil.copytree(src, dest, dirs_exist_ok=True)
    for p in [dest, *dest.rglob("*")]:
        mode = p.stat().st_mode
        p.chmod(mode | stat.S_IWUSR | (stat.S_IXUSR if p.is_dir() else 0))
    return dest


@dataclass
class FixtureProject:
    """A project built from tests/fixtures/formats: vault, slop ledger, audit DB, under one tmp
    dir."""

    root: Path  # the project root (has .smith/vault)
    vault: Path
    ledger: Path
    slop: Path
    audit_db: Path
    home: Path

    def env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "NAGI_LEDGER_DB": str(self.audit_db),
                "CODESMITH_HOME": str(self.slop.parent.parent)}


def make_audit_db(path: Path, *, samples: bool = True, wal: bool = True) -> Path:
    """An audit DB with nagi-ledger's exact DDL (and its sample rows)."""
    sql = (FORMATS / "nagi-ledger" / "audit_schema.sql").read_text(encoding="utf-8")
    if not samples:
        sql = sql.split("-- Example rows")[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(sql)
    conn.commit()
    conn.close()
    return path


def make_project(root: Path, home: Path) -> FixtureProject:
    """The tests/fixtures/formats example files laid out as a real project at ``root``, its
    slop ledger and audit DB under ``home`` (the HOME the toolkit must then see)."""
    vault = root / ".smith" / "vault"
    copy_tree_writable(FORMATS / "smith" / "ledger", vault / "ledger")
    copy_tree_writable(FORMATS / "smith" / "sessions", vault / "sessions")
    shutil.copy(FORMATS / "smith" / "config.json", root / ".smith" / "config.json")
    (root / ".smith" / "config.json").chmod(0o644)
    slop_dir = home / ".codesmith" / "slop_ledger"
    slop_dir.mkdir(parents=True)
    slop = slop_dir / "slop_ledger.json"
    shutil.copy(FORMATS / "codesmith" / "slop_ledger.json", slop)
    slop.chmod(0o644)
    audit_db = make_audit_db(home / ".nagi" / "ledger.db")
    return FixtureProject(root=root, vault=vault, ledger=vault / "ledger", slop=slop,
                          audit_db=audit_db, home=home)


def laid_out_project(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
                     ) -> FixtureProject:
    """``make_project`` in ``tmp_path/acme-api`` with ``home``, the current directory its root
    (the ``project`` fixture's, and any variant's, such as _store_helpers' ``bare_project``)."""
    made = make_project(tmp_path / "acme-api", home)
    monkeypatch.chdir(made.root)
    return made


@pytest.fixture
def project(tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> FixtureProject:
    """The tests/fixtures/formats example files laid out as a real project, HOME and env pointing at
    them; the current directory is the project root."""
    return laid_out_project(tmp_path, isolated_env, monkeypatch)


@pytest.fixture(scope="module")
def _module_project(tmp_path_factory: pytest.TempPathFactory) -> FixtureProject:
    base = tmp_path_factory.mktemp("shared-project")
    return make_project(base / "acme-api", base / "home")


@pytest.fixture
def shared_project(_module_project: FixtureProject, isolated_env: Path,
                   monkeypatch: pytest.MonkeyPatch) -> FixtureProject:
    """``project``, built once per test module for the tests that only read it (its store is
    loaded by the first of them and then read by the others): a test that changes its files or
    its store must use ``project``. HOME and the current directory point at it."""
    monkeypatch.setenv("HOME", str(_module_project.home))
    monkeypatch.chdir(_module_project.root)
    return _module_project


@pytest.fixture
def cli_run():
    """Run the toolkit CLI in-process: ``cli_run("status", "--json")`` -> click Result."""
    from toolkit.cli import cli

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        runner = CliRunner()
        return runner.invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    return run


def _writable(folder: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    else:
        folder.chmod(0o755)


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], Callable[[], None]]]:
    """Make a folder read-only in a way that also binds root (chattr +i), or chmod 0555; put
    back after the test, or earlier by calling what it returns."""
    made: list[Path] = []

    def make(folder: Path) -> Callable[[], None]:
        if os.geteuid() == 0:
            if shutil.which("chattr") is None or subprocess.run(
                    ["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
                pytest.skip("running as root without chattr +i: cannot make a folder read-only")
        else:
            folder.chmod(0o555)
        made.append(folder)
        return lambda: _writable(folder)

    yield make
    for folder in made:
        _writable(folder)


# Root reads and writes any file whatever its mode (the capabilities CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH), so `chmod 000` stops nothing when the suite runs as root, as it does in
# CI's container. A child started through setpriv (util-linux, on every Debian) without those
# two capabilities in its bounding set keeps uid 0 but meets the mode bits as the files' owner
# does: a folder or file chmodded 000 is "Permission denied" for it. Run as another user, the
# mode bits bind without help.
_UNPRIVILEGED = (["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]
                 if os.geteuid() == 0 else [])


def run_unprivileged(*args: str, cwd: Path, input: str | None = None,
                     timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``toolkit *args`` in ``cwd`` as a process for which ``chmod`` binds (see above):
    the permission cases of FAULTS.md, testable as root."""
    import sys

    if _UNPRIVILEGED and shutil.which("setpriv") is None:
        raise AssertionError("running as root needs setpriv (util-linux) for permission tests")
    return subprocess.run([*_UNPRIVILEGED, sys.executable, "-m", "toolkit", *args], cwd=cwd,
                          input=input, capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def modes(*pairs: tuple[Path, int]) -> Iterator[None]:
    """Each path's mode (``chmod``) set for the ``with`` block, the old ones put back after
    it, last first: the permission cases' setting, for :func:`run_unprivileged`."""
    old = [(p, p.stat().st_mode & 0o7777) for p, _ in pairs]
    try:
        for p, mode in pairs:
            p.chmod(mode)
        yield
    finally:
        for p, mode in reversed(old):
            p.chmod(mode)


def reap(proc: subprocess.Popen[Any]) -> int:
    """Kill ``proc`` if it still runs, wait for it, and close the pipes the test opened to it;
    its exit code. (A pipe left open is closed only when the garbage collector gets to it, as
    a ResourceWarning in whichever test is running then.)"""
    if proc.poll() is None:
        proc.kill()
    code = proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):  # unflushed input to a process that is gone
                stream.close()
    return code


def kill_at_pause(proc: subprocess.Popen[str], point: str, timeout: float = 300) -> None:
    """Wait until ``proc`` (started with ``TOOLKIT_EDITOR_PAUSE=<point>`` and stderr piped as
    text) stops at ``point``, then SIGKILL it there; fail if it ends without getting there.

    A slow machine only makes the child slower, so its progress is not timed: ``timeout`` is a
    watchdog that kills a child still running after that many seconds (a hang), which then
    fails here as "never reached"."""
    import threading

    assert proc.stderr is not None
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        for line in proc.stderr:
            if line.startswith(f"TOOLKIT_EDITOR_PAUSE {point} "):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return
        raise AssertionError(f"never reached {point}; exit {proc.wait()}")
    finally:
        watchdog.cancel()
        reap(proc)


def tree_digest(root: Path, skip: Path | None = None) -> dict[str, tuple[str, int, int]]:
    """sha256, mode and size of every file under root: the "nothing lost" check (FAULTS.md);
    without ``skip`` (a file this process may not read while a permission case runs)."""
    import hashlib

    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and p != skip:
            st = p.stat()
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(),
                                             st.st_mode, st.st_size)
    return out
