"""The nameservers this node's resolver asks (resolv.conf, nsswitch.conf), how long glibc's
resolver waits for them, and which of them answer late or not at all: every lookup /etc/hosts
cannot answer waits for them, torch's store's lookups of each connection's address included.

How long glibc waits (resolv/res_send.c, send_dg): each round (`options attempts:N`, default 2,
at most 5) asks every nameserver in turn (at most 3; `rotate` changes the order, not the sum),
the first for `options timeout:N` seconds (default 5, at most 30), the one at index i > 0 for
(timeout << i) / count, at least 1. A lookup no nameserver answers ends after the sum over the
rounds: a lookup is given that much here, bounded by the phase's deadline, never a shorter guess.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass

from netcheck.core.constants import LOOKUP_TIMEOUT, SLOW_LOOKUP
from netcheck.core.deadline import Deadline
from netcheck.core.model import Route, SilentNameserver, SlowNameserver
from netcheck.facts.routes import route_to

RESOLV_CONF = "/etc/resolv.conf"
NSSWITCH_CONF = "/etc/nsswitch.conf"
# A DNS query any nameserver answers (even with an error): id, recursion desired, one
# question: the root's NS records.
_DNS_QUERY = struct.pack(">HHHHHH", 0x6e63, 0x0100, 1, 0, 0, 0) + b"\x00" + struct.pack(">HH", 2, 1)
# glibc's bounds (resolv/resolv.h): RES_MAXNS, RES_MAXRETRANS, RES_MAXRETRY; its defaults.
MAX_SERVERS, MAX_TIMEOUT, MAX_ATTEMPTS = 3, 30, 5
DEFAULT_TIMEOUT, DEFAULT_ATTEMPTS = 5, 2
ANSWER_MARGIN = 1.0   # past the resolver's own wait, so that its answer (or its error) is what is seen


@dataclass(frozen=True)
class Resolver:
    """The resolver's settings as glibc reads them (resolv.conf, then RES_OPTIONS)."""

    servers: tuple[str, ...]
    timeout: int      # seconds for the first nameserver of a round
    attempts: int     # rounds

    def server_wait(self, index: int) -> float:
        """How long one round waits for the nameserver at `index` (send_dg)."""
        seconds = self.timeout << index
        if index > 0:
            seconds //= len(self.servers)
        return float(max(1, seconds))

    @property
    def round_wait(self) -> float:
        return sum(self.server_wait(i) for i in range(len(self.servers)))

    @property
    def lookup_wait(self) -> float:
        """What a lookup waits where no nameserver answers: every round, every server."""
        return self.attempts * self.round_wait

    def wait_for(self, servers: set[str]) -> float:
        """What a lookup waits for these of its nameservers where they do not answer: every round."""
        return self.attempts * sum(self.server_wait(i) for i, s in enumerate(self.servers) if s in servers)


def resolver() -> Resolver:
    """This node's resolver: /etc/resolv.conf, then $RES_OPTIONS."""
    try:
        text = open(RESOLV_CONF).read()
    except OSError:
        text = ""
    return parse_resolver(text, os.environ.get("RES_OPTIONS", ""))


def parse_resolver(text: str, res_options: str = "") -> Resolver:
    """(nameservers, seconds a query, attempts) as glibc reads resolv.conf's text and then
    RES_OPTIONS (127.0.0.1 where no nameserver is named; the last value of an option wins)."""
    servers = re.findall(r"^\s*nameserver\s+(\S+)", text, re.MULTILINE)[:MAX_SERVERS] or ["127.0.0.1"]
    options = " ".join(re.findall(r"^\s*options\s+(.*)$", text, re.MULTILINE) + [res_options])
    per_query = re.findall(r"\btimeout:(\d+)", options)
    attempts = re.findall(r"\battempts:(\d+)", options)
    return Resolver(tuple(servers), min(MAX_TIMEOUT, int(per_query[-1])) if per_query else DEFAULT_TIMEOUT,
                    max(1, min(MAX_ATTEMPTS, int(attempts[-1]))) if attempts else DEFAULT_ATTEMPTS)


def lookup_bound(deadline: Deadline | None = None) -> float:
    """The seconds one name lookup is given: as long as glibc's resolver can take over it (where
    the hosts database asks DNS), and a margin, never past `deadline`; LOOKUP_TIMEOUT at least
    (the files alone answer in microseconds, but a loaded machine's thread may start late)."""
    seconds = max(LOOKUP_TIMEOUT, resolver().lookup_wait + ANSWER_MARGIN) if hosts_ask_dns() else LOOKUP_TIMEOUT
    return max(0.1, min(seconds, deadline.remaining())) if deadline is not None else seconds


