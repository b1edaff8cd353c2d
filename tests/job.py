"""The real job netcheck's verdict speaks for, run on a test cluster: its fate is the judge that
cannot be tuned (docs/contract.md, "How the promises are tested"; issue 64).

The job is the README's shape, small: `torchrun --nnodes N --nproc-per-node P` on every node of
the cluster (P 1, or 4: a node's ranks on one host), with the static rendezvous (`--master-addr
node0 --master-port PORT --node-rank K`) or the c10d one (`--rdzv-backend c10d --rdzv-endpoint
node0:PORT --rdzv-id ID`), each worker tests/gloo_allreduce.py --job: gloo's init_process_group,
all_reduces of 4 KiB, 256 KiB and 4 MiB (checked), 10 timed all_reduces of 4 MiB (busbw from the
median), 3 DDP steps of a 1 M-parameter model. Each worker (each rank) writes one JSON line of its
outcome; the harness reads them, and each torchrun agent's exit and console, into a fate:

    ok      every rank's worker wrote ok and every agent exited 0, at a busbw (the slowest rank's)
            at least SLOW_SHARE of a healthy control's (the best of CONTROL_RUNS jobs of the same
            shape, nodes x processes, on a clean cluster, measured at the start of the campaign run)
    slow    the same below that share, and below it of a healthy job's measured right after it
            (confirm_slow: the machine's load moves busbw as much as a crawl does)
    failed  a worker wrote an error, an agent exited non-zero, or one wrote no line: the first
            error (by the time it was written or seen) is kept
    hung    still running job_bound(n, P) seconds after the launch (30 s + 5 s a torch import, an
            agent's or a worker's: 60 s for 3 nodes x 1, 80 s for 2 x 4), with no error seen: killed
            then (every agent's process group and every worker under it). But a job every worker of
            which was past init_process_group and said a new stage within the last STALL seconds
            was still moving: slow, not hung (a 20 Mbit/s link takes longer than the bound), its
            busbw the timed all_reduces' so far where it had any

A job that failed on one node is not waited for on the others: they get FAILED_GRACE to say
their own error, then are killed (the fate is decided at the first error). The job waits as a
real one does (torch's default 30-minute collective timeout, torchrun's 600 s rendezvous), so a
hang is the harness's bound, not the job's timeout.

The environment: what the operator sets (`Launch.envs`: nothing for the bare launch; netcheck's
export lines, the host report's `recommend` with its `recommend_per_node` for that node's
hostname, for the export launch) over the harness's own, with MASTER_*/RANK-like variables of
an outer launcher removed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import psutil

from cluster import Cluster, NodeSpec
from nodes import PORT, scaled

JOB = Path(__file__).with_name("gloo_allreduce.py")
FAILED_GRACE = scaled(5)    # the other nodes' time to write their own error once one has failed
STALL = scaled(10)          # at the bound, a worker that said no new stage for this long is stuck
# Below this share of the healthy control's busbw, a job that ran is slow; the control is the best
# of CONTROL_RUNS healthy jobs (one run measured at a loaded moment was 0.096 GB/s for 4 nodes,
# where healthy 4-node jobs beside it ran at 0.45, and called a crawl ok). Not a half: on this busy
# 2-core machine (load 8-13) healthy jobs ran at 0.13-0.69 GB/s within an hour, 3-node controls
# measured 0.35-0.48: a loaded healthy job comes out at 0.27 of the best control. The crawls: 4 KiB
# socket buffers at 0.019-0.048 GB/s (0.07-0.17 of theirs), a 20 Mbit/s link at 0.002. Lossy links
# of 2% and 5% ran at full speed.
SLOW_SHARE = 0.2
CONTROL_RUNS = 3
FATES = ("ok", "slow", "failed", "hung")
RAN = ("ok", "slow")
# An outer launcher's variables (the harness may run under torchrun or Slurm): not the job's.
OUTER = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
         "TORCHELASTIC_RUN_ID", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
POLL = 0.1


@dataclass(frozen=True)
class Launch:
    """How the job is launched on each node of an n-node cluster."""

    n: int
    rdzv: str = "static"                 # static | c10d
    endpoint: str = f"node0:{PORT}"      # --master-addr:--master-port, or --rdzv-endpoint
    name: str = "bare"                   # bare | export: whether the operator set netcheck's export lines
    ranks: tuple[int, ...] = ()          # --node-rank per node (static), default the node index
    rdzv_ids: tuple[str, ...] = ()       # --rdzv-id per node (c10d), default "job"
    envs: tuple[Mapping[str, str], ...] = ()            # per node: the variables the operator sets
    wrappers: tuple[tuple[str, ...], ...] = ()          # per node: argv that execs torchrun (a limit)
    nproc: int = 1                       # --nproc-per-node: workers (ranks) a node

    def argv(self, i: int, out: Path, logs: Path) -> list[str]:
        host, port = self.endpoint.rsplit(":", 1)
        if self.rdzv == "static":
            rdzv = ["--master-addr", host, "--master-port", port,
                    "--node-rank", str(self.ranks[i] if self.ranks else i)]
        else:
            rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint,
                    "--rdzv-id", self.rdzv_ids[i] if self.rdzv_ids else "job"]
        wrapper = self.wrappers[i] if self.wrappers else ()
        return [*wrapper, sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.n),
                "--nproc-per-node", str(self.nproc), *rdzv, "--max-restarts", "0", "--redirects", "3",
                "--log-dir", str(logs), str(JOB), "--job", str(out)]

    def env(self, i: int) -> dict[str, str | None]:
        return {**{k: None for k in OUTER}, **(self.envs[i] if self.envs else {}), "FATE_NODE": str(i)}

    @property
    def world(self) -> int:
        """WORLD_SIZE: the job's ranks, its workers."""
        return self.n * self.nproc

    def describe(self) -> str:
        return f"{self.name} {self.rdzv} {self.endpoint}"


