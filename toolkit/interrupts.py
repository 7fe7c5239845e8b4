"""A signal that ends a command (Ctrl-C's SIGINT, ``kill``'s SIGTERM) reaching inside DuckDB.

Python runs a signal handler between bytecodes; while the main thread is in a DuckDB query,
DuckDB's Python layer runs it between the query's tasks, and when the handler raises, DuckDB
drops that exception and raises its own ``RuntimeError("Query interrupted")`` instead. A query
in another thread (the site's downloads) is not stopped by it at all. So the command line's
handlers call :func:`stop_queries` first: it records which signal came and interrupts every
connection the store opened (each one's running query ends with
``duckdb.InterruptException``; an idle one is not affected). Whatever error DuckDB then gives,
:func:`raise_if_stopped` turns it back into the signal's own exception (``Terminated`` for
SIGTERM, ``KeyboardInterrupt`` for SIGINT), so the command ends through the same clean-up and
with the same message and exit as anywhere else, never as a timeout or a traceback.
"""

from __future__ import annotations

import contextlib
import signal
import weakref
from typing import Any

from toolkit.errors import Terminated

_received: int | None = None
_connections: weakref.WeakSet[Any] = weakref.WeakSet()


def register(conn: Any) -> Any:
    """Let :func:`stop_queries` interrupt ``conn`` (a DuckDB connection); returns it."""
    _connections.add(conn)
    return conn


def stop_queries(signum: int) -> None:
    """Record ``signum`` and interrupt the query running on every registered connection.
    Safe from a signal handler (``interrupt`` only sets DuckDB's flag)."""
    global _received
    _received = signum
    for conn in list(_connections):
        with contextlib.suppress(Exception):  # a closed connection: nothing of it runs
            conn.interrupt()


def received() -> int | None:
    """The signal :func:`stop_queries` recorded, if any."""
    return _received


def reset() -> None:
    """Forget a recorded signal (the command line, when its command ends)."""
    global _received
    _received = None


def stopped_error() -> KeyboardInterrupt | None:
    """The exception the recorded signal stands for: ``Terminated`` for SIGTERM,
    ``KeyboardInterrupt`` for SIGINT; None when none came."""
    if _received is None:
        return None
    return Terminated() if _received == signal.SIGTERM else KeyboardInterrupt()


def raise_if_stopped(exc: BaseException | None = None) -> None:
    """Raise the recorded signal's exception (in place of ``exc``, the error DuckDB gave for
    the interrupted query); nothing when no signal came. DuckDB's ``RuntimeError("Query
    interrupted")`` means a handler raised inside the query and DuckDB dropped what it raised:
    with no recorded signal (a program's own handler, Python's Ctrl-C) it is Ctrl-C's."""
    error = stopped_error()
    if error is None and is_duckdb_interrupt(exc):
        error = KeyboardInterrupt()
    if error is not None:
        raise error from None


def is_duckdb_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` is what DuckDB raises when a signal handler raised during a query."""
    return type(exc) is RuntimeError and str(exc) == "Query interrupted"
