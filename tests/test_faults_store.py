"""FAULTS.md I1-I2: the store path is a DuckDB file or nothing; toolkit.yaml values are typed.

Every case runs through the CLI and checks what a user sees (one `Error:` line, its exit
code) and that nothing was created or changed where the path pointed.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

NOTHING_CHANGED = ("not a toolkit store; nothing was changed in it. Point --db (or "
                   "TOOLKIT_DB, or `db:` in toolkit.yaml) at a DuckDB file or a new path")


def _sqlite_file(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('theirs')")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("command", [("status",), ("load",), ("query", "SELECT 1")])
@pytest.mark.parametrize("name, content, kind", [
    ("ledger.json", b'{"entries": []}\n', "a file without DuckDB's header"),
    ("ledger.csv", b"a,b\n1,2\n", "a file without DuckDB's header"),
    ("empty.duckdb", b"", "an empty file"),
    ("notes.parquet", b"PAR1" + b"\0" * 20, "a Parquet file"),
])
def test_i1_a_store_path_that_is_another_kind_of_file_is_refused(project, cli_run, tmp_path,
                                                                  command, name, content, kind):
    db = tmp_path / name
    db.write_bytes(content)
    result = cli_run("--db", str(db), *command)
    assert result.exit_code == 65
    assert result.stderr.splitlines() == [f"Error: {db}: is {kind}, {NOTHING_CHANGED}"]
    assert db.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(db.name)) == [name]


def test_i1_another_programs_sqlite_db_is_refused_and_no_extension_is_fetched(project, tmp_path):
    """TOOLKIT_DB at a SQLite file made DuckDB try to download sqlite_scanner. Run as a real
    process with an empty extension folder: nothing may appear in it."""
    db = _sqlite_file(tmp_path / "notes.db")
    before = db.read_bytes()
    env = {**os.environ, "TOOLKIT_DB": str(db), "HOME": str(tmp_path / "home")}
    for command in (["status"], ["query", "SELECT 1"]):
        proc = subprocess.run([sys.executable, "-m", "toolkit", *command], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 65
        assert proc.stderr.splitlines() == [
            f"Error: {db}: is a SQLite database, {NOTHING_CHANGED}"]
    assert db.read_bytes() == before
    assert not (tmp_path / "home" / ".duckdb").exists()


def test_i1_another_programs_duckdb_file_is_not_migrated_into(project, cli_run, tmp_path):
    import duckdb

    db = tmp_path / "theirs.duckdb"
    conn = duckdb.connect(str(db))
    conn.execute("CREATE TABLE sales (amount INTEGER)")
    conn.close()
    result = cli_run("--db", str(db), "load")
    assert result.exit_code == 65
    assert result.stderr.splitlines() == [
        (f"Error: {db}: is a DuckDB database of another program, not a toolkit store; nothing "
        "was changed in it. Point --db (or TOOLKIT_DB, or `db:` in toolkit.yaml) at a new file")]
    conn = duckdb.connect(str(db), read_only=True)
    tables = conn.execute("SELECT table_name FROM information_schema.tables").fetchall()
    conn.close()
    assert tables == [("sales",)]


def test_i1_a_fifo_store_is_refused_without_opening_it(project, tmp_path):
    """`status` used to hang forever opening the FIFO; a real process proves it does not."""
    fifo = tmp_path / "store.duckdb"
    os.mkfifo(fifo)
    env = {**os.environ, "HOME": str(project.home)}
    proc = subprocess.run([sys.executable, "-m", "toolkit", "--db", str(fifo), "status"],
                          env=env, capture_output=True, text=True, timeout=120, check=False,
                          cwd=project.root)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        (f"Error: {fifo}: is not a regular file (a FIFO, socket or device); the store must be "
        "a DuckDB file")]


def test_i1_a_folder_as_store_from_the_environment_is_refused(project, cli_run, tmp_path):
    folder = tmp_path / "stores"
    folder.mkdir()
    result = cli_run("status", env={"TOOLKIT_DB": str(folder)})
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        (f"Error: {folder}: is a folder; the store must be a DuckDB file. Give a file path, "
        f"e.g. {folder / 'ledger.duckdb'}")]
    assert list(folder.iterdir()) == []


def test_i1_delete_it_is_said_only_for_a_damaged_store_of_ours(project, cli_run):
    assert cli_run("load").exit_code == 0
    db = project.root / ".toolkit" / "ledger.duckdb"
    data = bytearray(db.read_bytes())
    data[:8] = b"\xff" * 8  # the header checksum: still DuckDB's file, no longer valid
    db.write_bytes(bytes(data))
    result = cli_run("status")
    assert result.exit_code == 65
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Error: {db}: cannot open the store: ")
    assert line.endswith("Delete it; `toolkit load` rebuilds it from the sources")


def test_i1_a_store_under_a_file_is_one_line(project, cli_run):
    result = cli_run("--db", "/dev/null/x.duckdb", "status")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "Error: /dev/null/x.duckdb: a part of this path is a file, not a folder"]


@pytest.mark.parametrize("yaml_text, message", [
    ("db: {a: 1}\n", "setting db must be text (a path), not a mapping"),
    ("vault: [one, two]\n", "setting vault must be text (a path), not a list"),
    ("slop: 12\n", "setting slop must be text (a path), not a number"),
    ("audit_db: true\n", "setting audit_db must be text (a path), not true/false"),
    ("site_url: {x: 1}\n", "setting site_url must be text (a URL), not a mapping"),
    ("max_file_mb: [1]\n", "setting max_file_mb must be a number of MB, not a list"),
    ("today: 2026\n", "setting today must be a date (YYYY-MM-DD), not a number"),
    ("publish: [acme/api]\n",
     "setting publish must be a mapping (repo, labels, title, api_url, key), not a list"),
    ("publish: {repo: {a: 1}}\n", "setting publish.repo must be text (OWNER/NAME), not a mapping"),
    ("publish: {labels: [ok, {a: 1}]}\n",
     "setting publish.labels must be a list of labels, not a list with a value that is not text"),
])
def test_i2_a_toolkit_yaml_value_of_the_wrong_type_is_a_usage_error(project, cli_run, yaml_text,
                                                                    message):
    cfg = project.root / "toolkit.yaml"
    cfg.write_text(yaml_text, encoding="utf-8")
    before = sorted(p.name for p in project.root.iterdir())
    result = cli_run("status")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: {cfg}: {message}"]
    assert sorted(p.name for p in project.root.iterdir()) == before


def test_i2_unknown_keys_that_are_not_text_and_typos_under_publish(project, cli_run):
    cfg = project.root / "toolkit.yaml"
    cfg.write_text("1: x\n", encoding="utf-8")
    result = cli_run("status")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith(f"Error: {cfg}: unknown setting(s) 1. ")
    cfg.write_text("publish: {lables: [x]}\n", encoding="utf-8")
    result = cli_run("status")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        (f"Error: {cfg}: unknown setting(s) publish.lables. Known: api_url, key, labels, repo, "
        "title")]


def test_no_connection_installs_or_autoloads_an_extension(project, cli_run):
    """The store's own connection and the locked-down query connection both say so."""
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    assert cli_run("load").exit_code == 0
    settings = ("SELECT current_setting('autoinstall_known_extensions') AS install, "
                "current_setting('autoload_known_extensions') AS autoload")
    result = cli_run("query", settings, "--format", "csv")
    assert result.output.splitlines() == ["install,autoload", "false,false"]
    with Store.open(project.root / ".toolkit" / "ledger.duckdb", sources=SOURCES) as store:
        assert store.fetch(settings)[1] == [(False, False)]


