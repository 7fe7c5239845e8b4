"""The history feature on the site: the ledger history page (growth chart, change log) and
the turn timeline's window, lines and audit activity. Pages are built and rendered to
Markdown (no MkDocs run: tests/test_site.py covers the build itself)."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from pathlib import Path

from tests._history_helpers import Project, SideRepo, entry_b
from tests.conftest import make_audit_db
from toolkit import config as config_mod
from toolkit.loaders import SOURCES
from toolkit.reports import Ref, build_site_content
from toolkit.store import Store


def _content(root: Path, home: Path):  # type: ignore[no-untyped-def]
    cfg = config_mod.resolve(cwd=root, env={"HOME": str(home)})
    store = Store.open(cfg.db_path, sources=SOURCES)
    store.refresh(cfg)
    content = build_site_content(store, today=dt.date(2026, 5, 5), site_name="acme",
                                 roots=[(root, "project")])
    store.close()
    return content


def _render(page) -> str:  # type: ignore[no-untyped-def]
    from toolkit.site import render_page_text  # tables come back as the HTML the site shows

    return render_page_text(page)


def _project(tmp_path: Path) -> Project:
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect: first lessons", {"patterns": [entry_b("Retry budget"),
                                                     entry_b("Idempotency <b>keys</b>")]})
    p.commit("reflect: reinforce", {"patterns": [entry_b("Retry budget", "medium", 2),
                                                 entry_b("Idempotency <b>keys</b>")]})
    p.commit("prune", {"patterns": [entry_b("Retry budget", "medium", 2)]})
    return p


def test_history_page_has_growth_chart_and_change_log(tmp_path, isolated_env):
    p = _project(tmp_path)
    content = _content(p.root, isolated_env)
    page = next(pg for pg in content.pages if pg.path == "ledger/history.md")
    assert page.nav == ("Ledger", "History") and page.versions == 3
    # growth, newest first: high, medium, low, unrated, total
    assert [r[3:8] for r in page.growth.rows] == [(0, 1, 0, None, 1), (0, 1, 1, None, 2),
                                                  (0, 0, 2, None, 2)]
    chart = next(c for c in content.charts if c.name == page.chart)
    assert [(s.name, s.values) for s in chart.series] == [
        ("high", (0.0,)), ("medium", (1.0,)), ("low", (0.0,))]  # one bar: the day's last
    # change log, newest first; entries still in the ledger link to their page
    assert [(r[1], r[2]) for r in page.changes.rows] == [
        ("removed", "Idempotency <b>keys</b>"),
        ("promoted", Ref("Retry budget", "ledger/patterns/retry-budget.md")),
        ("reinforced", Ref("Retry budget", "ledger/patterns/retry-budget.md")),
        ("added", "Idempotency <b>keys</b>"),
        ("added", Ref("Retry budget", "ledger/patterns/retry-budget.md"))]
    assert page.changes.rows[1][4:6] == ("low → medium", "1 → 2")
    text = _render(page)
    assert "](../charts/ledger-growth.svg)" in text
    assert '<a href="../patterns/retry-budget/">Retry budget</a>' in text
    assert "<b>" not in text  # AI-written titles are shown as text


def test_no_history_page_content_without_versions(tmp_path, isolated_env):
    (tmp_path / "bare" / ".smith" / "vault").mkdir(parents=True)
    content = _content(tmp_path / "bare", isolated_env)
    page = next(pg for pg in content.pages if pg.path == "ledger/history.md")
    assert page.growth.rows == [] and page.chart is None
    assert "No past versions" in _render(page)


def test_turn_timeline_shows_window_lines_and_audit_activity(tmp_path, isolated_env):
    p = _project(tmp_path)
    side = SideRepo.create(p.root, isolated_env / ".codesmith" / "snapshots")
    side.snapshot("pre-turn:1: add retries")  # 2026-05-04 13:07:40
    (p.root / "app.py").write_text("a\nb\n")
    side.snapshot("post-turn:1: add retries")  # 13:08:40
    db = make_audit_db(isolated_env / ".nagi" / "ledger.db", samples=False)
    conn = sqlite3.connect(db)
    conn.executemany("INSERT INTO actions (ts, tier, category, description) VALUES (?, ?, ?, ?)",
                     [("2026-05-04 13:08:00", 2, "git", "<script>alert(1)</script> pushed"),
                      ("2026-05-04 13:20:00", 0, "x", "after the turn")])
    conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, verdict) "
                 "VALUES ('2026-05-04 13:07:40', 'Add retries', 'fork', 'opus', 's', "
                 "'CONFIRMED')")
    conn.commit()
    conn.close()
    content = _content(p.root, isolated_env)
    page = next(pg for pg in content.pages if pg.path == "snapshots/index.md")
    turn = page.turns[0]
    assert turn.summary == ("2026-05-04 13:07:40 → 13:08:40 · 1 file changed, +2 −0 · "
                            "1 audit action, 1 dispatch in this window")
    assert turn.activity.rows == [
        ("13:07:40", "dispatch", "fork/opus → CONFIRMED",
         Ref("Add retries", "audit/tasks/add-retries.md")),
        ("13:08:00", "action", "tier 2 · git", "<script>alert(1)</script> pushed")]
    # the turn's own page lists them
    turn_page = next(pg for pg in content.pages if pg.path == turn.path)
    text = _render(turn_page)
    assert "## Audit actions" in text and "pushed" in text
    assert "<script>" not in text and "&lt;script&gt;" in text


def _build_site(root: Path, home: Path, out: Path | None = None, clean: bool = False
                ):  # type: ignore[no-untyped-def]
    from toolkit.site import build_site

    cfg = config_mod.resolve(cwd=root, env={"HOME": str(home)}).with_overrides(analyses=False)
    store = Store.open(cfg.db_path, sources=SOURCES)
    try:
        store.refresh(cfg)
        return build_site(cfg, store, out=out, clean=clean,
                          build_time=dt.datetime(2026, 5, 5, 12, tzinfo=dt.UTC))
    finally:
        store.close()


def test_an_entry_page_is_made_again_when_its_shown_history_changes_and_only_then(
        tmp_path, isolated_env):
    """An entry's page shows its history (a row per version that changed it). A rebuild
    makes the page again when what that table shows changed (a commit reinforced the
    entry), not when another entry's edit in the working files moved the working version's
    time (which the table does not show); either way the site is a clean build's bytes."""
    from tests._site_helpers import differing_files, rows_read_whole

    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect", {"patterns": [entry_b("Retry budget"), entry_b("Cursor pages")]})
    # both entries edited in the working files: each history shows the working version
    p.write({"patterns": [entry_b("Retry budget", pattern="Keep a budget."),
                          entry_b("Cursor pages", pattern="Use a cursor.")]})
    first = _build_site(p.root, isolated_env)
    retry, cursor = "ledger/patterns/retry-budget.md", "ledger/patterns/cursor-pages.md"
    assert "now (not committed)" in (first.out / "ledger/patterns/retry-budget/index.html"
                                     ).read_text(encoding="utf-8")

    # one entry edited again, an hour later: its page alone is made again
    p.write({"patterns": [entry_b("Retry budget", pattern="Keep a budget."),
                          entry_b("Cursor pages", pattern="Page with a cursor.")]})
    later = max(f.stat().st_mtime for f in p.ledger.iterdir()) + 3600
    os.utime(p.ledger / "patterns.md", (later, later))  # the working version's time moves
    with rows_read_whole() as made:  # the entries whose page is made: read whole
        edited = _build_site(p.root, isolated_env)
    assert edited.mode == "incremental"
    assert [w for w in edited.written if w.startswith("ledger/patterns/")] == [cursor]
    assert made == ["patterns/cursor-pages"]

    # a commit reinforces the other entry: its history gains a row, its page shows it
    p.commit("reinforce", {"patterns": [entry_b("Retry budget", "medium", 2),
                                        entry_b("Cursor pages", pattern="Page with a cursor.")]})
    again = _build_site(p.root, isolated_env)
    assert retry in again.written
    html = (first.out / "ledger/patterns/retry-budget/index.html").read_text(encoding="utf-8")
    assert "reinforced" in html and "promoted" in html

    full = _build_site(p.root, isolated_env, out=tmp_path / "full" / "site", clean=True)
    assert differing_files(again.out, full.out) == []


