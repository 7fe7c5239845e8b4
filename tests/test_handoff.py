"""`toolkit handoff`: the redacted report, "since the last handoff", site links, escaping."""

from __future__ import annotations

import datetime as dt
import json
import re
from html.parser import HTMLParser

import pytest

from tests._publish_helpers import (
    NOW,
    add_approach,
    add_dispatch,
    add_slop,
    set_confidence,
    slop_entry,
)
from tests._store_helpers import project_with_store
from toolkit.handoff import md_block, md_text, site_link
from toolkit.loaders import SOURCES
from toolkit.mdsafe import unescape as unescape_markdown

project = project_with_store()  # the store's schema made: not what these tests are about


def run_handoff(project, *, since=None, now=NOW, site_url=None, full=False):
    from toolkit import config
    from toolkit.handoff import export_report
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    cfg = config.resolve()
    if site_url:
        cfg = cfg.with_overrides(site_url=site_url)
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        return export_report(store, cfg, since=since, now=now, full=full)


def section(text: str, heading_start: str) -> str:
    start = text.index(heading_start)
    end = text.find("\n## ", start + 3)
    return text[start:] if end < 0 else text[start:end]


def ledger_lines(text: str, group: str) -> list[str]:
    """The bullet lines of one group ("New", "Promoted", "Removed"...) of the ledger section."""
    part = section(text, "## What the ledger learned")
    start = part.index(f"### {group} (")
    end = part.find("\n### ", start + 4)
    block = part[start:] if end < 0 else part[start:end]
    return [line for line in block.splitlines() if line.startswith("- ")]


# --------------------------------------------------------------------------- since last handoff

def test_first_handoff_covers_the_last_7_days_of_activity_and_a_rerun_is_identical(project):
    first = run_handoff(project)
    second = run_handoff(project, now=NOW + dt.timedelta(days=2))

    assert first == second  # nothing changed: same report, whatever the clock says
    # the newest record is the slop ledger's 2026-05-04: the window is 04-28 .. 05-04
    assert "## What the ledger learned in the 7 days to 2026-05-04 (3)" in first
    assert "(this is the first handoff: the last 7 days of activity; `--since` sets another " \
           "window)" in first
    assert ledger_lines(first, "New or reinforced") == [
        "- Run the migration dry-run before applying schema changes — patterns · medium · "
        "2026-05-02",
        "- Redis client drops pipelined commands after a failover — edge-cases · medium · "
        "2026-04-30",
        "- Grep the route table before adding a new endpoint — patterns · low · 2026-04-29"]
    assert "Editing an applied migration in place" not in first  # dated 04-25: before it
    state = json.loads((project.root / ".toolkit" / "handoff-state.json").read_text())
    assert state["last"]["at"] == "2026-05-06 09:30 UTC"
    assert state["last"]["ledger"]["patterns/grep-the-route-table-before-adding-a-new-endpoint"][
        "confidence"] == "low"


def test_the_newest_record_is_found_in_utc_whatever_a_timestamps_offset(project):
    """A slop entry updated at 2026-05-04T23:59:00-08:00 is 2026-05-05 07:59 UTC: newer than
    the fixture's 2026-05-04 14:20 UTC, though its text sorts below 2026-05-05. "data as of"
    and the first handoff's window end there."""
    add_slop(project.slop, slop_entry("Late in Los Angeles",
                                      created_at="2026-05-04T23:59:00-08:00",
                                      updated_at="2026-05-04T23:59:00-08:00"))
    text = run_handoff(project)
    assert "data as of 2026-05-05 07:59 (UTC)" in text
    assert "## What the ledger learned in the 7 days to 2026-05-05 (" in text


def test_the_state_is_stamped_by_the_toolkits_clock_not_by_today(project, cli_run,
                                                                  monkeypatch):
    # one clock (toolkit.clock): SOURCE_DATE_EPOCH is the time, as for the site and slop
    # export; --today is the day ages count to, not a time
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1780000000")  # 2026-05-28 20:26:40 UTC
    assert cli_run("--today", "2026-06-01", "handoff").exit_code == 0
    state = json.loads((project.root / ".toolkit" / "handoff-state.json").read_text())
    assert state["last"]["at"] == "2026-05-28 20:26 UTC"


