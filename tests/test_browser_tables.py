"""Tables that sort, filter and fit (issue 15 item 2), in a real headless Chromium.

The demo site (as `toolkit build-site --demo` builds it; one site shared by every browser
module) is served on 127.0.0.1 and opened at 1280 px and 390 px: no table cell is cut off
without a visible sign (a box that scrolls, with a shadow at the edge that has more, or an
ellipsis with the full text on hover), the column that decides a table's order stays in view,
dates stay on one line, sorting by a column and filtering by typing work. A page of 10,000 rows
keeps only one page of them in the document. Tables the script may not or cannot sort (merged
cells, two header rows, a row short of cells, one DataTables fails on) stay fitted and
unsorted, never with an alert(); text typed into the filter box is matched as plain text.
The browser fixtures (``page`` fails a test on any request to another host, console error or
dialog) are tests/_browser_helpers.py's; no test here is about search, so the sites are served
with an empty search index (``demo_no_search``, ``serve(search=False)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import pytest

from tests._browser_helpers import Served, Watch, check, need_chromium, serve, watched

pytestmark = pytest.mark.browser
need_chromium()



def _small_site(base: Path, *, audit_rows: int, base_config: Path | None = None,
                out: Path | None = None, site_scope: str = "project") -> Path:
    """The tests/fixtures/formats project with the demo's audit actions (``audit_rows`` as
    toolkit.demo writes them, without their dispatches) in place of its audit DB, and its
    site, built in this process (so a test may change the page budget or the base
    configuration first): a site of a few dozen pages, where the demo's has hundreds."""
    from tests._site_helpers import TODAY, build, make_world
    from toolkit.demo.records import AuditRows, write_audit_db
    from toolkit.demo.records import audit_rows as demo_audit_rows

    world = make_world(base)
    world.cfg.audit_db.unlink()
    actions = demo_audit_rows(7, TODAY, audit_rows, []).actions
    write_audit_db(world.cfg.audit_db, AuditRows(actions=actions))
    world.cfg = world.cfg.with_overrides(site_scope=site_scope)
    result = build(world, out=out, **({"base_config": base_config} if base_config else {}))
    assert result.warnings == []
    return result.out


# ------------------------------------------------------------------------------- what fits

# For every table of the article: the page does not scroll sideways; a cell that reaches past
# the visible part of its box is in a box that scrolls and shows a shadow on that side; a
# cell's content never spills out of it, except text clamped to its first lines, which has
# the whole text as its title; dates are on one line.
_FIT = """() => {
  const problems = [];
  const doc = document.scrollingElement;
  if (doc.scrollWidth > window.innerWidth + 1)
    problems.push(`the page scrolls sideways: ${doc.scrollWidth} > ${window.innerWidth}`);
  const tables = [...document.querySelectorAll('article table')];
  for (const table of tables) {
    const scroll = table.closest('.tk-scroll');
    if (!scroll) { problems.push('a table is not in a scrolling box'); continue; }
    const box = scroll.getBoundingClientRect();
    const frame = scroll.parentElement;
    const style = getComputedStyle(scroll);
    const scrolls = scroll.scrollWidth > scroll.clientWidth;
    for (const cell of table.querySelectorAll('th, td')) {
      const r = cell.getBoundingClientRect();
      const sticky = getComputedStyle(cell).position === 'sticky';
      const label = `${cell.tagName} "${cell.textContent.trim().slice(0, 40)}"`;
      if (!sticky && r.right > box.right + 1) {
        if (!(scrolls && ['auto', 'scroll'].includes(style.overflowX)
              && frame.classList.contains('tk-more-right')
              && getComputedStyle(frame, '::after').opacity === '1'))
          problems.push(`${label} is cut at the right without a sign`);
      }
      if (!sticky && r.left < box.left - 1) {
        if (!(scrolls && frame.classList.contains('tk-more-left')))
          problems.push(`${label} is cut at the left without a sign`);
      }
      if (cell.scrollWidth > cell.clientWidth + 1)
        problems.push(`${label} spills out of its cell`);
      for (const clamp of cell.querySelectorAll('.tk-long')) {
        const cut = clamp.scrollHeight > clamp.clientHeight + 1;
        const cs = getComputedStyle(clamp);
        if (cut && (clamp.title !== cell.textContent.trim()
                    || cs.webkitLineClamp === 'none'))
          problems.push(`${label} is clamped without its text on hover`);
      }
      const text = cell.textContent.trim();
      if (/^\\d{4}-\\d{2}-\\d{2}( \\d{2}:\\d{2}(:\\d{2})?)?$/.test(text)) {
        const range = document.createRange();
        range.selectNodeContents(cell);
        const tops = new Set([...range.getClientRects()].map(q => Math.round(q.top)));
        if (tops.size > 1) problems.push(`${label}: the date wraps`);
      }
    }
  }
  return {tables: tables.length, problems};
}"""

