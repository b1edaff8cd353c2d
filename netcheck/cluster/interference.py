"""What other clients did to the keys a node uses, kept to be named rather than taken for a
fault of the nodes (rules.storetrouble words it): anyone who reaches the store's port can
write any key. Two kinds: a key found holding what netcheck never wrote (noted), and a value
posted under a node's id that was refused (its sender is then named, not taken for lost)."""

from __future__ import annotations

from typing import Any

from netcheck.core.storekeys import Key


class Interference:
    """One node's log of what it found other clients did; only added to."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}   # key -> what was seen there, the latest
        self._refused: dict[tuple[Key[Any], int], str] = {}   # (name, id) posted -> why it was refused

    def note(self, key: str, seen: str) -> None:
        """Another client left `seen` under `key` (the latest word on a key counts)."""
        self._seen[key] = seen

    def noted(self, key: str) -> bool:
        return key in self._seen

    def notes(self) -> tuple[tuple[str, str], ...]:
        """(key, what was seen), in the order first noted."""
        return tuple(self._seen.items())

    def lines(self) -> tuple[str, ...]:
        """What other clients did to the keys this node uses, as "KEY what was seen"."""
        return tuple(f"{key} {seen}" for key, seen in self._seen.items())

    def refuse(self, name: Key[Any], i: int, why: str) -> None:
        """The value posted as `name`/`i` was refused: its sender is named for it."""
        self._refused[name, i] = why

    def refused(self, name: Key[Any], i: int) -> str | None:
        """Why the value posted as `name`/`i` was refused; None where it was not."""
        return self._refused.get((name, i))

    def refusals(self) -> tuple[tuple[Key[Any], int, str], ...]:
        """(name, id, why) of every refused post, in the order refused."""
        return tuple((name, i, why) for (name, i), why in self._refused.items())
