"""How long this node's run stood still: a thread ticks every STALL_TICK s, and the wall time
between two ticks, less what the process's threads spent on a CPU or waiting for one meanwhile,
is time none of them could run. A SIGSTOP, a cgroup freeze (a paused container) or a debugger's
stop shows as seconds of it. A loaded machine does not: a thread waiting its turn for a CPU, or
the tick waiting for the interpreter's lock while another thread holds it on a CPU or in the
run queue (torch's import on a loaded machine: 5 s), is counted as running (the kernel's
schedstat, per thread)."""

from __future__ import annotations

import os
import threading
import time

from netcheck.core.constants import STALL_TICK
from netcheck.core.model import Stall


class StallWatch:
    """The run's longest stall, watched from `started` (monotonic) by a daemon thread."""

    def __init__(self, started: float) -> None:
        self._started = started
        self._lock = threading.Lock()
        self._last = (time.monotonic(), time.process_time())
        self._queued = _run_queue_waits()
        self._longest = Stall()
        threading.Thread(target=self._watch, name="netcheck-stall", daemon=True).start()

    def longest(self) -> Stall:
        """The longest stall so far, the one still going on as this is asked included (a node
        resumed may judge its run before the watch has ticked again)."""
        return self._note()

    def _watch(self) -> None:
        while True:
            time.sleep(STALL_TICK)
            self._note()

    def _note(self) -> Stall:
        with self._lock:
            wall, cpu, queued = time.monotonic(), time.process_time(), _run_queue_waits()
            last_wall, last_cpu = self._last
            waited = sum(ns - self._queued.get(tid, 0) for tid, ns in queued.items()) / 1e9
            still = (wall - last_wall) - (cpu - last_cpu) - waited - STALL_TICK
            if still > self._longest.seconds:
                self._longest = Stall(round(still, 1), round(max(0.0, last_wall - self._started), 1))
            self._last, self._queued = (wall, cpu), queued
            return self._longest


def _run_queue_waits() -> dict[int, int]:
    """Nanoseconds each of this process's threads has waited in a run queue (schedstat's second
    field); none where the kernel does not keep them (the CPU time alone is then taken off)."""
    waits = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                waits[int(tid)] = int(stat.read().split()[1])
        except (OSError, IndexError, ValueError):   # a thread gone meanwhile
            continue
    return waits
