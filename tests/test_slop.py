"""`toolkit slop`: summary, query, append, update, export (FORMATS.md §2.3-2.4)."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from pathlib import Path

import pytest

from tests._slop_helpers import NOW, RFC3339, UUID4, entry, read_entries, serde_pretty, write_ledger
from tests.conftest import FORMATS, tree_digest
from toolkit import slop_ops
from toolkit.errors import DataError
from toolkit.slop_ops import NewEntry, SlopFilter

EXAMPLE_EXPORT = (FORMATS / "codesmith" / "slop_export.md").read_text(encoding="utf-8")
EPOCH_1430 = str(int(NOW.timestamp()))  # 2026-05-04 14:30 UTC


# --------------------------------------------------------------------------- export


def test_export_reproduces_codesmith_example_byte_for_byte(project) -> None:
    sf = slop_ops.load(project.slop)
    assert slop_ops.export_markdown(sf.entries, now=NOW) == EXAMPLE_EXPORT


def test_export_cli_matches_example_with_source_date_epoch(project, cli_run) -> None:
    result = cli_run("slop", "export", env={"SOURCE_DATE_EPOCH": EPOCH_1430})
    assert result.exit_code == 0
    assert result.stdout == EXAMPLE_EXPORT


def test_export_redacts_secrets_and_home_paths(project, cli_run) -> None:
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
    write_ledger(project.slop, [entry(1, description=(
        f"The agent pasted {key} and read {project.home}/.codesmith/secrets/api.toml; "
        "model deepseek-v4-pro stays readable."), cleanup_recommendation="password: hunter22",
        source_links=["https://ci:t0ken99@ci.example.com/job/1"])])
    result = cli_run("slop", "export", env={"SOURCE_DATE_EPOCH": EPOCH_1430})
    assert result.exit_code == 0
    out = result.stdout
    assert key not in out and "hunter22" not in out and "t0ken99" not in out
    assert "pasted [REDACTED] and read ~/.codesmith/secrets/api.toml" in out
    assert "deepseek-v4-pro stays readable" in out
    assert "**Cleanup**: password: [REDACTED]" in out
    assert "| https://[REDACTED]@ci.example.com/job/1 |" in out


def test_export_cuts_the_redacted_title_so_no_key_prefix_survives_the_cut() -> None:
    """The summary table cuts a title to 60 characters. Cut first and redacted after, a key
    that straddles the cut is too short for its detector and its first characters reach the
    export (``ghp_Zq8Wm3Rt6Y…``); the title is redacted first, then cut."""
    from toolkit.sources.slop import parse_slop

    token = "ghp_" + "Zq8Wm3Rt6Yp1Lk4Jh7Gf2Ds5Aa9Xc0Vb3Nm6"
    key_id = "AKIA" + "Q7WX3MPL9RT2VZ5K"
    titles = [f"Leaked the deploy key for staging in config: {token}",
              f"Leaked the deploy key for staging in the app: {key_id}"]
    sf = parse_slop(serde_pretty({"entries": [entry(i + 1, title=t) for i, t in
                                              enumerate(titles)]}), Path("x.json"))
    md = slop_ops.export_markdown(sf.entries, now=NOW)
    for secret in (token, key_id):
        assert secret[:8] not in md and secret[4:12] not in md
    assert "| Leaked the deploy key for staging in config: [REDACTED] |" in md
    assert "### 00000001 — Leaked the deploy key for staging in config: [REDACTED]\n" in md
    # unredacted on request, cut as CodeSmith cuts it
    raw = slop_ops.export_markdown(sf.entries, now=NOW, redact_output=False)
    assert f"| {titles[0][:59]}… |" in raw


def test_export_layout_details() -> None:
    long_title = "A" * 59 + "BCD|E"
    entries = slop_ops.load(Path("/nonexistent")).entries  # empty
    assert slop_ops.export_markdown(entries, now=NOW, title="Handoff") == (
        "# Handoff\n\n_Generated at 2026-05-04 14:30 UTC — 0 entries_\n\n_(no entries)_\n")
    from toolkit.sources.slop import parse_slop

    sf = parse_slop(serde_pretty({"entries": [
        entry(2, bucket="tool_gaps", title=long_title, severity="critical", status="in_progress"),
        entry(1, bucket="accepted_debt", title="pipe | in title", owner="team-api")]}),
        Path("x.json"))
    md = slop_ops.export_markdown(sf.entries, now=NOW)
    # buckets alphabetical, titles cut to 60 characters with an ellipsis, pipes escaped
    assert md.index("## accepted_debt") < md.index("## tool_gaps")
    assert "| 00000002 | Critical | High | InProgress | " + "A" * 59 + "… | - |" in md
    assert "| 00000001 | Medium | High | Open | pipe \\| in title | - |" in md
    assert "### 00000002 — " + long_title + "\n" in md
    assert "- **Owner**: team-api\n" in md


def test_export_filters_and_output_file(project, cli_run, tmp_path) -> None:
    out = tmp_path / "handoff.md"
    result = cli_run("slop", "export", "--title", "Open debt", "--status", "open",
                     "-o", str(out), env={"SOURCE_DATE_EPOCH": EPOCH_1430})
    assert result.exit_code == 0
    assert result.stdout == f"Wrote 1 entries to {out}\n"
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Open debt\n\n_Generated at 2026-05-04 14:30 UTC — 1 entries_\n")
    assert "4b7e2c91" in text and "e0a95d1f" not in text


# --------------------------------------------------------------------------- summary


def test_summary_text(project, cli_run) -> None:
    result = cli_run("slop")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"File: {project.slop}"
    assert lines[1:5] == ["Slop Ledger: 3 total | 2 open | 0 resolved | 1 accepted",
                          "  retained_compatibility: 1", "  stale_tests: 1", "  tool_gaps: 1"]
    assert re.search(r"^stale_tests\s+0\s+0\s+0\s+0\s+1\s+1$", result.stdout, re.M)
    assert re.search(r"^total\s+1\s+1\s+0\s+0\s+1\s+3$", result.stdout, re.M)


def test_summary_json_and_missing_file(project, cli_run) -> None:
    data = json.loads(cli_run("slop", "--json").stdout)
    assert (data["total"], data["open"], data["resolved"], data["accepted"]) == (3, 2, 0, 1)
    assert data["by_bucket_status"]["tool_gaps"] == {"in_progress": 1}
    project.slop.unlink()
    result = cli_run("slop")
    assert result.exit_code == 0
    assert "(not found: an empty ledger)" in result.stdout
    assert "Slop Ledger: 0 total | 0 open | 0 resolved | 0 accepted" in result.stdout
    assert not project.slop.exists()


# --------------------------------------------------------------------------- query


@pytest.fixture
def many(project) -> Path:
    """60 entries with varied fields, in a known order."""
    buckets = ["stale_docs", "tool_gaps", "naming_drift"]
    entries = []
    for n in range(1, 61):
        entries.append(entry(
            n, bucket=buckets[n % 3], severity="high" if n % 2 else "low",
            confidence="certain" if n % 5 == 0 else "medium",
            status="resolved" if n % 4 == 0 else "open",
            owner="Team-API" if n % 6 == 0 else None,
            title=f"Entry number {n}" + (" LEGACY shim" if n % 7 == 0 else ""),
            description="uses the old Legacy client" if n == 10 else f"Description {n}.",
            created_at=f"2026-04-{(n % 28) + 1:02d}T08:00:00+00:00"))
    return write_ledger(project.slop, [{k: v for k, v in e.items() if v is not None}
                                       for e in entries])


def _ids(result) -> list[int]:
    return [int(r["id"][:8], 16) for r in json.loads(result.stdout)["entries"]]


def test_query_default_limit_is_50_in_file_order(many, cli_run) -> None:
    result = cli_run("slop", "query", "--json")
    data = json.loads(result.stdout)
    assert (data["total"], data["matched"], data["shown"]) == (60, 60, 50)
    assert _ids(result) == list(range(1, 51))
    table = cli_run("slop", "query")
    assert "Showing 50 of 60 matching entries (--limit 0 shows all)." in table.stderr
    assert len(_ids(cli_run("slop", "query", "--json", "--limit", "0"))) == 60
    assert _ids(cli_run("slop", "query", "--json", "--limit", "3")) == [1, 2, 3]


def test_query_filters_are_anded(many, cli_run) -> None:
    got = _ids(cli_run("slop", "query", "--json", "--limit", "0", "--bucket", "tool_gaps",
                       "--severity", "high", "--status", "open"))
    assert got == [n for n in range(1, 61) if n % 3 == 1 and n % 2 and n % 4]


def test_query_search_is_case_insensitive_on_title_or_description(many, cli_run) -> None:
    got = _ids(cli_run("slop", "query", "--json", "--search", "legacy"))
    assert got == sorted({7, 14, 21, 28, 35, 42, 49, 56, 10})


def test_query_owner_confidence_and_age(many, cli_run) -> None:
    assert _ids(cli_run("slop", "query", "--json", "--owner", "team-api")) == \
        [6, 12, 18, 24, 30, 36, 42, 48, 54, 60]
    assert _ids(cli_run("slop", "query", "--json", "--confidence", "Certain")) == \
        list(range(5, 61, 5))
    # created 2026-04-(n%28+1); today 2026-04-30: older than 25 days = created before 04-05
    got = _ids(cli_run("--today", "2026-04-30", "slop", "query", "--json", "--limit", "0",
                       "--older-than", "25"))
    assert got == [n for n in range(1, 61) if (n % 28) + 1 < 5]


def test_query_lenient_enum_input_like_codesmith(many, cli_run) -> None:
    done = _ids(cli_run("slop", "query", "--json", "--status", " Done "))
    assert done == list(range(4, 61, 4))
    assert _ids(cli_run("slop", "query", "--json", "--bucket", "ToolGaps", "--limit", "2")) \
        == [1, 4]


def test_query_unknown_enum_is_a_usage_error(many, cli_run) -> None:
    result = cli_run("slop", "query", "--status", "closed")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: unknown status 'closed'; use one of open, in_progress, resolved, accepted, "
        "wont_fix")


def test_query_table_list_and_empty(project, cli_run) -> None:
    table = cli_run("--today", "2026-05-04", "slop", "query")
    assert table.exit_code == 0
    assert re.search(r"^4b7e2c91\s+retained_compatibility\s+medium\s+high\s+open\s+auto\s+0\s+"
                     r"Legacy token header", table.stdout, re.M)
    listing = cli_run("slop", "query", "--format", "list", "--status", "inprogress")
    assert listing.stdout == (
        "Found 1 matching slop ledger entries:\n\n"
        "- [9c1f4e07] **tool_gaps** (High | Certain | InProgress) — No linter rule catches "
        "unwrap() in request handlers\n"
        "  Three handlers panic on malformed JSON; clippy config does not deny unwrap_used in "
        "crates/api.\n")
    assert cli_run("slop", "query", "--search", "nothing-like-this").stdout == \
        "No matching slop ledger entries.\n"
    write_ledger(project.slop, [])
    assert cli_run("slop", "query").stdout == "Slop ledger is empty.\n"


def test_query_list_shows_the_first_line_as_rusts_lines_cuts_it(project, cli_run) -> None:
    """CodeSmith's listing prints ``description.lines().next()``: Rust's ``lines()`` ends a
    line only at ``\\n`` (a ``\\r`` just before it is dropped), so a form feed, a bare
    ``\\r``, U+0085 or U+2028 stay in the first line (shown by ``visible`` as ``<U+XXXX>``)
    instead of cutting it as Python's ``splitlines()`` does."""
    write_ledger(project.slop, [
        entry(1, description="first\u2028second"), entry(2, description="a\rb\nc"),
        entry(3, description="x\x0cy\x85z"), entry(4, description="crlf\r\nnext"),
        entry(5, description="\nafter a blank first line"), entry(6, description="")])
    listing = cli_run("slop", "query", "--format", "list")
    assert listing.exit_code == 0
    assert [line for line in listing.stdout.splitlines() if line.startswith("  ")] == [
        "  first<U+2028>second", "  a<U+000D>b", "  x<U+000C>y<U+0085>z", "  crlf", "  "]


