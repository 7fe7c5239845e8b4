"""The site's search index holds each page's real text: every table's cells, separated, and no
internal placeholder (issue 15 item 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests._site_helpers import World, search_terms
from toolkit import search_text, site_hooks
from toolkit.site import FIELDS_TOKEN, POST_TOKEN, ROWS_TOKEN, TABLE_TOKEN


@pytest.fixture(scope="module")
def index(formats_site: tuple[World, Path]) -> list[dict[str, str]]:
    """The search index of the formats project's site (tests/conftest.py's, read only)."""
    _world, site = formats_site
    docs: list[dict[str, str]] = json.loads(
        (site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    return docs


def _page_text(index: list[dict[str, str]], url: str) -> str:
    return " ".join(d["title"] + " " + d["text"] for d in index
                    if d["location"].split("#")[0] == url)


@pytest.fixture(scope="module")
def separator(formats_site: tuple[World, Path]) -> str:
    """The separator of the site's search (its index's config)."""
    _world, site = formats_site
    return str(json.loads((site / "search" / "search_index.json").read_text(
        encoding="utf-8"))["config"]["separator"])


def _finds(index: list[dict[str, str]], url: str, phrase: str, separator: str) -> bool:
    """Whether each term of ``phrase`` is in the page's entries (search finds the page)."""
    page = _page_text(index, url) + " " + " ".join(
        " ".join(d.get("tags") or []) for d in index if d["location"].split("#")[0] == url)
    return search_terms(phrase, separator) <= search_terms(page, separator)


def test_no_search_entry_holds_a_placeholder(index: list[dict[str, str]]) -> None:
    assert index
    bad = [d["location"] for d in index if re.search(r"tk(?:post|table)-|&#35;|#tk", d["text"])]
    assert bad == []


def test_table_cells_and_field_lists_are_indexed_with_boundaries(
        index: list[dict[str, str]], separator: str) -> None:
    # a slop entry's field list: its values, each its own word
    for word in ("retained_compatibility", "task_01HZX3K9Q2"):
        assert _finds(index, "slop/4b7e2c91/", word, separator), word
    assert _finds(index, "slop/4b7e2c91/", "crates/api/src/handlers/legacy_auth.rs:88",
                  separator)  # a file name
    # a ledger entry's field list (category, its file)
    url = "ledger/patterns/run-the-migration-dry-run-before-applying-schema-changes/"
    assert _finds(index, url, "implementation patterns.md", separator)
    # a table of tasks: header cells apart, and a task that is only a table cell
    dispatches = _page_text(index, "audit/dispatches/")
    assert _finds(index, "audit/dispatches/", "Cap webhook retries at 5 attempts", separator)
    assert not _finds(index, "audit/dispatches/", "zanzibarquux", separator)
    assert not re.search(r"[a-z][A-Z][a-z]+[A-Z]", re.sub(r"<[^>]+>", " ", dispatches)), \
        "cells run together"


def test_an_entry_page_is_one_search_entry_without_the_site_s_repeated_words(
        formats_site: tuple[World, Path], index: list[dict[str, str]]) -> None:
    """An entry page is indexed once (its sections are no entries of their own, so its
    location, title and tags are not repeated per section), without the words every entry
    page repeats (the field list's header and labels, a table's column names, the Source
    line that names the file and id its fields hold); every word of its text is still there.
    The page itself keeps its headings (with their anchors), labels and Source line."""
    _world, site = formats_site
    url = "slop/4b7e2c91/"
    entries = [d for d in index if d["location"].split("#")[0] == url]
    assert [d["location"] for d in entries] == [url]
    [entry] = entries
    assert "retained_compatibility" in entry["tags"]  # (tags are searched too)
    # a result shows the start of the text: the entry's own words first, its field list's ids
    # and dates (the page shows them first) after them, still searchable
    assert entry["text"].startswith("The X-Api-Token header path was kept"), entry["text"][:80]
    assert "4b7e2c91 0d3a" in entry["text"] and "task_01hzx3k9q2" in entry["text"]
    for boilerplate in ("Field Value", "Bucket", "Severity", "Source:", "Description"):
        assert boilerplate not in entry["text"], boilerplate
    html = (site / url / "index.html").read_text(encoding="utf-8")
    assert '<h2 id="description">' in html and "data-tkhead" not in html
    assert "<th>Field</th> <th>Value</th>" in html and "<td>Bucket</td>" in html
    assert "<p>Source: " in html
    # every word of the page's article but the site's own is in its entry
    article = html.partition("<article")[2].partition(">")[2].partition("</article>")[0]
    for ours in (r"<thead>.*?</thead>", r"<tr><td>[^<]*</td>", r"<h[1-6].*?</h[1-6]>",
                 r"<p>Source: [^<]*</p>"):
        article = re.sub(ours, " ", article, flags=re.DOTALL)

    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z0-9_]{4,}", re.sub(r"<[^>]+>", " ", text).lower()))

    held = " ".join([entry["title"], entry["text"], *entry["tags"]])
    assert words(article) <= words(held), words(article) - words(held)
    # the sections of a long page (the handoff report) stay entries of their own
    assert sum(d["location"].startswith("handoff/#") for d in index) >= 2


