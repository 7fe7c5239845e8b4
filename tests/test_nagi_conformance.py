"""nagi-ledger's own test cases (tests/test_search.py, tests/test_ledger.py of
watasisaikou/nagi-ledger), written anew against the toolkit: the writers write the audit DB,
the readers answer through the store, and each case's facts carry over unchanged.

Like nagi-ledger's tests, rows are stamped with SQLite's ``datetime('now')`` and the windows
reach back from the clock; every expectation holds whatever the date is.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit import audit_ops
from toolkit.errors import NotFoundError, UsageError


class Ledger:
    """One audit DB: the toolkit's writers on it, its readers through a fresh store."""

    def __init__(self, root: Path) -> None:
        from toolkit.config import resolve

        self.db = root / "nagi" / "ledger.db"
        self.cfg = resolve(project=root, env={"HOME": str(root)}, audit_db=str(self.db),
                           db=str(root / "store.duckdb"))

    # writers: nagi-ledger's ledger.log_* return values
    def log_action(self, *args: Any) -> int:
        return int(audit_ops.log_action(self.db, *args)["id"])

    def log_dispatch(self, *args: Any) -> tuple[int, int]:
        out = audit_ops.log_dispatch(self.db, *args)
        return out["id"], out["retry_count"]

    def log_verdict(self, *args: Any) -> str:
        return str(audit_ops.log_verdict(self.db, *args)["task"])

    def log_approach(self, *args: Any) -> int:
        return int(audit_ops.log_approach(self.db, *args)["id"])

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        conn = sqlite3.connect(self.db)
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute(statement, params).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()

    # readers
    def _read(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        store = audit_ops.open_audit_store(self.cfg, missing_ok=True)
        try:
            return fn(store, *args, **kwargs)
        finally:
            store.close()

    def search(self, query: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return self._read(audit_ops.search, query, **kwargs)  # type: ignore[no-any-return]

    def similar_tasks(self, task: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return self._read(audit_ops.similar_tasks, task, **kwargs)  # type: ignore[no-any-return]

    def task_status(self, task: Any) -> dict[str, Any]:
        return self._read(audit_ops.task_status, task)  # type: ignore[no-any-return]

    def stats(self, days: Any = 7) -> dict[str, Any]:
        return self._read(audit_ops.stats, days)  # type: ignore[no-any-return]


@pytest.fixture()
def ledger(tmp_path: Path, isolated_env: Path) -> Iterator[Ledger]:
    yield Ledger(tmp_path)


# --------------------------------------------------------------------------- search

def test_search_finds_action_by_description(ledger):
    ledger.log_action(1, "refactor", "cleaned up server.py", "nagi-ledger")
    results = ledger.search("cleaned server")
    assert [(r["kind"], r["title"]) for r in results] == [("actions", "cleaned up server.py")]


def test_search_finds_dispatch_by_task(ledger):
    ledger.log_dispatch("fix-bug-42", "fork", "sonnet", "investigate the bug")
    results = ledger.search("fix bug")
    assert [(r["kind"], r["title"]) for r in results] == [("dispatches", "fix-bug-42")]


def test_search_finds_approach_by_task(ledger):
    ledger.log_approach("flaky-test-fix", "add sleep(1)", "DEAD_END", "still flaky")
    results = ledger.search("flaky test")
    assert [(r["kind"], r["title"]) for r in results] == [
        ("approaches", "flaky-test-fix: add sleep(1)")]


def test_search_returns_index_rows_only_no_body_text(ledger):
    ledger.log_dispatch("secret-task", "fork", "sonnet", "SENSITIVE_BODY_TEXT_MUST_NOT_LEAK")
    ledger.log_approach("secret-task-2", "some approach", "DEAD_END",
                        "SECRET_REASON_MUST_NOT_LEAK")
    results = ledger.search("secret")
    assert len(results) >= 2
    for row in results:
        assert set(row) == {"id", "kind", "ts", "title", "status"}
        for value in row.values():
            assert "MUST_NOT_LEAK" not in str(value)


def test_search_japanese_query_matches(ledger):
    ledger.log_dispatch("大規模ログ2(5MB)のgrep+サンプリング調査", "fork", "sonnet", "log audit")
    results = ledger.search("大規模ログのサンプリング調査")
    assert [r["title"] for r in results] == ["大規模ログ2(5MB)のgrep+サンプリング調査"]


def test_search_kinds_filter(ledger):
    ledger.log_action(0, "cat", "widget audit report")
    ledger.log_dispatch("widget audit task", "fork", "sonnet", "s")
    assert {r["kind"] for r in ledger.search("widget audit")} == {"actions", "dispatches"}
    assert {r["kind"] for r in ledger.search("widget audit", kinds=["actions"])} == {"actions"}


def test_search_rejects_unknown_kind(ledger):
    with pytest.raises(UsageError, match=r"^Invalid kinds \['bogus'\]: must be a subset of "):
        ledger.search("query", kinds=["bogus"])


def test_search_limit(ledger):
    for i in range(5):
        ledger.log_action(0, "cat", f"widget report {i}")
    assert len(ledger.search("widget", limit=2)) == 2


def test_search_offset(ledger):
    for i in range(5):
        ledger.log_action(0, "cat", f"widget report {i}")
    page1 = {r["id"] for r in ledger.search("widget", limit=2, offset=0)}
    page2 = {r["id"] for r in ledger.search("widget", limit=2, offset=2)}
    assert len(page1) == len(page2) == 2 and page1.isdisjoint(page2)


def test_search_since_days_excludes_old_entries(ledger):
    ledger.log_action(0, "cat", "fresh widget report")
    ledger.sql("INSERT INTO actions (ts, tier, category, description, project) "
               "VALUES (datetime('now', '-30 days'), 0, 'old', 'ancient widget report', NULL)")
    assert [r["title"] for r in ledger.search("widget", since_days=7)] == ["fresh widget report"]
    assert len(ledger.search("widget")) == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"query": ""}, "'query' must be a non-empty string."),
    ({"query": "q", "limit": 0}, "'limit' must be a positive integer."),
    ({"query": "q", "offset": -1}, "'offset' must be non-negative."),
    ({"query": "q", "since_days": 0}, "'since_days' must be a positive number."),
])
def test_search_rejects_bad_arguments(ledger, kwargs, message):
    ledger.log_action(0, "cat", "q")
    query = kwargs.pop("query")
    with pytest.raises(UsageError) as exc:
        ledger.search(query, **kwargs)
    assert exc.value.message == message


