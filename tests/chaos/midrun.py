"""What the mid-run faults need beside the catalog (issue 62): nodes whose progress lines carry
the moment the harness saw them, the moment a node's bandwidth workers are up, and firewall
rules that land at once (one iptables-restore per family).

The oracle reads time from these lines: a rule that was in place before a node printed
"goodbye..." cannot have let that node hear the host's verdict. A line is seen a little after
it is printed (the pty, the reader thread); LINE_LAG bounds that, and every comparison the
oracle makes gives it away (`landed + LINE_LAG < seen`), so a late look never binds a node
that may have been done.
"""

from __future__ import annotations

import math
import os
import pty
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from nodes import SKIP_BANDWIDTH, NodeRun

# How long after netcheck prints a progress line the harness may first see it: the pty's
# buffer, the reader thread's turn on the GIL beside the runner's own work. Measured on this
# 2-core machine, 200 lines each, alone and under two busy loops (tests/test_chaos_oracle.py,
# test_a_line_is_seen_well_within_LINE_LAG): at most 0.017 and 0.032 s. 0.5 s is what the
# oracle gives away.
LINE_LAG = 0.5
GOODBYE = "netcheck: goodbye..."
BANDWIDTH = "netcheck: bandwidth..."
ROW = "netcheck: bandwidth "   # a measured row: "netcheck: bandwidth all all_reduce 1024 B: busbw ..."
WORKER = "netcheck.bandwidth.worker"


class TimedLines(list):
    """A node's progress lines (NodeRun.progress), each with the monotonic time the harness saw it."""

    def __init__(self, *a):
        super().__init__(*a)
        self.times: list[float] = [time.monotonic()] * len(self)

    def __iadd__(self, lines):
        now = time.monotonic()
        lines = list(lines)
        super().extend(lines)
        self.times.extend([now] * len(lines))
        return self

    def first(self, predicate) -> float:
        """When the first line for which `predicate` holds was seen (inf: never)."""
        return next((t for line, t in zip(list(self), list(self.times)) if predicate(line)), math.inf)


def seen_at(run: NodeRun, line: str) -> float:
    """When `line` was first seen on the node (inf: never, or a node without timed lines)."""
    progress = run.progress
    return progress.first(lambda ln: ln == line) if isinstance(progress, TimedLines) else math.inf


def first_row_at(runs) -> float:
    """When any node first printed a measured row of the sweep (inf: none did)."""
    return min((r.progress.first(lambda ln: ln.startswith(ROW) and " B: " in ln)
                for r in runs if isinstance(r.progress, TimedLines)), default=math.inf)


def start_timed(c, i: int, args: list[str], tmp: Path, bandwidth: bool, wrapper: tuple[str, ...] = (),
                fresh: bool = True) -> NodeRun:
    """netcheck on node i as nodes.start(..., terminal=True) starts it, its progress lines timed
    (TimedLines) from the first: a new interpreter (`fresh`, as a user's run) or a fork of this
    process (torch already loaded)."""
    json_path = tmp / f"node{i}-{time.monotonic_ns()}.json"
    chosen = bandwidth or "--skip" in args or "--only" in args
    args = [*args, *([] if chosen else SKIP_BANDWIDTH), "--json", str(json_path)]
    reader, writer = pty.openpty()
    try:
        if fresh or wrapper:
            proc = c.popen(i, [*wrapper, sys.executable, "-m", "netcheck", *args], stderr=writer)
        else:
            proc = c.fork_netcheck(i, args, stderr=writer)
        run = NodeRun(i, proc, json_path, time.monotonic(), progress=TimedLines())
    finally:
        os.close(writer)
    run.terminal = threading.Thread(target=run.read_terminal, args=(reader,), daemon=True)
    run.terminal.start()
    return run


def workers_up(pid: int, port: int) -> bool:
    """Whether the netcheck process `pid` has a bandwidth worker connected to the store on `port`
    (its workers have imported torch and joined the sweep's rendezvous). Read from the worker's
    own /proc/PID/net (psutil reads the caller's namespace's)."""
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return False
    for child in children:
        try:
            if WORKER in " ".join(child.cmdline()) and _connected_to(child.pid, port):
                return True
        except psutil.Error:
            continue
    return False


def _connected_to(pid: int, port: int) -> bool:
    """Whether process `pid` holds an established TCP connection to remote port `port`."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return False
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        # rem_address is HEX_ADDR:HEX_PORT; state 01 is ESTABLISHED
        if any(r[3] == "01" and int(r[2].rsplit(":", 1)[1], 16) == port and r[9] in inodes for r in rows):
            return True
    return False


def node_processes(c, i: int) -> list[int]:
    """Every process in node i's namespace (its netcheck, the workers, a helper's)."""
    out = subprocess.run(["ip", "netns", "pids", c.nodes[i].ns], capture_output=True, text=True, timeout=10)
    return [int(p) for p in out.stdout.split() if p.isdigit()]


# ---------------------------------------------------------------------------------------------
# firewall rules that land mid-run

CHAINS = {"in": ("INPUT",), "out": ("OUTPUT",), "both": ("INPUT", "OUTPUT")}


def rule_specs(ports: str, target: str, port: int) -> list[list[str]]:
    """The rules of one chain, as an operator or a security agent writes them: no interface
    match, so loopback is included (the host's own store client reaches its store over lo).
    `ports`: "endpoint" (the store's port, either end), "ephemeral" (every TCP port but the
    endpoint, and UDP: the mesh's and the sweep's) or "all" (every packet)."""
    reject_tcp = ["-j", "REJECT", "--reject-with", "tcp-reset"]
    tcp_target = ["-j", "DROP"] if target == "DROP" else reject_tcp
    other_target = ["-j", "DROP"] if target == "DROP" else ["-j", "REJECT"]
    if ports == "endpoint":
        return [["-p", "tcp", "--dport", str(port), *tcp_target], ["-p", "tcp", "--sport", str(port), *tcp_target]]
    if ports == "ephemeral":
        return [["-p", "tcp", "-m", "multiport", "!", "--ports", str(port), *tcp_target], ["-p", "udp", *other_target]]
    if ports == "all":
        return [["-p", "tcp", *tcp_target], other_target]
    raise ValueError(ports)


def restore_input(chains: tuple[str, ...], specs: list[list[str]]) -> str:
    """iptables-restore's input: the rules first in each chain, every chain at once."""
    lines = ["*filter"]
    for chain in chains:
        # -I in reverse keeps the specs' order at the head of the chain.
        lines += [" ".join(["-I", chain, "1", *spec]) for spec in reversed(specs)]
    return "\n".join([*lines, "COMMIT", ""])


def land_rules(c, i: int, chains: tuple[str, ...], ports: str, target: str, port: int) -> None:
    """The rules in node i's namespace, both families, each family in one commit."""
    specs = rule_specs(ports, target, port)
    for restore in ("iptables-restore", "ip6tables-restore"):
        subprocess.run(["ip", "netns", "exec", c.nodes[i].ns, restore, "--noflush", "-w"],
                       input=restore_input(chains, specs), text=True, capture_output=True, timeout=10,
                       check=True)
