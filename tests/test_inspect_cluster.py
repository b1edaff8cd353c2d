"""`netcheck inspect` on real torchrun jobs in network namespaces: a node that never started, a
node whose agent hangs (SIGSTOP), and a healthy job that completes under inspect's polling.

Each waits on events (the rendezvous state in the store, a finding appearing), bounded by
scaled() limits; how fast the verdicts come is measured in benchmarks/inspect_hung.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from cluster import NodeSpec
from nodes import parse_report, scaled

pytestmark = pytest.mark.root_required

PORT = 29400
SLEEPER = "import time\ntime.sleep(300)\n"
QUICK = """
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def torchrun(script, nnodes: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node0:{PORT}", "--rdzv-id", "job7",
            "--rdzv-conf", "join_timeout=300", "--max-restarts", "0", str(script)]


def start_job(c, node: int, script, tmp_path):
    """torchrun on a node, its output to a file: an unread pipe fills, and the agent then
    blocks on logging, heartbeats included (the store's host logs every client it serves)."""
    log = open(tmp_path / f"torchrun{node}.log", "w")
    try:
        return c.popen(node, torchrun(script), stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def inspect(c, node: int, *args: str) -> dict:
    done = c.run(node, [sys.executable, "-m", "netcheck", "inspect", "--rdzv", f"node0:{PORT}", "--json", "-",
                        *args], timeout=scaled(60))
    assert "Traceback" not in done.stderr, done.stderr
    return parse_report(done.stdout)


def until(c, node: int, found, *args: str, limit: float = scaled(60)) -> tuple[dict, float]:
    """Inspect again and again until `found(report)` holds; the report and when it did."""
    start, report = time.monotonic(), None
    while time.monotonic() - start < limit:
        report = inspect(c, node, *args)
        if found(report):
            return report, time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"not found in {limit} s: {json.dumps(report and report['findings'], indent=1)}")


def kinds(report: dict, check: str) -> list[str]:
    return [f["kind"] for f in report["findings"] if f["check"] == check]


def test_a_node_that_never_started_is_counted_missing_and_a_hung_agent_is_named_dead(cluster, tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        node0 = start_job(c, 0, script, tmp_path)
        waiting, _ = until(c, 2, lambda r: "round_incomplete" in kinds(r, "job.rdzv"), "--nnodes", "2")
        (rdzv,) = [f for f in waiting["findings"] if f["check"] == "job.rdzv"]
        assert "round 0 is not complete: 1 of 2 node(s) joined, 1 missing" in rdzv["summary"], rdzv
        assert rdzv["evidence"][0].startswith("rank 0: node0.cluster (pid "), rdzv
        assert waiting["verdict"] == "fail" and waiting["job"]["run_ids"] == ["job7"]
        other = inspect(c, 2, "--rdzv-id", "other")
        assert kinds(other, "job.rdzv") == ["no_such_run"]

        node1 = start_job(c, 1, script, tmp_path)
        until(c, 2, lambda r: any(f["check"] == "job.rdzv" and f["severity"] == "pass" for f in r["findings"]))
        c.kill(node1, signal.SIGSTOP)   # node1's agent and worker hang: alive, silent
        # node1 named dead once its agent's last heartbeat is 15 s old. (torch 2.13's host agent
        # itself sometimes lets its own heartbeat lag past 15 s here: reported as it is.)
        dead, _ = until(c, 2, lambda r: any(f["kind"] == "dead" and "node1.cluster" in f["summary"]
                                            for f in r["findings"]))
        (beat,) = [f for f in dead["findings"] if f["check"] == "job.heartbeat"]
        assert beat["severity"] == "fail" and "node1.cluster (pid " in beat["summary"], beat
        c.kill(node0)
        c.kill(node1)


def test_a_healthy_job_completes_under_inspects_polling_and_its_store_is_left_alone(cluster, tmp_path):
    script = tmp_path / "quick.py"
    script.write_text(QUICK)
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        jobs = [start_job(c, i, script, tmp_path) for i in range(2)]
        seen = 0
        while any(j.poll() is None for j in jobs) and seen < 200:
            inspect(c, 2)
            seen += 1
        codes = [j.wait(timeout=scaled(120)) for j in jobs]
    assert codes == [0, 0], [(tmp_path / f"torchrun{i}.log").read_text()[-2000:] for i in range(2)]
    assert seen >= 1
