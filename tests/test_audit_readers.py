"""`toolkit audit` readers: nagi-ledger's shapes and Markdown, time windows with an injected
now, search, similarity, and FAULTS.md C1-C6 as the audit commands meet them.

The tests that only read the audit DB share one project per module (``shared_project``); a
test that inserts rows or damages the DB builds its own (``project``)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests._audit_helpers import (  # noqa: F401 - autouse fixture
    NOW,
    LockHolder,
    _no_injected_now,
    file_state,
    insert,
    last_error,
    rollback_journal_db,
    write_export,
)
from tests.conftest import FixtureProject, make_audit_db


def _json(result) -> object:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _export_in_settings(project: FixtureProject, tmp_path: Path,
                        **tables: list[dict[str, object]]) -> None:
    """The project's audit source from now on: a nagi-ledger JSON export holding ``tables``
    (the others empty), read as when there is no audit DB."""
    export = write_export(tmp_path / "export.json", **tables)
    (project.root / "toolkit.yaml").write_text(
        f"audit_db: {tmp_path / 'none.db'}\naudit_json: {export}\n", encoding="utf-8")


# --------------------------------------------------------------------------- report

REPORT_24H = """\
## 自律実行リスト (last 24h)

### deploy
- [Tier 2] Pushed staging config change enabling webhook retries (acme-api)

### git
- [Tier 1] Rebased feature branch onto origin/main after upstream hotfix (acme-api)

### tool_failure
- [Tier 0] Bash: exit code 1: pytest collected 0 items