def test_i1_a_config_fifo_is_refused_without_opening_it(project, tmp_path):
    fifo = tmp_path / "toolkit.yaml"
    os.mkfifo(fifo)
    env = {**os.environ, "HOME": str(project.home)}
    proc = subprocess.run([sys.executable, "-m", "toolkit", "--config", str(fifo), "status"],
                          env=env, capture_output=True, text=True, timeout=120, check=False,
                          cwd=project.root)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"Error: {fifo}: the config file is not a regular file"]


def _refused(result, link: Path, target: Path, root: Path, refusing: str) -> None:  # type: ignore[no-untyped-def]
    """``result`` (a command's) is G6's refusal of ``link``, one Error line, exit 1."""
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {link}: is a symlink to {target}, outside the project folder ({root}); "
        f"{refusing}")


@pytest.mark.parametrize("command", [("load",), ("status",), ("handoff",),
                                     ("build-site", "--no-analyses")])
def test_a_toolkit_folder_linked_outside_the_project_is_refused(project, cli_run, tmp_path,
                                                                command):
    # a checkout that ships `.toolkit` as a link (or one left from elsewhere): the store, its
    # caches, the handoff state and the site were all written wherever the link pointed
    outside = tmp_path / "outside"
    outside.mkdir()
    (project.root / ".toolkit").symlink_to(outside)
    _refused(cli_run(*command), project.root / ".toolkit", outside, project.root,
             "refusing to keep the store and the site there. Replace the link with a folder, "
             "or name those places in toolkit.yaml (db:, site_dir:)")
    assert cli_run("audit", "brief").exit_code == 0  # (keeps nothing there)
    assert list(outside.iterdir()) == []
    # named by the user, the place is used as named
    (project.root / "toolkit.yaml").write_text(
        f"db: {outside / 'ledger.duckdb'}\nsite_dir: {outside / 'site'}\n")
    assert cli_run("load").exit_code == 0
    assert (outside / "ledger.duckdb").is_file()


@pytest.mark.parametrize("name", ["site", "ledger.duckdb", "ledger.duckdb.cache",
                                  "site.build", "ledger.duckdb.wal"])
def test_a_link_in_the_toolkit_folder_leading_outside_is_refused(project, cli_run, tmp_path,
                                                                 name):
    """Not only .toolkit itself: a link in it where the toolkit writes (its site, store,
    caches, build folder) had the site built and `--clean` deleting the link's
    target, the store or its caches written outside the project. Refused as .toolkit is; a
    link staying inside is followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("keep", encoding="utf-8")
    (project.root / ".toolkit").mkdir()
    link = project.root / ".toolkit" / name
    link.symlink_to(outside)
    for command in (("build-site", "--clean", "--no-analyses"), ("load",), ("handoff",)):
        _refused(cli_run(*command), link, outside, project.root,
                 "refusing to write through it. Remove the link, or name the places in "
                 "toolkit.yaml (db:, site_dir:)")
    # the commands that keep nothing there run: a hook's writes are not lost
    assert cli_run("audit", "log-action", "linked", "--tier", "1",
                   "--category", "test").exit_code == 0
    assert cli_run("audit", "brief").exit_code == 0
    assert [p.name for p in outside.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "outside.build").exists()
    link.unlink()
    (project.root / "inside").mkdir()
    if name in ("site", "ledger.duckdb.cache"):  # folders: a link inside is followed
        link.symlink_to(project.root / "inside")
        assert cli_run("load").exit_code == 0


def test_a_toolkit_folder_linked_inside_the_project_is_followed(project, cli_run):
    (project.root / "state").mkdir()
    (project.root / ".toolkit").symlink_to(project.root / "state")
    assert cli_run("load").exit_code == 0
    assert (project.root / "state" / "ledger.duckdb").is_file()
