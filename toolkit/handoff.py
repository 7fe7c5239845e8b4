"""The handoff report: what the next person (or agent) must know, as redacted Markdown.

``build_report(store, cfg)`` runs the named queries (``toolkit.queries``) and returns a typed
:class:`HandoffReport`. :func:`sections` renders it most urgent first: a short summary, the
active goal, the checks that fail (:func:`_check_sections`, when the caller ran them), dispatches
awaiting a verdict, tasks over the retry limit each with its dead ends and no-gos, what the
ledger learned since the last handoff (new, promoted, demoted, removed), then debt (the
bucket-by-severity table and the critical and high items). The pending and over-limit tables
are the site's (``toolkit.reports.pending_table``, ``over_limit_table``). What is not shown
is a link to the built site (:class:`Links`, when ``site_url`` is configured) or counted with
the command that lists it; :func:`listing_sections` is the complete listing (``--full``).

``render_markdown`` gives ``toolkit handoff`` (and, with ``for_site``, the site's handoff
page); ``render_issue`` an issue title and body that stay under GitHub's limit, and
``render_comments`` the complete listing as comments (``toolkit publish --full``). All redact
every value with ``toolkit.redact`` before it is escaped, so Markdown escapes cannot hide a
secret from the redactor, and escape AI-written text so it renders as literal text (no HTML,
no mentions).

"Since the last handoff": ``.toolkit/handoff-state.json`` remembers the ledger as the last
handoff saw it (confidence per ``entry_id``) and the baseline that handoff compared against.
A handoff whose ledger is unchanged keeps the same baseline, so re-running ``publish`` produces
the same body (and sends nothing); once the ledger changes, the last handoff becomes the new
baseline. The first handoff covers the last ``WINDOW_DAYS`` days of activity; when the state
file knows no handoff, ``publish`` reads the time of the last one from the issue body's hidden
``handoff-at`` line.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from toolkit import mdsafe
from toolkit.config import HANDOFF_STATE
from toolkit.errors import DataError, ToolkitError
from toolkit.textio import split_url

if TYPE_CHECKING:
    from toolkit.checks import Result
    from toolkit.config import Config
    from toolkit.store import Store

STATE_FILE = HANDOFF_STATE
STATE_VERSION = 1
DISPATCH_ROWS = 200  # newest refuted/pending dispatches listed (totals are always exact)
APPROACH_ROWS = 1000
CELL_MAX = 200  # characters of one table cell before it is cut with "…"
SEVERITY_ORDER = ("critical", "high", "medium", "low", "info")
CONFIDENCE_ORDER = ("high", "medium", "low")

Redactor = Callable[[str], str]


# --------------------------------------------------------------------------- site links

def site_link(site_url: str | None, kind: str, key: str = "") -> str | None:
    """The built site's page for one thing, or None when no site URL is configured.

    kinds: ``ledger`` (key: ``ledger_entries.entry_id``), ``slop`` (key: ``short_id``),
    ``task`` (key: the task text; slugged with ``toolkit.slugs.slugify``), ``handoff``, and
    ``page`` (key: a docs path such as ``audit/dispatches.md#pending-verification`` or
    ``data/slop_entries.csv``; see ``toolkit.reports.page_url``).
    The site generator writes pages at these same paths (``toolkit.reports``), except that it
    disambiguates colliding slugs (``-2``; a slop entry's full id), which a link from here
    cannot know.
    """
    if not site_url:
        return None
    parts = split_url(site_url)
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    base = site_url.rstrip("/")
    if kind == "ledger":
        return f"{base}/ledger/{quote(key.strip('/'), safe='/')}/"
    from toolkit.slugs import slugify

    if kind == "slop":
        return f"{base}/slop/{slugify(key, fallback='entry')}/"
    if kind == "task":
        return f"{base}/audit/tasks/{slugify(key, fallback='task')}/"
    if kind == "handoff":
        return f"{base}/handoff/"
    if kind == "page":
        from toolkit.reports import page_url

        path, _, anchor = key.partition("#")
        url = path if not path.endswith(".md") else page_url(path)
        return f"{base}/{quote(url, safe='/')}" + (f"#{quote(anchor)}" if anchor else "")
    raise ValueError(f"unknown site page kind {kind!r}")


# --------------------------------------------------------------------------- Markdown text

def _clip(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters with "…" (one line of a report cell)."""
    if limit is not None and len(text) > limit:
        return text[: limit - 1].rstrip() + "…"
    return text


def md_text(value: Any, limit: int | None = CELL_MAX) -> str:
    """Untrusted text as literal inline Markdown for GitHub (``toolkit.mdsafe.inline``): one
    line, cut to ``limit`` characters with "…"."""
    return mdsafe.inline(_clip(" ".join(("" if value is None else str(value)).split()), limit),
                         github=True)


def md_link(label: str, url: str | None) -> str:
    """``[label](url)`` for an http(s) URL or a relative one (the site's own pages link
    ``../audit/…``), else just the label (already escaped)."""
    parts = split_url(url or "")
    if not url or parts is None:
        return label
    relative = not parts.scheme and not parts.netloc and not url.startswith("/")
    if parts.scheme not in ("http", "https") and not relative:
        return label
    return f"[{label}]({quote(url, safe=':/?#[]@!$&*+,;=%-._~')})"


def md_block(value: Any, limit: int | None = None) -> str:
    """Untrusted multi-line text as literal Markdown paragraphs for GitHub
    (``toolkit.mdsafe.block``), cut to ``limit`` characters with "…"."""
    text = "" if value is None else str(value).replace("\r\n", "\n").replace("\r", "\n")
    return mdsafe.block(_clip(text, limit), github=True)


# --------------------------------------------------------------------------- the report

WINDOW_DAYS = 7  # the first handoff covers the last 7 days of activity
INLINE_ROWS = 10  # items of one list shown before the rest goes into a collapsed block
TASK_APPROACHES = 2  # dead ends and no-gos shown under an over-limit task (the rest: its page)
# critical and high open slop items the site's handoff page lists (the rest: a note linking to
# the slop pages and the download), so the page does not grow with the slop ledger
SITE_URGENT_ROWS = 100
# buckets in the debt table (the ones with the most open items; the rest summed in one row),
# so neither the report nor the site's handoff page grows with the number of distinct buckets
BUCKET_ROWS = 30
STATE_SHOWN = ".toolkit/handoff-state.json"


@dataclass(frozen=True)
class Since:
    """What "since the last handoff" means for one report.

    ``kind``: ``window`` (no earlier handoff: the ``WINDOW_DAYS`` days of activity up to
    ``until``, the newest record), ``date`` (``--since``), ``state`` (the last handoff, from
    the state file) or ``issue`` (the last published handoff, read from the issue: ``source``).
    """

    kind: str
    at: str | None  # a date, or "YYYY-MM-DD HH:MM UTC" for a handoff
    until: str | None = None
    source: str | None = None

    def describe(self) -> str:
        if self.kind == "window":
            return (f"in the {WINDOW_DAYS} days to {self.until}" if self.until
                    else "since the start")
        if self.kind == "date":
            return f"since {self.at}"
        return f"since the handoff of {self.at}"

    def origin(self) -> str:
        """Which handoff (or window) the comparison is with, and where that was read."""
        if self.kind == "window":
            return (f"this is the first handoff: the last {WINDOW_DAYS} days of activity; "
                    "`--since` sets another window")
        if self.kind == "date":
            return "`--since`"
        if self.kind == "state":
            return f"the last handoff, from {STATE_SHOWN}"
        return f"the last published handoff, read from {self.source or 'the issue'}"


CHANGE_LABELS = {"promoted": "Promoted", "demoted": "Demoted", "new": "New",
                 "reinforced": "Reinforced", "new or reinforced": "New or reinforced",
                 "removed": "Removed"}


@dataclass(frozen=True)
class LedgerChange:
    entry_id: str
    file: str
    title: str | None
    confidence: str | None
    change: str  # a key of CHANGE_LABELS
    old_confidence: str | None = None
    date: str | None = None

    @property
    def change_text(self) -> str:
        if self.change in ("promoted", "demoted"):
            return f"{self.old_confidence or '?'} → {self.confidence or '?'}"
        return self.change


@dataclass
class HandoffReport:
    """Everything one handoff shows, before rendering. Values are raw (not yet redacted)."""

    project: str
    key: str
    since: Since
    site_url: str | None
    slop: list[dict[str, Any]]  # open and in-progress, by bucket then severity
    ledger: list[LedgerChange]
    dispatches: list[dict[str, Any]]  # refuted first, then pending; newest first
    refuted_total: int
    pending: list[dict[str, Any]]  # awaiting a verdict (reports.pending_dispatches)
    tasks: list[dict[str, Any]]  # task_status rows (reports.over_limit_tasks picks)
    # (task, dead ends and no-gos): the newest APPROACH_ROWS, the task with the newest first
    approaches: list[tuple[str, list[dict[str, Any]]]]
    approaches_total: int
    state_path: Path
    next_state: dict[str, Any] = field(repr=False, default_factory=dict)
    # each over-limit task's count of dead ends and no-gos and its newest TASK_APPROACHES
    # (queries.handoff_task_dead_ends), and (approaches, tasks) of the tasks under the limit
    over_approaches: dict[str, tuple[int, list[dict[str, Any]]]] = field(default_factory=dict)
    other_approaches: tuple[int, int] = (0, 0)
    goal: dict[str, Any] | None = None  # nagi-ledger's active goal (a ``goals`` row)
    # toolkit.checks results, run by the caller before the store was opened for writing
    # (toolkit.checks.run_configured); None: not run, no section
    checks: list[Result] | None = None
    root: Path | None = None  # the project folder (check rows show paths from it)
    # sources the store could not read at its last load (Store.stale_sources' messages)
    stale: list[str] = field(default_factory=list)

    @property
    def pending_total(self) -> int:
        return len(self.pending)

    @property
    def over_limit(self) -> list[dict[str, Any]]:
        from toolkit.reports import over_limit_tasks

        return over_limit_tasks(self.tasks)

    @property
    def as_of(self) -> str | None:
        """The newest timestamp among the records shown: stable while the data is."""
        return _newest(self.slop, self.dispatches, self.approaches,
                       [c.date for c in self.ledger if c.date])


def _newest(slop: list[dict[str, Any]], dispatches: list[dict[str, Any]],
            approaches: list[tuple[str, list[dict[str, Any]]]], dates: list[str]
            ) -> str | None:
    stamps: list[str] = []
    stamps += [str(r["updated_at"]) for r in slop if r.get("updated_at")]
    stamps += [str(r["ts"]) for r in dispatches if r.get("ts")]
    stamps += [str(r["verdict_ts"]) for r in dispatches if r.get("verdict_ts")]
    stamps += [str(a["ts"]) for _, rows in approaches for a in rows if a.get("ts")]
    stamps += dates
    # Sources write "YYYY-MM-DD HH:MM:SS" (UTC) or RFC 3339 with an offset (CodeSmith's
    # "…T…+00:00", or another offset by hand): compare them alike, as UTC text
    return max(_utc_text(x) for x in stamps)[:16] if stamps else None


def _utc_text(stamp: str) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in UTC for a time with or without an offset (without: UTC);
    anything else (a ledger Date) as written, to 19 characters."""
    from toolkit.slop_ops import parse_timestamp

    when = parse_timestamp(stamp)
    if when is None:
        return stamp.replace("T", " ")[:19]
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def project_key(cfg: Config) -> str:
    """Which project a published issue belongs to (the marker): publish.key or the folder."""
    from toolkit.slugs import slugify

    key = cfg.publish.get("key") if isinstance(cfg.publish, dict) else None
    return slugify(str(key)) if key else slugify(cfg.project_root.name, fallback="project")


def _fmt_time(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


def report_clock(cfg: Config, now: dt.datetime | None = None) -> dt.datetime:
    """The report's "now" (naive UTC): ``now`` if given, else the toolkit's clock
    (``toolkit.clock.now``: ``SOURCE_DATE_EPOCH``, else the real time), as the site and
    ``slop export`` use it. It only stamps the state file; the report itself shows the data's
    time. The injected ``today`` is a day for ages, not a time: it does not move this."""
    from toolkit import clock

    if now is not None:
        return now
    return clock.now().replace(tzinfo=None)


def load_state(path: Path) -> dict[str, Any]:
    """The saved handoff state, or an empty one (a damaged file counts as no earlier handoff)."""
    from toolkit.textio import check_json_depth

    try:
        text = path.read_text(encoding="utf-8")
        check_json_depth(text, path)
        data = json.loads(text)
    except (OSError, ValueError, DataError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        return {}
    return data


def has_earlier_handoff(cfg: Config) -> bool:
    """Whether the state file knows any handoff (then ``publish`` does not read the time of
    the last one from the issue: the state file is the better witness)."""
    state = load_state(cfg.state_dir / STATE_FILE)
    return any(isinstance(state.get(k), dict) for k in ("last", "baseline", "previous"))


def build_report(store: Store, cfg: Config, *, since: dt.date | None = None,
                 now: dt.datetime | None = None,
                 previous: tuple[str, str] | None = None,
                 checks: Sequence[Result] | None = None) -> HandoffReport:
    """Run the handoff queries and compare the ledger with the last handoff.

    Which comparison, in order: ``since`` (``--since``); the last handoff in the state file;
    ``previous`` = (time, where it was read), the last published handoff read from the issue
    by ``publish``; else the first handoff's window, the ``WINDOW_DAYS`` days of activity up
    to the newest record. ``checks``: the check results to list (failing ones first in the
    report), from ``toolkit.checks.run_configured``."""
    from toolkit import queries, reports
    from toolkit.reports import day_of

    clock = report_clock(cfg, now)
    state_path = cfg.state_dir / STATE_FILE
    state = load_state(state_path)

    entries = queries.handoff_ledger_entries(store)
    current = {e["entry_id"]: {"confidence": e["confidence"], "title": e["title"],
                               "file": e["file"]} for e in entries if e.get("entry_id")}
    last = state.get("last") if isinstance(state.get("last"), dict) else None
    baseline = state.get("baseline") if isinstance(state.get("baseline"), dict) else None
    if last is not None and _confidences(last.get("ledger")) != _confidences(current):
        baseline = last  # the ledger changed: the last handoff is the new baseline
        last = None
    read_before = state.get("previous") if isinstance(state.get("previous"), dict) else None
    if previous is None and read_before is not None:
        previous = (str(read_before.get("at")), str(read_before.get("source")))
    next_last = last or {"at": _fmt_time(clock), "ledger": current}
    next_state: dict[str, Any] = {"version": STATE_VERSION, "baseline": baseline,
                                  "last": next_last}
    if previous is not None and baseline is None:
        next_state["previous"] = {"at": previous[0], "source": previous[1]}

    dispatches = queries.site_dispatches(store)
    refuted = sorted((x for x in dispatches if x.get("verdict") == "REFUTED"),
                     key=lambda x: -x["id"])
    pending = reports.pending_dispatches(dispatches)
    listing = (refuted + pending)[:DISPATCH_ROWS]
    slop = queries.handoff_open_slop(store)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in queries.handoff_dead_ends(store, limit=APPROACH_ROWS):
        by_task.setdefault(row["task"], []).append(row)
    approaches = list(by_task.items())

    if since is not None:
        since_info = Since("date", since.isoformat())
        ledger = _changes_since_date(entries, since, baseline, store)
    elif baseline is not None:
        since_info = Since("state", str(baseline.get("at")))
        ledger = _changes_since_state(entries, _confidences(baseline.get("ledger")), baseline)
    elif previous is not None and day_of(previous[0]) is not None:
        since_info = Since("issue", previous[0], source=previous[1])
        ledger = _changes_since_date(entries, day_of(previous[0]) or dt.date.min, None, store)
    else:
        newest = _newest(slop, dispatches, approaches,
                         [str(e["date"]) for e in entries if e.get("date")])
        until = day_of(newest) if newest else None
        if until is None:
            since_info, ledger = Since("window", None), []
        else:
            start = until - dt.timedelta(days=WINDOW_DAYS - 1)
            since_info = Since("window", start.isoformat(), until=until.isoformat())
            ledger = _changes_since_date(entries, start, None, store)
    tasks = queries.site_task_status(store)
    over = [t["task"] for t in reports.over_limit_tasks(tasks)]
    over_approaches = queries.handoff_task_dead_ends(store, over, per_task=TASK_APPROACHES)
    other_approaches = queries.handoff_dead_ends_elsewhere(store, over)
    return HandoffReport(
        project=cfg.project_name, key=project_key(cfg), since=since_info,
        site_url=cfg.site_url, slop=slop, ledger=ledger, dispatches=listing,
        refuted_total=len(refuted), pending=pending, tasks=tasks,
        approaches=approaches, over_approaches=over_approaches,
        other_approaches=other_approaches,  # (with the over-limit tasks': every one)
        approaches_total=other_approaches[0] + sum(n for n, _ in over_approaches.values()),
        state_path=state_path, next_state=next_state, goal=_active_goal(store),
        checks=None if checks is None else list(checks), root=cfg.project_root,
        stale=[s.message() for s in store.stale_sources()])


def _active_goal(store: Store) -> dict[str, Any] | None:
    from toolkit.goals import active_goal

    return active_goal(store)


def _goal_line(goal: dict[str, Any], c: _Ctx) -> str:
    """The active goal, its turn budget and when it was set."""
    from toolkit.goals_report import budget

    created = goal.get("created")
    when = (created.strftime("%Y-%m-%d %H:%M UTC") if isinstance(created, dt.datetime)
            else goal.get("created_raw"))
    text = c.t(goal["goal"]) if goal.get("goal") is not None else "(no text)"
    return (f"**Active goal:** {text} ({c.t(budget(goal))}"
            + (f", set {c.t(when)}" if when else "") + ")")


def _confidences(ledger: Any) -> dict[str, Any]:
    if not isinstance(ledger, dict):
        return {}
    return {k: (v.get("confidence") if isinstance(v, dict) else v) for k, v in ledger.items()}


def _rank(confidence: str | None) -> int:
    return CONFIDENCE_ORDER.index(confidence) if confidence in CONFIDENCE_ORDER else 3


def _sorted_changes(changes: list[LedgerChange]) -> list[LedgerChange]:
    kind = {"promoted": 0, "demoted": 1, "new": 2, "reinforced": 3, "new or reinforced": 3,
            "removed": 4}
    # Most important first, so cutting the section for the body limit drops the least.
    return sorted(changes, key=lambda c: (kind.get(c.change, 9), _rank(c.confidence),
                                          _neg_date(c.date), c.entry_id))


def _neg_date(date: str | None) -> str:
    # Newest first inside the sort key (dates are YYYY-MM-DD strings).
    return "".join(chr(0x10FFFF - ord(ch)) for ch in date) if date else "\U0010ffff"


def _moved(old: Any, new: Any) -> str:
    """"promoted" or "demoted" (confidence up or down; an unknown value counts as lowest)."""
    return "promoted" if _rank(new) < _rank(old) else "demoted"


def _changes_since_state(entries: list[dict[str, Any]], before: dict[str, Any] | None,
                         baseline: dict[str, Any] | None) -> list[LedgerChange]:
    out = []
    for e in entries:
        eid = e.get("entry_id")
        if not eid:
            continue
        date = str(e["date"]) if e.get("date") else None
        if before is None or eid not in before:
            out.append(LedgerChange(eid, e["file"], e["title"], e["confidence"], "new",
                                    date=date))
        elif before[eid] != e["confidence"]:
            out.append(LedgerChange(eid, e["file"], e["title"], e["confidence"],
                                    _moved(before[eid], e["confidence"]),
                                    old_confidence=before[eid], date=date))
    if before is not None and baseline is not None:
        current = {e.get("entry_id") for e in entries}
        old = baseline.get("ledger") or {}
        for eid in sorted(set(before) - current):
            found = old.get(eid)
            info = found if isinstance(found, dict) else {}
            out.append(LedgerChange(eid, info.get("file") or eid.split("/")[0],
                                    info.get("title"), before[eid], "removed"))
    return _sorted_changes(out)


def _changes_since_date(entries: list[dict[str, Any]], since: dt.date,
                        baseline: dict[str, Any] | None, store: Store) -> list[LedgerChange]:
    from toolkit import queries
    from toolkit.reports import entry_keys_by_id

    before = _confidences(baseline.get("ledger")) if baseline else {}
    # Without a baseline, the vault's git history (the ledger of its last commit before the
    # window, as `toolkit ledger history` compares) tells new, promoted, reinforced and
    # removed apart.
    history = None if baseline else queries.ledger_confidences_before(store, since)
    keys = entry_keys_by_id(entries) if history is not None else {}
    out = []
    for e in entries:
        date = e.get("date")
        if not e.get("entry_id"):
            continue
        eid = e["entry_id"]
        # A Date on or after the window's start means written or reinforced since (reflect
        # sets Date to the day of the reinforcement); a confidence move is known against the
        # baseline, or the git history: there, also one that kept an older Date (prune's
        # demotions keep it, as Smith's prune does), as its removals are known by it alone.
        was: dict[str, Any] = before
        if history is not None:
            key = keys.get(eid)
            was = {eid: history[key][0]} if key in history else {}
        moved = eid in was and was[eid] != e["confidence"]
        if not (date is not None and date >= since) and not (moved and history is not None):
            continue
        if moved:
            change, old = _moved(was[eid], e["confidence"]), was[eid]
        elif history is not None:
            change, old = ("reinforced" if eid in was else "new"), None
        else:
            change, old = "new or reinforced", None
        out.append(LedgerChange(eid, e["file"], e["title"], e["confidence"], change,
                                old_confidence=old,
                                date=str(date) if date is not None else None))
    if history is not None:  # in the ledger before the window, not in it now
        for key in sorted(set(history) - set(keys.values())):
            confidence, file, title = history[key]
            out.append(LedgerChange(key, file, title, confidence, "removed"))
    return _sorted_changes(out)


def record_state(cfg: Config, report: HandoffReport) -> Path:
    """Remember this handoff (atomically), so the next one reports what changed since."""
    path = report.state_path
    data = (json.dumps(report.next_state, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
            ).encode("utf-8")
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    from toolkit.safewrite import atomic_replace

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolkitError(f"cannot create the state folder: {exc.strerror}",
                           path=path.parent) from None
    return atomic_replace(path, data, follow_links=False)  # ours: a link there is replaced


# --------------------------------------------------------------------------- links

class Links:
    """Where the report's links point: absolute URLs of the built site at ``site_url`` (the
    GitHub issue and ``toolkit handoff``), or nowhere when no site URL is configured. The
    site's own handoff page passes relative links instead (``toolkit.reports``)."""

    def __init__(self, site_url: str | None) -> None:
        self.site_url = site_url

    def to(self, kind: str, key: str = "") -> str | None:
        """A page of the site by kind (see :func:`site_link`)."""
        return site_link(self.site_url, kind, key)

    def page(self, path: str) -> str | None:
        """A page or file of the site by its docs path (``audit/dispatches.md#anchor``)."""
        return site_link(self.site_url, "page", path)

    def task_path(self, task: str) -> str:
        """The docs path of a task's page (the site disambiguates colliding slugs, which
        only its own links know)."""
        from toolkit.reports import task_path
        from toolkit.slugs import slugify

        return task_path(slugify(task, fallback="task"))


