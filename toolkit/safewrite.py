"""Safe replacement of users' files: snapshots, change detection, atomic writes, locks, backups.

These are the generic primitives every writer of a user's file builds on (the ledger editor,
the slop ledger updater, reconcile). None of them knows about ledger formats.

* :class:`FileSnapshot` -- the bytes of a file as read, with the stat fields that identify that
  version (size, mtime, inode, device, mode, link count).
* :func:`changed_since` -- has the file changed since the snapshot? Compares the stat fields
  *and* the content, so a same-size edit within the same mtime tick (FAULTS B7) and a
  save-via-rename (B6) are both caught.
* :func:`atomic_replace` -- temp file in the same directory (``.<name>.toolkit-tmp-<pid>-<rand>``),
  write, fsync, the original's mode, a last check against the expected snapshot, ``os.replace``,
  fsync of the directory. On any error the temp file is removed and the original is untouched.
* :class:`FileLock` -- an OS-level ``flock`` with a timeout (a directory can be the lock);
  :class:`toolkit.errors.BusyError` (exit 75) when another run holds it.
* :func:`backup_files` -- copies verified by count and content hash.
* :func:`cleanup_orphan_temps` -- removes temp files left by a killed writer (FAULTS B3).
* :func:`check_editable` -- the symlink and hard-link rules (FAULTS A14).
* :func:`check_changeable` -- a folder this process can change, checked before the first
  change of a tree (a read-only folder is refused, not met part-way).
* :class:`Journal` / :func:`recover_journal` -- an intent journal that makes a multi-file
  :func:`replace_all` all-or-nothing across a crash (FAULTS G4).
* :func:`pause` -- the test-only pause points (``TOOLKIT_EDITOR_PAUSE``).

Test-only pause points: ``TOOLKIT_EDITOR_PAUSE=<point>[,<point>...][:<release>]`` makes the
writer print ``TOOLKIT_EDITOR_PAUSE <point> pid=<pid>`` on stderr when it reaches a named point
(``after_read``, ``after_temp_write``, ``after_replace``; ``after_temp_write@patterns.md`` for
one file only; in a journaled set, ``after_journal`` before the first rename and
``after_rename@<n>`` after the n-th; a reset's ``after_archive``, its archive made after its
journal; reconcile's phases ``after_lock``, ``after_backup``,
``after_ledger_write``, ``after_meta_write``; a load's ``after_staged_commit``, see
:meth:`toolkit.store.Store.commit_staged`) and wait there, so a test can SIGKILL it, edit
the file or start a second run. This is the toolkit's one pause mechanism.
``<release>`` is either a number of seconds to wait or a file path: the writer continues as
soon as that file exists (default: 30 seconds).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import math
import os
import secrets
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from toolkit.errors import (
    BusyError,
    ConflictError,
    DataError,
    NotFoundError,
    RefusedError,
    TooLargeError,
    ToolkitError,
    UsageError,
    chmod_hint,
    permission_denied,
)
from toolkit.textio import max_file_bytes, not_regular, too_large, within

if TYPE_CHECKING:  # imported when first used: it imports logging, which read commands avoid
    from concurrent.futures import Future, ThreadPoolExecutor

T = TypeVar("T")

PAUSE_ENV = "TOOLKIT_EDITOR_PAUSE"
PAUSE_POINTS = ("after_read", "after_temp_write", "after_replace", "after_journal",
                "after_rename", "after_lock", "after_backup", "after_ledger_write",
                "after_meta_write", "after_staged_commit", "after_archive")
TEMP_MARK = ".toolkit-tmp-"
NAME_MAX = 255  # bytes in one file name (Linux, macOS and Windows file systems alike)
# replace_all writes temp files at least this big in the thread that flushes them.
DEFERRED_WRITE_BYTES = 1 << 20


class NoSpaceError(ToolkitError):
    """The disk (or quota) is full: nothing was written."""


# --------------------------------------------------------------------------- helper threads

# fsync and hash jobs run in these threads; an edit has at most this many at once.
HELPER_THREADS = 8
_helpers: ThreadPoolExecutor | None = None
_helpers_lock = threading.Lock()
# (pool, count) once prestart_helpers started that many threads in that pool
_prestarted: tuple[ThreadPoolExecutor, int] | None = None


def _helper_pool() -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor

    global _helpers
    with _helpers_lock:
        if _helpers is None:
            _helpers = ThreadPoolExecutor(HELPER_THREADS, thread_name_prefix="toolkit-io")
        return _helpers


def _forget_helpers() -> None:
    """In a forked child: the parent's threads do not exist there."""
    global _helpers, _helpers_lock, _prestarted
    _helpers, _helpers_lock, _prestarted = None, threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def prestart_helpers(count: int = HELPER_THREADS) -> None:
    """Start ``count`` helper threads now, so that an edit's fsyncs start at once (a thread
    kept idle wakes quickly on a loaded machine; starting one costs milliseconds). A head
    start only: when no thread can be started, the jobs start theirs when they come. The
    threads stay, idle, as long as the pool: once they were all started, a later call (the
    next edit in the same process) returns at once instead of waking each of them twice."""
    global _prestarted
    pool = _helper_pool()
    if _prestarted is not None and _prestarted[0] is pool and _prestarted[1] >= count:
        return
    go = threading.Event()  # holds each thread on its first job, so each job needs a new one
    started = 0
    try:
        with contextlib.suppress(RuntimeError):  # "can't start new thread"
            for _ in range(count):
                pool.submit(go.wait)
                started += 1
    finally:
        go.set()
    if started == count:
        _prestarted = (pool, count)


def _in_helper(job: Callable[[], None]) -> Future[None] | None:
    """Run ``job`` in a helper thread; None when it was run here, no thread being had."""
    from concurrent.futures import Future

    done: Future[None] = Future()

    def run() -> None:
        if done.set_running_or_notify_cancel():  # False: the caller took it back
            try:
                job()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

    try:
        _helper_pool().submit(run)
    except RuntimeError:  # no thread could be started, yet the job is queued: whoever
        if done.cancel():  # takes it first runs it
            job()
            return None
    return done


# --------------------------------------------------------------------------- snapshots


