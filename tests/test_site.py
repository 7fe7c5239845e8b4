"""toolkit build-site / serve: pages, URL scheme, nav, reproducibility (incremental rebuilds:
tests/test_site_rebuild.py)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests._site_helpers import (
    BUILD_TIME,
    World,
    build,
    keep_as_built,
    make_world,
    put_back,
    scan,
    tree_bytes,
)
from toolkit.reports import page_url, slop_slugs, task_slugs


@pytest.fixture
def built(formats_site: tuple[World, Path]) -> tuple[World, Path]:
    """The formats project's site, built once per session (tests here only read it)."""
    return formats_site


def _search_locations(site: Path) -> set[str]:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    return {d["location"].split("#")[0] for d in index["docs"]}


def test_pages_follow_the_url_scheme(built: tuple[World, Path]) -> None:
    world, site = built
    assert (site / "index.html").is_file()
    entry = (site / "ledger" / "patterns"
             / "run-the-migration-dry-run-before-applying-schema-changes")
    page = scan(entry / "index.html")
    assert page.title.startswith("Run the migration dry-run before applying schema changes - ")
    text = page.body_text
    for expected in ("implementation", "medium", "alembic upgrade head --sql",
                     "dry-run exposed duplicate index name",
                     ".smith/vault/ledger/patterns.md:9"):
        assert expected in text
    assert str(world.root) not in (entry / "index.html").read_text()  # no machine paths
    # related entries are working links
    hrefs = [dict(a).get("href") for t, a in page.tags if t == "a"]
    assert "../../antipatterns/editing-an-applied-migration-in-place/" in hrefs
    assert (site / "slop" / "4b7e2c91" / "index.html").is_file()
    slug = task_slugs(["Cap webhook retries at 5 attempts"])["Cap webhook retries at 5 attempts"]
    assert slug == "cap-webhook-retries-at-5-attempts"
    task = scan(site / "audit" / "tasks" / slug / "index.html").body_text
    assert "Use the HTTP client's built-in retry adapter" in task  # its dead end
    assert "Jittered" in task or "jittered" in task  # its dispatches


def test_slop_page_shows_every_field_and_links_urls_only(built: tuple[World, Path]) -> None:
    _, site = built
    page = scan(site / "slop" / "9c1f4e07" / "index.html")
    hrefs = [dict(a).get("href") for t, a in page.tags if t == "a"]
    assert "https://github.com/example/acme-api/issues/412" in hrefs
    legacy = scan(site / "slop" / "4b7e2c91" / "index.html")
    assert "crates/api/src/handlers/legacy_auth.rs:88" in legacy.body_text
    assert not any("legacy_auth" in (dict(a).get("href") or "") for t, a in legacy.tags)
    for value in ("retained_compatibility", "medium", "auto", "open", "task_01HZX3K9Q2"):
        assert value in legacy.body_text


def test_index_pages_and_dashboard_link_to_the_pages_behind_them(
        built: tuple[World, Path]) -> None:
    _, site = built
    home = scan(site / "index.html")
    hrefs = {dict(a).get("href") for t, a in home.tags if t == "a"}
    for target in ("ledger/patterns/", "ledger/confidence/medium/", "slop/bucket/tool-gaps/",
                   "audit/dispatches/#pending-verification",
                   "audit/tasks/audit-logging-for-admin-endpoints/"):
        assert target in hrefs, target
        assert (site / target.split("#")[0] / "index.html").is_file()
    assert "No task is over the retry limit." in home.body_text
    assert (site / "charts" / "slop-open.svg").is_file()
    for index in ("ledger/category/implementation", "ledger/confidence/low",
                  "slop/bucket/stale-tests", "slop/severity/high", "slop/status/wont-fix",
                  "slop/owner/auto", "slop/ageing", "audit/approaches", "audit/actions",
                  "sessions", "snapshots", "data", "warnings"):
        assert (site / index / "index.html").is_file(), index


def test_entry_pages_are_not_in_the_navigation(built: tuple[World, Path]) -> None:
    _, site = built
    config = yaml.safe_load((site.parent / "site.build" / "mkdocs.yml").read_text())
    flat = json.dumps(config["nav"])
    assert "ledger/patterns/index.md" in flat
    assert "run-the-migration" not in flat and "4b7e2c91" not in flat
    nav_links = [dict(a).get("href") for t, a in scan(site / "index.html").tags
                 if t == "a" and "md-nav__link" in (dict(a).get("class") or "")]
    assert nav_links and not any("run-the-migration" in (h or "") for h in nav_links)
    # but search finds every entry page
    locations = _search_locations(site)
    assert "ledger/patterns/run-the-migration-dry-run-before-applying-schema-changes/" in \
        locations
    assert "slop/4b7e2c91/" in locations


