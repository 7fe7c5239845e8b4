"""The site's handoff page: the report of ``toolkit handoff`` at the build's clock.

It lives above both ``toolkit.reports`` (the site's pages) and ``toolkit.handoff`` (which
builds its tables from ``reports``), so neither imports the other back; ``toolkit.site``
hands :func:`builder` to :func:`toolkit.reports.build_site_content`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit import handoff
from toolkit.handoff import Links
from toolkit.pages import relative_link, task_path
from toolkit.reports import HandoffPage, Page, PageBuilder, SiteData, slop_short_paths

if TYPE_CHECKING:
    from toolkit.checks import Result
    from toolkit.config import Config
    from toolkit.store import Store


def builder(cfg: Config, build_time: dt.datetime | None,
            checks: Sequence[Result] | None = None) -> PageBuilder:
    """A page builder adding the handoff page for this project's config and build time (and
    the check results the build was given)."""
    def build(store: Store, data: SiteData) -> list[Page]:
        return [handoff_page(store, data, cfg, build_time, checks)]
    return build


def handoff_page(store: Store, d: SiteData, cfg: Config, build_time: dt.datetime | None,
                 checks: Sequence[Result] | None = None) -> HandoffPage:
    """The handoff page: the same report as ``toolkit handoff`` (same sections, same
    comparison with the last handoff, which it does not record), links relative to the
    page, the collapsed blocks open (the site's Markdown takes no raw HTML), the first
    ``handoff.SITE_URGENT_ROWS`` critical and high slop items listed and the rest linked."""
    from markupsafe import Markup

    # the build's clock (the report shows the data's time; "now" would only stamp a state
    # file, which the site never writes)
    report = handoff.build_report(
        store, cfg, now=build_time.replace(tzinfo=None) if build_time is not None else None,
        checks=checks)
    text = handoff.render_markdown(report, links=_site_links(d), for_site=True)
    return HandoffPage(path="handoff/index.md", title="Handoff", nav=("Handoff",),
                       intro="What the next person (or agent) must know first; the same "
                             "report as the handoff command prints and publish posts.",
                       report=Markup(text))


def _site_links(d: SiteData) -> Links:
    here = "handoff/index.md"
    slop_by_short = slop_short_paths(d)

    class SiteLinks(Links):
        def to(self, kind: str, key: str = "") -> str | None:
            path = {"ledger": d.entry_path.get(key), "slop": slop_by_short.get(key),
                    "task": (task_path(d.task_slug[key]) if key in d.task_slug else None)
                    }.get(kind)
            return self.page(path) if path else None

        def page(self, path: str) -> str | None:
            try:
                return relative_link(here, path)
            except ValueError:  # not a generated page's path: no link
                return None

        def task_path(self, task: str) -> str:
            slug = d.task_slug.get(task)
            return task_path(slug) if slug else "audit/tasks/index.md"

    return SiteLinks(None)
