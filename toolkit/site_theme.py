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

Some partials print the same bytes on every page: they read nothing but the site's config
(``config``, ``features``, the translations ``lang``), use no ``url`` filter (which makes a
link relative to the page) and include only icons. Such a partial (of :data:`PAGE_FREE`, each
checked against that rule when the build starts) is rendered for the first page and reused.
A block of ``base.html`` (the page's head, its scripts, Material's ``__config``) that reads
nothing but the site's config and ``base_url``, and the page only through the filters that make
a link relative to it (``url``, ``script_tag``), prints the same bytes on two pages whose
``base_url`` and links to the same targets come out the same: it is rendered once per such set
(the filters record the links a rendering makes) and reused.

Python-Markdown: MkDocs makes a new converter, with every extension, for each page. Here one
converter per build converts every page: it is reset between pages (as Python-Markdown resets
it between documents) and given that page's MkDocs processors, as MkDocs gives a new one.
A page whose Markdown is that of an earlier page but for its tables' placeholders gets that
page's HTML with its own placeholders (see :class:`MarkdownOnce`).

A whole page off the nav (an entry page) is rendered once per shape (:func:`cache_pages`):
pages of one folder whose front matter but the title, table of contents, context and every
page attribute the theme reads are the same get the HTML of the first of them with their own
title and content, as long as the theme does nothing with those but print them (checked on
each shape, whose HTML must be the first page's own).

:func:`cache_nav`, :func:`cache_partials` and :func:`cache_pages` install this on the theme's
Jinja environment (``on_env``), :class:`MarkdownOnce` on each page (``on_pre_page``).
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAV_TEMPLATE = "partials/nav.html"
ENABLED = True  # False: the theme and MkDocs do all of it for every page (tests compare both)
# the last build's count of nav HTML rendered and reused, page-free partials reused, pages
# converted by the build's one Markdown converter, pages filled into a shape and shapes kept
# (tests, benchmarks)
counts: dict[str, int] = {"rendered": 0, "reused": 0, "partials": 0, "blocks": 0,
                          "markdown": 0, "pages": 0, "page_shapes": 0}
# partials that may print the same bytes on every page (each checked: see the module docstring)
PAGE_FREE = ("partials/search.html", "partials/palette.html", "partials/top.html",
             "partials/source.html", "partials/copyright.html",
             "partials/javascripts/content.html")
_SITE_WIDE = frozenset({"config", "features", "lang"})
# filters that make a link relative to the page (MkDocs'); the template of the blocks cached
PAGE_URL_FILTERS = ("url", "script_tag")
BLOCKS_OF = "base.html"


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
    key = _folder_key(nav)
    render: Callable[[Any], Iterator[str]] = template.root_render_func
    rendered: dict[str, str] = {}
    counts.update(rendered=0, reused=0)

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


def _folder_key(nav: Any) -> Callable[[Any], str | None]:
    """The folder whose off-nav pages share a page's nav HTML (see the module docstring), or
    None for a page that is rendered itself."""
    in_nav = {id(p) for p in nav.pages}
    # every folder a nav page is in or below ("a/", "a/b/" of "a/b/c/"): an off-nav page whose
    # folder holds a nav page may be its nav's active parent, so it is rendered itself
    nav_folders = {u[:i + 1] for u in _urls(nav.items) if isinstance(u, str)
                   for i, ch in enumerate(u) if ch == "/"}

    def key(page: Any) -> str | None:
        if page is None or id(page) in in_nav or getattr(page, "parent", None) is not None:
            return None
        url = page.url
        if not isinstance(url, str) or not url.endswith("/") or url == "/":
            return None
        if url in nav_folders:
            return None
        return url[:-1].rpartition("/")[0]

    return key


def cache_partials(env: Any, folder: Path | None = None) -> None:
    """Render each partial of :data:`PAGE_FREE` that prints the same bytes on every page once
    in this build's environment ``env``, and each block of :data:`BLOCKS_OF` that reads only
    the site's config and the page's links to fixed targets once per set of those links (see
    the module docstring); the others as the theme does. Which ones qualify is worked out from
    the templates' code once per process while their sources stay the same (:func:`_analysis`),
    and kept in ``folder`` (a build folder) for the next process."""
    counts.update(partials=0, blocks=0)
    if not ENABLED:
        return
    found = _analysis(env, folder)
    for name in found.page_free:
        template = env.get_template(name)
        template.root_render_func = _once(template.root_render_func)
    links = _Links(env)
    if found.blocks is None:
        return
    template = env.get_template(BLOCKS_OF)
    for block_name, by_base, unsure in found.blocks:
        if block_name in template.blocks:
            template.blocks[block_name] = links.cached(template.blocks[block_name], by_base,
                                                       unsure)


@dataclass(frozen=True)
class _Analysis:
    """What :func:`cache_partials` found in a theme's templates: the partials of
    :data:`PAGE_FREE` that are page-free, and each block of :data:`BLOCKS_OF` that reads only
    the site's config and links (its name and :func:`_reads`' answer); None when there is no
    such template."""

    page_free: tuple[str, ...]
    blocks: tuple[tuple[str, bool, frozenset[str]], ...] | None


# analyses made in this process (a later build, as under ``serve``, reuses them): per
# environment settings and filters, each with the sources of the templates it read
_ANALYSED: dict[tuple[Any, ...], list[tuple[dict[str, str | None], _Analysis]]] = {}
# the sources read by the analysis under way, per thread (two builds may run at once)
_local = threading.local()


def _reading() -> list[dict[str, str | None]]:
    stack: list[dict[str, str | None]] = _local.__dict__.setdefault("reading", [])
    return stack


# the parse-cache slot (toolkit.parsecache) of the analysis kept in a build folder: the last
# one made there (see _analysis)
ANALYSIS_SLOT = "theme-analysis"


def _analysis(env: Any, folder: Path | None = None) -> _Analysis:
    """The :class:`_Analysis` of ``env``'s templates: made again only when a template it read
    has other source text (or appeared, or went) or the environment's syntax or filters
    differ (its result depends on nothing else). Kept in this process and, with the digests of
    the sources it read, in ``folder``'s :data:`ANALYSIS_SLOT`, which a later process trusts
    under the same conditions (and this module's code the same)."""
    from jinja2.utils import _PassArg

    key = (type(env.loader), env.block_start_string, env.block_end_string,
           env.variable_start_string, env.variable_end_string, env.comment_start_string,
           env.comment_end_string, env.line_statement_prefix, env.line_comment_prefix,
           env.trim_blocks, env.lstrip_blocks, tuple(sorted(env.extensions)),
           tuple(sorted((n, str(_PassArg.from_obj(f))) for n, f in env.filters.items())))
    known = _ANALYSED.setdefault(key, [])
    for sources, found in known:
        if all(_current_source(env, name) == text for name, text in sources.items()):
            return found
    kept = _kept_analysis(folder, key, env) if folder is not None else None
    if kept is not None:
        sources, found = kept
    else:
        _reading().append({})
        try:
            found = _analyse(env)
        finally:
            sources = _reading().pop()
        if folder is not None:
            _keep_analysis(folder, key, sources, found)
    if len(known) >= 8:
        known.clear()
    known.append((sources, found))
    return found


def _analysis_key(key: tuple[Any, ...]) -> tuple[str]:
    """What a kept analysis must match besides its sources: the environment (as
    :func:`_analysis` keys it) and this module's code."""
    from toolkit.parsecache import code_version

    return (f"{code_version(__name__)}|{key!r}",)


def _digest(text: str | None) -> str | None:
    import hashlib

    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def _kept_analysis(folder: Path, key: tuple[Any, ...], env: Any
                   ) -> tuple[dict[str, str | None], _Analysis] | None:
    """The analysis kept in ``folder`` with the sources it read (their current text), when it
    was made under ``key`` from the same sources; None otherwise (or unreadable)."""
    from toolkit import parsecache

    kept = parsecache.load(folder, ANALYSIS_SLOT, _analysis_key(key))
    try:
        digests, page_free, blocks = kept
        sources = {}
        for name, digest in digests.items():
            text = _current_source(env, name)
            if _digest(text) != digest:
                return None
            sources[name] = text
        found = _Analysis(tuple(str(n) for n in page_free), None if blocks is None else
                          tuple((str(b), bool(by_base), frozenset(map(str, unsure)))
                                for b, by_base, unsure in blocks))
    except (ValueError, TypeError, AttributeError):  # None (no such entry), or not its form
        return None
    return sources, found


def _keep_analysis(folder: Path, key: tuple[Any, ...], sources: dict[str, str | None],
                   found: _Analysis) -> None:
    from toolkit import parsecache

    parsecache.save(folder, ANALYSIS_SLOT, _analysis_key(key), (
        {name: _digest(text) for name, text in sorted(sources.items())},
        list(found.page_free),
        None if found.blocks is None else [
            [b, by_base, sorted(unsure)] for b, by_base, unsure in found.blocks]))


def _analyse(env: Any) -> _Analysis:
    import jinja2
    from jinja2 import nodes

    page_free = tuple(name for name in PAGE_FREE if _page_free(env, name) is not None)
    try:
        template = env.get_template(BLOCKS_OF)
        tree = env.parse(_source(env, BLOCKS_OF))
    except (jinja2.TemplateError, OSError):
        return _Analysis(page_free, None)
    blocks = []
    for block in tree.find_all(nodes.Block):
        reads = _reads(env, block.body, _link_filters(env), set())
        if reads is not None and block.name in template.blocks:
            blocks.append((block.name, *reads))
    return _Analysis(page_free, tuple(blocks))


def _source(env: Any, name: str) -> str:
    """The source text of the template ``name`` (recorded for :func:`_analysis`)."""
    try:
        text: str = env.loader.get_source(env, name)[0]
    except BaseException:
        if reading := _reading():
            reading[-1][name] = None
        raise
    if reading := _reading():
        reading[-1][name] = text
    return text


def _link_filters(env: Any) -> tuple[str, ...]:
    """The filters of :data:`PAGE_URL_FILTERS` ``env`` has as filters that read the context
    (MkDocs'): those :class:`_Links` wraps."""
    from jinja2.utils import _PassArg

    return tuple(name for name in PAGE_URL_FILTERS if name in env.filters
                 and _PassArg.from_obj(env.filters[name]) is _PassArg.context)


def _current_source(env: Any, name: str) -> str | None:
    import jinja2

    try:
        text: str = env.loader.get_source(env, name)[0]
    except (jinja2.TemplateError, OSError):
        return None
    return text


def _page_free(env: Any, name: str) -> Any:
    """The template ``name`` when it reads only the site's config (see the module
    docstring), else None."""
    import jinja2

    try:
        tree = env.parse(_source(env, name))
    except (jinja2.TemplateError, OSError):
        return None
    reads = _reads(env, tree.body, (), set())
    if reads is None or reads[1]:
        return None
    return env.get_template(name)


def _reads(env: Any, body: list[Any], links: tuple[str, ...],
           seen: set[str]) -> tuple[bool, frozenset[str]] | None:
    """Whether the template code ``body`` reads only site-wide names (:data:`_SITE_WIDE`,
    ``namespace``; ``base_url`` only when given ``links``), uses no filter that reads the
    context but those of ``links`` (they make a link relative to the page), and includes or
    imports only icons and templates (by a constant name) of which the same holds: (whether
    it reads ``base_url``, the names it may read from the context before it sets them itself,
    as ``{% if a %}{% set x = … %}{% endif %}{{ x }}`` does: the page's context must not hold
    them). None when it does not."""
    import jinja2
    from jinja2 import meta, nodes
    from jinja2.utils import _PassArg

    tree = nodes.Template(list(body), lineno=1)
    tree.set_environment(env)
    names = set(meta.find_undeclared_variables(tree))
    own = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    own |= {i.target for i in tree.find_all(nodes.Import)}
    own |= {n if isinstance(n, str) else n[-1] for i in tree.find_all(nodes.FromImport)
            for n in i.names}
    own |= {m.name for m in tree.find_all(nodes.Macro)}
    site_wide = _SITE_WIDE | {"namespace"} | ({"base_url"} if links else set())
    if not names <= site_wide | own:
        return None
    unsure = set(names - site_wide)
    for f in tree.find_all(nodes.Filter):
        if f.name in links:
            continue
        if (f.name in PAGE_URL_FILTERS
                or _PassArg.from_obj(env.filters.get(f.name)) is _PassArg.context):
            return None
    for inc in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        target = inc.template  # type: ignore[attr-defined]  # each of these has one
        while isinstance(target, nodes.Concat) and target.nodes:
            target = target.nodes[0]
        while isinstance(target, nodes.Add):
            target = target.left
        if not isinstance(target, nodes.Const):
            return None
        name = str(target.value)
        if name.startswith(".icons/") and isinstance(inc, (nodes.Include, nodes.Import)):
            continue  # an icon: an SVG file
        if not isinstance(inc, nodes.Include) or inc.template is not target or name in seen:
            return None
        seen.add(name)
        try:
            included = env.parse(_source(env, name))
        except (jinja2.TemplateError, OSError):
            return None
        more = _reads(env, included.body, links, seen)
        if more is None:
            return None
        if more[0]:
            names.add("base_url")
        unsure |= more[1]
    return "base_url" in names, frozenset(unsure)


def _once(render: Callable[[Any], Iterator[str]]) -> Callable[[Any], Iterator[str]]:
    html: list[str] = []

    def root(context: Any) -> Iterator[str]:
        if html:
            counts["partials"] += 1
        else:
            html.append("".join(render(context)))
        yield html[0]

    return root


class _Links:
    """The environment's filters that make a link relative to the page (:data:`PAGE_URL_FILTERS`),
    wrapped so that a cached block learns which links it makes."""

    def __init__(self, env: Any) -> None:
        import jinja2

        self.made: list[tuple[str, Any, str]] | None = None  # the block being rendered's
        self.filters: dict[str, Callable[..., Any]] = {}
        for name in _link_filters(env):
            f = self.filters[name] = env.filters[name]

            def logged(context: Any, value: Any, _name: str = name,
                       _f: Callable[..., Any] = f) -> Any:
                out = _f(context, value)
                if self.made is not None:
                    self.made.append((_name, value, str(out)))
                return out

            env.filters[name] = jinja2.pass_context(logged)
        self.names = tuple(self.filters)

    def cached(self, render: Callable[[Any], Iterator[str]], by_base: bool,
               unsure: frozenset[str]) -> Callable[[Any], Iterator[str]]:
        """``render`` (a block that reads only the site's config, ``base_url`` when
        ``by_base``, and makes links with these filters) once per ``base_url`` and set of links:
        a page whose links to the same targets come out the same gets the same bytes (the block
        takes the same branches: it reads nothing else). A page whose context holds a name of
        ``unsure`` is rendered as the theme does."""
        # each list of links a render made (the targets, in order), with the HTML per their
        # results and base_url
        made: list[tuple[list[tuple[str, Any, str]], dict[tuple[str, ...], str]]] = []

        def block(context: Any) -> Iterator[str]:
            if unsure and any(name in context for name in unsure):
                yield from render(context)
                return
            base = str(context.get("base_url")) if by_base else ""
            for links, done in made:
                key = (base, *(str(self.filters[n](context, v)) for n, v, _ in links))
                html = done.get(key)
                if html is not None:
                    counts["blocks"] += 1
                    if self.made is not None:  # a cached block inside one being rendered
                        self.made.extend((n, v, r) for (n, v, _), r in zip(links, key[1:],
                                                                            strict=True))
                    yield html
                    return
            outer, self.made = self.made, []
            try:
                html = "".join(render(context))
                links = self.made
            finally:
                self.made = outer
            if outer is not None:
                outer.extend(links)
            key = (base, *(r for _, _, r in links))
            for seen, done in made:
                if [(n, v) for n, v, _ in seen] == [(n, v) for n, v, _ in links]:
                    done[key] = html
                    break
            else:
                made.append((links, {key: html}))
            yield html

        return block


# a table's placeholder in a page's Markdown (toolkit.site, toolkit.site_hooks): inert text
_SLOT = re.compile(r"(&#35;tk[a-z]+-)([0-9a-f]{20})")
_LINK = re.compile(r"""\b(?:href|src)=["']([^"']*)""")
_SHAPES = 512  # the most page shapes kept (then the memo starts again)


@dataclass
class _Shape:
    """A page's conversion, its placeholders' digests left as slots (see MarkdownOnce)."""

    pieces: list[str]  # the HTML between the slots
    toc: list[Any]
    title: str | None
    anchors: set[str]
    self_links: dict[str, str] | None  # the page's links to its own anchors


class MarkdownOnce:
    """One Python-Markdown converter for a build's pages (see the module docstring):
    ``page.render = MarkdownOnce(...).bind(page)`` before MkDocs renders the page.

    A page's Markdown that differs from an earlier page's only in its tables' placeholders
    (``&#35;tktable-<digest>``: inert text) converts to that page's HTML with the other
    digests: pages of one kind (a ledger entry) are converted once per shape. A shape is kept
    only when its conversion holds each placeholder once, in order, and nowhere else (not in a
    heading, its id or the title), and no link but to its own anchors or to another site (the
    only links MkDocs leaves as written)."""

    def __init__(self) -> None:
        self.md: Any = None
        self.shapes: dict[str, _Shape | None] = {}
        self.toc: list[Any] = []  # the last conversion's headings (toc tokens)
        counts.update(markdown=0, shapes=0)

    def bind(self, page: Any) -> Callable[[Any, Any], None]:
        return lambda config, files: self.render(page, config, files)

    def render(self, page: Any, config: Any, files: Any) -> None:
        """What MkDocs' ``Page.render`` does, with this build's converter."""
        import logging

        from mkdocs.structure import pages as mk

        if page.markdown is None:
            raise RuntimeError("`markdown` field hasn't been set (via `read_source`)")
        digests: list[str] = []

        def slot(m: re.Match[str]) -> str:
            digests.append(m.group(2))
            return f"{m.group(1)}{len(digests) - 1:020x}"

        text = _SLOT.sub(slot, page.markdown) if "&#35;tk" in page.markdown else page.markdown
        shape = self.shapes.get(text) if digests else None
        if shape is not None:
            html = [shape.pieces[0]]
            for digest, piece in zip(digests, shape.pieces[1:], strict=True):
                html += (digest, piece)
            page.content = "".join(html)
            page.toc = mk.get_toc(shape.toc)
            page._title_from_render = shape.title
            page.present_anchor_ids = set(shape.anchors)
            if shape.self_links is not None:
                page.links_to_anchors = {page.file: dict(shape.self_links)}
            counts["shapes"] += 1
            return
        self._convert(page, config, files)
        if digests and text not in self.shapes:
            if len(self.shapes) >= _SHAPES:
                self.shapes.clear()
            self.shapes[text] = self._shape(page, text, digests, mk.log.getEffectiveLevel()
                                            > logging.DEBUG)

    def _convert(self, page: Any, config: Any, files: Any) -> None:
        import logging

        import markdown
        from mkdocs.structure import pages as mk

        md = self.md
        if md is None:
            md = self.md = markdown.Markdown(extensions=config["markdown_extensions"],
                                             extension_configs=config["mdx_configs"] or {})
        else:
            md.reset()
        raw_html = mk._RawHTMLPreprocessor()
        raw_html._register(md)
        anchors = mk._ExtractAnchorsTreeprocessor(page.file, files, config)
        anchors._register(md)
        relative = mk._RelativePathTreeprocessor(page.file, files, config)
        relative._register(md)
        title = mk._ExtractTitleTreeprocessor()
        title._register(md)
        page.content = md.convert(page.markdown)
        self.toc = copy.deepcopy(getattr(md, "toc_tokens", []))
        page.toc = mk.get_toc(getattr(md, "toc_tokens", []))
        page._title_from_render = title.title
        page.present_anchor_ids = anchors.present_anchor_ids | raw_html.present_anchor_ids
        if mk.log.getEffectiveLevel() > logging.DEBUG:
            page.links_to_anchors = relative.links_to_anchors
        counts["markdown"] += 1

    def _shape(self, page: Any, text: str, digests: list[str], links: bool) -> _Shape | None:
        """The page just converted as a shape (its digests as slots), or None when its
        conversion depends on more than the shape (see the class docstring)."""
        html: str = page.content
        found = _SLOT.findall(html)
        if [d for _, d in found] != digests:
            return None
        if any(not (u.startswith("#") or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", u))
               for u in _LINK.findall(html)):
            return None
        if any(html.count(d) != digests.count(d) for d in set(digests)):
            return None  # a digest outside its placeholder too
        pieces, at = [], 0
        for m in _SLOT.finditer(html):
            pieces.append(html[at:m.start(2)])
            at = m.end(2)
        pieces.append(html[at:])
        known = repr((self.toc, page._title_from_render, sorted(page.present_anchor_ids)))
        if any(d in known for d in digests):
            return None
        self_links: dict[str, str] | None = None
        if links:
            got = dict(page.links_to_anchors)
            if set(got) - {page.file}:
                return None
            self_links = dict(got.get(page.file, {}))
            if any(d in repr(self_links) for d in digests):
                return None
        return _Shape(pieces, self.toc, page._title_from_render, set(page.present_anchor_ids),
                      self_links)


def _urls(items: Any) -> Iterator[Any]:
    """The URL of every item of the nav (pages, links), sections walked."""
    for item in items or ():
        yield getattr(item, "url", None)
        yield from _urls(getattr(item, "children", None))


# =========================================================================== pages by shape

PAGE_TEMPLATE = "main.html"
# What stands for a page's title and content when a page is rendered as its shape: characters
# that any filter but printing the value as it is changes (markup, entities, quotes, spaces,
# case), so a rendering that does more with them than print them does not match the page's own.
_TITLE_SLOT = "\ue000Tk  <b>Title</b> &amp; 'q' \"Q\" \ue001"
_CONTENT_SLOT = "\ue002Tk  <p>Content</p> &amp; 'q' \"Q\" \ue003"
# the second rendering's: other lengths, words, case and characters
_OTHER_SLOTS = ("\ue001tITLE \ue000 x&lt;y z", "\ue003<CONTENT>\ue002 a b c")
_PRIVATE = re.compile("[\ue000-\ue003]")
# the most shapes kept (each is a page's HTML but its content); and the shapes made in a folder
# before it must have served as many pages as there are shapes, or no more are made there
_SHAPES_KEPT = 256
_TRIAL = 16
# A shape is made only in a folder with at least this many pages to render in the build: making
# one renders its page twice more (with slots of two kinds), which only pages that reuse it pay
# back. A small project's folders hold one to four entry pages: shapes there made the build
# render about 13 pages three times for 8 reused (a build of the formats project, 0.45 ->
# 0.41 s of CPU without them), as did a one-change rebuild's few pages.
_SHAPE_MIN_PAGES = 8
# str's methods a template may call on a title or content: each call is logged (see _Slot)
_UNLOGGED = frozenset({"__class__", "__new__", "__init__", "__getattribute__", "__setattr__",
                       "__delattr__", "__init_subclass__", "__subclasshook__", "__str__",
                       "__format__", "__reduce__", "__reduce_ex__", "__getnewargs__",
                       "__sizeof__", "__dir__", "__getstate__", "__doc__"})


class _Slot(str):
    """A page's title or content as a page's shape is rendered with it (its value is the
    slot's text, :data:`_TITLE_SLOT`): each operation a template does on it other than
    printing it (a test ``"<h1" in content``, ``title|length``) is logged with its result, and
    the shape serves a page only when the same operations on its own values give the same
    results. ``log`` is None outside that rendering."""

    name: str
    log: list[tuple[str, str, tuple[Any, ...], tuple[tuple[str, Any], ...], Any]] | None


def _truth(text: str) -> bool:
    return str.__len__(text) > 0


def _logged(name: str) -> Callable[..., Any]:
    method = _truth if name == "__bool__" else getattr(str, name)

    def call(self: _Slot, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        log = self.__dict__.get("log")
        if log is not None:
            log.append((self.__dict__["name"], name, args, tuple(kwargs.items()), result))
        return result

    return call


for _name in [*dir(str), "__bool__"]:  # truth: logged apart from the length (str has none)
    if _name not in _UNLOGGED:
        setattr(_Slot, _name, _logged(_name))


def _slot(name: str, text: str, log: list[Any]) -> _Slot:
    value = _Slot(text)
    value.__dict__.update(name=name, log=log)
    return value


class _PageView:
    """The page as its shape is rendered: its title and content (and the title in its
    front matter) are slots; every other attribute a template reads is the page's, recorded."""

    def __init__(self, page: Any, title: _Slot, content: _Slot, meta: dict[str, Any]) -> None:
        self.__dict__.update(_page=page, _title=title, _content=content, _meta=meta,
                             _reads={})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        own = self.__dict__
        if name == "title":
            return own["_title"]
        if name == "content":
            return own["_content"]
        if name == "meta":
            return own["_meta"]
        value = getattr(own["_page"], name)
        own["_reads"].setdefault(name, value)
        return value


@dataclass
class _PageShape:
    """A page rendered with slots: the HTML between them, what the rendering read of the
    page and of the context, and the operations it did on the slots."""

    pieces: list[str]  # HTML, then alternately a slot's text and HTML
    reads: dict[str, Any]  # the page's attributes read (but its URL: same folder)
    names: dict[str, Any]  # the context's variables read (but the page)
    log: list[Any]


def cache_pages(env: Any, nav: Any, files: Any = None) -> None:
    """Render the pages off the nav (see :func:`cache_nav`) once per shape: a page whose
    folder, front matter (but its title), table of contents, context and every attribute the
    theme reads are another page's gets that page's HTML with its own title and content, when
    the theme does nothing with those but print them (or tests on them that come out the same).
    A shape is kept only when its HTML, with the first page's title and content, is the HTML
    the theme renders for that page (rendered too), and holds nothing of the page's URL.
    ``files``: the build's files (MkDocs'), of which a folder's pages are counted: no shape is
    made in a folder with fewer than :data:`_SHAPE_MIN_PAGES` (all are, without them)."""
    import jinja2

    if not ENABLED:
        return
    try:
        template = env.get_template(PAGE_TEMPLATE)
    except jinja2.TemplateNotFound:
        return
    folder_of = _folder_key(nav)
    render: Callable[[Any], Iterator[str]] = template.root_render_func
    shapes: dict[tuple[Any, ...], list[_PageShape]] = {}
    closed: set[str] = set()  # folders where no more shapes are made
    if files is not None:
        pages: dict[str | None, int] = {}
        for file in files.documentation_pages():
            folder = folder_of(file.page)
            pages[folder] = pages.get(folder, 0) + 1
        closed.update(f for f, n in pages.items() if f is not None and n < _SHAPE_MIN_PAGES)
    broken: set[str] = set()  # folders whose pages are rendered as the theme does
    made: dict[str, int] = {}  # shapes made and pages given a shape, by folder
    used: dict[str, int] = {}
    base_context = env.context_class
    counts.update(pages=0, page_shapes=0)

    def signature(page: Any) -> tuple[Any, ...] | None:
        folder = folder_of(page)
        if folder is None:
            return None
        title, content, meta = page.title, page.content, page.meta
        if type(title) is not str or not title or type(content) is not str:
            return None
        if not isinstance(meta, dict) or meta.get("title", title) != title:
            return None
        if _PRIVATE.search(title) or _PRIVATE.search(content):
            return None
        rest = _freeze({k: v for k, v in meta.items() if k != "title"})
        toc = _freeze(page.toc)
        if rest is None or toc is None:
            return None
        return folder, rest, toc

    def matches(shape: _PageShape, page: Any, context: Any) -> bool:
        """Whether ``page`` (its ``context``: MkDocs' or its variables) is of ``shape``."""
        for name, value in shape.names.items():
            if not _same(context.get(name, _MISSING), value):
                return False
        for name, value in shape.reads.items():
            if name not in ("url", "toc") and not _same(getattr(page, name, _MISSING), value):
                return False
        values = {"title": page.title, "content": page.content}
        for slot, op, args, kwargs, result in shape.log:
            try:
                method = _truth if op == "__bool__" else getattr(str, op)
                if not _same(method(values[slot], *args, **dict(kwargs)), result):
                    return False
            except Exception:
                return False
        return True

    def as_shape(page: Any, variables: dict[str, Any]) -> _PageShape | None:
        """``page`` rendered with slots, twice, with slots of other texts (length, words,
        case, characters): a theme that reads them other than by the logged operations (a
        count of words) prints something else for each, and the page is no shape."""
        first = with_slots(page, variables, _TITLE_SLOT, _CONTENT_SLOT)
        second = with_slots(page, variables, *_OTHER_SLOTS)
        if first is None or second is None:
            return None
        other = {_OTHER_SLOTS[0]: _TITLE_SLOT, _OTHER_SLOTS[1]: _CONTENT_SLOT}
        pieces = [other.get(p, p) if i % 2 else p for i, p in enumerate(second.pieces)]
        if pieces != first.pieces or [e[:3] for e in first.log] != [e[:3] for e in second.log]:
            return None
        if any(not _same(a[4], b[4]) for a, b in zip(first.log, second.log, strict=True)):
            return None
        leaf = page.url.rstrip("/").rpartition("/")[2]
        if not leaf or any(leaf in p for p in first.pieces):
            return None
        return first

    def with_slots(page: Any, variables: dict[str, Any], title_text: str,
                   content_text: str) -> _PageShape | None:
        log: list[Any] = []
        title, content = _slot("title", title_text, log), _slot("content", content_text, log)
        meta = dict(page.meta)
        if "title" in meta:
            meta["title"] = title
        view = _PageView(page, title, content, meta)
        names: dict[str, Any] = {}

        class Recording(base_context):  # type: ignore[misc,valid-type]
            def resolve_or_missing(self, key: str) -> Any:
                if key != "page" and key in variables and key not in names:
                    names[key] = variables[key]
                return super().resolve_or_missing(key)

        env.context_class = Recording
        try:
            html = "".join(render(template.new_context({**variables, "page": view})))
        except Exception:
            return None
        finally:
            env.context_class = base_context
            title.log = content.log = None
        at = re.compile(f"({re.escape(title_text)}|{re.escape(content_text)})")
        return _PageShape(at.split(html), dict(view.__dict__["_reads"]), names, log)

    def fill(shape: _PageShape, page: Any) -> str:
        values = {_TITLE_SLOT: page.title, _CONTENT_SLOT: page.content}
        return "".join(values[p] if i % 2 else p for i, p in enumerate(shape.pieces))

    def root(context: Any) -> Iterator[str]:
        page = context.get("page")
        sig = signature(page)
        if sig is None:
            yield from render(context)
            return
        folder = sig[0]
        if folder in broken:
            yield from render(context)
            return
        known = shapes.setdefault(sig, [])
        for kept in known:
            if matches(kept, page, context):
                counts["pages"] += 1
                used[folder] = used.get(folder, 0) + 1
                yield fill(kept, page)
                return
        if folder in closed or counts["page_shapes"] >= _SHAPES_KEPT:
            yield from render(context)
            return
        variables = dict(context.get_all())  # before the theme sets its own
        html = "".join(render(context))
        shape = as_shape(page, variables)
        made[folder] = made.get(folder, 0) + 1
        if shape is not None and not matches(shape, page, variables):
            pass  # the page's own values take another branch than the slots (a heading)
        elif shape is None or fill(shape, page) != html:
            broken.add(folder)  # the theme does more with these pages' values
        else:
            known.append(shape)
            counts["page_shapes"] += 1
        if (folder not in broken and made[folder] >= _TRIAL
                and used.get(folder, 0) < made[folder]):
            closed.add(folder)  # its pages are seldom of one shape: not worth the renders
        yield html

    template.root_render_func = root


_MISSING = object()


def _freeze(value: Any) -> Any:
    """``value`` (front matter, a table of contents) as a hashable value of plain data; None
    when it holds anything else."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        frozen = [_freeze(v) for v in value]
        return None if any(i is None for i in frozen) else ("list", tuple(frozen))
    if isinstance(value, dict):
        pairs = [(k, _freeze(v)) for k, v in value.items()]
        if any(type(k) is not str or v is None for k, v in pairs):
            return None
        return ("dict", tuple(sorted(pairs)))
    from mkdocs.structure.toc import TableOfContents

    if isinstance(value, TableOfContents):
        return _freeze([_freeze_anchor(a) for a in value])
    return None


def _freeze_anchor(anchor: Any) -> Any:
    return {"title": anchor.title, "id": anchor.id, "level": anchor.level,
            "children": [_freeze_anchor(c) for c in anchor.children]}


def _same(a: Any, b: Any) -> bool:
    """Whether a template reading ``a`` where it read ``b`` prints the same: the same object,
    or equal plain data (lists of them), or equal values of a class that defines equality."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a).__eq__ is object.__eq__:
        return False
    return bool(a == b)



# =========================================================================== front matter

# The front matter toolkit.site._front_matter writes, line by line: a title as a JSON string of
# printable ASCII (escapes \" and \\ only: YAML reads such a double-quoted string as JSON does),
# tags as a JSON list of plain names, and fixed lines. Any other front matter is read by MkDocs.
_FRONT_LINE = re.compile(r'title: ("(?:[ !#-\[\]-~]|\\["\\])*")'
                         r'|tags: (\[(?:"[a-z0-9_-]+"(?:, "[a-z0-9_-]+")*)?\])'
                         r"|(search_one_entry: true)|(search:\n  exclude: true)|(hide:\n  - toc)")
_FRONT_END = re.compile(r"(?:\.{3}|-{3})[ \t]*\n")


def front_matter(source: str) -> tuple[str, dict[str, Any]] | None:
    """MkDocs' reading of a page's front matter (``mkdocs.utils.meta.get_data``: the text after
    it and its data) for front matter of the toolkit's lines only, without YAML; None for any
    other text."""
    import json

    if not source.startswith("---\n"):
        return None
    at, meta = 4, {}
    while True:
        end = _FRONT_END.match(source, at)
        if end is not None:
            break
        m = _FRONT_LINE.match(source, at)
        if m is None or source[m.end():m.end() + 1] != "\n":
            return None
        title, tags, one, search, hide = m.groups()
        key, value = (("title", json.loads(title)) if title is not None
                      else ("tags", json.loads(tags)) if tags is not None
                      else ("search_one_entry", True) if one is not None
                      else ("search", {"exclude": True}) if search is not None
                      else ("hide", ["toc"]) if hide is not None else ("", None))
        if key in meta or not key:
            return None
        meta[key] = value
        at = m.end() + 1
    if at == 4:
        return None  # no line: YAML reads None, which MkDocs does not take as front matter
    return source[end.end():].lstrip("\n"), meta


def read_source(page: Any, config: Any) -> None:
    """MkDocs' ``Page.read_source``, with the toolkit's front matter read by
    :func:`front_matter` (on each page: ``on_pre_page``)."""
    from mkdocs.structure import pages as mk
    from mkdocs.utils import meta as mk_meta

    source = config.plugins.on_page_read_source(page=page, config=config)
    if source is None:
        try:
            source = page.file.content_string
        except OSError:
            mk.log.error(f"File not found: {page.file.src_path}")
            raise
        except ValueError:
            mk.log.error(f"Encoding error reading file: {page.file.src_path}")
            raise
    read = front_matter(source)
    page.markdown, page.meta = read if read is not None else mk_meta.get_data(source)
