"""scripts/test, the README's test command, run in a copy of its checkout whose .venv python
only records what it was asked to run (no install, lint or pytest happens)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from tests.conftest import REPO


def _executable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_df_that_fails_on_dev_shm_runs_the_tests_on_disk(tmp_path: Path) -> None:
    """When ``df`` cannot tell how much room /dev/shm has (it fails, as in a sandbox that
    does not answer statfs), the tests still run, with their temporary files in the usual
    temp folder: the script does not stop silently after the lint gates (set -e with
    pipefail made a failed ``df | awk`` end the whole script with exit 1, saying nothing).
    (Where /dev/shm is missing or not writable, df is not asked and the same holds.)"""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "test", checkout / "scripts" / "test")
    venv_bin = checkout / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    _executable(venv_bin / "python", f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\n')
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    _executable(fake_bin / "df", "#!/bin/sh\necho 'df: /dev/shm: Function not implemented' >&2\n"
                                 "exit 1\n")
    for name in ("apt-get", "git", "java"):  # nothing installed from a test
        _executable(fake_bin / name, "#!/bin/sh\nexit 0\n")
    env = {k: v for k, v in os.environ.items() if k != "TOOLKIT_TEST_TMP"}
    env["PATH"] = f"{fake_bin}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run([str(checkout / "scripts" / "test"), "-x"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    pytest_runs = [c for c in calls.read_text(encoding="utf-8").splitlines()
                   if c.startswith("-m pytest")]
    assert pytest_runs == ["-m pytest -n 2 --dist loadscope -x"]
