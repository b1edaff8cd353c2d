"""The majority and the odd ones out: one tie policy for every rule that compares nodes.

A value is the majority only when strictly more nodes hold it than any other value. With
no majority (two nodes that differ, 2 against 2, every node its own value) every node is
named: the facts cannot say which side is wrong, and picking one by chance would blame a
healthy node. Groups come largest first, then by their lowest key, so nothing depends on
hashing (PYTHONHASHSEED) or on the order facts arrived in.

    >>> s = split({0: 1500, 1: 9000, 2: 1500})
    >>> s.majority, s.odd
    (1500, (1,))
    >>> split({0: "ipv4", 1: "ipv6"}).odd
    (0, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Hashable, Mapping, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

K = TypeVar("K", bound="SupportsRichComparison")   # sortable: the keys are listed in order
V = TypeVar("V", bound=Hashable)


@dataclass(frozen=True)
class Split(Generic[K, V]):
    groups: tuple[tuple[V, tuple[K, ...]], ...]   # (value, its keys sorted), largest group first
    has_majority: bool

    @property
    def majority(self) -> V | None:
        return self.groups[0][0] if self.has_majority else None

    @property
    def odd(self) -> tuple[K, ...]:
        """The keys outside the majority; every key when there is none (a lone value is no
        one's odd one out)."""
        if len(self.groups) <= 1:
            return ()
        rest = self.groups[1:] if self.has_majority else self.groups
        return tuple(sorted(k for _, keys in rest for k in keys))


def split(values: Mapping[K, V]) -> Split[K, V]:
    """Group the keys (node ranks, hosts: anything sortable) by their value."""
    members: dict[V, list[K]] = {}
    for key in sorted(values):
        members.setdefault(values[key], []).append(key)
    return split_grouped(members)


def split_grouped(members: Mapping[V, list[K]]) -> Split[K, V]:
    """split's result from the keys already grouped by value (each group's keys sorted)."""
    groups = tuple(sorted(((v, tuple(ks)) for v, ks in members.items()), key=lambda g: (-len(g[1]), g[1])))
    top = len(groups[0][1]) if groups else 0
    has_majority = bool(groups) and (len(groups) == 1 or top > len(groups[1][1]))
    return Split(groups, has_majority)
