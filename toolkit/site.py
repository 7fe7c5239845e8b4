"""Page contexts -> Markdown in a build folder -> a static MkDocs Material site.

``build_site`` is the whole job behind ``toolkit build-site``:

1. ``toolkit.reports.build_site_content`` turns the store into typed page contexts;
2. each context is rendered with its Jinja2 template from ``site_templates/`` into
   ``<out>.build/docs/`` (a file is written only when its bytes changed), charts are drawn
   (``toolkit.charts``, cached by spec, in a chart process kept for the process's next build)
   and each table is written as CSV and JSON;
3. the repository's ``mkdocs.yml`` plus the generated nav becomes ``<out>.build/mkdocs.yml``
   and MkDocs builds it, from Python, strict.

Escaping. Every value a template prints goes through ``md_escape`` (Jinja's ``finalize``), which
escapes for HTML *and* Markdown, unless the value is ``Markup`` made by one of the filters
here (links, tables, blocks), which escape their own parts. Links are only http(s) URLs or
relative links between generated pages. Multi-line agent text (``|block``: entry text,
prompts, slop descriptions) is Markdown, rendered to safe HTML by ``toolkit.mdrender`` and put
in place by the hook like a table, so Python-Markdown never reads it. Titles go to the front
matter already HTML-escaped, because the theme prints ``page.title`` unescaped in ``<title>``,
the header and the nav.

Redaction. With ``--redact`` (``redact: true``) steps 1-3 read a redacted copy of the store
(``Store.redacted_copy``), so every page, file name, nav title, download and search entry is
made from redacted text; the build records whether it was redacted (``site-build.json`` in the
state folder, read by :func:`site_redaction_warning` for handoff and publish). CSV downloads
are spreadsheet-safe either way (``Store.copy_to(spreadsheet_safe=True)``).

Rebuilds. Step 2 renders a page again only when its context (pickled, hashed), the templates
and this package's code, or a chart it shows changed (``_RenderCache``, in the build folder);
otherwise its Markdown file is left as it is. The many per-entry pages are not even made then:
step 1 hands them over as :class:`~toolkit.pages.Deferred` (a maker and the plain values it
reads, whose digest stands for the context), and only the changed ones are made. Nor is an
entry's row read whole: step 1 reads every entry's short columns (what the listings show) and a
digest of its whole row, made by DuckDB (:class:`~toolkit.pages.RowRef`), and only the rows of
the pages to render are then fetched, in one query per kind. The tables'
HTML is kept in the build folder in files by digest, of which a rebuild rewrites and the hook
reads only those it needs. A full MkDocs build runs when the configuration
or nav changed, on ``--clean`` or when there is no previous build; otherwise MkDocs runs
``dirty`` (it renders only pages whose Markdown is newer than their HTML: exactly the files
rewritten in step 2). When the site has the same files as the last build, that dirty run reads
only what the pages it renders need (``_dirty_subset``: them, the pages in the nav and those
they link to, the static files), so its cost follows the change, not the site's size. The
search index is merged: the entries of rebuilt pages come from
this build, the others from the previous index (as bytes, located by ``search-map.json``), in
the order a full build writes them. So the result is the same bytes a full build makes. A
build stopped while MkDocs ran or before the index was written (``mkdocs-running`` is left in
the build folder) is followed by a full MkDocs run: its HTML and index are not trusted, nor is
an index that cannot be read. A file of the site changed by hand after a build (not by a
build: a build stopped part-way is the case above) is not looked for: a dirty run rewrites an
output only when its source is newer, and ``--clean`` builds the site afresh.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime as dt
import functools
import gc
import hashlib
import html
import json
import logging
import operator
import os
import posixpath
import re
import shutil
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from markupsafe import Markup

from toolkit import clock, mdrender, mdsafe, parsecache, search_text, site_theme
from toolkit.charts import cache_svg, cached_svg
from toolkit.config import BUILD_RECORD
from toolkit.display import display_roots, visible
from toolkit.errors import DataError, ToolkitError, UsageError
from toolkit.pages import (
    INTERNAL_PATH,
    ONE_SEARCH_ENTRY,
    TABLES,
    Deferred,
    Ref,
    RowRef,
    Table,
    Url,
    fetch_rows,
    relative_link,
    table_shard,
    tables_file,
)
from toolkit.records import acyclic_build
from toolkit.safewrite import FileLock, check_changeable, lock_timeout, pause
from toolkit.textio import split_url

if TYPE_CHECKING:
    import jinja2

    from toolkit.checks import Result
    from toolkit.config import Config
    from toolkit.reports import Page, SiteContent
    from toolkit.store import Store

def _resources() -> Path:
    """Where mkdocs.yml and site_templates/ are: the repository checkout (editable install),
    else the copy a regular install puts in <prefix>/share/agent-ledger-toolkit/."""
    import sys

    repo = Path(__file__).resolve().parents[1]
    if (repo / "site_templates").is_dir():
        return repo
    return Path(sys.prefix) / "share" / "agent-ledger-toolkit"


REPO_ROOT = _resources()
TEMPLATES_DIR = REPO_ROOT / "site_templates"
BASE_CONFIG = REPO_ROOT / "mkdocs.yml"
MARKER = ".toolkit-site"  # marks an output folder as ours (MkDocs keeps dotfiles on clean)
REDACTED_COPY = "redacted.duckdb"  # the redacted copy of the store a --redact build reads
BUILD_MARKER = ".toolkit-site-build"  # marks the Markdown build folder as ours
STATE = "state.json"
# what a build refused for a folder it cannot change says of the site: every folder it will
# delete in or write to is checked before the first deletion (FAULTS G11)
UNCHANGED = "the site was left as it was"
ANSWERS = "answers"  # answers of the site's questions kept for the next build (KeptAnswers)
JINJA_CACHE = "jinja-cache"  # compiled templates: the theme's and site_templates/
RENDER_SLOT = "render-cache"  # per page: what its Markdown was rendered from (parsecache)
RENDER_CACHE = f"{RENDER_SLOT}.marshal"
_OLD_RENDER_CACHE = "render-cache.json"  # its JSON form, before: removed, never read
SEARCH_MAP = "search-map.json"  # where each page's entries are in the site's search index
THEME_FILES = "theme-files"  # parse-cache slot: the theme's static files as MkDocs lists them
DOWNLOADS = "downloads.json"  # per data download: the key it was written under, its size, mtime
# the views a build asks about most, each a join evaluated anew by every question over it
# (the history's pages, growth and counts; the turns' pages): held as tables for the build
# (Store.reading)
READ_ONCE = ("ledger_changes", "snapshot_turns")
# the docs a dirty MkDocs run reads: links to the pages it renders and the files they need
DIRTY_DOCS = "dirty-docs"
# there while MkDocs runs and the search index is written: a build that finds it was stopped
# (killed, or MkDocs failed) after some pages' HTML was written and before the index and the
# state that go with them were, so their HTML (newer than its Markdown, or cut short) and
# the index are not to be trusted: it builds in full
MKDOCS_RUNNING = "mkdocs-running"
HOOKS = Path(__file__).resolve().parent / "site_hooks.py"
MAX_INLINE = 1_000  # characters of one AI-written value shown in a table cell or field
MAX_BLOCK = 20_000  # characters of one AI-written text block shown on a page
# bytes of table and code HTML on one page: past it, a table shows its first rows and a note
# linking to the data downloads (every row is there), so no page nears 1 MB at any data size
MAX_PAGE_TABLES = 500_000

Progress = Callable[[str, int, int], None]  # (stage, done, total)


# =========================================================================== escaping

def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" … [{len(text) - limit:,} more characters in the data download]"


def md_escape(value: Any) -> str:
    """One line of literal text for Markdown and HTML (``toolkit.mdsafe.inline``), cut to
    ``MAX_INLINE`` characters with a note."""
    if value is None:
        return ""
    return mdsafe.inline(_cut(" ".join(str(value).replace("\r", "\n").split()), MAX_INLINE))


def md_block(value: Any, scrub: Callable[[str], str] | None = None) -> str:
    """Agent-written Markdown as safe HTML (``toolkit.mdrender``), cut to ``MAX_BLOCK``
    characters with a note after it."""
    if value is None:
        return ""
    text = str(value).replace("\r\n", "\n").replace("\r", "\n")
    body = mdrender.render(text[:MAX_BLOCK], scrub=scrub)
    if len(text) > MAX_BLOCK:
        body += (f"\n<p><em>… [{len(text) - MAX_BLOCK:,} more characters in the data "
                 "download]</em></p>")
    return f'<div class="tk-md">\n{body}\n</div>'


def html_title(value: Any) -> str:
    """A page title as the theme prints it (unescaped): HTML-escaped, invisible characters
    visible, on one line."""
    text = " ".join(str(value).split())
    return html.escape(visible(_cut(text, 300)), quote=True)


_URL_SAFE = "/:?#@!$&+,;=%-._~"


def safe_url(value: str) -> str | None:
    """An http(s) URL, percent-encoded so it cannot end the Markdown link early; None for any
    other scheme (javascript:, data:, file:...) or a URL without a host."""
    text = value.strip()
    parts = split_url(text)
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    if any(ch.isspace() or ord(ch) < 32 for ch in text):
        return None
    return quote(text, safe=_URL_SAFE)




def relative_url(from_path: str, target: str) -> str:
    """The URL of a generated page (or static file) relative to the URL of the page at
    ``from_path``, with directory URLs: what a browser needs, no MkDocs link rewriting."""
    path, _, anchor = target.partition("#")
    here = _url_parts(from_path)
    there, is_dir = _target_parts(target if not anchor else path + "#" + anchor)
    i = 0
    n = min(len(here), len(there))
    while i < n and here[i] == there[i]:
        i += 1
    rel = "../" * (len(here) - i) + "/".join(there[i:])
    if is_dir and len(there) > i:
        rel += "/"
    rel = rel or "./"
    return rel + ("#" + anchor if anchor else "")


@functools.lru_cache(maxsize=65536)
def _url_parts(path: str) -> tuple[str, ...]:
    from toolkit.reports import page_url

    return tuple(p for p in page_url(path).split("/") if p)


@functools.lru_cache(maxsize=65536)
def _target_parts(target: str) -> tuple[tuple[str, ...], bool]:
    from toolkit.reports import page_url

    if not INTERNAL_PATH.match(target) or ".." in target.split("/"):
        raise ValueError(f"not a generated page path: {target!r}")
    path = target.partition("#")[0]
    url = page_url(path) if path.endswith(".md") else path
    return tuple(p for p in url.split("/") if p), url.endswith("/") or url == ""


def _html_text(value: Any) -> str:
    """One value as HTML text: invisible characters visible, escaped, one line."""
    text = value if type(value) is str else str(value)
    # a site's tables repeat short values (a category, a date, an entry's title on each list)
    return _short_html_text(text) if len(text) <= _SHORT else _text_html(text)


_SHORT = 200  # characters of a value whose HTML text is remembered (bounds the cache's size)


def _text_html(text: str) -> str:
    if not (text.isascii() and text.isprintable() and "  " not in text
            and len(text) <= MAX_INLINE and text == text.strip()):
        text = visible(_cut(" ".join(text.replace("\r", "\n").split()), MAX_INLINE))
    return html.escape(text, quote=True)


_short_html_text = functools.lru_cache(maxsize=8192)(_text_html)


# =========================================================================== templates

class _Renderer:
    """The Jinja2 environment: StrictUndefined, autoescape for Markdown+HTML via finalize."""

    def __init__(self, templates: Path = TEMPLATES_DIR,
                 scrub: Callable[[str], str] | None = None,
                 compiled: Path | None = None) -> None:
        """``compiled``: a folder that keeps the templates' compiled code between processes
        (the build folder's ``jinja-cache``); in one process it is kept in memory."""
        import jinja2

        if not templates.is_dir():
            raise ToolkitError(f"site templates not found at {templates}",
                               hint="Reinstall the toolkit from its repository checkout")
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(templates)), undefined=jinja2.StrictUndefined,
            autoescape=True, finalize=_finalize, keep_trailing_newline=True,
            trim_blocks=True, lstrip_blocks=True, auto_reload=False,
            bytecode_cache=_bytecode_cache(compiled))
        self.env.filters.update({
            "block": _block,
            "md": lambda v: Markup(md_escape(v)),
            "num": lambda v: "" if v is None else f"{v:,}",
        })
        self.env.globals.update({
            "link": _link, "table": _table, "fields": _fields, "chart": _chart, "code": _code,
            "url": _url_cell, "bullets": _bullets, "front_matter": _front_matter, "Ref": Ref,
            "pre": _pre, "headlines": _headlines, "unsearched": _unsearched,
            # also a global: macros imported without context (_partials/) render |block
            "_r": self,
        })
        self.scrub = scrub  # a redacted build's redactor, for toolkit.mdrender
        self._cache: dict[str, jinja2.Template] = {}
        self.tables: dict[str, str] = {}  # digest -> table HTML, for every page rendered
        self.kept: set[str] = set()  # digests of the tables of pages not rendered again
        self.targets: set[str] = {"index.md"}  # pages and files the tables link to
        self.budget = MAX_PAGE_TABLES
        self.charts: dict[str, Any] = {}  # chart name -> its ChartSpec (the chart's numbers)
        self.used: _Uses = _Uses()  # what the page being rendered read besides its context

    def render(self, page: Page, **extra: Any) -> str:
        self.budget = MAX_PAGE_TABLES  # bytes of table HTML this page may still hold
        self.used = _Uses()
        name = type(page).template
        tpl = self._cache.get(name)
        if tpl is None:
            tpl = self._cache[name] = self.env.get_template(name)
        tables, targets = self.tables, self.targets
        self.tables, self.targets = {}, set()
        try:
            text = tpl.render(page=page, _r=self, **extra)
            self.used.tables, self.used.targets = sorted(self.tables), sorted(self.targets)
        finally:
            tables.update(self.tables)
            targets.update(self.targets)
            self.tables, self.targets = tables, targets
        return text

    def chart(self, name: str) -> Any:
        """The spec of the chart ``name`` (None if unknown), remembered as used by the page."""
        spec = self.charts.get(name)
        self.used.charts[name] = spec.digest() if spec is not None else None
        return spec


