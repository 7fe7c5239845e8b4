"""Read-only reader of CodeSmith turn snapshots (FORMATS.md §2.5), through git plumbing only.

The side repo lives at ``<snapshots_home>/<project_hash>/<worktree_hash>/.git``; both hashes are
64-bit FNV-1a of the canonical workspace path. Every git call passes ``--git-dir`` (and never
touches the user's own repository).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from toolkit.errors import DataError
from toolkit.records import Snapshot, SnapshotFile

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
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


def git(git_dir: Path, *args: str, work_tree: Path | None = None, check: bool = True) -> str:
    cmd = ["git", f"--git-dir={git_dir}"]
    if work_tree is not None:
        cmd.append(f"--work-tree={work_tree}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    proc = subprocess.run([*cmd, *args], capture_output=True, env=env, check=False)
    if check and proc.returncode != 0:
        raise DataError(f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}",
                        path=git_dir)
    return proc.stdout.decode("utf-8", "replace")


def head_sha(git_dir: Path) -> str | None:
    out = git(git_dir, "rev-parse", "--verify", "-q", "HEAD", check=False).strip()
    return out or None


def list_snapshots(git_dir: Path, max_count: int | None = None) -> list[Snapshot]:
    """Snapshots newest first, numbered from 1 as ``/restore`` does."""
    if head_sha(git_dir) is None:
        return []
    args = ["log", "--pretty=format:%H%x09%P%x09%at%x09%s", "--no-color"]
    if max_count:
        args.insert(1, f"--max-count={max_count}")
    out = git(git_dir, *args)
    snaps: list[Snapshot] = []
    for pos, line in enumerate(out.splitlines(), 1):
        sha, parents, at, label = (line.split("\t", 3) + ["", "", ""])[:4]
        kind, turn, call_id, snippet = parse_label(label)
        snaps.append(Snapshot(sha=sha, position=pos, time=int(at or 0), label=label, kind=kind,
                              turn=turn, call_id=call_id, snippet=snippet,
                              parent=parents.split(" ")[0] or None, repo=str(git_dir)))
    return snaps


def changed_files(git_dir: Path, snapshot: Snapshot) -> list[SnapshotFile]:
    """Files this snapshot changed against its parent (the previous snapshot)."""
    base = snapshot.parent or "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # the empty tree
    numstat = git(git_dir, "diff-tree", "-r", "-z", "--no-renames", "--numstat", base,
                  snapshot.sha)
    status = git(git_dir, "diff-tree", "-r", "-z", "--no-renames", "--name-status", base,
                 snapshot.sha)
    kinds: dict[str, str] = {}
    parts = status.split("\0")
    for i in range(0, len(parts) - 1, 2):
        kinds[parts[i + 1]] = parts[i]
    files: list[SnapshotFile] = []
    for rec in numstat.split("\0"):
        if not rec:
            continue
        added, deleted, path = (rec.split("\t", 2) + ["", ""])[:3]
        files.append(SnapshotFile(
            sha=snapshot.sha, path=path, status=kinds.get(path, "M"),
            added=int(added) if added.isdigit() else None,
            deleted=int(deleted) if deleted.isdigit() else None))
    return files
