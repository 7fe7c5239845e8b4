"""Entries by title without parsing a whole (very large) file: exactly the entries the full
parse would give."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from toolkit.ledger.codec import BOM, entry_form, title_key
from toolkit.records import LedgerEntry
from toolkit.sources.smith import parse_ledger_bytes


def title_matches(title: str | None, q: str, exact: bool) -> bool:
    key = title_key(title)
    return key == q if exact else q in key


_START_NL = re.compile(rb"\n(?:## |\*\*Title(?::\*\*|\*\*:))")
_TITLE_LINE_NL = re.compile(rb"\n((?:## |\*\*Title(?::\*\*|\*\*:))[^\n]*)")
_FENCE_NL = re.compile(rb"\n([ \t]{0,3})(`{3,}|~{3,})")
MAX_FAST_CANDIDATES = 64


def _fenced_spans(data: bytes) -> list[tuple[int, int]]:
    """Byte spans [opening line start, closing line end) of fenced code blocks, as the
    parser's first pass sees them (a fence runs to the end of the file if never closed)."""
    from toolkit.sources.smith import _FENCE

    hits = []
    first = _first_line_offset(data)
    m0 = _FENCE.match(data[first:first + 256])
    if m0 is not None:
        hits.append((first, m0.group(1)))
    hits.extend((m.start() + 1, m.group(2)) for m in _FENCE_NL.finditer(data))
    spans = []
    open_at: int | None = None
    fence = b""
    for off, marker in hits:
        if open_at is None:
            open_at, fence = off, marker
        elif marker[:1] == fence[:1] and len(marker) >= len(fence):
            nl = data.find(b"\n", off)
            spans.append((open_at, len(data) if nl < 0 else nl + 1))
            open_at = None
    if open_at is not None:
        spans.append((open_at, len(data)))
    return spans


# Second bytes of the UTF-8 forms of the 21 characters whose NFC + case fold contains ASCII
# (ß, İ, ŉ, ſ, ǰ, U+037E, U+1E96-1E9A, ẞ, U+1FEF, K, ﬀ-ﬆ): a file with none of these bytes holds
# none of those characters, and an ASCII query can then be searched in ASCII-lowered bytes.
_FOLD_TO_ASCII_BYTES = (b"\x9f", b"\xb0", b"\x89", b"\xbf", b"\xbe", b"\xba", b"\x84", b"\xac")
MAX_QUICK_OCCURRENCES = 2000


# An anchor holds no letter, nor the two ASCII characters that NFC also makes of another one
# (U+037E -> ";", U+1FEF -> "`"; case folding makes only letters): no other character becomes
# an anchor's bytes (tests/test_editor.py checks every code point).
_NOT_ANCHOR = re.compile(rb"[A-Za-z;`]+")
MIN_ANCHOR_BYTES = 3


def _anchor(needle: bytes) -> bytes | None:
    """The longest run of an ASCII query that holds no letter, ``;`` or backtick (at least
    :data:`MIN_ANCHOR_BYTES` long), or None. NFC and case folding make such bytes only of
    themselves, so every title whose folded text holds the query holds its anchor in its own
    bytes, whatever other characters it has."""
    best = max(_NOT_ANCHOR.split(needle), key=len)
    return best if len(best) >= MIN_ANCHOR_BYTES else None


def _quick_title_lines(data: bytes, q: str) -> list[int] | None:
    """Start offsets of the entry-start lines whose folded text contains ``q`` -- every line
    whose title can match -- or None when this shortcut cannot be exact (a non-ASCII query;
    without an anchor, a character that case-folds to ASCII somewhere in the file; too many
    occurrences). Fenced lines are included; the caller filters them.

    A query with a run of digits or punctuation (its anchor) is searched for by that run in
    the file's own bytes, and only the lines holding it are folded; otherwise in the whole
    file lowered, which is exact only for a file without such characters."""
    if not q.isascii():
        return None
    needle = q.encode("ascii")
    anchor = _anchor(needle)
    if anchor is not None:
        found = _entry_starts_holding(data, data, anchor, q)
        if found is not _TOO_MANY:
            return found
    if any(b in data for b in _FOLD_TO_ASCII_BYTES):
        return None
    return _entry_starts_holding(data, data.lower(), needle, None)


_TOO_MANY: list[int] = []  # too many occurrences to look at each (a marker, by identity)


