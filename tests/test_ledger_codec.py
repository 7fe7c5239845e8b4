"""toolkit.ledger.codec: one entry codec. Edit-then-parse returns the edit for random entries of
both forms (CRLF, BOM, repeated and missing fields), the editor and reconcile edit alike, and the
fast path of standard entries reads what the full parser reads."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest

from toolkit.errors import UsageError
from toolkit.ledger import codec
from toolkit.ledger.vault import EditorSession
from toolkit.reconcile import set_values, work_file
from toolkit.records import LEDGER_FILES
from toolkit.sources import smith
from toolkit.sources.history import entry_title_key
from toolkit.sources.smith import parse_ledger_bytes

SEEDS = range(400)
# field name as written -> how the parsed entry shows it
SHOWN = {"Date": lambda e: e.date, "Category": lambda e: e.category,
         "Confidence": lambda e: e.confidence, "Observations": lambda e: e.observations,
         "Source reflections": lambda e: e.source_reflections, "Title": lambda e: e.title}
NAMES = [n for n in SHOWN if n != "Title"]


def _value(rng: random.Random, name: str) -> str:
    if name == "Date":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if name == "Category":
        return rng.choice(["implementation", "testing", "Debugging", "AUDIT"])
    if name == "Confidence":
        return rng.choice(["low", "medium", "high", "High", "LOW"])
    if name == "Observations":
        return str(rng.randint(1, 40))
    if name == "Title":
        return rng.choice(["Pin the Redis client", "Café au lait naming", "x: y", "emoji 🚀"])
    return rng.choice(["3", "2026-04-22, 2026-04-30", "spec-12"])


def random_entry(rng: random.Random, form: str) -> tuple[str, dict[str, str]]:
    """One entry in ``form``: random field styles and order, some fields missing, some
    repeated (the last value is the one the reader shows). Returns (text, shown values)."""
    shown: dict[str, str] = {}
    lines: list[str] = []
    title = _value(rng, "Title")
    bullet = rng.choice(["- ", "* ", "+ ", "  - "]) if form == "A" else rng.choice(["", ""])
    closer = rng.choice([":**", "**:"])
    if form == "A":
        lines += [f"## {title}", ""]
    else:
        if rng.random() < 0.8:
            lines += [rng.choice(["---", "-----"]), ""]
        lines.append(f"**Title{closer} {title}")
    for name in rng.sample(NAMES, k=rng.randint(0, len(NAMES))):
        for _ in range(rng.choice([1, 1, 1, 2, 3])):  # repeated fields
            value = _value(rng, name)
            lines.append(f"{bullet}**{name}{closer} {value}")
            shown[name] = value
    if form == "A":
        lines += ["", "### Context", "", "When it applies.", "", "### Pattern", "",
                  "- **Confidence:** not a field (below the first ### heading)", "",
                  "### Evidence", "", "- 2026-04-25 -- session s1: outcome", "", "---"]
    else:
        lines += ["", "**Context:** When it applies.", "", "**Pattern:** Do it.", "",
                  "**Evidence:**", "- 2026-04-25 -- session s1: outcome", "",
                  "**Related:** None"]
    return "\n".join(lines) + "\n", shown


def random_file(rng: random.Random) -> tuple[bytes, list[dict[str, str]]]:
    head = rng.choice(["# Ledger: Patterns\n\nDescription.\n\n", "# Patterns\n\n", ""])
    parts, values = [head], []
    for _ in range(rng.randint(1, 4)):
        text, shown = random_entry(rng, rng.choice("AB"))
        parts.append(text + "\n" * rng.randint(0, 2))
        values.append(shown)
    data = "".join(parts).encode("utf-8")
    if rng.random() < 0.4:
        data = data.replace(b"\n", b"\r\n")
    if rng.random() < 0.3:
        data = codec.BOM + data
    return data, values


def _shown(entry: object, name: str) -> str | None:
    value = SHOWN[name](entry)
    return None if value is None else str(value)


def _expected(name: str, value: str) -> str:
    return value.lower() if name in ("Category", "Confidence") else value


@pytest.mark.parametrize("seed", SEEDS)
def test_edit_then_parse_returns_the_edit(seed: int) -> None:
    rng = random.Random(seed)
    data, _ = random_file(rng)
    before = parse_ledger_bytes(data, "p.md", "patterns")
    i = rng.randrange(len(before.entries))
    entry = before.entries[i]
    name = rng.choice(list(SHOWN))
    value = _value(rng, name)
    edit = codec.field_edit(data, entry.start, entry.end, entry.form, name, value,
                            before.newline)
    if edit is None:  # the entry already shows the value
        assert _shown(entry, name) == _expected(name, value)
        return
    s, e, new = edit
    assert entry.start <= s <= e <= entry.end  # only this entry's bytes change
    out = data[:s] + new + data[e:]
    after = parse_ledger_bytes(out, "p.md", "patterns")
    assert len(after.entries) == len(before.entries)
    assert after.bom == before.bom and after.newline == before.newline
    got = after.entries[i]
    assert _shown(got, name) == _expected(name, value)
    for other in SHOWN:  # every other field of the entry reads as before
        if other != name:
            assert _shown(got, other) == _shown(entry, other)
    for k, (a, b) in enumerate(zip(before.entries, after.entries, strict=True)):
        if k != i:
            assert out[b.start:b.end] == data[a.start:a.end]


@pytest.mark.parametrize("seed", range(60))
def test_the_editor_and_reconcile_write_the_same_bytes(seed: int, tmp_path: Path) -> None:
    """One rule: EditorSession.set_field and reconcile's set_values give the same entry."""
    rng = random.Random(seed)
    data, _ = random_file(rng)
    ledger = tmp_path / "vault" / "ledger"
    ledger.mkdir(parents=True)
    for kind in LEDGER_FILES:
        (ledger / f"{kind}.md").write_bytes(data if kind == "patterns" else b"# X\n")
    lf = parse_ledger_bytes(data, ledger / "patterns.md", "patterns")
    i = rng.randrange(len(lf.entries))
    name = rng.choice(["Date", "Confidence"])
    value = _value(rng, name).lower()
    item = work_file(lf).items[i]
    set_values(item, lf.newline, **{name.lower(): value})
    with EditorSession(tmp_path / "vault", today=dt.date(2026, 5, 10), dry_run=True) as s:
        entry = s.entries("patterns")[i]
        s.set_field(entry, name, value)
        [change] = [c for c in s.plan() if c.name == "patterns.md"] or [None]
    new = change.new if change is not None else data
    block = parse_ledger_bytes(new, "p.md", "patterns").entries[i]
    assert new[block.start:block.end] == item.block


