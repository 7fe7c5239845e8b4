"""One exception hierarchy for the whole toolkit.

Every error carries a message that says what is wrong and what to do next, the file (and line)
it is about when known, and the exit code the CLI uses for it. The CLI is the one place that
turns these into exit codes (``toolkit/cli/__init__.py``).

Exit codes (documented in the README):

==  ===========================================================
0   ok
1   failure (not found, refused, conflict, a command that failed, a permission denied)
2   usage (bad option or argument)
65  bad data (a source file that cannot be read as its format)
75  busy / locked (another run holds the lock, a DB is locked)
==  ===========================================================
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DATA = 65
EXIT_BUSY = 75


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a service manager stopping the command), raised by the command line
    as Ctrl-C's KeyboardInterrupt is, so it ends through the same clean-up (an edit puts its
    files back and gives the ``.meta.json`` lock back; a load rolls back): exit 143, the code
    the signal's death gives."""


class ToolkitError(Exception):
    """Base class: a problem the user can act on. Never shown with a traceback."""

    exit_code = EXIT_FAILURE

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.hint = hint

    @property
    def detail(self) -> str:
        """The message and hint without the location (for warnings that carry their own)."""
        if not self.hint:
            return self.message
        return self.message.rstrip(".") + ". " + self.hint

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        text = where + self.message
        if self.hint:
            text = text.rstrip(".") + ". " + self.hint
        return text


class UsageError(ToolkitError):
    """The command was called wrongly (bad option value, missing argument)."""

    exit_code = EXIT_USAGE


class NotFoundError(ToolkitError):
    """Something the user named does not exist (a file, an entry, an id)."""


class DataError(ToolkitError):
    """A source file is not valid for its format (junk, damaged, too big, unsafe)."""

    exit_code = EXIT_DATA


class TooLargeError(DataError):
    """A file over the size limit (``max_file_mb``); it was not read. A command that needs the
    file refuses with this error (exit 65) rather than acting as if the file were empty."""


class PermissionDeniedError(DataError):
    """A file or folder the toolkit may not read or write (EACCES): exit 1, not 65, since the
    data is not at fault and a ``chmod`` fixes it; the hint names the path to change
    (:func:`permission_denied`). A DataError all the same, so that a reader that reads on
    past a file it cannot read (a ledger file, a session log) reads on past this one too."""

    exit_code = EXIT_FAILURE


class BusyError(ToolkitError):
    """Another run or process holds a lock we need; retrying later may work."""

    exit_code = EXIT_BUSY


class ConflictError(ToolkitError):
    """A file changed on disk since we read it; nothing was written."""


class RefusedError(ToolkitError):
    """A request the toolkit will not carry out (unsafe query, secret in a report...)."""


# OSError numbers whose strerror reads badly in a one-line error.
_OS_PHRASES = {
    "EEXIST": "is in the way: it exists, and a folder was needed here",
    "ENOTDIR": "a part of this path is a file, not a folder",
    "ELOOP": "too many levels of symbolic links (a symlink loop)",
    "EISDIR": "is a folder, not a file",
}


def permission_denied(path: str | Path) -> PermissionDeniedError:
    """The one-line error for a permission denied on ``path``: the path to change (``path``
    itself, a folder on the way to it that may not be entered, or the folder a file is
    written in), what it needs and the ``chmod`` that gives it. Found by asking the system
    what this process may do now (``os.access``), so that every reader and writer, and the
    two boundaries that turn a raw ``PermissionError`` into this, say the same thing."""
    target = Path(os.path.abspath(path))
    found = _denied_at(target)
    if found is None:  # not a mode bit (an ACL, a security module) or changed meanwhile
        return PermissionDeniedError("Permission denied", path=target,
                                     hint="Check the permissions of it and of its folders")
    where, need = found
    kind = "folder" if where != target or target.is_dir() else "file"
    mode = {"enter": "u+rx", "read": "u+rx" if kind == "folder" else "u+r",
            "write": "u+w"}[need]
    adjective = "writable" if need == "write" else "readable"
    if where == target:
        message = f"Permission denied: the {kind} is not {adjective}"
    elif need == "write":
        message = (f"Permission denied: the folder is not writable (to write "
                   f"{target.relative_to(where)})")
    else:
        message = (f"Permission denied: the folder cannot be entered (to reach "
                   f"{target.relative_to(where)})")
    return PermissionDeniedError(message, path=where, hint=chmod_hint(where, adjective, mode))


