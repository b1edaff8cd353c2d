"""Phase 4, mesh: every node connects to its target peers on every candidate interface."""

from __future__ import annotations

from dataclasses import dataclass

from netcheck.cluster import mesh, rendezvous
from netcheck.cluster.mesh import Attempt
from netcheck.cluster.store import Exchange, collect
from netcheck.core import codec
from netcheck.core.constants import MESH_PHASE_LIMIT
from netcheck.core.deadline import Deadline
from netcheck.phases.state import Run
from netcheck.rules import nic as nic_rules, rdzv as rdzv_rules

# Store keys: each node's listeners, each node's connect results, the host's go-ahead to close.
OFFER, RESULTS, DONE = "mesh-offer", "mesh-result", "mesh-done"


@dataclass(frozen=True)
class MeshDone:
    """The host's go-ahead, with the paths its mesh.connect flagged: a joiner sees only its
    own connects, and every node must agree on whether the bandwidth phase can run."""

    flagged: nic_rules.FlaggedPaths


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
            done = _host_word(ex, deadline)
            run.flagged = done.flagged if done else nic_rules.flagged_paths(names, mine)
            run.findings += nic_rules.mesh_findings(names, mine)
            run.findings += rdzv_rules.lost_findings("mesh", names, [p for p in peers if p not in offers])
            return mine
        results = collect(ex, mesh.MeshResults, RESULTS, ranks, deadline)
        # Trust nothing: a node speaks only for the connects it made itself.
        attempts = tuple(a for r, res in results.items() for a in res.attempts if a.src == r)
        run.flagged = nic_rules.flagged_paths(names, attempts)
        ex.put(ex.key(DONE), MeshDone(run.flagged))
    run.findings += nic_rules.mesh_findings(names, attempts)
    lost = [r for r in ranks if r not in results]
    run.lose("mesh", names, lost)
    return attempts


def _host_word(ex: Exchange, deadline: Deadline) -> MeshDone | None:
    """The host's go-ahead, waited for until the deadline (None: it did not come, or did not
    decode); a host that died raises instead."""
    try:
        return ex.wait_read(MeshDone, ex.key(DONE), deadline)
    except (TimeoutError, codec.DecodeError):
        return None
