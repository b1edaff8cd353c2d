"""mesh.connect's rules (rules/mesh.py) over hand-built attempts: which directions fail, who is cut
off, the flagged paths. The nodes and attempts are test_rules_nic's."""

from __future__ import annotations

from netcheck.cluster import mesh
from netcheck.core.meshrecords import Attempt, Transfer, Trial
from netcheck.rules import mesh as mesh_rules
from test_rules_nic import EVIL, HOSTS, directions, failed, filtered_node1, full_mesh, ok


def test_mesh_fails_on_a_direction_with_no_path_and_names_it():
    attempts = (ok(0, 2, "enp3s0f1"), ok(2, 0, "eth0"), ok(1, 0, "eth0"), ok(1, 2, "enp3s0f1"),
                failed(0, 1, "ens5"), failed(2, 1, "ens5"))
    (finding,) = mesh_rules.mesh_findings({0: "node0", 1: "node1", 2: "node2"}, attempts)
    assert (finding.severity, finding.nodes) == ("fail", (1,)), "both peers fail to reach node1: node1 alone"
    assert directions(finding) == ["node0 -> node1", "node2 -> node1"]


def test_a_direction_that_only_one_peer_tried_names_both_ends():
    attempts = (ok(0, 1, "eth0"), failed(1, 0, "eth0"))
    (finding,) = mesh_rules.mesh_findings({0: "node0", 1: "node1"}, attempts)
    assert (finding.severity, finding.nodes) == ("fail", (0, 1))
    assert directions(finding) == ["node1 -> node0"]


def test_a_direction_broken_one_way_only_is_its_targets_fault():
    """node1 drops node2's connects (its inbound firewall): the reverse connects, so node2 reaches
    node1's machine, and node1 is the cause; both ends stay named, as the evidence says."""
    ranks = range(3)
    attempts = tuple((failed if (s, d) == (2, 1) else ok)(s, d, "eth0") for s in ranks for d in ranks if s != d)
    (finding,) = mesh_rules.mesh_findings({r: f"node{r}" for r in ranks}, attempts)
    assert (finding.nodes, finding.cause_nodes) == ((1, 2), (1,))
    both = tuple(a for a in attempts if (a.src, a.dst) != (1, 2)) + (failed(1, 2, "eth0"),)
    (finding,) = mesh_rules.mesh_findings({r: f"node{r}" for r in ranks}, both)
    assert (finding.nodes, finding.cause_nodes) == ((1, 2), None), "both ways: nothing tells which end"


def test_a_node_lost_mid_mesh_is_its_directions_cause_beside_a_node_no_peer_reaches():
    """node2 was killed once node1 had reached it, and sent no results; node1's firewall drops
    every connect. node0 and node3 fail into both: node1 is reached by no peer, node2 is lost,
    and neither node0 nor node3 is named (test_faults_cluster: a joiner killed, another's
    inbound dropped, during the mesh)."""
    names = {r: f"node{r}" for r in range(4)}
    attempts = (failed(0, 1, "eth0"), failed(3, 1, "eth0"), failed(0, 2, "eth0"), failed(3, 2, "eth0"),
                ok(0, 3, "eth0"), ok(3, 0, "eth0"), ok(1, 0, "eth0"), ok(1, 2, "eth0"), ok(1, 3, "eth0"))
    (finding,) = mesh_rules.mesh_findings(names, attempts, lost=(2,))
    assert (finding.nodes, finding.cause_nodes) == ((1, 2), None), finding
    (finding,) = mesh_rules.mesh_findings(names, attempts)
    assert finding.nodes == (0, 1, 2, 3), "without the loss, nothing clears the directions into node2"


