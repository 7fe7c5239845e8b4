"""``toolkit mcp``: nagi-ledger's MCP tools, plus read-only Smith Ledger and slop tools.

Built on the official MCP Python SDK (``mcp.server.mcpserver.MCPServer``, the SDK 2.x name of
FastMCP). The ten ``ledger_*`` tools keep nagi-ledger's names, arguments, defaults and return
shapes, so an agent configured for nagi-ledger can point at ``toolkit mcp`` instead:

==========================  ===============================================================
ledger_log_action           tier, category, description, project=None -> {"id"}
ledger_log_dispatch         task, agent_type, model, brief_summary -> {"id", "retry_count",
                            "similar"}
ledger_log_verdict          dispatch_id, verdict, notes=None -> {"ok": true, "task"}
ledger_task_status          task -> {"dispatch_count", "retry_count", "last_verdict",
                            "over_retry_limit"}
ledger_log_approach         task, approach, outcome, reason -> {"id"}
ledger_check_approaches     task -> {"task", "dead_ends", "no_gos", "works", "total"}
ledger_session_report       since_hours=24 -> Markdown
ledger_stats                days=7 -> {"actions_by_tier", "actions_by_category",
                            "dispatch_count", "verdicts"}
ledger_search               query, kinds=None, limit=20, offset=0, since_days=None -> rows
ledger_similar_tasks        task, limit=5, min_score=0.35 -> rows
==========================  ===============================================================

plus ``smith_ledger_search(query, limit=20)`` and ``slop_ledger_query(bucket=None,
severity=None, status=None, search=None, limit=50)``, both read-only, unless the server is
built with ``tool_set="nagi"`` (``toolkit mcp --tools nagi``): then it serves nagi-ledger's
ten tools and nothing else. Input schemas (names, types, defaults) and annotation titles are
nagi-ledger's.

Writers go to the audit DB directly (``toolkit.audit_ops``). Every reader is a thin layer over
the public API (``toolkit.api.Project``), as the CLI's are: the audit readers refresh the
store's audit copy and read it through a Project opened per call and closed again, so the CLI
can use the store between calls. The two read-only tools give the CLI's answers:
``smith_ledger_search`` is ``toolkit ledger search`` (``Project.ledger_search``),
``slop_ledger_query`` is ``toolkit slop query`` (``Project.slop_query``).
A missing audit DB reads as an empty ledger here (nagi-ledger's tools create it on first use;
a reader of ours never creates it). Bad input is a tool error carrying nagi-ledger's message.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from toolkit.errors import ToolkitError, UsageError
from toolkit.records import SLOP_BUCKETS, SLOP_SEVERITIES, SLOP_STATUSES

if TYPE_CHECKING:
    from toolkit.api import Project
    from toolkit.config import Config

SERVER_NAME = "toolkit_ledger_mcp"
T = TypeVar("T")

def _enum(value: str | None, valid: tuple[str, ...], field: str) -> str | None:
    """A slop enum read leniently, as ``toolkit slop query`` reads it (FORMATS.md §2.2:
    trimmed, any case, ``done``, ``wontfix``, ``in-progress``...)."""
    from toolkit.sources.slop import normalise_enum

    if value is None or not value.strip():
        return None
    key, _problem = normalise_enum(value.strip(), valid)
    if key is None:
        raise UsageError(f"Invalid {field} {value!r}: must be one of {valid}.")
    return key


class LedgerTools:
    """The tool bodies, independent of MCP: each returns nagi-ledger's value or raises a
    ``ToolkitError``. ``now`` pins the clock for the time windows (tests, ``--now``)."""

    def __init__(self, cfg: Config, now: dt.datetime | None = None) -> None:
        self.cfg = cfg
        self.now = now
        self._lock = threading.Lock()  # one store connection at a time

    @contextmanager
    def _project(self) -> Iterator[Project]:
        """The project with its audit copy refreshed (``Project.refresh_audit``: a missing DB
        reads as empty), for one call and closed again."""
        from toolkit.api import Project

        with self._lock:
            project = Project(self.cfg)
            try:
                project.refresh_audit(missing_ok=True)
                yield project
            finally:
                project.close()

    # -- nagi-ledger writers --------------------------------------------------
    def log_action(self, tier: int, category: str, description: str,
                   project: str | None = None) -> dict[str, Any]:
        from toolkit import audit_ops

        return audit_ops.log_action(self.cfg.audit_db, tier, category, description, project)

    def log_dispatch(self, task: str, agent_type: str, model: str, brief_summary: str
                     ) -> dict[str, Any]:
        from toolkit import audit_ops

        return audit_ops.log_dispatch(self.cfg.audit_db, task, agent_type, model, brief_summary)

    def log_verdict(self, dispatch_id: int, verdict: str, notes: str | None = None
                    ) -> dict[str, Any]:
        from toolkit import audit_ops

        return audit_ops.log_verdict(self.cfg.audit_db, dispatch_id, verdict, notes)

    def log_approach(self, task: str, approach: str, outcome: str, reason: str
                     ) -> dict[str, Any]:
        from toolkit import audit_ops

        return audit_ops.log_approach(self.cfg.audit_db, task, approach, outcome, reason)

    # -- nagi-ledger readers (toolkit.api.Project) -----------------------------
    def task_status(self, task: str) -> dict[str, Any]:
        with self._project() as project:
            return dict(project.task_status(task))

    def check_approaches(self, task: str) -> dict[str, Any]:
        with self._project() as project:
            return dict(project.approaches(task))

    def session_report(self, since_hours: int = 24) -> str:
        with self._project() as project:
            return project.session_report(since_hours, now=self.now)

    def stats(self, days: int = 7) -> dict[str, Any]:
        with self._project() as project:
            return dict(project.stats(days, now=self.now))

    def search(self, query: str, kinds: list[str] | None = None, limit: int = 20,
               offset: int = 0, since_days: float | None = None) -> list[dict[str, Any]]:
        with self._project() as project:
            return [dict(r) for r in project.audit_search(
                query, kinds=kinds, limit=limit, offset=offset, since_days=since_days,
                now=self.now)]

    def similar_tasks(self, task: str, limit: int = 5, min_score: float = 0.35
                      ) -> list[dict[str, Any]]:
        with self._project() as project:
            return [dict(r) for r in project.similar_tasks(task, limit=limit,
                                                           min_score=min_score)]

    # -- Smith Ledger and slop ledger (read-only) -----------------------------
    def smith_ledger_search(self, query: str, limit: int = 20) -> list[dict[str, Any]]:
        """``toolkit ledger search``'s hits (``Project.ledger_search``), one row per entry
        with its matching lines, at most ``limit``."""
        from toolkit.api import Project

        with Project(self.cfg) as project:
            return [dict(h) for h in project.ledger_search(query, limit=limit)]

    def slop_ledger_query(self, bucket: str | None = None, severity: str | None = None,
                          status: str | None = None, search: str | None = None,
                          limit: int = 50) -> dict[str, Any]:
        """``toolkit slop query``'s answer (``Project.slop_query`` on the file as CodeSmith
        last wrote it), in CodeSmith's entry shape."""
        from toolkit.api import Project
        from toolkit.slop_ops import codesmith_dict

        bucket = _enum(bucket, SLOP_BUCKETS, "bucket")
        severity = _enum(severity, SLOP_SEVERITIES, "severity")
        status = _enum(status, SLOP_STATUSES, "status")
        if isinstance(limit, bool) or limit < 1:
            raise UsageError("'limit' must be a positive integer.")
        with Project(self.cfg) as project:
            # the text as given, as `toolkit slop query --search` takes it: a substring,
            # spaces included (it was trimmed here, so "  retry " found what "retry" finds)
            result = project.slop_query(bucket=bucket, severity=severity, status=status,
                                        search=search or None, limit=limit)
        return {"matched": result.matched, "entries": [codesmith_dict(e) for e in result.entries]}


