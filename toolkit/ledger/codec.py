"""One Smith Ledger entry: how it is read, how one field is edited, how one is written.

The two entry forms are in FORMATS.md 1.2: Form A (``## Title`` + ``- **Field:** value``
bullets + ``### Section`` headings) and Form B (``**Title:**`` + ``**Field:** value`` lines +
``**Section:**`` paragraphs). The reader of whole files (:mod:`toolkit.sources.smith`) finds
where each entry starts and ends and hands its bytes to :func:`parse_entry`; the vault's edit
session, reconcile, the demo writer and the tests edit and write entries with the functions
here, so what is written is what the reader shows.

The one rule for a field (the reader decides what a user sees):

* **Which line.** Form A: the field lines between the title and the first ``### `` heading;
  Form B: every ``**Name:**`` line of the entry below its title except the four sections
  (Context, Pattern, Evidence, Related). When a field is repeated, the reader shows the
  **last** one, so an edit changes the last one. The title is the ``## `` line (Form A) or
  the ``**Title:**`` line (Form B).
* **Where a missing field goes.** Right after the last field line of the entry's head -- Form
  A: the last field line above the first ``###`` heading; Form B: the last of the field lines
  directly below the title (a section label or a blank line ends them) -- or right after the
  title line when there is none. The new line copies that field line's style (bullet,
  ``:**`` or ``**:``, line ending), else the form's own (``- **Name:** v`` / ``**Name:** v``).
* **Case.** Confidence and Category values (the reader lower-cases them) keep the old value's
  capitalisation (``High`` -> ``Low``); other values are written as given.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from toolkit.errors import UsageError
from toolkit.records import CATEGORIES, CONFIDENCES, LedgerEntry, fits, ledger_entry

BOM = b"\xef\xbb\xbf"
# A field line: optional indent and bullet, **Name:** (or **Name**:), the value.
FIELD = re.compile(rb"^[ \t]*(?:[-*+][ \t]+)?\*\*([A-Za-z][A-Za-z _-]{0,40}?)(?::\*\*|\*\*:)"
                   rb"[ \t]*(.*?)[ \t]*\r?$")
_FIELD_HEAD = re.compile(rb"^([ \t]*(?:[-*+][ \t]+)?)\*\*[A-Za-z][A-Za-z _-]{0,40}?(:\*\*|\*\*:)")
# A field line and a ``### `` heading in an entry's decoded text, found by the newline before
# the line (parse_entry starts the text with one): the regex engine searches for that literal
# fast, where a "^" pattern is tried at every position.
# (The name is matched greedily: its characters cannot be ":" or "*", so the longest run is the
# only one a closer can follow -- the same match as a lazy name, found with less backtracking.)
# (The first branch is the common line with no indent or bullet, a fast path of the second; the
# blanks after the closer stay in the value, which is always stripped.)
_FIELD_NL = re.compile(r"\n(?:\*\*|[ \t]*(?:[-*+][ \t]+)?\*\*)([A-Za-z][A-Za-z _-]{0,40})"
                       r"(?::\*\*|\*\*:)")
_SECTION_NL = re.compile(r"\n### ([^\n]*)")
SECTION_NAMES = frozenset({"context", "pattern", "evidence", "related"})
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# Smith's confidence order (a file is sorted high, medium, low): the one definition.
CONF_RANK: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
KEEP_CASE_FIELDS = frozenset({"confidence", "category"})


def dominant_newline(data: bytes) -> bytes:
    """A file's line ending: ``\\r\\n`` when at least half its line breaks are CRLF, else
    ``\\n`` (a file without a carriage return answers after one fast byte search)."""
    if b"\r" not in data:
        return b"\n"
    crlf = data.count(b"\r\n")
    return b"\r\n" if crlf and crlf * 2 >= data.count(b"\n") else b"\n"


def entry_form(line: bytes) -> str | None:
    """"A" or "B" when ``line`` starts an entry (``## `` / ``**Title:**``), else None."""
    if line.startswith(b"## "):
        return "A"
    if line.startswith(b"**Title:**") or line.startswith(b"**Title**:"):
        return "B"
    return None


def title_key(text: str | None) -> str:
    """How titles compare: NFC-normalised, case-folded, without surrounding spaces ("" for
    no title)."""
    return unicodedata.normalize("NFC", text or "").casefold().strip()


def confidence_rank(value: str | None) -> int:
    """High 0, medium 1, low 2, anything else (unknown, missing) 3."""
    return CONF_RANK.get(value or "", len(CONF_RANK))


def _date_problem(date: str) -> str | None:
    """What is wrong with a Date's text, or None; remembered per text (a ledger repeats the
    same few dates: the parser asks once per entry)."""
    if date in _DATE_PROBLEMS:
        return _DATE_PROBLEMS[date]
    problem: str | None = None
    if not DATE.match(date):
        problem = f"Date is not YYYY-MM-DD: {date!r}"
    else:
        try:
            dt.date.fromisoformat(date)
        except ValueError:  # 2026-02-29: no age, so never pruned; say why
            problem = f"Date is not a day of the calendar: {date!r}"
    if len(_DATE_PROBLEMS) < 4096:
        _DATE_PROBLEMS[date] = problem
    return problem


_DATE_PROBLEMS: dict[str, str | None] = {}


def sort_key(entry: LedgerEntry) -> tuple[int, int]:
    """Smith's file order: high, medium, low (unknown last); newest Date first."""
    try:
        ordinal = dt.date.fromisoformat(entry.date or "").toordinal()
    except ValueError:
        ordinal = 0
    return confidence_rank(entry.confidence), -ordinal


# --------------------------------------------------------------------------- reading


def _name_key(raw: str) -> str:
    """A field or section name as the reader compares it (stripped, lower-case), remembered:
    a ledger repeats the same few names on every entry."""
    key = _NAME_KEYS.get(raw)
    if key is None:
        key = raw.strip().lower()
        if len(_NAME_KEYS) < 4096:
            _NAME_KEYS[raw] = key
    return key


_NAME_KEYS: dict[str, str] = {}


def parse_entry(block: bytes, ti: int, form: str, path: str, kind: str, start_off: int,
                end_off: int) -> LedgerEntry:
    """The entry whose text is ``block``: from its title line (line ``ti`` of the file, from
    0) to the end of its last content line; ``start_off``/``end_off`` are its byte range in
    the file. Never raises for content problems: they become the entry's ``problems``."""
    fields: dict[str, str] = {}
    texts: dict[str, str | None] = {}
    # One decode and one regex split per entry (fast on big ledgers): the split gives every
    # field's name and the text up to the next field in one call. The text starts with a
    # newline so that every line start is a "\n": the scans look for that literal, which the
    # regex engine finds far faster than it tries "^" at every position.
    text = block.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "")
    text = "\n" + text
    title = ""
    if form == "A":
        nl = text.find("\n", 1)
        title = (text[4:] if nl < 0 else text[4:nl]).strip()
        parts = _SECTION_NL.split(text)
        meta = _FIELD_NL.split(parts[0])
        for k in range(1, len(meta), 2):
            fields[_name_key(meta[k])] = meta[k + 1].partition("\n")[0].strip()
        for k in range(1, len(parts), 2):
            texts[_name_key(parts[k]).rstrip(":")] = parts[k + 1].strip() or None
    else:
        parts = _FIELD_NL.split(text)
        k = 1
        if len(parts) > 1 and not parts[0]:  # a field at the very start: the title line
            title = parts[2].strip().partition("\n")[0].strip()
            k = 3
        keys = _NAME_KEYS
        for raw, value in zip(parts[k::2], parts[k + 1::2], strict=True):
            name = keys.get(raw) or _name_key(raw)
            value = value.strip()
            if name in SECTION_NAMES:
                texts[name] = value or None
            elif "\n" in value:
                fields[name] = value.partition("\n")[0].strip()
            else:
                fields[name] = value
    get, tget = fields.get, texts.get
    return ledger_entry(entry_row(path, kind, title, get("date"), get("category"),
                                  get("confidence"), get("observations"),
                                  get("source reflections"), tget("context"), tget("pattern"),
                                  tget("evidence"), tget("related"), form, ti + 1, start_off,
                                  end_off))


