"""The theme's work done once per build (toolkit.site_theme): the navigation once per folder of
off-nav pages, the partials that print the same bytes on every page once, one Markdown
converter for every page. The site's bytes are those of the theme and MkDocs doing it all for
every page."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests._site_helpers import World, build, make_world, tree_bytes
from toolkit import site_theme


def test_theme_work_done_once_gives_the_same_site(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path / "w", hostile=True)
    monkeypatch.setattr(site_theme, "ENABLED", False)
    plain = build(world, out=tmp_path / "plain" / "site")
    monkeypatch.setattr(site_theme, "ENABLED", True)
    # a shape in every folder (a small project's folders hold too few pages for one: below)
    min_pages = site_theme._SHAPE_MIN_PAGES
    monkeypatch.setattr(site_theme, "_SHAPE_MIN_PAGES", 1)
    cached = build(world, out=tmp_path / "cached" / "site", clean=True)
    # entry pages (off the nav) reused a nav rendered for another page of their folder
    assert site_theme.counts["reused"] >= 10
    # every page's nav, and the 404 page's, but those of pages filled into a page of their
    # shape (below)
    assert (site_theme.counts["reused"] + site_theme.counts["rendered"]
            >= cached.pages + 1 - site_theme.counts["pages"])
    # the search box, palette and other site-wide partials: once, then reused on every page
    assert site_theme.counts["partials"] >= 3 * cached.pages
    # the theme's head and script blocks (config, styles, scripts...): once per set of links
    assert site_theme.counts["blocks"] >= 4 * cached.pages
    # every page converted by the build's one converter, or given the HTML of a page of its
    # shape (ledger entries with the same sections) with its own tables
    assert site_theme.counts["shapes"] >= 3
    assert site_theme.counts["markdown"] + site_theme.counts["shapes"] == cached.pages
    # entry pages of one folder and kind: the theme's page rendered once, filled for the others
    assert site_theme.counts["pages"] >= 10
    assert tree_bytes(cached.out) == tree_bytes(plain.out)
    # folders of fewer pages than a shape pays back: none is made (each costs two renders
    # more), the navigation and partials are still reused, the same bytes
    monkeypatch.setattr(site_theme, "_SHAPE_MIN_PAGES", min_pages)
    small = build(world, out=tmp_path / "small" / "site", clean=True)
    assert site_theme.counts["page_shapes"] == site_theme.counts["pages"] == 0
    assert site_theme.counts["reused"] >= 10 and site_theme.counts["shapes"] >= 3
    assert tree_bytes(small.out) == tree_bytes(plain.out)


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


def _search_partial_for_pages(sources: dict[str, str], folder: Path | None = None
                              ) -> list[str]:
    """The search partial of a theme made of ``sources`` (its judgement kept in ``folder``)
    rendered for pages titled "a" and "b" of a site named "S"."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.DictLoader(sources))
    site_theme.cache_partials(env, folder)
    template = env.get_template("partials/search.html")
    return [template.render(config={"site_name": "S"}, page={"title": t}) for t in "ab"]


def test_a_theme_template_edited_between_builds_is_judged_again() -> None:
    """Which partials are page-free is worked out once per process (a later build, as under
    `serve`, reuses it) only while the templates it read keep their text: a partial edited to
    read the page is then rendered for each page."""
    sources = {"partials/search.html": "<b>{{ config.site_name }}</b>"}

    def rendered() -> list[str]:
        return _search_partial_for_pages(sources)

    assert rendered() == ["<b>S</b>", "<b>S</b>"]
    assert rendered() == ["<b>S</b>", "<b>S</b>"] and site_theme.counts["partials"] == 1
    sources["partials/search.html"] = "<b>{{ page.title }}</b>"
    assert rendered() == ["<b>a</b>", "<b>b</b>"]
    sources["partials/search.html"] = "<b>{{ config.site_name }}</b>"
    assert rendered() == ["<b>S</b>", "<b>S</b>"]


