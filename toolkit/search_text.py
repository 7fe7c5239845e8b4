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
FORM = f"preview {PREVIEW}, then the page's new terms in <rp>; one-entry pages' fields last"
HIDDEN_OPEN, HIDDEN_CLOSE = "<rp>", "</rp>"

_SPACE = re.compile(r"[ \t\n\r\f\v]+")
_TAG = re.compile(r"<[^>]*>")  # the plugin escapes the text's own < as &lt;
_KEPT = re.compile(r"</?(?:p|code|pre|li|ol|ul|sub|sup)>")  # the markup the plugin keeps


class EntryText:
    """Makes the text of each entry of a page in turn (:meth:`page` when the page changes):
    what the page's entries hold so far (their title, tags and text) is not given again."""

    def __init__(self, separator: str) -> None:
        # the separator between the words of a run of ASCII words, split at once
        self._split = re.compile(f"{_SPACE.pattern}|{separator}", re.ASCII).split
        self._terms: set[str] = set()
        self._words: set[str] = set()  # the words seen, as they are
        self._page: str | None = None

    def page(self, url: str) -> None:
        if url != self._page:
            self._page = url
            self._terms = set()
            self._words = set()

    def hold(self, text: str, *, html: bool = True) -> None:
        """The words of the entry's title (``html``: escaped, with the plugin's markup, as its
        text is) or of a tag (plain text) count as held: the title and tags are searched too.
        One with other markup characters, which the browser may read otherwise, is not."""
        if html:  # the plugin's markup; a title it took unescaped from the page is not held
            text = _KEPT.sub(" ", text)
            if "<" in text or ">" in text:
                return
        elif any(c in text for c in "<>&"):
            return
        self._take(text, [])

    def _take(self, text: str, new: list[str]) -> None:
        """Hold what ``text`` (plain) makes searchable; what was not held yet goes to ``new``
        in the order of the text: each new term of its ASCII words, each new word with other
        characters whole. A word seen before is skipped whole (its terms are held)."""
        seen = self._words
        words = [w for w in dict.fromkeys(_SPACE.split(text)) if w and w not in seen]
        seen.update(words)
        joined = " ".join(words)
        if joined.isascii():
            self._take_ascii(joined, new)
            return
        run: list[str] = []  # ASCII words, split at once
        for word in words:
            if word.isascii():
                run.append(word)
                continue
            self._take_ascii(" ".join(run), new)
            run = []
            new.append(word)
            self._terms.update(t.lower() for t in self._split(word) if t)
        self._take_ascii(" ".join(run), new)

    def _take_ascii(self, text: str, new: list[str]) -> None:
        held, hold, give = self._terms, self._terms.add, new.append
        for term in map(str.lower, filter(None, self._split(text))):
            if term not in held:
                hold(term)
                give(term)

    def __call__(self, text: str) -> str:
        plain = _TAG.sub(" ", text)
        words = _SPACE.split(plain.strip(" \t\n\r\f\v"))
        if words == [""]:
            return ""
        count, size = 0, -1
        for word in words:
            if count and size + 1 + len(word) > PREVIEW:
                break
            count, size = count + 1, size + 1 + len(word)
        head = " ".join(words[:count])
        self._take(head, [])
        rest: list[str] = []
        if count < len(words):
            self._take(" ".join(words[count:]), rest)
        return f"{head}{HIDDEN_OPEN}{' '.join(rest)}{HIDDEN_CLOSE}" if rest else head
