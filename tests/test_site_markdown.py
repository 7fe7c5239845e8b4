"""Agent-written Markdown on the site is rendered, safely (issue 15 item 3; FAULTS.md E1b).

Entry text, session prompts and slop descriptions go through ``toolkit.mdrender`` (markdown-it,
raw HTML off, links only http/https/mailto, images never fetched, headings kept out of the
page's outline, redaction of what the renderer decodes). The unit cases attack the renderer
with Markdown's own syntax; the site cases build a real site and read its HTML and search
index.
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests._site_helpers import World, build, make_world, scan, search_terms
from toolkit.mdrender import link_allowed, render
from toolkit.redact import redactor
from toolkit.site import md_block

# what rendered agent text may hold: tag -> attributes it may carry
SAFE_TAGS: dict[str, set[str]] = {
    **{t: set() for t in ("p", "br", "strong", "em", "s", "pre", "blockquote", "ul", "li",
                          "hr", "table", "thead", "tbody", "tr")},
    "div": {"class"}, "code": {"class"}, "ol": {"start"}, "th": {"style"}, "td": {"style"},
    "a": {"href", "rel", "title"},
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(out: str) -> _Tags:
    p = _Tags()
    p.feed(out)
    p.close()
    return p


def assert_safe_html(out: str) -> None:
    """Only the tags and attributes of SAFE_TAGS; every link an allowed URL, nofollow."""
    for tag, attrs in parse(out).tags:
        assert tag in SAFE_TAGS, (tag, out)
        assert set(attrs) <= SAFE_TAGS[tag], (tag, attrs)
        if tag == "a":
            href = attrs.get("href") or ""
            assert link_allowed(href), href
            assert attrs.get("rel") == "nofollow noopener noreferrer"
        if tag == "code" and attrs.get("class"):
            assert re.fullmatch(r"language-[^\s\"'<>]+", attrs["class"] or "")
        if tag in ("th", "td") and attrs.get("style"):
            assert re.fullmatch(r"text-align:(left|right|center)", attrs["style"] or "")


def hrefs(out: str) -> list[str]:
    return [attrs.get("href") or "" for tag, attrs in parse(out).tags if tag == "a"]


# ------------------------------------------------------------------ what agents write

def test_the_agents_markdown_is_rendered_not_shown_raw() -> None:
    out = md_block("**User Request:** make `cargo test` pass\n\n"
                   "- 2026-05-01 -- session s: dry-run clean\n"
                   "- 2026-05-02 -- session t: *applied*\n\n"
                   "```python\nprint('<hi>')\n```")
    assert_safe_html(out)
    assert "<strong>User Request:</strong>" in out and "<code>cargo test</code>" in out
    assert "<li>2026-05-01 -- session s: dry-run clean</li>" in out
    assert "<em>applied</em>" in out
    assert '<pre><code class="language-python">print(\'&lt;hi&gt;\')\n</code></pre>' in out
    assert "**" not in out and "`" not in out


def test_line_breaks_and_paragraphs_are_kept() -> None:
    out = md_block("first line\nsecond line\r\n\r\nnext paragraph")
    assert out == ('<div class="tk-md">\n<p>first line<br />\nsecond line</p>\n'
                   "<p>next paragraph</p>\n</div>")


# ------------------------------------------------------------------ links and images

UNSAFE_URLS = [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "&#106;avascript:alert(1)",
    "&#x6A;&#x61;vascript:alert(1)",
    "javascript&#58;alert(1)",
    "javascript&colon;alert(1)",
    "java%0ascript:alert(1)",
    "\\javascript:alert(1)",
    "vbscript:msgbox(1)",
    "data:text/html,<script>alert(1)</script>",
    "data:image/svg+xml;base64,PHN2Zz4=",
    "file:///etc/passwd",
    "//evil.example/x",
    "\\\\evil.example\\x",
    "http:evil.example",
    "https:///nohost",
    "src/handlers/auth.rs",
    "../../etc/passwd",
    "/absolute/path",
    "#fragment",
    "mailto:",
    "ftp://files.example/x",
]


@pytest.mark.parametrize("url", UNSAFE_URLS)
def test_an_unsafe_destination_is_never_a_link_or_an_image(url: str) -> None:
    forms = [f"[click]({url})", f"[click](<{url}>)", f'[click]({url} "title")',
             f"![pic]({url})", f"[click][r]\n\n[r]: {url}", f"![pic][r]\n\n[r]: {url}",
             f"[r]\n\n[r]: <{url}>", f"<{url}>"]
    for form in forms:
        out = render(form)
        assert_safe_html(out)
        assert hrefs(out) == [], (form, out)
        assert "<img" not in out


@pytest.mark.parametrize("url", ["https://docs.example/guide?a=1&b=2", "http://x.example/",
                                 "HTTPS://Docs.Example/A", "mailto:me@example.com"])
def test_a_safe_destination_is_one_nofollow_link(url: str) -> None:
    for form in (f"[docs]({url})", f"[docs][r]\n\n[r]: {url}", f"<{url}>"):
        out = render(form)
        assert_safe_html(out)
        assert [unquote(html.unescape(h)) for h in hrefs(out)] == [url], (form, out)


def test_an_email_autolink_is_a_mailto_link() -> None:
    assert hrefs(render("<me@example.com>")) == ["mailto:me@example.com"]


def test_images_are_never_fetched_a_safe_one_becomes_a_link() -> None:
    out = render("![build graph](https://evil.example/track.png) ![](http://x.example/y.gif)")
    assert_safe_html(out)
    assert "<img" not in out
    assert hrefs(out) == ["https://evil.example/track.png", "http://x.example/y.gif"]
    assert ">image: build graph</a>" in out and ">image</a>" in out


def test_a_link_cannot_break_out_of_its_attribute() -> None:
    out = render('[x](https://a.example/"onmouseover="alert(1)) '
                 "[y](<https://a.example/' onclick='alert(1)>)")
    assert_safe_html(out)  # <a> holds href and rel only: no attribute got in
    assert "title=" not in out
    assert len(hrefs(out)) == 2
    for href in hrefs(out):
        assert '"' not in href and not any(ch.isspace() for ch in href)


def test_reference_definitions_stay_in_their_own_text() -> None:
    assert hrefs(render("[r]: https://defined.example/\n\nfirst text")) == []
    assert hrefs(render("second text uses [it][r]")) == []  # r is not defined here
    out = render("[it][r] and [r]\n\n[r]: https://defined.example/ 'T'")
    assert hrefs(out) == ["https://defined.example/"] * 2


# ------------------------------------------------------------------ raw HTML

@pytest.mark.parametrize("raw", [
    "<script>alert(1)</script>",
    "<div onclick=\"alert(1)\">block</div>",
    "<iframe src=\"https://evil.example\"></iframe>",
    "text <b onmouseover=alert(1)>inline</b> text",
    "<img src=x onerror=alert(1)>",
    "<!-- hidden comment -->",
    "<?php echo 1; ?>",
    "<![CDATA[ x ]]>",
    "<!DOCTYPE html>",
    "<a href=\"javascript:alert(1)\">a</a>",
    "<style>body{display:none}</style>",
    "<svg><script>alert(1)</script></svg>",
    "<details open><summary>x</summary></details>",
])
def test_raw_html_block_and_inline_is_literal_text(raw: str) -> None:
    out = render(raw)
    assert_safe_html(out)
    assert raw.replace("\n", "") in "".join(parse(out).text).replace("\n", "")


def test_invisible_characters_are_shown_not_kept() -> None:
    out = render("a\u202eb\u200b `c\u2066d` [e\u202e](https://x.example/)")
    assert "\u202e" not in out and "\u200b" not in out and "\u2066" not in out
    assert "&lt;U+202E&gt;" in out and "&lt;U+2066&gt;" in out


# ------------------------------------------------------------------ structure

def test_headings_are_bold_paragraphs_not_page_headings() -> None:
    out = render("# One\n\n## Two {#custom}\n\n###### Six\n\nSetext\n======\n\nMore\n----")
    tags = [t for t, _ in parse(out).tags]
    assert not any(re.fullmatch(r"h\d", t) for t in tags), out
    assert "<p><strong>One</strong></p>" in out and "<p><strong>Setext</strong></p>" in out
    assert "id=" not in out


def test_text_nested_past_the_parsers_limit_is_shown_whole() -> None:
    for text in ("> " * 40 + "deepest-word",
                 "".join("  " * i + f"- level{i}\n" for i in range(30))):
        out = render(text)
        assert_safe_html(out)
        shown = "".join(parse(out).text)
        assert ("deepest-word" in shown) if "deepest" in text else ("level29" in shown)


def test_a_long_text_is_cut_with_a_note_after_the_rendered_part() -> None:
    out = md_block("```\n" + "x" * 50_000)
    assert len(out) < 21_000
    assert out.endswith("<p><em>… [30,004 more characters in the data download]</em></p>\n</div>")


def _calls(fn: Callable[[], object]) -> int:
    """Python function calls made by ``fn`` (a measure of work that no clock disturbs)."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


