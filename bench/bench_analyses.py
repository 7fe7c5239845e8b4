"""Benchmark: what the Analyses section (the bundled notebooks) costs `toolkit build-site`, on a
full build and on an unchanged rebuild, against a floor measured in the same run.

The world is the demo world (``toolkit demo``), the notebooks' own default; its store is loaded
beforehand (``toolkit load``). Measured, each as a subprocess (interpreter start-up and imports
included), best of ``reps``:

1. floor: the bundled notebooks executed top to bottom by nbclient in one kernel against the
   project, nothing else (what running them costs at least);
2. per-notebook kernels: the same with a kernel per notebook (what the build would pay if it
   did not reuse its kernel);
3. full: ``toolkit build-site --timings`` from nothing (site and build folder deleted); its
   ``analyses`` stage (copying the store, running the notebooks, reading them back) against
   the floor;
4. unchanged rebuild: ``toolkit build-site --timings`` again; its ``analyses`` stage (no
   notebook runs: the data and the notebooks are as last built) against the floor.

Run: ``python bench/bench_analyses.py [--reps 2]``. Prints the measures and their ratios (the
median of the per-rep ratios too: the machine may be shared); no assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD_TIME = "2026-11-28T12:00:00"


def run_notebooks(project: str, shared: bool) -> None:
    """Execute every bundled notebook against ``project`` (one kernel, or one each)."""
    from toolkit import notebooks

    with tempfile.TemporaryDirectory() as cwd, contextlib.ExitStack() as stack:
        km = stack.enter_context(notebooks.kernel(Path(cwd))) if shared else None
        for path in sorted(notebooks.NOTEBOOKS_DIR.glob("*.ipynb")):
            nb = notebooks.with_parameters(notebooks.read(path), project_path=project)
            notebooks.execute(nb, cwd=Path(cwd), name=path.name, km=km)


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return took, proc.stdout


def _stage(output: str, name: str) -> float:
    m = re.search(rf"\b{name} ([0-9.]+) s", output)
    return float(m.group(1)) if m else 0.0


def one_rep(base: Path, env: dict[str, str]) -> dict[str, float]:
    from toolkit.demo import write_demo

    world = write_demo(base / "demo")
    project = str(world.project)
    toolkit = [sys.executable, "-m", "toolkit", "--project", project]
    _timed([*toolkit, "load"], env)
    me = [sys.executable, str(Path(__file__).resolve()), "--run-notebooks", project]
    floor, _ = _timed([*me, "--shared"], env)
    separate, _ = _timed(me, env)
    site = world.project / ".toolkit" / "site"
    for folder in (site, site.with_name("site.build")):
        shutil.rmtree(folder, ignore_errors=True)
    build = [*toolkit, "build-site", "--build-time", BUILD_TIME, "--timings"]
    full, out_full = _timed(build, env)
    rebuild, out_again = _timed(build, env)
    if "Analyses: 0 notebooks run" not in out_again:
        sys.exit(f"the unchanged rebuild ran notebooks:\n{out_again}")
    return {"floor": floor, "separate": separate, "full": full,
            "full_analyses": _stage(out_full, "analyses"), "rebuild": rebuild,
            "rebuild_analyses": _stage(out_again, "analyses")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--run-notebooks", metavar="PROJECT", help=argparse.SUPPRESS)
    parser.add_argument("--shared", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_notebooks:
        run_notebooks(args.run_notebooks, args.shared)
        return 0
    reps = []
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="bench-analyses-") as tmp:
            env = {**os.environ, "HOME": str(Path(tmp) / "home"), "NO_MKDOCS_2_WARNING": "1"}
            env.pop("SOURCE_DATE_EPOCH", None)
            reps.append(one_rep(Path(tmp), env))
    best = {k: min(r[k] for r in reps) for k in reps[0]}

    def ratio(key: str) -> str:
        med = statistics.median(r[key] / r["floor"] for r in reps)
        return f"{best[key] / best['floor']:.2f}x the floor (median {med:.2f}x)"

    print(f"floor: the {len(list((REPO / 'notebooks').glob('*.ipynb')))} notebooks in one "
          f"kernel                {best['floor']:6.1f} s")
    print(f"the same, one kernel per notebook                  {best['separate']:6.1f} s  "
          f"{ratio('separate')}")
    print(f"full build-site                                    {best['full']:6.1f} s")
    print(f"  of which the analyses stage                      {best['full_analyses']:6.1f} s  "
          f"{ratio('full_analyses')}")
    print(f"unchanged rebuild                                  {best['rebuild']:6.1f} s")
    print(f"  of which the analyses stage                      "
          f"{best['rebuild_analyses']:6.1f} s  {ratio('rebuild_analyses')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
