"""The RDMA path across nodes: ports, GIDs, MTUs, GPUDirect RDMA, GPU-NIC placement, libnccl.

Every rule reads each node's RdmaFacts (facts.rdma) and what NCCL would pick under that node's
NCCL_* settings (rules.hcachoice). Reasoned from what the nodes read: no RDMA traffic. On nodes
without an RDMA device, one line says so:

    PASS rdma.port  no RDMA device on any node: NCCL will use its socket transport
    FAIL rdma.gid   node1: mlx5_0 port 1: NCCL would use GID index 0, fe80::...:0001 (link-local, RoCE v1)
"""

from __future__ import annotations

from netcheck.core.model import FAIL, PASS, WARN, Finding, Member, hostnames
from netcheck.core.rdmarecords import ACS_ON, ETHERNET, ROCE_V2, Bridge, PciPlace, RdmaFacts, RdmaPort
from netcheck.rules.hcachoice import GidPick, gid_choice, gid_family, ib_ports, nccl_version, valid_gid
from netcheck.rules.majority import split
from netcheck.rules.nic import Recommendation
from netcheck.rules.pernode import every_node, node_names, per_node
from netcheck.rules.registry import (
    GID_BAD,
    GID_DIFFERS,
    GID_FAMILY,
    LIB_NOT_TORCHS,
    LIB_VERSIONS,
    PCIE_ACS,
    PCIE_FAR,
    PORT_LINK_LAYER,
    PORT_SLOWER,
    RDMA_GID,
    RDMA_GPUDIRECT,
    RDMA_LIBNCCL,
    RDMA_MTU,
    RDMA_PCIE,
    RDMA_PORT,
)

# dma-buf GPUDirect RDMA: the kernel's dma-buf importer for RDMA (5.12) and NVIDIA's open
# kernel modules from 515 (NCCL checks CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, which says so).
DMABUF_KERNEL = (5, 12)
DMABUF_DRIVER = 515
OPEN_MODULE = "Open Kernel Module"
FAMILY_ENV = {"ipv4": "AF_INET", "ipv6": "AF_INET6"}


def rdma_findings(members: tuple[Member, ...]) -> list[Finding]:
    """Every RDMA check over the members that read their RDMA facts."""
    return (port_findings(members) + gid_findings(members) + mtu_findings(members)
            + gpudirect_findings(members) + pcie_findings(members) + libnccl_findings(members))


def _read(members: tuple[Member, ...]) -> dict[int, RdmaFacts]:
    return {m.rank: m.facts.rdma for m in members if m.facts.rdma is not None}


def used_ports(m: Member) -> tuple[RdmaPort, ...]:
    """The ports NCCL would use on this member, under its own NCCL_IB_HCA."""
    return ib_ports(m.facts.rdma.ports, m.facts.socket_env) if m.facts.rdma else ()


def fabric_gbps(m: Member) -> float | None:
    """The rate NCCL's RDMA ports give this node together (Gb/s); None without one."""
    rates = [p.rate_gbps for p in used_ports(m) if p.rate_gbps]
    return sum(rates) if rates else None


# --- rdma.port ----------------------------------------------------------------------------

def port_findings(members: tuple[Member, ...]) -> list[Finding]:
    names, read = hostnames(members), _read(members)
    if not read:
        return []
    used = {m.rank: used_ports(m) for m in members if m.rank in read}
    if not any(f.ports for f in read.values()):
        where = every_node(read, names).replace("every node", "any node")
        return [Finding(check=RDMA_PORT, severity=PASS, nodes=tuple(sorted(read)),
                        summary=f"no RDMA device on {where}: "
                        "NCCL will use its socket transport")]
    findings = _link_layer_findings(used, names) + _slower_findings(used, names)
    if findings:
        return findings
    count = {len(p) for p in used.values()}
    return [Finding(check=RDMA_PORT, severity=PASS, nodes=tuple(sorted(used)),
                    summary=f"NCCL would use {'/'.join(map(str, sorted(count)))} "
                    f"active RDMA port(s) on {every_node(used, names)}, alike in link layer and rate",
                    evidence=per_node(((r, _ports_text(p)) for r, p in sorted(used.items())), names))]


