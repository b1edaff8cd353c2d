"""Phase 3, rendezvous: every node meets at a torch TCPStore on the job's own port.

TCPStore is the component torchrun's c10d rendezvous stands on, so a pass here means the
real job's rendezvous can work. Keys (all values JSON, size-bounded, validated):

    netcheck/host                  the host's hello: which run it serves
    netcheck/visitors, /visitor/V  everyone who came, any run id (foreign nodes are named)
    netcheck/ping/V/K, /pong/V/K   clock round trips, answered by the host's poll loop
    netcheck/RUN/arrivals, /node/A a node's facts, A its arrival number
    netcheck/RUN/roster            the host's rank assignment, once everyone is in
    netcheck/RUN/result/A          what node A learnt from the roster (clock, FQDN lookups)
    netcheck/RUN/bye/A             node A is done; the host keeps the store up until all are

Every wait has a deadline; nothing received is unpickled or executed.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import socket
import stat
import struct
import time
from dataclasses import dataclass, field

from netcheck.core import codec, compat
from netcheck.core.constants import (
    ARRIVAL_MIN_NODES, CLOCK_PINGS, LOOKUP_TIMEOUT, MAX_FACTS_BYTES, MAX_NODES, POLL_SLICE,
    STORE_POLL_INTERVAL, STORE_REPLY_TIMEOUT,
)
from netcheck.core.deadline import Deadline
from netcheck.core.model import (
    ClockSample, Gathering, Member, NodeFacts, NodeResults, Resolution, Visitor,
    node_address,
)
from netcheck.facts.probe import resolve_many

ROOT = "netcheck"
MAC_SUFFIX = "#mac"
CONNECT_TRY = 2.0


class RendezvousError(Exception):
    """The rendezvous could not go on; the message says why in one line."""


@dataclass(frozen=True)
class Hello:
    run_id: str
    hostname: str
    version: str


@dataclass(frozen=True)
class RosterEntry:
    arrival: int
    rank: int
    hostname: str
    fqdn: str
    address: str


@dataclass(frozen=True)
class Roster:
    entries: tuple[RosterEntry, ...]

    def by_arrival(self, arrival: int) -> RosterEntry | None:
        return next((e for e in self.entries if e.arrival == arrival), None)

    def hostnames(self) -> dict[int, str]:
        """rank -> hostname of every seated node."""
        return {e.rank: e.hostname for e in self.entries}


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(0.05, seconds))


def host_store(listener: socket.socket, port: int, deadline: Deadline):
    """The TCPStore server, on the socket the host has listened on since it started.

    The store takes the descriptor over and closes it itself, so Python lets go of it.
    """
    dist = compat.import_distributed()
    return compat.server_store(dist, port, _timedelta(deadline.remaining()), listener.detach())


def client_store(host: str, port: int, deadline: Deadline):
    # TCPStore retries a refused connect for up to ~2 times the timeout it is given, so
    # it gets short tries, each ending well inside the deadline, until the deadline.
    dist = compat.import_distributed()
    while True:
        try:
            before = _socket_fds()
            store = dist.TCPStore(host, port, None, False, compat.connect_timeout(
                _timedelta(min(CONNECT_TRY, deadline.remaining() / 3))))
            store.set_timeout(_timedelta(deadline.remaining()))
            _bound_replies(_socket_fds() - before, port, STORE_REPLY_TIMEOUT)
            return store
        except (RuntimeError, OSError) as e:
            if deadline.remaining() < 0.1:
                raise RendezvousError(f"could not connect a TCPStore client to {host}:{port}: "
                                      f"{_first_line(e)}") from None


def _socket_fds() -> set[int]:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return set()
    fds = set()
    for name in names:
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                fds.add(int(name))
        except OSError:
            continue  # closed meanwhile (listdir's own descriptor among them)
    return fds


def _bound_replies(fds: set[int], port: int, seconds: float) -> None:
    """A receive/send timeout on the store client's socket (the new one connected to port).

    TCPStore's own timeout bounds waiting for a key, not a reply: over a link cut mid-run
    (packets dropped, no RST) a plain check() sits in recv for as long as TCP retries: no
    answer in 120 s with every timeout set to 2 s (benchmarks/store_link_cut.py). With
    SO_RCVTIMEO the call raises DistNetworkError ("Socket Timeout") instead, which reads as
    a lost host.
    """
    timeval = struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))
    for fd in fds:
        try:
            copy = os.dup(fd)  # socket options are the socket's: set through a copy, closed after
        except OSError:
            continue  # closed since it was listed: not the store's
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # a family Python does not know (netlink): not the store's
            os.close(copy)
            continue
        with sock:
            try:
                if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getpeername()[1] == port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            except OSError:
                continue  # not connected: not the store's


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


class Exchange:
    """Typed, bounded JSON over the store; the one place store keys are read and written.

    With a token (--token / NETCHECK_TOKEN) every value carries an HMAC-SHA256 of its bytes
    under KEY#mac, and a value whose MAC is missing or wrong reads as malformed: nodes
    prove they share the secret. Visitor records stay unsigned, so nodes of other runs
    (or without the token) are still named.
    """

    def __init__(self, store, run_id: str, token: str | None = None):
        self._store = store
        self.run_id = run_id
        self.token = token
        self.lost: str | None = None  # why the store connection broke, once it has

    def _call(self, method, *args):  # a store method's name, or a compat function of the store
        # After a broken request (a reply timed out) the stream is out of step: a late
        # reply would answer the next request. So the first break is final.
        if self.lost is not None:
            raise ConnectionError(f"the host's store was lost earlier: {self.lost}")
        try:
            if callable(method):
                return method(self._store, *args)
            return getattr(self._store, method)(*args)
        except Exception as e:
            if compat.store_lost(e):
                self.lost = _first_line(e)
            raise

    def key(self, *parts: object, shared: bool = False) -> str:
        scope = (ROOT,) if shared else (ROOT, self.run_id)
        return "/".join(scope + tuple(str(p) for p in parts))

    def put(self, key: str, value: object, signed: bool = True) -> None:
        text = codec.dumps(value)
        if self.token and signed:
            self._call("set", key + MAC_SUFFIX, self._mac(text.encode()))
        self._call("set", key, text)

    def _mac(self, data: bytes) -> str:
        return hmac.new(self.token.encode(), data, hashlib.sha256).hexdigest()

    def has(self, key: str) -> bool:
        return self._call(compat.has_key, key)

    def count(self, key: str, add: int = 0) -> int:
        return self._call("add", key, add)

    def read(self, cls, key: str, signed: bool = True):
        """Decode a key known to exist; raises codec.DecodeError for anything malformed."""
        data = self._call("get", key)
        if self.token and signed:
            mac = self._call("get", key + MAC_SUFFIX) if self.has(key + MAC_SUFFIX) else b""
            if not hmac.compare_digest(mac, self._mac(data).encode()):
                raise codec.DecodeError("not signed with this --token")
        return codec.loads(cls, data, MAX_FACTS_BYTES)

    def wait_read(self, cls, key: str, deadline: Deadline):
        self.wait(key, deadline)
        return self.read(cls, key)

    def wait(self, key: str, deadline: Deadline) -> None:
        # Polled, not a blocking store.wait: Python sees Ctrl-C only between calls, and a
        # blocking wait would hold it until the deadline.
        # A store that breaks (the host died) raises its own error: that is a lost host,
        # not a slow one, and the phase boundary reports it as such.
        pause = 0.002  # quick at first: a clock pong is answered within one host poll
        while not self.has(key):  # one look at least, also past the deadline
            if deadline.expired():
                raise TimeoutError(f"{key} did not appear in time")
            time.sleep(pause)
            pause = min(2 * pause, STORE_POLL_INTERVAL)


# --- every node, the host included -------------------------------------------------------

@dataclass
class Seat:
    """A node's place in the rendezvous, used by the later phases and for goodbye."""

    exchange: Exchange
    arrival: int
    roster: Roster | None = None

    @property
    def rank(self) -> int | None:
        entry = self.roster.by_arrival(self.arrival) if self.roster else None
        return entry.rank if entry else None

    def goodbye(self) -> None:
        try:
            self.exchange.put(self.exchange.key("bye", self.arrival), 1)
        except (RuntimeError, OSError):
            pass  # the host is gone already: nobody is waiting for this goodbye


