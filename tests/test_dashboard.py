"""The site's home page answers the first questions at a glance: headline figures that link to
the pages answering them in full (with the same numbers), and a top list that never tells the
reader to follow an antipattern."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import duckdb
import pytest

from tests._site_helpers import TODAY, World, build, make_world, scan

ANTIPATTERN = "Editing an applied migration in place"


@pytest.fixture(scope="module")
def world_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, Path]:
    """The formats project with a high-confidence antipattern, a task over the retry limit and
    actions on both sides of the week's first day (TODAY - 6 days)."""
    world = make_world(tmp_path_factory.mktemp("dashboard"))
    anti = world.root / ".smith" / "vault" / "ledger" / "antipatterns.md"
    text = anti.read_text(encoding="utf-8")
    anti.write_text(text.replace("**Confidence:** low", "**Confidence:** high", 1),
                    encoding="utf-8")
    conn = sqlite3.connect(world.home / ".nagi" / "ledger.db")
    for ts, tier in (("2026-05-03 23:59:59", 2), ("2026-05-04 00:00:00", 2),
                     ("2026-05-10 18:00:00", 0)):
        conn.execute("INSERT INTO actions (ts, tier, category, description) "
                     "VALUES (?, ?, 'deploy', 'x')", [ts, tier])
    for n in range(3):
        conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, "
                     "verdict) VALUES (?, 'Flaky export', 'fork', 'opus', 'try', 'REFUTED')",
                     [f"2026-05-0{n + 5} 10:00:00"])
    conn.commit()
    conn.close()
    result = build(world)
    assert result.warnings == []
    return world, result.out


def _sql(world: World, query: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(world.cfg.db_path), read_only=True) as conn:
        return conn.execute(query).fetchall()