@dataclass(frozen=True, eq=False)
class FileSnapshot:
    """One version of a file: its bytes and the stat fields that identify it.

    ``path`` is the real file (symlinks resolved); ``given`` is the path as the caller named it.
    ``sha256`` is computed on first use (reading and comparing bytes does not need it).
    """

    path: Path
    data: bytes
    st_size: int
    st_mtime_ns: int
    st_ino: int
    st_dev: int
    mode: int  # permission bits only (stat.S_IMODE)
    st_nlink: int
    given: Path
    _digest: list[str] = field(default_factory=list, repr=False)

    @property
    def bytes(self) -> bytes:  # the name the issue uses
        return self.data

    @property
    def sha256(self) -> str:
        if not self._digest:
            self._digest.append(hashlib.sha256(self.data).hexdigest())
        return self._digest[0]

    @classmethod
    def read(cls, path: str | Path, max_bytes: int | None = None) -> FileSnapshot:
        """Read a whole file, refusing it before reading when it is over the size limit."""
        given = Path(path)
        real = Path(os.path.realpath(given))
        limit = max_file_bytes(max_bytes)
        # opened without waiting: a FIFO where the file belongs would block the open until a
        # writer came, and the caller holds the ledger's lock (it is refused below instead)
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            what = not_regular(st.st_mode)
            if what:
                raise DataError(what, path=given)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        with open(fd, "rb") as fh:
            if st.st_size > limit:
                raise too_large(given, st.st_size, limit)
            # read what stat promises (+1 to notice growth) rather than a limit-sized buffer
            data = fh.read(st.st_size + 1)
            if len(data) > st.st_size:
                data += fh.read(limit + 1 - len(data))
        if len(data) > limit:
            raise TooLargeError("file grew past the size limit while being read", path=given)
        return cls(path=real, data=data, st_size=st.st_size, st_mtime_ns=st.st_mtime_ns,
                   st_ino=st.st_ino, st_dev=st.st_dev, mode=st.st_mode & 0o7777,
                   st_nlink=st.st_nlink, given=given)


def sha256_of_edit(old: FileSnapshot, new: bytes, same_prefix: int) -> str:
    """SHA-256 of ``new``, an edit of ``old.data`` that keeps its first ``same_prefix`` bytes.

    The shared prefix is hashed once for both versions (``old.sha256`` is cached on the way
    when not known yet): a journaled one-line edit of a large file hashes it about 1.5 times
    instead of twice. The prefix is compared first (a memcmp), so a wrong ``same_prefix``
    costs speed, never a wrong digest."""
    data = memoryview(old.data)
    k = max(0, min(same_prefix, len(data), len(new)))
    if not new.startswith(data[:k]):
        k = 0
    h = hashlib.sha256(data[:k])
    if not old._digest:
        h_old = h.copy()
        h_old.update(data[k:])
        old._digest.append(h_old.hexdigest())
    h.update(memoryview(new)[k:])
    return h.hexdigest()


def changed_since(snapshot: FileSnapshot) -> bool:
    """True when the file at ``snapshot.path`` is no longer the version in the snapshot.

    Checks the identity (inode, device: a save-via-rename makes a new inode), size and mtime,
    and then the content itself: an edit of the same size within the same mtime tick changes
    neither size nor mtime, only the bytes. (Comparing the bytes is exact; comparing SHA-256
    digests would be equivalent and slower.)
    """
    try:
        st = os.stat(snapshot.path)
    except FileNotFoundError:
        return True
    if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) != (
            snapshot.st_ino, snapshot.st_dev, snapshot.st_size, snapshot.st_mtime_ns):
        return True
    return not _same_content(snapshot.path, snapshot.data)


def _same_content(path: Path, data: bytes, chunk: int = 1 << 20) -> bool:
    """Does the file hold exactly ``data``? Compared chunk by chunk in one reused buffer (no
    bigger than the file can be if it is the same, plus the byte that would show growth)."""
    view = memoryview(data)
    size = min(chunk, len(data) + 1)
    buf = bytearray(size)
    pos = 0
    try:
        with open(path, "rb", buffering=0) as fh:
            while True:
                n = fh.readinto(buf)
                if not n:
                    return pos == len(data)
                # a whole buffer is compared as it is (a slice of it would be a copy)
                if pos + n > len(data) or (buf if n == size else buf[:n]) != view[pos:pos + n]:
                    return False
                pos += n
    except OSError:
        return False


# --------------------------------------------------------------------------- pause points


