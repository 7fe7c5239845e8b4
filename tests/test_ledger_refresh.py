"""A refresh after the ledger's files changed stores only the changed files' entries again
(``toolkit.loaders._load_ledger``), and what the store then holds is exactly what a load from
scratch of the same files holds: every table and view a reader sees, the ledger's history
(which copies the working files' entries from ``ledger_entries``), the problems, and the
ledger's recorded state."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests._history_helpers import Project, entry_a, entry_b
from toolkit import config as config_mod
from toolkit.loaders import SOURCES
from toolkit.store import Store

# ledger_entries' columns, as its DDL in toolkit/store.py orders them (rows read with *)
_TITLE, _PATH = 2, 16


def _cfg(root: Path, home: Path, db: Path, **flags: Any) -> config_mod.Config:
    env = {"HOME": str(home), "TOOLKIT_MAX_FILE_MB": "0.01"}  # 10,485 bytes: see too_large
    return config_mod.resolve(cwd=root, env=env, db=str(db), **flags)


def _contents(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every table and view in the store, rows in a total order. Of ``_sources``: what each
    source recorded but when, and the ledger's state (the history trusts it), not the others'
    (what that load did); the history's caches (kept by file content across loads by design)
    as its views show them."""
    names = [n for (n,) in store.conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_catalog = current_database() ORDER BY table_name").fetchall()]
    skip = {"_migrations", "_history_entries", "_history_blobs"}
    out = {}
    for name in names:
        if name in skip:
            continue
        what = ("source, location, found, note, fingerprint, rows, CASE source WHEN 'ledger' "
                "THEN CAST(state AS VARCHAR) END" if name == "_sources" else "*")
        out[name] = store.conn.execute(
            f'SELECT {what} FROM "{name}" ORDER BY ALL').fetchall()
    return out


def _refresh(cfg: config_mod.Config, full: bool = False) -> dict[str, list[tuple[Any, ...]]]:
    store = Store.open(cfg.db_path, sources=SOURCES)
    try:
        store.refresh(cfg, full=full)
        return _contents(store)
    finally:
        store.close()


def _patterns(n: int, word: str = "thing") -> list[str]:
    return [entry_b(f"Pattern {i}", pattern=f"Do the {word} {i}.") for i in range(n)]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A committed ledger of four files with entries, then an uncommitted working change."""
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect", {"patterns": _patterns(5), "antipatterns": [entry_b("Big bang")],
                         "edge-cases": [entry_a("Leap day billing")],
                         "tool-preferences": [entry_b("Use uv"), entry_b("Use ruff")]})
    p.write({"patterns": _patterns(6), "antipatterns": [entry_b("Big bang")],
             "edge-cases": [entry_a("Leap day billing")],
             "tool-preferences": [entry_b("Use uv"), entry_b("Use ruff")]})
    return p


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _too_large(ledger: Path) -> None:
    (ledger / "antipatterns.md").write_text(
        "# Ledger: Antipatterns\n\n" + "".join(entry_b(f"Long {i}") for i in range(60)),
        encoding="utf-8")


CHANGES: dict[str, Callable[[Path], None]] = {
    "one entry edited": lambda d: _edit(d / "patterns.md", "Do the thing 3.", "Do it now 3."),
    "an entry added": lambda d: _edit(d / "tool-preferences.md", "---",
                                      entry_b("Use pytest") + "---"),
    "a file deleted": lambda d: (d / "antipatterns.md").unlink(),
    "a file added": lambda d: (d / "project-quirks.md").write_text(
        "# Ledger: Project Quirks\n\n" + entry_b("Money in cents"), encoding="utf-8"),
    "a file made unreadable": lambda d: (d / "edge-cases.md").write_bytes(b"# Edge\n\xff\xfe\n"),
    "a file made too large": _too_large,
    "meta.yaml only": lambda d: (d / "meta.yaml").write_text("last_updated: 2026-04-05\n"),
    "titles swapped between files": lambda d: (
        _edit(d / "antipatterns.md", "Big bang", "Use uv"),
        _edit(d / "tool-preferences.md", "Use uv", "Big bang")),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_refresh_after_a_change_holds_what_a_load_from_scratch_holds(
        change: str, project: Project, tmp_path: Path, isolated_env: Path) -> None:
    kept = tmp_path / "kept.duckdb"
    before = _refresh(_cfg(project.root, isolated_env, kept))
    CHANGES[change](project.ledger)
    after = _refresh(_cfg(project.root, isolated_env, kept))
    scratch = _refresh(_cfg(project.root, isolated_env, tmp_path / "scratch.duckdb"))
    assert after == scratch
    assert after["ledger_entries"] != before["ledger_entries"] or change == "meta.yaml only"
    assert after["ledger_meta"] != before["ledger_meta"] or change != "meta.yaml only"


def test_a_full_refresh_and_a_moved_vault_store_every_file_as_from_scratch(
        project: Project, tmp_path: Path, isolated_env: Path) -> None:
    kept = tmp_path / "kept.duckdb"
    _refresh(_cfg(project.root, isolated_env, kept))
    CHANGES["one entry edited"](project.ledger)
    full = _refresh(_cfg(project.root, isolated_env, kept), full=True)
    assert full == _refresh(_cfg(project.root, isolated_env, tmp_path / "scratch.duckdb"))
    # the same bytes in another vault: every row's path is the new one's
    moved = tmp_path / "elsewhere" / "vault"
    shutil.copytree(project.root / ".smith" / "vault", moved)
    after = _refresh(_cfg(project.root, isolated_env, kept, vault=str(moved)))
    scratch = _refresh(_cfg(project.root, isolated_env, tmp_path / "scratch2.duckdb",
                            vault=str(moved)))
    assert after == scratch
    assert {row[_PATH] for row in after["ledger_entries"]} == {
        str(moved / "ledger" / f"{k}.md")
        for k in ("patterns", "antipatterns", "edge-cases", "tool-preferences")}


def test_stored_rows_that_disagree_with_the_recorded_state_are_stored_again(
        project: Project, tmp_path: Path, isolated_env: Path) -> None:
    """The recorded state says which file contents the rows came from; rows that no longer
    match it (here: deleted behind the toolkit's back) are not trusted."""
    kept = tmp_path / "kept.duckdb"
    _refresh(_cfg(project.root, isolated_env, kept))
    store = Store.open(kept, sources=SOURCES)
    store.conn.execute("DELETE FROM ledger_entries WHERE file = 'tool-preferences' "
                       "AND title = 'Use ruff'")
    store.close()
    CHANGES["one entry edited"](project.ledger)
    after = _refresh(_cfg(project.root, isolated_env, kept))
    assert after == _refresh(_cfg(project.root, isolated_env, tmp_path / "scratch.duckdb"))
    assert "Use ruff" in {r[_TITLE] for r in after["ledger_entries"]}
