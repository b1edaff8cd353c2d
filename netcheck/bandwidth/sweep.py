"""The bandwidth sweep's pure half: its collectives, busbw maths, check data, and the rows they
make (the sizes it runs and its time budget are bandwidth.sizes'; the option and result
records are core.bwrecords).

nccl-tests' meaning throughout: a size S is the larger of a rank's send and receive buffer,
time is per iteration averaged across ranks, algbw = S / time and busbw = algbw x the
collective's factor, so that busbw is comparable with the link's speed whatever the
collective and rank count. Nothing here starts a process or touches the network; torch is
never imported (the worker hands its `dist` module and tensors in), so the CLI can add the
flags before torch loads. The tables are drawn by render.tables.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from netcheck.core.bwrecords import Row

if TYPE_CHECKING:   # torch is imported by the worker alone, at run time
    from torch import Tensor
    from torch.distributed import ProcessGroup

# Timed iterations are split into this many batches, each timed as a whole: a size's time is
# the median batch's (one slow moment moves one batch, not the figure), its spread the range
# of the batches over their median.
BW_BATCHES = 5
BW_PATTERN_MAX = 1 << 20     # check data values stay below this (sums exact in float32), so they repeat
                             # at least every 2^20 elements and a period's values are computed once
BW_CHECK_CHUNK = 1 << 20     # elements filled and checked at a time, so checking needs little memory

Values = Callable[["Tensor"], "Tensor"]   # a buffer's indices -> the values that belong there

# Element size and the largest integer the type holds exactly (floats: 2^mantissa bits),
# so data built from small integers has exactly one correct result.
DTYPES = {
    "float32": (4, 1 << 24), "float64": (8, 1 << 53), "float16": (2, 1 << 11),
    "bfloat16": (2, 1 << 8), "int32": (4, (1 << 31) - 1), "int64": (8, (1 << 63) - 1),
    "int8": (1, 127), "uint8": (1, 255),
}


# --- data whose correct result is exactly known ----------------------------------------------
#
# Every value is a small non-negative integer, (global position + rank) mod m, so each
# element of every rank's result has exactly one correct value, and a sum of n ranks' values
# stays below the type's exact range (m is chosen for that). The formulas take an index
# tensor (or a plain int, for the tests) and use only + // % * and comparisons.

def modulus(dtype: str, n: int, reduces: bool) -> int:
    """Values run 0..m-1; for a sum of n ranks, n*(m-1) stays exact in the type."""
    exact = min(DTYPES[dtype][1], BW_PATTERN_MAX)
    return max(1, exact // n if reduces else exact)


def ring_sum(x: Tensor, n: int, m: int) -> Tensor:
    """sum over r < n of (x + r) % m, in closed form (x >= 0).

    Whole cycles of m contribute m(m-1)/2 each; the rest is rem terms from y = x % m up,
    minus m for each that wrapped past m (at most one wrap per term, as rem < m).
    """
    cycles, rem = divmod(n, m)
    y = x % m
    over = y + rem - m
    return cycles * (m * (m - 1) // 2) + rem * y + rem * (rem - 1) // 2 - m * over * (over > 0)


def pattern_pieces(numel: int, period: int, piece: int) -> Iterator[tuple[int, int, range]]:
    """(lo, hi, starts): the pattern's first period cut into pieces of at most `piece`
    elements, each with every offset it repeats at in a buffer of `numel`. Values that
    repeat every `period` elements are computed once a period, then copied or compared
    (index arithmetic costs 20 times a comparison: at 64 MiB a second against 50 ms)."""
    period = max(1, min(period, numel))
    for lo in range(0, period, piece):
        hi = min(period, lo + piece)
        yield lo, hi, range(lo, numel, period)


def count_wrong(result: Tensor, expected: Tensor) -> int:
    """Elements of result that differ from expected (NaN never equals: it counts as wrong)."""
    return int((result != expected).sum())


@dataclass(frozen=True)
class Peers:
    """Global ranks a rank works with inside its group."""

    root: int   # the group's first rank: broadcast's source
    next: int   # sendrecv: where this rank sends
    prev: int   # sendrecv: where this rank receives from


def _first_of(dist: ModuleType, *names: str) -> Callable[..., object]:
    # torch renamed *_into_tensor to *_single (2.10); the old names warn but still work.
    return next(getattr(dist, n) for n in names if hasattr(dist, n))


def _sendrecv(dist: ModuleType, inp: Tensor, out: Tensor, group: ProcessGroup | None, peers: Peers) -> None:
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, peers.next, group),
                                    dist.P2POp(dist.irecv, out, peers.prev, group)])
    for work in works:
        work.wait()


@dataclass(frozen=True)
class Collective:
    """One collective, nccl-tests style: its maths, its data and its call. The timing,
    warm-up, barriers and checking live once, in the worker's harness."""

    name: str
    factor: Callable[[int], float]   # busbw = algbw * factor(ranks)
    reduces: bool                    # a sum: the redop column, and values must stay exact
    inplace: bool                    # torch's call writes the result over its input (one buffer)
    scaled: tuple[bool, bool]        # (input, output) hold one chunk per rank, not one chunk
    inputs: Callable                 # (index, rank, n, chunk, m) -> this rank's input values
    expected: Callable               # (index, rank, n, chunk, m) -> this rank's correct output
    run: Callable                    # (dist, inp, out, group, peers) -> None
    min_ranks: int = 1
    periodic: bool = True            # expected depends on the index modulo m alone (inputs always do)

    def elements(self, chunk: int, n: int) -> tuple[int, int]:
        inp, out = self.scaled
        return (chunk * n if inp else chunk), (chunk * n if out else chunk)

    def chunk(self, size: int, dtype: str, n: int) -> int:
        """The count the API takes (nccl-tests' count column) for a size in bytes."""
        return size // self.smallest(dtype, n)

    def smallest(self, dtype: str, n: int) -> int:
        """The smallest size that gives every rank an element."""
        return DTYPES[dtype][0] * (n if any(self.scaled) else 1)

    def bytes(self, chunk: int, dtype: str, n: int) -> int:
        """nccl-tests' size: the larger of the send and the receive buffer."""
        return max(self.elements(chunk, n)) * DTYPES[dtype][0]


