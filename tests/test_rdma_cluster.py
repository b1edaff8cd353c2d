"""The RDMA checks on real namespaces: netcheck nodes each reading its own fixture tree of a GPU
node (tests/sysfs_fixtures.py, through the NETCHECK_TEST_RDMA_ROOT test hook), faults on some
nodes, asserted on exit codes, JSON findings (check, kind, nodes) and the recommendation."""

from __future__ import annotations

import pytest

from cluster import NodeSpec
from nodes import PORT, explain, finish_all, scaled, start
from sysfs_fixtures import build, fake_libnccl

pytestmark = pytest.mark.root_required


def ranked(i: int, n: int) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(scaled(40))]


def run_on_fixtures(cluster, tmp_path, layout: str, faults: dict[int, tuple[str, ...]],
                    envs: dict[int, dict[str, str]] | None = None):
    roots = [build(tmp_path / f"fx{i}", layout, i, faults.get(i, ())) for i in range(3)]
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        return finish_all([start(c, i, ranked(i, 3), tmp_path,
                                 env={"NETCHECK_TEST_RDMA_ROOT": str(roots[i]), **(envs or {}).get(i, {})})
                           for i in range(3)], 60)


def test_an_rdma_node_under_a_launchers_locked_memory_limit_is_named(cluster, tmp_path):
    """node1 of three HGX nodes under a locked-memory limit of 64 KiB, as under an mpirun or a
    container whose limit differs from the login shell's (nccl-tests#206): NCCL's ibv_reg_mr
    fails there; the host names that node, and no other (the others have it unlimited)."""
    runs = run_on_fixtures(cluster, tmp_path, "hgx", {1: ("memlock_64k",)})
    (found,) = [f for f in runs[0].findings("host.limits") if f["kind"] == "memlock"]
    assert (found["severity"], found["nodes"]) == ("fail", [1]) and "memlock 65536" in found["evidence"][0], found
    assert "ulimit -l unlimited" in found["fix"], found


def kinds(run, check: str) -> list[tuple[str, str, list[int]]]:
    return [(f["severity"], f["kind"], f["nodes"]) for f in run.findings(check)]


def test_hgx_nodes_with_a_degraded_rail_acs_and_no_peermem(cluster, tmp_path):
    runs = run_on_fixtures(cluster, tmp_path, "hgx", {1: ("slow_port", "acs"), 2: ("no_peermem",)})
    host = runs[0]
    assert host.rc == 1, explain(runs)
    assert kinds(host, "rdma.port") == [("warn", "slower_port", [1])]
    assert kinds(host, "rdma.pcie") == [("warn", "acs", [1])]
    assert kinds(host, "rdma.gpudirect") == [("warn", "", [2])]
    assert kinds(host, "rdma.libnccl") == []            # no libnccl on a CPU torch: nothing to say
    assert host.report["recommend"]["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert "NCCL_IB_GID_INDEX" not in host.report["recommend"]
    assert "export NCCL_IB_HCA==" + ",".join(f"mlx5_{i}:1" for i in range(8)) in host.stdout.splitlines()


def test_hgx_nodes_with_a_port_down_a_far_nic_a_roce_node_and_another_libnccl(cluster, tmp_path):
    other = fake_libnccl(tmp_path / "lib", "2.19.3")
    runs = run_on_fixtures(cluster, tmp_path, "hgx", {1: ("port_down", "far_nic"), 2: ("ethernet",)},
                           {2: {"LD_LIBRARY_PATH": str(other)}})
    host = runs[0]
    assert host.rc == 4, explain(runs)   # node1's and node2's faults: the host is healthy
    assert ("fail", "", [1]) in kinds(host, "nic.ib")      # mlx5_3 down: nic.ib's, not said twice
    assert kinds(host, "rdma.port") == [("fail", "link_layer", [2])]
    assert kinds(host, "rdma.pcie") == [("warn", "far_nic", [1])]
    assert kinds(host, "rdma.libnccl") == [("warn", "not_torchs", [2])]


def test_roce_nodes_with_no_ipv4_gid_and_a_smaller_mtu(cluster, tmp_path):
    runs = run_on_fixtures(cluster, tmp_path, "roce", {1: ("no_ipv4",), 2: ("roce_mtu",)})
    host = runs[0]
    assert host.rc == 4, explain(runs)   # node1's fault: the host is healthy
    assert kinds(host, "rdma.gid") == [("fail", "unreachable_gid", [1])]
    assert kinds(host, "rdma.mtu") == [("warn", "", [2])]
    assert kinds(host, "rdma.port") == [("pass", "", [0, 1, 2])]
    assert host.report["recommend"]["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert {h: v.get("NCCL_IB_GID_INDEX") for h, v in host.report["recommend_per_node"].items()
            if "NCCL_IB_GID_INDEX" in v} == {"node0": "3", "node2": "3"}


def test_nodes_without_rdma_say_so_in_one_line(cluster, tmp_path):
    runs = run_on_fixtures(cluster, tmp_path, "cpu", {})
    assert [r.rc for r in runs] == [0, 0, 0], explain(runs)
    assert [f["check"] for f in runs[0].report["findings"] if f["check"].startswith("rdma.")] == ["rdma.port"]
    assert kinds(runs[0], "rdma.port") == [("pass", "", [0, 1, 2])]
    assert "NCCL_IB_HCA" not in runs[0].report["recommend"]
