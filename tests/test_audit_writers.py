"""`toolkit audit log-*`: nagi-ledger's writers, their validation, the DB they leave, locks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests._audit_helpers import (  # noqa: F401 - autouse fixture
    LockHolder,
    _no_injected_now,
    file_state,
    last_error,
    normalized_schema,
    rollback_journal_db,
    rows,
)
from tests.conftest import make_audit_db

TIER_HELP = "must be one of (0, 1, 2) (0=info, 1=notable, 2=high-impact)."
OUTCOME_HELP = ("must be one of ('DEAD_END', 'NO_GO', 'WORKS') (DEAD_END=tried and failed, "
                "NO_GO=decided against without trying, WORKS=confirmed working).")


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder with no audit DB yet; NAGI_LEDGER_DB points into a missing folder."""
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    db = tmp_path / "nagi" / "deep" / "ledger.db"
    monkeypatch.setenv("NAGI_LEDGER_DB", str(db))
    return db


def _json(result) -> object:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("args, error", [
    (["log-action", "did it", "--tier", "3", "--category", "git"],
     f"Error: Invalid tier 3: {TIER_HELP}"),
    (["log-action", "did it", "--tier", "-1", "--category", "git"],
     f"Error: Invalid tier -1: {TIER_HELP}"),
    (["log-action", "did it", "--tier", "high", "--category", "git"],
     f"Error: Invalid tier 'high': {TIER_HELP}"),
    (["log-action", "did it", "--tier", "1", "--category", "   "],
     "Error: 'category' must be a non-empty string."),
    (["log-action", "", "--tier", "1", "--category", "git"],
     "Error: 'description' must be a non-empty string."),
    (["log-dispatch", "", "--agent-type", "fork", "--model", "opus", "--summary", "s"],
     "Error: 'task' must be a non-empty string."),
    (["log-dispatch", "t", "--agent-type", " ", "--model", "opus", "--summary", "s"],
     "Error: 'agent_type' must be a non-empty string."),
    (["log-dispatch", "t", "--agent-type", "fork", "--model", "", "--summary", "s"],
     "Error: 'model' must be a non-empty string."),
    (["log-dispatch", "t", "--agent-type", "fork", "--model", "opus", "--summary", "\t"],
     "Error: 'brief_summary' must be a non-empty string."),
    (["log-verdict", "1", "MAYBE"],
     "Error: Invalid verdict 'MAYBE': must be one of ('CONFIRMED', 'REFUTED', 'PARTIAL')."),
    (["log-verdict", "1", "confirmed"],
     "Error: Invalid verdict 'confirmed': must be one of ('CONFIRMED', 'REFUTED', 'PARTIAL')."),
    (["log-approach", "t", "--approach", "a", "--outcome", "FAILED", "--reason", "r"],
     f"Error: Invalid outcome 'FAILED': {OUTCOME_HELP}"),
    (["log-approach", " ", "--approach", "a", "--outcome", "WORKS", "--reason", "r"],
     "Error: 'task' must be a non-empty string."),
    (["log-approach", "t", "--approach", "", "--outcome", "WORKS", "--reason", "r"],
     "Error: 'approach' must be a non-empty string."),
    (["log-approach", "t", "--approach", "a", "--outcome", "WORKS", "--reason", ""],
     "Error: 'reason' must be a non-empty string."),
])
def test_invalid_values_exit_2_with_nagi_ledgers_message_and_write_nothing(
        cli_run, fresh, args, error):
    result = cli_run("audit", *args)
    assert result.exit_code == 2
    assert last_error(result) == error
    assert not fresh.exists() and not fresh.parent.exists()  # validated before opening


def test_unknown_dispatch_id_is_an_error_and_changes_nothing(cli_run, project):
    before = rows(project.audit_db, "SELECT * FROM dispatches ORDER BY id")
    # an id SQLite cannot hold is no dispatch's either ("a number is too large" before)
    for missing in ("99", "9" * 23):
        result = cli_run("audit", "log-verdict", missing, "CONFIRMED")
        assert result.exit_code == 1
        assert last_error(result) == (f"Error: No dispatch found with id={missing}. Call "
                                      "ledger_log_dispatch first, or check the id via "
                                      "ledger_task_status.")
    assert rows(project.audit_db, "SELECT * FROM dispatches ORDER BY id") == before


