"""FAULTS.md E1: a site built from hostile entries renders them as literal text.

One site is built from the tests/fixtures/formats project plus hostile entries in the vault, a
session log, the slop ledger and the audit DB; the tests inspect the HTML MkDocs wrote.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._site_helpers import (
    HOSTILE_TASK,
    HOSTILE_TITLE_SHOWN,
    World,
    scan,
)
from toolkit.reports import task_slugs

SCRIPT_BLOCK = re.compile(r"<script\b[^>]*>.*?</script>", re.S | re.I)


@pytest.fixture
def hostile(hostile_site: tuple[World, Path]) -> tuple[World, Path]:
    return hostile_site


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def _entry_page(site: Path) -> Path:
    [page] = (site / "ledger" / "patterns").glob("img-src-x-onerror-alert-1-evil-*/index.html")
    return page


def _normalize_script(block: str) -> str:
    """A script with the page's depth taken out (relative paths to the site root)."""
    block = re.sub(r'URL\("[./]*"', 'URL("."', block)
    block = re.sub(r"(\.\./)+|\./", "", block)
    return re.sub(r'"base":\s*"[^"]*"', '"base": ""', block)


def test_no_page_has_a_script_the_theme_did_not_put_there(hostile: tuple[World, Path]) -> None:
    _, site = hostile
    reference = site / "data" / "index.html"  # no AI-written text on it
    theme_scripts = [_normalize_script(b) for b in SCRIPT_BLOCK.findall(reference.read_text())]
    assert len(theme_scripts) >= 2
    for page in _pages(site):
        text = page.read_text(encoding="utf-8")
        blocks = [_normalize_script(b) for b in SCRIPT_BLOCK.findall(text)]
        assert blocks == theme_scripts, page
        assert text.lower().count("<script") == len(theme_scripts), page
    for svg in site.rglob("*.svg"):
        assert "<script" not in svg.read_text(encoding="utf-8").lower()


def test_no_event_handler_attribute_and_no_javascript_or_data_link(
        hostile: tuple[World, Path]) -> None:
    _, site = hostile
    for page in _pages(site):
        for tag, attrs in scan(page).tags:
            for name, value in attrs:
                assert not name.lower().startswith("on"), (page, tag, name)
                v = re.sub(r"\s", "", (value or "")).lower()
                assert not v.startswith(("javascript:", "data:", "vbscript:")), (page, tag, v)
                if tag == "iframe":
                    pytest.fail(f"iframe in {page}")


def test_hostile_entry_is_shown_as_literal_text(hostile: tuple[World, Path]) -> None:
    _, site = hostile
    page = scan(_entry_page(site))
    text = page.body_text
    assert "<script>alert(1)</script> and {{ 7*7 }} and {% raw %}" in text
    assert "[x](javascript:alert(1)) then [y](data:text/html,<script>alert(2)</script>)" in text
    assert '{: onclick="alert(1)" }' in text
    assert '--8<-- "/etc/hostname"' in text
    assert "<img src=x onerror=alert(4)> hostile-evidence-marker" in text
    # the agent's fence is a code block (its Markdown is rendered) holding the break-out
    # attempt as literal text, inside the Pattern section: our Evidence heading follows it
    html = _entry_page(site).read_text(encoding="utf-8")
    pattern = html.split('id="pattern"', 1)[1].split('id="evidence"', 1)[0]
    assert "<pre><code>&lt;/div&gt;&lt;script&gt;alert(3)&lt;/script&gt;\n</code></pre>" \
        in pattern
    assert [t for t, _ in page.tags].count("pre") == 1
    hostname = Path("/etc/hostname")
    if hostname.is_file() and len(hostname.read_text().strip()) > 3:
        assert hostname.read_text().strip() not in _entry_page(site).read_text()


def test_template_syntax_in_entries_is_not_evaluated(hostile: tuple[World, Path]) -> None:
    _, site = hostile
    html = _entry_page(site).read_text(encoding="utf-8")
    assert "{{ 7*7 }}" in html and "{% raw %}" in html
    context = html.split('id="context"', 1)[1].split('id="pattern"', 1)[0]
    assert "49" not in context


def test_hostile_title_is_literal_in_title_header_listing_and_search(
        hostile: tuple[World, Path]) -> None:
    _, site = hostile
    page = scan(_entry_page(site))
    assert page.title.strip() == f"{HOSTILE_TITLE_SHOWN} - Agent Ledger: acme-api"
    assert HOSTILE_TITLE_SHOWN in page.body_text  # header and h1
    listing = scan(site / "ledger" / "patterns" / "index.html")
    assert HOSTILE_TITLE_SHOWN in listing.body_text
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    page_titles = {d["title"] for d in index["docs"]
                   if re.search(r"img-src-x-onerror[^#]*/$", d["location"])}
    assert page_titles == {"&lt;img src=x onerror=alert(1)&gt;&lt;U+202E&gt; evil"}
    for p in [*_pages(site), site / "search" / "search_index.json"]:
        assert "\u202e" not in p.read_text(encoding="utf-8"), p


def test_slop_sources_link_only_http_urls(hostile: tuple[World, Path]) -> None:
    _, site = hostile
    page = site / "slop" / "deadbeef" / "index.html"
    hrefs = [dict(a).get("href") for t, a in scan(page).tags if t == "a"]
    assert "https://example.com/ok?a=1&b=%3C2%3E" in hrefs
    text = scan(page).body_text
    assert "javascript:alert(1)" in text and "<iframe src=javascript:alert(1)>" in text
    assert "<b onmouseover=alert(1)>x</b>" in text


def test_hostile_task_gets_its_page_with_literal_text(hostile: tuple[World, Path]) -> None:
    _, site = hostile
    slug = task_slugs([HOSTILE_TASK])[HOSTILE_TASK]
    page = scan(site / "audit" / "tasks" / slug / "index.html")
    assert page.title.startswith("Task: <script>alert('task')</script> fix {{ 7*7 }}")
    assert "[click](javascript:alert(1))" in page.body_text


def test_strict_mkdocs_build_of_the_generated_markdown_passes(
        hostile: tuple[World, Path], tmp_path: Path) -> None:
    _world, site = hostile
    config = site.parent / (site.name + ".build") / "mkdocs.yml"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(config), "-d", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "index.html").is_file()
