"""A fleet of three projects built in tmp_path (issue 17): ``alpha`` (in Smith's index, with a
vault), ``beta`` (in the fleet file, with a vault) and ``gone`` (in Smith's index, its folder
deleted), sharing one audit DB and one slop ledger with rows for each, for ``ci-only`` (a
project seen only in the records) and for no project."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._slop_helpers import entry, write_ledger
from tests.conftest import FORMATS, make_audit_db

SHARED_TITLE = "Retry flaky network tests"


def ledger_entry(title: str, confidence: str, date: str = "2026-05-01") -> str:
    """One Form B entry (the reflect writer's)."""
    return (f"\n---\n\n**Title:** {title}\n**Date:** {date}\n**Category:** testing\n"
            f"**Confidence:** {confidence}\n**Source reflections:** 1\n\n"
            f"**Context:** When it happens.\n\n**Pattern:** What to do.\n\n"
            f"**Evidence:**\n- {date} -- session s.md: it worked\n\n**Related:** None\n")


def write_vault(root: Path, entries: list[tuple[str, str]], *, session: bool = True) -> Path:
    ledger = root / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    (ledger / "patterns.md").write_text(
        "# Ledger: Patterns\n\nWhat works.\n" + "".join(ledger_entry(t, c) for t, c in entries),
        encoding="utf-8")
    if session:
        sessions = root / ".smith" / "vault" / "sessions"
        sessions.mkdir()
        shutil.copy(next((FORMATS / "smith" / "sessions").glob("*.md")), sessions)
        for p in sessions.iterdir():
            p.chmod(0o644)
    return ledger / "patterns.md"


@dataclass
class FleetWorld:
    base: Path
    home: Path
    alpha: Path
    beta: Path
    gone: Path
    fleet_file: Path
    audit: Path
    slop: Path
    store: Path

    def env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "NAGI_LEDGER_DB": str(self.audit),
                "CODESMITH_SLOP_LEDGER": str(self.slop)}


def make_fleet(base: Path, home: Path) -> FleetWorld:
    code = base / "code"
    alpha, beta, gone = code / "alpha", code / "beta", code / "gone"
    write_vault(alpha, [(SHARED_TITLE, "high"), ("Pin the ruff version", "medium"),
                        ("Keep fixtures small", "low")])
    write_vault(beta, [("Retry flaky network test.", "low"), ("Use uv for installs", "high")],
                session=False)
    index = home / ".smith" / "projects.json"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(json.dumps([
        {"name": "alpha", "path": str(alpha), "last_session": "2026-05-06T09:00:00"},
        {"name": "gone", "path": str(gone), "last_session": "2026-04-01T08:00:00"}]),
        encoding="utf-8")
    fleet_file = base / "toolkit-fleet.yaml"
    fleet_file.write_text("projects:\n  - name: beta\n    path: code/beta\n", encoding="utf-8")
    audit = make_audit_db(base / "nagi" / "ledger.db", samples=False)
    conn = sqlite3.connect(audit)
    conn.executemany(
        "INSERT INTO actions (ts, tier, category, description, project) VALUES (?, ?, ?, ?, ?)",
        [("2026-05-07 10:00:00", 1, "commit", "alpha change", "alpha"),
         ("2026-05-02 10:00:00", 0, "test", "alpha test", "alpha"),
         ("2026-05-03 11:00:00", 2, "deploy", "beta deploy", "beta"),
         ("2026-04-02 12:00:00", 0, "test", "gone test", "gone"),
         ("2026-05-05 12:00:00", 0, "test", "ci run", "ci-only"),
         ("2026-05-01 12:00:00", 0, "tool_failure", "Bash: exit 1", None)])
    conn.executemany(
        "INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, verdict) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [("2026-05-01 10:00:00", "fix login", "general-purpose", "inherit", "s", "REFUTED"),
         ("2026-05-01 11:00:00", "fix login", "general-purpose", "inherit", "s", "PARTIAL"),
         ("2026-05-01 12:00:00", "fix login", "general-purpose", "opus", "s", None),
         ("2026-05-02 12:00:00", "write docs", "docs-writer", "sonnet", "s", None)])
    conn.commit()
    conn.close()
    slop = write_ledger(base / "codesmith" / "slop_ledger.json", [
        entry(1, project="alpha", updated_at="2026-05-08T07:00:00+00:00"),
        entry(2, project="beta", status="resolved"),
        entry(3, project="beta", severity="high"),
        entry(4, title="Unowned debt")])
    return FleetWorld(base=base, home=home, alpha=alpha, beta=beta, gone=gone,
                      fleet_file=fleet_file, audit=audit, slop=slop,
                      store=base / "state" / "fleet.duckdb")


def build_fleet_site(base: Path) -> Path:
    """make_fleet's fleet under ``base`` (HOME ``base/home``) and its site (``base/site``), built
    by `toolkit fleet build-site` as a user runs it (in this process) at the tests' build time;
    the environment is the fleet's only while it builds."""
    import pytest
    from click.testing import CliRunner

    from tests.conftest import isolate
    from toolkit.cli import cli

    home = base / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, home)
        world = make_fleet(base, home)
        for key, value in world.env().items():
            mp.setenv(key, value)
        mp.chdir(base)  # where toolkit-fleet.yaml is found
        return fleet_build_site(
            lambda *args: CliRunner().invoke(cli, list(args), catch_exceptions=False),
            world, base / "site")


def fleet_build_site(run: Callable[..., Any], world: FleetWorld, out: Path) -> Path:
    """`toolkit fleet build-site --out OUT` at the tests' build time through ``run`` (a
    ``cli_run``), checked to have built the whole site."""
    from tests._site_helpers import BUILD_TIME

    result = run("fleet", "--store", str(world.store), "build-site", "--out", str(out),
                 "--build-time", BUILD_TIME.isoformat())
    assert result.exit_code == 0, result.output
    assert "Fleet site built (full)" in result.stdout
    return out
