"""Schedules, each drawn from (seed, index) alone: a launch mode, 3 to 8 nodes (torchrun: 3 nodes
of one process or 2 of four) and up to three compatible faults from the catalog (none: a control).
Every figure of time comes from nodes.scaled, the suite's one multiplier.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nodes import scaled

from .catalog import CATALOG, MIDRUN, MODES, Fault

JOIN_WINDOW = 6                 # one-shot mode: the quiet that closes the rendezvous
MODE_WEIGHTS = (4, 3, 1)        # torchrun costs two torch imports a node: drawn less often
# Nodes per schedule (ranked, arrival). Each node costs this 2-core machine a torch import (two
# under --fate's job): the weights keep the mean at the old uniform draw's 4.5 nodes (3-6), so a
# campaign's time stays as it was, while 7 and 8 nodes come up one schedule in eight.
SIZES = (3, 4, 5, 6, 7, 8)
SIZE_WEIGHTS = (5, 4, 3, 2, 1, 1)
# torchrun's shapes (nodes, processes per node): a rank a node, and a node's ranks on one host
# (their store, their gloo, an agent that stops its siblings), equally often.
TORCHRUN_SHAPES = ((3, 1), (2, 4))
FAULT_COUNTS = (0, 1, 2, 3)
COUNT_WEIGHTS = (1, 5, 3, 2)    # a control schedule (no fault) now and then
# --midrun (issue 62's campaign): this share of the schedules in a mode the mid-run faults run in
# (not torchrun) is drawn around one of them, its companions drawn after it as usual.
MIDRUN_SHARE = 0.9


# --timeout: the host waits half of it for joiners, and every netcheck process (each rank under
# torchrun) imports torch on the same 2 busy cores first (5 nodes took 10 s to arrive, under two
# other test runs): 5 s a rank. It counts from each process's start, its interpreter's and
# imports' seconds included (up to 5 s at load 15): STARTUP more, so the join is not shorter.
STARTUP = 8


def timeout_for(ranks: int, bandwidth: bool, mode: str) -> float:
    seconds = 12 + STARTUP + 5 * ranks
    if bandwidth:
        seconds += 15       # the workers import torch too, then the sweep's budget
    if mode == "arrival":
        seconds += JOIN_WINDOW
    return scaled(seconds)


@dataclass(frozen=True)
class Schedule:
    seed: int
    index: int
    mode: str
    n: int
    faults: tuple[Fault, ...]
    midrun: bool = False    # drawn by --midrun: the replay says so too
    nproc: int = 1          # processes per node (torchrun's --nproc-per-node): each a rank

    @property
    def run_id(self) -> str:
        return "netcheck"

    @property
    def bandwidth(self) -> bool:
        return any(f.bandwidth for f in self.faults)

    @property
    def shape(self) -> tuple[int, int]:
        """(nodes, processes per node): what the real job's healthy control is measured for."""
        return self.n, self.nproc

    @property
    def ranks(self) -> int:
        return self.n * self.nproc

    @property
    def timeout(self) -> float:
        return timeout_for(self.ranks, self.bandwidth, self.mode) + sum(f.join_seconds for f in self.faults)

    def what(self) -> str:
        """Mode, size (nodes x processes where a node runs several) and faults: what the draw
        gave, whatever the time multiplier."""
        faults = " + ".join(f.describe() for f in self.faults) or "no fault (control)"
        size = f"{self.n}x{self.nproc}" if self.nproc > 1 else f"{self.n}"
        return f"{self.mode} n={size}: {faults}"

    def describe(self) -> str:
        mode, faults = self.what().split(": ", 1)
        return f"#{self.index} {mode} timeout={self.timeout:g}: {faults}"

    def replay(self) -> str:
        return f"python tests/chaos --seed {self.seed} --schedule {self.index}" + (" --midrun" if self.midrun else "")


def draw_schedule(seed: int, index: int, midrun: bool = False) -> Schedule:
    rng = random.Random(f"netcheck-chaos/{seed}/{index}" + ("/midrun" if midrun else ""))
    mode = rng.choices(MODES, MODE_WEIGHTS)[0]
    n, nproc = rng.choice(TORCHRUN_SHAPES) if mode == "torchrun" else (rng.choices(SIZES, SIZE_WEIGHTS)[0], 1)
    wanted = rng.choices(FAULT_COUNTS, COUNT_WEIGHTS)[0]
    first = MIDRUN if midrun and any(mode in k.modes for k in MIDRUN) and rng.random() < MIDRUN_SHARE else None
    wanted = max(wanted, 1) if first else wanted
    faults: list[Fault] = []
    for _ in range(20 * wanted):
        if len(faults) == wanted:
            break
        fault = _draw_fault(rng, mode, n, faults, first if not faults else None)
        if fault is not None:
            faults.append(fault)
            if fault.alone:
                break
    if any(f.bandwidth for f in faults):
        n = min(n, min(f.max_nodes for f in faults))
    return Schedule(seed, index, mode, n, tuple(faults), midrun, nproc)


def _draw_fault(rng: random.Random, mode: str, n: int, chosen: list[Fault],
                among: tuple[type[Fault], ...] | None = None) -> Fault | None:
    """One more fault compatible with those chosen (of the kinds `among`, or any), or None when
    this draw is not."""
    kinds = [k for k in (among or CATALOG) if mode in k.modes]
    cls = rng.choices(kinds, [k.weight for k in kinds])[0]
    taken = {i for f in chosen for i in f.nodes}
    free = [i for i in range(n) if i not in taken]
    nodes = _draw_nodes(rng, cls.targets, free)
    if nodes is None:
        return None
    if not cls.fits(nodes, mode):
        return None
    fault = cls(nodes, cls.draw_params(rng, mode))
    # Explicitly incompatible: a fault that masks the host's view with any other; one fault a
    # node; two that set the cluster's MTUs; the bandwidth faults on more nodes than they fit.
    if chosen and (fault.alone or any(f.alone for f in chosen)):
        return None
    if any(f.kind in fault.conflicts or fault.kind in f.conflicts for f in chosen):
        return None
    # The cluster shrinks to what a bandwidth fault fits: every fault's nodes must be in it,
    # whichever was drawn first.
    fits = min((f.max_nodes for f in (*chosen, fault) if f.bandwidth), default=n)
    if any(max(f.nodes) >= fits for f in (*chosen, fault)):
        return None
    # The bandwidth phase is not run with a node missing (run.skipped), and cannot measure with
    # a node that gloo cannot reach or binds wrong: a data-path fault has no evidence beside those.
    pairs = [(fault, f) for f in chosen] + [(f, fault) for f in chosen]
    if any(a.bandwidth and (b.removes_node or b.spoils_data_path) for a, b in pairs):
        return None
    return fault


def _draw_nodes(rng: random.Random, targets: str, free: list[int]) -> tuple[int, ...] | None:
    joiners = [i for i in free if i != 0]
    if targets == "host":
        return (0,) if 0 in free else None
    if targets == "joiner":
        return (rng.choice(joiners),) if joiners else None
    if targets == "any":
        return (rng.choice(free),) if free else None
    pool = joiners if targets == "pair" else free
    return tuple(rng.sample(pool, 2)) if len(pool) >= 2 else None

