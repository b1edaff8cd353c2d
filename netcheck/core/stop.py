"""How a run is stopped from outside: Ctrl-C (SIGINT) or SIGTERM (scancel, a deleted pod).

Both unwind the run the same way, as a KeyboardInterrupt, so every phase's `finally` runs
and the report is written; the subclass says which signal it was, for the finding and the
exit code (128 + the signal).
"""

from __future__ import annotations

import signal


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by `on_sigterm`."""


def on_sigterm(signum, frame):
    raise Terminated()


def signal_of(stop: KeyboardInterrupt) -> signal.Signals:
    return signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
