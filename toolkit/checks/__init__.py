"""Checks over a project's records: ``toolkit check``, the pytest plugin and the site.

``checks_for(config.checks)`` gives the built-in checks (with ``toolkit.yaml``'s settings)
and the user's; ``run_checks(project, checks)`` runs them (see :mod:`toolkit.checks.core`);
``run_configured(cfg)`` runs them with the store closed, as every command does.
"""

from toolkit.checks.builtin import BUILTIN
from toolkit.checks.core import (
    FIRST_ROWS,
    LEVELS,
    Check,
    Expect,
    Result,
    run_check,
    run_checks,
    select,
)
from toolkit.checks.user import checks_for, run_configured

__all__ = ["BUILTIN", "FIRST_ROWS", "LEVELS", "Check", "Expect", "Result", "checks_for",
           "run_check", "run_checks", "run_configured", "select"]
