"""netcheck as Slurm's gate on a real Slurm 22.05 (tests/slurm.py): scripts/netcheck-health run by
slurmd itself as its HealthCheckProgram (every HealthCheckInterval, and when slurmd starts) and
as a Prolog, and the job-step form (scripts/netcheck.sbatch with --drain). A node at fault is
drained with netcheck's reason and resumed once the fault is gone; a healthy node is never
touched; a node another reason holds keeps it.

slurmd runs its HealthCheckProgram with SLURMD_NODENAME alone in its environment, so each node's
program here is a two-line wrapper that names what a site's node has in place: slurm.conf
(SLURM_CONF, here a test folder's), the netcheck of the training environment (NETCHECK), and
/etc/nccl.conf (NCCL_CONF_FILE: `ip netns exec` can bind a file over /etc/nccl.conf only where
the machine has one). The fabric link is a second interface, data0, that the site's NCCL
configuration names (NCCL_SOCKET_IFNAME=data0): its cable pulled (its peer down, no carrier),
NCCL has no interface there, while slurmd keeps talking to slurmctld over eth0.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from cluster import NodeSpec
from nodes import CLUSTER_TIMEOUT, PORT, scaled
from slurm import CTLD, POLL, VENV_BIN, Slurm
from sysfs_fixtures import build

pytestmark = pytest.mark.root_required

REPO = Path(__file__).resolve().parents[1]
HEALTH = REPO / "scripts" / "netcheck-health"
SBATCH = REPO / "scripts" / "netcheck.sbatch"
INTERVAL = 5   # HealthCheckInterval, seconds: slurmctld asks each slurmd to run it this often


def slurm_nodes(n: int) -> list[NodeSpec]:
    return [NodeSpec() for _ in range(n)] + [NodeSpec(hostname=CTLD)]


def program(folder: Path, slurm: Slurm, **env: str) -> Path:
    """The HealthCheckProgram (or Prolog) slurmd runs: the shipped script, with what a site's node
    has in place named; each run's exit status appended to runs-NODE.log."""
    names = {"SLURM_CONF": str(slurm.conf), "NETCHECK": f"{VENV_BIN}/netcheck", **env,
             **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})}
    exports = "".join(f"export {k}={v}\n" for k, v in names.items())
    path = folder / "health.sh"
    path.write_text(f'#!/bin/sh\n{exports}{HEALTH}\nrc=$?\necho "$rc" >> {folder}/runs-"$SLURMD_NODENAME".log\n'
                    'exit "$rc"\n')
    path.chmod(0o755)
    return path


def fabric(c, i: int, folder: Path) -> None:
    """data0 on node i, the interface the site's NCCL configuration names."""
    c.add_decoy(i, "data0", f"198.19.10.{i + 1}/24")
    (folder / f"nccl-node{i}.conf").write_text("NCCL_SOCKET_IFNAME=data0\n")


def pull_cable(c, i: int, up: bool = False) -> None:
    subprocess.run(["ip", "netns", "exec", c.nodes[i].ns, "ip", "link", "set", "data0p", "up" if up else "down"],
                   check=True)


def nodes(slurm: Slurm) -> dict[str, tuple[str, str]]:
    """node -> (state, reason) as `sinfo -N` shows them."""
    done = slurm.c.run(slurm.ctld, ["sinfo", "-h", "-N", "-o", "%N %T %E"], timeout=scaled(20), env=slurm.env)
    return {name: (state, reason) for name, state, reason in (ln.split(" ", 2) for ln in done.stdout.splitlines())}


def drained_reasons(slurm: Slurm) -> dict[str, str]:
    """`sinfo -R`: the nodes held, with their reasons."""
    done = slurm.c.run(slurm.ctld, ["sinfo", "-R", "-h", "-N", "-o", "%N|%E"], timeout=scaled(20), env=slurm.env)
    return dict(ln.split("|", 1) for ln in done.stdout.splitlines())


def runs(folder: Path, node: str) -> list[str]:
    path = folder / f"runs-{node}.log"
    return path.read_text().split() if path.exists() else []


