"""The intent journal of a multi-file ledger edit, and how every entry point finishes or undoes
one a killed run left half-done (FAULTS G4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.errors import BusyError, RefusedError, ToolkitError
from toolkit.ledger.vault.lock import lock_path
from toolkit.ledger.vault.paths import check_inside
from toolkit.records import JOURNAL_NAME, journal_path
from toolkit.safewrite import FileLock, cleanup_orphan_temps, recover_journal

__all__ = ["JOURNAL_NAME", "journal_path", "open_vault", "recover_interrupted"]


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
            if not locked:  # a reader: the killed run's temp files go with its journal (an
                cleanup_orphan_temps(path.parent)  # editor that writes removes them, naming each)
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