## Dispatches
- Cap webhook retries at 5 attempts → general-purpose/inherit → PARTIAL
- Cap webhook retries at 5 attempts → general-purpose/sonnet → CONFIRMED
- Audit logging for admin endpoints → fork/opus → PENDING"""


def test_report_is_nagi_ledgers_markdown(cli_run, shared_project):
    result = cli_run("audit", "report", "--now", NOW)
    assert result.exit_code == 0, result.output
    assert result.stdout == REPORT_24H + "\n"
    assert _json(cli_run("audit", "report", "--now", NOW, "--json")) == REPORT_24H


def test_report_window_counts_hours_back_from_now(cli_run, project):
    # 06:00-12:00 holds one dispatch and no action
    assert _json(cli_run("audit", "report", "--since-hours", "6", "--now", NOW, "--json")) == (
        "## 自律実行リスト (last 6h)\n\n(no actions)\n\n## Dispatches\n"
        "- Audit logging for admin endpoints → fork/opus → PENDING")
    # like nagi-ledger, the window only has a start: N hours before now
    insert(project.audit_db, "actions", ts="2026-05-05 10:00:00", tier=1, category="git",
           description="Tagged v2", project=None)
    assert _json(cli_run("audit", "report", "--since-hours", "3",
                         "--now", "2026-05-05 12:00:00", "--json")) == (
        "## 自律実行リスト (last 3h)\n\n### git\n- [Tier 1] Tagged v2\n\n"
        "## Dispatches\n(no dispatches)")
    result = cli_run("audit", "report", "--now", "2026-05-10 00:00:00")
    assert result.stdout == "No entries in the last 24h.\n"


def test_an_injected_now_also_ends_the_window(cli_run, shared_project):
    assert _json(cli_run("audit", "report", "--since-hours", "1",
                         "--now", "2026-05-04 05:20:00", "--json")) == (
        "## 自律実行リスト (last 1h)\n\n"
        "### git\n"
        "- [Tier 1] Rebased feature branch onto origin/main after upstream hotfix (acme-api)\n\n"
        "### tool_failure\n- [Tier 0] Bash: exit code 1: pytest collected 0 items\n\n"
        "## Dispatches\n"
        "- Cap webhook retries at 5 attempts → general-purpose/inherit → PARTIAL")
    stats = _json(cli_run("audit", "stats", "--now", "2026-05-04 05:20:00", "--json"))
    assert stats["dispatch_count"] == 1 and stats["actions_by_tier"] == {"0": 1, "1": 1, "2": 0}
    hits = _json(cli_run("audit", "search", "webhook", "--since-days", "1",
                         "--now", "2026-05-04 05:35:00", "--json"))
    assert [(h["kind"], h["id"]) for h in hits] == [("dispatches", 2), ("approaches", 1),
                                                     ("dispatches", 1)]


def test_now_comes_from_toolkit_now_and_accepts_iso_with_offset(cli_run, shared_project,
                                                                monkeypatch):
    monkeypatch.setenv("TOOLKIT_NOW", "2026-05-04T14:00:00+02:00")  # = 12:00 UTC
    assert _json(cli_run("audit", "report", "--json")) == REPORT_24H
    # (the second is past year 9999 in UTC: "a number is too large", naming nothing)
    for when in ("yesterday", "9999-12-31T23:00:00-05:00"):
        result = cli_run("audit", "report", "--now", when)
        assert result.exit_code == 2
        assert last_error(result) == (f"Error: --now: {when!r} is not a date-time; use "
                                      "'YYYY-MM-DD HH:MM:SS' (UTC)")


@pytest.mark.parametrize("args, error", [
    (["report", "--since-hours", "0"], "Error: 'since_hours' must be a positive number."),
    (["stats", "--days", "-3"], "Error: 'days' must be a positive number."),
    (["task-status", "  "], "Error: 'task' must be a non-empty string."),
    (["approaches", ""], "Error: 'task' must be a non-empty string."),
    (["search", " "], "Error: 'query' must be a non-empty string."),
    (["search", "x", "--kind", "bogus", "--kind", "actions", "--kind", "zzz"],
     ("Error: Invalid kinds ['bogus', 'zzz']: must be a subset of ('actions', 'dispatches', "
      "'approaches').")),
    (["search", "x", "--limit", "0"], "Error: 'limit' must be a positive integer."),
    (["search", "x", "--offset", "-1"], "Error: 'offset' must be non-negative."),
    (["search", "x", "--since-days", "0"], "Error: 'since_days' must be a positive number."),
    (["similar", "x", "--limit", "0"], "Error: 'limit' must be a positive integer."),
])
def test_reader_arguments_are_validated(cli_run, shared_project, args, error):
    result = cli_run("audit", *args)
    assert result.exit_code == 2
    assert last_error(result) == error


# --------------------------------------------------------------------------- stats, status

def test_stats_shape_and_window(cli_run, shared_project):
    assert _json(cli_run("audit", "stats", "--now", NOW, "--json")) == {
        "actions_by_tier": {"0": 1, "1": 1, "2": 1},
        "actions_by_category": {"deploy": 1, "git": 1, "tool_failure": 1},
        "dispatch_count": 3,
        "verdicts": {"CONFIRMED": 1, "REFUTED": 0, "PARTIAL": 1, "PENDING": 1}}
    assert _json(cli_run("audit", "stats", "--days", "7", "--now", "2026-06-01 00:00:00",
                         "--json")) == {
        "actions_by_tier": {"0": 0, "1": 0, "2": 0}, "actions_by_category": {},
        "dispatch_count": 0,
        "verdicts": {"CONFIRMED": 0, "REFUTED": 0, "PARTIAL": 0, "PENDING": 0}}


def test_stats_table(cli_run, shared_project):
    out = cli_run("audit", "stats", "--now", NOW).stdout
    assert out.splitlines()[:7] == ["Last 7 days", "", "tier           actions",
                                    "-------------- -------", "0 info         1",
                                    "1 notable      1", "2 high-impact  1"]
    assert "Dispatches: 3" in out
    assert "PENDING    1" in out


def test_task_status_counts_retries_and_flags_the_limit(cli_run, project):
    task = "Cap webhook retries at 5 attempts"
    assert _json(cli_run("audit", "task-status", task, "--json")) == {
        "dispatch_count": 2, "retry_count": 1, "last_verdict": "CONFIRMED",
        "over_retry_limit": False}
    insert(project.audit_db, "dispatches", ts="2026-05-04 07:00:00", task=task,
           agent_type="fork", model="opus", brief_summary="third")
    assert _json(cli_run("audit", "task-status", task, "--json")) == {
        "dispatch_count": 3, "retry_count": 2, "last_verdict": None, "over_retry_limit": True}
    assert cli_run("audit", "task-status", task).stdout.splitlines() == [
        f"Task:             {task}", "Dispatches:       3", "Retries:          2",
        "Last verdict:     PENDING", "Over retry limit: yes (limit: 2 retries)"]
    assert _json(cli_run("audit", "task-status", "never dispatched", "--json")) == {
        "dispatch_count": 0, "retry_count": 0, "last_verdict": None, "over_retry_limit": False}


def test_a_task_written_with_spaces_around_it_is_a_warning(cli_run, project, tmp_path):
    """nagi-ledger's writers strip the task; a row written by hand may not. Its tools strip
    the task they are asked too, so `audit task-status "X "` answers for "X", while the site
    lists "X " as a task of its own, shown like the other: the load now warns of such rows,
    from the DB and from a JSON export alike (the export's load said nothing of them)."""
    task = "Cap webhook retries at 5 attempts"
    before = _json(cli_run("audit", "task-status", task, "--json"))
    insert(project.audit_db, "dispatches", ts="2026-05-04 07:00:00", task=task + " ",
           agent_type="fork", model="opus", brief_summary="by hand")
    insert(project.audit_db, "approaches", ts="2026-05-04 07:05:00", task="\t" + task,
           approach="by hand", outcome="DEAD_END", reason="r")
    # nagi-ledger's answer: the question is stripped, the row with the space is not counted
    assert _json(cli_run("audit", "task-status", task + " ", "--json")) == before
    warnings = [w["message"] for w in json.loads(cli_run("status", "--json").stdout)["warnings"]
                if w["source"] == "audit"]
    assert [w.split(" (first")[0] for w in warnings] == [
        "1 row of dispatches names its task with spaces around it",
        "1 row of approaches names its task with spaces around it"]
    assert all(w.endswith("while `audit task-status` and the MCP tools (as nagi-ledger's) "
                          "answer for the name without them") for w in warnings)

    _export_in_settings(project, tmp_path, dispatches=[{
        "id": 7, "ts": "2026-05-04 07:00:00", "task": task + " ", "agent_type": "fork",
        "model": "opus", "brief_summary": "b", "verdict": None, "verdict_ts": None,
        "verdict_notes": None}])
    status = json.loads(cli_run("status", "--json").stdout)
    assert [w["message"].split(": the site")[0] for w in status["warnings"]
            if w["source"] == "audit"] == [
        "1 row of dispatches names its task with spaces around it (first: row id 7)"]


def test_rows_whose_time_is_no_time_are_a_warning(cli_run, project, tmp_path):
    """A row written by hand may have a ``ts`` that is no time (nagi-ledger's writers stamp
    SQLite's clock): the toolkit lists it as undated, nagi-ledger's windows compare its text.
    The load says so, per table, from the DB and from a JSON export alike."""
    first = insert(project.audit_db, "actions", ts="garbage", tier=0, category="t",
                   description="by hand")
    insert(project.audit_db, "actions", ts="2026-11-27 25:61:00", tier=1, category="t",
           description="by hand")
    insert(project.audit_db, "dispatches", ts="", task="t", agent_type="fork", model="opus",
           brief_summary="by hand")

    def warned() -> list[str]:
        return [w["message"] for w in json.loads(cli_run("status", "--json").stdout)[
            "warnings"] if w["source"] == "audit"]

    expected = [
        f"2 rows of actions have a time that is no date and time (first: row id {first}, "
        "'garbage'): listed as undated; nagi-ledger's time windows compare the text as "
        "written", "1 row of dispatches has a time that is no date and time (first: row id "]
    got = warned()
    assert len(got) == 2 and got[0] == expected[0] and got[1].startswith(expected[1]), got
    undated = cli_run("query", "SELECT count(*) FROM actions WHERE ts IS NULL", "--format",
                      "csv")
    assert undated.stdout.splitlines()[1] == "2"

    _export_in_settings(project, tmp_path, actions=[{
        "id": 1, "ts": "garbage", "tier": 0, "category": "t", "description": "d",
        "project": None}])
    assert warned() == ["1 row of actions has a time that is no date and time (first: row id "
                        "1, 'garbage'): listed as undated; nagi-ledger's time windows compare "
                        "the text as written"]


def test_approaches_newest_first_by_outcome(cli_run, project):
    task = "Cap webhook retries at 5 attempts"
    insert(project.audit_db, "approaches", ts="2026-05-04 07:00:00", task=task,
           approach="Sleep between retries", outcome="DEAD_END", reason="still floods")
    assert _json(cli_run("audit", "approaches", task, "--json")) == {
        "task": task,
        "dead_ends": [
            {"approach": "Sleep between retries", "reason": "still floods",
             "ts": "2026-05-04 07:00:00"},
            {"approach": "Use the HTTP client's built-in retry adapter",
             "reason": "Adapter retries are per-connection and ignore the per-invoice budget",
             "ts": "2026-05-04 05:30:12"}],
        "no_gos": [],
        "works": [{"approach": "Track attempts in the outbox row and stop at 5",
                   "reason": "Deterministic, survives worker restarts",
                   "ts": "2026-05-04 05:38:40"}],
        "total": 3}
    out = cli_run("audit", "approaches", task).stdout
    assert out.index("Sleep between retries") < out.index("built-in retry adapter")
    assert "No-gos (0)" in out
    assert _json(cli_run("audit", "approaches", "unknown task", "--json"))["total"] == 0


# --------------------------------------------------------------------------- search
# Expected rows are what nagi-ledger's ledger.search answers on the same DB.

WEBHOOK_HITS = [
    {"id": 3, "kind": "actions", "ts": "2026-05-04 05:40:55",
     "title": "Pushed staging config change enabling webhook retries", "status": 2},
    {"id": 2, "kind": "approaches", "ts": "2026-05-04 05:38:40",
     "title": "Cap webhook retries at 5 attempts: Track attempts in the outbox row and stop at 5",
     "status": "WORKS"},
    {"id": 2, "kind": "dispatches", "ts": "2026-05-04 05:33:10",
     "title": "Cap webhook retries at 5 attempts", "status": "CONFIRMED"},
    {"id": 1, "kind": "approaches", "ts": "2026-05-04 05:30:12",
     "title": "Cap webhook retries at 5 attempts: Use the HTTP client's built-in retry adapter",
     "status": "DEAD_END"},
    {"id": 1, "kind": "dispatches", "ts": "2026-05-04 05:15:02",
     "title": "Cap webhook retries at 5 attempts", "status": "PARTIAL"},
]


def _keys(hits: object) -> list[tuple[str, int]]:
    return [(h["kind"], h["id"]) for h in hits]  # type: ignore[attr-defined]


def test_search_rows_are_nagi_ledgers_index_rows(cli_run, shared_project):
    # equal scores: newest first; titles "task: approach" for approaches; tier as an integer
    assert _json(cli_run("audit", "search", "webhook", "--json")) == WEBHOOK_HITS
    out = cli_run("audit", "search", "webhook").stdout  # the human table keeps "Tier n"
    assert "Tier 2" in out and "Cap webhook retries at 5 attempts: Track attempts" in out


def test_search_scores_the_fraction_of_query_words_per_field(cli_run, shared_project):
    # "webhook cap": dispatch 1 scores 1.0 (task) + 0.5 (notes "Cap works..."), the approaches
    # and dispatch 2 score 1.0 from the task, the action 0.5 from its description
    assert _keys(_json(cli_run("audit", "search", "webhook cap", "--json"))) == [
        ("dispatches", 1), ("approaches", 2), ("dispatches", 2), ("approaches", 1),
        ("actions", 3)]
    # any word is enough (score above 0), and words are whole: "port" is not in "export"
    assert _keys(_json(cli_run("audit", "search", "retries 5", "--json"))) == [
        ("approaches", 2), ("approaches", 1), ("dispatches", 2), ("dispatches", 1),
        ("actions", 3)]
    assert _json(cli_run("audit", "search", "port", "--json")) == []


def test_search_scores_bodies_but_never_returns_them(cli_run, project):
    # "jitter" is only in dispatch 1's verdict_notes ("backoff jitter missing")
    assert _keys(_json(cli_run("audit", "search", "jitter", "--json"))) == [("dispatches", 1)]
    # "budget" only in an approach's reason and a dispatch's brief_summary
    assert _keys(_json(cli_run("audit", "search", "budget", "--json"))) == [
        ("approaches", 1), ("dispatches", 1)]
    insert(project.audit_db, "dispatches", ts="2026-05-04 08:00:00", task="fix-bug-42",
           agent_type="fork", model="sonnet", brief_summary="SECRET_BODY_MUST_NOT_LEAK")
    hits = _json(cli_run("audit", "search", "leak", "--json"))
    assert hits == [{"id": 4, "kind": "dispatches", "ts": "2026-05-04 08:00:00",
                     "title": "fix-bug-42", "status": "PENDING"}]
    # agent_type and model are not searched
    assert _json(cli_run("audit", "search", "sonnet inherit", "--json")) == []


def test_search_punctuation_queries_follow_nagis_tokenizer(cli_run, shared_project):
    # nothing to match: a one-character punctuation query is no error, just no rows
    assert _json(cli_run("audit", "search", "!", "--json")) == []
    # "--" is a unit of its own: found in "per-connection ... per-invoice" once spaces go
    assert _keys(_json(cli_run("audit", "search", "--json", "--", "--- !!"))) == [
        ("approaches", 1)]


def test_search_kinds_limit_offset_and_since_days(cli_run, project):
    def ids(*args: str) -> list[tuple[str, int]]:
        return _keys(_json(cli_run("audit", "search", "webhook", *args, "--json")))

    assert ids("--kind", "dispatches") == [("dispatches", 2), ("dispatches", 1)]
    assert ids("--kind", "approaches", "--kind", "actions") == [
        ("actions", 3), ("approaches", 2), ("approaches", 1)]
    page1, page2 = ids("--limit", "2"), ids("--limit", "2", "--offset", "2")
    assert page1 + page2 == ids()[:4]
    insert(project.audit_db, "actions", ts="2026-04-01 00:00:00", tier=0, category="old",
           description="ancient webhook change")
    assert ("actions", 4) in ids()
    assert ("actions", 4) not in ids("--since-days", "7", "--now", NOW)
    # since_days is a number, as in nagi-ledger: half a day back from 17:35 is 05:35
    assert ids("--since-days", "0.5", "--now", "2026-05-04 17:35:00") == [
        ("actions", 3), ("approaches", 2)]


def test_search_japanese_without_word_boundaries(cli_run, project):
    insert(project.audit_db, "dispatches", ts="2026-05-04 08:00:00",
           task="大規模ログ2(5MB)のgrep+サンプリング調査", agent_type="fork", model="sonnet",
           brief_summary="log audit")
    hits = _json(cli_run("audit", "search", "大規模ログのサンプリング調査", "--json"))
    assert [h["title"] for h in hits] == ["大規模ログ2(5MB)のgrep+サンプリング調査"]
    assert _json(cli_run("audit", "search", "請求書の再送信", "--json")) == []
    assert cli_run("audit", "search", "zzz nonexistent").stdout == \
        'No results for "zzz nonexistent".\n'


# --------------------------------------------------------------------------- similarity

@pytest.mark.parametrize("a, b, score", [
    # nagi-ledger's documented calibration pairs
    ("Review PR #42 (billing)", "Review PR #57 (webhooks)", 0.5),
    ("Build YouTube-to-Markdown intake PoC", "Build the YouTube knowledge intake PoC", 0.4444),
    ("Build YouTube-to-Markdown intake PoC", "Build accounts domain and fake provider", 0.0833),
    ("smoke task", "smoke-task", 0.9),  # same units (a lone "-" is no 2-gram); difflib 18/20
    ("大規模ログの調査", "大規模ログ調査", 0.625),  # 2-grams: 5 shared of 8; difflib 14/15
    ("Refactor the invoicing export CSV writer", "Build the YouTube knowledge intake PoC",
     0.0909),
    ("ログ調査", "log audit", 0.0),
    ("Same Task", "same task", 1.0),
])
def test_similarity_of_known_pairs(a, b, score):
    from toolkit.audit_ops import similarity

    assert round(similarity(a, b), 4) == score


def test_match_units_are_ascii_words_plus_2grams_of_the_rest():
    from toolkit.audit_ops import token_set

    assert token_set("fix-bug-42") == {"fix", "bug", "42", "--"}
    assert token_set("大規模ログ") == {"大規", "規模", "模ロ", "ログ"}
    assert token_set("Review PR #42 (billing)") == {"review", "pr", "42", "billing", "#(", "()"}
    assert token_set("Café") == {"caf"}  # é is left over alone: no 2-gram
    assert token_set("?") == frozenset()


SIMILAR_CAP = [
    {"kind": "dispatches", "id": 1, "task": "Cap webhook retries at 5 attempts",
     "score": 0.8571, "ts": "2026-05-04 05:15:02", "verdict": "PARTIAL"},
    {"kind": "dispatches", "id": 2, "task": "Cap webhook retries at 5 attempts",
     "score": 0.8571, "ts": "2026-05-04 05:33:10", "verdict": "CONFIRMED"},
    {"kind": "approaches", "id": 1, "task": "Cap webhook retries at 5 attempts",
     "score": 0.8571, "ts": "2026-05-04 05:30:12", "verdict": "DEAD_END"},
    {"kind": "approaches", "id": 2, "task": "Cap webhook retries at 5 attempts",
     "score": 0.8571, "ts": "2026-05-04 05:38:40", "verdict": "WORKS"},
]


def test_similar_lists_every_matching_row_in_nagis_order(cli_run, shared_project):
    # every row (not one per task), equal scores: dispatches by id, then approaches by id
    hits = _json(cli_run("audit", "similar", "cap the webhook retries at 5 attempts", "--json"))
    assert hits == SIMILAR_CAP
    # a dispatch without a verdict has verdict null
    hits = _json(cli_run("audit", "similar", "Audit logging", "--json"))
    assert [(h["kind"], h["id"], h["score"], h["verdict"]) for h in hits] == [
        ("dispatches", 3, 0.4, None), ("approaches", 3, 0.4, "NO_GO")]
    out = cli_run("audit", "similar", "Audit logging").stdout  # the human table: PENDING
    assert "PENDING" in out and "NO_GO" in out


def test_similar_reworded_duplicate_and_distractors(cli_run, project):
    insert(project.audit_db, "dispatches", ts="2026-05-04 08:00:00",
           task="Build the YouTube knowledge intake PoC", agent_type="nagi-implementer",
           model="sonnet", brief_summary="PoC")
    insert(project.audit_db, "dispatches", ts="2026-05-04 08:01:00",
           task="Build accounts domain and fake provider", agent_type="fork", model="sonnet",
           brief_summary="s")
    hits = _json(cli_run("audit", "similar", "Build YouTube-to-Markdown intake PoC", "--json"))
    assert hits == [{"kind": "dispatches", "id": 4, "task": "Build the YouTube knowledge "
                     "intake PoC", "score": 0.4444, "ts": "2026-05-04 08:00:00",
                     "verdict": None}]
    out = cli_run("audit", "similar", "Refactor the invoicing export CSV writer").stdout
    assert out == "No similar tasks (min score 0.35).\n"


def test_similar_limit_and_min_score_as_nagi(cli_run, shared_project):
    def sim(*args: str) -> list[tuple[str, int]]:
        return _keys(_json(cli_run("audit", "similar", "Cap webhook retries", *args, "--json")))

    assert sim() == [("dispatches", 1), ("dispatches", 2), ("approaches", 1), ("approaches", 2)]
    assert sim("--limit", "2") == [("dispatches", 1), ("dispatches", 2)]
    assert sim("--min-score", "0.5") == sim()  # score 0.5 is kept: at least min_score
    assert sim("--min-score", "0.5001") == []
    assert sim("--min-score", "1.5") == []  # above 1: no row, no error
    assert len(sim("--min-score", "-1", "--limit", "50")) == 6  # every dispatch and approach


# --------------------------------------------------------------------------- FAULTS.md C

def test_c1_junk_db_is_exit_65_and_untouched(cli_run, project):
    project.audit_db.write_bytes(b"junk" * 100)
    for extra in ("-wal", "-shm"):
        project.audit_db.with_name(project.audit_db.name + extra).unlink(missing_ok=True)
    before = file_state(project.audit_db)
    result = cli_run("audit", "stats")
    assert result.exit_code == 65
    assert last_error(result) == (f"Error: {project.audit_db}: not a valid SQLite database. "
                                  "Point NAGI_LEDGER_DB or --audit-db at nagi-ledger's ledger.db")
    assert file_state(project.audit_db) == before
    assert sorted(p.name for p in project.audit_db.parent.iterdir()) == ["ledger.db"]


def test_c1_an_empty_file_is_an_empty_db_for_the_readers_as_for_the_writers(cli_run, project):
    """A 0-byte ledger.db (``touch``, or a DB created and never written) is an empty database
    to SQLite: nagi-ledger's tools and the toolkit's writers use it as one, but the readers
    (CLI and MCP) refused it as "not a valid SQLite database" (exit 65). They now answer as
    for a DB without tables, and leave the file as it is."""
    for extra in ("-wal", "-shm"):
        project.audit_db.with_name(project.audit_db.name + extra).unlink(missing_ok=True)
    project.audit_db.write_bytes(b"")
    result = cli_run("audit", "stats", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dispatch_count"] == 0
    assert "table actions is missing; treated as empty" in result.stderr
    assert project.audit_db.read_bytes() == b""
    assert sorted(p.name for p in project.audit_db.parent.iterdir()) == ["ledger.db"]
    logged = cli_run("audit", "log-action", "--tier", "0", "--category", "x", "first")
    assert logged.exit_code == 0, logged.output
    assert json.loads(cli_run("audit", "stats", "--json").stdout)["actions_by_tier"]["0"] == 1


def test_c2_missing_db_is_not_found_and_not_created(cli_run, project):
    for extra in ("", "-wal", "-shm"):
        project.audit_db.with_name(project.audit_db.name + extra).unlink(missing_ok=True)
    for args in (["task-status", "x"], ["report"], ["search", "x"], ["similar", "x"]):
        result = cli_run("audit", *args)
        assert result.exit_code == 1
        assert last_error(result) == (
            f"Error: {project.audit_db}: audit DB not found. Set NAGI_LEDGER_DB or --audit-db, "
            "or log something first with `toolkit audit log-action`")
    assert not project.audit_db.exists()


def test_c3_reader_busy_is_75_and_waits_for_a_quick_writer(cli_run, project, monkeypatch):
    import functools

    from toolkit.sources import audit as audit_src

    db = project.audit_db
    for extra in ("", "-wal", "-shm"):
        db.with_name(db.name + extra).unlink(missing_ok=True)
    rollback_journal_db(db)
    monkeypatch.setattr(audit_src, "BUSY_TIMEOUT_MS", 200)
    monkeypatch.setattr(audit_src, "connect_ro",
                        functools.partial(audit_src.connect_ro, timeout_ms=200))
    with LockHolder(db):
        result = cli_run("audit", "task-status", "Cap webhook retries at 5 attempts")
    assert result.exit_code == 75
    assert last_error(result) == (f"Error: {db}: audit DB is busy (locked by a writer); "
                                  "retry in a moment")
    monkeypatch.setattr(audit_src, "connect_ro",
                        functools.partial(audit_src.connect_ro.func, timeout_ms=5000))
    holder = LockHolder(db, hold=0.3)
    try:
        result = cli_run("audit", "task-status", "Cap webhook retries at 5 attempts", "--json")
    finally:
        holder.release()
    assert _json(result)["dispatch_count"] == 2


def test_c4_wal_writer_mid_transaction_reads_last_commit(cli_run, project):
    with LockHolder(project.audit_db, mode="wal-write"):
        status = _json(cli_run("audit", "task-status", "uncommitted task", "--json"))
        stats = _json(cli_run("audit", "stats", "--now", NOW, "--json"))
    assert status["dispatch_count"] == 0
    assert stats["dispatch_count"] == 3


# nagi-ledger's tables without its CHECK and NOT NULL constraints (FAULTS.md C5)
LOOSE_SCHEMA = """
        CREATE TABLE actions (id INTEGER PRIMARY KEY, ts TEXT, tier, category TEXT,
                              description TEXT, project TEXT);
        CREATE TABLE dispatches (id INTEGER PRIMARY KEY, ts TEXT, task TEXT, agent_type TEXT,
                                 model TEXT, brief_summary TEXT, verdict TEXT, verdict_ts TEXT,
                                 verdict_notes TEXT);
        CREATE TABLE approaches (id INTEGER PRIMARY KEY, ts TEXT, task TEXT, approach TEXT,
                                 outcome TEXT, reason TEXT);
"""


def test_c5_wrong_types_and_nulls_still_report(cli_run, tmp_path, monkeypatch):
    db = tmp_path / "loose.db"
    conn = sqlite3.connect(db)  # a DB without nagi-ledger's CHECK and NOT NULL constraints
    conn.executescript(LOOSE_SCHEMA + """
        INSERT INTO actions VALUES (1, '2026-05-04 10:00:00', 'high', 'deploy', 'text tier', NULL);
        INSERT INTO actions VALUES (2, '2026-05-04 10:01:00', 1, NULL, NULL, NULL);
    """)
    conn.execute("INSERT INTO actions VALUES (3, '2026-05-04 10:02:00', 2, 'big', ?, NULL)",
                 ("x" * 200_000,))
    conn.commit()
    conn.close()
    monkeypatch.setenv("NAGI_LEDGER_DB", str(db))
    monkeypatch.chdir(tmp_path)
    result = cli_run("audit", "report", "--now", NOW)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "- [Tier ???] text tier" in lines
    assert lines[lines.index("### [???]") + 1] == "- [Tier 1] [???]"
    assert f"Warning: {db}: actions.tier is 'high', not an integer (row id 1)" in result.stderr
    stats = _json(cli_run("audit", "stats", "--now", NOW, "--json"))
    assert stats["actions_by_tier"] == {"0": 0, "1": 1, "2": 1}


def test_c6_extra_tables_ignored_missing_approaches_is_empty(cli_run, tmp_path, monkeypatch):
    db = make_audit_db(tmp_path / "newer.db")
    conn = sqlite3.connect(db)
    conn.executescript("DROP TABLE approaches; CREATE TABLE goals (id INTEGER PRIMARY KEY); "
                       "ALTER TABLE actions ADD COLUMN session_id TEXT;")
    conn.close()
    monkeypatch.setenv("NAGI_LEDGER_DB", str(db))
    monkeypatch.chdir(tmp_path)
    result = cli_run("audit", "approaches", "Cap webhook retries at 5 attempts", "--json")
    assert json.loads(result.stdout)["total"] == 0
    assert f"Warning: {db}: table approaches is missing; treated as empty" in result.stderr
    assert f"Warning: {db}: extra table goals ignored (newer nagi-ledger?)" in result.stderr
    assert _json(cli_run("audit", "stats", "--now", NOW, "--json"))["dispatch_count"] == 3
    # a writer brings the missing table back, as nagi-ledger itself would
    cli_run("audit", "log-approach", "t", "--approach", "a", "--outcome", "WORKS", "--reason", "r")
    assert _json(cli_run("audit", "approaches", "t", "--json"))["total"] == 1


def test_readers_never_write_the_audit_db(cli_run, shared_project):
    db = shared_project.audit_db
    cli_run("audit", "stats")  # first load
    before = file_state(db)
    for args in (["task-status", "x"], ["approaches", "x"], ["report"], ["stats"],
                 ["search", "webhook"], ["similar", "webhook retries"]):
        assert cli_run("audit", *args).exit_code == 0
    assert file_state(db) == before


def test_hostile_text_is_made_visible_in_tables(cli_run, project):
    insert(project.audit_db, "dispatches", ts="2026-05-04 08:00:00",
           task="evil\x1b[2J task \u202etxt", agent_type="fork", model="sonnet",
           brief_summary="s")
    out = cli_run("audit", "search", "evil").stdout
    assert "\x1b" not in out and "\u202e" not in out
    assert "<U+001B>[2J task <U+202E>txt" in out
    assert _json(cli_run("audit", "search", "evil", "--json"))[0]["title"] == \
        "evil\x1b[2J task \u202etxt"  # JSON keeps the exact text


def test_switching_to_another_audit_db_never_answers_from_the_first(cli_run, project, tmp_path):
    """The store copies audit rows by id; a second DB with the same ids must replace them."""
    assert _keys(_json(cli_run("audit", "search", "jitter", "--json"))) == [("dispatches", 1)]
    other = tmp_path / "other" / "ledger.db"
    out = _json(cli_run("--audit-db", str(other), "audit", "log-action", "beta rollout",
                        "--tier", "1", "--category", "deploy", "--json"))
    assert out == {"id": 1}
    assert _json(cli_run("--audit-db", str(other), "audit", "search", "jitter", "--json")) == []
    assert [h["title"] for h in _json(cli_run("--audit-db", str(other), "audit", "search",
                                              "beta", "--json"))] == ["beta rollout"]
    # and back: the first DB's rows again, not the second's
    assert _json(cli_run("audit", "search", "beta", "--json")) == []
    # a file put in place of the DB (the old one moved aside) starts over too, even when it
    # has as many rows as the store already holds
    project.audit_db.rename(tmp_path / "moved-aside.db")
    for extra in ("-wal", "-shm"):
        project.audit_db.with_name(project.audit_db.name + extra).unlink(missing_ok=True)
    make_audit_db(project.audit_db, samples=False)
    for n in range(4):
        insert(project.audit_db, "actions", ts=f"2026-05-04 05:0{n}:00", tier=0, category="c",
               description=f"gamma {n}")
    assert [h["title"] for h in _json(cli_run("audit", "search", "gamma rebased", "--json"))] \
        == ["gamma 3", "gamma 2", "gamma 1", "gamma 0"]


def test_windows_nagi_ledgers_sqlite_cannot_compute_match_nothing(cli_run, shared_project):
    """nagi-ledger's window start is SQLite's datetime('now', '-N days'): NULL (no row) when
    not a number or before Julian day 0, a negative year (every row) before year 1."""
    for value in ("nan", "inf", "1e300", "3000000"):
        result = cli_run("audit", "search", "webhook", "--since-days", value, "--now", NOW,
                         "--json")
        assert (result.exit_code, json.loads(result.stdout)) == (0, []), value
    everything = _keys(_json(cli_run("audit", "search", "webhook", "--json")))
    for value in ("800000", "2000000"):  # starts in year -164 and -3449
        assert _keys(_json(cli_run("audit", "search", "webhook", "--since-days", value,
                                   "--now", NOW, "--json"))) == everything
    stats = _json(cli_run("audit", "stats", "--days", "100000000", "--now", NOW, "--json"))
    assert stats["dispatch_count"] == 0 and stats["actions_by_tier"] == {"0": 0, "1": 0, "2": 0}
    result = cli_run("audit", "report", "--since-hours", "99999999999", "--now", NOW)
    assert (result.exit_code, result.stdout) == (0, "No entries in the last 99999999999h.\n")


def test_window_start_is_cut_to_the_whole_second_as_sqlite_does(cli_run, shared_project):
    # one hour before 07:02:44.6 starts at 06:02:44, the second dispatch 3 was written in
    assert _json(cli_run("audit", "report", "--since-hours", "1",
                         "--now", "2026-05-04 07:02:44.6", "--json")).endswith(
        "- Audit logging for admin endpoints → fork/opus → PENDING")


def test_search_on_damaged_rows_answers_without_crashing(cli_run, project, tmp_path):
    """FAULTS.md C5 for search and similar: NULLs and wrong types are read, not a crash."""
    db = tmp_path / "loose.db"
    conn = sqlite3.connect(db)
    conn.executescript(LOOSE_SCHEMA + """
        INSERT INTO actions VALUES (1, '2026-05-04 05:00:00', NULL, 'deploy', 'webhook x', NULL);
        INSERT INTO dispatches VALUES (1, '2026-05-04 05:01:00', NULL, 'a', 'm', NULL, NULL,
                                       NULL, 'webhook notes');
        INSERT INTO approaches VALUES (1, '2026-05-04 05:02:00', 'webhook task', 'a', 'WORKS',
                                       NULL);
    """)
    conn.commit()
    conn.close()
    result = cli_run("--audit-db", str(db), "audit", "search", "webhook")
    assert result.exit_code == 0, result.output
    assert "Tier ???" in result.stdout and "Traceback" not in result.output
    hits = _json(cli_run("--audit-db", str(db), "audit", "search", "webhook", "--json"))
    assert [(h["kind"], h["id"], h["status"]) for h in hits] == [
        ("approaches", 1, "WORKS"), ("dispatches", 1, "PENDING"), ("actions", 1, None)]
    hits = _json(cli_run("--audit-db", str(db), "audit", "similar", "webhook task", "--json"))
    assert [(h["kind"], h["id"]) for h in hits] == [("approaches", 1)]  # a NULL task: no row


# --------------------------------------------------------------------------- I3: huge numbers

def test_i3_huge_windows_get_nagi_ledgers_answers_not_overflow_error(cli_run, shared_project):
    """nagi-ledger computes the start as SQLite's datetime(now, '-N days'): a start in a
    negative year sorts before every row (all rows count), and a number SQLite cannot apply
    gives NULL (no row counts). The toolkit answers the same, never OverflowError."""
    everything = _json(cli_run("audit", "stats", "--days", "36500", "--now", NOW, "--json"))
    assert everything["dispatch_count"] == 3
    for days in ("800000", "700000"):  # the start is in year -164 / year 110
        assert _json(cli_run("audit", "stats", "--days", days, "--now", NOW,
                             "--json")) == everything
    assert _json(cli_run("audit", "stats", "--days", "100000000", "--now", NOW, "--json")) == {
        "actions_by_tier": {"0": 0, "1": 0, "2": 0}, "actions_by_category": {},
        "dispatch_count": 0,
        "verdicts": {"CONFIRMED": 0, "REFUTED": 0, "PARTIAL": 0, "PENDING": 0}}
    result = cli_run("audit", "stats", "--days", "800000", "--now", NOW)
    assert result.exit_code == 0
    assert result.stdout.startswith("Last 800000 days\n")
    # 1e11 is a whole number of hours, as nagi-ledger's MCP tool takes it; SQLite answers NULL
    result = cli_run("audit", "report", "--since-hours", "1e11", "--now", NOW)
    assert (result.exit_code, result.stdout) == (0, "No entries in the last 100000000000h.\n")
    assert _json(cli_run("audit", "report", "--since-hours", "800000", "--now", NOW,
                         "--json")) == REPORT_24H.replace("last 24h", "last 800000h")
    assert _json(cli_run("audit", "search", "webhook", "--since-days", "1e8", "--json")) == []
    assert len(_json(cli_run("audit", "search", "webhook", "--since-days", "800000",
                             "--json"))) == len(_json(cli_run("audit", "search", "webhook",
                                                              "--json")))


@pytest.mark.parametrize("args, error", [
    (["report", "--since-hours", "1.5"], "'1.5' is not a whole number"),
    (["stats", "--days", "1e400"], "'1e400' is not a whole number"),
    (["stats", "--days", "many"], "'many' is not a number"),
])
def test_i3_counts_that_are_not_whole_numbers_are_usage_errors(cli_run, shared_project, args,
                                                               error):
    result = cli_run("audit", *args)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].endswith(error)


def test_i3_a_huge_limit_or_offset_is_answered_as_a_python_slice(cli_run, shared_project):
    """nagi-ledger slices its result list: a limit past the end is every row, an offset past
    it none; the store's LIMIT takes at most 2**63 - 1, so larger numbers are clamped."""
    everything = _json(cli_run("audit", "search", "webhook", "--json"))
    assert _json(cli_run("audit", "search", "webhook", "--limit", str(10**20),
                         "--json")) == everything
    assert _json(cli_run("audit", "search", "webhook", "--offset", str(10**20),
                         "--json")) == []


@pytest.mark.parametrize("careful", [False, True], ids=["streamed", "careful"])
@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo"])
def test_a_ts_with_an_offset_is_its_utc_time(cli_run, project, monkeypatch, zone, careful):
    """A row written by hand with an offset (nagi-ledger writes UTC without one) is at its UTC
    time in the store, whatever the machine's zone, on either load path: a --now window ending
    after it holds it, and its verdict time is UTC too."""
    import time

    from toolkit.source import carefully

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        insert(project.audit_db, "actions", ts="2026-05-05T08:00:00+09:00", tier=2,
               category="offset", description="Tokyo morning", project=None)
        insert(project.audit_db, "dispatches", ts="2026-05-04 23:30:00", task="Offset task",
               agent_type="fork", model="opus", brief_summary="b", verdict="CONFIRMED",
               verdict_ts="2026-05-05T01:00:00-08:00")
        with carefully() if careful else contextlib.nullcontext():
            report = _json(cli_run("audit", "report", "--since-hours", "2",
                                   "--now", "2026-05-05 00:00:00", "--json"))
        assert "### offset\n- [Tier 2] Tokyo morning" in str(report)
        rows = _json(cli_run("query", "--format", "json",
                             "SELECT strftime(ts, '%Y-%m-%d %H:%M:%S') AS ts, ts_raw "
                             "FROM actions WHERE category = 'offset'"))
        assert rows == [{"ts": "2026-05-04 23:00:00", "ts_raw": "2026-05-05T08:00:00+09:00"}]
        verdict = _json(cli_run("query", "--format", "json",
                                "SELECT strftime(verdict_ts, '%Y-%m-%d %H:%M:%S') AS v "
                                "FROM dispatches WHERE task = 'Offset task'"))
        assert verdict == [{"v": "2026-05-05 09:00:00"}]
        conn = sqlite3.connect(project.audit_db)  # a verdict given after the row was loaded
        conn.execute("UPDATE dispatches SET verdict = 'REFUTED', "
                     "verdict_ts = '2026-05-05T10:00:00+09:00' WHERE task = 'Offset task'")
        conn.commit()
        conn.close()
        verdict = _json(cli_run("query", "--format", "json",
                                "SELECT strftime(verdict_ts, '%Y-%m-%d %H:%M:%S') AS v "
                                "FROM dispatches WHERE task = 'Offset task'"))
        assert verdict == [{"v": "2026-05-05 01:00:00"}]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_every_audit_table_streams_into_the_store_without_the_careful_path(tmp_path):
    """The streamed copy (Arrow batches: the fast path) must run for a standard DB: when it
    raises, the load goes on row by row, with the same rows but about five times as slow, so
    no answer shows it. Each table's stream, its offset and NULL times included, goes into
    a real store here, and must not raise."""
    from toolkit.loaders import SOURCES
    from toolkit.sources import audit
    from toolkit.store import Store

    db = make_audit_db(tmp_path / "ledger.db")
    insert(db, "actions", ts="2026-05-05T08:00:00+09:00", tier=1, category="c",
           description="d", project=None)
    insert(db, "dispatches", ts="2026-05-04 23:30:00", task="t", agent_type="a", model="m",
           brief_summary="b", verdict="CONFIRMED", verdict_ts="2026-05-05T01:00:00-08:00")
    conn = audit.connect_ro(db)
    try:
        schema = audit.inspect(conn, db)
    finally:
        conn.close()
    with Store.open(tmp_path / "store.duckdb", sources=SOURCES) as store:
        for table, present in schema.tables.items():
            audit.stream_into(db, table, present, 0, store.insert_stream)
            assert store.scalar(f"SELECT count(*) FROM {table}") == \
                sqlite3.connect(db).execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        assert store.scalar("SELECT CAST(max(verdict_ts) AS VARCHAR) FROM dispatches") == \
            "2026-05-05 09:00:00"
        assert store.scalar("SELECT CAST(ts AS VARCHAR) FROM actions WHERE tier = 1 "
                            "AND category = 'c'") == "2026-05-04 23:00:00"


def _load_audit_tables(tmp_path, db, name: str) -> dict[str, list[tuple[object, ...]]]:  # type: ignore[no-untyped-def]
    """Every audit table of a new store loaded from ``db``, rows in id order (values as text
    and their types, so that 2 and "2" differ)."""
    from toolkit.config import resolve
    from toolkit.loaders import SOURCES
    from toolkit.sources import audit
    from toolkit.store import Store

    cfg = resolve(project=tmp_path, env={"NAGI_LEDGER_DB": str(db), "HOME": str(tmp_path)},
                  cwd=tmp_path)
    with Store.open(tmp_path / f"{name}.duckdb", sources=SOURCES) as store:
        store.refresh(cfg, only=["audit"])
        return {t: store.conn.execute(
            f"SELECT * FROM (SELECT COLUMNS(*)::VARCHAR, COLUMNS(*).typeof() FROM {t}) "
            "ORDER BY 1").fetchall() for t in audit.TABLES}


def test_a_few_new_rows_load_as_the_stream_loads_them_without_pyarrow(tmp_path, monkeypatch):
    """A table with at most FEW_ROWS new ids is read row by row (the careful path, which the
    stream gives way to for any value it cannot take) instead of streamed: the same rows,
    types and times as the stream's, offsets, NULL times and verdicts given later included;
    and a load of so few rows in a new process never imports pyarrow or ADBC's driver."""
    import subprocess
    import sys

    from toolkit import store as store_module

    db = make_audit_db(tmp_path / "ledger.db")
    insert(db, "actions", ts="2026-05-05T08:00:00+09:00", tier=1, category="c",
           description="d", project=None)
    insert(db, "dispatches", ts="2026-05-04 23:30:00", task="t", agent_type="a", model="m",
           brief_summary="b", verdict="CONFIRMED", verdict_ts="2026-05-05T01:00:00-08:00")
    careful = _load_audit_tables(tmp_path, db, "careful")
    monkeypatch.setattr(store_module, "FEW_ROWS", 0)  # every table streamed
    streamed = _load_audit_tables(tmp_path, db, "streamed")
    assert careful == streamed and all(careful.values())
    monkeypatch.undo()

    # in a new process: a first load, then a refresh whose old dispatch got its verdict
    (tmp_path / "project").mkdir()
    env = {"HOME": str(tmp_path), "NAGI_LEDGER_DB": str(db), "TZ": "UTC",
           "PATH": os.environ["PATH"]}
    script = ("import sys\nfrom toolkit.cli import cli\n"
              "cli.main(['--project', sys.argv[1], 'load'], standalone_mode=False)\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('pyarrow', 'adbc_driver_sqlite', 'adbc_driver_manager')))\n")
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "project")],
                             env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines()[-1] == "[]"
        assert "audit" in run.stdout
        conn = sqlite3.connect(db)
        conn.execute("UPDATE dispatches SET verdict = 'REFUTED' WHERE task = 't'")
        conn.commit()
        conn.close()
    stored = _load_audit_tables(tmp_path, db, "after")
    assert "REFUTED" in {r[6] for r in stored["dispatches"]}
