"""CodeSmith turn snapshots for people: list them, show what a turn changed, restore one.

Listing numbers snapshots as CodeSmith's ``/restore`` does: newest first, from 1.

Restoring follows ``/restore N``: check out the snapshot's tree into the workspace
(``git checkout <sha> -- :/`` with the side repo as ``--git-dir`` and the workspace as
``--work-tree``), delete the files that are in the workspace now but not in that tree, remove
directories left empty, and never move the side repo's HEAD. (The deletions run first, so a
path that is a file now and a folder in the snapshot, or the reverse, restores cleanly.)
"Files in the workspace now" means
the files the side repo tracks or would track: its HEAD tree plus every file ``git add -A``
would pick up (its ``info/exclude`` and the workspace's ``.gitignore`` files are honoured);
``.git`` is never touched, nor the toolkit's own outputs (its state folder, store, caches,
site and the site's ``.build`` folder, wherever the configuration puts them in the workspace:
:meth:`toolkit.config.Config.outputs`). The checkout uses a throw-away
index, so the side repo's index is left as CodeSmith wrote it.

Safety the toolkit adds: the restore is refused when the user's own git repository (the one
holding the workspace, if any) has uncommitted changes or untracked files, unless forced; so
is a restore that would meet a workspace folder it cannot change (read-only, unreadable),
before anything is deleted; a dry run lists what would change; the CLI asks before acting.

Nothing outside the workspace is ever written or deleted. A snapshot path git's own
``verify_path`` refuses (an empty, ``.`` or ``..`` component, an absolute name, a ``.git``
component in any case or in its HFS/NTFS disguises, a NUL) or that is both a file and a folder
in the snapshot is refused, never restored or deleted. A symlink in the workspace is a file:
it is replaced or deleted itself, never followed; a path below a symlinked folder that the
restore keeps is refused, wherever the link leads. Deletions walk the workspace with folder
handles that refuse symlinks, so a link made after planning cannot redirect them either.
Refused paths are listed with their reason, and the counts are what was really done.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import stat
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.argrules import LIMIT
from toolkit.errors import ConflictError, NotFoundError, RefusedError, ToolkitError, UsageError
from toolkit.records import Snapshot, SnapshotFile
from toolkit.sources import snapshots as snap
from toolkit.textio import within

if TYPE_CHECKING:
    from toolkit.config import Config


def side_repo(cfg: Config) -> Path:
    """The side repo of the configured workspace; NotFoundError when CodeSmith has none."""
    repo = snap.side_repo_for(cfg.workspace, cfg.snapshots_home)
    if not repo.is_dir():
        raise NotFoundError(f"no CodeSmith snapshots for workspace {cfg.workspace}",
                            path=repo,
                            hint="CodeSmith snapshots a workspace at every turn; set "
                                 "`workspace:` in toolkit.yaml if it ran in another folder")
    return repo


@dataclass(frozen=True)
class SnapshotListing:
    repo: Path
    workspace: Path
    snapshots: list[Snapshot]  # newest first, possibly cut to a limit
    total: int


def list_snapshots(cfg: Config, limit: int | None = None) -> SnapshotListing:
    if limit is not None and not LIMIT.fits(limit):  # (-1 cut the oldest off, 0 listed all)
        raise UsageError(f"limit must be {LIMIT.describe()}, not {limit!r}")
    repo = side_repo(cfg)
    snaps = snap.list_snapshots(repo)
    return SnapshotListing(repo, cfg.workspace, snaps[:limit] if limit else snaps, len(snaps))


def _pick(snaps: list[Snapshot], n: int) -> Snapshot:
    if not snaps:
        raise NotFoundError("the side repo has no snapshots yet")
    if n < 1 or n > len(snaps):
        raise NotFoundError(f"no snapshot #{n}: there are {len(snaps)} (1 = newest)",
                            hint="Run `toolkit snapshots` to list them")
    return snaps[n - 1]


# --------------------------------------------------------------------------- diff

@dataclass(frozen=True)
class Step:
    """What changed between two consecutive snapshots of a turn."""

    before: Snapshot | None  # None: the turn's first snapshot has no parent (empty tree)
    after: Snapshot
    files: list[SnapshotFile]


@dataclass(frozen=True)
class TurnDiff:
    """What one turn changed: the net change from its start to its end, and each step."""

    turn: snap.Turn
    start: Snapshot | None  # pre-turn (or the parent of the turn's first surviving snapshot)
    end: Snapshot  # post-turn (or the turn's last snapshot)
    files: list[SnapshotFile]
    steps: list[Step]
    notes: list[str] = field(default_factory=list)
    patch: str | None = None


def turn_start(turn: snap.Turn, by_sha: dict[str, Snapshot]
               ) -> tuple[Snapshot | None, list[Snapshot], list[str]]:
    """Where a turn's net change starts (its pre-turn snapshot, else the snapshot before its
    first; None: the empty tree), the snapshots its steps walk through, and notes on what is
    missing."""
    notes: list[str] = []
    first, last = turn.snapshots[0], turn.snapshots[-1]
    if first.kind == "pre-turn":
        start: Snapshot | None = first
        inner = list(turn.snapshots)
    else:
        start = by_sha.get(first.parent) if first.parent else None
        inner = [s for s in ([start] if start else []) + list(turn.snapshots)]
        if first.kind in ("tool", "post-turn"):
            notes.append("the turn's pre-turn snapshot is gone (pruned); compared with the "
                         "snapshot before it" if start else
                         "the turn's pre-turn snapshot is gone; compared with an empty tree")
    if last.kind != "post-turn" and turn.turn is not None:
        notes.append("no post-turn snapshot (the turn was interrupted or is still running): "
                     "shown up to its last snapshot")
    return start, inner, notes


def turn_patch(repo: Path, start: Snapshot | None, end: Snapshot) -> str:
    """The unified diff of a turn's net change (``snapshots diff --patch`` and the site's
    turn pages)."""
    return snap.patch(repo, start.sha if start else None, end.sha)


def turn_diff(cfg: Config, n: int | None = None, *, turn: int | None = None,
              with_patch: bool = False) -> TurnDiff:
    """The turn that snapshot #n belongs to (or the newest turn numbered ``turn``)."""
    if n is not None and turn is not None:  # (one of them was silently ignored)
        raise UsageError("give a snapshot number or a turn, not both")
    repo = side_repo(cfg)
    snaps = snap.list_snapshots(repo)
    turns = snap.group_turns(snaps)
    by_sha = {s.sha: s for s in snaps}
    if turn is not None:
        chosen = next((t for t in turns if t.turn == turn), None)
        if chosen is None:
            seqs = sorted({t.turn for t in turns if t.turn is not None})
            raise NotFoundError(f"no turn {turn} among the snapshots" +
                                (f" (turns: {', '.join(map(str, seqs))})" if seqs else ""),
                                hint="Run `toolkit snapshots` to list them")
    elif n is not None:
        target = _pick(snaps, n)
        chosen = next((t for t in turns if any(s.sha == target.sha for s in t.snapshots)),
                      None)
        if chosen is None:  # a snapshot outside any turn: its own change
            chosen = snap.Turn(key=target.key or target.sha, turn=None, snippet=target.snippet,
                               snapshots=(target,))
    else:
        raise UsageError("give a snapshot number or --turn")
    start, inner, notes = turn_start(chosen, by_sha)
    first, end = chosen.snapshots[0], chosen.snapshots[-1]
    # each step's files, then the turn's: all in one git process, between the trees
    pairs: list[tuple[Snapshot | None, Snapshot]] = [
        *([(None, first)] if start is None else []), *itertools.pairwise(inner), (start, end)]
    trees = [(a.tree if a else None, b.tree) for a, b in pairs]
    if all(new and (a is None or old) for (a, _), (old, new) in zip(pairs, trees, strict=True)):
        found = snap.diff_tree_pairs(repo, [(old, new or "") for old, new in trees])
        diffs = [[SnapshotFile(b.sha, f.path, f.status, f.added, f.deleted) for f in files]
                 for (_, b), files in zip(pairs, found, strict=True)]
    else:  # a snapshot without its tree (never from git log): between the commits
        diffs = [snap.diff_trees(repo, a.sha if a else None, b.sha) for a, b in pairs]
    steps = [Step(a, b, files) for (a, b), files in zip(pairs[:-1], diffs, strict=False)]
    files = diffs[-1]
    text = turn_patch(repo, start, end) if with_patch else None
    return TurnDiff(chosen, start, end, files, steps, notes, text)


