"""Reading interfaces: fixture sysfs/proc trees for the parsing, the real machine for the rest."""

from __future__ import annotations

import ctypes
import ctypes.util
import socket
from collections import namedtuple
from pathlib import Path

import psutil
import pytest

from netcheck.facts.nics import build_nic, default_route_ifname, getifaddrs_order, read_ib_ports, read_nic_table
from netcheck.rules.socketchoice import getifaddrs_walk

Entry = namedtuple("Entry", "family address netmask")
Stats = namedtuple("Stats", "flags mtu speed")


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def link(root: Path, name: str, *, type_: int = 1, flags: str = "0x1003", operstate: str = "up",
         hardware: bool = True, extra: dict[str, str] | None = None) -> None:
    files = {"type": str(type_), "flags": flags, "operstate": operstate, "mtu": "1500",
             "ifindex": "7", "address": "02:00:00:00:00:07", **(extra or {})}
    for rel, text in files.items():
        write(root, f"class/net/{name}/{rel}", text)
    if hardware:
        (root / f"class/net/{name}/device").mkdir()


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    link(tmp_path, "lo", type_=772, flags="0x9", operstate="unknown", hardware=False)
    link(tmp_path, "eth0", extra={"speed": "25000", "mtu": "9000", "ifindex": "2"})
    link(tmp_path, "eth1", operstate="down", extra={"speed": "-1"})
    link(tmp_path, "eth2", flags="0x1002", operstate="down")
    link(tmp_path, "br0", hardware=False, extra={"bridge/stp_state": "0", "brif/veth1a2b": ""})
    link(tmp_path, "docker0", hardware=False, extra={"bridge/stp_state": "0"})
    link(tmp_path, "br-0123456789ab", hardware=False, extra={"bridge/stp_state": "0"})
    link(tmp_path, "veth1a2b", hardware=False, extra={"speed": "10000"})
    link(tmp_path, "tun0", type_=65534, flags="0x1091", operstate="unknown", hardware=False)
    link(tmp_path, "ib0", type_=32, extra={"dev_port": "0", "speed": "200000"})
    link(tmp_path, "ib1", type_=32, extra={"dev_port": "0"})
    link(tmp_path, "ib2", type_=32, extra={"dev_port": "1"})
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)", ["ib0"])
    ib_port(tmp_path, "mlx4_0", 1, "1: DOWN", "InfiniBand", "10 Gb/sec (4X SDR)", ["ib1", "ib2"])
    ib_port(tmp_path, "mlx4_0", 2, "4: ACTIVE", "Ethernet", "40 Gb/sec (4X QDR)", ["ib1", "ib2"])
    return tmp_path


def ib_port(root: Path, dev: str, port: int, state: str, layer: str, rate: str, netdevs: list[str]) -> None:
    for rel, text in {"state": state, "link_layer": layer, "rate": rate}.items():
        write(root, f"class/infiniband/{dev}/ports/{port}/{rel}", text)
    for n in netdevs:
        (root / f"class/infiniband/{dev}/device/net/{n}").mkdir(parents=True, exist_ok=True)


def nic(sysfs: Path, name: str, entries=(), stats=None):
    return build_nic(name, list(entries), stats, str(sysfs))


# --------------------------------------------------------------------------------------
# /sys/class/net


@pytest.mark.parametrize(
    "name, kind",
    [
        ("lo", "loopback"),
        ("eth0", "ethernet"),
        ("br0", "bridge"),
        ("docker0", "docker"),
        ("br-0123456789ab", "docker"),
        ("veth1a2b", "veth"),
        ("tun0", "virtual"),
        ("ib0", "infiniband"),
        ("absent0", "unknown"),
    ],
)
def test_kind(sysfs, name, kind):
    assert nic(sysfs, name).kind == kind


@pytest.mark.parametrize(
    "name, up, running",
    [
        ("eth0", True, True),
        ("eth1", True, False),   # up, no carrier: sysfs flags never hold IFF_RUNNING
        ("eth2", False, False),
        ("lo", True, True),      # operstate "unknown" counts as running
        ("tun0", True, True),
    ],
)
def test_up_and_running(sysfs, name, up, running):
    n = nic(sysfs, name)
    assert (n.up, n.running) == (up, running)


