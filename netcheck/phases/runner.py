"""The phases in order, each under its own deadline inside --timeout.

The runner gathers facts and asks the rules in `diagnose` for findings; it prints nothing
itself (progress goes through the callback the CLI hands it) and always returns a report,
also when a phase fails, times out or is interrupted.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from netcheck.rules import (
    baseline, bw as bwdiag, rdzv as diagnose, env as envdiff, nic as recommend,
    launch as topology,
)
from netcheck.core import codec, compat
from netcheck.cluster import mesh, rendezvous
from netcheck.bandwidth.orchestrate import run_bandwidth
from netcheck.config import Config
from netcheck.core.constants import (
    BW_STARTUP_SECONDS, ENV_PHASE_LIMIT, EXIT_BY_VERDICT, EXIT_INTERNAL, EXIT_INTERRUPTED,
    GOODBYE_WAIT, LOOKUP_TIMEOUT, MESH_PHASE_LIMIT, MIN_PHASE_SECONDS, REPORT_RESERVE,
    RESULTS_WAIT, RUN_INTERNAL,
)
from netcheck.core.deadline import Deadline
from netcheck.core.envfacts import EnvFacts
from netcheck.facts.envinfo import gather_env
from netcheck.facts.launcher import default_run_id, detect_launch, is_torchrun_worker
from netcheck.facts.local import driver_gpus, gather_facts
from netcheck.cluster.mesh import Attempt
from netcheck.core.nictable import address_owners
from netcheck.core.bwrecords import NODE_GONE, BandwidthResult
from netcheck.core.model import (
    FAIL, ClockSample, EnvRow, Finding, Member, NodeEntry, NodeFacts, NodeResults, Report,
    hostnames, verdict_of,
)
from netcheck.facts.probe import PortTaken, listen, reach, resolve_addresses

# The host stops waiting for joiners at this share of --timeout, leaving the rest to the
# phases after the rendezvous and to the report.
JOIN_SHARE = 0.5


@dataclass
class Outcome:
    report: Report
    exit_code: int


@dataclass
class Run:
    """What one run has learnt so far; turned into a Report whatever happens."""

    config: Config
    progress: Callable[[str], None]
    deadline: Deadline = field(init=False)
    role: str = "joiner"
    rank: int | None = None
    facts: NodeFacts | None = None
    members: tuple[Member, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    recommendation: recommend.Recommendation | None = None
    env_table: tuple[EnvRow, ...] = ()
    bandwidth: BandwidthResult | None = None
    arrivals: rendezvous.HostState | None = None   # the host's: every process that came
    listener: socket.socket | None = None          # the host's rendezvous port, until the store takes it
    alive: dict[int, str] = field(default_factory=dict)  # rank -> hostname of nodes not lost yet
    findings: list[Finding] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    unfinished: str | None = None
    interrupted: bool = False
    host_lost: bool = False

    def __post_init__(self):
        self.deadline = Deadline(self.config.timeout)
        self.rank = self.config.launch.node_rank

    @property
    def join_deadline(self) -> Deadline:
        return Deadline(self.config.timeout * JOIN_SHARE, start=self.deadline.start)

    def phase_deadline(self, seconds: float | None = None) -> Deadline:
        """The rest of the run less the reserve kept for writing the report."""
        inner = Deadline(max(0.0, self.deadline.remaining() - REPORT_RESERVE))
        return inner.within(seconds) if seconds is not None else inner

    @contextmanager
    def phase(self, name: str):
        self.progress(f"{name}...")
        start = time.monotonic()
        earlier = self.unfinished  # the first phase that did not finish is the one to name
        self.unfinished = earlier or name
        try:
            yield
            self.unfinished = earlier
        except KeyboardInterrupt:
            self.interrupted = True
            raise
        except compat.TorchUnusable as e:
            self.findings.append(diagnose.torch_finding(name, str(e), self.my_ranks()))
        except Exception as e:  # noqa: BLE001 - the phase boundary: an internal error, reported
            if self.role == "host" or not compat.store_lost(e):
                self.findings.append(diagnose.internal_finding(name, e))
            else:
                self.lose_host(name)
        finally:
            self.timings[name] = round(time.monotonic() - start, 3)
        if self.deadline.expired():
            self.findings.append(diagnose.timeout_finding(name, self.config.timeout))

    def lose(self, phase: str, names: dict[int, str], ranks: list[int]) -> None:
        """Nodes that stopped answering in `phase`: named there, and not waited for again."""
        self.findings += diagnose.lost_findings(phase, names, ranks)
        for rank in ranks:
            self.alive.pop(rank, None)

    def lose_host(self, phase: str) -> None:
        """The host died, or the path to it: named once, in the phase it happened."""
        if not self.host_lost:
            self.host_lost = True
            self.findings += diagnose.lost_findings(phase, {0: "the host"}, [0])

    def my_ranks(self) -> tuple[int, ...]:
        return () if self.rank is None else (self.rank,)


def run_check(config: Config, progress: Callable[[str], None]) -> Outcome:
    run = Run(config, progress)
    try:
        _run_phases(run)
    except KeyboardInterrupt:
        run.interrupted = True
    if config.baseline is not None:
        draft = build_report(run)
        run.findings += baseline.drift_findings(config.baseline, draft.nodes, draft.recommend, draft.bandwidth)
    return Outcome(build_report(run), exit_code(run))


def _run_phases(run: Run) -> None:
    with run.phase("local"):
        run.facts = gather_facts(run.config.run_id, run.config.launch)
    if run.facts is None or "reach" not in run.config.phases or not _take_role(run):
        return
    if run.listener is None and not _reached(run):
        return
    if "rendezvous" not in run.config.phases:
        if run.listener is not None:
            run.listener.close()
        return
    seat = _host(run) if run.role == "host" else _joiner(run)
    if seat is None or seat.rank is None:
        return
    try:
        _after_rendezvous(run, seat)
    finally:
        _leave(run, seat)


def _reached(run: Run) -> bool:
    with run.phase("reach"):
        found = reach(run.config.rdzv.host, run.config.rdzv.port, run.join_deadline)
        run.facts = dataclasses.replace(run.facts, reach=found)
        run.findings += diagnose.reach_findings(found, run.my_ranks())
    return bool(run.facts.reach) and run.facts.reach.outcome == "open"


def _take_role(run: Run) -> bool:
    """Rank 0 hosts; without ranks, the node that owns the rendezvous address does.

    The host listens at once, before torch is imported, so early joiners queue instead
    of being refused; under torchrun, rank 0 hosts on the agent's own store instead
    (torchrun shares its rendezvous store with its workers). Two nodes on one machine (a
    loopback test) cannot both listen: the second finds netcheck holding the port and
    joins instead. False: this node was to host and cannot.
    """
    launch = run.config.launch
    rank = launch.node_rank
    if rank not in (None, 0) or (rank is None and not _rdzv_is_local(run)):
        return True
    run.role, run.rank = "host", 0
    if is_torchrun_worker(launch) and launch.variables.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return True
    with run.phase("reach"):
        try:
            run.listener = listen(run.config.rdzv.port)
            run.findings.append(diagnose.listen_pass(run.config.rdzv.port))
            return True
        except PortTaken as taken:
            if rank is None and any("netcheck" in h.cmdline for h in taken.holders):
                run.role, run.rank = "joiner", None
                return True
            run.findings.append(diagnose.listen_finding(taken.port, taken.holders, taken.strerror))
    return False


def _rdzv_is_local(run: Run) -> bool:
    addresses, _ = resolve_addresses(run.config.rdzv.host, LOOKUP_TIMEOUT)
    own = address_owners(run.facts.nics)
    return any(a in own for a in addresses)


def _host(run: Run) -> rendezvous.Seat | None:
    cfg, launch = run.config, run.config.launch
    seat = None
    with run.phase("rendezvous"):
        store = rendezvous.host_store(run.listener, cfg.rdzv.port, run.phase_deadline()) \
            if run.listener else rendezvous.client_store(cfg.rdzv.host, cfg.rdzv.port, run.phase_deadline())
        ex = rendezvous.Exchange(store, cfg.run_id, cfg.token)
        rendezvous.announce(ex, run.facts)
        seat, run.arrivals, waited = rendezvous.host_gather(
            ex, run.facts, (launch.nnodes_min, launch.nnodes_max), cfg.join_window, run.join_deadline)
        arrivals, malformed = dict(run.arrivals.arrivals), run.arrivals.malformed
        ranks, duplicates, extras = rendezvous.assign_ranks(arrivals, seat.arrival, launch.nnodes_max)
        roster = rendezvous.post_roster(seat, arrivals, ranks)
        rendezvous.report_back(seat, ClockSample(0.0, 0.0))
        results = rendezvous.collect(ex, NodeResults, "result", [e.arrival for e in roster.entries],
                                     run.phase_deadline(RESULTS_WAIT))
        gathered = rendezvous.gathering(ex, roster, arrivals, results, duplicates, extras,
                                        (launch.nnodes_min, launch.nnodes_max), launch.hostnames,
                                        malformed, waited, run.phase_deadline(RESULTS_WAIT))
        run.members = gathered.members
        run.findings += diagnose.reach_summary(run.members)
        run.findings += diagnose.join_findings(gathered)
        run.findings += diagnose.resolve_consistency(run.members)
        run.findings += diagnose.fqdn_findings(run.members)
        run.findings += diagnose.clock_findings(run.members)
    return seat


def _joiner(run: Run) -> rendezvous.Seat | None:
    cfg = run.config
    with run.phase("rendezvous"):
        try:
            store = rendezvous.client_store(cfg.rdzv.host, cfg.rdzv.port, run.phase_deadline())
            seat, results = rendezvous.join(store, run.facts, run.phase_deadline(), cfg.token)
        except rendezvous.RendezvousError as e:
            run.findings.append(diagnose.rendezvous_failure(str(e), run.my_ranks()))
            return None
        run.rank = seat.rank
        run.findings.append(diagnose.seat_finding(seat.rank, len(seat.roster.entries), run.facts.hostname))
        if results is not None:
            run.members = (Member(seat.rank, run.facts, results),)
            run.findings += diagnose.clock_findings(run.members)
        return seat
    return None


def _after_rendezvous(run: Run, seat: rendezvous.Seat) -> None:
    run.alive = _still_here(run, seat)
    if seat.rank not in run.alive:
        run.findings.append(diagnose.rendezvous_failure(
            "the host went on without this node: it reported back after the host's deadline",
            run.my_ranks()))
        return
    if "mesh" in run.config.phases and _time_for(run, "mesh"):
        with run.phase("mesh"):
            run.attempts = _mesh(run, seat, dict(run.alive))
    if "nic" in run.config.phases:
        with run.phase("nic"):
            _nic(run)
    if "env" in run.config.phases and _time_for(run, "env"):
        with run.phase("env"):
            _env(run, seat, dict(run.alive))
    if "bandwidth" in run.config.phases:
        with run.phase("bandwidth"):
            _bandwidth(run, seat)


def _time_for(run: Run, phase: str) -> bool:
    """Whether --timeout leaves a phase the time to finish: one started with nothing left
    would name live nodes lost for the host's own lack of time."""
    left = run.phase_deadline().remaining()
    if left >= MIN_PHASE_SECONDS:
        return True
    run.findings.append(diagnose.skipped_finding(phase, f"only {left:.1f} s of --timeout left",
                                                 diagnose.SHORT_OF_TIME_FIX))
    return False


