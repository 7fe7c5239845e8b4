"""The source contract: what every source declares, in one place, for the rest of the toolkit.

A :class:`Source` names its settings (command-line flag, ``toolkit.yaml`` key, environment
variable, default), how it is found and fingerprinted, how it is read into its tables (the
``load`` step, which calls the source's reader in ``toolkit.sources``), the migrations that
create and change its tables, what each table holds, and the status line it records. The
sources are listed once, in load order, in ``toolkit.loaders.SOURCES``; ``toolkit.config``
resolves their settings, the CLI turns them into global options, and ``toolkit.store`` is
handed them: it runs their migrations and loads, and never imports them.

This module sits below both: it imports nothing of the toolkit but errors and records.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import stat
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from toolkit.errors import DataError, ToolkitError, permission_denied

if TYPE_CHECKING:
    from toolkit.config import Config
    from toolkit.records import Problem
    from toolkit.store import Store

T = TypeVar("T")


# --------------------------------------------------------------------------- settings

@dataclass(frozen=True)
class Place:
    """What a setting's default is computed from: the project root, HOME, the environment."""

    root: Path
    home: Path
    env: Mapping[str, str]


@dataclass(frozen=True)
class Setting:
    """One path setting of a source: flags > ``toolkit.yaml`` > environment > default.

    ``key`` is the ``toolkit.yaml`` key and the ``resolve(**flags)`` name; ``field`` the
    :class:`toolkit.config.Config` attribute (``key`` when empty); ``flag`` the global option
    of ``toolkit`` (none when empty) with its ``help``; ``folder``: the path is a folder (else
    a file); ``default`` the path when nothing else gives one (None: not set)."""

    key: str
    help: str
    default: Callable[[Place], Path | None]
    env: str | None = None
    flag: str = ""
    field: str = ""
    folder: bool = False
    rank: int = 0  # position among the global options of `toolkit --help`

    @property
    def attr(self) -> str:
        return self.field or self.key


# --------------------------------------------------------------------------- loading

@dataclass
class SourceResult:
    """What loading one source did."""

    source: str
    location: str
    found: bool
    note: str = ""  # what the source holds (shown by status)
    rows: int = 0
    skipped: bool = False  # fingerprint unchanged
    change: str = ""  # what this load did ("12 new rows"); empty when skipped
    state: dict[str, Any] = field(default_factory=dict)  # kept for the next refresh
    error: ToolkitError | None = None  # the source is present but could not be read
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0


Progress = Callable[[str, int, int], None]  # (label, done, total)
Migration = tuple[str, str]  # (name, SQL): append-only, applied in name order


@dataclass(frozen=True)
class Source:
    """One source's contract (see the module docstring).

    ``fingerprint(cfg)`` -> (location, fingerprint): cheap; an unchanged fingerprint skips
    the load. ``load(store, cfg, full, progress)`` reads the source with its reader and
    replaces (or extends) its rows; it returns the status line as a :class:`SourceResult`
    (``found`` False with a note saying how to point the toolkit at it when it is absent).
    ``tables``: every table and view its migrations create, with what it holds (names
    starting with ``_`` are bookkeeping, not shown). ``bounded_memory``: DuckDB's memory is
    limited while it loads (a source whose rows are built in Python and written to the store
    in batches: the ledger, held until its one commit, and its history, which commits staged
    batches with :meth:`toolkit.store.Store.commit_staged`; the audit, streamed from SQLite
    in row groups, keeps DuckDB's default and its measured speed)."""

    name: str
    fingerprint: Callable[[Config], tuple[str, str]]
    load: Callable[[Store, Config, bool, Progress | None], SourceResult]
    settings: tuple[Setting, ...] = ()
    migrations: tuple[Migration, ...] = ()
    tables: Mapping[str, str] = field(default_factory=dict)
    bounded_memory: bool = False


class FastPathFailed(Exception):
    """A loader's fast path hit data it cannot take; the load is redone the careful way."""


# Set while a load is redone after FastPathFailed: loaders then skip their fast path.
_CAREFUL: contextvars.ContextVar[bool] = contextvars.ContextVar("careful", default=False)


def careful() -> bool:
    """Whether this load is the careful redo after :class:`FastPathFailed`."""
    return _CAREFUL.get()


@contextmanager
def carefully() -> Iterator[None]:
    token = _CAREFUL.set(True)
    try:
        yield
    finally:
        _CAREFUL.reset(token)


_ASKED: contextvars.ContextVar[dict[Hashable, object] | None] = contextvars.ContextVar(
    "asked_once", default=None)


@contextmanager
def asking_once() -> Iterator[None]:
    """Within the block (a refresh), each question asked through :func:`asked_once` is asked
    once: the sources fingerprint and then load the same git repositories (a side repo's
    HEAD, the repository holding the vault), and all of them get the first answer (one HEAD
    for the whole refresh, not one git process per question)."""
    token = _ASKED.set({})
    try:
        yield
    finally:
        _ASKED.reset(token)


def asked_once(key: Hashable, ask: Callable[[], T]) -> T:
    """``ask()``, or inside :func:`asking_once` the answer it gave there for ``key``."""
    asked = _ASKED.get()
    if asked is None:
        return ask()
    if key not in asked:
        asked[key] = ask()
    return asked[key]  # type: ignore[return-value]


def session_files(folder: Path) -> list[Path]:
    """The session logs (``*.md``) of a vault's ``sessions`` folder, in name order; none when
    there is no such folder. A folder that is there but cannot be listed is a
    :class:`DataError` (a permission denied names what to change), not a vault without
    sessions: pathlib's ``glob`` would answer "none" for it, unsaid."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except PermissionError:
        raise permission_denied(folder) from None
    except OSError as exc:
        raise DataError(f"cannot list the session logs: {exc.strerror}", path=folder) from None
    return sorted(folder / name for name in names if name.endswith(".md"))


def fingerprint_paths(paths: Sequence[Path]) -> str:
    """Cheap change detector: size, mtime_ns, inode and mode of each path (missing or not to
    be looked at -> '-'), and where a symbolic link leads: a path that is one, and a folder of
    the paths reached through one, add their target. A file moved elsewhere and linked back in
    its place (or its folder so) keeps its size, time and inode, but what reads it changed: a
    read through a link leaving the vault is said (FAULTS G3), and the store must load it
    again to say so. So does a file made unreadable (``chmod 000``) or readable again: its
    bytes and time stay, but the load's answer (a warning, or the file's rows) changes."""
    h = hashlib.sha256()
    for folder in dict.fromkeys(os.path.dirname(p) for p in paths):
        real = os.path.realpath(folder)
        if real != os.path.abspath(folder):
            h.update(f"{folder}\0->{real}\n".encode())
    for p in paths:
        try:
            st = os.lstat(p)  # one call a path, as before; a link's target is stat-ed too
            link = stat.S_ISLNK(st.st_mode)
            if link:
                st = os.stat(p)
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_mode:o}\n"
                     .encode())
            if link:
                h.update(f"{p}\0->{os.path.realpath(p)}\n".encode())
        except OSError:
            h.update(f"{p}\0-\n".encode())
    return h.hexdigest()


def migration_sha256(sql: str) -> str:
    """The SHA-256 of a migration's text: what the store records and checks."""
    return hashlib.sha256(sql.encode("utf-8")).hexdigest()