def test_the_judgement_kept_in_the_build_folder_is_trusted_only_for_the_same_templates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next process (the next `build-site`) reads which partials are page-free from the
    build folder instead of working it out again, while the templates keep their text; an
    edited partial, or a damaged file, is judged again."""
    sources = {"partials/search.html": "<b>{{ config.site_name }}</b>"}
    judged: list[int] = []
    analyse = site_theme._analyse

    def counted(env: Any) -> Any:
        judged.append(1)
        return analyse(env)

    monkeypatch.setattr(site_theme, "_analyse", counted)

    def rendered() -> list[str]:
        monkeypatch.setattr(site_theme, "_ANALYSED", {})  # a new process
        return _search_partial_for_pages(sources, tmp_path)

    assert rendered() == ["<b>S</b>", "<b>S</b>"] and len(judged) == 1
    assert rendered() == ["<b>S</b>", "<b>S</b>"] and len(judged) == 1
    assert site_theme.counts["partials"] == 1
    sources["partials/search.html"] = "<b>{{ page.title }}</b>"
    assert rendered() == ["<b>a</b>", "<b>b</b>"] and len(judged) == 2
    (tmp_path / f"{site_theme.ANALYSIS_SLOT}.marshal").write_bytes(b'{"key": 1')  # damaged
    assert rendered() == ["<b>a</b>", "<b>b</b>"] and len(judged) == 3
    assert rendered() == ["<b>a</b>", "<b>b</b>"] and len(judged) == 3


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


class _Page:
    """What the theme reads of an MkDocs page off the nav."""

    def __init__(self, url: str, title: str, content: str, tags: list[str]) -> None:
        self.url, self.title, self.content = url, title, content
        self.meta = {"title": title, "tags": tags}
        self.parent = None
        self.toc = None


PAGE_THEMES = {
    # prints the title and content as they are, tests the content: one render per shape
    "tests": '{% if "o" in page.title %}o{% endif %}{{ page.title }}',
    "prints": ('<title>{{ page.meta.title }} - {{ config.name }}</title>'
               '{% for t in page.meta.tags %}<i>{{ t }}</i>{% endfor %}'
               '<a href="{{ "assets/x.css" | url }}">{{ page.title | d(config.name, true) }}</a>'
               '{% if "<h1" not in page.content %}<h1>{{ page.title }}</h1>{% endif %}'
               "{{ page.content }}"),
    # each does more with the title or the URL than print it: every page as the theme renders it
    "length": "{{ page.title | length }}{{ page.content }}",
    "upper": "{{ page.title | upper }}",
    "striptags": "{{ page.title | striptags }}",
    "escaped": "{{ page.title | e }}",
    "json": "{{ page.title | tojson }}",
    "cut": "{{ page.title | truncate(14) }}",
    "word": "{{ page.title.split()[0] }}",
    "url": "{{ page.url }}{{ page.title }}",
    # (the first page has as many words as the text standing for the content in the shape)
    "count": "{{ page.content | wordcount }}{{ page.content }}",
}


@pytest.mark.parametrize("theme", sorted(PAGE_THEMES))
def test_pages_of_one_shape_get_the_bytes_the_theme_prints_for_each(
        theme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off-nav pages of one folder, front matter (but the title) and table of contents are
    rendered once and filled with each page's title and content, only as far as the theme
    prints those as they are: a theme that does anything else with them gets each page's own
    rendering."""
    import types

    import jinja2

    titles = ["Alpha one", "Beta two", "Gamma &amp; three", "Delta <b>four</b>",
              "Epsilon   five", "Zeta six is a long title", "Eta", "Theta one"]
    pages = [_Page(f"slop/e{i}/", t, ("<h1>x</h1>" if i == 5 else "") + f"<p>{t} body</p>",
                   ["a", "b"] if i % 2 else ["a"]) for i, t in enumerate(titles)]
    for page in pages[:2]:  # the pages that make the shapes: as many words as the slot
        page.content = " ".join(["w"] * len(re.findall(r"\w+", site_theme._CONTENT_SLOT)))
    nav = types.SimpleNamespace(pages=[], items=[])

    def render_all(enabled: bool) -> list[str]:
        monkeypatch.setattr(site_theme, "ENABLED", enabled)
        env = jinja2.Environment(loader=jinja2.DictLoader({"main.html": PAGE_THEMES[theme]}))

        @jinja2.pass_context
        def url(context: Any, value: str) -> str:  # as MkDocs': relative to the page's URL
            return "../" * context["page"].url.count("/") + value

        env.filters["url"] = url
        site_theme.cache_pages(env, nav)
        template = env.get_template("main.html")
        return [template.render(page=p, config={"name": "S"}) for p in pages]

    plain = render_all(False)
    assert render_all(True) == plain
    if theme == "prints":
        # two shapes (one tag, two tags); e5 holds a heading: rendered; the rest filled in
        assert site_theme.counts["page_shapes"] == 2
        assert site_theme.counts["pages"] == len(pages) - 3
        assert "<i>b</i><a href=\"../../assets/x.css\">Beta two</a><h1>Beta two</h1>" in plain[1]
    elif theme == "tests":  # the titles without an "o" (Gamma, Eta): one shape, once filled
        assert site_theme.counts["pages"] == 1
    else:
        assert site_theme.counts["pages"] == 0