def test_link_numbers(sysfs):
    n = nic(sysfs, "eth0")
    assert (n.index, n.mtu, n.speed_mbps, n.mac) == (2, 9000, 25000, "02:00:00:00:00:07")


@pytest.mark.parametrize("name", ["eth1", "br0", "lo"])  # -1, 0-less, no file
def test_unknown_speed_is_none(sysfs, name):
    assert nic(sysfs, name).speed_mbps is None


def test_psutil_fills_in_when_sysfs_cannot_be_read(sysfs):
    n = nic(sysfs, "absent0", stats=Stats("up,broadcast,running", 1400, 100))
    assert (n.up, n.running, n.mtu, n.speed_mbps, n.index) == (True, True, 1400, 100, 0)
    assert nic(sysfs, "absent0", stats=Stats("broadcast", 1500, 0)).speed_mbps is None


def test_nothing_readable_is_recorded_as_unknown(sysfs):
    n = nic(sysfs, "absent0")
    assert (n.up, n.running, n.mtu, n.speed_mbps, n.kind, n.mac) == (False, False, 0, None, "unknown", None)


def test_addresses_ipv4_first_scope_stripped_prefix_counted(sysfs):
    entries = [
        Entry(socket.AF_INET6, "fe80::1%eth0", "ffff:ffff:ffff:ffff::"),
        Entry(socket.AF_INET, "10.0.0.5", "255.255.254.0"),
        Entry(psutil.AF_LINK, "02:00:00:00:00:07", None),
        Entry(socket.AF_INET6, "fd00::5", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
    ]
    got = [(a.family, a.address, a.prefixlen) for a in nic(sysfs, "eth0", entries).addresses]
    assert got == [("ipv4", "10.0.0.5", 23), ("ipv6", "fe80::1", 64), ("ipv6", "fd00::5", 128)]


def test_an_ipv4_label_takes_its_devices_link_facts(sysfs):
    n = nic(sysfs, "eth0:1", [Entry(socket.AF_INET, "10.0.0.6", "255.255.255.0")])
    assert (n.name, n.running, n.kind, n.index) == ("eth0:1", True, "ethernet", 2)


def test_mac_from_psutil_when_sysfs_has_none(sysfs):
    entries = [Entry(psutil.AF_LINK, "02:aa:00:00:00:01", None)]
    assert nic(sysfs, "absent0", entries).mac == "02:aa:00:00:00:01"


def test_names_netifaces_missed_go_last():
    # lo exists on every Linux machine; the other name on none.
    assert getifaddrs_order({"zz-not-here": [], "lo": []}) == ["lo", "zz-not-here"]


# --------------------------------------------------------------------------------------
# /sys/class/infiniband


def test_ib_ports(sysfs):
    ports = {(p.device, p.port): p for p in read_ib_ports(str(sysfs))}
    hdr = ports["mlx5_0", 1]
    assert (hdr.state, hdr.link_layer, hdr.rate, hdr.netdev) == (
        "ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)", "ib0")
    assert ports["mlx4_0", 1].state == "DOWN"
    # A two-port HCA: each port's netdev is the one whose dev_port is port - 1.
    assert (ports["mlx4_0", 1].netdev, ports["mlx4_0", 2].netdev) == ("ib1", "ib2")
    assert ports["mlx4_0", 2].link_layer == "Ethernet"


def test_ib_port_unreadable_files(sysfs):
    (sysfs / "class/infiniband/mlx5_0/ports/1/state").unlink()
    # A second netdev on the same port (an IPoIB P_Key child): which one is ambiguous.
    (sysfs / "class/infiniband/mlx5_0/device/net/ib0.8001").mkdir()
    write(sysfs, "class/net/ib0.8001/dev_port", "0")
    (port,) = [p for p in read_ib_ports(str(sysfs)) if p.device == "mlx5_0"]
    assert (port.state, port.netdev) == ("unknown", None)


def test_no_infiniband(tmp_path):
    assert read_ib_ports(str(tmp_path)) == ()


# --------------------------------------------------------------------------------------
# /proc/net default route

ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
V6_REJECT = "0" * 32 + " 00 " + "0" * 32 + " 00 " + "0" * 32 + " ffffffff 00000001 00000000 00200200 lo"


def v4_route(iface: str, dest: str, metric: int, mask: str, flags: str = "0003") -> str:
    return f"{iface}\t{dest}\t010200C0\t{flags}\t0\t0\t{metric}\t{mask}\t0\t0\t0"


def test_default_route_lowest_metric(tmp_path):
    write(tmp_path, "net/route", "\n".join([
        ROUTE_HEADER,
        v4_route("eth1", "00000000", 100, "00000000"),
        v4_route("eth0", "000200C0", 0, "00FFFFFF", "0001"),
        v4_route("eth0", "00000000", 50, "00000000"),
        v4_route("eth2", "00000000", 0, "00000000", "0000"),  # not RTF_UP
    ]))
    assert default_route_ifname(str(tmp_path)) == "eth0"


def test_default_route_ipv6_only(tmp_path):
    write(tmp_path, "net/route", ROUTE_HEADER)
    v6_default = ("0" * 32 + " 00 " + "0" * 32
                  + " 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003 ens5")
    write(tmp_path, "net/ipv6_route", f"{V6_REJECT}\n{v6_default}")
    assert default_route_ifname(str(tmp_path)) == "ens5"


def test_no_default_route(tmp_path):
    write(tmp_path, "net/ipv6_route", V6_REJECT)  # the reject route on lo does not count
    assert default_route_ifname(str(tmp_path)) is None


# --------------------------------------------------------------------------------------
# The real machine


def test_real_machine_loopback():
    table = read_nic_table()
    lo = next(n for n in table.nics if n.name == "lo")
    assert (lo.kind, lo.up, lo.running) == ("loopback", True, True)
    assert ("ipv4", "127.0.0.1", 8) in [(a.family, a.address, a.prefixlen) for a in lo.addresses]


def test_real_machine_order_is_getifaddrs_order():
    """The NCCL emulation walks NicTable addresses as getifaddrs returns them; check that
    against libc's own getifaddrs here."""
    table = read_nic_table()
    entries = libc_getifaddrs()
    links = [name for name, family, _ in entries if family == socket.AF_PACKET]
    inet = [(name, addr) for name, family, addr in entries if family in (socket.AF_INET, socket.AF_INET6)]
    assert [n.name for n in table.nics] == [n for n in links if n in {x.name for x in table.nics}]
    assert [(n.name, a.address) for n, a in getifaddrs_walk(table)] == inet


class _Sockaddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_ubyte * 26)]


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [
    ("next", ctypes.POINTER(_Ifaddrs)), ("name", ctypes.c_char_p), ("flags", ctypes.c_uint),
    ("addr", ctypes.POINTER(_Sockaddr)), ("netmask", ctypes.c_void_p),
    ("ifu", ctypes.c_void_p), ("data", ctypes.c_void_p),
]


def libc_getifaddrs() -> list[tuple[str, int, str | None]]:
    """(name, family, address) per getifaddrs entry, in libc's order."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    head = ctypes.POINTER(_Ifaddrs)()
    assert libc.getifaddrs(ctypes.byref(head)) == 0
    out, cur = [], head
    try:
        while cur:
            out.append(_entry(cur.contents))
            cur = cur.contents.next
    finally:
        libc.freeifaddrs(head)
    return out


def _entry(e: _Ifaddrs) -> tuple[str, int, str | None]:
    if not e.addr:
        return e.name.decode(), -1, None
    sa = e.addr.contents
    raw = bytes(sa.data)
    if sa.family == socket.AF_INET:
        return e.name.decode(), sa.family, socket.inet_ntop(socket.AF_INET, raw[2:6])
    if sa.family == socket.AF_INET6:
        return e.name.decode(), sa.family, socket.inet_ntop(socket.AF_INET6, raw[6:22])
    return e.name.decode(), sa.family, None
