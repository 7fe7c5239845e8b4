"""Ledger history: every past version of the Smith Ledger in the store, and what changed.

Where past ledgers come from (``source`` in ``ledger_versions``):

``git``       every commit reachable from HEAD of the project repository (the git repo that
              holds the vault) that changed one of the five ledger files;
``working``   the ledger files on disk, when they differ from HEAD (or when there is no git);
``archive``   ``ledger/archive/<YYYY-MM-DD-HHMMSS>/`` copies (``/smith-ledger reset``);
``backup``    ``ledger/.backups/reconcile-<YYYY-MM-DD-HHMMSS>/`` copies (reconcile);
``snapshot``  the vault as captured in CodeSmith turn snapshots of the workspace (a version
              only where the ledger differs from the previous snapshot);
``base``      (hidden) a parent commit's ledger that no listed commit produced, kept only so
              a commit can be compared with it.

Timelines (``timeline``), and what each version is compared with (``base_version_id``):

``main``      the shared history: each git commit against its first parent's ledger (so a
              commit's changes are exactly what it changed, merges included), then the
              working files against HEAD. A vault with no git history has the copies
              (oldest first) and then the working files here instead, each against the one
              before it.
``copies``    (only when git history exists) archive and backup copies, by the time in their
              folder name, each against the newest git version at or before that time: a copy
              usually repeats a committed state, and its changes show where it does not.
``snapshots`` snapshot versions in snapshot order, each against the one before; the first
              against the newest git version at or before its time (an empty ledger when
              there is no git history).

Entry identity across versions is (file, NFC-normalised case-folded title): a renamed entry
is a removal and an addition. ``ledger_changes`` has one row per change of one entry between
a version and its base: added, removed, promoted, demoted (confidence up/down), reinforced
(reflection count up), edited (title as written, category, context or pattern changed).

Incremental: commits already in the store are never read again; each distinct file content
(git blob) is parsed once and its rows reused by every version that holds it. New contents'
entries are written staged and committed a batch at a time; the load's last transaction
replaces the versions and makes them count, so a load killed before it changed nothing a
reader sees, nor the history's recorded state, and the next load does it again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.argrules import LIMIT
from toolkit.errors import DataError, NotFoundError, UsageError
from toolkit.source import Source, SourceResult, fingerprint_paths

if TYPE_CHECKING:
    from toolkit.config import Config
    from toolkit.records import Problem
    from toolkit.store import Store

LOADER_VERSION = "history-3"  # bump to make every store re-read its history
CHANGE_KINDS: tuple[str, ...] = ("added", "removed", "promoted", "demoted", "reinforced",
                                 "edited")

_CHANGES_VIEW = """\
CREATE VIEW ledger_changes AS
WITH v AS (
    SELECT version_id, base_version_id, timeline, seq, source, ref, ts, subject
    FROM ledger_versions WHERE source <> 'base'),
keys AS (
    SELECT v.version_id, e.entry_key
    FROM v JOIN ledger_entry_versions e ON e.version_id = v.version_id
    UNION
    SELECT v.version_id, e.entry_key
    FROM v JOIN ledger_entry_versions e ON e.version_id = v.base_version_id),
pairs AS (
    SELECT v.timeline, v.seq, v.version_id, v.base_version_id, v.source, v.ref, v.ts,
           v.subject, k.entry_key,
           coalesce(n.file, o.file) AS file, coalesce(n.title, o.title) AS title,
           o.entry_key IS NOT NULL AS had, n.entry_key IS NOT NULL AS has,
           o.confidence AS old_confidence, n.confidence AS new_confidence,
           o.reflections AS old_reflections, n.reflections AS new_reflections,
           o.text_hash AS old_text, n.text_hash AS new_text,
           CASE o.confidence WHEN 'low' THEN 1 WHEN 'medium' THEN 2 WHEN 'high' THEN 3 END
               AS old_rank,
           CASE n.confidence WHEN 'low' THEN 1 WHEN 'medium' THEN 2 WHEN 'high' THEN 3 END
               AS new_rank
    FROM keys k JOIN v ON v.version_id = k.version_id
    LEFT JOIN ledger_entry_versions n
           ON n.version_id = v.version_id AND n.entry_key = k.entry_key
    LEFT JOIN ledger_entry_versions o
           ON o.version_id = v.base_version_id AND o.entry_key = k.entry_key)
SELECT p.timeline, p.seq, p.version_id, p.base_version_id, p.source, p.ref, p.ts, p.subject,
       c.change, c.change_order, p.entry_key, p.file, p.title,
       p.old_confidence, p.new_confidence, p.old_reflections, p.new_reflections
FROM pairs p JOIN (VALUES ('added', 1), ('removed', 2), ('promoted', 3), ('demoted', 4),
                          ('reinforced', 5), ('edited', 6)) c(change, change_order)
  ON CASE c.change
       WHEN 'added' THEN p.has AND NOT p.had
       WHEN 'removed' THEN p.had AND NOT p.has
       WHEN 'promoted' THEN p.had AND p.has AND p.new_rank > p.old_rank
       WHEN 'demoted' THEN p.had AND p.has AND p.new_rank < p.old_rank
       WHEN 'reinforced' THEN p.had AND p.has AND p.new_reflections > p.old_reflections
       WHEN 'edited' THEN p.had AND p.has AND p.new_text IS DISTINCT FROM p.old_text
     END;
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("m100_history_ledger", """
CREATE TABLE ledger_versions (
    version_id VARCHAR,       -- git:<sha> | working | archive:<folder> | backup:<folder>
                              -- | snapshot:<key> | base:<sha>
    source VARCHAR,           -- git | working | archive | backup | snapshot | base (hidden)
    timeline VARCHAR,         -- main | copies | snapshots
    ref VARCHAR,              -- commit SHA, folder name, snapshot label, or 'working'
    ts TIMESTAMP,             -- commit time, folder-name time, snapshot time, files' mtime (UTC)
    author VARCHAR,           -- commit author (git)
    subject VARCHAR,          -- commit subject or snapshot label
    seq INTEGER,              -- order within the timeline, 1 = oldest
    base_version_id VARCHAR,  -- the version this one is compared with; NULL = an empty ledger
    state VARCHAR,            -- the five files' git blob ids ('' = absent), comma-separated
    entries INTEGER, high INTEGER, medium INTEGER, low INTEGER,
    unrated INTEGER,          -- entries with a missing or unknown confidence
    location VARCHAR);        -- the repository or folder it was read from
CREATE TABLE ledger_entry_versions (
    version_id VARCHAR,
    entry_key VARCHAR,        -- <file>/<NFC case-folded title>[#n]: identity across versions
    file VARCHAR, title VARCHAR, date VARCHAR, category VARCHAR, confidence VARCHAR,
    reflections INTEGER,      -- Observations (form A) or the Source reflections count (form B)
    source_reflections VARCHAR,
    text_hash VARCHAR,        -- of title, category, context, pattern: what "edited" compares
    context VARCHAR, pattern VARCHAR, evidence VARCHAR, related VARCHAR,
    form VARCHAR, problems VARCHAR[],
    blob VARCHAR,             -- git blob id of the file content the entry was read from
    position INTEGER, line INTEGER);
CREATE TABLE _history_blobs (   -- every ledger file content parsed, even with no entries
    file VARCHAR, blob VARCHAR, entries INTEGER, problem VARCHAR);
""" + _CHANGES_VIEW + """"""),
    # Entries are stored once per distinct file content (git blob), not once per version:
    # ledger_entry_versions becomes a view over which contents each version holds.
    ("m102_history_entries_per_blob", """
DROP VIEW ledger_changes;
DROP TABLE ledger_entry_versions;
DELETE FROM ledger_versions;
DELETE FROM _history_blobs;
UPDATE _sources SET fingerprint = NULL WHERE source = 'history';
CREATE TABLE _history_version_files (version_id VARCHAR, file VARCHAR, blob VARCHAR);
CREATE TABLE _history_entries (
    file VARCHAR, blob VARCHAR, entry_key VARCHAR, title VARCHAR, date VARCHAR,
    category VARCHAR, confidence VARCHAR, reflections INTEGER, source_reflections VARCHAR,
    text_hash VARCHAR, context VARCHAR, pattern VARCHAR, evidence VARCHAR, related VARCHAR,
    form VARCHAR, problems VARCHAR[], position INTEGER, line INTEGER);
CREATE VIEW ledger_entry_versions AS
SELECT vf.version_id,
       e.entry_key,           -- <file>/<NFC case-folded title>[#n]: identity across versions
       e.file, e.title, e.date, e.category, e.confidence,
       e.reflections,         -- Observations (form A) or the Source reflections count (form B)
       e.source_reflections,
       e.text_hash,           -- of title, category, context, pattern: what "edited" compares
       e.context, e.pattern, e.evidence, e.related, e.form, e.problems,
       e.blob,                -- git blob id of the file content the entry was read from
       e.position, e.line
FROM _history_version_files vf
JOIN _history_entries e ON e.file = vf.file AND e.blob = vf.blob;
""" + _CHANGES_VIEW + """
"""),
]

