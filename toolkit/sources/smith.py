"""Read-only reader of a Smith vault: ledger files (both entry forms), meta files, config,
reconcile log and session logs.

The ledger parser works on bytes so every entry knows its exact byte range: the editor replaces
or removes that range and nothing else, which is what keeps untouched entries, headers, CRLF
line endings and a BOM byte-identical.

Entry boundaries (FORMATS.md §1.2), outside fenced code blocks:

* Form A starts at a ``## Title`` line and runs to its closing ``---`` line (kept in the
  entry, with the blank lines after it), or to the next entry.
* Form B starts at a ``**Title:**`` line; the ``---`` separator just above it (only blank
  lines between) belongs to it, unless the previous Form A entry already closed with it.
  It runs to the next entry's start or the end of the file.

A file whose entries are all in the writers' standard layout is read by a fast path (one
regex match per entry) that gives the same answer as the full parser; see ``_fast_parse``.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import marshal
import operator
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, overload

from toolkit.errors import DataError, TooLargeError
from toolkit.ledger.codec import BOM, dominant_newline, entry_row, parse_entry
from toolkit.records import (
    LEDGER_FILES,
    LedgerEntry,
    Problem,
    Session,
    SessionEvent,
    acyclic_build,
    fits,
    ledger_entry,
)
from toolkit.source import session_files
from toolkit.textio import (
    check_utf8,
    decode_utf8,
    load_json,
    load_yaml,
    read_bytes,
    value_kind,
    within,
)

_SEP = re.compile(rb"^[ \t]*-{3,}[ \t]*\r?$")
_FENCE = re.compile(rb"^[ \t]{0,3}(`{3,}|~{3,})")
# The start of every line that can matter in pass 1 (see parse_ledger_bytes).
_CANDIDATE = re.compile(rb"---|\*\*Title|## |[ \t`~]")
_CANDIDATE_NL = re.compile(rb"\n(?:---|\*\*Title|## |[ \t`~])")


# An entry's record is its row (``ledger_entry``'s tuple) without its first fields: the file's
# path and kind, the same for every entry of the file, and its title, which the parse's list of
# titles holds. A big ledger's parse does not hold them once per entry as well (at 50,000
# entries, its records are a quarter smaller: about 6 MB less beside the file's bytes).
_SHARED = 3


def _record(row: tuple[Any, ...]) -> bytes:
    """An entry's record (see ``_SHARED``) from its row."""
    return marshal.dumps(row[_SHARED:], 4)


class _Rows:
    """A cached parse's entries, not yet built: every title and title line, and each entry's
    other fields as its own small marshal record (loading 50,000 of those is a list of bytes,
    not 850,000 objects; a record is unpacked when its entry is wanted). A load's parse keeps
    its records in the parse cache's file instead (``spill``), read back as they are wanted."""

    __slots__ = ("kind", "lines", "path", "records", "spill", "titles", "untitled")

    def __init__(self, path: str, kind: str, titles: list[str | None], lines: list[int],
                 records: list[bytes], spill: _Spill | None = None) -> None:
        self.path, self.kind = path, kind
        self.titles, self.lines, self.records = titles, lines, records
        self.spill = spill
        self.untitled = False  # the titles let go (LedgerFile.take_titles): read back too

    def want(self, at: int, stop: int) -> None:
        """Records ``[at, stop)`` in ``records`` (read back from the cache file if spilled)."""
        if self.spill is not None:
            self.spill.fill(self.records, at, stop, self.titles if self.untitled else None)

    def row(self, i: int) -> tuple[Any, ...]:
        self.want(i, i + 1)
        return (self.path, self.kind, self.titles[i], *marshal.loads(self.records[i]))

    def rows(self) -> list[tuple[Any, ...]]:
        self.want(0, len(self.records))
        path, kind = self.path, self.kind
        return [(path, kind, title, *marshal.loads(record))
                for title, record in zip(self.titles, self.records, strict=True)]


# A load's parse writes its records to the parse cache this many at a time (see _Spill): about
# a MB of them, two of the ledger loader's batches of rows (toolkit.store.ROW_BATCH / 2).
_CHUNK = 2000