def _link_layer_findings(used: dict[int, tuple[RdmaPort, ...]], names: dict[int, str]) -> list[Finding]:
    layers = {r: "+".join(sorted({p.link_layer for p in ports})) or "none" for r, ports in used.items()}
    odd = split(layers).odd
    if not odd and all("+" not in v for v in layers.values()):
        return []
    odd = odd or tuple(r for r, v in layers.items() if "+" in v)
    return [Finding(check=RDMA_PORT, severity=FAIL, nodes=odd,
                    summary=f"the RDMA ports NCCL would use differ in link layer: "
                    f"{node_names(odd, names)} unlike the rest (InfiniBand and RoCE do not talk to each other)",
                    evidence=per_node(((r, f"{layers[r]}: {_ports_text(used[r])}") for r in sorted(used)), names),
                    fix="give every node ports of one link layer, or pick them with NCCL_IB_HCA (the recommendation)",
                    kind=PORT_LINK_LAYER)]


def _slower_findings(used: dict[int, tuple[RdmaPort, ...]], names: dict[int, str]) -> list[Finding]:
    best: dict[tuple[str, int], float] = {}
    for ports in used.values():
        for p in ports:
            best[(p.device, p.port)] = max(best.get((p.device, p.port), 0.0), p.rate_gbps or 0.0)
    slow = [(r, p) for r, ports in used.items() for p in ports if (p.rate_gbps or 0.0) < best[(p.device, p.port)]]
    if not slow:
        return []
    return [Finding(check=RDMA_PORT, severity=WARN, nodes=tuple(sorted({r for r, _ in slow})),
                    summary=f"{len(slow)} RDMA port(s) run slower than the same port on their peers: a degraded rail "
                    "(NCCL runs at its pace, without an error)",
                    evidence=per_node(((r, f"{p.device} port {p.port}: {p.rate} beside "
                                          f"{best[(p.device, p.port)]:g} Gb/s") for r, p in slow), names),
                    fix="reseat or replace the cable or transceiver, check the switch port (ibstat, mlxlink), or "
                    "leave the port out with NCCL_IB_HCA on every node", kind=PORT_SLOWER)]


def _ports_text(ports: tuple[RdmaPort, ...]) -> str:
    return ", ".join(f"{p.device}:{p.port} {p.link_layer} {p.rate_gbps or 0:g} Gb/s" for p in ports) or "none"


# --- rdma.gid -----------------------------------------------------------------------------

def gid_picks(members: tuple[Member, ...]) -> dict[int, list[tuple[RdmaPort, GidPick]]]:
    """Each member's RoCE ports in use with the GID NCCL would pick on each."""
    return {m.rank: [(p, gid_choice(p, m.facts.socket_env, nccl_version(m.facts.rdma.libnccl.version)))
                     for p in used_ports(m) if p.link_layer == ETHERNET]
            for m in members if m.facts.rdma}


def gid_findings(members: tuple[Member, ...]) -> list[Finding]:
    names, picks = hostnames(members), {r: v for r, v in gid_picks(members).items() if v}
    if not picks:
        return []
    fix = _gid_fix(members)
    bad = [(r, p, g) for r, pairs in picks.items() for p, g in pairs if g.problem]
    if bad:
        return [Finding(check=RDMA_GID, severity=FAIL, nodes=tuple(sorted({r for r, _, _ in bad})),
                        summary=f"NCCL would use a GID no peer can reach on {len(bad)} RoCE port(s): RoCE v1, "
                        "link-local or empty (the job times out in connect)",
                        evidence=per_node(((r, _gid_text(p, g)) for r, p, g in bad), names), fix=fix, kind=GID_BAD)]
    families = {r: "/".join(sorted({g.family for _, g in pairs})) for r, pairs in picks.items()}
    odd = split(families).odd
    if odd:
        return [Finding(check=RDMA_GID, severity=FAIL, nodes=odd,
                        summary=f"NCCL would use GIDs of another address family on "
                        f"{node_names(odd, names)} than on its peers", evidence=per_node(
                            ((r, _gid_text(p, g)) for r, pairs in sorted(picks.items()) for p, g in pairs), names),
                        fix=fix, kind=GID_FAMILY)]
    indexes = {r: tuple(g.index for _, g in pairs) for r, pairs in picks.items()}
    odd = split(indexes).odd
    evidence = per_node(((r, _gid_text(p, g)) for r, pairs in sorted(picks.items()) for p, g in pairs), names)
    if odd:
        return [Finding(check=RDMA_GID, severity=WARN, nodes=odd,
                        summary=f"NCCL would pick another GID index on {node_names(odd, names)} than "
                        "on its peers: each is a RoCE v2 GID, but the tables differ", evidence=evidence, fix=fix,
                        kind=GID_DIFFERS)]
    return [Finding(check=RDMA_GID, severity=PASS, nodes=tuple(sorted(picks)),
                    summary=f"NCCL would use RoCE v2 GIDs of one family, at "
                    f"one index, on {every_node(picks, names)}", evidence=evidence)]


