"""Phase 3, rendezvous: every node meets at a torch TCPStore on the job's own port.

TCPStore is the component torchrun's c10d rendezvous stands on: where netcheck's meeting
works, the job's can. Keys (all values JSON, size-bounded, validated):

    netcheck/host                  the host's hello: which run it serves, and the run's nonce
    netcheck/visitors, /visitor/V  everyone who came, any run id (foreign nodes are named)
    netcheck/pings, /pong/T/K      clock round trips: "T/K," appended (T a visitor's own random
                                   ticket), answered by the host's poll with its clock and nonce
    netcheck/RUN/arrivals, /node/A a node's facts, A its arrival number; node/posted lists A
    netcheck/RUN/roster            the host's rank assignment, once everyone is in (the host's own)
    netcheck/RUN/seat/B, /seated   what a joiner reads of it: its block of seats, and every seated
                                   node's names in a compact form (core.seats)
    netcheck/RUN/result/A          what node A learnt from the roster (clock, FQDN lookups)
    netcheck/RUN/bye/A             node A is done; the host keeps the store up until all are
    netcheck/RUN/NAME/posted       ",A," per node that posted NAME/A (result, bye, and the later
                                   phases' keys): the host learns who posted in one request

Every wait has a deadline; nothing received is unpickled or executed. Counters and lists are
anyone's to write: a number a counter cannot give (text, or pushed past any count) is taken at
random, every arrival is listed as well as counted, and what another client did is named
(Exchange.interference), never taken for a fault of the nodes.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from netcheck.cluster.mesh import targets
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.constants import (
    CLOCK_PINGS,
    CLOCK_WAIT,
    LOOKUP_TIMEOUT,
    MESH_FULL_UP_TO,
    MESH_SAMPLE_PEERS,
    PING_RETRY,
    SEAT_BLOCK,
)
from netcheck.core.deadline import Deadline
from netcheck.core.fields import is_host
from netcheck.core.model import ClockSample, NodeFacts, NodeResults, Resolution, Visitor
from netcheck.core.names import is_safe_hostname
from netcheck.core.rdzvrecords import Roster
from netcheck.core.seats import Seated, expand, rank_in
from netcheck.core.storeerrors import HostLost, Interfered, OtherRun, RendezvousError, StoreError, StoreLost, first_line
from netcheck.core.storekeys import (
    ARRIVALS,
    BYE,
    HOST,
    NODE,
    PINGS,
    PONG,
    RESULT,
    SEAT,
    SEATED,
    VISITOR,
    VISITORS,
    Slot,
)
from netcheck.facts.probe import resolve_many

TICKET_BYTES = 8                          # a visitor's ping ticket: 16 hex digits, its own and random
TICKET = re.compile(r"[0-9a-f]{1,16}")    # what the host answers
RANDOM_NUMBERS = (10**9, 10**18)          # numbers taken where a counter cannot give one: past any count


class CameTooLate(RendezvousError):
    """The roster was out when this node came, and the host's store closed before the node
    learnt it was not seated: the host finished, it did not die."""


# --- every node, the host included -------------------------------------------------------

@dataclass
class Seat:
    """A node's place in the rendezvous, used by the later phases and for goodbye."""

    exchange: Exchange
    arrival: int
    rank: int | None = None                                    # None: not seated
    hostnames: dict[int, str] = field(default_factory=dict)   # rank -> hostname of every seated node
    fqdns: dict[int, str] = field(default_factory=dict)       # rank -> FQDN, the lookups' targets
    roster: Roster | None = None   # the host's alone: a joiner reads its seat and the names (take_seat)

    def goodbye(self) -> None:
        try:
            self.exchange.post(BYE, self.arrival, 1)
        except StoreError:
            pass  # the host is gone already: nobody is waiting for this goodbye


def take_number(ex: Exchange, key: Slot[int]) -> int:
    """The counter's next number, as every node takes one. Where another client made the
    counter useless (set it to text, pushed it past any count: at int64's maximum add() wraps
    negative) a number at random beyond any count, and the interference named: nodes are
    found by their listing too, so the push keeps nobody out."""
    try:
        number = ex.add_to(key, 1) - 1
    except Interfered as e:
        ex.interference.note(key, e.seen)
        return secrets.randbelow(RANDOM_NUMBERS[1] - RANDOM_NUMBERS[0]) + RANDOM_NUMBERS[0]
    if 0 <= number < RANDOM_NUMBERS[0]:
        return number
    ex.interference.note(key, f"counts {number + 1}: pushed past any cluster's count by a client that is not "
                              "a netcheck node")
    return secrets.randbelow(RANDOM_NUMBERS[1] - RANDOM_NUMBERS[0]) + RANDOM_NUMBERS[0]


