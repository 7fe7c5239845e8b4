"""toolkit.ledger.vault (the edit session): byte-preserving edits, meta counts, backups, link
rules, FAULTS A (writing)."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from pathlib import Path

import pytest

from tests._editor_helpers import fixture_vault, make_vault, random_ledger
from tests.conftest import FORMATS, tree_digest
from toolkit.errors import DataError, RefusedError, ToolkitError, UsageError
from toolkit.ledger.codec import title_key
from toolkit.ledger.vault import EditorSession, locate, locate_entries
from toolkit.ledger.vault import session as editor
from toolkit.sources.smith import parse_ledger_bytes

TODAY = dt.date(2026, 6, 1)
NOW = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.UTC)

FORM_B = (b"# Ledger: Patterns\r\n\r\n<!-- sorted -->\r\n\r\n---\r\n\r\n"
          b"**Title:** Alpha entry\r\n**Date:** 2026-05-01\r\n**Category:** testing\r\n"
          b"**Confidence:** Medium\r\n**Source reflections:** 2\r\n\r\n"
          b"**Context:** c\r\n\r\n**Pattern:** p\r\n\r\n---\r\n\r\n"
          b"**Title:** Beta entry\r\n**Date:** 2026-01-01\r\n**Category:** testing\r\n"
          b"**Confidence:** low\r\n**Source reflections:** 1\r\n\r\n**Pattern:** q\r\n")
FORM_A = (b"# Edge Cases\n\n<!-- Each entry starts with ## heading. -->\n\n"
          b"## Gamma quirk\n\n- **Date:** 2026-04-30\n- **Category:** debugging\n"
          b"- **Confidence:** high\n- **Observations:** 7\n\n### Context\n\nctx\n\n"
          b"### Pattern\n\n**Confidence:** inside a section, not the field\n\n---\n\n"
          b"## Delta quirk\n\n- **Date:** 2026-04-01\n- **Confidence:** medium\n"
          b"- **Category:** audit\n\n### Pattern\n\nz\n\n---\n")
META_REFLECT = ("last_updated: 2026-05-02  # kept\ntotal_reflections: 9\nentries:\n"
                "  patterns: 2\n  antipatterns: 0\n  tool_preferences: 0\n  edge_cases: 2\n"
                "  project_quirks: 0\nconfidence_distribution:\n  high: 1\n  medium: 2\n"
                "  low: 1\n")
META_LEDGER = ("# smith-ledger schema\nlast_reflection: \"2026-05-02\"\ntotal_reflections: 9\n"
               "total_entries: 4\nconfig:\n  low_confidence_prune_days: 30\n"
               "  medium_confidence_demote_days: 90\nentries_by_file:\n  patterns: 2\n"
               "  antipatterns: 0\n  tool-preferences: 0\n  edge-cases: 2\n"
               "  project-quirks: 0\n")
META_JSON = ('{\n  "schema_version": 1,\n  "last_reconcile": null,\n  "estimated_tokens": 1,\n'
             '  "total_patterns": 4,\n  "total_reinforcements": 7,\n  "lock": null\n}\n')


def _vault(tmp_path: Path, meta: str = META_REFLECT, meta_json: str | None = META_JSON) -> Path:
    return make_vault(tmp_path, {"patterns": b"\xef\xbb\xbf" + FORM_B, "edge-cases": FORM_A},
                      meta_yaml=meta, meta_json=meta_json)


def _session(vault: Path, **kw: object) -> EditorSession:
    kw.setdefault("today", TODAY)
    kw.setdefault("now", NOW)
    kw.setdefault("timeout", 2.0)
    return EditorSession(vault, **kw)  # type: ignore[arg-type]


def _only_changed_range(old: bytes, new: bytes) -> tuple[bytes, bytes]:
    """The differing middle of two byte strings (common prefix and suffix removed)."""
    i = 0
    while i < min(len(old), len(new)) and old[i] == new[i]:
        i += 1
    j = 0
    while j < min(len(old), len(new)) - i and old[-1 - j] == new[-1 - j]:
        j += 1
    return old[i:len(old) - j], new[i:len(new) - j]


def test_promote_form_b_changes_only_the_value_and_keeps_crlf_bom_and_case(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    path = vault / "ledger" / "patterns.md"
    old = path.read_bytes()
    with _session(vault) as s:
        [e] = s.find("alpha")
        assert s.set_confidence(e, "high")
        result = s.commit()
    new = path.read_bytes()
    assert _only_changed_range(old, new) == (b"Medium", b"High")
    assert new.startswith(b"\xef\xbb\xbf") and new.count(b"\r\n") == old.count(b"\r\n")
    assert result.backup_dir is not None
    assert (result.backup_dir / "patterns.md").read_bytes() == old


def test_form_a_keeps_bullet_and_ignores_section_text(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    path = vault / "ledger" / "edge-cases.md"
    old = path.read_bytes()
    with _session(vault) as s:
        [e] = s.find("gamma")
        s.set_confidence(e, "medium")
        s.commit()
    new = path.read_bytes()
    assert b"- **Confidence:** medium\n- **Observations:** 7" in new
    assert b"**Confidence:** inside a section, not the field" in new
    assert _only_changed_range(old, new) == (b"high", b"medium")


def test_noop_writes_nothing_at_all(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    before = tree_digest(tmp_path)
    inodes = {p: p.stat().st_ino for p in (vault / "ledger").iterdir()}
    with _session(vault) as s:
        [e] = s.find("beta")
        assert s.set_confidence(e, "low") is False  # already low
        for entry in s.entries():
            s.replace_entry(entry, s.entry_bytes(entry))  # same bytes back
        result = s.commit()
    assert not result.changed and result.backup_dir is None
    assert tree_digest(tmp_path) == before
    assert {p: p.stat().st_ino for p in (vault / "ledger").iterdir()} == inodes


def test_remove_deletes_exactly_the_block(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    path = vault / "ledger" / "edge-cases.md"
    old = path.read_bytes()
    with _session(vault) as s:
        [e] = s.find("gamma")
        s.remove(e)
        s.commit()
    assert path.read_bytes() == old[:e.start] + old[e.end:]
    assert [x.title for x in parse_ledger_bytes(path.read_bytes(), path, "edge-cases").entries] \
        == ["Delta quirk"]


def test_meta_yaml_reflect_schema_counts_updated_comments_kept(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    with _session(vault) as s:
        [e] = s.find("beta")
        s.remove(e)
        s.commit()
    meta = (vault / "ledger" / "meta.yaml").read_text()
    assert meta == META_REFLECT.replace("  patterns: 2", "  patterns: 1").replace(
        "  low: 1", "  low: 0")
    data = json.loads((vault / "ledger" / ".meta.json").read_text())
    assert data["total_patterns"] == 3 and data["lock"] is None
    assert data["total_reinforcements"] == 7  # other keys kept
    words = sum(len(p.read_bytes().decode("utf-8-sig").split())
                for p in (vault / "ledger").glob("*.md"))
    assert data["estimated_tokens"] == words * 13 // 10


def test_meta_yaml_smith_ledger_schema_and_missing_key_added(tmp_path: Path) -> None:
    meta = META_LEDGER.replace("  edge-cases: 2\n", "")
    vault = _vault(tmp_path, meta=meta)
    with _session(vault) as s:
        s.remove(s.find("delta")[0])
        s.commit()
    text = (vault / "ledger" / "meta.yaml").read_text()
    assert "total_entries: 3\n" in text and "# smith-ledger schema\n" in text
    assert text.endswith("  project-quirks: 0\n  edge-cases: 1\n")
    assert "low_confidence_prune_days: 30" in text


@pytest.mark.parametrize("bad, where", [
    ("entries:\n\tpatterns: 2\n", "meta.yaml:2: invalid YAML, column 1"),
    ('last_updated: "2026-05-02\ntotal_reflections: 9\n', "invalid YAML"),
    ("x: !!python/object/apply:os.system ['echo pwned']\n", "is not allowed"),
])
def test_invalid_meta_yaml_refuses_the_write_with_line_and_column(tmp_path: Path, bad: str,
                                                                  where: str) -> None:
    vault = _vault(tmp_path, meta=bad)
    before = tree_digest(tmp_path)
    with _session(vault) as s:
        s.set_confidence(s.find("alpha")[0], "high")
        with pytest.raises(DataError) as err:
            s.commit()
    assert where in str(err.value) and err.value.exit_code == 65
    assert "nothing was written" in str(err.value)
    assert tree_digest(tmp_path) == before


def test_missing_meta_yaml_is_not_created(tmp_path: Path) -> None:
    vault = make_vault(tmp_path, {"patterns": FORM_B})
    with _session(vault) as s:
        s.set_confidence(s.find("alpha")[0], "high")
        result = s.commit()
    assert not (vault / "ledger" / "meta.yaml").exists()
    assert any("meta.yaml is missing" in n for n in result.notes)


def test_mode_0640_kept(tmp_path: Path) -> None:  # A15
    vault = _vault(tmp_path)
    path = vault / "ledger" / "patterns.md"
    path.chmod(0o640)
    with _session(vault) as s:
        s.set_confidence(s.find("alpha")[0], "low")
        s.commit()
    assert path.stat().st_mode & 0o7777 == 0o640


def test_symlink_inside_vault_edits_target_and_keeps_link(tmp_path: Path) -> None:  # A14
    vault = _vault(tmp_path)
    real = vault / "ledger" / "real-patterns.md"
    link = vault / "ledger" / "patterns.md"
    os.replace(link, real)
    link.symlink_to("real-patterns.md")
    with _session(vault) as s:
        s.set_confidence(s.find("alpha")[0], "high")
        s.commit()
    assert link.is_symlink() and b"**Confidence:** High" in real.read_bytes()


def test_symlink_outside_vault_refused(tmp_path: Path) -> None:  # A14
    vault = _vault(tmp_path / "p")
    outside = tmp_path / "elsewhere.md"
    link = vault / "ledger" / "patterns.md"
    os.replace(link, outside)
    link.symlink_to(outside)
    before = outside.read_bytes()
    with _session(vault) as s:
        s.set_confidence(s.find("alpha")[0], "high")
        with pytest.raises(RefusedError, match="outside"):
            s.commit()
    assert outside.read_bytes() == before


def test_hard_link_refused_without_force(tmp_path: Path) -> None:  # A14
    vault = _vault(tmp_path)
    path = vault / "ledger" / "patterns.md"
    os.link(path, tmp_path / "other-name.md")
    with _session(vault) as s:
        s.set_confidence(s.find("alpha")[0], "high")
        with pytest.raises(RefusedError, match="2 hard links"):
            s.commit()
    with _session(vault, force=True) as s:
        s.set_confidence(s.find("alpha")[0], "high")
        result = s.commit()
    assert any("hard links" in n for n in result.notes)
    assert b"High" in path.read_bytes() and b"Medium" in (tmp_path / "other-name.md").read_bytes()


def test_junk_file_is_never_rewritten(tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:  # A6
    vault = _vault(tmp_path)
    junk = vault / "ledger" / "antipatterns.md"
    junk.write_bytes(b"# Ledger\n\n**Title:** ok\n**Confidence:** low\n\xff\xfe junk\n")
    with _session(vault) as s:
        assert s.find("ok", kinds=["antipatterns"]) == []
        assert "byte offset 44" in (s.doc("antipatterns").error or "")
        s.set_confidence(s.find("alpha")[0], "high")  # the other files still work
        s.commit()
    assert junk.read_bytes().endswith(b"\xff\xfe junk\n")

    # Found by the large-file lookup (which does not read the whole file): the commit checks
    # the file before anything is renamed and refuses.
    monkeypatch.setattr(editor, "FAST_FIND_BYTES", 0)
    before = tree_digest(tmp_path)
    with _session(vault) as s:
        [e] = s.find("ok", kinds=["antipatterns"])
        s.set_confidence(e, "high")
        with pytest.raises(DataError) as err:
            s.commit()
    assert "invalid UTF-8 at byte offset 44" in str(err.value)
    assert "never rewritten, nothing written" in str(err.value)
    assert tree_digest(tmp_path) == before
    assert not list((vault / "ledger").glob(".*toolkit-tmp-*"))


def test_reset_archives_and_writes_templates(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    old = {p.name: p.read_bytes() for p in (vault / "ledger").glob("*.md")}
    with _session(vault) as s:
        plan = s.reset()
    assert plan is not None and plan.archive_dir.name == "2026-06-01-120000"
    for name, data in old.items():
        assert (plan.archive_dir / name).read_bytes() == data
    assert (vault / "ledger" / "patterns.md").read_text() == (
        "# Patterns\n\n<!-- Entries are added by /smith-reflect. Each entry starts with ## "
        "heading. -->\n")
    assert (vault / "ledger" / "meta.yaml").read_text() == editor.META_TEMPLATE
    data = json.loads((vault / "ledger" / ".meta.json").read_text())
    assert data["total_patterns"] == 0 and data["total_reinforcements"] == 7


def test_reset_that_fails_midway_puts_every_file_back(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    vault = _vault(tmp_path)
    ledger = vault / "ledger"
    before = {p.name: p.read_bytes() for p in ledger.iterdir() if p.is_file()
              and p.name != ".meta.json"}
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src, dst):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        # renames: the .meta.json lock, meta.yaml, patterns.md (the journal is written at
        # its own name), then the third ledger file fails to be replaced by its template
        if calls["n"] == 4:
            raise OSError(5, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(editor.os, "replace", flaky_replace)
    with _session(vault) as s, pytest.raises(ToolkitError, match="Input/output error") as err:
        s.reset()
    assert "(the files already replaced were put back: meta.yaml, patterns.md)" in str(err.value)
    assert not (ledger / ".toolkit-journal.json").exists()
    monkeypatch.setattr(editor.os, "replace", real_replace)
    after = {p.name: p.read_bytes() for p in ledger.iterdir() if p.is_file()
             and p.name != ".meta.json"}
    assert after == before
    assert not (ledger / "archive" / "2026-06-01-120000").exists()


def test_resort_insert_and_replace_for_reconcile(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    path = vault / "ledger" / "patterns.md"
    with _session(vault) as s:
        alpha, beta = s.entries("patterns")
        merged = s.entry_bytes(alpha).replace(b"Alpha entry", b"Alpha and beta")
        s.replace_entry(alpha, merged)
        s.remove(beta)
        s.insert_entry("patterns", "**Title:** New high\n**Date:** 2026-05-30\n"
                       "**Category:** audit\n**Confidence:** high\n**Source reflections:** 6\n")
        assert s.resort("patterns")
        with pytest.raises(UsageError):
            s.set_confidence(alpha, "low")  # re-sorted: edit before resort()
        s.commit()
    lf = parse_ledger_bytes(path.read_bytes(), path, "patterns")
    assert [(e.title, e.confidence) for e in lf.entries] == [("New high", "high"),
                                                             ("Alpha and beta", "medium")]
    assert lf.newline == b"\r\n" and path.read_bytes().count(b"\n") == \
        path.read_bytes().count(b"\r\n")


def test_overlapping_edits_are_refused(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    with _session(vault) as s:
        e = s.find("alpha")[0]
        s.remove(e)
        with pytest.raises(UsageError, match="already removed"):
            s.set_confidence(e, "high")
        with pytest.raises(UsageError, match="exactly one entry"):
            s.replace_entry(s.find("beta")[0], "no entry here\n")


def test_bom_first_line_entry_is_parsed_and_editable(tmp_path: Path) -> None:
    """Parser fix: a BOM file whose first line is an entry lost that entry."""
    data = b"\xef\xbb\xbf**Title:** First line\n**Date:** 2026-05-01\n**Category:** audit\n" \
           b"**Confidence:** low\n"
    [e] = parse_ledger_bytes(data, "x", "patterns").entries
    assert (e.title, e.start, e.line) == ("First line", 3, 1)
    vault = make_vault(tmp_path, {"patterns": data})
    with _session(vault) as s:
        s.set_confidence(s.find("first")[0], "medium")
        s.commit()
    assert (vault / "ledger" / "patterns.md").read_bytes() == data.replace(b"low", b"medium")


# --------------------------------------------------------------------------- round trips


def _formats_ledger_files() -> list[Path]:
    return sorted((FORMATS / "smith" / "ledger").glob("*.md"))


@pytest.mark.parametrize("path", _formats_ledger_files(), ids=lambda p: p.name)
def test_roundtrip_every_format_file(path: Path) -> None:
    data = path.read_bytes()
    lf = parse_ledger_bytes(data, path, "patterns")
    # header + every block + the bytes between blocks give back the file exactly
    pieces, pos = [], 0
    for e in lf.entries:
        pieces.append(data[pos:e.start])
        pieces.append(data[e.start:e.end])
        pos = e.end
    pieces.append(data[pos:])
    assert b"".join(pieces) == data
    assert all(lf.entries[i].end <= lf.entries[i + 1].start for i in range(len(lf.entries) - 1))


def test_roundtrip_fixture_vault_through_the_editor(tmp_path: Path) -> None:
    vault = fixture_vault(tmp_path)
    before = tree_digest(tmp_path)
    with _session(vault) as s:
        for e in s.entries():
            s.replace_entry(e, s.entry_bytes(e))
        assert s.commit().changes == []
    with _session(vault) as s:
        for e in s.entries():
            s.set_confidence(e, e.confidence or "low")
            s.set_date(e, e.date or "2026-01-01")
        assert s.commit().changes == []
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("seed", range(40))
def test_roundtrip_and_single_edit_on_generated_ledgers(tmp_path: Path, seed: int) -> None:
    data = random_ledger(seed, n=6)
    vault = make_vault(tmp_path, {"patterns": data})
    path = vault / "ledger" / "patterns.md"
    with _session(vault) as s:
        assert s.commit().changes == []  # parse and write back unchanged: nothing written
    assert path.read_bytes() == data
    entries = [e for e in parse_ledger_bytes(data, path, "patterns").entries
               if e.confidence in ("low", "medium", "high")]
    if not entries:
        return
    target = random.Random(seed).choice(entries)
    new_conf = {"low": "medium", "medium": "high", "high": "low"}[target.confidence or "low"]
    with _session(vault) as s:
        [e] = [x for x in s.entries("patterns") if x.start == target.start]
        s.set_confidence(e, new_conf)
        s.commit()
    new = path.read_bytes()
    old_mid, _ = _only_changed_range(data, new)
    first = next(i for i in range(len(data)) if data[i] != new[i])
    # only the target's Confidence value changed: one range, on its Confidence line
    assert target.start <= first and first + len(old_mid) <= target.end
    line_start = data.rfind(b"\n", 0, first) + 1
    assert b"confidence" in data[line_start:first].lower()
    # every other entry is byte-identical
    after = parse_ledger_bytes(new, path, "patterns").entries
    before_blocks = [data[x.start:x.end] for x in parse_ledger_bytes(data, path, "patterns")
                     .entries if x.start != target.start]
    after_blocks = [new[x.start:x.end] for x in after if x.line != target.line]
    assert before_blocks == after_blocks
    [changed] = [x for x in after if x.line == target.line]
    assert changed.confidence == new_conf


@pytest.mark.parametrize("seed", range(0, 600, 3))
def test_fast_title_lookup_equals_the_full_parse(seed: int) -> None:
    data = random_ledger(seed)
    full = parse_ledger_bytes(data, "/v/patterns.md", "patterns").entries
    rng = random.Random(seed)
    queries = {"no such title anywhere"}
    for e in full:
        key = title_key(e.title)
        if key:
            queries.add(key)
            i = rng.randrange(len(key))
            queries.add(key[i:i + rng.randint(1, 6)])
    for q in queries:
        for exact in (False, True):
            want = [e for e in full
                    if (title_key(e.title) == q if exact else q in title_key(e.title))]
            assert locate_entries(data, "/v/patterns.md", "patterns", q, exact=exact) == want


@pytest.mark.parametrize("query", ["00042:", "Pattern 00042:", "pattern 00042: retry",
                                   "RN 00042", "00042: Retry", "PATTERN 00042", "1.2.3",
                                   "v1.2.3 (", "0042", "00042: retry the"])
def test_title_lookup_by_a_digit_run_equals_the_full_parse(query: str) -> None:
    """A query with a run of digits or punctuation is searched for by that run: lines that
    hold the run but are no title, titles that hold it with other letters around it, in
    other cases, in both forms, with a BOM and CRLF: the same entries as the full parse."""
    body = ("**Context:** see Pattern 00042: retry, and v1.2.3 (pinned)\n\n"
            "**Pattern:** p\n\n")
    blocks = []
    for i, title in enumerate(["Pattern 00042: retry the sender", "PATTERN 00042: Retry",
                               "Pattern 000420: retry", "Tool v1.2.3 (pinned)",
                               "xPattern 00042:", "Pattern 00043: other"]):
        if i % 2:
            blocks.append(f"## {title}\n\n- **Confidence:** low\n\n### Pattern\n\n{body}---\n\n")
        else:
            blocks.append(f"---\n\n**Title:** {title}\n**Confidence:** low\n\n{body}")
    for data in (("# Ledger: Patterns\n\n" + "".join(blocks)).encode(),
                 b"\xef\xbb\xbf" + "".join(blocks).replace("\n", "\r\n").encode()):
        full = parse_ledger_bytes(data, "/v/patterns.md", "patterns").entries
        q = title_key(query)
        want = [e for e in full if q in title_key(e.title)]
        assert want  # every query names at least one title
        assert locate_entries(data, "/v/patterns.md", "patterns", q) == want


@pytest.mark.parametrize("query", ["use 123", "x; 42 y", "strasse 700", "k 100 units",
                                   "uſe 123", "x\u037e 42", "e 123 b"])
def test_title_lookup_by_an_anchor_finds_titles_that_fold_to_it(query: str) -> None:
    """An anchored query finds the titles whose case fold or NFC form holds it even where
    their own bytes do not: the long s, the Greek question mark (NFC: ";"), sharp s, the
    Kelvin sign; the file is not refused for holding them."""
    titles = ["U\u017fe 123 budget", "x\u037e 42 y", "Stra\u00dfe 700", "\u212a 100 units",
              "use 1234", "Plain 123 title"]
    body = "**Context:** use 123 and x; 42 y and strasse 700 in the text\n\n"
    data = ("# Ledger: Patterns\n\n" + "".join(
        f"---\n\n**Title:** {t}\n**Confidence:** low\n\n{body}" for t in titles)).encode()
    full = parse_ledger_bytes(data, "/v/patterns.md", "patterns").entries
    q = title_key(query)
    want = [e for e in full if q in title_key(e.title)]
    assert want
    if q.isascii():  # searched by its anchor, not by a full parse
        assert locate._quick_title_lines(data, q) is not None
    assert locate_entries(data, "/v/patterns.md", "patterns", q) == want


def test_only_semicolon_and_backtick_come_from_other_characters() -> None:
    """What the anchors rely on (toolkit/ledger/vault/locate.py): of the ASCII characters that
    are no letter, NFC and case folding make only ";" and "`" of any other code point."""
    import unicodedata

    made = {c for cp in range(0x80, 0x110000) if not 0xD800 <= cp <= 0xDFFF
            for c in unicodedata.normalize("NFC", chr(cp)).casefold()
            if c.isascii() and not c.isalpha()}
    assert made <= {";", "`"}


def test_utf8_check_reads_a_big_file_in_parts(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # A6
    """The commit's UTF-8 check of a file found without a full parse: a character cut by the
    edge of a part is whole, junk bytes after the first part are found at their offset."""
    monkeypatch.setattr(editor, "FAST_FIND_BYTES", 0)
    head = b"# Ledger\n\n**Title:** ok\n**Confidence:** low\n\n"
    for cut in range(4):  # the 4-byte character starts 0-3 bytes before the edge
        filler = b"a" * ((1 << 20) - len(head) - 1 - cut)
        data = head + filler + "\U0001d11e\u2014 text\n".encode()
        vault = make_vault(tmp_path / f"v{cut}", {"patterns": data})
        with _session(vault) as s:
            s.set_confidence(s.find("ok")[0], "high")
            s.commit()
        assert (vault / "ledger" / "patterns.md").read_bytes().endswith("\u2014 text\n".encode())
    junk = head + b"a" * (3 << 20) + b"\xff junk\n"
    vault = make_vault(tmp_path / "junk", {"patterns": junk})
    with _session(vault) as s:
        s.set_confidence(s.find("ok")[0], "high")
        with pytest.raises(DataError, match=f"invalid UTF-8 at byte offset {len(junk) - 7}"):
            s.commit()
    assert (vault / "ledger" / "patterns.md").read_bytes() == junk


def test_find_in_a_large_file_uses_the_fast_path(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(editor, "FAST_FIND_BYTES", 0)
    vault = _vault(tmp_path)
    with _session(vault) as s:
        [e] = s.find("ALPHA")
        assert not s.doc("patterns").parsed  # found without parsing the whole file
        s.set_confidence(e, "high")
        result = s.commit()
    # a targeted edit moves the confidence counts by exactly what it changed
    assert "  high: 2\n  medium: 1\n" in (vault / "ledger" / "meta.yaml").read_text()
    assert result.entries_total is None


def test_large_ledger_promote_is_correct(tmp_path: Path) -> None:
    """The benchmark's ledger, smaller: the fast path edits the right entry."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_editor

    vault = bench_editor.make_vault(tmp_path, 3000)
    path = vault / "ledger" / "patterns.md"
    old = path.read_bytes()
    from toolkit import ledger_ops

    r = ledger_ops.promote(vault, "Pattern 02997:", today=TODAY)
    assert (r.old, r.new) == ("low", "medium")
    assert _only_changed_range(old, path.read_bytes()) == (b"low", b"medium")


