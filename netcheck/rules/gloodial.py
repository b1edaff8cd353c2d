"""Which way gloo connects each pair of ranks, and so which failed directions it never meets.

gloo makes one TCP connection per pair of ranks, and only one side of the pair dials it: the side
whose address is the larger, the two compared byte by byte (a memcmp of the in_addr or in6_addr,
so in numeric order), their ports after that; the other side only listens (pytorch/gloo
gloo/transport/tcp/device.cc: Device::isInitiator, and Device::connect, which connects as the
initiator or waits as the listener). NCCL dials both ways: its bootstrap ring and its transports'
connections. So a node-to-node direction that connects on no interface stops NCCL always, and
gloo only where gloo dials it; the rules say so on the finding (model.Impact). Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from netcheck.core.meshrecords import Attempt
from netcheck.core.model import STOPS, Impact, Member
from netcheck.rules import socketchoice
from netcheck.rules.pernode import name_of
from netcheck.rules.registry import NCCL

SOURCE = "gloo's Device::isInitiator"
SHOWN = 3   # directions a why names; the rest counted

Ends = dict[int, tuple[socketchoice.GlooDevice, ...]]   # rank -> gloo's devices there


def gloo_ends(members: tuple[Member, ...]) -> Ends:
    """Each node's gloo devices (one per GLOO_SOCKET_IFNAME entry, else the hostname's)."""
    choose = socketchoice.once_per_table(socketchoice.gloo_device_addresses)
    return ends_of({m.rank: choose(m.facts.nics, m.facts.socket_env, m.facts.hostname_addresses) for m in members})


def ends_of(choices: dict[int, socketchoice.GlooChoice]) -> Ends:
    """The nodes' gloo devices, where every one binds an address peers can reach; a node whose
    gloo fails or binds loopback is left out (nic.gloo_default names it): nothing is told of
    its dialling."""
    return {rank: c.devices for rank, c in choices.items()
            if all(d.address and d.interface and not (d.error or d.loopback) for d in c.devices)}


def _larger(a: str, b: str) -> bool:
    """Whether address a sorts above b as gloo compares them (its bytes); False across families,
    which gloo refuses to pair (GLOO_ENFORCE_EQ of the families)."""
    x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
    return x.version == y.version and x.packed > y.packed


def never_dials(ends: Ends, src: int, dst: int) -> bool:
    """Whether gloo never dials from src to dst: on each device, dst's address is the larger
    (equal addresses, two ranks of one host, are left to their ports: not told)."""
    a, b = ends.get(src), ends.get(dst)
    return bool(a and b and len(a) == len(b)
                and all(_larger(y.address or "", x.address or "") for x, y in zip(a, b)))


def nccl_only(names: dict[int, str], ends: Ends, broken: Iterable[tuple[int, int]],
              attempts: tuple[Attempt, ...]) -> Impact | None:
    """NCCL alone, and why, where gloo meets none of the broken directions: it never dials any,
    and the way it does dial each pair connects on every gloo interface of the end it dials.
    None where gloo meets one, or where what it would do is not known (a joiner's own view)."""
    broken = sorted(broken)
    reached = {(a.src, a.dst, a.ifname) for a in attempts if a.connected}
    spared = [(s, d) for s, d in broken if never_dials(ends, s, d)
              and all((d, s, dev.interface) in reached for dev in ends[s])]
    if not broken or len(spared) < len(broken):
        return None
    # A line per node pair: torchrun's ranks of two hosts dial alike.
    dialled = list(dict.fromkeys(f"{_end(names, ends, d)} -> {_end(names, ends, s)}" for s, d in spared))
    more = f" and {len(dialled) - SHOWN} more" if len(dialled) > SHOWN else ""
    which = "which connects" if len(dialled) == 1 else "which connect"
    return Impact(NCCL, STOPS, f"gloo dials each pair of ranks once, from the larger address to the smaller "
                               f"({SOURCE}): here {', '.join(dialled[:SHOWN])}{more}, {which}, never the way "
                               "that fails; NCCL dials both ways")


def _end(names: dict[int, str], ends: Ends, rank: int) -> str:
    return f"{name_of(names, rank)} ({', '.join(d.address or '?' for d in ends[rank])})"
