"""The README's tour, replayed: every command of the `console` blocks of its "A tour" section
is run and its output compared with the README's, so that the house rule ("every command in
the README, with real output") is checked rather than hoped for.

How the blocks are read: in a `console` block, a line starting with ``$ `` is a command and
the lines up to the next command (or the block's end) are its output: stdout and stderr as a
terminal shows them (one stream; ``PYTHONUNBUFFERED``, so that they interleave as there).
Blank lines at the end of an output are the README's spacing and are not compared.

How they are run: in README order, in one world, each through ``bash -c`` as a terminal would
run it (pipes, ``; echo "exit code $?"``, ``>>``), with the working folder and the exported
variables carried from one command to the next as in one shell session; the venv's
``toolkit`` first on PATH, a fresh HOME, ``TZ=UTC`` and one "now" (:data:`NOW`, as
``SOURCE_DATE_EPOCH``: the time the README's ``slop export`` printed). The tour starts as the
README says it does, with ``toolkit demo /tmp/acme-demo && cd /tmp/acme-demo/acme-api``:
the demo command (the README's last block shows it) is replayed first, its output compared
there. What the README's prose gives a block and its commands do not make is made by
:data:`GIVEN` before the command named there. (One time is the real one: `audit
log-dispatch` stamps its row with SQLite's clock, as nagi-ledger does; the commands after it
read the same as long as that clock is past the demo's days.)

Paths: the README's outputs were made under ``/tmp``; the test must not write there, so the
world is built in a folder of pytest's temp folder (``.../tour0``) and one textual
substitution maps the README's ``/tmp/`` to ``.../tour0/`` in the commands and in the
outputs compared. Four things follow the path and are mapped with it: the folder CodeSmith
names the project's snapshots after (the FNV-1a hash of the project's path); a table column
holding a path (as wide as its longest path); a report's character count (``handoff``,
``publish``: the report holds the path once, as Markdown text); and a line the toolkit cuts
with "…" at its width limit, which only the longer path reaches (``check``'s rows, at 120
characters), compared up to the cut.

Everything else must match exactly, except what :data:`NORMALISED` lists (outputs that vary
by nature); the commands :data:`NOT_REPLAYED` names are skipped, each with its reason. Any
other command, including one added to the README later, is replayed. A command that does not
end within :data:`TIMEOUT` seconds fails the test (one that blocks, like ``serve``, belongs in
:data:`NOT_REPLAYED`).
"""

from __future__ import annotations

import datetime as dt
import difflib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, reap
from toolkit.sources.snapshots import fnv1a64_hex

README = REPO / "README.md"

# "Now" of every command (SOURCE_DATE_EPOCH): the time `toolkit slop export` printed as its
# "Generated at". The demo world pins "today" (2026-11-28) in its toolkit.yaml.
NOW = dt.datetime(2026, 11, 30, 19, 15, tzinfo=dt.UTC)

TIMEOUT = 60

# The command the tour's world is made with, replayed first (README: "Every output below is
# real, from `toolkit demo /tmp/acme-demo && cd /tmp/acme-demo/acme-api`").
SETUP = "toolkit demo /tmp/acme-demo"
SETUP_FOLDER = "/tmp/acme-demo/acme-api"

# Not replayed, by exact command text, and why. (A site build costs seconds; none of the
# commands replayed needs a site.)
NOT_REPLAYED = {
    "toolkit build-site --no-analyses >/dev/null": "builds a site (slow), prints nothing",
    "toolkit build-site --no-analyses --scope all | head -1": "builds a site (slow)",
    "toolkit build-site": "builds a site and runs the analysis notebooks (slow)",
    "toolkit serve": "serves until it is stopped",
    "toolkit build-site --redact": "builds a site and runs the analysis notebooks (slow)",
    "toolkit build-site --no-analyses": "builds a site (slow); counts what the builds before left",
    # without a token it fails as shown, but a `gh` logged in on the machine would publish
    "toolkit publish --repo acme/acme-api; echo \"exit code $?\"": "talks to GitHub",
}

