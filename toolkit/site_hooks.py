"""MkDocs hooks of the generated site (the generated mkdocs.yml lists this file).

``toolkit.site`` renders tables straight to HTML (escaped there) and leaves a placeholder
paragraph in the Markdown; this hook puts each table's HTML in place of its placeholder, from
``tables/`` next to the generated mkdocs.yml (one JSON file per first two digits of the
tables' digests; each table is read from its file when a page needs it, so a build never holds
all of them). The placeholder holds an HTML entity that
AI-written text cannot produce, and the replacement always comes from those files, never from
the page. Every table is put in place after the search plugin read the page. Just before it
reads the page (one page at a time, not when MkDocs converts every page first), a
searchable table's placeholder becomes a paragraph of the table's text, cells apart (what the
search plugin indexes, without parsing every tag of a large table); a table kept out of search
has its placeholder marked ``data-search-exclude``. So the search index holds no placeholder.
A list the toolkit converted from its own Markdown (``&#35;tkhtml-``: ``toolkit.site._bullets``)
is put in place before the search plugin reads the page: the plugin and the page get the HTML
Python-Markdown would have made of it.

The hook also puts the site's bundled scripts and styles (``toolkit/site_assets/``: the tables'
sorting, filtering and paging, listed in mkdocs.yml's ``extra_javascript``/``extra_css``) in
the site at ``assets/toolkit/``, from the installed package, so no page fetches them elsewhere.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from toolkit.pages import ONE_SEARCH_ENTRY, TABLES, table_places, table_shard

# searchable: all its text (tktable), its cells without the header row (tkrows), a field list's
# values (tkfields)
_TOKEN = re.compile(r"<p>&#35;tk(table|rows|fields)-([0-9a-f]{20})</p>")
_THEAD = re.compile(r"<thead>.*?</thead>", re.DOTALL)
_LABEL = re.compile(r"<tr><td>[^<]*</td>")  # a field list's label cell (toolkit.site._fields)
_POST = re.compile(r"<p>&#35;tkpost-([0-9a-f]{20})</p>")  # not searchable
# HTML the toolkit made of its own Markdown (toolkit.site._bullets): in place before the search
# plugin reads the page, as Python-Markdown's HTML of it would be
_HTML = re.compile(r"<p>&#35;tkhtml-([0-9a-f]{20})</p>")
# what the search plugin reads in their place: the table's text, or (not searchable) the
# placeholder in an element the plugin skips (it keeps the attribute: it only strips
# data-search-* attributes that have a value)
_HIDDEN = '<p data-search-exclude>&#35;tkpost-{}</p>'
_READ = re.compile(r'<p data-tktable="([0-9a-f]{20})">[^<]*</p>'
                   r"|<p data-search-exclude>&#35;tkpost-([0-9a-f]{20})</p>")
_TAG = re.compile(r"<[^>]+>")
# a one-entry page's field lists, as the search plugin reads them: at the end of the page, after
# its prose (a result's preview is the start of the entry's text: the entry's own words, not
# its ids and dates); the page gets each field list in its place and loses this paragraph
_LAST = '\n<p data-tklast>{}</p>'
_LAST_READ = re.compile(r"\n<p data-tklast>[^<]*</p>")
_folder = Path(TABLES)  # the build folder's tables/ (set by on_config)
# the tables files read so far, by name: each table's place in its file (see _Shard)
_tables: dict[str, _Shard] = {}
ASSETS = Path(__file__).resolve().parent / "site_assets"
ASSETS_URL = "assets/toolkit"


class _Shard:
    """One tables file (:func:`toolkit.pages.tables_file`): where each table's JSON string is
    in the file, as ``start << 32 | length`` in bytes; a table is read from the file when a
    page needs it, so a build never holds every table's HTML at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.places: dict[str, int] = {}
        self.fd: int | None = None
        if path.is_file():
            for digest, start, length in table_places(path.read_bytes()):
                self.places[digest] = start << 32 | length

    def get(self, digest: str) -> str | None:
        place = self.places.get(digest)
        if place is None:
            return None
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
        length = place & 0xFFFFFFFF
        data = os.pread(self.fd, length, place >> 32)
        value = json.loads(data) if len(data) == length else None
        if not isinstance(value, str):
            raise ValueError(f"table {digest} changed during the build")
        return value

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _forget_tables() -> None:
    for shard in _tables.values():
        shard.close()
    _tables.clear()
    _read.clear()


def on_config(config: Any) -> Any:
    global _folder
    _folder = Path(config.config_file_path).parent / TABLES
    _forget_tables()
    _held.clear()
    return config


def _shard(name: str) -> _Shard:
    """The tables whose digest starts with ``name``, read when a page first needs one."""
    path = _folder / f"{name}.json"
    try:
        shard = _Shard(path)
    except (ValueError, OSError) as exc:
        raise PluginError(f"{path} is damaged ({exc}); run toolkit build-site --clean") from None
    _tables[name] = shard
    return shard


def on_files(files: Any, *, config: Any) -> Any:
    from mkdocs.structure.files import File

    for asset in sorted(ASSETS.iterdir()):
        if asset.suffix in (".js", ".css", ".txt"):
            files.append(File.generated(config, f"{ASSETS_URL}/{asset.name}",
                                        abs_src_path=str(asset)))
    return files


