"""The rendezvous from the host's side: it announces itself, gathers the nodes that sign in
(their facts, read in batches and bounded), answers their clock pings, seats them and posts the
roster, and tells apart the visitors whose facts never came. The records and every node's side
of the protocol are cluster.rendezvous's; who gets which seat is cluster.seating's (pure)."""

from __future__ import annotations

import gc
import itertools
import time
from collections import Counter
from collections.abc import Container, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from netcheck.cluster.rendezvous import TICKET, Seat, publish_facts, sign_in
from netcheck.cluster.seating import assign_ranks, rendezvous_closed, unseated_reason
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.constants import (
    ARRIVALS_READ_BATCH,
    CLOCK_PINGS,
    FLOODED_LIST_SWEEP,
    HOST_GC_THRESHOLDS,
    IN_FLIGHT_GRACE,
    MAX_MEMBERS,
    MAX_PINGS_BYTES,
    MAX_STRANGERS,
    MAX_VISITOR_BYTES,
    NEWEST_FIRST,
    PINGS_KEPT_BYTES,
    POLL_SLICE,
    STORE_POLL_INTERVAL,
)
from netcheck.core.deadline import Deadline
from netcheck.core.fields import NodeRank
from netcheck.core.model import Gathering, Member, NodeFacts, NodeResults, Visitor, node_address
from netcheck.core.rdzvrecords import Hello, Pong, Roster, RosterEntry
from netcheck.core.seats import SeatBlock, Seated, compact, seat_blocks
from netcheck.core.storekeys import (
    ARRIVALS,
    HOST,
    MAC_SUFFIX,
    NODE,
    PINGS,
    PONG,
    ROSTER,
    SEAT,
    SEATED,
    VISITOR,
    VISITORS,
    Slot,
)

T = TypeVar("T")

# --- host -------------------------------------------------------------------------------------

def hold_records() -> None:
    """Ready this process to hold a record per rank until its report (HOST_GC_THRESHOLDS)."""
    gc.set_threshold(*HOST_GC_THRESHOLDS)


@dataclass
class HostState:
    """What the host's poll loop has seen so far."""

    arrivals: dict[int, NodeFacts]
    malformed: list[str]
    pings_answered: int = 0  # entries of the ping list answered (or skipped as malformed)
    arrivals_seen: int = 0   # every arrival below this one is read
    last_arrival: float = 0.0
    read: set[int] = field(default_factory=set)   # arrivals read, also past a gap
    visitors: dict[int, Visitor | None] = field(default_factory=dict)  # records read (None: garbage)
    visitors_seen: int = 0   # every visitor record below this one is read
    arrivals_counted: int = 0  # the counters' highest values seen (anyone may push them)
    visitors_counted: int = 0
    visitors_refused: int = 0  # records under visitor/ that were no visitor's: deleted, counted
    arrivals_refused: dict[int, str] = field(default_factory=dict)  # arrival -> why its facts were refused
    full_since: float | None = None   # when the seats filled up
    nnodes_max: int | None = None     # --nnodes MAX: an arrival past it can never be seated
    host_arrival: int | None = None
    unseatable_kept: int = 0          # arrivals that can never be seated, kept whole (the first MAX_STRANGERS)
    set_aside: list[str] = field(default_factory=list)  # why each of the others was not seated; facts dropped
    latecomers: list[tuple[str, NodeRank | None]] = field(default_factory=list)  # after the roster: hostname, claim
    instances: dict[str, int] = field(default_factory=dict)  # NodeFacts.instance -> the arrival read with it first
    copied: set[int] = field(default_factory=set)            # arrivals whose facts another client copied
    arrived_names: Counter[str] = field(default_factory=Counter)  # hostname -> arrivals read under it
    seating_visitors: frozenset[int] = frozenset()   # visitor records read before the roster was posted

    def arrived(self, a: int, facts: NodeFacts) -> None:
        self.arrivals[a] = facts
        self.arrived_names[facts.hostname] += 1

    def in_flight(self, run_id: str) -> int:
        """Nodes of this run that signed in but have not published their facts yet."""
        return sum(1 for v in self.visitors.values() if v and v.run_id == run_id) - len(self.read)


