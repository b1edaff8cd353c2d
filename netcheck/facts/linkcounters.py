"""A node's link counters, read around each stage of the bandwidth phase: what its kernel
counted while netcheck's workers moved data (TCP retransmissions, interface errors and drops,
carrier changes, RDMA port errors), and what each worker's own connections sent and resent.

One bad cable, optic or switch port sets the pace of every collective, and its cause is
counted by the kernel: TCP resends what the link lost (/proc/net/snmp, /proc/net/netstat),
the NIC counts frames it could not receive (/proc/net/dev), the link's
carrier going away and back (carrier_changes), an InfiniBand port its symbol errors and
downed links (/sys/class/infiniband/DEV/ports/N/counters). Each is read as a difference across
a stage: netcheck's own traffic is the only traffic it may assume. The readers take the
roots they read, so tests feed fixture trees.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from netcheck.core.bwrecords import Moved, PeerSegments, StageLinks, Unanswered, summed
from netcheck.core.constants import LINK_JUDGED_SEGMENTS
from netcheck.facts.procfds import listed, socket_fds
from netcheck.facts.tcptable import RETRANSMIT_TIMER, SYN_SENT, tcp_rows

LINK_REPORTED_SEGMENTS = LINK_JUDGED_SEGMENTS // 10   # a peer's connections reported from this many
                             # segments (or any resent): the connect's and the control plane's few stay out
LINK_PEERS_KEPT = 256        # peers a worker reports (most resent first): a ring neighbour and a
                             # pair partner or two at scale, every peer at the sizes tests run
# bw.stage: a connection counts as unanswered once this many retransmission timeouts in a row
# went unacknowledged (TCP's minimum RTO doubles from 0.2 s: 0.6 s of data unanswered; a
# connect's from 1 s: 3 s). A lossy link repeats a timeout on one segment rarely; a port that
# went dark does on every connection to it.
UNANSWERED_TIMEOUTS = 2

# (file under /proc/net, its table, the counter): the node's TCP, namespace-wide. TCPDSACKRecvSegs
# (Linux 5.5 on): retransmitted segments the peer said it already had (see dsack_dups below).
TCP_COUNTERS = (("snmp", "Tcp", "OutSegs"), ("snmp", "Tcp", "RetransSegs"), ("netstat", "TcpExt", "TCPTimeouts"),
                ("netstat", "TcpExt", "TCPDSACKRecvSegs"))
# /proc/net/dev's columns, as the kernel names the counters behind them (dev_seq_printf_stats):
# every interface of the node's network namespace in one read. "frame" sums the length, over,
# CRC and frame errors; "drop" the drops and missed frames.
DEV_COLUMNS = ("rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "rx_fifo_errors", "rx_frame_errors",
               "rx_compressed", "multicast", "tx_bytes", "tx_packets", "tx_errors", "tx_dropped", "tx_fifo_errors",
               "collisions", "tx_carrier_errors", "tx_compressed")
# An interface's counters that never rise on a healthy link.
INTERFACE_ERRORS = ("rx_errors", "rx_fifo_errors", "rx_frame_errors", "tx_errors", "tx_fifo_errors",
                    "collisions", "tx_carrier_errors")
# Those that do, a little (a frame of a protocol nobody serves, a full queue): judged against
# the packets moved meanwhile.
INTERFACE_DROPS = ("rx_dropped", "tx_dropped")
INTERFACE_PACKETS = ("rx_packets", "tx_packets")
CARRIER_CHANGES = "carrier_changes"   # /sys/class/net/IF/carrier_changes: twice per flap (down, up)
# An RDMA port's error counters, as operators watch them (ibqueryerrors, the IB spec's PortCounters).
PORT_ERRORS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
               "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
               "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
               "excessive_buffer_overrun_errors", "VL15_dropped")
# struct tcp_info (linux/tcp.h): tcpi_total_retrans is the u32 at 100, tcpi_segs_out and
# tcpi_segs_in the u32s at 136 and 140 (Linux 4.2 on), tcpi_dsack_dups the u32 at 216 (5.0 on):
# the retransmissions the peer said it had already received (a D-SACK), sent because an ACK
# came late, not because a segment was lost. A stalled receiver on a busy machine makes a
# retransmission timeout fire and resend a window it holds: lost is what was resent less
# those. segs_in, read at the other end of the same connections, says what arrived at all.
TCP_INFO_BYTES = 220
TOTAL_RETRANS_AT, SEGS_OUT_AT, SEGS_IN_AT, DSACK_DUPS_AT = 100, 136, 140, 216
TCP_INFO_MIN_BYTES = SEGS_IN_AT + 4


@dataclass(frozen=True)
class Reading:
    """The counters at one moment."""

    taken: float                          # time.monotonic()
    tcp: dict[str, int]                   # counter -> value (those TCP_COUNTERS found)
    counters: dict[tuple[str, str], int]  # (interface or port, counter) -> value
    packets: dict[str, int]               # interface -> packets received and sent


def read_counters(sysfs: str = "/sys", proc: str = "/proc", ib_sysfs: str | None = None) -> Reading:
    """This node's link counters now: one file for every interface's (/proc/net/dev), one for
    each one's carrier changes. ib_sysfs: where the RDMA ports are read, when not under sysfs."""
    counters, packets = {}, {}
    for ifname, values in _dev(proc).items():
        if ifname == "lo":
            continue
        counters.update({(ifname, name): values[name] for name in INTERFACE_ERRORS + INTERFACE_DROPS})
        packets[ifname] = sum(values[name] for name in INTERFACE_PACKETS)
        _keep(counters, (ifname, CARRIER_CHANGES), Path(sysfs, "class/net", ifname, CARRIER_CHANGES))
    ib = Path(ib_sysfs or sysfs, "class/infiniband")
    for device in listed(ib):
        for port in listed(ib / device / "ports"):
            for name in PORT_ERRORS:
                _keep(counters, (f"{device}/{port}", name), ib / device / "ports" / port / "counters" / name)
    return Reading(time.monotonic(), _tcp(proc), counters, packets)


