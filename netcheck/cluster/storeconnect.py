"""The TCPStore's connect as netcheck makes it: the host's server on its pre-bound socket, and
clients with bounded connects and replies. Every torch workaround for the connect lives here
or in cluster.compat."""

from __future__ import annotations

import datetime
import errno
import os
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

from netcheck.cluster import compat
from netcheck.core.constants import PROBE_RETRY_INTERVAL, PROBE_TIMEOUT, STORE_REPLY_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.names import lookups_per_connect
from netcheck.core.storeerrors import ConnectTimedOut, HostLost, RendezvousError, StoreError, first_line
from netcheck.facts.bounded import call_with_timeout
from netcheck.facts.linkcounters import interface_holding
from netcheck.facts.listener import Listener
from netcheck.facts.nameservers import lookup_bound, nameserver_look, withheld_wait
from netcheck.facts.probe import Lookup, reach
from netcheck.facts.procfds import socket_fds

CONNECT_TRY = 2.0
# A connect's error where every port of this node's ephemeral range is taken for that address
# (EADDRNOTAVAIL): nothing the host did (a 1-port range kept a joiner out, naming its host lost).
NO_LOCAL_PORT = os.strerror(errno.EADDRNOTAVAIL)


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(0.05, seconds))


def host_store(listener: Listener, port: int, deadline: Deadline) -> Any:
    """The TCPStore server, on the socket the host has listened on since it started.

    The store takes the descriptor over and closes it itself, so Python lets go of it. Made
    on a thread waited for to the deadline: its own client's connect has no bound of its own
    where the port has been closed since reach (a firewall rule that drops).
    """
    dist = compat.import_distributed(deadline)
    fd = listener.hand_over()
    store, error = call_with_timeout(
        lambda: compat.server_store(dist, port, _timedelta(deadline.remaining()), fd), deadline.remaining())
    if isinstance(error, (RuntimeError, TimeoutError)):  # its own client's connect: a firewall rule since reach
        raise RendezvousError(f"the host's store on port {port} could not start: {first_line(error)}") from None
    if error is not None:
        raise error
    return store


def client_store(host: str, port: int, deadline: Deadline, addresses: tuple[str, ...] = ()) -> Any:
    """A client of a store the reach probe found listening; raises RendezvousError (HostLost
    once it no longer listens; neither where this node has no local port left to connect from)
    rather than wait past the deadline.

    Where torch's own timeouts fall short (measured on 2.13, benchmarks/ and
    tests/test_store_probe.py): the constructor's validate and ping have none at all, so
    against a peer that accepts and never answers it blocks for as long as the peer lives
    (past 90 s with a 2 s timeout); a refused connect is retried for up to ~2x its timeout.
    So each try runs in a daemon thread that is abandoned at its bound (torch releases the
    GIL there), and before each try a plain connect asks whether the store still listens: a
    host lost before this client connected is said at once, not retried to the deadline.
    Once connected, every request is bounded by _bound_replies; Exchange waits by polling.
    `addresses`: host's, where the caller has looked it up (the reach probe): that plain
    connect goes there, without a lookup of its own (seconds each, behind a slow resolver).
    """
    dist = compat.import_distributed(deadline)
    while True:
        gone = not_listening(host, port, deadline, addresses)
        if gone and NO_LOCAL_PORT in gone:   # this node's own range, not the host: said as such, at once
            raise RendezvousError(f"this node has no local port left to connect to {host}:{port} from ({gone}): "
                                  "its ephemeral port range is taken, by its own connections closed within the "
                                  "last minute among others (TIME-WAIT; host.ports)")
        if gone:
            raise HostLost(f"the host's store at {host}:{port} is gone", gone)
        store, error = client_try(dist, host, port, deadline)
        if store is not None:
            return store
        assert error is not None, "a try gives its store or its error"
        if isinstance(error, ConnectTimedOut) or deadline.remaining() < 0.1:
            raise RendezvousError(f"could not connect a TCPStore client to {host}:{port}: "
                                  f"{first_line(error)}")
        time.sleep(min(PROBE_RETRY_INTERVAL, deadline.remaining()))


def not_listening(host: str, port: int, deadline: Deadline, addresses: tuple[str, ...] = ()) -> str | None:
    """Why nothing listens at host:port any more (refused, filtered...), or None: at `addresses`
    where given, else where the name is looked up again (given the time the resolver takes)."""
    resolved: Lookup = ([(socket.AF_INET6 if ":" in a else socket.AF_INET, (a, port)) for a in addresses], None, 0.0)
    found = reach(host, port, deadline.within(PROBE_TIMEOUT + (0.0 if addresses else lookup_bound())),
                  wait_while_refused=False, resolved=resolved if addresses else None, handshake=False)
    if found.outcome == "open":
        return None
    return found.resolve_error or "; ".join(f"{p.address}: {p.outcome} ({p.detail})" for p in found.probes)


