"""The checks where people look: the site's Checks page and the dashboard's badge.

The results come from :func:`toolkit.checks.run_configured`, run by the command before the
store was opened for writing; ``toolkit.site`` hands :func:`builder` to
:func:`toolkit.reports.build_site_content` and puts :func:`badge` on the dashboard. Every
cell goes through :func:`toolkit.checks.output.cell` (made visible, secrets redacted) before
the templates escape it; the secrets check's rows hold a place and a family, never a secret.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from toolkit.checks.core import Result
from toolkit.pages import Deferred, Field, Page, Ref, Table, ledger_entry_path, task_path

if TYPE_CHECKING:
    from toolkit.reports import PageBuilder, SiteData
    from toolkit.store import Store

PATH = "checks/index.md"
STATUS_ORDER = ("fail", "error", "warn", "pass")


@dataclass(frozen=True)
class Badge:
    """The dashboard's line: "Checks: 2 failing" (or "all 9 passing"), linked to the page."""

    text: str
    status: str  # fail, warn or pass: the worst of the results
    link: Ref


@dataclass(frozen=True)
class CheckView:
    name: str
    status: str  # PASS, FAIL, WARN, ERROR
    summary: list[Field]  # what fails, why, expects, level, tags, origin
    rows: Table | None  # the first failing rows (cells linked to their pages)
    more: int  # failing rows not shown
    message: str | None  # why it could not run


@dataclass(kw_only=True)
class ChecksPage(Page):
    template: ClassVar[str] = "checks.md.j2"
    wide: bool = True
    overview: Table = field(default_factory=lambda: Table((), []))
    checks: list[CheckView] = field(default_factory=list)


def row_target(columns: Sequence[str], row: Sequence[Any]) -> tuple[str, str] | None:
    """What a failing row is about, as a handoff link kind and key (``task`` or ``slop``),
    from its column names; None when it names neither."""
    values = dict(zip(columns, row, strict=False))
    if isinstance(values.get("task"), str):
        return "task", values["task"]
    if isinstance(values.get("short_id"), str):
        return "slop", values["short_id"]
    return None


def badge(results: Sequence[Result]) -> Badge:
    failing = sum(r.status in ("fail", "error") for r in results)
    warning = sum(r.status == "warn" for r in results)
    if failing:
        text, status = f"Checks: {failing} failing", "fail"
        if warning:
            text += f", {warning} warning" + ("" if warning == 1 else "s")
    elif warning:
        text, status = f"Checks: {warning} warning" + ("" if warning == 1 else "s"), "warn"
    else:
        text, status = f"Checks: all {len(results)} passing", "pass"
    return Badge(text, status, Ref(text, PATH))


def put_badge(pages: Sequence[Page | Deferred], results: Sequence[Result] | None) -> None:
    """The badge on the dashboard (the first page), when checks ran."""
    from toolkit.reports import HomePage

    for page in pages:
        if isinstance(page, HomePage) and results is not None:
            page.checks = badge(results)


def builder(results: Sequence[Result]) -> PageBuilder:
    """A page builder adding the Checks page for these results."""
    def build(store: Store, data: SiteData) -> list[Page]:
        return [checks_page(results, data)]
    return build


def checks_page(results: Sequence[Result], d: SiteData) -> ChecksPage:
    from toolkit.checks.output import cell

    ordered = sorted(results, key=lambda r: (STATUS_ORDER.index(r.status), r.check.name))
    target = _targets(d)
    overview = Table(("Check", "Status", "Level", "Failing rows"), [
        (cell(r.check.name), r.status.upper(), r.check.level, r.count)
        for r in ordered], empty="No checks ran.")
    views = []
    for r in ordered:
        what = cell(_with_thresholds(r.check.description, r.check.thresholds))
        summary = [Field("What fails", what),
                   *([Field("Why", r.check.why)] if r.check.origin == "built-in" else []),
                   Field("Expects", str(r.check.expect)), Field("Level", r.check.level),
                   Field("Tags", ", ".join(r.check.tags)), Field("From", r.check.origin)]
        rows = None
        if r.rows:
            rows = Table(tuple(cell(c) for c in r.columns),
                         [_row(r.columns, row, target, d) for row in r.rows])
        views.append(CheckView(name=cell(r.check.name), status=r.status.upper(),
                               summary=summary, rows=rows,
                               more=max(0, r.count - len(r.rows)) if r.rows else 0,
                               message=cell(r.message) if r.message else None))
    b = badge(results)
    return ChecksPage(path=PATH, title="Checks", nav=("Checks",), overview=overview,
                      checks=views, intro=f"{b.text}. The results of toolkit check when the "
                      "site was built, failing checks first; each failing row links to its "
                      "page where the site has one.")


def _with_thresholds(text: str, thresholds: dict[str, Any]) -> str:
    """A description's `name` marks replaced by the threshold's value ("after 7 days")."""
    for key, value in thresholds.items():
        text = text.replace(f"`{key}`", str(value))
    return text


def _targets(d: SiteData) -> dict[tuple[str, str], str]:
    """(kind, key) -> page path: tasks, slop short ids, ledger entries by path:line."""
    from toolkit.reports import slop_short_paths

    out: dict[tuple[str, str], str] = {}
    out.update({("task", t): task_path(s) for t, s in d.task_slug.items()})
    out.update({("slop", short): path for short, path in slop_short_paths(d).items()})
    out.update({("place", f"{e['path']}:{e['line']}"): ledger_entry_path(e["entry_id"])
                for e in d.ledger if e.get("path") and e.get("line") is not None})
    return out


def _row(columns: Sequence[str], row: Sequence[Any], target: dict[tuple[str, str], str],
         d: SiteData) -> tuple[Any, ...]:
    """A failing row's cells, shown (paths relative to the project), the one that names a
    task, a slop entry or a ledger entry linked to its page."""
    from toolkit.checks.output import cell

    found = row_target(columns, row)
    values = dict(zip(columns, row, strict=False))
    if "path" in values and "line" in values:
        place = f"{values['path']}:{values['line']}"
    else:
        place = str(values.get("place") or "")
    from toolkit.checks.output import shown_row

    out: list[Any] = []
    for name, value in zip(columns, shown_row(row, d.roots), strict=False):
        shown = cell(value)
        path = None
        if found and name == ("task" if found[0] == "task" else "short_id"):
            path = target.get(found)
        elif name in ("path", "place", "title"):
            path = target.get(("place", place))
        out.append(Ref(shown, path) if path and shown else shown)
    return tuple(out)
