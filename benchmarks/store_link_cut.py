"""How long a store request waits once the link to the host is cut: bare TCPStore vs netcheck.

A 2-node namespace cluster; node0 serves a TCPStore on 29500. On node1 two clients connect
and read a key once: (a) a bare `TCPStore('node0', 29500, None, False, 3 s)` with
`set_timeout(2 s)` on top, (b) netcheck's `cluster.storeconnect.client_store` (the same TCPStore with
a reply timeout on its socket, STORE_REPLY_TIMEOUT). Then node1's switch port goes down (a
pulled cable: no packet and no reset either way) and each client calls `check()` once,
timed, capped at --cap seconds.

Reproduce, from the repository's root (root; needs ip netns; about --cap seconds):
    .venv/bin/python benchmarks/store_link_cut.py

Sample output (2 vCPU AMD EPYC, torch 2.13.0+cpu; see benchmarks/RESULTS.md):
    bare TCPStore (timeout 3 s, set_timeout 2 s): no answer at the 120 s cap
    netcheck client_store: DistNetworkError after 5.0 s (Socket Timeout)
"""

from __future__ import annotations

import argparse
import subprocess

from _common import PORT, PY, REPO, Cluster, NodeSpec, machine_facts

SERVER = ("import torch.distributed as d, datetime, time; "
          f"s = d.TCPStore('0.0.0.0', {PORT}, None, True, datetime.timedelta(seconds=600), "
          "wait_for_workers=False); s.set('k', '1'); print('serving', flush=True); time.sleep(3600)")
CLIENT = f"""
import datetime, sys, time
sys.path.insert(0, {str(REPO)!r})
from netcheck.core.deadline import Deadline
from netcheck.cluster.compat import import_distributed
from netcheck.cluster.storeconnect import client_store

dist = import_distributed()
if sys.argv[1] == "bare":
    store = dist.TCPStore("node0", {PORT}, None, False, datetime.timedelta(seconds=3))
    store.set_timeout(datetime.timedelta(seconds=2))
else:
    store = client_store("node0", {PORT}, Deadline(600))
print("connected", store.check(["k"]), flush=True)
sys.stdin.readline()  # the link is cut now
started = time.monotonic()
try:
    store.check(["k"])
    print(f"answered after {{time.monotonic() - started:.1f}} s", flush=True)
except Exception as e:
    print(f"{{type(e).__name__}} after {{time.monotonic() - started:.1f}} s ({{str(e).splitlines()[0]}})", flush=True)
"""
LABELS = {"bare": "bare TCPStore (timeout 3 s, set_timeout 2 s)", "netcheck": "netcheck client_store"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cap", type=float, default=120.0, help="seconds to wait for each client")
    args = p.parse_args()
    print(machine_facts())
    with Cluster([NodeSpec(), NodeSpec()]) as c:
        server = c.popen(0, [PY, "-c", SERVER])
        assert server.stdout.readline().strip() == "serving"
        clients = {kind: c.popen(1, [PY, "-c", CLIENT, kind], stdin=subprocess.PIPE) for kind in LABELS}
        for client in clients.values():
            assert client.stdout.readline().startswith("connected"), client.stderr.read()
        c.cut_link(1)
        for client in clients.values():
            client.stdin.write("\n")
            client.stdin.flush()
        for kind, client in clients.items():
            try:
                said = client.communicate(timeout=args.cap)[0].strip() or "(nothing)"
            except subprocess.TimeoutExpired:
                said = f"no answer at the {args.cap:g} s cap"
            print(f"{LABELS[kind]}: {said}")


if __name__ == "__main__":
    main()
