"""The ephemeral ports of this node's network namespace, read at start-up before netcheck opens
a socket: the range the kernel gives a socket that asks for no port (IPv6 sockets take theirs
from the same net.ipv4 settings: there is no net.ipv6 range), its reserved ports, and the
ports that connections closed but not yet released still hold. /proc/sys/net and /proc/net
show the reading process's own network namespace, as the job's processes will see it."""

from __future__ import annotations

from pathlib import Path

from netcheck.core.fields import MAX_ITEMS
from netcheck.core.model import EphemeralPorts, PortSpan

# /proc/net/tcp's `st` column (the kernel's include/net/tcp_states.h): a connection closed
# here whose port the kernel still holds, 60 s in TIME-WAIT, up to tcp_fin_timeout in FIN-WAIT-2.
HOLDING_STATES = ("06", "05")   # TCP_TIME_WAIT, TCP_FIN_WAIT2


def read_ports(proc: str = "/proc") -> EphemeralPorts | None:
    """This namespace's ephemeral ports; None where the range cannot be read."""
    sysctl = Path(proc, "sys/net/ipv4")
    bounds = _numbers(sysctl / "ip_local_port_range")
    if len(bounds) != 2 or not 0 < bounds[0] <= bounds[1] <= 65535:
        return None
    low, high = bounds
    try:
        reserved = spans_in(sysctl.joinpath("ip_local_reserved_ports").read_text(), low, high)
    except OSError:
        reserved = ()
    fin = _numbers(sysctl / "tcp_fin_timeout")
    return EphemeralPorts(low, high, reserved, holding(Path(proc, "net"), low, high),
                          float(fin[0]) if len(fin) == 1 else None)


def spans_in(text: str, low: int, high: int) -> tuple[PortSpan, ...]:
    """ip_local_reserved_ports ("29500,30000-30010", or empty) as the spans it reserves inside
    low..high, in order and merged; the first MAX_ITEMS of them."""
    spans: list[tuple[int, int]] = []
    for part in text.replace("\n", ",").split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            continue
        a, b = max(int(first), low), min(int(last or first), high)
        if a <= b:
            spans.append((a, b))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return tuple(PortSpan(a, b) for a, b in merged[:MAX_ITEMS])


def holding(net: Path, low: int, high: int) -> int:
    """How many ports of low..high a closed connection still holds ({net}/tcp and tcp6, read a
    line at a time: a busy machine's tables are long)."""
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(net / table, encoding="ascii", errors="replace") as rows:
                next(rows, None)   # the header
                for row in rows:
                    fields = row.split(maxsplit=4)
                    if len(fields) > 3 and fields[3] in HOLDING_STATES:
                        port = int(fields[1].rpartition(":")[2] or "0", 16)
                        if low <= port <= high:
                            ports.add(port)
        except (OSError, ValueError):
            continue
    return len(ports)


def _numbers(path: Path) -> list[int]:
    try:
        return [int(w) for w in path.read_text().split()]
    except (OSError, ValueError):
        return []
