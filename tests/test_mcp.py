"""`toolkit mcp` over a real stdio connection, driven by the MCP SDK's own client."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._audit_helpers import _no_injected_now, rows  # noqa: F401 - autouse fixture
from tests.conftest import make_project, reap

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


def run_session(project_root: Path, env: dict[str, str], errlog: Path, script,
                *server_args: str) -> Any:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "toolkit", "mcp", *server_args],
                                   env=env, cwd=str(project_root))

    async def main() -> Any:
        with open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return await script(session, Session(session))

    return asyncio.run(main())


def run_in_process(project_root: Path, env: dict[str, str], script,
                   monkeypatch: pytest.MonkeyPatch) -> Any:
    """``script`` against the server `toolkit mcp` builds, connected in this process (the
    SDK's in-memory transport), with ``env`` and ``project_root`` as its environment and
    folder: for tests about the tools' answers, not about the server process."""
    from mcp import Client

    from toolkit.config import resolve
    from toolkit.mcp_server import build_server

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(project_root)

    async def main() -> Any:
        async with Client(build_server(resolve())) as client:
            return await script(client, Session(client))

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
        out: dict[str, Any] = {"instructions": (await raw.initialize()).instructions}
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
    assert "Smith Ledger" in out["instructions"]  # the default set's instructions name its own
    assert set(tools["ledger_search"].input_schema["properties"]) == \
        {"query", "kinds", "limit", "offset", "since_days"}
    assert tools["ledger_search"].input_schema["required"] == ["query"]
    assert tools["ledger_search"].annotations.title == "Search Ledger"
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
    # similar is taken before the insert and lists the earlier dispatch of this very task
    d2 = out["d2"][1]
    assert (d2["id"], d2["retry_count"]) == (2, 1)
    assert [(x["kind"], x["id"], x["score"], x["verdict"]) for x in d2["similar"]] == \
        [("dispatches", 1, 1.0, None)]
    d3 = out["d3"][1]
    assert d3["retry_count"] == 0
    assert [(x["task"], x["kind"], x["id"], x["score"]) for x in d3["similar"]] == \
        [("smoke-task", "dispatches", 1, 0.8571), ("smoke-task", "dispatches", 2, 0.8571)]
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
    assert [(r["kind"], r["id"], r["score"]) for r in similar] == [
        ("dispatches", 3, 0.9524), ("dispatches", 1, 0.9), ("dispatches", 2, 0.9),
        ("approaches", 1, 0.9)]
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


# --------------------------------------------------------------------------- --tools nagi

NAGI_SCHEMAS = Path(__file__).parent / "fixtures" / "mcp" / "nagi_ledger_tools.json"


@pytest.fixture(scope="module")
def nagi_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One `--tools nagi` server on a new DB, started once for the two tests that read what
    it said: the tools it lists (with their schemas and annotations), then the checks of
    nagi-ledger's tests/smoke_stdio.py over real stdio. (what it said, the DB it wrote)"""
    base = tmp_path_factory.mktemp("nagi")
    project = make_project(base / "acme-api", base / "home")
    env = _env(project)
    db = base / "smoke" / "smoke_ledger.db"
    env["NAGI_LEDGER_DB"] = str(db)

    async def script(raw, s: Session) -> dict[str, Any]:
        tools = (await raw.list_tools()).tools
        out: dict[str, Any] = {
            "instructions": (await raw.initialize()).instructions,  # (the first answer's)
            "names": {t.name for t in tools},
            "listed": {t.name: {"inputSchema": t.input_schema,
                                "annotations": t.annotations.model_dump(by_alias=True,
                                                                        exclude_none=True)}
                       for t in tools}}

        async def call(name: str, **args: Any) -> Any:
            return await raw.call_tool(name, args)

        out["action"] = await call("ledger_log_action", tier=1, category="smoke_test",
                                   description="stdio smoke test action",
                                   project="nagi-ledger-mcp")
        out["dispatch"] = await call("ledger_log_dispatch", task="smoke-task",
                                     agent_type="fork", model="sonnet",
                                     brief_summary="smoke test dispatch")
        out["status"] = await call("ledger_task_status", task="smoke-task")
        out["bad_tier"] = await call("ledger_log_action", tier=9, category="x", description="y")
        out["approach"] = await call("ledger_log_approach", task="smoke-approach-task",
                                     approach="tried rm -rf on the venv", outcome="DEAD_END",
                                     reason="broke unrelated deps")
        out["check"] = await call("ledger_check_approaches", task="smoke-approach-task")
        out["search"] = await call("ledger_search", query="smoke")
        out["similar"] = await call("ledger_similar_tasks", task="smoke task")
        out["half_day"] = await call("ledger_search", query="smoke", since_days=0.5)
        return out

    out = run_session(project.root, env, base / "server.log", script, "--tools", "nagi")
    return out, db


def test_tools_nagi_serves_exactly_nagi_ledgers_tools_and_schemas(nagi_session):
    """`--tools nagi` is a drop-in for nagi-ledger's server: its ten tools and nothing else,
    with the input schemas and annotations nagi-ledger's own server lists (recorded from it
    in tests/fixtures/mcp/nagi_ledger_tools.json)."""
    import json

    expected = json.loads(NAGI_SCHEMAS.read_text(encoding="utf-8"))
    # no instructions, as nagi-ledger's server gives none: the toolkit's own name the Smith
    # and slop tools, which this set does not serve
    assert nagi_session[0]["instructions"] is None
    listed = nagi_session[0]["listed"]
    assert set(listed) == NAGI_TOOLS
    assert listed == expected
    assert listed["ledger_search"]["inputSchema"]["properties"]["since_days"]["anyOf"] == [
        {"type": "number"}, {"type": "null"}]


def test_nagi_ledgers_smoke_checks_pass_against_tools_nagi(nagi_session):
    """The checks of nagi-ledger's tests/smoke_stdio.py, over real stdio, on a new DB."""
    out, db = nagi_session
    assert out["names"] == NAGI_TOOLS  # no tool the smoke test does not know
    for key in ("action", "dispatch", "status", "approach", "check", "search", "similar",
                "half_day"):
        assert out[key].is_error is False, (key, out[key])
    assert "id" in out["action"].structured_content
    assert out["dispatch"].structured_content["retry_count"] == 0
    assert out["status"].structured_content["dispatch_count"] == 1
    assert out["bad_tier"].is_error is True
    assert "id" in out["approach"].structured_content
    check = out["check"].structured_content
    assert check["total"] == 1 and not check["no_gos"] and not check["works"]
    assert [d["approach"] for d in check["dead_ends"]] == ["tried rm -rf on the venv"]
    rows_ = out["search"].structured_content["result"]
    assert any(r["title"] == "smoke-task" for r in rows_)
    assert any(r["task"] == "smoke-task" for r in out["similar"].structured_content["result"])
    assert len(out["half_day"].structured_content["result"]) == len(rows_)  # all just written
    assert db.exists()


def _rpc(proc: Any, message: dict[str, Any]) -> dict[str, Any] | None:
    import json

    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    if "id" not in message:
        return None
    while True:
        line = proc.stdout.readline()
        assert line, "the server closed its output"
        reply = json.loads(line)
        if reply.get("id") == message["id"]:
            return reply


def test_results_on_the_wire_are_what_both_sdk_generations_read(project, tmp_path):
    """MCP SDK 1.x clients read camelCase ``isError``/``structuredContent`` from the JSON-RPC
    result; 2.x reads the same wire fields (as ``is_error``/``structured_content``). Checked
    on the raw stdio stream, with a 1.x client's protocol version."""
    import subprocess

    env = _env(project)
    env["NAGI_LEDGER_DB"] = str(tmp_path / "wire.db")
    with open(tmp_path / "server.log", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolkit", "mcp", "--tools", "nagi"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=env, cwd=str(project.root), text=True, encoding="utf-8")
        try:
            init = _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "sdk-1.x-like", "version": "0"}}})
            _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})

            def call(i: int, name: str, **args: Any) -> dict[str, Any]:
                reply = _rpc(proc, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                    "params": {"name": name, "arguments": args}})
                assert reply is not None and "result" in reply, reply
                return reply["result"]

            ok = call(2, "ledger_log_action", tier=1, category="c", description="wire test")
            bad = call(3, "ledger_log_action", tier=9, category="c", description="d")
            listed = call(4, "ledger_search", query="wire")
            text = call(5, "ledger_session_report", since_hours=24)
            bad_type = call(6, "ledger_search", query="wire", since_days="soon")
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
            reap(proc)
    assert init is not None and init["result"]["protocolVersion"] == "2025-06-18"
    assert ok["isError"] is False and ok["structuredContent"] == {"id": 1}
    assert ok["content"] == [{"type": "text", "text": '{\n  "id": 1\n}'}]
    assert bad["isError"] is True and "structuredContent" not in bad
    assert bad["content"][0]["text"] == (
        "Error executing tool ledger_log_action: Invalid tier 9: must be one of (0, 1, 2) "
        "(0=info, 1=notable, 2=high-impact).")
    # a list result: {"result": [...]} as structured content, one text block per row
    rows_ = listed["structuredContent"]["result"]
    assert [(r["kind"], r["id"], r["title"], r["status"]) for r in rows_] == [
        ("actions", 1, "wire test", 1)]
    assert len(listed["content"]) == 1 and listed["isError"] is False
    assert text["structuredContent"]["result"].startswith("## 自律実行リスト (last 24h)")
    assert bad_type["isError"] is True and "since_days" in bad_type["content"][0]["text"]
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def test_default_tool_set_is_all_and_unknown_sets_are_refused(cli_run, project):
    from toolkit.config import resolve
    from toolkit.errors import UsageError
    from toolkit.mcp_server import build_server

    cfg = resolve(project=project.root)
    names = {t.name for t in asyncio.run(build_server(cfg).list_tools())}
    assert names == NAGI_TOOLS | EXTRA_TOOLS
    names = {t.name for t in asyncio.run(build_server(cfg, tool_set="nagi").list_tools())}
    assert names == NAGI_TOOLS
    try:
        build_server(cfg, tool_set="some")
    except UsageError as exc:
        assert "Invalid tool set 'some'" in str(exc)
    else:
        raise AssertionError("an unknown tool set was accepted")
    result = cli_run("mcp", "--tools", "some")
    assert result.exit_code == 2 and "'some' is not one of 'all', 'nagi'" in result.stderr


