"""Read-only access to the nagi-ledger audit DB (FORMATS.md §3).

The DB is opened read-only (``mode=ro`` URI, busy timeout) and never created. Bulk rows are
read as Arrow batches through the ADBC SQLite driver (the fast path: the whole table in a few
C calls); when a column holds values of the wrong type (text in ``tier``, FAULTS.md C5), the
reader falls back to Python's sqlite3 and reports the bad rows instead of failing.

Also reads nagi-ledger's JSON export (``nagi-ledger-export/1``).
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.clock import utc_timestamp_sql
from toolkit.errors import BusyError, DataError, NotFoundError
from toolkit.records import BIGINT_BOUND, INTEGER_BOUND, fits
from toolkit.textio import as_text, decode_utf8, load_json, read_bytes

TABLES: dict[str, tuple[str, ...]] = {
    "actions": ("id", "ts", "tier", "category", "description", "project"),
    "dispatches": ("id", "ts", "task", "agent_type", "model", "brief_summary", "verdict",
                   "verdict_ts", "verdict_notes"),
    "approaches": ("id", "ts", "task", "approach", "outcome", "reason"),
}
# The store's columns of each table: the DB's, then ``ts_raw``, the ``ts`` text as written
# (the store's ``ts`` is that text parsed, NULL when it is no timestamp; nagi-ledger's answers
# and windows use the text).
STORE_COLUMNS: dict[str, tuple[str, ...]] = {t: (*cols, "ts_raw") for t, cols in TABLES.items()}
# The integer columns, with the bound of what the store's column holds (id BIGINT, tier
# INTEGER): a value beyond it is a note, not a failed load.
INT_COLUMNS = {"id": BIGINT_BOUND, "tier": INTEGER_BOUND}
BUSY_TIMEOUT_MS = 5000
SQLITE_MAGIC = b"SQLite format 3\x00"


def _uri(path: Path) -> str:
    from urllib.parse import quote

    return f"file:{quote(str(path.resolve()))}?mode=ro"


# --------------------------------------------------------------------------- one file, one process
#
# POSIX drops every lock a process holds on a file when the process closes any descriptor of
# that file. SQLite knows this of its own connections (it puts off such a close), not of a
# descriptor the toolkit opens itself (check_file's read of the header) nor of those of the
# other copy of SQLite the fast path's ADBC driver carries. In WAL mode every open connection
# holds a shared lock on the DB file, so that no other process takes itself for the last one
# and resets the WAL when it closes: `toolkit mcp` runs its tools in threads, each with its own
# connection, and while another process wrote to the DB, a header read or an ADBC stream in
# the server dropped that lock under the open connections: the other process reset the WAL,
# and writes the server had answered as done were lost (their ids given out again). So within
# this process the audit DB is open, at any one time, to one kind of user only: Python's
# sqlite3 (any number of connections), ADBC's (any number), or one plain read of the header.

SQLITE3, ADBC, PLAIN = "sqlite3", "adbc", "plain"
# How long a kind waits for another to be done with the file before it gives way (ADBC: the
# careful path reads instead; the header read: left out, as SQLite is reading the file anyway).
# A use is seconds at most; a connection never closed is given back when it is collected.
WAIT_S = 30.0


class _FileUsers:
    """Which kind of user (:data:`SQLITE3`, :data:`ADBC`, :data:`PLAIN`) has each file open
    in this process, and how many of it (see above)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._users: dict[str, dict[str, int]] = {}

    def open_to(self, key: str, kind: str) -> int:
        with self._changed:
            return self._users.get(key, {}).get(kind, 0)

    def take(self, key: str, kind: str) -> bool:
        """Count one ``kind`` user of ``key`` once no other kind (for :data:`PLAIN`: no
        other user) has it open; False when that did not come within :data:`WAIT_S`."""
        def free() -> bool:
            return not any(n and (k != kind or kind == PLAIN)
                           for k, n in self._users.get(key, {}).items())

        with self._changed:
            if not self._changed.wait_for(free, timeout=WAIT_S):
                return False
            users = self._users.setdefault(key, {})
            users[kind] = users.get(kind, 0) + 1
            return True

    def give_back(self, key: str, kind: str) -> None:
        with self._changed:
            users = self._users.get(key, {})
            users[kind] = users.get(kind, 0) - 1
            if not any(users.values()):
                self._users.pop(key, None)
            self._changed.notify_all()


