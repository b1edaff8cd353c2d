"""netcheck's errors of the host's store and of the rendezvous over it, below every layer that
meets them: cluster/ raises them, bandwidth/ and phases/ catch them.

torch's store raises RuntimeError (DistNetworkError, DistStoreError: its subclasses since 2.4)
or OSError, worded differently on each release. Those are translated once, where the store is
called (cluster.storetransport's Transport, cluster.storeconnect's connect: cluster.compat.store_error
reads torch's words), into the StoreError family; callers above catch these:

    StoreError          a store request failed, for a reason netcheck does not tell apart
      StoreLost         the connection broke: the host died, or the path to it (also
                        cluster.storewire's WireError, netcheck's own reads by length)
        ReplyTimedOut   no reply within the socket's receive timeout: the store may be held up
      ConnectTimedOut   no client was made within its bound (a peer that accepts, never answers)
      Interfered        the store broke the connection off over what another client left
                        under a key (also a RendezvousError)

Each keeps torch's message as its own (first_line quotes the same words) and torch's error
as `original`.
"""

from __future__ import annotations

from netcheck.core.errors import NetcheckError


class StoreError(NetcheckError):
    """A request to the host's TCPStore failed; the message is torch's (or netcheck's own
    reader's), `original` the error it was translated from (itself where none)."""

    def __init__(self, message: str, original: BaseException | None = None):
        super().__init__(message)
        self.original: BaseException = self if original is None else original


class StoreLost(StoreError):
    """The store connection broke mid-run: the host died, or the path to it broke. An
    Exchange that raised one is done (Exchange.lost)."""


class ReplyTimedOut(StoreLost):
    """A request's reply did not come within the socket's receive timeout (netcheck's
    SO_RCVTIMEO): not refused, not reset; the store may still be there, held up."""


class ConnectTimedOut(StoreError):
    """A TCPStore client was not made within its bound: the peer accepts and does not answer
    (or this node's nameserver is silent); the message says which."""


class RendezvousError(NetcheckError):
    """The rendezvous could not go on; the message says why in one line."""


class OtherRun(RendezvousError):
    """The store at the endpoint serves a run of another id than this node's --rdzv-id."""


class Interfered(RendezvousError, StoreError):
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
    """An error's first line; an empty one is named by its type (a store error's: torch's)."""
    if isinstance(error, StoreError) and not str(error).strip():
        error = error.original
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
