"""One rank of the bandwidth phase, started by `bandwidth` on each node:

    python -m netcheck.bandwidth.worker --options JSON --run-id ID --deadline-at T --parent PID

Its rank comes from the environment, set the way torchrun sets it (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT). It joins the host's
store and runs the stages in order, so a failure names its stage:

    control  gloo process group on every rank, a tiny all_reduce, facts all_gathered
    data     the data backend: nccl (eager init on this rank's GPU) when every rank has
             CUDA, else gloo, and why
    all / intra / inter   the sweeps (the harness here; the collectives are sweep.py's)
    pairs    node pairs exchanging in round-robin rounds

It reports to its parent as JSON lines (`Event`) on a private copy of stdout, a heartbeat
among them, so the parent can tell a hung rank from one blocked by a peer. Nothing is
printed for a person: that is the node's job.

Longer than 500 lines: one rank's whole run, read top to bottom: its events, its stages, and the
harness that times, checks and gathers every collective (the collectives' maths are sweep.py's).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any

from netcheck.bandwidth.sizes import (
    Budget,
    Measured,
    pair_size,
    plan_stages,
    planned_sizes,
    round_robin,
    run_sizes,
    stage_budgets,
)
from netcheck.bandwidth.sweep import (
    COLLECTIVES,
    NO_CUDA,
    NO_NCCL,
    PAST_VISIBLE,
    Collective,
    Peers,
    bandwidths,
    batch_times,
    choose_backend,
    fill,
    make_row,
    modulus,
    wrong,
)
from netcheck.cluster.compat import eager_device, import_distributed
from netcheck.core import codec
from netcheck.core.bwrecords import Pair, PeerSegments, RankTime, Sweep, SweepOptions, spread_of
from netcheck.core.errors import NetcheckError
from netcheck.core.fields import FEW, Text
from netcheck.facts.linkcounters import peer_segments, worth_reporting

if TYPE_CHECKING:   # imported at run time inside the start stage, as the stage's failure
    from torch import Tensor
    from torch.distributed import ProcessGroup

BW_MEMORY_SHARE = 0.25       # of a node's available RAM (or a GPU's free memory) the buffers may take
BW_SWEEP_WALL_SHARE = 0.8    # of the time left after the control stage, the sweeps' wall clock may take
                             # (the budget counts collective time; checks and gathers come on top)
BW_HEARTBEAT = 1.0           # a worker says it is alive this often, even while blocked in a collective
BW_PG_MARGIN = 1.0           # process-group timeouts end this long before the node kills its workers

PR_SET_PDEATHSIG = 1
# The sweeps may use at most this share of the time the slowest rank has left after the
# control stage: group creation, buffers and checks need the rest.
BUDGET_SHARE_OF_DEADLINE = 0.5
MAX_DETAIL = 300  # characters of an error kept: gloo's and NCCL's run long


@dataclass(frozen=True)
class Event:
    """One line from a worker to its node."""

    kind: str                 # "beat" | "stage" | "cuda" (starting the CUDA driver: it may hold the
                              # GIL, and so the heartbeat, for seconds) | "backend" | "sweep" |
                              # "pairs" | "links" | "failed" | "done"
    stage: str = ""           # stage: the one entered; failed: the one that failed
    detail: Text = ""         # backend: the name; failed: the error, one line
    reason: Text = ""         # backend: why that backend
    sweep: Sweep | None = None            # the sweep so far, after each size
    pairs: tuple[Pair, ...] = ()          # the pairs so far, after each round
    peers: Annotated[tuple[PeerSegments, ...], FEW] = ()   # links: what its connections sent and resent


class StageFailed(NetcheckError):
    def __init__(self, stage: str, detail: str):
        super().__init__(f"{stage}: {detail}")
        self.stage, self.detail = stage, detail


class Events:
    """Writes events as JSON lines to the parent; the heartbeat shares the lock."""

    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()

    def emit(self, event: Event) -> None:
        data = (codec.dumps(event) + "\n").encode()
        with self.lock:
            try:
                while data:
                    data = data[os.write(self.fd, data):]
            except BrokenPipeError:
                os._exit(1)  # netcheck is gone: there is nobody left to measure for

    def start_heartbeat(self) -> None:
        threading.Thread(target=self._beat, daemon=True, name="heartbeat").start()

    def _beat(self) -> None:
        # Collectives release the GIL while they wait, so a rank blocked by a peer keeps
        # beating; only a stopped rank, or one wedged holding the GIL, falls silent.
        while True:
            self.emit(Event("beat"))
            time.sleep(BW_HEARTBEAT)


@dataclass(frozen=True)
class Me:
    """This rank, as torchrun would describe it."""

    rank: int
    local_rank: int
    world: int
    nproc: int
    node: int
    master_addr: str
    master_port: int

    @property
    def nnodes(self) -> int:
        return self.world // self.nproc

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Me:
        return cls(int(env["RANK"]), int(env["LOCAL_RANK"]), int(env["WORLD_SIZE"]),
                   int(env["LOCAL_WORLD_SIZE"]), int(env["GROUP_RANK"]), env["MASTER_ADDR"],
                   int(env["MASTER_PORT"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m netcheck.bandwidth.worker")
    p.add_argument("--options", required=True, help="SweepOptions as JSON")
    p.add_argument("--run-id", required=True)
    p.add_argument("--deadline-at", type=float, required=True, help="time.monotonic() to be done by")
    p.add_argument("--parent", type=int, required=True, help="pid of the node's netcheck")
    args = p.parse_args(argv)
    _die_with_parent(args.parent)
    events = Events(_private_stdout())
    events.start_heartbeat()
    try:
        run(events, args)
    except StageFailed as e:
        events.emit(Event("failed", e.stage, e.detail))
        # A broken communicator can hang in its destructor: leave without running them.
        os._exit(1)
    events.emit(Event("done"))
    # As after a failure: no process-group destructors on the way out (they can hang).
    os._exit(0)


def _die_with_parent(parent: int) -> None:
    """Be SIGKILLed when netcheck dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG)."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took hold
        os._exit(1)


