"""`netcheck inspect` on real torchrun jobs in network namespaces: a node that never started, a
node whose agent and worker stop mid-run (SIGSTOP) and are evicted, and a healthy job that
completes under inspect's polling.

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
# node1's worker registers torch's debug server (the worker side only: rank 0's would start the
# frontend too, which wants Jinja2 and aiohttp): its URL in the store names its host.
DEBUG_SLEEPER = """
import os, time
if os.environ["RANK"] != "0":
    from torch.distributed.debug import start_debug_server
    start_debug_server()
    print("debug server registered", flush=True)
time.sleep(300)
"""
QUICK = """
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""

PROBED = """
import json
from netcheck.cluster.jobstore import read_round
from netcheck.core.deadline import Deadline
r = read_round("node0", {port}, "job7", 0, frozenset({{0}}), None, Deadline(20))
print(json.dumps([r.group_ranks, r.listed, [m.hosts for m in r.members]]))
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
                        "--timeout", str(scaled(30)), *args], timeout=scaled(60))
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


def wait_for_line(log, line: str, limit: float = scaled(60)) -> None:
    start = time.monotonic()
    while line not in log.read_text():
        assert time.monotonic() - start < limit, f"no {line!r} in {limit} s:\n{log.read_text()[-2000:]}"
        time.sleep(0.2)


def kinds(report: dict, check: str) -> list[str]:
    return [f["kind"] for f in report["findings"] if f["check"] == check]


def test_a_node_that_never_started_is_counted_missing_and_another_run_id_named(cluster, tmp_path):
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

        c.kill(node0)


def test_a_stopped_torchrun_node_is_named_evicted_within_20_s_with_its_workers_and_host(cluster, tmp_path):
    """node1's agent and worker SIGSTOPped: named evicted once its heartbeat passes torchrun's limit
    (every agent drops it at its next read of the state), then from the round's own keys once
    the survivor has written the state without it; each look read-only."""
    script = tmp_path / "debug_sleeper.py"
    script.write_text(DEBUG_SLEEPER)
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        jobs = [start_job(c, i, script, tmp_path) for i in range(2)]
        wait_for_line(tmp_path / "torchrun1.log", "debug server registered")
        ready, _ = until(c, 2, lambda r: any(f["check"] == "job.rdzv" and f["severity"] == "pass"
                                             for f in r["findings"]))
        keys = set(ready["job"]["keys"])
        c.kill(jobs[1], signal.SIGSTOP)
        stopped, beats = time.monotonic(), []
        named, _ = until(c, 2, lambda r: beats.append(kinds(r, "job.heartbeat")) or "evicted" in kinds(r, "job.rdzv"),
                         limit=scaled(40))
        seconds = time.monotonic() - stopped
        (evicted,) = [f for f in named["findings"] if f["kind"] == "evicted"]
        assert evicted["nodes"] == [1] and evicted["severity"] == "fail", evicted
        assert "group rank 1 (node1" in evicted["summary"], evicted
        assert "removed by torchrun after its heartbeat stopped" in evicted["summary"]
        assert "look at that node now" in evicted["fix"]
        assert evicted["evidence"][0].startswith("group rank 1: worker rank 1, "), evicted
        # Before: late (a missed keep-alive, warn). Now: one cause, one failure.
        assert any("heartbeat_late" in k for k in beats), beats
        (beat,) = [f for f in named["findings"] if f["check"] == "job.heartbeat"]
        assert beat["severity"] == "pass", beat   # the survivor beats; node1 is job.rdzv's, not dead besides
        print(f"node1 named evicted {seconds:.1f} s after its SIGSTOP")
        assert seconds <= scaled(20), seconds

        # The store's own copy follows at the survivor's next heartbeat: node1 is then named
        # from the round's keys (role_info/1, assigned_ranks/1) and its worker's debug server URL.
        gone, _ = until(c, 2, lambda r: len(r["job"]["runs"][0]["state"]["participants"]) == 1
                        and "evicted" in kinds(r, "job.rdzv"), limit=scaled(30))
        (evicted,) = [f for f in gone["findings"] if f["kind"] == "evicted"]
        assert evicted["summary"].startswith("run 'job7': group rank 1 (node1) of round 0 is no longer among its "
                                             "participants"), evicted
        assert evicted["evidence"][0] == ("group rank 1: worker rank 1, on node1 (its workers' debug server "
                                          "URLs)"), evicted
        assert "round 0's keys name group ranks 0, 1" in evicted["evidence"], evicted
        (round_,) = gone["job"]["rounds"]
        assert round_["group_ranks"] == [0, 1] and round_["members"][0]["hosts"] == [[1, "node1"]], round_
        # A torch that cannot list keys finds the same round by probing its role_info keys.
        probed = json.loads(c.run(2, [sys.executable, "-c", PROBED.format(port=PORT)], timeout=scaled(60)).stdout)
        assert probed == [[0, 1], False, [[[1, "node1"]]]], probed
        assert set(gone["job"]["keys"]) == keys, "inspect wrote to the job's store"
        for job in jobs:
            c.kill(job)


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
