"""Helpers for the handoff and publish tests: a fake clock, the fake GitHub, data builders."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_github import FakeGitHub

TOKEN = "test-token"
REPO = "acme/api"


class FakeClock:
    """Time that only moves when someone sleeps: waits are recorded, none are real."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def github(clock: FakeClock) -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN, clock=clock.now) as fake:
        fake.add_repo(REPO)
        yield fake


def run_publish(project: Any, github: FakeGitHub, clock: FakeClock, **kwargs: Any) -> Any:
    """One library publish run against the fake GitHub, the way the CLI makes it."""
    from toolkit import config
    from toolkit.loaders import SOURCES
    from toolkit.publish import WaitPolicy, publish
    from toolkit.store import Store

    cfg = kwargs.pop("cfg", None) or config.resolve()
    kwargs.setdefault("repo", REPO)
    kwargs.setdefault("api_url", github.api_url)
    kwargs.setdefault("env", {"GH_TOKEN": TOKEN})
    kwargs.setdefault("clock", clock)
    kwargs.setdefault("timeout", 1)
    kwargs.setdefault("policy", WaitPolicy())
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        return publish(store, cfg, **kwargs)


def slop_entry(title: str, *, description: str = "Left behind by an agent turn.",
               bucket: str = "suspected_dead_code", severity: str = "medium",
               status: str = "open", **extra: Any) -> dict[str, Any]:
    stamp = "2026-05-04T14:20:11.482913207+00:00"
    entry = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, title)), "bucket": bucket,
             "severity": severity, "confidence": "high", "title": title,
             "description": description, "status": status, "created_at": stamp,
             "updated_at": stamp}
    entry.update(extra)
    return entry


def write_slop(path: Path, entries: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"entries": entries}, indent=2, ensure_ascii=False),
                    encoding="utf-8")


def add_slop(path: Path, *entries: dict[str, Any]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data["entries"].extend(entries)
    write_slop(path, data["entries"])


def set_confidence(ledger_file: Path, title: str, old: str, new: str) -> None:
    """Change one Form B entry's confidence in place (as a reflect run would)."""
    text = ledger_file.read_text(encoding="utf-8")
    head = f"**Title:** {title}\n"
    start = text.index(head)
    end = text.index("**Confidence:**", start)
    line_end = text.index("\n", end)
    assert text[end:line_end] == f"**Confidence:** {old}"
    ledger_file.write_text(text[:end] + f"**Confidence:** {new}" + text[line_end:],
                           encoding="utf-8")


def add_dispatch(db: Path, task: str, *, verdict: str | None = None, notes: str | None = None,
                 summary: str = "do the thing", ts: str = "2026-05-05 10:00:00") -> None:
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, verdict, "
                 "verdict_ts, verdict_notes) VALUES (?, ?, 'general-purpose', 'sonnet', ?, ?, "
                 "?, ?)", (ts, task, summary, verdict, ts if verdict else None, notes))
    conn.commit()
    conn.close()


def add_approach(db: Path, task: str, approach: str, outcome: str, reason: str,
                 ts: str = "2026-05-05 11:00:00") -> None:
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO approaches (ts, task, approach, outcome, reason) VALUES "
                 "(?, ?, ?, ?, ?)", (ts, task, approach, outcome, reason))
    conn.commit()
    conn.close()


NOW = dt.datetime(2026, 5, 6, 9, 30)
