"""Reachability of the rendezvous endpoint with plain sockets, before torch is imported.

A joiner learns in seconds what a TCPStore client would take ten minutes to time out on:

    $ netcheck probe node0:29500
    netcheck 0.1.0 - probe - verdict FAIL

    PASS  rdzv.resolve  node0 resolves to 198.18.0.10
    FAIL  rdzv.reach    node0:29500 is filtered from this node: no answer in 3.0 s
          198.18.0.10 (ipv4): filtered, no answer in 3 s, 3.00 s
          1 attempt(s) over 3.0 s

Outcomes: open (a TCPStore answered), not_store (something accepts connections but does not
answer as a TCPStore: a hung or stopped process, another program), refused (RST: nothing
listening, or a REJECT rule), filtered (no answer before the probe timeout: a DROP rule),
unreachable (no route), dns (the name does not resolve). Only refused is worth waiting on:
the host may simply not be up yet. A connect that goes unanswered (filtered, unreachable)
also reads the kernel's route to the address and the neighbour table's state for the next
hop (facts.routes): a DROP rule's machine answers ARP / NDP, an address nobody holds does not.

What accepts is asked in TCPStore's own protocol (torch/csrc/distributed/c10d/
TCPStoreBackend.hpp, the same for the legacy and the libuv backend): a VALIDATE (query 0 and
the magic number, no reply), then a CHECK (query 5) of one key, which writes nothing; a store
answers one byte, READY (0) or NOT_READY (1). A torch client blocks in its constructor for as
long as a silent peer holds it (past every timeout it is given), so this is asked here, with
plain sockets, before torch is loaded.
"""

from __future__ import annotations

import errno
import ipaddress
import queue
import socket
import struct
import threading
import time

from netcheck.core.constants import PROBE_RETRY_INTERVAL, PROBE_TIMEOUT, SLOW_LOOKUP
from netcheck.core.deadline import Deadline
from netcheck.core.model import (
    UNANSWERED,
    UNANSWERED_HANDSHAKE,
    UNANSWERED_LOOKUP,
    Probe,
    Reach,
)
from netcheck.core.storewireops import CHECK, LEGACY_CHECK, STORE_MAGIC, VALIDATE
from netcheck.facts.bounded import call_with_timeout
from netcheck.facts.nameservers import hosts_ask_dns, lookup_bound
from netcheck.facts.routes import route_to

FAMILY_NAMES: dict[int, str] = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}   # by family number
_FILTERED = {errno.ETIMEDOUT, errno.EACCES, errno.EPERM}

# TCPStore's wire protocol (core.storewireops): VALIDATE with its magic, then CHECK of one key;
# the answer is READY (0) or NOT_READY (1).
_STORE_ANSWERS = (b"\x00", b"\x01")
# No torch client can name this key: TCPStore puts "/" before every key it is given.
_PROBE_KEY = b"netcheck/probe"
STORE_PROBE = (struct.pack("<BI", VALIDATE, STORE_MAGIC)
               + struct.pack("<BQQ", CHECK, 1, len(_PROBE_KEY)) + _PROBE_KEY)