def pause(point: str, name: str | None = None) -> None:
    """Test-only: stop at a named point when ``TOOLKIT_EDITOR_PAUSE`` names it (see module doc).

    A point may name the file too: ``after_temp_write@patterns.md`` stops only when that file
    is being written."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    points, _, release = spec.partition(":")
    wanted = {p.strip() for p in points.split(",")}
    if point not in wanted and (name is None or f"{point}@{name}" not in wanted):
        return
    token = point if point in wanted else f"{point}@{name}"
    sys.stderr.write(f"{PAUSE_ENV} {token} pid={os.getpid()}\n")
    sys.stderr.flush()
    wait_s = 30.0
    release_file: Path | None = None
    if release:
        try:
            wait_s = float(release)
        except ValueError:
            release_file = Path(release)
    deadline = time.monotonic() + (wait_s if release_file is None else 60.0)
    while time.monotonic() < deadline:
        if release_file is not None and release_file.exists():
            return
        time.sleep(0.01)


# --------------------------------------------------------------------------- atomic replace


def fsync_dir(directory: Path) -> None:
    """Make the renames done in ``directory`` durable."""
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def temp_path_for(path: Path) -> Path:
    """``.<name>.toolkit-tmp-<pid>-<hex>`` beside ``path``; the name is cut (by bytes) so the
    temp file's name fits where ``path``'s does: a file of the longest name the folder takes
    (NAME_MAX) is still written through a temp file beside it."""
    tail = f"{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    name = os.fsencode(path.name)[:NAME_MAX - 1 - len(os.fsencode(tail))]
    return path.parent / (os.fsdecode(b"." + name) + tail)


def _space_error(path: Path) -> NoSpaceError:
    return NoSpaceError("no space left on device; nothing written", path=path,
                        hint="Free some disk space and run the command again")


def _os_error(exc: OSError, path: Path, what: str = "cannot write") -> ToolkitError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return _space_error(path)
    return ToolkitError(f"{what}: {exc.strerror}; nothing written", path=path,
                        hint="Check that the folder is writable")


class PreparedReplace:
    """The first half of an atomic replace: the new content in a temp file beside the target.

    :meth:`fsync`, then :meth:`finish` (re-check ``expected``, rename) or :meth:`abort`
    (remove the temp file). :func:`atomic_replace` does one file; :func:`replace_all` several,
    with their fsyncs at the same time. ``deferred``: the temp file is only created here; its
    bytes are written by :meth:`fsync` (which :func:`replace_all` runs in a thread, so a big
    file is written while the caller's checks run)."""

    def __init__(self, target: FileSnapshot | str | Path, new_bytes: bytes, *,
                 expected: FileSnapshot | None = None, mode: int | None = None,
                 in_place: bool = False, deferred: bool = False,
                 follow_links: bool = True) -> None:
        if isinstance(target, FileSnapshot):
            self.path = target.path
            self.mode = target.mode if mode is None else mode
            self.expected: FileSnapshot | None = expected if expected is not None else target
        else:
            # follow_links=False: a link at the name is replaced, never written through
            self.path = Path(os.path.realpath(target) if follow_links
                             else os.path.abspath(target))
            self.expected = expected
            try:
                st: os.stat_result | None = os.stat(self.path) if follow_links \
                    else os.lstat(self.path)
            except FileNotFoundError:
                st = None
            what = not_regular(st.st_mode) if st is not None and follow_links else None
            if what:
                # never replaced by a file (a folder, or a FIFO whose read for the journal's
                # digest would wait for a writer): the command says what is there instead
                raise DataError(what, path=self.path,
                                hint="Move it away, then run the command again")
            if mode is None:
                if st is not None and (follow_links or stat.S_ISREG(st.st_mode)):
                    mode = st.st_mode & 0o7777
                else:  # none there, or a link (a link's mode is not a file's)
                    umask = os.umask(0)
                    os.umask(umask)
                    mode = 0o666 & ~umask
            self.mode = mode
        # in_place: a file that must not exist yet, written at its own name (the journal)
        self.tmp = self.path if in_place else temp_path_for(self.path)
        try:
            self.fd: int | None = os.open(
                self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                0o600)
        except OSError as exc:
            if exc.errno == errno.ENOENT and not self.path.parent.is_dir():
                raise NotFoundError(f"folder {self.path.parent} does not exist; nothing "
                                    "written", path=self.path,
                                    hint="Create it first, or write somewhere else") from None
            raise _os_error(exc, self.path, "cannot create a temporary file beside it") \
                from None
        self._pending: bytes | None = new_bytes if deferred else None
        if not deferred:
            try:
                self._write(new_bytes)
            except BaseException:
                self.abort()
                raise

    def _write(self, new_bytes: bytes) -> None:
        assert self.fd is not None
        try:
            view = memoryview(new_bytes)
            while view:
                view = view[os.write(self.fd, view):]
            os.fchmod(self.fd, self.mode)
        except OSError as exc:
            raise _os_error(exc, self.path) from None

    def fsync(self) -> None:
        """Write the bytes (when deferred) and flush them to disk. On failure the caller
        aborts."""
        if self._pending is not None:
            data, self._pending = self._pending, None
            self._write(data)
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                raise _os_error(exc, self.path) from None

    def finish(self) -> Path:
        """Re-check the expected version, then rename the temp file over the target."""
        try:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            pause("after_temp_write", self.path.name)
            if self.expected is not None and changed_since(self.expected):
                raise ConflictError("changed on disk since it was read; nothing written",
                                    path=self.expected.given,
                                    hint="Run the command again to work on the current version")
            os.replace(self.tmp, self.path)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, OSError):
                raise _os_error(exc, self.path) from None
            raise
        pause("after_replace", self.path.name)
        return self.path

    def abort(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


class _Flushes:
    """fsyncs run in helper threads (:func:`prestart_helpers`; fsync releases the GIL, and a
    journaling filesystem commits concurrent fsyncs together), each started as soon as its
    file is written; :meth:`join` waits for all and raises the first failure. A job that no
    helper has taken yet when :meth:`join` comes to it is run by the joining thread (which
    would otherwise only wait: on a busy machine a helper can take milliseconds to wake)."""

    def __init__(self) -> None:
        self.threads: list[tuple[Future[None], Callable[[], None]]] = []
        self.failure: list[BaseException] = []

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # re-raised in the caller's thread
            self.failure.append(exc)

    def start(self, job: Callable[[], None]) -> None:
        running = _in_helper(functools.partial(self._run, job))
        if running is not None:
            self.threads.append((running, job))

    def join(self, path: Path, *, quiet: bool = False) -> None:
        """Wait for every fsync (running here each one no helper has started); raise the first
        failure. ``quiet``: the caller is already failing with its own error (and removes the
        temp files): nothing is raised, and a job not started is dropped."""
        waiting = []
        for running, job in self.threads:
            if running.cancel():  # not started: no helper will run it now
                if not quiet:
                    self._run(job)
            else:
                waiting.append(running)
        for running in waiting:
            running.result()  # waits for it (a job's failure is in self.failure)
        self.threads = []
        if self.failure and not quiet:
            exc = self.failure[0]
            self.failure = []
            if isinstance(exc, OSError):
                raise _os_error(exc, path) from None
            raise exc


def _fsync_all(prepared: list[PreparedReplace], dirs: list[Path],
               work: Callable[[], None] | None) -> None:
    """fsync the temp files and folders at the same time while ``work`` runs here (without
    ``work``, the first fsync runs in this thread)."""
    jobs: list[Callable[[], None]] = [p.fsync for p in prepared]
    jobs += [functools.partial(_fsync_dir, d) for d in dirs]
    flushes = _Flushes()
    try:
        for job in jobs[1:] if work is None else jobs:
            flushes.start(job)
        if work is not None:
            work()
        elif jobs:
            flushes._run(jobs[0])
    except BaseException:
        flushes.join(Path("."), quiet=True)
        raise
    flushes.join(prepared[0].path if prepared else Path("."))


def atomic_replace(target: FileSnapshot | str | Path, new_bytes: bytes, *,
                   expected: FileSnapshot | None = None, mode: int | None = None,
                   fsync: bool = True, fsync_dir: bool = True,
                   during_fsync: Callable[[], None] | None = None,
                   follow_links: bool = True) -> Path:
    """Replace a file's content atomically; return the path written.

    ``target`` is a snapshot (its real path and mode are used) or a path (a new file gets
    ``mode`` or 0644 before the umask; an existing one keeps its mode). ``expected``: refuse
    with :class:`ConflictError` when the file is no longer that version, checked right before
    the rename. Readers see either the old or the new content, never a mix; after a crash the
    original is intact or the new content is complete. ``fsync_dir=False`` leaves the folder's
    fsync to the caller (one :func:`fsync_dir` after several replaces in the same folder).
    ``during_fsync``: work (a check) to run while the disk flushes the temp file; when it raises,
    nothing is renamed and the temp file is removed. ``follow_links=False`` (the toolkit's own
    state files): a symbolic link at a path target is replaced by the file, never written
    through (a user's file, by contrast, is edited at the link's target).
    """
    p = PreparedReplace(target, new_bytes, expected=expected, mode=mode,
                        follow_links=follow_links)
    try:
        if fsync:
            _fsync_all([p], [], during_fsync)
        elif during_fsync is not None:
            during_fsync()
    except BaseException:
        p.abort()
        raise
    path = p.finish()
    if fsync and fsync_dir:
        _fsync_dir(path.parent)
    return path


def write_output(path: str | Path, data: bytes, *, keep: Sequence[Path]) -> Path:
    """Write a file the user named for a command's output (``--output``, ``--junit-xml``).

    A new or regular file is replaced atomically (:func:`atomic_replace`). A named pipe or a
    device (``/dev/stdout``, ``/dev/null``, a FIFO a reader waits on) is written to as it is:
    replacing it would swap the pipe or device for a regular file beside it, which the reader
    never sees (and, run as root, would replace ``/dev/null``). Returns the path written.

    ``keep`` (required, so that no output command forgets it): the files and folders the
    command reads its sources from (:meth:`toolkit.config.Config.source_paths`). An existing
    file that is one of them, or inside one of the folders (through any symbolic link), is
    never replaced by the output: :class:`UsageError`, nothing written."""
    given = Path(path)
    try:
        kind = os.stat(given).st_mode
    except OSError:  # missing (or unreachable): atomic_replace names the problem
        kind = 0
    if stat.S_ISREG(kind) and any(within(given, kept) for kept in keep):
        raise UsageError(f"the output would replace {os.path.realpath(given)}, a file the "
                         "toolkit reads; nothing written", path=given,
                         hint="Write the output somewhere else")
    if not (stat.S_ISFIFO(kind) or stat.S_ISCHR(kind)):
        return atomic_replace(given, data)
    try:
        with open(given, "wb") as fh:  # a buffered write writes all of it, or raises
            fh.write(data)
    except OSError as exc:
        raise _os_error(exc, given) from None
    return given


# Byte edits of a file's old version: (start, end, new bytes) ranges of the old bytes, sorted.
EditList = Sequence[tuple[int, int, bytes]]


@dataclass
class Journal:
    """An intent journal for one multi-file replace (git's lockfile idea, for a set of files).

    ``path``: where the journal goes (beside the files); ``root``: every path it names must be
    inside this folder; ``operation``: what the edit is, for the recovery message;
    ``backups``: per item, the verified backup of the file's old version (None: the file did
    not exist); ``undo_remove``: folders the edit created that a rollback removes;
    ``backup_sums``: their SHA-256 when the caller knows them (else they are read), or the
    :class:`FileSnapshot` whose bytes the backup holds (its digest is then taken when the
    journal is written, after the temp files were started);
    ``new_sums``: the SHA-256 of each item's new bytes when the caller knows them (see
    :func:`sha256_of_edit`), else they are computed; ``edits``: per item, the byte edits that
    turn its expected version into its new bytes (``(start, end, data)`` ranges of the old
    bytes, sorted, not overlapping), when the caller knows them. A small edit of a big file
    is recorded as these edits instead of a digest of the new bytes (see
    :func:`edit_record`): the new version is then recognised by its edits and the old
    version's digest, so the new bytes are never hashed."""

    path: Path
    root: Path
    operation: str
    backups: list[Path | None]
    undo_remove: list[Path] = field(default_factory=list)
    # SHA-256 of each backup (or the snapshot it holds), when known
    backup_sums: Sequence[str | FileSnapshot | None] | None = None
    new_sums: list[str | None] | None = None  # SHA-256 of each item's new bytes, when known
    edits: list[EditList | None] | None = None  # each item's byte edits, when known


# Edits whose bytes (old and new) add up to more than this are journaled as a digest instead.
MAX_JOURNAL_EDIT_BYTES = 64 * 1024


def edit_record(old: bytes, new_size: int, edits: EditList) -> dict[str, object] | None:
    """The journal's description of the new version as edits of ``old``: each edit's offset in
    the old bytes, the old bytes it replaces and its new bytes (base64), and the new size --
    or None when the edits are too big to journal or do not give ``new_size`` bytes."""
    import base64

    out = []
    total = 0
    pos = 0
    size = len(old)
    for start, end, data in edits:
        if not pos <= start <= end <= len(old):
            return None  # not sorted, overlapping or out of range: use a digest
        total += (end - start) + len(data)
        if total > MAX_JOURNAL_EDIT_BYTES:
            return None
        out.append({"at": start, "old": base64.b64encode(old[start:end]).decode("ascii"),
                    "new": base64.b64encode(data).decode("ascii")})
        size += len(data) - (end - start)
        pos = end
    if size != new_size:
        return None
    return {"new_size": new_size, "edits": out}


def _is_edited_version(data: bytes, old_sha256: str | None, record: dict[str, object]) -> bool:
    """Does ``data`` hold exactly the old version (digest ``old_sha256``) with the journaled
    edits applied? Its size, each edit's new bytes in place, and the old version put back
    together from the bytes between them with each edit's old bytes must give that digest."""
    import base64

    if old_sha256 is None or len(data) != record["new_size"]:
        return False
    view = memoryview(data)
    h = hashlib.sha256()
    pos_old = pos_new = 0
    for e in record["edits"]:  # type: ignore[attr-defined]
        at = int(e["at"])
        old_part = base64.b64decode(e["old"], validate=True)
        new_part = base64.b64decode(e["new"], validate=True)
        same = at - pos_old
        if same < 0:
            return False
        h.update(view[pos_new:pos_new + same])
        pos_new += same
        if view[pos_new:pos_new + len(new_part)] != new_part:
            return False
        h.update(old_part)
        pos_new += len(new_part)
        pos_old = at + len(old_part)
    h.update(view[pos_new:])
    return h.hexdigest() == old_sha256


# The last bytes of every journal this version writes: a journal without them was cut short
# while being written, before its fsync -- so before any file it names was renamed.
JOURNAL_TAIL = b'"end": "toolkit_journal"\n}\n'


def _sha256_of(path: Path) -> str | None:
    try:  # (opened without waiting: a FIFO or folder put at the name is no file's version)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with open(fd, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _version_of(path: Path, old: str | None, old2: str | None, new: str | None,
                record: dict[str, object] | None) -> str | None:
    """Which version of a journaled file ``path`` holds: "new", "old", or None (neither,
    or missing). The new version is known by its digest or by its edits (``record``). A
    file the edit creates (``old`` None: there was none) is at its old version while it is
    still missing."""
    if record is None:
        cur = _sha256_of(path)
        if cur is None:  # missing (or no regular file: something else was put there)
            return "old" if old is None and not os.path.lexists(path) else None
        if cur == new:
            return "new"
        return "old" if cur in (old, old2) else None
    try:  # (a file journaled as edits had an old version: missing is neither)
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    cur = hashlib.sha256(data).hexdigest()
    if cur in (old, old2):
        return "old"
    return "new" if _is_edited_version(data, old, record) else None


