"""Named read-only SQL over the store: one function per question, bound parameters only.

Each function takes an open ``Store`` (already refreshed by the caller) and returns plain
Python values (dicts, tuples, ints). No function here writes, and no value is ever spliced
into SQL text: the only dynamic SQL repeats fixed fragments with ``?`` placeholders.
Timestamps leave as ``'YYYY-MM-DD HH:MM:SS'`` strings, the format every source writes.

Sections are owned by feature areas; add yours under its own ``# --- <area> ---`` header.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolkit.records import RULED_OUT_SQL

if TYPE_CHECKING:
    from toolkit.store import Store

TS = "strftime({col}, '%Y-%m-%d %H:%M:%S')"


def _ts(col: str) -> str:
    return TS.format(col=col)


# --- audit ---------------------------------------------------------------------------------
# The nagi-ledger tables (actions, dispatches, approaches). Used by toolkit.audit_ops, which
# shapes the rows into nagi-ledger's return values. Their ``ts`` is answered as nagi-ledger
# answers it, as written (``ts_raw``), and a time window starts as nagi-ledger's does, by
# comparing that text with ``since``, SQLite's ``datetime(now, '-N unit')`` text. When
# ``until`` is given (an injected "now"), a row whose time parses must also be no later. A
# ``since`` of None is SQLite's NULL start (a number too large to apply): ``ts >= NULL`` holds
# for no row, as in nagi-ledger.

_WINDOW = "ts_raw >= ? AND (ts IS NULL OR ts <= coalesce(CAST(? AS TIMESTAMP), ts))"

def audit_task_dispatch_summary(store: Store, task: str) -> tuple[int, str | None]:
    """(dispatches recorded for exactly this task, verdict of the newest one or None)."""
    row = store.fetch(
        "SELECT count(*), first(verdict ORDER BY id DESC) FROM dispatches WHERE task = ?",
        [task])[1][0]
    return int(row[0]), row[1]


def audit_task_approaches(store: Store, task: str) -> list[dict[str, Any]]:
    """Every approach recorded for exactly this task, newest first."""
    return store.fetch_dicts(
        "SELECT id, approach, outcome, reason, ts_raw AS ts FROM approaches "
        "WHERE task = ? ORDER BY id DESC", [task])


def audit_actions_since(store: Store, since: str | None, until: dt.datetime | None = None
                        ) -> list[dict[str, Any]]:
    """Actions in the window, by category then id (the session report's order)."""
    return store.fetch_dicts(
        "SELECT id, ts_raw AS ts, tier, category, description, project FROM actions "
        f"WHERE {_WINDOW} ORDER BY category, id", [since, until])


def audit_dispatches_since(store: Store, since: str | None, until: dt.datetime | None = None
                           ) -> list[dict[str, Any]]:
    """Dispatches in the window, oldest first."""
    return store.fetch_dicts(
        "SELECT id, ts_raw AS ts, task, agent_type, model, verdict FROM dispatches "
        f"WHERE {_WINDOW} ORDER BY id", [since, until])


def audit_action_counts_by_tier(store: Store, since: str | None,
                                until: dt.datetime | None = None
                                ) -> list[tuple[int | None, int]]:
    return [(r[0], int(r[1])) for r in store.fetch(
        f"SELECT tier, count(*) FROM actions WHERE {_WINDOW} GROUP BY tier ORDER BY tier",
        [since, until])[1]]


def audit_action_counts_by_category(store: Store, since: str | None,
                                    until: dt.datetime | None = None
                                    ) -> list[tuple[str | None, int]]:
    return [(r[0], int(r[1])) for r in store.fetch(
        f"SELECT category, count(*) FROM actions WHERE {_WINDOW} GROUP BY category "
        "ORDER BY category", [since, until])[1]]


def audit_dispatch_count(store: Store, since: str | None, until: dt.datetime | None = None
                         ) -> int:
    return int(store.scalar(f"SELECT count(*) FROM dispatches WHERE {_WINDOW}",
                            [since, until]) or 0)


def audit_verdict_counts(store: Store, since: str | None, until: dt.datetime | None = None
                         ) -> list[tuple[str | None, int]]:
    """(verdict or None, dispatches) for the dispatches in the window."""
    return [(r[0], int(r[1])) for r in store.fetch(
        f"SELECT verdict, count(*) FROM dispatches WHERE {_WINDOW} GROUP BY verdict "
        "ORDER BY verdict NULLS LAST", [since, until])[1]]


# kind -> (title, status, the three scored fields): nagi-ledger's ledger_search columns.
_AUDIT_SEARCH = {
    "actions": ("description", "tier", "description", "category", "project"),
    "dispatches": ("task", "coalesce(verdict, 'PENDING')", "task", "brief_summary",
                   "verdict_notes"),
    "approaches": ("concat(task, ': ', approach)", "outcome", "task", "approach", "reason"),
}


def audit_search_rows(store: Store, kind: str, since: str | None,
                      until: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Every row of one audit table (in the window, if any), by id: ``{id, ts, title, status,
    f1, f2, f3}`` where f1-f3 are the fields ledger_search scores."""
    title, status, f1, f2, f3 = _AUDIT_SEARCH[kind]
    where, params = "", []
    if since is not None:
        where, params = f"WHERE {_WINDOW}", [since, until]
    return store.fetch_dicts(
        f"SELECT id, ts_raw AS ts, {title} AS title, {status} AS status, "
        f"{f1} AS f1, {f2} AS f2, {f3} AS f3 FROM {kind} {where} ORDER BY id", params)


def audit_task_candidates(store: Store) -> list[dict[str, Any]]:
    """Every dispatch by id, then every approach by id: ``{kind, id, task, ts, verdict}``
    (verdict: the dispatch's verdict or NULL, or the approach's outcome)."""
    return store.fetch_dicts("""
SELECT kind, id, task, ts, verdict FROM (
  SELECT 0 AS k, 'dispatches' AS kind, id, task, ts_raw AS ts, verdict FROM dispatches
  WHERE task IS NOT NULL
  UNION ALL
  SELECT 1, 'approaches', id, task, ts_raw, outcome FROM approaches WHERE task IS NOT NULL)
ORDER BY k, id""")


# --- handoff -------------------------------------------------------------------------------
# The handoff report (toolkit.handoff, `toolkit handoff` and `toolkit publish`): open slop,
# the ledger's current state, dead ends and no-gos. Most urgent first, so a report cut to fit
# a limit drops the least. Dispatches and task status come from the site's questions
# (site_dispatches, site_task_status), shaped by toolkit.reports for both.

_SLOP_SEVERITY_RANK = ("CASE severity WHEN 'critical' THEN 0 WHEN 'high' THEN 1 "
                       "WHEN 'medium' THEN 2 WHEN 'low' THEN 3 WHEN 'info' THEN 4 ELSE 5 END")


def _slop_bucket_rank() -> str:
    """CodeSmith's buckets in its order, then any other (by name), then none: the order of
    the site's and the handoff's tables of buckets (``reports.slop_matrix``)."""
    from toolkit.records import SLOP_BUCKETS

    whens = " ".join(f"WHEN '{b}' THEN {i}" for i, b in enumerate(SLOP_BUCKETS))
    return (f"CASE bucket {whens} ELSE {len(SLOP_BUCKETS)} END, "
            "nullif(bucket, '') NULLS LAST")


def handoff_open_slop(store: Store) -> list[dict[str, Any]]:
    """Open and in-progress slop entries, by bucket (in the site's order: CodeSmith's, then
    others, then none), then severity (critical first), then file order."""
    return store.fetch_dicts(
        "SELECT id, short_id, bucket, severity, confidence, owner, source_links, title, "
        "description, status, cleanup_recommendation, created_at_raw AS created_at, "
        "updated_at_raw AS updated_at, task_id, thread_id, path, position, line "
        "FROM slop_entries WHERE status IN ('open', 'in_progress') "
        f"ORDER BY {_slop_bucket_rank()}, {_SLOP_SEVERITY_RANK}, position")


def handoff_ledger_entries(store: Store) -> list[dict[str, Any]]:
    """Every ledger entry's id, file, title, confidence and date (the handoff compares these
    with the last handoff's)."""
    return store.fetch_dicts(
        "SELECT entry_id, file, title, category, confidence, date FROM ledger_entries "
        "ORDER BY file, position")


def ledger_confidences_before(store: Store, day: dt.date
                              ) -> dict[str, tuple[str | None, str, str | None]] | None:
    """entry key -> (confidence, file, title) in the ledger of the vault's last git commit
    before ``day`` (00:00 UTC), the version ``toolkit ledger history`` compares the first
    change after it with; ``{}`` when every commit is later; None when the store has no git
    history of the ledger (no git, or no history loaded)."""
    if "ledger_versions" not in store.tables():
        return None
    if not store.scalar("SELECT count(*) FROM ledger_versions "
                        "WHERE source = 'git' AND timeline = 'main'"):
        return None
    rows = store.fetch(
        "SELECT entry_key, confidence, file, title FROM ledger_entry_versions "
        "WHERE version_id = ("
        "  SELECT version_id FROM ledger_versions WHERE source = 'git' AND timeline = 'main'"
        "  AND ts < ? ORDER BY seq DESC LIMIT 1) ORDER BY file, position",
        [dt.datetime.combine(day, dt.time())])[1]
    return {str(k): (c, str(f), t) for k, c, f, t in rows}


def handoff_dead_ends(store: Store, *, limit: int) -> list[dict[str, Any]]:
    """DEAD_END and NO_GO approaches grouped by task: the task with the newest one first,
    newest first within a task."""
    return store.fetch_dicts(
        f"SELECT id, task, approach, outcome, reason, {_ts('ts')} AS ts FROM ("
        "  SELECT *, max(id) OVER (PARTITION BY task) AS newest FROM approaches"
        f"  WHERE {RULED_OUT_SQL}) "
        "ORDER BY newest DESC, task, id DESC LIMIT ?", [limit])


def handoff_task_dead_ends(store: Store, tasks: Sequence[str], *, per_task: int
                           ) -> dict[str, tuple[int, list[dict[str, Any]]]]:
    """For each of ``tasks`` with any: how many DEAD_END and NO_GO approaches it has, and the
    newest ``per_task`` of them (newest first). Asked of every approach, however many other
    tasks have newer ones."""
    out: dict[str, tuple[int, list[dict[str, Any]]]] = {}
    if not tasks:
        return out
    rows = store.fetch_dicts(
        f"SELECT id, task, approach, outcome, reason, {_ts('ts')} AS ts, "
        "  count(*) OVER (PARTITION BY task) AS task_total FROM approaches "
        f"WHERE {RULED_OUT_SQL} AND list_contains(?, task) "
        "QUALIFY row_number() OVER (PARTITION BY task ORDER BY id DESC) <= ? "
        "ORDER BY task, id DESC", [list(tasks), per_task])
    for row in rows:
        total = int(row.pop("task_total"))
        out.setdefault(row["task"], (total, []))[1].append(row)
    return out


def handoff_dead_ends_elsewhere(store: Store, tasks: Sequence[str]) -> tuple[int, int]:
    """(approaches, tasks): the DEAD_END and NO_GO approaches of the tasks not in ``tasks``,
    and how many tasks they belong to (no task at all counts as one)."""
    row = store.fetch(
        "SELECT count(*), count(DISTINCT task) + max(CASE WHEN task IS NULL THEN 1 ELSE 0 END) "
        f"FROM approaches WHERE {RULED_OUT_SQL} "
        "AND NOT coalesce(list_contains(?, task), false)", [list(tasks)])[1][0]
    return int(row[0] or 0), int(row[1] or 0)


# --- site ----------------------------------------------------------------------------------
# Everything `toolkit build-site` shows (toolkit.reports shapes the rows into page contexts).
# Every query has a total ORDER BY: the site is reproducible byte for byte. ``actions`` is
# the scoped stand-in on the site's connection (Store.scope_actions, site_scope): each
# question over it counts the same rows.

# An entry page shows its row whole; the listings, counts and links read only its short
# columns. So the site asks for the short columns of every row and, per row, the digest of
# the whole row (computed here, in the database), and fetches a row whole only for the pages
# it renders (toolkit.pages.RowRef): an unchanged entry's long text is never read.
# (name, SQL) of each column of a whole row, and the names of the long ones.
_LEDGER_ROW = (("entry_id", "entry_id"), ("file", "file"), ("title", "title"),
               ("date", "CAST(date AS VARCHAR)"), ("date_raw", "date_raw"),
               ("category", "category"), ("confidence", "confidence"),
               ("observations", "observations"), ("source_reflections", "source_reflections"),
               ("reflections", "reflections"), ("context", "context"), ("pattern", "pattern"),
               ("evidence", "evidence"), ("related", "related"), ("form", "form"),
               ("problems", "problems"), ("path", "path"), ("line", "line"),
               ("position", "position"))
_LEDGER_LONG = ("context", "pattern", "evidence")


def _columns(row: tuple[tuple[str, str], ...], skip: tuple[str, ...] = ()) -> str:
    return ", ".join(f"{sql} AS {name}" for name, sql in row if name not in skip)


def _row_digest(row: tuple[tuple[str, str], ...]) -> str:
    """SQL: the digest of a whole row (``digest``): md5 of its columns as one JSON object,
    which tells every value of every column apart (NULL from '', a list from its text)."""
    return ("md5(CAST(to_json(struct_pack("
            + ", ".join(f"{name} := {sql}" for name, sql in row) + ")) AS VARCHAR)) AS digest")


def site_ledger_entries(store: Store, file: str | None = None) -> list[dict[str, Any]]:
    """Every ledger entry (or ``file``'s: ``patterns``...), malformed ones included, in file
    order: its columns but the long texts (Context, Pattern, Evidence), and ``digest``, the
    digest of its whole row (what :func:`site_ledger_rows` returns for it)."""
    return store.fetch_dicts(
        f"SELECT {_columns(_LEDGER_ROW, _LEDGER_LONG)}, {_row_digest(_LEDGER_ROW)} "
        "FROM ledger_entries WHERE ? IS NULL OR file = ? ORDER BY file, position, entry_id",
        [file, file])


def site_ledger_files(store: Store) -> list[str | None]:
    """The files (kinds) the ledger's entries are from, in the order of
    :func:`site_ledger_entries`."""
    return [f for (f,) in store.fetch("SELECT DISTINCT file FROM ledger_entries "
                                      "ORDER BY file")[1]]


def site_ledger_rows(store: Store, entry_ids: list[str]) -> dict[str, dict[str, Any]]:
    """entry_id -> the whole row of each of these ledger entries."""
    rows = store.fetch_dicts(
        f"SELECT {_columns(_LEDGER_ROW)} FROM ledger_entries "
        "WHERE entry_id IN (SELECT unnest(?::VARCHAR[]))", [entry_ids])
    return {r["entry_id"]: r for r in rows}


def site_ledger_meta(store: Store) -> dict[str, Any] | None:
    """The ledger's meta row; ``last_reflection`` is ``never`` when meta.yaml says null."""
    import json

    from toolkit.sources.smith import last_reflection_text

    rows = store.fetch_dicts("SELECT last_reflection, total_reflections, meta_schema, "
                             "last_reconcile, total_patterns, CAST(meta_yaml AS VARCHAR) "
                             "AS meta_yaml FROM ledger_meta LIMIT 1")
    if not rows:
        return None
    row = rows[0]
    raw = row.pop("meta_yaml")
    if row["last_reflection"] is None and raw:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        row["last_reflection"] = last_reflection_text(data if isinstance(data, dict) else None)
    return row


_UTC_CREATED = "timezone('UTC', created_at)"
_UTC_UPDATED = "timezone('UTC', updated_at)"


# An empty bucket, severity, status or owner is none, as a missing one: both are "[???]" with
# the one page slop/<dimension>/none (as `toolkit slop` counts them, one value)
_SLOP_ROW = (("id", "id"), ("short_id", "short_id"), ("bucket", "nullif(bucket, '')"),
             ("severity", "nullif(severity, '')"), ("confidence", "confidence"),
             ("owner", "nullif(owner, '')"),
             ("source_links", "source_links"), ("title", "title"),
             ("description", "description"), ("status", "nullif(status, '')"),
             ("cleanup_recommendation", "cleanup_recommendation"),
             ("created_at", _ts(_UTC_CREATED)), ("updated_at", _ts(_UTC_UPDATED)),
             ("created_at_raw", "created_at_raw"), ("updated_at_raw", "updated_at_raw"),
             ("task_id", "task_id"), ("thread_id", "thread_id"),
             ("extra", "CAST(extra AS VARCHAR)"), ("problems", "problems"), ("path", "path"),
             ("line", "line"), ("position", "position"))
_SLOP_LONG = ("source_links", "description", "cleanup_recommendation", "extra")


def site_slop_entries(store: Store) -> list[dict[str, Any]]:
    """Every slop entry in file order, times as UTC text: its columns but the long ones
    (source links, description, cleanup, extra fields), and ``digest``, the digest of its
    whole row (what :func:`site_slop_rows` returns for it)."""
    return store.fetch_dicts(
        f"SELECT {_columns(_SLOP_ROW, _SLOP_LONG)}, {_row_digest(_SLOP_ROW)} "
        "FROM slop_entries ORDER BY position, id")


def site_slop_rows(store: Store, positions: list[int]) -> dict[int, dict[str, Any]]:
    """position -> the whole row of each of these slop entries (a position is the entry's
    place in the file: one row each)."""
    rows = store.fetch_dicts(
        f"SELECT {_columns(_SLOP_ROW)} FROM slop_entries "
        "WHERE position IN (SELECT unnest(?::INTEGER[]))", [positions])
    return {r["position"]: r for r in rows}


def site_task_status(store: Store) -> list[dict[str, Any]]:
    """``task_status`` per task (dispatches, retries, verdicts, over the retry limit)."""
    return store.fetch_dicts(
        "SELECT task, dispatch_count, retry_count, last_verdict, over_retry_limit, "
        f"{_ts('first_dispatch')} AS first_dispatch, {_ts('last_dispatch')} AS last_dispatch, "
        "pending, confirmed, refuted, partial FROM task_status ORDER BY task")


def site_dispatches(store: Store) -> list[dict[str, Any]]:
    return store.fetch_dicts(
        f"SELECT id, {_ts('ts')} AS ts, task, agent_type, model, brief_summary, verdict, "
        f"{_ts('verdict_ts')} AS verdict_ts, verdict_notes FROM dispatches ORDER BY id")


def site_approaches(store: Store) -> list[dict[str, Any]]:
    return store.fetch_dicts(
        f"SELECT id, {_ts('ts')} AS ts, task, approach, outcome, reason FROM approaches "
        "ORDER BY id")


def site_action_count(store: Store) -> int:
    return int(store.scalar("SELECT count(*) FROM actions") or 0)


def site_recent_actions(store: Store, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` actions, newest first."""
    return store.fetch_dicts(
        f"SELECT id, {_ts('ts')} AS ts, tier, category, description, project FROM actions "
        "ORDER BY ts DESC NULLS LAST, id DESC LIMIT ?", [limit])


def site_actions_by_day_tier(store: Store, since: dt.date | None
                             ) -> list[tuple[str | None, int | None, int]]:
    """(day, tier, actions) for days at or after ``since``; ``since`` None: every action,
    those with no time (their ``ts`` was no date) on day None, last, as the site's all-time
    counts and its ``stats_by_tier`` download count them."""
    where, params = ("", []) if since is None else ("WHERE ts >= CAST(? AS DATE) ",
                                                    [since.isoformat()])
    return [(None if r[0] is None else str(r[0]), r[1], int(r[2])) for r in store.fetch(
        f"SELECT CAST(ts AS DATE) AS day, tier, count(*) FROM actions {where}"
        "GROUP BY ALL ORDER BY day NULLS LAST, tier NULLS LAST", params)[1]]


def site_actions_by_category_tier(store: Store) -> list[tuple[str | None, int | None, int]]:
    """(category, tier, actions) over all time."""
    return [(r[0], r[1], int(r[2])) for r in store.fetch(
        "SELECT category, tier, count(*) FROM actions GROUP BY ALL "
        "ORDER BY category NULLS LAST, tier NULLS LAST")[1]]


def site_actions_by_tier_since(store: Store, since: dt.date | None,
                               until: dt.date | None = None) -> dict[int | None, int]:
    """Actions per tier on the days from ``since`` through ``until`` (either None: no bound
    on that side). A window "to today" ends with today: an action dated after it (an injected
    ``today`` earlier than the data) is not in "the last 7 days", as it is in no day of the
    per-day table beside it."""
    low = None if since is None else since.isoformat()
    high = None if until is None else (until + dt.timedelta(days=1)).isoformat()
    rows = store.fetch("SELECT tier, count(*) FROM actions WHERE (? IS NULL OR "
                       "ts >= CAST(? AS DATE)) AND (? IS NULL OR ts < CAST(? AS DATE)) "
                       "GROUP BY tier ORDER BY tier NULLS LAST", [low, low, high, high])[1]
    return {r[0]: int(r[1]) for r in rows}


def site_actions_by_project_tier(store: Store) -> list[tuple[str | None, int | None, int]]:
    """(project, tier, actions) over all time; a blank project is None (unassigned). Names
    are one project ignoring case and surrounding spaces, as the site's scope compares them
    (``Store.scope_actions``): named as the scope names it when it is the scope's, else as
    most of its actions spell it (the first in order, on a tie)."""
    rows = store.fetch(
        "SELECT nullif(trim(project), '') AS p, tier, count(*) FROM actions GROUP BY ALL "
        "ORDER BY p NULLS LAST, tier NULLS LAST")[1]
    spellings: dict[str, Counter[str]] = {}
    for p, _tier, n in rows:
        if p is not None:
            spellings.setdefault(p.lower(), Counter())[p] += int(n)
    scope = (store.action_scope or "").strip()
    names = {key: (scope if key == scope.lower() else
                   min(counts, key=lambda name: (-counts[name], name)))
             for key, counts in spellings.items()}
    out: Counter[tuple[str | None, int | None]] = Counter()
    for p, tier, n in rows:
        out[(None if p is None else names[p.lower()], tier)] += int(n)
    return [(p, t, n) for (p, t), n in out.items()]


def site_sessions(store: Store) -> list[dict[str, Any]]:
    return store.fetch_dicts(
        f"SELECT name, path, {_ts('session_start')} AS session_start, {_ts('ended')} AS ended, "
        "project, branch, author, status, legacy_name, events, problems FROM sessions "
        "ORDER BY session_start NULLS LAST, name")


def site_session_events(store: Store) -> list[dict[str, Any]]:
    return store.fetch_dicts(
        f"SELECT session, seq, {_ts('ts')} AS ts, time, kind, title, body, tool, tokens_in, "
        "tokens_out, tokens_total, target, line FROM session_events ORDER BY session, seq")


def site_rows(store: Store, table: str) -> list[dict[str, Any]]:
    """Every row of a table the site shows as is (snapshots, turn files, history), in a total
    order. ``table`` must be one of ``store.tables()`` (checked: it is not a parameter)."""
    if table not in store.tables():
        return []
    from toolkit.store import quote_ident

    return store.fetch_dicts(f"SELECT * FROM {quote_ident(table)} ORDER BY ALL")
