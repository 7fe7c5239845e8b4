"""The theme's work done once per build (toolkit.site_theme): the navigation once per folder of
off-nav pages, the partials that print the same bytes on every page once, one Markdown
converter for every page. The site's bytes are those of the theme and MkDocs doing it all for
every page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    # the theme's head and script blocks (config, styles, scripts...): once per set of links
    assert site_theme.counts["blocks"] >= 4 * cached.pages
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


def _links_env() -> object:
    """A theme whose blocks read the site's config, make links relative to the page, read
    the page, or read a name they may not set themselves."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.DictLoader({
        "base.html": (
            "{% block head %}<link href=\"{{ 'assets/a.css' | url }}\">"
            "{% include 'partials/icons.html' %}{{ config.name }}{% endblock %}"
            "|{% block cfg %}{{ base_url }}{% endblock %}"
            "|{% block title %}{{ page.title }}{% endblock %}"
            "|{% block maybe %}{% if config.flag %}{% set x = 1 %}{% endif %}{{ x }}"
            "{% endblock %}"),
        "partials/icons.html": "<i>{{ 'assets/i.svg' | url }}</i>",
    }))

    @jinja2.pass_context
    def url(context: Any, value: str) -> str:  # as MkDocs': relative to the page's URL
        depth = context["page"]["url"].count("/")
        return "../" * depth + value if not value.startswith(context["page"]["url"]) \
            else value[len(context["page"]["url"]):]

    env.filters["url"] = url
    return env


def test_a_block_that_reads_the_site_only_is_rendered_once_per_set_of_links(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of base.html that read the site's config and make links to it are rendered once
    per distinct set of links (each page gets the bytes the theme would print for it); a block
    that reads the page, or a name the page's context holds, is rendered for every page."""
    pages = [{"url": "a/x/", "title": "X"}, {"url": "a/y/", "title": "Y"},
             {"url": "b/c/z/", "title": "Z"}, {"url": "assets/", "title": "A"},
             {"url": "a/w/", "title": "W", "x": "page's"}]

    def render_all(enabled: bool) -> list[str]:
        monkeypatch.setattr(site_theme, "ENABLED", enabled)
        env: Any = _links_env()
        site_theme.cache_partials(env)
        template = env.get_template("base.html")
        return [template.render(page=p, config={"name": "S", "flag": False},
                                base_url="../" * p["url"].count("/"), **(
                                    {"x": p["x"]} if "x" in p else {})) for p in pages]

    plain = render_all(False)
    assert render_all(True) == plain
    assert "<link href=\"../../assets/a.css\"><i>../../assets/i.svg</i>" in plain[0]
    assert plain[3].startswith('<link href="a.css"><i>i.svg</i>')  # a link below the page
    assert plain[4].endswith("|page's")
    # head and cfg: reused for a/y/ and a/w/ (the links and base_url of a/x/); maybe: for
    # a/y/, b/c/z/ and assets/ (a/w/'s context holds x: rendered); title: never
    assert site_theme.counts["blocks"] == 2 + 2 + 3

