"""The theme's work that is the same on many pages, done once per build, with the same bytes.

Material prints the whole navigation (``partials/nav.html``) in every page. What it prints
depends on the page only through the page's place in the nav (the items marked active, the
table of contents of a nav page) and the page's URL (every link in it is relative to that
URL). A page that is not in the nav (an entry page) has no active item and no table of
contents in the nav; and when no nav page lies under its URL, every link in the nav is
``../`` followed by the link from the page's parent folder. So all such pages of one folder get
the same nav HTML: it is rendered for the first of them and reused for the others.
Every other page (nav pages, the 404 page, pages above a nav page) is rendered as the theme
renders it.

:func:`cache_nav` installs this on the theme's Jinja environment (``on_env``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

NAV_TEMPLATE = "partials/nav.html"
ENABLED = True  # False: every nav rendered by the theme (tests compare both)
# the last build's count of nav HTML rendered and reused (tests, benchmarks)
counts: dict[str, int] = {"rendered": 0, "reused": 0}


def cache_nav(env: Any, nav: Any) -> None:
    """Render ``partials/nav.html`` once per folder of off-nav pages (see the module
    docstring) in this build's environment ``env``; ``nav`` is MkDocs' navigation."""
    import jinja2

    if not ENABLED:
        return
    try:
        template = env.get_template(NAV_TEMPLATE)
    except jinja2.TemplateNotFound:  # a theme without it: nothing to do
        return
    in_nav = {id(p) for p in nav.pages}
    # every folder a nav page is in or below ("a/", "a/b/" of "a/b/c/"): an off-nav page whose
    # folder holds a nav page may be its nav's active parent, so it is rendered itself
    nav_folders = {u[:i + 1] for u in _urls(nav.items) if isinstance(u, str)
                   for i, ch in enumerate(u) if ch == "/"}
    render: Callable[[Any], Iterator[str]] = template.root_render_func
    rendered: dict[str, str] = {}
    counts.update(rendered=0, reused=0)

    def key(page: Any) -> str | None:
        """The folder whose off-nav pages share ``page``'s nav HTML, or None."""
        if page is None or id(page) in in_nav or getattr(page, "parent", None) is not None:
            return None
        url = page.url
        if not isinstance(url, str) or not url.endswith("/") or url == "/":
            return None
        if url in nav_folders:
            return None
        return url[:-1].rpartition("/")[0]

    def root(context: Any) -> Iterator[str]:
        folder = key(context.get("page"))
        html = rendered.get(folder) if folder is not None else None
        if html is not None:
            counts["reused"] += 1
            yield html
            return
        counts["rendered"] += 1
        if folder is None:
            yield from render(context)
            return
        html = rendered[folder] = "".join(render(context))
        yield html

    template.root_render_func = root


def _urls(items: Any) -> Iterator[Any]:
    """The URL of every item of the nav (pages, links), sections walked."""
    for item in items or ():
        yield getattr(item, "url", None)
        yield from _urls(getattr(item, "children", None))
