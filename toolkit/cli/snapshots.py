"""`toolkit snapshots`: CodeSmith turn snapshots: list, what a turn changed, restore."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import click

from toolkit import argrules
from toolkit.cli._common import (
    PathValue,
    answered,
    echo_json,
    echo_text,
    get_config,
    rule_type,
)

if TYPE_CHECKING:
    from toolkit.api import Project


def _when(unix: int) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _label(text: str) -> str:
    from toolkit.display import visible

    return visible(text, single_line=True)


def _cfg(ctx: click.Context) -> Any:
    workspace = (ctx.find_root().obj or {}).get("_snap_workspace")
    return get_config(ctx, workspace=workspace) if workspace else get_config(ctx)


def _project(ctx: click.Context) -> Project:
    """The project of the workspace given with ``--workspace`` (not refreshed: snapshots are
    read from the side repository)."""
    from toolkit.api import Project

    return Project(_cfg(ctx))


@click.group(invoke_without_command=True)
@click.option("--workspace", type=PathValue(file_okay=False, exists=True), default=None,
              help="Workspace whose snapshots to use (default: the project root, or "
                   "`workspace:` in toolkit.yaml).")
@click.pass_context
def snapshots(ctx: click.Context, workspace: str | None) -> None:
    """CodeSmith turn snapshots of the workspace: list them (the default), show what a turn
    changed (`diff N`), restore one (`restore N`).

    Snapshots are numbered as CodeSmith's /restore numbers them: newest first, from 1.
    """
    root = ctx.find_root()
    if root.obj is None:
        root.obj = {}
    root.obj["_snap_workspace"] = workspace
    if workspace is not None:
        root.obj.pop("_config", None)
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_cmd)


@snapshots.command("list",
                   short_help="List snapshots, newest first, numbered from 1 (the default).")
@click.option("--limit", type=rule_type(argrules.LIMIT), default=10, show_default=True,
              help="Show at most this many (the newest), as /restore does.")
@click.option("--all", "show_all", is_flag=True, help="Show every snapshot.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def list_cmd(ctx: click.Context, limit: int = 10, show_all: bool = False,
             as_json: bool = False) -> None:
    """List snapshots, newest first, numbered from 1, with their time and label."""
    listing = _project(ctx).snapshots(limit=None if show_all else limit)
    if as_json:
        echo_json({"workspace": str(listing.workspace), "side_repo": str(listing.repo),
                   "total": listing.total,
                   "snapshots": [{"number": s.position, "sha": s.sha, "time": _when(s.time),
                                  "label": s.label, "kind": s.kind, "turn": s.turn,
                                  "key": s.key} for s in listing.snapshots]})
        return
    if not listing.snapshots:
        click.echo(f"No snapshots yet for {listing.workspace}.")
        return
    click.echo(f"Snapshots of {listing.workspace} (newest first; "
               "`toolkit snapshots restore N` to revert):")
    for s in listing.snapshots:
        click.echo(f"  #{s.position:<3} {s.sha[:8]}  {_when(s.time)}  {_label(s.label)}")
    if listing.total > len(listing.snapshots):
        click.echo(f"({len(listing.snapshots)} of {listing.total} shown; "
                   "`toolkit snapshots list --all` for every one)")


def _files_line(files: list[Any]) -> str:
    added = sum(f.added or 0 for f in files)
    deleted = sum(f.deleted or 0 for f in files)
    return f"{len(files)} file{'s' if len(files) != 1 else ''} changed, +{added} -{deleted}"


@snapshots.command("diff", short_help="What a turn changed: its files, lines and steps.")
@click.argument("number", type=int, required=False)
@click.option("--turn", "turn_seq", type=int, default=None,
              help="Pick the turn by its number in the labels (pre-turn:<n>) instead; the "
                   "newest such turn.")
@click.option("--patch", is_flag=True, help="Also print the unified diff.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def diff_cmd(ctx: click.Context, number: int | None, turn_seq: int | None, patch: bool,
             as_json: bool) -> None:
    """Show what a turn changed: the turn that snapshot NUMBER belongs to (as listed by
    `toolkit snapshots`), from its pre-turn to its post-turn snapshot, and step by step
    through the tool snapshots taken inside it."""
    from toolkit.errors import UsageError

    if (number is None) == (turn_seq is None):
        raise UsageError("give a snapshot NUMBER or --turn N (one of them)")
    d = _project(ctx).turn_diff(number, turn=turn_seq, patch=patch)

    def ref(s: Any) -> str:  # the label without its prompt snippet (shown in the title)
        return "empty tree" if s is None else f"#{s.position} {_label(s.label.partition(': ')[0])}"

    if as_json:
        echo_json({
            "turn": d.turn.turn, "snippet": d.turn.snippet, "notes": d.notes,
            "from": None if d.start is None else {"number": d.start.position,
                                                  "sha": d.start.sha, "label": d.start.label,
                                                  "time": _when(d.start.time)},
            "to": {"number": d.end.position, "sha": d.end.sha, "label": d.end.label,
                   "time": _when(d.end.time)},
            "files": [{"path": f.path, "status": f.status, "added": f.added,
                       "deleted": f.deleted} for f in d.files],
            "steps": [{"from": None if s.before is None else s.before.position,
                       "to": s.after.position,
                       "files": [{"path": f.path, "status": f.status, "added": f.added,
                                  "deleted": f.deleted} for f in s.files]} for s in d.steps],
            **({"patch": d.patch} if patch else {})})
        return
    title = f"Turn {d.turn.turn}" if d.turn.turn is not None else "Snapshot"
    click.echo(title + (f": {_label(d.turn.snippet)}" if d.turn.snippet else ""))
    start_time = f" ({_when(d.start.time)})" if d.start else ""
    click.echo(f"  from {ref(d.start)}{start_time} to {ref(d.end)} ({_when(d.end.time)})")
    for note in d.notes:
        click.echo(f"  note: {note}")
    click.echo(f"  {_files_line(d.files)}")
    if d.files:
        width = max(len(_label(f.path)) for f in d.files)
        click.echo("")
        for f in d.files:
            lines = "binary" if f.added is None else f"+{f.added} -{f.deleted}"
            click.echo(f"  {f.status:<2} {_label(f.path):<{width}}  {lines}")
    if len(d.steps) > 1:
        click.echo("")
        click.echo("Steps:")
        for s in d.steps:
            what = ", ".join(
                f"{_label(f.path)} ({'binary' if f.added is None else f'+{f.added} -{f.deleted}'})"
                for f in s.files) or "no changes"
            click.echo(f"  {ref(s.before)} -> {ref(s.after)}: {what}")
    if patch and d.patch:
        click.echo("")
        echo_text(d.patch.rstrip("\n"))  # file contents: control codes made visible on a tty


@snapshots.command("restore", short_help="Restore the workspace to snapshot N, as /restore does.")
@click.argument("number", type=int)
@click.option("--dry-run", is_flag=True, help="List what would change; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True,
              help="Restore even when the workspace's own git repository has uncommitted "
                   "changes or untracked files (they may be overwritten or deleted).")
@click.pass_context
def restore_cmd(ctx: click.Context, number: int, dry_run: bool, yes: bool, force: bool) -> None:
    """Restore the workspace to snapshot NUMBER (1 = newest), as CodeSmith's /restore does.

    Files are checked out from the snapshot, files the snapshot does not have are deleted
    (only files the snapshot repo tracks or would track: its excludes and your .gitignore
    are honoured; .git is never touched) and folders left empty are removed. The snapshot
    repo's HEAD does not move, so every snapshot stays restorable. Refused when your own git
    repository has uncommitted changes, unless --force.

    Nothing outside the workspace is touched: a symlink is replaced or deleted, never
    followed; a path below a symlinked folder that stays, or one git itself refuses (`..`,
    `.git`, an absolute name), is refused and listed, and the command then exits 1.
    """
    from toolkit.errors import RefusedError
    from toolkit.snapshot_ops import (
        apply_restore,
        plan_restore,
        refuse_if_dirty,
        refuse_if_unchangeable,
    )

    plan = plan_restore(_cfg(ctx), number)
    t = plan.target
    click.echo(f"Restore {plan.workspace} to snapshot #{t.position} ({t.sha[:8]} "
               f"{_label(t.label)}, {_when(t.time)})")

    def refusals(items: list[tuple[str, str]]) -> None:
        for p, why in items:
            click.echo(f"  refuse  {_label(p)}  ({_label(why)})")

    def refused_error(n: int, done: bool) -> RefusedError:
        return RefusedError(
            f"{n} path{'s' if n != 1 else ''} of snapshot #{t.position} refused (listed "
            "above); " + ("the rest was restored" if done else "nothing restored"),
            hint="Nothing outside the workspace was touched; each reason is listed above")

    if plan.nothing_to_do:
        if plan.refused:
            refusals(plan.refused)
            if dry_run:
                click.echo("Dry run: nothing changed.")
                return
            raise refused_error(len(plan.refused), False)
        click.echo("The workspace already matches this snapshot; nothing to do.")
        return
    refused_part = f", {len(plan.refused)} refused" if plan.refused else ""
    click.echo(f"  {len(plan.change)} to change, {len(plan.create)} to create, "
               f"{len(plan.delete)} to delete{refused_part} ({plan.unchanged} unchanged)")
    for word, paths in (("change", plan.change), ("create", plan.create),
                        ("delete", plan.delete)):
        for p in paths:
            click.echo(f"  {word:<6}  {_label(p)}")
    refusals(plan.refused)
    if dry_run:
        if plan.user_changes and not force:
            click.echo(f"Note: {plan.user_repo} has {len(plan.user_changes)} uncommitted "
                       "change(s); a real restore needs --force.")
        click.echo("Dry run: nothing changed.")
        return
    refuse_if_dirty(plan, force)
    refuse_if_unchangeable(plan)  # (before the question: it would be refused after it)
    # a "no" (or no answer) is the user's choice, not a failure: exit 0, as ledger prune's
    if not yes and not answered(lambda: click.confirm("Restore these files?")):
        click.echo("Restore cancelled. Nothing changed.")
        return
    result = apply_restore(plan, force=force)
    refusals(result.refused[len(plan.refused):])
    refused_part = f", {len(result.refused)} refused" if result.refused else ""
    click.echo(f"Restored snapshot #{t.position}: {result.written} file(s) written, "
               f"{result.deleted} deleted, {len(result.dirs_removed)} empty folder(s) removed"
               f"{refused_part}. The snapshot repo's HEAD is unchanged.")
    if result.refused:
        raise refused_error(len(result.refused), True)
