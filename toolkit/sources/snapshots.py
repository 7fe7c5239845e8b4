"""Read-only reader of CodeSmith turn snapshots (FORMATS.md §2.5), through git plumbing only.

The side repo lives at ``<snapshots_home>/<project_hash>/<worktree_hash>/.git``; both hashes are
64-bit FNV-1a of the canonical workspace path. Every git call passes ``--git-dir`` (and never
touches the user's own repository).

Identity. A snapshot's SHA and author time change whenever CodeSmith prunes past 50 snapshots
(``prune_keep_last_n`` rebuilds the surviving chain with new ``commit-tree`` calls), but its
label and its tree do not. So a snapshot is known by ``key = "<label>@<tree[:12]>"`` (with
``#2``, ``#3``... for a repeated label and tree, counted from the oldest), and by its position
(1 = newest) for the user, as ``/restore N`` numbers them.

Turns. Snapshots are linear commits; a turn is ``pre-turn:<seq>``, the ``tool:<call_id>``
snapshots taken inside it, and the matching ``post-turn:<seq>``. A turn is known by the key of
its first surviving snapshot.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import DataError
from toolkit.records import Snapshot, SnapshotFile
from toolkit.source import asked_once

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_WORKTREE = re.compile(r"^(.*)/\.worktrees/[^/]+/?$")


def fnv1a64_hex(text: str) -> str:
    h = FNV_OFFSET
    for b in text.encode("utf-8", "surrogateescape"):
        h ^= b
        h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def side_repo_for(workspace: Path, snapshots_home: Path) -> Path:
    """The side repo's git dir for a workspace, as CodeSmith computes it."""
    ws = str(workspace.resolve())
    m = _WORKTREE.match(ws)
    project = m.group(1) if m else ws
    return snapshots_home / fnv1a64_hex(project) / fnv1a64_hex(ws) / ".git"


def parse_label(label: str) -> tuple[str, int | None, str | None, str | None]:
    """``kind:seq[: snippet]`` -> (kind, turn, call_id, snippet)."""
    head, sep, snippet = label.partition(": ")
    kind, _, rest = head.partition(":")
    snippet_out = snippet if sep else None
    if kind in ("pre-turn", "post-turn"):
        try:
            return kind, int(rest), None, snippet_out
        except ValueError:
            return "other", None, None, snippet_out
    if kind == "tool":
        return "tool", None, rest or None, snippet_out
    return "other", None, None, snippet_out


# --------------------------------------------------------------------------- running git

def git_env() -> dict[str, str]:
    """The environment for every git call: no inherited GIT_* variables, no system config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    return env


def run_git(args: list[str], *, cwd: Path | None = None, input: bytes | None = None,
            check: bool = True, extra_env: dict[str, str] | None = None,
            what: Path | str | None = None, exe: str = "git"
            ) -> subprocess.CompletedProcess[bytes]:
    """Run git with a clean environment (the toolkit's one git runner: history, snapshots,
    the demo writer); a failure is a DataError naming ``what``."""
    env = git_env()
    if extra_env:
        env.update(extra_env)
    try:
        proc = subprocess.run([exe, *args], cwd=cwd, input=input, capture_output=True,
                              env=env, check=False)
    except FileNotFoundError:
        from toolkit.errors import ToolkitError

        raise ToolkitError("git is not installed", hint="Install git and retry") from None
    if check and proc.returncode != 0:
        cmd = next((a for a in args if not a.startswith("-")), "git")
        raise DataError(f"git {cmd} failed: {git_error(proc)}", path=what or cwd)
    return proc


def git_error(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The line of a failed git run's stderr that says why (:func:`git_why`)."""
    return git_why(proc.stderr, proc.returncode)


def git_why(stderr: bytes, returncode: int) -> str:
    """Why git failed, from its stderr: its first ``error:`` or ``fatal:`` line (a checkout
    that could not write a file says so, then ends with its "Updated 2 paths" summary), else
    its last line, else the exit code."""
    lines = [line.strip() for line in
             stderr.decode("utf-8", "replace").strip().splitlines() if line.strip()]
    why = next((line for line in lines if line.startswith(("error:", "fatal:"))), None)
    return why or (lines[-1] if lines else f"exit {returncode}")


