"""nagi-ledger's goal gate as a source (goals, goal_events) and ``toolkit audit brief``.

The brief's expected text is nagi-ledger's session_brief.py output for the same files, DB and
repositories (its tests' cases, written anew): a header, then the sections in priority order
(active goal, dispatches without a verdict, dead ends and no-gos, repositories with
uncommitted changes), at most 1500 characters, nothing at all when nothing is open.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests._audit_helpers import _no_injected_now, file_state, insert  # noqa: F401 - autouse
from tests.conftest import make_audit_db
from toolkit import audit_ops

HEADER = "## 開いてるループ"
NOW = "2026-05-04 12:00:00"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Goal file, goal history and audit DB paths in tmp_path, pointed at by nagi-ledger's
    variables; no repositories to check unless a test lists some; cwd is no git repo."""
    paths = {"goal": tmp_path / "nagi" / "goal.json",
             "history": tmp_path / "nagi" / "goal_history.jsonl",
             "db": tmp_path / "nagi" / "ledger.db",
             "root": tmp_path / "proj"}
    paths["goal"].parent.mkdir()
    paths["root"].mkdir()
    (paths["root"] / "toolkit.yaml").write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("NAGI_GOAL_FILE", str(paths["goal"]))
    monkeypatch.setenv("NAGI_GOAL_HISTORY", str(paths["history"]))
    monkeypatch.setenv("NAGI_LEDGER_DB", str(paths["db"]))
    monkeypatch.setenv("NAGI_BRIEF_REPOS", str(tmp_path / "no_repos_here"))
    monkeypatch.chdir(paths["root"])
    return paths


def write_goal(path: Path, goal: str = "ship the widget", remaining: object = 4,
               max_turns: object = 10, **more: object) -> None:
    state = {"goal": goal, "remaining": remaining, "max_turns": max_turns,
             "created": "2026-08-01T00:00:00+00:00", **more}
    path.write_text(json.dumps(state), encoding="utf-8")


def history_line(goal: str, outcome: str, note: str | None = None, used: int | None = 3,
                 closed: str = "2026-08-01T02:00:00+00:00") -> str:
    return json.dumps({"goal": goal, "outcome": outcome, "note": note,
                       "created": "2026-08-01T00:00:00+00:00", "closed": closed,
                       "turns_used": used}) + "\n"


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def repo(path: Path, untracked: int = 0) -> Path:
    path.mkdir(parents=True)
    git("init", "-q", cwd=path)
    for i in range(untracked):
        (path / f"file{i}.txt").write_text("hello", encoding="utf-8")
    return path


def brief(cli_run, *args: str):  # type: ignore[no-untyped-def]
    result = cli_run("audit", "brief", *args)
    assert result.exit_code == 0, result.output
    return result


# =========================================================================== the source

def test_goal_files_load_into_goals_and_goal_events(cli_run, world):
    write_goal(world["goal"], "all tests green", remaining=7, max_turns=20, extensions=1)
    world["history"].write_text(
        history_line("write the docs", "done", "README updated in a1b2c3d", 2)
        + history_line("port the parser", "aborted", "blocked on upstream", 5)
        + history_line("old goal", "superseded", None, 0), encoding="utf-8")
    assert cli_run("load").exit_code == 0
    out = cli_run("query", "--format", "json",
                  "SELECT goal, remaining, max_turns, turns_used, extensions, created "
                  "FROM goals").output
    assert json.loads(out) == [{"goal": "all tests green", "remaining": 7, "max_turns": 20,
                                "turns_used": 13, "extensions": 1,
                                "created": "2026-08-01 00:00:00"}]
    out = cli_run("query", "--format", "json",
                  "SELECT line, goal, outcome, note, turns_used, closed FROM goal_events "
                  "ORDER BY line").output
    assert [(r["line"], r["goal"], r["outcome"], r["note"], r["turns_used"])
            for r in json.loads(out)] == [
        (1, "write the docs", "done", "README updated in a1b2c3d", 2),
        (2, "port the parser", "aborted", "blocked on upstream", 5),
        (3, "old goal", "superseded", None, 0)]
    status = cli_run("status").output
    assert f"goals      found    {world['goal']}" in status
    assert "active goal (7/20 turns left), 3 closed goals" in status


def test_status_says_where_to_point_when_there_are_no_goal_files(cli_run, world):
    status = cli_run("status").output
    assert f"goals      missing  {world['goal']}" in status
    assert "no nagi-ledger goal files (set NAGI_GOAL_FILE" in status


