"""FAULTS.md D: `toolkit query` runs exactly one read-only SELECT, locked down.

The tests that only query read one project per module (``shared_project``); each refused
statement is followed by a check that the store is intact."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REFUSED = "Error: only one read-only SELECT is allowed"
NO_FILES = "Error: file access is disabled for queries (Permission Error: "


@pytest.mark.parametrize("sql", [
    "COPY (SELECT 1) TO '{out}/copy.csv'",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "ATTACH '{out}/other.duckdb' AS o",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET memory_limit = '100GB'",
    "PRAGMA threads = 64",
    "EXPORT DATABASE '{out}/dump'",
    "SELECT 1; DROP TABLE actions",
    "CREATE TABLE x AS SELECT 1",
    "DELETE FROM actions",
    "SELECT * FROM glob('/etc/*')",
])
def test_d1_anything_but_one_select_is_refused(shared_project, cli_run, tmp_path, sql):
    out = tmp_path / "out"
    out.mkdir()
    result = cli_run("query", sql.format(out=out))
    assert result.exit_code == 1
    # a SELECT that reads a file is one SELECT: the refusal says file access is disabled
    reads_a_file = sql.startswith("SELECT *")
    assert result.output.splitlines()[-1].startswith(NO_FILES if reads_a_file else REFUSED)
    assert list(out.iterdir()) == []
    # the store is intact
    check = cli_run("query", "SELECT count(*) AS n FROM actions", "--format", "csv")
    assert check.output.splitlines() == ["n", "3"]


def test_d2_runaway_query_is_interrupted(shared_project, cli_run):
    result = cli_run("query", "SELECT count(*) FROM range(100000000) a, range(100000000) b",
                     "--timeout", "0.5")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: query interrupted after the 0.5 s timeout. Add a LIMIT or a tighter WHERE clause")


def test_d2_a_timeout_that_comes_before_the_query_starts_still_stops_it(shared_project, cli_run):
    """A timeout so short that it comes before DuckDB starts the query (while it is bound, or
    the thread waits for the CPU): DuckDB keeps no interrupt made then, and a timer that
    interrupted once let the query run for hours about one time in three. Ten such reads in
    a process of their own (a lost timeout cannot hang the test run) all stop."""
    import subprocess
    import sys

    assert cli_run("load").exit_code == 0
    script = (
        "from toolkit import Project\n"
        "from toolkit.errors import ToolkitError\n"
        "with Project.open() as project:\n"
        "    for _ in range(10):\n"
        "        try:\n"
        "            project.rows('SELECT count(*) FROM range(100000000000) t(a) '\n"
        "                         'WHERE a % 7 = 3', timeout=1e-06)\n"
        "        except ToolkitError as exc:\n"
        "            print(exc)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "query interrupted after the 1e-06 s timeout. Add a LIMIT or a tighter WHERE clause"] * 10


def test_d2_memory_hog_is_stopped(shared_project, cli_run):
    result = cli_run("query", "SELECT list(range) FROM range(50000000)", "--timeout", "60",
                     "--memory-limit", "100MB")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: query stopped at the 100MB memory limit. Add a LIMIT or aggregate first")


def test_output_is_bounded(shared_project, cli_run):
    result = cli_run("query", "SELECT * FROM range(50)", "--max-rows", "10", "--format", "csv")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[1:11] == [str(i) for i in range(10)]
    assert lines[-1] == "(stopped after 10 rows; use --max-rows or LIMIT)"


@pytest.mark.parametrize("limit", ["lots", "-1GB", " -5 MB"])
def test_a_bad_memory_limit_is_a_usage_error(shared_project, cli_run, limit):
    """A negative size is no size: DuckDB reads it as no limit at all (80% of the machine's
    memory), which took away the query's limit without a word."""
    result = cli_run("query", "SELECT 1", "--memory-limit", limit)
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        f"Error: --memory-limit {limit!r} is not a size. Use a number and a unit, e.g. 500MB "
        "or 2GB")


def test_a_memory_limit_too_small_to_open_the_store_is_a_usage_error(shared_project, cli_run):
    """Too little memory to read the store's catalog was "cannot open the store ... Delete
    it; `toolkit load` rebuilds it" (exit 65): the store is fine, the limit is too small."""
    result = cli_run("query", "SELECT count(*) AS n FROM actions", "--memory-limit", "1KB")
    assert result.exit_code == 2
    line = result.output.splitlines()[-1]
    assert line.startswith("Error: ")
    assert ("ledger.duckdb: the memory limit '1KB' is too small to open the store (Out of "
            "Memory Error: ") in line
    assert "the store itself is fine. Give the query more memory (the default is 1GB)" in line
    check = cli_run("query", "SELECT count(*) AS n FROM actions", "--format", "csv")
    assert check.output.splitlines() == ["n", "3"]


@pytest.mark.parametrize("command", [["query", "SELECT 1"], ["check"]])
def test_a_timeout_of_nan_is_a_usage_error(shared_project, cli_run, command):
    """``--timeout nan`` passed click's range (every comparison with NaN is false): the query
    was interrupted at once, and check ran with no timeout at all."""
    result = cli_run(*command, "--timeout", "nan")
    assert result.exit_code == 2
    assert "'nan' is not a number of seconds" in result.output