BOMBS: dict[str, Callable[[int], str]] = {
    "emphasis": lambda n: "*a " * n,
    "strong": lambda n: "**a" * n,
    "nested emphasis": lambda n: "*" * n + "a" + "*" * n,
    "mixed delimiters": lambda n: "*_" * n,
    "underscores": lambda n: "_a" * n,
    "strikethrough": lambda n: "~~a" * n,
    "open brackets": lambda n: "[" * n,
    "open images": lambda n: "![" * n,
    "unclosed links": lambda n: "[a](" * n,
    "bracket pairs": lambda n: "[a" * n + "]" * n,
    "empty links": lambda n: "[](" * n + ")" * n,
    "backtick runs": lambda n: "`a``" * n,
    "angle brackets": lambda n: "<" * n,
    "autolink starts": lambda n: "<a:" * n,
    "reference definitions": lambda n: "[a]: <" * n,
    "entities": lambda n: "&#" * n,
    "table": lambda n: "|a" * n + "\n" + "|-" * n + "\n" + "|b" * n,
    "quotes": lambda n: "> " * n + "x",
    "line breaks": lambda n: "a\n" * n,
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_hostile_nesting_and_delimiter_runs_take_linear_work(name: str) -> None:
    """Four times the input costs about four times the work (a quadratic parser would do
    sixteen times), and the output stays within a small multiple of the input."""
    make = BOMBS[name]
    small, large = make(1_500), make(6_000)
    ratio = _calls(lambda: render(large)) / _calls(lambda: render(small))
    assert ratio < 5.5, ratio
    out = md_block(make(20_000))
    assert 0 < len(out) < 8 * 20_000 * 4 + 1_000
    assert_safe_html(out)


# ------------------------------------------------------------------ redaction

SECRET = "ghp_" + "R7kQ2mX9vL4pT8sW1nB6cY3hJ5dF0gA2eZ7u"
BODY = SECRET[4:]


@pytest.mark.parametrize("form", [
    SECRET.replace("_", "\\_"),
    SECRET.replace("_", "&#95;"),
    SECRET.replace("_", "&lowbar;"),
    f"[docs](https://x.example/?t={SECRET.replace('_', '&#95;')})",
    f'[docs](https://x.example/ "{SECRET.replace("_", "&#95;")}")',
    f"[{SECRET.replace('_', chr(92) + '_')}](https://x.example/)",
    f"![{SECRET.replace('_', '&#95;')}](https://x.example/p.png)",
    f"[docs][r]\n\n[r]: https://x.example/{SECRET.replace('_', '&#95;')}",
    f"```{SECRET.replace('_', '&#95;')}\ncode\n```",
    f"ghp_**{BODY[:12]}**{BODY[12:]}",
    f"ghp_[{BODY[:12]}](https://x.example/){BODY[12:]}",
])
def test_a_redacted_build_redacts_what_the_renderer_decodes(form: str) -> None:
    """The renderer's own pass, on the text as written and as the redactor left it (the
    redactor replaces a spelled secret itself, FAULTS.md H3; one split by markup only
    the rendered text shows): the rendered text never shows the secret."""
    scrub = redactor(fold=True)
    for text in (form, scrub(form)):
        out = md_block(text, scrub)
        assert_safe_html(out)
        for view in (out, html.unescape(out), unquote(html.unescape(out)),
                     html.unescape(re.sub(r"<[^>]*>", "", out))):
            assert SECRET not in view, (form, out)
        assert "[REDACTED]" in html.unescape(unquote(out))


def test_without_redaction_the_text_is_shown_as_written() -> None:
    assert SECRET in md_block(SECRET.replace("_", "\\_"))


# ------------------------------------------------------------------ the built site

MD_SLOP_ID = "c0ffee00-0000-4000-8000-000000000002"
MD_DESCRIPTION = f"""**User Request:** stop the `zebrafinch` retries

# Agent heading one

## Agent heading two

- 2026-05-03 -- session s: saw [the runbook](https://runbook.example/retries)
- 2026-05-04 -- session t: [bad](javascript:alert(1)) ![pixel](https://tracker.example/p.gif)

[creds](https://admin:Sup3rS3cretPw@db.example/) token {SECRET.replace("_", "&#95;")}
"""


@pytest.fixture(scope="module")
def md_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, Path]:
    world = make_world(tmp_path_factory.mktemp("markdown"))
    slop = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    data = json.loads(slop.read_text(encoding="utf-8"))
    data["entries"].append({
        "id": MD_SLOP_ID, "bucket": "stale_docs", "severity": "low", "confidence": "high",
        "owner": "auto", "source_links": [], "title": "Markdown probe",
        "description": MD_DESCRIPTION, "status": "open",
        "cleanup_recommendation": "Run `cargo fix` then **commit**.",
        "created_at": "2026-05-01T00:00:00+00:00", "updated_at": "2026-05-01T00:00:00+00:00"})
    slop.write_text(json.dumps(data, indent=2), encoding="utf-8")
    result = build(world, redact=True)
    assert result.warnings == []
    return world, result.out


