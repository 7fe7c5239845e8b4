"""The site's charts (toolkit.charts): legible sizes, legends beside the data, true time axes,
and their numbers on the page as text."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import matplotlib
import pytest

from tests._site_helpers import TODAY, World, open_store, scan
from toolkit.charts import MAX_WIDTH_IN, RC, ChartSpec, Series, data_rows, draw, render_svg

TIERS = (Series("tier 0 (info)", (3, 0, 5), "#90a4ae"),
         Series("tier 1 (notable)", (1, 2, 0), "#ffb300"),
         Series("tier 2 (high-impact)", (0, 4, 1), "#e53935"))


def _drawn(spec: ChartSpec) -> Any:
    with matplotlib.rc_context(RC):
        fig = draw(spec)
        fig.draw_without_rendering()  # runs the layout
    return fig


def _centres(ax: Any) -> list[float]:
    """The x of each bar's centre in display coordinates (first series)."""
    n = len(ax.containers[0])
    return [float(ax.transData.transform((p.get_x() + p.get_width() / 2, 0))[0])
            for p in list(ax.patches)[:n]]


def test_a_time_axis_spaces_uneven_dates_by_the_time_between_them() -> None:
    spec = ChartSpec(name="t", title="Actions", labels=("2026-01-01", "2026-01-02", "2026-01-12"),
                     series=TIERS, time=True)
    x0, x1, x2 = _centres(_drawn(spec).axes[0])
    # one day, then ten days: the second gap is ten times the first
    assert (x2 - x1) / (x1 - x0) == pytest.approx(10, rel=0.01)


def test_a_time_area_chart_puts_each_point_at_its_date() -> None:
    spec = ChartSpec(name="g", title="Entries", labels=("2026-03-01", "2026-03-03", "2026-03-31"),
                     series=(Series("high", (1, 2, 3), "#2e7d32"),
                             Series("low", (4, 4, 5), "#e0e0e0")), time=True, area=True)
    ax = _drawn(spec).axes[0]
    xs = sorted({round(float(ax.transData.transform((v[0], 0))[0]), 3)
                 for v in ax.collections[0].get_paths()[0].vertices})
    x0, x1, x2 = xs[0], xs[1], xs[-1]
    assert (x2 - x1) / (x1 - x0) == pytest.approx(14, rel=0.01)
    # a single day is drawn as a bar, not as an area of no width
    one = ChartSpec(name="g1", title="Entries", labels=("2026-03-01",), time=True, area=True,
                    series=(Series("high", (3,), "#2e7d32"),))
    [bar] = _drawn(one).axes[0].patches
    assert bar.get_height() == 3 and bar.get_width() > 0


def test_evenly_spaced_categories_stay_evenly_spaced() -> None:
    spec = ChartSpec(name="c", title="By age", labels=("0-7 days", "8-30 days", "over 90"),
                     series=TIERS)
    x0, x1, x2 = _centres(_drawn(spec).axes[0])
    assert x2 - x1 == pytest.approx(x1 - x0)


@pytest.mark.parametrize("kind", ["vertical", "horizontal", "time", "area"])
def test_the_legend_stands_outside_the_plot(kind: str) -> None:
    labels = (tuple(f"2026-02-{d:02d}" for d in (1, 2, 9)) if kind in ("time", "area")
              else ("unmigrated_callers", "naming_drift", "a" * 40))
    spec = ChartSpec(name="l", title="t", labels=labels, series=TIERS,
                     horizontal=kind == "horizontal", time=kind in ("time", "area"),
                     area=kind == "area")
    fig = _drawn(spec)
    [legend] = fig.legends
    box, plot = legend.get_window_extent(), fig.axes[0].get_window_extent()
    assert not box.overlaps(plot)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y0 >= 0  # and inside the picture