def sign_in(ex: Exchange, facts: NodeFacts) -> int:
    """Register as a visitor (any run id), so the host can name nodes of other runs."""
    visitor = ex.count(ex.key("visitors", shared=True), 1) - 1
    ex.put(ex.key("visitor", visitor, shared=True),
           Visitor(facts.run_id, facts.hostname, facts.launch.node_rank), signed=False)
    return visitor


def check_run_id(ex: Exchange, deadline: Deadline) -> None:
    hello = ex.wait_read(Hello, ex.key("host", shared=True), deadline)
    if hello.run_id != ex.run_id:
        raise RendezvousError(f"the store at this endpoint serves run id {hello.run_id!r} "
                              f"(host {hello.hostname}); this node was started with "
                              f"--rdzv-id {ex.run_id!r}")


def measure_clock(ex: Exchange, visitor: int, deadline: Deadline) -> ClockSample:
    """Offset to the host's clock from store round trips; the tightest of a few wins."""
    best = None
    for k in range(CLOCK_PINGS):
        sent = time.time()
        ex.put(ex.key("ping", visitor, k, shared=True), "", signed=False)
        host_time = float(ex.wait_read(float, ex.key("pong", visitor, k, shared=True), deadline))
        back = time.time()
        sample = ClockSample(round(host_time - (sent + back) / 2, 6), round((back - sent) / 2, 6))
        best = sample if best is None or sample.error < best.error else best
    # Reported as the peer's clock minus the host's.
    return ClockSample(-best.offset, best.error)