LEGACY_STORE_PROBE = struct.pack("<BQQ", LEGACY_CHECK, 1, len(_PROBE_KEY)) + _PROBE_KEY
# The same question in one full jumbo segment: where both ends' MTU is 9000 and a port between
# them carries 1500, TCP sends it whole and it vanishes; on a 1500 path it is cut up and passes.
# Two keys of half the frame each: the libuv store refuses a key over 8 KiB.
FULL_FRAME = 8900
_HALF_KEY = _PROBE_KEY + b"/" + b"f" * (FULL_FRAME // 2 - 16 - len(_PROBE_KEY) - 1)
FULL_STORE_PROBE = (struct.pack("<BI", VALIDATE, STORE_MAGIC) + struct.pack("<BQ", CHECK, 2)
                    + 2 * (struct.pack("<Q", len(_HALF_KEY)) + _HALF_KEY))


def resolve(host: str, port: int, timeout: float) -> tuple[list[tuple[int, tuple]], str | None]:
    """Every (family, sockaddr) HOST resolves to, in getaddrinfo order, or the error text."""
    infos, error = call_with_timeout(
        lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    if isinstance(error, TimeoutError):
        return [], f"{UNANSWERED_LOOKUP} in {timeout:.3g} s"
    if error is not None:
        return [], error_text(error)
    seen, out = set(), []
    for family, _, _, _, sockaddr in infos:
        if family in FAMILY_NAMES and sockaddr[0] not in seen:
            seen.add(sockaddr[0])
            out.append((family, sockaddr))
    return out, None if out else f"{host} has no IPv4 or IPv6 address"


Lookup = tuple[list[tuple[int, tuple]], "str | None", float]   # resolve's answer, and the seconds it took


def lookup(host: str, port: int, timeout: float) -> Lookup:
    """resolve's answer, timed: (addresses, error, seconds to the answer or to `timeout`)."""
    start = time.monotonic()
    addresses, error = resolve(host, port, timeout)
    return addresses, error, round(time.monotonic() - start, 4)


def resolve_addresses(name: str, timeout: float) -> tuple[tuple[str, ...], str | None]:
    addresses, error = resolve(name, 0, timeout)
    return tuple(sockaddr[0] for _, sockaddr in addresses), error


RESOLVE_WORKERS = 64


def resolve_many(names: list[str], timeout: float) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """resolve_addresses for many names at once, RESOLVE_WORKERS at a time, in daemon threads:
    a thousand peers whose DNS hangs cost about a thousand / 64 timeouts, not a thousand."""
    pending: queue.SimpleQueue[str] = queue.SimpleQueue()
    for name in dict.fromkeys(names):
        pending.put(name)
    found: dict[str, tuple[tuple[str, ...], str | None]] = {}

    def work() -> None:
        while True:
            try:
                name = pending.get_nowait()
            except queue.Empty:
                return
            found[name] = resolve_addresses(name, timeout)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(RESOLVE_WORKERS, len(names)))]
    for t in threads:
        t.start()
    rounds = -(-len(names) // max(1, len(threads)))
    until = time.monotonic() + rounds * (timeout + 0.5)
    for t in threads:
        t.join(max(0.0, until - time.monotonic()))
    return {n: found.get(n, ((), f"{UNANSWERED_LOOKUP} in {timeout:.3g} s")) for n in names}


def error_text(error: BaseException) -> str:
    """The OS's words for an error (strerror) where it has them."""
    return getattr(error, "strerror", None) or str(error)


def probe_address(family: int, sockaddr: tuple, timeout: float, handshake: bool = True,
                  answer_by: Deadline | None = None) -> Probe:
    """One connect to one address; with `handshake`, what accepts is asked whether it is a
    TCPStore (open) or not (not_store), and given the probe timeout again to answer: a real
    store that is merely slow is not a squatter. With `answer_by`, one that stays silent is
    waited on until then (store_answer)."""
    start = time.monotonic()
    outcome, detail = _connect(family, sockaddr, timeout, handshake, answer_by)
    seconds = round(time.monotonic() - start, 4)
    # Read after the connect: by then the kernel has asked ARP / NDP for the whole probe timeout.
    route = route_to(sockaddr[0]) if outcome in UNANSWERED else None
    source = source_toward(family, sockaddr) if outcome == "open" else None
    return Probe(sockaddr[0], FAMILY_NAMES[family], outcome, detail, seconds, route, source)


def source_toward(family: int, sockaddr: tuple) -> str | None:
    """The address of this node's that a connection to SOCKADDR leaves from, as the kernel
    picks it (a datagram socket connected, nothing sent)."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(sockaddr)
            return sock.getsockname()[0].split("%")[0]
    except OSError:
        return None


def _connect(family: int, sockaddr: tuple, timeout: float, handshake: bool,
             answer_by: Deadline | None = None) -> tuple[str, str]:
    found, turned_away = _connect_once(family, sockaddr, timeout, STORE_PROBE if handshake else None, answer_by)
    if turned_away:
        legacy, _ = _connect_once(family, sockaddr, timeout, LEGACY_STORE_PROBE)
        if legacy[0] == "open":
            return "open", "connected; a TCPStore answered (torch 2.1's protocol)"
    return found


def reset_on_close(sock: socket.socket) -> socket.socket:
    """The socket, its close set to reset the connection (SO_LINGER 0) rather than end it in
    order: an orderly close leaves the closing end in TIME-WAIT for a minute, its port held,
    and on a node short of ports the job started right after netcheck found none (gloo's
    `bind: Address already in use`, issue 63). netcheck's own probes leave the node's ports
    as they found them; what they carried has been read by then."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return sock


def _connect_once(family: int, sockaddr: tuple, timeout: float, probe: bytes | None,
                  answer_by: Deadline | None = None) -> tuple[tuple[str, str], bool]:
    """((outcome, detail), whether what accepted reset or closed the probe unanswered)."""
    with reset_on_close(socket.socket(family, socket.SOCK_STREAM)) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError as e:
            return failed_connect(e, timeout), False
        return store_answer(sock, timeout, probe, answer_by) if probe else (("open", "connected"), False)


def store_answer(sock: socket.socket, timeout: float, probe: bytes,
                 answer_by: Deadline | None = None) -> tuple[tuple[str, str], bool]:
    """((open | not_store, detail), turned away) of a connected socket, from the TCPStore handshake.

    A store held up answers late, not never: torch's serves every connection on one thread
    and looks up each one's name there first, so one client whose reverse DNS zone answers
    late holds every later connection in the kernel's queue, accepted and unanswered, as a
    hung process's would be. With `answer_by`, silence is waited on until then, on this same
    connection (a new one would only queue behind it), and a late answer is said as such."""
    start = time.monotonic()
    sock.settimeout(timeout)
    try:
        sock.sendall(probe)
        answer = _first_answer(sock, timeout, answer_by)
    except socket.timeout:
        waited = round(time.monotonic() - start, 1) if answer_by else timeout
        why = " (waited to this node's join deadline, as for a store held up)" if answer_by else ""
        return ("not_store", f"{UNANSWERED_HANDSHAKE} in {waited:g} s{why}"), False
    except OSError as e:
        return ("not_store", f"{error_text(e).lower()} before any answer to the TCPStore handshake"), \
            e.errno in (errno.ECONNRESET, errno.EPIPE)
    if answer in _STORE_ANSWERS:
        took = time.monotonic() - start
        late = (f", {took:.1f} s late: held up (torch's store serves every client on one thread)"
                if took > timeout else "")
        return ("open", f"connected; a TCPStore answered{late}"), False
    if not answer:
        return ("not_store", "closed the connection without answering the TCPStore handshake"), True
    return ("not_store", f"answered the TCPStore handshake with {answer!r}"), False


def _first_answer(sock: socket.socket, timeout: float, answer_by: Deadline | None) -> bytes:
    """The first bytes of the answer, waited for `timeout`, then to `answer_by` where given."""
    try:
        return sock.recv(16)
    except socket.timeout:
        if answer_by is None or answer_by.remaining() <= 0:
            raise
    sock.settimeout(answer_by.remaining())
    return sock.recv(16)


def full_frames_lost(host: str, port: int, timeout: float) -> bool:
    """Whether the store at host:port answers a small request but not the same request in one
    full jumbo frame (FULL_FRAME bytes): a path-MTU blackhole between here and there."""
    addresses, _ = resolve(host, port, timeout)
    if not addresses:
        return False
    family, sockaddr = addresses[0]   # the one torch's client took first
    (small, _), _ = _connect_once(family, sockaddr, timeout, STORE_PROBE)
    if small != "open":
        return False
    (full, _), _ = _connect_once(family, sockaddr, timeout, FULL_STORE_PROBE)
    return full != "open"


def failed_connect(error: OSError, timeout: float) -> tuple[str, str]:
    """(outcome, detail) of a TCP connect that failed: refused, filtered (no answer, or a
    local firewall), unreachable. The reach probe and the mesh classify alike."""
    if isinstance(error, socket.timeout):
        return "filtered", f"no answer in {timeout:.3g} s"
    if isinstance(error, ConnectionRefusedError):
        return "refused", "connection refused: nothing listens there, or a REJECT rule"
    return ("filtered" if error.errno in _FILTERED else "unreachable"), error_text(error)


HOSTS_FILE = "/etc/hosts"


def named_in(host: str) -> str:
    """Where HOST's address comes from: "" for an address itself, the /etc/hosts line that names
    it, else DNS where nsswitch.conf sends lookups there (glibc's files backend reads /etc/hosts
    first on every stock system), else "" (not known)."""
    try:
        ipaddress.ip_address(host.split("%")[0])
        return ""
    except ValueError:
        pass
    try:
        lines = open(HOSTS_FILE).read().splitlines()
    except OSError:
        lines = []
    for number, line in enumerate(lines, 1):
        if host in line.split("#")[0].split()[1:]:
            return f"{HOSTS_FILE} line {number}: {line.strip()}"
    return "DNS" if hosts_ask_dns() else ""


def probe_all(addresses: list[tuple[int, tuple]], timeout: float, handshake: bool = True,
              answer_by: Deadline | None = None) -> tuple[Probe, ...]:
    """Probe every address at once, so two families cost one timeout, not two."""
    results: list[Probe | None] = [None] * len(addresses)

    def run(i: int, family: int, sockaddr: tuple) -> None:
        results[i] = probe_address(family, sockaddr, timeout, handshake, answer_by)

    threads = [threading.Thread(target=run, args=(i, f, s), daemon=True)
               for i, (f, s) in enumerate(addresses)]
    for t in threads:
        t.start()
    # The connect's timeout, then the handshake's (or to answer_by, which may be later).
    end = time.monotonic() + max(2 * timeout, timeout + (answer_by.remaining() if answer_by else 0)) + 1.0
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    return tuple(p if p else Probe(s[0], FAMILY_NAMES[f], "filtered", "probe did not finish", timeout)
                 for p, (f, s) in zip(results, addresses))


def overall_outcome(probes: tuple[Probe, ...]) -> str:
    """Open if any address answers (TCPStore tries each); else the most telling failure."""
    outcomes = {p.outcome for p in probes}
    for outcome in ("open", "not_store", "refused", "filtered", "unreachable"):
        if outcome in outcomes:
            return outcome
    return "unreachable"


def reach(host: str, port: int, deadline: Deadline, probe_timeout: float = PROBE_TIMEOUT,
          wait_while_refused: bool = True, resolved: Lookup | None = None,
          handshake: bool = True, answer_by: Deadline | None = None) -> Reach:
    """Look HOST up (unless the caller has: `lookup`'s answer), given the time the resolver
    takes within the deadline, and probe it; keep probing while refused (host not up yet), to
    the deadline, unless told that a refusal is the answer (a job's store that is not up will
    not come). Without `handshake`, a connect alone is open: whether anything still listens
    there. With `answer_by`, what accepts and stays silent is waited on until then: a store
    held up answers late (store_answer)."""
    start = time.monotonic()
    addresses, error, took = resolved or lookup(host, port, lookup_bound(deadline))
    slow = took >= SLOW_LOOKUP
    if error:
        return Reach(host, port, "dns", (), error, (), 0, round(time.monotonic() - start, 4),
                     named_in(host) if slow else "", took)
    attempts = 0
    while True:
        attempts += 1
        probes = probe_all(addresses, max(0.1, min(probe_timeout, deadline.remaining())), handshake, answer_by)
        outcome = overall_outcome(probes)
        if outcome != "refused" or not wait_while_refused or deadline.remaining() <= PROBE_RETRY_INTERVAL:
            break
        time.sleep(PROBE_RETRY_INTERVAL)
    return Reach(host, port, outcome, tuple(s[0] for _, s in addresses), None, probes, attempts,
                 round(time.monotonic() - start, 4), named_in(host) if outcome in UNANSWERED or slow else "", took)
