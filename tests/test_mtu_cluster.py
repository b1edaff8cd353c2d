"""Jumbo frames on real network namespaces: a switch port that carries less than the nodes'
MTU (docs/contract.md: mesh.connect) is named a path-MTU blackhole, by the mesh or by the node behind it,
and the bandwidth phase does not spend the run's time on it; jumbo frames everywhere pass."""

from __future__ import annotations

import pytest

from cluster import NodeSpec
from faults import arrival_args, nodes
from nodes import GRACE, PORT, explain, finish_all, scaled, start

pytestmark = pytest.mark.root_required

JUMBO = 9000


def args(i: int, n: int, timeout: float) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(timeout)]


def at_fault(runs) -> list[tuple[int, list[str]]]:
    """Each node's exit code and the nodes at fault its report names."""
    return [(r.rc, r.report["faulty_nodes"]) for r in runs]


def test_a_short_switch_port_under_jumbo_frames_is_a_blackhole_and_the_sweep_is_skipped(cluster, tmp_path):
    """node2's port carries 1500 bytes under 9000-byte MTUs: its visitor record (a small
    frame) reaches the host's store, its facts (larger than a frame) never do. The host names
    node2 as come but unseated, not as one that never reached the store; node2 names the
    blackhole, and the lost host as the path's doing, not the host's. node2 alone is at fault,
    named by the hostname its visitor record gave (issue 65: no node was); the others exit 4."""
    timeout = scaled(40)
    specs = [NodeSpec(mtu=JUMBO), NodeSpec(mtu=JUMBO), NodeSpec(mtu=JUMBO, port_mtu=1500)]
    with cluster(specs) as c:
        runs = finish_all([start(c, i, args(i, 3, timeout), tmp_path, bandwidth=True) for i in range(3)],
                          timeout + GRACE)
    host, node2 = runs[0], runs[2]
    assert host.seconds < timeout + GRACE, explain(runs)
    assert at_fault(runs) == [(4, ["node2"]), (4, ["node2"]), (2, ["node2"])], explain(runs)
    assert host.report["fault"]["party"] == "other_nodes" and host.report["healthy_nodes"] == ["node0", "node1"]
    (lost,) = host.findings("rdzv.join", "fail")
    assert (lost["kind"], lost["nodes"]) == ("facts_lost", [2]) and "node2" in lost["summary"], explain(runs)
    assert "mesh.connect blackhole" in lost["fix"]
    (hole,) = node2.findings("mesh.connect", "fail")
    assert hole["kind"] == "blackhole" and hole["nodes"] == [0, 2] and "ping -M do" in hole["fix"], explain(runs)
    (path,) = node2.findings("rdzv.join", "fail")
    assert path["kind"] == "lost_in_rendezvous" and "drops full-size frames" in path["summary"], explain(runs)
    (skipped,) = [f for f in host.findings("run.skipped") if "bandwidth" in f["summary"]]
    assert skipped["kind"] == "phase_skipped", explain(runs)
    for run in runs:  # no node spends the run's time on a sweep, nor blames time for it
        assert run.report["bandwidth"] is None and run.report["timings"].get("bandwidth", 0) < 1.0
        assert not run.findings("bw.stage") and "ran out of time" not in run.stdout


def test_a_joiner_cut_off_by_a_blackhole_at_the_host_names_it_not_a_silent_host(cluster, tmp_path):
    """The host's switch port short under jumbo frames: a joiner whose facts are larger than a
    frame (two more interfaces) gets no answer to their publishing, and once said only 'the
    host stopped answering' (chaos seed 22262, schedule 6). Its store still answers a small
    request, not the same one in a full frame: the joiner names the blackhole."""
    timeout = scaled(30)
    with cluster([NodeSpec(mtu=JUMBO, port_mtu=1500), NodeSpec(mtu=JUMBO)]) as c:
        c.add_decoy(1, "ib0", "198.19.2.1/24")
        c.add_decoy(1, "ib1", "198.19.3.1/24")
        runs = finish_all([start(c, i, args(i, 2, timeout), tmp_path) for i in range(2)], timeout + GRACE)
    joiner = runs[1]
    assert joiner.rc == 2 and joiner.seconds < timeout + GRACE, explain(runs)
    (hole,) = joiner.findings("mesh.connect", "fail")
    assert hole["kind"] == "blackhole" and hole["nodes"] == [0, 1], hole
    assert "ping -M do" in hole["fix"], hole
    assert runs[0].rc == 2, explain(runs)


