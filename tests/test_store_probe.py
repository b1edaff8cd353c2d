"""The reach probe's TCPStore handshake and the bounded store client, against real stores
(torch's legacy and libuv backends), netcheck's own pre-store listener, and plain sockets that
accept and stay silent, send garbage or hang up. No mocks: every peer is a real socket."""

from __future__ import annotations

import datetime
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from faults import wait_until
from netcheck.cluster import compat
from netcheck.cluster.storeconnect import client_store
from netcheck.core.deadline import Deadline
from netcheck.core.storeerrors import HostLost, RendezvousError
from netcheck.facts.listener import listen
from netcheck.facts.probe import full_frames_lost, probe_address
from nodes import free_port, scaled


def probe(port: int, timeout: float = 2.0):
    return probe_address(socket.AF_INET, ("127.0.0.1", port), timeout)


@pytest.fixture(scope="module")
def dist():
    return compat.import_distributed()


@pytest.fixture(params=[False, True], ids=["legacy", "libuv"])
def store(request, dist):
    server = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=10),
                           wait_for_workers=False, use_libuv=request.param)
    assert server.libuvBackend == request.param
    return server


class Peer:
    """A TCP server on loopback that accepts and then does `behaviour` with each connection:
    "silent" holds it without a byte, "garbage" answers what no store would, "close" hangs up."""

    def __init__(self, behaviour: str):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.behaviour = behaviour
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.behaviour == "close":
                conn.close()
                continue
            if self.behaviour == "garbage":
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
            self.held.append(conn)

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def peer(request):
    made = Peer(request.param)
    yield made
    made.close()


def test_a_real_store_answers_the_handshake_and_nothing_is_written(store):
    store.set("netcheck/probe", "x")   # the key a Python client can name is "/netcheck/probe" on the wire
    before = sorted(store.list_keys())
    found = [probe(store.port) for _ in range(3)]
    assert [p.outcome for p in found] == ["open"] * 3, found
    assert "a TCPStore answered" in found[0].detail
    assert sorted(store.list_keys()) == before and store.num_keys() == 1
    assert store.get("netcheck/probe") == b"x"


@pytest.mark.parametrize("peer", ["silent", "garbage", "close"], indirect=True)
def test_what_accepts_but_is_no_store_is_named_within_the_probe_timeout(peer):
    start = time.monotonic()
    found = probe(peer.port, timeout=0.5)
    assert found.outcome == "not_store", found
    assert time.monotonic() - start < 0.5 + scaled(1.0)
    # A hang-up reads as EOF, or as a reset when it comes before the handshake is read.
    expected = {"silent": ("no answer to the TCPStore handshake in 0.5 s",),
                "garbage": ("answered the TCPStore handshake with b'HTTP/1.0 400 Bad",),
                "close": ("closed the connection without answering", "reset by peer before any answer")}
    assert any(words in found.detail for words in expected[peer.behaviour]), found


def test_a_listen_queue_nobody_accepts_is_not_a_store():
    """A stopped process (SIGSTOP) or a hung one: the kernel completes the connect, nobody reads."""
    with socket.create_server(("127.0.0.1", 0)) as queued:
        found = probe(queued.getsockname()[1], timeout=0.5)
    assert found.outcome == "not_store" and "no answer" in found.detail, found


@pytest.mark.compat
def test_the_hosts_listener_answers_as_a_store_until_the_store_takes_it_over(dist):
    """Joiners probe while the host still imports torch; the store then owns the socket (and
    answers the probe in its own protocol: torch 2.1's knows no VALIDATE, make compat)."""
    listener = listen(0)
    port = listener.getsockname()[1]
    assert probe(port).outcome == "open"
    server = compat.server_store(dist, port, datetime.timedelta(seconds=10), listener.hand_over())
    assert probe(port).outcome == "open"
    client = client_store("127.0.0.1", port, Deadline(scaled(10)))
    client.set("k", "v")
    assert server.get("k") == b"v"


@pytest.mark.compat
def test_a_torch_client_that_comes_before_the_store_retries_until_it_is_up(dist):
    """torch 2.1 and 2.4 clients send nothing when they connect: without client_store's round
    trip such a client took the listener, which closes it, for the store (make compat)."""
    listener = listen(0)
    port = listener.getsockname()[1]
    client = {}
    trying = threading.Thread(target=lambda: client.update(
        store=client_store("127.0.0.1", port, Deadline(scaled(10)))), daemon=True)
    trying.start()
    wait_until(lambda: _connected_to(port), scaled(10), "the client's first connect, taken by the listener")
    server = compat.server_store(dist, port, datetime.timedelta(seconds=10), listener.hand_over())
    trying.join(scaled(10))
    client["store"].set("k", "v")
    assert server.get("k") == b"v"


def _connected_to(port: int) -> bool:
    """Whether a connection to PORT was made here: while open, or closed (TIME_WAIT, a minute)."""
    return any(c.laddr and c.raddr and port in (c.laddr.port, c.raddr.port)
               for c in psutil.net_connections("tcp"))


@pytest.mark.parametrize("peer", ["silent"], indirect=True)
def test_a_store_client_abandons_a_peer_that_never_answers_at_its_deadline(peer):
    """torch's constructor blocks past every timeout against it (validate, then ping)."""
    start = time.monotonic()
    with pytest.raises(RendezvousError) as raised:
        client_store("127.0.0.1", peer.port, Deadline(4.0))
    assert time.monotonic() - start < 4.0 + scaled(1.0)
    assert "no TCPStore answered" in str(raised.value) and "\n" not in str(raised.value)


def test_a_store_that_stopped_listening_is_a_lost_host_at_once():
    start = time.monotonic()
    with pytest.raises(HostLost) as raised:
        client_store("127.0.0.1", free_port(), Deadline(scaled(20)))
    assert time.monotonic() - start < scaled(2.0)
    assert "refused" in str(raised.value)


QUIET = """
import socket, threading
from netcheck.cluster.storeconnect import client_store
from netcheck.core.storeerrors import RendezvousError
from netcheck.core.deadline import Deadline
server = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=lambda: [server.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()
try:
    client_store("127.0.0.1", server.getsockname()[1], Deadline(3))
except RendezvousError as e:
    print("raised:", e)
import os
print("level:", os.environ.get("TORCH_CPP_LOG_LEVEL"))
"""


def test_nothing_of_torchs_cpp_log_reaches_stderr_and_the_users_level_stays():
    """A peer that hangs up on every connect: c10d logs each failed try with a C++ stack trace."""
    import os
    env = {**os.environ, "TORCH_CPP_LOG_LEVEL": "INFO"}
    done = subprocess.run([sys.executable, "-c", QUIET], capture_output=True, text=True, env=env,
                          timeout=scaled(60))
    assert "raised: could not connect a TCPStore client" in done.stdout, done
    assert "level: INFO" in done.stdout, "the env phase reports the user's own value"
    assert done.stderr == "", done.stderr


def test_a_store_answers_the_full_frame_probe_where_nothing_drops_frames(store):
    """Loopback carries any frame: the small request and the full-frame one are both answered
    (test_mtu_cluster: a short switch port drops the second); nothing listening is no blackhole."""
    assert not full_frames_lost("127.0.0.1", store.port, 2.0)
    assert not full_frames_lost("127.0.0.1", free_port(), 2.0)
