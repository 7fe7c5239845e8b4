"""The demo world: deterministic, complete, and readable by the toolkit's own readers."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import FORMATS
from toolkit.config import resolve
from toolkit.demo import DemoWorld, _World, fnv1a64_hex, side_repo_for, write_demo
from toolkit.errors import ToolkitError, UsageError
from toolkit.records import (
    CATEGORIES,
    SLOP_BUCKETS,
    SLOP_CONFIDENCES,
    SLOP_SEVERITIES,
    SLOP_STATUSES,
)
from toolkit.sources.slop import read_slop
from toolkit.sources.smith import parse_ledger_bytes, read_meta, read_vault

SHARED_SQL = FORMATS / "nagi-ledger" / "audit_schema.sql"
ANCHOR = dt.date(2026, 11, 27)


def git(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                          env=env).stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> DemoWorld:
    return write_demo(tmp_path_factory.mktemp("demo") / "world")


def tree_bytes(root: Path) -> dict[str, str]:
    """sha256 of every file, except git's index (it caches inode and ctime, not content)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "index"}


def db_rows(path: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY id").fetchall()
                for t in ("actions", "dispatches", "approaches")}
    finally:
        conn.close()


# --------------------------------------------------------------------------- determinism

def test_same_seed_writes_the_same_world_whatever_the_users_git_setup(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "demo"
    first = write_demo(target, audit_rows=400)
    first_heads = (git("-C", str(first.project), "rev-parse", "HEAD"),
                   git("--git-dir", str(first.side_repo), "rev-parse", "HEAD"))
    first_bytes = tree_bytes(target)
    first_rows = db_rows(first.audit_db)
    target.rename(tmp_path / "first")

    # A hostile user setup: identity, signing, default branch and time zone of their own.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Someone Else\n\temail = x@y.z\n"
                                     "[init]\n\tdefaultBranch = trunk\n"
                                     "[commit]\n\tgpgsign = true\n")
    # git reads these two without any config file: the user's ignore rules and attributes
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*.md\n*.json\n")
    (home / ".config" / "git" / "attributes").write_text("* text eol=crlf\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("TZ", "Pacific/Auckland")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Env Author")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2001-01-01T00:00:00")
    second = write_demo(target, audit_rows=400)

    assert tree_bytes(target) == first_bytes
    assert db_rows(second.audit_db) == first_rows
    assert (git("-C", str(second.project), "rev-parse", "HEAD"),
            git("--git-dir", str(second.side_repo), "rev-parse", "HEAD")) == first_heads
    assert git("-C", str(second.project), "branch", "--show-current").strip() == "main"

    other = write_demo(tmp_path / "other", seed=8, audit_rows=400)
    assert other.slop_path.read_bytes() != second.slop_path.read_bytes()
    assert db_rows(other.audit_db) != first_rows
    assert git("--git-dir", str(other.side_repo), "rev-parse", "HEAD") != first_heads[1]


# --------------------------------------------------------------------------- snapshots layout

def test_fnv_hash_and_side_repo_path_match_codesmith(tmp_path: Path) -> None:
    assert fnv1a64_hex("/home/dev/projects/acme-api") == "6c0e8283b9bbf7e2"
    home = tmp_path / "snapshots"
    assert side_repo_for(Path("/home/dev/projects/acme-api/.worktrees/feat-x"), home) == \
        home / "6c0e8283b9bbf7e2" / "46a1fd5b66deb061" / ".git"


