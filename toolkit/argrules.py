"""The values a command's option and the Python API's argument both take, defined once.

A CLI option's type (``click.IntRange``, ``click.Choice``) refused a value the API took and
answered wrongly (``ledger_entries(category="bogus")``: no entries; ``rows(max_rows=10**20)``:
a raw TypeError from DuckDB), or refused in a message naming the CLI's flag. Each rule here
gives both: the option's type (``toolkit.cli._common.rule_type``: click's own range or
choice, with click's message), and :meth:`fits` and :meth:`describe` for ``toolkit.api``'s
argument checks, whose message names the method and the argument.

nagi-ledger's own arguments (``days``, ``since_hours``, ``since_days``, its ``limit`` and
``min_score``) are not here: they are checked by ``toolkit.audit_ops`` with nagi-ledger's
messages, word for word, as its MCP tools answer them.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.records import CATEGORIES, CONFIDENCES


@dataclass(frozen=True)
class Whole:
    """A whole number from ``low`` (through ``high``, when given)."""

    low: int
    high: int | None = None

    def fits(self, value: int) -> bool:
        return value >= self.low and (self.high is None or value <= self.high)

    def describe(self) -> str:
        if self.high is None:
            return f"a whole number of at least {self.low}"
        return f"a whole number from {self.low} to {self.high:,}"


@dataclass(frozen=True)
class OneOf:
    """One of ``values``, in any case."""

    values: tuple[str, ...]

    def fits(self, value: str) -> bool:
        return value.lower() in self.values

    def describe(self) -> str:
        return "one of " + ", ".join(self.values)


@dataclass(frozen=True)
class Day:
    """A date, or its text ``YYYY-MM-DD`` (``--today`` is read by ``toolkit.config``, which
    names where the value came from: the option, toolkit.yaml or ``$TOOLKIT_TODAY``)."""

    def fits(self, value: object) -> bool:
        import datetime as dt

        if isinstance(value, dt.date):
            return True
        try:
            dt.date.fromisoformat(str(value))
        except ValueError:
            return False
        return True

    def describe(self) -> str:
        return "a date (YYYY-MM-DD)"


@dataclass(frozen=True)
class Words:
    """Text with something to look for: blank text matched every title (the untitled entry
    one was shown as "None")."""

    def fits(self, value: str) -> bool:
        return bool(value.strip())

    def describe(self) -> str:
        return "text with a word in it"


Rule = Whole | OneOf | Day | Words

# Project.open(today=)
TODAY = Day()
# TITLE of ledger show, history, promote and demote / Project.ledger_entry, entry_history
TITLE = Words()
# --max-rows / Project.rows(max_rows=): the rows `toolkit query` shows
MAX_ROWS = Whole(1, 1_000_000)
# --index / Project.ledger_entry(index=): the N-th of several matching titles
INDEX = Whole(1)
# --category, --confidence / Project.ledger_entries, ledger_list
CATEGORY = OneOf(CATEGORIES)
CONFIDENCE = OneOf(CONFIDENCES)
# --older-than / Project.slop_entries, slop_query: days since an entry was created
OLDER_THAN = Whole(0)
# A limit on the rows of an answer (snapshots --limit, the API's limit=): None is no limit,
# in the API; 0 is refused rather than read as "none" by one method and "all" by another
LIMIT = Whole(1)
# Project.ledger_search_lines(context=), ledger_dashboard(top=): lines around a hit, entries
# shown (0: none); `slop query --limit` (0: all, the CLI's own reading; the API's slop limit
# is LIMIT)
COUNT = Whole(0)