def _still_here(run: Run, seat: rendezvous.Seat) -> dict[int, str]:
    """The seated nodes that reported back, as rank -> hostname: later phases wait only for
    them, so one node lost at the rendezvous does not eat every later phase's time (and get
    live nodes blamed for it). The host decides and publishes; joiners read it."""
    ex = seat.exchange
    seated = seat.roster.hostnames()
    if run.role == "host":
        alive = tuple(m.rank for m in run.members if m.results is not None)
        ex.put(ex.key("alive"), alive)
    else:
        try:
            alive = ex.wait_read(tuple[int, ...], ex.key("alive"), run.phase_deadline(GOODBYE_WAIT))
        except (TimeoutError, codec.DecodeError):
            alive = tuple(seated)
    return {r: seated[r] for r in alive if r in seated}


def _mesh(run: Run, seat: rendezvous.Seat, names: dict[int, str]) -> tuple[Attempt, ...]:
    """Listen on every candidate and connect to each target peer's; listeners stay open until
    the host has every node's results, since someone may still be connecting to them.

    A node reads only its targets' offers, and only the host reads every result: a node's
    cost grows with its sample, not with the cluster.
    """
    ex, me, ranks = seat.exchange, seat.rank, sorted(names)
    deadline = run.phase_deadline(MESH_PHASE_LIMIT)
    sample = mesh.parse_mode(run.config.mesh) if run.config.mesh else mesh.default_mode(len(ranks))
    peers = mesh.targets(me, ranks, sample, run.config.run_id)
    with mesh.Listeners(me, run.facts.nics) as listeners:
        ex.put(ex.key("mesh-offer", me), listeners.offer())
        offers = rendezvous.collect(ex, mesh.Offer, "mesh-offer", peers, deadline)
        mine = mesh.probe_peers(me, {r: o for r, o in offers.items() if o.rank == r}, peers, run.facts.nics)
        ex.put(ex.key("mesh-result", me), mesh.MeshResults(me, mine))
        if run.role != "host":
            _wait_quietly(ex, ex.key("mesh-done"), deadline)
            run.findings += recommend.mesh_findings(names, mine)
            run.findings += diagnose.lost_findings("mesh", names, [p for p in peers if p not in offers])
            return mine
        results = rendezvous.collect(ex, mesh.MeshResults, "mesh-result", ranks, deadline)
        ex.put(ex.key("mesh-done"), len(results))
    # Trust nothing: a node speaks only for the connects it made itself.
    attempts = tuple(a for r, res in results.items() for a in res.attempts if a.src == r)
    run.findings += recommend.mesh_findings(names, attempts)
    lost = [r for r in ranks if r not in results]
    run.lose("mesh", names, lost)
    return attempts


