"""Running netcheck on the nodes of a simulated cluster and reading what each reported."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cluster import Cluster

PORT = 29500


@dataclass
class NodeRun:
    """One netcheck process on one node."""

    node: int
    proc: subprocess.Popen
    json_path: Path
    started: float
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0

    @property
    def report(self) -> dict:
        return json.loads(self.json_path.read_text())

    def findings(self, check: str, severity: str | None = None) -> list[dict]:
        return [f for f in self.report["findings"]
                if f["check"] == check and (severity is None or f["severity"] == severity)]


def start(c: Cluster, i: int, args: list[str], tmp: Path, env: dict | None = None) -> NodeRun:
    json_path = tmp / f"node{i}-{time.monotonic_ns()}.json"
    argv = [sys.executable, "-m", "netcheck", *args, "--json", str(json_path)]
    return NodeRun(i, c.popen(i, argv, env=env), json_path, time.monotonic())


def finish(run: NodeRun, timeout: float) -> NodeRun:
    """Wait for a node's netcheck; a run past `timeout` is a hang and fails the test."""
    try:
        run.stdout, run.stderr = run.proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.proc.kill()
        run.stdout, run.stderr = run.proc.communicate()
        raise AssertionError(f"netcheck on node {run.node} hung past {timeout} s:\n{run.stderr}")
    run.rc = run.proc.returncode
    run.seconds = time.monotonic() - run.started
    return run


def finish_all(runs: list[NodeRun], timeout: float) -> list[NodeRun]:
    return [finish(r, timeout) for r in runs]


def explain(runs: list[NodeRun]) -> str:
    """Everything a failed assertion needs: each node's exit code and text report."""
    return "\n".join(f"--- node {r.node} rc={r.rc}\n{r.stdout}\n{r.stderr}" for r in runs)