def entry_row(path: str, kind: str, title: str, date: str | None, category: str | None,
              confidence: str | None, obs_raw: str | None, source: str | None,
              context: str | None, pattern: str | None, evidence: str | None,
              related: str | None, form: str, line: int, start: int, end: int
              ) -> tuple[Any, ...]:
    """The row :func:`~toolkit.records.ledger_entry` takes for an entry read as these
    stripped values (None or "" for a field the entry lacks, None for an empty section), with
    the notes on what is missing or malformed: the one rule both readers of a ledger file
    (the full one and its fast path for standard entries) apply."""
    date = date or None
    category = category.lower() if category else None
    confidence = confidence.lower() if confidence else None
    observations: int | None = None
    problems: list[str] = []
    if obs_raw:
        if not obs_raw.strip().isdecimal():  # what int() reads ("²" is a digit, no number)
            problems.append(f"Observations is not a number: {obs_raw!r}")
        elif fits(n := int(obs_raw)):
            observations = n
        else:
            problems.append(f"Observations is too large a number: {obs_raw.strip()[:40]}")
    if source and source.strip().isdecimal() and not fits(int(source)):
        problems.append(f"Source reflections is too large a number: {source.strip()[:40]}")
    if not title:
        problems.append("missing title")
    if date is None:
        problems.append("missing Date")
    elif (wrong := _date_problem(date)) is not None:
        problems.append(wrong)
    if category is None:
        problems.append("missing Category")
    elif category not in CATEGORIES:
        problems.append(f"unknown Category {category!r}")
    if confidence is None:
        problems.append("missing Confidence")
    elif confidence not in CONFIDENCES:
        problems.append(f"unknown Confidence {confidence!r}")
    return (path, kind, title or None, date, category, confidence, observations,
            source or None, context, pattern, evidence, related, form, line, start, end,
            tuple(problems))


