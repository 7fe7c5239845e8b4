"""Parquet datasets of the store: one dataset per table, partitioned by project.

The layout under the folder ``OUT`` the user names (shared by several projects, developers or
machines)::

    OUT/<table>/_schema.json                      the table's columns and their types
    OUT/<table>/project=<name>/part-0.parquet     one project's rows
    OUT/<table>/project=<name>/.toolkit-export    what the partition holds (its fingerprint)

so ``spark.read.parquet("OUT/actions")`` is the actions of every project, with a ``project``
column. Spark, Trino's Hive connector and Hadoop skip files whose names start with ``_`` or
``.``, and DuckDB reads ``OUT/actions/project=*/*.parquet``: none of them reads the schema
file, the fingerprint or a staging folder as data. The rules:

* **one partition at a time, atomically**: a partition is written into a staging folder beside
  it (``.toolkit-staging-…``) and swapped in by one rename (Linux ``renameat2`` with
  ``RENAME_EXCHANGE``); where the file system cannot exchange, the old partition is renamed
  aside first, and an export interrupted between the two renames is repaired by the next one
  (the old partition is put back). A reader or a crash sees the old partition or the new one,
  never a mix of both. Every folder a project's export will write in or remove is checked
  before its first change: one it cannot change is refused, with nothing of it exported;
* **an unchanged partition is not rewritten**: its fingerprint (format, columns and types,
  rows and a digest of their content) is compared with the one stored in the partition;
* **only the project's own partitions are touched**: other projects' partitions are never
  read, written or removed, so many exporters share one folder; the project's partitions of
  tables its store no longer has are removed;
* **the partition value is escaped as Hive escapes it** (``%XX`` for control characters,
  space and ``"#%'*/:=?[\\]^{}``, everything else as it is, UTF-8), which Spark, Trino and
  DuckDB decode back to the name; ``OUT`` is resolved (every parent) and each folder below it
  is checked to be one plain name that is no symbolic link, so no name (``..``, ``a/b``) and
  no planted link reaches outside it;
* a store column named ``project`` (``actions.project``, ``sessions.project``: the project the
  record itself names) is written as ``record_project``, since ``project`` is the partition.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import ToolkitError, UsageError
from toolkit.safewrite import atomic_replace, check_changeable, pause, pid_alive

if TYPE_CHECKING:
    from toolkit.store import Store

FORMAT = "toolkit-parquet/1"
PARTITION_COLUMN = "project"
RENAMED = {"project": "record_project"}
SCHEMA_FILE = "_schema.json"
FINGERPRINT_FILE = ".toolkit-export"
DATA_FILE = "part-0.parquet"
STAGING = ".toolkit-staging-"
ASIDE = ".toolkit-aside-"
# Hive's (and Spark's) escaped characters, plus space; '%' itself, so the escape is reversible.
_ESCAPED = frozenset('"#%\'*/:=?[\\]^{} \x7f') | frozenset(map(chr, range(0x20)))
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # what Hive, Spark and Trino read back as NULL
_MAX_NAME_BYTES = 255


@dataclass(frozen=True)
class Partition:
    """One table's partition of one project, as the export left it."""

    project: str
    table: str
    rows: int
    written: bool  # False: it held the same rows already and was left alone
    path: Path


# --------------------------------------------------------------------------- names and types


def partition_dirname(project: str) -> str:
    """``project=<name>`` with the name escaped as Hive escapes partition values.

    Raises UsageError for an empty (or blank) name or one too long for a folder name."""
    if not project.strip():
        raise UsageError("the project name is empty", hint="Name it with --project-name")
    value = "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in project)
    if value == _HIVE_NULL:  # keep engines from reading this one name back as NULL
        value = "%5F" + value[1:]
    name = f"{PARTITION_COLUMN}={value}"
    if len(name.encode("utf-8", "surrogatepass")) > _MAX_NAME_BYTES:
        raise UsageError(f"the project name is too long for a folder name ({len(project)} "
                         "characters)", hint="Name it with a shorter --project-name")
    return name