_PAGE = SimpleNamespace(file=SimpleNamespace(src_uri="x.md"), meta={})


def _through_hooks(tables: dict[str, str], html: str) -> tuple[str, str]:
    """(the text Material's own search parser indexes from the page as the hook leaves it for
    the search plugin, the page's final HTML)."""
    from material.plugins.search.plugin import Parser

    # as the hook reads them from the build folder: in files by the digests' first digits
    site_hooks._tables = {}
    for digest, table in tables.items():
        site_hooks._tables.setdefault(digest[:2], {})[digest] = table
    for_search = site_hooks.for_search(html, _PAGE)
    parser = Parser()
    parser.feed(for_search)
    text = " ".join("".join(s.text) for s in parser.data)
    return text, site_hooks.on_post_page(f"<html>{for_search}</html>", page=_PAGE, config=None)


def test_a_table_kept_out_of_search_leaves_nothing_in_the_index() -> None:
    """``table(x, search=False)``: the search plugin finds neither the table nor its
    placeholder; the page still gets the table."""
    digest = "0123456789abcdef0123"
    text, final = _through_hooks(
        {digest: "<table><tr><td>secretcell</td></tr></table>"},
        f"<p>Before.</p>\n<p>{POST_TOKEN.format(digest)}</p>\n<p>After.</p>")
    assert "Before." in text and "After." in text
    assert "tkpost" not in text and "secretcell" not in text
    assert "<td>secretcell</td>" in final and "tkpost" not in final


def test_the_search_plugin_reads_a_table_as_its_text_and_the_page_gets_the_table() -> None:
    digest = "abcdef0123456789abcd"
    table = ("<table>\n<thead>\n<tr><th>Task</th> <th>Approach</th></tr>\n</thead>\n<tbody>"
             "\n<tr><td>fix &lt;b&gt;</td> <td><a href=\"x/\">retrybudget</a></td></tr>"
             "\n</tbody>\n</table>")
    text, final = _through_hooks({digest: table}, f"<p>{TABLE_TOKEN.format(digest)}</p>")
    assert "Task Approach fix &lt;b&gt; retrybudget" in text and "tktable" not in text
    assert final == f"<html>{table}</html>"


def test_the_index_reads_a_site_table_without_its_header_and_a_field_list_without_labels(
        ) -> None:
    """A table of the site's (``table()``): its cells, not its column names; a field list
    (``fields()``): its values, not its header or labels; agent Markdown keeps every word of
    a table it holds (``TABLE_TOKEN``). Each page still gets its table whole."""
    rows, fields, block = "abcdef0123456789abc1", "abcdef0123456789abc2", "abcdef0123456789abc3"
    table = ("<table>\n<thead>\n<tr><th>Task</th> <th>Approach</th></tr>\n</thead>\n<tbody>"
             "\n<tr><td>fixit</td> <td>retrybudget</td></tr>\n</tbody>\n</table>")
    field_list = ("<table>\n<thead>\n<tr><th>Field</th> <th>Value</th></tr>\n</thead>\n"
                  "<tbody>\n<tr><td>Bucket</td> <td>naming_drift</td></tr>\n"
                  "<tr><td>Owner</td> <td><a href=\"x/\">omar</a></td></tr>\n</tbody>\n</table>")
    html = (f"<p>{ROWS_TOKEN.format(rows)}</p>\n<p>{FIELDS_TOKEN.format(fields)}</p>\n"
            f"<p>{TABLE_TOKEN.format(block)}</p>")
    text, final = _through_hooks({rows: table, fields: field_list, block: table}, html)
    assert re.sub(r"</?p>", " ", text).split() == ["fixit", "retrybudget", "naming_drift", "omar",
                            "Task", "Approach", "fixit", "retrybudget"]
    assert final == f"<html>{table}\n{field_list}\n{table}</html>"


