"""The live look of `netcheck inspect` over a large job: 64 ranks' debug servers, each serving
a flight recorder recorded from a real torch 2.13 job (tests/hangjob.py's shape: five
all_reduces, then rank 63 one short) and a Python stack, registered in a real TCPStore as
torch's worker servers register themselves.

Reproduce, from the repository's root (seconds):
    .venv/bin/python benchmarks/live_hang.py --ranks 64

It prints the wall time of what `inspect --rdzv` adds for the live view (finding the servers in
the store, fetching every rank's recorder and stack, judging them) and the finding.
"""

from __future__ import annotations

import argparse
import datetime
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from _common import machine_facts
from netcheck.cluster import compat
from netcheck.cluster.jobstore import debug_servers
from netcheck.core.deadline import Deadline
from netcheck.facts.debugserver import live_view
from netcheck.rules.hang import hang_findings

PORT = 29811


def recorder(last: int) -> bytes:
    """A CPU recorder as torch 2.13's /handler/fr_trace_json writes it (no frames)."""
    entries = [{"collective_seq_id": s, "input_dtypes": ["Float"], "input_sizes": [[1000]], "is_p2p": False,
                "op_id": s, "output_dtypes": ["Float"], "output_sizes": [[1000]], "p2p_seq_id": 0, "pg_id": 0,
                "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce", "record_id": s - 1,
                "retired": s < last, "state": "scheduled", "thread_id": "1", "thread_name": "python3",
                "time_created_ns": 0, "time_discovered_completed_ns": 0, "time_discovered_started_ns": 0,
                "timeout_ms": 60000} for s in range(1, last + 1)]
    return json.dumps({"comm_lib_version": "", "entries": entries, "nccl_comm_state": {},
                       "pg_config": {"": {"desc": "", "name": "", "ranks": "[]"}}, "pg_status": {},
                       "version": "2.10"}).encode()


def stack(line: int) -> bytes:
    return (f'Thread 0x00007fb570868b80 (most recent call first):\n  File "/job/train.py", line {line} in <module>\n'
            ).encode()


def serve(rank: int, ranks: int) -> ThreadingHTTPServer:
    behind = rank == ranks - 1
    answers = {"/handler/fr_trace_json": recorder(5 if behind else 6),
               "/handler/dump_traceback": stack(13 if behind else 11)}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = answers.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=64)
    args = p.parse_args()
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_facts().items()))
    dist = compat.import_distributed()
    store = dist.TCPStore("127.0.0.1", PORT, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
    servers = [serve(r, args.ranks) for r in range(args.ranks)]
    for rank, server in enumerate(servers):
        store.set(f"debug_server/rank{rank}", f"http://127.0.0.1:{server.server_address[1]}")
    keys = tuple(compat.list_keys(store))
    start = time.perf_counter()
    deadline = Deadline(5.0)
    view = live_view(debug_servers("127.0.0.1", PORT, keys, deadline), deadline)
    findings = hang_findings(view)
    seconds = time.perf_counter() - start
    print(f"{args.ranks} ranks' debug servers found, fetched and judged in {seconds:.2f} s; {len(view.traces)} traced")
    for f in findings:
        print(f"  {f.severity} {f.check} {f.kind}: {f.summary[:160]}")
    for server in servers:
        server.shutdown()


if __name__ == "__main__":
    main()