def test_promoted_and_demoted_since_the_last_handoff_say_which_handoff(project):
    run_handoff(project)
    set_confidence(project.ledger / "patterns.md",
                   "Grep the route table before adding a new endpoint", "low", "medium")
    set_confidence(project.ledger / "patterns.md",
                   "Run the migration dry-run before applying schema changes", "medium", "low")

    later = NOW + dt.timedelta(days=1)
    report = run_handoff(project, now=later)
    again = run_handoff(project, now=later + dt.timedelta(hours=5))

    assert ("## What the ledger learned since the handoff of 2026-05-06 09:30 UTC (2)"
            in report)
    assert "(the last handoff, from .toolkit/handoff-state.json)" in report
    assert ledger_lines(report, "Promoted") == [
        "- Grep the route table before adding a new endpoint — patterns · low → medium · "
        "2026-04-29"]
    assert ledger_lines(report, "Demoted") == [
        "- Run the migration dry-run before applying schema changes — patterns · medium → low"
        " · 2026-05-02"]
    assert "2 ledger changes since the handoff of 2026-05-06 09:30 UTC: 2 promoted" not in report
    assert "**2** ledger changes since the handoff of 2026-05-06 09:30 UTC: 1 promoted, " \
           "1 demoted" in report
    assert again == report  # the baseline stays put while the ledger does


def test_entries_gone_from_the_ledger_are_reported_as_removed(project):
    """An entry deleted by hand is listed as removed (the ledger does not say how an entry
    went: by a prune, a reset or an edit)."""
    run_handoff(project)
    path = project.ledger / "antipatterns.md"
    text = path.read_text(encoding="utf-8")
    start = text.index("**Title:** Editing an applied migration in place")
    end = text.find("\n---", start)
    path.write_text(text[:start] + (text[end + 4:] if end >= 0 else ""), encoding="utf-8")

    report = run_handoff(project, now=NOW + dt.timedelta(days=1))

    assert ledger_lines(report, "Removed") == [
        "- Editing an applied migration in place — antipatterns · was low"]


def test_a_reset_ledgers_entries_are_removed_not_pruned(project, cli_run):
    """After `ledger reset`, every entry the last handoff saw is listed as removed; the
    report called them pruned, which no prune did."""
    from toolkit.sources.smith import read_vault

    run_handoff(project)
    count = len(read_vault(project.root / ".smith" / "vault").entries)
    assert cli_run("ledger", "reset", "--yes").exit_code == 0

    report = run_handoff(project, now=NOW + dt.timedelta(days=1))

    assert len(ledger_lines(report, "Removed")) == count > 0
    assert "runed" not in section(report, "## What the ledger learned")


def test_since_date_lists_entries_dated_on_or_after_and_keeps_the_state(project):
    report = run_handoff(project, since=dt.date(2026, 4, 30))

    assert "## What the ledger learned since 2026-04-30 (2)" in report
    assert "ledger changes since 2026-04-30 (`--since`)" in report
    titles = [line.split(" — ")[0] for line in ledger_lines(report, "New or reinforced")]
    assert titles == ["- Run the migration dry-run before applying schema changes",
                      "- Redis client drops pipelined commands after a failover"]
    assert not (project.root / ".toolkit" / "handoff-state.json").exists()


def test_cli_handoff_since_a_date_is_a_one_off_view_and_a_plain_one_is_remembered(
        project, cli_run):
    """`toolkit handoff --since DATE` remembers nothing (no state file is made, and one
    that is there is left as it was); a plain handoff is remembered."""
    state = project.root / ".toolkit" / "handoff-state.json"
    result = cli_run("handoff", "--since", "2026-04-30")
    assert result.exit_code == 0, result.output
    assert "ledger changes since 2026-04-30 (`--since`)" in result.stdout
    assert not state.exists()
    first = cli_run("handoff")
    assert first.exit_code == 0, first.output
    assert "(this is the first handoff:" in first.stdout
    remembered = state.read_bytes()
    assert json.loads(remembered)["last"]["ledger"]
    result = cli_run("handoff", "--since", "2026-04-30")
    assert result.exit_code == 0, result.output
    assert state.read_bytes() == remembered