def _wait_quietly(ex: rendezvous.Exchange, key: str, deadline: Deadline) -> None:
    """Wait for the host's go-ahead until the deadline; a host that died raises instead."""
    try:
        ex.wait(key, deadline)
    except TimeoutError:
        pass


def _nic(run: Run) -> None:
    """Each library's choice on each node, held against what the mesh proved."""
    members = run.members
    # Only the host hears every node's connects, so only it can prove an interface works;
    # a joiner still checks its own settings and what the libraries would pick.
    host = run.role == "host"
    proven = recommend.proven_interfaces(members, run.attempts) if host and run.attempts else None
    run.findings += recommend.route_findings(members, run.attempts)
    run.findings += recommend.nccl_findings(members, proven)
    run.findings += recommend.gloo_findings(members, proven)
    run.findings += recommend.tp_findings(members, proven)
    if not host:
        return
    run.findings += recommend.ib_findings(members)
    if proven is not None:
        run.findings += recommend.mtu_findings(members, run.attempts)
        run.findings += recommend.speed_findings(members, proven)
        run.recommendation = recommend.recommendation(members, proven)


def _env(run: Run, seat: rendezvous.Seat, names: dict[int, str]) -> None:
    """Versions and settings from every node, compared on the host."""
    ex, ranks = seat.exchange, sorted(names)
    mine = gather_env(run.config.hash_paths, os.environ)
    ex.put(ex.key("env", seat.rank), mine)
    if run.role != "host":
        run.members = tuple(dataclasses.replace(m, env=mine) for m in run.members)
        return
    envs = rendezvous.collect(ex, EnvFacts, "env", ranks, run.phase_deadline(ENV_PHASE_LIMIT))
    run.members = tuple(dataclasses.replace(m, env=envs.get(m.rank)) for m in run.members)
    run.findings += envdiff.env_findings(envs, names) + envdiff.shm_findings(envs, names)
    run.env_table = tuple(envdiff.env_differences(envs, names, run.config.verbose))
    lost = [r for r in ranks if r not in envs]
    run.lose("env", names, lost)


