"""A realistic, deterministic demo world for the toolkit: ``toolkit demo DIR``.

``write_demo(DIR)`` writes, for an invented billing / webhook API called "acme-api":

* ``DIR/acme-api/``: a real git repository with source files and a committed Smith vault whose
  ledger evolves over a dozen commits (entries added, reinforced, promoted, demoted, pruned,
  merged by a reconcile), session logs, an ``archive/`` copy from an old reset and a
  ``.backups/`` copy from a reconcile, and a ``toolkit.yaml`` pointing at everything below;
* ``DIR/codesmith/slop_ledger/slop_ledger.json``: a CodeSmith slop ledger;
* ``DIR/codesmith/snapshots/<project_hash>/<worktree_hash>/.git``: CodeSmith turn snapshots of
  ``DIR/acme-api`` taken while really editing the work tree: the commits CodeSmith's own git
  plumbing makes (both repositories are written by one ``git fast-import`` each);
* ``DIR/nagi/ledger.db``: a nagi-ledger audit DB (actions, dispatches, approaches);
* ``DIR/nagi/goal.json`` and ``DIR/nagi/goal_history.jsonl``: nagi-ledger's goal gate, an
  active goal and the goals closed before it, as ``goal_gate.py`` writes them.

The world's content (people, sessions, ledger entries, project files, turns, slop and audit
templates, goals) lives in ``toolkit/demo/data/*.yaml`` (read by :mod:`toolkit.demo.content`);
:mod:`toolkit.demo.smith` renders the Smith vault, :mod:`toolkit.demo.records` the slop ledger,
audit DB and goal gate, and :mod:`toolkit.demo.world` builds the repositories.

Everything follows ``FORMATS.md``. The same seed and anchor give the same bytes, rows and git
commit SHAs: all randomness comes from ``random.Random`` streams seeded from the seed, every
time is derived from the anchor date, and git runs with a pinned identity, dates, time zone
and no user or system configuration.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path

from toolkit.demo.world import DemoWorld, _World
from toolkit.errors import ToolkitError, UsageError
from toolkit.sources.snapshots import fnv1a64_hex, side_repo_for

__all__ = ["DemoWorld", "fnv1a64_hex", "side_repo_for", "write_demo"]

DEFAULT_ANCHOR = dt.date(2026, 11, 27)
MIN_AUDIT_ROWS = 100


def write_demo(dest: Path, *, seed: int = 7, anchor: dt.date = DEFAULT_ANCHOR,
               audit_rows: int = 3000,
               progress: Callable[[str], None] | None = None) -> DemoWorld:
    """Write the demo world into ``dest`` (absent or empty) and describe it.

    Raises UsageError when ``dest`` is a non-empty folder (or a file) or ``audit_rows`` is too
    small, and ToolkitError when git is missing or fails. On failure the partly written world
    is removed again.
    """
    dest = Path(dest).expanduser()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is a file", hint="Name a new or empty folder for the demo")
    if dest.is_dir() and any(dest.iterdir()):
        raise UsageError(f"{dest} is not empty; the demo writes into a new or empty folder",
                         hint="Pick another folder or empty this one")
    if audit_rows < MIN_AUDIT_ROWS:
        raise UsageError(f"audit rows must be at least {MIN_AUDIT_ROWS} (got {audit_rows})")
    git_exe = shutil.which("git")
    if git_exe is None:
        raise ToolkitError("git is not installed; the demo needs it for the project history "
                           "and the turn snapshots")
    say = progress or (lambda _msg: None)
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolkitError(f"cannot create the folder: {exc.strerror}", path=dest,
                           hint="Name a folder you can write to") from None
    root = dest.resolve()
    try:
        return _World(root, seed, anchor, audit_rows, git_exe, say).build()
    except OSError as exc:
        _remove_partial(root, created)
        raise ToolkitError(f"cannot write the demo world: {exc.strerror}; nothing kept",
                           path=exc.filename or root) from None
    except BaseException:
        _remove_partial(root, created)
        raise


def _remove_partial(root: Path, created: bool) -> None:
    """Remove a half-written world: the folder we created, or what we put in an empty one."""
    if created:
        shutil.rmtree(root, ignore_errors=True)
    else:
        for child in root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


