"""The bandwidth phase's records: its options and its results, with the small reads every
reader of them needs (average and peak busbw, whom to blame).

Longer than 500 lines: a BandwidthResult holds every record here (options, sweeps, faults, busy
processes, link counters), each defined once with the small reads its readers share."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Annotated, TypeVar

from netcheck.core.constants import (
    BW_DEFAULT_BUDGET,
    BW_DEFAULT_ITERS,
    BW_DEFAULT_MAXBYTES,
    BW_DEFAULT_MINBYTES,
    BW_DEFAULT_STEPFACTOR,
    BW_DEFAULT_WARMUP,
    BW_LATENCY_MAXBYTES,
    BW_PLATEAU_BAND,
    BW_PLATEAU_TOP,
    DDP_BUCKET_BYTES,
    LINK_JUDGED_SEGMENTS,
    LINK_LOSS_MIN,
    LINK_LOSS_RATE,
)
from netcheck.core.fields import (
    FEW,
    MAX_INT,
    PER_NIC,
    PER_NODE,
    PER_NODE_AND_ITEM,
    PER_PAIR,
    PER_RANK,
    Bytes,
    Count,
    Gbps,
    GroupSize,
    Hostname,
    IpAddress,
    LocalRankOrMinusOne,
    MessageSize,
    Micros,
    NodeCount,
    NodeRank,
    Pid,
    Port,
    ProcCount,
    Range,
    Rank,
    RankOrMinusOne,
    Ratio,
    Seconds,
    Text,
    one_of,
)

BW_RISING_BAND = 0.05        # without -e the sweep goes on while busbw still rises: the last two sizes
                             # each set a new high, the last by more than this (NCCL's rises slowly
                             # past 1 GB on RoCE)
# A figure whose batches, or a plateau whose sizes, spread wider than this is noisy: said
# beside the figure, with the busy processes seen (host.busy) as the likely cause.
BW_NOISY_SPREAD = 0.25

# The stages of the phase, in order: a failure names one of these.
STAGES = ("start", "control", "data", "all", "intra", "inter", "pairs")
STAGE_TITLES = {"all": "all ranks", "intra": "inside each node", "inter": "one rank per node"}
STAGE_NAMES = {"start": "worker start", "control": "gloo control plane", "data": "data backend init",
               "all": "sweep across all ranks", "intra": "intra-node sweep",
               "inter": "inter-node sweep", "pairs": "node pairs"}
Stage = Annotated[str, one_of(*STAGES)]
Ranks = Annotated[tuple[Rank, ...], PER_RANK]
StepFactor = Annotated[int, Range(2, MAX_INT, "a step factor")]
Iterations = Annotated[int, Range(1, MAX_INT, "an iteration count")]

K = TypeVar("K")   # what summed() sums by: a peer's address, a direction, a node


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
    warmup_by_time: bool = True              # no -w: fewer warm-up iterations where one takes long
    model_params: Annotated[int, Range(1, MAX_INT, "a parameter count")] | None = None  # --model-params
    grad_dtype: str = "bfloat16"             # --grad-dtype: the gradient's element type
    bucket_bytes: MessageSize = DDP_BUCKET_BYTES   # --bucket-mb: DDP's gradient bucket
    step_time_s: Seconds | None = None       # --step-time: one training step on one node


@dataclass(frozen=True)
class Row:
    """One line of the table, for one size: nccl-tests' columns."""

    size: Bytes
    count: Count                    # elements, as the API counts them
    dtype: str
    redop: str                      # "sum" | "none"
    time_us: Micros                 # per iteration: each rank's median batch, averaged across the ranks
    algbw: Gbps                     # GB/s (1e9 bytes)
    busbw: Gbps
    wrong: Count | None             # corrupted elements over all ranks; None: not checked (-c 0)
    wrong_ranks: Ranks = ()
    iters: Count = 0                # timed iterations (fewer than -n where one took long)
    spread_us: Micros = 0.0         # the largest standard deviation of one rank's iterations
    spread: Ratio = 0.0             # the timed batches' range over their median, the widest rank's


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
    rows: Annotated[tuple[Row, ...], FEW] = ()
    skipped: Annotated[tuple[Bytes, ...], FEW] = ()   # sizes left out to stay inside --bw-budget
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
    at: float | None = None         # failed: when its node heard it (wall clock, seconds); None: not known


