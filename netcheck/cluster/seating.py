"""Seating, pure: when the host stops waiting, who gets which node rank, and why a node that
came was not seated. Facts in, decisions out; no store, no clock."""

from __future__ import annotations

from netcheck.core.constants import ARRIVAL_MIN_NODES, MAX_MEMBERS
from netcheck.core.model import NodeFacts


def rendezvous_closed(seated: int, low: int | None, high: int | None, quiet_for: float,
                      window: float) -> bool:
    """Whether the host stops waiting for joiners before its deadline, by torchrun's rules:

    - `--nnodes N`: once N nodes are seated;
    - `--nnodes MIN:MAX`: once MAX are, or MIN are and nobody came for the join window;
    - no count (nodes numbered as they arrive): once someone besides the host came and
      nobody came for the join window. A host alone keeps waiting: a rendezvous that
      heard from no other node has proven nothing.
    """
    if high is not None and seated >= high:
        return True
    return seated >= (low or ARRIVAL_MIN_NODES) and quiet_for >= window


def assign_ranks(arrivals: dict[int, NodeFacts], host_arrival: int | None, nnodes_max: int | None
                 ) -> tuple[dict[int, int], dict[str, tuple[str, ...]], list[int]]:
    """Ranks by arrival: claimed ranks first (the host's, then in arrival order), the rest
    numbered from the lowest free rank. Returns (arrival -> rank, duplicate claims, extras).
    host_arrival None: the host is not among them (all in arrival order)."""
    order = sorted(arrivals, key=lambda a: (a != host_arrival, a))
    ranks: dict[int, int] = {}
    taken: set[int] = set()  # ranks.values(), for lookups in O(1): the host runs this every poll
    claims: dict[int, list[str]] = {}
    extras = []
    for a in order:
        claimed = arrivals[a].launch.node_rank
        if claimed is not None and nnodes_max is not None and claimed >= nnodes_max:
            extras.append(a)
        elif claimed is not None:
            claims.setdefault(claimed, []).append(arrivals[a].hostname)
            if claimed not in taken:
                ranks[a] = claimed
                taken.add(claimed)
    free = (r for r in range(MAX_MEMBERS) if r not in taken)
    for a in order:
        if arrivals[a].launch.node_rank is None:
            rank = next(free)
            if nnodes_max is not None and rank >= nnodes_max:
                extras.append(a)
            else:
                ranks[a] = rank
    duplicates = {str(r): tuple(h) for r, h in claims.items() if len(h) > 1}
    return ranks, duplicates, extras


def unseated_reason(facts: NodeFacts, expected_n: int | None) -> str:
    claimed = facts.launch.node_rank
    if claimed is not None:
        return f"{facts.hostname} claims node rank {claimed}, but nnodes is {expected_n}: not seated"
    return f"{facts.hostname} came after all {expected_n} seats were taken: not seated"