FIT_PAGES = ["", "audit/dispatches/", "audit/", "audit/actions/", "audit/tasks/", "slop/",
             "slop/ageing/", "ledger/", "ledger/patterns/", "ledger/history/", "sessions/",
             "snapshots/", "warnings/"]


def _entry_pages(site: Path) -> list[str]:
    """A ledger entry, a slop entry, a task, a session and a turn page (field lists, long
    text)."""
    out = []
    for folder, name in (("ledger/patterns", "*"), ("slop", "[0-9a-f]" * 8 + "*"),
                         ("audit/tasks", "*"), ("sessions", "*"), ("snapshots/turns", "*")):
        pages = sorted(p.parent for p in (site / folder).glob(f"{name}/index.html"))
        out.append(pages[0].relative_to(site).as_posix() + "/")
    return out


# After a change of scroll position or window size, two frames: the scroll events and the
# ResizeObserver's callbacks (tables.js moves the shadows and the sticky column's offset in
# them) have run by the second.
_FRAMES = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"

# After a change of window size: the two frames, then the end of the CSS transitions the
# change started (across the 1220 px breakpoint Material's search box changes width, and for a
# frame or two the page is wider than the window). For a test that measures right after the
# resize; _RESIZED_THEN_FIT measures four frames after it, by when that has passed.
_SETTLED = (f"{_FRAMES}.then(() => Promise.all(document.getAnimations()"
            ".filter(a => a instanceof CSSTransition).map(a => a.finished.catch(() => null))))")

# _FIT with every table's box scrolled to its left end, then to its far right (nothing is cut
# at the right there: the shadow moves left).
_FIT_BOTH_ENDS = f"""async () => {{
  const fit = {_FIT};
  const boxes = [...document.querySelectorAll('article .tk-scroll')];
  boxes.forEach(s => {{ s.scrollLeft = 0; }});
  await {_FRAMES};
  const start = fit();
  boxes.forEach(s => {{ s.scrollLeft = s.scrollWidth; }});
  await {_FRAMES};
  return {{start, end: fit()}};
}}"""


def _widths(i: int) -> tuple[int, int]:
    """The two widths a page is seen at, the one it is opened at first: every other page opens
    at 390 px, so each width is seen on a fresh load as well as after a resize."""
    return (1280, 390) if i % 2 == 0 else (390, 1280)


# Once the page has loaded (its load event: the navigation is only committed when this is
# sent) and its tables are set up (tables.js wraps each in its scrolling box), _FIT at both
# ends: one round trip for opening a page and what the browser is asked of it at the width it
# opened at.
_SET_UP_THEN_FIT = f"""async () => {{
  if (document.readyState !== 'complete')
    await new Promise(r => window.addEventListener('load', r, {{once: true}}));
  const until = performance.now() + 30000;  // as long as a wait_for_selector waits
  while (!document.querySelector('article .tk-scroll table') && performance.now() < until)
    await {_FRAMES};
  if (!document.querySelector('article .tk-scroll table'))
    throw new Error('no table of the page was set up within 30 s');
  return {{...await ({_FIT_BOTH_ENDS})(), url: location.href}};
}}"""

# After a resize: the frames that let the page take the new width in, the tables in
# a closed <details> (a chart's numbers) opened (one is not laid out, so nothing tells tables.js
# of the new width until a reader opens it), then _FIT at both ends.
_RESIZED_THEN_FIT = f"""async () => {{
  await {_FRAMES};
  document.querySelectorAll('article details').forEach(d => {{ d.open = true; }});
  return await ({_FIT_BOTH_ENDS})();
}}"""


