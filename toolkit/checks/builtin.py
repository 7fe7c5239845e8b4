"""The built-in checks, each with its rationale. Thresholds are defaults; ``toolkit.yaml``'s
``checks:`` sets them (an entry naming a built-in check: ``{name: stale-retries, days: 3}``).

Each asks a question the toolkit already answers, in the place it answers it: the
``task_status`` view, the slop and ledger tables, the Smith reader's ``meta_disagreements``
(recorded in ``_problems`` when the ledger is loaded), reconcile's budget
(:func:`toolkit.reconcile.budget_overruns`), the redaction finder
(:func:`toolkit.redact.find_secrets`) and CodeSmith's loader rules
(:func:`toolkit.sources.slop.load_problems`, recorded in ``_problems`` at load). Every caller
runs the checks on a store it has just refreshed, so what a loader recorded is the answer the
files give now: a check reads it rather than parse the ledger again.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from toolkit.checks.core import Check, Rows
from toolkit.sources.slop import LOAD_PREFIX
from toolkit.sources.smith import META_COUNT_PREFIX
from toolkit.store import SOURCE_ERROR, quote_ident, quote_text

if TYPE_CHECKING:
    from toolkit.api import Project
    from toolkit.reconcile import FileCounts

_TS = "strftime({col}, '%Y-%m-%d %H:%M:%S')"


def _ts(col: str) -> str:
    return _TS.format(col=col)


# --------------------------------------------------------------------------- finders

def _ledger_budget(project: Project, _: dict[str, Any]) -> Rows:
    """Reconcile's word and entry budgets the ledger is over, of the files as the store holds
    them (read again only where the load recorded no counts or a file it could not read)."""
    from toolkit.reconcile import budget_overruns

    return (["budget", "value", "limit"],
            [(c.label.split(" > ")[0], c.value, c.limit)
             for c in budget_overruns(project.config, _stored_ledger_files(project))])


def _stored_ledger_files(project: Project) -> dict[str, FileCounts] | None:
    """The five ledger files' counts as the store holds them (:class:`toolkit.reconcile.
    FileCounts`): words as the ledger's load recorded them, entries from ``ledger_entries``.
    None when the load recorded none (a store loaded by an older toolkit, or no ledger) or a
    file could not be read (the reader says why, as reconcile's own check does)."""
    import json

    from toolkit.loaders import ledger_file_states
    from toolkit.reconcile import FileCounts as Counts
    from toolkit.records import LEDGER_FILES

    rows = project.sql("SELECT state FROM _sources WHERE source = 'ledger'").fetchall()
    files = ledger_file_states(json.loads(rows[0][0]) if rows and rows[0][0] else None)
    if files is None or any(error is not None for _e, _w, error in files.values()):
        return None
    counts = {file: (n, titled) for file, n, titled in project.sql(
        "SELECT file, count(*), count(*) FILTER (WHERE form = 'B') FROM ledger_entries "
        "GROUP BY file").fetchall()}
    return {kind: Counts(files[kind][0], files[kind][1], *counts.get(kind, (0, 0)))
            for kind in LEDGER_FILES}


SCAN_CHUNK = 2000  # values joined per finder call: one regex pass over many short texts
_SEPARATOR = "\n\n"
_TEXT_TYPES = ("VARCHAR", "JSON")
_NOT_SECRETS = frozenset({"home_path"})  # the finder also folds home paths; not a secret


def _secrets(project: Project, _: dict[str, Any]) -> Rows:
    """Every place in the store (every text column of every source table) where the
    redaction finder sees a secret: table, row, column and family. Never the secret.

    What a table gave is kept beside the store (:func:`_table_record`), one record per table:
    its answer, under the table's :func:`_table_keys` (the load of its source, its columns)
    and the finder's code, and what the finder saw in each of its distinct values (under the
    value's SHA-256). A table whose source was not loaded again since is not read at all; a
    changed one is, and only its values not seen before are scanned (a one-entry change
    scans that entry's text)."""
    columns = project.sql(
        "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
        "JOIN information_schema.tables t USING (table_schema, table_name) "
        "WHERE c.table_schema = 'main' AND t.table_type = 'BASE TABLE' "
        "AND NOT starts_with(c.table_name, '_') ORDER BY c.table_name, c.ordinal_position"
    ).fetchall()
    by_table: dict[str, dict[str, str]] = {}
    for table, column, kind in columns:
        by_table.setdefault(table, {})[column] = kind
    keys = _table_keys(project, by_table)
    out: list[tuple[Any, ...]] = []
    for table, cols in by_table.items():
        text = [(table, column) for column, kind in cols.items() if kind in _TEXT_TYPES]
        if not text:
            continue
        key = keys.get(table, "")
        record = _table_record(project, table, key)
        if record is not None and key and record[0] == key:
            out += record[1]
            continue
        cache = record[2] if record is not None else {}
        seen: dict[str, tuple[str, ...]] = {}  # what this run met: kept for the next
        rows = _table_rows(project, table, cols, _column_families(project, text, cache, seen))
        out += rows
        if record is None or (key, rows, seen) != record:
            _save_table_record(project, table, (key, rows, seen))
    return ["table", "place", "column", "family"], out


def _table_rows(project: Project, table: str, cols: dict[str, str],
                found: dict[tuple[str, str], dict[str, tuple[str, ...]]]
                ) -> list[tuple[Any, ...]]:
    """The rows of the secrets check for ``table``: per column (in order) holding a secret
    (``found``: SHA-256 of each value holding one -> its families), each row's place and each
    family."""
    out: list[tuple[Any, ...]] = []
    for column in cols:
        families = found.get((table, column))
        if not families:
            continue
        if "path" in cols and "line" in cols:
            place = "coalesce(path, '') || ':' || coalesce(CAST(line AS VARCHAR), '')"
        elif cols.get("id") in ("BIGINT", "INTEGER"):
            place = "'id ' || CAST(id AS VARCHAR)"
        else:
            place = "'row ' || CAST(rowid + 1 AS VARCHAR)"
        value = f"CAST({quote_ident(column)} AS VARCHAR)"
        rows = project.sql(f"SELECT {place}, sha256({value}) FROM {quote_ident(table)} "
                           f"WHERE list_contains($found, sha256({value})) ORDER BY rowid",
                           {"found": list(families)}).fetchall()
        out += [(table, _place(where), column, family)
                for where, key in rows for family in families[key]]
    return out


def _table_keys(project: Project, by_table: dict[str, dict[str, str]]) -> dict[str, str]:
    """Per table with a version (:func:`toolkit.store.table_versions`: the load of the one
    source that creates it), that version and the table's columns and types. Other tables
    have none (they are always read)."""
    import hashlib
    import json

    from toolkit.loaders import SOURCES
    from toolkit.store import table_versions

    versions = table_versions(SOURCES, project.sources(), list(by_table))
    return {table: hashlib.sha256(json.dumps([table, versions[table], list(cols.items())])
                                  .encode("utf-8")).hexdigest()
            for table, cols in by_table.items() if table in versions}


def _column_families(project: Project, columns: list[tuple[str, str]],
                     cache: dict[str, tuple[str, ...]], seen: dict[str, tuple[str, ...]]
                     ) -> dict[tuple[str, str], dict[str, tuple[str, ...]]]:
    """For each of ``columns`` ((table, text column) pairs) holding a secret: the SHA-256 of
    each distinct value holding one -> its families. One query reads the SHA-256 of every
    column's distinct values (a query per table costs more than the reading); values the
    cache knows are not read, and one more query reads the others, which are scanned
    (:func:`_scan`) and added to ``seen`` with the known ones."""
    if not columns:
        return {}

    # every column's values in one query: a query per table costs more than its reading
    values = " UNION ALL ".join(
        f"SELECT {i} AS i, CAST({quote_ident(column)} AS VARCHAR) AS v "
        f"FROM {quote_ident(table)} WHERE {quote_ident(column)} IS NOT NULL"
        for i, (table, column) in enumerate(columns))
    keys: dict[int, list[str]] = {}
    for i, key in project.sql(f"SELECT DISTINCT i, sha256(v) FROM ({values})").fetchall():
        keys.setdefault(i, []).append(key)
    todo = sorted({k for ks in keys.values() for k in ks if k not in cache})
    for ks in keys.values():
        seen.update((k, cache[k]) for k in ks if k in cache)
    if todo:
        # a join with the keys, not list_contains: DuckDB runs out of memory filtering a
        # hundred branches by a list
        rows = project.sql(
            f"SELECT DISTINCT k, v FROM (SELECT sha256(v) AS k, v FROM ({values})) "
            "SEMI JOIN (SELECT unnest($todo) AS k) USING (k)", {"todo": todo}).fetchall()
        distinct = list(dict(rows).items())  # a value met in two columns: once
        found: dict[int, list[str]] = {}
        for index, family in _scan([v for _, v in distinct]):  # each distinct value once
            found.setdefault(index, []).append(family)
        for i, (k, _) in enumerate(distinct):
            seen[k] = tuple(found.get(i, ()))
    out: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
    for i, pair in enumerate(columns):
        families = {k: seen[k] for k in keys.get(i, []) if seen.get(k)}
        if families:
            out[pair] = families
    return out


_SCAN_SLOT = "secrets-scan"  # toolkit.parsecache slots: one per table, "secrets-scan-<table>"
Record = tuple[str, list[tuple[Any, ...]], dict[str, tuple[str, ...]]]


@functools.cache
def _scan_key() -> tuple[str, ...]:
    """What the kept scan results depend on besides the values: the finder's code."""
    from toolkit.parsecache import code_version

    return ("secrets-scan/3", code_version("toolkit.redact", "toolkit.checks.builtin"))


def table_slot(table: str) -> str:
    """The parse cache slot of ``table``'s record (a name safe as a file name)."""
    import hashlib
    import re

    if re.fullmatch(r"[a-z0-9_]{1,64}", table):
        return f"{_SCAN_SLOT}-{table}"
    return f"{_SCAN_SLOT}-{hashlib.sha256(table.encode('utf-8')).hexdigest()[:32]}"


def _table_record(project: Project, table: str, key: str = "") -> Record | None:
    """What an earlier run kept for ``table``: (its key, its rows, value SHA-256 -> the
    families the finder saw, empty for none); None when there is no record, or it is damaged,
    or made by other code (toolkit.parsecache). A record under ``key`` (the table unchanged
    since) comes without its values: its rows are the answer, and nothing is scanned."""
    from toolkit import parsecache

    folder = project.config.parse_cache
    saved = parsecache.load(folder, table_slot(table), _scan_key()) if folder else None
    if not (isinstance(saved, tuple) and len(saved) == 3 and isinstance(saved[0], str)
            and isinstance(saved[1], list) and isinstance(saved[2], dict)):
        return None
    kept, rows, values = saved
    if not all(isinstance(r, tuple) and len(r) == 4 and all(isinstance(v, str) for v in r)
               for r in rows):
        return None
    if key and kept == key:
        return kept, rows, {}
    return kept, rows, {k: v for k, v in values.items() if isinstance(k, str)
                        and isinstance(v, tuple) and all(isinstance(f, str) for f in v)}


def _save_table_record(project: Project, table: str, record: Record) -> None:
    from toolkit import parsecache

    folder = project.config.parse_cache
    if folder is not None:
        parsecache.save(folder, table_slot(table), _scan_key(), record)


def _place(text: str) -> str:
    """A row's place as it is, unless it holds a secret itself (a path can)."""
    from toolkit.redact import MARKER, find_secrets

    return MARKER if any(f.kind not in _NOT_SECRETS for f in find_secrets(text, fold=True)) \
        else text


def _scan(values: list[str]) -> list[tuple[int, str]]:
    """(index, family) of each value holding a secret, each family once per value. Many
    values are searched at once; a hit is confirmed on the values it touches alone. A secret
    the loaders lowercased (a category) is still found (``fold``)."""
    from toolkit.redact import find_secrets

    found: list[tuple[int, str]] = []
    for start in range(0, len(values), SCAN_CHUNK):
        part = values[start:start + SCAN_CHUNK]
        offsets, pos = [], 0
        for v in part:
            offsets.append(pos)
            pos += len(v) + len(_SEPARATOR)
        touched: set[int] = set()
        for f in find_secrets(_SEPARATOR.join(part), fold=True):
            if f.kind not in _NOT_SECRETS:
                first = bisect_right(offsets, f.start) - 1
                last = bisect_right(offsets, max(f.end - 1, f.start)) - 1
                touched.update(range(first, last + 1))
        for i in sorted(touched):
            kinds = dict.fromkeys(f.kind for f in find_secrets(part[i], fold=True)
                                  if f.kind not in _NOT_SECRETS)
            found.extend((start + i, k) for k in kinds)
    return found


# --------------------------------------------------------------------------- the checks

BUILTIN: tuple[Check, ...] = (
    Check(
        name="stale-retries", level="error", tags=("audit", "tasks"),
        description="tasks over the retry limit whose last dispatch has no verdict after "
                    "`days` days",
        rationale="A task retried past the limit and then left without a verdict is work "
                  "nobody is finishing. nagi-ledger flags a task over the retry limit so a "
                  "person looks at it; when its newest dispatch has waited `days` days "
                  "without a verdict, nobody did.",
        thresholds={"days": 7},
        sql=f"""SELECT task, retry_count, {_ts('last_dispatch')} AS last_dispatch
FROM task_status
WHERE over_retry_limit AND last_verdict IS NULL
  AND last_dispatch < CAST($today AS TIMESTAMP) - to_days(CAST($days AS INTEGER))
ORDER BY last_dispatch, task"""),
    Check(
        name="stale-pending", level="warn", tags=("audit", "dispatches"),
        description="dispatches waiting for a verdict for more than `days` days",
        rationale="A dispatch without a verdict is a subagent's result nobody checked. "
                  "Its claims are neither confirmed nor refuted, so the next agent cannot "
                  "tell whether to build on them.",
        thresholds={"days": 7},
        sql=f"""SELECT id, task, {_ts('ts')} AS ts, agent_type
FROM dispatches
WHERE verdict IS NULL AND ts < CAST($today AS TIMESTAMP) - to_days(CAST($days AS INTEGER))
ORDER BY ts, id"""),
    Check(
        name="old-high-slop", level="warn", tags=("slop",),
        description="open or in-progress slop of high or critical severity older than "
                    "`days` days",
        rationale="High-severity debt left open for a month is debt the team has stopped "
                  "seeing. CodeSmith records it so it gets cleaned up; its age says it "
                  "is not being.",
        thresholds={"days": 30},
        sql=f"""SELECT short_id, severity, title, {_ts("timezone('UTC', created_at)")} AS created
FROM slop_entries
WHERE status IN ('open', 'in_progress') AND severity IN ('high', 'critical')
  AND created_at < CAST($today AS TIMESTAMPTZ) - to_days(CAST($days AS INTEGER))
ORDER BY created_at, position"""),
    Check(
        name="meta-counts", level="error", tags=("ledger",),
        description="meta.yaml entry counts that disagree with the ledger files",
        rationale="meta.yaml's counts disagree with the ledger files. Smith and the "
                  "reconciler trust these counts to decide when to prune and reconcile; "
                  "wrong counts mean a half-finished edit or a hand edit that skipped them.",
        sql=f"""SELECT path, message AS problem
FROM _problems WHERE source = 'ledger' AND starts_with(message, {quote_text(META_COUNT_PREFIX)})
ORDER BY rowid"""),
    Check(
        name="malformed-entries", level="warn", tags=("ledger",),
        description="ledger entries with a missing or malformed field",
        rationale="A malformed ledger entry is read by agents as it is. A missing title, "
                  "date or confidence keeps it from being ranked, pruned or promoted.",
        sql="""SELECT path, line, title, array_to_string(problems, '; ') AS problems
FROM ledger_entries WHERE len(problems) > 0 ORDER BY file, position"""),
    Check(
        name="ledger-budget", level="warn", tags=("ledger", "budget"),
        description="the ledger over reconcile's word (estimated tokens) or entry budget",
        rationale="A ledger over its budget costs every agent session its context. "
                  "Reconcile drops the lowest-confidence entries to get back under; until it "
                  "runs, agents read more than was meant.",
        finder=_ledger_budget),
    Check(
        name="secrets", level="error", tags=("security",),
        description="a secret in any source (table, place, column and family; never the "
                    "secret)",
        rationale="A secret written into the records leaks with every handoff, export and "
                  "site. The same finder guards what leaves the machine; this finds what "
                  "is already at rest so it can be removed and rotated.",
        finder=_secrets),
    Check(
        name="interrupted-turns", level="warn", tags=("snapshots",),
        description="agent turns with no post-turn snapshot",
        rationale="A turn without its post-turn snapshot was interrupted. Its changes may be "
                  "half-made and cannot be compared with how the turn ended (the newest "
                  "turn may still be running).",
        sql="""SELECT repo, turn_key, max(turn) AS turn, count(*) AS snapshots
FROM snapshots WHERE turn_key IS NOT NULL GROUP BY repo, turn_key
HAVING count(*) FILTER (WHERE kind = 'post-turn') = 0
ORDER BY repo, min(position)"""),
    Check(
        name="slop-unloadable", level="error", tags=("slop",),
        description="what keeps CodeSmith from loading its slop ledger",
        rationale="CodeSmith refuses to load a slop ledger it cannot parse. The agent then "
                  "starts with no slop ledger at all, and its next write can replace the "
                  "file.",
        # the loader's rules; or a file that cannot be read at all (not JSON, not UTF-8):
        # then the slop source's one problem says why (and its rows are an older read's)
        sql=f"""SELECT path, line, CASE WHEN starts_with(message, {quote_text(LOAD_PREFIX)})
    THEN substr(message, {len(LOAD_PREFIX) + 1}) ELSE message END AS problem
FROM _problems WHERE source = 'slop' AND (starts_with(message, {quote_text(LOAD_PREFIX)})
    OR (SELECT starts_with(note, {quote_text(SOURCE_ERROR)}) FROM _sources
        WHERE source = 'slop'))
ORDER BY line NULLS FIRST, message"""),
)
