"""Read-only reader of the CodeSmith slop ledger (FORMATS.md §2.1-2.2).

CodeSmith's own loader refuses the whole file over one odd value; this one reads every entry
it can and reports the rest as problems with file and line: a bare array instead of
``{"entries": [...]}``, PascalCase or unknown enum values, unknown fields (kept in ``extra`` so
a rewrite never loses them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import DataError
from toolkit.records import (
    SLOP_BUCKETS,
    SLOP_CONFIDENCES,
    SLOP_SEVERITIES,
    SLOP_STATUSES,
    Problem,
    SlopEntry,
)
from toolkit.textio import decode_utf8, load_json, read_bytes

KNOWN_FIELDS = ("id", "bucket", "severity", "confidence", "owner", "source_links", "title",
                "description", "status", "cleanup_recommendation", "created_at", "updated_at",
                "task_id", "thread_id")

# CodeSmith's tool inputs accept these spellings; the file loader does not. We read them all.
_ALIASES = {"done": "resolved", "wontfix": "wont_fix", "inprogress": "in_progress",
            "won't_fix": "wont_fix", "won_t_fix": "wont_fix"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def normalise_enum(value: Any, allowed: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(normalised value, problem). ``InProgress``/``in-progress``/``Open`` become snake_case."""
    if value is None:
        return None, "missing"
    if not isinstance(value, str):
        return None, f"not a string: {value!r}"
    if value in allowed:
        return value, None
    snake = _CAMEL.sub("_", value.strip()).lower().replace("-", "_").replace(" ", "_")
    snake = _ALIASES.get(snake, _ALIASES.get(snake.replace("_", ""), snake))
    if snake in allowed:
        return snake, f"non-canonical value {value!r} read as {snake!r}"
    return None, f"unknown value {value!r} (expected one of {', '.join(allowed)})"


@dataclass
class SlopFile:
    path: Path
    exists: bool
    form: str  # "object" or "array"
    entries: list[SlopEntry]
    top_extra: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def _entry_lines(text: str) -> list[int]:
    """Best-effort line of each entry: lines holding an ``"id":`` key, in order."""
    return [text.count("\n", 0, m.start()) + 1 for m in re.finditer(r'"id"\s*:', text)]


def parse_slop(text: str, path: Path) -> SlopFile:
    data = load_json(text, path) if text.strip() else {"entries": []}
    problems: list[Problem] = []
    spath = str(path)
    top_extra: dict[str, Any] = {}
    if isinstance(data, list):
        form = "array"
        raw_entries = data
        problems.append(Problem("slop", spath, 1, 'top level is a bare array; CodeSmith expects '
                                '{"entries": [...]} (read anyway)'))
    elif isinstance(data, dict):
        form = "object"
        raw_entries = data.get("entries", [])
        top_extra = {k: v for k, v in data.items() if k != "entries"}
        if top_extra:
            problems.append(Problem("slop", spath, 1, "unknown top-level field(s) "
                                    + ", ".join(sorted(top_extra)) + " (kept)"))
        if not isinstance(raw_entries, list):
            raise DataError('"entries" is not a list', path=path)
    else:
        raise DataError("top level is neither an object nor an array", path=path)
    lines = _entry_lines(text)
    entries: list[SlopEntry] = []
    for index, raw in enumerate(raw_entries):
        line = lines[index] if index < len(lines) and len(lines) == len(raw_entries) else None
        if not isinstance(raw, dict):
            problems.append(Problem("slop", spath, line, f"entry {index} is not an object; skipped"))
            continue
        notes: list[str] = []
        values: dict[str, str | None] = {}
        for name, allowed in (("bucket", SLOP_BUCKETS), ("severity", SLOP_SEVERITIES),
                              ("confidence", SLOP_CONFIDENCES), ("status", SLOP_STATUSES)):
            value, problem = normalise_enum(raw.get(name), allowed)
            values[name] = value if value is not None else (
                str(raw[name]) if isinstance(raw.get(name), str) else None)
            if problem:
                notes.append(f"{name}: {problem}")
        links = raw.get("source_links") or []
        if not isinstance(links, list):
            notes.append("source_links is not a list")
            links = [str(links)]
        extra = {k: v for k, v in raw.items() if k not in KNOWN_FIELDS}
        if extra:
            notes.append("unknown field(s) " + ", ".join(sorted(extra)) + " (kept)")
        entry_id = raw.get("id")
        if not isinstance(entry_id, str) or not entry_id:
            notes.append("missing id")
            entry_id = f"missing-id-{index}"

        def text_field(name: str) -> str | None:
            v = raw.get(name)
            return None if v is None else str(v)

        entries.append(SlopEntry(
            path=spath, index=index, line=line, id=entry_id,
            bucket=values["bucket"], severity=values["severity"],
            confidence=values["confidence"], owner=text_field("owner"),
            source_links=tuple(str(x) for x in links),
            title=text_field("title") or "", description=text_field("description") or "",
            status=values["status"],
            cleanup_recommendation=text_field("cleanup_recommendation"),
            created_at=text_field("created_at"), updated_at=text_field("updated_at"),
            task_id=text_field("task_id"), thread_id=text_field("thread_id"),
            extra=extra, problems=tuple(notes)))
        for note in notes:
            problems.append(Problem("slop", spath, line, f"entry {entry_id[:8]}: {note}"))
    return SlopFile(path=path, exists=True, form=form, entries=entries, top_extra=top_extra,
                    problems=problems)


def read_slop(path: Path, max_bytes: int | None = None) -> SlopFile:
    """Read the slop ledger; a missing file is an empty ledger (as in CodeSmith)."""
    if not path.exists():
        return SlopFile(path=path, exists=False, form="object", entries=[])
    text = decode_utf8(read_bytes(path, max_bytes), path)
    return parse_slop(text, path)
