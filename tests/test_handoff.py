"""`toolkit handoff`: the redacted report, "since the last handoff", site links, escaping."""

from __future__ import annotations

import datetime as dt
import json
import re

from tests._publish_helpers import (
    NOW,
    add_approach,
    add_dispatch,
    add_slop,
    set_confidence,
    slop_entry,
)
from toolkit.handoff import md_block, md_text, site_link
from toolkit.mdsafe import unescape as unescape_markdown


def run_handoff(project, *, since=None, now=NOW, site_url=None):
    from toolkit import config
    from toolkit.handoff import export_report
    from toolkit.store import Store

    cfg = config.resolve()
    if site_url:
        cfg = cfg.with_overrides(site_url=site_url)
    with Store.open(cfg.db_path) as store:
        store.refresh(cfg)
        return export_report(store, cfg, since=since, now=now)


def section(text: str, heading_start: str) -> str:
    start = text.index(heading_start)
    end = text.find("\n## ", start + 3)
    return text[start:] if end < 0 else text[start:end]


def ledger_rows(text: str) -> list[str]:
    part = section(text, "## Ledger changes")
    return [line for line in part.splitlines() if line.startswith("| ") and
            not line.startswith("| Change")]


# --------------------------------------------------------------------------- since last handoff

def test_first_handoff_lists_every_entry_as_new_and_a_rerun_is_identical(project):
    first = run_handoff(project)
    second = run_handoff(project, now=NOW + dt.timedelta(days=2))

    assert first == second  # nothing changed: same report, whatever the clock says
    assert "## Ledger changes since the start (4)" in first
    assert "ledger changes since the start (this is the first handoff)" in first
    assert [row.split(" | ")[0] for row in ledger_rows(first)] == ["| new"] * 4
    state = json.loads((project.root / ".toolkit" / "handoff-state.json").read_text())
    assert state["last"]["at"] == "2026-05-06 09:30 UTC"
    assert state["last"]["ledger"]["patterns/grep-the-route-table-before-adding-a-new-endpoint"][
        "confidence"] == "low"


def test_confidence_change_since_the_last_handoff(project):
    run_handoff(project)
    set_confidence(project.ledger / "patterns.md",
                   "Grep the route table before adding a new endpoint", "low", "medium")

    later = NOW + dt.timedelta(days=1)
    report = run_handoff(project, now=later)
    again = run_handoff(project, now=later + dt.timedelta(hours=5))

    assert "## Ledger changes since the handoff of 2026-05-06 09:30 UTC (1)" in report
    assert ledger_rows(report) == [
        "| low → medium | medium | patterns | Grep the route table before adding a new endpoint"
        " | 2026-04-29 |"]
    assert again == report  # the baseline stays put while the ledger does


def test_removed_entries_are_reported(project):
    run_handoff(project)
    path = project.ledger / "antipatterns.md"
    text = path.read_text(encoding="utf-8")
    start = text.index("**Title:** Editing an applied migration in place")
    end = text.find("\n---", start)
    path.write_text(text[:start] + (text[end + 4:] if end >= 0 else ""), encoding="utf-8")

    report = run_handoff(project, now=NOW + dt.timedelta(days=1))

    assert ledger_rows(report) == [
        "| removed | low | antipatterns | Editing an applied migration in place |  |"]


def test_since_date_lists_entries_dated_on_or_after_and_keeps_the_state(project):
    report = run_handoff(project, since=dt.date(2026, 4, 30))

    assert "## Ledger changes since 2026-04-30 (2)" in report
    assert [row.split(" | ")[0] for row in ledger_rows(report)] == ["| new or reinforced"] * 2
    titles = [row.split(" | ")[3] for row in ledger_rows(report)]
    assert titles == ["Run the migration dry-run before applying schema changes",
                      "Redis client drops pipelined commands after a failover"]
    assert not (project.root / ".toolkit" / "handoff-state.json").exists()


