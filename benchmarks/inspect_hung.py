"""Time to a verdict on a job that hangs now: `netcheck inspect` vs what torchrun says meanwhile.

A 3-node namespace cluster. node0 starts `torchrun --nnodes 2 --rdzv-backend c10d
--rdzv-endpoint node0:29400 --rdzv-id job7` (join timeout torchrun's default, 600 s); node1,
the second node, never starts. Once the rendezvous state is in the store, node2 runs
`netcheck inspect --rdzv node0:29400 --nnodes 2` --repeats times (each a fresh process, its
wall time measured), while torchrun's own output on node0 is recorded for the same span.

Reproduce, from the repository's root (root; about a minute):
    .venv/bin/python benchmarks/inspect_hung.py --repeats 5

Sample output (2 vCPU AMD EPYC, torch 2.13.0+cpu; see benchmarks/RESULTS.md):
    inspect #1: rc=2 in 1.72 s: FAIL  job.rdzv       run 'job7': round 0 is not complete: 1 of 2 node(s) joined,
        1 missing; ...
    ...
    inspect: median 1.70 s, min 1.44 s (n=5)
    torchrun on node0 in the same 8.7 s: 0 lines after its start-up; it says nothing until its join timeout (600 s)
"""

from __future__ import annotations

import argparse
import json
import time

from _common import PY, Cluster, NodeSpec, finish, machine_facts, start, summary

PORT = 29400
SLEEPER = "import time\ntime.sleep(600)\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(machine_facts())
    with Cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        script = "/tmp/netcheck-bench-sleeper.py"
        with open(script, "w") as f:
            f.write(SLEEPER)
        job = start(c, 0, [PY, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node0:{PORT}", "--rdzv-id", "job7",
                           script], "torchrun")
        while True:  # the event: the rendezvous state is in the store
            report = json.loads(c.run(2, [PY, "-m", "netcheck", "inspect", "--rdzv", f"node0:{PORT}", "--json", "-"],
                                      timeout=60).stdout)
            if any(f.get("kind") == "round_incomplete" for f in report["findings"]):
                break
            time.sleep(0.5)
        before, span_start = len(job.lines), time.monotonic()
        times = []
        for i in range(args.repeats):
            t0 = time.monotonic()
            done = c.run(2, [PY, "-m", "netcheck", "inspect", "--rdzv", f"node0:{PORT}", "--nnodes", "2"], timeout=60)
            times.append(time.monotonic() - t0)
            verdict = next((ln for ln in done.stdout.splitlines() if "job.rdzv" in ln), "?")
            print(f"inspect #{i + 1}: rc={done.returncode} in {times[-1]:.2f} s: {verdict[:140]}")
        span = time.monotonic() - span_start
        said = job.lines[before:]
        finish(c, job, 0)
    print(f"inspect: {summary(times)}")
    print(f"torchrun on node0 in the same {span:.1f} s: {len(said)} lines after its start-up; "
          "it says nothing until its join timeout (600 s)")
    for _, stream, text in said[:5]:
        print(f"    [{stream}] {text}")


if __name__ == "__main__":
    main()