def test_flags_and_toolkit_yaml_choose_the_goal_files(cli_run, world, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    write_goal(other / "g.json", "from the flag")
    (other / "h.jsonl").write_text(history_line("from yaml", "done"), encoding="utf-8")
    (world["root"] / "toolkit.yaml").write_text(
        "goal_history: ../elsewhere/h.jsonl\n", encoding="utf-8")
    assert cli_run("--goal-file", str(other / "g.json"), "load").exit_code == 0
    out = cli_run("--goal-file", str(other / "g.json"), "query", "--format", "csv",
                  "SELECT (SELECT goal FROM goals), (SELECT goal FROM goal_events)").output
    assert out.splitlines()[1] == "from the flag,from yaml"


def test_damaged_goal_json_is_no_active_goal_with_a_warning(cli_run, world):
    world["goal"].write_text('{"goal": "half written", "remain', encoding="utf-8")
    world["history"].write_text(history_line("a", "done"), encoding="utf-8")
    cli_run("load")
    assert cli_run("query", "--format", "csv", "SELECT count(*) FROM goals").output \
        .splitlines()[1] == "0"
    status = cli_run("status").output
    assert "no active goal, 1 closed goal" in status
    assert f"{world['goal']}: not valid JSON" in status
    assert "nagi-ledger treats this as no active goal" in status


@pytest.mark.parametrize(("content", "why"), [
    (json.dumps({"goal": "no budget"}), "missing remaining, max_turns, created"),
    (json.dumps(["goal"]), "holds a JSON list, not an object"),
    ("\ufeff" + json.dumps({"goal": "g", "remaining": 1, "max_turns": 1, "created": "x"}),
     "not valid JSON (Unexpected UTF-8 BOM"),
])
def test_goal_json_nagi_ledger_would_not_take_is_warned(cli_run, world, content, why):
    world["goal"].write_text(content, encoding="utf-8")
    cli_run("load")
    status = cli_run("status").output
    assert why in status
    assert "no active goal" in status
    # ... and nagi-ledger's brief shows no goal for it either
    assert cli_run("audit", "brief").stdout == ""


def test_goal_with_a_non_numeric_budget_is_kept_and_warned(cli_run, world):
    write_goal(world["goal"], remaining="four")
    cli_run("load")
    row = json.loads(cli_run("query", "--format", "json",
                             "SELECT goal, remaining, problems FROM goals").output)[0]
    assert row["goal"] == "ship the widget"
    assert row["remaining"] is None
    assert row["problems"] == ['remaining is not a whole number: "four"']
    status = cli_run("status").output
    assert 'remaining is not a whole number: "four"' in status
    assert "active goal (?/10 turns left), 0 closed goals" in status


def test_numbers_too_large_for_the_store_are_warned_and_the_rest_loads(cli_run, world):
    """goal.json with ``"remaining": 10**23`` (or an ``extensions``, a history line's
    ``turns_used`` as large) made every command that loads the store (status, query, handoff,
    build-site...) fail with "Error: a number is too large: Python int too large to convert
    to C long", naming no file: one value hid every source. As for the audit DB's numbers,
    such a value is now a warning and NULL, and everything else loads."""
    big = 10**23
    write_goal(world["goal"], remaining=big, extensions=-(2**40))
    world["history"].write_text(history_line("old goal", "done", used=big)
                                + history_line("next goal", "done", used=2), encoding="utf-8")
    status = cli_run("status")
    assert status.exit_code == 0, status.output
    assert f"remaining is {big}, too large a whole number" in status.output
    assert f"extensions is {-(2**40)}, too large a whole number" in status.output
    assert f"turns_used is {big}, too large a whole number" in status.output
    assert "active goal (?/10 turns left), 2 closed goals" in status.output
    row = json.loads(cli_run("query", "--format", "json",
                             "SELECT goal, remaining, max_turns, extensions FROM goals").stdout)
    assert row == [{"goal": "ship the widget", "remaining": None, "max_turns": 10,
                    "extensions": None}]
    used = json.loads(cli_run("query", "--format", "json",
                              "SELECT turns_used FROM goal_events ORDER BY line").stdout)
    assert used == [{"turns_used": None}, {"turns_used": 2}]


def _strict_json(text: str) -> object:
    """JSON as every other reader takes it: NaN and Infinity are no JSON."""
    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_numbers_json_cannot_hold_are_stored_as_null_and_warned(cli_run, world):
    """goal.json with ``"max_turns": 1e400`` or ``NaN`` (Python's json, nagi-ledger's reader,
    takes them as an infinity and NaN, and keeps the goal active) was stored in goals.state
    as text holding ``Infinity``/``NaN``: no valid JSON, so the site's JSON download and
    anything parsing the column failed. Such a number is now null there, with a warning
    naming it, as for other bad numbers; the goal stays active, as nagi-ledger keeps it."""
    world["goal"].write_text(
        '{"goal": "ship the widget", "remaining": NaN, "max_turns": 1e400, '
        '"created": "2026-08-01T00:00:00+00:00", "weight": -Infinity, "w": [1, NaN]}',
        encoding="utf-8")
    world["history"].write_text(
        '{"goal": "old", "outcome": "done", "note": null, "created": null, "closed": null, '
        '"turns_used": NaN, "score": 1e999}\n', encoding="utf-8")
    status = cli_run("status")
    assert status.exit_code == 0, status.output
    for warning in ("remaining is not a whole number: NaN",
                    "max_turns is not a whole number: Infinity",
                    "weight is -Infinity, a number JSON cannot hold: stored as null",
                    "w[1] is NaN, a number JSON cannot hold: stored as null",
                    "turns_used is not a whole number: NaN",
                    "score is Infinity, a number JSON cannot hold: stored as null"):
        assert warning in status.output, warning
    assert "active goal (?/? turns left), 1 closed goal" in status.output
    [row] = json.loads(cli_run("query", "--format", "json", "SELECT state FROM goals").stdout)
    assert _strict_json(row["state"]) == {
        "goal": "ship the widget", "remaining": None, "max_turns": None,
        "created": "2026-08-01T00:00:00+00:00", "weight": None, "w": [1, None]}
    [event] = json.loads(cli_run("query", "--format", "json",
                                 "SELECT extra FROM goal_events").stdout)
    assert _strict_json(event["extra"]) == {"score": None}


def test_torn_last_line_of_the_history_is_ignored_with_a_warning(cli_run, world):
    world["history"].write_bytes(
        (history_line("first", "done") + history_line("second", "aborted")).encode()
        + b'{"goal": "third", "outc')
    cli_run("load")
    out = cli_run("query", "--format", "csv", "SELECT goal FROM goal_events ORDER BY line")
    assert out.output.splitlines()[1:] == ["first", "second"]
    assert (f"{world['history']}:3: torn last line (an interrupted write, no newline at the "
            "end); line ignored") in cli_run("status").output


def test_an_entry_appended_after_a_torn_line_is_kept(cli_run, world):
    # goal_gate.py appends with "a": after an interrupted write the next entry continues
    # the torn line.
    world["history"].write_text(
        history_line("first", "done") + '{"goal": "torn", "outc'
        + history_line("after the tear", "budget_exhausted", None, 10), encoding="utf-8")
    cli_run("load")
    out = cli_run("query", "--format", "csv",
                  "SELECT line, goal, outcome FROM goal_events ORDER BY line").output
    assert out.splitlines()[1:] == ["1,first,done", "2,after the tear,budget_exhausted"]
    assert ("2: a torn entry (an interrupted write) ran into the next one: its first 22 "
            "characters ignored") in cli_run("status").output


def test_lines_that_are_not_json_objects_are_skipped_with_their_line(cli_run, world):
    world["history"].write_bytes(
        history_line("ok", "done").encode() + b"[1, 2]\n" + b"not json\n" + b"\n"
        + b'{"goal": "bad \xff bytes"}\n' + history_line("ok too", "aborted").encode())
    cli_run("load")
    out = cli_run("query", "--format", "csv", "SELECT line, goal FROM goal_events ORDER BY line")
    assert out.output.splitlines()[1:] == ["1,ok", "6,ok too"]
    status = cli_run("status").output
    assert f"{world['history']}:2: not a JSON object (a JSON list); line ignored" in status
    assert f"{world['history']}:3: not a JSON object (Expecting value" in status
    assert f"{world['history']}:5: invalid UTF-8 at byte offset 14 of the line" in status


def test_goal_files_are_never_written_and_reloaded_only_when_changed(cli_run, world):
    from toolkit.config import resolve
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    write_goal(world["goal"])
    world["history"].write_text(history_line("a", "done"), encoding="utf-8")
    before = (file_state(world["goal"]), file_state(world["history"]))
    cfg = resolve()
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        first = {r.source: r for r in store.refresh(cfg).results}["goals"]
        again = {r.source: r for r in store.refresh(cfg).results}["goals"]
        with world["history"].open("a", encoding="utf-8") as fh:
            fh.write(history_line("b", "aborted"))
        grown = {r.source: r for r in store.refresh(cfg).results}["goals"]
        events = store.scalar("SELECT count(*) FROM goal_events")
    assert (first.skipped, again.skipped, grown.skipped) == (False, True, False)
    assert events == 2
    assert before[0] == file_state(world["goal"])
    assert file_state(world["history"])[2] > before[1][2]  # only our own append


# =========================================================================== the brief

def test_nothing_open_prints_nothing(cli_run, world):
    result = brief(cli_run)
    assert result.stdout == ""


def test_active_goal(cli_run, world):
    write_goal(world["goal"])
    assert brief(cli_run).stdout == \
        f"{HEADER}\n\n### アクティブ goal\n- ship the widget (remaining 4/10)\n"


def test_goal_values_print_as_nagi_ledger_prints_them(cli_run, world):
    world["goal"].write_text(json.dumps({"goal": None, "remaining": 4.0, "max_turns": [1, 2],
                                         "created": True}), encoding="utf-8")
    assert brief(cli_run).stdout == \
        f"{HEADER}\n\n### アクティブ goal\n- None (remaining 4.0/[1, 2])\n"


def test_long_goal_is_cut_at_200_characters(cli_run, world):
    write_goal(world["goal"], "g" * 300)
    line = brief(cli_run).stdout.splitlines()[3]
    assert line == "- " + "g" * 199 + "… (remaining 4/10)"


def test_dispatches_without_a_verdict_newest_first(cli_run, world):
    db = world["db"]
    audit_ops.log_dispatch(db, "task alpha pending", "nagi-implementer", "sonnet", "did stuff")
    verified = audit_ops.log_dispatch(db, "task beta confirmed", "nagi-implementer", "sonnet",
                                      "did stuff")
    audit_ops.log_verdict(db, verified["id"], "CONFIRMED", "checked out")
    audit_ops.log_dispatch(db, "task gamma pending", "fork", "opus", "more")
    assert brief(cli_run).stdout == (
        f"{HEADER}\n\n### 検証待ち\n- task gamma pending — fork/opus\n"
        "- task alpha pending — nagi-implementer/sonnet\n")


def test_dead_ends_and_no_gos_but_not_what_works(cli_run, world):
    db = world["db"]
    audit_ops.log_approach(db, "task-a", "tried approach one", "DEAD_END", "crashed")
    audit_ops.log_approach(db, "task-b", "tried approach two", "NO_GO", "too risky")
    audit_ops.log_approach(db, "task-c", "tried approach three", "WORKS", "confirmed")
    assert brief(cli_run).stdout == (
        f"{HEADER}\n\n### 直近の dead-end\n- task-b: tried approach two\n"
        "- task-a: tried approach one\n")


def test_the_days_window_counts_back_from_now(cli_run, world):
    db = make_audit_db(world["db"], samples=False)
    for ts, task in [("2026-04-20 12:00:00", "ancient"), ("2026-05-01 12:00:01", "recent"),
                     ("2026-05-04 12:00:01", "after now")]:
        insert(db, "dispatches", ts=ts, task=task, agent_type="fork", model="opus",
               brief_summary="x")
    assert brief(cli_run, "--now", NOW).stdout == \
        f"{HEADER}\n\n### 検証待ち\n- recent — fork/opus\n"
    assert "ancient" in brief(cli_run, "--now", NOW, "--days", "20").stdout
    # 0 or less means the default, as in nagi-ledger
    assert brief(cli_run, "--now", NOW, "--days", "0").stdout == \
        brief(cli_run, "--now", NOW).stdout


@pytest.mark.parametrize(("args", "warnings"), [
    (("--days", "abc"), 1), (("--days", "2.5", "--max-items", "x"), 2), (("--bogus",), 1),
    (("--days", "0", "extra"), 1), (("--max-items",), 1)])
def test_an_option_nagi_ledger_ignores_leaves_the_brief_as_without_it(cli_run, world, args,
                                                                      warnings):
    """nagi-ledger's session_brief.py ignores a --days or --max-items that is not a whole
    number or has no value, and arguments it does not know, and prints its brief (a
    SessionStart hook must not lose it to a typo): so does `audit brief`, byte for byte,
    warning on stderr. It printed no brief and exited 2."""
    write_goal(world["goal"])
    audit_ops.log_dispatch(world["db"], "pending", "fork", "opus", "x")
    plain = brief(cli_run).stdout
    result = brief(cli_run, *args)
    assert result.stdout == plain and "pending" in plain
    assert result.stderr.count("ignored, as nagi-ledger's session_brief does") == warnings


def test_a_toolkit_option_after_audit_brief_is_a_usage_error(cli_run, world):
    """Arguments audit brief does not know are ignored, as nagi-ledger's hook ignores them,
    but not one of toolkit's own options given after the command: it would be silently
    unused (the brief read the default DB, not the --audit-db given)."""
    result = cli_run("audit", "brief", "--audit-db", "/other.db")
    assert result.exit_code == 2
    assert "--audit-db is an option of toolkit, not of audit brief: give it before the " \
           "command" in result.stderr


def test_the_window_of_an_injected_now_ends_as_the_other_audit_commands_end_it(cli_run,
                                                                              world):
    """A row written by hand in another shape (``T``, ``Z``, an offset) is in the brief's
    --now window when its time is, as in `audit search`/`report`/`stats` (the end compares
    times, not texts: '2026-05-04T11:00:00Z' sorts after '2026-05-04 12:00:00' as text); a
    ts that is no time at all passes the end, as there."""
    db = make_audit_db(world["db"], samples=False)
    for ts, task in [("2026-05-04T11:00:00Z", "zulu before now"),
                     ("2026-05-04T20:30:00+09:00", "tokyo before now"),
                     ("2026-05-04T12:00:01Z", "zulu after now"),
                     ("2026-05-04T12:30:00+00:00", "offset after now")]:
        insert(db, "approaches", ts=ts, task=task, approach="a", outcome="DEAD_END",
               reason="r")
    out = brief(cli_run, "--now", NOW).stdout
    assert out == (f"{HEADER}\n\n### 直近の dead-end\n- tokyo before now: a\n"
                   "- zulu before now: a\n")
    hits = json.loads(cli_run("audit", "search", "now", "--since-days", "3", "--now", NOW,
                                "--json").stdout)
    assert sorted(h["title"] for h in hits) == ["tokyo before now: a", "zulu before now: a"]


def test_max_items_caps_each_section(cli_run, world):
    db = make_audit_db(world["db"], samples=False)
    for i in range(8):
        insert(db, "dispatches", ts="2026-05-04 11:00:00", task=f"task number {i}",
               agent_type="fork", model="opus", brief_summary="x")
    out = brief(cli_run, "--now", NOW, "--max-items", "2").stdout
    assert out.count("task number") == 2
    assert "task number 7" in out and "task number 6" in out
    assert brief(cli_run, "--now", NOW).stdout.count("task number") == 5


def test_long_fields_are_cut(cli_run, world):
    db = make_audit_db(world["db"], samples=False)
    insert(db, "dispatches", ts="2026-05-04 11:00:00", task="x" * 500, agent_type="fork",
           model="opus", brief_summary="x")
    insert(db, "approaches", ts="2026-05-04 11:00:00", task="t" * 100, approach="a" * 100,
           outcome="DEAD_END", reason="r")
    lines = brief(cli_run, "--now", NOW).stdout.splitlines()
    assert lines[3] == "- " + "x" * 69 + "… — fork/opus"
    assert lines[6] == "- " + "t" * 59 + "…: " + "a" * 59 + "…"


def test_dirty_repositories_with_their_count_clean_and_missing_ones_skipped(cli_run, world,
                                                                            tmp_path,
                                                                            monkeypatch):
    dirty = repo(tmp_path / "dirty", untracked=2)
    clean = repo(tmp_path / "clean")
    also = repo(tmp_path / "also dirty", untracked=1)
    listed = [str(dirty), str(tmp_path / "missing"), str(clean), str(also) + "/", " "]
    monkeypatch.setenv("NAGI_BRIEF_REPOS", os.pathsep.join(listed))
    assert brief(cli_run).stdout == (
        f"{HEADER}\n\n### 未 commit\n- {dirty} (2 changed)\n- {also} (1 changed)\n")


def test_only_clean_or_missing_repositories_print_nothing(cli_run, world, tmp_path,
                                                          monkeypatch):
    clean = repo(tmp_path / "clean")
    monkeypatch.setenv("NAGI_BRIEF_REPOS", os.pathsep.join([str(clean), str(tmp_path / "no")]))
    assert brief(cli_run).stdout == ""


def test_without_a_list_the_working_folders_repository_is_checked(cli_run, world, tmp_path,
                                                                  monkeypatch):
    work = repo(tmp_path / "work", untracked=3)
    (work / "sub").mkdir()
    monkeypatch.delenv("NAGI_BRIEF_REPOS")
    monkeypatch.chdir(work / "sub")
    assert brief(cli_run).stdout == f"{HEADER}\n\n### 未 commit\n- {work} (3 changed)\n"
    monkeypatch.chdir(tmp_path)  # no git repository here: nothing to check
    assert brief(cli_run).stdout == ""


def test_a_damaged_goal_file_leaves_the_other_sections(cli_run, world):
    world["goal"].write_text("{not valid json at all", encoding="utf-8")
    audit_ops.log_dispatch(world["db"], "still shows up", "nagi-implementer", "sonnet", "x")
    assert brief(cli_run).stdout == \
        f"{HEADER}\n\n### 検証待ち\n- still shows up — nagi-implementer/sonnet\n"


@pytest.mark.parametrize("damage", ["junk", "folder"])
def test_an_unopenable_db_leaves_the_goal_and_warns(cli_run, world, damage):
    if damage == "junk":
        world["db"].write_bytes(b"this is not a database" * 50)
    else:
        world["db"].mkdir()
    write_goal(world["goal"], "goal survives a broken ledger db", 3, 5)
    result = brief(cli_run)
    assert result.stdout == (f"{HEADER}\n\n### アクティブ goal\n"
                             "- goal survives a broken ledger db (remaining 3/5)\n")
    assert "cannot open the audit DB; its sections are left out" in result.stderr


def test_a_db_query_that_fails_prints_no_brief_at_all(cli_run, world):
    # session_brief.py fails open: an error in a query ends it with nothing printed
    conn = sqlite3.connect(world["db"])
    conn.execute("CREATE TABLE dispatches (id INTEGER PRIMARY KEY, ts TEXT, task TEXT)")
    conn.commit()
    conn.close()
    write_goal(world["goal"])
    result = brief(cli_run)
    assert result.stdout == ""
    assert "no such column: agent_type; nagi-ledger prints no brief then" in result.stderr


def test_a_goal_that_cannot_be_printed_prints_no_brief_at_all(cli_run, world):
    # session_brief.py: json.loads keeps a "\\ud800" escape as a lone surrogate, print()
    # cannot encode it, and __main__'s fail-open ends it with nothing on stdout and exit 0
    # ("session_brief error: 'utf-8' codec can't encode character '\\ud800' ..." on stderr)
    world["goal"].write_text('{"goal": "\\ud800 lone", "remaining": 1, "max_turns": 2, '
                             '"created": 3}', encoding="utf-8")
    result = brief(cli_run)
    assert result.stdout == ""
    assert "lone surrogate" in result.stderr and "nagi-ledger prints no brief" in result.stderr


def test_a_missing_table_counts_as_empty_and_the_db_is_not_created(cli_run, world):
    conn = sqlite3.connect(world["db"])
    conn.execute("CREATE TABLE dispatches (id INTEGER PRIMARY KEY, ts TEXT, task TEXT, "
                 "agent_type TEXT, model TEXT, verdict TEXT)")
    conn.execute("INSERT INTO dispatches VALUES (1, '2026-05-04 11:00:00', 't', 'a', 'm', NULL)")
    conn.commit()
    conn.close()
    assert brief(cli_run, "--now", NOW).stdout == f"{HEADER}\n\n### 検証待ち\n- t — a/m\n"
    world["db"].unlink()
    assert brief(cli_run).stdout == ""
    assert not world["db"].exists()


def test_sections_over_the_cap_are_dropped_lowest_priority_first(cli_run, world, tmp_path,
                                                                 monkeypatch):
    db = make_audit_db(world["db"], samples=False)
    for i in range(20):
        insert(db, "dispatches", ts="2026-05-04 11:00:00", task=f"dispatch task {i} " + "y" * 60,
               agent_type="nagi-implementer", model="sonnet", brief_summary="x")
        insert(db, "approaches", ts="2026-05-04 11:00:00", task=f"approach task {i} " + "z" * 60,
               approach="attempted approach " + "w" * 60, outcome="DEAD_END", reason="r")
    monkeypatch.setenv("NAGI_BRIEF_REPOS", str(repo(tmp_path / "dirty", untracked=1)))
    write_goal(world["goal"])
    out = brief(cli_run, "--now", NOW, "--max-items", "12").stdout
    assert len(out) - 1 <= 1500
    assert out.endswith("\n\n(truncated)\n")
    assert "### 検証待ち" in out
    assert "### 直近の dead-end" not in out and "### 未 commit" not in out
    # under the cap: every section, no marker
    small = brief(cli_run, "--now", NOW, "--max-items", "2").stdout
    assert "(truncated)" not in small and "### 未 commit" in small


def test_one_section_over_the_cap_is_cut_hard(cli_run, world):
    db = make_audit_db(world["db"], samples=False)
    for i in range(30):
        insert(db, "dispatches", ts="2026-05-04 11:00:00", task=f"task {i} " + "q" * 80,
               agent_type="impl", model="opus", brief_summary="x")
    out = brief(cli_run, "--now", NOW, "--max-items", "30").stdout
    text = out[:-1]
    assert len(text) == 1500
    assert text.endswith("\n\n(truncated)")
    assert text.startswith(f"{HEADER}\n\n### 検証待ち\n- task 29 ")


def test_the_brief_writes_nothing(cli_run, world):
    db = world["db"]
    audit_ops.log_dispatch(db, "some task", "nagi-implementer", "sonnet", "x")
    audit_ops.log_approach(db, "some task", "some approach", "DEAD_END", "reason")
    write_goal(world["goal"], "do not touch me", 2, 5)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = {p.name: file_state(p) for p in world["goal"].parent.iterdir()}
    assert brief(cli_run).stdout != ""
    after = {p.name: file_state(p) for p in world["goal"].parent.iterdir()
             if p.name in before}
    assert before == after
    assert not (world["root"] / ".toolkit").exists()  # no store either


def test_the_brief_leaves_a_checked_repositorys_index_alone(cli_run, world, tmp_path,
                                                            monkeypatch):
    """`git status` refreshes a repository's index and writes it back when it can (a file's
    stat data changed, its content did not): the brief only reads, so the user's own git
    command never meets the brief's index.lock, and .git/index is as it was."""
    path = repo(tmp_path / "checked", untracked=1)
    git("add", "file0.txt", cwd=path)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "one",
        cwd=path)
    tracked = path / "file0.txt"
    os.utime(tracked, ns=(tracked.stat().st_atime_ns, tracked.stat().st_mtime_ns + 10**9))
    (path / "new.txt").write_text("dirty", encoding="utf-8")
    monkeypatch.setenv("NAGI_BRIEF_REPOS", str(path))
    index = path / ".git" / "index"
    before = file_state(index), index.read_bytes()
    assert "### 未 commit" in brief(cli_run, "--now", NOW).stdout
    assert (file_state(index), index.read_bytes()) == before


