"""The bandwidth phase's records: its options and its results, with the small reads every
reader of them needs (average and peak busbw, whom to blame)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Annotated

from netcheck.core.constants import (
    BW_DEFAULT_BUDGET, BW_DEFAULT_ITERS, BW_LATENCY_MAXBYTES, BW_PLATEAU_BAND, BW_DEFAULT_MAXBYTES, BW_DEFAULT_MINBYTES,
    BW_DEFAULT_STEPFACTOR, BW_DEFAULT_WARMUP,
)
from netcheck.core.fields import (
    MAX_INT, PER_NODE, PER_PAIR, PER_RANK, Bytes, Count, Gbps, GroupSize, Hostname,
    LocalRankOrMinusOne, MessageSize, Micros, NodeCount, NodeRank, ProcCount, Range, Rank,
    RankOrMinusOne, Seconds, Text, one_of,
)


# The stages of the phase, in order: a failure names one of these.
STAGES = ("start", "control", "data", "all", "intra", "inter", "pairs")
STAGE_TITLES = {"all": "all ranks", "intra": "inside each node", "inter": "one rank per node"}
Stage = Annotated[str, one_of(*STAGES)]
Ranks = Annotated[tuple[Rank, ...], PER_RANK]
StepFactor = Annotated[int, Range(2, MAX_INT, "a step factor")]
Iterations = Annotated[int, Range(1, MAX_INT, "an iteration count")]


@dataclass(frozen=True)
class SweepOptions:
    """The bandwidth phase's settings; flags named as nccl-tests names them."""

    minbytes: MessageSize = BW_DEFAULT_MINBYTES   # -b: smallest size, bytes
    maxbytes: MessageSize = BW_DEFAULT_MAXBYTES   # -e: largest size, bytes (the budget may stop earlier)
    stepfactor: StepFactor = BW_DEFAULT_STEPFACTOR  # -f: each size is the previous one times this
    warmup_iters: Count = BW_DEFAULT_WARMUP  # -w: untimed iterations before each size
    iters: Iterations = BW_DEFAULT_ITERS     # -n: timed iterations per size
    check: bool = True                       # -c: verify every result and count wrong elements
    op: tuple[str, ...] = ("all_reduce",)    # --op: collectives to sweep, in order
    dtype: str = "float32"                   # --dtype
    backend: str = "auto"                    # --backend: auto = nccl where CUDA is, else gloo
    expect_busbw: Gbps | None = None         # --expect-busbw: GB/s the all-rank plateau must reach
    budget_s: Seconds = BW_DEFAULT_BUDGET    # --bw-budget: seconds all sweeps may take together
    past_maxbytes: bool = True               # no -e: go on past maxbytes while busbw still rises
    few_small_sizes: bool = True             # no -b, -f: sizes up to 64K step by BW_LATENCY_STEP
    iters_by_time: bool = True               # no -n: fewer timed iterations where one takes long
    model_params: Annotated[int, Range(1, MAX_INT, "a parameter count")] | None = None  # --model-params
    grad_dtype: str = "bfloat16"             # --grad-dtype: the gradient's element type


@dataclass(frozen=True)
class Row:
    """One line of the table, for one size: nccl-tests' columns."""

    size: Bytes
    count: Count                    # elements, as the API counts them
    dtype: str
    redop: str                      # "sum" | "none"
    time_us: Micros                 # per iteration, averaged across the ranks
    algbw: Gbps                     # GB/s (1e9 bytes)
    busbw: Gbps
    wrong: Count | None             # corrupted elements over all ranks; None: not checked (-c 0)
    wrong_ranks: Ranks = ()
    iters: Count = 0                # timed iterations (fewer than -n where one took long)
    spread_us: Micros = 0.0         # the largest standard deviation of one rank's iterations


@dataclass(frozen=True)
class RankTime:
    rank: Rank
    node: NodeRank
    time_us: Micros


@dataclass(frozen=True)
class Sweep:
    """One collective swept over the sizes in one stage."""

    stage: Annotated[str, one_of(*STAGE_TITLES)]
    op: str
    ranks: GroupSize                # ranks per group: the n of the busbw factor
    groups: GroupSize               # groups measured at once (intra: one per node)
    rows: tuple[Row, ...] = ()
    skipped: tuple[Bytes, ...] = ()   # sizes left out to stay inside --bw-budget
    rank_times: Annotated[tuple[RankTime, ...], PER_RANK] = ()  # each rank's own time at the largest size
    # intra: node rank -> busbw
    node_busbw: Annotated[dict[str, Gbps], PER_NODE] = field(default_factory=dict)
    note: Text = ""                 # why there are no rows, when there are none


@dataclass(frozen=True)
class Pair:
    """Two nodes exchanging `size` bytes both ways at once (one rank each)."""

    a: NodeRank
    b: NodeRank
    size: Bytes
    time_us: Micros
    busbw: Gbps                     # GB/s each way


@dataclass(frozen=True)
class InFlight:
    """What a worker was in when it stopped, as far as its reports tell."""

    op: str                         # a collective ("all_reduce", ...), "sendrecv" (node pairs), or
                                    # "new_group" (setting up the stage's process group)
    size: Bytes                     # 0: not known
    ranks: Ranks                    # the ranks of its group: every one of them had to take part


@dataclass(frozen=True)
class Fault:
    """A worker that did not finish well."""

    node: NodeRank
    rank: RankOrMinusOne            # -1: the whole node (its netcheck never reported)
    local_rank: LocalRankOrMinusOne
    stage: Stage
    kind: Annotated[str, one_of(*FAULT_KINDS)]
    detail: Text
    in_flight: InFlight | None = None   # None: not in a sweep's collective, or not known


