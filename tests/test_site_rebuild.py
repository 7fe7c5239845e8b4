"""A rebuild renders again only the pages whose data, templates or code changed (the render
cache in the build folder), and its output is what a full build makes (issue 16 item 3)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests._site_helpers import (
    World,
    build,
    differing_files,
    keep_as_built,
    make_world,
    put_back,
    rows_read_whole,
    tree_bytes,
)
from tests.conftest import reap
from toolkit.site import RENDER_CACHE, SEARCH_MAP, TABLES, TEMPLATES_DIR, BuildResult

ENTRY = "ledger/patterns/grep-the-route-table-before-adding-a-new-endpoint"


def _read_render_cache(build_dir: Path) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The render cache a build kept (its key and record), to damage it as a test needs."""
    from toolkit.parsecache import _read

    read = _read((build_dir / RENDER_CACHE).read_bytes())
    assert read is not None
    _runtime, key, record = read
    return tuple(key), record


def _write_render_cache(build_dir: Path, key: tuple[str, ...], record: dict[str, Any]) -> None:
    from toolkit.parsecache import save

    save(build_dir, RENDER_CACHE.removesuffix(".marshal"), key, record)


def _edit_entry(world: World, word: str) -> None:
    """``word`` added to the Pattern of the ENTRY page's entry."""
    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")
    patterns.write_text(text.replace("already existed under a different verb",
                                     f"already existed under a different verb {word}", 1),
                        encoding="utf-8")


@pytest.fixture(scope="module")
def _first_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, BuildResult, Path]:
    """The first build, made as in a new process: no compiled template or drawn chart is
    remembered from an earlier build of this process, so its build folder holds every
    compiled template (jinja-cache) and chart (chart-cache), and it drew every chart."""
    import toolkit.site as site_module

    base = tmp_path_factory.mktemp("rebuild")
    world = make_world(base / "w")
    site_module._BYTECODE.clear()
    site_module._DRAWN.clear()
    first = build(world)
    assert first.mode == "full" and first.warnings == []
    return world, first, keep_as_built(base / "w")


@pytest.fixture
def built_world(_first_build: tuple[World, BuildResult, Path]) -> tuple[World, BuildResult]:
    """The formats world and its first full build (the site is in the project's default
    folder), exactly as built: put back for each test at the same paths, file times included
    (MkDocs' dirty build compares them), from a copy made once per module. The test may
    change anything in it."""
    world, first, as_built = _first_build
    put_back(as_built)
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

    # a cache whose list of link targets (the pages' records number into it) lost its
    # entries: the pages that link are rendered again, not trusted, and nothing differs
    key, record = _read_render_cache(first.build_dir)
    assert record["targets"]
    record["targets"] = []
    _write_render_cache(first.build_dir, key, record)
    assert build(world, templates=templates).written == []
    assert _read_render_cache(first.build_dir)[1]["targets"]
    assert tree_bytes(first.out) == site_before

    # pages' records whose link targets are not numbers into that list (floats, a boolean,
    # out of range): those pages are rendered again, the build does not fail
    key, record = _read_render_cache(first.build_dir)
    linking = [path for path, rec in record["pages"].items() if rec[2]][:3]
    assert len(linking) == 3
    for path, bad in zip(linking, ([0.0], [True], [len(record["targets"])]), strict=True):
        record["pages"][path][2] = bad
    _write_render_cache(first.build_dir, key, record)
    assert build(world, templates=templates).written == []
    assert tree_bytes(first.out) == site_before

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


def _search_locations(site: Path) -> set[str]:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    return {d["location"].split("#")[0] for d in index["docs"]}


