"""What one run has learnt so far, and the deadlines its phases share; what a phase hands back
(Learnt) and the one way it is folded into the run (fold, called by the runner)."""

from __future__ import annotations

import logging
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Callable, Generator, Iterator, TypeVar, cast

from netcheck.cluster import compat, hostgather, rendezvous
from netcheck.cluster.store import Exchange
from netcheck.config import Config
from netcheck.core.budget import TimeBudget
from netcheck.core.bwrecords import BandwidthResult
from netcheck.core.deadline import Deadline
from netcheck.core.meshrecords import Attempt, FlaggedPaths, PathCauses
from netcheck.core.model import (
    HOST,
    JOINER,
    ClusterVerdict,
    ConntrackTable,
    EnvRow,
    Finding,
    Member,
    NodeFacts,
    Report,
    Stall,
)
from netcheck.core.storeerrors import StoreError, first_line
from netcheck.facts.linkcounters import link_down
from netcheck.facts.listener import Listener
from netcheck.phases import stop
from netcheck.rules import nic as nic_rules
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules import run as run_rules
from netcheck.rules import storetrouble as storetrouble_rules
from netcheck.rules.registry import RUN_TIMEOUT

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Outcome:
    report: Report
    exit_code: int
    stopped_by: signal.Signals | None = None  # SIGINT or SIGTERM: the exit code is 128 + it
    report_out: Callable[[], None] = lambda: None  # called once the report is written


@dataclass(frozen=True)
class Lost:
    """Nodes that stopped answering in a phase (Run.lose names them, and they are not waited for again)."""
    phase: str
    names: dict[int, str]    # rank -> hostname of every node the phase asked
    ranks: tuple[int, ...]   # those it never heard


@dataclass(frozen=True)
class Learnt:
    """What a phase (or a step of one) hands back: its findings and whatever else it learnt. The
    runner alone folds it into the run (runner.fold); None: the phase did not learn that."""

    findings: tuple[Finding, ...] = ()
    withdrawn: frozenset[str] = frozenset()   # checks whose earlier findings these replace
    earlier: tuple[Finding, ...] | None = None   # the earlier findings as they stand now (the host's verdict
                                                 # merged in, its stop told): in place of the run's
    cluster: ClusterVerdict | None = None     # a joiner's: the host's verdict about it
    role: str | None = None                   # HOST: this node hosts (reach.take_role)
    rank: int | None = None                   # its seat (the host's 0, a joiner's once seated)
    unseated: bool = False                    # a joiner the host gave no seat: no rank, whatever --node-rank said
    listener: Listener | None = None          # the host's rendezvous port, kept once its own connect passed
    arrivals: hostgather.HostState | None = None   # the host's: every process that came
    alive: dict[int, str] | None = None       # rank -> hostname of the nodes the later phases wait for
    facts: NodeFacts | None = None
    budget: TimeBudget | None = None
    members: tuple[Member, ...] | None = None
    attempts: tuple[Attempt, ...] | None = None
    flagged: FlaggedPaths | None = None
    causes: PathCauses | None = None
    tables_after: dict[int, ConntrackTable | None] | None = None
    unranked_faulty: tuple[str, ...] | None = None
    lost_names: dict[int, str] | None = None
    recommendation: nic_rules.Recommendation | None = None
    env_table: tuple[EnvRow, ...] | None = None
    bandwidth: BandwidthResult | None = None
    host_lost: bool | None = None             # the host, or the host's own store, named lost
    baseline_judged: bool | None = None
    lost: Lost | None = None


def seated_rank(seat: rendezvous.Seat) -> int:
    """The rank of this node's seat, for the phases after the rendezvous: runner._run_phases
    runs none of them for a node that was not seated (seat.rank is None)."""
    assert seat.rank is not None, "a phase after the rendezvous ran for a node not seated"
    return seat.rank