# Outputs that vary by nature, normalised the same way in the README's text and the run's.
NORMALISED: list[tuple[re.Pattern[str], str]] = [
    # a build's duration: "Site built (full) in 2.6 s", "Fleet site built (full) in 0.4 s"
    (re.compile(r"(built \([^)]*\)) in \d+\.\d s"), r"\1 in <seconds> s"),
    # a backup folder is named after the real time of the write (microseconds)
    (re.compile(r"/\.backups/\d{8}T\d{12}Z/"), "/.backups/<time>/"),
]


def _write_slopdoc(world: World) -> None:
    """The damaged slop ledger the README's `slop repair` reads (its prose: "a file CodeSmith
    refuses"): a UTF-8 BOM, an entry with four safe fixes and one with two problems only a
    person can fix, laid out as the README's diff shows it."""
    folder = world.tmp / "slopdoc"
    folder.mkdir(parents=True)
    text = """{
  "entries": [
    {
      "id": "7f3c2a91-5b0e-4d2a-9c1f-3e8b7a6d5c40",
      "bucket": "stale_docs",
      "severity": "medium",
      "confidence": "high",
      "source_links": null,
      "title": "README still documents the v1 --region flag",
      "description": "The flag was renamed to --zone in v2.",
      "status": "wontfix",
      "created_at": "2026-05-01T10:00:00.123456789+00:00"
    },
    {
      "id": "c81e4f07-2d3a-4b6c-8e9f-1a2b3c4d5e6f",
      "bucket": "tool_gaps",
      "severity": "low",
      "confidence": "medium",
      "title": null,
      "description": "No script checks the flags the docs name.",
      "status": "open",
      "owner": 42,
      "created_at": "2026-05-02T09:00:00+00:00",
      "updated_at": "2026-05-02T09:00:00+00:00"
    }
  ]
}
"""
    (folder / "slop_ledger.json").write_bytes(b"\xef\xbb\xbf" + text.encode())


def _fresh_world(world: World) -> None:
    """The demo world made again (the demo is deterministic: the copy taken right after the
    setup is what `toolkit demo /tmp/acme-demo` writes)."""
    shutil.rmtree(world.demo)
    shutil.copytree(world.pristine, world.demo, symlinks=True)


def _write_fleet_file(world: World) -> None:
    """The fleet file the README's `cat` shows ("with a fleet file written next to the
    project"), written with exactly that text."""
    [step] = [s for s in world.steps if s.command == "cat ../toolkit-fleet.yaml"]
    (world.demo / "toolkit-fleet.yaml").write_text("".join(f"{line}\n" for line in step.expected))


# What the README's prose gives the commands from the one named on: (why, make it).
GIVEN: dict[str, tuple[str, Callable[[World], None]]] = {
    "toolkit --slop /tmp/slopdoc/slop_ledger.json slop repair":
        ("the output below is from a file CodeSmith refuses", _write_slopdoc),
    "toolkit handoff | head -11":
        ("the outputs below are from a fresh demo world", _fresh_world),
    "cat ../toolkit-fleet.yaml":
        ("with a fleet file written next to the project", _write_fleet_file),
}


@dataclass
class Step:
    """One command of the README and the output it shows (README line ``line``)."""
    line: int
    command: str
    expected: list[str]


def tour_steps(text: str) -> list[Step]:
    """The commands and outputs of the `console` blocks of the README's "A tour" section."""
    lines = text.splitlines()
    start = lines.index("## A tour")
    steps: list[Step] = []
    fence: str | None = None
    step: Step | None = None  # the command of this block whose output the lines are
    for number, line in enumerate(lines[start + 1:], start + 2):
        if fence is None:
            if line.startswith("## "):
                break
            if line.startswith("```"):
                fence, step = line[3:].strip(), None
            continue
        if line.startswith("```"):
            fence = None
        elif fence == "console":
            if line.startswith("$ "):
                step = Step(number, line[2:], [])
                steps.append(step)
            elif step is not None:
                step.expected.append(line)
            elif line.strip():  # output before a block's first command: no command's
                raise AssertionError(f"README line {number}: output before any command")
    for step in steps:
        while step.expected and not step.expected[-1].strip():
            step.expected.pop()
    return steps