@pytest.mark.parametrize("where", ["inside the entry", "far after it", "before it", "none"])
def test_fast_title_lookup_honours_fences_wherever_they_are(where: str) -> None:
    """The fast path scans for fences only up to the entry after the last candidate; a fence
    inside the found entry (hiding a heading) or anywhere before it still counts, one after
    it does not change the answer."""
    def entry(i: int, body: str = "") -> str:
        return (f"## Retry budget {i}\n- **Confidence:** low\n- **Date:** 2026-04-01\n"
                f"{body}\n")
    fence = "```\n## not a heading, inside a fence\n```\n"
    blocks = [entry(i) for i in range(400)]
    if where == "inside the entry":
        blocks[200] = entry(200, fence)
    elif where == "far after it":
        blocks[390] = entry(390, fence)
    elif where == "before it":
        blocks[10] = entry(10, "```\n## opened here and never closed\n")
    data = ("# Ledger: Patterns\n\n" + "".join(blocks)).encode()
    full = parse_ledger_bytes(data, "/v/patterns.md", "patterns").entries
    for q in ("retry budget 200", "retry budget 2", "not a heading"):
        want = [e for e in full if q in title_key(e.title)]
        assert locate_entries(data, "/v/patterns.md", "patterns", q) == want


@pytest.mark.parametrize("seed", range(0, 120, 3))
def test_promote_diff_line_numbers_are_those_of_the_file(tmp_path: Path, monkeypatch,  # type: ignore[no-untyped-def]
                                                         seed: int) -> None:
    """The diff of a field edit counts its line numbers from the entry's known title line
    (not from the top of a large file): they are the file's own, in both forms, with CRLF
    and a BOM, for every entry found by the large-file lookup."""
    from toolkit.ledger.vault.diff import Change

    monkeypatch.setattr(editor, "FAST_FIND_BYTES", 0)
    data = random_ledger(seed, n=5)
    vault = make_vault(tmp_path, {"patterns": data})
    path = vault / "ledger" / "patterns.md"
    for target in parse_ledger_bytes(data, path, "patterns").entries:
        if not target.title or target.confidence not in ("low", "medium", "high"):
            continue
        with EditorSession(vault, dry_run=True, today=dt.date(2026, 6, 1)) as s:
            found = [e for e in s.find(target.title, kinds=["patterns"])
                     if e.start == target.start]
            if not found:
                continue  # a title the query cannot single out
            s.set_confidence(found[0], "low" if target.confidence != "low" else "high")
            [change] = s.plan_ledger()
        assert change.line_hint is not None
        plain = Change(change.path, change.name, change.old, change.new, change.edits)
        assert change.diff() == plain.diff() and "@@ -" in change.diff()
