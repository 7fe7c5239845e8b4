"""The store's writing connection: the file attached with small row groups, written before a
load's commit. What a user sees of it is what a plain DuckDB connection (another program, a
notebook, ``toolkit query``) finds in the file: the committed rows, and nothing of a load that
failed, even when its rows were already written to the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.config import Config
from toolkit.errors import BusyError
from toolkit.loaders import SOURCES
from toolkit.store import STORE_ROW_GROUP, Store

# more rows than two of the store's row groups: some are written before the commit
ROWS = 2 * STORE_ROW_GROUP + 1000


def _plain(path, sql: str, *, read_only: bool = True) -> str:
    """``sql``'s first row on the store at ``path``, by a plain DuckDB connection in another
    Python process."""
    other = subprocess.run([sys.executable, "-c", "import duckdb, sys; print(duckdb.connect("
                            "sys.argv[1], read_only=sys.argv[3] == 'ro').execute(sys.argv[2])"
                            ".fetchone())", str(path), sql, "ro" if read_only else "rw"],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr
    return other.stdout.strip()


def _insert(store: Store, rows: int, title: str) -> None:
    store.insert_rows("ledger_entries", ("entry_id", "file", "title", "evidence"),
                      [(f"e-{i}", "patterns", title, "x" * 200) for i in range(rows)])


@pytest.mark.parametrize("name", ["ledger.duckdb", "memory.duckdb"])
def test_a_big_write_reads_the_same_in_plain_duckdb_and_a_failed_one_leaves_nothing(
        tmp_path, name):
    path = tmp_path / name
    with Store.open(path, sources=SOURCES) as store:
        with store.transaction():
            _insert(store, ROWS, "kept")
        with pytest.raises(RuntimeError), store.transaction():
            _insert(store, ROWS, "rolled back")
            raise RuntimeError("the load failed")
        assert store.scalar("SELECT count(*) FROM ledger_entries") == ROWS
        database = store.scalar("SELECT current_database()")
    assert _plain(path, "SELECT count(*), min(title), max(title), current_database() "
                        "FROM ledger_entries") == f"({ROWS}, 'kept', 'kept', '{database}')"
    # another program's writes are read by the next toolkit command
    _plain(path, "INSERT INTO ledger_entries (entry_id, file, title) "
                 "VALUES ('theirs', 'patterns', 'theirs')", read_only=False)
    with Store.open(path, sources=SOURCES, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM ledger_entries") == ROWS + 1


def test_a_second_writer_in_the_same_process_is_busy_and_the_first_goes_on(tmp_path):
    path = tmp_path / "ledger.duckdb"
    with Store.open(path, sources=SOURCES) as first:
        with pytest.raises(BusyError, match="open in this process already"):
            Store.open(path, sources=SOURCES)
        _insert(first, 3, "first")
        assert first.scalar("SELECT count(*) FROM ledger_entries") == 3
    with Store.open(path, sources=SOURCES) as again:  # closed: free again
        assert again.scalar("SELECT count(*) FROM ledger_entries") == 3


def test_the_writers_temporary_files_go_beside_the_store(tmp_path, monkeypatch):
    """A load that spills (the audit's bounded memory) writes beside the store, as a plain
    connection does, never into the folder the command was started in."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "data" / "ledger.duckdb"
    with Store.open(path, sources=SOURCES) as store:
        assert store.scalar("SELECT current_setting('temp_directory')") == f"{path}.tmp"


def test_an_entry_bigger_than_the_loads_memory_limit_is_loaded_whole(tmp_path, monkeypatch):
    # DuckDB's memory is limited while the ledger and its history load (a saving of memory):
    # one entry of 12 MB (within the file size limit) failed the whole load under it ("the
    # store ran out of memory", exit 1); the load is made again without the limit
    import toolkit.store as store_module
    from toolkit.config import resolve

    monkeypatch.setattr(store_module, "LOAD_MEMORY_MB_PER_THREAD", 1)
    monkeypatch.setattr(store_module, "LOAD_MEMORY_MIN_MB", 8)  # on any number of cores
    root = tmp_path / "p"
    ledger = root / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    evidence = "\n".join(f"- 2026-05-01 -- session s{i}: line {i} " + "x" * 60
                         for i in range(150_000))  # ~12 MB
    (ledger / "patterns.md").write_text(
        "# Patterns\n\n---\n\n**Title:** Big one\n**Date:** 2026-05-01\n**Category:** testing\n"
        f"**Confidence:** low\n**Source reflections:** 1\n\n**Evidence:**\n{evidence}\n",
        encoding="utf-8")
    cfg = resolve(project=root, env={"HOME": str(tmp_path / "home")}, cwd=root)
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        report = store.refresh(cfg)
        assert [r.name for r in report.results if r.error is not None] == []
        assert store.fetch("SELECT title, length(evidence) FROM ledger_entries")[1] == [
            ("Big one", len(evidence))]


def test_a_tables_files_have_the_same_bytes_sorted_once_or_for_each_file(tmp_path, monkeypatch):
    """A site download's CSV and JSON of a table of many rows are copied from one sorted
    temporary table, of a few rows each sorted on its own: the bytes are the same either way,
    and the same as each file copied alone."""
    import toolkit.store as store_module

    rows = [(f"e-{i % 7}", ("patterns", "=cmd", "edge-cases")[i % 3], f"title {i % 5}",
             None if i % 4 else "x") for i in range(40)]
    written: dict[str, dict[str, bytes]] = {}
    with Store.open(tmp_path / "store.duckdb", sources=SOURCES) as store:
        store.insert_rows("ledger_entries", ("entry_id", "file", "title", "evidence"), rows)
        for way, few in (("each", store_module.FEW_ROWS), ("once", 0)):
            monkeypatch.setattr(store_module, "FEW_ROWS", few)
            outs = [(tmp_path / f"{way}.{fmt}", fmt) for fmt in ("csv", "json")]
            store.copy_to_files("ledger_entries", outs, ordered=True, spreadsheet_safe=True,
                                rows=len(rows))
            written[way] = {fmt: path.read_bytes() for path, fmt in outs}
        for fmt in ("csv", "json"):
            store.copy_to("ledger_entries", tmp_path / f"alone.{fmt}", fmt, ordered=True,
                          spreadsheet_safe=True)
    alone = {fmt: (tmp_path / f"alone.{fmt}").read_bytes() for fmt in ("csv", "json")}
    assert written["each"] == written["once"] == alone
    assert b"'=cmd" in alone["csv"] and alone["csv"].count(b"\n") == len(rows) + 1


def test_stores_opened_one_after_another_in_one_process_are_each_let_go_at_close(
        tmp_path, monkeypatch):
    """A process opens a store after another (the MCP server's calls, `serve`, the API): each
    is its own file while it is open, with its temporary files beside it and DuckDB's default
    memory limit (a load's limit does not outlive it), and at its close the file is free for
    another process at once. Two stores open at the same time both work."""
    from toolkit.config import resolve

    root = tmp_path / "p"
    (root / ".smith" / "vault" / "ledger").mkdir(parents=True)
    (root / ".smith" / "vault" / "ledger" / "patterns.md").write_text(
        "# Patterns\n\n---\n\n**Title:** One\n**Date:** 2026-05-01\n**Category:** testing\n"
        "**Confidence:** low\n**Source reflections:** 1\n", encoding="utf-8")
    cfg = resolve(project=root, env={"HOME": str(tmp_path / "home")}, cwd=root)
    with Store.open(tmp_path / "plain.duckdb", sources=SOURCES) as plain:
        default_limit = plain.scalar("SELECT current_setting('memory_limit')")
    paths = [tmp_path / name / "ledger.duckdb" for name in ("a", "b", "c")]
    for i, path in enumerate(paths):
        with Store.open(path, sources=SOURCES) as store:
            assert store.scalar("SELECT current_setting('temp_directory')") == f"{path}.tmp"
            assert store.scalar("SELECT current_database()") == "ledger"
            assert store.scalar("SELECT current_setting('memory_limit')") == default_limit
            store.refresh(cfg.with_overrides(db_path=path))  # sets and resets a limit
            _insert(store, i + 1, f"store {i}")
        # another process opens it for writing at once (a lock still held fails it)
        assert _plain(path, "SELECT count(*) FROM ledger_entries WHERE title LIKE 'store %'",
                      read_only=False) == f"({i + 1},)"
    with Store.open(paths[0], sources=SOURCES) as first, \
            Store.open(paths[1], sources=SOURCES) as second:
        assert first.scalar("SELECT count(*) FROM ledger_entries WHERE title LIKE 's%'") == 1
        assert second.scalar("SELECT count(*) FROM ledger_entries WHERE title LIKE 's%'") == 2
        for released, other in ((second, first), (first, second)):  # (a large build's way)
            released.release()
            assert other.scalar("SELECT count(*) FROM ledger_entries") >= 1
            assert released.scalar("SELECT count(*) FROM ledger_entries") >= 1  # opened again
    for path in paths[:2]:
        assert _plain(path, "SELECT 1", read_only=False) == "(1,)"


@pytest.mark.parametrize("when", ["at once", "at the next open"])
def test_a_store_dropped_without_close_lets_its_file_go(tmp_path, when):
    """A store its caller drops without closing it (a Project rebound in a notebook) lets its
    file go, as a plain DuckDB connection does when it is collected: another process can
    write it, and the next store this process opens shares the process's one DuckDB instance
    again. When the drop comes while another thread opens a store (the instance's lock
    taken), the file goes at the process's next open."""
    import gc

    import toolkit.store as store_module

    first, second = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    store = Store.open(first, sources=SOURCES)
    _insert(store, 1, "kept")
    hosted = store.conn is store_module._HOST.cursor
    assert hosted  # the process's instance holds it
    if when == "at once":
        del store
        gc.collect()
    else:
        with store_module._HOST.lock:  # another thread in the middle of an open
            del store
            gc.collect()
        with pytest.raises(AssertionError, match="Could not set lock"):  # still attached
            _plain(first, "SELECT 1", read_only=False)
        with Store.open(second, sources=SOURCES) as other:
            assert other.conn is store_module._HOST.cursor
    assert _plain(first, "SELECT count(*) FROM ledger_entries WHERE title = 'kept'",
                  read_only=False) == "(1,)"
    with Store.open(second, sources=SOURCES) as other:
        assert other.conn is store_module._HOST.cursor  # not an instance of its own


def test_a_process_that_ends_with_stores_unclosed_says_nothing_and_lets_them_go(tmp_path):
    """A script that ends with a store still open (a global of a script that defines a
    function: the store goes while Python shuts down, when imports no longer work), or
    dropped in a reference cycle that only the shutdown collects, exits quietly (no
    "Exception ignored" on stderr), and both files are free for the next process."""
    held, cycled = tmp_path / "held.duckdb", tmp_path / "cycled.duckdb"
    script = ("import sys\n"
              "from pathlib import Path\n"
              "from toolkit.loaders import SOURCES\n"
              "from toolkit.store import Store\n"
              "held = Store.open(Path(sys.argv[1]), sources=SOURCES)\n"
              "held.close()\n"
              "held = Store.open(Path(sys.argv[1]), sources=SOURCES)\n"
              "def use():  # a function of the script's: its globals outlive the script\n"
              "    return held\n"
              "import gc; gc.disable()  # the cycle goes at the shutdown's collection\n"
              "cycled = Store.open(Path(sys.argv[2]), sources=SOURCES)\n"
              "cycled.me = cycled\n"
              "del cycled\n")
    ended = subprocess.run([sys.executable, "-c", script, str(held), str(cycled)],
                           capture_output=True, text=True, timeout=60)
    assert (ended.returncode, ended.stdout, ended.stderr) == (0, "", "")
    for path in (held, cycled):
        assert _plain(path, "SELECT count(*) FROM _migrations", read_only=False) != "(0,)"


def test_a_child_forked_after_the_process_used_a_store_opens_it_and_answers(tmp_path):
    """A process that forks (the toolkit's tests do; so may a user's multiprocessing) after
    it opened and closed a store: the child opens the store itself and answers."""
    path = tmp_path / "ledger.duckdb"
    with Store.open(path, sources=SOURCES) as store:
        _insert(store, 2, "before the fork")
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when it read what the parent wrote
        code = 1
        try:
            with Store.open(path, sources=SOURCES) as store:
                code = 0 if store.scalar("SELECT count(*) FROM ledger_entries") == 2 else 2
        finally:
            os._exit(code)
    status = os.waitpid(pid, 0)[1]
    assert os.waitstatus_to_exitcode(status) == 0
    with Store.open(path, sources=SOURCES) as store:  # and the parent goes on
        assert store.scalar("SELECT count(*) FROM ledger_entries") == 2


def _project_of_300_entries(tmp_path: Path) -> Config:
    """A project under ``tmp_path`` whose ledger holds 300 entries of some 50 words (about
    0.1 MB of log when loaded), and its Config (HOME under ``tmp_path``)."""
    from toolkit.config import resolve

    root = tmp_path / "p"
    ledger = root / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    (ledger / "patterns.md").write_text("# Patterns\n" + "".join(
        f"\n---\n\n**Title:** Entry {i}\n**Date:** 2026-05-01\n**Category:** testing\n"
        f"**Confidence:** low\n**Source reflections:** 1\n\n{'words ' * 50}\n"
        for i in range(300)), encoding="utf-8")
    return resolve(project=root, env={"HOME": str(tmp_path / "home")}, cwd=root)


def test_a_small_store_works_on_one_thread_and_a_big_one_on_duckdbs_own(tmp_path, monkeypatch):
    """DuckDB's threads follow the store's size (``SMALL_STORE_BYTES``): a small store's
    connection, and its query connection, work on one thread (a second one has nothing to take
    in tables of a row group or two, and waking it costs CPU), a big store's on DuckDB's own
    number, whichever store the process opened before; a refresh that grows a store past the
    size goes on with them all, and a bulk insert into a small store uses them all, then one
    again, with every row stored."""
    import duckdb

    from toolkit import store as store_mod
    from toolkit.store import FEW_ROWS, open_query_connection

    plain = duckdb.connect()
    every = int(plain.execute("SELECT current_setting('threads')").fetchall()[0][0])
    plain.close()
    if every == 1:
        pytest.skip("a machine of one core: DuckDB has one thread whatever the store")

    def threads(store: Store) -> int:
        return int(store.scalar("SELECT current_setting('threads')"))

    small, big = tmp_path / "small.duckdb", tmp_path / "big.duckdb"
    for path in (small, big, small):
        if path == big:
            monkeypatch.setattr(store_mod, "SMALL_STORE_BYTES", 1)
        with Store.open(path, sources=SOURCES) as store:
            assert threads(store) == (every if path == big else 1)
            if path == small:  # a bulk insert: every thread, then one again
                with store._every_thread():
                    assert threads(store) == every
                assert threads(store) == 1
                before = store.scalar("SELECT count(*) FROM ledger_entries")
                _insert(store, FEW_ROWS + 1, "bulk")
                assert threads(store) == 1
                assert store.scalar("SELECT count(*) FROM ledger_entries") == \
                    before + FEW_ROWS + 1
        monkeypatch.undo()
    conn = open_query_connection(small)
    assert conn.execute("SELECT current_setting('threads')").fetchall()[0][0] == 1
    conn.close()

    # a refresh that grows the store past the size: DuckDB's threads from then on
    cfg = _project_of_300_entries(tmp_path)
    grown = tmp_path / "grown.duckdb"
    Store.open(grown, sources=SOURCES).close()
    made = sum(p.stat().st_size for p in store_mod.store_files(grown) if p.exists())
    monkeypatch.setattr(store_mod, "SMALL_STORE_BYTES", made + 1)
    with Store.open(grown, sources=SOURCES) as store:
        assert threads(store) == 1
        store.refresh(cfg.with_overrides(db_path=grown))
        assert threads(store) == every
        assert store.scalar("SELECT count(*) FROM ledger_entries") == 300


def test_a_new_store_after_the_first_is_a_copy_of_an_empty_one_with_nothing_of_the_first(
        tmp_path):
    """A process makes a new store from a copy of the first new store it made, as it was
    just migrated (the MCP server's, fleet's and the API's projects): every table and the
    record of every migration, none of the first store's rows, a file of its own with the
    mode a store made by DuckDB has, and nothing else left in its folder. Another process then
    opens it for writing, and a store of other migrations is made as usual."""
    import dataclasses

    from toolkit import store as store_mod

    store_mod._EMPTY_STORES.clear()
    first, second = tmp_path / "a" / "ledger.duckdb", tmp_path / "b" / "ledger.duckdb"
    with Store.open(first, sources=SOURCES) as store:
        _insert(store, 3, "first's")
    assert len(store_mod._EMPTY_STORES) == 1  # kept at its open, before its rows
    with Store.open(second, sources=SOURCES) as store:
        assert store.schema_mismatch() is None
        assert store.applied_migrations() == sorted(n for n, _sql in store.migrations())
        assert store.scalar("SELECT count(*) FROM ledger_entries") == 0
        _insert(store, 2, "second's")
    assert sorted(p.name for p in second.parent.iterdir()) == ["ledger.duckdb"]
    assert os.stat(second).st_mode == os.stat(first).st_mode
    assert not os.path.samefile(first, second)
    assert _plain(first, "SELECT count(*) FROM ledger_entries") == "(3,)"
    assert _plain(second, "SELECT count(*) FROM ledger_entries", read_only=False) == "(2,)"

    # other migrations (a source more): its own empty store, not the copy
    extra = dataclasses.replace(SOURCES[0], name="extra", tables={"extra_rows": "rows"},
                                migrations=(("9999_extra", "CREATE TABLE extra_rows (n INT)"),))
    with Store.open(tmp_path / "c" / "ledger.duckdb", sources=[*SOURCES, extra]) as store:
        assert store.scalar("SELECT count(*) FROM extra_rows") == 0
        assert "9999_extra" in store.applied_migrations()
    assert len(store_mod._EMPTY_STORES) == 2


def test_a_store_another_process_made_meanwhile_is_opened_as_it_is_and_never_copied(
        tmp_path, monkeypatch):
    """A store that appears between the toolkit's look at the path and its open (another
    process made it and wrote rows) is opened as it is, its rows kept, and is never taken
    as the empty store that later new stores are copied from."""
    from toolkit import store as store_mod

    made = tmp_path / "made.duckdb"
    with Store.open(made, sources=SOURCES) as other:
        _insert(other, 4, "another process's")
    store_mod._EMPTY_STORES.clear()
    monkeypatch.setattr(store_mod, "check_store_path", lambda path: False)  # looked: nothing
    with Store.open(made, sources=SOURCES) as store:
        assert store.scalar("SELECT count(*) FROM ledger_entries") == 4
    assert store_mod._EMPTY_STORES == {}
    monkeypatch.undo()
    with Store.open(tmp_path / "new.duckdb", sources=SOURCES) as store:
        assert store.scalar("SELECT count(*) FROM ledger_entries") == 0


@pytest.mark.parametrize("threshold", ["default", "one byte"])
def test_a_bounded_load_is_checkpointed_on_its_own_only_past_a_megabyte_of_log(
        tmp_path, monkeypatch, threshold):
    """A source loaded within a memory limit (the ledger) checkpoints what it wrote before the
    next source loads, within that limit, once its write-ahead log holds
    ``LOAD_CHECKPOINT_BYTES`` (1 MB): a few rows wait in the log for the refresh's own
    checkpoint at its end, which writes them with the other sources' (a first load of a small
    project otherwise wrote its store three times). Either way the refresh ends with the log
    empty and every entry stored."""
    import toolkit.store as store_module
    from toolkit.store import store_files

    if threshold == "one byte":
        monkeypatch.setattr(store_module, "LOAD_CHECKPOINT_BYTES", 1)
    cfg = _project_of_300_entries(tmp_path)  # about 0.1 MB of log
    wal = store_files(cfg.db_path)[1]
    log_after_ledger: list[int] = []

    def progress(label: str, done: int, total: int) -> None:
        if label == "Loading sessions":  # the source after the ledger
            log_after_ledger.append(wal.stat().st_size if wal.exists() else 0)

    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg, progress=progress)
        assert store.scalar("SELECT count(*) FROM ledger_entries") == 300
        assert not wal.exists() or wal.stat().st_size == 0
    [after] = log_after_ledger
    assert (after > 0) if threshold == "default" else (after == 0), after
