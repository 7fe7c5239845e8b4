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


def test_library_never_imports_the_cli():
    offenders = {m for m in _importers("toolkit.cli")
                 if not m.startswith("toolkit.cli") and m != "toolkit.__main__"}
    assert offenders == set()
