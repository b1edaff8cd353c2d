"""The TCPStore as netcheck talks to it once connected (cluster.storeconnect connects): the
Exchange, typed, bounded, optionally signed JSON under netcheck's keys, and collect, which
reads what many nodes post. Every torch workaround for the store lives here, in
cluster.storeconnect or in cluster.compat."""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from netcheck.cluster import compat, storewire
from netcheck.cluster.storeconnect import client_try, not_listening, store_link
from netcheck.core import codec
from netcheck.core.constants import (
    CARRIER_POLL,
    CARRIER_WAIT,
    FLOODED_LIST_SWEEP,
    MAX_FACTS_BYTES,
    MAX_MEMBERS,
    STORE_LOOKS_PER_SECOND,
    STORE_POLL_INTERVAL,
    STORE_REPLY_TIMEOUT,
)
from netcheck.core.deadline import Deadline
from netcheck.core.storeerrors import ConnectTimedOut, Interfered, StoreError, StoreLost, first_line
from netcheck.core.storekeys import MAC_SUFFIX, POSTED, ROOT
from netcheck.facts.bounded import Caller, Overran
from netcheck.facts.linkcounters import carrier_lost
from netcheck.facts.storepeers import StallWatch, request_text

# A request made at or past its bound still gets this long: a store that answers takes
# microseconds, and one given none would be lost for asking late (the sweep's last abort).
REQUEST_FLOOR = 0.1
HELD_UP_AFTER = 1.0   # a new client answered sooner: the store was not held up (Exchange._held_up_client_replaced)

GUARD_INTERVAL = 1.0   # the host looks at what it wrote under a guarded key at most this often
MAX_ID_DIGITS = 18     # an arrival number a node took at random (a counter it could not use) fits
MAX_POSTED_BYTES = 16 * MAX_MEMBERS  # ",ID," for every node, twice over
STALL_READS = 4         # the host's bounded read, tried again while its store is stalled (StallWatch)


