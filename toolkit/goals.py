"""nagi-ledger's goal gate as a source (tables ``goals`` and ``goal_events``), and its
session-start "open loops" brief (``toolkit audit brief``).

The loader reads ``goal.json`` and ``goal_history.jsonl`` (``toolkit.sources.goals``) when
either file's fingerprint changes: goal.json whole, the append-only history from where the
last load stopped (whole when it was rewritten); both files are only read. ``brief`` prints what
nagi-ledger's ``session_brief.py`` prints for the same goal file, audit DB and repositories.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.clock import naive_utc
from toolkit.errors import permission_denied
from toolkit.records import RULED_OUT_SQL
from toolkit.source import Place, Setting, Source, SourceResult, fingerprint_paths

if TYPE_CHECKING:
    import sqlite3

    from toolkit.config import Config
    from toolkit.store import Store

MIGRATIONS: list[tuple[str, str]] = [
    ("m110_goals", """
CREATE TABLE goals (
    goal VARCHAR,             -- the goal text (NULL when goal.json holds no text there)
    remaining BIGINT,         -- turns left (NULL when not a whole number: see problems)
    max_turns BIGINT,         -- the turn budget, extensions included
    turns_used BIGINT,        -- max_turns - remaining
    extensions INTEGER,       -- how often `goal_gate.py extend` added turns (0 when never)
    created TIMESTAMP,        -- when it was set (UTC)
    created_raw VARCHAR,
    state JSON,               -- goal.json as written
    problems VARCHAR[],
    path VARCHAR);
CREATE TABLE goal_events (
    line INTEGER,             -- line of goal_history.jsonl, from 1
    goal VARCHAR,
    outcome VARCHAR,          -- done | aborted | superseded | budget_exhausted | corrupt_state
    note VARCHAR,             -- the evidence (done) or reason (abort) given
    created TIMESTAMP,        -- when the goal was set (UTC)
    closed TIMESTAMP,         -- when it closed (UTC)
    created_raw VARCHAR, closed_raw VARCHAR,
    turns_used BIGINT,
    extra JSON,               -- keys nagi-ledger does not write
    problems VARCHAR[],
    path VARCHAR);
