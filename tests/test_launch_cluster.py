"""Launch mistakes on real namespaces, named by the node that can see them, and output that is
the report alone.

The mistakes are the launch line's, not the network's: every path here works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cluster import NodeSpec
from netcheck.core import codec
from netcheck.core.model import Report
from netcheck.render.text import render_text
from nodes import GRACE, PORT, explain, finish_all, scaled, start

pytestmark = pytest.mark.root_required


def ranked(i: int, n: int, timeout: float) -> list[str]:
    return ["--nnodes", str(n), "--node-rank", str(i), "--timeout", str(timeout)]


def test_an_endpoint_on_the_wrong_node_is_named_by_the_node_that_owns_it(cluster, tmp_path):
    """MASTER_ADDR pasted from node1 while node0 is rank 0: node1 owns the address and is not
    rank 0, and says so as soon as nothing listens there; node0 owns none of it."""
    timeout = scaled(16)
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ["--rdzv", f"node1:{PORT}"] + ranked(i, 3, timeout), tmp_path)
                           for i in range(3)], timeout + GRACE)
    # node2 cannot see the mistake: refused by node1, it holds the host's side at fault (4)
    assert [r.rc for r in runs] == [2, 2, 4], explain(runs)
    owner = runs[1]
    (wrong,) = owner.findings("launch.endpoint")
    assert (wrong["severity"], wrong["kind"], wrong["nodes"]) == ("fail", "not_rank0", [1]), wrong
    assert wrong["evidence"] == ["198.18.0.11 on eth0"], wrong
    assert not owner.findings("rdzv.reach"), "the launch line's fix, not 'start the host first'"
    # It waited for a host on its own machine only, not for its share of --timeout.
    assert owner.report["timings"]["reach"] < timeout / 2, owner.report["timings"]
    host = runs[0]
    # Rank 0 says it too, at once: its own connect to node1's address (where torch's store on
    # rank 0 would connect its own client) is refused.
    (unreached,) = host.findings("launch.endpoint")
    assert (unreached["severity"], unreached["kind"], unreached["nodes"]) == ("fail", "rank0_unreached", [0])
    assert unreached["evidence"][0].startswith("198.18.0.11: refused"), unreached
    assert "--rdzv 198.18.0.10:29500" in unreached["fix"], unreached
    assert [f["nodes"] for f in host.findings("rdzv.join", "fail") if f["kind"] == "missing"] == [[1, 2]]
    assert not runs[2].findings("launch.endpoint"), "node2 cannot see the mistake: it is refused"
    assert runs[2].findings("rdzv.reach", "fail")


def test_rank0_says_at_once_that_its_endpoint_does_not_resolve(cluster, tmp_path):
    """The README's shape, --rdzv NAME --nnodes 2 --node-rank 0, with a NAME this cluster does
    not know: torch's store on rank 0 connects its own client by that name, so the job fails at
    rank 0 itself. The host says so in its reach phase: stopped (Ctrl-C) while it waits for
    node1, its report already holds it, before any "node rank 1 never joined"."""
    timeout = scaled(30)
    with cluster([NodeSpec(), NodeSpec()]) as c:
        host = start(c, 0, ["--rdzv", f"head-node:{PORT}"] + ranked(0, 2, timeout), tmp_path, terminal=True)
        host.wait_for_progress("netcheck: rendezvous...", timeout)
        c.kill(host.proc, signal.SIGINT)
        finish_all([host], scaled(10))
    assert host.rc == 130, explain([host])
    (unresolved,) = host.findings("rdzv.resolve", "fail")
    assert (unresolved["kind"], unresolved["nodes"]) == ("unresolved_on_rank0", [0]), unresolved
    assert unresolved["evidence"][0].startswith("getaddrinfo('head-node'): "), unresolved
    assert "make head-node resolve to this node (node0, 198.18.0.10)" in unresolved["fix"], unresolved
    assert "--rdzv 198.18.0.10:29500" in unresolved["fix"], unresolved
    assert not host.findings("rdzv.join", "fail"), "said before any node could be missing"
    assert host.report["timings"]["reach"] < scaled(5), host.report["timings"]


def test_an_endpoint_that_forwards_to_rank0_is_no_mistake(cluster, tmp_path):
    """--rdzv names an address no node holds, which every node's netfilter forwards to node0's
    port (a Kubernetes Service, a load balancer): rank 0 connects to it as its own store client
    would and reaches itself, so nothing is said at once, and with every node in, nothing after."""
    timeout = scaled(30)
    vip = "198.19.9.9"
    with cluster([NodeSpec(), NodeSpec()]) as c:
        for i in range(2):
            c.run(i, ["ip", "route", "add", f"{vip}/32", "via", c.nodes[0].addr] if i else
                  ["ip", "route", "add", f"{vip}/32", "dev", c.nodes[0].ifname], 10)
            c.run(i, ["iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-d", vip, "-p", "tcp", "--dport", str(PORT),
                      "-j", "DNAT", "--to-destination", f"{c.nodes[0].addr}:{PORT}"], 10)
        args = ["--rdzv", f"{vip}:{PORT}", "--only", "reach,rendezvous"]
        runs = finish_all([start(c, i, args + ranked(i, 2, timeout), tmp_path) for i in range(2)], timeout + GRACE)
    assert [r.rc for r in runs] == [0, 0], explain(runs)
    assert not runs[0].findings("launch.endpoint") and runs[0].findings("rdzv.join", "pass"), explain(runs)


def test_a_loopback_endpoint_on_a_two_node_launch_fails_the_joiner_at_once(cluster, tmp_path):
    """MASTER_ADDR=localhost with --nnodes 2: certain to fail, said in the reach phase."""
    timeout = scaled(16)
    env = {"MASTER_ADDR": "localhost", "MASTER_PORT": str(PORT)}
    with cluster([NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ranked(i, 2, timeout), tmp_path, env=env) for i in range(2)],
                          timeout + GRACE)
    assert [r.rc for r in runs] == [4, 2], explain(runs)   # the joiner's launch line is at fault, not the host
    joiner = runs[1]
    assert joiner.findings("rdzv.resolve", "pass")
    (loop,) = joiner.findings("launch.endpoint")
    assert (loop["severity"], loop["kind"], loop["nodes"]) == ("fail", "loopback", [1]), loop
    assert joiner.report["timings"]["reach"] < timeout / 2, joiner.report["timings"]
    (warned,) = runs[0].findings("launch.endpoint")
    assert (warned["severity"], warned["kind"]) == ("warn", "loopback"), warned


def test_nodes_disagreeing_about_master_addr_fail_the_odd_one(cluster, tmp_path):
    """Three nodes meet at --rdzv, but one exports another MASTER_ADDR than the others: its
    init_process_group would wait at another store."""
    timeout = scaled(30)
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ["--rdzv", f"node0:{PORT}", "--only", "reach,rendezvous"]
                                 + ranked(i, 3, timeout), tmp_path,
                                 env={"MASTER_ADDR": "node2" if i == 2 else "node0", "MASTER_PORT": str(PORT)})
                           for i in range(3)], timeout + GRACE)
    (odd,) = runs[0].findings("launch.env", "fail")
    assert (odd["kind"], odd["nodes"]) == ("variables_disagree", [2]), explain(runs)
    assert odd["evidence"] == ["node0: MASTER_ADDR=node0", "node1: MASTER_ADDR=node0", "node2: MASTER_ADDR=node2"]
    (flagged,) = runs[2].findings("launch.env", "warn")
    assert flagged["kind"] == "flags_vs_env" and flagged["evidence"][1].startswith("MASTER_ADDR node2: "), flagged
    assert not runs[1].findings("launch.env"), "node1's MASTER_ADDR is the endpoint it checks"


def test_a_healthy_run_without_numpy_prints_the_report_and_nothing_else(cluster, tmp_path):
    """torch without numpy warns `Failed to initialize NumPy` on import; users paste reports
    into tickets. Every node's stdout is exactly its report, stderr is empty."""
    hidden = tmp_path / "no-numpy" / "numpy"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'numpy\'", name="numpy")\n')
    bare = subprocess.run([sys.executable, "-c", "import torch.distributed"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(hidden.parent)}, timeout=scaled(60))
    assert "Failed to initialize NumPy" in bare.stderr, "this environment is one that makes torch warn"
    timeout = scaled(60)
    sweep = ["-b", "1K", "-e", "16K", "-f", "4", "-w", "1", "-n", "2", "--bw-budget", "2"]
    with cluster([NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ["--rdzv", f"node0:{PORT}"] + ranked(i, 2, timeout) + sweep, tmp_path,
                                 env={"PYTHONPATH": str(hidden.parent)}, bandwidth=True)
                           for i in range(2)], timeout + GRACE)
    for run in runs:
        report = run.report
        assert report["verdict"] != "fail", explain(runs)
        assert run.stderr == "", f"node{run.node} stderr:\n{run.stderr}"
        assert run.stdout == render_text(codec.from_plain(Report, report)), explain(runs)
