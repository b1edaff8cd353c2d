"""netcheck's metrics where operators read them: a real node exporter's textfile collector
serving a file netcheck wrote (the alerting rules on them: tests/test_prom_rules.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from nodes import free_port, scaled
from prom import samples, served

REPO = Path(__file__).parents[1]


def test_the_node_exporter_serves_netchecks_textfile(tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir()
    # A real netcheck run writes the file: an inspect of an endpoint where nothing listens.
    done = subprocess.run([sys.executable, "-m", "netcheck", "inspect", "--rdzv", f"127.0.0.1:{free_port()}",
                           "--prom", str(folder / "netcheck.prom")], cwd=REPO, capture_output=True,
                          text=True, timeout=scaled(60))
    assert done.returncode == 2, done.stdout + done.stderr
    body, _ = served(folder)
    assert re.search(r'^netcheck_verdict\{severity="fail"\} 1$', body, re.M), body
    assert re.search(r'^netcheck_check\{check="job.store",severity="fail"\} 1$', body, re.M), body
    assert re.search(r"^node_textfile_scrape_error 0$", body, re.M), body


def test_a_one_machine_run_has_every_nodes_series_served(tmp_path):
    """Three nodes on 127.0.0.1, each hostname this machine's (the demo without root): the
    host's file passes promtool with no series twice, and the exporter serves every node's
    series, dropping none as "collected before with the same name and label values"."""
    folder = tmp_path / "textfile"
    folder.mkdir()
    port, nnodes = free_port(), 3
    argv = lambda i: [sys.executable, "-m", "netcheck", "--rdzv", f"127.0.0.1:{port}", "--nnodes", str(nnodes),  # noqa: E731
                      "--node-rank", str(i), "--timeout", str(scaled(60)),
                      *(["--prom", str(folder / "netcheck.prom")] if i == 0 else [])]
    procs = [subprocess.Popen(argv(i), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(nnodes)]
    outputs = [p.communicate(timeout=scaled(60) + 30) for p in procs]
    assert [p.returncode in (0, 1, 2) for p in procs] == [True] * nnodes, outputs
    text = (folder / "netcheck.prom").read_text()
    written = samples(text)   # promtool check metrics, and no series twice
    hostnames = {dict(labels)["node"] for (name, labels) in written if name == "netcheck_node_faulty"}
    assert len(hostnames) == 1, hostnames   # every node is this machine
    body, log = served(folder)
    assert "collected before" not in log, log
    assert re.search(r"^node_textfile_scrape_error 0$", body, re.M), body
    faulty = re.findall(r'^netcheck_node_faulty\{node="[^"]*",node_rank="(\d+)"\} [01]$', body, re.M)
    assert sorted(faulty) == [str(r) for r in range(nnodes)], body
    pairs = re.findall(r'^netcheck_bw_pair_busbw_gbps\{.*node_rank="(\d)",.*peer_node_rank="(\d)"\} \S+$', body, re.M)
    assert sorted(pairs) == [("0", "1"), ("0", "2"), ("1", "2")], body
    served_lines = [line for line in body.splitlines() if line.startswith("netcheck_")]
    assert len(served_lines) == len(written), (served_lines, written)

