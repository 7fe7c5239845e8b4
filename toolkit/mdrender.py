"""Agent-written Markdown rendered to safe HTML for the site (markdown-it-py).

Entry text (context, pattern, evidence, related), session prompts and slop descriptions are
Markdown written by agents. :func:`render` turns one such text into HTML that the site puts in
place of a placeholder (``toolkit.site``'s ``|block`` filter, swapped in by
``toolkit/site_hooks.py``), so Python-Markdown and its extensions never read agent text.

The rules, each enforced here whatever the text holds:

- CommonMark (plus pipe tables and ``~~strike~~``), line breaks kept as the agent wrote them;
  raw HTML off: ``<script>``, ``<div>`` and ``<!-- -->`` show as literal text.
- Links only to ``http``/``https`` URLs with a host and ``mailto:`` addresses, checked after
  entities and escapes are decoded (``&#106;avascript:`` is ``javascript:``). Any other
  destination (``javascript:``, ``data:``, ``vbscript:``, ``file:``, protocol-relative
  ``//host``, relative paths, ``#anchors``) is not a link: the Markdown shows as written. The
  same rule holds for autolinks and reference definitions (an unsafe definition defines
  nothing). Relative links are refused because they name files of the agent's repository,
  which are not pages of the site. Links get ``rel="nofollow noopener noreferrer"``.
- Images are never fetched (the site makes no request to another host): an image with a
  safe URL becomes a link to it, labelled with its alt text.
- Headings become bold paragraphs: the page's outline and table of contents are ours.
- Invisible and control characters are shown as ``<U+XXXX>`` (``toolkit.display.visible``).
- ``scrub`` (a redacted build passes ``toolkit.redact``'s redactor) runs again on the parsed
  text, code and link targets, after entities and backslash escapes are decoded. The redactor
  already replaces a secret spelled ``ghp\\_…`` or ``ghp&#95;…`` in the source; this second
  pass is for what only the parser puts together (a link target, a secret split by markup).

Rendering is linear in the text's length (markdown-it's delimiter and nesting limits); the
caller cuts the text first (``toolkit.site.MAX_BLOCK``). A text nested as deep as
markdown-it's limit (about ten list levels, twenty quote levels), where it would drop the rest,
is shown as literal text instead, whole.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.common.utils import unescapeAll
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from toolkit.display import visible
from toolkit.textio import split_url

Scrub = Callable[[str], str]
REL = "nofollow noopener noreferrer"


def link_allowed(url: str) -> bool:
    """Whether a (decoded, normalised) link destination may be a link on the site: an
    http(s) URL with a host, or a mailto: address."""
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return False
    parts = split_url(url)
    if parts is None:
        return False
    host = parts.hostname
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        return bool(host) and url[len(scheme):len(scheme) + 3] == "://"
    if scheme == "mailto":
        address = unquote(parts.path)
        return "@" in address and not address.startswith(("/", "@"))
    return False


def _heading_open(self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict,
                  env: EnvType) -> str:
    return "<p><strong>"


def _heading_close(self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict,
                   env: EnvType) -> str:
    return "</strong></p>\n"


def _link_open(self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict,
               env: EnvType) -> str:
    tokens[idx].attrSet("rel", REL)
    return str(self.renderToken(tokens, idx, options, env))


def _image(self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict,
           env: EnvType) -> str:
    """An image as a link to it (never an <img>: the site fetches nothing from other hosts)."""
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    src = str(token.attrGet("src") or "")
    label = html.escape(f"image: {alt}" if alt else "image", quote=True)
    return f'<a href="{html.escape(src, quote=True)}" rel="{REL}">{label}</a>'


@functools.lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True, "linkify": False,
                                   "typographer": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = link_allowed  # type: ignore[method-assign]
    md.add_render_rule("heading_open", _heading_open)
    md.add_render_rule("heading_close", _heading_close)
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("image", _image)
    md.core.ruler.push("tk_scrub", _scrub_rule)
    return md


def _scrub_rule(state: StateCore) -> None:
    scrub: Scrub | None = state.env.get("tk_scrub")
    if scrub is None:
        return
    md = state.md
    for token in state.tokens:
        if token.type in ("code_block", "fence"):
            token.content = scrub(token.content)
            token.info = scrub(unescapeAll(token.info))  # the renderer decodes it
        for child in token.children or ():
            _scrub_token(child, scrub, md)


def _scrub_token(token: Token, scrub: Scrub, md: MarkdownIt) -> None:
    if token.type in ("text", "code_inline"):
        token.content = scrub(token.content)
    for name in ("href", "src", "title"):
        value = token.attrGet(name)
        if value is None:
            continue
        plain = unquote(str(value))
        clean = scrub(plain)
        if clean != plain:
            token.attrSet(name, md.normalizeLink(clean) if name != "title" else clean)
    for child in token.children or ():
        _scrub_token(child, scrub, md)


_TAG = re.compile(r"<[^>]*>")


# Plain words: lines that start with a letter, end with no space and hold no character
# markdown-it gives a meaning to (no emphasis, code, link, entity, table or escape) in a
# paragraph of its own. markdown-it makes of such a text one paragraph, its line breaks kept
# (breaks: true) and only ``"`` escaped: :func:`render` writes that without parsing it (most
# entry text is plain sentences).
_PLAIN_LINE = r"[A-Za-z](?:[A-Za-z0-9 ,.;:'\"?()/%$@=+-]*[A-Za-z0-9,.;:'\"?()/%$@=+-])?"
_PLAIN = re.compile(rf"{_PLAIN_LINE}(?:\n{_PLAIN_LINE})*")
# A bullet list of plain items, one line each ("- " and words that may start with a digit but
# not with an ordered list's marker, ``1.`` or ``1)``, which would start a list in the item):
# markdown-it makes of it one tight list, written here without parsing it (an entry's evidence).
_PLAIN_ITEM = (r"(?![0-9]+[.)])[A-Za-z0-9]"
               r"(?:[A-Za-z0-9 ,.;:'\"?()/%$@=+-]*[A-Za-z0-9,.;:'\"?()/%$@=+-])?")
_PLAIN_LIST = re.compile(rf"- {_PLAIN_ITEM}(?:\n- {_PLAIN_ITEM})*")


def _markdown_it(source: str, env: dict[str, Any]) -> str | None:
    """markdown-it's HTML of ``source``; None when it reaches the nesting limit."""
    md = _parser()
    tokens = md.parse(source, env)
    if any(t.level >= md.options["maxNesting"] - 1 for t in tokens):
        return None
    return md.renderer.render(tokens, md.options, env).strip("\n")


