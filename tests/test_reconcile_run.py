"""``toolkit ledger reconcile`` end to end: the seven safeguards, in-process and with real
processes (a second run, a SIGKILL between phases)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests._reconcile_helpers import (
    NOW,
    entry_a,
    entry_b,
    filler,
    judge_script,
    make_project,
    meta_json,
    run_env,
    subprocess_env,
)
from tests.conftest import reap, tree_digest
from toolkit.reconcile import LEDGER_FILES, count_words, tokens_for_words
from toolkit.sources.smith import parse_ledger_bytes, read_reconcile_log


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """``toolkit ledger reconcile ARGS`` in-process with the fixed clock."""
    from toolkit.cli import cli

    full_env = run_env()
    full_env.update(env or {})
    return CliRunner().invoke(cli, ["ledger", "reconcile", *args], env=full_env)


def toolkit_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "toolkit", "ledger", "reconcile", *args]


DUP_A = entry_b("Run the migration dry-run before applying schema changes",
                date="2026-05-02", confidence="medium", reflections=3,
                pattern="Run alembic upgrade head --sql first and read the generated DDL.",
                evidence=["- 2026-04-18 -- session a: caught a duplicate index",
                          "- 2026-05-02 -- session b: clean"])
DUP_B = entry_b("Run the migration dry run before applying schema changes",
                date="2026-05-06", confidence="low", reflections=1,
                pattern="Run alembic upgrade head --sql first and read the generated DDL!",
                evidence=["- 2026-05-02 -- session c: same day as b",
                          "- 2026-05-06 -- session d: caught a missing default"])
HIGH = entry_b("Pin the Redis client", date="2025-01-01", confidence="high", reflections=8,
               pattern=filler(30, "redis"))
MEDIUM_OLD = entry_b("Warm the cache before load tests", date="2026-01-01",
                     confidence="medium", reflections=2, pattern=filler(30, "cache"))
LOW_OLD = entry_b("Grep the route table first", date="2026-03-01", pattern=filler(30, "grep"))
LOW_NEW = entry_b("Check the feature flag service", date="2026-05-08",
                  pattern=filler(30, "flag"))
QUIRK = entry_a("CI runs on Python 3.11 only", date="2026-05-01", confidence="low")


@pytest.fixture
def busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project over one threshold (context_budget_violations 4 > 3) with a duplicate pair,
    stale entries and untouched neighbours. The current directory is the project root."""
    root = tmp_path / "proj"
    make_project(root, {"patterns": HIGH + DUP_A + DUP_B + MEDIUM_OLD + LOW_NEW + LOW_OLD,
                        "project-quirks": QUIRK},
                 meta=meta_json(context_budget_violations=4, reinforcements_since_reconcile=9))
    sessions = root / ".smith" / "vault" / "sessions"
    sessions.mkdir()
    log = sessions / "jane-doe_86e0b9_2026-05-10_110000.md"
    log.write_text("---\nsession_start: \"2026-05-10T11:00:00\"\nstatus: active\n---\n\n"
                   "# Session Log\n\n## Started: 2026-05-10 11:00:00\n\n---\n\n")
    (root / ".smith" / "vault" / ".current-session").write_text(f"{log}\n")
    monkeypatch.chdir(root)
    return root


def ledger_of(root: Path) -> Path:
    return root / ".smith" / "vault" / "ledger"


def entries(root: Path, kind: str = "patterns"):
    path = ledger_of(root) / f"{kind}.md"
    return parse_ledger_bytes(path.read_bytes(), path, kind).entries


def digest_without_log(root: Path) -> dict:
    """Every file but the two logs (reconcile-log.md and the vault session log)."""
    return {k: v for k, v in user_files(root).items() if not k.endswith("reconcile-log.md")}


def user_files(root: Path) -> dict:
    """Every file but the vault session log (which records each real invocation)."""
    return {k: v for k, v in tree_digest(root).items()
            if not k.startswith(".smith/vault/sessions/")}


def logged(root: Path) -> list[tuple[str, str]]:
    """(event, outcome) of each /smith-ledger block in the current session log."""
    text = next((root / ".smith" / "vault" / "sessions").glob("*.md")).read_text()
    return re.findall(r"^### \[\d\d:\d\d:\d\d\] /smith-ledger (.+)\n(?:.*\n)*?"
                      r"\*\*Outcome:\*\* (.*)$", text, re.MULTILINE)


