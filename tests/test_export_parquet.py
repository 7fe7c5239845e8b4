"""`toolkit export --format parquet`: one dataset per table, partitioned by project.

Several projects share one folder and never touch each other's partitions; a re-export swaps
each changed partition in whole (a killed export leaves the old partition, readable), leaves
an unchanged one alone, and no project name writes outside the folder. Read back with DuckDB
and pyarrow here; tests/test_export_spark.py reads the same layout with Apache Spark.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from tests.conftest import modes, reap, run_unprivileged, tree_digest
from toolkit import export as export_mod
from toolkit.errors import ToolkitError, UsageError
from toolkit.export import export_parquet, partition_dirname
from toolkit.store import Store

ODD_NAMES = ["my project", "a/b", "../escape", "..", ".", "x=y", "100%", "café ☕ 東京",
             "__HIVE_DEFAULT_PARTITION__", "2024", "tab\there", "back\\slash", "_under"]


def _store(project) -> Store:
    """The fixture project's store, loaded."""
    from toolkit.cli._common import open_store
    from toolkit.config import resolve

    return open_store(resolve(project=project.root), quiet=True)


def _partition_rows(out: Path, table: str) -> dict[str, int]:
    conn = duckdb.connect()
    glob = str(out / table / "project=*" / "*.parquet").replace("'", "''")
    rows = conn.execute(
        f"SELECT project, count(*) FROM read_parquet('{glob}', hive_partitioning = true, "
        "hive_types = {'project': VARCHAR}) GROUP BY project").fetchall()
    return dict(rows)


def test_export_writes_one_dataset_per_table_with_its_schema(shared_project, cli_run, tmp_path):
    out = tmp_path / "lake"
    result = cli_run("export", "--format", "parquet", "--out", str(out))
    assert result.exit_code == 0, result.output
    with _store(shared_project) as store:
        counts = store.counts()
        types = {(t, c): d for t, kind, c, d in store.schema() if kind == "table"}
        tables = sorted({t for t, _c in types})
    lines = result.output.splitlines()
    assert lines[-1] == (f"Exported acme-api into {out}: {len(tables)} tables, "
                         f"{len(tables)} written, 0 unchanged")
    assert lines[0].split() == ["actions", str(counts["actions"]), "rows", "written"]
    assert sorted(p.name for p in out.iterdir()) == tables
    for table in tables:
        assert sorted(p.name for p in (out / table).iterdir()) == ["_schema.json",
                                                                  "project=acme-api"]
        part = out / table / "project=acme-api"
        assert sorted(p.name for p in part.iterdir()) == [".toolkit-export", "part-0.parquet"]
        assert pq.read_metadata(part / "part-0.parquet").num_rows == counts[table]
        schema = json.loads((out / table / "_schema.json").read_text(encoding="utf-8"))
        documented = {c.get("store_column", c["name"]): c["type"] for c in schema["columns"]
                      if not c.get("partition")}
        assert documented == {c: d for (t, c), d in types.items() if t == table}
        assert schema["partitioned_by"] == ["project"]
    # types survive: timestamps, integer tiers, lists
    actions = pq.read_schema(out / "actions" / "project=acme-api" / "part-0.parquet")
    assert str(actions.field("ts").type) == "timestamp[us]"
    assert str(actions.field("tier").type) == "int32"
    # the store's project column, renamed beside the partition, where the store has it
    assert actions.names == ["id", "ts", "tier", "category", "description", "record_project",
                             "ts_raw"]
    entries = pq.read_schema(out / "ledger_entries" / "project=acme-api" / "part-0.parquet")
    assert str(entries.field("problems").type) == "list<element: string>"
    assert _partition_rows(out, "actions") == {"acme-api": counts["actions"]}


