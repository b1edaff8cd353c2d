"""Phase 4, mesh: which interfaces carry traffic between each pair of nodes, tried for real.

Each node listens on a port the kernel picks, on every candidate interface (running, addressed,
loopback aside), publishes the (interface, address, port) list, then connects to each
peer's candidates at once, with a short deadline per connect. A listener answers every
connection with its node's rank and a per-run token, so a connect that lands somewhere
else (docker0 carries the same 172.17.0.1 on every host: the "peer" is this very node) is
told apart from a real path. This is the traffic NCCL and gloo send on ephemeral ports,
which a firewall that only opens the master port drops.

A greeting is small, so it proves only that small frames pass. After it the listener echoes
what it receives, and the connecting node sends full-size segments (its connection's MSS)
one at a time: a path whose ends both say MTU 9000 while a switch port between them carries
1500 drops those frames without a word (no ICMP comes back) and passes the greeting, the
classic "small messages work, large ones hang". Where they are lost, smaller frames are
tried on fresh connections, so the finding can say which size passes.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import random
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import cast

from netcheck.core.constants import (
    MESH_CONNECT_TIMEOUT,
    MESH_CONNECTS_AT_ONCE,
    MESH_FALLBACK_FRAMES,
    MESH_FULL_UP_TO,
    MESH_ROUTES_READ,
    MESH_SAMPLE_PEERS,
    MESH_TRANSFER_SEGMENTS,
    MESH_TRANSFER_TIMEOUT,
)
from netcheck.core.deadline import Deadline
from netcheck.core.meshrecords import (
    BLACKHOLE,
    CLOSED,
    ECHOED,
    FILTERED,
    LOCAL,
    LOST,
    OK,
    REFUSED,
    UNREACHED,
    UNTRIED,
    WRONG_PEER,
    Attempt,
    Candidate,
    MeshOutcome,
    Offer,
    Transfer,
    Trial,
    TrialResult,
    passed_frame,
)
from netcheck.core.model import UNANSWERED
from netcheck.core.nictable import NicTable, address_owners
from netcheck.facts.probe import error_text, failed_connect, reset_on_close
from netcheck.facts.routes import IP_COMMAND_TIMEOUT, route_to

GREETING = "netcheck-mesh"
MAX_GREETING = 128
# Linux's values (linux/in.h, linux/in6.h): Python's socket module lacks them on some builds.
IP_MTU, IPV6_MTU = getattr(socket, "IP_MTU", 14), getattr(socket, "IPV6_MTU", 24)
HEADERS = {socket.AF_INET: 40, socket.AF_INET6: 60}  # IP + TCP header bytes: a frame is its MSS plus these
MAX_ECHO = MESH_TRANSFER_SEGMENTS << 16  # a listener echoes at most this much per connection (MTU <= 64 KiB)
LINGER = MESH_CONNECT_TIMEOUT + MESH_TRANSFER_TIMEOUT  # the peer has given up on a connection by then
EXPIRY_TICK = 0.1  # the listener's select timeout, and how often it closes connections past LINGER


def candidate_addresses(table: NicTable) -> list[tuple[str, str]]:
    """(interface, address) for every running interface's routable addresses, loopback aside.

    IPv6 link-local addresses are left out: they need a scope id, and NCCL skips them too.
    """
    out = []
    for nic in table.nics:
        if not (nic.up and nic.running) or nic.kind == "loopback":
            continue
        for addr in nic.addresses:
            ip = ipaddress.ip_address(addr.address)
            if not (ip.is_loopback or ip.is_link_local):
                out.append((nic.name, addr.address))
    return out


def interface_mtus(table: NicTable) -> dict[str, int]:
    return {nic.name: nic.mtu for nic in table.nics}


def default_mode(nnodes: int) -> int | None:
    return None if nnodes <= MESH_FULL_UP_TO else MESH_SAMPLE_PEERS


def targets(rank: int, ranks: list[int], sample: int | None, seed: str) -> list[int]:
    """The peers this node connects to: all, or ring neighbours plus `sample` random peers.

    Seeded by the run id, so a rerun probes the same pairs and reports are comparable.
    """
    return ring_targets(rank, sorted(ranks), sample, seed)


def ring_targets(rank: int, ring: Sequence[int], sample: int | None, seed: str) -> list[int]:
    """targets() over ranks already sorted (ring), rank found by bisection: a draw costs the
    sample, not the cluster, where one process draws for every node (benchmarks/scale.py
    --in-process: 131,072 draws over the whole ring took 2.4 ms each)."""
    i = bisect.bisect_left(ring, rank)
    seated = i < len(ring) and ring[i] == rank
    if sample is None or len(ring) - seated <= sample + 2:
        return [r for r in ring if r != rank]
    if not seated:
        raise ValueError(f"{rank} is not in the ranks to draw from")
    near = sorted({i, (i + 1) % len(ring), (i - 1) % len(ring)})
    # The sample is drawn by position among the ranks left: no list of them is built, so a
    # node's draw costs the sample, not the cluster (4,096 simulated nodes drew 16 M in all).
    picked = random.Random(f"{seed}/{rank}").sample(range(len(ring) - len(near)), sample)
    return sorted({ring[j] for j in near if j != i} | {ring[_skipping(j, near)] for j in picked})


def _skipping(j: int, skipped: list[int]) -> int:
    """The j-th position of a sequence once the (sorted) `skipped` positions are left out."""
    for s in skipped:
        if j >= s:
            j += 1
    return j


class Listeners:
    """One listening socket per candidate, answered by one thread until closed."""

    def __init__(self, rank: int, table: NicTable):
        self.token = secrets.token_hex(8)
        self.greeting = f"{GREETING} {rank} {self.token}\n".encode()
        self.rank = rank
        self.table = table
        self.sockets: list[tuple[str, socket.socket]] = []
        self.selector = selectors.DefaultSelector()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "Listeners":
        for ifname, address in candidate_addresses(self.table):
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.bind((address, 0))
                sock.listen(256)
            except OSError:
                sock.close()
                continue
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, self.greeting)
            self.sockets.append((ifname, sock))
        self.thread.start()
        return self

    def offer(self) -> Offer:
        mtus = interface_mtus(self.table)
        bound = [(ifname, sock.getsockname()) for ifname, sock in self.sockets]   # (address, port, ...)
        return Offer(self.rank, self.token, tuple(
            Candidate(ifname, name[0], name[1], mtus.get(ifname, 0)) for ifname, name in bound))

    def _serve(self) -> None:
        serve_greetings(self.selector, self.stop)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=2.0)
        for _, sock in self.sockets:
            self.selector.unregister(sock)
            sock.close()
        self.selector.close()


def serve_greetings(selector: selectors.BaseSelector, stop: threading.Event) -> None:
    """Answer every connection to the selector's listening sockets with the greeting each
    was registered with, then echo what the peer sends (its full-size frames) until it
    closes, MAX_ECHO bytes have come back, or LINGER s. Nothing blocks: a stuck peer, or a
    flood of them, costs a socket and at most one read's buffer each for LINGER s, never a
    thread, and never delays another peer's echo."""
    expire_at = 0.0
    try:
        while not stop.is_set():
            for key, events in selector.select(timeout=EXPIRY_TICK):
                if isinstance(key.data, _Echo):
                    key.data.pump(selector, events)
                else:
                    _greet(selector, key)
            if (now := time.monotonic()) >= expire_at:  # a look at every connection, not per event
                expire_at = now + EXPIRY_TICK
                for echo in _echoes(selector):
                    if now > echo.until:
                        echo.close(selector)
    finally:
        for echo in _echoes(selector):
            echo.close(selector)