def test_rebuild_after_one_change_rewrites_one_page_and_keeps_search_complete(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    import toolkit.site as site_module

    world, first = built_world
    docs = first.build_dir / "docs"
    entry_md = docs / "ledger" / "patterns" / \
        "grep-the-route-table-before-adding-a-new-endpoint.md"
    untouched = docs / "ledger" / "antipatterns" / "editing-an-applied-migration-in-place.md"
    before = untouched.stat().st_mtime_ns
    pages_before = _search_locations(first.out)

    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")
    patterns.write_text(text.replace("already existed under a different verb",
                                     "already existed under a different verb zanzibarquux"),
                        encoding="utf-8")
    second = build(world)
    assert second.mode == "incremental"
    assert [w for w in second.written if w.endswith(".md")] == [
        "ledger/patterns/grep-the-route-table-before-adding-a-new-endpoint.md"]
    assert second.rebuilt == 1
    assert untouched.stat().st_mtime_ns == before
    # the entry's text is rendered Markdown, swapped in by the hook: on the page, not in its
    # Markdown source
    entry_html = second.out / "ledger" / "patterns" / entry_md.stem / "index.html"
    assert "zanzibarquux" in entry_html.read_text()
    index = json.loads((second.out / "search" / "search_index.json").read_text())
    assert _search_locations(second.out) == pages_before
    assert any("zanzibarquux" in d["text"] for d in index["docs"])

    # an entry removed from the ledger disappears from the site and from search
    patterns.write_text(text.split("\n---\n\n**Title:** Grep the route table")[0] + "\n",
                        encoding="utf-8")
    third = build(world)
    gone = "ledger/patterns/grep-the-route-table-before-adding-a-new-endpoint"
    assert third.mode == "incremental" and f"{gone}.md" in third.removed
    assert not (third.out / gone).exists()
    assert f"{gone}/" not in _search_locations(third.out)
    assert "Grep the route table" not in (third.out / "ledger/patterns/index.html").read_text()

    # the entry's category has one entry less: its charts were drawn again, by a chart
    # process this process keeps for its next build (matplotlib starts once)
    assert third.charts_drawn > 0
    kept = list(site_module._CHART_IDLE)
    assert kept and all(p.poll() is None for p in kept)

    # and the incremental result is exactly what a full build makes (its charts all drawn
    # again, by the same chart process)
    site_module._DRAWN.clear()
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert full.mode == "full" and full.charts_drawn > third.charts_drawn
    assert kept == site_module._CHART_IDLE  # the same process drew them
    assert tree_bytes(third.out) == tree_bytes(full.out)


def test_search_index_stays_complete_when_its_map_is_damaged_or_stale(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    world, first = built_world
    index = first.out / "search" / "search_index.json"

    # the map is damaged: the index is read in full instead
    (first.build_dir / SEARCH_MAP).write_text('{"index": [1, 2], "pages": {"x/": [0, 9', "utf-8")
    _edit_entry(world, "zanzibarquux")
    second = build(world)
    assert second.mode == "incremental" and second.rebuilt == 1

    # the index was rewritten by hand (same map, other bytes): the map no longer describes it
    docs = json.loads(index.read_text(encoding="utf-8"))
    index.write_text(json.dumps(docs, indent=1), encoding="utf-8")
    _edit_entry(world, "zanzibarquuy")
    third = build(world)
    assert third.mode == "incremental" and third.rebuilt == 1
    found = [d["location"] for d in json.loads(index.read_text(encoding="utf-8"))["docs"]
             if "zanzibarquuy" in d["text"]]
    assert found == [f"{ENTRY}/"]  # an entry page is one search entry

    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert index.read_bytes() == (full.out / "search" / "search_index.json").read_bytes()
    assert third.search_docs == full.search_docs


def test_damaged_caches_of_compiled_templates_and_charts_give_the_same_site(
        built_world: tuple[World, BuildResult], monkeypatch: pytest.MonkeyPatch) -> None:
    """The build folder keeps the compiled templates, the theme's and the pages' (jinja-cache),
    and the drawn charts (chart-cache); a damaged or lost file there is made again, and the
    site does not change.
    The chart process kept from the last build may have ended since: a new one draws them."""
    import toolkit.site as site_module

    world, first = built_world  # built as in a new process (_first_build)
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

    # no chart process can be started at all: this process draws the lost chart itself,
    # after the downloads' thread (matplotlib's import sets the environment), the same bytes
    def no_process(build_dir: Path) -> None:
        raise OSError("Resource temporarily unavailable")

    charts[0].unlink()
    site_module._DRAWN.clear()
    shutil.rmtree(again.out)
    (again.build_dir / "state.json").unlink()
    monkeypatch.setattr(site_module, "_chart_process", no_process)
    third = build(world)
    assert third.charts_drawn == 1 and charts[0].is_file()
    assert tree_bytes(third.out) == site_before



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


def _edit_ledger(world: World, rng: random.Random, word: str) -> str:
    """A word added to one entry's Pattern or Context, or its confidence changed."""
    files = sorted((world.root / ".smith" / "vault" / "ledger").glob("*.md"))
    files = [f for f in files if "**Title:**" in f.read_text(encoding="utf-8")]
    path = rng.choice(files)
    text = path.read_text(encoding="utf-8")
    field = rng.choice(["**Pattern:** ", "**Context:** ", "**Confidence:** "])
    spots = [i for i in range(len(text)) if text.startswith(field, i)] or \
        [i for i in range(len(text)) if text.startswith("**Title:** ", i)]
    at = rng.choice(spots)
    head, _, rest = text[at:].partition(" ")
    if head == "**Confidence:**":
        old = rest.split("\n", 1)[0]
        new = rng.choice([c for c in ("low", "medium", "high") if c != old])
        path.write_text(text[:at] + f"{head} {new}" + rest[len(old):], encoding="utf-8")
        return f"ledger {path.name}: confidence {old} -> {new}"
    path.write_text(text[:at] + f"{head} {word} " + rest, encoding="utf-8")
    return f"ledger {path.name}: {head} gets {word}"


def _edit_slop(world: World, rng: random.Random, word: str) -> str:
    """One slop entry's status, severity or title changed (what its listings show), or its
    description, cleanup, a source link or an extra field (what only its own page shows)."""
    path = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    entry = rng.choice(data["entries"])
    key = rng.choice(["status", "severity", "title", "description", "cleanup_recommendation",
                      "source_links", "x_reviewer"])
    choices = {"status": ["open", "in_progress", "resolved", "accepted", "wont_fix"],
               "severity": ["critical", "high", "medium", "low", "info"]}
    if key == "source_links":
        entry["source_links"] = [*(entry.get("source_links") or []), f"src/{word}.py:7"]
    elif key in ("title", "description", "cleanup_recommendation", "x_reviewer"):
        entry[key] = f"{entry.get(key, '')} {word}".strip()
    else:
        entry[key] = rng.choice([v for v in choices[key] if v != entry.get(key)])
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return f"slop {entry['id'][:8]}: {key} -> {entry[key]}"


def _add_audit_row(world: World, rng: random.Random, word: str) -> str:
    """A new action, dispatch or approach in the audit DB."""
    import sqlite3

    conn = sqlite3.connect(world.home / ".nagi" / "ledger.db")
    kind = rng.choice(["action", "dispatch", "approach"])
    task = rng.choice(["task_01HZX3K9Q2", f"task {word}"])
    day = f"2026-05-{rng.randint(1, 9):02d} 1{rng.randint(0, 9)}:00:00"
    if kind == "action":
        conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                     "(?, ?, 'deploy', ?, 'acme-api')", [day, rng.randint(0, 2), word])
    elif kind == "dispatch":
        conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, "
                     "verdict) VALUES (?, ?, 'general-purpose', 'sonnet', ?, ?)",
                     [day, task, word, rng.choice([None, "CONFIRMED", "REFUTED"])])
    else:
        conn.execute("INSERT INTO approaches (ts, task, approach, outcome, reason) VALUES "
                     "(?, ?, ?, 'DEAD_END', ?)", [day, task, word, word])
    conn.commit()
    conn.close()
    return f"audit: new {kind} for {task}"


