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
import math
import re
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import BusyError, DataError, NotFoundError, ToolkitError, UsageError
from toolkit.records import AUDIT_OUTCOMES, AUDIT_TIERS, AUDIT_VERDICTS

if TYPE_CHECKING:
    from collections.abc import Iterator

    from toolkit.config import Config
    from toolkit.store import Store

BUSY_TIMEOUT_MS = 5000  # nagi-ledger's busy timeout; tests lower it
RETRY_LIMIT = 2  # over_retry_limit is retry_count >= 2 (nagi-ledger, dispatch_guard)
SEARCH_KINDS: tuple[str, ...] = ("actions", "dispatches", "approaches")
TS_FORMAT = "%Y-%m-%d %H:%M:%S"

# nagi-ledger's schema (FORMATS.md §3.2, formats/nagi-ledger/audit_schema.sql): no indexes,
# no foreign keys, no schema version. Kept to the letter so nagi-ledger sees its own tables.
SCHEMA_SQL = """CREATE TABLE IF NOT EXISTS actions (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  ts          TEXT NOT NULL DEFAULT (datetime('now')),
  tier        INTEGER NOT NULL CHECK (tier IN (0, 1, 2)),      -- 0=info, 1=notable, 2=high-impact
  category    TEXT NOT NULL,                                   -- free text; hook uses 'tool_failure'
  description TEXT NOT NULL,
  project     TEXT                                             -- nullable
);

CREATE TABLE IF NOT EXISTS dispatches (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  ts            TEXT NOT NULL DEFAULT (datetime('now')),
  task          TEXT NOT NULL,                                 -- exact-match key for retry counting
  agent_type    TEXT NOT NULL,
  model         TEXT NOT NULL,
  brief_summary TEXT NOT NULL,                                 -- hook rows are prefixed '[auto] '
  verdict       TEXT CHECK (verdict IN ('CONFIRMED', 'REFUTED', 'PARTIAL') OR verdict IS NULL),
  verdict_ts    TEXT,                                          -- set with datetime('now') by ledger_log_verdict
  verdict_notes TEXT
);

CREATE TABLE IF NOT EXISTS approaches (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  ts       TEXT NOT NULL DEFAULT (datetime('now')),
  task     TEXT NOT NULL,
  approach TEXT NOT NULL,
  outcome  TEXT NOT NULL CHECK (outcome IN ('DEAD_END', 'NO_GO', 'WORKS')),
  reason   TEXT NOT NULL
);
"""  # noqa: E501 - nagi-ledger's schema text, kept to the letter (its comments included)


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
    return ToolkitError(f"audit DB write failed ({msg}); nothing was written", path=path)


@contextmanager
def _writer(path: Path, *, timeout_ms: int | None = None) -> Iterator[sqlite3.Connection]:
    """A connection opened like nagi-ledger's ``get_connection`` (creates the DB if missing).

    A file that is there but is not an SQLite DB (junk, truncated) is refused before SQLite
    touches it, so it is never "repaired" into an empty DB and no -wal/-shm appear beside it.
    """
    from toolkit.sources.audit import check_file

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
        conn = sqlite3.connect(str(path), timeout=timeout_ms / 1000, isolation_level=None)
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


def log_dispatch(db: Path, task: Any, agent_type: Any, model: Any, brief_summary: Any, *,
                 similar_limit: int = 5, min_score: float = 0.35) -> dict[str, Any]:
    """Record a subagent dispatch (ledger_log_dispatch).

    Returns ``{"id", "retry_count", "similar"}``: ``retry_count`` counts the EARLIER dispatches
    with exactly this task; ``similar`` lists reworded near-duplicates among earlier dispatches
    and approaches (earlier dispatches of exactly this task are retries, not listed; an
    approach recorded under exactly this task is, with score 1.0).
    """
    task = _nonempty(task, "task")
    agent_type = _nonempty(agent_type, "agent_type")
    model = _nonempty(model, "model")
    brief_summary = _nonempty(brief_summary, "brief_summary")
    with _writer(db) as conn:
        conn.execute("BEGIN IMMEDIATE")  # the count and the insert see the same DB
        prior = conn.execute("SELECT COUNT(*) FROM dispatches WHERE task = ?",
                             (task,)).fetchone()[0]
        candidates = _sqlite_candidates(conn)
        cur = conn.execute(
            "INSERT INTO dispatches (task, agent_type, model, brief_summary) VALUES (?, ?, ?, ?)",
            (task, agent_type, model, brief_summary))
        conn.execute("COMMIT")
        new_id = int(cur.lastrowid or 0)
    similar = rank_similar(task, (c for c in candidates
                                  if not (c.kind == "dispatches" and c.task == task)),
                           limit=similar_limit, min_score=min_score)
    return {"id": new_id, "retry_count": int(prior), "similar": similar}