class Exchange:
    """Typed, bounded JSON over the store; the one place store keys are read and written.

    With a token (--token / NETCHECK_TOKEN) every value carries an HMAC-SHA256 under
    KEY#mac, and a value whose MAC is missing or wrong reads as malformed: nodes prove they
    share the secret. The MAC covers the run id, the run's nonce (the host's, told in its
    signed hello) and the key as well as the value, so a signed value copied under another
    key (a seated node's facts under a new arrival), into another run, or from an earlier
    run of this id is refused. Visitor records stay unsigned, so nodes of other runs (or
    without the token) are still named. A value whose key carries its reader's own fresh
    ticket (a clock pong) is signed without the run's nonce: it is how a joiner learns it.

    Anyone who reaches the port can write any key: what another client left where netcheck
    looks is kept in `interfered` (key -> what was seen), so it is named, not taken for a
    fault of the nodes; what the host must not lose (its hello, the seats) it guards: written
    again where it was written over.
    """

    def __init__(self, store, run_id: str, token: str | None = None, limit: Deadline | None = None, *,
                 end: Deadline, caller: Caller | None = None):
        self._store = store
        self.end = end  # the run's: no request is waited for past it, whatever torch does (_request)
        # A thread of its own, unless given one to share (one process simulating thousands of nodes).
        self._caller = caller or Caller("netcheck-store")
        self._server = store  # the host's serves the port: kept when a broken client is replaced
        self.run_id = run_id
        self.token = token
        self.nonce = ""  # the run's, once the host's hello is written or read
        self.rejected: dict[tuple[str, int], str] = {}  # (name, id) posted -> why it was refused: its sender is named
        self._wire: storewire.Wire | None = None  # for reads by length first (listed)
        self.lost: str | None = None  # why the store connection broke, once it has
        self.pause = STORE_POLL_INTERVAL  # between looks for a key (pace)
        self.interfered: dict[str, str] = {}  # key -> what another client left there
        self._guarded: dict[str, tuple[str, str]] = {}  # key -> (value, MAC or ""), as the host wrote it
        self._guard_looked = 0.0
        self.watch: StallWatch | None = None  # the host's: its store's stalls, and who was connected
        self.limit = limit  # a joiner's: how long a held-up store is waited out (the phases' end)
        self.held_up: list[float] = []  # a joiner's: seconds each request waited out a held-up store
        # A joiner's interface toward the host: a request waits for its carrier (_await_carrier).
        self.link = store_link(store.port) if limit is not None else None
        self._clearing: set[str] = set()  # keys a thread of their own keeps deleting (keep_clearing)

    def _call(self, method, *args):  # a store method's name, or a compat function of the store
        # After a broken request (a reply timed out) the stream is out of step: a late
        # reply would answer the next request. So the first break is final.
        if self.lost is not None:
            earlier = f"the host's store was lost earlier: {self.lost}"
            raise StoreLost(earlier, ConnectionError(earlier))
        self._started(getattr(method, "__name__", method), args)
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

    def _request(self, method, args: tuple):
        """One request, waited for to the run's end (or `within`'s) and no longer: torch's own
        timeouts do not bound a reply (the host's own client has none; over a port closed since
        the rendezvous it sat in recv for minutes), so the request runs on this Exchange's Caller
        thread. One past its bound loses the store: the thread is left in it, and the stream is
        out of step."""
        fn, call_args = (method, (self._store, *args)) if callable(method) else (getattr(self._store, method), args)
        try:
            return self._caller.call(fn, call_args, max(REQUEST_FLOOR, self.end.remaining()))
        except Overran as e:
            name = getattr(method, "__name__", method)
            self.lost = f"{request_text(name, args[0] if args else '')}: {e}, its deadline"
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
        host, port, began = self._server.host, self._server.port, time.monotonic()
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

    def _started(self, method: str, args: tuple) -> None:
        if self.watch is not None:  # named only where it stalls (its keys may be thousands)
            self.watch.request = (method, args[0] if args else "")
            self.watch.since = time.monotonic()

    def _ended(self) -> None:
        if self.watch is not None:
            self.watch.since = None

    def key(self, *parts: object, shared: bool = False) -> str:
        scope = (ROOT,) if shared else (ROOT, self.run_id)
        return "/".join(scope + tuple(str(p) for p in parts))

    def put(self, key: str, value: object, signed: bool = True, nonce: str | None = None,
            guard: bool = False) -> None:
        """Write a value (with its MAC under --token, bound to `nonce`, the run's by default);
        a guarded one is written again wherever another client writes over it (restore)."""
        text, mac = self._signed(key, value, nonce) if signed else (codec.dumps(value), "")
        self._write(key, text, mac)
        if guard:
            self._guarded[key] = (text, mac)

    def put_many(self, values: dict[str, object], nonce: str | None = None) -> None:
        """put for many keys in one request, each with its MAC before it under --token (the
        store's one thread applies a request whole): the host's clock answers, a request each,
        were 30,000 requests before the roster at 10,000 nodes."""
        keys, texts = [], []
        for key, value in values.items():
            text, mac = self._signed(key, value, nonce)
            if mac:
                keys.append(key + MAC_SUFFIX)
                texts.append(mac)
            keys.append(key)
            texts.append(text)
        if keys:
            self._call("multi_set", keys, texts)

    def _signed(self, key: str, value: object, nonce: str | None) -> tuple[str, str]:
        """value as JSON, and its MAC under --token ("" without)."""
        text = codec.dumps(value)
        return text, self._mac(key, text.encode(), nonce) if self.token else ""

    def interference(self) -> tuple[str, ...]:
        """What other clients did to the keys this node uses, as "KEY what was seen"."""
        return tuple(f"{key} {seen}" for key, seen in self.interfered.items())

    def _write(self, key: str, text: str, mac: str) -> None:
        if mac:  # the MAC first: a value a reader finds is never one without its MAC
            self._call("set", key + MAC_SUFFIX, mac)
        self._call("set", key, text)

    def restore(self, at_once: bool = False) -> None:
        """Write again what the host guards (its hello, the seats) where another client wrote
        over it, and name the overwrite: a joiner that could not read what it waits for keeps
        waiting (wait_read_valid), and one overwrite does not keep it out. At most once per
        GUARD_INTERVAL unless `at_once` (a rendezvous over in less has its look at its close);
        each value read no larger than what was written."""
        if not self._guarded or (not at_once and time.monotonic() - self._guard_looked < GUARD_INTERVAL):
            return
        self._guard_looked = time.monotonic()
        for key, (text, mac) in self._guarded.items():
            held = self._bounded(key, len(text.encode())) if self.has(key) else None
            signed = not mac or (self.has(key + MAC_SUFFIX) and self._call("get", key + MAC_SUFFIX) == mac.encode())
            if held is None or held.data != text.encode() or not signed:
                self.interfered[key] = (f"written over with {shown(held)}, not what the host wrote "
                                        "(the host wrote it again)")
                self._write(key, text, mac)

    def _mac(self, key: str, data: bytes, nonce: str | None = None) -> str:
        assert self.token is not None, "a MAC only under --token"
        mac = hmac.new(self.token.encode(), digestmod=hashlib.sha256)
        nonce = self.nonce if nonce is None else nonce
        for part in (self.run_id.encode(), nonce.encode(), key.encode(), data):
            mac.update(len(part).to_bytes(8, "big") + part)  # lengths first: no two splits alike
        return mac.hexdigest()

    def has(self, key: str) -> bool:
        return self._call(compat.has_key, key)

    def has_all(self, keys: list[str]) -> bool:
        return self._call(compat.has_keys, keys)

    def pace(self, nodes: int) -> None:
        """Look for keys less often in a large cluster: every node's looks land on the one
        store, so together they stay near STORE_LOOKS_PER_SECOND."""
        self.pause = max(STORE_POLL_INTERVAL, nodes / STORE_LOOKS_PER_SECOND)

    def add_to(self, key: str, add: int = 0) -> int:
        """add() on a counter; raises Interfered (connected again) where the store broke this
        connection off because another client had set the key to something not a number."""
        try:
            return self._call("add", key, add)
        except StoreError:
            seen = self._not_a_counter(key)
            if seen is None:
                raise
            raise Interfered(key, f"holds {seen}, not a counter: the store closed netcheck's connection "
                                  "on add()") from None

    def read_counter(self, key: str) -> int | str:
        """A counter read without add() (which breaks the connection on a key set to text):
        its value (0 where absent), or what the key holds instead, shown."""
        return self._held_count(key) if self.has(key) else 0

    def _held_count(self, key: str) -> int | str:
        """A counter known to exist, on the bounded reader's own connection."""
        held = self._bounded(key, COUNTER_BYTES)
        number = whole_number(held.data, signed=True)
        return shown(held) if number is None else number

    def _not_a_counter(self, key: str) -> str | None:
        """After add() broke off: what the key holds where it is not a number (the connection
        is then made again), or None where the store itself is gone or something else broke."""
        try:
            held = self._held_count(key)
        except storewire.WireError:
            return None
        if isinstance(held, int):
            return None
        deadline = Deadline(STORE_REPLY_TIMEOUT)
        store, _ = client_try(compat.import_distributed(deadline), self._server.host, self._server.port, deadline)
        if store is None:
            return None
        self._store, self.lost = store, None
        return held

    def stalled_seconds(self) -> float:
        """How long the host's store has stalled so far (its StallWatch's); 0 on a joiner."""
        return sum(s.seconds for s in self.watch.stalls) if self.watch is not None else 0.0

    def clearing(self, key: str) -> bool:
        """Whether a thread keeps deleting `key` (keep_clearing)."""
        return key in self._clearing

    def keep_clearing(self, key: str) -> None:
        """Delete `key` every FLOODED_LIST_SWEEP from now on, on a thread and a connection of
        their own: a list anyone may append to, found flooded (the pings), grows in the host's
        store, which is the host's memory, by the flooder's rate times the gap between two
        deletes, and the host's polls are far apart for that (600 MiB once between two)."""
        if key in self._clearing:
            return
        self._clearing.add(key)
        wire = storewire.Wire(self._server.host, self._server.port)

        def clear() -> None:
            while True:
                time.sleep(FLOODED_LIST_SWEEP)
                try:
                    wire.delete(key, Deadline(STORE_REPLY_TIMEOUT))
                except storewire.WireError:
                    pass   # asked again on a new connection next time

        threading.Thread(target=clear, name="netcheck-list-sweep", daemon=True).start()

    def _bounded(self, key: str, max_bytes: int) -> storewire.StoreValue:
        """A key known to exist, read only if it holds at most max_bytes (storewire)."""
        if self._wire is None:
            self._wire = storewire.Wire(self._server.host, self._server.port)
        for _ in range(STALL_READS - 1):
            try:
                return self._wire_get(key, max_bytes)
            except storewire.WireError:
                # The host's own store, alive, may be stalled by another client (StallWatch):
                # asked again a few times, bounded, rather than taken for a broken host.
                if self.watch is None or not self.watch.stalls:
                    raise
        return self._wire_get(key, max_bytes)

    def _wire_get(self, key: str, max_bytes: int) -> storewire.StoreValue:
        assert self._wire is not None, "made by _bounded"
        self._started("get", (key,))
        try:
            return self._wire.get(key, max_bytes, self.end.within(STORE_REPLY_TIMEOUT))
        finally:
            self._ended()

    def read(self, cls, key: str, signed: bool = True, max_bytes: int = MAX_FACTS_BYTES,
             nonce: str | Callable[[Any], str] | None = None):
        """Decode a key known to exist; raises codec.DecodeError for anything malformed. Under
        --token the MAC is bound to `nonce`: the run's by default, or the one the value names
        (the hello carries the nonce it is signed under)."""
        data = self._call("get", key)
        value = codec.loads(cls, data, max_bytes)
        if self.token and signed:
            bound = nonce(value) if callable(nonce) else nonce
            mac = self._call("get", key + MAC_SUFFIX) if self.has(key + MAC_SUFFIX) else b""
            if not hmac.compare_digest(mac, self._mac(key, data, bound).encode()):
                raise codec.DecodeError("not signed for this key and run with this --token (another "
                                        "token, or a value copied from another key or run)")
        return value

    def post(self, name: str, i: int, value: object) -> None:
        """Put name/i and list i under name/posted, so a reader learns who posted in one
        request (collect), not one per id. The value goes first: a listed id is readable."""
        self.put(self.key(name, i), value)
        self.enlist(self.key(name, POSTED), str(i))

    def enlist(self, key: str, entry: str) -> None:
        """Append an entry to a list key, between commas: a foreign append spoils only itself."""
        self._call("append", key, f",{entry},")

    def listed(self, key: str, max_bytes: int) -> list[str] | None:
        """A list key's entries in the order appended ([] when absent); None when it holds
        more than max_bytes, which are then not read: anyone can append to a list, and
        torch's get would read gigabytes whole (storewire reads the length first)."""
        if not self.has(key):
            return []
        value = self._bounded(key, max_bytes)
        if value.data is None:
            return None
        return [e for e in value.data.decode("utf-8", "replace").split(",") if e]

    def raw(self, key: str) -> bytes:
        """A key known to exist, undecoded and unchecked: for a reader that decodes one value
        once for many simulated nodes (benchmarks/_scale_nodes.py)."""
        return self._call("get", key)

    def drop(self, key: str) -> None:
        self._call("delete_key", key)

    def posted(self, name: str, shared: bool = False) -> set[int] | None:
        """The ids listed under name/posted (anyone may append: a listed id is only a hint);
        None when the list has grown past any cluster's."""
        entries = self.listed(self.key(name, POSTED, shared=shared), MAX_POSTED_BYTES)
        return None if entries is None else {i for e in entries if (i := whole_number(e)) is not None}

    def read_counters(self, keys: list[str]) -> list[int]:
        """The counters (Exchange.add_to) under keys: one check and one multi_get where all
        exist; 0 for one that does not, or that holds something else."""
        if self.has_all(keys):
            values = self._call("multi_get", keys)
        else:
            values = [self._call("get", k) if self.has(k) else b"0" for k in keys]
        return [codec.small_int(v) or 0 for v in values]

    def read_many(self, cls, keys: list[str]) -> dict:
        """key -> value (or the codec.DecodeError it raised) for each of keys that exists."""
        return dict(self.read_each(cls, keys))

    def read_each(self, cls, keys: list[str]) -> Iterator[tuple[str, Any]]:
        """(key, value or the codec.DecodeError it raised) for each of keys that exists, each
        decoded as it is taken (a reader that drops each value keeps one decoded at a time).

        One multi_get where values are unsigned: multi_get waits for a missing key, so where
        not every key exists (the newest arrival counted, not written yet) each is looked
        for first and the ones there read in one. (A key another client deletes between the
        look and the read holds the read up as a single get's would.)"""
        if self.token:
            yield from ((k, self._read_or_error(cls, k)) for k in keys if self.has(k))
            return
        there = keys if self.has_all(keys) else [k for k in keys if self.has(k)]
        for k, data in zip(there, self._call("multi_get", there) if there else []):
            yield k, _decode_or_error(cls, data)

    def _read_or_error(self, cls, key: str):
        try:
            return self.read(cls, key)
        except codec.DecodeError as e:
            return _bare(e)

    def wait_read(self, cls, key: str, deadline: Deadline):
        self.wait(key, deadline)
        return self.read(cls, key)

    def wait_read_valid(self, cls, key: str, deadline: Deadline, nonce: str | Callable[[Any], str] | None = None):
        """wait_read for a key the host guards (restore): a value that does not decode or is
        not signed is another client's, named in `interfered`, and waited past until the
        host has written its own again; raises the last DecodeError at the deadline."""
        while True:
            self.wait(key, deadline)
            try:
                return self.read(cls, key, nonce=nonce)
            except codec.DecodeError as e:
                self.interfered[key] = f"holds what the host did not write: {e}"
                if deadline.expired():
                    raise
            time.sleep(self.pause)

    def wait(self, key: str, deadline: Deadline) -> None:
        # Polled, not a blocking store.wait: Python sees Ctrl-C only between calls, and a
        # blocking wait would hold it until the deadline.
        # A store that breaks (the host died) raises its own error: that is a lost host,
        # not a slow one, and the phase boundary reports it as such.
        pause = 0.002  # quick at first: a clock pong is answered within one host poll
        while not self.has(key):  # one look at least, also past the deadline
            if deadline.expired():
                raise TimeoutError(f"{key} did not appear in time")
            time.sleep(pause)
            pause = min(2 * pause, self.pause)


