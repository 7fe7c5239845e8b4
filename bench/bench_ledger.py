"""Benchmark: the Smith Ledger reader and the read-only ledger commands, against floors measured
in the same run.

* **Parse rate** (10,000 entries): ``parse_ledger_bytes`` of one ledger file, in entries per
  second of CPU time, against a regex scan of the same bytes for the entries' title lines
  (the least any reader that finds the entries must do).
* **Commands** (50,000 entries): ``toolkit load`` into a new store (which parses the ledger
  and keeps the parses beside the store), then ``toolkit ledger search`` (one title),
  ``ledger show`` and ``ledger list --json`` (which answer from those parses), each a real
  process, against a process that only starts Python and reads the ledger's bytes. Wall
  time, the child's CPU time (user + system: steadier on a shared machine) and its peak
  memory. The processes run an installed toolkit: bytecode is cached (in a temporary
  folder, even when ``PYTHONDONTWRITEBYTECODE`` is set) and a first run warms it.
* **Load memory**: the peak of ``load`` against its target, twice the ledger's bytes on disk
  plus the interpreter (a process that starts Python and imports what ``load`` runs on: the
  toolkit's command line, DuckDB and Arrow); also against the same with the interpreter that
  has opened and migrated a new empty store (DuckDB's first connection and statements add
  about 35 MB of its own code and catalog to the process before any row is loaded).

The load average is printed with the figures: on a busy machine a process waits for a core,
and its wall time is its CPU time and that wait.

Run: ``python bench/bench_ledger.py [--parse-entries 10000] [--entries 50000] [--reps 3]``.
Prints medians; no assertions.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_editor import make_vault  # noqa: E402  (the same realistic Form B entries)

TITLE = re.compile(rb"^\*\*Title:\*\* (.*)$", re.MULTILINE)

# Runs one command in this process and writes its CPU time and peak memory to a file, so each
# process's figures are its own (RUSAGE_CHILDREN keeps the maximum of all children, and Linux
# carries ru_maxrss over exec from the forked parent; /proc's VmHWM starts afresh).
RUNNER = """
import os, resource, runpy, sys
out = sys.argv.pop(1)
def report():
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/status") as fh:
        hwm = [line.split()[1] for line in fh if line.startswith("VmHWM:")][0]
    with open(out, "w") as fh:
        fh.write(f"{r.ru_utime + r.ru_stime} {hwm}")
try:
    if sys.argv[1] == "--read":
        open(sys.argv[2], "rb").read()
    elif sys.argv[1] == "--imports":
        import duckdb, pyarrow, toolkit.cli, toolkit.loaders  # noqa
    elif sys.argv[1] == "--store":
        import duckdb, pyarrow, toolkit.cli, toolkit.loaders  # noqa
        from toolkit.store import Store
        Store.open(sys.argv[2], sources=toolkit.loaders.SOURCES).close()
    else:
        sys.argv[0] = "toolkit"
        runpy.run_module("toolkit", run_name="__main__")
finally:
    report()
"""


def parse_rate(entries: int, reps: int) -> None:
    from toolkit.sources.smith import parse_ledger_bytes

    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as tmp:
        vault = make_vault(Path(tmp), entries)
        data = (vault / "ledger" / "patterns.md").read_bytes()
    parses, scans = [], []
    for _ in range(reps):
        t0 = time.process_time()
        n = sum(1 for _ in TITLE.finditer(data))
        scans.append(time.process_time() - t0)
        t0 = time.process_time()
        lf = parse_ledger_bytes(data, "patterns.md", "patterns")
        parses.append(time.process_time() - t0)
    assert n == len(lf.entries) == entries
    parse, scan = statistics.median(parses), statistics.median(scans)
    print(f"parse: {entries} entries, {len(data) / 1e6:.1f} MB, {reps} repetitions "
          f"(medians, CPU time)")
    print(f"floor (regex scan for the title lines): {entries / scan:,.0f} entries/s")
    print(f"parse_ledger_bytes: {entries / parse:,.0f} entries/s "
          f"({parse / scan:.2f}x of floor)")


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS MB) of one process running ``toolkit <args>``."""
    with tempfile.NamedTemporaryFile(prefix="bench-ledger-", suffix=".txt") as fh:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", RUNNER, fh.name, *args], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(f"toolkit {' '.join(args)}: exit {proc.returncode}\n"
                             + proc.stderr.decode("utf-8", "replace"))
        cpu, rss = Path(fh.name).read_text().split()
    return wall, float(cpu), int(rss) // 1024


