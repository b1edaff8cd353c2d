"""`netcheck inspect --traces` on flight-recorder dumps a real job wrote: three namespace
nodes run tests/hangjob.py (gloo, torch's own recorder), the last rank misbehaves, every
rank that lives dumps its recorder after the process group's timeout, and inspect names the
rank, the collective and the line from the files alone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faults import nodes
from nodes import parse_report, scaled

pytestmark = pytest.mark.root_required

JOB = str(Path(__file__).resolve().parent / "hangjob.py")
WORLD = 3
CULPRIT = WORLD - 1


def dumps_of(cluster, tmp_path: Path, fault: str) -> Path:
    """Run the job with FAULT on every node; the folder its ranks dumped to."""
    dumps = tmp_path / f"dumps-{fault}"
    dumps.mkdir()
    env = {"TORCH_FR_BUFFER_SIZE": "2000", "HANG_PORT": "29620"}
    with cluster(nodes(WORLD)) as c:
        ranks = [c.popen(i, [sys.executable, JOB, fault, str(i), str(WORLD), str(dumps)], env=env)
                 for i in range(WORLD)]
        for proc in ranks:   # each ends on its own: the process group's timeout, then its dump
            proc.communicate(timeout=scaled(60))
    return dumps


def inspect(dumps: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "netcheck", "inspect", "--traces", str(dumps), "--world-size",
                           str(WORLD), "--json", "-"], capture_output=True, text=True, timeout=scaled(60))
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, parse_report(done.stdout)


def hang(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["check"] == "job.hang"]


def test_a_rank_that_never_issues_the_collective_is_named_with_its_line(cluster, tmp_path):
    code, report = inspect(dumps_of(cluster, tmp_path, "skip"))
    (f,) = hang(report)
    assert (code, f["kind"], f["nodes"]) == (2, "behind", [CULPRIT]), f
    assert "never issued gloo:all_reduce #6 of process group 0 (default_pg), which rank(s) 0, 1 wait in" in f["summary"]
    assert "hangjob.py:" in f["summary"]          # the line the others wait at
    assert f"rank {CULPRIT} (trace_rank_{CULPRIT}): last issued #5 gloo:all_reduce at " in f["evidence"][0]


def test_a_rank_that_issues_another_size_is_a_desync(cluster, tmp_path):
    """gloo's receiving side of the mismatch aborts (gloo::EnforceNotMet: "Received data size
    doesn't match expected size"), so rank 1 leaves no dump: the desync is told from ranks 0
    and 2, and rank 1 is named apart."""
    code, report = inspect(dumps_of(cluster, tmp_path, "size"))
    by_kind = {f["kind"]: f for f in hang(report)}
    assert code == 2 and set(by_kind) == {"desync", "no_trace"}, hang(report)
    assert by_kind["desync"]["nodes"] == [0, CULPRIT]
    assert f"rank(s) {CULPRIT} gloo:all_reduce [[2000]]" in by_kind["desync"]["summary"]
    assert "rank(s) 0 gloo:all_reduce [[1000]]" in by_kind["desync"]["summary"]
    assert (by_kind["no_trace"]["severity"], by_kind["no_trace"]["nodes"]) == ("warn", [1])


def test_a_hang_in_a_subgroup_names_the_subgroup(cluster, tmp_path):
    code, report = inspect(dumps_of(cluster, tmp_path, "subgroup"))
    (f,) = hang(report)
    assert (code, f["kind"], f["nodes"]) == (2, "behind", [CULPRIT]), f
    assert "#2 of process group 1" in f["summary"]


def test_a_killed_rank_leaves_no_trace_and_is_named(cluster, tmp_path):
    dumps = dumps_of(cluster, tmp_path, "killed")
    assert sorted(p.name for p in dumps.iterdir()) == ["trace_rank_0", "trace_rank_1"]
    code, report = inspect(dumps)
    (f,) = hang(report)
    assert (code, f["severity"], f["kind"], f["nodes"]) == (2, "fail", "no_trace", [CULPRIT]), f
