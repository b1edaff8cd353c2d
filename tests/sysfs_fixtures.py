"""sysfs and proc trees of GPU nodes, for facts.rdma and the RDMA rules (no RDMA device here).

Built from the kernel's documented ABI, not copied from a machine:
Documentation/ABI/stable/sysfs-class-infiniband (ports/N/state "4: ACTIVE", phys_state
"5: LinkUp", link_layer, rate "400 Gb/sec (4X NDR)", gids/I, gid_attrs/types/I "IB/RoCE v1" |
"RoCE v2", gid_attrs/ndevs/I), Documentation/ABI/testing/sysfs-bus-pci (vendor, device, class,
numa_node, config: the config space, the PCIe extended capabilities from 0x100),
sysfs-kernel-iommu_groups (iommu_group/type), and NVIDIA's documented HGX H100 layout: two
sockets, four PCIe switches each, one H100 and one ConnectX-7 NDR port under each switch, and
the storage ports on root ports of their own.

    python tests/sysfs_fixtures.py /tmp/fx hgx        # writes /tmp/fx/sys and /tmp/fx/proc
    python tests/sysfs_fixtures.py /tmp/fx roce no_ipv4

A fault (FAULTS) changes one thing of the layout, as the field meets it; another libnccl is
the environment's (fake_libnccl, named by LD_LIBRARY_PATH).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

NVIDIA, MELLANOX, BROADCOM = 0x10DE, 0x15B3, 0x1000
H100_SXM, CONNECTX7, PEX_SWITCH = 0x2330, 0x1021, 0xC030
CLASS_3D, CLASS_IB, CLASS_ETH, CLASS_BRIDGE = 0x030200, 0x020700, 0x020000, 0x060400
ACS_CAP_ID, ACS_REDIRECTS = 0x000D, 0x001D     # source validation, request and completion redirect, upstream fwd
IB_GID_TABLE, ROCE_GID_TABLE = 128, 255        # mlx5's gid_tbl_len for each link layer
DRIVER_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  "
               "(dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:30:47 UTC 2024")
DRIVER_PROPRIETARY = DRIVER_OPEN.replace("Open Kernel Module", "Kernel Module")
FAULTS = ("port_down", "slow_port", "no_peermem", "acs", "far_nic", "no_ipv4", "roce_mtu", "ethernet", "memlock_64k")


def build(root: Path, layout: str, node: int = 0, faults: tuple[str, ...] = ()) -> Path:
    """Write the node's sys/ and proc/ under root; return root (local.RDMA_ROOT_HOOK's value)."""
    unknown = set(faults) - set(FAULTS)
    assert not unknown, unknown
    tree = Tree(root, node, faults)
    {"hgx": tree.hgx, "roce": tree.roce, "cpu": tree.cpu}[layout]()
    return root


class Tree:
    def __init__(self, root: Path, node: int, faults: tuple[str, ...]):
        self.sys, self.proc, self.node, self.faults = root / "sys", root / "proc", node, set(faults)
        self.groups = 0

    # --- layouts ----------------------------------------------------------------------

    def cpu(self) -> None:
        write(self.proc / "sys/kernel/osrelease", "6.8.0-45-generic")
        # A GPU node's limits as NCCL's documentation asks (locked memory unlimited); the
        # descriptors are the process's own (facts.limits reads what this file leaves out).
        memlock = "65536 65536" if "memlock_64k" in self.faults else "unlimited unlimited"
        write(self.proc / "self/limits", f"Limit Soft Limit Hard Limit Units\nMax locked memory {memlock} bytes\n"
                                         "Max stack size 8388608 unlimited bytes\n")

    def hgx(self) -> None:
        """8 H100s, 8 compute NDR ports (mlx5_0-7, one under each GPU's switch), 2 storage ports."""
        self.cpu()
        write(self.proc / "driver/nvidia/version", DRIVER_PROPRIETARY)   # GPUDirect RDMA through nvidia-peermem
        if "no_peermem" not in self.faults:
            (self.sys / "module/nvidia_peermem").mkdir(parents=True)
        for i in range(8):
            bus = 0x10 + 0x10 * i
            numa = i // 4
            switch = self.switch(bus, numa, acs="acs" in self.faults and i == 0)
            self.pci(switch / f"0000:{bus + 3:02x}:00.0", NVIDIA, H100_SXM, CLASS_3D, numa)
            nic_numa = numa
            nic_parent = switch.parent / f"0000:{bus + 2:02x}:01.0"
            if "far_nic" in self.faults and i == 7:   # mlx5_7 cabled into the other socket's root port
                nic_parent, nic_numa = self.root_port(0xA0, 0), 0
            else:
                self.bridge(nic_parent, numa, acs=False)
            self.hca(nic_parent / f"0000:{bus + 4:02x}:00.0", f"mlx5_{i}", nic_numa, i)
        for j, numa in enumerate((0, 1)):
            self.hca(self.root_port(0xC0 + 0x10 * j, numa) / f"0000:{0xC1 + 0x10 * j:02x}:00.0", f"mlx5_{8 + j}",
                     numa, 8 + j)

    def roce(self) -> None:
        """2 GPUs, 2 RoCE v2 ports (ConnectX-7 in Ethernet mode), netdev MTU 9000."""
        self.cpu()
        write(self.proc / "driver/nvidia/version", DRIVER_OPEN)
        (self.sys / "module/nvidia_peermem").mkdir(parents=True)
        for i in range(2):
            bus = 0x20 + 0x20 * i
            switch = self.switch(bus, i, acs=False)
            self.pci(switch / f"0000:{bus + 3:02x}:00.0", NVIDIA, H100_SXM, CLASS_3D, i)
            self.bridge(switch.parent / f"0000:{bus + 2:02x}:01.0", i, acs=False)
            self.hca(switch.parent / f"0000:{bus + 2:02x}:01.0" / f"0000:{bus + 4:02x}:00.0", f"mlx5_{i}", i, i,
                     ethernet=True)

    # --- PCI ---------------------------------------------------------------------------

    def root_port(self, bus: int, numa: int) -> Path:
        port = self.sys / f"devices/pci0000:{bus:02x}" / f"0000:{bus:02x}:01.0"
        self.bridge(port, numa, acs=False)
        return port

    def switch(self, bus: int, numa: int, acs: bool) -> Path:
        """A root port, a PEX switch's upstream port and the downstream port a GPU hangs off;
        returns that downstream port (its sibling holds the NIC)."""
        upstream = self.root_port(bus, numa) / f"0000:{bus + 1:02x}:00.0"
        self.bridge(upstream, numa, acs=False)
        downstream = upstream / f"0000:{bus + 2:02x}:00.0"
        self.bridge(downstream, numa, acs=acs)
        return downstream

    def bridge(self, path: Path, numa: int, acs: bool) -> None:
        self.pci(path, BROADCOM, PEX_SWITCH, CLASS_BRIDGE, numa, acs_control=ACS_REDIRECTS if acs else 0)

    def pci(self, path: Path, vendor: int, device: int, klass: int, numa: int, acs_control: int | None = None):
        for name, value in {"vendor": f"0x{vendor:04x}", "device": f"0x{device:04x}", "class": f"0x{klass:06x}",
                            "numa_node": str(numa)}.items():
            write(path / name, value)
        (path / "config").write_bytes(config_space(vendor, device, klass, acs_control))
        self.groups += 1
        group = self.sys / "kernel/iommu_groups" / str(self.groups)
        write(group / "type", "identity")
        link(path / "iommu_group", group)
        link(self.sys / "bus/pci/devices" / path.name, path)

    # --- RDMA ----------------------------------------------------------------------------

    def hca(self, path: Path, name: str, numa: int, index: int, ethernet: bool = False) -> None:
        ethernet = ethernet or "ethernet" in self.faults
        self.pci(path, MELLANOX, CONNECTX7, CLASS_ETH if ethernet else CLASS_IB, numa)
        dev = path / "infiniband" / name
        netdev = f"ens{index}np0" if ethernet else f"ibp{index}s0"
        write(path / "net" / netdev / "mtu", "1500" if "roce_mtu" in self.faults else "9000" if ethernet else "4092")
        write(path / "net" / netdev / "dev_port", "0")
        link(self.sys / "class/net" / netdev, path / "net" / netdev)
        link(dev / "device", path)
        link(self.sys / "class/infiniband" / name, dev)
        port = dev / "ports/1"
        down = "port_down" in self.faults and index == 3
        slow = "slow_port" in self.faults and index == 2
        for rel, text in {"state": "1: DOWN" if down else "4: ACTIVE",
                          "phys_state": "3: Disabled" if down else "5: LinkUp",
                          "link_layer": "Ethernet" if ethernet else "InfiniBand",
                          "rate": "200 Gb/sec (4X HDR)" if slow else "400 Gb/sec (4X NDR)"}.items():
            write(port / rel, text)
        gids = self.roce_gids(index, netdev) if ethernet else {0: (self.guid_gid(index), "IB/RoCE v1", None)}
        for slot in range(ROCE_GID_TABLE if ethernet else IB_GID_TABLE):
            gid, kind, ndev = gids.get(slot, ("0000:" * 7 + "0000", None, None))
            write(port / "gids" / str(slot), gid)
            if kind:   # an empty slot's type and ndev read EINVAL: absent here
                write(port / "gid_attrs/types" / str(slot), kind)
                write(port / "gid_attrs/ndevs" / str(slot), ndev or "")

    def guid_gid(self, index: int) -> str:
        return f"fe80:0000:0000:0000:a088:c203:00{self.node:02x}:{index:04x}"

    def roce_gids(self, index: int, netdev: str) -> dict[int, tuple[str, str, str]]:
        """mlx5's order: the link-local GID (v1, v2), then each IPv4 address mapped (v1, v2), then
        each global IPv6 address (v1, v2)."""
        local = f"fe80:0000:0000:0000:0e42:a1ff:fe{self.node:02x}:{index:04x}"
        v4 = f"0000:0000:0000:0000:0000:ffff:c612:{self.node:02x}{index + 1:02x}"     # 198.18.n.i+1
        v6 = f"2001:0002:0000:0000:0000:0000:00{self.node:02x}:{index + 1:04x}"
        entries = [local] + ([] if "no_ipv4" in self.faults else [v4]) + [v6]
        return {2 * k + v: (gid, ("IB/RoCE v1", "RoCE v2")[v], netdev) for k, gid in enumerate(entries) for v in (0, 1)}


def config_space(vendor: int, device: int, klass: int, acs_control: int | None) -> bytes:
    """4 KiB of PCIe config space: the header's ids and class, and an ACS extended capability
    at 0x100 (the list's only entry, next offset 0) where acs_control is given."""
    space = bytearray(4096)
    space[0:4] = (vendor | device << 16).to_bytes(4, "little")
    space[8:12] = (klass << 8).to_bytes(4, "little")
    if acs_control is not None:
        space[0x100:0x104] = (ACS_CAP_ID | 1 << 16).to_bytes(4, "little")
        space[0x104:0x106] = (0x005F).to_bytes(2, "little")     # ACS capabilities: SV TB RR CR UF DT
        space[0x106:0x108] = acs_control.to_bytes(2, "little")
    return bytes(space)


def fake_libnccl(folder: Path, version: str) -> Path:
    """A folder an LD_LIBRARY_PATH may name, holding libnccl.so.2 -> libnccl.so.X.Y.Z, as a
    system package installs it (the file is empty: nothing loads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"libnccl.so.{version}").write_bytes(b"")
    (folder / "libnccl.so.2").symlink_to(f"libnccl.so.{version}")
    return folder


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def link(path: Path, target: Path) -> None:
    """A relative symlink, as sysfs makes them (the tree can move)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    path.symlink_to(os.path.relpath(target, path.parent))


if __name__ == "__main__":
    build(Path(sys.argv[1]), sys.argv[2], 0, tuple(sys.argv[3:]))
