"""Query results -> one typed context per page of the site.

``build_site_content(store, ...)`` asks ``toolkit.queries`` every question the site needs and
returns a :class:`SiteContent`: the pages (one dataclass per page kind, each naming its
template in ``site_templates/``), the charts (``toolkit.charts.ChartSpec``) and the tables
offered as downloads. ``toolkit.site`` turns that into Markdown and runs MkDocs.

Values stay raw here: AI-written text (titles, patterns, descriptions, task names) is escaped
by the templates' autoescape, never here. Links are :class:`Ref` values (text + target page
path); the templates turn them into relative Markdown links.

URL scheme (other modules link to it; see ``page_url``):

==============================  ============================================================
``ledger/<entry_id>/``          one ledger entry (``ledger_entries.entry_id``)
``ledger/<file>/``              one ledger file (patterns, antipatterns, ...)
``slop/<short_id>/``            one slop entry (the full id when short ids collide)
``audit/tasks/<slug>/``         one audit task (``task_slugs``)
``sessions/<slug>/``            one vault session log
==============================  ============================================================
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from toolkit import clock, queries
from toolkit.charts import ChartSpec, Series
from toolkit.goals_report import goal_pages, goal_summary
from toolkit.history_report import history_pages, turn_activity
from toolkit.pages import (
    CONFIDENCE_COLORS,
    Cell,
    Deferred,
    Field,
    Page,
    Ref,
    RowRef,
    Table,
    Url,
    ledger_entry_path,
    make_pages,
    plain_pickle,
    task_path,
)
from toolkit.records import (
    AUDIT_TIERS,
    AUDIT_VERDICTS,
    CATEGORIES,
    CONFIDENCES,
    LEDGER_FILES,
    LEDGER_KINDS,
    LEDGER_TITLES,
    RETRY_LIMIT,
    SLOP_BUCKETS,
    SLOP_SEVERITIES,
    SLOP_STATUSES,
    TOP_ENTRIES,
    top_high_confidence,
)
from toolkit.slugs import slugify, unique_slugs

if TYPE_CHECKING:
    from toolkit.history import EntryHistory
    from toolkit.store import Store

RECENT_ACTIONS = 1000  # actions shown on the site (all of them are in the data download)
ACTIONS_PER_PAGE = 100
STATS_DAYS = 30
DASHBOARD_DAYS = 7
LIST_LIMIT = 200  # rows in the long lists of the approaches page
OPEN_STATUSES = ("open", "in_progress")
TIER_NAMES = {0: "tier 0 (info)", 1: "tier 1 (notable)", 2: "tier 2 (high-impact)"}
NO_PROJECT = "(no project)"  # an action logged without a project (site_scope)
# Records whose format holds no project: every project's, under either site_scope.
SHARED_AUDIT = ("nagi-ledger records no project for dispatches and approaches: these are "
                "every project's.")
SHARED_SLOP = ("CodeSmith keeps one slop ledger per user, with no project: these entries are "
               "every project's.")
TIER_COLORS = {0: "#90a4ae", 1: "#ffb300", 2: "#e53935"}
SEVERITY_COLORS = {"critical": "#b71c1c", "high": "#e53935", "medium": "#fb8c00",
                   "low": "#fdd835", "info": "#90a4ae"}
AGE_BANDS: tuple[tuple[str, int, int | None], ...] = (
    ("0-7 days", 0, 7), ("8-30 days", 8, 30), ("31-90 days", 31, 90), ("over 90 days", 91, None))
AFTER_TODAY = "after today"  # the band of entries created after ``today`` (a negative age)


# --------------------------------------------------------------------------- building blocks
# (Ref, Table, Page, Field and the page paths live in toolkit.pages)

@dataclass(frozen=True)
class Download:
    table: str
    description: str
    rows: int


@dataclass
class SiteContent:
    pages: list[Page | Deferred]
    charts: list[ChartSpec]
    downloads: list[Download]


def page_url(path: str) -> str:
    """The URL (relative to the site root) of a page's Markdown path, with directory URLs:
    ``ledger/patterns/x.md`` -> ``ledger/patterns/x/``, ``a/index.md`` -> ``a/``."""
    base = path[:-3] if path.endswith(".md") else path
    if base == "index":
        return ""
    if base.endswith("/index"):
        return base[:-5]
    return base + "/"


def task_slugs(tasks: Iterable[str]) -> dict[str, str]:
    """Slug of each audit task's page ``audit/tasks/<slug>/``: ``slugify(task)``; when two
    tasks share a slug, ``-2``, ``-3``... in sorted task order."""
    ordered = sorted(set(tasks))
    return dict(zip(ordered, unique_slugs(ordered, fallback="task"), strict=True))


_SLOP_RESERVED = {"bucket", "severity", "status", "owner", "ageing", "index"}


def slop_slugs(ids: Sequence[str], short_ids: Sequence[str | None]) -> list[str]:
    """Slug of each slop entry's page ``slop/<slug>/``, in the entries' order: its short id,
    or its full id when short ids collide (or are missing or clash with an index page); an id
    the file holds twice gets ``-2`` (CodeSmith does not check ids are unique: each entry
    keeps a page of its own)."""
    # each short id slugged once: the fallback differs only where the default's slug is
    # "untitled" (perhaps with a suffix), so only those are slugged again
    shorts = [slugify(s or "") for s in short_ids]
    count = Counter(shorts)
    out: list[str] = []
    used: set[str] = set()
    for full, short, slug in zip(ids, short_ids, shorts, strict=True):
        if slug.startswith("untitled"):
            slug = slugify(short or "", fallback="entry")
        if not short or count[slug] > 1 or slug in _SLOP_RESERVED:
            slug = slugify(full or "", fallback="entry")
        base, n = slug, 1
        while slug in used or slug in _SLOP_RESERVED:
            n += 1
            slug = f"{base}-{n}"
        used.add(slug)
        out.append(slug)
    return out


def slop_short_paths(d: SiteData) -> dict[str, str]:
    """Short id -> the page of the one slop entry it names, for links by short id (the
    handoff's, the checks' rows). A short id that several entries share names none of them:
    it gets no link rather than one to another entry's page."""
    count = Counter(s.get("short_id") for s in d.slop)
    return {s["short_id"]: d.slop_path[s["position"]] for s in d.slop
            if s.get("short_id") and count[s["short_id"]] == 1}


def display_path(path: str | None, roots: Sequence[tuple[Path, str]]) -> str:
    """A source path as shown on the site: relative to the project (or ``~/`` for the home
    folder), never the machine's absolute path."""
    if not path:
        return ""
    for root, prefix in roots:
        base = str(root).rstrip("/") + "/"
        if path.startswith(base):
            return prefix + path[len(base):]
    return ".../" + path.rsplit("/", 1)[-1]


# --------------------------------------------------------------------------- page kinds

@dataclass(kw_only=True)
class HomePage(Page):
    template: ClassVar[str] = "home.md.j2"
    site_name: str
    today: str
    clock: str  # "Built on <time>", and the day ages count to where it differs
    last_reflection: str | None
    total_reflections: int | None
    total_entries: int
    ledger_table: Table
    top_entries: Table  # high-confidence entries to follow (antipatterns never among them)
    top_avoid: Table  # high-confidence antipatterns: what to avoid
    slop_open: int
    slop_table: Table
    slop_chart: str | None
    audit_days: Table
    audit_chart: str | None
    audit_week_total: int
    pending: Table
    pending_total: int
    over_limit: Table
    snapshots: Table
    warnings: int
    goal: Table | None = None  # nagi-ledger's active goal (toolkit.goals_report)
    goals_closed: int = 0
    checks: Any = None  # the checks badge (toolkit.checks.page.Badge), when checks ran
    headlines: list[Headline] = field(default_factory=list)  # the first thing the page shows


@plain_pickle
@dataclass(frozen=True)
class Headline:
    """One figure at the top of the home page: a question (``title``, a link to the page that
    answers it in full) and its answer, one or more figures, each a link or text."""

    title: Ref
    figures: tuple[Cell, ...]
    note: str = ""  # written by us


@dataclass(kw_only=True)
class LedgerOverviewPage(Page):
    template: ClassVar[str] = "ledger_overview.md.j2"
    last_reflection: str | None
    total_reflections: int | None
    files: Table
    categories: Table
    confidences: Table
    problems: int
    chart: str | None


@dataclass(kw_only=True)
class ListPage(Page):
    """A listing of entries (ledger or slop) sharing one value: a file, a category..."""

    template: ClassVar[str] = "list.md.j2"
    wide: bool = True
    table: Table
    up: Ref | None = None


@dataclass(kw_only=True)
class GroupIndexPage(Page):
    """The values of one dimension (category, bucket, owner...) with counts and links."""

    template: ClassVar[str] = "group_index.md.j2"
    wide: bool = True
    table: Table
    chart: str | None = None


@dataclass(kw_only=True)
class LedgerEntryPage(Page):
    template: ClassVar[str] = "ledger_entry.md.j2"
    search_sections: ClassVar[bool] = False
    entry_id: str
    fields: list[Field]
    problems: list[str]
    context: str | None
    pattern: str | None
    evidence: str | None
    related: str | None
    related_entries: list[Ref]
    source: str
    history: Table | None  # None: the store has no ledger history tables yet


@dataclass(kw_only=True)
class SlopOverviewPage(Page):
    template: ClassVar[str] = "slop_overview.md.j2"
    total: int
    open_total: int
    matrix: Table
    statuses: Table
    chart: str | None


@dataclass(kw_only=True)
class SlopEntryPage(Page):
    template: ClassVar[str] = "slop_entry.md.j2"
    search_sections: ClassVar[bool] = False
    slop_id: str
    fields: list[Field]
    sources: list[Cell]  # a URL (shown as a link) or text
    description: str | None
    cleanup: str | None
    extra: list[Field]
    problems: list[str]
    source: str


@dataclass(kw_only=True)
class SlopAgeingPage(Page):
    template: ClassVar[str] = "slop_ageing.md.j2"
    bands: Table
    items: Table
    chart: str | None


@dataclass(kw_only=True)
class AuditStatsPage(Page):
    template: ClassVar[str] = "audit_stats.md.j2"
    totals: Table
    per_project: Table
    per_day: Table
    per_day_chart: str | None
    per_category: Table
    per_category_chart: str | None
    verdicts: Table
    days: int


@dataclass(kw_only=True)
class DispatchReportPage(Page):
    template: ClassVar[str] = "audit_dispatches.md.j2"
    wide: bool = True
    over_limit: Table
    pending: Table
    tasks: Table
    retry_limit: int


