"""The parse cache: what a reader made of a file's exact bytes, kept beside the store.

A reader that parses a big file (the Smith Ledger's ``<kind>.md``) saves its result here under
the SHA-256 of the bytes it parsed and a version of its own code; the next read of the same
bytes loads the result instead of parsing again. Bytes that differ by one bit, a different
path or a changed parser miss, so a hit is always what a parse would give.

Entries are ``marshal`` data (plain tuples, strings, numbers: fast to load, nothing executed),
written a part at a time (a payload's lists a few thousand items per part, so saving a big
parse never holds a second copy of it as one marshal string), one file per slot, written to a
temporary file and renamed into place: a reader sees the old entry or the new one, never half
of one. A reader may also write its result as it makes it (:func:`stream`: the loader's parse
of a big ledger, whose entries then need not all be held in memory) and read its parts back
from the file it wrote.

The cache is the toolkit's own data, never a user's file, and it is not trusted as written:
each file starts with a header (this format's magic and version, the length and CRC-32
of the marshal data after it), and the key saved with the data names the interpreter that wrote
it (its version, so marshal's format, and its Unicode database, which the readers' case folding
and stripping follow). A file that is damaged, truncated, left by another format or written by
another interpreter is a miss -- it is parsed again and the file rewritten -- so a hit is
always what a parse would give. Nothing here ever raises.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import marshal
import os
import struct
import sys
import unicodedata
import weakref
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# marshal's format version: fixed, so an entry written by one Python is read by the same rules.
_MARSHAL_VERSION = 4
# The header of every cache file: magic and format version, then the length and CRC-32 of the
# data that follows (a damaged or cut file fails the check before marshal reads it): parts,
# each its length and its marshal data. The first part is (runtime, key, whether the payload
# is a tuple, each item's length when it is a list else -1); then each item, a list as parts
# of at most _PART items. A streamed entry's first part has None for the lengths: its payload
# is the list of the parts after it (see :func:`stream`).
_MAGIC = b"toolkit-parsecache/4\n"
_HEADER = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")
_PART = 4096
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


@functools.cache
def package_digest() -> bytes:
    """The digest of this package's source files, names and contents, read once per process
    (the code this process runs is the code it imported, whatever is edited on the disk
    later; a few milliseconds). The site keys its render caches on it, and the store each
    source's load, so that a load made by other code is made again (``Store.refresh``)."""
    root = os.path.dirname(os.path.realpath(__file__))
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]  # byte code: not read
        files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"\0{os.path.relpath(path, root)}\0".encode())
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.digest()


@functools.cache
def package_version(name: str) -> str:
    """An installed package's version, read once per process (package metadata is slow to
    read, and the code this process runs is the code it imported, whatever is installed
    later)."""
    from importlib.metadata import version

    return version(name)


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
    saved = _read(raw, key)
    return saved[2] if saved is not None else None


def _read(raw: bytes, key: tuple[str, ...] | None = None) -> tuple[Any, Any, Any] | None:
    """(runtime, key, payload) of a cache file's bytes, or None when they are not a whole
    file of this format (or, ``key`` given, not this interpreter's entry under ``key``: its
    payload is then not read)."""
    start = len(_MAGIC) + _HEADER.size
    if len(raw) < start or not raw.startswith(_MAGIC):
        return None
    length, crc = _HEADER.unpack_from(raw, len(_MAGIC))
    view = memoryview(raw)
    if len(raw) - start != length or zlib.crc32(view[start:]) != crc:
        return None
    at = start

    def part() -> Any:
        nonlocal at
        (size,) = _LENGTH.unpack_from(raw, at)
        at += _LENGTH.size + size
        if at > len(raw):
            raise ValueError("cut short")
        return marshal.loads(view[at - size:at])

    try:
        runtime, saved_key, is_tuple, shape = part()
        if key is not None and (runtime != RUNTIME or saved_key != key):
            return None
        if shape is None:  # a streamed entry: its parts, as many as there are
            parts = []
            while at < len(raw):
                parts.append(part())
            return runtime, saved_key, parts
        items: list[Any] = []
        for n in shape:
            if n < 0:
                items.append(part())
                continue
            whole: list[Any] = []
            while len(whole) < n:
                chunk = part()
                if not isinstance(chunk, list) or not chunk:
                    raise ValueError("not a part of a list")
                whole.extend(chunk)
            items.append(whole)
    except Exception:  # a file that passed the check but is not ours: a miss
        return None
    if at != len(raw) or len(items) != len(shape):
        return None
    return runtime, saved_key, tuple(items) if is_tuple else items[0]


def save(folder: Path, slot: str, key: tuple[str, ...], payload: Any) -> None:
    """Keep ``payload`` in ``slot`` under ``key`` (replacing what was there). A failure (a
    read-only folder, a full disk) only means the next read parses again."""
    _write_out(Writer.open(folder, slot), _parts(key, payload))


def save_parts(folder: Path, slot: str, key: tuple[str, ...], parts: Iterable[Any]) -> None:
    """Keep in ``slot`` under ``key`` the entry whose payload is the list of ``parts``, as
    :func:`stream` writes it, each part made as it is written (a failure as in :func:`save`)."""
    _write_out(stream(folder, slot, key), parts)


