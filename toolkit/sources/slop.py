"""Read-only reader of the CodeSmith slop ledger (FORMATS.md §2.1-2.2).

CodeSmith's own loader (strict serde) refuses the whole file over one odd value; this one reads
every entry it can and reports the rest as problems with file and line. :func:`load_problems`
is the one statement of CodeSmith's loader rules: the reader warns with each problem it finds
("CodeSmith will not load this file: ..."), the writers refuse a file that has any and check
their own output with it, and ``toolkit slop repair`` applies the fixes it names.
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
    acyclic_build,
    slop_entry,
)
from toolkit.textio import (
    as_text,
    decode_utf8,
    json_surrogate_free,
    load_json,
    lone_surrogate,
    read_bytes,
    value_kind,
)

KNOWN_FIELDS = ("id", "bucket", "severity", "confidence", "owner", "source_links", "title",
                "description", "status", "cleanup_recommendation", "created_at", "updated_at",
                "task_id", "thread_id")
LOAD_PREFIX = "CodeSmith will not load this file: "

# CodeSmith's tool inputs accept these spellings; the file loader does not. We read them all.
_ALIASES = {"done": "resolved", "wontfix": "wont_fix", "inprogress": "in_progress",
            "won't_fix": "wont_fix", "won_t_fix": "wont_fix"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# serde's view of SlopEntry (slop_ledger.rs): required strings, required snake_case enums,
# optional strings (absent or null is fine, another type is not) and the one optional list.
_REQUIRED_TEXT = ("id", "title", "description", "created_at", "updated_at")
_ENUM_FIELDS = {"bucket": SLOP_BUCKETS, "severity": SLOP_SEVERITIES,
                "confidence": SLOP_CONFIDENCES, "status": SLOP_STATUSES}
_OPTIONAL_TEXT = ("owner", "cleanup_recommendation", "task_id", "thread_id")
_BUCKET_SET, _SEVERITY_SET, _CONFIDENCE_SET, _STATUS_SET = (
    frozenset(SLOP_BUCKETS), frozenset(SLOP_SEVERITIES), frozenset(SLOP_CONFIDENCES),
    frozenset(SLOP_STATUSES))
_KNOWN = frozenset(KNOWN_FIELDS)


# what to do with a file whose whole shape is not a slop ledger's
_WHOLE_FILE_HINT = ('CodeSmith writes {"entries": [...]}: restore the file from its backup in '
                    '.backups beside it, or move it away to start an empty ledger')


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


@dataclass(frozen=True)
class LoadProblem:
    """One reason CodeSmith's loader refuses the file, and its one safe fix when it has one.

    ``fix`` names the repair: ``bom`` (drop it), ``wrap`` (bare array into ``{"entries":
    [...]}``), ``empty`` (an empty file becomes ``{"entries": []}``), ``entries`` (a missing or
    null ``entries`` becomes ``[]``), ``drop`` (remove a null ``source_links``: CodeSmith omits
    an empty list), ``updated_at`` (copy ``created_at``), ``enum`` (write ``value``, the one
    canonical name the written value stands for). None: only a person can fix it.
    """

    text: str
    index: int | None = None  # the entry (position in the entries array); None: the file
    entry_id: str | None = None
    line: int | None = None
    fix: str | None = None
    field: str | None = None
    value: str | None = None

    @property
    def where(self) -> str:
        if self.index is None:
            return ""
        short = f" ({self.entry_id[:8]})" if self.entry_id else ""
        return f"entry {self.index + 1}{short}: "

    def __str__(self) -> str:
        return self.where + self.text


def _entry_problems(raw: dict[str, Any], index: int, line: int | None) -> list[LoadProblem]:
    eid = raw.get("id") if isinstance(raw.get("id"), str) else None
    out: list[LoadProblem] = []

    def add(text: str, fix: str | None = None, name: str | None = None,
            value: str | None = None) -> None:
        out.append(LoadProblem(text, index, eid, line, fix, name, value))

    def text_ok(name: str, value: Any) -> bool:
        if not isinstance(value, str):
            add(f"{name} is {value_kind(value)}, not a string")
            return False
        bad = lone_surrogate(value)
        if bad:
            add(f"{name} holds a lone surrogate ({bad}), which has no UTF-8 form")
            return False
        return True

    for name in _REQUIRED_TEXT:
        if name not in raw or raw[name] is None:
            state = "missing" if name not in raw else "null"
            created = raw.get("created_at")
            if name == "updated_at" and isinstance(created, str) and not lone_surrogate(created):
                add(f"{name} is {state} (fix: copy created_at)", "updated_at", name, created)
            else:
                add(f"{name} is {state}")
        else:
            text_ok(name, raw[name])
    for name, allowed in _ENUM_FIELDS.items():
        value = raw.get(name)
        if value is None:
            add(f"{name} is {'missing' if name not in raw else 'null'}")
        elif not isinstance(value, str):
            add(f"{name} is {value_kind(value)}, not one of {', '.join(allowed)}")
        elif value not in allowed:
            canon, _note = normalise_enum(value, allowed)
            if canon is not None:
                add(f"{name} {value!r} is not CodeSmith's spelling {canon!r}", "enum", name,
                    canon)
            else:
                add(f"{name} {value!r} is not one of {', '.join(allowed)}")
    for name in _OPTIONAL_TEXT:
        if raw.get(name) is not None:
            text_ok(name, raw[name])
    if "source_links" in raw:
        links = raw["source_links"]
        if links is None:
            add("source_links is null (it may be absent, never null)", "drop", "source_links")
        elif not isinstance(links, list):
            add(f"source_links is {value_kind(links)}, not a list of strings")
        else:
            for n, link in enumerate(links):
                text_ok(f"source_links[{n}]", link)
    return out


def _plain(raw: dict[str, Any]) -> bool:
    """True when :func:`_entry_problems` finds nothing in this entry, given that none of its
    strings holds a lone surrogate: a handful of type and set checks, no per-field problem."""
    get = raw.get
    try:  # a set holds only the allowed strings; a list or object value is unhashable
        if not (get("bucket") in _BUCKET_SET and get("severity") in _SEVERITY_SET
                and get("confidence") in _CONFIDENCE_SET and get("status") in _STATUS_SET):
            return False
    except TypeError:
        return False
    if not (isinstance(get("id"), str) and isinstance(get("title"), str)
            and isinstance(get("description"), str) and isinstance(get("created_at"), str)
            and isinstance(get("updated_at"), str)):
        return False
    for name in _OPTIONAL_TEXT:
        value = get(name)
        if value is not None and not isinstance(value, str):
            return False
    if "source_links" in raw:
        links = raw["source_links"]
        return isinstance(links, list) and all(isinstance(link, str) for link in links)
    return True


def load_problems(data: Any, *, bom: bool = False, empty: bool = False,
                  lines: list[int | None] | None = None,
                  surrogates: bool = True) -> list[LoadProblem]:
    """Every reason CodeSmith's ``SlopLedger::load_at`` refuses this file (none: it loads).

    ``data`` is the parsed JSON (duplicate keys, NaN and junk are refused earlier, by the JSON
    reader, as CodeSmith refuses them); ``bom``: the bytes start with a UTF-8 BOM; ``empty``:
    the file holds no JSON at all; ``lines``: the line of each entry, when known;
    ``surrogates=False``: no string in ``data`` can hold a lone surrogate (the JSON text passed
    ``textio.json_surrogate_free``), so well-typed entries need no closer look. Linear.
    """
    out: list[LoadProblem] = []
    if bom:
        out.append(LoadProblem("the file starts with a UTF-8 byte order mark", fix="bom"))
    if empty:
        out.append(LoadProblem('the file is empty; CodeSmith needs {"entries": []}',
                               fix="empty"))
        return out
    if isinstance(data, list):
        out.append(LoadProblem('top level is a bare array, not {"entries": [...]}',
                               fix="wrap"))
        raw_entries: Any = data
    elif isinstance(data, dict):
        raw_entries = data.get("entries")
        if raw_entries is None:
            state = "missing" if "entries" not in data else "null"
            out.append(LoadProblem(f'"entries" is {state}', fix="entries"))
            return out
        if not isinstance(raw_entries, list):
            out.append(LoadProblem(f'"entries" is {value_kind(raw_entries)}, not a list'))
            return out
    else:
        out.append(LoadProblem(f"top level is {value_kind(data)}, not an object"))
        return out
    for index, raw in enumerate(raw_entries):
        if not surrogates and isinstance(raw, dict) and _plain(raw):
            continue
        line = lines[index] if lines is not None and index < len(lines) else None
        if not isinstance(raw, dict):
            out.append(LoadProblem(f"is {value_kind(raw)}, not an object", index, None, line))
            continue
        out.extend(_entry_problems(raw, index, line))
    return out


@dataclass
class SlopFile:
    path: Path
    exists: bool
    form: str  # "object" or "array"
    entries: list[SlopEntry]
    top_extra: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    load_problems: list[LoadProblem] = field(default_factory=list)  # CodeSmith refuses it


_ID_KEY = re.compile(r'"id"\s*:')


def _entry_lines(text: str) -> list[int]:
    """Best-effort line of each entry: lines holding an ``"id":`` key, in order. One pass:
    each key's line is the previous one's plus the line breaks between them."""
    lines: list[int] = []
    line, pos = 1, 0
    for m in _ID_KEY.finditer(text):
        start = m.start()
        line += text.count("\n", pos, start)
        pos = start
        lines.append(line)
    return lines


def _refuse_duplicate_fields(data: Any, duplicates: list[tuple[dict[str, Any], str]],
                             path: Path) -> None:
    """Refuse a key given twice where serde (CodeSmith's loader) refuses it: ``entries`` at
    the top, or a field of SlopEntry in an entry. serde skips unknown fields unread, so a key
    twice among them, or anywhere inside an unknown field's value, loads (the last one is
    read here)."""
    entries = data if isinstance(data, list) else (
        data.get("entries") if isinstance(data, dict) else None)
    in_entries = ({id(e) for e in entries if isinstance(e, dict)} if isinstance(entries, list)
                  else set())
    for obj, key in duplicates:
        if (obj is data and key == "entries") or (id(obj) in in_entries and key in _KNOWN):
            raise DataError(f"invalid JSON: duplicate key {key!r}", path=path)


def parse_slop(text: str, path: Path, *, bom: bool = False) -> SlopFile:
    """Parse the file's text (without its BOM; ``bom`` says whether it had one)."""
    return parse_slop_data(text, path, bom=bom)[0]


