"""The fleet site's pages (``toolkit fleet build-site``), from the fleet store.

One site over every project, built by the project site's machinery (``toolkit.site.render_site``:
escaping, redaction, link checks, strict MkDocs): an overview with one card (a row) per
project, a page per project, knowledge that recurs across projects' ledgers, retries and
verdicts by project, agent type and model, and debt by project. Rows with no project (the
dispatches and approaches of nagi-ledger, which records none, and actions or slop entries
without one) are shown as "(not assigned)".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from toolkit.fleet import NEAR_SAME, UNASSIGNED, project_rows, recurring_knowledge
from toolkit.pages import Deferred, Field, Page, Ref, Table
from toolkit.records import RETRY_LIMIT
from toolkit.slugs import unique_slugs

if TYPE_CHECKING:
    from toolkit.reports import SiteContent
    from toolkit.site import BuildResult, Progress
    from toolkit.store import Store

UNASSIGNED_PAGE = "unassigned.md"


@dataclass(frozen=True)
class Section:
    """A part of a fleet page: a heading and a line we write, then a table or fields."""

    heading: str
    text: str = ""
    table: Table | None = None
    fields: tuple[Field, ...] = ()


@dataclass(kw_only=True)
class FleetPage(Page):
    template: ClassVar[str] = "fleet.md.j2"
    sections: list[Section]


# dispatches with the project they belong to: none, nagi-ledger records no project for them
_DISPATCHES = "(SELECT CAST(NULL AS VARCHAR) AS project, * FROM dispatches)"

_TASKS = f"""
SELECT project, task, count(*) AS dispatches, greatest(count(*) - 1, 0) AS retries,
       greatest(count(*) - 1, 0) >= {RETRY_LIMIT} AS over_limit,
       count(*) FILTER (WHERE verdict IS NULL) AS pending
FROM {_DISPATCHES} GROUP BY project, task
"""

_BY_AGENT = f"""
WITH t AS ({_TASKS})
SELECT d.project, d.agent_type, d.model, count(*) AS dispatches,
       count(DISTINCT d.task) AS tasks, count(*) - count(DISTINCT d.task) AS retries,
       count(DISTINCT d.task) FILTER (WHERE t.over_limit) AS over_limit,
       count(*) FILTER (WHERE d.verdict = 'CONFIRMED') AS confirmed,
       count(*) FILTER (WHERE d.verdict = 'REFUTED') AS refuted,
       count(*) FILTER (WHERE d.verdict = 'PARTIAL') AS partial,
       count(*) FILTER (WHERE d.verdict IS NULL) AS pending
FROM {_DISPATCHES} d JOIN t ON t.task = d.task AND t.project IS NOT DISTINCT FROM d.project
GROUP BY ALL ORDER BY d.project NULLS LAST, dispatches DESC, d.agent_type, d.model
"""

# entries per project and status, and the open critical or high ones
_DEBT = """
SELECT project, nullif(status, '') AS status, count(*) AS n,
       count(*) FILTER (WHERE status IN ('open', 'in_progress')
                        AND severity IN ('critical', 'high')) AS open_severe
FROM fleet_slop GROUP BY ALL
"""
_STATUS_LABELS = {"open": "Open", "in_progress": "In progress", "resolved": "Resolved",
                  "accepted": "Accepted", "wont_fix": "Won't fix"}


def _debt_table(store: Store, ref: Callable[[str | None], Any]) -> Table:
    """Debt by project: a column per status, CodeSmith's five and any other an entry has (as
    `toolkit slop` lays them out), so each row's statuses add up to its total."""
    from toolkit.records import SLOP_STATUSES
    from toolkit.reports import ordered_values

    counts: dict[tuple[str | None, str | None], int] = {}
    severe: dict[str | None, int] = {}
    for project, status, n, open_severe in store.fetch(_DEBT)[1]:
        counts[(project, status)] = int(n)
        severe[project] = severe.get(project, 0) + int(open_severe)
    statuses = ordered_values({s for _, s in counts} | set(SLOP_STATUSES), SLOP_STATUSES)
    projects = sorted(severe, key=lambda p: (p is None, p or ""))
    return Table(
        ("Project", *(_STATUS_LABELS.get(s, "[???]" if s is None else str(s)) for s in statuses),
         "Open severe", "Total"),
        [(ref(p), *(counts.get((p, s), 0) for s in statuses), severe[p],
          sum(counts.get((p, s), 0) for s in statuses)) for p in projects],
        empty="The slop ledger has no entries.")


