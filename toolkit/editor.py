"""The only writer of Smith Ledger files: byte-preserving, locked, backed up, atomic.

Every change to ``.smith/vault/ledger/`` goes through an :class:`EditorSession`::

    from toolkit.editor import EditorSession

    with EditorSession(vault_dir, today=today, dry_run=False, force=False) as s:
        [entry] = s.find("migration dry-run")           # or s.entries("patterns")
        s.set_confidence(entry, "high")                 # only the Confidence value changes
        result = s.commit()                             # backup, atomic writes, meta counts
    print(result.diff())

What the session guarantees (DESIGN.md "The editor"):

* **Bytes.** Edits are byte ranges of the file as read (the parser in
  :mod:`toolkit.sources.smith` gives every entry its exact ``start``/``end``). Untouched
  entries, headers, comments, the entry form (A or B), CRLF line endings and a BOM are kept
  byte for byte. A field edit changes only the value on that field's line (Form A keeps
  ``- **Confidence:**``, Form B ``**Confidence:**``, and the value's capitalisation style).
  :meth:`EditorSession.remove` deletes exactly the entry's block. A commit whose new bytes equal
  the old ones writes nothing at all.
* **Lock.** An OS ``flock`` on the vault folder (:func:`lock_path`) for the whole session,
  with a timeout (:class:`toolkit.errors.BusyError`, exit 75, "locked by another run"); plus
  the seed's ``.meta.json`` ``lock`` field (10-minute expiry): a fresh lock of another holder
  makes the session wait, then fail with exit 75 naming the holder; a stale one (or one left
  by a killed toolkit run on this host) is taken over with a note. The field is written only
  while a commit writes (a no-op session writes nothing).
* **Backup.** Before the first write, every file the commit will change is copied to
  ``ledger/.backups/edit-YYYY-MM-DD-HHMMSS/`` from the bytes that were read, and verified.
* **Atomic, checked writes.** :func:`toolkit.safewrite.atomic_replace` per file; a file that
  changed on disk since it was read (stat and content) is refused with "changed on disk since
  it was read; nothing written" -- all files are checked before the first write.
* **Counts.** ``meta.yaml`` count lines are edited in place in whichever schema the file uses
  (``entries:``/``confidence_distribution:`` of smith-reflect, ``total_entries:``/
  ``entries_by_file:`` of smith-ledger), keeping every other key, comment and format; an
  invalid ``meta.yaml`` makes the commit refuse with the parser's line and column (exit 65)
  before anything is written. ``.meta.json`` gets ``total_patterns`` (entries) and
  ``estimated_tokens`` (words x 1.3 over the five files); other keys are kept.
  When the session parsed all five files (or the edits add or remove entries, which makes it
  parse them), counts are recomputed from the files. A session that only changed field values
  of a few entries in files it did not parse whole (a promote in a very large ledger) moves
  the confidence counts by exactly what it changed and leaves entry counts as they are --
  a field edit cannot change how many entries a file has.
* **Dry run.** ``dry_run=True``: the same plan and diff, nothing written, no lock field, no
  temp-file cleanup: the vault tree stays byte-identical (except that, like every command, it
  first finishes or undoes an edit a killed run left half-done: the plan must see whole files).

Edit operations (each takes entries returned by this session: :meth:`entries`, :meth:`file`,
:meth:`find`):

* :meth:`set_confidence`, :meth:`set_date`, :meth:`set_field` -- change one field's value
  (the field line is added when missing);
* :meth:`remove` -- delete the entry's block;
* :meth:`replace_entry` -- put new bytes in place of the entry's block (a merge is
  ``replace_entry(base, merged)`` + ``remove(other)``); :meth:`entry_bytes` gives the current
  block;
* :meth:`insert_entry` -- add an entry (text in either form; the file's line ending is used);
* :meth:`resort` -- reorder a file's entries (high, medium, low; newest Date first), call it
  after the other edits of that file;
* :meth:`plan` -- the :class:`Change` list (old/new bytes, unified diff) without writing;
* :meth:`commit` -- write (or, in a dry run, only plan) and return a :class:`CommitResult`.

:meth:`EditorSession.reset` archives the six ledger files to ``archive/YYYY-MM-DD-HHMMSS/`` and
writes the seed's fresh templates, under the same lock.

A file over the size limit makes :meth:`EditorSession.open` raise
:class:`toolkit.errors.TooLargeError` (exit 65, the file and the limit): a command never acts
as if it were empty. Files the session cannot use are never rewritten: one with invalid UTF-8
is skipped when it is first parsed, or -- if it was only searched by title -- when the commit
checks it (before anything is renamed); each gives a note in ``notes``.

Helpers other writers share: :func:`lock_path` (the folder every ledger writer flocks),
:func:`holder_id` (this process in the ``.meta.json`` lock), :func:`count_words` /
:func:`tokens_for_words` (the seed's token estimate), :func:`title_key` (how titles compare),
:func:`sort_key` (Smith's file order), :func:`locate_entries` (entries by title without a
full parse), :func:`update_meta_yaml` / :func:`update_meta_json` (in-place count edits).

* **All or nothing.** A commit (and a reset) replaces its files as one set: the intent
  journal ``ledger/.toolkit-journal.json`` names every target, its temp file and its backup
  before the first rename. A run killed between two renames is completed (when its other
  temp files are whole) or rolled back from the backups by the next command that opens the
  vault -- any reader or editor entry point, :func:`recover_interrupted` -- with a one-line
  note saying which.
* **Inside.** :func:`check_inside`: the vault must resolve inside the project folder and
  ``ledger/``, ``.backups`` and ``archive`` inside the vault; a folder linked outside is
  refused like a ledger file linked outside.

Test-only pause points: ``TOOLKIT_EDITOR_PAUSE`` (see :mod:`toolkit.safewrite`):
``after_read`` (files read, lock held), ``after_temp_write``, ``after_replace``,
``after_journal`` (journal written, nothing renamed), ``after_rename@<n>`` (n files renamed).
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import re
import shutil
import socket
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import (
    BusyError,
    ConflictError,
    DataError,
    NotFoundError,
    RefusedError,
    TooLargeError,
    ToolkitError,
    UsageError,
)
from toolkit.records import CONFIDENCES, LEDGER_FILES, LEDGER_TITLES, LedgerEntry
from toolkit.safewrite import (
    FileLock,
    FileSnapshot,
    Journal,
    atomic_replace,
    backup_files,
    break_backup_links,
    changed_since,
    check_editable,
    cleanup_orphan_temps,
    pause,
    pid_alive,
    recover_journal,
    replace_all,
    unique_dir,
)
from toolkit.sources.smith import _FIELD, BOM, LedgerFile, parse_ledger_bytes, recorded_key

LOCK_EXPIRY = dt.timedelta(minutes=10)
DEFAULT_LOCK_TIMEOUT = 10.0
LOCK_TIMEOUT_ENV = "TOOLKIT_LOCK_TIMEOUT"
NOW_ENV = "TOOLKIT_NOW"
CONF_RANK = {"high": 0, "medium": 1, "low": 2}
# Files at least this big are searched by title without parsing them whole (see find()).
FAST_FIND_BYTES = 256 * 1024

_HOLDER = re.compile(r"^toolkit[-\w]*@(?P<host>[^:]+):(?P<pid>\d+)$")


# --------------------------------------------------------------------------- small helpers

def lock_path(ledger_dir: Path) -> Path:
    """The path every writer of this ledger flocks: the vault folder (``ledger/``'s parent).

    Locking a folder leaves no lock file behind in the user's tree."""
    return Path(ledger_dir).parent


def _inside(real: Path, root_real: Path) -> bool:
    return real == root_real or root_real in real.parents


def _walk_out(path: Path, base: Path, root_real: Path) -> Path:
    """The first component of ``path`` below ``base`` whose real location leaves ``root_real``
    (the symlink to blame), or ``path`` itself."""
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        return path
    current = base
    for part in parts:
        current = current / part
        if not _inside(Path(os.path.realpath(current)), root_real):
            return current
    return path


def vault_roots(vault: str | Path) -> tuple[Path, Path]:
    """(the folder the user named, the vault as named). The named folder is the project root
    when the vault is ``<project>/.smith/vault``, else the vault itself."""
    vault = Path(os.path.abspath(vault))
    if vault.name == "vault" and vault.parent.name == ".smith":
        return vault.parent.parent, vault
    return vault, vault


def check_inside(vault: str | Path) -> None:
    """Refuse (:class:`RefusedError`, before anything is read or written) when a folder the
    editor writes in resolves outside the root the user gave (FAULTS G3).

    "Inside" is decided on real paths (every parent resolved, so a link anywhere on the way
    counts): ``.smith`` and the vault must stay inside the project folder (the folder holding
    ``.smith``; links above it are the user's business), and ``ledger/``, ``ledger/.backups``
    and ``ledger/archive`` inside the vault. A link that stays inside is followed. The ledger
    files themselves follow the same rule in :func:`toolkit.safewrite.check_editable`."""
    root, vault = vault_roots(vault)
    root_real = Path(os.path.realpath(root))
    vault_real = Path(os.path.realpath(vault))
    ledger = vault / "ledger"
    checks = [(vault, root, root_real, "the project folder"),
              (ledger, vault, vault_real, "the vault"),
              (ledger / ".backups", vault, vault_real, "the vault"),
              (ledger / "archive", vault, vault_real, "the vault")]
    for path, base, base_real, what in checks:
        if not (path.exists() or path.is_symlink()):
            continue
        real = Path(os.path.realpath(path))
        if _inside(real, base_real):
            continue
        culprit = _walk_out(path, base if path != base else root, base_real)
        target = Path(os.path.realpath(culprit))
        raise RefusedError(
            f"is a symlink to {target}, outside {what} ({base_real}); refusing to edit the "
            "ledger through it", path=culprit,
            hint="Replace the link with the folder itself; nothing was written")


JOURNAL_NAME = ".toolkit-journal.json"


def journal_path(vault: str | Path) -> Path:
    """Where a multi-file edit of this vault's ledger keeps its intent journal."""
    return Path(vault) / "ledger" / JOURNAL_NAME


def recover_interrupted(vault: str | Path, *, locked: bool = False) -> str | None:
    """Finish or undo a multi-file edit of the ledger that was killed half-way (FAULTS G4).

    Every entry point that opens the vault calls this (:func:`open_vault`, which the ledger
    commands and the loader read through; reconcile; :meth:`EditorSession.open`). When
    ``ledger/`` holds a journal and no run holds the ledger lock (``locked``: the caller holds
    it), the edit is completed or rolled back (:func:`toolkit.safewrite.recover_journal`) and a
    one-line note saying which is written to stderr (``note: <ledger folder>: ...``) and
    returned (readers add it to their warnings). A journal of a run still holding the lock is
    left alone; a reader then returns None."""
    import sys

    path = journal_path(vault)
    if not (path.exists() or path.is_symlink()):
        return None
    lock: FileLock | None = None
    if not locked:
        try:
            check_inside(vault)
        except RefusedError:
            return None  # the editor refuses this vault; a reader only reads
        lock = FileLock(lock_path(path.parent), 0, what="the ledger")
        try:
            lock.acquire()
        except BusyError:
            return None  # a live edit: its own run finishes it
    try:
        if not path.exists():
            return None
        try:
            msg = recover_journal(path, Path(vault)).message()
        except OSError as exc:
            raise ToolkitError(f"cannot finish or undo an interrupted edit: {exc.strerror}",
                               path=path, hint="Make the ledger folder writable and run the "
                                               "command again") from None
    finally:
        if lock is not None:
            lock.release()
    sys.stderr.write(f"note: {path.parent}: {msg}\n")
    sys.stderr.flush()
    return msg


def open_vault(vault: str | Path, **kwargs: Any) -> Any:
    """:func:`toolkit.sources.smith.read_vault` after :func:`recover_interrupted`: how every
    command reads a vault (the readers themselves never write). A recovery note heads the
    vault's ``problems``."""
    from toolkit.records import Problem
    from toolkit.sources.smith import read_vault

    vault = Path(vault)
    note = recover_interrupted(vault) if (vault / "ledger").is_dir() else None
    v = read_vault(vault, **kwargs)
    if note:
        v.problems.insert(0, Problem("smith", str(vault / "ledger"), None, note))
    return v


def lock_timeout() -> float:
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw:
        try:
            return max(float(raw), 0.0)
        except ValueError:
            pass
    return DEFAULT_LOCK_TIMEOUT


def holder_id() -> str:
    """Who holds the ``.meta.json`` lock: ``toolkit-editor@<host>:<pid>``."""
    return f"toolkit-editor@{socket.gethostname()}:{os.getpid()}"


def count_words(data: bytes | str) -> int:
    """Whitespace-separated words (the seed's token estimate is words x 1.3)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return len(text.split())


def tokens_for_words(words: int) -> int:
    """Word count x 1.3, rounded down."""
    return words * 13 // 10


def parse_instant(value: Any) -> dt.datetime | None:
    """An ISO-8601 time as an aware UTC datetime (naive = UTC, ``Z`` accepted); None if bad."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC)


def iso_z(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_for(today: dt.date | None = None) -> dt.datetime:
    """``$TOOLKIT_NOW`` if set, else now (UTC), moved to the injected day if there is one."""
    fixed = os.environ.get(NOW_ENV)
    if fixed:
        when = parse_instant(fixed)
        if when is None:
            raise UsageError(f"{NOW_ENV}={fixed!r} is not an ISO-8601 time",
                             hint="Use e.g. 2026-05-10T12:00:00Z or unset it")
        return when
    real = dt.datetime.now(dt.UTC).replace(microsecond=0)
    if today is not None and today != real.date():
        return dt.datetime.combine(today, real.time(), dt.UTC)
    return real


def check_utf8(data: bytes, path: Path | str) -> None:
    """Raise :class:`DataError` (with the byte offset) unless ``data`` is UTF-8 text without
    NUL bytes: the same verdict as :func:`toolkit.textio.decode_utf8`, without building the
    decoded text (chunks through an incremental decoder)."""
    import codecs

    from toolkit.textio import decode_utf8

    if b"\x00" in data or data.isascii():
        if b"\x00" in data:
            decode_utf8(data, path)  # raises with the offset
        return
    dec = codecs.getincrementaldecoder("utf-8")()
    step = 1 << 18
    view = memoryview(data)
    try:
        for pos in range(0, len(data), step):
            dec.decode(view[pos:pos + step])
        dec.decode(b"", final=True)
    except UnicodeDecodeError:
        decode_utf8(data, path)  # raises with the exact offset


def title_key(text: str | None) -> str:
    """How titles are compared: NFC-normalised and case-folded."""
    return unicodedata.normalize("NFC", text or "").casefold()


def sort_key(entry: LedgerEntry) -> tuple[int, int]:
    """Smith's file order: high, medium, low (unknown last); newest Date first."""
    rank = CONF_RANK.get(entry.confidence or "", 3)
    date = entry.date or ""
    try:
        ordinal = dt.date.fromisoformat(date).toordinal()
    except ValueError:
        ordinal = 0
    return rank, -ordinal


def _nl_convert(data: bytes, newline: bytes) -> bytes:
    data = data.replace(b"\r\n", b"\n")
    return data.replace(b"\n", newline) if newline != b"\n" else data


def _lines_with_offsets(data: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    out = []
    pos = start
    while pos < end:
        nl = data.find(b"\n", pos, end)
        stop = end if nl < 0 else nl + 1
        out.append((pos, data[pos:stop]))
        pos = stop
    return out


# --------------------------------------------------------------------------- results


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

    def diff(self, label: str | None = None, context: int = 3) -> str:
        name = label or self.name
        head = f"--- a/{name}\n+++ b/{name}\n"
        edits = self.edits if self.edits is not None else _whole_edit(self.old, self.new)
        body = "".join(_region_hunks(self.old, list(edits), context))
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


def _region_hunks(old: bytes, edits: list[tuple[int, int, bytes]], context: int) -> list[str]:
    """Unified-diff hunks for byte edits of ``old``, computed around each edit only."""
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
    for cs, ce, items in groups:
        parts, pos = [], cs
        for start, end, data in items:
            parts.append(old[pos:start])
            parts.append(data)
            pos = max(pos, end)
        parts.append(old[pos:ce])
        old_chunk = old[cs:ce].decode("utf-8", "replace").splitlines(keepends=True)
        new_chunk = b"".join(parts).decode("utf-8", "replace").splitlines(keepends=True)
        first_old = old.count(b"\n", 0, cs)
        first_new = first_old + delta
        delta += len(new_chunk) - len(old_chunk)
        for line in difflib.unified_diff(old_chunk, new_chunk, n=context):
            if line.startswith(("---", "+++")):
                continue
            if line.startswith("@@"):
                m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)
                if m:
                    a1, a2 = int(m.group(1)), m.group(2)
                    b1, b2 = int(m.group(3)), m.group(4)
                    a1 = a1 + first_old
                    b1 = b1 + first_new
                    line = (f"@@ -{a1}{',' + a2 if a2 is not None else ''} "
                            f"+{b1}{',' + b2 if b2 is not None else ''} @@\n")
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return out


@dataclass
class CommitResult:
    """What a commit did: the changes, where the backup went, notes worth showing."""

    changes: list[Change]
    dry_run: bool
    backup_dir: Path | None = None
    notes: list[str] = field(default_factory=list)
    entries_total: int | None = None  # entries in the five files after the commit, if known

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def diff(self) -> str:
        return "".join(c.diff() for c in self.changes)


# --------------------------------------------------------------------------- one ledger file


@dataclass
class _Edit:
    start: int
    end: int
    data: bytes
    kind: str  # "field", "remove", "replace", "insert", "whole"
    seq: int


class _Doc:
    """One of the five ledger files in a session: its snapshot, its parse, its pending edits."""

    def __init__(self, ledger_dir: Path, kind: str, max_bytes: int | None,
                 notes: list[str] | None = None) -> None:
        self.notes = notes if notes is not None else []
        self.kind = kind
        self.path = ledger_dir / f"{kind}.md"
        self.snapshot: FileSnapshot | None = None
        self.error: str | None = None
        self.exists = self.path.exists() or self.path.is_symlink()
        self._parsed: LedgerFile | None = None
        self.edits: list[_Edit] = []
        self._seq = 0
        self._checked = False
        if self.exists:
            try:
                self.snapshot = FileSnapshot.read(self.path, max_bytes)
            except TooLargeError:
                raise  # never treated as empty (FAULTS I4): the command names it, exit 65
            except DataError as exc:
                self.error = str(exc)
            except OSError as exc:
                self.error = f"{self.path}: cannot read: {exc.strerror}"

    def validate(self) -> bool:
        """Is the file UTF-8 text (FAULTS A6)? Checked once, when first needed: before a full
        parse, and before the commit writes it (a file with junk bytes is never rewritten)."""
        if not self._checked:
            self._checked = True
            if self.snapshot is not None and self.error is None:
                try:
                    check_utf8(self.snapshot.data, self.path)
                except DataError as exc:
                    self.error = str(exc)
                    self._parsed = None
                    self.notes.append(f"skipped (never rewritten): {self.error}")
        return self.error is None

    @property
    def name(self) -> str:
        return f"{self.kind}.md"

    @property
    def data(self) -> bytes:
        return self.snapshot.data if self.snapshot is not None and not self.error else b""

    @property
    def usable(self) -> bool:
        return self.snapshot is not None and self.error is None

    @property
    def parsed(self) -> bool:
        return self._parsed is not None

    def parse(self) -> LedgerFile:
        if self._parsed is None:
            self.validate()
            self._parsed = parse_ledger_bytes(self.data, self.path, self.kind)
        return self._parsed

    @property
    def newline(self) -> bytes:
        if self._parsed is not None:
            return self._parsed.newline
        data = self.data
        crlf = data.count(b"\r\n")
        return b"\r\n" if crlf and crlf * 2 >= data.count(b"\n") else b"\n"

    def add_edit(self, start: int, end: int, data: bytes, kind: str) -> None:
        if not self.usable:
            raise RefusedError(f"cannot edit: {self.error or 'the file is missing'}",
                               path=self.path)
        gone = UsageError(f"{self.name}: this entry was already removed or replaced in this "
                          "session")
        for e in list(self.edits):
            if e.kind == "whole":
                raise UsageError(f"{self.name} was re-sorted in this session; make its other "
                                 "edits before calling resort()")
            if start == end or e.start == e.end:  # an insertion: only inside a block is wrong
                point, rng = (start, e) if start == end else (e.start, None)
                if rng is not None and rng.kind in ("remove", "replace") \
                        and rng.start < point < rng.end:
                    raise gone
                if rng is None and kind in ("remove", "replace") and start < point < end:
                    raise UsageError(f"{self.name}: an entry was inserted inside this one")
                continue
            if (start, end) == (e.start, e.end):
                if e.kind in ("remove", "replace"):
                    raise gone
                self.edits.remove(e)  # a new value for the same field, or the whole entry
                continue
            if start <= e.start and e.end <= end:
                self.edits.remove(e)  # a field edit inside an entry now removed or replaced
                continue
            if e.start <= start and end <= e.end:
                raise gone
            if start < e.end and e.start < end:
                raise UsageError(f"{self.name}: overlapping edits at bytes {start}-{end}")
        self._seq += 1
        self.edits.append(_Edit(start, end, data, kind, self._seq))

    def render(self) -> bytes:
        data = self.data
        if not self.edits:
            return data
        view = memoryview(data)  # slices of a view are not copies: one copy, into the result
        parts: list[Any] = []
        pos = 0
        for e in sorted(self.edits, key=lambda e: (e.start, e.end, e.seq)):
            parts.append(view[pos:e.start])
            parts.append(e.data)
            pos = max(pos, e.end)
        parts.append(view[pos:])
        return b"".join(parts)

    def edit_at(self, start: int, end: int) -> _Edit | None:
        for e in self.edits:
            if (e.start, e.end) == (start, end) and e.kind in ("remove", "replace"):
                return e
        return None


# --------------------------------------------------------------------------- meta files


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_YAML_STD_TAGS = {f"tag:yaml.org,2002:{t}" for t in (
    "str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "merge",
    "omap", "pairs", "set", "value")}


def compose_yaml(text: str, path: Path) -> Any:
    """The YAML node tree (with positions) of ``text``, or a :class:`DataError` naming the
    line and column. Nothing is constructed, so no tag can run code and aliases cannot
    multiply; a tag the safe loader would refuse (``!!python/...``) is refused here too."""
    import yaml

    from toolkit.textio import MAX_YAML_ALIASES, check_yaml_depth

    check_yaml_depth(text, path, hint="Flatten the nested lists or mappings; nothing was written")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        aliases = sum(1 for ev in yaml.parse(text, Loader=loader)
                      if isinstance(ev, yaml.AliasEvent))
        if aliases > MAX_YAML_ALIASES:
            raise DataError(f"more than {MAX_YAML_ALIASES} YAML aliases; refusing a possible "
                            "alias bomb", path=path, hint="Nothing was written")
        root = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        col = f", column {mark.column + 1}" if mark else ""
        raise DataError(f"invalid YAML{col}: {exc.problem or exc.context or 'invalid YAML'}",
                        path=path, line=mark.line + 1 if mark else None,
                        hint="Fix the YAML (spaces, not tabs; close every quote) or restore "
                             "it from a backup; nothing was written") from None
    except yaml.YAMLError as exc:
        raise DataError(f"invalid YAML: {exc}", path=path) from None
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in _YAML_STD_TAGS:
            raise DataError(f"YAML tag {node.tag!r} is not allowed (safe loader)", path=path,
                            line=node.start_mark.line + 1,
                            hint="Remove the tag; nothing was written")
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend((k, v))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return root


def update_meta_yaml(data: bytes, path: Path, *, entries: dict[str, int | None] | None,
                     confidences: dict[str, int] | None, deltas: dict[str, int] | None = None,
                     notes: list[str] | None = None) -> bytes:
    """``meta.yaml`` with its count values replaced in place (comments and format kept).

    Count keys of the three schemas are updated where present: ``total_entries`` and
    ``entries_by_file.<file>`` (smith-ledger), ``entries.<file_with_underscores>`` and
    ``confidence_distribution.{high,medium,low}`` (smith-reflect), ``<file>_recorded``
    (smith-init, what ``/smith`` scaffolds); a missing per-file key is added to a block
    mapping that exists (to the top level for smith-init). ``entries``: exact per-file counts
    (None for a file whose count is unknown) or None to leave entry counts alone;
    ``confidences``: exact totals, or None and ``deltas`` to move the recorded ones. Raises
    :class:`DataError` with line and column for invalid YAML (nothing is written then).
    """
    import yaml

    from toolkit.textio import decode_utf8

    bom = data.startswith(BOM)
    text = decode_utf8(data, path)
    root = compose_yaml(text, path)
    if root is None:
        return data
    if not isinstance(root, yaml.MappingNode):
        raise DataError("meta.yaml is not a mapping; counts cannot be updated", path=path,
                        hint="Fix the file or restore it from a backup")
    edits: list[tuple[int, int, str]] = []
    nl = "\r\n" if "\r\n" in text else "\n"

    def child(node: Any, key: str) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return None
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
        return None

    def int_of(node: Any) -> int | None:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int":
            try:
                return int(node.value.replace("_", ""), 0) if node.value[:2].lower() in (
                    "0x", "0o", "0b") else int(node.value.replace("_", ""))
            except ValueError:
                return None
        return None

    def set_in(parent: Any, key: str, value: int | None, *, add: bool) -> None:
        if value is None or not isinstance(parent, yaml.MappingNode):
            return
        node = child(parent, key)
        if isinstance(node, yaml.ScalarNode):
            if int_of(node) != value:
                edits.append((node.start_mark.index, node.end_mark.index, str(value)))
        elif node is None and add and parent.value and not parent.flow_style:
            indent = " " * parent.value[0][0].start_mark.column
            end = parent.value[-1][1].end_mark.index
            line_end = text.find("\n", end)
            pos = len(text) if line_end < 0 else line_end + 1
            lead = "" if pos == 0 or text[pos - 1] == "\n" else nl
            edits.append((pos, pos, f"{lead}{indent}{key}: {value}{nl}"))

    by_file = child(root, "entries_by_file")
    reflect_entries = child(root, "entries")
    if entries is not None:
        for kind, count in entries.items():
            set_in(by_file, kind, count, add=True)
            set_in(reflect_entries, kind.replace("-", "_"), count, add=True)
        # the smith-init schema (what /smith scaffolds): one `<kind>_recorded` count per file
        # at the top level; Smith's prune "updates meta.yaml counts", so these are kept true
        keys = [k.value for k, _v in root.value if isinstance(k, yaml.ScalarNode)]
        if any(k.endswith("_recorded") or k in ("workflows_completed", "created")
               for k in keys):
            for kind, count in entries.items():
                set_in(root, recorded_key(kind), count, add=True)
        total_node = child(root, "total_entries")
        if isinstance(total_node, yaml.ScalarNode):
            total = 0
            for kind in LEDGER_FILES:
                count = entries.get(kind)
                if count is None:
                    count = int_of(child(by_file, kind)) \
                        or int_of(child(reflect_entries, kind.replace("-", "_"))) or 0
                total += count
            set_in(root, "total_entries", total, add=False)
    dist = child(root, "confidence_distribution")
    if isinstance(dist, yaml.MappingNode):
        for conf in ("high", "medium", "low"):
            if confidences is not None:
                set_in(dist, conf, confidences.get(conf, 0), add=True)
                continue
            cur = int_of(child(dist, conf))
            delta = (deltas or {}).get(conf, 0)
            if cur is None or not delta:
                continue
            value = cur + delta
            if value < 0:
                if notes is not None:
                    notes.append(f"meta.yaml confidence_distribution.{conf} was {cur}, fewer "
                                 "than the files hold; set to 0")
                value = 0
            set_in(dist, conf, value, add=False)
    if not edits:
        return data
    out = text
    # from the end backwards; insertions at one spot go in the order they were made
    order = sorted(range(len(edits)), key=lambda n: (edits[n][0], edits[n][1], n), reverse=True)
    for n in order:
        start, end, new = edits[n]
        out = out[:start] + new + out[end:]
    return (BOM if bom else b"") + out.encode("utf-8")


def update_meta_json(data: bytes, path: Path, updates: dict[str, Any]) -> bytes:
    """``.meta.json`` with ``updates`` applied, keeping every other key and, where it can, the
    file's own layout (values are replaced in place; a file it cannot edit in place is
    re-written with two-space indentation)."""
    from toolkit.textio import decode_utf8, load_json

    bom = data.startswith(BOM)
    text = decode_utf8(data, path) if data.strip() else "{}"
    current = load_json(text, path)
    if not isinstance(current, dict):
        raise DataError("expected a JSON object", path=path,
                        hint="Fix the file or restore it from a backup")
    wanted = dict(current)
    wanted.update(updates)
    if wanted == current and all(type(current.get(k)) is type(v) for k, v in updates.items()):
        return data
    out = text
    ok = True
    decoder = json.JSONDecoder()
    for key, value in updates.items():
        if key not in current:
            ok = False
            break
        m = re.search(r'"' + re.escape(key) + r'"\s*:\s*', out)
        if not m:
            ok = False
            break
        try:
            _, end = decoder.raw_decode(out, m.end())
        except ValueError:
            ok = False
            break
        out = out[:m.end()] + json.dumps(value, ensure_ascii=False) + out[end:]
    if ok:
        try:
            ok = json.loads(out) == wanted
        except ValueError:
            ok = False
    if not ok:
        out = json.dumps(wanted, indent=2, ensure_ascii=False) + "\n"
    return (BOM if bom else b"") + out.encode("utf-8")


@dataclass(frozen=True)
class LockHolder:
    pid: str
    acquired: dt.datetime | None
    acquired_raw: str | None

    def describe(self, now: dt.datetime) -> str:
        since = self.acquired_raw or "an unreadable time"
        if self.acquired is None:
            return f"{self.pid} (acquired {since})"
        secs = int((now - self.acquired).total_seconds())
        ago = f"{abs(secs)} s" if abs(secs) < 120 else f"{abs(secs) // 60} min"
        return f"{self.pid} (acquired {since}, {ago} {'ago' if secs >= 0 else 'ahead'})"

    def dead_toolkit_run(self) -> bool:
        """Held by a toolkit run on this host whose process is gone (killed mid-commit)."""
        m = _HOLDER.match(self.pid)
        return bool(m and m.group("host") == socket.gethostname()
                    and int(m.group("pid")) != os.getpid() and not pid_alive(int(m.group("pid"))))

    def fresh(self, now: dt.datetime) -> bool:
        """Held less than 10 minutes ago (up to 10 minutes ahead counts too: clocks differ)."""
        if self.acquired is None:
            return False
        return abs(now - self.acquired) < LOCK_EXPIRY


def read_lock_field(meta_json: dict[str, Any] | None) -> LockHolder | None:
    lock = (meta_json or {}).get("lock")
    if not lock:
        return None
    if not isinstance(lock, dict):
        return LockHolder(str(lock), None, None)
    raw = lock.get("acquired")
    return LockHolder(str(lock.get("pid") or "unknown"), parse_instant(raw),
                      None if raw is None else str(raw))


# --------------------------------------------------------------------------- the session


class EditorSession:
    """A locked editing session over one vault's ledger (see the module docstring)."""

    def __init__(self, vault_dir: str | Path, *, today: dt.date | None = None,
                 dry_run: bool = False, force: bool = False, timeout: float | None = None,
                 max_bytes: int | None = None, now: dt.datetime | None = None,
                 backup_prefix: str = "edit", operation: str = "edit") -> None:
        self.vault = Path(vault_dir)
        self.operation = operation  # named in the journal's recovery message
        self.ledger_dir = self.vault / "ledger"
        self.today = today
        self.dry_run = dry_run
        self.force = force
        self.timeout = lock_timeout() if timeout is None else timeout
        self.max_bytes = max_bytes
        self._now = now
        self.backup_prefix = backup_prefix
        self.notes: list[str] = []
        self.docs: dict[str, _Doc] = {}
        self.meta_yaml: FileSnapshot | None = None
        self.meta_json: FileSnapshot | None = None
        self._lock: FileLock | None = None
        self._committed = False
        self._field_only = True
        self._entries_total: int | None = None
        self._meta_json_error: DataError | None = None
        self._meta_json_data: dict[str, Any] | None = None
        # More .meta.json values a commit writes with the ledger files, from the file's data
        # (reconcile's last_reconcile and counters); they override the editor's own counts.
        self.meta_json_updates: Callable[[dict[str, Any] | None], dict[str, Any]] | None = None

    # ----------------------------------------------------------- lifecycle

    def now(self) -> dt.datetime:
        return self._now or now_for(self.today)

    def __enter__(self) -> EditorSession:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        check_inside(self.vault)
        if not self.ledger_dir.is_dir():
            raise NotFoundError("No Ledger found.", path=self.ledger_dir,
                                hint="Run `/smith-reflect` after a workflow to start building "
                                     "the Ledger, or run `/smith` to initialize the vault")
        self._lock = FileLock(lock_path(self.ledger_dir), self.timeout, what="the ledger")
        self._lock.acquire()
        try:
            recover_interrupted(self.vault, locked=True)  # before its temp files look orphaned
            if not self.dry_run:
                for orphan in cleanup_orphan_temps(self.ledger_dir):
                    self.notes.append(f"removed {orphan.name}, left by a run that was killed")
                for name in (*(f"{k}.md" for k in LEDGER_FILES), "meta.yaml", ".meta.json"):
                    for healed in break_backup_links(self.ledger_dir / name,
                                                     self.ledger_dir / ".backups"):
                        self.notes.append(f"{healed} was still linked to {name} after a killed "
                                          "run; made it a copy")
            self._wait_for_json_lock()
            for kind in LEDGER_FILES:
                d = self.docs[kind] = _Doc(self.ledger_dir, kind, self.max_bytes, self.notes)
                if d.error:
                    self.notes.append(f"skipped: {d.error}")
            self.meta_yaml = self._snap(self.ledger_dir / "meta.yaml")
            pause("after_read")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _snap(self, path: Path) -> FileSnapshot | None:
        if not path.is_file():
            return None
        return FileSnapshot.read(path, self.max_bytes)

    def _read_meta_json(self) -> tuple[FileSnapshot | None, dict[str, Any] | None]:
        from toolkit.textio import decode_utf8, load_json

        snap = self._snap(self.ledger_dir / ".meta.json")
        if snap is None:
            return None, None
        if not snap.data.strip():
            return snap, {}
        data = load_json(decode_utf8(snap.data, snap.given), snap.given)
        if not isinstance(data, dict):
            raise DataError("expected a JSON object", path=snap.given,
                            hint="Fix the file or restore it from a backup")
        return snap, data

    def _wait_for_json_lock(self) -> None:
        """The seed's lock: wait while another holder's lock is fresh, then exit 75."""
        import time

        deadline = time.monotonic() + self.timeout
        while True:
            try:
                snap, data = self._read_meta_json()
            except DataError as exc:
                self.meta_json = None
                self._meta_json_error = exc
                return
            self._meta_json_error = None
            self.meta_json = snap
            self._meta_json_data = data
            holder = read_lock_field(data)
            if holder is None or holder.pid == holder_id():
                return
            now = self.now()
            if holder.dead_toolkit_run():
                self.notes.append(f"lock left by a run that was killed ({holder.describe(now)}) "
                                  "taken over")
                return
            if not holder.fresh(now):
                self.notes.append(f"stale lock taken over: held by {holder.describe(now)}")
                return
            if self.force:
                self.notes.append(f"--force: overrode the lock held by {holder.describe(now)}")
                return
            if self.dry_run:
                self.notes.append(f"the ledger is locked by {holder.describe(now)}")
                return
            if time.monotonic() >= deadline:
                raise BusyError(f"ledger is locked by another run: {holder.describe(now)}",
                                path=snap.given if snap else None,
                                hint="Wait for it to finish (the lock expires after 10 "
                                     "minutes), or use --force if that run is dead")
            time.sleep(0.1)

    # ----------------------------------------------------------- reading

    def doc(self, kind: str) -> _Doc:
        if kind not in self.docs:
            raise UsageError(f"unknown ledger file {kind!r}")
        return self.docs[kind]

    def file(self, kind: str) -> LedgerFile:
        """The parsed file as read (entries with their byte ranges)."""
        return self.doc(kind).parse()

    def entries(self, kind: str | None = None) -> list[LedgerEntry]:
        kinds = [kind] if kind else list(LEDGER_FILES)
        return [e for k in kinds for e in self.file(k).entries]

    def find(self, query: str, *, kinds: Iterable[str] | None = None,
             exact: bool = False) -> list[LedgerEntry]:
        """Entries whose title contains ``query`` (NFC-normalised, case-folded), in file order.

        Large files are searched without parsing them whole: only the entries whose title
        lines match are parsed (exactly as the full parse would)."""
        q = title_key(query)
        out: list[LedgerEntry] = []
        for kind in kinds or LEDGER_FILES:
            d = self.doc(kind)
            if not d.usable:
                continue
            if d.parsed or len(d.data) < FAST_FIND_BYTES:
                found = [e for e in d.parse().entries if _title_matches(e.title, q, exact)]
            else:
                found = locate_entries(d.data, d.path, kind, q, exact=exact)
            out.extend(found)
        return out

    def entry_bytes(self, entry: LedgerEntry) -> bytes:
        """The entry's block as it stands in this session (after a replace_entry)."""
        d = self._doc_of(entry)
        e = d.edit_at(entry.start, entry.end)
        if e is not None:
            return e.data
        return d.data[entry.start:entry.end]

    def _doc_of(self, entry: LedgerEntry) -> _Doc:
        d = self.doc(entry.file)
        if Path(entry.path) != d.path or entry.end > len(d.data) or entry.start > entry.end:
            raise UsageError("entry does not belong to this session's files")
        return d

    # ----------------------------------------------------------- edits

    def set_confidence(self, entry: LedgerEntry, value: str) -> bool:
        """Change the entry's Confidence value; False when it already has it."""
        if value not in CONFIDENCES:
            raise UsageError(f"confidence must be one of {', '.join(CONFIDENCES)}")
        return self.set_field(entry, "Confidence", value)

    def set_date(self, entry: LedgerEntry, value: dt.date | str) -> bool:
        text = value.isoformat() if isinstance(value, dt.date) else str(value)
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise UsageError(f"date {text!r} is not YYYY-MM-DD")
        return self.set_field(entry, "Date", text)

    def set_field(self, entry: LedgerEntry, name: str, value: str) -> bool:
        """Set one field's value on its own line (the line is added when missing)."""
        if any(ch in value for ch in "\r\n") or not value.strip():
            raise UsageError("a field value must be one non-empty line")
        d = self._doc_of(entry)
        if d.edit_at(entry.start, entry.end) is not None:
            raise UsageError(f"{d.name}: this entry was already removed or replaced in this "
                             "session")
        span = _field_span(d.data, entry, name)
        enc = value.encode("utf-8")
        if span is not None:
            vstart, vend = span
            old = d.data[vstart:vend]
            enc = _same_case(old.decode("utf-8", "replace"), value).encode("utf-8")
            if old == enc:
                return False
            d.add_edit(vstart, vend, enc, "field")
            return True
        pos, line = _new_field_line(d.data, entry, name, value, d.newline)
        d.add_edit(pos, pos, line, "field")
        self._field_only = False  # a new line can change word counts
        return True

    def remove(self, entry: LedgerEntry) -> None:
        """Delete the entry's whole block (title to the next entry, or its closing ``---``)."""
        d = self._doc_of(entry)
        d.add_edit(entry.start, entry.end, b"", "remove")
        self._field_only = False

    def replace_entry(self, entry: LedgerEntry, new: bytes | str) -> None:
        """Put ``new`` (converted to the file's line ending) in place of the entry's block."""
        d = self._doc_of(entry)
        data = new.encode("utf-8") if isinstance(new, str) else new
        data = _nl_convert(data, d.newline)
        check = parse_ledger_bytes(data, d.path, d.kind)
        if len(check.entries) != 1:
            raise UsageError(f"replacement text must hold exactly one entry, "
                             f"found {len(check.entries)}")
        d.add_edit(entry.start, entry.end, data, "replace")
        self._field_only = False

    def insert_entry(self, kind: str, text: bytes | str, position: int | None = None) -> None:
        """Add one entry to ``kind``'s file: at the end (``position=None``) or before the
        ``position``-th entry of the file as read. Form B text gets the ``---`` separator above
        it when it has none; the file's line ending is used."""
        d = self.doc(kind)
        if not d.usable:
            if d.exists:
                raise RefusedError(f"cannot edit: {d.error}", path=d.path)
            raise NotFoundError(f"{d.name} does not exist", path=d.path,
                                hint="Run `toolkit ledger reset` to create fresh ledger files")
        data = text.encode("utf-8") if isinstance(text, str) else text
        data = data.replace(b"\r\n", b"\n").strip(b"\n") + b"\n"
        check = parse_ledger_bytes(data, d.path, kind)
        if len(check.entries) != 1 or (check.header_end > 0 and data[:check.header_end].strip()
                not in (b"", b"---")):
            raise UsageError("inserted text must hold exactly one entry")
        if check.entries[0].form == "B" and not data.lstrip().startswith(b"---"):
            data = b"---\n\n" + data
        entries = d.parse().entries
        base = d.data
        if position is None or position >= len(entries):
            pos = len(base)
            lead = b"" if base.endswith(b"\n\n") or not base else (
                b"\n" if base.endswith(b"\n") else b"\n\n")
            block = lead + data
        else:
            pos = entries[max(position, 0)].start
            block = data + b"\n"
        d.add_edit(pos, pos, _nl_convert(block, d.newline), "insert")
        self._field_only = False

    def resort(self, kind: str) -> bool:
        """Reorder the file's entries (high, medium, low; newest first); False if in order.

        Works on the file as edited so far; call it after the file's other edits."""
        d = self.doc(kind)
        if not d.usable:
            return False
        current = d.render()
        lf = parse_ledger_bytes(current, d.path, kind)
        if len(lf.entries) < 2:
            return False
        blocks = []
        for i, e in enumerate(lf.entries):
            stop = lf.entries[i + 1].start if i + 1 < len(lf.entries) else len(current)
            blocks.append((sort_key(e), i, current[e.start:stop]))
        ordered = sorted(blocks, key=lambda b: (b[0], b[1]))
        if [b[1] for b in ordered] == list(range(len(blocks))):
            return False
        nl = lf.newline
        parts = [current[:lf.header_end]]
        for n, (_, _, block) in enumerate(ordered):
            if n + 1 < len(ordered) and not block.endswith(nl + nl):
                block = block.rstrip(b"\r\n") + nl + nl
            parts.append(block)
        new = b"".join(parts)
        d.edits = []
        d.add_edit(0, len(d.data), new, "whole")
        self._field_only = False
        return True

    # ----------------------------------------------------------- plan and commit

    def _counts_exact(self) -> bool:
        return all(d.parsed or not d.usable for d in self.docs.values())

    def plan(self) -> list[Change]:
        """What a commit would write: the ledger files, then meta.yaml and .meta.json."""
        changes = self.plan_ledger()
        return changes + self._meta_changes(changes) if changes else []

    def _new_stats(self, changes: list[Change]) -> tuple[dict[str, int | None],
                                                         dict[str, int], int]:
        """Exact entries per file, confidence totals and words after the changes."""
        new_by_kind = {c.path: c.new for c in changes}
        entries: dict[str, int | None] = {}
        confs = {"high": 0, "medium": 0, "low": 0}
        words = 0
        for kind in LEDGER_FILES:
            d = self.docs[kind]
            if not d.usable:
                entries[kind] = None if d.exists else 0
                continue
            if d.path in new_by_kind:
                lf = parse_ledger_bytes(new_by_kind[d.path], d.path, kind)
            else:
                lf = d.parse()
            entries[kind] = len(lf.entries)
            for e in lf.entries:
                if e.confidence in confs:
                    confs[e.confidence] += 1
            words += count_words(lf.data)
        return entries, confs, words

    def _meta_changes(self, changes: list[Change]) -> list[Change]:
        """The meta.yaml and .meta.json changes that go with the ledger changes."""
        out: list[Change] = []
        exact = not self._field_only or self._counts_exact()
        if exact:
            for d in self.docs.values():  # recount needs every file parsed
                if d.usable:
                    d.parse()
            entries, confs, words = self._new_stats(changes)
            self._entries_total = sum(v for v in entries.values() if v is not None)
        else:
            deltas = self._confidence_deltas()
            self._entries_total = None
        if self.meta_yaml is not None and self.meta_yaml.data.strip():
            snap = self.meta_yaml
            if exact:
                new = update_meta_yaml(snap.data, snap.given, entries=entries, confidences=confs,
                                       notes=self.notes)
            else:
                new = update_meta_yaml(snap.data, snap.given, entries=None, confidences=None,
                                       deltas=deltas, notes=self.notes)
            if new != snap.data:
                out.append(Change(snap.path, "meta.yaml", snap.data, new))
        elif self.meta_yaml is None:
            self._note_once("meta.yaml is missing; entry counts were not recorded")
        if getattr(self, "_meta_json_error", None) is not None:
            raise self._meta_json_error  # type: ignore[misc]
        if self.meta_json is not None:
            snap = self.meta_json
            updates: dict[str, Any] = {}
            if exact:
                updates["total_patterns"] = sum(v for v in entries.values() if v is not None)
                updates["estimated_tokens"] = tokens_for_words(words)
            if read_lock_field(self._meta_json_data) is not None:
                updates["lock"] = None  # released (or a stale lock cleared) by the commit
            if self.meta_json_updates is not None:
                updates.update(self.meta_json_updates(self._meta_json_data))
            if updates:
                new = update_meta_json(snap.data, snap.given, updates)
                if new != snap.data:
                    out.append(Change(snap.path, ".meta.json", snap.data, new))
        return out

    def _note_once(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _confidence_deltas(self) -> dict[str, int]:
        """Confidence moves made by field edits (the fast path's count update)."""
        deltas: dict[str, int] = {}
        for d in self.docs.values():
            for e in d.edits:
                if e.kind != "field":
                    continue
                old_line = _line_at(d.data, e.start)
                m = _FIELD.match(old_line[1])
                if not m or m.group(1).decode("utf-8", "replace").strip().lower() != "confidence":
                    continue
                old = m.group(2).decode("utf-8", "replace").strip().lower()
                new = e.data.decode("utf-8", "replace").strip().lower()
                if old in CONFIDENCES:
                    deltas[old] = deltas.get(old, 0) - 1
                if new in CONFIDENCES:
                    deltas[new] = deltas.get(new, 0) + 1
        return deltas

    def commit(self) -> CommitResult:
        """Write the session's changes (see the module docstring for the order and checks)."""
        self._start_commit()
        changes = self.plan_ledger()
        if not changes:
            return CommitResult([], self.dry_run, notes=list(self.notes))
        meta = self._meta_changes(changes)
        all_changes = changes + meta
        if self.dry_run:
            return CommitResult(all_changes, True, notes=list(self.notes),
                                entries_total=self._entries_total)
        snaps = [self._snapshot_of(c) for c in changes]
        meta_yaml_change = next((c for c in meta if c.name == "meta.yaml"), None)
        json_change = next((c for c in meta if c.name == ".meta.json"), None)
        self._check_writable([c.path for c in changes], snaps)
        extra = [s for s in (self.meta_yaml, self.meta_json) if s is not None]
        # The first file written is checked right before its rename (and only the lock field,
        # which a failure gives back, is written before it); the others are checked now so a
        # conflict on them refuses before anything is written.
        self._check_unchanged(snaps[1:] + extra)
        now = self.now()
        sources: list[FileSnapshot | Path] = list(snaps)
        if meta_yaml_change is not None and self.meta_yaml is not None:
            sources.append(self.meta_yaml)
        if self.meta_json is not None:
            sources.append(self.meta_json)
        dest = unique_dir(self.ledger_dir / ".backups",
                          f"{self.backup_prefix}-{now:%Y-%m-%d-%H%M%S}")
        backup_files(sources, dest, link=True, fsync_folder=False)
        held = self._take_json_lock(now)

        def validate_changed() -> None:
            for c in changes:
                d = self.docs[_kind_of(c.name)]
                if not d.validate():
                    raise DataError(f"{d.error}; this file is never rewritten, nothing written")

        items: list[tuple[Any, bytes, FileSnapshot | None]] = [
            (snap, c.new, snap) for c, snap in zip(changes, snaps, strict=True)]
        # the backups hold the bytes read (copies of them, or links verified by inode)
        backups: list[Path | None] = [dest / snap.given.name for snap in snaps]
        sums: list[str | None] = [snap.sha256 for snap in snaps]
        if meta_yaml_change is not None and self.meta_yaml is not None:
            items.append((self.meta_yaml, meta_yaml_change.new, self.meta_yaml))
            backups.append(dest / "meta.yaml")
            sums.append(self.meta_yaml.sha256)
        if held is not None and self.meta_json is not None:
            final = json_change.new if json_change is not None else update_meta_json(
                self.meta_json.data, self.meta_json.given, {"lock": None})
            items.append((held, final, held))
            backups.append(dest / ".meta.json")  # the version before the lock was taken
            sums.append(self.meta_json.sha256)
        journal = Journal(journal_path(self.vault), self.vault, self.operation, backups,
                          backup_sums=sums)
        try:
            # All temp files are written, then flushed together with the backup folder while
            # the files' UTF-8 is checked (A6); then the journal names them all (G4), and only
            # then is anything renamed, each file right after its last check against the
            # version read.
            replace_all(items, during_fsync=validate_changed, also_fsync=[dest],
                        journal=journal)
        except ToolkitError as exc:
            done = [Path(p).name for p in getattr(exc, "written", [])]
            json_done = held is not None and any(Path(p) == held.path
                                                 for p in getattr(exc, "written", []))
            if not json_done:
                self._release_json_lock(held, None, quiet=True)
            if done:
                raise type(exc)(f"{exc.message}; already written: {', '.join(done)}",
                                path=exc.path, line=exc.line,
                                hint=f"The files as they were are in {dest}") from None
            undone = getattr(exc, "rolled_back", [])
            if undone:  # all-or-nothing: the files already replaced were put back
                raise type(exc)(f"{exc.message} (the files already replaced were put back: "
                                f"{', '.join(undone)})", path=exc.path, line=exc.line,
                                hint=exc.hint) from None
            shutil.rmtree(dest, ignore_errors=True)
            raise
        return CommitResult(all_changes, False, backup_dir=dest, notes=list(self.notes),
                            entries_total=self._entries_total)

    def _start_commit(self) -> None:
        if self._lock is None or not self._lock.held:
            raise UsageError("commit() needs an open session (use `with EditorSession(...)`)")
        if self._committed:
            raise UsageError("this session was already committed")
        self._committed = True

    def _snapshot_of(self, change: Change) -> FileSnapshot:
        snap = self.docs[_kind_of(change.name)].snapshot
        assert snap is not None
        return snap

    def _check_unchanged(self, snaps: Iterable[FileSnapshot]) -> None:
        for snap in snaps:
            if changed_since(snap):
                raise ConflictError("changed on disk since it was read; nothing written",
                                    path=snap.given,
                                    hint="Run the command again to work on the current version")

    def _take_json_lock(self, now: dt.datetime) -> FileSnapshot | None:
        """Write our holder into ``.meta.json``'s ``lock`` (the seed's lock) for the writes."""
        snap = self.meta_json
        if snap is None:
            return None
        data = update_meta_json(snap.data, snap.given,
                                {"lock": {"pid": holder_id(), "acquired": iso_z(now)}})
        atomic_replace(snap, data, expected=snap, fsync_dir=False)
        return FileSnapshot.read(snap.given, self.max_bytes)

    def _release_json_lock(self, held: FileSnapshot | None, final: bytes | None, *,
                           quiet: bool = False) -> None:
        """Write the final ``.meta.json`` (``final``: counts updated, lock null) or, when the
        commit failed, the file as it was with the lock field null."""
        if held is None or self.meta_json is None:
            return
        if final is None:
            final = update_meta_json(self.meta_json.data, self.meta_json.given, {"lock": None})
        try:
            atomic_replace(held, final, expected=held, fsync_dir=False)
        except ToolkitError:
            if not quiet:
                raise

    def reset(self, confirm: Callable[[ResetPlan], bool] | None = None) -> ResetPlan | None:
        """The seed's reset: move meta.yaml and the five files to ``archive/YYYY-MM-DD-HHMMSS/``
        and write fresh templates. ``confirm`` sees the plan (under the lock) and may cancel:
        then None is returned and nothing is written. A dry run returns the plan only."""
        self._start_commit()
        now = self.now()
        names = ["meta.yaml", *(f"{k}.md" for k in LEDGER_FILES)]
        snaps: dict[str, FileSnapshot | None] = {"meta.yaml": self.meta_yaml}
        for kind in LEDGER_FILES:
            d = self.docs[kind]
            if d.exists and d.snapshot is None:
                raise RefusedError(f"cannot archive: {d.error}", path=d.path)
            snaps[d.name] = d.snapshot
        fresh = {"meta.yaml": META_TEMPLATE.encode()}
        for k in LEDGER_FILES:
            fresh[f"{k}.md"] = FILE_TEMPLATE.format(title=LEDGER_TITLES[k]).encode()
        changes = [Change(self.ledger_dir / n, n, s.data if s is not None else b"", fresh[n])
                   for n, s in ((n, snaps[n]) for n in names)]
        json_new: bytes | None = None
        if getattr(self, "_meta_json_error", None) is not None:
            raise self._meta_json_error  # type: ignore[misc]
        if self.meta_json is not None:
            words = sum(count_words(fresh[f"{k}.md"]) for k in LEDGER_FILES)
            json_new = update_meta_json(self.meta_json.data, self.meta_json.given,
                                        {"total_patterns": 0,
                                         "estimated_tokens": tokens_for_words(words),
                                         "lock": None})
            if json_new != self.meta_json.data:
                changes.append(Change(self.meta_json.path, ".meta.json", self.meta_json.data,
                                      json_new))
        archive = unique_dir(self.ledger_dir / "archive", f"{now:%Y-%m-%d-%H%M%S}")
        moved = [n for n in names if snaps[n] is not None]
        plan = ResetPlan(archive, moved, changes, self.dry_run, list(self.notes))
        if confirm is not None and not confirm(plan):
            return None
        if self.dry_run:
            return plan
        present = [s for s in snaps.values() if s is not None]
        self._check_writable([self.ledger_dir / n for n in names], present)
        self._check_unchanged(present + ([self.meta_json] if self.meta_json else []))
        json_backup: Path | None = None
        if self.meta_json is not None:  # the version before the lock, for an undo
            rdir = unique_dir(self.ledger_dir / ".backups", f"reset-{now:%Y-%m-%d-%H%M%S}")
            backup_files([self.meta_json], rdir)
            json_backup = rdir / ".meta.json"
        held = self._take_json_lock(now)
        try:
            # The archive holds the files as read (hard links where possible, verified);
            # then the fresh templates replace the six files as one journaled set (G4).
            backup_files([s for s in (snaps[n] for n in moved) if s is not None], archive,
                         link=True)
        except BaseException:
            self._release_json_lock(held, None, quiet=True)
            raise
        items: list[tuple[Any, bytes, FileSnapshot | None]] = []
        backups: list[Path | None] = []
        for name in names:
            snap = snaps[name]
            items.append((snap if snap is not None else self.ledger_dir / name, fresh[name],
                          snap))
            backups.append(archive / name if snap is not None else None)
        if held is not None and json_new is not None:
            items.append((held, json_new, held))
            backups.append(json_backup)
        journal = Journal(journal_path(self.vault), self.vault, "reset", backups,
                          undo_remove=[archive])
        try:
            replace_all(items, journal=journal)
        except ToolkitError as exc:
            done = [Path(p).name for p in getattr(exc, "written", [])]
            if not done:  # nothing replaced, or all put back: no archive, lock given back
                shutil.rmtree(archive, ignore_errors=True)
                self._release_json_lock(held, None, quiet=True)
                undone = getattr(exc, "rolled_back", [])
                if undone:
                    raise type(exc)(f"{exc.message} (the files already replaced were put "
                                    f"back: {', '.join(undone)})", path=exc.path,
                                    line=exc.line, hint=exc.hint) from None
                raise
            raise type(exc)(f"{exc.message}; already written: {', '.join(done)}",
                            path=exc.path, line=exc.line,
                            hint=f"The files as they were are in {archive}") from None
        plan.notes = list(self.notes)
        return plan

    def plan_ledger(self) -> list[Change]:
        changes = []
        for kind in LEDGER_FILES:
            d = self.docs[kind]
            if d.edits:
                new = d.render()
                if new != d.data:
                    edits = tuple((e.start, e.end, e.data)
                                  for e in sorted(d.edits, key=lambda e: (e.start, e.end, e.seq)))
                    changes.append(Change(d.path, d.name, d.data, new, edits))
        return changes

    def _check_writable(self, paths: list[Path], snaps: list[FileSnapshot]) -> None:
        """Refuse before touching anything: link rules, folders we cannot write."""
        for p in paths:
            if p.is_symlink() or p.exists():
                _, notes = check_editable(p, self.vault, force=self.force)
                for n in notes:
                    self._note_once(n)
        folders = {Path(os.path.realpath(p)).parent for p in paths} | {self.ledger_dir}
        for folder in sorted(folders):
            if not os.access(folder, os.W_OK | os.X_OK):
                raise RefusedError("folder is not writable; nothing written", path=folder,
                                   hint="Make it writable (chmod u+w) and run again")
        backups = self.ledger_dir / ".backups"
        if backups.exists() and (not backups.is_dir()
                                 or not os.access(backups, os.W_OK | os.X_OK)):
            raise RefusedError("backup folder is not writable; nothing written", path=backups,
                               hint="Make it a writable folder and run again")


def _kind_of(name: str) -> str:
    return name[:-3] if name.endswith(".md") else name


def _title_matches(title: str | None, q: str, exact: bool) -> bool:
    key = title_key(title)
    return key == q if exact else q in key


def _same_case(old: str, new: str) -> str:
    """``new`` written the way ``old`` was: ``High``, ``HIGH`` or ``high``."""
    old = old.strip()
    if old.isupper() and len(old) > 1:
        return new.upper()
    if old[:1].isupper():
        return new[:1].upper() + new[1:]
    return new


def _line_at(data: bytes, pos: int) -> tuple[int, bytes]:
    start = data.rfind(b"\n", 0, pos) + 1
    nl = data.find(b"\n", pos)
    end = len(data) if nl < 0 else nl + 1
    return start, data[start:end]


def _title_line_index(lines: list[tuple[int, bytes]], form: str) -> int:
    for i, (_, line) in enumerate(lines):
        if form == "A" and line.startswith(b"## "):
            return i
        if form == "B" and (line.startswith(b"**Title:**") or line.startswith(b"**Title**:")):
            return i
    raise UsageError("entry has no title line where the parser found one")


def _field_span(data: bytes, entry: LedgerEntry, name: str) -> tuple[int, int] | None:
    """Byte range of the value the parser reads for field ``name`` (last occurrence wins, as
    in the parser; Form A stops at the first ``###`` section)."""
    lines = _lines_with_offsets(data, entry.start, entry.end)
    ti = _title_line_index(lines, entry.form)
    want = name.lower()
    found: tuple[int, int] | None = None
    for off, line in lines[ti + 1:]:
        if entry.form == "A":
            if line.startswith(b"### "):
                break
        elif line[:1] not in (b"*", b"-", b" ", b"\t", b"+"):
            continue
        m = _FIELD.match(line)
        if m and m.group(1).decode("utf-8", "replace").strip().lower() == want:
            found = (off + m.start(2), off + m.end(2))
    return found


def _new_field_line(data: bytes, entry: LedgerEntry, name: str, value: str,
                    newline: bytes) -> tuple[int, bytes]:
    """Where and what to insert for a field the entry lacks: after its last header field."""
    lines = _lines_with_offsets(data, entry.start, entry.end)
    ti = _title_line_index(lines, entry.form)
    off, line = lines[ti]
    pos = off + len(line)
    if entry.form == "A":
        text = f"- **{name}:** {value}".encode()
        for o, ln in lines[ti + 1:]:
            if ln.startswith(b"### "):
                break
            if _FIELD.match(ln):
                pos = o + len(ln)
    else:
        text = f"**{name}:** {value}".encode()
        for o, ln in lines[ti + 1:]:
            if not ln.strip() or not _FIELD.match(ln):
                break
            pos = o + len(ln)
    prev = data[:pos]
    lead = b"" if prev.endswith(b"\n") else newline
    return pos, lead + text + newline


# --------------------------------------------------------------------------- fast title search


_START_NL = re.compile(rb"\n(?:## |\*\*Title(?::\*\*|\*\*:))")
_TITLE_LINE_NL = re.compile(rb"\n((?:## |\*\*Title(?::\*\*|\*\*:))[^\n]*)")
_FENCE_NL = re.compile(rb"\n([ \t]{0,3})(`{3,}|~{3,})")
MAX_FAST_CANDIDATES = 64


def _is_start(line: bytes) -> str | None:
    if line.startswith(b"## "):
        return "A"
    if line.startswith(b"**Title:**") or line.startswith(b"**Title**:"):
        return "B"
    return None


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


def _quick_title_lines(data: bytes, q: str) -> list[int] | None:
    """Start offsets of the entry-start lines whose ASCII-lowered bytes contain ``q`` -- every
    line whose title can match -- or None when this shortcut cannot be exact (a non-ASCII
    query, a character that case-folds to ASCII somewhere in the file, too many occurrences).
    Fenced lines are included; the caller filters them."""
    if not q.isascii() or any(b in data for b in _FOLD_TO_ASCII_BYTES):
        return None
    lowered = data.lower()
    found: list[int] = []
    seen_line = -1
    count = 0
    for m in re.finditer(re.escape(q.encode("ascii")), lowered):
        count += 1
        if count > MAX_QUICK_OCCURRENCES:
            return None
        start = lowered.rfind(b"\n", 0, m.start()) + 1
        if start == seen_line:
            continue
        seen_line = start
        first = _first_line_offset(data)
        if start == 0 and first:
            start = first  # the BOM is not part of line 1
        if _is_start(data[start:start + 16]) is not None:
            found.append(start)
        if len(found) > MAX_FAST_CANDIDATES:
            return None
    return found


_BACKTICKS = re.compile(b"```")
_TILDES = re.compile(b"~~~")


def _may_have_fences(data: bytes) -> bool:
    """Could the file hold a fence line? (re's literal search is faster than ``in`` here; inline
    `code` has single backticks, so most ledgers answer no without the per-line scan.)"""
    return (_BACKTICKS.search(data) is not None
            or (b"~" in data and _TILDES.search(data) is not None))


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
    return _is_start(data[first:first + 16]) is not None


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
        return [e for e in parse_ledger_bytes(data, path, kind).entries
                if _title_matches(e.title, q, exact)]
    quick = _quick_title_lines(data, q)
    if quick is not None:
        spans = _fenced_spans(data) if _may_have_fences(data) else []
        out: list[LedgerEntry] = []
        for off in quick:
            if spans and _in_spans(off, spans):
                continue
            entry = _entry_at(data, off, spath, kind, spans)
            if _title_matches(entry.title, q, exact):
                out.append(entry)
        return out
    titles = _TITLE_LINE_NL.findall(data)
    if _line0_start(data):
        first = data[_first_line_offset(data):].split(b"\n", 1)[0]
        titles.insert(0, first)
    if not q:
        return [e for e in parse_ledger_bytes(data, path, kind).entries
                if _title_matches(e.title, q, exact)]
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
            return [e for e in parse_ledger_bytes(data, path, kind).entries
                    if _title_matches(e.title, q, exact)]
    if not hits:
        return []
    spans = _fenced_spans(data) if _may_have_fences(data) else []
    line0 = _line0_start(data)
    out = []
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
                return [e for e in parse_ledger_bytes(data, path, kind).entries
                        if _title_matches(e.title, q, exact)]
        if spans and _in_spans(off, spans):
            continue
        entry = _entry_at(data, off, spath, kind, spans)
        if _title_matches(entry.title, q, exact):
            out.append(entry)
    return out


# --------------------------------------------------------------------------- reset

META_TEMPLATE = """last_reflection: null
total_reflections: 0
total_entries: 0
config:
  low_confidence_prune_days: 30
  medium_confidence_demote_days: 90
entries_by_file:
  patterns: 0
  antipatterns: 0
  tool-preferences: 0
  edge-cases: 0
  project-quirks: 0
"""

FILE_TEMPLATE = ("# {title}\n\n<!-- Entries are added by /smith-reflect. "
                 "Each entry starts with ## heading. -->\n")


@dataclass
class ResetPlan:
    """What a reset moves to the archive and the fresh files it writes."""

    archive_dir: Path
    moved: list[str]
    changes: list[Change]
    dry_run: bool
    notes: list[str] = field(default_factory=list)

    def diff(self) -> str:
        return "".join(c.diff() for c in self.changes)
