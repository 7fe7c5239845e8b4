"""The foundation: config resolution, readers over the real example files, load/status/schema."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import FORMATS, make_audit_db
from toolkit import config as config_mod
from toolkit.loaders import SOURCES
from toolkit.records import Problem
from toolkit.sources.smith import parse_ledger_bytes, read_vault
from toolkit.sources.snapshots import fnv1a64_hex, parse_label, side_repo_for
from toolkit.store import FEW_PROBLEMS, Store

# --------------------------------------------------------------------------- config

def test_project_root_found_upwards_like_git(project, tmp_path):
    deep = project.root / "services" / "billing"
    deep.mkdir(parents=True)
    cfg = config_mod.resolve(cwd=deep, env={"HOME": str(project.home)})
    assert cfg.project_root == project.root
    assert cfg.vault == project.vault
    assert cfg.db_path == project.root / ".toolkit" / "ledger.duckdb"


def test_flags_beat_toolkit_yaml_beat_env(project, tmp_path):
    (project.root / "toolkit.yaml").write_text("audit_db: from-yaml.db\ntoday: '2026-05-10'\n")
    env = {"HOME": str(project.home), "NAGI_LEDGER_DB": "/env/ledger.db"}
    cfg = config_mod.resolve(cwd=project.root, env=env)
    assert cfg.audit_db == project.root / "from-yaml.db"  # relative to toolkit.yaml
    assert str(cfg.today_date()) == "2026-05-10"
    cfg = config_mod.resolve(cwd=project.root, env=env, audit_db=str(tmp_path / "flag.db"))
    assert cfg.audit_db == tmp_path / "flag.db"
    (project.root / "toolkit.yaml").unlink()
    cfg = config_mod.resolve(cwd=project.root, env=env)
    assert cfg.audit_db == Path("/env/ledger.db")


def test_nagi_ledger_db_is_read_as_nagi_ledger_reads_it(project, tmp_path):
    """nagi-ledger takes $NAGI_LEDGER_DB (and its goal files' variables) as written (a "~"
    in it is a folder named "~", as in an MCP client's env block, where no shell expands
    it): the toolkit opens the same file its server and hooks write. The toolkit's own
    settings still expand "~"."""
    env = {"HOME": str(project.home), "NAGI_LEDGER_DB": "~/ledger.db",
           "NAGI_GOAL_FILE": "~/goal.json", "NAGI_GOAL_HISTORY": "~/history.jsonl",
           "TOOLKIT_DB": "~/store.duckdb"}
    cfg = config_mod.resolve(cwd=project.root, env=env)
    assert cfg.audit_db == Path("~/ledger.db")  # relative: to the working folder, as nagi's
    assert (cfg.goal_file, cfg.goal_history) == (Path("~/goal.json"), Path("~/history.jsonl"))
    assert cfg.db_path == project.home / "store.duckdb"


def test_unknown_toolkit_yaml_key_is_a_usage_error(project, cli_run):
    (project.root / "toolkit.yaml").write_text("audti_db: x.db\n")
    result = cli_run("status")
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        "toolkit.yaml: unknown setting(s) audti_db. Known settings: analyses, audit_db, "
        "audit_json, checks, db, goal_file, goal_history, max_file_mb, notebooks, project_name, "
        "publish, redact, site_dir, site_scope, site_url, slop, snapshots_home, today, vault, "
        "workspace")


@pytest.mark.parametrize("setting", ["yaml", "env"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_file_size_limit_of_zero_or_less_is_a_usage_error(project, cli_run, monkeypatch,
                                                           setting, value):
    if setting == "yaml":
        (project.root / "toolkit.yaml").write_text(f"max_file_mb: {value}\n")
    else:
        monkeypatch.setenv("TOOLKIT_MAX_FILE_MB", value)
    result = cli_run("ledger", "list")
    assert result.exit_code == 2
    where = f"{project.root / 'toolkit.yaml'}: max_file_mb" if setting == "yaml" \
        else "$TOOLKIT_MAX_FILE_MB"  # the error names where the value came from
    assert result.output.splitlines()[-1] == (
        f"Error: {where}: {value} MB is not a size limit. Give a number of MB above 0 "
        "(toolkit.yaml max_file_mb or TOOLKIT_MAX_FILE_MB)")


MB_HINT = "Give a number of MB above 0 (toolkit.yaml max_file_mb or TOOLKIT_MAX_FILE_MB)"


@pytest.mark.parametrize("text, where", [
    ("today: not a date", "{yaml}: today: 'not a date' is not a date; use YYYY-MM-DD"),
    # unquoted, so YAML itself read it as a date it could not build: "invalid YAML", exit 65
    ("today: 2026-13-01", "{yaml}: today: '2026-13-01' is not a date; use YYYY-MM-DD"),
    ("max_file_mb: abc", "{yaml}: max_file_mb: 'abc' is not a number. " + MB_HINT),
    # infinity: "a number is too large: cannot convert float infinity to integer"
    ("max_file_mb: .inf", "{yaml}: max_file_mb: inf is not a number. " + MB_HINT),
    ("redact: maybe", "{yaml}: setting redact must be true or false, not the text 'maybe'"),
    ("", "$TOOLKIT_TODAY: 'soon' is not a date; use YYYY-MM-DD")])
def test_a_bad_setting_is_named_where_it_was_set(project, cli_run, monkeypatch, text, where):
    """A bad value's error names toolkit.yaml (as a path) or the environment variable it came
    from, and says what it got in words, not as a Python type."""
    (project.root / "toolkit.yaml").write_text(text + "\n")
    monkeypatch.setenv("TOOLKIT_TODAY", "soon")  # toolkit.yaml's today: comes first
    result = cli_run("ledger", "list")
    assert (result.exit_code, result.stderr) == (
        2, "Error: " + where.format(yaml=project.root / "toolkit.yaml") + "\n")


def test_slop_default_follows_codesmith_home(project):
    cfg = config_mod.resolve(cwd=project.root, env={"HOME": str(project.home),
                                                    "CODESMITH_HOME": "/opt/cs"})
    assert cfg.slop_path == Path("/opt/cs/slop_ledger/slop_ledger.json")
    # snapshots ignore CODESMITH_HOME, as CodeSmith's paths.rs does
    assert cfg.snapshots_home == project.home / ".codesmith" / "snapshots"


# --------------------------------------------------------------------------- readers

def test_vault_reader_reads_both_forms_and_sessions(project):
    vault = read_vault(project.vault)
    by_title = {e.title: e for e in vault.entries}
    assert len(vault.entries) == 4
    redis = by_title["Redis client drops pipelined commands after a failover"]
    assert (redis.form, redis.confidence, redis.observations) == ("A", "medium", 2)
    assert redis.pattern.startswith("After a sentinel failover")
    dry = by_title["Run the migration dry-run before applying schema changes"]
    assert (dry.form, dry.confidence, dry.reflections) == ("B", "medium", 3)
    assert dry.evidence.count("\n") == 2  # three evidence lines
    assert vault.meta.schema == "reflect"
    assert vault.problems == []
    assert [s.name for s in vault.sessions] == ["jane-doe_86e0b9_2026-05-04_141502"]
    kinds = [e.kind for e in vault.events]
    assert kinds[0] == "started" and kinds[-1] == "ended"
    assert {"prompt", "metric", "file_change", "skill", "subagent_invoked",
            "subagent_completed", "workflow_start"} <= set(kinds)
    assert [e.seq for e in vault.events] == list(range(len(vault.events)))


def test_entry_byte_ranges_tile_the_file(project):
    for path in sorted(project.ledger.glob("*.md")):
        if path.name == "reconcile-log.md":
            continue
        data = path.read_bytes()
        lf = parse_ledger_bytes(data, path, path.stem)
        pieces = [data[: lf.header_end]] + [data[e.start:e.end] for e in lf.entries]
        assert b"".join(pieces) == data, path.name


def test_smith_ledger_meta_schema_detected(tmp_path):
    from toolkit.sources.smith import read_meta

    (tmp_path / "meta.yaml").write_bytes(
        (FORMATS / "smith" / "ledger" / "meta.smith-ledger-form.yaml").read_bytes())
    meta = read_meta(tmp_path)
    assert meta.schema == "smith-ledger"
    assert meta.count_for("tool-preferences") == 0 and meta.count_for("patterns") == 2
    assert meta.last_reflection == "2026-05-02"


def test_fnv1a_matches_codesmith():
    assert fnv1a64_hex("/home/dev/projects/acme-api") == "6c0e8283b9bbf7e2"
    repo = side_repo_for(Path("/home/dev/projects/acme-api/.worktrees/feat-x"), Path("/s"))
    assert repo.parts[2] == "6c0e8283b9bbf7e2"


@pytest.mark.parametrize("label,expected", [
    ("pre-turn:4: add a retry budget", ("pre-turn", 4, None, "add a retry budget")),
    ("post-turn:12", ("post-turn", 12, None, None)),
    ("tool:call_8ZfQ2kLmN", ("tool", None, "call_8ZfQ2kLmN", None)),
    ("tool:call_1: why: this?", ("tool", None, "call_1", "why: this?")),
    ("something else", ("other", None, None, None)),
])
def test_snapshot_labels(label, expected):
    assert parse_label(label) == expected


# --------------------------------------------------------------------------- load and status

def test_load_then_status_lists_every_source(project, cli_run):
    result = cli_run("load")
    assert result.exit_code == 0, result.output
    assert "ledger     loaded     4 entries" in result.output
    assert "audit      loaded     9 rows (9 new)" in result.output
    assert "snapshots  not found" in result.output
    result = cli_run("status", "--json")
    data = json.loads(result.output)
    assert data["tables"]["ledger_entries"] == 4
    assert data["tables"]["slop_entries"] == 3
    assert data["tables"]["session_events"] == 12
    assert {s["source"]: s["found"] for s in data["sources"]} == {
        "audit": True, "goals": False, "history": True, "ledger": True, "sessions": True,
        "slop": True, "snapshots": False}


def test_status_prints_the_first_warnings_in_the_readers_order_and_all_with_all(
        tmp_path, monkeypatch, cli_run):
    """A slop ledger written on one line with 120 entries of an unknown field gives 120
    warnings on line 1: `status` printed every one (a messy ledger's thousands flooded the
    terminal) and in the text order of their messages (entry e10 before e2). It prints the
    first 50 and says how many more (`--all`, like --json, gives them all), in the order the
    reader noted them."""
    entries = [{"id": f"e{i}", "bucket": "stale_docs", "severity": "low", "confidence": "high",
                "title": f"t{i}", "description": "d", "status": "open",
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
                "weird": i} for i in range(120)]
    slop = tmp_path / "slop.json"
    slop.write_text(json.dumps({"entries": entries}), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    def warned(*args: str) -> list[str]:
        out = cli_run("--slop", str(slop), "status", *args).output
        return [line.split(": ", 2)[1] for line in out.splitlines()
                if line.startswith(f"  {slop}:")]

    assert warned() == [f"entry e{i}" for i in range(50)]
    assert "  ... and 70 more (`toolkit status --all` prints them all)" in \
        cli_run("--slop", str(slop), "status").output
    assert warned("--all") == [f"entry e{i}" for i in range(120)]
    listed = json.loads(cli_run("--slop", str(slop), "status", "--json").output)["warnings"]
    assert [w["message"].split(":")[0] for w in listed] == [f"entry e{i}" for i in range(120)]


def test_every_data_command_refreshes_first(project, cli_run):
    # no `load` at all: query sees the data
    result = cli_run("query", "SELECT count(*) AS n FROM dispatches", "--format", "csv")
    assert result.output.splitlines() == ["n", "3"]


def test_unchanged_sources_are_not_reread(project, cli_run):
    cli_run("load")
    result = cli_run("load")
    lines = result.output.splitlines()[:6]
    assert [line.split()[1] for line in lines] == ["unchanged"] * 6
    assert "audit      unchanged  9 rows" in lines  # no stale "(9 new)" from the last load
    with open(project.slop, "a") as fh:
        fh.write("\n")
    result = cli_run("load")
    assert "slop       loaded" in result.output
    assert "ledger     unchanged" in result.output


def test_audit_refresh_copies_only_new_rows_and_new_verdicts(project, cli_run):
    cli_run("load")
    conn = sqlite3.connect(project.audit_db)
    conn.execute("INSERT INTO actions (ts, tier, category, description) VALUES "
                 "('2026-05-05 10:00:00', 2, 'deploy', 'new one')")
    conn.execute("UPDATE dispatches SET verdict='REFUTED', verdict_ts='2026-05-05 10:01:00' "
                 "WHERE id = 3")
    conn.commit()
    conn.close()
    result = cli_run("load")
    assert "audit      loaded     10 rows (1 new)" in result.output
    out = cli_run("query", "SELECT last_verdict FROM task_status WHERE task LIKE 'Audit%'",
                  "--format", "csv").output
    assert out.splitlines() == ["last_verdict", "REFUTED"]


def test_replaced_audit_db_is_reloaded_whole(project, cli_run):
    cli_run("load")
    project.audit_db.unlink()
    make_audit_db(project.audit_db, samples=False)
    conn = sqlite3.connect(project.audit_db)
    conn.execute("INSERT INTO actions (tier, category, description) VALUES (0, 'x', 'only')")
    conn.commit()
    conn.close()
    cli_run("load")
    out = cli_run("query", "SELECT description FROM actions", "--format", "csv").output
    assert out.splitlines() == ["description", "only"]


def test_task_status_matches_nagi_ledger_semantics(project, cli_run):
    conn = sqlite3.connect(project.audit_db)
    for _ in range(2):
        conn.execute("INSERT INTO dispatches (task, agent_type, model, brief_summary) VALUES "
                     "('Cap webhook retries at 5 attempts', 'fork', 'opus', 'again')")
    conn.commit()
    conn.close()
    out = cli_run("query", "SELECT dispatch_count, retry_count, last_verdict, over_retry_limit "
                  "FROM task_status WHERE task = 'Cap webhook retries at 5 attempts'",
                  "--format", "json").output
    assert json.loads(out) == [{"dispatch_count": 4, "retry_count": 3, "last_verdict": None,
                                "over_retry_limit": True}]


def test_stats_by_tier_per_day(shared_project, cli_run):
    out = cli_run("query", "SELECT day, tier, actions FROM stats_by_tier ORDER BY tier",
                  "--format", "csv").output
    assert out.splitlines() == ["day,tier,actions", "2026-05-04,0,1", "2026-05-04,1,1",
                                "2026-05-04,2,1"]


def test_schema_lists_documented_tables(shared_project, cli_run):
    out = cli_run("schema").output
    for table in ("ledger_entries", "ledger_meta", "reconcile_runs", "sessions",
                  "session_events", "slop_entries", "actions", "dispatches", "approaches",
                  "snapshots", "snapshot_files", "task_status", "stats_by_tier"):
        assert f"\n{table} (" in "\n" + out
    assert "  source_links             VARCHAR[]" in out
    result = cli_run("schema", "nope")
    assert result.exit_code == 1
    assert ("Error: no table or view named 'nope'. Run `toolkit schema` to list them"
            in result.output)


@pytest.mark.parametrize("fmt,expected_start", [
    ("csv", "file,title"),
    ("jsonl", '{"file": "patterns"'),
    ("markdown", "| file | title |"),
    ("table", "file"),
])
def test_query_formats(shared_project, cli_run, fmt, expected_start):
    out = cli_run("query", "SELECT file, title FROM ledger_entries ORDER BY file DESC, position",
                  "--format", fmt).output
    assert out.startswith(expected_start)
    assert "Run the migration dry-run" in out


def test_migrations_are_recorded_and_not_reapplied(tmp_path):
    db = tmp_path / "s.duckdb"
    with Store.open(db, sources=SOURCES) as store:
        first = store.applied_migrations()
        assert "m001_initial" in first
    with Store.open(db, sources=SOURCES) as store:
        assert store.migrate() == []
        assert store.applied_migrations() == first



@pytest.mark.parametrize("count", [0, 1, FEW_PROBLEMS, FEW_PROBLEMS + 1, 1500])
def test_a_sources_warnings_are_stored_whole_however_many(tmp_path, count):
    """A handful of warnings go in with bound values, many through Arrow: the same rows."""
    problems = [Problem("slop", f"/p/{i % 7}/slop_ledger.json", None if i % 3 else i,
                        f"entry {i}: 'title' is missing; \u00e9t\u00e9 \U0001f600")
                for i in range(count)]
    with Store.open(tmp_path / "s.duckdb", sources=SOURCES) as store:
        store.replace_problems("audit", [Problem("audit", "/a.db", 3, "kept")])
        store.replace_problems("slop", [Problem("slop", "/old", 1, "replaced")] * 3)
        store.replace_problems("slop", problems)
        # in the order given (the reader's, as its own command prints them), never re-sorted
        assert store.problems("slop") == problems
        assert store.problems("audit") == [Problem("audit", "/a.db", 3, "kept")]


def test_nagi_export_json_is_a_source(tmp_path, cli_run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    export = tmp_path / "export.json"
    export.write_bytes((FORMATS / "nagi-ledger" / "ledger_export.json").read_bytes())
    monkeypatch.setenv("NAGI_LEDGER_EXPORT", str(export))
    out = cli_run("query", "SELECT count(*) AS n FROM approaches", "--format", "csv").output
    assert out.splitlines() == ["n", "3"]
    # status names the file the audit source was read from (there is no audit DB), also
    # when it cannot be read: it named the missing DB, "found"
    status = cli_run("status").stdout.splitlines()
    audit = next(i for i, line in enumerate(status) if line.startswith("  audit "))
    assert status[audit].split() == ["audit", "found", str(export)]
    export.write_text("{bad\n", encoding="utf-8")
    status = cli_run("status").stdout.splitlines()
    assert status[audit].split() == ["audit", "found", str(export)]
    assert status[audit + 1].split()[:2] == ["error:", f"{export}:1:"]


def test_load_shows_a_progress_bar_on_a_terminal_and_none_when_piped(project):
    import os
    import pty
    import subprocess
    import sys

    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "load"], cwd=project.root,
                            stdout=subprocess.PIPE, stderr=secondary, stdin=subprocess.DEVNULL)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    terminal = b"".join(chunks).decode("utf-8", "replace")
    assert "Loading ledger" in terminal and "Loading audit" in terminal
    assert b"Loading" not in out  # stdout (piped) carries only the results
    piped = subprocess.run([sys.executable, "-m", "toolkit", "load", "--full"],
                           cwd=project.root, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and "Loading" not in piped.stderr


def test_commands_outside_any_project_leave_no_trace_in_the_folder(tmp_path, cli_run,
                                                                  monkeypatch, isolated_env):
    folder = tmp_path / "somewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    result = cli_run("status", "--json")
    assert result.exit_code == 0, result.output
    assert list(folder.iterdir()) == []
    store = Path(json.loads(result.output)["store"])
    assert store.is_relative_to(isolated_env / ".cache" / "agent-ledger-toolkit")
    assert store.name == "ledger.duckdb" and store.parent.name.startswith("somewhere-")


def test_snapshot_paths_can_be_given_as_flags(project, cli_run, tmp_path):
    home = tmp_path / "elsewhere"
    result = cli_run("--snapshots-home", str(home), "--workspace", str(tmp_path), "status",
                     "--json")
    assert result.exit_code == 0, result.output
    snaps = {s["source"]: s for s in json.loads(result.output)["sources"]}["snapshots"]
    assert snaps["location"].startswith(str(home))
    assert str(tmp_path) in snaps["note"]


def test_status_names_where_a_source_is_looked_for_now_after_a_setting_changes(
        project, cli_run, tmp_path):
    """A source missing at its old place and at the new one a changed setting names has the
    same fingerprint ("-"); status still names the new place, and names the old one again
    when the setting is gone (it kept naming the first place it was looked for)."""
    def location() -> str:
        out = json.loads(cli_run(*args, "status", "--json").output)
        return {s["source"]: s for s in out["sources"]}["snapshots"]["location"]

    args: tuple[str, ...] = ("--workspace", str(tmp_path))
    default = location()
    for home in (tmp_path / "first", tmp_path / "second"):
        args = ("--snapshots-home", str(home), "--workspace", str(tmp_path))
        assert location().startswith(str(home))
    args = ("--workspace", str(tmp_path))
    assert location() == default


def test_table_columns_line_up_with_wide_characters():
    from rich.cells import cell_len

    from toolkit.cli._common import render_rows

    out = render_rows(["task", "n"], [("自律実行リスト", 1), ("ascii task", 22)], "table")
    lines = out.splitlines()
    # the second column starts at the same terminal column on every line
    starts = [cell_len(line[: line.rindex(" ") + 1]) for line in (lines[0], lines[2], lines[3])]
    assert len(set(starts)) == 1, out


_NIGHT_SESSION = """---
session_start: "2026-12-31T23:50:00"
project: "acme-api"
---

