"""No page grows without bound (issue 16 item 5): the tables and code of one page hold at most
``MAX_PAGE_TABLES`` bytes of HTML; past it a table shows its first rows and a note linking to
the data downloads, where every row is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._site_helpers import build, make_world
from toolkit import site as site_mod
from toolkit.reports import Ref, Table, WarningsPage
from toolkit.site import render_page_text


def test_a_table_of_any_size_keeps_its_page_under_1_mb() -> None:
    long = "é<" * 400  # non-ASCII and escaped characters: bytes, not characters, count
    rows = [(f"row {i}", long, Ref(f"entry {i}", "index.md"), i) for i in range(20_000)]
    page = WarningsPage(path="warnings.md", title="Warnings", nav=("Warnings",),
                        table=Table(("Name", "Text", "Link", "N"), rows))
    text = render_page_text(page)
    assert len(text.encode("utf-8")) < 1_000_000
    m = re.search(r"The first ([\d,]+) of 20,000 rows are shown", text)
    assert m and 0 < int(m.group(1).replace(",", "")) < 20_000
    shown = text.count("<tr><td>row ")
    assert shown == int(m.group(1).replace(",", ""))
    assert '<a href="../data/">data downloads</a>' in text  # relative to warnings/


def test_a_small_table_is_whole() -> None:
    page = WarningsPage(path="warnings.md", title="Warnings", nav=("Warnings",),
                        table=Table(("Name",), [("a",), ("b",)]))
    text = render_page_text(page)
    assert "rows are shown" not in text and text.count("<tr><td>") == 2


def test_the_budget_holds_in_a_real_build_and_its_links_resolve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a budget small enough that the fixture world's listings are cut: MkDocs (strict)
    # checks every link the notes add, and each page's tables stay within the budget
    monkeypatch.setattr(site_mod, "MAX_PAGE_TABLES", 3_000)
    world = make_world(tmp_path)
    result = build(world)
    assert result.warnings == []
    cut = [p for p in result.out.rglob("index.html")
           if "rows are shown (a page stays under 1 MB)" in p.read_text(encoding="utf-8")]
    assert cut, "no table was cut"
    for p in cut:
        html = p.read_text(encoding="utf-8")
        # every table but the field lists (always whole; they count against the budget)
        tables = [t for t in re.findall(r"<table>.*?</table>", html, re.S)
                  if "<th>Field</th> <th>Value</th>" not in t]
        assert sum(len(t.encode("utf-8")) for t in tables) <= 3_000
        assert re.search(r'<a href="((\.\./)*data/|\./)">data downloads</a>', html)


def test_a_table_after_the_budget_is_spent_is_only_its_note(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.reports import SlopAgeingPage

    monkeypatch.setattr(site_mod, "MAX_PAGE_TABLES", 3_000)
    bands = Table(("Band", "Entries"), [(f"band {i} " + "x" * 60, i) for i in range(200)])
    items = Table(("Entry title", "Age"), [("old entry", 90), ("older", 120), ("oldest", 400)])
    page = SlopAgeingPage(path="slop/ageing.md", title="Ageing", nav=("Slop", "Ageing"),
                          bands=bands, items=items, chart=None)
    text = render_page_text(page)
    assert re.search(r"The first [\d,]+ of 200 rows are shown", text)  # the first table, cut
    # the second table: the note alone, not an empty table with its header
    assert "None of the 3 rows are shown" in text
    assert "Entry title" not in text and "old entry" not in text
    assert text.count("<table>") == 1


def test_a_slop_entry_with_50_000_source_links_keeps_its_page_under_1_mb() -> None:
    from toolkit.reports import Field, SlopEntryPage, Url

    sources: list = [f"acme_api/module_{i}.py:{i}" for i in range(25_000)]
    sources += [Url(f"https://example.com/issue/{i}") for i in range(25_000)]
    page = SlopEntryPage(path="slop/abc.md", title="Many links", slop_id="abc",
                         fields=[Field("ID", "abc")], sources=sources, description="d",
                         cleanup=None, extra=[], problems=[], source="slop.json")
    text = render_page_text(page)
    assert len(text.encode("utf-8")) < 1_000_000
    m = re.search(r"The first ([\d,]+) of 50,000 items are shown", text)
    assert m and 0 < int(m.group(1).replace(",", "")) < 50_000
    assert text.count("<li>") == int(m.group(1).replace(",", ""))
    assert "<li>acme_api/module_0.py:0</li>" in text
    assert '<a href="../../data/">data downloads</a>' in text


def test_a_slop_entry_with_50_000_unknown_fields_keeps_its_page_under_1_mb() -> None:
    from toolkit.reports import Field, SlopEntryPage

    page = SlopEntryPage(path="slop/abc.md", title="Many fields", slop_id="abc",
                         fields=[Field("ID", "abc"), Field("Owner", "billing-team")],
                         sources=[], description="d", cleanup=None,
                         extra=[Field(f"key_{i}", f"value {i}") for i in range(50_000)],
                         problems=[], source="slop.json")
    text = render_page_text(page)
    assert len(text.encode("utf-8")) < 1_000_000
    assert "<td>Owner</td> <td>billing-team</td>" in text  # the entry's own fields: whole
    m = re.search(r"The first ([\d,]+) of 50,000 fields are shown", text)
    assert m and 0 < int(m.group(1).replace(",", "")) < 50_000
    assert "<td>key_0</td> <td>value 0</td>" in text
    assert '<a href="../../data/">data downloads</a>' in text


def test_a_ledger_entry_related_to_10_000_entries_keeps_its_page_under_1_mb(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.reports import Field, LedgerEntryPage

    monkeypatch.setattr(site_mod, "MAX_PAGE_TABLES", 20_000)  # the Markdown list, 700 KB whole
    refs = [Ref(f"A fairly ordinary ledger entry title number {i} (pattern)",
                f"ledger/patterns/e{i}.md") for i in range(10_000)]
    page = LedgerEntryPage(path="ledger/patterns/x.md", title="x", entry_id="x",
                           fields=[Field("File", "patterns.md")], problems=[], context="c",
                           pattern="p", evidence="e", related="r", related_entries=refs,
                           source="patterns.md", history=None)
    text = render_page_text(page)
    assert len(text.encode("utf-8")) < 40_000
    m = re.search(r"The first ([\d,]+) of 10,000 items are shown", text)
    assert m and 0 < int(m.group(1).replace(",", "")) < 10_000
    assert "- [A fairly ordinary ledger entry title number 0 (pattern)](e0.md)" in text
    assert text.count("- [A fairly ordinary") == int(m.group(1).replace(",", ""))