def test_search_no_matches_returns_empty(ledger):
    ledger.log_action(0, "cat", "totally unrelated content")
    assert ledger.search("zzz nonexistent xyz") == []


# --------------------------------------------------------------------------- similar_tasks

def test_similar_tasks_catches_real_youtube_duplicate(ledger):
    """nagi-ledger's production incident: the same work dispatched 50s apart under two
    wordings, which the exact-match retry count missed."""
    ledger.log_dispatch("Build the YouTube knowledge intake PoC", "nagi-implementer", "sonnet",
                        "PoC for YouTube transcript ingest")
    ledger.log_dispatch("Build accounts domain and fake provider", "fork", "sonnet", "s")
    ledger.log_dispatch("Build the tana CLI", "fork", "sonnet", "s")
    results = ledger.similar_tasks("Build YouTube-to-Markdown intake PoC")
    assert [(r["kind"], r["task"], r["score"]) for r in results] == [
        ("dispatches", "Build the YouTube knowledge intake PoC", 0.4444)]


def test_similar_tasks_no_false_positive_for_unrelated_task(ledger):
    ledger.log_dispatch("Build the YouTube knowledge intake PoC", "fork", "sonnet", "s")
    ledger.log_dispatch("Fix flaky test in dispatch_guard", "fork", "sonnet", "s")
    ledger.log_approach("Investigate memory leak in session_brief", "profile with tracemalloc",
                        "WORKS", "found it")
    assert ledger.similar_tasks("Refactor the invoicing export CSV writer") == []


def test_similar_tasks_matches_approaches_table_too(ledger):
    ledger.log_approach("Build the YouTube knowledge intake PoC", "used yt-dlp", "WORKS",
                        "worked fine")
    results = ledger.similar_tasks("Build YouTube-to-Markdown intake PoC")
    assert [(r["kind"], r["verdict"]) for r in results] == [("approaches", "WORKS")]


