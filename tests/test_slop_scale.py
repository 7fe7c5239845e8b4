"""The slop ledger at scale (issue 16, item 1): reads and writes stay linear and keep their
answers: every entry's line, CodeSmith's loader rules, byte-preserving writes with a diff that
names the right lines. No timing here (bench/bench_slop.py measures); these pin the
behaviour the fast paths must keep."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from tests._slop_helpers import NOW, entry, serde_pretty, write_ledger
from toolkit import slop_ops
from toolkit.sources.slop import _entry_problems, _plain, load_problems, parse_slop, read_slop
from toolkit.textio import _depth_ok, _may_nest_deeper

N = 3000  # entries: enough that a quadratic step would show in the suite's time


def _varied(n: int) -> dict[str, Any]:
    """Entry ``n`` with the optional fields, multi-line text, quotes and non-ASCII text."""
    fields: dict[str, Any] = {"description": f'Line one of {n}.\nSays "hi" — twice.\n'}
    if n % 2:
        fields["source_links"] = [f"src/m{n}.rs:{n}", "docs/a.md"]
    if n % 3 == 0:
        fields["owner"] = "jane"
    if n % 5 == 0:
        fields["cleanup_recommendation"] = "Delete it."
    return entry(n, **fields)


def _id_lines(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith('"id"')]


# --------------------------------------------------------------------------- reading


def test_every_entry_and_warning_carries_its_own_line(tmp_path: Path) -> None:
    entries = [_varied(n) for n in range(1, N + 1)]
    entries[-2]["status"] = "Bogus"  # a problem near the end: its warning names its line
    path = write_ledger(tmp_path / "slop_ledger.json", entries)
    text = path.read_text(encoding="utf-8")
    sf = read_slop(path)
    lines = _id_lines(text)
    assert [e.line for e in sf.entries] == lines and len(lines) == N
    assert [f"{p.path}:{p.line}" for p in sf.problems] == [f"{path}:{lines[-2]}"]
    assert "status 'Bogus' is not one of" in sf.problems[0].message


def _fields(e: Any) -> tuple[Any, ...]:
    return tuple(getattr(e, f.name) for f in dataclasses.fields(e))


def test_plain_entries_read_the_same_as_checked_ones(tmp_path: Path) -> None:
    """A lone surrogate escape anywhere makes the reader look at every string; the entries it
    reads must be the ones the quick path reads when there is none."""
    entries = [_varied(n) for n in range(1, 200)]
    entries[5]["extra_field"] = {"kept": [1, 2]}
    entries[9]["severity"] = "High"
    entries[12]["source_links"] = None
    plain = parse_slop(serde_pretty({"entries": entries}), Path("x.json"))
    marked = [*entries, entry(999, title="\ud800")]
    checked = parse_slop(serde_pretty({"entries": marked}).replace("\ud800", "\\ud800"),
                         Path("x.json"))
    assert [_fields(e) for e in checked.entries[:-1]] == [_fields(e) for e in plain.entries]
    assert checked.entries[-1].title == "\ufffd"
    assert [str(p) for p in checked.load_problems][:-1] == [str(p) for p in plain.load_problems]


VARIANTS: list[dict[str, Any]] = [
    {}, {"owner": None}, {"owner": 3}, {"owner": ["a"]}, {"source_links": []},
    {"source_links": None}, {"source_links": "x"}, {"source_links": ["a", 1]},
    {"severity": "High"}, {"severity": ["high"]}, {"severity": {"a": 1}}, {"status": None},
    {"bucket": 7}, {"title": None}, {"title": 1.5}, {"task_id": False}, {"thread_id": {}},
    {"updated_at": None}, {"cleanup_recommendation": "ok"}, {"extra": 1},
]


@pytest.mark.parametrize("fields", VARIANTS, ids=[str(v) for v in VARIANTS])
def test_the_quick_entry_check_agrees_with_the_loader_rules(fields: dict[str, Any]) -> None:
    raw = entry(1, **fields)
    for name in ("id", "created_at"):  # missing required fields too
        assert _plain({k: v for k, v in raw.items() if k != name}) is False
    assert _plain(raw) == (not _entry_problems(raw, 0, None))
    data = {"entries": [raw, entry(2)]}
    assert load_problems(data, surrogates=False) == load_problems(data)


# --------------------------------------------------------------------------- nesting scan

ALPHABET = ['"', "\\", "[", "]", "{", "}", "\n", "a", " ", "é", '\\"', "\\\\", '""', "\\\n"]


def test_the_nesting_shortcut_agrees_with_the_token_scan() -> None:
    """The whole-buffer shortcut says "not deeper" only when the token-by-token scan agrees,
    on any text (valid JSON or not): escaped quotes, backslash pairs, line breaks, strings
    holding brackets, unterminated strings."""
    rnd = random.Random(16)
    for _ in range(20_000):
        text = "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 40)))
        for limit in (0, 1, 2, 3):
            deep = _depth_ok(text, limit) is not None
            quick = _may_nest_deeper(text, limit)
            assert quick or not deep, (text, limit)
            if re.search(r"(?<!\\)(?:\\\\)*\\\n", text) is None:  # else it may only say maybe
                assert quick == deep, (text, limit)


# --------------------------------------------------------------------------- writing


def _ledger(tmp_path: Path, n: int = N) -> tuple[Path, str]:
    path = write_ledger(tmp_path / "slop" / "slop_ledger.json",
                        [_varied(i) for i in range(1, n + 1)], trailing_newline=True)
    return path, path.read_text(encoding="utf-8")


def _hunks(diff: str) -> list[tuple[int, int]]:
    return [(int(m[1]), int(m[2])) for m in re.finditer(r"^@@ -(\d+),\d+ \+(\d+),\d+ @@",
                                                          diff, re.M)]


def test_append_to_a_large_ledger_changes_only_its_end(tmp_path: Path) -> None:
    path, before = _ledger(tmp_path)
    new = slop_ops.NewEntry(bucket="stale_docs", severity="low", confidence="high",
                            title="README flags", description="Update the usage section.")
    result = slop_ops.append(path, [new], now=NOW, new_id=lambda: "f" * 8 + "-0000-4000-8000-"
                             + "0" * 12)
    after = path.read_text(encoding="utf-8")
    end = before.rindex("}", 0, before.rindex("]")) + 1  # the last entry's closing brace
    assert after.startswith(before[:end] + ",\n    {\n      \"id\": \"ffffffff-")
    assert after.endswith(before[end:])
    last_line = before[:end].count("\n") + 1
    # a pure insertion before the last entry's "}" line, three lines of context before it
    assert _hunks(result.diff) == [(last_line - 3, last_line - 3)]
    assert "\n+    },\n+    {\n+      \"id\": \"ffffffff-" in result.diff
    assert not re.search(r"^-", result.diff.split("\n", 2)[2], re.M)
    assert json.loads(after)["entries"][:-1] == json.loads(before)["entries"]


def test_update_in_the_middle_rewrites_that_entry_only(tmp_path: Path) -> None:
    path, before = _ledger(tmp_path)
    target = entry(N // 2)["id"]
    result = slop_ops.update(path, target[:13], "accepted", now=NOW)
    after = path.read_text(encoding="utf-8")
    old_lines, new_lines = before.splitlines(), after.splitlines()
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True), 1) if a != b]
    status_line = next(i for i in changed if '"status"' in old_lines[i - 1])
    assert new_lines[status_line - 1] == '      "status": "accepted",'
    assert len(changed) == 2  # status and updated_at
    assert _hunks(result.diff) == [(status_line - 3, status_line - 3)]


def test_update_finds_an_entry_whose_id_is_written_with_escapes(tmp_path: Path) -> None:
    path, before = _ledger(tmp_path, 50)
    target = entry(20)["id"]
    escaped = "".join(f"\\u{ord(c):04x}" for c in target)
    text = before.replace(f'"{target}"', f'"{escaped}"')
    path.write_text(text, encoding="utf-8")
    slop_ops.update(path, target, "resolved", now=NOW)
    after = path.read_text(encoding="utf-8")
    start = text.rindex("    {", 0, text.index(escaped))  # the entry's first line
    end = text.index("\n    }", start) + 6
    assert after.startswith(text[:start]) and after.endswith(text[end:])
    assert json.loads(after)["entries"][19] == {**_varied(20), "status": "resolved",
                                                "updated_at": "2026-05-04T14:30:00+00:00"}


def test_a_copy_of_the_entry_elsewhere_in_the_file_is_left_alone(tmp_path: Path) -> None:
    """A top-level field holding an exact copy of the entry, before the entries: the update
    changes the entry in the entries array, never the copy."""
    entries = [_varied(i) for i in range(1, 40)]
    copy = dict(entries[10])
    path = write_ledger(tmp_path / "slop_ledger.json", entries)
    text = path.read_text(encoding="utf-8")
    path.write_text('{\n  "pinned": [' + json.dumps(copy) + "],\n" + text[2:], encoding="utf-8")
    slop_ops.update(path, copy["id"], "accepted", now=NOW)
    after = path.read_text(encoding="utf-8")
    assert after.startswith('{\n  "pinned": [' + json.dumps(copy) + "],\n")  # bytes kept
    data = json.loads(after)
    assert data["pinned"] == [copy]
    assert data["entries"][10]["status"] == "accepted"
    assert [e for i, e in enumerate(data["entries"]) if i != 10] == entries[:10] + entries[11:]


def test_repair_of_many_entries_keeps_every_other_byte(tmp_path: Path) -> None:
    path = write_ledger(tmp_path / "slop_ledger.json",
                        [_varied(i) | {"severity": "High"} if i % 2 else _varied(i)
                         for i in range(1, 1001)])
    before = path.read_text(encoding="utf-8")
    result = slop_ops.repair(path, dry_run=False)
    assert len(result.fixed) == 500 and not result.unfixable
    assert path.read_text(encoding="utf-8") == before.replace('"High"', '"high"')
    assert len(_hunks(result.diff)) == 500
