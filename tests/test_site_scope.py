"""site_scope (issue 15 item 7): the nagi-ledger audit DB and the CodeSmith slop ledger are
shared by every project of a user. A project's site shows its own actions and the unassigned
ones (labelled), unless ``site_scope: all`` (toolkit.yaml, $TOOLKIT_SITE_SCOPE, build-site
--scope all); counts, charts' tables and downloads agree under each scope, and the API reads
the same rows."""

from __future__ import annotations

import csv
import datetime as dt
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests._site_helpers import BUILD_TIME, World, build, make_world, open_store, scan

# Rows of three kinds besides the fixture's (2 acme-api actions, 1 with no project).
WEB = [("2026-05-08 09:00:00", 2, "deploy", "WEBONLY shipped the storefront", "acme-web"),
       ("2026-05-08 09:10:00", 1, "git", "WEBONLY rebased the storefront", "acme-web"),
       ("2026-05-08 09:20:00", 0, "tool_failure", "WEBONLY npm test failed", "acme-web")]
OWN = [("2026-05-08 10:00:00", 1, "git", "OWNCASE tagged the release", " Acme-API ")]
UNASSIGNED = [("2026-05-08 11:00:00", 0, "tool_failure", "BLANKPROJECT pytest failed", "")]


def scoped_world(base: Path) -> World:
    world = make_world(base)
    conn = sqlite3.connect(world.cfg.audit_db)
    conn.executemany("INSERT INTO actions (ts, tier, category, description, project) "
                     "VALUES (?, ?, ?, ?, ?)", WEB + OWN + UNASSIGNED)
    conn.commit()
    conn.close()
    return world


