"""The ledger commands answer from the parse cache beside the store exactly as a fresh parse
does: the same output, warnings, recovery note and exit code, before and after the files
change (one file edited, a byte changed with size and mtime kept, a file over the limit, junk
bytes, a journal left by an interrupted edit)."""

from __future__ import annotations

import os
import random
import shutil
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import FixtureProject
from tests.test_faults_g4_journal import _kill_at

COMMANDS = [
    ("ledger",),
    ("ledger", "--json"),
    ("ledger", "list"),
    ("ledger", "list", "--json", "--confidence", "low"),
    ("ledger", "show", "Redis client"),
    ("ledger", "show", "migration"),  # several match: the listing and exit code
    ("ledger", "search", "migration"),
    ("ledger", "search", "--json", "MIGRATION"),
    ("ledger", "search", "no such words anywhere"),
    ("ledger", "export", "--no-redact"),
]
NEW_ENTRY = ("\n---\n\n**Title:** Pin the toolchain before bisecting\n**Date:** 2026-05-21\n"
             "**Category:** debugging\n**Confidence:** low\n**Source reflections:** 1\n\n"
             "**Pattern:** Straße and café stay searchable after a migration.\n")


def _answers(cli_run, root: Path, db: Path, env: dict[str, str] | None = None
             ) -> list[tuple[int, str, str]]:  # type: ignore[no-untyped-def]
    out = []
    for args in COMMANDS:
        r = cli_run("--db", str(db), *args, env=env)
        out.append((r.exit_code, r.stdout.replace(str(root), "<root>"),
                    r.stderr.replace(str(root), "<root>")))
    return out


def _pair(project: FixtureProject, tmp_path: Path, cli_run) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """A copy of the project: ``project.root`` answers from the cache beside its store (made
    by ``toolkit load`` at tmp_path/warm), the copy, which has no store, parses."""
    copy = tmp_path / "copy"
    shutil.copytree(project.root, copy, symlinks=True)
    assert cli_run("--db", str(tmp_path / "warm" / "s.duckdb"), "load").exit_code == 0
    assert (tmp_path / "warm" / "s.duckdb.cache" / "patterns.marshal").is_file()
    return project.root, copy


def _check(cli_run, project: FixtureProject, copy: Path, tmp_path: Path, warm: Path,
           env: dict[str, str] | None = None) -> list[tuple[int, str, str]]:  # type: ignore[no-untyped-def]
    """Both paths give the same answers: the project from the cache at ``warm`` (filled by
    earlier runs), the copy from a store folder never used before (a parse)."""
    cached = _answers(cli_run, project.root, warm, env)
    os.chdir(copy)
    try:
        cold = tmp_path / f"cold-{len(list(tmp_path.glob('cold-*')))}" / "s.duckdb"
        parsed = _answers(cli_run, copy, cold, env)
    finally:
        os.chdir(project.root)
    assert cached == parsed
    return cached


def _edit_both(paths: tuple[Path, Path], name: str, change) -> None:  # type: ignore[no-untyped-def]
    for root in paths:
        f = root / ".smith" / "vault" / "ledger" / name
        st = f.stat()
        f.write_bytes(change(f.read_bytes()))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime a stat check would trust