# --------------------------------------------------------------------------- restore

@dataclass(frozen=True)
class RestorePlan:
    workspace: Path
    repo: Path
    target: Snapshot
    head: str  # the side repo's HEAD when planned (it must not move)
    change: list[str]  # files whose content or mode differs from the snapshot
    create: list[str]  # files in the snapshot, absent from the workspace
    delete: list[str]  # files in the workspace, absent from the snapshot
    unchanged: int
    user_repo: Path | None
    user_changes: list[str]  # `git status --porcelain` lines of the user's repo
    protected: list[str]  # workspace paths restore leaves alone (the toolkit's outputs)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (path, why), never touched

    @property
    def nothing_to_do(self) -> bool:
        return not (self.change or self.create or self.delete)


@dataclass(frozen=True)
class RestoreResult:
    plan: RestorePlan
    written: int
    deleted: int
    dirs_removed: list[str]
    refused: list[tuple[str, str]] = field(default_factory=list)  # the plan's, and any new


# --------------------------------------------------------------------------- path rules

# Code points HFS+ ignores in names, so ".g\u200cit" is ".git" there (git's is_hfs_dotgit).
_HFS_IGNORED = frozenset([*range(0x200C, 0x2010), *range(0x202A, 0x202F),
                          *range(0x206A, 0x2070), 0xFEFF])


