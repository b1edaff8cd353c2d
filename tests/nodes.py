"""Running netcheck on the nodes of a simulated cluster and reading what each reported."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from jsonschema import Draft202012Validator

import emitted
from cluster import Cluster
from forked import can_fork

PORT = 29500
# The one multiplier for time in the cluster tests: every --timeout a test gives netcheck,
# and every wait it allows beyond one, is scaled(SECONDS). The figures are sized for a busy
# 2-core machine; on a slower one set NETCHECK_TEST_TIME_SCALE (say 2). Tests otherwise wait
# on events (a line, a file, a store key), never on a guess of how long torch takes.
TIME_SCALE = float(os.environ.get("NETCHECK_TEST_TIME_SCALE", "1"))


def scaled(seconds: float) -> float:
    return seconds * TIME_SCALE


# What a netcheck process may take beyond its --timeout: Python's start-up before the
# deadline starts and its shutdown, on a busy 2-core machine.
GRACE = scaled(5.0)
# --timeout for a test cluster of four or more nodes started at once (or two started one
# after the other): the host's join share, half of it, must hold every node's torch import
# and sign-in while the suite's other worker runs a cluster of its own and a busy loop
# shares the 2 cores. Measured at 0029870 so: the joiners of a 4-node cluster had not
# signed in 15 s after they started, past a 12 s share. Where the rendezvous closes on an
# event (--nnodes, every node in), the room costs nothing when the nodes come sooner.
CLUSTER_TIMEOUT = scaled(40)
SKIP_BANDWIDTH = ["--skip", "bandwidth"]
# A healthy job's environment, hangs included: diagnosable on every torch with a flight recorder
# (2.2 on; before 2.11 it is off unless set). torch 2.1 has none, and env.flight_recorder rightly
# warns there whatever is set (make compat runs the healthy tests on 2.1).
DIAGNOSABLE = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
TORCH_RELEASE = tuple(int(x) for x in importlib.metadata.version("torch").split("+")[0].split(".")[:2])
HEALTHY_WARNINGS = set() if TORCH_RELEASE >= (2, 2) else {"env.flight_recorder"}
# The speed verdicts a healthy namespace cluster may rightly get: its nodes' gloo workers share
# this machine's cores (and the suite's other tests), so a slow pair or a straggler is the truth
# of a busy 2-core machine, not what a test that is about something else is about.
SPEED_VERDICTS = {"bw.straggler", "bw.pair"}
SCHEMA_PATH = Path(__file__).parents[1] / "schema" / "netcheck.report.schema.json"
SCHEMA = Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def read_report(path: Path) -> dict:
    """A JSON report netcheck wrote, validated against the schema file (it raises if not)."""
    return parse_report(path.read_text())


def parse_report(text: str) -> dict:
    """A JSON report netcheck printed (`--json -`): validated, and its findings recorded for
    the registry's check at the end of the suite."""
    report = json.loads(text)
    SCHEMA.validate(report)
    emitted.record_findings(report["findings"])
    return report


def free_port() -> int:
    """A loopback port nothing listens on: bound for a moment, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    progress: list[str] = field(default_factory=list)   # stderr lines, when it is a terminal
    terminal: threading.Thread | None = None            # reads them

    @property
    def report(self) -> dict:
        return read_report(self.json_path)

    def read_terminal(self, fd: int) -> None:
        with open(fd, "rb", buffering=0) as terminal:
            pending = b""
            while True:
                try:
                    data = terminal.read(4096)
                except OSError:  # EIO: every writer has closed the pty
                    data = b""
                if not data:
                    break
                *lines, pending = (pending + data).split(b"\n")
                self.progress += [line.decode(errors="replace").rstrip("\r") for line in lines]
        self.stderr = "\n".join(self.progress + [pending.decode(errors="replace")])

    def wait_for_progress(self, prefix: str, timeout: float) -> str:
        """The first progress line that starts with `prefix`, within `timeout` s."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if line := next((ln for ln in self.progress if ln.startswith(prefix)), None):
                return line
            assert self.proc.poll() is None, f"node{self.node} ended first:\n" + "\n".join(self.progress)
            time.sleep(0.05)
        raise AssertionError(f"node{self.node}: no {prefix!r} line in {timeout} s:\n" + "\n".join(self.progress))

    def findings(self, check: str, severity: str | None = None) -> list[dict]:
        return [f for f in self.report["findings"]
                if f["check"] == check and (severity is None or f["severity"] == severity)]


def start(c: Cluster, i: int, args: list[str], tmp: Path, env: dict | None = None,
          wrapper: tuple[str, ...] = (), bandwidth: bool = False, terminal: bool = False,
          fresh: bool = False) -> NodeRun:
    """netcheck on node i, its JSON report in tmp; `wrapper` is argv that execs the rest.

    The run is forked from this process, torch already loaded (tests/forked.py), unless it
    is `fresh` (a new interpreter that loads torch as a user's run does: for a test that acts
    during that load) or its wrapper or environment changes how Python starts.

    The bandwidth phase is skipped unless asked for (or the args choose phases): it costs
    seconds per run and has tests of its own. With `terminal`, stderr is a terminal (a pty),
    as a person's is, so netcheck prints its progress lines there (`NodeRun.progress`)."""
    json_path = tmp / f"node{i}-{time.monotonic_ns()}.json"
    chosen = bandwidth or "--skip" in args or "--only" in args
    args = [*args, *([] if chosen else SKIP_BANDWIDTH), "--json", str(json_path)]
    if not fresh and can_fork(env, wrapper):
        def launch(**kw):
            return c.fork_netcheck(i, args, env=env, **kw)
    else:
        def launch(**kw):
            return c.popen(i, [*wrapper, sys.executable, "-m", "netcheck", *args], env=env, **kw)
    if not terminal:
        return NodeRun(i, launch(), json_path, time.monotonic())
    reader, writer = pty.openpty()
    try:
        run = NodeRun(i, launch(stderr=writer), json_path, time.monotonic())
    finally:
        os.close(writer)
    run.terminal = threading.Thread(target=run.read_terminal, args=(reader,), daemon=True)
    run.terminal.start()
    return run


def finish(run: NodeRun, timeout: float) -> NodeRun:
    """Wait for a node's netcheck; a run past `timeout` is a hang and fails the test."""
    try:
        run.stdout, err = run.proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.proc.kill()
        run.stdout, err = run.proc.communicate()
        _read_stderr(run, err)
        raise AssertionError(f"netcheck on node {run.node} hung past {timeout} s:\n{run.stderr}") from None
    run.rc = run.proc.returncode
    run.seconds = time.monotonic() - run.started
    _read_stderr(run, err)
    return run


def _read_stderr(run: NodeRun, piped: str | None) -> None:
    if run.terminal is None:
        run.stderr = piped
    else:
        run.terminal.join(timeout=5)  # the terminal reader sets run.stderr when the pty closes


def finish_all(runs: list[NodeRun], timeout: float) -> list[NodeRun]:
    return [finish(r, timeout) for r in runs]


def explain(runs: list[NodeRun]) -> str:
    """Everything a failed assertion needs: each node's exit code and text report."""
    return "\n".join(f"--- node {r.node} rc={r.rc}\n{r.stdout}\n{r.stderr}" for r in runs)


def bind_mounted(source: Path, target: Path) -> tuple[str, ...]:
    """A wrapper that shows `source` at `target` to this process only (its own mount
    namespace, which `ip netns exec` made): per-node file contents at one shared path."""
    return ("sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(source), str(target))