# --------------------------------------------------------------------------- the loader

def _state_str(state: tuple[str, ...]) -> str:
    return ",".join(state)


def _vault_in_workspace(cfg: Config) -> str | None:
    try:
        rel = cfg.ledger_dir.resolve().relative_to(cfg.workspace.resolve()).as_posix()
    except (ValueError, OSError):
        return None
    return "" if rel == "." else rel


def _fingerprint(cfg: Config) -> tuple[str, str]:
    from toolkit.sources import history as hs
    from toolkit.sources.snapshots import head_sha, side_repo_for

    h = hashlib.sha256(LOADER_VERSION.encode())
    repo = hs.find_project_repo(cfg.ledger_dir)
    h.update(f"{repo}\n".encode())
    paths = [cfg.ledger_dir / f"{k}.md" for k in hs.FILES] + hs.copy_paths(cfg.ledger_dir)
    h.update(fingerprint_paths(paths).encode())
    side = side_repo_for(cfg.workspace, cfg.snapshots_home)
    h.update(f"{side}:{head_sha(side) if side.is_dir() else '-'}".encode())
    return str(cfg.ledger_dir), h.hexdigest()


@dataclass
class _Version:
    version_id: str
    source: str
    timeline: str
    ref: str
    ts: dt.datetime | None
    state: tuple[str, ...]
    location: str
    author: str | None = None
    subject: str | None = None
    seq: int = 0
    base: str | None = None
    unread: tuple[str, ...] = ()  # files of a folder that could not be read (see _carry_over)
    # the contents its entries are read from, None: ``state``. Each file that is unknown (a
    # committed or snapshotted one over the size limit, see _git_files; an unreadable
    # working one) is read as in the version it is compared with.
    files: tuple[str, ...] | None = None

    def read_from(self) -> tuple[str, ...]:
        return self.state if self.files is None else self.files


def _carry_over(state: tuple[str, ...], unread: tuple[str, ...], before: tuple[str, ...]
                ) -> tuple[str, ...]:
    """A version's state (a folder's, a commit's or a snapshot's) with each file that could
    not be read, or is over the size limit, taken as it was in ``before`` (the version it is
    compared with): such a file is unknown, so the history records no change of it, where an
    empty one would record every entry of it as removed."""
    from toolkit.sources.history import FILES

    if not unread:
        return state
    return tuple(old if k in unread else oid
                 for k, oid, old in zip(FILES, state, before, strict=True))


# what the history says of a file it could not read
TAKEN_AS_BEFORE = "; the history takes it as in the version before, not as removed"


def _blob_where(top: Path | str, rel: str, kind: str, oid: str) -> str:
    """Where a ledger file's content in a repository is, as a warning names it."""
    return f"{top}:{rel + '/' if rel else ''}{kind}.md (blob {oid[:12]})"


