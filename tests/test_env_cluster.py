"""Phase env, launch.topology and --baseline on real namespaces: real differences between
the nodes' environments, a broken Slurm launch, drift since a saved report."""

from __future__ import annotations

import json
import re
import signal

import pytest

from cluster import NodeSpec
from faults import Agent, wait_until
from nodes import PORT, bind_mounted, explain, finish_all, scaled, start

pytestmark = pytest.mark.root_required


def ranked(i: int, n: int, *extra: str) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(scaled(40)),
            *extra]


def fake_package(root, name: str, version: str) -> str:
    """A package installed for one node only: its dist-info on that node's PYTHONPATH."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(root)


def test_differences_between_nodes_are_named(cluster, tmp_path):
    shared = tmp_path / "model.cfg"
    shared.write_text("lr = 0.1\n")
    odd = tmp_path / "model-node2.cfg"
    odd.write_text("lr = 0.2\n")
    envs = [{}, {"PYTHONPATH": fake_package(tmp_path / "site1", "deepspeed", "0.14.0")},
            {"NCCL_IB_DISABLE": "1"}]
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = [start(c, i, ranked(i, 3, "--hash", str(shared)), tmp_path, env=envs[i],
                      wrapper=bind_mounted(odd, shared) if i == 2 else ()) for i in range(3)]
        finish_all(runs, 60)
    host = runs[0]
    # node2's hash differs (a failure), the rest warns: node2 alone is at fault (issue 65)
    assert [(r.rc, r.report["faulty_nodes"]) for r in runs] == [(4, ["node2"]), (4, ["node2"]), (2, ["node2"])], \
        explain(runs)
    env = host.findings("env.mismatch")
    texts = {f["severity"]: f for f in env if f["nodes"] == [2]}
    assert "hash." + str(shared) in " ".join(texts["fail"]["evidence"]), env
    (nccl,) = [f for f in env if "var.NCCL_IB_DISABLE: unset on the other 2" in f["evidence"]]
    assert (nccl["severity"], nccl["nodes"]) == ("warn", [2]), nccl
    (deepspeed,) = [f for f in env if "pkg.deepspeed: 0.14.0 on node1" in f["evidence"]]
    assert deepspeed["nodes"] == [1], deepspeed
    rows = {(r["key"], r["nodes"]) for r in host.report["env_table"]}
    assert ("var.NCCL_IB_DISABLE", "node2") in rows


def test_a_hash_path_no_node_can_read_is_never_a_pass(cluster, tmp_path):
    """--hash with a typo (or a shared filesystem mounted nowhere): every node fails to read it
    the same way, which once passed as "the nodes agree"; each node is named, and exits 2."""
    typo = str(tmp_path / "shared" / "tyop")
    with cluster([NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ranked(i, 2, "--hash", typo, "--skip", "bandwidth"), tmp_path)
                           for i in range(2)], scaled(40) + 20)
    assert [r.rc for r in runs] == [2, 2], explain(runs)
    (found,) = runs[0].findings("env.mismatch", "fail")
    assert (found["kind"], found["nodes"]) == ("hash_unreadable", [0, 1]) and typo in found["summary"], found
    assert "FileNotFoundError" in found["evidence"][0], found


def test_a_hang_that_would_not_be_diagnosable_is_warned_per_node_and_torchs_defaults_pass(cluster, tmp_path):
    """torch 2.13's defaults record and dump (env.flight_recorder passes, exit 0); the same cluster
    with the recorder off on node1, no dump on a timeout there and error handling off on both warns
    once per cause and set of nodes (exit 1), beside env.mismatch for what differs between them."""
    off = {"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    with cluster([NodeSpec(), NodeSpec()]) as c:
        clean = finish_all([start(c, i, ranked(i, 2), tmp_path) for i in range(2)], 60)
        envs = [{"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, off]
        runs = finish_all([start(c, i, ranked(i, 2), tmp_path, env=envs[i]) for i in range(2)], 60)
    assert [r.rc for r in clean] == [0, 0], explain(clean)
    (passed,) = clean[0].findings("env.flight_recorder")
    assert passed["severity"] == "pass" and passed["nodes"] == [0, 1], passed
    assert [r.rc for r in runs] == [1, 1], explain(runs)
    warned = {f["kind"]: f for f in runs[0].findings("env.flight_recorder", "warn")}
    assert {k: f["nodes"] for k, f in warned.items()} == {
        "recorder_off": [1], "no_dump_on_timeout": [1], "watchdog_cannot_abort": [0, 1]}, warned
    assert warned["recorder_off"]["evidence"] == ["node1: TORCH_FR_BUFFER_SIZE=0"]
    assert warned["recorder_off"]["fix"].startswith("export TORCH_FR_BUFFER_SIZE=2000")
    assert warned["no_dump_on_timeout"]["fix"].startswith("export TORCH_NCCL_DUMP_ON_TIMEOUT=1")
    assert warned["watchdog_cannot_abort"]["fix"].startswith("export TORCH_NCCL_ASYNC_ERROR_HANDLING=3")
    differ = [e for f in runs[0].findings("env.mismatch", "warn") for e in f["evidence"]]
    assert "var.TORCH_FR_BUFFER_SIZE: 0 on node1" in differ, differ


def test_broken_slurm_launch_fails_launch_topology(cluster, tmp_path):
    """srun with --ntasks-per-node=3 on node1: three netchecks claim one node rank there, and
    the ones with SLURM_LOCALID 1 and 2 would use GPUs that CUDA_VISIBLE_DEVICES=0 lacks."""
    base = {"SLURM_NNODES": "2", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[0-1]"}
    with cluster([NodeSpec(), NodeSpec()]) as c:
        args = ["--rdzv", f"node0:{PORT}", "--timeout", str(scaled(30))]
        tasks = [start(c, 1, args, tmp_path, terminal=True,
                       env={**base, "SLURM_NODEID": "1", "SLURM_LOCALID": str(k), "SLURM_NTASKS_PER_NODE": "3",
                            "CUDA_VISIBLE_DEVICES": "0"}) for k in range(3)]
        for task in tasks:  # all three wait at the endpoint before the host exists: none comes late
            task.wait_for_progress("netcheck: reach", scaled(30))
        runs = [start(c, 0, args, tmp_path, env={**base, "SLURM_NODEID": "0"})] + tasks
        # The host judges the launch over the processes in by its goodbye: the seated task is
        # held (SIGSTOP) in the mesh until the other two, importing torch beside it on a busy
        # machine, have signed in too (one run saw one of them come after the goodbye).
        agent = Agent.start(c, 0, "watch", f"127.0.0.1:{PORT}", run_id=base["SLURM_JOB_ID"])
        seated = wait_until(lambda: next((t for t in tasks if "netcheck: mesh..." in t.progress), None),
                            scaled(60), "a task seated")
        c.kill(seated.proc, signal.SIGSTOP)
        for _ in range(4):  # the host and node1's three tasks
            agent.wait_for(r"^arrival \d+ ", scaled(60))
        c.kill(seated.proc, signal.SIGCONT)
        finish_all(runs, 60)
    host = runs[0]
    # node1's tasks are at fault, the seated one by its rank and the others that came late by name
    assert (host.rc, host.report["fault"]["party"], host.report["faulty_nodes"]) == (4, "other_nodes", ["node1"]), \
        explain(runs)
    topo = host.findings("launch.topology", "fail")
    # The tasks waited at the endpoint, so they race only one another for the seat.
    crowded = next(f for f in topo if re.search(r"[23] netcheck processes on node1", f["summary"]))
    assert "SLURM_NTASKS_PER_NODE=3" in crowded["summary"] and "--ntasks-per-node=1" in crowded["fix"]
    devices = next(f for f in topo if "GPU that is not there" in f["summary"])
    assert {e.split(",")[0] for e in devices["evidence"]} <= {"node1: local rank 1", "node1: local rank 2"}
    assert "only 1 visible device(s)" in devices["evidence"][0]
    assert host.findings("rdzv.join", "fail"), "the duplicated node rank is named too"
    # Each of node1's tasks says it of itself too, the one that got the seat included.
    assert [r.rc for r in runs[1:]] == [2, 2, 2], explain(runs)
    assert all(any(f["kind"] == "crowded_host" for f in r.findings("launch.topology", "fail")) for r in runs[1:])


def test_baseline_names_a_changed_variable_and_hash(cluster, tmp_path):
    code = tmp_path / "train.py"
    code.write_text("print('v1')\n")
    first = tmp_path / "good.json"
    with cluster([NodeSpec(), NodeSpec()]) as c:
        runs = finish_all([start(c, i, ranked(i, 2, "--hash", str(code)), tmp_path) for i in range(2)], 60)
        assert [r.rc for r in runs] == [0, 0], explain(runs)
        first.write_text(runs[0].json_path.read_text())
        code.write_text("print('v2')\n")
        envs = [{}, {"NCCL_DEBUG": "INFO"}]
        runs = finish_all([start(c, i, ranked(i, 2, "--hash", str(code),
                                              *(["--baseline", str(first)] if i == 0 else [])),
                                 tmp_path, env=envs[i]) for i in range(2)], 60)
    (drift,) = runs[0].findings("baseline.drift", "warn")
    assert drift["nodes"] == [0, 1], drift
    assert any(e.startswith("node1: var.NCCL_DEBUG: (none) -> INFO") for e in drift["evidence"]), drift
    assert sum(f"hash.{code}" in e for e in drift["evidence"]) == 2, drift
    assert json.loads(first.read_text())["verdict"] == "pass"


def test_unusable_baseline_is_a_usage_error(tmp_path):
    bad = tmp_path / "truncated.json"
    bad.write_text('{"schema": "netcheck.report/1", "verdict": ')
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "netcheck", "--rdzv", "node0", "--baseline", str(bad)],
                          capture_output=True, text=True, timeout=scaled(30))
    assert done.returncode == 64 and done.stderr.count("\n") == 1, done.stderr
    assert "not a netcheck.report/1 report" in done.stderr
