"""The bandwidth phase's text: nccl-tests' table per sweep, intra against inter, the node
pair matrix, the progress bar, and the words every other reader of a figure uses.

    size  count  type     redop  time (us)  algbw (GB/s)  busbw (GB/s)  #wrong  spread
    8     2      float32  sum    1310.4     0.00000611    0.00000916    0       4%
    1024  256    float32  sum    61.2       0.0167        0.0251        0       2%
    ...
    # Avg bus bandwidth : 1.07 GB/s
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from tabulate import tabulate

from netcheck.bandwidth.sweep import size_words
from netcheck.core.bwrecords import STAGE_TITLES, BandwidthResult, Headline, Pair, Sweep, avg_busbw
from netcheck.core.constants import BW_PLATEAU_BAND, BW_PLATEAU_TOP

HEADERS = ("size", "count", "type", "redop", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong", "spread")

# Below this many GB/s a rate in a sentence is said in its own unit (MB/s, KB/s, B/s):
# 6e-06 GB/s is no number a person reads, 6 KB/s is. The table's GB/s columns stay numbers.
GBPS_FLOOR = 0.01
SMALL_UNITS = (("MB/s", 1e3), ("KB/s", 1e6), ("B/s", 1e9))


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


def rate_text(value: float) -> str:
    """A rate in a sentence, three significant digits in its unit: `12.3 GB/s`, `6 KB/s`."""
    if value >= GBPS_FLOOR or value <= 0:
        return f"{_digits(value)} GB/s"
    unit, scale = next(((u, k) for u, k in SMALL_UNITS if value * k >= 1), SMALL_UNITS[-1])
    return f"{_digits(value * scale)} {unit}"


def time_text(us: float) -> str:
    """A time per op in a sentence, in its unit: `61.2 us`, `3.45 ms`, `1.2 s`."""
    if us >= 1e6:
        return f"{_digits(us / 1e6)} s"
    return f"{_digits(us)} us" if us < 1000 else f"{_digits(us / 1000)} ms"


def _digits(value: float) -> str:
    """Three significant digits, written out (999.95 is 1000, not 1e+03)."""
    text = f"{value:.3g}"
    return f"{value:.0f}" if "e" in text else text


def sizes_text(lo: int, hi: int) -> str:
    """`4 MiB`, or `16 MiB-128 MiB`."""
    return size_words(lo) if lo == hi else f"{size_words(lo)}-{size_words(hi)}"


def count_text(n: int) -> str:
    """A parameter count as models are named: 7e9, 1.5e12, 125000."""
    return re.sub(r"e\+?0*(\d+)", r"e\1", f"{n:.3g}")


def plateau_text(h: Headline) -> str:
    """The headline figure with its trust: `0.87 GB/s (0.84-0.9) at 16 MiB-128 MiB`, and what
    makes it less than a measurement of the link: noise, a plateau not reached."""
    span = "" if h.plateau_low == h.plateau_high else f" ({_digits(h.plateau_low)}-{_digits(h.plateau_high)})"
    text = f"{rate_text(h.plateau_busbw)}{span} at {sizes_text(h.plateau_from, h.plateau_to)}"
    if h.rising:
        text += ", still rising at the largest size (a floor)"
    if h.noisy:
        text += f", noisy: moved {h.spread:.0%} while measured"
    return text


def step_text(h: Headline, nnodes: int, nproc: int) -> str:
    """One training step's gradient all_reduce in DDP's buckets, and with --step-time what
    nnodes nodes make of it against one."""
    where = {"all": f"across {nnodes} node(s)" + (f" ({h.ranks} ranks)" if nproc > 1 else ""),
             "intra": f"inside a node ({h.ranks} ranks)",
             "inter": f"across {h.ranks} nodes, one rank each"}[h.stage]
    text = (f"a {count_text(h.model_params)}-parameter {h.grad_dtype} gradient ({h.gradient_bytes / 1e9:.3g} GB) "
            f"in {size_words(h.bucket_bytes)} buckets: {_digits(h.step_s)} s of all_reduce per step {where} "
            f"({rate_text(h.bucket_busbw)} at {size_words(h.bucket_bytes)})")
    if h.speedup_low is None:
        return text
    lo, hi = h.speedup_low, h.speedup_high
    verdict = (f"{nnodes} nodes would train {_digits(lo)}-{_digits(hi)}x faster than one" if lo >= 1 else
               f"{nnodes} nodes would train slower than one: talk less (no_sync accumulation, gradient "
               "compression, hybrid sharding) or fill one node first" if hi < 1 else
               f"{nnodes} nodes would train {_digits(lo)}-{_digits(hi)}x as fast as one: faster only where "
               "the job overlaps the all_reduce with its backward pass")
    return f"{text}; with a {_digits(h.step_time_s)} s step on one node, {verdict}"


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
        lines.append(f"# Plateau           : {plateau_text(head)} (the largest {BW_PLATEAU_TOP} sizes and those "
                     f"next to them within {BW_PLATEAU_BAND:.0%}: their median and range)")
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


def progress_bar(spent: float, budget: float, width: int = 20) -> str:
    """How much of the sweep's time budget is spent: `[######--------------] 3/10 s`."""
    filled = round(width * min(1.0, spent / budget)) if budget > 0 else width
    return f"[{'#' * filled}{'-' * (width - filled)}] {spent:.0f}/{budget:g} s"


def pair_matrix(pairs: tuple[Pair, ...], name: Callable[[int], str]) -> str:
    """busbw (GB/s each way) between every two nodes, as a symmetric matrix."""
    nodes = sorted({p.a for p in pairs} | {p.b for p in pairs})
    cell = {(p.a, p.b): gbps_cell(p.busbw) for p in pairs} | {(p.b, p.a): gbps_cell(p.busbw) for p in pairs}
    names = [name(n) for n in nodes]
    rows = [[names[i]] + [cell.get((a, b), "-") for b in nodes] for i, a in enumerate(nodes)]
    return tabulate(rows, headers=["GB/s"] + names, disable_numparse=True)


def render_text(result: BandwidthResult, pairs: bool = True) -> str:
    """Every table of the phase, for the text report; the node-pair matrix only with `pairs`
    (it has a row and a column per node)."""
    heads = {(h.stage, h.op): h for h in result.headlines}
    parts = [sweep_text(s, result, heads.get((s.stage, s.op))) for s in result.sweeps]
    by_stage = {(s.stage, s.op): s for s in result.sweeps}
    for op in dict.fromkeys(s.op for s in result.sweeps):
        if ("intra", op) in by_stage and ("inter", op) in by_stage:
            parts.append(side_by_side(by_stage["intra", op], by_stage["inter", op]))
    if result.pairs and pairs:
        parts.append(f"# node pairs, {size_words(result.pairs[0].size)} both ways at once:\n"
                     + pair_matrix(result.pairs, result.node_name))
    return "\n\n".join(parts)
