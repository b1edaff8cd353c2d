"""The rendezvous's records as they travel through the host's store (storekeys HOST, PONG,
ROSTER): the host's hello, its answer to a clock ping, and the roster of seated nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from netcheck.core.fields import PER_NODE, Arrival, Host, Hostname, NodeAddress, NodeRank, RunId


@dataclass(frozen=True)
class Hello:
    run_id: RunId
    hostname: Hostname
    version: str
    nonce: str = ""   # the run's, fresh per host start: signed values (this one too) are bound to it


@dataclass(frozen=True)
class Pong:
    """The host's answer to a clock ping. Its key carries the asker's own fresh ticket, so under
    --token it is signed without the run's nonce and cannot be replayed: the nonce it carries
    is how a joiner learns the run's, whatever hello another client left under the host's key."""

    time: float
    nonce: str


@dataclass(frozen=True)
class RosterEntry:
    arrival: Arrival
    rank: NodeRank
    hostname: Hostname
    fqdn: Host
    address: NodeAddress


@dataclass(frozen=True)
class Roster:
    entries: Annotated[tuple[RosterEntry, ...], PER_NODE]

    def hostnames(self) -> dict[int, str]:
        """rank -> hostname of every seated node."""
        return {e.rank: e.hostname for e in self.entries}
