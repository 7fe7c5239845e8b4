"""`-o FILE` of the export commands: the same clear error when the folder is missing."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("args", [
    ["handoff", "-o"],
    ["slop", "export", "-o"],
    ["ledger", "export", "-o"],
])
def test_output_into_a_missing_folder_names_the_folder(project, cli_run, tmp_path, args):
    target = tmp_path / "no-such-folder" / "report.md"
    result = cli_run(*args, str(target))
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"Error: {target}: folder {target.parent} does not exist; nothing written. "
        "Create it first, or write somewhere else")
    assert not target.parent.exists()