# --------------------------------------------------------------------------- editing


def _lines(data: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    out = []
    pos = start
    while pos < end:
        nl = data.find(b"\n", pos, end)
        stop = end if nl < 0 else nl + 1
        out.append((pos, data[pos:stop]))
        pos = stop
    return out


def _title_index(lines: list[tuple[int, bytes]], form: str) -> int:
    for i, (_, line) in enumerate(lines):
        if entry_form(line) == form:
            return i
    raise UsageError("entry has no title line where the parser found one")


def _name_of(m: re.Match[bytes]) -> str:
    return m.group(1).decode("utf-8", "replace").strip().lower()


def field_span(data: bytes, start: int, end: int, form: str, name: str) -> tuple[int, int] | None:
    """Byte range of the value the reader shows for field ``name`` of the entry in
    ``data[start:end]`` (the last occurrence; see the module docstring), or None."""
    lines = _lines(data, start, end)
    ti = _title_index(lines, form)
    want = name.strip().lower()
    off, line = lines[ti]
    if want == "title":
        if form == "A":
            text = line.rstrip(b"\r\n")
            lead = len(text[3:]) - len(text[3:].lstrip(b" \t"))
            return off + 3 + lead, off + len(text.rstrip(b" \t"))
        m = FIELD.match(line)
        assert m is not None
        return off + m.start(2), off + m.end(2)
    if want in SECTION_NAMES and form == "B":
        raise UsageError(f"{name} is a section, not a one-line field")
    found: tuple[int, int] | None = None
    for off, line in lines[ti + 1:]:
        if form == "A" and line.startswith(b"### "):
            break
        m = FIELD.match(line)
        if m and _name_of(m) == want:
            found = (off + m.start(2), off + m.end(2))
    return found


def field_insert(data: bytes, start: int, end: int, form: str, name: str, value: str,
                 newline: bytes = b"\n") -> tuple[int, bytes]:
    """Where and what to insert for a field the entry lacks (see the module docstring)."""
    lines = _lines(data, start, end)
    ti = _title_index(lines, form)
    anchor = lines[ti]
    for off, line in lines[ti + 1:]:
        if form == "A":
            if line.startswith(b"### "):
                break
            if FIELD.match(line):
                anchor = (off, line)
        else:
            m = FIELD.match(line)
            if not line.strip() or not m or _name_of(m) in SECTION_NAMES:
                break
            anchor = (off, line)
    off, line = anchor
    head = _FIELD_HEAD.match(line) if entry_form(line) is None or form == "B" else None
    if head is not None:
        lead, closer = head.group(1), head.group(2)
    else:
        lead, closer = (b"- " if form == "A" else b""), b":**"
    ending = newline if not line.endswith(b"\n") else line[-2:] if line.endswith(b"\r\n") \
        else b"\n"
    pos = off + len(line)
    text = lead + b"**" + name.encode("utf-8") + closer + b" " + value.encode("utf-8")
    return pos, (b"" if line.endswith(b"\n") else ending) + text + ending


def same_case(old: str, new: str) -> str:
    """``new`` written the way ``old`` was: ``High``, ``HIGH`` or ``high``."""
    old = old.strip()
    if old.isupper() and len(old) > 1:
        return new.upper()
    if old[:1].isupper():
        return new[:1].upper() + new[1:]
    return new


def field_edit(data: bytes, start: int, end: int, form: str, name: str, value: str,
               newline: bytes = b"\n") -> tuple[int, int, bytes] | None:
    """The byte edit ``(start, end, new bytes)`` of ``data`` that sets field ``name`` of the
    entry in ``data[start:end]`` to ``value`` (the line is added when missing), or None when
    the entry already shows that value. Raises :class:`UsageError` for a value that is not one
    non-empty line."""
    if any(ch in value for ch in "\r\n") or not value.strip():
        raise UsageError("a field value must be one non-empty line")
    value = value.strip()
    span = field_span(data, start, end, form, name)
    if span is None:
        pos, line = field_insert(data, start, end, form, name, value, newline)
        return pos, pos, line
    vstart, vend = span
    old = data[vstart:vend]
    new = value
    if name.strip().lower() in KEEP_CASE_FIELDS and old:
        new = same_case(old.decode("utf-8", "replace"), value)
    enc = new.encode("utf-8")
    if old == enc:
        return None
    if not old and data[vstart - 1:vstart] not in (b" ", b"\t"):
        enc = b" " + enc  # "**Date:**" with no value: keep the space after the label
    return vstart, vend, enc


def set_field(block: bytes, form: str, name: str, value: str, newline: bytes = b"\n") -> bytes:
    """``block`` (one entry's bytes) with field ``name`` set to ``value`` (see
    :func:`field_edit`)."""
    edit = field_edit(block, 0, len(block), form, name, value, newline)
    if edit is None:
        return block
    s, e, new = edit
    return block[:s] + new + block[e:]


# --------------------------------------------------------------------------- writing

SECTIONS = ("Context", "Pattern", "Evidence", "Related")


def render_entry(form: str, title: str, fields: Sequence[tuple[str, str]],
                 sections: Sequence[tuple[str, str]] = (), *, newline: str = "\n",
                 separator: bool = True) -> str:
    """One entry in the seed's layout: Form A (``## title``, ``- **Name:** value`` lines,
    ``### Section`` blocks, closing ``---``) or Form B (``---``, ``**Title:**``,
    ``**Name:** value`` lines, ``**Section:**`` paragraphs; a section whose text has several
    lines or starts with a list item begins on the line below its label). ``separator=False``
    leaves out the ``---`` (closing Form A, opening Form B) for a writer that places them."""
    if form not in ("A", "B"):
        raise UsageError(f"entry form must be A or B, not {form!r}")
    out: list[str] = []
    if form == "A":
        out += [f"## {title}", ""]
        out += [f"- **{k}:** {v}" for k, v in fields]
        for name, text in sections:
            out += ["", f"### {name}", "", text]
        out += ["", "---"] if separator else []
    else:
        head = f"**Title:** {title}" if title else "**Title:**"  # no trailing space
        out += ["---", "", head] if separator else [head]
        out += [f"**{k}:** {v}" for k, v in fields]
        for name, text in sections:
            if "\n" in text or text.startswith(("- ", "* ")):
                out += ["", f"**{name}:**", text]
            else:
                out += ["", f"**{name}:** {text}"]
    return newline.join(out) + newline