def last_run(root: Path):
    runs, _ = read_reconcile_log(ledger_of(root) / "reconcile-log.md")
    return runs[0] if runs else None


def no_temp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if ".toolkit-tmp-" in p.name]


# --------------------------------------------------------------------------- a full run


def test_full_run_merges_prunes_logs_and_resets_the_signals(busy: Path) -> None:
    ledger = ledger_of(busy)
    before = {p.name: p.read_bytes() for p in ledger.iterdir() if p.is_file()}
    result = invoke()
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Ledger reconciliation complete.\n"
                                    "- Trigger: context_budget_violations > 3\n"
                                    "- Merged: 1 entries\n"
                                    "- Pruned: 2 stale entries (1 removed, 1 demoted to low)\n"
                                    "- Budget drops: 0 entries\n")
    assert "- Backup: .backups/reconcile-2026-05-10-120000/\n" in result.stdout
    got = [(e.title, e.confidence, e.date) for e in entries(busy)]
    assert got == [("Pin the Redis client", "high", "2025-01-01"),
                   ("Run the migration dry-run before applying schema changes", "medium",
                    "2026-05-06"),
                   ("Warm the cache before load tests", "low", "2026-05-10"),
                   ("Check the feature flag service", "low", "2026-05-08")]
    merged = entries(busy)[1]
    assert merged.source_reflections == "4"
    assert merged.evidence.splitlines()[-2:] == [
        "- 2026-05-06 -- session d: caught a missing default",
        '- 2026-05-10 \u2014 reconcile merge: absorbed "Run the migration dry run before '
        'applying schema changes"']
    # Untouched entries keep their bytes; the untouched file is byte-identical.
    out = (ledger / "patterns.md").read_bytes()
    assert HIGH.encode() in out and LOW_NEW.encode() in out
    assert (ledger / "project-quirks.md").read_bytes() == before["project-quirks.md"]
    # The backup holds the files as they were, .meta.json without this run's lock.
    backup = ledger / ".backups" / "reconcile-2026-05-10-120000"
    assert {p.name: p.read_bytes() for p in backup.iterdir() if p.is_file()} == {
        k: v for k, v in before.items() if k != "reconcile-log.md"}
    meta = json.loads((ledger / ".meta.json").read_text())
    assert meta["last_reconcile"] == NOW and meta["lock"] is None
    assert meta["context_budget_violations"] == 0 and meta["reinforcements_since_reconcile"] == 0
    assert meta["total_reinforcements"] == 7 and meta["total_patterns"] == 5
    meta_yaml = (ledger / "meta.yaml").read_text()  # counts edited in place by the editor
    assert "  patterns: 4\n" in meta_yaml and "  high: 1\n  medium: 1\n  low: 3\n" in meta_yaml
    run = last_run(busy)
    assert (run.ran_at, run.trigger, run.result) == ("2026-05-10 12:00:00",
                                                     "context_budget_violations > 3", "OK")
    tokens = tokens_for_words(sum(count_words(before[f"{k}.md"]) for k in LEDGER_FILES))
    assert run.signals == f"tokens={tokens}, patterns=7, violations=4, reinforcements_since=9"
    assert run.actions[3] == f"Budget result: {tokens} \u2192 {meta['estimated_tokens']} " \
        "estimated tokens"
    assert run.prunes == ('patterns.md: "Warm the cache before load tests" (medium confidence, '
                          'age: 129 days) \u2192 demoted to low',
                          'patterns.md: "Grep the route table first" (low confidence, age: 70 '
                          'days)')
    assert no_temp_files(busy)
    counts = (f"merged 1, pruned 2 (1 removed, 1 demoted), dropped 0; tokens {tokens} \u2192 "
              f"{meta['estimated_tokens']}; backup .backups/reconcile-2026-05-10-120000/")
    assert logged(busy) == [("invoked", f"OK: {counts}"), ("reconcile applied", f"OK: {counts}")]


def test_nothing_needed_writes_nothing(busy: Path) -> None:
    (ledger_of(busy) / ".meta.json").write_text(json.dumps(meta_json()))
    before = user_files(busy)
    result = invoke()
    assert (result.exit_code, result.output) == (
        0, "No reconciliation needed: no threshold exceeded\n")
    assert user_files(busy) == before
    assert logged(busy) == [("invoked", "No reconciliation needed: no threshold exceeded")]