COUNTER_BYTES = 24   # int64's digits and sign: anything longer is not a counter


def whole_number(text: bytes | str | None, signed: bool = False) -> int | None:
    """A counter's value (signed: int64, as torch's add keeps it) or an id another client may
    have written (MAX_ID_DIGITS digits at most); None for anything else."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    pattern = r"-?[0-9]{1,19}" if signed else rf"[0-9]{{1,{MAX_ID_DIGITS}}}"
    return int(text) if text is not None and re.fullmatch(pattern, text) else None


def shown(held: storewire.StoreValue | None) -> str:
    """What another client left under a key, in a few characters (the renderers escape it)."""
    if held is None:
        return "nothing (deleted)"
    if held.data is None:
        return f"{held.size} bytes"
    return f"{held.data[:40]!r}" + (f" ({held.size} bytes)" if held.size > 40 else "")


def _decode_or_error(cls, data: bytes):
    try:
        return codec.loads(cls, data, MAX_FACTS_BYTES)
    except codec.DecodeError as e:
        return _bare(e)


def _bare(error: codec.DecodeError) -> codec.DecodeError:
    """The error alone, to be kept: its frames and the error it was raised over (json's holds
    the whole text) held what was read, a MiB and its decoding, for as long as it is kept."""
    error.__context__ = error.__cause__ = None
    return error.with_traceback(None)
