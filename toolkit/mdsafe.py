"""Untrusted text as literal Markdown, for the site (Python-Markdown) and GitHub alike.

The one escaper of AI-written text: :func:`inline` (one line) and :func:`block` (paragraphs),
used by the site (``toolkit.site.md_escape``/``md_block``) and the handoff report
(``toolkit.handoff.md_text``/``md_block``); :func:`unescape` undoes them for the handoff's
final secret scan. Every form it writes means the same in both renderers: ``&``, ``<``, ``>``
and ``~`` as entities (quotes stay quotes: no value reaches an HTML attribute unescaped, and
``password = &quot;…`` would look like a secret to the final scan), the inline syntax
(``\\ ` * _ { } [ ] | # !``) backslashed, and what would open a block at a line's start
(``+ - = :``, ``1.``, ``1)``) escaped; invisible and control characters are shown as
``<U+XXXX>`` (``toolkit.display.visible``), so nothing hides or reorders text.
``github=True`` also puts a would-be @-mention in a code span, where GitHub notifies no one
(e-mail addresses and ``git@host`` untouched). It never writes ``&#35;``: the site's table
placeholders use it (``toolkit.site.TABLE_TOKEN``).

:class:`NoRawHtmlExtension` is the second wall behind that escaping on the site. Python-Markdown
passes raw HTML through by default (block ``<div>…`` and inline ``<b>``), and neither MkDocs nor
Material can turn that off: the extension removes the raw-HTML block preprocessor and the
inline HTML pattern, so even text that slipped through unescaped would be rendered as literal
``&lt;…&gt;`` text. Entities (``&amp;``) keep working. Enabled in the repository's
``mkdocs.yml`` as ``toolkit.mdsafe``.
"""

from __future__ import annotations

import re
from typing import Any

from markdown import Markdown
from markdown.extensions import Extension

from toolkit.display import visible

_SUBS = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "~": "&#126;",
         **{c: "\\" + c for c in "\\`*_{}[]|#!"}}
_TABLE = str.maketrans(_SUBS)
# What opens a block at a line's start once the characters above are escaped: list markers,
# setext underlines (=, and - which is also a list), definition lists and admonition-like
# syntax (:), ordered lists (1. and 1)).
_LINE_START = re.compile(r"([-+=:])|(\d+)([.)])")
_LINE_START_SUB = {"+": "\\+", "-": "\\-", "=": "&#61;", ":": "&#58;"}
# An "@name" that GitHub would turn into a mention: "@" not after a letter or digit (so not in
# an e-mail address or ssh://git@host) and followed by a user name.
_MENTION = re.compile(r"(?<![A-Za-z0-9])@[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9]))*")
_MENTION_SPAN = re.compile(r"`(@[A-Za-z0-9-]+)`")
_UNSUBS = {v: k for k, v in _SUBS.items() if v.startswith("&")} | {"&#61;": "=", "&#58;": ":",
                                                                     "&#41;": ")", "&#124;": "|"}
_UNESCAPE = re.compile(r"\\([\\`*_{}\[\]|#!+\-.])|(&#?[a-z0-9]+;)")


def _escape_line(line: str, github: bool) -> str:
    out = line.translate(_TABLE)
    m = _LINE_START.match(out)
    if m:
        if m.group(1):
            out = _LINE_START_SUB[m.group(1)] + out[1:]
        else:
            digits = m.group(2)
            out = digits + ("\\." if m.group(3) == "." else "&#41;") + out[len(digits) + 1:]
    if github:
        out = _MENTION.sub(lambda mm: f"`{mm.group(0)}`", out)
    return out


def inline(text: str, *, github: bool = False) -> str:
    """One line of literal text: no markup, no HTML, no link, no block syntax, whatever
    ``text`` holds. Line breaks and runs of spaces become one space."""
    return _escape_line(visible(" ".join(text.replace("\r", "\n").split())), github)


def block(text: str, *, github: bool = False) -> str:
    """Multi-line literal text: paragraphs kept (blank lines), line breaks kept (hard breaks),
    indentation dropped (it would make code blocks), every line escaped as by :func:`inline`."""
    text = visible(text.replace("\r\n", "\n").replace("\r", "\n"))
    paragraphs = []
    for para in re.split(r"\n[ \t]*\n", text.strip("\n")):
        lines = [_escape_line(" ".join(ln.split()), github) for ln in para.split("\n")]
        lines = [ln for ln in lines if ln]
        if lines:
            # GitHub breaks a comment's lines where they break; Python-Markdown needs "  "
            paragraphs.append(("\n" if github else "  \n").join(lines))
    return "\n\n".join(paragraphs)


def unescape(text: str) -> str:
    """The text :func:`inline` and :func:`block` escaped, as written (for a secret scan of what
    a reader copies); invisible characters stay ``<U+XXXX>``."""
    text = _MENTION_SPAN.sub(r"\1", text).replace("  \n", "\n")
    return _UNESCAPE.sub(lambda m: m.group(1) or _UNSUBS.get(m.group(2), m.group(2)), text)


class NoRawHtmlExtension(Extension):
    """Deregister Python-Markdown's raw HTML handling (block and inline)."""

    def extendMarkdown(self, md: Markdown) -> None:  # Python-Markdown's API name
        if "html_block" in md.preprocessors:
            md.preprocessors.deregister("html_block")
        if "html" in md.inlinePatterns:
            md.inlinePatterns.deregister("html")


def makeExtension(**kwargs: Any) -> NoRawHtmlExtension:  # Python-Markdown's API
    return NoRawHtmlExtension(**kwargs)
