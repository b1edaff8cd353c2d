"""Phase 7, bandwidth, on one node: start this node's workers, watch them, collect.

Every node's netcheck calls `run_bandwidth` after the rendezvous, while the host's store
is still up. It starts --nproc-per-node `netcheck.bandwidth.worker` processes (ranks as torchrun
numbers them), reads their JSON events, and ends them all, whatever happens, before it
returns: each worker has its own process group, is killed with it in a `finally`, and
dies with netcheck even when netcheck is SIGKILLed (PR_SET_PDEATHSIG, set in the worker).

A dead worker (it exited or was killed), a hung one (no heartbeat for BW_STUCK_AFTER s) or
a failed one ends the phase for every node: this node posts an abort notice in the store,
every node sees it within BW_ABORT_POLL s, gives its workers BW_ABORT_GRACE s to report
what they measured, and kills them. Then each node posts an account of its workers and
reads everyone's, so every node's result names the dead rank and its node. A node that
loses the host's store (the host died, or the link to it: a request unanswered for
STORE_REPLY_TIMEOUT s) stops its workers the same way, and names the host. Each node beats
in the store while it watches; the host aborts for a node whose beat stops for
BW_STUCK_AFTER s (its netcheck hung, or its link was cut: nothing else would tell).

Store keys, under netcheck/RUN/bw/:
    pg/...     the workers' process groups (PrefixStore)
    alive/K    node K's beat, a counter it raises every BW_ABORT_POLL s (alive/posted: who beats)
    abort      a node saw a worker die, hang or fail, or the host a node go quiet: everyone stops
    node/K     node K's account of its workers (NodeReport)

Longer than 500 lines: starting, watching, aborting and collecting a node's workers share one watch
loop and its state; the doors and the faults' classification are doors.py's and faults.py's.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Callable, TypeVar

from netcheck.bandwidth.doors import door_of, knock_targets, open_door, unreached
from netcheck.bandwidth.faults import classify, in_flight, merge_faults, root_cause
from netcheck.bandwidth.sweep import DTYPES
from netcheck.bandwidth.worker import Event
from netcheck.cluster.collect import collect
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.budget import bandwidth_report_reserve
from netcheck.core.bwrecords import (
    STAGES,
    BandwidthResult,
    Door,
    Fault,
    InFlight,
    NodeLinks,
    NodeReport,
    Pair,
    PeerSegments,
    Sweep,
    SweepOptions,
    Unanswered,
    headline,
)
from netcheck.core.bwtext import progress_bar
from netcheck.core.constants import BW_CUDA_START_AFTER, BW_STUCK_AFTER
from netcheck.core.deadline import Deadline
from netcheck.core.storeerrors import StoreError
from netcheck.core.storekeys import BW_ABORT, BW_ALIVE, BW_DOOR, BW_NODE
from netcheck.facts.busy import busy_processes, cpu_snapshot
from netcheck.facts.linkcounters import StageCounters, merged, own_addresses, unanswered, worth_reporting
from netcheck.facts.local import rdma_roots

BW_ABORT_POLL = 1.0          # how often a node looks for another node's abort notice in the store
                             # (each wake-up costs the measurement: on 2 CPUs 20 Hz cost ~3% of busbw)
BW_ABORT_GRACE = 1.0         # after an abort, workers get this long to report before they are killed
BW_REPORT_WAIT = 5.0         # once its workers are done, a node waits this long at most for the others' reports
BW_MAX_EVENT_BYTES = 1 << 20  # a worker's event line longer than this is dropped

T = TypeVar("T")

POLL = 0.25          # the watch loop's tick when nothing arrives (output and a worker's exit wake
                     # it at once; each idle wake-up takes CPU from the measurement)
STDERR_LINES = 20    # kept per worker, for the failure's evidence
DRAIN_WAIT = 1.0     # after the workers end, reading what they wrote last
KILL_WAIT = 2.0      # for SIGKILLed workers to go; one that does not is stuck in the kernel


def run_bandwidth(ex: Exchange, store_host: str, store_port: int, node_rank: int, nnodes: int,
                  nproc_per_node: int, options: SweepOptions, deadline_s: float,
                  progress: Callable[[str], None] | None = None) -> BandwidthResult:
    """Run this node's share of the phase; returns the cluster-wide result as this node saw it.

    ex: this node's connection to the host's store; the workers connect to
    store_host:store_port themselves. nproc_per_node must be the same on every node (ranks
    are node_rank * nproc + local_rank, as torchrun numbers them). Returns within
    deadline_s, having ended every worker.
    """
    started = time.monotonic()
    deadline = Deadline(deadline_s)
    reserve = bandwidth_report_reserve(deadline_s)
    workers_deadline = Deadline(max(0.0, deadline.remaining() - reserve))
    watch = Watch(node_rank, nnodes, [], ex, workers_deadline, progress, options, nproc_per_node)
    door = _posted_door(ex, node_rank)
    try:
        return _measured(ex, store_host, store_port, node_rank, nnodes, nproc_per_node, options, watch,
                         door, started, deadline)
    finally:
        if door is not None:
            door.close()


def _posted_door(ex: Exchange, node_rank: int) -> socket.socket | None:
    """This node's Door, posted for its peers (bandwidth.doors); None where it could not be."""
    door = open_door()
    if door is None:
        return None
    try:
        ex.post(BW_DOOR, node_rank, door_of(node_rank, door))
    except StoreError:
        door.close()
        return None
    return door


