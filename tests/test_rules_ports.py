"""rules/ports.py over EphemeralPorts records: what a node's share of the job holds at once (its
listeners, and its most connections to one address), against the range less its reserved ports
and less what closed connections still hold; the endpoint's port in the host's range. The
counts' boundaries are those a real 3-node gloo job showed (8 ports hold 4 processes a node and
not 5, 4 ports hold 2 and not 3); the real sysctls are set in tests/test_ports_cluster.py."""

from __future__ import annotations

import dataclasses

import pytest

from builders import launch, member
from netcheck.core.model import EphemeralPorts, PortSpan
from netcheck.core.rdmarecords import LibNccl, RdmaFacts, RdmaPort
from netcheck.rules.ports import need_of, own_size, range_findings, sweep_short

DEFAULT = EphemeralPorts(32768, 60999)


def node(rank: int, ports: EphemeralPorts | None = DEFAULT, nproc: int = 1, nnodes: int = 3, **given):
    m = member(rank, launched=given.pop("launched", None) or launch(rank, nnodes, nproc=nproc), **given)
    return dataclasses.replace(m, facts=dataclasses.replace(m.facts, ports=ports))


def span(size: int, low: int = 40000, **given) -> EphemeralPorts:
    return EphemeralPorts(low, low + size - 1, **given)


def said(findings):
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


def cluster(ports: EphemeralPorts, nproc: int, at: int = 2, nodes: int = 3, **given):
    return tuple(node(r, ports if r == at else DEFAULT, nproc, nodes, **given) for r in range(nodes))


@pytest.mark.parametrize("size, nproc, said_", [
    (8, 5, ("fail", "range_too_small", (2,))), (4, 3, ("fail", "range_too_small", (2,))),
    (8, 4, ("warn", "time_wait", (2,))), (4, 2, ("warn", "time_wait", (2,))), (12, 4, ("pass", "", (0, 1, 2)))])
def test_gloo_holds_a_listener_and_a_store_connection_a_process_as_a_real_job_did(size, nproc, said_):
    """gloo: one listener a process (port 0, a port alone) and every process's store client to
    one address: 2 x processes, as a real job showed (8 ports held 4 processes and not 5, 4 held
    2 and not 3); its connections to different peers share ports. Where the job fits only
    without the ports netcheck's own connections leave held for a minute, a warning."""
    assert said(range_findings(cluster(span(size), nproc), None)) == [("host.ports", *said_)]


def test_a_short_range_names_its_node_the_job_it_judged_and_the_fix():
    (found,) = range_findings(cluster(span(8), 5), None)
    assert f"{3 * 5} ranks, 3 node(s) x 5 process(es)" in found.summary and "node2" in found.summary
    assert "8 usable ports, 10 held at once" in found.summary and "EADDRNOTAVAIL" in found.summary
    assert "sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\"" in found.fix and "at least 10" in found.fix
    (line,) = found.evidence   # the node named, alone
    assert line.startswith("node2: ip_local_port_range 40000-40007: 8 ports")
    assert "5 x 14 connections of gloo's full mesh" in line and "5 listener(s)" in line and "= 10 port(s)" in line


def test_reserved_ports_are_not_given_out():
    reserved = span(12, reserved=(PortSpan(40000, 40001), PortSpan(40005, 40006)))
    assert reserved.usable == 8
    assert said(range_findings(cluster(reserved, 5), None))[0][1:3] == ("fail", "range_too_small")
    assert said(range_findings(cluster(reserved, 2), None))[0][1] == "pass"


def test_ports_closed_connections_hold_warn_where_the_rest_is_short():
    """TIME-WAIT holds a closed connection's port for a minute, others' now and netcheck's own
    once it ends: a job started within that minute is short."""
    (found,) = range_findings(cluster(span(16, closing=8), 4), None)
    assert said([found]) == [("host.ports", "warn", "time_wait", (2,))]
    assert "8 at once of 16 ports" in found.summary and "8 now, and about 1 of netcheck's own" in found.summary
    assert "a minute after netcheck" in found.fix and "60 s" in found.fix and "at least 17" in found.fix
    assert said(range_findings(cluster(span(16, closing=7), 4), None))[0][1] == "pass"


