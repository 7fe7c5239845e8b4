"""Benchmark `toolkit check`: every built-in check on the 1,000,000-row audit DB of
bench_load.py (plus 100,000 dispatches, a third without a verdict), against running the
same SQL directly in DuckDB on the same store.

* the SQL checks through ``run_checks`` (the API's locked-down read-only connection, bound
  thresholds, a count and the first rows)  vs  the same queries run directly with duckdb and
  every row fetched  (target: <= 2x);
* the checks answered in Python (meta counts, ledger budget, secrets, which reads every text
  value of the store through the redaction finder), each timed, with the secret scan's rate
  against DuckDB fetching the same values.

Run: ``python bench/bench_checks.py [--rows 1000000]``. No assertions; it reports.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import duckdb  # noqa: E402
from bench_load import best, make_audit  # noqa: E402

from toolkit import Project  # noqa: E402
from toolkit.checks import BUILTIN, run_checks  # noqa: E402
from toolkit.checks.core import params_for  # noqa: E402

TODAY = dt.date(2027, 1, 1)


def add_dispatches(db: Path, n: int) -> None:
    conn = sqlite3.connect(db)
    conn.executemany(
        "INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, verdict) "
        "VALUES (?, ?, 'fork', 'm', 'brief', ?)",
        [(f"2026-{1 + i % 12:02d}-{1 + i % 28:02d} 10:00:00", f"task {i % 20_000}",
          None if i % 3 == 0 else "CONFIRMED") for i in range(n)])
    conn.commit()
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-checks-") as tmp_name:
        tmp = Path(tmp_name)
        db = tmp / "ledger.db"
        make_audit(db, args.rows)
        add_dispatches(db, 100_000)
        root = tmp / "project"
        root.mkdir()
        (root / "toolkit.yaml").write_text(f"audit_db: {db}\ntoday: '{TODAY}'\n")
        project = Project.open(root)  # loads the store once
        sql_checks = [c for c in BUILTIN if c.sql is not None]
        py_checks = [c for c in BUILTIN if c.finder is not None]

        def through_checks() -> None:
            run_checks(project, sql_checks)

        def direct() -> None:
            conn = duckdb.connect(str(project.config.db_path), read_only=True)
            for c in sql_checks:
                assert c.sql is not None
                conn.execute(c.sql, params_for(c, TODAY)).fetchall()
            conn.close()

        project.close()
        floor = best(direct)
        checked = best(through_checks)
        project.close()
        print(f"{len(sql_checks)} SQL checks on {args.rows:,} actions + 100,000 dispatches: "
              f"{checked / floor:.2f}x of the same SQL run directly in DuckDB "
              f"({checked * 1000:.0f} ms vs {floor * 1000:.0f} ms; target <= 2x)")
        for c in py_checks:
            t = time.perf_counter()
            [r] = run_checks(project, [c])
            took = time.perf_counter() - t
            print(f"  {c.name}: {took * 1000:.0f} ms ({r.status})")
        project.close()

        def fetch_text() -> None:
            conn = duckdb.connect(str(project.config.db_path), read_only=True)
            for table, column in (("actions", "description"), ("actions", "category"),
                                  ("actions", "project"), ("dispatches", "task")):
                conn.execute(f"SELECT {column} FROM {table}").fetchall()
            conn.close()

        fetch = best(fetch_text, repeat=1)
        t = time.perf_counter()
        run_checks(project, [c for c in py_checks if c.name == "secrets"])
        scan = time.perf_counter() - t
        project.close()
        print(f"secret scan of every text value in the store: {scan:.1f} s, {scan / fetch:.1f}x "
              f"of DuckDB fetching its four main text columns ({fetch:.1f} s)")


if __name__ == "__main__":
    main()
