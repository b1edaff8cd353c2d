"""A node configured with another prefix length than its peers (a /16 where the racks are /24
subnets behind routers): it takes the other rack's addresses for its own link and asks ARP
for them, unanswered, so every connect between it and that rack times out, as a firewall's
DROP would. The cause is read from the nodes' own interfaces: one node holds the other on
its subnet while the other does not hold it on its own, and the node whose prefix the rest
of the cluster does not share is the one named. Its connects' routes (on-link, the
neighbour FAILED) are the kernel's evidence.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable

from netcheck.core.meshrecords import Attempt, WrongPrefix
from netcheck.core.model import FAIL, Finding, Member
from netcheck.core.nictable import NicTable
from netcheck.rules.pernode import name_of, node_names, per_table
from netcheck.rules.registry import MESH_CONNECT, MESH_WRONG_PREFIX

Interface = tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, str]   # an address with its prefix, its NIC


def wrong_prefixes(members: tuple[Member, ...], broken: Iterable[tuple[int, int]]) -> tuple[WrongPrefix, ...]:
    """The nodes whose prefix explains directions that connect on no interface: of two nodes
    where one holds the other on its subnet and the other does not hold it, the one whose
    prefix length most nodes of the cluster do not have."""
    broken = list(broken)
    if not broken:   # nothing to explain (the usual case, and 100,000 ranks' interfaces to parse)
        return ()
    own = per_table(members, _interfaces)
    lengths = Counter(i.network.prefixlen for ifaces in own.values() for i, _ in ifaces)
    if not lengths:
        return ()
    usual = lengths.most_common(1)[0][0]
    found: dict[tuple[int, Interface], set[int]] = {}
    for pair in {tuple(sorted(d)) for d in broken}:
        for a, b in (pair, pair[::-1]):
            held = _holds(own.get(a, []), own.get(b, []))
            for rank, iface, peer in ((a, held[0], b), (b, held[1], a)) if held else ():
                if iface[0].network.prefixlen != usual:
                    found.setdefault((rank, iface), set()).add(peer)
                    break
    return tuple(WrongPrefix(rank, name, str(iface), usual, tuple(sorted(peers)))
                 for (rank, (iface, name)), peers in sorted(found.items(), key=lambda item: item[0][0]))


def _interfaces(table: NicTable) -> list[Interface]:
    """The node's addresses with their prefixes, loopback and link-local aside."""
    found = []
    for nic in table.nics:
        for a in nic.addresses:
            iface = ipaddress.ip_interface(f"{a.address.split('%')[0]}/{a.prefixlen}")
            if not (iface.ip.is_loopback or iface.ip.is_link_local):
                found.append((iface, nic.name))
    return found


def _holds(a: list[Interface], b: list[Interface]) -> tuple[Interface, Interface] | None:
    """(a's interface whose subnet holds an address of b's, b's interface of that address)
    where b holds that interface's address on no subnet of its own: the one-sided view a
    prefix mismatch gives. None otherwise."""
    for mine in a:
        for theirs in b:
            if theirs[0].ip.version == mine[0].ip.version and theirs[0].ip in mine[0].network \
                    and not any(mine[0].ip in t.network for t, _ in b):
                return mine, theirs
    return None


def explained(wrong: tuple[WrongPrefix, ...], broken: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """The failed directions between a node of a wrong prefix and the peers it is named with."""
    pairs = {(w.rank, p) for w in wrong for p in w.peers}
    return {d for d in broken if d in pairs or d[::-1] in pairs}


def wrong_prefix_findings(names: dict[int, str], wrong: tuple[WrongPrefix, ...],
                          broken: dict[tuple[int, int], list[Attempt]]) -> list[Finding]:
    """A finding per node of a wrong prefix that some direction could not connect through."""
    findings = []
    for w in wrong:
        ways = sorted(explained((w,), broken))
        if not ways:
            continue
        prefix = int(w.address.rsplit("/", 1)[1])
        side = "wider" if prefix < w.peers_prefix else "narrower"
        effect = ("takes their addresses for its own link and asks ARP for them, which nobody behind a router "
                  "answers" if side == "wider" else "sends what it owes on-link peers to a router instead")
        name = name_of(names, w.rank)
        findings.append(Finding(
            check=MESH_CONNECT, severity=FAIL, nodes=(w.rank,),
            summary=f"{name}'s {w.interface} is configured {w.address}, a prefix {side} than its peers' "
            f"/{w.peers_prefix}: it {effect}; {len(ways)} direction(s) between it and "
            f"{node_names(w.peers, names)} connect on no interface", evidence=_evidence(names, ways, broken),
            fix=f"give {name}'s {w.interface} its peers' prefix ({w.address.rsplit('/', 1)[0]}/{w.peers_prefix}) in "
            "its network configuration (netplan, ifcfg, DHCP); nothing on the path drops this traffic",
            kind=MESH_WRONG_PREFIX))
    return findings


def _evidence(names: dict[int, str], ways: list[tuple[int, int]],
              broken: dict[tuple[int, int], list[Attempt]]) -> tuple[str, ...]:
    """A line per failed direction with the route its source's kernel took, where it was read."""
    lines = []
    for s, d in ways:
        for a in broken[(s, d)]:
            route = a.route
            way = "" if route is None else (
                f"; route {'on-link' if route.gateway is None else 'via ' + route.gateway} on {route.interface}"
                + (f", neighbour {route.neighbour_state}" if route.neighbour_state else ""))
            lines.append(f"{name_of(names, s)} -> {name_of(names, d)}: {a.ifname} {a.address}: {a.outcome}{way}")
    return tuple(lines)
