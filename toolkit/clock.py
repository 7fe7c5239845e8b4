"""One clock for every output: the run's time ("now") and the day ages count to ("today").

- **now**: when this output is made (the site's "Built on", ``slop export``'s "Generated at",
  the handoff's state stamp). An explicit time (``build-site --build-time``), else
  ``SOURCE_DATE_EPOCH``, else the real time; always UTC, whole seconds.
- **today**: the date ages, windows and pruning count to. The ``today`` setting
  (``--today``, ``TOOLKIT_TODAY``, ``today:`` in toolkit.yaml), else the UTC date of now.

The two differ when only ``today`` is injected (the demo pins it); outputs that show both say
so (the site's dashboard). nagi-ledger's own clock for audit windows (``--now`` /
``TOOLKIT_NOW``) is the seed tool's and stays in ``toolkit.audit_ops``.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping

from toolkit.errors import UsageError

EPOCH_ENV = "SOURCE_DATE_EPOCH"


def now(value: str | None = None, env: Mapping[str, str] | None = None) -> dt.datetime:
    """The run's time: ``value`` (``--build-time``: ISO date/time or Unix seconds), else
    ``SOURCE_DATE_EPOCH``, else the real time (UTC, whole seconds)."""
    env = os.environ if env is None else env
    raw = value if value is not None else env.get(EPOCH_ENV)
    origin = "--build-time" if value is not None else EPOCH_ENV
    if raw is None or raw == "":
        return dt.datetime.now(dt.UTC).replace(microsecond=0)
    raw = raw.strip()
    try:
        if re.fullmatch(r"\d+", raw):
            return dt.datetime.fromtimestamp(int(raw), dt.UTC)
        parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        # (9999-12-31T23:00-05:00 is past year 9999 in UTC: no time either)
        return parsed.astimezone(dt.UTC)
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"{origin}: {raw!r} is not a time; use Unix seconds or "
                         "YYYY-MM-DDTHH:MM:SS") from None


def utc(when: dt.datetime) -> dt.datetime:
    """``when`` in UTC; a naive time is taken as UTC (never as the machine's zone)."""
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def naive_utc(when: dt.datetime) -> dt.datetime:
    """``when`` as a naive UTC time, the form the audit windows and the store's TIMESTAMPs
    take: an aware time is converted (12:00 in Tokyo is 03:00), a naive one is already UTC.
    The one rule for ``--now`` and for every datetime the Python API is given."""
    return utc(when).replace(tzinfo=None)


def today(setting: dt.date | None, at: dt.datetime | None = None) -> dt.date:
    """The day ages count to: ``setting`` (the injected today), else the UTC date of ``at``
    (default: :func:`now`)."""
    if setting is not None:
        return setting
    return utc(at or now()).date()


def stamp(when: dt.datetime) -> str:
    """A time as every output prints it: ``2026-05-10 12:00 UTC``."""
    return utc(when).strftime("%Y-%m-%d %H:%M UTC")


def describe(when: dt.datetime, day: dt.date) -> str:
    """The clock line of an output that shows both: "Built on <now>", and the day ages count
    to when it is not now's date."""
    text = f"Built on {stamp(when)}"
    if day != utc(when).date():
        text += f"; ages and windows are counted to {day.isoformat()}"
    return text + "."


# A date-time text that names its offset (``Z``, ``+09:00``, ``-0800``, DuckDB's own ``+09``).
_OFFSET_TEXT = r"[T ]\d\d:\d\d(:\d\d(\.\d+)?)?\s*(Z|z|[+-]\d\d(:?\d\d)?)$"


def utc_timestamp_sql(expr: str) -> str:
    """A DuckDB expression reading ``expr`` (text, or a time) as the store's TIMESTAMP: UTC
    without offset, as :func:`utc` reads a time. A text with an offset is moved to UTC (a
    bare ``TRY_CAST(... AS TIMESTAMP)`` drops the offset: ``...T08:00:00+09:00`` would be
    08:00, not 23:00 the day before); one without is taken as UTC; what is no time, NULL.
    Independent of the connection's TimeZone."""
    text = f"CAST({expr} AS VARCHAR)"
    return (f"CASE WHEN regexp_matches({text}, '{_OFFSET_TEXT}') "
            f"THEN timezone('UTC', TRY_CAST({text} AS TIMESTAMPTZ)) "
            f"ELSE TRY_CAST({expr} AS TIMESTAMP) END")