def _dotgit_like(name: str, want: str, short: str) -> bool:
    """Whether a path component names ``want`` (".git", ".gitmodules") on some file system
    git protects: any case, HFS+ ignorable code points, NTFS trailing dots and spaces, the
    8.3 short name (``git~1``), or a backslash-separated part on NTFS."""
    for part in name.split("\\"):
        folded = "".join(ch for ch in part if ord(ch) not in _HFS_IGNORED)
        folded = unicodedata.normalize("NFC", folded).casefold().rstrip(". ")
        if folded in (want, short) or folded.startswith(want + ":"):
            return True
    return False


def tree_path_problem(path: str, mode: str) -> str | None:
    """Why git's ``verify_path`` (with its HFS and NTFS protections) refuses a snapshot path,
    or None when it is a plain relative path."""
    if "\0" in path:
        return "a NUL in its name"
    if path.startswith("/"):
        return "an absolute name"
    for part in path.split("/"):
        if part == "":
            return "an empty name or a slash inside a name"
        if part in (".", ".."):
            return f"a '{part}' component"
        if _dotgit_like(part, ".git", "git~1"):
            return "a '.git' component"
    last = path.rsplit("/", 1)[-1]
    if mode == "120000" and _dotgit_like(last, ".gitmodules", "gitmod~1"):
        return "a symlink named .gitmodules"
    return None


def _link_above(ws: Path, rel: str) -> tuple[str, str] | None:
    """The first folder above ``rel`` in the workspace that is a symlink, as (its workspace
    path, what it points at shown with where it resolves), or None when every existing folder
    above is a real folder. A missing folder, or a file where the path needs a folder, ends
    the walk: the restore makes a real folder there."""
    parts = rel.split("/")[:-1]
    cur = ws
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            real = Path(os.path.realpath(cur))
            where = "inside" if within(real, ws) else "outside"
            return "/".join(parts[:i + 1]), f"{real} ({where} the workspace)"
        if not stat.S_ISDIR(st.st_mode):
            return None
    return None


def _ls_tree(repo: Path, sha: str) -> tuple[dict[str, tuple[str, str, int | None]],
                                             list[tuple[str, str]]]:
    """path -> (mode, blob id, size) of every file in a snapshot's tree, and the paths git
    would refuse, with why (see :func:`tree_path_problem`; a path that is both a file and a
    folder, or listed twice, is refused too)."""
    proc = snap.run_git([f"--git-dir={repo}", "ls-tree", "-r", "-t", "-l", "-z", "--full-tree",
                         sha], what=repo)
    out = proc.stdout.decode("utf-8", "surrogateescape")
    files: dict[str, tuple[str, str, int | None]] = {}
    bad: dict[str, str] = {}
    records = [(*rec.split("\t", 1)[0].split(), rec.split("\t", 1)[1])
               for rec in out.split("\0") if rec]
    trees = {""} | {path for _, kind, _, _, path in records if kind == "tree"}
    for mode, kind, oid, size, path in records:
        if kind not in ("blob", "commit"):
            continue
        problem = tree_path_problem(path, mode)
        if problem is None and path.rpartition("/")[0] not in trees:
            problem = "a slash inside a name"  # one entry named "a/b", not a folder "a"
        if problem is None and path in files:
            problem = "listed twice in the snapshot"
        if problem is not None:
            bad[path] = problem
            files.pop(path, None)
            continue
        if kind == "blob":
            files[path] = (mode, oid, int(size) if size.isdecimal() else None)
    folders = {p.rsplit("/", 1)[0] for p in files if "/" in p}
    folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
    for path in [p for p in files if p in folders]:
        bad[path] = "both a file and a folder in the snapshot"
        del files[path]
        for other in [q for q in files if q.startswith(path + "/")]:
            bad[other] = "both a file and a folder in the snapshot"
            del files[other]
    return files, sorted(bad.items())


