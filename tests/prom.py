"""Reading netcheck's Prometheus text back, the way the Prometheus ecosystem does.

Every exposition a test reads goes through `promtool check metrics` (Prometheus's own lint,
from Debian's prometheus package, which `make` installs) and prometheus_client's parser.
Without promtool the test skips on a machine without root (it cannot install it) and fails
where `make` could have (root, CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodes import free_port, scaled

PROMTOOL = shutil.which("promtool")


def require(tool: str | None, name: str) -> str:
    if tool:
        return tool
    if os.geteuid() == 0 or os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{name} is missing: `make` installs it (apt)", pytrace=False)
    pytest.skip(f"{name} is missing and this machine has no root to install it")


def promtool_check(text: str) -> None:
    """No lint problem at all: promtool prints each on stderr and exits non-zero."""
    done = subprocess.run([require(PROMTOOL, "promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), \
        done.stdout + done.stderr


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a text exposition: (name, sorted labels) -> value; no duplicates."""
    promtool_check(text)
    seen: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("netcheck_") and family.type == "gauge" and family.documentation
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in seen, f"duplicate series {key}"
            seen[key] = s.value
    return seen


def series(text: str, name: str) -> dict[tuple, float]:
    return {labels: v for (n, labels), v in samples(text).items() if n == name}


def served(folder: Path) -> tuple[str, str]:
    """What a real node exporter's textfile collector serves from `folder` on its first scrape,
    and what it logged."""
    exporter = require(shutil.which("prometheus-node-exporter"), "prometheus-node-exporter")
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
        _, log = server.communicate(timeout=10)
    return body, log