# --------------------------------------------------------------------------- rendering

@dataclass
class Section:
    """One part of the report: a heading, fixed lines, then items the body limit may cut.

    ``items`` are rendered items, most urgent first; ``sizes`` what each adds to the body.
    ``render_items(indices)`` renders those items (default: joined with newlines).
    ``always`` shows ``intro`` and ``outro`` even without items (then ``empty`` follows the
    intro).
    """

    key: str
    heading: str
    intro: list[str]
    items: list[str]
    noun: str  # what one item is, for the "left out" note ("rows", "entries", "tasks")
    empty: str = "_None._"
    outro: list[str] = field(default_factory=list)
    render_items: Callable[[Sequence[int]], str] | None = None
    sizes: list[int] | None = None
    always: bool = False

    def item_sizes(self) -> list[int]:
        return self.sizes if self.sizes is not None else [size(i) + 1 for i in self.items]

    def render(self, kept: int | None = None, note: str | None = None, *, start: int = 0,
               continued: bool = False, final: bool = True) -> str:
        """Heading, intro, items ``[start, start + kept)`` (default: all), ``note``, and the
        outro unless a later part of the section follows (``final=False``)."""
        kept = len(self.items) - start if kept is None else kept
        lines = [self.heading + (" (continued)" if continued else ""), ""]
        if self.always:
            lines += self.intro
        if not self.items:
            lines += ([""] if self.always and self.intro else []) + [self.empty]
        else:
            if not self.always:
                lines += self.intro
            if kept:
                span = range(start, start + kept)
                lines.append(self.render_items(span) if self.render_items
                             else "\n".join(self.items[start:start + kept]))
            if note:
                lines += ["", note]
        if self.outro and final:
            lines += ["", *self.outro]
        return "\n".join(lines).rstrip("\n") + "\n"


