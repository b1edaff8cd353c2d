"""Reading what many nodes post under one name (Exchange.post): collect, as they come, and
posted_by, who has; a look costs one request however many ids are pending."""

from __future__ import annotations

import time
from typing import TypeVar

from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.deadline import Deadline
from netcheck.core.storekeys import Key

T = TypeVar("T")

FEW_IDS = 32       # collect checks up to this many ids at once; beyond, it reads the posted list


def collect(ex: Exchange, key: Key[T], ids: list[int], deadline: Deadline,
            quiet: tuple[float, float] | None = None) -> dict[int, T]:
    """Every `KEY/ID` value, as the record the key holds, (written with Exchange.post) for the given ids, read as they
    are posted, until all, the deadline, or (with quiet, (LEAST, SILENCE)) LEAST seconds
    since the first look and SILENCE seconds with none new: thousands of nodes take longer
    than a few to post, but not with long silences. A look costs one request however many
    ids are pending, and the new values come in one more: the host of thousands of nodes
    would otherwise ask after each of them on every look.

    An id whose value never comes or does not decode is absent; one that does not decode is
    also refused in ex.interference, so its sender is named for it and not as lost. The seconds the
    host's store stalled (StallWatch) are no silence of the nodes': nobody could post then.
    """
    found: dict[int, T] = {}
    pending = set(ids)
    begun = heard = (time.monotonic(), ex.stalled_seconds())

    def since(mark: tuple[float, float]) -> float:  # the seconds since mark that nodes could post in
        return time.monotonic() - mark[0] - (ex.stalled_seconds() - mark[1])

    while pending:  # one look at least, also past the deadline: what is there counts
        ex.restore()
        over = deadline.expired() or (quiet is not None and since(begun) >= quiet[0] and since(heard) >= quiet[1])
        new = _ready(ex, key, pending, over, each_counts=quiet is not None)
        values = ex.read_many([ex.key(key, i) for i in new]) if new else {}
        for i in new:
            value = values.get(ex.key(key, i))
            if value is not None:  # listed but not there: a foreign append, looked at again
                pending.discard(i)
                heard = (time.monotonic(), ex.stalled_seconds())
                if isinstance(value, codec.DecodeError):
                    ex.interference.refuse(key, i, str(value))
                else:
                    found[i] = value
        if not pending or over:
            break
        time.sleep(ex.pause)
    return found


def posted_by(ex: Exchange, key: Key[T], ids: list[int], deadline: Deadline) -> set[int]:
    """The ids listed as having posted `key`, waited for until all are or the deadline: for
    a value every node posts once it sees a go-ahead at its own poll, so not all at once."""
    pending, found = set(ids), set[int]()
    while pending:
        over = deadline.expired()
        new = set(_ready(ex, key, pending, over, each_counts=True))
        found |= new
        pending -= new
        if over:
            break
        time.sleep(ex.pause)
    return found


def _ready(ex: Exchange, key: Key[T], pending: set[int], last_look: bool, each_counts: bool) -> list[int]:
    """The pending ids whose value is there, in one request a look: for many ids, or where
    each new one counts (a quiet window runs from the last), from the posted list; for a
    few, one check of them all, which sees none until all are in. On the last look the ids
    not found so are asked after key by key (a value posted whose listing never came is
    still read)."""
    ids = sorted(pending)
    keys = [ex.key(key, i) for i in ids]
    listed = each_counts or len(ids) > FEW_IDS
    posted = ex.posted(key) if listed else None
    if posted is not None:
        ready = pending & posted
    elif listed:  # the list was grown past any cluster's: each key is asked after
        ready = {i for i, k in zip(ids, keys) if ex.has(k)}
    else:
        ready = pending if ex.has_all(keys) else set()
    if last_look:
        ready |= {i for i, k in zip(ids, keys) if i not in ready and ex.has(k)}
    return sorted(ready)
