"""Re-run every analysis notebook in notebooks/ in a Jupyter kernel and save its outputs.

Each notebook runs against its default project, a demo world it writes into a temporary
folder, so the saved outputs are the same on every machine. Run after changing a notebook
(tests/test_notebooks.py fails when a saved text output no longer matches a re-run):

    .venv/bin/python scripts/run_notebooks.py [NOTEBOOK ...]

The kernel gets an environment of its own (see ``kernel_environment``), not the shell's: with
MPLBACKEND=agg set, say, the saved notebooks had lost every chart.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from toolkit import notebooks


def kernel_environment(home: Path) -> dict[str, str]:
    """The whole environment the kernel runs in: the shell's PATH and nothing else of the
    shell's; an empty HOME (no user settings of IPython, Jupyter, matplotlib or the toolkit,
    no kernel the user installed); UTC and one UTF-8 locale, as tests/conftest.py's
    ``isolate`` gives the tests' re-runs."""
    return {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "TZ": "UTC",
            "LC_ALL": "C.UTF-8"}


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(notebooks.NOTEBOOKS_DIR.glob("*.ipynb"))
    with tempfile.TemporaryDirectory() as home:
        # the kernel is a child of this process: it takes this environment
        os.environ.clear()
        os.environ.update(kernel_environment(Path(home)))
        for path in paths:
            nb = notebooks.read(path)
            with tempfile.TemporaryDirectory() as cwd:
                notebooks.execute(nb, cwd=Path(cwd), name=path.name)
            notebooks.write(nb, path)
            print(f"ran {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