def _pages(tmp_path: Path, texts: dict[str, str]) -> tuple[Any, Any, list[Any]]:
    """MkDocs pages of ``texts`` (path: Markdown) under the site's Markdown extensions."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import File, Files
    from mkdocs.structure.pages import Page

    docs = tmp_path / "docs"
    for path, text in texts.items():
        (docs / path).parent.mkdir(parents=True, exist_ok=True)
        (docs / path).write_text(text, encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: S\ndocs_dir: docs\nmarkdown_extensions:\n  - toc:\n      permalink: true\n"
        "  - tables\n  - admonition\n  - toolkit.mdsafe\n", encoding="utf-8")
    config = load_config(str(tmp_path / "mkdocs.yml"))
    files = Files([File(p, str(docs), str(tmp_path / "site"), True) for p in texts])
    pages = [Page(None, f, config) for f in files]
    for page in pages:
        page.read_source(config)
    return config, files, pages


def _rendered(page: Any) -> tuple[Any, ...]:
    return (page.content, str(page.toc), page._title_from_render,
            sorted(page.present_anchor_ids),
            {f.src_uri: a for f, a in getattr(page, "links_to_anchors", {}).items()})


def test_pages_of_one_shape_are_converted_once_with_their_own_tables(tmp_path: Path) -> None:
    """Pages whose Markdown differs only in their tables' placeholders get the HTML of one
    conversion with their own placeholders; a page whose placeholder is in a heading or a code
    span, or repeated as text, or that links to another page, is converted itself. Each page's
    content, table of contents, title, anchors and links are MkDocs' own."""
    def entry(a: str, b: str, extra: str = "") -> str:
        return (f"---\ntitle: T\n---\n\n&#35;tkfields-{a}\n\n## Context\n\n&#35;tktable-{b}\n\n"
                f"## Pattern [see](#context)\n\n&#35;tkpost-{a}\n{extra}")

    digests = [f"{i:x}" * 20 for i in range(1, 16)]
    texts = {f"e/{i}.md": entry(digests[i], digests[i + 1]) for i in range(3)}
    # each of these twice, with other digests: the second must not take the first's HTML
    for i in (4, 6):
        texts[f"e/heading{i}.md"] = entry(digests[i], digests[i + 1]).replace(
            "## Context", f"## Context &#35;tktable-{digests[i]}")
        texts[f"e/code{i}.md"] = entry(digests[i], digests[i + 1]).replace(
            f"&#35;tktable-{digests[i + 1]}", f"`&#35;tktable-{digests[i + 1]}`")
        texts[f"e/twice{i}.md"] = entry(digests[i], digests[i + 1], f"\nplain {digests[i]}\n")
    # the same link, from two folders: ../0/ from e/, left as written (and a warning) from e/s/
    texts["e/link.md"] = entry(digests[8], digests[9], "\n[other](0.md)\n")
    texts["e/s/link.md"] = entry(digests[9], digests[10], "\n[other](0.md)\n")
    texts["x/0.md"] = entry(digests[3], digests[4])  # the shape of e/*.md, another folder
    config, files, pages = _pages(tmp_path, texts)
    for page in pages:
        page.render(config, files)
    plain = [_rendered(p) for p in pages]
    once = site_theme.MarkdownOnce()
    for page in pages:
        once.render(page, config, files)
    assert [_rendered(p) for p in pages] == plain
    # e/1, e/2 and x/0 reuse e/0's conversion: no other page does
    assert (site_theme.counts["shapes"], site_theme.counts["markdown"]) == (3, len(pages) - 3)
    assert f"<p>&#35;tktable-{digests[4]}</p>" in pages[-1].content


def test_files_of_a_custom_theme_folder_are_listed_again_on_each_build(
        formats_site: tuple[World, Path], tmp_path: Path) -> None:
    """The installed theme's static files are listed once per process; a ``custom_dir`` (the
    user's own theme files, which may change between builds) is listed on every build: a file
    added there reaches the site on the next build."""
    import yaml

    from toolkit.site import BASE_CONFIG

    overrides = tmp_path / "overrides"
    overrides.mkdir()
    (overrides / "first.txt").write_text("one", encoding="utf-8")
    config = yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8"))
    config["theme"]["custom_dir"] = str(overrides)
    base = tmp_path / "mkdocs.yml"
    base.write_text(yaml.safe_dump(config), encoding="utf-8")
    world, _ = formats_site  # read only: built into a folder of this test's
    first = build(world, out=tmp_path / "site", base_config=base)
    assert (first.out / "first.txt").read_text(encoding="utf-8") == "one"
    (overrides / "second.txt").write_text("two", encoding="utf-8")
    again = build(world, out=tmp_path / "site", base_config=base)
    assert again.mode == "incremental"
    assert (again.out / "second.txt").read_text(encoding="utf-8") == "two"
    assert (again.out / "assets" / "javascripts").is_dir()  # and the installed theme's files


