"""What the Caller costs a store request: torch's TCPStore get, called bare and through
netcheck's Exchange (facts.bounded.Caller: one thread that makes the request, the caller
waiting for it to the run's end), on a real store on loopback, a round of N requests each way, the median of 5 rounds.

Reproduce, from the repository's root (no root needed; a few seconds):
    .venv/bin/python benchmarks/store_caller.py [--n 20000]

Sample output (2 vCPU, torch 2.13.0+cpu; see benchmarks/RESULTS.md):
    bare get: 14.3 us a request; through a Caller: 25.9 us (+11.6); Exchange.raw, its bookkeeping too: 30.4 us (+16.1)
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck.cluster.compat import import_distributed  # noqa: E402
from netcheck.cluster.store import Exchange  # noqa: E402
from netcheck.core.deadline import Deadline  # noqa: E402
from netcheck.core.storekeys import Key  # noqa: E402
from netcheck.facts.bounded import Caller  # noqa: E402


def per_request(call, n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - began) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="requests a round")
    parser.add_argument("--rounds", type=int, default=5)
    n = parser.parse_args().n
    rounds = parser.parse_args().rounds
    dist = import_distributed()
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
    ex = Exchange(store, "bench", end=Deadline(3600))
    key = ex.key(Key("k", int))
    ex.put(key, 1)
    bare = statistics.median(per_request(lambda: store.get(key), n) for _ in range(rounds))
    caller = Caller("bench")
    handed = statistics.median(per_request(lambda: caller.call(store.get, (key,), 60.0), n) for _ in range(rounds))
    held = statistics.median(per_request(lambda: ex.raw(key), n) for _ in range(rounds))
    print(f"bare get: {bare:.1f} us a request; through a Caller: {handed:.1f} us ({handed - bare:+.1f}); "
          f"Exchange.raw, its bookkeeping too: {held:.1f} us ({held - bare:+.1f})")


if __name__ == "__main__":
    main()