def _shown(project: str | None) -> str:
    return project if project is not None else UNASSIGNED


def card_numbers(store: Store) -> dict[str | None, dict[str, int]]:
    """Per name in the records (a fleet project's ``records_name``; None: not assigned):
    tasks over the retry limit, pending verdicts, open debt (open or in progress) and
    actions."""
    out: dict[str | None, dict[str, int]] = {}

    def slot(p: str | None) -> dict[str, int]:
        return out.setdefault(p, {"over_limit": 0, "pending": 0, "open_debt": 0, "actions": 0})

    for project, over, pending in store.fetch(
            f"SELECT project, count(*) FILTER (WHERE over_limit), sum(pending) FROM ({_TASKS}) "
            "GROUP BY project")[1]:
        slot(project).update(over_limit=int(over or 0), pending=int(pending or 0))
    for project, n in store.fetch(
            "SELECT project, count(*) FROM fleet_slop WHERE status IN ('open', 'in_progress') "
            "GROUP BY project")[1]:
        slot(project)["open_debt"] = int(n)
    for project, n in store.fetch("SELECT project, count(*) FROM actions GROUP BY project")[1]:
        slot(project)["actions"] = int(n)
    return out


def build_fleet_content(store: Store, *, home: Path, today: str) -> SiteContent:
    """Every page of the fleet site."""
    from toolkit.reports import SiteContent

    projects = project_rows(store)
    # a page per row: a folder the fleet names as the records name another project is
    # listed beside that project, under the same name
    pages_of = [Ref(p["name"], f"projects/{slug}.md") for p, slug in zip(
        projects, unique_slugs([p["name"] for p in projects], fallback="project"),
        strict=True)]
    # fleet_entries carry a folder's fleet name; the records, a project's records_name
    by_folder = {p["name"]: r for p, r in zip(projects, pages_of, strict=True) if p["path"]}
    by_record: dict[str, Ref] = {}
    for p, r in zip(projects, pages_of, strict=True):
        by_record.setdefault(p["records_name"], r)

    def ref(project: str | None) -> Any:
        return by_record.get(project, Ref(UNASSIGNED, UNASSIGNED_PAGE)) \
            if project is not None else Ref(UNASSIGNED, UNASSIGNED_PAGE)

    roots = [(home, "~/")]
    cards = card_numbers(store)
    zero = {"over_limit": 0, "pending": 0, "open_debt": 0, "actions": 0}
    columns = ("Project", "Status", "Vault", "Entries (high / medium / low)",
               "Over retry limit", "Pending verdicts", "Open debt", "Last activity")
    rows: list[tuple[Any, ...]] = []
    for p, page in zip(projects, pages_of, strict=True):
        c = cards.get(p["records_name"], zero)
        rows.append((page, p["status"], "found" if p["vault"] else "not found",
                     _by_confidence(p), c["over_limit"], c["pending"], c["open_debt"],
                     p["last_activity"]))
    u = cards.get(None, zero)
    rows.append((Ref(UNASSIGNED, UNASSIGNED_PAGE), "", "", None, u["over_limit"],
                 u["pending"], u["open_debt"], None))
    recurring = recurring_knowledge(store.fetch_dicts(
        "SELECT project, entry_id, file, title, confidence FROM fleet_entries"))
    pages: list[Page | Deferred] = [FleetPage(
        path="index.md", title="Fleet overview", nav=("Overview",), wide=True,
        intro=f"Built on {today}. One card per project: its ledger entries by confidence, "
              "its tasks over the retry limit, its pending verdicts, its open debt and its "
              "last activity.",
        sections=[
            Section("Projects", f"{len(projects)} projects. Dispatches carry no project in "
                    "nagi-ledger, so retries and verdicts count under (not assigned).",
                    Table(columns, rows, empty="No project is known.")),
            Section("Across the fleet", "", Table(("Page", "What it shows"), [
                (Ref("Recurring knowledge", "recurring.md"),
                 f"titles found in more than one project's ledger: {len(recurring)}"),
                (Ref("Retries and verdicts", "dispatches.md"),
                 "by project, agent type and model"),
                (Ref("Debt by project", "debt.md"), "the slop ledger's entries by status")]))])]
    for p, page in zip(projects, pages_of, strict=True):
        pages.append(_project_page(store, p, page.path,
                                   cards.get(p["records_name"], zero), roots))
    pages.append(_unassigned_page(store, u))
    # fleet_entries carry the fleet's name
    pages.append(_recurring_page(recurring, lambda name: by_folder[name]))
    pages.append(FleetPage(
        path="dispatches.md", title="Retries and verdicts", nav=("Retries and verdicts",),
        wide=True, intro="Dispatches by project, agent type and model. Tasks: the tasks "
                         "dispatched to that agent type and model; retries: their dispatches "
                         "beyond one per task. A task is over the retry limit after "
                         f"{RETRY_LIMIT} retries (nagi-ledger's rule), counting every agent's "
                         "dispatches: a task sent to several agents is in each one's row, so "
                         "the last column counts the troubled tasks an agent was sent to, and "
                         "its rows do not add up to the fleet's tasks over the limit.",
        sections=[Section("By project, agent type and model", "", Table(
            ("Project", "Agent type", "Model", "Dispatches", "Tasks", "Retries",
             "Of them over the retry limit", "Confirmed", "Refuted", "Partial", "Pending"),
            [(ref(r[0]), *r[1:]) for r in store.fetch(_BY_AGENT)[1]],
            empty="No dispatch was recorded."))]))
    pages.append(FleetPage(
        path="debt.md", title="Debt by project", nav=("Debt by project",), wide=True,
        intro="The slop ledger's entries by project and status; open severe: critical or "
              "high, open or in progress.",
        sections=[Section("By project", "", _debt_table(store, ref))]))
    return SiteContent(pages=pages, charts=[], downloads=[])