def test_similar_tasks_sorted_by_score_desc(ledger):
    ledger.log_dispatch("Build the YouTube knowledge intake PoC", "fork", "sonnet", "s")
    ledger.log_dispatch("Build YouTube to Markdown PoC intake", "fork", "sonnet", "s")
    results = ledger.similar_tasks("Build YouTube-to-Markdown intake PoC")
    assert [r["id"] for r in results] == [2, 1]
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def test_similar_tasks_respects_limit(ledger):
    for i in range(10):
        ledger.log_dispatch(f"Build YouTube intake PoC variant {i}", "fork", "sonnet", "s")
    results = ledger.similar_tasks("Build YouTube intake PoC variant X", limit=3,
                                   min_score=0.1)
    assert [r["id"] for r in results] == [1, 2, 3]  # equal scores keep dispatch id order


def test_similar_tasks_orders_by_the_rounded_score(ledger):
    """nagi-ledger sorts on the score it returns (rounded to 4 places), so two rows whose
    scores differ only past the 4th place keep their id order."""
    first = "mu   beta  epsilon  delta iota   zeta   theta alpha   eta  lambda   gamma kappa"
    second = "kappa   iota  alpha   beta   zeta  mu  theta   epsilon   gamma delta   eta   lambda"
    ledger.log_dispatch(first, "fork", "sonnet", "s")
    ledger.log_dispatch(second, "fork", "sonnet", "s")
    query = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    assert audit_ops.similarity(query, first) < audit_ops.similarity(query, second)
    assert [(r["id"], r["score"]) for r in ledger.similar_tasks(query)] == [
        (1, 0.4966), (2, 0.4966)]


def test_similar_tasks_verdict_field_reflects_kind(ledger):
    d_id, _ = ledger.log_dispatch("Build the YouTube knowledge intake PoC", "fork", "sonnet",
                                  "s")
    assert ledger.similar_tasks("Build YouTube-to-Markdown intake PoC")[0]["verdict"] is None
    ledger.log_verdict(d_id, "CONFIRMED")
    match = next(r for r in ledger.similar_tasks("Build YouTube-to-Markdown intake PoC")
                 if r["kind"] == "dispatches")
    assert match["verdict"] == "CONFIRMED"


def test_similar_tasks_rejects_empty_task_and_bad_limit(ledger):
    with pytest.raises(UsageError, match=re.escape("'task' must be a non-empty string.")):
        ledger.similar_tasks("")
    with pytest.raises(UsageError, match=re.escape("'limit' must be a positive integer.")):
        ledger.similar_tasks("task", limit=0)


def test_similar_tasks_empty_db_returns_empty(ledger):
    assert ledger.similar_tasks("anything") == []


# --------------------------------------------------------------------------- writers

def test_log_action_success_and_optional_project(ledger):
    action_id = ledger.log_action(1, "refactor", "cleaned up server.py", "nagi-ledger")
    assert action_id == 1
    assert tuple(ledger.sql("SELECT tier, category, description, project FROM actions "
                            "WHERE id = 1")[0]) == (1, "refactor", "cleaned up server.py",
                                                    "nagi-ledger")
    assert ledger.sql("SELECT project FROM actions WHERE id = ?",
                      (ledger.log_action(0, "note", "just a note"),))[0][0] is None


@pytest.mark.parametrize("bad_tier", [-1, 3, 99, None, "1"])
def test_log_action_rejects_bad_tier(ledger, bad_tier):
    with pytest.raises(UsageError, match=r"^Invalid tier .*: must be one of \(0, 1, 2\)"):
        ledger.log_action(bad_tier, "cat", "desc")
    assert not ledger.db.exists()  # nothing written, not even the DB


@pytest.mark.parametrize("category, description, field", [
    ("   ", "desc", "category"), ("cat", "", "description")])
def test_log_action_rejects_empty_fields(ledger, category, description, field):
    with pytest.raises(UsageError, match=f"^'{field}' must be a non-empty string.$"):
        ledger.log_action(1, category, description)