def chmod_hint(where: str | Path, adjective: str, mode: str) -> str:
    """What to do about a file or folder this process may not change or read: "Make it
    writable: chmod u+w <path>" (and who may run it, when another user owns it). The one
    wording of every permission refusal (:func:`permission_denied`, and the checks made
    before a change, :func:`toolkit.safewrite.check_changeable`)."""
    owner = ""
    try:
        if os.stat(where).st_uid != os.geteuid():
            owner = " (as its owner: it belongs to another user)"
    except OSError:
        pass
    return f"Make it {adjective}: chmod {mode} {shlex.quote(str(where))}{owner}"


def _denied_at(target: Path) -> tuple[Path, str] | None:
    """Where this process is refused on the way to ``target`` and what for (``enter``,
    ``read``, ``write``): the first folder on the way it may not enter; else ``target`` when
    it may not read it; else the folder it is in when that may not be written (a new file, a
    temporary file beside it, SQLite's or DuckDB's journal); else ``target`` when it may not
    write it. None when nothing is refused now."""
    for folder in reversed(target.parents):
        if not os.path.isdir(folder):  # a missing folder: created in the last one that is
            return (folder.parent, "write") if not os.access(folder.parent, os.W_OK) else None
        if not os.access(folder, os.X_OK):
            return folder, "enter"
    if os.path.lexists(target):
        wanted = os.R_OK | os.X_OK if os.path.isdir(target) else os.R_OK
        if not os.access(target, wanted):
            return target, "read"
    if not os.access(target.parent, os.W_OK):
        return target.parent, "write"
    if os.path.lexists(target) and not os.access(target, os.W_OK):
        return target, "write"
    return None


def error_line(text: str) -> str:
    """A DuckDB error's first line: the message, without the SQL it points into. A value it
    quotes may hold line breaks ('Could not convert string 'a<LF>b' to INT32'): while a
    quote is open the next lines are joined with ``\\n``, so the value is whole (a token
    wrapped across the break is still a token to the redactor, not a half shown alone)."""
    lines = text.strip().splitlines()
    if not lines:
        return ""
    line = lines[0]
    for more in lines[1:20]:
        if (line.count("'") % 2 == 0 and line.count('"') % 2 == 0) or not more.strip():
            break  # (a blank line starts DuckDB's "LINE 1: <the SQL>" part)
        line += "\\n" + more
    return line


