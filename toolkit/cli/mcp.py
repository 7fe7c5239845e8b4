"""``toolkit mcp``: serve nagi-ledger's MCP tools (and ledger/slop search) over stdio."""

from __future__ import annotations

import click

from toolkit.cli._common import get_config


@click.command()
@click.option("--now", "now", envvar="TOOLKIT_NOW", default=None, metavar="DATETIME",
              help="Take report/stats/search windows as of this UTC date-time, ending "
                   "there (default: $TOOLKIT_NOW; else the clock, with no end, as nagi-ledger).")
@click.option("--tools", "tool_set", type=click.Choice(["all", "nagi"]), default="all",
              show_default=True,
              help="nagi: serve nagi-ledger's ten tools and nothing else (a drop-in for its "
                   "server); all: also smith_ledger_search and slop_ledger_query.")
def mcp(now: str | None, tool_set: str) -> None:
    """Serve the audit ledger as an MCP server over stdin/stdout.

    Exposes nagi-ledger's ten tools under the same names, arguments and return shapes
    (ledger_log_action, ledger_log_dispatch, ledger_log_verdict, ledger_task_status,
    ledger_log_approach, ledger_check_approaches, ledger_session_report, ledger_stats,
    ledger_search, ledger_similar_tasks), so an agent set up for nagi-ledger can switch,
    plus two read-only tools: smith_ledger_search and slop_ledger_query (left out with
    --tools nagi, for clients that expect exactly nagi-ledger's tools).

    Paths come from the same settings as every other command (--audit-db, toolkit.yaml,
    $NAGI_LEDGER_DB...). Register it with an MCP client, e.g.:

        claude mcp add toolkit-ledger -- toolkit --project /path/to/project mcp
    """
    from toolkit.audit_ops import parse_now
    from toolkit.mcp_server import serve_stdio

    serve_stdio(get_config(), parse_now(now), tool_set)