def test_projects_share_the_folder_and_unchanged_partitions_are_not_rewritten(
        project, cli_run, tmp_path):
    out = tmp_path / "lake"
    assert cli_run("export", "--out", str(out), "--project-name", "other").exit_code == 0
    assert cli_run("export", "--out", str(out)).exit_code == 0
    other = {k: v for k, v in tree_digest(out).items() if "project=other" in k}
    mine = {p: p.stat().st_ino for p in out.glob("*/project=acme-api/part-0.parquet")}
    again = cli_run("export", "--out", str(out))
    assert again.output.splitlines()[-1].endswith(" 0 written, 15 unchanged"), again.output
    assert {p: p.stat().st_ino for p in out.glob("*/project=acme-api/*.parquet")} == mine
    # one new audit row: only the actions partition is written again
    before = _partition_rows(out, "actions")
    db = sqlite3.connect(project.audit_db)
    db.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
               "('2026-11-20 10:00:00', 1, 'deploy', 'one more', 'acme-api')")
    db.commit()
    db.close()
    changed = cli_run("export", "--out", str(out))
    written = [ln.split()[0] for ln in changed.output.splitlines() if ln.endswith(" written")]
    assert written == ["actions"], changed.output
    assert {k: v for k, v in tree_digest(out).items() if "project=other" in k} == other
    rows = _partition_rows(out, "actions")
    assert rows == {"acme-api": before["acme-api"] + 1, "other": before["other"]}


def _by_record_project(out: Path) -> dict[str, dict[str | None, int]]:
    """Per partition of OUT/actions: its rows by the project each action names."""
    conn = duckdb.connect()
    glob = str(out / "actions" / "project=*" / "*.parquet").replace("'", "''")
    got: dict[str, dict[str | None, int]] = {}
    for part, record, n in conn.execute(
            f"SELECT project, record_project, count(*) FROM read_parquet('{glob}', "
            "hive_partitioning = true, hive_types = {'project': VARCHAR}) GROUP BY ALL"
            ).fetchall():
        got.setdefault(part, {})[record] = n
    return got


def test_a_projects_actions_partition_holds_its_own_and_the_unassigned_actions_only(
        project, cli_run, tmp_path, monkeypatch):
    # nagi-ledger's audit DB is the user's: it holds every project's actions
    db = sqlite3.connect(project.audit_db)
    db.executemany("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                   "('2026-11-20 10:00:00', 1, 'deploy', ?, ?)",
                   [("web deploy", "acme-web"), ("web fix", "acme-web"), ("blank", " ")])
    db.commit()
    db.close()
    out = tmp_path / "lake"
    assert cli_run("export", "--out", str(out)).exit_code == 0
    # the other project's export from its own checkout, sharing the audit DB
    assert cli_run("export", "--out", str(out), "--project-name", "acme-web").exit_code == 0
    with _store(project) as store:
        total = store.counts()["actions"]
        own = store.scalar("SELECT count(*) FROM actions WHERE project = 'acme-api'")
        unassigned = store.scalar("SELECT count(*) FROM actions WHERE project IS NULL")
        tables = sorted({t for t, kind, _c, _d in store.schema() if kind == "table"})
    assert own > 0 and unassigned > 0 and total == own + unassigned + 3
    got = _by_record_project(out)
    assert got == {"acme-api": {"acme-api": own, None: unassigned, " ": 1},
                   "acme-web": {"acme-web": 2, None: unassigned, " ": 1}}
    assert sorted(p.name for p in out.iterdir()) == tables  # the scope adds no table
    # site_scope: all exports every project's actions, as the site then shows them
    monkeypatch.setenv("TOOLKIT_SITE_SCOPE", "all")
    result = cli_run("export", "--out", str(out))
    assert [ln.split()[0] for ln in result.output.splitlines() if ln.endswith(" written")] \
        == ["actions"], result.output
    assert _partition_rows(out, "actions")["acme-api"] == total


