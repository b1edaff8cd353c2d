"""Phase 4, mesh: which interfaces really carry traffic between every pair of nodes.

Every node listens on an ephemeral port on each candidate interface (running, addressed,
loopback aside), publishes the (interface, address, port) list, then connects to each
peer's candidates at once, with a short deadline per connect. A listener answers every
connection with its node's rank and a per-run token, so a connect that lands somewhere
else (docker0 carries the same 172.17.0.1 on every host: the "peer" is this very node) is
told apart from a real path. This is the traffic NCCL and gloo send on ephemeral ports,
which a firewall that only opens the master port drops.
"""

from __future__ import annotations

import ipaddress
import random
import secrets
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from netcheck.core.constants import MESH_CONNECT_TIMEOUT, MESH_FULL_UP_TO, MESH_SAMPLE_PEERS
from netcheck.core.nictable import NicTable, address_owners
from netcheck.facts.probe import error_text, failed_connect

GREETING = "netcheck-mesh"
MAX_GREETING = 128


@dataclass(frozen=True)
class Candidate:
    ifname: str
    address: str
    port: int


@dataclass(frozen=True)
class Offer:
    """What a node listens on for the mesh, and the token its listeners answer with."""

    rank: int
    token: str
    candidates: tuple[Candidate, ...]


@dataclass(frozen=True)
class Attempt:
    """One connect from node `src` to one of node `dst`'s candidates."""

    src: int
    dst: int
    ifname: str            # dst's interface
    address: str
    outcome: str           # "ok" | "refused" | "filtered" | "unreachable" | "wrong-peer" | "local"
    rtt_ms: float | None   # connect round trip, when it connected
    src_ifname: str | None # the interface the kernel sent it from (the route's truth)
    detail: str


@dataclass(frozen=True)
class MeshResults:
    rank: int
    attempts: tuple[Attempt, ...]


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


def parse_mode(text: str) -> int | None:
    """--mesh: "full" -> None (every pair), "sample:K" -> K random peers plus ring neighbours."""
    if text == "full":
        return None
    kind, _, count = text.partition(":")
    if kind != "sample" or not count.isdigit() or int(count) < 1:
        raise ValueError(f"--mesh {text!r}: expected full or sample:K with K >= 1")
    return int(count)


def default_mode(nnodes: int) -> int | None:
    return None if nnodes <= MESH_FULL_UP_TO else MESH_SAMPLE_PEERS


def targets(rank: int, ranks: list[int], sample: int | None, seed: str) -> list[int]:
    """The peers this node connects to: all, or ring neighbours plus `sample` random peers.

    Seeded by the run id, so a rerun probes the same pairs and reports are comparable.
    """
    others = [r for r in ranks if r != rank]
    if sample is None or len(others) <= sample + 2:
        return others
    ring = sorted(ranks)
    i = ring.index(rank)
    chosen = {ring[(i + 1) % len(ring)], ring[(i - 1) % len(ring)]}
    rest = [r for r in others if r not in chosen]
    chosen.update(random.Random(f"{seed}/{rank}").sample(rest, min(sample, len(rest))))
    return sorted(chosen)


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
        return Offer(self.rank, self.token, tuple(
            Candidate(ifname, *sock.getsockname()[:2]) for ifname, sock in self.sockets))

    def _serve(self) -> None:
        serve_greetings(self.selector, self.stop)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=2.0)
        for _, sock in self.sockets:
            self.selector.unregister(sock)
            sock.close()
        self.selector.close()


def serve_greetings(selector: selectors.BaseSelector, stop: threading.Event) -> None:
    """Answer every connection to the selector's listening sockets with the greeting each
    was registered with, until stop. Each connection gets the greeting and is closed at
    once: a flood of connections costs an accept and a send each, never a thread or a buffer."""
    while not stop.is_set():
        for key, _ in selector.select(timeout=0.1):
            try:
                conn, _ = key.fileobj.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.setblocking(True)
                    conn.settimeout(0.5)
                    conn.sendall(key.data)
                except OSError:
                    pass


def probe_peers(me: int, offers: dict[int, Offer], peers: list[int], table: NicTable,
                timeout: float = MESH_CONNECT_TIMEOUT) -> tuple[Attempt, ...]:
    """Connect to every candidate of every peer at once; each connect has its own deadline."""
    jobs = [(offers[p], c) for p in peers if p in offers for c in offers[p].candidates]
    if not jobs:
        return ()
    owners = address_owners(table)
    with ThreadPoolExecutor(max_workers=min(64, len(jobs))) as pool:
        return tuple(pool.map(lambda job: _attempt(me, job[0], job[1], owners, timeout), jobs))


def _same_machine(offer: Offer, owners: dict[str, str]) -> bool:
    """Every address the peer offers is ours too: it runs on this machine (a loopback test)."""
    return all(c.address in owners for c in offer.candidates)


def _attempt(me: int, offer: Offer, c: Candidate, owners: dict[str, str], timeout: float) -> Attempt:
    # A peer elsewhere that offers one of our own addresses (docker0's 172.17.0.1 is on
    # every host) cannot be reached there: the packets would stay on this node.
    if c.address in owners and not _same_machine(offer, owners):
        return _failed(me, offer, c, "local", f"{c.address} is also this node's own address "
                       f"({owners[c.address]}): traffic to it never leaves this node")
    family = socket.AF_INET6 if ":" in c.address else socket.AF_INET
    start = time.monotonic()
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((c.address, c.port))
            rtt = round((time.monotonic() - start) * 1000, 3)
            source = owners.get(sock.getsockname()[0])
            outcome, detail = _check_greeting(sock, offer)
            return Attempt(me, offer.rank, c.ifname, c.address, outcome, rtt, source, detail)
        except OSError as e:
            return _failed(me, offer, c, *failed_connect(e, timeout))


def _failed(me: int, offer: Offer, c: Candidate, outcome: str, detail: str) -> Attempt:
    return Attempt(me, offer.rank, c.ifname, c.address, outcome, None, None, detail)


def _check_greeting(sock: socket.socket, offer: Offer) -> tuple[str, str]:
    """Who answered: the expected peer, or someone else owning the same address."""
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) < MAX_GREETING:
            chunk = sock.recv(MAX_GREETING - len(data))
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        return "filtered", "connected, then no greeting before the deadline"
    except OSError as e:
        return "refused", f"connected, then reset: {error_text(e)} (the listener went away)"
    parts = data.decode("ascii", "replace").split()
    if parts[:1] != [GREETING] or len(parts) != 3:
        return "wrong-peer", "something other than netcheck answered"
    if parts[1:] != [str(offer.rank), offer.token]:
        return "wrong-peer", f"answered by node rank {parts[1]}, not rank {offer.rank}: the " \
                             "address is not unique to that node"
    return "ok", "connected"