def test_no_table_cell_is_cut_off_without_a_sign(demo_no_search: Served,
                                                 page: tuple[Any, Watch]) -> None:
    """Each page at 1280 px and at 390 px: opened at one width, then shown at the other (a
    window resized, a phone turned), without a second load."""
    p, _ = page
    checked = {1280: 0, 390: 0}
    for i, path in enumerate(FIT_PAGES + _entry_pages(demo_no_search.site)):
        first, second = _widths(i)
        if i == 0:  # later pages open at the width the page before was left at
            p.set_viewport_size({"width": first, "height": 900})
        assert p.viewport_size == {"width": first, "height": 900}
        p.goto(demo_no_search.base + path, wait_until="commit")  # _SET_UP_THEN_FIT waits
        for width in (first, second):
            if width == second:
                p.set_viewport_size({"width": width, "height": 900})
            result = p.evaluate(_SET_UP_THEN_FIT if width == first else _RESIZED_THEN_FIT)
            if width == first:  # the page opened, not the one before it
                assert result["url"] == demo_no_search.base + path
            for end in ("start", "end"):
                problems = result[end]["problems"]
                assert problems == [], (path, width, end, problems[:5])
            checked[width] += result["start"]["tables"]
    assert min(checked.values()) >= 30, checked


# The first table of the article with a header cell that holds ``column`` (as Playwright's
# has_text matches: case and runs of white space aside): after two frames (a resize taken in),
# its box scrolled to its left end, its middle and its right end, and at each, whether that
# header cell and the first column's are whole in view in the box. One round trip a width.
_IN_VIEW_WHEREVER_SCROLLED = f"""async (column) => {{
  await {_FRAMES};
  const norm = t => t.replace(/\\s+/g, ' ').trim().toLowerCase();
  const header = t => [...t.querySelectorAll('th')].find(th => norm(th.textContent)
                                                         .includes(norm(column)));
  const table = [...document.querySelectorAll('article table.dataTable, article .tk-scroll table')]
    .find(header);
  if (!table) throw new Error(`no table has a column ${{column}}`);
  const cells = [header(table), table.querySelector('th')];
  const scroll = table.closest('div.tk-scroll');
  const over = scroll.scrollWidth - scroll.clientWidth;
  const seen = [];
  for (const left of [0, Math.floor(over / 2), over]) {{
    scroll.scrollLeft = left;
    await {_FRAMES};
    const box = scroll.getBoundingClientRect();
    seen.push([left, cells.map(th => {{
      const r = th.getBoundingClientRect();
      return r.left >= box.left - 1 && r.right <= box.right + 1 && r.width > 20;
    }})]);
  }}
  return {{over, seen}};
}}"""


def test_the_columns_that_decide_the_order_stay_in_view(demo_no_search: Served,
                                                        page: tuple[Any, Watch]) -> None:
    """At 1280 px and 390 px (each page opened at one and resized to the other), wherever the
    table's box is scrolled to."""
    p, _ = page
    for i, (path, column) in enumerate((("audit/dispatches/", "Last dispatch"),
                                        ("slop/", "Total"), ("ledger/history/", "Version"))):
        first, second = _widths(i)
        p.set_viewport_size({"width": first, "height": 900})
        p.goto(demo_no_search.base + path, wait_until="load")
        for width in (first, second):
            if width == second:
                p.set_viewport_size({"width": width, "height": 900})
            result = p.evaluate(_IN_VIEW_WHEREVER_SCROLLED, column)
            for left, (header_shown, first_shown) in result["seen"]:
                assert header_shown, (path, width, column, left)
                assert first_shown, (path, width, "first column", left)
            if width == 390 and path == "audit/dispatches/":
                assert result["over"] > 0  # the phone has to scroll this table: the test tests that


# ------------------------------------------------------------------------ sort and filter

def _column(p: Any, table: Any, name: str) -> list[str]:
    """The shown text of the cells of the column headed ``name``, top to bottom (one round
    trip)."""
    return table.evaluate("""(t, name) => {
      const i = [...t.tHead.querySelectorAll('th')].map(c => c.innerText.trim()).indexOf(name);
      if (i < 0) throw new Error(`no column ${name}`);
      return [...t.tBodies[0].rows].map(r => r.cells[i].innerText.trim());
    }""", name)


def _sort(p: Any, table: Any, name: str, direction: str) -> None:
    """Click a header and wait until DataTables has drawn the rows in that order (it sorts
    after the click's event, on its next turn)."""
    header = table.locator("thead th", has_text=name)
    header.click()
    header.and_(p.locator(f"[aria-sort={direction}]")).wait_for()