def _greet(selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
    try:
        # Everything registered but the echoes is a listening socket (Listeners.__enter__).
        conn, _ = cast(socket.socket, key.fileobj).accept()
    except OSError:
        return
    try:
        conn.setblocking(False)
        # An echo that came in pieces goes back at once, not after the peer's delayed ACK.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.send(key.data)  # a few dozen bytes into an empty buffer: all of it goes
        selector.register(conn, selectors.EVENT_READ, _Echo(conn, time.monotonic() + LINGER))
    except OSError:
        conn.close()


def _echoes(selector: selectors.BaseSelector) -> list["_Echo"]:
    return [key.data for key in list(selector.get_map().values()) if isinstance(key.data, _Echo)]


@dataclass
class _Echo:
    """One greeted connection: whatever the peer sends goes back, as soon as it can."""

    sock: socket.socket
    until: float
    pending: bytes = b""   # read, not yet sent back: no more is read until it is
    echoed: int = 0

    def pump(self, selector: selectors.BaseSelector, events: int) -> None:
        try:
            if not events & selectors.EVENT_WRITE and not self._read():
                self.close(selector)
                return
            self.pending = self.pending[self._send(self.pending):]
            selector.modify(self.sock, selectors.EVENT_WRITE if self.pending else selectors.EVENT_READ, self)
        except OSError:
            self.close(selector)

    def _read(self) -> bool:
        """Take what came; False once the peer has closed or sent more than an echo needs."""
        data = self.sock.recv(1 << 16)
        self.echoed += len(data)
        self.pending += data
        return bool(data) and self.echoed <= MAX_ECHO

    def _send(self, data: bytes) -> int:
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0

    def close(self, selector: selectors.BaseSelector) -> None:
        selector.unregister(self.sock)
        self.sock.close()


def probe_peers(me: int, offers: dict[int, Offer], peers: list[int], table: NicTable,
                deadline: Deadline) -> tuple[Attempt, ...]:
    """Connect to every candidate of every peer, MESH_CONNECTS_AT_ONCE at a time, each peer's
    first candidate before anyone's second, so a peer that offers many silent candidates
    delays no other. Nothing outlives `deadline`: every wait is cut to it, and a connect it
    prevented or cut short is "untried", never evidence against the path."""
    queues = [offers[p].candidates for p in peers if p in offers]
    jobs = [(offers[p], c) for i in range(max(map(len, queues), default=0)) for p in peers
            if p in offers and i < len(offers[p].candidates) for c in (offers[p].candidates[i],)]
    if not jobs:
        return ()
    owners, mtus = address_owners(table), interface_mtus(table)
    with ThreadPoolExecutor(max_workers=min(MESH_CONNECTS_AT_ONCE, len(jobs))) as pool:
        attempts = tuple(pool.map(lambda job: _attempt(me, job[0], job[1], owners, mtus, deadline), jobs))
        return _with_routes(attempts, pool, deadline)


def _with_routes(attempts: tuple[Attempt, ...], pool: ThreadPoolExecutor, deadline: Deadline) -> tuple[Attempt, ...]:
    """The kernel's way to the addresses nothing answered (the route, on-link or through which
    gateway, and the next hop's neighbour state), read at once for the first MESH_ROUTES_READ:
    what tells a wrong prefix or a dead neighbour from a firewall. Where the deadline leaves
    the time of the reads (each takes milliseconds; an `ip` that hangs is cut at
    IP_COMMAND_TIMEOUT, inside the mesh's margin for its results)."""
    unanswered = list(dict.fromkeys(a.address for a in attempts if a.outcome in UNANSWERED))[:MESH_ROUTES_READ]
    if not unanswered or deadline.remaining() < IP_COMMAND_TIMEOUT / 2:
        return attempts
    routes = dict(zip(unanswered, pool.map(route_to, unanswered)))
    return tuple(replace(a, route=routes[a.address]) if a.outcome in UNANSWERED and a.address in routes else a
                 for a in attempts)


def _same_machine(offer: Offer, owners: dict[str, str]) -> bool:
    """Every address the peer offers is ours too: it runs on this machine (a loopback test)."""
    return all(c.address in owners for c in offer.candidates)


def _attempt(me: int, offer: Offer, c: Candidate, owners: dict[str, str], mtus: dict[str, int],
             deadline: Deadline) -> Attempt:
    # A peer elsewhere that offers one of our own addresses (docker0's 172.17.0.1 is on
    # every host) cannot be reached there: the packets would stay on this node.
    if c.address in owners and not _same_machine(offer, owners):
        return _failed(me, offer, c, LOCAL, f"{c.address} is also this node's own address "
                       f"({owners[c.address]}): traffic to it never leaves this node")
    connect = deadline.within(MESH_CONNECT_TIMEOUT)
    if connect.expired():
        return _failed(me, offer, c, UNTRIED, "not tried: the mesh phase's deadline came first")
    family = socket.AF_INET6 if ":" in c.address else socket.AF_INET
    with reset_on_close(socket.socket(family, socket.SOCK_STREAM)) as sock:
        try:
            _bounded(sock, connect)
            sock.connect((c.address, c.port))
            rtt = round(connect.elapsed() * 1000, 3)
            source = owners.get(sock.getsockname()[0])
            greeting = deadline.within(MESH_CONNECT_TIMEOUT)
            outcome, detail = _unless_cut(*_check_greeting(sock, offer, greeting), greeting, deadline)
            if outcome != OK:
                return Attempt(me, offer.rank, c.ifname, c.address, outcome, rtt, source, detail)
            transfer = _prove_frames(sock, offer, c, mtus.get(source, 0) if source is not None else 0, deadline)
            return Attempt(me, offer.rank, c.ifname, c.address, transfer_outcome(transfer), rtt, source,
                           transfer_detail(transfer), transfer)
        except OSError as e:
            return _failed(me, offer, c, *_unless_cut(*failed_connect(e, MESH_CONNECT_TIMEOUT), connect, deadline))


def _unless_cut(outcome: MeshOutcome, detail: str, step: Deadline, deadline: Deadline) -> tuple[MeshOutcome, str]:
    """A wait that ended with the phase, before its own full time, proves nothing."""
    if outcome == FILTERED and step.at >= deadline.at:
        return UNTRIED, f"cut short after {step.elapsed():.1f} s by the mesh phase's deadline ({detail})"
    return outcome, detail


def _failed(me: int, offer: Offer, c: Candidate, outcome: MeshOutcome, detail: str) -> Attempt:
    return Attempt(me, offer.rank, c.ifname, c.address, outcome, None, None, detail)


def _check_greeting(sock: socket.socket, offer: Offer, deadline: Deadline) -> tuple[MeshOutcome, str]:
    """Who answered: the expected peer, or someone else owning the same address. A peer
    that sends its greeting a byte at a time gets no more than the deadline."""
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) < MAX_GREETING:
            _bounded(sock, deadline)
            chunk = sock.recv(MAX_GREETING - len(data))
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        return FILTERED, "connected, then no greeting before the deadline"
    except OSError as e:
        return REFUSED, f"connected, then reset: {error_text(e)} (the listener went away)"
    parts = data.decode("ascii", "replace").split()
    if parts[:1] != [GREETING] or len(parts) != 3:
        return WRONG_PEER, "something other than netcheck answered"
    if parts[1:] != [str(offer.rank), offer.token]:
        return WRONG_PEER, f"answered by node rank {parts[1]}, not rank {offer.rank}: the " \
                             "address is not unique to that node"
    return OK, "connected"



