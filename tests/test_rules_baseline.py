"""--baseline: what drifted between a saved report and this run, over hand-built reports."""

from __future__ import annotations

import dataclasses

import builders
from netcheck.core.bwrecords import BandwidthResult, Row, Sweep
from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import NodeEntry, Report
from netcheck.rules.baseline import drift_findings


def entry(rank: int, env: dict[str, str], mtu: int = 1500) -> NodeEntry:
    nic = builders.nic("eth0", f"10.0.0.{rank + 1}", index=2, mtu=mtu, speed=10000)
    facts = builders.facts(f"node{rank}", rank=rank, nnodes=2, fqdn=f"node{rank}.c", nics=(nic,), default="eth0")
    return NodeEntry(rank, f"node{rank}", f"10.0.0.{rank + 1}", facts, EnvFacts(env))


def sweep_of(busbw: float) -> BandwidthResult:
    row = Row(1 << 20, 262144, "float32", "sum", 800.0, busbw, busbw, 0)
    return BandwidthResult("gloo", "no CUDA", 2, 1, (Sweep("all", "all_reduce", 2, 1, (row,)),), (), None, "", (), 1.0)


ENV = {"torch.version": "2.13.0", "hash./code": "sha256 aa"}
NODES = (entry(0, ENV), entry(1, ENV))


def baseline(nodes=NODES, recommend=None, bandwidth=None) -> Report:
    return Report(run_id="last-week", node_rank=0, role="host", verdict="pass", nodes=nodes, findings=(),
                  recommend=recommend or {"NCCL_SOCKET_IFNAME": "eth0"}, recommend_per_node={}, env_table=(),
                  bandwidth=bandwidth, timings={}, unfinished=None, healthy_nodes=(), faulty_nodes=())


def test_nothing_drifted_passes():
    (finding,) = drift_findings(baseline(), NODES, {"NCCL_SOCKET_IFNAME": "eth0"})
    assert (finding.check, finding.severity, finding.nodes, finding.evidence) == ("baseline.drift", "pass", (0, 1), ())


def test_a_changed_hash_variable_and_interface_are_named_per_node():
    now = (entry(0, ENV), entry(1, {**ENV, "hash./code": "sha256 bb", "var.NCCL_DEBUG": "INFO"}, mtu=9000))
    (finding,) = drift_findings(baseline(), now, {"NCCL_SOCKET_IFNAME": "eth0"})
    assert (finding.severity, finding.nodes) == ("warn", (1,))
    assert finding.evidence == ("node1: hash./code: sha256 aa -> sha256 bb",
                                "node1: var.NCCL_DEBUG: (none) -> INFO",
                                "node1: interface eth0: 10.0.0.2, mtu 1500, running -> 10.0.0.2, mtu 9000, running")


def test_nodes_come_and_go_and_the_recommendation_changes():
    now = (entry(0, ENV), entry(2, ENV))
    (finding,) = drift_findings(baseline(), now, {"NCCL_SOCKET_IFNAME": "=eth0,ens5"})
    assert finding.evidence == ("node2: not in the baseline", "node1: in the baseline, not in this run",
                                "recommended NCCL_SOCKET_IFNAME: eth0 -> =eth0,ens5")


def test_a_bandwidth_drop_beyond_a_fifth_is_drift_and_a_small_one_is_not():
    old = baseline(bandwidth=sweep_of(2.0))
    (small,) = drift_findings(old, NODES, {"NCCL_SOCKET_IFNAME": "eth0"}, sweep_of(1.7))
    assert small.severity == "pass"
    (drop,) = drift_findings(old, NODES, {"NCCL_SOCKET_IFNAME": "eth0"}, sweep_of(1.0))
    assert drop.evidence == ("all_reduce (all) average busbw: 2 GB/s -> 1 GB/s",)


def test_under_torchrun_a_hosts_ranks_drift_in_one_line():
    """Each rank of a host is a node entry; a change of the host is said once, with its ranks."""
    old = baseline(nodes=(entry(0, ENV),))
    twice = tuple(NodeEntry(r, "node0", e.address, e.facts, EnvFacts({**ENV, "torch.version": "2.14.1"}))
                  for r, e in ((0, entry(0, ENV)), (1, entry(0, ENV))))
    (finding,) = drift_findings(old, twice, {"NCCL_SOCKET_IFNAME": "eth0"})
    assert (finding.severity, finding.nodes) == ("warn", (0, 1))
    assert finding.evidence == ("node0 (ranks 0, 1): torch.version: 2.13.0 -> 2.14.1",)


def test_a_joiners_own_view_holds_only_itself():
    """A joiner given --baseline (srun and torchrun hand every node one command line) compares
    its own node: the others and the cluster's recommendation are not in its view, so their
    absence is no drift."""
    (same,) = drift_findings(baseline(), NODES[1:], {}, whole=False)
    assert (same.severity, same.nodes) == ("pass", (1,)), same
    now = (entry(1, {**ENV, "var.NCCL_DEBUG": "INFO"}),)
    (drift,) = drift_findings(baseline(), now, {}, whole=False)
    assert (drift.severity, drift.nodes, drift.evidence) == ("warn", (1,), ("node1: var.NCCL_DEBUG: (none) -> INFO",))


def test_the_port_torchrun_picks_for_every_run_is_no_drift():
    """torchrun's c10d rendezvous gives its workers a free port of its own as MASTER_PORT, a
    new one each run: not a change since the baseline. Set by flags, it is one."""
    def under(source: str, port: str) -> NodeEntry:
        node = entry(0, {**ENV, "var.MASTER_PORT": port})
        assert node.facts is not None
        return dataclasses.replace(node, facts=dataclasses.replace(node.facts, launch=builders.launch(0, 2, source)))
    old = baseline(nodes=(under("torchrun", "40295"), entry(1, ENV)))
    (same,) = drift_findings(old, (under("torchrun", "43567"), entry(1, ENV)), {"NCCL_SOCKET_IFNAME": "eth0"})
    assert same.severity == "pass", same
    old = baseline(nodes=(under("flags", "29500"), entry(1, ENV)))
    (moved,) = drift_findings(old, (under("flags", "29501"), entry(1, ENV)), {"NCCL_SOCKET_IFNAME": "eth0"})
    assert moved.evidence == ("node0: var.MASTER_PORT: 29500 -> 29501",), moved
