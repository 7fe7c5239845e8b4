"""The fleet: every project a user's agents work in, and one store over them all (issue 17).

A project is known from three places, merged by name:

* Smith's global index ``$HOME/.smith/projects.json`` (``[{"name", "path", "last_session"}]``);
* a fleet file: ``projects:`` in ``toolkit-fleet.yaml`` (the nearest one at or above the
  current folder) or the file given with ``--fleet``; each item is a path (the project is
  named after its folder) or a mapping ``{name, path}``; relative paths are relative to the
  file. A name given in the fleet file wins over the index's for the same path;
* the ``project`` values of the shared records: nagi-ledger's ``actions.project`` and a
  ``project`` field on a slop ledger entry (CodeSmith writes none; a writer that adds one
  keeps it in ``slop_entries.extra``). These projects have no folder the toolkit knows.

The fleet store is one DuckDB file (``toolkit.store``) holding the shared audit DB and slop
ledger (the ``audit`` and ``slop`` sources, located like every command locates them) and,
per project with a folder, its ledger entries and sessions (``fleet_entries``,
``fleet_sessions``) read by the ledger and sessions sources into their tables, copied with the
project's name and emptied again. The ``fleet`` source (:func:`fleet_source`) keeps each
project's fingerprint (its vault's files, as the ledger and sessions sources fingerprint
them) in ``fleet_projects``: a refresh reads only the projects whose fingerprint changed.

Dispatches and approaches carry no project in nagi-ledger's schema (FORMATS.md §3.2), so the
fleet counts them as not assigned to any project; actions and slop entries without a
project are "not assigned" too.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import DataError, ToolkitError, UsageError, one_error
from toolkit.records import Problem
from toolkit.source import Source, SourceResult
from toolkit.textio import load_json, load_yaml, read_text

if TYPE_CHECKING:
    from toolkit.config import Config
    from toolkit.store import Store

FLEET_FILE = "toolkit-fleet.yaml"
FLEET_ENV = "TOOLKIT_FLEET"
STORE_ENV = "TOOLKIT_FLEET_DB"
UNASSIGNED = "(not assigned)"  # how rows without a project are shown

# --------------------------------------------------------------------------- knowing projects


@dataclass(frozen=True)
class KnownProject:
    """A project the fleet knows: its name, folder (None: only seen in the records), where
    it was found (``smith``, ``fleet file``, ``audit``, ``slop``) and Smith's last session."""

    name: str
    path: Path | None
    origins: tuple[str, ...]
    last_session: str | None = None


def smith_index(env: Mapping[str, str]) -> Path:
    """``$HOME/.smith/projects.json`` (HOME from ``env``: tests give their own)."""
    from toolkit.config import home_dir

    return home_dir(env) / ".smith" / "projects.json"


