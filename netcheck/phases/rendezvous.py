"""Phase 3, rendezvous: the host gathers and seats the nodes, a joiner takes its seat; then
who is still here for the phases after it."""

from __future__ import annotations

from collections.abc import Callable, Generator

from netcheck.cluster import hostgather, rendezvous, seating
from netcheck.cluster.collect import collect
from netcheck.cluster.store import Exchange
from netcheck.cluster.storeconnect import client_store, host_store
from netcheck.core import codec, seats
from netcheck.core.constants import FRAME_WAIT, MAX_STRANGERS, RESULTS_QUIET, RESULTS_WAIT
from netcheck.core.meshrecords import FrameTest, PathCauses
from netcheck.core.model import FAIL, Finding, Gathering, Member, Visitor, is_torchrun_worker
from netcheck.core.storeerrors import HostLost, Interfered, OtherRun, RendezvousError
from netcheck.core.storekeys import ALIVE, RESULT
from netcheck.facts.frames import TRIES, frame_tests
from netcheck.facts.nameservers import lookup_bound
from netcheck.facts.probe import resolve_addresses
from netcheck.facts.storepeers import StallWatch, port_peers
from netcheck.phases.state import Learnt, Run
from netcheck.rules import conntrack as conntrack_rules
from netcheck.rules import endpoint as endpoint_rules
from netcheck.rules import mesh as mesh_rules
from netcheck.rules import ports as ports_rules
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules import reach as reach_rules
from netcheck.rules import storetrouble as storetrouble_rules
from netcheck.rules import translation as translation_rules
from netcheck.rules.registry import ENDPOINT_UNREACHED, HOST_CONNTRACK, HOST_PORTS
from netcheck.rules.registry_judges import SeatedRecords, judged


def host(run: Run) -> Generator[Learnt, None, rendezvous.Seat | None]:
    """The host gathers and seats the nodes; each thing it learns is handed back before its next
    wait (a signal in the wait keeps it: the arrivals name who came)."""
    cfg, launch = run.config, run.config.launch
    seat = None
    hostgather.hold_records()
    with run.phase("rendezvous"):
        try:
            store = host_store(run.listener, cfg.rdzv.port, run.phase_deadline()) \
                if run.listener else client_store(cfg.rdzv.host, cfg.rdzv.port, run.phase_deadline())
        except RendezvousError as e:
            yield Learnt((rdzv_rules.rendezvous_failure(str(e), run.my_ranks()),))
            return None
        # The stall watch names who held the store up, where something did.
        ex = Exchange(store, cfg.run_id, cfg.token, end=run.deadline, watch=StallWatch(cfg.rdzv.port))
        hostgather.announce(ex, run.local_facts)
        seat, came, waited = hostgather.host_gather(
            ex, run.local_facts, (launch.nnodes_min, launch.nnodes_max), cfg.join_window, run.join_deadline)
        yield Learnt(arrivals=came)
        arrivals = dict(came.arrivals)
        ranks, duplicates, extras = seating.assign_ranks(arrivals, seat.arrival, launch.nnodes_max)
        roster = hostgather.post_roster(seat, arrivals, ranks)
        if seat.rank is not None:   # unseated where joiners claimed every seat: no results anyone reads
            rendezvous.report_back(seat, seat.rank, None)  # the host's clock is the reference, not a sample
        results = collect(ex, RESULT, [e.arrival for e in roster.entries],
                          run.phase_deadline(), quiet=(RESULTS_WAIT, RESULTS_QUIET))
        gathered = hostgather.gathering(ex, roster, came, results, duplicates, extras,
                                        (launch.nnodes_min, launch.nnodes_max), launch.hostnames,
                                        waited, run.phase_deadline(RESULTS_WAIT))
        # Out before the rules below (half a second at 4,096 nodes): every joiner waits for it.
        yield Learnt(members=gathered.members, alive=post_alive(gathered.members, seat))
        frames = _frames_to(run, gathered.facts_lost)
        # Read while every joiner waits on the store for the alive list: each one's connection is there.
        peers = port_peers(cfg.rdzv.port)
        yield judge_rendezvous(run, gathered, frames, peers, lambda: run.stall_findings(ex),
                               lambda: _endpoint_findings(run, gathered.missing_ranks))
    return seat


