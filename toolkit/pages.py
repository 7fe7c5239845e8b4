"""The building blocks of the site's page contexts: links, tables, fields and the page base.

``toolkit.reports`` and the feature page modules (``history_report``, ``goals_report``) build
their pages from these; ``reports`` imports the feature modules, never the other way round.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

# What a generated page path may hold: letters, digits, ".", "_", "-", "/", one #anchor.
INTERNAL_PATH = re.compile(r"^[A-Za-z0-9._/-]+(#[A-Za-z0-9_-]+)?$")

# The build folder's table HTML by digest, in shards (``<shard>.json``, see tables_file) named by
# the digest's first two digits: toolkit.site writes them, toolkit/site_hooks.py reads them.
TABLES = "tables"
# front matter of a page indexed for search as one entry (toolkit/site_hooks.py)
ONE_SEARCH_ENTRY = "search_one_entry"


def table_shard(digest: str) -> str:
    """The shard of :data:`TABLES` that holds the table of ``digest``."""
    return digest[:2]


# A tables file is a JSON object written a line per table, in digest order:
#   {
#   "<digest>":"<its HTML as a JSON string>",
#   ...
#   }
# (JSON escapes line breaks in a string), so a reader finds each table by its line, with no
# need to parse the file, and any JSON reader reads it whole.
_TABLE_LINE = re.compile(rb'"[0-9a-f]{20}":".*"')


def tables_file(tables: dict[str, str]) -> bytes:
    """The bytes of a tables file holding ``tables`` (HTML by digest)."""
    lines = (f"{json.dumps(d)}:{json.dumps(tables[d], ensure_ascii=False)}"
             for d in sorted(tables))
    return ("{\n" + "".join(line + ",\n" for line in lines)).removesuffix(",\n").encode(
        "utf-8") + (b"\n}\n" if tables else b"}\n")


def table_places(data: bytes) -> Iterator[tuple[str, int, int]]:
    """(digest, offset, length in bytes) of each table's JSON string in a tables file's
    bytes; ValueError where the file is not in that form."""
    lines = data.split(b"\n")
    if len(lines) < 3 or lines[0] != b"{" or lines[-2:] != [b"}", b""]:
        raise ValueError("not a tables file")
    at = 2
    for i, line in enumerate(lines[1:-2], start=1):
        table = line
        if i < len(lines) - 3:  # every table's line but the last ends with a comma
            table = line.removesuffix(b",")
            if table is line:
                raise ValueError(f"no ',' after the table at byte {at}")
        if not _TABLE_LINE.fullmatch(table):
            raise ValueError(f"no table at byte {at}")
        yield table[1:21].decode("ascii"), at + 23, len(table) - 23
        at += len(line) + 1


CONFIDENCE_COLORS = {"high": "#2e7d32", "medium": "#9ccc65", "low": "#e0e0e0"}

_C = TypeVar("_C", bound=type)


def plain_pickle(cls: _C) -> _C:
    """A frozen dataclass pickled as its class and its fields' values, in order (what its
    constructor takes): the digest of a page's context (``toolkit.site``) pickles thousands
    of these per build (a listing's links), and the default way costs about twice as much."""
    names = [f.name for f in fields(cls)]
    if any(not f.init or f.kw_only for f in fields(cls)):
        raise TypeError(f"{cls.__name__}: every field must be a positional argument")
    get = operator.attrgetter(*names)

    def __reduce__(self: Any) -> tuple[Any, tuple[Any, ...]]:
        values = get(self)
        return cls, (values,) if len(names) == 1 else values

    def __init_subclass__(sub: type, **kwargs: Any) -> None:
        # a subclass would pickle as ``cls``, its own fields left out of the page's digest
        raise TypeError(f"{sub.__name__}: {cls.__name__} pickles as its own fields only "
                        "(plain_pickle); make a class of its own")

    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]
    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    return cls


@plain_pickle
@dataclass(frozen=True)
class Ref:
    """A link to a page of the site: ``text`` is shown (escaped), ``path`` is the target's
    Markdown path relative to the docs folder, with an optional ``#anchor``."""

    text: str
    path: str


@plain_pickle
@dataclass(frozen=True)
class Url:
    """A value that is a web link when it is a safe http(s) URL, text otherwise."""

    url: str


