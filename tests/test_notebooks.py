"""Every notebook's code cells run, in order, against the public API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_cells_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "__notebook__"}
    last = None
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        code = compile(source, f"{path.name}", "exec")
        exec(code, namespace)  # our own notebook
        last = source
    assert last is not None
    assert namespace["report"].errors == []
    assert {r["change"] for r in namespace["growth"]} >= {"added", "promoted", "reinforced"}


def test_there_is_a_notebook():
    assert NOTEBOOKS
