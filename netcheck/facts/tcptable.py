"""The network namespace's TCP connections as the kernel lists them (/proc/net/tcp and tcp6):
one reader for the store's peers (facts.storepeers) and the connections a sweep left
unanswered (facts.linkcounters). Any process's, orphans of an exited one included."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# /proc/net/tcp's "st" column (include/net/tcp_states.h) and its "tr" timer column.
LISTEN = "0A"
SYN_SENT = "02"
RETRANSMIT_TIMER = "01"   # the retransmission timer is running


@dataclass(frozen=True)
class TcpRow:
    local: str
    local_port: int
    remote: str
    remote_port: int
    state: str         # "01" established ... "0A" listen
    timer: str         # "00" none, "01" retransmission, ...
    timeouts: int      # retransmission timeouts in a row (retrnsmt)


def tcp_rows(proc: str = "/proc") -> Iterator[TcpRow]:
    """Every row of /proc/net/tcp and tcp6 that reads as the kernel writes it."""
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(proc, "net", table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            try:
                (local, lport), (remote, rport) = (f.rsplit(":", 1) for f in fields[1:3])
                yield TcpRow(hex_address(local), int(lport, 16), hex_address(remote), int(rport, 16), fields[3],
                             fields[5].partition(":")[0], int(fields[6], 16))
            except (ValueError, IndexError):   # not the layout this reads
                continue


def hex_address(text: str) -> str:
    """An address as /proc/net/tcp writes it (32-bit words in host order) as text; an IPv4
    one mapped into IPv6 as IPv4."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return socket.inet_ntop(socket.AF_INET, words)
    if words.startswith(b"\0" * 10 + b"\xff\xff"):
        return socket.inet_ntop(socket.AF_INET, words[12:])
    return socket.inet_ntop(socket.AF_INET6, words)
