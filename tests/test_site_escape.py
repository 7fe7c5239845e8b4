"""The site's escaping: AI-written text reaches the page as literal text, nothing else.

Each case renders the escaped text with Python-Markdown configured exactly as the site's
mkdocs.yml configures it, and checks the HTML holds only a paragraph (and line breaks) whose
text is the input, character for character.
"""

from __future__ import annotations

from html.parser import HTMLParser

import markdown
import pytest

from toolkit.site import html_title, md_block, md_escape, relative_link, safe_url

NASTY = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    "[x](data:text/html,<script>alert(1)</script>)",
    "![img](http://evil.example/x.png)",
    "<http://evil.example>",
    "<me@example.com>",
    '{: onclick="alert(1)" }',
    "```",
    "~~~",
    '--8<-- "/etc/hostname"',
    "{{ 7*7 }}",
    "{% raw %}",
    "# heading",
    "## heading ##",
    "> quote",
    "- item",
    "+ item",
    "* item",
    "1. item",
    "2) item",
    "    indented code",
    "\tindented code",
    "---",
    "===",
    "***",
    "___",
    "!!! warning",
    "| a | b |",
    "[TOC]",
    "[ref]: http://evil.example",
    "[x][ref]",
    "*em* **strong** _em_ __strong__",
    "`code` ``code``",
    "a\\*b\\",
    "&amp; &lt; &#42; &copy;",
    "<!-- comment -->",
    "<div markdown=1>x</div>",
    "a  ",
    "tom's \"quote\"",
    ":emoji: :smile:",
    "term\n: definition",
    "\x02wzxhzdk:0\x03",
    "x\u202ey",
    "snake_case_name and __init__",
    "100% of $5 ^ 2 ~ 3 = 9",
]


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "br":
            self.text.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _render(md_text: str) -> _Collect:
    md = markdown.Markdown(extensions=["toc", "tables", "fenced_code", "admonition",
                                       "toolkit.mdsafe"])
    out = _Collect()
    out.feed(md.convert(md_text))
    out.close()
    return out


def _expected_inline(text: str) -> str:
    from toolkit.display import visible

    return visible(" ".join(text.replace("\r", "\n").split()))


@pytest.mark.parametrize("text", NASTY)
def test_md_escape_renders_literal_text_in_a_paragraph(text: str) -> None:
    for context in ("{}", "before {} after", "| h |\n|---|\n| {} |"):
        rendered = _render(context.format(md_escape(text)))
        allowed = {"p"} if not context.startswith("|") else {"table", "thead", "tbody", "tr",
                                                             "th", "td"}
        assert set(rendered.tags) <= allowed, (text, context, rendered.tags)
        expected = context.format(_expected_inline(text))
        if context.startswith("|"):
            expected = "h" + _expected_inline(text)
        assert "".join(rendered.text).replace("\n", "") == expected.replace("\n", ""), text


def test_md_block_renders_every_hostile_line_with_safe_markup_only() -> None:
    from tests.test_site_markdown import assert_safe_html

    text = "\n".join(NASTY) + "\n\nsecond paragraph\r\nwith CRLF\n\n\n    third"
    out = md_block(text)
    assert_safe_html(out)
    rendered = _Collect()
    rendered.feed(out)
    got = "".join(rendered.text)
    for literal in ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
                    "[x](javascript:alert(1))", "{{ 7*7 }}", "<!-- comment -->",
                    '--8<-- "/etc/hostname"', "second paragraph\nwith CRLF"):
        assert literal in got, literal
    assert {"script", "img", "h1", "h2", "iframe"}.isdisjoint(rendered.tags)


def test_code_fence_break_out_stays_inside_the_block() -> None:
    text = "```\n</p></div><script>alert(1)</script>\n```\nafter the fence"
    out = md_block(text)
    assert out.startswith('<div class="tk-md">') and out.endswith("</div>")
    assert out.count("<div") == out.count("</div>") == 1
    assert "<pre><code>&lt;/p&gt;&lt;/div&gt;&lt;script&gt;alert(1)&lt;/script&gt;\n" in out
    assert "<p>after the fence</p>" in out


def test_invisible_and_control_characters_are_shown_not_kept() -> None:
    assert md_escape("a\u202eb\u200bc") == "a&lt;U+202E&gt;b&lt;U+200B&gt;c"
    assert "\x1b" not in md_escape("\x1b[31mred")
    assert md_escape(None) == ""


def test_long_values_are_cut_with_a_note() -> None:
    out = md_block("x" * 50_000)
    assert len(out) < 21_000 and "30,000 more characters" in out