class _Spill:
    """A load's compact parse written to the parse cache as it is made: each ``_CHUNK``
    records are written out and let go, and read back from that file, in order, as the loader
    takes them. At 50,000 entries the records (about 21 MB) are then never all held, neither
    beside the file's bytes nor while the rows go into the store. The cache file holds each
    chunk as (titles, title lines, records), then the parse's (header end, newline, BOM,
    notes); :func:`_cached_parse` reads it whole. A write that fails (a full disk) only means
    the records stay in memory, as without a cache."""

    __slots__ = ("parts", "start", "writer")

    def __init__(self, writer: Any) -> None:
        self.writer: Any = writer  # a parsecache.Writer, None once the records are in memory
        self.start = writer.mark()
        self.parts: list[tuple[int, int, int, int]] = []  # (first, count, at, size) per chunk

    @classmethod
    def open(cls, cache: Path, kind: str, key: tuple[str, ...]) -> _Spill | None:
        from toolkit import parsecache

        writer = parsecache.stream(cache, kind, key)
        return cls(writer) if writer is not None else None

    def restart(self) -> None:
        """Drop what was written (the fast parse gave up: the full parse starts again)."""
        if self.writer is not None:
            try:
                self.writer.rewind(self.start)
            except OSError:
                self.close()
        self.parts = []

    def flush(self, titles: list[str | None], lines: list[int],
              records: list[bytes]) -> list[bytes]:
        """Write ``records``, the last of ``titles``' entries: the records to go on with
        (none when written; when writing fails, every record so far, read back)."""
        if self.writer is None:
            return records
        first = len(titles) - len(records)
        try:
            where = self.writer.write((titles[first:], lines[first:], records))
        except OSError:
            return self._recall(records)
        self.parts.append((first, len(records), *where))
        return []

    def _recall(self, records: list[bytes]) -> list[bytes]:
        """Every record written so far and then ``records``; writing stops."""
        out = [b""] * (self.parts[-1][0] + self.parts[-1][1] if self.parts else 0)
        try:
            self.fill(out, 0, len(out))
        finally:
            self.close()
        self.parts = []
        return out + records

    def finish(self, titles: list[str | None], lines: list[int],
               records: list[bytes]) -> list[bytes]:
        """The parse's last records written: the records list of its rows (each still in the
        file is b"" until :meth:`fill` reads it back)."""
        if records:
            records = self.flush(titles, lines, records)
        if self.writer is None:
            return records
        return [b""] * len(titles)

    def commit(self, tail: tuple[Any, ...], records: list[bytes]) -> bool:
        """Write the parse's tail and put the cache file in place. False when that failed:
        ``records`` then holds every record, read back, and nothing is spilled any more."""
        if self.writer is None:
            return False
        try:
            self.writer.write(tail)
            self.writer.commit()
            return True
        except OSError:
            records[:] = self._recall([])
            return False

    def fill(self, records: list[bytes], at: int, stop: int,
             titles: list[str | None] | None = None) -> None:
        """Records ``[at, stop)`` read back into ``records``, and their ``titles`` when given
        (a chunk is read once: the loader takes each record once, in order)."""
        parts = self.parts
        i = bisect.bisect_right(parts, (at, 1 << 62)) - 1
        while 0 <= i < len(parts) and parts[i][0] < stop:
            first, count, where, size = parts[i]
            if where >= 0:
                assert self.writer is not None
                chunk = self.writer.read(where, size)
                records[first:first + count] = chunk[2]
                if titles is not None:
                    titles[first:first + count] = chunk[0]
                parts[i] = (first, count, -1, 0)
            i += 1
        if parts and parts[-1][2] < 0 and all(part[2] < 0 for part in parts):
            self.close()  # every record read back: the file is let go

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class _Entries:
    """``LedgerFile.entries``: a list of entries, kept as rows until first read when they come
    from the parse cache -- a command that looks at a few entries of a big ledger (show,
    search) reads their titles and lines from the rows and builds only those entries."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _Entries: ...
    @overload
    def __get__(self, obj: LedgerFile, objtype: type | None = None) -> list[LedgerEntry]: ...

    def __get__(self, obj: LedgerFile | None, objtype: type | None = None
                ) -> list[LedgerEntry] | _Entries:
        if obj is None:
            raise AttributeError(self.slot)  # no default: the field is required
        value = obj.__dict__[self.slot]
        if isinstance(value, _Rows):
            with acyclic_build():
                value = obj.__dict__[self.slot] = list(map(ledger_entry, value.rows()))
        return value

    def __set__(self, obj: LedgerFile, value: list[LedgerEntry] | _Rows) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class LedgerFile:
    """One parsed ledger file: its bytes, its entries with byte ranges, and its conventions."""

    path: Path
    kind: str
    data: bytes
    entries: _Entries = _Entries()  # list[LedgerEntry] (built on first read, see _Entries)
    # (defaults only because the descriptor above looks like one to a type checker)
    header_end: int = 0  # bytes [0, header_end) are the header (title, description, comments)
    newline: bytes = b"\n"  # b"\r\n" or b"\n" (the file's dominant line ending)
    bom: bool = False
    problems: list[Problem] = field(default_factory=list)
    exists: bool = True
    error: str | None = None  # set when the file could not be read at all (junk, too big)

    @property
    def name(self) -> str:
        return f"{self.kind}.md"

    def _rows(self) -> _Rows | None:
        value = self.__dict__["_entries"]
        return value if isinstance(value, _Rows) else None

    def entry_count(self) -> int:
        """How many entries (without building them)."""
        rows = self._rows()
        return len(rows.records) if rows is not None else len(self.entries)

    def column(self, name: str) -> list[Any]:
        """One field of every entry, in file order (``title``, ``line``...); the titles and
        title lines of a cached parse without building the entries."""
        rows = self._rows()
        if rows is not None and name in ("title", "line"):
            if name == "title" and rows.untitled:
                rows.want(0, len(rows.titles))
            return list(rows.titles if name == "title" else rows.lines)
        return [getattr(e, name) for e in self.entries]

    def take_titles(self) -> list[str | None]:
        """Every entry's title, in file order, for a reader that then takes the entries
        (:meth:`take`): a parse spilled to the cache lets go of its own list of them (each
        title is read back with its entry; at 50,000 entries about 5 MB less while the rows
        are stored)."""
        rows = self._rows()
        if rows is None or rows.spill is None or rows.spill.writer is None:
            return self.column("title")
        titles, rows.titles = rows.titles, [None] * len(rows.titles)
        rows.untitled = True
        return titles

    def entry(self, i: int) -> LedgerEntry:
        """Entry ``i`` (its index in file order), built alone when the others are not."""
        rows = self._rows()
        return self.entries[i] if rows is None else ledger_entry(rows.row(i))

    def take(self, at: int, stop: int) -> list[LedgerEntry]:
        """Entries ``[at, stop)`` for a reader that wants each once, in order (the loader):
        a compact parse's records are let go as their entries are built, so a big ledger is
        not held as records while its rows go into the store. Read nothing twice after it."""
        rows = self._rows()
        if rows is None:
            return self.entries[at:stop]
        rows.want(at, stop)  # (once for the batch, not per entry)
        path, kind, titles, records = rows.path, rows.kind, rows.titles, rows.records
        built = [ledger_entry((path, kind, titles[i], *marshal.loads(records[i])))
                 for i in range(at, min(stop, len(records)))]
        rows.records[at:at + len(built)] = [b""] * len(built)
        rows.titles[at:at + len(built)] = [None] * len(built)
        return built


def _val(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").strip()


def parse_ledger_bytes(data: bytes, path: Path | str, kind: str, *,
                       compact: bool = False, spill: _Spill | None = None) -> LedgerFile:
    """Parse a ledger file's bytes. Never raises for content problems: they become notes.

    ``compact``: keep each entry as its small marshal record as soon as it is parsed (the
    form of a cached parse: see :class:`_Rows`), so a big ledger is never held as objects
    (a loader that reads the entries a batch at a time with :meth:`LedgerFile.entry`).
    ``spill`` (compact only): write the records to the parse cache as they are made, and read
    them back from there (see :class:`_Spill`)."""
    with acyclic_build():  # entries are plain values
        return _parse_ledger_bytes(data, Path(path), kind, compact, spill)


# The fast path: a file whose every entry is a standard one, as Smith's writers produce it
# (FORMATS.md 1.2), is read with one regex match per entry that yields its fields, its title's
# place and its byte range at once. Anything else -- CRLF, a BOM, no final newline, a field
# missing, repeated or out of order, another heading, a line that pass 1 or a field split
# would look at twice (a fence, an indent, a separator, a title or field line inside a
# section) -- makes the whole file go to the full parser below. Both give the same answer
# (tests/test_ledger_codec.py compares them on random files of both forms).
_FAST_HEAD = re.compile(rb"(?:(?:# |[A-Za-z<])[^\n]*\n|\n)*")  # title, prose, comments
# The lines of a section after its first: none that could start an entry, a fence or a field.
_MORE_B = rb"(?:(?![-*+][ \t]+\*\*|---|\*\*|[#`~ \t])[^\n]*\n)*"
_MORE_A = rb"(?:(?!---|\*\*|[#`~ \t])[^\n]*\n)*"
_FAST_B = re.compile(
    rb"---\n\n*\*\*Title:\*\*([^\n]*)\n\*\*Date:\*\*([^\n]*)\n"
    rb"\*\*Category:\*\*([^\n]*)\n\*\*Confidence:\*\*([^\n]*)\n"
    rb"\*\*Source reflections:\*\*([^\n]*)\n\n*"
    rb"\*\*Context:\*\*([^\n]*\n" + _MORE_B + rb")\*\*Pattern:\*\*([^\n]*\n" + _MORE_B
    + rb")\*\*Evidence:\*\*([^\n]*\n" + _MORE_B + rb")\*\*Related:\*\*([^\n]*\n" + _MORE_B
    + rb")")
_FAST_A = re.compile(
    rb"(?:---\n\n*)?## ([^\n]*)\n\n*- \*\*Date:\*\*([^\n]*)\n- \*\*Category:\*\*([^\n]*)\n"
    rb"- \*\*Confidence:\*\*([^\n]*)\n- \*\*Observations:\*\*([^\n]*)\n"
    rb"- \*\*Source reflections:\*\*([^\n]*)\n\n*"
    rb"### Context\n(" + _MORE_A + rb")### Pattern\n(" + _MORE_A + rb")### Evidence\n("
    + _MORE_A + rb")### Related\n(" + _MORE_A + rb")---\n\n*")


def _fast_parse(data: bytes, path: Path, kind: str, compact: bool,
                spill: _Spill | None = None) -> LedgerFile | None:
    """The parse of a file of standard entries only (see above), or None for any other."""
    if data[-1:] not in (b"\n", b"") or b"\r" in data or b"\0" in data or data.startswith(BOM):
        return None
    head = _FAST_HEAD.match(data)
    assert head is not None  # it matches the empty string
    pos = header_end = head.end()
    size = len(data)
    spath = str(path)
    count = data.count
    match_b, match_a = _FAST_B.match, _FAST_A.match
    # the groups of a match decoded at once (no NUL in the file: each group is one part;
    # decoding them apart would give the same text, as each starts and ends at ASCII)
    join, strip = b"\0".join, str.strip
    entries: list[LedgerEntry] = []
    titles: list[str | None] = []
    title_lines: list[int] = []
    records: list[bytes] = []  # compact: each entry's record as soon as it is read
    problems: list[Problem] = []
    line = at = 0  # the index of the line that starts at ``at``
    while pos < size:
        m = match_b(data, pos)
        if m is not None:
            t, d, c, k, s, cx, pt, ev, rl = map(strip, join(m.groups()).decode(
                "utf-8", "replace").split("\0"))
            o = None
            form, title_at = "B", m.start(1) - 10  # len(b"**Title:**")
        else:
            m = match_a(data, pos)
            if m is None:
                return None
            t, d, c, k, o, s, cx, pt, ev, rl = map(strip, join(m.groups()).decode(
                "utf-8", "replace").split("\0"))
            form, title_at = "A", m.start(1) - 3  # len(b"## ")
        line += count(b"\n", at, title_at)
        at = title_at
        end = m.end()
        row = entry_row(spath, kind, t, d, c, k, o, s, cx or None, pt or None, ev or None,
                        rl or None, form, line + 1, pos, end)
        if compact:
            titles.append(row[2])
            title_lines.append(line + 1)
            records.append(_record(row))
            if spill is not None and len(records) >= _CHUNK:
                records = spill.flush(titles, title_lines, records)
        else:
            entries.append(ledger_entry(row))
        for note in row[-1]:
            problems.append(Problem("smith", spath, line + 1, note))
        pos = end
    return LedgerFile(path=path, kind=kind, data=data,
                      entries=_compact_rows(spath, kind, titles, title_lines, records, spill)
                      if compact else entries,
                      header_end=header_end if titles or entries else size, newline=b"\n",
                      bom=False, problems=problems)


def _compact_rows(spath: str, kind: str, titles: list[str | None], lines: list[int],
                  records: list[bytes], spill: _Spill | None) -> _Rows:
    if spill is None:
        return _Rows(spath, kind, titles, lines, records)
    records = spill.finish(titles, lines, records)
    return _Rows(spath, kind, titles, lines, records,
                 spill if spill.writer is not None else None)


def _parse_ledger_bytes(data: bytes, path: Path, kind: str, compact: bool,
                        spill: _Spill | None) -> LedgerFile:
    spill = spill if compact else None
    fast = _fast_parse(data, path, kind, compact, spill)
    if fast is not None:
        return fast
    if spill is not None:
        spill.restart()  # what the fast parse wrote before it gave up
    return _full_parse(data, path, kind, compact, spill)


def _full_parse(data: bytes, path: Path, kind: str, compact: bool,
                spill: _Spill | None = None) -> LedgerFile:
    bom = data.startswith(BOM)
    newline = dominant_newline(data)

    # Lines are numbered from 0 and cut at "\n" (a "\r" stays in its line); the last one needs
    # no "\n". A BOM belongs to the header: the first line is read without it, so an entry
    # (or fence) on the first line is still seen. The file is never cut into lines (a list of
    # a big ledger's lines is twice its size): positions are byte offsets into ``data``, known
    # for the lines the boundaries need -- the candidates below, and the few lines around an
    # entry's title and end that the walks step over.
    begin = len(BOM) if bom else 0
    size = len(data)
    ends_nl = data.endswith(b"\n")
    nlines = 0 if size <= begin else data.count(b"\n", begin) + (0 if ends_nl else 1)
    find = data.find
    offsets: dict[int, int] = {0: begin, nlines: size}  # line index -> where it starts

    # Pass 1: entry starts and separators, outside fences.
    starts: list[tuple[int, str, int]] = []  # (line index, form, the candidate above it)
    seps: list[int] = []  # line indexes of --- separators
    fence: bytes | None = None
    # Only lines that start like a separator, a title or a fence (or with a space or tab) can
    # matter here: one regex scan finds them, far faster than a look at every line.
    # The scan looks for the newline before such a line (a literal the regex engine finds
    # fast); the first line has none. A candidate's line index is the count of newlines
    # before it, counted from the previous candidate.
    found = [0] if nlines and _CANDIDATE.match(data, begin) else []
    above = -1  # the candidate line before the one being looked at
    count = data.count
    at, index = begin, 0
    for m in _CANDIDATE_NL.finditer(data, begin):
        pos = m.start() + 1
        index += count(b"\n", at, pos)
        at = pos
        offsets[index] = pos
        found.append(index)
    for i in found:
        prev, above = above, i
        pos = offsets[i]
        eol = find(b"\n", pos)
        line = data[pos: size if eol < 0 else eol]
        c = line[0]
        if c == 45:  # "-": a separator
            if fence is None and _SEP.match(line):
                seps.append(i)
            continue
        if c == 42:  # "*"
            if fence is None and (line.startswith(b"**Title:**")
                                  or line.startswith(b"**Title**:")):
                starts.append((i, "B", prev))
            continue
        if c == 35:  # "#"
            if fence is None:
                starts.append((i, "A", prev))
            continue
        # "`", "~", space or tab: fences, and indented separators
        fm = _FENCE.match(line)
        if fence is not None:
            if fm and fm.group(1)[:1] == fence[:1] and len(fm.group(1)) >= len(fence):
                fence = None
            continue
        if fm:
            fence = fm.group(1)
        elif _SEP.match(line):
            seps.append(i)
    sep_set = set(seps)

    # Pass 2: block boundaries.
    block_start: list[int] = []
    block_end_hint: list[int | None] = []  # Form A: line after its closing separator + blanks
    prev_title = -1
    prev_claimed = -1  # last line index claimed by the previous block (its closing ---)
    for idx, (ti, form, prev) in enumerate(starts):
        # the separator above the title (only blank lines between) belongs to the entry: the
        # first line up that is not blank, at once when it is the candidate above the title
        # (the lines between hold nothing but whitespace), else line by line
        gap = data[offsets[prev]:offsets[ti]] if prev > prev_title else b""
        nl = gap.find(b"\n")
        if nl > 0 and gap[:nl].strip() and not gap[nl:].strip():
            j = prev
        else:
            j = _first_filled_above(data, offsets, ti, prev_title, begin)
        block_start.append(j if j > prev_title and j in sep_set and j > prev_claimed else ti)
        end_hint = None
        if form == "A":
            nxt = starts[idx + 1][0] if idx + 1 < len(starts) else nlines
            s = bisect.bisect_right(seps, ti)  # the first separator below the title
            if s < len(seps) and seps[s] < nxt:
                k = seps[s]
                end, pos = k + 1, find(b"\n", offsets[k]) + 1
                while end < nxt:  # and the blank lines below it
                    offsets[end] = pos
                    eol = find(b"\n", pos)
                    if data[pos: size if eol < 0 else eol].strip():
                        break
                    end, pos = end + 1, eol + 1
                end_hint = end
                prev_claimed = k
        block_end_hint.append(end_hint)
        prev_title = ti

    entries: list[LedgerEntry] = []
    titles: list[str | None] = []
    title_lines: list[int] = []
    records: list[bytes] = []
    problems: list[Problem] = []
    spath = str(path)
    for idx, (ti, form, _) in enumerate(starts):
        nxt_start = block_start[idx + 1] if idx + 1 < len(starts) else nlines
        hint = block_end_hint[idx]
        end_line = min(hint, nxt_start) if hint is not None else nxt_start
        # Content: from the title to the end, without trailing blank lines and separators
        # (and the trailing whitespace of the last content line: every value is stripped).
        first = offsets[ti]
        body = data[first:offsets[end_line]].rstrip()
        while True:
            last = body.rfind(b"\n") + 1
            if not last or ti + body.count(b"\n") not in sep_set:
                break
            body = body[:last].rstrip()
        entry = parse_entry(body, ti, form, spath, kind,
                            offsets[block_start[idx]], offsets[end_line])
        if compact:
            titles.append(entry.title)
            title_lines.append(entry.line)
            records.append(_record(_entry_row(entry)))
            if spill is not None and len(records) >= _CHUNK:
                records = spill.flush(titles, title_lines, records)
        else:
            entries.append(entry)
        for note in entry.problems:
            problems.append(Problem("smith", spath, entry.line, note))

    def lines_of(first: int, stop: int) -> list[bytes]:
        """Lines [first, stop) without their "\n" (both starts known)."""
        return data[offsets[first]:offsets[stop]].split(b"\n")[:stop - first]

    # Text that belongs to no entry: in the header, anything that looks like entry content;
    # after an entry's closing separator, anything at all (blank lines, separators and HTML
    # comments aside). Reported once per file.
    stray = _stray_lines(lines_of(0, block_start[0] if starts else nlines), 0, header=True)
    for idx in range(len(starts)):
        hint = block_end_hint[idx]
        if hint is None:
            continue  # a Form B entry (or an unclosed Form A one) runs to the next entry
        nxt = block_start[idx + 1] if idx + 1 < len(starts) else nlines
        if hint < nxt:
            stray += _stray_lines(lines_of(hint, nxt), hint, header=False)
    if stray:
        problems.append(Problem("smith", spath, stray[0] + 1,
                                "not part of any entry: " + _line_ranges(stray)))

    header_end = offsets[block_start[0]] if starts else size
    return LedgerFile(path=path, kind=kind, data=data,
                      entries=_compact_rows(spath, kind, titles, title_lines, records, spill)
                      if compact else entries,
                      header_end=header_end, newline=newline, bom=bom, problems=problems)


def _first_filled_above(data: bytes, offsets: dict[int, int], line: int, stop: int,
                        begin: int) -> int:
    """The first line above ``line`` (whose start is known) that is not blank, looking no
    higher than line ``stop`` + 1 (``stop`` when all are blank). Each line stepped over is
    one up from a known start: it begins after the "\n" before that start's own "\n" (the
    first line at ``begin``) and ends at that "\n". Their starts are added to ``offsets``."""
    rfind = data.rfind
    j, below = line - 1, offsets[line]
    while j > stop:
        start = offsets.get(j)
        if start is None:
            start = offsets[j] = max(rfind(b"\n", 0, below - 1) + 1, begin)
        if data[start:below - 1].strip():
            break
        j, below = j - 1, start
    return j


_LIST_ITEM = re.compile(rb"^[ \t]*(?:[-*+][ \t]|\d+[.)][ \t])")
_DATA_LINE = re.compile(rb"^[ \t]*(?:\*\*|###|\|)")


def _stray_lines(lines: list[bytes], first: int, *, header: bool) -> list[int]:
    """Indexes (in the file) of the ``lines`` that hold text outside any entry; ``lines[0]``
    is line ``first``.

    Always allowed: blank lines, ``---`` separators and HTML comments. In the header (before
    the first entry) also the file's title (``# ...``) and plain prose such as its one-line
    description or the "No patterns recorded yet." of a new vault; list items, ``**Label:**``
    fields, sub-headings, tables and code there look like entry content and are reported.
    """
    out: list[int] = []
    in_comment = False
    fence: bytes | None = None
    for i, raw in enumerate(lines, first):
        line = raw.rstrip(b"\r")
        stripped = line.strip()
        if fence is not None:
            out.append(i)
            m = _FENCE.match(line)
            if m and m.group(1)[:1] == fence[:1] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if in_comment:
            in_comment = b"-->" not in stripped
            continue
        if not stripped or _SEP.match(line):
            continue
        if stripped.startswith(b"<!--"):
            in_comment = b"-->" not in stripped[4:]
            continue
        m = _FENCE.match(line)
        if m:
            fence = m.group(1)
            out.append(i)
            continue
        if header and (stripped.startswith(b"# ") or not (_LIST_ITEM.match(line)
                                                         or _DATA_LINE.match(line))):
            continue
        out.append(i)
    return out


def _line_ranges(indexes: list[int]) -> str:
    """``lines 7–9, 12`` from 0-based line indexes (shown 1-based)."""
    parts: list[str] = []
    first = prev = indexes[0]
    for i in [*indexes[1:], -2]:
        if i == prev + 1:
            prev = i
            continue
        parts.append(f"{first + 1}" if first == prev else f"{first + 1}–{prev + 1}")
        first = prev = i
    word = "line" if len(indexes) == 1 else "lines"
    return f"{word} " + ", ".join(parts)


def read_ledger_file(path: Path, kind: str, max_bytes: int | None = None, *,
                     tolerate_large: bool = False, cache: Path | None = None,
                     spill: bool = False) -> LedgerFile:
    """Read and parse one ledger file. A missing or unreadable file gives an empty LedgerFile
    with ``exists``/``error`` set and a problem note.

    A file over the size limit (FAULTS A8/I4) raises :class:`TooLargeError` (exit 65, naming
    the file and the limit): a command that reads the ledger must not act as if the file were
    empty. ``tolerate_large=True`` (the loader, whose warnings ``toolkit status`` and the
    site show) turns it into a problem note like any other unreadable file.

    ``cache``: a folder of :mod:`toolkit.parsecache` (beside the store). The file's bytes are
    always read; when the cache holds the parse of exactly these bytes at this path by this
    parser, that is the answer, else the file is parsed and the result saved there.
    ``spill`` (with ``cache``; a reader that takes the entries once, in order: the loader):
    the parse's records are written there as they are made and read back from there (see
    :class:`_Spill`), not all held in memory."""
    if not path.exists():
        return LedgerFile(path=path, kind=kind, data=b"", entries=[], header_end=0, newline=b"\n",
                          bom=False, exists=False)
    key: tuple[str, ...] = ()
    try:
        data = read_bytes(path, max_bytes)
        if cache is not None:
            key = _parse_key(path, kind, data)
            hit = _cached_parse(cache, path, kind, data, key)
            if hit is not None:
                return hit  # these very bytes were parsed before (so they are UTF-8)
        check_utf8(data, path)  # junk bytes: report by offset, parse nothing
    except DataError as exc:
        if isinstance(exc, TooLargeError) and not tolerate_large:
            raise
        return LedgerFile(path=path, kind=kind, data=b"", entries=[], header_end=0,
                          newline=b"\n", bom=False, error=exc.message,
                          problems=[Problem("smith", str(path), exc.line, exc.detail)])
    if cache is None:
        return parse_ledger_bytes(data, path, kind)
    writer = _Spill.open(cache, kind, key) if spill else None
    try:
        lf = parse_ledger_bytes(data, path, kind, compact=True, spill=writer)
        _save_parse(cache, lf, key)
    except BaseException:  # Ctrl-C: no half-written cache file stays
        if writer is not None:
            writer.close()
        raise
    return lf


# --------------------------------------------------------------------------- parse cache

_ENTRY_FIELDS = tuple(f.name for f in fields(LedgerEntry))
_entry_row = operator.attrgetter(*_ENTRY_FIELDS)  # an entry as the tuple ledger_entry takes


# The modules a ledger file's parse is made by: a cached parse (and a stored row) made by
# other code is made again.
PARSER_MODULES = (__name__, "toolkit.ledger.codec", "toolkit.records", "toolkit.textio")


def _parse_key(path: Path, kind: str, data: bytes) -> tuple[str, ...]:
    """What a cached parse must match: this parser (and the UTF-8 check a hit skips), this
    path and kind, these bytes."""
    from toolkit import parsecache

    global _PARSER_VERSION
    if _PARSER_VERSION is None:
        _PARSER_VERSION = parsecache.code_version(*PARSER_MODULES)
    return _PARSER_VERSION, str(path), kind, parsecache.digest(data)


_PARSER_VERSION: str | None = None


def _cached_parse(cache: Path, path: Path, kind: str, data: bytes,
                  key: tuple[str, ...]) -> LedgerFile | None:
    from toolkit import parsecache

    titles: list[str | None] = []
    lines: list[int] = []
    records: list[bytes] = []
    with acyclic_build():  # plain values only
        saved = parsecache.load(cache, kind, key)
        try:  # chunks of (titles, lines, records), then the tail (see _Spill)
            *chunks, (header_end, newline, bom, notes) = saved
            for more_titles, more_lines, more_records in chunks:
                if not isinstance(more_titles, list) or not isinstance(more_records, list):
                    return None
                titles += more_titles
                lines += more_lines
                records += more_records
            problems = [Problem(*note) for note in notes]
        except (TypeError, ValueError):
            return None
    if not len(titles) == len(lines) == len(records):
        return None
    return LedgerFile(path=path, kind=kind, data=data,
                      entries=_Rows(str(path), kind, titles, lines, records),
                      header_end=header_end, newline=newline, bom=bom, problems=problems)


def cached_parse(cache: Path, path: Path, kind: str, data: bytes) -> LedgerFile | None:
    """The parse of exactly these bytes at this path that :func:`read_ledger_file` kept in
    ``cache``, or None (nothing is parsed or written): for another reader of the same bytes,
    such as the history's working version in the same load."""
    return _cached_parse(cache, path, kind, data, _parse_key(path, kind, data))


