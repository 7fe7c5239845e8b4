"""Builders for reconcile tests: ledgers generated from code, judge scripts, a fixed clock."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from toolkit.records import LEDGER_FILES, LEDGER_TITLES

NOW = "2026-05-10T12:00:00Z"  # TOOLKIT_NOW for every reconcile test
TODAY = "2026-05-10"


def entry_b(title: str, *, date: str = "2026-05-01", confidence: str = "low",
            reflections: int = 1, category: str = "implementation", context: str | None = None,
            pattern: str | None = None, evidence: list[str] | None = None,
            related: str = "None") -> str:
    """A Form B (``**Title:**``) entry with its leading separator, as smith-reflect writes it."""
    context = context or f"When working on {title.lower()}."
    pattern = pattern or f"Do the thing described by {title.lower()} every time."
    evidence = evidence if evidence is not None else [
        f"- {date} -- session s-{abs(hash(title)) % 10000}: observed {title.lower()}"]
    ev = "\n".join(evidence)
    return (f"---\n\n**Title:** {title}\n**Date:** {date}\n**Category:** {category}\n"
            f"**Confidence:** {confidence}\n**Source reflections:** {reflections}\n\n"
            f"**Context:** {context}\n\n**Pattern:** {pattern}\n\n**Evidence:**\n{ev}\n\n"
            f"**Related:** {related}\n\n")


def entry_a(title: str, *, date: str = "2026-05-01", confidence: str = "low",
            observations: int = 1, category: str = "debugging", sources: str = "2026-05-01",
            context: str = "Some context.", pattern: str = "Some pattern.",
            evidence: str = "Some evidence.") -> str:
    """A Form A (``## Title`` + bullets) entry with its closing separator."""
    return (f"## {title}\n\n- **Date:** {date}\n- **Category:** {category}\n"
            f"- **Confidence:** {confidence}\n- **Observations:** {observations}\n"
            f"- **Source reflections:** {sources}\n\n### Context\n\n{context}\n\n"
            f"### Pattern\n\n{pattern}\n\n### Evidence\n\n{evidence}\n\n### Related\n\nNone\n\n"
            "---\n\n")


def header(kind: str) -> str:
    return (f"# Ledger: {LEDGER_TITLES[kind]}\n\nApproaches extracted from workflows.\n\n"
            "<!-- Entries are sorted: high confidence first, then medium, then low. "
            "Within same confidence, most recent first. -->\n\n")


def filler(n_words: int, seed: str = "w") -> str:
    """``n_words`` pseudo-words from syllables, deterministic per ``seed``: different seeds
    give text that fuzzy matching does not mistake for the same lesson."""
    import random

    rng = random.Random(seed)
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    return " ".join("".join(rng.choice(syll) for _ in range(rng.randint(2, 4)))
                    for _ in range(n_words))


DEFAULT_CONFIG = {
    "ledger": {
        "pruning": {"low_max_age_days": 30, "medium_max_age_days": 90},
        "reconcile": {
            "enabled": True, "minimum_hours_between_reconciles": 6,
            "thresholds": {"total_tokens_max": 30000, "single_file_tokens_max": 8000,
                           "patterns_per_category_max": 50, "reinforcements_threshold": 50,
                           "context_violations_threshold": 3},
            "backup": {"max_count": 5, "max_age_days": 30},
        },
    }
}


def meta_json(**over: object) -> dict:
    data = {"schema_version": 1, "last_reconcile": "2026-05-01T00:00:00Z",
            "estimated_tokens": 0, "total_patterns": 0, "total_reinforcements": 7,
            "context_budget_violations": 0, "reinforcements_since_reconcile": 0, "lock": None}
    data.update(over)
    return data


def make_project(root: Path, files: dict[str, str], *, meta: dict | None = None,
                 config: dict | None = None, meta_yaml: str | None = None,
                 with_headers: bool = True) -> Path:
    """A project at ``root`` with ``.smith/config.json`` and a vault whose ledger files hold
    ``files`` (kind -> entries text). Returns the ledger folder."""
    ledger = root / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    (root / ".smith" / "config.json").write_text(
        json.dumps(DEFAULT_CONFIG if config is None else config, indent=2) + "\n")
    for kind in LEDGER_FILES:
        body = files.get(kind, "")
        (ledger / f"{kind}.md").write_text((header(kind) if with_headers else "") + body)
    counts = {k.replace("-", "_"): files.get(k, "").count("**Title:**") + files.get(k, "").count(
        "\n## ") + (1 if files.get(k, "").startswith("## ") else 0) for k in LEDGER_FILES}
    (ledger / "meta.yaml").write_text(meta_yaml if meta_yaml is not None else (
        "last_updated: 2026-05-01\ntotal_reflections: 9\nentries:\n"
        + "".join(f"  {k}: {v}\n" for k, v in counts.items())
        + "confidence_distribution:\n  high: 0\n  medium: 0\n  low: 0\n"))
    if meta is not False:
        (ledger / ".meta.json").write_text(json.dumps(meta or meta_json(), indent=2) + "\n")
    return ledger


def judge_script(tmp: Path, body: str, name: str = "judge") -> Path:
    """An executable shell script used as ``--judge-command`` (reads the question on stdin)."""
    path = tmp / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def yes_judge(tmp: Path, title: str = "Merged by the judge", log: Path | None = None) -> Path:
    """Says YES to every question (and logs each question's first line to ``log``)."""
    record = f'cat >> "{log}"; echo "=== call" >> "{log}"\n' if log else "cat > /dev/null\n"
    return judge_script(tmp, record + f'printf "YES: {title}\\n"', "yes-judge")


def run_env(**extra: str) -> dict[str, str]:
    env = {"TOOLKIT_NOW": NOW}
    env.update(extra)
    return env


def subprocess_env(root: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(run_env(**extra))
    env.pop("TOOLKIT_TODAY", None)
    return env

