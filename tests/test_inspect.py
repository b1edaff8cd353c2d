"""`netcheck inspect` against real TCPStores on loopback: hostile values refused and never run,
the store left exactly as it was, and a static rendezvous's missing rank named.

(Real torchrun jobs on namespaces: tests/test_inspect_cluster.py.)
"""

from __future__ import annotations

import base64
import datetime
import os
import pickle
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import torch.distributed as dist

from netcheck.cluster import jobstore
from netcheck.cluster.jobstore import read_job_store
from netcheck.core.deadline import Deadline
from nodes import free_port, parse_report, scaled

REPO = Path(__file__).parents[1]


def inspect(port: int, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    # torch's import is inside --timeout: a loaded machine's needs more than the default leaves.
    done = subprocess.run([sys.executable, "-m", "netcheck", "inspect", "--rdzv", f"127.0.0.1:{port}",
                           "--json", "-", "--timeout", str(scaled(30)), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=scaled(60),
                          env={**os.environ, "NCCL_RAS_ADDR": f"127.0.0.1:{free_port()}"})
    assert "Traceback" not in done.stderr and "[c10d]" not in done.stderr, done.stderr
    return parse_report(done.stdout), done


def snapshot(store) -> tuple[int, dict[str, bytes]]:
    return store.num_keys(), {k: store.get(k) for k in store.list_keys()}


class Canary:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mknod, (self.path,))


def test_hostile_and_foreign_values_are_refused_never_run_and_the_store_is_unchanged(tmp_path):
    canary = tmp_path / "canary"
    port = free_port()
    # The legacy backend: the libuv one (torch >= 2.4's default) refuses a 100 MB value itself.
    store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30), wait_for_workers=False,
                          use_libuv=False)
    store.set("torch.rendezvous.evil", base64.b64encode(pickle.dumps(Canary(str(canary)))))
    store.set("torch.rendezvous.junk", b"%%% not base64 %%%")
    store.set("torch.rendezvous.list", base64.b64encode(pickle.dumps(["a", "b"])))
    store.set("torch.rendezvous.huge", b"A" * (100 << 20))
    # Two that crashed or exhausted the old unpickler: a tuple 150,000 deep in a set (SIGSEGV),
    # a 12-byte pickle whose memo index asked for 8.4 GB.
    store.set("torch.rendezvous.deep", base64.b64encode(b"\x80\x04\x8f(N" + b"\x85" * 150_000 + b"\x90."))
    store.set("torch.rendezvous.memo", base64.b64encode(b"\x80\x04Nr\xff\xff\xff\xff."))
    before = snapshot(store)
    report, done = inspect(port)
    assert done.returncode == 2, done.stderr
    refused = {f["summary"].split()[3]: f["kind"] for f in report["findings"] if f["check"] == "job.hostile"}
    assert refused == {"torch.rendezvous.evil": "hostile_value", "torch.rendezvous.huge": "foreign_value",
                       "torch.rendezvous.junk": "foreign_value", "torch.rendezvous.list": "foreign_value",
                       "torch.rendezvous.deep": "foreign_value", "torch.rendezvous.memo": "foreign_value"}
    assert not canary.exists(), "the pickle ran"
    assert snapshot(store) == before, "inspect changed the store"


def job_store(libuv: bool = True):
    port = free_port()
    return port, dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30),
                               wait_for_workers=False, use_libuv=libuv)


