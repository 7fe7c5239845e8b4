"""The module boundaries of DESIGN.md/STYLE.md, checked by walking every import with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "toolkit"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


MODULES = {_module(p): _imports(p) for p in sorted(PKG.rglob("*.py"))}


def _importers(prefix: str) -> set[str]:
    return {m for m, imps in MODULES.items()
            if any(i == prefix or i.startswith(prefix + ".") for i in imps)}


def test_only_the_cli_imports_click():
    assert {m for m in _importers("click") if not m.startswith("toolkit.cli")} == set()


def test_only_the_store_talks_to_duckdb():
    assert _importers("duckdb") == {"toolkit.store"}


def test_only_the_publisher_talks_to_github():
    assert _importers("github") <= {"toolkit.publish"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("toolkit.sources")))
def test_readers_depend_on_nothing_above_them(module):
    above = ("toolkit.store", "toolkit.loaders", "toolkit.queries", "toolkit.reports",
             "toolkit.site", "toolkit.publish", "toolkit.cli", "toolkit.editor",
             "toolkit.safewrite")
    bad = {i for i in MODULES[module] if i.startswith(above)}
    assert bad == set(), f"{module} imports {bad}"


def _runtime_imports(path: Path) -> dict[str, bool]:
    """Toolkit modules a module imports when it runs -> whether inside a function (imports
    under ``if TYPE_CHECKING:`` are for annotations only and left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, bool] = {}

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(ast.Module(body=child.orelse, type_ignores=[]), in_function)
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module, *(f"{child.module}.{a.name}" for a in child.names)]
            for name in names:
                if name in MODULES and name != _module(path):
                    found[name] = found.get(name, False) or in_function
            visit(child, in_function or isinstance(child, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


RUNTIME = {_module(p): _runtime_imports(p) for p in sorted(PKG.rglob("*.py"))}


def _cycles() -> list[list[str]]:
    """Import cycles among toolkit modules (strongly connected components of the runtime import
    graph, function-level imports included: a lazy import does not make a cycle go away)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for dep in RUNTIME[module]:
            if dep not in index:
                connect(dep)
                low[module] = min(low[module], low[dep])
            elif dep in stack:
                low[module] = min(low[module], index[dep])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(RUNTIME):
        if module not in index:
            connect(module)
    return cycles


def test_no_import_cycles():
    # store <-> loaders and reports <-> history_report/goals_report imported each other inside
    # functions; the store is now handed the sources, and reports imports the page modules.
    assert _cycles() == []


def test_a_cycle_is_found_where_there_is_one(monkeypatch):
    monkeypatch.setitem(RUNTIME, "toolkit.errors", {**RUNTIME["toolkit.errors"],
                                                   "toolkit.store": True})
    assert any({"toolkit.errors", "toolkit.store"} <= set(c) for c in _cycles())


def test_the_store_imports_no_source():
    """The store is handed the sources (toolkit.source.Source) and never imports them."""
    sources = {m for m in MODULES if m.startswith(("toolkit.sources", "toolkit.loaders"))}
    sources |= {"toolkit.history", "toolkit.goals", "toolkit.editor"}
    assert set(RUNTIME["toolkit.store"]) & sources == set()
    assert set(RUNTIME["toolkit.source"]) <= {"toolkit.errors", "toolkit.records"}


def test_library_never_imports_the_cli():
    offenders = {m for m in _importers("toolkit.cli")
                 if not m.startswith("toolkit.cli") and m != "toolkit.__main__"}
    assert offenders == set()