def test_a_repeated_field_edit_changes_the_last_occurrence() -> None:
    data = (b"**Title:** T\n**Confidence:** low\n**Date:** 2026-01-01\n**Confidence:** medium\n"
            b"\n**Context:** c\n")
    entry = parse_ledger_bytes(data, "p.md", "patterns").entries[0]
    assert entry.confidence == "medium"  # the reader shows the last one
    out = codec.set_field(data, "B", "Confidence", "high")
    assert out == data.replace(b"medium", b"high")


@pytest.mark.parametrize("data, expected", [
    # Form A: after the last field line above the first ### heading, in its style
    (b"## T\n\n* **Date**: 2026-01-01\n\n### Context\n\n- **Date:** x\n",
     b"## T\n\n* **Date**: 2026-01-01\n* **Observations**: 3\n\n### Context\n\n- **Date:** x\n"),
    # Form A without fields: right after the title, the form's own style
    (b"## T\r\n\r\n### Context\r\n", b"## T\r\n- **Observations:** 3\r\n\r\n### Context\r\n"),
    # Form B: after the field lines below the title (a section label ends them)
    (b"---\n\n**Title:** T\n**Date:** 2026-01-01\n**Context:** c\n**Confidence:** low\n",
     b"---\n\n**Title:** T\n**Date:** 2026-01-01\n**Observations:** 3\n**Context:** c\n"
     b"**Confidence:** low\n"),
])
def test_a_missing_field_goes_after_the_last_head_field(data: bytes, expected: bytes) -> None:
    form = "A" if data.startswith(b"##") else "B"
    assert codec.set_field(data, form, "Observations", "3", b"\n") == expected
    assert parse_ledger_bytes(expected, "p.md", "patterns").entries[0].observations == 3