@dataclass(frozen=True)
class Headline:
    """What a sweep says in two figures: its plateau (with its range and whether it can be
    trusted) and its small-message latency; and what a training step's gradient all_reduce
    would cost in DDP's buckets, and what that makes of N nodes against one."""

    stage: str
    op: str
    ranks: GroupSize
    plateau_busbw: Gbps             # the median busbw of the plateau's sizes (plateau_rows)
    plateau_from: Bytes             # the smallest and largest of those sizes
    plateau_to: Bytes
    latency_from_us: Micros | None  # time per op at the smallest and the largest size up to
    latency_to_us: Micros | None    # BW_LATENCY_MAXBYTES (None: none measured)
    latency_sizes: Annotated[tuple[Bytes, ...], FEW] = ()   # those two sizes
    model_params: Annotated[int, Range(1, MAX_INT, "a parameter count")] | None = None  # --model-params
    grad_dtype: str = ""            # --grad-dtype
    gradient_bytes: Bytes | None = None     # --model-params x the gradient's element size
    step_s: Seconds | None = None   # that gradient's all_reduce in buckets (bucket_cost)
    plateau_low: Gbps = 0.0         # the plateau's sizes' lowest and highest busbw
    plateau_high: Gbps = 0.0
    spread: Ratio = 0.0             # the plateau's widest spread: its sizes' range, or a size's batches
    rising: bool = False            # the largest size still set a new high: the plateau is further up
    bucket_bytes: Bytes | None = None       # --bucket-mb, with --model-params
    bucket_busbw: Gbps | None = None        # busbw at the bucket size, interpolated from the sweep
    step_time_s: Seconds | None = None      # --step-time
    speedup_low: Ratio | None = None        # N nodes over one, no overlap of communication and compute
    speedup_high: Ratio | None = None       # ... full overlap
    noisy: bool = False             # spread above BW_NOISY_SPREAD: the figure moved while measured


@dataclass(frozen=True)
class BusyProcess:
    """A process outside netcheck that used a node's CPUs, or held one of its GPUs, while its
    bandwidth workers ran."""

    node: NodeRank
    pid: Pid
    user: Text
    command: Text                   # its command line, cut short
    cpu_share: Ratio                # of one CPU, on average over the workers' run
    gpus: Annotated[tuple[Count, ...], FEW] = ()   # the GPUs (device numbers) it held open


# --- link counters (link.health): what a node's kernel counted on its links while the
# phase ran; netcheck's own traffic is the only traffic it may assume, so each is a
# difference across a stage, never a total.

# The stages that move the data the figures are measured on: a loss rate is judged over these.
TIMED_STAGES = ("all", "intra", "inter", "pairs")


@dataclass(frozen=True)
class Moved:
    """A link counter that rose during a stage."""

    where: Text                      # an interface ("eth0") or an RDMA port ("mlx5_0/1")
    counter: Text                    # the kernel's name for it ("carrier_changes", "rx_crc_errors", "symbol_error")
    by: Count
    packets: Count = 0               # the packets the interface moved meanwhile (0: an RDMA port's, not read)


@dataclass(frozen=True)
class StageLinks:
    """One node's counters across one stage of the bandwidth phase."""

    stage: Stage
    seconds: Seconds
    segments: Count                  # TCP segments sent (Tcp OutSegs, the node's network namespace)
    retransmitted: Count             # of those, sent again and not already received (Tcp RetransSegs
                                     # less TcpExt TCPDSACKRecvSegs)
    timeouts: Count = 0              # retransmission timeouts (TcpExt TCPTimeouts)
    moved: Annotated[tuple[Moved, ...], PER_NIC] = ()   # interface and port counters that rose


@dataclass(frozen=True)
class PeerSegments:
    """The TCP segments a node's bandwidth workers sent on their connections to one address,
    and received on them."""

    address: IpAddress
    segments: Count                  # tcpi_segs_out, summed over the connections
    retransmitted: Count             # tcpi_total_retrans less tcpi_dsack_dups, summed
    received: Count | None = None    # tcpi_segs_in, summed; None: not read


