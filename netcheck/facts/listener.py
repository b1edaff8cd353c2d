"""The host's listening socket, bound before torch loads: it answers the reach probe as a
TCPStore would (facts.probe) until the store takes it over (hand_over); who holds a port."""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import threading
import time
from typing import cast

from netcheck.core.constants import MAX_MEMBERS, PROBE_TIMEOUT
from netcheck.core.errors import NetcheckError
from netcheck.core.model import Holder
from netcheck.core.storewireops import NOT_READY
from netcheck.facts.probe import STORE_PROBE

_Pending = dict[socket.socket, tuple[bytearray, float]]   # a probe's connection: (bytes read, until when)


class PortTaken(NetcheckError, OSError):
    def __init__(self, port: int, holders: list[Holder], error: OSError):
        super().__init__(error.errno, error.strerror)
        self.port = port
        self.holders = holders


class Listener(socket.socket):
    """The host's listening socket, from before torch is imported until the store takes it
    over (hand_over). Meanwhile a thread answers the reach probe's handshake as a store
    would (NOT_READY): a joiner that probes while the host still imports torch (seconds on a
    busy node) hears a store, not the silence of a squatter. It answers only the probe's exact
    bytes; anything else it closes (a torch client that came that early retries: client_store).
    """

    _stop: threading.Event
    _answering: threading.Thread | None   # set by answer_probes; None once stopped

    def answer_probes(self) -> None:
        self._stop = threading.Event()
        self._answering = threading.Thread(target=self._answer, daemon=True)
        self.setblocking(False)
        self._answering.start()

    def hand_over(self) -> int:
        """The descriptor, for the store to own: probes not answered yet wait in the backlog."""
        self._stop_answering()
        self.setblocking(True)
        return self.detach()

    def close(self) -> None:
        self._stop_answering()
        super().close()

    def _stop_answering(self) -> None:
        answering = getattr(self, "_answering", None)   # none before answer_probes
        if answering is not None:
            self._stop.set()
            answering.join()
            self._answering = None

    def _answer(self) -> None:
        try:
            self._answer_until_stopped()
        except (OSError, ValueError):
            pass  # probes then wait in the backlog for the store, as without this thread

    def _answer_until_stopped(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self, selectors.EVENT_READ)
            pending: _Pending = {}
            stop_by = None
            while pending or stop_by is None:
                if stop_by is None and self._stop.is_set():
                    sel.unregister(self)
                    stop_by = time.monotonic() + ANSWER_DRAIN  # a probe half in gets its answer
                for key, _ in sel.select(ANSWER_TICK):
                    if key.fileobj is self:
                        self._take(sel, pending)
                    else:   # everything registered but self is a connection _take accepted
                        _read_probe(sel, pending, cast(socket.socket, key.fileobj))
                now = time.monotonic()
                for conn in [c for c, (_, until) in pending.items() if now >= min(until, stop_by or until)]:
                    _drop(sel, pending, conn)

    def _take(self, sel: selectors.BaseSelector, pending: _Pending) -> None:
        try:
            conn, _ = self.accept()
        except OSError:  # gone before accepted, or out of descriptors: the next one then
            return
        conn.setblocking(False)
        pending[conn] = (bytearray(), time.monotonic() + PROBE_TIMEOUT)
        sel.register(conn, selectors.EVENT_READ)


ANSWER_TICK = 0.05   # how soon the answering thread sees hand_over
ANSWER_DRAIN = 0.2   # ... and how long it then gives a probe it is reading


def _read_probe(sel: selectors.BaseSelector, pending: _Pending, conn: socket.socket) -> None:
    try:
        data = conn.recv(len(STORE_PROBE))
    except BlockingIOError:
        return
    except OSError:
        data = b""
    received = pending[conn][0]
    received += data
    if data and STORE_PROBE.startswith(received):
        if len(received) < len(STORE_PROBE):
            return
        try:
            conn.send(NOT_READY)
        except OSError:
            pass
    _drop(sel, pending, conn)


def _drop(sel: selectors.BaseSelector, pending: _Pending, conn: socket.socket) -> None:
    sel.unregister(conn)
    del pending[conn]
    conn.close()


def listen(port: int, ipv4_only: bool = False) -> Listener:
    """Listen on PORT on every address (dual-stack where IPv6 exists, unless the endpoint is
    IPv4 only), as TCPStore would, and answer the reach probe's handshake until the store
    takes the socket over.

    Done before torch is imported, so joiners that arrive early are queued, not refused.
    IPv4 only where the endpoint has no IPv6 address: torch's store looks up the name of every
    client it accepts (getnameinfo, on its only thread), and a dual-stack socket sees an IPv4
    client as ::ffff:a.b.c.d, which glibc never finds in /etc/hosts (its files backend skips
    IPv4 lines for an IPv6 lookup): every connect then waits on DNS, out to the resolver's
    timeout where the nameserver is dead. An IPv4 socket lets /etc/hosts answer.
    """
    sock = None
    if not ipv4_only:
        try:
            sock = _listening_socket(socket.AF_INET6, ("::", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PortTaken(port, port_holders(port), e) from None
    if sock is None:
        try:
            sock = _listening_socket(socket.AF_INET, ("0.0.0.0", port))
        except OSError as e:
            raise PortTaken(port, port_holders(port), e) from None
    allow_a_connection_per_node()
    sock.answer_probes()
    return sock


def allow_a_connection_per_node() -> None:
    """The store holds a connection per node: lift the soft descriptor limit (1,024 on many
    systems) toward two per member of MAX_MEMBERS, within the hard limit, or a host of more
    nodes fails at accept with EMFILE. Where the system refuses, the limit stays."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * MAX_MEMBERS if hard == resource.RLIM_INFINITY else min(hard, 2 * MAX_MEMBERS)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            pass


def _listening_socket(family: int, sockaddr: tuple) -> Listener:
    sock = Listener(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(sockaddr)
        sock.listen(MAX_MEMBERS)  # the kernel caps it at net.core.somaxconn: a member per slot, or all it allows
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def port_holders(port: int) -> list[Holder]:
    """The processes listening on PORT, named (psutil needs root to see other users')."""
    import psutil

    holders = []
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return []
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            holders.append(_holder(conn.pid))
    return holders


def _holder(pid: int | None) -> Holder:
    import psutil

    if pid is None:
        return Holder(None, "?", "(owner not visible: run as root to name it)")
    try:
        proc = psutil.Process(pid)
        return Holder(pid, proc.name(), " ".join(proc.cmdline()))
    except psutil.Error:
        return Holder(pid, "?", "(process vanished or not visible)")