@pytest.mark.parametrize("name_length", [1, 18, 30, 60])
def test_the_legend_has_as_many_columns_as_fit_the_width(name_length: int) -> None:
    names = [f"{i}" + "x" * name_length for i in range(5)]
    spec = ChartSpec(name="w", title="t", labels=("a", "b"),
                     series=tuple(Series(n, (1, 2), "#90a4ae") for n in names))
    fig = _drawn(spec)
    [legend] = fig.legends
    assert legend.get_window_extent().x1 <= fig.bbox.width
    ncols = legend._ncols
    if ncols < len(names):  # one more column would not have fit, after the layout
        wider = fig.legend(loc="outside lower left", ncols=ncols + 1, frameon=False)
        fig.draw_without_rendering()
        assert wider.get_window_extent().x1 > fig.bbox.width
    assert (ncols == len(names)) == (name_length == 1)  # short names: one row


@pytest.mark.parametrize("labels", [
    ("patterns", "antipatterns", "tool-preferences", "edge-cases", "project-quirks"),
    ("retained_compatibility", "unmigrated_callers", "duplicate_concepts", "naming_drift",
     "stale_docs", "stale_tests"),
    ("a", "b"),
    ("x" * 40, "y" * 40),
])
def test_the_labels_along_x_never_overlap_and_the_picture_stays_in_a_page(
        labels: tuple[str, ...]) -> None:
    spec = ChartSpec(name="f", title="Ledger entries by file", labels=labels,
                     series=(Series("n", tuple(range(1, len(labels) + 1)), "#90a4ae"),))
    fig = _drawn(spec)
    texts = fig.axes[0].get_xticklabels()
    boxes = [t.get_window_extent() for t in texts]
    if texts[0].get_rotation():  # slanted: neighbours' baselines are a line height apart
        anchors = [(b.x1 + b.x0) / 2 for b in boxes]
        height = max(t.get_fontsize() for t in texts)
        for a, b in itertools.pairwise(anchors):
            assert (b - a) * math.sin(math.radians(45)) >= height, labels
    else:
        for left, right in itertools.pairwise(boxes):
            assert left.x1 <= right.x0, (labels, left, right)
    assert all(b.x0 >= 0 and b.x1 <= fig.bbox.width for b in boxes)  # nothing cut off
    assert fig.get_size_inches()[0] <= MAX_WIDTH_IN


def test_short_labels_keep_the_narrow_picture() -> None:
    spec = ChartSpec(name="s", title="t", labels=("a", "b", "c"),
                     series=(Series("n", (1, 2, 3), "#90a4ae"),))
    assert _drawn(spec).get_size_inches()[0] == 5.0


def test_charts_are_drawn_at_a_width_a_page_shows_unscaled_with_no_text_under_10_pt() -> None:
    wide = ChartSpec(name="w", title="Per day", labels=tuple(f"2026-01-{d:02d}" for d in
                                                              range(1, 31)),
                     series=(Series("actions", tuple(range(30)), "#90a4ae"),), time=True)
    many = ChartSpec(name="m", title="Per category", labels=tuple(f"c{i}" for i in range(40)),
                     series=(Series("actions", tuple(range(40)), "#90a4ae"),))
    for spec in (wide, many):
        svg = render_svg(spec).decode()
        width = float(re.search(r'<svg[^>]* width="([0-9.]+)pt"', svg).group(1))  # type: ignore[union-attr]
        assert width <= MAX_WIDTH_IN * 72
        # text is drawn as glyph paths scaled by font size / 100 (matplotlib's glyph units)
        sizes = {float(s) * 100 for s in re.findall(r"scale\(([0-9.]+) -[0-9.]+\)", svg)}
        assert sizes and min(sizes) >= 10


def test_data_rows_hold_every_value_and_the_totals() -> None:
    spec = ChartSpec(name="d", title="t", labels=("a", "b", "c"), series=TIERS)
    columns, rows = data_rows(spec)
    assert columns == ("", "tier 0 (info)", "tier 1 (notable)", "tier 2 (high-impact)", "Total")
    assert rows == [("a", 3, 1, 0, 4), ("b", 0, 2, 4, 6), ("c", 5, 0, 1, 6)]
    single = ChartSpec(name="s", title="t", labels=("2026-01-01",), time=True,
                       series=(Series("open", (2.5,), "#fb8c00"),))
    assert data_rows(single) == (("Date", "open"), [("2026-01-01", 2.5)])