def _check_record(record: object) -> None:
    """A journal's ``new_edits`` must have the shape :func:`edit_record` writes (else the
    journal is unreadable: ValueError, KeyError or TypeError)."""
    import base64

    if not isinstance(record, dict) or not isinstance(record["new_size"], int):
        raise TypeError("new_edits")
    for e in record["edits"]:
        if not isinstance(e["at"], int) or e["at"] < 0:
            raise TypeError("new_edits")
        base64.b64decode(e["old"], validate=True)
        base64.b64decode(e["new"], validate=True)


def _journal_bytes(journal: Journal, prepared: list[PreparedReplace],
                   items: list[tuple[FileSnapshot | str | Path, bytes, FileSnapshot | None]],
                   first: tuple[FileSnapshot, bytes] | None = None) -> bytes:
    """The journal's content: every target, its temp file, its backup, the SHA-256 of each
    (an item expected at ``first``'s snapshot is at the version ``first`` writes)."""
    import json
    import socket

    files = []
    sums = journal.backup_sums or [None] * len(items)
    new_sums = journal.new_sums or [None] * len(items)
    edit_lists = journal.edits or [None] * len(items)
    for p, (_, data, expected), backup, bsum, nsum, edits in zip(
            prepared, items, journal.backups, sums, new_sums, edit_lists, strict=True):
        also_old: str | None = None
        if first is not None and expected is first[0]:
            old: str | None = hashlib.sha256(first[1]).hexdigest()
            also_old = first[0].sha256  # its rename may not be durable yet at a power loss
        else:
            old = expected.sha256 if expected is not None else _sha256_of(p.path)
        if isinstance(bsum, FileSnapshot):
            bsum = bsum.sha256
        elif backup is not None and bsum is None:
            bsum = _sha256_of(backup)
        record = None
        if edits is not None and nsum is None and expected is not None and also_old is None:
            record = edit_record(expected.data, len(data), edits)
        files.append({"target": str(p.path), "temp": str(p.tmp),
                      "backup": None if backup is None else str(backup),
                      "backup_sha256": bsum if backup is not None else None,
                      "old_sha256": old})
        if record is not None:
            files[-1]["new_edits"] = record  # the new bytes as edits of the old ones
        else:
            files[-1]["new_sha256"] = nsum or hashlib.sha256(data).hexdigest()
        if also_old is not None:
            files[-1]["also_old_sha256"] = also_old
    body = {"toolkit_journal": 1, "operation": journal.operation,
            "writer": f"{socket.gethostname()}:{os.getpid()}",
            "undo_remove": [str(d) for d in journal.undo_remove], "files": files,
            "end": "toolkit_journal"}
    data = (json.dumps(body, indent=2) + "\n").encode()
    assert data.endswith(JOURNAL_TAIL)
    return data


