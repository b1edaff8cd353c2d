"""`netcheck inspect --traces` over a large job's dumps: 1,024 ranks' flight recorders of
2,000 entries each (NCCL-style entries, pickled at protocol 2 as torch's C++ pickler writes
them; rank 517 stopped one collective early), read and judged by the same code the CLI runs.

Reproduce, from the repository's root (about 2 minutes, most of it writing the dumps):
    .venv/bin/python benchmarks/hang_traces.py --ranks 1024 --entries 2000

It prints the dumps' total size, the wall time of read_dumps + hang_findings, its peak
resident memory and its children's, and the finding.
"""

from __future__ import annotations

import argparse
import pickle
import resource
import tempfile
import time
from pathlib import Path

from _common import machine_facts
from netcheck.facts.frtrace import read_dumps
from netcheck.rules.hang import hang_findings

BEHIND = 517


def entry(seq: int) -> dict:
    return {"collective_seq_id": seq, "process_group": ("0", "default_pg"), "profiling_name": "nccl:all_reduce",
            "input_sizes": [[1000, 4096]], "output_sizes": [[1000, 4096]], "input_dtypes": ["Float"],
            "output_dtypes": ["Float"], "is_p2p": False, "state": "completed", "op_id": seq, "record_id": seq,
            "pg_id": 0, "p2p_seq_id": 0, "retired": True, "thread_id": "140717542443904", "thread_name": "python",
            "time_created_ns": 1796217477287099061 + seq, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "timeout_ms": 600000,
            "frames": [{"filename": "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                        "line": 3245, "name": "all_reduce"}, {"filename": "/job/train.py", "line": 15, "name": "step"},
                       {"filename": "/job/train.py", "line": 40, "name": "<module>"}]}


def write_dumps(folder: Path, ranks: int, entries: int) -> int:
    """Every rank's dump; the last entry not completed (the hang), rank BEHIND one short."""
    total = 0
    for rank in range(ranks):
        last = entries - (1 if rank == BEHIND else 0)
        ring = [entry(s) for s in range(last - entries + 1, last + 1)]
        ring[-1] = {**ring[-1], "state": "scheduled"}
        dump = {"version": "2.10",
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}},
                "pg_status": {}, "entries": ring}
        data = pickle.dumps(dump, protocol=2)
        (folder / f"nccl_trace_rank_{rank}").write_bytes(data)
        total += len(data)
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--entries", type=int, default=2000)
    args = p.parse_args()
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_facts().items()))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        size = write_dumps(folder, args.ranks, args.entries)
        start = time.perf_counter()
        view = read_dumps(str(folder), args.ranks)
        findings = hang_findings(view)
        seconds = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
    print(f"{args.ranks} dumps of {args.entries} entries, {size / 1e6:.0f} MB: read and judged in {seconds:.2f} s; "
          f"peak RSS {own} MiB here, {children} MiB in the largest decoder child; "
          f"{len(view.traces)} traced, {len(view.refused)} refused")
    for f in findings:
        print(f"  {f.severity} {f.check} {f.kind}: {f.summary[:200]}")


if __name__ == "__main__":
    main()
