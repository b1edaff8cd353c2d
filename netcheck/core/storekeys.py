"""Every key netcheck writes to the host's store, in one place: who writes it, who reads it, what
it is keyed by, and the record it holds (Key[T]: the store's reads return a T, mypy checks it).
The product and the tests' fault tools (tests/faults.py) import these.

A key is ROOT/<run id>/NAME[/id...] (Key.at), or ROOT/NAME[/id...] where `shared`: the keys a
visitor needs before it knows it belongs to this run. A signed value (--token) has its MAC
beside it under key + MAC_SUFFIX; a collected name lists the ids that posted under NAME/POSTED
(Key.listing). A counter holds an int (Exchange.add_to), a list key ",ENTRY," entries
(Exchange.enlist): their Key names int and str.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from netcheck.core.bwrecords import Door, NodeReport
from netcheck.core.envfacts import EnvFacts
from netcheck.core.meshrecords import MeshDone, MeshResults, Offer
from netcheck.core.model import ClusterVerdict, NodeFacts, NodeResults, Visitor
from netcheck.core.rdzvrecords import Hello, Pong, Roster
from netcheck.core.seats import RankRuns, SeatBlock, Seated

T = TypeVar("T")

ROOT = "netcheck"
MAC_SUFFIX = "#mac"
POSTED = "posted"   # NAME/posted: the ids that posted NAME/ID, appended as "ID,"


class Slot(str, Generic[T]):
    """One key's full path in the store, with the record its value decodes to: a str wherever a
    store request takes a key (has, wait, drop), a T where it is read (Exchange.read)."""

    record: type[T]

    def __new__(cls, path: str, record: type[T]) -> Slot[T]:
        slot = super().__new__(cls, path)
        slot.record = record
        return slot


@dataclass(frozen=True)
class Key(Generic[T]):
    """A key's name, the record its value holds, and whether every run on the port shares it."""

    name: str
    record: type[T]
    shared: bool = False

    def __str__(self) -> str:   # in a key path, and where a message names it
        return self.name

    def at(self, run_id: str, *parts: object) -> Slot[T]:
        """The key's path in run `run_id` (its ids, if any, after the name)."""
        scope = (ROOT,) if self.shared else (ROOT, run_id)
        return Slot("/".join(scope + (self.name,) + tuple(str(p) for p in parts)), self.record)

    def listing(self, run_id: str) -> str:
        """NAME/posted: the list of the ids that posted NAME/ID (Exchange.post)."""
        return self.at(run_id, POSTED)


# --- shared by every run on the port (before a visitor is known to belong to this one) ---------
# The host's Hello (run id, nonce), written by the host, read by every visitor.
HOST = Key("host", Hello, shared=True)
# Counter: every visitor takes the next number.
VISITORS = Key("visitors", int, shared=True)
# VISITOR/V: visitor V's Visitor record (run id, hostname, rank, address), read by the host;
# VISITOR/POSTED lists V (a number drawn at random is found there).
VISITOR = Key("visitor", Visitor, shared=True)
# List of "V/K," clock pings, appended by visitors, answered by the host.
PINGS = Key("pings", str, shared=True)
# PONG/V/K: the host's clock for visitor V's ping K.
PONG = Key("pong", Pong, shared=True)

# --- this run's, during the rendezvous -----------------------------------------------------------
ARRIVALS = Key("arrivals", int)      # counter: every node of the run takes the next arrival number
NODE = Key("node", NodeFacts)        # NODE/A: arrival A's NodeFacts, read by the host
# The host's Roster (who is seated, at which rank, from which arrival): the host's own record,
# read by no joiner (issue 38: 1.1 MB at 10,000 nodes).
ROSTER = Key("roster", Roster)
SEAT = Key("seat", SeatBlock)        # SEAT/B: the ranks of arrivals in block B (core.seats), read by its joiners
# Every seated node's names, compact, and the blocks posted (core.seats.Seated): posted after
# the blocks, read by every joiner as the word that seating is done.
SEATED = Key("seated", Seated)
RESULT = Key("result", NodeResults)  # RESULT/A: arrival A's NodeResults (clock, lookups), read by the host
ALIVE = Key("alive", RankRuns)       # the host's list of the seated nodes that reported back, read by joiners

# --- this run's, in the phases after it (keyed by node rank) -------------------------------------
MESH_OFFER = Key("mesh-offer", Offer)          # MESH_OFFER/R: rank R's listeners, read by the ranks that target it
MESH_RESULT = Key("mesh-result", MeshResults)  # MESH_RESULT/R: rank R's connect attempts, read by the host
MESH_DONE = Key("mesh-done", MeshDone)         # the host's MeshDone (the paths it flagged), read by every joiner
ENV = Key("env", EnvFacts)                     # ENV/R: rank R's EnvFacts, read by the host
BW_NODE = Key("bw/node", NodeReport)           # BW_NODE/N: bandwidth node N's account of its workers, read by all
BW_ABORT = Key("bw/abort", int)                # a node's notice that the phase is aborted, polled by every node
BW_ALIVE = Key("bw/alive", int)                # BW_ALIVE/N: node N's heartbeat count; BW_ALIVE/posted: who beat
BW_DOOR = Key("bw/door", Door)                 # BW_DOOR/N: node N's Door, knocked on where a sweep stopped short
VERDICT = Key("verdict", ClusterVerdict)       # the host's ClusterVerdict, read by every joiner before it leaves
GO = Key("go", bool)                           # GO/PHASE: the host's word whether every node runs PHASE (agree)
BYE = Key("bye", int)                          # BYE/A: arrival A's goodbye, read by the host
REPORTED = Key("reported", int)                # the host's, once its report is written: a failing joiner waits

# Posted under a node's arrival number (it has no rank yet, or may get none); the later
# phases' keys are under its rank.
ARRIVAL_KEYED: tuple[Key[NodeResults] | Key[int], ...] = (RESULT, BYE)