def _gid_text(port: RdmaPort, g: GidPick) -> str:
    what = ", ".join(x for x in (g.problem.replace("_", "-"), g.type or "no type", g.family) if x)
    return f"{port.device} port {port.port}: GID index {g.index} {g.gid or '(empty)'} ({what}), by {g.rule}"


def _gid_fix(members: tuple[Member, ...]) -> str:
    cluster, per_node_values = gid_index_values(members)
    if cluster is not None:
        return f"export NCCL_IB_GID_INDEX={cluster} on every node (a RoCE v2 GID of that family on each port)"
    if per_node_values:
        return "set NCCL_IB_GID_INDEX per node: " + ", ".join(f"{h}={i}" for h, i in per_node_values.items())
    return "give each RoCE port's netdev an IP address of the family NCCL uses (NCCL_IB_ADDR_FAMILY), so a " \
           "RoCE v2 GID exists, then set NCCL_IB_GID_INDEX to it"


def gid_index_values(members: tuple[Member, ...]) -> tuple[int | None, dict[str, int]]:
    """An NCCL_IB_GID_INDEX that holds a valid RoCE v2 GID of the wanted family on every RoCE port
    in use: one for the cluster where one exists, else one per node (hostname -> index)."""
    good = {}
    for m in members:
        ports = [p for p in used_ports(m) if p.link_layer == ETHERNET]
        if ports:
            family = "ipv6" if m.facts.socket_env.get("NCCL_IB_ADDR_FAMILY") == FAMILY_ENV["ipv6"] else "ipv4"
            good[m.facts.hostname] = set.intersection(*(_good_indexes(p, family) for p in ports))
    common = set.intersection(*good.values()) if good else set()
    if common:
        return min(common), {}
    return None, {h: min(v) for h, v in good.items() if v}


def _good_indexes(port: RdmaPort, family: str) -> set[int]:
    return {g.index for g in port.gids if g.type == ROCE_V2 and valid_gid(g.gid) and gid_family(g.gid) == family}


# --- rdma.mtu -----------------------------------------------------------------------------

def mtu_findings(members: tuple[Member, ...]) -> list[Finding]:
    names = hostnames(members)
    mtus = {m.rank: min(found) for m in members
            if (found := [p.active_mtu for p in used_ports(m) if p.active_mtu])}
    if not mtus:
        return []
    evidence = per_node(((m.rank, ", ".join(f"{p.device}:{p.port} {p.active_mtu} (netdev {p.netdev})"
                                            for p in used_ports(m) if p.active_mtu)) for m in members
                         if m.rank in mtus), names)
    top = max(mtus.values())
    low = tuple(sorted(r for r, v in mtus.items() if v < top))
    if not low:
        return [Finding(check=RDMA_MTU, severity=PASS, nodes=tuple(sorted(mtus)),
                        summary=f"RoCE active MTU {top} on {every_node(mtus, names)}", evidence=evidence)]
    return [Finding(check=RDMA_MTU, severity=WARN, nodes=low,
                    summary=f"the RoCE active MTU is lower on {node_names(low, names)} than on its "
                    f"peers ({top}): NCCL takes the smaller of the two ends, and where a switch holds less, "
                    "large messages are lost (IBV_WC_LOC_LEN_ERR, a hang)", evidence=evidence,
                    fix="set one MTU on every RoCE netdev and switch port (9000 gives the IB MTU 4096)")]


# --- rdma.gpudirect -----------------------------------------------------------------------

def gpudirect_findings(members: tuple[Member, ...]) -> list[Finding]:
    names = hostnames(members)
    both = {m.rank: m.facts.rdma for m in members if m.facts.rdma and m.facts.rdma.gpus and used_ports(m)}
    if not both:
        return []
    without = tuple(sorted(r for r, f in both.items() if not f.peermem and not dmabuf_capable(f)))
    evidence = per_node(((r, _gdr_text(f)) for r, f in sorted(both.items())), names)
    if not without:
        return [Finding(check=RDMA_GPUDIRECT, severity=PASS, nodes=tuple(sorted(both)),
                        summary="GPUDirect RDMA available on "
                        f"{every_node(both, names)}", evidence=evidence)]
    return [Finding(check=RDMA_GPUDIRECT, severity=WARN, nodes=without,
                    summary=f"GPUDirect RDMA unavailable on {node_names(without, names)}: "
                    "NCCL stages every transfer through host memory (a fraction of the fabric's rate)",
                    evidence=evidence,
                    fix="load nvidia-peermem (modprobe nvidia-peermem), or use NVIDIA's open kernel modules (515+) "
                    "on a kernel of 5.12+ for dma-buf")]


