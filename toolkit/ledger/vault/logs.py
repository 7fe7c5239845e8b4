"""The vault's two logs: the current session log (the seed's ``### [HH:MM:SS] /smith-ledger
<event>`` blocks, appended) and ``ledger/reconcile-log.md`` (newest run first)."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

from toolkit.ledger.vault.lock import lock_path, now_for
from toolkit.textio import within


def session_log_path(vault: Path) -> Path | None:
    """The current vault session log, if ``.current-session`` names one inside ``sessions/``.

    A pointer to anywhere else is ignored: a cloned repository must not be able to make the
    toolkit append to an arbitrary file. Nor through links: ``sessions/`` must stay inside
    the vault and the vault inside the project folder (the walls of FAULTS G3)."""
    from toolkit.ledger.vault.paths import vault_roots
    from toolkit.sources.smith import current_session_log

    p = current_session_log(Path(vault))
    if p is None or p.suffix != ".md":
        return None
    root, vault = vault_roots(vault)
    sessions = vault / "sessions"
    real = Path(os.path.realpath(p))
    if not (within(real, sessions, strictly=True) and within(sessions, vault, strictly=True)
            and within(vault, root) and real.is_file()):
        return None
    return real


def append_session_log(vault: Path, *, event: str, subcommand: str, request: str,
                       synthesized: str, outcome: str, artifacts: str = "none",
                       systems: str = "none", now: dt.datetime | None = None) -> Path | None:
    """Append one ``### [HH:MM:SS] /smith-ledger <event>`` block (the seed's vault logging
    format) to the current session log; silently nothing when there is none."""
    try:  # logging never makes a command fail: its change is written by now
        path = session_log_path(Path(vault))
    except OSError:
        return None
    if path is None:
        return None
    when = now or now_for()
    quoted = "\n".join("> " + line if line else ">" for line in
                       (request.splitlines() or [""]))
    block = (f"### [{when:%H:%M:%S}] /smith-ledger {event}\n\n"
             f"**User Request:**\n{quoted}\n\n"
             f"**Subcommand:** {subcommand}\n"
             f"**Synthesized Input:** {synthesized}\n"
             f"**Outcome:** {outcome}\n"
             f"**Artifacts:** {artifacts}\n"
             f"**Systems affected:** {systems}\n")
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            tail = b""
            if size:
                fh.seek(max(0, size - 2))
                tail = fh.read()
        lead = "" if size == 0 or tail.endswith(b"\n\n") else ("\n" if tail.endswith(b"\n")
                                                               else "\n\n")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, (lead + block).encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        return None  # logging never makes a command fail
    return path


def write_reconcile_log(path: Path, update: Callable[[bytes | None], bytes], *,
                        timeout: float) -> None:
    """Replace ``reconcile-log.md`` with ``update(its bytes or None)``, atomically, under the
    ledger's OS lock. Raises what the write raised."""
    from toolkit.safewrite import FileLock, FileSnapshot, atomic_replace

    with FileLock(lock_path(path.parent), timeout=timeout, what="the ledger"):
        snap = FileSnapshot.read(path) if path.exists() else None
        new = update(snap.data if snap else None)
        atomic_replace(snap if snap is not None else path, new, expected=snap)