class _ReadBy:
    """The contents each version's entries are read from (:meth:`_Version.read_from`): this
    load's versions as they are made, a stored one read from the store when first asked."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.known: dict[str, tuple[str, ...]] = {}

    def add(self, version: _Version) -> None:
        self.known[version.version_id] = version.read_from()

    def __call__(self, version_id: str | None) -> tuple[str, ...]:
        from toolkit.sources.history import EMPTY_STATE, FILES

        if version_id is None:
            return EMPTY_STATE
        if version_id not in self.known:
            blobs = dict(self.store.conn.execute(
                "SELECT file, blob FROM _history_version_files WHERE version_id = ?",
                [version_id]).fetchall())
            self.known[version_id] = tuple(blobs.get(k, "") for k in FILES)
        return self.known[version_id]


def _git_files(version: _Version, sizes: dict[str, int], limit: int, read_by: _ReadBy,
               top: Path | str, rel: str, unread: list[tuple[str, str, str]]) -> None:
    """Set the contents a commit's or snapshot's entries are read from (its ``files``), and
    add it to ``read_by``: its own, but each file over the size limit (``sizes``: each
    blob's) as the version it is compared with reads it, ``unread`` told of it. Such a file
    is unknown: read as empty, every entry of it was recorded as removed by the commit and
    added again by the next one."""
    from toolkit.sources.history import FILES

    over = []
    for kind, oid in zip(FILES, version.state, strict=True):
        if oid and sizes.get(oid, 0) > limit:
            over.append(kind)
            unread.append((version.version_id, _blob_where(top, rel, kind, oid),
                           f"{sizes[oid]} bytes, over the size limit{TAKEN_AS_BEFORE}"))
    version.files = _carry_over(version.state, tuple(over), read_by(version.base)) \
        if over else None
    read_by.add(version)


def _taken_as_before(found: list[Problem], unread: tuple[str, ...]) -> list[Problem]:
    """A copy's problems, each about a file that could not be read saying how the history
    takes it."""
    from toolkit.records import Problem

    names = {f"{k}.md" for k in unread}
    return [Problem(p.source, p.path, p.line, p.message + TAKEN_AS_BEFORE)
            if Path(p.path).name in names else p
            for p in found]


# The entries of a content are written staged, their blob id behind this mark (no version holds
# such a blob, so no reader sees them), in batches each committed on its own; the load's last
# transaction takes the mark off and records the contents in _history_blobs. A load that never
# got there leaves marked rows only, which the next load deletes before it writes its own.
STAGED = "staged:"

_ENTRY_COLS = ("file", "blob", "entry_key", "title", "date", "category", "confidence",
               "reflections", "source_reflections", "text_hash", "context", "pattern",
               "evidence", "related", "form", "problems", "position", "line")


class _Blobs:
    """Ledger file contents (git blobs) parsed into entries, each content once ever: staged
    (see :data:`STAGED`) and committed a batch at a time, then :meth:`publish`-ed."""

    def __init__(self, store: Store, max_bytes: int, parses: Path | None = None) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self.parses = parses  # the parse cache the ledger source filled (the working files)
        self.known: set[tuple[str, str]] = set(store.conn.execute(
            "SELECT file, blob FROM _history_blobs").fetchall())
        self.entries: list[tuple[Any, ...]] = []
        self.blobs: list[tuple[str, str, int, str | None]] = []
        # the contents whose entries the ledger source stored (ledger_entries): kind -> blob
        state = (store.source_state("ledger") or {}).get("state") or {}
        blobs = state.get("blobs") if isinstance(state, dict) else None
        self.stored: dict[str, str] = blobs if isinstance(blobs, dict) else {}

    def wants(self, kind: str, oid: str) -> bool:
        """Whether the bytes of a file of ``kind`` with blob ``oid`` are to be parsed: not a
        content read before, nor the one whose rows the ledger source stored (copied)."""
        return (kind, oid) not in self.known and self.stored.get(kind) != oid

    def missing(self, versions: Iterable[_Version]) -> set[tuple[str, str]]:
        from toolkit.sources.history import FILES

        need = {(FILES[i], oid) for v in versions for i, oid in enumerate(v.read_from())
                if oid}
        return need - self.known

    def parse(self, kind: str, oid: str, data: bytes, where: str) -> None:
        from toolkit.sources import history as hs
        from toolkit.sources.smith import cached_parse, parse_ledger_bytes
        from toolkit.textio import check_utf8

        if len(data) > self.max_bytes:  # (a base version's: see _git_files)
            self.skip(kind, oid, where, f"{len(data)} bytes, over the size limit")
            return
        if self.stored.get(kind) == oid:  # the ledger source's rows: copied, not parsed
            del data  # (the caller keeps no other reference: the bytes go before the copy)
            self.copy_stored(kind, oid)
            return
        # The working files were just parsed by the ledger source: the same bytes at the same
        # path are not parsed twice (a cached parse is of UTF-8 bytes only).
        lf = cached_parse(self.parses, Path(where), kind, data) if self.parses else None
        if lf is None:
            try:
                check_utf8(data, where)
            except DataError as exc:
                self.skip(kind, oid, where, exc.message)
                return
            lf = parse_ledger_bytes(data, where, kind)
        from toolkit.store import ROW_BATCH

        # a batch of entries at a time, each built from its record (see _load_ledger)
        keys = hs.entry_keys(kind, lf.column("title"))
        for pos, key in enumerate(keys):
            e = lf.entry(pos)
            self.entries.append(
                (kind, STAGED + oid, key, e.title, e.date, e.category, e.confidence, e.reflections,
                 e.source_reflections, hs.text_hash(e), e.context, e.pattern, e.evidence,
                 e.related, e.form, list(e.problems), pos, e.line))
            if len(self.entries) >= ROW_BATCH:
                self.flush_entries()
        self.blobs.append((kind, oid, len(keys), None))
        self.known.add((kind, oid))

    def copy_stored(self, kind: str, oid: str) -> None:
        """The entries of ``kind`` with blob ``oid`` from ``ledger_entries``, which holds the
        parse of these very bytes (the working files, as the ledger source loaded them): one
        statement in the store, none of the entries built in Python."""
        from toolkit.sources import history as hs
        from toolkit.store import ROW_BATCH

        conn = self.store.conn
        # the titles a batch at a time, never all held (at 50,000 entries, 8 MB as rows)
        cursor = conn.execute(
            "SELECT title FROM ledger_entries WHERE file = ? ORDER BY position", [kind])
        keys = hs.entry_keys(kind, (t for batch in iter(lambda: cursor.fetchmany(ROW_BATCH), [])
                                    for (t,) in batch))
        self.flush_entries()  # the rows keep the order of the blobs read
        for at in range(0, len(keys), ROW_BATCH):  # a batch at a time: a small sort each
            stop = min(at + ROW_BATCH, len(keys))
            conn.execute(
                f"INSERT INTO _history_entries ({', '.join(_ENTRY_COLS)}) "
                "SELECT file, ?, (?::VARCHAR[])[position - ? + 1], title, date_raw, category, "
                f"confidence, reflections, source_reflections, {hs.TEXT_HASH_SQL}, context, "
                "pattern, evidence, related, form, problems, position, line "
                "FROM ledger_entries WHERE file = ? AND position >= ? AND position < ? "
                "ORDER BY position",
                [STAGED + oid, keys[at:stop], at, kind, at, stop])
            self.store.commit_staged()
        self.blobs.append((kind, oid, len(keys), None))
        self.known.add((kind, oid))

    def skip(self, kind: str, oid: str, where: str, why: str) -> None:
        message = f"{why}; its entries are left out of the history"
        self.blobs.append((kind, oid, 0, f"{where}\0{message}"))
        self.known.add((kind, oid))

    def flush_entries(self) -> None:
        """Write the entries built so far, staged, and commit them."""
        if self.entries:
            self.store.insert_rows("_history_entries", _ENTRY_COLS, self.entries)
            self.entries = []
            self.store.commit_staged()

    def publish(self, full: bool) -> None:
        """In the load's last transaction: the staged entries count (a full load's replace
        every earlier one) and the contents read are recorded."""
        self.flush_entries()
        conn = self.store.conn
        if full:
            conn.execute("DELETE FROM _history_entries WHERE NOT starts_with(blob, ?)",
                         [STAGED])
            conn.execute("DELETE FROM _history_blobs")
        conn.execute("UPDATE _history_entries SET blob = substr(blob, ?) "
                     "WHERE starts_with(blob, ?)", [len(STAGED) + 1, STAGED])
        self.store.insert_rows("_history_blobs", ("file", "blob", "entries", "problem"),
                               self.blobs)
        self.blobs = []


def _delete_versions(store: Store, where: str, params: list[Any] | None = None) -> None:
    store.conn.execute("DELETE FROM _history_version_files WHERE version_id IN "
                       f"(SELECT version_id FROM ledger_versions WHERE {where})", params or [])
    store.conn.execute(f"DELETE FROM ledger_versions WHERE {where}", params or [])


def _load_history(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
    """Load the history in two steps. First, with the store only read, the versions are worked
    out and the contents no earlier load read are parsed into staged entries, committed a batch
    at a time (see :data:`STAGED`). Then, in one last transaction, the versions are replaced
    and the staged entries made to count: a load stopped before that changed nothing a reader
    sees, nor the history's recorded state, and the next load does it again."""
    from toolkit.records import Problem
    from toolkit.sources import history as hs
    from toolkit.sources import snapshots as snap
    from toolkit.textio import max_file_bytes

    prev_state = (store.source_state("history") or {}).get("state") or {}
    # the staged rows of a load that never finished (no reader sees them)
    store.conn.execute("DELETE FROM _history_entries WHERE starts_with(blob, ?)", [STAGED])
    # the limit of every read, as the working files' (the default one when none is set)
    limit = max_file_bytes(cfg.max_file_bytes)
    cache = _Blobs(store, limit, cfg.parse_cache)
    problems: list[Problem] = []
    notes: list[str] = []
    new_versions: list[_Version] = []
    sizes: dict[str, int] = {}  # the size of each blob to read from a repository
    read_by = _ReadBy(store)

    # ---- git history of the project repository
    repo = hs.find_project_repo(cfg.ledger_dir)
    repo_key = f"{repo.top}|{repo.rel}" if repo else None
    if full:
        cache.known.clear()
    # the stored git and base versions are all dropped (below) on a full load or another repo
    keep_git = not (full or repo_key is None or prev_state.get("repo") != repo_key)
    commits_read: list[str] = []
    head_state: tuple[str, ...] | None = None
    by_state: dict[str, str] = {}
    git_count = 0
    commits: list[hs.Commit] = []
    seq_of: dict[str, int] = {}  # a commit's place on the main timeline
    stale: list[str] = []
    kept_git: list[tuple[dt.datetime | None, str]] = []  # (ts, ref) of stored versions kept
    # (version id, where, why) of each committed or snapshotted file over the size limit:
    # the stored versions' kept, and those of the versions made now (see _git_files)
    unread_git: list[tuple[str, str, str]] = []
    if repo is None:
        notes.append("ledger not in a git repository: no git versions")
    else:
        commits = hs.ledger_commits(repo)
        existing = {ref: (st, ts) for ref, st, ts in store.conn.execute(
            "SELECT ref, state, ts FROM ledger_versions WHERE source = 'git'").fetchall()
        } if keep_git else {}
        stored_bases = {vid for (vid,) in store.conn.execute(
            "SELECT version_id FROM ledger_versions WHERE source = 'base'").fetchall()
        } if keep_git else set()
        current = {c.sha for c in commits}
        stale = [ref for ref in existing if ref not in current]
        for ref, (st, ts) in existing.items():
            if ref in current:
                by_state.setdefault(st, f"git:{ref}")
                kept_git.append((ts, ref))
        kept_ids = {f"git:{ref}" for _ts, ref in kept_git} | stored_bases
        unread_git += [(vid, where, why) for vid, where, why in prev_state.get("unread", [])
                       if vid in kept_ids]
        new = [c for c in commits if c.sha not in existing]
        revs = [c.sha for c in new] + [c.parents[0] for c in new if c.parents]
        if repo.head:
            revs.append(repo.head)
        states = hs.tree_states([], repo.top, list(dict.fromkeys(revs)), repo.rel, repo.top)
        for c in new:
            by_state.setdefault(_state_str(states[c.sha][0]), f"git:{c.sha}")
        base_versions: dict[str, _Version] = {}
        for st, of_file in states.values():
            sizes.update(zip(st, of_file, strict=True))

        def made(version: _Version) -> _Version:
            _git_files(version, sizes, limit, read_by, repo.top, repo.rel, unread_git)
            return version

        for c in new:
            st = states[c.sha][0]
            base = None
            if c.parents:
                pst = states[c.parents[0]][0]
                if pst != hs.EMPTY_STATE:
                    base = by_state.get(_state_str(pst))
                    if base is None:  # a parent ledger no listed commit produced
                        base = f"base:{c.parents[0]}"
                        if base not in base_versions:
                            base_versions[base] = made(_Version(
                                base, "base", "main", c.parents[0], None, pst, str(repo.top)))
            new_versions.append(made(_Version(
                f"git:{c.sha}", "git", "main", c.sha,
                dt.datetime.fromtimestamp(c.commit_time, dt.UTC).replace(tzinfo=None),
                st, str(repo.top), c.author, c.subject, 0, base)))
        new_versions.extend(v for v in base_versions.values()
                            if v.version_id not in stored_bases)
        commits_read = [c.sha for c in new]
        git_count = len(commits)
        if repo.head:
            head_state = states[repo.head][0]
        seq_of = {c.sha: i for i, c in enumerate(commits, 1)}
        for v in new_versions:
            if v.source == "git":
                v.seq = seq_of[v.ref]
        if not commits:
            notes.append("no commit touches the ledger files")
    has_git = git_count > 0

    # ---- folder copies, the working files, turn snapshots (cheap: rebuilt on every load)
    copies = hs.ledger_copies(cfg.ledger_dir, limit, cache.wants)
    folders: list[Any] = []
    timeline = "copies" if has_git else "main"
    prev_id = None
    prev_copy: tuple[str, ...] = hs.EMPTY_STATE
    for fv in copies:
        problems.extend(_taken_as_before(fv.problems, fv.unread))
        if not any(fv.state):  # nothing of it could be read: no version, only its warnings
            continue
        vid = f"{fv.source}:{fv.name}"
        i = len(folders) + 1
        # without git the copies are the main timeline, each against the one before: a file
        # that could not be read is taken as it was there (with git, once anchored: below)
        state = fv.state if has_git else _carry_over(fv.state, fv.unread, prev_copy)
        new_versions.append(_Version(vid, fv.source, timeline, fv.name, fv.ts, state,
                                     str(fv.path), seq=i, base=None if has_git else prev_id,
                                     unread=fv.unread))
        folders.append(fv)
        prev_id, prev_copy = vid, state
    working = None
    if cfg.ledger_dir.is_dir():
        fv = hs.read_folder(cfg.ledger_dir, "working", "working", limit,
                            cache.wants)
        # (a working file's own problem is the ledger source's warning: said once, not twice)
        base_state = (head_state or hs.EMPTY_STATE) if has_git else prev_copy
        state = _carry_over(fv.state, fv.unread, base_state)
        if fv.unread:
            notes.append(f"{', '.join(k + '.md' for k in fv.unread)} could not be read: "
                         f"taken as in {'HEAD' if has_git else 'the version before'}, "
                         "not as removed")
        if any(state) and (not has_git or state != head_state):
            base = by_state.get(_state_str(head_state)) if has_git and head_state else (
                None if has_git else prev_id)
            seq = git_count + 1 if has_git else len(folders) + 1
            working = _Version("working", "working", "main", "working", fv.ts, state,
                               str(cfg.ledger_dir), subject="uncommitted working files"
                               if has_git else "working files", seq=seq, base=base)
            if has_git and fv.unread:  # (compared with HEAD as committed, read as HEAD reads)
                working.files = _carry_over(fv.state, fv.unread, read_by(base))
            new_versions.append(working)
            folders.append(fv)
    snap_versions = _snapshot_versions(store, cfg, sizes)
    new_versions.extend(snap_versions)
    if has_git:  # copies, and the first snapshot, against the committed ledger of their time
        _anchor_to_main(
            [(ts, seq_of[ref], f"git:{ref}") for ts, ref in kept_git if ts is not None],
            new_versions, [v for v in new_versions if v.timeline == "copies"
                           or (v.timeline == "snapshots" and v.seq == 1)])
        # a copy's unreadable files are taken as in the git version it is compared with
        unread = [v for v in new_versions if v.timeline == "copies" and v.unread]
        for v in unread:
            v.state = _carry_over(v.state, v.unread, read_by(v.base))

    # a snapshot's file over the size limit as the version before reads it (the first one's
    # is the git version of its time, once anchored)
    snap_rel = (_vault_in_workspace(cfg) or "") if snap_versions else ""
    for v in snap_versions:
        _git_files(v, sizes, limit, read_by, v.location, snap_rel, unread_git)

    # ---- entries: each content parsed once; git blobs read in one batch per repository
    missing = cache.missing(new_versions)
    for fv in folders:
        _parse_folder(cache, fv, missing)
    side = snap.side_repo_for(cfg.workspace, cfg.snapshots_home)
    for args, cwd, what, sources in (([], repo.top if repo else None, repo.top if repo else None,
                                      ("git", "base")),
                                     ([f"--git-dir={side}"], None, side, ("snapshot",))):
        want = {(k, oid) for v in new_versions if v.source in sources
                for k, oid in zip(hs.FILES, v.read_from(), strict=True)
                if oid and (k, oid) in missing}
        if not want or what is None:
            continue
        # (a commit's or snapshot's file over the size limit is none of them, see _git_files;
        # a base version's is, and is skipped as such by parse)
        order = sorted(want)
        rel = (repo.rel if repo else "") if sources[0] == "git" else snap_rel
        # each content is read when it is parsed, one at a time (not every version's at once);
        # one wanted again for another file is kept until then
        wanted_again = Counter(oid for _, oid in order)
        kept: dict[str, bytes | None] = {}
        stream = hs.read_blobs(args, cwd, list(dict.fromkeys(o for _, o in order)), what)
        with contextlib.closing(stream):  # git ends with the loop, whatever happens in it
            for kind, oid in order:
                where = _blob_where(what, rel, kind, oid)
                wanted_again[oid] -= 1
                if oid in kept:
                    data = kept[oid] if wanted_again[oid] else kept.pop(oid)
                else:
                    got, data = next(stream)
                    if got != oid:  # cat_blobs answers in the order asked
                        raise AssertionError(f"git answered {got} for {oid}")
                    if wanted_again[oid]:
                        kept[oid] = data
                if data is None:
                    cache.skip(kind, oid, where, "not a file of the repository")
                else:
                    cache.parse(kind, oid, data, where)
                del data
        missing -= want
    cache.flush_entries()

    # ---- the last transaction: the versions replaced, the staged entries made to count
    if full:
        _delete_versions(store, "true")
    if not keep_git:
        _delete_versions(store, "source IN ('git', 'base')")
    if stale:
        _delete_versions(store, "source = 'git' AND ref IN (SELECT unnest(?::VARCHAR[]))",
                         [stale])
    if commits:  # order of the whole git timeline (parents before children)
        store.conn.execute(
            "UPDATE ledger_versions v SET seq = p.seq FROM (SELECT unnest(?::VARCHAR[]) AS id, "
            "unnest(?::INTEGER[]) AS seq) p WHERE v.version_id = p.id",
            [[f"git:{c.sha}" for c in commits], list(range(1, len(commits) + 1))])
    _delete_versions(store, "source IN ('working', 'archive', 'backup', 'snapshot')")
    cache.publish(full)
    store.insert_rows("ledger_versions", (
        "version_id", "source", "timeline", "ref", "ts", "author", "subject", "seq",
        "base_version_id", "state", "entries", "high", "medium", "low", "unrated", "location"),
        [(v.version_id, v.source, v.timeline, v.ref,
          v.ts.strftime("%Y-%m-%d %H:%M:%S") if v.ts else None, v.author, v.subject, v.seq,
          v.base, _state_str(v.state), 0, 0, 0, 0, 0, v.location) for v in new_versions])
    store.insert_rows("_history_version_files", ("version_id", "file", "blob"), [
        (v.version_id, kind, oid) for v in new_versions
        for kind, oid in zip(hs.FILES, v.read_from(), strict=True) if oid])
    store.conn.execute(
        "DELETE FROM ledger_versions WHERE source = 'base' AND version_id NOT IN "
        "(SELECT base_version_id FROM ledger_versions WHERE base_version_id IS NOT NULL)")
    store.conn.execute("DELETE FROM _history_version_files WHERE version_id NOT IN "
                       "(SELECT version_id FROM ledger_versions)")
    for table in ("_history_entries", "_history_blobs"):  # contents no version holds any more
        store.conn.execute(f"DELETE FROM {table} WHERE (file, blob) NOT IN "
                           "(SELECT (file, blob) FROM _history_version_files)")
    # unreadable past contents (the working files' own problems are the ledger source's)
    for (text,) in store.conn.execute(
            "SELECT DISTINCT b.problem FROM _history_blobs b JOIN _history_version_files f "
            "ON f.file = b.file AND f.blob = b.blob JOIN ledger_versions v "
            "ON v.version_id = f.version_id WHERE b.problem IS NOT NULL "
            "AND v.source <> 'working' ORDER BY 1").fetchall():
        where, _, message = text.partition("\0")
        problems.append(Problem("history", where, None, message))
    unread_git = list(dict.fromkeys(unread_git))  # (a stored base version is made again)
    problems += [Problem("history", where, None, why)
                 for where, why in dict.fromkeys((w, y) for _v, w, y in unread_git)]
    store.conn.execute(
        "UPDATE ledger_versions v SET entries = c.n, high = c.h, medium = c.m, low = c.l, "
        "unrated = c.u FROM (SELECT version_id, count(*) AS n, "
        "count(*) FILTER (WHERE confidence = 'high') AS h, "
        "count(*) FILTER (WHERE confidence = 'medium') AS m, "
        "count(*) FILTER (WHERE confidence = 'low') AS l, "
        "count(*) FILTER (WHERE confidence IS NULL OR confidence NOT IN "
        "('high', 'medium', 'low')) AS u FROM ledger_entry_versions GROUP BY version_id) c "
        "WHERE v.version_id = c.version_id")
    counts = dict(store.conn.execute(
        "SELECT source, count(*) FROM ledger_versions WHERE source <> 'base' GROUP BY source"
    ).fetchall())
    total = sum(counts.values())
    found = total > 0 or cfg.ledger_dir.is_dir()
    parts = [f"{counts.get(s, 0)} {s}" for s in ("git", "working", "archive", "backup",
                                                   "snapshot") if counts.get(s)]
    note = f"{total} versions" + (f" ({', '.join(parts)})" if parts else "")
    change = (f"{len(commits_read)} new commit{'s' if len(commits_read) != 1 else ''} read"
              if repo is not None else "")
    if notes:
        note += "; " + "; ".join(notes)
    if not found:
        note = "no Smith ledger and no past versions of it"
    result = SourceResult("history", str(cfg.ledger_dir), found, note, total,
                            problems=problems, change=change)
    result.state = {"repo": repo_key, "head": repo.head if repo else None,
                    "commits_read": commits_read[:200], "commits_read_count": len(commits_read),
                    "versions": total, "unread": unread_git}
    return result