# Session Log

## Started: 2026-12-31 23:50:00

### [23:55:00] User prompt

> ship it before the year ends

- `[23:59:59]` **Edit** `a.py`
- `[00:00:01]` **Edit** `b.py`

### [00:05:00] Subagent invoked: check it

## Resumed: 2027-01-02 08:00:00

### [08:05:00] User prompt

> again

## Ended: 2027-01-02 09:00:00
"""


def _night_events(project, cli_run, text=_NIGHT_SESSION):
    """The (kind, UTC time) of each event of the night session ``text``, once loaded."""
    (project.vault / "sessions" / "jane-doe_86e0b9_2026-12-31_235000.md").write_text(text)
    assert cli_run("load").exit_code == 0
    result = cli_run("query", "--format", "json",
                     "SELECT kind, strftime(ts, '%Y-%m-%d %H:%M:%S') AS ts FROM session_events "
                     "WHERE session LIKE '%2026-12-31%' ORDER BY seq")
    return [(r["kind"], r["ts"]) for r in json.loads(result.output)]


def test_session_event_times_cross_midnight_and_follow_resumed_dates(project, cli_run):
    """A log writes only [HH:MM:SS]: an event's day is the last full date before it, moved
    on at midnight; never the session's first day for every event."""
    assert _night_events(project, cli_run) == [
        ("started", "2026-12-31 23:50:00"), ("prompt", "2026-12-31 23:55:00"),
        ("file_change", "2026-12-31 23:59:59"), ("file_change", "2027-01-01 00:00:01"),
        ("subagent_invoked", "2027-01-01 00:05:00"), ("resumed", "2027-01-02 08:00:00"),
        ("prompt", "2027-01-02 08:05:00"), ("ended", "2027-01-02 09:00:00")]