@dataclass
class RenderedDoc:
    title: str
    body: str
    marker: str = ""
    left_out: list[str] = field(default_factory=list)


def _default_redactor() -> Redactor:
    from toolkit.redact import redact

    return redact


@dataclass
class _Ctx:
    """How one rendering writes: the redactor, where links point, and whether raw HTML (the
    collapsible ``<details>`` blocks) is allowed (not on the site, whose Markdown drops it)."""

    r: Redactor
    links: Links
    html: bool = True
    text_limit: int | None = None  # caps long free text (slop descriptions) for the issue

    def t(self, value: Any, limit: int | None = CELL_MAX) -> str:
        """A value redacted, then escaped as literal inline text: for GitHub by
        :func:`md_text`, for the site's Python-Markdown by ``toolkit.mdsafe.inline``."""
        text = self.r(str(value)) if value is not None else None
        if self.html:
            return md_text(text, limit)
        return mdsafe.inline(_clip("" if text is None else " ".join(text.split()), limit))

    def collapsed(self, summary: str, lines: list[str]) -> list[str]:
        """``lines`` in a collapsed block (GitHub), or under a bold line (the site)."""
        if not self.html:
            return ["", f"**{summary}**", "", *lines]
        return ["", "<details>", f"<summary>{summary}</summary>", "", *lines, "", "</details>"]

    def task_heading(self, text: str) -> str:
        """A heading made of AI-written text: a heading on GitHub, a bold line on the site
        (whose headings feed the table of contents, where no AI-written text goes)."""
        return f"### {text}" if self.html else f"**{text}**"

    def see(self, label: str, path: str) -> str:
        """"[label](url) or " for a page of the site, "" without a site URL."""
        url = self.links.page(path)
        return f"{md_link(label, url)} or " if url else ""

    def long_list(self, lines: list[str], noun: str, inline: int = INLINE_ROWS) -> list[str]:
        """The first ``inline`` lines, the rest collapsed."""
        if len(lines) <= inline:
            return lines
        return lines[:inline] + self.collapsed(f"{len(lines) - inline} more {noun}",
                                               lines[inline:])

    def table(self, table: Any) -> list[str]:
        """A ``toolkit.reports.Table`` as a GitHub table: values escaped, ``Ref`` cells linked
        to the site."""
        from toolkit.reports import Ref

        if not table.rows:
            return [f"_{table.empty}_"]

        def cell(value: Any) -> str:
            if isinstance(value, Ref):
                return md_link(self.t(value.text, 160), self.links.page(value.path))
            return "" if value is None else self.t(value)

        numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in table.rows)
                   for i in range(len(table.columns))]
        out = ["| " + " | ".join(table.columns) + " |",
               "|" + "".join("---:|" if n else "---|" for n in numeric)]
        out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
        return out


