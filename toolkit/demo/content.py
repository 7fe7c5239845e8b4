"""The demo world's content, read from the YAML files in ``toolkit/demo/data/``.

People, the timeline, Smith sessions and ledger entries, the project's files and CodeSmith
turns, slop and audit templates and the nagi-ledger goals are data; the other modules of this
package turn them into files. Lists in the YAML become tuples here, so the tables stay
immutable and behave exactly as the Python literals they replaced.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from toolkit.textio import parse_yaml

UTC = dt.UTC
PROJECT = "acme-api"


def _frozen(value: Any) -> Any:
    """YAML lists as tuples, all the way down (mappings keep their order)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def _load(name: str) -> Any:
    text = resources.files("toolkit.demo").joinpath("data", name).read_text(encoding="utf-8")
    return _frozen(parse_yaml(lambda loader: yaml.load(text, Loader=loader)))


def random_stream(seed: int, stream: str) -> random.Random:
    """An independent, reproducible random stream per part of the world."""
    return random.Random(f"acme-demo:{seed}:{stream}")


def keyed_choice(items: Sequence[str], *keys: str) -> str:
    """A deterministic choice keyed by text (not by the RNG: stable under content edits)."""
    return items[zlib.crc32("|".join(keys).encode()) % len(items)]


# --------------------------------------------------------------------------- people

@dataclass(frozen=True)
class Person:
    name: str
    email: str
    home: str  # where this person's checkout lives on their machine (appears in logs)

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    @property
    def email_hash(self) -> str:
        return hashlib.sha256(self.email.encode()).hexdigest()[:6]

    @property
    def ident(self) -> tuple[str, str]:
        return self.name, self.email


PEOPLE: dict[str, Person] = {k: Person(**v) for k, v in _load("people.yaml").items()}


# --------------------------------------------------------------------------- the timeline
#
# Every moment of the world is (day offset from the anchor, "HH:MM:SS") in UTC. The anchor is
# the last day with activity; the pinned "today" is the day after.

MOMENTS: dict[str, tuple[int, str]] = _load("timeline.yaml")


def moment(anchor: dt.date, day: int, hms: str) -> dt.datetime:
    h, m, s = (int(x) for x in hms.split(":"))
    base = dt.datetime(anchor.year, anchor.month, anchor.day, h, m, s, tzinfo=UTC)
    return base + dt.timedelta(days=day)


# --------------------------------------------------------------------------- sessions

@dataclass(frozen=True)
class SessionSpec:
    key: str
    day: int
    time: str
    author: str | None  # None: a legacy session log (YYYY-MM-DD_HHMMSS.md, no author)
    skill: str  # "build" or "bugfix"
    branch: str
    prompt: tuple[str, ...]
    synthesized: str
    outcome: str
    artifacts: tuple[str, ...]
    system: str
    subagent: str
    reads: tuple[str, ...]
    edits: tuple[str, ...]
    tests: str
    feat: str  # short phrase used in evidence lines
    commit: str  # the commit message title for the work of this session
    followup: str | None = None
    flags: frozenset[str] = frozenset()  # failed, resumed, compacted, active
    violation: bool = False  # truncated a ledger file (counts in .meta.json)
    reflect: bool = True  # reflected into the current ledger


def _session(row: dict[str, Any]) -> SessionSpec:
    return SessionSpec(**{**row, "flags": frozenset(row.get("flags", ()))})


SESSIONS: tuple[SessionSpec, ...] = tuple(_session(r) for r in _load("sessions.yaml"))
SESSION_BY_KEY = {s.key: s for s in SESSIONS}


# --------------------------------------------------------------------------- ledger entries

@dataclass(frozen=True)
class EntrySpec:
    key: str
    file: str
    form: str  # "A" or "B"
    title: str  # "" = a malformed entry with an empty **Title:**
    category: str | None  # None = a malformed entry with no Category line
    context: str
    pattern: str
    evidence: tuple[str | tuple[str, str], ...]  # session key, or (session key, outcome)
    related: tuple[str, ...] = ()  # entry keys
    overrides: tuple[tuple[str, str], ...] = ()  # (moment, confidence): promote / demote
    removed: str | None = None  # moment it was pruned
    absorbs: tuple[tuple[str, str], ...] = ()  # (moment, entry key) merged into this one
    merged: str | None = None  # moment this entry was merged into another


@dataclass(frozen=True)
class ArchivedEntry:
    """An entry of the old ledger that ``/smith-ledger reset`` moved into ``archive/``."""

    file: str
    title: str
    category: str
    confidence: str
    context: str
    sessions: tuple[str, ...]
    pattern: str


