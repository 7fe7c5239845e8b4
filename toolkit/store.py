"""The only module that talks to DuckDB: schema migrations, incremental refresh, queries.

The store is a cache rebuilt from the sources whenever it must be. It is handed the sources
(``toolkit.source.Source``, listed in ``toolkit.loaders.SOURCES``) when opened, runs their
migrations and loads, and never imports them. Tables are of two kinds:

* **derived** tables are rebuilt from their source whenever the source's fingerprint changes
  (ledger, sessions, slop, snapshots): a source is read whole or not at all;
* the **audit** tables (``actions``, ``dispatches``, ``approaches``) are append-only copies of
  the nagi-ledger DB: a refresh copies only rows with a larger id, and re-reads the verdict
  columns of dispatches (``ledger_log_verdict`` changes them later).

Bookkeeping tables start with ``_``: ``_migrations`` (applied migrations with the SHA-256 of
their text), ``_sources`` (one row per source: where it was found, its fingerprint, rows, when
loaded) and ``_problems`` (warnings with file and line). Migrations are append-only; pending
ones are applied together in one transaction with their records. When the store's schema does
not match the code (a recorded migration's text changed or is unknown here, as in a store
written by a newer toolkit, or a table is missing), it is dropped and made again in one
transaction, with a one-line note, and the next refresh loads every source into it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.display import visible
from toolkit.errors import (
    BusyError,
    DataError,
    RefusedError,
    ToolkitError,
    UsageError,
    duckdb_denied,
    error_line,
    one_error,
    permission_denied,
)
from toolkit.interrupts import raise_if_stopped, register
from toolkit.records import RETRY_LIMIT, Problem
from toolkit.safewrite import keep_trying, lock_timeout
from toolkit.source import (
    FastPathFailed,
    Migration,
    Progress,
    Source,
    SourceResult,
    asking_once,
    carefully,
    fingerprint_paths,
    migration_sha256,
)
from toolkit.textio import json_text, not_regular

if TYPE_CHECKING:
    import duckdb

    from toolkit.config import Config

# DuckDB is imported where it is used, so that a command that fails before it opens the store
# (a --db path that cannot be, a bad setting) does not pay for loading it.

# --------------------------------------------------------------------------- schema

# The first migration, frozen (its text never changes; tests/schema_history.txt holds its
# hash): the bookkeeping tables and the first tables of the ledger, sessions, slop, audit and
# snapshots sources, which declare them (toolkit.loaders). Every later migration belongs to
# the source whose tables it changes. The retry limit is spliced into the text from the one
# constant (it is 2, as when m001 was applied: the applied text is unchanged).
MIGRATIONS: list[Migration] = [
    ("m001_initial", f"""
CREATE TABLE _sources (
    source VARCHAR PRIMARY KEY, location VARCHAR, found BOOLEAN, note VARCHAR,
    fingerprint VARCHAR, rows BIGINT, loaded_at TIMESTAMP, state JSON);
CREATE TABLE _problems (source VARCHAR, path VARCHAR, line INTEGER, message VARCHAR);

