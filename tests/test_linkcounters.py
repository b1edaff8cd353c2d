"""The link counters' reader over fixture trees (an Ethernet node, an InfiniBand port), and
over this machine's own TCP connections (loopback: real sockets, nothing resent)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from netcheck.core.bwrecords import Moved, PeerSegments, Unanswered
from netcheck.core.constants import LINK_JUDGED_SEGMENTS
from netcheck.facts.linkcounters import (
    LINK_PEERS_KEPT,
    StageCounters,
    carrier_lost,
    interface_holding,
    merged,
    peer_segments,
    read_counters,
    stage_links,
    unanswered,
    worth_reporting,
)

SNMP = ("Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs "
        "OutSegs RetransSegs InErrs OutRsts InCsumErrors\nTcp: 1 200 120000 -1 10 5 0 0 3 1000 {out} {resent} 0 0 0\n")
DEV = ("Inter-|   Receive                                                |  Transmit\n"
       " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
       "carrier compressed\n")
NETSTAT = ("TcpExt: SyncookiesSent TCPTimeouts TCPDSACKRecv TCPDSACKRecvSegs\n"
           "TcpExt: 0 {timeouts} 1 {dsack}\n")


def write_node(root: Path, out: int, resent: int, dsack: int = 0, timeouts: int = 0, crc: int = 0, carrier: int = 1,
               symbol: int = 0) -> None:
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    (root / "proc/net/snmp").write_text("Ip: Forwarding\nIp: 1\n" + SNMP.format(out=out, resent=resent))
    (root / "proc/net/netstat").write_text(NETSTAT.format(timeouts=timeouts, dsack=dsack))
    # A CRC error counts in rx_errors and in the frame column both, as the kernel shows it.
    (root / "proc/net/dev").write_text(DEV + "".join(
        f"{ifname:>6}: 1000 {out} {crc} 0 0 {crc} 0 0 1000 {out} 0 0 0 0 0 0\n" for ifname in ("lo", "eth0")))
    for ifname in ("lo", "eth0"):
        (root / "sys/class/net" / ifname).mkdir(parents=True, exist_ok=True)
        (root / "sys/class/net" / ifname / "carrier_changes").write_text(f"{carrier}\n")
    counters = root / "sys/class/infiniband/mlx5_0/ports/1/counters"
    counters.mkdir(parents=True, exist_ok=True)
    for name, value in (("symbol_error", symbol), ("link_downed", 0), ("port_rcv_data", out * 100)):
        (counters / name).write_text(f"{value}\n")


def test_a_stage_is_what_rose_between_two_readings_resent_less_what_the_peers_had(tmp_path):
    write_node(tmp_path, out=1000, resent=10)
    before = read_counters(str(tmp_path / "sys"), str(tmp_path / "proc"))
    assert before.tcp == {"OutSegs": 1000, "RetransSegs": 10, "TCPTimeouts": 0, "TCPDSACKRecvSegs": 0}
    assert ("lo", "rx_errors") not in before.counters and ("eth0", "rx_errors") in before.counters   # lo: no link
    write_node(tmp_path, out=101_000, resent=2_010, dsack=300, timeouts=2, crc=5, carrier=3, symbol=9)
    stage = stage_links("all", before, read_counters(str(tmp_path / "sys"), str(tmp_path / "proc")))
    assert (stage.stage, stage.segments, stage.retransmitted, stage.timeouts) == ("all", 100_000, 1_700, 2)
    assert set(stage.moved) == {Moved("eth0", "carrier_changes", 2, 200_000),
                                Moved("eth0", "rx_frame_errors", 5, 200_000),
                                Moved("eth0", "rx_errors", 5, 200_000), Moved("mlx5_0/1", "symbol_error", 9, 0)}


def test_stage_counters_read_once_per_stage_and_close_the_last(tmp_path):
    write_node(tmp_path, out=0, resent=0)
    counters = StageCounters(str(tmp_path / "sys"), str(tmp_path / "proc"))
    counters.enter("start")
    counters.enter("all")
    write_node(tmp_path, out=500, resent=0)
    counters.enter("all")   # a second worker's word for the same stage
    counters.enter("pairs")
    counters.enter(None)
    assert [(s.stage, s.segments) for s in counters.stages] == [("start", 0), ("all", 500), ("pairs", 0)]


def test_a_tree_without_the_files_reads_as_nothing_counted(tmp_path):
    reading = read_counters(str(tmp_path / "sys"), str(tmp_path / "proc"))
    assert (reading.tcp, reading.counters) == ({}, {})
    assert stage_links("all", reading, reading).segments == 0


# An address of loopback's /8 no other test connects from or to: the test's two ends are the
# only connections of this process under it (the suite's other tests leave theirs to 127.0.0.1).
OWN_LOOPBACK = "127.0.0.91"


def test_this_processs_connections_are_read_by_peer_address():
    with socket.create_server((OWN_LOOPBACK, 0)) as server:
        client = socket.create_connection(server.getsockname(), source_address=(OWN_LOOPBACK, 0))
        accepted, _ = server.accept()
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(_read_all(accepted, 1 << 20)))
        reader.start()
        client.sendall(b"x" * (1 << 20))
        reader.join()
        try:
            peers = {p.address: p for p in peer_segments(store_port=0)}
            kept = {p.address: p for p in peer_segments(store_port=server.getsockname()[1])}
        finally:
            client.close()
            accepted.close()
    assert len(got) == 1 << 20
    mine = peers[OWN_LOOPBACK]   # both ends, summed: the client's data and the server's acks
    assert mine.segments > 0 and mine.retransmitted == 0, mine
    # Each end received what the other sent: one connection's two ends, summed, balance, but for
    # one segment of the handshake that only one end counts.
    assert 0 <= mine.received - mine.segments <= 1, mine
    # The connection to the store's port is left out (the client's end, which sent the data;
    # the server's end is to the client's ephemeral port and stays).
    assert kept[OWN_LOOPBACK].segments < mine.segments // 2 and kept[OWN_LOOPBACK].received > mine.received // 2, kept


def _read_all(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        data += sock.recv(size - len(data))
    return bytes(data)


def test_workers_peers_are_summed_and_only_those_judged_kept_most_resent_first():
    big = LINK_JUDGED_SEGMENTS
    peers = merged([PeerSegments("198.18.0.11", big, 0), PeerSegments("198.18.0.11", big, 0),
                    PeerSegments("198.18.0.12", big, 500), PeerSegments("198.18.0.13", 10, 0)])
    assert worth_reporting(peers) == (PeerSegments("198.18.0.12", big, 500), PeerSegments("198.18.0.11", 2 * big, 0))
    many = tuple(PeerSegments(f"198.18.{i // 250}.{i % 250}", big, 0) for i in range(LINK_PEERS_KEPT + 5))
    assert len(worth_reporting(many)) == LINK_PEERS_KEPT


def test_only_an_interface_up_without_a_carrier_has_lost_it(tmp_path):
    """carrier reads 0 (a cable pulled, its switch port down), 1, or cannot be read (an
    interface set down: EINVAL; gone): only the first is a carrier to wait for."""
    for ifname, carrier in (("eth0", "0\n"), ("eth1", "1\n")):
        (tmp_path / "class/net" / ifname).mkdir(parents=True)
        (tmp_path / "class/net" / ifname / "carrier").write_text(carrier)
    assert [carrier_lost(n, sysfs=str(tmp_path)) for n in ("eth0", "eth1", "gone")] == [True, False, False]


def test_a_local_address_is_held_by_its_interface_and_a_strangers_by_none():
    assert interface_holding("127.0.0.1") == interface_holding("::ffff:127.0.0.1") == "lo"
    assert interface_holding("192.0.2.1") is None   # TEST-NET-1: no interface's


def tcp_row(local: str, remote: str, state: str, timer: str, timeouts: int) -> str:
    """One /proc/net/tcp row as the kernel writes it (get_tcp4_sock)."""
    return (f"   0: {local} {remote} {state} 00000400:00000000 {timer}:00000123 {timeouts:08X}     0        0 "
            "4242 1 0000000000000000 20 4 30 10 -1")


def test_unanswered_connections_are_those_resent_on_timeout_again_and_again_by_peer(tmp_path):
    me, node2, node0 = "0B0012C6", "0C0012C6", "0A0012C6"   # 198.18.0.11, .12, .10 as the kernel writes them
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
    rows = [tcp_row(f"{me}:9C40", f"{node2}:A000", "01", "01", 4),    # established, 4 timeouts in a row
            tcp_row(f"{me}:9C41", f"{node2}:A001", "02", "01", 2),    # a connect, unanswered twice
            tcp_row(f"{me}:9C42", f"{node0}:A002", "01", "01", 1),    # one timeout: a lost segment, not a wall
            tcp_row(f"{me}:9C43", f"{node0}:A003", "01", "04", 6),    # a zero-window probe: a peer not reading
            tcp_row(f"{me}:9C44", f"{node0}:A004", "0A", "01", 5),    # a listener
            tcp_row("0100007F:9C45", "0100007F:A005", "01", "01", 5)]  # loopback
    mapped = "0000000000000000FFFF0000" + node0   # ::ffff:198.18.0.10, the words as the kernel writes them
    rows6 = [tcp_row("0" * 32 + ":9C46", f"{mapped}:A006", "04", "01", 3)]   # an orphan closing, unanswered
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text("\n".join([header, *rows]) + "\n")
    (tmp_path / "net" / "tcp6").write_text("\n".join([header, *rows6]) + "\n")
    assert unanswered(str(tmp_path)) == (Unanswered("198.18.0.10", 1, 0, 3), Unanswered("198.18.0.12", 2, 1, 4))
    assert unanswered(str(tmp_path / "missing")) == ()