def test_a_damaged_state_file_counts_as_the_first_handoff(project):
    state = project.root / ".toolkit" / "handoff-state.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{not json")

    report = run_handoff(project)

    assert "(this is the first handoff:" in report
    assert json.loads(state.read_text())["version"] == 1


def test_a_report_that_could_not_be_printed_is_not_remembered_as_handed_off(project, cli_run):
    """The handoff was remembered before it was printed: with its output on a full disk
    (/dev/full), or a run killed between the two, the next handoff covered only what came
    after a report nobody read. Now it is remembered once printed."""
    import os
    import subprocess
    import sys

    state = project.root / ".toolkit" / "handoff-state.json"
    run = [sys.executable, "-m", "toolkit", "handoff"]
    env = {**os.environ, "TOOLKIT_NOW": "2026-05-10T12:00:00"}
    with open("/dev/full", "w") as full:
        failed = subprocess.run(run, cwd=project.root, env=env, stdout=full,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1] == "Error: No space left on device"
    assert not state.exists()
    printed = cli_run("handoff", env={"TOOLKIT_NOW": "2026-05-10T12:00:00"})
    assert printed.exit_code == 0, printed.stderr
    assert "(this is the first handoff:" in printed.stdout
    assert json.loads(state.read_text())["version"] == 1


def test_the_state_files_replace_a_link_never_write_through_it(project, cli_run, tmp_path):
    # .toolkit/handoff-state.json (or site-build.json) planted as a link to a file of the
    # user's: the handoff (the site build) replaced that file with its JSON state
    theirs = tmp_path / "theirs"
    theirs.write_text("export PATH=mine\n")
    state_dir = project.root / ".toolkit"
    state_dir.mkdir(exist_ok=True)
    for name, args in (("handoff-state.json", ("handoff",)),
                       ("site-build.json", ("build-site", "--no-analyses"))):
        link = state_dir / name
        link.symlink_to(theirs)
        result = cli_run(*args)
        assert result.exit_code == 0, result.output
        assert theirs.read_text() == "export PATH=mine\n"
        assert not link.is_symlink() and isinstance(json.loads(link.read_text()), dict)


# --------------------------------------------------------------------------- the sections

def _with_attention(project):
    for _ in range(3):
        add_dispatch(project.audit_db, "Fix flaky invoice test", summary="try again")
    add_dispatch(project.audit_db, "Split the router", verdict="REFUTED",
                 notes="the split broke auth middleware order", ts="2026-05-05 12:00:00")
    add_approach(project.audit_db, "Fix flaky invoice test", "Retry with a longer timeout",
                 "DEAD_END", "Still flaky: the race is in the fixture")
    add_approach(project.audit_db, "Fix flaky invoice test", "Mark it xfail", "NO_GO",
                 "Hides a real ordering bug", ts="2026-05-05 11:30:00")
    add_approach(project.audit_db, "Split the router", "Move auth into each route", "DEAD_END",
                 "Forty call sites to change")


def test_sections_come_in_order_of_urgency(project):
    _with_attention(project)
    report = run_handoff(project)

    headings = [line for line in report.splitlines() if line.startswith("## ")]
    assert [h.split(" (")[0] for h in headings] == [
        "## Summary", "## Dispatches awaiting a verdict", "## Tasks over the retry limit",
        "## What the ledger learned in the 7 days to 2026-05-05", "## Debt: open slop"]
    summary = section(report, "## Summary")
    assert "- **4** dispatches await a verdict (1 refuted so far)" in summary
    assert "- **1** task is over the retry limit, with **2** dead ends and no-gos recorded " \
           "against it" in summary
    assert "- **2** open slop items: **0** critical, **1** high" in summary


