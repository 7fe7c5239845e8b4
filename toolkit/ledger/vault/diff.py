"""Unified diffs of byte edits, computed around each edit only (cheap for one edit in a very
large file)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from toolkit.textio import HUNK_HEADER


@dataclass(frozen=True)
class Change:
    """One file a commit changes (or would change, in a dry run).

    ``edits`` (old-file byte ranges and their new bytes, sorted) lets :meth:`diff` look only
    at the changed places, so the diff of one edit in a very large file stays cheap."""

    path: Path
    name: str  # "patterns.md", "meta.yaml", ".meta.json"
    old: bytes
    new: bytes
    edits: tuple[tuple[int, int, bytes], ...] | None = None
    # (offset of a line start in ``old``, its 0-based line index), when the caller knows one:
    # hunk line numbers are then counted from there, not from the top of a large file
    line_hint: tuple[int, int] | None = None

    def diff(self, label: str | None = None, context: int = 3) -> str:
        name = label or self.name
        head = f"--- a/{name}\n+++ b/{name}\n"
        edits = self.edits if self.edits is not None else _whole_edit(self.old, self.new)
        body = "".join(_region_hunks(self.old, list(edits), context, self.line_hint))
        return head + body if body else ""


def _whole_edit(old: bytes, new: bytes) -> tuple[tuple[int, int, bytes], ...]:
    """One edit covering the differing middle of two byte strings (common ends trimmed)."""
    n = min(len(old), len(new))
    lo = 0
    step = 1 << 16
    while lo < n and old[lo:lo + step] == new[lo:lo + step]:
        lo += step
    lo = min(lo, n)
    while lo > 0 and old[:lo] != new[:lo]:
        lo -= 1
    hi = 0
    while hi < n - lo and old[len(old) - hi - 1] == new[len(new) - hi - 1]:
        hi += 1
    if old == new:
        return ()
    return ((lo, len(old) - hi, new[lo:len(new) - hi]),)


def _line_bounds(data: bytes, start: int, end: int) -> tuple[int, int]:
    ls = data.rfind(b"\n", 0, start) + 1
    nl = data.find(b"\n", end - 1) if end > start else data.find(b"\n", start)
    le = len(data) if nl < 0 else nl + 1
    return ls, le


def _back_lines(data: bytes, pos: int, n: int) -> int:
    for _ in range(n):
        if pos <= 0:
            return 0
        pos = data.rfind(b"\n", 0, pos - 1) + 1
    return pos


def _fwd_lines(data: bytes, pos: int, n: int) -> int:
    for _ in range(n):
        if pos >= len(data):
            return len(data)
        nl = data.find(b"\n", pos)
        pos = len(data) if nl < 0 else nl + 1
    return pos


def _region_hunks(old: bytes, edits: list[tuple[int, int, bytes]], context: int,
                  line_hint: tuple[int, int] | None = None) -> list[str]:
    """Unified-diff hunks for byte edits of ``old``, computed around each edit only. Line
    numbers are counted once through the file (from ``line_hint`` when given), each hunk's
    from the one before."""
    if not edits:
        return []
    groups: list[tuple[int, int, list[tuple[int, int, bytes]]]] = []
    for start, end, data in sorted(edits, key=lambda e: (e[0], e[1])):
        ls, le = _line_bounds(old, start, end)
        cs, ce = _back_lines(old, ls, context), _fwd_lines(old, le, context)
        if groups and cs <= groups[-1][1]:
            gs, ge, items = groups[-1]
            groups[-1] = (gs, max(ge, ce), [*items, (start, end, data)])
        else:
            groups.append((cs, ce, [(start, end, data)]))
    out: list[str] = []
    delta = 0
    known_pos, known_line = 0, 0  # a line start and its 0-based index, at or before the hunk
    if line_hint is not None and (line_hint[0] == 0 or old[line_hint[0] - 1] == 0x0A):
        hint_pos, hint_line = line_hint
        first_cs = groups[0][0]
        known_pos, known_line = first_cs, (
            hint_line + old.count(b"\n", hint_pos, first_cs) if hint_pos <= first_cs
            else hint_line - old.count(b"\n", first_cs, hint_pos))
    for cs, ce, items in groups:
        parts, pos = [], cs
        for start, end, data in items:
            parts.append(old[pos:start])
            parts.append(data)
            pos = max(pos, end)
        parts.append(old[pos:ce])
        old_chunk = old[cs:ce].decode("utf-8", "replace").splitlines(keepends=True)
        new_chunk = b"".join(parts).decode("utf-8", "replace").splitlines(keepends=True)
        first_old = known_line + old.count(b"\n", known_pos, cs)
        known_pos, known_line = cs, first_old
        first_new = first_old + delta
        delta += len(new_chunk) - len(old_chunk)
        for line in difflib.unified_diff(old_chunk, new_chunk, n=context):
            if line.startswith(("---", "+++")):
                continue
            if line.startswith("@@"):
                m = HUNK_HEADER.match(line)
                if m:
                    a1, a2 = int(m.group(1)), m.group(2)
                    b1, b2 = int(m.group(3)), m.group(4)
                    a1 = a1 + first_old
                    b1 = b1 + first_new
                    line = (f"@@ -{a1}{',' + a2 if a2 is not None else ''} "
                            f"+{b1}{',' + b2 if b2 is not None else ''} @@\n")
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return out