USERS = _FileUsers()


def file_key(path: Path | str) -> str:
    """The one name of a file for :data:`USERS` (every parent resolved)."""
    return os.path.realpath(path)


class _Connection(sqlite3.Connection):
    """A Python sqlite3 connection counted in :data:`USERS` until it is closed (or collected,
    if a caller never closes it)."""

    _key: str | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._give_back()

    def _give_back(self) -> None:
        key, self._key = self._key, None
        if key is not None:
            USERS.give_back(key, SQLITE3)

    def __del__(self) -> None:
        self._give_back()


def open_sqlite(path: Path, *, read_only: bool, **options: Any) -> sqlite3.Connection:
    """``sqlite3.connect`` to the audit DB at ``path`` (``read_only``: as a ``mode=ro`` URI,
    else the path itself, which SQLite may create), counted as a :data:`SQLITE3` user of it
    until closed: every connection the toolkit opens to the audit DB is opened here."""
    key = file_key(path)
    if not USERS.take(key, SQLITE3):
        raise BusyError("audit DB is busy (in use by this process's fast reader); retry in a "
                        "moment", path=path)
    try:
        conn = sqlite3.connect(_uri(path) if read_only else str(path), uri=read_only,
                               factory=_Connection, **options)
    except BaseException:
        USERS.give_back(key, SQLITE3)
        raise
    assert isinstance(conn, _Connection)
    conn._key = key
    return conn


@contextmanager
def used_by_adbc(path: Path) -> Iterator[None]:
    """The audit DB counted as open to ADBC for a ``with`` block; RuntimeError when this
    process's sqlite3 connections keep it (the caller reads the careful way instead)."""
    key = file_key(path)
    if not USERS.take(key, ADBC):
        raise RuntimeError("the audit DB is open to this process's sqlite3 connections")
    try:
        yield
    finally:
        USERS.give_back(key, ADBC)


def check_file(path: Path) -> None:
    """Refuse a missing, junk or truncated file before SQLite touches it (no -wal/-shm made).
    An empty (0-byte) file is an empty database, as SQLite, nagi-ledger and the writers
    (``audit_ops._writer``) take it: read as one without tables. The header is read only
    while no other user of the file in this process has it open (see :data:`USERS`): one that
    sqlite3 has open is a database SQLite reads already."""
    if not path.exists():
        raise NotFoundError("audit DB not found", path=path,
                            hint="Set NAGI_LEDGER_DB or --audit-db to the nagi-ledger database")
    if not path.is_file():
        raise DataError("audit DB path is not a file", path=path)
    key = file_key(path)
    if USERS.open_to(key, SQLITE3) or not USERS.take(key, PLAIN):
        return
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    finally:
        USERS.give_back(key, PLAIN)
    if not header:
        return
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise DataError("not a valid SQLite database", path=path,
                        hint="Point NAGI_LEDGER_DB or --audit-db at nagi-ledger's ledger.db")
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    page_count = struct.unpack(">I", header[28:32])[0]
    change_counter = struct.unpack(">I", header[24:28])[0]
    valid_for = struct.unpack(">I", header[92:96])[0]
    size = path.stat().st_size
    wal = path.with_name(path.name + "-wal")
    if (page_count and change_counter == valid_for and page_size * page_count > size
            and not wal.exists()):
        raise DataError(f"database is damaged: truncated to {size} of "
                        f"{page_size * page_count} bytes", path=path,
                        hint="Restore the audit DB from a backup")


def _translate(exc: sqlite3.Error, path: Path) -> Exception:
    msg = str(exc)
    if "locked" in msg or "busy" in msg:
        return BusyError("audit DB is busy (locked by a writer); retry in a moment", path=path)
    if "not a database" in msg or "malformed" in msg or "disk image" in msg:
        return DataError(f"database is damaged ({msg})", path=path,
                         hint="Restore the audit DB from a backup")
    return DataError(f"cannot read the audit DB: {msg}", path=path)