def _text(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def read_smith_index(path: Path) -> list[KnownProject]:
    """The projects of Smith's ``projects.json``; none when the file does not exist. A file
    that is not a list of ``{"name", "path"}`` objects is bad data naming the item."""
    if not path.exists():
        return []
    data = load_json(read_text(path), path)
    if not isinstance(data, list):
        raise DataError('must be a JSON list of {"name", "path", "last_session"} objects',
                        path=path)
    out = []
    for i, item in enumerate(data):
        where = f"item {i + 1}"
        if not isinstance(item, dict):
            raise DataError(f"{where} is not an object with name and path", path=path)
        if not _text(item.get("name")) or not _text(item.get("path")):
            raise DataError(f"{where} needs a name and a path (text)", path=path)
        last = item.get("last_session")
        if last is not None and not isinstance(last, str):
            raise DataError(f"{where}: last_session must be text or null", path=path)
        p = Path(os.path.expanduser(item["path"]))
        out.append(KnownProject(item["name"].strip(), Path(os.path.normpath(p)), ("smith",),
                                last or None))
    return out


def find_fleet_file(start: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """``$TOOLKIT_FLEET``, else the nearest ``toolkit-fleet.yaml`` at or above ``start``."""
    if env and env.get(FLEET_ENV):
        return Path(env[FLEET_ENV]).expanduser()
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / FLEET_FILE).is_file():
            return folder / FLEET_FILE
    return None


_FLEET_KEYS = {"projects"}
_ITEM_KEYS = {"name", "path"}


def read_fleet_file(path: Path) -> list[KnownProject]:
    """The ``projects:`` of a fleet file, each a path or ``{name, path}``, checked like
    toolkit.yaml's keys: an unknown key or a value of the wrong type is bad data naming it."""
    if not path.exists():
        raise UsageError("fleet file not found", path=path)
    if not path.is_file():
        raise UsageError("the fleet file is not a regular file", path=path)
    data = load_yaml(read_text(path), path)
    if data is None:
        return []
    if not isinstance(data, dict):
        raise DataError("a fleet file must be a mapping with a projects: list", path=path)
    unknown = sorted(str(k) for k in set(data) - _FLEET_KEYS)
    if unknown:
        raise DataError(f"unknown setting(s) {', '.join(unknown)}", path=path,
                        hint=f"Known settings: {', '.join(sorted(_FLEET_KEYS))}")
    items = data.get("projects")
    if items is None:
        return []
    if not isinstance(items, list):
        raise DataError("setting projects must be a list of paths or {name, path} mappings",
                        path=path)
    out: list[KnownProject] = []
    named: dict[str, tuple[str, Path]] = {}  # a name -> the item that gave it, its folder
    for i, item in enumerate(items):
        where = f"projects[{i + 1}]"
        if isinstance(item, str) and item.strip():
            name, raw = None, item
        elif isinstance(item, dict):
            extra = sorted(str(k) for k in set(item) - _ITEM_KEYS)
            if extra:
                raise DataError(f"{where}: unknown key(s) {', '.join(extra)}", path=path,
                                hint="Known keys: name, path")
            if not _text(item.get("path")):
                raise DataError(f"{where}: path must be text (a folder)", path=path)
            if item.get("name") is not None and not _text(item.get("name")):
                raise DataError(f"{where}: name must be text", path=path)
            name, raw = item.get("name"), item["path"]
        else:
            raise DataError(f"{where} must be a path or a {{name, path}} mapping", path=path)
        p = Path(os.path.expanduser(raw.strip()))
        folder = Path(os.path.normpath(p if p.is_absolute() else path.parent / p))
        project = (name or folder.name).strip()
        first = named.setdefault(project, (where, folder))
        # one name for two folders (not one folder reached two ways, through a link): one
        # of them was dropped unsaid
        if first[1] != folder and os.path.realpath(first[1]) != os.path.realpath(folder):
            raise DataError(f"{first[0]} and {where} are both named {project} ({first[1]}, "
                            f"{folder}); a fleet's names tell its projects apart", path=path,
                            hint="Give one of them another name: {name: ..., path: ...}")
        out.append(KnownProject(project, folder, ("fleet file",)))
    return out


def known_projects(env: Mapping[str, str], fleet_file: Path | None,
                   notes: list[str] | None = None) -> list[KnownProject]:
    """The projects of Smith's index and the fleet file, merged by name (and by folder: the
    fleet file's name wins), in name order. ``notes`` is told of each name given to two
    folders (not one folder reached through a link): the last of them is kept (the fleet
    file's over the index's) and the other is in no list, page or export. (The fleet file's
    own duplicates are refused when it is read.)"""
    found = [*read_smith_index(smith_index(env)),
             *(read_fleet_file(fleet_file) if fleet_file is not None else [])]
    if notes is not None:
        notes += _name_conflicts(found)
    by_name: dict[str, KnownProject] = {}
    by_path: dict[Path, str] = {}
    for p in found:
        key = by_path.get(p.path) if p.path is not None else None
        if key is not None and key != p.name:  # same folder under another name
            old = by_name.pop(key)
            p = KnownProject(p.name, p.path, (*old.origins, *p.origins), old.last_session)
        old2 = by_name.get(p.name)
        if old2 is not None:
            p = KnownProject(p.name, p.path or old2.path,
                             tuple(dict.fromkeys((*old2.origins, *p.origins))),
                             p.last_session or old2.last_session)
        by_name[p.name] = p
        if p.path is not None:
            by_path[p.path] = p.name
    return sorted(by_name.values(), key=lambda p: p.name)


def no_folder_note(env: Mapping[str, str], fleet_file: Path | None) -> str:
    """Where projects with a folder come from, for a command that found none."""
    fleet = (f"the fleet file {fleet_file} lists none" if fleet_file is not None else
             f"no {FLEET_FILE} was found here or above (nor ${FLEET_ENV})")
    return (f"note: no project with a folder is known: Smith's index ({smith_index(env)}) "
            f"names none, and {fleet}. List your projects' folders in a {FLEET_FILE} "
            "(docs/guide/fleet.md).")


def _name_conflicts(found: list[KnownProject]) -> list[str]:
    """A note for each name ``found`` gives to two folders (see :func:`known_projects`)."""
    folders: dict[str, list[tuple[Path, str]]] = {}
    for p in found:
        if p.path is None:
            continue
        seen = folders.setdefault(p.name, [])
        if all(os.path.realpath(q) != os.path.realpath(p.path) for q, _ in seen):
            origin = p.origins[0] if p.origins else ""
            seen.append((p.path, {"smith": "Smith's index"}.get(origin, origin)))
    return [f"note: {name} names {len(places)} folders: "
            + ", ".join(f"{path} ({origin})" for path, origin in places)
            + f"; the fleet uses {places[-1][0]}. Give the others their own names in the "
              "fleet file ({name: ..., path: ...})"
            for name, places in sorted(folders.items()) if len(places) > 1]


# --------------------------------------------------------------------------- the fleet source

FLEET_TABLES = {
    "fleet_projects": "every project of the fleet with a folder: where it was found, whether "
                      "its folder and vault exist, its fingerprint, the name its records give "
                      "it (records_name)",
    "fleet_entries": "the ledger entries of every project's vault, with the project's name",
    "fleet_sessions": "the vault sessions of every project, with the project's name",
    "fleet_slop": "the slop ledger's entries with their project (a project field, kept in "
                  "extra; NULL when none)",
}

MIGRATIONS = (("m100_fleet", """
CREATE TABLE fleet_projects (
    project VARCHAR, path VARCHAR, origins VARCHAR[], status VARCHAR, note VARCHAR,
    vault VARCHAR, vault_found BOOLEAN, last_session TIMESTAMP, fingerprint VARCHAR);
CREATE TABLE fleet_entries (
    project VARCHAR, entry_id VARCHAR, file VARCHAR, title VARCHAR, date DATE,
    category VARCHAR, confidence VARCHAR, path VARCHAR, line INTEGER);
CREATE TABLE fleet_sessions (project VARCHAR, name VARCHAR, session_start TIMESTAMP);
CREATE VIEW fleet_slop AS
SELECT json_extract_string(extra, '$.project') AS project, * FROM slop_entries;
"""), ("m101_fleet_records_name", """
ALTER TABLE fleet_projects ADD COLUMN records_name VARCHAR;
"""))


def records_name(p: KnownProject, cfg: Config | None) -> str:
    """The name the shared records give a fleet project (``actions.project``, a slop entry's
    ``project``): its own ``project_name`` (its toolkit.yaml's ``project_name:``, else its
    folder's name) when its folder was read, else the fleet's name. A project's actions and
    slop entries are those that name it so: ``fleet list``, the fleet site and ``fleet
    export`` all ask this, so a folder the fleet names otherwise keeps its records."""
    return cfg.project_name if cfg is not None else p.name


@dataclass
class _Plan:
    """One project with a folder, before loading: its Config (None when its folder is gone
    or its toolkit.yaml is bad), status and fingerprint."""

    project: KnownProject
    status: str  # found | missing | error
    note: str
    cfg: Config | None
    fingerprint: str

    @property
    def records_name(self) -> str:
        return records_name(self.project, self.cfg)


def missing_reason(path: Path) -> str | None:
    """Why a fleet project's folder is not there ("the project folder does not exist", "the
    project path is a file, not a folder", "... a symbolic link loop"), or None when it is a
    folder -- or when that cannot be told (a folder on the way it may not enter, a name too
    long): reading the project then fails, and :func:`toolkit.errors.one_error` says why."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "the project folder does not exist"
    except OSError as exc:
        return ("the project path is a symbolic link loop" if exc.errno == errno.ELOOP
                else None)
    return None if stat.S_ISDIR(st.st_mode) else "the project path is a file, not a folder"


def _plan(p: KnownProject, base: Config, env: Mapping[str, str]) -> _Plan:
    from toolkit import config as config_mod
    from toolkit.loaders import LEDGER, SESSIONS

    assert p.path is not None
    h = hashlib.sha256(json.dumps([p.name, str(p.path), p.origins, p.last_session]).encode())
    why = missing_reason(p.path)
    if why is not None:
        return _Plan(p, "missing", why, None, h.hexdigest() + ":missing")
    try:
        cfg = config_mod.resolve(project=p.path, env=dict(env))
        h.update(("\0" + cfg.project_name + "\n").encode("utf-8", "surrogateescape"))
        # the fleet store's parse cache; the shared sources are the fleet's, not the project's
        cfg = cfg.with_overrides(db_path=base.db_path,
                                 max_file_bytes=cfg.max_file_bytes or base.max_file_bytes)
        for src in (LEDGER, SESSIONS):  # (a vault folder it may not list raises here)
            h.update(("\0".join(src.fingerprint(cfg)) + "\n").encode("utf-8",
                                                                      "surrogateescape"))
    except (ToolkitError, OSError) as exc:
        error = one_error(exc)
        return _Plan(p, "error", str(error), None, h.hexdigest() + ":error:" + str(error))
    return _Plan(p, "found", "", cfg, h.hexdigest())


def _projects_fp(plans: Sequence[_Plan]) -> tuple[str, str]:
    h = hashlib.sha256()
    for plan in plans:
        h.update(f"{plan.project.name}\0{plan.fingerprint}\n".encode("utf-8", "surrogateescape"))
    return "fleet", h.hexdigest()  # the location its load records (the store compares them)


@dataclass
class FleetLoad:
    """What the last fleet refresh did: the projects read again and those skipped."""

    read: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def fleet_source(projects: Sequence[KnownProject], env: Mapping[str, str]) -> Source:
    """The ``fleet`` source over ``projects`` (those with a folder): each project's vault is
    read again only when its fingerprint changed (see the module docstring)."""
    folders = [p for p in projects if p.path is not None]
    cache: dict[str, list[_Plan]] = {}

    def plans(cfg: Config) -> list[_Plan]:
        key = str(cfg.db_path)
        if key not in cache:
            cache[key] = [_plan(p, cfg, env) for p in folders]
        return cache[key]

    def fingerprint(cfg: Config) -> tuple[str, str]:
        return _projects_fp(plans(cfg))

    def load(store: Store, cfg: Config, full: bool, progress: Any) -> SourceResult:
        return _load_fleet(store, plans(cfg), full)

    return Source("fleet", fingerprint, load, migrations=MIGRATIONS, tables=FLEET_TABLES)


_STAGING = ("ledger_entries", "ledger_meta", "reconcile_runs", "sessions", "session_events")


def _load_fleet(store: Store, plans: Sequence[_Plan], full: bool) -> SourceResult:
    from toolkit.loaders import LEDGER, SESSIONS

    known = dict(store.fetch("SELECT project, fingerprint FROM fleet_projects")[1])
    keep_problems = store.problems("fleet")
    done = FleetLoad()
    problems: list[Problem] = []
    rows = []
    for plan in plans:
        p = plan.project
        vault_found = False
        if not full and known.get(p.name) == plan.fingerprint:
            done.unchanged.append(p.name)
            vault_found = bool(store.scalar(
                "SELECT vault_found FROM fleet_projects WHERE project = ?", [p.name]))
            prefix = str(p.path) + os.sep
            problems += [pr for pr in keep_problems if (pr.path or "").startswith(prefix)]
        else:
            done.read.append(p.name)
            for table in ("fleet_entries", "fleet_sessions"):
                store.conn.execute(f"DELETE FROM {table} WHERE project = ?", [p.name])
            if plan.cfg is not None:
                try:
                    ledger = LEDGER.load(store, plan.cfg, True, None)
                    sessions = SESSIONS.load(store, plan.cfg, True, None)
                except (ToolkitError, OSError) as exc:
                    # that project is listed with why; the others are read (its rows in the
                    # staging tables are replaced by the next project's, or cleared below)
                    error = one_error(exc)
                    plan = _Plan(p, "error", str(error), plan.cfg,
                                 plan.fingerprint + ":error:" + str(error))
                else:
                    vault_found = ledger.found or sessions.found
                    problems += ledger.problems + sessions.problems
                    store.conn.execute(
                        "INSERT INTO fleet_entries SELECT ?, entry_id, file, title, date, "
                        "category, confidence, path, line FROM ledger_entries", [p.name])
                    store.conn.execute(
                        "INSERT INTO fleet_sessions SELECT ?, name, session_start FROM sessions",
                        [p.name])
        rows.append((p.name, str(p.path), list(p.origins), plan.status, plan.note,
                     str(plan.cfg.vault) if plan.cfg else None, vault_found, p.last_session,
                     plan.fingerprint, plan.records_name))
    for table in _STAGING:  # the per-project tables were staging only
        store.conn.execute(f"DELETE FROM {table}")
    store.conn.execute("DELETE FROM fleet_projects")
    store.insert_rows("fleet_projects", (
        "project", "path", "origins", "status", "note", "vault", "vault_found", "last_session",
        "fingerprint", "records_name"), rows)
    names = [plan.project.name for plan in plans]
    for table in ("fleet_entries", "fleet_sessions"):  # projects no longer in the fleet
        store.conn.execute(f"DELETE FROM {table} WHERE NOT list_contains(?, project)", [names])
    note = (f"{len(plans)} projects: {len(done.read)} read, {len(done.unchanged)} unchanged")
    return SourceResult("fleet", "fleet", True, note, len(plans),
                        change=", ".join(done.read), problems=problems,
                        state={"read": done.read, "unchanged": done.unchanged})


# --------------------------------------------------------------------------- the store


def default_store(env: Mapping[str, str]) -> Path:
    """``$TOOLKIT_FLEET_DB``, else ``<cache>/agent-ledger-toolkit/fleet.duckdb``."""
    from toolkit.config import cache_dir

    if env.get(STORE_ENV):
        return Path(env[STORE_ENV]).expanduser()
    return cache_dir(env) / "fleet.duckdb"


@dataclass
class Fleet:
    """An open, refreshed fleet store and what the refresh did."""

    store: Store
    projects: list[KnownProject]
    load: FleetLoad
    errors: list[ToolkitError]
    notes: list[str]  # known_projects' notes: a name given to two folders

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_fleet(cfg: Config, *, store_path: Path, fleet_file: Path | None,
               env: Mapping[str, str] | None = None, full: bool = False) -> Fleet:
    """Open the fleet store at ``store_path`` and refresh it: the shared audit DB and slop
    ledger of ``cfg`` (where every command finds them) and every known project's vault."""
    from toolkit.loaders import AUDIT, LEDGER, SESSIONS, SLOP
    from toolkit.store import Store

    env = dict(os.environ) if env is None else dict(env)
    notes: list[str] = []
    projects = known_projects(env, fleet_file, notes)
    fcfg = cfg.with_overrides(db_path=Path(store_path))
    source = fleet_source(projects, env)
    store = Store.open(fcfg.db_path, sources=(LEDGER, SESSIONS, SLOP, AUDIT, source))
    try:
        report = store.refresh(fcfg, full=full, only=("slop", "audit", "fleet"))
    except BaseException:
        store.close()
        raise
    notes += _missing_records_notes(report.results)
    [result] = [r for r in report.results if r.source == "fleet"]
    load = FleetLoad(list(result.state.get("read", [])), list(result.state.get("unchanged", [])))
    if result.skipped:
        load = FleetLoad([], [p.name for p in projects if p.path is not None])
    return Fleet(store, projects, load, report.errors, notes)


# Where the shared records are found (as every command finds them), for the note that says
# where to point a fleet run outside any project
_FOUND_AS = {
    "audit": ("audit DB", "actions", "--audit-db, audit_db: in the toolkit.yaml of the folder "
              "it runs in, NAGI_LEDGER_DB"),
    "slop": ("slop ledger", "slop entries", "--slop, slop: in the toolkit.yaml of the folder "
             "it runs in, CODESMITH_SLOP_LEDGER or CODESMITH_HOME"),
}


def _missing_records_notes(results: Iterable[Any]) -> list[str]:
    """A note for each shared record the fleet did not find: a fleet run outside any
    project (at the fleet file's folder) finds the audit DB and slop ledger at their
    defaults, not where its projects' toolkit.yaml files name them, and its counts of
    actions and slop entries are then all empty, unsaid."""
    notes = []
    for r in results:
        if r.source in _FOUND_AS and not r.found:
            what, rows, where = _FOUND_AS[r.source]
            notes.append(f"note: no {what} at {r.location}, so the fleet shows no {rows}: it "
                         f"reads the {what} every command finds ({where}), not the ones its "
                         "projects' toolkit.yaml files name")
    return notes


# --------------------------------------------------------------------------- what it holds

_RECORD_PROJECTS = """
SELECT DISTINCT project, 'audit' AS origin FROM actions WHERE project IS NOT NULL
UNION ALL SELECT DISTINCT project, 'slop' FROM fleet_slop WHERE project IS NOT NULL
"""

_ACTIVITY = """
WITH audit AS (SELECT project, max(ts) AS last_action, count(*) AS actions FROM actions
               GROUP BY project),
     slop AS (SELECT project, max(timezone('UTC', updated_at)) AS last_change,
                     count(*) FILTER (WHERE status IN ('open', 'in_progress')) AS open_debt
              FROM fleet_slop GROUP BY project),
     sess AS (SELECT project, max(session_start) AS last_session FROM fleet_sessions
              GROUP BY project),
     ent AS (SELECT project, count(*) AS entries,
                    count(*) FILTER (WHERE confidence = 'high') AS high,
                    count(*) FILTER (WHERE confidence = 'medium') AS medium,
                    count(*) FILTER (WHERE confidence = 'low') AS low,
                    count(*) FILTER (WHERE confidence IS NULL
                                     OR confidence NOT IN ('high', 'medium', 'low')) AS unknown
             FROM fleet_entries GROUP BY project)
SELECT n.project, audit.last_action, audit.actions, slop.last_change, slop.open_debt,
       sess.last_session, ent.entries, ent.high, ent.medium, ent.low, ent.unknown
FROM (SELECT unnest(?::VARCHAR[]) AS project, unnest(?::VARCHAR[]) AS records_name) n
LEFT JOIN audit ON audit.project = n.records_name
LEFT JOIN slop ON slop.project = n.records_name
LEFT JOIN sess ON sess.project = n.project LEFT JOIN ent ON ent.project = n.project
"""


def _ts(value: Any) -> str | None:
    if value is None or value == "":
        return None
    text = str(value).replace("T", " ")
    return text[:19]


def records_names(store: Store) -> list[tuple[str, str]]:
    """(fleet project, the name its records give it) of every project with a folder."""
    return [(str(p), str(r)) for p, r in store.fetch(
        "SELECT project, coalesce(records_name, project) FROM fleet_projects "
        "ORDER BY project")[1]]


def shared_records_notes(names: Iterable[tuple[str, str]]) -> list[str]:
    """A note for each name in the shared records (``actions.project``, a slop entry's
    ``project``) that two or more of the fleet's projects, given as (project, records name),
    read as theirs (the same ``project_name``, e.g. two folders of one name): each counts
    those records, so the fleet counts them twice. ``fleet list``, ``fleet build-site`` and
    ``fleet export`` print them."""
    owners: dict[str, list[str]] = {}
    for project, rname in names:
        owners.setdefault(rname, []).append(project)
    return [f"note: {', '.join(names[:-1])} and {names[-1]} "
            f"{'both' if len(names) == 2 else 'all'} read the records named {rname} as theirs "
            "(their project_name), so each counts its actions and slop entries; give each "
            "its own project_name: in its toolkit.yaml"
            for rname, names in sorted(owners.items()) if len(names) > 1]


def project_rows(store: Store) -> list[dict[str, Any]]:
    """One row per project of the fleet (folders first known from the index or fleet file,
    then names seen only in the records), with its path, status, whether its vault was
    found, and its last activity: the latest of its vault's last session (Smith's index or
    its newest session log), its last audit action and its last slop change."""
    rows: dict[str, dict[str, Any]] = {}
    claimed: dict[str, list[str]] = {}  # a name in the records -> the fleet projects it names
    for r in store.fetch_dicts("SELECT * FROM fleet_projects ORDER BY project"):
        rname = r["records_name"] or r["project"]  # a store of before records_name
        rows[r["project"]] = {
            "name": r["project"], "records_name": rname, "path": r["path"],
            "status": r["status"], "vault": bool(r["vault_found"]),
            "origins": list(r["origins"] or []), "note": r["note"] or "",
            "smith_last_session": _ts(r["last_session"])}
        claimed.setdefault(rname, []).append(r["project"])
    folders = set(rows)
    for name, origin in store.fetch(_RECORD_PROJECTS + " ORDER BY 1, 2")[1]:
        # a name the records give no fleet project is a project of its own, even when a
        # folder the fleet names so is named otherwise in the records (then listed twice)
        owners = claimed.get(name) or [name if name not in folders else "\0records\0" + name]
        for owner in owners:
            row = rows.setdefault(owner, {
                "name": name, "records_name": name, "path": None, "status": "no folder",
                "vault": False, "origins": [], "note": "seen only in the records",
                "smith_last_session": None})
            if origin not in row["origins"]:
                row["origins"].append(origin)
    keys = sorted(rows, key=lambda k: (rows[k]["name"], rows[k]["path"] is None))
    for a in store.fetch_dicts(_ACTIVITY, [keys, [rows[k]["records_name"] for k in keys]]):
        row = rows[a["project"]]
        last_session = max((t for t in (row.pop("smith_last_session"), _ts(a["last_session"]))
                            if t), default=None)
        row.update({
            "last_session": last_session, "last_action": _ts(a["last_action"]),
            "last_slop_change": _ts(a["last_change"]),
            "entries": int(a["entries"] or 0),
            # as the dashboard counts them (``toolkit ledger``: its ``[???]`` is unknown)
            "entries_by_confidence": {"high": int(a["high"] or 0),
                                      "medium": int(a["medium"] or 0),
                                      "low": int(a["low"] or 0),
                                      "unknown": int(a["unknown"] or 0)},
            "actions": int(a["actions"] or 0), "open_debt": int(a["open_debt"] or 0)})
        row["last_activity"] = max((t for t in (row["last_session"], row["last_action"],
                                                row["last_slop_change"]) if t), default=None)
    return [rows[k] for k in keys]


# --------------------------------------------------------------------------- recurring knowledge

# Two titles are "near-same" when their normalised forms have a similarity of at least this
# (rapidfuzz's ``fuzz.ratio``: the normalised Indel similarity, 0-100, as difflib's ratio
# measures it): "Retry flaky network tests" and "Retry flaky network test." match (98), "Pin
# the ruff version" and "Pin the mypy version" do not (80).
NEAR_SAME = 85.0
_PUNCT = re.compile(r"[\W_]+", re.UNICODE)


def normalise_title(title: str) -> str:
    """A title folded for comparison: NFKC, casefolded, punctuation and whitespace runs to
    one space, trimmed."""
    return _PUNCT.sub(" ", unicodedata.normalize("NFKC", title).casefold()).strip()


@dataclass
class Recurring:
    """Entries of several projects' ledgers with the same or near-same title."""

    title: str  # the most common title of the group (ties: the first in order)
    entries: list[dict[str, Any]]  # project, entry_id, file, title, confidence

    @property
    def projects(self) -> list[str]:
        return sorted({e["project"] for e in self.entries})


def recurring_knowledge(entries: Sequence[dict[str, Any]]) -> list[Recurring]:
    """Groups of entries whose titles are the same or near-same after
    :func:`normalise_title`, found in at least two projects' ledgers: candidates for a
    user-wide ledger. Groups are ordered by how many projects hold them, then by title."""
    from rapidfuzz import fuzz, process

    groups: list[tuple[str, list[dict[str, Any]]]] = []  # (first normalised title, entries)
    exact: dict[str, int] = {}
    for e in sorted(entries, key=lambda e: (e["project"], e["entry_id"])):
        if not e.get("title"):
            continue
        norm = normalise_title(e["title"])
        if not norm:
            continue
        i = exact.get(norm)
        if i is None and groups:  # the most similar group's first title, scored in C
            best = process.extractOne(norm, [key for key, _ in groups], scorer=fuzz.ratio,
                                      score_cutoff=NEAR_SAME)
            i = best[2] if best is not None else None
        if i is None:
            groups.append((norm, []))
            i = len(groups) - 1
        exact[norm] = i
        groups[i][1].append(e)
    out = []
    for _key, members in groups:
        if len({m["project"] for m in members}) < 2:
            continue
        titles = [m["title"] for m in members]
        top = max(titles, key=lambda t: (titles.count(t), -titles.index(t)))
        out.append(Recurring(top, members))
    return sorted(out, key=lambda r: (-len(r.projects), normalise_title(r.title)))
