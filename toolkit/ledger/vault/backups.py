"""Reconcile's backups of the ledger: the verified copy before a run writes, pruning old ones,
and putting back what a failed run wrote."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import RefusedError
from toolkit.records import LEDGER_FILES
from toolkit.safewrite import FileSnapshot, atomic_replace, backup_files, unique_dir

_BACKUP_NAME = re.compile(r"^reconcile-(\d{4}-\d{2}-\d{2}-\d{6})(?:-\d+)?$")
BACKUP_FILES = (*(f"{k}.md" for k in LEDGER_FILES), "meta.yaml", ".meta.json")


def refuse_no_folder(parent: Path, done: str = "") -> None:
    """Refuse when something that is not a folder is where the backups go (``parent``):
    the editor's check before its first change (``done``: what it says of the ledger) and
    reconcile's before its backup."""
    if parent.exists() and not parent.is_dir():
        raise RefusedError("is not a folder, so no backup can be made there"
                           + (f"; {done}" if done else ""), path=parent,
                           hint="Move it away so the .backups folder can be created")


def make_backup(ledger_dir: Path, now: dt.datetime, meta_json_original: Any, *,
                max_bytes: int | None = None) -> Path:
    """Copy every ledger .md file, meta.yaml and .meta.json (``meta_json_original``: as it was
    before this run took the lock) into ``.backups/reconcile-YYYY-MM-DD-HHMMSS/``, verified by
    count and SHA-256 (``safewrite.backup_files``). A file over ``max_bytes`` (the project's
    ``max_file_mb``) is refused like every other read. Raises when it fails; nothing else is
    written."""
    sources: list[Any] = []
    for name in BACKUP_FILES:
        p = ledger_dir / name
        if name == ".meta.json":
            if meta_json_original is not None:
                sources.append(meta_json_original)
        elif p.is_file():
            sources.append(FileSnapshot.read(p, max_bytes))
    parent = ledger_dir / ".backups"
    refuse_no_folder(parent)
    dest = unique_dir(parent, f"reconcile-{now.astimezone(dt.UTC):%Y-%m-%d-%H%M%S}")
    backup_files(sources, dest)
    return dest


def prune_backups(ledger_dir: Path, keep: Path, now: dt.datetime, *, max_count: int,
                  max_age_days: int) -> list[str]:
    """Remove ``reconcile-*`` backups beyond ``max_count`` (newest kept) or older than
    ``max_age_days``; never ``keep`` (this run's). Returns the names removed."""
    parent = ledger_dir / ".backups"
    found: list[tuple[dt.datetime, str, Path]] = []
    for p in parent.iterdir() if parent.is_dir() else []:
        m = _BACKUP_NAME.match(p.name)
        if not m or p.is_symlink() or not p.is_dir() or p == keep:
            continue
        when = dt.datetime.strptime(m.group(1), "%Y-%m-%d-%H%M%S").replace(tzinfo=dt.UTC)
        found.append((when, p.name, p))
    found.sort(key=lambda f: (f[0], f[1]), reverse=True)
    removed: list[str] = []
    max_age = dt.timedelta(days=max_age_days)
    for rank, (when, name, p) in enumerate(found, start=2):  # this run's backup is number 1
        if rank > max_count or now - when > max_age:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(name)
    return removed


@dataclass
class Written:
    """One file a run wrote: its bytes before (None: it did not exist) and after."""

    path: Path
    before: bytes | None
    after: bytes


def restore_written(written: list[Written]) -> tuple[list[str], bool]:
    """Put back what a run wrote (newest first) where the file still holds its bytes; a file
    someone changed since is left alone, with a warning. The caller holds the OS lock.
    Returns (warnings, anything restored)."""
    warnings: list[str] = []
    restored = False
    for w in reversed(written):
        try:
            snap: FileSnapshot | None = FileSnapshot.read(w.path)
        except FileNotFoundError:
            snap = None
        current = None if snap is None else snap.data
        if current == w.before:
            continue  # never written (the failure came first) or already restored
        if current != w.after or snap is None:
            warnings.append(f"{w.path.name} changed after reconcile wrote it; not restored")
            continue
        if w.before is None:
            w.path.unlink()
        else:
            atomic_replace(snap, w.before)
        restored = True
    return warnings, restored
