"""Every key netcheck writes to the host's store, in one place: who writes it, who reads it, and
what it is keyed by. The product and the tests' fault tools (tests/faults.py) import these.

A key is ROOT/<run id>/NAME[/id...] (Exchange.key), or ROOT/NAME[/id...] where `shared`: the
keys a visitor needs before it knows it belongs to this run. A signed value (--token) has
its MAC beside it under key + MAC_SUFFIX; a collected name lists the ids that posted under
NAME/POSTED.
"""

from __future__ import annotations

ROOT = "netcheck"
MAC_SUFFIX = "#mac"
POSTED = "posted"   # NAME/posted: the ids that posted NAME/ID, appended as "ID,"

# --- shared by every run on the port (before a visitor is known to belong to this one) ---------
HOST = "host"             # the host's Hello (run id, nonce), written by the host, read by every visitor
VISITORS = "visitors"     # counter: every visitor takes the next number
VISITOR = "visitor"       # VISITOR/V: visitor V's Visitor record (run id, hostname, rank, address), read by
                          # the host; VISITOR/POSTED lists V (a number drawn at random is found there)
PINGS = "pings"           # list of "V/K," clock pings, appended by visitors, answered by the host
PONG = "pong"             # PONG/V/K: the host's clock for visitor V's ping K

# --- this run's, during the rendezvous -----------------------------------------------------------
ARRIVALS = "arrivals"     # counter: every node of the run takes the next arrival number
NODE = "node"             # NODE/A: arrival A's NodeFacts, read by the host
ROSTER = "roster"         # the host's Roster (who is seated, at which rank, from which arrival): the
                          # host's own record, read by no joiner (issue 38: 1.1 MB at 10,000 nodes)
SEAT = "seat"             # SEAT/B: the ranks of arrivals in block B (core.seats), read by its joiners
SEATED = "seated"         # every seated node's names, compact, and the blocks posted (core.seats.Seated):
                          # posted after the blocks, read by every joiner as the word that seating is done
RESULT = "result"         # RESULT/A: arrival A's NodeResults (clock, lookups), read by the host
ALIVE = "alive"           # the host's list of the seated nodes that reported back, read by joiners

# --- this run's, in the phases after it (keyed by node rank) -------------------------------------
MESH_OFFER = "mesh-offer"     # MESH_OFFER/R: rank R's listeners, read by the ranks that target it
MESH_RESULT = "mesh-result"   # MESH_RESULT/R: rank R's connect attempts, read by the host
MESH_DONE = "mesh-done"       # the host's MeshDone (the paths it flagged), read by every joiner
ENV = "env"                   # ENV/R: rank R's EnvFacts, read by the host
BW_NODE = "bw/node"           # BW_NODE/N: bandwidth node N's account of its workers, read by every node
BW_ABORT = "bw/abort"         # a node's notice that the phase is aborted, polled by every node
BW_ALIVE = "bw/alive"         # BW_ALIVE/N: node N's heartbeat count; BW_ALIVE/posted lists who beat
BW_DOOR = "bw/door"           # BW_DOOR/N: node N's Door, knocked on by its peers where a sweep stopped short
VERDICT = "verdict"           # the host's ClusterVerdict, read by every joiner before it leaves
GO = "go"                     # GO/PHASE: the host's word whether every node runs PHASE (phases.agree)
BYE = "bye"                   # BYE/A: arrival A's goodbye, read by the host
REPORTED = "reported"         # the host's, once its report is written: a failing joiner waits for it

# Posted under a node's arrival number (it has no rank yet, or may get none); the later
# phases' keys are under its rank.
ARRIVAL_KEYED = (RESULT, BYE)
