"""CodeSmith slop ledger operations: summary, query, export (reads); append, update (writes).

Reads go straight to the JSON file through the reader (``toolkit.sources.slop``), not through
the DuckDB store: the reader is linear, within about 3x of ``json.loads`` of the same bytes
(``bench/bench_slop.py``), a read then sees exactly the bytes CodeSmith last wrote, and an
update must act on the file anyway. Writes are linear too: they find the entries they touch
with the C JSON scanner and diff only the lines that changed.

The semantics follow CodeSmith's ``slop_ledger.rs`` (FORMATS.md §2.3-2.4) with these additions
and differences, each on purpose:

- query also filters by ``owner`` (case-insensitive exact), ``confidence`` and age
  (``older_than`` days, from ``created_at`` to the injected "today"); ``limit=None`` or ``0``
  means no limit (CodeSmith's tool defaults to 50, and so does the CLI).
- an id prefix that matches several entries is refused with the list (CodeSmith silently takes
  the first); an unknown id is an error (CodeSmith replies "No slop ledger entry found").
- an update that changes nothing (same status, no new cleanup text) writes nothing.
- the export escapes ``|`` and folds line breaks in table cells and headings so a hostile title
  cannot break the table; otherwise it is CodeSmith's layout byte for byte. It is passed through
  ``toolkit.redact.redact`` (a superset of CodeSmith's own redaction; see that module).

Writes refuse a file CodeSmith cannot load (``toolkit.sources.slop.load_problems``: exit 65,
every problem named) and check their own result by the same rules, so they never write one;
``repair`` applies the fixes those rules name. Writes keep everything CodeSmith's own rewrite
would lose: unknown top-level and entry fields stay where they are, and only the bytes of the
changed or added entries change (the rest of the file, its indent, line endings and trailing
newline are spliced through untouched). Every write is locked, backed up, atomic, and refused
when the file changed on disk since it was read (``toolkit.safewrite``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import json
import os
import re
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolkit import clock
from toolkit.errors import ConflictError, DataError, NotFoundError, RefusedError, UsageError
from toolkit.records import (
    SLOP_BUCKETS,
    SLOP_CONFIDENCES,
    SLOP_SEVERITIES,
    SLOP_STATUSES,
    SlopEntry,
)
from toolkit.sources.slop import (
    LOAD_PREFIX,
    LoadProblem,
    SlopFile,
    load_problems,
    normalise_enum,
    parse_slop_data,
    read_slop,
)
from toolkit.textio import (
    HUNK_HEADER,
    decode_utf8,
    json_surrogate_free,
    lone_surrogate,
    within,
)

DEFAULT_LIMIT = 50
LOCK_TIMEOUT = 10.0  # seconds a write waits for another toolkit run, then exit 75
EXPORT_TITLE = "Slop Ledger Export"
FIELD_ORDER = ("id", "bucket", "severity", "confidence", "owner", "source_links", "title",
               "description", "status", "cleanup_recommendation", "created_at", "updated_at",
               "task_id", "thread_id")
_ENUMS = {"bucket": SLOP_BUCKETS, "severity": SLOP_SEVERITIES, "confidence": SLOP_CONFIDENCES,
          "status": SLOP_STATUSES}
_KNOWN_VALUES = frozenset(v for values in _ENUMS.values() for v in values)
_DEBUG_NAMES = {v: "".join(part[:1].upper() + part[1:] for part in v.split("_"))
                for v in _KNOWN_VALUES}


# --------------------------------------------------------------------------- values

def parse_enum(name: str, value: str) -> str:
    """A user's enum input, read leniently as CodeSmith's tools do (trim, lowercase, ``done``,
    ``wontfix``, ``inprogress``; also ``InProgress``). Raises UsageError naming the choices."""
    allowed = _ENUMS[name]
    got, _problem = normalise_enum(value, allowed)
    if got is None:
        raise UsageError(f"unknown {name} {value!r}; use one of {', '.join(allowed)}")
    return got


# CodeSmith's SlopEntryStatus::from_str (slop_ledger.rs): trimmed and lowercased, then one of
# these; slop_ledger_update refuses any other status.
_CODESMITH_STATUSES = {**{s: s for s in SLOP_STATUSES}, "inprogress": "in_progress",
                       "done": "resolved", "wontfix": "wont_fix"}


def parse_status(value: str) -> str:
    """A new status for an entry, read exactly as CodeSmith's update tool reads it (see
    ``_CODESMITH_STATUSES``): ``In Progress`` or ``won't fix``, which :func:`parse_enum`
    reads for filters and new entries, are refused, as CodeSmith refuses them."""
    got = _CODESMITH_STATUSES.get(value.strip().lower())
    if got is None:
        raise UsageError(f"unknown status {value!r}; use one of {', '.join(SLOP_STATUSES)}")
    return got


def debug_name(value: str | None) -> str:
    """Rust ``Debug`` formatting of a snake_case enum value: ``in_progress`` -> ``InProgress``."""
    if value is None:
        return "[???]"
    if value not in _KNOWN_VALUES:
        return value  # an unknown raw value read with a warning: shown as written
    return _DEBUG_NAMES[value]


def rfc3339(now: dt.datetime | None = None) -> str:
    """A timestamp as chrono's ``Utc::now().to_rfc3339()`` writes it: ``+00:00`` offset and a
    fraction of 0, 3, 6 or 9 digits (``2026-05-04T14:20:11.482913207+00:00``)."""
    if now is None:
        ns = time.time_ns()
        seconds, frac_ns = divmod(ns, 1_000_000_000)
        base = dt.datetime.fromtimestamp(seconds, dt.UTC)
    else:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        base = now.astimezone(dt.UTC)
        frac_ns = base.microsecond * 1000
        base = base.replace(microsecond=0)
    text = base.strftime("%Y-%m-%dT%H:%M:%S")
    if frac_ns:
        if frac_ns % 1_000_000 == 0:
            text += f".{frac_ns // 1_000_000:03d}"
        elif frac_ns % 1000 == 0:
            text += f".{frac_ns // 1000:06d}"
        else:
            text += f".{frac_ns:09d}"
    return text + "+00:00"


_TS = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:?\d{2})?$")


def parse_timestamp(value: str | None) -> dt.datetime | None:
    """An RFC 3339 timestamp (any fraction length) as an aware datetime, or None."""
    if not value:
        return None
    m = _TS.match(value.strip())
    if not m:
        return None
    frac = (m.group(3) or "")[:6].ljust(6, "0")
    zone = m.group(4) or "+00:00"
    if zone == "Z":
        zone = "+00:00"
    elif ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    try:
        return dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}.{frac}{zone}")
    except ValueError:
        return None


def age_days(entry: SlopEntry, today: dt.date) -> int | None:
    """Whole days from the entry's ``created_at`` (its UTC date) to ``today``; None if unknown."""
    created = parse_timestamp(entry.created_at)
    if created is None:
        return None
    return (today - created.astimezone(dt.UTC).date()).days