@plain_pickle
@dataclass(frozen=True)
class Table:
    """A table whose cells are plain values (escaped when rendered) or :class:`Ref` links.
    ``key``: the column that decides the rows' order (or sums them up), when it is not the
    first; the site keeps it in view while a wide table scrolls, as it does the first."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    empty: str = "Nothing to show."
    key: str | None = None


Cell = Any  # str | int | float | None | Ref


@dataclass(kw_only=True)
class Page:
    """What every page has. ``nav`` puts the page in the navigation as (section, label) or
    (label,); per-entry pages have none (reached from index pages and search)."""

    template: ClassVar[str] = ""
    path: str
    title: str
    nav: tuple[str, ...] | None = None
    search: bool = True  # False: left out of the search index (long listings)
    # False: one search entry for the whole page, not one per section (short pages of one
    # thing, such as an entry: a result links to the page, whose sections fit in a screen)
    search_sections: ClassVar[bool] = True
    tags: tuple[str, ...] = ()
    intro: str = ""  # one line under the title (trusted text written by us)
    wide: bool = False  # wide tables: the table of contents sidebar is hidden


@plain_pickle
@dataclass(frozen=True)
class RowRef:
    """A row of the store that a :class:`Deferred` page shows whole, fetched only when the
    page is made: ``fetch(store, keys)`` (a module-level function) returns the value of each
    of ``keys`` (the whole row, or what the page shows of its rows), and ``digest`` is the
    digest of that value's content, computed in the database by the query that found the key.
    So the row stands in a page's arguments by its key and digest: a rebuild decides that an
    entry's page is unchanged without reading the entry's text."""

    fetch: Callable[[Any, list[Any]], dict[Any, Any]]
    key: Any
    digest: str


@dataclass(frozen=True)
class Deferred:
    """A page made only when it must be rendered: ``make(*args)`` builds it. ``make`` is a
    module-level function that reads nothing but ``args`` (plain values: rows, strings,
    :class:`Ref`, :class:`Table`, :class:`RowRef` for a row fetched when the page is made),
    so the digest of ``(make, args)`` stands for the page's context, and a rebuild whose
    render cache knows that digest skips building the page at all
    (``toolkit.site._RenderCache``). For the many pages of one kind (one per entry)."""

    path: str
    make: Callable[..., Page]
    args: tuple[Any, ...]
    nav: None = None  # never in the navigation (see :class:`Page`)

    def page(self, rows: dict[Any, dict[Any, Any]] | None = None) -> Page:
        """The page, its :class:`RowRef` arguments replaced by their rows (``rows``: by
        fetch function, then key; see :func:`make_pages`)."""
        args = self.args
        if any(isinstance(a, RowRef) for a in args):
            try:
                args = tuple((rows or {})[a.fetch][a.key] if isinstance(a, RowRef) else a
                             for a in args)
            except KeyError:
                raise ValueError(f"deferred page {self.path}: its row was not fetched (a bug)"
                                 ) from None
        page = self.make(*args)
        if page.path != self.path or page.nav is not None:
            raise ValueError(f"deferred page {self.path} made {page.path} (a bug)")
        return page


def fetch_rows(store: Any, pages: Iterable[Page | Deferred]) -> dict[Any, dict[Any, Any]]:
    """The rows the deferred ``pages`` show (their :class:`RowRef` arguments), for
    :meth:`Deferred.page`: one query per kind of row."""
    wanted: dict[Any, set[Any]] = {}
    for p in pages:
        if isinstance(p, Deferred):
            for a in p.args:
                if isinstance(a, RowRef):
                    wanted.setdefault(a.fetch, set()).add(a.key)
    return {fetch: fetch(store, sorted(keys)) for fetch, keys in wanted.items()}


def make_pages(store: Any, pages: Sequence[Page | Deferred]) -> list[Page]:
    """The pages, the deferred ones made now (their rows fetched together)."""
    rows = fetch_rows(store, pages)
    return [p.page(rows) if isinstance(p, Deferred) else p for p in pages]


@plain_pickle
@dataclass(frozen=True)
class Field:
    label: str
    value: Cell


def ledger_entry_path(entry_id: str) -> str:
    return f"ledger/{entry_id}.md"


def task_path(slug: str) -> str:
    return f"audit/tasks/{slug}.md"


def relative_link(from_path: str, target: str) -> str:
    """Relative link from one docs file to another (both docs-relative POSIX paths)."""
    if not INTERNAL_PATH.match(target) or ".." in target.split("/"):
        raise ValueError(f"not a generated page path: {target!r}")
    path, _, anchor = target.partition("#")
    src = from_path.split("/")[:-1]
    dst = path.split("/")
    i = 0
    while i < len(src) and i < len(dst) - 1 and src[i] == dst[i]:
        i += 1
    rel = "../" * (len(src) - i) + "/".join(dst[i:])
    return rel + ("#" + anchor if anchor else "")
