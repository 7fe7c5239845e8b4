"""The module boundaries of DESIGN.md/STYLE.md, checked by walking every import with ast."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Generic, TypeVar

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


V = TypeVar("V")


class _PerModule(MutableMapping[str, V], Generic[V]):
    """Module name -> what ``read`` finds in its file, read on first use: collecting the tests
    needs only the names, so a worker that runs none of these tests parses no file."""

    def __init__(self, read: Callable[[Path], V]) -> None:
        self._paths = {_module(p): p for p in sorted(PKG.rglob("*.py"))}
        self._read = read
        self._values: dict[str, V] = {}

    def __getitem__(self, name: str) -> V:
        if name not in self._values:
            self._values[name] = self._read(self._paths[name])
        return self._values[name]

    def __setitem__(self, name: str, value: V) -> None:
        self._values[name] = value

    def __delitem__(self, name: str) -> None:
        self._values.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


MODULES: _PerModule[set[str]] = _PerModule(_imports)


def _importers(prefix: str) -> set[str]:
    return {m for m, imps in MODULES.items()
            if any(i == prefix or i.startswith(prefix + ".") for i in imps)}


def test_only_the_cli_imports_click():
    assert {m for m in _importers("click") if not m.startswith("toolkit.cli")} == set()


def test_only_the_store_talks_to_duckdb():
    assert _importers("duckdb") == {"toolkit.store"}


def test_only_the_publisher_talks_to_github():
    assert _importers("github") <= {"toolkit.publish"}


@pytest.mark.parametrize("module", sorted(
    m for m in MODULES if m.startswith("toolkit.sources")
    or m in ("toolkit.ledger", "toolkit.ledger.codec")))  # the codec sits beside the readers
def test_readers_depend_on_nothing_above_them(module):
    above = ("toolkit.store", "toolkit.loaders", "toolkit.queries", "toolkit.reports",
             "toolkit.site", "toolkit.publish", "toolkit.cli", "toolkit.ledger.vault",
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
                # ``from toolkit import queries`` depends on toolkit.queries, not on the
                # package's own code (its lazy ``__getattr__`` runs only for other names)
                subs = [f"{child.module}.{a.name}" for a in child.names]
                names = [s for s in subs if s in MODULES]
                if len(names) < len(subs):
                    names.append(child.module)
            for name in names:
                if name in MODULES and name != _module(path):
                    found[name] = found.get(name, False) or in_function
            visit(child, in_function or isinstance(child, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


RUNTIME: _PerModule[dict[str, bool]] = _PerModule(_runtime_imports)


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
    sources |= {"toolkit.history", "toolkit.goals"}
    sources |= {m for m in MODULES if m.startswith("toolkit.ledger")}
    assert set(RUNTIME["toolkit.store"]) & sources == set()
    assert set(RUNTIME["toolkit.source"]) <= {"toolkit.errors", "toolkit.records"}


def test_library_never_imports_the_cli():
    offenders = {m for m in _importers("toolkit.cli")
                 if not m.startswith("toolkit.cli") and m != "toolkit.__main__"}
    assert offenders == set()


# --------------------------------------------------------------------------- who writes .smith/

VAULT = "toolkit.ledger.vault"
# safewrite's primitives that write or delete files, and the OS calls that do
WRITE_FUNCS = {"atomic_replace", "replace_all", "backup_files", "unique_dir", "Journal",
               "recover_journal", "break_backup_links", "cleanup_orphan_temps"}
WRITE_CALLS = {("os", "write"), ("os", "replace"), ("os", "rename"), ("os", "unlink"),
               ("os", "remove"), ("os", "rmdir"), ("os", "makedirs"), ("os", "mkdir"),
               ("shutil", "rmtree"), ("shutil", "move"), ("shutil", "copy"),
               ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copytree")}
WRITE_METHODS = {"write_bytes", "write_text", "unlink", "mkdir", "rmdir", "touch", "rename",
                 "symlink_to", "hardlink_to"}
# Modules that know where the vault is (they read it or hand it to the vault package).
KNOWS_VAULT = ("toolkit.sources.smith", "toolkit.ledger", "toolkit.reconcile",
               "toolkit.ledger_ops")
# Writers of other files that also read the vault, each with its reason; none writes .smith/.
OTHER_WRITERS = {
    "toolkit.demo": "builds a demo world in a fresh folder (to write through the vault later)",
}


def _writes(path: Path) -> list[str]:
    """The write calls in a module (safewrite's writers, os/shutil writes, Path writes,
    open() for writing)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "toolkit.safewrite":
            out += [f"imports safewrite.{a.name}" for a in node.names if a.name in WRITE_FUNCS]
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute):
            base = f.value.id if isinstance(f.value, ast.Name) else None
            if (base, f.attr) in WRITE_CALLS or (base == "safewrite" and f.attr in WRITE_FUNCS):
                out.append(f"{base}.{f.attr}() at line {node.lineno}")
            elif f.attr in WRITE_METHODS:
                out.append(f".{f.attr}() at line {node.lineno}")
        elif isinstance(f, ast.Name) and f.id == "open" and len(node.args) > 1:
            mode = node.args[1]
            if not (isinstance(mode, ast.Constant) and set(str(mode.value)) <= set("rbt")):
                out.append(f"open(..., {ast.unparse(mode)}) at line {node.lineno}")
    return out


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith(VAULT)))
def test_only_the_vault_package_writes_under_smith(module):
    """A module that knows where the vault is never writes a file itself: its writes under
    ``.smith/`` go through toolkit.ledger.vault (the lock, the journal, the backups)."""
    knows = module.startswith(KNOWS_VAULT) or any(
        i.startswith(KNOWS_VAULT) for i in MODULES[module])
    if not knows or any(module == m or module.startswith(m + ".") for m in OTHER_WRITERS):
        return
    path = PKG.parent.joinpath(*module.split(".")).with_suffix(".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    assert _writes(path) == [], f"{module} writes files itself"


def test_the_write_check_sees_a_write():
    """The check above is not blind: the vault's own modules are flagged by it."""
    assert _writes(PKG / "ledger" / "vault" / "backups.py")
    assert _writes(PKG / "ledger" / "vault" / "logs.py")


# --------------------------------------------------------------------------- one answer

# The CLI and the MCP server ask the public API (toolkit.api.Project) every question it
# answers: a read function Project calls is imported by no command module and not by the MCP
# server. These names Project also imports open things rather than answer a question.
API_PLUMBING = {
    ("toolkit.config", "resolve"),  # the CLI finds its project with the same function
    ("toolkit.loaders", "SOURCES"),  # the site and the handoff open the store for writing
    ("toolkit.store", "Store"),
}
FRONT_ENDS = sorted(m for m in MODULES if m.startswith("toolkit.cli") or m == "toolkit.mcp_server")


def _names_used(tree: ast.AST) -> set[tuple[str, str]]:
    """(module, name) of every toolkit name a module uses: ``from toolkit.m import f`` and
    ``m.f`` after ``from toolkit import m`` or ``import toolkit.m as m``."""
    used: set[tuple[str, str]] = set()
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                else:
                    used.add((node.module, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in MODULES:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases:
            used.add((aliases[node.value.id], node.attr))
    return used


def _api_readers() -> set[tuple[str, str]]:
    """What toolkit.api.Project's methods import from the rest of the toolkit."""
    tree = ast.parse((PKG / "api.py").read_text(encoding="utf-8"))
    project = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Project")
    return {(m, n) for m, n in _names_used(project)
            if m.startswith("toolkit.") and m != "toolkit.api"} - API_PLUMBING


def _front_end_path(module: str) -> Path:
    path = PKG.parent.joinpath(*module.split(".")).with_suffix(".py")
    return path if path.exists() else path.with_suffix("") / "__init__.py"


def test_the_api_calls_the_readers_the_front_ends_must_not():
    readers = _api_readers()
    assert {("toolkit.audit_ops", "task_status"), ("toolkit.audit_ops", "open_audit_store"),
            ("toolkit.ledger_ops", "dashboard"), ("toolkit.ledger_ops", "search"),
            ("toolkit.slop_ops", "query"), ("toolkit.history", "growth"),
            ("toolkit.store", "first_rows")} <= readers


@pytest.mark.parametrize("module", FRONT_ENDS)
def test_cli_commands_and_mcp_tools_ask_the_api_not_the_readers(module):
    """`toolkit audit task-status`, `ledger list`, `slop query`, `query`, the MCP readers...
    are thin layers over toolkit.api.Project: none has a second way to the answer."""
    tree = ast.parse(_front_end_path(module).read_text(encoding="utf-8"))
    bad = sorted(_names_used(tree) & _api_readers())
    assert bad == [], f"{module} reads through {bad}; call toolkit.api.Project instead"


def test_the_reader_check_sees_a_direct_read():
    """The check above is not blind: either form of import of a reader is caught."""
    for code in ("from toolkit.audit_ops import task_status\ntask_status(s, 't')",
                 "from toolkit import ledger_ops\nledger_ops.dashboard(v)",
                 "import toolkit.slop_ops as so\nso.query([], f)"):
        assert _names_used(ast.parse(code)) & _api_readers(), code