def replace_all(items: list[tuple[FileSnapshot | str | Path, bytes, FileSnapshot | None]], *,
                during_fsync: Callable[[], None] | None = None,
                also_fsync: list[Path] | None = None,
                journal: Journal | None = None,
                first: tuple[FileSnapshot, bytes] | None = None) -> list[Path]:
    """Atomically replace several files: all temp files written, fsynced together (with the
    folders in ``also_fsync``, while ``during_fsync`` runs), then each checked against its
    expected version and renamed, in order, then each folder fsynced once.

    When a check or rename fails, the files not yet renamed keep their old content, their temp
    files are removed, and the error says which files were already replaced (``written``
    attribute: their paths).

    With a ``journal``, the set is all-or-nothing, also across a crash: the journal (every
    target, its temp file, its backup, old and new SHA-256) is made durable before the first
    rename and removed after the last; a failure after some renames puts those files back
    from their backups (``written`` is then empty, ``rolled_back`` names them); a killed run
    is finished or undone by :func:`recover_journal` in the next run.

    ``first`` (a snapshot and its new bytes, e.g. the seed's lock field in ``.meta.json``): a
    file replaced (checked against its snapshot, renamed) before the journal and the items,
    its temp file flushed in the same round as theirs. An item whose expected version is that
    snapshot is checked against the version ``first`` wrote instead. If anything fails after
    ``first`` was renamed, the error's ``first_written`` attribute is the snapshot of that
    version (for the caller to undo); otherwise None."""
    if journal is not None and len(journal.backups) != len(items):
        raise ValueError("a journal needs one backup entry per item")
    prepared: list[PreparedReplace] = []
    journal_file: PreparedReplace | None = None
    first_file: PreparedReplace | None = None
    first_written: FileSnapshot | None = None
    # Each temp file is flushed as soon as it is written, while the next ones, the journal
    # (which may hash the old versions) and ``during_fsync`` are done here. The items come
    # before ``first`` (a small file): a big item's write, the longest job, is queued first.
    flushes = _Flushes()
    try:
        try:
            for target, data, expected in items:
                prepared.append(PreparedReplace(target, data, expected=expected,
                                                deferred=len(data) >= DEFERRED_WRITE_BYTES))
                flushes.start(prepared[-1].fsync)
            if first is not None:
                first_file = PreparedReplace(first[0], first[1])
                flushes.start(first_file.fsync)
            for d in also_fsync or []:
                flushes.start(functools.partial(_fsync_dir, d))
            if journal is not None:  # written at its name, flushed together with the others
                journal_file = PreparedReplace(
                    journal.path, _journal_bytes(journal, prepared, items, first), mode=0o600,
                    in_place=True)
                flushes.start(journal_file.fsync)
                # its name, and the temp files' names
                flushes.start(functools.partial(_fsync_dir, journal_file.path.parent))
            if during_fsync is not None:
                during_fsync()
        except BaseException:
            flushes.join(Path("."), quiet=True)
            raise
        flushes.join(prepared[0].path if prepared else Path("."))
        if journal_file is not None and journal_file.fd is not None:
            os.close(journal_file.fd)  # durable before the first rename
            journal_file.fd = None
        if first_file is not None and first is not None:
            first_written = _replace_first(first_file, first, prepared)
            if journal_file is None:
                _fsync_dir(first_file.path.parent)
    except BaseException as exc:
        for p in prepared:
            p.abort()
        if journal_file is not None:
            journal_file.abort()
        if first_file is not None:
            first_file.abort()
        exc.first_written = first_written  # type: ignore[attr-defined]
        raise
    if journal is not None:
        pause("after_journal")
    done: list[Path] = []
    for i, p in enumerate(prepared):
        try:
            done.append(p.finish())
            if journal is not None:
                pause("after_rename", str(i + 1))
        except BaseException as exc:
            for rest in prepared[i + 1:]:
                rest.abort()
            if journal is not None and done:
                try:
                    for j, path in enumerate(done):
                        backup = journal.backups[j]
                        if backup is None:
                            os.unlink(path)  # this edit created it
                        else:
                            atomic_replace(path, backup.read_bytes(), fsync_dir=False,
                                           mode=os.stat(backup).st_mode & 0o7777)
                except OSError:
                    pass  # the journal stays: the next run finishes the undo
                else:
                    exc.rolled_back = [d.name for d in done]  # type: ignore[attr-defined]
                    done = []
            if journal is not None and not done:
                for folder in sorted({p.path.parent for p in prepared}):
                    _fsync_dir(folder)
                _remove_journal(journal.path)
            exc.written = list(done)  # type: ignore[attr-defined]
            exc.first_written = first_written  # type: ignore[attr-defined]
            raise
    for folder in sorted({p.path.parent for p in prepared}):
        _fsync_dir(folder)
    if journal is not None:
        _remove_journal(journal.path)
    return done


