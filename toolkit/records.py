"""Frozen records shared across modules, each with its provenance (file and line).

Readers (``toolkit.sources``) produce these; the store loads them; reports and the editor read
them. They hold plain values only (str, int, tuples) so they are cheap to build in bulk and
safe to pass between threads.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# What the store's whole-number columns hold: INTEGER (32 bits) and BIGINT (64 bits), from
# minus the bound to the bound less one. A count read from a file beyond its column is a
# warning and NULL (or the field's fallback), never a failed load.
INTEGER_BOUND = 2**31
BIGINT_BOUND = 2**63


def fits(n: int, bound: int = INTEGER_BOUND) -> bool:
    """Whether the store's column of ``bound`` holds ``n``."""
    return -bound <= n < bound

# The five ledger files, in the seed's order, with their display titles and the key each
# meta.yaml schema uses for them.
LEDGER_FILES: tuple[str, ...] = (
    "patterns",
    "antipatterns",
    "tool-preferences",
    "edge-cases",
    "project-quirks",
)
LEDGER_TITLES: dict[str, str] = {
    "patterns": "Patterns",
    "antipatterns": "Antipatterns",
    "tool-preferences": "Tool Preferences",
    "edge-cases": "Edge Cases",
    "project-quirks": "Project Quirks",
}
# What one entry of each file is, for listings that mix files (the site's home page, related
# entries): an antipattern is something to avoid, never a pattern to follow.
LEDGER_KINDS: dict[str, str] = {
    "patterns": "pattern",
    "antipatterns": "antipattern",
    "tool-preferences": "tool preference",
    "edge-cases": "edge case",
    "project-quirks": "project quirk",
}
LEDGER_ALIASES: dict[str, str] = {"tools": "tool-preferences", "quirks": "project-quirks"}
CATEGORIES: tuple[str, ...] = ("implementation", "testing", "debugging", "specification", "audit")
CONFIDENCES: tuple[str, ...] = ("low", "medium", "high")

SLOP_BUCKETS: tuple[str, ...] = (
    "retained_compatibility",
    "unmigrated_callers",
    "duplicate_concepts",
    "naming_drift",
    "stale_docs",
    "stale_tests",
    "suspected_dead_code",
    "unverified_public_behavior",
    "tool_gaps",
    "accepted_debt",
)
SLOP_SEVERITIES: tuple[str, ...] = ("critical", "high", "medium", "low", "info")
SLOP_CONFIDENCES: tuple[str, ...] = ("certain", "high", "medium", "low")
SLOP_STATUSES: tuple[str, ...] = ("open", "in_progress", "resolved", "accepted", "wont_fix")

AUDIT_TIERS: tuple[int, ...] = (0, 1, 2)
AUDIT_VERDICTS: tuple[str, ...] = ("CONFIRMED", "REFUTED", "PARTIAL")
AUDIT_OUTCOMES: tuple[str, ...] = ("DEAD_END", "NO_GO", "WORKS")
# The approaches ruled out (tried and failed, or decided against): the handoff's and the
# site's dead ends, and nagi-ledger's session brief's. SQL that DuckDB and SQLite both read.
RULED_OUT_SQL = "outcome IN ('DEAD_END', 'NO_GO')"
# nagi-ledger (dispatch_guard): a task is over the retry limit when retry_count >= this.
RETRY_LIMIT = 2


def resolve_ledger_file(name: str) -> str | None:
    """Map a user's file name (``tools``, ``patterns.md``, ``Edge-Cases``) to a ledger kind."""
    key = name.strip().lower()
    if key.endswith(".md"):
        key = key[:-3]
    key = LEDGER_ALIASES.get(key, key).replace("_", "-")
    return key if key in LEDGER_FILES else None


# Where a multi-file edit of a vault's ledger keeps its intent journal (FAULTS G4). Here, not
# in toolkit.ledger.vault.journal, so the ledger's fingerprint (every refresh) can name the
# file without importing the vault package.
JOURNAL_NAME = ".toolkit-journal.json"


def journal_path(vault: str | Path) -> Path:
    """Where a multi-file edit of this vault's ledger keeps its intent journal."""
    return Path(vault) / "ledger" / JOURNAL_NAME


LEDGER_FILE_NAMES_HINT = ("Use patterns, antipatterns, tool-preferences (tools), edge-cases or "
                          "project-quirks (quirks)")


def ledger_kind(name: str, *, option: str | None = None) -> str:
    """:func:`resolve_ledger_file`, or a usage error naming the valid files (``option``, e.g.
    ``--category``, starts the message when the option's name is not obvious)."""
    from toolkit.errors import UsageError

    kind = resolve_ledger_file(name)
    if kind is None:
        raise UsageError(f"{option + ': ' if option else ''}unknown ledger file {name!r}",
                         hint=LEDGER_FILE_NAMES_HINT)
    return kind


TOP_ENTRIES = 5  # high-confidence entries the dashboard shows (CLI and site)


def top_high_confidence(entries: Iterable[T], n: int,
                        fields: Callable[[T], tuple[str | None, int | None, str, int]]
                        ) -> list[T]:
    """The dashboard's top entries (``toolkit ledger`` and the site's home page): the ``n``
    high-confidence entries with the most reflections, ties in the seed's reading order (the
    five files in :data:`LEDGER_FILES` order, then line). ``fields`` gives an entry's
    (confidence, reflections, file kind, line)."""
    rank = {kind: i for i, kind in enumerate(LEDGER_FILES)}

    def key(e: T) -> tuple[int, int, int]:
        _, reflections, kind, line = fields(e)
        return (-(reflections or 0), rank.get(kind, len(rank)), line)

    return sorted((e for e in entries if fields(e)[0] == "high"), key=key)[:n]


