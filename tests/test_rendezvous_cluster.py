"""Phases local, reach and rendezvous on real network namespaces, with real faults.

Each test starts netcheck on the nodes of a simulated cluster and asserts on exit codes
and the JSON findings. Nodes that never get past reach do not import torch, so the
failure cases are cheap; the healthy ones pay one torch import per node.
"""

from __future__ import annotations

import sys
import time

import pytest

from cluster import NodeSpec
from faults import Agent
from job import Launch, classify, run_job
from nodes import DIAGNOSABLE, GRACE, HEALTHY_WARNINGS, PORT, SPEED_VERDICTS, explain, finish, finish_all, scaled, start

pytestmark = pytest.mark.root_required

RDZV = ["--rdzv", f"node0:{PORT}"]


def ranked(i: int, n: int, timeout: float = scaled(30)) -> list[str]:
    return RDZV + ["--nnodes", str(n), "--node-rank", str(i), "--timeout", str(timeout)]


def slurm_env(i: int, n: int) -> dict:
    return {"SLURM_NNODES": str(n), "SLURM_NODEID": str(i), "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": f"node[0-{n - 1}]"}


SMALL_SWEEP = ["-b", "1K", "-e", "64K", "-f", "4", "-w", "1", "-n", "2", "--bw-budget", "2"]


@pytest.mark.compat
def test_three_healthy_nodes_pass(cluster, tmp_path):
    """Every phase, bandwidth included (a small sweep)."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ranked(i, 3, scaled(60)) + SMALL_SWEEP, tmp_path, DIAGNOSABLE, bandwidth=True)
                           for i in range(3)], scaled(60) + GRACE)
    allowed = SPEED_VERDICTS | HEALTHY_WARNINGS   # anything else must pass
    for r in runs:
        judged = {f["check"] for f in r.report["findings"] if f["severity"] != "pass"}
        assert judged <= allowed, explain(runs)
    host = runs[0].report
    assert set(host["timings"]) >= {"rendezvous", "mesh", "nic", "env", "bandwidth"}
    assert host["bandwidth"]["sweeps"][0]["rows"] and host["bandwidth"]["backend"] == "gloo"
    assert host["schema"] == "netcheck.report/1"
    assert [(n["rank"], n["hostname"], n["address"]) for n in host["nodes"]] == [
        (0, "node0", "198.18.0.10"), (1, "node1", "198.18.0.11"), (2, "node2", "198.18.0.12")]
    assert host["timings"]["rendezvous"] > 0
    assert sorted(host["healthy_nodes"] + host["faulty_nodes"]) == ["node0", "node1", "node2"]
    assert runs[1].findings("rdzv.reach", "pass") and runs[2].report["node_rank"] == 2


def test_master_port_dropped_for_one_joiner(cluster, tmp_path):
    """The joiner says `filtered` in seconds, the host's firewall at fault (its ARP answered:
    issue 65); the host names it missing by rank and hostname."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.drop_inbound(0, PORT, source=2)
        runs = [start(c, i, RDZV + ["--timeout", str(scaled(20))], tmp_path, env=slurm_env(i, 3))
                for i in range(3)]
        blocked = finish(runs[2], scaled(10))
        finish_all(runs[:2], scaled(20) + GRACE + 5)
    assert (blocked.rc, blocked.report["fault"]["nodes"]) == (4, [0]), explain(runs)
    (reach,) = blocked.findings("rdzv.reach", "fail")
    assert "filtered" in reach["summary"] and reach["cause_nodes"] == [0], reach
    # Said at the first answer, not after waiting out the join window (timed in benchmarks/).
    assert blocked.report["nodes"][0]["facts"]["reach"]["attempts"] == 1
    # The host cannot see its own rule keep out a node that never came: it names node2 missing
    # (by Slurm's list), and the two exit 4
    assert [(r.rc, r.report["faulty_nodes"]) for r in runs[:2]] == [(4, ["node2"])] * 2, explain(runs)
    assert runs[0].seconds < scaled(20) + GRACE
    (missing,) = runs[0].findings("rdzv.join", "fail")
    assert missing["nodes"] == [2] and "node2" in missing["summary"]


