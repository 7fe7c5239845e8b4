"""``toolkit slop``: the CodeSmith slop ledger (summary, query, append, update, export)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from toolkit import argrules
from toolkit.cli._common import (
    OutputFile,
    echo_json,
    echo_text,
    get_config,
    get_project,
    rule_type,
)

if TYPE_CHECKING:
    import datetime as dt

    from toolkit.records import SlopEntry

BUCKET_HELP = ("retained_compatibility, unmigrated_callers, duplicate_concepts, naming_drift, "
               "stale_docs, stale_tests, suspected_dead_code, unverified_public_behavior, "
               "tool_gaps, accepted_debt")
SEVERITY_HELP = "critical, high, medium, low, info"
CONFIDENCE_HELP = "certain, high, medium, low"
STATUS_HELP = "open, in_progress, resolved (or done), accepted, wont_fix (or wontfix)"


def _filter_options(func: Any) -> Any:
    options = [
        click.option("--bucket", metavar="BUCKET", help=f"Only this bucket: {BUCKET_HELP}."),
        click.option("--severity", metavar="SEVERITY",
                     help=f"Only this severity: {SEVERITY_HELP}."),
        click.option("--status", metavar="STATUS", help=f"Only this status: {STATUS_HELP}."),
        click.option("--search", metavar="TEXT",
                     help="Case-insensitive substring of the title or the description."),
        click.option("--owner", metavar="OWNER", help="Only entries of this owner (any case)."),
        click.option("--confidence", metavar="CONFIDENCE",
                     help=f"Only this confidence: {CONFIDENCE_HELP}."),
        click.option("--older-than", "older_than", type=rule_type(argrules.OLDER_THAN),
                     metavar="DAYS",
                     help="Only entries created more than DAYS days before today (--today)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _warn_problems(sf: Any, *, full: bool) -> None:
    from toolkit.display import visible

    if not sf.problems:
        return
    if full:
        for p in sf.problems:
            click.echo(f"Warning: {visible(str(p), single_line=True)}", err=True)
    else:
        click.echo(f"Warning: {len(sf.problems)} problem(s) in {sf.path}; "
                   "`toolkit slop` lists them", err=True)


def _entry_json(e: SlopEntry, today: dt.date | None = None) -> dict[str, Any]:
    from toolkit.slop_ops import age_days

    out: dict[str, Any] = {
        "id": e.id, "short_id": e.short_id, "bucket": e.bucket, "severity": e.severity,
        "confidence": e.confidence, "owner": e.owner, "source_links": list(e.source_links),
        "title": e.title, "description": e.description, "status": e.status,
        "cleanup_recommendation": e.cleanup_recommendation, "created_at": e.created_at,
        "updated_at": e.updated_at, "task_id": e.task_id, "thread_id": e.thread_id,
        "line": e.line, "extra": e.extra, "problems": list(e.problems)}
    if today is not None:
        out["age_days"] = age_days(e, today)
    return out


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary.")
@click.pass_context
def slop(ctx: click.Context, as_json: bool) -> None:
    """The CodeSmith slop ledger: what AI agents left behind, by bucket and status.

    With no subcommand, prints the summary: CodeSmith's own summary line and bucket counts,
    then a bucket-by-status table, then any problems found in the file. The ledger is
    $CODESMITH_HOME/slop_ledger/slop_ledger.json (default ~/.codesmith/...) or `toolkit
    --slop FILE`.
    """
    if ctx.invoked_subcommand is not None:
        return
    from toolkit.display import visible

    project = get_project(refresh=False)
    sf = project.slop_ledger()
    summary = project.slop_summary(sf)
    if as_json:
        echo_json({"path": str(sf.path), "exists": sf.exists, "form": sf.form,
                   **summary.as_dict(),
                   "warnings": [{"path": p.path, "line": p.line, "message": p.message}
                                for p in sf.problems]})
        return
    click.echo(f"File: {sf.path}" + ("" if sf.exists else " (not found: an empty ledger)"))
    click.echo(visible(summary.codesmith_text()).rstrip("\n"))
    if summary.total:
        from toolkit.cli._common import render_rows
        from toolkit.records import SLOP_STATUSES

        statuses = list(SLOP_STATUSES) + [s for s in summary.by_status if s not in SLOP_STATUSES]
        rows = [[b, *[counts.get(s, 0) for s in statuses], sum(counts.values())]
                for b, counts in summary.by_bucket_status.items()]
        rows.append(["total", *[summary.by_status.get(s, 0) for s in statuses], summary.total])
        click.echo("")
        click.echo(render_rows(["bucket", *statuses, "total"], rows, "table"))
    _warn_problems(sf, full=True)


@slop.command("query", short_help="List entries by bucket, severity, status, text, owner, age.")
@_filter_options
@click.option("--limit", type=rule_type(argrules.COUNT), default=50, show_default=True,
              help="Show at most this many entries (0: all).")
@click.option("--format", "fmt", type=click.Choice(["table", "list", "csv", "json", "jsonl",
                                                      "markdown"]),
              default="table", show_default=True,
              help="Output format; `list` is CodeSmith's own query listing.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def query_cmd(limit: int, fmt: str, as_json: bool, **filters: Any) -> None:
    """List entries matching every filter given, in file order.

    Enum values are read leniently as in CodeSmith (any case, `done`, `wontfix`,
    `inprogress`); an unknown value is a usage error listing the choices.
    """
    from toolkit.cli._common import render_rows
    from toolkit.display import visible
    from toolkit.slop_ops import age_days, debug_name, first_line

    project = get_project(refresh=False)
    result = project.slop_query(limit=limit or None, **filters)
    sf = result.ledger
    today = project.today
    if as_json:
        fmt = "json"
    if fmt in ("json", "jsonl"):
        import json

        rows = [_entry_json(e, today) for e in result.entries]
        if fmt == "json":
            echo_json({"path": str(sf.path), "total": result.total, "matched": result.matched,
                       "shown": len(result.entries), "entries": rows})
        else:
            for row in rows:
                click.echo(json.dumps(row, ensure_ascii=False))
    elif fmt == "list":
        if not sf.entries:
            click.echo("Slop ledger is empty.")
        else:
            click.echo(f"Found {len(result.entries)} matching slop ledger entries:\n")
            for e in result.entries:
                click.echo(visible(f"- [{e.short_id}] **{e.bucket}** ({debug_name(e.severity)} | "
                                   f"{debug_name(e.confidence)} | {debug_name(e.status)}) — "
                                   f"{e.title}", single_line=True))
                first = first_line(e.description)
                if first is not None:
                    click.echo("  " + visible(first, single_line=True))
    else:
        columns = ["id", "bucket", "severity", "confidence", "status", "owner", "age", "title"]
        cells = [[e.short_id, e.bucket, e.severity, e.confidence, e.status, e.owner,
                  age_days(e, today), e.title] for e in result.entries]
        if not sf.entries and fmt == "table":
            click.echo("Slop ledger is empty.")
        elif not result.entries and fmt == "table":
            click.echo("No matching slop ledger entries.")
        else:
            echo_text(render_rows(columns, cells, fmt))
    if result.matched > len(result.entries):
        click.echo(f"Showing {len(result.entries)} of {result.matched} matching entries "
                   "(--limit 0 shows all).", err=True)
    _warn_problems(sf, full=False)


@slop.command("append", short_help="Append entries (status open, new ids), locked and backed up.")
@click.option("--bucket", metavar="BUCKET", help=f"One of: {BUCKET_HELP}.")
@click.option("--severity", metavar="SEVERITY", help=f"One of: {SEVERITY_HELP}.")
@click.option("--confidence", metavar="CONFIDENCE", help=f"One of: {CONFIDENCE_HELP}.")
@click.option("--title", help="Short title (one line).")
@click.option("--description", help="What was left behind, and why it matters.")
@click.option("--owner", help="Who should clean it up (person, team, or \"auto\").")
@click.option("--source", "sources", multiple=True, metavar="LINK",
              help="A file path, URL or line reference (repeat for several).")
@click.option("--task-id", help="Link to a durable task id.")
@click.option("--thread-id", help="Link to a thread id.")
@click.option("--from-json", "from_json", type=click.File("r", encoding="utf-8"), metavar="FILE",
              help="Append CodeSmith's slop_ledger_append input instead: "
                   "{\"entries\": [{bucket, severity, confidence, title, description, owner?, "
                   "source_links?}]} ('-' reads stdin).")
@click.option("--dry-run", is_flag=True, help="Show the diff of the file; change nothing.")
@click.option("--force", is_flag=True, help="Edit the file even if it has other hard links.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def append_cmd(bucket: str | None, severity: str | None, confidence: str | None,
               title: str | None, description: str | None, owner: str | None,
               sources: tuple[str, ...], task_id: str | None, thread_id: str | None,
               from_json: Any, dry_run: bool, force: bool, as_json: bool) -> None:
    """Append entries: status open, new UUID v4 ids, created_at = updated_at = now.

    Give one entry with the options, or many with --from-json. The file is rewritten as
    CodeSmith writes it (2-space JSON), but only the new entries' bytes are added: unknown
    fields and the trailing newline are kept. A file CodeSmith cannot load is refused (exit 65,
    see `toolkit slop repair`). The write is locked, backed up to .backups/ beside the file and
    refused if the file changed meanwhile.
    """
    from toolkit.errors import UsageError
    from toolkit.slop_ops import NewEntry, append, new_entries_from_json

    singles = {"--bucket": bucket, "--severity": severity, "--confidence": confidence,
               "--title": title, "--description": description}
    if from_json is not None:
        if any(v is not None for v in (*singles.values(), owner, task_id, thread_id)) or sources:
            raise UsageError("give either --from-json or the entry options, not both")
        from toolkit.errors import DataError
        from toolkit.textio import load_json

        name = getattr(from_json, "name", "input")
        try:
            payload = from_json.read()
        except UnicodeDecodeError as exc:
            raise DataError(f"invalid UTF-8 at byte offset {exc.start}", path=name,
                            hint="Give the entries as UTF-8 JSON") from None
        entries = new_entries_from_json(load_json(payload, name), name)
    else:
        missing = [k for k, v in singles.items() if v is None]
        if missing:
            raise UsageError(f"missing {', '.join(missing)} (or use --from-json FILE)")
        assert bucket and severity and confidence and title is not None and description is not None
        entries = [NewEntry(bucket=bucket, severity=severity, confidence=confidence, title=title,
                            description=description, owner=owner, source_links=sources,
                            task_id=task_id, thread_id=thread_id)]
    cfg = get_config()
    result = append(cfg.slop_path, entries, dry_run=dry_run, max_bytes=cfg.max_file_bytes,
                    force=force)
    _report_write(result, result.codesmith_text(), as_json,
                  {"total": result.total, "ids": result.ids, "short_ids": result.short_ids})


@slop.command("update",
              short_help="Set an entry's status (unique id prefix), locked and backed up.")
@click.argument("entry_id", metavar="ID")
@click.option("--status", required=True, metavar="STATUS", help=f"New status: {STATUS_HELP}.")
@click.option("--cleanup", metavar="TEXT",
              help="Cleanup recommendation to record (kept as is when not given).")
@click.option("--dry-run", is_flag=True, help="Show the diff of the file; change nothing.")
@click.option("--force", is_flag=True, help="Edit the file even if it has other hard links.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def update_cmd(entry_id: str, status: str, cleanup: str | None, dry_run: bool, force: bool,
               as_json: bool) -> None:
    """Set the status of entry ID (a full id or any unique prefix) and its updated_at.

    A prefix that matches several entries is refused with the list (exit 1); CodeSmith would
    silently update the first. Only that entry's lines change in the file; the write is locked,
    backed up and refused if the file changed since it was read.
    """
    from toolkit.slop_ops import update

    cfg = get_config()
    result = update(cfg.slop_path, entry_id, status, cleanup, dry_run=dry_run,
                    max_bytes=cfg.max_file_bytes, force=force)
    if not result.changed:
        message = (f"Entry {result.id[:8]} ({result.title}) is already "
                   f"{result.status}; nothing written.")
    else:
        message = result.codesmith_text()
    _report_write(result, message, as_json,
                  {"id": result.id, "title": result.title, "status": result.status,
                   "changed": result.changed})


def _report_write(result: Any, message: str, as_json: bool, extra: dict[str, Any]) -> None:
    from toolkit.display import visible

    if as_json:
        echo_json({"path": str(result.path), "written": result.written,
                   "backup": str(result.backup) if result.backup else None,
                   "diff": result.diff, **extra})
        return
    if result.diff and not result.written:
        click.echo(visible(result.diff).rstrip("\n"))
        click.echo(f"Dry run: {visible(message, single_line=True)} (nothing written)")
        return
    click.echo(visible(message, single_line=True))
    if result.backup:
        click.echo(f"Backup: {result.backup}")


@slop.command("repair",
              short_help="Fix what keeps CodeSmith from loading the file (diff; --yes writes).")
@click.option("--yes", is_flag=True, help="Write the repaired file (locked, backed up, atomic).")
@click.option("--force", is_flag=True, help="Edit the file even if it has other hard links.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def repair_cmd(yes: bool, force: bool, as_json: bool) -> None:
    """Fix what keeps CodeSmith's strict loader from loading the slop ledger.

    Without --yes, prints the diff and the problems; nothing is written. Only problems with
    one safe fix are fixed: a UTF-8 BOM, a bare array top level, an empty file, a null or
    missing "entries", a null source_links, a missing or null updated_at (copied from
    created_at), and an enum value CodeSmith's tools would read one way (Open -> open,
    wontfix -> wont_fix). The rest (a missing title, an unknown status, a non-string owner...)
    is listed for a person to fix. Exit 65 while the file on disk still cannot be loaded
    (a dry run that found problems, or problems only a person can fix).
    """
    import sys

    from toolkit.display import visible
    from toolkit.errors import EXIT_DATA
    from toolkit.slop_ops import repair

    cfg = get_config()
    result = repair(cfg.slop_path, dry_run=not yes, max_bytes=cfg.max_file_bytes, force=force)
    left = result.unfixable + ([] if result.written else result.fixed)  # still on disk
    if as_json:
        echo_json({"path": str(result.path), "written": result.written,
                   "backup": str(result.backup) if result.backup else None,
                   "diff": result.diff, "fixes": [str(p) for p in result.fixed],
                   "cannot_fix": [str(p) for p in result.unfixable]})
    else:
        if not result.fixed and not result.unfixable:
            click.echo(f"CodeSmith loads {result.path}: nothing to repair.")
        if result.diff and not result.written:
            click.echo(visible(result.diff).rstrip("\n"))
        if result.fixed:
            verb = "Fixed" if result.written else "Would fix"
            click.echo(f"{verb} {len(result.fixed)} problem(s):")
            for p in result.fixed:
                click.echo("  - " + visible(str(p), single_line=True))
        if result.unfixable:
            click.echo(f"Cannot fix {len(result.unfixable)} problem(s); edit the file by hand:")
            for p in result.unfixable:
                click.echo("  - " + visible(str(p), single_line=True))
        if result.fixed and not result.written:
            click.echo("Dry run: nothing written. Run again with --yes to write "
                       "(the current file is backed up first).")
        if result.backup:
            click.echo(f"Backup: {result.backup}")
    if left:
        sys.exit(EXIT_DATA)


@slop.command("export", short_help="CodeSmith's Markdown handoff, redacted.")
@click.option("--title", help="Report title (default \"Slop Ledger Export\").")
@_filter_options
@click.option("-o", "--output", type=OutputFile(), default=None,
              help="Write the Markdown to this file instead of standard output.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {title, generated_at, entries, markdown} as JSON.")
def export_cmd(title: str | None, output: str | None, as_json: bool, **filters: Any) -> None:
    """Export entries as CodeSmith's Markdown handoff, with secrets redacted.

    Layout as CodeSmith's export: one section and table per bucket (alphabetical), then one
    block per entry. Every secret is replaced by [REDACTED] and home paths become ~ (see
    toolkit/redact.py). The "Generated at" time is now, or SOURCE_DATE_EPOCH when set.
    """
    from pathlib import Path

    from toolkit import clock
    from toolkit.slop_ops import export_markdown

    result = get_project(refresh=False).slop_query(limit=None, **filters)
    sf, entries = result.ledger, result.entries
    now = clock.now()  # SOURCE_DATE_EPOCH, else the real time: the site's clock too
    text = export_markdown(entries, title=title, now=now)
    _warn_problems(sf, full=False)
    if output is not None:
        from toolkit.safewrite import write_output

        write_output(Path(output), text.encode("utf-8"), keep=get_config().source_paths())
    if as_json:
        echo_json({"title": title or "Slop Ledger Export",
                   "generated_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "entries": len(entries), "output": output, "markdown": text})
    elif output is not None:
        click.echo(f"Wrote {len(entries)} entries to {output}")
    else:
        echo_text(text, nl=False)
