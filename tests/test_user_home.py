"""A site build writes nothing in the user's home (DESIGN: nothing is written outside the root
the user gave): matplotlib's font cache and settings, which it would put in ~/.cache and
~/.config, are kept in the build folder, as IPython's and Jupyter's files are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FixtureProject
from toolkit.charts import mpl_env

# the variables that would send matplotlib's folders elsewhere than the home
_AWAY = ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")
DB = ".nagi/ledger.db"  # the audit DB, in the home (tests.conftest.make_project)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _AWAY}
    return {**env, "HOME": str(home), **extra}


def test_build_site_leaves_the_users_home_as_it_was(project: FixtureProject) -> None:
    before = _files(project.home)
    assert DB in before
    env = _env(project.home, **project.env(), TOOLKIT_ANALYSES="0")
    proc = subprocess.run([sys.executable, "-m", "toolkit", "--project", str(project.root),
                           "build-site"], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((project.root / ".toolkit" / "site" / "charts").glob("*.svg"))  # charts drawn
    # SQLite itself leaves a WAL database's -wal and -shm files beside the audit DB the user
    # named after a read-only connection (it cannot remove them without writing): the DB's own
    after = [f for f in _files(project.home) if f not in (f"{DB}-wal", f"{DB}-shm")]
    assert after == before
    assert list((project.root / ".toolkit" / "site.build" / "matplotlib").iterdir())


def test_a_chart_drawn_in_the_toolkits_own_process_keeps_matplotlib_out_of_the_home(
        tmp_path: Path) -> None:
    # the build's fallback when no chart process can start: matplotlib imported in-process
    home, build = tmp_path / "home", tmp_path / "build"
    home.mkdir()
    code = ("import os, sys\n"
            "from pathlib import Path\n"
            "from toolkit.charts import ChartSpec, Series, import_matplotlib, render_svg\n"
            "import_matplotlib(Path(sys.argv[1]))\n"
            "assert 'MPLCONFIGDIR' not in os.environ  # the process's environment is as it was\n"
            "spec = ChartSpec(name='c', title='t', labels=('a', 'b'),\n"
            "                 series=(Series(name='n', values=(1.0, 2.0), color='#336699'),))\n"
            "sys.stdout.write(render_svg(spec).decode()[:5])\n")
    proc = subprocess.run([sys.executable, "-c", code, str(build)], env=_env(home),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "<?xml"
    assert _files(home) == []
    assert list((build / "matplotlib").iterdir())


def test_notebooks_keep_the_users_own_matplotlib_styles_and_the_sites_charts_do_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user with a matplotlib folder of their own (~/.config/matplotlib: styles,
    matplotlibrc) keeps it in the analysis notebooks' kernel; the site's charts read the build
    folder's, whatever the user set up, so they are the same for everyone."""
    home, build = tmp_path / "home", tmp_path / "build"
    styles = home / ".config" / "matplotlib" / "stylelib"
    styles.mkdir(parents=True)
    (styles / "house.mplstyle").write_text("axes.facecolor: 0.9\n", encoding="utf-8")
    for name in _AWAY:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    code = "import matplotlib.style as s; print('house' in s.available)"

    def has_house(env: dict[str, str]) -> str:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120, check=True)
        return proc.stdout.strip()

    assert has_house(mpl_env(build, users=True)) == "True"  # the kernel's environment
    assert has_house(mpl_env(build)) == "False"  # the chart process's