def test_non_integer_dispatch_id_is_a_usage_error(cli_run, project):
    result = cli_run("audit", "log-verdict", "abc", "CONFIRMED")
    assert result.exit_code == 2
    assert "'abc' is not a valid integer" in last_error(result)


# --------------------------------------------------------------------------- the DB written

def test_first_write_creates_folder_and_db_with_exactly_nagi_ledgers_schema(
        cli_run, fresh, tmp_path):
    assert _json(cli_run("audit", "log-action", "Rebased onto main", "--tier", "1",
                         "--category", " git ", "--project", "acme", "--json")) == {"id": 1}
    assert fresh.is_file()
    reference = make_audit_db(tmp_path / "ref.db", samples=False)
    # byte for byte: SQLite keeps each CREATE statement's text, and `.schema` shows it
    schema = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
    assert rows(fresh, schema) == rows(reference, schema)
    for table in ("actions", "dispatches", "approaches"):
        assert rows(fresh, f"PRAGMA table_info({table})") == \
            rows(reference, f"PRAGMA table_info({table})")
    assert rows(fresh, "SELECT name FROM sqlite_master WHERE type = 'index'") == []
    assert rows(fresh, "PRAGMA journal_mode") == [("wal",)]
    # plain sqlite3 reads what we wrote, values stripped as nagi-ledger stores them
    assert rows(fresh, "SELECT id, tier, category, description, project, "
                       "ts GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]"
                       ":[0-9][0-9]' FROM actions") == [(1, 1, "git", "Rebased onto main", "acme",
                                                         1)]


def test_db_written_keeps_nagi_ledgers_constraints(cli_run, fresh):
    cli_run("audit", "log-action", "x", "--tier", "0", "--category", "c")
    conn = sqlite3.connect(fresh)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO actions (tier, category, description) VALUES (5, 'c', 'd')")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO approaches (task, approach, outcome, reason) "
                     "VALUES ('t', 'a', 'MAYBE', 'r')")
    conn.close()


def test_writers_append_to_an_existing_nagi_ledger_db(cli_run, project):
    """The sample DB written by nagi-ledger's DDL: our rows continue its ids."""
    out = _json(cli_run("audit", "log-dispatch", "Cap webhook retries at 5 attempts",
                        "--agent-type", "general-purpose", "--model", "opus",
                        "--summary", "third try", "--json"))
    # as nagi-ledger: `similar` is taken before the insert and lists every earlier row of the
    # task, the two earlier dispatches (the retries) as well as the approaches
    assert out == {"id": 4, "retry_count": 2, "similar": [
        {"kind": "dispatches", "id": 1, "task": "Cap webhook retries at 5 attempts",
         "score": 1.0, "ts": "2026-05-04 05:15:02", "verdict": "PARTIAL"},
        {"kind": "dispatches", "id": 2, "task": "Cap webhook retries at 5 attempts",
         "score": 1.0, "ts": "2026-05-04 05:33:10", "verdict": "CONFIRMED"},
        {"kind": "approaches", "id": 1, "task": "Cap webhook retries at 5 attempts",
         "score": 1.0, "ts": "2026-05-04 05:30:12", "verdict": "DEAD_END"},
        {"kind": "approaches", "id": 2, "task": "Cap webhook retries at 5 attempts",
         "score": 1.0, "ts": "2026-05-04 05:38:40", "verdict": "WORKS"}]}
    # the JSON is nagi-ledger's, key order included
    assert list(out["similar"][0]) == ["kind", "id", "task", "score", "ts", "verdict"]
    out = _json(cli_run("audit", "log-verdict", "4", "REFUTED", "--notes", "still flaky",
                        "--json"))
    assert out == {"ok": True, "task": "Cap webhook retries at 5 attempts"}
    assert rows(project.audit_db, "SELECT verdict, verdict_notes, verdict_ts IS NOT NULL "
                                  "FROM dispatches WHERE id = 4") == [("REFUTED", "still flaky", 1)]
    out = _json(cli_run("audit", "log-approach", "Cap webhook retries at 5 attempts",
                        "--approach", "Retry in the worker", "--outcome", "NO_GO",
                        "--reason", "duplicates the outbox", "--json"))
    assert out == {"id": 4}


