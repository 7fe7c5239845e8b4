"""Check results where people look: the handoff report (and publish --dry-run) lists failing
checks right after the summary and goal, the site has a Checks page and a dashboard badge.
A check that cannot run is that check's error; hostile text is escaped; secrets never show."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from tests._site_helpers import scan

TODAY = "2026-06-01"
TOKEN = "ghp_" + "Ab1" * 12  # a GitHub token the redaction finder knows
TASK = "Retry the flaky importer"
HOSTILE = "<script>alert(77)</script> [x](javascript:alert(1)) {{ 7*7 }}"
PASSING = ("checks:\n  - name: stale-pending\n    days: 1000\n"
           "  - name: old-high-slop\n    days: 1000\n")


def settings(project, text: str = "") -> None:
    (project.root / "toolkit.yaml").write_text(f'today: "{TODAY}"\n{text}', encoding="utf-8")


def failing_world(project) -> None:
    """stale-retries fails (a task over the limit, no verdict for a month), the secrets check
    fails (a token in a slop description), a user check with hostile text fails, and one user
    check cannot run (no such table)."""
    settings(project, PASSING + (
        "  - name: hostile-rows\n"
        "    sql: |\n"
        f"      SELECT '{HOSTILE}' AS note, 'see {TOKEN}' AS secret\n"
        "    description: a hostile row\n"
        "  - name: broken\n"
        "    sql: SELECT * FROM no_such_table\n"))
    conn = sqlite3.connect(project.audit_db)
    for _ in range(3):
        conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, "
                     "verdict) VALUES ('2026-05-01 10:00:00', ?, 'fork', 'm', 'b', NULL)",
                     (TASK,))
    conn.commit()
    conn.close()
    data = json.loads(project.slop.read_text())
    data["entries"][0]["description"] += f" Token used: {TOKEN}"
    project.slop.write_text(json.dumps(data, indent=2))


def section(text: str, start: str) -> str:
    i = text.index(start)
    end = text.find("\n## ", i + 3)
    return text[i:] if end < 0 else text[i:end]


def headings(text: str) -> list[str]:
    return [line.split(" (")[0] for line in text.splitlines() if line.startswith("## ")]


# --------------------------------------------------------------------------- the handoff

def test_handoff_lists_failing_checks_after_the_summary_and_before_dispatches(project, cli_run):
    failing_world(project)
    out = cli_run("handoff")
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert headings(text)[:3] == ["## Summary", "## Failing checks",
                                  "## Dispatches awaiting a verdict"]
    checks = section(text, "## Failing checks")
    assert checks.startswith("## Failing checks (4 of 11)")
    lines = [line for line in checks.splitlines() if line.startswith("- **")]
    # failures first (in the order of `toolkit check`), then the check that could not run
    assert [re.match(r"- \*\*(.+?)\*\*", line).group(1) for line in lines] == [
        "stale-retries", "secrets", "hostile-rows", "broken"]
    assert "(ERROR, error level): could not run: query failed" in lines[-1]
    assert "no\\_such\\_table" in lines[-1] or "no_such_table" in lines[-1]
    assert TASK in checks and "github\\_token" in checks
    # the secret's place is shown from the home folder, not as this machine's path
    assert "&#126;/.codesmith/slop\\_ledger/slop\\_ledger.json:4" in checks  # ~ escaped
    assert str(project.home) not in checks
    assert TOKEN not in text and "<script>" not in text  # redacted, escaped


def test_handoff_goal_comes_before_the_checks(project, cli_run):
    failing_world(project)
    goal = {"goal": "Ship the importer", "remaining": 4, "max_turns": 10,
            "created": "2026-05-01T00:00:00+00:00"}
    (project.home / ".nagi" / "goal.json").write_text(json.dumps(goal), encoding="utf-8")
    text = cli_run("handoff").stdout
    assert headings(text)[:3] == ["## Summary", "## Active goal", "## Failing checks"]


def test_a_passing_world_says_so_in_the_handoff(project, cli_run):
    settings(project, PASSING)
    checks = section(cli_run("handoff").stdout, "## Failing checks")
    assert checks.startswith("## Failing checks (0 of 9)")
    assert "_All 9 checks pass._" in checks


def test_publish_dry_run_shows_the_same_checks(project, cli_run):
    failing_world(project)
    handoff = section(cli_run("handoff").stdout, "## Failing checks")
    out = cli_run("publish", "--repo", "acme/api", "--dry-run", env={"GH_TOKEN": ""})
    assert out.exit_code == 0, out.output
    body = out.stdout
    assert headings(body)[:3] == ["## Summary", "## Failing checks",
                                  "## Dispatches awaiting a verdict"]
    assert section(body, "## Failing checks") == handoff
    assert TOKEN not in out.output


# --------------------------------------------------------------------------- the site

def build(project, cli_run) -> Path:
    out = project.root / "site"
    result = cli_run("build-site", "--out", str(out), "--build-time", "2026-06-01T12:00:00")
    assert result.exit_code == 0, result.output
    return out


def test_the_site_has_a_checks_page_and_a_badge(project, cli_run):
    failing_world(project)
    site = build(project, cli_run)
    page = scan(site / "checks" / "index.html")
    text = page.body_text
    assert "Checks: 4 failing" in text
    for name in ("stale-retries", "secrets", "hostile-rows", "broken", "meta-counts"):
        assert name in text
    assert "Could not run: query failed" in text and "no_such_table" in text
    # the failing task links to its page; the secret's place and family, never the secret
    hrefs = [dict(attrs).get("href") or "" for tag, attrs in page.tags if tag == "a"]
    assert any(h.startswith("../audit/tasks/") for h in hrefs)
    assert "github_token" in text and "slop_entries" in text
    html = (site / "checks" / "index.html").read_text(encoding="utf-8")
    assert TOKEN not in html and "[REDACTED" in html
    assert "<script>alert(77)" not in html and "<script>alert(77)</script>" in text
    assert not any("javascript:" in h for h in hrefs)
    # (the slop entry's own page shows its text as recorded unless the site is --redact)
    for p in (site / "index.html", site.parent / "site.build" / "docs" / "checks" / "index.md"):
        assert TOKEN not in p.read_text(encoding="utf-8"), p
    home = (site / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<a href="checks/">Checks: 4 failing</a>', home)  # the badge


def test_a_passing_world_shows_every_check_passing(project, cli_run):
    settings(project, PASSING)
    site = build(project, cli_run)
    text = scan(site / "checks" / "index.html").body_text
    assert "Checks: all 9 passing" in text
    assert text.count("PASS") >= 9 and "FAIL" not in text
    assert re.search(r'<a href="checks/">Checks: all 9 passing</a>',
                     (site / "index.html").read_text(encoding="utf-8"))


def test_a_secret_the_loader_lowercased_is_found_and_never_shown(project, cli_run):
    """A key in a ledger entry's category is stored lowercased; the secrets check still finds
    it, and no output (table, handoff, Checks page) shows it, in any case."""
    settings(project, PASSING)
    key = "AKIA" + "IOSFODNN7EXAMPL2"
    with (project.ledger / "patterns.md").open("a", encoding="utf-8") as f:
        f.write(f"\n---\n\n**Title:** Keys\n**Date:** 2026-05-03\n**Category:** sec {key}\n"
                "**Confidence:** low\n**Source reflections:** 1\n\n**Pattern:** none.\n")
    table = cli_run("check", "--select", "secrets")
    assert table.exit_code == 1 and "aws_access_key_id" in table.output
    handoff = cli_run("handoff").output
    site = build(project, cli_run)
    page = (site / "checks" / "index.html").read_text(encoding="utf-8")
    for text in (table.output, handoff, page):
        assert key.casefold() not in text.casefold()