def judge_rendezvous(run: Run, gathered: Gathering, frames: tuple[FrameTest, ...], peers: dict[str, int],
                     stalls: Callable[[], list[Finding]], endpoint: Callable[[], list[Finding]]) -> Learnt:
    """The host's rendezvous rules over what it gathered (gathered.members), in the report's order.
    What only the network tells comes in: the datagram tests of the paths to the nodes whose facts
    never came (frames), the addresses connected to the store's port (peers), and, asked at their
    turn, what held the store up (stalls) and where the missing nodes may have gone (endpoint)."""
    members = gathered.members
    holes = mesh_rules.lost_facts_blackhole(gathered.facts_lost, frames, len(members))
    visitors = tuple(v for v in run.arrivals.visitors.values() if v) if run.arrivals else ()
    # Said before the join's findings and the endpoint's, which need more than the members.
    findings = holes + reach_rules.reach_summary(members) + reach_rules.slow_lookups(members)
    stalled = stalls()
    joined = reach_rules.slow_join_explained(rdzv_rules.join_findings(gathered), run.budget.slow_lookup,
                                             run.join_seconds)
    findings += storetrouble_rules.stall_explained(joined, stalled) + stalled
    findings += endpoint_rules.reached_addresses(members) + endpoint()
    findings += judged("rendezvous", SeatedRecords(members))
    # Every node's range and connection-tracking table, and the endpoint's port in the host's, in
    # place of the host's own view of its own (said in the local phase): before the mesh and the
    # sweep open their sockets.
    # Under torchrun the endpoint is the workers' store, listening already: no connection takes it.
    store_port = None if is_torchrun_worker(run.config.launch) else run.config.rdzv.port
    findings += ports_rules.range_findings(members, store_port) + conntrack_rules.table_findings(members)
    return Learnt(tuple(findings), withdrawn=frozenset((HOST_PORTS, HOST_CONNTRACK)),
                  causes=PathCauses(translation_rules.translations(members, peers, visitors)),
                  unranked_faulty=rdzv_rules.unranked_at_fault(gathered.facts_lost, holes),
                  lost_names={v.node_rank: v.hostname for v in gathered.facts_lost if v.node_rank is not None})


def joiner(run: Run) -> Generator[Learnt, None, rendezvous.Seat | None]:
    """A joiner takes its seat at the host's store; each thing it learns is handed back before its
    next wait (its seat before the wait for the host's alive list)."""
    cfg = run.config
    with run.phase("rendezvous"):
        store = None
        try:
            reached = run.local_facts.reach   # its addresses: looked up (and timed) in the reach phase
            store = client_store(cfg.rdzv.host, cfg.rdzv.port, run.phase_deadline(),
                                 reached.addresses if reached else ())
            seat, results = rendezvous.join(store, run.local_facts, run.phase_deadline(), run.deadline, cfg.token)
        except rendezvous.CameTooLate:
            yield Learnt((rdzv_rules.seat_finding(None, 0, run.local_facts.hostname),))
            return None
        except HostLost as e:
            if store is None and run.join_deadline.expired():
                # Gone before this node got in, past the host's join deadline: the host had
                # closed without it (and, with nobody else come, ended), whatever became of
                # it after. "The host stopped answering" would send the user to a sound host.
                yield Learnt((rdzv_rules.gone_before_sign_in(
                    run.deadline.elapsed(), run.join_seconds, cfg.timeout, run.my_ranks(), e.seen,
                    run.budget.slow_lookup),))
            else:  # it answered the reach probe: named lost, as in every later phase
                yield Learnt(run.host_lost_findings("rendezvous", e.seen), host_lost=True)
            return None
        except Interfered as e:  # what the host guards, written over until this node's deadline
            yield Learnt(tuple(storetrouble_rules.interference_findings((str(e),), FAIL)))
            return None
        except OtherRun as e:
            yield Learnt((rdzv_rules.other_run_failure(str(e), run.my_ranks()),))
            return None
        except RendezvousError as e:
            yield Learnt((rdzv_rules.rendezvous_failure(str(e), run.my_ranks()),))
            return None
        yield Learnt(tuple(storetrouble_rules.interference_findings(seat.exchange.interference.lines())
                           + run.stall_findings(seat.exchange)), rank=seat.rank, unseated=seat.rank is None)
        launch = cfg.launch
        expected = launch.nnodes_max if launch.nnodes_min == launch.nnodes_max else None
        seated = rdzv_rules.seat_finding(seat.rank, len(seat.hostnames), run.local_facts.hostname, expected)
        if results is not None and seat.rank is not None:  # join reports back only from a seat
            members = (Member(seat.rank, run.local_facts, results),)
            yield Learnt((seated, *rdzv_rules.clock_findings(members)), members=members)
        else:
            yield Learnt((seated,))
        if seat.rank is not None:  # one not seated takes no part in the later phases
            yield _alive_by_host(run, seat)
        return seat
    return None


