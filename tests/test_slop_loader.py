"""CodeSmith's loader rules (slop_ledger.rs, strict serde): the reader warns about each file
CodeSmith cannot load, the writers refuse to write into one and never produce one, and
`toolkit slop repair` applies the one safe fix where there is one and lists the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._slop_helpers import NOW, entry, serde_pretty, write_ledger
from tests.conftest import tree_digest
from toolkit import slop_ops
from toolkit.errors import DataError, UsageError
from toolkit.sources.slop import load_problems, read_slop

PREFIX = "CodeSmith will not load this file: "


def _drop(**fields: object) -> dict[str, object]:
    """entry(1) with the named fields removed (value ``...``) or replaced."""
    e = entry(1)
    for k, v in fields.items():
        if v is ...:
            e.pop(k, None)
        else:
            e[k] = v
    return e


# Each case: an entry CodeSmith's serde loader refuses, the problem text, and its fix kind.
CASES = [
    (_drop(title=...), "title is missing", None),
    (_drop(title=None), "title is null", None),
    (_drop(id=...), "id is missing", None),
    (_drop(description=5), "description is a number, not a string", None),
    (_drop(created_at=...), "created_at is missing", None),
    (_drop(updated_at=...), "updated_at is missing (fix: copy created_at)", "updated_at"),
    (_drop(updated_at=None), "updated_at is null (fix: copy created_at)", "updated_at"),
    (_drop(source_links=None), "source_links is null (it may be absent, never null)", "drop"),
    (_drop(source_links="README.md"), "source_links is a string, not a list of strings", None),
    (_drop(source_links=["a", 3]), "source_links[1] is a number, not a string", None),
    (_drop(owner=7), "owner is a number, not a string", None),
    (_drop(owner=["team"]), "owner is a list, not a string", None),
    (_drop(task_id=True), "task_id is a boolean, not a string", None),
    (_drop(cleanup_recommendation={}), "cleanup_recommendation is an object, not a string",
     None),
    (_drop(status="Open"), "status 'Open' is not CodeSmith's spelling 'open'", "enum"),
    (_drop(status="wontfix"), "status 'wontfix' is not CodeSmith's spelling 'wont_fix'", "enum"),
    (_drop(status="blocked"), ("status 'blocked' is not one of open, in_progress, resolved, "
                              "accepted, wont_fix"), None),
    (_drop(severity=None), "severity is null", None),
    (_drop(bucket=3), "bucket is a number, not one of", None),
    (_drop(title="\ud800"), "title holds a lone surrogate (\\ud800), which has no UTF-8 form",
     None),
]


@pytest.mark.parametrize(("raw", "text", "fix"), CASES)
def test_each_loader_rule_is_a_warning_with_file_and_entry(tmp_path, raw, text, fix) -> None:
    path = tmp_path / "slop_ledger.json"
    path.write_text(json.dumps({"entries": [entry(2), raw]}, indent=2), encoding="utf-8")
    sf = read_slop(path)
    assert len(sf.entries) == 2  # read tolerantly all the same
    [problem] = sf.load_problems
    assert str(problem).startswith(f"entry 2 ({str(raw.get('id', ''))[:8]}): "
                                   if "id" in raw else "entry 2: ")
    assert text in problem.text and problem.fix == fix
    [warning] = [p for p in sf.problems if p.message.startswith(PREFIX)]
    # the line of the entry's "id" (unknown when an entry has none)
    assert warning.path == str(path) and warning.line == (15 if "id" in raw else None)
    assert warning.message == PREFIX + str(problem)


def test_what_codesmith_loads_has_no_problems() -> None:
    # optional strings may be null or absent, source_links absent, unknown keys anywhere
    e = _drop(owner=None, task_id=None, thread_id=None, cleanup_recommendation=None)
    assert load_problems({"entries": [e, entry(2, source_links=[]), {**entry(3), "x": None}],
                          "version": 2}) == []
    assert load_problems({"entries": []}) == []


@pytest.mark.parametrize(("data", "empty", "bom", "text", "fix"), [
    ([], False, False, 'top level is a bare array, not {"entries": [...]}', "wrap"),
    ({}, False, False, '"entries" is missing', "entries"),
    ({"entries": None}, False, False, '"entries" is null', "entries"),
    (None, True, False, 'the file is empty; CodeSmith needs {"entries": []}', "empty"),
    ({"entries": []}, False, True, "the file starts with a UTF-8 byte order mark", "bom"),
    ({"entries": ["x"]}, False, False, "entry 1: is a string, not an object", None),
    ({"entries": [None]}, False, False, "entry 1: is null, not an object", None),
    ({"entries": 3}, False, False, '"entries" is a number, not a list', None),
    ("x", False, False, "top level is a string, not an object", None),
])
def test_file_level_rules(data, empty, bom, text, fix) -> None:
    [problem] = load_problems(data, empty=empty, bom=bom)
    assert str(problem) == text and problem.fix == fix


def test_every_warning_is_shown_by_the_summary(project, cli_run) -> None:
    raw = serde_pretty({"entries": [_drop(title=None, source_links=None), _drop(owner=7)]})
    project.slop.write_bytes(b"\xef\xbb\xbf" + raw.encode())
    result = cli_run("slop")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"Warning: {project.slop}:1: {PREFIX}the file starts with a UTF-8 byte order mark",
        f"Warning: {project.slop}:4: {PREFIX}entry 1 (00000001): title is null",
        (f"Warning: {project.slop}:4: {PREFIX}entry 1 (00000001): source_links is null (it may "
        "be absent, never null)"),
        (f"Warning: {project.slop}:16: {PREFIX}entry 2 (00000001): owner is a number, not a "
        "string")]


def test_writers_refuse_an_unloadable_file_naming_every_problem(project, cli_run) -> None:
    write_ledger(project.slop, [_drop(title=None), entry(2, owner=7, source_links=None)])
    digest = tree_digest(project.home)
    for args in (("append", "--bucket", "tool_gaps", "--severity", "low", "--confidence", "low",
                  "--title", "t", "--description", "d"),
                 ("update", "00000002", "--status", "resolved"),
                 ("update", "00000002", "--status", "resolved", "--dry-run")):
        result = cli_run("slop", *args)
        assert result.exit_code == 65
        assert result.stderr.splitlines()[-1] == (
            f"Error: {project.slop}: CodeSmith will not load this file (3 problem(s)): entry 1 "
            "(00000001): title is null; entry 2 (00000002): owner is a number, not a string; "
            "entry 2 (00000002): source_links is null (it may be absent, never null). Run "
            "`toolkit slop repair` to see the safe fixes; nothing was written")
    assert tree_digest(project.home) == digest


def test_lone_surrogate_in_from_json_is_one_line_and_writes_nothing(project, cli_run,
                                                                      tmp_path) -> None:
    payload = tmp_path / "in.json"
    payload.write_text('{"entries": [{"bucket": "tool_gaps", "severity": "low", "confidence": '
                       '"low", "title": "ok", "description": "bad \\ud800 here"}]}',
                       encoding="utf-8")
    digest = tree_digest(project.home)
    result = cli_run("slop", "append", "--from-json", str(payload))
    assert result.exit_code == 65
    assert result.stderr.splitlines() == [
        (f"Error: {payload}: entry 1: description holds a lone surrogate (\\ud800), which is not "
        "text and cannot be written as UTF-8")]
    result = cli_run("slop", "append", "--from-json", "-", input=payload.read_text())
    assert result.exit_code == 65 and len(result.stderr.splitlines()) == 1
    payload.write_bytes(b'{"entries": [{"title": "\xff"}]}')
    result = cli_run("slop", "append", "--from-json", str(payload))
    assert result.exit_code == 65
    assert result.stderr.splitlines() == [
        f"Error: {payload}: invalid UTF-8 at byte offset 24. Give the entries as UTF-8 JSON"]
    assert tree_digest(project.home) == digest


def test_lone_surrogates_in_options_are_refused(project, cli_run) -> None:
    # undecodable bytes in argv reach Python as lone surrogates (surrogateescape)
    digest = tree_digest(project.home)
    result = cli_run("slop", "append", "--bucket", "tool_gaps", "--severity", "low",
                     "--confidence", "low", "--title", "caf\udce9", "--description", "d")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        ("Error: the title holds a lone surrogate (\\udce9), which is not text; give valid UTF-8 "
        "text")]
    result = cli_run("slop", "update", "4b7e", "--status", "resolved", "--cleanup", "x\udcff")
    assert result.exit_code == 2 and "the cleanup recommendation holds" in result.stderr
    with pytest.raises(UsageError, match="a source link holds a lone surrogate"):
        slop_ops.append(project.slop, [slop_ops.NewEntry("tool_gaps", "low", "low", "T", "D",
                                                         source_links=("\ud800",))], now=NOW)
    assert tree_digest(project.home) == digest


def test_lone_surrogate_in_any_cli_writer_is_one_line(project, cli_run, tmp_path) -> None:
    db = tmp_path / "audit.db"
    result = cli_run("--audit-db", str(db), "audit", "log-action", "--tier", "0",
                     "--category", "x", "desc \udcff")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        ("Error: the input holds a lone surrogate (\\udcff), which is not text and cannot be "
        "written as UTF-8. Give valid UTF-8 text")]


def test_unknown_field_with_a_lone_surrogate_survives_an_update(tmp_path) -> None:
    # CodeSmith ignores unknown keys, so the file loads; the rewrite keeps the escape as written
    path = tmp_path / "slop_ledger.json"
    path.write_text(serde_pretty({"entries": [entry(1)]}).replace(
        '"status": "open"', '"status": "open",\n      "note": "\\ud800"'), encoding="utf-8")
    slop_ops.update(path, "00000001", "resolved", now=NOW)
    text = path.read_text(encoding="utf-8")
    assert '"note": "\\ud800"' in text and json.loads(text)["entries"][0]["status"] == "resolved"


# --------------------------------------------------------------------------- repair


def _messy(path: Path) -> bytes:
    raw = b"\xef\xbb\xbf" + serde_pretty([
        _drop(severity="High", status="wontfix", source_links=None, updated_at=...),
        entry(2, title=None, owner=7)]).encode()
    path.write_bytes(raw)
    return raw


def test_repair_shows_a_diff_and_writes_nothing_by_default(project, cli_run) -> None:
    raw = _messy(project.slop)
    digest = tree_digest(project.home)
    result = cli_run("slop", "repair")
    assert result.exit_code == 65  # the file on disk still cannot be loaded
    out = result.stdout
    assert out.startswith(f"--- {project.slop}\n+++ {project.slop} (new)\n")
    assert '+      "severity": "high",' in out and '+      "status": "wont_fix",' in out
    assert out.endswith(
        "Would fix 6 problem(s):\n"
        "  - the file starts with a UTF-8 byte order mark\n"
        '  - top level is a bare array, not {"entries": [...]}\n'
        "  - entry 1 (00000001): updated_at is missing (fix: copy created_at)\n"
        "  - entry 1 (00000001): severity 'High' is not CodeSmith's spelling 'high'\n"
        "  - entry 1 (00000001): status 'wontfix' is not CodeSmith's spelling 'wont_fix'\n"
        "  - entry 1 (00000001): source_links is null (it may be absent, never null)\n"
        "Cannot fix 2 problem(s); edit the file by hand:\n"
        "  - entry 2 (00000002): title is null\n"
        "  - entry 2 (00000002): owner is a number, not a string\n"
        "Dry run: nothing written. Run again with --yes to write (the current file is backed "
        "up first).\n")
    assert tree_digest(project.home) == digest and project.slop.read_bytes() == raw


def test_repair_yes_writes_with_a_backup_and_lists_what_is_left(project, cli_run) -> None:
    raw = _messy(project.slop)
    result = cli_run("slop", "repair", "--yes", "--json")
    assert result.exit_code == 65
    out = json.loads(result.stdout)
    assert out["written"] is True and Path(out["backup"]).read_bytes() == raw
    assert out["cannot_fix"] == ["entry 2 (00000002): title is null",
                                 "entry 2 (00000002): owner is a number, not a string"]
    text = project.slop.read_text(encoding="utf-8")
    data = json.loads(text)
    assert not text.startswith("\ufeff") and list(data) == ["entries"]
    first = data["entries"][0]
    assert first == {**entry(1), "severity": "high", "status": "wont_fix"}
    assert list(first) == list(entry(1))  # updated_at went where CodeSmith puts it
    assert [str(p) for p in load_problems(data)] == out["cannot_fix"]
    # hand-fix the rest: then CodeSmith loads it, and the writers work again
    data["entries"][1].update(title="T", owner="me")
    project.slop.write_text(serde_pretty(data), encoding="utf-8")
    result = cli_run("slop", "repair")
    assert result.exit_code == 0
    assert result.stdout == f"CodeSmith loads {project.slop}: nothing to repair.\n"
    assert cli_run("slop", "update", "00000002", "--status", "resolved").exit_code == 0


def test_repair_changes_only_the_bytes_of_fixed_entries(tmp_path) -> None:
    path = tmp_path / "slop_ledger.json"
    text = serde_pretty({"entries": [entry(1), entry(2, source_links=None), entry(3)]}) + "\n"
    path.write_text(text, encoding="utf-8")
    result = slop_ops.repair(path, dry_run=False)
    after = path.read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if line not in after.splitlines()] == [
        '      "source_links": null,']
    assert after == text.replace('      "source_links": null,\n', "")
    assert result.unfixable == []


@pytest.mark.parametrize(("content", "expected"), [
    ("", '{\n  "entries": []\n}'),
    ("  \n", '{\n  "entries": []\n}\n'),
    ('{"entries": null, "v": 1}', '{"entries":[],"v":1}'),
    ("{}", '{"entries":[]}'),
])
def test_repair_of_an_empty_or_entryless_file(tmp_path, content, expected) -> None:
    path = tmp_path / "slop_ledger.json"
    path.write_text(content, encoding="utf-8")
    slop_ops.repair(path, dry_run=False)
    assert path.read_text(encoding="utf-8") == expected
    assert read_slop(path).load_problems == []


def test_repair_of_a_missing_or_clean_file_writes_nothing(tmp_path) -> None:
    missing = tmp_path / "none.json"
    assert slop_ops.repair(missing, dry_run=False).written is False and not missing.exists()
    clean = write_ledger(tmp_path / "ok.json", [entry(1)])
    before = clean.read_bytes()
    result = slop_ops.repair(clean, dry_run=False)
    assert result.written is False and clean.read_bytes() == before
    assert not (tmp_path / ".backups").exists()


def test_data_error_is_raised_for_the_api_too(tmp_path) -> None:
    path = write_ledger(tmp_path / "s.json", [_drop(created_at=None)])
    with pytest.raises(DataError, match=r"entry 1 \(00000001\): created_at is null"):
        slop_ops.append(path, [slop_ops.NewEntry("tool_gaps", "low", "low", "T", "D")], now=NOW)


def test_lone_surrogates_in_the_file_are_shown_as_replacement_chars(project, cli_run,
                                                                     tmp_path) -> None:
    # the reader hands on text: --json output and the store get U+FFFD, the file is unchanged
    raw = serde_pretty({"entries": [entry(1, title="bad \ud800 title", note="x\udc00")]})
    project.slop.write_text(json.dumps(json.loads(raw), indent=2), encoding="utf-8")
    before = project.slop.read_bytes()
    result = cli_run("slop", "query", "--json")
    assert result.exit_code == 0
    [row] = json.loads(result.stdout)["entries"]
    assert row["title"] == "bad \ufffd title" and row["extra"] == {"note": "x\ufffd"}
    db = tmp_path / "store.duckdb"
    assert cli_run("--db", str(db), "load").exit_code == 0
    out = cli_run("--db", str(db), "query", "SELECT title FROM slop_entries", "--format", "json")
    assert json.loads(out.stdout) == [{"title": "bad \ufffd title"}]
    assert project.slop.read_bytes() == before


def test_reading_leaves_the_cycle_collector_on_and_garbage_collectable(tmp_path) -> None:
    """The reader pauses the cycle collector while it builds its records and, leaving,
    promotes what exists instead of walking it: the collector is on again, and garbage
    cycles made before the read (or inside it) are still freed by the next full pass."""
    import gc
    import weakref

    from toolkit.sources.slop import read_slop

    class Node:
        pass

    def cycle() -> weakref.ref[Node]:
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        return weakref.ref(a)

    path = tmp_path / "slop_ledger.json"
    path.write_text('{"entries": []}', encoding="utf-8")
    before = cycle()
    assert gc.isenabled()
    assert read_slop(path).entries == []
    assert gc.isenabled()
    gc.collect()
    assert before() is None
    gc.disable()
    try:  # a caller that paused the collector finds it paused still
        read_slop(path)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_reading_a_slop_ledger_leaves_the_collector_as_the_caller_set_it(tmp_path) -> None:
    """The slop reader pauses the cycle collector while it builds its records and, on
    leaving, moves what the process holds into the collector's oldest generation (by
    freezing and unfreezing it). A process that froze what it loaded (gc.freeze, as a server
    does before it forks) kept nothing frozen after a read: the unfreeze put its objects back.
    Now a read leaves frozen what the caller froze, and the collector on or off as it was."""
    import gc

    path = tmp_path / "slop_ledger.json"
    write_ledger(path, [entry(i + 1) for i in range(5)])
    assert len(read_slop(path).entries) == 5  # nothing frozen: the reader promotes its records
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert len(read_slop(path).entries) == 5
        # still frozen: an unfreeze leaves none (a frozen object that dies meanwhile, as the
        # test runner's own may, leaves the count, so a few fewer is no fault)
        assert gc.get_freeze_count() > frozen // 2 and gc.isenabled()
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        read_slop(path)
        assert not gc.isenabled()
    finally:
        gc.enable()