def _ctx(report: HandoffReport, redactor: Redactor | None, links: Links | None,
         html: bool = True, text_limit: int | None = None) -> _Ctx:
    # the rendering's redactor answers a text it was given before from memory: a report
    # redacts the same severities, buckets and statuses once a row (40,000 calls for 20,000
    # open slop entries, a few hundred distinct texts besides the titles)
    return _Ctx(functools.cache(redactor or _default_redactor()),
                links or Links(report.site_url), html, text_limit)


def sections(report: HandoffReport, redactor: Redactor | None = None, *,
             links: Links | None = None, html: bool = True) -> list[Section]:
    """The report's sections, most urgent first, every value redacted, then escaped."""
    c = _ctx(report, redactor, links, html)
    out = [_summary_section(report, c)]
    if report.goal is not None:
        out.append(Section("goal", "## Active goal", [], [_goal_line(report.goal, c)],
                           "goal lines"))
    out += _check_sections(report, c)
    out += [_pending_section(report, c), _over_limit_section(report, c),
            _learned_section(report, c), _debt_section(report, c)]
    return out


def listing_sections(report: HandoffReport, redactor: Redactor | None = None, *,
                     links: Links | None = None, text_limit: int | None = None
                     ) -> list[Section]:
    """The complete listing (``--full``): every open slop entry in CodeSmith's layout, every
    ledger change, every refuted and pending dispatch, every dead end and no-go."""
    c = _ctx(report, redactor, links, text_limit=text_limit)
    return [_slop_section(report, c), _ledger_section(report, c), _dispatch_section(report, c),
            _approach_section(report, c)]


CHECK_ROWS = 3  # failing rows shown under a check (the checks page and `toolkit check` list more)
CHECK_ORDER = ("fail", "error", "warn")