def _save_parse(cache: Path, lf: LedgerFile, key: tuple[str, ...]) -> None:
    from toolkit import parsecache

    rows = lf._rows()
    assert rows is not None  # a compact parse
    tail = (lf.header_end, lf.newline, lf.bom,
            [(p.source, p.path, p.line, p.message) for p in lf.problems])
    if rows.spill is not None:  # its records are in the cache file already
        if not rows.spill.commit(tail, rows.records):
            rows.spill = None  # (and its records are all in memory again)
        return
    chunks = ((rows.titles[at:at + _CHUNK], rows.lines[at:at + _CHUNK],
               rows.records[at:at + _CHUNK]) for at in range(0, len(rows.records), _CHUNK))
    parsecache.save_parts(cache, lf.kind, key, itertools.chain(chunks, [tail]))


# --------------------------------------------------------------------------- meta files

# The three meta.yaml schemas (FORMATS.md §1.3) and the keys each one writes.
META_KEYS = {
    # smith-reflect Phase 0 and 7
    "reflect": ("last_updated", "total_reflections", "entries", "confidence_distribution"),
    # /smith-ledger's documented form, written by `/smith-ledger reset`
    "smith-ledger": ("last_reflection", "total_reflections", "total_entries", "config",
                     "entries_by_file"),
    # what /smith scaffolds in a new project ("creation date and zero counters")
    "smith-init": ("created", "workflows_completed", "last_reflection",
                   *(f"{kind.replace('-', '_')}_recorded" for kind in LEDGER_FILES)),
}
_ALL_META_KEYS = frozenset(k for keys in META_KEYS.values() for k in keys)