def test_retry_count_counts_earlier_dispatches_of_exactly_that_task(cli_run, fresh):
    def dispatch(task: str) -> dict:
        return _json(cli_run("audit", "log-dispatch", task, "--agent-type", "fork",
                             "--model", "sonnet", "--summary", "s", "--json"))

    assert [dispatch("fix-bug-42")["retry_count"] for _ in range(3)] == [0, 1, 2]
    assert dispatch("fix-bug-43")["retry_count"] == 0
    assert dispatch("  fix-bug-42 ")["retry_count"] == 3  # stripped, as nagi-ledger does


def test_log_dispatch_lists_reworded_duplicates_and_earlier_retries(cli_run, fresh):
    cli_run("audit", "log-dispatch", "Build the YouTube knowledge intake PoC",
            "--agent-type", "nagi-implementer", "--model", "sonnet", "--summary", "PoC")
    cli_run("audit", "log-dispatch", "Build the tana CLI", "--agent-type", "fork",
            "--model", "sonnet", "--summary", "s")
    cli_run("audit", "log-approach", "Build YouTube-to-Markdown intake PoC", "--approach",
            "yt-dlp", "--outcome", "WORKS", "--reason", "fine")
    out = _json(cli_run("audit", "log-dispatch", "Build YouTube-to-Markdown intake PoC",
                        "--agent-type", "general-purpose", "--model", "sonnet",
                        "--summary", "s", "--json"))
    assert out["retry_count"] == 0
    assert [(s["kind"], s["id"], s["task"], s["score"], s["verdict"]) for s in out["similar"]] \
        == [("approaches", 1, "Build YouTube-to-Markdown intake PoC", 1.0, "WORKS"),
            ("dispatches", 1, "Build the YouTube knowledge intake PoC", 0.4444, None)]
    retry = _json(cli_run("audit", "log-dispatch", "Build YouTube-to-Markdown intake PoC",
                          "--agent-type", "fork", "--model", "sonnet", "--summary", "s",
                          "--json"))
    assert retry["retry_count"] == 1
    # the earlier dispatch of this very task comes first: dispatches before approaches
    assert [(s["kind"], s["id"], s["score"]) for s in retry["similar"]] == [
        ("dispatches", 3, 1.0), ("approaches", 1, 1.0), ("dispatches", 1, 0.4444)]
    text = cli_run("audit", "log-dispatch", "Build YouTube-to-Markdown intake PoC",
                   "--agent-type", "fork", "--model", "sonnet", "--summary", "s").stdout
    assert text.startswith("Logged dispatch #5 (retry 2) in ")
    assert "Similar earlier tasks:" in text and "Build the YouTube knowledge intake PoC" in text
    assert "PENDING" in text  # the human table names a missing verdict


def test_verdict_change_is_seen_by_the_next_reader(cli_run, project):
    """The store copies rows incrementally by id; a later verdict must still reach it."""
    first = _json(cli_run("audit", "task-status", "Audit logging for admin endpoints", "--json"))
    assert first["last_verdict"] is None
    cli_run("audit", "log-verdict", "3", "PARTIAL")
    after = _json(cli_run("audit", "task-status", "Audit logging for admin endpoints", "--json"))
    assert after == {"dispatch_count": 1, "retry_count": 0, "last_verdict": "PARTIAL",
                     "over_retry_limit": False}
    cli_run("audit", "log-verdict", "3", "CONFIRMED", "--notes", "re-checked")
    again = _json(cli_run("audit", "task-status", "Audit logging for admin endpoints", "--json"))
    assert again["last_verdict"] == "CONFIRMED"


def test_human_output_of_writers(cli_run, fresh):
    result = cli_run("audit", "log-action", "Shipped", "--tier", "2", "--category", "deploy")
    assert result.stdout == f"Logged action #1 (tier 2, deploy) in {fresh}\n"
    cli_run("audit", "log-dispatch", "t", "--agent-type", "fork", "--model", "m", "--summary", "s")
    result = cli_run("audit", "log-verdict", "1", "CONFIRMED")
    assert result.stdout == "Recorded CONFIRMED on dispatch #1 (task: t)\n"
    for _ in range(2):
        result = cli_run("audit", "log-dispatch", "t", "--agent-type", "fork", "--model", "m",
                         "--summary", "s")
    assert "Note: this task had 2 earlier dispatches; nagi-ledger's retry limit is 2." \
        in result.stdout


