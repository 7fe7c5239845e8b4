"""FAULTS.md C: the audit DB is read-only, never created, and bad or busy DBs fail clearly."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._audit_helpers import read_from_export
from tests.conftest import make_audit_db, reap, tree_digest


def _last_error(result) -> str:
    return [line for line in result.output.splitlines() if line.startswith("Error:")][-1]


def _siblings(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir())


@pytest.mark.parametrize("content", [b"this is not a database\n" * 10,
                                     b"SQLite format 3\x00" + b"\xff" * 4000])
def test_c1_junk_file_exit_65_unmodified(project, cli_run, content):
    project.audit_db.unlink()
    project.audit_db.write_bytes(content)
    before = tree_digest(project.audit_db.parent)
    result = cli_run("load")
    assert result.exit_code == 65
    err = _last_error(result)
    assert err.startswith(f"Error: {project.audit_db}: ")
    assert "not a valid SQLite database" in err or "damaged" in err
    assert tree_digest(project.audit_db.parent) == before
    assert _siblings(project.audit_db) == ["ledger.db"]  # no -wal/-shm created


def test_c1_truncated_db_is_damaged(project, cli_run):
    conn = sqlite3.connect(project.audit_db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.executemany("INSERT INTO actions (tier, category, description) VALUES (1, 'c', ?)",
                     [("x" * 500,) for _ in range(200)])
    conn.commit()
    conn.close()
    data = project.audit_db.read_bytes()
    project.audit_db.write_bytes(data[: len(data) // 2])
    result = cli_run("load")
    assert result.exit_code == 65
    assert "database is damaged" in _last_error(result)
    assert "Restore the audit DB from a backup" in _last_error(result)


def test_c2_missing_db_is_reported_and_not_created(project, cli_run):
    project.audit_db.unlink()
    result = cli_run("load")
    assert result.exit_code == 0
    assert "audit      not found  audit DB not found (set NAGI_LEDGER_DB or --audit-db)" \
        in result.output
    assert not project.audit_db.exists()
    assert _siblings(project.audit_db) == []


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT INTO actions (tier, category, description) VALUES (2, 'late', 'committed')")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
print("committed", flush=True)
"""


def _rollback_journal_db(path: Path) -> None:
    path.unlink()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    make_audit_db(path, wal=False)


