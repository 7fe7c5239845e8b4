"""The analysis notebooks run top to bottom in a real Jupyter kernel against a demo world, and
show what their committed outputs show (text; images and timings aside)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from toolkit import notebooks
from toolkit.demo import write_demo
from toolkit.errors import ToolkitError

NOTEBOOKS = sorted(notebooks.NOTEBOOKS_DIR.glob("*.ipynb"))
PUBLIC = {"toolkit": {"Project"}, "toolkit.demo": {"write_demo"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    """The demo world every notebook opens by default (same seed and size)."""
    return write_demo(tmp_path_factory.mktemp("nb") / "demo")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """One real kernel and the folder it runs in: it re-runs the bundled notebooks one after
    another, as build-site's does (each notebook first runs notebooks.FRESH: a clean namespace
    and matplotlib's defaults); starting a kernel costs more than running a notebook. Started
    as every kernel of the toolkit is (notebooks.kernel)."""
    cwd = tmp_path_factory.mktemp("kernel")
    with notebooks.kernel(cwd) as km:
        yield km, cwd


def _rerun(nb: nbformat.NotebookNode, kernel: tuple[Any, Path], name: str
           ) -> nbformat.NotebookNode:
    km, cwd = kernel
    nb.cells.insert(0, notebooks.injected(notebooks.FRESH))
    return notebooks.execute(nb, cwd=cwd, name=name, km=km)


def test_the_four_analyses_are_there():
    assert {p.stem for p in NOTEBOOKS} >= {"what_the_agent_learned", "where_dispatches_are_wasted",
                                           "debt_the_agent_left", "what_each_turn_changed"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_uses_only_the_public_api_and_is_parameterised(path):
    nb = notebooks.read(path)
    params = [c for c in nb.cells if notebooks.PARAMETERS_TAG in c.metadata.get("tags", [])]
    assert len(params) == 1 and "project_path = None" in params[0].source
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("toolkit"):
                assert {a.name for a in node.names} <= PUBLIC.get(node.module or "", set()), \
                    f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("toolkit") for a in node.names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_reruns_in_a_kernel_to_its_committed_outputs(path, world, kernel):
    committed = notebooks.read(path)
    shown = notebooks.text_outputs(committed)
    assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
               for c in committed.cells if c.cell_type == "code" for o in c.outputs), \
        "the committed notebook carries its charts"
    sections = [c for c in committed.cells
                if c.cell_type == "markdown" and c.source.startswith("## ")]
    findings = [t for texts in shown for t in texts if t.startswith("Finding: ")]
    assert len(sections) >= 2 and len(findings) >= len(sections), "a written finding per section"

    run = _rerun(notebooks.with_parameters(committed, project_path=str(world.project)), kernel,
                 path.name)
    assert notebooks.text_outputs(run) == shown, (
        f"{path.name} shows something else than its committed outputs; if that is intended, "
        "re-run scripts/run_notebooks.py and commit the result")


def test_a_notebook_without_parameters_writes_and_opens_its_own_demo_world(kernel):
    path = notebooks.NOTEBOOKS_DIR / "what_each_turn_changed.ipynb"
    committed = notebooks.read(path)
    run = _rerun(notebooks.read(path), kernel, path.name)
    assert notebooks.text_outputs(run) == notebooks.text_outputs(committed)
    assert list(kernel[1].iterdir()) == []  # the world went to a temporary folder


def test_a_failing_cell_is_named_with_its_error(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t"),
                                         nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("x / 0")])
    with pytest.raises(ToolkitError, match=r"^t\.ipynb: cell 3 failed: ZeroDivisionError: "):
        notebooks.execute(nb, cwd=tmp_path, name="t.ipynb")


def test_a_notebook_run_without_a_kernel_runs_in_this_python_over_private_sockets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """notebooks.execute without a kernel starts one as the site's analyses do: ipykernel run
    by this interpreter, even when the user's own ``python3`` kernel comes first in Jupyter's
    search (here one that cannot start; JUPYTER_PREFER_ENV_PATH=0 puts the user's folders
    before the virtualenv's), over IPC sockets (no TCP port on the machine); nothing is
    written in the user's Jupyter folders."""
    import json
    import sys

    data = tmp_path / "jupyter-data"
    spec = data / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": ["/bin/false", "-f", "{connection_file}"], "display_name": "Python 3",
        "language": "python"}), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys\nfrom ipykernel.connect import get_connection_info\n"
        "print(sys.executable, get_connection_info(unpack=True)['transport'])")])
    ran = notebooks.execute(nb, cwd=tmp_path, name="t.ipynb")
    assert notebooks.text_outputs(ran) == [[f"{sys.executable} ipc\n"]]
    assert sorted(p.relative_to(data).as_posix() for p in data.rglob("*")) == [
        "kernels", "kernels/python3", "kernels/python3/kernel.json"]
    assert not (tmp_path / "jupyter-runtime").exists()


