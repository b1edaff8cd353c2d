"""What reading the link counters costs (issue 50), beside what it brackets.

The bandwidth phase reads a node's link counters (facts/linkcounters.py) at each stage's
start and at the end: 8 readings a run, in the node's netcheck process, between the stages
(never inside a timed batch: the workers time their own collectives). Each worker reads its
own connections' TCP_INFO once, after its last stage. So the counters can add time to the
sweep only through the CPU these reads take on the node's cores while workers run. This
measures that, on one namespace node:

  1. read_counters(): /proc/net/snmp, /proc/net/netstat and each interface's counters, with
     the node holding 1 and 63 interfaces (a Kubernetes node's host side has a veth a pod);
  2. peer_segments(): TCP_INFO on every socket a process holds, with 2, 64 and 900
     connected sockets (a rank's gloo full mesh at 900 peers; the shell's descriptor limit is 1,024);

each the median of --repeats calls, next to the sweep's own time per run (--bw-budget 10
by default: the default budget). Part 3 of benchmarks/bandwidth.py (`--parts overhead`) is
the side-by-side with a bare gloo loop, run before and after the counters were added.

Reproduce, from the repository's root (root):
    .venv/bin/python benchmarks/link_counters.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _common import PY, REPO, Cluster, NodeSpec, machine_facts

PROBE = f"""
import socket, statistics, sys, time
sys.path.insert(0, {str(REPO)!r})
from netcheck.facts.linkcounters import peer_segments, read_counters
repeats, sockets = int(sys.argv[1]), int(sys.argv[2])
server = socket.create_server(("127.0.0.1", 0), backlog=sockets)
held = []
for _ in range(sockets // 2):
    c = socket.create_connection(server.getsockname())
    a, _ = server.accept()
    c.sendall(b"x" * 4096)
    held += [c, a]
def median_ms(call):
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); call(); times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3
print(f"{{median_ms(read_counters):.3f}} {{median_ms(lambda: peer_segments(0)):.3f}} {{len(read_counters().packets)}}")
"""


def measure(c: Cluster, repeats: int, sockets: int) -> tuple[float, float, int]:
    """(read_counters ms, peer_segments ms, interfaces read) on node 0."""
    out = subprocess.run(c.argv_in(0, [PY, "-c", PROBE, str(repeats), str(sockets)]), capture_output=True,
                         text=True, check=True, timeout=300).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args()
    print(machine_facts())
    with Cluster([NodeSpec()]) as c:
        for interfaces in (1, 64):
            for k in range(1, 1 + (interfaces - 1) // 2):   # decoys: a veth pair each, inside the node
                c.add_decoy(0, f"vx{k}", f"198.19.{k}.1/24")
            for sockets in (2, 64, 900):
                read_ms, peers_ms, read = measure(c, args.repeats, sockets)
                print(f"{read:>3} interface(s), {sockets:>4} sockets: read_counters {read_ms:.3f} ms, "
                      f"peer_segments {peers_ms:.3f} ms")
    print("per run: 8 read_counters in the node's process between stages, 1 peer_segments per worker after its "
          "last stage; the default sweep runs --bw-budget 10 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
