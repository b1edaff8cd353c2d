"""The nameservers this node's resolver asks (resolv.conf, nsswitch.conf), and which of them
do not answer: every lookup /etc/hosts cannot answer waits for each silent one."""

from __future__ import annotations

import functools
import os
import re
import socket
import struct
import threading
import time

from netcheck.core.constants import NAMESERVER_TIMEOUT
from netcheck.core.model import SilentNameserver

RESOLV_CONF = "/etc/resolv.conf"
NSSWITCH_CONF = "/etc/nsswitch.conf"
# A DNS query any nameserver answers (even with an error): id, recursion desired, one
# question: the root's NS records.
_DNS_QUERY = struct.pack(">HHHHHH", 0x6e63, 0x0100, 1, 0, 0, 0) + b"\x00" + struct.pack(">HH", 2, 1)


@functools.lru_cache(maxsize=1)
def silent_nameservers() -> tuple[SilentNameserver, ...]:
    """The nameservers of /etc/resolv.conf that do not answer a query in NAMESERVER_TIMEOUT
    (asked at once, each on a thread), where the hosts database asks DNS at all. Asked once
    per process: the store client's bound (cluster.storeconnect) reads the answer again."""
    if not hosts_ask_dns():
        return ()
    servers, per_query, attempts = _resolver_settings()
    answered: dict[str, float | None] = {}
    threads = [threading.Thread(target=_ask_nameserver, args=(s, answered), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(NAMESERVER_TIMEOUT + 0.5)
    return tuple(SilentNameserver(s, RESOLV_CONF, NAMESERVER_TIMEOUT, per_query * attempts)
                 for s in servers if answered.get(s) is None)


def _ask_nameserver(server: str, answered: dict[str, float | None]) -> None:
    """answered[server]: seconds to its answer, or to the error that ended the query (a
    refusal, no route to it: the resolver moves on at once, and a lookup /etc/hosts answers
    never waits for it), or None where nothing came in NAMESERVER_TIMEOUT (a silent server,
    or an address on the link no machine answers ARP for: every lookup waits)."""
    start = time.monotonic()
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(NAMESERVER_TIMEOUT)
        try:
            sock.connect((server, 53))
            sock.send(_DNS_QUERY)
            sock.recv(512)
        except socket.timeout:
            answered[server] = None
            return
        except OSError:   # refused, no route, network unreachable: at once
            pass
    answered[server] = time.monotonic() - start


def hosts_ask_dns() -> bool:
    """Whether name lookups go to DNS: nsswitch.conf's hosts line names it (glibc asks DNS
    where there is no such line or file)."""
    try:
        text = open(NSSWITCH_CONF).read()
    except OSError:
        return True
    line = re.search(r"^\s*hosts\s*:(.*)$", text, re.MULTILINE)
    return line is None or "dns" in line[1].split()


def _resolver_settings() -> tuple[list[str], float, int]:
    """(nameservers, seconds a query, attempts) as glibc reads resolv.conf and RES_OPTIONS
    (its defaults: 5 s, 2 attempts; 127.0.0.1 where no nameserver is named)."""
    try:
        text = open(RESOLV_CONF).read()
    except OSError:
        text = ""
    servers = re.findall(r"^\s*nameserver\s+(\S+)", text, re.MULTILINE)[:3] or ["127.0.0.1"]
    options = " ".join(re.findall(r"^\s*options\s+(.*)$", text, re.MULTILINE) + [os.environ.get("RES_OPTIONS", "")])
    per_query = re.findall(r"\btimeout:(\d+)", options)
    attempts = re.findall(r"\battempts:(\d+)", options)
    return servers, float(per_query[-1]) if per_query else 5.0, int(attempts[-1]) if attempts else 2