def _entry_starts_holding(data: bytes, hay: bytes, needle: bytes, query: str | None
                          ) -> list[int] | None:
    """Entry-start lines of ``data`` where ``hay`` (``data`` or its lowered bytes) holds
    ``needle`` and, when ``query`` (a :func:`title_key`) is given, whose folded text holds
    ``query`` (an ASCII line is only lowered). None when over :data:`MAX_FAST_CANDIDATES`
    lines qualify; :data:`_TOO_MANY` when ``needle`` occurs over
    :data:`MAX_QUICK_OCCURRENCES` times."""
    ascii_query = query.encode("ascii") if query is not None and query.isascii() else None
    found: list[int] = []
    seen_line = -1
    count = 0
    first = _first_line_offset(data)
    hit = hay.find(needle)  # bytes.find: about twice as fast as re here
    while hit >= 0:
        count += 1
        if count > MAX_QUICK_OCCURRENCES:
            return _TOO_MANY
        start = hay.rfind(b"\n", 0, hit) + 1
        hit = hay.find(needle, hit + 1)
        if start == seen_line:
            continue
        seen_line = start
        if start == 0 and first:
            start = first  # the BOM is not part of line 1
        if entry_form(data[start:start + 16]) is None:
            continue
        if query is not None:
            nl = data.find(b"\n", start)
            line = data[start:len(data) if nl < 0 else nl]
            if line.isascii():
                if ascii_query is None or ascii_query not in line.lower():
                    continue
            elif query not in title_key(line.decode("utf-8", "replace")):
                continue
        found.append(start)
        if len(found) > MAX_FAST_CANDIDATES:
            return None
    return found


_BACKTICKS = re.compile(b"```")
_TILDES = re.compile(b"~~~")


def _may_have_fences(data: bytes, end: int | None = None) -> bool:
    """Could ``data[:end]`` hold a fence line? (re's literal search is faster than ``in`` here;
    inline `code` has single backticks, so most ledgers answer no without the per-line scan.)"""
    stop = len(data) if end is None else end
    return (_BACKTICKS.search(data, 0, stop) is not None
            or (data.find(b"~", 0, stop) >= 0 and _TILDES.search(data, 0, stop) is not None))


def _in_spans(pos: int, spans: list[tuple[int, int]]) -> bool:
    """Is the line starting at ``pos`` inside (or an opening/closing line of) a fence?"""
    import bisect

    i = bisect.bisect_right(spans, (pos, len(spans) + 2**62)) - 1
    return i >= 0 and spans[i][0] <= pos < spans[i][1]


def _first_line_offset(data: bytes) -> int:
    """Where the first line starts: after a BOM (the parser reads line 1 without it)."""
    return len(BOM) if data.startswith(BOM) else 0


def _line0_start(data: bytes) -> bool:
    first = _first_line_offset(data)
    return entry_form(data[first:first + 16]) is not None


def _next_start(data: bytes, pos: int, spans: list[tuple[int, int]]) -> int | None:
    """Offset of the first entry-start line beginning after ``pos`` (outside fences)."""
    while True:
        m = _START_NL.search(data, pos)
        if m is None:
            return None
        off = m.start() + 1
        if not spans or not _in_spans(off, spans):
            return off
        pos = off


def _prev_start(data: bytes, pos: int, spans: list[tuple[int, int]]) -> int | None:
    """Offset of the last entry-start line beginning before ``pos`` (outside fences)."""
    window = 4096
    hi = pos
    while True:
        lo = max(0, hi - window)
        # a match must end before hi; search a little wider so a "\n" at lo-1 is seen
        best = None
        for m in _START_NL.finditer(data, max(0, lo - 1), hi):
            off = m.start() + 1
            if off < pos and not (spans and _in_spans(off, spans)):
                best = off
        if best is not None:
            return best
        if lo == 0:
            first = _first_line_offset(data)
            return first if pos > first and _line0_start(data) else None
        hi = lo + 16  # overlap: a start marker may straddle the window edge
        window *= 2


def _entry_at(data: bytes, title_off: int, path: str, kind: str,
              spans: list[tuple[int, int]]) -> LedgerEntry:
    """The entry whose title line starts at ``title_off``, exactly as the parser builds it.

    The parser runs on a window from the previous entry's title (which decides whether the
    separator above this entry is claimed) to the end of the next entry's title line (where
    this entry's block ends); neither window edge can be inside a fence.
    """
    import dataclasses

    from toolkit.sources.smith import parse_ledger_bytes

    prev = _prev_start(data, title_off, spans)
    nxt = _next_start(data, title_off, spans)
    base = prev if prev is not None else _first_line_offset(data)
    stop = len(data) if nxt is None else (data.find(b"\n", nxt) + 1 or len(data))
    window = parse_ledger_bytes(data[base:stop], path, kind)
    title_line = data.count(b"\n", base, title_off) + 1  # within the window
    entry = next(e for e in window.entries if e.line == title_line)
    return dataclasses.replace(entry, start=entry.start + base, end=entry.end + base,
                               line=entry.line + data.count(b"\n", 0, base))


