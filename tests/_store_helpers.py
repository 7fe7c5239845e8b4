"""A project's store with its schema made and nothing loaded, made once per module and copied:
what the first command of a project makes (DuckDB's whole schema, ~30 ms of CPU) before the
part a test is about. Its fixtures come with conftest (pytest_plugins)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store as ``Store.open`` makes it in a new project (the schema, no source loaded)."""
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    path = tmp_path_factory.mktemp("empty-store") / "ledger.duckdb"
    Store.open(path, sources=SOURCES).close()
    return path


def give_store(root: Path, empty_store: Path) -> None:
    """Put a copy of ``empty_store`` where the project at ``root`` keeps its store."""
    (root / ".toolkit").mkdir()
    shutil.copyfile(empty_store, root / ".toolkit" / "ledger.duckdb")


def project_with_store() -> Any:
    """A ``project`` fixture for a test module (``project = project_with_store()``): conftest's
    ``project`` with its store's schema already made (a copy of ``empty_store``), for tests
    that are not about a project's first command. A test that checks that nothing made a
    store takes ``bare_project``."""
    @pytest.fixture(name="project")
    def project_with_schema(project: Any, empty_store: Path) -> Any:
        give_store(project.root, empty_store)
        return project

    return project_with_schema


@pytest.fixture
def bare_project(tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """conftest's ``project``, for the tests of a module whose ``project`` has a store
    (``project_with_store``) that check that nothing made one."""
    from tests.conftest import laid_out_project

    return laid_out_project(tmp_path, isolated_env, monkeypatch)
