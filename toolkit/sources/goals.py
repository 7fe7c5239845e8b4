"""Read nagi-ledger's goal gate files (``goal_gate.py``), never writing them.

* ``goal.json`` ($NAGI_GOAL_FILE, ~/.nagi/goal.json): the one active goal, a JSON object with
  ``goal``, ``remaining``, ``max_turns``, ``created`` (and ``extensions`` once extended).
  nagi-ledger treats a file it cannot read, that is not JSON, not an object or lacks one of
  the four keys as "no active goal"; so does this reader, with a warning saying why.
* ``goal_history.jsonl`` ($NAGI_GOAL_HISTORY, ~/.nagi/goal_history.jsonl): one JSON object
  per line, appended when a goal closes: ``goal``, ``outcome`` (done, aborted, superseded,
  budget_exhausted, corrupt_state), ``note``, ``created``, ``closed``, ``turns_used``.
  nagi-ledger only appends to it; a line that is not a JSON object is skipped with a warning.
  An interrupted append leaves a torn line; the next append then continues on that same line,
  so a torn line may be followed by a whole entry: that entry is kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import DataError
from toolkit.records import BIGINT_BOUND, INTEGER_BOUND, Problem, fits
from toolkit.textio import read_bytes

SOURCE = "goals"
REQUIRED_KEYS = ("goal", "remaining", "max_turns", "created")
STATE_KEYS = (*REQUIRED_KEYS, "extensions")
EVENT_KEYS = ("goal", "outcome", "note", "created", "closed", "turns_used")
OUTCOMES = ("done", "aborted", "superseded", "budget_exhausted", "corrupt_state")
NO_GOAL = "nagi-ledger treats this as no active goal"
_ENTRY_START = '{"goal": '  # how every line goal_gate.py appends begins (json.dumps)


@dataclass
class GoalState:
    """The active goal, as goal.json holds it (values as written)."""

    path: str
    goal: Any
    remaining: Any
    max_turns: Any
    created: Any
    extensions: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@dataclass
class GoalEvent:
    """One line of the goal history: a goal that closed, and how."""

    path: str
    line: int
    goal: Any
    outcome: Any
    note: Any
    created: Any
    closed: Any
    turns_used: Any
    extra: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def whole_number(value: Any) -> int | None:
    """An integer value as JSON gave it (not a bool, not a float), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# The store's columns: BIGINT, and INTEGER for ``extensions``. A whole number beyond them is
# a warning and NULL, as the audit DB's (nagi-ledger's are small numbers), not a failed load.
BOUNDS = {"extensions": INTEGER_BOUND}


def stored_number(key: str, value: Any) -> int | None:
    """:func:`whole_number`, when the store's column for ``key`` holds it, else None."""
    n = whole_number(value)
    bound = BOUNDS.get(key, BIGINT_BOUND)
    return n if n is not None and fits(n, bound) else None


def _number_problem(key: str, value: Any) -> str | None:
    """Why ``value`` of ``key`` is no number the store holds (None: it is one, or absent)."""
    if value is None and key in ("extensions", "turns_used"):
        return None
    if whole_number(value) is None:
        return f"{key} is not a whole number: {json.dumps(value)}"
    if stored_number(key, value) is None:
        return f"{key} is {value}, too large a whole number"
    return None


def _non_finite_problems(data: dict[str, Any], warned: tuple[str, ...]) -> list[str]:
    """A warning per number JSON cannot hold (NaN, an infinity such as ``1e400``) in
    ``data``, which the store keeps as null; the keys in ``warned`` already have theirs
    (not a whole number)."""
    from toolkit.textio import non_finite

    return [f"{key} is {json.dumps(value)}, a number JSON cannot hold: stored as null"
            for key, value in non_finite(data) if key not in warned]


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def read_goal_file(path: Path, max_bytes: int | None = None
                   ) -> tuple[GoalState | None, list[Problem]]:
    """The active goal, or None (absent, or a file nagi-ledger would not take as a goal)."""
    where = str(path)
    if not path.exists():
        return None, []
    try:
        text = read_bytes(path, max_bytes).decode("utf-8")
    except DataError as exc:
        return None, [Problem(SOURCE, where, None, f"{exc.detail}; {NO_GOAL}")]
    except UnicodeDecodeError as exc:
        return None, [Problem(SOURCE, where, None,
                              f"invalid UTF-8 at byte offset {exc.start}; {NO_GOAL}")]
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, [Problem(SOURCE, where, None, f"not valid JSON ({exc}); {NO_GOAL} "
                              "(its Stop hook deletes such a file and records corrupt_state)")]
    if not isinstance(data, dict):
        return None, [Problem(SOURCE, where, None,
                              f"holds a JSON {type(data).__name__}, not an object; {NO_GOAL}")]
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        return None, [Problem(SOURCE, where, None,
                              f"missing {', '.join(missing)}; {NO_GOAL}")]
    state = GoalState(path=where, goal=data["goal"], remaining=data["remaining"],
                      max_turns=data["max_turns"], created=data["created"],
                      extensions=data.get("extensions"),
                      extra={k: v for k, v in data.items() if k not in STATE_KEYS})
    for key in ("remaining", "max_turns"):
        why = _number_problem(key, data[key])
        if why is not None:
            state.problems.append(why)
    if whole_number(state.extensions) is not None:  # another value counts as none (0)
        why = _number_problem("extensions", state.extensions)
        if why is not None:
            state.problems.append(why)
    if not isinstance(data["goal"], str):
        state.problems.append(f"goal is not text: {json.dumps(data['goal'])}")
    state.problems += _non_finite_problems(data, ("remaining", "max_turns"))
    problems = [Problem(SOURCE, where, None, p) for p in state.problems]
    return state, problems


