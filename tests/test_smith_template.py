"""Smith vaults as a new project starts them: /smith scaffolds five ledger files holding only a
header and "No ... recorded yet" (project-quirks.md also `- **Label**: text` bullets outside
any entry) and a third meta.yaml schema (`created`, `workflows_completed`, `<kind>_recorded`,
`last_reflection: null`). The fixture tests/fixtures/smith-template-vault is such a vault."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FORMATS
from toolkit.ledger.vault import update_meta_yaml
from toolkit.loaders import SOURCES
from toolkit.records import LEDGER_FILES
from toolkit.sources.smith import (
    last_reflection_text,
    parse_ledger_bytes,
    read_meta,
    read_vault,
)
from toolkit.store import Store

TEMPLATE = Path(__file__).parent / "fixtures" / "smith-template-vault" / ".smith" / "vault"


@pytest.fixture()
def vault(tmp_path: Path) -> Path:
    target = tmp_path / "app" / ".smith" / "vault"
    shutil.copytree(TEMPLATE, target)
    return target


def test_dashboard_of_a_new_vault(vault: Path, cli_run) -> None:  # type: ignore[no-untyped-def]
    r = cli_run("--vault", str(vault), "ledger")
    assert r.exit_code == 0
    assert r.stdout == (
        "SMITH LEDGER — Dashboard\n"
        "========================\n\n"
        "Last reflection: never\n"
        "Total reflections: 0\n"
        "Total entries: 0\n\n"
        "| File                | Entries | High | Medium | Low |\n"
        "|---------------------|---------|------|--------|-----|\n"
        "| patterns.md         |       0 |    0 |      0 |   0 |\n"
        "| antipatterns.md     |       0 |    0 |      0 |   0 |\n"
        "| tool-preferences.md |       0 |    0 |      0 |   0 |\n"
        "| edge-cases.md       |       0 |    0 |      0 |   0 |\n"
        "| project-quirks.md   |       0 |    0 |      0 |   0 |\n\n"
        "No high-confidence entries yet.\n")
    # the only warning: the bullets of project-quirks.md, once for the file
    assert [line for line in r.stderr.splitlines() if line] == [
        f"warning: {vault}/ledger/project-quirks.md:9: not part of any entry: lines 9–11"]
    data = json.loads(cli_run("--vault", str(vault), "ledger", "--json").stdout)
    assert data["last_reflection"] is None and data["never_reflected"] is True
    assert data["meta_total_entries"] == 0 and data["total_reflections"] == 0


def test_third_meta_schema_counts_feed_the_dashboard(vault: Path, cli_run) -> None:  # type: ignore[no-untyped-def]
    meta_path = vault / "ledger" / "meta.yaml"
    meta_path.write_text(meta_path.read_text().replace("\npatterns_recorded: 0",
                                                       "\npatterns_recorded: 3"))
    meta = read_meta(vault / "ledger")
    assert meta.schema == "smith-init" and meta.count_for("patterns") == 3
    assert meta.count_for("project-quirks") == 0 and meta.total_entries == 3
    r = cli_run("--vault", str(vault), "ledger")
    assert "Total entries: 0 (meta.yaml says 3)\n" in r.stdout
    assert (f"warning: {meta_path}: meta.yaml says patterns has 3 entries; patterns.md has 0"
            in r.stderr.splitlines())


def test_unknown_meta_keys_are_warned_about(vault: Path) -> None:
    meta_path = vault / "ledger" / "meta.yaml"
    meta_path.write_text(meta_path.read_text() + "owner: jane\nquirks_recorded: 2\n")
    v = read_vault(vault, sessions=False)
    assert [p.message for p in v.problems if p.path == str(meta_path)] == [
        "unknown key(s) owner, quirks_recorded (ignored; no Smith meta.yaml schema writes them)"]


@pytest.mark.parametrize("name", ["meta.yaml", "meta.smith-ledger-form.yaml"])
def test_the_other_schemas_have_no_unknown_keys(tmp_path: Path, name: str) -> None:
    shutil.copy(FORMATS / "smith" / "ledger" / name, tmp_path / "meta.yaml")
    meta = read_meta(tmp_path)
    assert meta.schema in ("reflect", "smith-ledger") and meta.unknown_keys() == []


@pytest.mark.parametrize(("data", "shown"), [
    ({"last_reflection": None}, "never"),
    ({"last_reflection": "2026-05-02"}, "2026-05-02"),
    ({"last_updated": "2026-05-02", "entries": {}}, "2026-05-02"),
    ({"entries": {}}, None),  # says nothing: shown as [???]
    (None, None),
])
def test_last_reflection_text(data, shown) -> None:  # type: ignore[no-untyped-def]
    assert last_reflection_text(data) == shown


def test_site_data_says_never(vault: Path, cli_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from toolkit import queries

    db = tmp_path / "store.duckdb"
    assert cli_run("--vault", str(vault), "--db", str(db), "load").exit_code == 0
    with Store.open(db, sources=SOURCES, read_only=True) as store:
        meta = queries.site_ledger_meta(store)
    assert meta is not None
    assert meta["last_reflection"] == "never" and meta["meta_schema"] == "smith-init"


# --------------------------------------------------------------------------- stray text


def _stray(text: str) -> list[str]:
    lf = parse_ledger_bytes(text.encode(), "x.md", "patterns")
    return [f"{p.line}: {p.message}" for p in lf.problems if "not part of any entry" in p.message]


def test_header_title_prose_comments_and_separators_are_not_stray() -> None:
    assert _stray("# Ledger: Patterns\n\nWhat worked.\nSecond line of prose.\n\n"
                  "<!-- a comment\nover two lines -->\n\n---\n\n_No patterns recorded yet._\n"
                  "*Run /smith-reflect.*\n> quoted prose\n") == []


def test_header_bullets_fields_headings_code_and_tables_are_stray_once() -> None:
    assert _stray("# Patterns\n\n- **Runtime**: Node 20\n* item\n1. first\n\nprose\n"
                  "**Owner:** jane\n### Notes\n| a | b |\n```\ncode\n```\n") == [
        "3: not part of any entry: lines 3–5, 8–13"]


def test_text_after_a_closed_form_a_entry_is_stray() -> None:
    text = ("# Edge Cases\n\n## One\n\n- **Date:** 2026-05-01\n- **Category:** testing\n"
            "- **Confidence:** low\n\n---\n\nLeft over note.\n\n## Two\n\n- **Date:** 2026-05-01\n"
            "- **Category:** testing\n- **Confidence:** low\n\n---\n\n<!-- end -->\n")
    assert _stray(text) == ["11: not part of any entry: line 11"]


def test_form_b_entries_run_to_the_next_so_nothing_is_stray() -> None:
    text = ("# Ledger: Patterns\n\n---\n\n**Title:** A\n**Date:** 2026-05-01\n"
            "**Category:** testing\n**Confidence:** low\n\n- an evidence bullet\n\n---\n\n"
            "**Title:** B\n**Date:** 2026-05-01\n**Category:** testing\n**Confidence:** low\n")
    assert _stray(text) == []


def test_no_fixture_ledger_has_stray_text() -> None:
    for kind in LEDGER_FILES:
        path = FORMATS / "smith" / "ledger" / f"{kind}.md"
        lf = parse_ledger_bytes(path.read_bytes(), path, kind)
        assert [p for p in lf.problems if "not part of any entry" in p.message] == []


# --------------------------------------------------------------------------- the editor


_OLD_LOW = ("\n---\n\n**Title:** Cache the lockfile hash\n**Date:** 2026-04-01\n"
            "**Category:** implementation\n**Confidence:** low\n**Source reflections:** 1\n\n"
            "**Pattern:** p.\n")


def test_prune_keeps_the_third_schema_counts_true(vault: Path, cli_run) -> None:  # type: ignore[no-untyped-def]
    ledger = vault / "ledger"
    patterns = ledger / "patterns.md"
    patterns.write_text(patterns.read_text() + _OLD_LOW + _OLD_LOW.replace(
        "Cache the lockfile hash", "Pin pnpm").replace("2026-04-01", "2026-07-20"))
    meta_path = ledger / "meta.yaml"
    meta_path.write_text(meta_path.read_text().replace("\npatterns_recorded: 0",
                                                       "\npatterns_recorded: 2"))
    before = meta_path.read_text()
    r = cli_run("--vault", str(vault), "--today", "2026-08-01", "ledger", "prune", "--yes")
    assert r.exit_code == 0, r.output
    assert "Cache the lockfile hash" not in patterns.read_text()
    # only the count changed; the comment, created, workflows_completed and null stay
    assert meta_path.read_text() == before.replace("\npatterns_recorded: 2",
                                                   "\npatterns_recorded: 1")


def test_update_meta_yaml_adds_a_missing_recorded_count(tmp_path: Path) -> None:
    data = b"created: 2026-06-30\npatterns_recorded: 0\nlast_reflection: null\n"
    new = update_meta_yaml(data, tmp_path / "meta.yaml",
                           entries=dict.fromkeys(LEDGER_FILES, 0) | {"patterns": 2},
                           confidences=None)
    assert new.decode() == ("created: 2026-06-30\npatterns_recorded: 2\nlast_reflection: null\n"
                            "antipatterns_recorded: 0\ntool_preferences_recorded: 0\n"
                            "edge_cases_recorded: 0\nproject_quirks_recorded: 0\n")
    # the other schemas get no *_recorded keys
    reflect = b"last_updated: 2026-05-02\nentries:\n  patterns: 0\n"
    assert b"_recorded" not in update_meta_yaml(reflect, tmp_path / "m.yaml",
                                                entries={"patterns": 1}, confidences=None)
