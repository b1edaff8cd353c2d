"""The host's seating as a joiner reads it (issue 38): its own seat from a block of a few
hundred arrivals' seats, and every seated node's names in a compact form, read once. The
whole Roster (about 110 bytes a node) read by every joiner was 11 GB served by the host's
one-thread store at 10,000 nodes.

Names run as Slurm's hostlists do (sim[0001-9999]): consecutive ranks whose names differ
only in a number counting up by one are one NameRun; under torchrun each name is held by a
node's workers, consecutive ranks too (sim0001 for ranks 8-15, sim0002 for 16-23: one run
with repeat 8); a name that fits no run is a run of one.

    compact({1: "sim0001", 2: "sim0002", 3: "gpu-a"})
        (NameRun(1, 2, "sim", 1, 4, ""), NameRun(3, 1, "gpu-a", 0, 0, ""))
    expand(that, is_safe_hostname)   {1: "sim0001", 2: "sim0002", 3: "gpu-a"}

Ranks run too (the host's alive list): rank_runs((1, 2, 3, 7)) holds RankRun(1, 3), RankRun(7, 1).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Annotated, Callable

from netcheck.core.codec import DecodeError
from netcheck.core.constants import MAX_MEMBERS, SEAT_BLOCK
from netcheck.core.fields import PER_NODE, Arrival, NamePart, NodeCount, NodeRank, NodeRankOrMinusOne, Range
from netcheck.core.names import HOSTNAME_MAX_BYTES

# The number of a name's first label (18 digits at most: it fits an int64), what comes before
# it, and what after (the rest of that label, the domain): gpu-a1-003.dc2 counts in 003.
_NUMBERED = re.compile(r"([^.]*?)(\d{1,18})([^.\d]*(?:\..*)?)")


@dataclass(frozen=True)
class NameRun:
    """Ranks rank .. rank+count-1, rank+i named prefix + (number + i // repeat, zero-padded to
    width) + suffix: each name held by `repeat` ranks in a row (a torchrun node's workers);
    width 0: one name, prefix + suffix, no number, held by every rank of the run."""

    rank: NodeRank
    count: NodeCount
    prefix: NamePart
    number: Annotated[int, Range(0, 10**18, "a name's number")]
    width: Annotated[int, Range(0, HOSTNAME_MAX_BYTES, "a number's width")]
    suffix: NamePart
    repeat: Annotated[int, Range(1, MAX_MEMBERS, "ranks a name is held by")] = 1


@dataclass(frozen=True)
class Seated:
    """Every seated node's hostname and FQDN (the lookups' targets) by rank, and the seat
    blocks the host posted: an arrival in none of them was not seated."""

    hostnames: Annotated[tuple[NameRun, ...], PER_NODE]
    fqdns: Annotated[tuple[NameRun, ...], PER_NODE]
    blocks: Annotated[tuple[Arrival, ...], PER_NODE]


@dataclass(frozen=True)
class SeatBlock:
    """The ranks of arrivals block * SEAT_BLOCK onwards, in order; -1: not seated."""

    ranks: Annotated[tuple[NodeRankOrMinusOne, ...], PER_NODE]


def compact(names: dict[int, str]) -> tuple[NameRun, ...]:
    runs: list[NameRun] = []
    for rank, count, name in _same_name_groups(names):
        last = runs[-1] if runs else None
        if last and last.width and rank == last.rank + last.count and count == last.repeat \
                and _name(last, last.count) == name:
            runs[-1] = replace(last, count=last.count + count)
        else:
            runs.append(replace(_run_of(rank, name), count=count, repeat=count))
    return tuple(runs)


def _same_name_groups(names: dict[int, str]) -> list[tuple[int, int, str]]:
    """(first rank, count, name) of each stretch of consecutive ranks with one name: a node's
    workers. Numbered runs are made of stretches of one size (a stretch cut short by a rank
    that never came is a run of its own)."""
    groups: list[tuple[int, int, str]] = []
    for rank in sorted(names):
        if groups and groups[-1][2] == names[rank] and rank == groups[-1][0] + groups[-1][1]:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1, names[rank])
        else:
            groups.append((rank, 1, names[rank]))
    return groups


def _run_of(rank: int, name: str) -> NameRun:
    numbered = _NUMBERED.fullmatch(name)
    if numbered is None:
        return NameRun(rank, 1, name, 0, 0, "")
    return NameRun(rank, 1, numbered[1], int(numbered[2]), len(numbered[2]), numbered[3])


def _name(run: NameRun, i: int) -> str:
    return run.prefix + (str(run.number + i // run.repeat).zfill(run.width) if run.width else "") + run.suffix


def expand(runs: tuple[NameRun, ...], valid: Callable[[str], bool]) -> dict[int, str]:
    """rank -> name; a name `valid` refuses, or more names than a cluster has (a few runs can
    count millions), is refused as a value that does not decode is."""
    names: dict[int, str] = {}
    for run in runs:
        if run.rank + run.count > MAX_MEMBERS or len(names) + run.count > MAX_MEMBERS or \
                (not run.width and run.repeat != run.count):
            raise DecodeError(f"a run of {run.count} names from rank {run.rank}: past {MAX_MEMBERS} seats, or "
                              "unnumbered and not one name")
        for i in range(run.count):
            name = _name(run, i)
            if not valid(name):
                raise DecodeError(f"rank {run.rank + i}: {name!r} is not a hostname")
            names[run.rank + i] = name
    return names


@dataclass(frozen=True)
class RankRun:
    """Ranks rank .. rank+count-1."""

    rank: NodeRank
    count: NodeCount


@dataclass(frozen=True)
class RankRuns:
    """Ranks as runs of consecutive ones (the host's list of who is still here)."""

    runs: Annotated[tuple[RankRun, ...], PER_NODE]


def rank_runs(ranks: tuple[int, ...]) -> RankRuns:
    """Ranks as runs of consecutive ones: the host's alive list read by every joiner was 59 KB
    at 10,000 nodes (590 MB through the store's one thread); as runs, a few bytes where few
    are lost."""
    runs: list[RankRun] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1].rank + runs[-1].count:
            runs[-1] = RankRun(runs[-1].rank, runs[-1].count + 1)
        else:
            runs.append(RankRun(rank, 1))
    return RankRuns(tuple(runs))


def ranks_of(runs: RankRuns) -> tuple[int, ...]:
    """The ranks, in order; runs past MAX_MEMBERS (a few can count millions) refused as a value
    that does not decode is."""
    ranks: list[int] = []
    for run in runs.runs:
        if run.rank + run.count > MAX_MEMBERS or len(ranks) + run.count > MAX_MEMBERS:
            raise DecodeError(f"a run of {run.count} ranks from rank {run.rank}: past {MAX_MEMBERS} seats")
        ranks += range(run.rank, run.rank + run.count)
    return tuple(sorted(set(ranks)))


def seat_blocks(ranks: dict[int, int]) -> dict[int, SeatBlock]:
    """arrival -> rank of the seated, as the blocks the host posts (block number -> its seats)."""
    seats: dict[int, dict[int, int]] = defaultdict(dict)
    for arrival, rank in ranks.items():
        seats[arrival // SEAT_BLOCK][arrival % SEAT_BLOCK] = rank
    return {b: SeatBlock(tuple(held.get(i, -1) for i in range(max(held) + 1))) for b, held in seats.items()}


def rank_in(block: SeatBlock, arrival: int) -> int | None:
    i = arrival % SEAT_BLOCK
    rank = block.ranks[i] if i < len(block.ranks) else -1
    return rank if rank >= 0 else None