def test_one_shot_a_joiner_behind_a_short_port_is_named_by_the_host_not_left_out(cluster, tmp_path):
    """The headline form (no node count): node2's port carries 1500 bytes under 9000-byte MTUs,
    so its facts never reach the host (chaos seed 21499, schedule 124: the host said PASS for
    the three others and exited 0). The host names node2 as come without its facts, and its
    own datagrams to node2 prove the blackhole; node2 is never left out of a PASS. It is at fault,
    by the name it came with (it has no rank): the host and the others exit 4, naming it."""
    timeout = scaled(40)
    specs = [NodeSpec(mtu=JUMBO), NodeSpec(mtu=JUMBO), NodeSpec(mtu=JUMBO, port_mtu=1500), NodeSpec(mtu=JUMBO)]
    with cluster(specs) as c:
        runs = finish_all([start(c, i, arrival_args(timeout, scaled(4)), tmp_path) for i in range(4)],
                          timeout + GRACE)
    host = runs[0]
    assert at_fault(runs) == [(4, ["node2"]), (4, ["node2"]), (2, ["node2"]), (4, ["node2"])], explain(runs)
    (lost,) = host.findings("rdzv.join", "fail")
    assert lost["kind"] == "facts_lost" and lost["nodes"] == [] and "node2" in lost["summary"], explain(runs)
    (hole,) = host.findings("mesh.connect", "fail")
    assert hole["kind"] == "blackhole" and hole["nodes"] == [], explain(runs)
    assert "between the host and node2" in hole["summary"], explain(runs)
    assert "9000-byte datagrams lost" in hole["evidence"][0], hole


def test_one_shot_a_short_port_at_the_host_is_the_hosts_not_no_other_node(cluster, tmp_path):
    """The host's own port short under jumbo frames, one-shot (chaos seed 16547, schedule 14:
    the host said no other node joined, though three came). Every joiner's facts are lost; the
    host names itself, the common end, as the blackhole's, and the nodes that came."""
    timeout = scaled(40)
    specs = [NodeSpec(mtu=JUMBO, port_mtu=1500)] + [NodeSpec(mtu=JUMBO) for _ in range(3)]
    with cluster(specs) as c:
        runs = finish_all([start(c, i, arrival_args(timeout, scaled(4)), tmp_path) for i in range(4)],
                          timeout + GRACE)
    host = runs[0]
    assert [r.rc for r in runs] == [2, 2, 2, 2], explain(runs)
    assert not [f for f in host.findings("rdzv.join") if f["kind"] == "alone"], explain(runs)
    (lost,) = host.findings("rdzv.join", "fail")
    assert lost["kind"] == "facts_lost" and len(lost["evidence"]) == 3, explain(runs)
    (hole,) = host.findings("mesh.connect", "fail")
    assert (hole["kind"], hole["nodes"]) == ("blackhole", [0]) and "at the host" in hole["summary"], explain(runs)
    assert host.report["faulty_nodes"] == ["node0"], host.report["faulty_nodes"]
    for joiner in runs[1:]:
        (own,) = joiner.findings("mesh.connect", "fail")
        assert own["kind"] == "blackhole", explain(runs)


def test_jumbo_frames_everywhere_pass_the_mesh(cluster, tmp_path):
    timeout = scaled(30)
    with cluster([NodeSpec(mtu=JUMBO) for _ in range(3)]) as c:
        runs = finish_all([start(c, i, args(i, 3, timeout), tmp_path) for i in range(3)], timeout + GRACE)
    assert [r.rc for r in runs] == [0, 0, 0], explain(runs)
    (connect,) = runs[0].findings("mesh.connect")
    assert connect["severity"] == "pass" and f"echo full-size frames (up to {JUMBO} bytes)" in connect["summary"]


@pytest.mark.parametrize("mtu,narrow", [(1500, True), (1450, False)], ids=["left-at-1500", "at-1450"])
def test_an_overlay_left_at_its_underlay_s_mtu_is_named_from_the_path_mtu_the_kernel_learnt(cluster, tmp_path,
                                                                                           mtu, narrow):
    """The overlay's frames carry VXLAN's 50 bytes on an underlay of 1500: at 1500 the kernel
    learns a path MTU of 1450 on every overlay path while the mesh's full-size frames cross
    (TCP adapts: the job runs, each large frame first dropped); at 1450 nothing is said."""
    timeout = scaled(30)
    with cluster(nodes(3)) as c:
        c.vxlan_overlay(mtu)
        runs = finish_all([start(c, i, args(i, 3, timeout), tmp_path) for i in range(3)], timeout + GRACE)
    if not narrow:
        assert [r.rc for r in runs] == [0, 0, 0], explain(runs)
        return
    assert runs[0].rc == 1, explain(runs)
    (path,) = runs[0].findings("nic.mtu", "warn")
    assert (path["kind"], path["nodes"]) == ("path_mtu", [0, 1, 2]), explain(runs)
    assert "VXLAN over IPv4" in path["summary"] and "mtu 1450" in path["fix"], explain(runs)
    assert [f for f in runs[0].report["findings"] if f["severity"] != "pass"] == [path], explain(runs)