@dataclass(frozen=True)
class Unanswered:
    """A node's TCP connections to one address that went unanswered when its workers stopped
    short: a connect or data resent on timeout, again and again, with nothing back."""

    address: IpAddress
    connections: Count               # of them
    connecting: Count                # of those, still connecting (SYN-SENT)
    timeouts: Count                  # the most retransmission timeouts in a row on one of them


@dataclass(frozen=True)
class Door:
    """A port a node listens on through the bandwidth phase, never answered but by its kernel:
    where a sweep stops short, its peers knock (connect) to learn whether it can still be
    reached on a port other than the endpoint's."""

    node: NodeRank
    addresses: Annotated[tuple[IpAddress, ...], PER_NIC]
    port: Port


@dataclass(frozen=True)
class NodeLinks:
    """What one node's kernel counted while its bandwidth workers ran."""

    node: NodeRank
    stages: Annotated[tuple[StageLinks, ...], FEW]
    peers: Annotated[tuple[PeerSegments, ...], PER_NODE] = ()
    addresses: Annotated[tuple[IpAddress, ...], PER_NIC] = ()   # the node's own, loopback aside: whose peers are whose
    unanswered: Annotated[tuple[Unanswered, ...], PER_NODE] = ()   # read where its workers stopped short
    unreached: Annotated[tuple[NodeRank, ...], PER_NODE] = ()   # peers whose Door it knocked on then, unanswered


def timed(links: NodeLinks) -> tuple[int, int, int]:
    """(segments, retransmitted, timeouts) over the stages that moved the measured data."""
    stages = [s for s in links.stages if s.stage in TIMED_STAGES]
    return (sum(s.segments for s in stages), sum(s.retransmitted for s in stages),
            sum(s.timeouts for s in stages))


def link_directions(links: tuple[NodeLinks, ...]) -> dict[tuple[int, int], tuple[int, int]]:
    """(sender, receiver) -> (segments sent, lost), from each node's connections, the peer known
    by the address it holds. An address two nodes hold (the same docker0 everywhere, nodes
    sharing a machine's namespace) names neither.

    Lost is what the sender resent (less what the peer said it already had), and never more
    than the receiver's own connections from the sender missed (sent less received): a path
    that reorders makes resends the peer had, more than its D-SACKs tell (a healthy 2-CPU
    namespace cluster: 45 to 225 a direction, 0.05-0.14%, each of which arrived)."""
    owners = _owners(links)
    sent = summed(((node.node, to), peer.segments, peer.retransmitted) for node in links for peer in node.peers
                  if (to := owners.get(peer.address)) is not None and to != node.node)
    received = _received(links, owners)
    return {d: (s, min(r, max(0, s - received[d])) if d in received else r) for d, (s, r) in sent.items()}


def unanswered_directions(links: tuple[NodeLinks, ...]) -> dict[tuple[int, int], Unanswered | None]:
    """(node, peer) -> the node's connections to the peer's addresses that went unanswered,
    summed (the most timeouts in a row of any); None where only a knock on the peer's Door
    went unanswered."""
    owners = _owners(links)
    found: dict[tuple[int, int], Unanswered | None] = {(node.node, peer): None for node in links
                                                       for peer in node.unreached if peer != node.node}
    for node in links:
        for u in node.unanswered:
            if (to := owners.get(u.address)) is None or to == node.node:
                continue
            old = found.get((node.node, to)) or Unanswered(u.address, 0, 0, 0)
            found[(node.node, to)] = Unanswered(old.address, old.connections + u.connections,
                                                old.connecting + u.connecting, max(old.timeouts, u.timeouts))
    return found


def _owners(links: tuple[NodeLinks, ...]) -> dict[str, int]:
    """address -> the one node that holds it."""
    held: dict[str, set[int]] = {}
    for node in links:
        for address in node.addresses:
            held.setdefault(address, set()).add(node.node)
    return {a: next(iter(nodes)) for a, nodes in held.items() if len(nodes) == 1}


