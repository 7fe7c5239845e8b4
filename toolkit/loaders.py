"""The sources, each declared once as a :class:`toolkit.source.Source`, and their registry.

This module declares the Smith ledger, the vault's sessions, the slop ledger, the audit DB
(or its JSON export) and the turn snapshots; ``toolkit.history`` and ``toolkit.goals`` declare
theirs. ``SOURCES`` lists them all in load order (history reads the snapshots table, so it
comes after snapshots). Each loader computes a cheap fingerprint first; when it equals the one
recorded in ``_sources`` the source is not read again (``toolkit.store`` runs them). A loader
whose source is absent records it as not found (with why); one whose source is present but
unreadable records the error, which is raised after the other sources are loaded.

``SOURCES`` is built on first use (what opens the store asks for it): ``toolkit.history``, the
history's loader, is imported only then, not by every command that only needs the settings
(``settings`` reads the sources that declare some: they are here and in ``toolkit.goals``).

The tables of the five sources declared here were created together by the store's first
migration (``m001_initial``, frozen: its text never changes); later changes to them are
migrations of their own source, here.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import clock, goals
from toolkit.errors import BusyError
from toolkit.source import (
    FastPathFailed,
    Place,
    Setting,
    Source,
    SourceResult,
    careful,
    fingerprint_paths,
    session_files,
)

if TYPE_CHECKING:
    from toolkit.config import Config
    from toolkit.records import Problem
    from toolkit.store import Store


def _codesmith_home(place: Place) -> Path:
    value = place.env.get("CODESMITH_HOME")
    return Path(value).expanduser() if value else place.home / ".codesmith"


# --------------------------------------------------------------------------- Smith ledger

def _ledger_paths(cfg: Config) -> list[Path]:
    """What the ledger's load reads: its files, and the intent journal of an interrupted edit
    (FAULTS G4), which the load's :func:`~toolkit.ledger.vault.open_vault` finishes or undoes
    first -- or reports, when it cannot -- as every ledger command does. A journal appearing,
    changing or going away is a change of the source: an incremental ``load`` and ``status``
    then say what ``ledger list`` says instead of "unchanged"."""
    from toolkit.records import LEDGER_FILES, journal_path

    d = cfg.ledger_dir
    return [*(d / f"{k}.md" for k in LEDGER_FILES), d / "meta.yaml", d / ".meta.json",
            d / "reconcile-log.md", cfg.smith_config, journal_path(cfg.vault)]


def _ledger_fp(cfg: Config) -> tuple[str, str]:
    return str(cfg.ledger_dir), fingerprint_paths(_ledger_paths(cfg))


def _ledger_row_code() -> str:
    """What a stored row of ledger_entries is made by besides its file's bytes: the parser,
    the entry ids' slugs, this loader and the store's insert (a new toolkit may store the same
    bytes differently)."""
    from toolkit import parsecache
    from toolkit.slugs import SLUG_MODULES
    from toolkit.sources.smith import PARSER_MODULES

    return parsecache.code_version(*PARSER_MODULES, *SLUG_MODULES, __name__, "toolkit.store")


def _kept_ledger_files(store: Store, prev: dict[str, Any], made_by: dict[str, str],
                       blobs: dict[str, str], counts: dict[str, int]) -> list[str]:
    """The ledger files whose stored rows are those a load would store now: the same bytes
    (git blob id) at the same place, stored by the same code, and as many rows as entries."""
    before = prev.get("blobs")
    if prev.get("made_by") != made_by or not isinstance(before, dict):
        return []
    same = [kind for kind, oid in blobs.items() if before.get(kind) == oid]
    if not same:
        return []
    stored = dict(store.conn.execute(
        "SELECT file, count(*) FROM ledger_entries GROUP BY file").fetchall())
    return [kind for kind in same if stored.get(kind, 0) == counts[kind]]


def _load_ledger(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
    """The ledger's files, meta and reconcile log. Only the files whose bytes changed since
    the last load are stored again (a ``full`` load, a moved vault or another toolkit stores
    them all): a file's rows depend on nothing but its bytes, its path and this code."""
    from toolkit.ledger.vault import open_vault
    from toolkit.sources.smith import prune_limits

    prev = {} if full else (store.source_state("ledger") or {}).get("state") or {}
    vault = open_vault(cfg.vault, max_bytes=cfg.max_file_bytes, sessions=False,
                       tolerate_large=True,  # a big file: a warning in status and on the site
                       cache=cfg.parse_cache,  # the parses the ledger commands answer from
                       spill=True)  # (the records kept there, not in memory, till inserted)
    store.conn.execute("DELETE FROM ledger_meta")
    store.conn.execute("DELETE FROM reconcile_runs")
    if not vault.exists:
        store.conn.execute("DELETE FROM ledger_entries")
        return SourceResult("ledger", str(cfg.ledger_dir), False,
                            "no Smith vault ledger (run /smith-reflect in the project, or pass "
                            "--project/--vault)")
    # Each file's entries a batch at a time (a cached or compact parse holds them as small
    # records until built): a big ledger is never held whole as objects, nor as rows.
    from toolkit.ledger.vault.lock import read_lock_field
    from toolkit.ledger.vault.meta import count_words
    from toolkit.records import LEDGER_FILES
    from toolkit.slugs import file_entry_slugs
    from toolkit.sources.history import blob_id
    from toolkit.store import ROW_BATCH, trim_c_heap

    columns = ("entry_id", "file", "title", "date", "date_raw", "category", "confidence",
               "observations", "source_reflections", "reflections", "context", "pattern",
               "evidence", "related", "form", "problems", "path", "line", "position")
    made_by = {"code": _ledger_row_code(),
               "dir": str(vault.root / "ledger")}
    blobs: dict[str, str] = {}  # the git blob id of each file whose entries are stored
    for kind in LEDGER_FILES:
        lf = vault.files[kind]
        if lf.exists and lf.error is None:
            blobs[kind] = blob_id(lf.data)
    counts = {kind: vault.files[kind].entry_count() for kind in LEDGER_FILES}
    kept = _kept_ledger_files(store, prev, made_by, blobs, counts)
    store.conn.execute("DELETE FROM ledger_entries WHERE NOT list_contains(?, file)", [kept])
    # each file's words (reconcile's token estimate), so the ledger-budget check need not
    # read the files again: (exists, words, error); a kept file's as the last load counted
    files: dict[str, tuple[bool, int, str | None]] = {}
    before = ledger_file_states(prev) or {}
    for kind in LEDGER_FILES:
        lf = vault.files[kind]
        if kind in kept and kind in before:
            files[kind] = before[kind]
        else:
            files[kind] = (lf.exists, count_words(lf.data) if lf.exists else 0, lf.error)
        lf.data = b""  # read no more: the file's bytes are let go before the rows are stored
        if kind in kept or not counts[kind]:
            continue
        slugs = file_entry_slugs(kind, lf.take_titles(), cache=cfg.parse_cache)
        # half a batch at a time: the widest rows of any source (at 50,000 entries the
        # inserts hold 4-6 MB less than at a whole batch, for about 0.1 s more CPU)
        batch = max(1, ROW_BATCH // 2)
        for at in range(0, len(slugs), batch):  # (each id made with its row)
            rows = [(f"{kind}/{slugs[pos]}", e.file, e.title, e.date, e.date, e.category,
                     e.confidence, e.observations, e.source_reflections, e.reflections,
                     e.context, e.pattern, e.evidence, e.related, e.form, list(e.problems),
                     e.path, e.line, pos)
                    for pos, e in enumerate(lf.take(at, at + batch), at)]
            store.insert_rows("ledger_entries", columns, rows)
            del rows
            trim_c_heap()  # the batch's records and rows: DuckDB's from here on
    total = sum(counts.values())
    mj = vault.meta_json or {}
    # the lock as reconcile reads it (text, whatever JSON type another tool wrote); a
    # last_reconcile that is not text is no time, as reconcile takes it ("never")
    lock = read_lock_field(mj) if isinstance(mj.get("lock"), dict) else None
    last_reconcile = mj.get("last_reconcile")
    limits = prune_limits(vault.meta, vault.smith_config)
    store.insert_rows("ledger_meta", (
        "meta_schema", "last_reflection", "total_reflections", "meta_yaml", "meta_json",
        "smith_config", "estimated_tokens", "total_patterns", "last_reconcile", "lock_holder",
        "lock_acquired", "prune_low_days", "prune_medium_days"), [(
            vault.meta.schema, vault.meta.last_reflection, vault.meta.total_reflections,
            vault.meta.data or None, vault.meta_json, vault.smith_config,
            mj.get("estimated_tokens") if isinstance(mj.get("estimated_tokens"), int) else None,
            mj.get("total_patterns") if isinstance(mj.get("total_patterns"), int) else None,
            last_reconcile if isinstance(last_reconcile, str) else None,
            lock.pid if lock else None, lock.acquired_raw if lock else None,
            limits["low"], limits["medium"])])
    store.insert_rows("reconcile_runs", (
        "ran_at", "trigger", "signals", "backup", "result", "actions", "merges", "prunes",
        "budget_drops", "path", "line"), [
        (r.ran_at, r.trigger, r.signals, r.backup, r.result, list(r.actions), list(r.merges),
         list(r.prunes), list(r.budget_drops), r.path, r.line) for r in vault.reconcile_runs])
    missing = [lf.name for lf in vault.files.values() if not lf.exists]
    note = f"{total} entries" + (f"; missing: {', '.join(missing)}" if missing else "")
    result = SourceResult("ledger", str(cfg.ledger_dir), True, note, total,
                          problems=vault.problems)
    # the history's working version holds these same contents: it copies their rows
    result.state = {"blobs": blobs, "files": files, "made_by": made_by}
    return result


def ledger_file_states(state: Any) -> dict[str, tuple[bool, int, str | None]] | None:
    """The five ledger files as a ledger load recorded them in its ``state`` (the ``_sources``
    row's, decoded): ``{kind: (exists, words, error)}``, ``error`` saying why the file could
    not be read. None when the load recorded none (no ledger, or another toolkit's load)."""
    from toolkit.records import LEDGER_FILES

    files = state.get("files") if isinstance(state, dict) else None
    if not isinstance(files, dict) or set(files) != set(LEDGER_FILES):
        return None
    if any(not isinstance(f, list) or len(f) != 3 for f in files.values()):
        return None
    return {kind: (bool(files[kind][0]), int(files[kind][1]),
                   None if files[kind][2] is None else str(files[kind][2]))
            for kind in LEDGER_FILES}


LEDGER = Source(
    "ledger", _ledger_fp, _load_ledger,
    settings=(Setting("vault", "Smith vault folder (default: .smith/vault at the project root).",
                      lambda p: p.root / ".smith" / "vault", env="SMITH_VAULT", flag="--vault",
                      folder=True, rank=10),),
    tables={
        "ledger_entries": "Smith Ledger entries, both forms, malformed ones included (problems)",
        "ledger_meta": "meta.yaml (any of its three schemas), .meta.json and config.json, one "
                       "row",
        "reconcile_runs": "runs recorded in reconcile-log.md",
    },
    bounded_memory=True)


# --------------------------------------------------------------------------- sessions

def _session_fp(cfg: Config) -> tuple[str, str]:
    d = cfg.sessions_dir
    # (a folder that cannot be listed raises here, each time: the store says it each time)
    return str(d), fingerprint_paths([d, *session_files(d)])


_STAMPED = ("started", "resumed", "ended")  # events whose heading holds a full date-time


def _event_times(start: str | None, events: Sequence[Any]) -> list[str | None]:
    """Each event's date-time (``YYYY-MM-DD HH:MM:SS``), in log order. A log writes only the
    time of day (``[HH:MM:SS]``); its day is the last full date before it (``session_start``,
    a ``## Started/Resumed/Ended: <date-time>`` heading), moved one day on each time that is
    more than 12 hours earlier than the one before it (the log is appended, so that is
    midnight passing; a few seconds earlier is a line written out of order). The
    times are the log's clock: a ``session_start`` with an offset says which (the store's
    times are UTC, as ``session_start`` itself is stored). None for an event without a
    readable time, or before any date."""
    day: dt.date | None = None
    last = ""
    zone: dt.tzinfo = dt.UTC
    if start:
        try:
            begun = dt.datetime.fromisoformat(start)
            day, last, zone = begun.date(), begun.strftime("%H:%M:%S"), begun.tzinfo or dt.UTC
        except ValueError:
            pass

    def utc_text(wall: dt.datetime) -> str:
        at = wall if wall.tzinfo else wall.replace(tzinfo=zone)
        return clock.utc(at).strftime("%Y-%m-%d %H:%M:%S")

    out: list[str | None] = []
    for e in events:
        if e.kind in _STAMPED:
            try:
                when = dt.datetime.fromisoformat(e.title.split(": ", 1)[1].strip())
            except (IndexError, ValueError):
                when = None
            if when is not None:
                if when.tzinfo is not None:  # its own offset: the log's clock from here
                    zone = when.tzinfo
                day, last = when.date(), when.strftime("%H:%M:%S")
                out.append(utc_text(when))
                continue
        time = e.time
        if day is None or not time or not re.fullmatch(r"\d{2}:\d{2}:\d{2}", time):
            out.append(None)
            continue
        try:
            wall = dt.datetime.fromisoformat(f"{day.isoformat()}T{time}")
        except ValueError:  # 25:61:00
            out.append(None)
            continue
        if time < last and _seconds(last) - _seconds(time) > _MIDNIGHT_GAP_S:
            day += dt.timedelta(days=1)
            wall += dt.timedelta(days=1)
        last = time
        out.append(utc_text(wall))
    return out


# A time of day more than this before the one above it is the next day; less is a line
# written a little out of order (a heading stamped a second after the line below it).
_MIDNIGHT_GAP_S = 12 * 3600


def _seconds(time: str) -> int:
    """Seconds since midnight of an ``HH:MM:SS`` text."""
    h, m, sec = time.split(":")
    return int(h) * 3600 + int(m) * 60 + int(sec)


def _load_sessions(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
    from toolkit.sources.smith import read_session

    store.conn.execute("DELETE FROM sessions")
    store.conn.execute("DELETE FROM session_events")
    d = cfg.sessions_dir
    if not d.is_dir():
        return SourceResult("sessions", str(d), False, "no vault sessions folder")
    problems: list[Problem] = []
    srows, erows = [], []
    for p in session_files(d):  # one that cannot be listed: unreadable, not "0 sessions"
        s, events, probs = read_session(p)
        problems.extend(probs)
        start = s.session_start.replace("T", " ") if s.session_start else None
        srows.append((s.name, s.path, start, s.ended, s.project, s.branch, s.author, s.status,
                      s.legacy_name, len(events), list(s.problems)))
        for e, ts in zip(events, _event_times(start, events), strict=True):
            erows.append((e.session, e.seq, ts, e.time, e.kind, e.title,
                          e.body, e.tool, e.tokens_in, e.tokens_out, e.tokens_total, e.target,
                          dict(e.fields) or None, e.path, e.line))
    store.insert_rows("sessions", ("name", "path", "session_start", "ended", "project",
                                   "branch", "author", "status", "legacy_name", "events",
                                   "problems"), srows)
    store.insert_rows("session_events", (
        "session", "seq", "ts", "time", "kind", "title", "body", "tool", "tokens_in",
        "tokens_out", "tokens_total", "target", "fields", "path", "line"), erows)
    return SourceResult("sessions", str(d), True, f"{len(srows)} sessions, {len(erows)} events",
                        len(srows), problems=problems)


SESSIONS = Source(
    "sessions", _session_fp, _load_sessions,  # in the vault: the ledger's --vault setting
    tables={
        "sessions": "vault session logs (frontmatter)",
        "session_events": "events of each session log: prompts, tool metrics, edits, skills, "
                          "subagents",
    })


# --------------------------------------------------------------------------- slop ledger

def _slop_fp(cfg: Config) -> tuple[str, str]:
    return str(cfg.slop_path), fingerprint_paths([cfg.slop_path])


def _load_slop(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
    from toolkit.sources.slop import read_slop

    store.conn.execute("DELETE FROM slop_entries")
    if not cfg.slop_path.exists():
        return SourceResult("slop", str(cfg.slop_path), False,
                            "no slop ledger (set CODESMITH_HOME or --slop)")
    sf = read_slop(cfg.slop_path, cfg.max_file_bytes)
    rows = [(e.id, e.short_id, e.bucket, e.severity, e.confidence, e.owner,
             list(e.source_links), e.title, e.description, e.status, e.cleanup_recommendation,
             e.created_at, e.updated_at, e.created_at, e.updated_at, e.task_id, e.thread_id,
             e.extra or None, list(e.problems), e.path, e.index, e.line) for e in sf.entries]
    store.insert_rows("slop_entries", (
        "id", "short_id", "bucket", "severity", "confidence", "owner", "source_links", "title",
        "description", "status", "cleanup_recommendation", "created_at", "updated_at",
        "created_at_raw", "updated_at_raw", "task_id", "thread_id", "extra", "problems", "path",
        "position", "line"), rows)
    return SourceResult("slop", str(cfg.slop_path), True, f"{len(rows)} entries", len(rows),
                        problems=sf.problems)


SLOP = Source(
    "slop", _slop_fp, _load_slop,
    settings=(Setting("slop", "CodeSmith slop ledger JSON (default: "
                              "$CODESMITH_HOME/slop_ledger/slop_ledger.json).",
                      lambda p: _codesmith_home(p) / "slop_ledger" / "slop_ledger.json",
                      env="CODESMITH_SLOP_LEDGER", flag="--slop", field="slop_path", rank=20),),
    tables={"slop_entries": "CodeSmith slop ledger entries (every field; source_links as a "
                            "list)"})


# --------------------------------------------------------------------------- audit DB

def _audit_fp(cfg: Config) -> tuple[str, str]:
    db = cfg.audit_db
    paths = [db]
    wal = db.with_name(db.name + "-wal")
    try:  # readers leave an empty -wal behind; only a WAL with frames means new data
        if wal.stat().st_size > 0:
            paths.append(wal)
    except OSError:
        pass
    if cfg.audit_json is not None:
        paths.append(cfg.audit_json)
    # the location status names: the file the load reads, also when reading it fails
    return str(_audit_export(cfg) or db), fingerprint_paths(paths)


def _audit_export(cfg: Config) -> Path | None:
    """The nagi-ledger JSON export the audit source reads: when there is no audit DB and the
    export is set and there; else None (the DB is read, or found missing)."""
    if cfg.audit_db.exists() or cfg.audit_json is None or not cfg.audit_json.exists():
        return None
    return cfg.audit_json


def _load_audit(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
    from toolkit.records import Problem
    from toolkit.sources import audit

    db = cfg.audit_db
    prev = (store.source_state("audit") or {}).get("state") or {}
    if _audit_export(cfg) is not None:
        return _load_audit_json(store, cfg)
    if not db.exists():
        for t in audit.TABLES:
            store.conn.execute(f"DELETE FROM {t}")
        return SourceResult("audit", str(db), False,
                            "audit DB not found (set NAGI_LEDGER_DB or --audit-db)")
    conn = audit.connect_ro(db)
    problems: list[Problem] = []
    try:
        schema = audit.inspect(conn, db)
        for t in schema.missing:
            problems.append(Problem("audit", str(db), None,
                                    f"table {t} is missing; treated as empty"))
        for t in schema.extra_tables:
            problems.append(Problem("audit", str(db), None,
                                    f"extra table {t} ignored (newer nagi-ledger?)"))
        for t, cols in schema.extra_columns.items():
            problems.append(Problem("audit", str(db), None,
                                    f"extra column(s) {', '.join(cols)} in {t} ignored"))
        ids = audit.max_ids(conn, schema, db)
        # rows are copied by id, so they only continue the rows of the same file: another
        # DB (--audit-db, NAGI_LEDGER_DB) or a file put in its place starts over
        ident = _file_identity(db)
        same_file = prev.get("file") == ident
        old_ids: dict[str, int] = prev.get("max_ids", {}) if not full and same_file else {}
        added = 0
        streamed: list[tuple[str, list[str], int]] = []
        for t in audit.TABLES:
            if t not in schema.tables:
                store.conn.execute(f"DELETE FROM {t}")
                continue
            after = old_ids.get(t, 0)
            have = store.scalar(f"SELECT coalesce(max(id), 0) FROM {t}") or 0
            if full or not same_file or ids.get(t, 0) < after or have != after:
                store.conn.execute(f"DELETE FROM {t}")  # replaced, reset or first load
                after = 0
            if _streams(schema.tables[t], after, ids.get(t, 0)):
                streamed.append((t, schema.tables[t], after))
            else:
                added += _copy_audit_rows(store, conn, db, t, schema.tables[t], after,
                                          problems)
        if "dispatches" in schema.tables and old_ids.get("dispatches"):
            _refresh_verdicts(store, conn, db, old_ids["dispatches"])
    finally:
        conn.close()
    # streamed once this connection is closed: ADBC's copy of SQLite and Python's never have
    # the DB open together in one process (audit.USERS says why)
    for t, present, after in streamed:
        added += _stream_audit_table(store, db, t, present, after)
    total, hand_written = _audit_rows(store, db)
    problems += hand_written
    res = SourceResult("audit", str(db), True, f"{total} rows", total, problems=problems,
                       change=f"{added} new")
    res.state = {"max_ids": ids, "file": ident}
    return res


# what Python's str.strip() takes off (nagi-ledger strips the task it is asked with it), but
# for the rarer Unicode spaces
_STRIPPED = " \t\n\r\x0b\x0c"


def _audit_rows(store: Store, path: Path) -> tuple[int, list[Any]]:
    """The rows of the audit tables loaded from ``path`` (the DB or a JSON export), in all,
    and what they hold that only a hand-written row can, said (one query for all three
    tables): a warning per table whose rows name their task with spaces around it (nagi-
    ledger's writers strip it; the site lists such a task as a task of its own, while
    nagi-ledger's tools, ``audit task-status`` and the MCP server, strip the name they are
    asked, so they answer for the task without the spaces), then one per table whose rows
    have a ``ts`` that is no time (``garbage``, ``''``, ``2026-11-27 25:61:00``: nagi-ledger's
    writers stamp SQLite's clock; the toolkit lists such a row as undated, day None on the
    site and no time in the API's tables, while nagi-ledger's own windows compare the text as
    written, as the toolkit's nagi tools do): said, not left to be found."""
    from toolkit.records import Problem
    from toolkit.sources import audit

    # each check a WHERE of its own (DuckDB filters the scan and reads the other columns of
    # the few rows that match; one scan with FILTER clauses read them for every row: ~8 %
    # slower at a million actions), each table's count its own subquery (a count with no
    # filter is answered from the table's row groups): one statement for all of them
    spaced = "task IS DISTINCT FROM trim(task, $stripped)"
    undated = "ts IS NULL AND ts_raw IS NOT NULL"
    total = " + ".join(f"(SELECT count(*) FROM {t})" for t in audit.TABLES)
    parts = [f"SELECT 0 AS i, '', ({total}), NULL, NULL"]
    checks = [(t, "spaced", spaced, "NULL") for t in audit.TABLES if "task" in audit.TABLES[t]]
    checks += [(t, "undated", undated, "arg_min(ts_raw, id)") for t in audit.TABLES]
    for i, (table, kind, where, text) in enumerate(checks, 1):
        parts.append(f"SELECT {i}, '{kind}', count(*), min(id), {text} FROM {table} "
                     f"WHERE {where}")
    rows = store.fetch(" UNION ALL ".join(parts) + " ORDER BY i", {"stripped": _STRIPPED})[1]
    out = []
    for i, _kind, n, first, text in rows[1:]:  # each row names its check (i)
        table, kind = checks[i - 1][:2]
        if n and kind == "spaced":
            out.append(Problem("audit", str(path), None, (
                (f"1 row of {table} names its task" if n == 1 else
                 f"{n} rows of {table} name their task") +
                f" with spaces around it (first: row id {first}): "
                "the site lists it as a task of its own, while `audit task-status` and the "
                "MCP tools (as nagi-ledger's) answer for the name without them")))
        elif n:
            out.append(Problem("audit", str(path), None, (
                (f"1 row of {table} has" if n == 1 else f"{n} rows of {table} have") +
                f" a time that is no date and time (first: row id {first}, {text!r}): "
                "listed as undated; nagi-ledger's time windows compare the text as written")))
    return int(rows[0][2]), out


def _file_identity(path: Path) -> list[Any]:
    """The resolved path, device and inode of a file: which file the copied rows came from."""
    st = path.stat()
    return [str(path.resolve()), st.st_dev, st.st_ino]


def _streams(present: list[str], after: int, upto: int) -> bool:
    """Whether a table's rows with id > after (``upto``: its largest id) are streamed as
    Arrow batches (fast) or read as validated rows (careful). The careful path is the
    reference, the stream a faster way to the same rows (it gives way to the careful path on
    any value it cannot take): a table with at most :data:`toolkit.store.FEW_ROWS` new ids
    goes the careful way at once, as ``insert_rows`` binds so few rows without Arrow, so that
    a small load or a refresh of a few new actions never imports pyarrow and ADBC's driver
    (about a tenth of a second of a new process's start)."""
    from toolkit.store import FEW_ROWS

    return (not careful() and upto - after > FEW_ROWS
            and all(c in present for c in ("id", "ts")))


def _stream_audit_table(store: Store, db: Path, table: str, present: list[str],
                        after: int) -> int:
    """Copy a table's rows with id > after as streamed Arrow batches (see :func:`_streams`)."""
    from toolkit.interrupts import raise_if_stopped
    from toolkit.sources import audit

    before = store.scalar(f"SELECT count(*) FROM {table}")
    try:
        audit.stream_into(db, table, present, after, store.insert_stream)
    except Exception as exc:  # wrong types mid-stream, driver trouble
        raise_if_stopped(exc)  # Ctrl-C or SIGTERM stopped it: no careful second try
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            raise BusyError("audit DB is busy (locked by a writer); retry in a moment",
                            path=db) from None
        raise FastPathFailed(str(exc)) from None
    return int(store.scalar(f"SELECT count(*) FROM {table}") - before)


def _copy_audit_rows(store: Store, conn: Any, db: Path, table: str, present: list[str],
                     after: int, problems: list[Problem]) -> int:
    """Copy a table's rows with id > after as validated rows (see :func:`_streams`)."""
    from toolkit.sources import audit

    rows, bad = audit.read_rows(conn, db, table, present, after)
    problems += _bad_row_problems(db, bad)
    return store.insert_rows(table, audit.STORE_COLUMNS[table], [audit.with_raw_ts(table, r)
                                                                 for r in rows])


def _refresh_verdicts(store: Store, conn: Any, db: Path, upto: int) -> None:
    """Verdicts change after the dispatch row is written: re-read them for loaded rows."""
    import sqlite3

    from toolkit.sources.audit import _translate

    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # as the rows were read
    try:
        rows = conn.execute("SELECT id, verdict, verdict_ts, verdict_notes FROM dispatches "
                            "WHERE id <= ?", (upto,)).fetchall()
    except sqlite3.Error as exc:
        raise _translate(exc, db) from None
    finally:
        conn.text_factory = str
    # through insert_rows, so that a few verdicts go without Arrow (as a few new rows do)
    store.conn.execute("CREATE OR REPLACE TEMP TABLE _toolkit_verdicts (id BIGINT, "
                       "verdict VARCHAR, verdict_ts VARCHAR, verdict_notes VARCHAR)")
    try:
        store.insert_rows("_toolkit_verdicts", ("id", "verdict", "verdict_ts", "verdict_notes"),
                          rows)
        store.conn.execute(
            "UPDATE dispatches d SET verdict = v.verdict, verdict_ts = v.ts, "
            "verdict_notes = v.verdict_notes FROM (SELECT id, verdict, verdict_notes, "
            f"{clock.utc_timestamp_sql('verdict_ts')} AS ts FROM temp._toolkit_verdicts) v "
            "WHERE d.id = v.id AND (d.verdict IS DISTINCT FROM v.verdict "
            "OR d.verdict_notes IS DISTINCT FROM v.verdict_notes "
            "OR CAST(d.verdict_ts AS VARCHAR) IS DISTINCT FROM CAST(v.ts AS VARCHAR))")
    finally:
        store.conn.execute("DROP TABLE IF EXISTS temp._toolkit_verdicts")


def _bad_row_problems(path: Path, bad: list[tuple[int | None, str]]) -> list[Problem]:
    """The problems of the audit rows ``audit.checked_row`` found wrong in ``path``."""
    from toolkit.records import Problem

    return [Problem("audit", str(path), None,
                    note + (f" (row id {rid})" if rid is not None else "")) for rid, note in bad]


def _load_audit_json(store: Store, cfg: Config) -> SourceResult:
    from toolkit.sources import audit

    assert cfg.audit_json is not None
    data = audit.read_export(cfg.audit_json, cfg.max_file_bytes)
    total = 0
    bad: list[tuple[int | None, str]] = []
    for t, cols in audit.TABLES.items():
        store.conn.execute(f"DELETE FROM {t}")
        rows = [audit.with_raw_ts(t, row) for r in data[t]
                if (row := audit.checked_row(t, [r.get(c) for c in cols], bad)) is not None]
        total += store.insert_rows(t, audit.STORE_COLUMNS[t], rows)
    return SourceResult("audit", str(cfg.audit_json), True,
                        f"{total} rows from a nagi-ledger JSON export", total,
                        problems=[*_bad_row_problems(cfg.audit_json, bad),
                                  *_audit_rows(store, cfg.audit_json)[1]])


# nagi-ledger answers with ``ts`` as written and compares it as text (its windows are SQLite's
# ``ts >= datetime('now', ?)`` on the TEXT column): ``ts_raw`` keeps that text beside the parsed
# ``ts``. Forgetting the audit source's state makes the next refresh read every row again.
AUDIT_TS_RAW_MIGRATION = ("m130_audit_ts_raw", """
ALTER TABLE actions ADD COLUMN ts_raw VARCHAR;
ALTER TABLE dispatches ADD COLUMN ts_raw VARCHAR;
ALTER TABLE approaches ADD COLUMN ts_raw VARCHAR;
DELETE FROM _sources WHERE source = 'audit';
""")

AUDIT = Source(
    "audit", _audit_fp, _load_audit,
    settings=(
        Setting("audit_db", "nagi-ledger audit DB (default: $NAGI_LEDGER_DB or "
                            "~/.nagi/ledger.db).",
                lambda p: p.home / ".nagi" / "ledger.db", env="NAGI_LEDGER_DB",
                flag="--audit-db", rank=30),
        Setting("audit_json", "nagi-ledger JSON export to read when there is no audit DB.",
                lambda p: None, env="NAGI_LEDGER_EXPORT", flag="--audit-json", rank=31)),
    tables={
        "actions": "nagi-ledger autonomous actions (append-only copy)",
        "dispatches": "nagi-ledger subagent dispatches with verdicts",
        "approaches": "nagi-ledger approaches: DEAD_END, NO_GO, WORKS",
        "task_status": "dispatches, retries, last verdict, over retry limit, per task",
        "stats_by_tier": "actions per day and tier",
    },
    migrations=(AUDIT_TS_RAW_MIGRATION,))


# --------------------------------------------------------------------------- snapshots
# (improved by the history feature: identity by label and tree, times kept across CodeSmith's
#  pruning, per-turn net diffs in turn_files; the columns come from toolkit.history's
#  m101_history_snapshots migration)

def _snap_fp(cfg: Config) -> tuple[str, str]:
    from toolkit.sources.snapshots import head_sha, side_repo_for

    repo = side_repo_for(cfg.workspace, cfg.snapshots_home)
    return str(repo), (head_sha(repo) or "-") if repo.is_dir() else "-"


def _fmt_ts(unix: int) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _load_snapshots(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
    """Snapshots, the files each changed, and each turn's net change (pre-turn -> post-turn).

    A snapshot is identified by ``snap_key`` (label and tree), which survives CodeSmith's
    pruning; its diff against the previous snapshot is recomputed only when that previous
    snapshot's tree changed, and its time (``ts``) is the one first seen (pruning rewrites
    author times; ``git_ts`` holds the current one).
    """
    from toolkit.sources import snapshots as snap

    repo = snap.side_repo_for(cfg.workspace, cfg.snapshots_home)
    r = str(repo)
    if not repo.is_dir():
        for t in ("snapshots", "snapshot_files", "turn_files"):
            store.conn.execute(f"DELETE FROM {t}")
        return SourceResult("snapshots", r, False,
                            f"no CodeSmith snapshots for workspace {cfg.workspace}")
    snaps = snap.list_snapshots(repo)
    turns = snap.group_turns(snaps)
    tree_of = {s.sha: s.tree for s in snaps}
    parent_tree = {s.sha: tree_of.get(s.parent) if s.parent else None for s in snaps}
    known: dict[str, tuple[Any, str | None]] = {}
    if not full:
        known = {k: (ts, pt) for k, ts, pt in store.conn.execute(
            "SELECT snap_key, ts, parent_tree FROM snapshots WHERE repo = ?", [r]).fetchall()}
    # files each snapshot changed: reuse rows whose (key, previous tree) is unchanged
    keep = [s.key for s in snaps if s.key in known and known[s.key][1] == parent_tree[s.sha]]
    store.conn.execute("DELETE FROM snapshot_files WHERE repo = ? AND (snap_key IS NULL OR "
                       "snap_key NOT IN (SELECT unnest(?::VARCHAR[])))", [r, keep])
    keep_set = set(keep)
    # each one against its parent's tree, all in one git process (a parent outside the
    # listing, which a shallow or grafted repo may have, is compared on its own)
    todo = [s for s in snaps if s.key not in keep_set]
    by_trees = [s for s in todo if s.tree and (s.parent is None or parent_tree[s.sha])]
    changed = dict(zip([s.sha for s in by_trees], snap.diff_tree_pairs(
        repo, [(parent_tree[s.sha], s.tree or "") for s in by_trees]), strict=True))
    files_rows = []
    for s in todo:
        files = changed[s.sha] if s.sha in changed else snap.changed_files(repo, s)
        for f in files:
            files_rows.append((r, s.sha, s.key, s.position, f.path, f.status, f.added,
                               f.deleted))
    store.insert_rows("snapshot_files", ("repo", "sha", "snap_key", "position", "path",
                                         "status", "added", "deleted"), files_rows)
    # SHAs and positions move (new snapshots, pruning): keep them current
    store.conn.execute(
        "UPDATE snapshot_files f SET sha = p.sha, position = p.position FROM "
        "(SELECT unnest(?::VARCHAR[]) AS snap_key, unnest(?::VARCHAR[]) AS sha, "
        " unnest(?::INTEGER[]) AS position) p WHERE f.snap_key = p.snap_key AND f.repo = ?",
        [[s.key for s in snaps], [s.sha for s in snaps], [s.position for s in snaps], r])
    # each turn's net change: first snapshot's parent (or pre-turn) -> last snapshot
    spans = {}
    for turn in turns:
        first, last = turn.snapshots[0], turn.snapshots[-1]
        start = first.tree if first.kind == "pre-turn" else parent_tree[first.sha]
        spans[turn.key] = (f"{start or snap.EMPTY_TREE}..{last.tree}", start,
                           last.tree or last.sha)
    have_spans = {} if full else dict(store.conn.execute(
        "SELECT DISTINCT turn_key, span FROM turn_files WHERE repo = ?", [r]).fetchall())
    keep_turns = [k for k, (span, _, _) in spans.items() if have_spans.get(k) == span]
    store.conn.execute("DELETE FROM turn_files WHERE repo = ? AND turn_key NOT IN "
                       "(SELECT unnest(?::VARCHAR[]))", [r, keep_turns])
    todo_spans = [key for key in spans if key not in keep_turns]
    pairs = [(spans[key][1], spans[key][2]) for key in todo_spans]
    # all in one git process, as trees (a commit, where a snapshot has no tree, on its own)
    trees = set(tree_of.values())
    as_trees = [pair for pair in pairs if pair[1] in trees]
    span_files = dict(zip(as_trees, snap.diff_tree_pairs(repo, as_trees), strict=True))
    turn_rows = []
    for key, (start, end) in zip(todo_spans, pairs, strict=True):
        span = spans[key][0]
        files = span_files[(start, end)] if (start, end) in span_files else \
            snap.diff_trees(repo, start, end)
        for f in files:
            turn_rows.append((r, key, span, f.path, f.status, f.added, f.deleted))
    store.insert_rows("turn_files", ("repo", "turn_key", "span", "path", "status", "added",
                                     "deleted"), turn_rows)
    turn_of = {s.key: t.key for t in turns for s in t.snapshots}
    store.conn.execute("DELETE FROM snapshots WHERE repo = ?", [r])
    rows = []
    for s in snaps:
        first_seen = known.get(s.key, (None, None))[0] if s.key else None
        ts = first_seen.strftime("%Y-%m-%d %H:%M:%S") if first_seen else _fmt_ts(s.time)
        rows.append((r, s.position, s.sha, s.parent, ts, _fmt_ts(s.time), s.label, s.kind,
                     s.turn, s.call_id, s.snippet, s.tree, parent_tree[s.sha], s.key,
                     turn_of.get(s.key), 0, 0, 0))
    store.insert_rows("snapshots", ("repo", "position", "sha", "parent", "ts", "git_ts",
                                    "label", "kind", "turn", "call_id", "snippet", "tree",
                                    "parent_tree", "snap_key", "turn_key", "files_changed",
                                    "lines_added", "lines_deleted"), rows)
    store.conn.execute(
        "UPDATE snapshots s SET files_changed = f.n, lines_added = f.a, "
        "lines_deleted = f.d FROM (SELECT snap_key, count(*) AS n, sum(added) AS a, "
        "sum(deleted) AS d FROM snapshot_files WHERE repo = ? GROUP BY snap_key) f "
        "WHERE s.snap_key = f.snap_key AND s.repo = ?", [r, r])
    return SourceResult("snapshots", r, True, f"{len(snaps)} snapshots, {len(turns)} turns",
                        len(snaps))


# Columns and tables the history feature needed: identity by label and tree, times kept
# across CodeSmith's pruning, per-turn net diffs (turn_files, snapshot_turns).
SNAPSHOT_MIGRATION = ("m101_history_snapshots", """
ALTER TABLE snapshots ADD COLUMN git_ts TIMESTAMP;
ALTER TABLE snapshots ADD COLUMN tree VARCHAR;
ALTER TABLE snapshots ADD COLUMN parent_tree VARCHAR;
ALTER TABLE snapshots ADD COLUMN snap_key VARCHAR;
ALTER TABLE snapshots ADD COLUMN turn_key VARCHAR;
ALTER TABLE snapshot_files ADD COLUMN snap_key VARCHAR;
CREATE TABLE turn_files (
    repo VARCHAR, turn_key VARCHAR,
    span VARCHAR,             -- <tree before the turn>..<tree after it>
    path VARCHAR, status VARCHAR, added INTEGER, deleted INTEGER);
CREATE VIEW snapshot_turns AS
WITH t AS (
    SELECT repo, turn_key, max(turn) AS turn,
           arg_max(snippet, position) FILTER (WHERE snippet IS NOT NULL) AS snippet,
           min(position) AS newest_position,
           max(position) FILTER (WHERE kind = 'pre-turn') AS pre_position,
           min(position) FILTER (WHERE kind = 'post-turn') AS post_position,
           min(ts) FILTER (WHERE kind = 'pre-turn') AS pre_ts,
           max(ts) FILTER (WHERE kind = 'post-turn') AS post_ts,
           min(ts) AS first_ts, max(ts) AS last_ts,
           count(*) FILTER (WHERE kind = 'tool') AS tool_snapshots
    FROM snapshots WHERE turn_key IS NOT NULL GROUP BY repo, turn_key),
f AS (
    SELECT repo, turn_key, count(*) AS files_changed, sum(added) AS lines_added,
           sum(deleted) AS lines_deleted, list(path ORDER BY path) AS files
    FROM turn_files GROUP BY repo, turn_key),
w AS (
    SELECT t.*, coalesce(t.pre_ts, t.first_ts) AS started,
           coalesce(t.post_ts, t.last_ts) AS ended FROM t)
SELECT w.repo, w.turn_key,
       row_number() OVER (PARTITION BY w.repo ORDER BY w.newest_position) AS number,
       w.turn, w.snippet, w.pre_position, w.post_position, w.started, w.ended,
       w.tool_snapshots,
       coalesce(f.files_changed, 0) AS files_changed, coalesce(f.lines_added, 0) AS lines_added,
       coalesce(f.lines_deleted, 0) AS lines_deleted, coalesce(f.files, []) AS files,
       (SELECT count(*) FROM actions a WHERE a.ts BETWEEN w.started AND w.ended) AS actions,
       (SELECT count(*) FROM dispatches d WHERE d.ts BETWEEN w.started AND w.ended)
           AS dispatches
FROM w LEFT JOIN f ON f.repo = w.repo AND f.turn_key = w.turn_key;
UPDATE _sources SET fingerprint = NULL WHERE source = 'snapshots';
""")


SNAPSHOTS = Source(
    "snapshots", _snap_fp, _load_snapshots,
    settings=(
        Setting("snapshots_home", "CodeSmith snapshots folder (default: ~/.codesmith/snapshots).",
                # CodeSmith's snapshot path ignores CODESMITH_HOME (FORMATS.md §2.5)
                lambda p: p.home / ".codesmith" / "snapshots", env="CODESMITH_SNAPSHOTS",
                flag="--snapshots-home", folder=True, rank=50),
        Setting("workspace", "Workspace whose turn snapshots are read (default: the project "
                             "root).", lambda p: p.root, flag="--workspace", folder=True,
                rank=51)),
    migrations=(SNAPSHOT_MIGRATION,),
    tables={
        "snapshots": "CodeSmith turn snapshots, newest first (position 1 = newest)",
        "snapshot_files": "files each snapshot changed against the previous one",
        "turn_files": "files each turn changed, pre-turn -> post-turn, with lines added/deleted",
        "snapshot_turns": "view: one row per turn: prompt snippet, files, lines +/-, audit "
                          "actions and dispatches in the turn's time window",
    })


# --------------------------------------------------------------------------- the registry

# Every source, in load order. Built on first use (``__getattr__`` below), with history's
# loader; declared here so that ``from toolkit.loaders import SOURCES`` is typed.
SOURCES: tuple[Source, ...]

# The sources that declare settings: enough for the global options and ``toolkit.config``
# without importing the history's loader (test_source_contract checks it is every source
# that declares one).
_SETTING_SOURCES: tuple[Source, ...] = (LEDGER, SLOP, AUDIT, SNAPSHOTS, goals.SOURCE)


def __getattr__(name: str) -> Any:
    if name == "SOURCES":
        from toolkit import history

        sources = (LEDGER, SESSIONS, SLOP, AUDIT, SNAPSHOTS, history.SOURCE, goals.SOURCE)
        globals()["SOURCES"] = sources
        return sources
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def settings() -> list[Setting]:
    """Every source's settings, in the order of the global options of ``toolkit --help``."""
    return sorted((s for src in _SETTING_SOURCES for s in src.settings), key=lambda s: s.rank)


__all__ = ["AUDIT", "LEDGER", "SESSIONS", "SLOP", "SNAPSHOTS", "SOURCES",
           "settings"]