def test_an_empty_id_is_shown_empty_as_codesmith_shows_it(project, cli_run) -> None:
    """An entry whose id is "" loads in CodeSmith (serde only needs a string), and its
    listing and export show the empty short id (``- [] **…``, ``|  | …``). The toolkit showed
    a made-up ``missing-id-0`` there; that stand-in is for an id that is absent or not text."""
    write_ledger(project.slop, [entry(1, id="", title="No id here")])
    listing = cli_run("slop", "query", "--format", "list")
    assert listing.stdout.splitlines()[2] == (
        "- [] **stale_docs** (Medium | High | Open) — No id here")
    export = cli_run("slop", "export", env={"SOURCE_DATE_EPOCH": EPOCH_1430}).stdout
    assert "|  | Medium | High | Open | No id here | - |" in export
    assert "###  — No id here" in export
    assert "missing-id" not in listing.stdout + export


def test_query_library_matches_cli_semantics() -> None:
    from toolkit.sources.slop import parse_slop

    sf = parse_slop(serde_pretty({"entries": [entry(1), entry(2, title="Other")]}), Path("x"))
    res = slop_ops.query(sf.entries, SlopFilter(search="OTHER"))
    assert [e.id[:8] for e in res.entries] == ["00000002"]
    assert slop_ops.query(sf.entries, SlopFilter(limit=None)).matched == 2


