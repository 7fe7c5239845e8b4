"""One process's own CPU time and peak memory, for the benchmarks.

:func:`measure` runs ``python -m MODULE ARGS`` or ``python -c CODE ARGS`` in a child process
through :data:`RUNNER`, which reads at the child's exit its own peak memory (``VmHWM`` in
``/proc/self/status``) and CPU time (user + system, with the helper processes it waited for)
and writes them to a file. Why not ``wait4``'s ``ru_maxrss``: Linux carries a process's
``ru_maxrss`` over ``fork``/``vfork`` and ``exec``, so a child started from a large parent (the
benchmark, holding its generated world) reports the parent's high-water mark if it stays below
it, and ``RUSAGE_CHILDREN`` keeps the largest of all children ever waited for. ``VmHWM``
belongs to the address space the child's ``exec`` made, and starts afresh.

On request (``split``), a thread of the child samples its resident size every 20 ms and keeps,
at the largest, its anonymous part (heap, stacks) and its file-backed part (the code of the
interpreter and the libraries: clean pages the kernel drops and reads again under pressure),
so a peak can be told apart from the code a library maps.

Not counted in the peak: helper processes the child starts (their own ``ru_maxrss`` has the same
flaw); their CPU time is counted once the child has waited for them.

Where the wall time goes (Linux): the child also reads, at exit, how long its threads waited
in the run queue, runnable but not running (``/proc/self/task/*/schedstat``, second field):
on a shared machine that is what the wall time has above the CPU time. What is left of the
wall after the CPU time and that wait was spent blocked (disk, child processes, sleeps). The
threads that ended before the exit are not counted in the wait, so ``blocked`` is an upper
bound.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# argv: the result file, then "-m MODULE ARGS..." or "-c CODE ARGS...". The report is written at
# exit by atexit, registered before the command runs, so it runs last: after the command's own
# exit handlers (which may end and wait for its helper processes).
RUNNER = """
import atexit, glob, resource, runpy, sys, threading, time
out = sys.argv.pop(1)
split = [0, 0, 0]  # at the largest resident size sampled: it, its anonymous and file parts (kB)
def sample():
    while True:
        with open("/proc/self/status") as fh:
            got = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in fh)
                   if k in ("VmRSS", "RssAnon", "RssFile")}
        if got.get("VmRSS", 0) > split[0]:
            split[:] = [got["VmRSS"], got.get("RssAnon", 0), got.get("RssFile", 0)]
        time.sleep(0.02)
if sys.argv[1] == "--split":
    sys.argv.pop(1)
    threading.Thread(target=sample, daemon=True).start()
def report():
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open("/proc/self/status") as fh:
        hwm = [line.split()[1] for line in fh if line.startswith("VmHWM:")][0]
    waited = 0
    for name in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(name) as fh:
                waited += int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    with open(out, "w") as fh:
        fh.write(f"{me.ru_utime + me.ru_stime} {kids.ru_utime + kids.ru_stime} {hwm} "
                 f"{waited / 1e9} {split[1]} {split[2]}")
atexit.register(report)
mode, what = sys.argv[1], sys.argv[2]
sys.argv = [what if mode == "-m" else "-c", *sys.argv[3:]]
if mode == "-m":
    runpy.run_module(what, run_name="__main__", alter_sys=True)
else:
    exec(compile(what, "<bench>", "exec"), {"__name__": "__main__"})
"""


@dataclass
class Measured:
    """One run: wall seconds, CPU seconds (its own, its helpers'), peak memory in bytes,
    seconds its threads waited to run (the machine's load; 0 where not known)."""

    wall: float
    cpu_self: float
    cpu_helpers: float
    peak: int
    returncode: int
    stdout: str
    stderr: str
    waited: float = 0.0
    anon: int = 0  # bytes, at the largest resident size sampled: anonymous (heap, stacks)
    file: int = 0  # and file-backed (the code of the interpreter and libraries); 0: not sampled

    @property
    def cpu(self) -> float:
        return self.cpu_self + self.cpu_helpers

    @property
    def blocked(self) -> float:
        """Wall seconds neither on a CPU nor waiting for one (at most: see the module)."""
        return max(0.0, self.wall - self.cpu - self.waited)


def measure(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
            split: bool = False) -> Measured:
    """Run ``python <argv>`` (``argv`` starts with ``-m MODULE`` or ``-c CODE``) and measure it.
    ``split``: a thread of the child also reads its resident size every 20 ms and keeps, at the
    largest, how much was anonymous memory and how much file-backed pages (library code the
    kernel can drop and read again): ``Measured.anon`` and ``.file``."""
    if len(argv) < 2 or argv[0] not in ("-m", "-c"):
        raise ValueError("argv must start with -m MODULE or -c CODE")
    if split:
        argv = ["--split", *argv]
    with tempfile.NamedTemporaryFile(prefix="bench-measure-", suffix=".txt") as fh, \
            tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        t0 = time.perf_counter()
        # -P: the working folder is not put first on the child's path (as ``-c`` and ``-m``
        # do), so a benchmark started inside a checkout measures the toolkit its PYTHONPATH
        # or installation names, not the checkout's
        code = subprocess.run([sys.executable, "-P", "-c", RUNNER, fh.name, *argv], cwd=cwd,
                              env=env, stdout=so, stderr=se, check=False).returncode
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read().decode(errors="replace"), se.read().decode(errors="replace")
        fields = Path(fh.name).read_text().split()
    if len(fields) != 6:  # the child died before its exit handlers ran
        return Measured(wall, 0.0, 0.0, 0, code or 1, stdout, stderr)
    return Measured(wall, float(fields[0]), float(fields[1]), int(fields[2]) * 1024, code,
                    stdout, stderr, float(fields[3]), int(fields[4]) * 1024,
                    int(fields[5]) * 1024)