def test_the_node_common_to_every_broken_pair_is_the_cause():
    """node3 and two of its peers fail both ways, and node0 reaches everyone: node3 is at an end
    of every broken direction, and each of its peers connects with the rest (issue 65). With one
    pair only, both ends are named, and the summary says why."""
    ranks, names = range(4), {r: f"node{r}" for r in range(4)}
    attempts = tuple((failed if {s, d} in ({1, 3}, {2, 3}) else ok)(s, d, "eth0")
                     for s in ranks for d in ranks if s != d)
    (finding,) = mesh_rules.mesh_findings(names, attempts)
    assert (finding.nodes, finding.cause_nodes) == ((1, 2, 3), (3,)), finding
    assert "node3 is at an end of every one" in finding.summary
    pair = tuple((failed if {s, d} == {1, 2} else ok)(s, d, "eth0") for s in ranks for d in ranks if s != d)
    (finding,) = mesh_rules.mesh_findings(names, pair)
    assert (finding.nodes, finding.cause_nodes) == ((1, 2), None), finding
    assert "nothing tells which end drops the other" in finding.summary
    apart = tuple((failed if {s, d} in ({0, 1}, {2, 3}) else ok)(s, d, "eth0") for s in ranks for d in ranks if s != d)
    (finding,) = mesh_rules.mesh_findings(names, apart)
    assert (finding.nodes, finding.cause_nodes) == ((0, 1, 2, 3), None), "no node common to both pairs"


def test_a_node_that_reaches_no_peer_is_named_alone_and_a_broken_pair_between_others_names_both():
    ranks = range(6)
    attempts = tuple((failed if s == 3 or {s, d} == {0, 1} else ok)(s, d, "eth0")
                     for s in ranks for d in ranks if s != d)
    (finding,) = mesh_rules.mesh_findings({r: f"node{r}" for r in ranks}, attempts)
    assert finding.nodes == (0, 1, 3)
    assert directions(finding) == ["node0 -> node1", "node1 -> node0"] + [f"node3 -> node{d}" for d in (0, 1, 2, 4, 5)]


def test_a_sampled_mesh_names_the_one_bad_node_among_a_thousand():
    """1,024 nodes, ring neighbours plus 8 sampled peers each: the node whose port refuses
    everyone is named, none of the peers that failed to reach it."""
    ranks = list(range(1024))
    attempts = tuple((failed if d == 500 else ok)(s, d, "eth0")
                     for s in ranks for d in mesh.targets(s, ranks, 8, "run"))
    (finding,) = mesh_rules.mesh_findings({r: f"node{r}" for r in ranks}, attempts)
    assert finding.nodes == (500,), finding.summary


def test_mesh_passes_and_lists_interfaces_that_carry_nothing():
    attempts = full_mesh(range(2), {0: "eth0", 1: "eth0"}.get, [failed(0, 1, "docker0", "local")])
    (finding,) = mesh_rules.mesh_findings({0: "node0", 1: "node1"}, attempts)
    assert finding.severity == "pass"
    assert finding.evidence == ("node1 docker0 carries nothing between nodes: local",)


def test_a_blackhole_fix_names_an_unsafe_interface_as_if():
    lost = Transfer(9000, 9000, (Trial(9000, "lost"), Trial(1500, "echoed")))
    holes = tuple(Attempt(s, 2, EVIL, "198.18.0.12", "blackhole", 0.1, "eth0", "connected", lost) for s in (0, 1))
    (finding,) = mesh_rules.blackhole_findings({0: "node0", 1: "node1", 2: "node2"}, holes + (ok(0, 1, "ens5"),))
    assert "on node2: ip link set dev IF mtu" in finding.fix and "touch" not in finding.fix


def test_under_torchrun_the_mesh_speaks_of_node_pairs_and_lists_the_ranks():
    (finding,) = mesh_rules.mesh_findings(HOSTS, filtered_node1())
    assert finding.evidence == ("node0 -> node1 (ranks 0, 1 -> 2, 3): eth0 198.18.0.11: filtered (no answer in 2 s)",)
    assert finding.nodes == (0, 1, 2, 3), "two nodes: either end could be at fault"
    flagged = mesh_rules.flagged_paths(HOSTS, filtered_node1())
    assert flagged.paths == ("node0 -> node1 eth0 (198.18.0.11): filtered",)