@dataclass(kw_only=True)
class ApproachesPage(Page):
    template: ClassVar[str] = "audit_approaches.md.j2"
    summary: Table
    dead_ends: Table
    no_gos: Table
    works: Table
    limit: int


@dataclass(kw_only=True)
class TaskPage(Page):
    template: ClassVar[str] = "audit_task.md.j2"
    search_sections: ClassVar[bool] = False
    task: str
    fields: list[Field]
    dispatches: Table
    dead_ends: Table
    no_gos: Table
    works: Table
    slop: Table


@dataclass(kw_only=True)
class ActionsPage(Page):
    template: ClassVar[str] = "audit_actions.md.j2"
    wide: bool = True
    table: Table
    page_no: int
    pages: list[Ref]
    previous: Ref | None
    next: Ref | None
    shown: int
    total: int


@dataclass(kw_only=True)
class SessionsPage(Page):
    template: ClassVar[str] = "sessions.md.j2"
    wide: bool = True
    table: Table


@dataclass(kw_only=True)
class SessionPage(Page):
    template: ClassVar[str] = "session.md.j2"
    fields: list[Field]
    problems: list[str]
    events: Table
    texts: list[tuple[str, str]]  # (heading label written by us, AI/user text)


@dataclass(kw_only=True)
class SnapshotsPage(Page):
    template: ClassVar[str] = "snapshots.md.j2"
    turns: list[TurnView]  # newest first, each with its own page (TurnPage)
    latest: Table
    total: int
    table: Table  # one row per turn, linking to its page


@dataclass(frozen=True)
class TurnView:
    label: str  # "Turn 12" (written by us)
    anchor: str
    snippet: str | None  # the prompt snippet from the label (user text)
    snapshots: Table
    files: Table
    # history feature: window, lines +/- and audit activity (toolkit.history_report)
    summary: str | None = None
    activity: Table | None = None
    path: str = ""  # the turn's own page
    shas: tuple[str, ...] = ()  # its snapshots, oldest first (toolkit.turn_diffs finds it by them)
    turn: int | None = None  # CodeSmith's turn number


@dataclass(kw_only=True)
class TurnPage(Page):
    """One turn: its prompt, snapshots, files, diff (``toolkit.turn_diffs`` fills it, from
    the side repo) and the audit actions logged during it."""

    template: ClassVar[str] = "turn.md.j2"
    turn: TurnView
    diff: str | None = None  # the unified diff, cut to its limit (None: not available)
    diff_note: str = ""  # why the diff is cut or missing (written by us)


@dataclass(kw_only=True)
class HandoffPage(Page):
    """The handoff report (``toolkit.handoff``), rendered for the site: already redacted and
    escaped by the report itself, so the template prints it as it is."""

    template: ClassVar[str] = "handoff.md.j2"
    report: Any  # markupsafe.Markup: the report's Markdown


@dataclass(kw_only=True)
class DataPage(Page):
    template: ClassVar[str] = "data.md.j2"
    wide: bool = True
    table: Table


@dataclass(kw_only=True)
class WarningsPage(Page):
    template: ClassVar[str] = "warnings.md.j2"
    wide: bool = True
    table: Table


# Pages built by modules above this one (the handoff page needs toolkit.handoff, which
# imports this module): handed to build_site_content by the caller (toolkit.site).
PageBuilder = Callable[["Store", "SiteData"], list[Page]]


# --------------------------------------------------------------------------- the data

@dataclass
class SiteData:
    """Everything the pages are built from, queried once."""

    today: dt.date
    site_name: str
    roots: list[tuple[Path, str]]
    tables: list[str]
    counts: dict[str, int]
    ledger: list[dict[str, Any]]
    ledger_meta: dict[str, Any] | None
    slop: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    dispatches: list[dict[str, Any]]
    approaches: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    events: list[dict[str, Any]]
    snapshots: list[dict[str, Any]]
    snapshot_files: list[dict[str, Any]]
    turn_files: list[dict[str, Any]]
    problems: list[Any]
    history: dict[str, str] | None  # entry key -> digest of its history (_entry_history)
    # (day, tier, actions) over the last STATS_DAYS days (a day: never None, with a since)
    day_tier: list[tuple[str | None, Any, int]]
    built: dt.datetime | None = None  # the build time (toolkit.clock.now), for the dashboard
    # ledger files the last load found missing or could not read: kind -> "missing" or
    # "unreadable" (the files table marks them, as ``toolkit ledger`` does, instead of a 0)
    ledger_absent: dict[str, str] = field(default_factory=dict)
    # derived
    entry_path: dict[str, str] = field(default_factory=dict)
    # entry_id -> the history's entry key (entry_keys_by_id), when the store has the history
    entry_key: dict[str, str] = field(default_factory=dict)
    slop_path: dict[int, str] = field(default_factory=dict)  # slop position -> its page
    task_slug: dict[str, str] = field(default_factory=dict)
    turn_activity: dict[tuple[str, str], Any] = field(default_factory=dict)  # history feature
    # site_scope (Store.scope_actions): the project whose actions (and the unassigned ones)
    # the site shows, None: every project's; (actions, projects) left out
    action_scope: str | None = None
    actions_hidden: tuple[int, int] = (0, 0)
    # sources the store could not read at its last load (Store.stale_sources' messages)
    stale: list[str] = field(default_factory=list)
    _shown_paths: dict[str | None, str] = field(default_factory=dict)

    def shown_path(self, path: str | None) -> str:
        """:func:`display_path` of a source path, worked out once per path (every entry of a
        file has its file's)."""
        shown = self._shown_paths.get(path)
        if shown is None:
            shown = self._shown_paths[path] = display_path(path, self.roots)
        return shown


class KeptAnswers:
    """Answers of the site's questions kept from the last build (in ``folder``, a
    :mod:`toolkit.parsecache` slot each) for a source that was not loaded again since: an
    answer is kept under the versions of the tables it reads (:meth:`Store.table_versions`:
    the load of their source, as the site's downloads are kept), ``variant`` (what else the
    build reads them under: redaction, the site scope) and the code and libraries that make
    it (``code``); any of them different, or a table without a version, and the question is
    asked again. At 15,000 entries, the slop ledger's rows and page slugs come back in 0.03 s
    where asking costs 0.13 s (the digest of each entry's whole row, made by DuckDB)."""

    def __init__(self, folder: Path, versions: dict[str, str], variant: str, code: str) -> None:
        self.folder = folder
        self.versions = versions
        self.variant = variant
        self.code = code

    def get(self, name: str, tables: Sequence[str], ask: Callable[[], Any],
            valid: Callable[[Any], bool]) -> Any:
        """The answer ``ask()`` gives (kept in the slot ``answer-<name>``) while ``tables`` are
        as they were when it was kept; ``valid``: what a kept answer must be to be used."""
        from toolkit import parsecache

        if any(t not in self.versions for t in tables):
            return ask()
        key = ("site-answer/1", self.code, self.variant,
               *(f"{t}\0{self.versions[t]}" for t in tables))
        slot = f"answer-{name}"
        kept = parsecache.load(self.folder, slot, key)
        if kept is not None and valid(kept):
            return kept
        answer = ask()
        parsecache.save(self.folder, slot, key, answer)
        return answer