def test_each_task_over_the_limit_has_its_dead_ends_right_under_it(project):
    _with_attention(project)
    report = run_handoff(project)

    over = section(report, "## Tasks over the retry limit")
    assert over.startswith("## Tasks over the retry limit (1)")
    block = over[over.index("### Fix flaky invoice test"):]
    assert block.splitlines()[:6] == [
        "### Fix flaky invoice test", "",
        "Dispatches 3 · Retries 2 · Last verdict PENDING · Last dispatch 2026-05-05 10:00:00",
        "",
        "- **No-go** (2026-05-05 11:30:00): Mark it xfail — Hides a real ordering bug",
        "- **Dead end** (2026-05-05 11:00:00): Retry with a longer timeout — Still flaky: the "
        "race is in the fixture"]
    # the dead ends of tasks under the limit are counted, with where to find them
    assert ("_3 more dead ends and no-gos belong to 3 tasks under the limit: see "
            "`toolkit audit approaches TASK` or `toolkit handoff --full`._") in over
    pending = section(report, "## Dispatches awaiting a verdict")
    assert pending.startswith("## Dispatches awaiting a verdict (4)")
    assert "| 6 | 2026-05-05 10:00:00 | Fix flaky invoice test | general-purpose | sonnet | " \
           "try again |" in pending
    assert "REFUTED" not in pending and "_1 dispatch was refuted: see " in pending


def test_an_over_limit_tasks_dead_ends_are_shown_however_many_newer_ones_other_tasks_have(
        project):
    """The dead ends under an over-limit task, and the counts of the summary and of the tasks
    under the limit, are asked of every approach: more than the report's APPROACH_ROWS newer
    ones of another task do not hide them (the report said "No dead ends or no-gos recorded"
    under the task, and "0" in its summary)."""
    import sqlite3

    from toolkit.handoff import APPROACH_ROWS

    add_approach(project.audit_db, "Fix flaky invoice test", "Pin the fixture's seed",
                 "DEAD_END", "The seed was not the race", ts="2026-05-04 09:00:00")
    _with_attention(project)
    newer = APPROACH_ROWS + 5
    with sqlite3.connect(project.audit_db) as conn:
        conn.executemany(
            "INSERT INTO approaches (ts, task, approach, outcome, reason) VALUES (?, ?, ?, ?, ?)",
            [("2026-05-05 23:00:00", "Tune the CI cache", f"Attempt {i}", "DEAD_END", "no")
             for i in range(newer)])
    conn.close()
    report = run_handoff(project)

    assert "- **1** task is over the retry limit, with **3** dead ends and no-gos recorded " \
           "against it" in section(report, "## Summary")
    over = section(report, "## Tasks over the retry limit")
    block = over[over.index("### Fix flaky invoice test"):]
    assert block.splitlines()[4:7] == [
        "- **No-go** (2026-05-05 11:30:00): Mark it xfail — Hides a real ordering bug",
        "- **Dead end** (2026-05-05 11:00:00): Retry with a longer timeout — Still flaky: the "
        "race is in the fixture",
        "- _1 more in `toolkit audit approaches` for this task._"]
    # the 3 of 3 tasks under the limit without them (the test above), and the newer ones
    assert (f"_{newer + 3} more dead ends and no-gos belong to 4 tasks under the limit: see "
            "`toolkit audit approaches TASK` or `toolkit handoff --full`._") in over


def test_the_tables_are_the_sites_tables(project):
    """The pending and over-limit tables come from one builder each (toolkit.reports)."""
    from toolkit import queries
    from toolkit.reports import Ref, over_limit_table, pending_dispatches, pending_table

    _with_attention(project)
    report = run_handoff(project, site_url="https://docs.example.com/s")
    from toolkit import config
    from toolkit.store import Store

    with Store.open(config.resolve().db_path, sources=SOURCES) as store:
        tasks, dispatches = queries.site_task_status(store), queries.site_dispatches(store)

    def ref(task):
        return Ref(task, "x.md")

    over = over_limit_table(tasks, ref, wide=False)
    assert [r[0].text for r in over.rows] == ["Fix flaky invoice test"]
    assert over.columns == ("Task", "Dispatches", "Retries", "Last verdict", "Last dispatch")
    pending = pending_table(pending_dispatches(dispatches), ref)
    assert [r[0] for r in pending.rows] == [6, 5, 4, 3]
    rows = [line for line in section(report, "## Dispatches awaiting").splitlines()
            if line.startswith("| ") and not line.startswith("| Dispatch")]
    assert [int(line.split(" | ")[0][2:]) for line in rows] == [6, 5, 4, 3]
    assert "| " + " | ".join(pending.columns) + " |" in report


