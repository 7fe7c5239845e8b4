"""Store.release closes the DuckDB connection until the store is next used; a store closed
after a release stays closed: a later use is an error, not a connection (and a lock on the
file) opened again behind the caller's back."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from toolkit.loaders import SOURCES
from toolkit.store import Store


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
    other = subprocess.run([sys.executable, "-c", "import duckdb, sys; "
                            "duckdb.connect(sys.argv[1]).execute('CREATE TABLE t (x INT)')",
                            str(path)], capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr
