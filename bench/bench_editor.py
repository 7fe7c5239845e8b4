"""Benchmark: promote one entry in a 10,000-entry ledger, against a floor measured in the same run.

The floor is what any safe rewrite of that one file costs: read it, SHA-256 it, write it once
atomically (temp file in the same folder, fsync, rename, fsync of the folder). The promote goes
through the library (``toolkit.ledger_ops.promote``): flock, the ``.meta.json`` lock, reading
the five files, finding the entry by title, the byte edit, the verified backup, the checked
atomic write, ``meta.yaml`` and ``.meta.json`` counts.

Both are measured the same way, in the same process: one untimed run of each first (imports,
the helper threads, the page cache), then ``--reps`` pairs, the floor and the promote back to
back, in alternating order (the floor first in one pair, the promote first in the next), each
timed in wall time and in CPU time (user + system, every thread of the process). The ratio is
the median of the pairs' own ratios: each pair's two runs see about the same load, so a busy
spell that slows one pair does not move the others' ratios (a ratio of two medians taken
over the whole run mixes the floor of a quiet moment with the promote of a busy one). The
ratio of the medians is printed too.

Run: ``python bench/bench_editor.py [--entries 10000] [--reps 15]``. No assertions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFS = ("low", "medium", "high")


def make_entry(i: int) -> str:
    """One realistic Form B entry (reflect writer): inline code and non-ASCII text, as real
    ones have."""
    return (
        f"---\n\n**Title:** Pattern {i:05d}: retry the webhook sender with a bounded budget\n"
        f"**Date:** 2026-04-{i % 28 + 1:02d}\n"
        f"**Category:** {('implementation', 'testing', 'debugging')[i % 3]}\n"
        f"**Confidence:** {CONFS[i % 3]}\n"
        f"**Source reflections:** {i % 7 + 1}\n\n"
        f"**Context:** Billing service tasks that touch the webhook sender (case {i}).\n\n"
        f"**Pattern:** Cap retries at five attempts in `send_webhook()` and log the last error "
        f"— never loop forever on a 5xx. Seen in session {i}.\n\n"
        f"**Evidence:**\n- 2026-04-01 -- session jane-doe_86e0b9_2026-04-01_0900{i % 60:02d}: "
        f"capped retries, queue drained\n"
        f"- 2026-04-02 — reconcile merge: absorbed \"Retry budget {i}\"\n\n"
        f"**Related:** None\n\n")


def make_vault(root: Path, entries: int) -> Path:
    vault = root / ".smith" / "vault"
    ledger = vault / "ledger"
    ledger.mkdir(parents=True)
    head = ("# Ledger: Patterns\n\nApproaches that worked well, extracted from completed "
            "workflows.\n\n<!-- Entries are sorted: high confidence first, then medium, then "
            "low. Within same confidence, most recent first. -->\n\n")
    (ledger / "patterns.md").write_text(head + "".join(make_entry(i) for i in range(entries)),
                                        encoding="utf-8")
    for kind, title in (("antipatterns", "Antipatterns"), ("tool-preferences", "Tool Preferences"),
                        ("edge-cases", "Edge Cases"), ("project-quirks", "Project Quirks")):
        (ledger / f"{kind}.md").write_text(f"# Ledger: {title}\n\n<!-- sorted -->\n",
                                           encoding="utf-8")
    by_conf = {c: sum(1 for i in range(entries) if CONFS[i % 3] == c) for c in CONFS}
    (ledger / "meta.yaml").write_text(
        "last_updated: 2026-05-02\ntotal_reflections: 9\nentries:\n"
        f"  patterns: {entries}\n  antipatterns: 0\n  tool_preferences: 0\n  edge_cases: 0\n"
        "  project_quirks: 0\nconfidence_distribution:\n"
        f"  high: {by_conf['high']}\n  medium: {by_conf['medium']}\n  low: {by_conf['low']}\n",
        encoding="utf-8")
    (ledger / ".meta.json").write_text(
        '{\n  "schema_version": 1,\n  "last_reconcile": null,\n  "estimated_tokens": 0,\n'
        f'  "total_patterns": {entries},\n  "total_reinforcements": 0,\n'
        '  "context_budget_violations": 0,\n  "reinforcements_since_reconcile": 0,\n'
        '  "lock": null\n}\n', encoding="utf-8")
    return vault


def floor_once(path: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the floor."""
    from toolkit.safewrite import atomic_replace

    t0, c0 = time.perf_counter(), time.process_time()
    data = path.read_bytes()
    hashlib.sha256(data).hexdigest()
    atomic_replace(path, data)
    return time.perf_counter() - t0, time.process_time() - c0


def promote_once(vault: Path, title: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one promote through the library."""
    from toolkit import ledger_ops

    t0, c0 = time.perf_counter(), time.process_time()
    ledger_ops.promote(vault, title, today=dt.date(2026, 5, 10))
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-editor-") as tmp:
        vault = make_vault(Path(tmp), args.entries)
        patterns = vault / "ledger" / "patterns.md"
        size = patterns.stat().st_size
        # untimed: the first run of each imports its modules and starts its helper threads
        # (a medium entry: the reps promote low ones)
        floor_once(patterns)
        promote_once(vault, f"Pattern {1 if args.entries > 1 else 0:05d}:")
        shutil.rmtree(vault / "ledger" / ".backups", ignore_errors=True)
        floors, promotes, floor_cpu, promote_cpu = [], [], [], []
        for rep in range(args.reps):
            # A different low entry each time (so every promote changes the file), spread from
            # the start to the end of the file.
            i = int((rep + 0.5) * args.entries / args.reps) // 3 * 3
            title = f"Pattern {i:05d}:"
            if rep % 2:
                pw, pc = promote_once(vault, title)
                fw, fc = floor_once(patterns)
            else:
                fw, fc = floor_once(patterns)
                pw, pc = promote_once(vault, title)
            floors.append(fw)
            floor_cpu.append(fc)
            promotes.append(pw)
            promote_cpu.append(pc)
            shutil.rmtree(vault / "ledger" / ".backups", ignore_errors=True)
        med = statistics.median
        floor, promote = med(floors), med(promotes)
        ratios = [p / f for p, f in zip(promotes, floors, strict=True)]
        ratio = med(ratios)
        q1, _, q3 = (statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1
                     else (ratio,) * 3)
        print(f"ledger: {args.entries} entries, patterns.md {size / 1e6:.1f} MB, "
              f"{args.reps} pairs after one untimed run of each (medians)")
        print(f"floor (read + sha256 + one atomic write): {floor * 1000:.1f} ms")
        print(f"promote one entry: {promote * 1000:.1f} ms")
        print(f"promote: {ratio:.2f}x of floor (median of the pairs' ratios, middle half "
              f"{q1:.2f}-{q3:.2f}x; ratio of the medians {promote / floor:.2f}x)")
        fc, pc = med(floor_cpu), med(promote_cpu)
        cpu_ratio = med(p / f for p, f in zip(promote_cpu, floor_cpu, strict=True))
        print(f"promote CPU time: {cpu_ratio:.2f}x of floor's (median of the pairs' ratios; "
              f"floor {fc * 1000:.1f} ms, promote {pc * 1000:.1f} ms; steadier than wall time "
              f"on a shared machine, but blind to fsync waits)")


if __name__ == "__main__":
    main()
