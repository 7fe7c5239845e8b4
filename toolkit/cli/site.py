"""Site commands: build-site, serve."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from toolkit.cli._common import PathValue, get_config
from toolkit.display import visible

DEMO_MARKER = ".toolkit-demo-site"


def _progress() -> Any:
    """A rich progress bar on stderr when it is a terminal; None otherwise."""
    if not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                   console=Console(stderr=True), transient=True)
    tasks: dict[str, Any] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, update


def _prepare_demo(demo_dir: Path) -> Any:
    """Write a fresh demo world into demo_dir (replacing one this command wrote before)."""
    import shutil

    from toolkit.demo import write_demo
    from toolkit.errors import UsageError

    demo_dir = demo_dir.expanduser().resolve()
    if demo_dir.exists():
        if not demo_dir.is_dir():
            raise UsageError(f"{demo_dir} is a file, not a folder",
                             hint="Choose another --demo-dir")
        if any(demo_dir.iterdir()):
            if not (demo_dir / DEMO_MARKER).is_file():
                raise UsageError(f"{demo_dir} is not empty and is not a demo written by "
                                 "`toolkit build-site --demo`; refusing to replace it",
                                 hint="Choose another --demo-dir or remove the folder")
            shutil.rmtree(demo_dir)
    world = write_demo(demo_dir)
    (demo_dir / DEMO_MARKER).write_text(
        "Written by `toolkit build-site --demo`; the next --demo run replaces this folder.\n",
        encoding="utf-8")
    return world


def _demo_config(world: Any) -> Any:
    """The demo project's config (its toolkit.yaml), with the demo's pinned 'today' unless
    --today was given."""
    from toolkit import config as config_mod

    opts = click.get_current_context().find_root().obj or {}
    cfg = config_mod.resolve(project=world.project, today=opts.get("today"))
    return cfg if cfg.today is not None else cfg.with_overrides(today=world.today)


@click.command("build-site")
@click.option("--out", type=PathValue(file_okay=False, path_type=Path), default=None,
              help="Folder for the HTML site (default: .toolkit/site, or site_dir in "
                   "toolkit.yaml). The Markdown goes next to it, in <out>.build/.")
@click.option("--clean", is_flag=True,
              help="Delete the previous site and build folder first and build everything.")
@click.option("--build-time", default=None, metavar="TIME",
              help="Build time (ISO date/time or Unix seconds) for a reproducible site "
                   "(default: $SOURCE_DATE_EPOCH, else now). Also 'today' for ages, unless "
                   "--today is given.")
@click.option("--timings", is_flag=True, help="Also print how long each stage took.")
@click.option("--redact/--no-redact", "redact", default=None,
              help="Build from a redacted copy of the store: every page, file name, nav title, "
                   "download and search entry goes through the same redaction as handoff "
                   "reports (default: redact in toolkit.yaml, else no). Use it for a site "
                   "that others can read.")
@click.option("--analyses/--no-analyses", "analyses", default=None,
              help="Run the analysis notebooks into the Analyses section (default: analyses "
                   "in toolkit.yaml or $TOOLKIT_ANALYSES, else yes). --no-analyses builds "
                   "without starting a Jupyter kernel.")
@click.option("--scope", "scope", type=click.Choice(["project", "all"]), default=None,
              help="Whose audit actions the site shows: project (this project's, named by "
                   "project_name in toolkit.yaml or the folder, and the unassigned ones, "
                   "labelled) or all (every project's, with their project). Default: "
                   "site_scope in toolkit.yaml or $TOOLKIT_SITE_SCOPE, else project.")
@click.option("--demo", is_flag=True,
              help="Write a fresh demo world (see `toolkit demo`) and build its site.")
@click.option("--demo-dir", type=PathValue(file_okay=False, path_type=Path),
              default=Path("toolkit-demo"), show_default=True,
              help="Where --demo writes the demo world. A previous demo written there by "
                   "--demo is replaced; any other non-empty folder is refused.")
def build_site(out: Path | None, clean: bool, build_time: str | None, timings: bool,
               redact: bool | None, analyses: bool | None, scope: str | None, demo: bool,
               demo_dir: Path) -> None:
    """Build the browsable site: a static MkDocs Material site of everything in the store.

    The store is refreshed first. Pages: a dashboard; one page per ledger and slop entry;
    index pages by file, category, confidence, bucket, severity, status and owner; audit stats,
    the dispatch report, approaches and one page per task; recent actions; sessions; the turn
    snapshots, with one page per turn and its diff; warnings; and every table as CSV and JSON.

    Analyses: the bundled analysis notebooks, and those listed under notebooks: in
    toolkit.yaml, run in a Jupyter kernel against the project, a page each with its charts
    and findings. A notebook runs again only when the store's data or the notebook changed;
    one that fails gets a page naming the failing cell, and a warning. --no-analyses (or
    analyses: false) leaves the section out.

    The audit DB is shared by every project of a user: by default the site shows this
    project's actions and the unassigned ones, labelled; --scope all (or site_scope: all)
    shows every project's, each with its project.

    With --redact (or redact: true in toolkit.yaml) the site is built from a redacted copy
    of the store, so it can be shared like a handoff report; handoff and publish warn when
    the site they link to (site_url) was built without it.

    Only pages whose Markdown changed are rebuilt (the search index keeps every page); the
    same inputs and build time give byte-identical output. View it with `toolkit serve` or
    any static file server.
    """
    from toolkit import clock
    from toolkit.cli._common import open_store_checked
    from toolkit.site import build_paths, check_output_folder, output_folder
    from toolkit.site import build_site as build

    when = clock.now(build_time)
    if demo:
        if out is not None:
            # refused before the demo world is written (or a previous demo replaced)
            check_output_folder(output_folder(out))
        world = _prepare_demo(demo_dir)
        click.echo(f"Demo world written to {world.root}")
        cfg = _demo_config(world)
    else:
        cfg = get_config()
    if analyses is not None:
        cfg = cfg.with_overrides(analyses=analyses)
    if scope is not None:
        cfg = cfg.with_overrides(site_scope=scope)
    # a folder the build would refuse is refused before the store is loaded and checked
    check_output_folder(build_paths(cfg, out)[0], "--out" if out else "site_dir")
    bar, update = _progress()
    # the checks count ages to the site's "today" (its build time's day, unless --today)
    store, checks = open_store_checked(cfg.with_overrides(today=clock.today(cfg.today, when)))
    with store:
        if bar is not None:
            with bar:
                result = build(cfg, store, out=out, clean=clean, build_time=when,
                               progress=update, redact=redact, checks=checks)
        else:
            result = build(cfg, store, out=out, clean=clean, build_time=when, redact=redact,
                           checks=checks)
    removed = f", {len(result.removed)} removed" if result.removed else ""
    redacted = ", secrets redacted" if result.redacted else ""
    click.echo(f"Site built ({result.mode}{redacted}) in {result.seconds:.1f} s: "
               f"{result.pages} pages, "
               f"{len(result.written)} files written{removed}, {result.rebuilt} pages rendered, "
               f"{result.search_docs} search entries.")
    if result.analyses_run or result.analyses_cached:
        click.echo(f"Analyses: {len(result.analyses_run)} notebooks run, "
                   f"{len(result.analyses_cached)} unchanged (data and notebook as last built)"
                   + (f", {len(result.analyses_failed)} failed" if result.analyses_failed
                      else ""))
    for failure in result.analyses_failed:
        click.echo(f"Warning: analysis {visible(failure, single_line=True)}", err=True)
    if timings:
        click.echo("Stages:   " + ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items()))
    click.echo(f"Site:     {result.out}")
    click.echo(f"Markdown: {result.build_dir / 'docs'}")
    # commands to paste into a shell: a folder with a space or a quote is quoted
    where = f" --project {shlex.quote(str(cfg.project_root))}" if demo else ""
    site = shlex.quote(str(result.out))
    out_opt = f" --out {site}" if out is not None else ""
    click.echo(f"View it:  toolkit{where} serve{out_opt}   "
               f"(or: python -m http.server -d {site})")


@click.command()
@click.option("--out", type=PathValue(file_okay=False, path_type=Path), default=None,
              help="The site folder to serve (default: .toolkit/site, or site_dir in "
                   "toolkit.yaml).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (the default is reachable from this machine only).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--build/--no-build", "rebuild", default=True, show_default=True,
              help="Rebuild the site (incrementally) before serving.")
def serve(out: Path | None, host: str, port: int, rebuild: bool) -> None:
    """Preview the site locally: rebuild it if needed, then serve it until Ctrl-C."""
    from toolkit.errors import Terminated
    from toolkit.site import build_paths, make_server

    cfg = get_config()
    if rebuild:
        from toolkit.cli._common import open_store_checked
        from toolkit.site import build_site as build
        from toolkit.site import check_output_folder

        # a folder the build would refuse is refused before the store is loaded and checked
        check_output_folder(build_paths(cfg, out)[0], "--out" if out else "site_dir")
        store, checks = open_store_checked(cfg)
        with store:
            result = build(cfg, store, out=out, checks=checks)
        click.echo(f"Site built ({result.mode}) in {result.seconds:.1f} s.")
    site, _ = build_paths(cfg, out)
    server = make_server(site, host, port)
    h, p = server.server_address[:2]
    click.echo(f"Serving {site} at http://{h}:{p}/  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except Terminated:
        raise  # SIGTERM (kill, a service manager): "Terminated." and 143, as every command
    except KeyboardInterrupt:  # Ctrl-C: the way to stop it that the line above names
        click.echo("Stopped.")
    finally:
        server.server_close()