def read_goal_history(path: Path, max_bytes: int | None = None
                      ) -> tuple[list[GoalEvent], list[Problem]]:
    """Every closed goal in the history file, in file order, and what was wrong with it."""
    where = str(path)
    if not path.exists():
        return [], []
    try:
        data = read_bytes(path, max_bytes)
    except DataError as exc:
        return [], [Problem(SOURCE, where, None, f"{exc.detail}; goal history not read")]
    return parse_goal_history(data, where)


def parse_goal_history(data: bytes, where: str, first_line: int = 1
                       ) -> tuple[list[GoalEvent], list[Problem]]:
    """The closed goals in ``data``, lines of the history file from ``first_line`` on."""
    lines = data.split(b"\n")
    torn_tail = not data.endswith(b"\n")
    events: list[GoalEvent] = []
    problems: list[Problem] = []
    for number, raw in enumerate(lines, start=first_line):
        if not raw.strip():
            continue
        last = torn_tail and number == first_line + len(lines) - 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(Problem(SOURCE, where, number,
                                    f"invalid UTF-8 at byte offset {exc.start} of the line; "
                                    "line ignored"))
            continue
        obj, note = _parse_line(text)
        if obj is None:
            why = ("torn last line (an interrupted write, no newline at the end)" if last
                   else f"not a JSON object ({note})")
            problems.append(Problem(SOURCE, where, number, f"{why}; line ignored"))
            continue
        if note:
            problems.append(Problem(SOURCE, where, number, note))
        event = GoalEvent(path=where, line=number, goal=obj.get("goal"),
                          outcome=obj.get("outcome"), note=obj.get("note"),
                          created=obj.get("created"), closed=obj.get("closed"),
                          turns_used=obj.get("turns_used"),
                          extra={k: v for k, v in obj.items() if k not in EVENT_KEYS})
        if not isinstance(event.outcome, str):
            event.problems.append("no outcome" if event.outcome is None
                                  else f"outcome is not text: {json.dumps(event.outcome)}")
        for key in ("goal", "note", "created", "closed"):
            if not _text(obj.get(key)):
                event.problems.append(f"{key} is not text: {json.dumps(obj.get(key))}")
        wrong = _number_problem("turns_used", event.turns_used)
        if wrong is not None:
            event.problems.append(wrong)
        event.problems += _non_finite_problems(
            {k: v for k, v in obj.items() if k not in ("goal", "note", "created", "closed")},
            ("turns_used",))
        problems += [Problem(SOURCE, where, number, p) for p in event.problems]
        events.append(event)
    return events, problems


def _parse_line(text: str) -> tuple[dict[str, Any] | None, str]:
    """(object, note): the line's object; or the whole entry after a torn one (with a note);
    or (None, why)."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        why = str(exc)
        start = text.find(_ENTRY_START, 1)
        while start > 0:
            try:
                rest = json.loads(text[start:])
            except ValueError:
                start = text.find(_ENTRY_START, start + 1)
                continue
            if isinstance(rest, dict):
                return rest, (f"a torn entry (an interrupted write) ran into the next one: "
                              f"its first {start} characters ignored")
            break
        return None, why
    if not isinstance(obj, dict):
        return None, f"a JSON {type(obj).__name__}"
    return obj, ""


__all__ = ["OUTCOMES", "REQUIRED_KEYS", "GoalEvent", "GoalState", "parse_goal_history",
           "read_goal_file", "read_goal_history", "stored_number", "whole_number"]