# --------------------------------------------------------------------------- append


def test_append_cli_adds_open_entry_with_uuid_and_rfc3339(project, cli_run) -> None:
    before = project.slop.read_text(encoding="utf-8")
    result = cli_run("slop", "append", "--bucket", " Stale_Docs ", "--severity", "HIGH",
                     "--confidence", "certain", "--title", "README mentions v1",
                     "--description", "The README still shows the v1 flags.",
                     "--owner", "docs-team", "--source", "README.md:12", "--source", "docs/x.md")
    assert result.exit_code == 0, result.output
    new = read_entries(project.slop)[-1]
    assert re.fullmatch(r"Appended 1 slop ledger entry \(4 total\): [0-9a-f]{8}\n"
                        r"Backup: .*/\.backups/\d{8}T\d{12}Z/slop_ledger\.json\n", result.stdout)
    assert result.stdout.split(": ")[1][:8] == new["id"][:8]
    assert re.fullmatch(UUID4, new["id"]) and uuid.UUID(new["id"]).version == 4
    assert list(new) == ["id", "bucket", "severity", "confidence", "owner", "source_links",
                         "title", "description", "status", "created_at", "updated_at"]
    assert (new["bucket"], new["severity"], new["status"]) == ("stale_docs", "high", "open")
    assert new["source_links"] == ["README.md:12", "docs/x.md"]
    assert re.fullmatch(RFC3339, new["created_at"]) and new["created_at"] == new["updated_at"]
    after = project.slop.read_text(encoding="utf-8")
    # only bytes were added: everything up to the last old entry is unchanged, as is the end
    cut = before.rindex("}", 0, before.rindex("]"))
    assert after.startswith(before[:cut + 1]) and after.endswith(before[cut + 1:])


