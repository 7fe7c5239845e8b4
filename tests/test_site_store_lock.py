"""A large site's build closes the store's DuckDB connection between its reads, to give back
the memory DuckDB keeps (``Store.release``), and DuckDB's lock on the file goes with it: another
process may open the store meanwhile. One build still shows one state of the store: when
another process wrote the store in such a gap, the build's next read is refused as busy
(exit 75, "run the command again"); a process that only read it changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def _load_during_the_build(project: Any, monkeypatch: pytest.MonkeyPatch, *,
                           change: bool) -> list[subprocess.CompletedProcess[str]]:
    """Make every site large and run `toolkit load` in another process in the gap between
    the build's release of the store and its fetch of the rows (after ``change``-ing a ledger
    file, or not)."""
    import toolkit.site as site

    # the fixture's site is small; the build treats any site as large above this many pages
    monkeypatch.setattr(site, "_LARGE_SITE", 1)
    fetch_rows = site.fetch_rows
    loads: list[subprocess.CompletedProcess[str]] = []

    def meanwhile(store: Any, pages: Any) -> Any:
        if loads:  # one load, in the first build's gap only
            return fetch_rows(store, pages)
        if change:
            patterns = project.ledger / "patterns.md"
            patterns.write_text(patterns.read_text(encoding="utf-8").replace(
                "**Pattern:**", "**Pattern:** Changed meanwhile.", 1), encoding="utf-8")
        loads.append(subprocess.run([sys.executable, "-m", "toolkit", "load"],
                                    cwd=project.root, env=dict(os.environ), text=True,
                                    capture_output=True, timeout=120))
        return fetch_rows(store, pages)

    monkeypatch.setattr(site, "fetch_rows", meanwhile)
    return loads


def _chart_processes() -> set[int]:
    """The chart processes (``python -m toolkit.charts``) this process started that still run."""
    out = set()
    for folder in Path("/proc").iterdir():
        if not folder.name.isdigit():
            continue
        try:
            stat = (folder / "stat").read_text()
            argv = (folder / "cmdline").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if int(ppid) == os.getpid() and state != "Z" and b"toolkit.charts" in argv:
            out.add(int(folder.name))
    return out


def test_a_build_whose_store_another_process_changed_stops_busy(project, cli_run,
                                                               monkeypatch):
    import toolkit.site as site

    loads = _load_during_the_build(project, monkeypatch, change=True)
    result = cli_run("build-site", "--build-time", "2026-06-01T00:00:00Z")
    assert [load.returncode for load in loads] == [0], loads[0].stderr
    assert result.exit_code == 75, result.output
    assert "another toolkit process changed the store" in result.output
    assert "Traceback" not in result.output
    # nothing half-made where the user looks: the site was never written; and nothing left
    # running: the chart process it started is ended, not kept for a next build
    assert not (project.root / ".toolkit" / "site" / "index.html").exists()
    assert _chart_processes() == {p.pid for p in site._CHART_IDLE}
    # and the next build, on the one state the store now holds, goes through
    again = cli_run("build-site", "--build-time", "2026-06-01T00:00:00Z")
    assert again.exit_code == 0, again.output
    assert (project.root / ".toolkit" / "site" / "index.html").exists()


def test_a_process_that_changed_nothing_in_the_gap_leaves_the_build_alone(project, cli_run,
                                                                          monkeypatch):
    cli_run("load")  # the store is up to date: the load in the gap has nothing to write
    loads = _load_during_the_build(project, monkeypatch, change=False)
    result = cli_run("build-site", "--build-time", "2026-06-01T00:00:00Z")
    assert [load.returncode for load in loads] == [0], loads[0].stderr
    assert result.exit_code == 0, result.output
