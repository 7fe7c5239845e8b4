"""Run the real `toolkit` console script with its standard output on a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path


def run_on_a_terminal(args: list[str], cwd: Path) -> str:
    """What ``python -m toolkit ARGS`` prints when its output is a terminal; the command must
    succeed (its stderr is the failure message)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *args], cwd=cwd,
                            stdout=secondary, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    return b"".join(chunks).decode("utf-8")
