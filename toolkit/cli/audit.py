"""``toolkit audit``: nagi-ledger's writers and readers (seed 004, FORMATS.md §3)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from toolkit.cli._common import echo_json, get_config, render_rows

if TYPE_CHECKING:
    from toolkit.api import Project

MAX_WARNINGS = 5
JSON_HELP = "Print nagi-ledger's return value as JSON."
NOW_HELP = ("Take the time window as of this UTC date-time, e.g. '2026-05-04 12:00:00': rows "
            "from N hours/days before it up to it (default: $TOOLKIT_NOW; else the clock, "
            "with no end, as nagi-ledger).")


class _Number(click.ParamType):
    """A count of hours or days as nagi-ledger's MCP tools take it: ``1e11`` is the whole
    number 100000000000 (``whole``), and any size is allowed (nagi-ledger answers them all:
    see toolkit.audit_ops._window)."""

    def __init__(self, whole: bool) -> None:
        self.whole = whole
        self.name = "integer" if whole else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        import math

        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            self.fail(f"{value!r} is not a number", param, ctx)
        if not self.whole:
            return int(number) if number.is_integer() else number
        if not math.isfinite(number) or not number.is_integer():
            self.fail(f"{value!r} is not a whole number", param, ctx)
        return int(number)


def _now_option(fn: Any) -> Any:
    return click.option("--now", "now", envvar="TOOLKIT_NOW", default=None,
                        metavar="DATETIME", help=NOW_HELP)(fn)


def _json_option(fn: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(fn)


def _project() -> Project:
    """The project with its audit copy refreshed (``Project.refresh_audit``); the audit
    source's warnings (bad rows, missing tables) on stderr."""
    from toolkit.api import Project
    from toolkit.display import visible

    project = Project(get_config())
    project.refresh_audit(hold=True)
    try:
        problems = project.problems("audit")
    except BaseException:
        project.close()
        raise
    for p in problems[:MAX_WARNINGS]:
        click.echo(f"Warning: {visible(str(p), single_line=True)}", err=True)
    if len(problems) > MAX_WARNINGS:
        click.echo(f"Warning: ... and {len(problems) - MAX_WARNINGS} more "
                   "(`toolkit status` lists them all)", err=True)
    return project


def _where(path: Any) -> str:
    """The DB's path as shown: as configured, a folder named "~" (``$NAGI_LEDGER_DB`` is read
    as written, as nagi-ledger reads it) shown as ``./~/…``, so it does not read as home."""
    import os

    shown = os.path.normpath(str(path))
    return f".{os.sep}{shown}" if shown.startswith("~") else shown


def _line(text: Any) -> str:
    from toolkit.display import visible

    return visible("" if text is None else str(text), single_line=True)


@click.group()
def audit() -> None:
    """Read and write the nagi-ledger audit DB (actions, dispatches, approaches).

    The log-* commands write the SQLite DB itself ($NAGI_LEDGER_DB, ~/.nagi/ledger.db or
    --audit-db) exactly as nagi-ledger does, creating it when missing; nagi-ledger and its
    hooks keep working on the same file. The other commands read through the toolkit's store
    (refreshed first) and never create or change the DB; `brief` reads the goal file and the
    DB directly, as nagi-ledger's session-start hook does.

    Every command but brief (nagi-ledger has no MCP tool for it) has --json, which prints the
    value nagi-ledger's MCP tool of the same job returns. Exit codes: 2 invalid value (the
    message names the valid ones), 1 unknown dispatch id or missing DB, 65 damaged DB, 75 DB
    locked by another process (nothing written; retry).
    """


# --------------------------------------------------------------------------- writers

@audit.command("log-action", short_help="Record an autonomous action (tier 0/1/2).")
@click.argument("description")
@click.option("--tier", required=True, metavar="0|1|2",
              help="Impact: 0 routine/info, 1 notable, 2 high-impact (irreversible, user-facing).")
@click.option("--category", required=True,
              help="Short label, e.g. refactor, deploy, file_write, dependency_change.")
@click.option("--project", default=None, help="Project or repository the action belongs to.")
@_json_option
def log_action(description: str, tier: str, category: str, project: str | None,
               as_json: bool) -> None:
    """Record an autonomous action the agent took on its own initiative (ledger_log_action)."""
    from toolkit.audit_ops import log_action as do

    tier_value: Any = tier
    with contextlib.suppress(ValueError):
        tier_value = int(tier.strip())
    cfg = get_config()
    result = do(cfg.audit_db, tier_value, category, description, project)
    if as_json:
        echo_json(result)
        return
    click.echo(f"Logged action #{result['id']} (tier {tier_value}, {_line(category.strip())}) "
               f"in {_where(cfg.audit_db)}")


