"""Benchmark the foundation: audit load, incremental refresh, ledger parsing, `--help`.

Every figure is printed as a ratio against a floor measured in the same run, because the
machine is shared and noisy and absolute times vary:

* full load of N audit rows into the DuckDB file  vs  SQLite's own GROUP BY scan of them
  (target: <= 1.5x);
* refresh after 1,000 new rows  vs  that full load  (target: < 5%);
* parsing a 10,000-entry ledger: entries per second (target: >= 50,000/s) and the ratio
  against reading the same bytes and splitting them into lines;
* ``toolkit --help``  vs  ``python -c "import click"``  (target: < 2x).

Run: ``python bench/bench_load.py [--rows 1000000]``. No assertions; it reports.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolkit.config import resolve  # noqa: E402
from toolkit.loaders import SOURCES  # noqa: E402
from toolkit.store import Store  # noqa: E402

SCHEMA = """
CREATE TABLE actions (id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts TEXT NOT NULL DEFAULT (datetime('now')), tier INTEGER NOT NULL CHECK (tier IN (0,1,2)),
  category TEXT NOT NULL, description TEXT NOT NULL, project TEXT);
CREATE TABLE dispatches (id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts TEXT NOT NULL DEFAULT (datetime('now')), task TEXT NOT NULL, agent_type TEXT NOT NULL,
  model TEXT NOT NULL, brief_summary TEXT NOT NULL, verdict TEXT, verdict_ts TEXT,
  verdict_notes TEXT);
CREATE TABLE approaches (id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts TEXT NOT NULL DEFAULT (datetime('now')), task TEXT NOT NULL, approach TEXT NOT NULL,
  outcome TEXT NOT NULL, reason TEXT NOT NULL);
"""
CATEGORIES = ["git", "refactor", "deploy", "file_write", "dependency_change", "tool_failure"]


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def make_audit(path: Path, rows: int, start_id: int = 0) -> None:
    rnd = random.Random(start_id + 1)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    if start_id == 0:
        conn.executescript(SCHEMA)
    batch = []
    for i in range(rows):
        n = start_id + i
        ts = f"2026-{1 + n % 12:02d}-{1 + n % 28:02d} {n % 24:02d}:{n % 60:02d}:{(n * 7) % 60:02d}"
        batch.append((ts, rnd.choice((0, 0, 0, 1, 1, 2)), rnd.choice(CATEGORIES),
                      f"Action number {n}: edited services/billing/module_{n % 97}.py",
                      "acme-api" if n % 5 else None))
        if len(batch) == 50_000:
            conn.executemany("INSERT INTO actions (ts, tier, category, description, project) "
                             "VALUES (?,?,?,?,?)", batch)
            batch.clear()
    if batch:
        conn.executemany("INSERT INTO actions (ts, tier, category, description, project) "
                         "VALUES (?,?,?,?,?)", batch)
    conn.commit()
    conn.close()


def bench_audit(tmp: Path, rows: int) -> None:
    db = tmp / "ledger.db"
    make_audit(db, rows)
    project = tmp / "project"
    project.mkdir()
    cfg = resolve(project=project, env={"HOME": str(tmp / "home"), "NAGI_LEDGER_DB": str(db)})

    def sqlite_scan() -> None:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        conn.execute("SELECT tier, category, count(*) FROM actions GROUP BY tier, category"
                     ).fetchall()
        conn.close()

    floor = best(sqlite_scan)
    loads = []
    for _ in range(3):
        store_path = tmp / f"store-{len(loads)}.duckdb"
        store_path.unlink(missing_ok=True)
        with Store.open(store_path, sources=SOURCES) as store:
            t = time.perf_counter()
            store.refresh(cfg.with_overrides(db_path=store_path), only=["audit"])
            loads.append(time.perf_counter() - t)
    full = min(loads)
    print(f"audit full load ({rows:,} rows): {full / floor:.2f}x of SQLite's GROUP BY scan "
          f"(floor {floor * 1000:.0f} ms, load {full * 1000:.0f} ms; target <= 1.5x)")

    make_audit(db, 1000, start_id=rows)
    store_path = tmp / "store-0.duckdb"
    with Store.open(store_path, sources=SOURCES) as store:
        t = time.perf_counter()
        store.refresh(cfg.with_overrides(db_path=store_path), only=["audit"])
        inc = time.perf_counter() - t
    print(f"refresh after 1,000 new rows: {inc / full * 100:.1f}% of the full load "
          f"({inc * 1000:.0f} ms; target < 5%)")


def make_ledger(n: int) -> bytes:
    parts = ["# Ledger: Patterns\n\nApproaches that worked well.\n\n<!-- sorted -->\n"]
    for i in range(n):
        if i % 3 == 0:
            parts.append(
                f"\n## Entry number {i} about caching layers\n\n"
                f"- **Date:** 2026-04-{1 + i % 28:02d}\n"
                f"- **Category:** testing\n- **Confidence:** medium\n- **Observations:** {i % 7}\n"
                f"- **Source reflections:** 2026-04-01, 2026-04-02\n\n### Context\n\nWhen the "
                f"cache is cold.\n\n### Pattern\n\nWarm it first, then measure entry {i}.\n\n"
                f"### Evidence\n\nTwo runs.\n\n### Related\n\nNone\n\n---\n")
        else:
            parts.append(
                f"\n---\n\n**Title:** Entry number {i} about retries\n**Date:** 2026-05-"
                f"{1 + i % 28:02d}\n**Category:** implementation\n**Confidence:** low\n"
                f"**Source reflections:** 1\n\n**Context:** Webhook senders.\n\n**Pattern:** Cap "
                f"retries at five for entry {i}.\n\n**Evidence:**\n- 2026-05-01 -- session s_{i}: "
                f"ok\n\n**Related:** None\n")
    return "".join(parts).encode()


def bench_parse() -> None:
    from toolkit.sources.smith import parse_ledger_bytes

    data = make_ledger(10_000)
    floor = best(lambda: data.decode("utf-8").splitlines(), repeat=5)
    took = best(lambda: parse_ledger_bytes(data, "patterns.md", "patterns"), repeat=5)
    n = len(parse_ledger_bytes(data, "patterns.md", "patterns").entries)
    print(f"parse 10,000-entry ledger: {n / took:,.0f} entries/s ({took * 1000:.0f} ms; "
          f"{took / floor:.1f}x of decode+splitlines; target >= 50,000/s)")


def bench_help() -> None:
    def run(args: list[str]) -> None:
        subprocess.run(args, check=True, capture_output=True)

    floor = statistics.median(best(lambda: run([sys.executable, "-c", "import click"]), 1)
                              for _ in range(7))
    helps = statistics.median(best(lambda: run([sys.executable, "-m", "toolkit", "--help"]), 1)
                              for _ in range(7))
    print(f"toolkit --help: {helps / floor:.2f}x of `python -c 'import click'` "
          f"({helps * 1000:.0f} ms vs {floor * 1000:.0f} ms; target < 2x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_audit(Path(tmp), args.rows)
    bench_parse()
    bench_help()


if __name__ == "__main__":
    main()
