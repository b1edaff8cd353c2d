"""The kernel's way to an address, read where nothing answered there (a connect, a DNS query):
the interface and source its route takes, the gateway, the neighbour table's state for the next
hop (a machine that drops answers ARP / NDP, an address nobody holds does not), the other
interfaces on the same subnet, and where the address was on-link by the node's own prefix and
nobody answered, what the link says its subnet is (link_prefixes: a router's advertised
prefix, a DHCP lease), the only evidence of a prefix wider than the subnet's that a node has
alone: its router is none. Two or three `ip` commands, each bounded by IP_COMMAND_TIMEOUT.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from netcheck.core.model import NOBODY_ANSWERED, LinkPrefix, Route
from netcheck.facts.leases import lease_prefixes

IP_COMMAND_TIMEOUT = 2.0


def route_to(address: str) -> Route | None:
    """The kernel's way to ADDRESS: the interface and source its route takes, the gateway if
    any, the neighbour table's state for the next hop, and the other interfaces with a route to
    the same subnet. None where iproute2 is missing or says nothing."""
    chosen = _ip_words("route", "get", address)
    interface, gateway = _after(chosen, "dev"), _after(chosen, "via")
    if interface is None:
        return None
    neighbour = _ip_words("neigh", "show", "to", gateway or address, "dev", interface)
    state = neighbour[-1] if neighbour and neighbour[-1].isupper() else ""
    if gateway:
        return Route(interface, _after(chosen, "src"), gateway, state)
    family = "-6" if ":" in address else "-4"
    routes = [line.split() for line in _ip_lines(family, "route", "show", "table", "main", "match", address)]
    mine = [r[0] for r in routes if _after(r, "dev") == interface and r[0] != "default" and "via" not in r]
    router = next((_after(r, "via") for r in routes if r[0] == "default" and "via" in r), None)
    link = link_prefixes(interface, family) if state in NOBODY_ANSWERED else ()
    return Route(interface, _after(chosen, "src"), None, state, _shared(routes, set(mine), interface),
                 mine[0] if mine else None, router, link)


def link_prefixes(interface: str, family: str) -> tuple[LinkPrefix, ...]:
    """What INTERFACE's link says its subnet is, besides the node's own prefix: for IPv6 the
    prefixes its routers advertise (the kernel keeps each as an on-link route that expires with
    the advertisement; NetworkManager's own are `proto ra`), for IPv4 its DHCP lease
    (facts.leases)."""
    if family == "-4":
        return lease_prefixes(interface)
    return tuple(LinkPrefix(words[0], "its router's advertisement",
                            f"ip -6 route: {words[0]} dev {interface} {' '.join(words[1:])}")
                 for line in _ip_lines("-6", "route", "show", "table", "main", "dev", interface)
                 if (words := line.split()) and _advertised(words))


def _advertised(words: list[str]) -> bool:
    """An on-link prefix route a router's advertisement made: the kernel's expire with it."""
    return words[0] not in ("default", "fe80::/64") and "via" not in words and \
        ("expires" in words or _after(words, "proto") == "ra")


def _shared(routes: list[list[str]], subnets: set[str], interface: str) -> tuple[str, ...]:
    """Interfaces besides INTERFACE with a link route to a subnet of SUBNETS, INTERFACE's."""
    return tuple(sorted({dev for r in routes if r[0] in subnets and "via" not in r
                         and (dev := _after(r, "dev")) is not None} - {interface}))


def _ip_words(*args: str) -> list[str]:
    lines = _ip_lines(*args)
    return lines[0].split() if lines else []


@functools.cache
def _ip_command() -> str | None:
    return shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip") if os.path.exists(p)), None)


def _ip_lines(*args: str) -> list[str]:
    """What `ip ARGS` prints, by line; nothing where iproute2 is missing or fails."""
    ip = _ip_command()
    if ip is None:
        return []
    try:
        done = subprocess.run([ip, "-o", *args], capture_output=True, text=True, timeout=IP_COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


def _after(words: list[str], key: str) -> str | None:
    return words[words.index(key) + 1] if key in words[:-1] else None