def _would_track(repo: Path, workspace: Path) -> list[str]:
    """Every file ``git add -A`` would pick up now (excludes and .gitignore honoured)."""
    with tempfile.TemporaryDirectory(prefix="toolkit-idx-") as tmp:
        proc = snap.run_git([f"--git-dir={repo}", f"--work-tree={workspace}", "ls-files", "-z",
                             "--others", "--exclude-standard"], cwd=workspace,
                            extra_env={"GIT_INDEX_FILE": str(Path(tmp) / "index")}, what=repo)
    names = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    return [n for n in names if n and not n.endswith("/")]


def _blob_of(path: Path) -> tuple[str, str] | None:
    """(mode, blob id) of a workspace file as git would store it; None if absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        data = os.fsencode(os.readlink(path))
        mode = "120000"
    elif stat.S_ISREG(st.st_mode):
        data = path.read_bytes()
        mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
    else:
        return None
    from toolkit.sources.history import blob_id

    return mode, blob_id(data)


def user_repo_changes(workspace: Path, protected: list[str]) -> tuple[Path | None, list[str]]:
    """The user's own git repository holding the workspace, and its uncommitted changes and
    untracked files (``git status --porcelain``), the toolkit's state folder left out."""
    proc = snap.run_git(["rev-parse", "--show-toplevel"], cwd=workspace, check=False)
    if proc.returncode != 0:
        return None, []
    top = Path(proc.stdout.decode("utf-8", "surrogateescape").strip())
    st = snap.run_git(["--no-optional-locks", "status", "--porcelain=v1", "-z"], cwd=workspace,
                      what=top)
    lines = []
    ws_rel = ""
    with contextlib.suppress(ValueError):
        ws_rel = workspace.resolve().relative_to(top.resolve()).as_posix()
    skip = [f"{ws_rel}/{p}".lstrip("/") if ws_rel not in ("", ".") else p for p in protected]
    for rec in st.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if len(rec) < 4:
            continue
        path = rec[3:]
        if any(path == s.rstrip("/") or path.startswith(s.rstrip("/") + "/") for s in skip):
            continue
        lines.append(rec)
    return top, lines


def _protected(cfg: Config) -> list[str]:
    """Workspace paths a restore leaves alone, each with everything below it: the default
    ``.toolkit/`` and the toolkit's own outputs (:meth:`Config.outputs`: its state folder,
    store, caches, handoff state, site and the site's ``.build`` folder) wherever the
    configuration puts them. A path is taken as named (its last part not followed), so a
    link the user made there is left alone too."""
    out = {".toolkit"}
    workspace = cfg.workspace.resolve()
    for path in cfg.outputs():
        try:
            path = Path(os.path.abspath(path))
            rel = (path.parent.resolve() / path.name).relative_to(workspace).as_posix()
        except (ValueError, OSError):
            continue  # outside the workspace: a restore never goes there
        if rel not in ("", "."):
            out.add(rel)
    return sorted(out)