def _call(fn: Callable[..., T], *args: Any) -> T:
    """Run a tool body; a ToolkitError (or an error errors.from_exception translates) reaches
    the client as a tool error with its message."""
    from mcp.server.mcpserver.exceptions import ToolError

    from toolkit.errors import from_exception
    from toolkit.interrupts import raise_if_stopped

    try:
        return fn(*args)
    except ToolkitError as exc:
        raise_if_stopped(exc)  # a query Ctrl-C or SIGTERM stopped ends the server, as the CLI
        raise ToolError(str(exc)) from None
    except Exception as exc:  # the same translation as the CLI's boundary; a bug stays one
        raise_if_stopped(exc)
        translated = from_exception(exc)
        if translated is None:
            raise
        raise ToolError(str(translated)) from None


TOOL_SETS = ("all", "nagi")


def build_server(cfg: Config, now: dt.datetime | None = None, tool_set: str = "all") -> Any:
    """The MCP server: nagi-ledger's ten tools, plus the toolkit's own two unless
    ``tool_set`` is ``"nagi"``."""
    if tool_set not in TOOL_SETS:
        raise UsageError(f"Invalid tool set {tool_set!r}: must be one of {TOOL_SETS}.")
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    tools = LedgerTools(cfg, now)
    # nagi-ledger's server gives no instructions (clients put them in the model's context:
    # they must not name tools the nagi set does not serve)
    instructions = None if tool_set == "nagi" else (
        "Audit ledger for autonomous coding agents (nagi-ledger compatible): log actions, "
        "dispatches, verdicts and approaches; check task status and known dead ends before "
        "retrying; search the Smith Ledger and the CodeSmith slop ledger.")
    server = MCPServer(SERVER_NAME, instructions=instructions, log_level="WARNING")

    def ann(title: str, read_only: bool, idempotent: bool = False) -> ToolAnnotations:
        return ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=False,
                               idempotent_hint=read_only or idempotent, open_world_hint=False)

    @server.tool(name="ledger_log_action", annotations=ann("Log Autonomous Action", False))
    def ledger_log_action(tier: int, category: str, description: str,
                          project: str | None = None) -> dict[str, Any]:
        """Record a single autonomous action taken during a self-directed dev loop.

        Args:
            tier: Impact tier. Must be 0 (routine/info), 1 (notable), or 2 (high-impact,
                e.g. irreversible or user-facing).
            category: Short category label, e.g. "refactor", "deploy", "file_write",
                "dependency_change". Must be non-empty.
            description: Human-readable description of what was done. Must be non-empty.
            project: Project/repo name this action belongs to.

        Returns {"id": int}, the new action's row id. Errors name the valid values.
        """
        return _call(tools.log_action, tier, category, description, project)

    @server.tool(name="ledger_log_dispatch", annotations=ann("Log Subagent Dispatch", False))
    def ledger_log_dispatch(task: str, agent_type: str, model: str,
                            brief_summary: str) -> dict[str, Any]:
        """Record a subagent dispatch for audit and retry tracking.

        Call this every time a subagent is dispatched. Use the SAME task string across
        retries of the same underlying task so retry counting works.

        Returns {"id": int, "retry_count": int, "similar": [...]}: retry_count is the number
        of PRIOR dispatches under exactly this task (0 for the first); similar lists
        reworded near-duplicate tasks among earlier dispatches and approaches
        ({id, kind, task, score, verdict, ts}). Errors if any field is empty.
        """
        return _call(tools.log_dispatch, task, agent_type, model, brief_summary)

    @server.tool(name="ledger_log_verdict",
                 annotations=ann("Attach Verdict to Dispatch", False, idempotent=True))
    def ledger_log_verdict(dispatch_id: int, verdict: str,
                           notes: str | None = None) -> dict[str, Any]:
        """Attach a verification verdict to a previously logged dispatch.

        Args:
            dispatch_id: The id returned by ledger_log_dispatch.
            verdict: One of "CONFIRMED", "REFUTED", "PARTIAL".
            notes: Optional free-text notes on the verification.

        Returns {"ok": true, "task": str}. Errors if the id does not exist or the verdict is
        not one of the three allowed values.
        """
        return _call(tools.log_verdict, dispatch_id, verdict, notes)

    @server.tool(name="ledger_task_status",
                 annotations=ann("Get Task Retry/Verdict Status", True))
    def ledger_task_status(task: str) -> dict[str, Any]:
        """Look up dispatch/retry/verdict status for a task string. Use it BEFORE dispatching
        a subagent to check whether the task has been retried too many times.

        Returns {"dispatch_count": int, "retry_count": int (dispatch_count - 1, floored at 0),
        "last_verdict": str | null (verdict of the most recent dispatch),
        "over_retry_limit": bool (retry_count >= 2)}.
        """
        return _call(tools.task_status, task)

    @server.tool(name="ledger_session_report", annotations=ann("Session Report (Markdown)", True))
    def ledger_session_report(since_hours: int = 24) -> str:
        """Markdown report of the actions (grouped by category) and dispatches (with verdict or
        PENDING) of the last N hours, or a short "No entries" line."""
        return _call(tools.session_report, since_hours)

    @server.tool(name="ledger_stats", annotations=ann("Ledger Stats", True))
    def ledger_stats(days: int = 7) -> dict[str, Any]:
        """Aggregate statistics over the last N days: {"actions_by_tier": {"0","1","2"},
        "actions_by_category": {...}, "dispatch_count": int, "verdicts": {"CONFIRMED",
        "REFUTED", "PARTIAL", "PENDING"}}."""
        return _call(tools.stats, days)

    @server.tool(name="ledger_log_approach", annotations=ann("Log Approach Outcome", False))
    def ledger_log_approach(task: str, approach: str, outcome: str,
                            reason: str) -> dict[str, Any]:
        """Record the outcome of an approach tried (or considered) for a task. Record every
        failed approach immediately, and every deliberate NO-GO decision.

        Args:
            task: Stable task string (the SAME across approaches to the same task).
            approach: The approach tried or considered. Must be non-empty.
            outcome: "DEAD_END" (tried and failed), "NO_GO" (decided against without trying)
                or "WORKS" (confirmed working).
            reason: Why it failed, was rejected, or worked. Must be non-empty.

        Returns {"id": int}.
        """
        return _call(tools.log_approach, task, approach, outcome, reason)

    @server.tool(name="ledger_check_approaches", annotations=ann("Check Known Approaches", True))
    def ledger_check_approaches(task: str) -> dict[str, Any]:
        """Call this BEFORE retrying or re-planning a task. Never re-attempt an approach listed
        in dead_ends or no_gos unless new information invalidates its reason.

        Returns {"task", "dead_ends": [{approach, reason, ts}], "no_gos": [...],
        "works": [...], "total"}; each list newest first.
        """
        return _call(tools.check_approaches, task)

    @server.tool(name="ledger_search", annotations=ann("Search Ledger", True))
    def ledger_search(query: str, kinds: list[str] | None = None, limit: int = 20,
                      offset: int = 0, since_days: float | None = None
                      ) -> list[dict[str, Any]]:
        """Keyword search across actions/dispatches/approaches. Returns index rows only
        ({"id","kind","ts","title","status"}), never brief_summary, verdict_notes or reason.

        A row's score is the fraction of the query's words (character pairs for Japanese and
        other text without spaces) found in each of its fields, summed; rows scoring above 0
        come back by score, then newest first. Fetch detail afterwards with
        ledger_task_status(task) or ledger_check_approaches(task).

        Args:
            query: search text. Must be non-empty.
            kinds: subset of ["actions","dispatches","approaches"]. Omit to search all three.
            limit: max rows to return. Defaults to 20.
            offset: rows to skip, for paging. Defaults to 0.
            since_days: if set, only rows from the last N days.

        Returns rows {"id": int, "kind": str, "ts": str, "title": str, "status": str|int}:
        title is the description, the task, or "task: approach"; status the tier, the
        verdict (PENDING before one) or the outcome.
        """
        return _call(tools.search, query, kinds, limit, offset, since_days)

    @server.tool(name="ledger_similar_tasks", annotations=ann("Find Similar Tasks", True))
    def ledger_similar_tasks(task: str, limit: int = 5,
                             min_score: float = 0.35) -> list[dict[str, Any]]:
        """Find previously dispatched/attempted tasks textually similar to `task`: reworded
        duplicates that an exact-string match (ledger_task_status) misses.

        Score = min(difflib ratio, token Jaccard), 0.0-1.0, rounded to 4 places.

        Args:
            task: the task string to compare against. Must be non-empty.
            limit: max results. Defaults to 5.
            min_score: minimum similarity to include. Defaults to 0.35.

        Returns rows {"kind","id","task","score","ts","verdict"} sorted by score desc;
        verdict is the dispatch's verdict (null before one) or the approach's outcome.
        """
        return _call(tools.similar_tasks, task, limit, min_score)

    if tool_set == "nagi":
        return server

    @server.tool(name="smith_ledger_search", annotations=ann("Search the Smith Ledger", True))
    def smith_ledger_search(query: str, limit: int = 20) -> list[dict[str, Any]]:
        """Case-insensitive search of every line of the project's Smith Ledger (patterns,
        antipatterns, tool preferences, edge cases, project quirks), as `toolkit ledger
        search`. Rows {entry_id, file, title, date, category, confidence, path, line,
        lines: [{line, text}]}: one per entry with matching lines (the nearest entry above
        the lines; entry fields null for lines above the first entry), in file order.
        Read-only."""
        return _call(tools.smith_ledger_search, query, limit)

    @server.tool(name="slop_ledger_query", annotations=ann("Query the Slop Ledger", True))
    def slop_ledger_query(bucket: str | None = None, severity: str | None = None,
                          status: str | None = None, search: str | None = None,
                          limit: int = 50) -> dict[str, Any]:
        """Query the CodeSmith slop ledger like slop_ledger_query: filters ANDed; bucket,
        severity and status exact (trimmed, lowercased; "done" = resolved); search is a
        case-insensitive substring of title or description; file order. Returns
        {"matched": int, "entries": [...]}. Read-only."""
        return _call(tools.slop_ledger_query, bucket, severity, status, search, limit)

    return server


