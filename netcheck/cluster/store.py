"""The TCPStore as netcheck talks to it once connected (cluster.storeconnect connects): the
Exchange, typed, bounded, optionally signed JSON under netcheck's keys (core.storekeys: each key
names the record it holds, so a read returns that record), and its parts: the transport that
bounds every request (cluster.storetransport), the signer (cluster.storesigner) and the log of
what other clients did (cluster.interference). cluster.collect reads what many nodes post.
Every torch workaround for the store lives in these, in cluster.storeconnect or in cluster.compat."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from netcheck.cluster import compat, storewire
from netcheck.cluster.interference import Interference
from netcheck.cluster.storesigner import Signer
from netcheck.cluster.storetransport import Method, Transport
from netcheck.core import codec
from netcheck.core.constants import FLOODED_LIST_SWEEP, MAX_FACTS_BYTES, MAX_MEMBERS, STORE_REPLY_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.storeerrors import Interfered, StoreError
from netcheck.core.storekeys import MAC_SUFFIX, Key, Slot
from netcheck.facts.bounded import Caller
from netcheck.facts.storepeers import StallWatch

T = TypeVar("T")

GUARD_INTERVAL = 1.0   # the host looks at what it wrote under a guarded key at most this often
MAX_ID_DIGITS = 18     # an arrival number a node took at random (a counter it could not use) fits
MAX_POSTED_BYTES = 16 * MAX_MEMBERS  # ",ID," for every node, twice over


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
    looks is kept in `interference`, so it is named, not taken for a fault of the nodes; what
    the host must not lose (its hello, the seats) it guards: written again where it was
    written over.

    Its parts, each with its own state: `transport` (every request, bounded), `signer` (the
    token and the run's nonce), `interference`. No other module assigns to any of them.
    """

    def __init__(self, store: Any, run_id: str, token: str | None = None, limit: Deadline | None = None, *,
                 end: Deadline, caller: Caller | None = None, watch: StallWatch | None = None):
        self.run_id = run_id
        self.transport = Transport(store, end=end, limit=limit, caller=caller, watch=watch)
        self.signer = Signer(run_id, token)
        self.interference = Interference()
        self._guarded: dict[str, tuple[str, str]] = {}  # key -> (value, MAC or ""), as the host wrote it
        self._guard_looked = 0.0
        self._clearing: set[str] = set()  # keys a thread of their own keeps deleting (keep_clearing)

    @property
    def pause(self) -> float:
        """Between looks for a key (pace)."""
        return self.transport.pause

    @property
    def lost(self) -> str | None:
        """Why the store connection broke, once it has."""
        return self.transport.lost

    @property
    def held_up(self) -> list[float]:
        """A joiner's: seconds each request waited out a held-up store."""
        return self.transport.held_up

    @property
    def watch(self) -> StallWatch | None:
        """The host's: its store's stalls, and who was connected."""
        return self.transport.watch

    def _call(self, method: Method, *args: object) -> Any:
        return self.transport.call(method, *args)

    def within(self, deadline: Deadline) -> AbstractContextManager[None]:
        """Transport.within: no request waited for past `deadline` inside the block."""
        return self.transport.within(deadline)

    def pace(self, nodes: int) -> None:
        self.transport.pace(nodes)

    def stalled_seconds(self) -> float:
        return self.transport.stalled_seconds()

    def key(self, key: Key[T], *parts: object) -> Slot[T]:
        """`key`'s path in this run (or the shared one), its ids after the name."""
        return key.at(self.run_id, *parts)

    def listing(self, key: Key[T]) -> str:
        """The list of the ids that posted `key` (post)."""
        return key.listing(self.run_id)

    def put(self, key: Slot[T], value: T, signed: bool = True, nonce: str | None = None,
            guard: bool = False) -> None:
        """Write a value (with its MAC under --token, bound to `nonce`, the run's by default);
        a guarded one is written again wherever another client writes over it (restore)."""
        text, mac = self.signer.signed(key, value, nonce) if signed else (codec.dumps(value), "")
        self._write(key, text, mac)
        if guard:
            self._guarded[key] = (text, mac)

    def put_many(self, values: dict[Slot[T], T], nonce: str | None = None) -> None:
        """put for many keys in one request, each with its MAC before it under --token (the
        store's one thread applies a request whole): the host's clock answers, a request each,
        were 30,000 requests before the roster at 10,000 nodes."""
        keys, texts = [], []
        for key, value in values.items():
            text, mac = self.signer.signed(key, value, nonce)
            if mac:
                keys.append(key + MAC_SUFFIX)
                texts.append(mac)
            keys.append(key)
            texts.append(text)
        if keys:
            self._call("multi_set", keys, texts)

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
            held = self.transport.bounded(key, len(text.encode())) if self.has(key) else None
            signed = not mac or (self.has(key + MAC_SUFFIX) and self._call("get", key + MAC_SUFFIX) == mac.encode())
            if held is None or held.data != text.encode() or not signed:
                self.interference.note(key, f"written over with {shown(held)}, not what the host wrote "
                                            "(the host wrote it again)")
                self._write(key, text, mac)

    def has(self, key: str) -> bool:
        return bool(self._call(compat.has_key, key))

    def has_all(self, keys: Sequence[str]) -> bool:
        return bool(self._call(compat.has_keys, keys))

    def add_to(self, key: Slot[int], add: int = 0) -> int:
        """add() on a counter; raises Interfered (connected again) where the store broke this
        connection off because another client had set the key to something not a number."""
        try:
            return int(self._call("add", key, add))
        except StoreError:
            seen = self._not_a_counter(key)
            if seen is None:
                raise
            raise Interfered(key, f"holds {seen}, not a counter: the store closed netcheck's connection "
                                  "on add()") from None

    def read_counter(self, key: Slot[int]) -> int | str:
        """A counter read without add() (which breaks the connection on a key set to text):
        its value (0 where absent), or what the key holds instead, shown."""
        return self._held_count(key) if self.has(key) else 0

    def _held_count(self, key: str) -> int | str:
        """A counter known to exist, on the bounded reader's own connection."""
        held = self.transport.bounded(key, COUNTER_BYTES)
        number = whole_number(held.data, signed=True)
        return shown(held) if number is None else number

    def _not_a_counter(self, key: str) -> str | None:
        """After add() broke off: what the key holds where it is not a number (the connection
        is then made again), or None where the store itself is gone or something else broke."""
        try:
            held = self._held_count(key)
        except storewire.WireError:
            return None
        if isinstance(held, int) or not self.transport.reconnected():
            return None
        return held

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
        wire = storewire.Wire(*self.transport.endpoint)

        def clear() -> None:
            while True:
                time.sleep(FLOODED_LIST_SWEEP)
                try:
                    wire.delete(key, Deadline(STORE_REPLY_TIMEOUT))
                except storewire.WireError:
                    pass   # asked again on a new connection next time

        threading.Thread(target=clear, name="netcheck-list-sweep", daemon=True).start()

    def read(self, key: Slot[T], signed: bool = True, max_bytes: int = MAX_FACTS_BYTES,
             nonce: str | Callable[[T], str] | None = None) -> T:
        """Decode a key known to exist as the record it holds; raises codec.DecodeError for
        anything malformed. Under --token the MAC is bound to `nonce`: the run's by default, or
        the one the value names (the hello carries the nonce it is signed under)."""
        data = self._call("get", key)
        value = codec.loads(key.record, data, max_bytes)
        if self.signer.token and signed:
            bound = nonce(value) if callable(nonce) else nonce
            mac = self._call("get", key + MAC_SUFFIX) if self.has(key + MAC_SUFFIX) else b""
            if not self.signer.verifies(key, data, mac, bound):
                raise codec.DecodeError("not signed for this key and run with this --token (another "
                                        "token, or a value copied from another key or run)")
        return value

    def post(self, key: Key[T], i: int, value: T) -> None:
        """Put KEY/i and list i under KEY/posted, so a reader learns who posted in one
        request (collect), not one per id. The value goes first: a listed id is readable."""
        self.put(self.key(key, i), value)
        self.enlist(self.listing(key), str(i))

    def enlist(self, key: str, entry: str) -> None:
        """Append an entry to a list key, between commas: a foreign append spoils only itself."""
        self._call("append", key, f",{entry},")

    def listed(self, key: str, max_bytes: int) -> list[str] | None:
        """A list key's entries in the order appended ([] when absent); None when it holds
        more than max_bytes, which are then not read: anyone can append to a list, and
        torch's get would read gigabytes whole (storewire reads the length first)."""
        if not self.has(key):
            return []
        value = self.transport.bounded(key, max_bytes)
        if value.data is None:
            return None
        return [e for e in value.data.decode("utf-8", "replace").split(",") if e]

    def raw(self, key: str) -> bytes:
        """A key known to exist, undecoded and unchecked: for a reader that decodes one value
        once for many simulated nodes (benchmarks/_scale_nodes.py)."""
        return bytes(self._call("get", key))

    def drop(self, key: str) -> None:
        self._call("delete_key", key)

    def posted(self, key: Key[T]) -> set[int] | None:
        """The ids listed under KEY/posted (anyone may append: a listed id is only a hint);
        None when the list has grown past any cluster's."""
        entries = self.listed(self.listing(key), MAX_POSTED_BYTES)
        return None if entries is None else {i for e in entries if (i := whole_number(e)) is not None}

    def read_counters(self, keys: list[Slot[int]]) -> list[int]:
        """The counters (Exchange.add_to) under keys: one check and one multi_get where all
        exist; 0 for one that does not, or that holds something else."""
        if self.has_all(keys):
            values = self._call("multi_get", keys)
        else:
            values = [self._call("get", k) if self.has(k) else b"0" for k in keys]
        return [codec.small_int(v) or 0 for v in values]

    def read_many(self, keys: list[Slot[T]]) -> dict[Slot[T], T | codec.DecodeError]:
        """key -> value (or the codec.DecodeError it raised) for each of keys that exists."""
        each = self.read_each(keys)   # typed apart, as in read_each
        return dict(each)

    def read_each(self, keys: list[Slot[T]]) -> Iterator[tuple[Slot[T], T | codec.DecodeError]]:
        """(key, value or the codec.DecodeError it raised) for each of keys that exists, each
        decoded as it is taken (a reader that drops each value keeps one decoded at a time).

        One multi_get where values are unsigned: multi_get waits for a missing key, so where
        not every key exists (the newest arrival counted, not written yet) each is looked
        for first and the ones there read in one. (A key another client deletes between the
        look and the read holds the read up as a single get's would.)"""
        # Each value typed apart: inferred from the yield, T would take in DecodeError.
        if self.signer.token:
            for k in keys:
                if self.has(k):
                    value = self._read_or_error(k)
                    yield k, value
            return
        there = keys if self.has_all(keys) else [k for k in keys if self.has(k)]
        for k, data in zip(there, self._call("multi_get", there) if there else []):
            decoded = _decode_or_error(k, data)
            yield k, decoded

    def _read_or_error(self, key: Slot[T]) -> T | codec.DecodeError:
        try:
            return self.read(key)
        except codec.DecodeError as e:
            return _bare(e)

    def wait_read(self, key: Slot[T], deadline: Deadline) -> T:
        self.wait(key, deadline)
        return self.read(key)

    def wait_read_valid(self, key: Slot[T], deadline: Deadline, nonce: str | Callable[[T], str] | None = None) -> T:
        """wait_read for a key the host guards (restore): a value that does not decode or is
        not signed is another client's, noted in `interference`, and waited past until the
        host has written its own again; raises the last DecodeError at the deadline."""
        while True:
            self.wait(key, deadline)
            try:
                return self.read(key, nonce=nonce)
            except codec.DecodeError as e:
                self.interference.note(key, f"holds what the host did not write: {e}")
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


def _decode_or_error(key: Slot[T], data: bytes) -> T | codec.DecodeError:
    try:
        return codec.loads(key.record, data, MAX_FACTS_BYTES)
    except codec.DecodeError as e:
        return _bare(e)


def _bare(error: codec.DecodeError) -> codec.DecodeError:
    """The error alone, to be kept: its frames and the error it was raised over (json's holds
    the whole text) held what was read, a MiB and its decoding, for as long as it is kept."""
    error.__context__ = error.__cause__ = None
    return error.with_traceback(None)