def dmabuf_capable(f: RdmaFacts) -> bool:
    return OPEN_MODULE in f.driver and _driver_major(f.driver) >= DMABUF_DRIVER \
        and _release(f.kernel) >= DMABUF_KERNEL


def _gdr_text(f: RdmaFacts) -> str:
    peermem = "nvidia-peermem loaded" if f.peermem else "nvidia-peermem not loaded"
    dmabuf = "dma-buf possible" if dmabuf_capable(f) else \
        "no dma-buf (needs the open kernel modules 515+, kernel 5.12+)"
    return f"{peermem}; {dmabuf}; kernel {f.kernel}"


def _driver_major(driver: str) -> int:
    # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build ..."
    numbers = [w for w in driver.split() if w.count(".") >= 1 and w.split(".")[0].isdigit()]
    return int(numbers[0].split(".")[0]) if numbers else 0


def _release(kernel: str) -> tuple[int, ...]:
    parts = kernel.split("-")[0].split(".")[:2]
    return tuple(int(p) for p in parts if p.isdigit())


# --- rdma.pcie ----------------------------------------------------------------------------

def pcie_findings(members: tuple[Member, ...]) -> list[Finding]:
    names = hostnames(members)
    acs: list[tuple[int, str]] = []
    far: list[tuple[int, str]] = []
    checked: list[int] = []
    for m in members:
        f = m.facts.rdma
        hcas = [h for h in f.hcas if h.name in {p.device for p in used_ports(m)}] if f else []
        for gpu in f.gpus if f and hcas else ():
            hca, shared = nearest_hca(gpu, hcas)
            checked.append(m.rank)
            if gpu.numa_node != hca.numa_node or not shared:
                far.append((m.rank, f"GPU {gpu.address} (NUMA {gpu.numa_node}): nearest HCA {hca.name} "
                                    f"(NUMA {hca.numa_node}) shares {'no PCIe switch' if not shared else 'a switch'}"
                                    f"{' and is on another NUMA node' if gpu.numa_node != hca.numa_node else ''}"))
            on = [b.address for b in _between(gpu, hca, shared) if b.acs == ACS_ON]
            if on:
                acs.append((m.rank, f"GPU {gpu.address} -> {hca.name}: ACS redirect on at {', '.join(on)}"))
    return _pcie(acs, far, checked, names)


def _pcie(acs: list[tuple[int, str]], far: list[tuple[int, str]], checked: list[int],
          names: dict[int, str]) -> list[Finding]:
    warnings = (
        (PCIE_ACS, acs, "PCIe ACS redirects GPU-NIC traffic through the root complex (slow, or hangs)",
         "disable ACS on those bridges (the BIOS, or setpci ECAP_ACS+0x6.w=0000 at boot) on bare metal; in a VM "
         "keep it and use ATS"),
        (PCIE_FAR, far, "a GPU's nearest RDMA NIC is behind the root complex or on another NUMA node",
         "put a NIC under each GPU's PCIe switch (the system's reference layout), or accept the lower GPUDirect "
         "rate; NCCL_NET_GDR_LEVEL decides whether NCCL uses it"))
    findings = [Finding(check=RDMA_PCIE, severity=WARN, nodes=tuple(sorted({r for r, _ in lines})),
                        summary=f"{what} on {node_names([r for r, _ in lines], names)}",
                        evidence=per_node(lines, names), fix=fix, kind=kind)
                for kind, lines, what, fix in warnings if lines]
    if not findings and checked:
        findings.append(Finding(check=RDMA_PCIE, severity=PASS, nodes=tuple(sorted(set(checked))),
                                summary="every GPU shares a PCIe switch with "
                                f"an RDMA NIC on its NUMA node, ACS redirect off, on {every_node(checked, names)}"))
    return findings


def nearest_hca(gpu: PciPlace, hcas: list[PciPlace]) -> tuple[PciPlace, int]:
    """The HCA sharing most bridges with the GPU (NCCL's topology: PIX/PXB before PHB/SYS), and how many."""
    shared = {h.name: _shared(gpu, h) for h in hcas}
    best = max(hcas, key=lambda h: (shared[h.name], h.numa_node == gpu.numa_node))
    return best, shared[best.name]


def _shared(a: PciPlace, b: PciPlace) -> int:
    if a.root != b.root:
        return 0
    count = 0
    for x, y in zip(a.bridges, b.bridges):
        if x.address != y.address:
            break
        count += 1
    return count


def _between(gpu: PciPlace, hca: PciPlace, shared: int) -> tuple[Bridge, ...]:
    """The bridges below the last one they share: the switch's downstream ports (and deeper)."""
    return gpu.bridges[shared:] + hca.bridges[shared:] if shared else ()