def test_mcp_tools_answer_huge_numbers_and_bad_paths_as_tool_errors(project, monkeypatch):
    """FAULTS I3 and the error boundary over MCP: nagi-ledger's answer for a window SQLite
    cannot compute, and a path error as a one-line tool error, not a crashed server (the
    server in this process: the stdio tests above start the real one)."""

    async def script(raw, s: Session) -> dict[str, Any]:
        return {"report": await s.call("ledger_session_report", since_hours=10**11),
                "stats": await s.call("ledger_stats", days=800000),
                "search": await s.call("ledger_search", query="webhook", since_days=1e8)}

    out = run_in_process(project.root, _env(project), script, monkeypatch)
    assert out["report"] == (False, "No entries in the last 100000000000h.")
    assert out["stats"][0] is False
    assert out["stats"][1]["dispatch_count"] == 3  # a start in year -164: every row
    assert out["search"] == (False, [])

    async def read(raw, s: Session) -> Any:
        return await s.call("ledger_stats")

    env = {**_env(project), "TOOLKIT_DB": "/dev/null/x/ledger.duckdb"}
    expected = ("Error executing tool ledger_stats: /dev/null/x/ledger.duckdb: a part of "
                "this path is a file, not a folder")
    assert run_in_process(project.root, env, read, monkeypatch) == (True, expected)


