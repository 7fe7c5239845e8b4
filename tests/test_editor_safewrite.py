"""toolkit.safewrite: the primitives every writer of a user's file relies on."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import reap
from toolkit.errors import EXIT_BUSY, BusyError, ConflictError, DataError, RefusedError
from toolkit.safewrite import (
    FileLock,
    FileSnapshot,
    NoSpaceError,
    atomic_replace,
    backup_files,
    changed_since,
    check_editable,
    cleanup_orphan_temps,
    sha256_of_edit,
)
from toolkit.textio import read_bytes


def _temps(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*toolkit-tmp-*"))


def test_snapshot_records_bytes_and_identity(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"hello\r\n")
    f.chmod(0o640)
    snap = FileSnapshot.read(f)
    st = f.stat()
    assert snap.data == snap.bytes == b"hello\r\n"
    assert (snap.st_size, snap.st_ino, snap.st_mtime_ns, snap.mode) == (
        7, st.st_ino, st.st_mtime_ns, 0o640)
    assert snap.sha256 == hashlib.sha256(b"hello\r\n").hexdigest()


def test_snapshot_refuses_oversized_file_before_reading_it(tmp_path: Path) -> None:
    f = tmp_path / "big.md"
    f.write_bytes(b"x" * 2048)
    with pytest.raises(DataError, match="file is 2 KB, over the 1 KB limit") as err:
        FileSnapshot.read(f, max_bytes=1024)
    assert "TOOLKIT_MAX_FILE_MB" in str(err.value)


@pytest.mark.parametrize(("size", "limit", "shown"), [
    (6000, int(0.005 * 1024 * 1024), "file is 5.9 KB, over the 5.1 KB limit"),  # max_file_mb: 0.005
    (300, 200, "file is 300 bytes, over the 200 bytes limit"),
    (1_200_000, 1024 * 1024, "file is 1.1 MB, over the 1 MB limit"),
    (3 * 1024 * 1024, int(2.5 * 1024 * 1024), "file is 3 MB, over the 2.5 MB limit"),
])
def test_a_file_over_the_limit_is_named_with_both_sizes_in_a_unit_that_shows_them(
        tmp_path: Path, size: int, limit: int, shown: str) -> None:
    """Both readers word it the same; a fractional `max_file_mb` is not shown as "0 MB"."""
    f = tmp_path / "big.md"
    f.write_bytes(b"x" * size)
    for read in (lambda: FileSnapshot.read(f, max_bytes=limit), lambda: read_bytes(f, limit)):
        with pytest.raises(DataError) as err:
            read()
        assert err.value.message == shown


def test_changed_since_sees_same_size_edit_in_same_mtime_tick(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"confidence: low\n")
    snap = FileSnapshot.read(f)
    assert not changed_since(snap)
    f.write_bytes(b"confidence: lOw\n")  # same size, in place (same inode)
    os.utime(f, ns=(snap.st_mtime_ns, snap.st_mtime_ns))  # and the same mtime
    assert f.stat().st_size == snap.st_size
    assert changed_since(snap)


@pytest.mark.parametrize("same_prefix", [0, 6, 7, 10**6, -3])
def test_sha256_of_edit_gives_both_digests_even_with_a_wrong_prefix(tmp_path: Path,
                                                                     same_prefix: int) -> None:
    """The journal's old and new digests of a one-line edit (the prefix before the edit is
    hashed once); a prefix longer than what the versions share still gives the true digests."""
    f = tmp_path / "a.md"
    old = b"title\nconfidence: low\nrest\n" * 3
    f.write_bytes(old)
    snap = FileSnapshot.read(f)
    new = old.replace(b"low", b"medium", 1)  # differs from byte 19 on
    assert sha256_of_edit(snap, new, same_prefix) == hashlib.sha256(new).hexdigest()
    assert snap.sha256 == hashlib.sha256(old).hexdigest()
    assert sha256_of_edit(snap, old, 5) == snap.sha256  # digest already known: still right


def test_changed_since_sees_save_via_rename_and_deletion(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"same\n")
    snap = FileSnapshot.read(f)
    other = tmp_path / "a.md.new"
    other.write_bytes(b"same\n")
    os.replace(other, f)  # an editor that saves by rename: same bytes, new inode
    assert changed_since(snap)
    f.unlink()
    assert changed_since(snap)


def test_atomic_replace_keeps_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"old\n")
    f.chmod(0o640)
    snap = FileSnapshot.read(f)
    atomic_replace(snap, b"new\n")
    assert f.read_bytes() == b"new\n"
    assert f.stat().st_mode & 0o7777 == 0o640
    assert _temps(tmp_path) == []


def test_temp_file_starts_private_then_takes_the_files_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"old\n")
    f.chmod(0o640)
    snap = FileSnapshot.read(f)
    real_write = os.write
    modes: list[int] = []

    def watching_write(fd: int, data: bytes) -> int:
        modes.append(os.fstat(fd).st_mode & 0o7777)  # the temp file's mode while it fills
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", watching_write)
    old_umask = os.umask(0)  # a permissive umask must not widen the temp file
    try:
        atomic_replace(snap, b"new content\n")
    finally:
        os.umask(old_umask)
    monkeypatch.undo()
    assert modes and set(modes) == {0o600}
    assert f.read_bytes() == b"new content\n" and f.stat().st_mode & 0o7777 == 0o640


def test_atomic_replace_refuses_when_file_changed_and_keeps_users_edit(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"old\n")
    snap = FileSnapshot.read(f)
    f.write_bytes(b"user\n")
    with pytest.raises(ConflictError, match="changed on disk since it was read; nothing written"):
        atomic_replace(snap, b"ours\n")
    assert f.read_bytes() == b"user\n"
    assert _temps(tmp_path) == []


def test_atomic_replace_through_symlink_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.md"
    real.write_bytes(b"old\n")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    snap = FileSnapshot.read(link)
    atomic_replace(snap, b"new\n")
    assert link.is_symlink() and real.read_bytes() == b"new\n"


def test_disk_full_during_temp_write_keeps_original(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"original\n")
    snap = FileSnapshot.read(f)
    real_write = os.write
    calls = {"n": 0}

    def short_then_full(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 1:  # a short write first, as a filling disk does
            return real_write(fd, bytes(data[:3]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(NoSpaceError) as err:
        atomic_replace(snap, b"a much longer new content\n")
    monkeypatch.undo()
    assert "no space left on device; nothing written" in str(err.value)
    assert f.read_bytes() == b"original\n"
    assert _temps(tmp_path) == []


_HOLDER = textwrap.dedent("""
    import sys, time
    from toolkit.safewrite import FileLock
    with FileLock(sys.argv[1], timeout=5):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def test_file_lock_times_out_with_busy_error_while_another_process_holds_it(
        tmp_path: Path) -> None:
    lock = tmp_path / "ledger"
    lock.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock), "30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with (pytest.raises(BusyError, match="locked by another run") as err,
              FileLock(lock, timeout=0.2)):
            pass
        assert err.value.exit_code == EXIT_BUSY == 75
    finally:
        reap(holder)
    with FileLock(lock, timeout=2):  # a killed holder never leaves it held
        pass


