"""The host's own work past 10,000 ranks, in the suite: benchmarks/scale.py --in-process at 1,280
nodes of 8 torchrun workers (10,240 ranks, more than the 10,000 nodes a socket run proves),
every member's records decoded and judged by the host's own functions in this process, with
the planted faults named each under its check and nothing else (scale.judge). The sizes up to
MAX_RANKS are benchmarks (benchmarks/RESULTS.md, "Scale"), not tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import scale  # noqa: E402  (benchmarks/ is no package: its modules import each other by name)

NODES, NPROC = 1280, 8
PLANTED = ["clock", "duplicate", "env", "lost", "mesh"]   # "missing": torchrun starts no worker before every node


def test_the_host_judges_10240_ranks_in_one_process_and_names_the_planted_faults(tmp_path):
    result = scale.in_process(NODES, f"sample:{scale.MESH_SAMPLE_PEERS}", NPROC, tmp_path)
    assert result["problems"] == [] and result["ok"], result
    assert result["ranks"] == NODES * NPROC == result["seated"], result
    assert result["faults"] == PLANTED and result["verdict"] == "fail", result
    assert result["joiners_see_the_seating"], result
