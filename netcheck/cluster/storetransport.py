"""How a request reaches the host's store and comes back, bounded: torch's client called on a
thread of its own (facts.bounded.Caller) and waited for to the run's end; a connection held up
by the store replaced; a request held back while this node's link toward the host has no
carrier; reads by length first on a connection of their own (cluster.storewire); the pace at
which keys are looked for; and the host's stall watch told of each request. The Exchange
(cluster.store) makes every store request through one Transport."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from netcheck.cluster import compat, storewire
from netcheck.cluster.storeconnect import client_try, not_listening, store_link
from netcheck.core.constants import (
    CARRIER_POLL,
    CARRIER_WAIT,
    STORE_LOOKS_PER_SECOND,
    STORE_POLL_INTERVAL,
    STORE_REPLY_TIMEOUT,
)
from netcheck.core.deadline import Deadline
from netcheck.core.storeerrors import ConnectTimedOut, StoreLost, first_line
from netcheck.facts.bounded import Caller, Overran
from netcheck.facts.linkcounters import carrier_lost
from netcheck.facts.storepeers import StallWatch, request_text

# A request made at or past its bound still gets this long: a store that answers takes
# microseconds, and one given none would be lost for asking late (the sweep's last abort).
REQUEST_FLOOR = 0.1
HELD_UP_AFTER = 1.0   # a new client answered sooner: the store was not held up (Transport._held_up_client_replaced)
STALL_READS = 4       # the host's bounded read, tried again while its store is stalled (StallWatch)

# A request: the name of a method of torch's store, or a compat function taking the store first.
Method = str | Callable[..., Any]


class Transport:
    """The requests of one store client: each bounded by `end` (the run's, or `within`'s); a
    joiner's (given `limit`) waits out a held-up store and a link without carrier to `limit`."""

    def __init__(self, store: Any, *, end: Deadline, limit: Deadline | None = None,
                 caller: Caller | None = None, watch: StallWatch | None = None):
        self._store = store   # torch's TCPStore (untyped): replaced where it was held up
        self._server = store  # the host's serves the port: kept when a broken client is replaced
        self.end = end  # the run's: no request is waited for past it, whatever torch does (_request)
        self.limit = limit  # a joiner's: how long a held-up store is waited out (the phases' end)
        # A thread of its own, unless given one to share (one process simulating thousands of nodes).
        self._caller = caller or Caller("netcheck-store")
        self.watch = watch   # the host's: its store's stalls, and who was connected
        self.lost: str | None = None  # why the store connection broke, once it has
        self.held_up: list[float] = []  # a joiner's: seconds each request waited out a held-up store
        self.pause = STORE_POLL_INTERVAL  # between looks for a key (pace)
        # A joiner's interface toward the host: a request waits for its carrier (_await_carrier).
        self.link = store_link(store.port) if limit is not None else None
        self._wire: storewire.Wire | None = None  # for reads by length first (bounded)

    @property
    def endpoint(self) -> tuple[str, int]:
        """The host's store's address and port."""
        return self._server.host, self._server.port

    def call(self, method: Method, *args: object) -> Any:
        """torch's answer to one request (untyped, as torch gives it); its errors as netcheck's
        (core.storeerrors)."""
        # After a broken request (a reply timed out) the stream is out of step: a late
        # reply would answer the next request. So the first break is final.
        if self.lost is not None:
            earlier = f"the host's store was lost earlier: {self.lost}"
            raise StoreLost(earlier, ConnectionError(earlier))
        self._started(_name(method), args)
        try:
            try:
                self._await_carrier()
                return self._request(method, args)
            except Exception as e:
                if not self._held_up_client_replaced(e):
                    raise
            self._await_carrier()
            return self._request(method, args)   # once, on the new connection: a second break is final
        except (RuntimeError, OSError) as e:   # torch's, translated here once (core.storeerrors)
            error = compat.store_error(e)
            if isinstance(error, StoreLost):
                self.lost = first_line(error)
            if error is e:
                raise
            raise error from e
        finally:
            self._ended()

    def _await_carrier(self) -> None:
        """Wait, to CARRIER_WAIT and `limit`, while this node's link toward the host has no
        carrier (its cable or switch port flapping). A request sent meanwhile is dropped at the
        node itself and answered only once the carrier is back (TCP resends it then, measured:
        a request sent into an N-second flap is answered N s later), so a flap past
        STORE_REPLY_TIMEOUT lost the host, where a job's own store and sockets ride it out.
        Sent once the carrier is back, it is answered at once. One sysfs read where the link
        is up."""
        if self.link is None or self.limit is None or not carrier_lost(self.link):
            return
        until = self.limit.within(CARRIER_WAIT)
        while carrier_lost(self.link) and not until.expired():
            time.sleep(CARRIER_POLL)

    @contextmanager
    def within(self, deadline: Deadline) -> Iterator[None]:
        """Inside the block, no request is waited for, and no held-up store waited out, past
        `deadline` where it comes before the run's end: a part of a phase that must leave the
        phase time for what follows it (the sweep's workers, before the nodes' accounts)."""
        saved = self.end, self.limit
        if deadline.at < self.end.at:
            self.end = deadline
        if self.limit is not None and deadline.at < self.limit.at:
            self.limit = deadline
        try:
            yield
        finally:
            self.end, self.limit = saved

    def _request(self, method: Method, args: tuple[object, ...]) -> Any:
        """One request, waited for to the run's end (or `within`'s) and no longer: torch's own
        timeouts do not bound a reply (the host's own client has none; over a port closed since
        the rendezvous it sat in recv for minutes), so the request runs on this Transport's Caller
        thread. One past its bound loses the store: the thread is left in it, and the stream is
        out of step."""
        fn, call_args = (method, (self._store, *args)) if callable(method) else (getattr(self._store, method), args)
        try:
            return self._caller.call(fn, call_args, max(REQUEST_FLOOR, self.end.remaining()))
        except Overran as e:
            self.lost = f"{request_text(_name(method), args[0] if args else '')}: {e}, its deadline"
            raise StoreLost(self.lost) from None

    def _held_up_client_replaced(self, error: BaseException) -> bool:
        """A joiner's request unanswered in time while the host's port still takes connections:
        the store may be held up, not gone (torch 2.13 looks up the name of every client it
        accepts on its one thread, so a stranger's late reverse zone holds every node's requests
        up: issue 39). Then a new client, too, is answered only once the store is free again:
        it replaces the broken connection, waited for to `limit`. The first one answered at once
        means the store was not held up, but this connection's path lost the request (a
        blackhole drops its full-size frames; its writes before it are lost with it): False,
        the host named lost and its path asked, as where nothing listens or nothing ever answers.
        (One answered at once after a try that timed out: the stall has just ended.)"""
        if self.limit is None or not compat.reply_timed_out(error):
            return False
        (host, port), began = self.endpoint, time.monotonic()
        dist = compat.import_distributed(self.limit)
        first = True
        while not self.limit.expired() and not_listening(host, port, self.limit) is None:
            asked = time.monotonic()
            store, failed = client_try(dist, host, port, self.limit)
            if store is not None and first and time.monotonic() - asked < HELD_UP_AFTER:
                return False
            if store is not None:
                self._store = store
                self.held_up.append(round(time.monotonic() - began + STORE_REPLY_TIMEOUT, 1))
                return True
            if not isinstance(failed, ConnectTimedOut):
                return False
            first = False
        return False

    def reconnected(self) -> bool:
        """A new client in place of one the store broke off (the lost connection forgotten);
        False where none was made within STORE_REPLY_TIMEOUT."""
        deadline = Deadline(STORE_REPLY_TIMEOUT)
        store, _ = client_try(compat.import_distributed(deadline), *self.endpoint, deadline)
        if store is None:
            return False
        self._store, self.lost = store, None
        return True

    def _started(self, method: str, args: tuple[object, ...]) -> None:
        if self.watch is not None:  # named only where it stalls (its keys may be thousands)
            self.watch.began(method, args[0] if args else "")

    def _ended(self) -> None:
        if self.watch is not None:
            self.watch.ended()

    def stalled_seconds(self) -> float:
        """How long the host's store has stalled so far (its StallWatch's); 0 on a joiner."""
        return sum(s.seconds for s in self.watch.stalls) if self.watch is not None else 0.0

    def pace(self, nodes: int) -> None:
        """Look for keys less often in a large cluster: every node's looks land on the one
        store, so together they stay near STORE_LOOKS_PER_SECOND."""
        self.pause = max(STORE_POLL_INTERVAL, nodes / STORE_LOOKS_PER_SECOND)

    def bounded(self, key: str, max_bytes: int) -> storewire.StoreValue:
        """A key known to exist, read only if it holds at most max_bytes (storewire)."""
        if self._wire is None:
            self._wire = storewire.Wire(*self.endpoint)
        for _ in range(STALL_READS - 1):
            try:
                return self._wire_get(self._wire, key, max_bytes)
            except storewire.WireError:
                # The host's own store, alive, may be stalled by another client (StallWatch):
                # asked again a few times, bounded, rather than taken for a broken host.
                if self.watch is None or not self.watch.stalls:
                    raise
        return self._wire_get(self._wire, key, max_bytes)

    def _wire_get(self, wire: storewire.Wire, key: str, max_bytes: int) -> storewire.StoreValue:
        self._started("get", (key,))
        try:
            return wire.get(key, max_bytes, self.end.within(STORE_REPLY_TIMEOUT))
        finally:
            self._ended()


def _name(method: Method) -> str:
    return method if isinstance(method, str) else method.__name__
