"""Helpers for the audit and MCP tests: audit DBs with fixed timestamps, a lock-holding process."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FixtureProject, reap

NOW = "2026-05-04 12:00:00"  # "now" for the sample rows of formats/nagi-ledger (05:12 - 06:05)


@pytest.fixture(autouse=True)
def _no_injected_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's TOOLKIT_NOW must not leak into the tests (each passes --now itself)."""
    monkeypatch.delenv("TOOLKIT_NOW", raising=False)


def write_export(path: Path, **tables: list[dict[str, object]]) -> Path:
    """A nagi-ledger JSON export at ``path`` holding ``tables`` (the others empty)."""
    path.write_text(json.dumps({"schema": "nagi-ledger-export/1", "actions": [],
                                "dispatches": [], "approaches": [], **tables}),
                    encoding="utf-8")
    return path


def read_from_export(project: FixtureProject, monkeypatch: pytest.MonkeyPatch,
                     **tables: list[dict[str, object]]) -> Path:
    """The project's audit source from now on: a JSON export holding ``tables`` (beside the
    project), read as when there is no audit DB (removed; ``$NAGI_LEDGER_EXPORT`` names the
    export)."""
    export = write_export(project.root.parent / "export.json", **tables)
    project.audit_db.unlink()
    monkeypatch.setenv("NAGI_LEDGER_EXPORT", str(export))
    return export


def last_error(result: Any) -> str:
    """The last stderr line of a CliRunner result (the ``Error: ...`` line)."""
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def file_state(path: Path) -> tuple[str, int, int] | None:
    """sha256, mode, size of a file, or None when it does not exist ("nothing lost")."""
    if not path.exists():
        return None
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mode, st.st_size


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def insert(db: Path, table: str, **values: Any) -> int:
    """Insert one row with explicit values (a fixed ``ts`` keeps tests off the clock)."""
    conn = sqlite3.connect(db)
    try:
        cols = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        cur = conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(values.values()))
        conn.commit()
        return int(cur.lastrowid or 0)
    finally:
        conn.close()


def normalized_schema(db: Path) -> dict[str, str]:
    """table -> its CREATE statement without comments and insignificant whitespace."""
    out = {}
    for name, sql in rows(db, "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                              "AND name NOT LIKE 'sqlite_%' ORDER BY name"):
        text = re.sub(r"--[^\n]*", "", sql)
        text = re.sub(r"\s+", " ", text)
        text = re.sub(r"\s*([(),])\s*", r"\1", text).strip()
        out[name] = text
    return out


_HOLDER = r"""
import sqlite3, sys, time
db, mode, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
conn = sqlite3.connect(db, isolation_level=None)
if mode == "exclusive":
    conn.execute("BEGIN EXCLUSIVE")
else:  # a WAL writer mid-transaction
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO dispatches (task, agent_type, model, brief_summary) "
                 "VALUES ('uncommitted task', 'fork', 'opus', 'never committed')")
print("locked", flush=True)
if hold < 0:
    sys.stdin.readline()  # hold until told
else:
    time.sleep(hold)
conn.execute("ROLLBACK" if mode != "exclusive" else "COMMIT")
print("released", flush=True)
"""


class LockHolder:
    """A real second process holding a lock on an SQLite DB (POSIX locks do not conflict
    inside one process). ``hold`` seconds, or until ``release()`` when negative."""

    def __init__(self, db: Path, mode: str = "exclusive", hold: float = -1) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(db), mode, str(hold)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "locked", f"lock holder failed to start: {line!r}"

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
        self.proc.wait(timeout=30)
        reap(self.proc)

    def __enter__(self) -> LockHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def rollback_journal_db(path: Path) -> Path:
    """An audit DB in rollback-journal mode (journal_mode=DELETE) with the sample rows."""
    from tests.conftest import make_audit_db

    make_audit_db(path, wal=False)
    assert rows(path, "PRAGMA journal_mode")[0][0] == "delete"
    return path