def _hold_store(db: Path) -> subprocess.Popen[str]:
    """Another process (a plain DuckDB connection, not a toolkit command) holding the store
    until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); sys.stdin.read()", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_store_locked_by_another_process_is_busy_not_a_traceback(project, cli_run,
                                                                   monkeypatch):
    from toolkit import Project
    from toolkit.errors import BusyError

    assert cli_run("load").exit_code == 0
    db = project.root / ".toolkit" / "ledger.duckdb"
    monkeypatch.setenv("TOOLKIT_LOCK_TIMEOUT", "0.3")
    holder = _hold_store(db)
    try:
        started = time.monotonic()
        with pytest.raises(BusyError) as err:
            Project.open(project.root, refresh=False).rows("SELECT 1")
        assert time.monotonic() - started >= 0.3  # it waited for the holder, then gave up
        # the holder is named as DuckDB names it: it need not be a toolkit command
        assert str(err.value) == (f"{db}: the store is in use by another process "
                                  f"({Path(sys.executable).resolve().name}, PID {holder.pid}); "
                                  "waited 0.3 s, retry when it finishes")
        result = cli_run("query", "SELECT 1")
        assert result.exit_code == 75
        assert result.stderr.splitlines()[-1].endswith("waited 0.3 s, retry when it finishes")
    finally:
        holder.communicate("")


def test_a_store_another_process_holds_for_a_moment_is_waited_for(project, cli_run):
    """Two commands started together take turns: the second waits for the first's lock on
    the store (up to TOOLKIT_LOCK_TIMEOUT, 10 s) instead of exiting 75 at once."""
    assert cli_run("load").exit_code == 0
    db = project.root / ".toolkit" / "ledger.duckdb"
    holder = _hold_store(db)
    threading.Timer(0.5, holder.communicate, args=("",)).start()
    try:
        # the holder has the store when the query starts (it lets go half a second later)
        result = cli_run("query", "SELECT 42 AS answer")
        assert result.exit_code == 0, result.output
        assert "42" in result.stdout
        assert cli_run("load").exit_code == 0
    finally:
        if holder.poll() is None:
            holder.communicate("")


def test_a_lock_timeout_that_is_no_number_of_seconds_is_a_usage_error(project, cli_run,
                                                                      monkeypatch):
    """``nan`` waited forever for a held store (no deadline reaches it), and ``abc`` was
    the default taken without a word: each is a usage error naming the variable. (``nan``
    is asked of the one reader every lock uses, so that a regression fails, not hangs.)"""
    from toolkit.errors import UsageError
    from toolkit.safewrite import lock_timeout

    for value in ("nan", "NaN", "abc", ""):
        monkeypatch.setenv("TOOLKIT_LOCK_TIMEOUT", value)
        if value:
            with pytest.raises(UsageError, match="is not a number of seconds"):
                lock_timeout()
        else:
            assert lock_timeout() == 10
    monkeypatch.delenv("TOOLKIT_LOCK_TIMEOUT")
    assert cli_run("load").exit_code == 0
    holder = _hold_store(project.root / ".toolkit" / "ledger.duckdb")
    try:
        result = cli_run("query", "SELECT 1", env={"TOOLKIT_LOCK_TIMEOUT": "abc"})
        assert result.exit_code == 2
        assert result.stderr.splitlines() == [
            "Error: $TOOLKIT_LOCK_TIMEOUT='abc' is not a number of seconds. Set it to the "
            "seconds to wait for another run's lock (default 10), or unset it"]
    finally:
        holder.communicate("")


@pytest.mark.parametrize("sql", ["UPDATE EXTENSIONS", "UPDATE EXTENSIONS (httpfs)",
                                 "CHECKPOINT", "VACUUM", "DETACH x", "USE memory"])
def test_d1_statements_the_python_enum_does_not_know_are_refused_in_one_line(
        shared_project, cli_run, sql):
    result = cli_run("query", sql)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"{REFUSED}. Write a single SELECT (or WITH ... SELECT) statement"]


def test_d2_a_query_needing_more_than_the_memory_limit_does_not_spill_to_disk(project, cli_run):
    """Sorting 20M rows under 100MB used to spill gigabytes of temp files beside the store;
    now nothing is written and the query stops at the limit."""
    assert cli_run("load").exit_code == 0
    state = project.root / ".toolkit"
    before = sorted(p.name for p in state.iterdir())
    result = cli_run("query", "SELECT count(*) FROM (SELECT range AS r, random() AS x "
                     "FROM range(20000000) ORDER BY x)", "--memory-limit", "100MB",
                     "--timeout", "120")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "Error: query stopped at the 100MB memory limit. Add a LIMIT or aggregate first"]
    assert sorted(p.name for p in state.iterdir()) == before

def test_a_held_refresh_answers_from_its_store_and_a_query_still_runs_locked_down(project):
    """``refresh(hold=True)`` (a command's): the toolkit's reads use the store it wrote, a
    query of the caller's the read-only, locked-down connection; closed, the store is free."""
    from toolkit import Project
    from toolkit.errors import ToolkitError
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    db = project.root / ".toolkit" / "ledger.duckdb"
    with Project.open(project.root, refresh=False) as held:
        assert held.refresh(hold=True).errors == []
        counts = held.tables()
        assert counts["actions"] == 3
        with pytest.raises(ToolkitError, match="file access is disabled for queries"):
            held.sql("SELECT * FROM read_csv('/etc/passwd')")
        assert held.sql("SELECT current_setting('access_mode'), "
                        "current_setting('enable_external_access'), "
                        "current_setting('lock_configuration')").fetchall() == [
            ("read_only", False, True)]
        assert held.rows("SELECT count(*) FROM actions").rows == [(3,)]
        assert held.tables() == counts
    with Store.open(db, sources=SOURCES) as store:  # nothing holds it any more
        assert store.counts() == counts
