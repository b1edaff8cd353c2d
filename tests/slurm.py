"""A real Slurm cluster on network namespaces: slurmctld in its own namespace on the bridge
(a node's firewall cannot cut it off), one slurmd per node namespace named for its node,
and a private munged with its own key and socket. Jobs go in with real `sbatch`.

What makes Slurm 22.05 run here: `ip netns exec` mounts a fresh /sys, so cgroup.conf says
cgroup/v1 without automount and nothing uses cgroups (proctrack/linuxproc, task/none,
jobacct_gather/none); SlurmdParameters=config_overrides stops the nodes' CPUs and memory
being checked against the machine's; munged wants every folder above its socket
world-searchable, hence a folder of its own in /tmp. Only the daemons started here are
stopped, by their processes.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from cluster import Cluster
from nodes import scaled

CTLD = "ctld"
SRUN_PORTS = "60001-60100"
VENV_BIN = str(Path(__file__).resolve().parents[1] / ".venv" / "bin")
# COMPLETING is finished, as for `sbatch --wait`: the batch script has ended, a node may still be
# cleaning up (or stopped, as one test leaves it).
UNFINISHED = ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED")
POLL = 0.2


def exit_code(slurm_exit: str) -> int:
    """A process's exit status from Slurm's ExitCode "code:signal" (as `sbatch --wait` gives it)."""
    code, sig = (int(part) for part in slurm_exit.split(":"))
    return code or (128 + sig if sig else 0)


class Slurm:
    """Slurm over the first `nodes` nodes of `c`; its last node is the controller's."""

    def __init__(self, c: Cluster, nodes: int, conf: str = "", wrap: Mapping[int, Sequence[str]] | None = None):
        """`conf`: slurm.conf lines added; `wrap`: node -> the command its slurmd starts under
        (`prlimit --memlock=...`: the limits a site's slurmd unit gives it)."""
        self.c, self.n = c, nodes
        self.extra_conf, self.wrap = conf, dict(wrap or {})
        self.ctld = len(c.nodes) - 1
        assert c.nodes[self.ctld].hostname == CTLD, "the cluster's last node is the controller's"
        self.root = Path(tempfile.mkdtemp(prefix="netcheck-slurm-", dir="/tmp"))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.daemons: list[subprocess.Popen] = []
        self.munged: subprocess.Popen | None = None

    def __enter__(self) -> "Slurm":
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in self.daemons:
            self.c.kill(p)
            p.wait(timeout=10)
        if self.munged is not None:
            self.munged.terminate()
            self.munged.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def env(self) -> dict[str, str]:
        """What a submitting user has: Slurm's config, and netcheck on PATH (jobs inherit it)."""
        return {"SLURM_CONF": str(self.conf), "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}

    def _start(self) -> None:
        key, socket = self.root / "munge.key", self.root / "munge.socket"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        for name in ("state", "log", "work"):
            (self.root / name).mkdir(mode=0o755)
        (self.root / "work").chmod(0o777)
        self.munged = subprocess.Popen(
            ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={socket}",
             f"--pid-file={self.root}/munged.pid", f"--seed-file={self.root}/munged.seed",
             f"--log-file={self.root}/log/munged.log"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait(lambda: socket.exists() or self.munged.poll() is not None, "munged's socket")
        assert self.munged.poll() is None, (self.root / "log" / "munged.log").read_text()
        self.conf.write_text(self._config(socket))
        (self.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        self.daemons.append(self.c.popen(self.ctld, ["slurmctld", "-D", "-f", str(self.conf)], env=self.env,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.daemons += [self.slurmd(i) for i in range(self.n)]
        self._wait(self._registered, f"{self.n} registered nodes")

    def slurmd(self, i: int) -> subprocess.Popen:
        """Node i's slurmd, started (daemons[1 + i] holds it)."""
        argv = [*self.wrap.get(i, ()), "slurmd", "-D", "-f", str(self.conf), "-N", self.c.nodes[i].hostname]
        return self.c.popen(i, argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _registered(self) -> bool:
        """Every node has registered and answers (idle, or drained by its health check)."""
        states = self.states()
        return len(states) == self.n and not any(s.startswith("unknown") or s.endswith("*") for s in states)

    def _config(self, socket: Path) -> str:
        nodes = "\n".join(f"NodeName={self.c.nodes[i].hostname} NodeAddr={self.c.nodes[i].addr} CPUs=2 "
                          "RealMemory=100 State=UNKNOWN" for i in range(self.n))
        r = self.root
        return f"""ClusterName=netcheck
SlurmctldHost={CTLD}({self.c.nodes[self.ctld].addr})
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool-%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
SrunPortRange={SRUN_PORTS}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/linear
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
{self.extra_conf}"""

    def _wait(self, ready, what: str) -> None:
        end = time.monotonic() + scaled(30)
        while not ready():
            assert time.monotonic() < end, f"no {what} in {scaled(30)} s; logs in {self.root}/log"
            time.sleep(0.1)

    def states(self) -> list[str]:
        done = self.c.run(self.ctld, ["sinfo", "-h", "-N", "-o", "%T"], timeout=scaled(20), env=self.env)
        return done.stdout.split()

    def sbatch(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        """Submit from the controller's namespace and wait for the job's end: the exit code is
        the job's, stdout sbatch's "Submitted batch job N". Output files land in the shared
        work folder. Not `sbatch --wait`: it polls at 2, 4, 8, 16 and 32 s, so a 15 s job
        took 30 s and a 31 s one a minute; the job's state is read here every POLL seconds."""
        submitted = self.c.run(self.ctld, ["sbatch", "--parsable", f"--chdir={self.work}", *args],
                               timeout=scaled(20), env=self.env)
        if submitted.returncode != 0:
            return submitted
        job_id = submitted.stdout.strip().split(";")[0]
        end = time.monotonic() + timeout
        while (state := self.job(job_id))["JobState"] in UNFINISHED:
            assert time.monotonic() < end, f"job {job_id} still {state['JobState']} after {timeout} s"
            time.sleep(POLL)
        return subprocess.CompletedProcess(submitted.args, exit_code(state["ExitCode"]),
                                           f"Submitted batch job {job_id}\n", submitted.stderr)

    def job(self, job_id: str) -> dict[str, str]:
        done = self.c.run(self.ctld, ["scontrol", "-o", "show", "job", job_id], timeout=scaled(20), env=self.env)
        return dict(field.split("=", 1) for field in done.stdout.split() if "=" in field)

    @property
    def work(self) -> Path:
        return self.root / "work"
