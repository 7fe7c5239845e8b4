"""The store is a rebuildable cache with an enforced schema history (real DuckDB files).

``tests/schema_history.txt`` records every migration the toolkit has shipped with the SHA-256
of its text. A store whose recorded migrations do not match the code (a text changed, a
migration this toolkit does not know, no hashes at all) or that lacks a table is dropped and
made again in one transaction, with a one-line note, and the next refresh fills it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from toolkit import config as config_mod
from toolkit.errors import DataError
from toolkit.loaders import SOURCES
from toolkit.source import Source, migration_sha256
from toolkit.store import BOOKKEEPING, MIGRATIONS, Store

HISTORY = Path(__file__).resolve().parent / "schema_history.txt"


def _shipped() -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in HISTORY.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]  # type: ignore[misc]


def _history_differences(migrations: list[tuple[str, str]]) -> list[str]:
    """How the code's migrations differ from the shipped history (empty: they agree)."""
    shipped = dict(_shipped())
    code = {name: migration_sha256(sql) for name, sql in migrations}
    out = [f"{name}: its text changed since it shipped; add a new migration instead"
           for name in code if name in shipped and code[name] != shipped[name]]
    out += [f"{name}: new; record it in tests/schema_history.txt" for name in code
            if name not in shipped]
    out += [f"{name}: shipped but gone from the code (migrations are append-only)"
            for name in shipped if name not in code]
    return out


def _code_migrations() -> list[tuple[str, str]]:
    return sorted([*MIGRATIONS, *(m for s in SOURCES for m in s.migrations)])


def _with_migration(name: str, sql: str) -> list[Source]:
    """SOURCES with the goals source's migration ``name`` replaced (or one added)."""
    goals = next(s for s in SOURCES if s.name == "goals")
    kept = tuple(m for m in goals.migrations if m[0] != name)
    changed = dataclasses.replace(goals, migrations=(*kept, (name, sql)))
    return [changed if s is goals else s for s in SOURCES]


def _cfg(project):
    return config_mod.resolve(cwd=project.root, env={"HOME": str(project.home)})


def _loaded_store(project) -> tuple[Path, dict[str, int]]:
    cfg = _cfg(project)
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        return cfg.db_path, store.counts()


# --------------------------------------------------------------------------- the history

def test_every_migration_matches_the_shipped_schema_history():
    assert _history_differences(_code_migrations()) == []
    assert [name for name, _ in _shipped()] == [name for name, _ in _code_migrations()]


def test_the_first_migration_keeps_its_text():
    # it was once edited in place; stores made since have this text
    assert _shipped()[0] == ("m001_initial", migration_sha256(MIGRATIONS[0][1]))


def test_an_edited_or_unrecorded_migration_is_found():
    edited = [(n, sql + "\n-- edited") if n == "m110_goals" else (n, sql)
              for n, sql in _code_migrations()]
    assert _history_differences(edited) == [
        "m110_goals: its text changed since it shipped; add a new migration instead"]
    added = [*_code_migrations(), ("m120_new", "CREATE TABLE t (a INTEGER);")]
    assert _history_differences(added) == ["m120_new: new; record it in tests/schema_history.txt"]


