"""FAULTS.md for `toolkit slop`: A5, A6, A13, A14, A15, B5, B6, B7 on the slop ledger.

Every bad input gets one clear line and a documented exit code, and nothing is lost: the
user's files are byte-identical afterwards (``tree_digest``) unless the command was meant to
write them, and no temp file is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests._slop_helpers import NOW, entry, read_entries, serde_pretty, write_ledger
from tests.conftest import kill_at_pause, reap, tree_digest
from toolkit import slop_ops
from toolkit.errors import BusyError, DataError

REPO = Path(__file__).resolve().parents[1]


def _last_error(result) -> str:
    return result.stderr.strip().splitlines()[-1]


def _no_temps(folder: Path) -> None:
    assert [p.name for p in folder.iterdir() if ".toolkit-tmp-" in p.name] == []


# --------------------------------------------------------------------------- A13


PASCAL = [
    entry(1, bucket="StaleDocs", status="InProgress"),
    entry(2, status="Open", severity="HIGH"),
    entry(3, bucket="legacy_bucket", status="wontfix"),
    entry(4, status="blocked"),
]


def test_a13_bare_array_is_read_with_a_warning_and_writes_are_refused(project, cli_run) -> None:
    write_ledger(project.slop, [entry(1), entry(2)], bare=True)
    result = cli_run("slop")
    assert result.exit_code == 0
    assert "Slop Ledger: 2 total | 2 open | 0 resolved | 0 accepted" in result.stdout
    assert result.stderr.splitlines() == [(
        f'Warning: {project.slop}:1: CodeSmith will not load this file: top level is a bare '
        'array, not {"entries": [...]}')]
    digest = tree_digest(project.home)
    for args in (("update", "00000002", "--status", "resolved"),
                 ("append", "--bucket", "tool_gaps", "--severity", "low", "--confidence", "low",
                  "--title", "t", "--description", "d")):
        result = cli_run("slop", *args)
        assert result.exit_code == 65
        assert _last_error(result) == (
            f"Error: {project.slop}: CodeSmith will not load this file (1 problem(s)): top level "
            'is a bare array, not {"entries": [...]}. Run `toolkit slop repair` to see the safe '
            "fixes; nothing was written")
    assert tree_digest(project.home) == digest
    assert cli_run("slop", "repair", "--yes").exit_code == 0
    assert cli_run("slop", "update", "00000002", "--status", "resolved").exit_code == 0
    data = json.loads(project.slop.read_text(encoding="utf-8"))
    assert [e["status"] for e in data["entries"]] == ["open", "resolved"]


def test_a13_pascalcase_and_unknown_enums_are_read_with_warnings(project, cli_run) -> None:
    write_ledger(project.slop, PASCAL)
    result = cli_run("slop", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["total"] == 4
    assert data["by_bucket"] == {"legacy_bucket": 1, "stale_docs": 3}
    assert data["by_status"] == {"open": 1, "in_progress": 1, "wont_fix": 1, "blocked": 1}
    messages = [w["message"] for w in data["warnings"]]
    assert ("CodeSmith will not load this file: entry 1 (00000001): bucket 'StaleDocs' is not "
            "CodeSmith's spelling 'stale_docs'") in messages
    assert ("CodeSmith will not load this file: entry 4 (00000004): status 'blocked' is not one "
            "of open, in_progress, resolved, accepted, wont_fix") in messages
    assert all(w["line"] for w in data["warnings"])
    ids = [e["id"][:8] for e in json.loads(cli_run(
        "slop", "query", "--json", "--status", "in_progress").stdout)["entries"]]
    assert ids == ["00000001"]
    export = cli_run("slop", "export").stdout
    assert "## legacy_bucket" in export and "| 00000004 | Medium | High | blocked |" in export


def test_a13_rewrite_preserves_unknown_fields_in_place(project, cli_run) -> None:
    odd = entry(2, priority=3, labels=["a", "b"], nested={"x": [1, 2.5, None, True]})
    # an unknown field in the middle of the known ones, as a hand edit would leave it
    odd = {k: odd[k] for k in ["id", "bucket", "severity", "confidence", "title", "priority",
                               "description", "status", "created_at", "updated_at", "labels",
                               "nested"]}
    text = serde_pretty({"version": 2, "entries": [entry(1), odd, entry(3)],
                         "exported_by": "hand"}) + "\n"
    project.slop.write_text(text, encoding="utf-8")
    result = cli_run("slop", "update", "00000002", "--status", "accepted", "--cleanup", "ok")
    assert result.exit_code == 0
    data = json.loads(project.slop.read_text(encoding="utf-8"))
    assert list(data) == ["version", "entries", "exported_by"]
    assert (data["version"], data["exported_by"]) == (2, "hand")
    got = data["entries"][1]
    assert list(got) == ["id", "bucket", "severity", "confidence", "title", "priority",
                         "description", "status", "cleanup_recommendation", "created_at",
                         "updated_at", "labels", "nested"]
    assert got["nested"] == {"x": [1, 2.5, None, True]} and got["labels"] == ["a", "b"]
    assert data["entries"][0] == entry(1) and data["entries"][2] == entry(3)
    assert project.slop.read_text(encoding="utf-8").endswith("}\n")
    cli_run("slop", "update", "00000003", "--status", "resolved")
    assert json.loads(project.slop.read_text(encoding="utf-8"))["entries"][1] == got


def test_a13_update_in_a_file_with_odd_values_is_refused_naming_every_problem(
        project, cli_run) -> None:
    write_ledger(project.slop, PASCAL)
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "00000003", "--status", "open")
    assert result.exit_code == 65
    error = _last_error(result)
    assert error.startswith(f"Error: {project.slop}: CodeSmith will not load this file "
                            "(7 problem(s)): entry 1 (00000001): bucket 'StaleDocs' is not ")
    for problem in ("entry 1 (00000001): status 'InProgress'",
                    "entry 2 (00000002): severity 'HIGH'",
                    "entry 2 (00000002): status 'Open'",
                    "entry 3 (00000003): bucket 'legacy_bucket' is not one of",
                    "entry 3 (00000003): status 'wontfix'",
                    "entry 4 (00000004): status 'blocked' is not one of"):
        assert problem in error
    assert tree_digest(project.home) == digest


def test_only_the_changed_entry_bytes_change(project, cli_run) -> None:
    # non-default escapes and spacing in other entries survive untouched
    text = ('{\n  "entries": [\n    {"id": "00000001-x", "bucket": "stale_docs", "severity": '
            '"low", "confidence": "low", "title": "caf\\u00e9 \\/ slash", "description": "d", '
            '"status": "open", "created_at": "c", "updated_at": "u"},\n'
            + "    " + serde_pretty(entry(2)).replace("\n", "\n    ") + "\n  ]\n}\n")
    project.slop.write_text(text, encoding="utf-8")
    assert cli_run("slop", "update", "00000002", "--status", "resolved").exit_code == 0
    after = project.slop.read_text(encoding="utf-8")
    first_line = text.splitlines()[2]
    assert after.splitlines()[2] == first_line
    assert [a for a, b in zip(text.splitlines(), after.splitlines(), strict=False) if a != b] == [
        '      "status": "open",',
        '      "updated_at": "2026-05-01T10:00:00.123456789+00:00"']


def test_compact_file_stays_compact(project) -> None:
    project.slop.write_text(json.dumps({"entries": [entry(1)]}, separators=(",", ":")))
    slop_ops.append(project.slop, [slop_ops.NewEntry("tool_gaps", "low", "low", "T", "D")],
                    now=NOW, new_id=lambda: "abc")
    text = project.slop.read_text()
    assert "\n" not in text
    assert text.endswith(',{"id":"abc","bucket":"tool_gaps","severity":"low","confidence":"low",'
                         '"title":"T","description":"D","status":"open",'
                         '"created_at":"2026-05-04T14:30:00+00:00",'
                         '"updated_at":"2026-05-04T14:30:00+00:00"}]}')


# --------------------------------------------------------------------------- A5, A6


# what to do, where the shape of the whole file is wrong (it said nothing)
WHOLE_FILE_HINT = ('CodeSmith writes {"entries": [...]}: restore the file from its backup in '
                   '.backups beside it, or move it away to start an empty ledger')
BAD_JSON = [
    ('{"entries": [{"id": "a", "severity": NaN}]}', "invalid JSON: NaN is not valid JSON"),
    ('{"entries": [{"id": "a", "status": "open", "status": "resolved"}]}',
     "invalid JSON: duplicate key 'status'"),
    ('{"entries": [], "entries": []}', "invalid JSON: duplicate key 'entries'"),
    ("[" * 100_000 + "]" * 100_000, "1: JSON nested deeper than 200 levels"),
    ('{"entries": {"a": 1}}', '"entries" is not a list. ' + WHOLE_FILE_HINT),
    ('"just a string"', "top level is neither an object nor an array. " + WHOLE_FILE_HINT),
]


@pytest.mark.parametrize(("payload", "message"), BAD_JSON,
                         ids=["nan", "dup-key", "dup-entries", "deep", "entries-object", "string"])
@pytest.mark.parametrize("command", [
    ("slop",), ("slop", "query"), ("slop", "export"),
    ("slop", "update", "a", "--status", "resolved"),
    ("slop", "append", "--bucket", "tool_gaps", "--severity", "low", "--confidence", "low",
     "--title", "t", "--description", "d")], ids=["summary", "query", "export", "update",
                                                  "append"])
def test_a5_bad_json_exit_65_nothing_written(project, cli_run, payload, message, command) -> None:
    project.slop.write_text(payload, encoding="utf-8")
    digest = tree_digest(project.home)
    result = cli_run(*command)
    assert result.exit_code == 65
    assert _last_error(result).startswith(f"Error: {project.slop}")
    assert message in _last_error(result)
    assert tree_digest(project.home) == digest
    _no_temps(project.slop.parent)


def test_duplicate_keys_codesmith_ignores_do_not_refuse_the_file(project, cli_run) -> None:
    """serde refuses a known field given twice (above), but it skips unknown fields without
    looking into them: a key twice among an entry's unknown fields, or inside an unknown
    top-level or entry value, loads in CodeSmith. The toolkit read such a file as invalid
    JSON (exit 65) and would not query, append to or update it."""
    one = serde_pretty(entry(1)).replace("\n", "\n    ")
    dup_entry = one.replace('"id":', '"note": 1,\n      "note": 2,\n      "id":', 1)
    text = ('{\n  "meta": {"a": 1, "a": 2},\n  "entries": [\n    ' + dup_entry + ",\n    "
            + serde_pretty(entry(2, extra={"k": 2})).replace("\n", "\n    ")
            .replace('"k": 2', '"k": 1, "k": 2') + "\n  ]\n}")
    project.slop.write_text(text, encoding="utf-8")
    summary = cli_run("slop", "--json")
    assert summary.exit_code == 0, summary.output
    assert json.loads(summary.stdout)["total"] == 2
    assert not any("CodeSmith will not load" in w["message"]
                   for w in json.loads(summary.stdout)["warnings"])
    assert cli_run("slop", "update", "00000002", "--status", "resolved").exit_code == 0
    after = project.slop.read_text(encoding="utf-8")
    assert after.startswith('{\n  "meta": {"a": 1, "a": 2},\n  "entries": [\n    ' + dup_entry)
    assert read_entries(project.slop)[1]["status"] == "resolved"
    # a known field twice is still refused, as CodeSmith refuses it
    project.slop.write_text(text.replace('"note": 1', '"title": "x"'), encoding="utf-8")
    refused = cli_run("slop")
    assert refused.exit_code == 65
    assert "invalid JSON: duplicate key 'title'" in _last_error(refused)


def test_a6_invalid_utf8_is_reported_by_offset(project, cli_run) -> None:
    project.slop.write_bytes(b'{"entries": [{"title": "\xff"}]}')
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "x", "--status", "open")
    assert result.exit_code == 65
    assert _last_error(result) == (f"Error: {project.slop}: invalid UTF-8 at byte offset 24. "
                                   "Save the file as UTF-8 or restore it from a backup")
    assert tree_digest(project.home) == digest


def test_missing_ledger_update_is_an_error_and_creates_nothing(project, cli_run) -> None:
    project.slop.unlink()
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "4b7e", "--status", "open")
    assert result.exit_code == 1
    assert _last_error(result) == (f"Error: {project.slop}: slop ledger not found; nothing to "
                                   "update. Check --slop or CODESMITH_HOME")
    assert tree_digest(project.home) == digest


# --------------------------------------------------------------------------- A7, A14, A15


def test_crlf_is_kept(project) -> None:
    text = serde_pretty({"entries": [entry(1), entry(2)]}).replace("\n", "\r\n") + "\r\n"
    project.slop.write_bytes(text.encode())
    slop_ops.update(project.slop, "00000002", "resolved", now=NOW)
    slop_ops.append(project.slop, [slop_ops.NewEntry("tool_gaps", "low", "low", "T", "D")],
                    now=NOW)
    raw = project.slop.read_bytes()
    assert raw.startswith(b"{\r\n") and raw.endswith(b"}\r\n")
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert [e["status"] for e in json.loads(raw)["entries"]] == ["open", "resolved", "open"]


def test_bom_is_refused_by_writers_and_removed_by_repair(project) -> None:
    text = serde_pretty({"entries": [entry(1), entry(2)]}).replace("\n", "\r\n") + "\r\n"
    project.slop.write_bytes(b"\xef\xbb\xbf" + text.encode())
    with pytest.raises(DataError, match="the file starts with a UTF-8 byte order mark"):
        slop_ops.update(project.slop, "00000002", "resolved", now=NOW)
    result = slop_ops.repair(project.slop, dry_run=False)
    assert [p.fix for p in result.fixed] == ["bom"] and result.diff == ""
    assert project.slop.read_bytes() == text.encode()  # the BOM only: CRLF and all else kept
    assert result.backup is not None and result.backup.read_bytes()[:3] == b"\xef\xbb\xbf"


def test_mode_is_kept(project, cli_run) -> None:
    project.slop.chmod(0o640)
    assert cli_run("slop", "update", "4b7e", "--status", "resolved").exit_code == 0
    assert project.slop.stat().st_mode & 0o777 == 0o640


def test_symlinked_ledger_edits_the_target_and_keeps_the_link(project, cli_run, tmp_path) -> None:
    real = tmp_path / "dotfiles" / "slop_ledger.json"
    real.parent.mkdir()
    project.slop.rename(real)
    project.slop.symlink_to(real)
    assert cli_run("slop", "update", "4b7e", "--status", "resolved").exit_code == 0
    assert project.slop.is_symlink()
    assert read_entries(real)[0]["status"] == "resolved"


def test_a_backups_folder_linked_outside_is_refused_before_anything_is_written(
        project, cli_run, tmp_path) -> None:
    # the vault's .backups has this wall (FAULTS G3); the slop ledger's had none, and each
    # write put a copy of the whole ledger wherever .backups pointed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    backups = project.slop.parent / ".backups"
    if backups.exists():
        shutil.rmtree(backups)
    backups.symlink_to(elsewhere)
    before = project.slop.read_bytes()
    result = cli_run("slop", "update", "4b7e", "--status", "resolved")
    assert result.exit_code == 1
    assert _last_error(result) == (
        f"Error: {backups}: is a symlink to {elsewhere}, outside the slop ledger's folder "
        f"({project.slop.parent}); refusing to write the backup through it. Replace the link "
        "with a folder; nothing was written")
    assert project.slop.read_bytes() == before
    assert list(elsewhere.iterdir()) == []


def test_hard_linked_ledger_needs_force(project, cli_run, tmp_path) -> None:
    other = tmp_path / "other-name.json"
    os.link(project.slop, other)
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "4b7e", "--status", "resolved")
    assert result.exit_code == 1
    assert _last_error(result) == (
        f"Error: {project.slop}: has 2 hard links; editing would separate this name from the "
        "others. Use --force to edit it anyway (the other names keep the old content)")
    assert tree_digest(project.home) == digest
    assert cli_run("slop", "update", "4b7e", "--status", "resolved", "--force").exit_code == 0
    assert read_entries(project.slop)[0]["status"] == "resolved"


# --------------------------------------------------------------------------- B5, B6, B7


def _spawn(project, point: str, release: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HOME": str(project.home), "TOOLKIT_EDITOR_PAUSE": f"{point}:{release}",
           "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "toolkit", "slop", *args], cwd=project.root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_pause(proc: subprocess.Popen, point: str) -> None:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith(f"TOOLKIT_EDITOR_PAUSE {point} pid="), line


def _codesmith_append(path: Path) -> bytes:
    """What CodeSmith does: load, add an entry, serialize pretty, write_atomic (rename)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data["entries"].append(entry(0xC0DE, title="Written by CodeSmith meanwhile"))
    tmp = path.with_name(path.name + ".codesmith-tmp")
    tmp.write_text(serde_pretty(data), encoding="utf-8")
    os.replace(tmp, path)
    return path.read_bytes()


