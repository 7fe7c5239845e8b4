"""Store.release closes the DuckDB connection until the store is next used; a store closed
after a release stays closed: a later use is an error, not a connection (and a lock on the
file) opened again behind the caller's back."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from toolkit.loaders import SOURCES
from toolkit.store import SMALL_STORE_BYTES, Store, store_files


def _in_another_process(path, sql: str, *, read_only: bool = False) -> str:
    """Run ``sql`` on the store at ``path`` in another Python process; its first value."""
    other = subprocess.run([sys.executable, "-c", "import duckdb, sys; row = duckdb.connect("
                            "sys.argv[1], read_only=sys.argv[3] == 'ro').execute(sys.argv[2])"
                            ".fetchone(); print(row[0] if row else '')",
                            str(path), sql, "ro" if read_only else "rw"],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr
    return other.stdout.strip()


def test_a_store_closed_after_a_release_is_not_opened_again_by_a_use(tmp_path):
    path = tmp_path / "ledger.duckdb"
    store = Store.open(path, sources=SOURCES)
    store.release()
    assert store.scalar("SELECT count(*) FROM ledger_entries") == 0  # opened again
    store.release()
    store.close()
    with pytest.raises(duckdb.ConnectionException):
        store.scalar("SELECT count(*) FROM ledger_entries")
    # and nothing of this process holds the file: another process writes it
    _in_another_process(path, "CREATE TABLE t (x INT)")


def test_a_release_mid_way_through_one_reading_refuses_a_store_written_meanwhile(tmp_path):
    """``release(same_state=True)``: what is read next must be of the state read before (a
    site's pages and their rows); another process's write in the gap is refused as busy, and
    the store, still released, reads the new state on its next use. A plain release reads
    whatever the store holds when it is next used; a reader in the gap changes nothing."""
    from toolkit.errors import BusyError

    path = tmp_path / "ledger.duckdb"
    store = Store.open(path, sources=SOURCES)
    store.conn.execute("CREATE TABLE notes (x INT)")
    store.release(same_state=True)
    assert _in_another_process(path, "SELECT count(*) FROM notes", read_only=True) == "0"
    assert store.scalar("SELECT count(*) FROM notes") == 0  # only read: the same state
    store.release(same_state=True)
    _in_another_process(path, "INSERT INTO notes VALUES (1)")
    with pytest.raises(BusyError, match="changed the store while this one was using it"):
        store.scalar("SELECT count(*) FROM notes")
    assert store.scalar("SELECT count(*) FROM notes") == 1  # a new reading: the new state
    store.release()
    _in_another_process(path, "INSERT INTO notes VALUES (2)")
    assert store.scalar("SELECT count(*) FROM notes") == 2
    store.close()


def test_giving_back_freed_memory_holds_on_the_connections_a_release_makes_again(tmp_path):
    """A site build asks DuckDB to give freed memory back to the system at once (its peak
    memory: docs/guide/site.md); the store's releases between the build's stages must not
    lose that. A small store (SMALL_STORE_BYTES) keeps DuckDB's default, as a store that was
    not asked does; so does a store over the caller's own connection."""
    setting = "SELECT current_setting('allocator_bulk_deallocation_flush_threshold')"
    path = tmp_path / "ledger.duckdb"
    store = Store.open(path, sources=SOURCES)
    default = store.scalar(setting)
    store.give_back_freed_memory()  # small: nothing to give back worth its CPU
    assert store.scalar(setting) == default
    store.release()
    assert store.scalar(setting) == default
    # values that do not compress, until the file and its log outgrow a small store
    store.conn.execute("CREATE TABLE ballast AS SELECT sha256(CAST(i AS VARCHAR)) || "
                       "sha256(CAST(-i AS VARCHAR)) AS v FROM range(?) t(i)",
                       [SMALL_STORE_BYTES // 64])
    store.conn.execute("CHECKPOINT")
    assert sum(p.stat().st_size for p in store_files(path) if p.exists()) >= SMALL_STORE_BYTES
    store.give_back_freed_memory()
    lean = store.scalar(setting)  # 1 MB, as DuckDB prints it
    assert lean != default
    store.release()
    assert store.scalar(setting) == lean  # opened again, set again
    store.close()
    other = Store.open(path, sources=SOURCES)  # a store that was not asked keeps the default
    assert other.scalar(setting) == default
    other.close()
    conn = duckdb.connect(str(path))
    theirs = Store(conn, path, read_only=False, sources=SOURCES)
    theirs.give_back_freed_memory()
    assert theirs.scalar(setting) == default
    theirs.release()  # the caller's connection: kept open
    assert conn.execute("SELECT count(*) FROM ledger_entries").fetchone() == (0,)
    conn.close()


def test_duckdb_library_pages_are_given_back_and_read_again_when_used(tmp_path):
    """drop_library_pages gives the kernel back the pages of DuckDB's library a process has
    read (a large site build calls it before its pages render and MkDocs runs): in another
    process, its resident size falls, and the store answers after it as before."""
    code = """
import re, sys
from pathlib import Path
import _duckdb
from toolkit.loaders import SOURCES
from toolkit.store import Store, drop_library_pages

library = str(Path(_duckdb.__file__).resolve())

def resident() -> int:
    if not Path("/proc/self/smaps").exists():  # not Linux
        return -1
    kb, current = 0, ""
    for line in open("/proc/self/smaps"):
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
            current = line.split(maxsplit=5)[5].strip() if len(line.split()) > 5 else ""
        elif line.startswith("Rss:") and current == library:
            kb += int(line.split()[1])
    return kb

store = Store.open(Path(sys.argv[1]), sources=SOURCES)
asked = "SELECT count(*) FROM ledger_entries"
first = store.scalar(asked)
store.release()
before = resident()
dropped = drop_library_pages()
after = resident()
print(dropped, before, after, first, store.scalar(asked))
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ledger.duckdb")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    dropped, before, after, first, again = out.stdout.split()
    assert (first, again) == ("0", "0")
    if sys.platform.startswith("linux"):
        assert dropped == "True"
        assert int(before) > 10_000  # KB: the library's code a store's queries ran
        assert int(after) < int(before) / 2  # (what relocation changed stays)
    else:  # not done on another system
        assert dropped == "False"