def log_verdict(db: Path, dispatch_id: Any, verdict: Any, notes: Any = None) -> dict[str, Any]:
    """Attach a verdict to a dispatch (ledger_log_verdict). Returns ``{"ok": True, "task"}``."""
    verdict = _check_verdict(verdict)
    if isinstance(dispatch_id, bool) or not isinstance(dispatch_id, int):
        raise UsageError(f"Invalid dispatch_id {dispatch_id!r}: must be an integer id returned "
                         "by ledger_log_dispatch.")
    with _writer(db) as conn:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT task FROM dispatches WHERE id = ?", (dispatch_id,)).fetchone()
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


# --------------------------------------------------------------------------- similarity

# Han (with extensions and compatibility forms), kana, Hangul, CJK punctuation-free letters.
_CJK = ("\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
        "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af\U00020000-\U0003134f")
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(f"[^\\W_{_CJK}]+")


def tokens(text: str) -> tuple[list[str], list[str]]:
    """(words, cjk_grams): lowercased words; character 2-grams of each CJK run.

    A CJK run of one character is its own gram. Words are runs of letters and digits outside
    CJK scripts, so ``fix-bug-42`` gives ``fix``, ``bug``, ``42``.
    """
    low = text.lower()
    words = _WORD.findall(low)
    grams: list[str] = []
    for run in _CJK_RUN.findall(low):
        grams.extend([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
    return words, grams


def token_set(text: str) -> frozenset[str]:
    words, grams = tokens(text)
    return frozenset(words) | frozenset(grams)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def similarity(a: str, b: str) -> float:
    """nagi-ledger's task similarity: min(difflib ratio, token Jaccard), in [0, 1]."""
    return _similarity(_norm(a), token_set(a), _norm(b), token_set(b), 0.0)


def _similarity(na: str, ta: frozenset[str], nb: str, tb: frozenset[str], floor: float
                ) -> float:
    union = ta | tb
    jaccard = len(ta & tb) / len(union) if union else 0.0
    if jaccard < floor:
        return jaccard  # the min cannot reach the floor: skip the costly ratio
    sm = difflib.SequenceMatcher(None, na, nb, autojunk=False)
    if sm.real_quick_ratio() < floor or sm.quick_ratio() < floor:
        return min(jaccard, sm.quick_ratio())
    return min(jaccard, sm.ratio())


@dataclass(frozen=True)
class Candidate:
    kind: str  # dispatches | approaches
    id: int
    task: str
    ts: str | None
    status: str | None  # verdict or PENDING for dispatches, outcome for approaches


def rank_similar(task: str, candidates: Iterable[Candidate], *, limit: int = 5,
                 min_score: float = 0.35) -> list[dict[str, Any]]:
    """The candidates scoring at least ``min_score`` against ``task``, best first."""
    nt, tt = _norm(task), token_set(task)
    scored = []
    for c in candidates:
        score = _similarity(nt, tt, _norm(c.task), token_set(c.task), min_score)
        if score >= min_score:
            scored.append((score, c))
    # best score first; among equal scores the newest row (ts, then id), then by kind
    scored.sort(key=lambda sc: sc[1].kind)
    scored.sort(key=lambda sc: sc[1].id, reverse=True)
    scored.sort(key=lambda sc: sc[1].ts or "", reverse=True)
    scored.sort(key=lambda sc: sc[0], reverse=True)
    return [{"id": c.id, "kind": c.kind, "task": c.task, "score": round(score, 3),
             "verdict": c.status, "ts": c.ts} for score, c in scored[:limit]]


def _sqlite_candidates(conn: sqlite3.Connection) -> list[Candidate]:
    """The newest row of each distinct task among dispatches and approaches (writer side)."""
    rows = conn.execute(
        "SELECT 'dispatches', d.id, d.task, d.ts, COALESCE(d.verdict, 'PENDING') FROM dispatches d "
        "JOIN (SELECT MAX(id) AS id FROM dispatches GROUP BY task) m ON m.id = d.id "
        "UNION ALL "
        "SELECT 'approaches', a.id, a.task, a.ts, a.outcome FROM approaches a "
        "JOIN (SELECT MAX(id) AS id FROM approaches GROUP BY task) m ON m.id = a.id").fetchall()
    return [Candidate(k, int(i), str(t), ts, s) for k, i, t, ts, s in rows
            if isinstance(i, int) and t is not None]


# --------------------------------------------------------------------------- reading

def parse_now(value: str | None) -> dt.datetime | None:
    """``--now`` / ``TOOLKIT_NOW``: an ISO date-time, UTC unless it carries an offset."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--now: {text!r} is not a date-time; use 'YYYY-MM-DD HH:MM:SS' (UTC)"
                         ) from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return when


def _window(now: dt.datetime | None, back: dt.timedelta
            ) -> tuple[dt.datetime, dt.datetime | None]:
    """(since, until) of a window reaching ``back`` before now.

    Without an injected now this is nagi-ledger's ``ts >= datetime('now', '-N ...')`` (no end);
    with one the window also ends there, so "the 24 hours before 2026-05-04 12:00" means that.
    """
    if now is None:
        return dt.datetime.now(dt.UTC).replace(tzinfo=None) - back, None
    return now - back, now


def open_audit_store(cfg: Config, *, missing_ok: bool = False) -> Store:
    """The store with the audit tables brought up to date from the audit DB.

    Raises the audit source's own error (damaged: 65, busy: 75) rather than answering from
    stale rows, and "audit DB not found" (without creating it) unless ``missing_ok``, when a
    missing DB reads as an empty ledger.
    """
    from toolkit.store import Store

    store = Store.open(cfg.db_path)
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
    since, until = _window(now, dt.timedelta(hours=since_hours))
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
    since, until = _window(now, dt.timedelta(days=days))
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
    """ledger_search: index rows ``{id, kind, ts, title, status}``, newest first.

    Every word of the query must appear (case-insensitive substring) in the row's title
    fields; for CJK text, at least half of the query's character 2-grams must. Body text
    (brief_summary, verdict_notes, reason) is neither searched nor returned. ``status`` is
    ``Tier n`` for actions, the verdict or PENDING for dispatches, the outcome for approaches.
    """
    from toolkit import queries

    query = _nonempty(query, "query")
    if kinds:
        bad = [k for k in kinds if k not in SEARCH_KINDS]
        if bad:
            raise UsageError(f"Invalid kinds {bad!r}: each must be one of {SEARCH_KINDS}.")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError("'limit' must be a positive integer.")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise UsageError("'offset' must be zero or a positive integer.")
    since = until = None
    if since_days is not None:
        since, until = _window(now, dt.timedelta(days=_positive(since_days, "since_days")))
    words, grams = tokens(query)
    if not words and not grams:
        raise UsageError("'query' must contain at least one word.")
    min_grams = math.ceil(len(set(grams)) / 2)
    return queries.audit_search(store, words=sorted(set(words)), grams=sorted(set(grams)),
                                min_grams=min_grams, kinds=list(kinds or SEARCH_KINDS),
                                since=since, until=until, limit=limit, offset=offset)


def similar_tasks(store: Store, task: Any, limit: Any = 5, min_score: Any = 0.35
                  ) -> list[dict[str, Any]]:
    """ledger_similar_tasks: dispatched or approached tasks worded like ``task``, best first.

    Each row: ``{id, kind, task, score, verdict, ts}`` for the newest row of that task;
    ``verdict`` is the verdict (or PENDING) for dispatches and the outcome for approaches.
    """
    from toolkit import queries

    task = _nonempty(task, "task")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError("'limit' must be a positive integer.")
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) \
            or not 0 <= min_score <= 1:
        raise UsageError("'min_score' must be a number between 0 and 1.")
    candidates = [Candidate(r["kind"], r["id"], r["task"], r["ts"], r["status"])
                  for r in queries.audit_task_candidates(store)]
    return rank_similar(task, candidates, limit=limit, min_score=float(min_score))