@audit.command("log-dispatch", short_help="Record a subagent dispatch; prints the retry count.")
@click.argument("task")
@click.option("--agent-type", required=True, help="Subagent type, e.g. fork, general-purpose.")
@click.option("--model", required=True, help="Model used, e.g. sonnet, opus.")
@click.option("--summary", "--brief-summary", "summary", required=True,
              help="One line: what the dispatch was asked to do.")
@_json_option
def log_dispatch(task: str, agent_type: str, model: str, summary: str, as_json: bool) -> None:
    """Record a subagent dispatch for TASK (ledger_log_dispatch).

    Use the same TASK string for every retry of the same work: the retry count is the number
    of earlier dispatches with exactly this TASK. Reworded near-duplicates among earlier
    dispatches and approaches are listed as similar tasks.
    """
    from toolkit.audit_ops import log_dispatch as do
    from toolkit.records import RETRY_LIMIT

    cfg = get_config()
    result = do(cfg.audit_db, task, agent_type, model, summary)
    if as_json:
        echo_json(result)
        return
    click.echo(f"Logged dispatch #{result['id']} (retry {result['retry_count']}) "
               f"in {_where(cfg.audit_db)}")
    if result["retry_count"] >= RETRY_LIMIT:
        click.echo(f"Note: this task had {result['retry_count']} earlier dispatches; "
                   f"nagi-ledger's retry limit is {RETRY_LIMIT}.")
    if result["similar"]:
        click.echo("Similar earlier tasks:")
        click.echo(_similar_table(result["similar"]))


@audit.command("log-verdict", short_help="Attach CONFIRMED, REFUTED or PARTIAL to a dispatch.")
@click.argument("dispatch_id", type=int)
@click.argument("verdict", metavar="CONFIRMED|REFUTED|PARTIAL")
@click.option("--notes", default=None, help="Free-text notes on the verification.")
@_json_option
def log_verdict(dispatch_id: int, verdict: str, notes: str | None, as_json: bool) -> None:
    """Attach a verification VERDICT to dispatch DISPATCH_ID (ledger_log_verdict)."""
    from toolkit.audit_ops import log_verdict as do

    cfg = get_config()
    result = do(cfg.audit_db, dispatch_id, verdict, notes)
    if as_json:
        echo_json(result)
        return
    click.echo(f"Recorded {verdict} on dispatch #{dispatch_id} (task: {_line(result['task'])})")


@audit.command("log-approach", short_help="Record an approach as DEAD_END, NO_GO or WORKS.")
@click.argument("task")
@click.option("--approach", required=True, help="The approach tried or considered.")
@click.option("--outcome", required=True, metavar="DEAD_END|NO_GO|WORKS",
              help="DEAD_END tried and failed, NO_GO decided against, WORKS confirmed working.")
@click.option("--reason", required=True, help="Why it failed, was rejected, or worked.")
@_json_option
def log_approach(task: str, approach: str, outcome: str, reason: str, as_json: bool) -> None:
    """Record the outcome of an approach to TASK (ledger_log_approach)."""
    from toolkit.audit_ops import log_approach as do

    cfg = get_config()
    result = do(cfg.audit_db, task, approach, outcome, reason)
    if as_json:
        echo_json(result)
        return
    click.echo(f"Logged approach #{result['id']} ({outcome}) in {_where(cfg.audit_db)}")


# --------------------------------------------------------------------------- readers

@audit.command("task-status", short_help="Dispatches, retries, last verdict, over the retry limit.")
@click.argument("task")
@_json_option
def task_status(task: str, as_json: bool) -> None:
    """Dispatches, retries, last verdict and retry-limit state of TASK (ledger_task_status)."""
    from toolkit.records import RETRY_LIMIT

    with _project() as project:
        result = project.task_status(task)
    if as_json:
        echo_json(result)
        return
    over = "yes" if result["over_retry_limit"] else "no"
    rows = [("Task", task.strip()), ("Dispatches", result["dispatch_count"]),
            ("Retries", result["retry_count"]),
            ("Last verdict", result["last_verdict"] or ("PENDING" if result["dispatch_count"]
                                                        else "-")),
            ("Over retry limit", f"{over} (limit: {RETRY_LIMIT} retries)")]
    for key, value in rows:
        click.echo(f"{key + ':':<18}{_line(value)}")