def test_after_random_single_changes_the_rebuilt_site_is_a_full_builds_bytes(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """Property: whatever one change a user makes between builds (a ledger entry edited, a
    slop entry changed, an audit row added), the incremental rebuild (which renders, and lets
    MkDocs read, only what the change reaches) gives the same bytes as a clean full build,
    every page and the whole search index; and it renders only a few pages."""
    world, first = built_world
    rng = random.Random(16003)
    changes = [_edit_ledger, _edit_slop, _add_audit_row] * 2
    rng.shuffle(changes)
    for step, change in enumerate(changes):
        what = change(world, rng, f"zanzibar{step}quux")
        again = build(world)
        assert again.mode == "incremental", what
        assert again.rebuilt < first.rebuilt // 3, what
        full = build(world, out=tmp_path / f"full{step}" / "site", clean=True)
        assert differing_files(again.out, full.out) == [], what
        assert again.search_docs == full.search_docs, what


def test_a_dirty_run_whose_subset_misses_a_linked_page_falls_back_to_every_file(
        built_world: tuple[World, BuildResult], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A link the subset's scan did not see (here: the linked pages taken out of the subset
    on purpose) makes the strict MkDocs run over the subset fail; the build then runs MkDocs
    over every file and the site is a clean full build's bytes, with no warning left."""
    import toolkit.site as site_mod

    world, _first = built_world
    real_subset, real_run = site_mod._dirty_subset, site_mod._run_mkdocs
    runs: list[bool] = []
    dropped: list[str] = []

    def lacking_links(*args, **kwargs):  # type: ignore[no-untyped-def]
        subset = real_subset(*args, **kwargs)
        assert subset is not None, "one change to a built site: a subset is made"
        linked = {f for f in subset.files - subset.render
                  if f.endswith(".md") and f != "index.md" and "/" in f}
        dropped.extend(sorted(linked))
        subset.files -= linked
        return subset

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        runs.append(kwargs.get("subset") is not None)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(site_mod, "_dirty_subset", lacking_links)
    monkeypatch.setattr(site_mod, "_run_mkdocs", counted)
    what = _edit_ledger(world, random.Random(5), "zanzibarfallback")
    again = build(world)
    assert dropped, "the rendered pages link to pages of the subset"
    assert runs == [True, False], what  # the subset's run failed, the full one built
    assert again.mode == "incremental" and again.warnings == []
    monkeypatch.undo()
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(again.out, full.out) == []
    assert again.search_docs == full.search_docs


def test_downloads_follow_their_source_and_a_redacted_build_never_keeps_a_plain_one(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """A table's CSV and JSON are made again when its source was loaded again, not for a
    change elsewhere; what they were made under includes whether the build is redacted, so
    a redacted build right after a plain one (same data) still writes every download
    redacted, and a download edited by hand is written again."""
    world, first = built_world
    data = first.build_dir / "docs" / "data"
    token = "ghp_" + "Ab1" * 12  # a GitHub token the redaction finder knows
    slop = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    doc = json.loads(slop.read_text(encoding="utf-8"))
    doc["entries"][0]["description"] += f" Token used: {token}"
    slop.write_text(json.dumps(doc, indent=2), encoding="utf-8")

    plain = build(world)
    assert {"data/slop_entries.csv", "data/slop_entries.json"} <= set(plain.written)
    assert not [w for w in plain.written if w.startswith("data/ledger_")]
    assert token in (data / "slop_entries.csv").read_text(encoding="utf-8")

    redacted = build(world, redact=True)
    assert {"data/slop_entries.csv", "data/slop_entries.json"} <= set(redacted.written)
    assert [p.name for p in data.iterdir() if token in p.read_text(encoding="utf-8")] == []

    plain_again = build(world)
    assert token in (data / "slop_entries.csv").read_text(encoding="utf-8")
    assert "data/slop_entries.csv" in plain_again.written
    (data / "ledger_entries.csv").write_text("edited by hand\n", encoding="utf-8")
    fixed = build(world)
    assert fixed.written == ["data/ledger_entries.csv"]

    full = build(world, out=tmp_path / "full" / "site", clean=True)
    got = tree_bytes(first.build_dir / "docs" / "data")
    assert got == tree_bytes(full.build_dir / "docs" / "data")
    assert tree_bytes(fixed.out) == tree_bytes(full.out)


def test_a_views_download_is_made_again_only_when_a_table_it_reads_was_loaded_again(
        built_world: tuple[World, BuildResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """With nothing changed, no download is made again, a view's neither; after one ledger
    entry changed, the history's views (which read the ledger's versions) are made again
    and show it, the audit's and snapshots' views are not, and the downloads are a clean
    build's bytes."""
    from toolkit.store import Store

    world, _first = built_world
    copied: list[str] = []
    real = Store.copy_to_files  # every copy of a table to files goes through it

    def copy_to_files(self: Store, table: str, *args: object, **kwargs: object) -> None:
        copied.append(table)
        real(self, table, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "copy_to_files", copy_to_files)
    build(world)
    assert copied == []
    _edit_entry(world, "zanzibarview")
    again = build(world)
    views = {"ledger_changes", "ledger_entry_versions", "snapshot_turns", "stats_by_tier",
             "task_status"}
    assert sorted(views & set(copied)) == ["ledger_changes", "ledger_entry_versions"]
    data = again.build_dir / "docs" / "data"
    assert "zanzibarview" in (data / "ledger_entry_versions.csv").read_text(encoding="utf-8")
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert tree_bytes(data) == tree_bytes(full.build_dir / "docs" / "data")


def test_an_entry_whose_own_text_changed_is_the_only_one_read_whole_and_rendered(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """The site reads the short columns of every entry and, per entry, a digest of its whole
    row made by the database; an entry's long text (a slop description, a ledger entry's
    Evidence) is read only for the pages it renders. So after one entry's long text changed,
    that entry alone is read whole and rendered, its page shows the change, and the site is
    a clean build's bytes; with nothing changed, no entry is read whole."""
    world, _first = built_world
    slop = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    doc = json.loads(slop.read_text(encoding="utf-8"))
    doc["entries"][1]["description"] += " zanzibardescription"
    slop.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")
    at = text.index("**Evidence:**", text.index("**Title:** Grep the route table"))
    at = text.index("\n- ", at) + 3
    patterns.write_text(text[:at] + "zanzibarevidence " + text[at:], encoding="utf-8")

    with rows_read_whole() as whole:
        again = build(world)
    assert again.mode == "incremental"
    slop_page = "slop/e0a95d1f.md"
    assert sorted(w for w in again.written if w.endswith(".md")) == [f"{ENTRY}.md", slop_page]
    read = sorted(str(key) for key in whole)
    assert read == ["1", "patterns/grep-the-route-table-before-adding-a-new-endpoint"]
    assert "zanzibardescription" in (again.out / "slop/e0a95d1f/index.html").read_text()
    assert "zanzibarevidence" in (again.out / ENTRY / "index.html").read_text()

    with rows_read_whole() as whole:
        unchanged = build(world)
    assert whole == [] and [w for w in unchanged.written if w.endswith(".md")] == []

    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(again.out, full.out) == []


def test_the_render_cache_keeps_unchanged_pages_records_and_drops_targets_no_page_links_to(
        built_world: tuple[World, BuildResult]) -> None:
    """A rebuild writes back a reused page's record as it read it (its link targets are
    numbers into the cache's list of targets); targets no page links to any more (entries
    deleted over many builds) are dropped once they are most of the list, every record
    renumbered, and the next rebuild still trusts every unchanged page."""
    world, first = built_world
    key, record = _read_render_cache(first.build_dir)
    stale = [f"ledger/patterns/deleted-{i}.md" for i in range(3000)]
    record["targets"] = stale + record["targets"]
    for page in record["pages"].values():
        page[2] = [i + len(stale) for i in page[2]]
    _write_render_cache(first.build_dir, key, record)

    _edit_entry(world, "zanzibarquux")
    again = build(world)
    assert [w for w in again.written if w.endswith(".md")] == [f"{ENTRY}.md"]
    kept = _read_render_cache(first.build_dir)[1]
    assert not set(stale) & set(kept["targets"])
    assert len(kept["targets"]) < 1024
    for rel, page in kept["pages"].items():  # each record still names its page's links
        linked = {kept["targets"][i] for i in page[2]}
        assert linked == set(record["targets"][i] for i in record["pages"][rel][2]) or \
            rel == f"{ENTRY}.md", rel

    unchanged = build(world)
    assert [w for w in unchanged.written if w.endswith(".md")] == []
    assert unchanged.rebuilt == 0


def test_the_tables_files_after_a_rebuild_hold_the_tables_a_full_build_keeps(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """A rebuild rewrites only the tables files a change reached: those of the tables the
    rendered pages show now and of those they (or pages gone) showed before. After an entry's
    confidence changed (its page and the listings it is in show other tables, and no page
    shows the old ones), the build folder's tables are a clean build's, and so is the site."""
    world, first = built_world
    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")
    at = text.index("**Confidence:** low", text.index("**Title:** Grep the route table"))
    patterns.write_text(text[:at] + "**Confidence:** high" + text[at + 19:], encoding="utf-8")

    def tables(build_dir: Path) -> dict[str, str]:
        return {name: html for f in sorted((build_dir / TABLES).glob("*.json"))
                for name, html in json.loads(f.read_text(encoding="utf-8")).items()}

    before = tables(first.build_dir)
    again = build(world)
    assert again.mode == "incremental"
    assert "ledger/confidence/high.md" in again.written
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    got, want = tables(again.build_dir), tables(full.build_dir)
    assert set(before) - set(want) and set(want) - set(before)  # tables gone, tables new
    assert got == want
    assert tree_bytes(again.out) == tree_bytes(full.out)
    unchanged = build(world)  # and the next rebuild trusts every page and tables file
    assert [w for w in unchanged.written if w.endswith(".md")] == []
    assert tables(unchanged.build_dir) == want


@pytest.mark.parametrize("pages", [[1], "pages", 7], ids=["list", "text", "number"])
def test_a_render_cache_whose_pages_are_not_a_mapping_renders_every_page_again(
        built_world: tuple[World, BuildResult], pages: object) -> None:
    """A damaged ``render-cache.json`` whose pages' records are not a mapping (its code as
    this build's, so it is read) is not trusted, and the build does not crash (it did, with
    an AttributeError): no file is written (the pages made again have the same bytes), the
    site is as it was, and the records are written afresh."""
    world, first = built_world
    site_before = tree_bytes(first.out)
    key, record = _read_render_cache(first.build_dir)
    assert isinstance(record["pages"], dict) and record["pages"]
    record["pages"] = pages
    _write_render_cache(first.build_dir, key, record)
    again = build(world)
    assert again.warnings == [] and again.written == []  # made again: the same bytes
    assert tree_bytes(again.out) == site_before
    assert isinstance(_read_render_cache(first.build_dir)[1]["pages"], dict)
    unchanged = build(world)  # and the next build trusts the records written afresh
    assert [w for w in unchanged.written if w.endswith(".md")] == []


def test_an_older_versions_json_render_cache_is_removed_and_not_read(
        built_world: tuple[World, BuildResult]) -> None:
    """The render cache was JSON (``render-cache.json``); a build folder an older version
    left with one (here: claiming every page differs) keeps no second cache: the file is
    removed, the kept marshal cache is what the rebuild trusts, and the site is as it was."""
    world, first = built_world
    site_before = tree_bytes(first.out)
    old = first.build_dir / "render-cache.json"
    old.write_text(json.dumps({"code": "x", "pages": {}, "targets": [], "tables": {}}),
                   encoding="utf-8")
    again = build(world)
    assert not old.exists()
    assert [w for w in again.written if w.endswith(".md")] == [] and again.rebuilt == 0
    assert tree_bytes(again.out) == site_before


def test_the_values_a_page_digest_pickles_keep_every_field() -> None:
    """The page digest pickles links, tables, fields and row references by their fields'
    values (plain_pickle): each comes back equal, and a change to any one field changes the
    bytes (a page that shows it is rendered again). A class whose fields are not all
    positional cannot be pickled that way, and none of them can be subclassed."""
    import dataclasses
    import pickle

    from toolkit import queries
    from toolkit.pages import Field, Ref, RowRef, Table, Url, plain_pickle
    from toolkit.reports import Headline

    samples = [Ref("text", "a.md"), Table(("A",), [(1,)], "none", "A"), Field("L", 2),
               RowRef(queries.site_ledger_rows, "k", "d"), Url("https://x.example/"),
               Headline(Ref("t", "b.md"), (1, 2), "note")]
    for value in samples:
        data = pickle.dumps(value, protocol=5)
        assert pickle.loads(data) == value
        for f in dataclasses.fields(value):
            other = dataclasses.replace(value, **{f.name: "changed"})
            assert pickle.dumps(other, protocol=5) != data, (type(value).__name__, f.name)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Named:
        name: str

    with pytest.raises(TypeError):
        plain_pickle(Named)

    # a subclass's own fields would be left out of the digest: it cannot be made
    with pytest.raises(TypeError, match="Anchored"):
        @dataclasses.dataclass(frozen=True)
        class Anchored(Ref):
            anchor: str


def test_a_deferred_page_digest_tells_every_argument_apart() -> None:
    """An entry page (a Deferred page) is reused by the digest of its maker and arguments,
    made from them as plain values: the same arguments give the same digest, and a change to
    any field of a link or a row reference, to the function that fetches the row, or an
    argument that only looks like one of them (a tuple of the same values, bytes) gives
    another (the page is rendered again). A maker's argument that cannot be found by name (a
    lambda) has no digest: that page is always rendered."""
    import dataclasses

    from toolkit import queries, reports
    from toolkit.pages import Deferred, Ref, RowRef
    from toolkit.site import _context_digest

    def page(*args: Any) -> Deferred:
        return Deferred("slop/x.md", reports._slop_entry_page, ("slop/x.md", *args))

    ref = Ref("text", "a.md")
    row = RowRef(queries.site_slop_rows, 3, "d1")
    base = _context_digest(page(ref, row, "none"))
    assert base is not None and base == _context_digest(page(Ref("text", "a.md"), RowRef(
        queries.site_slop_rows, 3, "d1"), "none"))
    others = [page(dataclasses.replace(ref, **{f.name: "changed"}), row, "none")
              for f in dataclasses.fields(ref)]
    others += [page(ref, dataclasses.replace(row, **{f.name: value}), "none")
               for f, value in zip(dataclasses.fields(row),
                                   (queries.site_ledger_rows, "3", "d2"), strict=True)]
    others += [page(("text", "a.md"), row, "none"), page(ref, row, b"none"),
               page(ref, row, ("none",)), page(ref, row, None),
               page(ref, row, "none", None), page((ref, row), "none"),
               Deferred("slop/x.md", reports._ledger_entry_page, ("slop/x.md", ref, row,
                                                                  "none"))]
    digests = [_context_digest(p) for p in others]
    assert base not in digests and len(set(digests)) == len(digests)
    assert _context_digest(page(ref, RowRef(lambda store, keys: {}, 3, "d1"), "none")) is None


def test_a_page_whose_html_is_older_than_its_markdown_is_rendered_again(
        built_world: tuple[World, BuildResult]) -> None:
    """What an interrupted build leaves: a page's Markdown written, its HTML not (older, and
    here stale). The next build, with nothing changed, renders that page again (MkDocs is
    shown it), and the site is what it was."""
    import os

    world, first = built_world
    site_before = tree_bytes(first.out)
    html = first.out / ENTRY / "index.html"
    md = first.build_dir / "docs" / f"{ENTRY}.md"
    html.write_text("<p>stale</p>\n", encoding="utf-8")
    old = md.stat().st_mtime_ns - 10_000_000_000
    os.utime(html, ns=(old, old))

    again = build(world)
    assert again.mode == "incremental" and again.written == []
    assert again.rebuilt == 1
    assert tree_bytes(again.out) == site_before


def test_a_build_killed_after_mkdocs_wrote_pages_is_followed_by_a_clean_builds_site(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """A build killed after MkDocs' dirty run wrote the changed page's HTML and before the
    toolkit wrote the search index and its state leaves HTML newer than its Markdown (which a
    dirty run trusts) beside an index that is not the site's (the search plugin's, without
    entries). The next build, with nothing changed, gives a clean build's site."""
    import os
    import pickle
    import subprocess
    import sys

    from tests._site_helpers import BUILD_TIME
    from tests.conftest import kill_at_pause

    world, first = built_world
    _edit_entry(world, "zanzibarkilled")
    # the build of tests._site_helpers.build, in a process of its own (the world's settings)
    child = ("import pickle, sys\n"
             "from toolkit.loaders import SOURCES\n"
             "from toolkit.site import build_site\n"
             "from toolkit.store import Store\n"
             "cfg, when = pickle.loads(sys.stdin.buffer.read())\n"
             "with Store.open(cfg.db_path, sources=SOURCES) as store:\n"
             "    store.refresh(cfg)\n"
             "    print(build_site(cfg, store, build_time=when).mode)\n")
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=world.root,
                            env={**os.environ, "TOOLKIT_EDITOR_PAUSE": "site_before_search_index"},
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    proc.stdin.buffer.write(pickle.dumps((world.cfg, BUILD_TIME)))
    proc.stdin.close()
    kill_at_pause(proc, "site_before_search_index")
    # killed where meant: an incremental build, the page's HTML is the new one, the index and
    # the state still the last build's
    state = json.loads((first.build_dir / "state.json").read_text(encoding="utf-8"))
    assert state["signature"] is not None
    assert "zanzibarkilled" in (first.out / ENTRY / "index.html").read_text(encoding="utf-8")
    index = first.out / "search" / "search_index.json"
    assert "zanzibarkilled" not in index.read_text(encoding="utf-8")

    again = build(world)
    assert "zanzibarkilled" in index.read_text(encoding="utf-8")
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(again.out, full.out) == []


def test_a_search_index_cut_short_is_built_again_in_full(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """The site's search index cut short (its map then no longer describes it, and it is no
    JSON): nothing of it is kept, the build does not fail, and it gives a clean build's site."""
    world, first = built_world
    index = first.out / "search" / "search_index.json"
    with open(index, "r+b") as fh:
        fh.truncate(300)
    again = build(world)
    assert again.mode == "full"
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(again.out, full.out) == []


def test_a_cached_chart_cut_short_is_drawn_again(
        built_world: tuple[World, BuildResult]) -> None:
    """A chart cut short in the build folder's chart-cache (a build killed while it wrote
    it there, or a damaged disk) is drawn again, not copied into the site as it is."""
    import toolkit.site as site_module

    world, first = built_world
    site_before = tree_bytes(first.out)
    charts = sorted((first.build_dir / "chart-cache").iterdir())
    assert charts
    for chart in charts:
        with open(chart, "r+b") as fh:
            fh.truncate(chart.stat().st_size // 2)
    site_module._DRAWN.clear()  # as a new process: only the files
    again = build(world)
    assert again.charts_drawn == len(charts)
    assert tree_bytes(again.out) == site_before


def test_an_edited_theme_override_reaches_every_page(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """A base configuration whose theme has a ``custom_dir`` of override templates: an
    override edited between two builds (the configuration's text the same) changes every
    page's HTML, as a clean build of it does, though no page's Markdown changed."""
    import yaml

    from toolkit.site import BASE_CONFIG

    world, _first = built_world
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    main = overrides / "main.html"
    main.write_text('{% extends "base.html" %}\n{% block announce %}Banner one{% endblock %}\n',
                    encoding="utf-8")
    config = yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8"))
    config["theme"]["custom_dir"] = str(overrides)
    base = tmp_path / "mkdocs.yml"
    base.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    first = build(world, base_config=base)
    assert "Banner one" in (first.out / ENTRY / "index.html").read_text(encoding="utf-8")

    main.write_text(main.read_text(encoding="utf-8").replace("Banner one", "Banner two"),
                    encoding="utf-8")
    again = build(world, base_config=base)
    assert "Banner two" in (again.out / ENTRY / "index.html").read_text(encoding="utf-8")
    full = build(world, out=tmp_path / "full" / "site", clean=True, base_config=base)
    assert differing_files(again.out, full.out) == []


def test_another_version_of_the_agents_markdown_renderer_reaches_every_entry_page(
        built_world: tuple[World, BuildResult], monkeypatch: pytest.MonkeyPatch) -> None:
    """markdown-it-py, which renders the agents' Markdown on the pages (toolkit.mdrender), is
    not pinned: when another version of it is installed (rich may bring one), a rebuild with
    no data changed renders the pages again with it, as a clean build would."""
    import markdown_it.renderer

    import toolkit.parsecache as parsecache

    world, first = built_world
    assert "Rendered by the other version." not in (first.out / ENTRY / "index.html").read_text()
    installed = parsecache.package_version
    monkeypatch.setattr(parsecache, "package_version", lambda name: (
        "999.0" if name == "markdown-it-py" else installed(name)))
    render = markdown_it.renderer.RendererHTML.render

    def other_version(self: Any, tokens: Any, options: Any, env: Any) -> str:
        return render(self, tokens, options, env) + "\n<p>Rendered by the other version.</p>"

    monkeypatch.setattr(markdown_it.renderer.RendererHTML, "render", other_version)
    again = build(world)
    assert "Rendered by the other version." in (again.out / ENTRY / "index.html").read_text()


def _build_killed_at(world: World, point: str, **kwargs: Any) -> None:
    """``build_site`` of the world, in a process of its own, SIGKILLed at the pause ``point``."""
    from tests.conftest import kill_at_pause

    kill_at_pause(_start_build(world, point, **kwargs), point)


def _start_build(world: World, pause: str, **kwargs: Any) -> Any:
    """``build_site`` of the world started in a process of its own, which stops at the pause
    ``pause`` (``TOOLKIT_EDITOR_PAUSE``'s syntax); its stderr is piped, as text."""
    import os
    import pickle
    import subprocess
    import sys

    from tests._site_helpers import BUILD_TIME

    child = ("import pickle, sys\n"
             "from toolkit.loaders import SOURCES\n"
             "from toolkit.site import build_site\n"
             "from toolkit.store import Store\n"
             "cfg, when, kwargs = pickle.loads(sys.stdin.buffer.read())\n"
             "with Store.open(cfg.db_path, sources=SOURCES) as store:\n"
             "    store.refresh(cfg)\n"
             "    build_site(cfg, store, build_time=when, **kwargs)\n")
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=world.root,
                            env={**os.environ, "TOOLKIT_EDITOR_PAUSE": pause},
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    proc.stdin.buffer.write(pickle.dumps((world.cfg, BUILD_TIME, kwargs)))
    proc.stdin.close()
    return proc


def test_a_first_build_killed_after_mkdocs_wrote_pages_does_not_lock_the_folder_out(
        built_world: tuple[World, BuildResult], tmp_path: Path) -> None:
    """The first build into a new folder (or a --clean one) killed (Ctrl-C, a closed terminal)
    after MkDocs wrote the pages: the folder holds the site's pages, so the next build must
    take it as the toolkit's, never refuse it as "not built by toolkit build-site"."""
    world, _ = built_world
    out = tmp_path / "new" / "site"
    _build_killed_at(world, "site_before_search_index", out=out)
    assert (out / "index.html").is_file()
    again = build(world, out=out)
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(again.out, full.out) == []
    _build_killed_at(world, "site_before_search_index", out=out, clean=True)
    assert build(world, out=out).out == out


def test_a_plain_build_killed_over_a_redacted_site_is_not_recorded_as_redacted(
        built_world: tuple[World, BuildResult]) -> None:
    """A plain build killed after MkDocs wrote its pages (which show secrets) over a redacted
    site: handoff and publish, which link to the site, warn that it is not redacted."""
    from dataclasses import replace

    from toolkit.site import site_redaction_warning

    world, _ = built_world
    cfg = replace(world.cfg, site_url="https://example.org/site/")
    build(world, redact=True)
    assert site_redaction_warning(cfg) is None
    _edit_entry(world, "zanzibarplain")
    _build_killed_at(world, "site_before_search_index", redact=False)
    warning = site_redaction_warning(cfg)
    assert warning is not None and "without redaction" in warning


def test_a_folder_the_build_cannot_change_is_refused_before_the_site_changes(
        built_world: tuple[World, BuildResult], tmp_path: Path,
        immutable) -> None:  # type: ignore[no-untyped-def]
    """A read-only folder in the site (FAULTS G11): --clean deleted most of the site, then
    stopped on it with a bare "patterns: Permission denied"; a build that removes a page
    deleted it, then stopped; a read-only --out got a whole build folder beside it first.
    Every folder the build will delete in or write to is checked before the first deletion:
    refused (exit 1) naming the folder and what to do, the site as it was."""
    from toolkit.errors import RefusedError

    world, first = built_world
    site, build_dir = first.out, first.build_dir
    before = tree_bytes(site)

    def refused(folder: Path, **kwargs: Any) -> None:
        with pytest.raises(RefusedError) as caught:
            build(world, **kwargs)
        assert caught.value.exit_code == 1
        assert str(caught.value) == (
            f"{folder}: folder is not writable; the site was left as it was. Make it "
            f"writable: chmod u+w {folder}")
        assert tree_bytes(site) == before

    # --clean, with a folder of the site read-only: neither folder emptied
    built = tree_bytes(build_dir)
    writable = immutable(site / "ledger")
    refused(site / "ledger", clean=True)
    assert tree_bytes(build_dir) == built
    writable()
    # an entry removed from the ledger while another entry's page folder is read-only: the
    # removed entry's page is still there
    patterns = world.root / ".smith" / "vault" / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")
    patterns.write_text(text.split("\n---\n\n**Title:** Grep the route table")[0] + "\n",
                        encoding="utf-8")
    other = site / "ledger" / "antipatterns" / "editing-an-applied-migration-in-place"
    writable = immutable(other)
    refused(other)
    writable()
    again = build(world)  # made writable: the same build goes on
    assert f"{ENTRY}.md" in again.removed and not (site / ENTRY).exists()
    # a read-only folder named as the site: refused before its build folder is made
    out = tmp_path / "ro"
    out.mkdir()
    immutable(out)
    with pytest.raises(RefusedError, match="ro: folder is not writable"):
        build(world, out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]


@pytest.mark.parametrize("second", ["build", "clean-build", "serve"])
def test_a_second_build_of_the_same_site_meanwhile_waits_then_is_busy(
        built_world: tuple[World, BuildResult], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, second: str) -> None:
    """Two builds of one site at once (build-site twice, or `toolkit serve` while build-site
    runs): the second waits for the first, then exits 75, and touches nothing (serve serves
    nothing); the first ends with a whole site. (The second used to empty or rewrite the
    folders under the first, which then reported success over a site without its pages.)"""
    import os
    import subprocess
    import sys

    from toolkit.errors import BusyError

    world, first = built_world
    _edit_entry(world, "zanzibarfirst")
    release = tmp_path / "release"
    proc = _start_build(world, f"site_before_search_index:{release}")
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first build holds the site, stopped before its end
            if line.startswith("TOOLKIT_EDITOR_PAUSE site_before_search_index "):
                break
        else:
            raise AssertionError(f"never reached the pause; exit {proc.wait()}")
        monkeypatch.setenv("TOOLKIT_LOCK_TIMEOUT", "0.2")
        if second == "serve":  # the console script, in a process of its own (never hangs here)
            served = subprocess.run(
                [sys.executable, "-m", "toolkit", "serve", "--port", "0"], cwd=world.root,
                env={**os.environ, **world.env()},
                capture_output=True, text=True, timeout=120)
            assert (served.returncode, served.stdout) == (75, ""), served.stderr
            assert served.stderr.startswith(
                f"Error: {world.root / '.toolkit' / 'site.build'}: the site's build folder is "
                "locked by another run (waited 0.2 s)"), served.stderr
        else:
            with pytest.raises(BusyError,
                               match="the site's build folder is locked by another run"):
                build(world, clean=second == "clean-build")
        release.touch()
        assert proc.wait(timeout=300) == 0
    finally:
        reap(proc)
    assert "zanzibarfirst" in (first.out / ENTRY / "index.html").read_text(encoding="utf-8")
    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(first.out, full.out) == []


def test_each_ledger_files_entries_are_kept_until_that_file_the_code_the_redaction_or_the_scope_change(  # noqa: E501
        built_world: tuple[World, BuildResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """Each ledger file's entries, as the site lists them, are kept in the build folder for
    the next build (``reports.KeptAnswers``) while that file is as its rows were loaded from:
    an edit of one file asks for that file's entries alone. A file's are asked again, and
    the pages show what the file holds, when the file changed, and every file's when the
    code changed, when the build is redacted (a redacted build never shows a plain build's
    answer) or not, when the site scope changed, and when a kept file is damaged; and the
    site is a clean build's bytes."""
    from dataclasses import replace

    from toolkit import parsecache, queries
    from toolkit.records import LEDGER_FILES

    world, _first = built_world
    asked: list[str | None] = []
    real = queries.site_ledger_entries

    def site_ledger_entries(store: Any, file: str | None = None) -> list[dict[str, Any]]:
        asked.append(file)
        return real(store, file)

    monkeypatch.setattr(queries, "site_ledger_entries", site_ledger_entries)
    build(world)  # nothing changed since the first build
    assert asked == []
    _edit_entry(world, "zanzibarview")
    edited = build(world)
    assert asked == ["patterns"] and edited.rebuilt > 0
    assert "zanzibarview" in (edited.out / ENTRY / "index.html").read_text(encoding="utf-8")

    token = "ghp_" + "Cd2" * 12  # a GitHub token the redaction finder knows
    edge = world.root / ".smith" / "vault" / "ledger" / "edge-cases.md"
    text = edge.read_text(encoding="utf-8")
    edge.write_text(text.replace("## Redis client drops", f"## Zanzibaredge {token} drops", 1),
                    encoding="utf-8")
    site = edited.out

    def shown(text: str) -> bool:  # on the ledger's pages and listings
        return any(text in p.read_text(encoding="utf-8")
                   for p in site.glob("ledger/**/*.html"))

    asked.clear()
    build(world)  # that file changed
    assert asked == ["edge-cases"] and shown("Zanzibaredge") and shown(token)
    build(world, redact=True)  # the redaction changed: every file with entries
    files = asked[1:]
    assert asked[0] == "edge-cases" and files == sorted(files) and {
        "edge-cases", "patterns"} <= set(files) <= set(LEDGER_FILES)
    assert shown("Zanzibaredge") and not shown(token)
    asked.clear()
    build(world)
    assert asked == files and shown(token)
    asked.clear()
    build(replace(world, cfg=world.cfg.with_overrides(site_scope="all")))  # the scope changed
    assert asked == files
    asked.clear()
    monkeypatch.setattr(parsecache, "package_digest", lambda: b"other code")
    build(world)  # the code changed
    assert asked == files
    asked.clear()
    build(world)
    assert asked == [] and shown(token)
    kept = edited.build_dir / "answers" / "answer-ledger-edge-cases.marshal"
    kept.write_bytes(kept.read_bytes()[:-7])  # damaged: asked again
    build(world)
    assert asked == ["edge-cases"] and shown(token) and shown("Zanzibaredge")

    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(site, full.out) == []


def test_the_slop_ledgers_answers_are_kept_until_its_source_the_code_the_redaction_or_the_scope_change(  # noqa: E501
        built_world: tuple[World, BuildResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """The slop ledger's rows and page slugs are kept in the build folder for the next build
    (``reports.KeptAnswers``) while the slop ledger is not loaded again: a ledger edit does
    not ask for them. They are asked again, and the pages show what the source holds, when
    the slop ledger changed, when the code changed, when the build is redacted (a redacted
    build never shows a plain build's answer) or not, and when the site scope changed; and
    the site is a clean build's bytes."""
    from dataclasses import replace

    from toolkit import parsecache, queries

    world, _first = built_world
    asked: list[str] = []
    real = queries.site_slop_entries

    def site_slop_entries(store: Any) -> list[dict[str, Any]]:
        asked.append("slop")
        return real(store)

    monkeypatch.setattr(queries, "site_slop_entries", site_slop_entries)
    build(world)  # nothing changed since the first build
    assert asked == []
    _edit_entry(world, "zanzibarview")
    edited = build(world)
    assert asked == [] and edited.rebuilt > 0

    token = "ghp_" + "Cd2" * 12  # a GitHub token the redaction finder knows
    slop = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    doc = json.loads(slop.read_text(encoding="utf-8"))
    doc["entries"][0]["title"] = f"zanzibarslop {token}"
    slop.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    site = edited.out

    def shown(text: str) -> bool:  # on the slop pages and listings
        return any(text in p.read_text(encoding="utf-8") for p in site.glob("slop/**/*.html"))

    build(world)  # the source changed
    assert asked == ["slop"] and shown("zanzibarslop") and shown(token)
    build(world, redact=True)  # the redaction changed
    assert asked == ["slop"] * 2 and shown("zanzibarslop") and not shown(token)
    build(world)
    assert asked == ["slop"] * 3 and shown(token)
    build(replace(world, cfg=world.cfg.with_overrides(site_scope="all")))  # the scope changed
    assert asked == ["slop"] * 4
    monkeypatch.setattr(parsecache, "package_digest", lambda: b"other code")
    build(world)  # the code changed
    assert asked == ["slop"] * 5
    build(world)
    assert asked == ["slop"] * 5 and shown(token)
    kept = edited.build_dir / "answers" / "answer-slop.marshal"
    kept.write_bytes(kept.read_bytes()[:-7])  # damaged: asked again
    build(world)
    assert asked == ["slop"] * 6 and shown(token)

    full = build(world, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(site, full.out) == []