CREATE TABLE ledger_entries (
    entry_id VARCHAR,             -- stable id: <file>/<slug of title>[-n]
    file VARCHAR,                 -- patterns, antipatterns, tool-preferences, edge-cases,
                                  -- project-quirks
    title VARCHAR,                -- NULL when the entry has no title (see problems)
    date DATE,                    -- the entry's Date (NULL when missing or not YYYY-MM-DD)
    date_raw VARCHAR,
    category VARCHAR,
    confidence VARCHAR,           -- low | medium | high (as written, lowercased)
    observations INTEGER,         -- Form A Observations
    source_reflections VARCHAR,   -- Form A: list of dates/spec ids; Form B: the count
    reflections INTEGER,          -- how many reflections back the entry (either form)
    context VARCHAR, pattern VARCHAR, evidence VARCHAR, related VARCHAR,
    form VARCHAR,                 -- 'A' (## heading) or 'B' (**Title:**)
    problems VARCHAR[],           -- what is missing or malformed
    path VARCHAR, line INTEGER,   -- where the entry's title is
    position INTEGER);            -- order within its file, from 0
CREATE TABLE ledger_meta (
    meta_schema VARCHAR,          -- 'reflect', 'smith-ledger', 'smith-init' or NULL
                                  -- (missing/unreadable)
    last_reflection VARCHAR, total_reflections INTEGER,
    meta_yaml JSON, meta_json JSON, smith_config JSON,
    estimated_tokens INTEGER, total_patterns INTEGER, last_reconcile VARCHAR,
    lock_holder VARCHAR, lock_acquired VARCHAR,
    prune_low_days INTEGER, prune_medium_days INTEGER);
CREATE TABLE reconcile_runs (
    ran_at TIMESTAMP, trigger VARCHAR, signals VARCHAR, backup VARCHAR, result VARCHAR,
    actions VARCHAR[], merges VARCHAR[], prunes VARCHAR[], budget_drops VARCHAR[],
    path VARCHAR, line INTEGER);
CREATE TABLE sessions (
    name VARCHAR, path VARCHAR, session_start TIMESTAMP, ended TIMESTAMP, project VARCHAR,
    branch VARCHAR, author VARCHAR, status VARCHAR, legacy_name BOOLEAN, events INTEGER,
    problems VARCHAR[]);
CREATE TABLE session_events (
    session VARCHAR, seq INTEGER, ts TIMESTAMP, time VARCHAR, kind VARCHAR, title VARCHAR,
    body VARCHAR, tool VARCHAR, tokens_in BIGINT, tokens_out BIGINT, tokens_total BIGINT,
    target VARCHAR, fields JSON, path VARCHAR, line INTEGER);
CREATE TABLE slop_entries (
    id VARCHAR, short_id VARCHAR, bucket VARCHAR, severity VARCHAR, confidence VARCHAR,
    owner VARCHAR, source_links VARCHAR[], title VARCHAR, description VARCHAR, status VARCHAR,
    cleanup_recommendation VARCHAR, created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ,
    created_at_raw VARCHAR, updated_at_raw VARCHAR, task_id VARCHAR, thread_id VARCHAR,
    extra JSON, problems VARCHAR[], path VARCHAR, position INTEGER, line INTEGER);
CREATE TABLE actions (
    id BIGINT, ts TIMESTAMP, tier INTEGER, category VARCHAR, description VARCHAR,
    project VARCHAR);
CREATE TABLE dispatches (
    id BIGINT, ts TIMESTAMP, task VARCHAR, agent_type VARCHAR, model VARCHAR,
    brief_summary VARCHAR, verdict VARCHAR, verdict_ts TIMESTAMP, verdict_notes VARCHAR);
CREATE TABLE approaches (
    id BIGINT, ts TIMESTAMP, task VARCHAR, approach VARCHAR, outcome VARCHAR,
    reason VARCHAR);
CREATE TABLE snapshots (
    repo VARCHAR, position INTEGER, sha VARCHAR, parent VARCHAR, ts TIMESTAMP, label VARCHAR,
    kind VARCHAR, turn INTEGER, call_id VARCHAR, snippet VARCHAR,
    files_changed INTEGER, lines_added INTEGER, lines_deleted INTEGER);
CREATE TABLE snapshot_files (
    repo VARCHAR, sha VARCHAR, position INTEGER, path VARCHAR, status VARCHAR, added INTEGER,
    deleted INTEGER);

CREATE VIEW task_status AS
SELECT task,
       count(*) AS dispatch_count,
       greatest(count(*) - 1, 0) AS retry_count,
       first(verdict ORDER BY id DESC) AS last_verdict,
       greatest(count(*) - 1, 0) >= {RETRY_LIMIT} AS over_retry_limit,
       min(ts) AS first_dispatch, max(ts) AS last_dispatch,
       count(*) FILTER (WHERE verdict IS NULL) AS pending,
       count(*) FILTER (WHERE verdict = 'CONFIRMED') AS confirmed,
       count(*) FILTER (WHERE verdict = 'REFUTED') AS refuted,
       count(*) FILTER (WHERE verdict = 'PARTIAL') AS partial
FROM dispatches GROUP BY task;
CREATE VIEW stats_by_tier AS
SELECT CAST(ts AS DATE) AS day, tier, count(*) AS actions
FROM actions GROUP BY ALL;
"""),
]

BOOKKEEPING = ("_migrations", "_sources", "_problems")
# How ``_sources.note`` begins for a source present but unreadable at its last load (its one
# problem in ``_problems`` says why; its tables keep the rows of the last load that read it)
SOURCE_ERROR = "error: "
# A source's warnings up to this many are inserted with bound values (Store.replace_problems);
# more go through Arrow (insert_rows), for which one multi-row VALUES statement gets slow.
FEW_PROBLEMS = 100

# The rows of ``actions`` a scoped connection reads (Store.scope_actions): the scope's
# project (in a temporary table, so the name is a bound value, never SQL text) and the
# unassigned ones.
_IN_SCOPE = ("project IS NULL OR trim(project) = '' OR lower(trim(project)) = "
             "(SELECT lower(trim(project)) FROM temp._toolkit_scope)")

# --------------------------------------------------------------------------- results

@dataclass(frozen=True)
class StaleSource:
    """A source present but unreadable at its last load (:meth:`Store.stale_sources`)."""

    source: str
    problem: Problem  # where and why it could not be read
    last_good: Any  # when the rows the store still holds were read (a datetime in UTC)
    rows: int  # rows of its tables the store still holds

    def message(self) -> str:
        """One line: the source, why it could not be read, and what is shown instead."""
        text = f"{self.source} could not be read ({self.problem})"
        if self.rows and self.last_good is not None:
            return (f"{text}; showing the last good read of "
                    f"{self.last_good:%Y-%m-%d %H:%M} UTC")
        return f"{text}; nothing of it is shown"


@dataclass
class LoadReport:
    results: list[SourceResult]

    @property
    def problems(self) -> list[Problem]:
        return [p for r in self.results for p in r.problems]

    @property
    def errors(self) -> list[ToolkitError]:
        """Sources that were present but could not be read (bad data, busy)."""
        return [r.error for r in self.results if r.error is not None]


# --------------------------------------------------------------------------- the store

# Store.insert_rows converts about this many bytes of values to Arrow per INSERT.
INSERT_BATCH_BYTES = 8 << 20
# Rows a loader builds before it inserts them (the ledger's entries: about a MB), so a big
# source is never held whole as rows: at 50,000 entries, batches of 2,000 take the load's peak
# about 10 MB below batches of 5,000 (what a batch leaves behind in freed memory is smaller),
# for the same CPU time.
ROW_BATCH = 2000
# Store.insert_rows binds this many rows or fewer as lists, a list per column, instead of
# converting them to Arrow: a refresh that stores a few rows (a one-change rebuild's) then
# never imports pyarrow (a tenth of a second of CPU), and at this size a list costs about
# what Arrow does.
FEW_ROWS = ROW_BATCH
# DuckDB's memory limit while a source with ``bounded_memory`` loads, in MB per thread of its
# own (each works on blocks of its own), 32 at least: at 50,000 ledger entries on two threads
# it took the load's peak from about 345 to 285 MB at 32 per thread, 64 at least; at 16 and 32
# the history's copy of the ledger's rows holds about 8 MB less (137 -> 129 MB), for the same
# CPU time and nothing written to DuckDB's temporary files.
LOAD_MEMORY_MB_PER_THREAD = 16
LOAD_MEMORY_MIN_MB = 32
# A store whose file and write-ahead log hold fewer bytes than this is worked on by one DuckDB
# thread (Store._fit_threads), but for its bulk inserts: its tables are a row group or two, so
# a second thread has no part of a scan to take, and waking it for each of a statement's
# pipelines cost about a fifth of the CPU of the site's queries on a small project (41 queries,
# 2.36 -> 1.89 ms each; its store is 4.7 MB), with a quarter of the context switches. A bigger
# store keeps DuckDB's threads (one per core), as a load of many rows does: the 5,000-entry
# site bench's (7.4 MB) peaked 3-5 MB higher on one thread (bench/bench_site.py). A small
# store's site build also keeps the memory its queries free (Store.give_back_freed_memory).
SMALL_STORE_BYTES = 6 << 20
# A source with ``bounded_memory`` whose load left fewer bytes than this in the write-ahead
# log is not checkpointed on its own (within its memory limit): what it wrote is a few rows
# DuckDB holds anyway, and the refresh's final checkpoint writes them with the other sources'
# (a first load of a small project wrote its store three times, 3.3 ms of CPU each). DuckDB
# checkpoints by itself at a commit only past 16 MB of log (its ``checkpoint_threshold``).
LOAD_CHECKPOINT_BYTES = 1 << 20


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    import ctypes

    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl, Windows): none
        return None
    return trim


def trim_c_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). Objects a load lets go of a batch at a time (a parse's records, a batch's rows
    and Arrow buffers) are many small blocks freed in the middle of the heap: glibc keeps
    those pages, and DuckDB's growing buffers then come on top of them. Given back after each
    batch, the same pages serve both; at 50,000 ledger entries the load's peak is about 30 MB
    lower. The call only frees pages nothing uses; it changes no object."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class Store:
    """An open DuckDB store. Use ``Store.open(path, sources=...)``; close with ``close()`` or
    ``with``. ``sources`` are the sources whose tables it holds and which it loads."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, path: Path, read_only: bool,
                 sources: Sequence[Source] = (), *, reopen: bool = False) -> None:
        self._conn: duckdb.DuckDBPyConnection | None = conn
        # release() may close the connection (reopened on next use): only when the store made
        # it as Store.open does (_connect with no settings of a caller's)
        self._reopen = reopen
        self._closed = False  # close() was called (by its owner, or for another connection)
        self._released: str | None = None  # the file as release() left it
        self.path = path
        self.read_only = read_only
        self.declared: tuple[Source, ...] = tuple(sources)
        self.rebuilt: str | None = None  # why the schema was rebuilt on opening, if it was
        self.action_scope: str | None = None  # see scope_actions
        # table -> {column: type} for insert_rows (the schema changes only in _apply)
        self._column_types: dict[str, dict[str, str]] = {}
        self._lean = False  # see give_back_freed_memory
        self._one_thread = False  # DuckDB works on one thread (a small store: _fit_threads)
        self._tables: list[str] | None = None  # the tables, while a block is reading
        # (sql, *params) -> (columns, rows) of fetch's answers, while a block is reading
        self._answers: dict[tuple[Any, ...], tuple[list[str], list[tuple[Any, ...]]]] | None = None

    # -- opening -------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, *, sources: Sequence[Source], read_only: bool = False,
             migrate: bool = True) -> Store:
        path = Path(path)
        exists = check_store_path(path)
        if read_only and not exists:
            raise ToolkitError("the store does not exist yet", path=path,
                               hint="Run `toolkit load` first")
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        empty = _empty_store_key(sources) if migrate and not read_only and not exists else ""
        copied = bool(empty) and _copy_empty_store(path, empty)
        conn = _connect(path, read_only=read_only)
        store = cls(conn, path, read_only, sources, reopen=True)
        try:
            store._fit_threads(force=True)
            catalog = store._catalog()  # one catalog read for the checks of opening
            if exists:
                store._check_is_ours(catalog)
            if migrate and not read_only:
                applied = store._migrate(catalog)
                # (kept only of a file that had no table before this open: not one another
                # process made and wrote meanwhile, between the look above and DuckDB's open)
                if empty and not copied and not catalog and empty not in _EMPTY_STORES and \
                        len(applied) == len(store.migrations()):
                    store._keep_as_empty_store(empty)
            elif read_only and (why := store._mismatch(catalog, store._recorded(catalog),
                                                       pending_ok=False)):
                raise DataError(f"the store's schema does not match this toolkit ({why})",
                                path=path, hint="Run `toolkit load`: it rebuilds the store "
                                                "from the sources")
        except BaseException:
            store.close()
            raise
        return store

    def _check_is_ours(self, names: set[str]) -> None:
        """Refuse a DuckDB file another program made (``names``: its tables, as
        :meth:`_catalog` lists them): tables, none of them our bookkeeping."""
        if names and "_migrations" not in names:
            raise DataError("is a DuckDB database of another program, not a toolkit store; "
                            "nothing was changed in it", path=self.path,
                            hint="Point --db (or TOOLKIT_DB, or `db:` in toolkit.yaml) at a "
                                 "new file")

    def close(self) -> None:
        if self._conn is not None:
            _close(self._conn)
        self._reopen = False  # closed for good: not opened again by a use
        self._closed = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: by its owner, or to let another connection to
        its file in this process open it (:func:`yield_when_idle`)."""
        return self._closed

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection; after :meth:`release`, opened again (same file, mode and
        action scope) on first use."""
        if self._conn is None:
            if not self._reopen:  # released, then closed: closed for good, as DuckDB says
                import duckdb
                raise duckdb.ConnectionException("Connection already closed!")
            conn = _connect(self.path, read_only=self.read_only)
            released, self._released = self._released, None
            if released is not None and _file_state(self.path) != released:
                # another process wrote the store while it was released mid-way through one
                # reading of it: what was read before and what would be read now are two
                # states of it (the store stays released: a later use reads the new state)
                _close(conn)
                raise BusyError("another toolkit process changed the store while this one "
                                "was using it; run the command again", path=self.path)
            self._conn = conn
            self._fit_threads(force=True)
            scope, self.action_scope = self.action_scope, None
            self.scope_actions(scope)
            if self._lean:
                _give_back_freed_memory(conn)
        return self._conn

    def release(self, *, same_state: bool = False) -> None:
        """Close the DuckDB connection now, giving back the memory DuckDB keeps from the
        queries it ran (its allocator holds it until the connection closes: tens of MB after
        the site's queries); the next use of the store opens it again. Not inside a
        transaction. No effect on a store over a connection the caller made (its settings
        could not be made again).

        DuckDB's lock on the file goes with the connection: another process may open the store
        meanwhile, and the next use reads whatever state the store then holds. ``same_state``:
        the caller is mid-way through reading one state of the store (a site's build), so its
        next use is refused (BusyError, exit 75) if another process wrote the store meanwhile;
        the file as the close left it (its identity, size and modification time, and its
        write-ahead log's) is what says so: DuckDB rewrites it only when something is
        written."""
        if self._conn is not None and self._reopen:
            _close(self._conn)
            _HOST.end_if_idle()  # its allocator keeps what the queries freed until it ends
            self._conn = None
            self._tables = None  # (as the views: read again, in whatever state it is then)
            if self._answers is not None:
                self._answers.clear()
            self._released = _file_state(self.path) if same_state else None

    def give_back_freed_memory(self) -> None:
        """From now on, on this connection and on those :meth:`release` makes again, DuckDB
        gives the memory a query freed back to the system as soon as a block of 1 MB or more
        is freed at once, instead of keeping it for the next queries until the connection
        closes (``allocator_bulk_deallocation_flush_threshold``, 512 MB by default). A site
        build's queries and downloads then leave about 25 and 30 MB less behind at 5,000
        entries (docs/guide/site.md), for a few tens of ms of CPU.

        Not for a small store (:data:`SMALL_STORE_BYTES`, as its one thread): each of its
        queries frees a hash table or a sort of a MB or two, which the next query took back
        from the system and had zeroed again; that was about a tenth of a small site's first
        build's CPU (docs/guide/site.md) to keep its peak 6-9 MB lower. No effect with a DuckDB
        that has no such setting, nor on a store over a connection the caller made (its
        database's settings are the caller's)."""
        self._lean = self._reopen and not _small(self.path)
        if self._lean and self._conn is not None:
            _give_back_freed_memory(self._conn)

    # -- DuckDB's threads ----------------------------------------------------------
    def _fit_threads(self, *, force: bool = False) -> None:
        """One DuckDB thread while the store is small (:data:`SMALL_STORE_BYTES`), DuckDB's
        own number for a bigger one: at the open (``force``: the setting is the database
        instance's, which another store may have set) and as a refresh grows the store. No
        effect on a store over a connection the caller made (its settings are the caller's)."""
        if not self._reopen or self._conn is None:
            return
        one = _small(self.path)
        if force or one != self._one_thread:
            every = _all_threads(self._conn)  # (read before the first store sets it)
            self._conn.execute(f"SET threads = {1 if one else every}")
            self._one_thread = one

    def _threads(self) -> int:
        """The threads a big statement of this store works on (its bulk inserts): DuckDB's own
        number, which :meth:`_fit_threads` sets or lifts for them; on a connection the caller
        made, its setting."""
        return _all_threads(self.conn) if self._reopen else \
            int(self.scalar("SELECT current_setting('threads')"))

    @contextlib.contextmanager
    def _every_thread(self) -> Iterator[None]:
        """DuckDB's own number of threads for a block that inserts many rows, on a small store
        too (a first load of a big source: its rows are converted and stored in parallel)."""
        if not self._one_thread:
            yield
            return
        import duckdb
        self.conn.execute(f"SET threads = {_all_threads(self.conn)}")
        self._one_thread = False
        try:
            yield
        finally:
            # (not in a transaction a failed statement aborted: the next fit sets it then)
            with contextlib.suppress(duckdb.Error):
                if self._conn is not None:
                    self._conn.execute("SET threads = 1")
                    self._one_thread = True

    # -- whose audit actions this connection reads (site_scope) --------------
    def scope_actions(self, project: str | None) -> None:
        """From now on this connection reads ``actions`` as ``project``'s actions and the
        unassigned ones (no project, or a blank one; names compared ignoring case and
        surrounding spaces); None: every project's again. A temporary view named ``actions``,
        on this connection only, stands in for the table, so every question over it (pages,
        charts, counts, downloads, the views stats_by_tier and snapshot_turns) sees the same
        rows. The site, the handoff and the API scope their connections so (``site_scope``);
        nagi-ledger's own answers (``toolkit audit``, the MCP server) never do. A scoped
        connection cannot write actions (the view refuses)."""
        if self._conn is None:  # released: the scope is made when the store opens again
            self.action_scope = project
            return
        if self._answers is not None:  # answers about other actions
            self._answers.clear()
        self.conn.execute("DROP VIEW IF EXISTS temp.actions")
        self.conn.execute("DROP TABLE IF EXISTS temp._toolkit_scope")
        self.action_scope = None
        if project is None or "actions" not in self._catalog():
            return
        self.conn.execute("CREATE TEMP TABLE _toolkit_scope (project VARCHAR)")
        self.conn.execute("INSERT INTO temp._toolkit_scope VALUES (?)", [project])
        self.conn.execute(f"CREATE TEMP VIEW actions AS SELECT * FROM {self._main('actions')} "
                          f"WHERE {_IN_SCOPE}")
        self.action_scope = project

    @contextlib.contextmanager
    def actions_scoped(self, project: str | None) -> Iterator[Store]:
        """:meth:`scope_actions` for a block; the previous scope comes back after it."""
        before = self.action_scope
        self.scope_actions(project)
        try:
            yield self
        finally:
            self.scope_actions(before)

    @contextlib.contextmanager
    def reading(self, views: Sequence[str] = ()) -> Iterator[Store]:
        """For a block that only reads the store (a site's build), what its many questions ask
        again and again is read once: the list of tables (:meth:`tables`), and each of
        ``views`` that this store has, evaluated into a temporary table of its name that
        stands in for it on this connection (as the scoped ``actions`` does), so the pages,
        counts and downloads over it read its rows rather than each joining its tables again;
        and the answers of :meth:`fetch` (up to ``_KEPT_ROWS`` rows), for the same question
        asked again with the same values (their rows are shared: not to be changed in place).
        Call it inside :meth:`actions_scoped`: a view over the actions holds the scoped ones,
        and another scope forgets the answers. A connection released and opened again in the
        block reads the catalog, the views and the answers again (the same rows). All of it
        goes after the block."""
        if self._answers is not None:  # inside another such block: already read once
            yield self
            return
        found = [v for (v,) in self.conn.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND NOT temporary "
            "AND schema_name = 'main' AND database_name = current_database() "
            "AND list_contains(?, view_name) ORDER BY view_name", [list(views)]).fetchall()]
        made: list[str] = []
        try:
            for view in found:
                self.conn.execute(f"CREATE TEMP TABLE {quote_ident(view)} AS "
                                  f"SELECT * FROM {self._main(view)}")
                made.append(view)
            self._tables = self.tables()
            self._answers = {}
            yield self
        finally:
            self._tables = self._answers = None
            if self._conn is not None:  # (released: they went with the connection)
                for view in made:
                    self._conn.execute(f"DROP TABLE IF EXISTS temp.{quote_ident(view)}")

    def actions_outside_scope(self) -> tuple[int, int]:
        """(actions, projects) the scope leaves out: (0, 0) when every action is read."""
        if self.action_scope is None:
            return 0, 0
        row = self.conn.execute(
            f"SELECT count(*), count(DISTINCT lower(trim(project))) FROM {self._main('actions')} "
            f"WHERE NOT ({_IN_SCOPE})").fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def _main(self, table: str) -> str:
        """The quoted name of this store's own ``table`` (never a temporary stand-in)."""
        row = self.conn.execute("SELECT current_database()").fetchone()
        return f'{quote_ident(str(row[0] if row else "memory"))}.main.{quote_ident(table)}'

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- migrations ----------------------------------------------------------
    def migrations(self) -> list[Migration]:
        """The store's own first migration and every source's, in name order."""
        return _migrations(self.declared)

    def _keep_as_empty_store(self, key: str) -> None:
        """Keep the bytes of this store, new and just migrated (nothing else written), for
        the next new store of the same migrations in this process (:func:`_copy_empty_store`):
        checkpointed first, so that the file alone holds its schema."""
        self.conn.execute("CHECKPOINT")
        with contextlib.suppress(OSError):
            if not store_files(self.path)[1].exists():  # (the checkpoint emptied it)
                _EMPTY_STORES[key] = self.path.read_bytes()

    def table_docs(self) -> dict[str, str]:
        """What each table and view of the sources holds (``toolkit schema``, the site)."""
        return {name: doc for src in self.declared for name, doc in src.tables.items()}

    def _catalog(self) -> set[str]:
        return {r[0] for r in self.conn.execute(_MAIN_OBJECTS).fetchall()}

    def _recorded(self, catalog: set[str] | None = None) -> dict[str, str | None] | None:
        """Applied migrations -> SHA-256 (None: no hashes recorded); None: no record at all.
        ``catalog``: the tables, when the caller just listed them (no record: no query).

        An older toolkit's record (no hash column) reads as one unnamed migration without a
        hash, even when it is empty, so that it never matches."""
        if catalog is not None and "_migrations" not in catalog:
            return None
        cols = {r[0] for r in self.conn.execute(
            f"SELECT column_name FROM duckdb_columns() WHERE {_OWN_CATALOG} "
            "AND database_name = current_database() AND schema_name = 'main' "
            "AND table_name = '_migrations'").fetchall()}
        if not cols:
            return None
        if "sha256" not in cols:
            return {"": None, **{r[0]: None for r in self.conn.execute(
                "SELECT name FROM _migrations").fetchall()}}
        return dict(self.conn.execute("SELECT name, sha256 FROM _migrations").fetchall())

    def applied_migrations(self) -> list[str]:
        return sorted(name for name in self._recorded() or {} if name)

    def schema_mismatch(self, *, pending_ok: bool = False) -> str | None:
        """Why the store's schema does not match the code's migrations, or None.

        A recorded migration whose text changed, one the code does not know (a store written
        by a newer toolkit), migrations recorded without their hashes (an older toolkit), or a
        table or view of the sources that is missing. ``pending_ok``: migrations not applied
        yet (and so their tables) are not a mismatch."""
        catalog = self._catalog()
        return self._mismatch(catalog, self._recorded(catalog), pending_ok=pending_ok)

    def _mismatch(self, catalog: set[str], recorded: dict[str, str | None] | None, *,
                  pending_ok: bool) -> str | None:
        """:meth:`schema_mismatch` of a store whose tables and record were just read."""
        if recorded is None:
            return None if pending_ok or not catalog else "no migration record"
        if "" in recorded:
            return "migrations were recorded without their hashes by an older toolkit"
        code = {name: migration_sha256(sql) for name, sql in self.migrations()}
        unknown = sorted(set(recorded) - set(code))
        if unknown:
            return f"migration {unknown[0]} is unknown here; a newer toolkit wrote it?"
        for name, sha in sorted(recorded.items()):
            if sha != code[name]:
                return f"migration {name} changed since it was applied"
        if pending_ok and set(code) - set(recorded):
            return None
        missing = sorted({*BOOKKEEPING, *self.table_docs()} - catalog)
        if missing:
            return f"table {missing[0]} is missing"
        return None

    def migrate(self) -> list[str]:
        """Apply pending migrations in one transaction with their records; rebuild the whole
        schema (one transaction too) when it does not match the code. Returns the names of the
        migrations applied."""
        return self._migrate(self._catalog())

    def _migrate(self, catalog: set[str]) -> list[str]:
        """:meth:`migrate`, the store's tables just read (``catalog``)."""
        recorded = self._recorded(catalog)
        why = self._mismatch(catalog, recorded, pending_ok=True)
        if why is None:
            pending = [(n, sql) for n, sql in self.migrations() if n not in (recorded or {})]
            if pending:  # (with none pending, the check above was the whole check)
                self._apply(pending, create_record="_migrations" not in catalog)
                why = self.schema_mismatch()
            if why is None:
                return [n for n, _sql in pending]
        self._rebuild(why)
        return [n for n, _sql in self.migrations()]

    def _apply(self, migrations: Sequence[Migration], *, create_record: bool,
               drop: Sequence[tuple[str, str]] = ()) -> None:
        self._column_types.clear()
        self.conn.execute("BEGIN")
        try:
            for kind, name in drop:
                self.conn.execute(f'DROP {kind} IF EXISTS "{name}" CASCADE')
            if create_record:
                self.conn.execute("CREATE TABLE _migrations (name VARCHAR PRIMARY KEY, "
                                  "applied_at TIMESTAMP, sha256 VARCHAR)")
            for _name, sql in migrations:
                self.conn.execute(sql)
            if migrations:  # their records in one statement, not one each
                self.conn.execute(
                    "INSERT INTO _migrations SELECT unnest($names), now(), unnest($sums)",
                    {"names": [name for name, _sql in migrations],
                     "sums": [migration_sha256(sql) for _name, sql in migrations]})
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def _rebuild(self, why: str) -> None:
        """Drop every table and view and run every migration, in one transaction: the store
        is either the old one, untouched, or a new empty one the next refresh fills."""
        objects = self.conn.execute(
            "SELECT table_type, table_name FROM information_schema.tables WHERE "
            "table_schema = 'main' AND table_catalog = current_database() "
            "ORDER BY table_type DESC, table_name").fetchall()  # views first
        drop = [("VIEW" if kind == "VIEW" else "TABLE", name) for kind, name in objects]
        self._apply(self.migrations(), create_record=True, drop=drop)
        self.rebuilt = why
        # one line, whatever a damaged or hostile store records as a migration name
        print(visible(f"note: {self.path}: the store's schema does not match this toolkit "
                      f"({why}); rebuilt, it is loaded again from the sources", single_line=True),
              file=sys.stderr)

    # -- generic access (for toolkit.queries) ----------------------------------
    def fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
              ) -> tuple[list[str], list[tuple[Any, ...]]]:
        key: tuple[Any, ...] | None = None
        if self._answers is not None and not isinstance(params, dict):
            # in a block that only reads (reading), the same question has the same answer:
            # the site's pages and its handoff ask some of theirs twice or three times
            key = (sql, *(params or ()))
            try:
                kept = self._answers.get(key)
            except TypeError:  # a list among the values: not kept
                key = kept = None
            if kept is not None:
                return list(kept[0]), list(kept[1])
        cur = self.conn.execute(sql, params or [])
        cols = [d[0] for d in cur.description] if cur.description else []
        rows = cur.fetchall()
        if key is not None and self._answers is not None and len(rows) <= _KEPT_ROWS:
            self._answers[key] = (cols, rows)
            return list(cols), list(rows)
        return cols, rows

    def fetch_dicts(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
                    ) -> list[dict[str, Any]]:
        cols, rows = self.fetch(sql, params)
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        rows = self.conn.execute(sql, params or []).fetchall()  # drain: DuckDB 2 keeps
        return rows[0][0] if rows else None  # a half-read result open on the connection

    def copy_to(self, table: str, dest: Path, fmt: str, *, ordered: bool = False,
                spreadsheet_safe: bool = False,
                columns: Sequence[tuple[str, str]] | None = None) -> None:
        """Write a table or view to a CSV or JSON file (site downloads, exports).

        ``ordered``: rows in a total order (the source's where it has one, ``SOURCE_ORDER``,
        then by every column), so the same content always gives the same bytes (views such as
        task_status have no order of their own).
        ``spreadsheet_safe`` (CSV): a text cell starting with ``=``, ``+``, ``-``, ``@``, a tab
        or a carriage return gets a leading ``'``, so a spreadsheet shows it instead of
        evaluating it as a formula (OWASP "CSV injection"; FAULTS I6). ``columns``: the
        table's (name, type) columns as :meth:`columns` gives them, when the caller has them
        (a site build writes every download with the columns of one query)."""
        self.copy_to_files(table, [(dest, fmt)], ordered=ordered,
                           spreadsheet_safe=spreadsheet_safe, columns=columns)

    def copy_to_files(self, table: str, outs: Sequence[tuple[Path, str]], *,
                      ordered: bool = False, spreadsheet_safe: bool = False,
                      columns: Sequence[tuple[str, str]] | None = None,
                      rows: int | None = None) -> None:
        """:meth:`copy_to` for several (dest, fmt) files of one table (a site download's CSV
        and JSON). Ordered rows are sorted once: a table's sort is most of what writing it
        costs, and a sorted temporary table is read back in its order (DuckDB keeps insertion
        order), so each file has the bytes it would have alone. ``rows``: how many rows the
        table has, when the caller counted them in the same state of the store (a site's
        build counts every table for its data page): one row or none is in its only order,
        copied with no sort nor temporary table (half of a small project's tables), and none
        as its header alone; up to :data:`FEW_ROWS` are sorted for each file (no temporary
        table)."""
        if table.startswith("_"):  # as tables() lists them
            columns = []
        elif columns is None:
            columns = self._columns(table)
        if not columns:
            raise ToolkitError(f"no table {table!r}")
        order = ""
        if ordered and (rows is None or rows > 1):
            # the source's order first (a slop ledger's entries as the file holds them),
            # then every column: the same content always gives the same bytes
            first = [c for c in SOURCE_ORDER.get(table, ()) if c in {n for n, _ in columns}]
            order = " ORDER BY " + ", ".join(quote_ident(c) for c in
                                             [*first, *(n for n, _ in columns)])
        source = quote_ident(table)
        # a temporary table costs two statements (about a millisecond); sorting a few rows
        # again for the second file costs less
        sorted_once = bool(order) and len(outs) > 1 and (rows is None or rows > FEW_ROWS)
        if sorted_once:
            source = "_toolkit_sorted_copy"
            self.conn.execute(f"CREATE OR REPLACE TEMP TABLE {source} AS "
                              f"SELECT * FROM {quote_ident(table)}{order}")
        try:
            for dest, fmt in outs:
                opts = "FORMAT CSV, HEADER" if fmt == "csv" else "FORMAT JSON, ARRAY true"
                # no rows: the columns' names are the whole file, and their values' forms
                # need not be planned
                select = ", ".join(
                    _download_column(c, t, fmt, fmt == "csv" and spreadsheet_safe)
                    for c, t in columns) if columns and rows != 0 else "*"
                inner = f"SELECT * FROM {source}{'' if sorted_once else order}"
                self.conn.execute(
                    f"COPY (SELECT {select} FROM ({inner})) TO {quote_text(str(dest))} ({opts})")
        finally:
            if sorted_once:
                self.conn.execute(f"DROP TABLE IF EXISTS {source}")

    def columns(self, tables: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """(name, type) of the columns of each of ``tables`` (tables or views), in order, in
        one query; a name that is no table has none."""
        out: dict[str, list[tuple[str, str]]] = {t: [] for t in tables}
        if not tables:
            return out
        for t, c, d in self.conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_catalog = current_database() AND table_schema = 'main' "
                "AND list_contains(?, table_name) ORDER BY table_name, ordinal_position",
                [list(tables)]).fetchall():
            out[t].append((c, d))
        return out

    def _columns(self, table: str) -> list[tuple[str, str]]:
        """(name, type) of a table's (or view's) columns, in order."""
        return self.columns([table])[table]

    def copy_database(self, dest: Path) -> None:
        """A copy of this store at ``dest``, every table and view, for a reader that must not
        share this writer's file (the site's analyses run in another process)."""
        import duckdb
        try:
            row = self.conn.execute("SELECT current_database()").fetchone()
            db = quote_ident(str(row[0] if row else "memory"))
            self.conn.execute(f"ATTACH {quote_text(str(dest))} AS _toolkit_copy")
            try:
                self.conn.execute(f"COPY FROM DATABASE {db} TO _toolkit_copy")
            finally:
                self.conn.execute("DETACH _toolkit_copy")
        except duckdb.Error as exc:
            raise ToolkitError(f"cannot copy the store: {_first_line(exc)}", path=dest) from None

    def redacted_copy(self, dest: Path, redact: Callable[[str], str]) -> Store:
        """A copy of the whole store at ``dest`` (replaced) with every text value, list item and
        JSON document passed through ``redact``; views are re-created over the copy. The
        redacted site is built from it, so every page, slug, download and search entry is
        made from redacted text. Returns the copy, open; the caller closes and deletes it."""
        import duckdb
        dest = Path(dest)
        for p in store_files(dest):
            p.unlink(missing_ok=True)
        cached = functools.lru_cache(maxsize=65536)(redact)
        text = duckdb.sqltype("VARCHAR")
        self.conn.create_function("_toolkit_redact", cached, [text], text, side_effects=False)
        self.conn.execute(f"ATTACH {quote_text(str(dest))} AS _toolkit_redacted")
        try:
            kinds = dict(self.conn.execute(
                "SELECT table_name, table_type FROM information_schema.tables "
                "WHERE table_catalog = current_database() AND table_schema = 'main'").fetchall())
            for table, kind in sorted(kinds.items()):
                if kind != "BASE TABLE":
                    continue
                exprs = ", ".join(_redacted(c, t) for c, t in self._columns(table))
                self.conn.execute(f"CREATE TABLE _toolkit_redacted.main.{quote_ident(table)} AS "
                                  f"SELECT {exprs} FROM {quote_ident(table)}")
            views = self.conn.execute(
                "SELECT sql FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' "
                "AND database_name = current_database() ORDER BY view_name").fetchall()
        finally:
            self.conn.execute("DETACH _toolkit_redacted")
            self.conn.remove_function("_toolkit_redact")
        copy = Store(_connect(dest, read_only=False), dest, False, self.declared, reopen=True)
        pending = [sql for (sql,) in views]
        while pending:  # a view may use another view: create in whatever order works
            failed = []
            for sql in pending:
                try:
                    copy.conn.execute(sql)
                except duckdb.CatalogException:
                    failed.append(sql)
            if len(failed) == len(pending):
                copy.conn.execute(failed[0])  # raises the real error
            pending = failed
        return copy

    def table_digests(self, tables: Sequence[str]) -> dict[str, tuple[int, str]]:
        """(rows, digest) of each table's content, in one query: the same rows in any order
        give the same digest (a sum of DuckDB's row hashes), so an exporter can tell an
        unchanged table without writing it."""
        if not tables:
            return {}
        sql = " UNION ALL ".join(
            f"SELECT ? AS t, count(*), coalesce(sum(hash(r)), 0) FROM {quote_ident(table)} AS r"
            for table in tables)
        rows = self.conn.execute(sql, list(tables)).fetchall()
        return {t: (int(n), str(d)) for t, n, d in rows}

    def write_parquet(self, table: str, dest: Path, columns: Sequence[tuple[str, str]]) -> None:
        """Write a table to one Parquet file, its columns as (name in the store, name in the
        file), with their types (TIMESTAMP, INTEGER, lists as Parquet LIST)."""
        import duckdb
        select = ", ".join(f"{quote_ident(c)} AS {quote_ident(as_)}" for c, as_ in columns)
        try:
            self.conn.execute(f"COPY (SELECT {select} FROM {quote_ident(table)}) "
                              f"TO {quote_text(str(dest))} "
                              "(FORMAT PARQUET)").fetchall()
        except duckdb.Error as exc:
            raise ToolkitError(f"cannot write {table} as Parquet: {_first_line(exc)}",
                               path=dest) from None

    def tables(self) -> list[str]:
        """The names of the store's tables and views, but its bookkeeping (``_``...)."""
        if self._tables is not None:  # read once for the block (reading)
            return list(self._tables)
        rows = self.conn.execute(
            f"SELECT name FROM ({_MAIN_OBJECTS}) WHERE name {_NOT_BOOKKEEPING} "
            "ORDER BY name").fetchall()
        return [r[0] for r in rows]

    def schema(self) -> list[tuple[str, str, str, str]]:
        """(table, kind, column, type) for every user-facing table and view."""
        rows = self.conn.execute(
            "SELECT c.table_name, t.table_type, c.column_name, c.data_type "
            "FROM information_schema.columns c JOIN information_schema.tables t "
            "USING (table_catalog, table_schema, table_name) WHERE c.table_schema = 'main' "
            "AND c.table_catalog = current_database() "
            f"AND c.table_name {_NOT_BOOKKEEPING} "
            "ORDER BY c.table_name, c.ordinal_position").fetchall()
        return [(t, "view" if k == "VIEW" else "table", c, d) for t, k, c, d in rows]

    def counts(self, only: Sequence[str] | None = None) -> dict[str, int]:
        """Rows per table and view (those of ``only`` that exist, if given), in name order
        (one query for all of them)."""
        tables = self.tables()
        if only is not None:
            wanted = set(only)
            tables = [t for t in tables if t in wanted]
        if not tables:
            return {}
        quoted = [quote_ident(t) for t in tables]
        sql = " UNION ALL ".join(f"SELECT {i}, count(*) FROM {q}" for i, q in enumerate(quoted))
        found = dict(self.conn.execute(sql).fetchall())
        return {t: found[i] for i, t in enumerate(tables)}

    def sources(self) -> list[dict[str, Any]]:
        return self.fetch_dicts("SELECT * FROM _sources ORDER BY source")

    def table_versions(self) -> dict[str, str]:
        """:func:`table_versions` of this store's base tables, with :func:`view_versions` of
        its views."""
        base = [t for (t,) in self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_catalog = current_database() AND table_type = 'BASE TABLE'").fetchall()]
        versions = table_versions(self.declared, self.sources(), base)
        views = dict(self.conn.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary "
            "AND schema_name = 'main' AND database_name = current_database()").fetchall())
        return {**versions, **view_versions(views, versions, base)}

    def problems(self, source: str | None = None) -> list[Problem]:
        """The problems recorded of ``source``, or of all: there, one that two sources met
        reading one path is listed once (the first source's)."""
        recorded = self._recorded_problems(source)
        if source:
            return recorded
        said: set[tuple[Any, ...]] = set()
        problems = []
        for p in recorded:  # a problem two sources met reading one path is said once
            key = (p.path, p.line, p.message)
            if key not in said:
                said.add(key)
                problems.append(p)
        return problems

    def _recorded_problems(self, source: str | None = None) -> list[Problem]:
        """Each source's recorded problems as it recorded them (what a refresh reads to know
        which sources have problems recorded): each source's in the order its reader noted
        them (as the reader's own command prints them: the ledger's files in Smith's order, a
        one-line slop ledger's entry 2 before entry 10), never re-sorted by path or text."""
        sql = "SELECT source, path, line, message FROM _problems"
        params: list[Any] = []
        if source:
            sql += " WHERE source = ?"
            params.append(source)
        return [Problem(*row) for row in
                self.conn.execute(sql + " ORDER BY source, rowid", params).fetchall()]

    # -- writing rows ------------------------------------------------------------
    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
                    ) -> int:
        """Bulk-insert Python rows via Arrow, in batches of about :data:`INSERT_BATCH_BYTES`
        (sized from the first batch): a batch's Arrow copy of the values is all that exists
        besides the rows (a copy of a big ledger's whole text at once added half again to the
        load's peak memory), and small rows still go a hundred thousand per statement.
        :data:`FEW_ROWS` rows or fewer go as lists, one per column, with the same types."""
        if not rows:
            return 0
        target_types = self._column_types.get(table)
        if target_types is None:
            target_types = self._column_types[table] = self._types_of(table)
        as_json = [target_types.get(c) == "JSON" for c in columns]
        cols = ", ".join(quote_ident(c) for c in columns)
        sel = ", ".join(_cast(c, target_types.get(c, "VARCHAR")) for c in columns)

        def values(i: int, part: Sequence[Sequence[Any]]) -> list[Any]:
            got = [r[i] for r in part]
            if as_json[i]:
                got = [None if v is None else json_text(v) for v in got]
            return got

        if len(rows) <= FEW_ROWS:
            kinds = [_list_type(target_types.get(c, "VARCHAR")) for c in columns]
            lists = [values(i, rows) for i in range(len(columns))]
            # only values DuckDB binds as Arrow converts them; any other (a float for an
            # integer, a date for text...) goes through Arrow: stored or refused as in a
            # large insert, never converted another way
            if all(_binds_as_arrow(kind, got) for kind, got in zip(kinds, lists, strict=True)):
                unnest = ", ".join(f"unnest(?::{kind}[]) AS {quote_ident(c)}"
                                   for kind, c in zip(kinds, columns, strict=True))
                import duckdb
                try:
                    self.conn.execute(f"INSERT INTO {quote_ident(table)} ({cols}) SELECT "
                                      f"{sel} FROM (SELECT {unnest})", lists)
                    return len(rows)
                except duckdb.InvalidInputException:
                    pass  # a value DuckDB cannot take (a lone surrogate): Arrow says which
        import pyarrow as pa

        types = [_arrow_type(target_types.get(c, "VARCHAR")) for c in columns]
        # The system allocator: a batch's memory goes back when the batch goes (Arrow's
        # default pool keeps freed pages for reuse, and they stay in the load's peak).
        pool = pa.system_memory_pool()
        at, size = 0, 1024
        with self._every_thread():
            while at < len(rows):
                part = rows[at:at + size]
                at += len(part)
                arrays = {c: pa.array(values(i, part), type=types[i], memory_pool=pool)
                          for i, c in enumerate(columns)}
                batch = pa.table(arrays)
                self.conn.execute(f"INSERT INTO {quote_ident(table)} ({cols}) "
                                  f"SELECT {sel} FROM batch")
                size = max(1024, INSERT_BATCH_BYTES * len(part) // max(batch.nbytes, 1))
                del batch, arrays
        return len(rows)

    def _types_of(self, table: str) -> dict[str, str]:
        """{column: type} of ``table`` (of every table or view of that name, as DuckDB lists
        them, DuckDB's own catalog views aside). The first call reads every table's columns in
        one query (a load inserts into a dozen tables, and a catalog query costs about what it
        costs for one table); a table made after it is read on its own."""
        # duckdb_columns(): the rows of information_schema.columns, at half the cost; the
        # system catalog left out by name first (``NOT internal`` alone lists it to drop it:
        # about 9 ms on a connection's first catalog query, against 1 ms)
        if not self._column_types:
            every: dict[str, dict[str, str]] = {}
            for name, column, kind in self.conn.execute(
                    "SELECT table_name, column_name, data_type FROM duckdb_columns() "
                    f"WHERE {_OWN_CATALOG}").fetchall():
                every.setdefault(name, {})[column] = kind
            self._column_types.update(every)
            if table in every:
                return every[table]
        return dict(self.conn.execute(
            f"SELECT column_name, data_type FROM duckdb_columns() WHERE {_OWN_CATALOG} "
            "AND table_name = ?", [table]).fetchall())

    def insert_stream(self, table: str, reader: Any, exprs: Sequence[str]) -> None:
        """Insert from an Arrow RecordBatchReader, one expression per target column (streamed:
        batches are consumed as they are read, never held whole)."""
        src = reader  # noqa: F841 - referenced by name in SQL
        with self._every_thread():
            self.conn.execute(f"INSERT INTO {quote_ident(table)} SELECT {', '.join(exprs)} "
                              "FROM src").fetchall()

    def replace_problems(self, source: str, problems: Sequence[Problem], *,
                         recorded: bool = True) -> None:
        """Record ``problems`` as ``source``'s, in place of those recorded; ``recorded``
        False: the caller knows none are (a refresh read them all at its start), so that a
        source without warnings, before or now, costs no statement."""
        if recorded:
            self.conn.execute("DELETE FROM _problems WHERE source = ?", [source])
        rows = [(source, p.path, p.line, p.message) for p in problems]
        if len(rows) > FEW_PROBLEMS:
            self.insert_rows("_problems", ("source", "path", "line", "message"), rows)
        elif rows:  # the usual handful: one statement, and no start of Arrow for it
            self.conn.execute("INSERT INTO _problems (source, path, line, message) VALUES "
                              + ", ".join(["(?, ?, ?, ?)"] * len(rows)),
                              [v for row in rows for v in row])

    def source_state(self, source: str) -> dict[str, Any] | None:
        rows = self.fetch_dicts("SELECT * FROM _sources WHERE source = ?", [source])
        if not rows:
            return None
        row = rows[0]
        row["state"] = json.loads(row["state"]) if row.get("state") else {}
        return row

    def record_source(self, result: SourceResult, fingerprint: str | None,
                      loaded_at: Any = None) -> None:
        """Record one source's load; ``loaded_at``: when its rows were read (now, unless a
        failed load keeps the time of the last load that read them)."""
        self.conn.execute("DELETE FROM _sources WHERE source = ?", [result.source])
        self.conn.execute(
            "INSERT INTO _sources VALUES (?, ?, ?, ?, ?, ?, coalesce(?, now()), ?)",
            [result.source, result.location, result.found, result.note, fingerprint,
             result.rows, loaded_at, json.dumps(result.state)])

    def stale_sources(self) -> list[StaleSource]:
        """The sources present but unreadable at their last load, each with why and what the
        store still holds of it (the rows of the last load that read it, and when): what every
        answer from the store must say (``toolkit status``, the handoff, the site, the CLI's
        warnings), from this one question."""
        out = []
        by_source = {s.name: s for s in self.declared}
        for row in self.sources():
            note = str(row.get("note") or "")
            if not note.startswith(SOURCE_ERROR):
                continue
            found = self.problems(row["source"])
            problem = found[0] if found else Problem(row["source"], str(row["location"]),
                                                     None, note[len(SOURCE_ERROR):])
            source = by_source.get(row["source"])
            rows = sum(self.counts(list(source.tables) if source else []).values())
            out.append(StaleSource(row["source"], problem, row.get("loaded_at"), rows))
        return out

    # -- refresh -------------------------------------------------------------
    def refresh(self, cfg: Config, *, full: bool = False, progress: Progress | None = None,
                only: Sequence[str] | None = None) -> LoadReport:
        """Bring every source up to date; sources whose fingerprint is unchanged are skipped.

        ``progress(label, done, total)`` is called before each source and once at the end.
        """
        if self.read_only:
            raise ToolkitError("the store is open read-only; cannot refresh")
        todo = [src for src in self.declared if not only or src.name in only]
        # what each source recorded, read once: a source's load changes its own records only
        states = {row["source"]: row for row in self.sources()}
        problems: dict[str, list[Problem]] = {}
        for problem in self._recorded_problems():
            problems.setdefault(problem.source, []).append(problem)
        results = []
        with asking_once():  # the sources ask git about the same repositories
            for i, source in enumerate(todo):
                if progress is not None:
                    progress(f"Loading {source.name}", i, len(todo))
                started = time.perf_counter()
                self._fit_threads()  # (an earlier source may have made it big)
                result = self._run(source, cfg, full=full, progress=progress,
                                   state=states.get(source.name),
                                   problems=problems.get(source.name, []))
                result.seconds = time.perf_counter() - started
                results.append(result)
        if progress is not None:
            progress("Loaded", len(todo), len(todo))
        self._fit_threads()
        self.conn.execute("CHECKPOINT")
        return LoadReport(results)

    def _run(self, source: Source, cfg: Config, *, full: bool, progress: Progress | None,
             state: dict[str, Any] | None, problems: list[Problem]) -> SourceResult:
        """Load one source unless its fingerprint is unchanged (``state``: its row of
        ``_sources``; ``problems``: its recorded ones); a source present but unreadable is
        recorded with its error (raised by the caller after the others)."""
        from toolkit.parsecache import package_digest

        had = bool(problems)  # whether the source has warnings recorded
        try:
            location, fp = source.fingerprint(cfg)
        except (ToolkitError, OSError) as exc:  # a folder it may not enter or list
            error = one_error(exc)
            where = str(state.get("location") or "") if state else ""
            return self._failed(source, where or error.path or source.name, error, state, had)
        # the recorded fingerprint names the toolkit's code too: a load made by other code
        # (an upgrade, an edit) is made again, in full (its rows may be read another way now)
        code = package_digest().hex()[:16]
        recorded = str(state.get("fingerprint") or "") if state else ""
        # ... and where it was read: a source missing at its old place and at a new one
        # (a changed setting) has the same fingerprint, but its location is the new one
        if not full and state and recorded == f"{fp}@{code}" and \
                str(state.get("location") or "") == location:
            return SourceResult(source.name, location, bool(state.get("found")),
                                state.get("note") or "", int(state.get("rows") or 0),
                                skipped=True, problems=problems)
        if recorded and not recorded.endswith(f"@{code}"):
            full = True
        fp = f"{fp}@{code}"
        try:
            try:
                result = self._load_in_transaction(source, cfg, full, progress, fp, had)
            except FastPathFailed:
                # A failed statement aborts the whole DuckDB transaction: start again, careful.
                with carefully():
                    result = self._load_in_transaction(source, cfg, full, progress, fp, had)
        except (ToolkitError, OSError) as exc:
            return self._failed(source, location, one_error(exc), state, had)
        return result

    def _failed(self, source: Source, location: str, exc: ToolkitError,
                state: dict[str, Any] | None, had: bool) -> SourceResult:
        """Record that ``source`` is present but could not be read (``exc``): its tables keep
        the rows of the last load that read it, and every answer from the store says so
        (``had``: whether it has problems recorded)."""
        result = SourceResult(source.name, location, True, f"{SOURCE_ERROR}{exc}",
                              problems=[Problem(source.name, exc.path or location,
                                                exc.line, exc.detail)], error=exc)
        # the tables keep the rows of the last load that read the source: so does the
        # time they were read (a failed load before it kept its own)
        last_good = state.get("loaded_at") if state and (
            state.get("fingerprint")
            or str(state.get("note") or "").startswith(SOURCE_ERROR)) else None
        with self.transaction():
            self.replace_problems(source.name, result.problems, recorded=had)
            self.record_source(result, None, last_good)
        return result

    def _load_in_transaction(self, source: Source, cfg: Config, full: bool,
                             progress: Progress | None, fp: str, had: bool) -> SourceResult:
        """Load ``source`` in one transaction (``had``: whether it has problems recorded),
        within a memory limit when it asks for one."""
        if not source.bounded_memory:
            return self._load_once(source, cfg, full, progress, fp, had)
        import duckdb

        # DuckDB keeps a little of what the load writes in memory (the rest goes to its
        # temporary files beside the store) instead of holding a big source's rows up to
        # its default limit, most of the machine's memory.
        limit = max(LOAD_MEMORY_MIN_MB, LOAD_MEMORY_MB_PER_THREAD * self._threads())
        self.conn.execute(f"SET memory_limit = '{limit}MB'")
        try:
            try:
                result = self._load_once(source, cfg, full, progress, fp, had)
            except (duckdb.OutOfMemoryException, duckdb.TransactionException) as exc:
                # one value bigger than the limit lets DuckDB hold (a single entry of 15 MB,
                # within the file size limit): the limit saves memory, it must never fail a
                # load. The transaction was rolled back; it is loaded again below, without
                # the limit (staged batches are cleared by that load).
                if not _out_of_memory(exc):
                    raise
            else:
                # what it wrote checkpointed within the limit too: else the next source's
                # commit checkpoints it without one (at 50,000 ledger entries, 14 MB more);
                # a few rows wait for the refresh's checkpoint (LOAD_CHECKPOINT_BYTES)
                if _size(store_files(self.path)[1]) >= LOAD_CHECKPOINT_BYTES:
                    with contextlib.suppress(duckdb.OutOfMemoryException):  # (that commit)
                        self.conn.execute("CHECKPOINT")
                return result
        finally:
            self.conn.execute("RESET memory_limit")
        return self._load_once(source, cfg, full, progress, fp, had)

    def _load_once(self, source: Source, cfg: Config, full: bool, progress: Progress | None,
                   fp: str, had: bool) -> SourceResult:
        with self.transaction():
            result = source.load(self, cfg, full, progress)
            self.replace_problems(source.name, result.problems, recorded=had)
            self.record_source(result, fp)
        return result

    def transaction(self) -> _Transaction:
        return _Transaction(self.conn)

    def commit_staged(self) -> None:
        """Commit what a load wrote so far and go on in a new transaction. Only for a loader
        whose writes so far are staged: invisible to every reader until its last transaction
        (the one that records its state) makes them count, and cleared by its next load when
        that last transaction never came (the history's entries of contents it has not yet
        recorded). DuckDB then holds a batch of rows in memory, not a whole load's until one
        commit; a crash leaves the source's recorded state as it was."""
        self.conn.execute("COMMIT")
        from toolkit.safewrite import pause

        pause("after_staged_commit")
        self.conn.execute("BEGIN")


def _out_of_memory(exc: Exception) -> bool:
    """Whether a DuckDB error is its memory limit reached (also when it ends a commit: a
    ``TransactionException`` "Failed to commit: failed to pin block ...")."""
    import duckdb

    text = str(exc)
    return isinstance(exc, duckdb.OutOfMemoryException) or (
        "failed to pin block" in text or "could not allocate block" in text)


class _Transaction:
    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if not exc_type:
            self.conn.execute("COMMIT")
            return
        # what went wrong is the error to show: a rollback that cannot be made (no transaction
        # open, e.g. Ctrl-C between a staged commit and the next BEGIN) must not replace it
        import duckdb

        with contextlib.suppress(duckdb.Error):
            self.conn.execute("ROLLBACK")


def _list_type(duck_type: str) -> str:
    """The SQL type a column's values are bound as (:meth:`Store.insert_rows`; as Arrow
    values, :func:`_arrow_type`, for many rows)."""
    t = duck_type.upper()
    if t.endswith("[]"):
        return "VARCHAR[]" if t.startswith("VARCHAR") else "BIGINT[]"
    if t in ("INTEGER", "BIGINT", "SMALLINT"):
        return "BIGINT"
    if t == "BOOLEAN":
        return "BOOLEAN"
    if t in ("DOUBLE", "FLOAT"):
        return "DOUBLE"
    return "VARCHAR"  # VARCHAR, JSON, DATE, TIMESTAMP*: cast in SQL (TRY_CAST)


def _plain_int(value: Any) -> bool:
    return type(value) is int and -(1 << 63) <= value < (1 << 63)


_PLAIN: dict[str, Callable[[Any], bool]] = {
    "VARCHAR": lambda v: isinstance(v, str),
    "BIGINT": _plain_int,
    "DOUBLE": lambda v: type(v) is float or (_plain_int(v) and abs(v) <= 1 << 53),
    "BOOLEAN": lambda v: type(v) is bool,
    "VARCHAR[]": lambda v: type(v) is list and all(x is None or isinstance(x, str) for x in v),
    "BIGINT[]": lambda v: type(v) is list and all(x is None or _plain_int(x) for x in v),
}


def _binds_as_arrow(kind: str, values: list[Any]) -> bool:
    """Whether every value of a column bound as ``kind`` (:func:`_list_type`) is one DuckDB
    stores exactly as the Arrow path does (its Python type is the column's own)."""
    plain = _PLAIN[kind]
    return all(v is None or plain(v) for v in values)


def _arrow_type(duck_type: str) -> Any:
    """The Arrow type a column's values are converted to: :func:`_list_type`'s."""
    import pyarrow as pa

    return {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(),
            "BOOLEAN": pa.bool_(), "VARCHAR[]": pa.list_(pa.string()),
            "BIGINT[]": pa.list_(pa.int64())}[_list_type(duck_type)]


# a formula's first character: = + - @, tab or carriage return (one RE2 class: DuckDB plans
# a regular expression per column faster than a list literal; the same cells match)
_FORMULA_START = r"'^[=+\-@\t\r]'"


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (a ``"`` in it doubled), for DuckDB and SQLite."""
    return '"' + name.replace('"', '""') + '"'


def quote_text(text: str) -> str:
    """``text`` as a quoted SQL string literal (a ``'`` in it doubled), for DuckDB and SQLite."""
    return "'" + text.replace("'", "''") + "'"


# The most rows of an answer Store.fetch keeps for a block that only reads (Store.reading):
# the questions asked again are small ones (the goal, the tasks, the week's actions); a large
# answer, kept, would stay in memory beside the pages made of it.
_KEPT_ROWS = 1_000

# The columns that give a table's rows in their source's order, where its first column does
# not (Store.copy_to with ordered=True): the slop ledger's entries as the file holds them.
SOURCE_ORDER: dict[str, tuple[str, ...]] = {"slop_entries": ("position",)}


def _download_column(column: str, duck_type: str, fmt: str, spreadsheet_safe: bool) -> str:
    """A SELECT expression for one column of a CSV or JSON file the store writes, holding
    the value ``toolkit query --format csv|json`` prints: a timestamp in Python's ISO 8601
    form (``2026-10-17 04:17:26.380000+00:00``: microseconds when there are any, the offset
    of UTC, the session's zone), not DuckDB's (``04:17:26.38+00``); a JSON column as its
    document's text (as the query gives it), not nested in the file; in a CSV, a list or
    struct as its JSON text (``toolkit.cli._common.csv_cell``), not DuckDB's ``[a, b]``; text
    made spreadsheet-safe when asked (CSV; :func:`_spreadsheet_safe`)."""
    t = duck_type.upper()
    if fmt == "csv" and (t.endswith("]") or t.startswith(("STRUCT", "MAP"))):
        name = quote_ident(column)
        return f"CAST(to_json({name}) AS VARCHAR) AS {name}"
    if t == "JSON":
        name = quote_ident(column)
        if spreadsheet_safe:
            return _spreadsheet_safe(column, duck_type)
        return f"CAST({name} AS VARCHAR) AS {name}"
    if t in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP"):
        name = quote_ident(column)
        zone = " || '+00:00'" if t == "TIMESTAMP WITH TIME ZONE" else ""
        return (f"CASE WHEN microsecond({name}) % 1000000 = 0 "
                f"THEN strftime({name}, '%Y-%m-%d %H:%M:%S') "
                f"ELSE strftime({name}, '%Y-%m-%d %H:%M:%S.%f') END{zone} AS {name}")
    return _spreadsheet_safe(column, duck_type) if spreadsheet_safe else quote_ident(column)


def _spreadsheet_safe(column: str, duck_type: str) -> str:
    """A SELECT expression for one CSV column: text starting like a formula gets a ``'``."""
    name = quote_ident(column)
    t = duck_type.upper()
    if t not in ("VARCHAR", "JSON"):
        return name
    # one call that puts a ' before what the anchored class matched (\0), not a CASE naming
    # the cell three times: the same cells, planned in half the time (a small site's 20
    # downloads cost mostly the planning of their statements); no cast of text to text
    text = f"CAST({name} AS VARCHAR)" if t == "JSON" else name
    return f"regexp_replace({text}, {_FORMULA_START}, '''\\0') AS {name}"


def _redacted(column: str, duck_type: str) -> str:
    """A SELECT expression for one column of the redacted copy (same name and type)."""
    name = quote_ident(column)
    t = duck_type.upper()
    if t == "VARCHAR":
        return f"_toolkit_redact({name}) AS {name}"
    if t == "VARCHAR[]":
        return f"list_transform({name}, lambda x: _toolkit_redact(x)) AS {name}"
    if t == "JSON":
        return f"TRY_CAST(_toolkit_redact(CAST({name} AS VARCHAR)) AS JSON) AS {name}"
    if any(k in t for k in ("VARCHAR", "STRUCT", "MAP", "UNION")):
        raise ToolkitError(f"cannot redact a column of type {duck_type} ({column}); "
                           "toolkit.store must learn it (a bug)")
    return name


def _cast(column: str, duck_type: str) -> str:
    t = duck_type.upper()
    if t == "TIMESTAMP":  # UTC: a text with an offset is moved to UTC, not stripped of it
        from toolkit.clock import utc_timestamp_sql
        return utc_timestamp_sql(quote_ident(column))
    if t in ("DATE", "TIMESTAMP WITH TIME ZONE", "JSON"):
        return f"TRY_CAST({quote_ident(column)} AS {duck_type})"
    return quote_ident(column)


# Every connection the toolkit opens: DuckDB never downloads nor loads an extension by itself
# (a store path that is a SQLite file would otherwise fetch ``sqlite_scanner``).
_NO_EXTENSIONS: dict[str, Any] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}

# The first bytes of files that are not a store, as named in the error.
_OTHER_FORMATS: tuple[tuple[bytes, str], ...] = (
    (b"SQLite format 3\x00", "a SQLite database"),
    (b"PAR1", "a Parquet file"),
    (b"PK\x03\x04", "a ZIP archive (or a spreadsheet)"),
    (b"\x1f\x8b", "a gzip file"),
)


def check_store_path(path: Path) -> bool:
    """Whether a DuckDB store is at ``path`` (False: nothing there yet, it may be created).

    Anything else there is refused before DuckDB sees it (DuckDB would open a CSV or JSON
    file as an in-memory database, and try to download an extension for a SQLite file): a
    folder, a FIFO or a device (never opened, so nothing hangs), or a file without DuckDB's
    header. Only a file with that header is "one of our stores", so only a damaged one of
    those gets the hint to delete it (``_connect``).
    """
    import stat

    from toolkit.textio import lone_surrogate

    if lone_surrogate(os.fsdecode(path)):  # DuckDB failed on it (std::bad_cast), a traceback
        raise UsageError("is not a UTF-8 path (it holds bytes of another encoding), which "
                         "DuckDB cannot open as a store", path=os.fsdecode(path),
                         hint="Rename the folders on the way to a UTF-8 name (the store "
                              "also records the project's source paths, which must be text)")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        raise UsageError("is a folder; the store must be a DuckDB file", path=path,
                         hint="Give a file path, e.g. " + str(Path(path) / "ledger.duckdb"))
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{not_regular(st.st_mode)}; the store must be a DuckDB file",
                         path=path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the stat
            raise UsageError("is not a regular file; the store must be a DuckDB file",
                             path=path)
        head = os.read(fd, 16)
    finally:
        os.close(fd)
    if head[8:12] == b"DUCK":
        return True
    kind = next((name for magic, name in _OTHER_FORMATS if head.startswith(magic)),
                "an empty file" if not head else "a file without DuckDB's header")
    raise DataError(f"is {kind}, not a toolkit store; nothing was changed in it", path=path,
                    hint="Point --db (or TOOLKIT_DB, or `db:` in toolkit.yaml) at a DuckDB "
                         "file or a new path")


def _migrations(sources: Sequence[Source]) -> list[Migration]:
    """The store's own first migration and every source's, in name order."""
    found = [*MIGRATIONS, *(m for src in sources for m in src.migrations)]
    names = [name for name, _sql in found]
    if len(set(names)) != len(names):
        raise ToolkitError(f"two migrations share a name in {sorted(names)} (a bug)")
    return sorted(found)


# The bytes of a new store with every migration applied and nothing else, by the digest of its
# migrations: a process that makes store after store (the MCP server's, fleet's and the API's
# projects, the tests' hundreds) copies the first one's instead of running the migrations' 50
# statements again for each (a new store's open and close 17.6-24 -> 4.5-5.2 ms of CPU).
_EMPTY_STORES: dict[str, bytes] = {}


def _empty_store_key(sources: Sequence[Source]) -> str:
    return hashlib.sha256("\n".join(f"{name} {migration_sha256(sql)}" for name, sql
                                     in _migrations(sources)).encode("utf-8")).hexdigest()


def _copy_empty_store(path: Path, key: str) -> bool:
    """Make the new store at ``path`` a copy of the kept empty one (:data:`_EMPTY_STORES`);
    False when there is none, or anything else is there by then (another process made it: it
    is opened as it is), or the file system cannot (then the store is made as usual). The
    copy is written whole in a file without a name (``O_TMPFILE``), then linked at ``path``
    only if nothing is there: the store never exists half-written, and nothing is left
    behind if this process dies meanwhile."""
    data = _EMPTY_STORES.get(key)
    tmpfile = getattr(os, "O_TMPFILE", 0)
    # (an old store's log beside the path: DuckDB's to deal with, as for any new store)
    if data is None or not tmpfile or os.path.lexists(store_files(path)[1]):
        return False
    cloexec = getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path.parent, tmpfile | os.O_WRONLY | cloexec, 0o666)
    except OSError:  # a file system without unnamed files
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        # linkat(2) of the file's /proc/self/fd entry, following it: the only way to name an
        # unnamed file (os.link of that path would link the /proc entry itself)
        fds = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | cloexec)
        try:
            os.link(str(fd), path, src_dir_fd=fds, follow_symlinks=True)
        finally:
            os.close(fds)
    except OSError:  # there already (FileExistsError), no /proc, or no links here: as usual
        return False
    finally:
        os.close(fd)
    return True


