"""Reconcile's analysis: settings, signals, thresholds, judges, candidate pairs, merges, prunes,
budget and the log entry - everything decided before a byte is written."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests._reconcile_helpers import entry_a, entry_b, filler, header, judge_script, make_project
from toolkit import reconcile as rc
from toolkit.errors import BusyError, DataError, UsageError
from toolkit.sources.smith import parse_ledger_bytes, read_ledger, read_reconcile_log

UTC = dt.UTC
NOW = dt.datetime(2026, 5, 10, 12, 0, 0, tzinfo=UTC)
TODAY = NOW.date()


def work(kind: str, body: str) -> rc.WorkFile:
    data = (header(kind) + body).encode()
    return rc.work_file(parse_ledger_bytes(data, f"/x/{kind}.md", kind))


def plan_of(*wfs: rc.WorkFile, outside: int = 0) -> rc.Plan:
    return rc.Plan(files={wf.kind: wf for wf in wfs}, outside_words=outside)


def planned(wf: rc.WorkFile):
    """The entries the plan keeps, in file order, parsed from their planned bytes."""
    return [parse_ledger_bytes(it.block, wf.path, wf.kind).entries[0] for it in wf.live]


# --------------------------------------------------------------------------- settings


def test_settings_defaults_when_config_missing(tmp_path: Path) -> None:
    s = rc.load_settings(tmp_path / "config.json")
    assert s.enabled and s.minimum_hours_between_reconciles == 6
    assert s.thresholds == rc.Thresholds(30000, 8000, 50, 50, 3)
    assert (s.backup_max_count, s.backup_max_age_days) == (5, 30)
    assert (s.low_max_age_days, s.medium_max_age_days) == (30, 90)


def test_settings_read_every_key_and_fall_back_to_meta_yaml_prune_days(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"ledger": {"reconcile": {
        "enabled": False, "minimum_hours_between_reconciles": 1.5,
        "thresholds": {"total_tokens_max": 10, "context_violations_threshold": 0},
        "backup": {"max_count": 2}}}}))
    s = rc.load_settings(cfg, {"low_confidence_prune_days": 7})
    assert not s.enabled and s.minimum_hours_between_reconciles == 1.5
    assert s.thresholds.total_tokens_max == 10 and s.thresholds.single_file_tokens_max == 8000
    assert s.thresholds.context_violations_threshold == 0
    assert s.backup_max_count == 2 and s.backup_max_age_days == 30
    assert (s.low_max_age_days, s.medium_max_age_days) == (7, 90)


@pytest.mark.parametrize("config, message", [
    ({"ledger": {"reconcile": {"thresholds": {"total_tokens_max": "lots"}}}},
     "ledger.reconcile.thresholds.total_tokens_max must be a whole number >= 0, not 'lots'"),
    ({"ledger": {"reconcile": {"enabled": "yes"}}},
     "ledger.reconcile.enabled must be true or false, not 'yes'"),
    ({"ledger": {"reconcile": []}}, "ledger.reconcile must be an object"),
])
def test_settings_bad_values_are_data_errors_naming_the_key(tmp_path: Path, config: dict,
                                                           message: str) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    with pytest.raises(DataError) as exc:
        rc.load_settings(cfg)
    assert exc.value.message == message and exc.value.path == str(cfg)


# --------------------------------------------------------------------------- signals


def test_tokens_are_words_times_1_3_rounded_down() -> None:
    assert rc.tokens_for_words(10) == 13 and rc.tokens_for_words(3) == 3
    assert rc.count_words(b"a  b\nc\r\n d") == 4


@pytest.mark.parametrize("part", [1, 3, 7, 64])
def test_a_big_text_counts_the_words_the_whole_text_has(monkeypatch, part: int) -> None:
    """Counted a part at a time (each cut after a newline): the same count as the whole text
    split at once, with Unicode spaces, CRLF, junk bytes and lines longer than a part."""
    from toolkit.ledger.vault import meta

    monkeypatch.setattr(meta, "_WORDS_PART", part)
    text = ("Retry\u00a0budget \u2003in CI\r\n\nno-newline-for-a-long-while " * 5
            + "\n\n  last words")
    data = text.encode() + b" \xff\xfe junk\n" + "caf\u00e9 \u00e9t\u00e9\n".encode()
    assert rc.count_words(text) == len(text.split())
    assert rc.count_words(data) == len(data.decode("utf-8", "replace").split())
    assert rc.count_words(b"") == rc.count_words("") == 0


def test_signals_count_both_entry_forms_and_fall_back_without_meta_json(tmp_path: Path) -> None:
    ledger = make_project(tmp_path, {"patterns": entry_b("One") + entry_b("Two"),
                                     "edge-cases": entry_a("Three")}, meta=False)
    files = read_ledger(ledger)
    s = rc.compute_signals(files, None, None)
    assert s.total_patterns == 3 and s.title_lines == 2  # a Form A entry has no **Title:**
    assert s.meta_json_state == "missing"
    assert (s.context_budget_violations, s.reinforcements_since_reconcile) == (0, 0)
    assert s.last_reconcile is None
    words = sum(rc.count_words((ledger / f"{k}.md").read_bytes()) for k in rc.LEDGER_FILES)
    assert s.estimated_tokens == words * 13 // 10  # all five files, words x 1.3
    assert s.files[0].tokens == rc.count_words(
        (ledger / "patterns.md").read_bytes()) * 13 // 10


def test_signals_take_counters_from_meta_json_but_measure_the_files() -> None:
    wf = parse_ledger_bytes((header("patterns") + entry_b("One")).encode(), "p", "patterns")
    meta = {"estimated_tokens": 99999, "total_patterns": 400, "context_budget_violations": 4,
            "reinforcements_since_reconcile": 51, "last_reconcile": "2026-05-03T22:15:04Z",
            "lock": {"pid": "abc", "acquired": "2026-05-10T11:55:00Z"}}
    s = rc.compute_signals({"patterns": wf}, meta, None)
    assert s.total_patterns == 1 and s.recorded_patterns == 400
    assert s.estimated_tokens < 1000 and s.recorded_tokens == 99999
    assert (s.context_budget_violations, s.reinforcements_since_reconcile) == (4, 51)
    assert s.last_reconcile == dt.datetime(2026, 5, 3, 22, 15, 4, tzinfo=UTC)
    assert s.lock is not None and s.lock.pid == "abc" and rc.lock_blocks(s.lock, NOW)


def _signals(**over) -> rc.Signals:
    base = dict(files=(rc.FileSignal("patterns", True, 100, 3, 3),), estimated_tokens=100,
                total_patterns=3, title_lines=3, context_budget_violations=0,
                reinforcements_since_reconcile=0, last_reconcile=None, last_reconcile_raw=None,
                meta_json_state="ok", recorded_tokens=None, recorded_patterns=None, lock=None)
    base.update(over)
    return rc.Signals(**base)


@pytest.mark.parametrize("over, trigger", [
    (dict(estimated_tokens=30001), "estimated_tokens > 30000"),
    (dict(files=(rc.FileSignal("patterns", True, 8001, 3, 3),)), "patterns.md tokens > 8000"),
    (dict(files=(rc.FileSignal("patterns", True, 10, 51, 51),)), "patterns.md entries > 50"),
    (dict(reinforcements_since_reconcile=51), "reinforcements_since_reconcile > 50"),
    (dict(context_budget_violations=4), "context_budget_violations > 3"),
])
def test_each_threshold_triggers_a_run(over: dict, trigger: str) -> None:
    d = rc.decide(_signals(**over), rc.Settings(), NOW, force=False)
    assert d.run and d.triggers == (trigger,)


def test_thresholds_are_strictly_greater_than() -> None:
    s = _signals(estimated_tokens=30000, context_budget_violations=3,
                 reinforcements_since_reconcile=50)
    d = rc.decide(s, rc.Settings(), NOW, force=False)
    assert not d.run and d.reason == "No reconciliation needed: no threshold exceeded"


def test_minimum_interval_skips_even_when_a_threshold_fired_and_force_overrides() -> None:
    s = _signals(context_budget_violations=9, last_reconcile=NOW - dt.timedelta(hours=2))
    d = rc.decide(s, rc.Settings(), NOW, force=False)
    assert not d.run
    assert d.reason == ("No reconciliation needed: the last one ran 2.0 hours ago "
                        "(minimum 6 hours between runs)")
    assert rc.decide(s, rc.Settings(), NOW + dt.timedelta(hours=4), force=False).run
    forced = rc.decide(_signals(), rc.Settings(), NOW, force=True)
    assert forced.run and forced.triggers == ("manual --force",)


# --------------------------------------------------------------------------- lock rules


def test_lock_expires_after_ten_minutes_and_bad_times_count_as_stale(tmp_path: Path) -> None:
    path = tmp_path / ".meta.json"

    def lock(acquired: str) -> dict:
        return {"lock": {"pid": "c3f1a9e2", "acquired": acquired}}

    with pytest.raises(BusyError) as exc:
        rc.check_lock(lock("2026-05-10T11:50:01Z"), path, NOW, force=False)
    assert str(exc.value).startswith(f"{path}: Reconciliation already in progress: locked by "
                                     "c3f1a9e2 (acquired 2026-05-10T11:50:01Z, 9 min ago)")
    notes = rc.check_lock(lock("2026-05-10T11:50:00Z"), path, NOW, force=False)
    assert notes == ["stale lock taken over: held by c3f1a9e2 (acquired "
                     "2026-05-10T11:50:00Z, 10 min ago)"]
    assert rc.check_lock(lock("yesterday"), path, NOW, force=False)[0].startswith("stale lock")
    assert rc.check_lock(lock("2026-05-10T11:59:00Z"), path, NOW, force=True)[0].startswith(
        "--force: overrode the lock held by c3f1a9e2")
    assert rc.check_lock({"lock": None}, path, NOW, force=False) == []


# --------------------------------------------------------------------------- judges


@pytest.mark.parametrize("answer, verdict", [
    ("YES: Run the dry-run first\n", rc.Verdict(True, "Run the dry-run first")),
    ("yes\n\nMerged title: \"Run the dry-run first\"\n", rc.Verdict(True, "Run the dry-run first")),
    ("**YES** — `Run the dry-run first`", rc.Verdict(True, "Run the dry-run first")),
    ("\n\n  NO\n", rc.Verdict(False)),
    ("No, they differ.", rc.Verdict(False)),
    ("YES", rc.Verdict(False, warning="YES without a merged title")),
    ("", rc.Verdict(False, warning="empty answer")),
    ("Maybe? YES: x", rc.Verdict(False, warning="unclear answer 'Maybe? YES: x'")),
    ("Yes, probably", rc.Verdict(False, warning="unclear answer 'Yes, probably'")),
    ("YES: " + "t" * 201, rc.Verdict(False, warning="unusable merged title '" + "t" * 59 + "…'")),
    ("YES: a\u202eb", rc.Verdict(False, warning="unusable merged title 'a<U+202E>b'")),
])
def test_judge_answers_only_a_clear_yes_with_a_title_merges(answer: str,
                                                          verdict: rc.Verdict) -> None:
    assert rc.parse_judge_answer(answer) == verdict


def _entry(title: str, pattern: str, **kw) -> object:
    return parse_ledger_bytes(entry_b(title, pattern=pattern, **kw).encode(), "p", "patterns") \
        .entries[0]


def test_fuzzy_judge_merges_only_near_identical_title_and_pattern() -> None:
    j = rc.FuzzyJudge()
    a = _entry("Run the migration dry-run before applying", "Run alembic upgrade --sql first.")
    b = _entry("Run the migration dry run before applying", "Run alembic upgrade --sql first!")
    assert j.same_lesson(a, b) == rc.Verdict(True, a.title)
    other_pattern = _entry("Run the migration dry-run before applying", "Read the DDL diff.")
    assert not j.same_lesson(a, other_pattern).yes
    negated = _entry("Never run the migration dry-run before applying",
                     "Never run alembic upgrade --sql first.")
    assert not j.same_lesson(a, negated).yes
    other_cat = _entry("Run the migration dry run before applying",
                       "Run alembic upgrade --sql first!", category="testing")
    assert not j.same_lesson(a, other_cat).yes


def test_command_judge_sends_the_seeds_question_on_stdin(tmp_path: Path) -> None:
    seen = tmp_path / "seen.txt"
    script = judge_script(tmp_path, f'cat > "{seen}"\necho "YES: Both in one"')
    a = _entry("Alpha lesson", "Pattern alpha.")
    b = _entry("Beta lesson", "Pattern beta.")
    assert rc.CommandJudge(f"'{script}' --flag", timeout=5).same_lesson(a, b) == \
        rc.Verdict(True, "Both in one")
    question = seen.read_text()
    assert question.startswith("Do these two Ledger entries cover the same core lesson?")
    assert "Entry A:\nTitle: Alpha lesson\nContext: When working on alpha lesson.\n" \
           "Pattern: Pattern alpha." in question
    assert "Entry B:\nTitle: Beta lesson" in question
    assert "Answer YES with a merged title, or NO." in question


@pytest.mark.parametrize("body, warning", [
    ('cat >/dev/null; echo "NO"', None),
    ('cat >/dev/null; echo "I think these are similar"',
     "unclear answer 'I think these are similar'"),
    ('cat >/dev/null; echo "model overloaded" >&2; exit 3',
     "judge command exited 3: model overloaded"),
    ("cat >/dev/null; sleep 30 & sleep 30; echo YES: late", "judge command timed out after 1 s"),
])
def test_command_judge_failures_are_no_with_a_warning(tmp_path: Path, body: str,
                                                      warning: str | None) -> None:
    script = judge_script(tmp_path, body)
    a, b = _entry("Alpha", "x"), _entry("Beta", "y")
    assert rc.CommandJudge(str(script), timeout=1).same_lesson(a, b) == \
        rc.Verdict(False, warning=warning)


def test_command_judge_refuses_a_missing_command_before_anything_runs() -> None:
    with pytest.raises(UsageError) as exc:
        rc.CommandJudge("no-such-llm-cli -m haiku")
    assert str(exc.value) == ("--judge-command: 'no-such-llm-cli' was not found or is not "
                              "executable. Give a command on PATH or a path to an executable file")


# --------------------------------------------------------------------------- candidates


def test_candidate_pairs_skip_unrelated_and_malformed_entries() -> None:
    body = (entry_b("Run the migration dry-run first", pattern="alembic --sql")
            + entry_b("Run migration dry-run first", pattern="alembic --sql please")
            + entry_b("Pin the Redis client version", pattern=filler(20, "r"))
            + "---\n\n**Title:** Run the migration dry-run first\n**Pattern:** alembic --sql\n\n")
    wf = work("patterns", body)
    pairs = rc.candidate_pairs([it.current for it in wf.items])
    assert [(i, j) for _s, i, j in pairs] == [(0, 1)]


_NO = rc.Verdict(False)


class CountingJudge:
    name = "counting"
    external = True

    def __init__(self, answer: rc.Verdict = _NO) -> None:
        self.calls = 0
        self.answer = answer

    def same_lesson(self, a, b) -> rc.Verdict:
        self.calls += 1
        return self.answer


def test_external_judge_calls_are_capped_per_run_with_a_warning() -> None:
    body = "".join(entry_b(f"Use the retry helper for service {i}",
                           pattern="Wrap calls in retry().") for i in range(12))
    plan = plan_of(work("patterns", body))
    judge = CountingJudge()
    rc.plan_merges(plan, judge, TODAY, max_judge_calls=5)
    assert judge.calls == 5
    assert plan.warnings == ["61 candidate pair(s) not judged: the limit of 5 judge calls per "
                             "run was reached (raise it with --max-judge-calls)"]


def test_merge_phase_skips_a_file_of_more_than_100_entries_without_asking() -> None:
    body = "".join(entry_b(f"Same lesson number {i}", pattern="Same pattern.")
                   for i in range(101))
    plan = plan_of(work("patterns", body))
    judge = CountingJudge(rc.Verdict(True, "x"))
    rc.plan_merges(plan, judge, TODAY)
    assert judge.calls == 0 and not plan.merges
    assert plan.warnings == ["patterns.md: 101 entries, more than 100: merge phase skipped "
                             "for this file"]


# --------------------------------------------------------------------------- merges


def test_merge_follows_the_seed_rules_in_form_b() -> None:
    body = (entry_b("Check the generated SQL", date="2026-05-08", confidence="low",
                    reflections=1, evidence=["- 2026-04-27 -- session b1: same day as base",
                                             "- 2026-05-08 -- session b2: new evidence"])
            + entry_b("Dry-run alembic first", date="2026-05-02", confidence="medium",
                      reflections=5, evidence=["- 2026-04-27 -- session a1: caught it"]))
    wf = work("patterns", body)
    plan = plan_of(wf)
    rc.plan_merges(plan, CountingJudge(rc.Verdict(True, "Run the migration dry-run")), TODAY)
    assert plan.merges == [rc.MergeAction("patterns.md", "Dry-run alembic first",
                                          "Check the generated SQL", "Run the migration dry-run")]
    (merged,) = planned(wf)
    assert merged.title == "Run the migration dry-run"
    assert merged.confidence == "high" and merged.source_reflections == "6"  # 5 + 1 -> 6+
    assert merged.date == "2026-05-08"  # the newer of the two
    assert merged.evidence.splitlines() == [
        "- 2026-04-27 -- session a1: caught it",
        "- 2026-05-08 -- session b2: new evidence",
        '- 2026-05-10 \u2014 reconcile merge: absorbed "Check the generated SQL"']


def test_merge_in_form_a_sums_observations_and_joins_reflection_lists() -> None:
    body = (entry_a("Redis drops pipelines on failover", confidence="medium", observations=2,
                    sources="2026-04-22, 2026-04-30", evidence="Two flaky runs.")
            + entry_a("Pipelines lost after sentinel failover", confidence="low",
                      observations=1, sources="2026-04-30, 2026-05-02",
                      evidence="- 2026-05-02 -- session c: lost again"))
    wf = work("edge-cases", body)
    plan = plan_of(wf)
    rc.plan_merges(plan, CountingJudge(rc.Verdict(True, "Redis pipelines lost on failover")),
                   TODAY, max_judge_calls=1)
    (merged,) = planned(wf)
    assert merged.form == "A" and merged.title == "Redis pipelines lost on failover"
    assert merged.observations == 3 and merged.confidence == "medium"
    assert merged.source_reflections == "2026-04-22, 2026-04-30, 2026-05-02"
    assert merged.evidence.splitlines() == [
        "Two flaky runs.", "", "- 2026-05-02 -- session c: lost again",
        '- 2026-05-10 \u2014 reconcile merge: absorbed "Pipelines lost after sentinel failover"']


def test_an_entry_takes_part_in_one_merge_per_run_and_untouched_bytes_stay() -> None:
    keep = entry_b("Unrelated lesson about caching", pattern=filler(15, "c"),
                   confidence="high", reflections=7, date="2026-05-09")
    body = keep + "".join(entry_b(f"Retry the flaky upload {i}", pattern="Retry uploads.")
                          for i in range(3))
    wf = work("patterns", body)
    plan = plan_of(wf)
    rc.plan_merges(plan, CountingJudge(rc.Verdict(True, "Retry flaky uploads")), TODAY)
    assert len(plan.merges) == 1
    first = wf.items[0]
    assert first.block == keep.encode() and not first.changed and not first.removed
    assert [it.title for it in wf.live] == ["Unrelated lesson about caching",
                                           "Retry flaky uploads", "Retry the flaky upload 2"]
    assert wf.resort


# --------------------------------------------------------------------------- prune


def test_prune_removes_old_low_demotes_old_medium_and_never_touches_high() -> None:
    body = (entry_b("High and ancient", date="2025-01-01", confidence="high", reflections=6)
            + entry_b("Medium old", date="2026-02-08", confidence="medium", reflections=2)
            + entry_b("Medium recent", date="2026-02-09", confidence="medium", reflections=2)
            + entry_b("Low old", date="2026-04-09", confidence="low")
            + entry_b("Low recent", date="2026-04-10", confidence="low")
            + "---\n\n**Title:** Low without a date\n**Confidence:** low\n\n")
    wf = work("patterns", body)
    plan = plan_of(wf)
    rc.plan_prunes(plan, rc.Settings(), TODAY)
    assert plan.prunes == [rc.PruneAction("patterns.md", "Medium old", "medium", 91, "demoted"),
                           rc.PruneAction("patterns.md", "Low old", "low", 31, "removed")]
    got = [(e.title, e.confidence, e.date) for e in planned(wf)]
    assert got == [("High and ancient", "high", "2025-01-01"),
                   ("Medium old", "low", "2026-05-10"),  # demoted, Date reset
                   ("Medium recent", "medium", "2026-02-09"),
                   ("Low recent", "low", "2026-04-10"),
                   ("Low without a date", "low", None)]
    assert wf.resort  # the editor re-sorts the file on commit


# --------------------------------------------------------------------------- budget


def test_file_budget_drops_lowest_confidence_oldest_first_never_high() -> None:
    big = filler(400, "b")
    body = (entry_b("High one", confidence="high", reflections=6, pattern=big)
            + entry_b("Medium one", confidence="medium", reflections=3, pattern=filler(400, "m"))
            + entry_b("Low newer", date="2026-05-05", pattern=filler(400, "n"))
            + entry_b("Low older", date="2026-05-01", pattern=filler(400, "o")))
    wf = work("patterns", body)
    plan = plan_of(wf)
    settings = rc.Settings(thresholds=rc.Thresholds(single_file_tokens_max=1700))
    rc.plan_budget(plan, settings)
    assert [(d.title, d.reason) for d in plan.drops] == [("Low older", "file budget"),
                                                         ("Low newer", "file budget")]
    assert wf.tokens <= 1700 and not plan.warnings
    tight = plan_of(work("patterns", body))
    rc.plan_budget(tight, rc.Settings(thresholds=rc.Thresholds(single_file_tokens_max=10)))
    assert [d.title for d in tight.drops] == ["Low older", "Low newer", "Medium one"]
    assert tight.warnings[0].startswith("patterns.md: still ")
    assert tight.warnings[0].endswith("(limit 10); only high-confidence or malformed entries "
                                      "left")


def test_total_budget_prefers_the_largest_file_and_entry_count_is_per_file() -> None:
    a = work("patterns", "".join(entry_b(f"P{i}", pattern=filler(300, f"p{i}x"))
                                 for i in range(3)))
    b = work("antipatterns", "".join(entry_b(f"A{i}", pattern=filler(100, f"a{i}x"))
                                     for i in range(3)))
    plan = plan_of(a, b)
    total = plan.tokens
    rc.plan_budget(plan, rc.Settings(thresholds=rc.Thresholds(total_tokens_max=total - 10,
                                                             patterns_per_category_max=2)))
    assert [(d.file, d.reason) for d in plan.drops] == [("patterns.md", "total budget"),
                                                       ("antipatterns.md", "entry count")]


# --------------------------------------------------------------------------- the log


def test_log_entry_has_the_seeds_format_and_goes_newest_first(tmp_path: Path) -> None:
    report = rc.Report(
        ran_at=NOW, dry_run=False, forced=False, scope=rc.LEDGER_FILES,
        signals=_signals(estimated_tokens=31000, total_patterns=12, context_budget_violations=4,
                         reinforcements_since_reconcile=3),
        decision=rc.Decision(True, ("estimated_tokens > 30000",), "", None),
        settings=rc.Settings(), backup=".backups/reconcile-2026-05-10-120000/",
        merges=[rc.MergeAction("patterns.md", "A", "B", "C")],
        prunes=[rc.PruneAction("edge-cases.md", "Old", "low", 40, "removed")],
        drops=[rc.DropAction("patterns.md", "Big", "low", 1, "total budget")],
        tokens_before=31000, tokens_after=29000, result="OK")
    assert rc.render_log_entry(report) == """---