def engine_types(duck_type: str) -> dict[str, str]:
    """How a store column's type reads in Spark and in Trino (the schema file's columns)."""
    if duck_type.endswith("[]"):
        inner = engine_types(duck_type[:-2])
        return {"spark": f"array<{inner['spark']}>", "trino": f"array({inner['trino']})"}
    simple = {
        "VARCHAR": ("string", "varchar"), "JSON": ("string", "varchar"),
        "BOOLEAN": ("boolean", "boolean"), "TINYINT": ("tinyint", "tinyint"),
        "SMALLINT": ("smallint", "smallint"), "INTEGER": ("int", "integer"),
        "BIGINT": ("bigint", "bigint"), "FLOAT": ("float", "real"),
        "DOUBLE": ("double", "double"), "DATE": ("date", "date"),
        "TIMESTAMP": ("timestamp_ntz", "timestamp(6)"),
        "TIMESTAMP WITH TIME ZONE": ("timestamp", "timestamp(6)"),  # Hive tables: UTC
        "BLOB": ("binary", "varbinary"),
    }
    if duck_type not in simple:
        raise ToolkitError(f"no Parquet type mapping for the store type {duck_type} (a bug)")
    spark, trino = simple[duck_type]
    return {"spark": spark, "trino": trino}


def _table_schema(store: Store, table: str, columns: Sequence[tuple[str, str]]
                  ) -> dict[str, Any]:
    cols: list[dict[str, Any]] = [
        {"name": RENAMED.get(c, c), "type": t, **engine_types(t),
         **({"store_column": c} if c in RENAMED else {})} for c, t in columns]
    cols.append({"name": PARTITION_COLUMN, "type": "VARCHAR", "spark": "string",
                 "trino": "varchar", "partition": True})
    return {"format": FORMAT, "table": table, "description": store.table_docs().get(table, ""),
            "partitioned_by": [PARTITION_COLUMN], "columns": cols}


# --------------------------------------------------------------------------- paths


def _inside(parent: Path, name: str) -> Path:
    """``parent/name``, checked to be a folder entry right inside ``parent`` (already resolved):
    one path component, neither ``.`` nor ``..``, and not a symbolic link."""
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise ToolkitError(f"refusing to write outside {parent}", path=parent / name)
    path = parent / name
    if path.is_symlink():
        raise ToolkitError("refusing to write through a symbolic link", path=path,
                           hint="Export into a folder without links in it")
    return path