def test_a_one_entry_page_is_indexed_as_one_section_and_keeps_its_headings() -> None:
    """``search_one_entry: true``: the search plugin sees no heading below the title (so no
    section of its own), nor the headings' words; the page gets its headings back."""
    from material.plugins.search.plugin import Parser

    page = SimpleNamespace(file=SimpleNamespace(src_uri="e.md"), meta={"search_one_entry": True})
    html = ('<p>Intro.</p>\n<h2 id="context">Context<a class="headerlink" href="#context" '
            'title="Permanent link">&para;</a></h2>\n<p>Some context.</p>\n'
            '<h2 id="pattern">Pattern</h2>\n<p>A pattern.</p>')
    for_search = site_hooks.for_search(html, page)
    parser = Parser()
    parser.feed(for_search)
    assert len(parser.data) == 1
    assert " ".join("".join(parser.data[0].text).split()) == \
        "<p>Intro.</p> <p>Some context.</p> <p>A pattern.</p>"
    assert site_hooks.on_post_page(for_search, page=page, config=None) == html
    # a page without the flag keeps a section per heading
    plain = SimpleNamespace(file=SimpleNamespace(src_uri="p.md"), meta={})
    parser = Parser()
    parser.feed(site_hooks.for_search(html, plain))
    assert len(parser.data) == 3


@pytest.mark.parametrize("heading", [True, False])
def test_a_one_entry_page_s_field_list_is_read_last_and_stays_in_its_place(
        heading: bool) -> None:
    """On a one-entry page (an entry's own page) the search plugin reads the field list's
    values after the page's prose, so a result's preview is the entry's words, not its ids
    and dates; the page gets its field list where it was, and nothing else."""
    from material.plugins.search.plugin import Parser

    digest = "abcdef0123456789abc4"
    field_list = ("<table>\n<thead>\n<tr><th>Field</th> <th>Value</th></tr>\n</thead>\n"
                  "<tbody>\n<tr><td>Id</td> <td>4b7e2c91</td></tr>\n</tbody>\n</table>")
    site_hooks._tables = {digest[:2]: {digest: field_list}}
    html = (f"<p>{FIELDS_TOKEN.format(digest)}</p>\n"
            + ('<h2 id="description">Description</h2>\n' if heading else "")
            + "<p>The header path was kept.</p>")
    page = SimpleNamespace(file=SimpleNamespace(src_uri="e.md"), meta={"search_one_entry": True})
    for_search = site_hooks.for_search(html, page)
    parser = Parser()
    parser.feed(for_search)
    [entry] = parser.data
    assert " ".join("".join(entry.text).split()) == \
        "<p>The header path was kept.</p> <p>4b7e2c91</p>"
    final = site_hooks.on_post_page(f"<html>{for_search}</html>", page=page, config=None)
    assert final == "<html>" + html.replace(f"<p>{FIELDS_TOKEN.format(digest)}</p>",
                                            field_list) + "</html>"