def test_downloads_hold_every_row_as_csv_and_json(built: tuple[World, Path]) -> None:
    _, site = built
    rows = list(csv.DictReader(io.StringIO(
        (site / "data" / "slop_entries.csv").read_text(encoding="utf-8"))))
    assert len(rows) == 3
    data = json.loads((site / "data" / "dispatches.json").read_text(encoding="utf-8"))
    assert len(data) == 3 and {d["task"] for d in data} == {
        "Cap webhook retries at 5 attempts", "Audit logging for admin endpoints"}
    assert "dispatches.csv" in (site / "data" / "index.html").read_text()


def test_same_inputs_give_byte_identical_sites_and_clean_starts_over(
        built: tuple[World, Path], tmp_path: Path) -> None:
    world, site = built
    seen: list[tuple[str, int, int]] = []
    again = build(world, out=tmp_path / "elsewhere" / "site", progress=lambda *a: seen.append(a))
    assert again.mode == "full"
    assert tree_bytes(again.out) == tree_bytes(site)
    # progress was reported over the pages and over the MkDocs build
    assert {s for s, _, _ in seen} == {"Writing pages", "Building HTML"}
    assert ("Writing pages", again.pages, again.pages) in seen
    assert ("Building HTML", again.pages, again.pages) in seen
    (again.out / "stray.html").write_text("left over")
    clean = build(world, out=again.out, clean=True)
    assert clean.mode == "full" and clean.rebuilt == clean.pages
    assert tree_bytes(clean.out) == tree_bytes(site)


def test_charts_are_static_svg_with_fixed_bytes(built: tuple[World, Path]) -> None:
    from toolkit.charts import ChartSpec, Series, render_svg

    spec = ChartSpec(name="t", title="Actions $\\frac$ <b>", labels=("a", "$x$", "c" * 80),
                     series=(Series("tier 0", (1, 2, 3), "#90a4ae"),
                             Series("tier 1", (0, 1, 0), "#ffb300")))
    first, second = render_svg(spec), render_svg(spec)
    assert first == second and first.startswith(b"<?xml")
    assert b"<dc:date>" not in first and b"<text" not in first  # no date; text drawn as paths
    _, site = built
    svg = (site / "charts" / "slop-open.svg").read_text()
    assert "<script" not in svg and "http://" not in svg.replace("http://www.w3.org", "")\
        .replace("http://purl.org", "").replace("http://creativecommons.org", "")\
        .replace("http://matplotlib.org", "")


def test_page_url_and_slugs() -> None:
    assert page_url("index.md") == ""
    assert page_url("ledger/patterns/index.md") == "ledger/patterns/"
    assert page_url("ledger/patterns/x.md") == "ledger/patterns/x/"
    assert slop_slugs(["aaaa1111-1", "aaaa1111-2", "bbbb2222-3"],
                      ["aaaa1111", "aaaa1111", "bbbb2222"]) == [
        "aaaa1111-1", "aaaa1111-2", "bbbb2222"]
    # an id held twice: a page each
    assert slop_slugs(["cccc3333-1", "cccc3333-1"], ["cccc3333", "cccc3333"]) == [
        "cccc3333-1", "cccc3333-1-2"]
    assert task_slugs(["Fix login", "fix login!"]) == {"Fix login": "fix-login",
                                                        "fix login!": "fix-login-2"}


