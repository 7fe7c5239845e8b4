"""The ``toolkit`` command: the one place errors become exit codes.

Subcommands live in modules of this package, one per command group, and are imported only
when used (``COMMANDS`` below), so ``toolkit --help`` stays fast. Each command parses its
options, makes one library call and renders the result.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import click

from toolkit import __version__, interrupts
from toolkit.cli._common import PathValue
from toolkit.errors import EXIT_FAILURE, Terminated, ToolkitError, from_exception
from toolkit.loaders import settings as source_settings

# name -> ("module:attribute", short help). Keep sorted by name; one entry per command or group.
# The short help here is the command's only one: `toolkit --help` lists it without importing
# the command, and LazyGroup.get_command gives it to the command (shell completion, tests).
COMMANDS: dict[str, tuple[str, str]] = {
    "audit": ("toolkit.cli.audit:audit",
              "nagi-ledger audit DB: log and read actions, dispatches, verdicts, approaches."),
    "build-site": ("toolkit.cli.site:build_site",
                   "Build the browsable static site (MkDocs Material) of everything in the store."),
    "check": ("toolkit.cli.check:check",
              "Run checks over the records (built-in and toolkit.yaml); JSON and JUnit XML."),
    "demo": ("toolkit.cli.data:demo",
             "Write a realistic demo world (vault, slop, audit DB, snapshots)."),
    "export": ("toolkit.cli.data:export",
               "Export every table as a Parquet dataset partitioned by project."),
    "fleet": ("toolkit.cli.fleet:fleet",
              "Every project your agents work in: list them, one site over them, export them."),
    "handoff": ("toolkit.cli.publish:handoff", "Render the redacted handoff report as Markdown."),
    "ledger": ("toolkit.cli.ledger:ledger",
               "Smith Ledger: dashboard, list, show, search, export, prune, promote, demote, "
               "reset."),
    "load": ("toolkit.cli.data:load", "Load every source into the DuckDB store (incremental)."),
    "mcp": ("toolkit.cli.mcp:mcp",
            "Serve nagi-ledger's MCP tools (plus ledger and slop search) over stdio."),
    "publish": ("toolkit.cli.publish:publish",
                "Publish the handoff report as one GitHub issue, kept up to date."),
    "query": ("toolkit.cli.data:query", "Run one read-only SELECT against the store."),
    "schema": ("toolkit.cli.data:schema", "Show the store's tables and columns."),
    "serve": ("toolkit.cli.site:serve", "Preview the built site on a local web server."),
    "slop": ("toolkit.cli.slop:slop",
             "CodeSmith slop ledger: summary, query, append, update, repair, redacted export."),
    "snapshots": ("toolkit.cli.snapshots:snapshots",
                  "CodeSmith turn snapshots: list, what a turn changed, restore."),
    "status": ("toolkit.cli.data:status",
               "What was found, rows per table, warnings with file:line."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target[0].split(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        command.short_help = target[1]
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the registry, so --help imports no command module.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """click's ``main``, then what is still buffered for stdout written out here. A reader
        that stops reading (``toolkit snapshots | head -5``) during the command is click's to
        handle (exit 1, its streams made quiet); one that stopped before the last of the output
        left the buffer is met the same way here, not by Python's own flush at exit, which
        prints a traceback and exits 120."""
        # SIGTERM ends a command as Ctrl-C does (its clean-up runs), not in the middle of a
        # write with the .meta.json lock left for ten minutes; put back when the command ends
        # (a test's runner calls this in its own process)
        # Both handlers first stop the DuckDB queries under way (toolkit.interrupts): DuckDB
        # would otherwise drop what they raise for its own "Query interrupted". Ctrl-C's is
        # Python's own unless SIGINT is ignored (a background job of a shell) or taken.
        main_thread = threading.current_thread() is threading.main_thread()
        before = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
        before_int = signal.getsignal(signal.SIGINT) if main_thread else None
        if before_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupt)
        try:
            result = super().main(*args, **kwargs)
        except SystemExit:  # click's standalone mode ends here (a bug's traceback goes past)
            _flush_stdout()
            raise
        finally:
            if main_thread:  # (None: a handler set outside Python; the default stands in)
                signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)
                if before_int is signal.default_int_handler:
                    signal.signal(signal.SIGINT, before_int)
            interrupts.reset()
        _flush_stdout()
        return result

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            except Exception as exc:  # the error of a query a signal stopped is the signal's
                interrupts.raise_if_stopped(exc)
                raise
        except ToolkitError as exc:
            _fail(exc)
        except BrokenPipeError:
            raise  # click's main handles a closed stdout (not an error to translate below)
        except Terminated:
            click.echo("Terminated.", err=True)
            sys.exit(128 + signal.SIGTERM)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)
        except click.exceptions.ClickException:
            raise
        except Exception as exc:  # what a user can cause becomes one line; a bug stays loud
            translated = from_exception(exc)
            if translated is None:
                raise
            _fail(translated)


def _terminate(signum: int, frame: Any) -> None:
    interrupts.stop_queries(signum)
    raise Terminated


def _interrupt(signum: int, frame: Any) -> None:
    interrupts.stop_queries(signum)
    raise KeyboardInterrupt


def _flush_stdout() -> None:
    """Write out what stdout still holds. When its reader is gone: exit 1, with stdout
    pointed at /dev/null, so that what it still buffers does not fail again when Python
    flushes it at exit."""
    import os

    try:
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
        sys.exit(EXIT_FAILURE)


def _fail(exc: ToolkitError) -> None:
    from toolkit.display import visible

    # messages may quote AI-written text (titles of ambiguous matches...); one line always
    click.echo(f"Error: {visible(str(exc), single_line=True)}", err=True)
    sys.exit(exc.exit_code)


def _source_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One global path option per source setting (``toolkit.source.Setting``), in rank order."""
    for s in reversed([s for s in source_settings() if s.flag]):
        kind = PathValue(file_okay=False) if s.folder else PathValue(dir_okay=False)
        command = click.option(s.flag, s.key, type=kind, default=None, help=s.help)(command)
    return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                                              "max_content_width": 100})