# =========================================================================== site and handoff

HOSTILE_GOAL = "<script>alert('goal')</script> ship {{ 7*7 }}"


def _goal_world(base: Path):  # type: ignore[no-untyped-def]
    """A project with nothing but nagi-ledger's goal files (what the goals page and the
    dashboard's goal card show; the other sources would only add pages to build)."""
    from tests._site_helpers import TODAY, World
    from toolkit.config import resolve

    home, root = base / "home", base / "acme-api"
    root.mkdir(parents=True)
    (root / "toolkit.yaml").write_text("", encoding="utf-8")
    cfg = resolve(project=root, env={"HOME": str(home)}, cwd=root, today=TODAY.isoformat())
    world = World(root=root, home=home, cfg=cfg.with_overrides(analyses=False))
    nagi = home / ".nagi"
    nagi.mkdir(parents=True)
    write_goal(nagi / "goal.json", HOSTILE_GOAL, remaining=4, max_turns=10, extensions=1)
    (nagi / "goal_history.jsonl").write_text(
        history_line("write the docs", "done", "README updated in a1b2c3d", 2,
                     "2026-05-08T10:00:00+00:00")
        + history_line("port the parser", "aborted", "blocked upstream", 5,
                       "2026-05-09T10:00:00+00:00")
        + '{"goal": "torn', encoding="utf-8")
    return world


