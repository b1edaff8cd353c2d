"""rules/buffers.py over hand-built records: each node's TCP buffer bounds against its paths' rate
times the mesh's least round trip. A node whose bounds let a connection carry far less than the
path is named with its settings, the path's need, what it carries and the sysctl lines; a healthy
default node passes; a node measured short (bw.pair, bw.straggler, the plateau) fails. The real
sysctls are set in tests/test_buffers_cluster.py."""

from __future__ import annotations

import dataclasses

import pytest

from builders import member, nic
from netcheck.core.meshrecords import Attempt
from netcheck.core.model import FAIL, WARN, Finding, SocketBuffers, TcpMem
from netcheck.core.rdmarecords import LibNccl, RdmaFacts, RdmaPort
from netcheck.rules.buffers import buffer_findings

# A default Linux node's (tcp_rmem's max 6 MiB before 6.16, 32 MiB since).
DEFAULT = SocketBuffers(TcpMem(4096, 131072, 6291456), TcpMem(4096, 16384, 4194304), 212992, 212992, True, True)
TINY = dataclasses.replace(DEFAULT, rmem=TcpMem(4096, 4096, 4096), wmem=TcpMem(4096, 4096, 4096))
TEN_GBITS = 10000   # Mb/s


def node(rank: int, buffers: SocketBuffers | None = DEFAULT, speed: int | None = TEN_GBITS, **given):
    m = member(rank, nics=(nic("eth0", f"198.18.0.{10 + rank}/24", speed=speed),), **given)
    return dataclasses.replace(m, facts=dataclasses.replace(m.facts, buffers=buffers))


def mesh(n: int, rtt_ms: float = 0.1) -> tuple[Attempt, ...]:
    """Every direction between n nodes connected on eth0, each connect rtt_ms (a later one slower)."""
    return tuple(Attempt(s, d, "eth0", f"198.18.0.{10 + d}", "ok", rtt, "eth0", "connected")
                 for s in range(n) for d in range(n) if s != d for rtt in (rtt_ms, rtt_ms * 40))


def said(findings):
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


def cluster(at: SocketBuffers, n: int = 3, **given):
    return tuple(node(r, at if r == 2 else DEFAULT, **given) for r in range(n))


def test_a_default_linux_node_passes_at_a_datacenters_round_trip():
    """6 MiB / 4 MiB: 2 MiB in flight carries 10 Gb/s up to a 1.7 ms round trip."""
    (found,) = buffer_findings(cluster(DEFAULT), mesh(3, 1.0), [], None)
    assert said([found]) == [("host.buffers", "pass", "", (0, 1, 2))]
    assert "the widest needs 1.2 MiB" in found.summary, found.summary
    assert "the least a node's connection holds in flight is 2 MiB" in found.summary
    (line,) = found.evidence   # the same settings on every node: one line
    assert line.startswith("node0, node1, node2: tcp_rmem 4096 131072 6291456, tcp_wmem 4096 16384 4194304")


def test_a_node_whose_buffers_hold_4_kib_is_named_with_its_settings_the_paths_need_and_the_fix():
    (found,) = buffer_findings(cluster(TINY), mesh(3), [], None)
    assert said([found]) == [("host.buffers", "warn", "buffer_short", (2,))]
    # 2 KiB in flight a round trip of 0.1 ms: 0.164 Gb/s of a 10 Gb/s path that needs 122 KiB.
    assert "node2 let its traffic to a peer carry at most 0.164 Gb/s at the 100 us round trip" in found.summary
    assert "2% of the 10 Gb/s path: tcp_wmem max 4096 and tcp_rmem max 4096 let it hold 2 KiB in flight, the path " \
        "needs 122.1 KiB" in found.summary
    (line,) = found.evidence
    assert line.startswith("node2: tcp_rmem 4096 4096 4096, tcp_wmem 4096 4096 4096, rmem_max 212992"), line
    assert "node2 <-> node0: 10 Gb/s (eth0 - eth0) x 100 us needs 122.1 KiB" in line
    assert "2 of its 2 path(s) judged short" in line
    assert 'sysctl -w net.ipv4.tcp_wmem="4096 16384 4194304"' in found.fix, found.fix
    assert 'sysctl -w net.ipv4.tcp_rmem="4096 131072 6291456"' in found.fix and "/etc/sysctl.d" in found.fix