@dataclass
class World:
    """The folders of one replay and the README's paths mapped into them."""
    tmp: Path  # stands for the README's /tmp
    aside: Path  # HOME, the shell's state, the demo world as made
    steps: list[Step]

    @property
    def demo(self) -> Path:
        return self.tmp / "acme-demo"

    @property
    def pristine(self) -> Path:
        return self.aside / "acme-demo-as-made"

    def command(self, text: str) -> str:
        return text.replace("/tmp/", f"{self.tmp}/")

    def expected(self, lines: list[str]) -> list[str]:
        """The README's output with its paths mapped (see the module's docstring)."""
        from toolkit.handoff import md_text

        readme_hash = fnv1a64_hex(SETUP_FOLDER)
        ours = fnv1a64_hex(self.command(SETUP_FOLDER))
        # the reports hold the path as Markdown text (an `_` backslashed)
        extra = len(md_text(str(self.tmp))) - len("/tmp")
        lines = _widen_path_columns(lines, len(str(self.tmp)) - len("/tmp"))
        return [re.sub(r"\b(\d[\d,]*) characters\b",
                       lambda m: f"{int(m[1].replace(',', '')) + extra:,} characters",
                       self.command(line).replace(readme_hash, ours))
                for line in lines]


def _widen_path_columns(lines: list[str], extra: int) -> list[str]:
    """A table (a header, a rule of dashes, rows) with a /tmp path in a column: that column
    made ``extra`` characters wider, as the toolkit prints it for the longer path."""
    out = list(lines)
    for i, rule in enumerate(lines):
        if i == 0 or not re.fullmatch(r"-+( -+)+", rule):
            continue
        starts = [0, *(m.start() for m in re.finditer(r"(?<= )-", rule))]
        rows = [i - 1, i]  # then every line with a space before each column
        while rows[-1] + 1 < len(lines) and all(
                len(lines[rows[-1] + 1]) <= a or lines[rows[-1] + 1][a - 1] == " "
                for a in starts[1:]):
            rows.append(rows[-1] + 1)
        bounds = list(zip(starts, [*starts[1:], None], strict=True))
        wide = {c for c, (a, b) in enumerate(bounds[:-1])
                if any("/tmp/" in lines[r][a:b] for r in rows)}
        for r in rows:
            cells = [lines[r][a:b] for a, b in bounds]
            # a path grows by itself; the column's other cells (header, rule) are padded
            out[r] = "".join(cell[:-1] + ("-" if r == i else " ") * extra + cell[-1:]
                             if c in wide and "/tmp/" not in cell and cell.endswith(" ")
                             else cell for c, cell in enumerate(cells))
    return out


def _uncut(want: list[str], got: list[str], tmp: Path) -> list[str]:
    """``got`` with each line that is its README line cut ("…") at the toolkit's width limit,
    which only the longer path reaches (``toolkit check``'s rows are cut at 120 characters),
    taken as that line: compared up to the cut."""
    if len(want) != len(got):
        return got
    return [w if g != w and g.endswith("…") and "…" not in w and str(tmp) in w
            and w.startswith(g[:-1]) else g for w, g in zip(want, got, strict=True)]


def _normalise(lines: list[str]) -> list[str]:
    for pattern, repl in NORMALISED:
        lines = [pattern.sub(repl, line) for line in lines]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _run(command: str, env: dict[str, str], state: Path) -> list[str]:
    """``command`` through ``bash -c`` in the session's folder and variables; its output."""
    script = (f". {shlex.quote(str(state))}\n{command}\n__rc=$?\n"
              f"{{ export -p; printf 'cd %q\\n' \"$PWD\"; }} > {shlex.quote(str(state))}\n"
              "exit $__rc\n")
    proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"README: `{command}` did not end within {TIMEOUT} s; if it "
                             "cannot be replayed, name it in NOT_REPLAYED with why") from None
    finally:
        reap(proc)
    return out.decode("utf-8", "replace").splitlines()