def test_site_has_a_goals_page_linked_from_the_dashboard(tmp_path):
    from tests._site_helpers import build, scan

    world = _goal_world(tmp_path)
    result = build(world)
    assert result.warnings == []
    page = scan(result.out / "audit" / "goals" / "index.html")
    text = page.body_text
    assert HOSTILE_GOAL in text  # shown as text ...
    assert "alert('goal')</script>" not in (result.out / "audit" / "goals" / "index.html") \
        .read_text(encoding="utf-8")  # ... never as markup
    assert "4 of 10 turns left" in text
    # the history, newest first, and the outcomes
    assert text.index("port the parser") < text.index("write the docs")
    assert "README updated in a1b2c3d" in text and "blocked upstream" in text
    assert "2026-05-09 10:00:00" in text
    home = scan(result.out / "index.html")
    hrefs = {dict(a).get("href") for t, a in home.tags if t == "a"}
    assert "audit/goals/" in hrefs
    assert HOSTILE_GOAL in home.body_text and "2 closed goals" in home.body_text
    # the torn line is a warning of the build's sources
    warnings = scan(result.out / "warnings" / "index.html").body_text
    assert "torn last line" in warnings


def test_site_without_goal_files_says_so(formats_site):
    from tests._site_helpers import scan

    _world, site = formats_site  # the formats project has no goal files
    assert "No active goal." in scan(site / "index.html").body_text
    goals = scan(site / "audit" / "goals" / "index.html").body_text
    assert "No active goal." in goals and "No goal has closed yet." in goals