def _start_locker(db: Path, hold: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(db), str(hold)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_c3_exclusive_lock_past_timeout_is_busy_75(project, cli_run, monkeypatch):
    _rollback_journal_db(project.audit_db)
    monkeypatch.setattr("toolkit.sources.audit.BUSY_TIMEOUT_MS", 300)
    proc = _start_locker(project.audit_db, 5)
    try:
        result = cli_run("load")
    finally:
        reap(proc)
    assert result.exit_code == 75
    assert _last_error(result) == (f"Error: {project.audit_db}: audit DB is busy (locked by a "
                                   "writer); retry in a moment")


def test_c3_writer_that_commits_in_time_is_waited_for(project, cli_run, monkeypatch):
    _rollback_journal_db(project.audit_db)
    monkeypatch.setattr("toolkit.sources.audit.BUSY_TIMEOUT_MS", 10_000)
    proc = _start_locker(project.audit_db, 0.5)
    try:
        result = cli_run("load")
    finally:
        proc.wait()  # it lets go of the lock, and ends, after 0.5 s
        reap(proc)
    assert result.exit_code == 0, result.output
    out = cli_run("query", "SELECT count(*) AS n FROM actions WHERE category = 'late'",
                  "--format", "csv").output
    assert out.splitlines() == ["n", "1"]


WAL_WRITER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO actions (tier, category, description) VALUES (2, 'uncommitted', 'x')")
print("writing", flush=True)
time.sleep(30)
"""


def test_c4_wal_writer_mid_transaction_reads_last_commit(project, cli_run):
    proc = subprocess.Popen([sys.executable, "-c", WAL_WRITER, str(project.audit_db)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        result = cli_run("load")
        assert result.exit_code == 0, result.output
        out = cli_run("query", "SELECT count(*) AS n FROM actions", "--format", "csv").output
        assert out.splitlines() == ["n", "3"]
    finally:
        reap(proc)


def test_c5_wrong_types_nulls_and_huge_text_load_with_notes(project, cli_run):
    conn = sqlite3.connect(project.audit_db)
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                 "('not a time', 'high', 'x', 'text in tier', NULL)")
    conn.execute("INSERT INTO actions (ts, tier, category, description) VALUES "
                 "('2026-05-05 00:00:00', 1, 'big', ?)", ("z" * 1_000_000,))
    conn.commit()
    conn.close()
    result = cli_run("load")
    assert result.exit_code == 0, result.output
    out = json.loads(cli_run("query", "SELECT id, ts, tier, length(description) AS n FROM "
                             "actions WHERE id > 3 ORDER BY id", "--format", "json").output)
    assert out == [{"id": 4, "ts": None, "tier": None, "n": 12},
                   {"id": 5, "ts": "2026-05-05 00:00:00", "tier": 1, "n": 1_000_000}]
    warnings = json.loads(cli_run("status", "--json").output)["warnings"]
    assert any("actions.tier is 'high', not an integer (row id 4)" in w["message"]
               for w in warnings)


def test_c6_newer_schema_and_missing_table(project, cli_run):
    conn = sqlite3.connect(project.audit_db)
    conn.execute("ALTER TABLE actions ADD COLUMN session_id TEXT")
    conn.execute("CREATE TABLE goals (id INTEGER PRIMARY KEY, goal TEXT)")
    conn.execute("DROP TABLE approaches")
    conn.commit()
    conn.close()
    result = cli_run("load")
    assert result.exit_code == 0, result.output
    msgs = [w["message"] for w in json.loads(cli_run("status", "--json").output)["warnings"]]
    assert "table approaches is missing; treated as empty" in msgs
    assert "extra table goals ignored (newer nagi-ledger?)" in msgs
    assert "extra column(s) session_id in actions ignored" in msgs
    out = cli_run("query", "SELECT (SELECT count(*) FROM actions) AS a, "
                  "(SELECT count(*) FROM approaches) AS b", "--format", "csv").output
    assert out.splitlines() == ["a,b", "3,0"]


def test_audit_db_is_never_written(project, cli_run):
    conn = sqlite3.connect(project.audit_db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    before = tree_digest(project.audit_db.parent)
    mtime = os.stat(project.audit_db).st_mtime_ns
    cli_run("load", "--full")
    time.sleep(0.01)
    assert tree_digest(project.audit_db.parent) == before
    assert os.stat(project.audit_db).st_mtime_ns == mtime


# the same wrong values in the audit DB (careful path) and in a hand-edited JSON export
_ODD_ACTIONS = [  # (tier, description) of actions 1..6; ts is a number in action 2
    (1, "fine"), ("2", "tier as text"), ("two", "tier not a number"), (2.5, "tier a float"),
    (True, "tier a boolean"), (0, {"nested": "object"})]


@pytest.mark.parametrize("copies", [1, 700], ids=["few rows", "many rows"])
def test_c5_wrong_types_in_a_json_export_load_as_from_the_db_with_notes(
        project, cli_run, monkeypatch, copies):
    """A nagi-ledger JSON export whose values have the wrong type (a hand edit) loads as the
    DB's careful path loads the same values: a wrong integer is NULL with a warning, an
    integer's text is the integer, a number in a text column is its text; never a traceback.
    With more rows than the store binds as lists, the rows go through Arrow: same result."""
    from toolkit.store import FEW_ROWS

    assert copies == 1 or 6 * copies > FEW_ROWS
    actions = []
    for n in range(copies):
        for i, (tier, text) in enumerate(_ODD_ACTIONS, start=1):
            actions.append({"id": n * 6 + i, "ts": 20260504 if i == 2 else "2026-05-04 05:00:00",
                            "tier": tier, "category": "git", "description": text,
                            "project": "acme-api"})
    read_from_export(project, monkeypatch, actions=actions)
    result = cli_run("load")
    assert result.exit_code == 0, result.output

    def stored() -> tuple[list[dict], list[str]]:
        rows = json.loads(cli_run("query", "SELECT id, CAST(ts AS VARCHAR) AS ts, tier, "
                                  "description FROM actions WHERE id <= 6 ORDER BY id",
                                  "--format", "json").output)
        notes = [w["message"] for w in json.loads(cli_run("status", "--json").output)["warnings"]
                 if "actions." in w["message"] and "(row id " in w["message"]]
        return rows, sorted(n for n in notes if int(n.rsplit(" ", 1)[1][:-1]) <= 6)

    from_json = stored()
    assert [r["tier"] for r in from_json[0]] == [1, 2, None, None, None, 0]
    assert from_json[0][1]["ts"] is None and from_json[0][0]["ts"] == "2026-05-04 05:00:00"
    assert from_json[0][5]["description"] is None
    assert from_json[1] == sorted([
        "actions.tier is 'two', not an integer (row id 3)",
        "actions.tier is 2.5, not an integer (row id 4)",
        "actions.tier is True, not an integer (row id 5)",
        "actions.description is a JSON dict, not text (row id 6)"])
    total = json.loads(cli_run("query", "SELECT count(*) AS n FROM actions",
                               "--format", "json").output)
    assert total == [{"n": 6 * copies}]

    # the same values in the DB (an object, which SQLite cannot hold, as its JSON text): the
    # same rows and notes
    monkeypatch.delenv("NAGI_LEDGER_EXPORT")
    make_audit_db(project.audit_db, samples=False)
    conn = sqlite3.connect(project.audit_db)
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.executemany("INSERT INTO actions VALUES (?, ?, ?, 'git', ?, 'acme-api')",
                     [(a["id"], a["ts"], a["tier"], json.dumps(a["description"])
                       if isinstance(a["description"], dict) else a["description"])
                      for a in actions])
    conn.commit()
    conn.close()
    assert cli_run("load", "--full").exit_code == 0
    from_db = stored()
    assert from_db[0][5].pop("description") == '{"nested": "object"}'
    del from_json[0][5]["description"]
    # SQLite keeps True as 1: the one value that is not wrong there
    assert from_db[0][4].pop("tier") == 1 and from_json[0][4].pop("tier") is None
    assert from_db[0] == from_json[0]
    assert from_db[1] == [n for n in from_json[1] if "True" not in n and "dict" not in n]


def test_c5_a_json_exports_id_given_as_text_names_its_row_in_the_notes(
        project, cli_run, monkeypatch):
    """An id written as text in a hand-edited export ("7") is the row's id: the row is stored
    with it, and a note on another of its values names that row, as the DB's careful path
    named it before the two readers shared their checks."""
    read_from_export(project, monkeypatch, actions=[
        {"id": "7", "ts": "2026-05-04 05:00:00", "tier": "two", "category": "git",
         "description": "tier not a number", "project": "acme-api"}])
    result = cli_run("load")
    assert result.exit_code == 0, result.output
    rows = json.loads(cli_run("query", "SELECT id, tier FROM actions", "--format",
                              "json").output)
    assert rows == [{"id": 7, "tier": None}]
    notes = [w["message"] for w in json.loads(cli_run("status", "--json").output)["warnings"]
             if "actions.tier" in w["message"]]
    assert notes and all(n.endswith("actions.tier is 'two', not an integer (row id 7)")
                         for n in notes), notes


def test_c5_an_integer_too_large_for_the_store_is_a_note_from_the_db_and_an_export(
        project, cli_run, monkeypatch):
    """A tier beyond what the store's INTEGER holds (2**31, in the DB), and a tier or id beyond
    any 64-bit integer (only a JSON export can hold one), load as NULL with a note naming the
    value; the load does not fail."""
    conn = sqlite3.connect(project.audit_db)
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.execute("INSERT INTO actions VALUES (4, '2026-05-05 00:00:00', ?, 'x', 'big tier', "
                 "NULL)", (2**31,))
    conn.commit()
    conn.close()
    result = cli_run("load")
    assert result.exit_code == 0, result.output

    def state() -> tuple[list[dict], list[str]]:
        rows = json.loads(cli_run("query", "SELECT id, tier FROM actions WHERE id > 3 "
                                  "ORDER BY id", "--format", "json").output)
        return rows, [w["message"] for w in json.loads(cli_run("status", "--json").output)[
            "warnings"] if "too large" in w["message"]]

    assert state() == ([{"id": 4, "tier": None}],
                       ["actions.tier is 2147483648, too large an integer (row id 4)"])

    read_from_export(project, monkeypatch, actions=[
        {"id": 4, "ts": "2026-05-05 00:00:00", "tier": 2**70, "category": "x",
         "description": "huge tier", "project": None},
        {"id": 2**64, "ts": "2026-05-05 00:00:00", "tier": 1, "category": "x",
         "description": "huge id", "project": None},
        {"id": 5, "ts": "2026-05-05 00:00:00", "tier": str(2**31), "category": "x",
         "description": "big tier as text", "project": None}])
    result = cli_run("load")
    assert result.exit_code == 0, result.output
    rows, notes = state()
    assert rows == [{"id": 4, "tier": None}, {"id": 5, "tier": None}]
    assert sorted(notes) == sorted([
        f"actions.tier is {2**70}, too large an integer (row id 4)",
        f"actions.id is {2**64}, too large an integer",
        "actions.tier is '2147483648', too large an integer (row id 5)"])


def test_reading_the_header_keeps_the_lock_of_a_connection_this_process_has_open(project):
    """POSIX drops every lock a process holds on a file when it closes any descriptor of it.
    The header check before each open of the audit DB read it through a descriptor of its
    own: with another connection of the process open (the MCP server answers each tool in
    a thread of its own), its shared lock was dropped, so another process's writer took
    itself for the DB's last user when it closed, and reset the WAL under the open
    connections: writes the server had answered as done were lost. Here the other process
    is a writer that closes; the WAL stays, because this process's reader still holds it."""
    from toolkit.sources import audit

    db = project.audit_db  # in WAL mode, as nagi-ledger makes it
    conn = audit.connect_ro(db)
    try:
        before = conn.execute("SELECT count(*) FROM actions").fetchone()[0]
        audit.check_file(db)  # as the next tool call's open does
        subprocess.run([sys.executable, "-c", (
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1])\n"
            "c.execute(\"INSERT INTO actions (ts, tier, category, description) VALUES "
            "('2026-05-09 10:00:00', 0, 't', 'another process')\")\n"
            "c.commit()\n"
            "c.close()\n"), str(db)], check=True, timeout=60)
        assert db.with_name(db.name + "-wal").exists()  # no one took itself for the last
        assert conn.execute("SELECT count(*) FROM actions").fetchone()[0] == before + 1
    finally:
        conn.close()


