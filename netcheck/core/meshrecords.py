"""The mesh phase's records that leave it: every connect it made (`Attempt`, with the
full-size frames it sent), and the paths mesh.connect failed (`FlaggedPaths`), which the host
tells every joiner. The mesh itself is cluster.mesh; rules.nic judges these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from netcheck.core.fields import (
    FEW,
    PER_NODE_AND_ITEM,
    Count,
    Hostname,
    IfName,
    IpAddress,
    Millis,
    Mtu,
    NodeRank,
    Port,
    Range,
    Text,
    one_of,
)
from netcheck.core.model import ConntrackTable, NodeRanks, Route

# What became of one connect (Attempt.outcome), spelt as the wire carries it: "ok" (greeted,
# full-size frames echoed), "blackhole" (greeted, full-size frames lost), "refused",
# "filtered", "unreachable", "wrong-peer" (another process or node answered), "local" (the
# address is also the prober's own), "untried" (the mesh phase's deadline came first).
OUTCOMES = OK, BLACKHOLE, REFUSED, FILTERED, UNREACHABLE, WRONG_PEER, LOCAL, UNTRIED = (
    "ok", "blackhole", "refused", "filtered", "unreachable", "wrong-peer", "local", "untried")
MeshOutcome = Annotated[str, one_of(*OUTCOMES)]
CONNECTED = (OK, BLACKHOLE)   # outcomes where the connect and the greeting went through
# What became of one frame size (Trial.result): "echoed", "lost" (not back in time), "closed"
# (the peer hung up), "unreached" (a fresh connection for this size did not get through),
# "untried" (the mesh phase's deadline left less than the trial's time).
TRIAL_RESULTS = ECHOED, LOST, CLOSED, UNREACHED = ("echoed", "lost", "closed", "unreached")
TrialResult = Annotated[str, one_of(*TRIAL_RESULTS, UNTRIED)]


@dataclass(frozen=True)
class Trial:
    """Segments of one frame size, each sent alone and echoed back."""

    frame: Mtu             # bytes per frame on the wire, IP and TCP headers included
    result: TrialResult


@dataclass(frozen=True)
class Transfer:
    """Full-size frames over a connected path, and smaller ones where those were lost."""

    src_mtu: Mtu           # the sending interface's MTU (0: not known)
    dst_mtu: Mtu           # the peer interface's, from its offer (0: not known)
    trials: Annotated[tuple[Trial, ...], FEW]   # full-size first
    path_mtu: Mtu = 0      # what the kernel learnt of the path's MTU by the frames' end (IP_MTU; 0: not known)


@dataclass(frozen=True)
class Attempt:
    """One connect from node `src` to one of node `dst`'s candidates."""

    src: NodeRank
    dst: NodeRank
    ifname: IfName         # dst's interface
    address: IpAddress
    outcome: MeshOutcome
    rtt_ms: Millis | None  # connect round trip, when it connected
    src_ifname: IfName | None  # the interface the kernel sent it from (the route's truth)
    detail: Text
    transfer: Transfer | None = None   # the full-size frames, once greeted
    route: Route | None = None         # the kernel's way to the address, where nothing answered the connect

    @property
    def connected(self) -> bool:
        return self.outcome in CONNECTED


def passed_frame(transfer: Transfer) -> int:
    """The largest frame size that came back (0: none but the greeting's few bytes)."""
    return max((t.frame for t in transfer.trials if t.result == ECHOED), default=0)


@dataclass(frozen=True)
class FlaggedPaths:
    """The paths mesh.connect failed, for the phases after it. Small on purpose: the host
    tells it to every joiner, and a message larger than a frame does not cross a blackhole."""

    blackholes: int = 0             # how many lose full-size frames
    paths: Annotated[tuple[str, ...], FEW] = ()     # a line each, blackholes first, at most MESH_FLAGGED_TOLD
    cut_off: NodeRanks = ()   # nodes no peer reaches, or that reach no peer (rules.mesh.cut_off_nodes)


