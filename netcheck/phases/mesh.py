"""Phase 4, mesh: every node connects to its target peers on every candidate interface."""

from __future__ import annotations

from collections.abc import Container, Generator
from dataclasses import dataclass
from typing import TypeVar

from netcheck.cluster import mesh, rendezvous
from netcheck.cluster.collect import collect, posted_by
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.constants import (
    MESH_MAX_CANDIDATES,
    MESH_OFFER_SHARE,
    MESH_PACES,
    MESH_PHASE_LIMIT,
    MESH_RESULTS_MARGIN,
)
from netcheck.core.deadline import Deadline
from netcheck.core.meshrecords import Attempt, FlaggedPaths, MeshDone, MeshResults, Offer, PathCauses
from netcheck.core.model import HOST, ConntrackTable, Finding, Member
from netcheck.core.storekeys import MESH_DONE, MESH_OFFER, MESH_RESULT, Key
from netcheck.facts.conntrack import read_conntrack
from netcheck.phases.agree import host_word
from netcheck.phases.state import Learnt, Lost, Run, seated_rank
from netcheck.rules import conntrack as conntrack_rules
from netcheck.rules import mesh as mesh_rules
from netcheck.rules import ports as ports_rules
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules.registry import HOST_CONNTRACK

T = TypeVar("T")


def connect_mesh(run: Run, seat: rendezvous.Seat, names: dict[int, str]) -> Generator[Learnt, None, None]:
    """Listen on every candidate and connect to each target peer's; listeners stay open until
    the host has every node's results, since someone may still be connecting to them.

    A node reads only its targets' offers, and only the host reads every result: a node's
    cost grows with its sample, not with the cluster.
    """
    ex, me, ranks = seat.exchange, seated_rank(seat), sorted(names)
    # Each node sees the alive list, and then its targets' offers, at one look per pace: at
    # 10,000 nodes a fixed 20 s (10 s of offers) named healthy nodes lost, so the phase (and
    # its offers' share) follows the pace, alike on every node (each paced by the seated count).
    deadline = run.phase_deadline(max(MESH_PHASE_LIMIT, MESH_PACES * ex.pause))
    # Every live node offers at once; one that never does must not spend the time the
    # others need to connect and report back (they, not it, would be named lost).
    offers_deadline = deadline.within(deadline.remaining() * MESH_OFFER_SHARE)
    sample = run.config.mesh.sample if run.config.mesh else mesh.default_mode(len(ranks))
    peers = mesh.targets(me, ranks, sample, run.config.run_id)
    with mesh.Listeners(me, run.local_facts.nics) as listeners:
        ex.post(MESH_OFFER, me, listeners.offer())
        offers = _usable(ex, collect(ex, MESH_OFFER, peers, offers_deadline))
        mine = mesh.probe_peers(me, offers, peers, run.local_facts.nics,
                                deadline.within(deadline.remaining() - MESH_RESULTS_MARGIN))
        # The table once this node's connects were made: one they filled, or found full, is seen.
        table = read_conntrack()
        ex.post(MESH_RESULT, me, MeshResults(me, mine, table))
        if run.role != HOST:
            done, refused = _host_word(ex, deadline)
            causes = done.causes if done else PathCauses()
            findings = refused + _own_table(run, names, me, mine, table, causes) \
                + mesh_rules.mesh_findings(names, mine, causes, run.members) \
                + rdzv_rules.lost_findings("mesh", names, _unheard(ex, MESH_OFFER, peers, offers))
            yield Learnt(tuple(findings), withdrawn=frozenset((HOST_CONNTRACK,)), attempts=mine, causes=causes,
                         flagged=done.flagged if done else mesh_rules.flagged_paths(names, mine))
            return
        # A node that never offered will not report: waiting for its results would make the
        # nodes that did report late for the go-ahead. One is not taken for it before the
        # offers' deadline, though: every node sees the host's list at its own poll, and at
        # scale (one look per pace) offers come over a second or so.
        offered = posted_by(ex, MESH_OFFER, ranks, offers_deadline) | set(offers) | {me}
        results = collect(ex, MESH_RESULT, [r for r in ranks if r in offered], deadline)
        attempts = own_attempts(results)
        yield Learnt(attempts=attempts)   # every connect, kept in the report whatever becomes of the rules
        paths = judge_attempts(run, names, attempts, results)
        ex.put(ex.key(MESH_DONE), MeshDone(paths.flagged, paths.causes))
    yield judge_mesh(run, names, paths, _unheard(ex, MESH_RESULT, ranks, results))