def from_exception(exc: BaseException) -> ToolkitError | None:
    """The one-line error for an exception a user can cause that no command turned into a
    ToolkitError: a file system error on a path they gave, a DuckDB or SQLite error, a
    number too big to compute with. None for anything else (a bug: keep the traceback).

    Called at the two boundaries, the CLI's (``toolkit/cli/__init__.py``) and the MCP
    server's tool wrapper, and by :func:`one_error`; commands raise ToolkitError themselves
    where they can say more.
    """
    import errno
    import sys

    # a SQLite error exists only once sqlite3 is imported: not imported here (a command that
    # never used it, such as `toolkit ledger --help`, whose exit passes through here)
    sqlite3 = sys.modules.get("sqlite3")
    if isinstance(exc, OSError):
        name = errno.errorcode.get(exc.errno or 0, "")
        what = _OS_PHRASES.get(name) or exc.strerror or str(exc) or type(exc).__name__
        if name == "EEXIST" and exc.filename is not None and Path(str(exc.filename)).is_dir():
            what = exc.strerror or "already exists"
        where = exc.filename if exc.filename is not None else None
        if exc.filename2 is not None:
            what = f"{what} (with {exc.filename2})"
        if name == "EACCES" and isinstance(exc.filename, str | bytes | os.PathLike):
            return permission_denied(os.fsdecode(exc.filename))
        if name in ("EAGAIN", "EBUSY", "ETXTBSY"):
            return BusyError(what, path=where, hint="Retry when the other process finishes")
        return ToolkitError(what, path=where)
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        msg = str(exc) or type(exc).__name__
        low = msg.lower()
        if "locked" in low or "busy" in low:
            return BusyError(f"SQLite database is busy: {msg}", hint="Retry in a moment")
        if "not a database" in low or "malformed" in low or "disk image" in low:
            return DataError(f"SQLite database is damaged: {msg}")
        return ToolkitError(f"SQLite failed: {msg}")
    if type(exc).__module__ in ("duckdb", "_duckdb"):  # without importing duckdb here
        msg = error_line(str(exc)) or type(exc).__name__
        found = _DUCKDB_SURROGATE.search(msg)
        if found is not None:  # a lone surrogate in a value given to DuckDB: as any writer's
            return _lone_surrogate(found.group(1))
        denied = duckdb_denied(msg)
        if denied is not None:  # (the store's folder not writable: its .wal cannot be made)
            return permission_denied(denied)
        if type(exc).__name__ == "IOException" and "lock" in msg.lower():
            return BusyError(f"the store is in use by another process: {msg}",
                             hint="Retry when it finishes")
        if type(exc).__name__ == "OutOfMemoryException":
            return ToolkitError(f"the store ran out of memory: {msg}")
        return ToolkitError(f"the store failed: {msg}")
    if isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from "):
        # pathlib's resolve() before Python 3.13; 3.13 raises OSError(ELOOP) instead
        return ToolkitError(_OS_PHRASES["ELOOP"], path=str(exc)[len("Symlink loop from "):]
                            .strip("'\""))
    if isinstance(exc, OverflowError):
        return UsageError(f"a number is too large: {exc}")
    if isinstance(exc, UnicodeEncodeError) and "surrogate" in exc.reason:
        # A lone surrogate (undecodable bytes in an argument, or a "\ud800" escape in JSON
        # input) has no UTF-8 form: every writer refuses it rather than crash.
        bad = exc.object[exc.start:exc.end] if isinstance(exc.object, str) else ""
        return _lone_surrogate("".join(f"\\u{ord(c):04x}" for c in bad))
    return None


# DuckDB's words for a file it was refused (opening the store, its .wal, a temporary file)
_DUCKDB_DENIED = re.compile(r'(?:Cannot|Could not) (?:open|create) (?:file|directory) "(.+?)": '
                            r'Permission denied')


def duckdb_denied(message: str) -> str | None:
    """The path of a DuckDB error that is a permission denied, else None."""
    found = _DUCKDB_DENIED.search(message)
    return found.group(1) if found is not None else None


# DuckDB's words for a Python string it cannot pass on as UTF-8 (a parameter's value)
_DUCKDB_SURROGATE = re.compile(r"cannot encode str as UTF-8, surrogate '(\\u[0-9a-fA-F]{4})'")


def _lone_surrogate(shown: str) -> UsageError:
    return UsageError(f"the input holds a lone surrogate ({shown}), which is not text and "
                      "cannot be written as UTF-8. Give valid UTF-8 text")


def one_error(exc: ToolkitError | OSError) -> ToolkitError:
    """What one part's read failed on (a store's source, a fleet's project), as the error
    recorded or shown for that part: a raw OSError that got out of its reader (a folder it
    may not enter, a name too long) is that part's problem, as a bad file is, never the
    whole command's."""
    if isinstance(exc, ToolkitError):
        return exc
    return from_exception(exc) or ToolkitError(str(exc))
