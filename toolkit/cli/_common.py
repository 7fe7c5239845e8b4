"""Helpers shared by the command modules: the resolved config, the store, output formats."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from toolkit.api import Project
    from toolkit.argrules import OneOf, Whole, Words
    from toolkit.checks import Result
    from toolkit.config import Config
    from toolkit.store import StaleSource, Store


def rule_type(rule: Whole | OneOf | Words) -> click.ParamType:
    """The option type of a value the Python API's argument takes too (``toolkit.argrules``):
    click's range or choice, so the option's help and message are click's own."""
    from toolkit.argrules import OneOf as OneOfRule
    from toolkit.argrules import Whole as WholeRule

    if isinstance(rule, WholeRule):
        return click.IntRange(rule.low, rule.high)
    if isinstance(rule, OneOfRule):
        return click.Choice(rule.values, case_sensitive=False)
    return _RuleText(rule)


class _RuleText(click.ParamType):
    """Text a rule refuses when blank (:func:`rule_type`)."""

    name = "text"

    def __init__(self, rule: Words) -> None:
        self.rule = rule

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not self.rule.fits(str(value)):
            self.fail(f"{value!r} must be {self.rule.describe()}", param, ctx)
        return value


class PathValue(click.Path):
    """``click.Path`` that refuses one of the command's own option names as its value: click
    takes the word after a path option as its value, so ``--out --help`` (the user asking for
    help) would make a folder named ``--help``. A file really named so is written ``./--help``.

    It also refuses a path that is not UTF-8 (bytes of another encoding, which Python hands
    on as lone surrogates): the store (DuckDB), the site (MkDocs' settings) and the files the
    toolkit writes name their paths as UTF-8 text. Refused here, before the command starts:
    such a path used to fail half-way, after a folder or a whole file had been written."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith("-") and value in _option_names(ctx):
            self.fail(f"{value!r} is one of this command's options, not a path: give the path "
                      f"right after the option (or write ./{value} for one named so)", param, ctx)
        from toolkit.display import visible
        from toolkit.textio import lone_surrogate

        if isinstance(value, (str, bytes)) and lone_surrogate(os.fsdecode(value)):
            self.fail(f"{visible(os.fsdecode(value), single_line=True)} is not a UTF-8 path "
                      "(it holds bytes of another encoding): the toolkit's store, site and "
                      "files name their paths as UTF-8; rename it or give another path",
                      param, ctx)
        return super().convert(value, param, ctx)


class Seconds(click.FloatRange):
    """A number of seconds in a range (``click.FloatRange``) that is a number: NaN passes the
    range's checks (every comparison with it is false), and a timeout of NaN interrupted a
    query at once and let a check run with none."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        import math

        seconds = super().convert(value, param, ctx)
        if math.isnan(seconds):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


def answered(ask: Callable[[], bool]) -> bool:
    """``ask()``'s answer to a yes/no question; no answer at all (end of input: click's
    Abort) is a no, on a line of its own (the question's line was left open)."""
    try:
        return ask()
    except click.Abort:
        click.echo()
        return False


def yes_or_no(question: str) -> bool:
    """``question (yes/no)`` asked as Smith's commands ask it: yes (or y) is a yes; anything
    else, or no answer, a no."""
    return answered(lambda: click.prompt(question + " (yes/no)", default="no",
                                         show_default=False, prompt_suffix=" ")
                    .strip().lower() in ("yes", "y"))


def _option_names(ctx: click.Context | None) -> set[str]:
    """The option names (and help options) of ``ctx``'s command and the groups above it."""
    names: set[str] = set()
    while ctx is not None:
        names.update(ctx.help_option_names)
        for p in ctx.command.params:
            if isinstance(p, click.Option):
                names.update(p.opts)
                names.update(p.secondary_opts)
        ctx = ctx.parent
    return names