def _tag(dirname: str) -> str:
    return hashlib.sha256(dirname.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _remove_tree(path: Path, what: str = "cannot remove an old partition") -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ToolkitError(f"{what}: {exc.strerror}", path=path,
                           hint="Make it and the folders in it writable (chmod u+rwx); the "
                                "next export removes it") from None


def _leftovers(table_dir: Path, dirname: str) -> tuple[list[Path], list[Path]]:
    """What interrupted exports of this partition left in ``table_dir``: old partitions set
    aside, and the staging folders of writers no longer running."""
    tag = _tag(dirname)
    try:
        hidden = sorted(n for n in os.listdir(table_dir) if n.startswith("."))  # one listing
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    aside = [table_dir / n for n in hidden if n.startswith(f"{ASIDE}{tag}-")]
    dead = []
    for leftover in [table_dir / n for n in hidden if n.startswith(f"{STAGING}{tag}-")]:
        pid = leftover.name.removeprefix(f"{STAGING}{tag}-").split("-", 1)[0]
        if pid.isdecimal() and not pid_alive(int(pid)):
            dead.append(leftover)
    return aside, dead


def _repair(table_dir: Path, dirname: str) -> bool:
    """Undo what an interrupted export of this partition left: put an old partition set
    aside back when the new one never arrived; remove staging folders of dead writers.
    Whether a partition was put back."""
    target = table_dir / dirname
    aside, dead = _leftovers(table_dir, dirname)
    put_back = False
    for leftover in aside:
        if not target.exists():
            os.rename(leftover, target)
            put_back = True
        else:
            _remove_tree(leftover)
    for leftover in dead:
        _remove_tree(leftover)
    return put_back


def _check_changeable(root: Path, name: str, dirname: str, changing: Sequence[str],
                      tables: set[str]) -> None:
    """Refuse, before a project's first change, when a folder its export would write in or
    remove cannot be changed: ``root``; of each table in ``changing``, its folder and the
    project's partition there (written anew, then the old one removed after the swap); the
    leftovers the export clears and the project's partitions of tables gone. A read-only
    partition used to be swapped out and then not removed: the export said it failed after
    the new data was in, and left a staging folder that made every later export fail."""
    done = f"nothing of {name} was exported"
    check_changeable(root, done)
    partitions = _gone_partitions(root, dirname, tables)
    for table in sorted(tables):
        table_dir = root / table
        if table_dir.is_symlink() or not table_dir.is_dir():
            continue  # (a link is refused where the export meets it)
        if not os.access(table_dir, os.R_OK | os.X_OK):  # (every table's folder is listed)
            check_changeable(table_dir, done)
        aside, dead = _leftovers(table_dir, dirname)
        if table in changing or aside or dead:
            check_changeable(table_dir, done)
            partitions.append(table_dir / dirname)
        partitions += aside + dead
    for partition in partitions:  # each is removed whole, after the swap or as a leftover
        if partition.is_symlink():
            continue
        check_changeable(partition, done)
        for folder, subs, _files in os.walk(partition):
            for sub in subs:
                check_changeable(Path(folder) / sub, done)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one atomic step (Linux renameat2); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(staged: Path, target: Path, table: str) -> Path | None:
    """Make ``staged`` the partition at ``target`` in one step; the old partition's folder,
    now under another name, for the caller to remove (None when there was none)."""
    if not target.exists():
        os.rename(staged, target)
        return None
    if _exchange(staged, target):  # staged now holds the old partition
        return staged
    aside = target.parent / f"{ASIDE}{_tag(target.name)}-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(target, aside)
    pause("export_aside", table)
    os.rename(staged, target)
    return aside


# --------------------------------------------------------------------------- the export


def export_parquet(dest: Path, projects: Sequence[tuple[str, Store]], *,
                   errors: list[tuple[str, ToolkitError]] | None = None) -> list[Partition]:
    """Export each (project name, store) into ``dest`` (see the module doc); the partitions
    of each project and table, in order. ``toolkit export`` passes one project,
    ``toolkit fleet export`` every project of the fleet. With ``errors``, a project that
    cannot be exported (a folder it would change that cannot be changed, a write that
    fails) is added to it as (name, error), in the order of ``projects``, and the others
    are exported; without, its error is raised."""
    names = [name for name, _store in projects]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise UsageError(f"two projects share the name {dup[0]!r}",
                         hint="Give each project its own name")
    dirnames = [partition_dirname(name) for name in names]
    dest = Path(dest).expanduser()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is a file", hint="Name a folder for the datasets")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolkitError(f"cannot create the folder: {exc.strerror}", path=dest) from None
    root = dest.resolve()
    jobs = list(zip(projects, dirnames, strict=True))
    # projects with stores of their own are exported side by side (each store is its own
    # DuckDB connection; much of the work is waiting on the file system, hence two threads
    # a core); one store passed under several names is used by one thread only
    workers = min(len(jobs), 2 * (os.cpu_count() or 1), 8)
    if len({id(store) for _name, store in projects}) < len(projects):
        workers = 1
    shared = _Shared()

    def export(job: tuple[tuple[str, Store], str]
               ) -> tuple[list[Partition], ToolkitError | None]:
        (name, store), dirname = job
        try:
            return _export_project(root, name, dirname, store, shared), None
        except OSError as exc:
            error = ToolkitError(f"cannot write the export: {exc.strerror}",
                                 path=Path(exc.filename) if exc.filename else root,
                                 hint="Check that the folder is writable and has space")
        except ToolkitError as exc:
            error = exc
        if errors is None:
            raise error
        return [], error

    if workers <= 1:
        results = [export(job) for job in jobs]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(export, jobs))
    if errors is not None:
        errors += [(name, error) for ((name, _store), _d), (_parts, error)
                   in zip(jobs, results, strict=True) if error is not None]
    return [part for parts, _error in results for part in parts]


@dataclass
class _Shared:
    """What the projects of one export share: an empty table's file is the same for every
    project (written by DuckDB once, then copied), and each schema file is written once."""

    empties: dict[tuple[str, tuple[tuple[str, str], ...]], bytes] = field(default_factory=dict)
    schemas: set[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=set)


