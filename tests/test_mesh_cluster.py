"""Phases mesh and nic on real network namespaces: decoy interfaces, firewalls, MTU, settings.

The recommendation is proven the only way that counts: a real gloo all_reduce across the
nodes, run with the exported values.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cluster import Cluster, NodeSpec
from job import Launch, classify, run_job
from nodes import PORT, explain, finish_all, scaled, start
from sharedrun import watched

pytestmark = pytest.mark.root_required

ALLREDUCE = str(Path(__file__).with_name("gloo_allreduce.py"))


RUN_TIMEOUT = scaled(30)


def run_cluster(c, tmp_path, envs=None, timeout=RUN_TIMEOUT, bandwidth=False, outputs=False):
    """Every node's run; with `outputs`, each writes its exclude list and Prometheus file too
    (tmp_path/exclude{i}.txt, tmp_path/node{i}.prom)."""
    n = len(c.nodes)
    envs = envs or [None] * n

    def args(i: int) -> list[str]:
        files = ["--exclude-file", str(tmp_path / f"exclude{i}.txt"), "--prom", str(tmp_path / f"node{i}.prom")]
        return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i),
                "--timeout", str(timeout), *(["--bw-budget", "3"] if bandwidth else []), *(files if outputs else [])]

    return finish_all([start(c, i, args(i), tmp_path, env=envs[i], bandwidth=bandwidth) for i in range(n)],
                      timeout + 30)


def at_fault(runs) -> list[tuple[int, str, list[str]]]:
    """Each node's exit code, whose fault its report says, and the nodes at fault it names."""
    return [(r.rc, r.report["fault"]["party"], r.report["faulty_nodes"]) for r in runs]


def gloo_allreduce(c, env_per_node):
    """Run a gloo all_reduce on every node with the given environment; their outputs."""
    n = len(c.nodes)
    procs = [c.popen(i, [sys.executable, ALLREDUCE, "node0:29600", str(i), str(n)], env=env_per_node[i])
             for i in range(n)]
    return [p.communicate(timeout=scaled(60)) + (p.returncode,) for p in procs]


def recommended_env(report: dict, hostname: str) -> dict:
    return {**report["recommend"], **report["recommend_per_node"].get(hostname, {})}


def test_decoy_ib0_on_one_node_warns_nccl_default_on_gpuless_nodes_and_recommends_eth0(cluster, tmp_path):
    """NCCL would pick ib0 on node1 and reach no peer there; the namespace nodes have no GPU,
    so a job there runs gloo and the finding warns, for NCCL only, saying why (issue 64)."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.add_decoy(1, "ib0", "198.19.1.1/24")
        runs = run_cluster(c, tmp_path)
        job = classify(run_job(c, Launch(3), tmp_path), None)   # the gloo job the warning lets run
    assert job.fate == "ok", job.describe()
    host = runs[0]
    assert host.rc == 1, explain(runs)
    (nccl,) = host.findings("nic.nccl_default", "warn")
    assert nccl["nodes"] == [1] and "ib0" in nccl["evidence"][0]
    assert nccl["impact"]["on"] == ["nccl_socket", "nccl_rdma"] and "runs gloo" in nccl["impact"]["why"]
    assert host.report["recommend"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert host.findings("mesh.connect", "pass")


def test_docker0_everywhere_is_no_false_alarm_and_carries_nothing(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        for i in range(3):
            c.add_decoy(i, "docker0", "198.19.255.1/24")
        runs = run_cluster(c, tmp_path)
    host = runs[0]
    assert [r.rc for r in runs] == [0, 0, 0], explain(runs)
    assert host.findings("nic.nccl_default", "pass")
    (mesh,) = host.findings("mesh.connect", "pass")
    docker = [e for e in mesh["evidence"] if "docker0" in e]
    assert len(docker) == 3 and all("carries nothing" in e and "local" in e for e in docker)
    assert "docker0" not in str(host.report["recommend"])


def test_different_interface_names_give_working_per_node_values(cluster, tmp_path):
    names = ("eth0", "ens5", "enp3s0f1")
    with cluster([NodeSpec(ifname=n) for n in names]) as c:
        runs = run_cluster(c, tmp_path)
        host = runs[0].report
        assert runs[0].rc == 0, explain(runs)
        assert host["recommend"]["NCCL_SOCKET_IFNAME"] == "=eth0,ens5,enp3s0f1"
        gloo = [host["recommend_per_node"][f"node{i}"]["GLOO_SOCKET_IFNAME"] for i in range(3)]
        assert gloo == list(names)
        results = gloo_allreduce(c, [recommended_env(host, f"node{i}") for i in range(3)])
    assert [rc for _, _, rc in results] == [0, 0, 0], results
    assert all(out.strip() == "ok" for out, _, _ in results)


def test_hostname_on_loopback_fails_gloo_default_and_the_fix_works(cluster, tmp_path):
    """node1 alone is at fault (issue 65): the sweep's gloo stage, which fails for it, names the
    nodes whose workers could not connect, node0 and node2; they are healthy and exit 4, and
    every node's exclude list and Prometheus file name node1 alone."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        hosts = c.hosts_lines(1)
        c.write_hosts(1, ["127.0.1.1 node1.cluster node1"] + [h for h in hosts if "node1" not in h])
        runs = run_cluster(c, tmp_path, bandwidth=True, outputs=True)
        host = runs[0].report
        assert at_fault(runs) == [(4, "other_nodes", ["node1"]), (2, "this_node", ["node1"]),
                                  (4, "other_nodes", ["node1"])], explain(runs)
        assert [(tmp_path / f"exclude{i}.txt").read_text() for i in range(3)] == ["node1\n"] * 3
        prom = (tmp_path / "node0.prom").read_text()
        assert {line for line in prom.splitlines() if line.startswith("netcheck_node_faulty")} == {
            'netcheck_node_faulty{node="node0",node_rank="0"} 0', 'netcheck_node_faulty{node="node1",node_rank="1"} 1',
            'netcheck_node_faulty{node="node2",node_rank="2"} 0'}, prom
        assert 'netcheck_fault{party="other_nodes"} 1' in prom, prom
        assert 'netcheck_fault{party="this_node"} 1' in (tmp_path / "node1.prom").read_text()
        (gloo,) = runs[0].findings("nic.gloo_default", "fail")
        assert gloo["nodes"] == [1] and "127.0.1.1" in gloo["evidence"][0]
        for stopped in runs[0].findings("bw.stage", "fail"):   # where the sweep stopped on it: its symptom
            assert 1 not in stopped["nodes"] and stopped["cause_nodes"] == [1], stopped
        (tp,) = runs[0].findings("nic.tp_default", "warn")  # TensorPipe binds the same way
        assert tp["nodes"] == [1] and "127.0.1.1" in tp["evidence"][0]
        env = recommended_env(host, "node1")
        assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "eth0"
        results = gloo_allreduce(c, [recommended_env(host, f"node{i}") for i in range(3)])
    assert [rc for _, _, rc in results] == [0, 0, 0], results


