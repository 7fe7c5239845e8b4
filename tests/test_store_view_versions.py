"""A view's version (toolkit.store.view_versions, real DuckDB): made of the versions of the
tables it reads, directly or through another view, and of its SQL; none when it reads a table
without one, or anything that answers differently over the same rows. The site writes a
view's downloads again only when its version changed (tests/test_site_rebuild.py)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from toolkit.store import view_versions

TABLES = ("entries", "slop", "_bookkeeping")


def _views(*sql: str) -> dict[str, str]:
    """The views ``sql`` creates over three tables, as DuckDB gives them back."""
    conn = duckdb.connect()
    for table in TABLES:
        conn.execute(f"CREATE TABLE {table} (id INTEGER, title VARCHAR, ts TIMESTAMP)")
    for statement in sql:
        conn.execute(statement)
    views = dict(conn.execute("SELECT view_name, sql FROM duckdb_views() "
                              "WHERE NOT internal AND schema_name = 'main'").fetchall())
    conn.close()
    return views


VIEWS = _views(
    "CREATE VIEW titles AS SELECT title FROM entries",
    "CREATE VIEW long_titles AS SELECT title FROM titles WHERE length(title) > 10",
    "CREATE VIEW both_kinds AS SELECT id FROM entries UNION ALL SELECT id FROM slop",
    "CREATE VIEW recent AS SELECT id FROM entries WHERE ts > now() - INTERVAL 1 DAY",
    "CREATE VIEW counted AS SELECT count(*) AS n FROM _bookkeeping",
    "CREATE VIEW constant AS SELECT 1 AS one",
    "CREATE VIEW local_recent AS SELECT id FROM entries WHERE ts > localtimestamp",
    "CREATE VIEW catalog AS SELECT e.id FROM entries e, duckdb_tables() t "
    "WHERE t.table_name = e.title",
    "CREATE VIEW variable AS SELECT id FROM entries WHERE title = getvariable('title')",
)
UNVERSIONED = ("recent", "counted", "constant", "local_recent", "catalog", "variable")


def test_a_view_follows_the_tables_it_reads_directly_or_through_another_view() -> None:
    before = view_versions(VIEWS, {"entries": "e1", "slop": "s1"}, TABLES)
    assert sorted(before) == ["both_kinds", "long_titles", "titles"]
    slop_loaded = view_versions(VIEWS, {"entries": "e1", "slop": "s2"}, TABLES)
    entries_loaded = view_versions(VIEWS, {"entries": "e2", "slop": "s1"}, TABLES)
    assert [v for v in before if before[v] != slop_loaded[v]] == ["both_kinds"]
    assert sorted(v for v in before if before[v] != entries_loaded[v]) == [
        "both_kinds", "long_titles", "titles"]
    assert view_versions(VIEWS, {"entries": "e1", "slop": "s1"}, TABLES) == before


def test_a_view_whose_sql_changed_has_another_version() -> None:
    versions = {"entries": "e1", "slop": "s1"}
    changed = _views("CREATE VIEW titles AS SELECT upper(title) AS title FROM entries",
                     "CREATE VIEW long_titles AS SELECT title FROM titles "
                     "WHERE length(title) > 10")
    before, after = view_versions(VIEWS, versions, TABLES), view_versions(changed, versions,
                                                                          TABLES)
    assert before["titles"] != after["titles"]
    assert before["long_titles"] != after["long_titles"]  # it reads the changed view


def test_a_view_over_an_unversioned_table_the_time_or_nothing_has_no_version() -> None:
    versions = view_versions(VIEWS, {"entries": "e1", "slop": "s1"}, TABLES)
    for view in UNVERSIONED:
        assert view not in versions
    assert "both_kinds" not in view_versions(VIEWS, {"entries": "e1"}, TABLES)


def test_a_view_that_reads_a_file_has_no_version(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "titles.csv").write_text("title\nGrep first\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # DuckDB reads the file when the view is made
    views = _views("CREATE VIEW from_file AS SELECT e.id FROM entries e "
                   "JOIN 'titles.csv' f USING (title)")
    assert '"titles.csv"' in views["from_file"]  # as DuckDB keeps it
    assert view_versions(views, {"entries": "e1", "slop": "s1"}, TABLES) == {}
