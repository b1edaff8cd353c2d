"""A simulated 3-node cluster on this machine, each node running `netcheck`.

    $ make demo                 # scripts/demo.py
    netcheck demo: 3 nodes in network namespaces (node0 eth0, node1 ens5, node2 enp3s0f1)
    node0$ netcheck --rdzv node0:29500 --nnodes 3 --node-rank 0 --timeout 60 --html ...
    ... node0's (the host's) full report ...
    node0 (the host): exit 0 - verdict PASS
    node1: exit 0 - verdict PASS
    node2: exit 0 - verdict PASS
    the host's report as a web page: /tmp/netcheck-demo-k2x9q1/report.html

As root it builds real network namespaces on a private bridge (198.18.0.0/24), with a
different interface name per node as real clusters have. Without root it runs three
netcheck processes on 127.0.0.1 and says so.

`make demo-fault` (scripts/demo.py --fault) plants one fault first: node2's firewall drops
every inbound connection (iptables), as a host firewall that lets only ssh in does; the
host's report fails mesh.connect, names node2 and says what to open. It needs root. The
fault is the demo's, not the build's: when the host fails as it should, naming node2 (exit 4:
another node at fault, the host healthy), the demo says so and exits 0, so `make demo-fault`
ends without an error; a host that missed the fault makes it exit 1. Plain `make demo` exits
with the host's code.

Each run writes the host's page into a folder of its own (tempfile.mkdtemp: /tmp/netcheck-demo-*,
this user's, private), or into --out DIR: another user's demo, or an earlier run's, is never
in the way and never read.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster import Cluster, NodeSpec, namespaces_supported  # noqa: E402

NODES = 3
PORT = 29500
IFNAMES = ("eth0", "ens5", "enp3s0f1")
TIMEOUT = 60
# The host's report as a page (--html), in the run's folder; scripts/readme_screenshot.py
# photographs it.
PAGE = "report.html"


FAULTY = 2          # --fault: the node whose firewall drops every inbound connection
FAULT_FOUND = 4     # --fault: the host's exit when it reports the planted fault (another node's: node2)


def netcheck_args(rdzv: str, rank: int, html: Path) -> list[str]:
    """What each node runs, as a person types it after `netcheck`."""
    page = ["--html", str(html)] if rank == 0 else []
    return ["--rdzv", rdzv, "--nnodes", str(NODES), "--node-rank", str(rank), "--timeout", str(TIMEOUT), *page]


def start(rdzv: str, rank: int, name: str, popen, html: Path) -> subprocess.Popen:
    args = netcheck_args(rdzv, rank, html)
    print(f"{name}$ netcheck {shlex.join(args)}", flush=True)
    return popen([sys.executable, "-m", "netcheck", *args])


def run_in_namespaces(fault: bool, html: Path) -> list[subprocess.CompletedProcess]:
    specs = [NodeSpec(ifname=name) for name in IFNAMES]
    with Cluster(specs) as c:
        names = ", ".join(f"{n.hostname} {n.ifname}" for n in c.nodes)
        print(f"netcheck demo: {NODES} nodes in network namespaces ({names})", flush=True)
        if fault:
            c.drop_inbound(FAULTY)
            print(f"planted fault: node{FAULTY}'s firewall drops every inbound connection "
                  f"(iptables -A INPUT -p tcp --syn -j DROP)", flush=True)
        procs = [start(f"node0:{PORT}", i, f"node{i}", lambda argv, i=i: c.popen(i, argv, stderr=_stderr(i)), html)
                 for i in range(NODES)]
        print(flush=True)
        return [_finish(p) for p in procs]


def run_on_loopback(html: Path) -> list[subprocess.CompletedProcess]:
    print(f"netcheck demo: not root, so no network namespaces: {NODES} netcheck processes "
          f"on 127.0.0.1 instead", flush=True)
    procs = [start(f"127.0.0.1:{PORT}", i, f"node{i}", lambda argv, i=i: subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=_stderr(i), text=True), html) for i in range(NODES)]
    print(flush=True)
    return [_finish(p) for p in procs]


def _stderr(rank: int):
    """The host's stderr is the demo's own: on a terminal its progress shows as it runs."""
    return None if rank == 0 else subprocess.PIPE


def _finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=TIMEOUT + 15)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err or "")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="a simulated 3-node cluster on this machine")
    parser.add_argument("--fault", action="store_true", help=f"plant one fault: node{FAULTY}'s firewall "
                        "drops every inbound connection (needs root)")
    parser.add_argument("--out", metavar="DIR", type=Path, help="an existing folder for the host's page "
                        "(default: a new folder of this run's own, /tmp/netcheck-demo-*)")
    args = parser.parse_args(argv)
    fault = args.fault
    namespaces = namespaces_supported()
    if fault and not namespaces:
        print("netcheck demo: --fault plants a firewall rule in a network namespace: it needs root", file=sys.stderr)
        return 64
    folder = args.out or Path(tempfile.mkdtemp(prefix="netcheck-demo-"))
    html = folder / PAGE
    html.unlink(missing_ok=True)   # --out: only this run's page is ever shown
    results = run_in_namespaces(fault, html) if namespaces else run_on_loopback(html)
    host = results[0]
    sys.stdout.write(host.stdout + host.stderr)
    print(f"node0 (the host): exit {host.returncode} - {_verdict(host)}")
    for rank, joiner in enumerate(results[1:], start=1):
        print(f"node{rank}: exit {joiner.returncode} - {_verdict(joiner)}")
        if joiner.returncode not in (0, 1, 4):   # 4: healthy, another node at fault: nothing of its own to show
            sys.stdout.write(joiner.stdout + joiner.stderr)
    if html.exists():
        print(f"the host's report as a web page: {html}")
    elif args.out is None:
        folder.rmdir()
    if not fault:
        return host.returncode
    if host.returncode != FAULT_FOUND:
        print(f"\nthe planted fault was node{FAULTY}'s firewall, and the host's exit is {host.returncode}, "
              f"not {FAULT_FOUND} (another node at fault): netcheck missed it; the demo exits 1")
        return 1
    print(f"\nthe planted fault was node{FAULTY}'s firewall: the host's FAIL lines above name the node "
          f"and their `fix:` says what to change. netcheck's exit code says whose fault it is: {host.returncode}, "
          "a failure at another node, as the fault should give; the demo found what it planted, so it exits 0")
    return 0


def _verdict(done: subprocess.CompletedProcess) -> str:
    """The verdict as the node's report line says it ('verdict FAIL'), or what stands in its place."""
    line = next((line for line in (done.stdout or "").splitlines() if "verdict" in line), "")
    return line.rsplit(" - ", 1)[-1] if line else "no report on stdout"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
