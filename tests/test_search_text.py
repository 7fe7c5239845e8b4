"""A search entry's text (toolkit.search_text): a readable preview, then each word the page's
entries do not hold yet, hidden; every term of the page's text stays searchable."""

from __future__ import annotations

import random
import re
from pathlib import Path

import yaml

from tests._site_helpers import search_terms
from toolkit import search_text
from toolkit.search_text import PREVIEW, EntryText


def _separator() -> str:
    """The separator the site's search uses (the repository's base mkdocs.yml)."""
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "mkdocs.yml")
                            .read_text(encoding="utf-8"))
    [search] = [p["search"] for p in config["plugins"] if isinstance(p, dict) and "search" in p]
    return str(search["separator"])


SEPARATOR = _separator()


def _terms(text: str) -> set[str]:
    return search_terms(text, SEPARATOR)


def _parts(text: str) -> tuple[str, list[str]]:
    """(the preview a result shows, the hidden words)."""
    shown, _, hidden = text.partition(search_text.HIDDEN_OPEN)
    assert hidden == "" or hidden.endswith(search_text.HIDDEN_CLOSE), text
    return shown, [w for w in hidden.removesuffix(search_text.HIDDEN_CLOSE).split(" ") if w]


def _words(text: str) -> list[str]:
    """The text's words as the page shows them: between tags and ASCII whitespace."""
    return [w for w in re.split(r"[ \t\n\r\f\v]+", re.sub(r"<[^>]*>", " ", text)) if w]


def test_a_long_text_keeps_its_preview_and_each_new_word_once_after_it() -> None:
    intro = ("Retry the webhook with a bounded budget: the provider drops a delivery after "
             "five attempts, and the outbox worker must record each attempt. ")
    text = "<p>" + intro * 4 + "</p><ul><li>See <code>outbox/worker.py</code> and " \
           "RetryBudget.</li></ul><p>The webhook retry budget again.</p>"
    out = EntryText(SEPARATOR)(text)
    shown, hidden = _parts(out)
    words = _words(text)
    assert len(shown) <= PREVIEW and " ".join(words).startswith(shown)
    assert len(shown) > PREVIEW - 20  # cut at a word, not early
    assert "<p>" not in out and "<li>" not in out and "<code>" not in out
    # the intro's words are held by the preview: only the terms it lacks follow, once each
    # (outbox/worker.py is outbox, worker and py; RetryBudget is retry and budget)
    assert hidden == ["see", "py", "again"]
    assert _terms(out) == _terms(text)


def test_a_short_text_is_its_preview_alone() -> None:
    text = "<p>Built on 2026-05-10 12:00 UTC. Every figure links to the page behind it.</p>"
    assert EntryText(SEPARATOR)(text) == \
        "Built on 2026-05-10 12:00 UTC. Every figure links to the page behind it."
    assert EntryText(SEPARATOR)("") == ""
    assert EntryText(SEPARATOR)("<p> </p>") == ""


def test_a_section_does_not_repeat_what_its_page_s_earlier_entries_hold() -> None:
    make = EntryText(SEPARATOR)
    make.page("handoff/")
    first = make("<p>" + "alpha beta gamma delta " * 30 + "zeta</p>")
    make.page("handoff/")
    second = make("<p>" + "epsilon " * 80 + "alpha beta zeta omega</p>")
    assert _parts(first)[1] == ["zeta"]
    assert _parts(second)[1] == ["omega"]  # alpha, beta, zeta: in the page's first entry
    make.page("other/")  # another page holds nothing yet
    assert _parts(make("<p>" + "epsilon " * 80 + "alpha beta</p>"))[1] == ["alpha", "beta"]


def test_the_entry_s_title_and_tags_count_as_held() -> None:
    make = EntryText(SEPARATOR)
    make.page("slop/4b7e2c91/")
    make.hold("Legacy <code>X-Api-Token</code> header")
    for tag in ("retained_compatibility", "a<b"):
        make.hold(tag, html=False)
    make.hold("<img src=x> unescaped")  # a title the plugin took from the page as it is
    text = ("filler " * 40 + "legacy x api token header retained_compatibility a&lt;b new "
            "unescaped img")
    # a tag or title with a markup character is not read as the text's escaped words would be
    assert _parts(make(text))[1] == ["a", "b", "new", "unescaped", "img"]


def test_a_word_with_other_characters_is_left_out_only_when_the_same_word_is_held() -> None:
    """Its terms might split otherwise in the browser (a non-breaking space, a letter that is
    no word character to JavaScript's \\b), so it is compared whole."""
    text = "x " * 160 + "café Café café\u00a0bar bar café — —"
    _shown, hidden = _parts(EntryText(SEPARATOR)(text))
    # bar is kept: the word before it, whole, holds no term "bar"
    assert hidden == ["café", "Café", "café\u00a0bar", "bar", "—"]


VOCABULARY = ["agent", "Agent", "AGENT", "migration", "migrations", "schema.", "(schema",
              "RetryBudget", "retryBudget", "retry", "budget", "a/b", "a", "b", "2026-05-10",
              "05", "v1.2", "v1", "x&amp;y", "&lt;tag&gt;", "tag", "café", "Café", "naïve",
              "naïveTest", "test", "—", "·", "foo\u00a0bar", "foo", "bar", "e.g.", "e", "g",
              "legacy_auth.rs:88", "legacy_auth", "rs", "88", "it's", "it", "s", "\u212a"]


def test_random_pages_keep_every_term_and_repeat_none_past_the_preview() -> None:
    rng = random.Random(1604)
    for _ in range(300):
        make = EntryText(SEPARATOR)
        page_in: set[str] = set()
        page_out: set[str] = set()
        held: set[str] = set()
        for _entry in range(rng.randint(1, 4)):
            words = [rng.choice(VOCABULARY) for _ in range(rng.randint(0, 120))]
            tags = ["<p>", "</p>", "<li>", "</li>", "<code>", "</code>", " ", "  ", "\n"]
            text = "".join(w + rng.choice(tags) for w in words)
            make.page("p/")
            out = make(text)
            page_in |= _terms(text)
            page_out |= _terms(out)
            shown, hidden = _parts(out)
            assert "<" not in shown and not re.search(r"<(?!/?rp>)", out), out
            assert " ".join(_words(text)).startswith(shown)
            assert len(shown) <= PREVIEW or " " not in shown
            # each hidden word brings a term not held yet (held: the terms of the page's
            # ASCII words so far; a word with other characters counts whole)
            held |= {t for w in _words(shown) for t in (_terms(w) if w.isascii() else {w})}
            for word in hidden:
                new = _terms(word) - held if word.isascii() else {word} - held
                assert new, (word, out)
                held |= _terms(word) if word.isascii() else {word}
            assert len(hidden) == len(set(hidden))
        assert page_out == page_in
