"""Whether every node runs a phase that needs time: the host's word, not each node's clock.

Each node's --timeout starts when that node starts, seconds apart, so a phase with about
MIN_PHASE_SECONDS left can fit on the host and not on a joiner (or the other way round); a
node that skips what the others run is then named lost in it, an honest node blamed for a
clock. The host decides, posts its decision under storekeys.GO, and every joiner follows it
(waiting for it within its own deadline: a host that dies meanwhile is named lost there).
"""

from __future__ import annotations

from typing import Callable

from netcheck.cluster.rendezvous import Seat
from netcheck.core.model import HOST
from netcheck.core.storekeys import GO
from netcheck.phases.state import Run
from netcheck.rules import run as run_rules


def agreed(run: Run, seat: Seat, phase: str, decide: Callable[[], bool]) -> bool:
    """Whether every node runs `phase`: decide() on the host, posted; read on a joiner."""
    ex = seat.exchange
    if run.role == HOST:
        go = decide()
        ex.put(ex.key(GO, phase), go)
        return go
    try:
        if ex.wait_read(bool, ex.key(GO, phase), run.phase_deadline()):
            return True
        why = "the host had too little of --timeout left for it"
    except TimeoutError:   # this node started first, and its time ran out before the host's word
        why = "this node's --timeout ran out before the host's word on it"
    run.findings.append(run_rules.skipped_finding(phase, why, "the host's report says how much time was left; "
                                                 "raise --timeout on every node"))
    return False
