"""A point in time every wait is bounded by (the "never hangs" promise)."""

from __future__ import annotations

import time


class Deadline:
    def __init__(self, seconds: float, start: float | None = None):
        self.start = time.monotonic() if start is None else start
        self.at = self.start + seconds

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def within(self, seconds: float) -> "Deadline":
        """A nested deadline: at most `seconds` from now, never past this one."""
        return Deadline(min(seconds, self.remaining()))