def test_path_like_titles_and_tasks_get_pages_inside_the_site_only(tmp_path: Path) -> None:
    """FAULTS.md A12: a title or task that looks like a path is slugged; every file the build
    writes is inside the output folder (its .build sibling, and the project's store)."""
    import sqlite3

    titles = ["../../etc/passwd", "/abs", "a/b", "CON", ".."]
    world = make_world(tmp_path / "w")
    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    patterns.write_text(patterns.read_text(encoding="utf-8") + "".join(
        f"\n---\n\n**Title:** {t}\n**Date:** 2026-05-01\n**Category:** testing\n"
        "**Confidence:** low\n" for t in titles), encoding="utf-8")
    conn = sqlite3.connect(world.cfg.audit_db)
    conn.execute("PRAGMA journal_mode=DELETE")  # a WAL DB's readers make -wal/-shm beside it
    conn.executemany("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary) "
                     "VALUES ('2026-05-09 10:00:00', ?, 'fork', 'opus', 's')",
                     [(t,) for t in titles])
    conn.commit()
    conn.close()
    before = set(tmp_path.rglob("*"))
    out = tmp_path / "w" / "out" / "site"
    result = build(world, out=out)
    assert result.warnings == []
    allowed = (out, out.parent / "site.build", world.cfg.db_path.parent)
    outside = [p for p in set(tmp_path.rglob("*")) - before - {out.parent}
               if not any(p == a or p.is_relative_to(a) for a in allowed)]
    assert outside == []
    suffix = " - Agent Ledger: acme-api"
    for folder in ("ledger/patterns", "audit/tasks"):
        pages = {scan(p).title.strip().removesuffix(suffix).removeprefix("Task: "): p
                 for p in (out / folder).glob("*/index.html")}
        for title in titles:
            slug = pages[title].parent.name
            assert slug.isascii() and not slug.startswith("."), (title, slug)
            assert pages[title].parent.parent == out / folder


@pytest.fixture(scope="module")
def _linked_world_as_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, Path, Path]:
    """The formats world with its site built into ``w/out/site``, and a copy as built."""
    base = tmp_path_factory.mktemp("links")
    world = make_world(base / "w")
    out = base / "w" / "out" / "site"
    build(world, out=out)
    return world, out, keep_as_built(base / "w")


@pytest.fixture
def built_out(_linked_world_as_built: tuple[World, Path, Path]) -> tuple[World, Path]:
    """That world and its site folder as the first build left them (put back for each
    test: the test may change anything in it)."""
    world, out, as_built = _linked_world_as_built
    put_back(as_built)
    return world, out


@pytest.mark.parametrize("planted", ["site.build/docs/index.md", "site/404.html",
                                     "site.build/docs/ledger"])
def test_a_link_planted_in_the_site_folders_is_never_written_through(
        built_out: tuple[World, Path], tmp_path: Path, planted: str) -> None:
    """The site and its build folder are the toolkit's; a symbolic link in either (a checkout
    that ships .toolkit/, a stray link) was written through: the dashboard's Markdown landed
    in the file a planted docs/index.md pointed at, outside every folder the user gave."""
    from toolkit.errors import UsageError

    world, out = built_out
    victim = tmp_path / "victim"
    link = out.parent / planted
    if link.is_dir():
        shutil.rmtree(link)
        victim.mkdir()
    else:
        link.unlink()
        victim.write_text("theirs")
    link.symlink_to(victim)
    _edit = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    _edit.write_text(_edit.read_text(encoding="utf-8").replace("route table", "route map"),
                     encoding="utf-8")
    before = tree_bytes(tmp_path / "victim") if victim.is_dir() else victim.read_bytes()
    with pytest.raises(UsageError) as err:
        build(world, out=out)
    assert str(err.value) == (
        f"{link}: is a symbolic link (to {victim}); the toolkit never puts one in its site "
        "folders and will not write through it. Remove it, or build with --clean")
    assert (tree_bytes(victim) if victim.is_dir() else victim.read_bytes()) == before
    build(world, out=out, clean=True)  # --clean deletes the link, never what it points at
    assert not link.is_symlink()
    assert (tree_bytes(victim) if victim.is_dir() else victim.read_bytes()) == before


@pytest.mark.parametrize("case", ["page rendered", "unchanged page, full MkDocs run",
                                  "unchanged page"])
