"""The bandwidth phase's records: its options and its results, with the small reads every
reader of them needs (average and peak busbw, whom to blame)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from netcheck.core.constants import (
    BW_DEFAULT_BUDGET, BW_DEFAULT_ITERS, BW_DEFAULT_MAXBYTES, BW_DEFAULT_MINBYTES,
    BW_DEFAULT_STEPFACTOR, BW_DEFAULT_WARMUP,
)


# The stages of the phase, in order: a failure names one of these.
STAGES = ("start", "control", "data", "all", "intra", "inter", "pairs")
STAGE_TITLES = {"all": "all ranks", "intra": "inside each node", "inter": "one rank per node"}


@dataclass(frozen=True)
class SweepOptions:
    """The bandwidth phase's settings; flags named as nccl-tests names them."""

    minbytes: int = BW_DEFAULT_MINBYTES      # -b: smallest size, bytes
    maxbytes: int = BW_DEFAULT_MAXBYTES      # -e: largest size, bytes (the budget may stop earlier)
    stepfactor: int = BW_DEFAULT_STEPFACTOR  # -f: each size is the previous one times this
    warmup_iters: int = BW_DEFAULT_WARMUP    # -w: untimed iterations before each size
    iters: int = BW_DEFAULT_ITERS            # -n: timed iterations per size
    check: bool = True                       # -c: verify every result and count wrong elements
    op: tuple[str, ...] = ("all_reduce",)    # --op: collectives to sweep, in order
    dtype: str = "float32"                   # --dtype
    backend: str = "auto"                    # --backend: auto = nccl where CUDA is, else gloo
    expect_busbw: float | None = None        # --expect-busbw: GB/s the all-rank sweep must reach
    budget_s: float = BW_DEFAULT_BUDGET      # --bw-budget: seconds all sweeps may take together


@dataclass(frozen=True)
class Row:
    """One line of the table, for one size: nccl-tests' columns."""

    size: int                       # bytes
    count: int                      # elements, as the API counts them
    dtype: str
    redop: str                      # "sum" | "none"
    time_us: float                  # per iteration, averaged across the ranks
    algbw: float                    # GB/s (1e9 bytes)
    busbw: float                    # GB/s
    wrong: int | None               # corrupted elements over all ranks; None: not checked (-c 0)
    wrong_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class RankTime:
    rank: int
    node: int
    time_us: float


@dataclass(frozen=True)
class Sweep:
    """One collective swept over the sizes in one stage."""

    stage: str                      # "all" | "intra" | "inter"
    op: str
    ranks: int                      # ranks per group: the n of the busbw factor
    groups: int                     # groups measured at once (intra: one per node)
    rows: tuple[Row, ...] = ()
    skipped: tuple[int, ...] = ()   # sizes left out to stay inside --bw-budget
    rank_times: tuple[RankTime, ...] = ()   # each rank's own time at the largest size
    node_busbw: dict[str, float] = field(default_factory=dict)  # intra: node rank -> busbw
    note: str = ""                  # why there are no rows, when there are none


@dataclass(frozen=True)
class Pair:
    """Two nodes exchanging `size` bytes both ways at once (one rank each)."""

    a: int
    b: int
    size: int
    time_us: float
    busbw: float                    # GB/s each way


@dataclass(frozen=True)
class InFlight:
    """What a worker was in when it stopped, as far as its reports tell."""

    op: str                         # a collective ("all_reduce", ...), "sendrecv" (node pairs), or
                                    # "new_group" (setting up the stage's process group)
    size: int                       # bytes; 0: not known
    ranks: tuple[int, ...]          # the ranks of its group: every one of them had to take part


@dataclass(frozen=True)
class Fault:
    """A worker that did not finish well."""

    node: int
    rank: int                       # -1: the whole node (its netcheck never reported)
    local_rank: int
    stage: str
    kind: str                       # "died" | "stuck" | "failed" | "timeout" | "silent" | "stopped"
    detail: str
    in_flight: InFlight | None = None   # None: not in a sweep's collective, or not known


@dataclass(frozen=True)
class BandwidthResult:
    """What the bandwidth phase measured, cluster-wide, and where it stopped if it did."""

    backend: str                    # "nccl" | "gloo" | "" (stopped before choosing)
    backend_reason: str             # e.g. "no CUDA: using gloo"
    nnodes: int
    nproc_per_node: int
    sweeps: tuple[Sweep, ...]
    pairs: tuple[Pair, ...]
    failed_stage: str | None        # one of STAGES; None when every stage finished
    failure: str                    # why, in one line ("" when none)
    faults: tuple[Fault, ...]       # every node's workers that died, hung or failed
    seconds: float
    hostnames: dict[str, str] = field(default_factory=dict)  # node (as in pairs, faults) -> hostname

    def node_name(self, node: int) -> str:
        return self.hostnames.get(str(node), f"node {node}")


# Whom to blame, in order: a dead or hung rank (the others failed because of it), then a
# node that never reported or was stopped (its ranks went with it: the others' reads from
# them failed), then a rank that failed, then ranks that ran out of time.
BLAME_ORDER = (("died", "stuck"), ("silent", "stopped"), ("failed",), ("timeout",))


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