class Watch:
    """sinfo read every POLL seconds until a condition holds, every state seen kept: a node drained
    even once in between is seen."""

    def __init__(self, slurm: Slurm):
        self.slurm, self.seen = slurm, []

    def until(self, ready, what: str, seconds: float = scaled(60)) -> dict[str, tuple[str, str]]:
        end = time.monotonic() + seconds
        while not ready(now := nodes(self.slurm)):
            self.seen.append(now)
            assert time.monotonic() < end, f"not {what} in {seconds} s: {now}; slurmd's logs:\n{self.logs()}"
            time.sleep(POLL)
        self.seen.append(now)
        return now

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted((self.slurm.root / "log").glob("slurmd-*")))

    def states_of(self, node: str) -> set[str]:
        return {seen[node][0] for seen in self.seen}


def test_health_check_drains_the_node_whose_fabric_link_is_down_resumes_it_once_mended_and_leaves_the_rest(
        cluster, tmp_path):
    """slurmd runs netcheck every 5 s on three nodes. node1's data0 loses its carrier: it is
    drained within an interval with netcheck's reason (sinfo -R). node2, drained by an admin, has
    the same fault: its reason stays the admin's. The cables back: node1 is resumed, node2 stays
    drained. node0, healthy throughout, is never touched."""
    tmp_path.chmod(0o755)
    with cluster(slurm_nodes(3)) as c:
        for i in range(3):
            fabric(c, i, tmp_path)
        conf = f"HealthCheckInterval={INTERVAL}\nHealthCheckProgram={tmp_path / 'health.sh'}\n"
        slurm = Slurm(c, 3, conf=conf)
        program(tmp_path, slurm, NCCL_CONF_FILE=str(tmp_path / "nccl-$SLURMD_NODENAME.conf"),
                NETCHECK_PROM=str(tmp_path / "$SLURMD_NODENAME.prom"))
        with slurm:
            watch = Watch(slurm)
            watch.until(lambda now: all(now[f"node{i}"] == ("idle", "none") for i in range(3)), "3 idle nodes")
            admin = c.run(slurm.ctld, ["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=bad DIMM"],
                          timeout=scaled(20), env=slurm.env)
            assert admin.returncode == 0, admin.stderr
            pull_cable(c, 1)
            pull_cable(c, 2)
            passed = len(runs(tmp_path, "node0"))
            watch.until(lambda now: now["node1"][0] == "drained", "node1 drained", scaled(3 * INTERVAL))
            held = drained_reasons(slurm)
            metrics = {n: (tmp_path / f"{n}.prom").read_text() for n in ("node0", "node1")}
            # node2 has run the check at least twice since its cable was pulled: its reason held.
            since = len(runs(tmp_path, "node2"))
            watch.until(lambda now: len(runs(tmp_path, "node2")) >= since + 2, "node2 checked twice")
            assert drained_reasons(slurm)["node2"] == "bad DIMM"
            pull_cable(c, 1, up=True)
            pull_cable(c, 2, up=True)
            after = watch.until(lambda now: now["node1"][0] == "idle", "node1 resumed", scaled(3 * INTERVAL))
            since = len(runs(tmp_path, "node2"))
            watch.until(lambda now: len(runs(tmp_path, "node2")) >= since + 2, "node2 checked twice")
            final = nodes(slurm)
    assert held["node1"].startswith("netcheck: nic.route: node1: NCCL_SOCKET_IFNAME=data0"), held
    assert set(held) == {"node1", "node2"} and held["node2"] == "bad DIMM", held
    # What the metrics said meanwhile (NETCHECK_PROM): node1 at fault, node0 nobody's.
    assert 'netcheck_fault{party="this_node"} 1' in metrics["node1"], metrics["node1"]
    assert 'netcheck_fault{party="nobody"} 1' in metrics["node0"], metrics["node0"]
    assert after["node1"] == ("idle", "none") and final["node2"] == ("drained", "bad DIMM"), final
    assert watch.states_of("node0") == {"idle"} and len(runs(tmp_path, "node0")) > passed, watch.seen
    assert set(runs(tmp_path, "node0")) == {"0"}
    assert "2" in runs(tmp_path, "node1") and runs(tmp_path, "node1")[-1] == "0"