@audit.command("approaches", short_help="Dead ends, no-gos and working approaches of a task.")
@click.argument("task")
@_json_option
def approaches(task: str, as_json: bool) -> None:
    """Dead ends, no-gos and working approaches recorded for TASK, newest first
    (ledger_check_approaches). Check before retrying or re-planning a task."""
    with _project() as project:
        result = project.approaches(task)
    if as_json:
        echo_json(result)
        return
    click.echo(f"Task: {_line(result['task'])} ({result['total']} approaches)")
    for title, items in (("Dead ends", result["dead_ends"]), ("No-gos", result["no_gos"]),
                         ("Works", result["works"])):
        click.echo("")
        click.echo(f"{title} ({len(items)})")
        if items:
            click.echo(render_rows(["ts", "approach", "reason"],
                                   [(i["ts"], i["approach"], i["reason"]) for i in items],
                                   "table"))


@audit.command("report", short_help="Markdown report of the last N hours.")
@click.option("--since-hours", type=_Number(whole=True), default=24, show_default=True,
              help="How many hours back to include.")
@_now_option
@_json_option
def report(since_hours: int, now: str | None, as_json: bool) -> None:
    """Markdown report of the actions (by category) and dispatches (with verdict or PENDING)
    of the last N hours (ledger_session_report)."""
    from toolkit.audit_ops import parse_now

    when = parse_now(now)
    with _project() as project:
        text = project.session_report(since_hours, now=when)
    if as_json:
        echo_json(text)
        return
    from toolkit.display import visible

    click.echo(visible(text))


@audit.command("stats", short_help="Counts by tier, category and verdict over N days.")
@click.option("--days", type=_Number(whole=True), default=7, show_default=True,
              help="How many days back to include.")
@_now_option
@_json_option
def stats(days: int, now: str | None, as_json: bool) -> None:
    """Actions by tier and category, dispatch count and verdicts (PENDING when none yet)
    over the last N days (ledger_stats)."""
    from toolkit.audit_ops import parse_now

    when = parse_now(now)
    with _project() as project:
        result = project.stats(days, now=when)
    if as_json:
        echo_json(result)
        return
    names = {"0": "0 info", "1": "1 notable", "2": "2 high-impact"}
    click.echo(f"Last {days} days")
    click.echo("")
    click.echo(render_rows(["tier", "actions"],
                           [(names.get(t, t), n) for t, n in result["actions_by_tier"].items()],
                           "table"))
    click.echo("")
    cats = sorted(result["actions_by_category"].items(), key=lambda kv: (-kv[1], str(kv[0])))
    click.echo(render_rows(["category", "actions"], cats, "table") if cats
               else "No actions.")
    click.echo("")
    click.echo(f"Dispatches: {result['dispatch_count']}")
    click.echo(render_rows(["verdict", "dispatches"], list(result["verdicts"].items()),
                           "table"))


@audit.command("search", short_help="Find actions, dispatches, approaches by words.")
@click.argument("query")
@click.option("--kind", "kinds", multiple=True, metavar="KIND",
              help="Only actions, dispatches or approaches (repeatable).")
@click.option("--limit", type=int, default=20, show_default=True, help="Rows to show.")
@click.option("--offset", type=int, default=0, show_default=True, help="Rows to skip.")
@click.option("--since-days", type=_Number(whole=False), default=None,
              help="Only the last N days (fractions allowed, e.g. 0.5).")
@_now_option
@_json_option
def search(query: str, kinds: tuple[str, ...], limit: int, offset: int,
           since_days: float | None, now: str | None, as_json: bool) -> None:
    """Find actions, dispatches and approaches by words (ledger_search).

    As nagi-ledger: a row scores the fraction of QUERY's words found in each of its fields
    (an action's description, category and project; a dispatch's task, summary and verdict
    notes; an approach's task, approach and reason), summed; Japanese and other text without
    spaces matches by character pairs. Rows scoring above 0 are shown best first, then
    newest. Shows index rows only (id, kind, time, title, status), never summaries, notes or
    reasons.
    """
    from toolkit.audit_ops import parse_now

    when = parse_now(now)
    with _project() as project:
        rows = project.audit_search(query, kinds=list(kinds) or None, limit=limit,
                                    offset=offset, since_days=since_days, now=when)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f'No results for "{_line(query)}".')
        return
    click.echo(render_rows(["id", "kind", "ts", "title", "status"],
                           [(r["id"], r["kind"], r["ts"], r["title"],
                             _tier(r["status"]) if r["kind"] == "actions" else r["status"])
                            for r in rows], "table"))


@audit.command("similar", short_help="Earlier tasks worded like this one.")
@click.argument("task")
@click.option("--limit", type=int, default=5, show_default=True, help="Rows to show.")
@click.option("--min-score", type=float, default=0.35, show_default=True,
              help="Smallest score shown (0-1).")