def _private_stdout() -> int:
    """Events get their own copy of stdout; fd 1 then points at stderr, so whatever the
    libraries print (NCCL_DEBUG writes to stdout) cannot corrupt the event stream."""
    fd = os.dup(1)
    os.dup2(2, 1)
    return fd


@contextmanager
def stage(events: Events, name: str) -> Iterator[None]:
    events.emit(Event("stage", name))
    try:
        yield
    except StageFailed:
        raise
    except Exception as e:  # noqa: BLE001 - the stage boundary: any error is this stage's named failure
        raise StageFailed(name, _first_line(e)) from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
    return line[:MAX_DETAIL]


def run(events: Events, args: argparse.Namespace) -> None:
    """Every stage in order."""
    with stage(events, "start"):
        me = Me.from_env(os.environ)
        options = codec.loads(SweepOptions, args.options, 1 << 16)
        dist = import_distributed()
        import torch
    with stage(events, "control"):
        h = Harness(torch, dist, me, options, events, args.deadline_at)
        facts = h.control(args.run_id)
    with stage(events, "data"):
        h.data_plane([int(f[0]) for f in facts])
    left = min(f[1] for f in facts)
    h.sweeps(min(options.budget_s, BUDGET_SHARE_OF_DEADLINE * left), BW_SWEEP_WALL_SHARE * left)
    events.emit(Event("links", peers=worth_reporting(h.peers)))   # read in the pairs stage, see there
    # No destroy_process_group: with torch 2.1.2 and 2.4.1 a gloo rank that tears its group
    # down while a peer still finishes the last collective can block in the destructor with
    # the GIL held (heartbeat silent, then killed as hung). main() leaves with os._exit.


