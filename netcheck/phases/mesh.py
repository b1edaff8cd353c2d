"""Phase 4, mesh: every node connects to its target peers on every candidate interface."""

from __future__ import annotations

from netcheck.cluster import mesh, rendezvous
from netcheck.cluster.mesh import Attempt
from netcheck.cluster.store import Exchange, collect
from netcheck.core.constants import MESH_PHASE_LIMIT
from netcheck.core.deadline import Deadline
from netcheck.phases.state import Run
from netcheck.rules import nic as nic_rules, rdzv as rdzv_rules

# Store keys: each node's listeners, each node's connect results, the host's go-ahead to close.
OFFER, RESULTS, DONE = "mesh-offer", "mesh-result", "mesh-done"


def connect_mesh(run: Run, seat: rendezvous.Seat, names: dict[int, str]) -> tuple[Attempt, ...]:
    """Listen on every candidate and connect to each target peer's; listeners stay open until
    the host has every node's results, since someone may still be connecting to them.

    A node reads only its targets' offers, and only the host reads every result: a node's
    cost grows with its sample, not with the cluster.
    """
    ex, me, ranks = seat.exchange, seat.rank, sorted(names)
    deadline = run.phase_deadline(MESH_PHASE_LIMIT)
    sample = mesh.parse_mode(run.config.mesh) if run.config.mesh else mesh.default_mode(len(ranks))
    peers = mesh.targets(me, ranks, sample, run.config.run_id)
    with mesh.Listeners(me, run.facts.nics) as listeners:
        ex.post(OFFER, me, listeners.offer())
        offers = collect(ex, mesh.Offer, OFFER, peers, deadline)
        mine = mesh.probe_peers(me, {r: o for r, o in offers.items() if o.rank == r}, peers, run.facts.nics)
        ex.post(RESULTS, me, mesh.MeshResults(me, mine))
        if run.role != "host":
            _wait_quietly(ex, ex.key(DONE), deadline)
            run.findings += nic_rules.mesh_findings(names, mine)
            run.findings += rdzv_rules.lost_findings("mesh", names, [p for p in peers if p not in offers])
            return mine
        results = collect(ex, mesh.MeshResults, RESULTS, ranks, deadline)
        ex.put(ex.key(DONE), len(results))
    # Trust nothing: a node speaks only for the connects it made itself.
    attempts = tuple(a for r, res in results.items() for a in res.attempts if a.src == r)
    run.findings += nic_rules.mesh_findings(names, attempts)
    lost = [r for r in ranks if r not in results]
    run.lose("mesh", names, lost)
    return attempts


def _wait_quietly(ex: Exchange, key: str, deadline: Deadline) -> None:
    """Wait for the host's go-ahead until the deadline; a host that died raises instead."""
    try:
        ex.wait(key, deadline)
    except TimeoutError:
        pass