@pytest.mark.parametrize("args", [("update", "4b7e", "--status", "resolved"),
                                  ("append", "--bucket", "tool_gaps", "--severity", "low",
                                   "--confidence", "low", "--title", "t", "--description", "d")],
                         ids=["update", "append"])
def test_b6_codesmith_write_between_read_and_write_is_never_lost(project, tmp_path, args) -> None:
    release = tmp_path / "release"
    proc = _spawn(project, "after_read", release, *args)
    try:
        _wait_for_pause(proc, "after_read")
        theirs = _codesmith_append(project.slop)
        release.touch()
        _out, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1] == (
        f"Error: {project.slop}: changed on disk since it was read; nothing written. "
        "Run the command again to work on the current version")
    assert project.slop.read_bytes() == theirs
    assert not (project.slop.parent / ".backups").exists()
    _no_temps(project.slop.parent)


def test_b7_same_size_edit_after_the_temp_write_is_detected(project, tmp_path) -> None:
    release = tmp_path / "release"
    proc = _spawn(project, "after_temp_write", release, "update", "4b7e", "--status", "resolved")
    try:
        _wait_for_pause(proc, "after_temp_write")
        st = project.slop.stat()
        edited = project.slop.read_bytes().replace(b'"owner": "auto"', b'"owner": "jane"')
        with open(project.slop, "r+b") as fh:  # in place: same inode, same size
            fh.write(edited)
        os.utime(project.slop, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime tick
        release.touch()
        _out, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert proc.returncode == 1
    assert "changed on disk since it was read; nothing written" in err
    assert project.slop.read_bytes() == edited
    assert not (project.slop.parent / ".backups").exists()  # nothing written: no backup
    _no_temps(project.slop.parent)


@pytest.mark.parametrize("args", [("update", "4b7e", "--status", "resolved"),
                                  ("append", "--bucket", "tool_gaps", "--severity", "low",
                                   "--confidence", "low", "--title", "t", "--description", "d")],
                         ids=["update", "append"])
def test_ctrl_c_after_the_temp_write_leaves_the_file_and_its_folder_as_they_were(
        project, tmp_path, args) -> None:
    """Ctrl-C (SIGINT) after the temp file is written, before the rename: "Interrupted.",
    exit 130, the file and its folder (CodeSmith's) exactly as before: no temp file, and no
    backup of a write that did not happen."""
    before = tree_digest(project.slop.parent)
    proc = _spawn(project, "after_temp_write", tmp_path / "never", *args)
    try:
        _wait_for_pause(proc, "after_temp_write")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert (proc.returncode, err) == (130, "Interrupted.\n")
    assert tree_digest(project.slop.parent) == before


@pytest.mark.parametrize("point", ["after_temp_write", "after_replace"])
@pytest.mark.parametrize("args", [("update", "4b7e", "--status", "resolved"),
                                  ("append", "--bucket", "tool_gaps", "--severity", "low",
                                   "--confidence", "low", "--title", "t", "--description", "d")],
                         ids=["update", "append"])
def test_a_write_killed_leaves_the_old_or_the_new_file_whole_and_the_next_run_goes_on(
        project, cli_run, tmp_path, args, point) -> None:
    """SIGKILL (no handler runs) before or after the rename: CodeSmith's file is the old
    version or the new one, each whole and loadable, never a mix; the killed run's temp file
    is gone after the next run, whose lock and write are not held up by the dead one."""
    before = project.slop.read_bytes()
    kill_at_pause(_spawn(project, point, tmp_path / "never", *args), point)
    after = project.slop.read_bytes()
    entries = read_entries(project.slop)  # whole JSON, in CodeSmith's layout (the file's
    # own final newline kept):
    assert after.decode("utf-8") == serde_pretty(json.loads(after)) + \
        ("\n" if before.endswith(b"\n") else "")
    if point == "after_temp_write":
        assert after == before
        # the killed run's temp file is there for the next run to clear
        assert [p for p in project.slop.parent.iterdir() if ".toolkit-tmp-" in p.name]
    elif args[0] == "update":
        assert [e["status"] for e in entries if e["id"].startswith("4b7e")] == ["resolved"]
    else:
        assert len(entries) == len(json.loads(before)["entries"]) + 1
    # the next run (another change) goes through at once and leaves no temp file behind
    again = cli_run("slop", "update", "4b7e", "--status", "in_progress")
    assert again.exit_code == 0, again.output
    assert [e["status"] for e in read_entries(project.slop)
            if e["id"].startswith("4b7e")] == ["in_progress"]
    _no_temps(project.slop.parent)


def test_b5_a_second_run_waits_for_the_lock_then_exits_75(project) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('locked', flush=True)\n"
         "time.sleep(60)\n", str(project.slop.parent)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        digest = tree_digest(project.home)
        with pytest.raises(BusyError) as info:
            slop_ops.update(project.slop, "4b7e", "resolved", lock_timeout=0.2)
        assert info.value.exit_code == 75
        assert str(info.value) == (f"{project.slop.parent}: the slop ledger is locked by another "
                                   "run (waited 0.2 s). Wait for it to finish and try again")
        assert tree_digest(project.home) == digest
    finally:
        reap(holder)
    # the lock dies with its holder: the next run goes through at once
    assert slop_ops.update(project.slop, "4b7e", "resolved", lock_timeout=0.2).written


def test_dry_run_takes_no_lock_file_and_writes_nothing(project, cli_run) -> None:
    digest = tree_digest(project.home)
    listing = sorted(p.name for p in project.slop.parent.iterdir())
    assert cli_run("slop", "update", "4b7e", "--status", "resolved", "--dry-run").exit_code == 0
    assert sorted(p.name for p in project.slop.parent.iterdir()) == listing
    assert tree_digest(project.home) == digest