def test_sorting_by_a_column_and_filtering_by_typing(demo_no_search: Served,
                                                     page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.goto(demo_no_search.base + "audit/actions/", wait_until="load")
    table = p.locator("article table.dataTable").first
    ids = [int(x) for x in _column(p, table, "ID")]
    assert len(ids) == 25 and ids == sorted(ids, reverse=True)  # newest first, one page
    # numbers sort as numbers: ascending starts at the smallest ID of the page's 100 rows
    _sort(p, table, "ID", "ascending")
    asc = [int(x) for x in _column(p, table, "ID")]
    assert asc == sorted(asc) and asc[0] < ids[-1]
    _sort(p, table, "ID", "descending")
    assert [int(x) for x in _column(p, table, "ID")] == ids
    # text sorts too: by Category, A first
    _sort(p, table, "Category", "ascending")
    cats = _column(p, table, "Category")
    assert cats == sorted(cats) and len(set(cats)) >= 1

    # filtering by typing: a description from the page's last row (not on the first page)
    html = (demo_no_search.site / "audit" / "actions" / "index.html").read_text(encoding="utf-8")
    last = re.findall(r"<tr><td>(\d+)</td>", html)[-1]
    box = p.locator("article .dt-search input")
    box.click()
    p.keyboard.type(last, delay=20)
    p.wait_for_function(f"""() => [...document.querySelectorAll('article tbody tr')]
                            .some(r => r.cells[0].textContent.trim() === '{last}')""")
    rows = table.locator("tbody tr")
    assert all(last in t for t in rows.all_inner_texts())
    assert "filtered from 100" in p.locator("article .dt-info").inner_text()
    box.fill("")
    p.wait_for_function("() => document.querySelectorAll('article tbody tr').length === 25")
    box.fill("no-such-words-anywhere")
    assert "No row matches" in table.locator("tbody").inner_text()


def test_a_field_list_and_a_short_table_are_not_made_sortable(
        demo_no_search: Served, page: tuple[Any, Watch]) -> None:
    p, _ = page
    [entry] = _entry_pages(demo_no_search.site)[:1]
    p.goto(demo_no_search.base + entry, wait_until="load")
    p.wait_for_selector("article .tk-scroll table", state="attached")
    fields = p.locator("article table", has=p.locator("th", has_text="Field"))
    assert fields.count() >= 1
    assert fields.first.locator("tbody tr").count() > 5
    assert "dataTable" not in (fields.first.get_attribute("class") or "")


def test_clamped_text_shows_whole_on_hover_and_on_a_tap(demo_no_search: Served,
                                                        page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.set_viewport_size({"width": 390, "height": 900})
    for path in FIT_PAGES:
        p.goto(demo_no_search.base + path, wait_until="load")
        p.wait_for_selector("body[data-tk-tables]", state="attached")
        cut = p.locator("article .tk-long").filter(
            has_not=p.locator("a")).evaluate_all(
            "els => els.findIndex(e => e.scrollHeight > e.clientHeight + 1)")
        if cut >= 0:
            break
    else:
        raise AssertionError("no clamped cell on the demo site's pages")
    box = p.locator("article .tk-long").filter(has_not=p.locator("a")).nth(cut)
    text = box.evaluate("e => e.closest('td').textContent.trim()")
    assert box.get_attribute("title") == text and len(text) > 80
    box.click()
    assert box.evaluate("e => e.scrollHeight <= e.clientHeight + 1")
    assert box.inner_text().strip() == text


def test_without_scripts_every_row_shows(demo_no_search: Served, browser: Any) -> None:
    """The style that hides a long table's rows past 100 until the script pages it applies only
    in a browser that runs scripts."""
    context = browser.new_context(java_script_enabled=False)
    try:
        p, watch = watched(context)
        p.goto(demo_no_search.base + "audit/actions/", wait_until="load")
        rows = p.locator("article table tbody tr")
        assert rows.count() == 100
        assert rows.nth(99).is_visible()
    finally:
        context.close()
    check(watch)


# ------------------------------------------- instant navigation, and a page of 10,000 rows

@pytest.fixture(scope="module")
def big_instant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, list[int]]]:
    """A project with more than 10,000 audit actions (the demo's), all on one page, its site
    built with Material's navigation.instant, served (with an empty search index: no test
    here is about search); and the IDs of that page's rows, in the page's order. The site's
    own limits (a page's table budget, 100 actions a page) are lifted so this page holds every
    row, more than any page of a real build does. Read it only."""
    import yaml

    from tests.conftest import isolate
    from toolkit import reports
    from toolkit import site as site_mod
    from toolkit.site import BASE_CONFIG

    base = tmp_path_factory.mktemp("big-instant")
    site = base / "site"
    site.mkdir()
    for served in serve(site, search=False):
        # instant navigation needs the site's URL (it tells the site's own links)
        config = yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8"))
        config["theme"]["features"].append("navigation.instant")
        config["site_url"] = served.base
        base_config = base / "mkdocs.yml"
        base_config.write_text(yaml.safe_dump(config), encoding="utf-8")
        with pytest.MonkeyPatch.context() as mp:
            isolate(mp, base / "env-home")  # the test's environment (tests/conftest.py)
            mp.setattr(reports, "RECENT_ACTIONS", 20_000)
            mp.setattr(reports, "ACTIONS_PER_PAGE", 20_000)
            mp.setattr(site_mod, "MAX_PAGE_TABLES", 50_000_000)
            _small_site(base, audit_rows=11_000, base_config=base_config, out=site,
                        site_scope="all")  # every project's rows
        html = (site / "audit" / "actions" / "index.html").read_text(encoding="utf-8")
        ids = [int(i) for i in re.findall(r"\n<tr><td>(\d+)</td>", html)]
        yield served, ids


