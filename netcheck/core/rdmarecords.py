"""A GPU node as NCCL's network transport sees it: RDMA ports with their GID tables, where the
GPUs and HCAs sit on PCIe, what GPUDirect RDMA needs, and the libnccl a job would load.

facts.rdma reads them from sysfs (Documentation/ABI/stable/sysfs-class-infiniband,
sysfs-bus-pci); rules.hcachoice and rules.rdma reason over them. Read, never proven by RDMA
traffic: these machines may have no RDMA device, and a preflight sends none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from netcheck.core.fields import FEW, MAX_GBPS, Check, IfName, Mtu, Range, Seconds, Text, one_of

# ports/N/gid_attrs/types/I as the kernel writes it (drivers/infiniband/core/sysfs.c
# print_gid_type: ib_cache_gid_type_str); "" where the file does not read (an empty slot).
ROCE_V1, ROCE_V2 = "IB/RoCE v1", "RoCE v2"
GID_TYPES = (ROCE_V1, ROCE_V2, "")
INFINIBAND, ETHERNET = "InfiniBand", "Ethernet"
# ACS redirect on a PCIe bridge: on, off, no ACS capability, or config space not readable
# (the kernel gives non-root readers the first 64 bytes only).
ACS_STATES = ACS_ON, ACS_OFF, ACS_NONE, ACS_UNREAD = ("on", "off", "none", "unread")
# Where the libnccl a job would load comes from (facts.rdma.libnccl_choice).
LIB_SOURCES = ("LD_PRELOAD", "LD_LIBRARY_PATH", "torch", "none")

_GID = re.compile(r"[0-9a-f]{4}(:[0-9a-f]{4}){7}")
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_VERSION = re.compile(r"([0-9]{1,4}\.){2}[0-9]{1,4}")
RDMA_DEVICE_MAX_BYTES = 64   # IB_DEVICE_NAME_MAX


def is_rdma_device(name: str) -> bool:
    return name.isprintable() and "/" not in name and 0 < len(name.encode()) <= RDMA_DEVICE_MAX_BYTES \
        and name not in (".", "..")


RdmaDevice = Annotated[str, Check(is_rdma_device, "an RDMA device name")]
GidText = Annotated[str, Check(lambda t: bool(_GID.fullmatch(t)), "a GID (8 groups of 4 hex digits)")]
PciAddress = Annotated[str, Check(lambda t: bool(_PCI_ADDRESS.fullmatch(t)), "a PCI address")]
Version = Annotated[str, Check(lambda t: t == "" or bool(_VERSION.fullmatch(t)), "a version (X.Y.Z) or empty")]


@dataclass(frozen=True)
class Gid:
    """One configured entry of a port's GID table (the all-zero slots are left out)."""

    index: Annotated[int, Range(0, 65535, "a GID index")]
    gid: GidText              # as sysfs writes it: fe80:0000:0000:0000:0e42:a1ff:fe00:0001
    type: Annotated[str, one_of(*GID_TYPES)]
    netdev: IfName | None     # gid_attrs/ndevs/I: the RoCE GID's interface


@dataclass(frozen=True)
class RdmaPort:
    device: RdmaDevice        # e.g. mlx5_0
    port: Annotated[int, Range(1, 255, "an HCA port number")]
    state: str                # ACTIVE, DOWN, INIT, ARMED...; "unknown" when unreadable
    phys_state: str           # LinkUp, Polling, Disabled...; "unknown" when unreadable
    link_layer: str           # InfiniBand | Ethernet | unknown
    rate: Text                # as the kernel writes it, e.g. "400 Gb/sec (4X NDR)"
    rate_gbps: Annotated[float, Range(0, MAX_GBPS, "a rate in Gb/s")] | None   # its number; None: unreadable
    active_mtu: Mtu | None    # RoCE: the largest IB MTU its netdev's MTU holds; IB: None (not in sysfs)
    netdev: IfName | None
    gid_table_len: Annotated[int, Range(0, 1 << 16, "a GID table length")]   # the slots NCCL walks
    gids: Annotated[tuple[Gid, ...], FEW]


@dataclass(frozen=True)
class Bridge:
    address: PciAddress
    acs: Annotated[str, one_of(*ACS_STATES)]


@dataclass(frozen=True)
class PciPlace:
    """Where a GPU or an HCA sits: its PCI address, NUMA node and the bridges above it."""

    name: RdmaDevice          # the HCA's device name; a GPU's PCI address
    address: PciAddress
    numa_node: Annotated[int, Range(-1, 4095, "a NUMA node or -1")]   # -1: the firmware says none
    root: Text                # the host bridge its path starts at, e.g. pci0000:15
    bridges: Annotated[tuple[Bridge, ...], FEW]   # root port first, its parent last
    iommu: str                # iommu_group/type: identity | DMA | DMA-FQ...; "none" without a group


@dataclass(frozen=True)
class LibNccl:
    """The libnccl the dynamic loader would give torch here, and torch's own copy."""

    source: Annotated[str, one_of(*LIB_SOURCES)]
    path: Text                # "" when none is found
    version: Version          # "" when the file does not say
    torch_path: Text          # torch's own (the nvidia-nccl wheel or torch/lib); "" when torch has none


@dataclass(frozen=True)
class RdmaFacts:
    ports: Annotated[tuple[RdmaPort, ...], FEW]
    hcas: Annotated[tuple[PciPlace, ...], FEW]
    gpus: Annotated[tuple[PciPlace, ...], FEW]
    peermem: bool             # nvidia_peermem (or the older nv_peer_mem) is loaded
    driver: Text              # /proc/driver/nvidia/version's first line; "" without the driver
    kernel: str               # the running kernel's release
    libnccl: LibNccl
    seconds: Seconds          # how long reading took
