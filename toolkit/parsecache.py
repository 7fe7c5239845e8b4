"""The parse cache: what a reader made of a file's exact bytes, kept beside the store.

A reader that parses a big file (the Smith Ledger's ``<kind>.md``) saves its result here under
the SHA-256 of the bytes it parsed and a version of its own code; the next read of the same
bytes loads the result instead of parsing again. Bytes that differ by one bit, a different
path or a changed parser miss, so a hit is always what a parse would give.

Entries are ``marshal`` data (plain tuples, strings, numbers: fast to load, nothing executed),
one file per slot, written to a temporary file and renamed into place: a reader sees the old
entry or the new one, never half of one. A damaged or unreadable entry is a miss. The cache is
the toolkit's own data, never a user's file; nothing here ever raises.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
from pathlib import Path
from typing import Any

# marshal's format version: fixed, so an entry written by one Python is read by the same rules.
_MARSHAL_VERSION = 4


def code_version(*modules: str) -> str:
    """A short digest of the named modules' source files: a parser's version for its cache
    key (editing the parser invalidates what the old one cached)."""
    import importlib.util

    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        try:
            h.update(Path(origin).read_bytes() if origin else name.encode())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:16]


def digest(data: bytes) -> str:
    """The key of a file's bytes."""
    return hashlib.sha256(data).hexdigest()


def load(folder: Path, slot: str, key: tuple[str, ...]) -> Any:
    """The payload saved in ``slot`` under exactly ``key``, or None."""
    try:
        raw = (folder / f"{slot}.marshal").read_bytes()
        saved_key, payload = marshal.loads(raw)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return payload if saved_key == key else None


def save(folder: Path, slot: str, key: tuple[str, ...], payload: Any) -> None:
    """Keep ``payload`` in ``slot`` under ``key`` (replacing what was there). A failure (a
    read-only folder, a full disk) only means the next read parses again."""
    target = folder / f"{slot}.marshal"
    tmp = folder / f".{slot}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(marshal.dumps((key, payload), _MARSHAL_VERSION))
        os.replace(tmp, target)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