def _handoff(monkeypatch):  # type: ignore[no-untyped-def]
    import datetime as dt

    from toolkit import config
    from toolkit.handoff import export_report
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    cfg = config.resolve()
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        return export_report(store, cfg, now=dt.datetime(2026, 5, 6, 9, 30))


def test_handoff_shows_the_active_goal_right_after_the_summary(project, monkeypatch):
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    write_goal(project.home / ".nagi" / "goal.json", f"ship *it* with {token}", remaining=3,
               max_turns=20)
    text = _handoff(monkeypatch)
    lines = text.splitlines()
    goal = next(i for i, line in enumerate(lines) if line.startswith("**Active goal:**"))
    headings = [line for line in lines[:goal] if line.startswith("## ")]
    assert headings == ["## Summary", "## Active goal"]  # the summary, then the goal ...
    assert lines[goal] == ("**Active goal:** ship \\*it\\* with \\[REDACTED\\] (3 of 20 turns "
                           "left, set 2026-08-01 00:00 UTC)")  # ... escaped and redacted
    assert token not in text


def test_handoff_escapes_a_budget_that_is_not_a_number(project, monkeypatch):
    write_goal(project.home / ".nagi" / "goal.json", "g", remaining="<b>@team</b> *x*")
    line = next(x for x in _handoff(monkeypatch).splitlines() if x.startswith("**Active"))
    assert "<b>" not in line and "\\*x\\*" in line
    assert "`@team`" in line  # a code span: GitHub makes no mention of it, and it copies intact