def _ring_factor(n: int) -> float:
    return 2 * (n - 1) / n


def _spread_factor(n: int) -> float:
    return (n - 1) / n


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("all_reduce", _ring_factor, True, True, (False, False),
               inputs=lambda i, r, n, c, m: (i + r) % m,
               expected=lambda i, r, n, c, m: ring_sum(i, n, m),
               run=lambda dist, inp, out, group, peers: dist.all_reduce(out, group=group)),
    Collective("all_gather", _spread_factor, False, False, (False, True),
               inputs=lambda i, r, n, c, m: (r * c + i + r) % m,
               expected=lambda i, r, n, c, m: (i + i // c) % m,
               run=lambda dist, inp, out, group, peers: _first_of(
                   dist, "all_gather_single", "all_gather_into_tensor")(out, inp, group=group),
               periodic=False),
    Collective("reduce_scatter", _spread_factor, True, False, (True, False),
               inputs=lambda i, r, n, c, m: (i + r) % m,
               expected=lambda i, r, n, c, m: ring_sum(r * c + i, n, m),
               run=lambda dist, inp, out, group, peers: _first_of(
                   dist, "reduce_scatter_single", "reduce_scatter_tensor")(out, inp, group=group)),
    Collective("alltoall", _spread_factor, False, False, (True, True),
               inputs=lambda i, r, n, c, m: (i + r) % m,
               expected=lambda i, r, n, c, m: (r * c + i % c + i // c) % m,
               run=lambda dist, inp, out, group, peers: dist.all_to_all_single(out, inp, group=group),
               periodic=False),
    Collective("broadcast", lambda n: 1.0, False, True, (False, False),
               inputs=lambda i, r, n, c, m: (i + r) % m,
               expected=lambda i, r, n, c, m: i % m,
               run=lambda dist, inp, out, group, peers: dist.broadcast(out, peers.root, group=group)),
    Collective("sendrecv", lambda n: 1.0, False, False, (False, False),
               inputs=lambda i, r, n, c, m: (i + r) % m,
               expected=lambda i, r, n, c, m: (i + (r - 1) % n) % m,
               run=_sendrecv, min_ranks=2),
)}


