"""What every node's verdict stands on, on real network namespaces: a healthy joiner says the
cluster's outcome in one line, and two nodes that call themselves by one name are named. (That
a joiner the host names faulty learns it before it leaves is test_mesh_cluster's, on the run
it shares with the mesh's own test.)

A joiner repeats the host's verdict: the line it prints (`cluster: ...`) and its exit code
against the host's JSON, where the host judged something only it could (the drift since a
baseline file an earlier run wrote: ranked, in order of arrival, under torchrun) and where a
signal stopped the host mid-run (its joiners hear it, and nobody is named for it). A joiner
that loses the host without word (SIGKILL) still names it lost:
test_faults_cluster.test_host_killed_during_the_mesh.
"""

from __future__ import annotations

import re
import signal

import pytest

from cluster import NodeSpec
from faults import (
    assert_interrupted,
    assert_stopped,
    counted_args,
    finish_each,
    ranked_args,
    signal_and_finish,
    slow_mesh,
)
from nodes import GRACE, PORT, explain, finish_all, read_report, scaled, start
from test_torchrun_cluster import run_both, torchrun

pytestmark = pytest.mark.root_required


RUN_TIMEOUT = scaled(30)


def ranked_run(c, tmp_path, timeout=RUN_TIMEOUT, extra=(), bandwidth=False):
    n = len(c.nodes)

    def args(i: int) -> list[str]:
        return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i),
                "--timeout", str(timeout), *extra]

    return finish_all([start(c, i, args(i), tmp_path, bandwidth=bandwidth) for i in range(n)], timeout + 30)


def test_a_healthy_cluster_says_so_on_every_joiner(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec()]) as c:
        runs = ranked_run(c, tmp_path)
    assert [r.rc for r in runs] == [0, 0], explain(runs)
    assert "cluster: PASS - every check passed on every node" in runs[1].stdout
    assert not runs[1].findings("run.cluster")


def test_two_nodes_with_one_hostname_are_told_apart_by_address(cluster, tmp_path):
    """Booted from one image: node1 and node2 both call themselves node1."""
    with cluster([NodeSpec(), NodeSpec(hostname="node1"), NodeSpec(hostname="node1")]) as c:
        runs = ranked_run(c, tmp_path)
        addresses = [c.nodes[i].addr for i in (1, 2)]
    host = runs[0]
    assert host.rc == 4 and host.report["faulty_nodes"] == ["node1"], explain(runs)   # both are node1
    same = [f for f in host.findings("rdzv.join", "fail") if f["kind"] == "duplicate_hostname"]
    assert [f["nodes"] for f in same] == [[1, 2]], explain(runs)
    assert all(any(a in e for e in same[0]["evidence"]) for a in addresses), same
    assert all(r.rc == 2 for r in runs[1:]), "each of them learns it from the host"


def test_a_node_called_like_the_endpoint_it_is_not_says_so_and_does_not_host(cluster, tmp_path):
    """Without ranks, node2 calls itself node0 (booted from the host's image); its name service
    says node0 is 198.18.0.10. torchrun would host a store of its own there, by name; netcheck
    names the duplicate on node2 instead of hosting an island (the campaign's seed 20261202)."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec(hostname="node0", dns_name="node2")]) as c:
        args = ["--rdzv", f"node0:{PORT}", "--join-window", "3", "--timeout", str(scaled(30)),
                "--skip", "bandwidth"]
        runs = finish_all([start(c, i, args, tmp_path) for i in range(3)], scaled(30) + 10)
    copier = runs[2]
    assert copier.rc == 2, explain(runs)
    (taken,) = [f for f in copier.findings("rdzv.join", "fail") if f["kind"] == "duplicate_hostname"]
    assert "node0 -> 198.18.0.10" in taken["evidence"], taken
    assert runs[0].report["role"] == "host" and [n["hostname"] for n in runs[0].report["nodes"]] == ["node0", "node1"]


def test_a_node_the_mesh_finds_cut_off_is_not_timed_out_on_by_the_sweep(cluster, tmp_path):
    """The campaign's seed 2 (benchmarks/CHAOS.md): node1 open only on the rendezvous port,
    bandwidth on. The sweep would sit in gloo's connect to node1 until its deadline and name
    the ranks that waited; the mesh already named node1, so the sweep is not run."""
    sweep = ["-b", "1K", "-e", "64K", "-f", "4", "-w", "1", "-n", "2", "--bw-budget", "2"]
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.allow_only_inbound(1, [PORT])
        runs = ranked_run(c, tmp_path, timeout=scaled(40), extra=sweep, bandwidth=True)
    host = runs[0]
    assert [f["nodes"] for f in host.findings("mesh.connect", "fail")] == [[1]], explain(runs)
    assert [(r.rc, r.report["faulty_nodes"]) for r in runs] == [(4, ["node1"]), (2, ["node1"]), (4, ["node1"])], \
        explain(runs)
    (skipped,) = [f for f in host.findings("run.skipped") if "bandwidth" in f["summary"]]
    assert "node1 cut off" in skipped["summary"], skipped
    assert not host.findings("bw.stage", "fail"), explain(runs)


# --- a joiner repeats the host's verdict ---------------------------------------------------

def printed_cluster(run) -> str:
    """The host's verdict as the joiner printed it (its `cluster:` line), lower case."""
    found = re.search(r"^cluster: (PASS|WARN|FAIL) - ", run.stdout, re.M)
    assert found, f"node{run.node} printed no cluster line:\n{run.stdout}"
    return found.group(1).lower()


