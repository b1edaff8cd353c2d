"""A bandwidth figure in words, for every reader of one (the rules, the renderers, the sweep's
progress line): sizes in binary units, rates and times in their own unit with three
significant digits, the plateau with its trust, one training step's cost, and the sweep's
progress bar. Pure text, in core because the rules say their findings in it: no table is
drawn here (render.tables draws them, with their GB/s cells).

    >>> size_words(4 << 20), rate_text(6e-06), time_text(3450)
    ('4 MiB', '6 KB/s', '3.45 ms')
"""

from __future__ import annotations

import re

from netcheck.core.bwrecords import Headline

# Below this many GB/s a rate in a sentence is said in its own unit (MB/s, KB/s, B/s):
# 6e-06 GB/s is no number a person reads, 6 KB/s is. The table's GB/s columns stay numbers.
GBPS_FLOOR = 0.01
SMALL_UNITS = (("MB/s", 1e3), ("KB/s", 1e6), ("B/s", 1e9))


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
    params, gradient, bucket, step, bucket_busbw = h.model_params, h.gradient_bytes, h.bucket_bytes, h.step_s, \
        h.bucket_busbw
    # bwrecords.headline sets them together (--model-params); asked only of a headline with step_s.
    if params is None or gradient is None or bucket is None or step is None or bucket_busbw is None:
        raise ValueError(f"a {h.stage} {h.op} headline without a training step's cost")
    text = (f"a {count_text(params)}-parameter {h.grad_dtype} gradient ({gradient / 1e9:.3g} GB) "
            f"in {size_words(bucket)} buckets: {_digits(step)} s of all_reduce per step {where} "
            f"({rate_text(bucket_busbw)} at {size_words(bucket)})")
    lo, hi = h.speedup_low, h.speedup_high
    if lo is None or hi is None or h.step_time_s is None:   # set together, with --step-time
        return text
    verdict = (f"{nnodes} nodes would train {_digits(lo)}-{_digits(hi)}x faster than one" if lo >= 1 else
               f"{nnodes} nodes would train slower than one: talk less (no_sync accumulation, gradient "
               "compression, hybrid sharding) or fill one node first" if hi < 1 else
               f"{nnodes} nodes would train {_digits(lo)}-{_digits(hi)}x as fast as one: faster only where "
               "the job overlaps the all_reduce with its backward pass")
    return f"{text}; with a {_digits(h.step_time_s)} s step on one node, {verdict}"


def size_words(n: int) -> str:
    """A size in a sentence, in binary units: `4 MiB`, `64 KiB`, `1.5 GiB`, `1000 bytes` (a message, a file,
    /dev/shm)."""
    for suffix, unit in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= unit:
            return f"{n / unit:.1f}".removesuffix(".0") + f" {suffix}"
    return f"{n} bytes"


def progress_bar(spent: float, budget: float, width: int = 20) -> str:
    """How much of the sweep's time budget is spent: `[######--------------] 3/10 s`."""
    filled = round(width * min(1.0, spent / budget)) if budget > 0 else width
    return f"[{'#' * filled}{'-' * (width - filled)}] {spent:.0f}/{budget:g} s"