def publish_facts(ex: Exchange, facts: NodeFacts) -> int:
    arrival = ex.count(ex.key("arrivals"), 1) - 1
    ex.put(ex.key("node", arrival), facts)
    return arrival


def lookup_peers(roster: Roster, me: int) -> tuple[Resolution, ...]:
    """Resolve every other node's FQDN from here, as its workers would resolve MASTER_ADDR."""
    peers = [e for e in roster.entries if e.arrival != me]
    answers = resolve_many([e.fqdn for e in peers], LOOKUP_TIMEOUT)
    return tuple(Resolution(e.rank, e.fqdn, *answers[e.fqdn]) for e in peers)


def report_back(seat: Seat, clock: ClockSample | None) -> NodeResults:
    results = NodeResults(clock, lookup_peers(seat.roster, seat.arrival))
    seat.exchange.put(seat.exchange.key("result", seat.arrival), results)
    return results


# --- joiner ---------------------------------------------------------------------------------

def join(store, facts: NodeFacts, deadline: Deadline, token: str | None = None
         ) -> tuple[Seat, NodeResults | None]:
    """Take a seat at the host's store; returns once the roster is known (or raises)."""
    ex = Exchange(store, facts.run_id, token)
    try:
        visitor = sign_in(ex, facts)
        check_run_id(ex, deadline)
        if ex.has(ex.key("roster")):  # too late: published so the host names it, not seated
            seat = Seat(ex, publish_facts(ex, facts), ex.read(Roster, ex.key("roster")))
            return seat, None
        clock = measure_clock(ex, visitor, deadline)
        seat = Seat(ex, publish_facts(ex, facts))
        seat.roster = ex.wait_read(Roster, ex.key("roster"), deadline)
    except TimeoutError as e:
        raise RendezvousError(f"the host did not finish the rendezvous in time: {e}") from None
    except codec.DecodeError as e:
        raise RendezvousError(f"the store holds data netcheck cannot read: {e}") from None
    except (RuntimeError, OSError) as e:
        raise RendezvousError(f"the host stopped answering during the rendezvous: "
                              f"{_first_line(e)}") from None
    if seat.rank is None:
        return seat, None
    return seat, report_back(seat, clock)


# --- host -------------------------------------------------------------------------------------

@dataclass
class HostState:
    """What the host's poll loop has seen so far."""

    arrivals: dict[int, NodeFacts]
    malformed: list[str]
    pings_answered: dict[int, int]
    arrivals_seen: int = 0   # every arrival below this one is read
    last_arrival: float = 0.0
    read: set[int] = field(default_factory=set)   # arrivals read, also past a gap
    ping_cursor: int = 0     # the visitor the next ping scan starts at


