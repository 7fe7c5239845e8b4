"""Benchmark: promote one entry in a 10,000-entry ledger, against a floor measured in the same run.

The floor is what any safe rewrite of that one file costs: read it, SHA-256 it, write it once
atomically (temp file in the same folder, fsync, rename, fsync of the folder). The promote goes
through the library (``toolkit.ledger_ops.promote``): flock, the ``.meta.json`` lock, reading
the five files, finding the entry by title, the byte edit, the verified backup, the checked
atomic write, ``meta.yaml`` and ``.meta.json`` counts.

Run: ``python bench/bench_editor.py [--entries 10000] [--reps 7]``. Prints medians (wall time,
and CPU time, which a busy machine disturbs less); no assertions.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()

    from toolkit import ledger_ops

    with tempfile.TemporaryDirectory(prefix="bench-editor-") as tmp:
        vault = make_vault(Path(tmp), args.entries)
        patterns = vault / "ledger" / "patterns.md"
        size = patterns.stat().st_size
        floors, promotes, floor_cpu, promote_cpu = [], [], [], []
        for rep in range(args.reps):
            wall, cpu = floor_once(patterns)
            floors.append(wall)
            floor_cpu.append(cpu)
            # A different low entry each time (so every promote changes the file), spread from
            # the start to the end of the file.
            i = int((rep + 0.5) * args.entries / args.reps) // 3 * 3
            title = f"Pattern {i:05d}:"
            t0, c0 = time.perf_counter(), time.process_time()
            ledger_ops.promote(vault, title, today=dt.date(2026, 5, 10))
            promotes.append(time.perf_counter() - t0)
            promote_cpu.append(time.process_time() - c0)
            shutil.rmtree(vault / "ledger" / ".backups", ignore_errors=True)
        floor = statistics.median(floors)
        promote = statistics.median(promotes)
        print(f"ledger: {args.entries} entries, patterns.md {size / 1e6:.1f} MB, "
              f"{args.reps} repetitions (medians)")
        print(f"floor (read + sha256 + one atomic write): {floor * 1000:.1f} ms")
        print(f"promote one entry: {promote * 1000:.1f} ms")
        print(f"promote: {promote / floor:.2f}x of floor (floor {floor * 1000:.0f} ms)")
        fc, pc = statistics.median(floor_cpu), statistics.median(promote_cpu)
        print(f"promote CPU time: {pc / fc:.2f}x of floor's (floor {fc * 1000:.1f} ms, promote "
              f"{pc * 1000:.1f} ms; steadier than wall time on a shared machine, but blind "
              f"to fsync waits)")


if __name__ == "__main__":
    main()
