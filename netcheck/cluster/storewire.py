"""A TCPStore value read with plain sockets, refused by its length before it is read.

torch's Store.get has no size query and reads a value whole: a 1 GB value planted in a job's
store costs inspect 2.3 GB and its whole --timeout. So inspect asks for values in the
store's own protocol (the one facts.probe speaks), reads the 8-byte length first, and
closes the connection when it is over the limit; the store's send then fails and it drops
the connection, as for any client that went away. The wire, the same for the legacy and the
libuv backend (torch/csrc/distributed/c10d/TCPStoreBackend.cpp, TCPStoreLibUvBackend.cpp,
2.13):

    -> VALIDATE (0) and the magic, uint32     (no reply)
    -> GET (3), uint64 key length, key        (the client's "/" prefix, then the key)
    <- uint64 value length, value             (libuv: length 0 for a missing key;
                                               legacy: the connection closed)
    -> DELETE_KEY (8), uint64 key length, key
    <- int64 keys deleted

A store that resets the first request on a fresh connection is asked again in torch 2.1's
protocol (core.storewireops: LEGACY_GET), and its endpoint remembered.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from netcheck.core.constants import PROBE_TIMEOUT, STORE_REPLY_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.storeerrors import StoreLost
from netcheck.core.storewireops import GET, LEGACY_GET, STORE_MAGIC, VALIDATE
from netcheck.facts.probe import error_text, resolve

T = TypeVar("T")

_without_validate: set[tuple[str, int]] = set()   # endpoints whose store speaks torch 2.1's protocol
_KEY_PREFIX = b"/"      # torch's TCPStore puts it before every key it is given
_DELETE_KEY = 8         # QueryType DELETE_KEY, the same in torch 2.1's protocol and 2.13's
_LENGTH = struct.Struct("<Q")
_CHUNK = 1 << 20


class WireError(StoreLost, ConnectionError):
    """The store took no connection, broke off or did not answer in time; one line. A lost
    store (core.storeerrors), and a ConnectionError as it always was."""

    def __init__(self, message: str, reset: bool = False):
        super().__init__(message)
        self.reset = reset   # the store dropped the connection before any reply


@dataclass(frozen=True)
class StoreValue:
    size: int                # bytes the store holds under the key
    data: bytes | None       # the value; None when over the limit (never read)


def get_bounded(host: str, port: int, key: str, max_bytes: int, deadline: Deadline) -> StoreValue:
    """KEY's value if it is at most MAX_BYTES, else only its size, on a connection of its own;
    raises WireError when the store does not answer by the deadline or breaks off."""
    wire = Wire(host, port)
    try:
        return wire.get(key, max_bytes, deadline)
    finally:
        wire.close()


class Wire:
    """A connection kept open for bounded reads (the host reads its pings list every poll).
    A value over the limit is never read, which leaves the stream out of step: the
    connection is closed then, and the next read opens a new one."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self._sock: socket.socket | None = None

    def get(self, key: str, max_bytes: int, deadline: Deadline) -> StoreValue:
        """As get_bounded; raises WireError (and closes) when the store does not answer."""
        return self._asked(key, (GET, LEGACY_GET), deadline, lambda: self._value(max_bytes, deadline))

    def delete(self, key: str, deadline: Deadline) -> None:
        """KEY deleted, as torch's delete_key (the count it answers is read and dropped);
        raises WireError (and closes) when the store does not answer."""
        self._asked(key, (_DELETE_KEY, _DELETE_KEY), deadline,
                    lambda: _received(self._connection(), _LENGTH.size, deadline))

    def _asked(self, key: str, queries: tuple[int, int], deadline: Deadline, reply: Callable[[], T]) -> T:
        """reply() to KEY's request of queries[0] (queries[1] in torch 2.1's protocol)."""
        fresh, endpoint = self._sock is None, (self.host, self.port)
        legacy = endpoint in _without_validate
        try:
            return self._ask(key, queries[legacy], deadline, legacy, reply)
        except WireError as e:
            if not (fresh and e.reset and endpoint not in _without_validate):
                raise
            answer = self._ask(key, queries[1], deadline, True, reply)   # torch 2.1's store?
            _without_validate.add(endpoint)
            return answer

    def _ask(self, key: str, query: int, deadline: Deadline, legacy: bool, reply: Callable[[], T]) -> T:
        try:
            request = _get_request(key, query)
            if self._sock is None:  # a new connection validates first, in the same packet
                self._sock = _connected(self.host, self.port, deadline)
                request = (b"" if legacy else struct.pack("<BI", VALIDATE, STORE_MAGIC)) + request
            self._sock.sendall(request)
            return reply()
        except socket.timeout:
            self.close()
            raise WireError(f"the store did not answer a request for {key!r} in time") from None
        except OSError as e:
            self.close()
            if isinstance(e, WireError):
                raise
            raise WireError(f"the store broke off a request for {key!r}: {error_text(e)}",
                            reset=isinstance(e, ConnectionResetError)) from None

    def _value(self, max_bytes: int, deadline: Deadline) -> StoreValue:
        size = _LENGTH.unpack(_received(self._connection(), _LENGTH.size, deadline))[0]
        if size > max_bytes:
            self.close()
            return StoreValue(size, None)
        return StoreValue(size, _received(self._connection(), size, deadline))

    def _connection(self) -> socket.socket:
        assert self._sock is not None, "a reply read on a closed connection"   # _ask connects first
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _get_request(key: str, query: int) -> bytes:
    name = _KEY_PREFIX + key.encode()
    return struct.pack("<BQ", query, len(name)) + name


def _connected(host: str, port: int, deadline: Deadline) -> socket.socket:
    """A connection to the first of HOST's addresses that takes one, as torch's client tries them."""
    addresses, error = resolve(host, port, max(0.1, min(PROBE_TIMEOUT, deadline.remaining())))
    if error:
        raise WireError(f"{host} does not resolve here ({error})")
    failures = []
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(max(0.1, min(PROBE_TIMEOUT, deadline.remaining())))
        try:
            sock.connect(sockaddr)
            return sock
        except OSError as e:
            sock.close()
            failures.append(f"{sockaddr[0]}: {error_text(e)}")
    raise WireError(f"the store at {host}:{port} took no connection ({'; '.join(failures)})")


def _received(sock: socket.socket, size: int, deadline: Deadline) -> bytes:
    """Exactly SIZE bytes, each wait bounded by the deadline and the store's reply timeout."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        if deadline.expired():
            raise socket.timeout("deadline")
        sock.settimeout(max(0.05, min(STORE_REPLY_TIMEOUT, deadline.remaining())))
        count = sock.recv_into(view[got:], min(_CHUNK, size - got))
        if not count:
            raise ConnectionResetError(0, "the store closed the connection mid-reply")
        got += count
    return bytes(buffer)
