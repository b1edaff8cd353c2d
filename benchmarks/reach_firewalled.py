"""Time to first useful word about a firewalled rendezvous port: netcheck vs TCPStore vs torchrun.

A 4-node namespace cluster; node0 listens on 29500 (a plain Python listener) and DROPs
SYNs to 29500 from node1, node2 and node3. Each client starts fresh:
  a. node1: `netcheck --rdzv node0:29500 --node-rank 1 --nnodes 2` (default flags), run
     --repeats times; its process wall time, and "filtered" must be in its output;
  b. node2: a bare `torch.distributed.TCPStore('node0', 29500, None, False, 600 s)` client;
  c. node3: `torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --rdzv-backend c10d
     --rdzv-endpoint node0:29500 hello.py` (hello.py prints 'hello').
b and c run together (separate nodes, separate DROP rules), each stopped at 120 s.

Reproduce, from the repository's root (root; needs ip netns, iptables, unshare; about 2.5 minutes):
    .venv/bin/python benchmarks/reach_firewalled.py

Sample output (2 vCPU AMD EPYC, torch 2.13.0+cpu; see benchmarks/RESULTS.md):
    a. netcheck (process wall time; 'filtered' must be in its output):
      netcheck #1: exited rc=2 at 3.15 s; first output at 3.12 s; first useful at 3.12 s
          [   3.12 s out] FAIL  rdzv.reach    node0:29500 is filtered from this node: no answer in 3 s  [node 1 (node1)]
          ...
       median 3.14 s, min 3.13 s
    b./c. run together, capped at 120.0 s:
      TCPStore: stopped at 120 s (cap), no exit; first output at -; first useful at -
      torchrun: exited rc=1 at 61.29 s; first output at 0.88 s; first useful at 60.91 s
          [   0.88 s err] W1129 07:50:31.513000 26053 torch/distributed/run.py:865] node_rank is only used for static
              rdzv_backend. It will be ignored for rdzv_backend=c10d.
          [  60.91 s err] [E1129 07:51:31.217120202 socket.cpp:1028] [c10d] The client socket has timed out after
              60000ms while trying to connect to (node0, 29500).
          ...
          [  60.91 s err] torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d
              store has failed. See inner exception for details.
    headline: netcheck 3.1 s | TCPStore >= 120.0 s = >= 38x netcheck | torchrun 60.9 s = 19x netcheck
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import PORT, PY, TORCHRUN, Cluster, NodeSpec, Timed, finish, machine_facts, start

# A line that says something about the connection (not a banner or a config dump).
ABOUT_CONNECTION = r"node0|29500|connect|timed? ?out|filtered|refused|unreachable|rendezvous"
LISTENER = ("import socket, time; s = socket.create_server(('', %d), backlog=64); "
            "print('listening', flush=True); time.sleep(3600)" % PORT)
TCPSTORE = ("import torch.distributed as d, datetime; "
            "d.TCPStore('node0', %d, None, False, datetime.timedelta(seconds=600))" % PORT)
NETCHECK = [PY, "-m", "netcheck", "--rdzv", f"node0:{PORT}", "--node-rank", "1", "--nnodes", "2"]


def firewall(c: Cluster) -> None:
    """node0's 29500 drops SYNs from node1, node2 and node3."""
    for source in (1, 2, 3):
        c.drop_inbound(0, PORT, source=source)


def start_listener(c: Cluster) -> Timed:
    t = start(c, 0, [PY, "-c", LISTENER], "listener")
    end = time.monotonic() + 10
    while t.first("listening") is None:
        if t.proc.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"listener on node0 did not start: {t.text}")
        time.sleep(0.02)
    return t


def torchrun_argv(tmp: Path) -> list[str]:
    script = tmp / "hello.py"
    script.write_text("print('hello', flush=True)\n")
    return [TORCHRUN, "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node0:{PORT}", str(script)]


def measure(repeats: int, cap: float, tmp: Path) -> tuple[list[Timed], Timed, Timed]:
    with Cluster([NodeSpec() for _ in range(4)]) as c:
        firewall(c)
        start_listener(c)
        netcheck = [finish(c, start(c, 1, NETCHECK, f"netcheck #{k + 1}"), cap)
                    for k in range(repeats)]
        store = start(c, 2, [PY, "-c", TCPSTORE], "TCPStore")
        agent = start(c, 3, torchrun_argv(tmp), "torchrun")
        return netcheck, finish(c, store, cap), finish(c, agent, cap)


def show(t: Timed, pattern: str) -> tuple[float, bool]:
    """Print one client's numbers and lines; return (time to first useful output, or to
    exit/cap when it said nothing useful; whether it said something useful)."""
    useful = t.first(pattern)
    end = f"stopped at {t.seconds:.0f} s (cap), no exit" if t.capped else \
        f"exited rc={t.proc.returncode} at {t.seconds:.2f} s"
    first = t.first()
    print(f"  {t.label}: {end}; first output at "
          f"{'-' if first is None else f'{first:.2f} s'}; first useful at "
          f"{'-' if useful is None else f'{useful:.2f} s'}")
    said = [x for x in t.lines if not x[2].startswith("frame #")]  # C++ stack frames: noise
    for when, stream, line in said if len(said) <= 12 else said[:8] + [(0, "", "...")] + said[-3:]:
        print(f"      [{when:7.2f} s {stream}] {line[:150]}" if stream else "      ...")
    return (useful, True) if useful is not None else (t.seconds, False)


def ratio(t: Timed, seconds: float, useful: bool, base: float) -> str:
    sign = ">= " if t.capped and not useful else ""
    return f"{t.label} {sign}{seconds:.1f} s = {sign}{seconds / base:.0f}x netcheck"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="netcheck runs (a); b and c run once")
    p.add_argument("--cap", type=float, default=120.0, help="stop b and c after this (s)")
    args = p.parse_args()
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_facts().items()))
    with tempfile.TemporaryDirectory() as tmp:
        netcheck, store, agent = measure(args.repeats, args.cap, Path(tmp))
    print("a. netcheck (process wall time; 'filtered' must be in its output):")
    for t in netcheck:
        show(t, r"filtered")
        assert "filtered" in t.text and not t.capped, f"netcheck did not say filtered:\n{t.text}"
    base = statistics.median(t.seconds for t in netcheck)
    print(f"   median {base:.2f} s, min {min(t.seconds for t in netcheck):.2f} s")
    print("b./c. run together, capped at", args.cap, "s:")
    store_s, agent_s = show(store, r"."), show(agent, ABOUT_CONNECTION)
    print(f"headline: netcheck {base:.1f} s |", ratio(store, *store_s, base), "|",
          ratio(agent, *agent_s, base))


if __name__ == "__main__":
    main()
