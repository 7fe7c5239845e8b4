"""Benchmark the CodeSmith slop ledger at 500 / 5,000 / 20,000 entries, against a floor measured
in the same run.

The floor is ``json.loads`` of the same bytes: the least any reader of the file pays. Each
figure is the median of ``--reps`` runs, printed as a ratio against the floor's median:

* read: ``read_slop`` (size limit, UTF-8 decode, nesting pre-scan, strict JSON, CodeSmith's
  loader rules, one entry with its line per element) (target: <= 3x at 20,000 entries);
* query: read + ``slop_ops.query`` with a text search, as ``toolkit slop query`` does;
* append: ``slop_ops.append`` of one entry (lock, read, loader check, splice, check of the
  result, backup, atomic write);
* update: ``slop_ops.update`` of one entry's status (same steps).

Then each slop command as a user runs it (a subprocess, interpreter start-up included) on the
largest ledger: the summary, query, export, append, update, repair; printed in seconds
(target: < 1 s each) and against ``python -c`` reading and ``json.loads``-ing the file.

Run: ``python bench/bench_slop.py [--sizes 500,5000,20000] [--reps 5] [--cpu]``. ``--cpu``
counts CPU seconds (this process's, or the command's) instead of wall time: steadier on a
shared, busy machine. No assertions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUCKETS = ("retained_compatibility", "unmigrated_callers", "duplicate_concepts", "naming_drift",
           "stale_docs", "stale_tests", "suspected_dead_code", "unverified_public_behavior",
           "tool_gaps", "accepted_debt")
SEVERITIES = ("critical", "high", "medium", "low", "info")
CONFIDENCES = ("certain", "high", "medium", "low")
STATUSES = ("open", "in_progress", "resolved", "accepted", "wont_fix")
NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def make_entry(i: int) -> dict[str, Any]:
    """One entry as CodeSmith writes it (field order, optional fields absent), with what real
    ones hold: multi-line descriptions, quotes, code, non-ASCII text, links."""
    stamp = f"2026-{1 + i % 5:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:07.123456789+00:00"
    e: dict[str, Any] = {"id": f"{i:08x}-5c1e-4b2a-9d3f-{(i * 7919) % 16**12:012x}",
                         "bucket": BUCKETS[i % len(BUCKETS)],
                         "severity": SEVERITIES[i % len(SEVERITIES)],
                         "confidence": CONFIDENCES[i % len(CONFIDENCES)]}
    if i % 3 == 0:
        e["owner"] = ("auto", "billing-team", "jane")[i % 9 // 3]
    if i % 2 == 0:
        e["source_links"] = [f"crates/billing/src/charge_{i % 97}.rs:{10 + i % 400}",
                             "docs/migration.md#charge-v2"]
    e["title"] = f"Compatibility shim `charge_v1()` still on the billing path ({i})"
    e["description"] = (f"The wrapper forwards to charge_v2 but keeps the old \"retry\" flag.\n"
                        f"Callers left: {i % 5 + 1} crates — remove once they migrate.\n"
                        f"Seen while fixing task {i}.")
    e["status"] = STATUSES[i % len(STATUSES)]
    if i % 4 == 0:
        e["cleanup_recommendation"] = "Delete the wrapper after the next release."
    e["created_at"] = stamp
    e["updated_at"] = stamp
    if i % 5 == 0:
        e["task_id"] = f"task-{i}"
    return e


def make_ledger(n: int) -> bytes:
    """``serde_json::to_string_pretty`` of ``{"entries": [...]}`` (2-space indent)."""
    return json.dumps({"entries": [make_entry(i) for i in range(n)]}, indent=2,
                      ensure_ascii=False).encode("utf-8")


CPU = False  # --cpu: CPU seconds of this process and its children, not wall time


def clock() -> float:
    if not CPU:
        return time.perf_counter()
    me, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def median(fn: Callable[[], object], reps: int, reset: Callable[[], None] | None = None
           ) -> float:
    times = []
    for _ in range(reps):
        if reset is not None:
            reset()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def bench_library(tmp: Path, n: int, reps: int) -> None:
    from toolkit import slop_ops
    from toolkit.sources.slop import read_slop

    path = tmp / f"ledger-{n}" / "slop_ledger.json"
    path.parent.mkdir()
    data = make_ledger(n)
    path.write_bytes(data)

    def reset() -> None:
        path.write_bytes(data)
        shutil.rmtree(path.parent / ".backups", ignore_errors=True)

    floor = median(lambda: json.loads(data), reps)
    read = median(lambda: read_slop(path), reps)
    flt = slop_ops.SlopFilter(search="task 4242", limit=50)
    query = median(lambda: slop_ops.query(read_slop(path).entries, flt), reps)
    new = [slop_ops.NewEntry(bucket="stale_docs", severity="low", confidence="high",
                             title="README still shows the v1 flags",
                             description="Update the usage section.")]
    append = median(lambda: slop_ops.append(path, new, now=NOW), reps, reset)
    target = make_entry(n // 2)["id"][:13]
    update = median(lambda: slop_ops.update(path, target, "accepted", now=NOW), reps, reset)
    reset()
    print(f"{n:>7,} entries ({len(data) / 1e6:5.1f} MB), floor json.loads {floor * 1000:6.1f} ms:"
          f"  read {read / floor:4.2f}x  query {query / floor:4.2f}x"
          f"  append {append / floor:4.2f}x  update {update / floor:4.2f}x"
          f"  ({read * 1000:.0f} / {query * 1000:.0f} / {append * 1000:.0f} / "
          f"{update * 1000:.0f} ms)")


def bench_commands(tmp: Path, n: int, reps: int) -> None:
    work = tmp / "cli"
    ledger = work / "codesmith" / "slop_ledger" / "slop_ledger.json"
    ledger.parent.mkdir(parents=True)
    data = make_ledger(n)
    ledger.write_bytes(data)
    env = {**os.environ, "HOME": str(work / "home"), "CODESMITH_HOME": str(work / "codesmith"),
           "SOURCE_DATE_EPOCH": "1780000000", "NO_COLOR": "1"}
    for name in ("TOOLKIT_MAX_FILE_MB", "SMITH_VAULT", "NAGI_LEDGER_DB"):
        env.pop(name, None)

    def run(*args: str) -> Callable[[], None]:
        def go() -> None:
            subprocess.run(args, cwd=work, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        return go

    def reset() -> None:
        ledger.write_bytes(data)
        shutil.rmtree(ledger.parent / ".backups", ignore_errors=True)

    toolkit = (sys.executable, "-m", "toolkit")
    floor = median(run(sys.executable, "-c", "import json, sys; "
                       "json.loads(open(sys.argv[1], 'rb').read())", str(ledger)), reps)
    target = make_entry(n // 2)["id"][:13]
    commands = [
        ("slop (summary)", (*toolkit, "slop",)),
        ("slop query --search", (*toolkit, "slop", "query", "--search", "task 4242")),
        ("slop query --limit 0 --json", (*toolkit, "slop", "query", "--limit", "0", "--json")),
        ("slop export", (*toolkit, "slop", "export")),
        ("slop append", (*toolkit, "slop", "append", "--bucket", "stale_docs", "--severity",
                                   "low", "--confidence", "high", "--title", "README flags",
                                   "--description", "Update the usage section.")),
        ("slop update", (*toolkit, "slop", "update", target, "--status", "accepted")),
        ("slop repair", (*toolkit, "slop", "repair")),
    ]
    print(f"\ncommands on {n:,} entries ({len(data) / 1e6:.1f} MB), "
          f"floor `python -c` + json.loads {floor * 1000:.0f} ms (target < 1 s each):")
    for label, args in commands:
        took = median(run(*args), reps, reset)
        print(f"  {label:<28} {took:5.2f} s  {took / floor:4.2f}x")
    reset()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="500,5000,20000",
                    help="comma-separated entry counts (default 500,5000,20000)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpu", action="store_true", help="count CPU seconds, not wall time")
    args = ap.parse_args()
    global CPU
    CPU = args.cpu
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-slop-") as tmp:
        print(f"slop ledger, medians of {args.reps} runs ({'CPU' if CPU else 'wall'} time), "
              "each against json.loads of the same bytes")
        for n in sizes:
            bench_library(Path(tmp), n, args.reps)
        bench_commands(Path(tmp), max(sizes), args.reps)


if __name__ == "__main__":
    main()
