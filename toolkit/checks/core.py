"""Checks: named assertions over a project's records, and the one way they run.

A :class:`Check` finds the rows that break a rule (an SQL query over the store, or a Python
function for rules whose answer lives in a module: the redaction finder, reconcile's budget).
:func:`run_checks` runs each on a :class:`~toolkit.api.Project`'s locked-down read-only
connection; a check that cannot run (invalid SQL, a timeout, a source it cannot read) is a
result with status ``error`` and the message, and the others still run.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.errors import ToolkitError, UsageError

if TYPE_CHECKING:
    from toolkit.api import Project

LEVELS = ("error", "warn")
FIRST_ROWS = 5  # failing rows kept per check (the table, JSON and JUnit show these)
DEFAULT_TIMEOUT_S = 30.0  # per SQL check, as `toolkit query`'s

Rows = tuple[list[str], list[tuple[Any, ...]]]  # (columns, rows)
Finder = Callable[["Project", dict[str, Any]], Rows]

_COUNT = re.compile(r"^count\s*(==|=|!=|<=|>=|<|>)\s*(\d+)$")
_OPS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq, "=": operator.eq, "!=": operator.ne, "<=": operator.le,
    ">=": operator.ge, "<": operator.lt, ">": operator.gt}


@dataclass(frozen=True)
class Expect:
    """What a passing check returns: no rows (``no rows``) or a row count comparison
    (``count <= 3``)."""

    op: str = "=="
    value: int = 0

    @classmethod
    def parse(cls, text: str) -> Expect:
        """``no rows`` or ``count <op> N``; ValueError otherwise."""
        t = " ".join(str(text).split()).lower()
        if t in ("no rows", "none", "empty"):
            return cls()
        m = _COUNT.match(t)
        if not m:
            raise ValueError(f"expect {text!r} is not 'no rows' or 'count <op> N' "
                             "(op: == != < <= > >=)")
        return cls(m.group(1), int(m.group(2)))

    def holds(self, count: int) -> bool:
        return _OPS[self.op](count, self.value)

    def __str__(self) -> str:
        return "no rows" if (self.op, self.value) == ("==", 0) else f"count {self.op} {self.value}"


@dataclass(frozen=True)
class Check:
    """One rule. ``sql`` (a SELECT of the failing rows, thresholds bound as ``$name``, the
    project's date as ``$today``) or ``finder`` (a function giving the failing rows)."""

    name: str
    description: str  # one line: what a failing row is
    rationale: str  # why it matters (the table's "why" is its first sentence)
    level: str = "error"
    tags: tuple[str, ...] = ()
    thresholds: dict[str, Any] = field(default_factory=dict)
    sql: str | None = None
    finder: Finder | None = None
    expect: Expect = Expect()
    origin: str = "built-in"  # or "toolkit.yaml"

    @property
    def why(self) -> str:
        """The rationale's first sentence."""
        first = self.rationale.split(". ")[0].strip()
        return first if first.endswith(".") else first + "."


@dataclass
class Result:
    """How one check went: ``pass``, ``fail`` (an error-level check found rows), ``warn`` (a
    warn-level one did) or ``error`` (it could not run; ``message`` says why)."""

    check: Check
    status: str
    count: int = 0  # failing rows
    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # the first FIRST_ROWS of them
    message: str | None = None
    seconds: float = 0.0

    @property
    def fails_run(self) -> bool:
        """Whether this result makes the run fail (exit 1): an error-level check that failed
        or could not run. Warnings never do."""
        return self.check.level == "error" and self.status in ("fail", "error")

    def summary(self) -> str:
        """One line: what happened."""
        if self.status == "error":
            return f"could not run: {self.message}"
        if self.status == "pass":
            return "ok"
        if self.check.expect == Expect():
            return f"{self.count} failing row(s)"
        return f"{self.count} row(s); expected {self.check.expect}"


def select(checks: Sequence[Check], select: Sequence[str] = (), skip: Sequence[str] = ()
           ) -> list[Check]:
    """``checks`` whose name or a tag is in ``select`` (all when empty), minus those whose
    name or a tag is in ``skip``. A word that names no check and no tag is a usage error."""
    known = {c.name for c in checks} | {t for c in checks for t in c.tags}
    words = [w.strip() for item in (*select, *skip) for w in item.split(",") if w.strip()]
    unknown = sorted({w for w in words if w not in known})
    if unknown:
        raise UsageError(f"no check or tag named {', '.join(unknown)}",
                         hint="`toolkit check --list` shows the checks and their tags")

    def words_of(items: Sequence[str]) -> set[str]:
        return {w.strip() for item in items for w in item.split(",") if w.strip()}

    chosen, dropped = words_of(select), words_of(skip)

    def hit(c: Check, names: set[str]) -> bool:
        return c.name in names or bool(names & set(c.tags))

    return [c for c in checks if (not chosen or hit(c, chosen)) and not hit(c, dropped)]


def params_for(check: Check, today: dt.date) -> dict[str, Any]:
    """The values an SQL check's ``$name`` parameters are bound to: its thresholds and
    ``today``, only those the text names (DuckDB refuses unused named parameters)."""
    values = {**check.thresholds, "today": today}
    sql = check.sql or ""
    return {k: v for k, v in values.items() if re.search(rf"\${re.escape(k)}\b", sql)}


def run_check(project: Project, check: Check, *, timeout: float = DEFAULT_TIMEOUT_S) -> Result:
    """Run one check; its own failure to run is its result (status ``error``)."""
    started = time.perf_counter()
    try:
        if check.sql is not None:
            columns, count, rows = _run_sql(project, check, timeout)
        elif check.finder is not None:
            columns, found = check.finder(project, dict(check.thresholds))
            count, rows = len(found), list(found[:FIRST_ROWS])
        else:  # pragma: no cover - a Check is built with one of the two
            raise ToolkitError(f"check {check.name} has neither SQL nor a finder")
    except ToolkitError as exc:
        return Result(check, "error", message=_one_line(exc),
                      seconds=time.perf_counter() - started)
    passed = check.expect.holds(count)
    status = "pass" if passed else ("fail" if check.level == "error" else "warn")
    return Result(check, status, count, columns, [] if passed else rows,
                  seconds=time.perf_counter() - started)


def _run_sql(project: Project, check: Check, timeout: float
             ) -> tuple[list[str], int, list[tuple[Any, ...]]]:
    """(columns, failing row count, first rows): one pass over the check's query, on the
    project's locked-down read-only connection, interrupted after ``timeout`` seconds."""
    assert check.sql is not None
    return project._count_and_first(check.sql, params_for(check, project.today), FIRST_ROWS,
                                    timeout=timeout)


def run_checks(project: Project, checks: Sequence[Check], *,
               timeout: float = DEFAULT_TIMEOUT_S) -> list[Result]:
    """Every check, in order; each one's failure to run is its own result."""
    return [run_check(project, c, timeout=timeout) for c in checks]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