def _received(links: tuple[NodeLinks, ...], owners: dict[str, int]) -> dict[tuple[int, int], int]:
    """(sender, receiver) -> the segments the receiver's connections from the sender received,
    where the receiver read every one of them."""
    received: dict[tuple[int, int], int] = {}
    unread: set[tuple[int, int]] = set()
    for node in links:
        for peer in node.peers:
            if (frm := owners.get(peer.address)) is None or frm == node.node:
                continue
            if peer.received is None:
                unread.add((frm, node.node))
            received[(frm, node.node)] = received.get((frm, node.node), 0) + (peer.received or 0)
    return {d: n for d, n in received.items() if d not in unread}


def summed(counts: Iterable[tuple[K, int, int]]) -> dict[K, tuple[int, int]]:
    """(key, segments, resent) rows -> key -> (their segments, their resends), summed."""
    sums: dict[K, tuple[int, int]] = {}
    for key, segments, resent in counts:
        old = sums.get(key, (0, 0))
        sums[key] = (old[0] + segments, old[1] + resent)
    return sums


def pair_resent(links: tuple[NodeLinks, ...]) -> dict[tuple[int, int], float]:
    """(a, b), a < b -> the larger share of its two directions' segments that were resent,
    for the pairs that resent any: what a pair table shows beside its bandwidth."""
    shares: dict[tuple[int, int], float] = {}
    for (a, b), (segments, resent) in link_directions(links).items():
        if resent and segments:
            key = (min(a, b), max(a, b))
            shares[key] = max(shares.get(key, 0.0), resent / segments)
    return shares


def lossy(segments: int, retransmitted: int) -> bool:
    """Whether what was sent was resent often enough to be a lossy link, not a probe or two."""
    return retransmitted >= LINK_LOSS_MIN and retransmitted >= LINK_LOSS_RATE * segments


def judged(segments: int, retransmitted: int) -> bool:
    """Whether connections moved enough to tell a lossy link from a clean one."""
    return segments >= LINK_JUDGED_SEGMENTS or lossy(segments, retransmitted)


def rate_text(segments: int, retransmitted: int) -> str:
    """"2,412 of 120,337 segments resent (2.0%)"."""
    share = retransmitted / segments if segments else 0.0
    return f"{retransmitted:,} of {segments:,} segments resent ({share:.2%})"


@dataclass(frozen=True)
class NodeReport:
    """One node's account of its own workers, posted in the host's store for the other nodes
    (storekeys.BW_NODE)."""

    node: NodeRank
    faults: Annotated[tuple[Fault, ...], PER_RANK]
    backend: str
    backend_reason: Text
    busy: Annotated[tuple[BusyProcess, ...], FEW] = ()   # at most BW_BUSY_SHOWN
    links: NodeLinks | None = None   # what its kernel counted on its links meanwhile (None: not read)


@dataclass(frozen=True)
class BandwidthResult:
    """What the bandwidth phase measured, cluster-wide, and where it stopped if it did."""

    backend: str                    # "nccl" | "gloo" | "" (stopped before choosing)
    backend_reason: Text            # e.g. "no CUDA: using gloo"
    nnodes: NodeCount
    nproc_per_node: ProcCount
    sweeps: Annotated[tuple[Sweep, ...], FEW]
    pairs: Annotated[tuple[Pair, ...], PER_PAIR]
    failed_stage: Stage | None      # None when every stage finished
    failure: Text                   # why, in one line ("" when none)
    faults: Annotated[tuple[Fault, ...], PER_RANK]   # every node's workers that died, hung or failed
    seconds: Seconds
    # node (as in pairs, faults) -> hostname
    hostnames: Annotated[dict[str, Hostname], PER_NODE] = field(default_factory=dict)
    headlines: Annotated[tuple[Headline, ...], FEW] = ()   # one per sweep with rows, in the sweeps' order
    busy: Annotated[tuple[BusyProcess, ...], PER_NODE_AND_ITEM] = ()   # every node's, busiest first (host.busy)
    links: Annotated[tuple[NodeLinks, ...], PER_NODE] = ()   # each node's link counters meanwhile (link.health)

    def node_name(self, node: int) -> str:
        """The node's hostname; with its rank where another node has the same (nodes sharing one
        machine, cloned images): "vm <-> vm" told a reader nothing."""
        name = self.hostname(node)
        return f"{name} (node {node})" if name in self._shared_names else name

    def hostname(self, node: int) -> str:
        """The node's hostname as it is, shared or not ("node N" where none came)."""
        return self.hostnames.get(str(node), f"node {node}")

    @cached_property
    def _shared_names(self) -> frozenset[str]:
        """The hostnames two nodes or more hold (computed once: a report names nodes many times)."""
        held = Counter(self.hostnames.values())
        return frozenset(h for h, nodes in held.items() if nodes > 1)


