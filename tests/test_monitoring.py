"""netcheck's metrics where operators read them: a real node exporter's textfile collector
serving a file netcheck wrote, and the README's alerts as Prometheus rules promtool accepts."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from nodes import free_port, scaled
from prom import PROMTOOL, require

REPO = Path(__file__).parents[1]
RULES = REPO / "scripts" / "netcheck.rules.yml"


def test_the_node_exporter_serves_netchecks_textfile(tmp_path):
    exporter = require(shutil.which("prometheus-node-exporter"), "prometheus-node-exporter")
    folder = tmp_path / "textfile"
    folder.mkdir()
    # A real netcheck run writes the file: an inspect of an endpoint where nothing listens.
    done = subprocess.run([sys.executable, "-m", "netcheck", "inspect", "--rdzv", f"127.0.0.1:{free_port()}",
                           "--prom", str(folder / "netcheck.prom")], cwd=REPO, capture_output=True,
                          text=True, timeout=scaled(60))
    assert done.returncode == 2, done.stdout + done.stderr
    port = free_port()
    server = subprocess.Popen([exporter, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                               "--collector.textfile", f"--collector.textfile.directory={folder}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + scaled(30)
        while True:  # the event: the exporter accepts connections
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < end, server.stderr.read() if server.poll() else ""
                time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert re.search(r'^netcheck_verdict\{severity="fail"\} 1$', body, re.M), body
    assert re.search(r'^netcheck_check\{check="job.store",severity="fail"\} 1$', body, re.M), body
    assert re.search(r"^node_textfile_scrape_error 0$", body, re.M), body


def test_the_readmes_alerts_are_rules_promtool_accepts():
    done = subprocess.run([require(PROMTOOL, "promtool"), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and "SUCCESS: 2 rules found" in done.stdout, done.stdout + done.stderr
    readme = (REPO / "README.md").read_text()
    documented = re.search(r"Alert on `([^`]+)` or\s+`([^`]+)`", readme).groups()
    exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert list(documented) == exprs