def test_html_title_is_escaped_once_for_the_theme() -> None:
    assert html_title('<img src=x onerror="a">\u202e') == \
        "&lt;img src=x onerror=&quot;a&quot;&gt;&lt;U+202E&gt;"
    assert html_title("a\n  b") == "a b"


@pytest.mark.parametrize("url,expected", [
    ("https://github.com/example/acme-api/issues/412",
     "https://github.com/example/acme-api/issues/412"),
    ("http://example.com/a b", None),
    ("https://example.com/x)y(z", "https://example.com/x%29y%28z"),
    ("https://example.com/<script>", "https://example.com/%3Cscript%3E"),
    ("javascript:alert(1)", None),
    ("JAVASCRIPT:alert(1)", None),
    (" javascript:alert(1)", None),
    ("java\tscript:alert(1)", None),
    ("data:text/html,<script>alert(1)</script>", None),
    ("file:///etc/passwd", None),
    ("//evil.example/x", None),
    ("https://", None),
    ("README.md:42", None),
])
def test_safe_url_allows_only_http_and_https(url: str, expected: str | None) -> None:
    assert safe_url(url) == expected


def test_a_safe_url_stays_one_link_in_markdown() -> None:
    url = safe_url("https://example.com/a_(b)*c*?q=1&r='2'")
    assert url is not None
    md = markdown.Markdown(extensions=["toolkit.mdsafe"])
    html = md.convert(f"[{md_escape('text')}]({url})")
    assert html.count("<a ") == 1 and "<em>" not in html


def test_relative_links_between_generated_pages() -> None:
    assert relative_link("index.md", "ledger/patterns/x.md") == "ledger/patterns/x.md"
    assert relative_link("ledger/patterns/x.md", "ledger/category/testing.md") == \
        "../category/testing.md"
    assert relative_link("ledger/patterns/x.md", "ledger/patterns/index.md") == "index.md"
    assert relative_link("audit/tasks/t.md", "audit/index.md#actions-per-day") == \
        "../index.md#actions-per-day"
    assert relative_link("slop/a.md", "charts/x.svg") == "../charts/x.svg"
    for bad in ("../etc/passwd", "javascript:alert(1)", "a b.md", "x.md#a b"):
        with pytest.raises(ValueError):
            relative_link("index.md", bad)


def test_relative_urls_in_pre_rendered_tables() -> None:
    from toolkit.site import relative_url

    assert relative_url("index.md", "ledger/patterns/index.md") == "ledger/patterns/"
    assert relative_url("index.md", "audit/index.md#actions-per-day") == "audit/#actions-per-day"
    assert relative_url("ledger/patterns/x.md", "ledger/category/testing.md") == \
        "../../category/testing/"
    assert relative_url("ledger/patterns/x.md", "ledger/patterns/index.md") == "../"
    assert relative_url("ledger/patterns/index.md", "ledger/patterns/x.md") == "x/"
    assert relative_url("ledger/patterns/x.md", "index.md") == "../../../"
    assert relative_url("ledger/patterns/x.md", "ledger/patterns/x.md") == "./"
    assert relative_url("data/index.md", "data/actions.csv") == "actions.csv"
    assert relative_url("slop/ab.md", "charts/x.svg") == "../../charts/x.svg"
    for bad in ("../etc/passwd", "javascript:alert(1)", "a b.md"):
        with pytest.raises(ValueError):
            relative_url("index.md", bad)


URLS = ["https://example.com/ok?a=1&b=<2>", "https://example.com/a_(b)*c*?q=1&r='2'",
        "https://example.com/x?a=1&amp;b=2&#35;c", "http://example.com/~u/%41 \"q\"",
        "https://example.com/[x]`y`\\z#frag!", "javascript:alert(1)", "https://", "ftp://x/y",
        "https://ex.com/\u202eevil\u200b"]


@pytest.mark.parametrize("value", NASTY + URLS)
def test_a_bullet_list_made_without_markdown_is_python_markdowns(value: str) -> None:
    """A slop entry's sources are listed as HTML the toolkit makes (its page then needs no
    Markdown pass): the same bytes as the site's Python-Markdown makes of the Markdown list,
    for any text and any URL, alone or beside others."""
    from toolkit.pages import Url
    from toolkit.site import _cell, bullets_html

    for values in ([value], [Url(value)], ["first", Url(value), value]):
        if not all(md_escape(v.url if isinstance(v, Url) else v) for v in values):
            continue  # nothing shown: the list is left to Markdown
        md = markdown.Markdown(extensions=["toc", "tables", "fenced_code", "admonition",
                                           "toolkit.mdsafe"])
        expected = md.convert("\n".join(f"- {_cell(v, 'slop/x.md')}" for v in values))
        assert bullets_html(values) == expected, values