def test_log_dispatch_retry_count(ledger):
    assert [ledger.log_dispatch("fix-bug-42", "fork", "sonnet", f"attempt {i}")[1]
            for i in range(3)] == [0, 1, 2]
    assert ledger.log_dispatch("task-a", "fork", "sonnet", "a")[1] == 0
    assert ledger.log_dispatch("task-b", "fork", "sonnet", "b")[1] == 0


@pytest.mark.parametrize("args, field", [
    (("", "fork", "sonnet", "summary"), "task"),
    (("task", "", "sonnet", "summary"), "agent_type"),
    (("task", "fork", "", "summary"), "model"),
    (("task", "fork", "sonnet", ""), "brief_summary"),
])
def test_log_dispatch_rejects_empty_fields(ledger, args, field):
    with pytest.raises(UsageError, match=f"^'{field}' must be a non-empty string.$"):
        ledger.log_dispatch(*args)


def test_log_verdict_attaches_and_returns_task(ledger):
    d_id, _ = ledger.log_dispatch("task-x", "fork", "sonnet", "summary")
    assert ledger.log_verdict(d_id, "CONFIRMED", "looks good") == "task-x"
    row = ledger.sql("SELECT verdict, verdict_notes, verdict_ts FROM dispatches")[0]
    assert (row["verdict"], row["verdict_notes"]) == ("CONFIRMED", "looks good")
    assert row["verdict_ts"] is not None
    d2, _ = ledger.log_dispatch("task-z", "fork", "sonnet", "summary")
    ledger.log_verdict(d2, "REFUTED")
    assert tuple(ledger.sql("SELECT verdict, verdict_notes FROM dispatches WHERE id = ?",
                            (d2,))[0]) == ("REFUTED", None)


def test_log_verdict_errors(ledger):
    d_id, _ = ledger.log_dispatch("task-y", "fork", "sonnet", "summary")
    with pytest.raises(NotFoundError, match=r"^No dispatch found with id=99999\. "):
        ledger.log_verdict(99999, "CONFIRMED")
    with pytest.raises(UsageError, match=r"^Invalid verdict 'MAYBE'"):
        ledger.log_verdict(d_id, "MAYBE")


# --------------------------------------------------------------------------- task_status

def test_task_status_no_dispatches(ledger):
    assert ledger.task_status("never-dispatched") == {
        "dispatch_count": 0, "retry_count": 0, "last_verdict": None,
        "over_retry_limit": False}


def test_task_status_tracks_retry_and_verdict(ledger):
    d1, _ = ledger.log_dispatch("budget-task", "fork", "sonnet", "attempt 1")
    status = ledger.task_status("budget-task")
    assert (status["dispatch_count"], status["retry_count"], status["over_retry_limit"]) == \
        (1, 0, False)
    ledger.log_verdict(d1, "REFUTED")
    assert ledger.task_status("budget-task")["last_verdict"] == "REFUTED"


def test_task_status_over_retry_limit_flips_at_two(ledger):
    seen = []
    for i in range(4):
        ledger.log_dispatch("retry-task", "fork", "sonnet", f"attempt {i + 1}")
        status = ledger.task_status("retry-task")
        seen.append((status["retry_count"], status["over_retry_limit"]))
    assert seen == [(0, False), (1, False), (2, True), (3, True)]


def test_task_status_last_verdict_is_most_recent(ledger):
    d1, _ = ledger.log_dispatch("multi-task", "fork", "sonnet", "attempt 1")
    d2, _ = ledger.log_dispatch("multi-task", "fork", "sonnet", "attempt 2")
    ledger.log_verdict(d1, "REFUTED")
    ledger.log_verdict(d2, "CONFIRMED")
    assert ledger.task_status("multi-task")["last_verdict"] == "CONFIRMED"


# --------------------------------------------------------------------------- stats

EMPTY_VERDICTS = {"CONFIRMED": 0, "REFUTED": 0, "PARTIAL": 0, "PENDING": 0}


def test_stats_empty(ledger):
    ledger.log_action(0, "x", "y")
    ledger.sql("DELETE FROM actions")
    assert ledger.stats(7) == {"actions_by_tier": {"0": 0, "1": 0, "2": 0},
                               "actions_by_category": {}, "dispatch_count": 0,
                               "verdicts": EMPTY_VERDICTS}


