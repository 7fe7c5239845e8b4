"""Deterministic, ASCII-only, file-system-safe slugs for page and entry ids (FAULTS A11, A12).

A slug never contains a path separator or dot-segment, never names a reserved Windows device,
and stays short. When the title had characters that ASCII folding dropped (CJK, emoji, bidi
controls), a short hash of the exact title is appended so different titles stay different.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)),
             *(f"lpt{i}" for i in range(10)), "index", "assets", "search"}
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
MAX_LEN = 60


def slugify(title: str | None, *, fallback: str = "untitled") -> str:
    text = title or ""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = _NON_ALNUM.sub("-", folded.lower()).strip("-")[:MAX_LEN].strip("-")
    lossy = any(ord(ch) > 127 and not unicodedata.combining(ch)
                for ch in unicodedata.normalize("NFKD", text))
    if not slug:
        slug = fallback
    if lossy or slug in _RESERVED:
        slug = f"{slug}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:6]}"
    return slug


def unique_slugs(titles: Sequence[str | None], *, fallback: str = "untitled") -> list[str]:
    """Slugs for titles in order, made unique with -2, -3... in order of appearance."""
    bases = [slugify(t, fallback=fallback) for t in titles]
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
