"""`toolkit mcp` over a real stdio connection, driven by the MCP SDK's own client."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from tests._audit_helpers import _no_injected_now, rows  # noqa: F401 - autouse fixture

NAGI_TOOLS = {"ledger_log_action", "ledger_log_dispatch", "ledger_log_verdict",
              "ledger_task_status", "ledger_session_report", "ledger_stats",
              "ledger_log_approach", "ledger_check_approaches", "ledger_search",
              "ledger_similar_tasks"}
EXTRA_TOOLS = {"smith_ledger_search", "slop_ledger_query"}


class Session:
    """A thin synchronous-looking wrapper: call(name, **args) -> (is_error, value)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    async def call(self, name: str, **args: Any) -> tuple[bool, Any]:
        result = await self.session.call_tool(name, args)
        if result.is_error:
            return True, result.content[0].text
        data = result.structured_content
        # the SDK wraps non-object results (lists, strings) as {"result": ...}
        if isinstance(data, dict) and set(data) == {"result"}:
            data = data["result"]
        return False, data


def run_session(project_root: Path, env: dict[str, str], errlog: Path, script) -> Any:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "toolkit", "mcp"],
                                   env=env, cwd=str(project_root))

    async def main() -> Any:
        with open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return await script(session, Session(session))

    return asyncio.run(main())


def _env(project) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = project.env()
    env["PATH"] = os.environ.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the toolkit under test
    return env