"""),
]

# --------------------------------------------------------------------------- the loader

def goal_paths(cfg: Config) -> tuple[Path, Path]:
    home = Path(os.path.expanduser("~")) / ".nagi"
    return (cfg.goal_file or home / "goal.json",
            cfg.goal_history or home / "goal_history.jsonl")


def _fingerprint(cfg: Config) -> tuple[str, str]:
    goal, history = goal_paths(cfg)
    return str(goal), fingerprint_paths([goal, history])


def _timestamp(value: Any) -> str | None:
    """An ISO time as naive UTC text for a TIMESTAMP column, or None."""
    if not isinstance(value, str):
        return None
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return naive_utc(t).isoformat(sep=" ")


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _load(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
    from toolkit.sources import goals as src

    goal_path, history_path = goal_paths(cfg)
    store.conn.execute("DELETE FROM goals")
    if not goal_path.exists() and not history_path.exists():
        store.conn.execute("DELETE FROM goal_events")
        return SourceResult("goals", str(goal_path), False,
                            "no nagi-ledger goal files (set NAGI_GOAL_FILE and "
                            "NAGI_GOAL_HISTORY, or --goal-file and --goal-history)")
    state, problems = src.read_goal_file(goal_path, cfg.max_file_bytes)
    prev = {} if full else ((store.source_state("goals") or {}).get("state") or {})
    events, more, history = _read_history(store, history_path, cfg.max_file_bytes,
                                          prev.get("history") or {})
    problems = problems + more
    remaining = max_turns = None
    if state is not None:
        remaining = src.stored_number("remaining", state.remaining)
        max_turns = src.stored_number("max_turns", state.max_turns)
        used = src.stored_number("turns_used", max_turns - remaining) \
            if remaining is not None and max_turns is not None else None
        extensions = src.stored_number("extensions", state.extensions)
        if extensions is None and src.whole_number(state.extensions) is None:
            extensions = 0  # absent (or no number): nagi-ledger's default
        store.insert_rows("goals", (
            "goal", "remaining", "max_turns", "turns_used", "extensions", "created",
            "created_raw", "state", "problems", "path"), [(
                _text(state.goal), remaining, max_turns, used,
                extensions, _timestamp(state.created),
                _text(state.created),
                {"goal": state.goal, "remaining": state.remaining,
                 "max_turns": state.max_turns, "created": state.created,
                 **({"extensions": state.extensions} if state.extensions is not None else {}),
                 **state.extra}, state.problems, state.path)])
    active = "no active goal"
    if state is not None:  # only numbers: the note is printed as it is (no file text)
        shown = ["?" if n is None else str(n) for n in (remaining, max_turns)]
        active = f"active goal ({shown[0]}/{shown[1]} turns left)"
    total = int(store.scalar("SELECT count(*) FROM goal_events"))
    history["rows"] = int(store.scalar("SELECT count(*) FROM goal_events WHERE line <= ?",
                                       [history.get("lines", 0)]))
    closed = f"{total} closed goal{'s' if total != 1 else ''}"
    result = SourceResult("goals", str(goal_path), True, f"{active}, {closed}",
                          total + (state is not None), problems=problems,
                          change=f"{len(events)} new")
    result.state = {"history": history}
    return result


_TAIL = 4096  # bytes before the last line read whose hash says "the file only grew"


def _tail_digest(path: Path, end: int) -> str | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, end - _TAIL))
            return hashlib.sha256(fh.read(min(end, _TAIL))).hexdigest()
    except OSError:
        return None


def _read_history(store: Store, path: Path, max_bytes: int | None, prev: dict[str, Any]
                  ) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """Closed goals added since the last load, and what was wrong with them.

    The history is append-only: when the file still holds what was read last time (its size
    did not shrink and the bytes before the last whole line read are unchanged), only the
    lines after it are read, and the rows and warnings of the lines before are kept. Anything
    else (rewritten, truncated, first load, ``--full``) reads it whole. Returns (new events,
    warnings of the history, state for the next load).
    """
    from toolkit.errors import DataError
    from toolkit.records import Problem
    from toolkit.sources import goals as src
    from toolkit.textio import max_file_bytes, read_bytes

    where = str(path)
    start = lines = 0
    try:
        size = path.stat().st_size if path.is_file() else None
    except OSError:
        size = None
    end = prev.get("end")
    if (size is not None and prev.get("path") == where and isinstance(end, int)
            and 0 < end <= size <= max_file_bytes(max_bytes)
            and _tail_digest(path, end) == prev.get("digest")
            and store.scalar("SELECT count(*) FROM goal_events WHERE line <= ?",
                             [prev.get("lines", 0)]) == prev.get("rows")):
        start, lines = end, int(prev.get("lines", 0))
    data = b""
    limit = max_file_bytes(max_bytes)
    if start:
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                data = fh.read(limit - start + 1)
        except OSError:
            start = lines = 0
        if start + len(data) > limit:  # grew past the limit: the whole read says so
            start = lines = 0
    if start:
        kept = [p for p in store.problems("goals")
                if p.path == where and p.line is not None and p.line <= lines]
        events, problems = src.parse_goal_history(data, where, lines + 1)
        problems = kept + problems
        store.conn.execute("DELETE FROM goal_events WHERE line > ?", [lines])
    else:
        store.conn.execute("DELETE FROM goal_events")
        data, events, problems = b"", [], []
        if path.exists():
            try:
                data = read_bytes(path, max_bytes)
            except DataError as exc:
                problems = [Problem("goals", where, None,
                                    f"{exc.detail}; goal history not read")]
            else:
                events, problems = src.parse_goal_history(data, where)
    whole = data.rfind(b"\n") + 1  # the bytes of whole lines read; a torn tail is re-read
    state: dict[str, Any] = {"path": where, "end": start + whole,
                             "lines": lines + data[:whole].count(b"\n")}
    if whole >= _TAIL or (start == 0 and whole):  # the bytes just read, not the file again
        state["digest"] = hashlib.sha256(data[max(0, whole - _TAIL):whole]).hexdigest()
    else:
        state["digest"] = _tail_digest(path, state["end"]) if state["end"] else None
    store.insert_rows("goal_events", (
        "line", "goal", "outcome", "note", "created", "closed", "created_raw", "closed_raw",
        "turns_used", "extra", "problems", "path"), [
        (e.line, _text(e.goal), _text(e.outcome), _text(e.note), _timestamp(e.created),
         _timestamp(e.closed), _text(e.created), _text(e.closed), _whole(e.turns_used),
         e.extra or None, e.problems, e.path) for e in events])
    return events, problems, state


def _whole(value: Any) -> int | None:
    from toolkit.sources.goals import stored_number

    return stored_number("turns_used", value)


def _nagi(place: Place) -> Path:
    return place.home / ".nagi"


SOURCE = Source(
    "goals", _fingerprint, _load,
    settings=(
        Setting("goal_file", "nagi-ledger's active goal (default: $NAGI_GOAL_FILE or "
                             "~/.nagi/goal.json).",
                lambda p: _nagi(p) / "goal.json", env="NAGI_GOAL_FILE", flag="--goal-file",
                rank=40),
        Setting("goal_history", "nagi-ledger's goal history (default: $NAGI_GOAL_HISTORY or "
                                "~/.nagi/goal_history.jsonl).",
                lambda p: _nagi(p) / "goal_history.jsonl", env="NAGI_GOAL_HISTORY",
                flag="--goal-history", rank=41)),
    migrations=tuple(MIGRATIONS),
    tables={
        "goals": "nagi-ledger's active goal (goal.json): text, turns left of the budget, since "
                 "when",
        "goal_events": "nagi-ledger's goal history (goal_history.jsonl): each closed goal and "
                       "how",
    })


# --------------------------------------------------------------------------- reading the store

def active_goal(store: Store) -> dict[str, Any] | None:
    """The active goal's row of ``goals``, or None."""
    if "goals" not in store.tables():
        return None
    rows = store.fetch_dicts("SELECT * FROM goals ORDER BY path LIMIT 1")
    return rows[0] if rows else None


