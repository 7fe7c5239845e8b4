"""Store.insert_rows stores a few rows (bound as lists) exactly as it stores many (Arrow).

A one-change refresh inserts a handful of rows, a full load thousands: the same value must
end up as the same stored value, or be refused alike, whichever way it went in.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from toolkit.store import FEW_ROWS, Store

VALUES: list[tuple[str, Any]] = [
    ("VARCHAR", "text"), ("VARCHAR", ""), ("VARCHAR", None), ("VARCHAR", 7), ("VARCHAR", 1.5),
    ("VARCHAR", True), ("VARCHAR", dt.datetime(2026, 1, 1, tzinfo=dt.UTC)),
    ("VARCHAR", "lone \udcff surrogate"), ("VARCHAR[]", ["lone \ud800"]),
    ("INTEGER", 3), ("INTEGER", 2.7), ("INTEGER", True), ("INTEGER", "12"),
    ("BIGINT", 2**62), ("BIGINT", 1.5),
    ("DOUBLE", 2), ("DOUBLE", 0.25), ("DOUBLE", "2.5"),
    ("BOOLEAN", False), ("BOOLEAN", 1), ("BOOLEAN", "true"),
    ("JSON", {"a": [1, "é"]}), ("JSON", None),
    ("TIMESTAMP", "2026-01-01T05:00:00"), ("TIMESTAMP", dt.datetime(2026, 1, 1, 5)),
    ("TIMESTAMPTZ", "2026-01-01T05:00:00+03:00"),
    ("TIMESTAMPTZ", dt.datetime(2026, 1, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=3)))),
    ("DATE", "2026-02-03"), ("DATE", dt.date(2026, 2, 3)), ("DATE", "2026-13-01"),
    ("VARCHAR[]", ["a", None]), ("VARCHAR[]", []), ("VARCHAR[]", [1, "a"]),
    ("INTEGER[]", [1, None]), ("INTEGER[]", [1.5]), ("INTEGER[]", ["2"]),
]


def _stored(path: Path, duck_type: str, value: Any, copies: int) -> Any:
    """What the store holds after inserting ``copies`` rows of ``value`` (the exception's
    type when it refuses them)."""
    store = Store.open(path, sources=(), read_only=False)
    try:
        store.conn.execute(f"CREATE TABLE t (c {duck_type})")
        try:
            store.insert_rows("t", ["c"], [(value,)] * copies)
        except Exception as exc:  # the refusal must be the same either way
            return type(exc).__name__
        return store.conn.execute("SELECT DISTINCT c::VARCHAR FROM t").fetchall()
    finally:
        store.close()


@pytest.mark.parametrize("duck_type, value", VALUES, ids=[f"{t}-{v!r}" for t, v in VALUES])
def test_a_few_rows_are_stored_as_many_rows_are(tmp_path, duck_type, value):
    few = _stored(tmp_path / "few.duckdb", duck_type, value, 1)
    many = _stored(tmp_path / "many.duckdb", duck_type, value, FEW_ROWS + 1)
    assert few == many


PLAIN = [("VARCHAR", "text"), ("INTEGER", 3), ("BIGINT", 2**62), ("DOUBLE", 0.25),
         ("DOUBLE", 2), ("BOOLEAN", False), ("JSON", {"a": [1, "é"]}),
         ("TIMESTAMP", "2026-01-01T05:00:00"), ("DATE", "2026-02-03"),
         ("VARCHAR[]", ["a", None]), ("INTEGER[]", [1, None])]


def test_a_few_rows_of_the_columns_own_types_go_without_arrow(tmp_path, monkeypatch):
    """What the comparison above compares: a few plain rows are bound as lists (a one-change
    refresh need not import pyarrow), and a value of another type goes through Arrow."""
    import toolkit.store as store_mod

    arrow_for: list[str] = []
    real = store_mod._arrow_type

    def arrow_type(duck_type: str) -> Any:
        arrow_for.append(duck_type)
        return real(duck_type)

    monkeypatch.setattr(store_mod, "_arrow_type", arrow_type)
    for i, (duck_type, value) in enumerate(PLAIN):
        got = _stored(tmp_path / f"plain{i}.duckdb", duck_type, value, FEW_ROWS)
        assert isinstance(got, list) and len(got) == 1, (duck_type, value, got)  # stored
    assert arrow_for == []
    _stored(tmp_path / "odd.duckdb", "INTEGER", 2.7, 1)
    assert arrow_for == ["INTEGER"]
