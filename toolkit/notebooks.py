"""Run the analysis notebooks (``notebooks/*.ipynb``) top to bottom in a Jupyter kernel.

The notebooks take their parameters papermill's way: the cell tagged ``parameters`` holds the
defaults, and :func:`with_parameters` adds a cell tagged ``injected-parameters`` after it that
sets the given values. Running needs the ``notebooks`` extra (or the ``test`` extra):
``nbclient``, ``nbformat`` and ``ipykernel``, imported only here and only when called.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVarTuple

from toolkit.errors import ToolkitError

if TYPE_CHECKING:
    from nbformat import NotebookNode

PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"

# Run first (as an injected cell) in a kernel that ran another notebook before: a clean
# namespace and matplotlib's default settings, as in a fresh kernel. Starting a kernel costs
# more than running a notebook (interpreter, ipykernel, matplotlib, DuckDB); reusing one does not.
# %reset runs two full garbage collections over every object of the kernel (about a third of
# a notebook's run); with the objects frozen they pass over none, and what the notebook before
# left is collected by Python's own collections later, as any garbage is.
FRESH = """\
__import__("gc").freeze()
try:
    get_ipython().run_line_magic("reset", "-f")
finally:
    __import__("gc").unfreeze()
import matplotlib as _mpl
_mpl.rcdefaults()
del _mpl
"""


def _bundled() -> Path:
    """The bundled analysis notebooks: the repository's ``notebooks/`` (editable install),
    else the copy a regular install puts in <prefix>/share/agent-ledger-toolkit/notebooks."""
    import sys

    repo = Path(__file__).resolve().parents[1] / "notebooks"
    if repo.is_dir():
        return repo
    return Path(sys.prefix) / "share" / "agent-ledger-toolkit" / "notebooks"


NOTEBOOKS_DIR = _bundled()


def _need(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ToolkitError(f"running notebooks needs {module}, which is not installed",
                           hint="Install the notebooks extra: pip install -e '.[notebooks]'")


def read(path: Path) -> NotebookNode:
    """A notebook file, as nbformat version 4."""
    _need("nbformat")
    import nbformat

    return nbformat.read(str(path), as_version=4)


def write(nb: NotebookNode, path: Path) -> None:
    _need("nbformat")
    import nbformat

    nbformat.write(nb, str(path))


def _tags(cell: NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def with_parameters(nb: NotebookNode, **params: object) -> NotebookNode:
    """A copy of ``nb`` whose parameters are ``params``: a cell tagged
    ``injected-parameters`` right after the one tagged ``parameters`` (a notebook without
    one gets it first)."""

    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if INJECTED_TAG not in _tags(c)]
    cell = injected("# Injected parameters\n" + "".join(f"{k} = {v!r}\n"
                                                     for k, v in params.items()))
    at = next((i + 1 for i, c in enumerate(nb.cells) if PARAMETERS_TAG in _tags(c)), 0)
    nb.cells.insert(at, cell)
    return nb


def injected(source: str) -> NotebookNode:
    """A code cell tagged ``injected-parameters``: run, but neither shown nor counted."""
    import nbformat

    return nbformat.v4.new_code_cell(source, metadata={"tags": [INJECTED_TAG]})


def start_kernel(cwd: Path, sockets: Path, env: dict[str, str], name: str = "notebook") -> Any:
    """A Python kernel started in ``cwd`` with the environment ``env`` (the whole of it), as a
    running ``jupyter_client`` kernel manager the caller shuts down. Its sockets are files in
    ``sockets`` (IPC: no port another user of the machine could reach; the folder should be
    private, and its path short, as socket paths are short), so is its connection file.

    The kernel is ipykernel's own, run by this interpreter (where the toolkit is installed):
    with no kernel folders to search, a ``python3`` kernelspec the user installed for other
    work (another Python, maybe without the toolkit) is never picked. The one way the toolkit
    starts a kernel: for the site's analyses, :func:`execute` without one, the script that
    saves the bundled notebooks' outputs, the tests and the benchmarks. A kernel that does not
    start is a ToolkitError naming ``name``."""
    _need("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(sockets / "k"),
                       connection_file=str(sockets / "kernel.json"),
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))
    try:
        km.start_kernel(cwd=str(cwd), env=env)
    except Exception as exc:  # whatever jupyter_client or zmq raise
        with contextlib.suppress(Exception):
            km.shutdown_kernel(now=True)
        raise ToolkitError(f"{name}: the Python kernel did not start "
                           f"({type(exc).__name__}: {exc})") from None
    return km


@contextlib.contextmanager
def kernel(cwd: Path, env: dict[str, str] | None = None, name: str = "notebook"
           ) -> Iterator[Any]:
    """A kernel of :func:`start_kernel` for a ``with`` block, started in ``cwd`` with ``env``
    (this process's environment by default), its sockets and Jupyter's runtime files in a new
    private folder: shut down, and the folder removed, when the block ends."""
    sockets = Path(tempfile.mkdtemp(prefix="tk-"))  # private (0700)
    km = None
    try:
        km = start_kernel(cwd, sockets, {**(os.environ if env is None else env),
                                         "JUPYTER_RUNTIME_DIR": str(sockets)}, name)
        yield km
    finally:
        if km is not None:
            km.shutdown_kernel(now=True)
        shutil.rmtree(sockets, ignore_errors=True)


def execute(nb: NotebookNode, *, cwd: Path, name: str = "notebook", timeout: int = 600,
            km: Any = None) -> NotebookNode:
    """Run every cell of ``nb`` in a fresh Python kernel started in ``cwd`` (:func:`kernel`,
    with this process's environment), or in ``km``, a running kernel of
    :func:`start_kernel` the caller owns and reuses; returns the notebook with its outputs. A
    cell that raises stops the run: a ToolkitError naming the cell (1-based, among the
    notebook's own cells: injected ones are not counted) and the error; so does a cell that
    runs past ``timeout`` seconds or a kernel that dies."""
    _need("nbclient")
    _need("ipykernel")
    if km is None:
        with kernel(cwd, name=name) as own:
            return execute(nb, cwd=cwd, name=name, timeout=timeout, km=own)
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", km=km,
                            resources={"metadata": {"path": str(cwd)}},
                            record_timing=False, coalesce_streams=True)
    why: str | None = None
    try:
        _run_on_own_loop(client.async_execute())
    except CellExecutionError as exc:
        why = f"{exc.ename}: {exc.evalue}"
    except CellTimeoutError:
        why = f"it ran for more than {timeout} s"
    except DeadKernelError:
        why = "the kernel died"
    finally:
        if km is not None and client.kc is not None:
            client.kc.stop_channels()  # the caller's kernel lives on; this client does not
    if why is not None:
        own = [c for c in nb.cells if INJECTED_TAG not in _tags(c)]
        index = next((i for i, c in enumerate(own) if c.cell_type == "code" and any(
            o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        if index is None and why != "the kernel died":  # a timeout: the cell that has no
            index = next((i for i, c in enumerate(own)  # execution count yet
                          if c.cell_type == "code" and c.get("execution_count") is None), None)
        where = f"cell {index + 1}" if index is not None else "a cell"
        raise ToolkitError(f"{name}: {where} failed: {why}")
    return nb


_Ts = TypeVarTuple("_Ts")


class _CommandSignalsLoop(asyncio.SelectorEventLoop):
    """The event loop a notebook runs on, which leaves Ctrl-C and SIGTERM to the command.

    nbclient sets handlers of its own for both on its loop for the whole run, which only shut
    the kernel down and let the run go on: the command ignored Ctrl-C and ``kill`` until the
    notebook ended, built the rest of the site and exited 0. Taking them off once the run had
    started (a hook nbclient calls) left a window while it connected to the kernel, in which a
    SIGTERM was lost (toolkit serve went on to serve). This loop refuses them instead, as a
    loop outside the main thread does (nbclient then sets none), so the handlers the command
    set stay for the whole run: Ctrl-C is a KeyboardInterrupt and SIGTERM ends the command as
    :class:`toolkit.errors.Terminated` (exit 143), after the caller's clean-up (the kernel
    shut down, its socket folder removed)."""

    def add_signal_handler(self, sig: int, callback: Callable[[*_Ts], object],
                           *args: *_Ts) -> None:
        if sig in (signal.SIGINT, signal.SIGTERM):
            raise RuntimeError("the command handles this signal")
        super().add_signal_handler(sig, callback, *args)


def _run_on_own_loop(run: Coroutine[Any, Any, Any]) -> None:
    """Run nbclient's ``run`` on a :class:`_CommandSignalsLoop` of its own. When a signal's
    exception ends it early, the run and the tasks it started are cancelled, and what that
    cancelling raises in nbclient (a "kernel died" of the interrupted cell) is taken here,
    as is the exception of a run the signal's handler raised inside: the signal's exception
    is the command's answer, with no second report of the run on stderr."""
    loop = _CommandSignalsLoop()
    task = loop.create_task(run)
    try:
        loop.run_until_complete(task)
    finally:
        try:
            left = [t for t in asyncio.all_tasks(loop) if not t.done()]  # its polls, too
            for t in left:
                t.cancel()
            if left:  # (gather() of nothing makes a loop of its own, never closed)
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            if task.done() and not task.cancelled():
                task.exception()  # one the run raised itself is on its way: taken, not logged
        finally:
            loop.close()


def text_outputs(nb: NotebookNode) -> list[list[str]]:
    """What each code cell showed as text: its standard output, the plain-text form of its
    results and displays, and its errors. Images, standard error (warnings, caches being
    built), execution counts and timings are left out: they may differ between runs that
    show the same thing."""
    shown: list[list[str]] = []
    for cell in nb.cells:
        if cell.cell_type != "code" or INJECTED_TAG in _tags(cell):
            continue
        texts: list[str] = []
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "stream" and out.get("name") == "stdout":
                texts.append(str(out.get("text", "")))
            elif kind in ("execute_result", "display_data"):
                texts.append(str(out.get("data", {}).get("text/plain", "")))
            elif kind == "error":
                texts.append(f"{out.get('ename')}: {out.get('evalue')}")
        shown.append(texts)
    return shown
