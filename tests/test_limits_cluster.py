"""The job's own limits on real processes (prlimit, as a launcher or a job script sets them):
a rendezvous host whose soft descriptor limit the job's store would exhaust is never a PASS,
in the ranked, the one-shot and the torchrun form, and the same run at a sufficient limit
names none."""

from __future__ import annotations

import sys

import pytest

from cluster import NodeSpec
from faults import arrival_args
from nodes import GRACE, PORT, explain, finish_all, read_report, scaled, start

pytestmark = pytest.mark.root_required


def ranked(i: int, timeout: float) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", "2", "--node-rank", str(i), "--timeout", str(timeout),
            "--nproc-per-node", "48", "--skip", "bandwidth"]


def one_shot(i: int, timeout: float) -> list[str]:
    return [*arrival_args(timeout, scaled(3)), "--nproc-per-node", "48", "--skip", "bandwidth"]


@pytest.mark.parametrize("form", [ranked, one_shot], ids=["ranked", "one-shot"])
def test_a_host_under_a_launchers_low_descriptor_limit_fails_and_a_sufficient_one_passes(cluster, tmp_path, form):
    """2 nodes x 48 processes, the host started under `ulimit -n 64` (hard 4096): the job's
    store needs a descriptor per rank and agent; netcheck lifted its own to do its work, and
    names the job's, with the fix the hard limit allows. At 4096 nothing is named."""
    timeout = scaled(30)
    for soft, verdict in ((64, "fail"), (4096, "pass")):
        with cluster([NodeSpec(), NodeSpec()]) as c:
            runs = finish_all([start(c, i, form(i, timeout), tmp_path,
                                     wrapper=("prlimit", f"--nofile={soft}:4096", "--") if i == 0 else ())
                               for i in range(2)], timeout + GRACE)
        (found,) = [f for f in runs[0].findings("host.limits") if f["kind"] != "nofile_peers"]
        assert (found["severity"], found["nodes"]) == (verdict, [0]), explain(runs)
        if verdict == "fail":
            assert found["kind"] == "nofile" and runs[0].rc == 2 and "ulimit -n 162" in found["fix"], explain(runs)
            assert "below the 114" in found["summary"], found
            assert "96 ranks on 2 node(s)" in found["summary"], found
        else:
            assert [r.rc for r in runs] == [0, 0], explain(runs)


def test_torchrun_workers_inherit_their_agents_low_limit_and_are_held_to_it(cluster, tmp_path):
    """torchrun on node0 under `ulimit -n 64`: its workers inherit the agent's limit, as the
    training processes would; 2 x 2 ranks and 2 agents fit a bare store under it but not a
    training process's own beside them: a warning, from the worker netcheck ran as."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0:29400", "--rdzv-id", "limits",
            "--rdzv-conf", "join_timeout=15,read_timeout=15", "-m", "netcheck", "--json",
            str(tmp_path / "rank{rank}.json"), "--timeout", str(scaled(60)), "--skip", "bandwidth"]
    with cluster([NodeSpec(), NodeSpec()]) as c:
        procs = [c.popen(i, (["prlimit", "--nofile=64:4096", "--"] if i == 0 else []) + argv) for i in range(2)]
        results = [p.communicate(timeout=scaled(120)) + (p.returncode,) for p in procs]
    report = read_report(tmp_path / "rank0.json")
    (found,) = [f for f in report["findings"] if f["check"] == "host.limits" and f["kind"] != "nofile_peers"]
    assert (found["severity"], found["kind"], found["nodes"]) == ("warn", "nofile", [0]), results
    assert "4 ranks on 2 node(s)" in found["summary"], found