def client_try(dist: Any, host: str, port: int, deadline: Deadline) -> tuple[Any, StoreError | None]:
    """(store, None) or (None, the error as netcheck's: ConnectTimedOut past its bound): one
    TCPStore constructor, given a short timeout (torch retries a refused connect within it),
    abandoned in its thread past twice that: a
    peer that accepts and never answers holds it forever. Plus the lookups the client makes
    before it connects, inside that timeout (torch 2.13's c10d/socket.cpp, SocketConnectOp):
    getaddrinfo of the host (IPv6 first, IPv4 mapped: its AAAA, then its A), then getnameinfo
    of the address it connects to (an IPv4 one as ::ffff:a.b.c.d, which /etc/hosts never
    answers): a lookup's wait for each nameserver that does not answer, and for one that
    answers late its answer time, per lookup (lookups_per_connect); and for one an ICMP error
    turned away, the wait of a query whose error was rationed (nameservers.withheld_wait)."""
    silent, slow = nameserver_look(deadline)
    lookups = lookups_per_connect(host) * (sum(s.lookup_wait for s in silent) + withheld_wait(deadline)
                                           + max((s.seconds for s in slow), default=0.0))
    seconds = min(CONNECT_TRY, deadline.remaining() / 3)
    timeout = compat.connect_timeout(_timedelta(min(seconds + lookups, deadline.remaining())))
    # Behind a nameserver that is silent or late, the estimate of the lookups' wait is a floor, not
    # a bound (a loaded node's, or a resolver's retries, are longer: a joiner gave up at 9 s while
    # torch's own client, with minutes, would have come): the client is waited for up to the
    # deadline, which still bounds it. Elsewhere a client past its short bound is a peer that
    # accepts and never answers, said early.
    bound = max(0.1, deadline.remaining()) if silent or slow else \
        min(2 * compat.connect_timeout(_timedelta(seconds)).total_seconds() + 1.0 + lookups,
            max(0.1, deadline.remaining()))

    def construct() -> Any:
        before = socket_fds()
        store = dist.TCPStore(host, port, None, False, timeout)
        store.set_timeout(_timedelta(deadline.remaining()))
        _bound_replies(socket_fds() - before, port, STORE_REPLY_TIMEOUT)
        # A round trip: torch 2.1 and 2.4's constructors send nothing, so a client could count
        # the host's pre-store listener (which closes what is not netcheck's probe) as its store.
        store.num_keys()
        return store

    store, error = call_with_timeout(construct, bound)
    if isinstance(error, TimeoutError) and (silent or slow):
        how = "does not answer" if silent else f"answers {max(s.seconds for s in slow):.1f} s late"
        named = silent or slow
        error = ConnectTimedOut(f"no TCPStore client was made in {bound:.0f} s: torch's client looks up the "
                                "address it connects to, and this node's nameserver "
                                f"{', '.join(s.address for s in named)} ({named[0].source}) {how}", error)
    elif isinstance(error, TimeoutError):
        error = ConnectTimedOut(f"it accepts the connection but no TCPStore answered in {bound:.0f} s (a "
                                "store held up by other clients answers late, a hung process never: the host's "
                                "report says)", error)
    elif isinstance(error, (RuntimeError, OSError)):
        error = compat.store_error(error)   # torch's, translated here once (core.storeerrors)
    elif error is not None:
        raise error
    return store, error


def _bound_replies(fds: set[int], port: int, seconds: float) -> None:
    """A receive/send timeout on the store client's socket (the new one connected to port).

    TCPStore's own timeout bounds waiting for a key, not a reply: over a link cut mid-run
    (packets dropped, no RST) a plain check() sits in recv for as long as TCP retries: no
    answer in 120 s with every timeout set to 2 s (benchmarks/store_link_cut.py). With
    SO_RCVTIMEO the call raises DistNetworkError ("Socket Timeout") instead, which reads as
    a lost host.
    """
    timeval = struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))
    for sock in _connected_to(fds, port):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        except OSError:
            continue  # closed since it was listed


def store_link(port: int) -> str | None:
    """The interface this process's store connection (to PORT) leaves by; None where none is
    connected, or its address is no interface's."""
    for sock in _connected_to(socket_fds(), port):
        try:
            return interface_holding(sock.getsockname()[0])
        except OSError:
            continue  # closed since it was listed
    return None


def _connected_to(fds: set[int], port: int) -> Iterator[socket.socket]:
    """Copies of the sockets among FDS connected to PORT, each closed once the next is asked
    for: a socket's options and addresses are read and set through a copy."""
    for fd in fds:
        try:
            copy = os.dup(fd)
        except OSError:
            continue  # closed since it was listed: not the store's
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # a family Python does not know (netlink): not the store's
            os.close(copy)
            continue
        with sock:
            try:
                connected = sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getpeername()[1] == port
            except OSError:
                continue  # not connected: not the store's
            if connected:
                yield sock