def _export_project(root: Path, name: str, dirname: str, store: Store, shared: _Shared
                    ) -> list[Partition]:
    by_table: dict[str, list[tuple[str, str]]] = {}
    for table, kind, column, duck_type in store.schema():
        if kind == "table":
            by_table.setdefault(table, []).append((column, duck_type))
    digests = store.table_digests(sorted(by_table))
    fingerprints = {table: {"format": FORMAT, "project": name, "table": table,
                            "rows": digests[table][0], "columns": [[c, t] for c, t in columns],
                            "digest": digests[table][1]}
                    for table, columns in by_table.items()}
    unchanged = {t for t, f in fingerprints.items() if _holds(root / t / dirname, f)}
    _check_changeable(root, name, dirname, [t for t in fingerprints if t not in unchanged],
                      set(by_table))
    out: list[Partition] = []
    for table, columns in sorted(by_table.items()):
        table_dir = _inside(root, table)
        table_dir.mkdir(exist_ok=True)
        key = (table, tuple(columns))
        if key not in shared.schemas:
            _write_schema(_inside(table_dir, SCHEMA_FILE), _table_schema(store, table, columns))
            shared.schemas.add(key)
        target = _inside(table_dir, dirname)
        put_back = _repair(table_dir, dirname)
        rows, fingerprint = digests[table][0], fingerprints[table]
        # (one that did not hold may now: _repair put back the partition a killed export
        # had set aside)
        if table in unchanged or (put_back and _holds(target, fingerprint)):
            out.append(Partition(name, table, rows, False, target))
            continue
        staged = table_dir / f"{STAGING}{_tag(dirname)}-{os.getpid()}-{secrets.token_hex(4)}"
        staged.mkdir()
        old = None
        try:
            if rows == 0 and key in shared.empties:
                (staged / DATA_FILE).write_bytes(shared.empties[key])
            else:
                store.write_parquet(table, staged / DATA_FILE,
                                    [(c, RENAMED.get(c, c)) for c, _t in columns])
                if rows == 0:
                    shared.empties[key] = (staged / DATA_FILE).read_bytes()
            (staged / FINGERPRINT_FILE).write_text(json.dumps(fingerprint, sort_keys=True),
                                                   encoding="utf-8")
            pause("export_staged", table)
            old = _swap_in(staged, target, table)
        finally:
            if old is None and staged.exists():
                _remove_tree(staged)
        if old is not None:
            _remove_tree(old, "the new partition is in place, but its old copy cannot be "
                              "removed")
        out.append(Partition(name, table, rows, True, target))
    _drop_gone_tables(root, dirname, set(by_table))
    return out


def _holds(partition: Path, fingerprint: dict[str, Any]) -> bool:
    """Whether ``partition`` holds the rows ``fingerprint`` describes (and is left alone)."""
    return _fingerprint(partition) == fingerprint and (partition / DATA_FILE).is_file()


def _fingerprint(partition: Path) -> Any:
    try:
        return json.loads((partition / FINGERPRINT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_schema(path: Path, schema: dict[str, Any]) -> None:
    data = (json.dumps(schema, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    atomic_replace(path, data, fsync=False, fsync_dir=False)


def _gone_partitions(root: Path, dirname: str, tables: set[str]) -> list[Path]:
    """This project's partitions of tables its store no longer has (in folders with a
    toolkit schema file only: nothing else in ``root`` is touched)."""
    gone = []
    for table_dir in sorted(root.iterdir()):
        if table_dir.name in tables or table_dir.is_symlink() or not table_dir.is_dir():
            continue
        try:
            marker = json.loads((table_dir / SCHEMA_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        target = table_dir / dirname
        if isinstance(marker, dict) and marker.get("format") == FORMAT and target.exists():
            gone.append(target)
    return gone


def _drop_gone_tables(root: Path, dirname: str, tables: set[str]) -> None:
    """Remove this project's partitions of tables its store no longer has."""
    for target in _gone_partitions(root, dirname, tables):
        table_dir = target.parent
        _inside(table_dir, dirname)
        aside = table_dir / f"{ASIDE}{_tag(dirname)}-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(target, aside)
        _remove_tree(aside)
