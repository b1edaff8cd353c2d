"""What a hung job's flight recorder says: each rank's last collectives per process group,
read from torch's dumps (or, live, from its debug server), and the files refused.

torch's flight recorder keeps a ring of the collectives each rank issued: its group, its
sequence id within the group, the op and its tensors' sizes and dtypes, where in the
program it was called, and, where the backend says so truthfully (NCCL), whether it
completed. A rank keeps only the tail of each group here: the analysis compares the ranks
at the sequence ids they share, and the tail is where a hang shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from netcheck.core.fields import PER_NODE_AND_ITEM, PER_RANK, Count, Items, Rank, Text

HANG_TAIL = 8   # a rank's last collectives kept per group


@dataclass(frozen=True)
class Collective:
    """One entry of a rank's flight recorder."""

    seq: Count                     # collective_seq_id: the n-th collective of its group on this rank
    op: Text                       # profiling_name, e.g. "nccl:all_reduce", "gloo:all_reduce"
    sizes: Text                    # the input and output sizes, as written ("[[1000]] -> [[1000]]")
    dtypes: Text                   # the input dtypes, as written ("Float")
    completed: bool | None         # None: the backend does not say (gloo leaves state "scheduled")
    where: Text                    # the caller's line: the innermost frame outside torch ("train.py:15 in step")


@dataclass(frozen=True)
class GroupTail:
    """A rank's last collectives in one process group."""

    group: Text                    # the group's name as the entries carry it ("0", "1", ...)
    desc: Text                     # its description ("default_pg", "undefined", a user's name)
    ranks: Annotated[tuple[Rank, ...], PER_RANK]   # its global ranks where the dump lists them; () if not
    last: Annotated[tuple[Collective, ...], Items(HANG_TAIL)]   # oldest first


@dataclass(frozen=True)
class RankTrace:
    """One rank's flight recorder."""

    rank: Rank
    source: Text                   # the file (or URL) it came from
    host: Text                     # "" where the source does not say
    groups: Annotated[tuple[GroupTail, ...], PER_NODE_AND_ITEM]
    stack: Text = ""               # the rank's Python stack's innermost user frame, live only


@dataclass(frozen=True)
class Refused:
    """A trace file not read: named, never run."""

    source: Text
    reason: Text
    hostile: bool                  # it asked for code (a global, a persistent id, ...)


@dataclass(frozen=True)
class HangView:
    """Every rank's trace that could be read, what was refused, and the ranks expected."""

    source: Text                   # the folder (or "live")
    traces: Annotated[tuple[RankTrace, ...], PER_RANK]
    refused: Annotated[tuple[Refused, ...], PER_RANK] = ()
    world_size: Count | None = None   # --world-size, else the largest rank seen + 1
    prefix: Text = ""              # the dumps' file names before the rank (--prefix, or the commonest)
    ignored: Count = 0             # other files in the folder, not named so: not read, not judged