def cat_blobs(args: list[str], oids: list[str], *, cwd: Path | None = None,
              what: Path | str | None = None) -> Generator[tuple[str, bytes | None], None, None]:
    """Each of ``oids`` (in order) with its bytes, or None when it is no blob of the
    repository, from one ``git cat-file --batch`` (the runner's environment and errors).

    One object is asked for and read at a time, so a caller that takes each before asking
    for the next holds one content, not all of them (the output of a batch of a big ledger's
    versions held whole, and each content cut out of it, was twice their size)."""
    try:
        proc = subprocess.Popen(["git", *args, "cat-file", "--batch"], cwd=cwd,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=git_env())
    except FileNotFoundError:
        from toolkit.errors import ToolkitError

        raise ToolkitError("git is not installed", hint="Install git and retry") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        for oid in oids:
            header = b""
            try:
                proc.stdin.write(oid.encode("ascii") + b"\n")
                proc.stdin.flush()
                header = proc.stdout.readline()
            except BrokenPipeError:
                pass
            fields = header.split()
            data = None
            if len(fields) == 3:  # "<oid> <type> <size>", the content, a newline
                size = int(fields[2])
                data = proc.stdout.read(size)
                if len(data) != size or proc.stdout.read(1) != b"\n":
                    header = b""
                elif fields[1] != b"blob":
                    data = None
            if not header:  # git ended: the repository could not be read
                with contextlib.suppress(OSError):  # (a write git did not take may be left)
                    proc.stdin.close()
                said = proc.stderr.read()  # (before the wait: git may still be writing it)
                raise DataError(f"git cat-file failed: {git_why(said, proc.wait())}",
                                path=what or cwd)
            yield oid, data  # None: "<oid> missing", or not a blob
    finally:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def git(git_dir: Path, *args: str, work_tree: Path | None = None, check: bool = True) -> str:
    cmd = [f"--git-dir={git_dir}"]
    if work_tree is not None:
        cmd.append(f"--work-tree={work_tree}")
    proc = run_git([*cmd, *args], check=check, what=git_dir)
    return proc.stdout.decode("utf-8", "replace")


def head_sha(git_dir: Path) -> str | None:
    def ask() -> str | None:
        out = git(git_dir, "rev-parse", "--verify", "-q", "HEAD", check=False).strip()
        return out or None

    return asked_once(("head", str(git_dir)), ask)


# --------------------------------------------------------------------------- snapshots

def snapshot_keys(snaps_oldest_first: list[tuple[str, str | None]]) -> list[str]:
    """Stable keys for (label, tree) pairs given oldest first: ``label@tree12`` plus ``#n`` for
    the n-th repeat of the same label and tree."""
    seen: dict[str, int] = {}
    keys = []
    for label, tree in snaps_oldest_first:
        base = f"{label}@{(tree or '')[:12]}"
        n = seen.get(base, 0) + 1
        seen[base] = n
        keys.append(base if n == 1 else f"{base}#{n}")
    return keys


def list_snapshots(git_dir: Path, max_count: int | None = None) -> list[Snapshot]:
    """Snapshots newest first, numbered from 1 as ``/restore`` does, each with its tree and
    stable key."""
    if head_sha(git_dir) is None:
        return []
    out = git(git_dir, "log", "--pretty=format:%H%x09%P%x09%at%x09%T%x09%s", "--no-color")
    rows = []
    for line in out.splitlines():
        sha, parents, at, tree, label = [*line.split("\t", 4), "", "", "", ""][:5]
        rows.append((sha, parents, at, tree, label))
    keys = snapshot_keys([(r[4], r[3]) for r in reversed(rows)])[::-1]
    snaps: list[Snapshot] = []
    for pos, ((sha, parents, at, tree, label), key) in enumerate(zip(rows, keys, strict=True), 1):
        kind, turn, call_id, snippet = parse_label(label)
        snaps.append(Snapshot(sha=sha, position=pos, time=int(at or 0), label=label, kind=kind,
                              turn=turn, call_id=call_id, snippet=snippet,
                              parent=parents.split(" ")[0] or None, repo=str(git_dir),
                              tree=tree or None, key=key))
    return snaps[:max_count] if max_count else snaps


# one diff's files: each file's status (--raw) and its lines added and deleted (--numstat)
_DIFF = ("diff-tree", "-r", "-z", "--no-renames", "--raw", "--numstat")
# diff-tree --stdin names each pair of trees it compares on a line before its diff
_PAIR = re.compile(r"([0-9a-f]{40}|[0-9a-f]{64}) ([0-9a-f]{40}|[0-9a-f]{64})\n")


def _diff_files(fields: list[str], new: str) -> list[SnapshotFile]:
    """The files of one ``diff-tree -z --raw --numstat`` diff, from its NUL-ended fields: a
    raw record (``:modes oids status``, then the path) per file, then a numstat record
    (``added<TAB>deleted<TAB>path``; ``-`` for a binary file) per file."""
    kinds: dict[str, str] = {}
    files: list[SnapshotFile] = []
    i = 0
    while i < len(fields):
        rec = fields[i]
        if rec.startswith(":"):  # a raw record: the path is the next field
            if i + 1 < len(fields):
                kinds[fields[i + 1]] = rec.rsplit(" ", 1)[-1]
            i += 2
            continue
        i += 1
        if not rec:
            continue
        added, deleted, path = [*rec.split("\t", 2), "", ""][:3]
        files.append(SnapshotFile(
            sha=new, path=path, status=kinds.get(path, "M"),
            added=int(added) if added.isdecimal() else None,
            deleted=int(deleted) if deleted.isdecimal() else None))
    return files


def diff_trees(git_dir: Path, old: str | None, new: str) -> list[SnapshotFile]:
    """Files that differ between two trees (or commits), with lines added and deleted
    (None for binary files). ``old=None`` compares with the empty tree."""
    out = git(git_dir, *_DIFF, old or EMPTY_TREE, new)
    return _diff_files(out.split("\0"), new)