def test_joiner_reach_outcomes_without_a_host(cluster, tmp_path):
    """refused (REJECT), dns, unreachable and nothing-listening, each its own verdict: a refusal
    is the host's side's (4), the others this node's (2)."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.reject_inbound(0, PORT)
        args = ["--node-rank", "1", "--nnodes", "2", "--timeout", str(scaled(6)), "--only", "rendezvous"]
        runs = [
            start(c, 1, RDZV + args, tmp_path),                               # REJECT -> refused
            start(c, 2, ["--rdzv", "nosuchnode.invalid:29500"] + args, tmp_path),
            start(c, 3, ["--rdzv", "198.19.7.7:29500"] + args, tmp_path),   # no route there
            start(c, 0, ["--rdzv", f"node1:{PORT}"] + args, tmp_path),      # nobody listens
        ]
        finish_all(runs, 15)
    assert [r.rc for r in runs] == [4, 2, 2, 4], explain(runs)
    assert "refused" in runs[0].findings("rdzv.reach", "fail")[0]["summary"]
    assert runs[1].findings("rdzv.resolve", "fail") and not runs[1].findings("rdzv.reach")
    assert "unreachable" in runs[2].findings("rdzv.reach", "fail")[0]["summary"]
    nobody = runs[3]
    assert "refused" in nobody.findings("rdzv.reach", "fail")[0]["summary"]
    assert nobody.report["unfinished"] is None and nobody.seconds < scaled(6) + GRACE


def test_joiner_started_before_the_host_passes(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec()]) as c:
        joiner = start(c, 1, ranked(1, 2), tmp_path)
        time.sleep(5)
        host = start(c, 0, ranked(0, 2), tmp_path)
        runs = finish_all([host, joiner], 60)
    assert [r.rc for r in runs] == [0, 0], explain(runs)
    assert runs[1].report["nodes"][0]["facts"]["reach"]["attempts"] > 1


def test_port_held_by_another_process_is_named(cluster, tmp_path):
    holder_code = ("import socket,time; s=socket.socket(); s.bind(('0.0.0.0', 29500)); "
                   "s.listen(); print('ready', flush=True); time.sleep(60)")
    with cluster([NodeSpec()]) as c:
        holder = c.popen(0, [sys.executable, "-c", holder_code])
        assert holder.stdout.readline().strip() == "ready"
        run = finish(start(c, 0, ranked(0, 1), tmp_path), 20)
        c.kill(holder)
    assert run.rc == 2, explain([run])
    (taken,) = run.findings("rdzv.listen", "fail")
    assert f"pid {holder.pid}" in taken["summary"] and "time.sleep(60)" in taken["summary"]


def test_missing_rank_is_named_within_timeout(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ranked(i, 3, timeout=scaled(20)), tmp_path) for i in range(2)],
                          scaled(20) + GRACE + 5)
    assert runs[0].seconds < scaled(20) + GRACE, explain(runs)
    (missing,) = runs[0].findings("rdzv.join", "fail")
    assert missing["nodes"] == [2]
    # rank 2 is at fault (no hostname: it never came): the host and node1 exit 4
    assert [(r.rc, r.report["fault"]["nodes"]) for r in runs] == [(4, [2]), (4, [2])], explain(runs)


def test_duplicate_rank_and_foreign_run_are_named_not_mixed_in(cluster, tmp_path):
    """node1 and node2 both claim rank 1, node3 comes with another run id; node4 (rank 2)
    starts once the host has read both claims and node3 has been turned away, so the host
    closes on the last seat, not at a deadline (half of --timeout: room for two torch
    imports in a row on a busy machine)."""
    timeout = scaled(40)
    with cluster([NodeSpec() for _ in range(5)]) as c:
        runs = [start(c, 0, ranked(0, 3, timeout), tmp_path),
                start(c, 1, ranked(1, 3, timeout), tmp_path),
                start(c, 2, ranked(1, 3, timeout), tmp_path),
                start(c, 3, ranked(2, 3, timeout) + ["--rdzv-id", "other-job"], tmp_path)]
        watch = Agent.start(c, 0, "watch", f"127.0.0.1:{PORT}")
        watch.wait_for_all([r"^arrival \d+ node1$", r"^arrival \d+ node2$"], timeout)
        finish(runs[3], timeout)
        runs.append(start(c, 4, ranked(2, 3, timeout), tmp_path))
        finish_all(runs[:3] + runs[4:], timeout + GRACE)
    host = runs[0].report
    assert runs[0].rc == 4, explain(runs)   # node1 and node2's claims are at fault, not the host
    (dup,) = [f for f in runs[0].findings("rdzv.join") if f["kind"] == "duplicate_rank"]
    assert dup["nodes"] == [1] and {e.split()[0] for e in dup["evidence"]} == {"node1", "node2"}
    (foreign,) = [f for f in runs[0].findings("rdzv.join") if f["kind"] == "foreign_run"]
    assert "node3" in foreign["summary"] and "other-job" in foreign["summary"], foreign
    seated = [n["hostname"] for n in host["nodes"]]
    assert seated[0] == "node0" and seated[2] == "node4" and len(seated) == 3 and "node3" not in seated
    unseated = runs[1] if seated[1] == "node2" else runs[2]
    assert unseated.rc == 2 and unseated.findings("rdzv.join", "fail"), explain(runs)
    (other,) = runs[3].findings("rdzv.join")
    assert runs[3].rc == 2 and other["kind"] == "join_failed" and "serves run id 'netcheck'" in other["summary"]
    # The id keeps apart torchrun's c10d rendezvous alone (issue 64: a static launch ran).
    assert (other["impact"]["on"], other["impact"]["form"]) == (["launch"], "c10d"), other


def test_rank_0s_fqdn_unresolvable_on_a_node_fails_torchruns_c10d_job_and_not_one_given_the_address(
        cluster, tmp_path):
    """Issue 64: node2 cannot resolve node0's FQDN, the one torchrun's c10d rendezvous hands every
    worker as MASTER_ADDR (node0.cluster sorts first). rdzv.fqdn fails for that launch form alone;
    the jobs say so: c10d (its endpoint an address) fails or hangs, static (the master's address) runs."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.write_hosts(2, [*c.hosts_lines(2, omit=[0]), f"{c.nodes[0].addr} node0"])   # its short name only
        runs = finish_all([start(c, i, ranked(i, 3), tmp_path) for i in range(3)], 60)
        master = f"{c.nodes[0].addr}:{PORT}"
        c10d = classify(run_job(c, Launch(3, rdzv="c10d", endpoint=master), tmp_path), None)
        static = classify(run_job(c, Launch(3, endpoint=master), tmp_path), None)
    (fqdn,) = runs[0].findings("rdzv.fqdn", "fail")
    assert fqdn["nodes"] == [0, 2] and (fqdn["impact"]["on"], fqdn["impact"]["form"]) == (["launch"], "c10d"), fqdn
    assert "torchrun's c10d rendezvous only" in runs[0].stdout, runs[0].stdout
    assert c10d.fate in ("failed", "hung"), c10d.describe()   # node2 cannot look MASTER_ADDR up
    assert static.fate == "ok", static.describe()


def test_unresolvable_fqdn_names_both_nodes_and_speaks_for_torchruns_c10d(cluster, tmp_path):
    """node2 cannot resolve node1's FQDN: torchrun's c10d hands its workers rank 0's alone, the
    first in order (node0.cluster), so this risks that launch (a warning); node0's name would fail it."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.write_hosts(2, c.hosts_lines(2, omit=[1]))
        runs = finish_all([start(c, i, ranked(i, 3), tmp_path) for i in range(3)], 60)
        job = classify(run_job(c, Launch(3, rdzv="c10d"), tmp_path), None)   # rank 0's name resolves: it runs
    assert job.fate == "ok", job.describe()
    assert runs[0].rc == 1, explain(runs)
    (fqdn,) = runs[0].findings("rdzv.fqdn", "warn")
    assert fqdn["nodes"] == [1, 2]
    assert any("node2 -> node1.cluster" in e for e in fqdn["evidence"]), fqdn
    assert (fqdn["impact"]["on"], fqdn["impact"]["effect"]) == (["launch"], "risks")
    assert "node whose FQDN sorts first, node0.cluster, which resolves right" in fqdn["impact"]["why"]


def test_a_stale_fqdn_of_the_host_on_one_node_is_that_nodes_fault_not_the_hosts(cluster, tmp_path):
    """node2's /etc/hosts keeps an old address for node0's FQDN (node0.cluster, the name torchrun's
    c10d hands every worker) and the right one for its short name: it reaches the endpoint, and
    its lookup of the FQDN fails the launch. rdzv.fqdn names both ends; node1 resolves node0's
    FQDN right, so node2's stale line is at fault, not the host (issue 65): node2 exits 2, the
    host and node1 4."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        host = c.nodes[0]
        c.write_hosts(2, [*c.hosts_lines(2, omit=[0]), f"198.18.0.99 {host.fqdn}", f"{host.addr} {host.hostname}"])
        runs = finish_all([start(c, i, ranked(i, 3), tmp_path) for i in range(3)], 60)
    (fqdn,) = runs[0].findings("rdzv.fqdn", "fail")
    assert (fqdn["nodes"], fqdn["cause_nodes"]) == ([0, 2], [2]), fqdn
    assert any(e.startswith("node2 -> node0.cluster") for e in fqdn["evidence"]), fqdn
    assert [(r.rc, r.report["fault"]["party"], r.report["faulty_nodes"]) for r in runs] == [
        (4, "other_nodes", ["node2"]), (4, "other_nodes", ["node2"]), (2, "this_node", ["node2"])], explain(runs)
    assert runs[0].report["healthy_nodes"] == ["node0", "node1"], explain(runs)


def test_ipv6_loopback_endpoint(cluster, tmp_path):
    with cluster([NodeSpec()]) as c:
        args = ["--rdzv", f"[::1]:{PORT}", "--nnodes", "2", "--timeout", str(scaled(30))]
        runs = finish_all([start(c, 0, args + ["--node-rank", "0"], tmp_path),
                           start(c, 0, args + ["--node-rank", "1"], tmp_path)], 60)
    assert [r.rc for r in runs] == [0, 0], explain(runs)
    assert runs[1].report["nodes"][0]["facts"]["reach"]["probes"][0]["family"] == "ipv6"


def test_host_without_ranks_is_the_node_owning_the_address(cluster, tmp_path):
    """Arrival numbering: no ranks anywhere, the host closes after --join-window of quiet,
    not at its join deadline (half of --timeout: 60 s here)."""
    with cluster([NodeSpec(), NodeSpec()]) as c:
        args = RDZV + ["--join-window", "3", "--timeout", str(scaled(120))]
        runs = finish_all([start(c, i, args, tmp_path) for i in range(2)], 60)
    assert [r.rc for r in runs] == [0, 0], explain(runs)
    assert runs[0].report["role"] == "host" and runs[1].report["node_rank"] == 1
    assert runs[0].report["timings"]["rendezvous"] < 30, explain(runs)


def test_without_ranks_the_node_named_by_the_endpoint_hosts_also_with_its_hostname_on_127_0_1_1(cluster, tmp_path):
    """Debian's stock /etc/hosts on node0 ("127.0.1.1 node0"): no interface holds that
    address, and every node used to wait as a joiner for a host that never listened. As
    torchrun does, the node whose own name the endpoint is hosts; gloo's bind is the fault."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        rest = [h for h in c.hosts_lines(0) if not h.endswith(" node0")]
        c.write_hosts(0, ["127.0.1.1 node0.cluster node0", *rest])
        args = RDZV + ["--nnodes", "3", "--timeout", str(scaled(30)), "--skip", "bandwidth"]
        runs = finish_all([start(c, i, args, tmp_path) for i in range(3)], scaled(30) + GRACE)
    assert runs[0].report["role"] == "host", explain(runs)
    (gloo,) = runs[0].findings("nic.gloo_default", "fail")
    assert gloo["nodes"] == [0] and "127.0.1.1" in gloo["evidence"][0], gloo
    assert [r.rc for r in runs] == [2, 4, 4], explain(runs)   # the joiners are not at fault: node0 is
    assert all("cluster: FAIL" in r.stdout for r in runs[1:]), explain(runs)


@pytest.mark.compat
def test_a_host_nobody_joins_fails(cluster, tmp_path):
    """Nobody else comes: with --nnodes the missing rank is named, also at the least --timeout
    the phases take (14 s); without it, 'no other node joined'. Never a pass."""
    with cluster([NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, 0, ranked(0, 2, timeout=scaled(14)), tmp_path),
                           start(c, 1, RDZV[:1] + [f"node1:{PORT}", "--join-window", "1", "--timeout", str(scaled(14))],
                                 tmp_path)], scaled(14) + GRACE + 5)
    # the missing rank 1 is another node's fault; no other node at all, the cluster's as a whole
    assert [r.rc for r in runs] == [4, 5], explain(runs)
    counted, alone = runs[0].report, runs[1].report
    assert [n["hostname"] for n in counted["nodes"]] == ["node0"], explain(runs)
    assert [f["nodes"] for f in runs[0].findings("rdzv.join", "fail")] == [[1]], explain(runs)
    (nobody,) = runs[1].findings("rdzv.join", "fail")
    assert nobody["kind"] == "alone" and nobody["nodes"] == [], explain(runs)
    assert not runs[0].findings("rdzv.join", "pass") and not runs[1].findings("rdzv.join", "pass")
    assert alone["role"] == "host"
    for run in runs:  # no peer, no evidence: the checks between nodes are not passed but not run
        passed = {f["check"] for f in run.report["findings"] if f["severity"] == "pass"}
        assert not passed & {"mesh.connect", "nic.route", "nic.nccl_default", "rdzv.fqdn", "host.clock"}, explain(runs)
        assert "no_peer" in {f["kind"] for f in run.findings("run.skipped", "warn")}, explain(runs)


def test_probe_subcommand_needs_no_torch(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec()]) as c:
        c.drop_inbound(0, PORT)
        code = ("import sys, netcheck.cli as m; rc = m.main(['probe', 'node0:29500', '--timeout', '1']);"
                " print('torch' in sys.modules); sys.exit(rc)")
        done = c.run(1, [sys.executable, "-c", code], timeout=scaled(15))
    assert done.returncode == 2 and done.stdout.strip().endswith("False"), done.stdout + done.stderr
    assert "filtered" in done.stdout