## Reconcile: 2026-05-10 12:00:00

**Trigger**: estimated_tokens > 30000
**Signal values**: tokens=31000, patterns=12, violations=4, reinforcements_since=3

**Backup**: `.backups/reconcile-2026-05-10-120000/`

**Actions**:
- Merged 1 entries
- Pruned 1 stale entries
- Dropped 1 lowest-confidence entries for budget
- Budget result: 31000 \u2192 29000 estimated tokens

**Merges**:
- patterns.md: "A" + "B" \u2192 "C"

**Prunes**:
- edge-cases.md: "Old" (low confidence, age: 40 days)

**Budget drops**:
- patterns.md: "Big" (low confidence, 1 reflections)

**Result**: OK
"""
    log = tmp_path / "reconcile-log.md"
    log.write_bytes(rc.insert_log_entry(None, rc.render_log_entry(report)))
    assert log.read_text().startswith("# Reconcile Log\n\n---\n\n## Reconcile: 2026-05-10")
    later = rc.Report(**{**report.__dict__, "ran_at": NOW + dt.timedelta(hours=7),
                         "result": "PARTIAL", "warnings": ["judge timed out"]})
    log.write_bytes(rc.insert_log_entry(log.read_bytes(), rc.render_log_entry(later)))
    runs, _ = read_reconcile_log(log)
    assert [(r.ran_at, r.result) for r in runs] == [("2026-05-10 19:00:00", "PARTIAL"),
                                                   ("2026-05-10 12:00:00", "OK")]
    assert "**Warnings**:\n- judge timed out\n\n**Result**: PARTIAL" in log.read_text()


def test_log_insertion_keeps_crlf_and_existing_entries_byte_exact() -> None:
    old = (b"# Reconcile Log\r\n\r\nKept by hand.\r\n\r\n---\r\n\r\n## Reconcile: 2026-05-03 "
           b"22:15:04\r\n\r\n**Result**: OK\r\n")
    new = rc.insert_log_entry(old, "---\n\n## Reconcile: 2026-05-10 12:00:00\n\n**Result**: OK\n")
    assert new.startswith(b"# Reconcile Log\r\n\r\nKept by hand.\r\n\r\n---\r\n\r\n"
                          b"## Reconcile: 2026-05-10 12:00:00\r\n")
    assert new.endswith(old[len(b"# Reconcile Log\r\n\r\nKept by hand.\r\n\r\n"):])
    assert new.count(b"\n") == new.count(b"\r\n")