def _measured(ex: Exchange, store_host: str, store_port: int, node_rank: int, nnodes: int, nproc_per_node: int,
              options: SweepOptions, watch: "Watch", door: socket.socket | None, started: float,
              deadline: Deadline) -> BandwidthResult:
    interrupted, before = False, cpu_snapshot()
    watch.counters.enter("start")
    try:
        for local in range(nproc_per_node):
            watch.workers.append(_spawn(store_host, store_port, ex.run_id, node_rank, nnodes,
                                        nproc_per_node, local, options, watch.deadline))
        with ex.within(watch.deadline):   # a store held up or closed: the accounts' time is kept
            watch.run()
    except OSError as e:  # could not start a worker (no memory, no processes left)
        watch.spawn_error = f"could not start a worker: {e}"
        watch.post_abort()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: this node leaves now
        interrupted = True
        raise
    finally:
        watch.stop("stopped")
        if interrupted:
            _say_stopped(ex, node_rank, watch)
    faults = watch.faults()
    watch.counters.enter(None)
    busy = busy_processes(node_rank, nproc_per_node, before, cpu_snapshot())
    short = door is not None and (bool(faults) or watch.abort_at is not None)
    knocked = _unreached(ex, node_rank, nnodes, deadline) if short else ()
    links = NodeLinks(node_rank, tuple(watch.counters.stages), worth_reporting(merged(watch.peers)),
                      own_addresses(), tuple(watch.unanswered.values()), knocked)
    # The nodes' workers end together (the collectives tie them, or the abort does), so
    # a node whose account is not in within a few seconds is not coming.
    reports = _exchange(ex, NodeReport(node_rank, tuple(faults), *watch.backend, busy, links),
                        [n for n in range(nnodes) if n not in watch.quiet], deadline.within(BW_REPORT_WAIT))
    everyone = merge_faults(faults, reports, node_rank, nnodes, watch.furthest_stage(), ex.lost)
    return _result(nnodes, nproc_per_node, options, watch, everyone, started, reports)


def _say_stopped(ex: Exchange, node_rank: int, watch: "Watch") -> None:
    """An interrupted node's account, posted on its way out: the others stop waiting for
    it at once instead of at the end of their report wait."""
    stopped = Fault(node_rank, -1, -1, watch.furthest_stage(), "stopped",
                    f"node {node_rank}'s netcheck was interrupted (Ctrl-C or SIGTERM)")
    try:
        ex.post(BW_NODE, node_rank, NodeReport(node_rank, (stopped,), *watch.backend))
    except StoreError:
        pass  # the host's store is gone too: nobody is waiting


