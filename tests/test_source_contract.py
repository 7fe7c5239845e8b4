"""Each source's contract (toolkit.source.Source) is what the config, the CLI and the store use:
a setting declared by a source is a toolkit.yaml key, an environment variable and a global
option without being listed anywhere else."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from toolkit import config as config_mod
from toolkit.cli import cli
from toolkit.loaders import SOURCES, settings
from toolkit.source import Place


@pytest.mark.parametrize("setting", settings(), ids=lambda s: s.key)
def test_a_declared_setting_resolves_flag_over_yaml_over_env_over_default(tmp_path, setting):
    root = (tmp_path / "project").resolve()
    root.mkdir()
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    cfg = config_mod.resolve(project=root, env=env)
    assert getattr(cfg, setting.attr) == setting.default(Place(root, home, env))
    if setting.env:
        env[setting.env] = str(tmp_path / "from-env")
        cfg = config_mod.resolve(project=root, env=env)
        assert getattr(cfg, setting.attr) == tmp_path / "from-env"
    (root / "toolkit.yaml").write_text(f"{setting.key}: from-yaml\n", encoding="utf-8")
    cfg = config_mod.resolve(project=root, env=env)
    assert getattr(cfg, setting.attr) == root / "from-yaml"
    cfg = config_mod.resolve(project=root, env=env, **{setting.key: str(tmp_path / "flag")})
    assert getattr(cfg, setting.attr) == tmp_path / "flag"


def test_a_declared_setting_is_a_typed_toolkit_yaml_key(tmp_path, cli_run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for setting in settings():
        (tmp_path / "toolkit.yaml").write_text(f"{setting.key}: [a]\n", encoding="utf-8")
        result = cli_run("status")
        assert result.exit_code == 2
        assert f"setting {setting.key} must be text (a path), not a list" in result.output


def test_each_declared_flag_is_a_global_option_with_its_help():
    options = {p.name: p for p in cli.params if isinstance(p, click.Option)}
    for setting in settings():
        option = options[setting.key]
        assert option.opts == [setting.flag]
        assert option.help == setting.help
        assert isinstance(option.type, click.Path)
        assert option.type.file_okay is not setting.folder
        assert option.type.dir_okay is setting.folder


def test_sources_and_settings_have_unique_names():
    names = [s.name for s in SOURCES]
    keys = [s.key for s in settings()]
    assert len(set(names)) == len(names)
    assert len(set(keys)) == len(keys)
    assert len({s.rank for s in settings()}) == len(keys)


def test_settings_are_every_sources_settings():
    """``settings()`` (the global options, toolkit.yaml's keys) reads only the sources that
    declare settings, without importing the history's loader: none of the others declares
    one, so no source's setting is left out of the options."""
    every = sorted((s for src in SOURCES for s in src.settings), key=lambda s: s.rank)
    assert settings() == every


def test_the_store_loads_the_sources_it_is_handed(project, tmp_path):
    from toolkit.store import Store

    cfg = config_mod.resolve(cwd=project.root, env={"HOME": str(project.home)})
    only_slop = [s for s in SOURCES if s.name == "slop"]
    with Store.open(tmp_path / "slop-only.duckdb", sources=only_slop) as store:
        report = store.refresh(cfg)
        assert [r.source for r in report.results] == ["slop"]
        assert store.counts()["slop_entries"] == 3
        assert store.counts()["ledger_entries"] == 0  # m001 made it; no source handed fills it
        assert "goals" not in store.tables() and "ledger_versions" not in store.tables()
        assert set(store.table_docs()) == {"slop_entries"}


def test_paths_of_settings_are_paths(project):
    cfg = config_mod.resolve(cwd=project.root, env={"HOME": str(project.home)})
    for setting in settings():
        value = getattr(cfg, setting.attr)
        assert value is None or isinstance(value, Path)


def test_a_source_loaded_by_other_toolkit_code_is_loaded_again_in_full(tmp_path):
    """The store records, with each source's fingerprint, a stamp of the toolkit's code. An
    unchanged source is skipped; after an upgrade (another stamp) every source is read again
    in full, so a fix in how rows are read reaches a store loaded before it. Seen here through
    an audit row edited in place: an ordinary refresh copies only new rows, a full one all."""
    import sqlite3

    from tests._site_helpers import make_world, open_store

    world = make_world(tmp_path)
    with open_store(world) as store:
        store.refresh(world.cfg)
        db = world.cfg.audit_db
        conn = sqlite3.connect(db)
        conn.execute("UPDATE actions SET description = 'edited in place' WHERE id = 1")
        conn.commit()
        conn.close()
        assert store.refresh(world.cfg, only=["ledger"]).results[0].skipped
        store.refresh(world.cfg)  # the DB's file changed: new rows only
        assert store.scalar("SELECT description FROM actions WHERE id = 1") != "edited in place"
        store.conn.execute("UPDATE _sources SET fingerprint = regexp_replace(fingerprint, "
                           "'@[0-9a-f]+$', '@0000000000000000')")
        report = store.refresh(world.cfg)
        assert not any(r.skipped for r in report.results if r.found)
        assert store.scalar("SELECT description FROM actions WHERE id = 1") == "edited in place"
        assert all(r.skipped for r in store.refresh(world.cfg).results if r.found)