def serve_stdio(cfg: Config, now: dt.datetime | None = None, tool_set: str = "all") -> None:
    """Serve the tools over stdin/stdout until the client disconnects.

    The SDK's stdio transport drops a line it cannot read as a JSON-RPC message without a
    word (its dispatcher only logs it), so a client that sent one waited for ever: a line
    that is not JSON, or a request holding a lone surrogate (``"\\ud800"``: Python reads it,
    the SDK's parser refuses it). Here each such line is answered as JSON-RPC 2.0 says: a
    parse error (-32700, id null) for text that is not JSON, an invalid request (-32600)
    with the request's id, when it has one, for JSON that is not a message the server can
    take. The rest goes to the SDK's server as :meth:`MCPServer.run` would send it."""
    import anyio

    server = build_server(cfg, now, tool_set)
    lowlevel = getattr(server, "_lowlevel_server", None)  # (the SDK's run_stdio_async's)
    if lowlevel is None:  # another SDK: its own transport, as it is
        server.run("stdio")
        return
    anyio.run(_serve_answering_bad_lines, lowlevel)


async def _serve_answering_bad_lines(lowlevel: Any) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[Any](0)
        replies = _Replies(write_stream)

        async def pump() -> None:
            async with send:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        try:
                            answer = _bad_line_answer(item)
                        except Exception:  # whatever the line held: the server goes on
                            answer = _error(None, -32600, "Invalid Request")
                        if answer is not None:
                            await replies.send_answer(answer)
                        continue
                    replies.received(item.message)
                    await send.send(item)
                # End of input: the requests still running are answered before the server
                # is told (it cancels what runs then), as a client that wrote its requests
                # and closed its end (`toolkit mcp < requests`) reads every answer.
                await replies.all_sent()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await lowlevel.run(receive, replies, lowlevel.create_initialization_options())