def _bandwidth(run: Run, seat: rendezvous.Seat) -> None:
    """Timed collectives across every node's workers, on the host's store.

    Worker ranks are node_rank * nproc + local_rank, so the phase needs every seat 0..N-1
    alive; with a node lost, the findings already name it and the sweep would only wait
    for it. Under torchrun each worker process is a seat and starts one worker of its own.
    """
    launch = run.config.launch
    seats = sorted(e.rank for e in seat.roster.entries)
    expected = launch.nnodes_min or len(seats)
    if seats != list(range(len(seats))) or set(run.alive) != set(seats) or len(seats) < expected:
        if run.role == "host":  # where the missing nodes are named
            run.findings.append(diagnose.skipped_finding("bandwidth", "not every node rank is present"))
        return
    left, needed = run.phase_deadline().remaining(), run.config.sweep.budget_s + BW_STARTUP_SECONDS
    if left < needed:
        run.findings.append(diagnose.skipped_finding(
            "bandwidth", f"{left:.0f} s of --timeout left, the sweep needs about {needed:.0f} s",
            "raise --timeout (or lower --bw-budget)"))
        return
    # The phase numbers nodes; the report's `nodes` are seats. Under torchrun each worker
    # process is a seat: the phase runs per host, from LOCAL_RANK 0, node-numbered by
    # GROUP_RANK, and node n's processes are ranks n*P .. n*P+P-1 (torchrun's numbering).
    if is_torchrun_worker(launch):
        if launch.variables.get("LOCAL_RANK") != "0":
            return
        node, per_node = int(launch.variables["GROUP_RANK"]), launch.nproc_per_node
    else:
        node, per_node = seat.rank, 1
    nnodes = len(seats) // per_node
    result = run_bandwidth(seat.exchange, run.config.rdzv.host, run.config.rdzv.port, node, nnodes,
                           launch.nproc_per_node, run.config.sweep, run.phase_deadline().remaining(),
                           run.progress)
    if seat.exchange.lost:  # the phase carries on without the store, so nothing raised
        run.lose_host("bandwidth")
    seats_of = {n: tuple(range(n * per_node, (n + 1) * per_node)) for n in range(nnodes)}
    seat_names, rates = seat.roster.hostnames(), _line_rates(run)
    run.bandwidth = dataclasses.replace(result, hostnames={str(n): seat_names[s[0]] for n, s in seats_of.items()})
    findings = bwdiag.bandwidth_findings(run.bandwidth, {n: rates.get(s[0]) for n, s in seats_of.items()},
                                         run.config.sweep.expect_busbw)
    run.findings += [dataclasses.replace(f, nodes=tuple(r for n in f.nodes for r in seats_of[n]))
                     for f in findings]
    if run.role == "host":  # a node whose account never came is gone, as in any other phase
        gone = sorted(r for f in result.faults if f.kind in NODE_GONE for r in seats_of[f.node])
        run.lose("bandwidth", seat_names, gone)


