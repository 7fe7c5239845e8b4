"""Properties of ledger_search and ledger_similar_tasks on random audit DBs written through
the toolkit's writers (seeded, so every run checks the same DBs).

For each DB the answers must be stable (asked twice, the same rows), page cleanly (limit and
offset cut one ordered list), and be exactly the rows the specification selects, in its
order: search keeps rows scoring above 0 and orders them by score, then newest ts, then
actions, dispatches, approaches by id; similar keeps rows scoring at least min_score and
orders them by rounded score, then dispatches before approaches, each by id.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from toolkit import audit_ops

VOCAB = ["fix", "Bug", "42", "export", "port", "report", "webhook", "retries", "jitter",
         "Build", "YouTube-to-Markdown", "intake", "PoC", "the", "大規模ログ", "調査", "請求書",
         "PR", "#42", "(billing)", "smoke-task", "Deep-read", "café", "!!", "--", "v1.2",
         "x_y", "ÜBER", "a"]
KIND_RANK = {"actions": 0, "dispatches": 1, "approaches": 2}
SEEDS = range(12)


def _phrase(rng: random.Random, most: int = 5) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, most)))


def _random_db(rng: random.Random, db: Path) -> None:
    """Rows written by the toolkit's writers, then given timestamps from a small set (so that
    equal timestamps, the tie-break case, are common)."""
    dispatches: list[int] = []
    for _ in range(rng.randint(8, 30)):
        pick = rng.random()
        if pick < 0.3:
            audit_ops.log_action(db, rng.randint(0, 2), _phrase(rng, 2), _phrase(rng),
                                 rng.choice([None, _phrase(rng, 2)]))
        elif pick < 0.6:
            task = rng.choice([_phrase(rng), "Cap webhook retries at 5 attempts"])
            dispatches.append(audit_ops.log_dispatch(db, task, "fork", "opus",
                                                     _phrase(rng))["id"])
        elif pick < 0.75 and dispatches:
            audit_ops.log_verdict(db, rng.choice(dispatches),
                                  rng.choice(["CONFIRMED", "REFUTED", "PARTIAL"]),
                                  rng.choice([None, _phrase(rng)]))
        else:
            audit_ops.log_approach(db, _phrase(rng), _phrase(rng),
                                   rng.choice(["DEAD_END", "NO_GO", "WORKS"]), _phrase(rng))
    stamps = [f"2026-05-0{rng.randint(1, 3)} 0{rng.randint(0, 9)}:00:00" for _ in range(4)]
    conn = sqlite3.connect(db)
    for table in KIND_RANK:
        for (rid,) in conn.execute(f"SELECT id FROM {table}").fetchall():
            conn.execute(f"UPDATE {table} SET ts = ? WHERE id = ?", (rng.choice(stamps), rid))
    conn.commit()
    conn.close()


def _db_rows(db: Path) -> list[dict[str, Any]]:
    """Every row as the specification sees it, read with plain sqlite3."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    out: list[dict[str, Any]] = []
    try:
        for r in conn.execute("SELECT * FROM actions"):
            out.append({"id": r["id"], "kind": "actions", "ts": r["ts"],
                        "title": r["description"], "status": r["tier"],
                        "fields": (r["description"], r["category"], r["project"])})
        for r in conn.execute("SELECT * FROM dispatches"):
            out.append({"id": r["id"], "kind": "dispatches", "ts": r["ts"], "title": r["task"],
                        "status": r["verdict"] or "PENDING", "task": r["task"],
                        "verdict": r["verdict"],
                        "fields": (r["task"], r["brief_summary"], r["verdict_notes"])})
        for r in conn.execute("SELECT * FROM approaches"):
            out.append({"id": r["id"], "kind": "approaches", "ts": r["ts"],
                        "title": f"{r['task']}: {r['approach']}", "status": r["outcome"],
                        "task": r["task"], "verdict": r["outcome"],
                        "fields": (r["task"], r["approach"], r["reason"])})
    finally:
        conn.close()
    return out


def _expected_search(rows: list[dict[str, Any]], query: str, kinds: list[str] | None
                     ) -> list[dict[str, Any]]:
    units = audit_ops.token_set(query)
    hits = []
    for r in rows:
        if kinds and r["kind"] not in kinds:
            continue
        score = sum(audit_ops.match_score(units, f) for f in r["fields"])
        if score > 0:
            hits.append((score, r))
    # one sort on the whole key: score down, ts down, kind order, id up
    hits.sort(key=lambda h: (-h[0], _desc(h[1]["ts"]), KIND_RANK[h[1]["kind"]], h[1]["id"]))
    return [{k: r[k] for k in ("id", "kind", "ts", "title", "status")} for _, r in hits]


def _desc(ts: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in ts)


def _expected_similar(rows: list[dict[str, Any]], task: str, min_score: float
                      ) -> list[dict[str, Any]]:
    hits = []
    for r in rows:
        if r["kind"] == "actions":
            continue
        score = audit_ops.similarity(task, r["task"])
        if score >= min_score:
            hits.append({"kind": r["kind"], "id": r["id"], "task": r["task"],
                         "score": round(score, 4), "ts": r["ts"], "verdict": r["verdict"]})
    hits.sort(key=lambda h: (-h["score"], KIND_RANK[h["kind"]], h["id"]))
    return hits


@pytest.mark.parametrize("seed", SEEDS)
def test_search_and_similar_are_stable_and_ordered_as_specified(seed, tmp_path, isolated_env):
    from toolkit.config import resolve

    rng = random.Random(seed)
    db = tmp_path / "ledger.db"
    _random_db(rng, db)
    rows = _db_rows(db)
    cfg = resolve(project=tmp_path, env={"HOME": str(tmp_path)}, audit_db=str(db),
                  db=str(tmp_path / "store.duckdb"))
    store = audit_ops.open_audit_store(cfg)
    try:
        for _ in range(8):
            query = _phrase(rng, 3)
            kinds = rng.choice([None, ["actions"], ["approaches", "dispatches"]])
            full = audit_ops.search(store, query, kinds, limit=1000)
            assert full == _expected_search(rows, query, kinds), query
            assert audit_ops.search(store, query, kinds, limit=1000) == full  # stable
            size = rng.randint(1, 4)
            pages = [audit_ops.search(store, query, kinds, limit=size, offset=o)
                     for o in range(0, len(full) + size, size)]
            assert [r for page in pages for r in page] == full

            task = rng.choice([_phrase(rng, 4), rng.choice(rows)["title"] if rows else "x"])
            min_score = rng.choice([0.35, 0.2, 0.0])
            expected = _expected_similar(rows, task, min_score)
            got = audit_ops.similar_tasks(store, task, limit=1000, min_score=min_score)
            assert got == expected, task
            assert audit_ops.similar_tasks(store, task, limit=1000, min_score=min_score) == got
            assert audit_ops.similar_tasks(store, task, limit=3, min_score=min_score) == got[:3]
    finally:
        store.close()