def recorded_key(kind: str) -> str:
    """The smith-init schema's count key of a ledger file: ``project_quirks_recorded``."""
    return f"{kind.replace('-', '_')}_recorded"


@dataclass
class LedgerMeta:
    """meta.yaml as found: which schema it uses, its counts, its prune limits."""

    path: Path
    exists: bool
    schema: str | None  # "reflect", "smith-ledger", "smith-init", or None (missing/unknown)
    data: dict[str, Any]
    error: str | None = None
    error_line: int | None = None

    @property
    def last_reflection(self) -> str | None:
        for key in ("last_reflection", "last_updated"):
            value = self.data.get(key)
            if value:
                return str(value)
        return None

    @property
    def never_reflected(self) -> bool:
        """meta.yaml records that no reflection ran yet (``last_reflection: null``)."""
        return last_reflection_text(self.data) == "never"

    @property
    def total_reflections(self) -> int | None:
        """``total_reflections``; 0 when it is absent and no reflection ever ran."""
        value = self.data.get("total_reflections")
        if value is None and "total_reflections" not in self.data and self.never_reflected:
            return 0
        return value if isinstance(value, int) and not isinstance(value, bool) \
            and fits(value) else None

    def count_for(self, kind: str) -> int | None:
        if self.schema == "reflect":
            value = _mapping(self.data.get("entries")).get(kind.replace("-", "_"))
        elif self.schema == "smith-init":
            value = self.data.get(recorded_key(kind))
        else:
            value = _mapping(self.data.get("entries_by_file")).get(kind)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def shape_problems(self) -> list[str]:
        """The keys that hold a mapping in every Smith schema but hold something else here
        (read as absent: their counts or limits are unknown)."""
        out = [f"{key} is {value_kind(self.data[key])}, not a mapping (ignored)"
               for key in _MAPPING_KEYS
               if self.data.get(key) is not None and not isinstance(self.data[key], dict)]
        total = self.data.get("total_reflections")
        if isinstance(total, int) and not isinstance(total, bool) and not fits(total):
            out.append(f"total_reflections is too large a number: {str(total)[:40]} (ignored)")
        return out

    @property
    def total_entries(self) -> int | None:
        """The entry total meta.yaml claims: ``total_entries``, or the sum of the smith-init
        ``<kind>_recorded`` counts when every one is there."""
        if self.schema == "smith-init":
            counts = [self.count_for(kind) for kind in LEDGER_FILES]
            return None if any(c is None for c in counts) else sum(c or 0 for c in counts)
        value = self.data.get("total_entries")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def unknown_keys(self) -> list[str]:
        """Top-level keys no Smith schema writes (shown as a warning, otherwise ignored)."""
        return [str(k) for k in self.data if k not in _ALL_META_KEYS]


