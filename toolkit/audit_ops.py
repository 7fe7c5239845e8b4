"""The nagi-ledger operations: writers on the audit DB and readers through the store.

Writers (``log_action``, ``log_dispatch``, ``log_verdict``, ``log_approach``) open the SQLite
DB the way nagi-ledger does (FORMATS.md §3.1): parent folder created, ``PRAGMA
foreign_keys=ON``, ``journal_mode=WAL``, ``busy_timeout=5000``, then nagi-ledger's own
``CREATE TABLE IF NOT EXISTS`` statements. The DB they leave is one nagi-ledger reads and
writes unchanged. Only a writer ever creates the DB.

Readers (``task_status``, ``check_approaches``, ``session_report``, ``stats``, ``search``,
``similar_tasks``) read the DuckDB store (refreshed from the audit DB first) through the named
queries in ``toolkit.queries`` and return nagi-ledger's shapes: the same keys, the same
``'YYYY-MM-DD HH:MM:SS'`` timestamps, the same Markdown.

Validation mirrors nagi-ledger's ``ValueError`` messages word for word (they name the valid
values); here they are ``UsageError`` (exit 2). An unknown dispatch id is a ``NotFoundError``
(exit 1); a locked DB a ``BusyError`` (exit 75) after the busy timeout, with nothing written.

"Now" for the time windows (``since_hours``, ``days``, ``since_days``) is a parameter, so
callers can inject it (``--now`` / ``TOOLKIT_NOW`` on the command line); an injected now also
ends the window there. Writers always stamp rows with SQLite's ``datetime('now')``, as
nagi-ledger does.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.clock import naive_utc
from toolkit.errors import BusyError, DataError, NotFoundError, ToolkitError, UsageError
from toolkit.records import (
    AUDIT_OUTCOMES,
    AUDIT_TIERS,
    AUDIT_VERDICTS,
    BIGINT_BOUND,
    RETRY_LIMIT,
    fits,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from toolkit.config import Config
    from toolkit.store import Store

BUSY_TIMEOUT_MS = 5000  # nagi-ledger's busy timeout; tests lower it
SEARCH_KINDS: tuple[str, ...] = ("actions", "dispatches", "approaches")

# nagi-ledger's schema (ledger.py SCHEMA; formats/nagi-ledger/audit_schema.sql): no indexes,
# no foreign keys, no schema version. Kept to the byte: SQLite stores each CREATE statement's
# text in sqlite_master, so a DB the toolkit creates shows nagi-ledger's own `.schema`.
SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS actions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts TEXT NOT NULL DEFAULT (datetime('now')),
  tier INTEGER NOT NULL CHECK(tier IN (0,1,2)),
  category TEXT NOT NULL,
  description TEXT NOT NULL,
  project TEXT
);
CREATE TABLE IF NOT EXISTS dispatches (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts TEXT NOT NULL DEFAULT (datetime('now')),
  task TEXT NOT NULL,
  agent_type TEXT NOT NULL,
  model TEXT NOT NULL,
  brief_summary TEXT NOT NULL,
  verdict TEXT CHECK(verdict IN ('CONFIRMED','REFUTED','PARTIAL') OR verdict IS NULL),
  verdict_ts TEXT,
  verdict_notes TEXT
);
CREATE TABLE IF NOT EXISTS approaches (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts TEXT NOT NULL DEFAULT (datetime('now')),
  task TEXT NOT NULL,
  approach TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK(outcome IN ('DEAD_END','NO_GO','WORKS')),
  reason TEXT NOT NULL
);
"""


# --------------------------------------------------------------------------- validation

def _nonempty(value: Any, field: str) -> str:
    if value is None or not str(value).strip():
        raise UsageError(f"'{field}' must be a non-empty string.")
    return str(value).strip()


def _check_tier(tier: Any) -> int:
    if isinstance(tier, bool) or tier not in AUDIT_TIERS:
        raise UsageError(f"Invalid tier {tier!r}: must be one of {AUDIT_TIERS} "
                         "(0=info, 1=notable, 2=high-impact).")
    return int(tier)


def _check_verdict(verdict: Any) -> str:
    if verdict not in AUDIT_VERDICTS:
        raise UsageError(f"Invalid verdict {verdict!r}: must be one of {AUDIT_VERDICTS}.")
    return str(verdict)


