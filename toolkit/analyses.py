"""The site's "Analyses" section: the analysis notebooks, run against the project, as pages.

``toolkit.site`` adds :meth:`Analyses.pages` to the site's pages and writes
:attr:`Analyses.files` (the charts) next to them. For each notebook (the bundled ones in
``notebooks/``, then those listed under ``notebooks:`` in toolkit.yaml):

* **Cache.** The key is the store's source fingerprints (``_sources``), the notebook's bytes,
  the build's "today", whether the build redacts, the settings the kernel is given (the
  project, its name and sources, whose actions it reads: ``site_scope``) and the toolkit's
  version. A notebook whose
  key matches the one cached in ``<build>/analyses/`` is not run again: its executed copy (or
  its failure) is read from there, so an unchanged rebuild starts no kernel.
* **Running.** The build holds its store open for writing, and DuckDB lets one process open
  a file that another writes to in no way; the notebooks therefore read a copy of the store
  (``COPY FROM DATABASE``, made only when a notebook must run, deleted after): the build
  hands the kernel its settings and that copy in ``TOOLKIT_SITE_BUILD``, which
  ``Project.open`` of the project takes (``toolkit.api``), so a notebook reads the files the
  build read, with its "today". One kernel runs every notebook of a build
  (its namespace and matplotlib's settings are reset before each); a kernel that dies is
  started again for the next notebook.
* **Failure.** A notebook that fails becomes a page saying which cell failed and why, above the
  outputs it showed before; the build reports it in :attr:`Analyses.failed`.
* **Escaping and redaction.** Markdown cells and text outputs are literal text (escaped as
  every AI-written value is); printed output goes into the page as escaped HTML ``<pre>``;
  only SVG and PNG images are kept, written as files of the site. Charts are drawn as SVG with
  their text as text, so a ``--redact`` build passes every text, and each SVG, through the
  same redaction as the rest of the site (``toolkit.redact``); it leaves PNG images out, since
  their text cannot be redacted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from toolkit import mdsafe
from toolkit.charts import mpl_env
from toolkit.display import display_roots
from toolkit.errors import ToolkitError
from toolkit.notebooks import FRESH
from toolkit.pages import Page, relative_link

if TYPE_CHECKING:
    import datetime as dt

    from nbformat import NotebookNode

    from toolkit.config import Config
    from toolkit.store import Store

CACHE = "analyses"  # in the build folder: <slug>.ipynb (executed) and <slug>.json (its key)
SECTION = "Analyses"

# Run first in the kernel before each notebook (as an injected cell: neither shown nor counted):
# a clean namespace and matplotlib's defaults (one kernel runs them all), charts as SVG with
# their text as text (so it can be redacted), no random ids (the same data gives the same bytes).
PRELUDE = FRESH + """\
import matplotlib as _mpl
from matplotlib_inline.backend_inline import set_matplotlib_formats as _formats
_mpl.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "toolkit"})
_formats("svg")
del _mpl, _formats
"""


@dataclass(kw_only=True)
class AnalysisPage(Page):
    """One notebook as a page: its cells' text and outputs, already escaped (``Markup``)."""

    template = "analysis.md.j2"
    failure: str | None = None  # which cell failed and why
    blocks: list[Any] = field(default_factory=list)  # Markup, or ("pre", text)


