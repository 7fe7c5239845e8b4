"""The built site in a real headless Chromium (Debian's chromium, driven by Playwright).

The demo site (built by `toolkit build-site --demo`, as a user would) and the hostile site
(FAULTS.md E1) are served by a http.server thread on 127.0.0.1. Every request the browser makes
is recorded: any host but 127.0.0.1 fails the test (and the request fails at a proxy that is
not there, so nothing leaves the machine). Console errors fail the test; so does any dialog.
The site, server, browser and guard are tests/_browser_helpers.py's (shared by every browser
module).

Skipped only when /usr/bin/chromium is missing and CI is unset; in CI a missing browser fails.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests._browser_helpers import Served, Watch, need_chromium, serve, watched
from tests._site_helpers import HOSTILE_TASK, HOSTILE_TITLE_SHOWN
from toolkit import search_text

pytestmark = pytest.mark.browser

need_chromium()


_RESULTS_FOR = """word => {
    const hs = [...document.querySelectorAll('.md-search-result__item a')].map(a =>
        new URL(a.href, location.href).searchParams.get('h') || '');
    return hs.includes(word) && hs.every(h => h === word || h === '');
}"""


def _search(p: Any, word: str) -> Any:
    """Enter a word into Material's search box until results show. The index loads in a
    worker after the page, and a query entered before it is ready may be dropped: wait until
    the results line no longer says the search is starting (Material's sign that the worker is
    ready), and enter it again if no result shows. The box is emptied, then the word put in
    whole, each followed by a key release (Material reads the box on each): one search, where
    typing the word a letter at a time searched the whole index for each prefix first. Results
    of the previous search do not count: each result links with the query it answers
    (``?h=``; empty on a page whose sections matched but not its own text), and every link
    must carry the whole word."""
    box = p.locator("input.md-search__input")
    items = p.locator(".md-search-result__item")
    p.wait_for_function("() => document.querySelector('.md-search-result__meta')"
                        ".textContent.trim() !== 'Initializing search'")
    for _ in range(6):
        box.click()  # focus opens the search dialog; fill() alone does not on every page
        for query in ("", word):  # emptied first: Material ignores a query it last read
            box.fill(query)
            box.press("End")
        try:
            p.wait_for_function(_RESULTS_FOR, arg=word, timeout=2_500)
            return items
        except Exception:  # playwright's TimeoutError: enter it again
            continue
    shown = p.locator(".md-search-result__item a").evaluate_all(
        "links => links.map(a => a.getAttribute('href'))")
    raise AssertionError(f"search for {word!r} showed no result for it: {shown[:5]}")


# For each image: its natural width once loaded and decoded (0 when it failed or is not loaded)
_DRAWN = "imgs => imgs.map(img => img.complete ? img.naturalWidth : 0)"


def test_home_renders_with_its_charts(demo_no_search: Served,
                                      page: tuple[Any, Watch]) -> None:
    p, watch = page
    p.goto(demo_no_search.base, wait_until="load")
    assert p.locator("h1").first.inner_text().strip()
    widths = p.locator("article img[src*='charts/']").evaluate_all(_DRAWN)
    assert len(widths) >= 2 and all(w > 0 for w in widths), widths
    assert any("/charts/" in u and u.endswith(".svg") for u in watch.requests)
    assert "Open slop" in p.locator("article").inner_text()


def test_a_request_for_another_host_is_caught_and_goes_nowhere(browser: Any) -> None:
    """The guard every browser test relies on (tests/_browser_helpers.py): a request for
    another host, by name, by address or over a websocket, is recorded as foreign, and fails
    in the browser at the proxy that is not there instead of reaching the network. (The
    addresses are documentation ones, which lead nowhere even without the guard.)"""
    context = browser.new_context()
    try:
        p, watch = watched(context)
        failed: dict[str, str | None] = {}
        p.on("requestfailed", lambda r: failed.__setitem__(r.url, r.failure))
        images = ["http://192.0.2.7/a.png", "https://guard.example/b.png"]
        p.set_content("".join(f'<img src="{u}">' for u in images)
                      + '<script>new WebSocket("ws://198.51.100.9/c")</script>')
        for _ in range(100):  # the events arrive in any order
            if len(failed) == 2 and len(watch.foreign) == 3:
                break
            p.wait_for_timeout(50)
        assert failed == {u: "net::ERR_PROXY_CONNECTION_FAILED" for u in images}
        assert sorted(watch.foreign) == sorted([*images, "ws://198.51.100.9/c"])
    finally:
        context.close()


def _rare_pattern_word(site: Path) -> tuple[str, str]:
    """A word from one ledger entry's Pattern (on its page) that no other search entry
    contains. (An entry page is one search entry: its sections are not entries of their own.)"""
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    docs = index["docs"]

    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z]{7,}", re.sub(r"<[^>]+>", " ", text.lower())))

    counts: dict[str, int] = {}
    for d in docs:
        for w in words(d["title"] + " " + d["text"]):
            counts[w] = counts.get(w, 0) + 1
    for d in docs:
        location = d["location"]
        if location.startswith("ledger/") and location.count("/") == 3:
            html = (site / location / "index.html").read_text(encoding="utf-8")
            after = html.partition('<h2 id="pattern">')[2].partition("</h2>")[2]
            pattern = after.partition("<h2 ")[0]
            for w in sorted(words(pattern)):
                if counts.get(w) == 1:
                    return w, location
    raise AssertionError("no rare word in any pattern")


def test_search_finds_an_entry_by_a_word_from_its_pattern(demo: Served,
                                                          page: tuple[Any, Watch]) -> None:
    p, _ = page
    word, location = _rare_pattern_word(demo.site)
    p.goto(demo.base, wait_until="load")
    _search(p, word)
    hrefs = p.locator(".md-search-result__item a").evaluate_all(
        "links => links.map(a => a.getAttribute('href'))")
    assert any(location in (h or "") for h in hrefs), (word, location, hrefs)


def test_entry_and_task_pages_open_from_their_indexes(demo_no_search: Served,
                                                      page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.goto(demo_no_search.base + "ledger/patterns/", wait_until="load")
    link = p.locator("article table a[href*='ledger/patterns/'], article table a").first
    title = link.inner_text().strip()
    link.click()
    p.wait_for_load_state("load")
    assert p.locator("article h1").first.inner_text().strip() == title
    assert "Pattern" in p.locator("article").inner_text()

    p.goto(demo_no_search.base + "audit/tasks/", wait_until="load")
    task_link = p.locator("article table a").first
    task = task_link.inner_text().strip()
    task_link.click()
    p.wait_for_load_state("load")
    assert p.locator("article h1").first.inner_text().strip() == f"Task: {task}"
    assert "Dispatches" in p.locator("article").inner_text()


def test_hostile_pages_open_no_dialog_and_make_no_outside_request(
        hostile_served: Served, page: tuple[Any, Watch]) -> None:
    from toolkit.reports import task_slugs

    p, watch = page
    [entry] = (hostile_served.site / "ledger" / "patterns").glob("img-src-x-onerror-*")
    slug = task_slugs([HOSTILE_TASK])[HOSTILE_TASK]
    # the entry's page last: the test goes on there
    for path in ("slop/deadbeef/", f"audit/tasks/{slug}/", "audit/actions/",
                 "ledger/patterns/", "sessions/", f"ledger/patterns/{entry.name}/"):
        p.goto(hostile_served.base + path, wait_until="load")
        # the page's scripts have all run (tables.js marks the body last)
        p.wait_for_selector("body[data-tk-tables]", state="attached")
    assert p.title().startswith(HOSTILE_TITLE_SHOWN)
    assert p.locator("article h1").first.inner_text().strip() == HOSTILE_TITLE_SHOWN
    # the search results render the hostile title too
    items = _search(p, "evil")
    assert HOSTILE_TITLE_SHOWN in items.first.inner_text()
    p.wait_for_timeout(300)
    assert watch.dialogs == []
    assert all(urlsplit(u).hostname in ("127.0.0.1", None) for u in watch.requests)


def test_an_analysis_page_shows_its_charts_and_findings_offline(
        demo_no_search: Served, page: tuple[Any, Watch]) -> None:
    """build-site --demo ran the bundled notebooks: each is a page of the Analyses section, its
    charts files of the site; nothing is asked of another host (the fixture's check)."""
    p, watch = page
    p.goto(demo_no_search.base + "analyses/debt-the-agent-left/", wait_until="load")
    assert p.locator("h1").first.inner_text().strip() == "Debt the agent left"
    nav = p.locator("nav.md-nav--primary").inner_text()
    assert "Analyses" in nav and "What each turn changed" in nav
    widths = p.locator("article img[src$='.svg']").evaluate_all(_DRAWN)
    assert len(widths) >= 4 and all(w > 0 for w in widths), widths
    text = p.locator("article").inner_text()
    assert text.count("Finding:") >= 4 and "open entries have no owner" in text
    assert p.locator("article pre").count() >= 4  # the printed listings, spacing kept
    assert any(u.endswith("/analyses/debt-the-agent-left/chart-1.svg") for u in watch.requests)


class _TableWords(HTMLParser):
    """Words (whole, lowercase, 7+ letters) of a page's article, by where they stand: in a
    field list (a table headed Field/Value), in another table, or outside every table."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # inside <article>
        self.table: str | None = None  # "fields" or "table" while inside one
        self.cells: list[str] = []
        self.words: dict[str, set[str]] = {"fields": set(), "table": set(), "text": set()}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "article":
            self.depth += 1
        elif tag == "table" and self.depth:
            self.table, self.cells = "table", []

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self.depth -= 1
        elif tag == "table" and self.table:
            self.table = None

    def handle_data(self, data: str) -> None:
        if not self.depth:
            return
        if self.table and not self.cells and data.strip():
            self.cells.append(data)
            if data.strip() == "Field":
                self.table = "fields"
        for token in data.split():
            word = token.strip(".,:;()'\"")
            if re.fullmatch(r"[a-z]{7,}", word):
                self.words[self.table or "text"].add(word)


@functools.cache
def _words_by_place(site: Path) -> dict[str, set[tuple[str, str]]]:
    """Every word of the site's pages: (where it stands, page URL) for each of its places."""
    seen: dict[str, set[tuple[str, str]]] = {}
    for html_file in sorted(site.rglob("index.html")):
        if html_file.parent.name in ("search", "assets"):
            continue
        html = html_file.read_text(encoding="utf-8")
        start, end = html.find("<article"), html.rfind("</article>")
        parser = _TableWords()  # it reads only the article: the rest (the nav) is skipped
        parser.feed(html[start:end + len("</article>")] if 0 <= start < end else html)
        url = html_file.parent.relative_to(site).as_posix()
        for kind, words in parser.words.items():
            for w in words:
                seen.setdefault(w, set()).add((kind, "" if url == "." else url + "/"))
    return seen


def _words_only_in(site: Path, where: str) -> list[tuple[str, set[str]]]:
    """(word, page URLs) for words that stand only in ``where`` ("fields" or "table") on every
    page of the site that has them, the rarest first."""
    seen = _words_by_place(site)
    return sorted(((w, {url for _, url in places}) for w, places in seen.items()
                   if {kind for kind, _ in places} == {where}), key=lambda c: (len(c[1]), c[0]))


def test_search_finds_words_that_stand_only_in_tables_and_field_lists(
        demo: Served, page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.goto(demo.base, wait_until="load")
    for where in ("table", "fields"):
        candidates = _words_only_in(demo.site, where)
        assert candidates, f"the demo site has no word only in a {where}"
        for word, urls in candidates[:3]:
            _search(p, word)
            hrefs = p.locator(".md-search-result__item a").evaluate_all(
                "links => links.map(a => a.getAttribute('href'))")
            paths = {urlsplit(h or "").path for h in hrefs}
            assert paths & {"/" + u for u in urls}, (where, word, urls, hrefs)
            previews = p.locator(".md-search-result__item").all_inner_texts()
            assert not any("tkpost" in t or "tktable" in t for t in previews)


def _hidden_only_word(site: Path) -> tuple[str, str, str]:
    """(word, location, preview): a word of 7 letters or more that one search entry holds only
    past its preview (hidden: toolkit/search_text.py) and no other entry holds at all."""
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    docs = index["docs"]
    counts: dict[str, int] = {}
    for d in docs:
        text = " ".join([d["title"], d["text"], *(d.get("tags") or [])])
        for w in set(re.findall(r"[a-z]{7,}", re.sub(r"<[^>]+>", " ", text).lower())):
            counts[w] = counts.get(w, 0) + 1
    for d in docs:
        shown, _, hidden = d["text"].partition(search_text.HIDDEN_OPEN)
        for w in re.findall(r"(?<![\w&])[a-z]{7,}(?!\w)", hidden):
            if counts.get(w) == 1 and shown and not d.get("tags"):
                return w, d["location"], shown
    raise AssertionError("no word only in an entry's hidden part")


def test_a_word_past_the_preview_is_found_and_the_result_shows_the_preview(
        demo: Served, page: tuple[Any, Watch]) -> None:
    """A result shows its entry's preview (the start of its text), never the words after it
    that the entry holds for search; a search for such a word still finds the entry."""
    p, _ = page
    word, location, shown = _hidden_only_word(demo.site)
    p.goto(demo.base, wait_until="load")
    items = _search(p, word)
    hit = items.filter(has=p.locator(f'a[href*="/{location}"]'))
    assert hit.count() == 1, (word, location)
    text = " ".join(hit.inner_text().split())
    start = " ".join(html.unescape(shown).split()[:6])
    assert start in text, (start, text)
    assert word not in text.lower(), text  # the hidden terms take no room in the result
    assert hit.locator("rp").count() == 1 and not hit.locator("rp").is_visible()


def test_turn_pages_open_from_the_snapshots_overview_and_show_the_diff(
        demo_no_search: Served, page: tuple[Any, Watch]) -> None:
    p, _ = page
    p.goto(demo_no_search.base + "snapshots/", wait_until="load")
    links = p.locator("article table a[href*='turns/']")
    assert links.count() >= 2
    links.first.click()
    p.wait_for_load_state("load")
    assert "/snapshots/turns/" in p.url
    diff = p.locator("article pre.tk-code")
    assert diff.is_visible() and diff.inner_text().startswith("diff --git")
    assert p.locator("article h2", has_text="Files changed").count() == 1
    p.locator("article a", has_text="All turns").click()
    p.wait_for_load_state("load")
    assert p.url.rstrip("/").endswith("/snapshots")


@pytest.fixture(scope="module")
def fleet_served(shared_fleet_site: Path) -> Iterator[Served]:
    """The fleet site of tests/_fleet_helpers.py (three projects, one gone), built by the CLI
    command as a user runs it (conftest's shared_fleet_site, which tests/test_fleet.py reads
    too), served without its search entries (the test is not about search)."""
    yield from serve(shared_fleet_site, search=False)


def test_the_fleet_overview_loads_offline_and_its_links_resolve(
        fleet_served: Served, page: tuple[Any, Watch]) -> None:
    p, watch = page
    p.goto(fleet_served.base, wait_until="load")
    article = p.locator("article").inner_text()
    assert "One card per project" in article and "gone" in article
    assert "(not assigned)" in article
    hrefs = p.locator("article a").evaluate_all("links => links.map(a => a.href)")
    targets = sorted({h.split("#")[0] for h in hrefs if h.startswith(fleet_served.base)})
    assert any("/projects/alpha/" in t for t in targets)
    assert any(t.endswith("/recurring/") for t in targets)
    for target in targets:  # every card and section link opens a page of the site
        response = p.goto(target, wait_until="load")
        assert response is not None and response.status == 200, target
        assert p.locator("article h1").first.inner_text().strip()
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in watch.requests)