# Whom to blame, in order: a dead or hung rank (the others failed because of it), then a
# node that never reported or was stopped (its ranks went with it: the others' reads from
# them failed), then a rank that failed, then ranks that ran out of time.
BLAME_ORDER = (("died", "stuck"), ("silent", "stopped"), ("failed",), ("timeout",))
FAULT_KINDS = tuple(kind for kinds in BLAME_ORDER for kind in kinds)


# Kinds that mean the node's netcheck itself is gone: it is named lost in the phase.
NODE_GONE = ("silent", "stopped")


def culprits(faults: Sequence[Fault]) -> list[Fault]:
    return next(([f for f in faults if f.kind in kinds] for kinds in BLAME_ORDER
                 if any(f.kind in kinds for f in faults)), [])


def first_culprit(faults: Sequence[Fault]) -> Fault | None:
    """The culprit of the earliest stage (ties: lowest node, then rank)."""
    return min(culprits(faults), key=lambda f: (STAGES.index(f.stage), f.node, f.rank), default=None)


def avg_busbw(sweep: Sweep) -> float:
    """nccl-tests' closing line: the mean busbw over the sizes measured."""
    return statistics.fmean(r.busbw for r in sweep.rows) if sweep.rows else 0.0


def peak_busbw(sweep: Sweep) -> float:
    return max((r.busbw for r in sweep.rows), default=0.0)