_LEDGER = _load("ledger.yaml")
ENTRIES: tuple[EntrySpec, ...] = tuple(EntrySpec(**row) for row in _LEDGER["entries"])
ENTRY_BY_KEY = {e.key: e for e in ENTRIES}
OUTCOMES: dict[str, tuple[str, ...]] = _LEDGER["outcomes"]
DESCRIPTIONS: dict[str, str] = _LEDGER["descriptions"]
ARCHIVE: tuple[ArchivedEntry, ...] = tuple(ArchivedEntry(**row) for row in _LEDGER["archive"])
SMITH_CONFIG: dict[str, Any] = _LEDGER["smith_config"]
# moment ("promote", "demote") -> (author, note) of the commit that changed a confidence
CONFIDENCE_COMMITS: dict[str, tuple[str, str]] = {
    name: (c["author"], c["note"]) for name, c in _LEDGER["confidence_commits"].items()}


# --------------------------------------------------------------------------- project files

# A turn: its prompt and its steps. A step is "tool" (a tool:call_<id> snapshot, taken before
# the tool writes) or a tuple of edits. Edits: ("write", path, text), ("delete", path),
# ("replace", path, old, new), ("append", path, text), ("ledger", part).
Edit = tuple[str, ...]


@dataclass(frozen=True)
class Turn:
    day: int
    time: str
    prompt: str
    steps: tuple[str | tuple[Edit, ...], ...]


_PROJECT = _load("project.yaml")
UNRELEASED: str = _PROJECT["unreleased"]
BASE_FILES: dict[str, str] = _PROJECT["files"]
TURNS: tuple[Turn, ...] = tuple(Turn(**row) for row in _PROJECT["turns"])


# --------------------------------------------------------------------------- slop ledger

# A slot named "a+b" picks its values together (a tuple per choice), so paired facts (a caller
# and its file) stay consistent.
Slots = dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class SlopTemplate:
    title: str
    description: str
    links: tuple[str, ...]
    slots: Slots


@dataclass(frozen=True)
class SlopSpecial:
    """A hand-written slop entry (they exercise redaction in exports)."""

    bucket: str
    severity: str
    confidence: str
    title: str
    description: str
    links: tuple[str, ...]


_SLOP = _load("slop.yaml")
SLOP_TEMPLATES: dict[str, tuple[SlopTemplate, ...]] = {
    bucket: tuple(SlopTemplate(**t) for t in rows) for bucket, rows in _SLOP["templates"].items()}
SLOP_CLEANUP: dict[str, tuple[str, ...]] = _SLOP["cleanup"]
OWNERS: tuple[str, ...] = _SLOP["owners"]
SLOP_SPECIAL: tuple[SlopSpecial, ...] = tuple(SlopSpecial(**s) for s in _SLOP["special"])


# --------------------------------------------------------------------------- audit DB, goals

@dataclass(frozen=True)
class ActionKind:
    weight: int
    tiers: tuple[int, int, int]  # weights of tiers 0, 1, 2
    templates: tuple[str, ...]


@dataclass(frozen=True)
class Goal:
    """A goal the nagi-ledger goal gate closed: when it opened, how long, how many turns."""

    goal: str
    outcome: str
    note: str | None
    day: int
    time: str
    hours: int
    turns_used: int
    max_turns: int


_AUDIT = _load("audit.yaml")
FILES_API: tuple[str, ...] = _AUDIT["files_api"]
TESTS_API: tuple[str, ...] = _AUDIT["tests_api"]
FILES_WEB: tuple[str, ...] = _AUDIT["files_web"]
TESTS_WEB: tuple[str, ...] = _AUDIT["tests_web"]
BRANCHES_WEB: tuple[str, ...] = _AUDIT["branches_web"]
BRANCHES: tuple[str, ...] = _AUDIT["branches"]
PACKAGES: tuple[tuple[str, str, str], ...] = _AUDIT["packages"]  # (name, old, new)
ACTIONS: dict[str, ActionKind] = {c: ActionKind(**a) for c, a in _AUDIT["actions"].items()}
# Tasks for dispatches: (task, file, test, approaches ((approach, outcome, reason), ...))
TASKS: tuple[tuple[str, str, str, tuple[tuple[str, str, str], ...]], ...] = tuple(
    (t["task"], t["file"], t["test"], t["approaches"]) for t in _AUDIT["tasks"])
# Tasks pinned to the turn snapshot windows: task index -> ((day, "HH:MM:SS"), ...).
PINNED_DISPATCHES: dict[int, tuple[tuple[int, str], ...]] = _AUDIT["pinned_dispatches"]
# Approaches that fit almost any task; each task gets each of them at most once.
GENERIC_APPROACHES: tuple[tuple[str, str, str], ...] = _AUDIT["generic_approaches"]
VERDICT_NOTES: dict[str, tuple[str, ...]] = _AUDIT["verdict_notes"]
AGENTS: tuple[str, ...] = _AUDIT["agents"]
MODELS: tuple[str, ...] = _AUDIT["models"]
GOALS: tuple[Goal, ...] = tuple(Goal(**g) for g in _AUDIT["goals"])
