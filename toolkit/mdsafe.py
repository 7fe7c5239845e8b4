"""A Python-Markdown extension for the generated site: no raw HTML reaches the page.

Python-Markdown passes raw HTML through by default (block ``<div>…`` and inline ``<b>``), and
neither MkDocs nor Material can turn that off. The site's templates escape every AI-written
value (``toolkit.site.md_escape``); this extension is the second wall behind that escaping: it
removes the raw-HTML block preprocessor and the inline HTML pattern, so even text that slipped
through unescaped would be rendered as literal ``&lt;…&gt;`` text. Entities (``&amp;``) keep
working; they are how the escaper spells ``<``, ``>`` and ``&``.

Enabled in the repository's ``mkdocs.yml`` as ``toolkit.mdsafe``.
"""

from __future__ import annotations

from typing import Any

from markdown import Markdown
from markdown.extensions import Extension


class NoRawHtmlExtension(Extension):
    """Deregister Python-Markdown's raw HTML handling (block and inline)."""

    def extendMarkdown(self, md: Markdown) -> None:  # Python-Markdown's API name
        if "html_block" in md.preprocessors:
            md.preprocessors.deregister("html_block")
        if "html" in md.inlinePatterns:
            md.inlinePatterns.deregister("html")


def makeExtension(**kwargs: Any) -> NoRawHtmlExtension:  # Python-Markdown's API
    return NoRawHtmlExtension(**kwargs)