def test_site_entry_pages_show_rendered_markdown(md_site: tuple[World, Path]) -> None:
    _, site = md_site
    page = (site / "slop" / MD_SLOP_ID[:8] / "index.html").read_text(encoding="utf-8")
    assert "<strong>User Request:</strong> stop the <code>zebrafinch</code> retries" in page
    assert "<strong>commit</strong>" in page and "<code>cargo fix</code>" in page
    assert ('<a href="https://runbook.example/retries" rel="nofollow noopener noreferrer">'
            "the runbook</a>") in page
    assert "[bad](javascript:alert(1))" in page  # shown as written, not a link
    assert "<img" not in page.split('id="description"')[1]
    assert "tracker.example" not in "".join(
        (dict(a).get("src") or "") for t, a in scan(site / "slop" / MD_SLOP_ID[:8] /
                                                    "index.html").tags)
    # the ledger entry's evidence lines and code from the fixture
    entry = (site / "ledger" / "patterns" /
             "run-the-migration-dry-run-before-applying-schema-changes" / "index.html"
             ).read_text(encoding="utf-8")
    assert "<code>alembic upgrade head --sql</code>" in entry
    assert "<li>2026-04-18 -- session jane-doe_86e0b9_2026-04-18_091233:" in entry


def test_agent_headings_stay_out_of_the_page_outline(md_site: tuple[World, Path]) -> None:
    _, site = md_site
    page = (site / "slop" / MD_SLOP_ID[:8] / "index.html").read_text(encoding="utf-8")
    toc = page.split('class="md-nav md-nav--secondary"', 1)[1].split("</nav>", 1)[0]
    toc_targets = re.findall(r'href="#([^"]+)"', toc)
    assert toc_targets == ["description", "sources", "cleanup-recommendation"]
    heads = re.findall(r"<h([1-6])[^>]*>(.*?)</h\1>", page, re.S)
    assert not any("Agent heading" in text for _, text in heads)
    assert "<p><strong>Agent heading one</strong></p>" in page