@dataclass(frozen=True)
class Paths:
    """Every node's connects as the host takes them, the failed paths and what explains them
    (the host's word to every node, MeshDone), and each node's table after its connects."""
    attempts: tuple[Attempt, ...]
    flagged: FlaggedPaths
    causes: PathCauses
    tables_after: dict[int, ConntrackTable | None]


def own_attempts(results: dict[int, MeshResults]) -> tuple[Attempt, ...]:
    """Every node's connects from their results, each node's own: a node speaks only for the
    connects it made itself."""
    return tuple(a for r, res in results.items() for a in res.attempts if a.src == r)


def judge_attempts(run: Run, names: dict[int, str], attempts: tuple[Attempt, ...],
                   results: dict[int, MeshResults]) -> Paths:
    """Every node's connects (own_attempts), with the failed paths and what explains them."""
    tables = {r: res.conntrack for r, res in results.items()}
    return Paths(attempts, mesh_rules.flagged_paths(names, attempts), mesh_rules.path_causes(
        run.members, attempts, run.causes.translated, conntrack_rules.full_tables(run.members, tables)), tables)


def judge_mesh(run: Run, names: dict[int, str], paths: Paths, unheard: list[int]) -> Learnt:
    """The host's mesh.connect findings, and every node's connection-tracking table judged again
    with its reading after the mesh (in place of the rendezvous's), the connects a full one left
    unanswered quoted; the nodes whose results never came (unheard) lost in the mesh."""
    findings = conntrack_rules.table_findings(run.members, paths.tables_after, attempts=paths.attempts) \
        + mesh_rules.mesh_findings(names, paths.attempts, paths.causes, run.members, unheard)
    return Learnt(tuple(findings), withdrawn=frozenset((HOST_CONNTRACK,)), attempts=paths.attempts,
                  flagged=paths.flagged, causes=paths.causes, tables_after=paths.tables_after,
                  lost=Lost("mesh", names, tuple(unheard)))


def _own_table(run: Run, names: dict[int, str], me: int, mine: tuple[Attempt, ...],
               table: ConntrackTable | None, causes: PathCauses) -> list[Finding]:
    """A joiner's table after its connects, judged for itself (in place of its local phase's
    view) with the connects it left unanswered; and the full tables the host told of (causes),
    where they explain this node's own connects."""
    told = tuple(f for f in causes.full_tables if f.rank != me)
    own = conntrack_rules.table_findings((Member(me, run.local_facts),), {me: table},
                                         ports_rules.own_size(run.local_facts.launch), attempts=mine)
    return own + conntrack_rules.told_findings(names, told, mine, run.local_facts)


def _usable(ex: Exchange, offers: dict[int, Offer]) -> dict[int, Offer]:
    """The offers this node connects to; one under another rank's key, or listing more
    candidates than a node has interfaces for, is refused (its sender named), not tried."""
    usable = {}
    for rank, offer in offers.items():
        if offer.rank != rank:
            ex.interference.refuse(MESH_OFFER, rank, f"an offer of rank {offer.rank} under rank {rank}'s key")
        elif len(offer.candidates) > MESH_MAX_CANDIDATES:
            ex.interference.refuse(MESH_OFFER, rank, f"{len(offer.candidates)} candidates to connect to, over "
                                                     f"the {MESH_MAX_CANDIDATES} a node may offer")
        else:
            usable[rank] = offer
    return usable


def _unheard(ex: Exchange, key: Key[T], ids: list[int], heard: Container[int]) -> list[int]:
    """The ids whose value never came: a refused value's sender is named for that instead."""
    return [i for i in ids if i not in heard and ex.interference.refused(key, i) is None]


def _host_word(ex: Exchange, deadline: Deadline) -> tuple[MeshDone | None, list[Finding]]:
    """The host's go-ahead, waited for until the deadline (None: it did not come, or did not
    decode); a host that died raises instead. One this node cannot read is said: the paths it
    then goes on with are its own connects', not the cluster's."""
    key = ex.key(MESH_DONE)
    try:
        return host_word(ex, key, deadline), []
    except TimeoutError:
        return None, []
    except codec.DecodeError as e:
        return None, [rdzv_rules.hosts_message_refused(key, str(e))]