def _anchor_to_main(stored_git: list[tuple[dt.datetime, int, str]], versions: list[_Version],
                    firsts: list[_Version]) -> None:
    """The first version of the copies and snapshots timelines is compared with the newest
    git version at or before its time (not with an empty ledger). ``stored_git``: the stored
    git versions the load keeps, as (ts, seq, version_id)."""
    git = [(v.ts, v.seq, v.version_id) for v in versions if v.source == "git" and v.ts]
    git += stored_git
    git.sort()
    for v in firsts:
        if v.ts is None:
            continue
        before = [vid for ts, _, vid in git if ts <= v.ts]
        if before:
            v.base = before[-1]


def _parse_folder(cache: _Blobs, fv: Any, missing: set[tuple[str, str]]) -> None:
    from toolkit.sources.history import FILES

    todo = [(kind, oid) for kind, oid in zip(FILES, fv.state, strict=True)
            if oid and (kind, oid) in missing]
    for i, (kind, oid) in enumerate(todo):
        missing.discard((kind, oid))
        # each file's bytes let go once read (kept while another file has the same bytes)
        # (no reference kept here: parse lets the bytes go before it copies stored rows)
        again = any(other == oid for _, other in todo[i + 1:])
        if oid not in fv.contents:  # not read (see _Blobs.wants): the ledger source's rows
            cache.copy_stored(kind, oid)
            continue
        cache.parse(kind, oid, fv.contents[oid] if again else fv.contents.pop(oid),
                    str(fv.path / f"{kind}.md"))
    fv.contents.clear()