@dataclass(frozen=True, slots=True)
class Problem:
    """A warning about a source: where it is and what is wrong. Never fatal on read."""

    source: str  # "smith", "slop", "audit", "snapshots", "config"
    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One Smith Ledger entry in either form.

    ``start``/``end`` are byte offsets of the entry's block in the file (the editor replaces
    exactly that range); ``line`` is the 1-based line of its title. Missing fields are None and
    named in ``problems``; display code shows them as ``[???]``.
    """

    path: str  # absolute path of the ledger file
    file: str  # kind: "patterns", "antipatterns", ...
    title: str | None
    date: str | None
    category: str | None
    confidence: str | None
    observations: int | None
    source_reflections: str | None
    context: str | None
    pattern: str | None
    evidence: str | None
    related: str | None
    form: str  # "A" (## heading + bullets) or "B" (**Title:** fields)
    line: int
    start: int
    end: int
    problems: tuple[str, ...] = ()

    @property
    def file_name(self) -> str:
        return f"{self.file}.md"

    @property
    def reflections(self) -> int:
        """How many reflections back this entry (Form A: Observations; Form B: the count)."""
        if self.observations is not None:
            return self.observations
        text = (self.source_reflections or "").strip()
        if text.isdecimal() and fits(n := int(text)):
            return n
        return 1


def _row_maker(cls: type[T]) -> Callable[[tuple[Any, ...]], T]:
    """A constructor of a frozen, slotted dataclass from a tuple of all its fields in order:
    each slot is set through its own descriptor, without the generated ``__init__``'s call
    of ``object.__setattr__`` per field (about twice as fast; a parse builds one per entry)."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    scope.update((f"set_{n}", getattr(cls, n).__set__) for n in names)
    body = "".join(f"    set_{n}(obj, row[{i}])\n" for i, n in enumerate(names))
    exec(f"def make(row):\n    obj = new(cls)\n{body}    return obj\n", scope)
    make: Callable[[tuple[Any, ...]], T] = scope["make"]
    return make


# LedgerEntry(*row) for a row of all 17 fields, fast (the parser, the parse cache).
ledger_entry = _row_maker(LedgerEntry)


@contextlib.contextmanager
def acyclic_build(*, promote: bool = False) -> Iterator[None]:
    """Pause the cycle collector while a reader builds many records (plain values, no
    cycles: nothing for it to find, yet every few hundred new objects it would walk them
    all, a third of a big parse's time).

    ``promote``: on leaving, move every object the collector tracks into its oldest
    generation (``gc.freeze`` then ``gc.unfreeze``, no walk) instead of letting its next
    young pass walk all that the block made (20 ms after reading 20,000 slop entries, 8% of
    the read). Garbage that was waiting in the young generations waits for the next full
    pass too: for a reader a command runs, not inside a long build. Not while the process
    has objects frozen (``gc.get_freeze_count()``): the unfreeze would put back what its
    caller froze (a server that freezes what it loaded at start, so that the processes it
    forks share those pages) with the rest."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            if promote and not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@dataclass(frozen=True, slots=True)
class Session:
    """A vault session log (``.smith/vault/sessions/*.md``)."""

    path: str
    name: str  # file name without .md
    session_start: str | None  # ISO "YYYY-MM-DDTHH:MM:SS": UTC, unless it carries an offset
    project: str | None
    branch: str | None
    author: str | None
    status: str | None
    ended: str | None
    legacy_name: bool
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """One event of a session log: a prompt, tool metric, file edit, skill event, subagent..."""

    session: str  # Session.name
    path: str
    line: int
    seq: int  # position in the log, from 0
    time: str | None  # "HH:MM:SS" as written
    # started|resumed|ended|compacted|prompt|metric|file_change|skill|subagent_invoked|
    # subagent_completed|workflow_start|other
    kind: str
    title: str
    body: str
    tool: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    tokens_total: int | None = None
    target: str | None = None  # file path or identifier the event is about
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SlopEntry:
    """One CodeSmith slop ledger entry (FORMATS.md §2.2), normalised to snake_case enums.

    ``extra`` keeps unknown fields (as JSON-compatible values) so a rewrite never loses them.
    """

    path: str
    index: int  # position in the file's entries array
    line: int | None
    id: str
    bucket: str | None
    severity: str | None
    confidence: str | None
    owner: str | None
    source_links: tuple[str, ...]
    title: str
    description: str
    status: str | None
    cleanup_recommendation: str | None
    created_at: str | None
    updated_at: str | None
    task_id: str | None
    thread_id: str | None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    problems: tuple[str, ...] = ()

    @property
    def short_id(self) -> str:
        return self.id[:8]


# SlopEntry(*row) for a row of all 19 fields, fast (the reader builds one per entry).
slop_entry = _row_maker(SlopEntry)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One CodeSmith turn snapshot: a commit on the side repo's HEAD.

    ``position`` counts from 1 = newest, as ``/restore N`` does. SHAs and times change when
    CodeSmith prunes past 50 snapshots, so identity is (label, position), not the SHA.
    """

    sha: str
    position: int
    time: int  # unix author time
    label: str
    kind: str  # "pre-turn", "post-turn", "tool", or "other"
    turn: int | None  # the <seq> of pre/post-turn labels
    call_id: str | None  # the <call_id> of tool labels
    snippet: str | None  # prompt snippet after ": "
    parent: str | None
    repo: str  # side repo git dir
    tree: str | None = None  # the snapshot's tree: kept when CodeSmith's pruning rebuilds commits
    key: str | None = None  # stable identity: "<label>@<tree12>" (+ "#n" for repeats)


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """A file a snapshot changed against its parent snapshot."""

    sha: str
    path: str
    status: str  # A/M/D/R...
    added: int | None  # None for binary files
    deleted: int | None