class _Asking:
    """This process's one look at its nameservers: a query to each, asked at once on threads,
    each waited for as long as the resolver waits for that server in a round (a later answer
    is one the resolver never takes)."""

    def __init__(self) -> None:
        self.resolver = resolver()
        self.start = time.monotonic()
        self.answered: dict[str, float | None] = {}
        self.unreachable: set[str] = set()
        self.routes: dict[str, Route | None] = {}
        self.threads = [threading.Thread(target=_ask_nameserver, daemon=True,
                                         args=(s, self.resolver.server_wait(i), self.answered, self.unreachable,
                                               self.routes))
                        for i, s in enumerate(self.resolver.servers)]
        for t in self.threads:
            t.start()

    def look(self, deadline: Deadline | None) -> "Look":
        r = self.resolver
        until = self.start + max(r.server_wait(i) for i in range(len(r.servers))) + ANSWER_MARGIN
        for t in self.threads:
            left = until - time.monotonic()
            t.join(max(0.0, min(left, deadline.remaining()) if deadline is not None else left))
        waited = round(time.monotonic() - self.start, 1)
        silent = tuple(SilentNameserver(s, RESOLV_CONF, min(waited, r.server_wait(i)), r.attempts * r.server_wait(i),
                                        self.routes.get(s))
                       for i, s in enumerate(r.servers) if self.answered.get(s) is None)
        slow = tuple(SlowNameserver(s, RESOLV_CONF, round(took, 2)) for s in r.servers
                     if (took := self.answered.get(s)) is not None and took >= SLOW_LOOKUP)
        return silent, slow

    def withheld_wait(self, deadline: Deadline | None) -> float:
        self.look(deadline)
        return self.resolver.wait_for(self.unreachable)


_asking: _Asking | None = None
_asking_lock = threading.Lock()


def ask_nameservers() -> None:
    """Start this process's look at its nameservers (once), so that its answers come in while
    the phase goes on; nameserver_look collects them."""
    global _asking
    with _asking_lock:
        if _asking is None and hosts_ask_dns():
            _asking = _Asking()


Look = tuple[tuple[SilentNameserver, ...], tuple[SlowNameserver, ...]]   # (silent, slow)


# An ICMP error is a router's or a host's answer, and they ration it: Linux sends a source 5
# "unreachable"s for packets it has no route for, then one a second (net.ipv4.route.error_cost,
# error_burst), and one "port unreachable" a second (icmp_ratelimit). So where a node's
# processes look up at once (torchrun's 4 ranks a node, each torch store client making 3
# lookups), most of their queries get no answer and wait out the resolver's timeout: of 4
# processes of one namespace node behind a gateway with no route to the nameserver, asking at
# once, 2 or 3 waited 5 s; of 8, six waited 5 s and one 10 s (torchrun 2 x 4, seed 64,
# schedule 69: two ranks' store clients gave up at 5 s, and the job ran).


def withheld_wait(deadline: Deadline | None = None) -> float:
    """The seconds one lookup /etc/hosts cannot answer may wait for the nameservers that an ICMP
    error turned away, where the error is rationed (above): the resolver's timeout x attempts
    for each; 0 where none was."""
    ask_nameservers()
    return _asking.withheld_wait(deadline) if _asking is not None else 0.0


def nameserver_look(deadline: Deadline | None = None) -> Look:
    """The nameservers of /etc/resolv.conf that did not answer a query in the time the resolver
    gives them (silent), and those that answered, SLOW_LOOKUP or later (slow, with the seconds),
    where the hosts database asks DNS at all. Asked once per process (ask_nameservers), waited
    for here up to `deadline`: a server not answered by then counts as silent."""
    ask_nameservers()
    return _asking.look(deadline) if _asking is not None else ((), ())


def _ask_nameserver(server: str, wait: float, answered: dict[str, float | None], unreachable: set[str],
                    routes: dict[str, Route | None]) -> None:
    """answered[server]: seconds to its answer, or to the error that ended the query at once (a
    refusal, no route to it, a router's "network unreachable": the resolver moves on at once,
    and a lookup /etc/hosts answers never waits for it), or None where nothing came in `wait`
    (a silent server), or the error came only after the kernel waited on ARP / NDP for it (an
    address on the link no machine holds: every lookup waits). A server an ICMP error turned
    away (the error came back for the query: refused, unreachable) is in `unreachable`. Where
    nothing came, routes[server]: the kernel's way to it, read at once, while the neighbour
    table still says whether ARP / NDP was answered (a silent server's machine answers; no
    machine at the address does not)."""
    start = time.monotonic()
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(wait)
        try:
            _full_errors(sock, family)
            sock.connect((server, 53))
            sock.send(_DNS_QUERY)
        except OSError:   # no route here: the kernel's own answer, every time, at once
            answered[server] = time.monotonic() - start
            return
        try:
            sock.recv(512)
        except socket.timeout:
            routes[server] = route_to(server)
            answered[server] = None
            return
        except OSError:   # refused, network unreachable: at once
            if time.monotonic() - start >= SLOW_LOOKUP:   # the kernel gave up on ARP / NDP: nobody there
                routes[server] = route_to(server)
                answered[server] = None
                return
            if not ipaddress.ip_address(server.split("%")[0]).is_loopback:   # loopback's errors are not rationed
                unreachable.add(server)
    answered[server] = time.monotonic() - start


# Linux's <linux/in.h> and <linux/in6.h> (Python's socket module names neither).
IP_RECVERR, IPV6_RECVERR = 11, 25


def _full_errors(sock: socket.socket, family: int) -> None:
    """Every ICMP error for this socket's queries reported to it, as glibc's resolver asks
    (res_send.c sets IP_RECVERR / IPV6_RECVERR): without it, Linux keeps a router's "network" or
    "host unreachable" from a UDP socket, and a nameserver glibc leaves at once would be waited
    out here as silent."""
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
    else:
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)


def hosts_ask_dns() -> bool:
    """Whether name lookups go to DNS: nsswitch.conf's hosts line names it (glibc asks DNS
    where there is no such line or file)."""
    try:
        text = open(NSSWITCH_CONF).read()
    except OSError:
        return True
    line = re.search(r"^\s*hosts\s*:(.*)$", text, re.MULTILINE)
    return line is None or "dns" in line[1].split()