def _check_sections(report: HandoffReport, c: _Ctx) -> list[Section]:
    """The checks that fail, could not run or warn (in that order), between the goal and the
    dispatches: each with its status, count, why (or its error) and first rows, a task or
    slop entry linked to its page. None when the caller ran no checks."""
    if report.checks is None:
        return []
    from toolkit.checks.output import cell, row_text, shown_row
    from toolkit.checks.page import row_target
    from toolkit.display import display_roots

    bad = sorted((r for r in report.checks if r.status != "pass"),
                 key=lambda r: CHECK_ORDER.index(r.status))
    roots = display_roots(report.root) if report.root is not None else []
    items = []
    for r in bad:
        what = (f"could not run: {c.t(cell(r.message))}" if r.status == "error"
                else c.t(r.check.why))
        rows = "" if r.status == "error" else f", {_count(r.count, 'row', 'rows')}"
        lines = [f"- **{c.t(r.check.name, 80)}** ({r.status.upper()}, {r.check.level} level"
                 f"{rows}): {what}"]
        for row in r.rows[:CHECK_ROWS]:
            kind, key = row_target(r.columns, row) or ("", "")
            text = c.t(row_text(shown_row(row, roots), 160), 160)
            lines.append(f"  - {md_link(text, c.links.to(kind, key)) if kind else text}")
        if r.count > min(len(r.rows), CHECK_ROWS) and r.status != "error":
            lines.append(f"  - _and {r.count - min(len(r.rows), CHECK_ROWS)} more_")
        items.append("\n".join(lines))
    see = c.see("the checks page", "checks/index.md")
    total = len(report.checks)
    heading = f"## Failing checks ({len(bad)} of {total})"
    outro = ([f"_Every check and its rows: {see}`toolkit check`._"] if bad else [])
    return [Section("checks", heading, [], items, "checks",
                    empty=f"_All {_count(total, 'check passes', 'checks pass')}._",
                    outro=outro)]


# -- the summary and the urgent sections ---------------------------------------------------------

def _severity_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in rows:
        sev = str(e.get("severity"))
        counts[sev] = counts.get(sev, 0) + 1
    return counts


def _change_counts(report: HandoffReport) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ch in report.ledger:
        counts[ch.change] = counts.get(ch.change, 0) + 1
    return counts


def _count(n: int, one: str, many: str) -> str:
    """"1 task", "3 tasks": the count and the word that agrees with it."""
    return f"{n} {one if n == 1 else many}"


def _summary_section(report: HandoffReport, c: _Ctx) -> Section:
    over = report.over_limit
    dead = sum(n for n, _rows in report.over_approaches.values())
    sev = _severity_counts(report.slop)
    changes = _change_counts(report)
    learned = ", ".join(f"{n} {CHANGE_LABELS[k].lower()}" for k, n in
                        sorted(changes.items(), key=lambda kv: list(CHANGE_LABELS).index(kv[0])))
    pending, tasks = report.pending_total, len(over)
    lines = [
        f"- **{pending}** {'dispatch awaits' if pending == 1 else 'dispatches await'} a "
        f"verdict ({report.refuted_total} refuted so far)",
        f"- **{tasks}** {'task is' if tasks == 1 else 'tasks are'} over the retry limit, with "
        f"**{dead}** dead ends and no-gos recorded against {'it' if tasks == 1 else 'them'}",
        f"- **{len(report.ledger)}** ledger {'change' if len(report.ledger) == 1 else 'changes'}"
        f" {report.since.describe()}" + (f": {learned}" if learned else ""),
        f"- **{len(report.slop)}** open slop {'item' if len(report.slop) == 1 else 'items'}: "
        f"**{sev.get('critical', 0)}** critical, **{sev.get('high', 0)}** high",
    ]
    return Section("summary", "## Summary", [], lines, "summary lines")


def _pending_section(report: HandoffReport, c: _Ctx) -> Section:
    from toolkit.reports import pending_table

    shown = INLINE_ROWS * 2
    table = c.table(pending_table(report.pending, _task_ref(c), limit=shown))
    see = c.see("the dispatch report", "audit/dispatches.md")
    outro = []
    if report.pending_total > shown:
        outro.append(f"_The newest {shown} of {report.pending_total} are listed; for all of "
                     f"them see {see}`toolkit handoff --full`._")
    if report.refuted_total:
        outro.append(f"_{_count(report.refuted_total, 'dispatch was', 'dispatches were')} "
                     f"refuted: see {see}"
                     "`toolkit handoff --full`._")
    return Section("pending", f"## Dispatches awaiting a verdict ({report.pending_total})",
                   table[:2], table[2:], "dispatch rows",
                   empty="_No dispatch is waiting for a verdict._", outro=outro)


def _task_ref(c: _Ctx) -> Callable[[str | None], Any]:
    from toolkit.reports import Ref

    def ref(task: str | None) -> Any:
        return "[???]" if task is None else Ref(task, c.links.task_path(task))

    return ref


def _approach_line(a: dict[str, Any], c: _Ctx) -> str:
    kind = "Dead end" if a.get("outcome") == "DEAD_END" else "No-go"
    return f"- **{kind}** ({c.t(a.get('ts'))}): {c.t(a.get('approach'), 300)} — " \
           f"{c.t(a.get('reason'), 500)}"


def _over_limit_section(report: HandoffReport, c: _Ctx) -> Section:
    from toolkit.reports import Ref, over_limit_table

    table = over_limit_table(report.tasks, _task_ref(c), wide=False)
    blocks = []
    for row in table.rows:
        task_cell = row[0]
        task = task_cell.text if isinstance(task_cell, Ref) else str(task_cell)
        url = c.links.page(task_cell.path) if isinstance(task_cell, Ref) else None
        facts = " · ".join(f"{name} {c.t(v) if v is not None else '—'}"
                           for name, v in zip(table.columns[1:], row[1:], strict=True))
        lines = [c.task_heading(md_link(c.t(task, 160), url)), "", facts]
        total, tried = report.over_approaches.get(task, (0, []))
        if tried:
            lines.append("")
            lines += [_approach_line(a, c) for a in tried]
            rest = total - len(tried)
            if rest > 0:
                where = (f"on {md_link('its page', url)}" if url
                         else "in `toolkit audit approaches` for this task")
                lines.append(f"- _{rest} more {where}._")
        else:
            lines += ["", "_No dead ends or no-gos recorded._"]
        blocks.append("\n".join(lines))
    n, others = report.other_approaches
    outro = []
    if n:
        page = c.see("the approaches page", "audit/approaches.md")
        outro.append(f"_{n} more dead ends and no-gos belong to "
                     f"{_count(others, 'task', 'tasks')} under the limit: see {page}"
                     "`toolkit audit approaches TASK` or `toolkit handoff --full`._")
    return Section("over_limit", f"## Tasks over the retry limit ({len(blocks)})",
                   ["_Under each task: what was tried and ruled out. Do not repeat it._", ""],
                   blocks, "tasks", empty="_No task has reached the retry limit (2 retries)._",
                   outro=outro, render_items=lambda span: "\n\n".join(blocks[i] for i in span),
                   sizes=[size(b) + 2 for b in blocks])


def _learned_section(report: HandoffReport, c: _Ctx) -> Section:
    groups: dict[str, list[LedgerChange]] = {}
    for ch in report.ledger:
        groups.setdefault(ch.change, []).append(ch)
    blocks = []
    for kind in CHANGE_LABELS:
        changes = groups.get(kind)
        if not changes:
            continue
        lines = []
        for ch in changes:
            link = c.links.to("ledger", ch.entry_id) if ch.change != "removed" else None
            title = md_link(c.t(ch.title or "[???]", 160), link)
            if ch.change in ("promoted", "demoted"):
                conf = c.t(ch.change_text)
            elif ch.change == "removed":
                conf = f"was {c.t(ch.confidence or '[???]')}"
            else:
                conf = c.t(ch.confidence or "[???]")
            date = f" · {c.t(ch.date)}" if ch.date else ""
            lines.append(f"- {title} — {c.t(ch.file)} · {conf}{date}")
        blocks.append("\n".join([f"### {CHANGE_LABELS[kind]} ({len(changes)})", "",
                                 *c.long_list(lines, "entries")]))
    heading = f"## What the ledger learned {report.since.describe()} ({len(report.ledger)})"
    return Section("learned", heading, [], blocks, "groups of ledger changes",
                   empty="_No ledger entries added, removed or changed in confidence._",
                   render_items=lambda span: "\n\n".join(blocks[i] for i in span),
                   sizes=[size(b) + 2 for b in blocks])


