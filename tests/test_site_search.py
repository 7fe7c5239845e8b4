"""The site's search index holds each page's real text: every table's cells, separated, and no
internal placeholder (issue 15 item 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests._site_helpers import World
from toolkit import site_hooks
from toolkit.site import POST_TOKEN, TABLE_TOKEN


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


def test_no_search_entry_holds_a_placeholder(index: list[dict[str, str]]) -> None:
    assert index
    bad = [d["location"] for d in index if re.search(r"tk(?:post|table)-|&#35;|#tk", d["text"])]
    assert bad == []


def test_table_cells_and_field_lists_are_indexed_with_boundaries(
        index: list[dict[str, str]]) -> None:
    # a slop entry's field list: labels and values, each its own word
    slop = _page_text(index, "slop/4b7e2c91/")
    for word in ("retained_compatibility", "task_01HZX3K9Q2", "Field Value"):
        assert word in slop, word
    assert "crates/api/src/handlers/legacy_auth.rs:88" in slop  # a file name
    # a ledger entry's field list (category, its file)
    entry = _page_text(index,
                       "ledger/patterns/run-the-migration-dry-run-before-applying-schema-changes/")
    assert "implementation" in entry and ".smith/vault/ledger/patterns.md:9" in entry
    # a table of tasks: header cells apart, and a task that is only a table cell
    dispatches = _page_text(index, "audit/dispatches/")
    assert "Cap webhook retries at 5 attempts" in dispatches
    assert not re.search(r"[a-z][A-Z][a-z]+[A-Z]", re.sub(r"<[^>]+>", " ", dispatches)), \
        "cells run together"


_PAGE = SimpleNamespace(file=SimpleNamespace(src_uri="x.md"))


def _through_hooks(tables: dict[str, str], html: str) -> tuple[str, str]:
    """(the text Material's own search parser indexes from the page as the hook leaves it for
    the search plugin, the page's final HTML)."""
    from material.plugins.search.plugin import Parser

    # as the hook reads them from the build folder: in files by the digests' first digits
    site_hooks._tables = {}
    for digest, table in tables.items():
        site_hooks._tables.setdefault(digest[:2], {})[digest] = table
    for_search = site_hooks.on_page_content(html, page=_PAGE, config=None, files=None)
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