class _Replies:
    """The server's side of stdout, which knows the requests it has not answered yet: a
    request read is owed an answer until a response or error with its id is written, or the
    client cancels it (notifications/cancelled: the server then answers nothing). Counted by
    id: a client that reuses an id (JSON-RPC forbids it) is owed an answer for each."""

    def __init__(self, stream: Any) -> None:
        from collections import Counter

        import anyio

        self._stream = stream
        self._owed: Counter[Any] = Counter()
        self._none_owed = anyio.Event()
        self._none_owed.set()

    def received(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if method is not None and getattr(message, "id", None) is not None:
            self._owe(message.id)
        elif method == "notifications/cancelled":
            params = getattr(message, "params", None) or {}
            if isinstance(params, dict):
                self._paid(params.get("requestId"))

    async def send_answer(self, message: Any) -> None:
        from mcp.shared.message import SessionMessage

        await self.send(SessionMessage(message))

    async def send(self, item: Any) -> None:
        await self._stream.send(item)
        message = getattr(item, "message", None)
        if getattr(message, "method", None) is None:  # a response or an error
            self._paid(getattr(message, "id", None))

    async def all_sent(self) -> None:
        await self._none_owed.wait()

    def _owe(self, rid: Any) -> None:
        import anyio

        if not self._owed:
            self._none_owed = anyio.Event()
        self._owed[rid] += 1

    def _paid(self, rid: Any) -> None:
        # (an id is text or a number: JSON-RPC 2.0; one never owed, as a bad line's, is none)
        if isinstance(rid, (str, int)) and self._owed[rid] > 0:
            self._owed[rid] -= 1
            if self._owed[rid] == 0:
                del self._owed[rid]
            if not self._owed:
                self._none_owed.set()

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _Replies:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _error(rid: Any, code: int, message: str) -> Any:
    from mcp_types import ErrorData, JSONRPCError

    return JSONRPCError(jsonrpc="2.0", id=rid, error=ErrorData(code=code, message=message))


def _bad_line_answer(exc: Exception) -> Any:
    """The JSON-RPC error answering a line the SDK could not read (``exc``, its pydantic
    ValidationError); None for a notification (nothing is answered to one).

    Only a line the SDK's JSON parser refused is in the error whole (its first error, of type
    ``json_invalid``): text that is not JSON is a parse error, id null; JSON that Python reads
    (a lone surrogate the SDK's parser refuses) is an invalid request with its id, when that
    id can be written back. JSON of another shape (the error then holds only the field that
    failed) is an invalid request with id null, as JSON-RPC 2.0 answers a request whose id
    could not be read."""
    import json

    from toolkit.textio import lone_surrogate

    errors = getattr(exc, "errors", None)
    first = (errors() or [{}])[0] if callable(errors) else {}
    if first.get("type") != "json_invalid" or not isinstance(first.get("input"), str):
        return _error(None, -32600, "Invalid Request: not a JSON-RPC 2.0 message the server "
                                    "takes")
    try:
        message = json.loads(first["input"])
    except (ValueError, RecursionError):
        return _error(None, -32700, "Parse error: the line is not JSON")
    if not isinstance(message, dict):
        return _error(None, -32600, "Invalid Request: a message is a JSON object")
    rid = message.get("id")
    if rid is None and "method" in message:
        return None  # a notification
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) or \
            (isinstance(rid, str) and lone_surrogate(rid)):
        rid = None  # (an id that cannot be written back as UTF-8 is not one)
    bad = lone_surrogate(json.dumps(message, ensure_ascii=False))
    why = (f"it holds a lone surrogate ({bad}), which is not text" if bad
           else "not a JSON-RPC 2.0 message the server takes")
    return _error(rid, -32600, f"Invalid Request: {why}")
