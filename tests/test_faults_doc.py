"""docs/faults.md names real tests: every fault row names at least one, and each exists.

The test files are parsed with ``ast`` (no pytest collection), so this stays fast.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAULTS_DOC = REPO / "docs" / "faults.md"

_ROW_ID = re.compile(r"^[A-Z][0-9]+$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_CODE = re.compile(r"`([^`]*)`")
_NODE = re.compile(r"^(tests/[\w/]+\.py)((?:::\w+)+)(\[[^\]]*\])?$")


def fault_rows(text: str) -> list[tuple[str, str, list[str]]]:
    """(id, the row's line, the tests cell's code spans) for every fault row of the tables."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in _CELL_SPLIT.split(line.strip())[1:-1]]
        if not cells or not _ROW_ID.match(cells[0]):
            continue  # the header row and the |---| line
        rows.append((cells[0], line, _CODE.findall(cells[-1]) if len(cells) == 4 else []))
    return rows


@cache
def _defined_names(path: Path) -> frozenset[str]:
    """``name`` for module-level functions and ``Class::name`` (and ``name``) for methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}::{item.name}")
                    names.add(item.name)
    return frozenset(names)


def check_node(node_id: str, root: Path = REPO) -> str | None:
    """Why ``tests/file.py::[Class::]test_name[params]`` names no test, or None if it does."""
    m = _NODE.match(node_id)
    if not m:
        return f"{node_id!r} is not tests/<file>.py::<test name>"
    path = root / m.group(1)
    if not path.is_file():
        return f"{m.group(1)} does not exist"
    name = m.group(2)[2:]
    if not name.split("::")[-1].startswith("test"):
        return f"{name} in {m.group(1)} is not a test function"
    if name not in _defined_names(path):
        return f"{m.group(1)} has no test {name}"
    return None


def problems(text: str, root: Path = REPO) -> list[str]:
    out = []
    rows = fault_rows(text)
    if not rows:
        out.append("no fault rows found")
    seen: set[str] = set()
    for row_id, line, nodes in rows:
        if row_id in seen:
            out.append(f"row {row_id} appears twice")
        seen.add(row_id)
        if not nodes:
            out.append(f"row {row_id} names no test: {line[:80]}")
        for node in nodes:
            why = check_node(node, root)
            if why:
                out.append(f"row {row_id}: {why}")
    return out


def test_every_fault_row_names_existing_tests() -> None:
    found = problems(FAULTS_DOC.read_text(encoding="utf-8"))
    assert not found, "docs/faults.md:\n" + "\n".join(found)


def test_every_section_from_a_to_f_has_its_rows() -> None:
    ids = {row_id for row_id, _, _ in fault_rows(FAULTS_DOC.read_text(encoding="utf-8"))}
    for section, count in {"A": 15, "B": 9, "C": 6, "D": 2, "E": 1, "F": 3}.items():
        want = {f"{section}{n}" for n in range(1, count + 1)}
        assert want <= ids, sorted(want - ids)


@pytest.mark.parametrize("row, expected", [
    ("| A1 | c | e | `tests/test_faults_doc.py::test_no_such_thing` |",
     "row A1: tests/test_faults_doc.py has no test test_no_such_thing"),
    ("| A2 | c | e |  |", "row A2 names no test"),
    ("| A3 | c | e | `tests/nope.py::test_x` |", "row A3: tests/nope.py does not exist"),
    ("| A4 | c | e | `test_x` |", "row A4: 'test_x' is not tests/<file>.py::<test name>"),
    ("| A5 | c | e | `tests/test_faults_doc.py::check_node` |",
     "row A5: check_node in tests/test_faults_doc.py is not a test function"),
])
def test_a_bad_row_fails_naming_the_row(row: str, expected: str) -> None:
    [message] = problems("| id | case | expected | tests |\n|---|---|---|---|\n" + row + "\n")
    assert message.startswith(expected), message


def test_parametrized_ids_methods_and_escaped_pipes_are_understood(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('n', [1, 2])\ndef test_p(n):\n    pass\n\n"
        "class TestK:\n    def test_m(self):\n        pass\n\n"
        "    async def test_a(self):\n        pass\n\ndef helper():\n    pass\n")
    doc = ("| B1 | a \\| b | e | `tests/test_x.py::test_p[1]`, `tests/test_x.py::TestK::test_m`, "
           "`tests/test_x.py::test_a` |\n")
    assert fault_rows(doc)[0][2] == ["tests/test_x.py::test_p[1]",
                                     "tests/test_x.py::TestK::test_m", "tests/test_x.py::test_a"]
    assert problems(doc, tmp_path) == []
    assert check_node("tests/test_x.py::TestK::test_p", tmp_path) == \
        "tests/test_x.py has no test TestK::test_p"
    assert check_node("tests/test_x.py::test_m[a-b]", tmp_path) is None
    assert check_node("tests/test_x.py::helper", tmp_path) == \
        "helper in tests/test_x.py is not a test function"