@dataclass
class JobRun:
    """What one launch left: each rank's worker line and last stage, each node's agent's exit."""

    launch: Launch
    # Keyed by worker, (node, rank): its file's name (node{FATE_NODE}.rank{RANK}); a rank copied on
    # two nodes (a launch line's --node-rank) is two workers.
    lines: dict[tuple[int, int], dict] = field(default_factory=dict)    # its JSON line
    stages: dict[tuple[int, int], dict] = field(default_factory=dict)   # its last stage record
    exits: dict[int, int | None] = field(default_factory=dict)   # node -> its agent's exit code (None: killed)
    exited_at: dict[int, float] = field(default_factory=dict)    # node -> wall time its exit was seen
    consoles: dict[int, str] = field(default_factory=dict)   # node -> its agent's console (stdout + stderr)
    killed: str = ""          # why the harness killed the job: "" (it ended), "bound", "failed"
    killed_at: float = float("inf")   # wall time the kill began: what a worker wrote after is the kill's
    seconds: float = 0.0


@dataclass
class Fate:
    fate: str                          # ok | slow | failed | hung
    launch: str = "bare"
    rdzv: str = "static"
    busbw: float | None = None         # GB/s, the slowest rank's
    control: float | None = None       # the healthy control's, GB/s
    control_now: float | None = None   # a healthy job's measured right after this one, where it looked slow
    first_error: str | None = None
    where: dict[str, str] = field(default_factory=dict)   # worker -> the stage it was in at the end (where_each)
    seconds: float = 0.0
    library: str = "gloo"

    @property
    def ran(self) -> bool:
        return self.fate in RAN

    def record(self) -> dict:
        return {"fate": self.fate, "launch": self.launch, "rdzv": self.rdzv, "library": self.library,
                "busbw": self.busbw, "control": self.control, "control_now": self.control_now,
                "share": SLOW_SHARE,
                "first_error": self.first_error, "where": self.where, "seconds": round(self.seconds, 1)}

    def describe(self) -> str:
        said = f"{self.launch} {self.rdzv}: {self.fate} in {self.seconds:.0f} s"
        if self.busbw is not None:
            said += f", busbw {self.busbw:.3f} GB/s" + (f" (control {self.control:.3f}" if self.control else "")
            said += (f", now {self.control_now:.3f})" if self.control_now else ")") if self.control else ""
        if self.first_error:
            said += f"; first error: {self.first_error}"
        elif self.fate == "hung" or (self.fate == "slow" and self.busbw is None):
            said += "; " + ", ".join(f"{k} in {v}" for k, v in self.where.items())
        return said


# --------------------------------------------------------------------------------------
# the fate, from what a launch left (pure: unit-tested)


ERROR_LINE = re.compile(r"(?:^|[\s.:])(?:[A-Za-z_][\w.]*(?:Error|Exception|Timeout))\b")


