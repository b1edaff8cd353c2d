"""`netcheck inspect`'s records: what a running job's store and NCCL's RAS showed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class NodeDesc:
    """A torchrun agent as its rendezvous names it (torch's _NodeDesc)."""

    addr: str          # the node's FQDN, or --local-addr
    pid: int           # the agent's process id
    local_id: int

    def __str__(self) -> str:
        return f"{self.addr} (pid {self.pid})"


@dataclass(frozen=True)
class RendezvousView:
    """torchrun's c10d rendezvous state, as read (times are ISO 8601, UTC)."""

    run_id: str
    round: int
    complete: bool
    closed: bool
    deadline: str | None                          # when a round still waiting closes anyway
    participants: tuple[tuple[NodeDesc, int], ...]  # (node, its rank in the round)
    wait_list: tuple[NodeDesc, ...]               # waiting for the next round
    redundancy_list: tuple[NodeDesc, ...]         # beyond max nodes: spare
    last_heartbeats: tuple[tuple[NodeDesc, str | None], ...]


@dataclass(frozen=True, order=True)
class RasRank:
    rank: int
    host: str
    pid: int                        # -1: unknown
    state: str                      # "ok" | "init" (still initialising) | "error" | "missing" | "dead"


@dataclass(frozen=True)
class RasComm:
    """One NCCL communicator as RAS sees it: the ranks it heard from and the missing ones."""

    hash: str
    size: int
    ranks: tuple[RasRank, ...]


@dataclass(frozen=True)
class RasView:
    """NCCL's RAS answer on this node (NCCL_RAS_ADDR, default localhost:28028)."""

    address: str
    answered: bool
    error: str                      # why it did not answer (or could not be read); "" when it was
    nccl_version: str = ""
    communicators: tuple[RasComm, ...] = ()
    text: str = ""                  # NCCL before 2.28.7 answers in text only: kept as written


@dataclass(frozen=True)
class JobView:
    """What `netcheck inspect` saw: the store's keys, torchrun's state, NCCL's RAS."""

    endpoint: str
    run_id: str
    keys: tuple[str, ...] | None    # None: this torch cannot list a store's keys
    seconds: float                  # how long the look took
    rendezvous: RendezvousView | None = None
    ras: RasView | None = None
