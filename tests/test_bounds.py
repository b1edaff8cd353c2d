"""Every list or object a record received from a peer holds declares the bound of what it is
(per node, per rank, per interface, a node's few: core.fields), never the generic default: a
per-node list left to the default refused the host's own message at a customer's 1,025th node
(issue 38). The walk covers every record the cluster exchanges and the report `--baseline` and
`netcheck report` read back; a record planted with a generic list shows it fails."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated

import pytest

from netcheck.bandwidth.orchestrate import NodeReport
from netcheck.cluster import mesh, rendezvous
from netcheck.core import codec, fields
from netcheck.core.constants import MAX_FACTS_BYTES, MAX_NODES
from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import ClusterVerdict, NodeFacts, NodeRanks, NodeResults, Report, Visitor
from netcheck.phases.mesh import MeshDone

EXCHANGED = (NodeFacts, NodeResults, rendezvous.Roster, rendezvous.Hello, Visitor, MeshDone, mesh.Offer,
             mesh.MeshResults, EnvFacts, NodeReport, ClusterVerdict, Report)


def unbounded(record: type) -> list[str]:
    """The fields (as Record.field) under `record` holding a list or object of any length with
    no bound of their own (fields.Items)."""
    found: list[str] = []
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
            if not sized and not any(isinstance(m, fields.Items) for m in meta):
                found.append(where)
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


@dataclasses.dataclass(frozen=True)
class Planted:
    alive: tuple[int, ...]                                   # the regression's own shape
    ranks: NodeRanks = ()


def test_a_per_node_list_left_to_the_generic_bound_is_caught():
    assert unbounded(Planted) == ["Planted.alive"]


def test_a_per_node_list_decodes_at_every_cluster_size_accepted_and_the_generic_one_does_not():
    everyone = codec.dumps(list(range(MAX_NODES)))
    assert len(codec.loads(NodeRanks, everyone, MAX_FACTS_BYTES)) == MAX_NODES
    with pytest.raises(codec.DecodeError, match=f"{MAX_NODES} items, expected at most {fields.MAX_ITEMS}"):
        codec.loads(tuple[int, ...], everyone, MAX_FACTS_BYTES)
