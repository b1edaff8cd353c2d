"""Processes outside netcheck using this node's CPUs, or holding its GPUs, while its
bandwidth workers run.

A leftover rank of an earlier job, a data loader or a busy loop on one node slows every
collective, and a preflight measuring bandwidth beside it reports that node's slowness as the
network's. Two snapshots of every process's CPU time, one before the workers start and one
after they end, say who used the CPUs meanwhile. A process holding a GPU's device file open
when the workers end (as `fuser -v /dev/nvidia*` finds a leftover job) holds that GPU's
memory and time whatever its CPU share: it is named too.

A node's processes are those in this process's network namespace: on a machine that is one
node (the usual case) that is every process it can see; on a machine that hosts several
(network-namespace test clusters, containers with their own network), the processes of this
node alone. Processes of another user may be unreadable without root: they are left out.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from netcheck.core.bwrecords import BusyProcess
from netcheck.core.constants import BW_BUSY_SHOWN
from netcheck.facts.procfds import fd_targets, listed

# host.busy: a process outside netcheck that used this share of one CPU, on average, while
# the node's bandwidth workers ran (a leftover job's rank, a data loader, a busy loop).
BW_BUSY_SHARE = 0.5
BW_BUSY_RELATIVE = 0.5       # ... or, where the node's own workers got less than a CPU, half what one got
BW_BUSY_FLOOR = 0.1          # ... but never under this: daemons, shells and loggers tick along below it

COMMAND_CHARS = 120   # of a busy process's command line, quoted in a finding
DEVICES = "/dev"
# One GPU's device file; nvidiactl and nvidia-uvm are opened by every CUDA process, whatever GPU it uses.
GPU_DEVICE = re.compile(r"nvidia(\d+)")


@dataclass(frozen=True)
class CpuSnapshot:
    taken: float                  # time.monotonic()
    cpu_s: dict[int, float]       # pid -> user + system CPU seconds so far
    workers_s: float              # CPU seconds of this process's children that ended (its workers)
    gpus: dict[int, tuple[int, ...]]   # pid -> the GPUs whose device files it holds open


def cpu_snapshot() -> CpuSnapshot:
    """Every process of this node's CPU seconds so far."""
    here = _netns(os.getpid())
    cpu = {}
    for proc in psutil.process_iter(["cpu_times"]):
        times = proc.info["cpu_times"]
        if times is not None and here is not None and _netns(proc.pid) == here:
            cpu[proc.pid] = times.user + times.system
    ended = os.times()
    return CpuSnapshot(time.monotonic(), cpu, ended.children_user + ended.children_system, _gpus_held(cpu))


def _gpus_held(pids: Iterable[int]) -> dict[int, tuple[int, ...]]:
    """pid -> the GPU device numbers it holds open, for the given processes; nothing is read
    on a node without GPU device files (every node netcheck runs on without a GPU)."""
    devices = {os.path.join(DEVICES, name): int(m[1]) for name in listed(DEVICES)
               if (m := GPU_DEVICE.fullmatch(name))}
    if not devices:
        return {}
    held = {}
    for pid in pids:
        gpus = {devices[link] for link in fd_targets(pid).values() if link in devices}
        if gpus:
            held[pid] = tuple(sorted(gpus))
    return held


def busy_processes(node: int, workers: int, before: CpuSnapshot, after: CpuSnapshot) -> tuple[BusyProcess, ...]:
    """The processes besides netcheck's own that used a CPU materially between the snapshots
    (the workers ended and reaped by then), or held a GPU when they ended, busiest first (at
    most BW_BUSY_SHOWN).

    Materially: BW_BUSY_SHARE of a CPU, or, on a machine so crowded that a worker itself got
    less, BW_BUSY_RELATIVE of what one worker got (never below BW_BUSY_FLOOR): a busy loop
    sharing two cores with three workers gets a third of a CPU, and still slows every rank."""
    seconds = after.taken - before.taken
    if seconds <= 0:
        return ()
    per_worker = (after.workers_s - before.workers_s) / seconds / max(1, workers)
    threshold = max(BW_BUSY_FLOOR, min(BW_BUSY_SHARE, BW_BUSY_RELATIVE * per_worker))
    ours = _netchecks()
    shares = {pid: (cpu - before.cpu_s.get(pid, 0.0)) / seconds for pid, cpu in after.cpu_s.items()
              if pid not in ours}
    busy = [pid for pid, share in shares.items() if share >= threshold or pid in after.gpus]
    busiest = sorted(busy, key=lambda p: (-len(after.gpus.get(p, ())), -shares[p]))
    found = (_described(node, pid, shares[pid], after.gpus.get(pid, ())) for pid in busiest)
    return tuple(p for p in found if p is not None)[:BW_BUSY_SHOWN]


def _netns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:   # gone, or another user's without root
        return None


def _netchecks() -> set[int]:
    """netcheck's own processes: this one, its ancestors (the shell, a launcher), its workers,
    and any other netcheck (torchrun's other ranks on this host, a demo's other nodes)."""
    me = psutil.Process()
    ours = {me.pid} | {p.pid for p in me.parents()} | {p.pid for p in me.children(recursive=True)}
    for proc in psutil.process_iter(["cmdline"]):
        if any("netcheck" in part for part in (proc.info["cmdline"] or ())[:4]):
            ours.add(proc.pid)
    return ours


def _described(node: int, pid: int, share: float, gpus: tuple[int, ...]) -> BusyProcess | None:
    try:
        proc = psutil.Process(pid)
        command = " ".join(proc.cmdline()) or f"[{proc.name()}]"
        user = proc.username()
    except (psutil.Error, KeyError):   # gone since; KeyError: a uid with no name
        return None
    command = command if len(command) <= COMMAND_CHARS else command[:COMMAND_CHARS] + "..."
    return BusyProcess(node, pid, user, command, round(share, 3), gpus)