def test_backup_files_copies_and_verifies(tmp_path: Path) -> None:
    a = tmp_path / "a.md"
    a.write_bytes(b"A\r\n")
    a.chmod(0o640)
    b = tmp_path / "meta.yaml"
    b.write_bytes(b"x: 1\n")
    dest = tmp_path / ".backups" / "edit-1"
    out = backup_files([FileSnapshot.read(a), b], dest)
    assert [p.name for p in out] == ["a.md", "meta.yaml"]
    assert (dest / "a.md").read_bytes() == b"A\r\n"
    assert (dest / "a.md").stat().st_mode & 0o777 == 0o640
    assert (dest / "meta.yaml").read_bytes() == b"x: 1\n"


def test_linked_backup_keeps_the_version_read_after_the_file_is_replaced(
        tmp_path: Path) -> None:
    live = tmp_path / "patterns.md"
    live.write_bytes(b"old\r\n")
    live.chmod(0o640)
    snap = FileSnapshot.read(live)
    [backup] = backup_files([snap], tmp_path / ".backups" / "edit-1", link=True)
    assert backup.stat().st_ino == live.stat().st_ino  # a link: no bytes copied
    atomic_replace(snap, b"new\r\n", expected=snap)
    # the replace gave the live name a new file; the backup alone keeps the old one
    assert live.read_bytes() == b"new\r\n" and backup.read_bytes() == b"old\r\n"
    assert live.stat().st_nlink == 1 and backup.stat().st_nlink == 1
    assert backup.stat().st_mode & 0o777 == 0o640
    with open(live, "r+b") as fh:  # even an in-place write of the live file now
        fh.write(b"NEW")
    assert backup.read_bytes() == b"old\r\n"