def test_minimum_interval_between_runs(busy: Path) -> None:
    (ledger_of(busy) / ".meta.json").write_text(json.dumps(meta_json(
        context_budget_violations=9, last_reconcile="2026-05-10T10:30:00Z")))
    before = user_files(busy)
    result = invoke()
    assert result.output == ("No reconciliation needed: the last one ran 1.5 hours ago "
                             "(minimum 6 hours between runs)\n")
    assert user_files(busy) == before


def test_disabled_in_config_does_nothing(busy: Path) -> None:
    cfg = busy / ".smith" / "config.json"
    cfg.write_text(json.dumps({"ledger": {"reconcile": {"enabled": False}}}))
    before = user_files(busy)
    result = invoke("--force")
    assert result.exit_code == 0
    assert result.output == ("Reconcile is disabled (ledger.reconcile.enabled is false in "
                             ".smith/config.json); nothing done.\n")
    assert user_files(busy) == before
    assert logged(busy) == [("invoked", "disabled (ledger.reconcile.enabled is false)")]


def test_missing_meta_json_falls_back_and_is_created(busy: Path) -> None:
    (ledger_of(busy) / ".meta.json").unlink()
    cfg = busy / ".smith" / "config.json"
    data = json.loads(cfg.read_text())
    data["ledger"]["reconcile"]["thresholds"]["patterns_per_category_max"] = 5
    cfg.write_text(json.dumps(data))
    result = invoke()
    assert result.exit_code == 0, result.output
    assert "- Trigger: patterns.md entries > 5\n" in result.stdout
    meta = json.loads((ledger_of(busy) / ".meta.json").read_text())
    assert meta["schema_version"] == 1 and meta["lock"] is None
    assert meta["last_reconcile"] == NOW and meta["total_patterns"] == 5
    assert last_run(busy).signals.endswith("violations=0, reinforcements_since=0")


def test_category_reconciles_one_file_only(busy: Path) -> None:
    before = (ledger_of(busy) / "patterns.md").read_bytes()
    quirk_old = entry_a("Old quirk", date="2026-01-01", confidence="low")
    (ledger_of(busy) / "project-quirks.md").write_text("# Project Quirks\n\n" + quirk_old)
    result = invoke("--category", "quirks")
    assert result.exit_code == 0, result.output
    assert (ledger_of(busy) / "patterns.md").read_bytes() == before
    assert entries(busy, "project-quirks") == []
    assert "- Scope: project-quirks.md (--category)" in (
        ledger_of(busy) / "reconcile-log.md").read_text()


def test_bad_category_is_a_usage_error(busy: Path) -> None:
    result = invoke("--category", "recipes")
    assert result.exit_code == 2
    assert result.stderr == ("Error: --category: unknown ledger file 'recipes'. Use patterns, "
                             "antipatterns, tool-preferences (tools), edge-cases or "
                             "project-quirks (quirks)\n")


def test_invalid_config_json_is_bad_data_and_nothing_is_written(busy: Path) -> None:
    cfg = busy / ".smith" / "config.json"
    cfg.write_text('{"ledger": {"reconcile": {"enabled": true,}}}\n')
    before = user_files(busy)
    result = invoke("--force")
    assert result.exit_code == 65
    assert result.stderr == (f"Error: {cfg}:1: invalid JSON, column 43: Expecting property "
                             "name enclosed in double quotes. Fix the JSON or restore the file "
                             "from a backup\n")
    assert user_files(busy) == before
    assert logged(busy) == [("invoked", f"error: {result.stderr[len('Error: '):-1]}")]


def test_invalid_meta_json_is_refused_before_anything_is_written(busy: Path) -> None:
    meta = ledger_of(busy) / ".meta.json"
    meta.write_text('{"lock": null, "lock": null}')
    before = tree_digest(busy)
    status = invoke("--status")
    assert status.exit_code == 0
    assert "Signals (.meta.json unreadable: " in status.stdout
    assert tree_digest(busy) == before  # --status writes nothing, not even the session log
    result = invoke("--force")
    assert result.exit_code == 65
    assert result.stderr == (f"Error: {meta}: invalid JSON: duplicate key 'lock'\n")
    assert user_files(busy) == {k: v for k, v in before.items() if "/sessions/" not in k}
    assert logged(busy) == [("invoked", f"error: {meta}: invalid JSON: duplicate key 'lock'")]


