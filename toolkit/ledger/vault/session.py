"""The edit session: the only writer of Smith Ledger files (byte-preserving, locked, backed up,
atomic).

Every change to ``.smith/vault/ledger/`` goes through an :class:`EditorSession`::

    from toolkit.ledger.vault import EditorSession

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
checks it (before anything is renamed); each gives a note in ``notes``. A file that is there
but cannot be read (no permission) is unknown: a commit that recounts the ledger (an entry
removed or added: prune, reconcile) refuses before writing anything
(:func:`refuse_unreadable`), and a field edit (promote, demote) moves the recorded counts by
what it changed instead of recounting.

Field edits follow the codec's one rule (:mod:`toolkit.ledger.codec`): the occurrence the
reader shows is the one changed; a missing field goes after the entry's last head field.
The rest of the vault package: :mod:`~toolkit.ledger.vault.lock` (the flock and the
``.meta.json`` lock field), :mod:`~toolkit.ledger.vault.meta` (``meta.yaml``/``.meta.json``),
:mod:`~toolkit.ledger.vault.journal` (the intent journal, recovery),
:mod:`~toolkit.ledger.vault.locate` (entries by title without a full parse),
:mod:`~toolkit.ledger.vault.diff` (diffs).

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
``after_journal`` (journal written, nothing renamed), ``after_rename@<n>`` (n files renamed);
a reset's ``after_archive`` (its journal written and its archive made, nothing renamed).
"""


from __future__ import annotations

import datetime as dt
import errno
import os
import re
import shutil
import stat
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
    permission_denied,
)
from toolkit.ledger.codec import (
    BOM,
    FIELD,
    dominant_newline,
    entry_form,
    field_edit,
    sort_key,
    title_key,
)
from toolkit.ledger.vault.backups import refuse_no_folder
from toolkit.ledger.vault.diff import Change
from toolkit.ledger.vault.journal import journal_path, recover_interrupted
from toolkit.ledger.vault.locate import locate_entries, title_matches
from toolkit.ledger.vault.lock import (
    holder_id,
    iso_z,
    judge_lock,
    lock_path,
    lock_timeout,
    now_for,
    read_lock_field,
)
from toolkit.ledger.vault.meta import (
    count_words,
    read_meta_json,
    tokens_for_words,
    update_meta_json,
    update_meta_yaml,
)
from toolkit.ledger.vault.paths import check_inside
from toolkit.records import CONFIDENCES, LEDGER_FILES, LEDGER_TITLES, LedgerEntry
from toolkit.safewrite import (
    EditList,
    FileLock,
    FileSnapshot,
    Journal,
    atomic_replace,
    backup_files,
    break_backup_links,
    changed_since,
    check_changeable,
    check_editable,
    cleanup_orphan_temps,
    edit_record,
    pause,
    prestart_helpers,
    replace_all,
    sha256_of_edit,
    unique_dir,
)
from toolkit.sources.smith import LedgerFile, parse_ledger_bytes
from toolkit.textio import check_utf8, not_regular

# Files at least this big are searched by title without parsing them whole (see find()).
FAST_FIND_BYTES = 256 * 1024


def _nl_convert(data: bytes, newline: bytes) -> bytes:
    data = data.replace(b"\r\n", b"\n")
    return data.replace(b"\n", newline) if newline != b"\n" else data


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
        self.line_hint: tuple[int, int] | None = None  # for the diff (see Change.line_hint)
        if self.exists:
            try:
                self.snapshot = FileSnapshot.read(self.path, max_bytes)
            except TooLargeError:
                raise  # never treated as empty (FAULTS I4): the command names it, exit 65
            except DataError as exc:
                self.error = str(exc)
            except OSError as exc:
                self.error = f"{self.path}: {_not_opened(self.path, exc)}"

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

    def why(self) -> str:
        """Why the file could not be read, without its path (a refusal names it)."""
        return (self.error or "cannot read").removeprefix(f"{self.path}: ")

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
        return dominant_newline(self.data)

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


# --------------------------------------------------------------------------- the session


def unreadable_fix(path: Path) -> str:
    """What to do about a ledger file that could not be read: move away what is in its
    place (a folder, a FIFO...), or make it readable (a permission)."""
    try:
        other = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        other = True  # (a link to a file that is not there)
    except OSError:
        other = False  # (a folder on the way that cannot be searched: a permission too)
    if other:
        return "Move it away, put the ledger file back (from .backups/ or git)"
    return str(permission_denied(path).hint)