@dataclass
class Harness:
    """Timing, warm-up, barriers and the data check, once for every collective."""

    torch: Any
    dist: Any
    me: Me
    options: SweepOptions
    events: Events
    deadline_at: float
    device: Any = None
    backend: str = "gloo"
    data: Any = None          # the data-plane group over every rank (None: the default group)
    top: int = 0              # the largest size every rank's memory share holds (past -e's default)
    finished: dict[str, Sweep] = field(default_factory=dict)   # stage -> its last sweep
    peers: tuple[PeerSegments, ...] = ()   # what this rank's connections sent and resent, by peer

    # --- stages ---------------------------------------------------------------------------

    def control(self, run_id: str) -> list[list[float]]:
        """The gloo control plane; returns every rank's [why not NCCL (0: it can), seconds left]."""
        dist, torch = self.dist, self.torch
        timeout = self.timeout()
        base = dist.TCPStore(self.me.master_addr, self.me.master_port, None, False, timeout)
        store = dist.PrefixStore(f"netcheck/{run_id}/bw/pg", base)
        dist.init_process_group("gloo", store=store, rank=self.me.rank, world_size=self.me.world,
                                timeout=timeout)
        one = torch.ones(1)
        dist.all_reduce(one)
        if one.item() != self.me.world:
            raise RuntimeError(f"control all_reduce gave {one.item():g}, not {self.me.world}")
        trouble = self._cuda_trouble()
        return self.gather([float(trouble), self.deadline_at - time.monotonic()])

    def data_plane(self, troubles: list[int]) -> None:
        torch, dist = self.torch, self.dist
        self.backend, reason = choose_backend(self.options.backend, troubles, self.me.nproc)
        if self.backend == "nccl":
            self.device = torch.device("cuda", self.me.local_rank)
            torch.cuda.set_device(self.device)
            # device_id, where torch has it, makes NCCL set up its communicator now, inside
            # this stage; without it the all_reduce below runs the lazy init, still in here.
            eager = eager_device(dist, self.device)
            self.data = dist.new_group(backend="nccl", timeout=self.timeout(), **eager)
            one = torch.ones(1, device=self.device)
            dist.all_reduce(one, group=self.data)
            self.sync()
        else:
            self.device = torch.device("cpu")
        self.top = int(min(t[0] for t in self.gather([float(self._memory_share())])))
        self.events.emit(Event("backend", "data", self.backend, reason))

    def sweeps(self, budget: float, wall: float) -> None:
        o, me = self.options, self.me
        plan = plan_stages(me.nnodes, me.nproc)
        shares = len(plan) * len(o.op)
        per_sweep, pairs_budget = stage_budgets(budget, shares, me.nnodes > 1)
        per_wall, _ = stage_budgets(wall, shares, me.nnodes > 1)
        for name in plan:
            with stage(self.events, name):
                group, members = self.group_for(name)
                for op in o.op:
                    self.finished[name] = self.sweep(name, COLLECTIVES[op], group, members,
                                                     Budget(per_sweep, per_wall))
        if me.nnodes > 1:
            with stage(self.events, "pairs"):
                self.pairs(pairs_budget)
                # Read while every connection is open: a rank that finished first and left would
                # have reset its end, and its socket here no longer names its peer (chaos seed
                # 1206, schedule 422: two nodes reported one peer of three). No rank leaves
                # before every rank has read: the gather after it. No rank reads before every
                # rank's pairs are done (the first gather): what one end counts as sent, the
                # other has received by then, ACKs and all.
                self.gather([0.0])
                self.peers = peer_segments(self.me.master_port)
                self.gather([0.0])

    def group_for(self, name: str) -> tuple[Any, list[list[int]]]:
        """The group this rank measures in for a stage, and every group's global ranks, set up
        before the sweep: NCCL builds a communicator lazily in its first collective (0.5-2 s
        with NVLS or InfiniBand), which would otherwise land in the first size's warm-up, or
        with -w 0 in its timed window."""
        dist, me = self.dist, self.me
        nodes = [list(range(n * me.nproc, (n + 1) * me.nproc)) for n in range(me.nnodes)]
        if name == "all":
            return self.data, [list(range(me.world))]
        if name == "intra":
            mine, _ = dist.new_subgroups_by_enumeration(nodes, backend=self.backend, timeout=self.timeout())
            self.set_up(mine)
            return mine, nodes
        leaders = [ranks[0] for ranks in nodes]
        group = dist.new_group(leaders, backend=self.backend, timeout=self.timeout(),
                               **(eager_device(dist, self.device) if self.backend == "nccl" else {}))
        if me.rank in leaders:
            self.set_up(group)
        return group, [leaders]

    def set_up(self, group: ProcessGroup | None) -> None:
        """One untimed collective on the group: its connections are made here."""
        one = self.torch.ones(1, device=self.device)
        self.dist.all_reduce(one, group=group)
        self.sync()

    # --- one sweep ----------------------------------------------------------------------------

    def sweep(self, name: str, coll: Collective, group: ProcessGroup | None, groups: list[list[int]],
              budget: Budget) -> Sweep:
        """The sizes run_sizes picks; every rank takes the same decisions, from numbers all
        ranks share, so no rank waits for a size others skip."""
        o = self.options
        n = len(groups[0])
        note = f"{coll.name} needs {coll.min_ranks} ranks" if n < coll.min_ranks else ""
        result = Sweep(name, coll.name, n, len(groups), note=note)
        self.events.emit(Event("sweep", name, sweep=result))
        mine = next((g for g in groups if self.me.rank in g), None)
        if note:
            return result

        def measure(size: int, iters: int, warmup: int) -> Measured:
            nonlocal result
            chunk = coll.chunk(size, o.dtype, n)
            table = self.gather(list(self.step(coll, chunk, group, mine, iters, warmup)) if mine else self.idle(6))
            result = self.add_row(result, coll, chunk, table, groups, iters)
            self.events.emit(Event("sweep", name, sweep=result))
            return Measured(result.rows[-1], max(t[0] for t in table), max(t[2] for t in table))

        def skip(size: int) -> None:
            nonlocal result
            result = replace(result, skipped=result.skipped + (size,))
            self.events.emit(Event("sweep", name, sweep=result))

        run_sizes(o, coll.smallest(o.dtype, n), self.top, budget, measure, skip)
        return result

    def step(self, coll: Collective, chunk: int, group: ProcessGroup | None, ranks: list[int], iters: int,
             warmup: int) -> tuple[float, ...]:
        """One size on this rank: (seconds per iteration, wrong elements, step seconds, 1,
        the iterations' standard deviation, the batches' spread)."""
        o, torch = self.options, self.torch
        started = time.perf_counter()
        n, grank = len(ranks), ranks.index(self.me.rank)
        peers = Peers(ranks[0], ranks[(grank + 1) % n], ranks[(grank - 1) % n])
        dtype = getattr(torch, o.dtype)
        # Timed on zeros: repeated sums of zeros never overflow; the check refills below.
        # An in-place collective gets one buffer, not a second one it would never read.
        n_in, n_out = coll.elements(chunk, n)
        out = torch.zeros(n_out, dtype=dtype, device=self.device)
        inp = out if coll.inplace else torch.zeros(n_in, dtype=dtype, device=self.device)
        call = lambda: coll.run(self.dist, inp, out, group, peers)  # noqa: E731
        seconds, deviation, spread = self.timed(call, iters, warmup)
        wrong = self.check(coll, inp, out, call, grank, n, chunk) if o.check else 0
        return seconds, float(wrong), time.perf_counter() - started, 1.0, deviation, spread

    def timed(self, call: Callable[[], object], iters: int, warmup: int) -> tuple[float, float, float]:
        """Seconds per iteration of `call` (the median batch's, batch_times), the iterations'
        standard deviation and the batches' spread: warmed up and lined up as nccl-tests does."""
        for _ in range(warmup):
            call()
        self.sync()
        self.dist.barrier()  # the gloo control group: every rank starts the clock together
        if self.device.type == "cuda":
            marks = [self.torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
            marks[0].record()
            for mark in marks[1:]:
                call()
                mark.record()
            marks[-1].synchronize()
            times = [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
        else:
            times, last = [], time.perf_counter()
            for _ in range(iters):
                call()  # gloo's CPU collectives return once complete
                now = time.perf_counter()
                times.append(now - last)
                last = now
        batches = batch_times(times)
        return statistics.median(batches), statistics.pstdev(times), spread_of(batches)

    def idle(self, values: int) -> list[float]:
        """A rank outside this step's groups: it only lines up with the others (timed's
        barrier is on every rank) and reports zeros."""
        self.dist.barrier()
        return [0.0] * values

    def check(self, coll: Collective, inp: Tensor, out: Tensor, call: Callable[[], object], grank: int, n: int,
              chunk: int) -> int:
        """One more iteration on data with a known answer; elements that differ from it."""
        m = modulus(self.options.dtype, n, coll.reduces)
        fill(self.torch, inp, lambda i: coll.inputs(i, grank, n, chunk, m), m)  # in place: inp is out
        call()
        self.sync()
        return wrong(self.torch, out, lambda i: coll.expected(i, grank, n, chunk, m),
                     m if coll.periodic else out.numel())

    def add_row(self, result: Sweep, coll: Collective, chunk: int, table: list[list[float]],
                groups: list[list[int]], iters: int) -> Sweep:
        """The row every rank computes alike from the gathered table, and per-rank times."""
        o, nproc = self.options, self.me.nproc
        members = [r for r, t in enumerate(table) if t[3]]
        row = make_row(coll, chunk, o.dtype, result.ranks, [table[r][0] for r in members],
                       [int(table[r][1]) for r in members], o.check, members, iters,
                       [table[r][4] for r in members], [table[r][5] for r in members])
        rank_times = tuple(RankTime(r, r // nproc, round(table[r][0] * 1e6, 3)) for r in members)
        node_busbw = {} if result.stage != "intra" else {
            str(g[0] // nproc): round(bandwidths(coll, chunk, o.dtype, len(g),
                                                 statistics.fmean(table[r][0] for r in g))[1], 6)
            for g in groups}
        return replace(result, rows=result.rows + (row,), rank_times=rank_times, node_busbw=node_busbw)

    # --- node pairs -----------------------------------------------------------------------------

    def pairs(self, budget: float) -> None:
        """Leaders (local rank 0) of two nodes exchange both ways at once; a round's pairs
        run in parallel, the rounds one after another."""
        o, me = self.options, self.me
        rounds = round_robin(me.nnodes)
        sweep = self.finished.get("inter") or self.finished["all"]  # the network's pace
        rate = sweep.rows[-1].busbw * 1e9 if sweep.rows else 0.0
        size = pair_size(planned_sizes(o), rate,
                         budget / len(rounds), o.warmup_iters + o.iters)
        found: tuple[Pair, ...] = ()
        for pairing in rounds:
            mine = next((p for p in pairing if me.node in p), None) if me.local_rank == 0 else None
            peer = (sum(mine) - me.node) * me.nproc if mine else None   # the other node's leader
            table = self.gather([self.exchange(size, peer)] if peer is not None else self.idle(1))
            found += tuple(_pair(a, b, size, [table[a * me.nproc][0], table[b * me.nproc][0]])
                           for a, b in pairing)
            self.events.emit(Event("pairs", "pairs", pairs=found))

    def exchange(self, size: int, peer: int) -> float:
        inp, out = (self.torch.zeros(size, dtype=self.torch.uint8, device=self.device) for _ in range(2))
        peers = Peers(peer, peer, peer)
        return self.timed(lambda: COLLECTIVES["sendrecv"].run(self.dist, inp, out, self.data, peers),
                          self.options.iters, self.options.warmup_iters)[0]

    # --- helpers --------------------------------------------------------------------------------

    def gather(self, values: list[float]) -> list[list[float]]:
        """Every rank's values, over the gloo control group (float64: times stay exact)."""
        torch = self.torch
        mine = torch.tensor(values, dtype=torch.float64)
        # The list form: gloo has no all_gather_into_tensor (_allgather_base) on 2.1.2.
        out = [torch.zeros(len(values), dtype=torch.float64) for _ in range(self.me.world)]
        self.dist.all_gather(out, mine)
        return [t.tolist() for t in out]

    def sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def timeout(self) -> datetime.timedelta:
        """Process-group waits end before the node would kill this rank, so a rank blocked by
        a dead peer reports a timeout instead of being killed silently."""
        return datetime.timedelta(seconds=max(1.0, self.deadline_at - time.monotonic() - BW_PG_MARGIN))

    def _cuda_trouble(self) -> int:
        """Why this rank cannot run NCCL (sweep.CUDA_TROUBLES), 0 where it can. Starting the
        CUDA driver takes seconds on nodes without persistence mode, holding the GIL (and so
        the heartbeat): the node is told first, and waits longer for this."""
        torch, dist = self.torch, self.dist
        self.events.emit(Event("cuda"))
        if not torch.cuda.is_available():
            return NO_CUDA
        if not dist.is_nccl_available():
            return NO_NCCL
        # device_count honours CUDA_VISIBLE_DEVICES and the devices the cgroup grants.
        return PAST_VISIBLE if self.me.local_rank >= torch.cuda.device_count() else 0

    def _memory_share(self) -> int:
        """The largest size this rank's buffers (two of it) may take: a share of the GPU's free
        memory, or of the node's available RAM split between its ranks."""
        if self.device.type == "cuda":
            free, _ = self.torch.cuda.mem_get_info(self.device)
            return int(free * BW_MEMORY_SHARE / 2)
        import psutil

        return int(psutil.virtual_memory().available * BW_MEMORY_SHARE / self.me.nproc / 2)


def _pair(a: int, b: int, size: int, times: list[float]) -> Pair:
    seconds = statistics.fmean(times)
    return Pair(a, b, size, round(seconds * 1e6, 3), round(size / seconds / 1e9, 6) if seconds > 0 else 0.0)


if __name__ == "__main__":
    sys.exit(main())
