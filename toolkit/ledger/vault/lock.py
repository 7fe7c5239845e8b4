"""The ledger lock protocol: the OS ``flock`` on the vault folder every ledger writer takes,
and the seed's ``.meta.json`` ``lock`` field (``{"pid", "acquired"}``, 10-minute expiry).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import UsageError

# the wait for a lock is safewrite's (the site's build uses it too); named here as before
from toolkit.safewrite import DEFAULT_LOCK_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from toolkit.safewrite import LOCK_TIMEOUT_ENV as LOCK_TIMEOUT_ENV
from toolkit.safewrite import lock_timeout as lock_timeout
from toolkit.safewrite import pid_alive

LOCK_EXPIRY = dt.timedelta(minutes=10)
NOW_ENV = "TOOLKIT_NOW"
_HOLDER = re.compile(r"^toolkit[-\w]*@(?P<host>[^:]+):(?P<pid>\d+)$")


def lock_path(ledger_dir: Path) -> Path:
    """The path every writer of this ledger flocks: the vault folder (``ledger/``'s parent).

    Locking a folder leaves no lock file behind in the user's tree."""
    return Path(ledger_dir).parent


def holder_id() -> str:
    """Who holds the ``.meta.json`` lock: ``toolkit-editor@<host>:<pid>``."""
    return f"toolkit-editor@{socket.gethostname()}:{os.getpid()}"


def parse_instant(value: Any) -> dt.datetime | None:
    """An ISO-8601 time as an aware UTC datetime (naive = UTC, ``Z`` accepted); None if bad."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return when.astimezone(dt.UTC)
    except (ValueError, OverflowError):  # OverflowError: before year 1 or past 9999 in UTC
        return None


def iso_z(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_for(today: dt.date | None = None) -> dt.datetime:
    """``$TOOLKIT_NOW`` if set, else the run's time (:func:`toolkit.clock.now`:
    ``$SOURCE_DATE_EPOCH``, else the real time; UTC), moved to the injected day if there is
    one."""
    from toolkit import clock

    fixed = os.environ.get(NOW_ENV)
    if fixed:
        when = parse_instant(fixed)
        if when is None:
            raise UsageError(f"{NOW_ENV}={fixed!r} is not an ISO-8601 time",
                             hint="Use e.g. 2026-05-10T12:00:00Z or unset it")
        return when
    real = clock.now().replace(microsecond=0)
    if today is not None and today != real.date():
        return dt.datetime.combine(today, real.time(), dt.UTC)
    return real


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



def judge_lock(holder: LockHolder | None, now: dt.datetime, *, force: bool
               ) -> tuple[bool, str | None]:
    """The one rule for a ``.meta.json`` lock found by a writer: (does it block, the note to
    show). Ours or none: no. A toolkit run on this host whose process is gone, or a lock
    older than 10 minutes: taken over, with a note. A fresh lock of another holder blocks,
    unless ``force`` overrides it (with a note)."""
    if holder is None or holder.pid == holder_id():
        return False, None
    if holder.dead_toolkit_run():
        return False, f"lock left by a run that was killed ({holder.describe(now)}) taken over"
    if not holder.fresh(now):
        return False, f"stale lock taken over: held by {holder.describe(now)}"
    if force:
        return False, f"--force: overrode the lock held by {holder.describe(now)}"
    return True, None


# --------------------------------------------------------------------------- a run-long lock


@dataclass
class LockTicket:
    """The ``.meta.json`` lock a run holds between commands' writes (reconcile's Phase 0),
    and how to give it back untouched."""

    path: Path
    holder: str
    original: bytes | None  # .meta.json before the lock was taken (None: it did not exist)
    original_snapshot: Any  # FileSnapshot of that version, for the backup
    written: bytes  # what was written (to know it is still ours)
    notes: list[str]


LockCheck = Callable[[dict[str, Any] | None, Path, dt.datetime], list[str]]


def take_json_lock(ledger_dir: Path, now: dt.datetime, check: LockCheck, *,
                   new_file: Callable[[], dict[str, Any]], timeout: float | None = None
                   ) -> LockTicket:
    """Write ``{"pid", "acquired"}`` into ``.meta.json``'s ``lock`` under the OS lock every
    ledger writer takes, so two runs cannot both find it free. ``check`` sees the file's
    object first (it raises when the lock blocks, else returns notes); ``new_file`` gives the
    fields of a ``.meta.json`` that does not exist yet. The holder is :func:`holder_id`, so an
    edit session of this process sees the lock as its own."""
    from toolkit.ledger.vault.meta import meta_json_bytes, read_meta_json
    from toolkit.safewrite import FileLock, atomic_replace

    path = ledger_dir / ".meta.json"
    with FileLock(lock_path(ledger_dir), timeout=lock_timeout() if timeout is None else timeout,
                  what="the ledger"):
        snap, data = read_meta_json(path, hint=META_JSON_HINT)
        notes = check(data, path, now)
        written = meta_json_bytes(snap, {"lock": {"pid": holder_id(), "acquired": iso_z(now)}},
                                  new_file)
        atomic_replace(snap if snap is not None else path, written, expected=snap)
    return LockTicket(path=path, holder=holder_id(), original=snap.data if snap else None,
                      original_snapshot=snap, written=written, notes=notes)


def give_back_json_lock(ticket: LockTicket) -> str | None:
    """Undo :func:`take_json_lock` byte for byte, when ``.meta.json`` still holds what it
    wrote. The caller holds the OS lock. Returns a warning when the file is no longer ours."""
    from toolkit.safewrite import FileSnapshot, atomic_replace

    try:
        snap = FileSnapshot.read(ticket.path)
    except FileNotFoundError:
        return None
    if snap.data != ticket.written:
        return f"{ticket.path.name} changed during the run; its lock field was left as is"
    if ticket.original is None:
        ticket.path.unlink()
    else:
        atomic_replace(snap, ticket.original)
    return None


META_JSON_HINT = "Fix the file or delete it (reconcile then computes its values)"
