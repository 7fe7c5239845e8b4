"""The public API (toolkit.api.Project): found as the CLI finds a project, read-only SQL, the
toolkit's errors, and reads that leave the project's files and the store alone."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit import Project
from toolkit.demo import write_demo
from toolkit.errors import BusyError, NotFoundError, RefusedError, ToolkitError, UsageError
from toolkit.loaders import SOURCES
from toolkit.store import Store


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    """The demo world, its store loaded (the tests that open it with refresh=False read it,
    whichever runs first)."""
    made = write_demo(tmp_path_factory.mktemp("api") / "demo", audit_rows=300)
    Project.open(made.project).close()
    return made


def test_importing_toolkit_does_not_import_the_api_or_duckdb():
    """...yet dir(toolkit) lists Project and the result types before their first use (a
    notebook's completion on ``toolkit.`` missed Project), and each can be imported from
    toolkit (``from toolkit import TaskStatus`` failed)."""
    code = ("import sys, toolkit; assert 'toolkit.api' not in sys.modules; "
            "print(sorted(set(toolkit.__all__) - set(dir(toolkit)))); "
            "assert 'duckdb' not in sys.modules; from toolkit import Project, TaskStatus; "
            "import toolkit.api as api; print(Project.__module__, TaskStatus is api.TaskStatus, "
            "sorted(api.__all__) == sorted(set(toolkit.__all__) - {'__version__'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.splitlines() == ["[]", "toolkit.api True True"]


def test_open_finds_the_project_from_a_subfolder_like_the_cli(world, monkeypatch):
    monkeypatch.chdir(world.project / "acme_api")
    with Project.open() as project:
        assert project.root == world.project
        assert project.config.db_path == world.project / ".toolkit" / "ledger.duckdb"
        assert project.today == dt.date(2026, 11, 28)  # toolkit.yaml's today


def test_keyword_settings_override_toolkit_yaml(world, tmp_path):
    with Project.open(world.project, slop=tmp_path / "none.json", db=tmp_path / "s.duckdb",
                      today=dt.date(2027, 1, 2)) as project:
        assert project.today == dt.date(2027, 1, 2)
        assert project.slop_summary().total == 0  # a missing slop ledger is an empty one
        assert project.open_slop() == []
        assert project.tables()["ledger_entries"] == 50
    assert not (world.project / ".toolkit" / "s.duckdb").exists()


def test_a_project_folder_that_does_not_exist_is_a_usage_error(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="does not exist"):
        Project.open(tmp_path / "nowhere")
    # "" was the current folder, taken as the project (a store written there), where no
    # path finds the project above it; the CLI's --project "" the same
    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        with pytest.raises(UsageError, match=r"^the project folder is empty text; give a "):
            Project.open(empty)
    from click.testing import CliRunner

    from toolkit.cli import cli

    out = CliRunner().invoke(cli, ["--project", "", "status"])
    assert out.exit_code == 2 and "the project folder is empty text" in out.output
    (tmp_path / "a-file").write_text("x\n", encoding="utf-8")  # there, but not a folder
    with pytest.raises(UsageError, match=r"a-file is not a folder$"):
        Project.open(tmp_path / "a-file")


def test_unloaded_store_without_refresh_says_to_load_first(world, tmp_path):
    project = Project.open(world.project, db=tmp_path / "never.duckdb", refresh=False)
    with pytest.raises(ToolkitError, match="does not exist yet"):
        project.tasks()
    assert not (tmp_path / "never.duckdb").exists()


def test_sql_binds_parameters_and_refuses_anything_but_one_select(world):
    with Project.open(world.project) as project:
        refuted = project.sql("SELECT count(*) FROM dispatches WHERE verdict = ?",
                              ["REFUTED"]).fetchall()[0][0]
        by_hand = sum(1 for d in project.dispatches() if d["verdict"] == "REFUTED")
        assert refuted == by_hand > 0
        with pytest.raises(RefusedError, match="only one read-only SELECT"):
            project.sql("DROP TABLE dispatches")
        with pytest.raises(RefusedError, match="only one read-only SELECT"):
            project.sql("SELECT 1; SELECT 2")
        with pytest.raises(ToolkitError, match=r"query failed: .*no_such_table"):
            project.sql("SELECT * FROM no_such_table")
        with pytest.raises(RefusedError, match=r"^file access is disabled for queries .*"
                                               "file system operations are disabled"):
            project.sql("SELECT * FROM read_csv('/etc/passwd')")
        with pytest.raises(RefusedError, match=r"depth limit of 1000 exceeded\. Settings "
                                               "cannot be changed for queries: simplify"):
            project.sql("SELECT " + "+".join(["1"] * 1100))
        assert project.tables()["dispatches"] == by_hand + sum(
            1 for d in project.dispatches() if d["verdict"] != "REFUTED")


def test_a_relation_raises_the_toolkits_errors_and_says_what_to_do(world, tmp_path,
                                                                      monkeypatch):
    """Errors DuckDB raises only when a relation of sql() is read, or that it raises for a
    relation's writes, were DuckDB's own exceptions (``_duckdb.ConversionException``...)."""
    import duckdb

    with Project.open(world.project, refresh=False) as project:
        relation = project.sql("SELECT task, count(*) AS n FROM dispatches GROUP BY task")
        assert isinstance(relation.relation, duckdb.DuckDBPyRelation)
        assert relation.columns == ["task", "n"] and len(relation) == len(project.tasks())
        assert relation.filter("n > 1").count("*").fetchall() == [
            (sum(1 for t in project.tasks() if t["dispatch_count"] > 1),)]
        with pytest.raises(ToolkitError, match=r"^query failed: Conversion Error: Could not "
                                               "convert string"):
            relation.filter("CAST(task AS INT) > 0").fetchall()
        with pytest.raises(ToolkitError, match=r"^query failed: Invalid Input Error: boom$"):
            project.sql("SELECT error('boom')").fetchall()
        out = tmp_path / "rows.csv"
        with pytest.raises(RefusedError, match=r"^to_csv\(\) is refused: queries may not "
                                               r"write files\. Read the rows with \.arrow\(\)"):
            relation.to_csv(str(out))
        with pytest.raises(RefusedError, match=r"^create\(\) is refused: the store is "
                                               "read-only"):
            relation.create("copied")
        assert not out.exists() and "copied" not in project.tables()
        monkeypatch.setitem(sys.modules, "pandas", None)  # (not installed, wherever it is)
        with pytest.raises(ToolkitError, match=r"^df\(\) needs pandas, which is not "
                                               r"installed .*pip install pandas"):
            relation.df()
        project.refresh()
        with pytest.raises(ToolkitError, match=r"^the relation's connection was closed .*"
                                               r"Call sql\(\) again$"):
            relation.fetchall()


def _each_refused(cases: list[tuple[Callable[[], object], str]]) -> None:
    """Each call raises a UsageError whose message is exactly its text."""
    for call, message in cases:
        with pytest.raises(UsageError) as err:
            call()
        assert err.value.message == message


@contextlib.contextmanager
def _interrupted_from_another_thread(project: Project) -> Iterator[None]:
    """``project.interrupt()`` from another thread while the block runs, again and again
    (one that comes before the query starts is lost)."""
    done = threading.Event()

    def interrupt() -> None:
        while not done.wait(0.05):
            project.interrupt()

    thread = threading.Thread(target=interrupt)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_interrupt_is_not_reported_as_the_timeout(world):
    """``interrupt()`` during ``rows()`` was "interrupted after the 30 s timeout"."""
    with Project.open(world.project, refresh=False) as project:
        with _interrupted_from_another_thread(project), pytest.raises(ToolkitError) as raised:
            project.rows("SELECT count(*) FROM range(100000000000) t(a) WHERE a % 7 = 3",
                         timeout=60)
        assert str(raised.value) == "query interrupted"


def test_a_check_interrupted_from_another_thread_is_not_reported_as_its_timeout(world):
    """``interrupt()`` while run_checks() runs an SQL check: its result said "query
    interrupted after the 60 s timeout" (the check's timeout), though none had passed; a
    check that does run out of time still says so."""
    from toolkit.checks import Check, run_check

    slow = Check("slow", "never ends", "A check.",
                 sql="SELECT a FROM range(100000000000) t(a) WHERE a % 7 = 3 AND a < 0")
    with Project.open(world.project, refresh=False) as project:
        with _interrupted_from_another_thread(project):
            stopped = run_check(project, slow, timeout=60)
        assert (stopped.status, stopped.message) == ("error", "query interrupted")
        timed = run_check(project, slow, timeout=0.2)
        assert (timed.status, timed.message) == (
            "error", "query interrupted after the 0.2 s timeout")


def test_show_tables_lists_the_tables_tables_lists(world):
    """DESCRIBE and SHOW, which DuckDB runs as SELECTs, are allowed; SHOW TABLES listed the
    store's bookkeeping tables (``_migrations``...), which tables() leaves out."""
    with Project.open(world.project, refresh=False) as project:
        listed = sorted(project.tables())
        assert [r[0] for r in project.sql("SHOW TABLES").fetchall()] == listed
        assert [r[0] for r in project.rows("show tables;").rows] == listed
        assert sorted(r[2] for r in project.sql("SHOW ALL TABLES").fetchall()) == listed
        assert project.sql("DESCRIBE actions").fetchall()[0][:2] == ("id", "BIGINT")


def test_refresh_after_sql_reopens_the_store_and_reports_what_changed(world):
    with Project.open(world.project) as project:
        before = project.sql("SELECT count(*) FROM actions").fetchall()[0][0]
        report = project.refresh()
        assert report.errors == []
        assert {r.source for r in report.results if not r.skipped} == set()
        assert project.sql("SELECT count(*) FROM actions").fetchall()[0][0] == before


def test_opening_the_project_again_while_the_first_holds_the_store_works(world):
    """A notebook cell ``project = Project.open()`` run again: the new Project refreshes the
    store while the first, still bound to the name, holds its read-only connection. The idle
    one gives way and opens again on its next call; a relation of it says to call sql()
    again. One in use (its call holds its lock) is not closed under its call: busy."""
    first = Project.open(world.project)
    try:
        tasks = first.tasks()  # holds the read-only connection
        relation = first.sql("SELECT count(*) FROM dispatches")
        again = Project.open(world.project)  # refreshes: was BusyError
        again.close()
        assert first.tasks() == tasks  # opened again
        with pytest.raises(ToolkitError, match=r"connection was closed .*Call sql\(\) again"):
            relation.fetchall()
        assert first.refresh(hold=True).errors == []  # a held writer gives way to a reader
        with Project.open(world.project, refresh=False, memory_limit="500MB") as other:
            assert other.tasks() == tasks
        assert first.tasks() == tasks

        in_call, done = threading.Event(), threading.Event()

        def busy() -> None:
            with first._calls:  # as a call of first's in another thread holds it
                in_call.set()
                done.wait(30)

        thread = threading.Thread(target=busy)
        thread.start()
        in_call.wait(30)
        try:
            with pytest.raises(BusyError, match="open in this process"):
                Project.open(world.project)
        finally:
            done.set()
            thread.join()
        assert first.tasks() == tasks  # its connection went on
    finally:
        first.close()
    Project.open(world.project).close()  # closed: the store is free again


def test_closing_frees_the_store_for_a_writer(world):
    project = Project.open(world.project)
    project.ledger_changes(limit=1)
    project.close()
    with Store.open(world.project / ".toolkit" / "ledger.duckdb", sources=SOURCES) as store:
        assert store.tables()


def test_ledger_reads_do_not_write_the_session_log(world):
    log = world.project / ".smith" / "vault" / ".current-session"
    session = Path(log.read_text(encoding="utf-8").strip())
    before = session.read_bytes()
    with Project.open(world.project) as project:
        assert project.ledger_dashboard().total_entries == 50
        assert len(project.ledger_entries(confidence="high")) == sum(
            f.high for f in project.ledger_dashboard().files)
        report = project.refresh()
    assert session.read_bytes() == before
    assert [r.source for r in report.results if not r.skipped] == []


def test_accessor_errors_are_the_toolkits(world):
    with Project.open(world.project) as project:
        with pytest.raises(UsageError, match="unknown severity"):
            project.slop_entries(severity="urgent")
        with pytest.raises(UsageError, match="unknown ledger file"):
            project.ledger_entries(file="nope")
        with pytest.raises(ToolkitError, match="no ledger entry titled"):
            project.entry_history("no entry has this title")
        with pytest.raises(ToolkitError, match="task"):
            project.task_status("")


def test_answers_match_the_cli(world, monkeypatch):
    from click.testing import CliRunner

    from toolkit.cli import cli

    monkeypatch.chdir(world.project)
    with Project.open() as project:
        task = next(t["task"] for t in project.tasks() if t["over_retry_limit"])
        status = project.task_status(task)
        approaches = project.approaches(task)
    runner = CliRunner()
    out = runner.invoke(cli, ["audit", "task-status", task, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == status
    out = runner.invoke(cli, ["audit", "approaches", task, "--json"])
    assert json.loads(out.output) == approaches


def test_a_time_with_a_zone_is_read_in_utc_as_the_clis_now(world, monkeypatch, cli_run):
    """A ``now`` with a time zone started the window at its wall-clock digits and ended it in
    UTC: 12:00 in Tokyo (03:00 UTC) counted 12:00 UTC back to 03:00 UTC, and a 6-hour report
    ended before it started (empty). It is converted to UTC, as ``--now`` is; a naive time is
    UTC. So is a date given as a datetime (its UTC date)."""
    monkeypatch.chdir(world.project)
    japan = dt.timezone(dt.timedelta(hours=9))  # (Tokyo's: no zone database needed)
    tokyo = dt.datetime(2026, 11, 27, 12, tzinfo=japan)
    naive = dt.datetime(2026, 11, 27, 3)
    with Project.open() as project:
        stats = project.stats(1, now=tokyo)
        assert stats == project.stats(1, now=naive)
        report = project.session_report(24, now=tokyo)
        assert report == project.session_report(24, now=naive)
        hits = project.audit_search("webhook", since_days=1, now=tokyo)
        assert hits == project.audit_search("webhook", since_days=1, now=naive)
        assert project.stats_by_tier(since=dt.datetime(2026, 11, 28, 1, tzinfo=japan)) \
            == project.stats_by_tier(since=dt.date(2026, 11, 27))
    assert sum(stats["actions_by_tier"].values()) > 0 and report.startswith("## ") and hits
    cli_now = ("--now", "2026-11-27T12:00:00+09:00")
    assert json.loads(cli_run("audit", "stats", "--days", "1", *cli_now, "--json").stdout) \
        == stats
    assert cli_run("audit", "report", "--since-hours", "24", *cli_now).stdout == report + "\n"
    assert json.loads(cli_run("audit", "search", "webhook", "--since-days", "1", *cli_now,
                              "--json").stdout) == hits
    evening = dt.datetime(2026, 1, 1, 23, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    with Project.open(today=evening, refresh=False) as project:
        assert project.today == dt.date(2026, 1, 2)


def test_answers_match_the_mcp_tools(world):
    from toolkit.mcp_server import LedgerTools

    with Project.open(world.project) as project:
        ledger = project.ledger_search("Idempotency", limit=5)
        similar = project.similar_tasks("Refund partially captured payment")
        hits = project.audit_search("refund", limit=7)
        with pytest.raises(UsageError, match="non-empty"):
            project.ledger_search("  ")
        config = project.config
    tools = LedgerTools(config)
    assert ledger and ledger == tools.smith_ledger_search("Idempotency", limit=5)
    assert similar and similar == tools.similar_tasks("Refund partially captured payment")
    assert hits and hits == tools.search("refund", limit=7)
    # the MCP tool's refusal in its own words (an API argument rule answered for it once)
    with pytest.raises(UsageError) as err:
        tools.smith_ledger_search("Idempotency", limit=0)
    assert err.value.message == "'limit' must be a positive integer."


# --------------------------------------------------------------------------- what the CLI asks


def test_a_ledger_read_given_its_command_line_is_logged_as_the_cli_logs_it(project,
                                                                          monkeypatch):
    """`toolkit ledger list` records itself in the vault session log through the same
    method; with ``request=`` the API's read is recorded the same way, byte for byte."""
    from click.testing import CliRunner

    from toolkit.cli import cli

    session = next((project.vault / "sessions").glob("*.md"))
    (project.vault / ".current-session").write_text(f"{session}\n", encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["toolkit", "ledger", "list", "--confidence", "medium"])
    start = session.read_bytes()
    assert CliRunner().invoke(cli, ["ledger", "list", "--confidence", "medium"]).exit_code == 0
    by_cli = session.read_bytes()[len(start):]
    with Project.open(refresh=False) as api:
        listing = api.ledger_list(confidence="medium",
                                  request="toolkit ledger list --confidence medium")
    by_api = session.read_bytes()[len(start) + len(by_cli):]
    assert listing.count == 2
    assert b"> toolkit ledger list --confidence medium" in by_cli
    strip = [line for line in by_cli.splitlines() if not line.startswith(b"### [")]
    assert [line for line in by_api.splitlines() if not line.startswith(b"### [")] == strip


def test_rows_stops_at_max_rows_as_toolkit_query_does(world, monkeypatch):
    from click.testing import CliRunner

    from toolkit.cli import cli

    sql = "SELECT id, task FROM dispatches ORDER BY id"
    with Project.open(world.project) as project:
        first = project.rows(sql, max_rows=3)
        bound = project.rows("SELECT id FROM dispatches WHERE id <= ? ORDER BY id", [2])
    monkeypatch.chdir(world.project)
    out = CliRunner().invoke(cli, ["query", sql, "--max-rows", "3", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert [tuple(r.values()) for r in json.loads(out.stdout)] == first.rows
    assert first.columns == ["id", "task"] and first.truncated
    assert "(stopped after 3 rows" in out.stderr
    assert bound == (["id"], [(1,), (2,)], False)


def test_a_memory_limit_that_is_not_a_size_is_a_usage_error_at_open(world):
    with pytest.raises(UsageError, match=r"^Project.open: memory_limit 'lots' is not a size"):
        Project.open(world.project, memory_limit="lots", refresh=False)


def test_a_memory_limit_too_small_to_open_the_store_says_so_not_damaged(world):
    """Too little memory to read the store's catalog was "cannot open the store ... Delete
    it" (bad data): the store is fine, the limit is what to change."""
    with Project.open(world.project, memory_limit="1KB", refresh=False) as project, \
            pytest.raises(UsageError) as raised:
        project.rows("SELECT count(*) FROM actions")
    assert "the memory limit '1KB' is too small to open the store" in str(raised.value)
    assert "Give the query more memory" in str(raised.value)
    assert "Delete" not in str(raised.value)
    with Project.open(world.project, refresh=False) as project:
        assert project.rows("SELECT count(*) FROM actions").rows == [
            (project.tables()["actions"],)]


def test_refresh_audit_refuses_a_missing_db_unless_told_it_may_be_missing(world, tmp_path):
    missing = tmp_path / "nagi" / "ledger.db"
    with Project.open(world.project, audit_db=missing, db=tmp_path / "s.duckdb",
                      refresh=False) as project:
        with pytest.raises(NotFoundError, match="audit DB not found"):
            project.refresh_audit()
        project.refresh_audit(missing_ok=True)
        assert project.task_status("anything")["dispatch_count"] == 0
    assert not missing.exists()


def test_slop_query_is_toolkit_slop_querys_answer(world, monkeypatch):
    from click.testing import CliRunner

    from toolkit.cli import cli

    with Project.open(world.project, refresh=False) as project:
        found = project.slop_query(status="open", severity="HIGH", limit=3)
    monkeypatch.chdir(world.project)
    out = CliRunner().invoke(cli, ["slop", "query", "--status", "open", "--severity", "HIGH",
                                   "--limit", "3", "--json"])
    data = json.loads(out.stdout)
    assert (data["matched"], data["total"]) == (found.matched, found.total)
    assert [e["id"] for e in data["entries"]] == [e.id for e in found.entries]
    assert data["path"] == str(found.ledger.path) and len(found.entries) == 3


def test_bad_values_are_usage_errors_as_the_cli_refuses_them(world, monkeypatch, tmp_path):
    """Values the CLI's options refuse are refused by the API too (the questions are the same
    code), rather than answered wrongly: a misspelt confidence was no entries, max_rows 0 no
    rows "truncated", a negative limit DuckDB's BinderException, a snapshot number with a
    turn one of the two ignored."""
    monkeypatch.chdir(world.project)
    with Project.open(db=tmp_path / "s.duckdb") as project:
        cases = [(lambda: project.ledger_entries(confidence="hihg"),
                  "Project.ledger_entries: confidence must be one of low, medium, high or None, "
                  "not 'hihg'"),
                 (lambda: project.ledger_entries(confidence=3),
                  "Project.ledger_entries: confidence must be text or None, not 3"),
                 (lambda: project.rows("SELECT 1", max_rows=0),
                  "Project.rows: max_rows must be a whole number from 1 to 1,000,000, not 0"),
                 (lambda: project.ledger_changes(limit=-1),
                  "Project.ledger_changes: limit must be a whole number of at least 1 or None, "
                  "not -1"),
                 (lambda: project.turn_diff(1, turn=3),
                  "give a snapshot number or a turn, not both"),
                 (lambda: project.turn_diff("1"),
                  "Project.turn_diff: number must be a whole number or None, not '1'"),
                 # -1 listed every snapshot but the oldest, 0 every one
                 (lambda: project.snapshots(limit=0),
                  "Project.snapshots: limit must be a whole number of at least 1 or None, "
                  "not 0"),
                 (lambda: project.snapshots(limit=-1),
                  "Project.snapshots: limit must be a whole number of at least 1 or None, "
                  "not -1"),
                 # NaN was never reached (no timeout at all), and 0 or less interrupted at once
                 (lambda: project.rows("SELECT 1", timeout=float("nan")),
                  "timeout must be a number of seconds above 0, not nan"),
                 (lambda: project.rows("SELECT 1", timeout=-1),
                  "timeout must be a number of seconds above 0, not -1")]
        _each_refused(cases)
        assert [e.confidence for e in project.ledger_entries(confidence="HIGH")][:1] == ["high"]
        # an infinite timeout is none, and so is one longer than the platform's longest
        # wait: the query runs (a wait that long made the timer's thread die with a
        # traceback on stderr)
        died: list[object] = []  # the timer's thread is joined before rows() returns
        monkeypatch.setattr(threading, "excepthook", died.append)
        assert project.rows("SELECT 42", timeout=float("inf")).rows == [(42,)]
        assert project.rows("SELECT 43", timeout=1e12).rows == [(43,)]
        assert died == []


def test_values_the_clis_options_refuse_are_refused_naming_the_method(world, monkeypatch,
                                                                      tmp_path):
    """The API took what the CLI's options refuse and answered wrongly (category "bogus": no
    entries; max_rows 10**20: a raw TypeError from DuckDB; per_turn -1, context -1, top -1:
    nothing or everything), or refused in the CLI's words (--index, --older-than, --limit,
    --today). Option and argument share one rule (toolkit.argrules); limit 0 is refused by
    every method (None is no limit), where it meant no limit, no rows or an error."""
    from click.testing import CliRunner

    from toolkit.cli import cli

    monkeypatch.chdir(world.project)
    with Project.open(db=tmp_path / "s.duckdb") as project:
        cases = [(lambda: project.ledger_entries(category="bogus"),
                  "Project.ledger_entries: category must be one of implementation, testing, "
                  "debugging, specification, audit or None, not 'bogus'"),
                 (lambda: project.rows("SELECT 1", max_rows=10**20),
                  "Project.rows: max_rows must be a whole number from 1 to 1,000,000, "
                  "not 100000000000000000000"),
                 (lambda: project.turn_activity(per_turn=0),
                  "Project.turn_activity: per_turn must be a whole number of at least 1, "
                  "not 0"),
                 (lambda: project.ledger_search_lines("webhook", context=-1),
                  "Project.ledger_search_lines: context must be a whole number of at least 0, "
                  "not -1"),
                 (lambda: project.ledger_dashboard(top=-1),
                  "Project.ledger_dashboard: top must be a whole number of at least 0, not -1"),
                 (lambda: project.slop_entries(limit=0),
                  "Project.slop_entries: limit must be a whole number of at least 1 or None, "
                  "not 0"),
                 (lambda: project.slop_query(older_than=-5),
                  "Project.slop_query: older_than must be a whole number of at least 0 or "
                  "None, not -5"),
                 (lambda: project.ledger_changes(limit=0),
                  "Project.ledger_changes: limit must be a whole number of at least 1 or None, "
                  "not 0"),
                 (lambda: project.ledger_entry("webhook", index=0),
                  "Project.ledger_entry: index must be a whole number of at least 1 or None, "
                  "not 0"),
                 (lambda: project.ledger_entry("webhook", index=9),
                  "Project.ledger_entry: index 9 is out of range; 7 entries match"),
                 (lambda: Project.open(today="x"),
                  "Project.open: today must be a date (YYYY-MM-DD) or None, not 'x'")]
        _each_refused(cases)
        assert len(project.ledger_entries(category="TESTING")) == \
            len(project.ledger_entries(category="testing")) > 0
        assert len(project.slop_entries(limit=None)) == project.slop_summary().total
    runner = CliRunner()
    for args, words in [(["ledger", "list", "--category", "bogus"], "'bogus' is not one of"),
                        (["query", "SELECT 1", "--max-rows", str(10**20)], "is not in the range"),
                        (["ledger", "show", "webhook", "--index", "0"], "is not in the range"),
                        (["slop", "query", "--older-than", "-5"], "is not in the range")]:
        out = runner.invoke(cli, args)
        assert (out.exit_code, words in out.output) == (2, True), (args, out.output)
    out = runner.invoke(cli, ["slop", "query", "--limit", "0", "--json"])  # the CLI's 0: all
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)  # (matched counts before the limit: the entries are all)
    assert len(data["entries"]) == data["matched"] == 150


def test_an_empty_title_is_a_usage_error_not_the_untitled_entry(world, monkeypatch):
    """Blank text is in every title: `ledger show ''` showed the entry with no title and
    logged 'Outcome: showed "None"'; the API's ledger_entry("") returned it too, and
    `ledger promote '' --index 1` raised the first entry of the ledger."""
    from click.testing import CliRunner

    from toolkit.cli import cli

    monkeypatch.chdir(world.project)
    sessions = world.project / ".smith" / "vault" / "sessions"
    assert (world.project / ".smith" / "vault" / ".current-session").is_file()  # a log to write
    logged = sorted(p.read_bytes() for p in sessions.rglob("*") if p.is_file())
    ledger = world.project / ".smith" / "vault" / "ledger"
    files = {p: p.read_bytes() for p in ledger.rglob("*") if p.is_file()}
    for args in (["ledger", "show", ""], ["ledger", "show", " "], ["ledger", "history", ""],
                 ["ledger", "promote", "", "--index", "1"], ["ledger", "demote", " "]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 2 and "must be text with a word in it" in out.output, args
    assert sorted(p.read_bytes() for p in sessions.rglob("*") if p.is_file()) == logged
    assert {p: p.read_bytes() for p in ledger.rglob("*") if p.is_file()} == files
    with Project.open(refresh=False) as project:
        _each_refused([
            (lambda: project.ledger_entry(""),
             "Project.ledger_entry: title must be text with a word in it, not ''"),
            (lambda: project.entry_history("  "),
             "Project.entry_history: title must be text with a word in it, not '  '")])


def test_several_matching_titles_are_refused_in_the_apis_words(world, monkeypatch):
    """The hint of an ambiguous title names the method's arguments, as the CLI's names its
    options: the API said "Choose one with --index N", an option a Python caller has not."""
    from toolkit.ledger_ops import AmbiguousMatchError

    monkeypatch.chdir(world.project)
    with Project.open(refresh=False) as project:
        with pytest.raises(AmbiguousMatchError) as err:
            project.ledger_entry("webhook")
        n = len(err.value.matches)
        assert n > 1 and err.value.hint == (f"Choose one with index=N (1-{n}) or narrow with "
                                            'file (e.g. file="patterns")')
        title = err.value.matches[1].title
        assert project.ledger_entry("webhook", index=2).entry.title == title


def test_too_many_titles_for_one_history_are_refused_in_each_callers_words(world, monkeypatch):
    """`ledger history webhook` hints at its --file option; Project.entry_history at its
    file argument (it said --file too)."""
    from click.testing import CliRunner

    from toolkit.cli import cli
    from toolkit.errors import NotFoundError

    monkeypatch.chdir(world.project)
    out = CliRunner().invoke(cli, ["ledger", "history", "webhook"])
    assert out.exit_code == 1 and out.output.rstrip().endswith(
        "...). Give more of the title, or --file"), out.output
    with Project.open() as project:
        with pytest.raises(NotFoundError) as err:
            project.entry_history("webhook")
        assert err.value.message.startswith("7 entries contain 'webhook' (patterns: ")
        assert err.value.hint == 'Give more of the title, or file (e.g. file="patterns")'
        [one] = project.entry_history("webhook", file="patterns")[:1]
        assert one.file == "patterns"


def test_an_argument_of_the_wrong_type_is_a_usage_error_naming_it(world, monkeypatch, tmp_path):
    """A wrong type met an AttributeError or TypeError from deep inside (stats(now=text):
    'str' object has no attribute 'tzinfo'), or was read as something else (kinds="approaches"
    as a list of one-letter kinds): each public method's simple arguments are checked."""
    monkeypatch.chdir(world.project)
    with Project.open(db=tmp_path / "s.duckdb") as project:
        cases = [(lambda: project.stats(now="2026-11-28"),
                  "Project.stats: now must be a datetime.datetime or None, not '2026-11-28'"),
                 (lambda: project.stats_by_tier(since="2026-11-27"),
                  "Project.stats_by_tier: since must be a datetime.date or None, "
                  "not '2026-11-27'"),
                 (lambda: project.slop_entries(older_than="10"),
                  "Project.slop_entries: older_than must be a whole number or None, not '10'"),
                 (lambda: project.audit_search("retry", kinds="approaches"),
                  "Project.audit_search: kinds must be a list of text or None, "
                  "not 'approaches'"),
                 (lambda: project.sql(5), "Project.sql: query must be text, not 5"),
                 (lambda: project.task_status(True),
                  "Project.task_status: task must be text, not True"),
                 # a raw TypeError from deep inside; an unknown source answered no problems
                 (lambda: Project.open(5),
                  "Project.open: path must be a path (text or a Path) or None, not 5"),
                 (lambda: Project.open(db=b"/x"),
                  "Project.open: db must be a path (text or a Path) or None, not b'/x'"),
                 (lambda: project.problems("bogus"),
                  "Project.problems: no source is named 'bogus'; use one of ledger, sessions, "
                  "slop, audit, snapshots, history, goals")]
        _each_refused(cases)
        # the right types still answer: a tuple or a set of kinds as a list, numpy's whole
        # numbers as ints
        import numpy as np

        assert project.audit_search("retry", kinds=("approaches",)) == \
            project.audit_search("retry", kinds={"approaches"}) == \
            project.audit_search("retry", kinds=["approaches"])
        assert project.rows("SELECT id FROM dispatches", max_rows=np.int64(2)).rows == \
            project.rows("SELECT id FROM dispatches", max_rows=2).rows
        assert project.stats(7, now=dt.datetime(2026, 11, 28)) == \
            project.stats(days=7, now=dt.datetime(2026, 11, 28))


def test_one_project_answers_several_threads_at_once(world, monkeypatch, tmp_path):
    """A Project reads through one DuckDB connection: from several threads at once it failed
    with DuckDB's errors (ResourceInUse, a connection closed under a query by another
    thread's refresh). Each call now holds the project's lock: every thread gets the answer
    one thread alone gets."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.chdir(world.project)
    with Project.open(db=tmp_path / "s.duckdb") as project:
        want = (project.tables(), project.rows("SELECT count(*) FROM dispatches").rows,
                project.task_status("Cap webhook retries at 5 attempts"))

        def ask(i: int) -> tuple[Any, ...]:
            if i % 4 == 3:
                project.refresh()  # closes and reopens the connection the others read
            return (project.tables(), project.rows("SELECT count(*) FROM dispatches").rows,
                    project.task_status("Cap webhook retries at 5 attempts"))

        with ThreadPoolExecutor(6) as pool:
            got = list(pool.map(ask, range(24)))
    assert got == [want] * 24
