"""The demo site's charts and home page in headless Chromium, as a reader at 1280 px sees them:
chart text size, the headline figures, the top lists, and dark mode.

Uses the shared demo site, server, browser and request guard of tests/_browser_helpers.py (no
request may leave 127.0.0.1, no console error, no dialog); the site is served with an empty
search index, as no test here is about search."""

from __future__ import annotations

from typing import Any

import pytest

from tests._browser_helpers import Served, Watch, need_chromium

pytestmark = pytest.mark.browser
need_chromium()

CHART_PAGES = ("", "audit/", "ledger/", "ledger/history/", "slop/", "slop/ageing/")

# The font size (CSS px) of every text of each chart of the page, as Chromium draws it at the
# size the page shows the picture, and the rows of the chart's numbers (the table in the
# <details> after the chart's paragraph): the SVG is put inline at the <img>'s displayed width, and
# each text's glyphs (drawn as paths at 1/100 of the font size, matplotlib's glyph units) are
# measured through getScreenCTM, which holds the viewBox scaling.
_FONT_SIZES = """async () => {
  const out = [];
  for (const img of document.querySelectorAll('article img[src*="charts/"]')) {
    const shown = img.getBoundingClientRect();
    const text = await (await fetch(img.src)).text();
    const svg = document.importNode(
      new DOMParser().parseFromString(text, "image/svg+xml").documentElement, true);
    svg.setAttribute("width", shown.width);
    svg.setAttribute("height", shown.height);
    const holder = document.createElement("div");
    holder.style.cssText = "position:absolute;left:0;top:0";
    holder.appendChild(svg);
    document.body.appendChild(holder);
    const sizes = [...svg.querySelectorAll('g[id^="text_"] g[transform*="scale"]')].map(g => {
      const m = g.getScreenCTM();
      return Math.hypot(m.a, m.b) * 100;
    });
    holder.remove();
    // the rows of the chart's numbers, in the <details> right after the chart's paragraph
    const details = img.closest('p')?.nextElementSibling;
    const rows = details?.matches('details.tk-chart-data')
      ? details.querySelectorAll('table tbody tr').length : 0;
    out.push({src: img.getAttribute("src"), width: shown.width, sizes: sizes, rows: rows});
  }
  return out;
}"""


def test_chart_text_is_at_least_11_px_at_1280_px(demo_no_search: Served,
                                                 page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.set_viewport_size({"width": 1280, "height": 900})
    seen = 0
    for path in CHART_PAGES:
        p.goto(demo_no_search.base + path, wait_until="load")
        for chart in p.evaluate(_FONT_SIZES):
            seen += 1
            assert chart["sizes"], chart["src"]
            assert min(chart["sizes"]) >= 11, (path, chart["src"], min(chart["sizes"]))
            # a chart's numbers stand under it as text
            assert chart["rows"] >= 1, chart["src"]
    assert seen >= 7


def test_home_opens_with_headline_figures_whose_links_open_their_pages(
        demo_no_search: Served, page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.set_viewport_size({"width": 1280, "height": 900})
    p.goto(demo_no_search.base, wait_until="load")
    # the cards' and the first table's tops (in the page, as bounding_box gives them), and the
    # cards' links: one round trip
    home = p.evaluate("""() => ({
      cards: [...document.querySelectorAll('article .tk-headlines > ul > li')]
        .map(li => li.getBoundingClientRect().top),
      firstTable: document.querySelector('article table').getBoundingClientRect().top,
      hrefs: [...document.querySelectorAll('article .tk-headlines a')].map(a => a.href)})""")
    cards = home["cards"]
    assert len(cards) == 5
    assert cards[4] < home["firstTable"]
    assert all(y < 900 for y in cards)  # all five visible without scrolling at 1280 x 900
    hrefs = home["hrefs"]
    assert len(hrefs) >= 10
    anchors: dict[str, set[str]] = {}  # each page opened once, with every anchor it is asked for
    for href in hrefs:
        target, _, anchor = href.partition("#")
        anchors.setdefault(target, set()).add(anchor)
    for target, names in anchors.items():
        response = p.goto(target, wait_until="load")
        assert response is not None and response.status == 200, target
        wanted = sorted(names - {""})
        if wanted:  # how many elements have each id: one round trip a page
            found = p.evaluate("ids => { const all = [...document.querySelectorAll('[id]')];"
                               " return ids.map(id => all.filter(e => e.id === id).length); }",
                               wanted)
            assert found == [1] * len(wanted), (target, dict(zip(wanted, found, strict=True)))


def test_the_demos_antipattern_is_to_avoid_not_to_follow(
        demo_no_search: Served, page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.goto(demo_no_search.base, wait_until="load")
    follow = p.locator("xpath=//h3[@id='top-high-confidence-entries-to-follow']"
                       "/following::table[1]")
    avoid = p.locator("xpath=//h3[@id='high-confidence-antipatterns-to-avoid']"
                      "/following::table[1]")
    title = "Retrying webhook delivery inside the request handler"
    assert title not in follow.inner_text()
    kinds = follow.locator("tbody tr td:nth-child(2)").all_inner_texts()
    assert kinds and "antipattern" not in kinds
    assert set(kinds) <= {"pattern", "tool preference", "edge case", "project quirk"}
    row = avoid.locator("tbody tr", has_text=title)
    assert row.locator("td:nth-child(2)").inner_text().strip() == "antipattern"


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_the_palette_follows_the_system_setting_and_toggles(
        demo_no_search: Served, page: tuple[Any, Watch], scheme: str) -> None:
    p, _ = page
    p.emulate_media(color_scheme=scheme)  # the system's setting, as the page is told it
    p.set_viewport_size({"width": 1280, "height": 900})
    p.goto(demo_no_search.base, wait_until="load")
    body = p.locator("body")
    shown = body.get_attribute("data-md-color-scheme")
    assert shown == ("slate" if scheme == "dark" else "default")
    background = p.evaluate("getComputedStyle(document.body).backgroundColor")
    rgb = [int(x) for x in background[background.index("(") + 1:-1].split(",")[:3]]
    assert (sum(rgb) < 200) == (scheme == "dark"), background
    # the toggle: system -> light -> dark -> system, whatever the system says
    toggle = p.locator("form[data-md-component='palette'] label:visible")
    assert toggle.count() == 1
    seen = []
    for _ in range(3):
        toggle.click()
        seen.append(body.get_attribute("data-md-color-scheme"))
        toggle = p.locator("form[data-md-component='palette'] label:visible")
    assert seen == ["default", "slate", "slate" if scheme == "dark" else "default"]