def announce(ex: Exchange, facts: NodeFacts) -> None:
    """The host's hello, signed under the run's nonce it carries (fresh before anything is
    signed) and guarded: written again wherever another client writes over it."""
    nonce = ex.signer.fresh_nonce()
    ex.put(ex.key(HOST), Hello(facts.run_id, facts.hostname, facts.version, nonce), guard=True)


def host_gather(ex: Exchange, facts: NodeFacts, expected: tuple[int | None, int | None],
                join_window: float, deadline: Deadline) -> tuple[Seat, HostState, float]:
    """Wait for the nodes to arrive (answering clock pings meanwhile) until done or deadline.

    The host's own facts are in from the start, and the store is read at least once, also
    when start-up (torch's import, the store) has already spent the join deadline: a late
    poll still seats whoever came, the host included.
    """
    low, high = expected
    state = HostState({}, [], last_arrival=time.monotonic(), nnodes_max=high)
    sign_in(ex, facts)  # the host is a visitor too: every node that came is listed
    arrival = publish_facts(ex, facts)
    state.arrived(arrival, facts)
    state.read.add(arrival)
    state.instances[facts.instance] = arrival
    state.host_arrival = arrival
    while True:
        ex.restore()
        poll_arrivals(ex, state, seating=True)
        ranked, _, _ = assign_ranks(state.arrivals, arrival, high)
        now = time.monotonic()
        if rendezvous_closed(len(ranked), low, high, now - state.last_arrival, join_window):
            state.full_since = state.full_since or now
            # One still in its handshake is heard out: two claimants of a rank are then
            # both named, not one seated and the other left talking to a closed host.
            if state.in_flight(ex.run_id) <= 0 or now - state.full_since >= IN_FLIGHT_GRACE:
                break
        else:
            state.full_since = None
        if deadline.expired():
            break
        time.sleep(STORE_POLL_INTERVAL)
    ex.restore(at_once=True)
    state.seating_visitors = frozenset(state.visitors)
    # Nodes could join from the moment the host listened (its start), not from this loop's.
    return Seat(ex, arrival), state, time.monotonic() - deadline.start


def poll_arrivals(ex: Exchange, state: HostState, seating: bool = False) -> None:
    """Read arrivals not seen yet (also after the roster: latecomers are named too).

    Counters are anyone's to push, so each scan (pings, visitors, arrivals) stops after POLL_SLICE
    seconds of store requests and the next poll goes on from there: a poll is bounded
    whatever a foreign client counted in. While `seating` (before the roster: the report's
    unseated findings are made from state.set_aside), arrivals that can never be seated are
    kept whole only up to MAX_STRANGERS (keep_or_set_aside); after it, every arrival is a
    latecomer, never seated: each is listed in state.latecomers and counts towards the same
    MAX_STRANGERS kept whole.
    """
    _answer_pings(ex, state, Deadline(POLL_SLICE))
    read_visitors(ex, state, Deadline(POLL_SLICE))
    scan = Deadline(POLL_SLICE)
    counted = _counted(ex, ex.key(ARRIVALS))
    state.arrivals_counted = max(state.arrivals_counted, counted)
    pending = _arrivals_to_read(ex, state, counted)
    while not scan.expired() and len(state.read) < MAX_MEMBERS:
        # A batch in two requests where all are written (4,096 arrivals read one by one were
        # 8,192 round trips, the roster seconds late behind them); each once (the listed
        # arrivals come again by the counter).
        batch = list(dict.fromkeys(itertools.islice(pending, min(ARRIVALS_READ_BATCH, MAX_MEMBERS - len(state.read)))))
        if not batch:
            break
        # One not written yet (counted, then written) is left for a later poll. Not a reason
        # to stop: a client that counts itself in and never writes must not hide the nodes after it.
        by_key = {ex.key(NODE, a): a for a in batch}
        for key, facts in ex.read_each(list(by_key)):
            take_arrival(ex, state, by_key[key], facts, seating)
    while state.arrivals_seen in state.read:
        state.arrivals_seen += 1