# meta.yaml keys whose value is a mapping in the schema that writes them
_MAPPING_KEYS = ("entries", "entries_by_file", "confidence_distribution", "config")


def _mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a mapping, else an empty one: a hand-edited file may hold a
    number or a list where a Smith schema has a mapping (read_vault warns of it)."""
    return value if isinstance(value, dict) else {}


def config_shape_problems(smith_config: dict[str, Any] | None) -> list[str]:
    """config.json's ``ledger`` and ``ledger.pruning`` when they hold something other than an
    object (read as absent: the prune limits are the defaults)."""
    out = []
    ledger = (smith_config or {}).get("ledger")
    if ledger is not None and not isinstance(ledger, dict):
        out.append(f"ledger is {value_kind(ledger)}, not an object (ignored)")
    pruning = _mapping(ledger).get("pruning")
    if pruning is not None and not isinstance(pruning, dict):
        out.append(f"ledger.pruning is {value_kind(pruning)}, not an object (ignored: prune uses "
                   "the default limits)")
    return out


def _days(value: Any) -> int | None:
    """A prune limit: a whole number of days, 0 or more (not ``true``)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def last_reflection_text(data: dict[str, Any] | None) -> str | None:
    """The last reflection for display: its date; ``never`` when meta.yaml says
    ``last_reflection: null`` (a new vault, or one just reset); None when it does not say."""
    if not data:
        return None
    for key in ("last_reflection", "last_updated"):
        value = data.get(key)
        if value:
            return str(value)
    return "never" if "last_reflection" in data and data["last_reflection"] is None else None