@dataclass
class Analyses:
    """The analysis pages of one build and what it took to make them."""

    cfg: Config
    build: Path
    today: dt.date
    redact: bool
    epoch: int  # the build time, for the charts' metadata
    files: dict[str, bytes] = field(default_factory=dict)  # docs-relative path -> bytes
    ran: list[str] = field(default_factory=list)  # notebooks executed in this build
    cached: list[str] = field(default_factory=list)  # notebooks read from the cache
    failed: list[str] = field(default_factory=list)  # "name: cell N failed: why"

    def pages(self, store: Store) -> list[Page]:
        cache = self.build / CACHE
        cache.mkdir(parents=True, exist_ok=True)
        sources = _fingerprints(store)
        settings = self._settings(None)
        todo: list[tuple[str, Path, bytes | None, str, Path]] = []
        for slug, path in _slugged(notebook_paths(self.cfg)):
            data, why = _read(path)
            key = hashlib.sha256(json.dumps({
                "sources": sources, "today": self.today.isoformat(), "redact": self.redact,
                "settings": settings,
                "notebook": hashlib.sha256(data).hexdigest() if data is not None else why,
                "toolkit": _version()}, sort_keys=True).encode("utf-8")).hexdigest()
            todo.append((slug, path, data, key, cache / slug))
        keep = {f"{slug}{ext}" for slug, *_ in todo for ext in (".ipynb", ".json")}
        for p in cache.iterdir():
            if p.name not in keep:
                (shutil.rmtree if p.is_dir() else os.unlink)(p)
        cached = {t[0]: _cached(t[4], t[3]) for t in todo}
        stale = [t for t in todo if cached[t[0]] is None]
        if stale:
            self._run(store, stale)
        pages: list[Page] = []
        for slug, path, _data, key, base in todo:
            (self.ran if cached[slug] is None else self.cached).append(path.name)
            nb, failure = cached[slug] or _cached(base, key) or (None, "the run left no result")
            if failure:
                self.failed.append(self._text(failure))
            pages.append(self._page(slug, path, nb, failure))
        return pages

    def _settings(self, snapshot: Path | None) -> str:
        """What the kernel is told of the build (``TOOLKIT_SITE_BUILD``: the project, its
        sources, its "today", whose actions it reads...), reading the store copy
        ``snapshot``; with None, what the cache's key holds of it (every part of it but the
        copy's path, which is new on every run)."""
        from toolkit.api import site_build_settings

        return site_build_settings(self.cfg.with_overrides(today=self.today),
                                   snapshot or Path("store.duckdb"))

    # -- running -------------------------------------------------------------
    def _run(self, store: Store, todo: list[tuple[str, Path, bytes | None, str, Path]]) -> None:
        """Run the notebooks whose cache is stale in one kernel, on a copy of the store."""
        from toolkit import notebooks
        from toolkit.api import SITE_BUILD_ENV

        work = Path(tempfile.mkdtemp(prefix="run-", dir=self.build / CACHE))
        sockets = Path(tempfile.mkdtemp(prefix="tk-"))  # private (0700)
        km = None
        try:
            snapshot = work / "store.duckdb"
            no_copy: str | None = None
            try:
                store.copy_database(snapshot)
            except (ToolkitError, OSError) as exc:
                no_copy = f"the store could not be copied for it ({exc})"
            settings = self._settings(snapshot)
            # IPython's profile and history, and Jupyter's runtime files, stay in the build's
            # folders (deleted after), and matplotlib's in the build folder unless the user has
            # one of their own (charts.mpl_env), not in the home
            env = {**mpl_env(self.build, users=True), SITE_BUILD_ENV: settings,
                   "SOURCE_DATE_EPOCH": str(self.epoch),
                   "MPLBACKEND": "module://matplotlib_inline.backend_inline",
                   "IPYTHONDIR": str(work / "ipython"), "JUPYTER_RUNTIME_DIR": str(sockets)}
            for _slug, path, data, key, base in todo:
                failure: str | None = None
                nb = None
                try:
                    if data is None:
                        raise ToolkitError(f"{path.name}: cannot read it ({_read(path)[1]})")
                    nb = _parse(data, path)
                    if no_copy:
                        raise ToolkitError(f"{path.name}: {no_copy}")
                    nb = notebooks.with_parameters(nb, project_path=str(self.cfg.project_root))
                    nb.cells.insert(0, notebooks.injected(PRELUDE))
                    if km is None or not km.is_alive():
                        km = notebooks.start_kernel(work, sockets, env, path.name)
                    notebooks.execute(nb, cwd=work, name=path.name, km=km)
                except ToolkitError as exc:
                    failure = exc.message
                except Exception as exc:  # the runner's own failure: this analysis fails
                    failure = f"{path.name}: the run failed ({type(exc).__name__}: {exc})"
                # the key last: a run cut short leaves no key that matches a notebook
                base.with_suffix(".json").unlink(missing_ok=True)
                base.with_suffix(".ipynb").unlink(missing_ok=True)
                if nb is not None:
                    notebooks.write(nb, base.with_suffix(".ipynb"))
                base.with_suffix(".json").write_text(json.dumps(
                    {"key": key, "failure": failure}) + "\n", encoding="utf-8")
        finally:
            if km is not None:
                km.shutdown_kernel(now=True)
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(sockets, ignore_errors=True)

    # -- the page ------------------------------------------------------------
    def _page(self, slug: str, path: Path, nb: NotebookNode | None, failure: str | None
              ) -> AnalysisPage:
        from toolkit import notebooks
        page_path = f"analyses/{slug}.md"
        cells = [c for c in (nb.cells if nb is not None else [])
                 if notebooks.INJECTED_TAG not in c.get("metadata", {}).get("tags", [])]
        title = next((m.group(1) for c in cells if c.cell_type == "markdown"
                      for m in [re.match(r"#\s+(.+)", c.source)] if m), path.stem)
        title = self._text(title)
        blocks: list[Any] = []
        images = 0
        for cell in cells:
            if cell.cell_type == "markdown":
                blocks += [_markdown(self._text(cell.source), first=cell is cells[0])]
                continue
            if cell.cell_type != "code":
                continue
            for out in cell.get("outputs", []):
                kind = out.get("output_type")
                if kind == "stream" and out.get("name") == "stdout":
                    blocks += _printed(self._text(str(out.get("text", ""))))
                elif kind in ("display_data", "execute_result"):
                    shown = out.get("data", {})
                    image = self._image(shown)
                    if image is not None:
                        images += 1
                        ext, data = image
                        rel = f"analyses/{slug}/chart-{images}.{ext}"
                        self.files[rel] = data
                        alt = mdsafe.inline(f"{title}: chart {images}")
                        blocks.append(Markup(f"![{alt}]({relative_link(page_path, rel)})"))
                    elif "image/png" in shown and self.redact:
                        blocks.append(Markup("*" + mdsafe.inline(
                            "An image left out: a redacted site shows only images whose "
                            "text can be redacted (SVG).") + "*"))
                    elif "text/plain" in shown:
                        blocks.append(("pre", self._text(str(shown["text/plain"]))))
                elif kind == "error":
                    trace = _ANSI.sub("", "\n".join(out.get("traceback", [])))
                    blocks.append(("pre", self._text(trace or f"{out.get('ename')}: "
                                                             f"{out.get('evalue')}")))
        if nb is None and failure:
            blocks = []
        where = (f"{path.name} (bundled with the toolkit)" if _is_bundled(path)
                 else self._shown(path))
        intro = self._text(f"Notebook {where}, run against this project's store; ages are "
                           f"counted to {self.today}.")
        return AnalysisPage(path=page_path, title=title, nav=(SECTION, title), intro=intro,
                            failure=self._text(failure) if failure else None, blocks=blocks)

    def _shown(self, path: Path) -> str:
        """A listed notebook's path as the site shows paths: relative to the project, or
        under ``~``."""
        for root, prefix in display_roots(self.cfg.project_root):
            if path.is_relative_to(root):
                return prefix + path.relative_to(root).as_posix()
        return str(path)

    def _text(self, text: str) -> str:
        """A notebook's text as the site shows text: paths relative to the project or under
        ``~`` (as every page shows them), redacted in a redacted build."""
        for root, prefix in display_roots(self.cfg.project_root):
            if str(root) != "/":
                text = text.replace(str(root) + "/", prefix)
        if not self.redact:
            return text
        from toolkit.redact import redact

        return redact(text, fold=True)

    def _image(self, shown: dict[str, Any]) -> tuple[str, bytes] | None:
        svg = shown.get("image/svg+xml")
        if svg is not None:
            text = "".join(svg) if isinstance(svg, list) else str(svg)
            return "svg", self._text(text).encode("utf-8")
        png = shown.get("image/png")
        if png is not None and not self.redact:
            try:
                return "png", base64.b64decode("".join(png) if isinstance(png, list) else png)
            except ValueError:
                return None
        return None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def notebook_paths(cfg: Config) -> list[Path]:
    """The bundled notebooks (by name), then those listed under ``notebooks:``; none when
    the analyses are turned off (``analyses: false``, ``--no-analyses``)."""
    from toolkit.notebooks import NOTEBOOKS_DIR

    if not cfg.analyses:
        return []
    bundled = sorted(NOTEBOOKS_DIR.glob("*.ipynb")) if NOTEBOOKS_DIR.is_dir() else []
    return [*bundled, *cfg.notebooks]