def _by_confidence(p: Mapping[str, Any]) -> str:
    """The card's entries by confidence; those of no known confidence as the dashboard's
    ``[???]`` column counts them, when there are any."""
    conf = p["entries_by_confidence"]
    unknown = f" + {conf['unknown']} [???]" if conf["unknown"] else ""
    return f"{conf['high']} / {conf['medium']} / {conf['low']}{unknown}"


def _project_page(store: Store, p: Mapping[str, Any], path: str, card: Mapping[str, int],
                  roots: Sequence[tuple[Path, str]]) -> FleetPage:
    from toolkit.reports import display_path

    fields = (
        Field("Name", p["name"]), Field("Folder", display_path(p["path"], roots) or None),
        Field("Status", p["status"]), Field("Vault", "found" if p["vault"] else "not found"),
        Field("Known from", ", ".join(p["origins"])),
        Field("Entries (high / medium / low)", _by_confidence(p)),
        Field("Tasks over the retry limit", card["over_limit"]),
        Field("Pending verdicts", card["pending"]), Field("Open debt", card["open_debt"]),
        Field("Actions", card["actions"]), Field("Last session", p["last_session"]),
        Field("Last audit action", p["last_action"]),
        Field("Last slop change", p["last_slop_change"]),
        Field("Last activity", p["last_activity"]))
    entries = store.fetch(
        "SELECT title, file, category, confidence, date FROM fleet_entries WHERE project = ? "
        "ORDER BY CASE confidence WHEN 'high' THEN 0 WHEN 'medium' THEN 1 ELSE 2 END, "
        "date DESC NULLS LAST, file, title",
        [p["name"] if p["path"] is not None else None])[1]  # only a folder has a vault
    return FleetPage(
        path=path, title=p["name"], wide=True, intro="A project of the fleet.",
        sections=[Section("Card", "", fields=fields),
                  Section("Ledger entries", "", Table(
                      ("Title", "File", "Category", "Confidence", "Date"), entries,
                      empty="No ledger entries (no vault, or an empty ledger).")),
                  _debt_section(store, "project = ?", [p["records_name"]]),
                  _actions_section(store, "project = ?", [p["records_name"]])])


