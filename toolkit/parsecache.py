"""The parse cache: what a reader made of a file's exact bytes, kept beside the store.

A reader that parses a big file (the Smith Ledger's ``<kind>.md``) saves its result here under
the SHA-256 of the bytes it parsed and a version of its own code; the next read of the same
bytes loads the result instead of parsing again. Bytes that differ by one bit, a different
path or a changed parser miss, so a hit is always what a parse would give.

Entries are ``marshal`` data (plain tuples, strings, numbers: fast to load, nothing executed),
one file per slot, written to a temporary file and renamed into place: a reader sees the old
entry or the new one, never half of one. The cache is the toolkit's own data, never a user's
file, and it is not trusted as written: each file starts with a header (this format's magic
and version, the length and CRC-32 of the marshal data after it), and the key saved with the
data names the interpreter that wrote it (its version, so marshal's format, and its Unicode
database, which the readers' case folding and stripping follow). A file that is damaged,
truncated, left by another format or written by another interpreter is a miss -- it is
parsed again and the file rewritten -- so a hit is always what a parse would give. Nothing
here ever raises.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import struct
import sys
import unicodedata
import zlib
from pathlib import Path
from typing import Any

# marshal's format version: fixed, so an entry written by one Python is read by the same rules.
_MARSHAL_VERSION = 4
# The header of every cache file: magic and format version, then the length and CRC-32 of the
# marshal data that follows (a damaged or cut file fails the check before marshal reads it).
_MAGIC = b"toolkit-parsecache/2\n"
_HEADER = struct.Struct("<QI")
# Who wrote an entry: the interpreter (marshal's format, the str methods a parser calls) and
# its Unicode database (case folding, what strip() removes). Saved with every key.
RUNTIME = f"{sys.implementation.cache_tag}/{sys.version_info[:3]}/{unicodedata.unidata_version}"


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
    """The payload saved in ``slot`` under exactly ``key`` by this interpreter, or None (no
    entry, another key, or a file that is damaged, cut short or not in this format)."""
    try:
        raw = (folder / f"{slot}.marshal").read_bytes()
    except OSError:
        return None
    start = len(_MAGIC) + _HEADER.size
    if len(raw) < start or not raw.startswith(_MAGIC):
        return None
    length, crc = _HEADER.unpack_from(raw, len(_MAGIC))
    body = memoryview(raw)[start:]
    if len(body) != length or zlib.crc32(body) != crc:
        return None
    try:
        saved = marshal.loads(body)
    except Exception:  # a file that passed the check but is not ours: a miss
        return None
    if not (isinstance(saved, tuple) and len(saved) == 3):
        return None
    runtime, saved_key, payload = saved
    return payload if runtime == RUNTIME and saved_key == key else None


def save(folder: Path, slot: str, key: tuple[str, ...], payload: Any) -> None:
    """Keep ``payload`` in ``slot`` under ``key`` (replacing what was there). A failure (a
    read-only folder, a full disk) only means the next read parses again."""
    target = folder / f"{slot}.marshal"
    tmp = folder / f".{slot}.{os.getpid()}.tmp"
    try:
        body = marshal.dumps((RUNTIME, key, payload), _MARSHAL_VERSION)
        folder.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(_MAGIC + _HEADER.pack(len(body), zlib.crc32(body)))
            fh.write(body)
        os.replace(tmp, target)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
