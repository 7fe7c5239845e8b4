"""One exception hierarchy for the whole toolkit.

Every error carries a message that says what is wrong and what to do next, the file (and line)
it is about when known, and the exit code the CLI uses for it. The CLI is the one place that
turns these into exit codes (``toolkit/cli/__init__.py``).

Exit codes (documented in the README):

==  ===========================================================
0   ok
1   failure (not found, refused, conflict, a command that failed)
2   usage (bad option or argument)
65  bad data (a source file that cannot be read as its format)
75  busy / locked (another run holds the lock, a DB is locked)
==  ===========================================================
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DATA = 65
EXIT_BUSY = 75


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


class BusyError(ToolkitError):
    """Another run or process holds a lock we need; retrying later may work."""

    exit_code = EXIT_BUSY


class ConflictError(ToolkitError):
    """A file changed on disk since we read it; nothing was written."""


class RefusedError(ToolkitError):
    """A request the toolkit will not carry out (unsafe query, secret in a report...)."""