def _line_rates(run: Run) -> dict[int, float | None]:
    """Gbit/s of the interface each seat's traffic to its peers leaves by (None: unknown)."""
    rates = {}
    for m in run.members:
        mbps = recommend.used_speed(m, {a.src_ifname for a in run.attempts if a.src == m.rank and a.outcome == "ok"})
        rates[m.rank] = mbps / 1000 if mbps else None
    return rates


def _judge_launch(run: Run, seat: rendezvous.Seat) -> None:
    """launch.topology over every process that came, latecomers after the roster included:
    the extra processes of an `srun --ntasks-per-node=8` arrive in no particular order."""
    seen = set(run.arrivals.arrivals)
    rendezvous.poll_arrivals(seat.exchange, run.arrivals)
    ranks = {e.arrival: e.rank for e in seat.roster.entries}
    late = {a: f for a, f in run.arrivals.arrivals.items() if a not in seen}
    run.findings += diagnose.latecomer_findings(list(late.values()), seat.roster)
    devices = {m.rank: uuid for m in run.members
               if m.env and (uuid := topology.device_uuid(m.facts, m.env.values))}
    run.findings += topology.launch_findings(
        [(ranks.get(a), f) for a, f in sorted(run.arrivals.arrivals.items())], devices)


def _leave(run: Run, seat: rendezvous.Seat) -> None:
    """Joiners say goodbye; the host keeps the store up until all have (FAILURES row 17)."""
    if run.role != "host":
        seat.goodbye()
        return
    with run.phase("goodbye"):
        arrivals = [e.arrival for e in seat.roster.entries
                    if e.arrival != seat.arrival and e.rank in run.alive]
        deadline = run.phase_deadline(GOODBYE_WAIT)
        # Joiners started their --timeout a little after the host: with the host's time
        # all but spent, a goodbye not yet in says nothing about the node.
        fair = deadline.remaining() >= MIN_PHASE_SECONDS
        gone = rendezvous.collect(seat.exchange, int, "bye", arrivals, deadline)
        silent = {e.rank: e.hostname for e in seat.roster.entries if e.arrival in set(arrivals) - set(gone)}
        run.findings += (diagnose.lost_findings("goodbye", silent, sorted(silent)) if fair
                         else diagnose.unheard_goodbyes(silent))
        _judge_launch(run, seat)


