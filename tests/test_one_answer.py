"""Each question has one answer: the CLI, the MCP tools and the site ask the same code, so they
agree (retry limit, ledger search, slop query, top entries, an entry's history)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from click.testing import Result

from tests._history_helpers import Project, entry_b


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- retry limit

def test_over_the_retry_limit_is_the_same_answer_in_task_status_and_the_store(project,
                                                                              cli_run):
    """`audit task-status` (nagi-ledger's rule, also the MCP tool) and the store's
    ``task_status`` view (the site's and the handoff's tables) flip at the same dispatch."""
    seen = []
    for i in range(3):
        cli_run("audit", "log-dispatch", "retry-task", "--agent-type", "fork", "--model", "opus",
                "--summary", f"attempt {i + 1}")
        status = _json(cli_run("audit", "task-status", "retry-task", "--json"))
        view = _json(cli_run("query", "SELECT retry_count, over_retry_limit FROM task_status "
                                      "WHERE task = 'retry-task'", "--format", "json"))
        seen.append((status["retry_count"], status["over_retry_limit"],
                     view[0]["over_retry_limit"]))
    assert seen == [(0, False, False), (1, False, False), (2, True, True)]


# --------------------------------------------------------------------------- site and CLI

def _site(root: Path, home: Path) -> Any:
    from toolkit import config as config_mod
    from toolkit.cli._common import open_store  # the store as every command opens it
    from toolkit.reports import build_site_content

    cfg = config_mod.resolve(cwd=root, env={"HOME": str(home)})
    store = open_store(cfg, quiet=True)
    try:
        return build_site_content(store, today=dt.date(2026, 5, 5), site_name="acme",
                                  roots=[(root, "project")])
    finally:
        store.close()


def _page(content: Any, path: str) -> Any:
    return next(pg for pg in content.pages if pg.path == path)


def test_an_entrys_history_is_the_same_rows_on_the_site_and_in_ledger_history(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """One row per version that changed the entry (a commit that promoted and reinforced it
    is one row, "promoted, reinforced"), on the site's entry page as in the CLI."""
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect: first lessons", {"patterns": [entry_b("Retry budget")]})
    p.commit("reflect: reinforce", {"patterns": [entry_b("Retry budget", "medium", 2)]})
    p.commit("reflect: again", {"patterns": [entry_b("Retry budget", "medium", 3)]})
    monkeypatch.chdir(p.root)
    cli = [(r["when"], r["source"], r["version"], r["change"], r["confidence"],
            r["reflections"], r["subject"])
           for r in _json(cli_run("ledger", "history", "Retry budget", "--format", "json"))]
    page = _page(_site(p.root, isolated_env), "ledger/patterns/retry-budget.md")
    # the site shows seconds, the terminal minutes
    assert [(r[0][:16], *r[1:]) for r in page.history.rows] == cli
    assert [r[3] for r in cli] == ["added", "promoted, reinforced", "reinforced"]


def test_the_dashboards_top_entries_are_the_same_on_the_site_and_in_the_cli(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """Ties in reflections fall in the seed's file order (patterns before antipatterns), not
    in the order of the entries' ids. The site ranks as the CLI does, but lists antipatterns
    apart (to avoid), never among the entries to follow, and labels each entry's kind."""
    p = Project.create(tmp_path / "acme", git=False)
    p.write({"patterns": [entry_b("Zeta rule", "high", 3), entry_b("Beta rule", "high", 4)],
             "antipatterns": [entry_b("Alpha trap", "high", 3)],
             "edge-cases": [entry_b("Aardvark edge", "high", 3),
                            entry_b("Low one", "low", 9)]})
    monkeypatch.chdir(p.root)
    cli = [e["title"] for e in _json(cli_run("ledger", "--json"))["top_high_confidence"]]
    home = _page(_site(p.root, isolated_env), "index.md")
    assert cli == ["Beta rule", "Zeta rule", "Alpha trap", "Aardvark edge"]
    assert [(r[0].text, r[1].text) for r in home.top_entries.rows] == [
        ("Beta rule", "pattern"), ("Zeta rule", "pattern"), ("Aardvark edge", "edge case")]
    assert [(r[0].text, r[1].text) for r in home.top_avoid.rows] == [
        ("Alpha trap", "antipattern")]


# --------------------------------------------------------------------------- MCP and CLI

def _tools(root: Path, env: dict[str, str]) -> Any:
    from toolkit import config as config_mod
    from toolkit.mcp_server import LedgerTools

    return LedgerTools(config_mod.resolve(cwd=root, env=env))


def test_smith_ledger_search_finds_what_ledger_search_finds(project, cli_run):
    """The MCP tool and `toolkit ledger search` are one search: every line, NFC and
    case-folded. "confidence" (a field's name, not its value) found nothing in the MCP tool
    before; now both find every entry's Confidence line."""
    tools = _tools(project.root, project.env())
    for query in ("migration", "CONFIDENCE", "high"):
        cli = _json(cli_run("ledger", "search", query, "--json"))["results"]
        mcp = tools.smith_ledger_search(query, limit=1000)
        assert [(r["file"] + ".md", r["title"], r["line"], [x["line"] for x in r["lines"]])
                for r in mcp] == \
            [(h["file"], h["title"], h["entry_line"], [x["line"] for x in h["lines"]
                                                      if x["match"]]) for h in cli], query
    every = tools.smith_ledger_search("confidence", limit=1000)
    titled = _json(cli_run("query", "SELECT entry_id FROM ledger_entries WHERE title IS NOT "
                                    "NULL ORDER BY entry_id", "--format", "json"))
    assert sorted(r["entry_id"] for r in every if r["entry_id"]) == \
        [r["entry_id"] for r in titled]
    assert len(tools.smith_ledger_search("confidence", limit=2)) == 2


def test_slop_ledger_query_answers_as_slop_query(project, cli_run):
    """One query and one lenient enum reader (``won_t_fix``, which the MCP tool refused
    before, is wont_fix for both); the MCP rows are the CLI's entries in CodeSmith's shape."""
    tools = _tools(project.root, project.env())
    for filters in ({"status": "wontfix"}, {"status": "InProgress"}, {"status": "won_t_fix"},
                    {"search": "RETRY"}, {"severity": "high", "bucket": "stale_docs"}, {}):
        args = [x for k, v in filters.items() for x in (f"--{k}", v)]
        cli = _json(cli_run("slop", "query", *args, "--json"))
        mcp = tools.slop_ledger_query(**filters)
        assert mcp["matched"] == cli["matched"], filters
        assert [e["id"] for e in mcp["entries"]] == [e["id"] for e in cli["entries"]]
        assert all(e == {k: c[k] for k in e}
                   for e, c in zip(mcp["entries"], cli["entries"], strict=True))
    assert tools.slop_ledger_query(status="won_t_fix")["matched"] == 1


def test_slop_ledger_query_searches_the_text_as_given_as_slop_query_does(project, cli_run):
    """A search with spaces around it is a substring with those spaces in `toolkit slop
    query --search` (and Project.slop_query); the MCP tool trimmed it first, so a search
    for two spaces found every entry (as no search) where the CLI found none."""
    tools = _tools(project.root, project.env())
    for text in ("token", " token ", "  ", ""):
        cli = _json(cli_run("slop", "query", "--search", text, "--json"))
        mcp = tools.slop_ledger_query(search=text)
        assert (mcp["matched"], [e["id"] for e in mcp["entries"]]) == \
            (cli["matched"], [e["id"] for e in cli["entries"]]), repr(text)
    assert [tools.slop_ledger_query(search=t)["matched"] for t in ("  ", "")] == [0, 3]


# --------------------------------------------------------------------------- escaping

def test_the_site_and_the_handoff_escape_text_alike_and_the_scan_reads_it_back():
    """One escaper (toolkit.mdsafe): the handoff's text is the site's plus @-mentions in code
    spans; an invisible character is shown in both (the handoff dropped it before, which
    could join the halves of a secret the redactor had not seen as one)."""
    from tests.test_site_escape import NASTY
    from toolkit.display import visible
    from toolkit.handoff import md_block, md_text
    from toolkit.mdsafe import unescape
    from toolkit.site import md_escape

    for text in NASTY:
        assert md_text(text, None) == md_escape(text), text
        assert unescape(md_text(text, None)) == visible(" ".join(text.split())), text
    assert md_text("ghp_abc\u200bdef") == "ghp\\_abc&lt;U+200B&gt;def"
    assert md_text("ask @octocat") == "ask `@octocat`" and md_escape("ask @octocat") == \
        "ask @octocat"
    text = "- item\n1) two\n=== x\n~~strike~~ #12 !"
    assert unescape(md_block(text)) == text


def test_without_a_ledger_the_mcp_search_says_what_the_cli_says(tmp_path, isolated_env,
                                                                monkeypatch, cli_run):
    """No vault: `toolkit ledger search` fails with "No Ledger found." and so does the MCP
    tool (it answered an empty list before, as if nothing matched)."""
    import pytest

    from toolkit.errors import NotFoundError

    (tmp_path / "toolkit.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    result = cli_run("ledger", "search", "anything")
    assert result.exit_code == 1
    with pytest.raises(NotFoundError) as err:
        _tools(tmp_path, {"HOME": str(isolated_env)}).smith_ledger_search("anything")
    assert result.stderr.strip() == f"Error: {err.value}"


# --------------------------------------------------------------------------- slop pages

def _slop_world(project: Any) -> None:
    """The fixture project's slop ledger holding two entries under one id (CodeSmith does not
    check ids are unique) and two whose ids share their first 8 characters."""
    from tests._slop_helpers import entry, write_ledger

    twin = "abcd1234-1111-4222-8333-000000000001"
    write_ledger(project.slop, [
        entry(1, id=twin, title="First under the twin id", severity="critical"),
        entry(2, id=twin, title="Second under the twin id", severity="critical"),
        entry(3, id="feed5678-1111-4222-8333-000000000003", title="Short id shared, one",
              severity="high"),
        entry(4, id="feed5678-1111-4222-8333-000000000004", title="Short id shared, two",
              severity="high"),
        entry(5, title="A short id of its own", severity="high")])


def test_every_slop_entry_slop_query_lists_has_a_page_of_its_own(project, cli_run):
    """`toolkit slop query` lists both entries of an id the file holds twice; the site gives
    each its page (its build stopped before: "two pages of the site have the same path")."""
    _slop_world(project)
    listed = _json(cli_run("slop", "query", "--json"))["entries"]
    assert [e["title"] for e in listed][:2] == ["First under the twin id",
                                                "Second under the twin id"]
    content = _site(project.root, project.home)
    paths = [pg.path for pg in content.pages]
    assert len(paths) == len(set(paths))
    entry_pages = sorted(p for p in paths if p.startswith("slop/") and p.count("/") == 1
                         and p not in ("slop/index.md", "slop/ageing.md"))
    twins = ["slop/abcd1234-1111-4222-8333-000000000001.md",
             "slop/abcd1234-1111-4222-8333-000000000001-2.md"]
    assert entry_pages == sorted([*twins, "slop/feed5678-1111-4222-8333-000000000003.md",
                                  "slop/feed5678-1111-4222-8333-000000000004.md",
                                  f"slop/{listed[4]['id'][:8]}.md"])
    titles = {pg.path: pg.title for pg in content.pages if pg.path in twins}
    assert sorted(titles.values()) == ["First under the twin id", "Second under the twin id"]


def test_the_sites_handoff_and_checks_link_a_shared_short_id_to_no_other_entrys_page(
        project):
    """The handoff and the checks name slop entries by short id; on the site each short id
    linked to the page of the last entry holding it, so two entries whose ids start alike
    both linked to the second's page. A short id of one entry links to its page; a shared
    one links to none (`toolkit slop query` tells them apart)."""
    from toolkit import config as config_mod
    from toolkit import handoff_page
    from toolkit.checks.page import _targets
    from toolkit.cli._common import open_store
    from toolkit.reports import build_site_content, load_site_data

    _slop_world(project)
    cfg = config_mod.resolve(cwd=project.root, env={"HOME": str(project.home)})
    store = open_store(cfg, quiet=True)
    try:
        content = build_site_content(store, today=dt.date(2026, 5, 5), site_name="acme",
                                     roots=[(project.root, "project")],
                                     extra=[handoff_page.builder(cfg, None)])
        data = load_site_data(store, today=dt.date(2026, 5, 5), site_name="acme",
                              roots=[(project.root, "project")])
    finally:
        store.close()
    report = str(_page(content, "handoff/index.md").report)
    links = dict(re.findall(r"\[(\w{8})\]\(\.\./(slop/[^)]+)\)", report))
    own = next(s for s in data.slop if s["title"] == "A short id of its own")
    assert links == {own["short_id"]: data.slop_path[own["position"]]}
    assert "feed5678" in report and "abcd1234" in report  # listed, not linked
    slop_targets = {k: v for k, v in _targets(data).items() if k[0] == "slop"}
    assert slop_targets == {("slop", own["short_id"]): data.slop_path[own["position"]]}


# --------------------------------------------------------------------------- ledger counts

def test_entries_per_file_and_confidence_are_the_dashboards_on_the_site(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """`toolkit ledger` counts an entry of no known confidence (none given, or another word)
    in a [???] column; the site's tables by file left it out, so a file's row did not add
    up (antipatterns.md: 1 entry, 0 high, 0 medium, 0 low) and its chart's total was one
    short. Both tables now have the column when such an entry exists, and the chart a
    series; with every entry rated they keep the seed's five columns."""
    p = Project.create(tmp_path / "acme", git=False)
    p.write({"patterns": [entry_b("Rated", "high"), entry_b("Odd word", "certain")],
             "antipatterns": [entry_b("Unrated", "").replace("**Confidence:** \n", "")]})
    monkeypatch.chdir(p.root)
    files = _json(cli_run("ledger", "--json"))["files"]
    cli = [(f["file"], f["entries"], f["high"], f["medium"], f["low"], f["unknown"])
           for f in files]
    content = _site(p.root, isolated_env)
    for table in (_page(content, "index.md").ledger_table,
                  _page(content, "ledger/index.md").files):
        assert table.columns == ("File", "Entries", "High", "Medium", "Low", "[???]")
        shown = [tuple(int(c.text) if hasattr(c, "text") and c.text.isdigit() else
                       c.text if hasattr(c, "text") else c for c in row) for row in table.rows]
        assert sorted(shown[:-1]) == sorted(cli)
        assert shown[-1] == ("Total", 3, 1, 0, 0, 2)
    chart = next(c for c in content.charts if c.name == "ledger-by-file")
    assert sum(sum(s.values) for s in chart.series) == 3

    p.write({"patterns": [entry_b("Rated", "high")]})
    content = _site(p.root, isolated_env)
    assert _page(content, "ledger/index.md").files.columns == (
        "File", "Entries", "High", "Medium", "Low")


def test_ledger_history_lists_the_entries_a_title_matches_in_ledger_shows_order(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """`toolkit ledger show` lists the entries a title matches in the seed's file order
    (patterns before antipatterns), each file's in its order; `ledger history` listed them
    by file name, then title (antipatterns first, then "Alpha retry" before "Zeta retry")."""
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect", {"patterns": [entry_b("Zeta retry"), entry_b("Alpha retry")],
                         "antipatterns": [entry_b("Blind retry")]})
    monkeypatch.chdir(p.root)
    shown = cli_run("ledger", "show", "retry")
    assert shown.exit_code == 1
    listed = re.findall(r"^\d+\. \[\w+\] (.+) — (\w+)\.md$", shown.stdout, re.M)
    assert listed == [("Zeta retry", "patterns"), ("Alpha retry", "patterns"),
                      ("Blind retry", "antipatterns")]
    rows = _json(cli_run("ledger", "history", "retry", "--format", "json"))
    assert [r["entry"] for r in rows] == [f"{f}/{t.lower()}" for t, f in listed]


# --------------------------------------------------------------------------- one clock

def test_the_checks_count_days_in_utc_as_slop_query_does_whatever_the_machines_zone(
        project, cli_run, monkeypatch):
    """High slop created 30 days before today at 03:00 UTC: `slop query` says 30 days old,
    and old-high-slop (older than 30 days) lets it pass, on a machine in UTC. In Los
    Angeles the check read today as midnight there (the store's DuckDB took the machine's
    zone), 07:00 UTC, and flagged it; `toolkit query` printed times in that zone too."""
    import time

    from tests._slop_helpers import entry, write_ledger

    created = "2026-10-29T03:00:00+00:00"
    write_ledger(project.slop, [entry(1, severity="high", created_at=created,
                                      updated_at=created)])
    today = ("--today", "2026-11-28")
    seen = []
    try:
        for zone in ("UTC", "America/Los_Angeles", "Asia/Tokyo"):
            monkeypatch.setenv("TZ", zone)
            time.tzset()
            ages = [e["age_days"] for e in _json(cli_run(*today, "slop", "query",
                                                         "--json"))["entries"]]
            result = cli_run(*today, "check", "--json")
            check = next(c for c in json.loads(result.stdout)["checks"]
                         if c["name"] == "old-high-slop")
            shown = _json(cli_run("query", "SELECT created_at FROM slop_entries",
                                  "--format", "json"))
            seen.append((zone, ages, check["failing_rows"], shown[0]["created_at"]))
    finally:
        monkeypatch.setenv("TZ", "UTC")
        time.tzset()
    assert [s[1:] for s in seen] == [([30], 0, seen[0][3])] * 3, seen


def test_slops_open_count_is_the_handoffs_and_the_sites_with_a_status_of_no_known_kind(
        project, cli_run):
    """`toolkit slop`'s summary line counts `open` and `in_progress` as open (its guide says
    so); a status CodeSmith does not know ("closed") or none was counted open there too, so
    it said 4 open where the handoff and the site (open or in progress) said 2."""
    from tests._slop_helpers import entry, write_ledger

    missing = entry(4)
    del missing["status"]
    write_ledger(project.slop, [entry(1), entry(2, status="in_progress"),
                                entry(3, status="closed"), missing,
                                entry(5, status="resolved"), entry(6, status="wont_fix")])
    summary = _json(cli_run("slop", "--json"))
    assert (summary["total"], summary["open"], summary["resolved"], summary["accepted"]) == \
        (6, 2, 1, 1)
    assert cli_run("slop").stdout.startswith(
        f"File: {project.slop}\nSlop Ledger: 6 total | 2 open | 1 resolved | 1 accepted\n")
    handoff = cli_run("handoff")
    assert "- **2** open slop items" in handoff.stdout
    content = _site(project.root, project.home)
    assert _page(content, "slop/index.md").open_total == 2


# --------------------------------------------------------------------------- unreadable files

def test_a_ledger_file_that_cannot_be_read_is_reported_by_dashboard_list_and_search(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """antipatterns.md is not UTF-8: the dashboard marks it "(unreadable)" and `ledger
    export` says so, but `ledger list` showed nothing for it (as for an empty file) and
    `ledger search` answered from the other files without a word. List now marks it as the
    dashboard does, and search names it on stderr as `toolkit status` does."""
    p = Project.create(tmp_path / "acme", git=False)
    p.write({"patterns": [entry_b("Retry budget")]})
    (p.ledger / "antipatterns.md").write_bytes(
        b"# Antipatterns\n\n" + entry_b("Blind retry \xff").encode("utf-8") + b"\xff\xfe\n")
    monkeypatch.chdir(p.root)
    assert "| antipatterns.md (unreadable) |" in cli_run("ledger").stdout
    listed = cli_run("ledger", "list")
    assert listed.exit_code == 0
    assert "--- antipatterns.md --- (unreadable: invalid UTF-8 at byte offset" in listed.stdout
    for args in ((), ("--json",)):
        found = cli_run("ledger", "search", "retry", *args)
        assert found.exit_code == 0
        assert found.stderr.startswith(f"warning: {p.ledger / 'antipatterns.md'}: invalid "
                                       "UTF-8 at byte offset"), args
    assert [h["file"] for h in _json(found)["results"]] == ["patterns.md"]


def test_the_sites_files_tables_mark_a_missing_and_an_unreadable_file_as_the_dashboard_does(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """A ledger file that is missing or not UTF-8 has no count: `toolkit ledger` says
    "(missing)" / "(unreadable)" with dashes, but the site's tables by file (home page and
    ledger overview) gave it a row of zeros, as for an empty file. They now mark it as the
    dashboard does, and count it again once it can be read."""
    p = Project.create(tmp_path / "acme", git=False)
    p.write({"patterns": [entry_b("Retry budget")]})
    (p.ledger / "antipatterns.md").write_bytes(b"# Antipatterns\n\n\xff\xfe\n")
    (p.ledger / "edge-cases.md").unlink()
    monkeypatch.chdir(p.root)
    dashboard = cli_run("ledger").stdout
    assert re.search(r"\| antipatterns\.md \(unreadable\) +\| +- \|", dashboard)
    assert re.search(r"\| edge-cases\.md \(missing\) +\| +- \|", dashboard)

    def rows(content: Any, path: str, table: str) -> dict[str, tuple[Any, ...]]:
        got = getattr(_page(content, path), table).rows
        return {getattr(r[0], "text", r[0]): tuple(getattr(c, "text", c) for c in r[1:])
                for r in got}

    content = _site(p.root, isolated_env)
    for shown in (rows(content, "index.md", "ledger_table"),
                  rows(content, "ledger/index.md", "files")):
        assert shown["antipatterns.md (unreadable)"] == ("-",) * 4
        assert shown["edge-cases.md (missing)"] == ("-",) * 4
        assert shown["patterns.md"] == (1, 0, 0, "1")
        assert shown["Total"] == (1, 0, 0, 1)

    p.write({"patterns": [entry_b("Retry budget")], "antipatterns": [entry_b("Blind retry")]})
    shown = rows(_site(p.root, isolated_env), "ledger/index.md", "files")
    assert shown["antipatterns.md"][0] == 1 and shown["edge-cases.md"][0] == 0


def test_ledger_history_counts_entries_of_no_known_confidence_as_the_site_does(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """The site's history table has an Unrated column; `toolkit ledger history` showed only
    high, medium and low, which did not add up to its total (and the site's table of copies
    and snapshots had no such column). It has the column (unrated) when any version holds
    such an entry, and the rows are the site's."""
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect", {"patterns": [entry_b("Rated", "high")]})
    p.commit("reflect", {"patterns": [entry_b("Rated", "high"), entry_b("Odd", "certain")]})
    monkeypatch.chdir(p.root)
    rows = _json(cli_run("ledger", "history", "--format", "json"))
    cli = [(r["high"], r["medium"], r["low"], r["unrated"], r["total"]) for r in rows]
    assert cli == [(1, 0, 0, 0, 1), (1, 0, 0, 1, 2)]
    page = _page(_site(p.root, isolated_env), "ledger/history.md")
    for table in (page.growth, page.others):  # the copies' table has the column too
        assert table.columns[3:8] == ("High", "Medium", "Low", "Unrated", "Total")
    # the site: newest first, no unrated entries left blank
    assert [tuple(r[3:8]) for r in reversed(page.growth.rows)] == [
        (h, m, low, u or None, t) for h, m, low, u, t in cli]


# --------------------------------------------------------------------------- redaction

def test_the_handoff_redacts_a_password_as_the_site_does_not_twice(project, cli_run):
    """The handoff redacts each value, escapes it, then scans the whole report again; that
    scan read `password=\\[REDACTED\\]` as a password whose value is the backslash, so the
    brief showed `password=[REDACTED][REDACTED\\]` where the redacted site shows
    `password=[REDACTED]`. A value that starts with the marker, escaped or not, is left."""
    from toolkit.handoff import md_text
    from toolkit.redact import redact

    brief = "use password=hunter2secret, then the password is hunter2secret --token ab12cd34ef"
    cli_run("audit", "log-dispatch", "Rotate the keys", "--agent-type", "fork",
            "--model", "opus", "--summary", brief)
    once = md_text(redact(brief), None)
    assert once == ("use password=\\[REDACTED\\], then the password is \\[REDACTED\\] --token "
                    "\\[REDACTED\\]")
    assert redact(once) == once
    report = cli_run("handoff").stdout
    assert once in report and "[REDACTED][REDACTED" not in report


def test_a_meta_total_the_dashboard_disputes_fails_the_meta_counts_check(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """meta.yaml's total_entries says 9, its counts by file match the files (2): the
    dashboard said "Total entries: 2 (meta.yaml says 9)" while meta-counts (and so the
    handoff and the site's checks) passed. The check now fails with that disagreement."""
    p = Project.create(tmp_path / "acme", git=False)
    p.write({"patterns": [entry_b("One")], "antipatterns": [entry_b("Two")]})
    meta = p.ledger / "meta.yaml"
    meta.write_text('last_reflection: "2026-04-01"\ntotal_reflections: 2\ntotal_entries: 9\n'
                    "entries_by_file:\n  patterns: 1\n  antipatterns: 1\n  tool-preferences: 0\n"
                    "  edge-cases: 0\n  project-quirks: 0\n")
    monkeypatch.chdir(p.root)
    assert "Total entries: 2 (meta.yaml says 9)\n" in cli_run("ledger").stdout
    checks = json.loads(cli_run("check", "--json").stdout)["checks"]
    counts = next(c for c in checks if c["name"] == "meta-counts")
    assert (counts["status"], counts["rows"]) == ("fail", [
        {"path": str(meta), "problem": "meta.yaml says total_entries is 9; the ledger files "
                                       "have 2"}])
    meta.write_text(meta.read_text().replace("total_entries: 9", "total_entries: 2"))
    checks = json.loads(cli_run("check", "--json").stdout)["checks"]
    assert next(c for c in checks if c["name"] == "meta-counts")["status"] == "pass"


def test_the_handoffs_debt_table_counts_open_slop_as_the_sites_matrix_does(project, cli_run):
    """An open entry of a severity CodeSmith does not know ("urgent") has a column of its
    own in the site's bucket-by-severity table; the handoff's table had only the five known
    columns, so its row read 0 0 0 0 0 with a total of 1 and the buckets came in another
    order. Both now lay out the same matrix: the same columns and rows, in the same order."""
    from tests._slop_helpers import entry, write_ledger

    write_ledger(project.slop, [entry(1, bucket="tool_gaps", severity="high"),
                                entry(2, bucket="retained_compatibility", severity="urgent"),
                                entry(3, bucket="retained_compatibility", severity="low",
                                      status="in_progress"),
                                entry(4, bucket="misc", severity="critical"),
                                entry(5, bucket="tool_gaps", severity="low",
                                      status="resolved")])
    debt = cli_run("handoff").stdout.split("## Debt: open slop (4)\n", 1)[1]
    handoff = [[cell.strip().replace("\\_", "_") for cell in line.strip("|").split("|")]
               for line in debt.lstrip("\n").split("\n\n", 1)[0].splitlines()]
    matrix = _page(_site(project.root, project.home), "slop/index.md").matrix
    site = [[c.text if hasattr(c, "text") else str(c) for c in row] for row in matrix.rows]
    assert [c.lower() for c in handoff[0]] == [c.lower() for c in matrix.columns] == [
        "bucket", "critical", "high", "medium", "low", "info", "urgent", "total"]
    assert handoff[2:] == site == [
        ["retained_compatibility", "0", "0", "0", "1", "0", "1", "2"],
        ["tool_gaps", "0", "1", "0", "0", "0", "0", "1"],
        ["misc", "1", "0", "0", "0", "0", "0", "1"]]


def _fleet_content(tmp_path: Path, w: Any) -> Any:
    """The fleet site's pages for the fleet world ``w`` (tests._fleet_helpers.make_fleet)."""
    from toolkit import config as config_mod
    from toolkit.fleet import open_fleet
    from toolkit.fleet_report import build_fleet_content

    fleet = open_fleet(config_mod.resolve(cwd=tmp_path, env=w.env()), store_path=w.store,
                       fleet_file=w.fleet_file, env=w.env())
    try:
        return build_fleet_content(fleet.store, home=w.home, today="2026-05-09")
    finally:
        fleet.close()


def test_the_fleets_card_counts_a_projects_entries_as_its_dashboard_does(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """An entry whose confidence is no known one ("maybe") is in the dashboard's `[???]`
    column (`toolkit ledger`, the site); the fleet counted it in `entries` but in no
    confidence, so alpha's card read 1 / 1 / 1 for 4 entries. The card and `fleet list
    --json` now count it as the dashboard does."""
    from tests._fleet_helpers import ledger_entry, make_fleet

    w = make_fleet(tmp_path, isolated_env)
    for key, value in w.env().items():
        monkeypatch.setenv(key, value)
    with (w.alpha / ".smith" / "vault" / "ledger" / "patterns.md").open("a") as f:
        f.write(ledger_entry("Guess the retry budget", "maybe"))
    monkeypatch.chdir(w.alpha)
    files = _json(cli_run("ledger", "--json"))["files"]
    dashboard = {c: sum(f[c] for f in files) for c in ("high", "medium", "low", "unknown")}
    assert dashboard == {"high": 1, "medium": 1, "low": 1, "unknown": 1}

    monkeypatch.chdir(tmp_path)
    listed = {p["name"]: p for p in _json(cli_run("fleet", "--store", str(w.store), "list",
                                                  "--json"))["projects"]}
    assert listed["alpha"]["entries"] == 4
    assert listed["alpha"]["entries_by_confidence"] == dashboard
    content = _fleet_content(tmp_path, w)
    overview = _page(content, "index.md").sections[0].table
    column = overview.columns.index("Entries (high / medium / low)")
    cards = {row[0].text: row[column] for row in overview.rows}
    assert cards["alpha"] == "1 / 1 / 1 + 1 [???]"
    assert cards["beta"] == "1 / 0 / 1"  # none of no known confidence: as before
    card = next(f.value for f in _page(content, "projects/alpha.md").sections[0].fields
                if f.label.startswith("Entries"))
    assert card == cards["alpha"]


def test_the_fleets_debt_table_counts_every_status_as_slop_does(
        tmp_path, isolated_env, monkeypatch, cli_run):
    """A slop entry whose status CodeSmith does not know ("blocked") has a column of its own
    in `toolkit slop`'s table (and a page on the site), but the fleet's Debt by project had
    only the five known columns: beta's row read 0 open, 1 resolved ... with a total of 3.
    Each status an entry has is now a column, as `toolkit slop` lays them out."""
    from tests._fleet_helpers import make_fleet
    from tests._slop_helpers import entry, read_entries, write_ledger

    w = make_fleet(tmp_path, isolated_env)
    for key, value in w.env().items():
        monkeypatch.setenv(key, value)
    write_ledger(w.slop, [*read_entries(w.slop), entry(5, project="beta", status="blocked")])
    monkeypatch.chdir(tmp_path)
    statuses = _json(cli_run("slop", "--json"))["by_status"]
    assert statuses == {"open": 3, "resolved": 1, "blocked": 1}

    content = _fleet_content(tmp_path, w)
    table = _page(content, "debt.md").sections[0].table
    assert table.columns == ("Project", "Open", "In progress", "Resolved", "Accepted",
                             "Won't fix", "blocked", "Open severe", "Total")
    rows = {row[0].text: row[1:] for row in table.rows}
    assert rows["beta"] == (1, 0, 1, 0, 0, 1, 1, 3)
    assert sum(sum(r[:6]) for r in rows.values()) == sum(r[-1] for r in rows.values()) == \
        sum(statuses.values())


def test_an_empty_and_a_missing_slop_value_are_one_value_on_the_site_as_in_slop(
        project, cli_run):
    """An entry with ``"owner": ""`` and one with no owner (or an empty and a missing bucket)
    are both "[???]" and share the page slop/owner/none: the site made that page twice and
    the build stopped ("two pages of the site have the same path"), and the handoff's debt
    table came to list "[???]" twice. `toolkit slop` counts them as one bucket; so do the
    site's pages and the handoff now."""
    from tests._slop_helpers import entry, write_ledger

    empty, missing = entry(1, owner="", bucket=""), entry(2)
    del missing["bucket"]
    write_ledger(project.slop, [empty, missing, entry(3, owner="ops")])
    assert _json(cli_run("slop", "--json"))["by_bucket"] == {"[???]": 2, "stale_docs": 1}
    content = _site(project.root, project.home)
    paths = [pg.path for pg in content.pages]
    assert len(paths) == len(set(paths))
    owners = _page(content, "slop/owner/index.md").table.rows
    assert [(r[0].text, r[0].path, r[1]) for r in owners] == [
        ("ops", "slop/owner/ops.md", 1), ("[???]", "slop/owner/none.md", 2)]
    matrix = _page(content, "slop/index.md").matrix
    assert [(r[0].text, r[-1]) for r in matrix.rows] == [("stale_docs", 1), ("[???]", 2)]
    debt = cli_run("handoff").stdout.split("## Debt: open slop (3)\n", 1)[1]
    assert [line.split(" | ")[0] for line in debt.splitlines() if line.startswith("| ")
            and not line.startswith("| Bucket")] == ["| stale\\_docs", "| \\[???\\]"]


def test_a_slop_ledger_that_is_not_json_fails_slop_unloadable_as_toolkit_slop_refuses_it(
        project, cli_run):
    """A slop ledger cut short (not JSON) is refused by `toolkit slop` (exit 65) and
    CodeSmith cannot load it, but `toolkit check` passed slop-unloadable: the check looked
    only for the loader-rule warnings, and the store kept the last rows it read. The read
    error is now the check's failing row, in the terminal, the handoff and the site."""
    (project.slop).write_text('{"entries": [', encoding="utf-8")
    refused = cli_run("slop")
    assert refused.exit_code == 65
    assert "invalid JSON" in refused.stderr
    result = cli_run("check", "--select", "slop-unloadable", "--json")
    assert result.exit_code == 1, result.output
    [check] = json.loads(result.stdout)["checks"]
    assert (check["status"], check["failing_rows"]) == ("fail", 1)
    assert check["rows"][0]["path"].endswith(project.slop.name)
    assert check["rows"][0]["problem"].startswith("invalid JSON, column 14")
    assert "- **slop-unloadable** (FAIL, error level, 1 row)" in cli_run("handoff").stdout


def test_the_dashboards_week_of_actions_is_the_audit_pages_with_a_tier_of_no_known_kind(
        project):
    """An audit DB written by hand can hold a tier nagi-ledger never writes (3, or text,
    read as none). The home page counted them in "N actions by tier" and its headline, but
    its day table had only tiers 0-2, so its totals summed to less and the day read 2 where
    the audit page's day table read 4. Both tables now have the same columns and rows."""
    import sqlite3

    conn = sqlite3.connect(project.audit_db)
    conn.execute("PRAGMA ignore_check_constraints = 1")
    for tier in (0, 1, 3, "two"):
        conn.execute("INSERT INTO actions (ts, tier, category, description) "
                     "VALUES ('2026-05-04 10:00:00', ?, 'deploy', 'shipped')", (tier,))
    conn.commit()
    conn.close()
    content = _site(project.root, project.home)
    home = _page(content, "index.md")
    stats = _page(content, "audit/index.md")

    def cells(row: tuple[Any, ...]) -> list[Any]:
        return [c.text if hasattr(c, "text") else c for c in row]

    week = {cells(r)[0]: cells(r) for r in home.audit_days.rows}
    month = {cells(r)[0]: cells(r) for r in stats.per_day.rows}
    assert home.audit_days.columns == stats.per_day.columns == (
        "Day", "Tier 0", "Tier 1", "Tier 2", "Tier 3", "Tier [???]", "Total")
    assert week == {day: row for day, row in month.items() if day in week}
    assert week["2026-05-04"][4:] == [1, 1, sum(week["2026-05-04"][1:6])]
    assert sum(r[-1] for r in week.values()) == home.audit_week_total


def test_a_source_unreadable_after_a_good_load_is_said_by_every_answer_from_the_store(
        project, cli_run):
    """After a good load, a slop ledger cut short made `toolkit slop` exit 65 while the
    handoff exited 0 and counted the open slop of the store's last good read as current,
    saying nothing. Every command that answers from the store now warns on stderr, naming
    the source, why, and the time of the read it shows; the handoff (published) says it too."""
    assert cli_run("load").exit_code == 0
    project.slop.write_text('{"entries": [', encoding="utf-8")
    assert cli_run("slop").exit_code == 65
    seen = []
    for _ in range(2):
        result = cli_run("handoff")
        assert result.exit_code == 0, result.output
        [line] = [x for x in result.stderr.splitlines() if "could not be read" in x]
        assert line.startswith(f"Warning: slop could not be read ({project.slop}:1: "
                               "invalid JSON")
        assert re.search(r"; showing the last good read of \d{4}-\d\d-\d\d \d\d:\d\d UTC$",
                         line), line
        assert "**Warning:** slop could not be read (" in result.stdout
        seen.append(line)
    assert seen[0] == seen[1]  # the time of the good read, not of the failed one
    export = cli_run("export", "--out", str(project.root / "lake"))
    assert seen[0] in export.stderr.splitlines()
    assert seen[0] in cli_run("status").stderr.splitlines()
    warnings = _page(_site(project.root, project.home), "warnings.md")
    assert warnings.intro.startswith("**Warning:** slop could not be read (")
    assert seen[0][len("Warning: "):][-40:] in warnings.intro


def test_query_schema_and_history_say_a_source_they_answer_from_could_not_be_read(project,
                                                                                 cli_run):
    """`toolkit query` counted the slop of the store's last good read after the slop ledger
    was cut short, exit 0 and no word, while status and the handoff warned: query, schema and
    ledger history refresh the store too, and now print the same Warning line."""
    assert cli_run("load").exit_code == 0
    project.slop.write_text('{"entries": [', encoding="utf-8")
    expected = [x for x in cli_run("status").stderr.splitlines() if "could not be read" in x]
    assert len(expected) == 1
    for args in (("query", "SELECT count(*) FROM slop_entries"), ("schema", "slop_entries"),
                 ("ledger", "history")):
        result = cli_run(*args)
        warned = [x for x in result.stderr.splitlines() if "could not be read" in x]
        assert warned == expected, (args, result.stderr)


def test_check_says_a_source_it_checks_could_not_be_read(project, cli_run):
    """After a good load, the audit DB was damaged: status, query and the handoff warned that
    the audit could not be read and showed the last good read, but `toolkit check` (the CI
    gate) passed stale-retries and stale-pending on those rows with exit 0 and no word. It
    refreshes the store too, and now prints the same Warning line."""
    assert cli_run("load").exit_code == 0
    project.audit_db.write_bytes(b"not a database at all, " * 8)
    for suffix in ("-wal", "-shm"):
        project.audit_db.with_name(project.audit_db.name + suffix).unlink(missing_ok=True)
    expected = [x for x in cli_run("status").stderr.splitlines() if "could not be read" in x]
    assert len(expected) == 1 and "audit" in expected[0]
    for args in (("check",), ("check", "--json")):
        result = cli_run(*args)
        warned = [x for x in result.stderr.splitlines() if "could not be read" in x]
        assert warned == expected, (args, result.stderr)


def test_owners_that_differ_in_case_are_one_owner_on_the_site_as_in_slop_query(project,
                                                                             cli_run):
    """`slop query --owner jane.doe` matches "Jane.Doe" too, but the site gave each spelling
    its own owner page: the owner pages now group owners as the query matches them, named by
    the most used spelling, and every entry's owner links to its group's page."""
    from tests._slop_helpers import entry, write_ledger

    write_ledger(project.slop, [entry(1, owner="jane.doe"), entry(2, owner="Jane.Doe"),
                                entry(3, owner="jane.doe", status="done"),
                                entry(4, owner="bob")])
    listed = _json(cli_run("slop", "query", "--owner", "JANE.DOE", "--json"))["entries"]
    assert [e["owner"] for e in listed] == ["jane.doe", "Jane.Doe", "jane.doe"]
    content = _site(project.root, project.home)
    index = _page(content, "slop/owner/index.md")
    assert [(r[0].text, r[1], r[2]) for r in index.table.rows] == [("bob", 1, 1),
                                                                    ("jane.doe", 3, 2)]
    jane = _page(content, index.table.rows[1][0].path)
    assert sorted(r[0].text for r in jane.table.rows) == ["Entry number 1", "Entry number 2",
                                                           "Entry number 3"]
    links = {(r[5].text, r[5].path) for r in jane.table.rows}
    assert links == {("jane.doe", jane.path), ("Jane.Doe", jane.path)}
    paths = [pg.path for pg in content.pages if pg.path.startswith("slop/owner/")]
    assert len(paths) == 3  # the index, bob, jane.doe


def test_status_and_the_site_list_the_ledgers_warnings_in_the_order_the_dashboard_does(
        project, cli_run):
    """The dashboard (`toolkit ledger`) warns in its reader's order (Smith's file order:
    patterns.md before antipatterns.md); `toolkit status` and the site's Warnings page
    (Store.problems) sorted them by path instead. The store now keeps each source's
    warnings in the order its reader noted them."""
    malformed = ("\n---\n\n**Title:** Missing category {n}\n**Date:** 2026-05-02\n\n---\n\n"
                 "**Title:**\n**Date:** 2026-05-03\n**Category:** audit\n**Confidence:** low\n")
    for n, name in enumerate(("patterns.md", "antipatterns.md")):
        path = project.ledger / name
        path.write_text(path.read_text(encoding="utf-8") + malformed.format(n=n),
                        encoding="utf-8")
    dashboard = cli_run("ledger")
    assert dashboard.exit_code == 0, dashboard.output
    shown = [line.removeprefix("warning: ") for line in dashboard.stderr.splitlines()
             if line.startswith("warning: ")]
    files = [Path(w.split(":")[0]).name for w in shown]
    assert files.index("antipatterns.md") > files.index("patterns.md")
    status = _json(cli_run("status", "--json"))["warnings"]
    ledger = str(project.ledger)
    assert [(f"{w['path']}:{w['line']}" if w["line"] else w["path"]) + f": {w['message']}"
            for w in status if w["path"].startswith(ledger)] == shown
    text = cli_run("status").stdout
    assert [line.strip() for line in text.splitlines() if line.strip().startswith(ledger)] \
        == shown
    page = _page(_site(project.root, project.home), "warnings.md")
    assert [(Path(str(r[1])).name, r[3]) for r in page.table.rows
            if "vault/ledger/" in str(r[1])] == [
        (Path(w.split(":")[0]).name, w.split(": ", 1)[1]) for w in shown]


def test_the_sites_csv_download_writes_times_and_orders_rows_as_query_and_the_file_do(
        project, cli_run, tmp_path):
    """The site's data/slop_entries.csv wrote `2026-05-01 10:00:00.38+00` where `toolkit query
    --format csv` writes `2026-05-01 10:00:00.380000+00:00`, and sorted the rows by id, not
    as the slop ledger holds them. One formatting now (the query's ISO 8601) and the file's
    order."""
    import csv
    import io

    from tests._slop_helpers import entry, write_ledger
    from toolkit import config as config_mod
    from toolkit.cli._common import open_store
    from toolkit.site import _copy_table_if_changed

    write_ledger(project.slop, [
        entry(9, created_at="2026-05-01T10:00:00.38+00:00"),
        entry(1, created_at="2026-05-02T11:30:00+00:00"),
        entry(5, created_at="2026-05-03T12:00:00.123456+00:00")])
    query = cli_run("query", "SELECT id, created_at FROM slop_entries ORDER BY position",
                    "--format", "csv")
    assert query.exit_code == 0, query.output
    expected = list(csv.reader(io.StringIO(query.stdout)))[1:]
    assert [r[1] for r in expected] == ["2026-05-01 10:00:00.380000+00:00",
                                        "2026-05-02 11:30:00+00:00",
                                        "2026-05-03 12:00:00.123456+00:00"]
    cfg = config_mod.resolve(cwd=project.root, env={"HOME": str(project.home)})
    dest = tmp_path / "slop_entries.csv"
    with open_store(cfg, quiet=True) as store:
        _copy_table_if_changed(store, "slop_entries", tmp_path, [(dest.name, "csv"),
                                                                 ("slop_entries.json", "json")],
                               store.columns(["slop_entries"])["slop_entries"])
    rows = list(csv.DictReader(io.StringIO(dest.read_text(encoding="utf-8"))))
    assert [[r["id"], r["created_at"]] for r in rows] == expected


def test_the_handoffs_open_slop_list_is_in_the_buckets_order_of_its_debt_table(
        project, cli_run, monkeypatch):
    """The handoff's list of open slop (``Project.open_slop``, its "Critical and high"
    items) came by bucket name (accepted_debt first) while its debt table, the site and the
    debt notebook lay buckets out in CodeSmith's order (tool_gaps before accepted_debt, then
    other buckets, then none): one order now. An item of no bucket shows `[???]` there, as
    in the debt table and on the site (it showed an empty bucket)."""
    from tests._slop_helpers import entry, write_ledger
    from toolkit import Project

    write_ledger(project.slop, [entry(1, bucket="accepted_debt", severity="high"),
                                entry(2, bucket="misc", severity="high"),
                                entry(3, bucket=None, severity="high"),
                                entry(4, bucket="tool_gaps", severity="high")])
    monkeypatch.chdir(project.root)
    with Project.open() as api:
        listed = list(dict.fromkeys(s["bucket"] for s in api.open_slop()))
        assert listed == api.slop_matrix().buckets == ["tool_gaps", "accepted_debt", "misc",
                                                       None]
    urgent = cli_run("handoff").stdout.split("### Critical and high (4)\n", 1)[1]
    shown = urgent.lstrip("\n").split("\n\n", 1)[0].splitlines()
    assert [next(b for b in ("tool", "accepted", "misc", "???") if b in line)
            for line in shown] == ["tool", "accepted", "misc", "???"]


def test_the_sites_json_downloads_hold_the_values_toolkit_query_json_prints(
        project, cli_run, tmp_path):
    """The site's JSON downloads (data/*.json) wrote times in DuckDB's form (`2026-05-01
    10:00:00.38+00`, an action's `2026-05-04 10:00:00.25`) and a JSON column's document as a
    nested value, where `toolkit query --format json` (and the CSV downloads) print
    `2026-05-01 10:00:00.380000+00:00`, `2026-05-04 10:00:00.250000` and the document's
    text: a program reading the download got other values than the query gives. One form
    now, the query's."""
    import json
    import sqlite3

    from tests._slop_helpers import entry, write_ledger
    from toolkit import config as config_mod
    from toolkit.cli._common import open_store
    from toolkit.site import _copy_table_if_changed

    write_ledger(project.slop, [
        entry(9, created_at="2026-05-01T10:00:00.38+00:00", reviewer={"name": "Zoë", "n": 2}),
        entry(1, created_at="2026-05-02T11:30:00+00:00")])
    with sqlite3.connect(project.audit_db) as conn:
        conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                     "('2026-05-04T10:00:00.25', 1, 'deploy', 'fraction of a second', NULL)")
    cfg = config_mod.resolve(cwd=project.root, env={"HOME": str(project.home)})
    with open_store(cfg, quiet=True) as store:
        for table in ("slop_entries", "actions"):
            _copy_table_if_changed(store, table, tmp_path, [(f"{table}.json", "json")],
                                   store.columns([table])[table])
    for table, key in (("slop_entries", "position"), ("actions", "id")):
        query = cli_run("query", f"SELECT * FROM {table} ORDER BY {key}", "--format", "json")
        assert query.exit_code == 0, query.output
        download = json.loads((tmp_path / f"{table}.json").read_text(encoding="utf-8"))
        assert sorted(download, key=lambda r: r[key]) == json.loads(query.stdout)
    slop = json.loads((tmp_path / "slop_entries.json").read_text(encoding="utf-8"))
    assert slop[0]["created_at"] == "2026-05-01 10:00:00.380000+00:00"
    assert json.loads(slop[0]["extra"]) == {"reviewer": {"name": "Zoë", "n": 2}}
    actions = json.loads((tmp_path / "actions.json").read_text(encoding="utf-8"))
    assert "2026-05-04 10:00:00.250000" in {a["ts"] for a in actions}


def test_the_first_handoff_names_the_promotions_ledger_history_shows_in_its_window(
        tmp_path, isolated_env, cli_run, monkeypatch):
    """The first handoff (no state) listed every entry dated in its 7-day window as "new or
    reinforced", where `toolkit ledger history` shows the commit of that week promoting one of
    them, adding another and removing one: the demo's handoff said "18 new or reinforced"
    while the history showed 3 promotions in the window. With the vault in git, each dated
    entry is now compared with the ledger of the last commit before the window: promoted
    (old → new), new, or reinforced, and an entry of that ledger gone since is removed, as the
    history says."""
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect", {"patterns": [entry_b("Retry budget", date="2026-04-01"),
                                      entry_b("Old lesson", date="2026-04-01"),
                                      entry_b("Quiet lesson", date="2026-04-01"),
                                      entry_b("Gone lesson", "medium", date="2026-04-01")]})
    p.clock += 9 * 86400  # 2026-04-10
    p.commit("reflect again", {"patterns": [
        entry_b("Retry budget", "medium", 2, date="2026-04-10"),
        entry_b("Old lesson", "low", 2, date="2026-04-09"),
        entry_b("Quiet lesson", date="2026-04-01"),
        entry_b("Fresh lesson", date="2026-04-08")]})
    monkeypatch.chdir(p.root)
    history = cli_run("ledger", "history", "--format", "csv")
    assert history.exit_code == 0, history.output
    assert history.output.splitlines()[-1].endswith(
        '"1 added, 1 removed, 1 promoted, 2 reinforced"')
    result = cli_run("handoff")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "- **4** ledger changes in the 7 days to 2026-04-10: 1 promoted, 1 new, " \
           "1 reinforced, 1 removed" in text
    part = text[text.index("## What the ledger learned"):]
    assert "### Promoted (1)\n\n- Retry budget — patterns · low → medium · 2026-04-10" in part
    assert "### New (1)\n\n- Fresh lesson — patterns · low · 2026-04-08" in part
    assert "### Reinforced (1)\n\n- Old lesson — patterns · low · 2026-04-09" in part
    assert "### Removed (1)\n\n- Gone lesson — patterns · was medium" in part
    assert "Quiet lesson" not in part


def test_a_list_or_a_yes_no_is_one_text_in_query_csv_and_in_the_sites_csv_download(
        project, cli_run, tmp_path):
    """`toolkit query --format csv` wrote a list as Python writes it (`['a,b', "it's"]`) and a
    boolean as `True`, while the site's CSV download of the same table wrote DuckDB's forms
    (`[a,b, it's]`, `true`): two texts for one value, neither read back by another program
    without guessing (DuckDB's does not even keep an item's commas apart). Both now write a
    list as its JSON array (what the JSON outputs hold) and a boolean as `true`/`false`."""
    import csv
    import io

    from tests._slop_helpers import entry, write_ledger
    from toolkit import config as config_mod
    from toolkit.cli._common import open_store
    from toolkit.site import _copy_table_if_changed

    links = ["src/a,b.py:3", "it's \"quoted\"", "é"]
    write_ledger(project.slop, [entry(1, source_links=links), entry(2, source_links=[])])
    query = cli_run("query", "SELECT id, source_links, source_links = [] AS none "
                    "FROM slop_entries ORDER BY position", "--format", "csv")
    assert query.exit_code == 0, query.output
    rows = list(csv.DictReader(io.StringIO(query.stdout)))
    assert [json.loads(r["source_links"]) for r in rows] == [links, []]
    assert [r["none"] for r in rows] == ["false", "true"]
    cfg = config_mod.resolve(cwd=project.root, env={"HOME": str(project.home)})
    with open_store(cfg, quiet=True) as store:
        for table in ("slop_entries", "task_status"):
            _copy_table_if_changed(store, table, tmp_path, [(f"{table}.csv", "csv")],
                                   store.columns([table])[table])
    download = list(csv.DictReader(io.StringIO(
        (tmp_path / "slop_entries.csv").read_text(encoding="utf-8"))))
    assert [r["source_links"] for r in download] == [r["source_links"] for r in rows]
    tasks = cli_run("query", "SELECT * FROM task_status", "--format", "csv")
    by_query = sorted(csv.reader(io.StringIO(tasks.stdout)))
    by_download = sorted(csv.reader(io.StringIO(
        (tmp_path / "task_status.csv").read_text(encoding="utf-8"))))
    assert by_download == by_query and {"true", "false"} & {c for r in by_query for c in r}
