"""Static SVG charts for the site, made at build time with matplotlib, byte-identical per input.

A chart is a :class:`ChartSpec` (plain data, built by ``toolkit.reports``); ``render_svg``
turns it into SVG bytes. What makes the bytes reproducible:

* the Agg-free SVG backend with a fixed ``svg.hashsalt`` (matplotlib otherwise uses random
  ids for clip paths and glyphs) and no ``Date`` metadata;
* one font, the DejaVu Sans matplotlib ships, with text drawn as paths (``svg.fonttype:
  path``): no font is fetched or needed by the viewer, and the picture is the same everywhere;
* math text off (``text.parse_math``): a category named ``$x$`` is shown as written, and a
  malformed one cannot break the build.

matplotlib is imported only when a chart is actually drawn (``toolkit.site`` caches SVGs by
the hash of their spec, so an unchanged chart costs nothing on a rebuild).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axis import Axis
    from matplotlib.typing import RcKeyType

MAX_LABEL = 32  # characters of a category label shown on an axis
RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "agent-ledger-toolkit",
    "svg.fonttype": "path",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9.0,
    "text.parse_math": False,
    "text.usetex": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float, ...]
    color: str


@dataclass(frozen=True)
class ChartSpec:
    """A bar chart: one bar (group) per label, series stacked."""

    name: str  # file stem: charts/<name>.svg
    title: str
    labels: tuple[str, ...]
    series: tuple[Series, ...]
    ylabel: str = ""
    horizontal: bool = False

    def digest(self) -> str:
        """Hash of everything that shapes the picture (and of this module's settings)."""
        payload = json.dumps({"spec": asdict(self), "rc": RC, "v": _renderer_version()},
                             sort_keys=True, default=str)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@functools.cache
def _renderer_version() -> str:
    """The drawing code's version and matplotlib's (read once: reading package metadata is
    slow, and a digest is taken several times per chart and build)."""
    from importlib.metadata import version

    return "2:" + version("matplotlib")


def _short(label: str) -> str:
    text = " ".join(str(label).split())
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _integer_ticks(axis: Axis) -> None:
    """Whole-number ticks on ``axis`` (its default locator, AutoLocator, is a MaxNLocator)."""
    from matplotlib.ticker import MaxNLocator

    locator = axis.get_major_locator()
    if isinstance(locator, MaxNLocator):
        locator.set_params(integer=True)


def render_svg(spec: ChartSpec) -> bytes:
    """The chart as SVG bytes; the same spec always gives the same bytes."""
    import matplotlib

    matplotlib.use("svg", force=False)
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        n = max(len(spec.labels), 1)
        if spec.horizontal:
            size = (7.5, max(2.2, 0.32 * n + 1.2))
        else:
            size = (max(6.0, min(11.0, 0.3 * n + 3.0)), 3.2)
        fig = Figure(figsize=size, dpi=72)
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        positions = list(range(len(spec.labels)))
        base = [0.0] * len(spec.labels)
        for s in spec.series:
            values = [float(v or 0) for v in s.values]
            kwargs: dict[str, Any] = {"color": s.color, "label": _short(s.name),
                                      "edgecolor": "white", "linewidth": 0.5}
            if spec.horizontal:
                ax.barh(positions, values, left=base, height=0.7, **kwargs)
            else:
                ax.bar(positions, values, bottom=base, width=0.75, **kwargs)
            base = [b + v for b, v in zip(base, values, strict=True)]
        labels = [_short(label) for label in spec.labels]
        if spec.horizontal:
            ax.set_yticks(positions, labels)
            ax.invert_yaxis()
            ax.set_xlabel(spec.ylabel)
            _integer_ticks(ax.xaxis)
        else:
            ax.set_xticks(positions, labels, rotation=45 if n > 8 else 0,
                          ha="right" if n > 8 else "center")
            ax.set_ylabel(spec.ylabel)
            _integer_ticks(ax.yaxis)
        ax.set_title(_short(spec.title) if len(spec.title) > 80 else spec.title, loc="left")
        if len(spec.series) > 1:
            ax.legend(frameon=False, fontsize=8, loc="best")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def specs_to_json(specs: list[ChartSpec]) -> str:
    return json.dumps([asdict(s) for s in specs])


def specs_from_json(text: str) -> list[ChartSpec]:
    out = []
    for d in json.loads(text):
        series = tuple(Series(x["name"], tuple(x["values"]), x["color"]) for x in d["series"])
        out.append(ChartSpec(name=d["name"], title=d["title"], labels=tuple(d["labels"]),
                             series=series, ylabel=d["ylabel"], horizontal=d["horizontal"]))
    return out


def main(argv: list[str]) -> int:
    """``python -m toolkit.charts CACHE_DIR`` < specs JSON: write ``<digest>.svg`` for each
    spec into CACHE_DIR (used by toolkit.site to draw charts in parallel with the pages)."""
    cache = Path(argv[0])
    for spec in specs_from_json(sys.stdin.read()):
        target = cache / f"{spec.digest()}.svg"
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(render_svg(spec))
        os.replace(tmp, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