@click.version_option(__version__, prog_name="toolkit")
@click.option("--project", type=PathValue(file_okay=False), default=None,
              help="Project root (default: the nearest folder above with .smith/vault or "
                   "toolkit.yaml).")
@click.option("--config", "config_file", type=PathValue(dir_okay=False), default=None,
              help="Settings file (default: toolkit.yaml at the project root).")
@click.option("--db", type=PathValue(dir_okay=False), default=None,
              help="DuckDB store (default: .toolkit/ledger.duckdb at the project root; "
                   "outside any project, in ~/.cache/agent-ledger-toolkit).")
@_source_options
@click.option("--today", default=None, metavar="YYYY-MM-DD",
              help="Date to treat as today for ages and pruning (default: today: in "
                   "toolkit.yaml, else $TOOLKIT_TODAY, else the UTC date of "
                   "$SOURCE_DATE_EPOCH, else today's).")
@click.pass_context
def cli(ctx: click.Context, project: str | None, config_file: str | None, db: str | None,
        today: str | None, **paths: str | None) -> None:
    """Agent Ledger Toolkit: query, browse, curate and hand over what AI coding agents
    learned (Smith Ledger), left behind (CodeSmith slop ledger) and did (nagi-ledger audit DB,
    turn snapshots).

    Exit codes: 0 ok, 1 failure, 2 usage, 65 bad data, 75 busy or locked, 130 interrupted
    (Ctrl-C), 143 terminated (SIGTERM: cleaned up as after Ctrl-C).
    """
    ctx.obj = {"project": project, "config_file": config_file, "db": db, **paths,
               "today": today}
