"""`-o FILE` of the export commands: the same clear error when the folder is missing, and a
named pipe is written through, not replaced."""

from __future__ import annotations

import os
import stat
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

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


@pytest.mark.parametrize("args", [
    ["handoff", "-o"],
    ["slop", "export", "-o"],
    ["ledger", "export", "-o"],
    ["check", "--junit-xml"],
])
@pytest.mark.parametrize("source", ["slop", "ledger file", "audit DB", "toolkit.yaml",
                                    "link to the slop ledger"])
def test_output_never_replaces_a_file_the_toolkit_reads(project, cli_run, args, source):
    # `-o` naming the slop ledger (a slip of tab completion) replaced its 150 entries with
    # the Markdown export, and the ledger's own files with a report: no backup, no warning
    (project.root / "toolkit.yaml").write_text("project_name: acme-api\n")
    target = {"slop": project.slop, "ledger file": project.ledger / "patterns.md",
              "audit DB": project.audit_db, "toolkit.yaml": project.root / "toolkit.yaml",
              "link to the slop ledger": project.root / "slop-link.json"}[source]
    if source == "link to the slop ledger":
        target.symlink_to(project.slop)
    kept = target.resolve()
    before = kept.read_bytes()
    result = cli_run(*args, str(target))
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1] == (
        f"Error: {target}: the output would replace {kept}, a file the toolkit reads; "
        "nothing written. Write the output somewhere else")
    assert kept.read_bytes() == before
    assert target.is_symlink() == (source == "link to the slop ledger")
    assert not [p for p in kept.parent.iterdir() if ".toolkit-tmp-" in p.name]


@pytest.mark.parametrize("args", [
    ["handoff", "-o"],
    ["slop", "export", "-o"],
    ["ledger", "export", "-o"],
    ["check", "--junit-xml"],
])
def test_output_with_the_longest_name_the_folder_takes_is_written(project, cli_run, tmp_path,
                                                                  args):
    # a name of 255 bytes (the file system's limit) is valid, but the temp file beside it
    # (".<name>.toolkit-tmp-<pid>-<hex>") was not: "File name too long; nothing written"
    target = tmp_path / ("r" * 249 + "é.out")
    assert len(os.fsencode(target.name)) == 255
    result = cli_run(*args, str(target))
    assert result.exit_code in (0, 1) and "Error" not in result.output, result.output
    assert target.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("args", [
    ["handoff", "-o"],
    ["slop", "export", "-o"],
    ["ledger", "export", "-o"],
    ["check", "--junit-xml"],
])
def test_output_naming_a_folder_that_does_not_exist_yet_writes_no_file(project, cli_run,
                                                                        tmp_path, args):
    # `-o reports/` wrote a file named "reports" (the slash dropped), where the user meant
    # a folder: a later `mkdir reports` then fails
    given = str(tmp_path / "reports") + "/"
    label = {"handoff": "'--output' / '-o'", "slop": "'-o' / '--output'",
             "ledger": "'--output' / '-o'", "check": "'--junit-xml'"}[args[0]]
    result = cli_run(*args, given)
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1] == (
        f"Error: Invalid value for {label}: {given!r} names a folder (it ends with /); give a "
        "file name")
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("args", [
    ["handoff", "-o"],
    ["slop", "export", "-o"],
    ["ledger", "export", "-o"],
    ["check", "--junit-xml"],
])
def test_a_dash_is_not_taken_for_a_file_named_dash(project, cli_run, args):
    # `-o -` (standard output, by the usual convention) wrote a file named "-" in the
    # current folder and said so; a pipe after it got nothing
    result = cli_run(*args, "-")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1].endswith(
        ": '-' would be a file named '-'; leave the option out to print to standard output "
        "(or give /dev/stdout), or write ./- for such a file")
    assert not (project.root / "-").exists()
    assert cli_run(*args, "./-").exit_code in (0, 1)  # a file named "-" when said so
    assert (project.root / "-").is_file()


