"""``toolkit ledger ...``: the seed's /smith-ledger commands, their output, JSON and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FORMATS, FixtureProject, tree_digest

SESSION = "jane-doe_86e0b9_2026-05-04_141502.md"
NOW = {"TOOLKIT_NOW": "2026-06-15T09:30:05Z"}


def _error(result) -> str:  # type: ignore[no-untyped-def]
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert lines, result.output
    return lines[-1]


def _add(project: FixtureProject, kind: str, text: str) -> None:
    path = project.ledger / f"{kind}.md"
    path.write_bytes(path.read_bytes() + text.encode("utf-8"))


def _entry_b(title: str, conf: str = "low", date: str = "2026-05-20",
             category: str = "testing") -> str:
    return (f"\n---\n\n**Title:** {title}\n**Date:** {date}\n**Category:** {category}\n"
            f"**Confidence:** {conf}\n**Source reflections:** 1\n\n**Pattern:** p.\n")


# --------------------------------------------------------------------------- dashboard


def test_dashboard(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger")
    assert r.exit_code == 0
    assert r.stdout == (
        "SMITH LEDGER — Dashboard\n"
        "========================\n\n"
        "Last reflection: 2026-05-02\n"
        "Total reflections: 9\n"
        "Total entries: 4\n\n"
        "| File                | Entries | High | Medium | Low |\n"
        "|---------------------|---------|------|--------|-----|\n"
        "| patterns.md         |       2 |    0 |      1 |   1 |\n"
        "| antipatterns.md     |       1 |    0 |      0 |   1 |\n"
        "| tool-preferences.md |       0 |    0 |      0 |   0 |\n"
        "| edge-cases.md       |       1 |    0 |      1 |   0 |\n"
        "| project-quirks.md   |       0 |    0 |      0 |   0 |\n\n"
        "No high-confidence entries yet.\n")


def test_dashboard_top_high_and_json(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    _add(project, "antipatterns", _entry_b("Mocking the database", "high").replace(
        "**Source reflections:** 1", "**Source reflections:** 7"))
    r = cli_run("ledger")
    assert "Top High-Confidence Patterns:\n1. Mocking the database — testing (7 observations)\n" \
        in r.stdout
    data = json.loads(cli_run("ledger", "--json").stdout)
    assert data["total_entries"] == 5 and data["files"][1]["high"] == 1
    assert data["top_high_confidence"][0]["title"] == "Mocking the database"
    assert data["prune_limits_days"] == {"low": 30, "medium": 90}


def test_no_ledger(tmp_path: Path, cli_run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / ".smith" / "vault").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    r = cli_run("ledger")
    assert r.exit_code == 0
    assert r.stdout == ("No Ledger found.\n"
                        "Run `/smith-reflect` after a workflow to start building the Ledger,\n"
                        "or run `/smith` to initialize the vault structure.\n")
    r = cli_run("ledger", "list")
    assert r.exit_code == 1
    assert _error(r) == (f"Error: {tmp_path / '.smith/vault/ledger'}: No Ledger found. Run "
                         "`/smith-reflect` after a workflow to start building the Ledger, or run "
                         "`/smith` to initialize the vault structure")


def test_help_lists_lazy_subcommands(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    out = cli_run("ledger", "--help").stdout
    for name in ("list", "show", "search", "export", "prune", "promote", "demote", "reset"):
        assert f"\n  {name} " in out
    import importlib.util

    for name in ("history", "reconcile"):
        present = importlib.util.find_spec(f"toolkit.cli.{name}") is not None
        assert (f"\n  {name} " in out) == present


# --------------------------------------------------------------------------- list


def test_list_grouped_and_filtered(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "list")
    assert r.stdout == (
        "--- patterns.md ---\n"
        "[medium] Run the migration dry-run before applying schema changes — implementation "
        "(3 observations, last: 2026-05-02)\n"
        "[low] Grep the route table before adding a new endpoint — specification "
        "(1 observation, last: 2026-04-29)\n\n"
        "--- antipatterns.md ---\n"
        "[low] Editing an applied migration in place — implementation (1 observation, "
        "last: 2026-04-25)\n\n"
        "--- edge-cases.md ---\n"
        "[medium] Redis client drops pipelined commands after a failover — debugging "
        "(2 observations, last: 2026-04-30)\n")
    r = cli_run("ledger", "list", "--confidence", "low", "--category", "implementation")
    assert r.stdout == ("--- antipatterns.md ---\n[low] Editing an applied migration in place — "
                        "implementation (1 observation, last: 2026-04-25)\n")
    assert cli_run("ledger", "list", "--file", "tools").stdout == \
        "No entries match the given filters.\n"
    _add(project, "project-quirks", _entry_b("Quirky build"))
    assert "Quirky build" in cli_run("ledger", "list", "--file", "quirks").stdout
    data = json.loads(cli_run("ledger", "list", "--json", "--file", "edge-cases").stdout)
    assert data["count"] == 1 and data["files"][0]["matching"][0]["form"] == "A"
    r = cli_run("ledger", "list", "--file", "nope")
    assert r.exit_code == 2 and _error(r) == (
        "Error: unknown ledger file 'nope'. Use patterns, antipatterns, tool-preferences "
        "(tools), edge-cases or project-quirks (quirks)")


def test_malformed_and_hostile_entries_listed_visibly(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    _add(project, "patterns",
         "\n---\n\n**Title:** \u202eevil\u200b title 🚀\n**Date:** 2026-01-01\n")
    r = cli_run("ledger", "list", "--file", "patterns")
    assert ("[???] <U+202E>evil<U+200B> title 🚀 — [???] (1 observation, last: 2026-01-01)"
            in r.stdout)
    r = cli_run("--today", "2026-12-01", "ledger", "prune", "--auto")
    assert "\u202eevil" in (project.ledger / "patterns.md").read_text()  # never dropped


# --------------------------------------------------------------------------- show


def test_show_single_match(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "show", "REDIS client")
    assert r.exit_code == 0
    assert r.stdout.startswith(
        "Redis client drops pipelined commands after a failover\n"
        "edge-cases.md, line 5 (form A)\n\n"
        "Date: 2026-04-30\nCategory: debugging\nConfidence: medium\nObservations: 2\n"
        "Source reflections: 2026-04-22, 2026-04-30\n\nContext:\n  Integration tests")
    assert "\nRelated:\n  patterns.md:" in r.stdout
    data = json.loads(cli_run("ledger", "show", "redis", "--json").stdout)
    assert data["text"].startswith("## Redis client") and data["file"] == "edge-cases.md"


def test_show_several_matches_lists_them_and_shows_none(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "show", "migration")
    assert r.exit_code == 1
    assert r.stdout == (
        'Multiple entries match "migration":\n\n'
        "1. [medium] Run the migration dry-run before applying schema changes — patterns.md\n"
        "2. [low] Editing an applied migration in place — antipatterns.md\n\n")
    assert _error(r) == ('Error: 2 entries match "migration"; nothing was done. Choose one '
                         "with --index N (1-2) or narrow with --file")
    r = cli_run("ledger", "show", "migration", "--index", "2")
    assert r.stdout.startswith("Editing an applied migration in place\nantipatterns.md")
    r = cli_run("ledger", "show", "migration", "--index", "3")  # the option's name, not the API's
    assert (r.exit_code, _error(r)) == (2, "Error: --index 3 is out of range; 2 entries match")
    r = cli_run("ledger", "show", "migration", "--file", "antipatterns")
    assert r.exit_code == 0


def test_show_not_found(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "show", "kubernetes")
    assert r.exit_code == 1
    assert _error(r) == ('Error: No entries found matching "kubernetes". Run `toolkit ledger '
                         "list` to see available entries")


# --------------------------------------------------------------------------- search


def test_search_with_context(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "search", "INDEX-NAME")
    assert r.stdout == (
        '--- patterns.md: "Run the migration dry-run before applying schema changes" '
        "[medium] ---\n"
        "  ...\n"
        "  **Context:** Any /smith-build task that adds or alters a Postgres table in the "
        "billing service.\n"
        "  \n"
        "> **Pattern:** Run `alembic upgrade head --sql` first and read the generated DDL "
        "before applying it. This caught two index-name collisions before they reached the "
        "shared dev database.\n"
        "  \n"
        "  **Evidence:**\n"
        "  ...\n")
    assert cli_run("ledger", "search", "kubernetes").stdout == 'No results for "kubernetes".\n'
    data = json.loads(cli_run("ledger", "search", "failover", "--json").stdout)
    assert {(h["file"], h["title"]) for h in data["results"]} == {
        ("edge-cases.md", "Redis client drops pipelined commands after a failover")}


def test_search_of_one_entry_with_40_000_matching_lines_shows_each_once(
        tmp_path: Path) -> None:
    # each shown line was looked up in the list of the entry's matches: 40,000 matches took
    # 17 s (a 3 MB Evidence, 19 s), 0.5 s once linear; the time is measured in
    # bench/bench_ledger.py ("search of one entry"), the answer here
    from toolkit.ledger_ops import search

    vault = tmp_path / ".smith" / "vault"
    (vault / "ledger").mkdir(parents=True)
    evidence = "\n".join(f"- 2026-08-01 -- session s{i}: evidence line {i}" for i in range(40_000))
    (vault / "ledger" / "patterns.md").write_text(
        "# Ledger: Patterns\n\n---\n\n**Title:** Big one\n**Date:** 2026-11-01\n"
        "**Category:** implementation\n**Confidence:** high\n\n**Context:** c\n\n"
        f"**Pattern:** p\n\n**Evidence:**\n{evidence}\n", encoding="utf-8")
    hits = search(vault, "EVIDENCE LINE", log=False)
    assert [h.title for h in hits] == ["Big one"]
    shown = hits[0].lines
    assert sum(matched for _, _, matched in shown) == 40_000
    assert shown[-1] == (shown[-1][0], "- 2026-08-01 -- session s39999: evidence line 39999",
                         True)
    assert [(n, matched) for n, _, matched in shown[:3]] == [
        (shown[0][0], False), (shown[0][0] + 1, False), (shown[0][0] + 2, True)]


# --------------------------------------------------------------------------- export


def test_export_order_output_and_redaction(  # type: ignore[no-untyped-def]
        project: FixtureProject, cli_run, tmp_path: Path) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    _add(project, "tool-preferences", _entry_b(f"Token {token} leaked in a log"))
    text = cli_run("ledger", "export").stdout
    heads = [line for line in text.splitlines() if line.startswith("# ") and line.endswith(".md")]
    assert heads == ["# patterns.md", "# antipatterns.md", "# tool-preferences.md",
                     "# edge-cases.md", "# project-quirks.md"]
    assert text.startswith("```yaml\nlast_updated: 2026-05-02\n")
    assert token not in text and "[REDACTED]" in text
    assert token in cli_run("ledger", "export", "--no-redact").stdout
    out = tmp_path / "ledger-export.md"
    r = cli_run("ledger", "export", "--output", str(out))
    assert r.stdout == f"Exported the Ledger to {out}\n" and out.read_text() == text


# --------------------------------------------------------------------------- prune


def test_prune_interactive_yes_no_and_auto(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    before = tree_digest(project.root)
    r = cli_run("--today", "2026-09-01", "ledger", "prune", input="no\n")
    assert r.exit_code == 0
    assert "Entries to REMOVE (low confidence, older than 30 days):\n" \
           '  1. "Grep the route table before adding a new endpoint" — patterns.md (dated ' \
           "2026-04-29)\n" in r.stdout
    assert "Total: 2 removals, 2 demotions\n" in r.stdout
    assert "Remove 2 entries and demote 2 entries? (yes/no) " in r.stdout
    assert r.stdout.endswith("Prune cancelled. No changes made.\n")
    assert tree_digest(project.root) == before
    # no answer at all (end of input) is a "no", on a line of its own
    r = cli_run("--today", "2026-09-01", "ledger", "prune", input="")
    assert r.exit_code == 0
    assert r.stdout.endswith("demote 2 entries? (yes/no) \nPrune cancelled. No changes made.\n")
    assert tree_digest(project.root) == before

    r = cli_run("--today", "2026-09-01", "ledger", "prune", input="yes\n")
    assert r.stdout.endswith("Pruned: 2 removed, 2 demoted. Total entries: 2\n")
    text = (project.ledger / "patterns.md").read_text()
    assert "**Date:** 2026-05-02\n**Category:** implementation\n**Confidence:** low\n" in text
    assert "Grep the route table" not in text
    meta = (project.ledger / "meta.yaml").read_text()
    assert "  patterns: 1\n  antipatterns: 0\n" in meta and "  low: 2\n" in meta
    assert len(list((project.ledger / ".backups").glob("edit-*"))) == 1

    r = cli_run("--today", "2026-10-15", "ledger", "prune", "--auto")
    assert r.stdout == "Auto-prune complete: 2 removed, 0 demoted. Total entries: 0\n"


def test_prune_nothing_to_do_on_empty_files(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    for name in ("patterns.md", "antipatterns.md", "edge-cases.md"):
        (project.ledger / name).write_text("" if name != "edge-cases.md" else "  \n\n \t\n")
    before = tree_digest(project.root)
    r = cli_run("--today", "2030-01-01", "ledger", "prune", "--auto")
    assert r.stdout == "No prune candidates found. Ledger is clean.\n"
    assert tree_digest(project.root) == before


def test_prune_limits_from_meta_yaml_config(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    meta = (FORMATS / "smith" / "ledger" / "meta.smith-ledger-form.yaml").read_text()
    (project.ledger / "meta.yaml").write_text(meta.replace("prune_days: 30", "prune_days: 40"))
    r = cli_run("--today", "2026-06-05", "ledger", "prune", "--dry-run")
    # 2026-04-25 is 41 days old (removed), 2026-04-29 only 37 (kept)
    assert '"Editing an applied migration in place"' in r.stdout
    assert "Grep the route table" not in r.stdout.split("---")[0]
    assert "older than 40 days" in r.stdout


def test_prune_json_needs_a_non_interactive_mode(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "prune", "--json")
    assert r.exit_code == 2
    assert _error(r) == "Error: --json needs --auto, --yes or --dry-run (it cannot ask)"
    data = json.loads(cli_run("--today", "2026-09-01", "ledger", "prune", "--dry-run",
                              "--json").stdout)
    assert data["status"] == "dry-run" and len(data["removed"]) == 2
    assert data["diff"].startswith("--- a/patterns.md\n+++ b/patterns.md\n@@ ")


# --------------------------------------------------------------------------- promote / demote


def test_promote_and_demote(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "promote", "route table")
    assert r.stdout == ('Promoted "Grep the route table before adding a new endpoint" from low '
                        "to medium confidence.\n")
    r = cli_run("ledger", "promote", "route table")
    assert "from medium to high" in r.stdout
    before = tree_digest(project.root)
    r = cli_run("ledger", "promote", "route table")
    assert r.exit_code == 0
    assert r.stdout == ('"Grep the route table before adding a new endpoint" is already at high '
                        "confidence. No change.\n")
    assert tree_digest(project.root) == before
    r = cli_run("ledger", "demote", "redis")
    assert r.stdout == ('Demoted "Redis client drops pipelined commands after a failover" from '
                        "medium to low confidence.\n")
    assert "- **Confidence:** low\n- **Observations:** 2" in \
        (project.ledger / "edge-cases.md").read_text()
    r = cli_run("ledger", "demote", "redis")
    assert "is already at low confidence. No change." in r.stdout
    data = json.loads(cli_run("ledger", "promote", "redis", "--json").stdout)
    assert (data["from"], data["to"], data["changed"]) == ("low", "medium", True)


@pytest.mark.parametrize("links", ["hard links", "no hard links"])
def test_promote_backup_holds_the_files_as_they_were_and_restores_them(  # type: ignore[no-untyped-def]
        project: FixtureProject, cli_run, links: str) -> None:
    import errno
    import os
    import shutil

    def no_link(*a: object, **kw: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    ledger = project.ledger
    before = {p.name: p.read_bytes() for p in ledger.iterdir() if p.is_file()}
    with pytest.MonkeyPatch.context() as mp:
        if links == "no hard links":  # e.g. a filesystem without them: verified copies
            mp.setattr(os, "link", no_link)
        data = json.loads(cli_run("ledger", "promote", "route table", "--json").stdout)
    assert data["changed"] is True
    backup = Path(data["backup_dir"])
    assert backup.parent == ledger / ".backups"
    saved = sorted(p.name for p in backup.iterdir())
    assert "patterns.md" in saved and "meta.yaml" in saved
    for name in saved:  # each file the promote replaced, as it was, in a file of its own
        assert (backup / name).read_bytes() == before[name], name
        assert (backup / name).stat().st_nlink == 1
        assert (ledger / name).stat().st_ino != (backup / name).stat().st_ino
    assert (ledger / "patterns.md").read_bytes() != before["patterns.md"]
    for name in saved:  # putting the backup back gives the ledger as it was
        shutil.copy2(backup / name, ledger / name)
    assert {p.name: p.read_bytes() for p in ledger.iterdir() if p.is_file()} == before
    shown = cli_run("ledger", "show", "route table")
    assert shown.exit_code == 0, shown.output
    assert "Confidence: low" in shown.stdout


def test_promote_not_found_and_bad_meta(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("ledger", "promote", "nothing like it")
    assert r.exit_code == 1
    assert _error(r) == ('Error: No entries found matching "nothing like it". Run `toolkit '
                         "ledger list` to see available entries")
    (project.ledger / "meta.yaml").write_text("entries:\n\tpatterns: 2\n")
    before = tree_digest(project.root)
    r = cli_run("ledger", "promote", "route table")
    assert r.exit_code == 65
    assert _error(r) == (f"Error: {project.ledger / 'meta.yaml'}:2: invalid YAML, column 1: "
                         "found character '\\t' that cannot start any token. Fix the YAML "
                         "(spaces, not tabs; close every quote) or restore it from a backup; "
                         "nothing was written")
    assert tree_digest(project.root) == before


def test_duplicate_titles_nfc_nfd_act_on_none_without_a_choice(project: FixtureProject,
                                                               cli_run) -> None:  # type: ignore[no-untyped-def]
    _add(project, "patterns", _entry_b("Café naming"))
    _add(project, "antipatterns", _entry_b("Cafe\u0301 naming"))
    before = tree_digest(project.root)
    r = cli_run("ledger", "promote", "CAFÉ NAMING")
    assert r.exit_code == 1
    assert r.stdout == ('Multiple entries match "CAFÉ NAMING":\n\n'
                        "1. [low] Café naming — patterns.md\n"
                        "2. [low] Cafe\u0301 naming — antipatterns.md\n\n")
    assert tree_digest(project.root) == before
    r = cli_run("ledger", "promote", "café naming", "--index", "2")
    assert r.exit_code == 0
    assert "**Title:** Cafe\u0301 naming\n**Date:** 2026-05-20\n**Category:** testing\n" \
           "**Confidence:** medium" in (project.ledger / "antipatterns.md").read_text()
    assert "**Confidence:** low\n**Source reflections:** 1\n\n**Pattern:** p.\n" in \
        (project.ledger / "patterns.md").read_text()[-80:]


def _lines(project: FixtureProject, kind: str, title: str) -> list[int]:
    """The line numbers of ``kind``'s Form B entries titled ``title`` (their title lines)."""
    lines = (project.ledger / f"{kind}.md").read_text().splitlines()
    return [n for n, line in enumerate(lines, 1) if line == f"**Title:** {title}"]