def test_injected_parameters_follow_the_parameters_cell_and_replace_earlier_ones():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# t"),
        nbformat.v4.new_code_cell("project_path = None", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(project_path)")])
    once = notebooks.with_parameters(nb, project_path="/a")
    twice = notebooks.with_parameters(once, project_path="/b'c")
    assert [c.source for c in twice.cells][1:3] == [
        "project_path = None", "# Injected parameters\nproject_path = \"/b'c\"\n"]
    assert len(twice.cells) == 4 and len(nb.cells) == 3


def test_text_outputs_ignore_images_and_stderr_but_not_text():
    cell = nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="12 entries\n"),
        nbformat.v4.new_output("stream", name="stderr", text="building the font cache\n"),
        nbformat.v4.new_output("display_data", data={"image/png": "AAAA",
                                                     "text/plain": "<Figure>"})])
    nb = nbformat.v4.new_notebook(cells=[cell])
    changed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="13 entries\n"),
        nbformat.v4.new_output("display_data", data={"image/png": "BBBB",
                                                     "text/plain": "<Figure>"})])])
    assert notebooks.text_outputs(nb) == [["12 entries\n", "<Figure>"]]
    assert notebooks.text_outputs(changed) != notebooks.text_outputs(nb)


def test_the_prune_finding_counts_what_ledger_prune_would_prune(tmp_path, kernel, monkeypatch,
                                                                cli_run):
    """An old low entry with a problem (no Category) is never pruned (`toolkit ledger prune`
    skips it), but the analysis counted it: "2 entries are past their prune limit ...
    `toolkit ledger prune --dry-run` shows what pruning them would change", where the dry run
    listed 1. The notebook now asks the API for prune's own candidates."""
    import json

    from tests._history_helpers import Project, entry_b

    p = Project.create(tmp_path / "acme", git=False)
    p.write({"patterns": [entry_b("Old low rule", "low", date="2026-01-05"),
                          entry_b("Old low without a category", "low", date="2026-01-05",
                                  category=""),
                          entry_b("Fresh low rule", "low", date="2026-04-30")]})
    missing = tmp_path / "missing"
    (p.root / "toolkit.yaml").write_text(
        f'today: "2026-05-05"\naudit_db: {missing / "ledger.db"}\n'
        f"slop: {missing / 'slop.json'}\ngoal_file: {missing / 'goal.json'}\n"
        f"goal_history: {missing / 'goal_history.jsonl'}\nsnapshots_home: {missing}\n",
        encoding="utf-8")
    monkeypatch.chdir(p.root)
    plan = json.loads(cli_run("ledger", "prune", "--dry-run", "--json").stdout)
    assert [c["title"] for c in plan["removed"]] == ["Old low rule"]

    path = notebooks.NOTEBOOKS_DIR / "what_the_agent_learned.ipynb"
    run = _rerun(notebooks.with_parameters(notebooks.read(path), project_path=str(p.root)),
                 kernel, path.name)
    finding = next(t for texts in notebooks.text_outputs(run) for t in texts
                   if "past their prune limit" in t)
    assert finding.startswith("Finding: 1 entries are past their prune limit"), finding


