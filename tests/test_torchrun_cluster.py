"""torchrun mode on real namespaces: `torchrun ... -m netcheck` with torchrun's own c10d
rendezvous; every worker process takes part, rank 0 prints the cluster's report."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from cluster import NodeSpec
from faults import Agent, lost_in, wait_until
from nodes import CLUSTER_TIMEOUT, DIAGNOSABLE, HEALTHY_WARNINGS, SKIP_BANDWIDTH, read_report, scaled

pytestmark = pytest.mark.root_required

RDZV_PORT = 29400


def torchrun(tmp_path, *netcheck_args: str, nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node0:{RDZV_PORT}", "--rdzv-id", "job7",
            "--rdzv-conf", "join_timeout=15,read_timeout=15",
            "-m", "netcheck", "--json", str(tmp_path / "rank{rank}.json"), *netcheck_args]


BOTH_TIMEOUT = scaled(90)


def run_both(c, argv, timeout=BOTH_TIMEOUT):
    procs = [c.popen(i, argv, env=DIAGNOSABLE) for i in range(2)]
    return [p.communicate(timeout=timeout) + (p.returncode,) for p in procs]


@pytest.mark.compat
def test_two_nodes_two_workers_each_give_one_cluster_report(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec()]) as c:
        results = run_both(c, torchrun(tmp_path, "--timeout", str(scaled(60)), "--bw-budget", "4"), timeout=scaled(120))
    report = read_report(tmp_path / "rank0.json")
    # 4 gloo workers, 4 netcheck ranks and 2 agents share this machine's 2 cores: one node's
    # intra-node sweep running at a third of the other's (bw.straggler) is the truth here.
    not_passed = {f["check"] for f in report["findings"] if f["severity"] != "pass"}
    assert not_passed <= {"bw.straggler"} | HEALTHY_WARNINGS, [ln for out, _, _ in results for ln in out.splitlines()
                                             if ln.startswith(("WARN", "FAIL"))]
    assert [rc for *_, rc in results] == [1 if not_passed else 0] * 2, results
    assert report["role"] == "host"
    assert [(n["rank"], n["hostname"]) for n in report["nodes"]] == [
        (0, "node0"), (1, "node0"), (2, "node1"), (3, "node1")]
    (topology,) = [f for f in report["findings"] if f["check"] == "launch.topology"]
    assert (topology["severity"], topology["nodes"]) == ("pass", [0, 1, 2, 3]), topology
    assert "host (rank 0) - verdict " in results[0][0] and results[1][0] == "", ("only rank 0 prints", results)
    # The bandwidth phase runs per host (from LOCAL_RANK 0): 2 nodes x 2 workers.
    bw = report["bandwidth"]
    assert (bw["nnodes"], bw["nproc_per_node"], bw["sweeps"][0]["ranks"]) == (2, 2, 4), bw
    # Findings name processes (the report's nodes), not the phase's node numbers.
    (stage,) = [f for f in report["findings"] if f["check"] == "bw.stage"]
    assert stage["nodes"] == [0, 1, 2, 3], stage


def test_worker_store_port_blocked_for_one_node_fails_clearly(cluster, tmp_path):
    """torchrun's own rendezvous port is open, the workers' MASTER_PORT is not: node1's
    workers say `filtered` in seconds, rank 0 names ranks 2 and 3 missing; nobody hangs. Four
    workers import torch at once: rank 1 must sign in inside rank 0's join share."""
    with cluster([NodeSpec(), NodeSpec()]) as c:
        c.allow_only_inbound(0, [RDZV_PORT])
        results = run_both(c, torchrun(tmp_path, "--timeout", str(CLUSTER_TIMEOUT), *SKIP_BANDWIDTH),
                           timeout=scaled(90))
    assert [rc for *_, rc in results] != [0, 0]
    node1_out = results[1][0]
    assert "FAIL  rdzv.reach" in node1_out and "filtered" in node1_out, results[1]
    report = read_report(tmp_path / "rank0.json")
    missing = [f for f in report["findings"] if f["check"] == "rdzv.join" and f["severity"] == "fail"]
    assert sorted(r for f in missing for r in f["nodes"]) == [2, 3], report["findings"]