def test_the_fast_reader_never_has_the_db_open_beside_a_connection_of_this_process(
        project, cli_run, monkeypatch):
    """The fast path streams rows through ADBC's driver, which carries a copy of SQLite of
    its own: its close drops the locks of Python's sqlite3 connections to the same file (as
    above). It streams only once no sqlite3 connection of the process has the DB open (the
    load's own is closed first), and gives way to the careful path when one stays open."""
    from toolkit.sources import audit
    from toolkit.store import FEW_ROWS

    conn = sqlite3.connect(project.audit_db)
    conn.executemany("INSERT INTO actions (ts, tier, category, description) VALUES "
                     "('2026-05-09 10:00:00', 0, 't', ?)", [(f"a{i}",) for i in range(
                         FEW_ROWS + 5)])
    conn.commit()
    conn.close()
    key = audit.file_key(project.audit_db)
    seen: list[int | str] = []
    stream = audit.stream_into

    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(audit.USERS.open_to(key, audit.SQLITE3))
        try:
            return stream(*args, **kwargs)
        except RuntimeError:  # (used_by_adbc's refusal: the careful path reads the rows)
            seen.append("gave way")
            raise

    monkeypatch.setattr(audit, "stream_into", watched)
    assert cli_run("load").exit_code == 0
    assert seen == [0]  # streamed, with no sqlite3 connection open
    count = "SELECT count(*) FROM actions"
    db = sqlite3.connect(project.audit_db)
    expected = db.execute(count).fetchone()[0]
    db.close()
    assert cli_run("query", count, "--format", "csv").stdout.splitlines()[1] == str(expected)

    # a connection of this process stays open (a tool call in another thread): the stream
    # waits for it, then gives way, and the careful path reads the same rows
    monkeypatch.setattr(audit, "WAIT_S", 0.2)
    held = audit.connect_ro(project.audit_db)
    try:
        assert cli_run("load", "--full").exit_code == 0
    finally:
        held.close()
    assert seen == [0, 1, "gave way"]
    assert cli_run("query", count, "--format", "csv").stdout.splitlines()[1] == str(expected)