def test_tables_are_set_up_on_each_page_of_instant_navigation(
        big_instant: tuple[Served, list[int]], page: tuple[Any, Watch]) -> None:
    """With Material's navigation.instant the page changes without a reload: the tables of
    each page shown are set up (document$), once."""
    served, _ = big_instant
    assert "navigation.instant" in (served.site / "index.html").read_text(encoding="utf-8")
    p, _ = page
    p.goto(served.base + "ledger/", wait_until="load")
    p.wait_for_selector("article table.dataTable")
    # Material takes over a click on a link only once it has the site's sitemap.xml (it
    # checks the link against it); a click before that loads the page as usual. Wait for the
    # sitemap's response, then for the page to have run what follows it (its parsing).
    p.wait_for_function("() => performance.getEntriesByType('resource').some("
                        "e => new URL(e.name).pathname.endsWith('/sitemap.xml')"
                        " && e.responseEnd > 0)")
    p.evaluate("() => new Promise(done => setTimeout(done, 50))")
    p.evaluate("window.tkMarker = 1")
    p.locator("nav.md-nav--primary a[href$='audit/actions/']").first.click()
    p.wait_for_url("**/audit/actions/")
    # the address changes before the new page's content is swapped in: wait for it (the
    # old page's tables also have a filter box)
    p.wait_for_function("() => (document.querySelector('article h1') || {}).textContent"
                        "?.startsWith('Recent actions')")
    p.wait_for_selector("article .dt-search input")
    assert p.evaluate("window.tkMarker") == 1  # no reload happened
    assert p.locator("article .dt-container").count() == 1
    assert p.locator("article table.dataTable tbody tr").count() == 25


def test_a_page_of_10000_rows_keeps_one_page_of_them_in_the_document(
        big_instant: tuple[Served, list[int]], page: tuple[Any, Watch]) -> None:
    """The browser keeps 25 of the page's rows in the document, and sorting and filtering
    still reach every row."""
    served, ids = big_instant
    html = (served.site / "audit" / "actions" / "index.html").read_text(encoding="utf-8")
    total = html.count("\n<tr><td>")
    assert total >= 10_000 and "rows are shown" not in html
    assert len(ids) == total and ids == sorted(ids, reverse=True)  # newest first
    oldest = ids[-1]
    p, _ = page
    p.goto(served.base + "audit/actions/", wait_until="load")
    p.wait_for_selector("body[data-tk-tables]", state="attached")
    rows = p.locator("article table.dataTable tbody tr")
    assert rows.count() == 25
    assert p.evaluate("document.querySelectorAll('tr').length") < 40
    assert f"of {total:,}" in p.locator("article .dt-info").inner_text()
    p.locator("article table.dataTable thead th", has_text="ID").click()
    p.wait_for_function(f"""() => document.querySelector('article tbody tr')
                            .cells[0].textContent.trim() === '{oldest}'""")
    # the newest row is on the last of the sorted pages: typing its ID finds it
    p.locator("article .dt-search input").fill(str(ids[0]))
    p.wait_for_function("() => document.querySelectorAll('article tbody tr').length === 1")
    assert rows.first.inner_text().split()[0] == str(ids[0])
    assert p.locator("article .dt-paging-button").count() <= 9  # the pager stays small


