"""The host at cluster scale, in the suite: benchmarks/scale.py at 1,100 nodes, past the 1,024
items a list holds unless it declares more (the boundary the host's alive list once broke at,
issue 38): a real netcheck host and 1,099 simulated joiners on its real store, with six faults
planted, one a node lost after its seat. The bigger sizes are benchmarks (benchmarks/RESULTS.md,
"Scale"), not tests."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nodes import read_report, scaled

REPO = Path(__file__).parents[1]
NODES = 1100
KEYS = {"nodes", "roster_s", "report_s", "host_cpu_s", "host_peak_rss_mb", "report_bytes", "verdict", "ok"}


@pytest.mark.root_required
def test_a_cluster_past_1024_nodes_has_its_planted_faults_named_and_nothing_else(tmp_path):
    out, raw = tmp_path / "scale.json", tmp_path / "raw"
    proc = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "scale.py"), "--nodes", str(NODES),
                             "--json", str(out), "--keep", str(raw)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=scaled(300))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the benchmark's cluster tears itself down on SIGTERM
        output, _ = proc.communicate(timeout=scaled(60))
        pytest.fail(f"benchmarks/scale.py --nodes {NODES} ran past {scaled(300)} s:\n{output[-5000:]}")
    result = json.loads(out.read_text()) if out.exists() else {}
    assert proc.returncode == 0 and result.get("ok"), output[-5000:]
    assert KEYS <= set(result) and result["nodes"] == NODES and result["verdict"] == "fail", result
    host = read_report(raw / "host.json")
    assert len(host["nodes"]) == NODES - 1, "every node that came is in the report, the duplicate aside"