def test_a_mesh_fault_under_torchrun_reads_per_node(cluster, tmp_path):
    """2 nodes x 2 workers, node1 open only on torchrun's rendezvous port (issue 23): the report
    speaks of nodes, each host's ranks listed once, not a line per rank (pair); and a node with
    no proven path is mesh.connect's to name, not a speed warning."""
    with cluster([NodeSpec(), NodeSpec()]) as c:
        c.allow_only_inbound(1, [RDZV_PORT])
        results = run_both(c, torchrun(tmp_path, "--timeout", str(scaled(30)), *SKIP_BANDWIDTH), timeout=scaled(60))
    host, text = read_report(tmp_path / "rank0.json"), host_text(results[0][0])
    by_check = {f["check"]: f for f in host["findings"]}
    mesh = by_check["mesh.connect"]
    # node1's firewall: node0's connects to it go unanswered, its own to node0 connect (issue 65)
    assert (mesh["severity"], mesh["nodes"], mesh["cause_nodes"]) == ("fail", [0, 1, 2, 3], [2, 3]), mesh
    assert mesh["evidence"] == ["node0 -> node1 (ranks 0, 1 -> 2, 3): eth0 198.18.0.11: filtered (no answer in 2 s)"]
    # gloo dials node1 (198.18.0.11, the larger) -> node0, which connects: NCCL's alone (issue 64).
    assert mesh["impact"]["on"] == ["nccl_socket", "nccl_rdma"], mesh["impact"]
    assert "here node1 (198.18.0.11) -> node0 (198.18.0.10), which connects" in mesh["impact"]["why"]
    assert by_check["nic.gloo_default"]["severity"] == "pass", by_check["nic.gloo_default"]
    nccl = by_check["nic.nccl_default"]
    assert (nccl["severity"], nccl["nodes"]) == ("warn", [2, 3]), nccl   # no GPU: a job here runs gloo
    assert len(nccl["evidence"]) == 1 and nccl["evidence"][0].startswith("node1 (ranks 2, 3): NCCL would use eth0")
    assert by_check["nic.speed"]["severity"] == "pass", by_check["nic.speed"]
    assert host["faulty_nodes"] == ["node1"] and host["healthy_nodes"] == ["node0"], host["faulty_nodes"]
    assert host["fault"]["party"] == "other_nodes" and host["fault"]["nodes"] == [2, 3], host["fault"]
    assert "node1, node1" not in text and "[node1: ranks 2, 3]" in text, text
    assert text.count("eth0 198.18.0.11: filtered") == 1 and "faulty: node1\n" in text, text


def host_text(out: str) -> str:
    """Rank 0's report among node0's output (its sibling prints too when it fails)."""
    reports = re.split(r"^(?=netcheck \S+ - run )", out, flags=re.M)
    return next(r for r in reports if " - host (rank 0) - " in r.split("\n", 1)[0])


def worker_pid(tmp_path, rank: int) -> int | None:
    """This test's netcheck worker of that global RANK: torchrun starts it, not the test."""
    for proc in Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and str(tmp_path).encode() in (proc / "cmdline").read_bytes()
                    and f"RANK={rank}".encode() in (proc / "environ").read_bytes().split(b"\0")):
                return int(proc.name)
        except OSError:
            continue
    return None


def test_a_failing_worker_waits_for_the_hosts_report_before_it_exits(cluster, tmp_path):
    """torchrun stops every worker of a node as soon as one exits non-zero. Rank 1, on the
    host's node, fails on its own (its NCCL_SOCKET_IFNAME names no interface); rank 3 is held
    (SIGSTOP) once it has posted its environment, so the host waits out its goodbye. Rank 1
    must not exit until the host has written its report: the agent would SIGTERM rank 0
    mid-goodbye, and the cluster's report would be a stopped run's. Four workers import torch
    at once: the doubled --timeout gives rank 3 room to sign in inside rank 0's join share."""
    timeout = 2 * CLUSTER_TIMEOUT
    wrapper = [sys.executable, "-m", "torch.distributed.run", *torchrun(tmp_path)[3:]]
    at = wrapper.index("-m", 3)
    wrapper[at:at + 2] = ["--no-python", "sh", "-c",
                          '[ "$RANK" = 1 ] && export NCCL_SOCKET_IFNAME=nope0; exec "$0" "$@"', sys.executable,
                          "-m", "netcheck"]
    wrapper += ["--timeout", str(timeout), *SKIP_BANDWIDTH]
    with cluster([NodeSpec(), NodeSpec()]) as c:
        procs = [c.popen(i, wrapper, env=DIAGNOSABLE) for i in range(2)]
        host = wait_until(lambda: worker_pid(tmp_path, 0), timeout, "rank 0 started")
        environ = dict(v.split("=", 1) for v in Path(f"/proc/{host}/environ").read_text().split("\0") if "=" in v)
        agent = Agent.start(c, 0, "watch", f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}",
                            run_id=environ["TORCHELASTIC_RUN_ID"])
        agent.wait_for(r"^env 3$", timeout)
        held = worker_pid(tmp_path, 3)
        os.kill(held, signal.SIGSTOP)
        try:
            out, err = procs[0].communicate(timeout=timeout + scaled(30))
        finally:
            os.kill(held, signal.SIGKILL)  # its own session: the agent's group does not hold it
        procs[1].communicate(timeout=scaled(60))  # its agent stops the other worker and ends
    report = read_report(tmp_path / "rank0.json")
    assert "run.stopped" not in {f["check"] for f in report["findings"]}, report["findings"]
    assert lost_in(report) == {"goodbye": {3}}, report["findings"]
    assert "host (rank 0) - verdict FAIL" in out, (out, err)
    assert read_report(tmp_path / "rank1.json")["verdict"] == "fail"