@dataclass
class Run:
    """What one run has learnt so far; turned into a Report whatever happens."""

    config: Config
    progress: Callable[[str], None]
    # What a lost host's joiner asks of the path to it (phases.hostpath): I/O, which the run's
    # state leaves to the phases, as it leaves printing to `progress`.
    ask_host_path: Callable[[Run], tuple[bool, tuple[Finding, ...]]]  # whether the path to the host drops
                                              # full-size frames, and what this node says of it
    started: float = field(default_factory=time.monotonic)   # when --timeout began counting (monotonic)
    hosts_file: dict[str, str] = field(default_factory=dict)  # address -> name in this node's /etc/hosts
                                              # (facts.local.hosts_file_names, read once at the start)
    stall: Callable[[], Stall] = Stall        # the run's longest stall so far (facts.stall.StallWatch)
    budget: TimeBudget = field(init=False)   # every deadline below, fixed at the start
    role: str = JOINER
    rank: int | None = None
    facts: NodeFacts | None = None
    members: tuple[Member, ...] = ()
    unranked_faulty: tuple[str, ...] = ()   # hostnames of nodes at fault that were never seated
    lost_names: dict[int, str] = field(default_factory=dict)   # rank -> hostname of nodes whose facts never came
    attempts: tuple[Attempt, ...] = ()
    flagged: FlaggedPaths = FlaggedPaths()  # mesh.connect's failed paths (host's word)
    causes: PathCauses = PathCauses()         # what explains failed connects (the host's word): its
                                              # translations from the rendezvous, its wrong prefixes from the mesh
    tables_after: dict[int, ConntrackTable | None] = field(default_factory=dict)   # the host's: each node's
                                              # connection-tracking table after its mesh connects (MeshResults)
    recommendation: nic_rules.Recommendation | None = None
    env_table: tuple[EnvRow, ...] = ()
    bandwidth: BandwidthResult | None = None
    arrivals: hostgather.HostState | None = None   # the host's: every process that came
    listener: Listener | None = None               # the host's rendezvous port, until the store takes it
    seat: rendezvous.Seat | None = None            # this process's seat at the host's store, once taken
    alive: dict[int, str] = field(default_factory=dict)  # rank -> hostname of nodes not lost yet
    findings: list[Finding] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    unfinished: str | None = None
    stopped_by: signal.Signals | None = None  # the signal that ended the run early
    stopped_in: str | None = None             # ... and the phase it came in
    host_lost: bool = False   # the host, or on the host its own store, stopped answering: named once
    cluster: ClusterVerdict | None = None  # a joiner's: the host's verdict about it, once heard
    stalls_named: int = 0   # the host's store stalls (a joiner's held-up requests) named so far
    baseline_judged: bool = False   # --baseline compared (goodbye.judge_baseline): once, before the verdict is told

    def __post_init__(self) -> None:
        self.budget = TimeBudget(self.config.timeout, self.started)
        self.rank = self.config.launch.node_rank

    @property
    def local_facts(self) -> NodeFacts:
        """This node's facts, for the phases after "local": runner._run_phases runs none of
        them where gathering the facts failed (run.facts is None)."""
        assert self.facts is not None, "a phase after 'local' ran without this node's facts"
        return self.facts

    @property
    def deadline(self) -> Deadline:
        return self.budget.run

    @property
    def join_seconds(self) -> float:
        return self.budget.join_seconds

    @property
    def join_deadline(self) -> Deadline:
        return self.budget.join

    def phase_deadline(self, seconds: float | None = None) -> Deadline:
        """The phases' end (the run's less the report's reserve), or `seconds` from now if sooner."""
        return self.budget.phases.within(seconds) if seconds is not None else self.budget.phases

    def goodbye_deadline(self) -> Deadline:
        return self.budget.goodbye

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.progress(f"{name}...")
        log.debug("phase %s: start, %.3f s left", name, self.deadline.remaining())
        start = time.monotonic()
        earlier = self.unfinished  # the first phase that did not finish is the one to name
        self.unfinished = earlier or name
        try:
            yield
            self.unfinished = earlier
        except KeyboardInterrupt as e:
            self.stop(e)
            raise
        except stop.HostStopped as e:   # the host's word that a signal stopped it: this node's phases end
            self.hear_host_stopped(e.told)
            raise
        except compat.TorchSlow as e:
            self.findings.append(run_rules.torch_slow_finding(name, str(e), self.my_ranks()))
        except compat.TorchUnusable as e:
            self.findings.append(run_rules.torch_finding(name, str(e), self.my_ranks()))
        except Exception as e:  # noqa: BLE001 - the phase boundary: an internal error, reported
            log.debug("phase %s: %s", name, type(e).__name__, exc_info=e)
            if not compat.store_lost(e):   # a store error named by torch's, as it was
                self.findings.append(run_rules.internal_finding(name, e.original if isinstance(e, StoreError) else e))
            else:
                self.lose_store(name, first_line(e))
        finally:
            self.timings[name] = round(time.monotonic() - start, 3)
            log.debug("phase %s: end, %.3f s", name, self.timings[name])
        if self.seat is not None:
            self.findings += self.stall_findings(self.seat.exchange)
        if self.deadline.expired() and not any(f.check == RUN_TIMEOUT for f in self.findings):
            # The first phase past the end is named; the goodbye after it only ran out of time too.
            self.findings.append(run_rules.timeout_finding(name, self.config.timeout))

    def stop(self, signalled: KeyboardInterrupt) -> None:
        """A signal ends the run: said once, in the phase it came in, before the host tells
        its verdict on the way out (a stopped host's joiners must not hear a pass)."""
        if self.stopped_by is None:
            self.stopped_by = stop.signal_of(signalled)
            phase = self.stopped_in = self.unfinished or next(reversed(self.timings), None)
            self.findings.append(run_rules.stopped_finding(self.stopped_by.name, phase, self.my_ranks()))

    def hear_host_stopped(self, told: ClusterVerdict) -> None:
        """A joiner heard the host say a signal stopped it: its verdict is kept (its findings about
        this node are this node's own), and the stop said once, naming no node."""
        if self.cluster is None:
            fold(self, heard_verdict(self, told))

    def lose(self, phase: str, names: dict[int, str], ranks: list[int]) -> None:
        """Nodes that stopped answering in `phase`: named there, and not waited for again;
        under the stall, their likely cause, where another client held the host's store up
        during the phase (storetrouble.stall_explained)."""
        down = self.own_links_down() if self.role == HOST and ranks else ()
        if down:   # the host's own link, not its joiners: they all went quiet at once for it
            self.findings.append(rdzv_rules.own_link_down(phase, self.my_ranks(), down, len(ranks)))
            for rank in ranks:
                self.alive.pop(rank, None)
            return
        lost = rdzv_rules.lost_findings(phase, names, ranks)
        if self.seat is not None:
            stalled = self.stall_findings(self.seat.exchange)
            lost = storetrouble_rules.stall_explained(lost, stalled) + stalled
        self.findings += lost
        for rank in ranks:
            self.alive.pop(rank, None)

    def own_links_down(self) -> tuple[str, ...]:
        """This node's interfaces toward its peers (those its mesh connects left by, else every
        one with an address but loopback) where every one of them is down now; () otherwise."""
        mine = set(self.my_ranks())
        used = {a.src_ifname for a in self.attempts if a.src in mine and a.connected and a.src_ifname}
        if not used and self.facts is not None:
            used = {n.name for n in self.facts.nics.nics if n.addresses and n.kind != "loopback"}
        down = tuple(sorted(i for i in used if link_down(i)))
        return down if down and len(down) == len(used) else ()

    def stall_findings(self, ex: Exchange) -> list[Finding]:
        """What held the host's store up since the phase began, named once: the host's own
        stalls with the clients behind them, or a joiner's requests that waited one out."""
        if ex.watch is not None:
            stalls = ex.watch.stalls[self.stalls_named:]
            self.stalls_named += len(stalls)
            return storetrouble_rules.store_stall_findings(tuple(stalls), self.members,
                                                   self.known_addresses()) if stalls else []
        waits = ex.held_up[self.stalls_named:]
        self.stalls_named += len(waits)
        return storetrouble_rules.held_up_findings(tuple(waits))

    def known_addresses(self) -> dict[str, str]:
        """address -> name of the machines the host knows of beside the seated nodes: its
        /etc/hosts, and the addresses the visitors' records give (a node kept out is known)."""
        visitors = self.arrivals.visitors.values() if self.arrivals else ()
        return self.hosts_file | {v.address: v.hostname for v in visitors if v and v.address}

    def lose_host(self, phase: str, seen: str = "") -> None:
        """The host died, or the path to it: named once, in the phase it happened (host_lost_findings)."""
        self.findings += self.host_lost_findings(phase, seen)
        self.host_lost = True

    def lose_store(self, phase: str, seen: str) -> None:
        """This node's connection to the host's store broke, or a request went unanswered to
        the run's end: named once, in the phase it happened (store_lost_findings)."""
        self.findings += self.store_lost_findings(phase, seen)
        self.host_lost = True

    def host_lost_findings(self, phase: str, seen: str = "") -> tuple[Finding, ...]:
        """The host died, or the path to it: what this node's store client saw of it, and the path
        to it asked at once (ask_host_path); () where the host was named lost already."""
        if self.host_lost:
            return ()
        blackhole, said = self.ask_host_path(self)
        return said + tuple(rdzv_rules.lost_findings(phase, {0: "the host"}, [0], seen, blackhole,
                                                     self.own_links_down(), self.my_ranks()))

    def store_lost_findings(self, phase: str, seen: str) -> tuple[Finding, ...]:
        """This node's connection to the host's store broke, or a request went unanswered to
        the run's end (Exchange): on a joiner the host is lost; on the host its own store stopped
        answering it, and the joiners lost it too. () where that was said already."""
        if self.role != HOST:
            return self.host_lost_findings(phase, seen)
        if self.host_lost:
            return ()
        return (rdzv_rules.own_store_lost(phase, self.my_ranks(), self.config.rdzv.port, seen),)

    def my_ranks(self) -> tuple[int, ...]:
        return () if self.rank is None else (self.rank,)


