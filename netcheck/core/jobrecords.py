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
class RunState:
    """One run id's c10d rendezvous state: decoded, absent (no round yet), or refused."""

    run_id: str
    state: RendezvousView | None
    refused: str = ""               # why the value was not decoded ("" when it was)
    hostile: bool = False           # refused because it asked for code


@dataclass(frozen=True)
class JobView:
    """What `netcheck inspect` saw: the store's keys, torchrun's state, NCCL's RAS."""

    endpoint: str
    run_id: str | None              # the run id asked for; None: every run the store holds
    observed_at: str                # inspect's clock (UTC, ISO 8601) when it read the store
    seconds: float                  # how long the look took
    store_error: str = ""           # why no store answered ("" when one did)
    keys: tuple[str, ...] | None = None   # None: unread, or this torch cannot list keys
    hidden_keys: int = 0            # counted by the store, never listed (its init/ counter)
    run_ids: tuple[str, ...] = ()   # every run id with a c10d state in the store
    runs: tuple[RunState, ...] = ()  # the states read: the one asked for, else all of them
    arrived_ranks: tuple[int, ...] = ()   # init_process_group ranks whose address key is there
    world_size: int | None = None   # --world-size (WORLD_SIZE): the ranks a static job waits for
    nnodes: tuple[int, int] | None = None  # --nnodes: the nodes a torchrun job waits for
    ras: RasView | None = None
