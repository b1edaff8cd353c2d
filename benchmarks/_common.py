"""Shared by the benchmarks: the simulated cluster, timed processes, machine facts, stats.

The cluster is tests/cluster.py (network namespaces, addresses in 198.18.0.0/15 only);
every benchmark builds it with `with Cluster(...)` so namespaces go even on failure.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from cluster import Cluster, NodeSpec  # noqa: E402  (imported as `cluster`, as the tests do)

__all__ = ["Cluster", "NodeSpec", "PY", "TORCHRUN", "PORT", "Timed", "clean_env", "start",
           "finish", "machine_facts", "summary"]

PY = str(REPO / ".venv" / "bin" / "python")
TORCHRUN = str(REPO / ".venv" / "bin" / "torchrun")
PORT = 29500
_LAUNCHER_VARS = re.compile(r"^(SLURM_|PET_|TORCHELASTIC_|GROUP_|LOCAL_|ROLE_)|"
                            r"^(MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE)$")


def clean_env() -> dict[str, str | None]:
    """No launcher variables this shell may carry (no node inherits a rank), and Python
    output unbuffered so a line is stamped when it is written, not when the pipe flushes."""
    env: dict[str, str | None] = {k: None for k in os.environ if _LAUNCHER_VARS.search(k)}
    return env | {"PYTHONUNBUFFERED": "1"}


@dataclass
class Timed:
    """One process in a node, with every output line stamped (seconds since its start)."""

    label: str
    proc: subprocess.Popen
    started: float
    lines: list[tuple[float, str, str]] = field(default_factory=list)  # (t, stream, text)
    threads: list[threading.Thread] = field(default_factory=list)  # readers, then waiter
    exited: float | None = None  # seconds from start to exit, stamped by the waiter
    seconds: float = 0.0  # until exit, or the cap when it was stopped there
    capped: bool = False

    def first(self, pattern: str = r".") -> float | None:
        """When the first line matching `pattern` (case-insensitive) came, or None."""
        return next((t for t, _, s in self.lines if re.search(pattern, s, re.I)), None)

    @property
    def text(self) -> str:
        return "\n".join(s for _, _, s in self.lines)


def _read(t: Timed, stream, name: str) -> None:
    for line in stream:
        t.lines.append((round(time.monotonic() - t.started, 3), name, line.rstrip("\n")))


def _wait(t: Timed) -> None:
    t.proc.wait()
    t.exited = round(time.monotonic() - t.started, 3)


def start(c: Cluster, node: int, argv: list[str], label: str) -> Timed:
    """Start argv in a node; threads stamp its output lines and its exit as they happen."""
    started = time.monotonic()
    t = Timed(label, c.popen(node, argv, env=clean_env(), bufsize=1), started)
    for target, args in ((_read, (t, t.proc.stdout, "out")), (_read, (t, t.proc.stderr, "err")),
                         (_wait, (t,))):
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        t.threads.append(thread)
    return t


def finish(c: Cluster, t: Timed, cap: float) -> Timed:
    """Wait for exit until `cap` seconds after its start; past it, kill its process group."""
    waiter = t.threads[-1]
    waiter.join(timeout=max(0.0, cap - (time.monotonic() - t.started)))
    if waiter.is_alive():
        t.capped = True
        c.kill(t.proc)
    for thread in t.threads:
        thread.join(timeout=10)
    t.seconds = cap if t.capped else t.exited
    return t


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def machine_facts() -> dict[str, str]:
    torch_version = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "nproc": str(os.cpu_count()), "cpu": _cpu_model(), "kernel": platform.release(),
            "python": platform.python_version(), "torch": torch_version}


def summary(values: list[float]) -> str:
    """'median X s, min Y s (n=N)' of the measured values."""
    if not values:
        return "no values"
    return f"median {statistics.median(values):.2f} s, min {min(values):.2f} s (n={len(values)})"
