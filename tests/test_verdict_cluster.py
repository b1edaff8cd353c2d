"""What every node's verdict stands on, on real network namespaces: a healthy joiner says the
cluster's outcome in one line, and two nodes that call themselves by one name are named. (That
a joiner the host names faulty learns it before it leaves is test_mesh_cluster's, on the run
it shares with the mesh's own test.)"""

from __future__ import annotations

import pytest

from cluster import NodeSpec
from nodes import PORT, explain, finish_all, scaled, start

pytestmark = pytest.mark.root_required


RUN_TIMEOUT = scaled(30)


def ranked_run(c, tmp_path, timeout=RUN_TIMEOUT, extra=(), bandwidth=False):
    n = len(c.nodes)

    def args(i: int) -> list[str]:
        return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i),
                "--timeout", str(timeout), *extra]

    return finish_all([start(c, i, args(i), tmp_path, bandwidth=bandwidth) for i in range(n)], timeout + 30)


def test_a_healthy_cluster_says_so_on_every_joiner(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec()]) as c:
        runs = ranked_run(c, tmp_path)
    assert [r.rc for r in runs] == [0, 0], explain(runs)
    assert "cluster: PASS - every check passed on every node" in runs[1].stdout
    assert not runs[1].findings("run.cluster")


def test_two_nodes_with_one_hostname_are_told_apart_by_address(cluster, tmp_path):
    """Booted from one image: node1 and node2 both call themselves node1."""
    with cluster([NodeSpec(), NodeSpec(hostname="node1"), NodeSpec(hostname="node1")]) as c:
        runs = ranked_run(c, tmp_path)
        addresses = [c.nodes[i].addr for i in (1, 2)]
    host = runs[0]
    assert host.rc == 2, explain(runs)
    same = [f for f in host.findings("rdzv.join", "fail") if f["kind"] == "duplicate_hostname"]
    assert [f["nodes"] for f in same] == [[1, 2]], explain(runs)
    assert all(any(a in e for e in same[0]["evidence"]) for a in addresses), same
    assert all(r.rc == 2 for r in runs[1:]), "each of them learns it from the host"


def test_a_node_called_like_the_endpoint_it_is_not_says_so_and_does_not_host(cluster, tmp_path):
    """Without ranks, node2 calls itself node0 (booted from the host's image); its name service
    says node0 is 198.18.0.10. torchrun would host a store of its own there, by name; netcheck
    names the duplicate on node2 instead of hosting an island (the campaign's seed 20261202)."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec(hostname="node0", dns_name="node2")]) as c:
        args = ["--rdzv", f"node0:{PORT}", "--join-window", "3", "--timeout", str(scaled(30)),
                "--skip", "bandwidth"]
        runs = finish_all([start(c, i, args, tmp_path) for i in range(3)], scaled(30) + 10)
    copier = runs[2]
    assert copier.rc == 2, explain(runs)
    (taken,) = [f for f in copier.findings("rdzv.join", "fail") if f["kind"] == "duplicate_hostname"]
    assert "node0 -> 198.18.0.10" in taken["evidence"], taken
    assert runs[0].report["role"] == "host" and [n["hostname"] for n in runs[0].report["nodes"]] == ["node0", "node1"]


def test_a_node_the_mesh_finds_cut_off_is_not_timed_out_on_by_the_sweep(cluster, tmp_path):
    """The campaign's seed 2 (benchmarks/CHAOS.md): node1 open only on the rendezvous port,
    bandwidth on. The sweep would sit in gloo's connect to node1 until its deadline and name
    the ranks that waited; the mesh already named node1, so the sweep is not run."""
    sweep = ["-b", "1K", "-e", "64K", "-f", "4", "-w", "1", "-n", "2", "--bw-budget", "2"]
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.allow_only_inbound(1, [PORT])
        runs = ranked_run(c, tmp_path, timeout=scaled(40), extra=sweep, bandwidth=True)
    host = runs[0]
    assert host.rc == 2 and [f["nodes"] for f in host.findings("mesh.connect", "fail")] == [[1]], explain(runs)
    (skipped,) = [f for f in host.findings("run.skipped") if "bandwidth" in f["summary"]]
    assert "node1 cut off" in skipped["summary"], skipped
    assert not host.findings("bw.stage", "fail"), explain(runs)