@dataclass
class _Uses:
    """What rendering one page read besides its context: the tables it emitted (by digest),
    the pages and files it links to, the charts it showed (name -> spec digest)."""

    tables: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    charts: dict[str, str | None] = field(default_factory=dict)


def _finalize(value: Any) -> Markup:
    """Jinja's autoescape, for Markdown and HTML at once: every printed value that is not
    already ``Markup`` (made by the filters and functions here, or by a macro) goes through
    ``md_escape``; Jinja's own HTML escaping then leaves the result alone."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("")
    if isinstance(value, bool):
        return Markup("yes" if value else "no")
    if isinstance(value, (int, float)):
        return Markup(str(value))
    return Markup(md_escape(value))


def _from(ctx: Any) -> str:
    return ctx["page"].path


def _pass_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    import jinja2

    return jinja2.pass_context(fn)


def _cell(value: Any, from_path: str) -> str:
    if value is None:
        return ""
    if isinstance(value, Ref):
        return f"[{md_escape(value.text) or '[???]'}]({relative_link(from_path, value.path)})"
    if isinstance(value, Url):
        return _url_md(value.url)
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    return md_escape(value)


def _url_md(url: str) -> str:
    safe = safe_url(url)
    text = md_escape(url)
    return f"[{text}]({safe})" if safe else text


@_pass_context
def _link(ctx: Any, ref: Any) -> Markup:
    return Markup(_cell(ref, _from(ctx)))


@_pass_context
def _url_cell(ctx: Any, value: Any) -> Markup:
    return Markup(_cell(value, _from(ctx)))


# Tables are rendered here, straight to HTML, and reach the page through a placeholder the
# MkDocs hook in toolkit/site_hooks.py swaps for them (Python-Markdown spends most of a build on
# large tables: every cell runs through every inline pattern). The placeholder holds an entity
# (&#35;), which AI-written text can never produce (md_escape turns & into &amp;), and the hash
# of the table's HTML, so a changed table changes the page's Markdown (incremental rebuilds).
#
# Every table is searchable unless a template says ``search=False``: the search plugin reads its
# text, cells apart ("Task Approach", not "TaskApproach"); a table left out of search leaves
# neither its text nor its placeholder in the index. Both are put in place after the search
# plugin read the page (see toolkit/site_hooks.py).
#
# What the search plugin reads of a searchable table is its text, but not the words the site
# repeats on every page of a kind: a table's header row (its column names) and a field list's
# labels, unless a template says they are data (``table(..., columns=True)``,
# ``fields(..., labels=True)``).
TABLE_TOKEN = "&#35;tktable-{}"  # searchable: all its text (agent Markdown, verbatim text)
ROWS_TOKEN = "&#35;tkrows-{}"  # searchable: its cells, not its header row
FIELDS_TOKEN = "&#35;tkfields-{}"  # searchable: its values, not its header or labels
POST_TOKEN = "&#35;tkpost-{}"  # not searchable
# searchable, and read by the search plugin as the page's own HTML: Markdown the toolkit
# converts itself, to the bytes Python-Markdown makes of it (:func:`_bullets`)
HTML_TOKEN = "&#35;tkhtml-{}"


def _html_cell(value: Any, from_path: str, targets: set[str]) -> str:
    kind = type(value)
    if kind is str:
        return _html_text(value)
    if kind is int:
        return str(value)
    if value is None:
        return ""
    if kind is Ref:
        targets.add(value.path.partition("#")[0])
        text = _html_text(value.text) or "[???]"
        # no escaping needed: relative_url only accepts [A-Za-z0-9._/#-]
        return f'<a href="{relative_url(from_path, value.path)}">{text}</a>'
    if isinstance(value, Url):
        safe = safe_url(value.url)
        text = _html_text(value.url)
        return f'<a href="{html.escape(safe, quote=True)}">{text}</a>' if safe else text
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    return _html_text(value)


def _emit_table(ctx: Any, body: str, search: bool | str) -> Markup:
    """The placeholder of ``body``; ``search``: False, True or the token of what the search
    index reads of it (``ROWS_TOKEN``, ``FIELDS_TOKEN``)."""
    digest = hashlib.sha1(body.encode("utf-8")).hexdigest()[:20]
    ctx["_r"].tables[digest] = body
    ctx["_r"].budget -= len(body.encode("utf-8"))
    token = search if isinstance(search, str) else TABLE_TOKEN if search else POST_TOKEN
    return Markup(token.format(digest))


@_pass_context
def _table(ctx: Any, tbl: Any, search: bool = True, columns: bool = False) -> Markup:
    """A table (or the table's ``empty`` line when it has no rows); ``search=False``: its
    text stays out of the search index; ``columns``: its column names are data (a check's
    query's), searchable too. Past the page's budget (``MAX_PAGE_TABLES``, shared
    with the page's field lists and code blocks, which are always whole) it shows its first
    rows and a note linking to the data downloads."""
    if not tbl.rows:
        return Markup("*" + md_escape(tbl.empty) + "*")
    return _emit_table(ctx, _table_html(ctx, tbl),
                       (TABLE_TOKEN if columns else ROWS_TOKEN) if search else False)


def _table_html(ctx: Any, tbl: Any) -> str:
    """A table with rows as HTML, cut to the page's budget (see :func:`_table`)."""
    src = _from(ctx)
    r = ctx["_r"]
    targets = r.targets
    parts = ["<table>\n<thead>\n<tr>"]
    # the key column is marked for the site's script (toolkit/site_assets/tables.js)
    parts.append(" ".join(f"<th data-tk-key>{_html_text(c)}</th>" if i and c == tbl.key
                          else f"<th>{_html_text(c)}</th>" for i, c in enumerate(tbl.columns)))
    parts.append("</tr>\n</thead>\n<tbody>")
    # the header and the note count too: a cut table ends within the page's budget
    budget = r.budget - len("".join(parts).encode("utf-8")) - 400
    shown = 0
    for row in tbl.rows:
        line = "\n<tr>" + " ".join(f"<td>{_html_cell(v, src, targets)}</td>"
                                    for v in row) + "</tr>"
        budget -= len(line.encode("utf-8"))
        if budget < 0:
            break
        parts.append(line)
        shown += 1
    parts.append("\n</tbody>\n</table>")
    if shown == 0:  # the page's budget is spent: not even the header (it would add up)
        parts = []
    if shown < len(tbl.rows):
        parts.append(_cut_note(ctx, shown, len(tbl.rows), "rows"))
    return "".join(parts)


def _cut_note(ctx: Any, shown: int, total: int, what: str) -> str:
    """The note under a table or list cut to the page's budget, linking to the downloads."""
    src = _from(ctx)
    ctx["_r"].targets.add("data/index.md")
    first = f"The first {shown:,} of" if shown else "None of the"
    return (f"\n<p><em>{first} {total:,} {what} are shown (a "
            f"page stays under 1 MB); every {what[:-1]} is in the "
            f'<a href="{relative_url(src, "data/index.md")}">data downloads</a>.'
            "</em></p>")


@_pass_context
def _block(ctx: Any, value: Any) -> Markup:
    """Agent-written Markdown (``md_block``), rendered here and swapped in by the hook like a
    table, so Python-Markdown never reads it; searchable."""
    if value is None or value == "":
        return Markup("")
    return _emit_table(ctx, md_block(value, ctx["_r"].scrub), True)


@_pass_context
def _fields(ctx: Any, fields: list[Any], search: bool = True, labels: bool = False) -> Markup:
    """A field list (a Field/Value table); ``labels``: its labels are data (searchable).
    Whole unless it alone outgrows the page's budget (a slop entry's thousands of unknown
    fields): then its first fields and a note linking to the data downloads."""
    src = _from(ctx)
    targets = ctx["_r"].targets
    budget = max(ctx["_r"].budget, MAX_PAGE_TABLES // 2) - 600  # the header and the note
    rows: list[str] = []
    for f in fields:
        row = (f"\n<tr><td>{_html_text(f.label)}</td> "
               f"<td>{_html_cell(f.value, src, targets)}</td></tr>")
        budget -= len(row.encode("utf-8"))
        if budget < 0:
            break
        rows.append(row)
    note = _cut_note(ctx, len(rows), len(fields), "fields") if len(rows) < len(fields) else ""
    return _emit_table(ctx, "<table>\n<thead>\n<tr><th>Field</th> <th>Value</th></tr>\n"
                            f"</thead>\n<tbody>{''.join(rows)}\n</tbody>\n</table>{note}",
                       (ROWS_TOKEN if labels else FIELDS_TOKEN) if search else False)


# Python-Markdown's reading of md_escape's text: a backslashed character is the character, an
# entity is kept as written (md_escape writes nothing else that Markdown reads)
_MD_BACKSLASHED = re.compile(r"\\([\\`*_{}\[\]|#!+\-.])")
# an '&' that does not start an entity: escaped in an attribute, as Python-Markdown does
_BARE_AMP = re.compile(r"&(?!(?:#[0-9]+|#x[0-9a-f]+|[0-9a-z]+);)", re.IGNORECASE)


def _md_text_html(escaped: str) -> str:
    """The HTML Python-Markdown makes of one line of ``md_escape``'s text."""
    return _MD_BACKSLASHED.sub(r"\1", escaped) if "\\" in escaped else escaped


def _md_cell_html(value: Any) -> str | None:
    """The HTML Python-Markdown makes of :func:`_cell`'s Markdown for a text or a URL (a link
    to another site, as MkDocs leaves it); None for any other value or an empty one."""
    if type(value) is str:
        text = md_escape(value)
        return _md_text_html(text) if text else None
    if type(value) is Url:
        text = _md_text_html(md_escape(value.url))
        safe = safe_url(value.url)
        if not safe:
            return text or None
        href = _BARE_AMP.sub("&amp;", safe)  # safe_url leaves no < > " unencoded
        return f'<a href="{href}">{text}</a>'
    return None


def bullets_html(values: Sequence[Any]) -> str | None:
    """The HTML Python-Markdown makes of the bullet list of ``values`` (``- `` and
    :func:`_cell`'s Markdown, a line each), when each is a text or a URL; else None."""
    return _ul([_md_cell_html(v) for v in values])


def _ul(items: Sequence[str | None]) -> str | None:
    if not items or any(i is None for i in items):
        return None
    return "<ul>" + "".join(f"\n<li>{i}</li>" for i in items) + "\n</ul>"


@_pass_context
def _bullets(ctx: Any, values: Sequence[Any]) -> Markup:
    """A bullet list of texts and URLs (``url()``'s cells, one line each): the HTML of the
    Markdown list, made here and put in place by the hook before the search plugin reads the
    page, so the page needs no Markdown pass for it (a page's Markdown that differs from
    another's only by placeholders is converted once: see toolkit.site_theme.MarkdownOnce).
    A value of another kind (a link to a page, which MkDocs resolves) gives the Markdown list.
    Past the page's budget (``MAX_PAGE_TABLES``, as a table) it shows its first items and a
    note linking to the data downloads."""
    r = ctx["_r"]
    src = _from(ctx)
    used = shown = 0
    items: list[str | None] = []  # each value's HTML, made once (None: a link to a page)
    for v in values:
        item = _md_cell_html(v)
        size = len((item or _cell(v, src)).encode("utf-8")) + 12  # "<li>" etc.
        if used + size > r.budget - 400:  # the note counts too
            break
        used += size
        shown += 1
        items.append(item)
    r.budget -= used
    cut = values[:shown]
    note = _cut_note(ctx, shown, len(values), "items") if shown < len(values) else ""
    body = _ul(items) if cut else ""
    if body is None:
        md = "\n".join(f"- {_cell(v, src)}" for v in cut)
    else:
        md = ""
        note = body + note
    if note:
        digest = hashlib.sha1(note.encode("utf-8")).hexdigest()[:20]
        r.tables[digest] = note
        md += ("\n\n" if md else "") + HTML_TOKEN.format(digest)
    return Markup(md)


@_pass_context
def _code(ctx: Any, text: str) -> Markup:
    """Untrusted multi-line text (a diff, already cut by toolkit.turn_diffs) shown verbatim,
    not searchable."""
    return _verbatim(ctx, text, css_class="tk-code", search=False)


def _verbatim(ctx: Any, text: str, *, css_class: str | None, search: bool) -> Markup:
    """Text in a code block, verbatim: HTML-escaped, spacing kept, control and bidi characters
    made visible, never read as Markdown or template."""
    body = html.escape(visible(text), quote=True)
    attr = f' class="{css_class}"' if css_class else ""
    return _emit_table(ctx, f"<pre{attr}><code>{body}</code></pre>", search)


@_pass_context
def _chart(ctx: Any, name: str | None, alt: str) -> Markup:
    """A chart's picture, then its numbers as text: a table of the spec's values (folded
    under "The numbers in this chart", kept out of search: the page's own tables are
    searched) whenever the renderer knows the spec."""
    if not name:
        return Markup("")
    image = f"![{md_escape(alt)}]({relative_link(_from(ctx), f'charts/{name}.svg')})"
    spec = ctx["_r"].chart(name)
    if spec is None:
        return Markup(image)
    from toolkit.charts import data_rows

    columns, rows = data_rows(spec)
    table = _table_html(ctx, Table(columns, rows))
    return Markup(image + "\n\n" + _emit_table(
        ctx, f'<details class="tk-chart-data">\n<summary>The numbers in this chart: '
             f"{_html_text(spec.title)}</summary>\n{table}\n</details>", search=False))


@_pass_context
def _headlines(ctx: Any, headlines: Sequence[Any]) -> Markup:
    """Headline figures (``reports.Headline``) as Material's grid cards: the question linking
    to its page, the figures (links) in large type, a note. Kept out of search (the pages
    they link to hold the same figures)."""
    if not headlines:
        return Markup("")
    src = _from(ctx)
    targets = ctx["_r"].targets
    cards = []
    for h in headlines:
        figures = " · ".join(f'<span class="tk-figure" style="font-size:1.25em">'
                             f"<strong>{_html_cell(f, src, targets)}</strong></span>"
                             for f in h.figures)
        note = f"<br><small>{_html_text(h.note)}</small>" if h.note else ""
        cards.append(f"<li><p><strong>{_html_cell(h.title, src, targets)}</strong></p>\n<hr>\n"
                     f"<p>{figures}{note}</p></li>")
    return _emit_table(ctx, '<div class="grid cards tk-headlines">\n<ul>\n'
                            + "\n".join(cards) + "\n</ul>\n</div>", search=False)


@_pass_context
def _unsearched(ctx: Any, text: str, *values: Any) -> Markup:
    """A paragraph kept out of the search index: ``text`` (ours) with each ``{}`` filled by a
    value, escaped (provenance lines that repeat what the page's fields already hold)."""
    body = html.escape(text, quote=False).format(*(_html_text(v) for v in values))
    return _emit_table(ctx, f"<p>{body}</p>", search=False)


@_pass_context
def _pre(ctx: Any, text: str, search: bool = True) -> Markup:
    """Preformatted text (a notebook's printed output), verbatim, cut to ``MAX_BLOCK``
    characters."""
    return _verbatim(ctx, _cut(text.replace("\r\n", "\n"), MAX_BLOCK), css_class=None,
                     search=search)


def _front_matter(page: Page) -> Markup:
    """YAML front matter: the HTML-escaped title, safe tags, search exclusion."""
    lines = ["---", "title: " + json.dumps(html_title(page.title), ensure_ascii=False)]
    tags = [t for t in page.tags if re.fullmatch(r"[a-z0-9_-]{1,40}", t)]
    if tags:
        lines.append("tags: " + json.dumps(tags))
    if not page.search:
        lines.append("search:\n  exclude: true")
    elif not page.search_sections:
        lines.append(f"{ONE_SEARCH_ENTRY}: true")
    if page.wide:
        lines.append("hide:\n  - toc")
    lines.append("---")
    return Markup("\n".join(lines))


def render_page(renderer: _Renderer, page: Page) -> bytes:
    text = renderer.render(page)
    return (text.rstrip("\n") + "\n").encode("utf-8")


_ANY_TOKEN = re.compile(r"&#35;tk(?:table|rows|fields|post|html)-([0-9a-f]{20})")


def render_page_text(page: Page) -> str:
    """A page's Markdown with its tables put in place (as the HTML the site shows): what a
    reader gets, for tests and debugging."""
    renderer = _Renderer()
    text = render_page(renderer, page).decode("utf-8")
    return _ANY_TOKEN.sub(lambda m: renderer.tables[m.group(1)], text)


# =========================================================================== build

@dataclass
class BuildResult:
    out: Path
    build_dir: Path
    mode: str  # "full" or "incremental"
    pages: int
    written: list[str]  # Markdown/static files (re)written in the build folder
    removed: list[str]
    rebuilt: int  # HTML pages MkDocs rendered
    search_docs: int
    seconds: float
    charts_drawn: int
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    redacted: bool = False  # built with --redact
    analyses_run: list[str] = field(default_factory=list)  # notebooks executed (toolkit.analyses)
    analyses_cached: list[str] = field(default_factory=list)  # unchanged: read from the cache
    analyses_failed: list[str] = field(default_factory=list)  # "name: cell N failed: why"


def output_folder(out: Path) -> Path:
    """The site folder an ``--out`` names (``~`` expanded, every parent resolved)."""
    return Path(out).expanduser().resolve()


def build_paths(cfg: Config, out: Path | None) -> tuple[Path, Path]:
    """The site folder and its build folder; the project's ``.toolkit`` checked first
    (``Config.check_state_links``: a link there leading out of the project is refused)."""
    cfg.check_state_links()
    site = output_folder(out) if out else cfg.site_dir.resolve()
    return site, site.parent / (site.name + ".build")


def site_name_for(cfg: Config, *, redact: bool = False) -> str:
    """The site's name (every page's title): the project's name, redacted first when the
    site is (its characters outside ``[A-Za-z0-9 ._-]`` become ``-`` after: ``password=X``
    cut to ``password-X`` is no longer read as a secret)."""
    name = cfg.project_name
    if redact:
        from toolkit.redact import redact as redact_text

        name = redact_text(name, fold=True)
    name = re.sub(r"[^A-Za-z0-9 ._-]+", "-", name).strip(" -.") or "project"
    return f"Agent Ledger: {name}"


def check_output_folder(out: Path, option: str = "--out") -> None:
    """Refuse to build into a folder that holds something other than a site we built: MkDocs
    empties the output folder on a full build. ``option``: where the folder was named
    (``--out``, or ``site_dir`` in toolkit.yaml), for the hint."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder", hint=f"Choose another {option}")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UsageError(f"{out} is not empty and was not built by toolkit build-site; "
                         "refusing to overwrite it", hint=f"Choose an empty or new {option} folder")
    for danger in (Path.home(), Path("/")):
        with contextlib.suppress(OSError):
            if out.resolve() == danger.resolve():
                raise UsageError(f"refusing to build the site into {out}",
                                 hint=f"Choose an empty or new {option} folder")
    build = out.parent / (out.name + ".build")
    if build.is_symlink():  # never made by the toolkit: its Markdown would land elsewhere
        raise UsageError(f"{build} is a symbolic link (to {os.readlink(build)}); refusing to "
                         "write the site's Markdown through it",
                         hint=f"Choose another {option}, or remove the link")
    if build.exists() and not build.is_dir():
        raise UsageError(f"{build} is a file, not a folder", hint=f"Choose another {option}")
    if build.is_dir() and any(build.iterdir()) and not (build / BUILD_MARKER).is_file():
        raise UsageError(f"{build} is not empty and was not made by toolkit build-site; "
                         "refusing to write the site's Markdown there",
                         hint=f"Choose another {option}, or move that folder")
    # the two folders a build writes into (or the folder it makes them in), before anything
    # is written: the folders below them are checked by the build (_refuse_links)
    for folder in (out, build):
        while not folder.exists() and folder.parent != folder:
            folder = folder.parent
        check_changeable(folder, UNCHANGED)


def _refuse_links(folder: Path, defer: Callable[[str], bool] | None = None, *,
                  links: bool = True) -> set[str]:
    """Refuse a symbolic link anywhere in a site folder or its build folder: the toolkit never
    makes one there, and its writes (and MkDocs') would go wherever it points. And refuse a
    folder there (``folder`` itself too) that this process cannot change
    (:func:`~toolkit.safewrite.check_changeable`): a build deletes and replaces files in any
    of them (MkDocs' full build empties the site, ``--clean`` both folders), and a read-only
    folder met part-way would leave the site half-deleted.

    ``defer(rel)``: a folder (its path relative to ``folder``, ``/``-separated) whose own entry
    is checked but not what it holds; those folders are returned, for :class:`_LinkGuard` to
    walk before anything is written into them. ``links=False``: a link is no error (``--clean``
    deletes it without following it), and is not walked."""
    deferred: set[str] = set()
    stack = [(str(folder), "")]
    while stack:
        path, rel = stack.pop()
        try:
            check_changeable(path, UNCHANGED)
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        if not links:
                            continue
                        raise UsageError(
                            f"is a symbolic link (to {os.readlink(entry.path)}); the toolkit "
                            "never puts one in its site folders and will not write through it",
                            path=entry.path, hint="Remove it, or build with --clean")
                    if entry.is_dir(follow_symlinks=False):
                        sub = f"{rel}/{entry.name}" if rel else entry.name
                        if defer is not None and defer(sub):
                            deferred.add(sub)
                        else:
                            stack.append((entry.path, sub))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return deferred


class _LinkGuard:
    """The site folder's check for symbolic links and folders the build cannot change
    (:func:`_refuse_links`), made a part at a time: most of a big site is one folder per
    page (``ledger/patterns/<entry>/index.html``), and a one-change rebuild writes into a few
    of them. So the folders of the last build's pages below the top level (``state.json``'s
    order) are left out of the first walk (each is seen to be a folder, not a link, in its
    parent's listing; what it holds is not read) and walked only before anything may be
    written into them: the folders of the files MkDocs is given (:meth:`check` from its
    ``on_files``, before it writes a file), or all of them (:meth:`check_all`) before a run
    that is given every file, and before the output of a page gone is deleted. The rest of
    the site (its top level, ``search/``, ``assets/``, the other folders) and the build
    folder are walked whole before the build writes anything, as before."""

    def __init__(self, site: Path, previous: dict[str, Any]) -> None:
        self.site = site
        page_dirs: set[str] = set()
        order = previous.get("order")
        if isinstance(order, list):
            for pair in order:
                url = pair[1] if isinstance(pair, list) and len(pair) == 2 else None
                if isinstance(url, str) and url.count("/") >= 2:  # below the top level
                    page_dirs.add(url.rstrip("/"))
        # a page's folder that holds others' (ledger/patterns/, the file's index) is walked
        inner = {posixpath.dirname(d) for d in page_dirs}
        self.later = _refuse_links(site, (page_dirs - inner).__contains__)

    def check(self, dests: Iterator[str] | Sequence[str]) -> None:
        """Walk the folders left for later that hold one of ``dests`` (site-relative paths
        of files about to be written)."""
        if not self.later:
            return
        parents: set[str] = set()
        for dest in dests:
            parent = posixpath.dirname(dest)
            while parent and parent not in parents:
                parents.add(parent)
                parent = posixpath.dirname(parent)
        self._walk(self.later & parents)

    def check_all(self) -> None:
        """Walk every folder left for later (a run that may write anywhere in the site)."""
        self._walk(set(self.later))

    def _walk(self, folders: set[str]) -> None:
        for rel in sorted(folders):
            _refuse_links(self.site / rel)
            self.later.discard(rel)


def build_site(cfg: Config, store: Store, *, out: Path | None = None, clean: bool = False,
               build_time: dt.datetime | None = None, progress: Progress | None = None,
               templates: Path = TEMPLATES_DIR, base_config: Path = BASE_CONFIG,
               redact: bool | None = None, checks: Sequence[Result] | None = None
               ) -> BuildResult:
    """Build (or incrementally rebuild) the site from the store. See the module docstring.

    ``checks``: results of ``toolkit.checks.run_configured`` (run before the store was
    opened): the Checks page, the dashboard's badge and the handoff page's failing checks.

    ``redact`` (default: ``redact:`` in toolkit.yaml): build from a redacted copy of the store
    (``Store.redacted_copy``), so every page, file name, nav title, download and search entry
    is made from text that went through ``toolkit.redact``."""
    redact = cfg.redact if redact is None else redact
    site, build = build_paths(cfg, out)
    build_time = build_time or clock.now()
    today = clock.today(cfg.today, build_time)

    # from the store itself (a redacted copy's _sources went through the redactor too)
    versions = store.table_versions()
    from toolkit.reports import ledger_file_versions

    # the kept answers' versions: the tables', and each ledger file's (its entries alone)
    answer_versions = {**versions, **ledger_file_versions(store)}

    def content(source: Store, site_name: str, build: Path, mark: Callable[[str], None]
                ) -> Made:
        return _project_content(cfg, source, site_name=site_name, build=build,
                                build_time=build_time, today=today, redact=redact, mark=mark,
                                checks=checks, versions=answer_versions)

    if not redact:  # recorded before its pages are written: a build killed meanwhile leaves
        _record_build(cfg, site, False)  # pages that show secrets, and handoff warns of them
    result = render_site(store, content, site=site, build=build,
                         site_name=site_name_for(cfg, redact=redact), clean=clean,
                         build_time=build_time, progress=progress,
                         templates=templates, base_config=base_config, redact=redact,
                         action_scope=cfg.action_scope, versions=versions)
    _record_build(cfg, site, redact)
    return result


@dataclass
class Made:
    """What a site's content step made: its pages, charts and downloads, files besides them
    (the analyses' figures) and what the analyses did."""

    content: SiteContent
    files: dict[str, bytes] = field(default_factory=dict)
    analyses_run: list[str] = field(default_factory=list)
    analyses_cached: list[str] = field(default_factory=list)
    analyses_failed: list[str] = field(default_factory=list)


MakeContent = Callable[["Store", str, Path, Callable[[str], None]], Made]


def render_site(store: Store, make: MakeContent, *, site: Path, build: Path, site_name: str,
                clean: bool = False, build_time: dt.datetime | None = None,
                progress: Progress | None = None, templates: Path = TEMPLATES_DIR,
                base_config: Path = BASE_CONFIG, redact: bool = False,
                action_scope: str | None = None, versions: dict[str, str] | None = None
                ) -> BuildResult:
    """Build a site into ``site`` (Markdown in ``build``) from the pages ``make(store,
    site_name, build, mark)`` returns: the one machinery behind the project site and the
    fleet site (escaping, redaction, downloads, link checks, strict MkDocs, incremental
    rebuilds; see the module docstring). ``action_scope``: the project whose audit actions
    (with the unassigned ones) every page reads (``Store.scope_actions``); None reads all.
    ``versions``: ``store.table_versions()``, when the caller has them."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    last = [started]

    def mark(stage: str) -> None:
        now = time.perf_counter()
        timings[stage] = timings.get(stage, 0.0) + now - last[0]
        last[0] = now

    check_output_folder(site)
    # one build of a site at a time: another (a second build-site, serve, a fleet site) would
    # empty or rewrite the folders under this one, which would end "built" with a site
    # missing its pages. The lock is on the build folder, which --clean empties, never
    # removes; the other run waits for it, then exits 75.
    build.mkdir(parents=True, exist_ok=True)
    with FileLock(build, timeout=lock_timeout(), what="the site's build folder"):
        return _render_site(store, make, site=site, build=build, site_name=site_name,
                            clean=clean, build_time=build_time, progress=progress,
                            templates=templates, base_config=base_config, redact=redact,
                            action_scope=action_scope, started=started, timings=timings,
                            mark=mark, versions=versions)


def _render_site(store: Store, make: MakeContent, *, site: Path, build: Path, site_name: str,
                 clean: bool, build_time: dt.datetime | None, progress: Progress | None,
                 templates: Path, base_config: Path, redact: bool, action_scope: str | None,
                 started: float, timings: dict[str, float], mark: Callable[[str], None],
                 versions: dict[str, str] | None = None) -> BuildResult:
    """:func:`render_site` under the build folder's lock."""
    check_output_folder(site)  # as it is now that no other build is writing it
    guard = None
    if not clean:  # --clean deletes the folders, and a link in them, without following it
        _refuse_links(build)
        # (the last build's record is read again when it is used, not held meanwhile)
        guard = _LinkGuard(site, _read_state(build / STATE))
    build_time = build_time or clock.now()
    # the site's queries, rows and downloads free tens of MB at a time: given back to the
    # system as they are freed, they are not held beside the pages' own memory
    store.give_back_freed_memory()
    if clean:
        # every folder --clean empties, before the first file goes (the site's own folder
        # is removed, from the folder that holds it)
        for folder in (build, site):
            _refuse_links(folder, links=False)
        if site.is_dir():
            check_changeable(site.parent, UNCHANGED)
            shutil.rmtree(site)
        for child in list(build.iterdir()):  # the folder stays: it holds the lock
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    docs = build / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    _write_if_changed(build / BUILD_MARKER, b"Made by toolkit build-site; safe to delete.\n")
    mark("clean")
    copy_path = build / REDACTED_COPY
    # from the store itself: a redacted copy's _sources went through the redactor too
    if versions is None:
        versions = store.table_versions()
    source = store
    if redact:
        from toolkit.redact import redact as redact_text
        from toolkit.redact import redactor

        # fold: loaders lowercase some values (categories, enums), and a lowercased key id
        # is still a key id. Every action is copied: the copy is scoped below, as the store.
        with store.actions_scoped(None):
            source = store.redacted_copy(copy_path, redactor(fold=True))
            source.give_back_freed_memory()
        store.release()  # the pages read the copy: DuckDB gives back what the copy took
        site_name = redact_text(site_name, fold=True)
        # the copy's actions name their project redacted: so is the project the pages show
        # and scope to (a secret in project_name was on every audit page, and its actions
        # were left out, matching no project of the copy)
        if action_scope is not None:
            action_scope = redact_text(action_scope, fold=True)
        mark("redaction")
    try:
        # action_scope: every page, chart, count and download reads the same actions
        with source.actions_scoped(action_scope), source.reading(READ_ONCE):
            # not kept here: _build_from lets the pages go before MkDocs runs
            result = _build_from(source, make(source, site_name, build, mark), site=site,
                                 build=build, docs=docs, clean=clean,
                                 build_time=build_time, progress=progress, templates=templates,
                                 base_config=base_config, redact=redact, mark=mark,
                                 site_name=site_name, versions=versions, guard=guard)
    finally:
        if source is not store:
            from toolkit.store import store_files

            source.close()
            for p in store_files(copy_path):
                p.unlink(missing_ok=True)
    result.seconds = time.perf_counter() - started
    result.timings = timings
    return result


def _project_content(cfg: Config, store: Store, *, site_name: str, build: Path,
                     build_time: dt.datetime, today: dt.date, redact: bool,
                     mark: Callable[[str], None], checks: Sequence[Result] | None,
                     versions: dict[str, str] | None = None) -> Made:
    """The project site's pages (step 1 of the module docstring), from ``store`` (the
    redacted copy with --redact): reports, handoff, checks, turn diffs and analyses.
    ``versions``: the table versions of the store (not of a redacted copy), under which
    answers of the last build are kept (``reports.KeptAnswers``, in ``answers/``)."""
    from toolkit import handoff_page, reports, turn_diffs
    from toolkit.analyses import Analyses
    from toolkit.checks import page as checks_page

    roots = display_roots(cfg.project_root)
    extra = [handoff_page.builder(cfg, build_time, checks)]
    extra += [checks_page.builder(checks)] if checks is not None else []
    # the pages' contexts are plain values (no cycles) by the thousand: built with the cycle
    # collector paused, which would walk every one of them again and again (frozen, with
    # gc.freeze, they would also hold whatever garbage was there until the build ended:
    # 24 MB more at 15,000 pages)
    with acyclic_build():
        kept = reports.KeptAnswers(
            build / ANSWERS, versions, f"redact={redact}|scope={store.action_scope}",
            code=f"{_versions()}|{parsecache.package_digest().hex()}") \
            if versions is not None else None
        content = reports.build_site_content(store, today=today, site_name=site_name,
                                             roots=roots, extra=extra, built=build_time,
                                             lazy=True, kept=kept)
    checks_page.put_badge(content.pages, checks)
    turn_diffs.add_diffs(cfg, content.pages, redact=redact, cache=build / "diff-cache")
    mark("queries")
    analyses = Analyses(cfg, build, today, redact, int(build_time.timestamp()))
    content.pages += analyses.pages(store)
    mark("analyses")
    return Made(content, dict(analyses.files), analyses.ran, analyses.cached, analyses.failed)


def _build_from(store: Store, made: Made, *, site: Path, build: Path, docs: Path, clean: bool,
                build_time: dt.datetime, progress: Progress | None, templates: Path,
                base_config: Path, redact: bool, mark: Callable[[str], None], site_name: str,
                versions: dict[str, str] | None = None, guard: _LinkGuard | None = None
                ) -> BuildResult:
    """Steps 2-3 of the module docstring, from ``store`` (the redacted copy with --redact).

    Memory: each page's Markdown is written as soon as it is rendered, and the page contexts
    (``made.content.pages``, emptied here) and the tables' HTML are let go before MkDocs runs,
    which then holds every page's HTML itself."""
    from toolkit.store import drop_library_pages

    content = made.content
    config_text, config_files = _mkdocs_config(base_config, content.pages, site, site_name,
                                               build)
    chart_cache = build / "chart-cache"
    kept_charts: dict[str, bytes] = {}  # the charts the cache holds whole, by digest
    charts_job = _start_charts(content.charts, chart_cache, build, kept_charts)
    downloads = None
    # a build that stops before it takes its charts (an error, Ctrl-C) ends their process
    try:
        scrub = None
        if redact:
            from toolkit.redact import redactor

            scrub = redactor(fold=True)
        renderer = _Renderer(templates, scrub, compiled=build / JINJA_CACHE)
        renderer.charts = {spec.name: spec for spec in content.charts}
        files: set[str] = set()  # every file of the docs folder
        written: list[str] = []
        pages = content.pages
        total = len(pages)
        nav_paths = {p.path for p in pages if p.nav}
        todo: list[Page | Deferred] = []  # the pages to render: those the cache cannot reuse
        with acyclic_build():  # (the cache's records: plain values too)
            page_cache = _RenderCache(build, docs, templates, variant=f"redact={redact}")
            for i in range(total):
                page, pages[i] = pages[i], None  # type: ignore[call-overload]  # let it go
                if page.path in files:
                    raise ToolkitError("two pages of the site have the same path (a bug)")
                files.add(page.path)
                if not page_cache.reuse(page, renderer):
                    todo.append(page)
        pages.clear()
        # the rows the deferred pages to render show, fetched before the downloads' thread takes
        # the store's connection (one query per kind of row: an entry's text is read only when its
        # page is rendered)
        # A large site's queries leave tens of MB in DuckDB's allocator, kept until the connection
        # closes: when many pages are to render (their rows, their Markdown and then MkDocs'
        # HTML of each come on top of it), it is closed (and opened again by the next read)
        # before the rows are fetched and again before the pages render. When few are, as after
        # one change, it stays open: the pages add little, and the two reopens cost more than
        # they save (each reads the catalog and the tables' blocks again; about 0.2 s of CPU at
        # 15,000 pages, for 2-3 MB less at the peak).
        # The same goes for the pages of DuckDB's library the queries ran (its code: about 40 MB
        # resident, a quarter of the build's peak at 5,000 entries): given back to the kernel after
        # the rows and after the downloads (the downloads read back only what they run), so the
        # pages render and MkDocs runs without them.
        large = len(todo) >= _LARGE_SITE
        if large:
            store.release(same_state=True)  # the rows must be of the state the pages were made of
        rows = fetch_rows(store, todo)
        if large:
            store.release(same_state=True)  # and so must the downloads
            drop_library_pages()

        # DuckDB writes the downloads in a thread (it runs without the GIL) while the pages render
        def write_downloads() -> list[str]:
            written = _write_downloads(store, content.downloads, docs, build, versions or {},
                                       f"redact={redact}")
            if large:  # nothing reads the store after them
                store.release(same_state=True)
                drop_library_pages()
            return written

        worker = ThreadPoolExecutor(max_workers=1)
        downloads = worker.submit(write_downloads)
        worker.shutdown(wait=False)
        done = total - len(todo)
        if progress and total:
            progress("Writing pages", done, total)
        for i in range(len(todo)):
            page, todo[i] = todo[i], None  # type: ignore[call-overload]  # let it go when done
            made_page = page.page(rows) if isinstance(page, Deferred) else page
            if _write_if_changed(docs / page.path, render_page(renderer, made_page)):
                written.append(page.path)
            page_cache.rendered(page, renderer.used)
            done += 1
            if progress and (done % 200 == 0 or done == total):
                progress("Writing pages", done, total)
        del rows, todo
        written.sort()
        mark("templates")
        renderer.targets.update(page_cache.kept_targets())
        with acyclic_build():  # a record per page
            page_cache.save(renderer.tables, renderer.kept)
        mark("writing")
        charts_drawn, charts_job = _finish_charts(charts_job), None
        for spec in content.charts:
            rel = f"charts/{spec.name}.svg"
            kept = kept_charts.get(spec.digest()) or cached_svg(chart_cache, spec.digest())
            if kept is not None:
                svg = kept
                _remember_chart(spec.digest(), svg)
            else:  # the chart process could not draw it: draw it here
                from concurrent.futures import wait

                from toolkit.charts import import_matplotlib, render_svg

                # its import sets the process's environment a moment: not while DuckDB's thread runs
                wait([downloads])
                import_matplotlib(build)
                svg = render_svg(spec)
                charts_drawn += 1
                cache_svg(chart_cache, spec.digest(), svg)
            files.add(rel)
            if _write_if_changed(docs / rel, svg):
                written.append(rel)
        for rel, data in sorted(made.files.items()):
            files.add(rel)
            if _write_if_changed(docs / rel, data):
                written.append(rel)
        mark("charts")
        for d in content.downloads:
            for fmt in ("csv", "json"):
                files.add(f"data/{d.table}.{fmt}")
        written += downloads.result()
    except BaseException:
        # the downloads' thread holds the store's connection: the error leaves once it is
        # done, or the cleanup on its way (the actions' scope, closing the store) fails on
        # the busy connection and its "connection is busy" hides the real error
        from concurrent.futures import wait

        _abandon_charts(charts_job)
        if downloads is not None:
            wait([downloads])
        raise
    # nothing reads the store after this: DuckDB gives back the memory the site's queries
    # left in its allocator before MkDocs builds every page (the store opens again if used)
    store.release()
    mark("downloads")
    parsecache.prune(chart_cache, {s.digest() for s in content.charts})
    missing = sorted(renderer.targets - files)
    if missing:
        raise ToolkitError(f"a page links to {missing[0]}, which the site does not have (a bug)")
    (build / "tables.json").unlink(missing_ok=True)  # where an older toolkit kept them
    md_times = page_cache.file_times
    del renderer, page_cache  # the tables' HTML: the hook reads it from the tables folder

    state_path = build / STATE
    previous = _read_state(state_path)
    removed = sorted(set(previous.get("files", [])) - files)
    (build / "mkdocs.yml").write_text(config_text, encoding="utf-8")
    signature = hashlib.sha256((config_text + _versions() + f"|redact={redact}"
                                f"|search={search_text.FORM}|{config_files}"
                                ).encode("utf-8")).hexdigest()
    index_path = site / "search" / "search_index.json"
    running = build / MKDOCS_RUNNING
    incremental = (not clean and previous.get("signature") == signature
                   and not running.exists() and (site / MARKER).is_file()
                   and index_path.is_file())
    old_index = _SearchIndex.read(index_path, build / SEARCH_MAP) if incremental else None
    incremental = old_index is not None  # an index that cannot be read: built in full
    if not incremental:
        _write_state(state_path, {"signature": None, "files": sorted(files)})
    subset = (_dirty_subset(docs, site, files, set(written), nav_paths, previous,
                            md_times=md_times) if incremental else None)
    check = guard.check if guard is not None else None
    if guard is not None and subset is None:
        # MkDocs is given every file; and its folders are walked before the first output
        # of a page gone is deleted (a subset is never given when one is: the files differ)
        guard.check_all()
    for rel in removed:
        with contextlib.suppress(FileNotFoundError):
            (docs / rel).unlink()
        _remove_output(site, rel)
    _remove_unexpected(docs, files)
    mark("writing")

    running.write_bytes(b"")
    # the folder is marked as ours before MkDocs writes into it: a build killed meanwhile
    # (Ctrl-C, a closed terminal) leaves pages the next build must take as its own, never a
    # folder it refuses as "not built by toolkit build-site". Until the build ends, it does
    # not claim to be redacted (some of its pages may be the last build's or this one's).
    site.mkdir(parents=True, exist_ok=True)
    _write_marker(site, redacted=False)
    try:
        run = _run_mkdocs(build / "mkdocs.yml", dirty=incremental, build_time=build_time,
                          progress=progress, expected=len(written) if incremental else total,
                          subset=subset, check=check)
    except ToolkitError:
        if subset is None:
            raise
        if guard is not None:
            guard.check_all()
        # a page needs a file the subset lacks (a link not seen as one): MkDocs reads every
        # file, and renders again what the failed run rendered
        for rel in subset.render:
            _remove_output(site, rel)
        run = _run_mkdocs(build / "mkdocs.yml", dirty=True, build_time=build_time,
                          progress=progress, expected=len(written), check=check)
    mark("mkdocs")
    new_index, run.index = run.index, None
    pause("site_before_search_index")
    docs_count = _SearchIndex.write(index_path, build / SEARCH_MAP, old_index, run.order,
                                    run.rebuilt, new_index)
    _write_marker(site, redacted=redact)
    _write_state(state_path, {"signature": signature, "files": sorted(files),
                              "order": [list(o) for o in run.order]})
    running.unlink()
    mark("search index")
    return BuildResult(out=site, build_dir=build, mode="incremental" if incremental else "full",
                       pages=total, written=written, removed=removed, rebuilt=len(run.rebuilt),
                       search_docs=docs_count, seconds=0.0, charts_drawn=charts_drawn,
                       warnings=run.warnings, redacted=redact, analyses_run=made.analyses_run,
                       analyses_cached=made.analyses_cached,
                       analyses_failed=made.analyses_failed)


def _write_marker(site: Path, *, redacted: bool) -> None:
    _write_if_changed(site / MARKER, ("Built by toolkit build-site; safe to delete and rebuild.\n"
                                      f"Redacted: {'yes' if redacted else 'no'}\n"
                                      ).encode())


def _record_build(cfg: Config, site: Path, redacted: bool) -> None:
    """Remember where the site was built and whether it was redacted (in the state folder,
    next to the store), for ``handoff`` and ``publish``, which link to it."""
    from toolkit.safewrite import atomic_replace

    data = {"site": str(site), "redacted": redacted}
    text = (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8")
    path = cfg.state_dir / BUILD_RECORD
    with contextlib.suppress(OSError):
        if path.read_bytes() == text:
            return
    # the site is built; only the warning in handoff/publish depends on the record
    with contextlib.suppress(OSError, ToolkitError):
        atomic_replace(path, text, follow_links=False)  # ours: a link there is replaced


def site_redaction_warning(cfg: Config) -> str | None:
    """A warning for a report that links to the site (``site_url`` set) when the site the
    toolkit last built for this project was not redacted, or no build is recorded."""
    if not cfg.site_url:
        return None
    try:
        data = json.loads((cfg.state_dir / BUILD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    fix = "build it with `toolkit build-site --redact` (or `redact: true` in toolkit.yaml)"
    if not isinstance(data, dict) or not isinstance(data.get("redacted"), bool):
        return ("the report links to the site at site_url, and no site build is recorded "
                f"for this project, so it may show secrets the report redacts; {fix}")
    if not data["redacted"]:
        return ("the report links to the site at site_url, which was last built without "
                f"redaction: its pages show secrets the report redacts; {fix}")
    return None


def _start_charts(specs: list[Any], cache: Path, build: Path, kept: dict[str, bytes]
                  ) -> tuple[Any, int] | None:
    """Draw the charts missing from the cache in a separate process (matplotlib's import and
    drawing overlap with rendering the pages); None when every chart is cached. ``kept``
    gets the SVG of each chart the cache holds whole (or that this process drew before), by
    digest, so the build reads none twice. The process is kept for the next build in this
    process (``serve``, the API), which then does not import matplotlib again."""
    todo = []
    for spec in specs:
        svg = cached_svg(cache, spec.digest())
        if svg is None and spec.digest() in _DRAWN:  # drawn earlier in this process
            svg = _DRAWN[spec.digest()]
            cache_svg(cache, spec.digest(), svg)
        if svg is None:
            todo.append(spec)
        else:
            kept[spec.digest()] = svg
    if not todo:
        return None
    cache.mkdir(parents=True, exist_ok=True)
    from toolkit.charts import chart_request

    request = chart_request(cache, todo)
    for _ in range(2):  # a kept process may have ended since: start a new one
        try:
            proc = _chart_process(build)
        except OSError:  # no process can be started (out of processes or memory)
            return None
        try:
            proc.stdin.write(request + "\n")
            proc.stdin.flush()
        except OSError:
            _end_chart_process(proc)
            continue
        return proc, len(todo)
    return None  # no process could take them: they are drawn in this process


# The SVG of each chart this process drew or read, by its spec's digest (a chart is a pure
# function of its spec): a later build in the same process (``serve``) whose cache lost a chart
# writes it from here instead of starting matplotlib again.
_DRAWN: dict[str, bytes] = {}
_DRAWN_LIMIT = 32 << 20  # bytes; past it the memory starts over
_drawn_bytes = [0]  # the size of _DRAWN's values


def _remember_chart(digest: str, svg: bytes) -> None:
    if digest in _DRAWN:
        return
    if _drawn_bytes[0] + len(svg) > _DRAWN_LIMIT:
        _DRAWN.clear()
        _drawn_bytes[0] = 0
    _DRAWN[digest] = svg
    _drawn_bytes[0] += len(svg)

# Chart processes (``python -m toolkit.charts --serve``) waiting for the next build's charts;
# one per build running at the same time.
_CHART_IDLE: list[Any] = []
_CHART_LOCK = threading.Lock()


def _chart_process(build: Path) -> Any:
    """An idle chart process, or a new one (with matplotlib's folder in ``build``)."""
    import subprocess
    import sys

    from toolkit.charts import mpl_env

    with _CHART_LOCK:
        while _CHART_IDLE:
            proc = _CHART_IDLE.pop()
            if proc.poll() is None:
                return proc
            _end_chart_process(proc)
    return subprocess.Popen([sys.executable, "-m", "toolkit.charts", "--serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
                            env=mpl_env(build))


def _end_chart_process(proc: Any) -> None:
    """Close the process's input (it then exits) and wait for it."""
    import subprocess

    for stream in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            stream.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@atexit.register
def _end_chart_processes() -> None:
    with _CHART_LOCK:
        while _CHART_IDLE:
            _end_chart_process(_CHART_IDLE.pop())


def _finish_charts(job: tuple[Any, int] | None) -> int:
    """Wait for the chart process to draw this build's charts, and keep it for the next
    build; charts it failed to draw are drawn in this process."""
    if job is None:
        return 0
    proc, count = job
    try:
        answer = proc.stdout.readline().strip()
    except OSError:
        answer = ""
    if answer != "ok":  # it failed or ended: a new one starts for the next build
        _end_chart_process(proc)
        return 0
    with _CHART_LOCK:
        _CHART_IDLE.append(proc)
    return count


def _abandon_charts(job: tuple[Any, int] | None) -> None:
    """End the chart process of a build that stops before it took its charts (an error,
    Ctrl-C): it may be drawing, so it is not kept for the next build. (Left to the garbage
    collector, it went on running: a long ``serve`` kept one per failed build.)"""
    if job is not None:
        with contextlib.suppress(OSError):  # it has ended already
            job[0].kill()
        _end_chart_process(job[0])


def _versions() -> str:
    """The versions of the packages a build's output depends on."""
    from toolkit.parsecache import package_version

    # duckdb: the pages' row digests are its md5 of its to_json of the rows; markdown-it-py:
    # the agents' Markdown on the pages (toolkit.mdrender), not pinned (rich needs it too)
    return "|".join(f"{p}={package_version(p)}" for p in (
        "agent-ledger-toolkit", "mkdocs", "mkdocs-material", "markdown", "duckdb",
        "markdown-it-py"))


class _RenderCache:
    """Pages whose Markdown need not be rendered again: a page is rendered from its context
    (a dataclass of plain values, or a :class:`Deferred` page's maker and arguments) by the
    templates and this package's code, and reads nothing else but the chart specs it shows.
    So when the digest of the pickled context, the code and templates (``code``), the charts
    the page used and its file in the build folder (size and mtime, as this class last saw
    them) are all as they were, the file already holds the page's bytes; its tables are
    already in the tables folder. A one-change rebuild renders only the pages whose data
    changed.

    The tables' HTML (what the hook puts in place of each placeholder) is kept in the build
    folder's ``tables/``, one JSON file per first two digits of the table's digest, so a
    rebuild rewrites only the files whose set of tables changed (and gathers the tables'
    names only of the files a rendered or gone page reached) and the hook reads only the
    files the pages it renders need. A file is trusted when its size and mtime are as this
    class wrote it; a page with a table in any other file is rendered again.

    Kept in ``render-cache.marshal`` in the build folder (a :mod:`toolkit.parsecache` entry,
    under ``code``: marshal data, checked, read and written in a fraction of JSON's time; the
    JSON file of older versions is removed, not read): per page path the context's
    digest, the file's size and mtime_ns and what rendering it used (:class:`_Uses`), and per
    tables file its size, mtime_ns and the digest of its tables' names. Anything unreadable
    or different means: render. It is read and written on every build, so a page's record is
    compact: [context digest, its tables' names in one string, its link targets as numbers
    into one list of the site's targets, charts, [size, mtime_ns]] (the listings link to every
    entry page: as strings, those links were most of the file's 9 MB at 15,000 pages). A
    reused page's record is written back as it was read (the list keeps its order, new
    targets are added at its end), so a rebuild's cost per unchanged page is its checks; the
    list drops the targets no page links to when they are most of it."""

    def __init__(self, build: Path, docs: Path, templates: Path, variant: str) -> None:
        self.path = build / RENDER_CACHE
        self.docs = docs
        self.tables_dir = build / TABLES
        # variant: how the renderer is set up besides its code (a redacted build's renderer
        # redacts what it renders)
        self.code = _code_digest(templates, variant)
        kept = parsecache.load(build, RENDER_SLOT, (self.code,))
        old: dict[str, Any] = kept if isinstance(kept, dict) else {}
        same = bool(old)  # kept under this code (the key), or nothing
        pages = old.get("pages") if same else None
        # per page path its record (anything else, a damaged file: no page's record is trusted)
        self.old: dict[str, Any] = pages if isinstance(pages, dict) else {}
        names = old.get("targets") if same else None
        # the site's link targets, which the pages' records number into (a list of anything
        # else: no page's record is trusted)
        self.names: list[str] = names if isinstance(names, list) and all(
            isinstance(n, str) for n in names) else []
        self._targets: set[int] = set()  # the numbers of the reused pages' targets
        shards = old.get("tables") if same else None
        self.shards: dict[str, Any] = shards if isinstance(shards, dict) else {}
        self.intact: set[str] = set()  # tables files as they were written
        for name, record in self.shards.items():
            try:
                st = (self.tables_dir / f"{name}.json").stat()
                if [st.st_size, st.st_mtime_ns] == record[:2]:
                    self.intact.add(name)
            except (OSError, TypeError):
                continue
        # per page: its record as kept (a reused page's, as read) or what rendering it used
        self.new: dict[str, list[Any] | dict[str, Any]] = {}
        self._digests: dict[str, str] = {}
        self._docs = str(docs) + os.sep
        self._charts: dict[str, str | None] = {}  # chart name -> its spec's digest
        # page path -> the mtime_ns of its file as the cache checked or wrote it (after save)
        self.file_times: dict[str, int] = {}

    def _chart_digest(self, renderer: _Renderer, name: str) -> str | None:
        if name not in self._charts:
            spec = renderer.charts.get(name)
            self._charts[name] = spec.digest() if spec is not None else None
        return self._charts[name]

    def reuse(self, page: Page | Deferred, renderer: _Renderer) -> bool:
        """True when ``page``'s file holds what rendering it would write; its tables and
        link targets are then added to ``renderer`` as rendering it would add them."""
        digest = _context_digest(page)
        if digest is None:
            return False
        self._digests[page.path] = digest
        packed = self.old.get(page.path)
        if not isinstance(packed, list) or len(packed) != 5 or packed[0] != digest:
            return False
        try:
            tables = packed[1].split()
            if not self.intact.issuperset(map(table_shard, tables)):
                return False
            charts = packed[3]
            st = os.stat(self._docs + page.path)  # a str path: a Path costs more than the stat
            if [st.st_size, st.st_mtime_ns] != packed[4]:
                return False
            if charts and any(self._chart_digest(renderer, n) != d for n, d in charts.items()):
                return False
            targets = packed[2]
            n = len(self.names)
            # numbers into self.names: anything else (a damaged file) renders the page again
            # (checked a list at a time: a listing links to thousands of pages)
            if not isinstance(targets, list) or (targets and (
                    set(map(type, targets)) != {int} or min(targets) < 0
                    or max(targets) >= n)):
                return False
            self._targets.update(targets)
        except (KeyError, TypeError, AttributeError, IndexError, OSError, ValueError):
            return False
        renderer.kept.update(tables)
        self.new[page.path] = packed  # kept as it is: its numbers are into the same names
        return True

    def kept_targets(self) -> set[str]:
        """The pages and files the reused pages link to."""
        names = self.names
        return {names[i] for i in self._targets}

    def rendered(self, page: Page | Deferred, used: _Uses) -> None:
        digest = self._digests.get(page.path)
        if digest is not None:
            self.new[page.path] = {"context": digest, "tables": used.tables,
                                   "targets": used.targets, "charts": used.charts}

    def save(self, tables: dict[str, str], kept: set[str]) -> None:
        """Write the tables files (``tables``: the HTML of the rendered pages' tables,
        ``kept``: the names of the reused pages' tables, in intact files) and record the
        pages' files as written (call after writing the rendered pages; a reused page's file
        was checked in :meth:`reuse`)."""
        shards = self._write_tables(tables, kept)
        names = list(self.names)  # a reused page's record numbers into these, kept in order
        number = {n: i for i, n in enumerate(names)}
        used = set(self._targets)
        pages: dict[str, list[Any]] = {}
        for rel, entry in self.new.items():
            if isinstance(entry, list):
                pages[rel] = entry
                continue
            try:
                st = (self.docs / rel).stat()
            except OSError:
                continue
            numbers = []
            for t in entry["targets"]:
                i = number.get(t)
                if i is None:
                    i = number[t] = len(names)
                    names.append(t)
                numbers.append(i)
            used.update(numbers)
            pages[rel] = [entry["context"], " ".join(entry["tables"]), numbers,
                          entry["charts"], [st.st_size, st.st_mtime_ns]]
        if len(names) > 2 * len(used) + 1024:  # mostly targets no page links to any more
            names = self._compact(pages, names)
        self.file_times = {rel: record[4][1] for rel, record in pages.items()}
        parsecache.save(self.path.parent, RENDER_SLOT, (self.code,),
                        {"pages": pages, "targets": names, "tables": shards})
        (self.path.parent / _OLD_RENDER_CACHE).unlink(missing_ok=True)

    @staticmethod
    def _compact(pages: dict[str, list[Any]], names: list[str]) -> list[str]:
        """``names`` without the targets no page's record numbers (each record renumbered):
        targets that were linked once are not kept for ever."""
        used = sorted({i for record in pages.values() for i in record[2]})
        renumber = {old: new for new, old in enumerate(used)}
        for record in pages.values():
            record[2] = [renumber[i] for i in record[2]]
        return [names[i] for i in used]

    def _touched_shards(self, tables: dict[str, str]) -> set[str] | None:
        """The tables files whose set of tables may differ from the last build's: those of
        the rendered pages' tables and of the tables the last build's records of the pages
        not reused (rendered again, or gone) named. Any other file's tables are all still
        used (each was named by a page's record, and those pages were reused with their
        records as they were) and no other is added: its record stands. None: not known (a
        record not in its form), every file is checked."""
        touched = set(map(table_shard, tables))
        new = self.new
        for rel, packed in self.old.items():
            if new.get(rel) is packed:  # reused: its record as it was read
                continue
            if not isinstance(packed, list) or len(packed) != 5 or not isinstance(
                    packed[1], str):
                return None
            touched.update(map(table_shard, packed[1].split()))
        return touched

    def _write_tables(self, tables: dict[str, str], kept: set[str]) -> dict[str, Any]:
        """Rewrite the tables files whose set of tables changed; their records."""
        touched = self._touched_shards(tables)
        records: dict[str, Any] = {}
        wanted: dict[str, list[str]] = {}
        if touched is None:
            names_of: Any = sorted(kept | tables.keys())
        else:
            # an intact file of the last build's that no change reached: as it is (its
            # tables' names are not gathered, sorted and digested again)
            for shard in self.intact - touched:
                record = self.shards.get(shard)
                if record is not None:
                    records[shard] = record
            names_of = sorted({n for n in kept if table_shard(n) in touched}
                              | tables.keys())
        for name in names_of:
            wanted.setdefault(table_shard(name), []).append(name)
        self.tables_dir.mkdir(exist_ok=True)
        parsecache.keep_only(self.tables_dir,
                             {f"{shard}.json" for shard in (*wanted, *records)})
        for shard, names in wanted.items():
            path = self.tables_dir / f"{shard}.json"
            names_digest = hashlib.sha256("\n".join(names).encode()).hexdigest()
            record = self.shards.get(shard)
            if shard in self.intact and record is not None and record[2:] == [names_digest]:
                records[shard] = record
                continue
            old: dict[str, Any] = {}
            if shard in self.intact and not all(n in tables for n in names):
                old = _read_state(path)
            try:
                data = {n: tables[n] if n in tables else old[n] for n in names}
            except KeyError:  # the file was changed, keeping its size and mtime
                self.path.unlink(missing_ok=True)  # the next build renders every page
                raise ToolkitError(f"{path} is damaged",
                                   hint="Run toolkit build-site again") from None
            _write_if_changed(path, tables_file(data))
            st = path.stat()
            records[shard] = [st.st_size, st.st_mtime_ns, names_digest]
        return dict(sorted(records.items()))


def _context_digest(page: Page | Deferred) -> str | None:
    """The digest of a page's context (None when it cannot be pickled: always rendered). A
    :class:`Deferred` page's is the digest of its maker and arguments, which stand for it
    (as plain values: :func:`_plain_args`)."""
    import pickle

    subject: Any = page
    if isinstance(page, Deferred):
        subject = ("deferred", page.make.__module__, page.make.__qualname__,
                   _plain_args(page.args))
    try:
        return hashlib.sha256(pickle.dumps(subject, protocol=5)).hexdigest()
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


def _fields_getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving the values of a dataclass's fields, in order, as a tuple."""
    names = [f.name for f in dataclasses.fields(cls)]
    get = operator.attrgetter(*names)
    return get if len(names) > 1 else lambda value: (get(value),)


# the link and row classes a Deferred page's arguments hold by the thousand: tag, fields
_ARG_FIELDS: dict[type, tuple[bytes, Callable[[Any], tuple[Any, ...]]]] = {
    cls: (f"{cls.__module__}.{cls.__qualname__}".encode(), _fields_getter(cls))
    for cls in (Ref, RowRef)}


def _plain_args(value: Any) -> Any:
    """``value`` (a :class:`Deferred` page's arguments) as plain values for its digest: a
    :class:`Ref` or :class:`RowRef` as its class's name and its fields' values, a function as
    its module and name, a tuple item by item, anything else tagged and pickled as it is. A
    tag is bytes, which nothing else becomes (bytes are tagged too), so two arguments that
    differ stay apart. At 15,000 entry pages this takes about a third of the time pickle
    takes with the objects themselves (it looks up their classes and functions by name on
    every page)."""
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    if kind is tuple:
        return tuple([_plain_args(v) for v in value])
    fields_of = _ARG_FIELDS.get(kind)
    if fields_of is not None:
        return (fields_of[0], *[_plain_args(v) for v in fields_of[1](value)])
    if kind is types.FunctionType and "<" not in value.__qualname__:
        # found by its name, as pickle finds it (a lambda or a local function is not: pickled
        # as itself, it fails, and the page is always rendered)
        return (b"function", value.__module__, value.__qualname__)
    return (b"object", value)


def _code_digest(templates: Path, variant: str) -> str:
    """The digest of what renders a page besides its context: the templates (read on every
    build: a user may edit them between two builds of one process, as under ``serve``), this
    package's code (filters, escaping, table HTML), the versions of the libraries and
    ``variant``."""
    h = hashlib.sha256((_versions() + "|" + variant).encode("utf-8"))
    _digest_files(h, templates, "*")
    h.update(parsecache.package_digest())
    return h.hexdigest()


def _digest_theme_templates(h: Any, folder: Path) -> None:
    """Digest the files of a theme folder that MkDocs does not copy into the site as static
    files but renders pages with: its templates (``*.html``), its ``mkdocs_theme.yml`` and
    hidden files (Material's ``.icons``, read by the templates)."""
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and (p.suffix == ".html" or p.name == "mkdocs_theme.yml"
                            or any(part.startswith(".") for part in rel.parts)):
            h.update(f"\0{rel}\0".encode())
            h.update(p.read_bytes())


def _digest_files(h: Any, folder: Path, pattern: str) -> None:
    for p in sorted(folder.rglob(pattern)):
        if p.is_file():
            h.update(f"\0{p.relative_to(folder)}\0".encode())
            h.update(p.read_bytes())


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` unless the file already holds exactly it. Not atomic on purpose: the
    build folder is ours, and a file cut short by a crash differs, so the next run rewrites
    it."""
    return _write_parts_if_changed(path, (data,))


def _write_parts_if_changed(path: Path, parts: Sequence[bytes]) -> bool:
    """:func:`_write_if_changed` of ``b"".join(parts)``, without making that one large copy
    (the search index: at the end of a build, a copy the size of the index would be its peak
    of memory)."""
    try:
        if path.stat().st_size == sum(map(len, parts)):
            with open(path, "rb") as old:
                if all(old.read(len(p)) == p for p in parts):
                    return False
    except FileNotFoundError:
        pass
    try:
        fh = open(path, "wb")  # noqa: SIM115
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "wb")  # noqa: SIM115
    with fh:
        fh.writelines(parts)
    return True


def _write_downloads(store: Store, downloads: list[Any], docs: Path, build: Path,
                     versions: dict[str, str], variant: str) -> list[str]:
    """Write each table's CSV and JSON download; the docs-relative paths of those whose bytes
    changed. A table's files are not written again, nor even made, when its key is as the
    last build recorded it (``downloads.json`` in the build folder) and each file still has
    the size and mtime recorded: the key is the table's version (``versions``: the load of
    its source, :meth:`Store.table_versions`), its columns and types, whose actions the store
    reads (``site_scope``), ``variant`` (whether it is redacted) and the code that writes it
    (this package's version and the modules that copy and redact). A view's version is made
    of those of the tables it reads (:func:`toolkit.store.view_versions`). A table or view
    without a version (no single source creates it, or it reads such a table, or the time)
    is written every time."""
    from toolkit.parsecache import code_version

    record_path = build / DOWNLOADS
    old = _read_state(record_path)
    code = "|".join((_versions(), variant, str(store.action_scope),
                     code_version("toolkit.store", "toolkit.redact", "toolkit.site")))
    columns = store.columns([d.table for d in downloads])  # one catalog query, not one a file
    record: dict[str, list[Any]] = {}
    written = []
    for d in downloads:
        version = versions.get(d.table)
        key = hashlib.sha256(json.dumps([code, d.table, version, columns.get(d.table)]).encode(
            "utf-8")).hexdigest() if version else None
        todo = []
        for fmt in ("csv", "json"):
            rel = f"data/{d.table}.{fmt}"
            seen = old.get(rel)
            if key is not None and isinstance(seen, list) and seen[:1] == [key]:
                try:
                    st = os.stat(docs / rel)
                    if seen[1:] == [st.st_size, st.st_mtime_ns]:
                        record[rel] = seen
                        continue
                except OSError:
                    pass
            todo.append((rel, fmt))
        if not todo:
            continue
        for rel in _copy_table_if_changed(store, d.table, docs, todo, columns[d.table], d.rows):
            written.append(rel)
        if key is not None:
            for rel, _fmt in todo:
                st = os.stat(docs / rel)
                record[rel] = [key, st.st_size, st.st_mtime_ns]
    _write_state(record_path, record)
    return written


def _copy_table_if_changed(store: Store, table: str, docs: Path, todo: list[tuple[str, str]],
                           columns: list[tuple[str, str]], rows: int | None = None
                           ) -> list[str]:
    """Write ``table``'s downloads ``todo`` (docs-relative path, format), sorted once for all
    of them (``rows``: the table's, as the data page counted them, when known); the paths
    whose bytes changed."""
    tmps = []
    for rel, fmt in todo:
        dest = docs / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmps.append((dest.with_name(dest.name + ".new"), fmt))
    store.copy_to_files(table, tmps, ordered=True, spreadsheet_safe=True, columns=columns,
                        rows=rows)
    changed = []
    for (rel, _fmt), (tmp, _) in zip(todo, tmps, strict=True):
        # compared and moved as files: a download can be tens of MB, read while pages render
        dest = docs / rel
        if _same_bytes(tmp, dest):
            tmp.unlink()
        else:
            os.replace(tmp, dest)
            changed.append(rel)
    return changed


def _same_bytes(a: Path, b: Path, chunk: int = 1 << 20) -> bool:
    """Whether two files hold the same bytes (False when ``b`` does not exist), read a chunk
    at a time."""
    try:
        if a.stat().st_size != b.stat().st_size:
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x = fa.read(chunk)
                if x != fb.read(chunk):
                    return False
                if not x:
                    return True
    except FileNotFoundError:
        return False


@dataclass
class _Subset:
    """What a dirty MkDocs run needs to read (:func:`_dirty_subset`): the docs files to show
    it and the previous build's page order, which is this build's (the same files)."""

    files: set[str]
    order: list[tuple[str, str]]
    render: set[str]  # the pages MkDocs will render


# a docs-relative Markdown path in a page's text: a link MkDocs resolves to a page (every
# match is resolved and kept if it names a page; a match that is no link only costs a file)
_MD_PATH = re.compile(r"[A-Za-z0-9_.~%/-]+\.md\b")


def _dirty_subset(docs: Path, site: Path, files: set[str], written: set[str],
                  nav_paths: set[str], previous: dict[str, Any],
                  md_times: dict[str, int]) -> _Subset | None:
    """The docs files a dirty MkDocs run must read, when the site has the same files as the
    previous build (else None: MkDocs reads them all). A dirty run renders the pages whose
    Markdown is newer than their HTML (those rewritten now, or left so by an interrupted
    build); to render a page as a full build does, MkDocs needs the pages in the nav, the
    pages it links to and the static files, and nothing else. So it is shown those only, and
    the other pages (most of a site, after one change) cost nothing. ``md_times``: the
    mtime_ns of pages' Markdown files, as this build's render cache found or wrote them
    (those not in it are read from the disk)."""
    order = previous.get("order")
    if previous.get("files") != sorted(files) or not isinstance(order, list):
        return None
    try:
        pairs = [(str(src), str(url)) for src, url in order]
    except (TypeError, ValueError):
        return None
    pages = {f for f in files if f.endswith(".md")}
    if len(pairs) != len(pages) or {src for src, _ in pairs} != pages:
        return None
    keep = {f for f in files if not f.endswith(".md")} | (nav_paths & pages)
    render: set[str] = set()
    html_at, md_at = str(site) + os.sep, str(docs) + os.sep  # str paths: Paths cost more
    for src, url in pairs:
        if src not in written:
            try:
                md = md_times.get(src)
                if md is None:
                    md = os.stat(md_at + src).st_mtime_ns
                if os.stat(f"{html_at}{url}index.html").st_mtime_ns >= md:
                    continue
            except OSError:
                pass
        render.add(src)
        folder = posixpath.dirname(src)
        try:
            with open(md_at + src, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            return None
        for m in set(_MD_PATH.findall(text)):
            target = posixpath.normpath(posixpath.join(folder, unquote(m)))
            if target in pages:
                keep.add(target)
    return _Subset(keep | render, pairs, render)


def _link_docs(docs: Path, folder: Path, files: set[str]) -> None:
    """``folder`` made afresh with ``files`` of ``docs`` as hard links (copies, keeping their
    times, where the file system has none): the same files at the same paths, as MkDocs sees
    them."""
    if folder.exists():
        shutil.rmtree(folder)
    made: set[str] = set()
    for rel in sorted(files):
        parent = posixpath.dirname(rel)
        if parent not in made:
            (folder / parent).mkdir(parents=True, exist_ok=True)
            made.add(parent)
        try:
            os.link(docs / rel, folder / rel)
        except OSError:
            shutil.copy2(docs / rel, folder / rel)


def _remove_unexpected(docs: Path, expected: set[str]) -> None:
    """Files in the docs folder that no page produced (left by an older toolkit or a crash)."""
    root = str(docs)
    for folder, _dirs, names in os.walk(root, topdown=False):
        rel_dir = os.path.relpath(folder, root).replace(os.sep, "/")
        prefix = "" if rel_dir == "." else rel_dir + "/"
        for name in names:
            if prefix + name not in expected:
                os.unlink(os.path.join(folder, name))
        if folder != root and not os.listdir(folder):
            os.rmdir(folder)


def _remove_output(site: Path, rel: str) -> None:
    """Delete the built output of a docs file that no longer exists."""
    from toolkit.reports import page_url

    target = site / (page_url(rel) + "index.html") if rel.endswith(".md") else site / rel
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    parent = target.parent
    while parent != site and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def _read_state(path: Path) -> dict[str, Any]:
    from toolkit.textio import check_json_depth

    try:
        text = path.read_text(encoding="utf-8")
        check_json_depth(text, path)
        data = json.loads(text)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, DataError):
        return {}


def _write_state(path: Path, data: dict[str, Any]) -> None:
    """A build folder's record as compact JSON: read and written on every build (the site's
    files and their order: megabytes at 15,000 pages), and only the C encoder writes JSON
    without indenting."""
    _write_if_changed(path, (json.dumps(data, separators=(",", ":"), sort_keys=True)
                             + "\n").encode())


# =========================================================================== config and nav

_SECTIONS = ("Overview", "Dashboard", "Ledger", "Slop", "Audit", "Sessions", "Snapshots",
             "Analyses", "Data", "Warnings")


def make_nav(pages: Sequence[Page | Deferred]) -> list[Any]:
    """The navigation: pages with a ``nav`` label only, grouped by section in a fixed order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    singles: dict[str, str] = {}
    for p in pages:
        if not p.nav:
            continue
        if len(p.nav) == 1:
            singles[p.nav[0]] = p.path
        else:
            sections.setdefault(p.nav[0], []).append((p.nav[1], p.path))
    order = list(_SECTIONS) + sorted((set(sections) | set(singles)) - set(_SECTIONS))
    nav: list[Any] = []
    # the theme prints nav labels unescaped, as it prints titles: escaped as titles are (a
    # label may come from data, such as an analysis notebook's title)
    for name in order:
        if name in singles:
            nav.append({html_title(name): singles[name]})
        elif name in sections:
            nav.append({html_title(name): [{html_title(label): path}
                                           for label, path in sections[name]]})
    return nav


def _mkdocs_config(base: Path, pages: Sequence[Page | Deferred], site: Path, site_name: str,
                   build: Path) -> tuple[str, str]:
    """The generated mkdocs.yml (for ``build``/mkdocs.yml) and the digest of the files it
    names that every page's HTML is made with (:func:`_config_files_digest`)."""
    import yaml

    from toolkit.textio import check_yaml_depth, parse_yaml

    try:
        text = base.read_text(encoding="utf-8")
        check_yaml_depth(text, base)
        config = parse_yaml(lambda loader: yaml.load(text, Loader=loader)) or {}
    except (OSError, yaml.YAMLError, DataError) as exc:
        raise ToolkitError(f"cannot read the base site configuration: {exc}", path=base) \
            from None
    config.update({"site_name": site_name, "docs_dir": "docs", "site_dir": str(site),
                   "nav": make_nav(pages), "strict": True, "use_directory_urls": True})
    config["hooks"] = [*(config.get("hooks") or []), str(HOOKS)]
    header = ("# Generated by toolkit build-site from the repository's mkdocs.yml; "
              "rebuilt on every run.\n")
    # libyaml's emitter where PyYAML has it (about four times faster than PyYAML's own)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return (header + yaml.dump(config, Dumper=dumper, sort_keys=False, allow_unicode=True),
            _config_files_digest(config, build))


def _config_files_digest(config: dict[str, Any], folder: Path) -> str:
    """The digest of what the theme renders every page with besides the configuration's
    text: the templates of the theme's ``custom_dir`` (overrides a user edits between builds;
    its other files are static files, which a dirty run copies when they change), the
    hooks' code (the toolkit's own among them: this package's) and this package's code, with
    relative paths read from ``folder``, where the generated mkdocs.yml is. A dirty MkDocs run
    renders only the pages whose Markdown changed, so a change here must be a full run."""
    h = hashlib.sha256(parsecache.package_digest())
    theme = config.get("theme")
    custom = theme.get("custom_dir") if isinstance(theme, dict) else None
    hooks = config.get("hooks")
    named = [custom] + (hooks if isinstance(hooks, list) else [])
    for name in named:
        if not isinstance(name, str):
            continue
        path = folder / Path(name).expanduser()
        h.update(f"\0{name}\0".encode())
        if path.is_dir():
            _digest_theme_templates(h, path)
        else:
            with contextlib.suppress(OSError):
                h.update(path.read_bytes())
    return h.hexdigest()


# =========================================================================== running MkDocs

@dataclass
class _Run:
    order: list[tuple[str, str]] = field(default_factory=list)  # (src_uri, url), build order
    rebuilt: set[str] = field(default_factory=set)  # src_uri of pages rendered
    warnings: list[str] = field(default_factory=list)
    index: _SearchIndex | None = None  # this build's search entries (_SearchIndex.take)
    shown: int = 0  # the documentation pages MkDocs read (a dirty run's subset: its own)


# A large build, in pages rendered: the build gives memory back early (the store's DuckDB
# connection closed before the pages render; MkDocs' cycles collected as soon as it is done,
# not when Python's collector next runs on its own). Each costs time whatever the site's size
# (a reopen about 30 ms and the table blocks read again; a full collection about 0.1 s in a
# test or `serve` process), and the memory it frees matters only when many pages render.
_LARGE_SITE = 1_000


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class _DropDirtyWarning(logging.Filter):
    """MkDocs warns that a dirty build may leave stale navigation; ours rebuilds in full
    whenever the nav or config changes, so the warning does not apply (and would fail the
    strict build)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "A 'dirty' build is being performed" not in record.getMessage()


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _bytecode_cache(folder: Path | None) -> Any:
    """Templates compiled once: Jinja keeps each template's bytecode, keyed by its name, its
    file and the checksum of its source, in memory (a later build in this process, as under
    ``serve``, skips reading and compiling) and in ``folder``, the build folder's
    ``jinja-cache`` (a new process skips compiling). The theme's templates and the toolkit's
    own (``site_templates/``) use it; with no ``folder``, only the memory."""
    import jinja2

    files = None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        files = jinja2.FileSystemBytecodeCache(str(folder))
    return _bytecode_cache_class()(files)


@functools.cache
def _bytecode_cache_class() -> Any:
    """The class of :func:`_bytecode_cache`, made once (jinja2 is imported only by builds)."""
    import jinja2

    class Cache(jinja2.BytecodeCache):
        def __init__(self, files: jinja2.FileSystemBytecodeCache | None) -> None:
            self.files = files

        def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            code = _BYTECODE.get((bucket.key, bucket.checksum))
            if code is not None:
                bucket.code = code
                return
            if self.files is None:
                return
            try:
                self.files.load_bytecode(bucket)
            except Exception:  # a damaged file: compile the template again
                bucket.reset()
            if bucket.code is not None:
                _BYTECODE[(bucket.key, bucket.checksum)] = bucket.code

        def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            _BYTECODE[(bucket.key, bucket.checksum)] = bucket.code
            if self.files is not None:
                self.files.dump_bytecode(bucket)

    return Cache


_BYTECODE: dict[tuple[str, str], Any] = {}  # (key, checksum) -> code


# the static files of installed themes, per theme folders, filter and static templates
_THEME_FILES: dict[tuple[Any, ...], list[str]] = {}


def _theme_envs(theme: Any, compiled: Path) -> None:
    """Every Jinja environment the theme makes during the build (the one the pages render with,
    and those plugins make for themselves: Material's search plugin makes one per setting it
    translates) compiles its templates once, through :func:`_bytecode_cache` on ``compiled``.

    And MkDocs lists the theme's static files (the ones it copies into the site) on every
    build, walking and matching every file of the theme's folders (about 14,500 for Material:
    0.2 s of CPU). A theme installed as a package changes only with its version: its list is
    made once per process (a later build, as under ``serve``, reuses it) and kept in the build
    folder (parse-cache slot :data:`THEME_FILES`) for the next process, which trusts it while
    the theme's folders, its static templates, the filter MkDocs lists with and the versions
    of the packages (:func:`_versions`) are the same. A theme with a ``custom_dir`` (files a user
    may edit between builds) is listed by MkDocs every time."""
    make_env = theme.get_env
    listed_once = theme.custom_dir is None
    kept_in = compiled.parent  # the build folder

    def get_env() -> Any:
        env = make_env()
        env.bytecode_cache = _bytecode_cache(compiled)
        if not listed_once:
            return env
        listed = env.list_templates

        def list_templates(extensions: Any = None, filter_func: Any = None) -> list[str]:
            code = getattr(filter_func, "__code__", None)
            if extensions is not None or code is None:
                return listed(extensions, filter_func)
            key = (tuple(theme.dirs), code, tuple(sorted(theme.static_templates)))
            names = _THEME_FILES.get(key)
            if names is None:
                names = _THEME_FILES[key] = _kept_theme_files(
                    kept_in, key, lambda: list(listed(filter_func=filter_func)))
            return list(names)

        env.list_templates = list_templates
        return env

    theme.get_env = get_env


def _kept_theme_files(folder: Path, key: tuple[Any, ...], make: Callable[[], list[str]]
                      ) -> list[str]:
    """The theme's static files as kept in ``folder`` under ``key`` (the theme's folders, the
    code of the filter MkDocs lists them with, its static templates) and the packages'
    versions; else ``make()``, kept there for the next build."""
    from toolkit import parsecache

    dirs, code, static = key
    stamp = (json.dumps([_versions(), [str(d) for d in dirs],
                         [code.co_filename, code.co_firstlineno, code.co_qualname],
                         list(static)]),)
    names = parsecache.load(folder, THEME_FILES, stamp)
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        return names
    names = make()
    parsecache.save(folder, THEME_FILES, stamp, names)
    return names


def _run_mkdocs(config_file: Path, *, dirty: bool, build_time: dt.datetime,
                progress: Progress | None, expected: int, subset: _Subset | None = None,
                check: Callable[[Iterator[str]], None] | None = None) -> _Run:
    """Run MkDocs on the build folder's config (``subset``: a dirty run reads only those docs
    files, linked into a folder of their own, and the build order is the subset's).
    ``check``: called with the site-relative path of every file MkDocs was given, before it
    writes any (:meth:`_LinkGuard.check`)."""
    from mkdocs.commands import build as mk_build
    from mkdocs.config import config_options, load_config
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.exceptions import Abort, ConfigurationError
    from mkdocs.plugins import BasePlugin, event_priority

    run = _Run()

    class _Tracker(BasePlugin):
        @event_priority(100)  # before any other plugin sees the files
        def on_files(self, files: Any, *, config: Any) -> Any:
            if check is not None:  # the folders MkDocs may write into: no link in them
                check(f.dest_uri for f in files)
            shown = files.documentation_pages()
            run.shown = len(shown)
            if subset is not None:
                run.order = subset.order
                return files
            # page.url (what the search index holds) is '' for the home page, file.url './'
            run.order = [(f.src_uri, "" if f.url in (".", "./") else f.url) for f in shown]
            return files

        nav: Any = None

        def on_nav(self, nav: Any, *, config: Any, files: Any) -> Any:
            self.nav = nav
            return nav

        def on_env(self, env: Any, *, config: Any, files: Any) -> Any:
            if self.nav is not None:
                site_theme.cache_nav(env, self.nav)
            site_theme.cache_partials(env, config_file.parent)
            if self.nav is not None:
                site_theme.cache_pages(env, self.nav, files)
            return env

        def __init__(self) -> None:
            super().__init__()
            self.markdown = site_theme.MarkdownOnce()

        def on_pre_page(self, page: Any, *, config: Any, files: Any) -> Any:
            if site_theme.ENABLED:
                page.render = self.markdown.bind(page)
                page.read_source = functools.partial(site_theme.read_source, page)
            return page

        @event_priority(100)  # before the search plugin writes its index
        def on_post_build(self, *, config: Any) -> None:
            run.index = _SearchIndex.take(config)

        def on_post_page(self, output: str, *, page: Any, config: Any) -> str:
            run.rebuilt.add(page.file.src_uri)
            if progress and (len(run.rebuilt) % 200 == 0 or len(run.rebuilt) == expected):
                progress("Building HTML", len(run.rebuilt), max(expected, len(run.rebuilt)))
            # the page's HTML is written from ``output``, and nothing reads the page's own
            # content after this (the search plugin indexed it before the theme rendered the
            # page): let it go now, not when the whole build is done
            page.content = None
            return output

    log = logging.getLogger("mkdocs")
    capture = _Capture()
    dirty_filter = _DropDirtyWarning()
    build_log = logging.getLogger("mkdocs.commands.build")
    saved = (log.level, log.propagate, list(log.handlers))
    for h in saved[2]:
        log.removeHandler(h)
    log.addHandler(capture)
    log.setLevel(logging.WARNING)
    log.propagate = False
    build_log.addFilter(dirty_filter)
    epoch = str(int(build_time.timestamp()))
    subset_dir = config_file.parent / DIRTY_DOCS
    try:
        with _env("SOURCE_DATE_EPOCH", epoch):
            # MkDocs keeps plugin objects between builds in one process (for `mkdocs serve`),
            # and Material's search plugin then merges a dirty build's index with the previous
            # build's: pages rebuilt twice in a row would be indexed twice. Every build here
            # starts with new plugins, as in a new process; the index is merged below.
            plugins_option = MkDocsConfig.plugins
            plugin_cache = (plugins_option.plugin_cache
                            if isinstance(plugins_option, config_options.Plugins) else {})
            plugin_cache.clear()
            try:
                config = load_config(str(config_file))
            except ConfigurationError as exc:
                raise ToolkitError(f"the site configuration is invalid: {exc}",
                                   path=config_file) from None
            config.plugins["toolkit-tracker"] = _Tracker()
            _theme_envs(config.theme, config_file.parent / JINJA_CACHE)
            if subset is not None:
                _link_docs(Path(config.docs_dir), subset_dir, subset.files)
                config.docs_dir = str(subset_dir)
            config.plugins.on_startup(command="build", dirty=dirty)
            try:
                mk_build.build(config, dirty=dirty)
            except Abort as exc:
                detail = "; ".join(capture.messages[:5]) or str(exc)
                raise ToolkitError(f"the MkDocs build failed: {detail}",
                                   hint=f"Run `mkdocs build --strict -f {config_file}` "
                                        "to see every message") from None
            finally:
                config.plugins.on_shutdown()
                # the plugins MkDocs keeps for its next build hold the pages and the search
                # entries: let them go (with the nav's cycles) before the index is written
                plugin_cache.clear()
                del config
                if run.shown >= _LARGE_SITE:
                    gc.collect()
    finally:
        if subset_dir.exists():
            shutil.rmtree(subset_dir)
        build_log.removeFilter(dirty_filter)
        log.removeHandler(capture)
        for h in saved[2]:
            log.addHandler(h)
        log.setLevel(saved[0])
        log.propagate = saved[1]
    run.warnings = capture.messages
    return run


def _dump(value: Any) -> bytes:
    """JSON as the search plugin writes it."""
    return json.dumps(value, separators=(",", ":"), default=str).encode("utf-8")


@dataclass
class _SearchIndex:
    """A search index as pieces: its config's JSON and, per page URL, the JSON of the page's
    entries (joined by commas) and their number. The index is ``{"config":…,"docs":[…]}``
    with the pages' pieces in build order: what the search plugin writes in a full build.

    ``search-map.json`` in the build folder records where each page's piece is in the index
    file (and the file's size and mtime), so a rebuild takes the unchanged pages' pieces as
    bytes, without parsing the whole index; without a valid map the index is parsed."""

    data: bytes
    config: bytes | None = None  # None: take the pieces from data and the map
    pages: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # url: start, end, n
    pieces: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path, map_path: Path) -> _SearchIndex | None:
        """The index at ``path``; None when it is not an index (cut short, edited)."""
        st = path.stat()
        data = path.read_bytes()
        mapped = _read_state(map_path)
        try:
            if mapped.get("index") == [st.st_size, st.st_mtime_ns]:
                pages = {str(u): (int(a), int(b), int(n)) for u, (a, b, n)
                         in mapped["pages"].items()}
                if all(0 <= a <= b <= len(data) for a, b, _ in pages.values()):
                    return cls(data, pages=pages)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
        try:
            return cls.parse(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    @classmethod
    def parse(cls, data: bytes | str, *, plugin: bool = False) -> _SearchIndex:
        """The index's pieces (``plugin``: the search plugin's file, see :meth:`_grouped`). Its
        entries are decoded one at a time (the index as the search plugin writes it, without
        spaces: holding all of them as objects at once would make the end of a large build its
        peak of memory); any other form of JSON is read whole."""
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        decoder = json.JSONDecoder()
        head, docs = '{"config":', ',"docs":['
        try:
            if not text.startswith(head):
                raise ValueError("not compact")
            config, at = decoder.raw_decode(text, len(head))
            if not text.startswith(docs, at):
                raise ValueError("not compact")
            at += len(docs)
            entries: Iterator[Any] = iter(())
            if not text.startswith("]}", at):
                entries = _each_entry(decoder, text, at)
            return cls._grouped(config, entries, plugin=plugin)
        except ValueError:
            index = json.loads(text)
            return cls._grouped(index["config"], iter(index["docs"]), plugin=plugin)

    @classmethod
    def take(cls, config: Any) -> _SearchIndex | None:
        """This build's index, from the entries the search plugin holds at the end of a
        build (MkDocs' ``config``), which it takes: the plugin then writes an index without
        entries, which :meth:`write` replaces. So the index is never one JSON text in memory
        and parsed again, and each entry is let go once it is in its page's piece. None when
        no plugin holds entries as Material's search plugin does (the file is read then)."""
        for plugin in config.plugins.values():
            index = getattr(plugin, "search_index", None)
            entries = getattr(index, "entries", None)
            settings = getattr(index, "config", None)
            if (index is not None and isinstance(entries, list) and isinstance(settings, dict)
                    and all(k in settings for k in _INDEX_CONFIG)):
                index.entries = []
                return cls._grouped({k: settings[k] for k in _INDEX_CONFIG}, _taken(entries),
                                    plugin=True)
        return None

    @classmethod
    def _grouped(cls, config: Any, entries: Iterator[Any], *, plugin: bool) -> _SearchIndex:
        """The entries' pieces by page; ``plugin``: the entries are the search plugin's, and
        each gets its text as :mod:`toolkit.search_text` makes it (else they are this
        class's already, from an index it wrote)."""
        grouped: dict[str, list[bytes]] = {}
        text = search_text.EntryText(str(config["separator"])) if plugin else None
        for e in entries:
            url = e["location"].split("#", 1)[0]
            group = grouped.setdefault(url, [])
            if group:
                # the search plugin gives each section its page's tags again; the page's
                # entry has them, and the browser shows a section under its page
                e.pop("tags", None)
            if text is not None:
                text.page(url)
                text.hold(str(e["title"]))
                for tag in e.get("tags") or ():
                    text.hold(str(tag), html=False)
                e["text"] = text(e["text"])
            group.append(_dump(e))
        return cls(b"", config=_dump(config),  # the pieces are all it needs
                   pieces={u: (b",".join(v), len(v)) for u, v in grouped.items()})

    def piece(self, url: str) -> tuple[bytes, int] | None:
        if self.config is not None:
            return self.pieces.get(url)
        at = self.pages.get(url)
        return (self.data[at[0]:at[1]], at[2]) if at else None

    @staticmethod
    def write(path: Path, map_path: Path, old: _SearchIndex | None,
              order: list[tuple[str, str]], rebuilt: set[str],
              new: _SearchIndex | None = None) -> int:
        """Make the index of the whole site from this build's (``new``, else the search
        plugin's file at ``path``; after a dirty build it holds the rebuilt pages only, the
        others come from ``old``) in build order, write it unless it is unchanged, and record
        its map. Returns the number of entries."""
        if new is None:  # read as text: the file's bytes are let go once decoded
            new = _SearchIndex.parse(path.read_text(encoding="utf-8"), plugin=True)
        parts = [b'{"config":', new.config or b"{}", b',"docs":[']
        pos = sum(len(p) for p in parts)
        pages: dict[str, tuple[int, int, int]] = {}
        for src, url in order:
            got = new.piece(url) if old is None or src in rebuilt else old.piece(url)
            if not got or not got[1]:
                continue
            if pages:
                parts.append(b",")
                pos += 1
            parts.append(got[0])
            pages[url] = (pos, pos + len(got[0]), got[1])
            pos += len(got[0])
        parts.append(b"]}")
        del new
        _write_parts_if_changed(path, parts)
        st = path.stat()
        _write_if_changed(map_path, json.dumps(
            {"index": [st.st_size, st.st_mtime_ns], "pages": pages}).encode("utf-8"))
        return sum(n for _, _, n in pages.values())


# the index's config: what Material's search plugin writes of its settings
_INDEX_CONFIG = ("lang", "separator", "pipeline", "fields")


def _taken(items: list[Any]) -> Iterator[Any]:
    """Each item of ``items``, its place in the list emptied as it is given."""
    for i, item in enumerate(items):
        items[i] = None
        yield item


def _each_entry(decoder: json.JSONDecoder, text: str, at: int) -> Iterator[Any]:
    """The entries of a compact JSON array from ``text[at:]`` (after its ``[``) to its end,
    ``]}``; ValueError when the text is not that."""
    while True:
        entry, at = decoder.raw_decode(text, at)
        yield entry
        if text.startswith(",", at):
            at += 1
        elif text.startswith("]}", at) and at + 2 == len(text):
            return
        else:
            raise ValueError("not compact")


# =========================================================================== serving

def make_server(site: Path, host: str = "127.0.0.1", port: int = 8000) -> Any:
    """A static file server for the built site (``toolkit serve``); call ``serve_forever``."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    if not (site / "index.html").is_file():
        raise ToolkitError(f"no site at {site}", hint="Run `toolkit build-site` first")

    root = os.path.realpath(site)

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def translate_path(self, path: str) -> str:
            # a link in the folder is followed only while it stays inside: any other file
            # is answered as missing (a link planted to /etc would serve it to every page)
            missing = os.path.join(root, MARKER, "outside")  # below a file: never found
            local = super().translate_path(path)
            try:
                real = os.path.realpath(local)
            except ValueError:  # a NUL in the path (%00): no file has that name
                return missing
            if real != root and not real.startswith(root + os.sep):
                return missing
            return local

    handler = functools.partial(Handler, directory=str(site))
    try:
        return ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise ToolkitError(f"cannot listen on {host}:{port}: {exc.strerror}",
                           hint="Choose another --port") from None


__all__ = [
    "BuildResult",
    "build_site",
    "html_title",
    "make_nav",
    "make_server",
    "md_block",
    "md_escape",
    "relative_link",
    "safe_url",
    "site_redaction_warning",
]