def _debt_section(report: HandoffReport, c: _Ctx) -> Section:
    from toolkit.reports import slop_matrix

    rows = report.slop
    # the site's bucket-by-severity table (its rows, columns and order), cut to the largest
    # BUCKET_ROWS buckets
    m = slop_matrix(rows)
    intro: list[str] = []
    if rows:
        intro += ["| Bucket | " + " | ".join(
            str(s).capitalize() if s in SEVERITY_ORDER else c.t(_shown(s), 40)
            for s in m.severities) + " | Total |", "|---|" + "---:|" * (len(m.severities) + 1)]
        top = set(sorted(m.buckets, key=lambda b: (-m.total(b), _shown(b)))[:BUCKET_ROWS])
        for bucket in (b for b in m.buckets if b in top):
            cells = [str(m.counts[(bucket, s)]) for s in m.severities]
            intro.append(f"| {c.t(_shown(bucket))} | " + " | ".join(cells)
                         + f" | {m.total(bucket)} |")
        if len(top) < len(m.buckets):  # the rest in one row: the totals stay exact
            others = [b for b in m.buckets if b not in top]
            cells = [str(sum(m.counts[(b, s)] for b in others)) for s in m.severities]
            intro.append(f"| _{len(others):,} other buckets_ | " + " | ".join(cells)
                         + f" | {sum(m.total(b) for b in others)} |")
    urgent = [e for e in rows if e.get("severity") in ("critical", "high")]
    urgent.sort(key=_severity_rank)  # stable: the report's bucket order within a severity
    # the site's page (no raw HTML) lists the first SITE_URGENT_ROWS; the rest is linked
    shown = urgent if c.html else urgent[:SITE_URGENT_ROWS]
    items = []
    for e in shown:
        sid = str(e.get("short_id") or e.get("id") or "")
        ident = md_link(c.t(sid, 40), c.links.to("slop", sid) if sid else None)
        status = str(e.get("status") or "").replace("_", " ")
        items.append(f"- **{c.t(e.get('severity'))}** {ident}: {c.t(e.get('title'), 160)} "
                     f"({c.t(_shown(e.get('bucket')))}, {c.t(status)})")
    if items:
        intro += ["", f"### Critical and high ({len(urgent)})", ""]
    rest = len(rows) - len(urgent)
    outro = []
    if len(shown) < len(urgent):
        outro.append(f"_The first {len(shown)} of {len(urgent)} critical and high items are "
                     f"listed; all of them: {_open_slop_links(c)}._")
    if rest:
        sev = _severity_counts([e for e in rows if e.get("severity") not in ("critical", "high")])
        parts = ", ".join(f"{sev[s]} {s}" for s in SEVERITY_ORDER if sev.get(s))
        extra = [n for s, n in sev.items() if s not in SEVERITY_ORDER]
        if extra:
            parts += (", " if parts else "") + f"{sum(extra)} of no known severity"
        outro.append(f"_The other {_count(rest, 'open item', 'open items')} ({parts}): "
                     f"{_open_slop_links(c)}._")
    return Section("debt", f"## Debt: open slop ({len(rows)})", intro, items, "slop lines",
                   empty="_No critical or high open items._" if rows
                   else "_No open or in-progress slop._", outro=outro, always=True)


def _shown(value: Any) -> str:
    """A bucket or severity as the site shows it (none: ``[???]``)."""
    from toolkit.reports import shown_value

    return shown_value(value)


def _open_slop_links(c: _Ctx) -> str:
    """Where every open slop item is: the site's slop pages and download (when there is a
    site to link to), and the command."""
    where = []
    page = c.links.page("slop/index.md")
    if page:
        where.append(md_link("open slop on the site", page))
        where.append(md_link("slop_entries.csv", c.links.page("data/slop_entries.csv")))
    where.append("`toolkit slop query --status open` (and `--status in_progress`)")
    return " · ".join(where)


# -- the complete listing (--full) ---------------------------------------------------------------

_SLOP_ENUMS = {"bucket": "SLOP_BUCKETS", "severity": "SLOP_SEVERITIES",
               "confidence": "SLOP_CONFIDENCES", "status": "SLOP_STATUSES"}


def _slop_text(value: Any, limit: int | None = None) -> str:
    # Table cells of the export escape "|" as "\|" themselves; an entity keeps ours intact.
    return md_text(value, limit).replace("\\|", "&#124;")


def _slop_block(value: Any, limit: int | None) -> str:
    return md_block(value, limit).replace("\\|", "&#124;")


def _escaped_slop_entry(row: dict[str, Any], r: Redactor, text_limit: int | None) -> Any:
    """A ``SlopEntry`` whose every text field is redacted and escaped for Markdown."""
    from toolkit import records
    from toolkit.records import SlopEntry

    def enum(key: str) -> str | None:
        value = row.get(key)
        known = getattr(records, _SLOP_ENUMS[key])
        return value if value is None or value in known else _slop_text(r(str(value)), 40)

    def opt(key: str, limit: int | None) -> str | None:
        value = row.get(key)
        return None if value is None else _slop_block(r(str(value)), limit)

    return SlopEntry(
        path=str(row.get("path") or ""), index=int(row.get("position") or 0),
        line=row.get("line"), id=_slop_text(r(str(row.get("id") or ""))),
        bucket=enum("bucket"), severity=enum("severity"), confidence=enum("confidence"),
        owner=None if row.get("owner") is None else _slop_text(r(str(row["owner"])), 200),
        source_links=_links(row.get("source_links") or (), r, text_limit),
        title=_slop_text(r(str(row.get("title") or "")), 300),
        description=_slop_block(r(str(row.get("description") or "")), text_limit),
        status=enum("status"), cleanup_recommendation=opt("cleanup_recommendation", text_limit),
        created_at=row.get("created_at"), updated_at=row.get("updated_at"),
        task_id=None, thread_id=None)


def _links(links: Sequence[Any], r: Redactor, text_limit: int | None) -> tuple[str, ...]:
    out = [_slop_text(r(str(x)), 300) for x in links]
    if text_limit is not None and len(out) > 20:  # the issue shows 20; the full report all
        out = [*out[:20], f"… {len(out) - 20} more"]
    return tuple(out)


_FIXED_TIME = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def render_slop_layout(entries: Sequence[Any], site_url: str | None = None,
                       links: Links | None = None) -> str:
    """Slop entries in CodeSmith's export layout, headings one level down (``### bucket``,
    ``#### id — title``), ids linked to the site. The layout is
    ``slop_ops.export_markdown``'s; its title and "Generated at" lines are left to the
    report's own header."""
    from toolkit.slop_ops import export_markdown

    links = links or Links(site_url)
    text = export_markdown(list(entries), title="-", now=_FIXED_TIME, redact_output=False)
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    out = []
    urls = {f"### {e.short_id} — ": links.to("slop", e.short_id) for e in entries}
    for line in lines[start:]:
        # Only the layout's own lines start with "#": every field was escaped.
        if re.match(r"#{2,5} ", line):
            for prefix, url in urls.items():
                if url and line.startswith(prefix):
                    line = f"### {md_link(prefix[4:-3], url)} — " + line[len(prefix):]
                    break
            line = "#" + line
        out.append(line)
    return "\n".join(out).rstrip("\n")


