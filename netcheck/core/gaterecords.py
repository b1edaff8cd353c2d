"""A launcher's gate: a Slurm node as Slurm shows it, and what a gate does to it.

Slurm's words, as its commands print and take them: a node's state is sinfo's `%T` (idle,
allocated, drained, draining, down, with a `*` where slurmd does not answer), its reason sinfo's
`%E` ("none" where it has none); an action is `scontrol update State=DRAIN|RESUME`.
"""

from __future__ import annotations

from dataclasses import dataclass

DRAIN, RESUME = "DRAIN", "RESUME"
NO_REASON = "none"   # sinfo's %E for a node without one


@dataclass(frozen=True)
class SlurmNode:
    name: str       # Slurm's NodeName: what scontrol and --exclude take
    state: str
    reason: str


@dataclass(frozen=True)
class NodeAction:
    node: str       # Slurm's NodeName
    state: str      # DRAIN or RESUME
    reason: str     # DRAIN's reason; empty for RESUME
