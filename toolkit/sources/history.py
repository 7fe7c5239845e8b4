"""Read-only reader of past Smith Ledger versions, from every place one survives:

* the git history of the project repository (every commit that changed one of the five ledger
  files), read with one ``git log`` and ``git cat-file --batch-check``/``--batch`` processes,
  never one process per file;
* ``ledger/archive/<YYYY-MM-DD-HHMMSS>/`` (``/smith-ledger reset``) and
  ``ledger/.backups/reconcile-<YYYY-MM-DD-HHMMSS>/`` (reconcile) copies;
* the vault as captured in CodeSmith turn snapshots (the side repo's trees).

A ledger *state* is the five files' git blob ids (``""`` for a missing file); equal states
have equal entries, so each distinct blob is parsed once. A folder's file that is there but
cannot be read (no permission, over the size limit) is not "missing": its id is ``""`` too,
but its name is listed in ``FolderVersion.unread``, and the history takes it as it was in the
version before (an unreadable file is unknown, never a file whose entries were all removed).
Nothing here writes anything.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import DataError
from toolkit.ledger.codec import title_key
from toolkit.records import LEDGER_FILES, LedgerEntry, Problem
from toolkit.source import asked_once
from toolkit.sources.snapshots import run_git

FILES: tuple[str, ...] = LEDGER_FILES
State = tuple[str, ...]  # one blob id per ledger file, "" when absent
EMPTY_STATE: State = ("",) * len(FILES)
_FOLDER_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[-_T ]?(\d{2})(\d{2})(\d{2})")
_SEP = "\x1f"
_REC = "\x1e"


def blob_id(data: bytes) -> str:
    """The git blob id of some bytes (what ``git hash-object`` prints, without filters). The
    header and the bytes are hashed in turn: a big ledger file is not copied to prepend it."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def file_blob_id(path: Path, max_bytes: int | None) -> str | None:
    """The git blob id of a file's bytes, read a MB at a time (never held whole), the file
    refused as :func:`~toolkit.textio.read_bytes` refuses it (DataError). None when the file
    changed size while it was read (the id's header holds the size): a caller that needs
    the bytes reads them again."""
    from toolkit.textio import read_chunks

    chunks = read_chunks(path, max_bytes)
    first = next(chunks, b"")  # (the refusals come with the first chunk)
    try:
        size = path.stat().st_size
    except OSError:
        return None
    h = hashlib.sha1(b"blob %d\0" % size)
    h.update(first)
    read = len(first)
    for more in chunks:
        h.update(more)
        read += len(more)
    return h.hexdigest() if read == size else None


def entry_title_key(title: str | None) -> str:
    """An entry's identity within its file: its :func:`toolkit.ledger.codec.title_key` (how
    titles compare everywhere), ``[untitled]`` when it has no title."""
    return title_key(title) or "[untitled]"


def entry_keys(file: str, titles: Iterable[str | None]) -> list[str]:
    """``<file>/<title key>`` for each entry of one file (its titles in file order), ``#2``,
    ``#3``... for repeats."""
    seen: dict[str, int] = {}
    out = []
    for title in titles:
        base = f"{file}/{entry_title_key(title)}"
        n = seen.get(base, 0) + 1
        seen[base] = n
        out.append(base if n == 1 else f"{base}#{n}")
    return out