def take_arrival(ex: Exchange, state: HostState, a: int, facts: NodeFacts | codec.DecodeError,
                 seating: bool) -> None:
    """Arrival a's facts (or why they were refused) into the host's state: refused, a copy, an
    arrival (while seating) or a latecomer (after the roster), kept whole or set aside. The store
    is touched only where facts are dropped from it or another client is named."""
    state.read.add(a)
    state.last_arrival = time.monotonic()
    if isinstance(facts, codec.DecodeError):
        state.malformed.append(f"arrival {a}: {facts}")
        state.arrivals_refused[a] = str(facts)
        if len(state.arrivals_refused) > MAX_STRANGERS:
            _drop_facts(ex, a)  # kept in the store, the first few, for a watcher's view
        return
    if is_copy(ex, state, a, facts):
        return
    state.arrived(a, facts)
    if not seating:
        state.latecomers.append((facts.hostname, facts.launch.node_rank))
    if not seating or never_seated(state, a):
        keep_or_set_aside(ex, state, a, seating)


def is_copy(ex: Exchange, state: HostState, a: int, facts: NodeFacts) -> bool:
    """Whether arrival a's facts carry the process token of facts read before: one process's
    facts under a second arrival, which only another client writes (issue 39: without
    --token nothing else tells a copy of node1 from node1). Named as interference and
    deleted, never seated; a seated rank whose facts were copied is noted, so that it is not
    blamed where the copy, read first, took its seat and never reported back."""
    first = state.instances.setdefault(facts.instance, a) if facts.instance else a
    if first == a:
        return False
    state.copied.add(first)
    ex.interference.note(ex.key(NODE, a), f"holds the facts of arrival {first} ({facts.hostname}, node rank "
                                          f"{facts.launch.node_rank}), its process's own token included: a copy "
                                          "written by a client that is not a netcheck node; not seated")
    _drop_facts(ex, a)
    return True


def never_seated(state: HostState, a: int) -> bool:
    """Whether arrival a can never get a seat, whoever else comes: it claims a rank past
    --nnodes, or it claims none and the seats are full. Arrivals only ever take seats
    (claims first, the rest in arrival order), so an arrival left out now stays out. Ranks
    are assigned again only where more arrived than there are seats: no cost to a run
    without extras, however large."""
    high = state.nnodes_max
    if high is None or a == state.host_arrival:
        return False
    claimed = state.arrivals[a].launch.node_rank
    if claimed is not None:
        return claimed >= high
    return len(state.arrivals) > high and a in assign_ranks(state.arrivals, state.host_arrival, high)[2]


def keep_or_set_aside(ex: Exchange, state: HostState, a: int, seating: bool = True) -> None:
    """The first MAX_STRANGERS arrivals that can never be seated are kept whole, as every
    arrival is: the report names them one by one, and the launch checks read their facts (a
    node given another --nnodes). Past those, only why each was not seated is kept (while
    seating; a latecomer's hostname and claim are in state.latecomers already), and its
    facts are deleted from the store as well (the host's store holds them in the host's
    memory): 200 arrivals of 1 MiB past --nnodes cost the host 404 MB when all were kept."""
    if state.unseatable_kept < MAX_STRANGERS:
        state.unseatable_kept += 1
        return
    facts = state.arrivals.pop(a)
    if seating:
        state.set_aside.append(unseated_reason(facts, state.nnodes_max))
    _drop_facts(ex, a)


def _drop_facts(ex: Exchange, a: int) -> None:
    """Arrival a's facts (and MAC) deleted from the host's store, which holds them in the
    host's memory."""
    ex.drop(ex.key(NODE, a))
    if ex.signer.token:
        ex.drop(ex.key(NODE, a) + MAC_SUFFIX)


def _counted(ex: Exchange, key: Slot[int]) -> int:
    """A counter's value as the host polls it (read, never add(): see Exchange.read_counter); one
    another client set to text or pushed negative is named, and counts nothing."""
    counted = ex.read_counter(key)
    if isinstance(counted, str):
        ex.interference.note(key, f"holds {counted}, not a counter: set by a client that is not a netcheck node")
        return 0
    if counted < 0:
        ex.interference.note(key, f"counts {counted}: pushed to int64's maximum (add() wraps) by a client that "
                                  "is not a netcheck node")
        return 0
    return counted