class OutputFile(PathValue):
    """The file an ``--output``/``-o`` or ``--junit-xml`` option names: ``click.Path`` for a
    file, that also refuses a name ending in ``/`` (a folder the user meant: the slash would
    be dropped on the way and a file of that name written) and ``-`` (standard output, by
    the usual convention, which would become a file named ``-``)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.endswith("/"):
            self.fail(f"{value!r} names a folder (it ends with /); give a file name", param, ctx)
        if value == "-":  # the usual "standard output", which would become a file here
            self.fail("'-' would be a file named '-'; leave the option out to print to "
                      "standard output (or give /dev/stdout), or write ./- for such a file",
                      param, ctx)
        return super().convert(value, param, ctx)


def get_config(ctx: click.Context | None = None, **overrides: Any) -> Config:
    """The Config for this invocation (global options > toolkit.yaml > env > defaults)."""
    from toolkit import config as config_mod

    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    opts = dict(root.obj or {})
    cached = opts.get("_config")
    if cached is not None and not overrides:
        return cached
    flags = global_flags(ctx)
    flags.update({k: v for k, v in overrides.items() if v is not None})
    cfg = config_mod.resolve(project=opts.get("project"), config_file=opts.get("config_file"),
                             **flags)
    if not overrides and root.obj is not None:
        root.obj["_config"] = cfg
    return cfg


def get_project(*, refresh: bool = True, quiet: bool = False, memory_limit: str | None = None
                ) -> Project:
    """The public API's Project for this invocation (the read commands are thin layers over
    it), refreshed first as every data command does (a progress bar unless ``quiet``), with
    a ``Warning:`` line for each source it could not read (``warn_stale``), as ``open_store``."""
    from toolkit.api import Project

    # its refusals name this command's options
    project = Project(get_config(), memory_limit=memory_limit, cli_words=True)
    if refresh:
        project.refresh(progress=None if quiet else progress_printer(), hold=True)
        try:
            warn_stale(project.stale_sources())
        except BaseException:
            project.close()
            raise
    return project


def global_flags(ctx: click.Context | None = None, *, db: bool = True) -> dict[str, Any]:
    """The global options given on the command line that are settings (``--db``, ``--today``
    and each source's path option), for ``config.resolve``; ``db=False`` leaves ``--db`` out
    (a fleet command resolves each project's own store)."""
    from toolkit.loaders import settings

    opts = dict((ctx or click.get_current_context()).find_root().obj or {})
    keys = ("db", "today", *(s.key for s in settings())) if db else \
        ("today", *(s.key for s in settings()))
    return {k: v for k, v in opts.items() if k in keys}


def open_store(cfg: Config, *, refresh: bool = True, quiet: bool = False, scoped: bool = False,
               full: bool = False) -> Store:
    """Open the store and bring it up to date with the sources (every data command does).
    ``scoped``: the store reads the actions of ``site_scope`` (``Store.scope_actions``), as
    the site, the handoff, the API and the Parquet export do. ``full``: read every source
    again (``toolkit load --full``)."""
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    cfg.check_state_links()
    store = Store.open(cfg.db_path, sources=SOURCES)
    try:
        if refresh:
            store.refresh(cfg, full=full, progress=None if quiet else progress_printer())
            warn_stale(store.stale_sources())
        if scoped:
            store.scope_actions(cfg.action_scope)
    except BaseException:
        store.close()
        raise
    return store


def warn_stale(stale_sources: Iterable[StaleSource]) -> None:
    """A ``Warning:`` line on stderr for each source the store could not read at its last
    load (``Store.stale_sources``): what the command answers from is the last good read."""
    from toolkit.display import visible

    for stale in stale_sources:
        click.echo(f"Warning: {visible(stale.message(), single_line=True)}", err=True)


def open_store_checked(cfg: Config, *, quiet: bool = False) -> tuple[Store, list[Result]]:
    """Refresh the store, run the checks (``toolkit.checks.run_configured``) while it is
    closed, then open it for the command: (store, check results) for the handoff, publish
    and the site, which show the results. The store reads the actions of ``site_scope``
    (``Store.scope_actions``), as the site and the API do."""
    from toolkit.checks import run_configured

    open_store(cfg, quiet=quiet).close()
    results = run_configured(cfg)
    return open_store(cfg, refresh=False, scoped=True), results


class _ProgressBar:
    """``progress(label, done, total)`` drawn as a rich bar on stderr; gone when done."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress

        self._bar = Progress(transient=True, console=Console(stderr=True))
        self._task: Any = None

    def __call__(self, label: str, done: int, total: int) -> None:
        if self._task is None:
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)
        self._bar.update(self._task, description=label, completed=done, total=total,
                         refresh=True)
        if done >= total:
            self._bar.stop()


def progress_printer() -> _ProgressBar | None:
    """A progress callback for long loads: a bar on a terminal, nothing when piped."""
    import sys

    return _ProgressBar() if sys.stderr.isatty() else None


def echo_text(text: str, *, nl: bool = True) -> None:
    """Print output that holds untrusted text in a machine format (CSV, JSON, a Markdown
    export): as it is when piped, with escape codes and bidi controls made visible
    (toolkit.display.visible) on a terminal, where they would otherwise act."""
    import sys

    from toolkit.display import visible

    click.echo(visible(text) if sys.stdout.isatty() else text, nl=nl)


JSON_PIECE = 1 << 16  # characters of encoded JSON printed at a time


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON through :func:`echo_text`, a piece at a time while it
    is encoded: a 50,000-entry listing is never held as one string, nor as the millions of
    small pieces ``json.dumps`` joins, beside the data itself (``visible`` works character
    by character, so a piece may end anywhere)."""
    pieces: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=2, ensure_ascii=False, default=str).iterencode(data):
        pieces.append(chunk)
        size += len(chunk)
        if size >= JSON_PIECE:
            echo_text("".join(pieces), nl=False)
            pieces.clear()
            size = 0
    echo_text("".join(pieces))


def render_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]], fmt: str) -> str:
    """Render a result set as table|csv|json|jsonl|markdown text."""
    import csv
    import io

    rows = [list(r) for r in rows]
    if fmt == "json":
        return json.dumps([dict(zip(columns, r, strict=False)) for r in rows], indent=2,
                          ensure_ascii=False, default=str)
    if fmt == "jsonl":
        return "\n".join(json.dumps(dict(zip(columns, r, strict=False)), ensure_ascii=False,
                                    default=str)
                         for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([csv_cell(v) for v in r] for r in rows)
        return buf.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in r] for r in rows]
    if fmt == "markdown":
        out = ["| " + " | ".join(c.replace("|", "\\|") for c in columns) + " |",
               "|" + "|".join("---" for _ in columns) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in cells]
        return "\n".join(out)
    from rich.table import Table
    from rich.text import Text

    table = Table(box=_plain_rule(), show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                  header_style="", highlight=False)
    for c in columns:
        table.add_column(Text(c), no_wrap=True, overflow="ignore")
    for r in cells:
        table.add_row(*(Text(c) for c in r))
    return table_text(table, width=_UNBOUNDED)