def plan_restore(cfg: Config, n: int) -> RestorePlan:
    """What restoring snapshot #n would do (nothing is changed)."""
    repo = side_repo(cfg)
    workspace = cfg.workspace.resolve()
    snaps = snap.list_snapshots(repo)
    target = _pick(snaps, n)
    head = snaps[0].sha
    protected = _protected(cfg)

    def guarded(p: str) -> bool:
        return any(p == x or p.startswith(x + "/") for x in (".git", *protected))

    refused: dict[str, str] = {}
    tree, bad = _ls_tree(repo, target.sha)
    head_tree, head_bad = _ls_tree(repo, head)
    for path, why in bad + head_bad:
        refused.setdefault(path, f"git refuses this path: {why}")
    want = {p: v for p, v in tree.items() if not guarded(p)}
    now = set(_would_track(repo, workspace))
    now |= {p for p in head_tree if os.path.lexists(workspace / p)}
    now = {p for p in now if not guarded(p) and p not in refused}
    delete = {p for p in now if p not in want}
    # A path below a symlinked folder is not a workspace file (git never follows a link);
    # it is restored only when the restore deletes that link first.
    links: dict[str, tuple[str, str] | None] = {}

    def link_kept(path: str) -> tuple[str, str] | None:
        if path not in links:
            found = _link_above(workspace, path)
            links[path] = found if found and found[0] not in delete else None
        return links[path]

    for path in sorted(delete):
        if _link_above(workspace, path) is None:
            continue
        delete.discard(path)  # it goes with its link, or the link stays and so does it
        found = link_kept(path)
        if found is not None:
            refused[path] = (f"below the symlink {found[0]} -> {found[1]}; restore never "
                             "deletes through a link")
    change, create = [], []
    unchanged = 0
    for path, (mode, oid, size) in sorted(want.items()):
        if mode == "160000":
            continue
        found = link_kept(path)
        if found is not None:
            refused[path] = (f"below the symlink {found[0]} -> {found[1]}; restore never "
                             "writes through a link")
            continue
        full = workspace / path
        if _link_above(workspace, path) is not None:  # its link is deleted first
            create.append(path)
            continue
        try:
            st = os.lstat(full)
        except OSError:
            create.append(path)
            continue
        if (size is not None and stat.S_ISREG(st.st_mode) and st.st_size != size
                and mode != "120000"):
            change.append(path)
            continue
        if _blob_of(full) == (mode, oid):
            unchanged += 1
        else:
            change.append(path)
    user_repo, user_changes = user_repo_changes(workspace, protected)
    return RestorePlan(workspace, repo, target, head, change, create, sorted(delete), unchanged,
                       user_repo, user_changes, protected, sorted(refused.items()))


def refuse_if_dirty(plan: RestorePlan, force: bool) -> None:
    """RefusedError when the user's own repository has uncommitted work (unless forced)."""
    if plan.user_changes and not force:
        n = len(plan.user_changes)
        raise RefusedError(
            f"the workspace's git repository has {n} uncommitted change{'s' if n != 1 else ''}"
            " (git status); nothing restored", path=plan.user_repo,
            hint="Commit or stash them first, or pass --force to restore anyway")


def refuse_if_unchangeable(plan: RestorePlan) -> None:
    """RefusedError, before the first deletion, when a workspace folder the restore deletes
    in or writes to cannot be changed (read-only or unreadable; FAULTS G13): a file git
    replaces or deletes goes from its folder, a new one is made in the nearest folder that
    exists, a folder deleted goes with everything in it. Met part-way, such a folder left
    the workspace mixed between two snapshots. Paths below a symlinked folder are not
    followed (the link itself is in the plan, or the path is refused)."""
    from toolkit.safewrite import check_changeable

    def real_folder(path: Path) -> bool:  # (not a link; one we cannot look at: not known)
        try:
            return stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            return False

    ws = plan.workspace
    folders: set[Path] = set()
    for rel in plan.delete + plan.change + plan.create:
        path = ws / rel
        if real_folder(path):  # deleted whole (rmtree, or by git)
            for top, subs, _files in os.walk(path):
                folders.add(Path(top))
                folders.update(Path(top) / sub for sub in subs)
        parent = path.parent
        while parent != ws and not real_folder(parent):
            parent = parent.parent  # (made by the checkout, or a link the restore deletes)
        folders.add(parent)
    for folder in sorted(folders):
        check_changeable(folder, "nothing restored")


def _open_folder(ws_fd: int, parts: list[str]) -> int:
    """A handle on the workspace folder ``parts``, opened one name at a time without following
    a symlink (OSError ELOOP or ENOTDIR when one is on the way)."""
    fd = os.dup(ws_fd)
    try:
        for part in parts:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _delete(ws_fd: int, rel: str) -> bool:
    """Delete a workspace file (a symlink itself, a folder with what is in it) without
    following any link; False when it is gone already."""
    *parents, name = rel.split("/")
    try:
        fd = _open_folder(ws_fd, parents)
    except FileNotFoundError:
        return False
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
        return True
    finally:
        os.close(fd)