def _unreached(ex: Exchange, node_rank: int, nnodes: int, deadline: Deadline) -> tuple[int, ...]:
    """The peers whose Door this node's knocks found dark, once its sweep stopped short."""
    peers = knock_targets(node_rank, nnodes, ex.run_id)
    try:
        found = ex.read_many([ex.key(BW_DOOR, n) for n in peers])
    except StoreError:
        return ()
    doors = {d.node: d for d in found.values() if isinstance(d, Door) and d.node in peers}
    return unreached(doors, deadline)


def _exchange(ex: Exchange, mine: NodeReport, nodes: list[int], deadline: Deadline) -> dict[int, NodeReport]:
    """Post this node's account and read the given nodes', until all are in or the deadline."""
    try:
        ex.post(BW_NODE, mine.node, mine)
        return collect(ex, BW_NODE, nodes, deadline)
    except StoreError:  # the host's store is gone: this node's own view must do
        return {mine.node: mine}


# --- starting workers ----------------------------------------------------------------------

def worker_env(base: dict[str, str], store_host: str, store_port: int, node_rank: int, nnodes: int,
               nproc: int, local_rank: int) -> dict[str, str]:
    """The worker's environment: this one, with the variables torchrun gives its workers."""
    env = dict(base)
    env.update(RANK=str(node_rank * nproc + local_rank), LOCAL_RANK=str(local_rank),
               WORLD_SIZE=str(nnodes * nproc), LOCAL_WORLD_SIZE=str(nproc),
               GROUP_RANK=str(node_rank), MASTER_ADDR=store_host, MASTER_PORT=str(store_port))
    if nproc > 1:
        # torchrun's default too: several ranks each spawning a thread per core starve each other.
        env.setdefault("OMP_NUM_THREADS", "1")
    # NCCL's exceptions name a category ("invalid usage"); the cause is in its WARN line, which
    # lands in the worker's stderr (nccl_warning reads it): printed only when something fails.
    env.setdefault("NCCL_DEBUG", "WARN")
    return env


def _spawn(store_host: str, store_port: int, run_id: str, node_rank: int, nnodes: int, nproc: int,
           local_rank: int, options: SweepOptions, deadline: Deadline) -> "Worker":
    argv = [sys.executable, "-m", "netcheck.bandwidth.worker", "--options", codec.dumps(options),
            "--run-id", run_id, "--deadline-at", repr(deadline.at), "--parent", str(os.getpid())]
    env = worker_env(dict(os.environ), store_host, store_port, node_rank, nnodes, nproc, local_rank)
    # Its own session and process group: killed as a group, and a Ctrl-C at the terminal
    # reaches netcheck only, which then ends its workers itself.
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None, "Popen without the pipes it was asked for"
    return Worker(local_rank, node_rank * nproc + local_rank, proc, proc.stdout, proc.stderr, time.monotonic())


# --- watching them ---------------------------------------------------------------------------

class Lines:
    """Complete lines from a pipe, each at most `limit` bytes (longer ones are dropped)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.partial = b""
        self.overlong = False

    def feed(self, data: bytes) -> list[bytes]:
        *lines, rest = (self.partial + data).split(b"\n")
        out = []
        for line in lines:
            if not self.overlong and len(line) <= self.limit:
                out.append(line)
            self.overlong = False
        self.overlong = self.overlong or len(rest) > self.limit
        self.partial = b"" if self.overlong else rest
        return out


@dataclass
class Worker:
    local_rank: int
    rank: int
    proc: subprocess.Popen[bytes]
    out: IO[bytes]                        # its stdout's pipe: events, one a line
    err: IO[bytes]                        # its stderr's pipe
    heard: float                          # when its last event came
    stage: str = "start"
    failure: str = ""                     # what it said when a stage failed
    failed_at: float | None = None        # when this node heard it (time.time(): compared across nodes)
    done: bool = False
    fate: str = ""                        # what the node did to it: "stuck" | "timeout" | "stopped"
    starting_cuda: bool = False           # between its "cuda" event and the next: may be silent longer
    sweep: Sweep | None = None            # the last table it reported: where its sweep is
    pairs: tuple[Pair, ...] = ()          # the node pairs it has reported measured
    stdout: Lines = field(default_factory=lambda: Lines(BW_MAX_EVENT_BYTES))
    stderr: Lines = field(default_factory=lambda: Lines(BW_MAX_EVENT_BYTES))
    stderr_tail: deque = field(default_factory=lambda: deque(maxlen=STDERR_LINES))

    def running(self) -> bool:
        return self.proc.poll() is None

    def pipe(self, stream: str) -> IO[bytes]:
        """The pipe Watch registered as `stream` ("out" or "err")."""
        return self.err if stream == "err" else self.out

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _registered(key: selectors.SelectorKey) -> tuple[Worker, str, IO[bytes]]:
    """The worker, the stream's name and its pipe, as Watch.run registered them."""
    w, stream = key.data
    return w, stream, w.pipe(stream)