def _message(mid: int | None, method: str, params: dict[str, Any]) -> str:
    import json

    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if mid is not None:
        body["id"] = mid
    return json.dumps(body) + "\n"


def _log_action(mid: int, description: str) -> str:
    return _message(mid, "tools/call", {"name": "ledger_log_action", "arguments": {
        "tier": 1, "category": "eof_test", "description": description}})


_OPENING = (_message(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                       "clientInfo": {"name": "test", "version": "1"}})
            + _message(None, "notifications/initialized", {}))


def _mcp_with_input(project, stdin: str) -> tuple[list[dict[str, Any]], str]:  # type: ignore[no-untyped-def]
    """`toolkit mcp` given ``stdin`` whole, then its end: (its answers, its stderr)."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-m", "toolkit", "mcp"], input=stdin.encode(),
                          capture_output=True, env=_env(project), cwd=project.root,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.decode().splitlines()], \
        done.stderr.decode()


def test_a_client_that_dies_mid_message_leaves_the_whole_calls_done_and_the_server_gone(
        project, tmp_path):
    """The client's end of stdin closes in the middle of a message (a crashed agent): the
    server runs and answers every call that came whole, runs nothing of the cut one (its
    half line is answered as text that is not JSON, id null, as any such line is), and
    exits 0, without a traceback."""
    cut = _log_action(3, "the cut call")
    answers, stderr = _mcp_with_input(
        project, _OPENING + _log_action(2, "the whole call") + cut[:len(cut) // 2])
    assert answers[0]["id"] == 1 and "serverInfo" in answers[0]["result"]
    # (the call's answer and the half line's may be written in either order)
    by_id = {a["id"]: a for a in answers[1:]}
    assert len(answers) == 3 and set(by_id) == {2, None}
    assert by_id[2]["result"]["structuredContent"]["id"] > 0
    assert by_id[None] == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32700, "message": "Parse error: the line is not JSON"}}
    assert rows(project.audit_db, "SELECT category, description FROM actions "
                "WHERE category = 'eof_test'") == [("eof_test", "the whole call")]
    assert "Traceback" not in stderr


def test_requests_written_before_the_end_of_input_are_all_answered(project):
    """A client that writes its requests and closes its end (`toolkit mcp < requests`)
    reads an answer to each: the calls still running at the end of input are answered
    before the server ends (the MCP SDK alone cancels them, their answers never written).
    A request the client cancelled is not waited for."""
    calls = "".join(_log_action(10 + n, f"call {n}") for n in range(6))
    queries = (_message(20, "tools/call", {"name": "ledger_task_status",
                                          "arguments": {"task": "call 5"}})
               + _message(21, "ping", {})
               + _message(22, "tools/call", {"name": "ledger_stats", "arguments": {}}))
    cancelled = (_message(30, "tools/call", {"name": "ledger_stats", "arguments": {}})
                 + _message(None, "notifications/cancelled", {"requestId": 30}))
    # an id used twice (JSON-RPC forbids it; a client may still): each request answered
    twice = (_message(40, "tools/call", {"name": "ledger_stats", "arguments": {}})
             + _message(40, "ping", {}))
    answers, stderr = _mcp_with_input(project, _OPENING + calls + queries + cancelled + twice)
    assert [a["id"] for a in answers].count(40) == 2
    answers = [a for a in answers if a["id"] != 40]
    by_id = {a["id"]: a for a in answers}
    assert set(by_id) - {30} == {1, *range(10, 16), 20, 21, 22}  # (30: maybe, maybe not)
    assert len(answers) == len(by_id)  # one answer each
    assert all("result" in a and not a["result"].get("isError") for a in answers)
    assert by_id[21]["result"] == {}
    assert sorted(rows(project.audit_db, "SELECT description FROM actions WHERE category = "
                       "'eof_test'")) == [(f"call {n}",) for n in range(6)]
    assert "Traceback" not in stderr


def test_a_line_the_server_cannot_read_is_answered_as_json_rpc_says(project, tmp_path):
    """The SDK's stdio transport dropped a line it could not read without a word, and the
    client waited for ever: text that is not JSON gets a parse error (-32700, id null); a
    request Python reads but the SDK refuses (a lone surrogate, "\\ud800") gets an invalid
    request error with its id; a notification so refused gets nothing. The server goes on."""
    import json
    import subprocess
    import threading

    env = _env(project)
    env["NAGI_LEDGER_DB"] = str(tmp_path / "wire.db")
    with open(tmp_path / "server.log", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolkit", "mcp"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=env, cwd=str(project.root), text=True, encoding="utf-8")
        # a server that never answers is killed (a watchdog, not a timing): the test then
        # fails on its closed output instead of waiting for ever, as the client did
        watchdog = threading.Timer(60, proc.kill)
        watchdog.start()
        try:
            _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"}}})
            _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("not json\n")
            proc.stdin.write('{"jsonrpc": "2.0", "method": "notifications/x", '
                             '"params": {"a": "\\ud800"}}\n')
            proc.stdin.write('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": '
                             '{"name": "ledger_task_status", "arguments": {"task": "\\ud800x"}}}'
                             "\n")
            # lines that crashed the first version of this answering: nesting too deep for
            # Python's reader, an id that cannot be written back; and JSON of another shape
            # (its id is not in what the SDK reports: null, as JSON-RPC answers an id that
            # could not be read)
            proc.stdin.write("[" * 5000 + "]" * 5000 + "\n")
            proc.stdin.write('{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}\n')
            proc.stdin.write('{"jsonrpc": "2.0", "id": 9, "method": 5}\n')
            proc.stdin.flush()
            answers = [json.loads(proc.stdout.readline() or "null") for _ in range(5)]
            ping = _rpc(proc, {"jsonrpc": "2.0", "id": 8, "method": "ping"}) \
                if None not in answers else None
        finally:
            watchdog.cancel()
            proc.stdin.close()
            proc.wait(timeout=30)
            reap(proc)
    assert answers == [
        {"jsonrpc": "2.0", "id": None,
         "error": {"code": -32700, "message": "Parse error: the line is not JSON"}},
        {"jsonrpc": "2.0", "id": 7,
         "error": {"code": -32600, "message": "Invalid Request: it holds a lone surrogate "
                                              "(\\ud800), which is not text"}},
        {"jsonrpc": "2.0", "id": None,
         "error": {"code": -32700, "message": "Parse error: the line is not JSON"}},
        {"jsonrpc": "2.0", "id": None,
         "error": {"code": -32600, "message": "Invalid Request: it holds a lone surrogate "
                                              "(\\ud800), which is not text"}},
        {"jsonrpc": "2.0", "id": None,
         "error": {"code": -32600, "message": "Invalid Request: not a JSON-RPC 2.0 message "
                                              "the server takes"}}]
    assert ping == {"jsonrpc": "2.0", "id": 8, "result": {}}
    assert "Traceback" not in (tmp_path / "server.log").read_text()