# --------------------------------------------------------------------------- reading

def load(path: Path, max_bytes: int | None = None) -> SlopFile:
    """The slop ledger at ``path`` (a missing file is an empty ledger, as in CodeSmith)."""
    return read_slop(path, max_bytes)


def owner_key(owner: str | None) -> str:
    """What ``--owner`` compares: owners that differ only in case are one owner (the
    toolkit's rule; CodeSmith has no owner filter). The site groups owners by it too."""
    return (owner or "").lower()


def owner_groups(owners: Iterable[str | None]) -> dict[str, str]:
    """Each owner spelling of ``owners`` (in file order) -> the spelling that names its group
    (:func:`owner_key`): the most used, the first in file order among equals."""
    counts: dict[str, Counter[str]] = {}
    for owner in owners:
        if owner:
            counts.setdefault(owner_key(owner), Counter())[owner] += 1
    out: dict[str, str] = {}
    for spellings in counts.values():
        name = spellings.most_common(1)[0][0]  # most_common keeps first-seen order on ties
        out.update((spelling, name) for spelling in spellings)
    return out


@dataclass(frozen=True)
class SlopFilter:
    """Query filters, ANDed. Enum values must already be canonical (see ``parse_enum``)."""

    bucket: str | None = None
    severity: str | None = None
    status: str | None = None
    search: str | None = None
    owner: str | None = None
    confidence: str | None = None
    older_than: int | None = None  # days; needs ``today``
    today: dt.date | None = None
    limit: int | None = DEFAULT_LIMIT  # None or 0: no limit

    def matches(self, e: SlopEntry) -> bool:
        if self.bucket is not None and e.bucket != self.bucket:
            return False
        if self.severity is not None and e.severity != self.severity:
            return False
        if self.status is not None and e.status != self.status:
            return False
        if self.confidence is not None and e.confidence != self.confidence:
            return False
        if self.owner is not None and owner_key(e.owner) != owner_key(self.owner):
            return False
        if self.search is not None:
            q = self.search.lower()
            if q not in e.title.lower() and q not in e.description.lower():
                return False
        if self.older_than is not None:
            age = age_days(e, clock.today(self.today))
            if age is None or age <= self.older_than:
                return False
        return True


def codesmith_dict(e: SlopEntry) -> dict[str, Any]:
    """An entry as CodeSmith's ``slop_ledger_query`` returns it: its fields in CodeSmith's
    order (the raw timestamps as written)."""
    return {name: (list(e.source_links) if name == "source_links" else getattr(e, name))
            for name in FIELD_ORDER}


@dataclass
class QueryResult:
    entries: list[SlopEntry]  # in file order, at most ``limit``
    matched: int  # before the limit
    total: int  # entries in the file


def query(entries: Sequence[SlopEntry], flt: SlopFilter) -> QueryResult:
    """Entries matching every filter, in file (insertion) order, cut to the limit."""
    # (the CLI's options and the API's arguments refuse these first: toolkit.argrules)
    if flt.older_than is not None and flt.older_than < 0:
        raise UsageError("older_than must be 0 or more days")
    if flt.limit is not None and flt.limit < 0:
        raise UsageError("limit must be 0 (no limit) or more")
    hits = [e for e in entries if flt.matches(e)]
    shown = hits[:flt.limit] if flt.limit else hits
    return QueryResult(entries=shown, matched=len(hits), total=len(entries))


@dataclass
class Summary:
    total: int
    open: int  # open + in_progress (CodeSmith's "open")
    resolved: int
    accepted: int  # accepted + wont_fix (as CodeSmith counts them)
    by_bucket: dict[str, int]
    by_bucket_status: dict[str, dict[str, int]]
    by_status: dict[str, int]

    def codesmith_text(self) -> str:
        """CodeSmith's ``summary()`` text, line for line."""
        out = (f"Slop Ledger: {self.total} total | {self.open} open | {self.resolved} resolved"
               f" | {self.accepted} accepted\n")
        for bucket, count in self.by_bucket.items():
            out += f"  {bucket}: {count}\n"
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "open": self.open, "resolved": self.resolved,
                "accepted": self.accepted, "by_status": self.by_status,
                "by_bucket": self.by_bucket, "by_bucket_status": self.by_bucket_status}