def test_odd_project_names_stay_inside_the_folder_and_read_back_exactly(project, tmp_path):
    out = tmp_path / "lake"
    with _store(project) as store:
        n = store.counts()["actions"]
        parts = export_parquet(out, [(name, store) for name in ODD_NAMES])
    assert {p.project for p in parts} == set(ODD_NAMES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acme-api", "lake"]
    for part in parts:
        assert part.path.parent.parent == out.resolve()
    assert _partition_rows(out, "actions") == dict.fromkeys(ODD_NAMES, n)
    assert partition_dirname("a/b") == "project=a%2Fb"
    assert partition_dirname("café ☕") == "project=café%20☕"


@pytest.mark.parametrize("name, why", [("", "empty"), ("   ", "empty"), ("x" * 300, "too long")])
def test_an_unusable_project_name_is_a_usage_error(shared_project, cli_run, tmp_path, name,
                                                    why):
    result = cli_run("export", "--out", str(tmp_path / "lake"), "--project-name", name)
    assert result.exit_code == 2
    assert result.output.startswith("Error: the project name is ")
    assert why in result.output and "Traceback" not in result.output
    assert not (tmp_path / "lake").exists()


def test_a_symbolic_link_in_the_folder_is_refused_and_nothing_lands_outside(
        shared_project, cli_run, tmp_path):
    out, elsewhere = tmp_path / "lake", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "actions").symlink_to(elsewhere)
    result = cli_run("export", "--out", str(out))
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {out / 'actions'}: refusing to write through a "
                                    "symbolic link")
    assert list(elsewhere.iterdir()) == []
    (out / "actions").unlink()
    (out / "actions").mkdir()
    (out / "actions" / "project=acme-api").symlink_to(elsewhere)
    result = cli_run("export", "--out", str(out))
    assert result.exit_code == 1 and "refusing to write through a symbolic link" in result.output
    assert list(elsewhere.iterdir()) == []
    # a table's schema file linked to a file outside: it was rewritten through the link
    (out / "actions" / "project=acme-api").unlink()
    theirs = elsewhere / "theirs.json"
    theirs.write_text('{"mine": 1}\n')
    (out / "actions" / "_schema.json").unlink(missing_ok=True)
    (out / "actions" / "_schema.json").symlink_to(theirs)
    result = cli_run("export", "--out", str(out))
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {out / 'actions' / '_schema.json'}: refusing to "
                                    "write through a symbolic link")
    assert theirs.read_text() == '{"mine": 1}\n'


def test_the_folder_being_a_file_is_a_usage_error(shared_project, cli_run, tmp_path):
    (tmp_path / "lake").write_text("x")
    result = cli_run("export", "--out", str(tmp_path / "lake"))
    assert result.exit_code == 2 and "is a file" in result.output
    with _store(shared_project) as store, pytest.raises(UsageError, match="is a file"):
        export_parquet(tmp_path / "lake", [("p", store)])
    assert (tmp_path / "lake").read_text() == "x"


def test_a_table_gone_from_the_store_loses_only_this_projects_partition(
        shared_project, cli_run, tmp_path):
    out = tmp_path / "lake"
    cli_run("export", "--out", str(out))
    cli_run("export", "--out", str(out), "--project-name", "other")
    gone = out / "gone"
    (out / "actions").rename(gone)  # a table the store no longer has
    cli_run("export", "--out", str(out))
    assert sorted(p.name for p in gone.iterdir()) == ["_schema.json", "project=other"]
    # a folder the toolkit did not write is never touched
    mine = out / "notes" / "project=acme-api"
    mine.mkdir(parents=True)
    cli_run("export", "--out", str(out))
    assert mine.is_dir()