def _is_bundled(path: Path) -> bool:
    from toolkit.notebooks import NOTEBOOKS_DIR

    return path.parent == NOTEBOOKS_DIR


def _slugged(paths: list[Path]) -> list[tuple[str, Path]]:
    """A page name for each notebook: its file name in lowercase letters, digits and ``-``,
    numbered when two would be the same."""
    out: list[tuple[str, Path]] = []
    seen: set[str] = set()
    for path in paths:
        base = re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-") or "notebook"
        slug, n = base, 1
        while slug in seen:
            n += 1
            slug = f"{base}-{n}"
        seen.add(slug)
        out.append((slug, path))
    return out


def _read(path: Path) -> tuple[bytes | None, str]:
    """The notebook's bytes, or None and why it cannot be read."""
    try:
        return path.read_bytes(), ""
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__


def _fingerprints(store: Store) -> list[list[Any]]:
    rows = store.conn.execute(
        "SELECT source, fingerprint FROM _sources ORDER BY source").fetchall()
    return [[s, f] for s, f in rows]


def _cached(base: Path, key: str) -> tuple[NotebookNode | None, str | None] | None:
    """The cached run of a notebook, (executed notebook, failure), when it was made with
    ``key``; None when there is none, it is for other data, or it cannot be read."""
    try:
        record = json.loads(base.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key:
        return None
    failure = record.get("failure")
    nb = _read_cached(base.with_suffix(".ipynb"))
    if not isinstance(failure, str) or not failure:
        if nb is None:
            return None
        failure = None
    return nb, failure


def _read_cached(path: Path) -> NotebookNode | None:
    """An executed notebook from the cache; None when there is none or it cannot be read."""
    import nbformat

    try:
        return nbformat.read(str(path), as_version=4)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _parse(data: bytes, path: Path) -> NotebookNode:
    import nbformat

    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ToolkitError(f"{path.name}: not a notebook ({type(exc).__name__})") from None


def _markdown(text: str, *, first: bool) -> Markup:
    """A Markdown cell as literal text: its headings stay headings (at least one level below
    the page title; the first cell's title is the page's), its paragraphs literal text."""
    parts: list[str] = []
    para: list[str] = []

    def flush() -> None:
        for chunk in re.split(r"\n[ \t]*\n", "\n".join(para)):
            if chunk.strip():
                parts.append(mdsafe.inline(chunk))
        para.clear()

    for line in text.splitlines():
        m = re.match(r"(#{1,6})\s+(.*)", line)
        if m:
            flush()
            level = len(m.group(1))
            if not (first and level == 1 and not parts):
                parts.append("#" * max(level, 2) + " " + mdsafe.inline(m.group(2)))
        else:
            para.append(line)
    flush()
    return Markup("\n\n".join(parts))


def _printed(text: str) -> list[Any]:
    """Printed output: ``Finding:`` lines as paragraphs, the rest preformatted."""
    blocks: list[Any] = []
    rest: list[str] = []
    for line in text.splitlines():
        if line.startswith("Finding: "):
            if rest:
                blocks.append(("pre", "\n".join(rest)))
                rest = []
            blocks.append(Markup("**Finding:** " + mdsafe.inline(line[len("Finding: "):])))
        else:
            rest.append(line)
    if any(r.strip() for r in rest):
        blocks.append(("pre", "\n".join(rest)))
    return blocks


def _version() -> str:
    from toolkit.parsecache import package_version

    return package_version("agent-ledger-toolkit")