@pytest.fixture(scope="module")
def firewalled(tmp_path_factory):
    """Three nodes, node1 open only on the rendezvous port: its own connects out all work, so
    only the host (which hears every node's connects) can see that nobody reaches it. One run,
    read by the two tests below."""
    with Cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c, watched():
        c.allow_only_inbound(1, [PORT])
        return run_cluster(c, tmp_path_factory.mktemp("firewalled"))


def test_only_master_port_open_passes_rendezvous_fails_mesh(firewalled):
    runs = firewalled
    host = runs[0]
    assert host.rc == 4 and host.findings("rdzv.join", "pass"), explain(runs)
    (mesh,) = host.findings("mesh.connect", "fail")
    assert mesh["nodes"] == [1], "both peers fail to reach node1: node1 alone is named"
    broken = sorted(e.split(":")[0] for e in mesh["evidence"])
    assert broken == ["node0 -> node1", "node2 -> node1"]
    assert all("filtered" in e for e in mesh["evidence"])
    assert host.report["recommend"] == {} and host.report["verdict"] == "fail"
    assert "# no settings to paste: nothing proven to reach node1 from every peer: see mesh.connect" in host.stdout


def test_a_joiner_the_host_names_faulty_never_exits_0(firewalled):
    """node1 cannot see its own fault: the host's verdict, told at goodbye, is what it exits on.
    The healthy nodes exit 4 (another node at fault), naming it, and say so last."""
    host, faulty, healthy = firewalled
    assert at_fault(firewalled) == [(4, "other_nodes", ["node1"]), (2, "this_node", ["node1"]),
                                    (4, "other_nodes", ["node1"])], explain(firewalled)
    (told,) = faulty.findings("mesh.connect", "fail")
    assert told["nodes"] == [1], told
    assert faulty.report["cluster"]["verdict"] == "fail"
    assert faulty.stdout.rstrip().splitlines()[-1].startswith("fault: this node (node1): mesh.connect: ")
    assert healthy.report["cluster"]["findings"] == [], explain(firewalled)
    assert "cluster: FAIL - " in healthy.stdout and "node1" in healthy.report["cluster"]["headline"]
    assert healthy.stdout.rstrip().splitlines()[-1] == \
        "fault: another node: node1 (node rank 1); this node is healthy", healthy.stdout
    assert host.report.get("cluster") is None


