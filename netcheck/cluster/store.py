"""The TCPStore as netcheck talks to it: the host's server on its pre-bound socket, clients
with bounded connects and replies, and the Exchange: typed, bounded, optionally signed JSON
under netcheck's keys. Every torch workaround for the store lives here or in core.compat."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import re
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from netcheck.cluster import storewire
from netcheck.core import codec, compat
from netcheck.core.constants import (
    FLOODED_LIST_SWEEP, MAX_FACTS_BYTES, MAX_NODES, PROBE_RETRY_INTERVAL, PROBE_TIMEOUT, STORE_LOOKS_PER_SECOND,
    STORE_POLL_INTERVAL, STORE_REPLY_TIMEOUT,
)
from netcheck.core.deadline import Deadline
from netcheck.core.model import StoreStall
from netcheck.core.storekeys import MAC_SUFFIX, POSTED, ROOT
from netcheck.facts.probe import Listener, call_with_timeout, reach, silent_nameservers



CONNECT_TRY = 2.0
HELD_UP_AFTER = 1.0   # a new client answered sooner: the store was not held up (Exchange._held_up_client_replaced)

GUARD_INTERVAL = 1.0   # the host looks at what it wrote under a guarded key at most this often
MAX_ID_DIGITS = 18     # an arrival number a node took at random (a counter it could not use) fits
FEW_IDS = 32       # collect checks up to this many ids at once; beyond, it reads the posted list
MAX_POSTED_BYTES = 16 * MAX_NODES  # ",ID," for every node, twice over


class RendezvousError(Exception):
    """The rendezvous could not go on; the message says why in one line."""


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(0.05, seconds))


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


def host_store(listener: Listener, port: int, deadline: Deadline):
    """The TCPStore server, on the socket the host has listened on since it started.

    The store takes the descriptor over and closes it itself, so Python lets go of it.
    """
    dist = compat.import_distributed(deadline)
    try:
        return compat.server_store(dist, port, _timedelta(deadline.remaining()), listener.hand_over())
    except RuntimeError as e:  # its own client's connect: a firewall rule for the port since reach
        raise RendezvousError(f"the host's store on port {port} could not start: {first_line(e)}") from None


def client_store(host: str, port: int, deadline: Deadline):
    """A client of a store the reach probe found listening; raises RendezvousError (HostLost
    once it no longer listens) rather than wait past the deadline.

    Where torch's own timeouts fall short (measured on 2.13, benchmarks/ and
    tests/test_store_probe.py): the constructor's validate and ping have none at all, so
    against a peer that accepts and never answers it blocks for as long as the peer lives
    (past 90 s with a 2 s timeout); a refused connect is retried for up to ~2x its timeout.
    So each try runs in a daemon thread that is abandoned at its bound (torch releases the
    GIL there), and before each try a plain connect asks whether the store still listens: a
    host lost before this client connected is said at once, not retried to the deadline.
    Once connected, every request is bounded by _bound_replies; Exchange waits by polling.
    """
    dist = compat.import_distributed(deadline)
    while True:
        gone = _not_listening(host, port, deadline)
        if gone:
            raise HostLost(f"the host's store at {host}:{port} is gone", gone)
        store, error = _client_try(dist, host, port, deadline)
        if store is not None:
            return store
        if isinstance(error, TimeoutError) or deadline.remaining() < 0.1:
            raise RendezvousError(f"could not connect a TCPStore client to {host}:{port}: "
                                  f"{first_line(error)}")
        time.sleep(min(PROBE_RETRY_INTERVAL, deadline.remaining()))


def _not_listening(host: str, port: int, deadline: Deadline) -> str | None:
    """Why nothing listens at host:port any more (refused, filtered...), or None."""
    found = reach(host, port, deadline.within(PROBE_TIMEOUT), wait_while_refused=False, handshake=False)
    if found.outcome == "open":
        return None
    return found.resolve_error or "; ".join(f"{p.address}: {p.outcome} ({p.detail})" for p in found.probes)


def _client_try(dist, host: str, port: int, deadline: Deadline):
    """(store, None) or (None, the error): one TCPStore constructor, given a short timeout
    (torch retries a refused connect within it), abandoned in its thread past twice that: a
    peer that accepts and never answers holds it forever. Plus a lookup's wait for each
    nameserver that does not answer: torch's client looks up the name of the address it
    connects to (an IPv4 one as ::ffff:a.b.c.d, which /etc/hosts never answers)."""
    seconds = min(CONNECT_TRY, deadline.remaining() / 3)
    timeout = compat.connect_timeout(_timedelta(seconds))
    silent = silent_nameservers()
    waits = sum(s.lookup_wait for s in silent)
    bound = min(2 * timeout.total_seconds() + 1.0 + waits, max(0.1, deadline.remaining()))

    def construct():
        before = _socket_fds()
        store = dist.TCPStore(host, port, None, False, timeout)
        store.set_timeout(_timedelta(deadline.remaining()))
        _bound_replies(_socket_fds() - before, port, STORE_REPLY_TIMEOUT)
        # A round trip: torch 2.1 and 2.4's constructors send nothing, so a client could count
        # the host's pre-store listener (which closes what is not netcheck's probe) as its store.
        store.num_keys()
        return store

    store, error = call_with_timeout(construct, bound)
    if isinstance(error, TimeoutError) and silent:
        error = TimeoutError(f"no TCPStore client was made in {bound:.0f} s: torch's client looks up the address it "
                             f"connects to, and this node's nameserver {', '.join(s.address for s in silent)} "
                             f"({silent[0].source}) does not answer")
    elif isinstance(error, TimeoutError):
        error = TimeoutError(f"it accepts the connection but no TCPStore answered in {bound:.0f} s (a store "
                             "held up by other clients answers late, a hung process never: the host's report says)")
    elif error is not None and not isinstance(error, (RuntimeError, OSError)):
        raise error
    return store, error


def _socket_fds() -> set[int]:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return set()
    fds = set()
    for name in names:
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                fds.add(int(name))
        except OSError:
            continue  # closed meanwhile (listdir's own descriptor among them)
    return fds


def _bound_replies(fds: set[int], port: int, seconds: float) -> None:
    """A receive/send timeout on the store client's socket (the new one connected to port).

    TCPStore's own timeout bounds waiting for a key, not a reply: over a link cut mid-run
    (packets dropped, no RST) a plain check() sits in recv for as long as TCP retries: no
    answer in 120 s with every timeout set to 2 s (benchmarks/store_link_cut.py). With
    SO_RCVTIMEO the call raises DistNetworkError ("Socket Timeout") instead, which reads as
    a lost host.
    """
    timeval = struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))
    for fd in fds:
        try:
            copy = os.dup(fd)  # socket options are the socket's: set through a copy, closed after
        except OSError:
            continue  # closed since it was listed: not the store's
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # a family Python does not know (netlink): not the store's
            os.close(copy)
            continue
        with sock:
            try:
                if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getpeername()[1] == port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            except OSError:
                continue  # not connected: not the store's


# The host's own request to its store, unanswered this long, is a stall: the store answers in
# milliseconds, but serves every client on one thread, and torch 2.13's looks up the name of
# each connection it accepts there (getnameinfo: measured per connection, the store's thread
# waiting out each reply; a lookup that fails outright stops torch's lookups for good, one
# answered late never does).
STALL_SECONDS = 2.0
STALL_LOOK = 0.5        # how often the watch looks at the request in flight
STALL_READS = 4         # the host's bounded read, tried again while its store is stalled
MAX_STALLS = 16         # stalls recorded; the rest are counted in the last one's seconds
TCP_LISTEN = "0A"       # /proc/net/tcp's state of a listening socket


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

    def _watch(self) -> None:
        while True:
            time.sleep(STALL_LOOK)
            since, request = self.since, self.request
            if since is None or time.monotonic() - since < STALL_SECONDS:
                continue
            self._note(since, _request_text(*request), port_peers(self.port))

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


def _request_text(method: str, keys: object) -> str:
    """A store request as a stall names it: its method and key (the first of a list, counted)."""
    if isinstance(keys, (list, tuple)):
        keys = f"{keys[0]} and {len(keys) - 1} more keys" if len(keys) > 1 else (keys[0] if keys else "")
    return f"{method} {keys}".strip()


def port_peers(port: int) -> dict[str, int]:
    """address -> connections to this machine's `port` (its network namespace's view), from
    /proc/net/tcp and tcp6: those the store serves and those still waiting to be accepted."""
    peers: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        try:
            rows = Path("/proc/net", table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] == TCP_LISTEN or _hex_port(fields[1]) != port:
                continue
            address = _hex_address(fields[2].rsplit(":", 1)[0])
            peers[address] = peers.get(address, 0) + 1
    return peers


def _hex_port(field: str) -> int:
    return int(field.rsplit(":", 1)[1], 16)


def _hex_address(text: str) -> str:
    """An address as /proc/net/tcp writes it (32-bit words in host order) as text; an IPv4
    one mapped into IPv6 as IPv4."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return socket.inet_ntop(socket.AF_INET, words)
    if words.startswith(b"\0" * 10 + b"\xff\xff"):
        return socket.inet_ntop(socket.AF_INET, words[12:])
    return socket.inet_ntop(socket.AF_INET6, words)


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


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

    def __init__(self, store, run_id: str, token: str | None = None, limit: Deadline | None = None):
        self._store = store
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
        self._clearing: set[str] = set()  # keys a thread of their own keeps deleting (keep_clearing)

    def _call(self, method, *args):  # a store method's name, or a compat function of the store
        # After a broken request (a reply timed out) the stream is out of step: a late
        # reply would answer the next request. So the first break is final.
        if self.lost is not None:
            raise ConnectionError(f"the host's store was lost earlier: {self.lost}")
        self._started(getattr(method, "__name__", method), args)
        try:
            try:
                return self._request(method, args)
            except Exception as e:
                if not self._held_up_client_replaced(e):
                    raise
            return self._request(method, args)   # once, on the new connection: a second break is final
        except Exception as e:
            if compat.store_lost(e):
                self.lost = first_line(e)
            raise
        finally:
            self._ended()

    def _request(self, method, args: tuple):
        if callable(method):
            return method(self._store, *args)
        return getattr(self._store, method)(*args)

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
        while not self.limit.expired() and _not_listening(host, port, self.limit) is None:
            asked = time.monotonic()
            store, failed = _client_try(dist, host, port, self.limit)
            if store is not None and first and time.monotonic() - asked < HELD_UP_AFTER:
                return False
            if store is not None:
                self._store = store
                self.held_up.append(round(time.monotonic() - began + STORE_REPLY_TIMEOUT, 1))
                return True
            if not isinstance(failed, TimeoutError):
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

    def count(self, key: str, add: int = 0) -> int:
        """add() on a counter; raises Interfered (connected again) where the store broke this
        connection off because another client had set the key to something not a number."""
        try:
            return self._call("add", key, add)
        except (RuntimeError, OSError):
            seen = self._not_a_counter(key)
            if seen is None:
                raise
            raise Interfered(key, f"holds {seen}, not a counter: the store closed netcheck's connection "
                                  "on add()") from None

    def counter(self, key: str) -> int | str:
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
        store, _ = _client_try(compat.import_distributed(deadline), self._server.host, self._server.port, deadline)
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
        self._started("get", (key,))
        try:
            return self._wire.get(key, max_bytes, Deadline(STORE_REPLY_TIMEOUT))
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

    def counts(self, keys: list[str]) -> list[int]:
        """The counters (Exchange.count) under keys: one check and one multi_get where all
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


def collect(ex: Exchange, cls, name: str, ids: list[int], deadline: Deadline,
            quiet: tuple[float, float] | None = None) -> dict:
    """Every `name/ID` value (written with Exchange.post) for the given ids, read as they
    are posted, until all, the deadline, or (with quiet, (LEAST, SILENCE)) LEAST seconds
    since the first look and SILENCE seconds with none new: thousands of nodes take longer
    than a few to post, but not with long silences. A look costs one request however many
    ids are pending, and the new values come in one more: the host of thousands of nodes
    would otherwise ask after each of them on every look.

    An id whose value never comes or does not decode is absent; one that does not decode is
    also kept in ex.rejected, so its sender is named for it and not as lost. The seconds the
    host's store stalled (StallWatch) are no silence of the nodes': nobody could post then.
    """
    found: dict = {}
    pending = set(ids)
    begun = heard = (time.monotonic(), ex.stalled_seconds())

    def since(mark: tuple[float, float]) -> float:  # the seconds since mark that nodes could post in
        return time.monotonic() - mark[0] - (ex.stalled_seconds() - mark[1])

    while pending:  # one look at least, also past the deadline: what is there counts
        ex.restore()
        over = deadline.expired() or (quiet is not None and since(begun) >= quiet[0] and since(heard) >= quiet[1])
        new = _ready(ex, name, pending, over, each_counts=quiet is not None)
        values = ex.read_many(cls, [ex.key(name, i) for i in new]) if new else {}
        for i in new:
            value = values.get(ex.key(name, i))
            if value is not None:  # listed but not there: a foreign append, looked at again
                pending.discard(i)
                heard = (time.monotonic(), ex.stalled_seconds())
                if isinstance(value, codec.DecodeError):
                    ex.rejected[name, i] = str(value)
                else:
                    found[i] = value
        if not pending or over:
            break
        time.sleep(ex.pause)
    return found


def posted_by(ex: Exchange, name: str, ids: list[int], deadline: Deadline) -> set[int]:
    """The ids listed as having posted `name`, waited for until all are or the deadline: for
    a value every node posts once it sees a go-ahead at its own poll, so not all at once."""
    pending, found = set(ids), set()
    while pending:
        over = deadline.expired()
        new = set(_ready(ex, name, pending, over, each_counts=True))
        found |= new
        pending -= new
        if over:
            break
        time.sleep(ex.pause)
    return found


def _ready(ex: Exchange, name: str, pending: set[int], last_look: bool, each_counts: bool) -> list[int]:
    """The pending ids whose value is there, in one request a look: for many ids, or where
    each new one counts (a quiet window runs from the last), from the posted list; for a
    few, one check of them all, which sees none until all are in. On the last look the ids
    not found so are asked after key by key (a value posted whose listing never came is
    still read)."""
    ids = sorted(pending)
    keys = [ex.key(name, i) for i in ids]
    listed = each_counts or len(ids) > FEW_IDS
    posted = ex.posted(name) if listed else None
    if posted is not None:
        ready = pending & posted
    elif listed:  # the list was grown past any cluster's: each key is asked after
        ready = {i for i, k in zip(ids, keys) if ex.has(k)}
    else:
        ready = pending if ex.has_all(keys) else set()
    if last_look:
        ready |= {i for i, k in zip(ids, keys) if i not in ready and ex.has(k)}
    return sorted(ready)
