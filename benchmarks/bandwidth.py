"""The bandwidth phase against a plain all_reduce loop, a tbf-shaped link and iperf3.

Three measurements, each on a fresh namespace cluster (gloo on CPU, one rank per node):
  1. 2 nodes, unshaped: netcheck's busbw at 16, 32 and 64 MiB (all_reduce, -w 5 -n 20)
     against a minimal torch.distributed loop with the same sizes, iterations and
     averaging across ranks, run one after the other, --repeats times each.
  2. 2 nodes, node1's link shaped with tc tbf (both ways): netcheck's large-message busbw
     against the shaped rate, and iperf3's TCP throughput over the same link.
  3. 3 nodes, netcheck's default options (-b 8 -e 128M -f 2 -w 5 -n 20, --bw-budget 10):
     the phase's wall time, and how far the sweep got.

Until the CLI runs the phase, netcheck runs through the test driver
(tests/test_bandwidth_cluster.py), which serves the store on node0 and calls
run_bandwidth on each node.

Reproduce (root; needs ip netns, tc, iperf3; about 6 minutes):
    cd /work/main && .venv/bin/python benchmarks/bandwidth.py

Sample output (2 vCPU AMD EPYC, torch 2.13.0+cpu; see benchmarks/RESULTS.md):
    1. 64 MiB: best of 20: netcheck 1.208 GB/s, reference 1.205 GB/s, ratio 1.002
    1. 64 MiB: netcheck / reference busbw, median 1.006 over all 20 pairs (min 0.901, max 1.116); ...
    2. tbf 1gbit = 0.1250 GB/s:
         32 MiB: busbw 0.1195 GB/s = 95.6% of the shaped rate
         iperf3 TCP node1 -> node0, 5 s: 0.9570 Gbit/s = 0.1196 GB/s = 95.7% of the shaped rate; ...
    3. default sweep, 3 nodes: slowest node's wall 10.7 s (torch import and worker start included); ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import psutil
from _common import PY, REPO, Cluster, NodeSpec, finish, machine_facts, start

from netcheck.core import codec
from netcheck.core.bwrecords import BandwidthResult

DRIVER = str(REPO / "tests" / "test_bandwidth_cluster.py")
CAP = 120.0
MIB = 1 << 20
COMPARED = (16 * MIB, 32 * MIB, 64 * MIB)
STEADY = 0.8   # a run below this share of the best busbw seen at its size was slowed from outside
# The minimal loop netcheck is held against: warm up, line up, time, average across ranks.
REFERENCE = """
import datetime, sys, time, torch, torch.distributed as dist
rank, world, sizes = int(sys.argv[1]), int(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
dist.init_process_group("gloo", init_method="tcp://node0:29600", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
for size in sizes:
    t = torch.zeros(size // 4)
    for _ in range(5):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(20):
        dist.all_reduce(t)
    seconds = torch.tensor([(time.perf_counter() - start) / 20], dtype=torch.float64)
    dist.all_reduce(seconds)
    if rank == 0:
        print(size, size / (seconds.item() / world) / 1e9 * 2 * (world - 1) / world, flush=True)
dist.destroy_process_group()
"""


def netcheck_run(c: Cluster, flags: list[str]) -> tuple[BandwidthResult, float]:
    """run_bandwidth on every node; node0's result and the slowest node's wall time."""
    n, run_id = len(c.nodes), f"bench{time.monotonic_ns()}"
    runs = [start(c, i, [PY, DRIVER, "--node", str(i), "--nnodes", str(n), "--nproc", "1",
                         "--run-id", run_id, *flags], f"netcheck node{i}") for i in range(n)]
    for t in runs:
        finish(c, t, CAP)
    out = [s for _, stream, s in runs[0].lines if stream == "out"]
    if runs[0].proc.returncode != 0 or not out:
        raise RuntimeError(f"netcheck on node0 failed:\n{runs[0].text}")
    return codec.loads(BandwidthResult, out[-1], 1 << 24), max(t.seconds for t in runs)


def reference_run(c: Cluster, sizes: tuple[int, ...]) -> dict[int, float]:
    """The plain loop on every node; busbw (GB/s) by size, from rank 0."""
    n = len(c.nodes)
    runs = [start(c, i, [PY, "-c", REFERENCE, str(i), str(n), ",".join(map(str, sizes))],
                  f"reference node{i}") for i in range(n)]
    for t in runs:
        if finish(c, t, CAP).proc.returncode != 0:
            raise RuntimeError(f"{t.label} failed:\n{t.text}")
    pairs = (line.split() for _, stream, line in runs[0].lines if stream == "out")
    return {int(size): float(busbw) for size, busbw in pairs}


def busbw_by_size(result: BandwidthResult) -> dict[int, float]:
    return {r.size: r.busbw for r in result.sweeps[0].rows}


def wait_for_idle(cap: float = 120.0) -> float:
    """Until the CPUs have been idle for two seconds (other engineers' test clusters share
    this machine), at most `cap` seconds; the busy percentage last seen."""
    until = time.monotonic() + cap
    busy = psutil.cpu_percent(interval=1.0)
    while time.monotonic() < until and (busy > 10 or psutil.cpu_percent(interval=1.0) > 10):
        busy = psutil.cpu_percent(interval=1.0)
    return busy


def against_reference(repeats: int) -> None:
    """Each pair of runs starts on an idle machine, alternating which goes first so drift
    in the load does not favour either; the per-repeat ratio is what is compared.

    Other engineers' clusters share these 2 CPUs and start at any time. Load only ever
    slows a run, so a pair where either run fell below STEADY of the best busbw seen at
    that size (by either tool) was slowed from outside; such pairs are counted apart.
    """
    flags = ["-b", "16M", "-e", "64M", "-w", "5", "-n", "20", "-c", "0", "--bw-budget", "60"]
    pairs: list[tuple[dict[int, float], dict[int, float]]] = []
    with Cluster([NodeSpec(), NodeSpec()]) as c:
        for k in range(repeats):
            busy = wait_for_idle()
            if k % 2:
                reference = reference_run(c, COMPARED)
                ours = busbw_by_size(netcheck_run(c, flags)[0])
            else:
                ours = busbw_by_size(netcheck_run(c, flags)[0])
                reference = reference_run(c, COMPARED)
            pairs.append((ours, reference))
            print(f"  repeat {k + 1} ({'reference' if k % 2 else 'netcheck'} first, CPU {busy:.0f}% busy "
                  "before): " + "; ".join(f"{s // MIB} MiB netcheck {ours[s]:.3f} / reference "
                                          f"{reference[s]:.3f} GB/s" for s in COMPARED))
    for s in COMPARED:
        ours_best, theirs_best = max(o[s] for o, _ in pairs), max(r[s] for _, r in pairs)
        print(f"1. {s // MIB} MiB: best of {len(pairs)}: netcheck {ours_best:.3f} GB/s, reference "
              f"{theirs_best:.3f} GB/s, ratio {ours_best / theirs_best:.3f}")
        best = max(ours_best, theirs_best)
        every = sorted(o[s] / r[s] for o, r in pairs)
        steady = sorted(o[s] / r[s] for o, r in pairs if min(o[s], r[s]) >= STEADY * best)
        print(f"1. {s // MIB} MiB: netcheck / reference busbw, median {statistics.median(every):.3f} over "
              f"all {len(every)} pairs (min {every[0]:.3f}, max {every[-1]:.3f}); "
              + (f"median {statistics.median(steady):.3f} over the {len(steady)} steady pairs (min "
                 f"{steady[0]:.3f}, max {steady[-1]:.3f}); best seen {best:.3f} GB/s" if steady else
                 "no steady pair"))


def iperf3(c: Cluster, seconds: int) -> float:
    """TCP throughput node1 -> node0 (through node1's shaped egress), Gbit/s."""
    server = start(c, 0, ["iperf3", "-s", "-1", "-p", "5201"], "iperf3 server")
    time.sleep(0.5)
    client = finish(c, start(c, 1, ["iperf3", "-c", "node0", "-p", "5201", "-t", str(seconds), "-J"],
                             "iperf3 client"), CAP)
    finish(c, server, 10)
    report = json.loads("\n".join(s for _, stream, s in client.lines if stream == "out"))
    return report["end"]["sum_received"]["bits_per_second"] / 1e9


def shaped(rate: str, gbit: float, sizes: list[str]) -> None:
    flags = ["-b", sizes[0], "-e", sizes[1], "-w", "1", "-n", "5", "-c", "0", "--bw-budget", "40"]
    with Cluster([NodeSpec(), NodeSpec()]) as c:
        c.shape(1, rate)
        result, wall = netcheck_run(c, flags)
        tcp = iperf3(c, 5)
    shaped_gbs = gbit / 8
    rows = result.sweeps[0].rows
    print(f"2. tbf {rate} = {shaped_gbs:.4f} GB/s:")
    for r in rows:
        print(f"     {r.size // MIB} MiB: busbw {r.busbw:.4f} GB/s = {100 * r.busbw / shaped_gbs:.1f}% "
              "of the shaped rate")
    print(f"     iperf3 TCP node1 -> node0, 5 s: {tcp:.4f} Gbit/s = {tcp / 8:.4f} GB/s = "
          f"{100 * tcp / gbit:.1f}% of the shaped rate; netcheck wall {wall:.1f} s, "
          f"skipped {[s // MIB for s in result.sweeps[0].skipped]} MiB")


def default_sweep() -> None:
    with Cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        result, wall = netcheck_run(c, [])
    sweep = result.sweeps[0]
    print(f"3. default sweep, 3 nodes: slowest node's wall {wall:.1f} s (torch import and worker "
          f"start included); run_bandwidth {result.seconds:.1f} s; {len(sweep.rows)} sizes measured "
          f"up to {sweep.rows[-1].size} B (busbw {sweep.rows[-1].busbw:.3f} GB/s), "
          f"{len(sweep.skipped)} skipped for the budget; pairs "
          + ", ".join(f"{p.a}-{p.b} {p.busbw:.3f} GB/s at {p.size} B" for p in result.pairs)
          + f"; failed stage: {result.failed_stage}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=12)
    args = p.parse_args()
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_facts().items()))
    against_reference(args.repeats)
    shaped("200mbit", 0.2, ["1M", "8M"])
    shaped("1gbit", 1.0, ["4M", "32M"])
    default_sweep()


if __name__ == "__main__":
    main()
