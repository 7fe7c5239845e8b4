"""Data commands: demo, load, status, schema, query."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from toolkit import argrules
from toolkit.cli._common import (
    PathValue,
    Seconds,
    echo_text,
    get_config,
    render_rows,
    rule_type,
)

if TYPE_CHECKING:
    from toolkit.export import Partition

FORMATS = ("table", "csv", "json", "jsonl", "markdown")


@click.command()
@click.argument("directory", type=PathValue(file_okay=False))
@click.option("--seed", type=int, default=7, show_default=True,
              help="Random seed: the same seed writes the same world.")
@click.option("--audit-rows", type=int, default=3000, show_default=True,
              help="Rows to write into the demo audit DB (at least 100).")
def demo(directory: str, seed: int, audit_rows: int) -> None:
    """Write a realistic demo world into DIRECTORY (which must be empty or absent).

    It holds a project with a Smith vault (both entry forms, both meta.yaml schemas, session
    logs, archive and backup copies, git history), a CodeSmith slop ledger and turn-snapshot
    side repo, and a nagi-ledger audit DB, plus a toolkit.yaml that points the toolkit at them.
    """
    from toolkit.demo import write_demo

    world = write_demo(Path(directory), seed=seed, audit_rows=audit_rows)
    click.echo(f"Demo world written to {world.root}")
    for key, value in world.counts.items():
        click.echo(f"  {key}: {value}")
    click.echo(f"Next: cd {shlex.quote(str(world.project))} && toolkit status")


@click.command()
@click.option("--full", is_flag=True, help="Re-read every source, even unchanged ones.")
def load(full: bool) -> None:
    """Load every source into the DuckDB store.

    Incremental: a source whose fingerprint has not changed is not read again, and audit rows
    already copied are not copied again. Exits 65 when a source is present but unreadable,
    75 when one is locked.
    """
    from toolkit.api import Project
    from toolkit.cli._common import progress_printer

    cfg = get_config()
    report = Project(cfg).refresh(full=full, progress=progress_printer())
    for r in report.results:
        state = "unchanged" if r.skipped else ("loaded" if r.found else "not found")
        change = f" ({r.change})" if r.change and not r.skipped else ""
        click.echo(f"{r.source:<10} {state:<10} {r.note}{change}")
    click.echo(f"Store: {cfg.db_path}")
    if report.errors:
        raise report.errors[0]


STATUS_WARNINGS = 50  # warnings `status` prints unless --all (a messy ledger has thousands)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True,
              help=f"Print every warning (without it, the first {STATUS_WARNINGS}).")
def status(as_json: bool, show_all: bool) -> None:
    """Show each source (where it was found or why not), rows per table, and warnings (the
    first 50 unless --all; --json lists them all)."""
    from toolkit.cli._common import echo_json, get_project
    from toolkit.display import visible

    cfg = get_config()
    with get_project() as project:
        sources = project.sources()
        counts = project.tables()
        problems = project.problems()
    if as_json:
        echo_json({"project": str(cfg.project_root), "store": str(cfg.db_path),
                   "sources": sources, "tables": counts,
                   "warnings": [{"source": p.source, "path": p.path, "line": p.line,
                                 "message": p.message} for p in problems]})
        return
    click.echo(f"Project: {cfg.project_root}")
    click.echo(f"Store:   {cfg.db_path}")
    click.echo("")
    click.echo("Sources:")
    for s in sources:
        mark = "found" if s["found"] else "missing"
        click.echo(f"  {s['source']:<10} {mark:<8} {s['location']}")
        if s["note"]:
            click.echo(f"  {'':<10} {'':<8} {s['note']}")
    click.echo("")
    click.echo("Tables:")
    # as wide as the longest name (ledger_entry_versions, one past a fixed 20, pushed its
    # count out of the column)
    width = max((len(t) for t in counts), default=0)
    for t, n in counts.items():
        click.echo(f"  {t:<{width}} {n:>9,}")
    click.echo("")
    if problems:
        click.echo(f"Warnings ({len(problems):,}):")
        shown = problems if show_all else problems[:STATUS_WARNINGS]
        for p in shown:
            click.echo(f"  {visible(str(p), single_line=True)}")
        if len(shown) < len(problems):
            click.echo(f"  ... and {len(problems) - len(shown):,} more (`toolkit status --all` "
                       "prints them all)")
    else:
        click.echo("Warnings: none")


@click.command()
@click.argument("table", required=False)
def schema(table: str | None) -> None:
    """Show the store's tables and views with their columns (or one TABLE's)."""
    from toolkit.cli._common import get_project
    from toolkit.errors import NotFoundError

    with get_project(quiet=True) as project:
        rows = project.columns()
        docs = project.table_docs()
    if table and table not in {r[0] for r in rows}:
        raise NotFoundError(f"no table or view named {table!r}",
                            hint="Run `toolkit schema` to list them")
    current = None
    for t, kind, col, typ in rows:
        if table and t != table:
            continue
        if t != current:
            if current is not None:
                click.echo("")
            doc = docs.get(t, "")
            click.echo(f"{t} ({kind}){': ' + doc if doc else ''}")
            current = t
        click.echo(f"  {col:<24} {typ}")


@click.command()
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output format. csv holds the values exactly, for other programs; it is not "
                   "made spreadsheet-safe (the site's CSV downloads are).")
@click.option("--max-rows", type=rule_type(argrules.MAX_ROWS), default=10_000, show_default=True,
              help="Stop after this many rows (a note says when rows were left out).")
@click.option("--timeout", type=Seconds(0.1, 3600), default=30.0, show_default=True,
              help="Seconds before the query is interrupted.")
@click.option("--memory-limit", default="1GB", show_default=True,
              help="Memory the query may use (DuckDB size, e.g. 500MB).")
def query(sql: str, fmt: str, max_rows: int, timeout: float, memory_limit: str) -> None:
    """Run one read-only SELECT against the store and print the rows.

    The query runs on a locked-down connection: no file access, no extensions, no settings
    changes, a memory limit and a timeout. Anything but a single SELECT (or a DESCRIBE,
    SHOW or SUMMARIZE, which DuckDB runs as one) is refused.
    """
    from toolkit.cli._common import get_project

    with get_project(quiet=True, memory_limit=memory_limit) as project:
        cols, rows, truncated = project.rows(sql, max_rows=max_rows, timeout=timeout)
    echo_text(render_rows(cols, rows, fmt))
    if truncated:
        click.echo(f"(stopped after {max_rows} rows; use --max-rows or LIMIT)", err=True)


@click.command()
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet",
              show_default=True)
@click.option("--out", "out", type=PathValue(file_okay=False), required=True,
              help="Folder to write into (shared by several projects).")
@click.option("--project-name", default=None,
              help="Partition name for this project, and the project whose actions it "
                   "holds (default: project_name in toolkit.yaml, else the project folder's "
                   "name).")
def export(fmt: str, out: str, project_name: str | None) -> None:
    """Export every table as a Parquet dataset partitioned by project.

    Each table is one dataset, OUT/<table>/project=<name>/part-0.parquet, with its columns
    and types in OUT/<table>/_schema.json, so Spark, Trino or DuckDB read one table across
    every project exported into OUT, e.g. spark.read.parquet("OUT/actions"). Only this
    project's partitions are replaced, each in one step; an unchanged one is not rewritten.
    The actions are those the site shows (site_scope): by default this project's and the
    unassigned ones, so projects sharing one audit DB do not repeat each other's.
    """
    from toolkit.cli._common import open_store
    from toolkit.export import export_parquet

    cfg = get_config()
    if project_name is not None:  # the partition's name and the actions' (site_scope)
        # stripped, as project_name: in toolkit.yaml is (a blank one is refused below)
        cfg = cfg.with_overrides(project_name=project_name.strip())
    with open_store(cfg, scoped=True) as store:
        parts = export_parquet(Path(out), [(cfg.project_name, store)])
    echo_export(parts, Path(out))


def echo_export(parts: list[Partition], out: Path) -> None:
    """Each project's tables (rows, written or unchanged), then a line for the project: the
    output of `toolkit export`, and of an export of several projects at once."""
    by_project: dict[str, list[Partition]] = {}
    for part in parts:
        by_project.setdefault(part.project, []).append(part)
    for name, mine in by_project.items():
        for part in mine:
            state = "written" if part.written else "unchanged"
            click.echo(f"{part.table:<24} {part.rows:>9,} rows  {state}")
        written = sum(p.written for p in mine)
        click.echo(f"Exported {name} into {out.expanduser().resolve()}: {len(mine)} tables, "
                   f"{written} written, {len(mine) - written} unchanged")
