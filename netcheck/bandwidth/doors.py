"""Where a sweep stops short, which peers can this node still reach? Each node holds a Door
through the bandwidth phase: a port it listens on and never accepts from, which its kernel
answers (the handshake needs no process). Once its workers stopped short, a node knocks on
its peers' Doors: a peer whose ports went dark since the mesh passed (a firewall rule pushed
mid-run, a link gone) does not answer, from any node, where every rank's own error is a
timeout that names no one. The knocks go to the peers the mesh would probe (all of them up
to MESH_FULL_UP_TO nodes, else ring neighbours and a sample), each bounded by KNOCK_TIMEOUT
and the phase's deadline.
"""

from __future__ import annotations

import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor

from netcheck.cluster.mesh import default_mode, targets
from netcheck.core.bwrecords import Door
from netcheck.core.deadline import Deadline
from netcheck.facts.linkcounters import own_addresses

KNOCK_TIMEOUT = 1.0    # a LAN peer's kernel answers a connect in a millisecond; a loaded one in tens
KNOCKS_AT_ONCE = 32    # threads knocking at once (a sample's peers times their addresses)
BACKLOG = 1024         # knocks the Door's kernel completes and queues, never accepted


def open_door() -> socket.socket | None:
    """A listening socket on every address (both families where the host has both); None
    where none can be made (the phase goes on without it)."""
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=BACKLOG)
        return socket.create_server(("", 0), backlog=BACKLOG)
    except OSError:
        return None


def door_of(node: int, sock: socket.socket) -> Door:
    return Door(node, own_addresses(), sock.getsockname()[1])


def knock_targets(node: int, nnodes: int, seed: str) -> list[int]:
    """The peers this node knocks on: those the mesh would probe from it."""
    return targets(node, list(range(nnodes)), default_mode(nnodes), seed)


def unreached(doors: dict[int, Door], deadline: Deadline) -> tuple[int, ...]:
    """The nodes whose Door answered on none of its addresses. An address this node holds
    too, or two peers do (the same docker0 on every host), says nothing of the peer, and
    a link-local one needs a scope: such are not knocked on."""
    mine = set(own_addresses())
    seen: dict[str, int] = {}
    for door in doors.values():
        for a in door.addresses:
            seen[a] = seen.get(a, 0) + 1
    plans = {n: [a for a in door.addresses if a not in mine and seen[a] == 1
                 and not ipaddress.ip_address(a).is_link_local] for n, door in doors.items()}
    knocks = [(n, a, doors[n].port) for n, addresses in plans.items() for a in addresses]
    if not knocks:
        return ()
    timeout = min(KNOCK_TIMEOUT, deadline.remaining())
    with ThreadPoolExecutor(max_workers=min(KNOCKS_AT_ONCE, len(knocks))) as pool:
        answered = list(pool.map(lambda k: _answers(k[1], k[2], timeout), knocks))
    reached = {n for (n, _, _), ok in zip(knocks, answered) if ok}
    return tuple(sorted(n for n, addresses in plans.items() if addresses and n not in reached))


def _answers(address: str, port: int, timeout: float) -> bool:
    """Whether a connect to address:port completes within timeout."""
    if timeout <= 0:
        return True   # no time left to ask: nothing learnt, nobody blamed
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False