def goal_history(store: Store) -> list[dict[str, Any]]:
    """The closed goals, newest first (by line: the file is append-only)."""
    if "goal_events" not in store.tables():
        return []
    return store.fetch_dicts("SELECT * FROM goal_events ORDER BY line DESC")


# --------------------------------------------------------------------------- the brief
# nagi-ledger's session_brief.py, rule for rule: same sections, order, truncation and cap.

BRIEF_DAYS = 3
BRIEF_MAX_ITEMS = 5
BRIEF_MAX_LEN = 1500
BRIEF_TRUNCATED = "(truncated)"
BRIEF_HEADER = "## 開いてるループ"
GIT_TIMEOUT_S = 3
GIT_BUDGET_S = 4.0


@dataclass
class Brief:
    """The brief's text ("" when nothing is open) and why parts of it may be missing."""

    text: str
    warnings: list[str] = field(default_factory=list)


def _cut(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + "…"


def _goal_section(goal_file: Path) -> list[str]:
    # Read as session_brief.py does: any failure or a missing key means no active goal.
    from toolkit.sources.goals import REQUIRED_KEYS

    try:
        if not goal_file.is_file():  # missing, or a FIFO whose open would wait for a writer
            return []
        data = json.loads(goal_file.read_text(encoding="utf-8"))
    except Exception:
        return []
    if not isinstance(data, dict) or not set(REQUIRED_KEYS) <= data.keys():
        return []
    return ["### アクティブ goal",
            (f"- {_cut(data.get('goal', ''), 200)} "
             f"(remaining {data.get('remaining')}/{data.get('max_turns')})")]


class _QueryFailed(Exception):
    """A query of the audit DB failed: session_brief.py then prints nothing at all."""


def _present(db: Path) -> bool:
    """Whether there is something at ``db``: a file that cannot be opened (or a folder on
    the way to it that may not be entered) is there, and said, as a damaged DB is; only a
    missing one is not."""
    try:
        os.stat(db)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def _connect(db: Path) -> sqlite3.Connection | None:
    """The audit DB opened read-only, or None when it is absent or cannot be opened."""
    import sqlite3

    from toolkit.errors import BusyError
    from toolkit.sources.audit import open_sqlite

    try:
        if not db.is_file():
            return None
    except OSError:  # a folder on the way that may not be entered: cannot be opened
        return None
    try:
        conn = open_sqlite(db, read_only=True, timeout=5.0)
    except (sqlite3.Error, BusyError):
        return None
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
    except sqlite3.Error:
        conn.close()
        return None
    conn.row_factory = sqlite3.Row
    return conn


def _rows(conn: sqlite3.Connection, sql: str, table: str, days: int, max_items: int,
          now: str | None) -> list[sqlite3.Row]:
    import sqlite3

    since = "datetime('now', ?)" if now is None else "datetime(?, ?)"
    # the end of an injected now's window compares times, as the store's windows do
    # (toolkit.queries): a row written with a 'T', a 'Z' or an offset is in it when its time
    # is, and a ts that is no time at all (NULL for SQLite too) is in every window it starts
    until = "" if now is None else " AND (julianday(ts) IS NULL OR julianday(ts) <= julianday(?))"
    params: list[Any] = [f"-{days} days"] if now is None else [now, f"-{days} days", now]
    try:
        return conn.execute(sql.format(since=since, until=until), [*params, max_items]
                            ).fetchall()
    except sqlite3.OperationalError as exc:
        if str(exc) == f"no such table: {table}":  # nagi-ledger creates it, empty
            return []
        raise _QueryFailed(str(exc)) from None
    except (sqlite3.Error, OverflowError) as exc:  # OverflowError: --max-items past 2**63
        raise _QueryFailed(str(exc)) from None


def _dispatch_section(conn: sqlite3.Connection, days: int, max_items: int, now: str | None
                      ) -> list[str]:
    rows = _rows(conn, "SELECT task, agent_type, model FROM dispatches WHERE verdict IS NULL "
                 "AND ts >= {since}{until} ORDER BY id DESC LIMIT ?", "dispatches", days,
                 max_items, now)
    if not rows:
        return []
    return ["### 検証待ち", *(f"- {_cut(r['task'], 70)} — {r['agent_type']}/{r['model']}"
                            for r in rows)]


def _dead_end_section(conn: sqlite3.Connection, days: int, max_items: int, now: str | None
                      ) -> list[str]:
    rows = _rows(conn, f"SELECT task, approach FROM approaches WHERE {RULED_OUT_SQL} "
                 "AND ts >= {since}{until} ORDER BY id DESC LIMIT ?",
                 "approaches", days, max_items, now)
    if not rows:
        return []
    return ["### 直近の dead-end", *(f"- {_cut(r['task'], 60)}: {_cut(r['approach'], 60)}"
                                  for r in rows)]


def brief_repos(env: dict[str, str] | None = None, cwd: Path | None = None) -> list[str]:
    """The repositories the brief checks: $NAGI_BRIEF_REPOS (os.pathsep-separated), else the
    git top level of the working folder, else none."""
    env = dict(os.environ) if env is None else env
    listed = env.get("NAGI_BRIEF_REPOS")
    if listed:
        return [p for p in listed.split(os.pathsep) if p.strip()]
    import subprocess

    try:
        proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=False,
                              capture_output=True, text=True, timeout=GIT_TIMEOUT_S, cwd=cwd)
    except Exception:
        return []
    top = proc.stdout.strip() if proc.returncode == 0 else ""
    return [top] if top else []