def test_stats_counts_actions_by_tier_and_category(ledger):
    for tier, cat, desc in ((0, "cat1", "a"), (1, "cat1", "b"), (1, "cat2", "c"),
                            (2, "cat2", "d")):
        ledger.log_action(tier, cat, desc)
    result = ledger.stats(7)
    assert result["actions_by_tier"] == {"0": 1, "1": 2, "2": 1}
    assert result["actions_by_category"] == {"cat1": 2, "cat2": 2}


def test_stats_counts_dispatches_and_verdicts(ledger):
    d1, _ = ledger.log_dispatch("t1", "fork", "sonnet", "s")
    d2, _ = ledger.log_dispatch("t2", "fork", "sonnet", "s")
    ledger.log_dispatch("t3", "fork", "sonnet", "s")
    ledger.log_verdict(d1, "CONFIRMED")
    ledger.log_verdict(d2, "REFUTED")
    result = ledger.stats(7)
    assert result["dispatch_count"] == 3
    assert result["verdicts"] == {**EMPTY_VERDICTS, "CONFIRMED": 1, "REFUTED": 1,
                                  "PENDING": 1}


def test_stats_excludes_entries_outside_window(ledger):
    ledger.log_action(0, "x", "y")
    ledger.sql("DELETE FROM actions")
    ledger.sql("INSERT INTO actions (ts, tier, category, description, project) "
               "VALUES (datetime('now', '-30 days'), 0, 'old', 'ancient', NULL)")
    assert ledger.stats(7)["actions_by_category"] == {}
    assert ledger.stats(31)["actions_by_category"] == {"old": 1}


def test_stats_rejects_nonpositive_days(ledger):
    with pytest.raises(UsageError, match=r"^'days' must be a positive number\.$"):
        ledger.stats(0)


# --- timestamps as written ---------------------------------------------------------------
# nagi-ledger's readers never parse ``ts``: ledger.py's check_approaches, search and
# similar_tasks return the column's text as stored, search orders by that text (Python's str
# order), and every window (session_report, stats, search's since_days) is SQLite's TEXT
# comparison ``ts >= datetime('now', ?)``. A row written by hand, or by another tool, with a
# timestamp in another shape is answered as that text, compared as that text.

def _odd_ts_rows(ledger: Ledger) -> None:
    ledger.log_action(0, "fresh", "widget fresh")  # creates the DB with nagi's schema
    ledger.sql("INSERT INTO actions (ts, tier, category, description) VALUES "
               "('yesterday', 1, 'words', 'widget worded'), "            # 'y' > '2': in
               "(' ' || datetime('now', '-1 hours'), 2, 'spaced', 'widget spaced'), "  # ' ' < '2'
               "('', 0, 'blank', 'widget blank')")                        # '' < anything
    ledger.sql("INSERT INTO approaches (ts, task, approach, outcome, reason) VALUES "
               "('2026-12-01', 'odd task', 'date only', 'DEAD_END', 'r'), "
               "('2026-12-03T00:37:13Z', 'odd task', 'iso', 'NO_GO', 'r'), "
               "('1796266819', 'odd task', 'epoch', 'WORKS', 'r')")
    ledger.sql("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary) VALUES "
               "('2026-12-03 05:00:00', 'odd task', 'fork', 'opus', 'b'), "
               "('2026-12-03T00:00:00', 'odd task', 'fork', 'opus', 'b')")


def test_approaches_and_similar_tasks_return_ts_as_stored(ledger):
    _odd_ts_rows(ledger)
    got = ledger._read(audit_ops.check_approaches, "odd task")
    assert [(i["approach"], i["ts"]) for i in got["dead_ends"] + got["no_gos"] + got["works"]
            ] == [("date only", "2026-12-01"), ("iso", "2026-12-03T00:37:13Z"),
                  ("epoch", "1796266819")]
    assert [(r["kind"], r["id"], r["ts"]) for r in ledger.similar_tasks("odd task")] == [
        ("dispatches", 1, "2026-12-03 05:00:00"), ("dispatches", 2, "2026-12-03T00:00:00"),
        ("approaches", 1, "2026-12-01"), ("approaches", 2, "2026-12-03T00:37:13Z"),
        ("approaches", 3, "1796266819")]