def rdma_port() -> RdmaFacts:
    port = RdmaPort("mlx5_0", 1, "ACTIVE", "LinkUp", "InfiniBand", "400 Gb/sec", 400.0, None, None, 0, ())
    return RdmaFacts((port,), (), (), False, "", "6.1", LibNccl("system", "/usr/lib/libnccl.so.2", "2.21.5", ""), 0.0)


def test_nccl_holds_two_listeners_a_rank_and_its_sockets_to_one_peer_where_it_speaks_sockets():
    """8 GPUs: NCCL's bootstrap listeners (2 a rank) and the store's 8 connections; with 4 x 8
    sockets a connection, NCCL's 32 data sockets and the control socket to one peer's listener
    hold more of one address than the store; over RDMA they are not sockets."""
    plain = node(2, nproc=8, gpus=8)
    assert (need_of(plain, 3).listeners, need_of(plain, 3).to_one) == (16, 8)
    nsocks = node(2, nproc=8, gpus=8, env={"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "8"})
    assert (need_of(nsocks, 3).ports, need_of(nsocks, 3).backend) == (16 + 33, "NCCL")
    assert need_of(nsocks, 1).ports == 24   # one node: NCCL's peers are on it, no sockets between nodes
    rdma = dataclasses.replace(nsocks, facts=dataclasses.replace(nsocks.facts, rdma=rdma_port()))
    assert need_of(rdma, 3).ports == 24
    one_set = node(2, nproc=8, gpus=8, env={"NCCL_NSOCKS_PERTHREAD": "4"})   # threads left to NCCL: 0 here
    assert need_of(one_set, 3).ports == 24


def test_torchrun_adds_its_agents_store_client():
    workers = node(1, launched=launch(1, 2, "torchrun", nproc=4))
    assert (need_of(workers, 2).listeners, need_of(workers, 2).to_one) == (4, 5)


def test_the_endpoints_port_in_the_hosts_range_unreserved_warns_on_the_host():
    wide = EphemeralPorts(20000, 60999)
    found = range_findings((node(0, wide), node(1, wide)), 29500)
    assert said(found)[1:] == [("host.ports", "warn", "endpoint_in_range", (0,))]
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=29500" in found[1].fix and "20000-60999" in found[1].fix
    assert "Address already in use" in found[1].summary
    reserved = EphemeralPorts(20000, 60999, (PortSpan(29500, 29500),))
    assert said(range_findings((node(0, reserved), node(1, wide)), 29500))[1:] == []
    assert said(range_findings((node(0, DEFAULT), node(1, wide)), 29500))[1:] == []   # only the host's range


def test_a_node_without_the_facts_is_not_judged():
    assert range_findings((node(0, None), node(1, None)), 29500) == []
    assert said(range_findings((node(0, None), node(1, span(8))), None)) == [("host.ports", "pass", "", (1,))]


def test_a_nodes_own_view_says_the_size_it_judged_and_what_it_does_not_know_yet():
    """In the local phase a node knows its launcher's layout, or (arrival) not how many nodes."""
    ranked = node(2, span(8), nproc=5)
    (found,) = range_findings((ranked,), None, own_size(ranked.facts.launch))
    assert said([found]) == [("host.ports", "fail", "range_too_small", (2,))] and "15 ranks" in found.summary
    arrived = node(-1, span(8), nproc=5, launched=launch(None, None, nproc=5))
    (found,) = range_findings((arrived,), None, own_size(arrived.facts.launch))
    assert found.severity == "fail" and "number of nodes not known yet" in found.summary


def test_the_sweep_is_short_where_the_job_fits_but_not_twice_beside_netchecks_own():
    """A 4-port node holds a job of one process a node (2 ports) but not netcheck's sweep, its
    own connections and the job after them: their closed connections hold ports for a minute."""
    assert sweep_short(cluster(span(4), 1)).startswith("the ephemeral port range of node2 (4 ports free)")
    assert sweep_short(cluster(span(8), 1)) == ""
    assert sweep_short(cluster(DEFAULT, 8)) == ""