def _dirty_section(repos: list[str]) -> list[str]:
    """``git status --porcelain`` per repository, within one time budget for all of them."""
    import subprocess

    lines: list[str] = []
    start = time.monotonic()
    for repo in repos:
        left = GIT_BUDGET_S - (time.monotonic() - start)
        if left <= 0:
            break
        path = Path(repo)
        try:
            if not path.is_dir():
                continue
            # nagi-ledger's command, read-only: without --no-optional-locks git status
            # refreshes the repository's index and writes it back (taking index.lock, which
            # a git command of the user's running at the same time would then fail on)
            proc = subprocess.run(["git", "--no-optional-locks", "-C", str(path), "status",
                                   "--porcelain"],
                                  check=False, capture_output=True, text=True,
                                  timeout=min(GIT_TIMEOUT_S, left))
        except Exception:
            continue
        if proc.returncode != 0:
            continue
        changed = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        if changed:
            lines.append(f"- {path} ({len(changed)} changed)")
    return ["### 未 commit", *lines] if lines else []


def _assemble(sections: list[list[str]], truncated: bool) -> str:
    parts = [BRIEF_HEADER]
    for section in sections:
        parts += ["", *section]
    if truncated:
        parts += ["", BRIEF_TRUNCATED]
    return "\n".join(parts)


