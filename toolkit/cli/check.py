"""``toolkit check``: run the built-in and toolkit.yaml checks over the store."""

from __future__ import annotations

import sys

import click

from toolkit.cli._common import OutputFile, Seconds, echo_json, get_config, warn_stale


@click.command()
@click.option("--select", "selected", multiple=True, metavar="NAME|TAG",
              help="Run only these checks (names or tags; repeat or separate with commas).")
@click.option("--skip", "skipped", multiple=True, metavar="NAME|TAG",
              help="Leave out these checks (names or tags).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--junit-xml", "junit", type=OutputFile(), default=None,
              metavar="FILE", help="Also write the results as JUnit XML (for CI) to FILE.")
@click.option("--timeout", type=Seconds(0.1, 3600), default=30.0, show_default=True,
              help="Seconds before one check's query is interrupted (an error of that check).")
@click.option("--list", "list_only", is_flag=True,
              help="List the checks (name, level, tags, what fails) without running them.")
def check(selected: tuple[str, ...], skipped: tuple[str, ...], as_json: bool,
          junit: str | None, timeout: float, list_only: bool) -> None:
    """Run checks over the records: tasks stuck past the retry limit, stale dispatches, old
    high-severity slop, meta.yaml counts, malformed entries, the ledger budget, secrets,
    interrupted turns, an unloadable slop ledger, and the checks in toolkit.yaml (`checks:`).

    Exits 0 when every error-level check passes, 1 when one fails or cannot run (warnings
    never fail the run), 2 for bad options or a bad `checks:` entry, 65 for a store that is
    not one.
    """
    from pathlib import Path

    from toolkit.api import Project
    from toolkit.checks import checks_for, run_configured, select
    from toolkit.checks.output import as_json as json_of
    from toolkit.checks.output import junit_xml, table
    from toolkit.errors import UsageError

    cfg = get_config()
    if junit and not Path(junit).absolute().parent.is_dir():  # before anything runs
        raise UsageError(f"folder {Path(junit).absolute().parent} does not exist; nothing "
                         "was run", hint="Create it first, or give --junit-xml another path")
    checks = select(checks_for(cfg.checks, path=cfg.config_file), selected, skipped)
    if list_only:
        # columns as wide as their longest value: a user's check may have a long name
        names = max((len(c.name) for c in checks), default=0)
        tags = max((len(",".join(c.tags)) for c in checks), default=0)
        for c in checks:
            click.echo(f"{c.name:<{names}} {c.level:<5} {','.join(c.tags):<{tags}} "
                       f"{c.description}".rstrip())
        return
    with Project(cfg) as project:  # refreshed, saying what it could not read, then closed
        project.refresh(hold=True)
        warn_stale(project.stale_sources())
    results = run_configured(cfg, checks, timeout=timeout)
    if junit:
        from toolkit.safewrite import write_output

        write_output(Path(junit), junit_xml(results), keep=cfg.source_paths())
    if as_json:
        echo_json(json_of(results))
    else:
        click.echo(table(results, root=cfg.project_root))
    if any(r.fails_run for r in results):
        sys.exit(1)