@dataclass(frozen=True)
class Headline:
    """What a sweep says in two figures: its plateau and its small-message latency, and what
    one gradient all_reduce would cost per training step at that plateau."""

    stage: str
    op: str
    ranks: GroupSize
    plateau_busbw: Gbps             # the mean busbw of the sizes within BW_PLATEAU_BAND of the peak
    plateau_from: Bytes             # the smallest and largest of those sizes
    plateau_to: Bytes
    latency_from_us: Micros | None  # time per op at the smallest and the largest size up to
    latency_to_us: Micros | None    # BW_LATENCY_MAXBYTES (None: none measured)
    latency_sizes: tuple[Bytes, ...] = ()   # those two sizes
    model_params: Annotated[int, Range(1, MAX_INT, "a parameter count")] | None = None  # --model-params
    grad_dtype: str = ""            # --grad-dtype
    gradient_bytes: Bytes | None = None     # --model-params x the gradient's element size
    step_s: Seconds | None = None   # that gradient's all_reduce at the plateau: 2S(n-1)/n / busbw


@dataclass(frozen=True)
class BandwidthResult:
    """What the bandwidth phase measured, cluster-wide, and where it stopped if it did."""

    backend: str                    # "nccl" | "gloo" | "" (stopped before choosing)
    backend_reason: Text            # e.g. "no CUDA: using gloo"
    nnodes: NodeCount
    nproc_per_node: ProcCount
    sweeps: tuple[Sweep, ...]
    pairs: Annotated[tuple[Pair, ...], PER_PAIR]
    failed_stage: Stage | None      # None when every stage finished
    failure: Text                   # why, in one line ("" when none)
    faults: Annotated[tuple[Fault, ...], PER_RANK]   # every node's workers that died, hung or failed
    seconds: Seconds
    # node (as in pairs, faults) -> hostname
    hostnames: Annotated[dict[str, Hostname], PER_NODE] = field(default_factory=dict)
    headlines: tuple[Headline, ...] = ()   # one per sweep with rows, in the sweeps' order

    def node_name(self, node: int) -> str:
        return self.hostnames.get(str(node), f"node {node}")


# Whom to blame, in order: a dead or hung rank (the others failed because of it), then a
# node that never reported or was stopped (its ranks went with it: the others' reads from
# them failed), then a rank that failed, then ranks that ran out of time.
BLAME_ORDER = (("died", "stuck"), ("silent", "stopped"), ("failed",), ("timeout",))
FAULT_KINDS = tuple(kind for kinds in BLAME_ORDER for kind in kinds)


# Kinds that mean the node's netcheck itself is gone: it is named lost in the phase.
NODE_GONE = ("silent", "stopped")


def culprits(faults) -> list[Fault]:
    return next(([f for f in faults if f.kind in kinds] for kinds in BLAME_ORDER
                 if any(f.kind in kinds for f in faults)), [])


def first_culprit(faults) -> Fault | None:
    """The culprit of the earliest stage (ties: lowest node, then rank)."""
    return min(culprits(faults), key=lambda f: (STAGES.index(f.stage), f.node, f.rank), default=None)


def avg_busbw(sweep: Sweep) -> float:
    """nccl-tests' closing line: the mean busbw over the sizes measured."""
    return statistics.fmean(r.busbw for r in sweep.rows) if sweep.rows else 0.0


def peak_busbw(sweep: Sweep) -> float:
    return max((r.busbw for r in sweep.rows), default=0.0)


def plateau_rows(rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """The rows within BW_PLATEAU_BAND of the peak busbw: where adding bytes adds no speed."""
    peak = max((r.busbw for r in rows), default=0.0)
    return tuple(r for r in rows if r.busbw >= (1 - BW_PLATEAU_BAND) * peak)


def still_rising(rows: tuple[Row, ...]) -> bool:
    """Whether the last size set a new high by more than BW_PLATEAU_BAND: the plateau is
    further up."""
    if len(rows) < 2:
        return True
    return rows[-1].busbw > (1 + BW_PLATEAU_BAND) * max(r.busbw for r in rows[:-1])


def headline(sweep: Sweep, options: SweepOptions, bytes_per_param: int) -> Headline | None:
    """The sweep's two figures (None: no rows); with --model-params, an all_reduce sweep also
    gives the time of one gradient all_reduce per step at its plateau."""
    if not sweep.rows:
        return None
    top = plateau_rows(sweep.rows)
    plateau = statistics.fmean(r.busbw for r in top)
    small = [r for r in sweep.rows if r.size <= BW_LATENCY_MAXBYTES]
    latency = (small[0].time_us, small[-1].time_us, (small[0].size, small[-1].size)) if small else (None, None, ())
    h = Headline(sweep.stage, sweep.op, sweep.ranks, round(plateau, 6), top[0].size, top[-1].size, *latency)
    if not options.model_params or sweep.op != "all_reduce" or plateau <= 0:
        return h
    gradient = options.model_params * bytes_per_param
    return replace(h, model_params=options.model_params, grad_dtype=options.grad_dtype, gradient_bytes=gradient,
                   step_s=round(gradient_step_seconds(gradient, sweep.ranks, plateau), 6))


def gradient_step_seconds(gradient_bytes: int, ranks: int, busbw_gbps: float) -> float:
    """One all_reduce of the gradient: each rank moves 2S(n-1)/n bytes at busbw."""
    return 2 * gradient_bytes * (ranks - 1) / ranks / (busbw_gbps * 1e9)