@pytest.mark.parametrize("why", ["another filesystem", "a name linked meanwhile"])
def test_backup_is_a_verified_copy_when_a_hard_link_cannot_be_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    live = tmp_path / "patterns.md"
    live.write_bytes(b"old\n")
    os.utime(live, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    snap = FileSnapshot.read(live)
    stranger = tmp_path / "stranger.md"
    real_link = os.link

    def link(src: object, dst: object, **kw: object) -> None:
        if why == "another filesystem":
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_link(src, stranger)  # someone else links the file at the same moment
        real_link(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", link)
    [backup] = backup_files([snap], tmp_path / ".backups" / "edit-1", link=True)
    monkeypatch.undo()
    assert backup.stat().st_ino != live.stat().st_ino  # its own file
    assert backup.read_bytes() == b"old\n"
    assert backup.stat().st_mtime_ns == snap.st_mtime_ns
    assert backup.stat().st_mode & 0o777 == snap.mode
    assert sorted(p.name for p in backup.parent.iterdir()) == ["patterns.md"]
    with open(live, "r+b") as fh:  # the stranger's in-place write cannot reach the backup
        fh.write(b"NEW")
    assert backup.read_bytes() == b"old\n"


def test_backup_folder_unusable_gives_error_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / ".backups").write_text("not a folder")
    a = tmp_path / "a.md"
    a.write_bytes(b"A\n")
    from toolkit.errors import ToolkitError
    with pytest.raises(ToolkitError, match="cannot create the backup folder"):
        backup_files([a], tmp_path / ".backups" / "edit-1")
    assert a.read_bytes() == b"A\n"


def test_cleanup_orphan_temps_removes_only_dead_writers(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f".patterns.md.toolkit-tmp-{dead.pid}-abcd1234"
    orphan.write_bytes(b"partial")
    live = tmp_path / f".patterns.md.toolkit-tmp-{os.getpid()}-abcd1234"
    live.write_bytes(b"in progress")
    assert cleanup_orphan_temps(tmp_path) == [orphan]
    assert not orphan.exists() and live.exists()


def test_link_rules(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    target = vault / "real.md"
    target.write_text("x")
    inside = vault / "inside.md"
    inside.symlink_to(target)
    real, notes = check_editable(inside, vault)
    assert real == target and notes and inside.is_symlink()

    outside_target = tmp_path / "elsewhere.md"
    outside_target.write_text("x")
    outside = vault / "outside.md"
    outside.symlink_to(outside_target)
    with pytest.raises(RefusedError, match="outside"):
        check_editable(outside, vault)

    hard = vault / "hard.md"
    os.link(target, hard)
    with pytest.raises(RefusedError, match="2 hard links"):
        check_editable(hard, vault)
    real, notes = check_editable(hard, vault, force=True)
    assert "other names keep the old content" in notes[0]


_KILLED = textwrap.dedent("""
    import sys
    from toolkit.safewrite import FileSnapshot, atomic_replace
    atomic_replace(FileSnapshot.read(sys.argv[1]), b"new content\\n")
""")


@pytest.mark.parametrize("point", ["after_temp_write", "after_replace"])
def test_sigkill_at_pause_points(tmp_path: Path, point: str) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"old content\n")
    env = dict(os.environ, TOOLKIT_EDITOR_PAUSE=point)
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(f)], env=env,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(f"TOOLKIT_EDITOR_PAUSE {point} pid=")
    proc.send_signal(signal.SIGKILL)
    reap(proc)
    if point == "after_temp_write":
        assert f.read_bytes() == b"old content\n"  # original intact
        assert len(_temps(tmp_path)) == 1  # the orphan...
        assert cleanup_orphan_temps(tmp_path)  # ...is cleaned by the next run
        assert _temps(tmp_path) == []
    else:
        assert f.read_bytes() == b"new content\n"  # complete, never partial
        assert _temps(tmp_path) == []


def test_check_during_fsync_that_fails_renames_nothing(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_bytes(b"old\n")

    def check() -> None:
        raise DataError("not what we expected")

    with pytest.raises(DataError, match="not what we expected"):
        atomic_replace(FileSnapshot.read(f), b"new\n", during_fsync=check)
    assert f.read_bytes() == b"old\n" and _temps(tmp_path) == []
    ran = []
    atomic_replace(FileSnapshot.read(f), b"new\n", during_fsync=lambda: ran.append(1))
    assert ran == [1] and f.read_bytes() == b"new\n"


def test_disk_full_while_a_big_temp_file_is_written_in_its_flush_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big file of a journaled set is written by the thread that flushes it: a full disk
    there still fails the whole set with the file's name, before any rename, and leaves no
    temp file and no journal."""
    from toolkit.safewrite import DEFERRED_WRITE_BYTES, Journal, replace_all

    big, small = tmp_path / "big.md", tmp_path / "small.md"
    big.write_bytes(b"b" * DEFERRED_WRITE_BYTES)
    small.write_bytes(b"small\n")
    snaps = [FileSnapshot.read(big), FileSnapshot.read(small)]
    real_write = os.write

    def full_for_big(fd: int, data: bytes) -> int:
        if len(data) >= DEFERRED_WRITE_BYTES:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_for_big)
    journal = Journal(tmp_path / ".journal.json", tmp_path, "edit", [None, None])
    with pytest.raises(NoSpaceError) as err:
        replace_all([(snaps[0], b"c" * (DEFERRED_WRITE_BYTES + 1), snaps[0]),
                     (snaps[1], b"new small\n", snaps[1])], journal=journal)
    monkeypatch.undo()
    assert str(err.value.path) == str(big) and "nothing written" in str(err.value)
    assert big.read_bytes() == b"b" * DEFERRED_WRITE_BYTES
    assert small.read_bytes() == b"small\n"
    assert _temps(tmp_path) == [] and not (tmp_path / ".journal.json").exists()


def test_an_edit_still_writes_when_no_helper_thread_can_be_started_ahead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The editor starts its fsync threads as it opens, as a head start only: when
    the system refuses new threads then, the session still opens and the commit starts them
    when it needs them (and a full disk of threads later still fails cleanly)."""
    import datetime as dt
    import threading

    from tests._editor_helpers import make_vault
    from toolkit import safewrite
    from toolkit.ledger.vault import EditorSession

    monkeypatch.setattr(safewrite, "_helpers", None)  # a new pool: no thread idle yet
    refused = []
    start = threading.Thread.start

    def refuse_three(thread: threading.Thread) -> None:  # the first three starts fail
        if len(refused) < 3:
            refused.append(thread.name)
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_three)
    body = (b"# Ledger: Patterns\n\n---\n\n**Title:** Alpha entry\n**Confidence:** low\n\n"
            + b"x" * (2 << 20) + b"\n")  # big enough to be written in a flush thread
    vault = make_vault(tmp_path, {"patterns": body})
    with EditorSession(vault, today=dt.date(2026, 6, 1), timeout=2.0) as s:
        s.set_confidence(s.find("alpha")[0], "medium")
        s.commit()
    assert len(refused) == 3
    assert (vault / "ledger" / "patterns.md").read_bytes() == body.replace(b"low", b"medium")
    assert _temps(vault / "ledger") == []


def test_a_forked_child_writes_with_threads_of_its_own(tmp_path: Path) -> None:
    """A process forked after the helper threads started has none of them: its writes start
    their own instead of waiting forever for threads that do not exist there."""
    from toolkit import safewrite

    safewrite.prestart_helpers()
    big, small = tmp_path / "big.md", tmp_path / "small.md"
    big.write_bytes(b"old\n")
    small.write_bytes(b"old\n")
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 once both files are written
        try:
            safewrite.replace_all([(big, b"b" * (2 << 20), None), (small, b"new\n", None)])
        finally:
            os._exit(0)
    for _ in range(600):  # a minute at most; a child that hangs is killed
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child never finished its write")
    assert big.read_bytes() == b"b" * (2 << 20) and small.read_bytes() == b"new\n"


class _NeverStarted:
    """Helper threads that never take a job: each job stays queued (a Future nobody runs)."""

    def __init__(self) -> None:
        self.queued = 0

    def __call__(self, job: object) -> object:
        from concurrent.futures import Future

        class Pending(Future):  # type: ignore[type-arg]
            def result(self, timeout: float | None = None) -> None:  # never finishes
                raise AssertionError("waited for a job that no helper thread took")

        self.queued += 1
        return Pending()


@pytest.mark.parametrize("helpers", ["threads", "never started"])
def test_every_temp_file_and_folder_is_flushed_before_the_first_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helpers: str) -> None:
    """replace_all flushes each temp file (big ones written in a helper thread), the journal,
    its folder and the ``also_fsync`` folders before it renames anything, then each target's
    folder after the renames -- also when no helper thread takes a job in time: the caller
    runs the jobs still queued when it comes to wait for them."""
    import stat as stat_mod

    from toolkit import safewrite
    from toolkit.safewrite import DEFERRED_WRITE_BYTES, Journal, replace_all

    big, small = tmp_path / "big.md", tmp_path / "small.md"
    big.write_bytes(b"b" * DEFERRED_WRITE_BYTES)
    small.write_bytes(b"small\n")
    backups = tmp_path / "backups"
    backups.mkdir()
    first_target = tmp_path / "lock.json"
    first_target.write_bytes(b"{}\n")
    snaps = [FileSnapshot.read(big), FileSnapshot.read(small)]
    first = FileSnapshot.read(first_target)
    flushed: list[tuple[int, int]] = []  # (inode, is a folder) of each fsync
    renames: list[tuple[Path, list[tuple[int, int]]]] = []  # target, fsyncs done before
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        st = os.fstat(fd)
        flushed.append((st.st_ino, int(stat_mod.S_ISDIR(st.st_mode))))

    def replace(src: object, dst: object) -> None:
        renames.append((Path(str(dst)), list(flushed)))
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    never = _NeverStarted()
    if helpers == "never started":
        monkeypatch.setattr(safewrite, "_in_helper", never)
    temps: dict[Path, int] = {}  # temp file -> its inode, as each is created
    real_init = safewrite.PreparedReplace.__init__

    def init(self: safewrite.PreparedReplace, *a: object, **k: object) -> None:
        real_init(self, *a, **k)  # type: ignore[arg-type]
        temps[self.tmp] = os.stat(self.tmp).st_ino

    monkeypatch.setattr(safewrite.PreparedReplace, "__init__", init)
    journal = Journal(tmp_path / ".journal.json", tmp_path, "edit", [None, None])
    replace_all([(snaps[0], b"c" * (DEFERRED_WRITE_BYTES + 1), snaps[0]),
                 (snaps[1], b"new small\n", snaps[1])], also_fsync=[backups],
                journal=journal, first=(first, b'{"lock": 1}\n'))
    monkeypatch.undo()
    assert big.read_bytes() == b"c" * (DEFERRED_WRITE_BYTES + 1)
    assert small.read_bytes() == b"new small\n" and first_target.read_bytes() == b'{"lock": 1}\n'
    assert len(temps) == 4  # the three temp files and the journal
    assert [t for t, _ in renames] == [first_target, big, small]
    before_first_rename = set(renames[0][1])
    for tmp, ino in temps.items():
        assert (ino, 0) in before_first_rename, f"{tmp.name} renamed before it was flushed"
    for folder in (backups, tmp_path):  # the backups; the journal's and temp files' names
        assert (folder.stat().st_ino, 1) in before_first_rename, f"{folder} not flushed"
    assert flushed[-1] == (tmp_path.stat().st_ino, 1)  # the renames made durable
    if helpers == "never started":
        assert never.queued >= 6  # every flush was queued for a helper, and run by the caller


def test_helper_threads_are_started_once_per_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """prestart_helpers starts the pool's threads once; the next edit in the same process
    finds them idle and does not wake each of them again (a new pool, as after a fork, is
    started again)."""
    from toolkit import safewrite

    monkeypatch.setattr(safewrite, "_helpers", None)
    monkeypatch.setattr(safewrite, "_prestarted", None)
    safewrite.prestart_helpers()
    pool = safewrite._helper_pool()
    submitted = []
    real_submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda *a, **k: submitted.append(a) or real_submit(*a, **k))
    safewrite.prestart_helpers()
    assert submitted == []
    monkeypatch.setattr(safewrite, "_helpers", None)  # a new pool
    safewrite.prestart_helpers()
    assert safewrite._prestarted is not None and safewrite._prestarted[0] is not pool