def test_health_check_drains_a_node_whose_slurmd_gives_rdma_jobs_64_kib_of_locked_memory_until_restarted(
        cluster, tmp_path):
    """An RDMA node (8 active ports, tests/sysfs_fixtures.py) whose slurmd was started under
    `ulimit -l 64` (a unit without LimitMEMLOCK=infinity): the jobs it starts inherit it, and
    NCCL cannot register its buffers. The HealthCheckProgram, slurmd's child, inherits it too, and
    drains the node. slurmd restarted with locked memory unlimited runs the check before it
    registers, and the node comes back. (This suite's container cannot raise a hard limit past
    the 8 MiB it was given, which NCCL fails at too: the restarted slurmd's unlimited limit is the
    fixture's word, through its proc/self/limits, as in test_rdma_cluster.)"""
    tmp_path.chmod(0o755)
    root = build(tmp_path / "fx", "hgx")
    limits = root / "proc/self/limits"
    unlimited = limits.read_text()
    limits.unlink()   # this process's own limits are read: slurmd's, inherited
    with cluster(slurm_nodes(1)) as c:
        conf = f"HealthCheckInterval={INTERVAL}\nHealthCheckProgram={tmp_path / 'health.sh'}\n"
        slurm = Slurm(c, 1, conf=conf, wrap={0: ["prlimit", "--memlock=65536:65536", "--"]})
        program(tmp_path, slurm, NETCHECK_TEST_RDMA_ROOT=str(root))
        with slurm:
            watch = Watch(slurm)
            watch.until(lambda now: now["node0"][0] == "drained", "node0 drained", scaled(3 * INTERVAL))
            held = drained_reasons(slurm)
            c.kill(slurm.daemons[1])
            slurm.daemons[1].wait(timeout=10)
            limits.write_text(unlimited)
            slurm.wrap.clear()
            slurm.daemons[1] = slurm.slurmd(0)
            back = watch.until(lambda now: now["node0"] == ("idle", "none"), "node0 resumed", scaled(4 * INTERVAL))
    assert held["node0"].startswith("netcheck: host.limits memlock: locked memory is limited on node0"), held
    assert back["node0"] == ("idle", "none")
    assert runs(tmp_path, "node0")[0] == "2" and runs(tmp_path, "node0")[-1] == "0"


def test_job_step_drains_the_node_it_puts_at_fault_and_the_prolog_holds_a_job_off_a_node_with_its_link_down(
        cluster, tmp_path):
    """scripts/netcheck.sbatch with --drain on three nodes, node2 cut off from the rendezvous
    port: the host drains node2 alone, with netcheck's reason, and exclude.txt names it as
    scontrol and --exclude take it. The prolog (scripts/netcheck-health as Prolog) ran before
    that job on every node and let it through; node1's fabric link down, a job sent there fails
    its prolog: Slurm drains node1 and requeues the job, while a job on node0 runs."""
    tmp_path.chmod(0o755)
    with cluster(slurm_nodes(3)) as c:
        fabric(c, 1, tmp_path)
        slurm = Slurm(c, 3, conf=f"Prolog={tmp_path / 'health.sh'}\n")
        program(tmp_path, slurm, NCCL_CONF_FILE=str(tmp_path / "nccl-$SLURMD_NODENAME.conf"))
        with slurm:
            c.drop_inbound(0, PORT, source=2)
            done = slurm.sbatch("--nodes=3", str(SBATCH), "--timeout", str(CLUSTER_TIMEOUT), "--skip", "bandwidth",
                                "--drain", timeout=scaled(120))
            exclude = next(slurm.work.glob("netcheck-*/exclude.txt")).read_text()
            held = drained_reasons(slurm)
            c.clear_firewall(0)
            pull_cable(c, 1)
            refused = slurm.c.run(slurm.ctld, ["sbatch", "--parsable", f"--chdir={slurm.work}", "--nodelist=node1",
                                               "--wrap", "hostname"], timeout=scaled(20), env=slurm.env)
            watch = Watch(slurm)
            after = watch.until(lambda now: now["node1"][0].startswith("drain"), "node1 drained by its prolog")
            job = slurm.job(refused.stdout.strip())
            ran = slurm.sbatch("--nodelist=node0", "--wrap", "hostname", timeout=scaled(60))
    assert done.returncode == 4 and exclude == "node2\n", done.stdout + done.stderr
    assert set(held) == {"node2"} and held["node2"].startswith("netcheck: rdzv."), held
    # The prolog exits 1 where a check fails on its node (Slurm takes any non-zero exit so).
    assert set(runs(tmp_path, "node0")) == {"0"} and runs(tmp_path, "node1") == ["0", "1"], tmp_path
    assert after["node1"][1] == "Prolog error" and job["JobState"] in ("PENDING", "REQUEUED"), (after, job)
    assert ran.returncode == 0