def test_the_least_round_trip_is_the_paths_a_busy_machine_makes_connects_late_never_early():
    """A default node at a 1 ms least round trip passes, though some connects took 40 ms."""
    assert said(buffer_findings(cluster(DEFAULT), mesh(3, 1.0), [], None))[0][1] == "pass"
    assert said(buffer_findings(cluster(DEFAULT), mesh(3, 4.0), [], None))[0][1:] == ("warn", "buffer_short",
                                                                                     (0, 1, 2))


def test_a_long_fat_path_asks_for_a_buffer_that_holds_it():
    """100 Gb/s at 2 ms needs 25 MB in flight: the fix asks for twice that, rounded up to 48 MiB,
    once for the nodes it is alike on."""
    (found,) = buffer_findings(cluster(DEFAULT, speed=100000), mesh(3, 2.0), [], None)
    assert found.nodes == (0, 1, 2) and found.kind == "buffer_short"
    assert found.fix.startswith('on node0, node1, node2: `sysctl -w net.ipv4.tcp_wmem="4096 16384 50331648"`, '
                                '`sysctl -w net.ipv4.tcp_rmem="4096 131072 50331648"`; and in /etc/sysctl.d'), found.fix


@pytest.mark.parametrize("check, severity, at", [("bw.pair", FAIL, (2,)), ("bw.busbw", FAIL, ())])
def test_a_node_measured_short_fails_and_the_finding_says_it_is_why(check, severity, at):
    measured = [Finding(check=check, severity=severity, nodes=at, summary="short")]
    (found,) = buffer_findings(cluster(TINY), mesh(3), measured, None)
    assert said([found]) == [("host.buffers", "fail", "buffer_short", (2,))]
    assert f"({check} measured it short: this is why)" in found.summary


@pytest.mark.parametrize("check, kind", [("bw.straggler", ""), ("bw.pair", "within_noise")])
def test_a_warning_of_a_figure_is_no_measure_short_enough_to_fail(check, kind):
    """A straggling rank, a pair slow within the run's own noise: the loaded machine may be why."""
    (found,) = buffer_findings(cluster(TINY), mesh(3), [Finding(check=check, severity=WARN, nodes=(2,), summary="short",
                                                                kind=kind)], None)
    assert said([found]) == [("host.buffers", "warn", "buffer_short", (2,))]


def test_only_the_node_measured_short_fails():
    both = tuple(node(r, TINY if r else DEFAULT) for r in range(3))
    found = buffer_findings(both, mesh(3), [Finding(check="bw.pair", severity=FAIL, nodes=(2,), summary="short")], None)
    assert said(found) == [("host.buffers", "warn", "buffer_short", (1,)), ("host.buffers", "fail", "buffer_short",
                                                                           (2,))]


def test_receive_autotuning_off_leaves_the_window_at_tcp_rmems_default():
    off = dataclasses.replace(DEFAULT, moderate_rcvbuf=False)
    (found,) = buffer_findings(cluster(off), mesh(3, 0.2), [], None)
    assert said([found]) == [("host.buffers", "warn", "buffer_short", (2,))]
    assert "tcp_rmem default 131072 with tcp_moderate_rcvbuf 0" in found.summary
    assert "net.ipv4.tcp_moderate_rcvbuf=1" in found.fix and "tcp_rmem=" not in found.fix, found.fix


def test_window_scaling_off_holds_64_kib():
    off = dataclasses.replace(DEFAULT, window_scaling=False)
    (found,) = buffer_findings(cluster(off), mesh(3, 0.2), [], None)
    assert said([found]) == [("host.buffers", "warn", "window_unscaled", (2,))]
    assert "net.ipv4.tcp_window_scaling=1" in found.fix and "tcp_wmem" not in found.fix


