"""rules/limits.py over ProcessLimits records: the rendezvous host's descriptors against the
job's ranks and agents, its accept queue, locked memory where NCCL uses RDMA, an unlimited
stack under NCCL before 2.28. The real limits (prlimit) are set in tests/test_limits_cluster.py."""

from __future__ import annotations

import dataclasses

import pytest

from builders import launch, member
from netcheck.core.model import ProcessLimits
from netcheck.core.rdmarecords import LibNccl, RdmaFacts, RdmaPort
from netcheck.rules.limits import BARE_DESCRIPTORS, PROCESS_DESCRIPTORS, limit_findings

LOW = ProcessLimits(nofile=64, nofile_hard=4096, memlock=-1, stack=8 << 20, somaxconn=4096, syn_backlog=4096)
HIGH = dataclasses.replace(LOW, nofile=65536, nofile_hard=65536)


def node(rank: int, limits: ProcessLimits, nproc: int = 1, **given):
    m = member(rank, launched=launch(rank, 2, nproc=nproc), **given)
    return dataclasses.replace(m, facts=dataclasses.replace(m.facts, limits=limits))


def said(findings):
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


def store(members):
    """The rendezvous host's findings, without those of every node's sockets to its peers."""
    return [f for f in limit_findings(members) if f.kind != "nofile_peers"]


def test_a_host_whose_soft_limit_the_jobs_store_would_exhaust_fails_with_the_fix_its_hard_limit_allows():
    """2 nodes x 48 processes under a soft limit of 64 (issue 49): torch's store refuses its
    50th client; the hard limit (4096) allows `ulimit -n`."""
    (found,) = store((node(0, LOW, nproc=48), node(1, HIGH, nproc=48)))
    assert said([found]) == [("host.limits", "fail", "nofile", (0,))]
    assert f"below the {96 + 2 + BARE_DESCRIPTORS}" in found.summary and "96 ranks on 2 node(s)" in found.summary
    assert f"ulimit -n {96 + 2 + PROCESS_DESCRIPTORS}" in found.fix and "LimitNOFILE" in found.fix


def test_a_hard_limit_below_the_need_says_so():
    hard = dataclasses.replace(LOW, nofile_hard=100)
    (found,) = store((node(0, hard, nproc=48), node(1, HIGH, nproc=48)))
    assert "hard limit (100) is below it too" in found.fix


@pytest.mark.parametrize("limits", [HIGH, dataclasses.replace(LOW, nofile=-1)])
def test_a_sufficient_or_unlimited_descriptor_limit_passes(limits):
    (found,) = store((node(0, limits, nproc=48), node(1, LOW, nproc=48)))
    assert said([found]) == [("host.limits", "pass", "", (0,))]


def test_under_torchrun_every_worker_is_a_rank_and_each_node_an_agent():
    """32 workers on 4 nodes: 36 connections; a soft limit of 50 holds a bare store (52 needed:
    a failure below it), and a training process's own only above 100 (a warning between)."""
    def workers(soft: int):
        return tuple(dataclasses.replace(m, facts=dataclasses.replace(m.facts, hostname=f"gpu{r // 8}",
                                                                    launch=launch(r, 4, "torchrun", nproc=8)))
                     for r, m in enumerate(node(r, dataclasses.replace(LOW, nofile=soft)) for r in range(32)))
    (found,) = store(workers(50))
    assert found.severity == "fail" and "32 ranks on 4 node(s)" in found.summary
    (found,) = store(workers(90))
    assert (found.severity, found.kind) == ("warn", "nofile") and "under 54 files of its own" in found.summary


def test_an_accept_queue_capped_below_the_connections_at_start_up_warns():
    capped = dataclasses.replace(HIGH, somaxconn=128)
    found = store((node(0, capped, nproc=64), node(1, HIGH, nproc=64)))
    assert said(found) == [("host.limits", "pass", "", (0,)), ("host.limits", "warn", "backlog", (0,))]
    assert "somaxconn=130" in found[1].fix


def rdma(version: str = "2.21.5") -> RdmaFacts:
    port = RdmaPort("mlx5_0", 1, "ACTIVE", "LinkUp", "InfiniBand", "400 Gb/sec", 400.0, None, None, 0, ())
    return RdmaFacts((port,), (), (), False, "", "6.1", LibNccl("system", "/usr/lib/libnccl.so.2", version, ""), 0.0)


def test_locked_memory_fails_where_nccl_uses_rdma_and_warns_where_merely_finite():
    tiny, finite = dataclasses.replace(HIGH, memlock=64 << 10), dataclasses.replace(HIGH, memlock=1 << 30)
    members = (node(0, HIGH), node(1, tiny), node(2, finite), node(3, tiny))
    members = tuple(dataclasses.replace(m, facts=dataclasses.replace(m.facts, rdma=rdma())) if m.rank < 3 else m
                    for m in members)
    found = store(members)[1:]
    assert said(found) == [("host.limits", "fail", "memlock", (1,)), ("host.limits", "warn", "memlock", (2,))]
    assert "ulimit -l unlimited" in found[0].fix


def test_an_unlimited_stack_fails_on_gpu_nodes_with_an_old_nccl_and_warns_where_its_version_is_unknown():
    unlimited = dataclasses.replace(HIGH, stack=-1)
    old, new, unknown = (dataclasses.replace(node(r, unlimited, gpus=8).facts, rdma=rdma(v))
                         for r, v in ((0, "2.21.5"), (1, "2.28.3"), (2, "")))
    members = tuple(dataclasses.replace(node(r, unlimited), facts=f) for r, f in enumerate((old, new, unknown)))
    found = store(members)[1:]
    assert said(found) == [("host.limits", "fail", "stack", (0,)), ("host.limits", "warn", "stack", (2,))]


def test_every_node_is_held_to_a_socket_per_peer_a_full_mesh_opens():
    """1,200 ranks (150 nodes of 8) under the common soft limit of 1,024: gloo's full mesh and
    NCCL's all-to-all over sockets need a descriptor per peer in every process."""
    default = dataclasses.replace(HIGH, nofile=1024)
    members = tuple(node(r, default if r == 3 else HIGH, nproc=8) for r in range(150))
    found = [f for f in limit_findings(members) if f.kind == "nofile_peers"]
    assert said(found) == [("host.limits", "warn", "nofile_peers", (3,))]
    assert "1199 other ranks" in found[0].summary and "about 1263" in found[0].evidence[0]
    nsocks = node(3, default, nproc=8, env={"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "2"})
    small = tuple(nsocks if r == 3 else node(r, HIGH, nproc=8) for r in range(16))
    found = [f for f in limit_findings(small) if f.kind == "nofile_peers"]
    assert said(found) == [("host.limits", "warn", "nofile_peers", (3,))]   # 127 peers x 8 sockets