class _Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (header row first)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append(re.sub(r"\s+", " ", "".join(self._cell)).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(page: Path) -> dict[str, list[list[str]]]:
    """The page's tables by their first header cell's text ('Tier', 'Project', 'ID'...)."""
    parser = _Tables()
    parser.feed(page.read_text(encoding="utf-8"))
    return {t[0][0]: t[1:] for t in parser.tables if t and t[0]}


def download(site: Path, name: str) -> list[dict[str, str]]:
    with (site / "data" / name).open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The scoped world (its sources and store), shared by the tests that only read it: they
    build into their own folders."""
    return scoped_world(tmp_path_factory.mktemp("scope"))


@pytest.fixture(scope="module")
def sites(scoped: World) -> tuple[Path, Path]:
    """The scoped world built twice: (site with the default scope, site with site_scope:
    all)."""
    world = scoped
    own = build(world, out=world.root.parent / "site-project").out
    every = build(World(world.root, world.home, world.cfg.with_overrides(site_scope="all")),
                  out=world.root.parent / "site-all").out
    return own, every


def test_default_site_shows_own_and_unassigned_actions_labelled(sites: tuple[Path, Path]
                                                                 ) -> None:
    own, _ = sites
    rows = tables(own / "audit" / "actions" / "index.html")["ID"]
    projects = {r[4] for r in rows}
    descriptions = " ".join(r[5] for r in rows)
    assert projects == {"acme-api", "Acme-API", "(no project)"}
    assert "WEBONLY" not in descriptions and "OWNCASE" in descriptions
    assert "BLANKPROJECT" in descriptions  # a blank project is unassigned, labelled
    assert [r[4] for r in rows if "BLANKPROJECT" in r[5]] == ["(no project)"]
    assert {r["project"] for r in download(own, "actions.csv")} == {"acme-api", " Acme-API ",
                                                                    ""}
    assert not any("WEBONLY" in r["description"] for r in download(own, "actions.csv"))
    stats = scan(own / "audit" / "index.html").body_text
    assert ("Actions shown: this project's (acme-api) and the unassigned ones, labelled "
            "(no project); 3 actions of 1 other project are left out (site_scope: all shows "
            "them).") in stats
    assert "acme-web" not in stats  # other projects are counted, never named
    # the per-project table holds this project (" Acme-API " is one of its names) and the
    # unassigned ones, as every other count of the page does
    per_project = {r[0]: r[-1] for r in tables(own / "audit" / "index.html")["Project"]}
    assert per_project == {"acme-api": "3", "(no project)": "2"}


def test_all_scope_shows_every_project_with_its_project(sites: tuple[Path, Path]) -> None:
    _, every = sites
    rows = tables(every / "audit" / "actions" / "index.html")["ID"]
    assert {r[4] for r in rows} == {"acme-api", "Acme-API", "acme-web", "(no project)"}
    assert [r[4] for r in rows if "WEBONLY" in r[5]] == ["acme-web"] * 3
    per_project = {r[0]: r[-1] for r in tables(every / "audit" / "index.html")["Project"]}
    # " Acme-API " is acme-api's (the scope's rule), under the spelling most of them have
    assert per_project == {"acme-api": "3", "acme-web": "3", "(no project)": "2"}
    assert "Actions shown: every project's (site_scope: all)" in scan(
        every / "audit" / "index.html").body_text
    assert len(download(every, "actions.csv")) == 8


@pytest.mark.parametrize("which,total", [(0, 5), (1, 8)])
def test_counts_agree_with_the_tables_under_each_scope(sites: tuple[Path, Path], which: int,
                                                       total: int) -> None:
    site = sites[which]
    stats = tables(site / "audit" / "index.html")
    all_time = sum(int(r[-1]) for r in stats["Tier"])  # Tier | 7 days | 30 days | All time
    last_week = sum(int(r[1]) for r in stats["Tier"])
    by_project = sum(int(r[-1]) for r in stats["Project"])
    by_category = sum(int(r[-1]) for r in stats["Category"])
    per_day = sum(int(r[-1]) for r in stats["Day"])
    assert all_time == by_project == by_category == total
    assert per_day == last_week == total  # every action is in the last 7 days
    assert len(download(site, "actions.csv")) == total
    assert sum(int(r["actions"]) for r in download(site, "stats_by_tier.csv")) == total
    assert f"newest of {total} actions" in scan(
        site / "audit" / "actions" / "index.html").body_text
    home = tables(site / "index.html")["Day"]  # the dashboard's week by tier
    assert sum(int(r[-1]) for r in home) == total


def test_records_without_a_project_say_they_are_every_projects(sites: tuple[Path, Path]
                                                               ) -> None:
    own, every = sites
    for site in (own, every):
        assert "nagi-ledger records no project for dispatches and approaches" in scan(
            site / "audit" / "dispatches" / "index.html").body_text
        assert "CodeSmith keeps one slop ledger per user, with no project" in scan(
            site / "slop" / "index.html").body_text
    assert download(own, "slop_entries.csv") == download(every, "slop_entries.csv")
    assert download(own, "dispatches.csv") == download(every, "dispatches.csv")


def test_project_name_names_the_project_in_the_shared_audit_db(tmp_path: Path) -> None:
    world = scoped_world(tmp_path)
    (world.root / "toolkit.yaml").write_text("project_name: acme-web\n", encoding="utf-8")
    from toolkit.config import resolve

    cfg = resolve(project=world.root, env=world.env(), today="2026-05-10")
    site = build(World(world.root, world.home, cfg.with_overrides(analyses=False)),
                 out=tmp_path / "site").out
    rows = tables(site / "audit" / "actions" / "index.html")["ID"]
    assert {r[4] for r in rows} == {"acme-web", "(no project)"}
    assert "Agent Ledger: acme-web" in (site / "index.html").read_text(encoding="utf-8")


def test_redacted_site_is_scoped_too(scoped: World, tmp_path: Path) -> None:
    site = build(scoped, out=tmp_path / "site", redact=True).out
    descriptions = {r["description"] for r in download(site, "actions.csv")}
    assert not any("WEBONLY" in d for d in descriptions)
    assert any("OWNCASE" in d for d in descriptions)
    assert "3 actions of 1 other project are left out" in scan(
        site / "audit" / "index.html").body_text


@pytest.fixture(scope="module")
def web_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The formats project with acme-web's actions in the shared audit DB; the CLI cases below
    build its site, one after the other, into the same folder (the later builds rebuild
    what the scope changed, as a user's would)."""
    world = make_world(tmp_path_factory.mktemp("cli-scope"))
    conn = sqlite3.connect(world.cfg.audit_db)
    conn.executemany("INSERT INTO actions (ts, tier, category, description, project) "
                     "VALUES (?, ?, ?, ?, ?)", WEB)
    conn.commit()
    conn.close()
    return world


@pytest.mark.parametrize("flag,env,web", [
    ((), {}, 0),
    (("--scope", "all"), {}, 3),
    ((), {"TOOLKIT_SITE_SCOPE": "all"}, 3),
    (("--scope", "project"), {"TOOLKIT_SITE_SCOPE": "all"}, 0),  # the flag wins
])
def test_build_site_scope_flag_and_environment(web_world: World, cli_run, flag: tuple[str, ...],
                                               env: dict[str, str], web: int
                                               ) -> None:  # type: ignore[no-untyped-def]
    out = web_world.root.parent / "site"
    result = cli_run("--project", str(web_world.root), "build-site", "--no-analyses", "--out",
                     str(out), *flag,
                     env={**web_world.env(), **env})
    assert result.exit_code == 0, result.output
    projects = [r["project"] for r in download(out, "actions.csv")]
    assert projects.count("acme-web") == web
    assert projects.count("acme-api") == 2 and projects.count("") == 1


@pytest.mark.parametrize("yaml,message", [
    ("site_scope: mine\n", "site_scope: 'mine' is not a scope. Use project"),
    ("site_scope: 3\n", "setting site_scope must be project or all, not a number"),
    ("site_scope: [all]\n", "setting site_scope must be project or all, not a list"),
    ("project_name: {a: 1}\n", "setting project_name must be text"),
])
def test_bad_scope_settings_are_usage_errors(project, cli_run, yaml: str, message: str
                                             ) -> None:  # type: ignore[no-untyped-def]
    (project.root / "toolkit.yaml").write_text(yaml, encoding="utf-8")
    result = cli_run("build-site", "--no-analyses")
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.startswith("Error: ") and "toolkit.yaml: " in line and message in line
    assert "\n" not in line and "Traceback" not in result.output
    assert not (project.root / ".toolkit" / "site").exists()


def test_bad_scope_in_the_environment_is_a_usage_error(project, cli_run
                                                       ) -> None:  # type: ignore[no-untyped-def]
    result = cli_run("build-site", "--no-analyses", env={"TOOLKIT_SITE_SCOPE": "everything"})
    assert result.exit_code == 2
    assert result.output.strip().startswith("Error: site_scope: 'everything' is not a scope")
    result = cli_run("build-site", "--no-analyses", "--scope", "everything")
    assert result.exit_code == 2 and "'everything' is not one of 'project', 'all'" in \
        result.output


def test_api_counts_the_sites_actions_and_nagi_ledger_every_projects(scoped: World) -> None:
    from toolkit import Project

    world = scoped
    env_free = dict(vault=world.cfg.vault, slop=world.cfg.slop_path,
                    audit_db=world.cfg.audit_db, today="2026-05-10")
    with Project.open(world.root, **env_free) as own:
        assert sum(r.actions for r in own.stats_by_tier()) == 5
        nagi = own.stats(3650, now=dt.datetime(2026, 5, 10))
        # raw SQL reads the store as it is, as `toolkit query` does
        assert own.sql("SELECT count(*) FROM actions").fetchall() == [(8,)]
        assert sum(r.actions for r in own.stats_by_tier()) == 5  # the scope comes back
    with Project.open(world.root, site_scope="all", refresh=False, **env_free) as every:
        assert sum(r.actions for r in every.stats_by_tier()) == 8
        # nagi-ledger's ledger_stats counts every project's actions, whatever the scope
        assert every.stats(3650, now=dt.datetime(2026, 5, 10)) == nagi
    assert sum(nagi["actions_by_tier"].values()) == 8
    with pytest.raises(Exception, match="is not a scope"):
        Project.open(world.root, site_scope="mine", refresh=False, **env_free)


def test_api_all_time_counts_the_actions_whose_time_is_no_date(tmp_path: Path) -> None:
    """An action whose ``ts`` is no date is in the all-time counts of the site (and its
    ``stats_by_tier`` download): ``stats_by_tier()`` with no ``since`` counts it too, on day
    None, last; a ``since`` leaves it out, as it leaves out every day before."""
    from toolkit import Project

    world = scoped_world(tmp_path / "w")
    conn = sqlite3.connect(world.cfg.audit_db)
    conn.execute("INSERT INTO actions (ts, tier, category, description, project) "
                 "VALUES ('yesterday', 0, 'git', 'UNDATED', 'acme-api')")
    conn.commit()
    conn.close()
    env_free = dict(vault=world.cfg.vault, slop=world.cfg.slop_path,
                    audit_db=world.cfg.audit_db, today="2026-05-10")
    with Project.open(world.root, site_scope="all", **env_free) as every:
        rows = every.stats_by_tier()
        assert rows[-1] == (None, 0, 1)
        download = every.sql("SELECT sum(actions) FROM stats_by_tier").fetchall()[0][0]
        assert sum(r.actions for r in rows) == download == 9
        assert None not in {r.day for r in every.stats_by_tier(since=dt.date(2000, 1, 1))}
    with Project.open(world.root, refresh=False, **env_free) as own:
        assert sum(r.actions for r in own.stats_by_tier()) == 6


def test_scoped_connection_never_changes_the_store(tmp_path: Path) -> None:
    """The scope is a view on one connection: the store's own table keeps every row, and a
    refresh after a scoped build copies nothing twice."""
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    world = scoped_world(tmp_path)
    build(world, out=tmp_path / "site")
    conn = sqlite3.connect(world.cfg.audit_db)
    conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                 "('2026-05-09 09:00:00', 0, 'git', 'WEBONLY later', 'acme-web')")
    conn.commit()
    conn.close()
    with Store.open(world.cfg.db_path, sources=SOURCES) as store:
        store.scope_actions("acme-api")
        assert store.scalar("SELECT count(*) FROM actions") == 5
        store.scope_actions(None)
        store.refresh(world.cfg)
        assert store.scalar("SELECT count(*) FROM actions") == 9
        assert store.scalar("SELECT count(DISTINCT id) FROM actions") == 9


