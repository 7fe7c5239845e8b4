"""A load killed while the history's entries are written changes nothing a reader sees.

The history writes a big content's entries a batch at a time, each batch committed on its own
(so DuckDB does not hold a whole load's rows until one commit), and makes them count in its
last transaction. A real ``python -m toolkit load`` is SIGKILLed right after such a batch
commit; the store then still answers with the history as the last finished load left it, its
recorded state is unchanged, and the next load reads the new commit and gives what a full
load gives.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests._history_helpers import Project, entry_b
from tests.conftest import kill_at_pause
from toolkit import config as config_mod
from toolkit.loaders import SOURCES
from toolkit.store import ROW_BATCH, Store

# more entries than one batch: the history commits a batch before its last transaction
BIG = ROW_BATCH + 500


def _history(root: Path, home: Path) -> dict[str, object]:
    """What a reader of the history sees, and the history's record in ``_sources``."""
    cfg = config_mod.resolve(cwd=root, env={"HOME": str(home)})
    with Store.open(cfg.db_path, sources=SOURCES, read_only=True) as store:
        return {
            "versions": store.fetch("SELECT version_id, seq, entries, high, medium, low "
                                    "FROM ledger_versions ORDER BY seq, version_id")[1],
            "entries": store.fetch("SELECT version_id, entry_key, confidence, reflections, "
                                   "text_hash FROM ledger_entry_versions "
                                   "ORDER BY version_id, entry_key")[1],
            "changes": store.fetch("SELECT version_id, change, count(*) FROM ledger_changes "
                                   "GROUP BY ALL ORDER BY min(seq), version_id, change")[1],
            "record": store.fetch("SELECT fingerprint, rows, state FROM _sources "
                                  "WHERE source = 'history'")[1],
        }


def _toolkit(root: Path, home: Path, *args: str, pause: str | None = None
             ) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOOLKIT_EDITOR_PAUSE"}
    env["HOME"] = str(home)
    if pause:
        env["TOOLKIT_EDITOR_PAUSE"] = pause
    return subprocess.Popen([sys.executable, "-m", "toolkit", "--project", str(root), *args],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _kill_at(root: Path, home: Path, point: str) -> None:
    kill_at_pause(_toolkit(root, home, "load", pause=point), point)


def _load(root: Path, home: Path, *args: str) -> None:
    proc = _toolkit(root, home, "load", *args)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err


def test_a_load_killed_after_a_history_batch_leaves_the_history_as_it_was(tmp_path,
                                                                           isolated_env):
    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    two = [entry_b("Retry budget"), entry_b("Idempotency keys")]
    p.commit("reflect: two lessons", {"patterns": two})
    p.write({"patterns": [*two, entry_b("Uncommitted")]})  # the working files differ from HEAD
    _load(p.root, isolated_env)
    before = _history(p.root, isolated_env)
    assert [v[:3] for v in before["versions"]] == [(f"git:{p.commits[0]}", 1, 2),
                                                   ("working", 2, 3)]

    many = [entry_b(f"Lesson {i:05d}", ("low", "medium", "high")[i % 3]) for i in range(BIG)]
    p.commit("reflect: many lessons", {"patterns": many})
    p.write({"patterns": [*many, entry_b("Uncommitted")]})
    _kill_at(p.root, isolated_env, "after_staged_commit")

    # a batch of the new commit's entries was committed, and no reader sees it
    cfg = config_mod.resolve(cwd=p.root, env={"HOME": str(isolated_env)})
    with Store.open(cfg.db_path, sources=SOURCES, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM _history_entries "
                            "WHERE starts_with(blob, 'staged:')") > 0
    assert _history(p.root, isolated_env) == before

    # the next load reads the new commit, as a full load of it does
    _load(p.root, isolated_env)
    after = _history(p.root, isolated_env)
    assert [v[:3] for v in after["versions"]] == [(f"git:{p.commits[0]}", 1, 2),
                                                  (f"git:{p.commits[1]}", 2, BIG),
                                                  ("working", 3, BIG + 1)]
    assert after["changes"] == [(f"git:{p.commits[0]}", "added", 2),
                                (f"git:{p.commits[1]}", "added", BIG),
                                (f"git:{p.commits[1]}", "removed", 2),
                                ("working", "added", 1)]
    with Store.open(cfg.db_path, sources=SOURCES, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM _history_entries "
                            "WHERE starts_with(blob, 'staged:')") == 0
    _load(p.root, isolated_env, "--full")
    full = _history(p.root, isolated_env)
    assert {k: v for k, v in full.items() if k != "record"} == \
        {k: v for k, v in after.items() if k != "record"}


def test_ctrl_c_after_a_history_batch_is_interrupted_and_the_next_load_is_whole(
        tmp_path, isolated_env):
    """Ctrl-C (SIGINT) right after a batch commit, where no transaction is open: the load
    says "Interrupted." and exits 130 (never "the store failed: ... cannot rollback - no
    transaction is active", exit 1); nothing a reader sees changed, and the next load
    gives what a full load gives."""
    import signal

    p = Project.create(tmp_path / "acme")
    (p.root / ".gitignore").write_text(".toolkit/\n")
    p.commit("reflect: one lesson", {"patterns": [entry_b("Retry budget")]})
    _load(p.root, isolated_env)
    before = _history(p.root, isolated_env)
    many = [entry_b(f"Lesson {i:05d}") for i in range(BIG)]
    p.commit("reflect: many lessons", {"patterns": many})

    proc = _toolkit(p.root, isolated_env, "load", pause="after_staged_commit")
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("TOOLKIT_EDITOR_PAUSE after_staged_commit "):
            break
    else:
        raise AssertionError(f"never paused; exit {proc.wait()}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "Interrupted.\n")
    assert _history(p.root, isolated_env) == before

    _load(p.root, isolated_env)
    after = _history(p.root, isolated_env)
    _load(p.root, isolated_env, "--full")
    full = _history(p.root, isolated_env)
    assert {k: v for k, v in full.items() if k != "record"} == \
        {k: v for k, v in after.items() if k != "record"}