def read_meta(ledger_dir: Path) -> LedgerMeta:
    path = ledger_dir / "meta.yaml"
    if not path.exists():
        return LedgerMeta(path, False, None, {})
    try:
        data = load_yaml(decode_utf8(read_bytes(path), path), path)
    except DataError as exc:
        return LedgerMeta(path, True, None, {}, error=exc.message, error_line=exc.line)
    if data is None:
        return LedgerMeta(path, True, None, {})
    if not isinstance(data, dict):
        return LedgerMeta(path, True, None, {}, error="meta.yaml is not a mapping")
    schema: str | None
    if "workflows_completed" in data or "created" in data \
            or any(str(k).endswith("_recorded") for k in data):
        schema = "smith-init"  # has last_reflection too: test it first
    elif "entries_by_file" in data or "total_entries" in data or "last_reflection" in data:
        schema = "smith-ledger"
    elif "entries" in data or "confidence_distribution" in data or "last_updated" in data:
        schema = "reflect"
    else:
        schema = None
    return LedgerMeta(path, True, schema, data)


def read_json_file(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A small JSON object file (.meta.json, config.json): (data, error)."""
    if not path.exists():
        return None, None
    try:
        data = load_json(decode_utf8(read_bytes(path), path), path)
    except DataError as exc:
        return None, str(exc)
    if not isinstance(data, dict):
        return None, f"{path}: expected a JSON object"
    return data, None


DEFAULT_PRUNE = {"low": 30, "medium": 90}


def prune_limits(meta: LedgerMeta, smith_config: dict[str, Any] | None) -> dict[str, int]:
    """Day limits for prune: meta.yaml ``config:`` or config.json ``ledger.pruning``, else 30/90."""
    limits = dict(DEFAULT_PRUNE)
    pruning = _mapping(_mapping(_mapping(smith_config).get("ledger")).get("pruning"))
    cfg = _mapping(meta.data.get("config") if meta.data else None)
    for source, keys in ((pruning, ("low_max_age_days", "medium_max_age_days")),
                         (cfg, ("low_confidence_prune_days", "medium_confidence_demote_days"))):
        for key, name in zip(keys, ("low", "medium"), strict=True):
            days = _days(source.get(key))
            if days is not None:
                limits[name] = days
    return limits


# --------------------------------------------------------------------------- reconcile log

_RECONCILE_HEAD = re.compile(r"^## Reconcile: (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\s*$")
_BOLD_KV = re.compile(r"^\*\*([A-Za-z ]+)\*\*:\s*(.*)$")


@dataclass(frozen=True)
class ReconcileRun:
    path: str
    line: int
    ran_at: str
    trigger: str | None
    signals: str | None
    backup: str | None
    result: str | None
    actions: tuple[str, ...]
    merges: tuple[str, ...]
    prunes: tuple[str, ...]
    budget_drops: tuple[str, ...]


def read_reconcile_log(path: Path) -> tuple[list[ReconcileRun], list[Problem]]:
    if not path.exists():
        return [], []
    try:
        text = decode_utf8(read_bytes(path), path)
    except DataError as exc:
        return [], [Problem("smith", str(path), exc.line, exc.detail)]
    runs: list[ReconcileRun] = []
    cur: dict[str, Any] | None = None
    section: str | None = None

    def flush() -> None:
        if cur is not None:
            runs.append(ReconcileRun(
                path=str(path), line=cur["line"], ran_at=cur["ran_at"],
                trigger=cur.get("trigger"), signals=cur.get("signal values"),
                backup=(cur.get("backup") or "").strip("`") or None, result=cur.get("result"),
                actions=tuple(cur["lists"].get("actions", [])),
                merges=tuple(cur["lists"].get("merges", [])),
                prunes=tuple(cur["lists"].get("prunes", [])),
                budget_drops=tuple(cur["lists"].get("budget drops", []))))

    for i, line in enumerate(text.splitlines(), 1):
        m = _RECONCILE_HEAD.match(line)
        if m:
            flush()
            cur = {"line": i, "ran_at": m.group(1), "lists": {}}
            section = None
            continue
        if cur is None:
            continue
        m2 = _BOLD_KV.match(line.strip())
        if m2:
            key = m2.group(1).strip().lower()
            val = m2.group(2).strip()
            if val:
                cur[key] = val
                section = None
            else:
                section = key
                cur["lists"].setdefault(key, [])
            continue
        if section and line.startswith("- "):
            cur["lists"][section].append(line[2:].strip())
    flush()
    return runs, []


# --------------------------------------------------------------------------- session logs

_LEGACY_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{6}$")
_EVENT_HEAD = re.compile(r"^### \[(\d{2}:\d{2}:\d{2})\] (.*)$")
_TOP_HEAD = re.compile(r"^## (Started|Resumed|Ended): (.*)$")
_METRIC = re.compile(r"^- `\[(\d{2}:\d{2}:\d{2})\]` \*\*([^*]+)\*\* "
                     r"in:(\d+) out:(\d+) total:(\d+)(?: \((.*)\))?\s*$")
_FILE_CHANGE = re.compile(r"^- `\[(\d{2}:\d{2}:\d{2})\]` "
                          r"\*\*(Edit|Write|MultiEdit|NotebookEdit)\*\* `(.*)`\s*$")


def _split_frontmatter(text: str) -> tuple[str | None, str, int]:
    """(frontmatter text, body, body's first line number)."""
    if not text.startswith("---"):
        return None, text, 1
    end = text.find("\n---", 3)
    if end < 0:
        return None, text, 1
    fm = text[3:end].strip("\n")
    rest_start = text.find("\n", end + 4)
    body = "" if rest_start < 0 else text[rest_start + 1:]
    return fm, body, text.count("\n", 0, rest_start + 1 if rest_start >= 0 else len(text)) + 1


def _event_kind(title: str) -> str:
    low = title.lower()
    if low == "user prompt":
        return "prompt"
    if low == "context compacted":
        return "compacted"
    if low.startswith("subagent invoked"):
        return "subagent_invoked"
    if low.startswith("subagent completed"):
        return "subagent_completed"
    if low.startswith("workflow-start"):
        return "workflow_start"
    if low.startswith("/"):
        return "skill"
    return "other"


# A file of the vault read through a symbolic link that leads out of it.
_LINKED_OUT = "is a symlink to {}, outside the vault; read through it"
_REACHED_OUT = "is {}, outside the vault (a folder on its way is a symlink); read through it"


def read_session(path: Path) -> tuple[Session, list[SessionEvent], list[Problem]]:
    name = path.stem
    problems: list[Problem] = []
    # read through, as the ledger's read commands do, but said (G3)
    if path.is_symlink() and not within(path, path.parent.parent, strictly=True):
        problems.append(Problem("smith", str(path), None,
                                _LINKED_OUT.format(os.path.realpath(path))))
    try:
        text = decode_utf8(read_bytes(path), path)
    except DataError as exc:
        problems.append(Problem("smith", str(path), exc.line, exc.detail))
        return (Session(str(path), name, None, None, None, None, None, None,
                        bool(_LEGACY_NAME.match(name)), (exc.message,)), [], problems)
    text = text.replace("\r\n", "\n")
    fm_text, body, body_line = _split_frontmatter(text)
    fm: dict[str, Any] = {}
    notes: list[str] = []
    if fm_text is not None:
        try:
            loaded = load_yaml(fm_text, path)
            if isinstance(loaded, dict):
                fm = loaded
        except DataError as exc:
            notes.append(f"frontmatter: {exc.message}")
            problems.append(Problem("smith", str(path), (exc.line or 0) + 1, exc.message))
    start = fm.get("session_start")
    if isinstance(start, dt.datetime):  # YAML read an unquoted time: keep its offset, if any
        start = start.isoformat() if start.tzinfo else start.strftime("%Y-%m-%dT%H:%M:%S")
    events: list[SessionEvent] = []
    ended: str | None = None
    cur: dict[str, Any] | None = None

    def close() -> None:
        if cur is None:
            return
        body_text = "\n".join(cur["body"]).strip()
        flds = []
        for bl in cur["body"]:
            m = (_BOLD_KV.match(bl.strip())
                 or re.match(r"^\*\*([A-Za-z ]+):\*\*\s*(.*)$", bl.strip()))
            if m:
                flds.append((m.group(1).strip(), m.group(2).strip()))
        target = None
        if cur["kind"] == "skill":
            target = cur["title"].split()[0]
        events.append(SessionEvent(
            session=name, path=str(path), line=cur["line"], seq=len(events), time=cur["time"],
            kind=cur["kind"], title=cur["title"], body=body_text, target=target,
            fields=tuple(flds)))

    lines = body.split("\n")
    for off, line in enumerate(lines):
        lineno = body_line + off
        m = _EVENT_HEAD.match(line)
        if m:
            close()
            cur = {"line": lineno, "time": m.group(1), "title": m.group(2).strip(),
                   "kind": _event_kind(m.group(2).strip()), "body": []}
            continue
        m = _TOP_HEAD.match(line)
        if m:
            close()
            cur = None
            kind = m.group(1).lower()
            when = m.group(2).strip()
            if kind == "ended":
                ended = when
            events.append(SessionEvent(session=name, path=str(path), line=lineno,
                                       seq=len(events), time=when[-8:], kind=kind,
                                       title=f"{m.group(1)}: {when}", body=""))
            continue
        m = _METRIC.match(line)
        if m:
            events.append(SessionEvent(
                session=name, path=str(path), line=lineno, seq=len(events), time=m.group(1),
                kind="metric", title=m.group(2), body=line[2:], tool=m.group(2),
                tokens_in=int(m.group(3)), tokens_out=int(m.group(4)),
                tokens_total=int(m.group(5)), target=m.group(6)))
            continue
        m = _FILE_CHANGE.match(line)
        if m:
            events.append(SessionEvent(
                session=name, path=str(path), line=lineno, seq=len(events), time=m.group(1),
                kind="file_change", title=f"{m.group(2)} {m.group(3)}", body=line[2:],
                tool=m.group(2), target=m.group(3)))
            continue
        if line.startswith("## "):
            close()
            cur = None
            continue
        if cur is not None:
            cur["body"].append(line)
    close()
    events.sort(key=lambda e: e.line)
    events = [replace(e, seq=i) for i, e in enumerate(events)]
    session = Session(
        path=str(path), name=name,
        session_start=str(start) if start else None,
        project=_opt_str(fm.get("project")), branch=_opt_str(fm.get("branch")),
        author=_opt_str(fm.get("author")), status=_opt_str(fm.get("status")),
        ended=ended, legacy_name=bool(_LEGACY_NAME.match(name)), problems=tuple(notes))
    return session, events, problems


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


# --------------------------------------------------------------------------- the whole vault

@dataclass
class Vault:
    """Everything read from one vault."""

    root: Path
    exists: bool
    files: dict[str, LedgerFile]
    meta: LedgerMeta
    meta_json: dict[str, Any] | None
    smith_config: dict[str, Any] | None
    reconcile_runs: list[ReconcileRun]
    sessions: list[Session]
    events: list[SessionEvent]
    problems: list[Problem]

    @property
    def ledger_dir(self) -> Path:
        return self.root / "ledger"

    @property
    def entries(self) -> list[LedgerEntry]:
        return [e for kind in LEDGER_FILES for e in self.files[kind].entries]


def read_ledger(ledger_dir: Path, max_bytes: int | None = None, *,
                tolerate_large: bool = False, cache: Path | None = None, spill: bool = False
                ) -> dict[str, LedgerFile]:
    """The five ledger files (see :func:`read_ledger_file` for ``tolerate_large``, ``cache``
    and ``spill``)."""
    return {kind: read_ledger_file(ledger_dir / f"{kind}.md", kind, max_bytes,
                                   tolerate_large=tolerate_large, cache=cache, spill=spill)
            for kind in LEDGER_FILES}


# How each of meta_disagreements' notes starts (the meta-counts check finds them by it among
# the problems the loader recorded).
META_COUNT_PREFIX = "meta.yaml says "


def meta_disagreements(meta: LedgerMeta, files: dict[str, LedgerFile]) -> list[Problem]:
    """meta.yaml counts that do not match the files: reported, never fixed on read (A2)."""
    out: list[Problem] = []
    if meta.schema is None:
        return out
    for kind, lf in files.items():
        if not lf.exists or lf.error:
            continue
        claimed = meta.count_for(kind)
        if claimed is not None and claimed != lf.entry_count():
            out.append(Problem("smith", str(meta.path), None,
                               f"{META_COUNT_PREFIX}{kind} has {claimed} entries; "
                               f"{kind}.md has {lf.entry_count()}"))
    # its total_entries (the smith-init schema has none: its total is the files' counts),
    # which the dashboard compares too ("Total entries: 5 (meta.yaml says 9)")
    total = meta.total_entries if meta.schema != "smith-init" else None
    if total is not None and not any(lf.error for lf in files.values()):
        actual = sum(lf.entry_count() for lf in files.values() if lf.exists)
        if total != actual:
            out.append(Problem("smith", str(meta.path), None,
                               f"{META_COUNT_PREFIX}total_entries is {total}; the ledger "
                               f"files have {actual}"))
    return out


def read_vault(vault: Path, *, max_bytes: int | None = None, sessions: bool = True,
               tolerate_large: bool = False, cache: Path | None = None,
               spill: bool = False) -> Vault:
    """Everything in one vault. A ledger file over the size limit raises
    :class:`TooLargeError` unless ``tolerate_large``; ``cache``: where parses of the ledger
    files are kept, ``spill``: the loader's (see :func:`read_ledger_file`)."""
    ledger_dir = vault / "ledger"
    problems: list[Problem] = []
    exists = ledger_dir.is_dir()
    files = read_ledger(ledger_dir, max_bytes, tolerate_large=tolerate_large,
                        cache=cache, spill=spill) if exists else {
        kind: LedgerFile(ledger_dir / f"{kind}.md", kind, b"", [], 0, b"\n", False, exists=False)
        for kind in LEDGER_FILES}
    for lf in files.values():
        problems.extend(lf.problems)
        # read through a link that leads out of the vault (FAULTS G3), but never silently:
        # its entries go into the store, the site and the handoff (as a session log's)
        if lf.exists and not within(lf.path, vault, strictly=True):
            form = _LINKED_OUT if lf.path.is_symlink() else _REACHED_OUT  # (its folder)
            problems.append(Problem("smith", str(lf.path), None,
                                    form.format(os.path.realpath(lf.path))))
    meta = read_meta(ledger_dir)
    if meta.error:
        problems.append(Problem("smith", str(meta.path), meta.error_line, meta.error))
    elif exists and not meta.exists:
        problems.append(Problem("smith", str(meta.path), None, "meta.yaml is missing"))
    elif meta.exists and not meta.data:
        problems.append(Problem("smith", str(meta.path), None,
                                "meta.yaml is empty: its counts are unknown (the next promote "
                                "or prune writes them)"))
    problems.extend(Problem("smith", str(meta.path), None, text)
                    for text in meta.shape_problems())
    unknown = meta.unknown_keys()
    if unknown:
        problems.append(Problem("smith", str(meta.path), None,
                                "unknown key(s) " + ", ".join(unknown) + " (ignored; no Smith "
                                "meta.yaml schema writes them)"))
    problems.extend(meta_disagreements(meta, files))
    meta_json, err = read_json_file(ledger_dir / ".meta.json")
    if err:
        problems.append(Problem("smith", str(ledger_dir / ".meta.json"), None, err))
    smith_config, err = read_json_file(vault.parent / "config.json")
    if err:
        problems.append(Problem("smith", str(vault.parent / "config.json"), None, err))
    problems.extend(Problem("smith", str(vault.parent / "config.json"), None, text)
                    for text in config_shape_problems(smith_config))
    runs, rp = read_reconcile_log(ledger_dir / "reconcile-log.md")
    problems.extend(rp)
    all_sessions: list[Session] = []
    all_events: list[SessionEvent] = []
    sdir = vault / "sessions"
    logs: list[Path] = []
    if sessions:
        try:
            logs = session_files(sdir)
        except DataError as exc:
            problems.append(Problem("smith", exc.path or str(sdir), None, exc.detail))
    for p in logs:
        s, ev, sp = read_session(p)
        all_sessions.append(s)
        all_events.extend(ev)
        problems.extend(sp)
    return Vault(root=vault, exists=exists, files=files, meta=meta, meta_json=meta_json,
                 smith_config=smith_config, reconcile_runs=runs, sessions=all_sessions,
                 events=all_events, problems=problems)


def current_session_log(vault: Path) -> Path | None:
    """The active session log named by ``.current-session``, if it exists."""
    pointer = vault / ".current-session"
    try:  # (is_file raises for a folder it may not enter, or a name too long)
        if not pointer.is_file():  # none, or a FIFO whose open would wait for a writer
            return None
        target = pointer.read_text(encoding="utf-8").strip()
        if not target:
            return None
        p = Path(target)
        if not p.is_absolute():
            p = vault.parent.parent / p
        return p if p.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None
