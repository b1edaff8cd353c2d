"""scripts/netcheck.sbatch under a real Slurm 22.05 (tests/slurm.py): what operators rely on,
kept true across Slurm upgrades and script changes."""

from __future__ import annotations

import re
import signal

import pytest

from cluster import NodeSpec
from nodes import CLUSTER_TIMEOUT, PORT, read_report, scaled
from slurm import CTLD, Slurm

pytestmark = pytest.mark.root_required

SBATCH = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "scripts" / "netcheck.sbatch")
QUICK = ["--skip", "bandwidth"]


def slurm_nodes(n: int) -> list[NodeSpec]:
    return [NodeSpec() for _ in range(n)] + [NodeSpec(hostname=CTLD)]


def job_id(done) -> str:
    return re.search(r"Submitted batch job (\d+)", done.stdout)[1]


def test_a_healthy_three_node_allocation_completes_with_a_report_per_node(cluster):
    with cluster(slurm_nodes(3)) as c, Slurm(c, 3) as slurm:
        done = slurm.sbatch("--nodes=3", SBATCH, "--timeout", str(scaled(30)), *QUICK, timeout=scaled(120))
        jid = job_id(done)
        state = slurm.job(jid)
        folder = slurm.work / f"netcheck-{jid}"
        reports = sorted(p.name for p in folder.iterdir())
        host = read_report(folder / "netcheck-node0.json")
        exclude = (folder / "exclude.txt").read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), state
    assert reports == ["exclude.txt", "netcheck-node0.json", "netcheck-node1.json", "netcheck-node2.json"]
    assert host["verdict"] == "pass" and host["run_id"] == jid and host["healthy_nodes"] == ["node0", "node1", "node2"]
    assert exclude == ""


def test_a_node_cut_off_from_the_rendezvous_port_is_excluded_and_the_next_job_runs_without_it(cluster):
    with cluster(slurm_nodes(3)) as c, Slurm(c, 3) as slurm:
        c.drop_inbound(0, PORT, source=2)
        # node1 must sign in inside the host's join share: else the next job has one node
        done = slurm.sbatch("--nodes=3", SBATCH, "--timeout", str(CLUSTER_TIMEOUT), *QUICK, timeout=scaled(120))
        folder = slurm.work / f"netcheck-{job_id(done)}"
        exclude = (folder / "exclude.txt").read_text().strip()
        after = slurm.sbatch(f"--exclude={exclude}", "--nodes=2", "--output=after.out", "--wrap",
                             "srun --ntasks-per-node=1 hostname -s", timeout=scaled(60))
        ran = (slurm.work / "after.out").read_text().split()
    # srun's code is its tasks' highest: node2's own 2 (it cannot reach the endpoint) beside the
    # others' 4 (another node at fault, named: node2)
    assert done.returncode == 4, done.stdout + done.stderr
    assert exclude == "node2"
    assert after.returncode == 0 and sorted(ran) == ["node0", "node1"], after.stdout + after.stderr


def test_two_tasks_per_node_forced_by_the_user_is_named_as_the_launch_mistake(cluster):
    """`srun netcheck` in an allocation of 2 tasks per node: two netchecks per node claim one
    node rank (the `srun torchrun` with --ntasks-per-node=8 mistake). Each task reads it in its
    own launch (its first phase, before it looks for the host): the run stops there, not after
    the host has waited out its join share for the ranks the crowd never fills
    (test_env_cluster has the host's view of a crowded launch)."""
    task = (f"exec netcheck --rdzv node0:{PORT} --timeout {scaled(30)} --only local "
            "--json report-$SLURM_PROCID.json")
    with cluster(slurm_nodes(2)) as c, Slurm(c, 2) as slurm:
        slurm.sbatch("--nodes=2", "--ntasks-per-node=2", "--wrap", f"srun bash -c '{task}'", timeout=scaled(120))
        reports = [read_report(p) for p in sorted(slurm.work.glob("report-*.json"))]
    assert len(reports) == 4
    # Every task says it of itself, whichever won the race to host.
    crowded = [[f for f in r["findings"] if (f["check"], f["kind"]) == ("launch.topology", "crowded_host")]
               for r in reports]
    assert all(crowded), [r["findings"] for r in reports]
    assert "SLURM_NTASKS_PER_NODE=2" in crowded[0][0]["summary"]


def test_a_node_whose_task_never_starts_is_named_by_its_hostname(cluster):
    """node2's slurmd hangs once the allocation is made: its task never starts, and the host
    names node rank 2 by the hostname Slurm's node list gives it."""
    with cluster(slurm_nodes(3)) as c, Slurm(c, 3) as slurm:
        c.kill(slurm.daemons[3], signal.SIGSTOP)   # daemons: slurmctld, then slurmd of node0..2
        done = slurm.sbatch("--nodes=3", SBATCH, "--timeout", str(scaled(30)), *QUICK, timeout=scaled(180))
        folder = slurm.work / f"netcheck-{job_id(done)}"
        host = read_report(folder / "netcheck-node0.json")
        exclude = (folder / "exclude.txt").read_text().strip()
        c.kill(slurm.daemons[3], signal.SIGCONT)
    missing = [f for f in host["findings"] if f["kind"] == "missing"]
    assert [f["nodes"] for f in missing] == [[2]] and "(node2)" in missing[0]["summary"], host["findings"]
    assert exclude == "node2" and done.returncode != 0