def _written(ws: Path, rel: str, mode: str) -> bool:
    """Whether the checkout left ``rel`` in the workspace as the kind of file ``mode`` says."""
    if _link_above(ws, rel) is not None:
        return False
    try:
        st = os.lstat(ws / rel)
    except OSError:
        return False
    return stat.S_ISLNK(st.st_mode) if mode == "120000" else stat.S_ISREG(st.st_mode)


def _holds(ws: Path, rel: str, mode: str, oid: str) -> bool:
    """Whether ``rel`` in the workspace is the snapshot's version: its kind, and its bytes
    (a link's target) as git's blob id (a file git could not replace is there, with its old
    bytes). A SHA-256 repository's ids are not SHA-1's: there, by kind only."""
    from toolkit.sources.history import blob_id

    if not _written(ws, rel, mode):
        return False
    if len(oid) != 40:
        return True
    path = ws / rel
    try:
        data = os.fsencode(os.readlink(path)) if mode == "120000" else path.read_bytes()
    except OSError:
        return False
    return blob_id(data) == oid


def apply_restore(plan: RestorePlan, *, force: bool = False) -> RestoreResult:
    """Carry out a plan: delete what the snapshot does not have, then check out its files.

    Only the plan's paths are touched; refused paths are left alone. A deletion that would
    now have to pass a symlink (one made since planning) is refused instead."""
    refuse_if_dirty(plan, force)
    if snap.head_sha(plan.repo) != plan.head:
        raise ConflictError("a new snapshot was taken since the restore was planned; "
                            "nothing restored", path=plan.repo,
                            hint="Run the command again")
    refuse_if_unchangeable(plan)
    ws = plan.workspace
    refused = list(plan.refused)
    # Delete first (then check out): a path that is a file now and a folder in the snapshot,
    # or the other way round, is then free for the checkout.
    deleted = 0
    parents: set[str] = set()
    ws_fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in plan.delete:
            try:
                if not _delete(ws_fd, rel):
                    continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                refused.append((rel, ("a symlink appeared above it since the plan; restore "
                                      "never deletes through a link")))
                continue
            deleted += 1
            parts = rel.split("/")[:-1]
            parents.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
        removed = []
        for d in sorted(parents, key=lambda q: q.count("/"), reverse=True):
            *up, name = d.split("/")
            try:
                fd = _open_folder(ws_fd, up)
            except OSError:
                continue
            try:
                os.rmdir(name, dir_fd=fd)  # only succeeds when empty (and not a link)
                removed.append(d)
            except OSError:
                pass
            finally:
                os.close(fd)
    finally:
        os.close(ws_fd)
    written = 0
    paths = plan.change + plan.create
    if paths:
        with tempfile.TemporaryDirectory(prefix="toolkit-idx-") as tmp:
            proc = snap.run_git(
                ["--literal-pathspecs", f"--git-dir={plan.repo}", f"--work-tree={ws}",
                 "checkout", plan.target.sha, "--pathspec-from-file=-", "--pathspec-file-nul"],
                cwd=ws, input=b"\0".join(os.fsencode(p) for p in paths),
                extra_env={"GIT_INDEX_FILE": str(Path(tmp) / "index")}, check=False)
        if proc.returncode != 0:
            # the deletions are done and git wrote what it could: say so, and how to finish
            modes, _ = _ls_tree(plan.repo, plan.target.sha)
            done = sum(1 for p in paths if _holds(ws, p, *modes[p][:2]))
            raise ToolkitError(
                f"restore of snapshot #{plan.target.position} stopped part-way: {deleted} deleted, "
                f"{done} of {len(paths)} file(s) written; git checkout failed: "
                f"{snap.git_error(proc)}", path=ws,
                hint="Fix what git names, then run the same restore again with --force (the "
                     "workspace now differs from the last snapshot); it writes the rest")
        modes, _ = _ls_tree(plan.repo, plan.target.sha)
        written = sum(1 for p in paths if _written(ws, p, modes[p][0]))
        removed = [d for d in removed if not (ws / d).is_dir()]  # the checkout refilled it
    if snap.head_sha(plan.repo) != plan.head:  # we never move it; someone else did
        raise ConflictError("the side repo's HEAD moved during the restore", path=plan.repo)
    return RestoreResult(plan, written, deleted, sorted(removed), refused)