def test_mcp_server_speaks_nagi_ledgers_tools_over_stdio(project, tmp_path):
    # start from no audit DB at all: readers must not create it, the first writer does
    for extra in ("", "-wal", "-shm"):
        project.audit_db.with_name(project.audit_db.name + extra).unlink(missing_ok=True)
    errlog = tmp_path / "server.log"
    db = project.audit_db

    async def script(raw, s: Session) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tools = (await raw.list_tools()).tools
        out["tools"] = {t.name: t for t in tools}
        out["status_before"] = await s.call("ledger_task_status", task="smoke-task")
        out["db_after_read"] = db.exists()
        out["action"] = await s.call("ledger_log_action", tier=1, category="smoke_test",
                                     description="stdio smoke test action",
                                     project="toolkit")
        out["bad_tier"] = await s.call("ledger_log_action", tier=9, category="x",
                                       description="y")
        out["d1"] = await s.call("ledger_log_dispatch", task="smoke-task", agent_type="fork",
                                 model="sonnet", brief_summary="first try")
        out["d2"] = await s.call("ledger_log_dispatch", task="smoke-task", agent_type="fork",
                                 model="opus", brief_summary="second try")
        out["d3"] = await s.call("ledger_log_dispatch", task="Smoke task!", agent_type="fork",
                                 model="opus", brief_summary="reworded")
        out["v1"] = await s.call("ledger_log_verdict", dispatch_id=out["d1"][1]["id"],
                                 verdict="CONFIRMED", notes="looks good")
        out["v_unknown"] = await s.call("ledger_log_verdict", dispatch_id=999,
                                        verdict="CONFIRMED")
        out["v_bad"] = await s.call("ledger_log_verdict", dispatch_id=1, verdict="MAYBE")
        out["status_mid"] = await s.call("ledger_task_status", task="smoke-task")
        out["v2"] = await s.call("ledger_log_verdict", dispatch_id=out["d2"][1]["id"],
                                 verdict="REFUTED")
        out["status"] = await s.call("ledger_task_status", task="smoke-task")
        out["approach"] = await s.call("ledger_log_approach", task="smoke-task",
                                       approach="tried rm -rf on the venv", outcome="DEAD_END",
                                       reason="broke unrelated deps")
        out["bad_outcome"] = await s.call("ledger_log_approach", task="t", approach="a",
                                          outcome="MAYBE", reason="r")
        out["approaches"] = await s.call("ledger_check_approaches", task="smoke-task")
        out["stats"] = await s.call("ledger_stats")
        out["report"] = await s.call("ledger_session_report", since_hours=24)
        out["search"] = await s.call("ledger_search", query="smoke")
        out["search_kinds"] = await s.call("ledger_search", query="smoke",
                                           kinds=["approaches"])
        out["similar"] = await s.call("ledger_similar_tasks", task="smoke task")
        out["smith"] = await s.call("smith_ledger_search", query="migration")
        out["slop"] = await s.call("slop_ledger_query", status="wontfix")
        out["slop_bad"] = await s.call("slop_ledger_query", bucket="dust")
        return out

    try:
        out = run_session(project.root, _env(project), errlog, script)
    except BaseException:
        print(errlog.read_text())
        raise

    tools = out["tools"]
    assert set(tools) == NAGI_TOOLS | EXTRA_TOOLS
    assert set(tools["ledger_search"].input_schema["properties"]) == \
        {"query", "kinds", "limit", "offset", "since_days"}
    assert tools["ledger_search"].input_schema["required"] == ["query"]
    assert tools["ledger_similar_tasks"].input_schema["properties"]["min_score"]["default"] \
        == 0.35
    assert tools["ledger_session_report"].input_schema["properties"]["since_hours"]["default"] \
        == 24
    assert tools["ledger_task_status"].annotations.read_only_hint is True
    assert tools["ledger_log_dispatch"].annotations.read_only_hint is False
    assert tools["slop_ledger_query"].annotations.read_only_hint is True

    assert out["status_before"] == (False, {"dispatch_count": 0, "retry_count": 0,
                                            "last_verdict": None, "over_retry_limit": False})
    assert out["db_after_read"] is False
    assert out["action"] == (False, {"id": 1})
    assert out["bad_tier"] == (True, "Error executing tool ledger_log_action: Invalid tier 9: "
                               "must be one of (0, 1, 2) (0=info, 1=notable, 2=high-impact).")
    assert out["d1"] == (False, {"id": 1, "retry_count": 0, "similar": []})
    assert out["d2"] == (False, {"id": 2, "retry_count": 1, "similar": []})
    d3 = out["d3"][1]
    assert d3["retry_count"] == 0
    assert [(x["task"], x["kind"], x["id"]) for x in d3["similar"]] == \
        [("smoke-task", "dispatches", 2)]
    assert out["v1"] == (False, {"ok": True, "task": "smoke-task"})
    assert out["v_unknown"] == (True, "Error executing tool ledger_log_verdict: No dispatch "
                                "found with id=999. Call ledger_log_dispatch first, or check "
                                "the id via ledger_task_status.")
    assert out["v_bad"][0] is True and "must be one of ('CONFIRMED', 'REFUTED', 'PARTIAL')" \
        in out["v_bad"][1]
    assert out["status_mid"][1]["last_verdict"] is None  # newest dispatch not verified yet
    assert out["status"] == (False, {"dispatch_count": 2, "retry_count": 1,
                                     "last_verdict": "REFUTED", "over_retry_limit": False})
    assert out["approach"] == (False, {"id": 1})
    assert out["bad_outcome"][0] is True
    approaches = out["approaches"][1]
    assert approaches["total"] == 1 and approaches["no_gos"] == [] and approaches["works"] == []
    assert approaches["dead_ends"][0]["approach"] == "tried rm -rf on the venv"
    assert out["stats"] == (False, {
        "actions_by_tier": {"0": 0, "1": 1, "2": 0},
        "actions_by_category": {"smoke_test": 1}, "dispatch_count": 3,
        "verdicts": {"CONFIRMED": 1, "REFUTED": 1, "PARTIAL": 0, "PENDING": 1}})
    report = out["report"][1]
    assert report.startswith("## 自律実行リスト (last 24h)\n\n### smoke_test\n"
                             "- [Tier 1] stdio smoke test action (toolkit)\n")
    assert report.endswith("## Dispatches\n- smoke-task → fork/sonnet → CONFIRMED\n"
                           "- smoke-task → fork/opus → REFUTED\n"
                           "- Smoke task! → fork/opus → PENDING")
    search = out["search"][1]
    assert {(r["kind"], r["id"]) for r in search} == {
        ("actions", 1), ("dispatches", 1), ("dispatches", 2), ("dispatches", 3),
        ("approaches", 1)}
    assert all(set(r) == {"id", "kind", "ts", "title", "status"} for r in search)
    assert [r["kind"] for r in out["search_kinds"][1]] == ["approaches"]
    similar = out["similar"][1]
    assert similar[0]["task"] in ("smoke-task", "Smoke task!") and similar[0]["score"] >= 0.9
    assert {r["task"] for r in similar} == {"smoke-task", "Smoke task!"}
    smith = out["smith"][1]
    assert {r["title"] for r in smith} >= {"Editing an applied migration in place",
                                          "Run the migration dry-run before applying schema "
                                          "changes"}
    assert all(r["entry_id"].startswith(r["file"] + "/") for r in smith)
    slop = out["slop"][1]
    assert slop["matched"] == 1 and slop["entries"][0]["status"] == "wont_fix"
    assert out["slop_bad"][0] is True and "Invalid bucket 'dust'" in out["slop_bad"][1]

    # what the server wrote is a nagi-ledger DB that plain sqlite3 reads
    assert rows(db, "SELECT id, task, verdict, verdict_notes FROM dispatches ORDER BY id") == [
        (1, "smoke-task", "CONFIRMED", "looks good"), (2, "smoke-task", "REFUTED", None),
        (3, "Smoke task!", None, None)]
    assert rows(db, "PRAGMA journal_mode") == [("wal",)]
    log = errlog.read_text()
    assert "Traceback" not in log


