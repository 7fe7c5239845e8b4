"""`toolkit check` and toolkit.checks: every built-in check passes on a sound world and fails
on one built to break it; user checks from toolkit.yaml; the table, JSON and JUnit XML; exit
codes; a check that cannot run is that check's error and the others still run."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from pathlib import Path

import junitparser
import pytest

from tests._history_helpers import SideRepo
from tests._slop_helpers import entry, write_ledger
from tests._store_helpers import project_with_store
from toolkit import Project
from toolkit.checks import BUILTIN, Result, checks_for, run_checks, select

TODAY = "2026-06-01"
TOKEN = "ghp_" + "Ab1" * 12  # a GitHub token the redaction finder knows


project = project_with_store()  # the store's schema made: not what these tests are about


def settings(project, text: str = "", today: str = TODAY) -> None:
    (project.root / "toolkit.yaml").write_text(f'today: "{today}"\n{text}', encoding="utf-8")


def results(project, *names: str) -> dict[str, Result]:
    with Project.open(project.root) as p:
        checks = select(checks_for(p.config.checks), names)
        return {r.check.name: r for r in run_checks(p, checks)}


def one(project, name: str) -> Result:
    return results(project, name)[name]


@pytest.fixture(scope="module")
def _settled_project(_module_project):  # type: ignore[no-untyped-def]
    settings(_module_project)
    return _module_project


@pytest.fixture
def settled_project(_settled_project, shared_project):  # type: ignore[no-untyped-def]
    """``shared_project`` with the default settings (written once): for the tests that only
    read it (checks, the table, JSON); a test that changes a file uses ``project``."""
    return shared_project


def dispatch(db: Path, task: str, ts: str, verdict: str | None = None) -> None:
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, verdict) "
                 "VALUES (?, ?, 'fork', 'm', 'brief', ?)", (ts, task, verdict))
    conn.commit()
    conn.close()


# --------------------------------------------------------------------------- built-in checks

def test_every_builtin_check_has_a_rationale_level_and_tags():
    for c in BUILTIN:
        assert c.level in ("error", "warn") and c.tags, c.name
        assert len(c.rationale) > 60 and c.why.endswith("."), c.name
        assert (c.sql is None) != (c.finder is None), c.name


def test_the_fixture_world_passes_every_error_level_check(settled_project):
    for name, r in results(settled_project).items():
        assert r.status in ("pass", "warn"), (name, r.message, r.rows)


def test_stale_retries(project):
    settings(project)
    for _ in range(3):
        dispatch(project.audit_db, "Retry the flaky importer", "2026-05-01 10:00:00")
    r = one(project, "stale-retries")
    assert (r.status, r.count) == ("fail", 1)
    assert r.rows[0][:2] == ("Retry the flaky importer", 2)
    settings(project, "checks:\n  - name: stale-retries\n    days: 40\n")  # a threshold
    assert one(project, "stale-retries").status == "pass"
    settings(project)
    dispatch(project.audit_db, "Retry the flaky importer", "2026-05-02 10:00:00", "CONFIRMED")
    assert one(project, "stale-retries").status == "pass"  # it has its verdict now


def test_stale_pending(project):
    settings(project, today="2026-05-05")
    assert one(project, "stale-pending").status == "pass"
    settings(project)
    r = one(project, "stale-pending")
    assert (r.status, r.count) == ("warn", 1)  # a warning: warn level
    assert r.rows[0][1] == "Audit logging for admin endpoints"


def test_old_high_slop(project):
    settings(project)
    r = one(project, "old-high-slop")
    assert (r.status, r.count) == ("warn", 1)
    assert r.rows[0][:2] == ("9c1f4e07", "high")
    settings(project, "checks:\n  - name: old-high-slop\n    days: 60\n")
    assert one(project, "old-high-slop").status == "pass"


def test_meta_counts(project):
    settings(project)
    assert one(project, "meta-counts").status == "pass"
    meta = project.ledger / "meta.yaml"
    meta.write_text(meta.read_text().replace("patterns: 2", "patterns: 5"))
    r = one(project, "meta-counts")
    assert (r.status, r.count) == ("fail", 1)
    assert r.rows[0] == (str(meta), "meta.yaml says patterns has 5 entries; patterns.md has 2")


def test_malformed_entries(project):
    settings(project)
    assert one(project, "malformed-entries").status == "pass"
    with (project.ledger / "patterns.md").open("a") as f:
        f.write("\n---\n\n**Title:** Half an entry\n**Date:** 2026-05-03\n\n"
                "**Pattern:** no category, no confidence.\n")
    r = one(project, "malformed-entries")
    assert (r.status, r.count) == ("warn", 1)
    assert r.rows[0][2] == "Half an entry" and "Confidence" in r.rows[0][3]


def test_ledger_budget(project):
    settings(project)
    assert one(project, "ledger-budget").status == "pass"
    config = project.root / ".smith" / "config.json"
    data = json.loads(config.read_text())
    data["ledger"]["reconcile"]["thresholds"]["patterns_per_category_max"] = 1
    config.write_text(json.dumps(data))
    r = one(project, "ledger-budget")
    assert r.status == "warn"
    assert r.rows == [("patterns.md entries", 2, 1)]


def test_secrets_report_place_and_family_never_the_secret(project, cli_run):
    settings(project)
    assert one(project, "secrets").status == "pass"
    data = json.loads(project.slop.read_text())
    data["entries"][0]["description"] += f" Token used: {TOKEN}"
    project.slop.write_text(json.dumps(data, indent=2))
    r = one(project, "secrets")
    assert (r.status, r.count) == ("fail", 1)
    table, place, column, family = r.rows[0]
    assert (table, column, family) == ("slop_entries", "description", "github_token")
    assert re.fullmatch(re.escape(str(project.slop)) + r":\d+", place)
    junit = project.root / "out.xml"
    for args in (("check",), ("check", "--json"), ("check", "--junit-xml", str(junit))):
        out = cli_run(*args).output
        assert TOKEN not in out and "github_token" in out
    assert TOKEN not in junit.read_text()


def test_a_failing_row_shows_no_secret_split_by_an_invisible_character(project, cli_run):
    """A row value holding a token with a zero-width space inside (as pasted from a chat):
    the reports show the invisible character as ``<U+200B>``, so it must be redacted first,
    on the text a viewer reads whole, not after the marker has split the token in two."""
    settings(project)
    split = TOKEN[:10] + "\u200b" + TOKEN[10:]
    dispatch(project.audit_db, f"deploy with {split} today", "2026-05-01 10:00:00")
    junit = project.root / "out.xml"
    for args in (("check",), ("check", "--json"), ("check", "--junit-xml", str(junit))):
        out = cli_run(*args).output
        assert "deploy with [REDACTED] today" in out
        assert TOKEN[10:] not in out and TOKEN[:10] not in out
    assert "deploy with [REDACTED] today" in junit.read_text()
    assert TOKEN[10:] not in junit.read_text()


def test_the_secret_scan_finds_a_secret_among_many_rows(project):
    """Values are searched in chunks; a secret deep in a large table is found in its row."""
    settings(project)
    conn = sqlite3.connect(project.audit_db)
    conn.executemany("INSERT INTO actions (tier, category, description) VALUES (0, 'git', ?)",
                     [(f"commit {n}",) for n in range(5000)])
    ids = []
    for _ in range(2):  # the same text twice: each row is a place
        conn.execute("INSERT INTO actions (tier, category, description) VALUES (0, 'git', ?)",
                     (f"export GITHUB_TOKEN={TOKEN}",))
        ids.append(conn.execute("SELECT max(id) FROM actions").fetchone()[0])
    conn.commit()
    conn.close()
    r = one(project, "secrets")
    assert r.rows == [("actions", f"id {n}", "description", "github_token") for n in ids]


def test_the_secret_scan_keeps_what_it_saw_and_a_lost_damaged_or_stale_record_changes_nothing(
        project):
    """What each table gave is kept beside the store (its answer, under its source's load and
    columns and the finder's code; what the finder saw in each value): a table whose source
    did not change is not read again, yet a new secret in any source is still found, and a
    record that is lost, damaged or made by another finder gives the same answer as a first
    scan."""
    from toolkit import parsecache
    from toolkit.checks.builtin import _scan_key, table_slot

    settings(project)
    assert one(project, "secrets").status == "pass"
    with Project.open(project.root) as p:
        folder = p.config.parse_cache
    record = folder / f"{table_slot('slop_entries')}.marshal"
    assert record.is_file()
    data = json.loads(project.slop.read_text())
    data["entries"][0]["description"] += f" Token used: {TOKEN}"
    project.slop.write_text(json.dumps(data, indent=2))
    expected = one(project, "secrets")
    assert (expected.status, expected.count) == ("fail", 1)  # the changed value was scanned

    def same() -> None:
        r = one(project, "secrets")
        assert (r.status, r.count, r.rows) == (expected.status, expected.count, expected.rows)

    same()  # from the record
    # another source changes: the slop's secret is still reported, the new one found too
    conn = sqlite3.connect(project.audit_db)
    conn.execute("INSERT INTO actions (tier, category, description) VALUES (0, 'git', ?)",
                 (f"export GITHUB_TOKEN={TOKEN}",))
    conn.commit()
    conn.close()
    both = one(project, "secrets")
    assert sorted(r[0] for r in both.rows) == ["actions", "slop_entries"]
    assert [r for r in both.rows if r[0] == "slop_entries"] == expected.rows
    expected = both
    same()
    record.write_bytes(record.read_bytes()[:-7])  # cut short
    same()
    record.write_bytes(b"not a record")
    same()
    record.unlink()
    same()
    # another finder's record, claiming the table is clean: not used
    saved = parsecache.load(folder, table_slot("slop_entries"), _scan_key())
    assert saved and saved[1] and any(saved[2].values())
    parsecache.save(folder, table_slot("slop_entries"), ("secrets-scan/1", "another finder"),
                    (saved[0], [], {k: () for k in saved[2]}))
    same()


def test_interrupted_turns(project, isolated_env):
    settings(project)
    side = SideRepo.create(project.root, isolated_env / ".codesmith" / "snapshots")
    side.snapshot("pre-turn:1: add a helper")
    (project.root / "helper.py").write_text("x = 1\n")
    side.snapshot("post-turn:1: add a helper")
    assert one(project, "interrupted-turns").status == "pass"
    side.snapshot("pre-turn:2: tidy up")
    (project.root / "helper.py").write_text("x = 2\n")
    side.snapshot("tool:call_B1")
    r = one(project, "interrupted-turns")
    assert (r.status, r.count) == ("warn", 1)
    assert r.rows[0][2:] == (2, 2)  # turn 2, two snapshots


def test_slop_unloadable(project):
    settings(project)
    assert one(project, "slop-unloadable").status == "pass"
    write_ledger(project.slop, [entry(1)], bare=True)
    r = one(project, "slop-unloadable")
    assert (r.status, r.count) == ("fail", 1)
    assert r.rows[0][2] == 'top level is a bare array, not {"entries": [...]}'


# --------------------------------------------------------------------------- user checks

USER = """checks:
  - name: no-critical-slop
    sql: SELECT short_id, title FROM slop_entries WHERE severity = 'critical'
    description: No critical slop is open.
  - name: some-dispatches
    sql: SELECT id FROM dispatches
    expect: count >= 1
    level: warn
  - name: few-approaches
    sql: SELECT id FROM approaches
    expect: count < 1
    level: warn
"""


def test_user_checks_from_toolkit_yaml(project):
    settings(project, USER)
    got = results(project, "user")
    assert set(got) == {"no-critical-slop", "some-dispatches", "few-approaches"}
    assert got["no-critical-slop"].status == "pass"
    assert got["some-dispatches"].status == "pass"
    assert got["few-approaches"].status == "warn" and got["few-approaches"].count > 0


@pytest.mark.parametrize("end", [";", " ;", "\n      ;", "; -- the end", " -- note\n      ;"])
def test_a_check_whose_sql_ends_with_a_semicolon_runs_as_without_it(project, end):
    # the query is counted inside a subquery: its closing ";" (and comments after) must
    # not end up inside the parentheses
    settings(project, "checks:\n  - name: some-dispatches\n    sql: |\n"
             f"      SELECT id FROM dispatches WHERE ';' = ';'{end}\n    expect: count >= 1\n")
    got = results(project, "user")["some-dispatches"]
    assert got.status == "pass", got.message
    assert got.count > 0


def test_a_broken_check_is_its_own_error_and_the_others_run(project, cli_run):
    settings(project, USER + "  - name: typo\n    sql: SELECT * FROM no_such_table\n"
             "  - name: slow\n    sql: SELECT count(*) FROM range(100000000000)\n")
    result = cli_run("check", "--select", "user", "--timeout", "0.5", "--json")
    assert result.exit_code == 1
    got = {c["name"]: c for c in json.loads(result.output)["checks"]}
    assert got["typo"]["status"] == "error"
    assert "no_such_table" in got["typo"]["message"]
    assert got["slow"]["status"] == "error"
    assert "timeout" in got["slow"]["message"]
    assert got["no-critical-slop"]["status"] == "pass"


def test_a_checks_error_quoting_a_wrapped_token_shows_no_part_of_it(project, cli_run):
    """DuckDB's error quotes the value that failed, line breaks and all; the check's message
    was the error's first line, cut inside the value, so the first part of a token wrapped
    across the break was shown alone, which the redactor cannot tell from a word (both parts
    are needed). The value is now kept whole on the one line, its break written \\n."""
    with contextlib.closing(sqlite3.connect(project.audit_db)) as conn, conn:
        conn.execute("INSERT INTO actions (ts, tier, category, description) VALUES "
                     "('2026-05-09 10:00:00', 1, 'wrapped', ?)",
                     ["The key AKIAQW11XK2M\nW9PLR4TN"])
    settings(project, USER + "  - name: wrapped\n    sql: SELECT CAST(description AS INTEGER) "
             "FROM actions WHERE category = 'wrapped'\n")
    result = cli_run("check", "--select", "user", "--json")
    got = {c["name"]: c for c in json.loads(result.output)["checks"]}["wrapped"]
    assert got["status"] == "error" and "Could not convert string" in got["message"]
    assert "AKIAQW11XK2M" not in result.output and "[REDACTED]" in got["message"], got["message"]


@pytest.mark.parametrize("entry_text, message", [
    ("  - name: nosql\n    description: x\n",
     "check 'nosql' has no sql (a user check is a SELECT of the failing rows)"),
    ("  - name: writer\n    sql: DELETE FROM actions\n",
     "check 'writer': only one read-only SELECT is allowed"),
    ("  - name: two\n    sql: SELECT 1; SELECT 2\n",
     "check 'two': only one read-only SELECT is allowed"),
    ("  - name: loud\n    sql: SELECT 1\n    level: fatal\n",
     "check 'loud': unknown level 'fatal' (use error or warn)"),
    ("  - name: odd\n    sql: SELECT 1\n    expect: some rows\n",
     "check 'odd': expect 'some rows' is not 'no rows' or 'count <op> N'"),
    ("  - sql: SELECT 1\n", "checks entry 1 has no name"),
    ("  - name: stale-retries\n    days: soon\n",
     "check 'stale-retries': days must be a whole number >= 0, not 'soon'"),
    ("  - name: stale-pending\n    days: 100000000000000000000\n",  # failed when it ran
     "check 'stale-pending': days must be at most 1,000,000, not 100,000,000,000,000,000,000"),
    ("  - name: stale-retries\n    sql: SELECT 1\n",
     "check 'stale-retries': unknown setting(s) sql"),
])
def test_a_bad_checks_entry_is_a_one_line_usage_error(project, cli_run, entry_text, message):
    settings(project, "checks:\n" + entry_text)
    result = cli_run("check")
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("Error: ") and message in result.output


def test_checks_must_be_a_list(project, cli_run):
    settings(project, "checks: {name: x}\n")
    result = cli_run("status")
    assert result.exit_code == 2 and "checks must be a list of checks" in result.output


# --------------------------------------------------------------------------- the command

def test_exit_codes(project, cli_run):
    settings(project)
    assert cli_run("check").exit_code == 0  # two warnings: warnings never fail
    assert cli_run("check", "--select", "ledger,security").exit_code == 0
    dispatch(project.audit_db, "x", "2026-05-01 10:00:00")
    dispatch(project.audit_db, "x", "2026-05-01 11:00:00")
    dispatch(project.audit_db, "x", "2026-05-01 12:00:00")
    assert cli_run("check").exit_code == 1
    assert cli_run("check", "--skip", "stale-retries").exit_code == 0
    bad = cli_run("check", "--select", "nope")
    assert bad.exit_code == 2 and "no check or tag named nope" in bad.output


def test_table_shows_status_count_first_rows_and_why(settled_project, cli_run):
    out = cli_run("check").output
    lines = out.splitlines()
    assert lines[0].split() == ["check", "status", "rows", "why"]
    row = next(line for line in lines if line.startswith("stale-pending"))
    assert row.split()[1:3] == ["WARN", "1"]
    assert row.endswith("A dispatch without a verdict is a subagent's result nobody checked.")
    following = lines[lines.index(row) + 1]
    assert following.startswith("    3 | Audit logging for admin endpoints")
    assert lines[-1] == "9 checks: 7 passed, 0 failed, 2 warnings, 0 errors"


def test_list_shows_every_check(project, cli_run):
    long_name = "no-dispatch-waits-on-a-verdict-for-long"  # past the built-in names' width
    settings(project, USER + f"  - name: {long_name}\n    sql: SELECT id FROM dispatches\n")
    out = cli_run("check", "--list").output
    lines = out.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == [c.name for c in BUILTIN] + ["no-critical-slop", "some-dispatches",
                                                  "few-approaches", long_name]
    # one column each: every level starts where the longest name's row has it
    at = len(long_name) + 1
    assert [line[at:at + 5].rstrip() for line in lines] == [c.level for c in BUILTIN] + \
        ["error", "warn", "warn", "error"]


def test_junit_xml_is_what_ci_reads(project, cli_run):
    settings(project, USER + "  - name: typo\n    sql: SELECT * FROM nowhere\n")
    for _ in range(3):
        dispatch(project.audit_db, "x", "2026-05-01 10:00:00")
    path = project.root / "reports" / "checks.xml"
    path.parent.mkdir()
    result = cli_run("check", "--junit-xml", str(path))
    assert result.exit_code == 1
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (13, 1, 1, 3)
    cases = {case.name: case for case in suite}
    assert len(cases) == 13
    [failure] = cases["stale-retries"].result
    assert isinstance(failure, junitparser.Failure)
    assert failure.message == "1 failing row(s)"
    [error] = cases["typo"].result
    assert isinstance(error, junitparser.Error) and "nowhere" in error.message
    [skipped] = cases["stale-pending"].result
    assert isinstance(skipped, junitparser.Skipped)
    assert cases["secrets"].is_passed
    assert not list(path.parent.glob(".*"))  # written atomically: no temp file left


def test_json_output(settled_project, cli_run):
    data = json.loads(cli_run("check", "--json", "--select", "slop").output)
    assert data["ok"] is True
    assert data["totals"] == {"pass": 1, "fail": 0, "warn": 1, "error": 0}
    slop = {c["name"]: c for c in data["checks"]}["old-high-slop"]
    assert slop["rows"][0]["short_id"] == "9c1f4e07"
    assert slop["thresholds"] == {"days": 30} and slop["level"] == "warn"


def test_check_reads_only(settled_project, cli_run):
    """Checks leave the sources alone (the store is refreshed, as by every command)."""
    from tests.conftest import tree_digest

    before = tree_digest(settled_project.root / ".smith")
    cli_run("check")
    assert tree_digest(settled_project.root / ".smith") == before


def test_a_store_that_is_not_one_is_bad_data(project, cli_run):
    settings(project)
    bogus = project.root / "not-a-store.duckdb"
    bogus.write_text("id,name\n1,x\n")
    result = cli_run("--db", str(bogus), "check")
    assert result.exit_code == 65
    assert result.output.startswith("Error: ") and "not a toolkit store" in result.output
    assert bogus.read_text() == "id,name\n1,x\n"


def test_junit_xml_into_a_missing_folder_is_refused_before_running(bare_project, cli_run):
    settings(bare_project)
    result = cli_run("check", "--junit-xml", str(bare_project.root / "nowhere" / "checks.xml"))
    assert result.exit_code == 2
    assert "nowhere does not exist; nothing was run" in result.output
    assert not (bare_project.root / ".toolkit").exists()  # the store was not even loaded


def test_a_finder_that_cannot_read_its_file_is_that_checks_error(project, cli_run):
    settings(project)
    (project.root / ".smith" / "config.json").write_text("{not json")
    result = cli_run("check", "--select", "ledger")
    assert result.exit_code == 0  # ledger-budget is warn level: its error does not fail the run
    lines = result.output.splitlines()
    row = next(line for line in lines if line.startswith("ledger-budget"))
    assert row.split()[1:3] == ["ERROR", "0"]
    assert "config.json" in lines[lines.index(row) + 1]
    assert next(line for line in lines if line.startswith("meta-counts")).split()[1] == "PASS"


def test_ledger_checks_answer_from_the_store_as_the_files_do(project, monkeypatch):
    """meta-counts and ledger-budget read what the ledger's load recorded (no second parse of
    the ledger), and give what the files give: reconcile's own budget check, the reader's
    meta.yaml rule."""
    from toolkit import reconcile
    from toolkit.sources import smith

    settings(project)
    with (project.ledger / "patterns.md").open("a", encoding="utf-8") as f:
        f.write("\n---\n\n**Title:** Caf\u00e9\u00a0words \u2003apart\n**Date:** 2026-05-03\n"
                "**Category:** testing\n**Confidence:** low\n**Source reflections:** 1\n\n"
                "**Context:** Non-breaking\u00a0and em\u2003spaces.\n\n**Pattern:** Count them."
                "\n\n**Evidence:**\n- x\n\n**Related:** None\n")
    config = project.root / ".smith" / "config.json"
    data = json.loads(config.read_text())
    data["ledger"]["reconcile"]["thresholds"].update(
        total_tokens_max=10, single_file_tokens_max=10, patterns_per_category_max=1)
    config.write_text(json.dumps(data))
    with Project.open(project.root) as p:  # loads the store
        from_files = [(c.label.split(" > ")[0], c.value, c.limit)
                      for c in reconcile.budget_overruns(p.config)]
        meta = smith.meta_disagreements(smith.read_meta(project.ledger),
                                        smith.read_ledger(project.ledger, tolerate_large=True))

    def no_parse(*args, **kwargs):
        raise AssertionError("the ledger was parsed again")

    monkeypatch.setattr(smith, "read_ledger", no_parse)
    with Project.open(project.root, refresh=False) as p:
        got = {r.check.name: r for r in run_checks(
            p, select(checks_for(p.config.checks), ["meta-counts", "ledger-budget"]))}
    budget = got["ledger-budget"]
    assert budget.status == "warn" and budget.count == len(from_files) > 2
    assert budget.rows == from_files[:len(budget.rows)]
    assert got["meta-counts"].rows == [(d.path, d.message) for d in meta] != []


def test_a_check_that_runs_out_of_memory_names_the_projects_memory_limit(project):
    """A check is a query on the project's locked-down connection: one that needs more than
    its memory limit is an error naming that limit (it named the default 1GB whatever the
    Project was opened with)."""
    from toolkit.checks import Check

    big = Check(name="big-sort", description="a row", rationale="Sorts too much.",
                sql="SELECT r FROM (SELECT range AS r, random() AS x FROM range(20000000) "
                    "ORDER BY x)")
    with Project.open(project.root, memory_limit="100MB") as p:
        [result] = run_checks(p, [big], timeout=120)
    assert (result.status, result.message) == (
        "error", "query stopped at the 100MB memory limit. Add a LIMIT or aggregate first")