# What became of datagrams sent to a node that has no listener to greet (FrameTest.outcome):
# full-size ones answered too ("carried"), only small ones answered ("blackhole"), or nothing
# answered ("silent": a firewall, no route or a node gone, which tells nothing of frames).
FRAME_OUTCOMES = CARRIED, SILENT = ("carried", "silent")
FrameOutcome = Annotated[str, one_of(CARRIED, BLACKHOLE, SILENT)]


@dataclass(frozen=True)
class FrameTest:
    """The host's datagrams to the address of a node whose facts never came: a port nobody
    serves is answered by that node's kernel (port unreachable) to a small datagram, and to a
    full-size one only where the path carries full-size frames."""

    hostname: Hostname
    address: IpAddress
    frame: Mtu             # the full-size datagram's frame, IP and UDP headers included
    outcome: FrameOutcome


# Which way a node's traffic is translated (Translation.way): its connections leave from an
# address it does not own (masqueraded: a container's outbound traffic), or its peers reach it
# at an address it does not own (a port published through a DNAT).
WAYS = OUTBOUND, INBOUND = ("outbound", "inbound")


@dataclass(frozen=True)
class Translation:
    """A node whose address is translated (NAT) between it and its peers: the rendezvous works
    through the translation, NCCL and gloo do not (each rank connects to the addresses the
    others own and advertise)."""

    rank: NodeRank
    way: Annotated[str, one_of(*WAYS)]
    owns: Annotated[tuple[IpAddress, ...], FEW]   # its own addresses, loopback aside
    seen: Annotated[tuple[IpAddress, ...], FEW]   # where the others saw it, or reached it


@dataclass(frozen=True)
class WrongPrefix:
    """A node whose interface has another prefix length than its peers': it takes addresses
    behind a router for its own link (a prefix too wide) and asks ARP for them, unanswered, or
    sends its answers for on-link peers to a router (too narrow)."""

    rank: NodeRank
    interface: IfName
    address: Text          # as configured, "198.18.0.12/16"
    peers_prefix: Annotated[int, Range(0, 128, "a prefix length")]   # what its peers' interfaces have
    peers: NodeRanks       # the nodes between which and it no connect gets through


@dataclass(frozen=True)
class FullTable:
    """A node whose connection-tracking table was full around the mesh (at its limit when read,
    or its kernel dropping packets for want of an entry meanwhile): every new connection into or
    out of it is dropped unanswered, as a firewall's DROP looks from its peers."""

    rank: NodeRank
    count: Count           # the most entries read (before the mesh or after)
    limit: Count           # net.netfilter.nf_conntrack_max
    dropped: Count = 0     # packets its kernel dropped for want of an entry during netcheck's run


@dataclass(frozen=True)
class PathCauses:
    """What the host found that explains failed connects before any firewall does: told to
    every joiner with the mesh's go-ahead, so each names the same cause."""

    translated: Annotated[tuple[Translation, ...], FEW] = ()
    wrong_prefix: Annotated[tuple[WrongPrefix, ...], FEW] = ()
    full_tables: Annotated[tuple[FullTable, ...], FEW] = ()


# --- what travels through the host's store (storekeys MESH_OFFER, MESH_RESULT, MESH_DONE) ---------

@dataclass(frozen=True)
class Candidate:
    ifname: IfName
    address: IpAddress
    port: Port
    mtu: Mtu = 0           # the interface's MTU; 0: not known


@dataclass(frozen=True)
class Offer:
    """What a node listens on for the mesh, and the token its listeners answer with."""

    rank: NodeRank
    token: str
    candidates: Annotated[tuple[Candidate, ...], FEW]


@dataclass(frozen=True)
class MeshResults:
    rank: NodeRank
    attempts: Annotated[tuple[Attempt, ...], PER_NODE_AND_ITEM]   # a peer's candidates, per peer
    conntrack: ConntrackTable | None = None   # its table once its connects were made (None: none to read)


@dataclass(frozen=True)
class MeshDone:
    """The host's go-ahead, with the paths its mesh.connect flagged: a joiner sees only its
    own connects, and every node must agree on whether the bandwidth phase can run."""

    flagged: FlaggedPaths
    causes: PathCauses = PathCauses()   # what explains failed connects, as the host saw it