def _line(project: FixtureProject, kind: str, title: str) -> int:
    return _lines(project, kind, title)[0]


def test_same_title_twice_show_promote_demote_list_all_and_act_on_none(
        project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    _add(project, "patterns", _entry_b("Same title", "medium"))
    _add(project, "antipatterns", _entry_b("Same title", "medium"))
    _add(project, "antipatterns", _entry_b("Same title", "medium", date="2026-05-21"))
    before = tree_digest(project.root)
    for command in ("show", "promote", "demote"):
        r = cli_run("ledger", command, "same title")
        assert r.exit_code == 1, command
        assert r.stdout == ('Multiple entries match "same title":\n\n'
                            "1. [medium] Same title — patterns.md\n"
                            "2. [medium] Same title — antipatterns.md\n"
                            "3. [medium] Same title — antipatterns.md\n\n"), command
        assert _error(r) == ('Error: 3 entries match "same title"; nothing was done. Choose one '
                             "with --index N (1-3) or narrow with --file"), command
    # with --json, stdout says the same as JSON a script can read (it said nothing at all)
    for command in ("show", "promote", "demote"):
        r = cli_run("ledger", command, "same title", "--json")
        assert r.exit_code == 1, command
        assert json.loads(r.stdout) == {"error": "ambiguous", "query": "same title", "matches": [
            {"index": i, "title": "Same title", "file": f, "line": line, "confidence": "medium"}
            for i, (f, line) in enumerate(
                [("patterns.md", _line(project, "patterns", "Same title")),
                 *[("antipatterns.md", n) for n in _lines(project, "antipatterns",
                                                           "Same title")]], 1)]}, command
        assert _error(r).startswith('Error: 3 entries match "same title"; nothing was done.')
    assert tree_digest(project.root) == before
    r = cli_run("ledger", "demote", "same title", "--index", "3")
    assert r.exit_code == 0
    text = (project.ledger / "antipatterns.md").read_text()
    assert "**Date:** 2026-05-20\n**Category:** testing\n**Confidence:** medium" in text
    assert "**Date:** 2026-05-21\n**Category:** testing\n**Confidence:** low" in text


def test_whole_title_wins_over_longer_titles(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    _add(project, "patterns", _entry_b("Docker"))
    _add(project, "patterns", _entry_b("Docker layer caching"))
    r = cli_run("ledger", "promote", "docker")
    assert r.stdout == 'Promoted "Docker" from low to medium confidence.\n'


def test_hostile_title_stored_byte_exact_and_shown_escaped(project: FixtureProject,
                                                           cli_run) -> None:  # type: ignore[no-untyped-def]
    title = "Evil \u202etxt.exe\u200b " + "x" * 280
    _add(project, "patterns", _entry_b(title))
    r = cli_run("ledger", "promote", "evil")
    assert "Evil <U+202E>txt.exe<U+200B> x" in r.stdout
    assert f"**Title:** {title}\n".encode() in (project.ledger / "patterns.md").read_bytes()


# --------------------------------------------------------------------------- reset


def test_reset_confirm_and_decline(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    before = tree_digest(project.root)
    r = cli_run("ledger", "reset", input="no\n")
    assert r.stdout == ("This will archive the current Ledger and start fresh.\n"
                        "All existing entries will be preserved in the archive.\n"
                        "Are you sure? (yes/no) no\nReset cancelled. Ledger unchanged.\n")
    assert tree_digest(project.root) == before
    r = cli_run("ledger", "reset", input="")  # end of input: a "no", on a line of its own
    assert (r.exit_code, r.stdout.splitlines()[-2:]) == (
        0, ["Are you sure? (yes/no) ", "Reset cancelled. Ledger unchanged."])
    assert tree_digest(project.root) == before
    old = (project.ledger / "patterns.md").read_bytes()
    r = cli_run("ledger", "reset", input="yes\n", env=NOW)
    assert r.stdout.endswith("Ledger archived to .smith/vault/ledger/archive/2026-06-15-093005/\n"
                             "Fresh Ledger initialized with empty templates.\n")
    archive = project.ledger / "archive" / "2026-06-15-093005"
    assert sorted(p.name for p in archive.iterdir()) == [
        "antipatterns.md", "edge-cases.md", "meta.yaml", "patterns.md", "project-quirks.md",
        "tool-preferences.md"]
    assert (archive / "patterns.md").read_bytes() == old
    assert (project.ledger / "tool-preferences.md").read_text() == (
        "# Tool Preferences\n\n<!-- Entries are added by /smith-reflect. Each entry starts "
        "with ## heading. -->\n")
    assert "Total entries: 0" in cli_run("ledger").stdout


# --------------------------------------------------------------------------- session log


def _point_session(project: FixtureProject) -> Path:
    log = project.vault / "sessions" / SESSION
    (project.vault / ".current-session").write_text(f"{log}\n")
    return log


def test_invocations_and_mutations_are_logged_in_the_seed_format(project: FixtureProject,
                                                                 cli_run) -> None:  # type: ignore[no-untyped-def]
    """Smith's skill logs "on invocation", then "after any mutation": the invoked entry
    (with the command's outcome) comes first, the mutation's after it. They came the other
    way round."""
    log = _point_session(project)
    before = log.read_text()
    cli_run("ledger", "promote", "route table", env=NOW)
    added = log.read_text()[len(before):]
    outcome = ('**Outcome:** Promoted "Grep the route table before adding a new endpoint" from '
               "low to medium confidence.\n")
    assert added.startswith("\n### [09:30:05] /smith-ledger invoked\n\n**User Request:**\n> ")
    assert ("**Subcommand:** promote\n"
            '**Synthesized Input:** title "route table"\n' + outcome
            + "**Artifacts:** .smith/vault/ledger/\n"
            "**Systems affected:** none\n\n"
            "### [09:30:05] /smith-ledger promote applied\n") in added
    assert added.endswith("**Subcommand:** promote\n"
                          '**Synthesized Input:** title "route table"\n' + outcome
                          + "**Artifacts:** .smith/vault/ledger/patterns.md, "
                          ".smith/vault/ledger/meta.yaml, .smith/vault/ledger/.meta.json, backup "
                          ".smith/vault/ledger/.backups/edit-2026-06-15-093005/\n"
                          "**Systems affected:** none\n")
    size = len(log.read_text())
    cli_run("ledger", "list", env=NOW)
    assert "**Subcommand:** list\n**Synthesized Input:** no filters\n" \
           "**Outcome:** 4 entries listed\n" in log.read_text()[size:]


def test_no_log_without_pointer_or_outside_sessions(project: FixtureProject, cli_run,
                                                    tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    victim = tmp_path / "victim.md"
    victim.write_text("keep me\n")
    (project.vault / ".current-session").write_text(f"{victim}\n")
    before = tree_digest(project.vault / "sessions")
    r = cli_run("ledger", "promote", "route table")
    assert r.exit_code == 0
    assert victim.read_text() == "keep me\n"
    assert tree_digest(project.vault / "sessions") == before


@pytest.mark.parametrize("linked", ["sessions", "vault"])
def test_no_log_through_a_sessions_folder_or_vault_linked_outside(
        project: FixtureProject, cli_run, tmp_path: Path, linked: str) -> None:  # type: ignore[no-untyped-def]
    # a cloned repository ships `.smith/vault/sessions` as a link to a folder of the user's
    # and points .current-session at a file there: every ledger command (even `ledger
    # export`, `ledger list`) appended its log block to that file outside the project
    folder = project.vault / "sessions" if linked == "sessions" else project.vault
    outside = tmp_path / "elsewhere" / folder.name
    outside.parent.mkdir()
    folder.rename(outside)
    folder.symlink_to(outside, target_is_directory=True)
    victim = outside / ("notes.md" if linked == "sessions" else "sessions/notes.md")
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("keep me\n")
    (project.vault / ".current-session").write_text(
        ".smith/vault/sessions/notes.md\n")
    for args in (("ledger", "export"), ("ledger", "list"), ("ledger", "promote", "route table")):
        r = cli_run(*args)
        assert r.exit_code in (0, 1), r.output
        assert victim.read_text() == "keep me\n"


def test_oversized_file_refuses_and_junk_file_is_skipped_never_touched(
        project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    big = project.ledger / "patterns.md"
    original = big.read_bytes()
    big.write_bytes(original + b"\n" + b"x" * 1_200_000 + b"\n")  # over a 1 MB limit
    junk = project.ledger / "antipatterns.md"
    offset = len(junk.read_bytes()) + 1
    junk.write_bytes(junk.read_bytes() + b"\n\xff\xfe\n")
    before = {p: p.read_bytes() for p in (big, junk)}
    # A file over the limit is never read as empty (FAULTS I4): the prune names it, exit 65.
    r = cli_run("--today", "2026-09-01", "ledger", "prune", "--auto",
                env={"TOOLKIT_MAX_FILE_MB": "1"})
    assert r.exit_code == 65
    assert r.stderr == (f"Error: {big}: file is 1.1 MB, over the 1 MB limit. Raise the limit "
                        "with TOOLKIT_MAX_FILE_MB=<MB> or `max_file_mb:` in toolkit.yaml\n")
    assert {p: p.read_bytes() for p in (big, junk)} == before
    # A file with junk bytes is skipped with a note and never rewritten (FAULTS A6).
    big.write_bytes(original)
    r = cli_run("--today", "2026-09-01", "ledger", "prune", "--auto")
    assert r.exit_code == 0
    assert (f"note: skipped (never rewritten): {junk}: invalid UTF-8 at byte offset {offset}. "
            "Save the file as UTF-8 or restore it from a backup") in r.output
    assert r.stdout.startswith("Auto-prune complete:")
    assert junk.read_bytes() == before[junk]


def test_read_commands_warn_about_a_junk_file_instead_of_answering_as_if_it_were_empty(
        project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    """FAULTS A6: the entries of a file with junk bytes are in no answer, so `ledger list`,
    `search` and `show` name the file on stderr (as the dashboard does) instead of answering
    "nothing matches" as if the ledger had no such entries; the file is never touched."""
    junk = project.ledger / "antipatterns.md"
    offset = len(junk.read_bytes())
    junk.write_bytes(junk.read_bytes() + b"\x00\xff junk")
    before = tree_digest(project.ledger)
    warning = (f"warning: {junk}: NUL byte at byte offset {offset}; this is not a text file. "
               "Restore the file from a backup or remove the binary junk\n")
    r = cli_run("ledger", "list", "--file", "antipatterns")
    assert (r.exit_code, r.stdout, r.stderr) == (
        0, f"--- antipatterns.md --- (unreadable: NUL byte at byte offset {offset}; this is not "
           "a text file)\n", warning)  # the file marked where its entries would be
    r = cli_run("ledger", "list")
    assert r.exit_code == 0 and r.stderr == warning and "--- patterns.md ---" in r.stdout
    r = cli_run("ledger", "list", "--json")
    assert r.stderr == warning and json.loads(r.stdout)["files"][1]["error"]
    r = cli_run("ledger", "search", "autogenerate")
    assert (r.exit_code, r.stdout, r.stderr) == (0, 'No results for "autogenerate".\n',
                                                 warning)
    r = cli_run("ledger", "show", "migration in place")
    assert r.exit_code == 1 and r.stderr.startswith(warning)
    assert _error(r).startswith('Error: No entries found matching "migration in place".')
    # a file that was read gives no warning
    assert cli_run("ledger", "list", "--file", "patterns").stderr == ""
    assert cli_run("ledger", "show", "migration in place", "--file", "patterns"
                   ).stderr.startswith("Error:")
    assert tree_digest(project.ledger) == before


def test_changing_an_entry_no_readable_file_holds_names_the_junk_file_that_may(
        project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    """FAULTS A6 for promote and demote: when no file that could be read holds the entry and
    one with junk bytes could not be read, the change is refused as bad data (exit 65) naming
    that file and why, not "No entries found" (exit 1) as if the ledger had no such entry.
    Searching only a file that was read still finds nothing, exit 1; nothing is touched."""
    junk = project.ledger / "antipatterns.md"
    offset = len(junk.read_bytes())
    junk.write_bytes(junk.read_bytes() + b"\xff\xfe")
    before = tree_digest(project.root)
    for verb in ("promote", "demote"):
        r = cli_run("ledger", verb, "migration in place")
        assert (r.exit_code, r.stdout) == (65, ""), r.output
        assert r.stderr == (
            f'Error: {junk}: no entry matching "migration in place" in the ledger files that '
            "could be read; this one could not be read and may hold it: invalid UTF-8 at byte "
            f"offset {offset}. Save the file as UTF-8 or restore it from a backup\n")
    r = cli_run("ledger", "promote", "migration in place", "--file", "patterns")
    assert r.exit_code == 1 and _error(r).startswith('Error: No entries found matching')
    assert tree_digest(project.root) == before


def test_bad_meta_json_or_alias_bomb_refuses_the_write(project: FixtureProject, cli_run) -> None:  # type: ignore[no-untyped-def]
    meta_json = project.ledger / ".meta.json"
    meta_json.write_text('{"total_patterns": 4, "total_patterns": 5, "lock": null}\n')
    before = tree_digest(project.root)
    r = cli_run("ledger", "promote", "route table")
    assert r.exit_code == 65
    assert _error(r) == f"Error: {meta_json}: invalid JSON: duplicate key 'total_patterns'"
    assert tree_digest(project.root) == before
    meta_json.write_text('{"lock": null}\n')
    bomb = "a: &a [x, x]\n" + "".join(f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i-1}'}, "
                                      f"*{'a' if i == 0 else f'b{i-1}'}]\n" for i in range(60))
    (project.ledger / "meta.yaml").write_text(bomb + "confidence_distribution: {low: 1}\n")
    before = tree_digest(project.root)
    r = cli_run("ledger", "promote", "route table")
    assert r.exit_code == 65
    assert _error(r) == (f"Error: {project.ledger / 'meta.yaml'}: more than 100 YAML aliases; "
                         "refusing a possible alias bomb. Nothing was written")
    assert tree_digest(project.root) == before
