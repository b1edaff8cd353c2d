"""`netcheck local`, the node-local mode a launcher's gate runs (Slurm's HealthCheckProgram, which
slurmd kills at 60 s; node-problem-detector's plugin), on a real namespace: what it costs on a
large node, as a fresh process (Python's start and every import included), and its exit."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cluster import NodeSpec
from nodes import parse_report, scaled
from sysfs_fixtures import build

pytestmark = pytest.mark.root_required

INTERFACES = 64


def test_the_node_local_mode_ends_in_seconds_on_a_node_with_64_interfaces_and_rdma_ports(cluster, tmp_path):
    """64 interfaces with an address each besides eth0, and an HGX node's RDMA tree (8 GPUs, 10
    ports): the whole run, a fresh interpreter's start included, under 10 s on a busy 2-core
    machine; every interface and port read."""
    root = build(tmp_path / "fx", "hgx")
    with cluster([NodeSpec()]) as c:
        # veth pairs, both ends in the node (this kernel has no dummy interfaces), each with an address
        lines = [f"link add nc{k} type veth peer name nc{k}p\naddr add 198.19.{k}.1/25 dev nc{k}\n"
                 f"addr add 198.19.{k}.129/25 dev nc{k}p\nlink set nc{k} up\nlink set nc{k}p up"
                 for k in range(INTERFACES // 2)]
        subprocess.run(["ip", "netns", "exec", c.nodes[0].ns, "ip", "-batch", "-"], input="\n".join(lines) + "\n",
                       text=True, check=True)
        start = time.monotonic()
        done = c.run(0, [sys.executable, "-m", "netcheck", "local", "--json", "-"], timeout=scaled(30),
                     env={"NETCHECK_TEST_RDMA_ROOT": str(root)})
        took = time.monotonic() - start
    report = parse_report(done.stdout)
    facts = report["nodes"][0]["facts"]
    assert took < scaled(10), took
    assert len(facts["nics"]["nics"]) == INTERFACES + 2 and len(facts["rdma"]["ports"]) == 10, facts["nics"]
    assert done.returncode in (0, 1) and report["unfinished"] is None, done.stderr
    print(f"netcheck local: {took:.2f} s wall, {report['timings']['local']:.2f} s in its look")
