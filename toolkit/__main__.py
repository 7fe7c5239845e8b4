"""``python -m toolkit``: the same as the ``toolkit`` command (used to spawn ``toolkit mcp``)."""

from toolkit.cli import cli

if __name__ == "__main__":
    cli(prog_name="toolkit")