@pytest.mark.parametrize("title", [
    "Entry 00005: Preference refund", 'A "quoted" \\ title & <b>tag</b> # not: a comment',
    "  spaced  ", "---", "...", "title: x", "é ünïcode", "tab\there", "x\u2028y", "{{ 7*7 }}",
    "[list, like]", "- dash", "null", "true", "'single'", "a" * 300, "a" * 400])
def test_the_toolkits_front_matter_is_read_as_mkdocs_reads_it(title: str) -> None:
    """The front matter the toolkit writes is read without YAML, to the text and data MkDocs
    reads from it (or left to MkDocs), whatever the title, tags and flags."""
    import types

    from mkdocs.utils.meta import get_data

    from toolkit.site import _front_matter, html_title

    read = 0
    for tags, search, sections, wide in ((["patterns", "high"], True, False, False),
                                         ([], False, True, True), (["x_y-1"], True, True, False),
                                         (["Bad Tag"], True, False, True)):
        page = types.SimpleNamespace(title=title, tags=tags, search=search,
                                     search_sections=sections, wide=wide)
        source = f"{_front_matter(page)}\n\n## Heading\n\nText.\n"
        fast = site_theme.front_matter(source)
        if fast is not None:
            read += 1
            assert fast == get_data(source), source
    shown = html_title(title)  # as the page's title is written: read without YAML when ASCII
    # (any other, as a cut title's "…", left to MkDocs)
    assert read == (4 if shown.isascii() and shown.isprintable() else 0)


def test_the_theme_files_list_kept_in_the_build_folder_is_trusted_only_under_its_key(
        formats_site: tuple[World, Path], tmp_path: Path) -> None:
    """The installed theme's static files, as MkDocs lists them, are kept in the build folder
    for the next process, which copies what that list names while the packages' versions and
    the theme's folders are the same; a list kept under other versions (a theme upgraded
    since), or a damaged one, is made again, and the site is the same."""
    import json
    import shutil

    import toolkit.site as site_module
    from toolkit import parsecache

    world, _ = formats_site  # read only: built into a folder of this test's
    site_module._THEME_FILES.clear()  # as a new process
    first = build(world, out=tmp_path / "site")
    kept = first.build_dir / f"{site_module.THEME_FILES}.marshal"

    def kept_record() -> dict[str, Any]:
        saved = parsecache._read(kept.read_bytes())
        assert saved is not None
        return {"key": json.loads(saved[1][0]), "files": saved[2]}

    record = kept_record()
    listed = record["files"]
    assert "assets/javascripts/bundle" in " ".join(listed)
    assert all((first.out / name).is_file() for name in listed)
    site_before = tree_bytes(first.out)
    dropped = next(n for n in listed if n.endswith(".js"))

    def kept_as(files: list[str], key: Any) -> None:
        parsecache.save(first.build_dir, site_module.THEME_FILES, (json.dumps(key),), files)

    def new_process_full_build(keep: Callable[[], None]) -> dict[str, bytes]:
        site_module._THEME_FILES.clear()  # a new process: only the kept file
        keep()
        shutil.rmtree(first.out)
        (first.build_dir / "state.json").unlink()
        again = build(world, out=tmp_path / "site")
        assert again.mode == "full"
        return tree_bytes(again.out)

    # trusted under its key: the next process copies what it names (a file left out of it
    # here, to show it was read)
    without = new_process_full_build(
        lambda: kept_as([n for n in listed if n != dropped], record["key"]))
    assert dropped not in without and len(without) == len(site_before) - 1
    # kept under another version of the packages: listed again, the whole site
    stale = [record["key"][0] + "-older", *record["key"][1:]]
    assert new_process_full_build(
        lambda: kept_as([n for n in listed if n != dropped], stale)) == site_before
    assert kept_record() == record  # and kept afresh
    def cut_short() -> None:
        kept.write_bytes(kept.read_bytes()[:-9])

    assert new_process_full_build(cut_short) == site_before  # damaged: listed again
    assert kept_record() == record
