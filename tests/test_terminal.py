"""AI-written text printed to a terminal: escape codes and bidi controls are shown, not obeyed.

Machine formats (CSV, JSON, a Markdown export) stay byte-faithful when piped; on a terminal
they go through toolkit.display.visible like every table does. Each case runs the real
`toolkit` in a subprocess whose standard output is a pseudo-terminal.
"""

from __future__ import annotations

import json

import pytest

from tests._terminal_helpers import run_on_a_terminal

HOSTILE = "Legacy \x1b[31mred\x1b]0;pwned\x07 \u202eRTL"


@pytest.fixture
def hostile_slop(project):  # type: ignore[no-untyped-def]
    doc = json.loads(project.slop.read_text(encoding="utf-8"))
    doc["entries"][0]["title"] = HOSTILE
    project.slop.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return project


@pytest.mark.parametrize("args", [
    ["slop", "export", "--search", "Legacy"],
    ["slop", "query", "--search", "Legacy", "--format", "csv"],
    ["query", "SELECT title FROM slop_entries WHERE title LIKE 'Legacy%'", "--format", "csv"],
    ["query", "SELECT title FROM slop_entries WHERE title LIKE 'Legacy%'", "--format", "json"],
])
def test_machine_formats_on_a_terminal_show_escape_codes(hostile_slop, args):
    out = run_on_a_terminal(args, hostile_slop.root)
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    if "json" in args:  # JSON escapes control characters itself
        assert "Legacy \\u001b[31mred\\u001b]0;pwned\\u0007 <U+202E>RTL" in out
    else:
        assert "Legacy <U+001B>[31mred<U+001B>]0;pwned<U+0007> <U+202E>RTL" in out


def test_piped_csv_keeps_the_text_as_stored(hostile_slop, cli_run):
    result = cli_run("slop", "query", "--search", "Legacy", "--format", "csv")
    assert result.exit_code == 0
    assert "\u202eRTL" in result.output  # not rewritten when it is data for another program


def test_error_lines_show_escape_codes_of_ai_written_titles(hostile_slop, cli_run):
    # an ambiguous id prefix lists the matching entries' titles in the Error: line
    doc = json.loads(hostile_slop.slop.read_text(encoding="utf-8"))
    doc["entries"][1]["id"] = doc["entries"][0]["id"][:8] + "-0000-4000-8000-000000000000"
    hostile_slop.slop.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    result = cli_run("slop", "update", doc["entries"][0]["id"][:8], "--status", "resolved")
    assert result.exit_code == 1
    [line] = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert "\x1b" not in line and "\u202e" not in line
    assert "Legacy <U+001B>[31mred<U+001B>]0;pwned<U+0007> <U+202E>RTL" in line


def test_tables_align_wide_characters_and_show_controls_in_plain_text(hostile_slop, cli_run):
    """The table printer (rich.table): CJK takes two columns, so the next column lines up;
    control and bidi characters are shown as <U+XXXX>; on a pipe the table is plain text (no
    colour, no box drawing), one line per row, never wrapped."""
    from rich.cells import cell_len

    out = cli_run("query", "SELECT * FROM (VALUES ('東京タワー', 'x'), ('ab', 'y'), "
                           "((SELECT title FROM slop_entries WHERE title LIKE 'Legacy%'), 'z'), "
                           f"('{'w' * 70}', 'v')) t(name, next)").stdout
    lines = out.splitlines()
    assert lines[0].split() == ["name", "next"] and set(lines[1]) == {"-", " "}
    assert len(lines) == 6
    starts = {cell_len(line[:line.rindex(" ") + 1]) for line in lines[2:]}
    assert len(starts) == 1  # every row's last column starts at the same terminal column
    assert "<U+001B>[31mred<U+001B>]0;pwned<U+0007> <U+202E>RTL" in out
    assert all(ch.isprintable() or ch == "\n" for ch in out)


def test_json_longer_than_one_printed_piece_is_exactly_what_json_dumps_gives():
    """--json output is printed while it is encoded, a piece at a time (a big listing is never
    held as one string): piped, it is byte for byte the JSON of the whole, whatever falls on
    a piece's edge (non-ASCII, a bidi control, a date)."""
    import datetime as dt

    import click
    from click.testing import CliRunner

    from toolkit.cli._common import JSON_PIECE, echo_json

    data = {"entries": [{"title": f"Eintrag {i} — übernommen \u202e{'x' * (i % 7)}", "n": i,
                         "when": dt.date(2026, 1, 1 + i % 28)} for i in range(3000)]}

    @click.command()
    def listing() -> None:
        echo_json(data)

    out = CliRunner().invoke(listing).stdout
    expected = json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
    assert len(expected) > 3 * JSON_PIECE
    assert out == expected


def test_lines_of_ascii_keep_newlines_and_tabs_and_show_every_other_control():
    """Multi-line ASCII text (descriptions, reports) keeps its newlines and tabs (spaces on
    one line) and shows every other control character, whichever it is."""
    from toolkit.display import visible

    for code in range(128):
        ch = chr(code)
        text = f"line one{ch}\nline\ttwo"
        shown = ch if ch in "\n\t" or 32 <= code < 127 else f"<U+{code:04X}>"
        one_line = " " if ch in "\n\t" else shown
        assert visible(text) == f"line one{shown}\nline\ttwo", code
        assert visible(text, single_line=True) == f"line one{one_line} line two", code
