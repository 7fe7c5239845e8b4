"""What a command imports before it does its work: a user waits for it on every command (agents
call ``toolkit`` in loops), so a command imports only what it uses. Checked by the modules a
real ``python -m toolkit ...`` process imports (``-X importtime``), never by its times."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import FixtureProject

# Never imported by a command that does not use them.
STORE = {"duckdb", "pyarrow", "toolkit.store", "toolkit.history"}  # the store, the history loader
SITE = {"jinja2", "mkdocs", "markdown", "pygments", "toolkit.site", "toolkit.reports"}
HEAVY = STORE | SITE | {"yaml", "rich", "toolkit.config", "toolkit.api", "sqlite3"}


def imported(*args: str, cwd: object = None) -> set[str]:
    """The modules ``toolkit ARGS`` imports, as the console script runs it."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "toolkit", *args],
                          cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line} - {"package"}


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("ledger", "--help"),
                                  ("slop", "--help"), ("audit", "--help")],
                         ids=" ".join)
def test_help_and_version_import_no_command_machinery(args, tmp_path):
    modules = imported(*args, cwd=tmp_path)
    assert "toolkit.cli" in modules  # (the listing is read)
    assert modules & HEAVY == set()


@pytest.mark.parametrize("args", [
    ("ledger", "list"),
    ("ledger", "show", "Run the migration dry-run before applying schema changes"),
    ("ledger", "promote", "Run the migration dry-run before applying schema changes"),
], ids=" ".join)
def test_ledger_commands_do_not_open_the_store(args, project: FixtureProject):
    modules = imported(*args, cwd=project.root)
    assert "toolkit.ledger.vault" in modules
    assert modules & (STORE | SITE) == set()


def test_a_store_command_imports_the_store_but_not_the_site(project: FixtureProject):
    modules = imported("query", "SELECT 1", cwd=project.root)
    assert {"duckdb", "toolkit.store", "toolkit.history"} <= modules  # SOURCES, on first use
    assert modules & SITE == set()


def test_a_project_without_yaml_files_does_not_import_pyyaml(project: FixtureProject):
    """toolkit.yaml is optional, and the slop ledger is JSON: PyYAML is imported only to read
    a YAML file (toolkit.yaml, the vault's meta.yaml)."""
    assert not (project.root / "toolkit.yaml").exists()
    modules = imported("slop", "query", cwd=project.root)
    assert "toolkit.sources.slop" in modules
    assert modules & (STORE | SITE | {"yaml"}) == set()