def test_a_table_whose_column_names_are_data_keeps_them_searchable() -> None:
    """``table(x)`` leaves its column names (the site's) out of the index; ``table(x,
    columns=True)`` (a check's rows, named by its query) keeps them; ``fields(x)`` leaves its
    labels out, ``fields(x, labels=True)`` (a slop entry's other fields) keeps them."""
    from toolkit.pages import Field, Table
    from toolkit.site import _Renderer

    renderer = _Renderer()
    page = SimpleNamespace(path="checks.md")
    tbl = Table(["agent_type", "short_id"], [["Explore", "ab12"]])
    fields = [Field("flavour", "sour")]
    out = {}
    for name, call in (("rows", "table(t)"), ("columns", "table(t, columns=True)"),
                       ("fields", "fields(f)"), ("labels", "fields(f, labels=True)")):
        markdown = renderer.env.from_string("{{ " + call + " }}").render(
            page=page, _r=renderer, t=tbl, f=fields)
        text, _final = _through_hooks(renderer.tables, f"<p>{markdown}</p>")
        out[name] = text
    assert "agent_type" not in out["rows"] and "Explore ab12" in out["rows"]
    assert "agent_type short_id Explore ab12" in out["columns"]
    assert "flavour" not in out["fields"] and "sour" in out["fields"]
    assert "flavour sour" in out["labels"]


def test_the_hook_reads_each_table_from_its_file_and_names_a_damaged_one(
        tmp_path: Path) -> None:
    """The hook keeps where each table is in its tables file, not the tables (so a build never
    holds every table's HTML): each comes back exactly as written (non-ASCII text, quotes,
    line breaks), and a damaged file is named in the error."""
    from mkdocs.exceptions import PluginError

    from toolkit.pages import TABLES, tables_file

    first, second = "ab" + "0" * 18, "ab" + "1" * 18
    tables = {first: '<table><tr><td>café "x"\n→ ü 🐛</td></tr></table>',
              second: "<pre><code>line\u2028two \\ end</code></pre>"}
    folder = tmp_path / TABLES
    folder.mkdir()
    shard = folder / "ab.json"
    shard.write_bytes(tables_file(tables))  # as toolkit.site writes them
    site_hooks._tables = {}
    site_hooks.on_config(SimpleNamespace(config_file_path=str(tmp_path / "mkdocs.yml")))
    html = f"<p>{POST_TOKEN.format(second)}</p>\n<p>{POST_TOKEN.format(first)}</p>"
    for_search = site_hooks.for_search(html, _PAGE)
    assert site_hooks.on_post_page(for_search, page=_PAGE, config=None) == \
        f"{tables[second]}\n{tables[first]}"
    site_hooks.on_post_build(config=None)

    for damaged in (json.dumps({first: ["not a table"]}), '{"' + first + '": "<p>cut sho'):
        shard.write_text(damaged, encoding="utf-8")
        with pytest.raises(PluginError, match=r"ab\.json is damaged"):
            site_hooks.on_post_page(for_search, page=_PAGE, config=None)
        site_hooks.on_post_build(config=None)


def _pages(index: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    pages: dict[str, list[dict[str, Any]]] = {}
    for d in index:
        pages.setdefault(d["location"].split("#")[0], []).append(d)
    return pages


def test_each_entry_shows_a_short_preview_and_repeats_no_term_of_its_page_after_it(
        index: list[dict[str, Any]], separator: str) -> None:
    """An entry's text is its preview (what a result shows: plain text, at most PREVIEW
    characters but for one long word), then, hidden, only terms that neither the page's
    earlier entries nor its own title, tags and preview hold."""
    hidden_somewhere = 0
    for url, entries in _pages(index).items():
        held: set[str] = set()
        for d in entries:
            held |= search_terms(d["title"], separator)
            held |= {t for tag in d.get("tags") or [] if tag.isascii()
                     for t in search_terms(tag, separator)}
            shown, _, rest = d["text"].partition(search_text.HIDDEN_OPEN)
            assert "<" not in shown and ">" not in shown, (url, shown)
            assert len(shown) <= search_text.PREVIEW or " " not in shown, (url, shown)
            assert bool(shown) == bool(d["text"]), (url, d["text"])
            held |= {t for w in shown.split() for t in
                     (search_terms(w, separator) if w.isascii() else {w})}
            if not rest:
                continue
            assert rest.endswith(search_text.HIDDEN_CLOSE) and "<" not in rest[:-5], rest
            hidden_somewhere += 1
            for word in rest.removesuffix(search_text.HIDDEN_CLOSE).split(" "):
                new = search_terms(word, separator) if word.isascii() else {word}
                assert new - held, f"{url}: {word!r} is held already ({d['location']})"
                held |= new
    assert hidden_somewhere > 5