@dataclass
class Watch:
    """This node's workers until they are done, dead, hung, aborted or out of time."""

    node: int
    nnodes: int
    workers: list[Worker]
    ex: Exchange
    deadline: Deadline
    progress: Callable[[str], None] | None = None
    options: SweepOptions = field(default_factory=SweepOptions)
    nproc: int = 1
    first_row_at: float | None = None     # the budget's clock starts with the first row
    sweeps: dict[tuple[str, str], Sweep] = field(default_factory=dict)
    pairs: tuple[Pair, ...] = ()
    backend: tuple[str, str] = ("", "")
    abort_at: float | None = None
    polled: float = 0.0
    listed: bool = False                  # this node's beat is on the host's list
    spawn_error: str = ""
    stopped: bool = False
    beats: dict[int, tuple[int, float]] = field(default_factory=dict)  # host: node -> (count, when it rose)
    counters: StageCounters = field(
        default_factory=lambda: StageCounters(ib_sysfs=rdma_roots(os.environ)[0]))
    peers: list[PeerSegments] = field(default_factory=list)   # every worker's connections, as they reported them
    quiet: list[int] = field(default_factory=list)  # host: nodes whose beat stopped
    # The connections this node's peers left unanswered where its workers stopped short, by
    # address (the most of its two looks: at the first trouble, and before the kill).
    unanswered: dict[str, Unanswered] = field(default_factory=dict)

    def run(self) -> None:
        with selectors.DefaultSelector() as sel:
            for w in self.workers:
                sel.register(w.out, selectors.EVENT_READ, (w, "out"))
                sel.register(w.err, selectors.EVENT_READ, (w, "err"))
            while any(w.running() for w in self.workers):
                self.read(sel, POLL)
                if self.ends_now(time.monotonic()):
                    break
            if self.abort_at is None:
                self.local_trouble()  # the last worker's death must still reach the other nodes
            self.stop("stopped")
            self.drain(sel)

    def ends_now(self, now: float) -> bool:
        """Notice deaths and silences, post or see an abort; True when it is time to stop."""
        for w in self.workers:
            if w.running() and now - w.heard > (BW_CUDA_START_AFTER if w.starting_cuda else BW_STUCK_AFTER):
                w.fate = "stuck"
                w.kill()
        # Without the host's store this node can neither hear of an abort nor report: its
        # sweep is over (the workers' peers see them go).
        if self.abort_at is None and (self.local_trouble() or self.others_aborted(now) or self.ex.lost):
            self.abort_at = now + BW_ABORT_GRACE
            self.note_unanswered()
        if self.deadline.expired():
            self.stop("timeout")
            return True
        return self.abort_at is not None and now >= self.abort_at

    def local_trouble(self) -> bool:
        bad = any(w.fate == "stuck" or (not w.running() and w.proc.returncode != 0) for w in self.workers)
        if bad:
            self.post_abort()
        return bad

    def post_abort(self) -> None:
        self._store(lambda: self.ex.put(self.ex.key(BW_ABORT), self.node))

    def others_aborted(self, now: float) -> bool:
        """Every BW_ABORT_POLL s: beat, and look for an abort; the host also listens to
        the others' beats and aborts for a node gone quiet."""
        if now - self.polled < BW_ABORT_POLL:
            return False
        self.polled = now
        self._store(self._beat)
        if self.node == 0 and self.heard_quiet(now):
            self.post_abort()
            return True
        return bool(self._store(lambda: self.ex.has(self.ex.key(BW_ABORT))))

    def _beat(self) -> None:
        self.ex.add_to(self.ex.key(BW_ALIVE, self.node), 1)
        if not self.listed:  # the first beat: listed for the host
            self.ex.enlist(self.ex.listing(BW_ALIVE), str(self.node))
            self.listed = True

    def heard_quiet(self, now: float) -> bool:
        """Whether a node that was beating has stopped for BW_STUCK_AFTER s: its netcheck
        hung, or its link was cut. The host's workers may be waiting on that node's in a
        collective that no reset will ever end, so the host cannot rely on them to notice.
        A node that never beat is not judged here: it may still be starting. Every beat is
        read in one request (a request per node per second would load the store with
        thousands a second at thousands of nodes)."""
        for n, count in (self._store(self._beats) or {}).items():
            if count > self.beats.get(n, (0, now))[0]:
                self.beats[n] = (count, now)
        self.quiet = sorted(n for n, (_, rose) in self.beats.items() if now - rose > BW_STUCK_AFTER)
        return bool(self.quiet)

    def _beats(self) -> dict[int, int]:
        """node -> its beat count, for every node that has beaten."""
        nodes = sorted(n for n in self.ex.posted(BW_ALIVE) or () if 0 < n < self.nnodes)
        return dict(zip(nodes, self.ex.read_counters([self.ex.key(BW_ALIVE, n) for n in nodes]))) if nodes else {}

    def _store(self, call: Callable[[], T]) -> T | None:
        # A store that has gone raises here once, then at once (Exchange.lost): ends_now
        # sees it.
        try:
            return call()
        except StoreError:
            return None

    def stop(self, fate: str) -> None:
        """Kill every worker still running, naming why; reap them all (a worker stuck
        uninterruptibly in the kernel cannot be, and is named by faults()). Once: a later
        call would wait KILL_WAIT again for such a worker, past the phase's deadline."""
        if self.stopped:
            return
        self.stopped = True
        if any(w.running() or w.proc.returncode for w in self.workers):   # stopped short: who went quiet
            self.note_unanswered()
        for w in self.workers:
            if w.running():
                w.fate = w.fate or fate
                w.kill()
        until = time.monotonic() + KILL_WAIT
        for w in self.workers:
            try:
                w.proc.wait(timeout=max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass

    def note_unanswered(self) -> None:
        """Read which peers left this node's connections unanswered, while the workers' sockets
        (or the orphans of those that exited) still wait on them: a port or link that went dark
        after the mesh passed shows here, where the workers' own errors say only "timeout"."""
        for u in unanswered():
            if u.address not in self.unanswered or u.connections > self.unanswered[u.address].connections:
                self.unanswered[u.address] = u

    def read(self, sel: selectors.BaseSelector, timeout: float) -> None:
        for key, _ in sel.select(timeout):
            w, stream, pipe = _registered(key)
            data = os.read(pipe.fileno(), 1 << 16)
            if not data:
                sel.unregister(pipe)
                pipe.close()
            elif stream == "err":
                w.stderr_tail.extend(line.decode(errors="replace") for line in w.stderr.feed(data))
            else:
                for line in w.stdout.feed(data):
                    self.handle(w, line)

    def drain(self, sel: selectors.BaseSelector) -> None:
        """What the workers wrote before they ended (their pipes close once read)."""
        until = time.monotonic() + DRAIN_WAIT
        while sel.get_map() and time.monotonic() < until:
            self.read(sel, POLL)
        for key in list(sel.get_map().values()):
            _, _, pipe = _registered(key)
            sel.unregister(pipe)
            pipe.close()

    def handle(self, w: Worker, line: bytes) -> None:
        try:
            event = codec.loads(Event, line, BW_MAX_EVENT_BYTES)
        except codec.DecodeError:
            return  # not ours: the worker writes nothing else to this pipe, so ignore it
        w.heard = time.monotonic()
        w.starting_cuda = event.kind == "cuda"
        if event.kind == "stage":
            w.stage = event.stage
            self.counters.enter(event.stage)   # the first worker in: the nodes' workers move together
        elif event.kind == "failed":
            w.stage, w.failure, w.failed_at = event.stage, event.detail, time.time()
        elif event.kind == "done":
            w.done = True
        elif event.kind == "backend":
            self.backend = (event.detail, event.reason)
        elif event.kind == "sweep" and event.sweep is not None:
            w.sweep = event.sweep
            self.keep_sweep(event.sweep)
        elif event.kind == "links":
            self.peers += event.peers
        elif event.kind == "pairs":
            w.pairs = event.pairs
            if len(event.pairs) > len(self.pairs):
                self.pairs = event.pairs

    def keep_sweep(self, sweep: Sweep) -> None:
        """Every worker reports the same table; keep the furthest one (any may die first)."""
        key = (sweep.stage, sweep.op)
        old = self.sweeps.get(key)
        if old is not None and len(old.rows) + len(old.skipped) >= len(sweep.rows) + len(sweep.skipped):
            return
        self.sweeps[key] = sweep
        if self.progress and sweep.rows and (old is None or len(sweep.rows) > len(old.rows)):
            row, now = sweep.rows[-1], time.monotonic()
            self.first_row_at = self.first_row_at or now
            self.progress(f"bandwidth {sweep.stage} {sweep.op} {row.size} B: busbw {row.busbw:.3g} GB/s "
                          + progress_bar(now - self.first_row_at, self.options.budget_s))

    def furthest_stage(self) -> str:
        return max((w.stage for w in self.workers), key=STAGES.index, default="start")

    def faults(self) -> list[Fault]:
        found = [Fault(self.node, -1, -1, "start", "died", self.spawn_error)] if self.spawn_error else []
        for w in self.workers:
            verdict = classify(w.fate, w.proc.returncode, w.failure, w.done, w.stage, list(w.stderr_tail))
            if w.proc.returncode is None:
                verdict = ("stuck", f"pid {w.proc.pid} survived SIGKILL in stage {w.stage}: stuck in "
                                    "the kernel (the GPU driver?) and left behind")
            if verdict:
                found.append(Fault(self.node, w.rank, w.local_rank, w.stage, *verdict, self.in_flight(w),
                                   w.failed_at if verdict[0] == "failed" else None))
        return found

    def in_flight(self, w: Worker) -> InFlight | None:
        return in_flight(w.stage, w.sweep, w.pairs, self.node, self.nnodes, self.nproc, self.options)


def _result(nnodes: int, nproc: int, options: SweepOptions, watch: Watch, faults: list[Fault],
            started: float, reports: dict[int, NodeReport]) -> BandwidthResult:
    # When this node's workers never got as far as choosing, another node's may have.
    known = [watch.backend] + [(r.backend, r.backend_reason) for r in reports.values()]
    backend = next((b for b in known if b[0]), ("", ""))
    order = {op: i for i, op in enumerate(options.op)}
    sweeps = sorted(watch.sweeps.values(), key=lambda s: (STAGES.index(s.stage), order.get(s.op, 0)))
    stage, why = root_cause(faults)
    per_param = DTYPES[options.grad_dtype][0]
    headlines = tuple(h for s in sweeps if (h := headline(s, options, per_param, nnodes)))
    ordered = sorted(reports.values(), key=lambda r: r.node)
    return BandwidthResult(backend[0], backend[1], nnodes, nproc, tuple(sweeps), watch.pairs, stage,
                           why, tuple(faults), round(time.monotonic() - started, 3), headlines=headlines,
                           busy=tuple(p for r in ordered for p in r.busy),
                           links=tuple(r.links for r in ordered if r.links is not None))