def build_report(run: Run) -> Report:
    findings = tuple(run.findings)
    members = run.members or ((Member(run.rank if run.rank is not None else -1, run.facts),)
                              if run.facts else ())
    faulty_ranks = {r for f in findings if f.severity == FAIL for r in f.nodes}
    by_rank = hostnames(members)
    missing = _missing_hostnames(run, faulty_ranks, by_rank)
    rec = run.recommendation or recommend.Recommendation({}, {}, "")
    return Report(
        run_id=run.config.run_id, node_rank=run.rank, role=run.role, verdict=verdict_of(findings),
        nodes=_entries(members), findings=findings, recommend=rec.cluster,
        recommend_per_node=rec.per_node, env_table=run.env_table, bandwidth=run.bandwidth,
        timings=dict(run.timings),
        unfinished=run.unfinished,
        healthy_nodes=tuple(h for r, h in sorted(by_rank.items()) if r not in faulty_ranks),
        faulty_nodes=tuple(h for r, h in sorted(by_rank.items()) if r in faulty_ranks) + missing,
        recommend_note=rec.reason)


def _entries(members: tuple[Member, ...]) -> tuple[NodeEntry, ...]:
    return tuple(NodeEntry(m.rank, m.facts.hostname, m.address, m.facts, m.env) for m in members)


def _missing_hostnames(run: Run, faulty: set[int], by_rank: dict[int, str]) -> tuple[str, ...]:
    """Faulty ranks that never joined, named when the launcher listed the hosts (Slurm)."""
    hosts = run.config.launch.hostnames
    return tuple(hosts[r] for r in sorted(faulty) if r not in by_rank and r < len(hosts))


def exit_code(run: Run) -> int:
    if run.interrupted:
        return EXIT_INTERRUPTED
    if any(f.check == RUN_INTERNAL for f in run.findings):
        return EXIT_INTERNAL
    return EXIT_BY_VERDICT[verdict_of(run.findings)]


def local_only(env) -> Report:
    """`netcheck local`: this node's interfaces and what each library would pick here."""
    launch = detect_launch(env, None, None, None, local_gpus=driver_gpus())
    facts = gather_facts(default_run_id(env), launch)
    me = (Member(launch.node_rank or 0, facts),)
    findings = tuple(recommend.route_findings(me, ()) + recommend.nccl_findings(me, None)
                     + recommend.gloo_findings(me, None) + recommend.tp_findings(me, None)
                     + recommend.ib_findings(me))
    return _single_node_report("local", launch.node_rank, _entries(me), findings, {})


def probe_only(host: str, port: int, timeout: float) -> Report:
    """`netcheck probe HOST:PORT`: one round of the reach probe."""
    found = reach(host, port, Deadline(timeout), probe_timeout=timeout)
    findings = tuple(diagnose.reach_findings(found, ()))
    return _single_node_report("probe", None, (), findings, {"reach": found.seconds})


def _single_node_report(role: str, rank: int | None, nodes: tuple[NodeEntry, ...],
                        findings: tuple[Finding, ...], timings: dict[str, float]) -> Report:
    return Report(run_id=role, node_rank=rank, role=role, verdict=verdict_of(findings), nodes=nodes,
                  findings=findings, recommend={}, recommend_per_node={}, env_table=(), bandwidth=None,
                  timings=timings, unfinished=None, healthy_nodes=(), faulty_nodes=())