def console_error(text: str) -> str | None:
    """The line that says why a torchrun agent exited: its last exception line (a traceback's
    last line), else its last non-empty line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ERROR_LINE.search(ln) and not ln.startswith(("File ", "Traceback", "raise "))]
    line = errors[-1] if errors else (lines[-1] if lines else None)
    return line[:400] if line else None


def classify(run: JobRun, control: float | None, share: float = SLOW_SHARE) -> Fate:
    """The job's fate from one launch's leavings, over every rank: ok only where each of the
    launch's n x nproc workers wrote ok. `control` is the healthy job's busbw for its shape (None:
    unknown, and slowness is not judged)."""
    launch = run.launch
    fate = Fate("ok", launch.name, launch.rdzv, control=control, seconds=run.seconds)
    errors: list[tuple[float, str]] = []
    for (i, rank), line in sorted(run.lines.items()):
        # A peer's "Connection closed" once the harness began killing the job is the kill's doing.
        if not line.get("ok") and line.get("t", 0.0) < run.killed_at:
            errors.append((line.get("t", 0.0), f"node{i} rank {rank} in {line.get('stage')}: {line.get('error')}"))
    for i, rc in sorted(run.exits.items()):
        if rc not in (0, None):
            said = console_error(run.consoles.get(i, "")) or "(nothing said)"
            errors.append((run.exited_at.get(i, 0.0), f"node{i}'s torchrun exit {rc}: {said}"))
    fate.where = where_each(run)
    if errors:
        fate.fate, fate.first_error = "failed", min(errors)[1]
        return fate
    silent = {i: k for i in range(launch.n) if (k := launch.nproc - len(_lines_of(run, i))) > 0}
    if silent and run.killed:
        # Moving at the bound: every worker that wrote no line is past init, and said a stage lately.
        stages = [st for w, st in run.stages.items() if w not in run.lines]
        if len(stages) == sum(silent.values()) and all(
                st.get("stage") != "init_process_group" and st.get("t", 0.0) >= run.killed_at - STALL
                for st in stages):
            figures = [st["busbw"] for st in stages if "busbw" in st] + [
                line["busbw"] for line in run.lines.values() if "busbw" in line]
            fate.fate, fate.busbw = "slow", (min(figures) if len(figures) == launch.world else None)
            fate.where = {k: f"{v} (moving at the bound)" for k, v in fate.where.items()}
        else:
            fate.fate = "hung"
        return fate
    if silent:
        i, k = min(silent.items())
        fate.fate = "failed"
        fate.first_error = f"node{i}: " + (f"{k} of its {launch.nproc} workers" if launch.nproc > 1
                                           else "its worker") + " wrote no line"
        return fate
    # Every worker wrote its line (an agent's teardown may outlive the bound): its figure decides.
    fate.busbw = min(float(line["busbw"]) for line in run.lines.values())
    if control is not None and fate.busbw < share * control:
        fate.fate = "slow"
    return fate


def _lines_of(run: JobRun, node: int) -> list[dict]:
    return [line for (i, _), line in run.lines.items() if i == node]


def where_each(run: JobRun) -> dict[str, str]:
    """The stage each worker was in at the end ("node1", or "node1 rank 5" where a node runs
    several), and each node's workers that never said one (still in the rendezvous, or importing)."""
    per = run.launch.nproc
    where = {}
    for i in range(run.launch.n):
        ranks = sorted({rank for node, rank in (*run.lines, *run.stages) if node == i})
        for rank in ranks:
            record = run.lines.get((i, rank)) or run.stages[i, rank]
            where[f"node{i}" if per == 1 else f"node{i} rank {rank}"] = record.get("stage", "?")
        if len(ranks) < per:
            where[f"node{i}"] = ("rendezvous (no worker started)" if not ranks
                                 else f"rendezvous ({per - len(ranks)} of {per} workers not started)")
    return where


# --------------------------------------------------------------------------------------
# running a launch on a cluster


def confirm_slow(fate: Fate, control_now: float | None, share: float = SLOW_SHARE) -> Fate:
    """A job slow against the campaign's control is slow only if it is against a healthy job's
    figure measured right after it, too: the machine's other load swings busbw several times over
    within minutes (0.13-0.93 GB/s for healthy 3-node jobs in one hour), as much as a crawl lowers
    it. A job slow by its figure and not against `control_now` is ok: the load, not the cluster."""
    if fate.fate != "slow" or fate.busbw is None or control_now is None:
        return fate
    fate.control_now = control_now
    if fate.busbw >= share * control_now:
        fate.fate = "ok"
    return fate


def job_bound(n: int, nproc: int = 1) -> float:
    """Past this, a job with no error is hung: killed. A healthy 3-node job takes 15-25 s on this
    busy 2-core machine (3 torchrun agents, then 3 workers, import torch at once; then seconds of
    collectives): 5 s for each import, an agent's a node and a worker's a rank."""
    return scaled(30 + 5 * (n + n * nproc))