def test_every_notebook_runs_when_every_source_is_missing(tmp_path, kernel):
    """A project with no vault (only a goal file named, none of the sources there) failed
    its build's analysis: "what_the_agent_learned.ipynb: cell 8 failed: NotFoundError ...
    No Ledger found", where the site's pages read the missing vault as empty. Every bundled
    notebook now runs to its findings with no vault, audit DB, slop ledger, goal file,
    goal history or snapshots."""
    root = tmp_path / "bare"
    root.mkdir()
    missing = tmp_path / "missing"
    (root / "toolkit.yaml").write_text(
        f'today: "2026-05-05"\naudit_db: {missing / "ledger.db"}\n'
        f"slop: {missing / 'slop.json'}\ngoal_file: {missing / 'goal.json'}\n"
        f"goal_history: {missing / 'goal_history.jsonl'}\nsnapshots_home: {missing}\n",
        encoding="utf-8")
    shown = _shown_by_every_notebook(root, kernel)
    assert all(shown.values()), shown  # each says what it found, if only that nothing is there
    assert "Finding: the ledger has no entries yet.\n" in shown["what_the_agent_learned"]
    assert not (root / ".smith").exists()  # no vault was made


def _shown_by_every_notebook(root: Path, kernel: tuple[Any, Path]) -> dict[str, list[str]]:
    """Every bundled notebook run on the project at ``root`` (a failing cell fails the test):
    notebook stem -> the texts it showed."""
    shown = {}
    for path in NOTEBOOKS:
        run = _rerun(notebooks.with_parameters(notebooks.read(path), project_path=str(root)),
                     kernel, path.name)
        shown[path.stem] = [t for texts in notebooks.text_outputs(run) for t in texts]
    return shown


def test_every_notebook_runs_when_a_source_is_a_folder(tmp_path, kernel):
    """A slop ledger path that is a folder: the site warns "slop could not be read ...
    nothing of it is shown" and builds, but the debt analysis failed ("cell 6 failed:
    DataError: ...: is a folder, not a file"): it charted the store's open entries and read
    its totals from the file. Its totals are now the store's, as its chart and the site."""
    root = tmp_path / "odd"
    root.mkdir()
    folder = tmp_path / "a-folder"
    folder.mkdir()
    missing = tmp_path / "missing"
    (root / "toolkit.yaml").write_text(
        f'today: "2026-05-05"\naudit_db: {folder}\nslop: {folder}\n'
        f"goal_file: {folder}\ngoal_history: {folder}\nsnapshots_home: {missing}\n",
        encoding="utf-8")
    shown = _shown_by_every_notebook(root, kernel)
    assert "Finding: nothing is open among 0 entries.\n" in shown["debt_the_agent_left"]


def test_ledger_entries_of_a_project_without_a_vault_are_none(tmp_path):
    from toolkit import Project
    from toolkit.errors import UsageError

    (tmp_path / "toolkit.yaml").write_text(f"slop: {tmp_path / 'none.json'}\n",
                                           encoding="utf-8")
    with Project.open(tmp_path, refresh=False) as project:
        assert project.ledger_entries() == [] and project.prune_candidates().empty
        with pytest.raises(UsageError):
            project.ledger_entries(file="nonsense")
    assert not (tmp_path / ".smith").exists()


