"""Slurm's commands, the one place netcheck runs them: a node's state and reason as sinfo shows
them, and the `scontrol update` a gate decided (rules/gate). Each call is bounded (a slurmctld
that does not answer is named, never waited out) and its failure is one SlurmError line.

slurmd runs its HealthCheckProgram as root with SLURMD_NODENAME alone in its environment (22.05: no
PATH): without a PATH the commands are looked up where packages (/usr/bin) and Slurm's own
`make install` (/usr/local/bin) put them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from typing import Mapping

from netcheck.core.constants import SLURM_CALL_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.errors import NetcheckError
from netcheck.core.gaterecords import DRAIN, NodeAction, SlurmNode

COMMANDS = ("sinfo", "scontrol")
NO_PATH = "/usr/bin:/bin:/usr/local/bin"   # where there is no PATH (slurmd's HealthCheckProgram)


class SlurmError(NetcheckError):
    """A Slurm command that could not be run, did not answer in time, or refused."""


def missing_commands(env: Mapping[str, str]) -> str | None:
    """The Slurm commands a gate needs that are not found, and where they were looked for."""
    missing = [c for c in COMMANDS if _command(c, env) is None]
    return f"{' and '.join(missing)} not found on {_path(env)}" if missing else None


def node_name(env: Mapping[str, str]) -> str:
    """This node's Slurm NodeName: slurmd's SLURMD_NODENAME (set for its HealthCheckProgram, its
    prolog and every task), else the short hostname, as slurmd itself defaults it."""
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def read_node(name: str, env: Mapping[str, str], deadline: Deadline) -> SlurmNode:
    """The node's state and reason, as `sinfo -h -N -n NAME -o "%T %E"` prints them (the first
    line: a node in several partitions is listed once for each)."""
    out = _run(["sinfo", "-h", "-N", "-n", name, "-o", "%T %E"], env, deadline)
    line = next((ln for ln in out.splitlines() if ln.strip()), None)
    if line is None:
        raise SlurmError(f"sinfo lists no node {name!r}: Slurm knows this node by another name (give it as "
                         "SLURMD_NODENAME)")
    state, _, reason = line.strip().partition(" ")
    return SlurmNode(name, state, reason.strip())


def apply(act: NodeAction, env: Mapping[str, str], deadline: Deadline) -> None:
    """`scontrol update NodeName=N State=DRAIN Reason=...` (or State=RESUME)."""
    argv = ["scontrol", "update", f"NodeName={act.node}", f"State={act.state}"]
    _run(argv + [f"Reason={act.reason}"] if act.state == DRAIN else argv, env, deadline)


def _run(argv: list[str], env: Mapping[str, str], deadline: Deadline) -> str:
    path = _command(argv[0], env)
    shown = " ".join(argv)
    if path is None:
        raise SlurmError(f"{shown}: {argv[0]} not found on {_path(env)}")
    seconds = min(SLURM_CALL_TIMEOUT, deadline.remaining())
    try:
        done = subprocess.run([path, *argv[1:]], capture_output=True, text=True, timeout=seconds,
                              stdin=subprocess.DEVNULL, env=dict(env))
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{shown}: no answer in {seconds:.1f} s (is slurmctld up?)") from None
    except OSError as e:
        raise SlurmError(f"{shown}: {e.strerror or e}") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:300] or "no message"
        raise SlurmError(f"{shown}: exit {done.returncode}: {said}")
    return done.stdout


def _command(name: str, env: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=_path(env))


def _path(env: Mapping[str, str]) -> str:
    return env.get("PATH") or NO_PATH
