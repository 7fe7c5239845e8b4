"""build-site's Analyses section: the notebooks run in a real kernel against the project's store,
each a page with its charts (files of the site) and findings; a failing notebook gets a page
naming its cell; an unchanged rebuild runs none; a redacted build redacts them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import yaml
from click.testing import CliRunner, Result

from tests._site_helpers import BUILD_TIME, TODAY, PageScan, World, build, make_world, scan
from tests.conftest import isolate, make_project, reap
from toolkit.config import resolve
from toolkit.errors import UsageError
from toolkit.notebooks import NOTEBOOKS_DIR

BUNDLED = sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb"))
SECRET = "sk-proj-Zq81XhDkL0pVwN3bTf7uYc2M"


def _notebook(path: Path, *cells: str, title: str = "# A notebook") -> Path:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(title),
        nbformat.v4.new_code_cell("project_path = None", metadata={"tags": ["parameters"]}),
        *(nbformat.v4.new_code_cell(c) for c in cells)])
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _list_notebooks(root: Path, *names: str) -> None:
    cfg = root / "toolkit.yaml"
    data = yaml.safe_load(cfg.read_text(encoding="utf-8")) if cfg.is_file() else {}
    cfg.write_text(yaml.safe_dump({**(data or {}), "notebooks": list(names)}), encoding="utf-8")


@pytest.fixture(autouse=True)
def _analyses_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite builds sites without a kernel (tests/conftest.py); these tests are about it."""
    monkeypatch.setenv("TOOLKIT_ANALYSES", "1")


@pytest.fixture
def no_bundled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundled notebooks' folder, for this process's builds, made a missing one: for the
    tests whose subject is a listed notebook (the other tests run the bundled ones)."""
    folder = tmp_path / "no-bundled-notebooks"
    monkeypatch.setattr("toolkit.notebooks.NOTEBOOKS_DIR", folder)
    return folder


def test_analyses_can_be_turned_off(project, cli_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--no-analyses, analyses: false and TOOLKIT_ANALYSES=0 build the site without the
    Analyses section and start no kernel; a value that is not yes/no is a usage error."""
    result = cli_run("build-site", "--no-analyses", "--build-time", "2026-05-10T12:00:00")
    assert result.exit_code == 0, result.output
    assert "Analyses:" not in result.stdout
    site = project.root / ".toolkit" / "site"
    assert (site / "index.html").is_file() and not (site / "analyses").exists()
    nav = yaml.safe_load((project.root / ".toolkit" / "site.build" / "mkdocs.yml")
                        .read_text(encoding="utf-8"))["nav"]
    assert not [s for s in nav if isinstance(s, dict) and "Analyses" in s]
    (project.root / "toolkit.yaml").write_text("analyses: false\n", encoding="utf-8")
    assert not resolve(project=project.root).analyses
    (project.root / "toolkit.yaml").unlink()
    assert resolve(project=project.root).analyses  # TOOLKIT_ANALYSES=1 (the fixture above)
    assert not resolve(project=project.root, env={"TOOLKIT_ANALYSES": "off"}).analyses
    with pytest.raises(UsageError, match="TOOLKIT_ANALYSES='maybe' is not a yes/no value"):
        resolve(project=project.root, env={"TOOLKIT_ANALYSES": "maybe"})