def test_confidence_and_category_keep_their_case_other_values_do_not() -> None:
    data = b"## Old title\n\n- **Confidence:** High\n- **Category:** TESTING\n"
    out = codec.set_field(data, "A", "Confidence", "low")
    out = codec.set_field(out, "A", "Category", "audit")
    out = codec.set_field(out, "A", "Title", "new title")
    assert out == b"## new title\n\n- **Confidence:** Low\n- **Category:** AUDIT\n"


def test_a_value_must_be_one_line_and_a_section_is_not_a_field() -> None:
    data = b"**Title:** T\n**Context:** c\n"
    with pytest.raises(UsageError, match="one non-empty line"):
        codec.set_field(data, "B", "Date", "2026-01-01\n**Confidence:** high")
    with pytest.raises(UsageError, match="is a section"):
        codec.set_field(data, "B", "Context", "other")


@pytest.mark.parametrize("form", ["A", "B"])
@pytest.mark.parametrize("separator", [True, False])
def test_render_entry_parses_back_to_what_was_written(form: str, separator: bool) -> None:
    fields = [("Date", "2026-05-01"), ("Category", "testing"), ("Confidence", "medium"),
              ("Source reflections", "2")]
    sections = [("Context", "When."), ("Pattern", "Do."),
                ("Evidence", "- 2026-05-01 -- session s: ok"), ("Related", "None")]
    text = codec.render_entry(form, "Café", fields, sections, newline="\r\n",
                              separator=separator)
    assert ("---" in text) == separator
    [e] = parse_ledger_bytes(text.encode(), "p.md", "patterns").entries
    assert (e.form, e.title, e.date, e.category, e.confidence, e.source_reflections) == \
        (form, "Café", "2026-05-01", "testing", "medium", "2")
    assert (e.context, e.pattern, e.evidence, e.related, e.problems) == \
        ("When.", "Do.", "- 2026-05-01 -- session s: ok", "None", ())


def test_title_key_is_one_definition() -> None:
    assert codec.title_key(" Cafe\u0301 STRASSE ") == codec.title_key("Café straße")
    assert codec.title_key(None) == ""
    assert entry_title_key(None) == "[untitled]"  # the history's key for an untitled entry
    assert entry_title_key(" Café ") == "café"


def test_sort_key_is_smiths_order() -> None:
    data = b"".join(codec.render_entry("B", t, [("Date", d), ("Confidence", c)]).encode()
                    for t, d, c in [("a", "2026-01-01", "low"), ("b", "2026-02-01", "bogus"),
                                    ("c", "2026-01-01", "high"), ("d", "2026-03-01", "high")])
    entries = parse_ledger_bytes(data, "p.md", "patterns").entries
    assert [e.title for e in sorted(entries, key=codec.sort_key)] == ["d", "c", "a", "b"]


def test_a_count_in_digits_int_cannot_read_is_a_note_not_a_crash() -> None:
    # "²" and "①" are digits to str.isdigit() but not numbers int() reads; "٣" is (3).
    data = ("## Superscript\n\n- **Date:** 2026-04-01\n- **Category:** testing\n"
            "- **Confidence:** low\n- **Observations:** ²\n\n---\n\n"
            "**Title:** Circled\n**Date:** 2026-04-01\n**Category:** testing\n"
            "**Confidence:** low\n**Source reflections:** ①\n\n---\n\n"
            "**Title:** Arabic-Indic\n**Date:** 2026-04-01\n**Category:** testing\n"
            "**Confidence:** low\n**Source reflections:** ٣\n").encode()
    sup, circled, arabic = parse_ledger_bytes(data, "p.md", "patterns").entries
    assert sup.observations is None and sup.reflections == 1
    assert sup.problems == ("Observations is not a number: '²'",)
    assert circled.source_reflections == "①" and circled.reflections == 1
    assert arabic.reflections == 3


@pytest.mark.parametrize("seed", range(100))
def test_a_compact_parse_is_the_same_parse(seed: int) -> None:
    """The loader's parse keeps each entry as a record until it is built: the same entries,
    notes and header, one at a time or all at once."""
    data, _ = random_file(random.Random(seed))
    full = parse_ledger_bytes(data, "/v/patterns.md", "patterns")
    compact = parse_ledger_bytes(data, "/v/patterns.md", "patterns", compact=True)
    assert [compact.entry(i) for i in range(compact.entry_count())] == full.entries
    assert compact.column("title") == [e.title for e in full.entries]
    assert (compact.entries, compact.problems, compact.header_end, compact.newline,
            compact.bom) == (full.entries, full.problems, full.header_end, full.newline,
                             full.bom)