def test_side_repo_holds_labelled_turn_snapshots(world: DemoWorld) -> None:
    ws = world.project.resolve()
    assert world.side_repo == world.snapshots_home / fnv1a64_hex(str(ws)) / \
        fnv1a64_hex(str(ws)) / ".git"
    log = git("--git-dir", str(world.side_repo), "--work-tree", str(world.project), "log",
              "--pretty=format:%H%x09%at%x09%s", "--no-color").splitlines()
    rows = [line.split("\t", 2) for line in log]
    assert len(rows) == world.counts["snapshots"]
    times = [int(at) for _sha, at, _label in rows]
    assert times == sorted(times, reverse=True)  # newest first
    labels = [label for _sha, _at, label in rows]
    assert labels[0].startswith("post-turn:8: ")
    assert labels[-1].startswith("pre-turn:1: add a retry budget")
    assert any(re.fullmatch(r"tool:call_[A-Za-z0-9]{9}", label) for label in labels)
    for seq in range(1, 9):
        pre = [lb for lb in labels if lb.startswith(f"pre-turn:{seq}: ")]
        post = [lb for lb in labels if lb.startswith(f"post-turn:{seq}: ")]
        assert len(pre) == len(post) == 1 and pre[0][len(f"pre-turn:{seq}: "):] == \
            post[0][len(f"post-turn:{seq}: "):]
        assert len(pre[0].split(": ", 1)[1]) <= 101  # snippet <= 100 chars (+ "…")
    # Within the week before "today", and every tool snapshot shows a real change.
    today = dt.datetime.combine(world.today, dt.time(), dt.UTC).timestamp()
    assert all(today - 7 * 86400 < t < today for t in times)
    for sha, _at, label in rows:
        if label.startswith("tool:"):
            assert git("--git-dir", str(world.side_repo), "diff-tree", "-r", "--name-only",
                       f"{sha}~1", sha).strip()
    changed = git("--git-dir", str(world.side_repo), "log", "--name-only", "--format=")
    assert ".smith/vault/ledger/patterns.md" in changed
    assert "D\tacme_api/auth/legacy_token.py" in git(
        "--git-dir", str(world.side_repo), "log", "--name-status", "--format=")
    config = git("--git-dir", str(world.side_repo), "config", "--list")
    assert "user.name=deepseek-snapshots" in config
    assert "user.email=snapshots@codesmith.local" in config and "gc.auto=0" in config
    exclude = (world.side_repo / "info" / "exclude").read_text().splitlines()
    assert ".git" in exclude and ".toolkit/" in exclude


def test_both_repositories_are_whole_with_a_reflog_entry_and_an_index_per_commit(
        world: DemoWorld) -> None:
    """As committing one by one leaves them: every commit in the reflog (newest first), the
    index holding the last commit's tree, and nothing git's own check finds wrong."""
    project = ("-C", str(world.project))
    side = ("--git-dir", str(world.side_repo), "--work-tree", str(world.project))
    for repo in (project, side):
        git(*repo, "fsck", "--strict", "--no-progress")  # check=True: exit 0
        assert git(*repo, "reflog", "--format=%H").split() == \
            git(*repo, "log", "--format=%H").split()
        assert git(*repo, "rev-parse", "--symbolic-full-name", "HEAD") == "refs/heads/main\n"
    subjects = git(*project, "reflog", "--format=%gs").splitlines()
    assert subjects[-1] == "commit (initial): Initial import of acme-api"
    assert subjects[0].startswith("commit: Webhook retry budget, drop legacy X-Api-Token auth")
    assert (world.project / ".git" / "COMMIT_EDITMSG").read_text() == \
        git(*project, "log", "-1", "--format=%B")[:-1]
    assert git(*project, "diff-index", "--cached", "HEAD") == ""
    # The side index is the last snapshot's (the work tree moved on after it).
    assert git(*side, "diff-index", "--cached", "HEAD") == ""
    assert git(*side, "status", "--porcelain") != ""


# --------------------------------------------------------------------------- the project

