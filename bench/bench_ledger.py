"""Benchmark: the Smith Ledger reader and the read-only ledger commands, against floors measured
in the same run.

* **Parse rate** (10,000 entries): ``parse_ledger_bytes`` of one ledger file, in entries per
  second of CPU time, against a regex scan of the same bytes for the entries' title lines
  (the least any reader that finds the entries must do).
* **One big entry** (40,000 matching lines in one Evidence): ``ledger search``, in-process,
  against a regex scan of the file for the same words (it grew quadratically once).
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
  about 35 MB of its own code and catalog to the process before any row is loaded). One more
  load shows which stage holds the peak: the store's opening, each source, the ledger's parse,
  the batches of rows inserted, the commits (``bench/_stages.py``).

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
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _measure import measure  # noqa: E402
from _stages import load_stages  # noqa: E402
from bench_editor import make_vault  # noqa: E402  (the same realistic Form B entries)

TITLE = re.compile(rb"^\*\*Title:\*\* (.*)$", re.MULTILINE)

# What the cases besides the toolkit's commands run (bench/_measure.py runs each in a process of
# its own and reads that process's own CPU time and peak memory).
READ = "import sys; open(sys.argv[1], 'rb').read()"
IMPORTS = "import duckdb, pyarrow, toolkit.cli, toolkit.loaders"
STORE = IMPORTS + ("\nimport sys\nfrom toolkit.store import Store\n"
                   "Store.open(sys.argv[1], sources=toolkit.loaders.SOURCES).close()")


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


def one_big_entry(lines: int, reps: int) -> None:
    """``ledger search`` of one entry whose Evidence holds ``lines`` matching lines (a shape
    the uniform ledgers never have: each shown line was once looked up in a list of the
    matches, quadratic), in-process, against a regex scan of the same bytes for the words."""
    from toolkit.ledger_ops import search

    with tempfile.TemporaryDirectory(prefix="bench-ledger-big-") as tmp:
        vault = Path(tmp) / ".smith" / "vault"
        (vault / "ledger").mkdir(parents=True)
        evidence = "\n".join(f"- 2026-08-01 -- session s{i}: evidence line {i}"
                             for i in range(lines))
        path = vault / "ledger" / "patterns.md"
        path.write_text("# Ledger: Patterns\n\n---\n\n**Title:** Big one\n**Date:** "
                        "2026-11-01\n**Category:** implementation\n**Confidence:** high\n\n"
                        f"**Context:** c\n\n**Pattern:** p\n\n**Evidence:**\n{evidence}\n",
                        encoding="utf-8")
        words = re.compile(rb"(?i)evidence line")
        scans, searches = [], []
        for _ in range(reps):
            t0 = time.process_time()
            found = sum(1 for _ in words.finditer(path.read_bytes()))
            scans.append(time.process_time() - t0)
            t0 = time.process_time()
            hits = search(vault, "evidence line", log=False)
            searches.append(time.process_time() - t0)
        assert found == sum(m for _, _, m in hits[0].lines) == lines
    scan, took = statistics.median(scans), statistics.median(searches)
    print(f"search of one entry with {lines:,} matching lines: {took:.2f} s CPU "
          f"({took / scan:.0f}x of a regex scan of the file, {scan * 1000:.0f} ms)")


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, int, float, float]:
    """(wall s, CPU s, peak RSS MB, and at the largest resident size sampled its anonymous and
    its file-backed MB) of one process running ``toolkit <args>`` (or, for args starting with
    ``-c``, that code)."""
    argv = args if args[0] == "-c" else ["-m", "toolkit", *args]
    got = measure(argv, env=env, split=True)
    if got.returncode:
        raise SystemExit(f"{' '.join(args)}: exit {got.returncode}\n{got.stderr}")
    return got.wall, got.cpu, got.peak // 2**20, got.anon / 2**20, got.file / 2**20


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
            "floor (start Python, read the bytes)": ["-c", READ, str(patterns)],
            "interpreter (start Python, import the toolkit, DuckDB, Arrow)": ["-c", IMPORTS],
            "interpreter and a new empty store (open and migrate it)":
                ["-c", STORE, str(root / "empty.duckdb")],
            "load (a new store)": [*base, "load"],
            "ledger search (one title)": [*base, "ledger", "search", f"Pattern {i:05d}:"],
            "ledger show": [*base, "ledger", "show", f"Pattern {i:05d}:"],
            "ledger list --json": [*base, "ledger", "list", "--json"],
        }
        results: dict[str, list[tuple[float, float, int, float, float]]] = {
            k: [] for k in cases}
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
            medians[name] = tuple(statistics.median(r[k] for r in rows) for k in range(5))
            wall, cpu, rss = medians[name][:3]
            ratio = "" if name.startswith(("floor", "interpreter")) else \
                f"  ({wall / floor[0]:.1f}x wall, {cpu / floor[1]:.1f}x CPU of floor)"
            print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB peak{ratio}")
        ledger_mb = sum(f.stat().st_size for f in (vault / "ledger").glob("*.md")) / 2**20
        interpreter_case = next(k for k in cases if k.startswith("interpreter"))
        interpreter = medians[interpreter_case][2]
        target = 2 * ledger_mb + interpreter
        load_peak = medians["load (a new store)"][2]
        print(f"load memory: peak {load_peak:.0f} MB; target 2 x {ledger_mb:.0f} MB of ledger "
              f"+ {interpreter:.0f} MB interpreter = {target:.0f} MB "
              f"({load_peak / target:.2f}x of target)")
        with_store = medians[next(k for k in cases if k.endswith("(open and migrate it)"))][2]
        print(f"  with an open empty store as the interpreter ({with_store:.0f} MB): target "
              f"{2 * ledger_mb + with_store:.0f} MB "
              f"({load_peak / (2 * ledger_mb + with_store):.2f}x of target)")
        load_anon, load_file = medians["load (a new store)"][3:]
        interp_anon, interp_file = medians[interpreter_case][3:]
        print(f"  at the largest resident size (sampled), median: the load's anonymous memory "
              f"{load_anon:.0f} MB, file-backed pages (library code, which the kernel can drop "
              f"and read again) {load_file:.0f} MB; the interpreter's {interp_anon:.0f} and "
              f"{interp_file:.0f} MB; in anonymous memory, target 2 x {ledger_mb:.0f} MB + "
              f"{interp_anon:.0f} MB = {2 * ledger_mb + interp_anon:.0f} MB "
              f"({load_anon / (2 * ledger_mb + interp_anon):.2f}x of target)")
        shutil.rmtree(root / ".toolkit", ignore_errors=True)
        hwm, stages = load_stages([*base, "load"], env, root / "stages.json")
        print(f"load peak by stage (one more load, resident memory sampled every 2 ms; VmHWM "
              f"{hwm / 2**20:.0f} MB): " + ", ".join(f"{name} {peak / 2**20:.0f}"
                                                    for name, peak in stages.items()))
        print("load average (1, 5, 15 min): " + ", ".join(f"{x:.1f}" for x in os.getloadavg())
              + f" on {os.cpu_count()} cores")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parse-entries", type=int, default=10_000)
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    parse_rate(args.parse_entries, max(args.reps, 5))
    one_big_entry(40_000, args.reps)
    commands(args.entries, args.reps)


if __name__ == "__main__":
    main()