def _cards(site: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Headline title -> (its figures' texts, the links of the card)."""
    html = (site / "index.html").read_text(encoding="utf-8")
    block = html[html.index('class="grid cards tk-headlines"'):]
    block = block[:block.index("</div>")]
    out = {}
    for li in re.findall(r"<li>(.*?)</li>", block, flags=re.S):
        title = re.sub(r"<[^>]+>", "", li.split("<hr>")[0]).strip()
        figures = [re.sub(r"<[^>]+>", "", f).strip()
                   for f in re.findall(r'<span class="tk-figure"[^>]*>(.*?)</span>', li)]
        out[title] = (figures, re.findall(r'href="([^"]+)"', li))
    return out


def _resolve(site: Path, href: str) -> tuple[Path, str]:
    """The HTML file and anchor a link of the home page leads to (it must exist)."""
    parts = urlsplit(urljoin("http://h/", href))
    target = site / parts.path.lstrip("/") / "index.html"
    assert target.is_file(), href
    if parts.fragment:
        assert f'id="{parts.fragment}"' in target.read_text(encoding="utf-8"), href
    return target, parts.fragment


def test_the_home_page_opens_with_the_headline_figures_before_any_table(
        world_site: tuple[World, Path]) -> None:
    _, site = world_site
    html = (site / "index.html").read_text(encoding="utf-8")
    article = html[html.index("<article"):]
    assert article.index("tk-headlines") < article.index("<table")
    assert list(_cards(site)) == ["Ledger entries by confidence", "Tasks over the retry limit",
                                  "Pending verdicts", "Open high-severity debt",
                                  "Actions this week"]


def test_headline_figures_are_the_stores_answers_and_their_pages_show_the_same(
        world_site: tuple[World, Path]) -> None:
    world, site = world_site
    cards = _cards(site)

    conf = dict(_sql(world, "SELECT confidence, count(*) FROM ledger_entries GROUP BY ALL"))
    assert cards["Ledger entries by confidence"][0] == [
        f"{conf.get(c, 0)} {c}" for c in ("high", "medium", "low")]
    assert conf["high"] == 1  # the antipattern made high above

    [(over,)] = _sql(world, "SELECT count(*) FROM task_status WHERE over_retry_limit")
    assert over == 1 and cards["Tasks over the retry limit"][0] == ["1 task"]
    [(pending,)] = _sql(world, "SELECT count(*) FROM dispatches WHERE verdict IS NULL")
    assert cards["Pending verdicts"][0] == [f"{pending} dispatch" + ("es" if pending != 1
                                                                      else "")]
    debt = dict(_sql(world, "SELECT severity, count(*) FROM slop_entries WHERE status IN "
                            "('open', 'in_progress') GROUP BY ALL"))
    assert cards["Open high-severity debt"][0] == [f"{debt.get('critical', 0)} critical",
                                                   f"{debt.get('high', 0)} high"]
    # no entry is critical: "0 critical" is text, never a link to a page that is not there
    # (the strict build would fail on it)
    assert "critical" not in debt and cards["Open high-severity debt"][0][0] == "0 critical"
    assert not any("critical" in href for href in cards["Open high-severity debt"][1])
    # the week: TODAY and the six days before it (2026-05-03 23:59:59 is outside)
    week = dict(_sql(world, "SELECT tier, count(*) FROM actions WHERE ts >= DATE '2026-05-04' "
                            "GROUP BY ALL"))
    assert TODAY.isoformat() == "2026-05-10" and week == {0: 2, 1: 1, 2: 2}
    assert cards["Actions this week"][0] == ["2 tier 0 (info)", "1 tier 1 (notable)",
                                             "2 tier 2 (high-impact)"]

    # every link resolves, and the page behind it shows the same figure
    for _, links in cards.values():
        for href in links:
            _resolve(site, href)
    dispatches, _ = _resolve(site, cards["Tasks over the retry limit"][1][0])
    report = dispatches.read_text(encoding="utf-8")
    over_section = report[report.index('id="over-the-retry-limit"'):
                          report.index('id="pending-verification"')]
    assert over_section.count("<tr>") - 1 == over and "Flaky export" in over_section
    stats, _ = _resolve(site, cards["Actions this week"][1][0])
    text = scan(stats).body_text
    for tier, name in ((0, "tier 0 (info)"), (1, "tier 1 (notable)"),
                       (2, "tier 2 (high-impact)")):
        assert re.search(rf"{re.escape(name)} {week[tier]} \d+ \d+", text), name
    conf_page, _ = _resolve(site, cards["Ledger entries by confidence"][1][0])
    for c in ("high", "medium", "low"):
        assert f" {c} {conf[c]} " in scan(conf_page).body_text


def test_antipatterns_are_never_top_entries_to_follow_and_every_kind_is_labelled(
        world_site: tuple[World, Path]) -> None:
    _, site = world_site
    html = (site / "index.html").read_text(encoding="utf-8")
    follow = html[html.index('id="top-high-confidence-entries-to-follow"'):]
    follow, avoid = follow.split('id="high-confidence-antipatterns-to-avoid"', 1)
    avoid = avoid[:avoid.index("<h2")]
    assert ANTIPATTERN not in follow
    assert re.search(rf">{ANTIPATTERN}</a></td> <td><a [^>]+>antipattern</a>", avoid)
    # an entry page lists its related entries with their kind
    entry = scan(site / "ledger" / "patterns"
                 / "run-the-migration-dry-run-before-applying-schema-changes" / "index.html")
    assert f"{ANTIPATTERN} (antipattern)" in entry.body_text


def test_the_weeks_and_months_action_counts_end_with_today(tmp_path: Path) -> None:
    """``today`` injected before the newest actions: "Actions this week" (TODAY - 6 to TODAY)
    and the audit page's "Last 7/30 days" count no action dated after today, as the per-day
    table beside them, which sums to the same number."""
    from tests._site_helpers import open_store
    from toolkit.queries import site_actions_by_tier_since
    from toolkit.reports import actions_this_week

    world = make_world(tmp_path)
    conn = sqlite3.connect(world.home / ".nagi" / "ledger.db")
    conn.execute("DELETE FROM actions")
    for ts in ("2026-05-04 00:00:00", "2026-05-10 23:59:59", "2026-05-11 00:00:00",
               "2026-05-12 09:00:00"):
        conn.execute("INSERT INTO actions (ts, tier, category, description) "
                     "VALUES (?, 1, 'deploy', 'x')", [ts])
    conn.commit()
    conn.close()
    with open_store(world) as store:
        store.refresh(world.cfg)
        assert actions_this_week(store, TODAY) == {1: 2}
        assert site_actions_by_tier_since(store, None) == {1: 4}  # all time: every action
    out = build(world).out
    card = " ".join(_cards(out)["Actions this week"][0])
    assert "2 tier 1" in card and "4 tier 1" not in card
    audit = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (out / "audit" / "index.html")
                                       .read_text(encoding="utf-8")))
    assert "tier 1 (notable) 2 2 4 " in audit  # last 7 days, last 30 days, all time