def bandwidths(coll: Collective, chunk: int, dtype: str, n: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one iteration of `seconds`: algbw = S / t, busbw = algbw x factor."""
    algbw = coll.bytes(chunk, dtype, n) / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, algbw * coll.factor(n)


# Why a rank cannot run NCCL, as the control stage gathers it (a number: the gather is of floats).
NO_CUDA, NO_NCCL, PAST_VISIBLE = 1, 2, 3
CUDA_TROUBLES = {NO_CUDA: "no CUDA", NO_NCCL: "torch without NCCL", PAST_VISIBLE: "local rank beyond the visible GPUs"}


def choose_backend(requested: str, troubles: list[int], nproc: int) -> tuple[str, str]:
    """The data backend every rank will use, and why; troubles[r]: 0 where rank r can run
    NCCL, else why not (CUDA_TROUBLES).

    Decided from every rank's answer at once, so all ranks pick the same. ValueError when
    nccl was asked for and some rank cannot run it.
    """
    if requested == "gloo":
        return "gloo", "--backend gloo"
    if not any(troubles):
        return "nccl", "--backend nccl" if requested == "nccl" else "CUDA on every rank: using nccl"
    why = "; ".join(f"{CUDA_TROUBLES[t]} on {_where([r for r, u in enumerate(troubles) if u == t], nproc)}"
                    for t in sorted(set(troubles) - {0}))
    if requested == "nccl":
        raise ValueError(f"--backend nccl, but {why}")
    if all(t == NO_CUDA for t in troubles):
        return "gloo", "no CUDA: using gloo"
    return "gloo", f"{why}: using gloo"


def _where(ranks: list[int], nproc: int) -> str:
    return ", ".join(f"node {n} (rank {', '.join(str(r) for r in ranks if r // nproc == n)})"
                     for n in dict.fromkeys(r // nproc for r in ranks))


def fill(torch: ModuleType, tensor: Tensor, values: Values, period: int) -> None:
    """TENSOR[i] = values(i), for values that repeat every `period` elements."""
    for view, piece in aligned_pieces(torch, tensor, values, period):
        view.copy_(piece)


def wrong(torch: ModuleType, tensor: Tensor, values: Values, period: int) -> int:
    """Elements of TENSOR that differ from values(i), for values that repeat every `period`."""
    return sum(count_wrong(view, piece) for view, piece in aligned_pieces(torch, tensor, values, period))


def aligned_pieces(torch: ModuleType, tensor: Tensor, values: Values,
                   period: int) -> Iterator[tuple[Tensor, Tensor]]:
    """(a slice of TENSOR, the values that belong there) over the whole tensor; values are
    computed a piece of one period at a time, so checking a 128 MiB buffer needs little memory."""
    numel = tensor.numel()
    for lo, hi, starts in pattern_pieces(numel, period, BW_CHECK_CHUNK):
        piece = values(torch.arange(lo, hi, device=tensor.device)).to(tensor.dtype)
        for start in starts:
            end = min(start + hi - lo, numel)
            yield tensor[start:end], piece[:end - start]



# --- results ----------------------------------------------------------------------------------


def batch_times(times: list[float]) -> list[float]:
    """Seconds per iteration of each of BW_BATCHES batches of consecutive iterations (fewer
    where there are fewer iterations): a slow moment moves the batch it fell in, and the
    median batch stays the link's."""
    batches = min(BW_BATCHES, len(times))
    bounds = [len(times) * k // batches for k in range(batches + 1)]
    return [statistics.fmean(times[a:b]) for a, b in zip(bounds, bounds[1:])]


def make_row(coll: Collective, chunk: int, dtype: str, n: int, times_s: list[float],
             wrongs: list[int], checked: bool, ranks: list[int], iters: int = 0,
             spreads_s: Sequence[float] = (), batch_spreads: Sequence[float] = ()) -> Row:
    """A table row from every member rank's own time and wrong count (nccl-tests' average)."""
    seconds = statistics.fmean(times_s)
    algbw, busbw = bandwidths(coll, chunk, dtype, n, seconds)
    wrong_ranks = tuple(r for r, w in zip(ranks, wrongs) if w > 0) if checked else ()
    return Row(coll.bytes(chunk, dtype, n), chunk, dtype, "sum" if coll.reduces else "none",
               round(seconds * 1e6, 3), round(algbw, 6), round(busbw, 6),
               sum(wrongs) if checked else None, wrong_ranks, iters,
               round(max(spreads_s, default=0.0) * 1e6, 3), round(max(batch_spreads, default=0.0), 4))