@pytest.mark.parametrize(("data", "expected", "stray"), [
    # a title on the first line, after a BOM
    (b"\xef\xbb\xbf**Title:** A\n**Date:** 2026-01-02\n", [("A", "2026-01-02", None, 3, 37, 1)],
     None),
    # no final newline; the separators and blank line after the last entry are its own
    (b"# H\n\n---\n\n**Title:** A\n**Related:** x\n\n---\n  \n---",
     [("A", None, "x", 5, 49, 5)], None),
    # a line of spaces and tabs between the separator and the title is blank
    (b"# H\n\n---\n  \n\t\n**Title:** A\n**Date:** 2026-01-03\n",
     [("A", "2026-01-03", None, 5, 48, 6)], None),
    # Form A closed by its separator: the text after it belongs to no entry
    (b"## A\n\n- **Date:** 2026-01-02\n\n---\n\n\nstray text\n## B\n",
     [("A", "2026-01-02", None, 0, 36, 1), ("B", None, None, 47, 52, 9)],
     "not part of any entry: line 8"),
    # CRLF, trailing spaces on a value
    (b"---\r\n\r\n**Title:** A\r\n**Date:** 2026-01-02  \r\n\r\n---\r\n\r\n**Title:** B\r\n",
     [("A", "2026-01-02", None, 0, 47, 3), ("B", None, None, 47, 68, 8)], None),
])
def test_entry_boundaries_at_the_edges_of_a_file(data: bytes, expected: list[tuple[object, ...]],
                                                 stray: str | None) -> None:
    """Where each entry starts and ends (its byte range, its title's line), by the rules of
    FORMATS.md 1.2, at a BOM, a missing final newline, blank lines of spaces, CRLF."""
    lf = parse_ledger_bytes(data, "p.md", "patterns")
    assert [(e.title, e.date, e.related, e.start, e.end, e.line) for e in lf.entries] == expected
    assert [p.message for p in lf.problems if p.message.startswith("not part")] == \
        ([stray] if stray else [])


# --------------------------------------------------------------------------- the fast path

def test_a_date_that_is_no_calendar_day_is_a_problem_so_check_names_it() -> None:
    """2026-02-29 has Smith's shape but no age: never pruned (nor aged on the site). A
    problem says so (the malformed-entries check lists it) instead of a silent skip; 2028's
    leap day is a day."""
    from toolkit.ledger_ops import prune_candidates

    data = b"".join(
        f"**Title:** On {day}\n**Date:** {day}\n**Category:** testing\n"
        f"**Confidence:** low\n**Source reflections:** 1\n\n---\n\n".encode()
        for day in ("2026-02-29", "2028-02-29", "2026-04-31"))
    no_day, leap, april = parse_ledger_bytes(data, "p.md", "patterns").entries
    assert no_day.problems == ("Date is not a day of the calendar: '2026-02-29'",)
    assert april.problems == ("Date is not a day of the calendar: '2026-04-31'",)
    assert leap.problems == ()
    plan = prune_candidates([no_day, leap, april], dt.date(2028, 11, 28),
                            {"low": 30, "medium": 90})
    assert [c.entry.title for c in plan.removals] == ["On 2028-02-29"]


# Values of a standard entry's fields: plain, empty, padded with Unicode blanks, malformed,
# non-ASCII, a broken UTF-8 sequence (parse_ledger_bytes reads bytes as they are).
ODD_VALUES = ["", "   ", "\xa0x\u2003", "\x0c3", "²", "2026-13-45", "Debugging", "HIGH",
              "café **bold** `code`", "a\u2028b", "\udcff"]
# Lines of a section: those the fast path takes, then those that send the file to the full
# parser (or that only one form takes: a bullet field line in a Form A section).
SAFE_LINES = ["Plain text.", "- 2026-04-01 -- session s1: ok", "1. first", "", "<!-- c -->",
              "| a | b |", "-- two dashes", "x **Date:** 2026-01-01"]