def _check_outcome(outcome: Any) -> str:
    if outcome not in AUDIT_OUTCOMES:
        raise UsageError(
            f"Invalid outcome {outcome!r}: must be one of {AUDIT_OUTCOMES} "
            "(DEAD_END=tried and failed, NO_GO=decided against without trying, "
            "WORKS=confirmed working).")
    return str(outcome)


def _positive(value: Any, field: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UsageError(f"'{field}' must be a positive number.")
    return value


# --------------------------------------------------------------------------- writing

def _writer_error(exc: sqlite3.Error, path: Path) -> ToolkitError:
    msg = str(exc)
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return BusyError("audit DB is busy (locked by another process); nothing was written",
                         path=path, hint="Retry in a moment")
    if "not a database" in low or "malformed" in low or "disk image" in low:
        return DataError(f"database is damaged ({msg}); nothing was written", path=path,
                         hint="Restore the audit DB from a backup")
    if "readonly" in low or "read-only" in low or "unable to open" in low:
        return ToolkitError(f"cannot write the audit DB ({msg}); nothing was written", path=path,
                            hint="Check the file and folder permissions")
    foreign = "no column named" in low or "no such table" in low or "no such column" in low
    return ToolkitError(f"audit DB write failed ({msg}); nothing was written", path=path,
                        hint="Its tables are not nagi-ledger's: point NAGI_LEDGER_DB or "
                             "--audit-db at nagi-ledger's ledger.db" if foreign else None)


@contextmanager
def _writer(path: Path, *, timeout_ms: int | None = None) -> Iterator[sqlite3.Connection]:
    """A connection opened like nagi-ledger's ``get_connection`` (creates the DB if missing).

    A file that is there but is not an SQLite DB (junk, truncated) is refused before SQLite
    touches it, so it is never "repaired" into an empty DB and no -wal/-shm appear beside it.
    """
    from toolkit.sources.audit import check_file, open_sqlite

    path = Path(path)
    if path.exists() and not (path.is_file() and path.stat().st_size == 0):
        check_file(path)
    timeout_ms = BUSY_TIMEOUT_MS if timeout_ms is None else timeout_ms
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise ToolkitError(f"cannot create the audit DB folder ({why})", path=path.parent,
                           hint="Point NAGI_LEDGER_DB or --audit-db at a writable place"
                           ) from None
    conn = None
    try:
        conn = open_sqlite(path, read_only=False, timeout=timeout_ms / 1000,
                           isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
        conn.executescript(SCHEMA_SQL)
        yield conn
    except sqlite3.Error as exc:
        if conn is not None and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise _writer_error(exc, path) from None
    finally:
        if conn is not None:
            conn.close()


def log_action(db: Path, tier: Any, category: Any, description: Any,
               project: Any = None) -> dict[str, int]:
    """Record an autonomous action. Returns ``{"id": int}`` (ledger_log_action)."""
    tier = _check_tier(tier)
    category = _nonempty(category, "category")
    description = _nonempty(description, "description")
    project = str(project).strip() if project else None
    with _writer(db) as conn:
        cur = conn.execute(
            "INSERT INTO actions (tier, category, description, project) VALUES (?, ?, ?, ?)",
            (tier, category, description, project))
        return {"id": int(cur.lastrowid or 0)}


def log_dispatch(db: Path, task: Any, agent_type: Any, model: Any, brief_summary: Any
                 ) -> dict[str, Any]:
    """Record a subagent dispatch (ledger_log_dispatch).

    Returns ``{"id", "retry_count", "similar"}``: ``retry_count`` counts the EARLIER dispatches
    with exactly this task; ``similar`` is ``ledger_similar_tasks`` with its defaults, taken
    before the insert, so it lists earlier dispatches of this very task too (score 1.0).
    """
    task = _nonempty(task, "task")
    agent_type = _nonempty(agent_type, "agent_type")
    model = _nonempty(model, "model")
    brief_summary = _nonempty(brief_summary, "brief_summary")
    with _writer(db) as conn:
        conn.execute("BEGIN IMMEDIATE")  # the count, the similar rows and the insert agree
        prior = conn.execute("SELECT COUNT(*) FROM dispatches WHERE task = ?",
                             (task,)).fetchone()[0]
        candidates = _sqlite_candidates(conn)
        cur = conn.execute(
            "INSERT INTO dispatches (task, agent_type, model, brief_summary) VALUES (?, ?, ?, ?)",
            (task, agent_type, model, brief_summary))
        conn.execute("COMMIT")
        new_id = int(cur.lastrowid or 0)
    return {"id": new_id, "retry_count": int(prior), "similar": rank_similar(task, candidates)}


def log_verdict(db: Path, dispatch_id: Any, verdict: Any, notes: Any = None) -> dict[str, Any]:
    """Attach a verdict to a dispatch (ledger_log_verdict). Returns ``{"ok": True, "task"}``."""
    verdict = _check_verdict(verdict)
    if isinstance(dispatch_id, bool) or not isinstance(dispatch_id, int):
        raise UsageError(f"Invalid dispatch_id {dispatch_id!r}: must be an integer id returned "
                         "by ledger_log_dispatch.")
    with _writer(db) as conn:
        conn.execute("BEGIN IMMEDIATE")
        # an id SQLite cannot hold is no dispatch's (sqlite3 raised OverflowError for it)
        row = conn.execute("SELECT task FROM dispatches WHERE id = ?", (dispatch_id,)
                           ).fetchone() if fits(dispatch_id, BIGINT_BOUND) else None
        if row is None:
            conn.execute("ROLLBACK")
            raise NotFoundError(
                f"No dispatch found with id={dispatch_id}. "
                "Call ledger_log_dispatch first, or check the id via ledger_task_status.")
        conn.execute("UPDATE dispatches SET verdict = ?, verdict_ts = datetime('now'), "
                     "verdict_notes = ? WHERE id = ?", (verdict, notes, dispatch_id))
        conn.execute("COMMIT")
    return {"ok": True, "task": row[0]}


def log_approach(db: Path, task: Any, approach: Any, outcome: Any, reason: Any
                 ) -> dict[str, int]:
    """Record an approach's outcome (ledger_log_approach). Returns ``{"id": int}``."""
    task = _nonempty(task, "task")
    approach = _nonempty(approach, "approach")
    reason = _nonempty(reason, "reason")
    outcome = _check_outcome(outcome)
    with _writer(db) as conn:
        cur = conn.execute(
            "INSERT INTO approaches (task, approach, outcome, reason) VALUES (?, ?, ?, ?)",
            (task, approach, outcome, reason))
        return {"id": int(cur.lastrowid or 0)}



def insert_rows(db: Path, *, actions: Iterable[Sequence[Any]] = (),
                dispatches: Iterable[Sequence[Any]] = (),
                approaches: Iterable[Sequence[Any]] = ()) -> None:
    """Add whole rows that carry their own times, in one transaction, through the connection
    the ``log_*`` writers use (nagi-ledger's pragmas and DDL); then fold the WAL into the DB.

    Rows are tuples in column order without ``id``: actions ``(ts, tier, category,
    description, project)``, dispatches ``(ts, task, agent_type, model, brief_summary, verdict,
    verdict_ts, verdict_notes)``, approaches ``(ts, task, approach, outcome, reason)``. For
    writing history (``toolkit demo``); an agent's live log goes through the ``log_*`` calls.
    """
    with _writer(db) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO actions (ts, tier, category, description, project) "
                         "VALUES (?, ?, ?, ?, ?)", actions)
        conn.executemany("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, "
                         "verdict, verdict_ts, verdict_notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         dispatches)
        conn.executemany("INSERT INTO approaches (ts, task, approach, outcome, reason) "
                         "VALUES (?, ?, ?, ?, ?)", approaches)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

# --------------------------------------------------------------------------- similarity
#
# nagi-ledger's matching rules (ledger.py ``_tokenize``, ``_score``, ``_similarity``), kept to
# the letter so ``ledger_search`` and ``ledger_similar_tasks`` answer as nagi-ledger does.

_NAGI_WORD = re.compile(r"[a-z0-9]+")
_SPACE = re.compile(r"\s+")


def token_set(text: str) -> frozenset[str]:
    """nagi-ledger's match units: lowercase ASCII words (``[a-z0-9]+``), plus the character
    2-grams of whatever text is left once the words are cut out and whitespace removed.

    The leftover holds CJK text (so "大規模ログ" gives 大規, 規模, 模ロ, ログ) and also
    punctuation and non-ASCII letters: "Review PR #42 (billing)" leaves "#()" and so has the
    units ``#(`` and ``()`` besides review, pr, 42, billing.
    """
    low = text.lower()
    units = set(_NAGI_WORD.findall(low))
    rest = _SPACE.sub("", _NAGI_WORD.sub(" ", low))
    units.update(rest[i:i + 2] for i in range(len(rest) - 1))
    return frozenset(units)


def match_score(query_units: frozenset[str], text: str | None) -> float:
    """The fraction of the query's units that ``text`` holds (0.0 for an empty side)."""
    if not query_units or not text:
        return 0.0
    units = token_set(text)
    if not units:
        return 0.0
    return len(query_units & units) / len(query_units)


def similarity(a: str, b: str) -> float:
    """nagi-ledger's task similarity: min(difflib ratio of the lowercased strings, Jaccard of
    their match units), in [0, 1]. ``a`` is the task asked about, ``b`` the recorded one."""
    return _similarity(a, token_set(a), b, token_set(b), 0.0)


def _similarity(a: str, ta: frozenset[str], b: str, tb: frozenset[str], floor: float
                ) -> float:
    """``similarity``; a result below ``floor`` may be a cheaper upper bound of the score."""
    union = ta | tb
    jaccard = len(ta & tb) / len(union) if union else 0.0
    if jaccard < floor:
        return jaccard  # the min cannot reach the floor: skip the costly ratio
    sm = difflib.SequenceMatcher(None, a.lower(), b.lower())
    if sm.real_quick_ratio() < floor or sm.quick_ratio() < floor:
        return min(jaccard, sm.quick_ratio())  # both bound ratio() from above
    return min(sm.ratio(), jaccard)


@dataclass(frozen=True)
class Candidate:
    kind: str  # dispatches | approaches
    id: int
    task: str
    ts: str | None
    verdict: str | None  # the dispatch's verdict (None when not given yet) or the outcome


def rank_similar(task: str, candidates: Iterable[Candidate], *, limit: int = 5,
                 min_score: float = 0.35) -> list[dict[str, Any]]:
    """nagi-ledger's ``similar_tasks`` over ``candidates`` (dispatches by id, then approaches
    by id): every row scoring at least ``min_score``, score rounded to 4 places, best first;
    equal rounded scores keep the candidates' order."""
    units = token_set(task)
    cache: dict[str, float] = {}
    scored: list[tuple[float, dict[str, Any]]] = []
    for c in candidates:
        score = cache.get(c.task)
        if score is None:
            score = cache[c.task] = _similarity(task, units, c.task, token_set(c.task),
                                                min_score)
        if score >= min_score:
            rounded = round(score, 4)
            scored.append((rounded, {"kind": c.kind, "id": c.id, "task": c.task,
                                     "score": rounded, "ts": c.ts, "verdict": c.verdict}))
    scored.sort(key=lambda sr: sr[0], reverse=True)
    return [row for _, row in scored[:limit]]


def _sqlite_candidates(conn: sqlite3.Connection) -> list[Candidate]:
    """Every dispatch by id, then every approach by id (writer side)."""
    rows = conn.execute("SELECT 'dispatches', id, task, ts, verdict FROM dispatches "
                        "ORDER BY id").fetchall()
    rows += conn.execute("SELECT 'approaches', id, task, ts, outcome FROM approaches "
                         "ORDER BY id").fetchall()
    return [Candidate(k, int(i), str(t), ts, v) for k, i, t, ts, v in rows
            if isinstance(i, int) and t is not None]


# --------------------------------------------------------------------------- reading

def parse_now(value: str | None) -> dt.datetime | None:
    """``--now`` / ``TOOLKIT_NOW``: an ISO date-time, UTC unless it carries an offset."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    try:
        # (9999-12-31T23:00-05:00 is past year 9999 in UTC: OverflowError)
        when = naive_utc(dt.datetime.fromisoformat(text.replace("Z", "+00:00")))
    except (ValueError, OverflowError):
        raise UsageError(f"--now: {text!r} is not a date-time; use 'YYYY-MM-DD HH:MM:SS' (UTC)"
                         ) from None
    return when


def _window(now: dt.datetime | None, amount: float, unit: str
            ) -> tuple[str | None, dt.datetime | None]:
    """(since, until) of the window reaching ``amount`` ``unit`` (hours, days) before now.

    ``since`` is nagi-ledger's start exactly: the text of SQLite's ``datetime(now, '-N
    unit')``, which the rows' ``ts`` text is compared with (nagi-ledger's ``ts >= datetime('now',
    ?)`` on a TEXT column), so every number and every ``ts`` gets nagi-ledger's answer: a start
    before year 1 (a negative year, ``-0001-...``, before every digit) keeps every row written
    as a date; a number SQLite cannot apply (it answers NULL, and ``ts >= NULL`` holds for no
    row) gives ``since`` None: an empty window. Without an injected now this is nagi-ledger's
    window (no end); with one the window also ends there.

    An aware ``now`` is converted to UTC first (``clock.naive_utc``), as ``--now`` is: its
    wall-clock digits started the window in its own zone while the end was bound in UTC, so
    12:00 in Tokyo answered for 12:00 UTC back to 03:00 UTC.
    """
    now = None if now is None else naive_utc(now)
    base = "now" if now is None else now.strftime("%Y-%m-%d %H:%M:%S.%f")
    conn = sqlite3.connect(":memory:")
    try:
        [(start,)] = conn.execute("SELECT datetime(?, ?)", (base, f"-{amount} {unit}"))
    finally:
        conn.close()
    return start, now


def open_audit_store(cfg: Config, *, missing_ok: bool = False) -> Store:
    """The store with the audit tables brought up to date from the audit DB.

    Raises the audit source's own error (damaged: 65, busy: 75) rather than answering from
    stale rows, and "audit DB not found" (without creating it) unless ``missing_ok``, when a
    missing DB reads as an empty ledger.
    """
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    cfg.check_state_links()
    store = Store.open(cfg.db_path, sources=SOURCES)
    try:
        report = store.refresh(cfg, only=["audit"])
        for r in report.results:
            err = r.error
            if err is not None:
                raise err
            if not r.found and not missing_ok:
                raise NotFoundError("audit DB not found", path=cfg.audit_db,
                                    hint="Set NAGI_LEDGER_DB or --audit-db, or log something "
                                         "first with `toolkit audit log-action`")
    except BaseException:
        store.close()
        raise
    return store


def task_status(store: Store, task: Any) -> dict[str, Any]:
    """ledger_task_status: dispatch_count, retry_count, last_verdict, over_retry_limit."""
    from toolkit import queries

    task = _nonempty(task, "task")
    count, last = queries.audit_task_dispatch_summary(store, task)
    retries = max(count - 1, 0)
    return {"dispatch_count": count, "retry_count": retries, "last_verdict": last,
            "over_retry_limit": retries >= RETRY_LIMIT}


def check_approaches(store: Store, task: Any) -> dict[str, Any]:
    """ledger_check_approaches: the task's approaches by outcome, newest first."""
    from toolkit import queries

    task = _nonempty(task, "task")
    rows = queries.audit_task_approaches(store, task)
    buckets: dict[str, list[dict[str, Any]]] = {"DEAD_END": [], "NO_GO": [], "WORKS": []}
    for r in rows:
        if r["outcome"] in buckets:
            buckets[r["outcome"]].append({"approach": r["approach"], "reason": r["reason"],
                                          "ts": r["ts"]})
    return {"task": task, "dead_ends": buckets["DEAD_END"], "no_gos": buckets["NO_GO"],
            "works": buckets["WORKS"], "total": len(rows)}


def session_report(store: Store, since_hours: Any = 24, *, now: dt.datetime | None = None
                   ) -> str:
    """ledger_session_report: Markdown of the actions and dispatches of the last N hours."""
    from toolkit import queries

    since_hours = _positive(since_hours, "since_hours")
    since, until = _window(now, since_hours, "hours")
    actions = queries.audit_actions_since(store, since, until)
    dispatches = queries.audit_dispatches_since(store, since, until)
    if not actions and not dispatches:
        return f"No entries in the last {since_hours}h."
    lines = [f"## 自律実行リスト (last {since_hours}h)", ""]
    if actions:
        by_category: dict[str, list[dict[str, Any]]] = {}
        for a in actions:
            by_category.setdefault(a["category"], []).append(a)
        for category in sorted(by_category, key=lambda c: (c is None, c or "")):
            lines.append(f"### {'[???]' if category is None else category}")
            for a in by_category[category]:
                tier = "???" if a["tier"] is None else a["tier"]
                desc = "[???]" if a["description"] is None else a["description"]
                suffix = f" ({a['project']})" if a["project"] else ""
                lines.append(f"- [Tier {tier}] {desc}{suffix}")
            lines.append("")
    else:
        lines += ["(no actions)", ""]
    lines.append("## Dispatches")
    if dispatches:
        for d in dispatches:
            lines.append(f"- {d['task']} → {d['agent_type']}/{d['model']} → "
                         f"{d['verdict'] or 'PENDING'}")
    else:
        lines.append("(no dispatches)")
    return "\n".join(lines)


def stats(store: Store, days: Any = 7, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """ledger_stats: actions by tier and category, dispatch count, verdicts (NULL = PENDING)."""
    from toolkit import queries

    days = _positive(days, "days")
    since, until = _window(now, days, "days")
    by_tier = {str(t): 0 for t in AUDIT_TIERS}
    for tier, n in queries.audit_action_counts_by_tier(store, since, until):
        if tier is not None:
            by_tier[str(tier)] = n
    by_category = dict(queries.audit_action_counts_by_category(store, since, until))
    verdicts = {v: 0 for v in AUDIT_VERDICTS}
    verdicts["PENDING"] = 0
    for verdict, n in queries.audit_verdict_counts(store, since, until):
        verdicts[verdict or "PENDING"] = verdicts.get(verdict or "PENDING", 0) + n
    return {"actions_by_tier": by_tier, "actions_by_category": by_category,
            "dispatch_count": queries.audit_dispatch_count(store, since, until),
            "verdicts": verdicts}


def search(store: Store, query: Any, kinds: Sequence[str] | None = None, limit: Any = 20,
           offset: Any = 0, since_days: Any = None, *, now: dt.datetime | None = None
           ) -> list[dict[str, Any]]:
    """ledger_search: index rows ``{id, kind, ts, title, status}``, best match first.

    nagi-ledger's rules: a row's score is the sum over three fields of the fraction of the
    query's match units (``token_set``) the field holds: an action's description, category
    and project; a dispatch's task, brief_summary and verdict_notes; an approach's task,
    approach and reason. Rows scoring above 0 come back by score, then newest ``ts``, then
    actions, dispatches, approaches by id. Titles: the description, the task, or
    ``task: approach``; status: the tier (an integer), the verdict or PENDING, the outcome.
    Bodies are scored but never returned.
    """
    from toolkit import queries

    query = _nonempty(query, "query")
    selected = set(kinds) if kinds else set(SEARCH_KINDS)
    unknown = selected - set(SEARCH_KINDS)
    if unknown:
        raise UsageError(f"Invalid kinds {sorted(unknown)}: must be a subset of {SEARCH_KINDS}.")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise UsageError("'limit' must be a positive integer.")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise UsageError("'offset' must be non-negative.")
    since = until = None
    if since_days is not None:
        since, until = _window(now, _positive(since_days, "since_days"), "days")
    if since_days is not None and since is None:
        return []  # SQLite could not compute the window's start: no row is in it
    units = token_set(query)
    if not units:
        return []  # nothing can score above 0
    scored: list[tuple[float, dict[str, Any]]] = []
    for kind in SEARCH_KINDS:
        if kind not in selected:
            continue
        for r in queries.audit_search_rows(store, kind, since, until):
            score = (match_score(units, r["f1"]) + match_score(units, r["f2"])
                     + match_score(units, r["f3"]))
            if score > 0:
                scored.append((score, {"id": r["id"], "kind": kind, "ts": r["ts"],
                                       "title": r["title"], "status": r["status"]}))
    scored.sort(key=lambda sr: sr[1]["ts"] or "", reverse=True)
    scored.sort(key=lambda sr: sr[0], reverse=True)
    return [row for _, row in scored[offset:offset + limit]]


def similar_tasks(store: Store, task: Any, limit: Any = 5, min_score: Any = 0.35
                  ) -> list[dict[str, Any]]:
    """ledger_similar_tasks: every dispatch and approach whose task scores at least
    ``min_score`` against ``task`` (see ``similarity``), best first, at most ``limit``.

    Rows ``{kind, id, task, score, ts, verdict}``: ``verdict`` is the dispatch's verdict
    (null before one is attached) or the approach's outcome.
    """
    from toolkit import queries

    task = _nonempty(task, "task")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise UsageError("'limit' must be a positive integer.")
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float)):
        raise UsageError("'min_score' must be a number.")
    candidates = [Candidate(r["kind"], r["id"], r["task"], r["ts"], r["verdict"])
                  for r in queries.audit_task_candidates(store)]
    return rank_similar(task, candidates, limit=limit, min_score=float(min_score))