def test_search_holds_the_rendered_text(md_site: tuple[World, Path]) -> None:
    _, site = md_site
    docs = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    text = " ".join(d["text"] for d in docs["docs"]
                    if d["location"].startswith(f"slop/{MD_SLOP_ID[:8]}/"))
    # the words as the page shows them (a page's entries hold each search term once)
    terms = search_terms(text, docs["config"]["separator"])
    assert {"user", "request", "zebrafinch", "the", "runbook"} <= terms
    assert not any("*" in t or "`" in t for t in terms), sorted(terms)
    assert "tktable" not in text and "&#35;" not in text


def test_a_redacted_site_leaks_no_secret_through_rendered_markdown(
        md_site: tuple[World, Path]) -> None:
    _, site = md_site
    for path in [*site.rglob("*.html"), site / "search" / "search_index.json"]:
        text = path.read_text(encoding="utf-8")
        for view in (text, html.unescape(text), unquote(text)):
            assert SECRET not in view, path
            assert "Sup3rS3cretPw" not in view, path


def test_hostile_markdown_images_are_links_not_fetched(hostile_site: tuple[World, Path]) -> None:
    """The hostile slop description's images (tests/_site_helpers.MARKDOWN_IMAGES) are links;
    tests/test_browser.py opens the page and sees no request leave 127.0.0.1."""
    _, site = hostile_site
    tags = scan(site / "slop" / "deadbeef" / "index.html").tags
    assert not [a for t, a in tags if t == "img" and "tracker" in str(a)]
    links = [dict(a).get("href") for t, a in tags if t == "a"]
    assert "https://tracker.example/p.gif" in links and "http://tracker.example/b.png" in links