def _export_killed_at(point: str, cwd: Path, out: Path, *, reaped: bool = True
                      ) -> subprocess.Popen[str]:
    """Run `toolkit export` and SIGKILL it at ``point``; ``reaped`` False: the killed
    process is left a zombie (killed, its exit status not yet collected: as under `timeout
    -s KILL`, whose own death leaves its child to init), for the caller to reap."""
    env = dict(os.environ, TOOLKIT_EDITOR_PAUSE=point)
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "export", "--out", str(out)],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if line.startswith(f"TOOLKIT_EDITOR_PAUSE {point} "):
            proc.send_signal(signal.SIGKILL)
            if reaped:
                reap(proc)
            return proc
        if not line:
            break
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"the export never reached {point}: {err}")


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "a zombie"])
def test_an_export_killed_before_its_swap_leaves_the_old_partition(project, cli_run, tmp_path,
                                                                   reaped):
    """A killed export leaves the old partition; the next export removes its staging folder,
    also while the killed process is a zombie (it has ended, only its exit status waits to be
    collected), which the check of whether a writer still runs took for a live one."""
    out = tmp_path / "lake"
    cli_run("export", "--out", str(out))
    before = tree_digest(out / "actions" / "project=acme-api")
    old_rows = _partition_rows(out, "actions")
    db = sqlite3.connect(project.audit_db)
    db.execute("DELETE FROM actions WHERE id = (SELECT max(id) FROM actions)")
    db.commit()
    db.close()
    killed = _export_killed_at("export_staged@actions", project.root, out, reaped=reaped)
    assert tree_digest(out / "actions" / "project=acme-api") == before
    staged = [p.name for p in (out / "actions").iterdir() if p.name.startswith(".")]
    assert len(staged) == 1 and staged[0].startswith(".toolkit-staging-")
    assert _partition_rows(out, "actions") == old_rows  # readers see the old rows
    # the next export removes the dead writer's staging folder and writes the new rows
    try:
        assert cli_run("export", "--out", str(out)).exit_code == 0
    finally:
        reap(killed)
    assert sorted(p.name for p in (out / "actions").iterdir()) == ["_schema.json",
                                                                  "project=acme-api"]
    with _store(project) as store:
        assert _partition_rows(out, "actions") == {"acme-api": store.counts()["actions"]}


def test_where_folders_cannot_be_exchanged_an_interrupted_swap_is_repaired(
        project, cli_run, tmp_path, monkeypatch):
    out = tmp_path / "lake"
    with _store(project) as store:
        export_parquet(out, [("p", store)])
        old = tree_digest(out / "actions" / "project=p")
        store.conn.execute("DELETE FROM actions WHERE tier = 0")
        new_rows = store.counts()["actions"]

        def crash(point: str, name: str | None = None) -> None:
            if point == "export_aside":
                raise KeyboardInterrupt  # stops the export between its two renames
        monkeypatch.setattr(export_mod, "_exchange", lambda a, b: False)
        monkeypatch.setattr(export_mod, "pause", crash)
        with pytest.raises(KeyboardInterrupt):
            export_parquet(out, [("p", store)])
        [aside] = [p for p in (out / "actions").iterdir() if p.name.startswith(".toolkit-aside")]
        assert tree_digest(aside) == old  # the old partition, whole, set aside
        monkeypatch.setattr(export_mod, "pause", lambda point, name=None: None)
        export_parquet(out, [("p", store)])
    assert sorted(p.name for p in (out / "actions").iterdir()) == ["_schema.json", "project=p"]
    assert _partition_rows(out, "actions") == {"p": new_rows}


def test_a_failed_write_leaves_the_old_partition_and_no_staging(project, tmp_path,
                                                                monkeypatch):
    out = tmp_path / "lake"
    with _store(project) as store:
        export_parquet(out, [("p", store)])
        old = tree_digest(out)
        store.conn.execute("DELETE FROM actions WHERE tier = 0")

        def fail(table: str, dest: Path, columns: object) -> None:
            dest.write_bytes(b"PAR1 half")
            raise ToolkitError(f"cannot write {table} as Parquet: disk on fire")
        monkeypatch.setattr(store, "write_parquet", fail)
        with pytest.raises(ToolkitError, match="disk on fire"):
            export_parquet(out, [("p", store)])
    assert tree_digest(out) == old