# Learnt's fields that set the run's field of their name; the rest are folded apart.
_SET = tuple(f.name for f in fields(Learnt) if f.name not in ("findings", "withdrawn", "earlier", "lost", "unseated"))


def fold(run: Run, learnt: Learnt) -> None:
    """What a phase learnt, into the run: its findings after the earlier ones (less those it
    withdrew), the nodes it lost named there, and what else it learnt in place of the run's (after
    the loss: a host whose own links went down is judged by the interfaces of its earlier connects)."""
    if learnt.earlier is not None:
        run.findings = list(learnt.earlier)
    if learnt.withdrawn:
        run.findings = [f for f in run.findings if f.check not in learnt.withdrawn]
    run.findings += learnt.findings
    if learnt.unseated:
        run.rank = None
    if learnt.lost is not None:
        run.lose(learnt.lost.phase, learnt.lost.names, list(learnt.lost.ranks))
    for name in _SET:
        if (value := getattr(learnt, name)) is not None:
            setattr(run, name, value)


def fold_each(run: Run, pieces: Generator[Learnt, None, T]) -> T:
    """What a phase learnt, piece by piece as it learnt it (a phase that yields: its seat before
    it waits, its measurements before the rules judge them): each folded as it comes, so what
    came before a signal or an internal error stays in the report beside it; then what the phase
    returns."""
    while True:
        try:
            learnt = next(pieces)
        except StopIteration as done:
            return cast(T, done.value)
        fold(run, learnt)


def heard_verdict(run: Run, told: ClusterVerdict) -> Learnt:
    """A joiner heard the host's verdict: its findings about this node become this node's own
    (the attributions the host made better in place of its own); where a signal stopped the host,
    that is said once, naming no node."""
    cluster, findings = run_rules.with_host_verdict(told, run.my_ranks(), run.findings)
    stopped = (run_rules.host_stopped_finding(told),) if told.stopped else ()
    return Learnt(stopped, earlier=tuple(findings), cluster=cluster)
