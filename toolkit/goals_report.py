"""The goals page of the site (``audit/goals.md``) and the dashboard's goal line, from the
``goals`` and ``goal_events`` tables (nagi-ledger's goal gate, ``toolkit.goals``).

Values stay raw here, as everywhere in the reports layer: the templates escape them.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from toolkit.pages import Field, Page, Ref, Table

if TYPE_CHECKING:
    from toolkit.store import Store

GOALS_PATH = "audit/goals.md"
OUTCOME_ORDER = ("done", "aborted", "budget_exhausted", "superseded", "corrupt_state")


@dataclass(kw_only=True)
class GoalsPage(Page):
    template: ClassVar[str] = "goals.md.j2"
    active: list[Field] | None  # None: no active goal
    outcomes: Table
    history: Table
    closed: int


def _when(value: Any, raw: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return raw


def budget(goal: dict[str, Any]) -> str:
    """"4 of 10 turns left" (the values as written when they are not whole numbers)."""
    remaining = goal.get("remaining")
    max_turns = goal.get("max_turns")
    if remaining is None or max_turns is None:
        import json

        state = goal.get("state")
        raw = json.loads(state) if isinstance(state, str) else (state or {})
        remaining = raw.get("remaining") if remaining is None else remaining
        max_turns = raw.get("max_turns") if max_turns is None else max_turns
    return f"{remaining} of {max_turns} turns left"


def goal_summary(store: Store) -> tuple[Table, int]:
    """The dashboard's goal table (one row, or empty) and how many goals have closed."""
    from toolkit.goals import active_goal, goal_history

    goal = active_goal(store)
    rows = []
    if goal is not None:
        rows.append((Ref(goal.get("goal") or "(no text)", GOALS_PATH), budget(goal),
                     _when(goal.get("created"), goal.get("created_raw"))))
    return (Table(("Active goal", "Budget", "Set at (UTC)"), rows, empty="No active goal."),
            len(goal_history(store)))


def goal_pages(store: Store) -> list[Page]:
    """The goals page: the active goal's fields, outcomes, then every closed goal."""
    from toolkit.goals import active_goal, goal_history

    goal = active_goal(store)
    active = None
    if goal is not None:
        active = [Field("Goal", goal.get("goal")), Field("Budget", budget(goal)),
                  Field("Turns used", goal.get("turns_used")),
                  Field("Extensions", goal.get("extensions")),
                  Field("Set at (UTC)", _when(goal.get("created"), goal.get("created_raw"))),
                  Field("File", goal.get("path"))]
        if goal.get("problems"):
            active.append(Field("Problems", "; ".join(goal["problems"])))
    events = goal_history(store)
    counts = Counter(e.get("outcome") for e in events)
    order = [o for o in OUTCOME_ORDER if counts[o]] + sorted(
        (o for o in counts if o not in OUTCOME_ORDER), key=lambda o: str(o))
    outcomes = Table(("Outcome", "Goals"), [(o if o is not None else "(none)", counts[o])
                                           for o in order], empty="No goal has closed yet.")
    history = Table(("Closed (UTC)", "Goal", "Outcome", "Turns used", "Note", "Set at (UTC)"), [
        (_when(e.get("closed"), e.get("closed_raw")), e.get("goal"), e.get("outcome"),
         e.get("turns_used"), e.get("note"), _when(e.get("created"), e.get("created_raw")))
        for e in events], empty="No goal has closed yet.")
    return [GoalsPage(path=GOALS_PATH, title="Goals", nav=("Audit", "Goals"), wide=True,
                      intro="nagi-ledger's goal gate: the goal the agent may not stop before "
                            "(goal.json) and every goal it closed, newest first "
                            "(goal_history.jsonl).",
                      active=active, outcomes=outcomes, history=history, closed=len(events))]


__all__ = ["GOALS_PATH", "GoalsPage", "budget", "goal_pages", "goal_summary"]
