"""Deterministic, ASCII-only, file-system-safe slugs for page and entry ids (FAULTS A11, A12).

A slug never contains a path separator or dot-segment, never names a reserved Windows device,
and stays short. When the title had characters that ASCII folding dropped (CJK, emoji, bidi
controls), a short hash of the title is appended so different titles stay different.

A slug is made from the *redacted* title (``toolkit.redact``, home paths folded whatever the
machine's home is), redacted again once folded to ASCII if that changed it: slugs become file
names, URLs and anchors, and handoff reports and GitHub issues link to them, so a secret in a
title or task name must not survive in its slug, in any case (FAULTS H1). The site and the
links to it use this one function, so links still resolve.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)),
             *(f"lpt{i}" for i in range(10)), "index", "assets", "search"}
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
MAX_LEN = 60
# The modules a title's slug is made by (cached slugs made by other code are made again).
SLUG_MODULES = (__name__, "toolkit.redact")


@functools.lru_cache(maxsize=65536)
def slugify(title: str | None, *, fallback: str = "untitled") -> str:
    """A title's slug (cached: the same few names are slugged again and again)."""
    return _slug(title, fallback)


def _slug(title: str | None, fallback: str) -> str:
    # imported here: compiling the redactor's patterns costs a few hundredths of a second,
    # which a command that makes no slug (its entry ids kept with the parses it reads) skips
    from toolkit.redact import redact

    text = redact(title, home="", fold=True) if title else ""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    if folded != text:
        # folding to ASCII can join what the redactor saw apart (a fullwidth "ghp" becomes
        # "ghp", a combining accent or a CJK character inside a token is dropped): what
        # the slug is made of is redacted as it now reads
        folded = redact(folded, home="", fold=True)
    slug = _NON_ALNUM.sub("-", folded.lower()).strip("-")[:MAX_LEN].strip("-")
    lossy = not text.isascii() and any(ord(ch) > 127 and not unicodedata.combining(ch)
                                       for ch in unicodedata.normalize("NFKD", text))
    if not slug:
        slug = fallback
    if lossy or slug in _RESERVED:
        slug = f"{slug}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:6]}"
    return slug


def unique_slugs(titles: Sequence[str | None], *, fallback: str = "untitled",
                 cache: Path | None = None, slot: str = "slugs") -> list[str]:
    """Slugs for titles in order, made unique with -2, -3... in order of appearance.

    ``cache``: a :mod:`toolkit.parsecache` folder where the slugs of the same titles (by this
    code) are kept in ``slot``: slugs of 50,000 titles take a second to make, a moment to load."""
    if cache is None:
        return _unique_slugs(titles, fallback)
    import marshal

    from toolkit import parsecache

    key = (parsecache.code_version(*SLUG_MODULES), fallback,
           parsecache.digest(marshal.dumps(list(titles))))
    saved = parsecache.load(cache, slot, key)
    if isinstance(saved, list) and len(saved) == len(titles):
        return saved
    out = _unique_slugs(titles, fallback)
    parsecache.save(cache, slot, key, out)
    return out


def file_entry_ids(file: str, titles: Sequence[str | None], *,
                   cache: Path | None = None) -> list[str]:
    """The ids ``<file>/<slug>`` of one ledger file's entries (their titles in file order):
    ``ledger_entries.entry_id`` in the store."""
    return [f"{file}/{s}" for s in file_entry_slugs(file, titles, cache=cache)]


def file_entry_slugs(file: str, titles: Sequence[str | None], *,
                     cache: Path | None = None) -> list[str]:
    """The slugs of :func:`file_entry_ids` without ``<file>/``: for a reader that makes the
    ids a few at a time (the loader: at 50,000 entries, 6 MB of ids not held at once)."""
    return unique_slugs(titles, cache=cache, slot=f"{file}.slugs")


def _unique_slugs(titles: Sequence[str | None], fallback: str) -> list[str]:
    # Each title of a list is slugged once here: not through slugify's cache, which would
    # keep every title and slug of a big ledger alive (about 20 MB at 50,000 entries) for
    # lookups that never come (the cache serves the few names slugged again and again).
    bases = [_slug(t, fallback) for t in titles]
    used: set[str] = set()
    out = []
    for base in bases:
        slug, n = base, 1
        while slug in used:
            n += 1
            slug = f"{base}-{n}"
        used.add(slug)
        out.append(slug)
    return out
