"""``checks:`` in ``toolkit.yaml``: thresholds and levels for built-in checks, and checks a
user writes in SQL.

.. code-block:: yaml

    checks:
      - name: stale-retries        # a built-in check: set its thresholds or level
        days: 3
      - name: no-unowned-critical  # a user check: a SELECT of the failing rows
        sql: SELECT short_id FROM slop_entries WHERE severity = 'critical' AND owner IS NULL
        expect: no rows            # or a count comparison: count <= 3
        level: error               # or warn
        description: Critical slop has an owner.

Each entry is checked before any check runs; a bad one is a usage error naming it.
:func:`run_configured` runs the configured checks as every command does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolkit.checks.builtin import BUILTIN
from toolkit.checks.core import DEFAULT_TIMEOUT_S, LEVELS, Check, Expect, Result, run_checks
from toolkit.errors import UsageError

if TYPE_CHECKING:
    from toolkit.config import Config

_USER_KEYS = ("name", "sql", "expect", "level", "description", "tags")
_BUILTIN_KEYS = ("name", "level")


def checks_for(entries: Sequence[Any], *, path: Any = None) -> list[Check]:
    """The built-in checks (with ``entries``' settings) followed by the user's checks."""
    builtin = {c.name: c for c in BUILTIN}
    users: list[Check] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, 1):
        label = f"checks entry {number}"
        if not isinstance(entry, dict):
            raise UsageError(f"{label} must be a mapping (name, sql, expect, level, "
                             "description)", path=path)
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{label} has no name", path=path)
        label = f"check {name!r}"
        if name in seen:
            raise UsageError(f"{label} is set twice", path=path)
        seen.add(name)
        level = entry.get("level")
        if level is not None and level not in LEVELS:
            raise UsageError(f"{label}: unknown level {level!r} (use error or warn)", path=path)
        if name in builtin:
            builtin[name] = _configured(builtin[name], entry, label, path)
            continue
        users.append(_user_check(name, entry, label, path))
    return [*builtin.values(), *users]


_INT_MAX = 2**31 - 1
# a threshold of days goes back from today: a million days (2,700 years) is before any record,
# and further back leaves the range of a timestamp (the check failed when it ran)
_THRESHOLD_MAX = {"days": 1_000_000}


def _configured(check: Check, entry: dict[str, Any], label: str, path: Any) -> Check:
    allowed = (*_BUILTIN_KEYS, *check.thresholds)
    unknown = sorted(str(k) for k in entry if k not in allowed)
    if unknown:
        raise UsageError(f"{label}: unknown setting(s) {', '.join(unknown)} (built-in check; "
                         f"settings: {', '.join(allowed[1:])})", path=path)
    thresholds = dict(check.thresholds)
    for key in check.thresholds:
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"{label}: {key} must be a whole number >= 0, not {value!r}",
                                 path=path)
            top = _THRESHOLD_MAX.get(key, _INT_MAX)  # the SQL takes it as an INTEGER
            if value > top:
                raise UsageError(f"{label}: {key} must be at most {top:,}, not {value:,}",
                                 path=path)
            thresholds[key] = value
    return dataclasses.replace(check, thresholds=thresholds,
                               level=entry.get("level") or check.level)


def _user_check(name: str, entry: dict[str, Any], label: str, path: Any) -> Check:
    unknown = sorted(str(k) for k in entry if k not in _USER_KEYS)
    if unknown:
        raise UsageError(f"{label}: unknown setting(s) {', '.join(unknown)} "
                         f"(settings: {', '.join(_USER_KEYS)})", path=path)
    sql = entry.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise UsageError(f"{label} has no sql (a user check is a SELECT of the failing rows)",
                         path=path)
    _require_select(sql, label, path)
    try:
        expect = Expect.parse(entry.get("expect") or "no rows")
    except ValueError as exc:
        raise UsageError(f"{label}: {exc}", path=path) from None
    description = entry.get("description")
    if description is not None and not isinstance(description, str):
        raise UsageError(f"{label}: description must be text", path=path)
    tags = entry.get("tags") or []
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise UsageError(f"{label}: tags must be a list of words", path=path)
    text = " ".join((description or f"rows of: {' '.join(sql.split())}").split())
    return Check(name=name, description=text, rationale=text, level=entry.get("level") or "error",
                 tags=("user", *tags), sql=sql, expect=expect, origin="toolkit.yaml")


def _require_select(sql: str, label: str, path: Any) -> None:
    """A user check's SQL is one read-only SELECT (``toolkit query``'s rule); it is bound to
    the store only when it runs, so an unknown table is that check's error."""
    from toolkit.errors import RefusedError
    from toolkit.store import parse_select

    try:
        parse_select(sql)
    except RefusedError as exc:
        raise UsageError(f"{label}: {exc.message}", path=path) from None


def run_configured(cfg: Config, checks: Sequence[Check] | None = None, *,
                   timeout: float = DEFAULT_TIMEOUT_S) -> list[Result]:
    """``checks`` (default: the built-in and ``toolkit.yaml`` checks) run on the store as it
    is, on a :class:`~toolkit.api.Project`'s locked-down read-only connection, closed after.

    The one way every caller runs them (``toolkit check``, the handoff, publish and the
    site): with the store closed, after the refresh and before the store is opened for
    writing, because DuckDB will not open that connection beside a writer in the same
    process. The results are then passed in (``build_report(..., checks=)``)."""
    from toolkit.api import Project

    if checks is None:
        checks = checks_for(cfg.checks, path=cfg.config_file)
    with Project(cfg) as project:
        return run_checks(project, checks, timeout=timeout)
