"""The sizes a sweep runs and the time it may take: nccl-tests' size series (-b, -e, -f), the
iterations and warm-ups a size gets within --bw-budget, the sizes past -e while busbw still rises,
the stages planned and the node pairs' rounds. Pure: numbers in, numbers out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from netcheck.core.bwrecords import Row, SweepOptions, still_rising
from netcheck.core.constants import BW_LATENCY_MAXBYTES, BW_LATENCY_STEP

# Without -e the sweep goes on past BW_DEFAULT_MAXBYTES while busbw still rises (NCCL's keeps
# rising past 1 GB on 2-node H200 RoCE fabrics; validation guides run nccl-tests with -e 8G),
# up to this, the budget and a share of the memory allow.
BW_AUTO_MAXBYTES = 8 << 30
# Without -n the timed iterations of a size are bounded by time too: about this many seconds
# of them, never fewer than BW_MIN_ITERS (enough for a stable mean) nor more than -n's default.
BW_ITERS_SECONDS = 0.5
BW_MIN_ITERS = 5
# Past the latency figure's sizes, a size whose predecessor took under this much longer per op
# than the size before it (the bytes grew by -f) is on the latency-bound ramp: its busbw is
# about half the plateau's or less (an affine link), so it cannot be in the headline, and it
# runs its fewest iterations; the time goes to the top sizes the headline is from.
BW_RAMP_GROWTH = 1.25
# The room kept for the sizes above one being planned: their likely cost times this. A busy
# machine's 64 MiB read 30% slow against its 32 and 128 MiB, and the linear bound on 128 MiB
# (twice 64 MiB's time) then no longer fit what was kept (benchmarks/RESULTS.md, issue 33).
BW_RESERVE_MARGIN = 1.3
BW_WARMUP_SECONDS = 0.2      # without -w, warm-up iterations are bounded by time too (at least one)
BW_PAIRS_SHARE = 0.2         # of --bw-budget, the node-pair rounds' (the sweeps share the rest)


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