def test_nccls_socket_buffers_are_capped_by_net_cores_max():
    """NCCL_SOCKET_SNDBUF asks SO_SNDBUF: the kernel gives at most wmem_max (doubled, half in
    flight), and tunes it no further; gloo's sockets (a node without GPUs) ask none."""
    env = {"NCCL_SOCKET_SNDBUF": "16777216"}
    gpu = tuple(node(r, DEFAULT, gpus=8 if r == 2 else 0, env=env if r == 2 else None) for r in range(3))
    (found,) = buffer_findings(gpu, mesh(3, 0.5), [], None)
    assert said([found]) == [("host.buffers", "warn", "sockopt_capped", (2,))]
    assert "NCCL_SOCKET_SNDBUF=16777216 under net.core.wmem_max 212992" in found.summary
    assert "unset NCCL_SOCKET_SNDBUF" in found.fix and "net.core.wmem_max=4194304" in found.fix, found.fix
    cpu = tuple(node(r, DEFAULT, env=env) for r in range(3))
    assert said(buffer_findings(cpu, mesh(3, 0.5), [], None))[0][1] == "pass"


def test_nccls_sockets_to_a_peer_share_its_load():
    """4 x 2 sockets a peer carry eight times what one does: 2 MiB each holds 100 Gb/s at 1 ms."""
    env = {"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "2"}
    one = tuple(node(r, DEFAULT, speed=100000, gpus=8) for r in range(3))
    assert said(buffer_findings(one, mesh(3, 1.0), [], None))[0][1] == "warn"
    eight = tuple(node(r, DEFAULT, speed=100000, gpus=8, env=env) for r in range(3))
    assert said(buffer_findings(eight, mesh(3, 1.0), [], None))[0][1] == "pass"


def test_a_node_whose_nccl_uses_rdma_is_not_judged():
    port = RdmaPort("mlx5_0", 1, "ACTIVE", "LinkUp", "InfiniBand", "400 Gb/sec", 400.0, None, None, 0, ())
    rdma = RdmaFacts((port,), (), (), False, "", "6.1", LibNccl("system", "/usr/lib/libnccl.so.2", "2.21.5", ""), 0.0)
    members = tuple(dataclasses.replace(m, facts=dataclasses.replace(m.facts, rdma=rdma, gpus=8)) if m.rank == 2
                    else m for m in cluster(TINY))
    (found,) = buffer_findings(members, mesh(3), [], None)
    assert said([found]) == [("host.buffers", "pass", "", (0, 1))]


def test_virtual_links_take_the_pair_tests_rate_and_without_one_nothing_is_judged():
    """veth-less virtual links report no speed: the pair test's median node's best pair is the
    rate; with no pair test either, nothing is said (no pass on missing evidence)."""
    members = cluster(TINY, speed=None)
    (found,) = buffer_findings(members, mesh(3), [], 1.25)
    assert said([found]) == [("host.buffers", "warn", "buffer_short", (2,))]
    assert "10 Gb/s (the pair test's, on the median node)" in found.evidence[0], found.evidence
    assert buffer_findings(members, mesh(3), [], None) == []


def test_nodes_without_the_facts_or_a_measured_round_trip_are_not_judged():
    assert buffer_findings(cluster(TINY), (), [], None) == []
    unread = tuple(node(r, None) for r in range(3))
    assert buffer_findings(unread, mesh(3), [], None) == []
    failed = tuple(dataclasses.replace(a, outcome="filtered", rtt_ms=None) for a in mesh(3))
    assert buffer_findings(cluster(TINY), failed, [], None) == []


def test_a_torchrun_hosts_ranks_are_judged_together():
    """Under torchrun every worker is a member: a host's ranks share its namespace's settings."""
    members = tuple(dataclasses.replace(node(r, TINY if r >= 4 else DEFAULT),
                                        facts=dataclasses.replace(node(r, TINY if r >= 4 else DEFAULT).facts,
                                                                  hostname=f"node{r // 2}"))
                    for r in range(6))
    attempts = tuple(Attempt(s, d, "eth0", "198.18.0.10", "ok", 0.1, "eth0", "connected")
                     for s in range(6) for d in range(6) if s // 2 != d // 2)
    (found,) = buffer_findings(members, attempts, [], None)
    assert said([found]) == [("host.buffers", "warn", "buffer_short", (4, 5))]
    assert found.evidence[0].startswith("node2: ")
