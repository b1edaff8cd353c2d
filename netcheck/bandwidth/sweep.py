"""The bandwidth sweep's pure half: its flags, sizes and budget, collectives, busbw maths,
check data, and the rows they make (the option and result records are core.bwrecords).

nccl-tests' meaning throughout: a size S is the larger of a rank's send and receive buffer,
time is per iteration averaged across ranks, algbw = S / time and busbw = algbw x the
collective's factor, so that busbw is comparable with the link's speed whatever the
collective and rank count. Nothing here starts a process or touches the network; torch is
never imported (the worker hands its `dist` module and tensors in), so the CLI can add the
flags before torch loads. The tables are drawn by bandwidth.tables.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from netcheck.core.bwrecords import Row, SweepOptions, still_rising
from netcheck.core.constants import (
    BW_AUTO_MAXBYTES,
    BW_BATCHES,
    BW_CHECK_CHUNK,
    BW_ITERS_SECONDS,
    BW_LATENCY_MAXBYTES,
    BW_LATENCY_STEP,
    BW_MIN_ITERS,
    BW_PAIRS_SHARE,
    BW_PATTERN_MAX,
    BW_RAMP_GROWTH,
    BW_RESERVE_MARGIN,
    BW_WARMUP_SECONDS,
)

if TYPE_CHECKING:   # torch is imported by the worker alone, at run time
    from torch import Tensor
    from torch.distributed import ProcessGroup

Values = Callable[["Tensor"], "Tensor"]   # a buffer's indices -> the values that belong there

# Element size and the largest integer the type holds exactly (floats: 2^mantissa bits),
# so data built from small integers has exactly one correct result.
DTYPES = {
    "float32": (4, 1 << 24), "float64": (8, 1 << 53), "float16": (2, 1 << 11),
    "bfloat16": (2, 1 << 8), "int32": (4, (1 << 31) - 1), "int64": (8, (1 << 63) - 1),
    "int8": (1, 127), "uint8": (1, 255),
}


# --- sizes and the time budget -------------------------------------------------------------

def size_series(minbytes: int, maxbytes: int, stepfactor: int) -> list[int]:
    """-b, -b*f, -b*f^2, ... up to -e, as nccl-tests steps."""
    sizes, size = [], minbytes
    while size <= maxbytes:
        sizes.append(size)
        size *= stepfactor
    return sizes


@dataclass
class Budget:
    """Which sizes of a sweep run: each, smallest first, while its step fits what is left.

    Two clocks: `seconds` of collective time (the warm-up and timed iterations, what
    --bw-budget counts; group set-up and checks are not the network's), and `wall` seconds
    of the whole step, checks and gathers included, so the sweep also ends inside the phase.
    A step's cost is extrapolated linearly from the previous size's: time grows at most in
    proportion to the bytes (less while latency dominates), so this errs on the safe side
    and a slow link ends the sweep early instead of hanging it. The first size always runs.
    Every rank feeds it the same numbers, so every rank takes the same decisions.
    """

    seconds: float
    wall: float
    spent: float = 0.0
    walled: float = 0.0
    last_size: int = 0
    last_op: float = 0.0       # seconds per iteration at last_size
    last_wall: float = 0.0     # the whole step at last_size
    prev_size: int = 0         # the size measured before last_size, and its time per iteration
    prev_op: float = 0.0

    def op_seconds(self, size: int) -> float:
        """A size's predicted time per iteration (0: nothing measured yet): the last size's,
        scaled by the bytes, which never underestimates (admits' safe side)."""
        return self.last_op * size / self.last_size if self.last_size else 0.0

    def likely_op_seconds(self, size: int) -> float:
        """A larger size's likely time per iteration, for what to keep in reserve: a latency
        plus a time per byte through the last two sizes measured, where they show one. Scaling
        a latency-bound size's time by the bytes (4 ms for 512 bytes: minutes for 128 MiB)
        made the top look out of reach until too late to keep room for it (RESULTS.md)."""
        linear = self.op_seconds(size)
        if not self.prev_size or self.last_op <= self.prev_op:
            return linear
        per_byte = (self.last_op - self.prev_op) / (self.last_size - self.prev_size)
        return min(linear, self.last_op + per_byte * (size - self.last_size))

    def on_the_ramp(self, size: int) -> bool:
        """Whether `size` is past the latency figure's sizes while the last step still took
        about the same time per op as the one before: latency-bound, far below the plateau."""
        return (size > BW_LATENCY_MAXBYTES and self.prev_size > 0
                and self.last_op < BW_RAMP_GROWTH * self.prev_op)

    def admits(self, size: int, iters: int, warmup: int) -> bool:
        if not self.last_size:
            return True
        scale = size / self.last_size
        return (self.spent + self.op_seconds(size) * (warmup + iters) <= self.seconds
                and self.walled + self.last_wall * scale <= self.wall)

    def room_below(self, above: list[int]) -> float | None:
        """Seconds a size may take that still likely leave every size above it its fewest
        iterations (one warm-up and BW_MIN_ITERS), with BW_RESERVE_MARGIN for a size that reads
        slow (0 where only the margin is short); None where even those do not fit."""
        least = sum(self.likely_op_seconds(size) for size in above) * (1 + BW_MIN_ITERS)
        left = self.seconds - self.spent
        return None if left < least else max(0.0, left - least * BW_RESERVE_MARGIN)

    def spend(self, size: int, op_seconds: float, iters: int, warmup: int, wall: float) -> None:
        self.spent += op_seconds * (warmup + iters)
        self.walled += wall
        self.prev_size, self.prev_op = self.last_size, self.last_op
        self.last_size, self.last_op, self.last_wall = size, op_seconds, wall


def iterations(options: SweepOptions, op_seconds: float) -> int:
    """Timed iterations for a size whose iteration should take op_seconds: -n where given;
    else -n's default, cut to about BW_ITERS_SECONDS of them but never below BW_MIN_ITERS."""
    if not options.iters_by_time or op_seconds <= 0:
        return options.iters
    return max(BW_MIN_ITERS, min(options.iters, int(BW_ITERS_SECONDS / op_seconds)))


def warmups(options: SweepOptions, op_seconds: float) -> int:
    """Untimed iterations before a size whose iteration should take op_seconds: -w where given;
    else -w's default, cut to about BW_WARMUP_SECONDS of them but at least one (a size's first
    iteration sets its buffers and connections up; at 128 MiB four more cost the budget a size)."""
    if not options.warmup_by_time or op_seconds <= 0:
        return options.warmup_iters
    return max(1, min(options.warmup_iters, int(BW_WARMUP_SECONDS / op_seconds)))


def ramp_counts(options: SweepOptions, counts: tuple[int, int]) -> tuple[int, int]:
    """A ramp size's (timed, warm-up) iterations: the fewest, where chosen by time. On a
    0.7 GB/s link at 3 ms an op the ramp's 25 iterations a size took about 0.4 s of the
    sweep's 4.8, the room 128 MiB lacked (benchmarks/RESULTS.md)."""
    iters, warmup = counts
    return (BW_MIN_ITERS if options.iters_by_time else iters, 1 if options.warmup_by_time else warmup)


def counts_leaving_room(options: SweepOptions, op_seconds: float, counts: tuple[int, int],
                        room: float | None) -> tuple[int, int]:
    """A size's (timed, warm-up) iterations, the ones chosen by time cut to fit `room`, so the
    largest sizes, where the plateau and so the headline are, keep theirs: on a 0.7 GB/s
    link the mid sizes' half-seconds left 64 MiB the last size the budget reached, never the
    128 MiB the plateau needs (benchmarks/RESULTS.md). Never below one warm-up and
    BW_MIN_ITERS; untouched where the top cannot be reached even so (room None: a slow link's
    sweep ends below it whatever the mid sizes take, and they keep their trust)."""
    iters, warmup = counts
    if op_seconds <= 0 or room is None or (iters + warmup) * op_seconds <= room:
        return counts
    # Timed iterations go first: a size's first few iterations after a smaller one read slow
    # (benchmarks/RESULTS.md), so it keeps its warm-ups while fewer timed ones fit.
    fitting = int(room / op_seconds)
    if options.iters_by_time:
        iters = max(BW_MIN_ITERS, min(iters, fitting - warmup))
    if options.warmup_by_time:
        warmup = max(1, min(warmup, fitting - iters))
    return iters, warmup


def planned_sizes(options: SweepOptions) -> list[int]:
    """-b, -b*f, ... up to -e; without -b and -f, the latency-bound sizes below
    BW_LATENCY_MAXBYTES step by BW_LATENCY_STEP instead (each costs about the same time
    there: fewer of them leave the budget to the sizes that find the plateau)."""
    o = options
    if not o.few_small_sizes or o.maxbytes <= BW_LATENCY_MAXBYTES:
        return size_series(o.minbytes, o.maxbytes, o.stepfactor)
    small = size_series(o.minbytes, BW_LATENCY_MAXBYTES - 1, BW_LATENCY_STEP)
    return small + size_series(BW_LATENCY_MAXBYTES, o.maxbytes, o.stepfactor)


def sizes_past_maxbytes(options: SweepOptions, top: int) -> Iterator[int]:
    """Without -e, the sizes after maxbytes (times -f each) up to top; the sweep takes them
    only while busbw still rises and the budget admits them."""
    if not options.past_maxbytes:
        return
    size = planned_sizes(options)[-1] * options.stepfactor
    while size <= min(top, BW_AUTO_MAXBYTES):
        yield size
        size *= options.stepfactor


@dataclass(frozen=True)
class Measured:
    """One size, measured on every rank."""

    row: Row
    op_seconds: float   # the slowest rank's time per iteration: everyone waited for it
    wall: float         # the slowest rank's whole step, check included


def run_sizes(options: SweepOptions, smallest: int, top: int, budget: Budget,
              measure: Callable[[int, int, int], Measured], skip: Callable[[int], None]) -> None:
    """Drive one sweep: each planned size from `smallest` (the first that gives every
    rank an element) that the budget admits, the others skipped; then, without -e, larger
    sizes up to `top` while busbw still rises and the budget admits them. measure(size,
    iters, warmup) runs one size on every rank."""
    rows: list[Row] = []

    def admitted(size: int, above: list[int]) -> tuple[int, int]:
        """The size's timed and warm-up iterations, or (0, 0) where the budget has no room for it."""
        predicted = budget.op_seconds(size)
        counts = iterations(options, predicted), warmups(options, predicted)
        if budget.on_the_ramp(size):
            counts = ramp_counts(options, counts)
        iters, warmup = counts_leaving_room(options, predicted, counts, budget.room_below(above))
        return (iters, warmup) if budget.admits(size, iters, warmup) else (0, 0)

    def run(size: int, iters: int, warmup: int) -> None:
        done = measure(size, iters, warmup)
        budget.spend(size, done.op_seconds, iters, warmup, done.wall)
        rows.append(done.row)

    planned = [size for size in planned_sizes(options) if size >= smallest]
    for k, size in enumerate(planned):
        iters, warmup = admitted(size, planned[k + 1:])
        run(size, iters, warmup) if iters else skip(size)
    for size in sizes_past_maxbytes(options, top):
        iters, warmup = admitted(size, [])
        if not iters or not still_rising(tuple(rows)):
            return
        run(size, iters, warmup)


def stage_budgets(budget: float, sweeps: int, with_pairs: bool) -> tuple[float, float]:
    """(per sweep of one stage and op, for all pair rounds): the pairs BW_PAIRS_SHARE of the
    budget, the sweeps equal shares of the rest. The pairs exchange one size, chosen to fit
    their share; the sweeps need the room to reach their plateau (an equal share left the
    all-rank sweep at 16-32 MiB of a plateau at 64-256 MiB while the pairs used a third of
    theirs: benchmarks/RESULTS.md)."""
    pairs = budget * BW_PAIRS_SHARE if with_pairs else 0.0
    return (budget - pairs) / max(1, sweeps), pairs


def pair_size(sizes: list[int], rate_bytes_s: float, round_budget: float, runs: int) -> int:
    """The largest size of the series whose exchange fits one round's share of the budget."""
    fitting = [s for s in sizes if runs * s / max(rate_bytes_s, 1.0) <= round_budget]
    return fitting[-1] if fitting else sizes[0]


def plan_stages(nnodes: int, nproc: int) -> tuple[str, ...]:
    """Sweeps to run: all ranks; with several ranks on several nodes, intra and inter apart."""
    split = ("intra", "inter") if nnodes > 1 and nproc > 1 else ()
    return ("all",) + split


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of n nodes exactly once, in rounds where no node is in two pairs.

    The circle method: node 0 stays, the others rotate. n - 1 rounds for even n; odd n
    gets a bye (a phantom node), so n rounds each with one node resting.
    """
    seats: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(len(seats) - 1):
        half = len(seats) // 2
        pairs = [(a, b) for a, b in zip(seats[:half], reversed(seats[half:])) if a is not None and b is not None]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs])
        seats = [seats[0], seats[-1]] + seats[1:-1]
    return [r for r in rounds if r]  # one node alone has no pairs at all


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


