"""Benchmark ``toolkit export --format parquet`` of a fleet: 10 projects, 1,000,000 audit rows
in all, against a floor measured in the same run.

The floor is DuckDB's own ``COPY (…) TO … (FORMAT parquet, PARTITION_BY (project))`` of the
same rows (every store attached to one connection, their actions in one UNION ALL): the least
any Parquet writer of a partitioned dataset pays. Each figure is the median of ``--reps`` runs
(default 3), printed as a ratio against the floor's median:

* export: ``toolkit.export.export_parquet`` of the 10 stores into an empty folder, each
  store's actions scoped to its project as ``toolkit fleet export`` reads them: every table
  of every project, with its content digest, schema file, staging folder and swap (target:
  <= 1.5x);
* unchanged: the same export again into the filled folder (every partition's digest matches,
  nothing is written).

Run: ``python bench/bench_export.py [--projects 10] [--rows 1000000] [--reps 3] [--cpu]``.
``--cpu`` counts CPU seconds of all threads instead of wall time: steadier on a shared, busy
machine. No assertions.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_slop  # noqa: E402
from bench_slop import median  # noqa: E402  (median of reps, reset untimed)


def make_stores(tmp: Path, projects: int, rows: int) -> list[Path]:
    """One store per project, its actions table holding rows/projects audit rows (the other
    tables empty, as the store's migrations make them)."""
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    paths = []
    each = rows // projects
    for i in range(projects):
        path = tmp / f"p{i}.duckdb"
        with Store.open(path, sources=SOURCES) as store:
            store.conn.execute(
                "INSERT INTO actions SELECT range, TIMESTAMP '2026-01-01' + "
                "to_seconds(range * 7 + ?), (range % 3)::INTEGER, 'category ' || range % 11, "
                "'agent action number ' || range || ' on ' || ?, ?  FROM range(?)",
                [i, f"p{i}", f"p{i}", each])
        paths.append(path)
    return paths


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--projects", type=int, default=10)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cpu", action="store_true",
                    help="count CPU seconds (all threads) instead of wall time")
    args = ap.parse_args(argv)
    bench_slop.CPU = args.cpu

    import duckdb

    from toolkit.export import export_parquet
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    with tempfile.TemporaryDirectory(prefix="bench-export-") as td:
        tmp = Path(td)
        paths = make_stores(tmp, args.projects, args.rows)
        floor_out, out = tmp / "floor", tmp / "lake"

        conn = duckdb.connect()
        parts = []
        for i, path in enumerate(paths):
            conn.execute(f"ATTACH '{path}' AS s{i} (READ_ONLY)")
            parts.append(f"SELECT id, ts, tier, category, description, project AS "
                         f"record_project, 'p{i}' AS project FROM s{i}.actions")
        union = " UNION ALL ".join(parts)

        def floor() -> None:
            conn.execute(f"COPY ({union}) TO '{floor_out}' "
                         "(FORMAT parquet, PARTITION_BY (project))")

        base = median(floor, args.reps, lambda: shutil.rmtree(floor_out, ignore_errors=True))
        conn.close()

        stores = [(f"p{i}", Store.open(path, sources=SOURCES, read_only=True))
                  for i, path in enumerate(paths)]
        for name, store in stores:  # each reads its project's actions, as fleet export does
            store.scope_actions(name)
        try:
            full = median(lambda: export_parquet(out, stores), args.reps,
                          lambda: shutil.rmtree(out, ignore_errors=True))
            again = median(lambda: export_parquet(out, stores), args.reps)
        finally:
            for _name, store in stores:
                store.close()

    unit = "CPU s" if args.cpu else "s"
    print(f"{args.projects} projects, {args.rows:,} audit rows; median of {args.reps} runs "
          f"({'CPU' if args.cpu else 'wall'} time)")
    for label, secs, target in (
            ("floor  DuckDB COPY … PARTITION_BY (project)", base, ""),
            ("export export_parquet, empty folder", full, "  (target <= 1.5x)"),
            ("again  export_parquet, nothing changed", again, "")):
        ratio = "" if secs is base else f"  {secs / base:5.2f}x"
        print(f"  {label:<44} {secs:7.3f} {unit}{ratio}{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
