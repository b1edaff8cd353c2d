"""Read what NCCL's network transport will meet on this node, once, as plain records.

The RDMA ports come from facts.nics (/sys/class/infiniband); here, where the GPUs and HCAs
sit on PCIe (/sys/bus/pci: the bridges above each, their ACS control read from the config
space the kernel exposes, the IOMMU group's type), what GPUDirect RDMA needs (the
nvidia-peermem module, or dma-buf: the kernel and the driver flavour), and which libnccl the
loader would give torch. The sysfs and proc roots are parameters, so tests feed fixture trees.
On a CPU node it finds nothing, in about a millisecond. `scripts/gpu_check.sh` prints, on a
RoCE node:

    rdma: mlx5_0 port 1: ACTIVE LinkUp Ethernet 400 Gb/sec (4X NDR), active MTU 4096, netdev ens0np0,
      6 GID(s); NCCL's GID: index 3 0000:0000:0000:0000:0000:ffff:c612:0001 (RoCE v2, ipv4)
    gpu: 0000:23:00.0 NUMA 0, IOMMU identity, nearest HCA mlx5_0 (NUMA 0, 2 bridge(s) shared, ACS off)
    gpudirect: nvidia-peermem loaded; dma-buf possible; kernel 6.8.0-45-generic; driver NVRM ...
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path
from typing import Mapping

from netcheck.core.rdmarecords import ACS_NONE, ACS_OFF, ACS_ON, ACS_UNREAD, Bridge, LibNccl, PciPlace, RdmaFacts
from netcheck.facts.nics import dir_names, read_int, read_rdma_ports, read_text

# include/linux/pci_ids.h, include/uapi/linux/pci_regs.h
NVIDIA_VENDOR = 0x10DE
GPU_CLASSES = (0x0300, 0x0302)       # VGA controller, 3D controller (class >> 8)
PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x0D
PCI_ACS_CTRL = 0x06
# The ACS controls that send peer-to-peer requests up to the root complex instead of across
# the switch: request redirect, completion redirect, upstream forwarding, egress control.
PCI_ACS_REDIRECTS = 0x04 | 0x08 | 0x10 | 0x20
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}")
# libnccl.so.2.21.5 (a system package's real name); nvidia_nccl_cu12-2.21.5.dist-info (a wheel)
_SO_VERSION = re.compile(r"libnccl\.so\.([0-9]+\.[0-9]+\.[0-9]+)$")
_WHEEL_VERSION = re.compile(r"nvidia_nccl_cu[0-9]+-([0-9]+\.[0-9]+\.[0-9]+)[^/]*\.dist-info$")
LIBNCCL = "libnccl.so.2"             # the soname torch's libtorch_cuda.so needs


def read_rdma(sysfs: str = "/sys", proc: str = "/proc", env: Mapping[str, str] = os.environ) -> RdmaFacts:
    started = time.monotonic()
    ports = read_rdma_ports(sysfs)
    hcas = tuple(place for name in dict.fromkeys(p.device for p in ports)
                 if (place := _place(sysfs, name, Path(sysfs, "class/infiniband", name, "device"))))
    return RdmaFacts(ports=ports, hcas=hcas, gpus=read_gpus(sysfs), peermem=_peermem(sysfs),
                     driver=(read_text(Path(proc, "driver/nvidia/version")) or "").split("\n", 1)[0],
                     kernel=read_text(Path(proc, "sys/kernel/osrelease")) or os.uname().release,
                     libnccl=libnccl_choice(env, torch_libnccl()), seconds=time.monotonic() - started)


def read_gpus(sysfs: str) -> tuple[PciPlace, ...]:
    """NVIDIA display and 3D controllers on the PCI bus (NVSwitches and audio are other classes)."""
    devices = Path(sysfs, "bus/pci/devices")
    found = []
    for address in dir_names(devices):
        dev = devices / address
        if read_int(dev / "vendor", 16) == NVIDIA_VENDOR and (read_int(dev / "class", 16) or 0) >> 8 in GPU_CLASSES:
            found.append(_place(sysfs, address, dev))
    return tuple(p for p in found if p)


def _place(sysfs: str, name: str, device: Path) -> PciPlace | None:
    """A device's place from its resolved sysfs path: /sys/devices/pci0000:15/0000:15:01.0/
    0000:16:00.0/.../0000:1a:00.0 lists the host bridge, then every bridge down to it."""
    try:
        path = device.resolve(strict=True)
    except OSError:
        return None  # a virtual device (rxe, siw) has no PCI device behind it
    parts = path.parts
    root = next((i for i, p in enumerate(parts) if _HOST_BRIDGE.fullmatch(p)), None)
    if root is None or not _PCI_ADDRESS.fullmatch(parts[-1]):
        return None
    chain = parts[root + 1:-1]
    above = [Path(*parts[:root + 2 + i]) for i in range(len(chain))]
    numa = read_int(path / "numa_node")
    return PciPlace(name=name, address=parts[-1], numa_node=-1 if numa is None else max(numa, -1), root=parts[root],
                    bridges=tuple(Bridge(a, acs_state(p / "config")) for a, p in zip(chain, above)),
                    iommu=_iommu(path))


def acs_state(config: Path) -> str:
    """ACS redirect on a bridge, from its PCIe extended capabilities (pci_regs.h): a list from
    offset 0x100, each header holding the capability id (bits 0-15) and the next offset (20-31)."""
    try:
        space = config.read_bytes()
    except OSError:
        return ACS_UNREAD
    if len(space) <= PCI_EXT_CAP_START:
        return ACS_UNREAD
    offset, seen = PCI_EXT_CAP_START, set()
    while offset and offset + 8 <= len(space) and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(space[offset:offset + 4], "little")
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            control = int.from_bytes(space[offset + PCI_ACS_CTRL:offset + PCI_ACS_CTRL + 2], "little")
            return ACS_ON if control & PCI_ACS_REDIRECTS else ACS_OFF
        offset = (header >> 20) & 0xFFC
    return ACS_NONE


def _iommu(device: Path) -> str:
    # sysfs-kernel-iommu_groups: type is identity (passthrough), DMA or DMA-FQ (translated)...
    return read_text(device / "iommu_group/type") or ("none" if not (device / "iommu_group").exists() else "unknown")


def _peermem(sysfs: str) -> bool:
    return any(Path(sysfs, "module", m).is_dir() for m in PEERMEM_MODULES)


def torch_libnccl() -> str:
    """torch's own libnccl, found without importing torch: the nvidia-nccl wheel beside it
    (libtorch_cuda.so's RUNPATH $ORIGIN/../../nvidia/nccl/lib) or one in torch/lib."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return ""
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    for candidate in (torch_dir.parent / "nvidia/nccl/lib" / LIBNCCL, torch_dir / "lib" / LIBNCCL):
        if candidate.is_file():
            return str(candidate)
    return ""


def libnccl_choice(env: Mapping[str, str], torch_path: str) -> LibNccl:
    """The libnccl the loader gives libtorch_cuda.so (ld.so(8)): one LD_PRELOAD names first,
    then the LD_LIBRARY_PATH directories, which come before a DT_RUNPATH, then torch's own.
    The loader's cache and default paths come after torch's RUNPATH, so they never win here."""
    preload = [p for p in re.split(r"[:\s]+", env.get("LD_PRELOAD", "")) if "libnccl" in os.path.basename(p)]
    found = [("LD_PRELOAD", p) for p in preload if os.path.isfile(p)]
    found += [("LD_LIBRARY_PATH", str(Path(d, LIBNCCL))) for d in env.get("LD_LIBRARY_PATH", "").split(":")
              if d and Path(d, LIBNCCL).is_file()]
    if torch_path:
        found.append(("torch", torch_path))
    if not found:
        return LibNccl("none", "", "", "")
    source, path = found[0]
    return LibNccl(source, path, library_version(path), torch_path)


def library_version(path: str) -> str:
    """X.Y.Z from the library's real name, or from the wheel that installed it; "" if neither says."""
    real = os.path.realpath(path)
    hit = _SO_VERSION.search(os.path.basename(real))
    if hit:
        return hit.group(1)
    site = Path(real).parents[3] if len(Path(real).parents) > 3 else None   # site/nvidia/nccl/lib/x
    for name in dir_names(site) if site else ():
        wheel = _WHEEL_VERSION.fullmatch(name)
        if wheel:
            return wheel.group(1)
    return ""