def _replace_first(prep: PreparedReplace, first: tuple[FileSnapshot, bytes],
                   prepared: list[PreparedReplace]) -> FileSnapshot:
    """Rename ``first``'s flushed temp file over its target (after its check); the items
    expected at its old snapshot are then expected at the version it wrote."""
    prep.finish()
    written = FileSnapshot.read(first[0].given)
    if written.data != first[1]:
        raise ConflictError("changed on disk while it was being written; nothing else "
                            "written", path=first[0].given,
                            hint="Run the command again to work on the current version")
    for p in prepared:
        if p.expected is first[0]:
            p.expected = written
    return written


def _remove_journal(path: Path) -> None:
    """Remove a finished journal. Not fsynced: a journal that comes back after a power loss
    finds every file at its new version and is only removed again."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@dataclass
class Recovery:
    """What :func:`recover_journal` did: ``action`` is "completed" or "rolled back";
    ``replaced``: the targets that had been renamed when the run stopped."""

    action: str
    operation: str
    replaced: list[str]
    total: int

    def message(self) -> str:
        n, m = len(self.replaced), self.total
        if self.action == "discarded":
            return ("an interrupted edit was stopped while writing its journal, before it "
                    "replaced any file; its journal was removed and the files are as before it")
        if self.action == "completed":
            return (f"an interrupted {self.operation} ({n} of {m} files replaced when it "
                    "stopped) was completed from its journal")
        return (f"an interrupted {self.operation} ({n} of {m} files replaced when it "
                "stopped) was rolled back from its journal; the files are as before it")


def recover_journal(path: Path, root: Path, *, rollback: bool = False) -> Recovery:
    """Finish or undo the multi-file replace that ``path`` (a journal) describes; the caller
    holds the lock every writer of these files takes. Then the journal is removed.

    Each target is either at its new version (renamed), at its old one, or something else.
    Nothing renamed yet: undone (the temp files removed). Some renamed and every other temp
    file whole: completed (the rest renamed, in order). Otherwise (or ``rollback``): undone,
    each renamed file put back from its verified backup. A file at neither version (edited
    since), a path outside ``root`` or an unreadable journal is a :class:`ConflictError` /
    :class:`toolkit.errors.DataError` that leaves everything, the journal included, as found.
    A journal cut short while being written (it lacks :data:`JOURNAL_TAIL`: its run was
    killed before renaming anything) is only removed ("discarded").
    """
    import json

    from toolkit.errors import DataError

    root_real = Path(os.path.realpath(root))
    hint = (f"Compare the files with the backups it names, then delete {path.name}; nothing "
            "was changed")
    try:
        raw = path.read_bytes()
        try:
            body = json.loads(raw.decode("utf-8"))
        except ValueError:
            if raw.endswith(JOURNAL_TAIL):
                raise
            # cut short while being written: nothing was renamed yet (replace_all renames
            # only after the whole journal is durable); its temp files are orphans
            _remove_journal(path)
            return Recovery("discarded", "edit", [], 0)
        op = str(body.get("operation") or "edit")
        files = [(Path(f["target"]), Path(f["temp"]),
                  Path(f["backup"]) if f.get("backup") else None,
                  f.get("old_sha256"), f.get("new_sha256")) for f in body["files"]]
        records = [f.get("new_edits") for f in body["files"]]
        for (_, _, _, _, new_sum), record in zip(files, records, strict=True):
            if record is None and not isinstance(new_sum, str):
                raise KeyError("new_sha256")
            if record is not None:
                _check_record(record)
        also_old = [f.get("also_old_sha256") for f in body["files"]]
        backup_sums = [f.get("backup_sha256") for f in body["files"]]
        undo_remove = [Path(d) for d in body.get("undo_remove") or []]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"the journal of an interrupted edit is unreadable ({exc})", path=path,
                        hint=hint) from None

    for target, temp, backup, _, _ in files:
        if not (within(target, root_real) and within(temp, root_real)
                and (backup is None or within(backup, root_real))
                and temp.parent == target.parent and TEMP_MARK in temp.name):
            raise DataError(f"the journal names a path outside {root_real}", path=path,
                            hint=hint)
    undo_remove = [d for d in undo_remove if within(d, root_real) and d != root_real]
    states = []
    for (target, _, _, old, new), old2, record in zip(files, also_old, records, strict=True):
        state = _version_of(target, old, old2, new, record)
        if state is None:
            raise ConflictError("an interrupted edit cannot be finished or undone: this file "
                                "changed since", path=target, hint=hint)
        states.append(state)
    replaced = [str(f[0]) for f, st in zip(files, states, strict=True) if st == "new"]
    temps_whole = all(_version_of(temp, old, None, new, record) == "new"
                      for (_, temp, _, old, new), st, record
                      in zip(files, states, records, strict=True) if st == "old")
    complete = not rollback and bool(replaced) and temps_whole
    if complete:
        for (target, temp, _, _, _), st in zip(files, states, strict=True):
            if st == "old":
                os.replace(temp, target)
    else:
        undo = [(target, backup, old) for (target, _, backup, old, _), st, bsum
                in zip(files, states, backup_sums, strict=True) if st == "new"]
        for (target, _, backup, old, _), st, bsum in zip(files, states, backup_sums, strict=True):
            if st == "new" and old is not None and (
                    backup is None or bsum is None or _sha256_of(backup) != bsum):
                raise ConflictError("an interrupted edit cannot be undone: the backup of this "
                                    "file is missing or differs", path=target, hint=hint)
        for target, backup, old in undo:
            if old is None or backup is None:
                os.unlink(target)  # the edit created it
            else:
                atomic_replace(target, backup.read_bytes(),
                               mode=os.stat(backup).st_mode & 0o7777, fsync_dir=False)
        for _, temp, _, _, _ in files:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        for folder in undo_remove:
            shutil.rmtree(folder, ignore_errors=True)
    for folder in sorted({f[0].parent for f in files}):
        _fsync_dir(folder)
    _remove_journal(path)
    return Recovery("completed" if complete else "rolled back", op, replaced, len(files))


# --------------------------------------------------------------------------- locks


DEFAULT_LOCK_TIMEOUT = 10.0
LOCK_TIMEOUT_ENV = "TOOLKIT_LOCK_TIMEOUT"


def lock_timeout() -> float:
    """Seconds a run waits for another run's lock (``$TOOLKIT_LOCK_TIMEOUT``, else 10; below
    0 is 0, ``inf`` waits as long as it takes). A value that is no number of seconds (``abc``,
    ``nan``, which no deadline ever reaches) is a usage error, not the default taken
    silently."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if not raw:
        return DEFAULT_LOCK_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if math.isnan(seconds):
        raise UsageError(f"${LOCK_TIMEOUT_ENV}={raw!r} is not a number of seconds",
                         hint=f"Set it to the seconds to wait for another run's lock (default "
                              f"{DEFAULT_LOCK_TIMEOUT:g}), or unset it")
    return max(seconds, 0.0)