def _dev(proc: str) -> dict[str, dict[str, int]]:
    """/proc/net/dev: interface -> its counters (DEV_COLUMNS)."""
    try:
        lines = Path(proc, "net/dev").read_text().splitlines()[2:]
    except OSError:
        return {}
    found = {}
    for line in lines:
        name, _, numbers = line.partition(":")
        try:
            values = [int(v) for v in numbers.split()]
        except ValueError:   # not the layout this reads
            continue
        if len(values) >= len(DEV_COLUMNS):
            found[name.strip()] = dict(zip(DEV_COLUMNS, values))
    return found


def stage_links(stage: str, before: Reading, after: Reading) -> StageLinks:
    """What rose between two readings."""
    def rose(name: str) -> int:
        return max(0, after.tcp.get(name, 0) - before.tcp.get(name, 0))

    moved = tuple(Moved(where, counter, value - before.counters[key], _packets(where, before, after))
                  for key, value in sorted(after.counters.items()) if key in before.counters
                  for where, counter in [key] if value > before.counters[key])
    return StageLinks(stage, round(max(0.0, after.taken - before.taken), 3), rose("OutSegs"),
                      max(0, rose("RetransSegs") - rose("TCPDSACKRecvSegs")), rose("TCPTimeouts"), moved)


def _packets(where: str, before: Reading, after: Reading) -> int:
    return max(0, after.packets.get(where, 0) - before.packets.get(where, 0))


class StageCounters:
    """The counters read at each stage's start and at the end: a StageLinks per stage."""

    def __init__(self, sysfs: str = "/sys", proc: str = "/proc", ib_sysfs: str | None = None):
        self.roots = (sysfs, proc, ib_sysfs)
        self.stages: list[StageLinks] = []
        self.current: tuple[str, Reading] | None = None

    def enter(self, stage: str | None) -> None:
        """`stage` starts now (None: the last one ended)."""
        if self.current is not None and stage == self.current[0]:
            return
        now = read_counters(*self.roots)
        if self.current is not None:
            self.stages.append(stage_links(self.current[0], self.current[1], now))
        self.current = (stage, now) if stage is not None else None


def peer_segments(store_port: int) -> tuple[PeerSegments, ...]:
    """This process's TCP connections, summed by the peer's address: what they sent, sent again
    and received (TCP_INFO, read on each connected socket this process holds). Its connection
    to the store (STORE_PORT) stays out: its other end is no worker's, so what it sent would
    count as lost."""
    return merged(PeerSegments(*found) for fd in sorted(socket_fds())
                  if (found := _segments(fd, store_port)) is not None)


# /proc/net/tcp's states (include/net/tcp_states.h) in which a connection waits for its peer's
# answer: connected, connecting, or closing with data or a FIN not yet acknowledged.
WAITING_STATES = ("01", SYN_SENT, "04", "08", "09", "0B")


def unanswered(proc: str = "/proc") -> tuple[Unanswered, ...]:
    """The node's TCP connections (its network namespace's, any process's, orphans of a worker
    that exited included) that resent UNANSWERED_TIMEOUTS times in a row without an answer,
    by peer address."""
    found: dict[str, Unanswered] = {}
    for row in tcp_rows(proc):
        if (row.state not in WAITING_STATES or row.timer != RETRANSMIT_TIMER or row.timeouts < UNANSWERED_TIMEOUTS
                or ipaddress.ip_address(row.remote).is_loopback):
            continue
        old = found.get(row.remote, Unanswered(row.remote, 0, 0, 0))
        found[row.remote] = Unanswered(row.remote, old.connections + 1, old.connecting + (row.state == SYN_SENT),
                                       max(old.timeouts, row.timeouts))
    return tuple(found[a] for a in sorted(found))


