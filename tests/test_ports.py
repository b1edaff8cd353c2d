"""facts/ports.py: the ephemeral range, its reserved ports and the ports closed connections hold,
as the kernel writes them under /proc (a tree built here; the real sysctls of a namespace are
set in tests/test_ports_cluster.py)."""

from __future__ import annotations

from netcheck.core.model import PortSpan
from netcheck.facts.ports import read_ports, spans_in

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(local_port: int, state: str, v6: bool = False) -> str:
    local = ("0" * 24 + "0C0012C6" if v6 else "0C0012C6") + f":{local_port:04X}"
    remote = ("0" * 24 + "0A0012C6" if v6 else "0A0012C6") + ":7334"
    return f"   0: {local} {remote} {state} 00000000:00000000 03:00000D5B 00000000     0        0 0\n"


def test_the_range_its_reserved_ports_and_the_ports_closed_connections_hold(tmp_path):
    sysctl = tmp_path / "sys/net/ipv4"
    sysctl.mkdir(parents=True)
    (sysctl / "ip_local_port_range").write_text("40000\t40007\n")
    (sysctl / "ip_local_reserved_ports").write_text("29500,40006-40010\n")
    (sysctl / "tcp_fin_timeout").write_text("30\n")
    (tmp_path / "net").mkdir()
    # TIME-WAIT on 40002 twice (to two peers: one port), FIN-WAIT-2 on 40003 (IPv6), an
    # established connection on 40004 and a TIME-WAIT outside the range: 2 ports held.
    (tmp_path / "net/tcp").write_text(HEADER + row(40002, "06") + row(40002, "06") + row(40004, "01")
                                      + row(50000, "06"))
    (tmp_path / "net/tcp6").write_text(HEADER + row(40003, "05", v6=True))
    ports = read_ports(str(tmp_path))
    assert ports is not None
    assert (ports.low, ports.high, ports.reserved, ports.closing, ports.fin_timeout) == \
        (40000, 40007, (PortSpan(40006, 40007),), 2, 30.0)
    assert (ports.size, ports.usable) == (8, 6)


def test_no_range_no_record(tmp_path):
    assert read_ports(str(tmp_path)) is None


def test_reserved_spans_are_clipped_to_the_range_merged_and_garbage_skipped():
    assert spans_in("", 1, 100) == ()
    assert spans_in("5,6-8,10-200,x,3-", 1, 100) == (PortSpan(5, 8), PortSpan(10, 100))


def test_this_namespaces_range_is_read():
    ports = read_ports()
    assert ports is not None and 0 < ports.low <= ports.high <= 65535