def test_a_folder_the_export_cannot_change_is_refused_before_anything_is_swapped(
        project, cli_run, tmp_path, immutable):
    """A partition the export cannot remove after its swap (FAULTS G12, chmod 555 as its
    owner): the new data was swapped in, then the export said it failed, left its staging
    folder, and every later export failed on that folder. Every folder it will write in or
    remove is now checked first: refused (exit 1) naming the folder and what to do, nothing
    changed; the same for a dead writer's staging folder that cannot be cleared."""
    from toolkit.errors import RefusedError

    out = tmp_path / "lake"
    assert cli_run("export", "--out", str(out)).exit_code == 0
    db = sqlite3.connect(project.audit_db)
    db.execute("DELETE FROM actions WHERE id = (SELECT max(id) FROM actions)")
    db.commit()
    db.close()
    before = tree_digest(out)
    partition = out / "actions" / "project=acme-api"
    with modes((partition, 0o555)):
        result = run_unprivileged("export", "--out", str(out), cwd=project.root)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"Error: {partition}: folder is not writable; nothing of acme-api was exported. Make "
        f"it writable: chmod u+w {partition}\n")
    assert tree_digest(out) == before
    assert sorted(p.name for p in (out / "actions").iterdir()) == ["_schema.json",
                                                                  "project=acme-api"]
    # a dead writer's staging folder the export must clear, read-only
    leftover = (out / "actions" /
                f"{export_mod.STAGING}{export_mod._tag('project=acme-api')}-0-dead")
    leftover.mkdir()
    (leftover / "part-0.parquet").write_bytes(b"PAR1 old")
    before = tree_digest(out)
    writable = immutable(leftover)
    with _store(project) as store:
        with pytest.raises(RefusedError, match="nothing of acme-api was exported") as caught:
            export_parquet(out, [("acme-api", store)])
        assert caught.value.path == str(leftover)
        assert tree_digest(out) == before
        writable()
        parts = export_parquet(out, [("acme-api", store)])
        assert [p.table for p in parts if p.written] == ["actions"]
        new_rows = store.counts()["actions"]
    assert sorted(p.name for p in (out / "actions").iterdir()) == ["_schema.json",
                                                                  "project=acme-api"]
    assert _partition_rows(out, "actions") == {"acme-api": new_rows}


def test_two_projects_with_one_name_are_refused(shared_project, tmp_path):
    with _store(shared_project) as store, pytest.raises(UsageError, match="share the name 'a'"):
        export_parquet(tmp_path / "lake", [("a", store), ("a", store)])
    assert not (tmp_path / "lake").exists()


def test_two_processes_exporting_into_one_folder_at_once_keep_both_projects(project, tmp_path):
    out = tmp_path / "lake"
    env = dict(os.environ)
    env.pop("TOOLKIT_EDITOR_PAUSE", None)
    # two developers: each has a store of their own (TOOLKIT_DB), one shared folder
    procs = [subprocess.Popen([sys.executable, "-m", "toolkit", "export", "--out", str(out),
                               "--project-name", name], cwd=project.root,
                              env={**env, "TOOLKIT_DB": str(tmp_path / f"{name}.duckdb")},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("alice", "bob")]
    for proc in procs:
        _stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    with _store(project) as store:
        tables = {t for t, kind, _c, _d in store.schema() if kind == "table"}
        with store.actions_scoped("alice"):  # what each exported: the unassigned actions
            unassigned = store.counts()["actions"]
    assert unassigned > 0
    for table in tables:
        assert sorted(p.name for p in (out / table).iterdir()) == [
            "_schema.json", "project=alice", "project=bob"], table
    assert _partition_rows(out, "actions") == {"alice": unassigned, "bob": unassigned}
