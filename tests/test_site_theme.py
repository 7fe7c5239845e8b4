"""The theme's work done once per build (toolkit.site_theme): the navigation once per folder of
off-nav pages, the partials that print the same bytes on every page once, one Markdown
converter for every page. The site's bytes are those of the theme and MkDocs doing it all for
every page."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._site_helpers import build, make_world, tree_bytes
from toolkit import site_theme


def test_theme_work_done_once_gives_the_same_site(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path / "w", hostile=True)
    monkeypatch.setattr(site_theme, "ENABLED", False)
    plain = build(world, out=tmp_path / "plain" / "site")
    monkeypatch.setattr(site_theme, "ENABLED", True)
    cached = build(world, out=tmp_path / "cached" / "site", clean=True)
    # entry pages (off the nav) reused a nav rendered for another page of their folder
    assert site_theme.counts["reused"] >= 10
    # every page's nav, and the 404 page's
    assert site_theme.counts["reused"] + site_theme.counts["rendered"] == cached.pages + 1
    # the search box, palette and other site-wide partials: once, then reused on every page
    assert site_theme.counts["partials"] >= 3 * cached.pages
    # every page converted by the build's one converter
    assert site_theme.counts["markdown"] == cached.pages
    assert tree_bytes(cached.out) == tree_bytes(plain.out)


def test_a_partial_that_reads_the_page_is_rendered_for_each_page() -> None:
    """Only a partial that reads nothing but the site's config counts as page-free: one that
    reads the page, makes a link relative to it or includes another partial does not."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.DictLoader({
        "free.html": '{% set icon = "x" %}<b>{{ config.site_name }}{{ lang.t("a") }}</b>'
                     '{% include ".icons/" ~ icon ~ ".svg" %}',
        "page.html": "{{ page.title }}",
        "link.html": "{{ config.logo | url }}",
        "nested.html": '{% include "page.html" %}',
        ".icons/x.svg": "<svg></svg>",
    }))
    env.filters["url"] = lambda v: v
    assert site_theme._page_free(env, "free.html") is not None
    for name in ("page.html", "link.html", "nested.html", "missing.html"):
        assert site_theme._page_free(env, name) is None, name