def _write_out(writer: Writer | None, parts: Iterable[Any]) -> None:
    """``parts`` written by ``writer`` and its file put in place; a failure (a full disk, or
    not marshal data) only means the next read parses again."""
    if writer is None:
        return
    try:
        for obj in parts:
            writer.write(obj)
        writer.commit()
    except (OSError, ValueError):
        pass  # the next read parses again
    finally:  # and after Ctrl-C: no half-written temp file stays
        writer.close()


def stream(folder: Path, slot: str, key: tuple[str, ...]) -> Writer | None:
    """A writer of an entry of ``slot`` under ``key`` whose payload is the list of the parts
    written to it next (:func:`load` gives that list once it is committed); None when the
    folder cannot hold it."""
    writer = Writer.open(folder, slot)
    if writer is not None:
        try:
            writer.write((RUNTIME, key, False, None))
        except BaseException as exc:
            writer.close()
            if not isinstance(exc, OSError):
                raise
            return None
    return writer


class Writer:
    """One cache file written a part at a time, to a temporary file renamed into place by
    :meth:`commit` (a reader sees the old entry or the new one, never half of one). A part
    written can be read back (:meth:`read`) until :meth:`close`, from this very file whatever
    is done to its name since: a producer too big to hold whole (a big ledger's parse) writes
    its parts as it makes them and reads them back when it needs them."""

    def __init__(self, fd: int, tmp: Path, target: Path) -> None:
        self.fd: int | None = fd
        self.tmp: Path | None = tmp  # until committed
        self.target = target
        self.length = self.crc = 0
        self.at = len(_MAGIC) + _HEADER.size  # where the next part goes
        # a writer dropped unclosed (its reader gone) still closes its file
        self._closed = weakref.finalize(self, _close, fd)

    @classmethod
    def open(cls, folder: Path, slot: str) -> Writer | None:
        """A writer of ``slot``, its header written; None when the folder cannot hold it."""
        target = folder / f"{slot}.marshal"
        tmp = folder / f".{slot}.{os.getpid()}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # a new file at the temp name: whatever is there (a killed save's file, or a link
            # planted at this predictable name) is removed, never written through
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError:
            return None
        writer = cls(fd, tmp, target)
        try:
            writer._write_all(_MAGIC + _HEADER.pack(0, 0), 0)
        except BaseException:
            writer.close()
            raise
        return writer

    def _write_all(self, data: bytes, at: int) -> None:
        assert self.fd is not None
        os.lseek(self.fd, at, os.SEEK_SET)  # (no pwrite on every system)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def write(self, obj: Any) -> tuple[int, int]:
        """Write one part: (where its marshal data starts, its length), for :meth:`read`.
        Raises OSError (a full disk) or ValueError (not marshal data)."""
        data = marshal.dumps(obj, _MARSHAL_VERSION)
        head = _LENGTH.pack(len(data))
        self._write_all(head, self.at)
        self._write_all(data, self.at + len(head))
        self.length += len(head) + len(data)
        self.crc = zlib.crc32(data, zlib.crc32(head, self.crc))
        self.at += len(head) + len(data)
        return self.at - len(data), len(data)

    def mark(self) -> tuple[int, int, int]:
        """Where the file ends now, for :meth:`rewind`."""
        return self.at, self.length, self.crc

    def rewind(self, mark: tuple[int, int, int]) -> None:
        """Drop the parts written since :meth:`mark` (a producer that starts again)."""
        assert self.fd is not None
        self.at, self.length, self.crc = mark
        os.ftruncate(self.fd, self.at)

    def read(self, at: int, size: int) -> Any:
        """A part written before (as :meth:`write` placed it)."""
        assert self.fd is not None
        os.lseek(self.fd, at, os.SEEK_SET)
        got, left = [], size
        while left:
            more = os.read(self.fd, left)
            if not more:
                break
            got.append(more)
            left -= len(more)
        if left:
            raise OSError("the cache file is shorter than written")
        return marshal.loads(b"".join(got))

    def commit(self) -> None:
        """The header written and the file renamed into place (it stays readable here)."""
        assert self.tmp is not None
        self._write_all(_HEADER.pack(self.length, self.crc), len(_MAGIC))
        os.replace(self.tmp, self.target)
        self.tmp = None

    def close(self) -> None:
        """Let the file go; a file never committed is deleted (nothing raises)."""
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                self.tmp.unlink(missing_ok=True)
        self._closed()
        self.fd = self.tmp = None


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def prune(folder: Path, slots: set[str]) -> None:
    """Delete every file of ``folder`` but the entries of ``slots`` (a cache of entries of its
    own, such as a build's chart or diff cache: entries no longer used, and temporary files a
    killed save left, go). A file that cannot be deleted stays."""
    keep_only(folder, {f"{slot}.marshal" for slot in slots})


def keep_only(folder: Path, names: set[str]) -> None:
    """Delete every file of ``folder`` whose name is not in ``names`` (a build folder's cache
    of its own files); a missing folder, or a file that cannot be deleted, is no error."""
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            if p.name not in names and p.is_file():
                with contextlib.suppress(OSError):
                    p.unlink()


def _parts(key: tuple[str, ...], payload: Any) -> Iterator[Any]:
    """What :func:`save` writes, a part at a time (see ``_MAGIC``)."""
    items = payload if isinstance(payload, tuple) else (payload,)
    yield (RUNTIME, key, isinstance(payload, tuple),
           tuple(len(x) if isinstance(x, list) else -1 for x in items))
    for x in items:
        if isinstance(x, list):
            for at in range(0, len(x), _PART):
                yield x[at:at + _PART]
        else:
            yield x