# --------------------------------------------------------------------------- bad files, locks

@pytest.mark.parametrize("content", [b"this is not a database at all" * 10,
                                     b"SQLite format 3\x00" + b"\xff" * 200])
def test_junk_file_is_refused_and_left_untouched(cli_run, fresh, content):
    fresh.parent.mkdir(parents=True)
    fresh.write_bytes(content)
    before = file_state(fresh)
    result = cli_run("audit", "log-action", "x", "--tier", "0", "--category", "c")
    assert result.exit_code == 65
    assert last_error(result).startswith(f"Error: {fresh}: ")
    assert "not a valid SQLite database" in last_error(result) \
        or "damaged" in last_error(result)
    assert file_state(fresh) == before
    assert sorted(p.name for p in fresh.parent.iterdir()) == ["ledger.db"]


def test_another_programs_tables_are_named_with_what_to_do(cli_run, fresh):
    """An audit DB whose actions table is not nagi-ledger's (no project column): the write
    fails with SQLite's words and now says what to do. (The connection, as nagi-ledger's,
    adds nagi-ledger's missing tables; the action is not written.)"""
    fresh.parent.mkdir(parents=True)
    with sqlite3.connect(fresh) as conn:
        conn.execute("CREATE TABLE actions (id INTEGER PRIMARY KEY, ts TEXT, tier INTEGER, "
                     "category TEXT, description TEXT)")
    conn.close()
    result = cli_run("audit", "log-action", "--tier", "1", "--category", "git", "pushed")
    assert result.exit_code == 1
    assert last_error(result) == (
        f"Error: {fresh}: audit DB write failed (table actions has no column named project); "
        "nothing was written. Its tables are not nagi-ledger's: point NAGI_LEDGER_DB or "
        "--audit-db at nagi-ledger's ledger.db")
    assert rows(fresh, "SELECT * FROM actions") == []


