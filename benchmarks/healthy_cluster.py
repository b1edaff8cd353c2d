"""A healthy 3-node netcheck run next to the cost of `import torch` on the same machine.

Per repeat, on a fresh 3-node namespace cluster:
  1. `netcheck --rdzv node0:29500 --nnodes 3 --node-rank i --timeout 60 --json PATH` on
     node i = 0, 1, 2 (with --arrival: no --nnodes/--node-rank; with --skip-bandwidth:
     phases 1-6), all started together: each process's wall time, when its text
     report reached stdout, its exit code and verdict, and its JSON report's phase timings;
  2. three `python -c 'import torch'` at once (one per node), then one alone.
One untimed `import torch` first warms the page cache. Median and min over the repeats.

Reproduce, from the repository's root (root; needs ip netns, iptables, unshare; about 1 minute):
    .venv/bin/python benchmarks/healthy_cluster.py [--arrival] [--skip-bandwidth]

Sample output (2 vCPU AMD EPYC, torch 2.13.0+cpu; see benchmarks/RESULTS.md):
    repeat 1:
      netcheck node0: wall 2.99 s (report printed at 2.41 s), rc=0, verdict pass;
        phases (s): local 0.01, reach 0.00, rendezvous 1.97
      ...
      import torch x3 concurrent: 1.98, 2.40, 2.28 s; alone: 1.20 s
    ...
    summary over repeats:
      netcheck node0 wall: median 2.74 s, min 2.55 s (n=3)
          report printed: median 2.11 s, min 2.04 s (n=3)
          phase local: median 0.00 s, min 0.00 s (n=3)
          phase reach: median 0.00 s, min 0.00 s (n=3)
          phase rendezvous: median 1.73 s, min 1.69 s (n=3)
      ...
      netcheck slowest node: median 2.74 s, min 2.59 s (n=3)
      import torch x3 concurrent, each: median 2.00 s, min 1.88 s (n=9)
      import torch x3 concurrent, slowest: median 2.16 s, min 1.94 s (n=3)
      import torch alone: median 1.07 s, min 1.04 s (n=3)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from _common import PORT, PY, Cluster, NodeSpec, finish, machine_facts, start, summary

NODES = 3
CAP = 120.0  # a run past this is a hang: netcheck's own --timeout is 60


def netcheck_argv(i: int, json_path: Path, arrival: bool, phases: list[str]) -> list[str]:
    """Ranked (--nnodes/--node-rank) or, with `arrival`, the README's one-shot form: no
    count, the host closes after --join-window (5 s) of quiet."""
    ranks = [] if arrival else ["--nnodes", str(NODES), "--node-rank", str(i)]
    return [PY, "-m", "netcheck", "--rdzv", f"node0:{PORT}", *ranks, *phases, "--timeout", "60",
            "--json", str(json_path)]


def netcheck_trio(c: Cluster, tmp: Path, arrival: bool, phases: list[str]) -> list[dict]:
    """One netcheck per node, started together; wall time, exit code, report timings."""
    paths = [tmp / f"node{i}.json" for i in range(NODES)]
    runs = [start(c, i, netcheck_argv(i, paths[i], arrival, phases), f"node{i}") for i in range(NODES)]
    rows = []
    for i, t in enumerate(runs):
        finish(c, t, CAP)
        report = json.loads(paths[i].read_text()) if paths[i].exists() else {}
        rows.append({"node": i, "wall": t.seconds, "report": t.first(), "rc": t.proc.returncode,
                     "verdict": report.get("verdict", "no report"),
                     "phases": report.get("timings", {})})
    return rows


def torch_imports(c: Cluster, nodes: list[int]) -> list[float]:
    """`import torch` on each of `nodes` at once; their wall times."""
    runs = [start(c, i, [PY, "-c", "import torch"], f"import torch on node{i}") for i in nodes]
    for t in runs:
        if finish(c, t, CAP).proc.returncode != 0:
            raise RuntimeError(f"{t.label} failed:\n{t.text}")
    return [t.seconds for t in runs]


def one_repeat(arrival: bool, phases: list[str]) -> tuple[list[dict], list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp, Cluster([NodeSpec() for _ in range(NODES)]) as c:
        return (netcheck_trio(c, Path(tmp), arrival, phases), torch_imports(c, [0, 1, 2]),
                torch_imports(c, [0]))


def show_repeat(k: int, trio: list[dict], three: list[float], alone: list[float]) -> None:
    print(f"repeat {k}:")
    for r in trio:
        phases = ", ".join(f"{p} {s:.2f}" for p, s in r["phases"].items())
        printed = "-" if r["report"] is None else f"{r['report']:.2f} s"
        print(f"  netcheck node{r['node']}: wall {r['wall']:.2f} s (report printed at {printed}), "
              f"rc={r['rc']}, verdict {r['verdict']}; phases (s): {phases}")
    print(f"  import torch x3 concurrent: {', '.join(f'{s:.2f}' for s in three)} s; "
          f"alone: {alone[0]:.2f} s")


def show_summary(repeats: list[tuple[list[dict], list[float], list[float]]]) -> None:
    print("summary over repeats:")
    for i in range(NODES):
        rows = [trio[i] for trio, _, _ in repeats]
        print(f"  netcheck node{i} wall: {summary([r['wall'] for r in rows])}")
        print(f"      report printed: {summary([r['report'] for r in rows if r['report'] is not None])}")
        for p in dict.fromkeys(p for r in rows for p in r["phases"]):  # in report order
            print(f"      phase {p}: {summary([r['phases'][p] for r in rows if p in r['phases']])}")
    print(f"  netcheck slowest node: {summary([max(r['wall'] for r in t) for t, _, _ in repeats])}")
    print(f"  import torch x3 concurrent, each: {summary([s for _, th, _ in repeats for s in th])}")
    print(f"  import torch x3 concurrent, slowest: {summary([max(th) for _, th, _ in repeats])}")
    print(f"  import torch alone: {summary([a[0] for _, _, a in repeats])}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--arrival", action="store_true", help="no --nnodes/--node-rank: arrival numbering")
    p.add_argument("--skip-bandwidth", action="store_true", help="phases 1-6 only")
    args = p.parse_args()
    phases = ["--skip", "bandwidth"] if args.skip_bandwidth else []
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_facts().items()))
    subprocess.run([PY, "-c", "import torch"], check=True)  # warm the page cache, untimed
    repeats = []
    for k in range(1, args.repeats + 1):
        repeats.append(one_repeat(args.arrival, phases))
        show_repeat(k, *repeats[-1])
    show_summary(repeats)


if __name__ == "__main__":
    main()
