"""`netcheck inspect`'s records: what a running job's store and NCCL's RAS showed.

What the job's store and RAS wrote is free text here (fields.Text), kept exactly as read:
a report quotes it as evidence, whatever it holds, and escapes it where it prints it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from netcheck.core.fields import PER_NODE_AND_ITEM, PER_RANK, Count, GroupSize, Pid, PidOrMinusOne, Rank, Seconds, Text


@dataclass(frozen=True, order=True)
class NodeDesc:
    """A torchrun agent as its rendezvous names it (torch's _NodeDesc)."""

    addr: Text         # the node's FQDN, or --local-addr
    pid: Pid           # the agent's process id
    local_id: Count

    def __str__(self) -> str:
        return f"{self.addr} (pid {self.pid})"


Agents = Annotated[tuple[NodeDesc, ...], PER_RANK]


@dataclass(frozen=True)
class RendezvousView:
    """torchrun's c10d rendezvous state, as read (times are ISO 8601, UTC)."""

    run_id: Text
    round: Count
    complete: bool
    closed: bool
    deadline: Text | None                         # when a round still waiting closes anyway
    participants: Annotated[tuple[tuple[NodeDesc, Count], ...], PER_RANK]   # (node, its rank)
    wait_list: Agents                             # waiting for the next round
    redundancy_list: Agents                       # beyond max nodes: spare
    last_heartbeats: Annotated[tuple[tuple[NodeDesc, Text | None], ...], PER_RANK]


@dataclass(frozen=True, order=True)
class RoundMember:
    """A node of a completed round as the round's own keys tell, once the state has dropped it
    (torch.rendezvous.RUN.ROUND/torchelastic/role_info/<group rank>, .../assigned_ranks/<group rank>,
    written by the agents after the round completed; values are JSON, read bounded)."""

    group_rank: Count
    local_world_size: Count | None = None    # its workers (role_info); None: not read
    first_rank: Count | None = None          # its first worker's global rank (assigned_ranks)
    # (global rank, host) where its workers' debug servers registered a URL (debug_server/rank<N>)
    hosts: Annotated[tuple[tuple[Count, Text], ...], PER_RANK] = ()
    unread: Text = ""                        # why a value was not read ("" when each was)


@dataclass(frozen=True)
class RoundKeys:
    """One run's current round as the store's keys show it, beside its decoded state."""

    run_id: Text
    round: Count
    group_ranks: Annotated[tuple[Count, ...], PER_RANK]   # every group rank with a role_info or assigned_ranks key
    listed: bool                                          # from the listed keys; False: probed one by one
    # what the store holds of the agents inspect asked about: those the state no longer lists
    # as participants, and those past torchrun's dead limit (every agent drops them on its next read)
    members: Annotated[tuple[RoundMember, ...], PER_RANK] = ()
    error: Text = ""                                      # why the keys were not read ("" when they were)


@dataclass(frozen=True, order=True)
class RasRank:
    rank: Rank
    host: Text
    pid: PidOrMinusOne              # -1: unknown
    state: str                      # "ok" | "init" (still initialising) | "error" | "missing" | "dead"


@dataclass(frozen=True)
class RasComm:
    """One NCCL communicator as RAS sees it: the ranks it heard from and the missing ones."""

    hash: Text
    size: GroupSize
    ranks: Annotated[tuple[RasRank, ...], PER_RANK]


@dataclass(frozen=True)
class RasView:
    """NCCL's RAS answer on this node (NCCL_RAS_ADDR, default localhost:28028)."""

    address: Text                   # NCCL_RAS_ADDR
    answered: bool
    error: Text                     # why it did not answer (or could not be read); "" when it was
    nccl_version: Text = ""
    communicators: Annotated[tuple[RasComm, ...], PER_RANK] = ()
    text: Text = ""                 # NCCL before 2.28.7 answers in text only: kept as written


@dataclass(frozen=True)
class RunState:
    """One run id's c10d rendezvous state: decoded, absent (no round yet), or refused."""

    run_id: Text
    state: RendezvousView | None
    refused: Text = ""              # why the value was not decoded ("" when it was)
    hostile: bool = False           # refused because it asked for code


@dataclass(frozen=True)
class JobView:
    """What `netcheck inspect` saw: the store's keys, torchrun's state, NCCL's RAS."""

    endpoint: str
    run_id: str | None              # the run id asked for; None: every run the store holds
    observed_at: str                # inspect's clock (UTC, ISO 8601) when it read the store
    seconds: Seconds                # how long the look took
    store_error: Text = ""          # why no store answered ("" when one did)
    # None: unread, or this torch cannot list keys; a key is whatever a client wrote
    keys: Annotated[tuple[Text, ...], PER_NODE_AND_ITEM] | None = None
    hidden_keys: Count = 0          # counted by the store, never listed (its init/ counter)
    # every run id with a c10d state in the store
    run_ids: Annotated[tuple[Text, ...], PER_NODE_AND_ITEM] = ()
    # the states read: the one asked for, else all of them
    runs: Annotated[tuple[RunState, ...], PER_NODE_AND_ITEM] = ()
    # each decoded run's current round as its keys show it (torchrun's evictions)
    rounds: Annotated[tuple[RoundKeys, ...], PER_NODE_AND_ITEM] = ()
    # init_process_group ranks whose address key is there
    arrived_ranks: Annotated[tuple[Rank, ...], PER_RANK] = ()
    world_size: GroupSize | None = None   # --world-size (WORLD_SIZE): the ranks a static job waits for
    nnodes: tuple[Count, Count] | None = None  # --nnodes: the nodes a torchrun job waits for
    ras: RasView | None = None