def parse_slop_data(text: str, path: Path, *, bom: bool = False, raw: bytes | None = None
                    ) -> tuple[SlopFile, Any]:
    """:func:`parse_slop`, and the parsed JSON it read (``{"entries": []}`` for an empty
    file), for writers that need both from one parse. ``raw``: the file's bytes, when the
    caller has them. Linear in the text: one JSON parse, a few whole-text scans, and a
    handful of checks per entry."""
    with acyclic_build(promote=True):  # the parse builds only acyclic values
        return _parse(text, path, bom, raw)


def _parse(text: str, path: Path, bom: bool, raw: bytes | None) -> tuple[SlopFile, Any]:
    empty = not text.strip()
    duplicates: list[tuple[dict[str, Any], str]] = []
    data = {"entries": []} if empty else load_json(text, path, raw, duplicates)
    if duplicates:
        _refuse_duplicate_fields(data, duplicates, path)
    spath = str(path)
    top_extra: dict[str, Any] = {}
    if isinstance(data, list):
        form = "array"
        raw_entries: list[Any] = data
    elif isinstance(data, dict):
        form = "object"
        raw_entries = data.get("entries") or []
        top_extra = as_text({k: v for k, v in data.items() if k != "entries"})
        if not isinstance(raw_entries, list):
            raise DataError('"entries" is not a list', path=path, hint=_WHOLE_FILE_HINT)
    else:
        raise DataError("top level is neither an object nor an array", path=path,
                        hint=_WHOLE_FILE_HINT)
    found = _entry_lines(text)
    lines: list[int | None] = (list(found) if len(found) == len(raw_entries)
                               else [None] * len(raw_entries))
    plain_text = json_surrogate_free(text)
    refusals = load_problems(data, bom=bom, empty=empty, lines=lines,
                             surrogates=not plain_text)
    problems = [Problem("slop", spath, p.line if p.index is not None else 1, LOAD_PREFIX + str(p))
                for p in refusals]
    if top_extra:
        problems.append(Problem("slop", spath, 1, "unknown top-level field(s) "
                                + ", ".join(sorted(top_extra)) + " (kept)"))
    by_entry: dict[int, list[str]] = {}
    for p in refusals:
        if p.index is not None:
            by_entry.setdefault(p.index, []).append(p.text)
    entries: list[SlopEntry] = []
    for index, raw in enumerate(raw_entries):
        line = lines[index]
        if not isinstance(raw, dict):
            continue  # reported by load_problems; there is nothing to read
        if plain_text and index not in by_entry and raw.keys() <= _KNOWN:
            # CodeSmith loads it as is: every value is already what the reader hands on
            get = raw.get
            entries.append(slop_entry((
                spath, index, line, raw["id"], raw["bucket"],
                raw["severity"], raw["confidence"], get("owner"),
                tuple(get("source_links") or ()), raw["title"], raw["description"],
                raw["status"], get("cleanup_recommendation"), raw["created_at"],
                raw["updated_at"], get("task_id"), get("thread_id"), {}, ())))
            continue
        notes = list(by_entry.get(index, []))
        values: dict[str, str | None] = {}
        for name, allowed in _ENUM_FIELDS.items():
            value, _problem = normalise_enum(raw.get(name), allowed)
            values[name] = value if value is not None else (
                raw[name] if isinstance(raw.get(name), str) else None)
        links = raw.get("source_links") or []
        if not isinstance(links, list):
            links = [str(links)]
        extra = as_text({k: v for k, v in raw.items() if k not in KNOWN_FIELDS})
        if extra:
            note = "unknown field(s) " + ", ".join(sorted(extra)) + " (kept)"
            notes.append(note)

        def text_field(name: str, raw: dict[str, Any] = raw) -> str | None:
            # a lone surrogate (reported above) is shown as U+FFFD: it has no UTF-8 form
            v = raw.get(name)
            return None if v is None else as_text(str(v))

        # an id that is absent or not text gets a stand-in; "" is CodeSmith's id as written
        entry_id = text_field("id") if isinstance(raw.get("id"), str) else None
        if entry_id is None:
            entry_id = f"missing-id-{index}"
        if extra:
            problems.append(Problem("slop", spath, line, f"entry {entry_id[:8]}: {note}"))

        entries.append(SlopEntry(
            path=spath, index=index, line=line, id=entry_id,
            bucket=values["bucket"], severity=values["severity"],
            confidence=values["confidence"], owner=text_field("owner"),
            source_links=tuple(as_text(str(x)) for x in links),
            title=text_field("title") or "", description=text_field("description") or "",
            status=values["status"],
            cleanup_recommendation=text_field("cleanup_recommendation"),
            created_at=text_field("created_at"), updated_at=text_field("updated_at"),
            task_id=text_field("task_id"), thread_id=text_field("thread_id"),
            extra=extra, problems=tuple(notes)))
    return SlopFile(path=path, exists=True, form=form, entries=entries, top_extra=top_extra,
                    problems=problems, load_problems=refusals), data


def read_slop(path: Path, max_bytes: int | None = None) -> SlopFile:
    """Read the slop ledger; a missing file is an empty ledger (as in CodeSmith)."""
    if not path.exists():
        return SlopFile(path=path, exists=False, form="object", entries=[])
    raw = read_bytes(path, max_bytes)
    text = decode_utf8(raw, path)
    return parse_slop_data(text, path, bom=raw.startswith(b"\xef\xbb\xbf"), raw=raw)[0]
