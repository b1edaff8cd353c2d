"""What a healthy cluster's connections resend while the machine is busy: the figure
link.health's bound (core/constants.py, LINK_LOSS_RATE) is judged against (issue 63).

Per run, on a fresh 3-node namespace cluster with no fault: netcheck on every node with
`--bw-budget 4` (the link tests' setting), while --load busy loops hold the machine's CPUs
(none: a quiet machine). From the host's JSON report, every direction's segments and
resends (link.health's own figures, core.bwrecords.link_directions), and the verdict
link.health gave. Then the same with one node losing --share of what it receives
(iptables statistic DROP), the smallest fault the bound must still name.

Reproduce, from the repository's root (root; about 20 s a run):
    .venv/bin/python benchmarks/link_under_load.py [--runs 10] [--load 0 2 4] [--share 0.005]

Sample output (2 vCPU, torch 2.13.0+cpu; see benchmarks/RESULTS.md):
    load 4, healthy, run 3: link.health warn lossy_path; worst direction 45 of 42,704 (0.105%)
    ...
    load 4, healthy: worst direction over 10 runs 0.105%; median of runs' worst 0.02%
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import PORT, PY, REPO, Cluster, NodeSpec, finish, machine_facts, start

sys.path.insert(0, str(REPO))
from netcheck.core.bwrecords import BandwidthResult, link_directions  # noqa: E402
from netcheck.core.codec import from_plain  # noqa: E402
from netcheck.core.constants import LINK_JUDGED_SEGMENTS  # noqa: E402

NODES = 3
BUSY = "while True: pass"


def one_run(share: float, folder: Path) -> tuple[str, list[tuple[int, int]]]:
    """(link.health's verdict on the host, every judged direction's (segments, resent))."""
    with Cluster([NodeSpec() for _ in range(NODES)]) as c:
        if share:
            c.lose_inbound(2, share)
        paths = [folder / f"node{i}.json" for i in range(NODES)]
        runs = [start(c, i, [PY, "-m", "netcheck", "--rdzv", f"node0:{PORT}", "--nnodes", str(NODES),
                             "--node-rank", str(i), "--timeout", "90", "--bw-budget", "4", "--json", str(paths[i])],
                      f"node{i}") for i in range(NODES)]
        for run in runs:
            finish(c, run, 150)
    report = json.loads(paths[0].read_text())
    health = [f for f in report["findings"] if f["check"] == "link.health"]
    verdict = ", ".join(sorted({f"{f['severity']} {f['kind'] or ''}".strip() for f in health})) or "none"
    result = from_plain(BandwidthResult, report["bandwidth"])
    judged = [sent for sent in link_directions(result.links).values() if sent[0] >= LINK_JUDGED_SEGMENTS]
    return verdict, judged


def share_text(sent: tuple[int, int]) -> str:
    return f"{sent[1]:,} of {sent[0]:,} ({sent[1] / sent[0]:.3%})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--load", type=int, nargs="+", default=[0, 2, 4], help="busy loops beside each set of runs")
    p.add_argument("--share", type=float, default=0.005, help="the smallest loss the bound must name")
    a = p.parse_args()
    print(machine_facts())
    for load in a.load:
        busy = [subprocess.Popen([PY, "-c", BUSY]) for _ in range(load)]
        try:
            for share in (0.0, a.share):
                label = f"load {load}, " + (f"node2 losing {share:.1%}" if share else "healthy")
                worst = []
                for i in range(a.runs):
                    with tempfile.TemporaryDirectory() as folder:
                        verdict, judged = one_run(share, Path(folder))
                    top = max(judged, key=lambda s: s[1] / s[0]) if judged else (1, 0)
                    worst.append(top[1] / top[0])
                    print(f"{label}, run {i + 1}: link.health {verdict}; worst direction {share_text(top)}",
                          flush=True)
                print(f"{label}: worst direction over {a.runs} runs {max(worst):.3%}; "
                      f"median of runs' worst {statistics.median(worst):.3%}", flush=True)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
