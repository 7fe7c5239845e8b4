"""Static SVG charts for the site, made at build time with matplotlib, byte-identical per input.

A chart is a :class:`ChartSpec` (plain data, built by ``toolkit.reports``); ``render_svg``
turns it into SVG bytes. What makes the bytes reproducible:

* the Agg-free SVG backend with a fixed ``svg.hashsalt`` (matplotlib otherwise uses random
  ids for clip paths and glyphs) and no ``Date`` metadata;
* one font, the DejaVu Sans matplotlib ships, with text drawn as paths (``svg.fonttype:
  path``): no font is fetched or needed by the viewer, and the picture is the same everywhere;
* math text off (``text.parse_math``): a category named ``$x$`` is shown as written, and a
  malformed one cannot break the build.

What makes them legible:

* sizes: a chart is at most ``MAX_WIDTH_IN`` inches wide (``MAX_WIDTH_IN * 96`` CSS px at its
  natural size, which fits the content column of a page at 1280 px, so the browser does not
  shrink it) and its smallest text is ``MIN_FONT_PT`` points (13.3 px at natural size);
* the legend stands outside the axes (under the plot), so it never covers a bar;
* a time axis (``ChartSpec.time``: the labels are ISO dates) is a true time scale: each point
  stands at its date, so uneven dates are spaced by the time between them;
* the numbers are also on the page as text: ``toolkit.site`` puts a table of the spec's values
  under each chart (:func:`data_rows`).

matplotlib is imported only when a chart is actually drawn (``toolkit.site`` caches SVGs by
the hash of their spec, so an unchanged chart costs nothing on a rebuild).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import itertools
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

# matplotlib's settings and font cache (MPLCONFIGDIR) are kept in the site's build folder, as
# IPython's and Jupyter's files are, so a build writes nothing in the user's home (matplotlib
# would write ~/.cache/matplotlib and ~/.config/matplotlib); an MPLCONFIGDIR the user set wins,
# and the analysis notebooks keep a matplotlib folder the user has (their styles, matplotlibrc)
MPL_DIR = "matplotlib"
MAX_LABEL = 32  # characters of a category label shown on an axis
MAX_WIDTH_IN = 7.0  # inches (72 pt, 96 CSS px each): 672 px, within a page's column at 1280 px
MIN_FONT_PT = 10.0  # the smallest text of a chart (ticks, legend): 13.3 px at natural size
RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "agent-ledger-toolkit",
    "svg.fonttype": "path",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": MIN_FONT_PT,
    "axes.titlesize": 11.0,
    "axes.labelsize": MIN_FONT_PT,
    "xtick.labelsize": MIN_FONT_PT,
    "ytick.labelsize": MIN_FONT_PT,
    "legend.fontsize": MIN_FONT_PT,
    "text.parse_math": False,
    "text.usetex": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
    # not reset by matplotlib's "default" style (see render_svg): dates are shown in UTC
    "timezone": "UTC",
}


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float, ...]
    color: str


@dataclass(frozen=True)
class ChartSpec:
    """A bar chart: one bar (group) per label, series stacked. With ``time`` the labels are
    ISO dates (``YYYY-MM-DD``) placed on a time scale; ``area`` draws the stacked series as
    areas through the points instead of bars (for counts that hold until the next point)."""

    name: str  # file stem: charts/<name>.svg
    title: str
    labels: tuple[str, ...]
    series: tuple[Series, ...]
    ylabel: str = ""
    horizontal: bool = False
    time: bool = False
    area: bool = False

    def digest(self) -> str:
        """Hash of everything that shapes the picture (and of this module's settings)."""
        payload = json.dumps({"spec": asdict(self), "rc": RC, "v": _renderer_version()},
                             sort_keys=True, default=str)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _renderer_version() -> str:
    """The drawing code's version and matplotlib's."""
    from toolkit.parsecache import package_version

    return "5:" + package_version("matplotlib")


def _short(label: str) -> str:
    text = " ".join(str(label).split())
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _integer_ticks(axis: Axis) -> None:
    """Whole-number ticks on ``axis`` (its default locator, AutoLocator, is a MaxNLocator)."""
    from matplotlib.ticker import MaxNLocator

    locator = axis.get_major_locator()
    if isinstance(locator, MaxNLocator):
        locator.set_params(integer=True)


def _dates(labels: Sequence[str]) -> list[dt.date]:
    return [dt.date.fromisoformat(str(label)[:10]) for label in labels]


def _figure_size(spec: ChartSpec) -> tuple[float, float]:
    n = max(len(spec.labels), 1)
    legend = 0.35 if len(spec.series) > 1 else 0.0
    if spec.horizontal:
        return MAX_WIDTH_IN, max(2.4, 0.3 * n + 1.4) + legend
    if spec.time:
        return MAX_WIDTH_IN, 3.4 + legend
    return max(5.0, min(MAX_WIDTH_IN, 0.3 * n + 3.0)), 3.4 + legend


def draw(spec: ChartSpec) -> Figure:
    """The chart as a matplotlib Figure (call within ``matplotlib.rc_context(RC)``)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=_figure_size(spec), dpi=72, layout="constrained")
    FigureCanvasSVG(fig)
    ax = fig.add_subplot()
    values = [[float(v or 0) for v in s.values] for s in spec.series]
    names = [_short(s.name) for s in spec.series]
    colors = [s.color for s in spec.series]
    if spec.time:
        _draw_time(ax, spec, values, names, colors)
    else:
        _draw_categories(ax, spec, values, names, colors)
        if not spec.horizontal:
            _fit_category_labels(fig, ax)
    ax.set_title(_short(spec.title) if len(spec.title) > 80 else spec.title, loc="left")
    if len(spec.series) > 1:  # under the plot (the layout makes room), never over it
        _legend(fig, len(spec.series))
    return fig


def _legend(fig: Figure, entries: int) -> None:
    """The legend in as few rows as fit the picture's width.

    A legend "outside lower left" is anchored to the figure's corner: its place and size do
    not depend on the layout, so its width is measured without a layout pass (the same to the
    last bit as after one; a pass costs about as much as drawing the chart)."""
    ncols = min(entries, 5)
    while True:
        legend = fig.legend(loc="outside lower left", ncols=ncols, frameon=False)
        if ncols == 1:
            return
        if legend.get_window_extent().x1 <= fig.bbox.width:
            return
        legend.remove()
        ncols -= 1


def _bar_kwargs(name: str, color: str) -> dict[str, Any]:
    return {"color": color, "label": name, "edgecolor": "white", "linewidth": 0.5}


def _draw_categories(ax: Axes, spec: ChartSpec, values: list[list[float]], names: list[str],
                     colors: list[str]) -> None:
    n = len(spec.labels)
    positions = list(range(n))
    base = [0.0] * n
    for vals, name, color in zip(values, names, colors, strict=True):
        if spec.horizontal:
            ax.barh(positions, vals, left=base, height=0.7, **_bar_kwargs(name, color))
        else:
            ax.bar(positions, vals, bottom=base, width=0.75, **_bar_kwargs(name, color))
        base = [b + v for b, v in zip(base, vals, strict=True)]
    labels = [_short(label) for label in spec.labels]
    if spec.horizontal:
        ax.set_yticks(positions, labels)
        ax.invert_yaxis()
        ax.set_xlabel(spec.ylabel)
        _integer_ticks(ax.xaxis)
    else:
        ax.set_xticks(positions, labels, rotation=45 if n > 6 else 0,
                      ha="right" if n > 6 else "center")
        ax.set_ylabel(spec.ylabel)
        _integer_ticks(ax.yaxis)


# Room beside the plot that the labels along x do not get: the y axis's ticks and label.
_Y_AXIS_PX = 40.0
_LABEL_GAP_PX = 8.0


def _fit_category_labels(fig: Figure, ax: Axes) -> None:
    """Labels along x side by side that do not touch: the picture is made wider (up to
    MAX_WIDTH_IN) when two neighbours would meet, and the labels are slanted when even that
    is not enough. Their widths are measured (a label's size does not depend on the
    layout); each gets an equal share of the plot's width."""
    labels = ax.get_xticklabels()
    if len(labels) < 2 or labels[0].get_rotation():
        return
    renderer = fig._get_renderer()  # type: ignore[attr-defined]  # the legend's way too
    widths = [t.get_window_extent(renderer).width for t in labels]
    slot = max((a + b) / 2 for a, b in itertools.pairwise(widths)) + _LABEL_GAP_PX
    needed = (slot * len(labels) + _Y_AXIS_PX) / fig.dpi  # inches
    width, height = fig.get_size_inches()
    if needed <= width:
        return
    if needed <= MAX_WIDTH_IN:
        fig.set_size_inches(needed, height)
        return
    fig.set_size_inches(MAX_WIDTH_IN, height)
    for t in labels:
        t.set_rotation(45)
        t.set_horizontalalignment("right")


def _draw_time(ax: Axes, spec: ChartSpec, values: list[list[float]], names: list[str],
               colors: list[str]) -> None:
    """Points at their dates: the x axis is time, whatever the gaps between the labels."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num

    x = [float(date2num(d)) for d in _dates(spec.labels)]
    if spec.area and len(set(x)) > 1:  # (one day would be an area of no width: a bar)
        ax.stackplot(x, *values, colors=colors, labels=names, edgecolor="white",
                     linewidth=0.5)
    else:
        gaps = [b - a for a, b in zip(sorted(set(x)), sorted(set(x))[1:], strict=False)]
        width = 0.8 * min(gaps, default=1.0)
        base = [0.0] * len(x)
        for vals, name, color in zip(values, names, colors, strict=True):
            ax.bar(x, vals, bottom=base, width=width, **_bar_kwargs(name, color))
            base = [b + v for b, v in zip(base, vals, strict=True)]
        if x:
            ax.set_xlim(min(x) - width, max(x) + width)
    locator = AutoDateLocator(minticks=3, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, show_offset=True))
    ax.set_ylabel(spec.ylabel)
    _integer_ticks(ax.yaxis)


def mpl_env(build: Path, *, users: bool = False) -> dict[str, str]:
    """This process's environment for a child process that imports matplotlib, with its
    settings and cache folder in ``build`` (:data:`MPL_DIR`). ``users`` (the user's own
    notebooks): unchanged when the user has a matplotlib settings folder
    (``$XDG_CONFIG_HOME/matplotlib``, else ``~/.config/matplotlib``), whose styles and
    matplotlibrc their notebooks may use; matplotlib writes only in the user's own folders
    then, as it does for them anyway. The site's own charts never read the user's settings."""
    env = dict(os.environ)
    if users and "MPLCONFIGDIR" not in env:
        config = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "~", ".config")
        if os.path.isdir(os.path.join(os.path.expanduser(config), "matplotlib")):
            return env
    env.setdefault("MPLCONFIGDIR", str(build / MPL_DIR))
    return env


def import_matplotlib(build: Path) -> None:
    """Import matplotlib in this process with its folder in ``build`` (:func:`mpl_env`); it
    reads MPLCONFIGDIR when first imported, and writes its font cache then. Nothing to do
    when it is already imported (it keeps the folder it chose)."""
    if "matplotlib" in sys.modules:
        return
    before = os.environ.get("MPLCONFIGDIR")
    os.environ["MPLCONFIGDIR"] = mpl_env(build)["MPLCONFIGDIR"]
    try:
        import matplotlib.font_manager  # noqa: F401  (reads the folder, writes the font cache)
    finally:
        if before is None:
            del os.environ["MPLCONFIGDIR"]
        else:
            os.environ["MPLCONFIGDIR"] = before


@contextlib.contextmanager
def _epoch_in_seconds() -> Iterator[None]:
    """``SOURCE_DATE_EPOCH`` as Unix seconds while a chart is drawn. The toolkit's clock also
    takes an ISO time there (``toolkit.clock.now``), but matplotlib reads the variable itself
    whenever it makes an SVG renderer, as int() (the legend is measured with one, before the
    ``Date``-less save): an ISO value would crash the build. The same instant, in seconds."""
    from toolkit import clock

    raw = os.environ.get(clock.EPOCH_ENV)
    if not raw or raw.strip().isdigit():
        yield
        return
    os.environ[clock.EPOCH_ENV] = str(int(clock.now().timestamp()))
    try:
        yield
    finally:
        os.environ[clock.EPOCH_ENV] = raw


def render_svg(spec: ChartSpec) -> bytes:
    """The chart as SVG bytes; the same spec always gives the same bytes: drawn with
    matplotlib's own defaults under :data:`RC`, never the settings of the user's matplotlibrc
    (``MPLCONFIGDIR``, ``MATPLOTLIBRC``) or of a style this process set."""
    import matplotlib
    from matplotlib import style

    matplotlib.use("svg", force=False)
    with style.context("default"), matplotlib.rc_context(RC), _epoch_in_seconds():
        fig = draw(spec)
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def data_rows(spec: ChartSpec) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The chart's numbers as a table: a row per label, a column per series (and the total
    when the series are stacked). The site shows it under the chart."""
    stacked = len(spec.series) > 1
    columns = ("Date" if spec.time else "", *(s.name for s in spec.series),
               *(("Total",) if stacked else ()))
    rows = []
    for i, label in enumerate(spec.labels):
        cells = [float(s.values[i] or 0) if i < len(s.values) else 0.0 for s in spec.series]
        rows.append((label, *(_number(c) for c in cells),
                     *((_number(sum(cells)),) if stacked else ())))
    return columns, rows


def chart_request(cache: Path, specs: list[ChartSpec]) -> str:
    """One line of input for ``python -m toolkit.charts --serve`` (see :func:`main`)."""
    return json.dumps({"cache": str(cache), "specs": [asdict(s) for s in specs]})


def _specs(items: list[dict[str, Any]]) -> list[ChartSpec]:
    out = []
    for d in items:
        series = tuple(Series(x["name"], tuple(x["values"]), x["color"]) for x in d["series"])
        out.append(ChartSpec(name=d["name"], title=d["title"], labels=tuple(d["labels"]),
                             series=series, ylabel=d["ylabel"], horizontal=d["horizontal"],
                             time=d.get("time", False), area=d.get("area", False)))
    return out


def cached_svg(cache: Path, digest: str) -> bytes | None:
    """The SVG of the chart whose spec has ``digest``, as the chart cache ``cache`` (a build
    folder's ``chart-cache``) holds it; None when it holds no whole one (none, cut short or
    damaged: a ``toolkit.parsecache`` file)."""
    from toolkit import parsecache

    svg = parsecache.load(cache, digest, (digest,))
    return svg if isinstance(svg, bytes) else None


def cache_svg(cache: Path, digest: str, svg: bytes) -> None:
    """Keep ``svg`` in the chart cache (see :func:`cached_svg`)."""
    from toolkit import parsecache

    parsecache.save(cache, digest, (digest,), svg)


def _write_svgs(cache: Path, specs: list[ChartSpec]) -> None:
    for spec in specs:
        cache_svg(cache, spec.digest(), render_svg(spec))


def main(argv: list[str]) -> int:
    """``python -m toolkit.charts --serve``: for each line of input (:func:`chart_request`),
    ``{"cache": CACHE_DIR, "specs": [...]}``, write ``<digest>.svg`` for each spec into
    CACHE_DIR and answer a line, ``ok`` or ``failed``, until the input ends (toolkit.site draws
    its charts so, in parallel with the pages, and keeps the process for its next build)."""
    if argv != ["--serve"]:
        print("usage: python -m toolkit.charts --serve", file=sys.stderr)
        return 2
    for line in sys.stdin:
        try:
            request = json.loads(line)
            _write_svgs(Path(request["cache"]), _specs(request["specs"]))
            answer = "ok"
        except Exception:  # any failure: the site draws the charts still missing itself
            answer = "failed"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
