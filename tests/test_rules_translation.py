"""rules/translation.py: a node whose connections the host saw from an address it does not own
(a container's masquerade), a host reached at an address it does not own (a published port),
and the mesh's failed directions into either explained by it, not by a firewall. The real
containers are built in tests/test_nat_cluster.py."""

from __future__ import annotations

import dataclasses

from builders import LOOPBACK, member, nic
from netcheck.core.meshrecords import INBOUND, OUTBOUND, Attempt, PathCauses, Translation
from netcheck.core.model import NodeResults, Probe, Reach, Visitor
from netcheck.rules import mesh as mesh_rules
from netcheck.rules.translation import translations

HOST = "198.18.0.10"


def reach(source: str, address: str = HOST) -> Reach:
    return Reach("node0", 29500, "open", (address,), None,
                 (Probe(address, "ipv4", "open", "connected", 0.01, None, source),), 1, 0.01)


def joined(rank: int, own: str, source: str | None = None, address: str = HOST, name: str | None = None):
    m = member(rank, name, nics=(LOOPBACK, nic("eth0", f"{own}/24")), reach=reach(source or own, address))
    return dataclasses.replace(m, results=NodeResults(None, ()))


MEMBERS = (joined(0, HOST), joined(1, "198.18.0.11"), joined(2, "198.19.200.2", name="c0ffee2"))


def test_a_joiner_seen_only_from_an_address_nobody_owns_is_translated():
    seen = {HOST: 1, "198.18.0.11": 1, "198.18.0.12": 1}
    assert translations(MEMBERS, seen, ()) == (
        Translation(2, OUTBOUND, ("198.19.200.2",), ("198.18.0.12",)),)


def test_every_node_seen_from_its_own_address_is_none_and_a_lost_nodes_address_is_no_stranger():
    assert translations(MEMBERS[:2], {HOST: 1, "198.18.0.11": 2}, ()) == ()
    lost = (Visitor("r", "node3", None, "198.18.0.13"),)
    assert translations(MEMBERS[:2], {HOST: 1, "198.18.0.11": 1, "198.18.0.13": 1}, lost) == ()


def test_a_node_that_never_reported_back_is_not_called_translated():
    gone = (*MEMBERS[:2], dataclasses.replace(MEMBERS[2], results=None))
    assert translations(gone, {HOST: 1, "198.18.0.11": 1, "198.18.0.12": 1}, ()) == ()


def test_nodes_meeting_on_loopback_are_not_translated():
    local = tuple(joined(r, f"198.18.0.{10 + r}", source="127.0.0.1", address="127.0.0.1") for r in range(3))
    assert translations(local, {"127.0.0.1": 3}, ()) == ()


def test_a_host_reached_at_an_address_it_does_not_own_is_translated_inbound():
    boxed = (joined(0, "198.19.200.2", name="c0ffee0"), joined(1, "198.18.0.11"))
    assert translations(boxed, {"198.18.0.11": 1}, ()) == (Translation(0, INBOUND, ("198.19.200.2",), (HOST,)),)


def unreachable(src: int, dst: int, address: str) -> Attempt:
    return Attempt(src, dst, "eth0", address, "unreachable", None, "eth0", "Network is unreachable")


def test_directions_into_a_translated_node_are_its_translation_the_rest_still_a_connect_failure():
    names = {0: "node0", 1: "node1", 2: "c0ffee2", 3: "node3"}
    attempts = (unreachable(0, 2, "198.19.200.2"), unreachable(1, 2, "198.19.200.2"),
                unreachable(1, 3, "198.18.0.13"))
    nat = Translation(2, OUTBOUND, ("198.19.200.2",), ("198.18.0.12",))
    natted, rest = mesh_rules.mesh_findings(names, attempts, PathCauses((nat,)))
    assert (natted.kind, natted.nodes) == ("translated", (2,)) and "--network host" in natted.fix
    assert "198.18.0.12" in natted.summary and len(natted.evidence) == 2
    assert rest.kind == "" and rest.nodes == (1, 3) and "firewall" in rest.fix
    (alone,) = mesh_rules.mesh_findings(names, attempts[:2], PathCauses((nat,)))
    assert alone.kind == "translated"
