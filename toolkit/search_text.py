"""The text of the site's search entries: a readable preview, then only the search terms the
page's entries do not hold yet (issue 16, item 4).

Material's search plugin gives each entry the text of its section with some markup (``<p>``,
``<li>``, ``<code>``...). In the browser, lunr indexes the title, tags and text of each entry
(split by the configured separator, lower-cased), and a result shows the entry's text (the
blocks of it that hold a match, or all of it). Repeating a term adds nothing to what search
finds, so :class:`EntryText` makes each entry's text

- the preview: the text's first words, without markup, up to :data:`PREVIEW` characters (at
  least one word): all a result shows;
- then, in an element browsers do not display (``<rp>``, hidden by their own style sheet, so
  no result shows a list of words; it keeps the text one block, so a match in it shows the
  preview), each term of the rest of the text that the page's entries so far (their titles,
  tags and texts, the preview included) do not hold, once, in the order of the text.

A word is a run of the text between (ASCII) whitespace. An ASCII word gives its terms, split
by the separator as the browser splits them (JavaScript's ``\\b`` is ASCII too), lower-cased;
a word with any other character is kept whole unless the same word is held, as the browser
might split it otherwise (at a non-breaking space, say). So every term of a page's text is in
its entries, and a search for any word a page shows finds the page.
"""

from __future__ import annotations

import re

# A sentence or so: under two lines of a result in Material's widest search dialog (34.4rem,
# less 4.4rem of padding, in type of .64rem: 47 em, some 95 characters a line), three in its
# narrowest (23.4rem: some 60). Longer, the index at 15,000 entries outgrows 10 MB.
PREVIEW = 160
# what an index made by this module says of itself (part of the site's build signature: an
# index of another form is made again in full, not merged page by page)
FORM = f"preview {PREVIEW}, then the page's new terms in <rp>"
HIDDEN_OPEN, HIDDEN_CLOSE = "<rp>", "</rp>"

_SPACE = re.compile(r"[ \t\n\r\f\v]+")
_TAG = re.compile(r"<[^>]*>")  # the plugin escapes the text's own < as &lt;


class EntryText:
    """Makes the text of each entry of a page in turn (:meth:`page` when the page changes):
    what the page's entries hold so far (their title, tags and text) is not given again."""

    def __init__(self, separator: str) -> None:
        self._split = re.compile(separator, re.ASCII).split
        self._terms: set[str] = set()
        self._words: set[str] = set()  # words with a character other than ASCII
        self._page: str | None = None

    def page(self, url: str) -> None:
        if url != self._page:
            self._page = url
            self._terms = set()
            self._words = set()

    def _terms_of(self, word: str) -> list[str]:
        return [t.lower() for t in self._split(word) if t]

    def hold(self, text: str, *, html: bool = True) -> None:
        """The words of the entry's title (``html``: escaped, with markup, as its text is) or
        of a tag (plain text; one with a markup character, which the browser may read
        otherwise, is left out) count as held: the title and tags are searched too."""
        if not html and any(c in text for c in "<>&"):
            return
        for word in _SPACE.split(_TAG.sub(" ", text) if html else text):
            if word:
                self._new(word)

    def _new(self, word: str) -> str:
        """What of ``word`` is new to the page's entries (and hold it): an ASCII word's new
        terms, a word with other characters whole unless held; "" when nothing is new."""
        if not word.isascii():
            if word in self._words:
                return ""
            self._words.add(word)
            self._terms.update(self._terms_of(word))
            return word
        new = [t for t in self._terms_of(word) if t not in self._terms]
        self._terms.update(new)
        return " ".join(dict.fromkeys(new))

    def __call__(self, text: str) -> str:
        words = [w for w in _SPACE.split(_TAG.sub(" ", text)) if w]
        count, size = 0, -1
        for word in words:
            if count and size + 1 + len(word) > PREVIEW:
                break
            count, size = count + 1, size + 1 + len(word)
        for word in words[:count]:
            self._new(word)
        rest = " ".join(n for n in map(self._new, words[count:]) if n)
        head = " ".join(words[:count])
        return f"{head}{HIDDEN_OPEN}{rest}{HIDDEN_CLOSE}" if rest else head
