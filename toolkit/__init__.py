"""The Agent Ledger Toolkit: one queryable, browsable body of what AI coding agents learned,
left behind and did.

The public API is :class:`toolkit.api.Project` (``from toolkit import Project``), imported on
first use so that ``toolkit --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Project", "__version__"]

if TYPE_CHECKING:
    from toolkit.api import Project


def __getattr__(name: str) -> Any:
    if name == "Project":
        from toolkit.api import Project

        return Project
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