@_json_option
def similar(task: str, limit: int, min_score: float, as_json: bool) -> None:
    """Earlier tasks worded like TASK, among dispatches and approaches (ledger_similar_tasks).

    Score = the smaller of difflib's ratio and the Jaccard overlap of nagi-ledger's match
    units (words, and character pairs of the rest); catches reworded duplicates that the
    exact-match retry count misses. Every matching row is listed, best first.
    """
    with _project() as project:
        rows = project.similar_tasks(task, limit=limit, min_score=min_score)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"No similar tasks (min score {min_score:g}).")
        return
    click.echo(_similar_table(rows))


def _tier(tier: Any) -> str:
    """An action's status in the table: ``Tier n`` (``Tier ???`` for a damaged row)."""
    return f"Tier {'???' if tier is None else tier}"


def _similar_table(rows: Sequence[Mapping[str, Any]]) -> str:
    return render_rows(["score", "kind", "id", "ts", "task", "verdict"],
                       [(f"{r['score']:.3f}", r["kind"], r["id"], r["ts"], r["task"],
                         r["verdict"] or "PENDING") for r in rows], "table")


class _HookNumber(click.ParamType):
    """A whole number as nagi-ledger's session_brief.py reads its options (``int(text)``),
    where text that is none is ignored: the option keeps its default, with a warning here
    (a SessionStart hook must not lose its brief to a typo in its command)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | None:
        if isinstance(value, int):
            return value
        from toolkit.display import visible

        try:
            return int(value)
        except ValueError:
            name = param.opts[0] if param else "option"
            what = (f"{visible(str(value), single_line=True)!r} is not a whole number"
                    if value != "" else "has no value")
            click.echo(f"Warning: {name} {what}: ignored, as nagi-ledger's session_brief does",
                       err=True)
            return None


@audit.command("brief", short_help="nagi-ledger's session-start brief of open loops.",
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--days", type=_HookNumber(), default=3, show_default=True, is_flag=False,
              flag_value="",  # given without a value (last): ignored, as nagi-ledger does
              help="How many days back dispatches and dead ends count (0 or less: 3).")
@click.option("--max-items", type=_HookNumber(), default=5, show_default=True,
              is_flag=False, flag_value="",
              help="Lines per section at most (0 or less: 5).")
@_now_option
@click.pass_context
def brief(ctx: click.Context, days: int | None, max_items: int | None,
          now: str | None) -> None:
    """Print what nagi-ledger's session_brief.py prints at session start, byte for byte:
    the active goal, dispatches waiting for a verdict, recent dead ends and no-gos, and
    repositories with uncommitted changes, in at most 1500 characters; nothing at all when
    nothing is open.

    Reads the goal file (--goal-file, $NAGI_GOAL_FILE, ~/.nagi/goal.json) and the audit DB
    directly, read-only, without the store. Repositories: $NAGI_BRIEF_REPOS (separated by
    the path separator), else the git repository of the working folder. As in nagi-ledger,
    nothing unreadable stops it: what cannot be read is left out (a warning on stderr says
    what) and the exit code is 0. So is a --days or --max-items that is not a whole number,
    or an argument it does not know: ignored, with a warning. Usable as a SessionStart
    hook command; --now ends the time window there (nagi-ledger has no such option).
    """
    from toolkit.audit_ops import parse_now
    from toolkit.cli._common import echo_text
    from toolkit.display import visible
    from toolkit.goals import BRIEF_DAYS, BRIEF_MAX_ITEMS, brief_repos, goal_paths
    from toolkit.goals import brief as build

    toolkit_options = {o for p in ctx.find_root().command.params for o in p.opts}
    for extra in ctx.args:
        name = extra.split("=", 1)[0]
        if name in toolkit_options:  # (misplaced, not a typo: it would be silently unused)
            raise click.UsageError(f"{name} is an option of toolkit, not of audit brief: give "
                                   f"it before the command (toolkit {name} … audit brief)")
        click.echo(f"Warning: {visible(extra, single_line=True)!r}: not an argument of "
                   "audit brief: ignored, as nagi-ledger's session_brief does", err=True)
    when = parse_now(now)
    cfg = get_config()
    result = build(goal_paths(cfg)[0], cfg.audit_db, brief_repos(),
                   days=BRIEF_DAYS if days is None else days,
                   max_items=BRIEF_MAX_ITEMS if max_items is None else max_items, now=when)
    for w in result.warnings:
        click.echo(f"Warning: {visible(w, single_line=True)}", err=True)
    if result.text:
        echo_text(result.text)