@pytest.mark.parametrize("src, dst", [(1, 2), (2, 1)], ids=["a-way-gloo-never-dials", "a-way-gloo-dials"])
def test_a_one_way_firewall_stops_nccl_and_stops_gloo_only_where_gloo_dials_it(src, dst, cluster, tmp_path):
    """Issue 64: node dst drops node src's connects on every port. gloo dials each pair once, from
    the larger address (gloo's Device::isInitiator): node2 (198.18.0.12) dials node1. node2
    dropping node1's connects stops NCCL alone, said with why, and a real gloo all_reduce runs;
    node1 dropping node2's stops gloo too (the sweep runs there: its gloo stage stops on it).
    Either way the firewall's node alone is at fault (issue 65): node src reaches it the other
    way, and is healthy."""
    timeout = scaled(30)
    sweep = ["--bw-budget", "3"] if src == 2 else ["--skip", "bandwidth"]
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.drop_inbound(dst, source=src)
        runs = finish_all([start(c, i, ["--rdzv", f"node0:{PORT}", "--nnodes", "3", "--node-rank", str(i),
                                        "--timeout", str(timeout), *sweep], tmp_path, bandwidth=True)
                           for i in range(3)], timeout + 30)
        host = runs[0]
        expected = {0: (4, "other_nodes"), src: (4, "other_nodes"), dst: (2, "this_node")}
        assert at_fault(runs) == [(*expected[i], [f"node{dst}"]) for i in range(3)], explain(runs)
        (mesh,) = host.findings("mesh.connect", "fail")
        assert [e.split(":")[0] for e in mesh["evidence"]] == [f"node{src} -> node{dst}"], mesh
        assert (sorted(mesh["nodes"]), mesh["cause_nodes"]) == ([1, 2], [dst]), mesh
        (gloo,) = host.findings("nic.gloo_default")
        if src == 2:
            for stopped in host.findings("bw.stage", "fail"):
                assert stopped["cause_nodes"] == [dst], stopped
            assert "gloo" in mesh["impact"]["on"] and not mesh["impact"]["why"], mesh["impact"]
            assert (gloo["severity"], gloo["nodes"]) == ("fail", [1]), gloo
            job = classify(run_job(c, Launch(3), tmp_path), None)   # gloo's dial, dropped: as said
            assert job.fate in ("failed", "hung"), job.describe()
            return
        assert mesh["impact"]["on"] == ["nccl_socket", "nccl_rdma"], mesh["impact"]
        assert "here node2 (198.18.0.12) -> node1 (198.18.0.11), which connects" in mesh["impact"]["why"]
        assert "NCCL only: 1 of 6 node-to-node directions" in host.stdout and "why NCCL only: gloo dials" in host.stdout
        assert gloo["severity"] == "pass" and "a direction gloo never dials" in gloo["evidence"][0], gloo
        results = gloo_allreduce(c, [None] * 3)
    assert [rc for _, _, rc in results] == [0, 0, 0], results


def test_mtu_mismatch_is_named(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(mtu=9000), NodeSpec()]) as c:
        runs = run_cluster(c, tmp_path)
    assert runs[0].rc == 1, explain(runs)
    (mtu,) = runs[0].findings("nic.mtu", "warn")
    assert mtu["nodes"] == [1] and any("mtu 9000" in e for e in mtu["evidence"])


def test_broken_interface_settings_are_named_per_node(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(ifname="ens5"), NodeSpec()]) as c:
        envs = [{"NCCL_SOCKET_IFNAME": "eth0"}, {"NCCL_SOCKET_IFNAME": "eth0"},
                {"GLOO_SOCKET_IFNAME": "198.18.0.12"}]
        runs = run_cluster(c, tmp_path, envs)
    assert at_fault(runs) == [(4, "other_nodes", ["node1", "node2"]), (2, "this_node", ["node1", "node2"]),
                              (2, "this_node", ["node1", "node2"])], explain(runs)
    (route,) = runs[0].findings("nic.route", "fail")
    assert route["nodes"] == [1, 2]
    assert any(e.startswith("node1: NCCL_SOCKET_IFNAME=eth0") for e in route["evidence"])
    assert any(e.startswith("node2: GLOO_SOCKET_IFNAME=198.18.0.12") and "IP address" in e
               for e in route["evidence"])
    assert runs[1].findings("nic.route", "fail"), "the joiner sees its own broken setting too"


def test_second_interface_on_the_same_subnet_is_flagged(cluster, tmp_path):
    """nccl#913: a second NIC on one subnet makes the kernel answer from either."""
    with cluster([NodeSpec(), NodeSpec()]) as c:
        c.add_decoy(1, "eth1", "198.18.0.111/24")
        runs = run_cluster(c, tmp_path)
    (route,) = runs[0].findings("nic.route")
    assert route["severity"] == "warn" and route["nodes"] == [1], route
    assert route["evidence"] == ["node1: eth0, eth1 on 198.18.0.0/24"]


def test_only_mesh_runs_the_mesh_on_the_rendezvous_it_needs(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec()]) as c:
        def args(i: int) -> list[str]:
            return ["--rdzv", f"node0:{PORT}", "--nnodes", "2", "--node-rank", str(i), "--timeout", str(scaled(30)),
                    "--only", "mesh"]

        runs = finish_all([start(c, i, args(i), tmp_path) for i in range(2)], 60)
    assert [r.rc for r in runs] == [0, 0], explain(runs)
    host = runs[0].report
    assert set(host["timings"]) == {"local", "reach", "rendezvous", "mesh", "goodbye"}, host["timings"]
    assert runs[0].findings("mesh.connect", "pass") and not runs[0].findings("env.mismatch")