def sign_in(ex: Exchange, facts: NodeFacts) -> str:
    """Register as a visitor (any run id), so the host can name nodes of other runs; returns
    this node's ticket for clock pings, its own random one: no counter decides who is answered."""
    visitor = take_number(ex, ex.key(VISITORS))
    ex.put(ex.key(VISITOR, visitor), visitor_record(facts), signed=False)
    # Listed as well: a number taken at random, where another client spoilt the counter, is
    # found only by its listing (as an arrival's is).
    ex.enlist(ex.listing(VISITOR), str(visitor))
    return secrets.token_hex(TICKET_BYTES)


def visitor_record(facts: NodeFacts) -> Visitor:
    """What a node signs in with: its run, name, claim and the address it left from."""
    return Visitor(facts.run_id, facts.hostname, facts.launch.node_rank, reached_from(facts))


def reached_from(facts: NodeFacts) -> str | None:
    """This node's own address its connection to the endpoint left from (the reach probe's);
    None on the host, which does not probe itself."""
    return next((p.source for p in facts.reach.probes if p.source), None) if facts.reach else None


def check_run_id(ex: Exchange, deadline: Deadline) -> None:
    """The host's hello: its run id and (--token) its MAC, bound to the nonce it carries. One
    another client left there is waited past while the host writes its own again."""
    hello = ex.wait_read_valid(ex.key(HOST), deadline, nonce=lambda h: h.nonce)
    if hello.run_id != ex.run_id:
        raise OtherRun(f"the store at this endpoint serves run id {hello.run_id!r} "
                              f"(host {hello.hostname}); this node was started with "
                              f"--rdzv-id {ex.run_id!r}")
    ex.signer.adopt(hello.nonce)


def ping(ex: Exchange, ticket: str, k: int) -> None:
    """Ask the host for its clock: it answers under pong/TICKET/K on its next poll."""
    ex.enlist(ex.key(PINGS), f"{ticket}/{k}")


def measure_clock(ex: Exchange, ticket: str, deadline: Deadline) -> ClockSample | None:
    """Offset to the host's clock from store round trips; the tightest of a few wins, None
    where none came back within CLOCK_WAIT: the pings list is anyone's to flood (the host
    clears it unread), and a node goes on without its clock rather than be kept out. The
    first answer also tells the run's nonce: a hello of another run (replayed under the
    host's key) is named, and this node signs for the run the host serves."""
    best = None
    budget = deadline.within(CLOCK_WAIT)
    for k in range(CLOCK_PINGS):
        try:
            sent, host_time = _pong(ex, ticket, k, budget)
        except TimeoutError:
            if deadline.expired():
                raise
            break
        back = time.time()
        sample = ClockSample(round(host_time - (sent + back) / 2, 6), round((back - sent) / 2, 6))
        best = sample if best is None or sample.error < best.error else best
    # Reported as the peer's clock minus the host's.
    return ClockSample(-best.offset, best.error) if best else None


def _pong(ex: Exchange, ticket: str, k: int, deadline: Deadline) -> tuple[float, float]:
    """(when the answered ping was sent, the host's clock in its pong). A ping unanswered
    for PING_RETRY is asked again: the host clears a list flooded by someone else unread;
    an answer another client wrote there is named, dropped and asked again."""
    key = ex.key(PONG, ticket, k)
    while True:
        sent = time.time()
        ping(ex, ticket, k)
        try:
            ex.wait(key, deadline.within(PING_RETRY))
            pong = ex.read(key, nonce="")
        except TimeoutError:
            if deadline.expired():
                raise
            continue
        except codec.DecodeError as e:
            ex.interference.note(key, f"holds what the host did not write: {e}")
            ex.drop(key)
            continue
        if pong.nonce != ex.signer.nonce:
            ex.interference.note(ex.key(HOST), (
                f"holds a hello with nonce {ex.signer.nonce!r}, but the host's clock answers carry {pong.nonce!r}: "
                "a hello of an earlier run, written there by a client that is not this run's host"))
            ex.signer.adopt(pong.nonce)
        return sent, pong.time


def publish_facts(ex: Exchange, facts: NodeFacts) -> int:
    """Facts under this node's arrival number, listed as well (the host reads the list where
    the counter was pushed: the number may be anywhere)."""
    arrival = take_number(ex, ex.key(ARRIVALS))
    ex.post(NODE, arrival, facts)
    return arrival