def announce(ex: Exchange, facts: NodeFacts) -> None:
    ex.put(ex.key("host", shared=True), Hello(facts.run_id, facts.hostname, facts.version))


def host_gather(ex: Exchange, facts: NodeFacts, expected: tuple[int | None, int | None],
                join_window: float, deadline: Deadline) -> tuple[Seat, HostState, float]:
    """Wait for the nodes to arrive (answering clock pings meanwhile) until done or deadline.

    The host's own facts are in from the start, and the store is read at least once, also
    when start-up (torch's import, the store) has already spent the join deadline: a late
    poll still seats whoever came, the host included.
    """
    low, high = expected
    state = HostState({}, [], {}, last_arrival=time.monotonic())
    sign_in(ex, facts)  # the host is a visitor too: every node that came is listed
    arrival = publish_facts(ex, facts)
    state.arrivals[arrival] = facts
    state.read.add(arrival)
    start = time.monotonic()
    while True:
        poll_arrivals(ex, state)
        ranked, _, _ = assign_ranks(state.arrivals, arrival, high)
        quiet = time.monotonic() - state.last_arrival
        if rendezvous_closed(len(ranked), low, high, quiet, join_window) or deadline.expired():
            break
        time.sleep(STORE_POLL_INTERVAL)
    return Seat(ex, arrival), state, time.monotonic() - start


def rendezvous_closed(seated: int, low: int | None, high: int | None, quiet_for: float,
                      window: float) -> bool:
    """Whether the host stops waiting for joiners before its deadline, by torchrun's rules:

    - `--nnodes N`: once N nodes are seated;
    - `--nnodes MIN:MAX`: once MAX are, or MIN are and nobody came for the join window;
    - no count (nodes numbered as they arrive): once someone besides the host came and
      nobody came for the join window. A host alone keeps waiting: a rendezvous that
      heard from no other node has proven nothing.
    """
    if high is not None and seated >= high:
        return True
    return seated >= (low or ARRIVAL_MIN_NODES) and quiet_for >= window


def poll_arrivals(ex: Exchange, state: HostState) -> None:
    """Read arrivals not seen yet (also after the roster: latecomers are named too).

    Counters are anyone's to push, so each scan (pings, arrivals) stops after POLL_SLICE
    seconds of store requests and the next poll goes on from there: a poll is bounded
    whatever a foreign client counted in.
    """
    _answer_pings(ex, state, Deadline(POLL_SLICE))
    scan = Deadline(POLL_SLICE)
    arrivals = min(ex.count(ex.key("arrivals")), MAX_NODES)
    for a in range(state.arrivals_seen, arrivals):
        # Counted but not written yet: read on a later poll. Not a reason to stop: a
        # client that counts itself in and never writes must not hide the nodes after it.
        if scan.expired():
            break
        if a in state.read or not ex.has(ex.key("node", a)):
            continue
        state.read.add(a)
        state.last_arrival = time.monotonic()
        try:
            state.arrivals[a] = ex.read(NodeFacts, ex.key("node", a))
        except codec.DecodeError as e:
            state.malformed.append(f"arrival {a}: {e}")
    while state.arrivals_seen in state.read:
        state.arrivals_seen += 1


def _answer_pings(ex: Exchange, state: HostState, scan: Deadline) -> None:
    """Answer clock pings, visitor by visitor from where the last scan stopped."""
    visitors = min(ex.count(ex.key("visitors", shared=True)), MAX_NODES)
    first = state.ping_cursor
    for step in range(visitors):
        if scan.expired():
            return
        v = (first + step) % visitors
        k = state.pings_answered.get(v, 0)
        while k < CLOCK_PINGS and ex.has(ex.key("ping", v, k, shared=True)):
            ex.put(ex.key("pong", v, k, shared=True), time.time())
            k += 1
        state.pings_answered[v] = k
        state.ping_cursor = v + 1