# --- rdma.libnccl -------------------------------------------------------------------------

def libnccl_findings(members: tuple[Member, ...]) -> list[Finding]:
    names = hostnames(members)
    libs = {m.rank: m.facts.rdma.libnccl for m in members
            if m.facts.rdma and m.facts.rdma.gpus and m.facts.rdma.libnccl.path}   # NCCL runs where GPUs are
    if not libs:
        return []
    evidence = per_node(((r, f"{lib.path} ({lib.version or 'version unknown'}, from {lib.source})")
                         for r, lib in sorted(libs.items())), names)
    findings = []
    versions = {r: lib.version for r, lib in libs.items() if lib.version}
    odd = split(versions).odd
    if odd:
        findings.append(Finding(check=RDMA_LIBNCCL, severity=FAIL, nodes=odd,
                                summary=f"a job would load another NCCL version on "
                                f"{node_names(odd, names)} than on its peers ('Mismatched NCCL version', hangs)",
                                evidence=evidence,
                                fix="install one NCCL everywhere: unset the LD_PRELOAD / LD_LIBRARY_PATH that "
                                "names another libnccl, or pin nvidia-nccl-cu* to one version", kind=LIB_VERSIONS))
    other = tuple(sorted(r for r, lib in libs.items() if lib.source != "torch" and lib.path != lib.torch_path))
    if other:
        findings.append(Finding(check=RDMA_LIBNCCL, severity=WARN, nodes=other,
                                summary=f"a job would load a libnccl other than torch's own on "
                                f"{node_names(other, names)}", evidence=evidence,
                                fix="unset it (torch was built and tested with its own), or set it the same on every "
                                "node on purpose", kind=LIB_NOT_TORCHS))
    return findings or [Finding(check=RDMA_LIBNCCL, severity=PASS, nodes=tuple(sorted(libs)),
                                summary=f"torch's own libnccl"
                                f"{' ' + next(iter(versions.values())) if versions else ''} on "
                                f"{every_node(libs, names)}", evidence=evidence)]


# --- the recommendation -------------------------------------------------------------------

def ib_recommendation(members: tuple[Member, ...], rec: Recommendation | None) -> Recommendation:
    """rec grown by NCCL_IB_HCA (the ports active on every node; with GPUs, those nearest a GPU:
    the rails, not the storage ports) and NCCL_IB_GID_INDEX where NCCL's own choice would go
    wrong or differ between nodes."""
    rec = rec or Recommendation({}, {}, "")
    cluster, per_node_values = dict(rec.cluster), {h: dict(v) for h, v in rec.per_node.items()}
    hca = ib_hca_value(members)
    if hca:
        cluster["NCCL_IB_HCA"] = hca
    if any(f.check == RDMA_GID and f.severity != PASS for f in gid_findings(members)):
        index, by_host = gid_index_values(members)
        if index is not None:
            cluster["NCCL_IB_GID_INDEX"] = str(index)
        for host, value in by_host.items():
            per_node_values.setdefault(host, {})["NCCL_IB_GID_INDEX"] = str(value)
    return Recommendation(cluster, per_node_values, rec.reason)


def ib_hca_value(members: tuple[Member, ...]) -> str | None:
    """`=mlx5_0:1,mlx5_1:1`: exact names and ports, the same set on every node that has RDMA, of one
    link layer."""
    sets = [_rails(m.facts.rdma) for m in members if m.facts.rdma and m.facts.rdma.ports]
    common = set.intersection(*sets) if sets else set()
    if not common:
        return None
    # init.cc: merging ports of two link layers fails ("Try selecting NICs of only one link type
    # using NCCL_IB_HCA"): the layer most of them have
    layer = {(p.device, p.port): p.link_layer for m in members if m.facts.rdma for p in m.facts.rdma.ports}
    layers = [layer[k] for k in sorted(common)]
    common = {k for k in common if layer[k] == max(set(layers), key=layers.count)}
    return "=" + ",".join(f"{d}:{p}" for d, p in sorted(common, key=lambda k: (_natural(k[0]), k[1])))


def _rails(f: RdmaFacts) -> set[tuple[str, int]]:
    active = ib_ports(f.ports, {})
    if f.gpus and f.hcas:
        hcas = [h for h in f.hcas if h.name in {p.device for p in active}]
        near = {nearest_hca(g, hcas)[0].name for g in f.gpus} if hcas else set()
        active = tuple(p for p in active if p.device in near)
    return {(p.device, p.port) for p in active}


def _natural(name: str) -> tuple[str, int]:
    head = name.rstrip("0123456789")
    return head, int(name[len(head):] or -1)