def _parsed_matches(data: bytes, path: Path | str, kind: str, q: str, exact: bool
                    ) -> list[LedgerEntry]:
    """The full parse's answer (the fallback when the shortcut cannot be exact)."""
    return [e for e in parse_ledger_bytes(data, path, kind).entries
            if title_matches(e.title, q, exact)]


def _matches_at(data: bytes, offsets: list[int], path: str, kind: str, q: str, exact: bool
                ) -> list[LedgerEntry]:
    """The entries whose title lines start at ``offsets`` (fenced lines skipped) and match.

    Only fences that open before the end of the last candidate's entry can matter (to a
    candidate, or to where its entry ends): when the bytes up to the end of the next
    start-looking line after the last candidate hold no fence marker, none of them is fenced
    and that line is the real next start, so the rest of the file is not scanned."""
    end: int | None = None
    if offsets:
        nxt = _START_NL.search(data, max(offsets))
        if nxt is not None:
            nl = data.find(b"\n", nxt.end())
            end = len(data) if nl < 0 else nl + 1
    spans = _fenced_spans(data) if _may_have_fences(data, end) else []
    out: list[LedgerEntry] = []
    for off in offsets:
        if spans and _in_spans(off, spans):
            continue
        entry = _entry_at(data, off, path, kind, spans)
        if title_matches(entry.title, q, exact):
            out.append(entry)
    return out


def locate_entries(data: bytes, path: Path | str, kind: str, q: str, *,
                   exact: bool = False) -> list[LedgerEntry]:
    """The entries of ``data`` whose title matches ``q`` (a :func:`title_key`), exactly as
    ``parse_ledger_bytes(data).entries`` would give them, without parsing the whole file.

    All title lines are gathered with one regular expression, case-folded together, and only
    the lines that can match are turned into entries by a local version of the parser's
    boundary rules (fenced code blocks are honoured). Falls back to the full parse when many
    lines match."""
    spath = str(Path(path))
    if not q:
        return _parsed_matches(data, path, kind, q, exact)
    quick = _quick_title_lines(data, q)
    if quick is not None:
        return _matches_at(data, quick, spath, kind, q, exact)
    titles = _TITLE_LINE_NL.findall(data)
    if _line0_start(data):
        first = data[_first_line_offset(data):].split(b"\n", 1)[0]
        titles.insert(0, first)
    blob = unicodedata.normalize("NFC", b"\n".join(titles).decode("utf-8", "replace")).casefold()
    hits: list[int] = []  # indexes into titles
    pos = blob.find(q)
    line_no = 0
    last = 0
    while pos >= 0:
        line_no += blob.count("\n", last, pos)
        last = pos
        hits.append(line_no)
        nl = blob.find("\n", pos)
        if nl < 0:
            break
        line_no += 1
        last = nl + 1
        pos = blob.find(q, nl + 1)
        if len(hits) > MAX_FAST_CANDIDATES:
            return _parsed_matches(data, path, kind, q, exact)
    if not hits:
        return []
    line0 = _line0_start(data)
    offsets: list[int] = []
    for idx in hits:
        line = titles[idx]
        if idx == 0 and line0:
            off = _first_line_offset(data)
        else:
            # the j-th occurrence of this exact line (j = identical lines before it), searched
            # from the nearer end of the file
            before = titles[1 if line0 else 0:idx].count(line)
            after = titles[idx + 1:].count(line)
            needle = b"\n" + line
            off = -1
            if idx < len(titles) // 2:
                pos = 0
                for _ in range(before + 1):
                    found = data.find(needle, pos)
                    if found < 0:
                        break
                    off = found + 1
                    pos = off
            else:
                end = len(data)
                for _ in range(after + 1):
                    found = data.rfind(needle, 0, end)
                    if found < 0:
                        break
                    off = found + 1
                    end = found + len(needle) - 1
            if off < 0:  # cannot happen: the line came from this data
                return _parsed_matches(data, path, kind, q, exact)
        offsets.append(off)
    return _matches_at(data, offsets, spath, kind, q, exact)