def _arrivals_to_read(ex: Exchange, state: HostState, counted: int) -> Iterator[int]:
    """The arrivals to look at: by the counter alone while it is sane; where another client
    pushed it (counted past what was written, or unusable), the listed arrivals first (a
    number taken at random is only listed), then the counter's as before."""
    by_counter = unread(state.arrivals_seen, counted, state.read)
    if counted - len(state.read) <= MAX_STRANGERS and not ex.interference.noted(ex.key(ARRIVALS)):
        return by_counter
    listed = ex.posted(NODE)
    if listed is None:
        ex.interference.note(ex.listing(NODE), "grew past any cluster's list: appended to by a client that is "
                                               "not a netcheck node")
        return by_counter
    return itertools.chain(sorted(listed.difference(state.read)), by_counter)


def unread(seen: int, counted: int, read: Container[int]) -> Iterator[int]:
    """The numbers below `counted` not read yet, the newest first, then the rest from `seen`.

    A counter is anyone's to push: one pushed far past the cluster leaves a gap of numbers
    nobody writes, and the nodes that came after the push sit above it. Looked at newest
    first, they are read on the next poll, not after the gap has been scanned (lazily: the
    gap may be billions long, and the scan's deadline stops it)."""
    newest = range(counted - 1, max(seen, counted - NEWEST_FIRST) - 1, -1)
    older = range(seen, max(seen, counted - NEWEST_FIRST))
    return (n for n in itertools.chain(newest, older) if n not in read)


def counter_gaps(ex: Exchange, state: HostState) -> list[str]:
    """The counters pushed past what was written: numbers taken by something that never wrote
    (a node dies between the two only now and then; many at once are not netcheck's)."""
    gaps = ((ex.key(ARRIVALS), state.arrivals_counted, len(state.read)),
            (ex.key(VISITORS), state.visitors_counted, len(state.visitors)))
    return [f"{key} counts {counted} but {written} were written: the rest were counted in by a "
            "client that is not a netcheck node" for key, counted, written in gaps
            if counted - written > MAX_STRANGERS]


def read_visitors(ex: Exchange, state: HostState, scan: Deadline) -> None:
    """Read the visitor records not read yet, until the scan's deadline (the counter is
    anyone's). One counted but not written yet is looked at again on a later read, and
    does not hide the visitors after it."""
    counted = _counted(ex, ex.key(VISITORS))
    state.visitors_counted = max(state.visitors_counted, counted)
    for v in _visitors_to_read(ex, state, counted):
        if scan.expired() or len(state.visitors) >= MAX_MEMBERS:
            break
        key = ex.key(VISITOR, v)
        if not ex.has(key):
            continue
        try:
            state.visitors[v] = ex.read(key, signed=False, max_bytes=MAX_VISITOR_BYTES)
        except codec.DecodeError:
            state.visitors[v] = None
            state.visitors_refused += 1
            ex.drop(key)   # refused: its bytes are not kept in the host's store either
    while state.visitors_seen in state.visitors:
        state.visitors_seen += 1


def _visitors_to_read(ex: Exchange, state: HostState, counted: int) -> Iterator[int]:
    """By the counter while it is sane; where another client spoilt or pushed it, the listed
    visitors first (a number taken at random is only listed), then the counter's."""
    by_counter = unread(state.visitors_seen, counted, state.visitors.keys())
    if counted - len(state.visitors) <= MAX_STRANGERS and not ex.interference.noted(ex.key(VISITORS)):
        return by_counter
    listed = ex.posted(VISITOR)
    if listed is None:
        ex.interference.note(ex.listing(VISITOR), "grew past any cluster's list: appended to by a client that "
                                                  "is not a netcheck node")
        return by_counter
    return itertools.chain(sorted(listed.difference(state.visitors)), by_counter)


