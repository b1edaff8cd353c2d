"""What went wrong with the bandwidth phase's workers, and where: a worker's end classified
(died, stuck, failed, out of time), what it was in when it stopped (the collective, size and
ranks), every node's faults merged with the silent nodes named, and the first culprit. Pure:
the node's watch (bandwidth.orchestrate) gathers what these judge."""

from __future__ import annotations

import signal

from netcheck.bandwidth.sizes import planned_sizes, round_robin
from netcheck.bandwidth.sweep import COLLECTIVES
from netcheck.bandwidth.worker import MAX_DETAIL
from netcheck.core.bwrecords import Fault, InFlight, NodeReport, Pair, Sweep, SweepOptions, first_culprit
from netcheck.core.constants import BW_STUCK_AFTER

NCCL_WARN_MARK = " NCCL WARN "   # NCCL_DEBUG=WARN's lines: "host:pid:tid [0] file.cc:93 NCCL WARN words"


def in_flight(stage: str, sweep: Sweep | None, pairs: tuple[Pair, ...], node: int, nnodes: int,
              nproc: int, options: SweepOptions) -> InFlight | None:
    """What a worker of `node` was in, from its stage and the last table (or pairs) it
    reported: a sweep reports after every size, in the order of the size series, so the
    next size is the one in flight. None outside the sweeps, or past a sweep's last size."""
    if stage == "pairs":
        return _pair_in_flight(pairs, node, nnodes, nproc)
    if stage not in ("all", "intra", "inter"):
        return None
    ranks = {"all": tuple(range(nnodes * nproc)), "intra": tuple(range(node * nproc, (node + 1) * nproc)),
             "inter": tuple(n * nproc for n in range(nnodes))}[stage]
    if sweep is None or sweep.stage != stage:  # the stage's group is being made (all: no time at all)
        return InFlight("new_group" if stage != "all" else options.op[0], 0, ranks)
    coll = COLLECTIVES[sweep.op]
    sizes = [] if sweep.note else [s for s in planned_sizes(options)
                                   if coll.chunk(s, options.dtype, sweep.ranks)]
    done = len(sweep.rows) + len(sweep.skipped)
    if done < len(sizes):
        return InFlight(sweep.op, sizes[done], ranks)
    # Without -e the sweep goes on while busbw rises and nothing was skipped for the budget:
    # the next size, if it went on.
    if options.past_maxbytes and sweep.rows and not sweep.skipped and sweep.rows[-1].size >= sizes[-1]:
        return InFlight(sweep.op, sweep.rows[-1].size * options.stepfactor, ranks)
    return None


def _pair_in_flight(pairs: tuple[Pair, ...], node: int, nnodes: int, nproc: int) -> InFlight | None:
    """The round after the pairs reported: this node's pair in it, between the nodes' leaders."""
    counted = 0
    for pairing in round_robin(nnodes):
        if counted >= len(pairs):
            mine = next((p for p in pairing if node in p), None)
            size = pairs[-1].size if pairs else 0  # every round exchanges the same size
            return InFlight("sendrecv", size, tuple(n * nproc for n in mine) if mine else ())
        counted += len(pairing)
    return None


def classify(fate: str, returncode: int | None, failure: str, done: bool, stage: str,
             stderr: list[str]) -> tuple[str, str] | None:
    """(kind, detail) for a worker that did not finish well; None for one that did, or one
    the node stopped because another node aborted (not a fault of its own). A failure
    carries NCCL's own WARN line from the worker's stderr where it printed one."""
    if fate == "stuck":
        return "stuck", (f"no heartbeat for {BW_STUCK_AFTER:g} s in stage {stage}: hung "
                         "(stopped, or holding the GIL)")
    if fate == "timeout":
        return "timeout", f"still in stage {stage} at the phase's deadline"
    if failure:
        warning = nccl_warning(stderr)
        return "failed", failure + (f"; NCCL WARN {warning}" if warning else "")
    if fate == "stopped" or (returncode == 0 and done):
        return None
    if returncode is not None and returncode < 0:
        return "died", f"killed by {signal.Signals(-returncode).name} in stage {stage}"
    last = stderr[-1].strip() if stderr else ""
    said = f": {last}" if last else ""
    return "died", f"exited with status {returncode} in stage {stage}{said}"


def nccl_warning(stderr: list[str]) -> str:
    """The last `NCCL WARN` line's words ("Duplicate GPU detected : rank 1 and rank 0 both on
    CUDA device 6000"), without NCCL's host:pid:tid [device] file:line prefix; "" where none."""
    warnings = [line.split(NCCL_WARN_MARK, 1)[1].strip() for line in stderr if NCCL_WARN_MARK in line]
    return warnings[-1][:MAX_DETAIL] if warnings else ""


def merge_faults(mine: list[Fault], reports: dict[int, NodeReport], me: int, nnodes: int,
                 stage: str, store_lost: str | None) -> list[Fault]:
    """Every node's faults; a node that never posted its account is named as silent, in
    `stage`, the furthest this node's own workers got (the collectives tie the nodes). Where
    this node lost the host's store (store_lost, why), the others' silence says nothing of
    them: the store's node (node 0, the host) alone is named, for it."""
    faults = list(mine)
    for node in range(nnodes):
        if node == me:
            continue
        if node in reports:
            faults += [f for f in reports[node].faults if f.node == node]  # a node speaks for itself only
        elif store_lost is None:
            faults.append(Fault(node, -1, -1, stage, "silent", f"node {node} sent no account of its workers: its "
                                "netcheck ended early or hung, or its link to the host broke"))
    if store_lost is not None:
        faults.append(Fault(0, -1, -1, stage, "silent", f"the host's store (node 0) stopped answering this node "
                            f"(node {me}): {store_lost}; what the other nodes' workers did is not known"))
    return sorted(faults, key=lambda f: (f.node, f.rank))


def silenced_by(faults: tuple[Fault, ...], me: int, why: str) -> tuple[Fault, ...]:
    """The faults, where this node heard no account from the others for a reason of its own
    (`why`: its link went down): their silence says nothing of them, so they are not named;
    this node is, in the stage they went quiet in."""
    quiet = [f for f in faults if f.kind == "silent" and f.node != me]
    if not quiet:
        return faults
    kept = tuple(f for f in faults if f not in quiet)
    return kept + (Fault(me, -1, -1, quiet[0].stage, "silent", f"{why}: what the other nodes' workers did is "
                         "not known"),)


def root_cause(faults: list[Fault]) -> tuple[str | None, str]:
    """The stage that failed and why, from the first culprit."""
    first = first_culprit(faults)
    if first is None:
        return None, ""
    who = f"rank {first.rank} (node {first.node}, local rank {first.local_rank})" if first.rank >= 0 \
        else f"node {first.node}"
    return first.stage, f"{who}: {first.detail}"


