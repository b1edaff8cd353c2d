"""Read this node's network interfaces once and return them as plain records.

psutil supplies the addresses, netifaces the getifaddrs order, /sys/class/net the link
facts, /sys/class/infiniband the HCA ports and /proc/net the default route. The sysfs
and proc roots are parameters so tests can feed fixture trees. What cannot be read is
recorded as unknown (None, "unknown", or 0 where the field is an int), never guessed.
`netcheck local` prints the table; on a GPU node it looks like this:

    interface    kind        up   running   mtu   Mb/s    addresses
    lo           loopback    yes  yes      65536  ?       127.0.0.1/8 ::1/128
    eno1         ethernet    yes  yes       1500  1000    10.0.0.5/24
    ib0          infiniband  yes  yes       2044  200000  10.1.0.5/16
    docker0      docker      yes  no        1500  ?       172.17.0.1/16
      mlx5_0 port 1: ACTIVE, InfiniBand, 200 Gb/sec (4X HDR) (ib0)
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import netifaces
import psutil

from netcheck.core.nictable import Address, IbPort, Nic, NicTable
from netcheck.core.rdmarecords import GID_TYPES, Gid, RdmaPort

# <linux/if.h> and <linux/if_arp.h>
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772
# <linux/route.h>
RTF_UP = 0x1
RTF_REJECT = 0x200

# Docker names the bridge of a user-defined network "br-" + the network id's first 12 hex.
DOCKER_NETWORK_BRIDGE = re.compile(r"br-[0-9a-f]{12}")


class AddressEntry(Protocol):
    """One of psutil.net_if_addrs()'s entries (psutil ships no types)."""
    family: int
    address: str
    netmask: str | None


class LinkStats(Protocol):
    """psutil.net_if_stats()'s entry for a device."""
    flags: str
    speed: int
    mtu: int


def read_nic_table(sysfs: str = "/sys", proc: str = "/proc", ib_sysfs: str | None = None) -> NicTable:
    """ib_sysfs: where the HCA ports are read, when not under sysfs (local.RDMA_ROOT_HOOK)."""
    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    nics = tuple(
        build_nic(name, addrs[name], stats.get(_device(name)), sysfs)
        for name in getifaddrs_order(addrs)
    )
    return NicTable(nics, read_ib_ports(ib_sysfs or sysfs), default_route_ifname(proc))


def _device(name: str) -> str:
    # getifaddrs names a labelled IPv4 address by its label ("eth0:1"), which NCCL then
    # treats as one more interface; its link facts are those of the device.
    return name.split(":", 1)[0]


def getifaddrs_order(addrs: dict) -> list[str]:
    """Interface names in getifaddrs order.

    psutil.net_if_addrs() does not keep it: it stable-sorts the entries by family before
    grouping (psutil/__init__.py), so interfaces with an IPv4 address come first.
    netifaces.interfaces() lists names in order of first appearance in getifaddrs, whose
    first entries are the AF_PACKET ones, one per link in the kernel's link-dump order.
    Names psutil saw but netifaces missed (an interface added in between) go last.
    """
    ordered = [n for n in netifaces.interfaces() if n in addrs]
    return ordered + [n for n in addrs if n not in ordered]


def build_nic(name: str, entries: Sequence[AddressEntry], stats: LinkStats | None, sysfs: str) -> Nic:
    """One Nic from psutil's address entries and stats (None if absent) plus sysfs."""
    net = Path(sysfs, "class/net", _device(name))
    flags = read_int(net / "flags", 16)
    up, running = _up_running(flags, read_text(net / "operstate"), stats)
    return Nic(
        name=name,
        index=read_int(net / "ifindex") or 0,
        addresses=_addresses(entries),
        up=up,
        running=running,
        mtu=read_int(net / "mtu") or (stats.mtu if stats else 0),
        speed_mbps=_speed(net, stats),
        kind=link_kind(name, net, flags),
        mac=read_text(net / "address") or _link_address(entries),
    )