# --- full-size frames ------------------------------------------------------------------------

def _prove_frames(sock: socket.socket, offer: Offer, c: Candidate, src_mtu: int, deadline: Deadline) -> Transfer:
    """Full-size segments echoed over the greeted connection; where they are lost, smaller
    frames over fresh connections, smallest last, until one size comes back or the path
    stops answering at all."""
    full = min((m for m in (src_mtu, c.mtu) if m), default=_mss(sock) + HEADERS[sock.family])
    trials = [Trial(full, _trial(lambda step: _echo(sock, step), deadline))]
    for frame in (f for f in MESH_FALLBACK_FRAMES if f < full):
        if trials[-1].result != LOST:
            break
        trials.append(Trial(frame, _trial(functools.partial(_echo_fresh, offer, c, frame), deadline)))
    return Transfer(src_mtu, c.mtu, tuple(trials), _path_mtu(sock))


def _path_mtu(sock: socket.socket) -> int:
    """The path MTU the kernel keeps for the connection's peer (IP_MTU, IPV6_MTU), learnt from
    the routers' "fragmentation needed" while the full-size frames crossed (an overlay that
    takes its header out of the frame says so too); 0 where it cannot be read."""
    level, option = (socket.IPPROTO_IPV6, IPV6_MTU) if sock.family == socket.AF_INET6 else (socket.IPPROTO_IP, IP_MTU)
    try:
        return sock.getsockopt(level, option)
    except OSError:
        return 0