def _slop_section(report: HandoffReport, c: _Ctx) -> Section:
    rows = report.slop
    entries = [_escaped_slop_entry(e, c.r, c.text_limit) for e in rows]
    # Most urgent first (severity, then the report's order): what a cut keeps.
    urgent = sorted(range(len(rows)), key=lambda i: (_severity_rank(rows[i]), i))

    def render_items(span: Sequence[int]) -> str:
        return render_slop_layout([entries[i] for i in sorted(urgent[j] for j in span)],
                                  links=c.links)

    items, sizes = [], []
    for i in urgent:
        one = render_slop_layout([entries[i]], links=c.links)
        two = render_slop_layout([entries[i], entries[i]], links=c.links)
        items.append(one)
        sizes.append(size(two) - size(one))  # what one more entry in a bucket adds
    return Section("slop", f"## All open slop ({len(rows)})", [], items, "slop entries",
                   empty="_No open or in-progress slop._", render_items=render_items,
                   sizes=sizes)


def _severity_rank(row: dict[str, Any]) -> int:
    sev = row.get("severity")
    return SEVERITY_ORDER.index(sev) if sev in SEVERITY_ORDER else len(SEVERITY_ORDER)


def _ledger_section(report: HandoffReport, c: _Ctx) -> Section:
    rows = []
    for ch in report.ledger:
        link = c.links.to("ledger", ch.entry_id) if ch.change != "removed" else None
        title = md_link(c.t(ch.title or "[???]"), link)
        rows.append(f"| {c.t(ch.change_text)} | {c.t(ch.confidence or '[???]')} | "
                    f"{c.t(ch.file)} | {title} | {c.t(ch.date or '')} |")
    heading = f"## All ledger changes {report.since.describe()} ({len(rows)})"
    intro = ["| Change | Confidence | File | Title | Date |", "|---|---|---|---|---|"]
    return Section("ledger", heading, intro, rows, "ledger rows",
                   empty="_No ledger entries added, removed or changed in confidence._")


def _dispatch_section(report: HandoffReport, c: _Ctx) -> Section:
    rows = []
    for d in report.dispatches:
        verdict = "REFUTED" if d.get("verdict") == "REFUTED" else "PENDING"
        notes = d.get("verdict_notes") or d.get("brief_summary") or ""
        task = md_link(c.t(d.get("task"), 120), c.links.to("task", str(d.get("task") or "")))
        rows.append(f"| {c.t(d.get('id'))} | {c.t(d.get('ts'))} | {task} | "
                    f"{c.t(d.get('agent_type'))} / {c.t(d.get('model'))} | {verdict} | "
                    f"{c.t(notes, 160)} |")
    total = report.refuted_total + report.pending_total
    heading = (f"## All refuted and pending dispatches ({report.refuted_total} refuted, "
               f"{report.pending_total} pending)")
    intro = ["| ID | When (UTC) | Task | Agent / model | Verdict | Notes |",
             "|---:|---|---|---|---|---|"]
    outro = ([f"_The newest {len(rows)} of {total} are listed (refuted first)._"]
             if len(rows) < total else [])
    return Section("dispatches", heading, intro, rows, "dispatch rows",
                   empty="_No refuted or pending dispatches._", outro=outro)


def _approach_section(report: HandoffReport, c: _Ctx) -> Section:
    # One item per approach (tasks stay grouped), so a cut drops the oldest tasks' rows.
    rows: list[tuple[str, str]] = [(task, _approach_line(a, c))
                                   for task, approaches in report.approaches
                                   for a in approaches]

    def heading(task: str) -> str:
        return f"### {md_link(c.t(task, 160), c.links.to('task', task))}"

    def render_items(span: Sequence[int]) -> str:
        out: list[str] = []
        current = None
        for task, line in (rows[i] for i in span):
            if task != current:
                out += ([""] if out else []) + [heading(task), ""]
                current = task
            out.append(line)
        return "\n".join(out)

    sizes = []
    for i, (task, line) in enumerate(rows):
        first = i == 0 or rows[i - 1][0] != task
        sizes.append(size(line) + 1 + (size(heading(task)) + 3 if first else 0))
    shown = len(rows)
    outro = ([f"_The newest {shown} of {report.approaches_total} are listed._"]
             if shown < report.approaches_total else [])
    return Section("approaches", f"## All dead ends and no-gos ({report.approaches_total})",
                   [], [line for _, line in rows], "dead ends and no-gos",
                   empty="_No dead ends or no-gos recorded._", outro=outro,
                   render_items=render_items, sizes=sizes)


# -- the whole report ----------------------------------------------------------------------------

AT_TEMPLATE = "<!-- agent-ledger-toolkit:handoff-at {at} -->"
_AT_RE = re.compile(r"^<!-- agent-ledger-toolkit:handoff-at (\d{4}-\d\d-\d\d \d\d:\d\d UTC) -->$")


def handoff_at(report: HandoffReport) -> str | None:
    """When this handoff was made, as the state file records it (stable while the ledger is)."""
    last = report.next_state.get("last")
    return str(last.get("at")) if isinstance(last, dict) and last.get("at") else None


def read_handoff_at(body: str | None) -> str | None:
    """The time a published handoff was made, from the hidden line in its issue body."""
    for line in (body or "").splitlines()[:5]:
        m = _AT_RE.match(line.strip())
        if m:
            return m.group(1)
    return None


def _header(report: HandoffReport, c: _Ctx, *, for_issue: bool = False,
            for_site: bool = False) -> list[str]:
    project = c.t(report.project)
    lines = [] if (for_issue or for_site) else [f"# Agent handoff: {project}", ""]
    lines.append(f"_Project {project} · data as of {report.as_of or 'no records'} (UTC) · "
                 f"ledger changes {report.since.describe()} ({report.since.origin()}) · "
                 "secrets redacted._")
    link = None if for_site else c.links.to("handoff")
    if link:
        lines.append(f"_Every detail is one click away: {md_link('this report on the site', link)}"
                     "._")
    if for_issue:
        lines.append("_Kept up to date by `toolkit publish`; edits here are overwritten._")
    for stale in report.stale:
        lines += ["", f"**Warning:** {c.t(stale, None)}"]
    return [*lines, ""]


def render_markdown(report: HandoffReport, *, redactor: Redactor | None = None,
                    full: bool = False, links: Links | None = None,
                    for_site: bool = False) -> str:
    """The report (``toolkit handoff``), redacted: the urgent sections, and with ``full`` the
    complete listing after them. ``for_site``: the site's handoff page (no title line, no raw
    HTML, ``links`` relative to the page)."""
    c = _ctx(report, redactor, links, html=not for_site)
    parts = ["\n".join(_header(report, c, for_site=for_site))]
    parts += [s.render() for s in sections(report, c.r, links=c.links, html=c.html)]
    if full:
        parts += [s.render() for s in listing_sections(report, c.r, links=c.links)]
    return c.r("\n".join(parts).rstrip("\n") + "\n")


def default_title(report: HandoffReport) -> str:
    return f"Agent handoff: {report.project}"


ISSUE_TEXT_LIMIT = 4000  # one slop description in the issue; the full report has all of it


