"""The handoff report: what the next person (or agent) must know, as redacted Markdown.

``build_report(store, cfg)`` runs the named queries (``toolkit.queries``, section ``handoff``)
and returns a typed :class:`HandoffReport`:

* open and in-progress slop, by bucket and severity, in CodeSmith's export layout;
* Smith Ledger entries added or changed in confidence since the last handoff (or ``--since``),
  and entries removed since then;
* dispatches refuted or pending verification; tasks over the retry limit;
* dead ends and no-gos per task;
* links to the matching pages of the built site when ``site_url`` is configured
  (:func:`site_link`, the one URL scheme the site uses too).

``render_markdown`` turns it into the full report (``toolkit handoff``); ``render_issue`` into
an issue title and body that stay under GitHub's limit (``toolkit publish``). Both redact every
value with ``toolkit.redact`` before it is escaped, so Markdown escapes cannot hide a secret from
the redactor, and escape AI-written text so it renders as literal text (no HTML, no mentions).

"Since the last handoff": ``.toolkit/handoff-state.json`` remembers the ledger as the last
handoff saw it (confidence per ``entry_id``) and the baseline that handoff compared against.
A handoff whose ledger is unchanged keeps the same baseline, so re-running ``publish`` produces
the same body (and sends nothing); once the ledger changes, the last handoff becomes the new
baseline.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from toolkit import mdsafe
from toolkit.errors import DataError, ToolkitError

if TYPE_CHECKING:
    from toolkit.config import Config
    from toolkit.store import Store

STATE_FILE = "handoff-state.json"
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
    ``task`` (key: the task text; slugged with ``toolkit.slugs.slugify``), ``handoff``.
    The site generator writes pages at these same paths (``toolkit.reports``), except that it
    disambiguates colliding slugs (``-2``; a slop entry's full id), which a link from here
    cannot know.
    """
    if not site_url:
        return None
    parts = urlsplit(site_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
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
    raise ValueError(f"unknown site page kind {kind!r}")


# --------------------------------------------------------------------------- Markdown text

def md_text(value: Any, limit: int | None = CELL_MAX) -> str:
    """Untrusted text as literal inline Markdown for GitHub (``toolkit.mdsafe.inline``), cut
    to ``limit`` characters with "…"."""
    text = " ".join(("" if value is None else str(value)).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return mdsafe.inline(text, github=True)


def md_link(label: str, url: str | None) -> str:
    """``[label](url)`` for an http(s) URL, else just the label (already escaped)."""
    if not url or urlsplit(url).scheme not in ("http", "https"):
        return label
    return f"[{label}]({quote(url, safe=':/?#[]@!$&*+,;=%-._~')})"


def md_block(value: Any, limit: int | None = None) -> str:
    """Untrusted multi-line text as literal Markdown paragraphs for GitHub
    (``toolkit.mdsafe.block``), cut to ``limit`` characters with "…"."""
    text = "" if value is None else str(value).replace("\r\n", "\n").replace("\r", "\n")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return mdsafe.block(text, github=True)


# --------------------------------------------------------------------------- the report

@dataclass(frozen=True)
class Since:
    kind: str  # "first" (no earlier handoff), "last" (the last handoff), "date" (--since)
    at: str | None  # "YYYY-MM-DD HH:MM UTC" or the --since date

    def describe(self) -> str:
        if self.kind == "date":
            return f"since {self.at}"
        if self.kind == "last":
            return f"since the handoff of {self.at}"
        return "since the start"


@dataclass(frozen=True)
class LedgerChange:
    entry_id: str
    file: str
    title: str | None
    confidence: str | None
    change: str  # "new", "confidence", "new or reinforced" (--since), "removed"
    old_confidence: str | None = None
    date: str | None = None

    @property
    def change_text(self) -> str:
        if self.change == "confidence":
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
    pending_total: int
    over_limit: list[dict[str, Any]]
    approaches: list[tuple[str, list[dict[str, Any]]]]  # (task, dead ends and no-gos)
    approaches_total: int
    state_path: Path
    next_state: dict[str, Any] = field(repr=False, default_factory=dict)
    goal: dict[str, Any] | None = None  # nagi-ledger's active goal (a ``goals`` row)

    @property
    def as_of(self) -> str | None:
        """The newest timestamp among the records shown: stable while the data is."""
        stamps: list[str] = []
        stamps += [str(r["updated_at"]) for r in self.slop if r.get("updated_at")]
        stamps += [str(r["ts"]) for r in self.dispatches if r.get("ts")]
        stamps += [str(r["verdict_ts"]) for r in self.dispatches if r.get("verdict_ts")]
        stamps += [str(a["ts"]) for _, rows in self.approaches for a in rows if a.get("ts")]
        stamps += [c.date for c in self.ledger if c.date]
        # Sources write "YYYY-MM-DD HH:MM:SS" or RFC 3339 ("…T…+00:00", UTC): compare alike.
        stamps = [x.replace("T", " ")[:19] for x in stamps]
        return max(stamps)[:16] if stamps else None


def project_key(cfg: Config) -> str:
    """Which project a published issue belongs to (the marker): publish.key or the folder."""
    from toolkit.slugs import slugify

    key = cfg.publish.get("key") if isinstance(cfg.publish, dict) else None
    return slugify(str(key)) if key else slugify(cfg.project_root.name, fallback="project")


def _fmt_time(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


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


def build_report(store: Store, cfg: Config, *, since: dt.date | None = None,
                 now: dt.datetime | None = None) -> HandoffReport:
    """Run the handoff queries and compare the ledger with the last handoff (or ``since``)."""
    from toolkit import queries

    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
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
    next_last = last or {"at": _fmt_time(now), "ledger": current}
    next_state = {"version": STATE_VERSION, "baseline": baseline, "last": next_last}

    if since is not None:
        since_info = Since("date", since.isoformat())
        ledger = _changes_since_date(entries, since, baseline)
    else:
        before = _confidences(baseline.get("ledger")) if baseline else None
        since_info = Since("last", str(baseline.get("at"))) if baseline else Since("first", None)
        ledger = _changes_since_state(entries, before, baseline)

    refuted_total, pending_total = queries.handoff_dispatch_totals(store)
    approaches = queries.handoff_dead_ends(store, limit=APPROACH_ROWS)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in approaches:
        by_task.setdefault(row["task"], []).append(row)
    return HandoffReport(
        project=cfg.project_root.name,
        key=project_key(cfg),
        since=since_info,
        site_url=cfg.site_url,
        slop=queries.handoff_open_slop(store),
        ledger=ledger,
        dispatches=queries.handoff_dispatches(store, limit=DISPATCH_ROWS),
        refuted_total=refuted_total,
        pending_total=pending_total,
        over_limit=queries.handoff_tasks_over_limit(store),
        approaches=list(by_task.items()),
        approaches_total=queries.handoff_dead_end_total(store),
        state_path=state_path,
        next_state=next_state,
        goal=_active_goal(store),
    )


def _active_goal(store: Store) -> dict[str, Any] | None:
    from toolkit.goals import active_goal

    return active_goal(store)


def _goal_line(goal: dict[str, Any], r: Redactor) -> str:
    """The active goal, its turn budget and when it was set: the report's first fact."""
    from toolkit.goals_report import budget

    created = goal.get("created")
    when = (created.strftime("%Y-%m-%d %H:%M UTC") if isinstance(created, dt.datetime)
            else goal.get("created_raw"))
    text = md_text(r(str(goal["goal"])) if goal.get("goal") is not None else "(no text)")
    return (f"**Active goal:** {text} ({md_text(r(budget(goal)))}"
            + (f", set {md_text(r(str(when)))}" if when else "") + ")")


def _confidences(ledger: Any) -> dict[str, Any]:
    if not isinstance(ledger, dict):
        return {}
    return {k: (v.get("confidence") if isinstance(v, dict) else v) for k, v in ledger.items()}


def _rank(confidence: str | None) -> int:
    return CONFIDENCE_ORDER.index(confidence) if confidence in CONFIDENCE_ORDER else 3


def _sorted_changes(changes: list[LedgerChange]) -> list[LedgerChange]:
    kind = {"confidence": 0, "new": 1, "new or reinforced": 2, "removed": 3}
    # Most important first, so cutting the section for the body limit drops the least.
    return sorted(changes, key=lambda c: (kind.get(c.change, 9), _rank(c.confidence),
                                          _neg_date(c.date), c.entry_id))


def _neg_date(date: str | None) -> str:
    # Newest first inside the sort key (dates are YYYY-MM-DD strings).
    return "".join(chr(0x10FFFF - ord(ch)) for ch in date) if date else "\U0010ffff"


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
            out.append(LedgerChange(eid, e["file"], e["title"], e["confidence"], "confidence",
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
                        baseline: dict[str, Any] | None) -> list[LedgerChange]:
    before = _confidences(baseline.get("ledger")) if baseline else {}
    out = []
    for e in entries:
        date = e.get("date")
        if not e.get("entry_id") or date is None or date < since:
            continue
        eid = e["entry_id"]
        # A Date on or after --since means written or reinforced since (reflect sets Date to
        # the day of the reinforcement); the confidence change is known against the baseline.
        if eid in before and before[eid] != e["confidence"]:
            change, old = "confidence", before[eid]
        else:
            change, old = "new or reinforced", None
        out.append(LedgerChange(eid, e["file"], e["title"], e["confidence"], change,
                                old_confidence=old, date=str(date)))
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
    return atomic_replace(path, data)


# --------------------------------------------------------------------------- rendering

@dataclass
class Section:
    """One part of the report: a heading, fixed lines, then items the body limit may cut.

    ``items`` are rendered items, most urgent first; ``sizes`` what each adds to the body.
    ``render_items(k)`` renders the first ``k`` items (default: joined with newlines).
    """

    key: str
    heading: str
    intro: list[str]
    items: list[str]
    noun: str  # what one item is, for the "left out" note ("rows", "entries", "tasks")
    empty: str = "_None._"
    outro: list[str] = field(default_factory=list)
    render_items: Callable[[int], str] | None = None
    sizes: list[int] | None = None

    def item_sizes(self) -> list[int]:
        return self.sizes if self.sizes is not None else [size(i) + 1 for i in self.items]

    def render(self, kept: int | None = None, note: str | None = None) -> str:
        kept = len(self.items) if kept is None else kept
        lines = [self.heading, ""]
        if not self.items:
            lines.append(self.empty)
        else:
            lines += self.intro
            if kept:
                lines.append(self.render_items(kept) if self.render_items
                             else "\n".join(self.items[:kept]))
            if note:
                lines += ["", note]
        if self.outro:
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


def sections(report: HandoffReport, redactor: Redactor | None = None, *,
             text_limit: int | None = None) -> list[Section]:
    """The report's sections, every value redacted, then escaped.

    ``text_limit`` caps long free text (slop descriptions) for the issue body.
    """
    r = redactor or _default_redactor()

    def t(value: Any, limit: int | None = CELL_MAX) -> str:
        return md_text(r(str(value)) if value is not None else None, limit)

    return [_slop_section(report, r, text_limit), _ledger_section(report, t),
            _dispatch_section(report, t), _over_limit_section(report, t),
            _approach_section(report, t)]


# -- open slop: CodeSmith's export layout (toolkit.slop_ops.export_markdown) ------------------

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


def render_slop_layout(entries: Sequence[Any], site_url: str | None = None) -> str:
    """Slop entries in CodeSmith's export layout, headings one level down (``### bucket``,
    ``#### id — title``), ids linked to the site. The layout is ``slop_ops.export_markdown``'s;
    its title and "Generated at" lines are left to the report's own header."""
    from toolkit.slop_ops import export_markdown

    text = export_markdown(list(entries), title="-", now=_FIXED_TIME, redact_output=False)
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    out = []
    links = {f"### {e.short_id} — ": site_link(site_url, "slop", e.short_id) for e in entries}
    for line in lines[start:]:
        # Only the layout's own lines start with "#": every field was escaped.
        if re.match(r"#{2,5} ", line):
            for prefix, url in links.items():
                if url and line.startswith(prefix):
                    line = f"### {md_link(prefix[4:-3], url)} — " + line[len(prefix):]
                    break
            line = "#" + line
        out.append(line)
    return "\n".join(out).rstrip("\n")


def _slop_section(report: HandoffReport, r: Redactor, text_limit: int | None) -> Section:
    rows = report.slop
    counts: dict[str, dict[str, int]] = {}
    for e in rows:
        bucket = str(e.get("bucket") or "[???]")
        counts.setdefault(bucket, {}).setdefault(str(e.get("severity")), 0)
        counts[bucket][str(e.get("severity"))] += 1
    intro = []
    if counts:
        intro += ["| Bucket | " + " | ".join(s.capitalize() for s in SEVERITY_ORDER)
                  + " | Total |", "|---|" + "---:|" * (len(SEVERITY_ORDER) + 1)]
        for bucket in sorted(counts):
            row = counts[bucket]
            cells = [str(row.get(s, 0)) for s in SEVERITY_ORDER]
            intro.append(f"| {md_text(r(bucket))} | " + " | ".join(cells)
                         + f" | {sum(row.values())} |")
        intro.append("")
    entries = [_escaped_slop_entry(e, r, text_limit) for e in rows]
    # Most urgent first (severity, then the report's order): what a cut keeps.
    urgent = sorted(range(len(rows)), key=lambda i: (_severity_rank(rows[i]), i))
    site = report.site_url

    def render_items(kept: int) -> str:
        return render_slop_layout([entries[i] for i in sorted(urgent[:kept])], site)

    items, sizes = [], []
    for i in urgent:
        one = render_slop_layout([entries[i]], site)
        two = render_slop_layout([entries[i], entries[i]], site)
        items.append(one)
        sizes.append(size(two) - size(one))  # what one more entry in a bucket adds
    return Section("slop", f"## Open slop ({len(rows)})", intro, items, "slop entries",
                   empty="_No open or in-progress slop._", render_items=render_items,
                   sizes=sizes)


def _severity_rank(row: dict[str, Any]) -> int:
    sev = row.get("severity")
    return SEVERITY_ORDER.index(sev) if sev in SEVERITY_ORDER else len(SEVERITY_ORDER)


# -- the other sections -------------------------------------------------------------------------

def _ledger_section(report: HandoffReport, t: Callable[..., str]) -> Section:
    rows = []
    for c in report.ledger:
        link = site_link(report.site_url, "ledger", c.entry_id) if c.change != "removed" else None
        title = md_link(t(c.title or "[???]"), link)
        rows.append(f"| {t(c.change_text)} | {t(c.confidence or '[???]')} | {t(c.file)} | "
                    f"{title} | {t(c.date or '')} |")
    heading = f"## Ledger changes {report.since.describe()} ({len(rows)})"
    intro = ["| Change | Confidence | File | Title | Date |", "|---|---|---|---|---|"]
    return Section("ledger", heading, intro, rows, "ledger rows",
                   empty="_No ledger entries added, removed or changed in confidence._")


def _dispatch_section(report: HandoffReport, t: Callable[..., str]) -> Section:
    rows = []
    for d in report.dispatches:
        verdict = "REFUTED" if d.get("verdict") == "REFUTED" else "PENDING"
        notes = d.get("verdict_notes") or d.get("brief_summary") or ""
        task = md_link(t(d.get("task"), 120),
                       site_link(report.site_url, "task", str(d.get("task") or "")))
        rows.append(f"| {t(d.get('id'))} | {t(d.get('ts'))} | {task} | "
                    f"{t(d.get('agent_type'))} / {t(d.get('model'))} | {verdict} | "
                    f"{t(notes, 160)} |")
    total = report.refuted_total + report.pending_total
    heading = (f"## Dispatches refuted or pending verification ({report.refuted_total} "
               f"refuted, {report.pending_total} pending)")
    intro = ["| ID | When (UTC) | Task | Agent / model | Verdict | Notes |",
             "|---:|---|---|---|---|---|"]
    outro = ([f"_The newest {len(rows)} of {total} are listed (refuted first)._"]
             if len(rows) < total else [])
    return Section("dispatches", heading, intro, rows, "dispatch rows",
                   empty="_No refuted or pending dispatches._", outro=outro)


def _over_limit_section(report: HandoffReport, t: Callable[..., str]) -> Section:
    rows = []
    for task in report.over_limit:
        name = md_link(t(task.get("task"), 160),
                       site_link(report.site_url, "task", str(task.get("task") or "")))
        rows.append(f"| {name} | {t(task.get('dispatch_count'))} | "
                    f"{t(task.get('retry_count'))} | {t(task.get('last_verdict') or 'PENDING')}"
                    f" | {t(task.get('last_dispatch'))} |")
    intro = ["| Task | Dispatches | Retries | Last verdict | Last dispatch (UTC) |",
             "|---|---:|---:|---|---|"]
    return Section("over_limit", f"## Tasks over the retry limit ({len(rows)})", intro, rows,
                   "tasks", empty="_No task has reached the retry limit (2 retries)._")


def _approach_section(report: HandoffReport, t: Callable[..., str]) -> Section:
    # One item per approach (tasks stay grouped), so a cut drops the oldest tasks' rows.
    rows: list[tuple[str, str]] = []
    for task, approaches in report.approaches:
        for a in approaches:
            kind = "Dead end" if a.get("outcome") == "DEAD_END" else "No-go"
            rows.append((task, f"- **{kind}** ({t(a.get('ts'))}): "
                               f"{t(a.get('approach'), 300)} — {t(a.get('reason'), 500)}"))

    def heading(task: str) -> str:
        return f"### {md_link(t(task, 160), site_link(report.site_url, 'task', task))}"

    def render_items(kept: int) -> str:
        out: list[str] = []
        current = None
        for task, line in rows[:kept]:
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
    return Section("approaches", f"## Dead ends and no-gos ({report.approaches_total})", [],
                   [line for _, line in rows], "dead ends and no-gos",
                   empty="_No dead ends or no-gos recorded._", outro=outro,
                   render_items=render_items, sizes=sizes)


def _summary(report: HandoffReport) -> str:
    return (f"**{len(report.slop)}** open slop · **{len(report.ledger)}** ledger changes · "
            f"**{report.refuted_total}** refuted and **{report.pending_total}** pending "
            f"dispatches · **{len(report.over_limit)}** tasks over the retry limit · "
            f"**{report.approaches_total}** dead ends and no-gos")


def _header(report: HandoffReport, r: Redactor, *, for_issue: bool) -> list[str]:
    project = md_text(r(report.project))
    lines = [] if for_issue else [f"# Agent handoff: {project}", ""]
    first = " (this is the first handoff)" if report.since.kind == "first" else ""
    lines.append(f"_Project {project}; ledger changes {report.since.describe()}{first}; "
                 f"data as of {report.as_of or 'no records'} (UTC). Secrets redacted._")
    link = site_link(report.site_url, "handoff")
    if link:
        lines.append(f"_Browse {md_link('the full report on the site', link)}._")
    if for_issue:
        lines.append("_Kept up to date by `toolkit publish`; edits here are overwritten._")
    if report.goal is not None:
        lines += ["", _goal_line(report.goal, r)]
    lines += ["", _summary(report), ""]
    return lines


def render_markdown(report: HandoffReport, *, redactor: Redactor | None = None) -> str:
    """The full report (``toolkit handoff``), redacted."""
    r = redactor or _default_redactor()
    parts = ["\n".join(_header(report, r, for_issue=False))]
    parts += [s.render() for s in sections(report, r)]
    return r("\n".join(parts).rstrip("\n") + "\n")


def default_title(report: HandoffReport) -> str:
    return f"Agent handoff: {report.project}"


ISSUE_TEXT_LIMIT = 4000  # one slop description in the issue; the full report has all of it


def render_issue(report: HandoffReport, *, title: str | None = None,
                 redactor: Redactor | None = None, limit: int = 65_536,
                 marker: str = "") -> RenderedDoc:
    """Title and body for the issue: redacted, and cut to ``limit`` characters if needed."""
    r = redactor or _default_redactor()
    issue_title = " ".join(r(title or default_title(report)).split())
    issue_title = "".join(ch for ch in issue_title  # no bidi overrides or zero-width tricks
                          if unicodedata.category(ch) not in ("Cc", "Cf"))
    if len(issue_title) > 256:
        issue_title = issue_title[:255] + "…"
    head = ([marker] if marker else []) + _header(report, r, for_issue=True)
    link = site_link(report.site_url, "handoff")
    full = (f"see {md_link('the full report', link)}" if link
            else "run `toolkit handoff` in the project for the full report")
    body, left_out = fit_body("\n".join(head), sections(report, r, text_limit=ISSUE_TEXT_LIMIT),
                              limit=limit, full_report=full)
    redacted = r(body)
    if size(redacted) > limit:  # redaction grew a value that spans two fields (rare)
        redacted = _hard_cut(redacted, limit)
        left_out = [*left_out, "the end of the report"]
    return RenderedDoc(title=issue_title, body=redacted, marker=marker, left_out=left_out)


# --------------------------------------------------------------------------- the body limit

def size(text: str) -> int:
    """Length as GitHub may count it: UTF-16 code units (>= code points; multibyte-safe)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


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
                  redactor: Redactor | None = None) -> str:
    """``toolkit handoff``: build, render (redacted), write to ``output`` if given, and
    remember this handoff (not with ``since``, which is a one-off view). Returns the text."""
    report = build_report(store, cfg, since=since, now=now)
    text = render_markdown(report, redactor=redactor)
    if output is not None:
        from toolkit.safewrite import atomic_replace

        atomic_replace(output, text.encode("utf-8"))
    if since is None:
        record_state(cfg, report)
    return text