def _snapshot_versions(store: Store, cfg: Config, sizes: dict[str, int]) -> list[_Version]:
    """One version per snapshot whose ledger differs from the previous snapshot's; ``sizes``
    told of each of their blobs' size."""
    from toolkit.sources import history as hs
    from toolkit.sources import snapshots as snap

    side = snap.side_repo_for(cfg.workspace, cfg.snapshots_home)
    rel = _vault_in_workspace(cfg)
    if rel is None or not side.is_dir():
        return []
    snaps = snap.list_snapshots(side)
    if not snaps:
        return []
    oldest_first = list(reversed(snaps))
    states = hs.tree_states([f"--git-dir={side}"], None, [s.sha for s in oldest_first], rel,
                            side)
    stored_ts = dict(store.conn.execute(
        "SELECT snap_key, ts FROM snapshots WHERE repo = ?", [str(side)]).fetchall())
    out: list[_Version] = []
    prev: tuple[str, ...] = hs.EMPTY_STATE
    prev_id = None
    for s in oldest_first:
        st, of_file = states[s.sha]
        if st == prev:
            continue
        prev = st
        vid = f"snapshot:{s.key}"
        ts = stored_ts.get(s.key) or dt.datetime.fromtimestamp(
            s.time, dt.UTC).replace(tzinfo=None)
        out.append(_Version(vid, "snapshot", "snapshots", s.label, ts, st, str(side),
                            subject=s.label, seq=len(out) + 1, base=prev_id))
        sizes.update(zip(st, of_file, strict=True))
        prev_id = vid
    return out