def test_a_link_in_a_page_folder_is_refused_before_anything_is_written_into_it(
        built_out: tuple[World, Path], tmp_path: Path, case: str) -> None:
    """The folders of the site's pages (one per entry) are walked for links only before the
    build writes into them: a link planted in the folder of the page the edit renders again
    is refused before MkDocs writes the page; in an unchanged page's folder, it is refused
    when MkDocs runs in full (it writes every page), and otherwise nothing is written into
    that folder, so nothing goes through the link."""
    from toolkit.errors import UsageError
    from toolkit.site import MKDOCS_RUNNING

    world, out = built_out
    edited = out / "ledger" / "patterns" / \
        "run-the-migration-dry-run-before-applying-schema-changes" / "index.html"
    # a page no edit of a ledger entry renders again, nor links to
    link = edited if case == "page rendered" else sorted(out.glob("slop/*/index.html"))[0]
    victim = tmp_path / "victim.html"
    victim.write_text("theirs", encoding="utf-8")
    link.unlink()
    link.symlink_to(victim)
    if case == "unchanged page, full MkDocs run":  # a build stopped while MkDocs ran
        (out.parent / "site.build" / MKDOCS_RUNNING).write_bytes(b"")
    _edit = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    _edit.write_text(_edit.read_text(encoding="utf-8").replace(
        "caught two index-name", "caught three index-name"), encoding="utf-8")
    if case == "unchanged page":
        assert build(world, out=out).mode == "incremental"
        assert "caught three index-name" in edited.read_text(encoding="utf-8")
    else:
        with pytest.raises(UsageError) as err:
            build(world, out=out)
        assert str(err.value) == (
            f"{link}: is a symbolic link (to {victim}); the toolkit never puts one in its "
            "site folders and will not write through it. Remove it, or build with --clean")
    assert victim.read_text(encoding="utf-8") == "theirs"
    build(world, out=out, clean=True)  # --clean deletes the link, never what it points at
    assert not link.is_symlink()
    assert victim.read_text(encoding="utf-8") == "theirs"


def test_a_page_that_cannot_be_written_fails_with_its_own_error_not_a_busy_store(
        tmp_path: Path) -> None:
    """A project deep enough that a page's path passes the system's limit (PATH_MAX) while
    the downloads' thread still writes: the error left with the store's connection busy, and
    the cleanup's "connection is busy with another call" hid the real one."""
    import errno

    from toolkit.config import resolve

    deep = tmp_path
    while len(str(deep)) < 4010 - len("/acme-api"):
        deep = deep / ("d" * min(200, 4010 - len("/acme-api") - len(str(deep)) - 1))
    deep.mkdir(parents=True)
    made = make_world(tmp_path / "w")  # its home (the audit DB: SQLite's paths are short)
    root = made.root.rename(deep / "acme-api")
    env = {"HOME": str(made.home), "NAGI_LEDGER_DB": str(made.cfg.audit_db),
           "CODESMITH_HOME": str(made.home / ".codesmith")}
    world = World(root=root, home=made.home,
                  cfg=resolve(project=root, env=env, cwd=root, analyses=False))
    with pytest.raises(OSError) as err:
        build(world)
    assert err.value.errno == errno.ENAMETOOLONG
    assert str(err.value.filename).startswith(str(world.root / ".toolkit" / "site.build"))


# --------------------------------------------------------------------------- CLI

