"""The history feature's part of the site (called from ``toolkit.reports``):

* the ledger **history page** (``ledger/history.md``): the ledger's growth by confidence over
  time as a chart and a table (the main timeline: git commits, then uncommitted working
  files), the change log (newest first, each entry linked to its page when it still exists),
  and the archive/backup copies and turn-snapshot versions;
* the **turn activity** shown on each turn's page: per turn, its time window, files and
  lines changed, and the audit actions and dispatches recorded inside that window.

Values stay raw here, as everywhere in the reports layer: the templates escape them.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from toolkit.charts import ChartSpec, Series
from toolkit.pages import (
    CONFIDENCE_COLORS,
    Page,
    Ref,
    Table,
    task_path,
)

if TYPE_CHECKING:
    from toolkit.reports import SiteData
    from toolkit.store import Store

CHANGE_LOG_LIMIT = 500  # rows of the change log on the page (all are in the data download)
CHART_POINTS = 60  # points of the growth chart at most (the last version of each period)
ACTIVITY_PER_TURN = 50  # audit actions (and dispatches) listed per turn at most
NOW = "now (not committed)"  # the working files' time: their mtime moves with every edit


@dataclass(kw_only=True)
class HistoryPage(Page):
    template: ClassVar[str] = "history.md.j2"
    versions: int
    chart: str | None
    growth: Table
    changes: Table
    shown_changes: int
    total_changes: int
    others: Table


@dataclass(frozen=True)
class TurnActivity:
    """What the snapshot timeline adds to one turn."""

    summary: str  # "2026-05-04 13:07:40 → 13:09:40 · 3 files changed, +6 −1 · ..." (ours)
    activity: Table  # audit actions and dispatches inside the turn's window


def _when(source: str, ts: Any) -> str:
    if source == "working":
        return NOW
    return ts.strftime("%Y-%m-%d %H:%M") if isinstance(ts, dt.datetime) else str(ts or "")


def _version_cell(v: Any) -> str:
    if v.source == "git":
        return f"{v.short_ref} {v.subject or ''}".strip()
    return v.short_ref


def _changes_text(counts: dict[str, int]) -> str:
    from toolkit.history import CHANGE_KINDS

    return ", ".join(f"{counts[k]} {k}" for k in CHANGE_KINDS if counts.get(k)) or "no change"


def _chart_points(versions: list[Any]) -> list[Any]:
    """The last version of each day (the working files last), at most CHART_POINTS of them."""
    by_day: dict[str, Any] = {}
    for v in versions:
        by_day[_when(v.source, v.ts)[:10]] = v
    points = list(by_day.values())
    if len(points) > CHART_POINTS:
        step = len(points) / CHART_POINTS
        points = [points[min(len(points) - 1, int((i + 1) * step) - 1)]
                  for i in range(CHART_POINTS)]
    return points


def history_pages(store: Store, d: SiteData, charts: list[ChartSpec]) -> list[Page]:
    """The ledger history page (none when the store has no history tables)."""
    from toolkit.history import change_count, change_log, growth

    if "ledger_versions" not in d.tables:
        return []
    versions = growth(store, timelines=("main",))
    others = growth(store, timelines=("copies", "snapshots"))
    chart = None
    points = _chart_points(versions)
    if points:
        chart = "ledger-growth"
        charts.append(ChartSpec(
            name=chart, title="Ledger entries by confidence over time",
            # the working files stand at the build's today
            labels=tuple(d.today.isoformat() if v.source == "working"
                         else _when(v.source, v.ts)[:10] for v in points),
            time=True, area=True,
            series=tuple(Series(c, tuple(float(getattr(v, c)) for v in points),
                                CONFIDENCE_COLORS[c]) for c in ("high", "medium", "low")),
            ylabel="entries"))
    growth_rows = [(_when(v.source, v.ts), v.source, _version_cell(v), v.high, v.medium, v.low,
                    v.unrated or None, v.entries, _changes_text(v.changes))
                   for v in reversed(versions)]
    # the newest CHANGE_LOG_LIMIT are shown: only they are read (each is an object)
    log = change_log(store, timelines=("main",), limit=CHANGE_LOG_LIMIT)
    # history entry key -> page path of the current entry with that key
    refs = {key: d.entry_path[entry_id] for entry_id, key in d.entry_key.items()}

    def arrow(old: Any, new: Any) -> str:
        if old is None or old == new:
            return "" if new is None else str(new)
        return f"{old} → {new if new is not None else '(removed)'}"

    change_rows = []
    for c in log:
        title = c.title if c.title else "[???]"
        target = refs.get(c.entry_key)
        change_rows.append((
            _when(c.source, c.ts), c.change, Ref(title, target) if target else title,
            f"{c.file}.md", arrow(c.old_confidence, c.new_confidence),
            arrow(c.old_reflections, c.new_reflections),
            f"{c.short_ref} {c.subject or ''}".strip() if c.source == "git" else c.short_ref))
    other_rows = [(_when(v.source, v.ts), v.source, v.short_ref, v.high, v.medium, v.low,
                   v.unrated or None, v.entries, _changes_text(v.changes)) for v in others]
    return [HistoryPage(
        path="ledger/history.md", title="Ledger history", nav=("Ledger", "History"),
        intro="How the Smith Ledger grew and changed: every git commit that changed a ledger "
              "file (each compared with its parent commit), then uncommitted working files; "
              "copies and turn snapshots below.",
        versions=len(versions), chart=chart,
        growth=Table(("When", "Source", "Version", "High", "Medium", "Low", "Unrated", "Total",
                      "Changes"), growth_rows, key="Version",
                     empty="No past versions: the ledger is not in a git repository with "
                           "commits."),
        changes=Table(("When", "Change", "Entry", "File", "Confidence", "Reflections",
                       "Version"), change_rows, empty="No changes recorded.", key="Version"),
        shown_changes=len(change_rows), total_changes=change_count(store, timelines=("main",)),
        others=Table(("When", "Source", "Version", "High", "Medium", "Low", "Unrated", "Total",
                      "Changes against the committed ledger or the previous copy"), other_rows,
                     key="Version",
                     empty="No archive or backup copies, and no turn snapshot holds the "
                           "vault."))]


def turn_activity(store: Store, d: SiteData) -> dict[tuple[str, str], TurnActivity]:
    """(repo, turn_key) -> the turn's window, files, lines and audit activity."""
    from toolkit.history import turn_activity_rows, turn_summaries

    rows_by_turn: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in turn_activity_rows(store, per_turn=ACTIVITY_PER_TURN):
        rows_by_turn[(r["repo"], r["turn_key"])].append(r)
    out = {}
    for t in turn_summaries(store):
        key = (t["repo"], t["turn_key"])
        started, ended = t["started"], t["ended"]
        window = (f"{started:%Y-%m-%d %H:%M:%S} → "
                  f"{ended:%H:%M:%S}" if started and ended and started.date() == ended.date()
                  else f"{started} → {ended}")
        summary = (f"{window} · {t['files_changed']} file"
                   f"{'s' if t['files_changed'] != 1 else ''} changed, +{t['lines_added']} "
                   f"−{t['lines_deleted']} · {t['actions']} audit action"
                   f"{'s' if t['actions'] != 1 else ''}, {t['dispatches']} dispatch"
                   f"{'es' if t['dispatches'] != 1 else ''} in this window")
        cells = []
        for r in rows_by_turn.get(key, []):
            ts = r["ts"].strftime("%H:%M:%S") if isinstance(r["ts"], dt.datetime) else r["ts"]
            if r["kind"] == "action":
                cells.append((ts, "action", f"tier {r['tier']} · {r['category'] or '[???]'}",
                              r["text"]))
            else:
                slug = d.task_slug.get(r["text"]) if r["text"] is not None else None
                task = Ref(r["text"], task_path(slug)) if slug else r["text"]
                cells.append((ts, "dispatch", f"{r['agent']} → {r['verdict']}", task))
        more = [f"{r['n'] - ACTIVITY_PER_TURN} more {r['kind']}s" for r in
                {r["kind"]: r for r in rows_by_turn.get(key, [])}.values()
                if r["n"] > ACTIVITY_PER_TURN]
        out[key] = TurnActivity(summary=summary + (f" ({'; '.join(more)} not listed)"
                                                   if more else ""),
                                activity=Table(("Time", "Kind", "What", "Detail"), cells,
                                               empty="No audit action or dispatch recorded "
                                                     "during this turn."))
    return out