SOURCE = Source(
    "history", _fingerprint, _load_history,  # reads the vault, workspace and snapshots settings
    migrations=tuple(MIGRATIONS),
    tables={
        "ledger_versions": "every past ledger: git commits, working files, archive/backup "
                           "copies, turn snapshots (where from, which commit or folder, when, "
                           "counts)",
        "ledger_entry_versions": "each ledger entry as it was in each version",
        "ledger_changes": "view: one row per entry change between consecutive versions (added, "
                          "removed, promoted, demoted, reinforced, edited)",
        "_history_blobs": "every ledger file content parsed, even with no entries",
        "_history_version_files": "which file contents (git blobs) each version holds",
        "_history_entries": "the entries of each file content, parsed once",
    },
    bounded_memory=True)


# --------------------------------------------------------------------------- library


@dataclass(frozen=True)
class VersionCounts:
    """One ledger version with its entries by confidence and what changed to reach it."""

    version_id: str
    source: str
    timeline: str
    ref: str
    ts: dt.datetime | None
    subject: str | None
    seq: int
    high: int
    medium: int
    low: int
    unrated: int
    entries: int
    changes: dict[str, int] = field(default_factory=dict)

    @property
    def short_ref(self) -> str:
        return _short(self.source, self.ref)


def _short(source: str, ref: str) -> str:
    if source in ("git", "base"):
        return ref[:8]
    return ref if len(ref) <= 40 else ref[:39] + "…"


@dataclass(frozen=True)
class Change:
    """One change of one entry between a version and its base."""

    version_id: str
    source: str
    timeline: str
    ref: str
    ts: dt.datetime | None
    subject: str | None
    change: str
    entry_key: str
    file: str
    title: str | None
    old_confidence: str | None
    new_confidence: str | None
    old_reflections: int | None
    new_reflections: int | None

    @property
    def short_ref(self) -> str:
        return _short(self.source, self.ref)


@dataclass(frozen=True)
class EntryState:
    """An entry in one version, with the changes that version made to it."""

    version_id: str
    source: str
    timeline: str
    ref: str
    ts: dt.datetime | None
    subject: str | None
    present: bool
    confidence: str | None
    reflections: int | None
    changes: tuple[str, ...]

    @property
    def short_ref(self) -> str:
        return _short(self.source, self.ref)


@dataclass(frozen=True)
class EntryHistory:
    entry_key: str
    file: str
    title: str | None
    states: list[EntryState]  # versions where the entry changed (oldest first)

    @property
    def first_seen(self) -> dt.datetime | None:
        return next((s.ts for s in self.states if s.present), None)


def timelines_for(all_sources: bool) -> tuple[str, ...]:
    return ("main", "copies", "snapshots") if all_sources else ("main",)