# ----------------------------------------------------- tables the script cannot or may not sort

@pytest.fixture(scope="module")
def demo_and_mine(demo_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The shared demo site served with this module's own pages beside its own (in a folder of
    their own: the shared site stays as it was built), and an empty search index (no test
    here is about search)."""
    yield from serve(demo_site, overlay=tmp_path_factory.mktemp("tables-pages"), search=False)


def _page_of_tables(served: Served, name: str, tables: str, script: str = "") -> str:
    """A page beside the demo site's own (same depth, so the theme and the table scripts load
    as on them) whose article holds only ``tables``; ``script`` runs right after DataTables
    loads. Returns its URL."""
    template = (served.site / "warnings" / "index.html").read_text(encoding="utf-8")
    text, n = re.subn(r"(<article[^>]*>).*?(</article>)",
                      lambda m: m.group(1) + tables + m.group(2), template, flags=re.S)
    assert n == 1
    if script:
        tag = 'datatables.min.js"></script>'
        assert tag in text
        text = text.replace(tag, tag + f"<script>{script}</script>", 1)
    assert served.overlay is not None
    folder = served.overlay / name
    folder.mkdir(exist_ok=True)
    (folder / "index.html").write_text(text, encoding="utf-8")
    return served.base + name + "/"


_LONG = "a description long enough to be clamped to its first lines in a narrow column " * 2


def _table(table_id: str, head: str, rows: list[str]) -> str:
    return (f'<table id="{table_id}"><thead>{head}</thead><tbody>'
            + "".join(f"<tr>{r}</tr>" for r in rows) + "</tbody></table>\n")


def _good_rows(n: int = 8) -> list[str]:
    return [f"<td>task {i}</td><td>{i}</td><td>2026-11-{i:02d} 10:00:00</td>"
            f"<td>{_LONG}</td>" for i in range(1, n + 1)]


_HEAD = "<tr><th>Task</th><th>Retries</th><th>Last dispatch</th><th>Note</th></tr>"

# what tables.js does to one table: sortable (DataTables set it up), in a scroll box, set up
_STATE = """t => ({sortable: t.classList.contains('dataTable'),
                  scroll: !!t.closest('.tk-scroll'), ready: t.classList.contains('tk-ready'),
                  clamped: t.querySelectorAll('.tk-long').length,
                  shown: [...t.tBodies[0].rows].filter(r => r.offsetHeight > 0).length})"""

# Once the page has settled at its width (_SETTLED: a resize taken in): _STATE of each table
# named by its id, and _FIT of the page, in one round trip.
_STATES_AND_FIT = f"""async (ids) => {{
  await {_SETTLED};
  const state = {_STATE};
  return {{states: Object.fromEntries(ids.map(id => [id, state(document.getElementById(id))])),
          fit: ({_FIT})()}};
}}"""


def test_a_table_with_merged_cells_or_several_header_rows_is_fitted_not_sorted(
        demo_and_mine: Served, page: tuple[Any, Watch]) -> None:
    """At 390 px, then at 1280 px (the window resized)."""
    rows = _good_rows()
    merged = [*rows[:2], '<td colspan="2">task 3, retried</td><td>2026-11-03 10:00:00</td>'
              f"<td>{_LONG}</td>", *rows[3:]]
    two_heads = '<tr><th colspan="2">What</th><th colspan="2">When</th></tr>' + _HEAD
    short_row = [*rows[:4], "<td>task 5</td><td>5</td><td>2026-11-05 10:00:00</td>", *rows[5:]]
    url = _page_of_tables(demo_and_mine, "tk-faults-odd-tables",
                          _table("merged", _HEAD, merged) + _table("heads", two_heads, rows)
                          + _table("short", _HEAD, short_row) + _table("plain", _HEAD, rows))
    p, _ = page
    p.set_viewport_size({"width": 390, "height": 900})
    p.goto(url, wait_until="load")
    p.wait_for_selector("body[data-tk-tables]", state="attached")
    for width in (390, 1280):
        if width == 1280:
            p.set_viewport_size({"width": width, "height": 900})
        seen = p.evaluate(_STATES_AND_FIT, ["merged", "heads", "short", "plain"])
        for table_id, long_cells in (("merged", 8), ("heads", 8), ("short", 7)):
            state = seen["states"][table_id]
            assert state == {"sortable": False, "scroll": True, "ready": True,
                             "clamped": long_cells, "shown": 8}, (width, table_id, state)
        # the same table without the odd cells is made sortable: the page does sort tables
        assert seen["states"]["plain"]["sortable"] is True
        result = seen["fit"]
        assert result["tables"] == 4 and result["problems"] == [], (width,
                                                                    result["problems"][:5])


# One column more than the table has: DataTables' own "Requested unknown parameter" error
# (tn/4), which it shows in an alert() unless told to throw.
_BREAK_ONE_TABLE = """(function () {
  var Real = window.DataTable;
  function Breaking(table, options) {
    if (table.id === "boom") options = Object.assign({}, options, {columns: [{}, {}, {}, {}, {}]});
    return new Real(table, options);
  }
  Object.assign(Breaking, Real);
  window.DataTable = Breaking;
})();"""


def test_a_table_datatables_fails_on_is_left_unsorted_fitted_and_warned_about(
        demo_and_mine: Served, page: tuple[Any, Watch]) -> None:
    url = _page_of_tables(demo_and_mine, "tk-faults-boom",
                          _table("boom", _HEAD, _good_rows()) + _table("plain", _HEAD,
                                                                       _good_rows()),
                          script=_BREAK_ONE_TABLE)
    p, watch = page
    warnings: list[str] = []
    p.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    p.set_viewport_size({"width": 390, "height": 900})
    p.goto(url, wait_until="load")
    p.wait_for_selector("body[data-tk-tables]", state="attached")
    assert any(w.startswith("table left unsorted:") and "tn/4" in w for w in warnings), warnings
    state = p.locator("#boom").evaluate(_STATE)
    assert state["scroll"] and state["ready"] and state["shown"] == 8, state
    assert p.locator("#plain").evaluate(_STATE)["sortable"] is True
    # a click on its header leaves the rows in the page's order
    before = p.locator("#boom tbody tr td:first-child").all_inner_texts()
    p.locator("#boom thead th", has_text="Retries").click()
    p.wait_for_timeout(100)
    assert p.locator("#boom tbody tr td:first-child").all_inner_texts() == before
    result = p.evaluate(_FIT)
    assert result["problems"] == [], result["problems"][:5]
    assert watch.dialogs == []  # never an alert() (the fixture checks it again at the end)


def test_text_typed_into_the_filter_box_is_matched_as_plain_text(
        demo_and_mine: Served, page: tuple[Any, Watch]) -> None:
    hostile = "<img src=//evil.example/x onerror=alert(1)>"
    odd = ["(.*", "a.b", "<b>bold</b>"]
    texts = [hostile, *odd, "plain one", "plain two", "plain three", "plain four"]
    rows = [f"<td>{escape(t)}</td><td>{i}</td>" for i, t in enumerate(texts)]
    url = _page_of_tables(demo_and_mine, "tk-faults-filter",
                          _table("hostile", "<tr><th>Text</th><th>N</th></tr>", rows))
    p, _ = page
    p.goto(url, wait_until="load")
    p.wait_for_selector("#hostile.dataTable")
    box = p.locator("article .dt-search input")
    shown = p.locator("#hostile tbody tr td:first-child")
    for typed in [hostile, *odd]:
        box.fill("")
        box.click()
        p.keyboard.type(typed, delay=5)
        p.wait_for_function("() => document.querySelectorAll('#hostile tbody tr').length < 8")
        assert shown.all_inner_texts() == [typed], typed
        assert box.input_value() == typed
    assert p.locator("article img, article b").count() == 0  # nothing was read as HTML
    box.fill("<i>nothing like this</i>")
    assert p.locator("#hostile tbody").inner_text().strip() == "No row matches the filter"
    assert p.locator("article i").count() == 0
