"""bench/_stages.py: the stage hooks still find what they wrap in the store, so the benchmark's
"load peak by stage" line names the stages of a real load (no timing or size asserted)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_load_stages_names_each_source_and_its_commit(tmp_path: Path) -> None:
    saved = list(sys.path)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import _stages
        import bench_editor
    finally:
        sys.path[:] = saved  # bench/_stages.py puts bench/ on the path again when imported
    bench_editor.make_vault(tmp_path, 50)
    # (conftest's isolated_env has taken the toolkit's own variables out of the environment)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": str(ROOT)}
    hwm, stages = _stages.load_stages(["--project", str(tmp_path), "load"], env,
                                      tmp_path / "stages.json")
    assert (tmp_path / ".toolkit" / "ledger.duckdb").is_file()  # the load itself ran
    for stage in ("open", "ledger", "ledger: parse", "ledger: insert", "ledger: commit", "history"):
        assert stage in stages, stages
    assert list(stages).index("ledger") < list(stages).index("history")
    assert hwm > 0 and all(peak > 0 for peak in stages.values())


def test_a_measured_process_imports_the_toolkit_its_path_names_not_its_working_folders(
        tmp_path: Path) -> None:
    """A benchmark started inside another checkout (an A/B run against main from a worktree)
    measures the toolkit PYTHONPATH names: the child does not put its working folder first on
    its path, where that checkout's ``toolkit`` would shadow it."""
    saved = list(sys.path)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import _measure
    finally:
        sys.path[:] = saved
    shadow = tmp_path / "toolkit"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = _measure.measure(["-c", "import toolkit; print(toolkit.__file__)"], cwd=tmp_path,
                           env=env)
    assert got.returncode == 0, got.stderr
    assert Path(got.stdout.strip()) == ROOT / "toolkit" / "__init__.py"
