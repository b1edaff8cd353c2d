"""rules/prefix.py: of two nodes where one holds the other on its subnet and the other does not,
the one whose prefix length the cluster does not share is named; routed racks with every
prefix alike name nobody. The real fabric is built in tests/test_routed_cluster.py."""

from __future__ import annotations

from builders import LOOPBACK, member, nic
from netcheck.core.meshrecords import Attempt, WrongPrefix
from netcheck.core.model import Route
from netcheck.rules import mesh as mesh_rules
from netcheck.rules.prefix import wrong_prefixes


def node(rank: int, address: str):
    return member(rank, nics=(LOOPBACK, nic("eth0", address)))


RACKS = (node(0, "198.18.0.10/24"), node(1, "198.18.0.11/24"), node(2, "198.18.0.12/16"),
         node(3, "198.18.1.13/24"), node(4, "198.18.1.14/24"))
CUT = {(2, 3), (3, 2), (2, 4), (4, 2)}


def test_the_node_with_the_odd_wider_prefix_is_named_with_the_peers_it_cannot_reach():
    assert wrong_prefixes(RACKS, CUT) == (WrongPrefix(2, "eth0", "198.18.0.12/16", 24, (3, 4)),)


def test_a_narrower_prefix_than_the_clusters_is_named_too():
    flat = (node(0, "198.18.0.10/16"), node(1, "198.18.1.11/16"), node(2, "198.18.2.12/24"))
    assert wrong_prefixes(flat, {(0, 2), (2, 0), (1, 2)}) == (WrongPrefix(2, "eth0", "198.18.2.12/24", 16, (0, 1)),)


def test_prefixes_alike_explain_nothing():
    alike = RACKS[:2] + RACKS[3:]
    assert wrong_prefixes(alike, {(0, 3), (3, 0)}) == ()


def filtered(src: int, dst: int, address: str, route: Route | None = None) -> Attempt:
    return Attempt(src, dst, "eth0", address, "filtered", None, None, "no answer in 2 s", route=route)


def test_the_finding_carries_the_kernels_route_and_the_prefix_to_set():
    names = {r: f"node{r}" for r in range(5)}
    onlink = Route("eth0", "198.18.0.12", None, "INCOMPLETE", subnet="198.18.0.0/16", router="198.18.0.1")
    attempts = (filtered(2, 3, "198.18.1.13", onlink), filtered(3, 2, "198.18.0.12"))
    causes = mesh_rules.path_causes(RACKS, attempts, ())
    (found,) = mesh_rules.mesh_findings(names, attempts, causes)
    assert (found.kind, found.nodes) == ("wrong_prefix", (2,)) and "198.18.0.12/24" in found.fix
    assert found.evidence[0] == ("node2 -> node3: eth0 198.18.1.13: filtered; route on-link on eth0, "
                                 "neighbour INCOMPLETE")
    assert mesh_rules.judged_attempts(attempts, causes) == attempts[1:]   # node3's interface keeps its proof