def test_project_history_evolves_the_ledger_and_ends_clean(world: DemoWorld) -> None:
    p = str(world.project)
    assert git("-C", p, "status", "--porcelain") == ""
    ledger_commits = git("-C", p, "log", "--format=%H", "--reverse", "--",
                         ".smith/vault/ledger").split()
    assert len(ledger_commits) >= 8
    assert world.counts["vault_commits"] == len(
        git("-C", p, "log", "--format=%H", "--", ".smith/vault").split())

    def entries_at(sha: str, kind: str) -> dict[str, str]:
        data = git("-C", p, "show", f"{sha}:.smith/vault/ledger/{kind}.md").encode()
        return {e.title or "": e.confidence or "" for e in
                parse_ledger_bytes(data, f"{kind}.md", kind).entries}

    # One entry is promoted, one demoted, one merged away and one pruned over the history.
    seen = [entries_at(sha, "patterns") for sha in ledger_commits]
    outbox = [s.get("Seed the outbox table in webhook integration tests") for s in seen]
    assert "medium" in outbox and outbox[-1] == "high"
    merged = "Reuse the Idempotency-Key header for POST retries"
    assert any(merged in s for s in seen) and merged not in seen[-1]
    anti = [entries_at(sha, "antipatterns") for sha in ledger_commits]
    orm = [s.get("Mocking the ORM session in repository tests") for s in anti]
    assert "high" in orm and orm[-1] == "medium"
    pruned = "Running alembic autogenerate against a dirty local DB"
    assert any(pruned in s for s in anti) and pruned not in anti[-1]
    assert len(seen[-1]) > len(seen[0])  # entries were added

    assert ".toolkit/" in (world.project / ".gitignore").read_text().splitlines()
    cfg = resolve(cwd=world.project, env={"HOME": str(world.root / "nohome")})
    assert cfg.project_root == world.project
    assert cfg.slop_path.resolve() == world.slop_path
    assert cfg.audit_db.resolve() == world.audit_db
    assert cfg.snapshots_home.resolve() == world.snapshots_home
    assert cfg.today == world.today == ANCHOR + dt.timedelta(days=1)
    assert side_repo_for(cfg.workspace, cfg.snapshots_home).resolve() == world.side_repo


def test_vault_reads_with_both_forms_malformed_entries_and_both_meta_schemas(
        world: DemoWorld) -> None:
    vault = read_vault(world.project / ".smith" / "vault")
    entries = vault.entries
    assert 40 <= len(entries) <= 60 and len(entries) == world.counts["ledger_entries"]
    forms = {kind: [e.form for e in lf.entries] for kind, lf in vault.files.items()}
    assert forms["edge-cases"].count("A") > forms["edge-cases"].count("B") >= 1
    assert "A" in forms["patterns"] and forms["patterns"].count("B") > 1
    assert {e.confidence for e in entries} == {"low", "medium", "high"}
    assert set(CATEGORIES) <= {e.category for e in entries}
    # The two malformed entries are kept, with their problems; nothing else is wrong.
    assert sorted(p.message for p in vault.problems) == ["missing Category", "missing title"]
    assert sum(1 for e in entries if e.title is None) == 1
    assert sum(1 for e in entries if e.category is None) == 1
    # meta.yaml (reflect schema) agrees with the files; the archive uses the other schema.
    assert vault.meta.schema == "reflect"
    for kind, lf in vault.files.items():
        assert vault.meta.count_for(kind) == len(lf.entries)
    assert vault.meta_json and vault.meta_json["total_patterns"] == len(entries)
    assert vault.meta_json["lock"] is None
    archive = sorted((vault.ledger_dir / "archive").iterdir())
    assert len(archive) == 1 and read_meta(archive[0]).schema == "smith-ledger"
    assert read_meta(archive[0]).data["total_entries"] == sum(
        len(parse_ledger_bytes((archive[0] / f"{k}.md").read_bytes(), k, k).entries)
        for k in vault.files)
    backups = sorted((vault.ledger_dir / ".backups").iterdir())
    assert len(backups) == 1 and backups[0].name.startswith("reconcile-")
    assert {p.name for p in backups[0].iterdir()} == {
        *(f"{k}.md" for k in vault.files), "meta.yaml", ".meta.json"}
    assert len(vault.reconcile_runs) == 2 and vault.reconcile_runs[0].merges
    assert vault.reconcile_runs[0].backup == f".backups/{backups[0].name}/"
    # Prune has candidates: low older than 30 days, medium older than 90.
    ages = [(e.confidence, (world.today - dt.date.fromisoformat(e.date or "")).days)
            for e in entries]
    assert any(c == "low" and a > 30 for c, a in ages)
    assert any(c == "medium" and a > 90 for c, a in ages)
    # Evidence names real session logs; related links name real entries.
    names = {s.name for s in vault.sessions}
    cited = set(re.findall(r"session (\S+?):", "\n".join(e.evidence or "" for e in entries)))
    assert cited and cited <= names
    titles = {(e.file, e.title) for e in entries}
    links = re.findall(r"See ([a-z-]+)\.md: '([^']+)'", "\n".join(e.related or "" for e in
                                                                 entries))
    assert links and set(links) <= titles