def test_the_cache_answers_as_a_parse_through_edits(project: FixtureProject, cli_run,
                                                    tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    roots = _pair(project, tmp_path, cli_run)
    warm = tmp_path / "warm" / "s.duckdb"
    first = _check(cli_run, project, roots[1], tmp_path, warm)
    assert not list(tmp_path.glob("cold-*/*")), "a read without a store wrote something"
    assert _check(cli_run, project, roots[1], tmp_path, warm) == first  # now from the cache

    # One file edited: a new entry at the end of antipatterns.md.
    _edit_both(roots, "antipatterns.md", lambda b: b + NEW_ENTRY.encode("utf-8"))
    after = _check(cli_run, project, roots[1], tmp_path, warm)
    assert after != first and "Pin the toolchain" in after[2][1]

    # One byte changed, size and mtime kept: a stat fingerprint would not see it.
    _edit_both(roots, "antipatterns.md", lambda b: b.replace(b"Pin the", b"Pen the"))
    again = _check(cli_run, project, roots[1], tmp_path, warm)
    assert "Pen the toolchain" in again[2][1] and "Pin the toolchain" not in again[2][1]

    # Junk bytes in a file the cache knows: a warning naming the offset, in both.
    _edit_both(roots, "edge-cases.md", lambda b: b[:40] + b"\xff\xfe" + b[42:])
    junk = _check(cli_run, project, roots[1], tmp_path, warm)
    assert "edge-cases.md: invalid UTF-8 at byte offset 40" in junk[0][1] + junk[0][2]


def test_a_file_over_the_limit_is_refused_from_the_cache_too(project: FixtureProject, cli_run,
                                                             tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    roots = _pair(project, tmp_path, cli_run)
    warm = tmp_path / "warm" / "s.duckdb"
    _check(cli_run, project, roots[1], tmp_path, warm)
    size = (project.ledger / "patterns.md").stat().st_size
    limit = {"TOOLKIT_MAX_FILE_MB": str((size - 1) / 1024 / 1024)}
    answers = _check(cli_run, project, roots[1], tmp_path, warm, limit)
    listing = answers[2]
    assert listing[0] == 65 and "over the" in listing[2] and "patterns.md" in listing[2]


def test_the_recovery_note_of_an_interrupted_edit_is_in_both(project: FixtureProject, cli_run,
                                                              tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    roots = _pair(project, tmp_path, cli_run)
    warm = tmp_path / "warm" / "s.duckdb"
    _check(cli_run, project, roots[1], tmp_path, warm)
    for root in roots:  # a promote killed after its first rename leaves its journal
        _kill_at(["ledger", "promote", "Run the migration dry-run"], root, "after_rename@1")
        assert (root / ".smith" / "vault" / "ledger" / ".toolkit-journal.json").exists()
    r = cli_run("--db", str(warm), "ledger", "list")
    assert "interrupted" in r.stderr
    shutil.rmtree(roots[1])
    shutil.copytree(roots[0], roots[1], symlinks=True)  # recovered: both sides as the same
    _check(cli_run, project, roots[1], tmp_path, warm)


def test_a_cached_parse_is_used_only_for_the_same_bytes(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.sources import smith

    f = tmp_path / "patterns.md"
    f.write_text("# Patterns\n" + NEW_ENTRY, encoding="utf-8")
    cache = tmp_path / "cache"
    parsed = smith.read_ledger_file(f, "patterns", cache=cache)

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(smith, "parse_ledger_bytes", no_parse)
    hit = smith.read_ledger_file(f, "patterns", cache=cache)
    assert (hit.entries, hit.problems, hit.header_end, hit.newline, hit.bom, hit.data) == \
        (parsed.entries, parsed.problems, parsed.header_end, parsed.newline, parsed.bom,
         parsed.data)
    f.write_bytes(f.read_bytes().replace(b"low", b"LOW"))
    with pytest.raises(AssertionError, match="parsed again"):
        smith.read_ledger_file(f, "patterns", cache=cache)
    (cache / "patterns.marshal").write_bytes(b"\x00junk")  # a damaged entry: a miss
    with pytest.raises(AssertionError, match="parsed again"):
        smith.read_ledger_file(f, "patterns", cache=cache)


PIECES = ["a", "B", "ß", "SS", "é", "e\u0301", "ﬁ", "İ", "\n", "\n", "\r\n", "\r", "\u2028",
          "\x0c", " ", "café", "CAFÉ", "—", "x",
          # digits and punctuation, which a query's anchor is made of, and characters that
          # fold or compose into letters or ";" and "`" beside them
          "2026", "-04", ":", "0", "v1.2", "\u212a", "\u017f", "\u037e", "\u1fef", "\uff10"]


@pytest.mark.parametrize("seed", range(40))
def test_search_finds_the_lines_a_line_by_line_fold_finds(seed: int) -> None:
    """The search's whole-text fold marks the same lines, and shows the same text, as folding
    each of ``str.splitlines``'s lines (with NFC, case folding, every kind of line break)."""
    from toolkit.ledger_ops import _SearchText

    rng = random.Random(seed)
    pieces = PIECES if seed % 4 < 2 else [p for p in PIECES if p not in ("ß", "ﬁ", "İ")]
    text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 80)))
    if seed % 2:
        text = text.replace("\r", "").replace("\u2028", "").replace("\x0c", "")
    lines = text.splitlines()
    st = _SearchText(text.encode("utf-8"))
    assert st.count == len(lines)
    for query in ("ss", "é", "cafe\u0301", "cafe", "e", "a", "fi", "x\nx", "—", "b ss",
                  # queries with an anchor (a run of three or more bytes without a letter)
                  "2026-04", "-04:", "k 2026", "s:0", "v1.2", ";`:", " 0 ", "a;`b"):
        q = unicodedata.normalize("NFC", query).casefold()
        want = [i for i, line in enumerate(lines, 1)
                if q in unicodedata.normalize("NFC", line).casefold()]
        assert st.matching(q) == want
    order = list(range(1, len(lines) + 1))
    rng.shuffle(order)
    for n in [*range(1, len(lines) + 1), *order]:
        assert st.line(n) == lines[n - 1]


def test_a_query_with_digits_finds_the_lines_whose_letters_fold_to_it() -> None:
    """A query's digits and punctuation are looked for first; the letters around them match
    in any case and in any character that folds to them (a Kelvin sign, a long s, an
    accented letter written in two code points), as a line-by-line fold finds them."""
    from toolkit.ledger_ops import _SearchText

    lines = ["**Title:** Pattern 00030: retry", "PATTERN 00030: again", "pattern 00031: no",
             "\u212a 2026-04 kelvin", "\u017f 2026-04 long s", "caf\u00e9 2026", "cafe\u0301 2026",
             "none 2026-05", "x; 2026` y"]
    st = _SearchText("\n".join(lines).encode("utf-8") + b"\n")
    for query, want in (("pattern 00030:", [1, 2]), ("k 2026-04", [4]), ("s 2026-04", [5]),
                        ("caf\u00e9 2026", [6, 7]), ("; 2026`", [9])):
        q = unicodedata.normalize("NFC", query).casefold()
        assert st.matching(q) == want, query


def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path: Path) -> None:
    """The cache folder's place holds a file (or is read-only): every read parses, answers
    the same and raises nothing."""
    from toolkit.sources import smith

    f = tmp_path / "patterns.md"
    f.write_text("# Patterns\n" + NEW_ENTRY, encoding="utf-8")
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    plain = smith.read_ledger_file(f, "patterns")
    for _ in range(2):
        got = smith.read_ledger_file(f, "patterns", cache=blocked)
        assert (got.entries, got.problems) == (plain.entries, plain.problems)
    assert blocked.read_text() == "not a folder"