def test_a_block_that_only_reads_answers_its_question_again_under_another_scope(
        tmp_path: Path) -> None:
    """A site's build reads the store in a block that keeps the answers of its questions
    (Store.reading: some are asked two or three times); the same question asked under
    another scope of the actions is answered for that scope, not as before."""
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    world = scoped_world(tmp_path)
    sql = "SELECT count(*) FROM actions"
    with Store.open(world.cfg.db_path, sources=SOURCES) as store:
        store.refresh(world.cfg)
        with store.actions_scoped("acme-api"), store.reading():
            assert store.fetch(sql)[1] == [(5,)]
            assert store.fetch(sql)[1] == [(5,)]
            store.scope_actions(None)
            assert store.fetch(sql)[1] == [(8,)]
            store.scope_actions("acme-web")
            assert store.fetch(sql)[1] == [(5,)]  # its 3, the one without and the blank one


def test_a_hostile_project_name_is_text_in_the_per_project_table(hostile_site
                                                                 ) -> None:  # type: ignore[no-untyped-def]
    _world, site = hostile_site  # built with site_scope: all (tests/_site_helpers.make_world)
    page = site / "audit" / "index.html"
    assert "<img src=x onerror=alert(5)>" in {r[0] for r in tables(page)["Project"]}
    assert not any(tag == "img" and any(k == "onerror" for k, _ in attrs)
                   for tag, attrs in scan(page).tags)


def test_the_store_reads_its_scope_again_after_a_build_released_it(
        scoped: World, tmp_path: Path) -> None:
    """The build gives back DuckDB's memory before MkDocs runs by closing the store's
    connection (Store.release); a caller that reads the store afterwards gets the same rows,
    of the same scope, from the connection opened again (tests/test_store_release.py: a
    closed store is not opened again, and a store over the caller's connection keeps it)."""
    from toolkit.site import build_site

    world = scoped
    sql = "SELECT description FROM actions ORDER BY id"
    with open_store(world) as store:
        store.refresh(world.cfg)
        store.scope_actions(world.cfg.action_scope)
        before = store.fetch(sql)[1]
        assert before and not any("WEBONLY" in d for (d,) in before)
        build_site(world.cfg, store, out=tmp_path / "site", build_time=BUILD_TIME)
        assert store.action_scope == world.cfg.action_scope
        assert store.fetch(sql)[1] == before