def render_issue(report: HandoffReport, *, title: str | None = None,
                 redactor: Redactor | None = None, limit: int = 65_536,
                 marker: str = "", full: bool = False) -> RenderedDoc:
    """Title and body for the issue: redacted, and cut to ``limit`` characters if needed.
    ``full`` (``publish --full``): the body says the complete listing follows as comments."""
    c = _ctx(report, redactor, None)
    issue_title = " ".join(c.r(title or default_title(report)).split())
    issue_title = "".join(ch for ch in issue_title  # no bidi overrides or zero-width tricks
                          if unicodedata.category(ch) not in ("Cc", "Cf"))
    if len(issue_title) > 256:
        issue_title = issue_title[:255] + "…"
    at = handoff_at(report)
    head = (([marker] if marker else []) + ([AT_TEMPLATE.format(at=at)] if at and marker else [])
            + _header(report, c, for_issue=True))
    link = c.links.to("handoff")
    full_text = (f"see {md_link('the full report', link)}" if link
                 else "run `toolkit handoff --full` in the project for the full report")
    secs = sections(report, c.r)
    if full:
        secs[-1].outro.append("_The complete listing follows in the comments below._")
    body, left_out = fit_body("\n".join(head), secs, limit=limit, full_report=full_text)
    redacted = c.r(body)
    if size(redacted) > limit:  # redaction grew a value that spans two fields (rare)
        redacted = _hard_cut(redacted, limit)
        left_out = [*left_out, "the end of the report"]
    return RenderedDoc(title=issue_title, body=redacted, marker=marker, left_out=left_out)


def render_comments(report: HandoffReport, *, key_marker: Callable[[int], str],
                    redactor: Redactor | None = None, limit: int = 65_536) -> list[str]:
    """The complete listing as issue comments (``publish --full``), each under ``limit``:
    sections in order, a section longer than one comment split between items. Comment ``n``
    starts with ``key_marker(n)`` (a hidden line, like the issue body's marker)."""
    c = _ctx(report, redactor, None, text_limit=ISSUE_TEXT_LIMIT)
    secs = listing_sections(report, c.r, text_limit=ISSUE_TEXT_LIMIT)
    blocks: list[str] = []
    budget = limit - 400  # room for the marker and the part line
    for s in secs:
        whole = s.render()
        if size(whole) <= budget or not s.items:
            blocks.append(whole if size(whole) <= budget else _hard_cut(whole, budget))
            continue
        start = 0
        sizes = s.item_sizes()
        while start < len(s.items):  # items [start, end) per block
            end, used = start, size(s.render(0)) + 40
            while end < len(s.items) and (end == start or used + sizes[end] <= budget):
                used += sizes[end]
                end += 1
            text = s.render(end - start, start=start, continued=start > 0,
                            final=end == len(s.items))
            blocks.append(text if size(text) <= budget else _hard_cut(text, budget))
            start = end
    chunks: list[list[str]] = [[]]
    used = 0  # size("\n".join(chunks[-1])), kept as blocks are added
    for block in blocks:
        if chunks[-1] and used + 1 + size(block) > budget:
            chunks.append([])
        used = size(block) if not chunks[-1] else used + 1 + size(block)
        chunks[-1].append(block)
    total = len(chunks)
    out = []
    for n, chunk in enumerate(chunks, 1):
        head = [key_marker(n), f"_Complete listing of the handoff above, part {n} of {total}._",
                ""]
        out.append(c.r("\n".join(head + chunk).rstrip("\n") + "\n"))
    return out


# --------------------------------------------------------------------------- the body limit

def size(text: str) -> int:
    """Length as GitHub may count it: UTF-16 code units (>= code points; multibyte-safe)."""
    # counted by the codec, in C: a character past U+FFFF is a surrogate pair (2 units), any
    # other character (a lone surrogate too, passed through) one unit
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _cut_text(text: str, budget: int) -> str:
    """``text`` cut to at most ``budget`` size units at a character boundary."""
    if size(text) <= budget:
        return text
    out, used = [], 0
    for ch in text:
        w = 2 if ord(ch) > 0xFFFF else 1
        if used + w > budget:
            break
        out.append(ch)
        used += w
    while out and (unicodedata.combining(out[-1]) or out[-1] in "\u200d\ufe0f"):
        out.pop()  # no combining mark or joiner left dangling at the cut
    return "".join(out)


def _hard_cut(text: str, limit: int) -> str:
    note = "\n\n> **Cut:** the rest of this report was left out to stay under GitHub's limit.\n"
    return _cut_text(text, limit - size(note)) + note


def fit_body(head: str, secs: list[Section], *, limit: int, full_report: str
             ) -> tuple[str, list[str]]:
    """Assemble head + sections; over ``limit``, drop items from the longest sections first.

    Items are dropped from the end (the least urgent). Each cut section gets a visible note
    saying how many of its items were left out and where the full report is; a line at the
    top lists every cut. Always terminates and always fits.
    """
    kept = [len(s.items) for s in secs]
    sizes = [s.item_sizes() for s in secs]
    sec_size = [size(s.render()) for s in secs]

    def notes() -> tuple[list[str | None], list[str]]:
        out: list[str | None] = []
        left: list[str] = []
        for s, k in zip(secs, kept, strict=True):
            missing = len(s.items) - k
            if not missing:
                out.append(None)
                continue
            left.append(f"{s.heading.lstrip('# ')}: {missing} of {len(s.items)} {s.noun}")
            out.append(f"> **Left out:** {missing} of {len(s.items)} {s.noun} (the least "
                       f"urgent) to keep this issue under GitHub's {limit:,}-character limit; "
                       f"{full_report}.")
        return out, left

    def assemble() -> tuple[str, list[str]]:
        section_notes, left = notes()
        parts = [head]
        if left:
            parts += ["> **This report was shortened** to fit GitHub's limit: "
                      + "; ".join(left) + ".", ""]
        parts += [s.render(k, n) for s, k, n in zip(secs, kept, section_notes, strict=True)]
        return "\n".join(parts).rstrip("\n") + "\n", left

    body, left = assemble()
    while size(body) > limit:
        over = size(body) - limit
        freed = 0
        while freed < over:
            candidates = [i for i in range(len(secs)) if kept[i] > 0]
            if not candidates:
                return _hard_cut(body, limit), [*left, "the end of the report"]
            j = max(candidates, key=lambda i: (sec_size[i], -i))
            kept[j] -= 1
            freed += sizes[j][kept[j]]
            sec_size[j] -= sizes[j][kept[j]]
        body, left = assemble()
    return body, left


def export_report(store: Store, cfg: Config, *, since: dt.date | None = None,
                  output: Path | None = None, now: dt.datetime | None = None,
                  redactor: Redactor | None = None, full: bool = False,
                  checks: Sequence[Result] | None = None) -> str:
    """``toolkit handoff``'s two steps in one call, with the store still open (the command
    closes it between them, and prints the text itself): :func:`render_report`, then
    :func:`hand_over` to ``output`` if given (remembered unless ``since``, a one-off view).
    Returns the text. For tests and scripts."""
    report, text = render_report(store, cfg, since=since, now=now, redactor=redactor,
                                 full=full, checks=checks)
    hand_over(cfg, report, text, output=output)
    return text


def render_report(store: Store, cfg: Config, *, since: dt.date | None = None,
                  now: dt.datetime | None = None, redactor: Redactor | None = None,
                  full: bool = False, checks: Sequence[Result] | None = None
                  ) -> tuple[HandoffReport, str]:
    """The handoff report built from ``store`` and rendered (redacted; ``full`` adds the
    complete listing): what :func:`hand_over` then delivers, the store no longer needed."""
    report = build_report(store, cfg, since=since, now=now, checks=checks)
    return report, render_markdown(report, redactor=redactor, full=full)


def hand_over(cfg: Config, report: HandoffReport, text: str, *, output: Path | None = None
              ) -> None:
    """Write ``text`` to ``output`` if given (else the caller printed it already), and only
    then remember this handoff: a report that never reached its reader (a write or print that
    failed, a run killed before it) is not counted as handed off, so the next one covers its
    changes again. A report since a date (``--since``) is a one-off view, never remembered."""
    if output is not None:
        from toolkit.safewrite import write_output

        write_output(output, text.encode("utf-8"), keep=cfg.source_paths())
    if report.since.kind != "date":
        record_state(cfg, report)