def text_hash(e: LedgerEntry) -> str:
    """What "edited" compares: title as written, category, context and pattern (not the date,
    confidence, count or evidence, which reinforcement changes)."""
    parts = [e.title or "", e.category or "", e.context or "", e.pattern or ""]
    return hashlib.sha1("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


# text_hash in DuckDB's SQL, of a row with those columns (for rows copied in the store).
TEXT_HASH_SQL = ("substr(sha1(concat_ws(chr(0), coalesce(title, ''), coalesce(category, ''), "
                 "coalesce(context, ''), coalesce(pattern, ''))), 1, 16)")


# --------------------------------------------------------------------------- git

@dataclass(frozen=True)
class ProjectRepo:
    top: Path  # the work tree's top level
    rel: str  # the ledger folder relative to it, POSIX ("" when it is the top)
    head: str | None  # HEAD commit, None in a repo without commits

    def path_of(self, name: str) -> str:
        return f"{self.rel}/{name}" if self.rel else name


def _git_could_find_a_repo(folder: Path) -> bool:
    """Whether git's discovery, started in ``folder``, could find a repository: a ``.git``
    (folder, file or link) in it or a folder above it, or a folder above that could itself be
    a git folder (it has a ``HEAD``), on its path as given or as resolved. Where neither is, git
    finds none (the toolkit's git calls inherit no GIT_* variable), so no process is started
    just to be told so: every command that loads runs this check. A name that cannot be
    looked at counts as found (git then decides)."""
    try:
        starts = {folder.absolute(), folder.resolve()}
    except (OSError, RuntimeError):
        return True
    for start in starts:
        for place in (start, *start.parents):
            for name in (".git", "HEAD"):
                try:
                    os.lstat(place / name)
                    return True
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError:
                    return True
    return False


def find_project_repo(ledger_dir: Path) -> ProjectRepo | None:
    """The git repository holding the ledger folder (None when it is in none); asked once
    per refresh (``toolkit.source.asking_once``)."""
    return asked_once(("project-repo", str(ledger_dir)), lambda: _find_project_repo(ledger_dir))


def _find_project_repo(ledger_dir: Path) -> ProjectRepo | None:
    probe = ledger_dir
    while not probe.is_dir():
        if probe.parent == probe:
            return None
        probe = probe.parent
    if not _git_could_find_a_repo(probe):
        return None
    proc = run_git(["rev-parse", "--show-toplevel", "HEAD"], cwd=probe, check=False)
    lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    if not lines or not lines[0].startswith("/"):
        return None
    top = Path(lines[0]).resolve()
    head = lines[1].strip() if proc.returncode == 0 and len(lines) > 1 else None
    try:
        rel = ledger_dir.resolve().relative_to(top).as_posix()
    except ValueError:
        return None
    return ProjectRepo(top=top, rel="" if rel == "." else rel, head=head)


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    author_time: int
    commit_time: int
    author: str
    subject: str


def ledger_commits(repo: ProjectRepo) -> list[Commit]:
    """Every commit reachable from HEAD that changed one of the five ledger files, parents
    before children (``--topo-order --reverse``)."""
    if repo.head is None:
        return []
    fmt = _SEP.join(["%H", "%P", "%at", "%ct", "%an", "%s"]) + _REC
    paths = [repo.path_of(f"{k}.md") for k in FILES]
    proc = run_git(["log", "--topo-order", "--reverse", "--full-history", "--no-color",
                    f"--format={fmt}", "HEAD", "--", *paths], cwd=repo.top, what=repo.top)
    out = []
    for rec in proc.stdout.decode("utf-8", "replace").split(_REC):
        rec = rec.strip("\n")
        if not rec:
            continue
        sha, parents, at, ct, author, subject = (rec.split(_SEP) + [""] * 6)[:6]
        out.append(Commit(sha, tuple(parents.split()), int(at or 0), int(ct or 0), author,
                          subject))
    return out


def tree_states(git_args: list[str], cwd: Path | None, revs: list[str], rel: str,
                what: Path) -> dict[str, tuple[State, tuple[int, ...]]]:
    """The ledger state (and file sizes) at each revision, by one batch-check process.
    ``git_args`` selects the repository (``["--git-dir=..."]`` or ``[]`` with ``cwd``)."""
    names = []
    for rev in revs:
        for k in FILES:
            names.append(f"{rev}:{rel}/{k}.md" if rel else f"{rev}:{k}.md")
    if not names:
        return {}
    data = "".join(n + "\n" for n in names).encode("utf-8", "surrogateescape")
    proc = run_git([*git_args, "cat-file", "--batch-check"], cwd=cwd, input=data, what=what)
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    if len(lines) != len(names):
        raise DataError("git cat-file --batch-check gave an unexpected answer", path=what)
    out: dict[str, tuple[State, tuple[int, ...]]] = {}
    n = len(FILES)
    for i, rev in enumerate(revs):
        oids, sizes = [], []
        for line in lines[i * n:(i + 1) * n]:
            parts = line.split(" ")
            if len(parts) == 3 and parts[1] == "blob":
                oids.append(parts[0])
                sizes.append(int(parts[2]))
            else:
                oids.append("")
                sizes.append(0)
        out[rev] = (tuple(oids), tuple(sizes))
    return out


def read_blobs(git_args: list[str], cwd: Path | None, oids: list[str], what: Path
               ) -> Generator[tuple[str, bytes | None], None, None]:
    """Each of ``oids`` with its contents (None: no such blob), in order, from one
    ``git cat-file --batch`` process, one at a time (``snapshots.cat_blobs``)."""
    from toolkit.sources.snapshots import cat_blobs

    return cat_blobs(git_args, oids, cwd=cwd, what=what)


# --------------------------------------------------------------------------- folder copies

@dataclass
class FolderVersion:
    """A ledger as found in a folder: the working files, an archive or a backup copy."""

    source: str  # "working", "archive" or "backup"
    name: str  # folder name ("working" for the live files)
    path: Path
    ts: dt.datetime | None
    state: State
    contents: dict[str, bytes] = field(default_factory=dict)  # blob id -> bytes (if kept)
    problems: list[Problem] = field(default_factory=list)
    # the files there that could not be read (their id in ``state`` is ""): unknown, not absent
    unread: tuple[str, ...] = ()


def folder_time(name: str) -> dt.datetime | None:
    """``2026-05-03-221504`` (also inside ``reconcile-...``) -> a datetime, as written."""
    m = _FOLDER_TIME.search(name)
    if not m:
        return None
    try:
        year, month, day, hour, minute, second = (int(g) for g in m.groups())
        return dt.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None


def read_folder(path: Path, source: str, name: str, max_bytes: int | None,
                keep: Callable[[str, str], bool] | None = None) -> FolderVersion:
    """The ledger files of a folder, and their bytes. ``keep(kind, blob id)``: whether the
    bytes of a file are wanted (its id is read first, a MB at a time; a content already
    known is then never held whole: at 50,000 entries, 29 MB); None: all are. A file that is
    there but cannot be looked at or read, or is over the size limit, is listed in ``unread``
    with a problem (its id is "", as for an absent file, but it is not absent)."""
    from toolkit.textio import read_bytes

    oids: list[str] = []
    contents: dict[str, bytes] = {}
    problems: list[Problem] = []
    unread: list[str] = []
    newest = 0.0
    for k in FILES:
        p = path / f"{k}.md"
        try:
            if not p.is_file():  # (pathlib raises EACCES: a folder that cannot be searched)
                oids.append("")
                continue
            oid = file_blob_id(p, max_bytes) if keep is not None else None
            if oid is None or keep is None or keep(k, oid):
                data = read_bytes(p, max_bytes)
                oid = blob_id(data)  # (of the bytes held, should the file have changed)
                contents[oid] = data
            newest = max(newest, p.stat().st_mtime)
        except (DataError, OSError) as exc:
            why = exc.message if isinstance(exc, DataError) else (
                f"cannot read: {exc.strerror or exc}")
            problems.append(Problem("history", str(p), None, why))
            unread.append(k)
            oids.append("")
            continue
        oids.append(oid)
    ts = folder_time(name) if source != "working" else None
    if ts is None and newest:
        ts = dt.datetime.fromtimestamp(newest, dt.UTC).replace(tzinfo=None,
                                                                        microsecond=0)
        if source != "working":
            problems.append(Problem("history", str(path), None,
                                    "folder name has no YYYY-MM-DD-HHMMSS time; "
                                    "using the files' modification time"))
    return FolderVersion(source, name, path, ts, tuple(oids), contents, problems, tuple(unread))


def ledger_copies(ledger_dir: Path, max_bytes: int | None,
                  keep: Callable[[str, str], bool] | None = None) -> list[FolderVersion]:
    """``archive/*/`` and ``.backups/reconcile-*/`` copies that hold at least one ledger file
    (read or not), oldest first (``keep``: see :func:`read_folder`)."""
    found: list[FolderVersion] = []
    for sub, source, pattern in (("archive", "archive", "*"),
                                 (".backups", "backup", "reconcile-*")):
        base = ledger_dir / sub
        if not base.is_dir():
            continue
        for d in sorted(base.glob(pattern)):
            if not d.is_dir() or d.is_symlink():
                continue
            fv = read_folder(d, source, d.name, max_bytes, keep)
            if any(fv.state) or fv.unread:
                found.append(fv)
    found.sort(key=lambda f: (f.ts or dt.datetime.min, f.source, f.name))
    return found


def copy_paths(ledger_dir: Path) -> list[Path]:
    """Folders and files whose stat changes mean the copies changed (for fingerprints)."""
    out: list[Path] = []
    for sub, pattern in (("archive", "*"), (".backups", "reconcile-*")):
        base = ledger_dir / sub
        if not base.is_dir():
            continue
        out.append(base)
        for d in sorted(base.glob(pattern)):
            out.append(d)
            out.extend(d / f"{k}.md" for k in FILES)
    return out
