"""Fleet commands: every project a user's agents work in (list, build-site, export)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from toolkit.cli._common import PathValue, echo_json, get_config, render_rows
from toolkit.display import visible

if TYPE_CHECKING:
    from toolkit.store import Store


@click.group()
@click.option("--fleet", "fleet_file", type=PathValue(dir_okay=False, path_type=Path),
              default=None,
              help="Fleet file: a YAML mapping whose projects: list holds folders (each a "
                   "path, or {name, path}). Default: $TOOLKIT_FLEET, else the nearest "
                   "toolkit-fleet.yaml at or above the current folder, else none.")
@click.option("--store", "store_path", type=PathValue(dir_okay=False, path_type=Path),
              default=None,
              help="The fleet store, a DuckDB file (default: $TOOLKIT_FLEET_DB, else "
                   "~/.cache/agent-ledger-toolkit/fleet.duckdb).")
@click.option("--full", is_flag=True, help="Read every project again, changed or not.")
@click.pass_context
def fleet(ctx: click.Context, fleet_file: Path | None, store_path: Path | None,
          full: bool) -> None:
    """Every project your agents work in, in one view.

    Projects come from Smith's index ($HOME/.smith/projects.json), from the fleet file, and
    from the project values of the shared records (nagi-ledger's actions, a project field on
    slop ledger entries). The audit DB and slop ledger are found as every command finds them
    (--audit-db, --slop, toolkit.yaml, environment, defaults). list and build-site refresh
    the fleet store first; a project whose vault did not change is not read again. export
    exports each project from its own store.
    """
    ctx.obj = {"fleet_file": fleet_file, "store": store_path, "full": full}


def _open() -> Any:
    from toolkit.fleet import default_store, find_fleet_file, open_fleet

    opts = click.get_current_context().obj
    env = dict(os.environ)
    fleet_file = opts["fleet_file"] or find_fleet_file(Path.cwd(), env)
    store = opts["store"] or default_store(env)
    opened = open_fleet(get_config(), store_path=Path(store).expanduser().resolve(),
                        fleet_file=fleet_file, env=env, full=opts["full"])
    for error in opened.errors:
        click.echo(visible(f"Warning: {error}", single_line=True), err=True)
    _echo_notes(opened.notes)
    return opened


@fleet.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the projects (name, path, status, vault, where each was "
                   "found, last session, last action, last slop change, last activity, "
                   "entries by confidence, open debt) and what the refresh read.")
def list_projects(as_json: bool) -> None:
    """List the projects, their folders and last activity.

    For each: its folder, its status (found; missing: the folder is gone, or the path is a
    file, as --json's note says; no folder: seen only in the records), whether its vault is
    found, and its last activity (the latest of its vault's last session, its last audit
    action and its last slop change)."""
    from toolkit.fleet import project_rows, records_names, shared_records_notes

    with _open() as opened:
        rows = project_rows(opened.store)
        notes = [*shared_records_notes(records_names(opened.store)), *_no_folder(rows)]
        if as_json:
            echo_json({"projects": rows, "read": opened.load.read,
                       "unchanged": opened.load.unchanged})
            _echo_notes(notes)
            return
    click.echo(render_rows(
        ("Project", "Path", "Status", "Vault", "Last activity"),
        [(r["name"], r["path"] or "-", r["status"], "found" if r["vault"] else "-",
          r["last_activity"] or "-") for r in rows], "table"))
    click.echo(f"{len(rows)} projects; read again: {len(opened.load.read)}, "
               f"unchanged: {len(opened.load.unchanged)}.", err=True)
    _echo_notes(notes)


def _no_folder(rows: list[dict[str, Any]]) -> list[str]:
    """The note for a fleet whose projects (``rows``, project_rows') have no folder."""
    from toolkit.fleet import find_fleet_file, no_folder_note

    if any(r["path"] for r in rows):
        return []
    env = dict(os.environ)
    fleet_file = click.get_current_context().obj["fleet_file"] or find_fleet_file(Path.cwd(), env)
    return [no_folder_note(env, fleet_file)]


def _echo_notes(notes: list[str]) -> None:
    for note in notes:
        click.echo(visible(note, single_line=True), err=True)


@fleet.command("build-site")
@click.option("--out", type=PathValue(file_okay=False, path_type=Path), required=True,
              help="Folder for the HTML site. The Markdown goes next to it, in <out>.build/.")
@click.option("--clean", is_flag=True,
              help="Delete the previous site and build folder first and build everything.")
@click.option("--build-time", default=None, metavar="TIME",
              help="Build time (ISO date/time or Unix seconds) for a reproducible site "
                   "(default: $SOURCE_DATE_EPOCH, else now).")
@click.option("--redact/--no-redact", "redact", default=False,
              help="Build from a redacted copy of the fleet store, as build-site --redact "
                   "does.")
def build_site(out: Path, clean: bool, build_time: str | None, redact: bool) -> None:
    """Build one site over every project.

    An overview with a card per project (entries by confidence, tasks over the retry limit,
    pending verdicts, open debt, last activity) linking to a page per project; knowledge
    that recurs across projects' ledgers (the same or near-same title); retries and verdicts
    by project, agent type and model; debt by project. Offline, escaped and built strict,
    like the project site."""
    from toolkit import clock
    from toolkit.config import home_dir
    from toolkit.fleet import project_rows, records_names, shared_records_notes
    from toolkit.fleet_report import build_fleet_site
    from toolkit.site import check_output_folder, output_folder

    when = clock.now(build_time)
    home = home_dir(os.environ)
    # a folder the build would refuse is refused before every project is loaded
    check_output_folder(output_folder(out))
    with _open() as opened:
        result = build_fleet_site(opened.store, out=out, home=home, clean=clean,
                                  build_time=when, redact=redact)
        load = opened.load
        _echo_notes([*shared_records_notes(records_names(opened.store)),
                     *_no_folder(project_rows(opened.store))])
    redacted = ", secrets redacted" if result.redacted else ""
    click.echo(f"Fleet site built ({result.mode}{redacted}) in {result.seconds:.1f} s: "
               f"{result.pages} pages, {len(result.written)} files written, "
               f"{result.rebuilt} pages rendered; projects read again: {len(load.read)}, "
               f"unchanged: {len(load.unchanged)}.")
    click.echo(f"Site:     {result.out}")
    click.echo(f"View it:  python -m http.server -d {shlex.quote(str(result.out))}")


@fleet.command("export")
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet",
              show_default=True)
@click.option("--out", type=PathValue(file_okay=False, path_type=Path), required=True,
              help="Folder to write into (shared by several developers or machines).")
def export(fmt: str, out: Path) -> None:
    """Export every project as Parquet datasets partitioned by project.

    Each project whose folder is found is exported from its own store (refreshed first, as
    `toolkit export` in that folder does), under the name the fleet gives it, into
    OUT/<table>/project=<name>/: the layout of `toolkit export`. A project's actions are
    those its site shows (site_scope: by default its own and the unassigned ones). A
    project whose folder is missing is skipped with a note; one that cannot be opened is
    reported and skipped, the others are exported, and the command then fails; so is one
    whose export is refused (a folder it would change that cannot be changed). Unchanged
    partitions are not rewritten. The fleet store is not used."""
    from contextlib import ExitStack

    from toolkit import config as config_mod
    from toolkit.cli._common import global_flags, open_store
    from toolkit.cli.data import echo_export
    from toolkit.errors import ToolkitError, one_error
    from toolkit.export import export_parquet
    from toolkit.fleet import (
        find_fleet_file,
        known_projects,
        missing_reason,
        no_folder_note,
        records_name,
        shared_records_notes,
    )

    opts = click.get_current_context().obj
    env = dict(os.environ)
    fleet_file = opts["fleet_file"] or find_fleet_file(Path.cwd(), env)
    flags = global_flags(db=False)  # each project keeps its own store
    errors: list[ToolkitError] = []
    names: list[tuple[str, str]] = []  # (fleet project, the name its records give it)
    notes: list[str] = []
    skipped = 0

    def refuse(name: str, error: ToolkitError) -> None:
        click.echo(visible(f"Error: project {name}: {error}", single_line=True), err=True)
        errors.append(error)

    with ExitStack() as stores:
        chosen: list[tuple[str, Store]] = []
        by_store: dict[Path, str] = {}
        for p in known_projects(env, fleet_file, notes):
            if p.path is None:
                continue
            why = missing_reason(p.path)
            if why is not None:
                click.echo(visible(f"Skipped {p.name}: {why} ({p.path}).", single_line=True),
                           err=True)
                skipped += 1
                continue
            try:
                # the partition is the fleet's name (p.name); the actions are those the
                # project's own site shows: of the name its records give it, as fleet list
                # and the fleet site count them
                cfg = config_mod.resolve(project=p.path, env=env, **flags)
                cfg = cfg.with_overrides(project_name=records_name(p, cfg))
                db = cfg.db_path.resolve()
                other = by_store.get(db)
                if other is not None:
                    raise ToolkitError(f"shares its store with project {other}",
                                       path=cfg.db_path,
                                       hint="Give each project its own store (unset "
                                            "TOOLKIT_DB, or set db: in its toolkit.yaml)")
                store = stores.enter_context(open_store(cfg, quiet=True, scoped=True,
                                                        full=opts["full"]))
            except (ToolkitError, OSError) as exc:  # (a folder it may not enter: OSError)
                refuse(p.name, one_error(exc))
                skipped += 1
                continue
            by_store[db] = p.name
            chosen.append((p.name, store))
            names.append((p.name, cfg.project_name))
        refused: list[tuple[str, ToolkitError]] = []
        parts = export_parquet(out, chosen, errors=refused) if chosen else []
    for name, error in refused:  # (in name order, as the projects are)
        refuse(name, error)
    echo_export(parts, out)
    click.echo(f"Projects: {len(chosen) - len(refused)} exported, "
               f"{skipped + len(refused)} skipped.", err=True)
    if not chosen and not skipped:
        notes.append(no_folder_note(env, fleet_file))
    _echo_notes([*notes, *shared_records_notes(names)])
    if errors:
        click.get_current_context().exit(errors[0].exit_code)