def _debt_section(store: Store, where: str, params: list[Any]) -> Section:
    return Section("Open debt", "", Table(
        ("Title", "Bucket", "Severity", "Status", "Updated"),
        store.fetch(f"SELECT title, bucket, severity, status, "
                    f"strftime(timezone('UTC', updated_at), '%Y-%m-%d %H:%M:%S') FROM fleet_slop "
                    f"WHERE {where} AND status IN ('open', 'in_progress') "
                    "ORDER BY updated_at DESC, title", params)[1],
        empty="No open debt."))


def _actions_section(store: Store, where: str, params: list[Any]) -> Section:
    return Section("Audit actions by tier", "", Table(
        ("Tier", "Actions", "Last action"),
        store.fetch(f"SELECT tier, count(*), strftime(max(ts), '%Y-%m-%d %H:%M:%S') "
                    f"FROM actions WHERE {where} GROUP BY tier ORDER BY tier", params)[1],
        empty="No audit actions."))


def _unassigned_page(store: Store, card: Mapping[str, int]) -> FleetPage:
    return FleetPage(
        path=UNASSIGNED_PAGE, title="Not assigned to a project", wide=True,
        intro="Records that name no project: every dispatch (nagi-ledger records no project "
              "for them), and actions and slop entries without one.",
        sections=[Section("Card", "", fields=(
            Field("Tasks over the retry limit", card["over_limit"]),
            Field("Pending verdicts", card["pending"]), Field("Open debt", card["open_debt"]),
            Field("Actions", card["actions"]))),
            _debt_section(store, "project IS NULL", []),
            _actions_section(store, "project IS NULL", [])])


def _recurring_page(recurring: Sequence[Any], ref: Any) -> FleetPage:
    rows = [(r.title, len(r.projects), ref(e["project"]), e["title"], e["file"],
             e["confidence"]) for r in recurring for e in r.entries]
    return FleetPage(
        path="recurring.md", title="Recurring knowledge", nav=("Recurring knowledge",),
        wide=True,
        intro="Entries with the same or near-same title in several projects' ledgers: "
              "candidates for a user-wide ledger. Titles are compared casefolded, with "
              "punctuation and spaces collapsed; near-same means a similarity of at least "
              f"{NEAR_SAME:g} out of 100 (rapidfuzz's ratio, the normalised Indel "
              "similarity).",
        sections=[Section("Candidates", f"{len(recurring)} titles.", Table(
            ("Title", "Projects", "Project", "Entry", "File", "Confidence"), rows,
            empty="No title recurs across projects."))])


def build_fleet_site(store: Store, *, out: Path, home: Path, clean: bool = False,
                     build_time: dt.datetime | None = None, redact: bool = False,
                     progress: Progress | None = None) -> BuildResult:
    """Build the fleet site into ``out`` (Markdown in ``<out>.build``) with the project
    site's machinery (:func:`toolkit.site.render_site`)."""
    from toolkit import clock
    from toolkit.site import Made, render_site

    site = Path(out).expanduser().resolve()
    when = build_time or clock.now()

    def make(source: Store, site_name: str, build: Path, mark: Callable[[str], None]) -> Made:
        content = build_fleet_content(source, home=home, today=when.date().isoformat())
        mark("queries")
        return Made(content)

    return render_site(store, make, site=site, build=site.parent / (site.name + ".build"),
                       site_name="Agent Ledger: fleet", clean=clean, build_time=when,
                       progress=progress, redact=redact)