def test_the_tours_commands_print_what_the_readme_shows(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    steps = tour_steps(README.read_text(encoding="utf-8"))
    commands = [s.command for s in steps]
    assert commands.count(SETUP) == 1, f"the README no longer shows `{SETUP}`"
    stale = [c for c in [*NOT_REPLAYED, *GIVEN] if c not in commands]
    assert stale == [], f"not in the README's tour any more: {stale}"

    # the shortest folder for the README's /tmp: a longer path reaches more width limits
    world = World(tmp_path_factory.mktemp("tour"), tmp_path_factory.mktemp("aside"), steps)
    bindir = Path(sys.executable).parent
    assert (bindir / "toolkit").is_file(), f"no toolkit console script in {bindir}"
    # conftest's isolated environment, less its TOOLKIT_ANALYSES=0 (a user's shell has none)
    env = {k: v for k, v in os.environ.items() if k != "TOOLKIT_ANALYSES"}
    (world.aside / "home").mkdir()
    env.update(HOME=str(world.aside / "home"), TZ="UTC", PYTHONUNBUFFERED="1",
               PATH=f"{bindir}{os.pathsep}{env['PATH']}",
               SOURCE_DATE_EPOCH=str(int(NOW.timestamp())))
    state = world.aside / "shell-state"
    state.write_text(f"cd {shlex.quote(str(world.tmp))}\n")

    [setup] = [s for s in steps if s.command == SETUP]
    failures: list[str] = []
    for step in [setup, *(s for s in steps if s is not setup)]:
        if step.command in NOT_REPLAYED:
            continue
        if step.command in GIVEN:
            GIVEN[step.command][1](world)
        want = _normalise(world.expected(step.expected))
        got = _uncut(want, _normalise(_run(world.command(step.command), env, state)),
                     world.tmp)
        if got != want:
            diff = "\n".join(difflib.unified_diff(want, got, "README", "replayed", lineterm=""))
            failures.append(f"README.md:{step.line}: $ {step.command}\n{diff}")
        if step is setup:
            shutil.copytree(world.demo, world.pristine, symlinks=True)
            state.write_text(f"cd {shlex.quote(world.command(SETUP_FOLDER))}\n")
    if failures:
        pytest.fail(f"{len(failures)} of the README's commands print something else:\n\n"
                    + "\n\n".join(failures), pytrace=False)


def test_a_tour_block_is_read_as_commands_and_their_outputs() -> None:
    readme = "\n".join([
        "## Before", "```console", "$ not in the tour", "```",
        "## A tour", "text", "```console", "$ toolkit a | head -2", "out 1", "", "out 2", "",
        "$ cd /tmp/x", "$ toolkit b", "## not a heading inside a block", "```",
        "```text", "$ not a console block", "```", "```python", ">>> 1", "```",
        "### A part of the tour", "```console", "$ toolkit c", "```",
        "## After", "```console", "$ not in the tour either", "```"])
    steps = tour_steps(readme)
    assert [(s.command, s.expected) for s in steps] == [
        ("toolkit a | head -2", ["out 1", "", "out 2"]), ("cd /tmp/x", []),
        ("toolkit b", ["## not a heading inside a block"]), ("toolkit c", [])]
    assert [s.line for s in steps] == [8, 13, 14, 25]


def test_a_path_column_widens_with_the_path() -> None:
    table = ["Project   Path                     Status",
             "--------- ------------------------ ------",
             "acme-api  /tmp/acme-demo/acme-api  found",
             "2 projects"]
    assert _widen_path_columns(table, 3) == [
        "Project   Path                        Status",
        "--------- --------------------------- ------",
        "acme-api  /tmp/acme-demo/acme-api  found",  # its path grows by 3 when mapped
        "2 projects"]