def assign_ranks(arrivals: dict[int, NodeFacts], host_arrival: int, nnodes_max: int | None
                 ) -> tuple[dict[int, int], dict[str, tuple[str, ...]], list[int]]:
    """Ranks by arrival: claimed ranks first (the host's, then in arrival order), the rest
    numbered from the lowest free rank. Returns (arrival -> rank, duplicate claims, extras)."""
    order = sorted(arrivals, key=lambda a: (a != host_arrival, a))
    ranks: dict[int, int] = {}
    taken: set[int] = set()  # ranks.values(), for lookups in O(1): the host runs this every poll
    claims: dict[int, list[str]] = {}
    extras = []
    for a in order:
        claimed = arrivals[a].launch.node_rank
        if claimed is not None and nnodes_max is not None and claimed >= nnodes_max:
            extras.append(a)
        elif claimed is not None:
            claims.setdefault(claimed, []).append(arrivals[a].hostname)
            if claimed not in taken:
                ranks[a] = claimed
                taken.add(claimed)
    free = (r for r in range(MAX_NODES) if r not in taken)
    for a in order:
        if arrivals[a].launch.node_rank is None:
            rank = next(free)
            if nnodes_max is not None and rank >= nnodes_max:
                extras.append(a)
            else:
                ranks[a] = rank
    duplicates = {str(r): tuple(h) for r, h in claims.items() if len(h) > 1}
    return ranks, duplicates, extras



def post_roster(seat: Seat, arrivals: dict[int, NodeFacts], ranks: dict[int, int]) -> Roster:
    entries = tuple(
        RosterEntry(a, r, arrivals[a].hostname, arrivals[a].fqdn, node_address(arrivals[a]))
        for a, r in sorted(ranks.items(), key=lambda item: item[1]))
    seat.roster = Roster(entries)
    seat.exchange.put(seat.exchange.key("roster"), seat.roster)
    return seat.roster


def collect(ex: Exchange, cls, name: str, ids: list[int], deadline: Deadline) -> dict:
    """Every `name/ID` value for the given ids, read as they appear, until all or the deadline.

    An id whose value never comes or does not decode is simply absent: the rules name it.
    """
    found: dict = {}
    pending = set(ids)
    while pending:  # one look at least, also past the deadline: what is there counts
        for i in sorted(pending):
            if ex.has(ex.key(name, i)):
                pending.discard(i)
                try:
                    found[i] = ex.read(cls, ex.key(name, i))
                except codec.DecodeError:
                    pass
        if not pending or deadline.expired():
            break
        time.sleep(STORE_POLL_INTERVAL)
    return found


def read_visitors(ex: Exchange, deadline: Deadline) -> list[Visitor]:
    """Every visitor record there is, as far as the deadline allows (the counter is anyone's)."""
    visitors = []
    for v in range(min(ex.count(ex.key("visitors", shared=True)), MAX_NODES)):
        if deadline.expired():
            break
        key = ex.key("visitor", v, shared=True)
        try:
            if ex.has(key):
                visitors.append(ex.read(Visitor, key, signed=False))
        except codec.DecodeError:
            continue
    return visitors


def gathering(ex: Exchange, roster: Roster, arrivals: dict[int, NodeFacts],
              results: dict[int, NodeResults], duplicates, extras: list[int],
              expected: tuple[int | None, int | None], expected_hostnames: tuple[str, ...],
              malformed: list[str], waited: float, deadline: Deadline) -> Gathering:
    """What the rules need of the rendezvous; expected is (MIN, MAX) of --nnodes: ranks below
    MIN are owed, seats up to MAX may be taken."""
    low, high = expected
    members = tuple(Member(e.rank, arrivals[e.arrival], results.get(e.arrival)) for e in roster.entries)
    ranks = {e.rank for e in roster.entries}
    missing = tuple(r for r in range(low or 0) if r not in ranks)
    unseated = tuple(_unseated_reason(arrivals[a], high) for a in extras)
    foreign = tuple(v for v in read_visitors(ex, deadline) if v.run_id != ex.run_id)
    return Gathering(members, low, missing, expected_hostnames, duplicates, unseated,
                     foreign, tuple(malformed), round(waited, 3))


def _unseated_reason(facts: NodeFacts, expected_n: int | None) -> str:
    claimed = facts.launch.node_rank
    if claimed is not None:
        return f"{facts.hostname} claims node rank {claimed}, but nnodes is {expected_n}: not seated"
    return f"{facts.hostname} came after all {expected_n} seats were taken: not seated"