ODD_LINES = ["- **Confidence:** high", "**Pattern:** again", "**bold** start", "---", "-----",
             "## Heading", "### Sub", "# One", "```", "~~~", "  indented", "\tTab",
             "**Title:** inside", "  ---", "* **Date:** 2026-01-01"]


def _odd_value(rng: random.Random, name: str) -> str:
    return rng.choice(ODD_VALUES) if rng.random() < 0.15 else _value(rng, name)


def _section(rng: random.Random, odd: bool) -> str:
    if rng.random() < 0.1:
        return rng.choice(["", " "] if odd else [""])  # an empty section (a blank line: odd)
    lines = [rng.choice(SAFE_LINES[:3])]
    for _ in range(rng.randint(0, 3)):
        lines.append(rng.choice(ODD_LINES if odd and rng.random() < 0.5 else SAFE_LINES))
    return "\n".join(lines)


def standard_file(rng: random.Random, *, odd: bool) -> bytes:
    """A file of entries in Smith's writers' layout (codec.render_entry, both forms; field
    values that may be odd). ``odd``: section lines and changes to the bytes (CRLF, a BOM,
    no final newline, a field repeated, missing or moved, lines of blanks, stray text) that
    the fast path leaves to the full parser."""
    head = rng.choice(["# Ledger: Patterns\n\nDescription.\n\n<!-- sorted -->\n\n",
                       "# Patterns\n\n", "", "\n"])
    if odd and rng.random() < 0.2:
        head += rng.choice(["- a list item\n\n", "```\ncode\n```\n\n", "**Date:** x\n\n"])
    parts = [head]
    for _ in range(rng.randint(0, 5)):
        form = rng.choice("AB")
        names = ["Date", "Category", "Confidence", *(["Observations"] if form == "A" else []),
                 "Source reflections"]
        fields = [(n, _odd_value(rng, n)) for n in names]
        if odd and rng.random() < 0.3:
            i = rng.randrange(len(fields))
            change = rng.choice(["repeat", "drop", "move"])
            if change == "repeat":
                fields.insert(i, (fields[i][0], _value(rng, fields[i][0])))
            elif change == "drop":
                del fields[i]
            else:
                fields.append(fields.pop(i))
        sections = [(n, _section(rng, odd)) for n in codec.SECTIONS]
        text = codec.render_entry(form, _odd_value(rng, "Title"), fields, sections,
                                  separator=not odd or rng.random() < 0.8)
        if form == "A" and rng.random() < 0.2:
            text = "---\n\n" + text  # a separator above a Form A entry too
        parts.append(text + "\n" * rng.randint(0, 2))
        if odd and rng.random() < 0.1:
            parts.append(rng.choice(["stray text\n", "  \n", "\t\n\n"]))
    data = "".join(parts).encode("utf-8", "surrogateescape")
    if odd:
        if rng.random() < 0.15:
            data = data.replace(b"\n", b"\r\n")
        if rng.random() < 0.1:
            data = codec.BOM + data
        if rng.random() < 0.1:
            data = data.rstrip(b"\n")
        if rng.random() < 0.05:
            data = data.replace(b"None", b"No\0ne")
    return data


def _parse_state(lf: object) -> tuple[object, ...]:
    return (lf.entries, lf.problems, lf.header_end, lf.newline, lf.bom)  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(300))
def test_the_fast_path_and_the_full_parser_agree(seed: int) -> None:
    """A file of standard entries is read by one regex match per entry; any other by the full
    parser. Both give the same entries, byte ranges, lines, notes and header, compact or
    not, on random files of both forms: standard ones (which the fast path must take), ones
    with odd values and lines, CRLF, a BOM, repeated, missing and moved fields."""
    rng = random.Random(seed)
    files = [(standard_file(rng, odd=False), True), (standard_file(rng, odd=True), False),
             (random_file(rng)[0], False)]
    for data, standard in files:
        path = Path("/v/patterns.md")
        for compact in (False, True):
            full = smith._full_parse(data, path, "patterns", compact)
            fast = smith._fast_parse(data, path, "patterns", compact)
            if standard:
                assert fast is not None, data
            if fast is not None:
                assert _parse_state(fast) == _parse_state(full), data
                assert fast.column("title") == full.column("title")
                assert fast.column("line") == full.column("line")
            assert _parse_state(parse_ledger_bytes(data, path, "patterns", compact=compact)) \
                == _parse_state(full)