def plateau_rows(rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """The large sizes where busbw stops growing, where a job's gradient buckets run: the largest
    BW_PLATEAU_TOP sizes, and the smaller ones next to them within BW_PLATEAU_BAND of their
    median busbw. Past the latency-bound sizes where there are enough. Where busbw still rose
    at the top (the plateau is further up: a floor), the largest BW_PLATEAU_TOP alone, whose
    median is then the size below the top: the top size, which made the headline alone, was
    one size's luck as often as a trend (RESULTS.md, issue 33: 128 MiB read 19% above 64 MiB
    where a bare loop read them 2% apart)."""
    big = [r for r in rows if r.size >= BW_LATENCY_MAXBYTES] or list(rows)
    start = max(0, len(big) - BW_PLATEAU_TOP)
    if still_rising(rows):
        return tuple(big[start:])
    reference = statistics.median(r.busbw for r in big[start:])
    while start > 0 and abs(big[start - 1].busbw - reference) <= BW_PLATEAU_BAND * reference:
        start -= 1
    return tuple(big[start:])


def still_rising(rows: tuple[Row, ...]) -> bool:
    """Whether busbw still rose at the top of the sweep, so the plateau is further up: each of
    the last two sizes set a new high, the last by more than BW_RISING_BAND. A rise is a trend
    over two doublings, never one size: one lucky top size on a flat curve (a quiet moment) made
    itself the headline, 5-15% above what the sizes below it and a bare loop measured."""
    if len(rows) < 2:
        return True
    if rows[-1].busbw <= (1 + BW_RISING_BAND) * max(r.busbw for r in rows[:-1]):
        return False
    return len(rows) == 2 or rows[-2].busbw > max(r.busbw for r in rows[:-2])


def spread_of(values: list[float]) -> float:
    """How far values scatter, over their median: their interquartile range where there are four
    or more (one slow batch of five moves it not at all), else their range. 0.3: 30%."""
    middle = statistics.median(values) if values else 0.0
    if middle <= 0:
        return 0.0
    if len(values) < 4:
        return (max(values) - min(values)) / middle
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / middle


def headline(sweep: Sweep, options: SweepOptions, bytes_per_param: int, nnodes: int) -> Headline | None:
    """The sweep's figures (None: no rows): its plateau with its range and spread, its
    latency; with --model-params, an all_reduce sweep also gives a step's gradient cost, and
    with --step-time the all-rank sweep what nnodes nodes make of it against one."""
    if not sweep.rows:
        return None
    top = plateau_rows(sweep.rows)
    figures = [r.busbw for r in top]
    plateau = statistics.median(figures)
    rising = len(sweep.rows) > 1 and still_rising(sweep.rows)
    # Sizes of a rising curve differ because it rises; only their batches can say noise.
    spread = max(([] if rising else [spread_of(figures)]) + [r.spread for r in top])
    small = [r for r in sweep.rows if r.size <= BW_LATENCY_MAXBYTES]
    h = Headline(sweep.stage, sweep.op, sweep.ranks, round(plateau, 6), top[0].size, top[-1].size,
                 small[0].time_us if small else None, small[-1].time_us if small else None,
                 (small[0].size, small[-1].size) if small else (),
                 plateau_low=min(figures), plateau_high=max(figures), spread=round(spread, 4),
                 rising=rising, noisy=spread > BW_NOISY_SPREAD)
    if not options.model_params or sweep.op != "all_reduce" or plateau <= 0:
        return h
    gradient = options.model_params * bytes_per_param
    step = bucket_cost(gradient, options.bucket_bytes, sweep.rows, sweep.ranks)
    h = replace(h, model_params=options.model_params, grad_dtype=options.grad_dtype, gradient_bytes=gradient,
                step_s=round(step, 6), bucket_bytes=options.bucket_bytes,
                bucket_busbw=round(busbw_at(sweep.rows, options.bucket_bytes), 6))
    if options.step_time_s is None or sweep.stage != "all":
        return h
    low, high = speedup(nnodes, options.step_time_s, step)
    return replace(h, step_time_s=options.step_time_s, speedup_low=round(low, 4), speedup_high=round(high, 4))


def busbw_at(rows: tuple[Row, ...], size: int) -> float:
    """busbw at a size, interpolated on a log size axis between the measured sizes around it;
    beyond the largest measured, the plateau's (busbw has stopped growing there; where it
    still rose, the headline's floor); below the smallest, the smallest's."""
    if size >= rows[-1].size:
        return statistics.median(r.busbw for r in plateau_rows(rows))
    below = [r for r in rows if r.size <= size]
    if not below:
        return rows[0].busbw
    lo = below[-1]
    hi = next(r for r in rows if r.size > size)
    if lo.size == size:
        return lo.busbw
    at = math.log(size / lo.size) / math.log(hi.size / lo.size)
    return lo.busbw + at * (hi.busbw - lo.busbw)


def bucket_cost(gradient_bytes: int, bucket_bytes: int, rows: tuple[Row, ...], ranks: int) -> float:
    """Seconds of all_reduce per training step as DDP does it: the gradient in buckets of
    bucket_bytes (the last one smaller), each all_reduced at the busbw measured at its size."""
    full, rest = divmod(gradient_bytes, bucket_bytes)
    cost = full * gradient_step_seconds(bucket_bytes, ranks, busbw_at(rows, bucket_bytes))
    return cost + (gradient_step_seconds(rest, ranks, busbw_at(rows, rest)) if rest else 0.0)


def gradient_step_seconds(gradient_bytes: int, ranks: int, busbw_gbps: float) -> float:
    """One all_reduce of gradient_bytes: each rank moves 2S(n-1)/n bytes at busbw."""
    return 2 * gradient_bytes * (ranks - 1) / ranks / (busbw_gbps * 1e9)


def speedup(nodes: int, compute_s: float, comm_s: float) -> tuple[float, float]:
    """How much faster n nodes train than one, each step computing compute_s (measured on one
    node, same per-node batch) and all-reducing for comm_s: n*c/(c+m) where communication
    waits for compute (no overlap), n*c/max(c, m) where it hides behind it (full overlap)."""
    return nodes * compute_s / (compute_s + comm_s), nodes * compute_s / max(compute_s, comm_s)
