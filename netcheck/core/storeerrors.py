"""netcheck's errors of the host's store and of the rendezvous over it, below every layer that
meets them: cluster/ raises them, bandwidth/ and phases/ catch them."""

from __future__ import annotations


class RendezvousError(Exception):
    """The rendezvous could not go on; the message says why in one line."""


class Interfered(RendezvousError):
    """The store closed this client's connection on one of netcheck's own requests, because
    another client left the key in a state netcheck never makes (a counter set to text):
    `seen` says what the key holds. The connection has been made again."""

    def __init__(self, key: str, seen: str):
        super().__init__(f"{key} {seen}")
        self.key, self.seen = key, seen


class HostLost(RendezvousError):
    """The host's store was there (the reach probe heard it) and is gone: the host died, or
    the path to it broke. `seen` is the cause in its own words, the finding's evidence."""

    def __init__(self, what: str, seen: str):
        super().__init__(f"{what}: {seen}")
        self.seen = seen


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
