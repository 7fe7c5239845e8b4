"""Re-run every analysis notebook in notebooks/ in a Jupyter kernel and save its outputs.

Each notebook runs against its default project, a demo world it writes into a temporary
folder, so the saved outputs are the same on every machine. Run after changing a notebook
(tests/test_notebooks.py fails when a saved text output no longer matches a re-run):

    .venv/bin/python scripts/run_notebooks.py [NOTEBOOK ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from toolkit import notebooks


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(notebooks.NOTEBOOKS_DIR.glob("*.ipynb"))
    for path in paths:
        nb = notebooks.read(path)
        with tempfile.TemporaryDirectory() as cwd:
            notebooks.execute(nb, cwd=Path(cwd), name=path.name)
        notebooks.write(nb, path)
        print(f"ran {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
