"""``pytest --cpu-report``: the test modules that cost the most CPU time, after the run.

On two cores the suite is bound by CPU: its workers and the processes they start (the console
script, kernels, Spark's JVM, Chromium, git) keep both cores busy to the end, so a test's
wall time (``--durations``) counts the other workers' work and its waits on its children as
its own. What makes the run shorter is less CPU time; this report gives it, by module: the
time of the test process itself and of the processes it started and waited for (the
operating system's counts: ``getrusage``), for every phase of each test (setup, call,
teardown: a module's shared fixtures count in its first and last test). A session-wide
fixture (the shared demo site) counts in the module that first asked for it; a process a
test leaves running counts in the module that waits for it. A process its parent never
waits for is counted nowhere (init, or the nearest subreaper, reaps it): Chromium's zygote
processes are such, and with them the renderers they started, so the browser modules cost
more than shown (tests/test_browser_tables.py: 26.6 s counted, 16.1 s more reaped by init).
Over the whole suite the machine spent about a tenth more CPU time than the run's total.

Under pytest-xdist each worker counts its own modules and sends them to the controller at
its end (``workeroutput``), which prints one report for the run, with the run's whole CPU
time beside it: the rest is the workers' start and collection, and the controller's own."""

from __future__ import annotations

import json
import resource
from collections import defaultdict
from typing import Any

import pytest

TOP = 30  # modules shown


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", action="store_true", default=False,
                     help=f"after the run, show the {TOP} test modules that used the most CPU "
                          "time (the test process's and its child processes'), and the run's "
                          "total")


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of its children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


class CpuReport:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.own: dict[str, float] = defaultdict(float)  # by module: seconds in the test
        self.kids: dict[str, float] = defaultdict(float)  # process, and in those it started
        self.total = 0.0  # the run's processes, whole (each worker's, sent at its end)
        self.workers = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        own, kids = _cpu()
        yield
        own_after, kids_after = _cpu()
        module = item.nodeid.split("::", 1)[0]
        self.own[module] += own_after - own
        self.kids[module] += kids_after - kids

    def _counts(self) -> dict[str, Any]:
        return {"own": dict(self.own), "kids": dict(self.kids), "total": sum(_cpu())}

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:  # an xdist worker: the controller reports
            output["cpu_report"] = json.dumps(self._counts())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        sent = getattr(node, "workeroutput", {}).get("cpu_report")
        if sent is None:  # (a worker that crashed sends nothing)
            return
        counts = json.loads(sent)
        for mine, theirs in ((self.own, counts["own"]), (self.kids, counts["kids"])):
            for module, seconds in theirs.items():
                mine[module] += seconds
        self.total += counts["total"]
        self.workers += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if getattr(self.config, "workeroutput", None) is not None:
            return
        tr = terminalreporter
        # the workers' (each with its children), and this process's own: once reaped, the
        # workers count among its children too
        mine, my_children = _cpu()
        total = self.total + mine + (0.0 if self.workers else my_children)
        modules = sorted(self.own.keys() | self.kids.keys(),
                         key=lambda m: (-(self.own[m] + self.kids[m]), m))

        def row(label: str, group: list[str]) -> None:
            own = sum(self.own[m] for m in group)
            kids = sum(self.kids[m] for m in group)
            tr.write_line(f"{own + kids:8.1f} {own:8.1f} {kids:8.1f}  {label}")

        where = f"{self.workers} workers" if self.workers else "one process"
        tr.write_sep("=", f"CPU time by test module ({where})")
        tr.write_line(f"{'CPU s':>8} {'tests':>8} {'started':>8}  module")
        for module in modules[:TOP]:
            row(module, [module])
        if len(modules) > TOP:
            row(f"({len(modules) - TOP} more modules)", modules[TOP:])
        in_tests = sum(self.own.values()) + sum(self.kids.values())
        tr.write_line(f"{in_tests:8.1f} s in the tests; {total:.1f} s in the whole run "
                      "(with the processes' start, collection and the controller)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_report"):
        config.pluginmanager.register(CpuReport(config), "cpu-report")