def growth(store: Store, *, timelines: tuple[str, ...] = ("main",), file: str | None = None
           ) -> list[VersionCounts]:
    """Every version of the given timelines, oldest first, with counts by confidence and the
    number of changes of each kind that led to it. With ``file`` (a ledger file name or
    alias): that file's counts and changes, in the versions that changed it."""
    kind = _ledger_kind(file)
    if kind is None:
        rows = store.fetch_dicts(
            "SELECT v.*, (SELECT list(struct_pack(change := c.change, n := c.n)) FROM "
            "  (SELECT change, count(*) AS n FROM ledger_changes ch "
            "   WHERE ch.version_id = v.version_id GROUP BY change) c) AS changes "
            "FROM ledger_versions v WHERE v.source <> 'base' "
            "AND v.timeline IN (SELECT unnest(?::VARCHAR[])) "
            "ORDER BY CASE v.timeline WHEN 'main' THEN 0 WHEN 'copies' THEN 1 ELSE 2 END, "
            "v.seq", [list(timelines)])
    else:
        rows = store.fetch_dicts(
            "SELECT v.version_id, v.source, v.timeline, v.ref, v.ts, v.subject, v.seq, "
            "  e.n AS entries, e.h AS high, e.m AS medium, e.l AS low, e.u AS unrated, "
            "  (SELECT list(struct_pack(change := c.change, n := c.n)) FROM "
            "    (SELECT change, count(*) AS n FROM ledger_changes ch WHERE ch.version_id = "
            "     v.version_id AND ch.file = ? GROUP BY change) c) AS changes "
            "FROM ledger_versions v LEFT JOIN (SELECT version_id, count(*) AS n, "
            "  count(*) FILTER (WHERE confidence = 'high') AS h, "
            "  count(*) FILTER (WHERE confidence = 'medium') AS m, "
            "  count(*) FILTER (WHERE confidence = 'low') AS l, "
            "  count(*) FILTER (WHERE confidence IS NULL OR confidence NOT IN "
            "    ('high', 'medium', 'low')) AS u "
            "  FROM ledger_entry_versions WHERE file = ? GROUP BY version_id) e "
            "  ON e.version_id = v.version_id "
            "WHERE v.source <> 'base' AND v.timeline IN (SELECT unnest(?::VARCHAR[])) "
            "AND EXISTS (SELECT 1 FROM ledger_changes ch WHERE ch.version_id = v.version_id "
            "  AND ch.file = ?) "
            "ORDER BY CASE v.timeline WHEN 'main' THEN 0 WHEN 'copies' THEN 1 ELSE 2 END, "
            "v.seq", [kind, kind, list(timelines), kind])
    return [VersionCounts(
        version_id=r["version_id"], source=r["source"], timeline=r["timeline"], ref=r["ref"],
        ts=r["ts"], subject=r["subject"], seq=r["seq"], high=r["high"] or 0,
        medium=r["medium"] or 0, low=r["low"] or 0, unrated=r["unrated"] or 0,
        entries=r["entries"] or 0,
        changes={c["change"]: c["n"] for c in (r["changes"] or [])}) for r in rows]


def _change(r: dict[str, Any]) -> Change:
    return Change(version_id=r["version_id"], source=r["source"], timeline=r["timeline"],
                  ref=r["ref"], ts=r["ts"], subject=r["subject"], change=r["change"],
                  entry_key=r["entry_key"], file=r["file"], title=r["title"],
                  old_confidence=r["old_confidence"], new_confidence=r["new_confidence"],
                  old_reflections=r["old_reflections"], new_reflections=r["new_reflections"])


# the changes of the timelines asked for (one parameter: their names)
_ON_TIMELINES = "WHERE timeline IN (SELECT unnest(?::VARCHAR[]))"


def change_log(store: Store, *, timelines: tuple[str, ...] = ("main",),
               limit: int | None = None) -> list[Change]:
    """Changes, newest version first (within a version: by kind, then file, title and entry
    key, so a ``limit`` keeps the same changes from run to run)."""
    sql = (f"SELECT * FROM ledger_changes {_ON_TIMELINES} "
           "ORDER BY ts DESC NULLS LAST, seq DESC, change_order, file, title, entry_key")
    params: list[Any] = [list(timelines)]
    if limit is not None:
        if not LIMIT.fits(limit):  # (toolkit.api refuses it first, in its words)
            raise UsageError(f"limit must be {LIMIT.describe()}, not {limit!r}")
        sql += " LIMIT ?"
        params.append(limit)
    return [_change(r) for r in store.fetch_dicts(sql, params)]


def change_count(store: Store, *, timelines: tuple[str, ...] = ("main",)) -> int:
    """How many changes :func:`change_log` lists (without its ``limit``)."""
    return int(store.scalar(f"SELECT count(*) FROM ledger_changes {_ON_TIMELINES}",
                            [list(timelines)]) or 0)


def _ledger_kind(file: str | None) -> str | None:
    """The ledger file kind a user named (``tools``, ``patterns.md``...), None for all files."""
    from toolkit.records import ledger_kind

    return ledger_kind(file) if file else None


def find_entries(store: Store, title: str, file: str | None = None
                 ) -> list[tuple[str, str, str | None]]:
    """(entry_key, file, title) of entries whose title matches in any version: exact (NFC,
    case-folded) matches if any, otherwise titles containing the text. In the order
    ``toolkit ledger show`` lists its matches: the seed's file order (patterns first), then
    each entry's place in its file (in the newest version that has it); its title is the
    newest version's."""
    from toolkit.records import LEDGER_FILES
    from toolkit.sources.history import entry_title_key

    kind = _ledger_kind(file)
    newest = "(v.timeline = 'main', v.seq, v.version_id)"
    found = store.fetch(
        f"SELECT e.entry_key, e.file, arg_max(e.title, {newest}), "
        f"arg_max(e.position, {newest}) FROM ledger_entry_versions e "
        "LEFT JOIN ledger_versions v ON v.version_id = e.version_id "
        "GROUP BY e.entry_key, e.file")[1]
    rank = {f: i for i, f in enumerate(LEDGER_FILES)}
    found.sort(key=lambda r: (rank.get(r[1], len(rank)), r[1],
                              r[3] if r[3] is not None else -1, r[0]))
    rows = [(k, f, t) for k, f, t, _ in found]
    want = entry_title_key(title)
    cands = [(k, f, t) for k, f, t in rows if kind is None or f == kind]
    exact = [c for c in cands if c[0].split("/", 1)[1].split("#", 1)[0] == want]
    if exact:
        return exact
    return [c for c in cands if want in c[0].split("/", 1)[1]]


# Each entry's states (a row per version that changed it), for entry_histories; parameters:
# every entry?, the entry keys otherwise, the timelines, whether they are several (then the
# states are ordered by time).
_ENTRY_STATES = (
    "SELECT c.entry_key, c.version_id, c.source, c.timeline, c.ref, c.ts, c.subject, "
    "c.seq, list(c.change ORDER BY c.change_order) AS changes, any_value(c.file) AS file, "
    "any_value(c.title) AS title, any_value(e.confidence) AS confidence, "
    "any_value(e.reflections) AS reflections, bool_or(e.entry_key IS NOT NULL) AS present, "
    "? AS by_time "
    "FROM ledger_changes c LEFT JOIN ledger_entry_versions e "
    "  ON e.version_id = c.version_id AND e.entry_key = c.entry_key "
    "WHERE (? OR c.entry_key IN (SELECT unnest(?::VARCHAR[]))) "
    "AND c.timeline IN (SELECT unnest(?::VARCHAR[])) "
    "GROUP BY c.entry_key, c.version_id, c.source, c.timeline, c.ref, c.ts, c.subject, c.seq")