def _trial(send: Callable[[Deadline], TrialResult], deadline: Deadline) -> TrialResult:
    """One size's result, given MESH_TRANSFER_TIMEOUT; "untried" where the phase's deadline
    left less, or cut the wait short: a loss is evidence only after the full time."""
    step = deadline.within(MESH_TRANSFER_TIMEOUT)
    if step.at >= deadline.at:
        return UNTRIED
    return send(step)


def _mss(sock: socket.socket) -> int:
    """The connection's segment size: the largest the path's MTU allows, as both ends see it."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)


def _echo(sock: socket.socket, deadline: Deadline) -> TrialResult:
    """Send MESH_TRANSFER_SEGMENTS full segments and read each one back before the next, so
    each travels alone in a frame of the connection's full size (segments sent together
    would be merged, and a virtual link can pass a merged send that a switch would not)."""
    size = _mss(sock)
    segment = b"\x5a" * size
    try:
        for _ in range(MESH_TRANSFER_SEGMENTS):
            _bounded(sock, deadline)
            sock.sendall(segment)
            got = 0
            while got < size:
                _bounded(sock, deadline)
                chunk = sock.recv(size - got)
                if not chunk:
                    return CLOSED
                got += len(chunk)
    except TimeoutError:
        return LOST
    except OSError:
        return CLOSED
    return ECHOED


def _bounded(sock: socket.socket, deadline: Deadline) -> None:
    if deadline.expired():
        raise TimeoutError
    sock.settimeout(deadline.remaining())


def _echo_fresh(offer: Offer, c: Candidate, frame: int, deadline: Deadline) -> TrialResult:
    """`frame`-sized segments over a new connection to the same listener, its MSS clamped
    before the handshake so both ends keep to that frame size."""
    family = socket.AF_INET6 if ":" in c.address else socket.AF_INET
    with reset_on_close(socket.socket(family, socket.SOCK_STREAM)) as sock:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, frame - HEADERS[family])
            _bounded(sock, deadline)
            sock.connect((c.address, c.port))
            if _check_greeting(sock, offer, deadline)[0] != OK:
                return UNREACHED
        except OSError:
            return UNREACHED
        return _echo(sock, deadline)


def transfer_outcome(transfer: Transfer) -> MeshOutcome:
    """The attempt's outcome from its frames: "ok" when full-size frames came back;
    "blackhole" when they vanished while the path still carries smaller ones (or greets a
    fresh connection); "refused" when the peer hung up mid-way; "filtered" when the path went
    silent for every size, a peer or link gone during the test, not a frame-size problem."""
    results = [t.result for t in transfer.trials]
    if results[0] == ECHOED:
        return OK
    if results[0] == UNTRIED:
        return UNTRIED
    if CLOSED in results:
        return REFUSED
    return FILTERED if UNREACHED in results else BLACKHOLE


def transfer_detail(transfer: Transfer) -> str:
    full = transfer.trials[0]
    sent = f"{MESH_TRANSFER_SEGMENTS} frames of {full.frame} bytes"
    outcome = transfer_outcome(transfer)
    if outcome == OK:
        return f"connected; {sent} echoed"
    if outcome == UNTRIED:
        return f"connected; {sent} not tried: the mesh phase's deadline came first"
    if outcome == REFUSED:
        return f"connected, then the peer closed during the transfer of {sent}"
    if outcome == FILTERED:
        return (f"connected, then the path went silent: {sent} and every smaller size lost (the peer or "
                "its link went away)")
    passed = passed_frame(transfer)
    return (f"connected, but {sent} did not come back within {MESH_TRANSFER_TIMEOUT:g} s; "
            + (f"{passed}-byte frames did" if passed else _smaller_sizes(transfer)))


def _smaller_sizes(transfer: Transfer) -> str:
    if any(t.result == UNTRIED for t in transfer.trials):
        return "smaller sizes not tried before the mesh phase's deadline; only the greeting came back"
    return "smaller ones neither, only the greeting"