def test_change_log_shows_the_newest_changes_up_to_its_limit_and_counts_them_all(
        tmp_path, isolated_env, monkeypatch):
    import toolkit.history_report as history_report

    monkeypatch.setattr(history_report, "CHANGE_LOG_LIMIT", 2)
    p = _project(tmp_path)
    content = _content(p.root, isolated_env)
    page = next(pg for pg in content.pages if pg.path == "ledger/history.md")
    assert [(r[1], r[2]) for r in page.changes.rows] == [
        ("removed", "Idempotency <b>keys</b>"),
        ("promoted", Ref("Retry budget", "ledger/patterns/retry-budget.md"))]
    assert (page.shown_changes, page.total_changes) == (2, 5)
    assert "2 of 5" in _render(page).replace(",", "")


def test_an_entry_pages_history_digest_changes_whenever_its_history_table_does(
        tmp_path, isolated_env):
    """Whether an entry page is made again is decided by a digest of its history computed in
    SQL (reports._HISTORY_SHOWN); the table the page shows is made in Python
    (reports._history_table). Each column of each of the history's stored tables, changed in
    every row or in its first row alone: every entry whose table changed has a new digest,
    so a column shown but left out of the digest cannot leave a page stale."""
    import pickle

    from toolkit.history import entry_histories
    from toolkit.reports import _entry_history, _history_table

    p = _project(tmp_path)
    p.write({"patterns": [entry_b("Retry budget", "high", 3)]})  # a working version too
    cfg = config_mod.resolve(cwd=p.root, env={"HOME": str(isolated_env)})
    store = Store.open(cfg.db_path, sources=SOURCES)

    def shown() -> tuple[dict[str, bytes], dict[str, str] | None]:
        tables = {k: pickle.dumps(_history_table(h)) for k, h in entry_histories(store).items()}
        return tables, _entry_history(store, ["ledger_changes"])

    change = {"VARCHAR": "coalesce({c} || 'x', 'x')", "INTEGER": "coalesce({c} + 1, 1)",
              "TIMESTAMP": "coalesce({c} + INTERVAL 1 DAY, TIMESTAMP '2026-01-01')",
              "VARCHAR[]": "list_append(coalesce({c}, []), 'x')"}
    try:
        store.refresh(cfg)
        tables, digests = shown()
        assert digests is not None and set(digests) == set(tables) and len(tables) == 2
        stale, changed = [], set()
        for table in ("ledger_versions", "_history_entries", "_history_version_files",
                      "_history_blobs"):
            for column, kind, *_ in store.fetch(f"DESCRIBE {table}")[1]:
                for rows in ("", f" WHERE rowid = (SELECT min(rowid) FROM {table})"):
                    store.conn.execute("BEGIN")
                    try:
                        store.conn.execute(f"UPDATE {table} SET {column} = "
                                           f"{change[kind].format(c=column)}{rows}")
                        tables2, digests2 = shown()
                    finally:
                        store.conn.execute("ROLLBACK")
                    assert digests2 is not None
                    for key in set(tables) | set(tables2):
                        if tables.get(key) != tables2.get(key):
                            changed.add(column)
                            if digests.get(key) == digests2.get(key):
                                stale.append((table, column, rows, key))
    finally:
        store.close()
    assert stale == []
    # the changes reached what the table shows: time, source, version, subject, the changes
    # (an edit: text_hash), confidence and reflections
    assert {"ts", "source", "ref", "subject", "text_hash", "confidence", "reflections"} <= changed