# (version_id last: seq is unique on a timeline as the history writes it, but an order that
# is total whatever the rows say keeps the digest and the table in one order)
_STATE_ORDER = ("CASE WHEN by_time THEN ts END NULLS LAST, CASE timeline WHEN 'main' THEN 0 "
                "WHEN 'copies' THEN 1 ELSE 2 END, seq, version_id")


def entry_history_digests(store: Store, shown: str) -> dict[str, str]:
    """Entry key -> the digest of what the site shows of its history on the main timeline
    (``shown``: SQL of the values shown of one state, in the states' order), for every entry
    with a state: a page that shows an entry's history is made again only when this
    changes."""
    rows = store.fetch(
        f"SELECT entry_key, md5(string_agg(CAST(to_json({shown}) AS VARCHAR), chr(10) "
        f"ORDER BY {_STATE_ORDER})) FROM ({_ENTRY_STATES}) GROUP BY entry_key",
        [False, True, [], ["main"]])[1]
    return dict(rows)


def entry_histories(store: Store, entry_keys: Iterable[str] | None = None, *,
                    timelines: tuple[str, ...] = ("main",)) -> dict[str, EntryHistory]:
    """Entry key -> the versions in which that entry changed (appeared, changed confidence or
    count, was edited or removed), one row per version: in timeline order for the main
    timeline alone, by time when several timelines are asked for. Every entry of any version
    when ``entry_keys`` is None. ``toolkit ledger history TITLE`` and the site's entry pages
    both ask this."""
    keys = None if entry_keys is None else sorted(set(entry_keys))
    rows = store.fetch_dicts(
        f"SELECT * FROM ({_ENTRY_STATES}) ORDER BY entry_key, {_STATE_ORDER}",
        [len(timelines) > 1, keys is None, keys or [], list(timelines)])
    heads = store.fetch_dicts(
        "SELECT entry_key, any_value(file) AS file, arg_max(title, version_id) AS title "
        "FROM ledger_entry_versions WHERE (? OR entry_key IN (SELECT unnest(?::VARCHAR[]))) "
        "GROUP BY entry_key ORDER BY entry_key", [keys is None, keys or []])
    states: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        states.setdefault(r["entry_key"], []).append(r)
    out = {}
    for h in heads:
        mine = states.get(h["entry_key"], [])
        out[h["entry_key"]] = EntryHistory(
            entry_key=h["entry_key"], file=h["file"],
            title=mine[-1]["title"] if mine else h["title"],
            states=[EntryState(version_id=r["version_id"], source=r["source"],
                               timeline=r["timeline"], ref=r["ref"], ts=r["ts"],
                               subject=r["subject"], present=r["present"],
                               confidence=r["confidence"], reflections=r["reflections"],
                               changes=tuple(r["changes"])) for r in mine])
    return out


def entry_history(store: Store, entry_key: str, *, timelines: tuple[str, ...] = ("main",)
                  ) -> EntryHistory:
    """One entry's :func:`entry_histories`; NotFoundError when no version has it."""
    found = entry_histories(store, [entry_key], timelines=timelines).get(entry_key)
    if found is None:
        raise NotFoundError(f"no ledger entry {entry_key!r} in any version")
    return found


def history_for_title(store: Store, title: str, *, file: str | None = None,
                      all_sources: bool = False, max_matches: int = 5,
                      narrow: str = "--file") -> list[EntryHistory]:
    """The history of every entry matching ``title`` (all files, unless ``file``); too many
    matches are refused with a hint naming ``narrow``, the caller's way to give ``file``."""
    matches = find_entries(store, title, file)
    if not matches:
        raise NotFoundError(f"no ledger entry titled {title!r} in any version",
                            hint="Run `toolkit ledger history` for the whole ledger, or "
                                 "`toolkit ledger list` for current titles")
    if len(matches) > max_matches:
        names = "; ".join(f"{f}: {t}" for _, f, t in matches[:max_matches])
        raise NotFoundError(f"{len(matches)} entries contain {title!r} ({names}; ...)",
                            hint=f"Give more of the title, or {narrow}")
    return [entry_history(store, k, timelines=timelines_for(all_sources)) for k, _, _ in matches]


def entry_key_for(file: str, title: str | None, occurrence: int = 1) -> str:
    """The ``entry_key`` of a current entry (``occurrence`` for repeated titles)."""
    from toolkit.sources.history import entry_title_key

    base = f"{file}/{entry_title_key(title)}"
    return base if occurrence == 1 else f"{base}#{occurrence}"


def turn_activity_rows(store: Store, *, per_turn: int = 50) -> list[dict[str, Any]]:
    """Audit actions and dispatches recorded inside each turn's time window (pre-turn to
    post-turn snapshot time, both included), at most ``per_turn`` of each kind per turn, in
    time order; plus ``n``: how many there were in all."""
    tables = set(store.tables())
    if not {"snapshot_turns", "actions", "dispatches"} <= tables:
        return []
    return store.fetch_dicts(
        "WITH hits AS ("
        " SELECT t.repo, t.turn_key, 'action' AS kind, a.ts, a.id, a.tier, a.category, "
        "        a.description AS text, NULL AS agent, NULL AS verdict "
        " FROM snapshot_turns t JOIN actions a ON a.ts BETWEEN t.started AND t.ended "
        " UNION ALL "
        " SELECT t.repo, t.turn_key, 'dispatch', d.ts, d.id, NULL, NULL, d.task, "
        "        d.agent_type || '/' || d.model, coalesce(d.verdict, 'PENDING') "
        " FROM snapshot_turns t JOIN dispatches d ON d.ts BETWEEN t.started AND t.ended) "
        "SELECT *, count(*) OVER (PARTITION BY repo, turn_key, kind) AS n FROM hits "
        "QUALIFY row_number() OVER (PARTITION BY repo, turn_key, kind ORDER BY ts, id) <= ? "
        "ORDER BY repo, turn_key, ts, kind, id", [per_turn])


def turn_summaries(store: Store) -> list[dict[str, Any]]:
    """``snapshot_turns`` rows (window, files, lines, activity counts), newest turn first."""
    if "snapshot_turns" not in store.tables():
        return []
    return store.fetch_dicts("SELECT * FROM snapshot_turns ORDER BY repo, number")


def has_history(store: Store) -> bool:
    """Whether the ledger has any past version: a git commit or a copy (archive, backup,
    snapshot). The working files alone are the ledger as it is, not a past version."""
    return bool(store.scalar("SELECT count(*) FROM ledger_versions "
                             "WHERE source NOT IN ('base', 'working')"))


__all__ = ["CHANGE_KINDS", "MIGRATIONS", "SOURCE", "Change", "EntryHistory",
           "EntryState", "VersionCounts", "change_log", "entry_histories", "entry_history",
           "entry_key_for",
           "find_entries", "growth", "has_history", "history_for_title"]
