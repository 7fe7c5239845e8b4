"""Run every benchmark in bench/ (each ``bench_*.py``, in name order) with its default sizes.

Each runs in its own interpreter, as ``python bench/<name>.py`` would, and prints its own
ratios against the floor it measures in the same run. Name some to run only those:
``python bench/run.py slop editor``. Exit status 1 when any of them failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        wanted = {a.removeprefix("bench_").removesuffix(".py") for a in argv}
        unknown = wanted - {s.stem.removeprefix("bench_") for s in scripts}
        if unknown:
            print(f"no benchmark named {', '.join(sorted(unknown))}; there are: "
                  + ", ".join(s.stem.removeprefix("bench_") for s in scripts), file=sys.stderr)
            return 2
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in wanted]
    failed = []
    for script in scripts:
        print(f"== {script.name}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.run([sys.executable, str(script)], check=False).returncode
        print(f"== {script.name}: {'ok' if code == 0 else f'exit {code}'} "
              f"({time.perf_counter() - t0:.0f} s)\n", flush=True)
        if code:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