def test_a_damaged_state_file_counts_as_the_first_handoff(project):
    state = project.root / ".toolkit" / "handoff-state.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{not json")

    report = run_handoff(project)

    assert "(this is the first handoff)" in report
    assert json.loads(state.read_text())["version"] == 1


# --------------------------------------------------------------------------- the sections

def test_open_slop_in_codesmith_layout_by_bucket_and_severity(project):
    report = run_handoff(project)
    slop = section(report, "## Open slop")

    assert slop.startswith("## Open slop (2)")
    assert "| retained\\_compatibility | 0 | 0 | 1 | 0 | 0 | 1 |" in slop
    assert ("### retained_compatibility\n\n"
            "| ID | Severity | Confidence | Status | Title | Source |") in slop
    assert "#### 4b7e2c91 — Legacy token header still accepted alongside bearer auth" in slop
    assert "| 9c1f4e07 | High | Certain | InProgress |" in slop
    assert "e0a95d1f" not in report  # WontFix is not open


def test_dispatches_retry_limit_and_dead_ends(project):
    for _ in range(3):
        add_dispatch(project.audit_db, "Fix flaky invoice test", summary="try again")
    add_dispatch(project.audit_db, "Split the router", verdict="REFUTED",
                 notes="the split broke auth middleware order", ts="2026-05-05 12:00:00")
    add_approach(project.audit_db, "Split the router", "Move auth into each route", "DEAD_END",
                 "Forty call sites to change")

    report = run_handoff(project)

    dispatches = section(report, "## Dispatches refuted")
    assert dispatches.startswith("## Dispatches refuted or pending verification "
                                 "(1 refuted, 4 pending)")
    rows = [line for line in dispatches.splitlines()
            if line.startswith("| ") and "|---" not in line][1:]
    assert "REFUTED" in rows[0] and "the split broke auth middleware order" in rows[0]
    assert all("PENDING" in row for row in rows[1:])
    over = section(report, "## Tasks over the retry limit")
    assert "| Fix flaky invoice test | 3 | 2 | PENDING | 2026-05-05 10:00:00 |" in over
    dead = section(report, "## Dead ends and no-gos")
    assert dead.startswith("## Dead ends and no-gos (3)")
    assert dead.index("### Split the router") < dead.index("### Audit logging for admin endpoints")
    assert "- **Dead end** (2026-05-05 11:00:00): Move auth into each route — Forty call sites" \
        in dead


def test_site_links_when_a_site_url_is_configured(project):
    add_dispatch(project.audit_db, "Split the router", verdict="REFUTED")
    report = run_handoff(project, site_url="https://docs.example.com/ledger-site/")

    site = "https://docs.example.com/ledger-site"
    assert ("[Run the migration dry-run before applying schema changes]"
            f"({site}/ledger/patterns/run-the-migration-dry-run-before-applying-schema-changes/)"
            ) in report
    assert f"#### [4b7e2c91]({site}/slop/4b7e2c91/) — Legacy" in report
    assert f"[Split the router]({site}/audit/tasks/split-the-router/)" in report
    assert "[the full report on the site](https://docs.example.com/ledger-site/handoff/)" in report


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


# --------------------------------------------------------------------------- hostile text

def test_ai_written_text_renders_as_literal_text(project):
    add_slop(project.slop, slop_entry(
        "<script>alert(1)</script> ping @octocat | pipe",
        description="```\n# Not a heading\n- not a list\n1. nor this\n---\n<img src=x onerror=y>",
        severity="critical"))
    add_dispatch(project.audit_db, "[x](javascript:alert(1)) @team", verdict="REFUTED")

    report = run_handoff(project)

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
    add_slop(project.slop, slop_entry("Leaked token", description=f"export GH={token}"))
    report = run_handoff(project)
    assert token not in report and token not in unescape_markdown(report)
    assert "[REDACTED]" in unescape_markdown(report)


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
