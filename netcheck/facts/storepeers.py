"""Who is connected to the host's store port, read from this machine's /proc/net/tcp and tcp6,
and the StallWatch that reads it while one of the host's own store requests stalls."""

from __future__ import annotations

import threading
import time

from netcheck.core.model import StoreStall
from netcheck.facts.tcptable import LISTEN, tcp_rows

# The host's own request to its store, unanswered this long, is a stall: the store answers in
# milliseconds, but serves every client on one thread, and torch 2.13's looks up the name of
# each connection it accepts there (getnameinfo: measured per connection, the store's thread
# waiting out each reply; a lookup that fails outright stops torch's lookups for good, one
# answered late never does).
STALL_SECONDS = 2.0
STALL_LOOK = 0.5        # how often the watch looks at the request in flight
MAX_STALLS = 16         # stalls recorded; the rest are counted in the last one's seconds


class StallWatch:
    """Watches the host's own store requests from a thread of its own: while one has been in
    flight STALL_SECONDS or more, who is connected to the store's port is read from this
    machine's /proc/net/tcp and tcp6, so the clients behind a stall are named while they are
    still there (a stranger's connection is gone once the store has looked it up and read
    its end). The host's thread only notes when each request starts and ends."""

    def __init__(self, port: int):
        self.port = port
        self.since: float | None = None   # when the request in flight was sent
        self.request: tuple[str, object] = ("", "")   # its method, and its key or keys
        self.stalls: list[StoreStall] = []
        self._since: float | None = None   # when the request of the last stall was sent
        threading.Thread(target=self._watch, name="netcheck-stall-watch", daemon=True).start()

    def began(self, method: str, keys: object) -> None:
        """A request of the host's own is sent (its key or keys named only where it stalls)."""
        self.request = (method, keys)
        self.since = time.monotonic()

    def ended(self) -> None:
        self.since = None

    def _watch(self) -> None:
        while True:
            time.sleep(STALL_LOOK)
            since, request = self.since, self.request
            if since is None or time.monotonic() - since < STALL_SECONDS:
                continue
            self._note(since, request_text(*request), port_peers(self.port))

    def _note(self, since: float, request: str, peers: dict[str, int]) -> None:
        seconds = round(time.monotonic() - since, 1)
        last = self.stalls[-1] if self.stalls else None
        if last is not None and ((last.request, self._since) == (request, since) or len(self.stalls) >= MAX_STALLS):
            merged = {a: max(n, peers.get(a, 0)) for a, n in last.peers.items()} | {
                a: n for a, n in peers.items() if a not in last.peers}
            self.stalls[-1] = StoreStall(last.request, max(seconds, last.seconds), merged)
            return
        self._since = since
        self.stalls.append(StoreStall(request, seconds, peers))


def request_text(method: str, keys: object) -> str:
    """A store request as a stall names it: its method and key (the first of a list, counted)."""
    if isinstance(keys, (list, tuple)):
        keys = f"{keys[0]} and {len(keys) - 1} more keys" if len(keys) > 1 else (keys[0] if keys else "")
    return f"{method} {keys}".strip()


def port_peers(port: int) -> dict[str, int]:
    """address -> connections to this machine's `port` (its network namespace's view), from
    /proc/net/tcp and tcp6: those the store serves and those still waiting to be accepted."""
    peers: dict[str, int] = {}
    for row in tcp_rows():
        if row.state != LISTEN and row.local_port == port:
            peers[row.remote] = peers.get(row.remote, 0) + 1
    return peers