def test_a_store_kept_open_after_a_failed_build_reads_the_history_of_its_next_load(
        tmp_path, isolated_env, monkeypatch):
    """A build reads the history's changes once, into a table of its own that stands in for
    the view while its pages ask about them. A program that keeps the store open (the API,
    a test) and loads it again after a build that failed half-way sees the new changes, in
    its questions and in its next build."""
    import toolkit.site as site
    from toolkit.errors import ToolkitError

    p = _project(tmp_path)
    cfg = config_mod.resolve(cwd=p.root, env={"HOME": str(isolated_env)}).with_overrides(
        analyses=False)
    when = dt.datetime(2026, 5, 5, 12, tzinfo=dt.UTC)

    def full_disk(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ToolkitError("no space left on the device")

    store = Store.open(cfg.db_path, sources=SOURCES)
    try:
        store.refresh(cfg)
        with monkeypatch.context() as m:
            m.setattr(site, "_write_downloads", full_disk)
            try:
                site.build_site(cfg, store, build_time=when)
            except ToolkitError as exc:
                assert "no space left" in str(exc)
            else:
                raise AssertionError("the build did not fail")
        count = "SELECT count(*) FROM ledger_changes WHERE change = 'reinforced'"
        assert store.scalar(count) == 1
        p.commit("reinforce", {"patterns": [entry_b("Retry budget", "high", 5)]})
        store.refresh(cfg)
        assert store.scalar(count) == 2
        result = site.build_site(cfg, store, build_time=when)
    finally:
        store.close()
    page = (result.out / "ledger/patterns/retry-budget/index.html").read_text(encoding="utf-8")
    assert page.count("reinforced</td>") == 2  # the new commit's row with the first's