def keep_trying(attempt: Callable[[], T], busy: type[BaseException], timeout: float, *,
                longest: float = 0.2) -> T:
    """``attempt()`` again while it raises ``busy`` (another run holds what it needs), for
    up to ``timeout`` seconds; then that last ``busy`` error, for the caller to say whose.
    The pauses between tries double from 10 ms up to ``longest`` seconds (a try may cost
    milliseconds of CPU: opening a DuckDB store does)."""
    deadline = time.monotonic() + max(timeout, 0.0)
    pause = 0.01
    while True:
        try:
            return attempt()
        except busy:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, longest)


class FileLock:
    """An exclusive ``flock`` on ``lock_path`` (a file, created if needed, or a directory).

    Waits up to ``timeout`` seconds, then raises :class:`BusyError` (exit 75). The lock is
    released when the process ends, however it ends, so a killed run never leaves it held.
    """

    def __init__(self, lock_path: str | Path, timeout: float = 10.0, *,
                 what: str = "this ledger") -> None:
        self.path = Path(lock_path)
        self.timeout = timeout
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        if self.path.is_dir():
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        else:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            keep_trying(lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
                        BlockingIOError, self.timeout, longest=0.02)
        except BlockingIOError:
            os.close(fd)
            raise BusyError(f"{self.what} is locked by another run (waited {self.timeout:g} s)",
                            path=self.path, hint="Wait for it to finish and try again") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# --------------------------------------------------------------------------- backups


def backup_files(sources: Sequence[FileSnapshot | Path], dest_dir: Path, *,
                 link: bool = False, fsync_folder: bool = True) -> list[Path]:
    """Copy each source into ``dest_dir`` (created; must not exist yet) and verify the copies.

    A :class:`FileSnapshot` is backed up from the bytes that were read (the version the edit is
    based on) with its mode and mtime; a path is copied with ``shutil.copy2``. The copies are
    fsynced, then counted and compared by SHA-256 with their sources. On any failure the
    partial backup folder is removed and a :class:`ToolkitError` says why; nothing else was
    touched.

    ``link=True`` (for a writer that only ever *replaces* the files, never writes them in
    place, as :func:`atomic_replace` does): a snapshot whose file is still that very inode is
    backed up as a hard link to it. The replace gives the live name a new inode, so the link
    keeps the old bytes -- a complete backup that costs no copy and no data fsync. Verified by
    inode; falls back to a copy when linking is not possible (another filesystem, no hard
    links). After a crash between the link and the replace, :func:`break_backup_links` turns
    the link back into a copy. ``fsync_folder=False`` leaves the folder's fsync to the
    caller (who must do it before the first replace can become durable).
    """
    names = [(s.given.name if isinstance(s, FileSnapshot) else Path(s).name) for s in sources]
    if len(set(names)) != len(names):
        raise ValueError("backup sources must have distinct file names")
    try:
        dest_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _space_error(dest_dir) from None
        if exc.errno == errno.EACCES:  # the folder to make writable, which exists
            denied = permission_denied(dest_dir)
            raise ToolkitError(f"cannot create the backup folder: {denied.message}; nothing "
                               "written", path=denied.path, hint=denied.hint) from None
        raise ToolkitError(f"cannot create the backup folder: {exc.strerror}; nothing written",
                           path=dest_dir,
                           hint="Make the ledger's .backups folder writable") from None
    out: list[Path] = []
    try:
        expected: dict[Path, str] = {}
        for src, name in zip(sources, names, strict=True):
            dst = dest_dir / name
            if isinstance(src, FileSnapshot) and link and _link_backup(src, dst):
                expected[dst] = ""  # verified by inode
            elif isinstance(src, FileSnapshot):
                fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    view = memoryview(src.data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                    os.fchmod(fd, src.mode)
                finally:
                    os.close(fd)
                os.utime(dst, ns=(src.st_mtime_ns, src.st_mtime_ns))
                expected[dst] = src.sha256
            else:
                shutil.copy2(src, dst)
                with open(dst, "rb") as fh:
                    os.fsync(fh.fileno())
                expected[dst] = hashlib.sha256(Path(src).read_bytes()).hexdigest()
            out.append(dst)
        if fsync_folder:
            _fsync_dir(dest_dir)
        found = sorted(p for p in dest_dir.iterdir())
        if len(found) != len(sources):
            raise ToolkitError(f"backup verification failed: {len(found)} files for "
                               f"{len(sources)} sources; nothing written", path=dest_dir)
        for dst, digest in expected.items():
            if not digest:
                continue
            if hashlib.sha256(dst.read_bytes()).hexdigest() != digest:
                raise ToolkitError("backup verification failed: copy differs from the "
                                   "original; nothing written", path=dst)
    except BaseException as exc:
        shutil.rmtree(dest_dir, ignore_errors=True)
        if isinstance(exc, OSError):
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _space_error(dest_dir) from None
            raise ToolkitError(f"cannot write the backup: {exc.strerror}; nothing written",
                               path=dest_dir) from None
        raise
    return out


def _link_backup(src: FileSnapshot, dst: Path) -> bool:
    """Hard-link ``dst`` to the snapshot's inode if the file is still that version: same
    inode, size, mtime and mode, and exactly one more link than when it was read (another
    name made meanwhile could write the backup's bytes in place). Otherwise, or when linking
    fails (another filesystem, no hard links), False: the caller copies the bytes read."""
    try:
        os.link(src.path, dst, follow_symlinks=False)
    except OSError:
        return False
    st = os.stat(dst)
    if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode),
            st.st_nlink) != (src.st_ino, src.st_dev, src.st_size, src.st_mtime_ns, src.mode,
                             src.st_nlink + 1):
        os.unlink(dst)  # not the version read, or not ours alone: back up the bytes read
        return False
    return True