def render(text: str, *, scrub: Scrub | None = None) -> str:
    """One agent-written Markdown text as safe HTML (see the module docstring). With
    ``scrub``, if the rendered text still holds something ``scrub`` would change (a secret
    split by markup, ``ghp_**abc**def``), that text is shown scrubbed, literally, instead."""
    source = visible(text.replace("\r\n", "\n").replace("\r", "\n"))
    env: dict[str, Any] = {"tk_scrub": scrub} if scrub is not None else {}
    if scrub is None and _PLAIN.fullmatch(source):
        return "<p>" + source.replace('"', "&quot;").replace("\n", "<br />\n") + "</p>"
    if scrub is None and _PLAIN_LIST.fullmatch(source):
        items = source.replace('"', "&quot;").split("\n")
        return "<ul>\n" + "".join(f"<li>{item[2:]}</li>\n" for item in items) + "</ul>"
    out = _markdown_it(source, env)
    if out is None:
        # at its nesting limit markdown-it drops the rest of the text: show all of it
        return literal(scrub(source) if scrub is not None else source)
    if scrub is not None:
        shown = html.unescape(_TAG.sub("", out))
        if scrub(shown) != shown:
            return literal(scrub(shown))
    return out


def literal(text: str) -> str:
    """Text as HTML paragraphs of literal text (blank lines part them, line breaks kept)."""
    paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    return "\n".join("<p>" + html.escape(p, quote=True).replace("\n", "<br />\n") + "</p>"
                      for p in paragraphs)
