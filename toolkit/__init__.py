"""The Agent Ledger Toolkit: one queryable, browsable body of what AI coding agents learned,
left behind and did.

The public API is :class:`toolkit.api.Project` (``from toolkit import Project``), with the
named shapes its methods return (``from toolkit import TaskStatus``...: ``toolkit.api``'s
``__all__``), imported on first use so that ``toolkit --help`` stays fast. ``dir(toolkit)``
lists them before that first use, so a notebook's completion offers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# toolkit.api's __all__, and the version (tests/test_api.py holds the two lists the same)
__all__ = ["Approach", "ApproachRecord", "Approaches", "AuditHit", "AuditStats", "Dispatch",
           "LedgerHit", "OpenSlop", "Project", "Rows", "SimilarTask", "SlopMatches", "TaskRow",
           "TaskStatus", "TierDay", "Turn", "TurnActivity", "TurnFile", "__version__"]
_API = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from toolkit.api import (
        Approach,
        Approaches,
        ApproachRecord,
        AuditHit,
        AuditStats,
        Dispatch,
        LedgerHit,
        OpenSlop,
        Project,
        Rows,
        SimilarTask,
        SlopMatches,
        TaskRow,
        TaskStatus,
        TierDay,
        Turn,
        TurnActivity,
        TurnFile,
    )


def __getattr__(name: str) -> Any:
    if name in _API:
        import toolkit.api

        return getattr(toolkit.api, name)
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