def lookup_targets(fqdns: dict[int, str], me: int, seed: str) -> dict[int, str]:
    """The peers (rank -> FQDN) whose FQDN rank `me` looks up: every other node in a cluster
    the mesh tests in full by default; beyond that the host, the node whose FQDN sorts first
    (torchrun's c10d makes it rank 0 and hands its FQDN to every worker as MASTER_ADDR: rules.rdzv)
    and a sample drawn as the mesh draws its peers (ring neighbours and MESH_SAMPLE_PEERS more),
    so no node's lookups, and no resolver's load, grow with the cluster."""
    if len(fqdns) <= MESH_FULL_UP_TO:
        chosen = set(fqdns)
    else:
        chosen = set(targets(me, sorted(fqdns), MESH_SAMPLE_PEERS, seed)) | {0, min(fqdns, key=fqdns.__getitem__)}
    return {r: fqdns[r] for r in sorted(chosen) if r != me and r in fqdns}


def lookup_peers(fqdns: dict[int, str], me: int, seed: str) -> tuple[Resolution, ...]:
    """Resolve the target peers' FQDNs from here, as their workers would resolve MASTER_ADDR."""
    peers = lookup_targets(fqdns, me, seed)
    answers = resolve_many(list(peers.values()), LOOKUP_TIMEOUT)
    return tuple(Resolution(r, fqdn, *answers[fqdn]) for r, fqdn in peers.items())


def report_back(seat: Seat, rank: int, clock: ClockSample | None) -> NodeResults:
    """This node's results, once seated (at `rank`, the seat's): its clock sample and its lookups."""
    results = NodeResults(clock, lookup_peers(seat.fqdns, rank, seat.exchange.run_id))
    seat.exchange.post(RESULT, seat.arrival, results)
    return results


# --- joiner ---------------------------------------------------------------------------------

def join(store: Any, facts: NodeFacts, deadline: Deadline, end: Deadline, token: str | None = None
         ) -> tuple[Seat, NodeResults | None]:
    """Take a seat at the host's store; returns once the roster is known (or raises). A
    request the store holds up past its reply timeout is waited out to `deadline`; none is
    waited for past `end` (the run's)."""
    ex = Exchange(store, facts.run_id, token, limit=deadline, end=end)
    ex.pace(facts.launch.nnodes_max or facts.launch.nnodes_min or 0)
    late = False
    try:
        ticket = sign_in(ex, facts)
        check_run_id(ex, deadline)
        clock = measure_clock(ex, ticket, deadline)  # the run's nonce, before anything is signed
        # Seating already out says the host may be done (a hint: another client may have put
        # it there); a latecomer publishes too, so that the host names it.
        late = ex.has(ex.key(SEATED))
        seat = Seat(ex, publish_facts(ex, facts))
        take_seat(seat, deadline)
        ex.pace(len(seat.hostnames))  # also where the launcher gave no node count
    except TimeoutError as e:
        raise RendezvousError(f"the host did not finish the rendezvous in time: {e}") from None
    except codec.DecodeError as e:
        if notes := ex.interference.notes():  # what the host guards, written over and never restored in time
            key, seen = notes[-1]
            raise Interfered(key, seen) from None
        raise RendezvousError(f"the store holds data netcheck cannot read: {e}") from None
    except StoreError as e:
        if late:  # the host was done with the rendezvous, and may be done altogether
            raise CameTooLate(first_line(e)) from None
        what = "the host stopped answering during the rendezvous"
        if isinstance(e, StoreLost):
            raise HostLost(what, first_line(e)) from None
        raise RendezvousError(f"{what}: {first_line(e)}") from None
    if seat.rank is None:
        return seat, None
    return seat, report_back(seat, seat.rank, clock)


def take_seat(seat: Seat, deadline: Deadline) -> None:
    """This node's rank (None: not seated) and every seated node's names, once the host has
    posted them: a few hundred bytes at 10,000 regularly named nodes, where the whole roster
    was 1.1 MB to each of them (issue 38). Both are guarded and signed as the roster was."""
    ex = seat.exchange
    seated = ex.wait_read_valid(ex.key(SEATED), deadline)
    seat.hostnames, seat.fqdns = seated_names(seated)
    block = seat.arrival // SEAT_BLOCK
    if block in seated.blocks:  # posted before the names: there already
        seat.rank = rank_in(ex.wait_read_valid(ex.key(SEAT, block), deadline), seat.arrival)


def seated_names(seated: Seated) -> tuple[dict[int, str], dict[int, str]]:
    """rank -> hostname and rank -> FQDN, each name checked as the roster's fields were."""
    return expand(seated.hostnames, is_safe_hostname), expand(seated.fqdns, is_host)
