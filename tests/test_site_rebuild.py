"""A rebuild renders again only the pages whose data, templates or code changed (the render
cache in the build folder), and its output is what a full build makes (issue 16 item 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests._site_helpers import World, build, make_world, tree_bytes
from toolkit.site import RENDER_CACHE, SEARCH_MAP, TABLES, TEMPLATES_DIR, BuildResult

ENTRY = "ledger/patterns/grep-the-route-table-before-adding-a-new-endpoint"


@pytest.fixture(scope="module")
def _first_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, BuildResult, Path]:
    base = tmp_path_factory.mktemp("rebuild")
    world = make_world(base / "w")
    first = build(world)
    assert first.mode == "full" and first.warnings == []
    shutil.copytree(base / "w", base / "as-built", symlinks=True)  # with the files' mtimes
    return world, first, base / "as-built"


@pytest.fixture
def built_world(_first_build: tuple[World, BuildResult, Path]) -> tuple[World, BuildResult]:
    """The formats world and its first full build (the site is in the project's default
    folder), exactly as built: put back for each test at the same paths, file times included
    (MkDocs' dirty build compares them), from a copy made once per module. The test may
    change anything in it."""
    world, first, as_built = _first_build
    live = as_built.parent / "w"
    shutil.rmtree(live)
    shutil.copytree(as_built, live, symlinks=True)
    return world, first


def test_unchanged_pages_are_not_rendered_again_and_a_template_edit_reaches_every_page(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    world, first = built_world
    # a copy of the templates (edited below); the pages record what the templates hold,
    # wherever they are, so the first build's pages are those of this copy
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES_DIR, templates)
    docs = first.build_dir / "docs"
    site_before = tree_bytes(first.out)

    # nothing changed: no page is written, none rebuilt, the site is the same bytes
    again = build(world, templates=templates)
    assert again.mode == "incremental"
    assert [w for w in again.written if w.endswith(".md")] == []
    assert again.rebuilt == 0
    assert tree_bytes(again.out) == site_before

    # a file of the build folder edited by hand is written again from its page
    md = docs / f"{ENTRY}.md"
    original = md.read_bytes()
    md.write_bytes(b"# tampered\n")
    fixed = build(world, templates=templates)
    assert fixed.written == [f"{ENTRY}.md"]
    assert md.read_bytes() == original
    assert tree_bytes(fixed.out) == site_before

    # a damaged cache is ignored: every page is rendered, nothing differs
    (first.build_dir / RENDER_CACHE).write_text("{not json", encoding="utf-8")
    assert build(world, templates=templates).written == []

    # a file of the tables the hook puts in place, changed by hand: the pages with a table
    # in it are rendered again, and it holds their tables again
    shard = sorted((first.build_dir / TABLES).iterdir())[0]
    kept = shard.read_bytes()
    shard.write_text("{}", encoding="utf-8")
    assert build(world, templates=templates).written == []
    assert shard.read_bytes() == kept

    # a template edit reaches every page made from it, though no data changed
    entry_tpl = templates / "ledger_entry.md.j2"
    text = entry_tpl.read_text(encoding="utf-8")
    at = text.rindex("{% endblock %}")
    entry_tpl.write_text(text[:at] + "\nZanzibar footer line.\n" + text[at:], encoding="utf-8")
    edited = build(world, templates=templates)
    pages = [p for p in docs.rglob("*.md")
             if "Zanzibar footer line." in p.read_text(encoding="utf-8")]
    assert f"{ENTRY}.md" in edited.written
    assert len(pages) == len([w for w in edited.written if w.endswith(".md")]) > 1
    assert "Zanzibar footer line." in (edited.out / ENTRY / "index.html").read_text()

    # and the result is what a full build with the edited templates makes
    full = build(world, out=tmp_path / "full" / "site", clean=True, templates=templates)
    assert tree_bytes(edited.out) == tree_bytes(full.out)


def test_search_index_stays_complete_when_its_map_is_damaged_or_stale(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    world, first = built_world
    index = first.out / "search" / "search_index.json"
    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")

    # the map is damaged: the index is read in full instead
    (first.build_dir / SEARCH_MAP).write_text('{"index": [1, 2], "pages": {"x/": [0, 9', "utf-8")
    patterns.write_text(text.replace("already existed under a different verb",
                                     "already existed under a different verb zanzibarquux"),
                        encoding="utf-8")
    second = build(world)
    assert second.mode == "incremental" and second.rebuilt == 1

    # the index was rewritten by hand (same map, other bytes): the map no longer describes it
    docs = json.loads(index.read_text(encoding="utf-8"))
    index.write_text(json.dumps(docs, indent=1), encoding="utf-8")
    patterns.write_text(text.replace("already existed under a different verb",
                                     "already existed under a different verb zanzibarquuy"),
                        encoding="utf-8")
    third = build(world)
    assert third.mode == "incremental" and third.rebuilt == 1
    found = [d["location"] for d in json.loads(index.read_text(encoding="utf-8"))["docs"]
             if "zanzibarquuy" in d["text"]]
    assert found == [f"{ENTRY}/"]  # an entry page is one search entry

    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert index.read_bytes() == (full.out / "search" / "search_index.json").read_bytes()
    assert third.search_docs == full.search_docs


def test_damaged_caches_of_compiled_templates_and_charts_give_the_same_site(
        tmp_path: Path) -> None:
    """The build folder keeps the compiled templates, the theme's and the pages' (jinja-cache),
    and the drawn charts (chart-cache); a damaged or lost file there is made again, and the
    site does not change.
    The chart process kept from the last build may have ended since: a new one draws them."""
    import toolkit.site as site_module

    world = make_world(tmp_path / "w")
    site_module._BYTECODE.clear()  # as a new process (else they come from memory)
    site_module._DRAWN.clear()
    first = build(world, clean=True)
    site_before = tree_bytes(first.out)
    compiled = sorted((first.build_dir / "jinja-cache").iterdir())
    charts = sorted((first.build_dir / "chart-cache").iterdir())
    assert compiled and charts
    assert first.charts_drawn == len(charts)
    ended = list(site_module._CHART_IDLE)
    assert ended  # the chart process is kept for the next build ...
    for proc in ended:  # ... and ends before it
        proc.kill()
        proc.wait()
    for f in compiled:
        f.write_bytes(b"\x00garbage")
    charts[0].unlink()
    site_module._BYTECODE.clear()  # as a new process: only the files
    site_module._DRAWN.clear()
    # a full build that keeps the build folder's caches: the site and the page records gone
    shutil.rmtree(first.out)
    for record in (RENDER_CACHE, "state.json"):
        (first.build_dir / record).unlink(missing_ok=True)
    shutil.rmtree(first.build_dir / TABLES)
    again = build(world)
    assert again.mode == "full" and again.rebuilt > 0
    assert tree_bytes(again.out) == site_before
    assert charts[0].is_file() and again.charts_drawn == 1  # only the lost one
    pids = {p.pid for p in site_module._CHART_IDLE}
    assert pids and not pids & {p.pid for p in ended}  # a new one drew them
    assert all(f.read_bytes() != b"\x00garbage" for f in compiled)  # compiled again



def test_a_change_that_reaches_other_entries_pages_rebuilds_them_as_a_clean_build_would(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """An entry's page shows more than its own row: the titles of the entries its Related
    text names, links to audit tasks (another source). Unchanged entries' pages are not even
    made again on a rebuild, so a change to any of those must still reach them: the pages and
    the search index are then exactly what a clean build makes."""
    import sqlite3

    world, first = built_world
    linking = "ledger/antipatterns/editing-an-applied-migration-in-place.md"
    slop_page = "slop/4b7e2c91.md"

    def html(page: str) -> str:
        return (first.out / page.removesuffix(".md") / "index.html").read_text(encoding="utf-8")

    assert "run-the-migration-dry-run" in html(linking)
    assert ">task_01HZX3K9Q2</a>" not in html(slop_page)

    # the entry the antipattern's Related names is renamed: the link on that page goes
    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")
    patterns.write_text(text.replace(
        "**Title:** Run the migration dry-run before applying schema changes",
        "**Title:** Dry-run every migration zanzibarquux"), encoding="utf-8")
    # a dispatch for the slop entry's task (the audit DB, not the slop ledger, changed): its
    # page now links to the task's page
    conn = sqlite3.connect(world.home / ".nagi" / "ledger.db")
    conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, verdict) "
                 "VALUES ('2026-05-09 10:00:00', 'task_01HZX3K9Q2', 'general-purpose', "
                 "'sonnet', 'Drop the legacy header', NULL)")
    conn.commit()
    conn.close()
    again = build(world)
    assert again.mode == "incremental"
    assert {linking, slop_page} <= set(again.written)
    assert "ledger/patterns/run-the-migration-dry-run-before-applying-schema-changes.md" \
        in again.removed
    assert "run-the-migration-dry-run" not in html(linking)
    assert ">task_01HZX3K9Q2</a>" in html(slop_page)
    # the other entries' pages were left as they were
    assert "ledger/patterns/grep-the-route-table-before-adding-a-new-endpoint.md" \
        not in again.written

    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert tree_bytes(again.out) == tree_bytes(full.out)
