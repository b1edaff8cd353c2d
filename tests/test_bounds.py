"""Every list or object a record received from a peer holds declares the bound of what it is
(per node, per rank, per interface, a node's few: core.fields), never the generic default: a
per-node list left to the default refused the host's own message at a customer's 1,025th node
(issue 38). The walk covers every record the cluster exchanges and the report `--baseline` and
`netcheck report` read back; a record planted with a generic list shows it fails."""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from typing import Annotated

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from netcheck.core import codec, fields
from netcheck.core.bwrecords import NodeReport
from netcheck.core.constants import MAX_FACTS_BYTES, MAX_MEMBERS
from netcheck.core.envfacts import EnvFacts
from netcheck.core.meshrecords import MeshDone, MeshResults, Offer
from netcheck.core.model import ClusterVerdict, NodeFacts, NodeRanks, NodeResults, Report, Visitor
from netcheck.core.rdzvrecords import Hello, Roster, RosterEntry
from netcheck.core.seats import RankRuns, SeatBlock, Seated
from test_validation import cap_of, good, places, replaced, split

# What a node has one of: a list of these is a list per node, whatever it is declared.
NODES_OWN = (fields.NodeRank, fields.NodeRankOrMinusOne, fields.Hostname, RosterEntry)
EXCHANGED = (NodeFacts, NodeResults, Roster, Seated, SeatBlock, RankRuns, Hello, Visitor,
             MeshDone, Offer, MeshResults, EnvFacts, NodeReport, ClusterVerdict, Report)


def unbounded(record: type) -> list[str]:
    """The fields (as Record.field) under `record` holding a list or object of any length with
    no bound of their own (fields.Items)."""
    return [where for where, most, _ in lists_in(record) if most is None]


def per_node_below_a_cluster(record: type) -> list[str]:
    """The fields under `record` holding node ranks or hostnames (a list of what a node has one
    of) whose bound is below the largest cluster netcheck accepts."""
    return [where for where, most, item in lists_in(record) if item in NODES_OWN and (most or 0) < MAX_MEMBERS]


def lists_in(record: type) -> list[tuple[str, int | None, object]]:
    """(Record.field, the bound it declares or None, its item's type) of every list of any length
    or object under `record`."""
    found: list[tuple[str, int | None, object]] = []
    seen: set[type] = set()

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        hints = typing.get_type_hints(cls, include_extras=True)
        for f in dataclasses.fields(cls):
            visit(hints[f.name], f"{cls.__name__}.{f.name}")

    def visit(tp, where: str) -> None:
        meta = tp.__metadata__ if typing.get_origin(tp) is Annotated else ()
        base = typing.get_args(tp)[0] if meta else tp
        origin = typing.get_origin(base)
        if origin in (typing.Union, types.UnionType):
            for option in typing.get_args(base):
                visit(Annotated[(option, *meta)] if meta else option, where)
            return
        if origin in (tuple, dict):
            args = typing.get_args(base)
            sized = origin is tuple and args and args[-1] is not Ellipsis   # tuple[A, B]: exactly two
            if not sized:
                found.append((where, next((m.most for m in meta if isinstance(m, fields.Items)), None),
                              args[-1] if origin is dict else args[0]))
            for arg in args:
                if arg is not Ellipsis:
                    visit(arg, where + "[]")
        elif dataclasses.is_dataclass(base):
            walk(base)

    walk(record)
    return found


@pytest.mark.parametrize("record", EXCHANGED, ids=lambda r: r.__name__)
def test_every_list_a_peer_sends_declares_what_bounds_it(record):
    assert unbounded(record) == []


@pytest.mark.parametrize("record", EXCHANGED, ids=lambda r: r.__name__)
def test_every_list_of_nodes_holds_the_largest_cluster(record):
    assert per_node_below_a_cluster(record) == []


@dataclasses.dataclass(frozen=True)
class Planted:
    alive: tuple[int, ...]                                   # the regression's own shape
    ranks: NodeRanks = ()
    seated: Annotated[tuple[fields.NodeRank, ...], fields.FEW] = ()   # a per-node list given the generic bound
    names: Annotated[dict[str, fields.Hostname], fields.FEW] = dataclasses.field(default_factory=dict)


def test_a_per_node_list_left_to_the_generic_bound_is_caught():
    assert unbounded(Planted) == ["Planted.alive"]
    assert per_node_below_a_cluster(Planted) == ["Planted.seated", "Planted.names"]


def test_a_per_node_list_decodes_at_every_cluster_size_accepted_and_the_generic_one_does_not():
    everyone = codec.dumps(list(range(MAX_MEMBERS)))
    assert len(codec.loads(NodeRanks, everyone, MAX_FACTS_BYTES)) == MAX_MEMBERS
    with pytest.raises(codec.DecodeError, match=f"{MAX_MEMBERS} items, expected at most {fields.MAX_ITEMS}"):
        codec.loads(tuple[int, ...], everyone, MAX_FACTS_BYTES)


# --- every list at its bound, in a record otherwise sound --------------------------------------
# A record drawn in range (test_validation.good), one of its lists or objects filled to what it
# declares: it decodes, and one item more is refused naming that very bound. The walk above
# sees what a field declares; this sees what the decoder built for it holds to, through every
# nesting (an optional list, a list of records of lists).

HELD = MAX_MEMBERS + 1          # items a test fills a list with where its bound is larger (a rank's, a pair's)
REFUSED_UP_TO = fields.MAX_RANKS + 1   # a list of a pair per pair of members (8.6G) is past what a test allocates


def containers(doc, record) -> list[tuple[tuple, object]]:
    """(path, hint) of every list of any length and every object in a drawn document."""
    found = []
    for path, hint in places(doc, record):
        base, _ = split(hint)
        args = typing.get_args(base)
        if typing.get_origin(base) is dict or (typing.get_origin(base) is tuple and args[-1] is Ellipsis):
            found.append((path, hint))
    return found


def filled(hint, item, count: int):
    """JSON for hint (a list, or an object) of `count` copies of item: distinct keys for an object."""
    if typing.get_origin(split(hint)[0]) is dict:
        return {f"k{i}": item for i in range(count)}
    return [item] * count


@pytest.mark.parametrize("record", [r for r in EXCHANGED if lists_in(r)], ids=lambda r: r.__name__)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_list_decodes_at_its_declared_bound_and_not_past_it(record, data):
    doc = data.draw(good(record))
    here = containers(doc, record)
    assume(here)
    path, hint = data.draw(st.sampled_from(here))
    base, meta = split(hint)
    most, item_hint = cap_of(meta), typing.get_args(base)[-1 if typing.get_origin(base) is dict else 0]
    item = data.draw(good(item_hint))
    decoded = codec.from_plain(record, replaced(copy.deepcopy(doc), path, filled(hint, item, min(most, HELD))))
    assert decoded is not None
    if most < REFUSED_UP_TO:
        with pytest.raises(codec.DecodeError, match=f": {most + 1} items, expected at most {most}(;|$)"):
            codec.from_plain(record, replaced(doc, path, filled(hint, None, most + 1)))


@dataclasses.dataclass(frozen=True)
class OptionalRanks:
    ranks: Annotated[tuple[fields.NodeRank, ...] | None, fields.PER_NODE] = None


def test_the_bound_of_an_optional_list_is_its_own():
    # It was the generic one: the union's options were decoded without what the field declared.
    assert len(codec.from_plain(OptionalRanks, {"ranks": list(range(MAX_MEMBERS))}).ranks) == MAX_MEMBERS
    assert codec.from_plain(OptionalRanks, {"ranks": None}).ranks is None