def test_truncated_db_is_refused(cli_run, fresh):
    make_audit_db(fresh, wal=False)
    data = fresh.read_bytes()
    fresh.write_bytes(data[: len(data) // 2])
    before = file_state(fresh)
    result = cli_run("audit", "log-approach", "t", "--approach", "a", "--outcome", "WORKS",
                     "--reason", "r")
    assert result.exit_code == 65
    assert "damaged" in last_error(result)
    assert file_state(fresh) == before


def test_a_db_named_with_a_tilde_is_written_where_nagi_ledger_writes_it(cli_run, tmp_path,
                                                                       monkeypatch):
    """$NAGI_LEDGER_DB='~/x.db' (an MCP client's env block: no shell expands it) is the file
    nagi-ledger writes, ./~/x.db, and the message names it so, not as if in the home."""
    monkeypatch.setenv("NAGI_LEDGER_DB", "~/tilde.db")
    monkeypatch.chdir(tmp_path)
    result = cli_run("audit", "log-action", "x", "--tier", "1", "--category", "c")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Logged action #1 (tier 1, c) in ./~/tilde.db\n"
    assert (tmp_path / "~" / "tilde.db").is_file()


def test_locked_db_exits_75_and_loses_nothing(cli_run, tmp_path, monkeypatch):
    from toolkit import audit_ops

    monkeypatch.setattr(audit_ops, "BUSY_TIMEOUT_MS", 200)
    db = rollback_journal_db(tmp_path / "ledger.db")
    monkeypatch.setenv("NAGI_LEDGER_DB", str(db))
    monkeypatch.chdir(tmp_path)
    before = file_state(db)
    with LockHolder(db):
        result = cli_run("audit", "log-dispatch", "Cap webhook retries at 5 attempts",
                         "--agent-type", "fork", "--model", "opus", "--summary", "s")
        assert result.exit_code == 75
        assert last_error(result) == (f"Error: {db}: audit DB is busy (locked by another "
                                      "process); nothing was written. Retry in a moment")
        assert file_state(db) == before
    assert file_state(db) == before  # the holder committed nothing either
    assert rows(db, "SELECT count(*) FROM dispatches") == [(3,)]
    # once the lock is gone the same command works, on top of every earlier row
    result = cli_run("audit", "log-dispatch", "Cap webhook retries at 5 attempts",
                     "--agent-type", "fork", "--model", "opus", "--summary", "s", "--json")
    assert json.loads(result.stdout)["retry_count"] == 2
    assert rows(db, "SELECT count(*) FROM dispatches") == [(4,)]


def test_writer_waits_for_a_lock_released_within_the_busy_timeout(cli_run, tmp_path, monkeypatch):
    db = rollback_journal_db(tmp_path / "ledger.db")
    monkeypatch.setenv("NAGI_LEDGER_DB", str(db))
    monkeypatch.chdir(tmp_path)
    holder = LockHolder(db, hold=0.5)  # lets go on its own, well within nagi's 5 s
    try:
        result = cli_run("audit", "log-action", "waited", "--tier", "0", "--category", "c",
                         "--json")
    finally:
        holder.release()
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"id": 4}


def test_db_folder_that_cannot_be_made_is_a_clear_error(cli_run, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the DB folder should be")
    monkeypatch.setenv("NAGI_LEDGER_DB", str(blocker / "ledger.db"))
    monkeypatch.chdir(tmp_path)
    result = cli_run("audit", "log-action", "x", "--tier", "0", "--category", "c")
    assert result.exit_code == 1
    assert last_error(result) == (f"Error: {blocker}: cannot create the audit DB folder "
                                  "(a file is in the way). Point NAGI_LEDGER_DB or --audit-db "
                                  "at a writable place")
    assert blocker.read_text() == "a file where the DB folder should be"


def test_shared_example_db_reads_back_identically_after_a_write(cli_run, project):
    """Writing appends: every existing row of nagi-ledger's example stays byte-for-byte."""
    dump_before = rows(project.audit_db, "SELECT * FROM actions ORDER BY id")
    cli_run("audit", "log-action", "x", "--tier", "0", "--category", "c")
    assert rows(project.audit_db, "SELECT * FROM actions ORDER BY id")[:3] == dump_before


# --------------------------------------------------------------------------- whole rows (history)

def test_insert_rows_keeps_each_rows_own_time_in_nagi_ledgers_db(fresh, tmp_path):
    """History written at once (the demo's audit DB): nagi-ledger's schema, the given times and
    verdicts, one transaction, the WAL folded back so the DB file alone holds everything."""
    from toolkit.audit_ops import insert_rows

    insert_rows(fresh,
                actions=[("2026-11-20 09:00:00", 1, "git", "Rebased onto main", "acme"),
                         ("2026-11-21 10:30:00", 0, "test_run", "Ran pytest", None)],
                dispatches=[("2026-11-20 09:05:00", "Cap retries", "Explore", "opus",
                             "brief", "REFUTED", "2026-11-20 09:40:00", "still fails")],
                approaches=[("2026-11-20 09:10:00", "Cap retries", "Use the adapter",
                             "DEAD_END", "per connection")])
    reference = make_audit_db(tmp_path / "ref.db", samples=False)
    assert normalized_schema(fresh) == normalized_schema(reference)
    assert rows(fresh, "SELECT id, ts, tier, project FROM actions ORDER BY id") == [
        (1, "2026-11-20 09:00:00", 1, "acme"), (2, "2026-11-21 10:30:00", 0, None)]
    assert rows(fresh, "SELECT task, verdict, verdict_ts FROM dispatches") == [
        ("Cap retries", "REFUTED", "2026-11-20 09:40:00")]
    assert rows(fresh, "SELECT outcome FROM approaches") == [("DEAD_END",)]
    wal = fresh.with_name(fresh.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_insert_rows_writes_all_or_nothing(fresh):
    """A row nagi-ledger's constraints refuse: an error, and none of the other rows land."""
    from toolkit.audit_ops import insert_rows
    from toolkit.errors import ToolkitError

    insert_rows(fresh, actions=[("2026-11-20 09:00:00", 1, "git", "kept", None)])
    with pytest.raises(ToolkitError):
        insert_rows(fresh, actions=[("2026-11-20 10:00:00", 1, "git", "new", None)],
                    approaches=[("2026-11-20 10:00:00", "t", "a", "MAYBE", "r")])
    assert rows(fresh, "SELECT description FROM actions") == [("kept",)]