def test_append_library_exact_output() -> None:
    assert slop_ops.rfc3339(NOW) == "2026-05-04T14:30:00+00:00"
    assert slop_ops.rfc3339(NOW.replace(microsecond=482000)) == "2026-05-04T14:30:00.482+00:00"
    assert slop_ops.rfc3339(NOW.replace(microsecond=482913)) == \
        "2026-05-04T14:30:00.482913+00:00"
    assert re.fullmatch(RFC3339, slop_ops.rfc3339())


def test_append_to_missing_file_writes_codesmith_format(tmp_path) -> None:
    path = tmp_path / "state" / "slop_ledger" / "slop_ledger.json"
    result = slop_ops.append(path, [NewEntry("tool_gaps", "low", "low", "T", "D")], now=NOW,
                             new_id=lambda: "11111111-2222-4333-8444-555555555555")
    assert result.total == 1 and result.backup is None
    assert path.read_text(encoding="utf-8") == (
        '{\n  "entries": [\n    {\n      "id": "11111111-2222-4333-8444-555555555555",\n'
        '      "bucket": "tool_gaps",\n      "severity": "low",\n      "confidence": "low",\n'
        '      "title": "T",\n      "description": "D",\n      "status": "open",\n'
        '      "created_at": "2026-05-04T14:30:00+00:00",\n'
        '      "updated_at": "2026-05-04T14:30:00+00:00"\n    }\n  ]\n}')
    assert [p.name for p in path.parent.iterdir()] == ["slop_ledger.json"]


def test_a_given_time_names_the_backups_as_it_stamps_the_entries(tmp_path) -> None:
    """``now=`` is the write's time: the backup folder is named by it (as the ledger editor's
    are by its ``now``), not by the machine's clock; a second write at that same time gets a
    folder of its own."""
    path = write_ledger(tmp_path / "slop_ledger.json", [entry(1)])
    first = slop_ops.append(path, [NewEntry("tool_gaps", "low", "low", "T", "D")], now=NOW)
    entry_id = first.ids[0]
    tokyo = dt.timezone(dt.timedelta(hours=9))
    second = slop_ops.update(path, entry_id, "resolved",
                             now=dt.datetime(2026, 5, 4, 23, 30, tzinfo=tokyo))
    again = slop_ops.append(path, [NewEntry("tool_gaps", "low", "low", "U", "E")], now=NOW)
    assert first.backup is not None and second.backup is not None and again.backup is not None
    assert first.backup.parent.name == "20260504T143000000000Z"
    assert second.backup.parent.name == "20260504T143000000000Z-2"  # 23:30 at +09:00 in UTC
    assert again.backup.parent.name == "20260504T143000000000Z-3"
    assert {b.parent.parent for b in (first.backup, second.backup, again.backup)} == \
        {tmp_path / ".backups"}