def test_search_orders_equal_scores_by_the_ts_text(ledger):
    # ledger.search: scored.sort(key=ts, reverse=True) on the text: 'T' (0x54) sorts after
    # ' ' (0x20), so "2026-12-03T00:00:00" is "newer" than "2026-12-03 05:00:00"
    _odd_ts_rows(ledger)
    assert [(r["kind"], r["id"], r["ts"]) for r in ledger.search("odd", kinds=["dispatches"])
            ] == [("dispatches", 2, "2026-12-03T00:00:00"),
                  ("dispatches", 1, "2026-12-03 05:00:00")]


def test_windows_compare_the_ts_text(ledger):
    # stats / session_report / search(since_days): ts >= datetime('now', '-N ...') as TEXT
    _odd_ts_rows(ledger)
    ledger.sql("DELETE FROM dispatches")  # their fixed dates would leave the window some day
    assert ledger.stats(1)["actions_by_category"] == {"fresh": 1, "words": 1}
    assert ledger.stats(1)["actions_by_tier"] == {"0": 1, "1": 1, "2": 0}
    assert {r["title"] for r in ledger.search("widget", since_days=1)} == {
        "widget fresh", "widget worded"}
    assert ledger._read(audit_ops.session_report, 1) == (
        "## 自律実行リスト (last 1h)\n\n### fresh\n- [Tier 0] widget fresh\n\n"
        "### words\n- [Tier 1] widget worded\n\n## Dispatches\n(no dispatches)")


def test_text_that_is_not_utf8_fails_only_what_reads_it(ledger):
    # nagi-ledger reads with Python's sqlite3: a value that is not UTF-8 fails a query only
    # when the query returns it ("Could not decode to UTF-8 column ..."). task_status reads
    # dispatches.verdict, check_approaches the task's approaches, stats tier/category/verdict:
    # they answer. (session_report and search, which read the description, fail there; the
    # toolkit answers them with U+FFFD: docs/guide/differences.md.)
    ledger.log_action(1, "git", "good row", "p")
    ledger.log_dispatch("task a", "fork", "opus", "b")
    ledger.log_approach("task a", "ap", "DEAD_END", "r")
    ledger.sql("INSERT INTO actions (tier, category, description) "
               "VALUES (0, 'git', CAST(x'6261640aff' AS TEXT))")
    ledger.sql("INSERT INTO dispatches (task, agent_type, model, brief_summary) "
               "VALUES ('task a', 'fork', 'opus', CAST(x'ff' AS TEXT))")
    assert ledger.task_status("task a") == {"dispatch_count": 2, "retry_count": 1,
                                            "last_verdict": None, "over_retry_limit": False}
    assert ledger.stats(7) == {"actions_by_tier": {"0": 1, "1": 1, "2": 0},
                               "actions_by_category": {"git": 2}, "dispatch_count": 2,
                               "verdicts": {**EMPTY_VERDICTS, "PENDING": 2}}
    approaches = ledger._read(audit_ops.check_approaches, "task a")
    assert [(a["approach"], a["reason"]) for a in approaches["dead_ends"]] == [("ap", "r")]
    assert [r["title"] for r in ledger.search("bad")] == ["bad\n\ufffd"]


def test_a_blob_in_a_text_column_is_read_as_its_text(ledger):
    # nagi-ledger reads a BLOB (written by hand) as bytes: stats keys such a category by its
    # bytes, after the text ones (SQLite orders BLOB after TEXT), and session_report and
    # search fail (TypeError: bytes met str). The toolkit reads it as its text, among the
    # others, and every tool answers (docs/guide/differences.md).
    ledger.log_action(1, "zeta", "text row")
    ledger.sql("INSERT INTO actions (tier, category, description) "
               "VALUES (0, CAST('alpha' AS BLOB), CAST('blob cat' AS BLOB))")
    assert list(ledger.stats(7)["actions_by_category"].items()) == [("alpha", 1), ("zeta", 1)]
    assert [r["title"] for r in ledger.search("blob")] == ["blob cat"]
    assert "### alpha\n- [Tier 0] blob cat" in ledger._read(audit_ops.session_report, 24)
