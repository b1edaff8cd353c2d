"""A node's interfaces as records: what facts.nics reads and every later layer compares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from netcheck.core.fields import (
    FEW,
    MAX_NICS,
    IfIndex,
    IfName,
    IpAddress,
    Items,
    LinkAddress,
    Mbps,
    Mtu,
    PrefixLen,
    Range,
    one_of,
)

FAMILIES = ("ipv4", "ipv6")


@dataclass(frozen=True)
class Address:
    family: Annotated[str, one_of(*FAMILIES)]
    address: IpAddress     # no scope suffix
    prefixlen: PrefixLen


@dataclass(frozen=True)
class IbPort:
    device: str            # e.g. mlx5_0
    port: Annotated[int, Range(0, 255, "an HCA port number")]   # 0: a switch's management port
    state: str             # e.g. "ACTIVE" (from "4: ACTIVE"); "unknown" when unreadable
    link_layer: str        # "InfiniBand" | "Ethernet"; "unknown" when unreadable
    rate: str              # raw rate text, e.g. "200 Gb/sec (4X HDR)"
    netdev: IfName | None  # the netdev behind it when known


@dataclass(frozen=True)
class Nic:
    name: IfName
    index: IfIndex         # ifindex; 0 when unreadable (the kernel never assigns 0)
    addresses: Annotated[tuple[Address, ...], FEW]  # IPv4 first, then IPv6, each in getifaddrs order
    up: bool               # IFF_UP
    running: bool          # IFF_RUNNING (NCCL skips interfaces that are not running)
    mtu: Mtu               # 0 when unreadable
    speed_mbps: Mbps | None  # None when unknown (virtual links report 0 / -1 / error)
    # loopback | bridge | veth | docker | virtual | infiniband | ethernet | unknown
    kind: str
    mac: LinkAddress | None


@dataclass(frozen=True)
class NicTable:
    nics: Annotated[tuple[Nic, ...], Items(MAX_NICS)]   # in getifaddrs order (the order NCCL walks them)
    ib_ports: Annotated[tuple[IbPort, ...], FEW]
    default_route_ifname: IfName | None


def address_owners(table: NicTable) -> dict[str, str]:
    """Every address of this node -> the interface holding it."""
    return {a.address: nic.name for nic in table.nics for a in nic.addresses}