def brief(goal_file: Path, audit_db: Path, repos: list[str], *, days: int = BRIEF_DAYS,
          max_items: int = BRIEF_MAX_ITEMS, now: dt.datetime | None = None) -> Brief:
    """nagi-ledger's session-start brief for these files: "" when nothing is open.

    ``days`` or ``max_items`` of 0 or less mean the defaults, as in nagi-ledger. ``now``
    (naive UTC) ends the window there; without it the window is nagi-ledger's (SQLite's
    clock, no end). Reads only: the DB is opened read-only and never created.
    """
    days = days if days > 0 else BRIEF_DAYS
    max_items = max_items if max_items > 0 else BRIEF_MAX_ITEMS
    at = now.strftime("%Y-%m-%d %H:%M:%S") if now is not None else None
    warnings: list[str] = []
    sections = [s for s in [_goal_section(goal_file)] if s]
    conn = _connect(audit_db)
    if conn is None and _present(audit_db):
        # one that may not be read says what to change, as every command's error does
        warnings.append(f"the audit DB's sections are left out: {permission_denied(audit_db)}"
                        if not os.access(audit_db, os.R_OK) else
                        f"{audit_db}: cannot open the audit DB; its sections are left out")
    if conn is not None:
        try:
            sections += [s for s in (_dispatch_section(conn, days, max_items, at),
                                     _dead_end_section(conn, days, max_items, at)) if s]
        except _QueryFailed as exc:
            # session_brief.py fails open here: the whole brief is left out.
            return Brief("", [f"{audit_db}: {exc}; nagi-ledger prints no brief then"])
        finally:
            conn.close()
    dirty = _dirty_section(repos)
    if dirty:
        sections.append(dirty)
    if not sections:
        return Brief("", warnings)
    truncated = False
    text = _assemble(sections, truncated)
    while len(text) > BRIEF_MAX_LEN and len(sections) > 1:
        sections.pop()  # lowest priority first: repositories, dead ends, dispatches
        truncated = True
        text = _assemble(sections, truncated)
    if len(text) > BRIEF_MAX_LEN:
        marker = f"\n\n{BRIEF_TRUNCATED}"
        text = text[:BRIEF_MAX_LEN - len(marker)] + marker
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # a "\ud800" escape in goal.json: session_brief.py's print() cannot write it, and its
        # fail-open ends the hook with nothing printed (exit 0)
        return Brief("", [*warnings, f"{goal_file}: the brief holds a lone surrogate "
                          f"({exc.object[exc.start:exc.end]!a}); nagi-ledger prints no brief then"])
    return Brief(text, warnings)


__all__ = ["MIGRATIONS", "SOURCE", "Brief", "active_goal", "brief",
           "brief_repos", "goal_history", "goal_paths"]
