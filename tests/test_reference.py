"""The generated reference (every --help, the store schema) matches the code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_reference_is_current():
    spec = importlib.util.spec_from_file_location("gen_reference",
                                                  ROOT / "scripts" / "gen_reference.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    current = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert current == mod.render(), ("docs/reference.md is stale: "
                                     "run python scripts/gen_reference.py")
    # each usage line names the command a user types (click's test runner calls it `cli`)
    usages = [line.strip() for line in current.splitlines() if line.strip().startswith("Usage:")]
    assert len(usages) > 40 and all(u.startswith("Usage: toolkit") for u in usages), usages


def test_every_command_is_in_the_readme():
    from toolkit.cli import COMMANDS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [name for name in COMMANDS if f"toolkit {name}" not in readme]
    assert missing == []


def test_no_short_help_is_cut_off(cli_run):
    from toolkit.cli import COMMANDS

    groups = [name for name in COMMANDS
              if "Commands:" in cli_run(name, "--help").output]
    assert groups == ["audit", "fleet", "ledger", "slop", "snapshots"]
    for name in ["", *groups]:
        out = cli_run(*([name] if name else []), "--help").output
        listing = out.split("Commands:", 1)[1]
        assert "..." not in listing, f"toolkit {name} --help: {listing}"


def test_each_command_has_one_description():
    """The registry's short help is the command's own (shell completion shows the same words
    as `toolkit --help`), and no command module declares another."""
    import click

    from toolkit.cli import COMMANDS, cli

    ctx = click.Context(cli)
    for name, (target, summary) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(limit=1000) == summary, name
        module = (ROOT / (target.split(":")[0].replace(".", "/") + ".py")).read_text()
        assert "short_help" not in module.split(f"def {target.split(':')[1]}(")[0] \
            .rsplit("\n\n\n", 1)[-1], f"{target} declares its own short_help"
