"""Fill the connection-tracking table of the network namespace this runs in, for real: entries
made through ctnetlink (what `conntrack -I` does), each an assured UDP flow between two addresses
of 198.19.0.0/16 that nothing uses, with a long timeout. Assured, because the kernel evicts an
unassured entry (an unanswered flow's) to make room for a new connection: a table full of those
is full only on paper. No packet is sent anywhere.

The count filled is this namespace's own (net->ct.count); the limit is the machine's
(net.netfilter.nf_conntrack_max, read-only outside the initial namespace), which this never
changes. On a 2-core machine 262,144 entries take 2-6 s and about 100 MB of kernel memory,
freed with the namespace.

    python conntrack_fill.py LEAVE                # fill to the limit less LEAVE entries, then exit
    python conntrack_fill.py LEAVE --joined PORT  # the same, then (printing "ready") wait for this
                                                  # namespace's connection to PORT to stay up 2 s,
                                                  # fill the rest, and print "full"
        [--hold S]                                # ... and keep it full S seconds, as another
                                                  # service's connections keep a full table full: an
                                                  # entry that expires (a closed connection's, 10 s
                                                  # after a reset) is taken again within a poll
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from pathlib import Path

from netcheck.facts.tcptable import tcp_rows

NETLINK_NETFILTER = 12
CT_NEW = (1 << 8) | 0                        # NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_NEW
FLAGS = 0x1 | 0x400 | 0x200                  # NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL
NESTED = 0x8000
STATUS = 0x8 | 0x4 | 0x2                     # IPS_CONFIRMED | IPS_ASSURED | IPS_SEEN_REPLY
TIMEOUT = 600                                # seconds: longer than any test
BATCH = 500                                  # messages per send
PROC = Path("/proc/sys/net/netfilter")
# Seconds a connection to PORT stays up: the store client's (up for the whole run), not a probe's
# (answered at once by the host's listener; under a loaded machine's load, within a second or so).
HELD = 2.0
HOLD_POLL = 0.005                            # seconds between looks at the count while holding it full


def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def _tuple(kind: int, src: bytes, dst: bytes, sport: int, dport: int) -> bytes:
    ip = _attr(1 | NESTED, _attr(1, src) + _attr(2, dst))
    proto = _attr(2 | NESTED, _attr(1, bytes([socket.IPPROTO_UDP])) + _attr(2, struct.pack(">H", sport))
                  + _attr(3, struct.pack(">H", dport)))
    return _attr(kind | NESTED, ip + proto)


def _message(seq: int, n: int) -> bytes:
    """The n-th entry: 198.19.H.L:P -> 198.19.255.254:9, P and H.L drawn from n."""
    src = socket.inet_aton(f"198.19.{(n // 60000) // 250}.{(n // 60000) % 250 + 1}")
    dst, sport = socket.inet_aton("198.19.255.254"), 1024 + n % 60000
    body = struct.pack("=BBH", socket.AF_INET, 0, 0) + _tuple(1, src, dst, sport, 9) + _tuple(2, dst, src, 9, sport)
    body += _attr(3, struct.pack(">I", STATUS)) + _attr(7, struct.pack(">I", TIMEOUT))
    return struct.pack("=IHHII", 16 + len(body), CT_NEW, FLAGS, seq, 0) + body


def count() -> int:
    return int((PROC / "nf_conntrack_count").read_text())


def limit() -> int:
    return int((PROC / "nf_conntrack_max").read_text())


def fill(leave: int, first: int = 0) -> int:
    """Entries made until the count is the limit less `leave`; the next entry's number returned."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as s:
        s.bind((0, 0))
        n = first
        while (missing := limit() - leave - count()) > 0 and n - first < 2 * limit():   # never past that
            batch = [_message(n + k + 1, n + k) for k in range(min(missing, BATCH))]
            n += len(batch)
            s.send(b"".join(batch))
            _drain(s)
        return n


def _drain(s: socket.socket) -> None:
    """Read back what the kernel said (errors only: no ack asked), so its queue never fills."""
    while True:
        try:
            s.recv(1 << 16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return


def _connected_to(port: int) -> set[str]:
    """This namespace's established TCP connections to `port` (IPv4 and IPv6), by local address."""
    return {f"{row.local}:{row.local_port}" for row in tcp_rows() if row.state == "01" and row.remote_port == port}


def wait_joined(port: int, timeout: float) -> bool:
    """Whether a connection to `port` stayed up HELD seconds within `timeout`."""
    end, since = time.monotonic() + timeout, {}
    while time.monotonic() < end:
        now = time.monotonic()
        up = _connected_to(port)
        since = {c: since.get(c, now) for c in up}
        if any(now - t >= HELD for t in since.values()):
            return True
        time.sleep(0.01)
    return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("leave", type=int)
    parser.add_argument("--joined", type=int, metavar="PORT")
    parser.add_argument("--wait", type=float, default=60.0)
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    began = time.monotonic()
    made = fill(args.leave)
    print(f"ready {count()} of {limit()} in {time.monotonic() - began:.1f} s", flush=True)
    if args.joined is None:
        return 0
    if not wait_joined(args.joined, args.wait):
        print("never joined", flush=True)
        return 1
    made = fill(0, made)
    print(f"full {count()} of {limit()}", flush=True)
    end = time.monotonic() + args.hold
    while time.monotonic() < end:
        if count() < limit():
            made = fill(0, made)
        time.sleep(HOLD_POLL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