def store_files(path: Path) -> tuple[Path, Path]:
    """The store's file and its write-ahead log, which DuckDB keeps beside it."""
    return path, path.with_name(path.name + ".wal")


def _size(path: Path) -> int:
    """The file's size in bytes (0: none)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _small(path: Path) -> bool:
    """Whether the store at ``path`` is worked on by one thread (:data:`SMALL_STORE_BYTES`):
    its file and write-ahead log (either missing: 0) hold fewer bytes than that."""
    return sum(map(_size, store_files(path))) < SMALL_STORE_BYTES


_ALL_THREADS: list[int] = []  # DuckDB's own number of threads (one per core), once read


def _all_threads(conn: duckdb.DuckDBPyConnection) -> int:
    """DuckDB's own number of threads on this machine, read from the first connection asked
    (before any store set it: :meth:`Store._fit_threads` asks before it sets one)."""
    if not _ALL_THREADS:
        _ALL_THREADS.append(int(conn.execute("SELECT current_setting('threads')").fetchall()
                                [0][0]))
    return _ALL_THREADS[0]


def _file_state(path: Path) -> str:
    """What changes when DuckDB writes the store's file: its and its write-ahead log's
    identity, size and modification time."""
    return fingerprint_paths(list(store_files(path)))


# The store's own tables and views (and this connection's temporary ones) in DuckDB's
# catalog functions: not DuckDB's own catalog views.
_OWN_CATALOG = "database_name <> 'system' AND NOT internal"
# The names of the store's tables and views (schema main of its own database): the rows of
# information_schema.tables, which lists DuckDB's system catalog first to filter it out --
# a few ms on a connection's first catalog query, and every open of the store makes one.
# a name that is not the store's bookkeeping (its tables and views named ``_``...)
_NOT_BOOKKEEPING = "NOT LIKE '\\_%' ESCAPE '\\'"
_MAIN_OBJECTS = (
    f"SELECT table_name AS name FROM duckdb_tables() WHERE {_OWN_CATALOG} "
    "AND database_name = current_database() AND schema_name = 'main' "
    f"UNION ALL SELECT view_name FROM duckdb_views() WHERE {_OWN_CATALOG} "
    "AND database_name = current_database() AND schema_name = 'main'")


def _give_back_freed_memory(conn: duckdb.DuckDBPyConnection) -> None:
    """See :meth:`Store.give_back_freed_memory`."""
    import duckdb
    # a DuckDB without the setting keeps what it keeps
    with contextlib.suppress(duckdb.CatalogException):
        conn.execute("SET allocator_bulk_deallocation_flush_threshold = '1MB'")


def drop_library_pages() -> bool:
    """Take out of this process's memory the pages of DuckDB's library it has read: its code
    and constants, 40-45 MB resident once a site's queries ran, counted in the process's
    memory while nothing runs them (MkDocs building the pages). A later query maps back what
    it runs from the kernel's cache of the file (no disk read while it is cached).

    Linux's ``madvise(MADV_DONTNEED)`` over each read-only mapping of the library that holds
    no page of its own (smaps' ``Anonymous: 0 kB``): such a mapping only shows the file, so
    nothing is lost; one a relocation wrote to is left alone. False where nothing was done
    (another system, no such mapping)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    import _duckdb  # DuckDB's compiled module: its file is the library

    library = os.path.realpath(getattr(_duckdb, "__file__", None) or "/nonexistent")
    spans: list[tuple[int, int]] = []
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
            span: tuple[int, int] | None = None
            for line in smaps:
                if _MAPPING.match(line):
                    fields = line.split(maxsplit=5)
                    span = None
                    if len(fields) == 6 and "w" not in fields[1] \
                            and fields[5].rstrip("\n") == library:
                        start, end = (int(x, 16) for x in fields[0].split("-"))
                        span = (start, end)
                elif span is not None and line.startswith("Anonymous:"):
                    if line.split()[1] == "0":
                        spans.append(span)
                    span = None
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return False
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return sum(madvise(start, end - start, _MADV_DONTNEED) == 0 for start, end in spans) > 0


_MAPPING = re.compile(r"[0-9a-f]+-[0-9a-f]+ ")
_MADV_DONTNEED = 4  # <sys/mman.h>


_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")


def _holder(message: str) -> str:
    """`` (python3.11, PID 9543)``: who holds the store, as DuckDB's lock error names it (a
    toolkit command, a notebook, the DuckDB shell...); empty when it does not say."""
    found = _LOCK_HOLDER.search(message)
    return f" ({Path(found[1]).name}, PID {found[2]})" if found else ""


def _in_utc(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``conn`` with UTC as its time zone. DuckDB takes the machine's, and reads a date or a
    time without an offset as a time there: a check's ``CAST($today AS TIMESTAMPTZ)`` was
    midnight in Los Angeles, not UTC, so `toolkit check` (and the handoff and the site that
    show its results) flagged slop a day early or late by the machine's zone, and
    ``toolkit query`` printed times in it. The setting is the connection's own (another
    connection to the same file, or a cursor of this one, starts from the machine's zone):
    every connection the store opens comes here."""
    import duckdb
    try:
        conn.execute("SET TimeZone = 'UTC'")
    except (duckdb.CatalogException, duckdb.InvalidInputException):
        pass  # a DuckDB without ICU (it names the missing extension): its zone is UTC anyway
    except BaseException:
        _close(conn)
        raise
    return conn


# Rows a row group of the store's tables holds when this toolkit writes them (DuckDB's default
# is 122,880). DuckDB writes the rows a transaction appends to the file before its commit
# ("optimistically") a full row group at a time, and keeps the rest in memory until the commit
# copies them into the table: at the default, a load of 50,000 ledger entries held every row
# twice at its commit. At 16,384 the load's peak is about 10 MB lower and its commit adds
# nothing, for the same CPU time and about a tenth more on disk (4,096: no lower peak, and
# three times the size of a million audit rows). Not recorded in the file: another program's
# connection appends whole row groups of its own size, and reads these as they are.
STORE_ROW_GROUP = 16_384


_INHERITED: list[Any] = []  # instances a forked child got from its parent, kept as they are


class _Host:
    """One in-memory DuckDB database per process that a store's file is attached to for
    writing, one store at a time, and detached from when the store closes (its lock goes with
    the DETACH): DuckDB makes a database instance in about 10 ms of CPU (its catalog of
    built-in functions), an ATTACH and a DETACH cost about 1.5 ms, and a process that opens
    stores again and again (the MCP server's calls, ``serve``, the API, the tests) paid the 10
    ms at every open. A store opened while another is attached, with settings of a caller's,
    or in a child process forked from this one gets an instance of its own, as before;
    :meth:`Store.release` ends the instance (its allocator's memory goes back with it).

    The host holds the attached store's connection weakly: a store its caller drops without
    closing it (a ``Project`` rebound in a notebook, a test's forgotten store) is detached
    when its connection goes, as a plain connection lets its file go when it is collected.
    Held strongly, the file stayed locked against every other process, and every later store
    of this process paid for an instance of its own, until the process ended."""

    def __init__(self) -> None:
        self.conn: duckdb.DuckDBPyConnection | None = None
        self.pid = 0
        self.temp: str | None = None  # its temp_directory (beside the last store attached)
        # the attached store's connection, weakly (see the class docstring)
        self.attached: weakref.ref[duckdb.DuckDBPyConnection] | None = None
        self.name = ""  # its database's name, detached at its close
        self.lock = threading.Lock()  # two threads opening stores at once

    @property
    def cursor(self) -> duckdb.DuckDBPyConnection | None:
        """The attached store's connection, while its caller holds it."""
        return self.attached() if self.attached is not None else None

    def open(self, path: Path) -> duckdb.DuckDBPyConnection | None:
        """A connection of this instance with ``path`` attached and in use, or None when the
        instance is taken (see the class docstring)."""
        with self.lock:
            return self._open(path)

    def _open(self, path: Path) -> duckdb.DuckDBPyConnection | None:
        import duckdb
        if self.pid != os.getpid():  # a forked child (of a parent with a store attached):
            _INHERITED.append(self.conn)  # never ended here (see _before_fork)
            self.conn, self.attached = None, None
            self.pid = os.getpid()
        self._detach_dropped()
        if self.attached is not None:
            return None
        temp = f"{path}.tmp"
        if self.conn is not None and self.temp != temp:
            try:
                self.conn.execute(f"SET temp_directory = {quote_text(temp)}")
                self.temp = temp
            except duckdb.Error:  # the last one was used: DuckDB keeps it; a new instance
                self.end()
        if self.conn is None:
            self.conn = duckdb.connect(":memory:", config={
                **_NO_EXTENSIONS, "temp_directory": temp, "write_buffer_row_group_count": 1})
            self.temp = temp
        cursor = self.conn.cursor()
        try:
            _attach(cursor, path)
            name = _use_attached(cursor)
        except duckdb.BinderException:  # its name is the instance's own (memory.duckdb)
            cursor.close()
            self._detach_all()
            return None
        except BaseException:
            cursor.close()
            self._detach_all()
            raise
        self.attached, self.name = weakref.ref(cursor, self._dropped), name
        return cursor

    def _dropped(self, attached: weakref.ref[duckdb.DuckDBPyConnection]) -> None:
        """The attached store's connection was collected unclosed (DuckDB closed it): detach
        its file now, unless another thread (or this one, further up) holds the lock; then
        the next use of the host does (:meth:`_detach_dropped`). Not while Python shuts down:
        the process's end lets the file go (and imports no longer work)."""
        if sys.is_finalizing() or self.pid != os.getpid() or \
                not self.lock.acquire(blocking=False):
            return
        try:
            self._detach_dropped()
        finally:
            self.lock.release()

    def _detach_dropped(self) -> None:
        """Detach the attached file if its connection was dropped unclosed (lock held)."""
        if self.attached is None or self.attached() is not None or self.pid != os.getpid():
            return
        import duckdb
        self.attached = None
        try:
            self._detach()
        except duckdb.Error:  # no caller to tell: the instance goes (and the file with it)
            self.end()

    def close(self, conn: duckdb.DuckDBPyConnection) -> bool:
        """Close ``conn`` if it is the attached store's, detaching its file (and putting back
        the setting a lean store changes on the instance); False when it is not this host's."""
        with self.lock:
            return self._close(conn)

    def _close(self, conn: duckdb.DuckDBPyConnection) -> bool:
        if conn is not self.cursor or self.pid != os.getpid():
            return False
        self.attached = None
        conn.close()  # (a transaction still open is rolled back)
        try:
            self._detach()
        except BaseException:
            self.end()  # the file must not stay attached: the instance goes, and its lock
            raise
        return True

    def _detach(self) -> None:
        """Detach the store's file (its connection closed), and put back the setting a lean
        store changes on the instance (a load puts its memory limit back itself)."""
        import duckdb
        host = self.conn
        assert host is not None  # (a store was attached to it)
        host.execute(f"DETACH {quote_ident(self.name)}")
        with contextlib.suppress(duckdb.CatalogException):
            host.execute("RESET allocator_bulk_deallocation_flush_threshold")

    def _detach_all(self) -> None:
        if self.conn is None:
            return
        for (name,) in self.conn.execute(_ATTACHED_FILES).fetchall():
            self.conn.execute(f"DETACH {quote_ident(str(name))}")

    def end_if_idle(self) -> None:
        """End the instance unless a store is attached to it."""
        with self.lock:
            self._detach_dropped()
            if self.attached is None:
                self.end()

    def end(self) -> None:
        """End the instance (the next open makes another)."""
        conn, self.conn, self.attached, self.temp = self.conn, None, None, None
        if conn is not None and self.pid == os.getpid():
            conn.close()


_HOST = _Host()


def _before_fork() -> None:
    """End the host's instance before this process forks, unless a store is attached: a
    child that inherits a DuckDB instance crashes when it ends it (its threads are not in the
    child), and the child makes its own."""
    _HOST.end_if_idle()


os.register_at_fork(before=_before_fork)


def _close(conn: duckdb.DuckDBPyConnection) -> None:
    """Close a connection :func:`_connect` made (a hosted store is detached first)."""
    if not _HOST.close(conn):
        conn.close()


# The store's file among a connection's databases (the only one attached with a path)
_ATTACHED_FILES = ("SELECT database_name FROM duckdb_databases() "
                   "WHERE path IS NOT NULL AND NOT internal")


def _attach(conn: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Attach the store's file to ``conn``'s in-memory database, with its row groups of
    :data:`STORE_ROW_GROUP` rows (an option of ATTACH only); DuckDB names it as a plain
    connection does (the file name without its extensions)."""
    conn.execute(f"ATTACH {quote_text(str(path))} (ROW_GROUP_SIZE {STORE_ROW_GROUP})")


def _use_attached(conn: duckdb.DuckDBPyConnection) -> str:
    """Make the attached store ``conn``'s default database, so ``current_database()`` is
    the one a plain connection has; its name."""
    row = conn.execute(_ATTACHED_FILES).fetchone()
    name = str(row[0]) if row else ""
    conn.execute(f"USE {quote_ident(name)}")
    return name


def _open_for_writing(path: Path, config: dict[str, Any]) -> duckdb.DuckDBPyConnection:
    """A connection that writes the store with row groups of :data:`STORE_ROW_GROUP` rows,
    each written to the file once full (``write_buffer_row_group_count`` 1): the row group
    size is an option of ATTACH only, so the file is attached to an in-memory database and
    made the connection's default; its name is the one a plain connection gives it (the file
    name without its extensions), so ``current_database()`` is the same. DuckDB's temporary
    files go beside the store, as for a plain connection (an in-memory database's would go
    into the working folder)."""
    import duckdb
    conn = duckdb.connect(":memory:", config={"temp_directory": f"{path}.tmp",
                                              "write_buffer_row_group_count": 1, **config})
    try:
        scratch = False
        try:
            _attach(conn, path)
        except duckdb.BinderException:  # memory.duckdb: the in-memory database's own name
            conn.execute("ATTACH ':memory:' AS _toolkit_scratch")
            conn.execute("USE _toolkit_scratch")
            conn.execute("DETACH memory")
            _attach(conn, path)
            scratch = True
        _use_attached(conn)
        if scratch:  # only that rare name needed it (every write open comes here)
            conn.execute("DETACH _toolkit_scratch")
    except BaseException:
        conn.close()
        raise
    return conn


def _connect(path: Path, *, read_only: bool, config: dict[str, Any] | None = None
             ) -> duckdb.DuckDBPyConnection:
    """Open the store's DuckDB file; another process's lock is waited for, as long as any
    other lock of the toolkit's (:func:`toolkit.safewrite.lock_timeout`), then "busy"; a bad
    file is "bad data".

    DuckDB lets one process write a file and none read it meanwhile, and says so at once: two
    commands started together (a `load` and a `query`, `serve` rebuilding while a command
    runs) took turns only by luck, the loser exiting 75 after a few milliseconds. Call
    ``check_store_path`` first: only a file with DuckDB's header gets here. Its time zone is
    UTC whatever the machine's (:func:`_in_utc`)."""
    config = {**_NO_EXTENSIONS, **(config or {})}
    timeout = lock_timeout()
    try:
        return keep_trying(lambda: _connect_once(path, read_only=read_only, config=config),
                           _Locked, timeout)
    except _Locked as exc:
        raise BusyError(f"the store is in use by another process{_holder(str(exc))}; "
                        f"waited {timeout:g} s, retry when it finishes", path=path) from None


# The stores of this process that give way to another connection to their file
# (:func:`yield_when_idle`), each with the lock its owner holds while using it; held weakly.
_YIELDING: weakref.WeakKeyDictionary[Store, Any] = weakref.WeakKeyDictionary()
_YIELDING_LOCK = threading.Lock()


def yield_when_idle(store: Store, busy: Any) -> Store:
    """Let a connection to ``store``'s file opened another way in this process close
    ``store`` while ``busy`` (a lock its owner holds while it uses the store: a
    ``threading.RLock``) is free; its owner sees :attr:`Store.closed` and opens it again on
    its next use. DuckDB holds a file one way at a time in a process (read-only with one set
    of settings, or for writing): a notebook cell that runs ``project = Project.open()``
    again refreshes the store while the first Project, still bound to the name, holds its
    read-only connection, and that was refused as busy. Returns ``store``."""
    with _YIELDING_LOCK:
        _YIELDING[store] = busy
    return store


def _let_idle_go(path: Path) -> bool:
    """Close the stores of ``path``'s file that give way (:func:`yield_when_idle`) and that
    their owners are not using; whether any was closed."""
    with _YIELDING_LOCK:
        found = [(store, busy) for store, busy in _YIELDING.items()
                 if not store.closed and _same_file(store.path, path)]
    closed = False
    for store, busy in found:
        if busy.acquire(blocking=False):
            try:
                if not store.closed:
                    store.close()
                    closed = True
            finally:
                busy.release()
    return closed


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


class _Locked(Exception):
    """DuckDB's "could not set lock" on opening the store (its message): another process
    has it."""


def _connect_once(path: Path, *, read_only: bool, config: dict[str, Any]
                  ) -> duckdb.DuckDBPyConnection:
    """One try of :func:`_connect`; raises :class:`_Locked` for another process's lock."""
    import duckdb
    try:
        if not read_only:
            hosted = _HOST.open(path) if config == _NO_EXTENSIONS else None
            if hosted is not None:
                return register(_in_utc(hosted))
            return register(_in_utc(_open_for_writing(path, config)))
        return register(_in_utc(duckdb.connect(str(path), read_only=True, config=config)))
    except (duckdb.ParserException, duckdb.InvalidInputException):
        raise  # a bad setting in ``config`` (the caller names it), not a bad file
    except duckdb.OutOfMemoryException as exc:  # not a bad file either
        limit = config.get("memory_limit")
        if limit is not None:  # a query connection's, too small to read the store's catalog
            raise UsageError(f"the memory limit {limit!r} is too small to open the store "
                             f"({_first_line(exc)}); the store itself is fine", path=path,
                             hint="Give the query more memory (the default is "
                                  f"{QUERY_MEMORY}), e.g. 100MB") from None
        raise ToolkitError(f"the store ran out of memory while opening: {_first_line(exc)}",
                           path=path) from None
    except duckdb.Error as exc:  # IOException, or a plain Error for a corrupt block
        if isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower():
            raise _Locked(str(exc)) from None
        # the same file, open in this process: a reader beside a writer, or either beside a
        # reader with other settings. Those that give way and are idle are closed, and the
        # open is tried again; one in use (or not giving way) makes this one busy.
        if "file handle conflict" in str(exc) or "different configuration" in str(exc):
            if not _let_idle_go(path):
                raise BusyError("the store is open in this process already (a query "
                                "connection or another Project, in use)", path=path,
                                hint="Close it first (Project.close(), or leave its `with` "
                                     "block)") from None
            return _connect_once(path, read_only=read_only, config=config)
        denied = duckdb_denied(str(exc))
        if denied is not None:  # a mode to change, not a store to delete
            raise permission_denied(denied) from None
        ours = path.is_file()  # a file with DuckDB's header (check_store_path)
        raise DataError(f"cannot open the store: {_first_line(exc).rstrip('!')}", path=path,
                        hint="Delete it; `toolkit load` rebuilds it from the sources" if ours
                        else None) from None


# --------------------------------------------------------------------------- toolkit query

QUERY_TIMEOUT_S = 30.0
QUERY_MAX_ROWS = 10_000
QUERY_MEMORY = "1GB"


def open_query_connection(db_path: Path, *, memory_limit: str = QUERY_MEMORY
                          ) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the store, locked down for queries a user writes.

    No file access, no extensions, no settings changes (configuration locked) and a memory
    limit; nothing spills to disk (``max_temp_directory_size`` 0): a query that needs more
    than the limit stops with an error instead of filling the disk with temp files. Used by
    ``toolkit query`` and ``toolkit.api.Project.sql``."""
    import duckdb
    if not check_store_path(Path(db_path)):
        check_memory_limit(memory_limit)  # (the same error whether or not the store exists)
        raise ToolkitError("the store does not exist yet", path=db_path,
                           hint="Run `toolkit load` first")
    _refuse_no_limit(memory_limit)
    try:
        conn = _connect(Path(db_path), read_only=True, config={
            "enable_external_access": False,
            "allow_community_extensions": False,
            "memory_limit": memory_limit,
            "max_temp_directory_size": "0KB",
            "threads": 1 if _small(Path(db_path)) else 2,
        })
    except duckdb.ParserException:  # the only value here a user gives: the memory limit
        raise _not_a_size(memory_limit) from None
    try:
        # A second reader of the same file in this process shares the first one's database,
        # whose configuration is locked already (two Project objects open at once).
        if not conn.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:
            # Off already in Jupyter without ipywidgets, where setting it at all is an error.
            if conn.execute("SELECT current_setting('enable_progress_bar')").fetchall()[0][0]:
                conn.execute("SET enable_progress_bar = false")
            conn.execute("SET lock_configuration = true")
    except BaseException:
        conn.close()
        raise
    return conn


def check_memory_limit(memory_limit: str, name: str = "--memory-limit") -> None:
    """Refuse a memory limit DuckDB does not read as a size, asked of DuckDB itself on a
    connection to no file (about 17 ms: only where no store connection reads it, so that a
    missing store does not hide a bad limit)."""
    import duckdb

    _refuse_no_limit(memory_limit, name)
    try:
        duckdb.connect(":memory:", config={"memory_limit": memory_limit}).close()
    except (duckdb.ParserException, duckdb.InvalidInputException):
        raise _not_a_size(memory_limit, name) from None


def _refuse_no_limit(memory_limit: str, name: str = "--memory-limit") -> None:
    """DuckDB reads a negative size (``-1GB``) as no limit at all: refused as no size, so a
    query's limit can never be lifted by it."""
    if str(memory_limit).strip().startswith("-"):
        raise _not_a_size(memory_limit, name)


def _not_a_size(memory_limit: str, name: str = "--memory-limit") -> UsageError:
    """``name`` (the option or argument that gave it) is not a size."""
    return UsageError(f"{name} {memory_limit!r} is not a size",
                      hint="Use a number and a unit, e.g. 500MB or 2GB")


# SHOW TABLES, SHOW ALL TABLES and DESCRIBE alone (DuckDB runs them as SELECTs): the store's
# tables and views but its bookkeeping, as Store.tables() and `toolkit schema` list them
_SHOW_TABLES = re.compile(r"\s*(?:SHOW(?:\s+ALL)?(?:\s+TABLES)?|DESCRIBE)\s*;?\s*",
                          re.IGNORECASE)


def single_select(conn: duckdb.DuckDBPyConnection, sql: str) -> duckdb.Statement:
    """The one read-only SELECT in ``sql``; anything else is refused. DESCRIBE, SHOW and
    SUMMARIZE, which DuckDB runs as SELECTs, are let through too; SHOW TABLES leaves out
    the store's bookkeeping tables (``_``...), as :meth:`Store.tables` does."""
    import duckdb

    from toolkit.textio import lone_surrogate

    bad = lone_surrogate(sql)
    if bad is not None:  # (DuckDB's parser raised a TypeError for it)
        raise UsageError(f"the query holds a lone surrogate ({bad}), which is not text",
                         hint="Give the query as UTF-8 text")
    try:
        statements = conn.extract_statements(sql)
    except duckdb.Error as exc:
        line, hint = _query_line(exc)
        raise RefusedError(f"the query does not parse: {line}", hint=hint) from None
    if len(statements) != 1 or not _is_select(statements[0]):
        raise RefusedError("only one read-only SELECT is allowed",
                           hint="Write a single SELECT (or WITH ... SELECT) statement")
    statement = statements[0]
    body = _statement_body(statement.query)
    if _SHOW_TABLES.fullmatch(body):
        statement = conn.extract_statements(
            f"SELECT * FROM ({body}) AS shown WHERE name {_NOT_BOOKKEEPING}")[0]
    return statement


def select_relation(conn: duckdb.DuckDBPyConnection, sql: str,
                    params: Sequence[Any] | dict[str, Any] | None = None, *,
                    memory_limit: str | None = None) -> Relation:
    """The one read-only SELECT in ``sql`` as a relation on ``conn`` (from
    ``open_query_connection`` with ``memory_limit``), with ``params`` bound; read it with
    ``fetchall()``, ``arrow()``... (:class:`Relation`: DuckDB's, raising the toolkit's
    errors)."""
    return Relation(_bound(conn, single_select(conn, sql), params), memory_limit)


def _bound(conn: duckdb.DuckDBPyConnection, statement: duckdb.Statement,
           params: Sequence[Any] | dict[str, Any] | None) -> duckdb.DuckDBPyRelation:
    """DuckDB's relation of a statement :func:`single_select` let through."""
    import duckdb
    try:
        return conn.sql(statement.query, params=params)
    except duckdb.Error as exc:
        raise _query_error(exc) from None


def _query_error(exc: BaseException, memory_limit: str | None = None) -> ToolkitError:
    """The toolkit's error for what DuckDB raised binding or running a query of the user's
    on a connection from ``open_query_connection`` with ``memory_limit`` (not an interrupt:
    the caller knows whose it was). The connection is locked down: a file DuckDB was asked
    to read is refused by its configuration, and a DuckDB hint to change a setting is left
    out (settings cannot be changed on it)."""
    import duckdb
    if isinstance(exc, duckdb.OutOfMemoryException):
        return ToolkitError(f"query stopped at the {memory_limit or QUERY_MEMORY} memory limit",
                            hint="Add a LIMIT or aggregate first")
    line, hint = _query_line(exc)
    if isinstance(exc, duckdb.PermissionException):
        what = "file access is" if "file" in line.lower() else "this is"
        return RefusedError(f"{what} disabled for queries ({line})",
                            hint="Query the store's tables and views (`toolkit schema` lists "
                                 "them)")
    return ToolkitError(f"query failed: {line}", hint=hint)


# DuckDB's advice to change a setting, which a query's locked connection cannot
_SET_ADVICE = re.compile(r"\s*Use \"(?:SET|PRAGMA) [^\"]*\"[^.]*\.?")


def _query_line(exc: BaseException) -> tuple[str, str | None]:
    """A query error's one line without DuckDB's advice to change a setting, and the hint
    that stands in for it (None when there was none)."""
    line = _first_line(exc)
    bare = _SET_ADVICE.sub("", line)
    if bare == line:
        return line, None
    return bare, "Settings cannot be changed for queries: simplify the query instead"


# What Relation's methods that write are refused with (the connection is read-only and has
# no file access), by method
_WRITES_FILES = frozenset({"to_csv", "write_csv", "to_parquet", "write_parquet"})
_WRITES_TABLES = frozenset({"create", "create_view", "insert", "insert_into", "to_table",
                            "to_view", "update"})
# DuckDB's words for a Python module a method needs (df(): pandas)
_NOT_INSTALLED = re.compile(r"'([\w.]+)' is required for this operation but it was not "
                            r"installed")


class Relation:
    """What :meth:`toolkit.api.Project.sql` returns: DuckDB's relation (``.relation``, a
    ``duckdb.DuckDBPyRelation``) with every method and attribute of it (``.fetchall()``,
    ``.arrow()``, ``.df()``, ``.columns``, ``.filter()``, ``len()``, ``rel["column"]``...),
    whose errors are the toolkit's instead of DuckDB's: a query that fails only when it runs
    (a value that does not convert, ``error()``), runs out of memory or is interrupted; a
    write the locked-down connection refuses (``to_csv``, ``write_parquet``, ``create``,
    ``insert_into``...), saying what to do instead; a read after its connection was closed
    (``refresh()``, ``close()``); ``df()`` or ``pl()`` without pandas or polars. A relation
    one of its methods returns is one too."""

    __slots__ = ("_memory_limit", "relation")

    def __init__(self, relation: duckdb.DuckDBPyRelation, memory_limit: str | None = None
                 ) -> None:
        self.relation = relation
        self._memory_limit = memory_limit

    def __getattr__(self, name: str) -> Any:
        if name in Relation.__slots__:  # (not set yet: a copy being made)
            raise AttributeError(name)
        with self._errors(name):
            value = getattr(self.relation, name)
        if callable(value):
            return self._method(name, value)
        return self._wrapped(value)

    def _method(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(a.relation if isinstance(a, Relation) else a for a in args)
            kwargs = {k: v.relation if isinstance(v, Relation) else v
                      for k, v in kwargs.items()}
            with self._errors(name):
                return self._wrapped(method(*args, **kwargs))
        return call

    def _wrapped(self, value: Any) -> Any:
        import duckdb
        if isinstance(value, duckdb.DuckDBPyRelation):
            return Relation(value, self._memory_limit)
        return value

    @contextlib.contextmanager
    def _errors(self, name: str) -> Iterator[None]:
        """A query's errors (:func:`_query_errors`), and what only a relation's method
        meets: its connection closed, a module it needs, a write refused."""
        import duckdb
        try:
            with _query_errors(None, self._memory_limit):
                try:
                    yield
                except duckdb.InterruptException:
                    raise  # (a query's)
                except duckdb.ConnectionException:
                    raise ToolkitError("the relation's connection was closed (by refresh() "
                                       "or close(), or for a refresh of the same store in "
                                       "this process)", hint="Call sql() again") from None
                except duckdb.Error as exc:
                    needed = _NOT_INSTALLED.search(str(exc))
                    if needed is not None:
                        raise _needs(name, needed[1]) from None
                    if name in _WRITES_FILES:
                        raise RefusedError(
                            f"{name}() is refused: queries may not write files",
                            hint="Read the rows with .arrow() and write them with pyarrow "
                                 "(pyarrow.csv, pyarrow.parquet), or export the store's "
                                 "tables with `toolkit export`") from None
                    if name in _WRITES_TABLES:
                        raise RefusedError(
                            f"{name}() is refused: the store is read-only for queries",
                            hint="Read the rows with .fetchall() or .arrow() and write them "
                                 "with a connection of your own") from None
                    raise  # (a query's)
        except ImportError as exc:  # pl() without polars
            raise _needs(name, exc.name or str(exc)) from None

    def __repr__(self) -> str:
        with self._errors("__repr__"):
            return repr(self.relation)

    def __str__(self) -> str:
        with self._errors("__str__"):
            return str(self.relation)

    def __len__(self) -> int:
        with self._errors("__len__"):
            return len(self.relation)

    def __getitem__(self, key: Any) -> Any:
        with self._errors("__getitem__"):
            return self._wrapped(self.relation[key])

    def __contains__(self, name: str) -> bool:
        return name in self.relation

    def __dir__(self) -> list[str]:
        return sorted({*dir(self.relation), "relation"})

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        with self._errors("__arrow_c_stream__"):
            return self.relation.__arrow_c_stream__(requested_schema)


def _needs(method: str, module: str) -> ToolkitError:
    return ToolkitError(f"{method}() needs {module}, which is not installed (the toolkit "
                        "does not depend on it)",
                        hint=f"Install it (pip install {module.split('.')[0]}), or read the "
                             "rows with .fetchall() or .arrow() (pyarrow)")


def parse_select(sql: str) -> None:
    """Refuse (:class:`RefusedError`) ``sql`` unless it is one read-only SELECT: parsed only,
    nothing bound or run (a check in toolkit.yaml is vetted before the store is open)."""
    import duckdb
    conn = duckdb.connect(":memory:", config=_NO_EXTENSIONS)
    try:
        single_select(conn, sql)
    finally:
        conn.close()


@contextlib.contextmanager
def _query_errors(deadline: Deadline | None, memory_limit: str | None,
                  timeout_hint: str | None = None) -> Iterator[None]:
    """DuckDB's errors of a query of the user's, run in the block, as the toolkit's: an
    interrupt is Ctrl-C or SIGTERM (:mod:`toolkit.interrupts`), the ``deadline``'s timeout
    when it fired, or another thread's :meth:`toolkit.api.Project.interrupt`; anything else
    is :func:`_query_error`'s, naming ``memory_limit`` (the connection's)."""
    import duckdb
    try:
        yield
    except duckdb.InterruptException:
        raise_if_stopped()
        if deadline is None or not deadline.fired:
            raise ToolkitError("query interrupted") from None
        raise ToolkitError(f"query interrupted after the {deadline.seconds:g} s timeout",
                           hint=timeout_hint) from None
    except duckdb.Error as exc:
        raise _query_error(exc, memory_limit) from None
    except RuntimeError as exc:  # DuckDB's, for a signal handler that raised in the query
        raise_if_stopped(exc)
        raise


def count_and_first(conn: duckdb.DuckDBPyConnection, sql: str,
                    params: Sequence[Any] | dict[str, Any] | None, limit: int, *,
                    deadline: Deadline | None = None, memory_limit: str | None = None
                    ) -> tuple[list[str], int, list[tuple[Any, ...]]]:
    """(columns, rows, the first ``limit`` rows) of the one read-only SELECT in ``sql`` on
    ``conn`` (from ``open_query_connection``), counted and read in one pass. The columns
    are its relation's (:func:`select_relation`, which also refuses anything else and
    reports what does not bind); the pass is one statement on the connection, not a
    relation built on that relation (three times the work for DuckDB's Python layer). A
    query that fails or is interrupted is a ToolkitError: the caller's ``deadline``
    interrupts the connection when its time is up, and says whether an interrupt was that
    one (``fired``), not another thread's; ``memory_limit``: the connection's (None: the
    default), named when a query runs out of it."""
    statement = single_select(conn, sql)
    columns = list(_bound(conn, statement, params).columns)
    counted = (f'SELECT *, count(*) OVER () AS "__toolkit_rows__" FROM (\n'
               f"{_statement_body(statement.query)}\n)"
               f" AS relation_rows LIMIT {int(limit)}")  # (a line break ends a -- comment)
    with _query_errors(deadline, memory_limit):
        fetched = conn.execute(counted, params).fetchall()
    count = int(fetched[0][-1]) if fetched else 0
    return columns, count, [tuple(r[:-1]) for r in fetched]


def _statement_body(text: str) -> str:
    """A statement's text without what follows its last token: the closing ``;`` and the
    comments around it (inside a subquery a ``;`` is a syntax error)."""
    import duckdb
    end = len(text)
    for pos, kind in reversed(duckdb.tokenize(text)):
        if kind != duckdb.token_type.comment and text[pos:end].strip() != ";":
            break
        end = pos
    return text[:end]


class Deadline:
    """Call ``interrupt`` (a connection's) once ``seconds`` have passed, and again every 50 ms
    until :meth:`cancel`: DuckDB keeps no interrupt that comes before its query starts (while
    the statement is still parsed and bound, or the thread waits for the CPU), so one call
    at the deadline could be lost and the query then ran for hours. ``cancel`` returns once
    no call can come any more (the connection's next query is not interrupted)."""

    def __init__(self, seconds: float, interrupt: Callable[[], None]) -> None:
        import math

        if math.isnan(seconds) or seconds <= 0:  # (NaN: no deadline is ever reached)
            raise UsageError(f"timeout must be a number of seconds above 0, not {seconds!r}")
        self._done = threading.Event()
        self.seconds = seconds
        self.fired = False  # the deadline was reached (an interrupt is this one's)
        # an infinite timeout, or one longer than the platform's longest wait: no deadline
        # (a wait that long overflowed the platform's time in the timer's thread, which died
        # with a traceback on stderr, and the query ran without one)
        self._thread = None if seconds >= threading.TIMEOUT_MAX else threading.Thread(
            target=self._run, args=(seconds, interrupt), name="toolkit-query-deadline",
            daemon=True)
        if self._thread is not None:
            self._thread.start()

    def _run(self, seconds: float, interrupt: Callable[[], None]) -> None:
        if self._done.wait(seconds):
            return
        self.fired = True
        while not self._done.is_set():
            interrupt()
            self._done.wait(0.05)

    def cancel(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()


def first_rows(conn: duckdb.DuckDBPyConnection, sql: str,
               params: Sequence[Any] | dict[str, Any] | None = None, *,
               timeout: float = QUERY_TIMEOUT_S, max_rows: int = QUERY_MAX_ROWS,
               memory_limit: str | None = None
               ) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """The first ``max_rows`` rows of the one read-only SELECT in ``sql`` on ``conn`` (from
    ``open_query_connection`` with ``memory_limit``), interrupted after ``timeout`` seconds:
    ``toolkit query`` and ``toolkit.api.Project.rows``. Returns (columns, rows, truncated).
    """
    if max_rows < 1:  # (its type: click's, and toolkit.api's argument checks)
        raise UsageError(f"max_rows must be a whole number of at least 1, not {max_rows!r}")
    statement = single_select(conn, sql)
    timer = Deadline(timeout, conn.interrupt)
    try:
        with _query_errors(timer, memory_limit, "Add a LIMIT or a tighter WHERE clause"):
            cur = (conn.execute(statement) if params is None
                   else conn.execute(statement.query, params))
            cols = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchmany(max_rows + 1)
    finally:
        timer.cancel()
    truncated = len(rows) > max_rows
    return cols, rows[:max_rows], truncated


def _is_select(statement: duckdb.Statement) -> bool:
    """Whether a parsed statement is a plain SELECT (types the Python enum does not know,
    such as UPDATE EXTENSIONS, raise ValueError: they are not SELECTs)."""
    import duckdb
    try:
        return statement.type == duckdb.StatementType.SELECT
    except ValueError:
        return False


def _first_line(exc: BaseException) -> str:
    """A DuckDB error's one line (``toolkit.errors.error_line``: a quoted value kept whole)."""
    return error_line(str(exc)) or type(exc).__name__


def table_versions(declared: Sequence[Source], loads: Sequence[dict[str, Any]],
                   tables: Sequence[str]) -> dict[str, str]:
    """What each of ``tables`` (base tables: a view may read another source's tables) holds
    as of now, when one source of ``declared`` creates it: that source's name, fingerprint
    and time of its last load (``loads``: the rows of ``_sources``). A source whose fingerprint
    is unchanged is not loaded again, so a table with the same version holds the same rows.
    Tables no single source creates, or whose source has no fingerprint (absent, failed), have
    none: a caller reads them every time."""
    owners: dict[str, list[str]] = {}
    for source in declared:
        for table in source.tables:
            owners.setdefault(table, []).append(source.name)
    by_source = {row["source"]: row for row in loads}
    out = {}
    for table in tables:
        names = owners.get(table, [])
        row = by_source.get(names[0]) if len(names) == 1 else None
        if row is not None and row.get("fingerprint"):
            out[table] = f"{names[0]}\0{row['fingerprint']}\0{row.get('loaded_at')}"
    return out


# What a view may call that gives another answer over the same rows: the time, chance, the
# session's settings and variables, the catalog, files (a function read_..., glob, or a file
# named in quotes: DuckDB keeps FROM 'x.csv' as FROM "x.csv", and no name of the toolkit's
# tables and columns needs a character but letters, digits and _) and queries named by a
# string.
_VOLATILE = re.compile(r"\b(?:now|today|current_\w+|get_current_\w+|local\w*time\w*|"
                       r"\w+_timestamp|random|setseed|gen_random_uuid|uuid\w*|nextval|currval|"
                       r"getenv|getvariable|duckdb_\w+|pragma_\w+|read_\w+|glob|query|"
                       r"query_table)\b|\b(?:from|join)\s+'", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")  # a string, a quoted name


def _reads_something_else(sql: str) -> bool:
    """Whether a view's SQL calls something of :data:`_VOLATILE` or names a file (a quoted
    name with a character but letters, digits and _)."""
    return bool(_VOLATILE.search(sql)) or any(
        q.startswith('"') and re.search(r"\W", q[1:-1]) for q in _QUOTED.findall(sql))


def view_versions(views: dict[str, str], versions: dict[str, str], tables: Sequence[str]
                  ) -> dict[str, str]:
    """What each view of ``views`` (name -> its SQL, as ``duckdb_views()`` gives it) shows as
    of now: the digest of its SQL (and of the views it reads) and of the versions
    (``versions``, :func:`table_versions`) of the base tables (``tables``) it reads, directly
    or through other views. Which tables it reads: every name in its SQL that is one of them
    (a column or a word in a string of the same name only adds one: a view gets a new
    version more often, never too seldom). A view that reads a table without a version, or
    no table at all, or that calls anything that answers differently over the same rows
    (the time, a random number, a file) has none: a caller reads it every time. Made for the
    toolkit's own views (its migrations create them all), which read the main schema only: a
    table of another schema or an attached database is not seen."""
    known = {name.lower(): name for name in (*tables, *views)}
    out: dict[str, str] = {}
    for view in views:
        read = _view_reads(view, views, known)
        if read is None:
            continue
        read_views, read_tables = read
        if read_tables and read_tables <= versions.keys():
            made_of = [sorted((v, views[v]) for v in read_views),
                       sorted((t, versions[t]) for t in read_tables)]
            out[view] = hashlib.sha256(json.dumps(made_of).encode("utf-8")).hexdigest()
    return out


def _view_reads(view: str, views: dict[str, str], known: dict[str, str]
                ) -> tuple[set[str], set[str]] | None:
    """The views (``view`` among them) and the base tables ``view`` reads, directly or
    through other views: every name in their SQL that ``known`` (lowercased name -> name)
    holds. None when one of them reads something else (:func:`_reads_something_else`)."""
    read_views: set[str] = set()
    read_tables: set[str] = set()
    todo = [view]
    while todo:
        name = todo.pop()
        if name in read_views:
            continue
        read_views.add(name)  # its own name, in its CREATE VIEW, comes back here
        sql = views[name]
        if _reads_something_else(sql):
            return None
        for word in {w.lower() for w in _NAME.findall(sql)}:
            found = known.get(word)
            if found in views:
                todo.append(found)
            elif found is not None:
                read_tables.add(found)
    return read_views, read_tables
