"""--plot PATH.png: busbw against message size, one line per collective and stage, and the
node-pair matrix as a heatmap. matplotlib is an optional extra (`pip install netcheck[plot]`).
"""

from __future__ import annotations

import io
from types import ModuleType
from typing import TYPE_CHECKING, Callable

from netcheck.core.bwrecords import STAGE_TITLES, BandwidthResult, Row
from netcheck.core.bwtext import size_words, time_text
from netcheck.core.errors import UserError
from netcheck.render.tables import gbps_cell

if TYPE_CHECKING:   # matplotlib is optional: imported only where a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

HEATMAP_VALUES_UP_TO = 16   # nodes: beyond, the cells are too small for their numbers


class PlotUnavailable(UserError):
    """matplotlib is not installed; the message says how to get it."""


def _pyplot() -> ModuleType:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'netcheck[plot]'") from None
    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt

    return plt


def check_available() -> None:
    """Called before the run, so a missing matplotlib is said at once, not after it."""
    _pyplot()


def render_png(result: BandwidthResult) -> bytes:
    """busbw and time per op against size (log axes labelled in bytes, the plateau's sizes
    shaded, the bucket size marked), and the node pairs as a heatmap with their values: the
    PNG's bytes, which the CLI writes as it writes every report file (render.outfile)."""
    plt = _pyplot()
    panels = 3 if result.pairs else 2
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.8), squeeze=False)
    _curves(axes[0][0], result, "busbw (GB/s)", lambda r: r.busbw, f"bus bandwidth ({result.backend})")
    _curves(axes[0][1], result, "time per op", lambda r: r.time_us, "latency", time_axis=True)
    if result.pairs:
        _pair_heatmap(fig, axes[0][2], result)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return png.getvalue()


def _curves(ax: Axes, result: BandwidthResult, label: str, value: Callable[[Row], float], title: str,
            time_axis: bool = False) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    heads = {(h.stage, h.op): h for h in result.headlines}
    for s in result.sweeps:
        rows = [r for r in s.rows if value(r) > 0]   # a log axis has no 0
        if rows:
            line, = ax.plot([r.size for r in rows], [value(r) for r in rows], marker=".",
                            label=f"{s.op}, {STAGE_TITLES[s.stage]} ({s.ranks} ranks)")
            h = heads.get((s.stage, s.op))
            if h is not None and not time_axis:
                ax.axvspan(h.plateau_from, h.plateau_to, color=line.get_color(), alpha=0.12)
    buckets = {h.bucket_bytes for h in result.headlines if h.bucket_bytes}
    for bucket in buckets:
        ax.axvline(bucket, color="grey", linestyle="--", linewidth=1, label=f"DDP bucket ({size_words(bucket)})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: size_words(int(x)) if x >= 1 else ""))
    if time_axis:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: time_text(y)))
    # The log axes' minor ticks are labelled bare ("4x10^3" beside "1 ms"): left unlabelled,
    # every label on an axis carries its unit.
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel("message size")
    ax.set_ylabel(label)
    ax.set_title(title + ("" if time_axis else " (shaded: the plateau's sizes)"))
    ax.grid(True, which="both", alpha=0.3)
    if any(s.rows for s in result.sweeps):
        ax.legend(fontsize="small")


def _pair_heatmap(fig: Figure, ax: Axes, result: BandwidthResult) -> None:
    nodes = sorted({n for p in result.pairs for n in (p.a, p.b)})
    index = {n: i for i, n in enumerate(nodes)}
    grid = [[float("nan")] * len(nodes) for _ in nodes]
    for p in result.pairs:
        grid[index[p.a]][index[p.b]] = grid[index[p.b]][index[p.a]] = p.busbw
    image = ax.imshow(grid, cmap="viridis", vmin=0)
    names = [result.node_name(n) for n in nodes]
    ax.set_xticks(range(len(nodes)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(nodes)), names)
    if len(nodes) <= HEATMAP_VALUES_UP_TO:
        brightest = max(p.busbw for p in result.pairs)
        for p in result.pairs:
            ink = "black" if p.busbw > 0.6 * brightest else "white"   # viridis is light at its top
            for a, b in ((p.a, p.b), (p.b, p.a)):
                ax.text(index[b], index[a], gbps_cell(p.busbw), ha="center", va="center", fontsize="small", color=ink)
    ax.set_title(f"node pairs, {size_words(result.pairs[0].size)} each way (GB/s)")
    fig.colorbar(image, ax=ax, label="GB/s each way")