def summarize(entries: Iterable[SlopEntry]) -> Summary:
    """Counts by bucket and by status (buckets sorted, like CodeSmith's BTreeMap). "open" is
    ``open`` and ``in_progress``, as the site and the handoff count open slop: a status of no
    known kind (or none; CodeSmith loads neither) is in none of the three counts, only in
    the total and by status."""
    total = opened = resolved = accepted = 0
    buckets: dict[str, dict[str, int]] = {}
    statuses: dict[str, int] = {}
    for e in entries:
        total += 1
        status = e.status or "[???]"
        if e.status == "resolved":
            resolved += 1
        elif e.status in ("accepted", "wont_fix"):
            accepted += 1
        elif e.status in ("open", "in_progress"):
            opened += 1
        row = buckets.setdefault(e.bucket or "[???]", {})
        row[status] = row.get(status, 0) + 1
        statuses[status] = statuses.get(status, 0) + 1
    order = {s: i for i, s in enumerate(SLOP_STATUSES)}

    def status_key(s: str) -> tuple[int, str]:
        return (order.get(s, len(order)), s)

    by_bucket_status = {b: dict(sorted(buckets[b].items(), key=lambda kv: status_key(kv[0])))
                        for b in sorted(buckets)}
    return Summary(total=total, open=opened, resolved=resolved, accepted=accepted,
                   by_bucket={b: sum(v.values()) for b, v in by_bucket_status.items()},
                   by_bucket_status=by_bucket_status,
                   by_status=dict(sorted(statuses.items(), key=lambda kv: status_key(kv[0]))))


# --------------------------------------------------------------------------- export

def truncate(text: str, max_chars: int) -> str:
    """CodeSmith's ``truncate_str``: at most ``max_chars`` characters, ``…`` when cut."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars - 1] + "…"


def first_line(text: str) -> str | None:
    """Rust's ``text.lines().next()``, as CodeSmith's listing takes a description's first
    line: None for empty text; else the text up to the first ``\\n`` (without a ``\\r`` just
    before it). Only ``\\n`` ends a line there, unlike ``str.splitlines``."""
    if not text:
        return None
    line, nl, _rest = text.partition("\n")
    return line[:-1] if nl and line.endswith("\r") else line


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _one_line(text: str) -> str:
    return _LINE_BREAK.sub(" ", text) if "\n" in text or "\r" in text else text


def _cell(text: str) -> str:
    return _one_line(text).replace("|", "\\|")


def export_markdown(entries: Sequence[SlopEntry], *, title: str | None = None,
                    now: dt.datetime | None = None, home: str | None = None,
                    redact_output: bool = True) -> str:
    """CodeSmith's Markdown handoff (FORMATS.md §2.4), redacted.

    ``now`` is the "Generated at" time (default: ``toolkit.clock.now``); ``home`` is passed to
    the redactor (default: the real home directory).
    """
    from toolkit.redact import redact, redact_each

    # a title is cut for the table after it is redacted: cut first, a key straddling the cut
    # is too short for its detector and its first characters would stay
    titles = [e.title for e in entries]
    shown = redact_each(titles, home=home) if redact_output else titles
    when = clock.utc(now or clock.now())
    heading = title if title is not None else EXPORT_TITLE
    out = [f"# {heading}\n\n",
           f"_Generated at {when.strftime('%Y-%m-%d %H:%M UTC')} — {len(entries)} entries_\n\n"]
    if not entries:
        out.append("_(no entries)_\n")
    else:
        groups: dict[str, list[tuple[SlopEntry, str]]] = {}  # entries with their titles
        for e, shown_title in zip(entries, shown, strict=True):
            groups.setdefault(e.bucket or "[???]", []).append((e, shown_title))
        for bucket in sorted(groups):
            group = groups[bucket]
            out.append(f"## {bucket}\n\n")
            out.append("| ID | Severity | Confidence | Status | Title | Source |\n")
            out.append("|---|---|---|---|---|---|\n")
            for e, shown_title in group:
                source = e.source_links[0] if e.source_links else "-"
                out.append(f"| {_cell(e.short_id)} | {debug_name(e.severity)} | "
                           f"{debug_name(e.confidence)} | {debug_name(e.status)} | "
                           f"{_cell(truncate(shown_title, 60))} | {_cell(source)} |\n")
            out.append("\n")
            for e, _ in group:
                out.append(f"### {_one_line(e.short_id)} — {_one_line(e.title)}\n\n")
                out.append(f"- **Severity**: {debug_name(e.severity)}\n")
                out.append(f"- **Confidence**: {debug_name(e.confidence)}\n")
                out.append(f"- **Status**: {debug_name(e.status)}\n")
                if e.owner is not None:
                    out.append(f"- **Owner**: {e.owner}\n")
                if e.source_links:
                    out.append("- **Sources**:\n")
                    out.extend(f"  - {link}\n" for link in e.source_links)
                out.append(f"\n{e.description}\n")
                if e.cleanup_recommendation is not None:
                    out.append(f"\n**Cleanup**: {e.cleanup_recommendation}\n")
                out.append("\n---\n\n")
    text = "".join(out)
    return redact(text, home=home) if redact_output else text


# --------------------------------------------------------------------------- writing: layout

@dataclass
class _Doc:
    """A slop file as read for a write: its exact text, parsed data and conventions."""

    path: Path
    raw: bytes | None  # None when the file does not exist
    text: str  # without BOM
    data: Any  # parsed JSON (dict or list), or None for a missing/empty file
    bom: bool
    newline: str

    @property
    def entries(self) -> list[Any]:
        if isinstance(self.data, list):
            return self.data
        if isinstance(self.data, dict) and isinstance(self.data.get("entries"), list):
            return self.data["entries"]
        return []


def _parse_doc(path: Path, raw: bytes | None) -> tuple[_Doc, SlopFile]:
    if raw is None:
        doc = _Doc(path, None, "", None, False, "\n")
        return doc, SlopFile(path=path, exists=False, form="object", entries=[])
    text = decode_utf8(raw, path)
    bom = raw.startswith(b"\xef\xbb\xbf")
    # validates (NaN, duplicates, depth, shape), builds entries, finds CodeSmith's refusals;
    # the writers edit the same parse
    sf, data = parse_slop_data(text, path, bom=bom, raw=raw)
    if not text.strip():
        data = None
    doc = _Doc(path, raw, text, data, bom, "\r\n" if "\r\n" in text else "\n")
    return doc, sf


def _refusal(path: Path, problems: Sequence[LoadProblem], what: str, hint: str) -> DataError:
    """One error naming every reason CodeSmith's loader refuses the file."""
    listing = "; ".join(str(p) for p in problems)
    return DataError(f"{what}: {listing}", path=path, hint=hint)


