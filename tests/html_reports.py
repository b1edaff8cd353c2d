"""A host's report of an n-node cluster, built as the phases would leave it, for the HTML tests
and benchmarks/html_report.py: nodes with their interfaces, a failure, a warning and a dozen
passing checks naming every node (each saying whom it stops, the failure narrowed to NCCL as
gloo dials out of the cut node), environment differences, settings to paste, and a bandwidth
result (a sweep across all ranks with its plateau and bucket, each rank's time, node pairs)
whose findings the bandwidth rules themselves make from it: one slow node's pairs (bw.pair)
and one slow rank (bw.straggler). A `healthy=True` cluster's bandwidth has neither: its pairs
are 1.41 and 1.44 GB/s, its ranks' times 165.0 to 165.4 ms (spreads below the text's precision).

    report = cluster_report(4096)      # what `benchmarks/scale.py --nodes 4096` measures, and more
"""

from __future__ import annotations

import ipaddress

from netcheck.core.bwrecords import BandwidthResult, Pair, RankTime, Row, Sweep, SweepOptions, headline
from netcheck.core.model import EnvRow, Finding, Impact, Launch, NodeEntry, NodeFacts, report_of
from netcheck.core.nictable import Address, Nic, NicTable
from netcheck.rules.bw import bandwidth_findings
from netcheck.rules.registry import NCCL, impacted

BASE = ipaddress.ip_address("198.18.16.0")
SIZES = tuple(8 << (2 * k) for k in range(13))            # 8 B to 128 MiB, by 4
PASSING = ("rdzv.listen", "rdzv.fqdn", "nic.route", "nic.nccl_default", "nic.gloo_default", "nic.mtu",
           "nic.speed", "host.shm", "launch.topology", "env.flight_recorder", "rdzv.resolve", "bw.wrong")
OPTIONS = SweepOptions(model_params=7_000_000_000)


def hostname(rank: int) -> str:
    return f"sim{rank:04d}"


def facts(rank: int, name: str, n: int) -> NodeFacts:
    address = str(BASE + rank)
    nics = (Nic("lo", 1, (Address("ipv4", "127.0.0.1", 8),), True, True, 65536, None, "loopback", None),
            Nic("eth0", 2, (Address("ipv4", address, 16),), True, True, 9000, 100000, "ethernet", None),
            Nic("docker0", 3, (Address("ipv4", "172.17.0.1", 16),), True, False, 1500, None, "docker", None))
    return NodeFacts(run_id="big", hostname=name, fqdn=f"{name}.cluster", hostname_addresses=(address,),
                     launch=Launch("flags", rank, n, n, 1), shm_bytes=64 << 30, gpus=0,
                     nics=NicTable(nics, (), "eth0"), socket_env={}, reach=None, version="0")


def sweep(n: int, slow_rank: int | None) -> Sweep:
    """busbw rising to a plateau of about 11 GB/s; rank `slow_rank` four times the others' time
    (with none, every rank within 0.4 ms of 165 ms)."""
    rows = tuple(Row(s, s // 4, "float32", "sum", 20 + s / 11e3, s / (20 + s / 11e3) / 1e3,
                     2 * (n - 1) / n * s / (20 + s / 11e3) / 1e3, 0) for s in SIZES)
    if slow_rank is None:
        times = tuple(RankTime(r, r, 165_000.0 + 100 * (r % 5)) for r in range(n))
    else:
        times = tuple(RankTime(r, r, 24000.0 * (4 if r == slow_rank else 1 + (r % 7) / 100)) for r in range(n))
    return Sweep("all", "all_reduce", n, 1, rows, rank_times=times)


def bandwidth(n: int, names: dict[int, str], slow_node: int | None, slow_rank: int | None) -> BandwidthResult:
    """Each node with its next two around the ring; the pairs of `slow_node` at a fifth (with
    none, every pair at 1.41 or 1.44 GB/s)."""
    ends = sorted({tuple(sorted((a, (a + k) % n))) for a in range(n) for k in (1, 2)})
    if slow_node is None:
        pairs = tuple(Pair(a, b, 64 << 20, 6000.0, 1.41 + 0.03 * ((a + b) % 2)) for a, b in ends)
    else:
        pairs = tuple(Pair(a, b, 64 << 20, 6000.0, 10.0 / (5 if slow_node in (a, b) else 1) + (a % 5) / 10)
                      for a, b in ends)
    s = sweep(n, slow_rank)
    return BandwidthResult("gloo", "no CUDA: using gloo", n, 1, (s,), pairs, None, "", (), 12.5,
                           {str(r): h for r, h in names.items()}, (headline(s, OPTIONS, 2, n),))


def cluster_report(n: int, names: dict[int, str] | None = None, healthy: bool = False):
    """The host's report of n nodes (n >= 3); `names`: hostnames by rank where they differ from
    simNNNN; `healthy`: no slow pair or rank in its bandwidth."""
    names = {r: hostname(r) for r in range(n)} | (names or {})
    everyone = tuple(range(n))
    mesh_cut, clock_off = (n - 1,), (n // 2,)
    bw = bandwidth(n, names, None, None) if healthy else bandwidth(n, names, n // 3, n - 2)
    findings = (
        Finding(check="mesh.connect", severity="fail", nodes=mesh_cut,
                summary=f"{names[n - 1]} cannot be reached from {n - 1} others",
                evidence=tuple(f"{names[r]} -> {names[n - 1]} eth0: filtered" for r in range(n - 1)),
                fix="open the ephemeral ports between the nodes in the firewall",
                impact=Impact(NCCL, "stops", f"gloo dials each pair from the larger address: {names[n - 1]}'s, "
                              "the largest, dials every peer, and those directions connect")),
        Finding(check="host.clock", severity="warn", nodes=clock_off,
                summary=f"{names[n // 2]}'s clock is 30.2 s off the host's",
                evidence=(f"{names[n // 2]}: +30.2 s (within 0.4 ms)",), fix="run chrony or ntpd on that node"),
        Finding(check="rdzv.join", severity="pass", nodes=everyone, summary=f"{n} of {n} nodes joined",
                evidence=tuple(f"joined: rank {r} {names[r]}" for r in everyone)),
        *(Finding(check=check, severity="pass", nodes=everyone,
                  summary=f"{check}: every node agrees") for check in PASSING),
        *bandwidth_findings(bw, {}, None),
    )
    faulty = tuple(dict.fromkeys(names[r] for f in findings if f.severity == "fail" for r in f.nodes))
    return report_of(
        "host", "big", 0, impacted(findings),
        {"local": 0.02, "reach": 0.4, "rendezvous": 9.1, "mesh": 3.2, "bandwidth": 14.0},
        nodes=tuple(NodeEntry(r, names[r], str(BASE + r), facts(r, names[r], n)) for r in everyone),
        recommend={"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"},
        env_table=(EnvRow("torch.version", "2.13.0+cpu", everyone[:-1], f"the other {n - 1}", "fail"),
                   EnvRow("torch.version", "2.12.1+cpu", mesh_cut, names[n - 1], "fail"),
                   EnvRow("env.NCCL_IB_DISABLE", "1", clock_off, names[n // 2], "warn")),
        bandwidth=bw, faulty_nodes=faulty, healthy_nodes=tuple(h for h in names.values() if h not in faulty))