def test_cli_build_site_and_serve(project, cli_run, tmp_path: Path) -> None:
    # without a kernel (tests/conftest.py): the report's Analyses line is checked where the
    # notebooks run anyway (tests/test_analyses.py)
    result = cli_run("build-site", "--build-time", "2026-05-10T12:00:00")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("Site built (full) in ")
    assert lines[1] == f"Site:     {project.root / '.toolkit' / 'site'}"
    assert lines[3].startswith("View it:  toolkit serve")
    again = cli_run("build-site", "--build-time", "2026-05-10T12:00:00")
    assert again.output.startswith("Site built (incremental)")
    assert ", 0 pages rendered," in again.output

    from toolkit.site import make_server

    server = make_server(project.root / ".toolkit" / "site", "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        with urllib.request.urlopen(f"http://{host}:{port}/ledger/patterns/") as resp:
            assert resp.status == 200 and b"Grep the route table" in resp.read()
        # a second serve of the site on the port the first one holds: said, and it ends
        second = cli_run("serve", "--no-build", "--port", str(port))
        assert (second.exit_code, second.output) == (1, (
            f"Error: cannot listen on 127.0.0.1:{port}: Address already in use. "
            "Choose another --port\n"))
        with urllib.request.urlopen(f"http://{host}:{port}/ledger/patterns/") as resp:
            assert resp.status == 200  # the first one serves on
    finally:
        server.shutdown()
        server.server_close()


def test_the_commands_the_build_prints_can_be_pasted_into_a_shell(project, cli_run) -> None:
    # a folder with a space (or a quote) was printed bare: `python -m http.server -d
    # /home/me/My Sites/acme` pasted as printed serves the wrong folder or fails
    import shlex

    out = project.root / "My Sites" / "it's here"
    result = cli_run("build-site", "--no-analyses", "--out", str(out))
    assert result.exit_code == 0, result.output
    view = result.output.splitlines()[3]
    assert view == (f"View it:  toolkit serve --out {shlex.quote(str(out))}   "
                    f"(or: python -m http.server -d {shlex.quote(str(out))})")
    assert shlex.split(view.split("(or: ")[1].rstrip(")")) == [
        "python", "-m", "http.server", "-d", str(out)]


def test_cli_refuses_to_build_over_a_folder_it_did_not_make(project, cli_run) -> None:
    foreign = project.root / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    result = cli_run("build-site", "--out", str(foreign))
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {foreign} is not empty and was not built by toolkit build-site; refusing to "
        "overwrite it. Choose an empty or new --out folder")
    assert (foreign / "notes.txt").read_text() == "keep me"
    # refused before anything was loaded: no store was made for a build that cannot happen
    assert not (project.root / ".toolkit" / "ledger.duckdb").exists()
    # nor next to a folder it did not make, which would hold its Markdown
    out = project.root / "site"
    (project.root / "site.build").mkdir()
    (project.root / "site.build" / "draft.md").write_text("mine")
    result = cli_run("build-site", "--out", str(out))
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {project.root / 'site.build'} is not empty and was not made by toolkit "
        "build-site; refusing to write the site's Markdown there. Choose another --out, or "
        "move that folder")
    assert (project.root / "site.build" / "draft.md").read_text() == "mine"
    # the folder named by toolkit.yaml's site_dir: the hint names site_dir, not --out
    (project.root / "toolkit.yaml").write_text(f"site_dir: {foreign}\n")
    result = cli_run("build-site")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {foreign} is not empty and was not built by toolkit build-site; refusing to "
        "overwrite it. Choose an empty or new site_dir folder")
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_cli_refuses_a_markdown_folder_that_is_a_link_before_touching_anything(
        project, cli_run, tmp_path: Path) -> None:
    # a crafted checkout (or a stray link) puts <out>.build elsewhere: the build would write
    # its Markdown through the link, and --clean deleted the site before it failed
    # ("Error: Cannot call rmtree on a symbolic link", naming nothing)
    outside = tmp_path / "outside"
    outside.mkdir()
    site = project.root / "site"
    site.mkdir()
    (site / ".toolkit-site").write_text("made by toolkit build-site\n")
    (site / "index.html").write_text("the last build")
    (project.root / "site.build").symlink_to(outside)
    for extra in ((), ("--clean",)):
        result = cli_run("build-site", "--no-analyses", "--out", str(site), *extra)
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines()[-1] == (
            f"Error: {project.root / 'site.build'} is a symbolic link (to {outside}); "
            "refusing to write the site's Markdown through it. Choose another --out, or "
            "remove the link")
        assert list(outside.iterdir()) == []
        assert (site / "index.html").read_text() == "the last build"
        assert (project.root / "site.build").is_symlink()


def test_cli_bad_build_time_and_foreign_demo_dir(project, cli_run) -> None:
    result = cli_run("build-site", "--build-time", "yesterday")
    assert result.exit_code == 2
    assert result.output.strip() == ("Error: --build-time: 'yesterday' is not a time; use "
                                     "Unix seconds or YYYY-MM-DDTHH:MM:SS")
    busy = project.root / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    result = cli_run("build-site", "--demo", "--demo-dir", str(busy))
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"Error: {busy} is not empty and is not a demo written by `toolkit build-site --demo`; "
        "refusing to replace it. Choose another --demo-dir or remove the folder")
    # an --out the build would refuse is refused before the demo world is written
    foreign = project.root / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    fresh = project.root / "fresh-demo"
    result = cli_run("build-site", "--demo", "--demo-dir", str(fresh), "--out", str(foreign))
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {foreign} is not empty and was not built by toolkit build-site; refusing to "
        "overwrite it. Choose an empty or new --out folder")
    assert not fresh.exists() and (foreign / "notes.txt").read_text() == "keep me"


