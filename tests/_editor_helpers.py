"""Generated ledgers for the editor tests: both entry forms, fences, odd separators, CRLF, BOM."""

from __future__ import annotations

import random
import shutil
import stat
from pathlib import Path

from tests.conftest import FORMATS

TITLES = [
    "Run the migration dry-run first", "Docker layer caching invalidation",
    "Café au lait naming", "Cafe\u0301 au lait naming", "Straße routing quirk",
    "Qdrant WAL recovery on unclean shutdown", "Always rebuild Docker after code changes",
    "Use processing_ledger for pipeline stages", "\u202eevil bidi title", "zero\u200bwidth",
    "emoji 🚀 deploys", "Title: with a colon", "duplicate title", "duplicate title",
    "../../etc/passwd", "x" * 120,
]
CONFS = ["low", "medium", "high", "Medium", "HIGH", "", "bogus"]


def form_a(rng: random.Random, title: str) -> str:
    conf = rng.choice(CONFS)
    lines = [f"## {title}", ""]
    if rng.random() < 0.9:
        lines.append(f"- **Date:** 2026-0{rng.randint(1, 9)}-{rng.randint(10, 28)}")
    if rng.random() < 0.9:
        lines.append(f"- **Category:** {rng.choice(['implementation', 'testing', 'audit'])}")
    if conf or rng.random() < 0.5:
        lines.append(f"- **Confidence:** {conf}")
    lines.append(f"- **Observations:** {rng.randint(1, 9)}")
    lines.append("- **Source reflections:** 2026-04-22, 2026-04-30")
    lines += ["", "### Context", "", "When it applies.", "", "### Pattern", ""]
    if rng.random() < 0.3:
        fence = rng.choice(["```", "~~~", "````"])
        lines += [fence + "python", "## not a heading", "**Title:** not a title", "---",
                  "**Confidence:** high", fence]
    lines += ["Do the thing.", "", "### Evidence", "", "- seen twice", ""]
    if rng.random() < 0.8:
        lines.append(rng.choice(["---", "----", "  ---", "--- "]))
    return "\n".join(lines) + "\n"


def form_b(rng: random.Random, title: str) -> str:
    conf = rng.choice(CONFS)
    lines = []
    if rng.random() < 0.85:
        lines += [rng.choice(["---", "-----"]), ""]
    lines.append(rng.choice(["**Title:**", "**Title**:"]) + f" {title}")
    if rng.random() < 0.9:
        lines.append(f"**Date:** 2026-0{rng.randint(1, 9)}-{rng.randint(10, 28)}")
    lines.append(f"**Category:** {rng.choice(['implementation', 'debugging', 'nonsense'])}")
    if conf or rng.random() < 0.5:
        lines.append(f"**Confidence:** {conf}")
    lines.append(f"**Source reflections:** {rng.randint(1, 9)}")
    lines += ["", "**Context:** When it applies.", "", "**Pattern:** Do it; instead of X."]
    if rng.random() < 0.2:
        lines += ["", "```", "**Title:** inside a fence", "## fenced heading", "```"]
    if rng.random() < 0.15:
        lines += ["", "```", "an unclosed fence swallows the rest"]
    lines += ["", "**Evidence:**", "- 2026-04-25 -- session s1: outcome",
              "- 2026-04-26 — reconcile merge: absorbed \"Other\"", "", "**Related:** None"]
    return "\n".join(lines) + "\n" + "\n" * rng.randint(0, 2)


def random_ledger(seed: int, n: int | None = None) -> bytes:
    rng = random.Random(seed)
    n = rng.randint(0, 12) if n is None else n
    parts = []
    head = rng.choice(["# Ledger: Patterns\n\nDescription.\n\n<!-- sorted -->\n\n",
                       "# Patterns\n\n<!-- Entries are added by /smith-reflect. -->\n\n", "",
                       "# Edge Cases\n"])
    parts.append(head)
    for _ in range(n):
        title = rng.choice(TITLES)
        parts.append(form_a(rng, title) if rng.random() < 0.4 else form_b(rng, title))
        if rng.random() < 0.1:
            parts.append("stray text between entries\n\n")
        if rng.random() < 0.1:
            parts.append("\n\n")
    text = "".join(parts)
    if rng.random() < 0.1:
        text = text.rstrip("\n")
    data = text.encode("utf-8")
    if rng.random() < 0.3:
        data = data.replace(b"\n", b"\r\n")
    if rng.random() < 0.2:
        data = b"\xef\xbb\xbf" + data
    return data


def make_vault(root: Path, files: dict[str, bytes], *, meta_yaml: str | None = None,
               meta_json: str | None = None) -> Path:
    """A vault with the given ledger files (kind -> bytes) and optional meta files."""
    vault = root / ".smith" / "vault"
    ledger = vault / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    for kind, data in files.items():
        (ledger / f"{kind}.md").write_bytes(data)
    if meta_yaml is not None:
        (ledger / "meta.yaml").write_text(meta_yaml, encoding="utf-8")
    if meta_json is not None:
        (ledger / ".meta.json").write_text(meta_json, encoding="utf-8")
    return vault


def fixture_vault(root: Path) -> Path:
    """tests/fixtures/formats/smith laid out as a writable vault (no sessions pointer)."""
    vault = root / ".smith" / "vault"
    shutil.copytree(FORMATS / "smith" / "ledger", vault / "ledger")
    shutil.copytree(FORMATS / "smith" / "sessions", vault / "sessions")
    shutil.copy(FORMATS / "smith" / "config.json", root / ".smith" / "config.json")
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR | (stat.S_IXUSR if p.is_dir() else 0))
    return vault
