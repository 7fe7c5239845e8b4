"""The CLI's one error boundary (toolkit.errors.from_exception, called by LazyGroup.invoke):
real DuckDB, SQLite, OSError and overflow errors that no command translated end as one
`Error:` line with a documented exit code; anything else (a bug) keeps its traceback."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

import click
import duckdb
import pytest
from click.testing import CliRunner

from toolkit import cli as cli_mod
from toolkit.cli import cli

_ACTIONS: dict[str, object] = {}


@click.command()
@click.argument("what")
def boom(what: str) -> None:
    """Run one real failing operation, as a command that forgot to translate it would."""
    action = _ACTIONS[what]
    assert callable(action)
    action()


def _locked_sqlite(tmp: Path) -> None:
    db = tmp / "audit.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        sqlite3.connect(db, timeout=0).execute("INSERT INTO t VALUES (1)")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _damaged_sqlite(tmp: Path) -> None:
    db = tmp / "junk.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    sqlite3.connect(db).execute("SELECT * FROM sqlite_master").fetchall()


def _duckdb_failure(tmp: Path) -> None:
    duckdb.connect(str(tmp / "s.duckdb")).execute("SELECT no_such_column FROM range(1)")


def _overflow(tmp: Path) -> None:
    print(dt.date(9999, 12, 31) + dt.timedelta(days=1))


def _bug(tmp: Path) -> None:
    raise KeyError("a bug")


@pytest.mark.parametrize("what, code, line", [
    ("locked", 75, "Error: SQLite database is busy: database is locked. Retry in a moment"),
    ("damaged", 65, "Error: SQLite database is damaged: file is not a database"),
    ("duckdb", 1, ("Error: the store failed: Binder Error: Referenced column \"no_such_column\" "
                  "not found in FROM clause!")),
    ("overflow", 2, "Error: a number is too large: date value out of range"),
])
def test_unexpected_errors_end_as_one_line(tmp_path, monkeypatch, what, code, line):
    monkeypatch.setitem(cli_mod.COMMANDS, "boom", ("tests.test_error_boundary:boom", ""))
    actions = {"locked": _locked_sqlite, "damaged": _damaged_sqlite,
               "duckdb": _duckdb_failure, "overflow": _overflow, "bug": _bug}
    monkeypatch.setattr(f"{__name__}._ACTIONS",
                        {k: (lambda f=f: f(tmp_path)) for k, f in actions.items()})
    result = CliRunner().invoke(cli, ["boom", what])
    assert result.exit_code == code
    assert result.stderr.splitlines() == [line]


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    monkeypatch.setitem(cli_mod.COMMANDS, "boom", ("tests.test_error_boundary:boom", ""))
    monkeypatch.setattr(f"{__name__}._ACTIONS", {"bug": lambda: _bug(tmp_path)})
    result = CliRunner().invoke(cli, ["boom", "bug"])
    assert isinstance(result.exception, KeyError)


def test_a_duckdb_errors_line_keeps_a_quoted_value_whole_and_stops_before_the_sql(
        cli_run) -> None:
    """`toolkit query` shows a DuckDB error as one line: a value it quotes is kept whole,
    its line breaks written \\n (a wrapped token stays one to the redactor), and the "LINE 1:"
    part that follows a blank line is left out, also when the message's quote is open."""
    wrapped = cli_run("query", "SELECT CAST('a b' || chr(10) || 'c d' AS INTEGER)")
    assert wrapped.exit_code != 0
    assert wrapped.stderr.strip().splitlines()[-1].endswith(
        "Could not convert string 'a b\\nc d' to INT32")
    # a message whose own text holds an odd quote stops at DuckDB's blank line all the same
    from toolkit.errors import error_line

    with pytest.raises(duckdb.IOException) as raised:
        duckdb.connect().execute("SELECT * FROM read_csv('nofile''s.csv')")
    assert error_line(str(raised.value)) == \
        'IO Error: No files found that match the pattern "nofile\'s.csv"'
