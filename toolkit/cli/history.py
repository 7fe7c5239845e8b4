"""`toolkit ledger history [TITLE]`: how the ledger, or one entry, evolved over time.

The `ledger` group (toolkit/cli/ledger.py) exposes this command lazily.
"""

from __future__ import annotations

from typing import Any

import click

from toolkit import argrules
from toolkit.cli._common import echo_text, render_rows, rule_type

FORMATS = ("table", "csv", "json", "jsonl", "markdown")


def _ts(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else ""


def _changes(counts: dict[str, int]) -> str:
    from toolkit.history import CHANGE_KINDS

    return ", ".join(f"{counts[k]} {k}" for k in CHANGE_KINDS if counts.get(k))


@click.command()
@click.argument("title", required=False, type=rule_type(argrules.TITLE))
@click.option("--file", "file_", default=None, metavar="FILE",
              help="Only entries of this ledger file (patterns, antipatterns, tool-preferences "
                   "or tools, edge-cases, project-quirks or quirks).")
@click.option("--all", "all_sources", is_flag=True,
              help="Also show archive/backup copies and the vault in turn snapshots (default: "
                   "the git history and the working files).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def history(title: str | None, file_: str | None, all_sources: bool, fmt: str) -> None:
    """Show how the ledger evolved: entries by confidence in every past version (git commits
    of the vault, then uncommitted working files), or with TITLE the timeline of one entry:
    when it appeared, each promotion, demotion, reinforcement and edit, and its removal.

    TITLE matches case-insensitively; when no title matches exactly, titles containing it do.
    """
    from toolkit.cli._common import get_project

    with get_project(quiet=fmt != "table") as project:
        if not project.has_ledger_history():
            click.echo("No ledger history yet: the vault's ledger is not in a git repository "
                       "with commits, and there are no archive, backup or snapshot copies.")
            return
        if title is None:
            versions = project.ledger_history(file=file_, all_sources=all_sources)
            histories = None
        else:
            histories = project.entry_history(title, file=file_, all_sources=all_sources)
    if histories is None:
        # entries of no known confidence in a column of their own when there are any (the
        # site's history table has it; the rated three would not add up to the total)
        unrated = any(v.unrated for v in versions)
        cols = ["when", "source", "version", "high", "medium", "low",
                *(["unrated"] if unrated else []), "total", "changes"]
        if all_sources:
            cols.insert(1, "timeline")
        rows = []
        for v in versions:
            row = [_ts(v.ts), v.source, v.short_ref, v.high, v.medium, v.low,
                   *([v.unrated] if unrated else []), v.entries,
                   _changes(v.changes) or ("(no change)" if v.source != "git" or v.seq > 1
                                           else "")]
            if all_sources:
                row.insert(1, v.timeline)
            rows.append(row)
        if fmt == "table":
            from toolkit.records import resolve_ledger_file

            of = f" of {resolve_ledger_file(file_)}.md" if file_ else ""
            click.echo(f"Ledger history{of}: {len(versions)} version(s), oldest first")
        echo_text(render_rows(cols, rows, fmt))
        return
    from toolkit.display import shown

    cols = ["when", "source", "version", "change", "confidence", "reflections", "subject"]
    if fmt != "table":
        cols.insert(0, "entry")
        rows = [[h.entry_key, _ts(s.ts), s.source, s.short_ref, ", ".join(s.changes),
                 s.confidence, s.reflections, s.subject] for h in histories for s in h.states]
        echo_text(render_rows(cols, rows, fmt))
        return
    for i, h in enumerate(histories):
        if i:
            click.echo("")
        click.echo(f"{h.file}.md: {shown(h.title)}")
        rows = [[_ts(s.ts), s.source, s.short_ref, ", ".join(s.changes),
                 s.confidence if s.present else "", s.reflections if s.present else "",
                 s.subject or ""] for s in h.states]
        if rows:
            echo_text(render_rows(cols, rows, fmt))
        else:
            click.echo("  (no change recorded in the selected history; try --all)")
