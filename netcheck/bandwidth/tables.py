"""The bandwidth phase's text: nccl-tests' table per sweep, intra against inter, the node
pair matrix, the progress bar.

    size  count  type     redop  time (us)  algbw (GB/s)  busbw (GB/s)  #wrong
    8     2      float32  sum    1310.4     6.1 KB/s      9.16 KB/s     0
    1024  256    float32  sum    61.2       0.0167        0.0251        0
    ...
    # Avg bus bandwidth : 1.07 GB/s
"""

from __future__ import annotations

from typing import Any, Callable

from tabulate import tabulate

from netcheck.bandwidth.sweep import size_text
from netcheck.core.bwrecords import STAGE_TITLES, BandwidthResult, Headline, Pair, Sweep, avg_busbw
from netcheck.core.constants import BW_PLATEAU_BAND

HEADERS = ("size", "count", "type", "redop", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong")


# Below this many GB/s a rate is said in its own unit (MB/s, KB/s, B/s): 6e-06 is no number a
# person reads, 6 KB/s is (a latency-bound 8-byte message, a link shaped to a trickle).
GBPS_FLOOR = 0.01
SMALL_UNITS = (("MB/s", 1e3), ("KB/s", 1e6), ("B/s", 1e9))


def _gbps(value: float) -> str:
    """A GB/s column's cell: two decimals as nccl-tests prints them, three significant digits
    below 1 GB/s (a shaped link's 0.0025 must not read 0.00), never scientific notation: under
    GBPS_FLOOR the rate with its unit, "6 KB/s"."""
    if value >= 1:
        return f"{value:.2f}"
    if value >= GBPS_FLOOR or value <= 0:
        return _digits(value)
    unit, scale = next(((u, k) for u, k in SMALL_UNITS if value * k >= 1), SMALL_UNITS[-1])
    return f"{_digits(value * scale)} {unit}"


def rate_text(value: float) -> str:
    """A rate in a sentence, three significant digits in its unit: `12.3 GB/s`, `6 KB/s`."""
    if value >= GBPS_FLOOR or value <= 0:
        return f"{_digits(value)} GB/s"
    return _gbps(value)


def _with_unit(cell: str) -> str:
    return cell if cell.endswith("/s") else f"{cell} GB/s"


def _digits(value: float) -> str:
    """Three significant digits, written out (999.95 is 1000, not 1e+03)."""
    text = f"{value:.3g}"
    return f"{value:.0f}" if "e" in text else text


def table_rows(sweep: Sweep) -> list[tuple[Any, ...]]:
    return [(r.size, r.count, r.dtype, r.redop, f"{r.time_us:.1f}", _gbps(r.algbw), _gbps(r.busbw),
             "N/A" if r.wrong is None else r.wrong) for r in sweep.rows]


def sweep_title(sweep: Sweep, backend: str) -> str:
    groups = f", {sweep.groups} groups at once" if sweep.groups > 1 else ""
    return f"# {sweep.op}, {STAGE_TITLES[sweep.stage]}: {sweep.ranks} ranks{groups} ({backend})"


def sweep_text(sweep: Sweep, backend: str, head: Headline | None = None) -> str:
    lines = [sweep_title(sweep, backend)]
    if sweep.rows:
        lines += [tabulate(table_rows(sweep), headers=HEADERS, disable_numparse=True),
                  f"# Avg bus bandwidth : {_with_unit(_gbps(avg_busbw(sweep)))}"]
    if head is not None:
        span = size_text(head.plateau_from) + ("" if head.plateau_to == head.plateau_from
                                               else f"-{size_text(head.plateau_to)}")
        lines.append(f"# Plateau           : {rate_text(head.plateau_busbw)} at {span} "
                     f"(the sizes within {BW_PLATEAU_BAND:.0%} of the peak)")
    if head is not None and head.latency_from_us is not None:
        lines.append(f"# Latency           : {head.latency_from_us:.1f} us per op at "
                     f"{size_text(head.latency_sizes[0])}")
    if sweep.skipped:
        skipped = ", ".join(size_text(s) for s in sweep.skipped)
        lines.append(f"# skipped to stay inside --bw-budget: {skipped}")
    if sweep.note:
        lines.append(f"# {sweep.note}")
    return "\n".join(lines)


def side_by_side(intra: Sweep, inter: Sweep) -> str:
    """busbw inside the nodes against across them, size by size."""
    across = {r.size: r.busbw for r in inter.rows}
    rows = [(r.size, _gbps(r.busbw), _gbps(across[r.size]) if r.size in across else "-")
            for r in intra.rows]
    return tabulate(rows, headers=(f"{intra.op} size", "intra busbw", "inter busbw"),
                    disable_numparse=True)


def progress_bar(spent: float, budget: float, width: int = 20) -> str:
    """How much of the sweep's time budget is spent: `[######--------------] 3/10 s`."""
    filled = round(width * min(1.0, spent / budget)) if budget > 0 else width
    return f"[{'#' * filled}{'-' * (width - filled)}] {spent:.0f}/{budget:g} s"


def pair_matrix(pairs: tuple[Pair, ...], name: Callable[[int], str]) -> str:
    """busbw (GB/s each way) between every two nodes, as a symmetric matrix."""
    nodes = sorted({p.a for p in pairs} | {p.b for p in pairs})
    cell = {(p.a, p.b): _gbps(p.busbw) for p in pairs} | {(p.b, p.a): _gbps(p.busbw) for p in pairs}
    names = [name(n) for n in nodes]
    rows = [[names[i]] + [cell.get((a, b), "-") for b in nodes] for i, a in enumerate(nodes)]
    return tabulate(rows, headers=["GB/s"] + names, disable_numparse=True)


def render_text(result: BandwidthResult, pairs: bool = True) -> str:
    """Every table of the phase, for the text report; the node-pair matrix only with `pairs`
    (it has a row and a column per node)."""
    heads = {(h.stage, h.op): h for h in result.headlines}
    parts = [sweep_text(s, result.backend, heads.get((s.stage, s.op))) for s in result.sweeps]
    by_stage = {(s.stage, s.op): s for s in result.sweeps}
    for op in dict.fromkeys(s.op for s in result.sweeps):
        if ("intra", op) in by_stage and ("inter", op) in by_stage:
            parts.append(side_by_side(by_stage["intra", op], by_stage["inter", op]))
    if result.pairs and pairs:
        parts.append(f"# node pairs, {size_text(result.pairs[0].size)} both ways at once:\n"
                     + pair_matrix(result.pairs, result.node_name))
    return "\n\n".join(parts)
