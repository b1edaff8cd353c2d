"""`netcheck inspect --traces` on flight-recorder dumps a real job wrote: three namespace
nodes run tests/hangjob.py (gloo, torch's own recorder), the last rank misbehaves, every
rank that lives dumps its recorder after the process group's timeout, and inspect names the
rank, the collective and the line from the files alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import builders
from cluster import Cluster
from faults import nodes
from nodes import parse_report, scaled

pytestmark = pytest.mark.root_required

JOB = str(Path(__file__).resolve().parent / "hangjob.py")
WORLD = 3
CULPRIT = WORLD - 1


def dumps_of(cluster, tmp_path: Path, fault: str) -> Path:
    """Run the job with FAULT on every node; the folder its ranks dumped to."""
    dumps = tmp_path / f"dumps-{fault}"
    dumps.mkdir()
    env = {"TORCH_FR_BUFFER_SIZE": "2000", "HANG_PORT": "29620"}
    with cluster(nodes(WORLD)) as c:
        ranks = [c.popen(i, [sys.executable, JOB, fault, str(i), str(WORLD), str(dumps)], env=env)
                 for i in range(WORLD)]
        for proc in ranks:   # each ends on its own: the process group's timeout, then its dump
            proc.communicate(timeout=scaled(60))
    return dumps


@pytest.fixture(scope="module")
def skipped(tmp_path_factory) -> Path:
    """The dumps of a job whose last rank never issues the collective the others wait in:
    made once, read by the tests that look at it (inspect only reads a dump folder)."""
    return dumps_of(Cluster, tmp_path_factory.mktemp("hang"), "skip")


def inspect(dumps: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "netcheck", "inspect", "--traces", str(dumps), "--world-size",
                           str(WORLD), "--json", "-"], capture_output=True, text=True, timeout=scaled(60))
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, parse_report(done.stdout)


def hang(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["check"] == "job.hang"]


def test_a_rank_that_never_issues_the_collective_is_named_with_its_line(skipped):
    code, report = inspect(skipped)
    (f,) = hang(report)
    assert (code, f["kind"], f["nodes"]) == (2, "behind", [CULPRIT]), f
    assert "never issued gloo:all_reduce #6 of process group 0 (default_pg), which rank(s) 0, 1 wait in" in f["summary"]
    assert "hangjob.py:" in f["summary"]          # the line the others wait at
    assert f"rank {CULPRIT} (trace_rank_{CULPRIT}): last issued #5 gloo:all_reduce at " in f["evidence"][0]


def test_a_rank_that_issues_another_size_is_a_desync(cluster, tmp_path):
    """gloo's receiving side of the mismatch aborts (gloo::EnforceNotMet: "Received data size
    doesn't match expected size"), so rank 1 leaves no dump: the desync is told from ranks 0
    and 2, and rank 1 is named apart."""
    code, report = inspect(dumps_of(cluster, tmp_path, "size"))
    by_kind = {f["kind"]: f for f in hang(report)}
    assert code == 2 and set(by_kind) == {"desync", "no_trace"}, hang(report)
    assert by_kind["desync"]["nodes"] == [0, CULPRIT]
    assert f"rank(s) {CULPRIT} gloo:all_reduce [[2000]]" in by_kind["desync"]["summary"]
    assert "rank(s) 0 gloo:all_reduce [[1000]]" in by_kind["desync"]["summary"]
    assert (by_kind["no_trace"]["severity"], by_kind["no_trace"]["nodes"]) == ("warn", [1])


def test_a_hang_in_a_subgroup_names_the_subgroup(cluster, tmp_path):
    code, report = inspect(dumps_of(cluster, tmp_path, "subgroup"))
    (f,) = hang(report)
    assert (code, f["kind"], f["nodes"]) == (2, "behind", [CULPRIT]), f
    assert "#2 of process group 1" in f["summary"]


def test_a_killed_rank_leaves_no_trace_and_is_named(cluster, tmp_path):
    dumps = dumps_of(cluster, tmp_path, "killed")
    assert sorted(p.name for p in dumps.iterdir()) == ["trace_rank_0", "trace_rank_1"]
    code, report = inspect(dumps)
    (f,) = hang(report)
    assert (code, f["severity"], f["kind"], f["nodes"]) == (2, "fail", "no_trace", [CULPRIT]), f


# --- live, from the job's debug server ---------------------------------------------------------

LIVE_PORT = 29410
LIVE_JOB = """
import datetime, os, time
import torch, torch.distributed as dist
from torch.distributed.debug import start_debug_server
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
start_debug_server(port=0)
grads = torch.ones(1000)
for _ in range(5):
    dist.all_reduce(grads)
