"""The toolkit's public Python API: ``from toolkit import Project``.

A :class:`Project` is what one ``toolkit`` command sees: the same project root (found as the
CLI finds it), the same settings (keyword arguments named like ``toolkit.yaml``'s keys), the
same store. The CLI's read commands and the MCP server's readers are thin layers over its
methods (``tests/test_architecture.py`` holds them to it), so each question has one
implementation and one answer. Errors are the toolkit's
(:mod:`toolkit.errors`): a :class:`~toolkit.errors.ToolkitError` says what is wrong and what to
do next.

Reads go through one read-only connection to the store, locked down as ``toolkit query``'s
(no file access, no extensions, no settings changes), opened on first use. It is closed by
:meth:`Project.refresh` (which writes) and :meth:`Project.close`: a relation returned by
:meth:`Project.sql` before then cannot be read after. Between calls the store stays free for
the CLI only once the project is closed; use ``with Project.open() as project:``. A one-shot
command refreshes with ``hold=True``: the connection that wrote stays open for the toolkit's
own reads that follow (the store is not opened a second time), and a query of the caller's
(:meth:`Project.sql`, :meth:`Project.rows`) still gets the read-only one.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, cast

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from toolkit.argrules import Rule
    from toolkit.config import Config
    from toolkit.history import Change, EntryHistory, VersionCounts
    from toolkit.ledger_ops import Dashboard, ListResult, PrunePlan, SearchHit, ShowResult
    from toolkit.records import LedgerEntry, Problem, SlopEntry
    from toolkit.reports import SlopMatrix
    from toolkit.slop_ops import Summary
    from toolkit.snapshot_ops import SnapshotListing, TurnDiff
    from toolkit.source import Progress
    from toolkit.sources.slop import SlopFile
    from toolkit.store import LoadReport, Relation, StaleSource, Store

__all__ = [
    "Approach",
    "ApproachRecord",
    "Approaches",
    "AuditHit",
    "AuditStats",
    "Dispatch",
    "LedgerHit",
    "OpenSlop",
    "Project",
    "Rows",
    "SimilarTask",
    "SlopMatches",
    "TaskRow",
    "TaskStatus",
    "TierDay",
    "Turn",
    "TurnActivity",
    "TurnFile",
]

PathLike = str | os.PathLike[str]

# Set by ``toolkit build-site`` for the kernel that runs the site's analyses: JSON
# {"root": the project folder, "settings": {toolkit.yaml key: value}}. ``Project.open`` of that
# folder takes these settings for those it is not given and does not refresh: it reads the
# copy of the store the build made (the build holds its own store open for writing) and the
# files the build read, with the build's "today".
SITE_BUILD_ENV = "TOOLKIT_SITE_BUILD"


def site_build_settings(config: Config, db: Path) -> str:
    """The value of ``TOOLKIT_SITE_BUILD`` for a build of ``config`` whose notebooks read the
    store ``db``."""
    import json

    from toolkit.loaders import settings

    values = {s.key: str(getattr(config, s.attr)) for s in settings()
              if getattr(config, s.attr) is not None}
    values["db"] = str(db)
    values["today"] = config.today_date().isoformat()
    values["site_scope"] = config.site_scope
    values["project_name"] = config.project_name
    return json.dumps({"root": str(config.project_root.resolve()), "settings": values})


def _site_build(path: PathLike | None) -> dict[str, str] | None:
    """The build's settings, when this process runs a site build's analysis of ``path``."""
    import json

    raw = os.environ.get(SITE_BUILD_ENV)
    if not raw or path is None:
        return None
    try:
        data = json.loads(raw)
        same = Path(os.fspath(path)).expanduser().resolve() == Path(data["root"])
        return {str(k): str(v) for k, v in data["settings"].items()} if same else None
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return None


# --------------------------------------------------------------------------- result types
# The shapes the existing functions return, named. Times are 'YYYY-MM-DD HH:MM:SS' text where
# the function gives text, datetimes where it gives datetimes.


class TaskStatus(TypedDict):
    """nagi-ledger's ``ledger_task_status``."""

    dispatch_count: int
    retry_count: int
    last_verdict: str | None
    over_retry_limit: bool


class Approach(TypedDict):
    approach: str
    reason: str
    ts: str


class Approaches(TypedDict):
    """nagi-ledger's ``ledger_check_approaches``: a task's approaches, newest first."""

    task: str
    dead_ends: list[Approach]
    no_gos: list[Approach]
    works: list[Approach]
    total: int


class AuditStats(TypedDict):
    """nagi-ledger's ``ledger_stats`` (keys of ``actions_by_tier`` are "0", "1", "2")."""

    actions_by_tier: dict[str, int]
    actions_by_category: dict[str, int]
    dispatch_count: int
    verdicts: dict[str, int]


class TaskRow(TypedDict):
    """One row of the ``task_status`` view."""

    task: str
    dispatch_count: int
    retry_count: int
    last_verdict: str | None
    over_retry_limit: bool
    first_dispatch: str | None
    last_dispatch: str | None
    pending: int
    confirmed: int
    refuted: int
    partial: int


class Dispatch(TypedDict):
    id: int
    ts: str | None
    task: str | None
    agent_type: str | None
    model: str | None
    brief_summary: str | None
    verdict: str | None  # None: no verdict yet (PENDING)
    verdict_ts: str | None
    verdict_notes: str | None