def test_append_into_empty_array_and_bare_array(tmp_path) -> None:
    empty = write_ledger(tmp_path / "a.json", [], trailing_newline=True)
    slop_ops.append(empty, [NewEntry("tool_gaps", "low", "low", "T", "D")], now=NOW)
    text = empty.read_text(encoding="utf-8")
    assert text.startswith('{\n  "entries": [\n    {\n      "id": ') and text.endswith("]\n}\n")
    bare = write_ledger(tmp_path / "b.json", [entry(1)], bare=True)
    before = bare.read_bytes()
    with pytest.raises(DataError, match="top level is a bare array"):
        slop_ops.append(bare, [NewEntry("tool_gaps", "low", "low", "T", "D")], now=NOW)
    assert bare.read_bytes() == before


def test_append_from_json_codesmith_tool_input(project, cli_run, tmp_path) -> None:
    payload = tmp_path / "in.json"
    payload.write_text(json.dumps({"entries": [
        {"bucket": "naming_drift", "severity": "info", "confidence": "low", "title": "A",
         "description": "a"},
        {"bucket": "dead", "severity": "info", "confidence": "low", "title": "B",
         "description": "b"}]}), encoding="utf-8")
    digest = tree_digest(project.home)
    result = cli_run("slop", "append", "--from-json", str(payload))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].startswith("Error: unknown bucket 'dead'; ")
    assert tree_digest(project.home) == digest  # nothing written when one entry is bad
    payload.write_text(payload.read_text().replace('"dead"', '"suspected_dead_code"'))
    result = cli_run("slop", "append", "--from-json", "-", input=payload.read_text())
    assert result.exit_code == 0
    assert re.match(r"Appended 2 slop ledger entries \(5 total\): [0-9a-f]{8}, [0-9a-f]{8}\n",
                    result.stdout)
    # each entry its own time, as CodeSmith's SlopEntry::new gives each (later ones later)
    a, b = json.loads(project.slop.read_text(encoding="utf-8"))["entries"][-2:]
    assert a["created_at"] < b["created_at"] and b["created_at"] == b["updated_at"]


def test_append_usage_errors(project, cli_run) -> None:
    result = cli_run("slop", "append", "--bucket", "stale_docs", "--title", "x")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: missing --severity, --confidence, --description (or use --from-json FILE)")
    result = cli_run("slop", "append", "--bucket", "stale_docs", "--severity", "low",
                     "--confidence", "low", "--title", "  ", "--description", "d")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == \
        "Error: the title is empty; give a one-line title"


def test_append_dry_run_changes_nothing(project, cli_run) -> None:
    digest = tree_digest(project.home)
    result = cli_run("slop", "append", "--dry-run", "--bucket", "stale_docs", "--severity",
                     "low", "--confidence", "low", "--title", "Dry", "--description", "d")
    assert result.exit_code == 0
    assert '+      "title": "Dry",' in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith(
        "Dry run: Appended 1 slop ledger entry (4 total): ")
    assert tree_digest(project.home) == digest


# --------------------------------------------------------------------------- update


def test_update_by_prefix_changes_only_that_entry(project, cli_run) -> None:
    before = project.slop.read_text(encoding="utf-8")
    result = cli_run("slop", "update", "9c1f", "--status", "done", "--cleanup", "Denied unwrap.")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == ("Updated slop ledger entry 9c1f4e07 (No linter rule "
                                             "catches unwrap() in request handlers) → Resolved")
    after = project.slop.read_text(encoding="utf-8")
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=False)
               if a != b]
    assert len(after.splitlines()) == len(before.splitlines()) + 1  # cleanup line added
    e = read_entries(project.slop)[2]
    keys = list(e)
    assert keys[keys.index("status"):keys.index("status") + 3] == \
        ["status", "cleanup_recommendation", "created_at"]
    assert (e["status"], e["cleanup_recommendation"]) == ("resolved", "Denied unwrap.")
    assert e["updated_at"] != "2026-05-02T16:01:37.250+00:00"
    assert re.fullmatch(RFC3339, e["updated_at"])
    assert read_entries(project.slop)[:2] == json.loads(before)["entries"][:2]
    assert after[:before.index('"id": "9c1f')] == before[:before.index('"id": "9c1f')]
    assert changed  # the status line


