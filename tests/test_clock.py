"""One clock (issue 15 item 8): the site, `slop export` and `handoff` print the same injected
time (``SOURCE_DATE_EPOCH``) and count ages to the same injected day (``--today``), in UTC
whatever the machine's time zone."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit import clock

EPOCH = "1780000000"  # 2026-05-28 20:26:40 UTC; already 2026-05-29 at UTC+14
STAMP = "2026-05-28 20:26 UTC"


@pytest.fixture
def far_time_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's zone at UTC+14, where the epoch above is the next day."""
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")
    time.tzset()
    try:
        yield
    finally:
        monkeypatch.undo()
        time.tzset()


def _site_home(root: Path) -> str:
    return (root / ".toolkit" / "site" / "index.html").read_text(encoding="utf-8")


def _age_days(cli_run, *args: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    result = cli_run(*args, "slop", "query", "--older-than", "0", "--format", "json")
    assert result.exit_code == 0, result.output
    return {e["id"][:8]: e["age_days"] for e in json.loads(result.output)["entries"]}


def test_site_export_and_handoff_print_the_same_injected_time_and_day(
        project, cli_run, monkeypatch, far_time_zone) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    today = ("--today", "2026-05-10")

    export = cli_run(*today, "slop", "export")
    assert export.exit_code == 0, export.output
    assert f"_Generated at {STAMP} — " in export.output

    assert cli_run(*today, "handoff").exit_code == 0
    state = json.loads((project.root / ".toolkit" / "handoff-state.json").read_text())
    assert state["last"]["at"] == STAMP

    built = cli_run(*today, "build-site", "--no-analyses")
    assert built.exit_code == 0, built.output
    home = _site_home(project.root)
    assert f"Built on {STAMP}; ages and windows are counted to 2026-05-10." in home
    ageing = (project.root / ".toolkit" / "site" / "slop" / "ageing" / "index.html").read_text()
    assert "by age on 2026-05-10" in ageing

    # the same day for ages on the command line: the fixture's entry of 2026-05-04 is 6 days old
    assert _age_days(cli_run, *today)["4b7e2c91"] == 6


def test_without_today_the_day_is_the_injected_times_utc_date(
        project, cli_run, monkeypatch, far_time_zone) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    assert _age_days(cli_run)["4b7e2c91"] == 24  # 2026-05-04 to 2026-05-28 (UTC), not 05-29
    built = cli_run("build-site", "--no-analyses")
    assert built.exit_code == 0, built.output
    home = _site_home(project.root)
    assert f"Built on {STAMP}. Every figure" in home
    assert "counted to" not in re.sub(r"<[^>]+>", "", home).split("Every figure")[0]


def test_the_clock_functions(far_time_zone) -> None:  # type: ignore[no-untyped-def]
    at = clock.now(None, {"SOURCE_DATE_EPOCH": EPOCH})
    assert at == dt.datetime(2026, 5, 28, 20, 26, 40, tzinfo=dt.UTC)
    assert clock.now("2026-05-29T06:00:00+10:00", {}) == dt.datetime(2026, 5, 28, 20, 0,
                                                                       tzinfo=dt.UTC)
    assert clock.today(None, at) == dt.date(2026, 5, 28)
    assert clock.today(None, at.replace(tzinfo=None)) == dt.date(2026, 5, 28)  # naive is UTC
    assert clock.today(dt.date(2026, 1, 2), at) == dt.date(2026, 1, 2)
    assert clock.describe(at, dt.date(2026, 5, 28)) == f"Built on {STAMP}."
    assert clock.describe(at, dt.date(2026, 5, 1)) == \
        f"Built on {STAMP}; ages and windows are counted to 2026-05-01."


def test_a_bad_source_date_epoch_is_a_usage_error_everywhere(
        project, cli_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # (the second is past year 9999 in UTC: it was "a number is too large", naming nothing)
    for when in ("yesterday", "9999-12-31T23:00:00-05:00"):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", when)
        for args in (("slop", "export"), ("handoff",)):
            result = cli_run(*args)
            assert result.exit_code == 2, (args, result.output)
            assert result.output.strip().splitlines()[-1] == (
                f"Error: SOURCE_DATE_EPOCH: {when!r} is not a time; use Unix seconds or "
                "YYYY-MM-DDTHH:MM:SS")


def test_slop_created_after_today_is_counted_in_the_ageing_bands(
        project, cli_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A today setting before an open entry's creation: its age is negative; the ageing
    bands still count every open entry the page lists (a band of its own, not none)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    built = cli_run("--today", "2026-05-01", "build-site", "--no-analyses")
    assert built.exit_code == 0, built.output
    page = (project.root / ".toolkit" / "site" / "slop" / "ageing" / "index.html").read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    bands = text[text.index("Age Open entries"):text.index("The numbers in this chart")]
    # the in-progress entry of 2026-04-29 is 2 days old; the open one of 2026-05-04, -3
    assert bands.split() == ["Age", "Open", "entries", "0-7", "days", "1", "8-30", "days", "0",
                             "31-90", "days", "0", "over", "90", "days", "0", "after", "today",
                             "1"]
