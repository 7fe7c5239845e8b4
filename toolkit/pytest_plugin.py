"""The toolkit's pytest plugin (entry point ``pytest11``): assertions over agent records in
a team's own test suite.

Fixtures:

- ``agent_project``: the project's :class:`~toolkit.api.Project` (``--agent-project=PATH``,
  else found from the current folder as the CLI finds it), refreshed once per session.
- ``agent_sql``: ``agent_sql("SELECT ...", params)`` -> the rows of one read-only SELECT, on
  the same locked-down connection as ``toolkit query``.

``pytest --agent-checks`` also collects the built-in and ``toolkit.yaml`` checks, one item per
check (``--agent-select``/``--agent-skip`` choose them, as ``toolkit check --select/--skip``).
A failing error-level check fails its item; a warn-level one passes with a warning.

Loaded in every pytest run once the toolkit is installed, so it costs nothing unused: the
toolkit itself is imported only when a fixture or ``--agent-checks`` asks for it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from toolkit.api import Project
    from toolkit.checks import Check

_PROJECT = pytest.StashKey["Project"]()


class AgentCheckWarning(UserWarning):
    """A warn-level check found rows (it never fails the run)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agent-ledger-toolkit", "agent records (Agent Ledger Toolkit)")
    group.addoption("--agent-project", default=None, metavar="PATH",
                    help="Project the agent_project fixture and --agent-checks read "
                         "(default: found from the current folder, as `toolkit` finds it). "
                         "Write --agent-project=PATH: pytest picks its rootdir before it "
                         "knows this option, and a separate PATH counts as a test path.")
    group.addoption("--agent-checks", action="store_true", default=False,
                    help="Also collect the built-in and toolkit.yaml checks, one test each.")
    group.addoption("--agent-select", action="append", default=[], metavar="NAME|TAG",
                    help="With --agent-checks: only these checks (names or tags).")
    group.addoption("--agent-skip", action="append", default=[], metavar="NAME|TAG",
                    help="With --agent-checks: leave out these checks (names or tags).")


def _project(config: pytest.Config) -> Project:
    """The session's project, opened and refreshed on first use."""
    project = config.stash.get(_PROJECT, None)
    if project is None:
        from toolkit.api import Project
        from toolkit.errors import ToolkitError

        try:
            project = Project.open(config.getoption("agent_project"))
        except ToolkitError as exc:
            raise pytest.UsageError(f"agent project: {exc}") from None
        config.stash[_PROJECT] = project
    return project


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a run whose rootdir pytest took from ``--agent-project PATH``. pytest chooses
    its rootdir (and its ini file) before it knows a plugin's options, so the PATH after a
    separate ``--agent-project`` counts as a test path then: with the project's own
    pyproject.toml, the run was rooted in the project (its settings, test ids relative to it,
    JUnit names with them). ``--agent-project=PATH`` is one word and is not taken so."""
    import os
    import shlex

    value = config.getoption("agent_project", None)
    given = [*config.invocation_params.args,
             *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    if not value or "--agent-project" not in given:
        return
    project = Path(value).resolve()
    invoked = config.invocation_params.dir.resolve()
    root = config.rootpath.resolve()
    # test paths inside the project root the run there rightly (pytest's own rule)
    paths = [Path(a.split("::")[0]) for a in config.args if not a.startswith("-")]
    inside = any(project in (q, *q.parents)
                 for q in ((invoked / a).resolve() for a in paths if (invoked / a).exists()))
    if project in (root, *root.parents) and project not in (invoked, *invoked.parents) \
            and not inside:
        raise pytest.UsageError(
            f"pytest took {value} (after --agent-project) for a test path when it chose its "
            f"rootdir ({root}); write --agent-project={value} (with '=')")


def pytest_unconfigure(config: pytest.Config) -> None:
    project = config.stash.get(_PROJECT, None)
    if project is not None:
        project.close()


@pytest.fixture(scope="session")
def agent_project(pytestconfig: pytest.Config) -> Project:
    """The agent project (a :class:`toolkit.api.Project`), refreshed once per session."""
    return _project(pytestconfig)


@pytest.fixture(scope="session")
def agent_sql(agent_project: Project) -> Callable[..., list[tuple[Any, ...]]]:
    """``agent_sql(query, params=None)``: the rows of one read-only SELECT over the store."""

    def run(query: str, params: list[Any] | dict[str, Any] | None = None
            ) -> list[tuple[Any, ...]]:
        return agent_project.sql(query, params).fetchall()

    return run


class AgentCheckFailure(Exception):
    """An error-level check found rows or could not run."""


class AgentChecks(pytest.Collector):
    """The checks, collected as one item each."""

    def collect(self) -> Iterator[pytest.Item]:
        from toolkit.checks import checks_for, select
        from toolkit.errors import ToolkitError

        config = self.config
        project = _project(config)
        try:
            checks = select(checks_for(project.config.checks, path=project.config.config_file),
                            config.getoption("agent_select"), config.getoption("agent_skip"))
        except ToolkitError as exc:
            raise pytest.UsageError(str(exc)) from None
        for check in checks:
            yield AgentCheckItem.from_parent(self, name=check.name, check=check)


class AgentCheckItem(pytest.Item):
    """One check run as a test."""

    def __init__(self, *, check: Check, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check

    def runtest(self) -> None:
        from toolkit.checks import run_check
        from toolkit.checks.output import row_text

        result = run_check(_project(self.config), self.check)
        if result.status == "pass":
            return
        text = "\n".join([f"{self.check.name}: {result.summary()}", self.check.why,
                          *("  " + row_text(row, 200) for row in result.rows)])
        if result.fails_run:
            raise AgentCheckFailure(text)
        warnings.warn(AgentCheckWarning(text), stacklevel=1)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, AgentCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "agent-checks", None, f"agent check {self.check.name} ({self.check.level})"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if not config.getoption("agent_checks"):
        return
    collector = AgentChecks.from_parent(session, name="agent-checks", nodeid="agent-checks")
    items.extend(collector.collect())