@pytest.mark.parametrize("libuv", [False, True])
def test_a_value_over_the_limit_is_refused_by_its_length_without_being_read(libuv):
    port, store = job_store(libuv)
    store.set("torch.rendezvous.small", b"abc")
    store.set("torch.rendezvous.huge", b"")
    for _ in range(8):  # libuv takes 8 MiB at most in one set; appends grow a value past it
        store.append("torch.rendezvous.huge", b"A" * (8 << 20))
    # An append has no reply: a round trip on the same connection comes after all eight (under a
    # busy loop inspect once read the value at 7 of them, 58,720,256 bytes).
    store.num_keys()
    tracemalloc.start()
    start = time.monotonic()
    read = read_job_store("127.0.0.1", port, None, Deadline(scaled(10)), 1 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert read.unread == {"huge": "67108864 bytes, over the 1048576-byte limit for a rendezvous state"}
    assert read.states == {"small": b"abc"}
    assert peak < 4 << 20, f"{peak >> 20} MiB read of a 64 MiB value"
    assert time.monotonic() - start < scaled(5)
    assert store.get("torch.rendezvous.small") == b"abc", "the store stopped serving"


def test_states_past_the_total_read_are_not_read(monkeypatch):
    port, store = job_store()
    for run in ("a", "b"):
        store.set(f"torch.rendezvous.{run}", b"Y2FuaW1hZGFt")
    monkeypatch.setattr(jobstore, "MAX_READ_BYTES", 20)
    read = read_job_store("127.0.0.1", port, None, Deadline(scaled(10)), 1 << 20)
    assert read.states == {"a": b"Y2FuaW1hZGFt"}
    assert read.unread == {"b": "12 bytes, past the 20 bytes inspect reads of all runs' states together"}


def test_a_run_id_the_store_does_not_hold_is_named_with_the_ones_it_does():
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
    store.set("torch.rendezvous.job7", b"Y2FuaW1hZGFt")   # the c10d backend's "no state yet"
    report, done = inspect(port, "--rdzv-id", "other")
    (rdzv,) = [f for f in report["findings"] if f["check"] == "job.rdzv"]
    assert (rdzv["severity"], rdzv["kind"]) == ("fail", "no_such_run") and "'job7'" in rdzv["summary"]
    report, _ = inspect(port)
    (rdzv,) = [f for f in report["findings"] if f["check"] == "job.rdzv"]
    assert (rdzv["severity"], rdzv["kind"]) == ("warn", "no_round")


def test_nothing_listening_is_said_at_once_without_torch(tmp_path):
    report, done = inspect(free_port(), "--timeout", "3")
    (store,) = report["findings"]
    assert (store["check"], store["severity"]) == ("job.store", "fail") and "refused" in store["summary"]
    assert report["job"]["seconds"] < 3


RANK = """
import datetime, os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
"""


def test_a_static_rendezvous_names_the_rank_that_never_arrived(tmp_path):
    port = free_port()
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "3"}
    ranks = [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in (0, 1)]
    try:
        deadline = time.monotonic() + scaled(60)
        while True:  # rank 1's address key is the event: it has arrived
            report, done = inspect(port, "--world-size", "3")
            if report["job"]["arrived_ranks"] == [1] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        (ranks_finding,) = [f for f in report["findings"] if f["check"] == "job.ranks"]
        assert (ranks_finding["severity"], ranks_finding["nodes"]) == ("fail", [2]), report["findings"]
        assert ranks_finding["evidence"] == ["arrived: rank(s) 0, 1"]
        assert not [f for f in report["findings"] if f["check"] == "job.rdzv"], "a static job has no rounds"
    finally:
        for r in ranks:
            r.kill()
            r.wait()


@pytest.mark.parametrize("count", [0, 1, 2, 3, 7, 8, 9, 100, 1023, 1024, 1025, 4095])
def test_a_store_that_cannot_list_keys_has_its_rounds_agents_counted_in_about_2_log2_n_looks(count):
    """Where torch cannot list keys, a round's role_info keys are probed: every count found, in
    at most 2 log2(n) + 2 looks (4,096 agents: 26)."""
    asked = []
    found = jobstore._probe_count(lambda g: asked.append(g) or g < count, Deadline(60))
    assert found == count
    assert len(asked) <= 2 * max(count, 1).bit_length() + 2, asked


def test_the_probe_stops_asking_at_its_deadline():
    asked = []
    deadline = Deadline(60)

    def exists(g):
        asked.append(g)
        if len(asked) == 3:
            deadline.at = deadline.start          # expires now
        return True

    assert jobstore._probe_count(exists, deadline) >= 1
    assert len(asked) == 3, asked