def test_debt_is_the_bucket_table_and_the_critical_and_high_items(project):
    add_slop(project.slop, slop_entry("Orphaned feature flag in billing", severity="critical"),
             slop_entry("Unused helper in utils", severity="low"))
    report = run_handoff(project)
    debt = section(report, "## Debt: open slop")

    assert debt.startswith("## Debt: open slop (4)")
    assert "| retained\\_compatibility | 0 | 0 | 1 | 0 | 0 | 1 |" in debt
    assert "| suspected\\_dead\\_code | 1 | 0 | 0 | 1 | 0 | 2 |" in debt
    lines = [line for line in debt.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in lines] == ["- **critical** " + lines[0].split(
        "** ")[1].split(":")[0], "- **high** 9c1f4e07"]
    assert lines[0].endswith("Orphaned feature flag in billing (suspected\\_dead\\_code, open)")
    assert lines[1] == ("- **high** 9c1f4e07: No linter rule catches unwrap() in request "
                        "handlers (tool\\_gaps, in progress)")
    assert ("_The other 2 open items (1 medium, 1 low): `toolkit slop query --status open` "
            "(and `--status in_progress`)._") in debt
    assert "Unused helper in utils" not in report  # counted, not listed


def test_the_bucket_table_keeps_the_largest_buckets_and_sums_the_rest(project):
    # free-text buckets: 5,000 distinct ones made a 400 KB report and a 2.6 MB site page
    from toolkit.handoff import BUCKET_ROWS

    add_slop(project.slop, *(slop_entry(f"Big bucket item {i}", bucket="big_one", severity="low")
                             for i in range(3)),
             *(slop_entry(f"Odd item {i}", bucket=f"odd-bucket-{i:03d}", severity="info")
               for i in range(BUCKET_ROWS + 20)))
    debt = section(run_handoff(project), "## Debt: open slop")

    rows = [line for line in debt.splitlines()
            if line.startswith("| ") and not line.startswith("| Bucket")]
    assert len(rows) == BUCKET_ROWS + 1
    assert "| big\\_one | 0 | 0 | 0 | 3 | 0 | 3 |" in rows  # the largest bucket is kept
    # the rest in one row (the fixture's 2 open items are in 2 buckets: 53 buckets in all),
    # whose counts keep the totals exact
    assert rows[-1].startswith(f"| _{53 - BUCKET_ROWS} other buckets_ | ")
    assert sum(int(r.split(" | ")[-1].rstrip(" |")) for r in rows) == 2 + 3 + BUCKET_ROWS + 20
    assert debt.startswith(f"## Debt: open slop ({2 + 3 + BUCKET_ROWS + 20})")


def test_full_keeps_the_complete_listing_in_codesmith_layout(project, cli_run):
    short = cli_run("handoff").stdout
    full = cli_run("handoff", "--full").stdout

    assert full.startswith(short.rstrip("\n"))
    slop = section(full, "## All open slop")
    assert slop.startswith("## All open slop (2)")
    assert ("### retained_compatibility\n\n"
            "| ID | Severity | Confidence | Status | Title | Source |") in slop
    assert "#### 4b7e2c91 — Legacy token header still accepted alongside bearer auth" in slop
    assert "| 9c1f4e07 | High | Certain | InProgress |" in slop
    assert "e0a95d1f" not in full  # WontFix is not open
    for heading in ("## All ledger changes", "## All refuted and pending dispatches",
                    "## All dead ends and no-gos"):
        assert heading in full and heading not in short


def test_site_links_when_a_site_url_is_configured(project):
    _with_attention(project)
    add_slop(project.slop, slop_entry("Orphaned feature flag in billing", severity="critical"))
    report = run_handoff(project, site_url="https://docs.example.com/ledger-site/")

    site = "https://docs.example.com/ledger-site"
    assert ("[Run the migration dry-run before applying schema changes]"
            f"({site}/ledger/patterns/run-the-migration-dry-run-before-applying-schema-changes/)"
            ) in report
    assert f"- **high** [9c1f4e07]({site}/slop/9c1f4e07/): No linter" in report
    assert f"### [Fix flaky invoice test]({site}/audit/tasks/fix-flaky-invoice-test/)" in report
    assert f"see [the dispatch report]({site}/audit/dispatches/) or" in report
    assert (f"[open slop on the site]({site}/slop/) · "
            f"[slop_entries.csv]({site}/data/slop_entries.csv)") in report
    assert f"[this report on the site]({site}/handoff/)" in report