def _analysis_files(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [f for f in result.written if f.startswith("analyses/")]


def test_build_runs_the_notebooks_and_an_unchanged_rebuild_runs_none(
        tmp_path: Path, cli_run, isolated_env: Path,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Built in-process, then (after the data changed) by `toolkit build-site`, whose report
    says what the analyses did: this is the suite's CLI build with the analyses on. The
    kernel is the toolkit's own Python, whatever `python3` kernel the user installed, and the
    build leaves nothing in the user's home (no ~/.ipython, ~/.cache or ~/.config)."""
    world = make_world(tmp_path, analyses=True)
    homes = (isolated_env, world.home)  # the in-process builds' home, the CLI builds'
    for home in homes:
        spec = home / ".local" / "share" / "jupyter" / "kernels" / "python3"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps(  # a kernel for other work: cannot run these
            {"argv": [sys.executable, "-c", "raise SystemExit(3)", "{connection_file}"],
             "display_name": "another Python", "language": "python"}), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")  # user kernels first, as outside a venv
    first = build(world)
    assert first.analyses_run == BUNDLED and first.analyses_failed == []
    nav = yaml.safe_load((first.build_dir / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    [section] = [s["Analyses"] for s in nav if "Analyses" in s]
    assert [next(iter(p)) for p in section] == ["Debt the agent left", "What each turn changed",
                                                "What the agent learned",
                                                "Where dispatches are wasted"]
    site = first.out
    turns = scan(site / "analyses" / "what-each-turn-changed" / "index.html").body_text
    assert "No turn snapshots found for this workspace." in turns  # the fixture has none
    for slug in ("debt-the-agent-left", "what-the-agent-learned", "where-dispatches-are-wasted"):
        page = site / "analyses" / slug / "index.html"
        s = scan(page)
        assert "Finding:" in s.body_text
        images = [dict(a)["src"] for t, a in s.tags if t == "img" and "chart-" in dict(a)["src"]]
        assert images, slug
        for src in images:  # files of the site, next to the page: no other host
            assert src and "/" not in src and src.endswith(".svg")
            svg = (page.parent / src).read_text(encoding="utf-8")
            assert svg.lstrip().startswith("<?xml") and "<svg" in svg
            assert "href=\"http" not in svg and "<script" not in svg
    # the data the notebooks read: the fixture's 3 slop entries, 2 of them open
    debt = scan(site / "analyses" / "debt-the-agent-left" / "index.html").body_text
    assert "Finding: 2 of 3 entries are still open" in debt

    again = build(world)
    assert again.analyses_run == [] and again.analyses_cached == BUNDLED
    assert _analysis_files(again) == [] and again.rebuilt == 0

    slop = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    data = json.loads(slop.read_text(encoding="utf-8"))
    data["entries"][0]["status"] = "resolved"
    slop.write_text(json.dumps(data, indent=2), encoding="utf-8")

    def build_site_cli():  # type: ignore[no-untyped-def]
        return cli_run("--project", str(world.root), "--today", TODAY.isoformat(),
                       "build-site", "--build-time", BUILD_TIME.isoformat(),
                       env=world.env())

    changed = build_site_cli()
    assert changed.exit_code == 0, changed.output
    lines = changed.output.splitlines()
    assert lines[0].startswith("Site built (")
    # the data they read changed: every one (the bundled ones, none listed) ran again
    assert lines[1] == ("Analyses: 4 notebooks run, 0 unchanged (data and notebook as last "
                        "built)") and len(BUNDLED) == 4
    assert lines[2] == f"Site:     {site}"
    debt = scan(site / "analyses" / "debt-the-agent-left" / "index.html").body_text
    assert "Finding: 1 of 3 entries are still open" in debt

    unchanged = build_site_cli()
    assert unchanged.output.startswith("Site built (incremental)")
    assert ", 0 pages rendered," in unchanged.output
    assert unchanged.output.splitlines()[1] == ("Analyses: 0 notebooks run, 4 unchanged (data "
                                                "and notebook as last built)")
    # nor matplotlib's font cache and settings (~/.cache, ~/.config: in the build folder)
    assert not any((home / d).exists() for home in homes for d in (".ipython", ".cache",
                                                                   ".config"))


@dataclass
class Listed:
    """A project listing three notebooks of its own (one fails, one is missing) and a leaky
    one (a key in its text and its charts) beside the bundled ones, its site built three times
    by `toolkit build-site` with ``redact: true`` (the first build, an unchanged rebuild, a
    rebuild after a damaged cache): what each build said, and the pages as the first build
    left them."""

    root: Path
    site: Path
    build_dir: Path
    first: Result
    again: Result
    third: Result
    pages: dict[str, PageScan]  # slug -> the page after the first build
    first_after_third: str  # the first notebook's page text after the third build


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Listed:
    """One kernel-running build serves the failing and the redacting cases (a kernel costs
    more than a notebook run); the tests only read what it made."""
    from toolkit.cli import cli

    base = tmp_path_factory.mktemp("listed")
    with pytest.MonkeyPatch.context() as mp:
        project = make_project(base / "acme-api", base / "home")
        isolate(mp, project.home)
        mp.setenv("TOOLKIT_ANALYSES", "1")
        mp.chdir(project.root)
        root = project.root
        # the user's own matplotlib styles stay theirs in the kernel (charts.mpl_env)
        styles = project.home / ".config" / "matplotlib" / "stylelib"
        styles.mkdir(parents=True)
        (styles / "house.mplstyle").write_text("axes.facecolor: 0.9\n", encoding="utf-8")
        _notebook(root / "nb" / "first.ipynb",
                  "import os\nleak = 1\nprint('kernel', os.getpid())\n"
                  "import matplotlib.style as ms\nprint('house style:', 'house' in ms.available)",
                  title="# First <b>bold</b>")
        _notebook(root / "nb" / "second.ipynb",
                  "import os\nprint('kernel', os.getpid())\nprint('<script>alert(1)</script>')",
                  "print(leak)  # the first notebook's variable: gone",
                  title="# Second <script>alert(2)</script>\n\n[x](javascript:alert(3)) text")
        _notebook(root / "leaky.ipynb",
                  f"secret = {SECRET!r}\nprint('Finding: the key is', secret)",
                  "import io\nimport matplotlib.pyplot as plt\nfrom IPython.display import "
                  "Image, display\nfig, ax = plt.subplots()\nax.bar([secret], [1])\n"
                  "ax.set_title(secret)\nplt.show()\nbuf = io.BytesIO()\n"
                  "fig.savefig(buf, format='png')\ndisplay(Image(buf.getvalue()))",
                  title=f"# Leaky {SECRET}")
        (root / "toolkit.yaml").write_text("redact: true\n", encoding="utf-8")
        _list_notebooks(root, "nb/first.ipynb", "nb/second.ipynb", "nb/missing.ipynb",
                        "leaky.ipynb")
        site = root / ".toolkit" / "site"

        def build_site() -> Result:
            return CliRunner().invoke(cli, ["build-site", "--build-time", "2026-05-10T12:00:00"],
                                      catch_exceptions=False)

        first = build_site()
        pages = {slug: scan(site / "analyses" / slug / "index.html")
                 for slug in ("debt-the-agent-left", "what-the-agent-learned", "first",
                              "second", "missing")}
        again = build_site()
        cached = root / ".toolkit" / "site.build" / "analyses" / "first.ipynb"
        cached.write_bytes(cached.read_bytes()[:100])  # a run cut short, or a damaged cache
        third = build_site()
        return Listed(root, site, root / ".toolkit" / "site.build", first, again, third, pages,
                      scan(site / "analyses" / "first" / "index.html").body_text)


def test_a_failing_listed_notebook_gets_its_page_and_the_rest_of_the_site_builds(
        listed: Listed) -> None:
    result = listed.first
    assert result.exit_code == 0, result.output
    assert "Analyses: 8 notebooks run, 0 unchanged (data and notebook as last built), " \
           "2 failed" in result.stdout
    assert result.stderr.splitlines() == [
        "Warning: analysis second.ipynb: cell 4 failed: NameError: name 'leak' is not defined",
        "Warning: analysis missing.ipynb: cannot read it (No such file or directory)"]
    site = listed.site
    assert (site / "index.html").is_file() and (site / "ledger" / "index.html").is_file()
    for slug in ("debt-the-agent-left", "what-the-agent-learned", "first"):
        assert "This analysis failed" not in listed.pages[slug].body_text

    second = listed.pages["second"]
    text = second.body_text
    assert "This analysis failed second.ipynb: cell 4 failed: NameError: name 'leak' is not " \
           "defined" in text
    assert "<script>alert(1)</script>" in text and "[x](javascript:alert(3)) text" in text
    assert second.title.startswith("Second <script>alert(2)</script>")
    first = listed.pages["first"]
    assert "house style: True" in first.body_text
    assert [a for t, a in second.tags if t == "script"] == \
        [a for t, a in first.tags if t == "script"]  # the theme's own scripts only
    assert not [a for t, a in second.tags if "javascript" in (dict(a).get("href") or "")]
    pids = {re.search(r"kernel (\d+)", listed.pages[p].body_text)[1]  # type: ignore[index]
            for p in ("first", "second")}
    assert len(pids) == 1  # one kernel ran them both
    missing = listed.pages["missing"].body_text
    assert "missing.ipynb: cannot read it (No such file or directory)" in missing

    again = listed.again
    assert "Analyses: 0 notebooks run, 8 unchanged" in again.stdout  # failures are cached too
    assert len(again.stderr.splitlines()) == 2

    third = listed.third  # after the first notebook's cached run was cut short
    assert third.exit_code == 0
    assert "Analyses: 1 notebooks run, 7 unchanged" in third.stdout
    assert "kernel " in listed.first_after_third


def test_a_redacted_build_redacts_the_notebooks_text_and_charts(listed: Listed) -> None:
    assert listed.first.exit_code == 0 and "secrets redacted" in listed.first.stdout
    assert not [line for line in listed.first.stderr.splitlines() if "leaky" in line]
    page = listed.site / "analyses" / "leaky" / "index.html"
    text = scan(page).body_text
    assert "Finding: the key is [REDACTED]" in text
    assert "An image left out: a redacted site shows only images whose text can be redacted" \
           in text
    svg = (page.parent / "chart-1.svg").read_text(encoding="utf-8")
    assert "[REDACTED]" in svg
    assert sorted(p.name for p in page.parent.iterdir()) == ["chart-1.svg", "index.html"]
    for folder in (listed.site, listed.build_dir / "docs"):
        for path in folder.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def test_notebooks_setting_is_a_list_of_paths_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "toolkit.yaml").write_text("notebooks: [a.ipynb, sub/b.ipynb, /abs/c.ipynb]\n",
                                           encoding="utf-8")
    cfg = resolve(project=tmp_path, env={"HOME": str(tmp_path)})
    assert cfg.notebooks == (tmp_path / "a.ipynb", tmp_path / "sub" / "b.ipynb",
                             Path("/abs/c.ipynb"))
    (tmp_path / "toolkit.yaml").write_text("notebooks: a.ipynb\n", encoding="utf-8")
    with pytest.raises(UsageError, match="setting notebooks must be a list of notebook paths"):
        resolve(project=tmp_path, env={"HOME": str(tmp_path)})


def test_project_open_in_a_build_kernel_takes_the_build_settings_for_its_project_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TOOLKIT_SITE_BUILD: the project being built opens on the build's store copy, with its
    'today' and source paths, without refreshing; any other project opens as usual."""
    from toolkit import Project
    from toolkit.api import SITE_BUILD_ENV, site_build_settings

    world = make_world(tmp_path / "w")
    copy = tmp_path / "copy.duckdb"
    monkeypatch.setenv(SITE_BUILD_ENV, site_build_settings(world.cfg, copy))
    with Project.open(world.root) as project:
        assert project.config.db_path == copy and not copy.exists()  # no refresh wrote it
        assert project.config.slop_path == world.cfg.slop_path  # not the environment's
        assert str(project.today) == "2026-05-10"
    other = tmp_path / "other"
    other.mkdir()
    with Project.open(other, refresh=False) as project:
        assert project.config.db_path == other / ".toolkit" / "ledger.duckdb"


def test_a_notebooks_cached_run_is_not_reused_when_the_build_shows_other_actions(
        tmp_path: Path, no_bundled: Path) -> None:
    """The kernel reads the build's settings, whose actions among them (``site_scope``): a
    rebuild with the other scope runs the notebook again, and its page is a clean build's.
    (The bundled notebooks, which the other tests run, are left out of these three builds:
    the listed one is the subject.)"""
    import sqlite3

    world = make_world(tmp_path, analyses=True)
    conn = sqlite3.connect(world.home / ".nagi" / "ledger.db")
    conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                 "('2026-05-02 09:00:00', 2, 'deploy', 'another project', 'acme-web')")
    conn.commit()
    conn.close()
    _notebook(world.root / "scope.ipynb",
              "from toolkit.api import Project\n"
              "print('days shown:', [d.day for d in Project.open(project_path)"
              ".stats_by_tier()])")
    cfg = world.cfg.with_overrides(notebooks=(world.root / "scope.ipynb",))
    page = Path("analyses") / "scope" / "index.html"

    first = build(World(world.root, world.home, cfg))
    assert first.analyses_run == ["scope.ipynb"]
    assert "2026-05-02" not in scan(first.out / page).body_text  # another project's day
    every = World(world.root, world.home, cfg.with_overrides(site_scope="all"))
    again = build(every)
    assert "scope.ipynb" in again.analyses_run
    full = build(every, out=tmp_path / "full" / "site", clean=True)
    assert (again.out / page).read_bytes() == (full.out / page).read_bytes()
    assert "2026-05-02" in scan(full.out / page).body_text


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_while_a_notebook_runs_stops_the_build(
        project, cli_run, tmp_path: Path, no_bundled: Path,
        signum: int) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C (or ``kill``) while a notebook runs stops build-site there, as it stops any other
    command: "Interrupted." and exit 130 (SIGTERM: "Terminated.", exit 143), no traceback, the
    kernel shut down and its socket folder removed, no run of the notebook recorded (as
    failed or otherwise); the next build runs it and succeeds. (The bundled notebooks, which
    other tests run, are left out of both builds: the listed one is the subject.)"""
    root = project.root
    hold, ready = tmp_path / "hold", tmp_path / "ready"
    hold.touch()
    _notebook(root / "nb" / "slow.ipynb",
              "import pathlib, time\n"
              f"if pathlib.Path({str(hold)!r}).exists():\n"
              f"    pathlib.Path({str(ready)!r}).touch()\n"
              "    time.sleep(300)\n"
              "print('Finding: ran to the end')")
    _list_notebooks(root, "nb/slow.ipynb")
    # `python -m toolkit build-site`, but for the bundled notebooks' folder
    args = [sys.executable, "-c",
            "import pathlib, toolkit.notebooks as n\n"
            f"n.NOTEBOOKS_DIR = pathlib.Path({str(no_bundled)!r})\n"
            "from toolkit.cli import cli\n"
            "cli(prog_name='toolkit')",
            "build-site", "--build-time", "2026-05-10T12:00:00"]
    tmp = tmp_path / "tmp"  # the kernel's socket folder goes here, and must go away
    tmp.mkdir()
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "TMPDIR": str(tmp)})
    try:
        while not ready.exists():  # the notebook's cell is running (a watchdog, not a timing)
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert "Traceback" not in err and "Site built" not in out
    if signum == signal.SIGINT:
        assert (proc.returncode, err) == (130, "Interrupted.\n")
    else:  # the exit code a SIGTERM's death gives, after the clean-up
        assert (proc.returncode, err) == (128 + signal.SIGTERM, "Terminated.\n")
    assert not (root / ".toolkit" / "site.build" / "analyses" / "slow.json").exists()
    assert list(tmp.iterdir()) == []  # the kernel was shut down and its sockets removed

    hold.unlink()
    # the next build: in this process (its outcome is the subject, not a process's start)
    again = cli_run("build-site", "--build-time", "2026-05-10T12:00:00")
    assert again.exit_code == 0, again.output
    assert "Warning" not in again.stderr
    assert "Analyses: 1 notebooks run, 0 unchanged" in again.stdout  # no run of it was kept
    page = scan(root / ".toolkit" / "site" / "analyses" / "slow" / "index.html")
    assert "ran to the end" in page.body_text


def test_sigterm_while_the_notebook_client_connects_stops_the_build(
        project, tmp_path: Path, no_bundled: Path) -> None:  # type: ignore[no-untyped-def]
    """A SIGTERM that comes while nbclient connects to the kernel, before the first cell,
    ends build-site as anywhere else ("Terminated.", exit 143). nbclient sets handlers of
    its own on its event loop for the run, which only shut the kernel down: a SIGTERM there
    was lost, the build went on and exited 0 (and ``toolkit serve`` went on to serve). The
    signal is sent by the process itself at that moment (nbclient's method that starts the
    kernel client), so the test does not depend on timing."""
    root = project.root
    _notebook(root / "nb" / "quick.ipynb", "print('Finding: ran')")
    _list_notebooks(root, "nb/quick.ipynb")
    args = [sys.executable, "-c",
            "import os, pathlib, signal, toolkit.notebooks as n\n"
            "from nbclient.client import NotebookClient as C\n"
            f"n.NOTEBOOKS_DIR = pathlib.Path({str(no_bundled)!r})\n"
            "connect = C.async_start_new_kernel_client\n"
            "async def connect_after_a_kill(self, *a, **k):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return await connect(self, *a, **k)\n"
            "C.async_start_new_kernel_client = connect_after_a_kill\n"
            "from toolkit.cli import cli\n"
            "cli(prog_name='toolkit')",
            "build-site", "--build-time", "2026-05-10T12:00:00"]
    tmp = tmp_path / "tmp"  # the kernel's socket folder goes here, and must go away
    tmp.mkdir()
    done = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert (done.returncode, done.stderr) == (128 + signal.SIGTERM, "Terminated.\n")
    assert "Site built" not in done.stdout
    assert not (root / ".toolkit" / "site.build" / "analyses" / "quick.json").exists()
    assert list(tmp.iterdir()) == []  # the kernel was shut down and its sockets removed
