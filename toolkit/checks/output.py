"""Check results as a table, as JSON and as JUnit XML (what CI systems read).

Every cell shown comes through :func:`cell`: invisible and control characters made visible
(so the XML is always well-formed) and secrets redacted (a user check may select them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolkit.checks.core import Result

CELL_MAX = 60


def cell(value: Any) -> str:
    """One value for display: visible, secrets redacted (also when lowercased), None empty."""
    from toolkit.display import visible
    from toolkit.redact import redact

    # fold: the loaders lowercase some values (a category), and a lowercased key is still one.
    # Redacted before it is made visible: an invisible character inside a secret becomes a
    # visible <U+200B> that would split it for the redactor, and the reader reads it whole.
    return "" if value is None else visible(redact(str(value), fold=True), single_line=True)


def row_text(row: Sequence[Any], limit: int = CELL_MAX) -> str:
    """A failing row on one line: its cells joined, cut at ``limit`` characters."""
    text = " | ".join(cell(v) for v in row)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def totals(results: Sequence[Result]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "warn": 0, "error": 0}
    for r in results:
        counts[r.status] += 1
    return counts


def table(results: Sequence[Result], *, first: int = 3, root: Path | None = None) -> str:
    """The terminal report: one line per check (check, status, failing rows, why), its first
    few failing rows (or its error) indented under it, then the totals. Paths under ``root``
    (the project) are shown relative to it."""
    roots = [(root, "")] if root is not None else []
    width = max([len("check"), *(len(cell(r.check.name)) for r in results)])
    lines = [f"{'check':<{width}}  status  rows  why"]
    for r in results:
        lines.append(f"{cell(r.check.name):<{width}}  {r.status.upper():<6}  {r.count:>4}  "
                     f"{r.check.why}")
        if r.status == "error":
            lines.append(f"    {cell(r.message)}")
        for row in r.rows[:first]:
            lines.append("    " + row_text(shown_row(row, roots), ROW_MAX))
        if r.rows and r.count > first:
            lines.append(f"    (+{r.count - first} more)")
    c = totals(results)
    lines.append(f"{_n(len(results), 'check')}: {c['pass']} passed, {c['fail']} failed, "
                 f"{_n(c['warn'], 'warning')}, {_n(c['error'], 'error')}")
    return "\n".join(lines)


ROW_MAX = 120


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def shown_row(row: Sequence[Any], roots: Sequence[tuple[Path, str]]) -> tuple[Any, ...]:
    """A row with each text cell that starts with one of ``roots``' folders shown from there
    (``(project, "")``, ``(home, "~/")``): a path, or a place such as ``path:line``."""
    return tuple(_relative(v, roots) for v in row)


def _relative(value: Any, roots: Sequence[tuple[Path, str]]) -> Any:
    if not isinstance(value, str):
        return value
    for root, shown in roots:
        prefix = str(root).rstrip("/") + "/"
        if value.startswith(prefix):
            return shown + value[len(prefix):]
    return value


def as_json(results: Sequence[Result]) -> dict[str, Any]:
    """``--json``: totals and every check with its failing rows (the first few)."""
    return {
        "ok": not any(r.fails_run for r in results),
        "totals": totals(results),
        "checks": [{
            "name": r.check.name, "level": r.check.level, "tags": list(r.check.tags),
            "origin": r.check.origin, "status": r.status, "failing_rows": r.count,
            "columns": r.columns,
            "rows": [dict(zip(r.columns, [cell(v) for v in row], strict=False))
                     for row in r.rows],
            "message": cell(r.message) if r.message else None,
            "description": r.check.description, "why": r.check.why,
            "rationale": r.check.rationale, "expect": str(r.check.expect),
            "thresholds": r.check.thresholds,
            "seconds": round(r.seconds, 3)} for r in results],
    }


def junit_xml(results: Sequence[Result], *, suite: str = "toolkit check") -> bytes:
    """JUnit XML: one testcase per check. A failed error-level check is a ``failure``, one that
    could not run an ``error``; a failed warn-level check is ``skipped`` (CI shows it without
    failing the build)."""
    import xml.etree.ElementTree as ET

    c = totals(results)
    root = ET.Element("testsuites", name=suite, tests=str(len(results)),
                      failures=str(c["fail"]), errors=str(c["error"]),
                      skipped=str(c["warn"]))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(results)),
                       failures=str(c["fail"]), errors=str(c["error"]), skipped=str(c["warn"]),
                       time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        case = ET.SubElement(ts, "testcase", name=r.check.name,
                             classname=f"toolkit.checks.{r.check.origin.replace('.', '_')}",
                             time=f"{r.seconds:.3f}")
        detail = "\n".join([r.check.description, "", r.check.rationale, "",
                            *(row_text(row, 200) for row in r.rows)])
        if r.status == "fail":
            node = ET.SubElement(case, "failure", message=r.summary(), type="error")
            node.text = cell_block(detail)
        elif r.status == "error":
            node = ET.SubElement(case, "error", message=cell(r.summary()), type="check-error")
            node.text = cell_block(detail)
        elif r.status == "warn":
            ET.SubElement(case, "skipped", message=f"warning: {r.summary()}")
            out = ET.SubElement(case, "system-out")
            out.text = cell_block(detail)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def cell_block(text: str) -> str:
    """Multi-line text for the XML: each line as :func:`cell` shows it."""
    return "\n".join(cell(line) for line in text.split("\n"))
