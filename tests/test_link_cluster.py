"""link.health on real network namespaces: a node whose link loses segments (iptables
statistic DROP on its INPUT), a path that does (one source only), a link that flaps during
the sweep, and a clean cluster that must stay a PASS. The host names each, by its kind and
nodes, with nothing else blamed (no firewall, no MTU)."""

from __future__ import annotations

import time

import pytest

import nodes
from cluster import NodeSpec
from nodes import scaled

pytestmark = pytest.mark.root_required

# Findings a lossy link must not be taken for.
NOT_THE_CAUSE = ("mesh.connect", "nic.mtu", "rdzv.reach", "rdzv.join", "bw.stage")
# Enough data moves in a few seconds of sweep for every pair's connections to be judged.
FLAGS = ["--bw-budget", "4"]


def args(i: int, n: int = 3) -> list[str]:
    return ["--rdzv", "node0:29500", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(scaled(60)), *FLAGS]


def run_cluster(c, tmp_path, during=None) -> list[nodes.NodeRun]:
    runs = [nodes.start(c, i, args(i, len(c.nodes)), tmp_path, bandwidth=True) for i in range(len(c.nodes))]
    if during:
        during()
    return nodes.finish_all(runs, scaled(60) + nodes.GRACE)


def link_findings(run: nodes.NodeRun) -> list[dict]:
    return [f for f in run.findings("link.health") if f["severity"] != "pass"]


def assert_nothing_else_blamed(run: nodes.NodeRun, runs) -> None:
    blamed = [f for f in run.report["findings"] if f["check"] in NOT_THE_CAUSE and f["severity"] != "pass"]
    assert not blamed, nodes.explain(runs)


def own_code(run) -> int:
    """The host's exit code by whose fault its failures are (issue 65): 2 where it is among the
    nodes at fault (a pair of its measured short on this busy machine), 4 where others alone are,
    1 where link.health only warns."""
    faulty = run.report["faulty_nodes"]
    return 2 if "node0" in faulty else 4 if faulty else 1


@pytest.mark.parametrize("share", [0.005, 0.02, 0.05])
def test_a_node_whose_link_loses_segments_is_named_with_its_rate(cluster, tmp_path, share):
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.lose_inbound(2, share)
        runs = run_cluster(c, tmp_path)
    host = runs[0]
    found = link_findings(host)
    assert len(found) == 1, nodes.explain(runs)
    (found,) = found
    assert (found["kind"], found["nodes"], found["severity"] in ("warn", "fail")) == ("lossy_node", [2], True), \
        nodes.explain(runs)
    assert "node2 -> " not in " ".join(found["evidence"][:2]), found
    assert all(" -> node2: " in line and "segments resent (" in line for line in found["evidence"][:2]), found
    # On the exclude list where it failed (a figure it spoils fell short), else a warning only. A
    # node whose pairs this shared 2-core machine measured short under load (bw.pair: its CPU, not
    # its link; seen with a busy loop beside the suite) is bw's to name, never link.health's.
    faulty = set(host.report["faulty_nodes"])
    assert ("node2" in faulty) == (found["severity"] == "fail"), host.report["faulty_nodes"]
    assert host.rc == own_code(host), nodes.explain(runs)
    measured_short = {n for f in host.findings("bw.pair") if f["severity"] == "fail" for n in f["nodes"]}
    # Never from pairs sized by a sweep that crawled at latency sizes (issue 63: 512-byte pairs).
    swept = max((r["size"] for s in host.report["bandwidth"]["sweeps"] for r in s["rows"]), default=0)
    assert not measured_short or swept >= 64 << 10, (swept, host.findings("bw.pair"))
    assert {int(n.removeprefix("node")) for n in faulty - {"node2"}} <= measured_short, host.report["faulty_nodes"]
    assert_nothing_else_blamed(host, runs)
    assert "% resent)" in host.stdout, host.stdout   # the pair table marks node2's pairs
    for joiner in runs[1:]:   # each joiner's own view says it too
        assert [(f["kind"], f["nodes"]) for f in link_findings(joiner)] == [("lossy_node", [2])], nodes.explain(runs)


def test_loss_on_one_path_names_that_pair_and_blames_neither_end_alone(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.lose_inbound(2, 0.02, source=1)
        runs = run_cluster(c, tmp_path)
    host = runs[0]
    assert [(f["kind"], f["nodes"]) for f in link_findings(host)] == [("lossy_path", [1, 2])], nodes.explain(runs)
    assert "node1 <-> node2" in link_findings(host)[0]["summary"]
    assert_nothing_else_blamed(host, runs)


def test_a_link_flapped_during_the_sweep_is_named_with_its_interface(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(), NodeSpec(ifname="ens5")]) as c:
        def flap_once_data_flows() -> None:
            before, until = c.segments_sent(2), time.monotonic() + scaled(40)
            while c.segments_sent(2) < before + 50_000:   # the sweep is moving data
                assert time.monotonic() < until, "node2 never moved data"
                time.sleep(0.1)
            c.flap(2)
        runs = run_cluster(c, tmp_path, during=flap_once_data_flows)
    host = runs[0]
    flaps = [f for f in link_findings(host) if f["kind"] == "carrier_flap"]
    assert [f["nodes"] for f in flaps] == [[2]] and "node2's ens5 went down and up" in flaps[0]["summary"], \
        nodes.explain(runs)
    assert host.rc == own_code(host), nodes.explain(runs)


def test_a_clean_cluster_passes_link_health_over_every_pair(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = run_cluster(c, tmp_path)
    host = runs[0]
    (passed,) = host.findings("link.health")
    assert passed["severity"] == "pass" and passed["nodes"] == [0, 1, 2], nodes.explain(runs)
    assert "over 3 node pair(s) judged, none past 0.1%" in passed["summary"], passed



def flap_once_data_flows(c, i: int, down_s: float = 1.0) -> None:
    """Node i's link flapped for down_s once its sweep moves data."""
    before, until = c.segments_sent(i), time.monotonic() + scaled(40)
    while c.segments_sent(i) < before + 50_000:
        assert time.monotonic() < until, f"node{i} never moved data"
        time.sleep(0.1)
    c.flap(i, down_s)


@pytest.mark.parametrize("down_s", [1.0, 8.0])
def test_a_link_flapped_across_routed_racks_is_ridden_out_and_named(cluster, tmp_path, down_s):
    """node3 (the second rack, its default route through its router) loses its carrier for
    down_s mid-sweep, its switch port down: no node is lost and every report names the flap on
    node3 alone. 1 s is chaos seed 8306, schedule 113; 8 s outlasts a store request's reply
    timeout (STORE_REPLY_TIMEOUT): each is ridden out, as a job's own store and sockets do."""
    with cluster([NodeSpec(rack=i % 2) for i in range(4)], racks=2) as c:
        runs = run_cluster(c, tmp_path, during=lambda: flap_once_data_flows(c, 3, down_s))
    assert [r.rc for r in runs] == [1, 1, 1, 1], nodes.explain(runs)
    for run in runs:
        found = [(f["kind"], f["nodes"]) for f in link_findings(run)]
        assert found.count(("carrier_flap", [3])) == 1, nodes.explain(runs)
        # The flap's own resends are its own, never a lossy path or node with node3 (3 runs in 14
        # were). Two other nodes' path may still resend under a busy machine's load (0.12%, node0
        # <-> node2, with a busy loop beside the suite): that is not the flap's to explain.
        assert not [f for f in found if f[0] != "carrier_flap" and 3 in f[1]], nodes.explain(runs)
        assert_nothing_else_blamed(run, runs)