def refuse_unloadable(sf: SlopFile) -> None:
    """Refuse to write into a file CodeSmith cannot load (exit 65, every problem named)."""
    if sf.load_problems:
        raise _refusal(sf.path, sf.load_problems,
                       LOAD_PREFIX.rstrip(": ") + f" ({len(sf.load_problems)} problem(s))",
                       "Run `toolkit slop repair` to see the safe fixes; nothing was written")


def _check_result(path: Path, text: str, parsed: Any = None) -> None:
    """The writers' last check: the text about to be written loads in CodeSmith. ``parsed``:
    the value ``json.loads(text)`` already returned, when the caller has it."""
    problems = load_problems(json.loads(text) if parsed is None else parsed,
                             empty=not text.strip(), surrogates=not json_surrogate_free(text))
    if problems:
        raise _refusal(path, problems, "the result would not load in CodeSmith",
                       "Nothing was written")


class _WriteSession:
    """One locked read-modify-write of the slop file (``toolkit.safewrite`` rules).

    The lock is an ``flock`` on the ledger's folder (no lock file is left in CodeSmith's state
    folder); the backup goes to ``<folder>/.backups/<UTC time>/slop_ledger.json``; the write is
    an atomic replace refused when the file is no longer the version read. CodeSmith itself
    takes no lock, so the last check runs right before the rename. The backup's folder is
    named by ``now``, the time the caller gave its entries (``append``, ``update``), else by
    the real time, as the ledger editor's backups are.
    """

    def __init__(self, path: Path, max_bytes: int | None, force: bool, dry_run: bool,
                 lock_timeout: float | None = None, now: dt.datetime | None = None) -> None:
        self.path = path
        self.now = now
        self.lock_timeout = LOCK_TIMEOUT if lock_timeout is None else lock_timeout
        self.dry_run = dry_run
        self.max_bytes = max_bytes
        self.force = force
        self.snapshot: Any = None
        self._lock: Any = None

    def __enter__(self) -> _WriteSession:
        from toolkit import safewrite

        if self.path.is_dir():
            raise DataError("is a folder, not the slop ledger JSON file", path=self.path)
        folder = self.path.parent
        if not folder.exists():
            if self.dry_run:
                return self  # nothing to lock, and a dry run creates nothing
            try:
                folder.mkdir(parents=True)
            except OSError as exc:
                raise DataError(f"cannot create the slop ledger folder: {exc.strerror}",
                                path=folder) from None
        self._lock = safewrite.FileLock(folder, timeout=self.lock_timeout,
                                        what="the slop ledger")
        self._lock.acquire()
        safewrite.cleanup_orphan_temps(folder)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            self._lock.release()

    def read(self) -> tuple[_Doc, SlopFile]:
        from toolkit import safewrite

        if self.path.exists():
            safewrite.check_editable(self.path, None, force=self.force)
            self.snapshot = safewrite.FileSnapshot.read(self.path, self.max_bytes)
            result = _parse_doc(self.path, self.snapshot.data)
        else:
            result = _parse_doc(self.path, None)
        safewrite.pause("after_read")
        return result

    def write(self, data: bytes) -> Path | None:
        """Back up the version read, then replace the file; returns the backup path."""
        from toolkit import safewrite

        if self.snapshot is None:
            if self.path.exists():
                raise ConflictError("appeared on disk since it was read; nothing written",
                                    path=self.path,
                                    hint="Run the command again to work on the current version")
            safewrite.atomic_replace(self.path, data)
            return None
        if safewrite.changed_since(self.snapshot):
            raise ConflictError("changed on disk since it was read; nothing written",
                                path=self.path,
                                hint="Run the command again to work on the current version")
        folder = self.path.parent
        backups_dir = folder / ".backups"
        if backups_dir.is_symlink() and not within(backups_dir, folder, strictly=True):
            # the vault's wall (FAULTS G3), for this folder
            real, mine = os.path.realpath(backups_dir), os.path.realpath(folder)
            raise RefusedError(
                f"is a symlink to {real}, outside the slop ledger's folder ({mine}); "
                "refusing to write the backup through it", path=backups_dir,
                hint="Replace the link with a folder; nothing was written")
        stamp = clock.utc(self.now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S%fZ")
        made = not backups_dir.exists()
        dest = safewrite.unique_dir(backups_dir, stamp)
        backups = safewrite.backup_files([self.snapshot], dest)
        try:
            safewrite.atomic_replace(self.snapshot, data, expected=self.snapshot)
        except BaseException:  # refused (changed meanwhile), failed, or Ctrl-C (KeyboardInterrupt)
            if not _holds(self.path, data):  # nothing written: no backup of it either
                shutil.rmtree(dest, ignore_errors=True)
                if made:  # .backups itself, made for this backup
                    with contextlib.suppress(OSError):
                        dest.parent.rmdir()
            raise
        return backups[0]


def _holds(path: Path, data: bytes) -> bool:
    """Whether the file at ``path`` now holds exactly ``data``."""
    try:
        return path.read_bytes() == data
    except OSError:
        return False


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip_ws(t: str, i: int) -> int:
    m = _WS.match(t, i)
    return m.end() if m else i


@dataclass
class _Layout:
    open: int  # offset of the entries array's "["
    close: int  # offset of its "]"
    elements: list[tuple[int, int]] = field(default_factory=list)


def _layout(t: str) -> _Layout | None:
    """Where the entries array and each of its elements are in the (valid JSON) text. Each
    value is skipped by the C JSON scanner: linear, and no Python step per character."""
    decode = _DECODER.raw_decode
    i = _skip_ws(t, 0)
    if i >= len(t):
        return None
    if t[i] == "[":
        start = i
    elif t[i] == "{":
        start = -1
        i += 1
        while True:
            i = _skip_ws(t, i)
            if t[i] == "}":
                return None
            key, i = decode(t, i)
            i = _skip_ws(t, _skip_ws(t, i) + 1)  # past ":"
            if key == "entries" and t[i] == "[":
                start = i
                break
            i = _skip_ws(t, decode(t, i)[1])
            if t[i] == ",":
                i += 1
    else:
        return None
    lay = _Layout(start, -1)
    i = start + 1
    while True:
        i = _skip_ws(t, i)
        if t[i] == "]":
            lay.close = i
            return lay
        end = decode(t, i)[1]
        lay.elements.append((i, end))
        i = _skip_ws(t, end)
        if t[i] == ",":
            i += 1


def _find_entry_text(t: str, obj: Any) -> tuple[int, int] | None:
    """Where the entry ``obj`` is written in the text, found from its id without reading the
    entries before it: the ``{"id": ...`` that the C scanner reads back as exactly ``obj``
    and that stands as an array element (after ``[`` or ``,``). None when it is written
    another way (id not first, escaped differently): the caller then reads the whole layout.
    A wrong guess cannot reach the disk: ``_checked`` compares the result with what it must
    parse to."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        return None
    needle = json.dumps(obj["id"], ensure_ascii=False)
    at = t.find(needle)
    while at >= 0:
        colon = _skip_ws_back(t, at)
        key = _skip_ws_back(t, colon - 1) if t[colon - 1:colon] == ":" else -1
        if key >= 4 and t[key - 4:key] == '"id"':
            brace = _skip_ws_back(t, key - 4) - 1
            before = _skip_ws_back(t, brace) - 1 if brace >= 0 else -1
            if t[brace:brace + 1] == "{" and before >= 0 and t[before] in "[,":
                try:
                    value, end = _DECODER.raw_decode(t, brace)
                except ValueError:
                    value, end = None, -1
                if value == obj:
                    return brace, end
        at = t.find(needle, at + 1)
    return None


def _skip_ws_back(t: str, i: int) -> int:
    """The offset just after the last non-space character before ``i``."""
    while i > 0 and t[i - 1] in " \t\r\n":
        i -= 1
    return i


def _line_indent(t: str, pos: int) -> str:
    """The leading whitespace of the line holding ``pos``."""
    line_start = t.rfind("\n", 0, pos) + 1
    m = re.match(r"[ \t]*", t[line_start:pos])
    return m.group(0) if m else ""


def _indent_unit(t: str) -> str | None:
    """The file's indent step (first indented line), or None for a one-line (compact) file."""
    m = re.search(r"\n([ \t]+)\S", t)
    if m:
        return m.group(1)
    return None if "\n" not in t.strip() else "  "


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogates(text: str) -> str:
    """JSON text with each lone surrogate written as its ``\\udXXX`` escape (as it was read):
    the only form it has in a UTF-8 file."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _dump(obj: Any, unit: str | None, indent: str, newline: str) -> str:
    """Serialize like serde_json: pretty with the file's indent, or compact."""
    if unit is None:
        return _escape_surrogates(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
    text = _escape_surrogates(json.dumps(obj, ensure_ascii=False, indent=unit))
    text = text.replace("\n", "\n" + indent)
    return text.replace("\n", newline) if newline != "\n" else text


def _full_dump(doc: _Doc, data: Any) -> str:
    """Whole-file serialization (missing/empty file, or no entries array to splice into)."""
    unit = _indent_unit(doc.text) if doc.text.strip() else "  "
    text = _dump(data, unit, "", doc.newline)
    trailing = doc.text[len(doc.text.rstrip()):] if doc.text.strip() else ""
    return text + trailing


def _splice_append(doc: _Doc, new: list[dict[str, Any]], by_id: bool = True) -> str | None:
    """The text with ``new`` after the last entry. ``by_id``: find the last entry by its id
    (else read the whole layout)."""
    t = doc.text
    unit = _indent_unit(t)
    nl = doc.newline
    found = _find_entry_text(t, doc.entries[-1]) if doc.entries and by_id else None
    after = _skip_ws(t, found[1]) if found is not None else -1
    if found is not None and t[after:after + 1] == "]":
        lay: _Layout | None = _Layout(-1, -1, [found])  # the last entry is all it needs
    else:
        lay = _layout(t) if t.strip() else None
    if lay is None:
        return None
    if lay.elements:
        last_start, last_end = lay.elements[-1]
        if unit is None:
            chunk = "".join("," + _dump(e, None, "", nl) for e in new)
        else:
            ind = _line_indent(t, last_start)
            chunk = "".join("," + nl + ind + _dump(e, unit, ind, nl) for e in new)
        return t[:last_end] + chunk + t[last_end:]
    if unit is None:
        inner = ",".join(_dump(e, None, "", nl) for e in new)
        return t[:lay.open + 1] + inner + t[lay.close:]
    outer = _line_indent(t, lay.open)
    ind = outer + unit
    inner = ("," + nl + ind).join(_dump(e, unit, ind, nl) for e in new)
    return t[:lay.open + 1] + nl + ind + inner + nl + outer + t[lay.close:]


def _splice_replace(doc: _Doc, changes: dict[int, dict[str, Any]], by_id: bool = True
                    ) -> str | None:
    """The text with each changed entry (by index) written over its old bytes; one layout
    pass, whatever the number of changes (``by_id``: one entry is found by its id)."""
    t = doc.text
    spans: dict[int, tuple[int, int]] = {}
    if len(changes) == 1 and by_id:  # one entry (update): find it by its id
        [(index, _obj)] = changes.items()
        found = _find_entry_text(t, doc.entries[index]) if index < len(doc.entries) else None
        if found is not None:
            spans[index] = found
    if len(spans) != len(changes):
        lay = _layout(t)
        if lay is None or any(index >= len(lay.elements) for index in changes):
            return None
        spans = {index: lay.elements[index] for index in changes}
    unit = _indent_unit(t)
    out: list[str] = []
    pos = 0
    for index in sorted(changes):
        start, end = spans[index]
        ind = _line_indent(t, start) if unit is not None else ""
        out += [t[pos:start], _dump(changes[index], unit, ind, doc.newline)]
        pos = end
    out.append(t[pos:])
    return "".join(out)


def _checked(doc: _Doc, splices: Sequence[Callable[[], str | None]], expected: Any
             ) -> tuple[str, Any]:
    """The first spliced text that parses to exactly the expected data (each splice is tried
    only when the one before did not); else the whole file dumped. Returns the text and, for
    a spliced text, what it parsed to (None otherwise)."""
    for splice in splices:
        candidate = splice()
        if candidate is None:
            continue
        try:
            parsed = json.loads(candidate)
        except ValueError:
            continue
        if parsed == expected:
            return candidate, parsed
    return _full_dump(doc, expected), None


def _encode(doc: _Doc, text: str) -> bytes:
    return (b"\xef\xbb\xbf" if doc.bom else b"") + text.encode("utf-8")


def _common_length(a: str, b: str, *, tail: bool = False) -> int:
    """How many leading (``tail``: trailing) characters ``a`` and ``b`` share: compared in
    64 KiB slices, then halving the first slice that differs. Linear, in C."""
    n = min(len(a), len(b))

    def same(i: int, j: int) -> bool:  # characters i..j (from the end with ``tail``) agree
        if tail:
            return a[len(a) - j:len(a) - i] == b[len(b) - j:len(b) - i]
        return a[i:j] == b[i:j]

    lo = 0
    while lo < n:
        hi = min(lo + 65536, n)
        if same(lo, hi):
            lo = hi
            continue
        hi -= 1  # the slice differs: the shared part ends before hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if same(lo, mid):
                lo = mid
            else:
                hi = mid - 1
        return lo
    return lo


_CONTEXT = 3  # difflib's default, as ``diff -u``


def _diff(doc: _Doc, new_text: str) -> str:
    """Unified diff of the file. The lines both texts share at the start and the end are
    left out before difflib compares (it is quadratic in what it is given), all but the
    context around the change; hunk line numbers are then those of the whole file."""
    name = str(doc.path)
    old_text = doc.text
    head = _common_length(old_text, new_text)
    first = old_text.rfind("\n", 0, head) + 1  # start of the line of the first difference
    same_tail = min(_common_length(old_text[first:], new_text[first:], tail=True),
                    len(old_text) - first, len(new_text) - first)
    if same_tail and not (old_text[len(old_text) - same_tail - 1] == "\n"
                          == new_text[len(new_text) - same_tail - 1]):
        # the shared tail starts mid-line in one of them: it starts after its first break
        nl = old_text.find("\n", len(old_text) - same_tail)
        same_tail = 0 if nl < 0 else len(old_text) - nl - 1
    start = first
    for _ in range(_CONTEXT):
        if start > 0:
            start = old_text.rfind("\n", 0, start - 1) + 1
    stop = len(old_text) - same_tail
    for _ in range(_CONTEXT):
        if stop < len(old_text):
            nl = old_text.find("\n", stop)
            stop = len(old_text) if nl < 0 else nl + 1
    before = old_text[start:first].splitlines(keepends=True)
    after = old_text[len(old_text) - same_tail:stop].splitlines(keepends=True)
    shift = old_text.count("\n", 0, first) - len(before)
    old = before + old_text[first:len(old_text) - same_tail].splitlines(keepends=True) + after
    new = before + new_text[first:len(new_text) - same_tail].splitlines(keepends=True) + after

    def renumber(m: re.Match[str]) -> str:
        return (f"@@ -{int(m[1]) + shift}{'' if m[2] is None else ',' + m[2]} "
                f"+{int(m[3]) + shift}{'' if m[4] is None else ',' + m[4]} @@")

    out = []
    for line in difflib.unified_diff(old, new, fromfile=name, tofile=f"{name} (new)"):
        if shift and line.startswith("@@"):
            line = HUNK_HEADER.sub(renumber, line, count=1)
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


# --------------------------------------------------------------------------- writing: ops

@dataclass(frozen=True)
class NewEntry:
    """CodeSmith's ``slop_ledger_append`` inputs for one entry (raw, parsed by ``append``)."""

    bucket: str
    severity: str
    confidence: str
    title: str
    description: str
    owner: str | None = None
    source_links: tuple[str, ...] = ()
    task_id: str | None = None
    thread_id: str | None = None


def new_entries_from_json(data: Any, origin: str = "input") -> list[NewEntry]:
    """Entries from CodeSmith's tool input ``{"entries": [...]}`` (or a bare list/object)."""
    if isinstance(data, dict) and "entries" in data:
        data = data["entries"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise UsageError(f"{origin}: 'entries' must be a non-empty array")
    out = []
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise UsageError(f"{origin}: entry {n} is not an object")
        missing = [k for k in ("bucket", "severity", "confidence", "title", "description")
                   if not isinstance(item.get(k), str)]
        if missing:
            raise UsageError(f"{origin}: entry {n} lacks {', '.join(missing)} (strings)")
        links = item.get("source_links") or []
        if not isinstance(links, list):
            raise UsageError(f"{origin}: entry {n}: source_links must be a list of strings")
        for key, value in item.items():
            texts = value if key == "source_links" and isinstance(value, list) else [value]
            for text in texts:
                bad = lone_surrogate(text) if isinstance(text, str) else None
                if bad:
                    raise DataError(f"{origin}: entry {n}: {key} holds a lone surrogate ({bad}), "
                                    "which is not text and cannot be written as UTF-8")
        owner = item.get("owner")
        out.append(NewEntry(
            bucket=item["bucket"], severity=item["severity"], confidence=item["confidence"],
            title=item["title"], description=item["description"],
            owner=owner if isinstance(owner, str) else None,
            source_links=tuple(x for x in links if isinstance(x, str)),
            task_id=item.get("task_id") if isinstance(item.get("task_id"), str) else None,
            thread_id=item.get("thread_id") if isinstance(item.get("thread_id"), str) else None))
    return out


def require_text(value: str | None, what: str) -> None:
    """Refuse text that holds a lone surrogate (undecodable bytes in an argument, or a
    ``\\ud800`` escape): it has no UTF-8 form, and CodeSmith refuses it."""
    bad = lone_surrogate(value) if value is not None else None
    if bad:
        raise UsageError(f"{what} holds a lone surrogate ({bad}), which is not text; "
                         "give valid UTF-8 text")


def _build_entry(e: NewEntry, entry_id: str, stamp: str) -> dict[str, Any]:
    for what, value in (("the bucket", e.bucket), ("the severity", e.severity),
                        ("the confidence", e.confidence), ("the title", e.title),
                        ("the description", e.description), ("the owner", e.owner),
                        ("the task id", e.task_id), ("the thread id", e.thread_id),
                        *(("a source link", link) for link in e.source_links)):
        require_text(value, what)
    if not e.title.strip():
        raise UsageError("the title is empty; give a one-line title")
    if not e.description.strip():
        raise UsageError("the description is empty; say what was left behind")
    obj: dict[str, Any] = {
        "id": entry_id,
        "bucket": parse_enum("bucket", e.bucket),
        "severity": parse_enum("severity", e.severity),
        "confidence": parse_enum("confidence", e.confidence),
    }
    if e.owner is not None:
        obj["owner"] = e.owner
    if e.source_links:
        obj["source_links"] = list(e.source_links)
    obj.update(title=e.title, description=e.description, status="open",
               created_at=stamp, updated_at=stamp)
    if e.task_id is not None:
        obj["task_id"] = e.task_id
    if e.thread_id is not None:
        obj["thread_id"] = e.thread_id
    return obj


@dataclass
class WriteResult:
    path: Path
    written: bool  # False for --dry-run and no-ops
    diff: str
    backup: Path | None = None


@dataclass
class AppendResult(WriteResult):
    total: int = 0
    short_ids: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def codesmith_text(self) -> str:
        n = len(self.short_ids)
        return (f"Appended {n} slop ledger entr{'y' if n == 1 else 'ies'} ({self.total} total): "
                + ", ".join(self.short_ids))


@dataclass
class UpdateResult(WriteResult):
    id: str = ""
    title: str = ""
    status: str = ""
    changed: bool = True

    def codesmith_text(self) -> str:
        return (f"Updated slop ledger entry {self.id[:8]} ({self.title}) → "
                f"{debug_name(self.status)}")


def write_ledger(path: Path, entries: list[dict[str, Any]]) -> None:
    """A whole slop ledger written as CodeSmith writes it (serde_json, two-space indent, no
    final newline), checked to load in CodeSmith, under the lock with an atomic replace (the
    demo's new world; every edit of an existing file goes through append/update)."""
    with _WriteSession(path, None, force=False, dry_run=False) as session:
        doc, _existing = session.read()
        text = _full_dump(doc, {"entries": entries})
        _check_result(path, text)
        session.write(_encode(doc, text))


def append(path: Path, entries: Sequence[NewEntry], *, now: dt.datetime | None = None,
           dry_run: bool = False, max_bytes: int | None = None,
           new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
           force: bool = False, lock_timeout: float | None = None) -> AppendResult:
    """Append entries (status ``open``, fresh UUID v4 ids, ``created_at = updated_at = now``)."""
    if not entries:
        raise UsageError("nothing to append; give at least one entry")
    # each entry its own time, as CodeSmith's SlopEntry::new takes Utc::now() for each
    new = [_build_entry(e, new_id(), rfc3339(now)) for e in entries]
    with _WriteSession(path, max_bytes, force, dry_run, lock_timeout, now) as session:
        doc, sf = session.read()
        refuse_unloadable(sf)
        parsed: Any = None
        if doc.data is None:
            expected: Any = {"entries": new}
            text = _full_dump(doc, expected)
        else:
            # a new list beside the one read (its entries are shared, and never changed)
            if isinstance(doc.data, list):
                expected = [*doc.data, *new]
            else:
                expected = {**doc.data, "entries": [*doc.entries, *new]}
            text, parsed = _checked(doc, (lambda: _splice_append(doc, new),
                                          lambda: _splice_append(doc, new, by_id=False)),
                                    expected)
        total = len(expected) if isinstance(expected, list) else len(expected["entries"])
        _check_result(path, text, parsed)
        result = AppendResult(path=path, written=False, diff=_diff(doc, text), total=total,
                              short_ids=[o["id"][:8] for o in new], ids=[o["id"] for o in new])
        if not dry_run:
            result.backup = session.write(_encode(doc, text))
            result.written = True
    return result


def find_entry(entries: Sequence[Any], prefix: str, path: Path) -> int:
    """Index of the one entry whose id is ``prefix`` or starts with it.

    Unknown -> NotFoundError; several -> RefusedError listing them (CodeSmith takes the first).
    """
    prefix = prefix.strip()
    if not prefix:
        raise UsageError("give an entry id or a prefix of one (see `toolkit slop query`)")
    ids = [(i, e["id"]) for i, e in enumerate(entries)
           if isinstance(e, dict) and isinstance(e.get("id"), str)]
    exact = [i for i, eid in ids if eid == prefix]
    if exact:
        return exact[0]
    hits = [i for i, eid in ids if eid.startswith(prefix)]
    if not hits:
        hits = [i for i, eid in ids if eid.lower().startswith(prefix.lower())]
    if not hits:
        raise NotFoundError(f"no slop entry has an id starting with {prefix!r}", path=path,
                            hint="List the ids with `toolkit slop query`")
    if len(hits) > 1:
        listing = "; ".join(
            f"{entries[i]['id']} ({truncate(_one_line(str(entries[i].get('title', ''))), 50)})"
            for i in hits[:10])
        more = f"; and {len(hits) - 10} more" if len(hits) > 10 else ""
        raise RefusedError(f"id prefix {prefix!r} matches {len(hits)} entries: {listing}{more}",
                           path=path, hint="Give more characters of the id; nothing was changed")
    return hits[0]


def _set_in_place(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Set ``key``; a new key goes where CodeSmith's field order puts it, unknown keys stay."""
    if key in obj:
        obj[key] = value
        return obj
    rank = {k: i for i, k in enumerate(FIELD_ORDER)}
    mine = rank[key]
    items = list(obj.items())
    pos = len(items)
    for n, (k, _v) in enumerate(items):
        if k in rank and rank[k] > mine:
            pos = n
            break
    items.insert(pos, (key, value))
    return dict(items)


def update(path: Path, id_prefix: str, status: str, cleanup: str | None = None, *,
           now: dt.datetime | None = None, dry_run: bool = False, max_bytes: int | None = None,
           force: bool = False, lock_timeout: float | None = None) -> UpdateResult:
    """Set an entry's status (and cleanup recommendation when given) and ``updated_at``."""
    require_text(status, "the status")
    require_text(cleanup, "the cleanup recommendation")
    require_text(id_prefix, "the id")
    status = parse_status(status)
    if not path.exists():
        raise NotFoundError("slop ledger not found; nothing to update", path=path,
                            hint="Check --slop or CODESMITH_HOME")
    with _WriteSession(path, max_bytes, force, dry_run, lock_timeout, now) as session:
        doc, sf = session.read()
        refuse_unloadable(sf)
        entries = doc.entries
        index = find_entry(entries, id_prefix, path)
        old = entries[index]
        result = UpdateResult(path=path, written=False, diff="", id=old["id"],
                              title=str(old.get("title", "")), status=status)
        if old.get("status") == status and (cleanup is None
                                            or old.get("cleanup_recommendation") == cleanup):
            result.changed = False
            return result
        obj = json.loads(json.dumps(old))
        obj = _set_in_place(obj, "status", status)
        obj = _set_in_place(obj, "updated_at", rfc3339(now))
        if cleanup is not None:
            obj = _set_in_place(obj, "cleanup_recommendation", cleanup)
        target = list(entries)  # a new list beside the one read; only this entry differs
        target[index] = obj
        expected = target if isinstance(doc.data, list) else {**doc.data, "entries": target}
        text, parsed = _checked(doc, (lambda: _splice_replace(doc, {index: obj}),
                                      lambda: _splice_replace(doc, {index: obj}, by_id=False)),
                                expected)
        _check_result(path, text, parsed)
        result.diff = _diff(doc, text)
        if not dry_run:
            result.backup = session.write(_encode(doc, text))
            result.written = True
    return result


# --------------------------------------------------------------------------- repair

@dataclass
class RepairResult(WriteResult):
    fixed: list[LoadProblem] = field(default_factory=list)  # what the new text fixes
    unfixable: list[LoadProblem] = field(default_factory=list)  # left for a person


def _fix_entry(obj: dict[str, Any], fix: LoadProblem) -> dict[str, Any]:
    if fix.fix == "updated_at" and fix.value is not None:
        return _set_in_place(obj, "updated_at", fix.value)
    if fix.fix == "drop" and fix.field is not None:
        return {k: v for k, v in obj.items() if k != fix.field}
    if fix.fix == "enum" and fix.field is not None:
        return {**obj, fix.field: fix.value}
    return obj


def _repaired_text(doc: _Doc, fixes: Sequence[LoadProblem]) -> str:
    """The file's text with every fix applied, keeping all other bytes where it can."""
    kinds = {f.fix for f in fixes}
    if "empty" in kinds:
        return (_dump({"entries": []}, "  ", "", doc.newline)
                + (doc.newline if doc.text.endswith("\n") else ""))
    # new containers beside the ones read; a fixed entry is a new dict, the rest are shared
    data: Any = list(doc.data) if isinstance(doc.data, list) else dict(doc.data)
    if isinstance(data, dict) and isinstance(data.get("entries"), list):
        data["entries"] = list(data["entries"])
    if "wrap" in kinds and isinstance(data, list):
        data = {"entries": data}
    if "entries" in kinds and isinstance(data, dict):
        data["entries"] = []
    entries = data["entries"] if isinstance(data, dict) else data
    changed: dict[int, dict[str, Any]] = {}
    for fix in fixes:
        if fix.index is not None and isinstance(entries[fix.index], dict):
            entries[fix.index] = _fix_entry(dict(entries[fix.index]), fix)
            changed[fix.index] = entries[fix.index]
    if kinds & {"wrap", "entries"}:
        return _full_dump(doc, data)
    return _checked(doc, (lambda: _splice_replace(doc, changed) if changed else doc.text,),
                    data)[0]


def repair(path: Path, *, dry_run: bool = True, max_bytes: int | None = None,
           force: bool = False, lock_timeout: float | None = None) -> RepairResult:
    """Apply every fix :func:`load_problems` names (BOM, bare array, empty file, null or
    missing ``entries``, null ``source_links``, missing ``updated_at``, a non-canonical enum
    spelling) and list the problems no safe fix exists for. ``dry_run``: only the diff."""
    if not path.exists():
        return RepairResult(path=path, written=False, diff="")
    with _WriteSession(path, max_bytes, force, dry_run, lock_timeout) as session:
        doc, sf = session.read()
        fixes = [p for p in sf.load_problems if p.fix]
        result = RepairResult(path=path, written=False, diff="", fixed=fixes,
                              unfixable=[p for p in sf.load_problems if not p.fix])
        if not fixes:
            return result
        text = _repaired_text(doc, fixes)
        after = load_problems(json.loads(text), empty=not text.strip(),
                              surrogates=not json_surrogate_free(text))
        if any(p.fix for p in after):  # a fix that did not take: never write half a repair
            raise DataError("repair could not apply every fix: "
                            + "; ".join(str(p) for p in after if p.fix), path=path,
                            hint="Nothing was written; fix the file by hand")
        new_doc = replace(doc, bom=False)
        result.diff = _diff(doc, text)  # the BOM's removal is in ``fixed``, not in the diff
        if not dry_run:
            result.backup = session.write(_encode(new_doc, text))
            result.written = True
    return result
