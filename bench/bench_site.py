"""Benchmark: `toolkit build-site` on 5,000 ledger and slop entries, against a floor measured in
the same run.

The floor is a plain `mkdocs build` (same Material theme, `font: false`, same search plugin)
of hand-written Markdown: one page per entry with the same text as the entry page (fields
table, Context / Pattern / Evidence / Related or Description / Cleanup sections) plus as
many short pages as the toolkit writes index pages, and a nav of the same size (index pages
only: a nav entry per entry page would make both builds quadratic).

Measured, each as a subprocess (interpreter start-up and imports included, as a user sees them;
its CPU time and its own peak memory, ``VmHWM`` read by the process at exit: bench/_measure.py):

1. floor: ``python -m mkdocs build`` of the hand-written pages;
2. full: ``toolkit build-site`` from nothing: the site and its build folder (Markdown, chart
   cache) are deleted before the run, as the floor's output folder is (the store is loaded
   beforehand by ``toolkit load``; that load is timed and printed separately);
3. one change: one ledger entry's Pattern gets a new word, then ``toolkit build-site``
   (refresh of the changed source + incremental build), and the search index is checked: every
   page of the full build is still in it, and the new word is found.
   For comparison, plain ``mkdocs build --dirty`` of the floor after one page changed, and the
   number of documents its search index keeps. The one-change build's stages (``--timings``)
   are printed, its median per page of the site (what still grows with the site's size) and
   its median CPU time (the issue's target: under 3 s at 15,000 pages), and where its wall
   time beyond that went: waiting for a CPU (a shared machine's load) or blocked (disk,
   helper processes); bench/_measure.py.

Beside each peak, what the process's resident memory was made of at its largest (sampled):
anonymous memory (heap, stacks) and file-backed pages (the code of the interpreter and the
libraries, DuckDB's among them, which the kernel can drop and read again).

The size of the full build's search index (what every visitor downloads) is printed beside the
floor's, which indexes the same text.

Run: ``python bench/bench_site.py [--entries 5000] [--reps 3]``. Prints the best of ``reps``
for each measure, their ratios, and the median of the per-rep ratios (the machine may be
shared: the best-of and the median say how noisy the run was); no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _measure import measure  # noqa: E402

BUILD_TIME = "2026-05-10T12:00:00"
FILES = ("patterns", "antipatterns", "tool-preferences", "edge-cases", "project-quirks")
CATEGORIES = ("implementation", "testing", "debugging", "specification", "audit")
CONFS = ("low", "medium", "high")
BUCKETS = ("retained_compatibility", "unmigrated_callers", "duplicate_concepts", "naming_drift",
           "stale_docs", "stale_tests", "suspected_dead_code", "unverified_public_behavior",
           "tool_gaps", "accepted_debt")
SEVERITIES = ("critical", "high", "medium", "low", "info")
STATUSES = ("open", "in_progress", "resolved", "accepted", "wont_fix")
WORDS = ["agent", "migration", "schema", "webhook", "retry", "budget", "invoice", "billing",
         "refund", "payment", "cursor", "pagination", "fixture", "flaky", "test", "timeout",
         "provider", "client", "header", "token", "bearer", "legacy", "shim", "caller", "naming",
         "drift", "docs", "stale", "dead", "code", "endpoint", "route", "handler", "queue",
         "outbox", "worker", "deploy", "staging", "config", "rollback", "alembic", "postgres",
         "index", "collision", "dry-run", "apply", "review", "session", "reflect", "ledger",
         "pattern", "antipattern", "evidence", "confidence", "reconcile", "snapshot", "restore",
         "tool", "preference", "edge", "case", "quirk", "rounding", "currency"]


def sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return (" ".join(words)).capitalize() + "."


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng, rng.randint(8, 16)) for _ in range(sentences))


# --------------------------------------------------------------------------- the world

def make_world(base: Path, entries: int) -> tuple[Path, dict[str, str], list[dict[str, str]]]:
    """A project with entries//2 ledger entries and the rest slop entries, a modest audit DB.
    Returns (project root, environment, the entries' texts for the floor pages)."""
    rng = random.Random(7)
    root = base / "project"
    home = base / "home"
    ledger = root / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    texts: list[dict[str, str]] = []
    n_ledger = entries // 2
    per_file: dict[str, list[str]] = {f: [] for f in FILES}
    for i in range(n_ledger):
        f = FILES[i % len(FILES)]
        e = {"title": f"Entry {i:05d}: {sentence(rng, 6)[:-1]}",
             "category": CATEGORIES[i % 5], "confidence": CONFS[i % 3],
             "context": paragraph(rng, 2), "pattern": paragraph(rng, 3),
             "evidence": "\n".join(f"- 2026-04-{d:02d} -- session s{i}-{d}: {sentence(rng, 9)}"
                                   for d in range(1, 4)),
             "related": "None", "kind": "ledger"}
        texts.append(e)
        per_file[f].append(
            f"---\n\n**Title:** {e['title']}\n**Date:** 2026-04-{i % 28 + 1:02d}\n"
            f"**Category:** {e['category']}\n**Confidence:** {e['confidence']}\n"
            f"**Source reflections:** {i % 7 + 1}\n\n**Context:** {e['context']}\n\n"
            f"**Pattern:** {e['pattern']}\n\n**Evidence:**\n{e['evidence']}\n\n"
            f"**Related:** {e['related']}\n\n")
    for f, chunks in per_file.items():
        (ledger / f"{f}.md").write_text(f"# Ledger: {f}\n\n<!-- sorted -->\n\n" + "".join(chunks),
                                        encoding="utf-8")
    slop = []
    for i in range(entries - n_ledger):
        e = {"id": f"{i:08x}-0000-4000-8000-{i:012x}", "bucket": BUCKETS[i % 10],
             "severity": SEVERITIES[i % 5], "confidence": ("certain", "high", "medium",
                                                           "low")[i % 4],
             "owner": ("auto", "team-billing", "jane", "omar")[i % 4],
             "source_links": [f"src/module_{i % 50}.py:{i % 300}",
                              f"https://github.com/example/acme-api/issues/{i}"],
             "title": f"Slop {i:05d}: {sentence(rng, 7)[:-1]}",
             "description": paragraph(rng, 3), "status": STATUSES[i % 5],
             "cleanup_recommendation": paragraph(rng, 1),
             "created_at": f"2026-0{i % 4 + 1}-{i % 28 + 1:02d}T10:00:00+00:00",
             "updated_at": f"2026-0{i % 4 + 1}-{i % 28 + 1:02d}T12:00:00+00:00"}
        slop.append(e)
        texts.append({"title": e["title"], "context": e["description"],
                      "pattern": e["cleanup_recommendation"], "evidence": "\n".join(
                          f"- {s}" for s in e["source_links"]), "related": "", "kind": "slop",
                      "category": e["bucket"], "confidence": e["severity"]})
    slop_path = home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    slop_path.parent.mkdir(parents=True)
    slop_path.write_text(json.dumps({"entries": slop}, indent=2), encoding="utf-8")
    audit = home / ".nagi" / "ledger.db"
    audit.parent.mkdir(parents=True)
    from toolkit.audit_ops import SCHEMA_SQL

    conn = sqlite3.connect(audit)
    conn.executescript(SCHEMA_SQL)
    conn.executemany("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                     "(?, ?, ?, ?, 'acme-api')",
                     [(f"2026-05-{i % 9 + 1:02d} {i % 24:02d}:00:00", i % 3,
                       ("git", "deploy", "tool_failure", "test", "edit")[i % 5],
                       sentence(rng, 10)) for i in range(3000)])
    conn.executemany("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, "
                     "verdict) VALUES (?, ?, 'general-purpose', 'sonnet', ?, ?)",
                     [(f"2026-05-{i % 9 + 1:02d} 10:{i % 60:02d}:00", f"Task {i % 150}: "
                       f"{WORDS[i % len(WORDS)]}", sentence(rng, 12),
                       (None, "CONFIRMED", "REFUTED", "PARTIAL")[i % 4]) for i in range(400)])
    conn.executemany("INSERT INTO approaches (ts, task, approach, outcome, reason) VALUES "
                     "(?, ?, ?, ?, ?)",
                     [(f"2026-05-{i % 9 + 1:02d} 11:00:00", f"Task {i % 150}: "
                       f"{WORDS[i % len(WORDS)]}", sentence(rng, 8),
                       ("DEAD_END", "NO_GO", "WORKS")[i % 3], sentence(rng, 10))
                      for i in range(300)])
    conn.commit()
    conn.close()
    (root / "toolkit.yaml").write_text(f"slop: {slop_path}\naudit_db: {audit}\n"
                                       f"today: '2026-05-10'\n"
                                       # the floor has no notebooks to run: the analyses
                                       # have their own benchmark (bench_analyses.py)
                                       "analyses: false\n", encoding="utf-8")
    env = {**os.environ, "HOME": str(home), "NO_MKDOCS_2_WARNING": "1"}
    env.pop("SOURCE_DATE_EPOCH", None)
    # as installed: Python keeps the modules' bytecode (without it every run compiles the
    # toolkit again, 0.7 s of CPU a one-change build does not spend for a user)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return root, env, texts


def make_floor(base: Path, texts: list[dict[str, str]], extra_pages: int) -> Path:
    """Hand-written Markdown with the same text, one page per entry, plus short pages."""
    floor = base / "floor"
    docs = floor / "docs"
    (docs / "entries").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n\nThe floor site.\n", encoding="utf-8")
    for i, t in enumerate(texts):
        body = (f"---\ntitle: \"{t['title']}\"\n---\n\n| Field | Value |\n|---|---|\n"
                f"| Kind | {t['kind']} |\n| Category | {t['category']} |\n"
                f"| Confidence | {t['confidence']} |\n| Date | 2026-04-01 |\n\n"
                f"## Context\n\n{t['context']}\n\n## Pattern\n\n{t['pattern']}\n\n"
                f"## Evidence\n\n{t['evidence']}\n\n## Related\n\n{t['related'] or 'None'}\n")
        (docs / "entries" / f"e{i:05d}.md").write_text(body, encoding="utf-8")
    nav = ["  - Home: index.md"]
    for j in range(extra_pages):
        (docs / f"index-{j:03d}.md").write_text(f"# Index {j}\n\nA short page.\n",
                                                encoding="utf-8")
        if j < 40:
            nav.append(f"  - Index {j}: index-{j:03d}.md")
    (floor / "mkdocs.yml").write_text(
        "site_name: Floor\ntheme:\n  name: material\n  font: false\nplugins:\n  - search\n"
        "strict: true\nvalidation:\n  nav:\n    omitted_files: ignore\nnav:\n" + "\n".join(nav)
        + "\n", encoding="utf-8")
    return floor


# --------------------------------------------------------------------------- timing

def run(cmd: list[str], cwd: Path, env: dict[str, str], out: list[str] | None = None,
        peak: list[int] | None = None, cpu: list[float] | None = None,
        wait: list[tuple[float, float]] | None = None,
        split: list[tuple[int, int]] | None = None) -> float:
    """Run ``python <cmd>`` (``-m module args``) as a subprocess; its wall time in seconds.
    ``peak`` gets its peak memory in bytes (the process's own ``VmHWM`` at exit: see
    bench/_measure.py; the chart process a build starts is not counted), ``cpu`` its CPU
    seconds (user + system, the helper processes it waited for included: on a shared machine,
    less noisy than wall time); ``wait`` (seconds waiting for a CPU, seconds blocked): where
    its wall time beyond its CPU time went; ``split`` (bytes anonymous, bytes file-backed):
    what its resident memory was made of at its largest (sampled every 20 ms)."""
    got = measure(cmd, cwd=cwd, env=env, split=split is not None)
    if got.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{got.stdout}\n{got.stderr}")
    if out is not None:
        out.append(got.stdout)
    if peak is not None:
        peak.append(got.peak)
    if cpu is not None:
        cpu.append(got.cpu)
    if wait is not None:
        wait.append((got.waited, got.blocked))
    if split is not None:
        split.append((got.anon, got.file))
    return got.wall


def search_locations(site: Path) -> set[str]:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    return {d["location"].split("#")[0] for d in index["docs"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument("--full-only", action="store_true",
                        help="measure the full build and its floor only (no one-change build)")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="bench-site-"))
    toolkit = ["-m", "toolkit"]
    mkdocs = ["-m", "mkdocs"]
    try:
        root, env, texts = make_world(base, args.entries)
        print(f"world: {args.entries} entries ({args.entries // 2} ledger, "
              f"{args.entries - args.entries // 2} slop), 3,000 actions, 400 dispatches, "
              f"300 approaches in {base}")
        load = run([*toolkit, "load"], root, env)
        print(f"toolkit load (not part of the ratios): {load:.1f} s")
        site = root / ".toolkit" / "site"
        # one full build to learn how many pages the site has
        run([*toolkit, "build-site", "--clean", "--build-time", BUILD_TIME], root, env)
        pages = len(list((site.parent / "site.build" / "docs").rglob("*.md")))
        floor = make_floor(base, texts, pages - len(texts) - 1)
        floor_pages = len(list((floor / "docs").rglob("*.md")))
        print(f"site: {pages} pages; floor: {floor_pages} hand-written pages")

        floor_times, full_times, incr_times, dirty_times = [], [], [], []
        floor_peaks: list[int] = []
        full_peaks: list[int] = []
        floor_split: list[tuple[int, int]] = []
        full_split: list[tuple[int, int]] = []
        floor_cpu: list[float] = []
        full_cpu: list[float] = []
        incr_cpu: list[float] = []
        incr_wait: list[tuple[float, float]] = []
        patterns = root / ".smith" / "vault" / "ledger" / "patterns.md"
        for rep in range(args.reps):
            for folder in (floor / "site", site, site.parent / "site.build"):
                shutil.rmtree(folder, ignore_errors=True)
            floor_times.append(run([*mkdocs, "build", "-q"], floor, env, peak=floor_peaks,
                                   cpu=floor_cpu, split=floor_split))
            # its full index, before the --dirty build below rewrites it with one page
            floor_index_bytes = (floor / "site" / "search" / "search_index.json").stat().st_size
            full_times.append(run([*toolkit, "build-site", "--build-time", BUILD_TIME],
                                  root, env, peak=full_peaks, cpu=full_cpu,
                                  split=full_split))
            if args.full_only:
                print(f"rep {rep + 1}: floor {floor_times[-1]:.1f} s "
                      f"({floor_peaks[-1] / 2**20:.0f} MB), full {full_times[-1]:.1f} s "
                      f"({full_peaks[-1] / 2**20:.0f} MB)")
                continue
            full_locations = search_locations(site)
            word = f"zanzibarquux{rep}"
            text = patterns.read_text(encoding="utf-8")
            marker = "**Pattern:** "
            at = text.index(marker) + len(marker)
            patterns.write_text(text[:at] + word + " " + text[at:], encoding="utf-8")
            printed: list[str] = []
            incr_times.append(run([*toolkit, "build-site", "--timings", "--build-time",
                                   BUILD_TIME], root, env, printed, cpu=incr_cpu,
                                  wait=incr_wait))
            stages = [ln for ln in printed[0].splitlines() if ln.startswith("Stages:")]
            locations = search_locations(site)
            index = json.loads((site / "search" / "search_index.json").read_text())
            found = sum(word in d["text"] for d in index["docs"])
            page = floor / "docs" / "entries" / "e00000.md"
            page.write_text(page.read_text(encoding="utf-8") + f"\n{word}\n", encoding="utf-8")
            dirty_times.append(run([*mkdocs, "build", "-q", "--dirty"], floor, env))
            dirty_docs = len(search_locations(floor / "site"))
            print(f"rep {rep + 1}: floor {floor_times[-1]:.1f} s "
                  f"({floor_peaks[-1] / 2**20:.0f} MB), full {full_times[-1]:.1f} s "
                  f"({full_peaks[-1] / 2**20:.0f} MB), "
                  f"one change {incr_times[-1]:.1f} s, {incr_cpu[-1]:.1f} s CPU, "
                  f"{incr_wait[-1][0]:.1f} s waiting for a CPU, {incr_wait[-1][1]:.1f} s "
                  "blocked "
                  f"(search: {len(locations)} of "
                  f"{len(full_locations)} pages, same set: {locations == full_locations}, "
                  f"new word found in {found} entry); floor --dirty {dirty_times[-1]:.1f} s "
                  f"keeps {dirty_docs} of {floor_pages} pages in its search index")
            print("  one change, " + (stages[0] if stages else "Stages: (not printed)"))
        f, full = min(floor_times), min(full_times)
        ratios = sorted(b / a for a, b in zip(floor_times, full_times, strict=True))
        print()
        print("full / floor per rep (each pair run back to back): "
              + ", ".join(f"{r:.2f}" for r in ratios)
              + f"; median {statistics.median(ratios):.2f}")
        print(f"floor (plain mkdocs build, {floor_pages} pages): {f:.1f} s")
        print(f"toolkit build-site, full:            {full:.1f} s  = {full / f:.2f} x floor "
              "(target < 0.7)")
        cpu = sorted(b / a for a, b in zip(floor_cpu, full_cpu, strict=True))
        print(f"CPU time: floor {min(floor_cpu):.1f} s, full {min(full_cpu):.1f} s (best); "
              "full / floor per rep " + ", ".join(f"{r:.2f}" for r in cpu)
              + f"; median {statistics.median(cpu):.2f}")
        mem = sorted(b / a for a, b in zip(floor_peaks, full_peaks, strict=True))
        print(f"peak memory: floor {statistics.median(floor_peaks) / 2**20:.0f} MB, full "
              f"{statistics.median(full_peaks) / 2**20:.0f} MB (medians); full / floor per rep "
              + ", ".join(f"{r:.2f}" for r in mem)
              + f"; median {statistics.median(mem):.2f} (target < 1.5)")
        anon = statistics.median(b[0] / a[0] for a, b in zip(floor_split, full_split,
                                                               strict=True) if a[0])
        print("  at the largest resident size (sampled), median: anonymous memory floor "
              f"{statistics.median(a for a, _ in floor_split) / 2**20:.0f} MB, full "
              f"{statistics.median(a for a, _ in full_split) / 2**20:.0f} MB "
              f"({anon:.2f} x); file-backed pages (library code, which the kernel can drop "
              f"and read again) floor {statistics.median(f for _, f in floor_split) / 2**20:.0f}"
              f" MB, full {statistics.median(f for _, f in full_split) / 2**20:.0f} MB")
        index = site / "search" / "search_index.json"
        print(f"search index: {index.stat().st_size / 1e6:.1f} MB, "
              f"{len(json.loads(index.read_bytes())['docs'])} entries (target < 10 MB at "
              f"15,000 pages); the floor's, of the same text: "
              f"{floor_index_bytes / 1e6:.1f} MB")
        if args.full_only:
            return
        incr = min(incr_times)
        print(f"after one entry changed:              {incr:.1f} s  = {incr / full:.2f} x full "
              "(target < 0.25)")
        one = sorted(b / a for a, b in zip(full_times, incr_times, strict=True))
        dirty = sorted(b / a for a, b in zip(dirty_times, incr_times, strict=True))
        print(f"one change: median {statistics.median(incr_times):.2f} s at {pages} pages "
              f"({statistics.median(incr_times) / pages * 1000:.2f} ms per page of the site); "
              f"median {statistics.median(one):.3f} x full, {statistics.median(dirty):.2f} x "
              "plain mkdocs --dirty of the floor (which keeps only the changed page in search)")
        print(f"one change, CPU time: median {statistics.median(incr_cpu):.2f} s (target: "
              "under 3 s at 15,000 pages); the wall above it: median "
              f"{statistics.median(w for w, _ in incr_wait):.2f} s waiting for a CPU (the "
              f"machine's load), {statistics.median(b for _, b in incr_wait):.2f} s blocked")
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