def link_kind(name: str, net: Path, flags: int | None) -> str:
    arptype = read_int(net / "type")
    if arptype is None and flags is None:
        return "unknown"
    if arptype == ARPHRD_LOOPBACK or (flags or 0) & IFF_LOOPBACK:
        return "loopback"
    if arptype == ARPHRD_INFINIBAND:
        return "infiniband"
    if name.startswith("docker") or DOCKER_NETWORK_BRIDGE.fullmatch(name):
        return "docker"
    if (net / "bridge").is_dir():
        return "bridge"
    # sysfs shows no driver for virtual links; Docker and the common CNIs name the host
    # side of a veth pair veth*, so the name is the honest signal here.
    if name.startswith("veth"):
        return "veth"
    # Hardware links have device/ pointing at their bus device; virtual ones do not.
    if not (net / "device").exists():
        return "virtual"
    return "ethernet"


def _addresses(entries: Sequence[AddressEntry]) -> tuple[Address, ...]:
    families = ((socket.AF_INET, "ipv4"), (socket.AF_INET6, "ipv6"))
    return tuple(
        Address(label, e.address.split("%", 1)[0], _prefixlen(e.netmask, family))
        for family, label in families
        for e in entries
        if e.family == family
    )


def _prefixlen(netmask: str | None, family: int) -> int:
    # glibc's getifaddrs always fills the netmask of an inet address from IFA_PREFIXLEN;
    # a missing one can only mean a host address, whose prefix is the whole address.
    if netmask is None:
        return 32 if family == socket.AF_INET else 128
    return bin(int(ipaddress.ip_address(netmask))).count("1")


def _link_address(entries: Sequence[AddressEntry]) -> str | None:
    return next((e.address for e in entries if e.family == psutil.AF_LINK), None) or None


def _up_running(flags: int | None, operstate: str | None, stats: LinkStats | None) -> tuple[bool, bool]:
    """IFF_UP and IFF_RUNNING as getifaddrs reports them.

    sysfs `flags` is dev->flags, which never holds IFF_RUNNING: the kernel adds it when
    reporting, for an up link whose operstate is up or unknown (net/core/dev.c
    dev_get_flags, netif_oper_up). psutil's flags (SIOCGIFFLAGS) are the fallback.
    """
    if flags is not None and operstate is not None:
        up = bool(flags & IFF_UP)
        return up, up and operstate in ("up", "unknown")
    words = set(stats.flags.split(",")) if stats is not None else set()
    return "up" in words, "running" in words


def _speed(net: Path, stats: LinkStats | None) -> int | None:
    # sysfs speed fails with EINVAL on links without a speed and reads -1 (SPEED_UNKNOWN)
    # or 0 on virtual ones; psutil's ethtool ioctl reads the same value, reported as 0.
    speed = read_int(net / "speed")
    if speed is None and stats is not None:
        speed = stats.speed
    return speed if speed and speed > 0 else None


def read_ib_ports(sysfs: str = "/sys") -> tuple[IbPort, ...]:
    """Each RDMA port as nic.ib compares them (read_rdma_ports has the rest)."""
    return tuple(IbPort(p.device, p.port, p.state, p.link_layer, p.rate, p.netdev) for p in read_rdma_ports(sysfs))


def read_rdma_ports(sysfs: str = "/sys") -> tuple[RdmaPort, ...]:
    """Every port of every RDMA device, in device-name order (ibv_get_device_list's, NCCL's walk)."""
    root = Path(sysfs, "class/infiniband")
    return tuple(port for name in dir_names(root) for port in _device_ports(sysfs, root / name))


def _device_ports(sysfs: str, dev: Path) -> list[RdmaPort]:
    ports = dev / "ports"
    numbers = sorted(int(n) for n in dir_names(ports) if n.isdigit() and int(n) > 0)
    netdevs = dir_names(dev / "device/net")
    return [_port(sysfs, dev.name, n, ports / str(n), _port_netdev(sysfs, netdevs, n)) for n in numbers]