def test_mcp_readers_honour_an_injected_now(project, tmp_path):
    env = _env(project)
    env["TOOLKIT_NOW"] = "2026-05-04 12:00:00"

    async def script(raw, s: Session) -> Any:
        return (await s.call("ledger_stats", days=1),
                await s.call("ledger_session_report", since_hours=6))

    stats, report = run_session(project.root, env, tmp_path / "server.log", script)
    assert stats[1]["dispatch_count"] == 3 and stats[1]["verdicts"]["PENDING"] == 1
    assert report[1] == ("## 自律実行リスト (last 6h)\n\n(no actions)\n\n## Dispatches\n"
                         "- Audit logging for admin endpoints → fork/opus → PENDING")
    assert rows(project.audit_db, "SELECT count(*) FROM actions") == [(3,)]  # readers only


def test_mcp_tools_answer_huge_numbers_and_bad_paths_as_tool_errors(project, tmp_path):
    """FAULTS I3 and the error boundary over MCP: nagi-ledger's answer for a window SQLite
    cannot compute, and a path error as a one-line tool error, not a crashed server."""
    errlog = tmp_path / "server.log"

    async def script(raw, s: Session) -> dict[str, Any]:
        return {"report": await s.call("ledger_session_report", since_hours=10**11),
                "stats": await s.call("ledger_stats", days=800000),
                "search": await s.call("ledger_search", query="webhook", since_days=1e8)}

    out = run_session(project.root, _env(project), errlog, script)
    assert out["report"] == (False, "No entries in the last 100000000000h.")
    assert out["stats"][0] is False
    assert out["stats"][1]["dispatch_count"] == 3  # a start in year -164: every row
    assert out["search"] == (False, [])

    async def read(raw, s: Session) -> Any:
        return await s.call("ledger_stats")

    env = {**_env(project), "TOOLKIT_DB": "/dev/null/x/ledger.duckdb"}
    expected = ("Error executing tool ledger_stats: /dev/null/x/ledger.duckdb: a part of "
                "this path is a file, not a folder")
    assert run_session(project.root, env, errlog, read) == (True, expected)
