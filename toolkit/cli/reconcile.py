"""``toolkit ledger reconcile``: the ledger's self-maintenance (library: toolkit.reconcile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from toolkit.cli._common import Seconds, get_config

if TYPE_CHECKING:
    from toolkit.reconcile import Report, Status


@click.command()
@click.option("--dry-run", is_flag=True,
              help="Show what would be merged, pruned and dropped (with a diff); change nothing.")
@click.option("--force", is_flag=True,
              help="Bypass the lock and the threshold check (emergency maintenance).")
@click.option("--status", "show_status", is_flag=True,
              help="Show the signals, thresholds, lock and whether a run would start; "
                   "change nothing.")
@click.option("--category", metavar="NAME",
              help="Reconcile one ledger file only: patterns, antipatterns, tools, edge-cases, "
                   "quirks.")
@click.option("--judge-command", metavar="CMD",
              help="Ask this command whether two entries cover the same lesson (the question "
                   "on stdin; it must answer 'YES: <merged title>' or 'NO'). Default: the "
                   "built-in conservative fuzzy judge, which needs no network.")
@click.option("--judge-timeout", type=Seconds(min=0.1), default=30.0,
              show_default=True, metavar="SECONDS", help="Time limit for each judge answer.")
@click.option("--max-judge-calls", type=click.IntRange(min=0), default=15, show_default=True,
              metavar="N", help="At most N questions to --judge-command per run.")
def reconcile(dry_run: bool, force: bool, show_status: bool, category: str | None,
              judge_command: str | None, judge_timeout: float, max_judge_calls: int) -> None:
    """Merge duplicate entries, prune stale ones, enforce token budgets - with a verified
    backup first (the Smith seed's "Ledger Self-Maintenance").

    Runs only when a threshold of .smith/config.json (ledger.reconcile.thresholds) is exceeded
    and the last run is older than minimum_hours_between_reconciles, unless --force. Every run
    is logged in ledger/reconcile-log.md (result OK, PARTIAL or FAILED); a failed write
    restores the files from the backup and is never retried automatically.

    Exit codes: 0 done or nothing needed, 1 failed (files restored), 2 bad option,
    65 bad config or .meta.json, 75 another reconcile holds the lock.
    """
    from toolkit import reconcile as rc
    from toolkit.errors import ToolkitError, UsageError

    if show_status and (dry_run or force):
        raise UsageError("--status cannot be combined with --dry-run or --force")
    cfg = get_config()
    if show_status:
        _render_status(rc.reconcile_status(cfg))
        return
    judge = rc.CommandJudge(judge_command, judge_timeout) if judge_command else rc.FuzzyJudge()
    report = rc.run_reconcile(cfg, dry_run=dry_run, force=force, category=category, judge=judge,
                              max_judge_calls=max_judge_calls, request=_request())
    _render_report(report)
    if report.result == "FAILED":
        where = "; the failure is logged in reconcile-log.md" if report.logged else ""
        restored = "; files restored from the backup" if any(
            n.startswith("files restored") for n in report.notes) else ""
        err = ToolkitError(f"reconcile failed: {report.error}{restored}{where}")
        err.exit_code = report.exit_code or 1
        raise err
    if report.log_error:
        raise ToolkitError(f"reconcile finished ({report.result}) but {report.log_error}")


def _request() -> str:
    """The command line as typed, for the vault session log."""
    import shlex
    import sys

    name = sys.argv[0].rsplit("/", 1)[-1] if sys.argv else ""
    if name.startswith("toolkit") or name == "__main__.py":
        return "toolkit " + shlex.join(sys.argv[1:])
    return click.get_current_context().command_path


def _t(text: str) -> str:
    from toolkit.display import visible

    return visible(text, single_line=True)


def _lists(report: Report) -> list[str]:
    out: list[str] = []
    if report.merges:
        out += ["", "Merges:"] + [
            f'- {m.file}: "{_t(m.title_a)}" + "{_t(m.title_b)}" \u2192 "{_t(m.merged_title)}"'
            for m in report.merges]
    if report.prunes:
        out += ["", "Prunes:"] + [
            f'- {p.file}: "{_t(p.title)}" ({p.confidence} confidence, age: {p.age_days} days)'
            + (" \u2192 demoted to low" if p.action == "demoted" else " \u2192 removed")
            for p in report.prunes]
    if report.drops:
        out += ["", "Budget drops:"] + [
            f'- {d.file}: "{_t(d.title)}" ({d.confidence} confidence, {d.reflections} '
            f"reflections; {d.reason})" for d in report.drops]
    if report.notes:
        out += ["", "Notes:"] + [f"- {_t(n)}" for n in report.notes]
    if report.warnings:
        out += ["", "Warnings:"] + [f"- {_t(w)}" for w in report.warnings]
    return out


def _render_report(report: Report) -> None:
    if report.disabled:
        click.echo("Reconcile is disabled (ledger.reconcile.enabled is false in "
                   ".smith/config.json); nothing done.")
        return
    if (report.result is None and not report.dry_run) or (
            report.dry_run and not report.decision.run):
        click.echo(report.decision.reason)
        return
    pruned = f"{len(report.prunes)} stale entries"
    if report.pruned_demoted:
        pruned += f" ({report.pruned_removed} removed, {report.pruned_demoted} demoted to low)"
    body = [f"- Trigger: {report.trigger}",
            f"- Merged: {len(report.merges)} entries",
            f"- Pruned: {pruned}",
            f"- Budget drops: {len(report.drops)} entries",
            f"- Token reduction: {report.tokens_before} \u2192 {report.tokens_after}"]
    if report.dry_run:
        click.echo("Dry run: nothing was changed. Ledger reconciliation would do:")
        click.echo("\n".join(body + _lists(report)))
        for diff in report.diffs.values():
            click.echo("")
            click.echo(_t_diff(diff), nl=False)
        if not report.diffs:
            click.echo("\nNo file would change.")
        return
    title = {"OK": "Ledger reconciliation complete.",
             "PARTIAL": "Ledger reconciliation complete, with warnings (PARTIAL).",
             "FAILED": "Ledger reconciliation FAILED."}[report.result or "FAILED"]
    click.echo(title)
    click.echo("\n".join([*body, f"- Backup: {report.backup or 'none'}", *_lists(report)]))
    click.echo(f"\nResult: {report.result}")


def _t_diff(diff: str) -> str:
    from toolkit.display import visible

    return "".join(visible(line.rstrip("\n")) + "\n" for line in diff.splitlines())


def _render_status(st: Status) -> None:
    s = st.signals
    click.echo(f"Reconcile status at {st.now:%Y-%m-%d %H:%M:%S} UTC")
    source = {"ok": "from .meta.json", "missing": ".meta.json missing: computed, counters 0"} \
        .get(s.meta_json_state, f".meta.json {s.meta_json_state}: computed, counters 0")
    click.echo("")
    click.echo(f"Signals ({source}; tokens and patterns always measured from the files):")
    tok = f"{s.estimated_tokens}"
    if s.recorded_tokens is not None and s.recorded_tokens != s.estimated_tokens:
        tok += f"  (.meta.json says {s.recorded_tokens})"
    pat = f"{s.total_patterns}"
    extra = []
    if s.title_lines != s.total_patterns:
        extra.append(f"{s.title_lines} **Title:** lines")
    if s.recorded_patterns is not None and s.recorded_patterns != s.total_patterns:
        extra.append(f".meta.json says {s.recorded_patterns}")
    if extra:
        pat += f"  ({'; '.join(extra)})"
    for name, value in (("estimated_tokens", tok), ("total_patterns", pat),
                        ("context_budget_violations", str(s.context_budget_violations)),
                        ("reinforcements_since_reconcile",
                         str(s.reinforcements_since_reconcile))):
        click.echo(f"  {name:<32}{value}")
    click.echo("")
    click.echo("Thresholds:")
    for c in st.checks:
        mark = "EXCEEDED" if c.exceeded else "ok"
        op = ">" if c.exceeded else "<="
        what = c.label.split(" > ")[0]
        click.echo(f"  [{mark:<8}] {what} {c.value} {op} {c.limit}")
    click.echo("")
    minimum = st.settings.minimum_hours_between_reconciles
    if s.last_reconcile is None:
        click.echo(f"Last reconcile: never (minimum interval {minimum:g} hours)")
    else:
        hours = (st.now - s.last_reconcile).total_seconds() / 3600
        click.echo(f"Last reconcile: {s.last_reconcile_raw} ({hours:.1f} hours ago; "
                   f"minimum interval {minimum:g} hours)")
    if s.lock is None:
        click.echo("Lock: free")
    else:
        state = "held" if st.lock_fresh else "stale, would be taken over"
        click.echo(f"Lock: {state} by {_t(s.lock.describe(st.lock_now or st.now))}")
    if not st.settings.enabled:
        click.echo("Would run: no (ledger.reconcile.enabled is false)")
    elif st.decision.run:
        click.echo(f"Would run: yes (trigger: {', '.join(st.decision.triggers)})"
                   + ("; but the lock is held now" if st.lock_fresh else ""))
    else:
        click.echo(f"Would run: no ({st.decision.reason})")