def _unreadable_refusal(path: Path, why: str, doing: str) -> RefusedError:
    fix = unreadable_fix(path)
    return RefusedError(
        f"cannot {doing}: {why}; the ledger's counts (meta.yaml, .meta.json) cannot be "
        "recomputed without its entries", path=path,
        hint=f"{fix}, then run the {doing} again; nothing was changed")


_NO_TARGET = "is a link to a file that does not exist"


def _not_opened(path: Path, exc: OSError) -> str:
    """Why a ledger file that is there could not be opened: a link to nothing said as every
    refusal of it says it (not "No such file or directory"), else the system's reason."""
    if isinstance(exc, FileNotFoundError) and os.path.islink(path):
        return _NO_TARGET
    return f"cannot read: {exc.strerror or exc}"


def _link_to_no_file(path: Path) -> str:
    """Why the link at ``path`` leads to no file: its target is not there, or the links go
    round in a loop."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return _NO_TARGET
    except OSError as exc:
        return ("is a symbolic link loop" if exc.errno == errno.ELOOP else
                f"cannot be read ({exc.strerror})")
    return _NO_TARGET  # (there again meanwhile)


def refuse_unreadable(ledger_dir: Path, doing: str) -> None:
    """Refuse (:class:`RefusedError`, naming the file) when a ledger file is there but cannot
    be read: no permission, or a folder, a FIFO or a link to nothing in its place. A write
    that recounts the whole ledger must not count it as empty. Called before anything is
    written; a FIFO is never waited on."""
    for kind in LEDGER_FILES:
        path = ledger_dir / f"{kind}.md"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as exc:
            if not os.path.lexists(path):
                continue  # (no file: an empty one)
            raise _unreadable_refusal(path, _not_opened(path, exc), doing) from None
        try:
            mode = os.fstat(fd).st_mode
        finally:
            os.close(fd)
        what = not_regular(mode)
        if what:
            raise _unreadable_refusal(path, what, doing)


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

    def lock_now(self) -> dt.datetime:
        """The instant the seed's ``.meta.json`` lock is judged and stamped with: the run's
        time, never moved to the ``today`` setting, since the lock is shared with other
        processes (a Smith session) that stamp it with their own clock."""
        return self._now or now_for()

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
        if not self.dry_run:
            prestart_helpers()  # started while the files are read and the edit planned
        try:
            recover_interrupted(self.vault, locked=True)  # before its temp files look orphaned
            if not self.dry_run:
                for orphan in cleanup_orphan_temps(self.ledger_dir):
                    self.notes.append(f"removed {orphan.name}, left by a run that was killed")
                # (the backups of an edit, and the archive a reset makes: both are hard
                # links of the live files until the files are replaced)
                for name in (*(f"{k}.md" for k in LEDGER_FILES), "meta.yaml", ".meta.json"):
                    for root in (".backups", "archive"):
                        for healed in break_backup_links(self.ledger_dir / name,
                                                         self.ledger_dir / root):
                            self.notes.append(f"{healed} was still linked to {name} after a "
                                              "killed run; made it a copy")
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
        return read_meta_json(self.ledger_dir / ".meta.json", self.max_bytes)

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
            now = self.lock_now()
            blocks, note = judge_lock(holder, now, force=self.force)
            if not blocks:
                if note:
                    self.notes.append(note)
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
                found = [e for e in d.parse().entries if title_matches(e.title, q, exact)]
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
        """Set one field's value on its own line (the line is added when missing), by the
        codec's one rule (:mod:`toolkit.ledger.codec`); False when it already has it."""
        d = self._doc_of(entry)
        if d.edit_at(entry.start, entry.end) is not None:
            raise UsageError(f"{d.name}: this entry was already removed or replaced in this "
                             "session")
        edit = field_edit(d.data, entry.start, entry.end, entry.form, name, value, d.newline)
        if edit is None:
            return False
        start, end, data = edit
        d.add_edit(start, end, data, "field")
        d.line_hint = _title_line(d.data, entry) or d.line_hint
        if start == end:
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
                raise RefusedError(f"cannot edit: {d.why()}", path=d.path)
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
        return all(d.parsed or not d.usable for d in self.docs.values()) and not self.unreadable()

    def unreadable(self) -> list[_Doc]:
        """The ledger files that are there but could not be read (no permission, a folder or
        a link to nothing in its place): unknown, never empty."""
        return [d for d in self.docs.values() if d.exists and d.snapshot is None]

    def refuse_unreadable(self) -> None:
        """Refuse (naming the first file) when a ledger file could not be read: a write that
        recounts the ledger would count it as empty (see :func:`refuse_unreadable`)."""
        for d in self.unreadable():
            raise _unreadable_refusal(d.path, d.why(), self.operation)

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
            self.refuse_unreadable()  # (a field edit moves the counts instead: not exact)
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
            meta = self.ledger_dir / "meta.yaml"
            what = ("is missing" if not (meta.exists() or meta.is_symlink()) else
                    "is a folder, not a file" if meta.is_dir() else
                    "is not a regular file" if meta.exists() else _link_to_no_file(meta))
            self._note_once(f"meta.yaml {what}; entry counts were not recorded")
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
                m = FIELD.match(old_line[1])
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
        # The journal knows each file's new version by its byte edits when they are small
        # (a promote: one line), so only the old bytes are hashed (backup and journal);
        # otherwise by its SHA-256, the bytes before the first edit hashed once for both.
        edit_lists: list[EditList | None] = [
            c.edits if c.edits and edit_record(snap.data, len(c.new), c.edits) is not None
            else None for c, snap in zip(changes, snaps, strict=True)]
        new_sums: list[str | None] = [
            None if edits is not None else
            sha256_of_edit(snap, c.new, min((e[0] for e in c.edits), default=0)
                           if c.edits else 0)
            for c, snap, edits in zip(changes, snaps, edit_lists, strict=True)]
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
        # The seed's lock field: its temp file is flushed with the others and renamed before
        # the journal and before any ledger file (replace_all's ``first``).
        lock = self._json_lock_bytes(self.lock_now())

        def validate_changed() -> None:
            for c in changes:
                d = self.docs[_kind_of(c.name)]
                if not d.validate():
                    raise DataError(f"{d.error}; this file is never rewritten, nothing written")

        items: list[tuple[Any, bytes, FileSnapshot | None]] = [
            (snap, c.new, snap) for c, snap in zip(changes, snaps, strict=True)]
        # the backups hold the bytes read (copies of them, or links verified by inode)
        backups: list[Path | None] = [dest / snap.given.name for snap in snaps]
        # the backups' digests are those of the snapshots: taken when the journal is written,
        # while the temp files (the big one written in a helper thread) are flushed
        sums: list[str | FileSnapshot | None] = list(snaps)
        if meta_yaml_change is not None and self.meta_yaml is not None:
            items.append((self.meta_yaml, meta_yaml_change.new, self.meta_yaml))
            backups.append(dest / "meta.yaml")
            sums.append(self.meta_yaml)
            new_sums.append(None)
            edit_lists.append(None)
        if lock is not None and self.meta_json is not None:
            final = json_change.new if json_change is not None else update_meta_json(
                self.meta_json.data, self.meta_json.given, {"lock": None})
            items.append((lock[0], final, lock[0]))  # checked against the locked version
            backups.append(dest / ".meta.json")  # the version before the lock was taken
            sums.append(self.meta_json)
            new_sums.append(None)
            edit_lists.append(None)
        journal = Journal(journal_path(self.vault), self.vault, self.operation, backups,
                          backup_sums=sums, new_sums=new_sums, edits=edit_lists)
        try:
            # All temp files are written, then flushed together with the backup folder while
            # the files' UTF-8 is checked (A6); then the journal names them all (G4), and only
            # then is anything renamed, each file right after its last check against the
            # version read.
            replace_all(items, during_fsync=validate_changed, also_fsync=[dest],
                        journal=journal, first=lock)
        except BaseException as exc:
            # an error, or Ctrl-C (KeyboardInterrupt): replace_all put back what it had
            # replaced either way; the lock field and the backup go the same way for both
            held: FileSnapshot | None = getattr(exc, "first_written", None)
            done = [Path(p).name for p in getattr(exc, "written", [])]
            json_done = held is not None and any(Path(p) == held.path
                                                 for p in getattr(exc, "written", []))
            if not json_done:
                self._release_json_lock(held, None, quiet=True)
            if not isinstance(exc, ToolkitError):  # nothing left written: no backup of it
                if not done:
                    shutil.rmtree(dest, ignore_errors=True)
                raise
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
        lock = self._json_lock_bytes(now)
        if lock is None:
            return None
        atomic_replace(lock[0], lock[1], expected=lock[0], fsync_dir=False)
        return FileSnapshot.read(lock[0].given, self.max_bytes)

    def _json_lock_bytes(self, now: dt.datetime) -> tuple[FileSnapshot, bytes] | None:
        """``.meta.json`` as read and its bytes with our holder in the seed's ``lock``."""
        snap = self.meta_json
        if snap is None:
            return None
        return snap, update_meta_json(snap.data, snap.given,
                                      {"lock": {"pid": holder_id(), "acquired": iso_z(now)}})

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
                raise RefusedError(f"cannot archive: {d.why()}", path=d.path,
                                   hint="Restore the file or move it away, then run the "
                                        "reset again; nothing was changed")
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
            json_backup = rdir / ".meta.json"
        held = self._take_json_lock(self.lock_now())
        items: list[tuple[Any, bytes, FileSnapshot | None]] = []
        backups: list[Path | None] = []
        for name in names:
            snap = snaps[name]
            items.append((snap if snap is not None else self.ledger_dir / name, fresh[name],
                          snap))
            backups.append(archive / name if snap is not None else None)
        # the backups hold the bytes read: their digests are the snapshots' (they are made
        # after the journal is written, so the journal cannot read them)
        sums: list[str | FileSnapshot | None] = [snaps[name] for name in names]
        if held is not None and json_new is not None:
            items.append((held, json_new, held))
            backups.append(json_backup)
            sums.append(self.meta_json)

        def archive_files() -> None:
            # The archive holds the files as read (hard links where possible, verified), and
            # .backups/reset-*/ the .meta.json before the lock. Both are made once the
            # journal names them (its rollback removes them) and before the first rename: a
            # run killed earlier left an archive of a reset that never happened, which the
            # history then showed as one.
            if json_backup is not None and self.meta_json is not None:
                backup_files([self.meta_json], json_backup.parent)
            backup_files([s for s in (snaps[n] for n in moved) if s is not None], archive,
                         link=True)
            pause("after_archive")

        # a rollback removes the archive and the backup of .meta.json (the in-process undo
        # below does too)
        undo = [archive] + ([json_backup.parent] if json_backup is not None else [])
        journal = Journal(journal_path(self.vault), self.vault, "reset", backups,
                          undo_remove=undo, backup_sums=sums)
        try:
            # the fresh templates replace the six files as one journaled set (G4)
            replace_all(items, journal=journal, during_fsync=archive_files)
        except BaseException as exc:  # an error, or Ctrl-C (KeyboardInterrupt)
            done = [Path(p).name for p in getattr(exc, "written", [])]
            if not done:  # nothing replaced, or all put back: no archive, lock given back
                shutil.rmtree(archive, ignore_errors=True)
                if json_backup is not None:
                    shutil.rmtree(json_backup.parent, ignore_errors=True)
                self._release_json_lock(held, None, quiet=True)
                if not isinstance(exc, ToolkitError):
                    raise
                undone = getattr(exc, "rolled_back", [])
                if undone:
                    raise type(exc)(f"{exc.message} (the files already replaced were put "
                                    f"back: {', '.join(undone)})", path=exc.path,
                                    line=exc.line, hint=exc.hint) from None
                raise
            if not isinstance(exc, ToolkitError):
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
                    changes.append(Change(d.path, d.name, d.data, new, edits,
                                          line_hint=d.line_hint))
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
            check_changeable(folder, "nothing written")
        # the backup folder: reconcile's rule of a file in its place, the one rule
        # (check_changeable) of a folder that cannot be changed
        backups = self.ledger_dir / ".backups"
        refuse_no_folder(backups, "nothing written")
        check_changeable(backups, "nothing written")


def _kind_of(name: str) -> str:
    return name[:-3] if name.endswith(".md") else name



def _title_line(data: bytes, entry: LedgerEntry) -> tuple[int, int] | None:
    """(offset, 0-based index) of the entry's title line: the first line of its block that
    starts an entry (after the separator and blank lines above it)."""
    pos = entry.start
    for _ in range(8):
        line = data[pos:pos + 19]
        if pos == 0:
            line = line.removeprefix(BOM)
        if entry_form(line) is not None:
            return pos, entry.line - 1
        nl = data.find(b"\n", pos, entry.end)
        if nl < 0:
            return None
        pos = nl + 1
    return None


def _line_at(data: bytes, pos: int) -> tuple[int, bytes]:
    start = data.rfind(b"\n", 0, pos) + 1
    nl = data.find(b"\n", pos)
    end = len(data) if nl < 0 else nl + 1
    return start, data[start:end]



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