def test_serve_never_serves_a_file_outside_the_site_through_a_link(tmp_path: Path) -> None:
    # `toolkit serve` (SimpleHTTPRequestHandler) followed a link in the site folder: a
    # planted site/etc -> /etc served /etc/passwd to any page in the browser
    import urllib.error

    from toolkit.site import make_server

    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>home</p>")
    (site / "page.html").symlink_to("index.html")  # a link that stays inside: served
    private = tmp_path / "private"
    private.mkdir()
    (private / "secret.txt").write_text("ghp_not_for_the_browser")
    (site / "outside").symlink_to(private)
    (site / "secret.txt").symlink_to(private / "secret.txt")
    server = make_server(site, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        for path in ("/", "/page.html"):
            with urllib.request.urlopen(f"http://{host}:{port}{path}") as resp:
                assert resp.read() == b"<p>home</p>"
        # (a NUL in the path, /index.html%00, made realpath raise: a traceback on the
        # server's stderr and an empty reply)
        for path in ("/outside/secret.txt", "/secret.txt", "/outside/", "/index.html%00"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://{host}:{port}{path}")
            err.value.close()  # the error is the response: its connection
            assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_cli_serve_without_a_site(project, cli_run) -> None:
    result = cli_run("serve", "--no-build", "--port", "0")
    assert result.exit_code == 1
    assert result.output.strip() == (f"Error: no site at {project.root / '.toolkit' / 'site'}. "
                                     "Run `toolkit build-site` first")


def test_source_date_epoch_sets_the_build_time() -> None:
    from toolkit import clock

    assert clock.now(None, {"SOURCE_DATE_EPOCH": "1778414400"}) == BUILD_TIME
    assert clock.now("2026-05-10T12:00:00", {}) == BUILD_TIME
    assert clock.now("2026-05-10T14:00:00+02:00", {}) == BUILD_TIME
    assert os.environ.get("SOURCE_DATE_EPOCH") is None


def test_every_page_kind_has_a_template_and_templates_are_strict(tmp_path: Path) -> None:
    import dataclasses

    import jinja2

    from toolkit import reports
    from toolkit.reports import Page, Table
    from toolkit.site import TEMPLATES_DIR, _Renderer

    kinds = [c for c in vars(reports).values()
             if isinstance(c, type) and issubclass(c, Page) and c is not Page]
    assert len(kinds) >= 15
    for kind in kinds:
        assert (TEMPLATES_DIR / kind.template).is_file(), kind.__name__
        assert dataclasses.is_dataclass(kind)
    # an undefined name in a template is an error, never an empty string
    (tmp_path / "base.md.j2").write_text("{{ page.no_such_field }}")

    @dataclasses.dataclass(kw_only=True)
    class Probe(Page):
        template = "base.md.j2"

    with pytest.raises(jinja2.UndefinedError):
        _Renderer(tmp_path).render(Probe(path="x.md", title="t"))
    assert Table(("a",), []).empty == "Nothing to show."


def test_every_internal_link_and_anchor_resolves(built: tuple[World, Path]) -> None:
    """Tables are HTML the toolkit writes (MkDocs does not check their links): check them all,
    with the anchors they point at."""
    from urllib.parse import unquote, urljoin, urlsplit

    _, site = built
    ids: dict[Path, set[str]] = {}

    def anchors(page: Path) -> set[str]:
        if page not in ids:
            ids[page] = {dict(a).get("id") for _, a in scan(page).tags} - {None}
        return ids[page]

    checked = 0
    for page in sorted(site.rglob("*.html")):
        url = "http://site/" + page.relative_to(site).as_posix().removesuffix("index.html")
        for tag, attrs in scan(page).tags:
            href = dict(attrs).get("href") if tag == "a" else None
            if not href or href.startswith(("http://", "https://", "mailto:")):
                continue
            target = urlsplit(urljoin(url, href))
            if target.netloc != "site":
                continue
            path = site / unquote(target.path.lstrip("/"))
            if path.is_dir():
                path = path / "index.html"
            assert path.is_file(), (page, href)
            if target.fragment and path.suffix == ".html" and target.fragment != "__skip":
                assert target.fragment in anchors(path), (page, href)
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_stops_on_ctrl_c_and_ends_as_terminated_on_kill(project, signum) -> None:
    """Ctrl-C is the way `serve` says to stop it: "Stopped.", exit 0. `kill` (a service
    manager) ended it the same way, though every other command ends on SIGTERM with
    "Terminated." and 143 (`toolkit --help`'s exit codes): now it does too."""
    site = project.root / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>home</p>")
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "serve", "--no-build", "--out",
                             str(site), "--port", "0"], cwd=project.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server listens once it says so
        assert line.startswith(f"Serving {site} at http://127.0.0.1:"), line
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url) as resp:
            assert resp.read() == b"<p>home</p>"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if signum == signal.SIGINT:
        assert (proc.returncode, out, err) == (0, "Stopped.\n", "")
    else:
        assert (proc.returncode, out, err) == (143, "", "Terminated.\n")
