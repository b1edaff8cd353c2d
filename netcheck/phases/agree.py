"""Whether every node runs a phase that needs time: the host's word, not each node's clock.

Each node's --timeout starts when that node starts, seconds apart, so a phase with about
MIN_PHASE_SECONDS left can fit on the host and not on a joiner (or the other way round); a
node that skips what the others run is then named lost in it, an honest node blamed for a
clock. The host decides, posts its decision under storekeys.GO, and every joiner follows it
(waiting for it within its own deadline: a host that dies meanwhile is named lost there).
A joiner's wait for any of the host's words (host_word) also hears the host say that a signal
stopped it, and ends there.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from netcheck.cluster.rendezvous import Seat
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.constants import HOST_WORD_LOOK, HOST_WORD_PACES
from netcheck.core.deadline import Deadline
from netcheck.core.model import HOST, ClusterVerdict, Finding
from netcheck.core.storekeys import GO, VERDICT, Slot
from netcheck.phases.state import Run
from netcheck.phases.stop import HostStopped
from netcheck.rules import run as run_rules

T = TypeVar("T")


def host_word(ex: Exchange, key: Slot[T], deadline: Deadline) -> T:
    """A joiner's wait for the host's word under `key`, which also hears the host say that a
    signal stopped it (its verdict, told on its way out): HostStopped then, within a look,
    instead of a wait that ends only when the host's store goes and the host is named lost.
    The word is looked for as Exchange.wait does (quick at first, then at the store's pace), and
    the stop every HOST_WORD_LOOK s or every HOST_WORD_PACES paced looks: a quarter more requests
    at most, at any scale."""
    look = max(HOST_WORD_LOOK, HOST_WORD_PACES * ex.pause)
    pause, stop_look = 0.002, time.monotonic() + look
    while not ex.has(key):  # one look at least, also past the deadline
        if deadline.expired():
            raise TimeoutError(f"{key} did not appear in time")
        if time.monotonic() >= stop_look:
            if (told := stopped_word(ex)) is not None:
                raise HostStopped(told)
            stop_look = time.monotonic() + look
        time.sleep(pause)
        pause = min(2 * pause, ex.pause)
    return ex.read(key)


def wait_stopped_word(ex: Exchange, deadline: Deadline) -> ClusterVerdict | None:
    """The host's verdict, waited for until the deadline, where it says a signal stopped the
    host: for a joiner that saw the host's part of a phase end for a stop (the bandwidth phase's
    own word) and now waits for the host's verdict that says so."""
    try:
        told = ex.wait_read(ex.key(VERDICT), deadline)
    except (TimeoutError, codec.DecodeError):
        return None
    return told if told.stopped else None


def stopped_word(ex: Exchange) -> ClusterVerdict | None:
    """The host's verdict where it says a signal stopped the host; None otherwise (none told,
    one that does not decode: the host's own word is waited for as before)."""
    key = ex.key(VERDICT)
    if not ex.has(key):
        return None
    try:
        told = ex.read(key)
    except codec.DecodeError:
        return None
    return told if told.stopped else None


def agreed(run: Run, seat: Seat, phase: str, against: Callable[[], Finding | None]) -> Finding | None:
    """None where every node runs `phase`; else the finding that says why not. The host asks
    against() (its reason not to, None: none) and posts its decision; a joiner reads it."""
    ex = seat.exchange
    if run.role == HOST:
        why_not = against()
        ex.put(ex.key(GO, phase), why_not is None)
        return why_not
    try:
        if host_word(ex, ex.key(GO, phase), run.phase_deadline()):
            return None
        why, fix = "the host decided against it", "the host's report says why (its time left, a node's ports)"
    except TimeoutError:   # this node started first, and its time ran out before the host's word
        why, fix = "this node's --timeout ran out before the host's word on it", "raise --timeout on every node"
    return run_rules.skipped_finding(phase, why, fix)