def test_no_ledger_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".smith" / "vault").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    result = invoke("--force")
    assert result.exit_code == 1
    assert result.stderr == (f"Error: {tmp_path}/.smith/vault/ledger: No Ledger found. Run "
                             "/smith-reflect after a workflow to start building the Ledger, "
                             "or /smith to initialize the vault structure\n")


def test_crlf_and_bom_files_keep_their_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    root = tmp_path / "proj"
    ledger = make_project(root, {}, meta=meta_json(context_budget_violations=4))
    keep = entry_b("Keep me", date="2026-05-09", confidence="medium", reflections=2)
    body = ("# Ledger: Patterns\n\n" + keep + LOW_OLD).replace("\n", "\r\n")
    (ledger / "patterns.md").write_bytes(b"\xef\xbb\xbf" + body.encode())
    monkeypatch.chdir(root)
    assert invoke().exit_code == 0
    out = (ledger / "patterns.md").read_bytes()
    assert out == b"\xef\xbb\xbf" + ("# Ledger: Patterns\r\n\r\n" + keep.replace(
        "\n", "\r\n")).encode()


# --------------------------------------------------------------------------- dry run, status


def test_status_time_is_the_one_clock_source_date_epoch_moved_to_today(busy: Path) -> None:
    """Without TOOLKIT_NOW, the status's time is SOURCE_DATE_EPOCH (as every output's "now"),
    moved to the injected day when there is one: the same text on every run, whatever the
    time of day."""
    from toolkit.cli import cli

    env = {"TOOLKIT_NOW": None, "SOURCE_DATE_EPOCH": "1778414400"}  # 2026-05-10 12:00:00 UTC
    result = CliRunner().invoke(cli, ["ledger", "reconcile", "--status"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "Reconcile status at 2026-05-10 12:00:00 UTC"
    assert "Last reconcile: 2026-05-01T00:00:00Z (228.0 hours ago;" in result.stdout
    moved = CliRunner().invoke(cli, ["--today", "2026-05-08", "ledger", "reconcile", "--status"],
                               env=env)
    assert moved.exit_code == 0, moved.output
    assert moved.stdout.splitlines()[0] == "Reconcile status at 2026-05-08 12:00:00 UTC"
    assert "Last reconcile: 2026-05-01T00:00:00Z (180.0 hours ago;" in moved.stdout


def test_dry_run_leaves_the_vault_byte_identical_and_shows_the_plan(busy: Path,
                                                                    tmp_path: Path) -> None:
    before = tree_digest(busy)
    judge = judge_script(tmp_path, 'cat >/dev/null; echo "YES: One migration lesson"')
    result = invoke("--dry-run", "--judge-command", str(judge))
    assert result.exit_code == 0, result.output
    assert tree_digest(busy) == before
    out = result.stdout
    assert out.startswith("Dry run: nothing was changed. Ledger reconciliation would do:\n"
                          "- Trigger: context_budget_violations > 3\n- Merged: 1 entries\n")
    assert ('- patterns.md: "Run the migration dry-run before applying schema changes" + '
            '"Run the migration dry run before applying schema changes" \u2192 '
            '"One migration lesson"') in out
    assert "--- a/patterns.md\n+++ b/patterns.md\n" in out
    assert "-**Title:** Grep the route table first\n" in out


def test_status_reports_signals_and_changes_nothing(busy: Path) -> None:
    meta = ledger_of(busy) / ".meta.json"
    meta.write_text(json.dumps(meta_json(context_budget_violations=4, lock={
        "pid": "c3f1a9e2", "acquired": "2026-05-10T11:55:00Z"})))
    before = tree_digest(busy)
    result = invoke("--status")
    assert result.exit_code == 0, result.output
    assert tree_digest(busy) == before
    lines = result.stdout.splitlines()
    assert lines[0] == "Reconcile status at 2026-05-10 12:00:00 UTC"
    assert "  total_patterns                  7  (6 **Title:** lines; .meta.json says 0)" in lines
    assert "  [EXCEEDED] context_budget_violations 4 > 3" in lines
    assert "  [ok      ] patterns.md entries 6 <= 50" in lines
    assert "Last reconcile: 2026-05-01T00:00:00Z (228.0 hours ago; minimum interval 6 hours)" \
        in lines
    assert "Lock: held by c3f1a9e2 (acquired 2026-05-10T11:55:00Z, 5 min ago)" in lines
    assert lines[-1] == ("Would run: yes (trigger: context_budget_violations > 3); but the lock "
                         "is held now")


# --------------------------------------------------------------------------- locks


def test_fresh_lock_exits_75_naming_the_holder(busy: Path) -> None:
    meta = ledger_of(busy) / ".meta.json"
    meta.write_text(json.dumps(meta_json(context_budget_violations=4, lock={
        "pid": "c3f1a9e2-5b7d", "acquired": "2026-05-10T11:55:00Z"})))
    before = user_files(busy)
    for args in (("--dry-run",), ()):
        result = invoke(*args)
        assert result.exit_code == 75
        assert result.stderr == (f"Error: {meta}: Reconciliation already in progress: locked "
                                 "by c3f1a9e2-5b7d (acquired 2026-05-10T11:55:00Z, 5 min ago). "
                                 "Wait for it to finish (the lock expires after 10 minutes), "
                                 "or use --force if that run is dead\n")
    assert user_files(busy) == before
    assert [event for event, _ in logged(busy)] == ["invoked"]  # the dry run logs nothing


def test_the_lock_is_judged_by_the_clock_not_the_today_setting(busy: Path) -> None:
    """`--today` moves ages and pruning, not the instant another session took the lock: a
    lock taken 5 minutes before the run's time (SOURCE_DATE_EPOCH, 9 days after `today`) is
    held, in `--status` and in a run."""
    from toolkit.cli import cli

    meta = ledger_of(busy) / ".meta.json"
    meta.write_text(json.dumps(meta_json(context_budget_violations=4, lock={
        "pid": "c3f1a9e2", "acquired": "2026-05-10T11:55:00Z"})))
    before = user_files(busy)
    env = {"TOOLKIT_NOW": None, "SOURCE_DATE_EPOCH": "2026-05-10T12:00:00",
           "TOOLKIT_LOCK_TIMEOUT": "0.2"}
    result = CliRunner().invoke(cli, ["--today", "2026-05-01", "ledger", "reconcile",
                                      "--status"], env=env)
    assert result.exit_code == 0, result.output
    assert "Lock: held by c3f1a9e2 (acquired 2026-05-10T11:55:00Z, 5 min ago)" in \
        result.stdout.splitlines()
    result = CliRunner().invoke(cli, ["--today", "2026-05-01", "ledger", "reconcile"],
                                env=env)
    assert result.exit_code == 75, result.output
    assert result.stderr == (f"Error: {meta}: Reconciliation already in progress: locked "
                             "by c3f1a9e2 (acquired 2026-05-10T11:55:00Z, 5 min ago). "
                             "Wait for it to finish (the lock expires after 10 minutes), "
                             "or use --force if that run is dead\n")
    assert user_files(busy) == before


def test_stale_lock_is_taken_over_with_a_note(busy: Path) -> None:
    (ledger_of(busy) / ".meta.json").write_text(json.dumps(meta_json(
        context_budget_violations=4, lock={"pid": "dead-session",
                                           "acquired": "2026-05-10T11:49:59Z"})))
    result = invoke()
    assert result.exit_code == 0, result.output
    run = last_run(busy)
    assert run.result == "OK"
    assert ("**Notes**:\n- stale lock taken over: held by dead-session (acquired "
            "2026-05-10T11:49:59Z, 10 min ago)") in (ledger_of(busy) / "reconcile-log.md"
                                                     ).read_text()
    assert json.loads((ledger_of(busy) / ".meta.json").read_text())["lock"] is None


def test_force_bypasses_a_fresh_lock_and_the_thresholds(busy: Path) -> None:
    (ledger_of(busy) / ".meta.json").write_text(json.dumps(meta_json(lock={
        "pid": "other", "acquired": "2026-05-10T11:59:00Z"})))
    result = invoke("--force")
    assert result.exit_code == 0, result.output
    assert "- Trigger: manual --force\n" in result.stdout
    assert "- --force: overrode the lock held by other (acquired 2026-05-10T11:59:00Z, 60 s " \
           "ago)" in result.stdout
    assert len(entries(busy)) == 4


# --------------------------------------------------------------------------- failures


def test_failing_backup_aborts_with_nothing_written_and_is_logged(busy: Path) -> None:
    backups = ledger_of(busy) / ".backups"
    backups.write_text("not a folder")  # mkdir of the backup folder fails
    before = digest_without_log(busy)
    result = invoke()
    assert result.exit_code == 1
    assert result.stderr == (f"Error: reconcile failed: backup failed: {backups}: is not a "
                             "folder, so no backup can be made there. Move it away so the "
                             ".backups folder can be created; the failure is logged in "
                             "reconcile-log.md\n")
    assert digest_without_log(busy) == before  # ledger, meta.yaml, .meta.json untouched
    run = last_run(busy)
    assert run.result == "FAILED" and run.backup == "none"
    assert no_temp_files(busy)


@pytest.mark.parametrize("point", ["after_ledger_write", "after_meta_write"])
def test_failure_mid_write_restores_the_backup_and_logs_failed(busy: Path, point: str) -> None:
    before = digest_without_log(busy)
    before.pop(".smith/vault/ledger/.backups", None)
    result = invoke(env={"TOOLKIT_RECONCILE_FAULT": point})
    assert result.exit_code == 1
    assert result.stderr == (f"Error: reconcile failed: injected fault at {point} "
                             "(TOOLKIT_RECONCILE_FAULT); files restored from the backup; the "
                             "failure is logged in reconcile-log.md\n")
    after = {k: v for k, v in digest_without_log(busy).items() if "/.backups/" not in k}
    assert after == before
    run = last_run(busy)
    assert run.result == "FAILED"
    assert run.backup == ".backups/reconcile-2026-05-10-120000/"
    # Not retried: exactly one log entry for this run, and the next run starts from scratch.
    assert len(read_reconcile_log(ledger_of(busy) / "reconcile-log.md")[0]) == 1
    assert invoke().exit_code == 0 and last_run(busy).result == "OK"


def test_a_file_changed_during_the_run_is_not_overwritten(busy: Path, tmp_path: Path) -> None:
    """A judge that edits the ledger while reconcile waits for it (as a user could)."""
    patterns = ledger_of(busy) / "patterns.md"
    judge = judge_script(tmp_path, f'cat >/dev/null; echo "user edit" >> "{patterns}"; '
                                   'echo "YES: Merged"')
    result = invoke("--judge-command", str(judge), "--max-judge-calls", "1")
    assert result.exit_code == 1
    assert "changed on disk since it was read; nothing written" in result.stderr
    assert patterns.read_text().endswith("user edit\n")
    assert last_run(busy).result == "FAILED"


# --------------------------------------------------------------------------- judges


@pytest.mark.parametrize("body, merged, result, warning", [
    ('cat >/dev/null; echo "YES: One migration lesson"', 1, "OK", None),
    ('cat >/dev/null; echo NO', 0, "OK", None),
    ('cat >/dev/null; echo "hmm, hard to say"', 0, "PARTIAL", "unclear answer 'hmm, hard to say'"),
    ("cat >/dev/null; sleep 20", 0, "PARTIAL", "judge command timed out after 1 s"),
])
def test_judge_command_yes_no_garbage_hang(busy: Path, tmp_path: Path, body: str, merged: int,
                                           result: str, warning: str | None) -> None:
    judge = judge_script(tmp_path, body)
    out = invoke("--judge-command", str(judge), "--judge-timeout", "1")
    assert out.exit_code == 0, out.output
    run = last_run(busy)
    assert (len(run.merges), run.result) == (merged, result)
    log = (ledger_of(busy) / "reconcile-log.md").read_text()
    if warning:
        assert (f'- patterns.md: "Run the migration dry-run before applying schema changes" + '
                f'"Run the migration dry run before applying schema changes": {warning}; left '
                "as they are") in log
    else:
        assert "**Warnings**" not in log


def test_more_than_100_entries_skip_the_merge_phase_without_calling_the_judge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    body = "".join(entry_b(f"Retry the flaky upload step {i}", date="2026-05-09",
                           pattern="Retry uploads three times.") for i in range(101))
    make_project(root, {"patterns": body})
    monkeypatch.chdir(root)
    calls = tmp_path / "calls.log"
    judge = judge_script(tmp_path, f'cat >> "{calls}"; echo "YES: merged"')
    result = invoke("--judge-command", str(judge))
    assert result.exit_code == 0, result.output
    assert not calls.exists()
    run = last_run(root)
    assert run.trigger == "patterns.md entries > 50" and run.result == "PARTIAL"
    assert len(entries(root)) == 50  # the per-file entry budget still applies
    assert "- patterns.md: 101 entries, more than 100: merge phase skipped for this file" in (
        ledger_of(root) / "reconcile-log.md").read_text()


def test_external_judge_calls_stay_bounded_on_a_large_similar_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    body = "".join(entry_b(f"Retry the flaky upload step {i}", date="2026-05-09",
                           pattern="Retry uploads three times.") for i in range(100))
    make_project(root, {"patterns": body}, meta=meta_json(context_budget_violations=4))
    monkeypatch.chdir(root)
    calls = tmp_path / "calls.log"
    judge = judge_script(tmp_path, f'cat >/dev/null; echo call >> "{calls}"; echo NO')
    result = invoke("--judge-command", str(judge), "--max-judge-calls", "7")
    assert result.exit_code == 0, result.output
    assert calls.read_text().count("call") == 7
    assert "4943 candidate pair(s) not judged: the limit of 7 judge calls per run was reached" \
        in result.stdout


# --------------------------------------------------------------------------- backups


def test_old_backups_are_pruned_by_count_and_age(busy: Path) -> None:
    backups = ledger_of(busy) / ".backups"
    names = ["reconcile-2026-03-01-000000", "reconcile-2026-05-01-000000",
             "reconcile-2026-05-02-000000", "reconcile-2026-05-03-000000",
             "reconcile-2026-05-04-000000", "reconcile-2026-05-05-000000",
             "reconcile-2026-05-06-000000", "not-a-reconcile-backup"]
    for name in names:
        (backups / name).mkdir(parents=True)
    assert invoke().exit_code == 0
    left = sorted(p.name for p in backups.iterdir())
    assert left == ["not-a-reconcile-backup", "reconcile-2026-05-03-000000",
                    "reconcile-2026-05-04-000000", "reconcile-2026-05-05-000000",
                    "reconcile-2026-05-06-000000", "reconcile-2026-05-10-120000"]


# --------------------------------------------------------------------------- real processes


def _start(root: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(toolkit_argv(*args), cwd=root, env=subprocess_env(root, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_pause(proc: subprocess.Popen[str]) -> str:
    """Block until the process reports it is paused (other stderr lines are skipped)."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        if line.startswith("TOOLKIT_EDITOR_PAUSE after_"):
            return line
        seen.append(line)
    raise AssertionError("the run ended without pausing:\n" + "".join(seen))


def test_two_concurrent_reconciles_one_runs_the_other_exits_75(busy: Path,
                                                               tmp_path: Path) -> None:
    serial = tmp_path / "serial"
    shutil.copytree(busy, serial)
    go = tmp_path / "go"
    first = _start(busy, TOOLKIT_EDITOR_PAUSE=f"after_lock:{go}")
    try:
        _wait_for_pause(first)
        second = subprocess.run(toolkit_argv(), cwd=busy, env=subprocess_env(busy),
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 75
        assert second.stderr.startswith(f"Error: {ledger_of(busy)}/.meta.json: Reconciliation "
                                        "already in progress: locked by toolkit-editor@")
        assert f":{first.pid} (acquired {NOW}, 0 s ago)" in second.stderr
    finally:
        go.touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert out.startswith("Ledger reconciliation complete.")
    assert len(read_reconcile_log(ledger_of(busy) / "reconcile-log.md")[0]) == 1
    # The same as one run on its own.
    with contextlib.chdir(serial):  # (no other process is involved in it)
        alone = invoke()
    assert alone.exit_code == 0, alone.stderr
    for name in ("patterns.md", "project-quirks.md", "meta.yaml", ".meta.json"):
        assert (ledger_of(busy) / name).read_bytes() == (ledger_of(serial) / name).read_bytes()


def test_a_killed_run_leaves_whole_files_and_its_lock_is_taken_over(busy: Path,
                                                                     tmp_path: Path) -> None:
    """SIGKILL while holding the lock, before anything was written: the files are untouched and
    the next run takes the dead run's lock over at once (the editor's rule for a toolkit run
    on this host whose process is gone), with a note."""
    before = digest_without_log(busy)
    proc = _start(busy, TOOLKIT_EDITOR_PAUSE=f"after_lock:{tmp_path / 'never'}")
    _wait_for_pause(proc)
    os.kill(proc.pid, signal.SIGKILL)
    reap(proc)
    meta = json.loads((ledger_of(busy) / ".meta.json").read_text())
    assert meta["lock"]["pid"].endswith(f":{proc.pid}")
    after = digest_without_log(busy)
    assert {k: v for k, v in after.items() if k != ".smith/vault/ledger/.meta.json"} == \
        {k: v for k, v in before.items() if k != ".smith/vault/ledger/.meta.json"}
    result = invoke()
    assert result.exit_code == 0, result.output
    assert "lock left by a run that was killed (toolkit-editor@" in result.stdout
    assert f":{proc.pid} (acquired {NOW}, 0 s ago)) taken over" in result.stdout
    assert last_run(busy).result == "OK"


def test_sigkill_between_phases_leaves_whole_files_and_a_clean_rerun(busy: Path,
                                                                    tmp_path: Path) -> None:
    """SIGKILL after the ledger write, before the log: every file is whole (the new content;
    .meta.json's last_reconcile came in the same journaled set as the ledger files), no temp
    file is left, and the next run does not merge twice."""
    proc = _start(busy, TOOLKIT_EDITOR_PAUSE=f"after_ledger_write:{tmp_path / 'never'}")
    _wait_for_pause(proc)
    os.kill(proc.pid, signal.SIGKILL)
    reap(proc)
    titles = [e.title for e in entries(busy)]
    assert titles == ["Pin the Redis client",
                      "Run the migration dry-run before applying schema changes",
                      "Warm the cache before load tests", "Check the feature flag service"]
    assert no_temp_files(busy) and last_run(busy) is None
    meta = json.loads((ledger_of(busy) / ".meta.json").read_text())
    assert meta["last_reconcile"] == NOW and meta["lock"] is None
    result = invoke()
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("No reconciliation needed: the last one ran 0.0 hours ago")
    assert [e.title for e in entries(busy)] == titles


def _wait_for_editor_pause(proc: subprocess.Popen[str], point: str) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith(f"TOOLKIT_EDITOR_PAUSE {point} "):
            return
    raise AssertionError(f"the run ended without reaching {point}")


@pytest.mark.parametrize("point", ["after_journal", "after_rename@1", "after_rename@2"])
def test_sigkill_between_two_renames_of_the_reconcile_set(busy: Path, tmp_path: Path,
                                                          point: str) -> None:
    """FAULTS G4: reconcile's writes (ledger files, meta.yaml, .meta.json with last_reconcile)
    are one journaled set; killed between two renames, the next command (here a read-only
    `--status`) finishes or undoes it as a set and says which."""
    serial = tmp_path / "serial"
    shutil.copytree(busy, serial, symlinks=True)
    with contextlib.chdir(serial):  # the uninterrupted run, for reference
        assert invoke().exit_code == 0
    names = [*(f"{k}.md" for k in LEDGER_FILES), "meta.yaml", ".meta.json"]

    def state(root: Path) -> dict[str, bytes | None]:
        d = ledger_of(root)
        return {n: (d / n).read_bytes() if (d / n).exists() else None for n in names}

    old, new = state(busy), state(serial)
    proc = _start(busy, TOOLKIT_EDITOR_PAUSE=point)
    _wait_for_editor_pause(proc, point)
    os.kill(proc.pid, signal.SIGKILL)
    reap(proc)
    assert (ledger_of(busy) / ".toolkit-journal.json").exists()
    r = subprocess.run(toolkit_argv("--status"), cwd=busy, env=subprocess_env(busy),
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    after = state(busy)
    if point == "after_journal":
        assert "an interrupted reconcile (0 of " in r.stderr and "rolled back" in r.stderr
        restored = json.loads(after[".meta.json"] or b"{}")
        restored.pop("lock")
        original = json.loads(old[".meta.json"] or b"{}")
        original.pop("lock")
        assert {n: b for n, b in after.items() if n != ".meta.json"} == \
            {n: b for n, b in old.items() if n != ".meta.json"} and restored == original
    else:
        assert "was completed from its journal" in r.stderr
        assert after == new
    assert not (ledger_of(busy) / ".toolkit-journal.json").exists()