if int(os.environ["RANK"]) == 0:
    dist.all_reduce(grads)           # waits here for rank 1
else:
    time.sleep(300)                  # rank 1 never issues it
"""


def test_live_a_rank_that_never_issues_is_named_with_its_stack_and_a_stopped_one_has_no_trace(cluster, tmp_path):
    """A 2-node torchrun job running torch's debug server: rank 1 sleeps instead of issuing
    its 6th all_reduce. inspect finds the ranks' servers in the store, and names rank 1 with
    the line its stack is at; once rank 1 is SIGSTOPped its server no longer answers, and it
    is named as a rank without a trace, within --timeout."""
    script = tmp_path / "live_job.py"
    script.write_text(LIVE_JOB)
    env = {"TORCH_FR_BUFFER_SIZE": "2000"}
    with cluster(nodes(2)) as c:
        jobs = [c.popen(i, [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node0:{LIVE_PORT}", "--rdzv-id", "live7",
                            "--max-restarts", "0", str(script)], env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL) for i in range(2)]
        report = _until(c, lambda r: any(f["kind"] == "behind" for f in hang(r)))
        (behind,) = [f for f in hang(report) if f["kind"] == "behind"]
        assert behind["nodes"] == [1], behind
        assert ("never issued gloo:all_reduce #6 of process group 0 (default_pg), which rank(s) 0 wait in"
                in behind["summary"])
        assert f"live_job.py:{_line_of('waits here')} in <module>" in behind["summary"]   # from rank 0's stack
        assert "(node1): last issued #5 gloo:all_reduce; its stack: " in behind["evidence"][0]
        assert f"live_job.py:{_line_of('never issues')} in <module>" in behind["evidence"][0]
        worker = _worker_of(jobs[1].pid)
        os.kill(worker, signal.SIGSTOP)   # the process tree is this machine's: namespaces share its pids
        stopped = _until(c, lambda r: any(f["kind"] == "no_trace" for f in hang(r)))
        (silent,) = [f for f in hang(stopped) if f["kind"] == "no_trace"]
        assert silent["nodes"] == [1] and silent["severity"] == "fail", silent
        os.kill(worker, signal.SIGCONT)
        for job in jobs:
            job.kill()


def _until(c, found, limit: float = scaled(90)) -> dict:
    start, report = time.monotonic(), None
    while time.monotonic() - start < limit:
        done = c.run(0, [sys.executable, "-m", "netcheck", "inspect", "--rdzv", f"node0:{LIVE_PORT}", "--json", "-",
                         "--timeout", str(scaled(30))], timeout=scaled(60))
        assert "Traceback" not in done.stderr, done.stderr
        report = parse_report(done.stdout)
        if found(report):
            return report
        time.sleep(0.5)
    raise AssertionError(f"not found in {limit} s: {report and report['findings']}")


def _line_of(comment: str) -> int:
    return next(n for n, line in enumerate(LIVE_JOB.split("\n"), 1) if comment in line)


def _worker_of(agent: int) -> int:
    """The training process torchrun's agent started (the agent's python child)."""
    import psutil

    return next(p.pid for p in psutil.Process(agent).children(recursive=True) if "live_job.py" in " ".join(p.cmdline()))


def test_a_preflight_report_names_each_dumped_rank_by_its_host(skipped, tmp_path):
    """Dumps do not say where a rank ran: the job's preflight report (netcheck --json) does."""
    from netcheck.core import codec
    from netcheck.core.model import NodeEntry, Report

    nodes = tuple(NodeEntry(r, f"gpu{r:02d}", f"198.18.0.{10 + r}",
                            builders.facts(f"gpu{r:02d}", rank=r, nnodes=3, run_id="job")) for r in range(WORLD))
    preflight = tmp_path / "preflight.json"
    preflight.write_text(codec.dumps(Report(run_id="job", node_rank=0, role="host", verdict="pass", nodes=nodes,
                                            findings=(), recommend={}, recommend_per_node={}, env_table=(),
                                            bandwidth=None, timings={}, unfinished=None, healthy_nodes=(),
                                            faulty_nodes=())))
    done = subprocess.run([sys.executable, "-m", "netcheck", "inspect", "--traces", str(skipped), "--preflight",
                           str(preflight), "--json", "-"], capture_output=True, text=True, timeout=scaled(60))
    (f,) = hang(parse_report(done.stdout))
    assert f["evidence"][0].startswith(f"rank {CULPRIT} (gpu{CULPRIT:02d}): last issued #5"), f
