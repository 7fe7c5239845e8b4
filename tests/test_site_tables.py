"""The site's bundled table scripts (issue 15 item 2) reach every page from the package, and
the key column of a table is marked for them. How they behave in a browser:
tests/test_browser_tables.py."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from toolkit.reports import Table, WarningsPage
from toolkit.site import render_page_text
from toolkit.site_hooks import ASSETS


def test_every_page_loads_the_bundled_table_scripts_from_the_site_itself(
        formats_site: tuple[Any, Path]) -> None:
    _, site = formats_site
    for name in ("datatables.min.js", "datatables.LICENSE.txt", "tables.js", "tables.css"):
        assert (site / "assets" / "toolkit" / name).read_bytes() == (ASSETS / name).read_bytes()
    pages = sorted(site.rglob("index.html"))
    assert len(pages) > 20
    for page in pages:
        html = page.read_text(encoding="utf-8")
        depth = len(page.relative_to(site).parts) - 1
        prefix = "../" * depth if depth else ""
        for src in ("assets/toolkit/datatables.min.js", "assets/toolkit/tables.js"):
            assert f'<script src="{prefix}{src}"></script>' in html, (page, src)
        assert f'href="{prefix}assets/toolkit/tables.css"' in html, page


def test_the_vendored_library_is_the_release_named_in_the_notice() -> None:
    notice = (ASSETS / "NOTICE.md").read_text(encoding="utf-8")
    digest = hashlib.sha256((ASSETS / "datatables.min.js").read_bytes()).hexdigest()
    assert f"sha256 `{digest}`" in notice
    [version] = re.findall(r"\| (\d+\.\d+\.\d+) \(the npm package `datatables.net`", notice)
    head = (ASSETS / "datatables.min.js").read_text(encoding="utf-8")[:80]
    assert head.startswith(f"/*! DataTables {version}\n")
    assert "MIT License" in (ASSETS / "datatables.LICENSE.txt").read_text(encoding="utf-8")


def test_the_key_column_is_marked_and_the_first_never_is() -> None:
    def header(table: Table) -> str:
        page = WarningsPage(path="warnings.md", title="Warnings", nav=("Warnings",),
                            table=table)
        return re.search(r"<thead>\n<tr>(.*?)</tr>", render_page_text(page)).group(1)

    rows = [("a", 1, "2026-11-28")]
    assert header(Table(("Task", "Retries", "Last dispatch"), rows, key="Last dispatch")) == (
        "<th>Task</th> <th>Retries</th> <th data-tk-key>Last dispatch</th>")
    assert header(Table(("Task", "Retries", "Last dispatch"), rows, key="Task")) == (
        "<th>Task</th> <th>Retries</th> <th>Last dispatch</th>")
    assert "data-tk-key" not in header(Table(("Task", "Retries"), rows))


def test_the_reports_name_the_column_that_decides_their_order(
        formats_site: tuple[Any, Path]) -> None:
    _, site = formats_site
    for rel, column in (("audit/dispatches/index.html", "Last dispatch"),
                        ("slop/index.html", "Total"), ("audit/index.html", "Total"),
                        ("ledger/history/index.html", "Version")):
        html = (site / rel).read_text(encoding="utf-8")
        assert f"<th data-tk-key>{column}</th>" in html, rel