class ApproachRecord(TypedDict):
    id: int
    ts: str | None
    task: str | None
    approach: str | None
    outcome: str | None  # DEAD_END, NO_GO or WORKS
    reason: str | None


class AuditHit(TypedDict):
    """nagi-ledger's ``ledger_search`` row: best match first."""

    id: int
    kind: str  # actions, dispatches or approaches
    ts: str | None
    title: str | None
    status: int | str | None  # an action's tier, a dispatch's verdict (or PENDING), an outcome


class SimilarTask(TypedDict):
    """nagi-ledger's ``ledger_similar_tasks`` row: an earlier dispatch or approach."""

    kind: str  # dispatches or approaches
    id: int
    task: str
    score: float
    ts: str | None
    verdict: str | None  # the dispatch's verdict, or the approach's outcome


class HitLine(TypedDict):
    """A line of the ledger holding the searched text."""

    line: int
    text: str


class LedgerHit(TypedDict):
    """A ledger entry holding the searched text (``toolkit ledger search``, one row per entry:
    the MCP tool ``smith_ledger_search``)."""

    entry_id: str | None
    file: str
    title: str | None
    date: str | None
    category: str | None
    confidence: str | None
    path: str | None
    line: int | None  # the entry's first line
    lines: list[HitLine]  # the lines that hold the text