def not_passed(report: dict) -> list[tuple]:
    return [(f["check"], f["severity"], f["kind"], f["nodes"]) for f in report["findings"] if f["severity"] != "pass"]


# --- --baseline: the host's drift reaches the joiners it names ------------------------------


@pytest.mark.parametrize("mode", ["ranked", "arrival"])
def test_the_joiners_repeat_the_hosts_baseline_drift(cluster, tmp_path, mode):
    """The host compares with a baseline file an earlier run of this cluster wrote; a --hash file
    changed since on every node. The host warns baseline.drift naming every node, and each
    joiner prints that verdict and exits 1 with the host's finding as its own (it printed
    "cluster: PASS" and exited 0 when the host compared only after telling its verdict)."""
    timeout = scaled(30)
    code = tmp_path / "train.py"
    code.write_text("print('v1')\n")
    first = tmp_path / "last-good.json"

    def args(i: int, *extra: str) -> list[str]:
        launch = ranked_args(i, 2, timeout) if mode == "ranked" else counted_args(2, timeout)
        return [*launch, "--hash", str(code), *extra]

    with cluster([NodeSpec(), NodeSpec()]) as c:
        good = finish_all([start(c, i, args(i), tmp_path) for i in range(2)], timeout + GRACE)
        assert [r.rc for r in good] == [0, 0], explain(good)
        first.write_text(good[0].json_path.read_text())
        code.write_text("print('v2')\n")
        runs = finish_all([start(c, i, args(i, *(["--baseline", str(first)] if i == 0 else [])), tmp_path)
                           for i in range(2)], timeout + GRACE)
    host, joiner = runs[0].report, runs[1].report
    assert host["role"] == "host" and joiner["role"] == "joiner", explain(runs)
    assert not_passed(host) == [("baseline.drift", "warn", "", [0, 1])], explain(runs)
    assert [r.rc for r in runs] == [1, 1], explain(runs)
    assert printed_cluster(runs[1]) == host["verdict"] == joiner["cluster"]["verdict"] == "warn"
    assert not_passed(joiner) == [("baseline.drift", "warn", "", [0, 1])], explain(runs)


def test_torchrun_workers_repeat_the_hosts_baseline_drift(cluster, tmp_path):
    """torchrun hands every worker one command line, --baseline included: each rank compares its
    own node (the other nodes and the cluster's recommendation are not in its view, and the
    MASTER_PORT torchrun picks for every run is no drift), and hears the host's verdict."""
    code = tmp_path / "train.py"
    code.write_text("v1\n")
    base, again = tmp_path / "first", tmp_path / "again"
    base.mkdir()
    again.mkdir()
    args = ("--timeout", str(scaled(40)), "--skip", "bandwidth", "--hash", str(code))
    with cluster([NodeSpec(), NodeSpec()]) as c:
        good = run_both(c, torchrun(base, *args), timeout=scaled(120))
        assert [rc for *_, rc in good] == [0, 0], good
        code.write_text("v2\n")
        runs = run_both(c, torchrun(again, *args, "--baseline", str(base / "rank0.json")), timeout=scaled(120))
    host = read_report(again / "rank0.json")
    assert not_passed(host) == [("baseline.drift", "warn", "", [0, 1, 2, 3])], host["findings"]
    # Only the hash moved (not the MASTER_PORT torchrun picked afresh): a line per node.
    drift = next(f for f in host["findings"] if f["check"] == "baseline.drift")
    assert [e.split(": ")[1] for e in drift["evidence"]] == [f"hash.{code}"] * 2, drift
    for rank in (1, 2, 3):
        worker = read_report(again / f"rank{rank}.json")
        assert worker["cluster"]["verdict"] == host["verdict"] == "warn", worker
        assert not_passed(worker) == [("baseline.drift", "warn", "", [rank])], worker["findings"]
        (own,) = [f for f in worker["findings"] if f["check"] == "baseline.drift"]
        assert [e.split(": ")[1] for e in own["evidence"]] == [f"hash.{code}"], own
    assert [rc for *_, rc in runs] == [1, 1], runs