def _chart_tables(html_file: Path) -> dict[str, list[list[str]]]:
    """chart file name -> the rows (cell texts) of the table right after its picture."""
    html = html_file.read_text(encoding="utf-8")
    out = {}
    for m in re.finditer(r'<img[^>]+src="[^"]*charts/([^"/]+)\.svg"', html):
        rest = html[m.end():]
        details = rest[:rest.index("</details>")]
        assert rest.index("<details") < rest.index("</p>") + 10  # right after the picture
        rows = re.findall(r"<tr>(.*?)</tr>", details, flags=re.S)
        out[m.group(1)] = [[re.sub(r"<[^>]+>", "", c).strip()
                            for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", r, flags=re.S)]
                           for r in rows]
    return out


def test_every_chart_of_the_site_has_its_numbers_on_its_page_as_text(
        formats_site: tuple[World, Path]) -> None:
    from toolkit.reports import build_site_content

    world, site = formats_site
    with open_store(world) as store:
        content = build_site_content(store, today=TODAY, site_name="x", roots=[])
    specs = {s.name: s for s in content.charts}
    assert {"slop-open", "home-audit-week", "audit-per-day", "ledger-by-file"} <= set(specs)
    shown: set[str] = set()
    for html_file in sorted(site.rglob("index.html")):
        for name, rows in _chart_tables(html_file).items():
            shown.add(name)
            columns, data = data_rows(specs[name])
            assert rows[0] == list(columns)
            assert rows[1:] == [[str(c) for c in row] for row in data], (html_file, name)
    assert shown == set(specs)
    # the home page's week chart: the same numbers as its table of days, readable as text
    home = scan(site / "index.html").body_text
    week = dict((r[0], r[-1]) for r in data_rows(specs["home-audit-week"])[1])
    assert any(week.values())
    for day, total in week.items():
        assert re.search(rf"{day}\s+(\d+\s+)+{total}\b", home)


def test_a_chart_with_a_legend_is_drawn_under_an_iso_source_date_epoch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock takes SOURCE_DATE_EPOCH as an ISO time too; matplotlib reads it as int() when
    the legend is measured. The chart is the same as under the same instant in seconds, and
    the variable is left as it was."""
    spec = ChartSpec(name="e", title="Actions", labels=("2026-12-01", "2026-12-02", "2026-12-03"),
                     series=TIERS, time=True)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1796212800")
    seconds = render_svg(spec)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "2026-12-02T12:00:00Z")
    assert render_svg(spec) == seconds
    assert b"2026-12-02" not in seconds.split(b"<g", 1)[0]  # no Date metadata either way
    import os
    assert os.environ["SOURCE_DATE_EPOCH"] == "2026-12-02T12:00:00Z"


@pytest.mark.parametrize("time", [False, True], ids=["categories", "dates"])
def test_the_users_matplotlib_settings_never_reach_a_chart(time: bool) -> None:
    """The settings matplotlib starts with from the user's matplotlibrc (MPLCONFIGDIR,
    MATPLOTLIBRC), or a style set in the same process: the site's chart is the same bytes as
    under matplotlib's defaults, its dates in UTC."""
    spec = ChartSpec(name="u", title="Actions", labels=("2026-12-01", "2026-12-02", "2026-12-03"),
                     series=TIERS, time=time)
    plain = render_svg(spec)
    users = {"axes.facecolor": "#ff0000", "lines.linewidth": 7.0, "font.weight": "bold",
             "axes.grid": True, "timezone": "Pacific/Honolulu"}
    with matplotlib.rc_context(users):
        assert render_svg(spec) == plain