def test_sessions_have_realistic_events_and_a_current_pointer(world: DemoWorld) -> None:
    vault = read_vault(world.project / ".smith" / "vault")
    assert len(vault.sessions) == world.counts["sessions"] >= 10
    assert sum(s.legacy_name for s in vault.sessions) >= 1
    kinds = {e.kind for e in vault.events}
    assert {"prompt", "metric", "file_change", "skill", "subagent_invoked",
            "subagent_completed", "workflow_start", "ended"} <= kinds
    skills = {e.title.split()[0] for e in vault.events if e.kind == "skill"}
    assert {"/smith-build", "/smith-bugfix"} <= skills
    request_fields = {k for e in vault.events if e.kind == "skill" for k, _v in e.fields}
    assert {"Synthesized Input", "Outcome", "Artifacts", "Systems affected"} <= request_fields
    pointer = (world.project / ".smith" / "vault" / ".current-session").read_text().strip()
    newest = max(vault.sessions, key=lambda s: s.session_start or "")
    assert Path(pointer).is_absolute() and Path(pointer) == Path(newest.path)
    assert newest.status == "active"


# --------------------------------------------------------------------------- slop and audit

def test_slop_ledger_covers_every_enum_in_codesmiths_layout(world: DemoWorld) -> None:
    text = world.slop_path.read_text(encoding="utf-8")
    assert text.startswith('{\n  "entries": [\n    {\n      "id": ')
    slop = read_slop(world.slop_path)
    assert slop.form == "object" and not slop.problems
    entries = slop.entries
    assert len(entries) == world.counts["slop_entries"] >= 100
    assert {e.bucket for e in entries} == set(SLOP_BUCKETS)
    assert {e.status for e in entries} == set(SLOP_STATUSES)
    assert {e.severity for e in entries} == set(SLOP_SEVERITIES)
    assert {e.confidence for e in entries} == set(SLOP_CONFIDENCES)
    raw = json.loads(text)["entries"]
    order = ["id", "bucket", "severity", "confidence", "owner", "source_links", "title",
             "description", "status", "cleanup_recommendation", "created_at", "updated_at",
             "task_id", "thread_id"]
    for item in raw:
        keys = list(item)
        assert keys == [k for k in order if k in item]
        assert uuid.UUID(item["id"]).version == 4 and item["id"] == item["id"].lower()
    assert any("owner" not in i for i in raw) and any(i.get("owner") == "auto" for i in raw)
    assert any("source_links" not in i for i in raw) and any("task_id" in i for i in raw)
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")
    assert all(stamp.fullmatch(i[k]) and i["created_at"] <= i["updated_at"]
               for i in raw for k in ("created_at", "updated_at"))
    digits = {len((stamp.fullmatch(i["created_at"]).group(1) or ".")[1:]) for i in raw}
    assert digits == {0, 3, 6, 9}