def diff_tree_pairs(git_dir: Path, pairs: list[tuple[str | None, str]]
                    ) -> list[list[SnapshotFile]]:
    """``diff_trees`` for each (old, new) pair of tree IDs (not commits: git reads a pair of
    commits on its input as a commit and its parent), all in one git process."""
    if not pairs:
        return []
    wanted = [(old or EMPTY_TREE, new) for old, new in pairs]
    proc = run_git([f"--git-dir={git_dir}", *_DIFF, "--stdin"], what=git_dir,
                   input="".join(f"{a} {b}\n" for a, b in wanted).encode())
    fields = proc.stdout.decode("utf-8", "replace").split("\0")
    groups: list[list[str]] = []
    i = 0
    while i < len(fields):
        field = fields[i]
        # a pair's line starts the field after the previous diff's last one (several lines
        # for pairs without a difference); a path (after a raw record) is never read as one
        while m := _PAIR.match(field):
            if len(groups) == len(wanted) or m.groups() != wanted[len(groups)]:
                raise DataError("git diff-tree answered for trees it was not asked about",
                                path=git_dir)
            groups.append([])
            field = field[m.end():]
        if not groups:
            if field:
                raise DataError("git diff-tree answered without naming the trees",
                                path=git_dir)
            i += 1
            continue
        step = 2 if field.startswith(":") else 1
        groups[-1] += [field, *fields[i + 1:i + step]]
        i += step
    if len(groups) != len(wanted):
        raise DataError(f"git diff-tree compared {len(groups)} of {len(wanted)} pairs of trees",
                        path=git_dir)
    return [_diff_files(group, new) for group, (_, new) in zip(groups, wanted, strict=True)]


def changed_files(git_dir: Path, snapshot: Snapshot) -> list[SnapshotFile]:
    """Files this snapshot changed against its parent (the previous snapshot)."""
    files = diff_trees(git_dir, snapshot.parent, snapshot.sha)
    return [SnapshotFile(snapshot.sha, f.path, f.status, f.added, f.deleted) for f in files]


def patch(git_dir: Path, old: str | None, new: str, *, whole: bool = False) -> str:
    """The unified diff between two snapshots (text; binary files are named, not shown);
    ``whole``: each changed file's every line in its one hunk (the files as they were and
    are, for :func:`toolkit.turn_diffs.redacted_patch`)."""
    context = ["--unified=2147483647"] if whole else []
    return git(git_dir, "diff", "--no-color", "--no-ext-diff", "--no-renames", *context,
               old or EMPTY_TREE, new)


# --------------------------------------------------------------------------- turns

@dataclass(frozen=True)
class Turn:
    """One agent turn: its snapshots oldest first (pre-turn, tools..., post-turn)."""

    key: str
    turn: int | None
    snippet: str | None
    snapshots: tuple[Snapshot, ...]

    @property
    def pre(self) -> Snapshot | None:
        return next((s for s in self.snapshots if s.kind == "pre-turn"), None)

    @property
    def post(self) -> Snapshot | None:
        return next((s for s in reversed(self.snapshots) if s.kind == "post-turn"), None)

    @property
    def tools(self) -> list[Snapshot]:
        return [s for s in self.snapshots if s.kind == "tool"]

    @property
    def newest_position(self) -> int:
        return min(s.position for s in self.snapshots)


def group_turns(snaps: list[Snapshot]) -> list[Turn]:
    """Group snapshots (as ``list_snapshots`` returns them) into turns, newest turn first.

    A ``pre-turn:<n>`` opens a turn; ``tool:`` snapshots join the open turn; the matching
    ``post-turn:<n>`` closes it. A tool or post-turn snapshot whose pre-turn was pruned starts
    a turn of its own; snapshots of kind ``other`` belong to no turn.
    """
    turns: list[list[Snapshot]] = []
    open_turn: list[Snapshot] | None = None
    for s in sorted(snaps, key=lambda s: -s.position):  # oldest first
        if s.kind == "pre-turn":
            open_turn = [s]
            turns.append(open_turn)
        elif s.kind == "tool":
            if open_turn is None:
                open_turn = [s]
                turns.append(open_turn)
            else:
                open_turn.append(s)
        elif s.kind == "post-turn":
            first = open_turn[0] if open_turn else None
            if open_turn is not None and (first is None or first.kind != "pre-turn"
                                          or first.turn == s.turn):
                open_turn.append(s)
            else:
                turns.append([s])
            open_turn = None
        else:
            open_turn = None
    out = []
    for group in turns:
        numbered = next((s for s in group if s.turn is not None), None)
        snippet = next((s.snippet for s in group if s.snippet), None)
        out.append(Turn(key=group[0].key or group[0].sha, turn=numbered.turn if numbered else None,
                        snippet=snippet, snapshots=tuple(group)))
    out.sort(key=lambda t: t.newest_position)
    return out
