"""``toolkit ledger``: review and curate the Smith Ledger, as the plugin's ``/smith-ledger`` does.

Every command parses its options, makes one call into :mod:`toolkit.ledger_ops` and renders the
result (a table on a terminal, JSON with ``--json``). Untrusted text (titles, entry bodies) is
shown with invisible and control characters escaped (:func:`toolkit.display.visible`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shlex
import sys
from typing import Any

import click

from toolkit import argrules
from toolkit.cli._common import (
    OutputFile,
    echo_json,
    echo_text,
    get_config,
    get_project,
    rule_type,
    table_text,
    yes_or_no,
)

# Subcommands written in other modules, imported on first use; listed only when their module
# exists, so `toolkit ledger --help` works before they land.
LAZY: dict[str, tuple[str, str]] = {
    "history": ("toolkit.cli.history:history",
                "How entries changed over time (the vault's git history; --all: copies)."),
    "reconcile": ("toolkit.cli.reconcile:reconcile",
                  "Merge duplicates, prune stale entries, enforce token budgets."),
}

FILE_HELP = "patterns, antipatterns, tools (tool-preferences), edge-cases, quirks (project-quirks)"


class LedgerGroup(click.Group):
    """The ledger group: its own commands plus the lazily imported ones of :data:`LAZY`."""

    def _lazy_available(self) -> list[str]:
        out = []
        for name, (target, _) in LAZY.items():
            module = target.split(":")[0]
            try:
                if importlib.util.find_spec(module) is not None:
                    out.append(name)
            except (ImportError, ValueError):
                continue
        return out

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy_available()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None or cmd_name not in LAZY:
            return cmd
        module, attr = LAZY[cmd_name][0].split(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY and name not in self.commands:
                rows.append((name, LAZY[name][1]))
            else:
                cmd = self.commands[name]
                rows.append((name, cmd.get_short_help_str(limit=formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# --------------------------------------------------------------------------- helpers


def _request() -> str:
    """The command line as typed, for the vault session log."""
    base = os.path.basename(sys.argv[0]) if sys.argv else ""
    if base in ("toolkit", "__main__.py") or base.startswith("toolkit"):
        return "toolkit " + shlex.join(sys.argv[1:])
    ctx = click.get_current_context()
    parts = [ctx.command_path]
    for key, value in ctx.params.items():
        if value in (None, False) or key == "as_json":
            continue
        parts.append(shlex.quote(str(value)) if value is not True else f"--{key}")
    return " ".join(parts)


def _notes(notes: list[str]) -> None:
    from toolkit.display import visible

    for note in notes:
        click.echo(f"note: {visible(note, single_line=True)}", err=True)


def _json_option(func: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print the result as JSON (for scripts).")(func)


def _pick_options(func: Any) -> Any:
    func = click.option("--file", "file_", metavar="FILE",
                        help=f"Only entries of this file: {FILE_HELP}.")(func)
    func = click.option("--index", type=rule_type(argrules.INDEX), metavar="N",
                        help="When several entries match, act on the N-th one listed.")(func)
    return func


def _ambiguous(exc: Any, as_json: bool = False) -> None:
    """The seed's listing of several matches (on stdout), before the error line; with
    ``--json`` the same candidates as JSON (``--index`` takes their ``index``), so a script
    reading stdout learns what to choose from."""
    from toolkit.display import visible
    from toolkit.ledger_ops import short_line

    if as_json:
        echo_json({"error": "ambiguous", "query": exc.query, "matches": [
            {"index": i, "title": e.title, "file": e.file_name, "line": e.line,
             "confidence": e.confidence} for i, e in enumerate(exc.matches, 1)]})
        return
    click.echo(f'Multiple entries match "{visible(exc.query, single_line=True)}":\n')
    for i, e in enumerate(exc.matches, 1):
        click.echo(f"{i}. {short_line(e)}")
    click.echo("")


def _print_diff(diff: str) -> None:
    from toolkit.display import visible

    click.echo("\n".join(visible(line) for line in diff.splitlines()))


# --------------------------------------------------------------------------- the group


@click.group(cls=LedgerGroup, invoke_without_command=True)
@_json_option
@click.pass_context
def ledger(ctx: click.Context, as_json: bool) -> None:
    """Review and curate the Smith Ledger (.smith/vault/ledger/), as /smith-ledger does.

    Without a subcommand: the dashboard (last reflection, totals, entries per file by
    confidence, top high-confidence entries).

    Mutations (prune, promote, demote, reset) go through one editor: only the changed entry's
    bytes change, a verified backup is made first, writes are atomic and locked, and --dry-run
    shows the diff without writing anything.
    """
    if ctx.invoked_subcommand is not None:
        return
    d = get_project(refresh=False).ledger_dashboard(request=_request())
    if as_json:
        echo_json(d.to_dict())
        return
    _render_dashboard(d)


def _render_dashboard(d: Any) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from toolkit.display import shown, visible

    if not d.found:
        click.echo("No Ledger found.")
        click.echo("Run `/smith-reflect` after a workflow to start building the Ledger,")
        click.echo("or run `/smith` to initialize the vault structure.")
        return
    click.echo("SMITH LEDGER — Dashboard")
    click.echo("========================\n")
    click.echo("Last reflection: "
               + ("never" if d.never_reflected else shown(d.last_reflection)))
    click.echo(f"Total reflections: {shown(d.total_reflections)}")
    total = f"Total entries: {d.total_entries}"
    if d.meta_total_entries is not None and d.meta_total_entries != d.total_entries:
        total += f" (meta.yaml says {d.meta_total_entries})"
    click.echo(total + "\n")
    unknown = any(f.unknown for f in d.files)
    table = Table(box=box.MARKDOWN, show_edge=True, pad_edge=True)
    table.add_column("File")
    for col in ("Entries", "High", "Medium", "Low") + (("[???]",) if unknown else ()):
        table.add_column(col, justify="right")
    for f in d.files:
        if not f.exists:
            table.add_row(Text(f"{f.name} (missing)"), "-", "-", "-", "-",
                          *(["-"] if unknown else []))
            continue
        if f.error:
            table.add_row(Text(f"{f.name} (unreadable)"), "-", "-", "-", "-",
                          *(["-"] if unknown else []))
            continue
        table.add_row(Text(f.name), str(f.entries), str(f.high), str(f.medium), str(f.low),
                      *([str(f.unknown)] if unknown else []))
    click.echo(table_text(table) + "\n")
    if d.top:
        click.echo("Top High-Confidence Patterns:")
        for i, e in enumerate(d.top, 1):
            click.echo(f"{i}. {shown(e.title)} — {shown(e.category)} "
                       f"({e.reflections} observation{'s' if e.reflections != 1 else ''})")
    else:
        click.echo("No high-confidence entries yet.")
    if d.warnings:
        click.echo("", err=True)
        for w in d.warnings:
            click.echo(f"warning: {visible(str(w), single_line=True)}", err=True)


# --------------------------------------------------------------------------- read commands


def _warn_unreadable(problem: Any) -> None:
    """A ``warning:`` line on stderr for a ledger file that could not be read (junk bytes,
    not UTF-8): its entries are in no answer, and an empty answer must not look like a
    ledger without them (FAULTS A6). The dashboard shows the same lines."""
    from toolkit.display import visible

    click.echo(f"warning: {visible(str(problem), single_line=True)}", err=True)


@ledger.command("list",
                short_help="List entries by file: [confidence] title, category, observations.")
@click.option("--category", type=rule_type(argrules.CATEGORY),
              help="Only entries of this category.")
@click.option("--confidence", type=rule_type(argrules.CONFIDENCE),
              help="Only entries of this confidence.")
@click.option("--file", "file_", metavar="FILE", help=f"Only this file: {FILE_HELP}.")
@_json_option
def list_cmd(category: str | None, confidence: str | None, file_: str | None,
             as_json: bool) -> None:
    """List entries grouped by file: [confidence] Title — Category (N observations, last:
    date). Filters combine (AND)."""
    from toolkit.display import visible
    from toolkit.ledger_ops import entry_line

    result = get_project(refresh=False).ledger_list(category=category, confidence=confidence,
                                                    file=file_, request=_request())
    for summary, _ in result.groups:
        if summary.problem is not None:
            _warn_unreadable(summary.problem)
    if as_json:
        echo_json(result.to_dict())
        return
    if result.count == 0 and not any(summary.error for summary, _ in result.groups):
        click.echo("No entries match the given filters.")
        return
    first = True
    for summary, entries in result.groups:
        if summary.error:  # its entries are unknown, filtered or not (the dashboard's mark)
            click.echo(("" if first else "\n") + f"--- {summary.name} --- (unreadable: "
                       f"{visible(summary.error, single_line=True)})")
            first = False
            continue
        if not summary.exists:
            if not result.filters:
                click.echo(("" if first else "\n") + f"--- {summary.name} --- "
                           f"(missing: {summary.name})")
                first = False
            continue
        if not entries:
            continue
        click.echo(("" if first else "\n") + f"--- {summary.name} ---")
        first = False
        for e in entries:
            click.echo(entry_line(e))


@ledger.command(short_help="Show one entry in full.")
@click.argument("title", type=rule_type(argrules.TITLE))
@_pick_options
@_json_option
def show(title: str, index: int | None, file_: str | None, as_json: bool) -> None:
    """Show one entry in full. TITLE is a case-insensitive part of the title; when several
    entries match they are listed and none is shown (choose with --index)."""
    from toolkit.ledger_ops import AmbiguousMatchError

    try:
        r = get_project(refresh=False).ledger_entry(title, index=index, file=file_,
                                                    request=_request(),
                                                    unreadable=_warn_unreadable)
    except AmbiguousMatchError as exc:
        _ambiguous(exc, as_json)
        raise
    if as_json:
        echo_json(r.to_dict())
        return
    _render_entry(r.entry)


def _render_entry(e: Any) -> None:
    from toolkit.display import shown, visible

    click.echo(shown(e.title))
    click.echo(f"{e.file_name}, line {e.line} (form {e.form})\n")
    for label, value in (("Date", e.date), ("Category", e.category),
                         ("Confidence", e.confidence), ("Observations", e.reflections),
                         ("Source reflections", e.source_reflections)):
        click.echo(f"{label}: {shown(value)}")
    for label, value in (("Context", e.context), ("Pattern", e.pattern),
                         ("Evidence", e.evidence), ("Related", e.related)):
        click.echo(f"\n{label}:")
        text = visible(value) if value else "[???]"
        click.echo("\n".join("  " + line for line in text.splitlines()))
    if e.problems:
        click.echo("\nProblems: " + "; ".join(visible(p, single_line=True) for p in e.problems))


@ledger.command(short_help="Search every ledger line; each match shown with its entry.")
@click.argument("query")
@_json_option
def search(query: str, as_json: bool) -> None:
    """Search every ledger line (case-insensitive); each match with its entry, file,
    confidence and two lines of context."""
    from toolkit.display import shown, visible

    hits = get_project(refresh=False).ledger_search_lines(query, request=_request(),
                                                          unreadable=_warn_unreadable)
    if as_json:
        echo_json({"query": query, "results": [h.to_dict() for h in hits]})
        return
    if not hits:
        click.echo(f'No results for "{visible(query, single_line=True)}".')
        return
    for n, h in enumerate(hits):
        title = f'"{shown(h.title)}" [{shown(h.confidence)}]' if h.entry_line else "(header)"
        click.echo(("" if n == 0 else "\n") + f"--- {h.file}: {title} ---")
        prev = None
        click.echo("  ...")
        for line_no, text, is_match in h.lines:
            if prev is not None and line_no != prev + 1:
                click.echo("  ...")
            click.echo(("> " if is_match else "  ") + visible(text))
            prev = line_no
        click.echo("  ...")


@ledger.command(
    short_help="Export the whole ledger (meta.yaml and the five files) as Markdown.")
@click.option("--output", "-o", type=OutputFile(), metavar="FILE",
              help="Write the export to FILE (atomically) instead of printing it.")
@click.option("--no-redact", is_flag=True,
              help="Keep secrets as they are (the export is redacted by default).")
@_json_option
def export(output: str | None, no_redact: bool, as_json: bool) -> None:
    """Export the whole ledger as one Markdown document: meta.yaml in a YAML block, then
    patterns, antipatterns, tool-preferences, edge-cases and project-quirks."""
    from pathlib import Path

    from toolkit.ledger_ops import export as export_ledger

    cfg = get_config()
    text = export_ledger(cfg.vault, output=Path(output) if output else None,
                         redact=not no_redact, max_bytes=cfg.max_file_bytes,
                         request=_request(), keep=cfg.source_paths())
    if as_json:
        echo_json({"output": output, "redacted": not no_redact, "text": text})
    elif output:
        click.echo(f"Exported the Ledger to {output}")
    else:
        echo_text(text, nl=False)


# --------------------------------------------------------------------------- mutations


def _mutation_options(func: Any) -> Any:
    func = click.option("--force", is_flag=True,
                        help="Override a fresh .meta.json lock of another run, and edit "
                             "hard-linked files.")(func)
    func = click.option("--dry-run", is_flag=True,
                        help="Print the unified diff; change nothing.")(func)
    return func


@ledger.command(short_help="Remove stale low-confidence entries, demote stale medium ones.")
@click.option("--auto", is_flag=True, help="Prune without asking and report the result.")
@click.option("--yes", "-y", is_flag=True, help="Show the candidates, then prune without asking.")
@_mutation_options
@_json_option
def prune(auto: bool, yes: bool, dry_run: bool, force: bool, as_json: bool) -> None:
    """Remove low-confidence entries older than the low limit (default 30 days) and demote
    medium ones older than the medium limit (default 90 days) to low, keeping their Date.

    Limits come from meta.yaml `config:` or .smith/config.json `ledger.pruning`. Asks before
    acting unless --auto or --yes.
    """
    from toolkit.ledger_ops import prune as prune_ledger

    if as_json and not (auto or yes or dry_run):
        raise click.UsageError("--json needs --auto, --yes or --dry-run (it cannot ask)")
    cfg = get_config()
    shown_plan: list[Any] = []

    def confirm(plan: Any) -> bool:
        shown_plan.append(plan)
        _render_candidates(plan)
        return yes or yes_or_no(plan.question())

    result = prune_ledger(cfg.vault, today=cfg.today_date(), dry_run=dry_run, force=force,
                          confirm=None if (auto or as_json) else confirm,
                          max_bytes=cfg.max_file_bytes, request=_request())
    _notes(result.notes)
    if as_json:
        echo_json(result.to_dict())
        return
    if result.status == "clean":
        click.echo("No prune candidates found. Ledger is clean.")
    elif result.status == "dry-run":
        _render_candidates(result.plan)
        click.echo("")
        _print_diff(result.diff)
        click.echo("\nDry run: nothing written.")
    elif result.status == "cancelled":
        click.echo("Prune cancelled. No changes made.")
    elif auto:
        click.echo(f"Auto-prune complete: {len(result.plan.removals)} removed, "
                   f"{len(result.plan.demotions)} demoted. Total entries: {result.total_entries}")
    else:
        click.echo(f"Pruned: {len(result.plan.removals)} removed, "
                   f"{len(result.plan.demotions)} demoted. Total entries: {result.total_entries}")


def _render_candidates(plan: Any) -> None:
    from toolkit.display import shown

    click.echo("SMITH LEDGER — Prune Candidates")
    click.echo("================================\n")
    n = 0
    if plan.removals:
        click.echo(f"Entries to REMOVE (low confidence, older than {plan.limits['low']} days):")
        for c in plan.removals:
            n += 1
            click.echo(f'  {n}. "{shown(c.entry.title)}" — {c.entry.file_name} '
                       f"(dated {c.entry.date})")
        click.echo("")
    if plan.demotions:
        click.echo(f"Entries to DEMOTE to low (medium confidence, older than "
                   f"{plan.limits['medium']} days):")
        for c in plan.demotions:
            n += 1
            click.echo(f'  {n}. "{shown(c.entry.title)}" — {c.entry.file_name} '
                       f"(dated {c.entry.date})")
        click.echo("")
    r, d = len(plan.removals), len(plan.demotions)
    click.echo(f"Total: {r} removal{'s' if r != 1 else ''}, {d} demotion{'s' if d != 1 else ''}")


def _confidence_command(direction: str) -> Any:
    verb = "Raise" if direction == "promote" else "Lower"
    steps = "low -> medium -> high" if direction == "promote" else "high -> medium -> low"

    @click.argument("title", type=rule_type(argrules.TITLE))
    @_pick_options
    @_mutation_options
    @_json_option
    def command(title: str, index: int | None, file_: str | None, dry_run: bool, force: bool,
                as_json: bool) -> None:
        from toolkit import ledger_ops

        cfg = get_config()
        func = ledger_ops.promote if direction == "promote" else ledger_ops.demote
        try:
            r = func(cfg.vault, title, today=cfg.today_date(), index=index, file=file_,
                     dry_run=dry_run, force=force, max_bytes=cfg.max_file_bytes,
                     request=_request())
        except ledger_ops.AmbiguousMatchError as exc:
            _ambiguous(exc, as_json)
            raise
        _notes(r.notes)
        if as_json:
            echo_json(r.to_dict())
            return
        if dry_run and r.changed:
            _print_diff(r.diff)
            click.echo(f"\nDry run: nothing written. Would {direction} "
                       f'"{r.message.split(chr(34), 2)[1]}" from {r.old} to {r.new} confidence.')
            return
        click.echo(r.message)

    command.__doc__ = (f"{verb} one entry's confidence one level ({steps}). TITLE is a "
                       "case-insensitive part of the title; when several entries match they "
                       "are listed and none is changed (choose with --index). Only the "
                       "entry's Confidence line changes.")
    return command


ledger.command("promote")(_confidence_command("promote"))
ledger.command("demote")(_confidence_command("demote"))


@ledger.command(short_help="Archive the ledger and start again from empty templates.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_mutation_options
@_json_option
def reset(yes: bool, dry_run: bool, force: bool, as_json: bool) -> None:
    """Archive meta.yaml and the five ledger files to ledger/archive/YYYY-MM-DD-HHMMSS/ and
    start fresh with empty templates. Asks before acting unless --yes."""
    from toolkit.ledger_ops import reset as reset_ledger

    if as_json and not (yes or dry_run):
        raise click.UsageError("--json needs --yes or --dry-run (it cannot ask)")
    cfg = get_config()

    def confirm(plan: Any) -> bool:
        if yes or dry_run:
            return True
        click.echo("This will archive the current Ledger and start fresh.")
        click.echo("All existing entries will be preserved in the archive.")
        return yes_or_no("Are you sure?")

    result = reset_ledger(cfg.vault, today=cfg.today_date(), dry_run=dry_run, force=force,
                          confirm=confirm, max_bytes=cfg.max_file_bytes, request=_request())
    _notes(result.notes)
    if as_json:
        echo_json(result.to_dict())
        return
    if result.status == "cancelled":
        click.echo("Reset cancelled. Ledger unchanged.")
        return
    rel = (os.path.relpath(result.archive_dir, cfg.project_root)
           if result.archive_dir else "archive/")
    if result.status == "dry-run":
        _print_diff(result.diff)
        click.echo(f"\nDry run: nothing written. Would archive "
                   f"{', '.join(result.moved) or 'nothing'} to {rel}/")
        return
    click.echo(f"Ledger archived to {rel}/")
    click.echo("Fresh Ledger initialized with empty templates.")