def own_addresses() -> tuple[str, ...]:
    """The addresses this node holds, loopback aside: how its peers' connections find it."""
    found = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
             if a.family in (socket.AF_INET, socket.AF_INET6)}
    return tuple(sorted(a for a in found if not ipaddress.ip_address(a).is_loopback))


def interface_holding(address: str) -> str | None:
    """The interface that holds ADDRESS, a local one as getsockname gives it; None if none does."""
    plain = address.removeprefix("::ffff:").split("%")[0]
    return next((name for name, addrs in psutil.net_if_addrs().items()
                 if any(a.address.split("%")[0] == plain for a in addrs)), None)


def carrier_lost(ifname: str, sysfs: str = "/sys") -> bool:
    """Whether IFNAME is up without a carrier now (a cable pulled, its switch port down): its
    carrier file reads 0. False where it reads 1, or cannot be read (an interface set down, gone)."""
    try:
        return Path(sysfs, "class/net", ifname, "carrier").read_text().strip() == "0"
    except OSError:
        return False


def link_down(ifname: str, sysfs: str = "/sys") -> bool:
    """Whether IFNAME carries nothing now: set down, or up without a carrier (its operstate
    says down, or lowerlayerdown under a bond or VLAN). False where it cannot be read."""
    try:
        return Path(sysfs, "class/net", ifname, "operstate").read_text().strip() in ("down", "lowerlayerdown")
    except OSError:
        return False


def worth_reporting(peers: tuple[PeerSegments, ...]) -> tuple[PeerSegments, ...]:
    """The peers whose connections resent anything or moved LINK_REPORTED_SEGMENTS, most resent
    first (at most LINK_PEERS_KEPT): the host judges (a direction too small to judge alone still
    tells which way a pair lost), and a full mesh's idle connections stay out."""
    kept = sorted((p for p in peers if p.retransmitted or max(p.segments, p.received or 0) >= LINK_REPORTED_SEGMENTS),
                  key=lambda p: (-p.retransmitted, -p.segments, p.address))
    return tuple(kept[:LINK_PEERS_KEPT])


def merged(peers: Iterable[PeerSegments]) -> tuple[PeerSegments, ...]:
    """Several workers' peers, summed by address (received: None where any of them was not read)."""
    peers = list(peers)
    sums = summed((p.address, p.segments, p.retransmitted) for p in peers)
    unread = {p.address for p in peers if p.received is None}
    received = summed((p.address, p.received or 0, 0) for p in peers)
    return tuple(PeerSegments(a, s, r, None if a in unread else received[a][0]) for a, (s, r) in sorted(sums.items()))


def _segments(fd: int, store_port: int) -> tuple[str, int, int, int] | None:
    """(peer address, segments sent, retransmitted, received) of a connected TCP socket that is
    not to the store; None otherwise."""
    try:
        sock = socket.socket(fileno=os.dup(fd))   # a copy: closing it leaves the worker's own
    except OSError:
        return None
    with sock:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return None
        try:
            peer, port = sock.getpeername()[:2]
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
        except OSError:   # not connected: a listener
            return None
    if len(info) < TCP_INFO_MIN_BYTES or port == store_port:
        return None
    (retrans,) = struct.unpack_from("I", info, TOTAL_RETRANS_AT)
    segs, received = struct.unpack_from("II", info, SEGS_OUT_AT)
    (dups,) = struct.unpack_from("I", info, DSACK_DUPS_AT) if len(info) >= TCP_INFO_BYTES else (0,)
    # As own_addresses writes them: no IPv4-mapped prefix, no link-local scope.
    return peer.removeprefix("::ffff:").split("%")[0], segs, max(0, retrans - dups), received


def _tcp(proc: str) -> dict[str, int]:
    tables = {name: _tables(Path(proc, "net", name)) for name in {f for f, _, _ in TCP_COUNTERS}}
    return {counter: value for file, table, counter in TCP_COUNTERS
            if (value := tables[file].get(table, {}).get(counter)) is not None}


def _tables(path: Path) -> dict[str, dict[str, int]]:
    """/proc/net/snmp's or netstat's tables: pairs of lines "Tcp: Name ..." / "Tcp: 1 ..."."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    tables = {}
    for names, values in zip(lines[::2], lines[1::2]):
        title, _, names = names.partition(":")
        numbers = values.partition(":")[2].split()
        try:
            tables[title] = dict(zip(names.split(), map(int, numbers)))
        except ValueError:   # not the layout this reads
            continue
    return tables


def _keep(counters: dict, key: tuple[str, str], path: Path) -> None:
    value = _number(path)
    if value is not None:
        counters[key] = value


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):   # absent on this device, or unreadable
        return None
