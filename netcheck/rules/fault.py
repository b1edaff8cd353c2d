"""Whose fault a run's failures are: this node, other nodes (named), the cluster as a whole, or
netcheck itself (docs/contract.md, "Promises"), from one node's seat, so that its exit code tells a
launcher's gate whether to drain it. Decided from the findings alone: each failure holds at fault
the nodes it names, or its cause's where it names one beside nodes that only met its symptom
(Finding.cause_nodes). Pure: no I/O, no printing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from netcheck.core.model import (
    FAIL,
    NETCHECK,
    NOBODY,
    OTHER_NODES,
    THIS_NODE,
    WHOLE_CLUSTER,
    Attribution,
    Finding,
)
from netcheck.rules.registry import (
    JOIN_LATE,
    JOIN_UNSEATED,
    LAUNCH_TOPOLOGY,
    LOST_PREFIX,
    MESH_CONNECT,
    NIC_GLOO_DEFAULT,
    NIC_NCCL_DEFAULT,
    RDZV_JOIN,
    RUN_INTERNAL,
    RUN_TIMEOUT,
    untested_on_itself,
)

# The run's own failures, which hold no node at fault: a bug in netcheck, its own deadline spent
# (the nodes it waited for are named by their own findings: netcheck's where none is). A node a
# signal stopped names itself (its run is not vouched for; its exit code is the signal's).
RUNS_OWN = (RUN_INTERNAL, RUN_TIMEOUT)
# The host's rdzv.join failures about arrivals it could not seat (they came late, or past
# --nnodes): other nodes', though they have no rank to name; so are its launch.topology failures
# that name none (processes it did not seat, launched otherwise than the cluster).
ARRIVAL_KINDS = (JOIN_LATE, JOIN_UNSEATED)
# The libraries' interface choices the mesh proves: a node's choice unproven only because the
# directions into it broke is the mesh's failure seen from that node, whose cause is the mesh's.
MESH_PROVEN = (NIC_NCCL_DEFAULT, NIC_GLOO_DEFAULT)


def at_fault(f: Finding) -> tuple[int, ...]:
    """The node ranks a failure holds at fault: its cause's where it names one, else every node
    it names."""
    return f.nodes if f.cause_nodes is None else f.cause_nodes


def fault_of(findings: Iterable[Finding], mine: tuple[int, ...], hostname: Callable[[int], str | None],
             own_unnamed: bool, told: Attribution | None = None, unranked: tuple[str, ...] = ()) -> Attribution:
    """Whose fault these failures are, seen from the node of ranks `mine` (-1: unseated).

    `hostname`: a rank's hostname where known; `own_unnamed`: a failure naming no node is this
    node's own (a joiner's and `netcheck local`'s findings name no node only where they speak for
    the node that made them, before it had a rank; the host's speak for the cluster then);
    `told`: the host's word, on a joiner that heard it; `unranked`: hostnames of nodes at fault
    that never had a rank. An internal error comes first (the report is netcheck's to fix before
    any node's), then this node, the cluster as a whole, other nodes, and netcheck's own deadline;
    the host's internal error or deadline is not a joiner's (its own run finished, or says so).
    """
    failures = mesh_caused(lost_caused([f for f in findings if f.severity == FAIL]))
    ours = [f for f in failures if not _runs_own(f, mine, own_unnamed)]
    named = [f for f in ours if at_fault(f)]
    strangers = [f for f in ours if not own_unnamed and not at_fault(f) and _about_arrivals(f)]
    unnamed = [f for f in ours if not at_fault(f) and f not in strangers]
    ranks = {r for f in named for r in at_fault(f)} | set(told.nodes if told else ())
    if own_unnamed and unnamed:
        ranks |= set(mine)
        named, unnamed = named + unnamed, []
    # The host's names first, in its rank order: every node lists the nodes at fault alike.
    hostnames = tuple(dict.fromkeys([*(told.hostnames if told else ()),
                                     *(h for r in sorted(ranks) if (h := hostname(r))), *unranked]))
    whole = told is not None and told.party == WHOLE_CLUSTER

    def fault(party: str, why: str) -> Attribution:
        return Attribution(party, tuple(sorted(ranks)), hostnames, why)

    if internal := _first(failures, lambda f: f.check == RUN_INTERNAL):
        return fault(NETCHECK, internal)
    if set(mine) & ranks:
        return fault(THIS_NODE, _first(named, lambda f: bool(set(at_fault(f)) & set(mine))) or _told(told))
    # A failure naming no rank names a node never ranked where there is one (a node whose facts
    # never came, in the one-shot form): the cluster's as a whole only where nobody is named so.
    if (unnamed and not unranked) or whole:
        return fault(WHOLE_CLUSTER, _first(unnamed, lambda f: True) or _told(told))
    if hostnames or ranks or strangers:
        return fault(OTHER_NODES, _first(named + unnamed + strangers, lambda f: True) or _told(told))
    if deadline := _first(failures, lambda f: _runs_own(f, mine, own_unnamed)):   # internal errors returned above
        return fault(NETCHECK, deadline)
    return fault(NOBODY, "")


def _runs_own(f: Finding, mine: tuple[int, ...], own_unnamed: bool) -> bool:
    """netcheck's own failures, and a node's own finding the registry calls untested where said of
    itself with no cause named (rdzv.join late: its start-up outlasted netcheck's deadline, a loaded
    machine's torch import, a launch seconds apart), so it was not tested, not found broken, and
    the job's own rendezvous waits minutes for it. A gate must not drain it; a larger --timeout is
    the fix."""
    own = set(f.nodes) <= set(mine) if f.nodes else own_unnamed   # the host's are strangers: other nodes'
    return f.check in RUNS_OWN or (untested_on_itself(f) and f.cause_nodes is None and own)


def lost_caused(failures: list[Finding]) -> list[Finding]:
    """The failures, mesh.connect's held to the nodes lost mid-run (rdzv.join lost_in_*) where
    every direction it names joins a lost node (one node at most of those it names was not lost,
    and a direction names both its ends): a node that went quiet broke them, not the node still
    here at their other end (issue 65: a joiner's cable pulled during the mesh)."""
    lost = {r for f in failures if f.check == RDZV_JOIN and f.kind.startswith(LOST_PREFIX) and f.cause_nodes is None
            for r in f.nodes}
    return [replace(f, cause_nodes=tuple(sorted(lost & set(f.nodes)))) if f.check == MESH_CONNECT
            and f.cause_nodes is None and lost & set(f.nodes) and len(set(f.nodes) - lost) <= 1 else f
            for f in failures]


def mesh_caused(failures: list[Finding]) -> list[Finding]:
    """The failures, those of MESH_PROVEN that name only nodes mesh.connect holds blameless (the
    far ends of directions a node it names as the cause broke) held to that cause: a node two
    peers cannot reach because a third drops them is not at fault for its unproven interface."""
    mesh = next((f for f in failures if f.check == MESH_CONNECT and f.cause_nodes), None)
    if mesh is None or mesh.cause_nodes is None:
        return failures
    blameless = set(mesh.nodes) - set(mesh.cause_nodes)
    return [replace(f, cause_nodes=mesh.cause_nodes) if f.check in MESH_PROVEN and f.cause_nodes is None
            and f.nodes and set(f.nodes) <= blameless else f for f in failures]


def _about_arrivals(f: Finding) -> bool:
    return f.check == LAUNCH_TOPOLOGY or (f.check == RDZV_JOIN and f.kind in ARRIVAL_KINDS)


def _first(findings: list[Finding], which: Callable[[Finding], bool]) -> str:
    return next((f"{f.check}: {f.summary}" for f in findings if which(f)), "")


def _told(told: Attribution | None) -> str:
    return f"the host's word: {told.why}" if told is not None and told.why else ""


def names_of(*maps: Mapping[int, str]) -> Callable[[int], str | None]:
    """A rank's hostname from the first map that holds it."""
    return lambda rank: next((m[rank] for m in maps if rank in m), None)