def test_an_entry_whose_date_is_no_date_is_no_old_entry_in_the_learned_notebook(
        tmp_path, kernel):
    """An entry dated ``2026-13-45`` (the site shows it, prune skips it) failed the build's
    analysis: "what_the_agent_learned.ipynb: cell 9 failed: ValueError: month must be in
    1..12". Its age is now unknown there, as in the notebook's age chart."""
    from tests._history_helpers import Project as Vault
    from tests._history_helpers import entry_b

    p = Vault.create(tmp_path / "acme", git=False)
    p.write({"patterns": [entry_b("Dated in no month", "low", date="2026-13-45"),
                          entry_b("Old low rule", "low", date="2026-01-05")]})
    missing = tmp_path / "missing"
    (p.root / "toolkit.yaml").write_text(
        f'today: "2026-05-05"\naudit_db: {missing / "ledger.db"}\n'
        f"slop: {missing / 'slop.json'}\nsnapshots_home: {missing}\n", encoding="utf-8")
    path = notebooks.NOTEBOOKS_DIR / "what_the_agent_learned.ipynb"
    run = _rerun(notebooks.with_parameters(notebooks.read(path), project_path=str(p.root)),
                 kernel, path.name)
    shown = [t for texts in notebooks.text_outputs(run) for t in texts]
    assert ("Finding: 2 of 2 entries were observed only once; 1 of them are more than 30 days "
            "old and were never reinforced.\n") in shown


def test_the_debt_notebooks_table_lists_buckets_in_the_order_the_site_and_handoff_do(world):
    """The debt notebook sorted its bucket rows alphabetically while the site's and the
    handoff's table put them in CodeSmith's order (reports.slop_matrix): its committed table
    now lists them as ``Project.slop_matrix()`` orders them."""
    from toolkit import Project

    nb = notebooks.read(notebooks.NOTEBOOKS_DIR / "debt_the_agent_left.ipynb")
    table = next(t for texts in notebooks.text_outputs(nb) for t in texts
                 if t.startswith("bucket "))
    rows = [line.split()[0] for line in table.splitlines()[1:] if line.strip()]
    with Project.open(world.project) as project:
        matrix = project.slop_matrix()
    assert rows == ["[???]" if b is None else b for b in matrix.buckets]
    assert rows != sorted(rows)  # the demo's buckets are not in alphabetical order


def test_run_notebooks_saves_the_same_outputs_whatever_the_shell_sets(tmp_path: Path) -> None:
    """scripts/run_notebooks.py, which saves the committed outputs, run from a shell that sets
    matplotlib's backend, a time zone and the toolkit's "today": the notebook it saves shows
    its chart and UTC times, as the tests' re-runs do. (With MPLBACKEND=agg in the shell, the
    saved notebooks had lost every chart.)"""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    path = tmp_path / "shell.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import time\nprint(time.strftime('%Z', time.localtime(0)))"),
        nbformat.v4.new_code_cell("import os\nprint(os.environ.get('TOOLKIT_TODAY'))"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                                  "plt.show()")]), path)
    shell = {**os.environ, "MPLBACKEND": "agg", "TZ": "America/New_York",
             "TOOLKIT_TODAY": "2030-01-01"}
    ran = subprocess.run([sys.executable, str(REPO / "scripts" / "run_notebooks.py"), str(path)],
                         env=shell, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    zone, today, chart = notebooks.read(path).cells
    assert [o.get("text") for o in zone.outputs] == ["UTC\n"]
    assert [o.get("text") for o in today.outputs] == ["None\n"]
    assert any("image/png" in o.get("data", {}) for o in chart.outputs), chart.outputs


def test_a_run_on_its_own_loop_leaves_no_descriptor_open():
    """A notebook run that ended well left an event loop behind (``asyncio.gather()`` of no
    tasks made one, set as the thread's and never closed), and with it three file
    descriptors per analysis run: the descriptors the process holds are counted. Run in a
    new process, whose main thread has no loop set yet."""
    import subprocess
    import sys

    script = (
        "import os\n"
        "from toolkit.notebooks import _run_on_own_loop\n"
        "async def run():\n"
        "    return 1\n"
        "before = len(os.listdir('/proc/self/fd'))\n"
        "for _ in range(3):\n"
        "    _run_on_own_loop(run())\n"
        "print(len(os.listdir('/proc/self/fd')) - before)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "0\n", "")