def test_site_link_scheme():
    base = "https://x.example/site"
    assert site_link(None, "ledger", "patterns/a") is None
    assert site_link("javascript:alert(1)", "slop", "abc") is None
    assert site_link(base + "/", "ledger", "edge-cases/redis-drops") == \
        "https://x.example/site/ledger/edge-cases/redis-drops/"
    assert site_link(base, "slop", "4b7e2c91") == "https://x.example/site/slop/4b7e2c91/"
    assert site_link(base, "task", "Fix: the ../../etc/passwd task") == \
        "https://x.example/site/audit/tasks/fix-the-etc-passwd-task/"
    assert site_link(base, "handoff") == "https://x.example/site/handoff/"
    assert site_link(base, "page", "audit/dispatches.md#pending-verification") == \
        "https://x.example/site/audit/dispatches/#pending-verification"
    assert site_link(base, "page", "data/slop_entries.csv") == \
        "https://x.example/site/data/slop_entries.csv"


# --------------------------------------------------------------------------- hostile text

def test_ai_written_text_renders_as_literal_text(project):
    add_slop(project.slop, slop_entry(
        "<script>alert(1)</script> ping @octocat | pipe",
        description="```\n# Not a heading\n- not a list\n1. nor this\n---\n<img src=x onerror=y>",
        severity="critical"))
    add_dispatch(project.audit_db, "[x](javascript:alert(1)) @team", verdict="REFUTED")

    report = run_handoff(project, full=True)

    assert "<script" not in report and "<img" not in report
    # a would-be mention sits in a code span (GitHub notifies no one; the text copies intact)
    assert "`@octocat`" in report and "`@team`" in report
    assert not re.search(r"(?<![A-Za-z0-9`])@[A-Za-z0-9]", report)
    assert not re.search(r"(?<!\\)\]\(javascript:", report)
    lines = report.splitlines()
    assert "# Not a heading" not in lines and "```" not in lines and "---" in lines
    assert "\\# Not a heading" in lines and "\\- not a list" in lines and "1\\. nor this" in lines
    # the title's pipe does not break the CodeSmith table row
    row = next(line for line in lines if line.startswith("| ") and "script" in line)
    assert row.count(" | ") == 5


def test_addresses_stay_copyable_and_only_mentions_are_wrapped():
    text = "mail jane.doe@example.com, clone ssh://git@github.com/acme/api.git, ask @octocat"
    out = md_text(text)
    assert "jane.doe@example.com" in out and "ssh://git@github.com/acme/api.git" in out
    assert "`@octocat`" in out
    assert "\u200b" not in out and "&#8203;" not in out
    assert md_text("@ alone, a@b") == "@ alone, a@b"


def test_escaping_round_trips_for_the_secret_scan():
    text = "ghp_abc_def *x* [y](z) <b> @me 1. a | b & c"
    assert unescape_markdown(md_text(text)) == text
    assert unescape_markdown(md_block("- item\n1) two\n=== x")) == "- item\n1) two\n=== x"


def test_secrets_are_redacted_in_the_report(project):
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    add_slop(project.slop, slop_entry(f"Leaked token {token}", severity="high",
                                      description=f"export GH={token}"))
    for full in (False, True):  # the title is in the short report, the description in --full
        report = run_handoff(project, full=full)
        assert token not in report and token not in unescape_markdown(report)
        assert "Leaked token [REDACTED]" in unescape_markdown(report)


# --------------------------------------------------------------------------- the CLI

def test_cli_handoff_prints_or_writes_the_report(project, cli_run):
    printed = cli_run("handoff")
    assert printed.exit_code == 0
    assert printed.stdout.startswith("# Agent handoff: acme-api\n")

    written = cli_run("handoff", "--output", "report.md")
    assert written.exit_code == 0
    text = (project.root / "report.md").read_text(encoding="utf-8")
    assert written.stderr == f"Handoff report written to report.md ({len(text):,} characters)\n"
    assert text == printed.stdout


def test_cli_handoff_bad_since_is_a_usage_error(project, cli_run):
    result = cli_run("handoff", "--since", "last-week")
    assert result.exit_code == 2
    assert result.stderr == "Error: --since 'last-week' is not a date; use YYYY-MM-DD\n"


# --------------------------------------------------------------------------- the demo world