def test_audit_db_has_nagi_ledger_schema_in_wal_mode(world: DemoWorld) -> None:
    assert not world.audit_db.with_name("ledger.db-wal").exists()
    assert not world.audit_db.with_name("ledger.db-shm").exists()
    reference = sqlite3.connect(":memory:")
    reference.executescript(SHARED_SQL.read_text(encoding="utf-8").split("-- Example rows")[0])
    conn = sqlite3.connect(f"file:{world.audit_db}?mode=ro", uri=True)
    try:
        schema = "SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 1"
        assert conn.execute(schema).fetchall() == reference.execute(schema).fetchall()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("actions", "dispatches", "approaches")}
        assert sum(counts.values()) == 3000
        assert counts["actions"] > counts["dispatches"] + counts["approaches"]
        assert {k: world.counts[k] for k in counts} == counts
        for table in counts:  # ids grow with time, timestamps as SQLite writes them
            ts = [r[0] for r in conn.execute(f"SELECT ts FROM {table} ORDER BY id")]
            assert ts == sorted(ts)
            assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", t) for t in ts)
            assert ts[0] > "2026-10-15" and ts[-1] < "2026-11-28"
        tiers = dict(conn.execute("SELECT tier, count(*) FROM actions GROUP BY 1").fetchall())
        assert set(tiers) == {0, 1, 2} and tiers[0] > tiers[1] > tiers[2]
        assert conn.execute("SELECT count(*) FROM actions WHERE project IS NULL").fetchone()[0]
        assert len({r[0] for r in conn.execute("SELECT DISTINCT project FROM actions "
                                               "WHERE project IS NOT NULL")}) >= 2
        failure = conn.execute("SELECT description FROM actions WHERE category='tool_failure' "
                               "AND description LIKE 'Bash: exit code 1: %'").fetchone()
        assert failure
        verdicts = {r[0] for r in conn.execute("SELECT DISTINCT verdict FROM dispatches")}
        assert verdicts == {"CONFIRMED", "REFUTED", "PARTIAL", None}
        tasks = conn.execute("SELECT task, count(*) FROM dispatches GROUP BY 1").fetchall()
        assert 30 <= len(tasks) <= 50 and sum(1 for _t, n in tasks if n >= 3) >= 3
        assert conn.execute("SELECT count(*) FROM dispatches WHERE brief_summary LIKE "
                            "'[auto] %' AND agent_type='general-purpose' AND model='inherit'"
                            ).fetchone()[0]
        outcomes = {r[0] for r in conn.execute("SELECT DISTINCT outcome FROM approaches")}
        assert outcomes == {"DEAD_END", "NO_GO", "WORKS"}
        # Work logged in the same windows as the turn snapshots.
        times = [int(t) for t in git("--git-dir", str(world.side_repo), "log",
                                     "--format=%at").split()]
        lo, hi = (dt.datetime.fromtimestamp(x, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
                  for x in (min(times), max(times)))
        assert conn.execute("SELECT count(*) FROM dispatches WHERE ts BETWEEN ? AND ?",
                            (lo, hi)).fetchone()[0] >= 3
    finally:
        conn.close()
        reference.close()


# --------------------------------------------------------------------------- refusals

def test_goal_gate_files_are_as_goal_gate_writes_them(world: DemoWorld, cli_run,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.sources.goals import OUTCOMES

    raw = world.goal_file.read_text(encoding="utf-8")
    state = json.loads(raw)
    assert not raw.endswith("\n") and raw == json.dumps(state)
    assert list(state)[:4] == ["goal", "remaining", "max_turns", "created"]
    assert 0 < state["remaining"] <= state["max_turns"]
    lines = world.goal_history.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == world.counts["goal_events"] >= 5
    outcomes = set()
    for line in lines:
        entry = json.loads(line)
        assert line == json.dumps(entry) + "\n"
        assert list(entry) == ["goal", "outcome", "note", "created", "closed", "turns_used"]
        assert entry["created"] < entry["closed"] < state["created"]
        outcomes.add(entry["outcome"])
    assert outcomes <= set(OUTCOMES) and len(outcomes) >= 4
    # the project's toolkit.yaml points at them: status reads them with no warning
    monkeypatch.chdir(world.project)
    status = json.loads(cli_run("--db", str(world.root / "goals.duckdb"), "status",
                                "--json").output)
    goals = next(s for s in status["sources"] if s["source"] == "goals")
    assert goals["found"] and goals["location"] == str(world.goal_file)
    assert status["tables"]["goal_events"] == len(lines) and status["tables"]["goals"] == 1
    assert not [w for w in status["warnings"] if w["source"] == "goals"]
    brief = cli_run("audit", "brief", "--now", "2026-11-27 23:00:00").stdout
    assert brief.startswith("## 開いてるループ\n\n### アクティブ goal\n"
                            f"- {state['goal']} (remaining 6/20)\n\n### 直近の dead-end\n")


def test_refuses_a_non_empty_destination_and_leaves_it_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="is not empty"):
        write_demo(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    with pytest.raises(UsageError, match="is a file"):
        write_demo(tmp_path / "notes.txt")
    with pytest.raises(UsageError, match="at least 100"):
        write_demo(tmp_path / "new", audit_rows=10)
    assert not (tmp_path / "new").exists()


def test_cli_refuses_a_non_empty_destination(tmp_path: Path, cli_run) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    result = cli_run("demo", str(tmp_path))
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {tmp_path} is not empty; the demo writes into a new or empty folder. "
        "Pick another folder or empty this one")


def test_a_failure_removes_the_half_written_world(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: _World) -> None:
        raise ToolkitError("git commit-tree failed while writing the demo: disk full")

    monkeypatch.setattr(_World, "run_turns", broken)
    with pytest.raises(ToolkitError, match="disk full"):
        write_demo(tmp_path / "demo")
    assert not (tmp_path / "demo").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ToolkitError):
        write_demo(tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []


def test_cli_a_folder_that_cannot_be_created_is_an_error_not_a_traceback(tmp_path: Path,
                                                                          cli_run) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    target = tmp_path / "notes.txt" / "demo"
    result = cli_run("demo", str(target))
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {target}: cannot create the folder: Not a directory. "
        "Name a folder you can write to")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_an_os_error_while_writing_is_an_error_and_removes_the_half_written_world(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_run) -> None:
    def disk_full(self: _World) -> None:
        raise OSError(28, "No space left on device", str(self.root / "x"))

    monkeypatch.setattr(_World, "run_turns", disk_full)
    result = cli_run("demo", str(tmp_path / "demo"))
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {tmp_path / 'demo' / 'x'}: cannot write the demo world: No space left on "
        "device; nothing kept")
    assert not (tmp_path / "demo").exists()


def test_every_demo_data_file_ships_in_a_regular_install() -> None:
    """The demo's content is data (toolkit/demo/data); pyproject's package-data must cover
    each file, or `pip install .` gives a toolkit whose `toolkit demo` cannot start."""
    import fnmatch
    import tomllib

    from tests.conftest import REPO

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["toolkit.demo"]
    data = REPO / "toolkit" / "demo" / "data"
    files = sorted(p.relative_to(data.parent).as_posix() for p in data.rglob("*") if p.is_file())
    assert files
    assert [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)] == []


def test_cli_next_step_can_be_pasted_into_a_shell(tmp_path: Path, cli_run) -> None:
    # "Next: cd /tmp/my demos/acme-api && toolkit status" printed the folder bare
    import shlex

    result = cli_run("demo", str(tmp_path / "my demos"))
    assert result.exit_code == 0, result.output
    project = tmp_path / "my demos" / "acme-api"
    assert result.output.splitlines()[-1] == (
        f"Next: cd {shlex.quote(str(project))} && toolkit status")