def test_update_keeps_cleanup_when_not_given_and_backs_up(project, cli_run) -> None:
    original = project.slop.read_bytes()
    result = cli_run("slop", "update", "e0a95d1f", "--status", "open")
    assert result.exit_code == 0
    e = read_entries(project.slop)[1]
    assert e["cleanup_recommendation"] == \
        "Fixture kept on purpose to prove unknown keys are ignored."
    backup = Path(result.stdout.splitlines()[1].removeprefix("Backup: "))
    assert backup.parent.parent == project.slop.parent / ".backups"
    assert backup.read_bytes() == original


def test_update_noop_writes_nothing(project, cli_run) -> None:
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "4b7e", "--status", "open")
    assert result.exit_code == 0
    assert result.stdout == ("Entry 4b7e2c91 (Legacy token header still accepted alongside "
                             "bearer auth) is already open; nothing written.\n")
    assert tree_digest(project.home) == digest


@pytest.mark.parametrize("status", ["In Progress", "in-progress", "won't fix", "closed"])
def test_update_refuses_a_status_codesmith_refuses(project, cli_run, status) -> None:
    """slop_ledger_update reads a status trimmed and lowercased, with the aliases inprogress,
    done and wontfix, and refuses any other (writing nothing): so does slop update, though
    filters and new entries read more spellings."""
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "4b7e", "--status", status)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"Error: unknown status {status!r}")
    assert tree_digest(project.home) == digest
    assert cli_run("slop", "update", "4b7e", "--status", " InProgress ").exit_code == 0


def test_update_unknown_id(project, cli_run) -> None:
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "zzz", "--status", "resolved")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"Error: {project.slop}: no slop entry has an id starting with 'zzz'. "
        "List the ids with `toolkit slop query`")
    assert tree_digest(project.home) == digest


def test_update_ambiguous_prefix_is_refused_with_the_list(project, cli_run) -> None:
    write_ledger(project.slop, [entry(0xAB01, title="First"), entry(0xAB02, title="Second"),
                                entry(0xCD03)])
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "0000ab0", "--status", "resolved")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"Error: {project.slop}: id prefix '0000ab0' matches 2 entries: "
        "0000ab01-1111-4222-8333-00000000ab01 (First); "
        "0000ab02-1111-4222-8333-00000000ab02 (Second). "
        "Give more characters of the id; nothing was changed")
    assert tree_digest(project.home) == digest
    assert cli_run("slop", "update", "0000ab02", "--status", "resolved").exit_code == 0
    assert [e["status"] for e in read_entries(project.slop)] == ["open", "resolved", "open"]


def test_update_bad_status_and_dry_run(project, cli_run) -> None:
    digest = tree_digest(project.home)
    result = cli_run("slop", "update", "4b7e", "--status", "finished")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: unknown status 'finished'; use one of open, in_progress, resolved, accepted, "
        "wont_fix")
    result = cli_run("slop", "update", "4b7e", "--status", "wontfix", "--dry-run")
    assert result.exit_code == 0
    assert '-      "status": "open",' in result.stdout
    assert '+      "status": "wont_fix",' in result.stdout
    assert result.stdout.rstrip().splitlines()[-1] == (
        "Dry run: Updated slop ledger entry 4b7e2c91 (Legacy token header still accepted "
        "alongside bearer auth) → WontFix (nothing written)")
    assert tree_digest(project.home) == digest


def test_update_json_output(project, cli_run) -> None:
    data = json.loads(cli_run("slop", "update", "4b7e", "--status", "accepted", "--json").stdout)
    assert data["written"] is True and data["status"] == "accepted"
    assert data["id"] == "4b7e2c91-0d3a-4f6e-9a51-7c2d8e13f0a4"
    assert Path(data["backup"]).exists()


def test_update_library_injected_now(project) -> None:
    later = NOW + dt.timedelta(days=1, microseconds=5)
    result = slop_ops.update(project.slop, "4b7e", "in_progress", now=later)
    assert result.written
    assert read_entries(project.slop)[0]["updated_at"] == "2026-05-05T14:30:00.000005+00:00"
