"""The bandwidth phase's tables: nccl-tests' table per sweep, intra against inter, the node
pair matrix, and a GB/s cell as nccl-tests prints it (a figure in a sentence: core.bwtext).

    size  count  type     redop  time (us)  algbw (GB/s)  busbw (GB/s)  #wrong  spread
    8     2      float32  sum    1310.4     0.00000611    0.00000916    0       4%
    1024  256    float32  sum    61.2       0.0167        0.0251        0       2%
    ...
    # Avg bus bandwidth : 1.07 GB/s
"""

from __future__ import annotations

import math
from typing import Any, Callable

from tabulate import tabulate

from netcheck.core.bwrecords import STAGE_TITLES, BandwidthResult, Headline, Pair, Sweep, avg_busbw
from netcheck.core.bwtext import plateau_text, rate_text, size_words, step_text, time_text
from netcheck.core.constants import BW_PLATEAU_BAND, BW_PLATEAU_TOP

HEADERS = ("size", "count", "type", "redop", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong", "spread")


def gbps_cell(value: float) -> str:
    """A GB/s column's cell, a number as nccl-tests prints it: two decimals from 1 GB/s, three
    significant digits below (a latency-bound 8 B row's 0.00000611 must not read 0.00), never
    scientific notation."""
    if value >= 1:
        return f"{value:.2f}"
    if value <= 0:
        return "0"
    decimals = 2 - math.floor(math.log10(value))
    return f"{value:.{decimals}f}"


def table_rows(sweep: Sweep) -> list[tuple[Any, ...]]:
    return [(r.size, r.count, r.dtype, r.redop, f"{r.time_us:.1f}", gbps_cell(r.algbw), gbps_cell(r.busbw),
             "N/A" if r.wrong is None else r.wrong, f"{r.spread:.0%}") for r in sweep.rows]


def sweep_title(sweep: Sweep, backend: str) -> str:
    groups = f", {sweep.groups} groups at once" if sweep.groups > 1 else ""
    return f"# {sweep.op}, {STAGE_TITLES[sweep.stage]}: {sweep.ranks} ranks{groups} ({backend})"


def sweep_text(sweep: Sweep, result: BandwidthResult, head: Headline | None = None) -> str:
    lines = [sweep_title(sweep, result.backend)]
    if sweep.rows:
        lines += [tabulate(table_rows(sweep), headers=HEADERS, disable_numparse=True),
                  f"# Avg bus bandwidth : {rate_text(avg_busbw(sweep))} (nccl-tests' mean over every size)"]
    if head is not None:
        which = "" if head.rising else f" and those next to them within {BW_PLATEAU_BAND:.0%}"  # bwrecords.plateau_rows
        lines.append(f"# Plateau           : {plateau_text(head)} (the largest {BW_PLATEAU_TOP} sizes{which}: "
                     "their median and range)")
    if head is not None and head.latency_from_us is not None:
        lines.append(f"# Latency           : {time_text(head.latency_from_us)} per op at "
                     f"{size_words(head.latency_sizes[0])}")
    if head is not None and head.step_s is not None:
        lines.append(f"# Per step          : {step_text(head, result.nnodes, result.nproc_per_node)}")
    if sweep.skipped:
        skipped = ", ".join(size_words(s) for s in sweep.skipped)
        lines.append(f"# skipped to stay inside --bw-budget: {skipped}")
    if sweep.note:
        lines.append(f"# {sweep.note}")
    return "\n".join(lines)


def side_by_side(intra: Sweep, inter: Sweep) -> str:
    """busbw inside the nodes against across them, size by size."""
    across = {r.size: r.busbw for r in inter.rows}
    rows = [(r.size, gbps_cell(r.busbw), gbps_cell(across[r.size]) if r.size in across else "-")
            for r in intra.rows]
    return tabulate(rows, headers=(f"{intra.op} size", "intra busbw", "inter busbw"),
                    disable_numparse=True)


def pair_matrix(pairs: tuple[Pair, ...], name: Callable[[int], str],
                resent: dict[tuple[int, int], float] | None = None) -> str:
    """busbw (GB/s each way) between every two nodes, as a symmetric matrix; beside a pair in
    `resent` (the lossy pairs link.health names), the share of segments it resent."""
    nodes = sorted({p.a for p in pairs} | {p.b for p in pairs})
    lost = resent or {}
    texts = {(p.a, p.b): gbps_cell(p.busbw) + (f" ({share:.1%} resent)" if (share := lost.get(
        (min(p.a, p.b), max(p.a, p.b)))) else "") for p in pairs}
    cell = texts | {(b, a): text for (a, b), text in texts.items()}
    names = [name(n) for n in nodes]
    rows = [[names[i]] + [cell.get((a, b), "-") for b in nodes] for i, a in enumerate(nodes)]
    return tabulate(rows, headers=["GB/s"] + names, disable_numparse=True)


def render_text(result: BandwidthResult, pairs: bool = True, resent: dict[tuple[int, int], float] | None = None) -> str:
    """Every table of the phase, for the text report; the node-pair matrix only with `pairs`
    (it has a row and a column per node), its lossy pairs marked with what they resent."""
    heads = {(h.stage, h.op): h for h in result.headlines}
    parts = [sweep_text(s, result, heads.get((s.stage, s.op))) for s in result.sweeps]
    by_stage = {(s.stage, s.op): s for s in result.sweeps}
    for op in dict.fromkeys(s.op for s in result.sweeps):
        if ("intra", op) in by_stage and ("inter", op) in by_stage:
            parts.append(side_by_side(by_stage["intra", op], by_stage["inter", op]))
    if result.pairs and pairs:
        parts.append(f"# node pairs, {size_words(result.pairs[0].size)} both ways at once:\n"
                     + pair_matrix(result.pairs, result.node_name, resent))
    return "\n\n".join(parts)