def post_alive(members: tuple[Member, ...], seat: rendezvous.Seat) -> dict[int, str]:
    """The seated nodes that reported back, as rank -> hostname: later phases wait only for
    them, so one node lost at the rendezvous does not eat every later phase's time (and get
    live nodes blamed for it). The host decides and publishes; joiners read it."""
    alive = alive_ranks(members)
    seat.exchange.put(seat.exchange.key(ALIVE), seats.rank_runs(alive))
    return seated_of(seat.hostnames, alive)


def alive_ranks(members: tuple[Member, ...]) -> tuple[int, ...]:
    """The seated nodes that reported back: the alive list the host posts."""
    return tuple(m.rank for m in members if m.results is not None)


def _alive_by_host(run: Run, seat: rendezvous.Seat) -> Learnt:
    """Waited for to the phase's deadline: the host posts it only once it has waited out the
    results of nodes lost after their seat, and a joiner that stopped waiting sooner would go
    on to wait for those dead nodes in the mesh and be named lost by them. A host that dies
    meanwhile breaks the store: named lost in this phase, at once. One this node cannot read
    is said, not swallowed: waiting for every seated node instead may get it named lost."""
    key = seat.exchange.key(ALIVE)
    refused: tuple[Finding, ...] = ()
    try:
        alive = seats.ranks_of(seat.exchange.wait_read(key, run.phase_deadline()))
    except TimeoutError:
        alive = tuple(seat.hostnames)
    except codec.DecodeError as e:
        refused = (rdzv_rules.hosts_message_refused(key, str(e)),)
        alive = tuple(seat.hostnames)
    return Learnt(refused, alive=seated_of(seat.hostnames, alive))


def seated_of(hostnames: dict[int, str], ranks: tuple[int, ...]) -> dict[int, str]:
    """rank -> hostname of the seated nodes among ranks: the phases after the rendezvous wait for them."""
    return {r: hostnames[r] for r in ranks if r in hostnames}


def _frames_to(run: Run, lost: tuple[Visitor, ...]) -> tuple[FrameTest, ...]:
    """The paths to the nodes whose facts never came, tested with datagrams (their first
    MAX_STRANGERS, at once), where the phase's deadline leaves the time."""
    targets = [(v.hostname, v.address) for v in lost if v.address][:MAX_STRANGERS]
    wait = min(FRAME_WAIT, run.phase_deadline().remaining() / (2 * TRIES))
    return frame_tests(targets, wait) if targets and wait > 0.1 else ()


def _endpoint_findings(run: Run, missing: tuple[int, ...]) -> list[Finding]:
    """Where the missing nodes may have gone: looked up only when some are missing, and not
    where the reach phase said it already (rank 0 cannot reach its own endpoint)."""
    if not missing or any(f.kind == ENDPOINT_UNREACHED for f in run.findings):
        return []
    addresses, _ = resolve_addresses(run.config.rdzv.host, lookup_bound(run.phase_deadline()))
    return endpoint_rules.host_endpoint_findings(run.config.rdzv, addresses, run.local_facts, missing)