def _slop_and_slugs(store: Store, kept: KeptAnswers | None
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """The slop entries the site shows (:func:`queries.site_slop_entries`) and the slug of
    each one's page (:func:`slop_slugs`), kept while the slop ledger is as it was loaded."""
    def ask() -> tuple[list[dict[str, Any]], list[str]]:
        slop = queries.site_slop_entries(store)
        return slop, slop_slugs([s["id"] for s in slop], [s["short_id"] for s in slop])

    def valid(answer: Any) -> bool:
        return (isinstance(answer, tuple) and len(answer) == 2
                and isinstance(answer[0], list) and isinstance(answer[1], list)
                and len(answer[0]) == len(answer[1])
                and all(isinstance(s, dict) for s in answer[0])
                and all(isinstance(s, str) for s in answer[1]))

    if kept is None:
        return ask()
    slop, slugs = kept.get("slop", ("slop_entries",), ask, valid)
    return slop, slugs


def ledger_file_versions(store: Store) -> dict[str, str]:
    """Per ledger file whose entries ``store`` holds as the ledger's last load made them from
    its bytes (its git blob id, the code that made the rows and the vault's folder, which its
    ``_sources`` state records: a file's rows depend on nothing else), a version under which
    the site keeps answers about that file's entries alone (:class:`KeptAnswers`; as
    ``ledger_entries/<file>``). Read from the store itself, not from a redacted copy (whose
    state went through the redactor)."""
    from toolkit.records import LEDGER_FILES

    state = (store.source_state("ledger") or {}).get("state")
    blobs = state.get("blobs") if isinstance(state, dict) else None
    made_by = state.get("made_by") if isinstance(state, dict) else None
    if not isinstance(blobs, dict) or not isinstance(made_by, dict):
        return {}
    made = json.dumps(made_by, sort_keys=True)
    return {f"ledger_entries/{kind}": f"{blob}|{made}" for kind, blob in blobs.items()
            if kind in LEDGER_FILES and isinstance(blob, str)}


def _ledger_entries(store: Store, kept: KeptAnswers | None) -> list[dict[str, Any]]:
    """The ledger entries the site shows (:func:`queries.site_ledger_entries`), each file's
    kept while the file is as its rows were loaded from (:func:`ledger_file_versions`): a
    one-entry edit asks for that file's entries alone. Asked whole when a file has no such
    version (a file that could not be read, a store another toolkit loaded)."""
    if kept is None:
        return queries.site_ledger_entries(store)
    files = queries.site_ledger_files(store)
    if any(f"ledger_entries/{f}" not in kept.versions for f in files):
        return queries.site_ledger_entries(store)
    out: list[dict[str, Any]] = []
    for f in filter(None, files):  # each one of LEDGER_FILES (it has a version)
        def ask(f: str = f) -> list[dict[str, Any]]:
            return queries.site_ledger_entries(store, f)

        def valid(answer: Any, f: str = f) -> bool:
            return isinstance(answer, list) and all(
                isinstance(e, dict) and e.get("file") == f for e in answer)

        out += kept.get(f"ledger-{f}", (f"ledger_entries/{f}",), ask, valid)
    return out


def load_site_data(store: Store, *, today: dt.date, site_name: str,
                   roots: list[tuple[Path, str]], built: dt.datetime | None = None,
                   kept: KeptAnswers | None = None) -> SiteData:
    """What the site's pages show, from ``store``; ``kept``: answers kept from the last build,
    used for the sources not loaded again since."""
    tables = store.tables()
    slop, slugs = _slop_and_slugs(store, kept)
    data = SiteData(
        today=today, site_name=site_name, roots=roots, tables=tables, counts=store.counts(),
        ledger=_ledger_entries(store, kept), ledger_meta=queries.site_ledger_meta(store),
        slop=slop, tasks=queries.site_task_status(store),
        dispatches=queries.site_dispatches(store), approaches=queries.site_approaches(store),
        sessions=queries.site_sessions(store), events=queries.site_session_events(store),
        snapshots=queries.site_rows(store, "snapshots"),
        snapshot_files=queries.site_rows(store, "snapshot_files"),
        turn_files=queries.site_rows(store, "turn_files"),
        problems=store.problems(), history=_entry_history(store, tables),
        stale=[s.message() for s in store.stale_sources()],
        day_tier=queries.site_actions_by_day_tier(
            store, today - dt.timedelta(days=max(STATS_DAYS, DASHBOARD_DAYS) - 1)),
        built=built, ledger_absent=_ledger_absent(store))
    data.entry_path = {e["entry_id"]: ledger_entry_path(e["entry_id"]) for e in data.ledger}
    if data.history is not None:
        data.entry_key = entry_keys_by_id(data.ledger)
    data.slop_path = {s["position"]: f"slop/{slug}.md" for s, slug in zip(data.slop, slugs,
                                                                            strict=True)}
    all_tasks = {t["task"] for t in data.tasks} | {a["task"] for a in data.approaches}
    data.task_slug = task_slugs(t for t in all_tasks if t is not None)
    _VALUE_SLUGS.clear()
    _VALUE_REFS.clear()
    for dim in ("category", "confidence"):
        _VALUE_SLUGS.update(value_slugs(dim, (e.get(dim) for e in data.ledger)))
    for dim in ("bucket", "severity", "status"):
        _VALUE_SLUGS.update(value_slugs(dim, (s.get(dim) for s in data.slop)))
    # owners that differ only in case are one owner, as `slop query --owner` matches them:
    # every spelling links to its group's page
    from toolkit.slop_ops import owner_groups

    owners = owner_groups(s.get("owner") for s in data.slop)
    owner_slugs = value_slugs("owner", owners.values())
    _VALUE_SLUGS.update(owner_slugs)
    _VALUE_SLUGS.update((("owner", o), owner_slugs[("owner", name)]) for o, name in owners.items())
    data.turn_activity = turn_activity(store, data)
    data.action_scope = store.action_scope
    data.actions_hidden = store.actions_outside_scope()
    return data


def scope_note(d: SiteData) -> str:
    """Whose actions the audit pages count (site_scope), and how many they leave out."""
    if d.action_scope is None:
        return "Actions shown: every project's (site_scope: all), each with its project."
    hidden, projects = d.actions_hidden
    text = (f"Actions shown: this project's ({d.action_scope}) and the unassigned ones, "
            f"labelled {NO_PROJECT}")
    if hidden:
        text += (f"; {hidden:,} actions of {projects} other project"
                 f"{'s' if projects != 1 else ''} are left out (site_scope: all shows them)")
    return text + "."


def _entry_history(store: Store, tables: list[str]) -> dict[str, str] | None:
    """Entry key -> the digest of its history as its page shows it (:func:`_history_table`,
    ``toolkit ledger history TITLE``), for the entries with a history, when the history
    tables exist (None otherwise); the history itself is read for the pages rendered
    (:func:`entry_history_tables`)."""
    if "ledger_changes" not in tables:
        return None
    from toolkit.history import entry_history_digests

    return entry_history_digests(store, _HISTORY_SHOWN)


# What an entry page's history table shows of one state (_history_table): no time for the
# working files (theirs is the newest mtime of any ledger file), confidence and reflections
# where the entry is present.
_HISTORY_SHOWN = ("struct_pack(source := source, ts := CASE WHEN source = 'working' THEN NULL "
                  "ELSE ts END, ref := ref, changes := changes, present := present, "
                  "confidence := CASE WHEN present THEN confidence END, "
                  "reflections := CASE WHEN present THEN reflections END, subject := subject)")


def entry_history_tables(store: Store, keys: list[str]) -> dict[str, Table]:
    """Entry key -> its history table (:func:`_history_table`), for each of ``keys`` (a
    :class:`RowRef` fetch: an entry page's history, read when the page is rendered)."""
    from toolkit.history import entry_histories

    found = entry_histories(store, keys)
    return {k: _history_table(found.get(k)) for k in keys}


def entry_keys_by_id(entries: list[dict[str, Any]]) -> dict[str, str]:
    """entry_id -> the history's entry key (``<file>/<title key>[#n]``, file order; the
    site's entry pages, the handoff's comparison with the history)."""
    from toolkit.sources.history import entry_title_key

    seen: Counter[str] = Counter()
    out = {}
    for e in sorted(entries, key=lambda e: (e["file"], e.get("position") or 0)):
        base = f"{e['file']}/{entry_title_key(e.get('title'))}"
        seen[base] += 1
        out[e["entry_id"]] = base if seen[base] == 1 else f"{base}#{seen[base]}"
    return out


def _history_table(h: EntryHistory | None) -> Table:
    """The rows of ``toolkit ledger history TITLE``: one per version that changed the entry."""
    # The working files' "time" is their newest mtime: it moves with every edit of any ledger
    # file, so it is not shown (it would rewrite every entry page on each change).
    return Table(("When", "Source", "Version", "Change", "Confidence", "Reflections",
                  "Subject"), [
        ("now (not committed)" if s.source == "working" else _fmt_ts(s.ts), s.source,
         s.short_ref, ", ".join(s.changes), s.confidence if s.present else "",
         s.reflections if s.present else "", s.subject or "") for s in (h.states if h else [])],
        empty="No recorded history for this entry yet.")


def build_site_content(store: Store, *, today: dt.date, site_name: str,
                       roots: list[tuple[Path, str]], extra: Sequence[PageBuilder] = (),
                       built: dt.datetime | None = None, lazy: bool = False,
                       kept: KeptAnswers | None = None) -> SiteContent:
    """Every page, chart and download of the site, from the store's current content, plus
    the pages of the ``extra`` builders (the handoff page, from toolkit.handoff_page).
    ``lazy``: the entry pages are :class:`Deferred` (made when the site renders them, which
    then fetches the rows they show); otherwise they are made here. ``kept``: see
    :func:`load_site_data`."""
    data = load_site_data(store, today=today, site_name=site_name, roots=roots, built=built,
                          kept=kept)
    charts: list[ChartSpec] = []
    pages: list[Page | Deferred] = []
    home = _home(store, data, charts)
    home.goal, home.goals_closed = goal_summary(store)
    pages.append(home)
    pages += _ledger_pages(data, charts)
    pages += history_pages(store, data, charts)
    pages += _slop_pages(data, charts)
    pages += _audit_pages(store, data, charts)
    pages += goal_pages(store)
    pages += _session_pages(data)
    pages += _snapshots_page(data)
    docs = store.table_docs()
    downloads = [Download(t, docs.get(t, ""), data.counts.get(t, 0)) for t in data.tables]
    pages.append(DataPage(path="data/index.md", title="Data downloads", nav=("Data",),
                          table=Table(("Table", "Rows", "CSV", "JSON", "What it holds"), [
                              (d.table, d.rows, Ref(f"{d.table}.csv", f"data/{d.table}.csv"),
                               Ref(f"{d.table}.json", f"data/{d.table}.json"), d.description)
                              for d in downloads])))
    pages.append(_warnings_page(data))
    for builder in extra:
        pages += builder(store, data)
    if not lazy:
        pages = list(make_pages(store, pages))
    return SiteContent(pages=pages, charts=charts, downloads=downloads)


# --------------------------------------------------------------------------- helpers

def _count_by(rows: Iterable[dict[str, Any]], key: str) -> Counter[Any]:
    return Counter(r.get(key) for r in rows)


def _group_by(rows: Iterable[dict[str, Any]], key: str) -> dict[Any, list[dict[str, Any]]]:
    """The rows of each value of ``key``, in their order: one pass, where a pass per value
    would grow with values times rows (a slop owner or a ledger category per agent)."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r.get(key), []).append(r)
    return groups


def ordered_values(values: Iterable[Any], known: Sequence[Any]) -> list[Any]:
    """Known values in their canonical order, then any others sorted (None last): the order
    of a table's rows or columns of values (a slop bucket, severity, status...)."""
    return _ordered(values, known)


def _ordered(values: Iterable[Any], known: Sequence[Any]) -> list[Any]:
    """Known values in their canonical order, then any others sorted (None last)."""
    present = set(values)
    rest = sorted((v for v in present if v not in known and v is not None), key=str)
    return [v for v in known if v in present] + rest + ([None] if None in present else [])


# The slug of each value's index page, per dimension (``category``, ``bucket``...), unique
# within its dimension: two values can share a slug ("Ops" and "ops", or two categories that
# differ only in a secret, which slugs redact), so the later one in sorted order gets -2, -3...
# Set by load_site_data for the site being built.
_VALUE_SLUGS: dict[tuple[str, Any], str] = {}


def value_slugs(dim: str, values: Iterable[Any]) -> dict[tuple[str, Any], str]:
    """``(dim, value) -> slug`` for a dimension's values; None and "" are ``none``."""
    ordered = sorted({v for v in values if v not in (None, "")}, key=str)
    names = ["none", *(str(v) for v in ordered)]
    slugs = unique_slugs(names, fallback="none")
    out = {(dim, v): s for v, s in zip(ordered, slugs[1:], strict=True)}
    out[(dim, None)] = out[(dim, "")] = "none"
    return out


# The link to a value's index page (``_value_ref``), one object per (dimension, value) and
# build: the listings hold tens of thousands of them, built and pickled (the render cache's
# digest) once each. Cleared with _VALUE_SLUGS.
_VALUE_REFS: dict[tuple[str, Any], Ref] = {}


def _value_ref(dim: str, value: Any) -> Ref:
    """A link to the index page of a ledger value (``category``, ``confidence``) or a slop
    one (``bucket``, ``severity``, ``status``, ``owner``), showing the value."""
    key = (dim, value)
    ref = _VALUE_REFS.get(key)
    if ref is None:
        path = (f"ledger/{dim}/{_value_slug(dim, value)}.md" if dim in _LEDGER_DIMS
                else _dim_path(dim, value))
        ref = _VALUE_REFS[key] = Ref(_shown(value), path)
    return ref


_LEDGER_DIMS = ("category", "confidence")


def _value_slug(dim: str, value: Any) -> str:
    found = _VALUE_SLUGS.get((dim, value))
    if found is not None:
        return found
    return slugify(str(value), fallback="none") if value not in (None, "") else "none"


def shown_value(value: Any) -> str:
    """A value as the site shows it: none (missing or empty) is ``[???]``."""
    return "[???]" if value in (None, "") else str(value)


_shown = shown_value


def _entry_title(e: dict[str, Any]) -> str:
    return e["title"] if e.get("title") else f"[???] ({e['file']}.md line {e.get('line')})"


def _slop_title(s: dict[str, Any]) -> str:
    return s["title"] if s.get("title") else f"[???] ({s.get('short_id') or s.get('id')})"


def day_of(ts: str | None) -> dt.date | None:
    """The date of a timestamp written "YYYY-MM-DD…" (None when it is not one)."""
    if not ts:
        return None
    try:
        return dt.date.fromisoformat(str(ts)[:10])
    except ValueError:
        return None


def _yes(flag: Any) -> str:
    return "yes" if flag else "no"


# --------------------------------------------------------------------------- home

def _top_table(d: SiteData, entries: Iterable[dict[str, Any]], empty: str) -> Table:
    """The dashboard's top high-confidence entries among ``entries``, each with its kind."""
    high = top_high_confidence(entries, TOP_ENTRIES, lambda e: (
        e.get("confidence"), e.get("reflections"), e["file"], e.get("line") or 0))
    return Table(("Entry", "Kind", "Category", "Reflections"), [
        (Ref(_entry_title(e), d.entry_path[e["entry_id"]]), _kind_ref(e), _category_ref(e),
         e.get("reflections")) for e in high], empty=empty)


def _kind_ref(e: dict[str, Any]) -> Cell:
    """An entry's kind (pattern, antipattern...), linking to its file's page."""
    return Ref(LEDGER_KINDS.get(e["file"], e["file"]), _file_path(e["file"]))


def open_slop_entries(d: SiteData) -> list[dict[str, Any]]:
    """Slop entries still open or in progress (the home page and the slop pages)."""
    return [s for s in d.slop if s.get("status") in OPEN_STATUSES]


def confidence_counts(d: SiteData) -> Counter[Any]:
    """Ledger entries per confidence (the home page and the by-confidence pages)."""
    return _count_by(d.ledger, "confidence")


def week_start(today: dt.date) -> dt.date:
    """The first day of "this week" on the site: the last ``DASHBOARD_DAYS`` days to today."""
    return today - dt.timedelta(days=DASHBOARD_DAYS - 1)


def actions_this_week(store: Store, today: dt.date) -> dict[int | None, int]:
    """Audit actions per tier since :func:`week_start` (the home page and the audit stats)."""
    return queries.site_actions_by_tier_since(store, week_start(today), today)


HIGH_SEVERITIES = ("critical", "high")  # "open high-severity debt" on the home page


def _headlines(d: SiteData, week: dict[int | None, int], open_slop: list[dict[str, Any]]
               ) -> list[Headline]:
    """The home page's first answers, each computed as the page it links to computes it."""
    confs = confidence_counts(d)  # a value has a page when an entry has it
    conf_figures = tuple(
        Ref(f"{confs[c]} {_shown(c)}", f"ledger/confidence/{_value_slug('confidence', c)}.md")
        if confs[c] else f"0 {c}"
        for c in _ordered(set(confs) | set(CONFIDENCES), tuple(reversed(CONFIDENCES))))
    over = over_limit_tasks(d.tasks)
    pending = pending_dispatches(d.dispatches)
    sev = _count_by(open_slop, "severity")
    paged = {s.get("severity") for s in d.slop}  # the severities with a page
    debt = tuple(Ref(f"{sev[v]} {v}", _dim_path("severity", v)) if v in paged
                 else f"{sev[v]} {v}" for v in HIGH_SEVERITIES)
    tiers = _ordered(set(week) | set(AUDIT_TIERS), AUDIT_TIERS)
    return [
        Headline(Ref("Ledger entries by confidence", "ledger/confidence/index.md"),
                 conf_figures or ("0 entries",)),
        Headline(Ref("Tasks over the retry limit", "audit/dispatches.md#over-the-retry-limit"),
                 (Ref(_count(len(over), "task"), "audit/dispatches.md#over-the-retry-limit"),),
                 note=f"{RETRY_LIMIT} or more retries"),
        Headline(Ref("Pending verdicts", "audit/dispatches.md#pending-verification"),
                 (Ref(_count(len(pending), "dispatch", "dispatches"),
                      "audit/dispatches.md#pending-verification"),),
                 note="waiting for a verdict"),
        Headline(Ref("Open high-severity debt", "slop/severity/index.md"), debt,
                 note="open or in-progress slop entries"),
        Headline(Ref("Actions this week", "audit/index.md#actions-by-tier"), tuple(
            Ref(f"{week.get(t, 0)} {_tier_name(t)}",
                "audit/index.md#actions-by-tier") for t in tiers),
                 note=f"{week_start(d.today).isoformat()} to {d.today.isoformat()}"),
    ]


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _home(store: Store, d: SiteData, charts: list[ChartSpec]) -> HomePage:
    meta = d.ledger_meta or {}
    top = _top_table(d, (e for e in d.ledger if e["file"] != "antipatterns"),
                     "No high-confidence entries yet.")
    avoid = _top_table(d, (e for e in d.ledger if e["file"] == "antipatterns"),
                       "No high-confidence antipatterns yet.")

    open_slop = open_slop_entries(d)
    week = actions_this_week(store, d.today)
    slop_table, slop_chart = _slop_matrix(d, open_slop, charts, "slop-open")

    first = week_start(d.today)
    days = [first + dt.timedelta(days=i) for i in range(DASHBOARD_DAYS)]
    by_day: dict[tuple[str | None, Any], int] = {}
    for day_iso, tier, n in d.day_tier:
        by_day[(day_iso, tier)] = n
    tiers = site_tiers(store)  # the audit page's columns
    audit_rows: list[tuple[Any, ...]] = []
    for day in days:
        counts = [by_day.get((day.isoformat(), t), 0) for t in tiers]
        audit_rows.append((day.isoformat(), *counts, sum(counts)))
    week_total = sum(week.values())
    audit_days = Table(("Day", *(_tier_column(t) for t in tiers), "Total"),
                       [(Ref(r[0], "audit/index.md#actions-per-day"), *r[1:])
                        for r in audit_rows], key="Total")
    audit_chart = None
    if week_total:
        audit_chart = "home-audit-week"
        charts.append(ChartSpec(
            name=audit_chart, title=f"Actions in the last {DASHBOARD_DAYS} days by tier",
            labels=tuple(day.isoformat() for day in days), time=True,
            series=tuple(Series(_tier_name(t), tuple(r[1 + i] for r in audit_rows),
                                TIER_COLORS.get(t, "#607d8b")) for i, t in enumerate(tiers)),
            ylabel="actions"))

    pending = pending_dispatches(d.dispatches)
    pending_tbl = pending_table(pending, lambda t: _task_ref(d, t), limit=10, wide=False)
    over_tbl = over_limit_table(d.tasks, lambda t: _task_ref(d, t), wide=False)
    snaps = sorted(d.snapshots, key=lambda s: (s.get("position") or 0))[:5]
    snap_tbl = Table(("#", "When", "Label", "Files changed"), [
        (Ref(str(s.get("position")), "snapshots/index.md"), _fmt_ts(s.get("ts")),
         s.get("label"), s.get("files_changed")) for s in snaps],
        empty="No turn snapshots found for this workspace.")
    return HomePage(
        path="index.md", title="Dashboard", nav=("Dashboard",), site_name=d.site_name, wide=True,
        today=d.today.isoformat(), last_reflection=meta.get("last_reflection"),
        clock=(clock.describe(d.built, d.today) if d.built is not None
               else f"Ages and windows are counted to {d.today.isoformat()}."),
        total_reflections=meta.get("total_reflections"), total_entries=len(d.ledger),
        ledger_table=_ledger_file_table(d),
        top_entries=top, top_avoid=avoid, slop_open=len(open_slop), slop_table=slop_table,
        slop_chart=slop_chart,
        audit_days=audit_days, audit_chart=audit_chart, audit_week_total=week_total,
        pending=pending_tbl, pending_total=len(pending), over_limit=over_tbl,
        snapshots=snap_tbl, warnings=len(d.problems),
        headlines=_headlines(d, week, open_slop))


def _ledger_absent(store: Store) -> dict[str, str]:
    from toolkit.loaders import ledger_file_states

    files = ledger_file_states((store.source_state("ledger") or {}).get("state")) or {}
    return {kind: "missing" if not exists else "unreadable"
            for kind, (exists, _words, error) in files.items() if not exists or error}


def _fmt_ts(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


# --------------------------------------------------------------------------- ledger

def _file_path(file: str) -> str:
    return f"ledger/{file}/index.md"


def _category_ref(e: dict[str, Any]) -> Cell:
    c = e.get("category")
    return _value_ref("category", c) if c else "[???]"


def _confidence_ref(e: dict[str, Any]) -> Cell:
    c = e.get("confidence")
    return _value_ref("confidence", c) if c else "[???]"


UNRATED = "[???]"  # the column of entries of no known confidence (missing or another word)
UNRATED_COLOR = "#9e9e9e"


def _per_file_confidence(d: SiteData) -> dict[str, Counter[Any]]:
    """Entries per file (the five in the seed's order, then any of no known kind) and
    confidence: what the files table and its chart both show."""
    by_file: dict[str, Counter[Any]] = {f: Counter() for f in LEDGER_FILES}
    for e in d.ledger:
        by_file.setdefault(e["file"], Counter())[e.get("confidence")] += 1
    return by_file


def _unrated(counts: Counter[Any]) -> int:
    """Entries of no known confidence (none given, or another word)."""
    return counts.total() - sum(counts[k] for k in CONFIDENCES)


def _ledger_file_table(d: SiteData) -> Table:
    """Entries per file and confidence, as ``toolkit ledger``'s dashboard counts them: the
    column of entries of no known confidence (``[???]``) is there when any is."""
    rated = ("high", "medium", "low")
    rows: list[tuple[Any, ...]] = []
    tot: Counter[Any] = Counter()
    for f, c in _per_file_confidence(d).items():
        tot.update(c)
        absent = d.ledger_absent.get(f)
        if absent:  # no count to give: the file is not there, or could not be read
            rows.append((Ref(f"{f}.md ({absent})", _file_path(f)), *["-"] * 5))
            continue
        rows.append((Ref(f"{f}.md", _file_path(f)), c.total(),
                     *(Ref(str(c[k]), f"ledger/confidence/{k}.md") if c[k] else 0
                       for k in rated), _unrated(c)))
    rows.append(("Total", tot.total(), *(tot[k] for k in rated), _unrated(tot)))
    columns: tuple[str, ...] = ("File", "Entries", "High", "Medium", "Low", UNRATED)
    if not rows[-1][-1]:  # every entry rated: the seed's five columns
        columns, rows = columns[:-1], [r[:-1] for r in rows]
    return Table(columns, rows)


def _ledger_pages(d: SiteData, charts: list[ChartSpec]
                  ) -> list[Page | Deferred]:
    pages: list[Page | Deferred] = []
    cats = _count_by(d.ledger, "category")
    confs = confidence_counts(d)
    malformed = [e for e in d.ledger if e.get("problems")]
    chart = None
    if d.ledger:
        chart = "ledger-by-file"
        per = _per_file_confidence(d)
        unrated = tuple(_unrated(per[f]) for f in LEDGER_FILES)
        charts.append(ChartSpec(
            name=chart, title="Ledger entries by file and confidence",
            labels=tuple(LEDGER_FILES),
            series=tuple(Series(k, tuple(per[f][k] for f in LEDGER_FILES), CONFIDENCE_COLORS[k])
                         for k in reversed(CONFIDENCES))
            + ((Series(UNRATED, unrated, UNRATED_COLOR),) if any(unrated) else ()),
            ylabel="entries"))
    cat_table = Table(("Category", "Entries"), [
        (Ref(_shown(c), f"ledger/category/{_value_slug('category', c)}.md"), cats[c])
        for c in _ordered(cats, CATEGORIES)])
    conf_table = Table(("Confidence", "Entries"), [
        (Ref(_shown(c), f"ledger/confidence/{_value_slug('confidence', c)}.md"), confs[c])
        for c in _ordered(confs, CONFIDENCES)])
    meta = d.ledger_meta or {}
    pages.append(LedgerOverviewPage(
        path="ledger/index.md", title="Smith Ledger", nav=("Ledger", "Overview"),
        intro="What the agent learned: patterns, antipatterns, tool preferences, edge cases "
              "and project quirks.",
        last_reflection=meta.get("last_reflection"),
        total_reflections=meta.get("total_reflections"),
        files=_ledger_file_table(d),
        categories=cat_table, confidences=conf_table, problems=len(malformed), chart=chart))

    listed: dict[int, tuple[Any, ...]] = {}  # id(entry) -> its row, the same in every listing

    def listing(entries: list[dict[str, Any]]) -> Table:
        out = []
        for e in entries:
            row = listed.get(id(e))
            if row is None:
                row = listed[id(e)] = (
                    Ref(_entry_title(e), d.entry_path[e["entry_id"]]),
                    Ref(f"{e['file']}.md", _file_path(e["file"])), _category_ref(e),
                    _confidence_ref(e), e.get("date") or e.get("date_raw"), e.get("reflections"),
                    len(e.get("problems") or []))
            out.append(row)
        return Table(("Entry", "File", "Category", "Confidence", "Date", "Reflections",
                      "Problems"), out, empty="No entries.")

    for f in LEDGER_FILES:
        entries = [e for e in d.ledger if e["file"] == f]
        pages.append(ListPage(path=_file_path(f), title=LEDGER_TITLES[f],
                              nav=("Ledger", LEDGER_TITLES[f]), search=False,
                              intro=f"Entries of {f}.md, in file order.",
                              table=listing(entries), up=Ref("Ledger", "ledger/index.md")))
    rank: dict[str | None, int] = {c: i for i, c in enumerate(reversed(CONFIDENCES))}

    ranks = {id(e): (rank.get(e.get("confidence"), 9), -_date_ord(e.get("date")), e["entry_id"])
             for e in d.ledger}

    def by_rank(e: dict[str, Any]) -> tuple[Any, ...]:
        return ranks[id(e)]

    pages.append(GroupIndexPage(path="ledger/category/index.md", title="Ledger by category",
                                nav=("Ledger", "By category"), table=cat_table, search=False))
    by_category = _group_by(d.ledger, "category")
    for c in _ordered(cats, CATEGORIES):
        entries = sorted(by_category.get(c, ()), key=by_rank)
        pages.append(ListPage(path=f"ledger/category/{_value_slug('category', c)}.md",
                              title=f"Category: {_shown(c)}", search=False,
                              intro="Highest confidence first, newest first.",
                              table=listing(entries),
                              up=Ref("Ledger by category", "ledger/category/index.md")))
    pages.append(GroupIndexPage(path="ledger/confidence/index.md", title="Ledger by confidence",
                                nav=("Ledger", "By confidence"), table=conf_table, search=False))
    by_confidence = _group_by(d.ledger, "confidence")
    for c in _ordered(confs, CONFIDENCES):
        entries = sorted(by_confidence.get(c, ()), key=by_rank)
        pages.append(ListPage(path=f"ledger/confidence/{_value_slug('confidence', c)}.md",
                              title=f"Confidence: {_shown(c)}", search=False,
                              intro="Newest first.", table=listing(entries),
                              up=Ref("Ledger by confidence", "ledger/confidence/index.md")))
    pages.append(ListPage(path="ledger/problems.md", title="Malformed ledger entries",
                          nav=("Ledger", "Malformed entries"), search=False,
                          intro="Entries with a missing or unreadable field. They are kept "
                                "and shown with [???]; each page lists its problems.",
                          table=listing(malformed)))

    by_title: dict[str, list[str]] = defaultdict(list)
    for e in d.ledger:
        if e.get("title"):
            by_title[_norm_title(e["title"])].append(e["entry_id"])
    title_of = {e["entry_id"]: _entry_title(e) for e in d.ledger}
    kind_of = {e["entry_id"]: LEDGER_KINDS.get(e["file"], e["file"]) for e in d.ledger}
    for e in d.ledger:
        related = tuple((f"{title_of[r]} ({kind_of[r]})", d.entry_path[r])
                        for r in _related_ids(e.get("related"), by_title, e["entry_id"]))
        history = None
        if d.history is not None:  # the entry's history table, by the digest of what it shows
            key = d.entry_key[e["entry_id"]]
            history = RowRef(entry_history_tables, key, d.history.get(key, ""))
        pages.append(Deferred(d.entry_path[e["entry_id"]], _ledger_entry_page, (
            d.entry_path[e["entry_id"]],
            RowRef(queries.site_ledger_rows, e["entry_id"], e["digest"]), related, history,
            d.shown_path(e.get("path")), _category_ref(e), _confidence_ref(e))))
    return pages


def _ledger_entry_page(path: str, e: dict[str, Any], related: tuple[tuple[str, str], ...],
                       history: Table | None, source: str, category: Cell, confidence: Cell
                       ) -> LedgerEntryPage:
    """A ledger entry's page from its row and what it shows of others (a :class:`Deferred`
    page's maker: it reads its arguments only)."""
    source_refl = e.get("source_reflections")
    fields = [
        Field("File", Ref(f"{e['file']}.md", _file_path(e["file"]))),
        Field("Date", e.get("date") or e.get("date_raw") or "[???]"),
        Field("Category", category),
        Field("Confidence", confidence),
        Field("Reflections", e.get("reflections")),
    ]
    if e.get("observations") is not None:
        fields.append(Field("Observations", e["observations"]))
    if source_refl:
        fields.append(Field("Source reflections", source_refl))
    fields.append(Field("Entry form", {"A": "A (## heading and bullets)",
                                       "B": "B (**Title:** fields)"}.get(e.get("form") or "",
                                                                         e.get("form"))))
    tags = tuple(t for t in (e["file"], e.get("category"), e.get("confidence"))
                 if t in LEDGER_FILES or t in CATEGORIES or t in CONFIDENCES)
    return LedgerEntryPage(
        path=path, title=_entry_title(e), tags=tags,
        entry_id=e["entry_id"], fields=fields, problems=list(e.get("problems") or []),
        context=e.get("context"), pattern=e.get("pattern"), evidence=e.get("evidence"),
        related=e.get("related"), related_entries=[Ref(text, to) for text, to in related],
        source=f"{source}:{e.get('line')}" if e.get("line") else source, history=history)


def _date_ord(value: Any) -> int:
    day = day_of(value)
    return day.toordinal() if day else 0


def _norm_title(title: str) -> str:
    import unicodedata

    return " ".join(unicodedata.normalize("NFC", title).casefold().split())


def _related_ids(related: str | None, by_title: dict[str, list[str]], self_id: str) -> list[str]:
    """Entries the Related text names, by quoted title ("..." or '...') or by whole line."""
    if not related:
        return []
    import re

    found: list[str] = []
    seen: set[str] = {self_id}  # a set: one Related text may name thousands of entries
    candidates = re.findall(r"'([^'\n]{3,})'|\"([^\"\n]{3,})\"|“([^”\n]{3,})”", related)
    names = [next(g for g in groups if g) for groups in candidates]
    names += [ln.strip(" -*\t") for ln in related.splitlines()]
    for name in names:
        for eid in by_title.get(_norm_title(name), []):
            if eid not in seen:
                seen.add(eid)
                found.append(eid)
    return found


# --------------------------------------------------------------------------- slop

def _slop_ref(d: SiteData, s: dict[str, Any]) -> Ref:
    return Ref(_slop_title(s), d.slop_path[s["position"]])


def _dim_path(dim: str, value: Any) -> str:
    return f"slop/{dim}/{_value_slug(dim, value)}.md"


@dataclass(frozen=True)
class SlopMatrix:
    """Slop entries counted by bucket and severity: the one table of the site's home and slop
    pages and the handoff's debt section. Rows: CodeSmith's buckets in its order, then any
    others (sorted, no bucket last); columns: its five severities, then any other an entry
    has (so every entry is in a column and each row's cells add up to its total)."""

    buckets: list[Any]
    severities: list[Any]
    counts: Counter[tuple[Any, Any]]

    def total(self, bucket: Any) -> int:
        return sum(self.counts[(bucket, v)] for v in self.severities)


def slop_matrix(entries: Iterable[dict[str, Any]]) -> SlopMatrix:
    """``entries`` (slop rows: ``bucket``, ``severity``) as a :class:`SlopMatrix`; an empty
    value is none (``[???]``), as a missing one."""
    counts: Counter[tuple[Any, Any]] = Counter((s.get("bucket") or None, s.get("severity") or None)
                                               for s in entries)
    return SlopMatrix(
        buckets=_ordered({b for b, _ in counts}, SLOP_BUCKETS),
        severities=_ordered({v for _, v in counts} | set(SLOP_SEVERITIES), SLOP_SEVERITIES),
        counts=counts)


def _slop_matrix(d: SiteData, entries: list[dict[str, Any]], charts: list[ChartSpec],
                 chart_name: str) -> tuple[Table, str | None]:
    m = slop_matrix(entries)
    counts, buckets, sevs = m.counts, m.buckets, m.severities
    rows = []
    for b in buckets:
        cells = [counts[(b, v)] for v in sevs]
        rows.append((Ref(_shown(b), _dim_path("bucket", b)),
                     *(Ref(str(n), _dim_path("bucket", b)) if n else 0 for n in cells),
                     sum(cells)))
    table = Table(("Bucket", *(_shown(v) for v in sevs), "Total"), rows,
                  empty="No open slop.", key="Total")
    chart = None
    if entries and any(c.name == chart_name for c in charts):
        return table, chart_name
    if entries:
        chart = chart_name
        charts.append(ChartSpec(
            name=chart, title="Open slop by bucket and severity",
            labels=tuple(_shown(b) for b in buckets),
            series=tuple(Series(_shown(v), tuple(counts[(b, v)] for b in buckets),
                                SEVERITY_COLORS.get(v, "#607d8b")) for v in sevs),
            horizontal=True, ylabel="entries"))
    return table, chart


def _slop_pages(d: SiteData, charts: list[ChartSpec]
                ) -> list[Page | Deferred]:
    pages: list[Page | Deferred] = []
    open_slop = open_slop_entries(d)
    matrix, chart = _slop_matrix(d, open_slop, charts, "slop-open")
    statuses = _count_by(d.slop, "status")
    status_tbl = Table(("Status", "Entries"), [
        (Ref(_shown(s), _dim_path("status", s)), statuses[s])
        for s in _ordered(statuses, SLOP_STATUSES)])
    pages.append(SlopOverviewPage(
        path="slop/index.md", title="Slop ledger", nav=("Slop", "Overview"),
        intro="What the agent left behind: compatibility shims, dead code, naming drift... "
              + SHARED_SLOP,
        total=len(d.slop), open_total=len(open_slop), matrix=matrix, statuses=status_tbl,
        chart=chart))

    def age(s: dict[str, Any]) -> int | None:
        day = day_of(s.get("created_at"))
        return (d.today - day).days if day else None

    rows: dict[int, tuple[Any, ...]] = {}  # id(entry) -> its row, the same in every listing

    def row(s: dict[str, Any]) -> tuple[Any, ...]:
        made = rows.get(id(s))
        if made is None:
            made = rows[id(s)] = (
                _slop_ref(d, s), _value_ref("bucket", s.get("bucket")),
                _value_ref("severity", s.get("severity")), s.get("confidence"),
                _value_ref("status", s.get("status")),
                _value_ref("owner", s["owner"]) if s.get("owner") else None, age(s))
        return made

    def listing(entries: list[dict[str, Any]]) -> Table:
        return Table(("Entry", "Bucket", "Severity", "Confidence", "Status", "Owner",
                      "Age (days)"), [row(s) for s in entries], empty="No entries.")

    sev_rank: dict[str | None, int] = {v: i for i, v in enumerate(SLOP_SEVERITIES)}
    ranks = {id(s): (s.get("status") not in OPEN_STATUSES,
                       sev_rank.get(s.get("severity"), 9), s.get("created_at") or "", s["id"])
             for s in d.slop}

    def order(s: dict[str, Any]) -> tuple[Any, ...]:
        return ranks[id(s)]

    labels = {"bucket": ("Bucket", "By bucket", SLOP_BUCKETS),
              "severity": ("Severity", "By severity", SLOP_SEVERITIES),
              "status": ("Status", "By status", SLOP_STATUSES),
              "owner": ("Owner", "By owner", ())}
    # an entry's value as the pages group it: for an owner, its group (owner_groups), as
    # `slop query --owner` matches it
    from toolkit.slop_ops import owner_groups

    owners = owner_groups(s.get("owner") for s in d.slop)
    for dim, (label, nav_label, known) in labels.items():
        def value(s: dict[str, Any], dim: str = dim) -> Any:
            v = s.get(dim)
            return owners.get(v, v) if dim == "owner" and isinstance(v, str) else v

        counts = Counter(map(value, d.slop))
        open_counts = Counter(map(value, open_slop))
        values = _ordered(counts, known)
        pages.append(GroupIndexPage(
            path=f"slop/{dim}/index.md", title=f"Slop {nav_label.lower()}",
            nav=("Slop", nav_label), search=False,
            table=Table((label, "Entries", "Open"), [
                (Ref(_shown(v), _dim_path(dim, v)), counts[v], open_counts[v]) for v in values],
                empty="No entries.")))
        groups: dict[Any, list[dict[str, Any]]] = {}
        for s in d.slop:
            groups.setdefault(value(s), []).append(s)
        for v in values:
            entries = sorted(groups.get(v, ()), key=order)
            pages.append(ListPage(
                path=_dim_path(dim, v), title=f"Slop {label.lower()}: {_shown(v)}", search=False,
                intro="Open entries first, then by severity, oldest first.",
                table=listing(entries), up=Ref(f"Slop {nav_label.lower()}",
                                                f"slop/{dim}/index.md")))

    bands: Counter[str] = Counter()
    aged = []
    for s in open_slop:
        a = age(s)
        aged.append((a, s))
        for name, lo, hi in AGE_BANDS:
            if a is not None and a >= lo and (hi is None or a <= hi):
                bands[name] += 1
        if a is None:
            bands["unknown"] += 1
        elif a < 0:  # created after the day ages count to (a today setting before the data)
            bands[AFTER_TODAY] += 1
    band_names = ([b[0] for b in AGE_BANDS] + [b for b in (AFTER_TODAY, "unknown") if bands[b]])
    age_chart = None
    if open_slop:
        age_chart = "slop-ageing"
        charts.append(ChartSpec(name=age_chart, title="Open slop by age",
                                labels=tuple(band_names),
                                series=(Series("open entries",
                                               tuple(bands[b] for b in band_names), "#fb8c00"),),
                                ylabel="entries"))
    aged.sort(key=lambda x: (-(x[0] if x[0] is not None else -1), x[1]["id"]))
    pages.append(SlopAgeingPage(
        path="slop/ageing.md", title="Open slop ageing", nav=("Slop", "Open items ageing"),
        search=False, intro=f"Open and in-progress entries by age on {d.today.isoformat()}.",
        bands=Table(("Age", "Open entries"), [(b, bands[b]) for b in band_names]),
        items=listing([s for _, s in aged]), chart=age_chart))

    dispatch_tasks = set(d.task_slug)
    for s in d.slop:
        task = s.get("task_id")
        path = d.slop_path[s["position"]]
        pages.append(Deferred(path, _slop_entry_page, (
            path, RowRef(queries.site_slop_rows, s["position"], s["digest"]),
            _value_ref("bucket", s.get("bucket")),
            _value_ref("severity", s.get("severity")),
            _value_ref("owner", s["owner"]) if s.get("owner") else "none",
            _value_ref("status", s.get("status")),
            (Ref(task, task_path(d.task_slug[task])) if task in dispatch_tasks else task)
            if task else "none", d.shown_path(s.get("path")))))
    return pages


def _slop_entry_page(path: str, s: dict[str, Any], bucket: Cell, severity: Cell, owner: Cell,
                     status: Cell, task: Cell, source: str) -> SlopEntryPage:
    """A slop entry's page from its row and its links (a :class:`Deferred` page's maker: it
    reads its arguments only)."""
    fields = [
        Field("ID", s.get("id")),
        Field("Bucket", bucket),
        Field("Severity", severity),
        Field("Confidence", _shown(s.get("confidence"))),
        Field("Owner", owner),
        Field("Status", status),
        Field("Created", s.get("created_at") or s.get("created_at_raw") or "[???]"),
        Field("Updated", s.get("updated_at") or s.get("updated_at_raw") or "[???]"),
        Field("Task", task),
        Field("Thread", s.get("thread_id") or "none"),
    ]
    extra = []
    if s.get("extra"):
        try:
            parsed = json.loads(s["extra"])
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            extra = [Field(str(k), json.dumps(v, ensure_ascii=False, sort_keys=True))
                     for k, v in sorted(parsed.items())]
    tags = tuple(t for t in (s.get("bucket"), s.get("severity"), s.get("status"))
                 if t in SLOP_BUCKETS or t in SLOP_SEVERITIES or t in SLOP_STATUSES)
    return SlopEntryPage(
        path=path, title=_slop_title(s), tags=tags, slop_id=s["id"],
        fields=fields, sources=[_maybe_url(x) for x in (s.get("source_links") or [])],
        description=s.get("description"), cleanup=s.get("cleanup_recommendation"),
        extra=extra, problems=list(s.get("problems") or []),
        source=f"{source}:{s.get('line')}" if s.get("line") else source)


def _maybe_url(text: str) -> Cell:
    t = (text or "").strip()
    if t.lower().startswith(("http://", "https://")):
        return Url(t)
    return text


# --------------------------------------------------------------------------- audit

def site_tiers(store: Store, found: Mapping[Any, int] | None = None) -> list[Any]:
    """The tiers the site's tables of actions have a column for (the home page's week, the
    audit page's days, projects and categories): nagi-ledger's three, then any other an
    action of the site's scope has (a DB written by hand: 3, or none for text). ``found``:
    the site's actions by tier, all time, when the caller has them already."""
    if found is None:
        found = queries.site_actions_by_tier_since(store, None)
    return _ordered(set(found) | set(AUDIT_TIERS), AUDIT_TIERS)


def _tier_column(tier: Any) -> str:
    return f"Tier {_shown(tier)}"


def _tier_name(tier: Any) -> str:
    return TIER_NAMES.get(tier, f"tier {_shown(tier)}")


def _task_ref(d: SiteData, task: str | None) -> Cell:
    if task is None:
        return "[???]"
    slug = d.task_slug.get(task)
    return Ref(task, task_path(slug)) if slug else task


def _audit_pages(store: Store, d: SiteData, charts: list[ChartSpec]) -> list[Page]:
    pages: list[Page] = []
    since = d.today - dt.timedelta(days=STATS_DAYS - 1)
    day_tier = d.day_tier
    all_tiers = queries.site_actions_by_tier_since(store, None)
    week = actions_this_week(store, d.today)
    month = queries.site_actions_by_tier_since(store, since, d.today)
    tiers = site_tiers(store, all_tiers)
    totals = Table(("Tier", "Last 7 days", f"Last {STATS_DAYS} days", "All time"), [
        (_tier_name(t), week.get(t, 0), month.get(t, 0), all_tiers.get(t, 0))
        for t in tiers])
    grid: dict[tuple[str | None, Any], int] = {(day, t): n for day, t, n in day_tier}
    days = [since + dt.timedelta(days=i) for i in range(STATS_DAYS)]
    per_day_rows: list[tuple[Any, ...]] = []
    for day in days:
        cells = [grid.get((day.isoformat(), t), 0) for t in tiers]
        per_day_rows.append((day.isoformat(), *cells, sum(cells)))
    per_day_chart = None
    if any(r[-1] for r in per_day_rows):
        per_day_chart = "audit-per-day"
        charts.append(ChartSpec(
            name=per_day_chart, title=f"Actions per day by tier (last {STATS_DAYS} days)",
            labels=tuple(day.isoformat() for day in days), time=True,
            series=tuple(Series(_tier_name(t),
                                tuple(r[1 + i] for r in per_day_rows),
                                TIER_COLORS.get(t, "#607d8b")) for i, t in enumerate(tiers)),
            ylabel="actions"))
    cat_tier = queries.site_actions_by_category_tier(store)
    cats: dict[Any, Counter[Any]] = defaultdict(Counter)
    for c, t, n in cat_tier:
        cats[c][t] += n
    cat_order = sorted(cats, key=lambda c: (-sum(cats[c].values()), str(c)))
    per_cat = Table(("Category", *(_tier_column(t) for t in tiers), "Total"), [
        (_shown(c), *(cats[c][t] for t in tiers), sum(cats[c].values())) for c in cat_order],
        empty="No actions recorded.", key="Total")
    per_cat_chart = None
    if cat_order:
        per_cat_chart = "audit-per-category"
        top = cat_order[:15]
        charts.append(ChartSpec(
            name=per_cat_chart, title="Actions per category by tier (top 15, all time)",
            labels=tuple(_shown(c) for c in top),
            series=tuple(Series(_tier_name(t), tuple(cats[c][t] for c in top),
                                TIER_COLORS.get(t, "#607d8b")) for t in tiers),
            horizontal=True, ylabel="actions"))
    by_project: dict[Any, Counter[Any]] = defaultdict(Counter)
    for p, t, n in queries.site_actions_by_project_tier(store):
        by_project[p][t] += n
    per_project = Table(("Project", *(_tier_column(t) for t in tiers), "Total"), [
        (NO_PROJECT if p is None else p, *(by_project[p][t] for t in tiers),
         sum(by_project[p].values()))
        for p in sorted(by_project, key=lambda p: (p is None, -sum(by_project[p].values()),
                                                   str(p)))],
        empty="No actions recorded.")
    verdicts = Counter(x.get("verdict") or "PENDING" for x in d.dispatches)
    verdict_tbl = Table(("Verdict", "Dispatches"), [
        (Ref(v, "audit/dispatches.md#pending-verification") if v == "PENDING" else v,
         verdicts[v]) for v in (*AUDIT_VERDICTS, "PENDING")])
    pages.append(AuditStatsPage(
        path="audit/index.md", title="Audit stats", nav=("Audit", "Stats by tier"),
        intro="What the agent did (nagi-ledger): autonomous actions by tier and category, "
              "dispatch verdicts. " + scope_note(d) + " " + SHARED_AUDIT,
        totals=totals, per_project=per_project,
        per_day=Table(("Day", *(_tier_column(t) for t in tiers), "Total"), per_day_rows,
                      key="Total"),
        per_day_chart=per_day_chart, per_category=per_cat, per_category_chart=per_cat_chart,
        verdicts=verdict_tbl, days=STATS_DAYS))

    # dispatch report
    def ref(task: str | None) -> Cell:
        return _task_ref(d, task)

    ordered_tasks = sorted(d.tasks, key=_task_order)
    pages.append(DispatchReportPage(
        path="audit/dispatches.md", title="Dispatch report", nav=("Audit", "Dispatch report"),
        intro="Subagent dispatches per task: retries, verdicts, and what still waits for "
              "verification. " + SHARED_AUDIT,
        over_limit=over_limit_table(d.tasks, ref, wide=True),
        pending=pending_table(pending_dispatches(d.dispatches), ref, wide=True),
        tasks=Table(TASK_COLUMNS, [_task_row(t, ref) for t in ordered_tasks],
                    empty="No dispatches recorded.", key="Last dispatch"),
        retry_limit=RETRY_LIMIT))

    # approaches
    appr_by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in d.approaches:
        appr_by_task[a["task"]].append(a)
    summary_rows = []
    for task in sorted(appr_by_task, key=str):
        outcomes = Counter(a["outcome"] for a in appr_by_task[task])
        summary_rows.append((_task_ref(d, task), outcomes["DEAD_END"], outcomes["NO_GO"],
                             outcomes["WORKS"],
                             max(a["ts"] or "" for a in appr_by_task[task])))
    newest = sorted(d.approaches, key=lambda a: -a["id"])

    def outcome_table(outcome: str, empty: str) -> Table:
        rows = [(_task_ref(d, a["task"]), a["approach"], a["reason"], a["ts"])
                for a in newest if a["outcome"] == outcome][:LIST_LIMIT]
        return Table(("Task", "Approach", "Why", "When"), rows, empty=empty)

    pages.append(ApproachesPage(
        path="audit/approaches.md", title="Approaches per task", nav=("Audit", "Approaches"),
        intro="Approaches tried or ruled out per task: dead ends (tried and failed), no-gos "
              "(decided against without trying) and what works. " + SHARED_AUDIT,
        summary=Table(("Task", "Dead ends", "No-gos", "Works", "Latest"), summary_rows,
                      empty="No approaches recorded."),
        dead_ends=outcome_table("DEAD_END", "No dead ends recorded."),
        no_gos=outcome_table("NO_GO", "No no-gos recorded."),
        works=outcome_table("WORKS", "Nothing recorded as working yet."), limit=LIST_LIMIT))

    # tasks
    status_of = {t["task"]: t for t in d.tasks}
    disp_by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for x in d.dispatches:
        disp_by_task[x["task"]].append(x)
    slop_by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in d.slop:
        if s.get("task_id"):
            slop_by_task[s["task_id"]].append(s)
    index_rows = []
    for task, slug in sorted(d.task_slug.items(), key=lambda kv: kv[1]):
        st = status_of.get(task, {})
        approaches = appr_by_task.get(task, [])
        index_rows.append((Ref(task, task_path(slug)), st.get("dispatch_count", 0),
                           st.get("retry_count", 0), st.get("last_verdict") or
                           ("PENDING" if st else ""), "over" if st.get("over_retry_limit") else "",
                           len(approaches)))
        oc = defaultdict(list)
        for a in sorted(approaches, key=lambda a: -a["id"]):
            oc[a["outcome"]].append((a["approach"], a["reason"], a["ts"]))
        fields = [Field("Dispatches", st.get("dispatch_count", 0)),
                  Field("Retries", st.get("retry_count", 0)),
                  Field("Last verdict", st.get("last_verdict") or ("PENDING" if st else "none")),
                  Field("Pending verification", st.get("pending", 0)),
                  Field("Over the retry limit", _yes(st.get("over_retry_limit"))),
                  Field("First dispatch", st.get("first_dispatch") or "none"),
                  Field("Last dispatch", st.get("last_dispatch") or "none"),
                  Field("Approaches", len(approaches))]
        dcols = ("Dispatch", "When", "Agent", "Model", "Brief", "Verdict", "Verdict at", "Notes")
        pages.append(TaskPage(
            path=task_path(slug), title=f"Task: {task}", task=task, fields=fields,
            dispatches=Table(dcols, [
                (x["id"], x["ts"], x["agent_type"], x["model"], x["brief_summary"],
                 x.get("verdict") or "PENDING", x.get("verdict_ts"), x.get("verdict_notes"))
                for x in disp_by_task.get(task, [])], empty="No dispatches for this task."),
            dead_ends=Table(("Approach", "Why", "When"), oc["DEAD_END"], empty="None."),
            no_gos=Table(("Approach", "Why", "When"), oc["NO_GO"], empty="None."),
            works=Table(("Approach", "Why", "When"), oc["WORKS"], empty="None."),
            slop=Table(("Slop entry", "Bucket", "Severity", "Status"), [
                (_slop_ref(d, s), s.get("bucket"), s.get("severity"), s.get("status"))
                for s in slop_by_task.get(task, [])], empty="None.")))
    pages.append(GroupIndexPage(
        path="audit/tasks/index.md", title="Tasks", nav=("Audit", "Tasks"), search=False,
        intro="Every task with dispatches or approaches; each page ties them together. "
              + SHARED_AUDIT,
        table=Table(("Task", "Dispatches", "Retries", "Last verdict", "Retry limit",
                     "Approaches"), index_rows, empty="No tasks recorded.")))

    # recent actions, paged
    total = queries.site_action_count(store)
    recent = queries.site_recent_actions(store, RECENT_ACTIONS)
    chunks = [recent[i:i + ACTIONS_PER_PAGE] for i in range(0, len(recent), ACTIONS_PER_PAGE)]
    chunks = chunks or [[]]
    paths = ["audit/actions/index.md"] + [f"audit/actions/{n}.md"
                                          for n in range(2, len(chunks) + 1)]
    refs = [Ref(str(n + 1), p) for n, p in enumerate(paths)]
    for n, rows in enumerate(chunks):
        pages.append(ActionsPage(
            path=paths[n], title="Recent actions" + (f" (page {n + 1})" if n else ""),
            nav=("Audit", "Recent actions") if n == 0 else None, search=False,
            intro=scope_note(d),
            table=Table(("ID", "When", "Tier", "Category", "Project", "Description"), [
                (a["id"], a["ts"], a["tier"], a["category"],
                 (a["project"] or "").strip() or NO_PROJECT, a["description"])
                for a in rows], empty="No actions recorded."),
            page_no=n + 1, pages=refs, previous=refs[n - 1] if n else None,
            next=refs[n + 1] if n + 1 < len(refs) else None, shown=len(recent), total=total))
    return pages


# --------------------------------------------------------------------------- what needs attention
# The pending and over-the-retry-limit tables: built here once, shown by the dashboard, the
# dispatch report and the handoff (``toolkit.handoff`` renders the same ``Table`` for GitHub).

TASK_COLUMNS = ("Task", "Dispatches", "Retries", "Confirmed", "Refuted", "Partial", "Pending",
                "Last verdict", "Retry limit", "Last dispatch")


def pending_dispatches(dispatches: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dispatches with no verdict yet, newest first (``queries.site_dispatches`` rows)."""
    return sorted((x for x in dispatches if x.get("verdict") is None), key=lambda x: -x["id"])


def pending_table(pending: Sequence[dict[str, Any]], task_ref: Callable[[str | None], Cell], *,
                  limit: int | None = None, wide: bool = True) -> Table:
    """The dispatches waiting for a verdict (from :func:`pending_dispatches`), the first
    ``limit``; ``wide`` adds the model and the brief."""
    rows = list(pending)[:limit]
    empty = "No dispatch is waiting for a verdict."
    if wide:
        return Table(("Dispatch", "When", "Task", "Agent", "Model", "Brief"), [
            (x["id"], x["ts"], task_ref(x["task"]), x["agent_type"], x["model"],
             x["brief_summary"]) for x in rows], empty=empty)
    return Table(("Dispatch", "When", "Task", "Agent"), [
        (x["id"], x["ts"], task_ref(x["task"]), f"{x['agent_type']}/{x['model']}")
        for x in rows], empty=empty)


def _task_order(t: dict[str, Any]) -> tuple[Any, ...]:
    # over the limit first, then those waiting for verification, then the newest dispatch
    return (not t.get("over_retry_limit"), -(t.get("pending") or 0), _neg(t.get("last_dispatch")),
            t["task"])


def over_limit_tasks(tasks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``task_status`` rows over nagi-ledger's retry limit, in the order every page shows them:
    those waiting for verification first, then the most recently dispatched."""
    return sorted((t for t in tasks if t.get("over_retry_limit")), key=_task_order)


def _task_row(t: dict[str, Any], task_ref: Callable[[str | None], Cell]) -> tuple[Any, ...]:
    return (task_ref(t["task"]), t["dispatch_count"], t["retry_count"], t.get("confirmed"),
            t.get("refuted"), t.get("partial"), t.get("pending"),
            t.get("last_verdict") or "PENDING", "over" if t.get("over_retry_limit") else "",
            t.get("last_dispatch"))


def over_limit_table(tasks: Iterable[dict[str, Any]], task_ref: Callable[[str | None], Cell], *,
                     wide: bool = True) -> Table:
    """The tasks over the retry limit (``task_status`` rows, filtered and ordered by
    :func:`over_limit_tasks`); ``wide`` adds the verdict counts."""
    over = over_limit_tasks(tasks)
    empty = "No task is over the retry limit."
    if wide:
        return Table(TASK_COLUMNS, [_task_row(t, task_ref) for t in over], empty=empty,
                     key="Last dispatch")
    return Table(("Task", "Dispatches", "Retries", "Last verdict", "Last dispatch"), [
        (task_ref(t["task"]), t["dispatch_count"], t["retry_count"],
         t.get("last_verdict") or "PENDING", t.get("last_dispatch")) for t in over], empty=empty,
        key="Last dispatch")


def _neg(ts: Any) -> str:
    """Sort key putting newer timestamps first (string inversion)."""
    return "".join(chr(0x10FFFF - ord(ch)) for ch in str(ts or ""))


# --------------------------------------------------------------------------- sessions

def _session_pages(d: SiteData) -> list[Page]:
    pages: list[Page] = []
    names = [s["name"] for s in d.sessions]
    slugs = dict(zip(names, unique_slugs([n.removesuffix(".md") if n else n for n in names],
                                         fallback="session"), strict=True))
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in d.events:
        events[ev["session"]].append(ev)
    rows = []
    for s in d.sessions:
        path = f"sessions/{slugs[s['name']]}.md"
        rows.append((Ref(s["name"], path), s.get("session_start"), s.get("ended"),
                     s.get("author"), s.get("branch"), s.get("status"), s.get("events"),
                     len(s.get("problems") or [])))
        evs = events.get(s["name"], [])
        texts = []
        for ev in evs:
            if ev.get("body") and ev.get("kind") not in ("metric", "file_change"):
                texts.append((f"[{ev.get('time') or ''}] {ev.get('kind')}", ev["body"]))
        source = display_path(s.get("path"), d.roots)
        pages.append(SessionPage(
            path=path, title=f"Session {s['name']}",
            fields=[Field("Started", s.get("session_start") or "[???]"),
                    Field("Ended", s.get("ended") or "not recorded"),
                    Field("Project", s.get("project")), Field("Branch", s.get("branch")),
                    Field("Author", s.get("author") or "none (legacy log)"),
                    Field("Status", s.get("status")), Field("Events", s.get("events")),
                    Field("Source", source)],
            problems=list(s.get("problems") or []),
            events=Table(("#", "Time", "Kind", "What", "Tool", "Target", "Tokens"), [
                (ev.get("seq"), ev.get("time"), ev.get("kind"), ev.get("title"), ev.get("tool"),
                 ev.get("target"), ev.get("tokens_total")) for ev in evs],
                empty="No events in this log."),
            texts=texts))
    pages.insert(0, SessionsPage(
        path="sessions/index.md", title="Sessions", nav=("Sessions",), search=False,
        intro="Smith vault session logs, oldest first.",
        table=Table(("Session", "Started", "Ended", "Author", "Branch", "Status", "Events",
                     "Problems"), rows, empty="No session logs found.")))
    return pages


# --------------------------------------------------------------------------- snapshots

def _snapshots_page(d: SiteData) -> list[Page]:
    """The snapshots overview (the latest snapshots, a table of turns) and a page per turn."""
    snaps = sorted(d.snapshots, key=lambda s: (str(s.get("repo")), s.get("position") or 0))
    files_by_sha: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for f in d.snapshot_files:
        files_by_sha[(f.get("repo"), f.get("sha"))].append(f)
    turn_files: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for f in d.turn_files:
        turn_files[(f.get("repo"), f.get("turn_key"))].append(f)
    # turns, oldest first: consecutive snapshots sharing a turn key (or turn number)
    groups: list[tuple[Any, list[dict[str, Any]]]] = []
    for s in reversed(snaps):
        key = s.get("turn_key") or (f"turn:{s['turn']}" if s.get("turn") is not None else None)
        if key is None:
            key = f"snapshot:{s.get('sha')}"
        if groups and groups[-1][0] == (s.get("repo"), key):
            groups[-1][1].append(s)
        else:
            groups.append(((s.get("repo"), key), [s]))
    turns = []
    used_anchors: set[str] = set()
    for (repo, key), members in groups:  # oldest first: a new turn leaves older paths alone
        turn_no = next((m.get("turn") for m in members if m.get("turn") is not None), None)
        label = (f"Turn {turn_no}" if turn_no is not None
                 else f"Snapshot #{members[0].get('position')}")
        anchor = slugify(label, fallback="turn")
        base, n = anchor, 1
        while anchor in used_anchors:
            n += 1
            anchor = f"{base}-{n}"
        used_anchors.add(anchor)
        if turn_files.get((repo, key)):
            files = turn_files[(repo, key)]
        else:
            merged: dict[str, dict[str, Any]] = {}
            for m in members:
                if m.get("kind") == "pre-turn":
                    continue
                for f in files_by_sha.get((repo, m.get("sha")), []):
                    merged[f["path"]] = f
            files = [merged[p] for p in sorted(merged)]
        snippet = next((m.get("snippet") for m in members if m.get("snippet")), None)
        extra = d.turn_activity.get((repo, key))  # history feature
        turns.append(TurnView(
            label=label, anchor=anchor, snippet=snippet,
            summary=extra.summary if extra else None, activity=extra.activity if extra else None,
            snapshots=Table(("#", "Kind", "When", "Commit", "Label", "Files", "+", "-"), [
                (m.get("position"), m.get("kind"), _fmt_ts(m.get("ts")),
                 (m.get("sha") or "")[:8], m.get("label"), m.get("files_changed"),
                 m.get("lines_added"), m.get("lines_deleted")) for m in members]),
            files=Table(("File", "Status", "+", "-"), [
                (f.get("path"), f.get("status"), f.get("added"), f.get("deleted"))
                for f in sorted(files, key=lambda f: str(f.get("path")))],
                empty="No file changed."),
            path=f"snapshots/turns/{anchor}.md",
            shas=tuple(str(m.get("sha")) for m in members), turn=turn_no))
    turns.reverse()  # newest first
    latest = Table(("#", "When", "Label", "Files changed"), [
        (s.get("position"), _fmt_ts(s.get("ts")), s.get("label"), s.get("files_changed"))
        for s in snaps[:10]], empty="No turn snapshots found for this workspace.")
    table = Table(("Turn", "Prompt", "When", "Snapshots", "Files", "+", "-"), [
        (Ref(t.label, t.path), t.snippet, t.snapshots.rows[0][2], len(t.snapshots.rows),
         len(t.files.rows), sum(r[2] or 0 for r in t.files.rows),
         sum(r[3] or 0 for r in t.files.rows)) for t in turns],
        empty="No turn snapshots found for this workspace.")
    pages: list[Page] = [SnapshotsPage(
        path="snapshots/index.md", title="Turn snapshots", nav=("Snapshots",),
        intro="CodeSmith's pre-turn and post-turn snapshots of the workspace, newest turn "
              "first; each turn's page shows its prompt, the files it changed with the diff, "
              "and the audit actions logged during it.",
        turns=turns, latest=latest, total=len(snaps), table=table, wide=True)]
    pages += [TurnPage(path=t.path, title=t.label, turn=t, wide=True,
                       intro="One agent turn: its prompt, its snapshots, the files it changed "
                             "and their diff, and the audit actions logged during it.")
              for t in turns]
    return pages


# --------------------------------------------------------------------------- warnings

def _warnings_page(d: SiteData) -> WarningsPage:
    from toolkit.mdsafe import inline

    return WarningsPage(
        path="warnings.md", title="Warnings", nav=("Warnings",), search=False,
        # the one line each source the store could not read gets (its text is the source's)
        intro="".join(f"**Warning:** {inline(m)}\n\n" for m in d.stale)
              + "Problems found while reading the sources, with file and line. Nothing was "
              "dropped: malformed entries are kept and shown with [???].",
        table=Table(("Source", "File", "Line", "Problem"), [
            (p.source, display_path(p.path, d.roots) if p.path and p.path.startswith("/")
             else p.path, p.line, p.message) for p in d.problems], empty="No warnings."))
