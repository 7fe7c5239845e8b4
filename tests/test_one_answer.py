"""Each question has one answer: the CLI, the MCP tools and the site ask the same code, so they
agree (retry limit, ledger search, slop query, top entries, an entry's history)."""

from __future__ import annotations

import json
from typing import Any

from click.testing import Result


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- retry limit

def test_over_the_retry_limit_is_the_same_answer_in_task_status_and_the_store(project,
                                                                              cli_run):
    """`audit task-status` (nagi-ledger's rule, also the MCP tool) and the store's
    ``task_status`` view (the site's and the handoff's tables) flip at the same dispatch."""
    seen = []
    for i in range(3):
        cli_run("audit", "log-dispatch", "retry-task", "--agent-type", "fork", "--model", "opus",
                "--summary", f"attempt {i + 1}")
        status = _json(cli_run("audit", "task-status", "retry-task", "--json"))
        view = _json(cli_run("query", "SELECT retry_count, over_retry_limit FROM task_status "
                                      "WHERE task = 'retry-task'", "--format", "json"))
        seen.append((status["retry_count"], status["over_retry_limit"],
                     view[0]["over_retry_limit"]))
    assert seen == [(0, False, False), (1, False, False), (2, True, True)]