@pytest.mark.parametrize(("args", "option"), [
    (["export", "--out", "--help"], "--out"),
    (["build-site", "--out", "-h"], "--out"),
    (["--db", "--help", "status"], "--db"),
    (["--vault", "--project", "status"], "--vault"),
    (["handoff", "-o", "--full"], "-o"),
])
def test_an_option_given_where_a_path_goes_is_refused_not_made_a_file(project, cli_run, args,
                                                                      option):
    # `toolkit export --out --help` (the user asking for help) made a folder named "--help":
    # click takes the word after a path option as its value, whatever it looks like
    result = cli_run(*args)
    value = args[args.index(option) + 1]
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1].endswith(
        f"{value!r} is one of this command's options, not a path: give the path right after "
        f"the option (or write ./{value} for one named so)")
    assert sorted(p.name for p in project.root.iterdir() if p.name.startswith("-")) == []


def test_a_path_named_like_an_option_is_taken_when_written_as_a_path(project, cli_run):
    assert cli_run("handoff", "-o", "./--full").exit_code == 0
    assert (project.root / "--full").read_text(encoding="utf-8").startswith("#")


def test_an_output_of_ones_own_beside_the_sources_is_replaced(project, cli_run):
    # only what the toolkit reads is kept: a report kept in the vault is written again
    report = project.vault / "handoff.md"
    report.write_text("last week's report\n")
    result = cli_run("handoff", "-o", str(report))
    assert result.exit_code == 0, result.output
    assert report.read_text().startswith("# ")


class _FifoReader:
    """A reader on a named pipe that collects everything written until the last writer
    closes it (it holds a writer end itself until ``result`` so the command's open neither
    blocks nor meets an early end of file)."""

    def __init__(self, fifo: Path) -> None:
        self._r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(self._r, True)
        self._w = os.open(fifo, os.O_WRONLY)
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := os.read(self._r, 65536):
            self._chunks.append(chunk)

    def result(self) -> bytes:
        os.close(self._w)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the pipe was never closed by its writer"
        os.close(self._r)
        return b"".join(self._chunks)


@pytest.mark.parametrize("args", [
    ["handoff", "-o"],
    ["slop", "export", "-o"],
    ["ledger", "export", "-o"],
    ["check", "--junit-xml"],
])
def test_output_into_a_named_pipe_goes_through_the_pipe(project, cli_run, tmp_path, args):
    """`-o FIFO` (e.g. `toolkit handoff -o >(gh issue create --body-file -)`): the reader gets
    the whole output and the pipe stays a pipe, not replaced by a regular file."""
    out = tmp_path / "out"
    out.mkdir()
    fifo = out / "report.pipe"
    os.mkfifo(fifo)
    reader = _FifoReader(fifo)
    result = cli_run(*args, str(fifo))
    got = reader.result()
    assert result.exit_code == 0, result.output  # the formats project's checks only warn
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in out.iterdir()] == ["report.pipe"]  # no file left beside it
    if args[0] == "check":
        assert ET.fromstring(got).tag == "testsuites"
    else:
        regular = out / "report.md"
        again = cli_run(*args, str(regular))
        assert again.exit_code == 0, again.output
        assert got == regular.read_bytes() and len(got) > 200


# A command whose output is still in stdout's buffer when it returns (as when a pipe's reader
# stopped reading after the command's last flush): the console script's flush at the end.
_BUFFERED = """
import sys
import click
from toolkit.cli import COMMANDS, cli

@click.command()
def buffered():
    sys.stdout.write("a line the command left in the buffer\\n")

COMMANDS["buffered"] = ("__main__:buffered", "Leave a line in stdout's buffer.")
cli(["buffered"], prog_name="toolkit")
"""


@pytest.mark.parametrize("script", [_BUFFERED, "from toolkit.cli import cli\n"
                                               "cli(['ledger', 'list'], prog_name='toolkit')"],
                         ids=["left in the buffer", "ledger list"])
def test_a_reader_that_stopped_reading_gets_exit_1_and_no_traceback(project, script):
    """`toolkit snapshots | head -5`: when the reader of stdout is gone before the command's
    output is written out, the console script exits 1 with nothing on stderr (Python's own
    flush at exit printed "Exception ignored ... BrokenPipeError" and exited 120)."""
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        # stdout buffered, as in a user's shell (PYTHONUNBUFFERED writes every line at once)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        proc = subprocess.run([sys.executable, "-c", script], stdout=write_end,
                              stderr=subprocess.PIPE, cwd=project.root, env=env, timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr.decode()) == (1, "")