def test_handoff_without_an_active_goal_has_no_goal_line(project, monkeypatch):
    (project.home / ".nagi" / "goal_history.jsonl").write_text(history_line("old", "done"),
                                                                encoding="utf-8")
    assert "Active goal" not in _handoff(monkeypatch)


@pytest.mark.parametrize(("option", "value", "shown"), [
    ("--max-items", str(10**20), False),  # too large for SQLite: nagi-ledger prints nothing
    ("--days", str(10**20), True),  # SQLite has no such date: no rows, the goal stays
])
def test_huge_numbers_are_answered_as_nagi_ledger_answers_them(cli_run, world, option, value,
                                                              shown):
    write_goal(world["goal"])
    audit_ops.log_dispatch(world["db"], "pending", "fork", "opus", "x")
    result = brief(cli_run, option, value)
    goal_only = f"{HEADER}\n\n### アクティブ goal\n- ship the widget (remaining 4/10)\n"
    assert result.stdout == (goal_only if shown else "")


def _load_goals(cli_run) -> str:  # type: ignore[no-untyped-def]
    out = cli_run("load").output
    return next(line for line in out.splitlines() if line.startswith("goals "))


def test_an_appended_history_is_read_from_where_the_last_load_stopped(cli_run, world):
    world["history"].write_text(history_line("first", "done") + "not json\n"
                                + history_line("second", "aborted"), encoding="utf-8")
    assert "(2 new)" in _load_goals(cli_run)
    with world["history"].open("a", encoding="utf-8") as fh:
        fh.write(history_line("third", "superseded"))
    assert "(1 new)" in _load_goals(cli_run)  # only the appended line was read
    out = cli_run("query", "--format", "csv", "SELECT line, goal FROM goal_events ORDER BY line")
    assert out.output.splitlines()[1:] == ["1,first", "3,second", "4,third"]
    # the warning about line 2 is kept although line 2 was not read again
    assert f"{world['history']}:2: not a JSON object" in cli_run("status").output