def _answer_pings(ex: Exchange, state: HostState, scan: Deadline) -> None:
    """Answer the clock pings listed since the last scan (one request to learn them all),
    from where the last scan stopped: the list is anyone's to append to. A list grown past
    any cluster's pings is cleared unread and named; the honest pings in it are asked again,
    and a node never answered goes on without its clock sample (measure_clock)."""
    key = ex.key(PINGS)
    asked = ex.listed(key, MAX_PINGS_BYTES)
    if asked is None:
        ex.drop(key)
        ex.keep_clearing(key)
        state.pings_answered = 0
        ex.interference.note(key, f"grew past {MAX_PINGS_BYTES} bytes: appended to by a client that is not a "
                                  "netcheck node (cleared unread, and from then on every "
                                  f"{FLOODED_LIST_SWEEP * 1000:g} ms: a node whose pings it held goes on without "
                                  "a clock sample)")
        return
    # Once flooded, the list is cleared under the host's feet: each look answers all of it.
    pongs = []
    for entry in asked[0 if ex.clearing(key) else state.pings_answered:]:
        if scan.expired():
            break
        ticket, _, k = entry.partition("/")
        if TICKET.fullmatch(ticket) and (ping := codec.small_int(k)) is not None and ping < CLOCK_PINGS:
            pongs.append(ex.key(PONG, ticket, ping))
        state.pings_answered += 1
    # One request for them all, stamped once: each ping was read before the stamp.
    now = Pong(time.time(), ex.signer.nonce)
    ex.put_many(dict.fromkeys(pongs, now), nonce="")
    if not ex.clearing(key) and state.pings_answered == len(asked) and _listed_bytes(asked) > PINGS_KEPT_BYTES:
        # A ping appended since the read is lost with the rest: its node asks again after PING_RETRY.
        ex.drop(key)
        state.pings_answered = 0


def _listed_bytes(entries: list[str]) -> int:
    """What a list's entries took in the store: each with its comma."""
    return sum(len(e) + 1 for e in entries)


@dataclass(frozen=True)
class RosterRecords:
    """What the host posts of the seating: the roster (read by no joiner), each block of seats,
    and every seated node's names as runs (what a joiner reads); its FQDNs by rank, kept."""

    roster: Roster
    blocks: dict[int, SeatBlock]
    seated: Seated
    fqdns: dict[int, str]


def roster_records(arrivals: dict[int, NodeFacts], ranks: dict[int, int]) -> RosterRecords:
    entries = tuple(
        RosterEntry(a, r, arrivals[a].hostname, arrivals[a].fqdn, node_address(arrivals[a]))
        for a, r in sorted(ranks.items(), key=lambda item: item[1]))
    roster = Roster(entries)
    blocks = seat_blocks(ranks)
    fqdns = {e.rank: e.fqdn for e in entries}
    return RosterRecords(roster, blocks, Seated(compact(roster.hostnames()), compact(fqdns), tuple(sorted(blocks))),
                         fqdns)


def post_roster(seat: Seat, arrivals: dict[int, NodeFacts], ranks: dict[int, int]) -> Roster:
    records = roster_records(arrivals, ranks)
    seat.roster = records.roster
    seat.rank, seat.hostnames = ranks.get(seat.arrival), seat.roster.hostnames()
    seat.fqdns = records.fqdns
    ex = seat.exchange
    for b, block in records.blocks.items():
        _post_once(ex, ex.key(SEAT, b), block, guard=True)
    # After the blocks: a joiner that reads it finds its block there.
    _post_once(ex, ex.key(SEATED), records.seated, guard=True)
    # Read by no joiner, so not guarded: the guard reads back what it keeps, 1.1 MB a second
    # at 10,000 nodes.
    _post_once(ex, ex.key(ROSTER), seat.roster, guard=False)
    ex.pace(len(seat.roster.entries))
    return seat.roster


def _post_once(ex: Exchange, key: Slot[T], value: T, guard: bool) -> None:
    """Only the host posts it, once: a value already there is another client's, named."""
    if ex.has(key):
        ex.interference.note(key, "held a value before the host posted it (the host wrote over it)")
    ex.put(key, value, guard=guard)