def connect_ro(path: Path, timeout_ms: int | None = None) -> sqlite3.Connection:
    check_file(path)
    timeout_ms = BUSY_TIMEOUT_MS if timeout_ms is None else timeout_ms
    try:
        conn = open_sqlite(path, read_only=True, timeout=timeout_ms / 1000,
                           check_same_thread=False)
    except sqlite3.Error as exc:
        raise _translate(exc, path) from None
    try:
        conn.execute(f"PRAGMA busy_timeout={int(timeout_ms)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        conn.close()
        raise _translate(exc, path) from None
    return conn


@dataclass
class AuditSchema:
    tables: dict[str, list[str]]  # table -> columns, for the three known tables present
    missing: list[str]
    extra_tables: list[str]
    extra_columns: dict[str, list[str]]


def inspect(conn: sqlite3.Connection, path: Path) -> AuditSchema:
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        tables: dict[str, list[str]] = {}
        extra_cols: dict[str, list[str]] = {}
        for t in TABLES:
            if t in names:
                cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
                tables[t] = cols
                extra = [c for c in cols if c not in TABLES[t]]
                if extra:
                    extra_cols[t] = extra
    except sqlite3.Error as exc:
        raise _translate(exc, path) from None
    return AuditSchema(
        tables=tables,
        missing=[t for t in TABLES if t not in names],
        extra_tables=sorted(n for n in names if n not in TABLES),
        extra_columns=extra_cols,
    )


def max_ids(conn: sqlite3.Connection, schema: AuditSchema, path: Path) -> dict[str, int]:
    out = {}
    try:
        for t in schema.tables:
            out[t] = conn.execute(f'SELECT coalesce(max(id), 0) FROM "{t}"').fetchone()[0] or 0
    except sqlite3.Error as exc:
        raise _translate(exc, path) from None
    return out


def _select(table: str, present: list[str]) -> str:
    cols = ", ".join(f'"{c}"' if c in present else f'NULL AS "{c}"' for c in TABLES[table])
    return f'SELECT {cols} FROM "{table}" WHERE id > ? ORDER BY id'


# Nullable text columns: Arrow infers a column's type from the first batch, and a batch of
# only NULLs would make it an integer column. Read them as (is_null, text) and rebuild.
NULLABLE_TEXT = {"project", "verdict", "verdict_ts", "verdict_notes"}


def stream_select(table: str, present: list[str]) -> tuple[str, list[str]]:
    """(SQLite SELECT for the stream, DuckDB expressions that rebuild each column)."""
    sel, rebuild = [], []
    for c in TABLES[table]:
        if c not in present:
            sel.append(f'NULL AS "{c}"')
            rebuild.append(f'CAST(NULL AS VARCHAR) AS "{c}"')
        elif c in NULLABLE_TEXT:
            sel.append(f'"{c}" IS NULL AS "{c}__null", '
                       f'coalesce(CAST("{c}" AS TEXT), \'\') AS "{c}"')
            column = f'"{c}"'
            value = utc_timestamp_sql(column) if c.endswith("_ts") else column
            rebuild.append(f'CASE WHEN "{c}__null" = 1 THEN NULL ELSE {value} END AS "{c}"')
        elif c == "ts":
            sel.append('"ts"')
            rebuild.append(f'{utc_timestamp_sql(chr(34) + "ts" + chr(34))} AS "ts"')
        else:
            sel.append(f'"{c}"')
            rebuild.append(f'"{c}"')
    rebuild.append('CAST("ts" AS VARCHAR) AS "ts_raw"' if "ts" in present
                   else 'CAST(NULL AS VARCHAR) AS "ts_raw"')
    return (f'SELECT {", ".join(sel)} FROM "{table}" WHERE id > ? ORDER BY id', rebuild)


def with_raw_ts(table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A ``checked_row`` of ``table`` with its ``ts`` text appended (``STORE_COLUMNS`` order)."""
    return (*row, row[TABLES[table].index("ts")])


def stream_into(path: Path, table: str, present: list[str], after_id: int,
                sink: Any) -> None:
    """Stream rows with id > after_id as Arrow record batches into ``sink(table, reader,
    rebuild_exprs)``. Raises on type trouble (the caller then takes the careful path)."""
    import adbc_driver_sqlite.dbapi as adbc

    sql, rebuild = stream_select(table, present)
    with used_by_adbc(path):
        conn = adbc.connect(_uri(path))
        try:
            cur = conn.cursor()
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cur.execute(sql, (after_id,))
            sink(table, cur.fetch_record_batch(), rebuild)
        finally:
            conn.close()


def _row_id(row: list[Any]) -> int | None:
    """The row's id as taken so far, for a note (the id column comes first: its text "7" is
    already 7 when a later column's note is written)."""
    rid = row[0]
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None


def checked_row(table: str, raw: Sequence[Any], bad: list[tuple[int | None, str]]
                ) -> tuple[Any, ...] | None:
    """One row of ``table`` (values in ``TABLES[table]`` order) with the store's types, or
    None when it has no integer id; what was wrong goes to ``bad`` as (row id, note).

    An integer column takes an int or its text ("7") that its store column can hold;
    anything else there (a float, true, "two", 2**31 in ``tier``) is stored as NULL with a
    note. A text column takes text, bytes and numbers (as text); bytes that are not UTF-8
    are shown with U+FFFD, with a note; a list or an object (only in a hand-edited JSON
    export) is stored as NULL with a note. The audit DB's careful path and the JSON export
    read rows through this, so a value is taken or refused the same way from either."""
    row = list(raw)
    for i, c in enumerate(TABLES[table]):
        v = row[i]
        if v is None:
            continue
        if isinstance(v, bytes):  # read_rows reads text as bytes: invalid UTF-8 is a note
            try:
                v = row[i] = v.decode("utf-8")
            except UnicodeDecodeError:
                v = row[i] = v.decode("utf-8", "replace")
                bad.append((_row_id(row), f"{table}.{c} is not valid UTF-8 text (read with "
                                          "U+FFFD)"))
        if c in INT_COLUMNS:
            try:
                if isinstance(v, bool | float | list | dict):
                    raise ValueError
                n = v if isinstance(v, int) else int(str(v).strip())
            except ValueError:
                row[i] = None
                bad.append((_row_id(row), f"{table}.{c} is {v!r}, not an integer"))
                continue
            if fits(n, INT_COLUMNS[c]):
                row[i] = n
            else:  # more than the store's column holds (nagi-ledger's are small numbers)
                row[i] = None
                bad.append((_row_id(row), f"{table}.{c} is {v!r}, too large an integer"))
        elif isinstance(v, list | dict):
            row[i] = None
            bad.append((_row_id(row), f"{table}.{c} is a JSON {type(v).__name__}, not text"))
        elif not isinstance(v, str):
            row[i] = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    if not isinstance(row[0], int):
        bad.append((None, f"{table} row with id {raw[0]!r} skipped"))
        return None
    return tuple(row)


def read_rows(conn: sqlite3.Connection, path: Path, table: str, present: list[str],
              after_id: int) -> tuple[list[tuple[Any, ...]], list[tuple[int | None, str]]]:
    """Rows with id > after_id through sqlite3, validating types (``checked_row``);
    (rows, bad-row notes)."""
    rows: list[tuple[Any, ...]] = []
    bad: list[tuple[int | None, str]] = []
    conn.text_factory = bytes  # text that is not UTF-8 must not fail the whole table
    try:
        for raw in conn.execute(_select(table, present), (after_id,)):
            row = checked_row(table, raw, bad)
            if row is not None:
                rows.append(row)
    except sqlite3.Error as exc:
        raise _translate(exc, path) from None
    finally:
        conn.text_factory = str
    return rows, bad


def read_export(path: Path, max_bytes: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """nagi-ledger's JSON export: {"actions": [...], "dispatches": [...], "approaches": [...]}."""
    # a lone surrogate ("\ud800", only from a hand edit) is shown as U+FFFD, like every reader
    data = as_text(load_json(decode_utf8(read_bytes(path, max_bytes), path), path))
    if not isinstance(data, dict) or data.get("schema") != "nagi-ledger-export/1":
        raise DataError('not a nagi-ledger export (expected "schema": "nagi-ledger-export/1")',
                        path=path)
    out: dict[str, list[dict[str, Any]]] = {}
    for t in TABLES:
        rows = data.get(t) or []
        if not isinstance(rows, list):
            raise DataError(f'"{t}" is not a list', path=path)
        out[t] = [r for r in rows if isinstance(r, dict)]
    return out