def csv_cell(value: Any) -> Any:
    """One value as a CSV cell for other programs, as the site's CSV downloads write it
    (``Store.copy_to``): empty for NULL, ``true``/``false`` for a boolean, a list or struct
    as its JSON text (compact, as DuckDB's ``to_json``), anything else as it is."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return value


_UNBOUNDED = 1_000_000  # a result table is never wrapped: one row, one line


def _plain_rule() -> Any:
    """ASCII columns: a row of dashes under the header, spaces between the columns."""
    from rich.box import Box

    return Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)


def table_text(table: Any, *, width: int | None = None) -> str:
    """A rich table as plain text lines (no colour, no markup, no blank edge rows, trailing
    spaces dropped): ``width`` columns, or the terminal's (100 when piped). CJK and emoji take
    two columns."""
    import io
    import shutil
    import sys

    from rich.console import Console

    if width is None:
        width = shutil.get_terminal_size((100, 24)).columns if sys.stdout.isatty() else 100
    buf = io.StringIO()
    Console(file=buf, markup=False, highlight=False, emoji=False, width=width,
            color_system=None).print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines() if line.strip())


def _cell(value: Any) -> str:
    from toolkit.display import visible

    if value is None:
        return ""
    text = visible(str(value))
    return text if len(text) <= 80 else text[:79] + "…"