# --- a host stopped by a signal tells its joiners ------------------------------------------


def assert_heard_the_stop(run, host: dict, timeout: float) -> dict:
    """A joiner that heard the host say it was stopped: exit 1 (the run did not finish, nobody
    is at fault), the host's verdict printed, run.stopped host_stopped naming no node, and
    nothing named lost."""
    report = run.report
    detail = f"node{run.node} rc={run.rc} after {run.seconds:.1f} s\n{run.stdout}\n{run.stderr}"
    assert run.rc == 1 and run.seconds <= timeout + GRACE, detail
    assert printed_cluster(run) == host["verdict"] == report["cluster"]["verdict"] == "fail", detail
    (heard,) = [f for f in report["findings"] if f["check"] == "run.stopped"]
    assert (heard["severity"], heard["kind"], heard["nodes"]) == ("warn", "host_stopped", []), heard
    assert not [f for f in report["findings"] if f["severity"] == "fail"], detail
    assert report["verdict"] == "warn" and report["faulty_nodes"] == [], detail
    return report


def test_a_host_interrupted_mid_mesh_fails_no_joiner(cluster, tmp_path):
    """Ctrl-C on the host while every node is in the mesh (held there by a filtered candidate on
    the host): the host tells the joiners it was stopped before it leaves, and names none of them
    lost (it named both `lost_in_goodbye`, and they named it `lost_in_mesh`)."""
    timeout = scaled(30)
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        slow_mesh(c)
        runs = [start(c, i, ranked_args(i, 3, timeout), tmp_path, terminal=i == 0) for i in range(3)]
        runs[0].wait_for_progress("netcheck: mesh...", timeout)
        took = signal_and_finish(c, runs[0], signal.SIGINT, within=scaled(8))
        finish_each(runs[1:], timeout + GRACE)
    host = assert_interrupted(runs[0], "mesh")
    assert took < scaled(8), "the host waits for its joiners' goodbyes a few seconds at most"
    assert not_passed(host) == [("run.stopped", "fail", "sigint", [0])], explain(runs)
    assert host["cluster"] is None and host["faulty_nodes"] == ["node0"], host
    for run in runs[1:]:
        joiner = assert_heard_the_stop(run, host, timeout)
        assert joiner["cluster"]["stopped"] == "SIGINT" and joiner["cluster"]["stopped_in"] == "mesh"
        assert joiner["unfinished"] == "mesh", joiner["timings"]


LONG_SWEEP = ["-b", "64K", "-e", "64M", "-f", "2", "-w", "1", "-n", "50", "--bw-budget", "10"]


def test_a_host_terminated_mid_sweep_fails_no_joiner(cluster, tmp_path):
    """SIGTERM (scancel, a deleted pod) on the host once it has measured a row: its workers go,
    the joiners' sweep ends on the host's own account of the stop, and they hear its verdict
    say so; none names the host's node for the stop (bw.stage), and the host names nobody."""
    timeout = scaled(40)   # three nodes and their workers import torch on 2 cores before the sweep
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = [start(c, i, ranked_args(i, 3, timeout) + LONG_SWEEP, tmp_path, bandwidth=True, terminal=i == 0)
                for i in range(3)]
        runs[0].wait_for_progress("netcheck: bandwidth all ", timeout)
        signal_and_finish(c, runs[0], signal.SIGTERM, within=scaled(8))
        finish_each(runs[1:], timeout + GRACE)
    assert runs[0].rc == 143 and "terminated" in runs[0].stderr, explain(runs)
    host = runs[0].report
    assert_stopped(host, "sigterm")
    assert not_passed(host) == [("run.stopped", "fail", "sigterm", [0])], explain(runs)
    for run in runs[1:]:
        joiner = assert_heard_the_stop(run, host, timeout)
        assert (joiner["cluster"]["stopped"], joiner["cluster"]["stopped_in"]) == ("SIGTERM", "bandwidth")
        assert not [f for f in joiner["findings"] if f["check"] == "bw.stage" and f["severity"] != "pass"], joiner