def run_job(c: Cluster, launch: Launch, tmp: Path, bound: float | None = None) -> JobRun:
    """The job on every node of `c`, waited for up to `bound` seconds (job_bound); what it left."""
    bound = job_bound(launch.n, launch.nproc) if bound is None else bound
    out = tmp / f"job-{launch.name}-{launch.rdzv}-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    run = JobRun(launch)
    agents, files = {}, {}
    started = time.monotonic()
    try:
        for i in range(launch.n):
            files[i] = open(out / f"agent{i}.log", "w+")
            agents[i] = c.popen(i, launch.argv(i, out, out / f"logs{i}"), env=launch.env(i),
                                stdout=files[i], stderr=subprocess.STDOUT)
        failed_at = None
        while True:
            now = time.monotonic()
            for i, p in agents.items():
                if i not in run.exits and p.poll() is not None:
                    run.exits[i], run.exited_at[i] = p.returncode, time.time()
            if len(run.exits) == launch.n:
                break
            if failed_at is None and (any(rc != 0 for rc in run.exits.values()) or _an_error_written(out)):
                failed_at = now
            if failed_at is not None and now - failed_at > FAILED_GRACE:
                run.killed, run.killed_at = "failed", time.time()
                break
            if now - started > bound:
                run.killed, run.killed_at = "bound", time.time()
                break
            time.sleep(POLL)
    finally:
        run.seconds = time.monotonic() - started
        for i, p in agents.items():
            # Killed, or ended since the last look, after the kill began: either way the kill's.
            run.exits.setdefault(i, None)
            _kill_tree(c, p)   # a worker outliving its agent (its own session) goes too
        for i, f in files.items():
            f.seek(0)
            run.consoles[i] = f.read()[-20000:]
            f.close()
    for path in out.glob("node*.rank*.json"):
        run.lines[worker_of(path)] = json.loads(path.read_text())
    for path in out.glob("node*.rank*.stage"):
        try:
            run.stages[worker_of(path)] = json.loads(path.read_text())
        except ValueError:
            pass
    return run


def worker_of(path: Path) -> tuple[int, int]:
    """(node, rank) from a worker's file name, node{FATE_NODE}.rank{RANK}.*."""
    node, rank = path.name.split(".")[:2]
    return int(node.removeprefix("node")), int(rank.removeprefix("rank"))


def _an_error_written(out: Path) -> bool:
    for path in out.glob("node*.rank*.json"):
        try:
            if not json.loads(path.read_text()).get("ok"):
                return True
        except ValueError:
            pass
    return False


def _kill_tree(c: Cluster, p) -> None:
    """SIGKILL an agent's process group and every process under it: torchrun starts each worker
    in a session of its own, which the group's kill leaves alive."""
    try:
        below = [q.pid for q in psutil.Process(p.pid).children(recursive=True)]
    except psutil.Error:
        below = []
    c.kill(p, signal.SIGKILL)
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:   # a zombie the cluster's teardown reaps
        pass


def job_fate(c: Cluster, launch: Launch, tmp: Path, control: float | None, bound: float | None = None) -> Fate:
    return classify(run_job(c, launch, tmp, bound), control)


def measure_control(n: int, tmp: Path, runs: int = CONTROL_RUNS, nproc: int = 1) -> list[Fate]:
    """The healthy control: the bare job, static rendezvous, `nproc` workers a node, on a clean
    n-node cluster, `runs` times back to back. Its figure is the best of those that ran (control_busbw)."""
    with Cluster([NodeSpec() for _ in range(n)]) as c:
        return [job_fate(c, Launch(n, nproc=nproc), tmp, None) for _ in range(runs)]


def control_busbw(fates: Sequence[Fate]) -> float | None:
    """What a healthy cluster of this size carries: the best figure of the control's runs (the
    machine's other load only ever lowers one); None where none ran."""
    return max((f.busbw for f in fates if f.fate == "ok" and f.busbw is not None), default=None)


def export_envs(report: dict | None, hostnames: Sequence[str]) -> tuple[dict[str, str], ...] | None:
    """Each node's environment as an operator pastes netcheck's export lines: the host report's
    `recommend`, then `recommend_per_node` for that node's hostname. None where the report gives
    none."""
    if not report or not (report.get("recommend") or report.get("recommend_per_node")):
        return None
    per = report.get("recommend_per_node") or {}
    return tuple({**report.get("recommend", {}), **per.get(h, {})} for h in hostnames)
