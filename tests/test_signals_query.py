"""Ctrl-C (SIGINT) and ``kill`` (SIGTERM) while a long DuckDB query runs.

The toolkit's rule: SIGTERM ends any command as Ctrl-C does, "Terminated." and exit 143;
Ctrl-C is "Interrupted." and exit 130. Inside a DuckDB query DuckDB runs the signal's handler
between its tasks and drops what the handler raises for its own ``RuntimeError("Query
interrupted")``: the command ended with that traceback and exit 1, or, where it was read as
DuckDB's interrupt, as the query's timeout. Each test runs the real console script on a real
store and sends the signal once the query runs: once the command has used more CPU than its start
takes (measured with a query of no time; a watchdog on CPU time, not on the clock).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import reap

TOOLKIT = Path(sys.executable).parent / "toolkit"  # the console script pip installed
# hours of work on two threads, and one row at the end
LONG = "SELECT count(*) AS n FROM range(100000000000) t(a) WHERE a % 7 = 3"
EXPECTED = {signal.SIGINT: (130, "Interrupted.\n"),
            signal.SIGTERM: (128 + signal.SIGTERM, "Terminated.\n")}

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(),
                                reason="reads the command's CPU time from /proc")


def _cpu(pid: int) -> float:
    """Seconds of CPU the process has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _default_sigint() -> None:
    # a shell's background job ignores SIGINT, and a child inherits that: Ctrl-C's own here
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _startup_cpu(args: list[str], cwd: Path) -> float:
    """The CPU seconds the command takes with a query of no time (start, load, answer)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(TOOLKIT), *args], cwd=cwd, capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _signal_during_query(args: list[str], cwd: Path, signum: int, startup: float
                         ) -> tuple[int, str, str]:
    """Run the command; once it has used twice the CPU its start takes and half a second
    more (its query runs: a watchdog on CPU time, not on the clock), send ``signum``. The
    query then has run for at least the start's CPU and that half second (a signal that came
    before it, once the command's handlers are in place, ends the command with the same exit
    and message: the margin is what makes this a signal during the query; a larger one only
    burns more CPU, about 2.5 s per test for the 3 s this waited before)."""
    proc = subprocess.Popen([str(TOOLKIT), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        while _cpu(proc.pid) < 2 * startup + 0.5:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)  # hours when the signal is not acted on
    finally:
        reap(proc)
    return proc.returncode, out, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_long_query_ends_it_as_the_signal_does(
        project, cli_run, signum: int) -> None:  # type: ignore[no-untyped-def]
    """`toolkit query` with a query of hours and a 300 s timeout, stopped by Ctrl-C or kill:
    the signal's message and exit, not DuckDB's traceback nor the timeout's message."""
    assert cli_run("load").exit_code == 0
    startup = _startup_cpu(["query", "SELECT 1"], project.root)
    code, out, err = _signal_during_query(["query", LONG, "--timeout", "300"], project.root,
                                          signum, startup)
    assert (code, err) == EXPECTED[signum]
    assert out == ""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_long_check_ends_the_run_as_the_signal_does(
        project, cli_run, signum: int) -> None:  # type: ignore[no-untyped-def]
    """`toolkit check` running a check of toolkit.yaml whose query takes hours: the signal ends
    the run (not an error of that check, then the next ones)."""
    settings = project.root / "toolkit.yaml"
    settings.write_text("checks:\n  - name: endless\n    sql: SELECT 1 AS a WHERE false\n",
                        encoding="utf-8")
    assert cli_run("load").exit_code == 0
    startup = _startup_cpu(["check", "--select", "user"], project.root)
    settings.write_text(
        "checks:\n"
        "  - name: endless\n"
        "    sql: SELECT a FROM range(100000000000) t(a) WHERE a % 7 = 3 AND a < 0\n",
        encoding="utf-8")
    code, out, err = _signal_during_query(["check", "--select", "user", "--timeout", "3000"],
                                          project.root, signum, startup)
    assert (code, err) == EXPECTED[signum]
    assert "endless" not in out