def test_the_sources_declare_exactly_the_tables_the_migrations_make(tmp_path):
    with Store.open(tmp_path / "s.duckdb", sources=SOURCES) as store:
        made = {r[0] for r in store.conn.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        declared = set(store.table_docs())
    assert made == declared | set(BOOKKEEPING)
    owners = [name for s in SOURCES for name in s.tables]
    assert len(owners) == len(set(owners)), "a table is declared by two sources"
    assert all(doc for s in SOURCES for doc in s.tables.values())


def test_a_new_store_records_each_migration_with_its_hash(tmp_path):
    with Store.open(tmp_path / "s.duckdb", sources=SOURCES) as store:
        recorded = dict(store.conn.execute("SELECT name, sha256 FROM _migrations").fetchall())
        assert store.rebuilt is None
    assert recorded == dict(_shipped())


# --------------------------------------------------------------------------- upgrades

def test_a_pending_migration_is_applied_and_the_data_kept(project, capsys):
    cfg = _cfg(project)
    older = [s for s in SOURCES if s.name != "goals"]  # a toolkit before the goals source
    with Store.open(cfg.db_path, sources=older) as store:
        store.refresh(cfg)
        before = store.counts()
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        assert store.rebuilt is None
        assert "m110_goals" in store.applied_migrations()
        after = store.counts()
        assert store.scalar("SELECT count(*) FROM _sources WHERE source = 'ledger'") == 1
    assert after == {**before, "goal_events": 0, "goals": 0}
    assert "note:" not in capsys.readouterr().err


def test_a_changed_migration_rebuilds_the_store_from_the_sources(project, capsys):
    db, counts = _loaded_store(project)
    changed = _with_migration("m110_goals", dict(SOURCES[-1].migrations)["m110_goals"]
                              + "\nCREATE TABLE goal_notes (note VARCHAR);")
    with Store.open(db, sources=changed) as store:
        assert store.rebuilt == "migration m110_goals changed since it was applied"
        assert store.sources() == []  # nothing loaded yet: the next refresh reads them all
        assert store.counts()["ledger_entries"] == 0
        assert "goal_notes" in store.tables()
    err = capsys.readouterr().err
    assert err == (f"note: {db}: the store's schema does not match this toolkit (migration "
                   "m110_goals changed since it was applied); rebuilt, it is loaded again "
                   "from the sources\n")
    # and back: the real migration text differs from the recorded one again
    with Store.open(db, sources=SOURCES) as store:
        assert store.rebuilt == "migration m110_goals changed since it was applied"
        store.refresh(_cfg(project))
        assert store.counts() == counts
        assert "goal_notes" not in store.tables()


def test_a_store_written_by_a_newer_toolkit_is_rebuilt(project, cli_run):
    db, counts = _loaded_store(project)
    newer = _with_migration("m900_newer", "CREATE TABLE from_the_future (a INTEGER);")
    with Store.open(db, sources=newer) as store:
        assert store.rebuilt is None and "from_the_future" in store.tables()
    result = cli_run("status", "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"note: {db}: the store's schema does not match this toolkit (migration m900_newer is "
        "unknown here; a newer toolkit wrote it?); rebuilt, it is loaded again from the "
        "sources"]
    with Store.open(db, sources=SOURCES) as store:
        assert "from_the_future" not in store.tables()
        assert "m900_newer" not in store.applied_migrations()
        assert store.counts() == counts  # status refreshed every source into the new store


def test_a_hostile_migration_name_is_shown_on_one_line(project, capsys):
    db, _ = _loaded_store(project)
    with Store.open(db, sources=SOURCES) as store:
        store.conn.execute("INSERT INTO _migrations VALUES (?, now(), 'x')",
                           ["m999\x1b[2J\nfake line"])
    with Store.open(db, sources=SOURCES) as store:
        assert store.rebuilt is not None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err
    assert "migration m999<U+001B>[2J fake line is unknown here" in err


def test_a_missing_table_rebuilds_the_store(project):
    db, counts = _loaded_store(project)
    with Store.open(db, sources=SOURCES) as store:
        store.conn.execute("DROP TABLE slop_entries")
    with Store.open(db, sources=SOURCES) as store:
        assert store.rebuilt == "table slop_entries is missing"
        store.refresh(_cfg(project))
        assert store.counts() == counts


@pytest.mark.parametrize("rows", ["kept", "none"])
def test_a_store_without_migration_hashes_is_rebuilt(project, rows):
    db, counts = _loaded_store(project)
    with Store.open(db, sources=SOURCES) as store:  # as a toolkit before the hashes wrote it
        store.conn.execute("ALTER TABLE _migrations DROP COLUMN sha256")
        if rows == "none":  # its first migration failed after the record table was made
            store.conn.execute("DELETE FROM _migrations")
    with Store.open(db, sources=SOURCES) as store:
        assert store.rebuilt == ("migrations were recorded without their hashes by an older "
                                 "toolkit")
        assert dict(store.conn.execute("SELECT name, sha256 FROM _migrations").fetchall()) \
            == dict(_shipped())
        store.refresh(_cfg(project))
        assert store.counts() == counts


# --------------------------------------------------------------------------- never half-done

def _snapshot(db: Path) -> tuple[list[str], dict[str, int], list[str]]:
    with Store.open(db, sources=SOURCES, migrate=False) as store:
        return store.applied_migrations(), store.counts(), sorted(store.tables())


@pytest.mark.parametrize("name, sql", [
    # a new migration (applied as pending) that fails half-way through
    ("m900_broken", "CREATE TABLE half (a INTEGER);\nCREATE TABLE broken (a NO_SUCH_TYPE);"),
    # m110 changed, so the store is rebuilt, into a text that fails half-way through
    ("m110_goals", "CREATE TABLE goals (a INTEGER);\nCREATE TABLE goal_events (a NO_SUCH_TYPE);"),
], ids=["pending", "rebuild"])
def test_a_failing_migration_leaves_the_store_as_it_was(project, name, sql):
    db, _ = _loaded_store(project)
    before = _snapshot(db)
    with pytest.raises(Exception, match="NO_SUCH_TYPE"):
        Store.open(db, sources=_with_migration(name, sql))
    assert _snapshot(db) == before
    with Store.open(db, sources=SOURCES) as store:
        assert store.rebuilt is None


def test_a_read_only_store_that_does_not_match_is_refused_not_changed(project):
    db, _ = _loaded_store(project)
    with Store.open(db, sources=SOURCES) as store:
        store.conn.execute("DROP TABLE slop_entries")
    with pytest.raises(DataError, match="table slop_entries is missing") as err:
        Store.open(db, sources=SOURCES, read_only=True)
    assert "Run `toolkit load`" in str(err.value)
    with Store.open(db, sources=SOURCES, migrate=False) as store:
        assert "slop_entries" not in store.tables()
