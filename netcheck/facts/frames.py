"""Whether full-size frames reach an address where nothing listens for netcheck: a node whose
facts never reached the host (a visitor record of a hundred bytes came, its facts of a few
kilobytes did not) has no listener yet, but its kernel answers a datagram to a port nobody
serves with an ICMP port unreachable. A small datagram answered and a full-size one (the
route's MTU, don't-fragment) not, twice each, is a path that drops full-size frames; nothing
answered at all tells nothing (a firewall, no route, a node gone). Stdlib only, no privilege.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

from netcheck.core.meshrecords import BLACKHOLE, CARRIED, SILENT, FrameTest

# Linux's <linux/in.h> and <linux/in6.h>: the socket module names only some of them.
_IP_MTU_DISCOVER, _IP_MTU, _IPV6_MTU_DISCOVER, _IPV6_MTU = 10, 14, 23, 24
_PMTUDISC_DO = 2           # never fragment, for either family
_HEADERS = {socket.AF_INET: 20 + 8, socket.AF_INET6: 40 + 8}   # IP and UDP
_SMALL = 64                # bytes of a datagram any path carries
_DISCARD_PORT = 9          # the discard service's, which nothing serves on a training node
TRIES = 2                  # each size twice: one datagram lost by chance is no blackhole


def frame_tests(targets: list[tuple[str, str]], timeout: float) -> tuple[FrameTest, ...]:
    """A FrameTest per (hostname, address), all at once, each wait at most `timeout`."""
    if not targets:
        return ()
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        return tuple(pool.map(lambda t: frame_test(t[0], t[1], timeout), targets))


def frame_test(hostname: str, address: str, timeout: float) -> FrameTest:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.setsockopt(*_dont_fragment(family))
            sock.connect((address, _DISCARD_PORT))
            sock.settimeout(timeout)
            frame = _route_mtu(sock, family)
            outcome = _outcome(sock, frame - _HEADERS[family])
    except OSError:
        return FrameTest(hostname, address, 0, SILENT)   # no route from here, or no such family
    return FrameTest(hostname, address, frame, outcome)


def _outcome(sock: socket.socket, full: int) -> str:
    for _ in range(TRIES):
        if not _answered(sock, _SMALL):
            return SILENT
        if _answered(sock, full):
            return CARRIED
    return BLACKHOLE


def _answered(sock: socket.socket, size: int) -> bool:
    """Whether the node's kernel said port unreachable (ECONNREFUSED on a connected socket)."""
    try:
        sock.send(b"\0" * size)
        sock.recv(1)
    except ConnectionRefusedError:
        return True
    except OSError:   # the wait ran out, or the local route refused the size (EMSGSIZE)
        return False
    return True       # something serves the port after all: an answer is an answer


def _dont_fragment(family: int) -> tuple[int, int, int]:
    if family == socket.AF_INET6:
        return socket.IPPROTO_IPV6, _IPV6_MTU_DISCOVER, _PMTUDISC_DO
    return socket.IPPROTO_IP, _IP_MTU_DISCOVER, _PMTUDISC_DO


def _route_mtu(sock: socket.socket, family: int) -> int:
    """The MTU of the route the connected socket takes (the interface's, or less where the
    kernel has learnt a smaller path MTU)."""
    if family == socket.AF_INET6:
        return sock.getsockopt(socket.IPPROTO_IPV6, _IPV6_MTU)
    return sock.getsockopt(socket.IPPROTO_IP, _IP_MTU)