@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    from toolkit.demo import write_demo

    return write_demo(tmp_path_factory.mktemp("handoff-demo") / "world")


# The demo world's store, beside it: the first test to open it loads the world, the others'
# refresh finds every source unchanged (the tests read it; none changes the world's files).
DEMO_DB = "handoff.duckdb"


def demo_handoff(demo, cli_run, monkeypatch, *args: str) -> str:
    monkeypatch.chdir(demo.project)
    result = cli_run("--db", str(demo.root / DEMO_DB), "handoff", *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_demo_worlds_handoff_is_short_and_full_keeps_everything(demo, cli_run,
                                                                    monkeypatch):
    short = demo_handoff(demo, cli_run, monkeypatch)
    full = demo_handoff(demo, cli_run, monkeypatch, "--full")

    assert len(short) < 15_000
    assert len(full) > 60_000  # every open slop entry in full, as before
    summary = section(short, "## Summary")
    assert "- **96** open slop items: **4** critical, **19** high" in summary
    # the details of the 73 other open items are counted with the command that lists them
    assert "_The other 73 open items (38 medium, 29 low, 6 info): " \
           "`toolkit slop query --status open`" in short


def render_gfm(text: str) -> str:
    """The body as GitHub renders it: cmark-gfm (GitHub's own parser) with its extensions;
    raw HTML kept, as GitHub keeps <details> (its sanitizer runs after)."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.hrefs: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack.append(tag)
        self.hrefs += [v or "" for k, v in attrs if k == "href"]

    def handle_endtag(self, tag: str) -> None:
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if "code" not in self.stack:
            self.text.append(data)


def test_a_first_handoff_after_a_prune_lists_its_demotions_with_its_removals(
        tmp_path, cli_run, monkeypatch):
    """The first handoff (no state) of a demo world pruned a week after its records: the
    prune's demotions keep their Date (as Smith's prune does), older than the window, yet the
    ledger's git history shows the move, as it shows the removals: both are listed. It listed
    only the 6 removals. The window and "data as of" stay the records' (a file's time would
    move them with a mere touch)."""
    import os

    from toolkit.demo import write_demo

    world = write_demo(tmp_path / "world")
    monkeypatch.chdir(world.project)
    pruned = cli_run("--today", "2026-12-04", "ledger", "prune", "--auto")
    assert pruned.stdout.startswith("Auto-prune complete: 6 removed, 3 demoted."), pruned.output
    stamp = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC).timestamp()
    for path in (world.project / ".smith" / "vault" / "ledger").iterdir():
        os.utime(path, (stamp, stamp))  # the prune's time: not the report's

    report = cli_run("handoff").stdout
    assert "data as of 2026-11-27 21:39 (UTC) · ledger changes in the 7 days to 2026-11-27" \
        in report
    assert (len(ledger_lines(report, "Demoted")), len(ledger_lines(report, "Removed"))) == (3, 6)


def test_the_body_renders_as_github_renders_it(demo, cli_run, monkeypatch):
    monkeypatch.setenv("TOOLKIT_SITE_URL", "https://docs.example.com/acme")
    from toolkit import config
    from toolkit.handoff import build_report, render_issue
    from toolkit.publish import marker_for
    from toolkit.store import Store

    monkeypatch.chdir(demo.project)
    cfg = config.resolve(db=str(demo.root / DEMO_DB))
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        # since November: a ledger group longer than INLINE_ROWS, so a <details> block
        body = render_issue(build_report(store, cfg, now=NOW, since=dt.date(2026, 11, 1)),
                            marker=marker_for("acme")).body
    html = render_gfm(body)
    parsed = _Html()
    parsed.feed(html)
    text = "".join(parsed.text)

    # every Markdown table is an HTML table
    tables = sum(1 for line in body.splitlines() if re.fullmatch(r"\|(-{3}:?\|)+", line))
    assert tables >= 2 and html.count("<table>") == tables
    # the collapsed blocks open and close, and the Markdown inside them is rendered
    assert html.count("<details>") == html.count("</details>") == body.count("<details>") >= 1
    for block in re.findall(r"<details>(.*?)</details>", html, re.S):
        assert "<summary>" in block and "<li>" in block and "\n- " not in block
    # no escape shows: not a backslash, not an entity spelled out, not a stray emphasis mark
    assert "\\" not in text
    assert not re.search(r"&(amp|lt|gt|#\d+);", text)
    assert "**" not in text
    # the hidden marker lines stay hidden; every link is absolute
    assert "agent-ledger-toolkit" not in text
    assert parsed.hrefs and all(h.startswith("https://docs.example.com/acme/")
                                for h in parsed.hrefs)


# --------------------------------------------------------------------------- the site's page

@pytest.fixture(scope="module")
def handoff_site(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The formats world with the cases of both site tests below (three more dispatches of
    one task; five more critical slop items, past the page's SITE_URGENT_ROWS, patched to 2)
    and its site, built once: (whether the build wrote a handoff state, build result, the
    command's report, its Report; the report is made after the build, and writes the state)."""
    from tests._site_helpers import BUILD_TIME, build, make_world
    from toolkit import handoff
    from toolkit.store import Store

    world = make_world(tmp_path_factory.mktemp("handoff-site"))
    for _ in range(3):
        add_dispatch(world.cfg.audit_db, "Fix flaky invoice test")
    slop = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    add_slop(slop, *(slop_entry(f"Urgent item {i}", severity="critical") for i in range(5)))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(world.root)
        mp.setattr(handoff, "SITE_URGENT_ROWS", 2)
        result = build(world)
        wrote_state = (world.root / ".toolkit" / "handoff-state.json").exists()
        with Store.open(world.cfg.db_path, sources=SOURCES) as store:
            now = BUILD_TIME.replace(tzinfo=None)
            printed = handoff.export_report(store, world.cfg, now=now)
            report = handoff.build_report(store, world.cfg, now=now)
    return wrote_state, result, printed, report