def _port(sysfs: str, device: str, number: int, port: Path, netdev: str | None) -> RdmaPort:
    layer = read_text(port / "link_layer") or "unknown"
    rate = read_text(port / "rate")
    slots = dir_names(port / "gids")
    return RdmaPort(
        device=device, port=number, state=_port_state(read_text(port / "state")),
        phys_state=_port_state(read_text(port / "phys_state")), link_layer=layer, rate=rate or "unknown",
        rate_gbps=_rate_gbps(rate),
        active_mtu=roce_active_mtu(read_int(Path(sysfs, "class/net", netdev, "mtu")))
        if layer == "Ethernet" and netdev else None,
        netdev=netdev, gid_table_len=len(slots), gids=_gids(port, slots))


def _port_state(text: str | None) -> str:
    # The kernel writes "<number>: <NAME>", e.g. "4: ACTIVE", "5: LinkUp".
    return text.split(":", 1)[-1].strip() if text else "unknown"


def _rate_gbps(text: str | None) -> float | None:
    # "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)" (sysfs.c rate_show)
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


# include/rdma/ib_addr.h iboe_get_mtu: a RoCE port's active MTU is the largest IB MTU that
# fits its netdev's MTU less the headers (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4).
IBOE_HEADER_BYTES = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)


def roce_active_mtu(netdev_mtu: int | None) -> int | None:
    if netdev_mtu is None:
        return None
    room = netdev_mtu - IBOE_HEADER_BYTES
    return next((m for m in IB_MTUS if room >= m), None)


def _gids(port: Path, slots: list[str]) -> tuple[Gid, ...]:
    """The configured entries: an all-zero GID is an empty slot (and so is fe80:: alone,
    the default GID of a RoCE port with no address, which NCCL's configuredGid refuses too)."""
    found = []
    for slot in sorted((s for s in slots if s.isdigit()), key=int):
        gid = read_text(port / "gids" / slot)
        if gid and gid.strip("0:"):
            found.append(Gid(int(slot), gid, _gid_type(read_text(port / "gid_attrs/types" / slot)),
                             read_text(port / "gid_attrs/ndevs" / slot)))
    return tuple(found)


def _gid_type(text: str | None) -> str:
    return text if text in GID_TYPES else ""


def _port_netdev(sysfs: str, netdevs: list[str], port: int) -> str | None:
    """The netdev of an HCA port: the only one of its PCI device, else the one whose
    dev_port is port-1 (IPoIB and mlx4_en number a multi-port HCA's netdevs that way)."""
    if len(netdevs) == 1:
        return netdevs[0]
    hits = [n for n in netdevs if read_int(Path(sysfs, "class/net", n, "dev_port")) == port - 1]
    return hits[0] if len(hits) == 1 else None


def default_route_ifname(proc: str = "/proc") -> str | None:
    """The main table's default route (IPv4 preferred, else IPv6), lowest metric first.
    Policy routing rules are not in /proc/net: the interface toward each peer is what the
    mesh's connects were made from (their getsockname)."""
    return _ipv4_default(Path(proc, "net/route")) or _ipv6_default(Path(proc, "net/ipv6_route"))


def _ipv4_default(path: Path) -> str | None:
    # Iface Destination Gateway Flags RefCnt Use Metric Mask ... (hex fields)
    routes = [
        (int(f[6]), f[0])
        for f in _rows(path)[1:]
        if len(f) >= 8 and f[1] == "00000000" and f[7] == "00000000" and _usable(f[3])
    ]
    return min(routes)[1] if routes else None


def _ipv6_default(path: Path) -> str | None:
    # dest dest_plen src src_plen nexthop metric refcnt use flags ifname (hex fields)
    routes = [
        (int(f[5], 16), f[9])
        for f in _rows(path)
        if len(f) >= 10 and int(f[0], 16) == 0 and f[1] == "00" and _usable(f[8])
    ]
    return min(routes)[1] if routes else None


def _usable(flags_hex: str) -> bool:
    flags = int(flags_hex, 16)
    return bool(flags & RTF_UP) and not flags & RTF_REJECT


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except (OSError, UnicodeDecodeError):  # absent, or EINVAL (speed of a down link)
        return None


def read_int(path: Path, base: int = 10) -> int | None:
    text = read_text(path)
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def _rows(path: Path) -> list[list[str]]:
    text = read_text(path)
    return [line.split() for line in text.splitlines()] if text else []


def dir_names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []
