"""Whose fault it is, on real network namespaces (issue 65): each node's exit code (2 this node,
4 other nodes only), its report's `fault` and `faulty_nodes`, where the evidence can tell a node
whose own link is dead from one a peer's firewall keeps out, and a broken pair's two ends from
the one node common to every broken pair."""

from __future__ import annotations

import pytest

from faults import finish_each, nodes, ranked_args
from nodes import GRACE, PORT, explain, scaled, start

pytestmark = pytest.mark.root_required


def verdicts(runs) -> list[tuple[int, str, list[str]]]:
    return [(r.rc, r.report["fault"]["party"], r.report["faulty_nodes"]) for r in runs]


def run_all(c, n: int, tmp_path, timeout: float) -> list:
    runs = [start(c, i, ranked_args(i, n, timeout), tmp_path) for i in range(n)]
    finish_each(runs, timeout + GRACE)
    return runs


def drop_both_ways(c, a: int, b: int) -> None:
    """Nodes a and b drop each other's connects but the rendezvous port's: they rendezvous, and
    no other path between them connects."""
    for me, peer in ((a, b), (b, a)):
        c.run(me, ["iptables", "-w", "-I", "INPUT", "1", "-s", c.nodes[peer].addr, "-p", "tcp", "--syn",
                   "!", "--dport", str(PORT), "-j", "DROP"], 10).check_returncode()


@pytest.mark.parametrize("target", ["DROP", "REJECT"])
def test_a_joiner_the_hosts_firewall_keeps_out_blames_the_host(cluster, tmp_path, target):
    """The host's firewall drops (or refuses) node2's connects to its port: node2's link works (ARP
    answered; a refusal is the host's own reset), so node2 names the host and exits 4. The host
    cannot see its own rule keep out a node that never came: it names rank 2 missing (no
    hostname known, so none in faulty_nodes), as node1 hears."""
    timeout = scaled(20)
    with cluster(nodes(3)) as c:
        (c.drop_inbound if target == "DROP" else c.reject_inbound)(0, PORT, source=2)
        runs = run_all(c, 3, tmp_path, timeout)

    assert verdicts(runs) == [(4, "other_nodes", [])] * 3, explain(runs)
    (kept,) = runs[2].findings("rdzv.reach", "fail")
    assert (kept["nodes"], kept["cause_nodes"]) == ([2], [0]), kept
    assert runs[2].report["fault"]["nodes"] == [0]
    assert runs[0].report["fault"]["nodes"] == [2], runs[0].report["findings"]


def test_a_joiner_whose_own_link_is_cut_is_the_one_at_fault(cluster, tmp_path):
    """node2's cable is pulled before the run: nothing answers its ARP, so it names itself (exit
    2); the host and node1, which joined, name rank 2 missing and exit 4."""
    timeout = scaled(20)
    with cluster(nodes(3)) as c:
        c.cut_link(2)
        runs = run_all(c, 3, tmp_path, timeout)

    assert verdicts(runs) == [(4, "other_nodes", []), (4, "other_nodes", []), (2, "this_node", ["node2"])], \
        explain(runs)
    (cut,) = runs[2].findings("rdzv.reach", "fail")
    assert (cut["kind"], cut["nodes"], cut["cause_nodes"]) == ("no_machine", [2], None), cut
    for healthy in runs[:2]:
        assert healthy.report["fault"]["nodes"] == [2], healthy.report["findings"]


def test_one_pair_broken_both_ways_names_both_ends_and_says_why(cluster, tmp_path):
    """node1 and node2 drop each other: nothing tells which end is at fault, so both are named,
    each exits 2, and the healthy host exits 4."""
    timeout = scaled(20)
    with cluster(nodes(3)) as c:
        drop_both_ways(c, 1, 2)
        runs = run_all(c, 3, tmp_path, timeout)

    both = ["node1", "node2"]
    assert verdicts(runs) == [(4, "other_nodes", both), (2, "this_node", both), (2, "this_node", both)], \
        explain(runs)
    (mesh,) = runs[0].findings("mesh.connect", "fail")
    assert mesh["cause_nodes"] is None and "nothing tells which end" in mesh["summary"], mesh


def test_the_node_common_to_every_broken_pair_is_the_one_at_fault(cluster, tmp_path):
    """node3 and node1, node3 and node2 drop each other; node0 reaches everyone: node3 is at an
    end of every broken pair, and its peers connect with the rest, so node3 alone is at fault;
    node1 and node2, whose gloo address node3 never reached, exit 4 with the host."""
    timeout = scaled(20)
    with cluster(nodes(4)) as c:
        drop_both_ways(c, 1, 3)
        drop_both_ways(c, 2, 3)
        runs = run_all(c, 4, tmp_path, timeout)

    assert verdicts(runs) == [(4, "other_nodes", ["node3"])] * 3 + [(2, "this_node", ["node3"])], explain(runs)
    (mesh,) = runs[0].findings("mesh.connect", "fail")
    assert (mesh["nodes"], mesh["cause_nodes"]) == ([1, 2, 3], [3]), mesh