class Rows(NamedTuple):
    """The first rows of a query (:meth:`Project.rows`)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # the query had more than ``max_rows`` rows


class TierDay(NamedTuple):
    """Audit actions of one tier on one day (None: actions whose time is no date, in an
    all-time answer)."""

    day: str | None
    tier: int | None
    actions: int


class OpenSlop(TypedDict):
    """An open or in-progress slop entry (the handoff report's rows)."""

    id: str
    short_id: str
    bucket: str | None
    severity: str | None
    confidence: str | None
    owner: str | None
    source_links: list[str]
    title: str | None
    description: str | None
    status: str
    cleanup_recommendation: str | None
    created_at: str | None
    updated_at: str | None
    task_id: str | None
    thread_id: str | None
    path: str | None
    position: int | None
    line: int | None


class SlopMatches(NamedTuple):
    """``toolkit slop query``'s answer (:meth:`Project.slop_query`)."""

    entries: list[SlopEntry]  # in file order, at most the limit
    matched: int  # before the limit
    total: int  # entries in the file
    ledger: SlopFile  # the file as read (path, problems...)


class Turn(TypedDict):
    """One row of the ``snapshot_turns`` view: an agent turn and what it changed."""

    repo: str
    turn_key: str
    number: int  # 1 = the newest turn
    turn: int | None
    snippet: str | None
    pre_position: int | None
    post_position: int | None
    started: dt.datetime | None
    ended: dt.datetime | None
    tool_snapshots: int
    files_changed: int
    lines_added: int
    lines_deleted: int
    files: list[str]
    actions: int
    dispatches: int


class TurnFile(TypedDict):
    """One row of ``turn_files``: a file one turn changed."""

    repo: str
    turn_key: str
    span: str
    path: str
    status: str
    added: int | None
    deleted: int | None


class TurnActivity(TypedDict):
    """An audit action or dispatch recorded inside a turn's time window."""

    repo: str
    turn_key: str
    kind: str  # "action" or "dispatch"
    ts: dt.datetime
    id: int
    tier: int | None
    category: str | None
    text: str | None  # the action's description or the dispatch's task
    agent: str | None  # agent_type/model of a dispatch
    verdict: str | None  # a dispatch's verdict, or PENDING
    n: int  # how many of this kind the turn has in all


# --------------------------------------------------------------------------- the project


class Project:
    """One project's records: open with :meth:`Project.open`, close with :meth:`close` (or
    use it in a ``with`` block)."""

    def __init__(self, config: Config, *, memory_limit: str | None = None,
                 cli_words: bool = False) -> None:
        """The project of ``config`` (:meth:`open` makes one from the CLI's settings).
        ``cli_words``: a refusal names the ways to narrow a match as the toolkit's commands
        take them (``--index``, ``--file``), not as these methods' arguments (``index=``,
        ``file=``); the commands set it."""
        self.config = config
        self.memory_limit = memory_limit  # DuckDB size a query may use (None: 1GB)
        self._reader: Store | None = None
        self._held: Store | None = None  # the store a refresh with hold=True left open
        # one call at a time on this project's store connection (see _guarded)
        self._calls = threading.RLock()
        self._cli_words = cli_words

    # -- opening -------------------------------------------------------------
    @classmethod
    def open(cls, path: PathLike | None = None, *, config_file: PathLike | None = None,
             vault: PathLike | None = None, slop: PathLike | None = None,
             audit_db: PathLike | None = None, audit_json: PathLike | None = None,
             goal_file: PathLike | None = None, goal_history: PathLike | None = None,
             snapshots_home: PathLike | None = None, workspace: PathLike | None = None,
             db: PathLike | None = None, today: dt.date | str | None = None,
             site_scope: str | None = None, refresh: bool = True,
             memory_limit: str | None = None) -> Project:
        """The project at ``path`` (default: found from the current folder, as the CLI finds
        it), with the settings the CLI takes as options (``--vault`` is ``vault=``...) and
        ``toolkit.yaml`` (``today``: a date, its text, or a datetime, whose UTC date it
        takes). ``site_scope`` (``project`` or ``all``; default: the setting, else
        ``project``): whose audit actions the project's answers read, as on its site; see
        :meth:`stats_by_tier`. ``refresh`` (default): bring the store up to date first, as every
        command does; ``refresh=False`` reads the store as it is. ``memory_limit``: what a
        query may use (a DuckDB size such as ``500MB``; default 1GB). In a notebook that
        ``toolkit build-site`` runs, the project it builds opens with the build's settings
        and its copy of the store, without refreshing (``TOOLKIT_SITE_BUILD``)."""
        from toolkit.config import resolve

        def text(value: PathLike | None) -> str | None:
            return None if value is None else os.fspath(value)

        flags: dict[str, Any] = {
            "vault": text(vault), "slop": text(slop), "audit_db": text(audit_db),
            "audit_json": text(audit_json), "goal_file": text(goal_file),
            "goal_history": text(goal_history), "snapshots_home": text(snapshots_home),
            "workspace": text(workspace), "db": text(db),
            "today": today.isoformat() if isinstance(today, dt.date) else today,
            "site_scope": site_scope, "project_name": None}  # project_name: a build's
        build = _site_build(path)
        if build is not None:
            flags = {k: build.get(k) if v is None else v for k, v in flags.items()}
            refresh = False
        cfg = resolve(project=text(path), config_file=text(config_file), **flags)
        if memory_limit is not None:  # refused now, not at the first query
            from toolkit.store import check_memory_limit

            check_memory_limit(memory_limit, "Project.open: memory_limit")
        project = cls(cfg, memory_limit=memory_limit)
        if refresh:
            project.refresh()
        return project

    @property
    def root(self) -> Path:
        """The project folder."""
        return self.config.project_root

    @property
    def today(self) -> dt.date:
        """The date ages are counted to (``today`` setting, else the real date)."""
        return self.config.today_date()

    def close(self) -> None:
        """Close the store connection (relations from :meth:`sql` cannot be read after)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._held is not None:
            self._held.close()
            self._held = None

    def __enter__(self) -> Project:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Project({str(self.root)!r})"

    # -- the store -----------------------------------------------------------
    def refresh(self, *, full: bool = False, progress: Progress | None = None,
                hold: bool = False) -> LoadReport:
        """Bring the store up to date with the sources (``toolkit load``): sources that did
        not change are skipped. Returns what each source did; a source that is present but
        unreadable is in ``report.errors``, not raised (as ``toolkit status`` goes on).
        ``progress(label, done, total)`` is called before each source and once at the end.
        ``hold``: keep the store open for the reads that follow, until :meth:`close` (see the
        module's docstring); it is locked for writing meanwhile."""
        from toolkit.loaders import SOURCES
        from toolkit.store import Store

        self.close()
        self.config.check_state_links()
        store = Store.open(self.config.db_path, sources=SOURCES)
        try:
            report = store.refresh(self.config, full=full, progress=progress)
        except BaseException:
            store.close()
            raise
        self._hold(store, hold)
        return report

    def _hold(self, store: Store, hold: bool) -> None:
        from toolkit.store import yield_when_idle

        if hold:
            self._held = yield_when_idle(store, self._calls)
        else:
            store.close()

    def refresh_audit(self, *, missing_ok: bool = False, hold: bool = False) -> None:
        """Bring the store's copy of the audit DB (only that source) up to date, as the
        ``toolkit audit`` readers and the MCP tools do before each answer: the audit source's
        own error is raised (damaged DB: :class:`~toolkit.errors.DataError`, locked:
        :class:`~toolkit.errors.BusyError`) rather than answering from stale rows, and a
        missing DB is a :class:`~toolkit.errors.NotFoundError` unless ``missing_ok`` (then it
        reads as an empty ledger). The DB is never created. ``hold``: as :meth:`refresh`'s."""
        from toolkit.audit_ops import open_audit_store

        self.close()
        self._hold(open_audit_store(self.config, missing_ok=missing_ok), hold)

    def _store(self) -> Store:
        """The connection the toolkit's own reads use: the one a refresh held, else the
        read-only one (:meth:`_query_store`)."""
        if self._held is not None and self._held.closed:
            self._held = None  # closed for a connection of another Project (_query_store)
        return self._held or self._query_store()

    def _query_store(self) -> Store:
        """The read-only, locked-down store connection (opened on first use), for SQL the
        caller wrote; a held one is closed first (a process opens a store one way at a
        time).

        Both give way to another Project of this process that opens the same store another
        way (a refresh, a query with another memory limit) while this one is idle
        (``store.yield_when_idle``): a notebook that runs ``project = Project.open()`` again
        refreshes the store while the Project first bound to the name still holds it. The
        one closed so is opened again on the next call; a relation :meth:`sql` returned
        over it cannot be read after."""
        if self._held is not None:
            self._held.close()
            self._held = None
        if self._reader is not None and self._reader.closed:
            self._reader = None
        if self._reader is None:
            from toolkit.loaders import SOURCES
            from toolkit.store import Store, open_query_connection, yield_when_idle

            path = self.config.db_path
            conn = (open_query_connection(path) if self.memory_limit is None
                    else open_query_connection(path, memory_limit=self.memory_limit))
            self._reader = yield_when_idle(Store(conn, path, read_only=True, sources=SOURCES),
                                           self._calls)
        return self._reader

    def _site_view(self) -> AbstractContextManager[Store]:
        """The store reading the actions of ``site_scope``, as the project's site does
        (``Store.scope_actions``), for the questions the site answers."""
        return self._store().actions_scoped(self.config.action_scope)

    def sql(self, query: str, params: list[Any] | dict[str, Any] | None = None
            ) -> Relation:
        """One read-only SELECT over the store, with ``?`` (or ``$name``) parameters bound
        from ``params``. Returns a DuckDB relation (:class:`toolkit.store.Relation`, DuckDB's
        own as ``.relation``): ``.fetchall()``, ``.arrow()``, ``.df()`` (with pandas
        installed), ``.pl()`` (with polars). Anything but a single SELECT is refused
        (:class:`~toolkit.errors.RefusedError`), but DESCRIBE, SHOW and SUMMARIZE, which
        DuckDB runs as SELECTs (SHOW TABLES without the store's bookkeeping tables, as
        :meth:`tables`); so are a file read and a relation's writes (``to_csv``,
        ``create``...). A query that does not bind, or fails when it is read, is a
        :class:`~toolkit.errors.ToolkitError`, and so is a read after :meth:`refresh` or
        :meth:`close` (call ``sql()`` again)."""
        from toolkit.store import select_relation

        return select_relation(self._query_store().conn, query, params,
                               memory_limit=self.memory_limit)

    def _count_and_first(self, query: str, params: list[Any] | dict[str, Any] | None,
                         limit: int, *, timeout: float
                         ) -> tuple[list[str], int, list[tuple[Any, ...]]]:
        """(columns, rows, the first ``limit`` rows) of one read-only SELECT (as :meth:`sql`
        checks it) on :meth:`sql`'s connection, in one pass, interrupted after ``timeout``
        seconds (counted from before the store opens: a wait for another process's lock
        is part of it): the checks' question."""
        from toolkit.store import Deadline, count_and_first

        timer = Deadline(timeout, self.interrupt)
        try:
            return count_and_first(self._query_store().conn, query, params, limit,
                                   deadline=timer, memory_limit=self.memory_limit)
        finally:
            timer.cancel()

    def interrupt(self) -> None:
        """Stop the query running on :meth:`sql`'s connection (safe from another thread: a
        timer's timeout); the query raises a :class:`~toolkit.errors.ToolkitError`, "query
        interrupted"."""
        reader = self._reader
        if reader is not None and not reader.closed:
            reader.conn.interrupt()

    def rows(self, query: str, params: list[Any] | dict[str, Any] | None = None, *,
             max_rows: int = 10_000, timeout: float = 30.0) -> Rows:
        """The first ``max_rows`` rows of one read-only SELECT (as :meth:`sql` checks it),
        interrupted after ``timeout`` seconds: ``toolkit query``. A query that runs out of
        time or memory is a :class:`~toolkit.errors.ToolkitError`."""
        from toolkit.store import first_rows

        store = self._query_store()
        cols, rows, truncated = first_rows(store.conn, query, params, max_rows=max_rows,
                                           timeout=timeout, memory_limit=self.memory_limit)
        return Rows(cols, rows, truncated)

    def tables(self) -> dict[str, int]:
        """Rows per table and view (``toolkit status``'s Tables)."""
        return self._store().counts()

    def columns(self) -> list[tuple[str, str, str, str]]:
        """(table, kind, column, type) of every table and view (``toolkit schema``)."""
        return self._store().schema()

    def table_docs(self) -> dict[str, str]:
        """What each table and view holds (``toolkit schema``'s headings)."""
        return self._store().table_docs()

    def sources(self) -> list[dict[str, Any]]:
        """Each source: where it was found or why not, as of the last refresh (``toolkit
        status``'s Sources)."""
        return self._store().sources()

    def stale_sources(self) -> list[StaleSource]:
        """The sources present but unreadable at the last refresh, each with why and the time
        of the last good read the store still shows (the warning every command gives)."""
        return self._store().stale_sources()

    def problems(self, source: str | None = None) -> list[Problem]:
        """What the last refresh could not read, with file and line (``toolkit status``'s
        Warnings), of one ``source`` (``"audit"``, ``"ledger"``...) or of all (where one that
        two sources met reading the same path is listed once); a name that is no source's is a
        usage error (it answered no problems)."""
        store = self._store()
        names = [s.name for s in store.declared]
        if source is not None and source not in names:
            raise _usage(f"Project.problems: no source is named {source!r}; use one of "
                         + ", ".join(names))
        return store.problems(source)

    # -- the Smith Ledger (read from the vault files, as `toolkit ledger` does) ----
    # ``request``: record the read in the vault's session log (.smith/vault/sessions/) as this
    # command line, as `toolkit ledger` records each invocation; None (default): not recorded.
    def ledger_entries(self, *, category: str | None = None, confidence: str | None = None,
                       file: str | None = None) -> list[LedgerEntry]:
        """The ledger's entries in file order, filtered (AND) as ``toolkit ledger list``;
        none when the vault has no ledger (as :meth:`ledger_dashboard` reads it absent and
        the site's tables empty, where ``ledger_list`` is the command's "No Ledger found")."""
        if not (self.config.vault / "ledger").is_dir():
            from toolkit.records import ledger_kind

            if file is not None:
                ledger_kind(file)  # an unknown file is still a usage error
            return []
        result = self.ledger_list(category=category, confidence=confidence, file=file)
        return [e for _, entries in result.groups for e in entries]

    def ledger_list(self, *, category: str | None = None, confidence: str | None = None,
                    file: str | None = None, request: str | None = None) -> ListResult:
        """``toolkit ledger list``: the entries filtered (AND) by category, confidence and
        file, grouped by file, each group with its file's summary (``exists``...)."""
        from toolkit.ledger_ops import list_entries

        return list_entries(self.config.vault, category=category, confidence=confidence,
                            file=file, max_bytes=self.config.max_file_bytes, request=request,
                            log=request is not None, cache=self.config.parse_cache)

    def ledger_entry(self, title: str, *, index: int | None = None, file: str | None = None,
                     request: str | None = None,
                     unreadable: Callable[[Problem], None] | None = None) -> ShowResult:
        """``toolkit ledger show``: the entry whose title holds ``title`` (any case), as
        ``.entry`` with its block as written (``.text``). Several matches raise
        :class:`~toolkit.ledger_ops.AmbiguousMatchError` (``.matches``) unless ``index``
        picks the N-th; none is a :class:`~toolkit.errors.NotFoundError`, after
        ``unreadable(problem)`` for each file searched that could not be read."""
        from toolkit.ledger_ops import choose_hint, show

        words = {} if self._cli_words else {  # (the defaults are the command's)
            "index_name": "Project.ledger_entry: index",
            "choose": choose_hint("index=N", _FILE_ARGUMENT)}
        return show(self.config.vault, title, index=index, file=file,
                    max_bytes=self.config.max_file_bytes, request=request,
                    log=request is not None, cache=self.config.parse_cache,
                    unreadable=unreadable, **words)

    def ledger_dashboard(self, *, top: int = 5, request: str | None = None) -> Dashboard:
        """``toolkit ledger``'s dashboard: totals, entries per file by confidence, the top
        high-confidence entries."""
        from toolkit.ledger_ops import dashboard

        return dashboard(self.config.vault, max_bytes=self.config.max_file_bytes, top=top,
                         request=request, log=request is not None,
                         cache=self.config.parse_cache)

    def prune_candidates(self) -> PrunePlan:
        """What ``toolkit ledger prune`` would do today (``today``), as its ``--dry-run``
        lists it: low entries older than the low limit to remove, medium ones older than the
        medium limit to demote (limits from ``meta.yaml`` or ``.smith/config.json``); an
        entry with a problem (a missing or unknown Date, Category or Confidence) is never
        one. Writes nothing."""
        from toolkit.ledger_ops import prune_candidates

        limits = self.ledger_dashboard().limits
        return prune_candidates(self.ledger_entries(), self.today, limits)

    def ledger_search(self, text: str, *, limit: int = 20) -> list[LedgerHit]:
        """Entries holding ``text`` (any case) on any of their lines, in file order, with the
        lines: as the MCP tool ``smith_ledger_search`` answers."""
        from toolkit.ledger_ops import entry_hits

        return cast(list[LedgerHit], entry_hits(self.config.vault, text, limit=limit,
                                                max_bytes=self.config.max_file_bytes,
                                                cache=self.config.parse_cache))

    def ledger_search_lines(self, text: str, *, context: int = 2, request: str | None = None,
                            unreadable: Callable[[Problem], None] | None = None
                            ) -> list[SearchHit]:
        """``toolkit ledger search``: every line holding ``text`` (any case), with
        ``context`` lines around it, one hit per entry (the nearest entry above);
        ``unreadable(problem)`` for each file that could not be read, and was not searched."""
        from toolkit.ledger_ops import search

        return search(self.config.vault, text, context=context,
                      max_bytes=self.config.max_file_bytes, request=request,
                      log=request is not None, cache=self.config.parse_cache,
                      unreadable=unreadable)

    # -- ledger history (`toolkit ledger history`) -----------------------------
    def has_ledger_history(self) -> bool:
        """Whether there is any past version of the ledger (git commits of the vault, or
        archive, backup or snapshot copies)."""
        from toolkit.history import has_history

        return has_history(self._store())

    def ledger_history(self, *, file: str | None = None, all_sources: bool = False
                       ) -> list[VersionCounts]:
        """Every past version of the ledger, oldest first, with entries by confidence and
        the changes that led to it."""
        from toolkit.history import growth, timelines_for

        return growth(self._store(), timelines=timelines_for(all_sources), file=file)

    def ledger_changes(self, *, all_sources: bool = False, limit: int | None = None
                       ) -> list[Change]:
        """Every entry change (added, removed, promoted, demoted, reinforced, edited), newest
        first."""
        from toolkit.history import change_log, timelines_for

        return change_log(self._store(), timelines=timelines_for(all_sources), limit=limit)

    def entry_history(self, title: str, *, file: str | None = None, all_sources: bool = False
                      ) -> list[EntryHistory]:
        """The timeline of each entry whose title matches ``title``."""
        from toolkit.history import history_for_title

        words: dict[str, Any] = {} if self._cli_words else {"narrow": _FILE_ARGUMENT}
        return history_for_title(self._store(), title, file=file, all_sources=all_sources,
                                 **words)

    # -- the audit DB (nagi-ledger's questions) --------------------------------
    def task_status(self, task: str) -> TaskStatus:
        """Dispatches, retries and last verdict of one task (``toolkit audit task-status``)."""
        from toolkit.audit_ops import task_status

        return cast(TaskStatus, task_status(self._store(), task))

    def approaches(self, task: str) -> Approaches:
        """One task's dead ends, no-gos and working approaches (``toolkit audit
        approaches``)."""
        from toolkit.audit_ops import check_approaches

        return cast(Approaches, check_approaches(self._store(), task))

    def stats(self, days: int = 7, *, now: dt.datetime | None = None) -> AuditStats:
        """Actions by tier and category, dispatches and verdicts over the last ``days`` days
        before ``now`` (default: the real clock; a naive time is UTC, an aware one is
        converted to UTC, as ``--now`` is read), as ``toolkit audit stats``."""
        from toolkit.audit_ops import stats

        return cast(AuditStats, stats(self._store(), days, now=now))

    def audit_search(self, query: str, *, kinds: list[str] | None = None, limit: int = 20,
                     offset: int = 0, since_days: float | None = None,
                     now: dt.datetime | None = None) -> list[AuditHit]:
        """Actions, dispatches and approaches matching ``query``'s words, best first
        (nagi-ledger's ``ledger_search``; ``toolkit audit search``), of the last
        ``since_days`` days before ``now`` when given (``now`` read as :meth:`stats` reads
        it)."""
        from toolkit.audit_ops import search

        return cast(list[AuditHit], search(self._store(), query, kinds, limit, offset,
                                           since_days, now=now))

    def similar_tasks(self, task: str, *, limit: int = 5, min_score: float = 0.35
                      ) -> list[SimilarTask]:
        """Earlier dispatches and approaches whose task reads like ``task``, best first
        (nagi-ledger's ``ledger_similar_tasks``)."""
        from toolkit.audit_ops import similar_tasks

        return cast(list[SimilarTask], similar_tasks(self._store(), task, limit, min_score))

    def session_report(self, since_hours: int = 24, *, now: dt.datetime | None = None) -> str:
        """nagi-ledger's Markdown report of the actions and dispatches of the last
        ``since_hours`` hours before ``now`` (``toolkit audit report``; ``now`` read as
        :meth:`stats` reads it)."""
        from toolkit.audit_ops import session_report

        return session_report(self._store(), since_hours, now=now)

    def stats_by_tier(self, since: dt.date | None = None) -> list[TierDay]:
        """Actions per day (UTC) and tier (from ``since``, default: all; a datetime counts
        from its UTC date), as the site's chart and its all-time counts: with no ``since``,
        the actions whose time is no date are on day None (last), as the site counts them and
        its ``stats_by_tier`` download holds them.

        Like the site (and :meth:`turns` and :meth:`turn_activity`), it counts the actions of
        ``site_scope``: by default this project's and the unassigned ones. nagi-ledger's own
        answers above count every project's, as nagi-ledger does, and :meth:`sql` reads the
        store as it is (every project's rows, as ``toolkit query``)."""
        from toolkit.queries import site_actions_by_day_tier

        with self._site_view() as store:
            rows = site_actions_by_day_tier(store, since)
        return [TierDay(*r) for r in rows]

    def tasks(self) -> list[TaskRow]:
        """Every task's dispatches, retries, verdicts and whether it is over the retry
        limit, by task."""
        from toolkit.queries import site_task_status

        return cast(list[TaskRow], site_task_status(self._store()))

    def dispatches(self) -> list[Dispatch]:
        """Every subagent dispatch, oldest first."""
        from toolkit.queries import site_dispatches

        return cast(list[Dispatch], site_dispatches(self._store()))

    def approach_log(self) -> list[ApproachRecord]:
        """Every recorded approach of every task, oldest first."""
        from toolkit.queries import site_approaches

        return cast(list[ApproachRecord], site_approaches(self._store()))

    # -- the slop ledger (read from its file, as `toolkit slop` does) ----------
    def slop_ledger(self) -> SlopFile:
        """The slop ledger file as read: ``path``, ``exists``, ``form``, ``entries`` and the
        ``problems`` found in it (a missing file is an empty ledger, as in CodeSmith)."""
        from toolkit.slop_ops import load

        return load(self.config.slop_path, self.config.max_file_bytes)

    def slop_summary(self, ledger: SlopFile | None = None) -> Summary:
        """``toolkit slop``'s summary: totals, counts by bucket and by status (of ``ledger``,
        a :meth:`slop_ledger` already read, else of the file read now)."""
        from toolkit.slop_ops import summarize

        return summarize((self.slop_ledger() if ledger is None else ledger).entries)

    def slop_entries(self, *, bucket: str | None = None, severity: str | None = None,
                     status: str | None = None, confidence: str | None = None,
                     search: str | None = None, owner: str | None = None,
                     older_than: int | None = None, limit: int | None = None
                     ) -> list[SlopEntry]:
        """Slop entries in file order, filtered (AND) as ``toolkit slop query`` (values read
        leniently: ``done``, ``InProgress``...); ``limit`` None: all of them."""
        return self.slop_query(bucket=bucket, severity=severity, status=status,
                               confidence=confidence, search=search, owner=owner,
                               older_than=older_than, limit=limit).entries

    def slop_query(self, *, bucket: str | None = None, severity: str | None = None,
                   status: str | None = None, confidence: str | None = None,
                   search: str | None = None, owner: str | None = None,
                   older_than: int | None = None, limit: int | None = None) -> SlopMatches:
        """``toolkit slop query``: :meth:`slop_entries`' ``entries`` with how many
        ``matched`` before the limit (None: no limit), the ``total`` in the file and
        the file as read (``ledger``). An unknown value is a
        :class:`~toolkit.errors.UsageError` listing the valid ones."""
        from toolkit.slop_ops import SlopFilter, parse_enum, query

        def enum(name: str, value: str | None) -> str | None:
            return None if value is None else parse_enum(name, value)

        flt = SlopFilter(bucket=enum("bucket", bucket), severity=enum("severity", severity),
                         status=enum("status", status),
                         confidence=enum("confidence", confidence), search=search,
                         owner=owner, older_than=older_than, today=self.today, limit=limit)
        ledger = self.slop_ledger()
        result = query(ledger.entries, flt)
        return SlopMatches(result.entries, result.matched, result.total, ledger)

    def open_slop(self) -> list[OpenSlop]:
        """Open and in-progress slop, by bucket, then severity (critical first): the handoff
        report's list."""
        from toolkit.queries import handoff_open_slop

        return cast(list[OpenSlop], handoff_open_slop(self._store()))

    def slop_matrix(self) -> SlopMatrix:
        """:meth:`open_slop` counted by bucket and severity, as the site's and the handoff's
        table counts it: ``buckets`` (rows) in CodeSmith's order, then any others sorted, no
        bucket (None) last; ``severities`` (columns) critical first, then any others;
        ``counts[(bucket, severity)]``."""
        from toolkit.reports import slop_matrix

        return slop_matrix(cast(list[dict[str, Any]], self.open_slop()))

    # -- turns (CodeSmith snapshots, with the audit rows of each turn) ---------
    def turns(self) -> list[Turn]:
        """Every agent turn: its window, files and lines changed, actions and dispatches."""
        from toolkit.history import turn_summaries

        with self._site_view() as store:
            return cast(list[Turn], turn_summaries(store))

    def snapshots(self, *, limit: int | None = None) -> SnapshotListing:
        """``toolkit snapshots``: the workspace's turn snapshots read from CodeSmith's side
        repository, newest first and numbered from 1 as ``/restore`` numbers them (at most
        ``limit``; ``total`` counts them all)."""
        from toolkit.snapshot_ops import list_snapshots

        return list_snapshots(self.config, limit)

    def turn_diff(self, number: int | None = None, *, turn: int | None = None,
                  patch: bool = False) -> TurnDiff:
        """``toolkit snapshots diff``: what the turn that snapshot ``number`` belongs to
        changed (or the newest turn labelled ``turn``), net and step by step; ``patch``: with
        the unified diff."""
        from toolkit.snapshot_ops import turn_diff

        return turn_diff(self.config, number, turn=turn, with_patch=patch)

    def turn_files(self) -> list[TurnFile]:
        """Every file each turn changed, with lines added and deleted."""
        from toolkit.queries import site_rows

        return cast(list[TurnFile], site_rows(self._store(), "turn_files"))

    def turn_activity(self, *, per_turn: int = 50) -> list[TurnActivity]:
        """The audit actions and dispatches logged inside each turn's window (at most
        ``per_turn`` of each kind per turn)."""
        from toolkit.history import turn_activity_rows

        with self._site_view() as store:
            return cast(list[TurnActivity], turn_activity_rows(store, per_turn=per_turn))


# --------------------------------------------------------------------------- each call
#
# Argument types. The CLI's options check their values' types (click); a notebook calling the
# API with the wrong type met an AttributeError or TypeError from deep inside
# (``stats(now="2026-11-28")``: 'str' object has no attribute 'tzinfo';
# ``audit_search(kinds="approaches")`` read the text as a list of one-letter kinds). Each
# public method's arguments whose annotation is one of these simple types are checked when it
# is called: a UsageError naming the method, the argument and what it takes. Other
# annotations (paths, callables, flags) are not checked.
#
# Threads. A project reads through one DuckDB connection, which takes one call at a time: a
# Project used from several threads at once failed with DuckDB's errors (ResourceInUse, "the
# connection has already been closed" when one thread's refresh closed it under another's
# query). Each public method holds the project's lock for its call; :meth:`Project.interrupt`
# does not (it stops the call that holds it). A relation :meth:`Project.sql` returns runs
# when it is fetched, outside the lock: from several threads, use :meth:`Project.rows`.

def _is_int(v: Any) -> bool:
    """A whole number: an int or what stands for one (``operator.index``: numpy's integers),
    not a bool."""
    import operator

    if isinstance(v, bool):
        return False
    try:
        operator.index(v)
    except TypeError:
        return False
    return True


def _is_number(v: Any) -> bool:
    import numbers

    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_texts(v: Any) -> bool:
    """Texts in any collection (a list, a tuple, a set...), not one text (its letters)."""
    from collections.abc import Collection

    return (isinstance(v, Collection) and not isinstance(v, (str, bytes, dict))
            and all(isinstance(x, str) for x in v))


def _whole(v: Any) -> int:
    """A whole number as the code below expects it: an int (numpy's integers converted)."""
    import operator

    return v if type(v) is int else operator.index(v)


def _utc_time(v: dt.datetime) -> dt.datetime:
    """A datetime argument as UTC (``clock.naive_utc``, as ``--now`` is read): an aware one
    converted, a naive one taken as UTC."""
    from toolkit.clock import naive_utc

    return naive_utc(v)


def _utc_day(v: Any) -> Any:
    """A date argument given as a datetime: the UTC date of that time (as a datetime argument
    is read); a date or text as given."""
    return _utc_time(v).date() if isinstance(v, dt.datetime) else v


# annotation: (does a value fit, what the message says it must be, the value passed on)
_CHECKED: dict[str, tuple[Callable[[Any], bool], str, Callable[[Any], Any] | None]] = {
    "str": (lambda v: isinstance(v, str), "text", None),
    "int": (_is_int, "a whole number", _whole),
    "float": (_is_number, "a number", None),
    "dt.datetime": (lambda v: isinstance(v, dt.datetime), "a datetime.datetime", _utc_time),
    "dt.date": (lambda v: isinstance(v, dt.date), "a datetime.date", _utc_day),
    "dt.date | str": (lambda v: isinstance(v, (dt.date, str)), "a datetime.date or text",
                      _utc_day),
    "list[str]": (_is_texts, "a list of text", None),
    # (bytes are no path here: the settings and the store name their paths as text)
    "PathLike": (lambda v: isinstance(v, (str, os.PathLike)), "a path (text or a Path)", None),
    "list[Any] | dict[str, Any]": (lambda v: isinstance(v, (list, tuple, dict)),
                                   "a list or a dict of values", None),
}


# how a refusal of the API names its ``file=`` argument (the CLI's names --file)
_FILE_ARGUMENT = 'file (e.g. file="patterns")'


@functools.cache  # (asked once per public method as the class is made)
def _value_rules() -> dict[str, dict[str, Rule]]:
    """Method -> argument -> the values it takes beyond its type: the rule the CLI's option
    for it is built from (``toolkit.argrules``), so a value the option refuses is refused
    here too, naming the method and the argument (``Project.rows: max_rows must be a whole
    number from 1 to 1,000,000, not 0``). A limit of None is no limit; 0 is refused."""
    from toolkit import argrules as r

    ledger_filter: dict[str, Rule] = {"category": r.CATEGORY, "confidence": r.CONFIDENCE}
    slop_filter: dict[str, Rule] = {"older_than": r.OLDER_THAN, "limit": r.LIMIT}
    return {"open": {"today": r.TODAY}, "rows": {"max_rows": r.MAX_ROWS},
            "ledger_entries": ledger_filter, "ledger_list": ledger_filter,
            "ledger_entry": {"title": r.TITLE, "index": r.INDEX},
            "entry_history": {"title": r.TITLE},
            "ledger_dashboard": {"top": r.COUNT},
            # (ledger_search's limit: ledger_ops.entry_hits, in the MCP tool's words)
            "ledger_search_lines": {"context": r.COUNT},
            "ledger_changes": {"limit": r.LIMIT},
            "slop_entries": slop_filter, "slop_query": slop_filter,
            "snapshots": {"limit": r.LIMIT},
            "turn_activity": {"per_turn": r.LIMIT}}


def _usage(message: str) -> Exception:
    """A :class:`~toolkit.errors.UsageError` (imported here, outside Project: the
    architecture test reads Project's imports as the readers it asks)."""
    from toolkit.errors import UsageError

    return UsageError(message)


def _guarded(name: str, fn: Callable[..., Any], *, lock: bool) -> Callable[..., Any]:
    """``fn`` (a public method of Project named ``name``) with its simple arguments checked
    and, with ``lock``, run under the project's lock (its first argument's)."""
    import inspect

    sig = inspect.signature(fn)
    checks: dict[str, tuple[Callable[[Any], bool], str, Callable[[Any], Any] | None, bool]] = {}
    for p in sig.parameters.values():
        text = str(p.annotation)
        optional = text.endswith(" | None")
        found = _CHECKED.get(text.removesuffix(" | None"))
        if found is not None:
            checks[p.name] = (*found, optional)
    values = _value_rules().get(name, {})
    if not checks and not lock:
        return fn

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments, checked and passed on as the code below expects them: a
        whole number that is not an int (numpy's) as one, a datetime in UTC."""
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return args, kwargs  # Python's own error for a missing or extra argument
        for arg, value in bound.arguments.items():
            rule = checks.get(arg)
            if rule is None or (value is None and rule[3]):
                continue
            fits, what, convert, optional = rule
            if not fits(value):
                raise _usage(f"Project.{name}: {arg} must be {what}"
                             f"{' or None' if optional else ''}, not {value!r}")
            if convert is not None:
                try:
                    bound.arguments[arg] = convert(value)
                except OverflowError:  # (9999-12-31 23:00-05:00 is past year 9999 in UTC)
                    raise _usage(f"Project.{name}: {arg} {value!r} is past year 9999 in "
                                 "UTC") from None
            allowed = values.get(arg)
            if allowed is not None and not allowed.fits(bound.arguments[arg]):
                raise _usage(f"Project.{name}: {arg} must be {allowed.describe()}"
                             f"{' or None' if optional else ''}, not {value!r}")
        return bound.args, bound.kwargs

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if checks:
            args, kwargs = check(args, kwargs)
        if not lock:
            return fn(*args, **kwargs)
        with args[0]._calls:
            return fn(*args, **kwargs)

    return call


def _guard_methods(cls: type) -> None:
    import inspect

    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, classmethod):
            setattr(cls, name, classmethod(_guarded(name, member.__func__, lock=False)))
        elif inspect.isfunction(member):
            setattr(cls, name, _guarded(name, member, lock=name != "interrupt"))


_guard_methods(Project)