def test_a_torn_tail_is_read_again_once_the_next_append_completes_it(cli_run, world):
    world["history"].write_text(history_line("first", "done") + '{"goal": "torn',
                                encoding="utf-8")
    _load_goals(cli_run)
    assert "torn last line" in cli_run("status").output
    with world["history"].open("a", encoding="utf-8") as fh:
        fh.write(history_line("after", "aborted"))
    assert "(1 new)" in _load_goals(cli_run)
    out = cli_run("query", "--format", "csv", "SELECT line, goal FROM goal_events ORDER BY line")
    assert out.output.splitlines()[1:] == ["1,first", "2,after"]
    status = cli_run("status").output
    assert "torn last line" not in status
    assert "2: a torn entry (an interrupted write) ran into the next one" in status


def test_a_rewritten_history_is_read_whole(cli_run, world):
    world["history"].write_text(history_line("a", "done") + history_line("b", "done"),
                                encoding="utf-8")
    _load_goals(cli_run)
    world["history"].write_text(history_line("c", "aborted") + history_line("d", "done")
                                + history_line("e", "done"), encoding="utf-8")
    assert "(3 new)" in _load_goals(cli_run)
    out = cli_run("query", "--format", "csv", "SELECT line, goal FROM goal_events ORDER BY line")
    assert out.output.splitlines()[1:] == ["1,c", "2,d", "3,e"]
    world["history"].write_text(history_line("f", "done"), encoding="utf-8")  # shorter
    _load_goals(cli_run)
    out = cli_run("query", "--format", "csv", "SELECT line, goal FROM goal_events ORDER BY line")
    assert out.output.splitlines()[1:] == ["1,f"]