def gathering(ex: Exchange, roster: Roster, state: HostState,
              results: dict[int, NodeResults], duplicates: dict[str, tuple[str, ...]], extras: list[int],
              expected: tuple[int | None, int | None], expected_hostnames: tuple[str, ...],
              waited: float, deadline: Deadline) -> Gathering:
    """What the rules need of the rendezvous; expected is (MIN, MAX) of --nnodes: ranks below
    MIN are owed, seats up to MAX may be taken. Visitors come from the host's poll, read on
    to the deadline (who came since)."""
    read_visitors(ex, state, deadline)
    deleted = (f"{ex.key(VISITOR)}/* held {state.visitors_refused} records that are no netcheck "
               "visitor's (refused and deleted)",) if state.visitors_refused else ()
    interference = ex.interference.lines() + tuple(counter_gaps(ex, state)) + deleted
    poll_arrivals(ex, state)   # facts that came since the roster are a latecomer's, not lost
    return gathering_of(roster, state, results, duplicates, extras, expected, expected_hostnames, waited,
                        ex.run_id, interference)


def gathering_of(roster: Roster, state: HostState, results: dict[int, NodeResults],
                 duplicates: dict[str, tuple[str, ...]],
                 extras: list[int], expected: tuple[int | None, int | None], expected_hostnames: tuple[str, ...],
                 waited: float, run_id: str, interference: tuple[str, ...] = ()) -> Gathering:
    """The Gathering of what the host read (gathering's, once the store is read to the end): the
    members by the roster, the ranks owed, who came unseated or without facts, of this run or another."""
    low, high = expected
    arrivals = state.arrivals
    members = tuple(Member(e.rank, arrivals[e.arrival], results.get(e.arrival)) for e in roster.entries)
    ranks = {e.rank for e in roster.entries}
    missing = tuple(r for r in range(low or 0) if r not in ranks)
    unseated = tuple(unseated_reason(arrivals[a], high) for a in extras) + tuple(state.set_aside)
    foreign = tuple(v for _, v in sorted(state.visitors.items()) if v and v.run_id != run_id)
    came = came_without_facts(run_id, state, missing)
    refused = refused_senders(state, {str(v.node_rank): v.hostname for v in came if v.node_rank is not None})
    return Gathering(members, low, missing, expected_hostnames, duplicates, unseated,
                     foreign, tuple(state.malformed), round(waited, 3), tuple(interference), refused,
                     () if state.arrivals_refused else came,   # else they may be the refused facts' senders
                     tuple(e.rank for e in roster.entries if e.arrival in state.copied))


def came_without_facts(run_id: str, state: HostState, missing: tuple[int, ...]) -> tuple[Visitor, ...]:
    """The visitor records of this run, read while seating, that no arrival read answers (by
    hostname, each arrival answering one record) and that claim a missing rank or none (the
    one-shot form): those nodes reached the store, whatever became of their facts. A record
    read only after the roster is a latecomer's, named as such once its facts come."""
    answered = Counter(state.arrived_names)
    came: dict[tuple[str, NodeRank | None], Visitor] = {}
    for v_number in sorted(state.seating_visitors):
        v = state.visitors.get(v_number)
        if not v or v.run_id != run_id:
            continue
        if answered[v.hostname] > 0:
            answered[v.hostname] -= 1
        elif v.node_rank is None or v.node_rank in missing:
            came.setdefault((v.hostname, v.node_rank), v)   # a node's record once, where it signed in twice
    return tuple(came.values())


def refused_senders(state: HostState, claims: dict[str, str]) -> dict[str, str]:
    """Missing rank -> "HOSTNAME: why", where facts were refused and a node that came claims
    that rank: it sent what netcheck refused, and is named as their sender."""
    if not state.arrivals_refused:
        return {}
    why = "; ".join(f"arrival {a}: {e}" for a, e in list(state.arrivals_refused.items())[:MAX_STRANGERS])
    return {r: f"{hostname}: {why}" for r, hostname in claims.items()}


