"""--plot PATH.png: busbw against message size, one line per collective and stage, and the
node-pair matrix as a heatmap. matplotlib is an optional extra (`pip install netcheck[plot]`).
"""

from __future__ import annotations

from netcheck.core.bwrecords import BandwidthResult


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to get it."""


def _pyplot():
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


def write_plot(result: BandwidthResult, path: str) -> None:
    plt = _pyplot()
    panels = 2 if result.pairs else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    _busbw_lines(axes[0][0], result)
    if result.pairs:
        _pair_heatmap(fig, axes[0][1], result)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _busbw_lines(ax, result: BandwidthResult) -> None:
    for s in result.sweeps:
        if s.rows:
            ax.plot([r.size for r in s.rows], [r.busbw for r in s.rows], marker=".",
                    label=f"{s.op}, {s.stage} ({s.ranks} ranks)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"bus bandwidth ({result.backend})")
    ax.grid(True, alpha=0.3)
    if any(s.rows for s in result.sweeps):
        ax.legend(fontsize="small")


def _pair_heatmap(fig, ax, result: BandwidthResult) -> None:
    nodes = sorted({n for p in result.pairs for n in (p.a, p.b)})
    index = {n: i for i, n in enumerate(nodes)}
    grid = [[float("nan")] * len(nodes) for _ in nodes]
    for p in result.pairs:
        grid[index[p.a]][index[p.b]] = grid[index[p.b]][index[p.a]] = p.busbw
    image = ax.imshow(grid, cmap="viridis")
    names = [result.node_name(n) for n in nodes]
    ax.set_xticks(range(len(nodes)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(nodes)), names)
    ax.set_title("node pairs (GB/s each way)")
    fig.colorbar(image, ax=ax)
