"""Speaking in nodes where a person thinks in nodes.

Under torchrun every worker process is a member, seated by its RANK, and a host's ranks share
its interfaces, routes and /dev/shm: a rule that writes a line per member would say the same
thing once per rank. These fold such lines into one per node (or node pair), listing the
ranks. In the other modes a node is one member and nothing folds. Pure: text in, text out.

    per_node([(2, "eth0 reaches no peer"), (3, "eth0 reaches no peer")], {2: "node1", 3: "node1"})
      ('node1 (ranks 2, 3): eth0 reaches no peer',)
    per_pair([(0, 2, "filtered"), (1, 3, "filtered")], {0: "node0", 1: "node0", 2: "node1", 3: "node1"})
      ('node0 -> node1 (ranks 0, 1 -> 2, 3): filtered',)
    node_names([2, 3], {2: "node1", 3: "node1"})   ->  'node1'
    node_count([0, 1, 2, 3], names, workers=True)  ->  '2 node(s) (4 ranks)'
    every_node([0, 1], {0: "vm", 1: "vm"})         ->  'vm'
    ranks_text([1, 3, 4, 8, 9, 10, 11])            ->  '1, 3-4, 8-11'
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, TypeVar

from netcheck.core.constants import NAMES_SHOWN
from netcheck.core.model import Member
from netcheck.core.nictable import NicTable
from netcheck.core.seats import rank_runs

T = TypeVar("T")


def per_node(lines: Iterable[tuple[int, str]], names: Mapping[int, str]) -> tuple[str, ...]:
    """`host: text` once per node and text, in the order first seen; `host (ranks 2, 3): text`
    where several ranks of the node said it."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rank, text in lines:
        groups.setdefault((name_of(names, rank), text), []).append(rank)
    return tuple(f"{host}{ranks_note(ranks)}: {text}" for (host, text), ranks in groups.items())


def per_pair(lines: Iterable[tuple[int, int, str]], names: Mapping[int, str]) -> tuple[str, ...]:
    """`a -> b: text` once per node pair and text; `a -> b (ranks 0, 1 -> 2, 3): text` where
    several rank pairs between the two nodes said it."""
    groups: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for src, dst, text in lines:
        groups.setdefault((name_of(names, src), name_of(names, dst), text), []).append((src, dst))
    return tuple(f"{a} -> {b}{pairs_note(pairs)}: {text}" for (a, b, text), pairs in groups.items())


def node_names(ranks: Iterable[int], names: Mapping[int, str]) -> str:
    """The nodes of these ranks, each once: `node1`, not `node1, node1`; past NAMES_SHOWN, the
    rest counted (a summary is one line: 1,024 nodes lost once made it 11,000 characters)."""
    nodes = list(dict.fromkeys(name_of(names, r) for r in ranks))
    shown = ", ".join(nodes[:NAMES_SHOWN])
    return shown if len(nodes) <= NAMES_SHOWN else f"{shown} and {len(nodes) - NAMES_SHOWN} more nodes"


def node_count(ranks: Iterable[int], names: Mapping[int, str], workers: bool = False) -> str:
    """`3 node(s)`; with torchrun's workers (a node runs several ranks) `2 node(s) (4 ranks)`;
    netcheck nodes that share a machine (a loopback run, the demo) `2 node(s) on one machine
    (vm)`: one hostname for several nodes is not one node."""
    ranks = sorted(set(ranks))
    machines = hosts(ranks, names)
    if workers:
        return f"{machines} node(s)" + (f" ({len(ranks)} ranks)" if len(ranks) > machines else "")
    if machines == len(ranks):
        return f"{machines} node(s)"
    where = f"one machine ({name_of(names, ranks[0])})" if machines == 1 else f"{machines} machines"
    return f"{len(ranks)} node(s) on {where}"


def hosts(ranks: Iterable[int], names: Mapping[int, str]) -> int:
    """How many nodes these ranks run on."""
    return len({name_of(names, r) for r in ranks})


def every_node(ranks: Iterable[int], names: Mapping[int, str]) -> str:
    """`every node`, or the node's name where there is one node (`netcheck local`, a lone host)."""
    ranks = list(ranks)
    return node_names(ranks, names) if hosts(ranks, names) == 1 else "every node"


def same_node(names: Mapping[int, str], src: int, dst: int) -> bool:
    """Two ranks on one host (torchrun's workers): a path between them never leaves it."""
    return src != dst and src in names and names.get(src) == names.get(dst)


def name_of(names: Mapping[int, str], rank: int) -> str:
    return names.get(rank, f"rank {rank}")


def ranks_note(ranks: Iterable[int]) -> str:
    """` (ranks 2, 3)` where several ranks said it; nothing for one."""
    distinct = sorted(set(ranks))
    return f" (ranks {_listed(distinct)})" if len(distinct) > 1 else ""


def pairs_note(pairs: Iterable[tuple[int, int]]) -> str:
    """` (ranks 0, 1 -> 2, 3)` where several rank pairs said it; nothing for one."""
    pairs = set(pairs)
    if len(pairs) < 2:
        return ""
    return f" (ranks {_listed(sorted({s for s, _ in pairs}))} -> {_listed(sorted({d for _, d in pairs}))})"


def ranks_text(ranks: Iterable[int]) -> str:
    """`3`, `1, 3`, `8-15, 24-31`: consecutive ranks as one span (a torchrun node's workers);
    past NAMES_SHOWN spans, the rest counted."""
    runs = rank_runs(tuple(ranks)).runs
    spans = [str(r.rank) if r.count == 1 else f"{r.rank}-{r.rank + r.count - 1}" for r in runs]
    shown = ", ".join(spans[:NAMES_SHOWN])
    return shown if len(spans) <= NAMES_SHOWN else f"{shown} and {sum(r.count for r in runs[NAMES_SHOWN:])} more ranks"


def _listed(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def per_table(members: Iterable[Member], read: Callable[[NicTable], T]) -> dict[int, T]:
    """rank -> read(its interface table), read once per distinct table: a torchrun node's ranks
    hold one (fields.SHARED), and 100,000 ranks' tables parsed each cost seconds. A table's id
    is its own while the members hold it."""
    once: dict[int, T] = {}
    for m in members:
        if id(m.facts.nics) not in once:
            once[id(m.facts.nics)] = read(m.facts.nics)
    return {m.rank: once[id(m.facts.nics)] for m in members}