def test_an_event_a_second_before_the_line_above_it_stays_on_that_day(project, cli_run):
    """Lines a little out of order (the Started heading stamped a second after the first
    edit) are not midnight passing: only a time more than 12 hours earlier moves the day."""
    text = _NIGHT_SESSION.replace("- `[23:59:59]` **Edit** `a.py`",
                                  "- `[23:49:59]` **Edit** `a.py`")
    assert _night_events(project, cli_run, text)[:5] == [
        ("started", "2026-12-31 23:50:00"), ("prompt", "2026-12-31 23:55:00"),
        ("file_change", "2026-12-31 23:49:59"), ("file_change", "2027-01-01 00:00:01"),
        ("subagent_invoked", "2027-01-01 00:05:00")]


@pytest.mark.parametrize("start", ['"2026-12-31T23:50:00+09:00"', "2026-12-31T23:50:00+09:00"],
                         ids=["quoted", "yaml-time"])
def test_a_session_start_with_an_offset_puts_the_session_and_its_events_in_utc(
        project, cli_run, start):
    """session_start with an offset, quoted or not (YAML then reads a time): the session and
    its events are at their UTC times, the events on the log's clock (the start's offset);
    a time that is no time of day is None."""
    text = _NIGHT_SESSION.replace('"2026-12-31T23:50:00"', start).replace(
        "### [00:05:00] Subagent", "### [25:61:00] Odd\n\n### [00:05:00] Subagent")
    events = _night_events(project, cli_run, text)
    result = cli_run("query", "--format", "json",
                     "SELECT strftime(session_start, '%Y-%m-%d %H:%M:%S') AS s FROM sessions "
                     "WHERE name LIKE '%2026-12-31%'")
    assert json.loads(result.output) == [{"s": "2026-12-31 14:50:00"}]
    assert events == [
        ("started", "2026-12-31 14:50:00"), ("prompt", "2026-12-31 14:55:00"),
        ("file_change", "2026-12-31 14:59:59"), ("file_change", "2026-12-31 15:00:01"),
        ("other", None), ("subagent_invoked", "2026-12-31 15:05:00"),
        ("resumed", "2027-01-01 23:00:00"), ("prompt", "2027-01-01 23:05:00"),
        ("ended", "2027-01-02 00:00:00")]