def break_backup_links(path: str | Path, backups_root: str | Path) -> list[Path]:
    """Turn backup hard links that share ``path``'s inode into independent copies.

    A writer killed between backing up by hard link and replacing the file leaves the live
    file linked to its backup; copying the backup restores a file with one link (and a backup
    that later in-place edits of the live file cannot change)."""
    healed: list[Path] = []
    try:
        st = os.stat(path)
    except OSError:
        return healed
    if st.st_nlink < 2:
        return healed
    root = Path(backups_root)
    name = Path(path).name
    try:
        candidates = list(root.glob(f"*/{name}"))
    except OSError:
        return healed
    for c in candidates:
        try:
            cst = os.lstat(c)
        except OSError:
            continue
        if (cst.st_ino, cst.st_dev) != (st.st_ino, st.st_dev):
            continue
        tmp = temp_path_for(c)
        shutil.copy2(c, tmp)
        os.replace(tmp, c)
        healed.append(c)
    return healed


def unique_dir(parent: Path, name: str) -> Path:
    """``parent/name``, or ``name-2``, ``name-3``... when it exists already."""
    candidate = parent / name
    n = 2
    while candidate.exists():
        candidate = parent / f"{name}-{n}"
        n += 1
    return candidate


# --------------------------------------------------------------------------- orphans


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs. A zombie does not: it has ended, and only its exit
    status waits for its parent to collect it (a writer killed by `timeout -s KILL`, which
    dies with it and leaves its child to init, stays one a while), yet ``kill(pid, 0)``
    finds it: its temp files, staging folders and locks are a dead writer's (Linux's
    ``/proc`` tells; elsewhere, as before, it counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # past what a pid can be: no process has it
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat_line = fh.read()
    except OSError:  # no /proc (not Linux), or it ended meanwhile
        return True
    return stat_line.rpartition(b")")[2].split()[:1] != [b"Z"]


def cleanup_orphan_temps(directory: str | Path) -> list[Path]:
    """Remove ``.*.toolkit-tmp-<pid>-*`` files in ``directory`` whose writer is dead (B3)."""
    removed: list[Path] = []
    directory = Path(directory)
    try:
        candidates = list(directory.glob(f".*{TEMP_MARK}*"))
    except OSError:
        return removed
    for p in candidates:
        tail = p.name.rsplit(TEMP_MARK, 1)[-1]
        pid_text = tail.split("-", 1)[0]
        if not pid_text.isdecimal() or pid_alive(int(pid_text)):
            continue
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed


# --------------------------------------------------------------------------- link rules


def check_editable(path: str | Path, root: str | Path | None = None, *,
                   force: bool = False) -> tuple[Path, list[str]]:
    """Apply the link rules (FAULTS A14) before editing ``path``; return (real path, notes).

    * a symlink whose target is inside ``root``: the target is edited, the link is kept;
    * a symlink pointing outside ``root``: refused;
    * a file with more than one hard link: refused unless ``force`` (an atomic replace gives
      this name a new file, so the other names would keep the old content).
    """
    p = Path(path)
    notes: list[str] = []
    real = Path(os.path.realpath(p))
    if p.is_symlink() and root is not None:
        root_real = Path(os.path.realpath(root))
        if not within(real, root_real):
            raise RefusedError(
                f"is a symlink to {real}, outside {root_real}; refusing to edit it",
                path=p, hint="Replace the link with a copy of the file to edit it here")
        notes.append(f"{p}: symlink; editing its target {real}")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real, notes
    if stat.S_ISDIR(st.st_mode):  # (a folder's link count is its subfolders', not names)
        raise DataError("is a folder, not a file", path=p,
                        hint="Move it away, then run the command again")
    if st.st_nlink > 1:
        if not force:
            raise RefusedError(
                f"has {st.st_nlink} hard links; editing would separate this name from the "
                "others", path=p,
                hint="Use --force to edit it anyway (the other names keep the old content)")
        notes.append(f"{p}: has {st.st_nlink} hard links; the other names keep the old content")
    return real, notes


# --------------------------------------------------------------------------- folder rights


def check_changeable(folder: str | Path, done: str) -> None:
    """Refuse (:class:`RefusedError`, exit 1) unless this process can list ``folder`` and
    create, replace and remove entries in it. A command that deletes or replaces part of a
    user's tree checks every folder it will change this way before its first change, so a
    read-only (or unreadable) folder met part-way never leaves the tree half-changed (the
    editor's check, FAULTS B1, made for the site build, the export and a restore).
    ``done``: what the refusal says of the tree ("nothing deleted"). ``os.access`` asks the
    kernel, so an ACL, a read-only mount and ``chattr +i`` count as the mode bits do."""

    if os.access(folder, os.R_OK | os.W_OK | os.X_OK) or not os.path.isdir(folder):
        return  # (a folder that is not there has nothing in it to change)
    if os.access(folder, os.R_OK | os.X_OK):
        raise RefusedError(f"folder is not writable; {done}", path=folder,
                           hint=chmod_hint(folder, "writable", "u+w"))
    raise RefusedError(f"folder is not readable; {done}", path=folder,
                       hint=chmod_hint(folder, "readable and writable", "u+rwx"))