# the tables read for the page being built, by digest: read when the search plugin is to read
# the page (their text), then put in place after the theme rendered it (their HTML), read once
_read: dict[str, str] = {}


def _table(digest: str, page: Any) -> str:
    table = _read.get(digest)
    if table is None:
        table = _read[digest] = _table_of(digest, page)
    return table


def _table_of(digest: str, page: Any) -> str:
    shard = table_shard(digest)
    tables = _tables.get(shard)
    if tables is None:
        tables = _shard(shard)
    try:
        table = tables.get(digest)
    except (ValueError, OSError) as exc:
        raise PluginError(f"{tables.path} is damaged ({exc}); run toolkit build-site --clean"
                          ) from None
    if table is None:
        raise PluginError(f"{page.file.src_uri}: table {digest} is not in the build folder's "
                          "tables; run toolkit build-site again")
    return table


def _text(m: re.Match[str], page: Any) -> str:
    """A searchable table as one paragraph of its text (still escaped), cells apart: without
    its header row (tkrows) and a field list's labels (tkfields), which are the site's words
    on every page of a kind."""
    return f'<p data-tktable="{m.group(2)}">{_words(m.group(1), m.group(2), page)}</p>'


def _words(kind: str, digest: str, page: Any) -> str:
    """:func:`_text`'s text."""
    body = _table(digest, page)
    if kind != "table":
        body = _THEAD.sub("", body, count=1)
        if kind == "fields":
            body = _LABEL.sub("<tr>", body)
    return " ".join(_TAG.sub(" ", body).split())


# A page whose front matter says ``search_one_entry: true`` (toolkit.pages.ONE_SEARCH_ENTRY) is
# one search entry: before the search plugin reads the page, each heading below its title is
# set aside (a heading with an id starts a section of the index) and an empty element the plugin
# skips holds its place; the page gets its headings back after.
_HEADING = re.compile(r'<h([2-6]) id="[^"]*">.*?</h\1>', re.DOTALL)
_HELD = re.compile(r'<h[2-6] data-search-exclude data-tkhead="(\d+)"></h[2-6]>')
_held: dict[str, list[str]] = {}  # a page's set-aside headings, by its source path


def _set_aside(html: str, page: Any) -> str:
    held: list[str] = []

    def hold(m: re.Match[str]) -> str:
        held.append(m.group(0))
        return f'<h{m.group(1)} data-search-exclude data-tkhead="{len(held) - 1}"></h{m.group(1)}>'

    html = _HEADING.sub(hold, html)
    if held:
        _held[page.file.src_uri] = held
    return html


@event_priority(50)  # before the search plugin (default priority) reads the page
def on_page_context(context: Any, *, page: Any, config: Any, nav: Any) -> Any:
    """The page as the search plugin is to read it (:func:`for_search`), made just before it
    reads the page and the theme renders it, not when MkDocs converts every page first: a
    build holds one page's tables' text and set-aside headings at a time."""
    if page.content:
        page.content = for_search(page.content, page)
    return context


def for_search(html: str, page: Any) -> str:
    """A page's HTML as the search plugin reads it: each searchable table's placeholder is
    its text, a table kept out of search is hidden from it, and a one-entry page's headings
    are set aside; :func:`on_post_page` puts the tables and headings in place."""
    # headings first: a table's text is put in place below, and none of it is ours
    one_entry = page.meta.get(ONE_SEARCH_ENTRY) is True
    if one_entry:
        html = _set_aside(html, page)
    if "&#35;tkhtml-" in html:
        html = _HTML.sub(lambda m: _table(m.group(1), page), html)
    if "&#35;tkpost-" in html:
        html = _POST.sub(lambda m: _HIDDEN.format(m.group(1)), html)
    if "&#35;tk" in html:
        last: list[str] = []

        def read(m: re.Match[str]) -> str:
            if not (one_entry and m.group(1) == "fields"):
                return _text(m, page)
            last.append(_LAST.format(_words("fields", m.group(2), page)))
            return _HIDDEN.format(m.group(2))  # the page gets the field list here

        html = _TOKEN.sub(read, html) + "".join(last)
    return html


def on_post_page(output: str, *, page: Any, config: Any) -> str:
    held = _held.pop(page.file.src_uri, None)
    if held is not None:  # before the tables are put in place: only our markup is there yet
        output = _HELD.sub(lambda m: held[int(m.group(1))], output)
    if "<p data-tklast>" in output:  # (a one-entry page's; the site's Markdown has no HTML)
        output = _LAST_READ.sub("", output)
    if "data-tktable=" not in output and "&#35;tkpost-" not in output:
        _read.clear()
        return output
    output = _READ.sub(lambda m: _table(m.group(1) or m.group(2), page), output)
    _read.clear()
    return output


@event_priority(100)  # first: before the search plugin makes its index
def on_post_build(*, config: Any) -> None:
    """Every page is written: the tables and headings read for them are let go (MkDocs keeps
    this module between builds of one process)."""
    _forget_tables()
    _held.clear()