def test_the_sites_handoff_page_is_the_same_report(handoff_site):
    from tests._site_helpers import scan

    wrote_state, result, printed, _report = handoff_site
    assert result.warnings == []  # MkDocs strict: every link of the page resolves
    assert not wrote_state  # the site reads it
    page = (result.build_dir / "docs" / "handoff" / "index.md").read_text(encoding="utf-8")

    def headings(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("## ")]

    assert headings(page) == headings(printed)
    assert section(page, "## Summary") == section(printed, "## Summary")
    assert "[Fix flaky invoice test](../audit/tasks/fix-flaky-invoice-test.md)" in page
    assert "<details>" not in page and "### Fix" not in page  # no raw HTML, no AI text heading
    html = scan(result.out / "handoff" / "index.html")
    assert re.search(r"Dispatches awaiting a verdict \(4\)\W* Dispatch When Task",
                     html.body_text)


def test_the_sites_handoff_page_lists_the_first_urgent_items_and_links_to_all(handoff_site):
    # the site's page does not grow with the slop ledger: past SITE_URGENT_ROWS critical and
    # high items it says how many it leaves out and links to where all of them are; the
    # report itself (the command, the issue) still lists every one
    from tests._site_helpers import scan

    _wrote_state, result, printed, report = handoff_site
    assert result.warnings == []  # MkDocs strict: the note's links resolve
    page = (result.build_dir / "docs" / "handoff" / "index.md").read_text(encoding="utf-8")
    urgent = [e for e in report.slop if e.get("severity") in ("critical", "high")]
    assert len(urgent) > 2

    def items(text: str) -> list[str]:
        debt = section(text, "## Debt: open slop")
        return [line for line in debt.splitlines() if line.startswith("- **")]

    assert len(items(printed)) == len(urgent)  # the command lists every one
    assert len(items(page)) == 2
    # the first items of the report, in its order (the page links them to their pages)
    assert [i.split(": ", 1)[1] for i in items(page)] == \
        [i.split(": ", 1)[1] for i in items(printed)[:2]]
    debt = section(page, "## Debt: open slop")
    assert f"### Critical and high ({len(urgent)})" in debt
    assert (f"_The first 2 of {len(urgent)} critical and high items are listed; all of them: "
            "[open slop on the site](../slop/index.md) · "
            "[slop_entries.csv](../data/slop_entries.csv) · ") in debt
    html = scan(result.out / "handoff" / "index.html")
    assert f"The first 2 of {len(urgent)} critical and high items are listed" in html.body_text
