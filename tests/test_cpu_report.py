"""``pytest --cpu-report`` (tests/_cpu_report.py), the measure for keeping the suite fast on
two cores: a module's CPU time, its own and its child processes', reaches the report, in one
process and from pytest-xdist's workers, and the run's whole CPU time is what the operating
system counted for it (no worker counted twice)."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# Each test spins until it has used at least this much CPU (by the clock of its own process),
# so the report must show at least that much for its module.
SPIN = 0.3
SPIN_CODE = f"""
import time
def spin():
    start = time.process_time()
    while time.process_time() - start < {SPIN}:
        pass
"""


def _suite(root: Path) -> None:
    """Two test modules: one spins in its own process, one waits for a child that spins."""
    (root / "test_busy_here.py").write_text(
        SPIN_CODE + "\ndef test_spins():\n    spin()\n", encoding="utf-8")
    (root / "test_busy_child.py").write_text(
        "import subprocess, sys\n"
        f"CODE = {SPIN_CODE + chr(10) + 'spin()' + chr(10)!r}\n"
        "def test_a_child_spins():\n"
        "    subprocess.run([sys.executable, '-c', CODE], check=True)\n"
        "def test_idle():\n"
        "    pass\n", encoding="utf-8")


def _report(root: Path, *args: str) -> dict[str, tuple[float, float, float]]:
    """Run pytest on ``root``'s modules with the report; its rows by module."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(REPO)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests._cpu_report", "-p", "no:cacheprovider",
         "--rootdir", str(root), "-c", os.devnull, "--cpu-report", *args, str(root)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stdout + done.stderr
    # the run's whole CPU time, as the operating system counted it for this child process
    whole = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    section = done.stdout.split("CPU time by test module", 1)[1]
    rows = {m[4]: (float(m[1]), float(m[2]), float(m[3])) for m in re.finditer(
        r"^ *([\d.]+) +([\d.]+) +([\d.]+)  (\S+\.py)$", section, re.M)}
    total = re.search(r"^ *([\d.]+) s in the tests; ([\d.]+) s in the whole run", section, re.M)
    assert total is not None, section
    assert whole + 0.1 >= float(total[2]) >= float(total[1]) >= \
        sum(r[0] for r in rows.values()) - 0.2
    return rows


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_each_modules_cpu_time_and_its_childrens_are_reported(
        tmp_path: Path, workers: list[str]) -> None:
    _suite(tmp_path)
    rows = _report(tmp_path, *workers)
    assert set(rows) == {"test_busy_here.py", "test_busy_child.py"}
    here, child = rows["test_busy_here.py"], rows["test_busy_child.py"]
    assert here[1] >= SPIN  # in the test process
    assert child[2] >= SPIN and child[1] < SPIN  # in the process it started
    for total, own, kids in rows.values():
        assert abs(total - own - kids) <= 0.11  # (each printed to a tenth)
