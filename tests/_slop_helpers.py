"""Builders for slop ledger tests: entries and files in CodeSmith's exact on-disk format."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

UTC = dt.UTC
NOW = dt.datetime(2026, 5, 4, 14, 30, 0, tzinfo=UTC)
RFC3339 = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3}|\.\d{6}|\.\d{9})?\+00:00"
UUID4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


def entry(n: int, **fields: Any) -> dict[str, Any]:
    """A CodeSmith entry, id ``0000000n-...``, in CodeSmith's field order."""
    base: dict[str, Any] = {
        "id": f"{n:08x}-1111-4222-8333-{n:012x}",
        "bucket": "stale_docs",
        "severity": "medium",
        "confidence": "high",
        "title": f"Entry number {n}",
        "description": f"Description of entry {n}.",
        "status": "open",
        "created_at": "2026-05-01T10:00:00.123456789+00:00",
        "updated_at": "2026-05-01T10:00:00.123456789+00:00",
    }
    order = ["id", "bucket", "severity", "confidence", "owner", "source_links", "title",
             "description", "status", "cleanup_recommendation", "created_at", "updated_at",
             "task_id", "thread_id"]
    merged = {**base, **fields}
    known = [k for k in order if k in merged]
    return {k: merged[k] for k in known} | {k: v for k, v in merged.items() if k not in order}


def serde_pretty(data: Any) -> str:
    """``serde_json::to_string_pretty``: 2-space indent, no trailing newline."""
    return json.dumps(data, indent=2, ensure_ascii=False)


def write_ledger(path: Path, entries: list[dict[str, Any]], *, bare: bool = False,
                 trailing_newline: bool = False, top: dict[str, Any] | None = None) -> Path:
    data: Any = entries if bare else {"entries": entries, **(top or {})}
    text = serde_pretty(data) + ("\n" if trailing_newline else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def read_entries(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else data["entries"]
