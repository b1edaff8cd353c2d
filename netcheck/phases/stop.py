"""How a run is stopped from outside: Ctrl-C (SIGINT) or SIGTERM (scancel, a deleted pod).

Both unwind the run the same way, as a KeyboardInterrupt, so every phase's `finally` runs
and the report is written; the subclass says which signal it was, for the finding and the
exit code (128 + the signal).
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import NoReturn

from netcheck.core.errors import NetcheckError
from netcheck.core.model import ClusterVerdict


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by `on_sigterm`."""


def on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminated()


def signal_of(stop: KeyboardInterrupt) -> signal.Signals:
    return signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT


class HostStopped(NetcheckError):
    """A joiner heard the host say that a signal stopped it (its verdict, told on its way out):
    raised out of the joiner's wait for the host's word, it ends the joiner's phases at once,
    before the host's store goes, so the host is not named lost for it."""

    def __init__(self, told: ClusterVerdict):
        super().__init__(f"the host was stopped by {told.stopped}")
        self.told = told   # the host's ClusterVerdict