def test_plain_text_is_rendered_as_markdown_it_renders_it() -> None:
    """Plain sentences skip the parser (toolkit.mdrender._PLAIN): for every text the shortcut
    takes, the HTML is markdown-it's, byte for byte (seeded random texts of the characters
    the shortcut allows, and of those that open a block at a line's start)."""
    import random

    from toolkit import mdrender

    rng = random.Random(16)
    alphabet = "aZ09 ,.;:'\"?()/%$@=+-\n"
    taken = 0
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        source = mdrender.visible(text)
        if mdrender._PLAIN.fullmatch(source):
            taken += 1
            assert mdrender.render(text) == mdrender._markdown_it(source, {}), text
    assert taken > 500
    # an entry's usual sentences, a quote, two lines
    for text in ('Run "make test" before (and after) the change; 3/4 passed.', "One.\nTwo."):
        assert mdrender._PLAIN.fullmatch(text)
        assert mdrender.render(text) == mdrender._markdown_it(text, {})
    # emphasis, a list, a heading: parsed
    for text in ("a *b*", "- a", "# a", "a\n=", "1. a", "a  \nb"):
        assert not mdrender._PLAIN.fullmatch(text), text


def test_a_plain_list_is_rendered_as_markdown_it_renders_it() -> None:
    """A bullet list of plain one-line items skips the parser (toolkit.mdrender._PLAIN_LIST):
    for every text the shortcut takes, the HTML is markdown-it's, byte for byte (seeded random
    lists of the characters and markers it allows, and of those that nest a list, loosen it or
    continue an item)."""
    import random

    from toolkit import mdrender

    rng = random.Random(16)
    alphabet = "aZ09 ,.;:'\"?()/%$@=+-"
    markers = ("- ", "- ", "- ", "- 1. ", "- 12) ", "-", "* ", "  ", "")
    taken = 0
    for _ in range(20_000):
        lines = ["".join([rng.choice(markers), *(rng.choice(alphabet)
                                                 for _ in range(rng.randint(0, 25)))])
                 for _ in range(rng.randint(1, 4))]
        text = rng.choice(("\n", "\n", "\n\n")).join(lines)
        source = mdrender.visible(text)
        if mdrender._PLAIN_LIST.fullmatch(source):
            taken += 1
            assert mdrender.render(text) == mdrender._markdown_it(source, {}), text
    assert taken > 200
    # an entry's evidence
    text = '- 2026-04-01 -- session s1: ran "make test".\n- 2026-04-02 -- 3/4 passed'
    assert mdrender._PLAIN_LIST.fullmatch(text)
    assert mdrender.render(text) == mdrender._markdown_it(text, {}) == (
        "<ul>\n<li>2026-04-01 -- session s1: ran &quot;make test&quot;.</li>\n"
        "<li>2026-04-02 -- 3/4 passed</li>\n</ul>")
    # an item that starts a list, a loose list, another marker, a continued item: parsed
    for text in ("- 1. a", "- 2) a", "- a\n\n- b", "- a\n* b", "- a\nb", "- a *b*", "- a  "):
        assert not mdrender._PLAIN_LIST.fullmatch(text), text