def commands(entries: int, reps: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as tmp:
        root = Path(tmp)
        vault = make_vault(root, entries)
        patterns = vault / "ledger" / "patterns.md"
        env = {**os.environ, "PYTHONPATH": str(HERE.parent), "HOME": str(root),
               "XDG_CACHE_HOME": str(root / "cache"), "TOOLKIT_MAX_FILE_MB": "200",
               "PYTHONPYCACHEPREFIX": str(root / "pycache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        base = ["--project", str(root)]
        i = entries // 2
        cases = {
            "floor (start Python, read the bytes)": ["--read", str(patterns)],
            "interpreter (start Python, import the toolkit, DuckDB, Arrow)": ["--imports"],
            "interpreter and a new empty store (open and migrate it)":
                ["--store", str(root / "empty.duckdb")],
            "load (a new store)": [*base, "load"],
            "ledger search (one title)": [*base, "ledger", "search", f"Pattern {i:05d}:"],
            "ledger show": [*base, "ledger", "show", f"Pattern {i:05d}:"],
            "ledger list --json": [*base, "ledger", "list", "--json"],
        }
        results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cases}
        run([*base, "ledger", "show", "Pattern 00000:"], env)  # compiles the bytecode
        shutil.rmtree(root / ".toolkit", ignore_errors=True)
        for _ in range(reps):
            shutil.rmtree(root / ".toolkit", ignore_errors=True)
            (root / "empty.duckdb").unlink(missing_ok=True)
            for name, args in cases.items():
                results[name].append(run(args, env))
        print(f"commands: {entries} entries, patterns.md {patterns.stat().st_size / 1e6:.1f} MB "
              f"({patterns.stat().st_size / 2**20:.0f} MiB), "
              f"{reps} repetitions (medians)")
        floor = [statistics.median(r[k] for r in results[next(iter(cases))]) for k in range(3)]
        medians = {}
        for name, rows in results.items():
            wall, cpu, rss = medians[name] = tuple(statistics.median(r[k] for r in rows)
                                                   for k in range(3))
            ratio = "" if name.startswith(("floor", "interpreter")) else \
                f"  ({wall / floor[0]:.1f}x wall, {cpu / floor[1]:.1f}x CPU of floor)"
            print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB peak{ratio}")
        ledger_mb = sum(f.stat().st_size for f in (vault / "ledger").glob("*.md")) / 2**20
        interpreter = medians[next(k for k in cases if k.startswith("interpreter"))][2]
        target = 2 * ledger_mb + interpreter
        load_peak = medians["load (a new store)"][2]
        print(f"load memory: peak {load_peak:.0f} MB; target 2 x {ledger_mb:.0f} MB of ledger "
              f"+ {interpreter:.0f} MB interpreter = {target:.0f} MB "
              f"({load_peak / target:.2f}x of target)")
        with_store = medians[next(k for k in cases if k.endswith("(open and migrate it)"))][2]
        print(f"  with an open empty store as the interpreter ({with_store:.0f} MB): target "
              f"{2 * ledger_mb + with_store:.0f} MB "
              f"({load_peak / (2 * ledger_mb + with_store):.2f}x of target)")
        print("load average (1, 5, 15 min): " + ", ".join(f"{x:.1f}" for x in os.getloadavg())
              + f" on {os.cpu_count()} cores")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parse-entries", type=int, default=10_000)
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    parse_rate(args.parse_entries, max(args.reps, 5))
    commands(args.entries, args.reps)


if __name__ == "__main__":
    main()
