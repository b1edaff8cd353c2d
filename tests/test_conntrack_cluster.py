"""Connection-tracking tables on real network namespaces: a node behind a stateful firewall (its
rules accept every new connection; the kernel tracks each) whose table is full, filled for real
in that node's namespace alone (tests/conntrack_fill.py: the count is the namespace's, the limit
the machine's, never changed). The kernel then drops every new connection into and out of that
node unanswered, as a firewall's DROP looks: netcheck names the table on that node with its
count, never a firewall. A table with room for netcheck but not for the job judged is named
before the job meets it; the same firewall with room stays quiet."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cluster import CONNTRACK_FILL, NodeSpec
from nodes import CLUSTER_TIMEOUT, GRACE, PORT, explain, finish_all, scaled, start

pytestmark = pytest.mark.root_required

FILL = str(CONNTRACK_FILL)
LIMIT_FILE = Path("/proc/sys/net/netfilter/nf_conntrack_max")
FIREWALL_FIXES = ("open the nodes' firewalls", "in the host's firewall")   # mesh.connect's, rdzv.listen's


def args(i: int, nproc: int = 1) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", "3", "--node-rank", str(i), "--timeout", str(CLUSTER_TIMEOUT),
            "--nproc-per-node", str(nproc)]


def limit() -> int:
    if not LIMIT_FILE.exists():
        pytest.skip("no nf_conntrack in this kernel")
    return int(LIMIT_FILE.read_text())


def line_of(proc: subprocess.Popen, word: str, timeout: float) -> str:
    """The filler's next line, within `timeout`: it must start with `word`."""
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert read and read[0].startswith(word), (word, read, proc.poll())
    return read[0]


def firewall_blamed(report: dict) -> list[dict]:
    return [f for f in report["findings"] if any(fix in f["fix"] for fix in FIREWALL_FIXES)]


def test_a_full_table_on_the_host_is_named_there_with_its_count_not_its_firewall(cluster, tmp_path):
    """node0 hosts; its table is full: its own connect to its port and every joiner's probe go
    unanswered. The host names its table (host.conntrack table_full, its count and limit, its own
    unanswered connect as evidence), not its firewall (rdzv.listen firewalled before); the
    joiners, which cannot see its table, say so beside the firewall."""
    size = limit()
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.stateful_firewall(0)
        c.fill_conntrack(0, 0)
        runs = finish_all([start(c, i, args(i), tmp_path) for i in range(3)], CLUSTER_TIMEOUT + GRACE)
    host = runs[0]
    assert host.rc == 2 and host.report["faulty_nodes"] == ["node0"], explain(runs)
    (found,) = host.findings("host.conntrack")
    assert (found["severity"], found["kind"], found["nodes"]) == ("fail", "table_full", [0]), found
    assert f"is full ({size} of {size} entries)" in found["summary"], found
    assert "the job judged: 3 ranks, 3 node(s) x 1 process(es)" in found["summary"], found
    assert any(e.startswith("connect to 198.18.0.10 (ipv4): filtered") for e in found["evidence"]), found
    assert "sysctl -w net.netfilter.nf_conntrack_max=" in found["fix"] and "CT --notrack" in found["fix"], found
    assert not host.findings("rdzv.listen") and not firewall_blamed(host.report), explain(runs)
    for joiner in runs[1:]:
        (reach,) = joiner.findings("rdzv.reach", "fail")
        assert "filtered" in reach["summary"] and "host.conntrack" in reach["fix"], reach


def test_a_joiner_whose_table_is_full_names_its_own_table_not_the_hosts_firewall(cluster, tmp_path):
    """node2's table is full: its probe of the endpoint goes unanswered (its kernel drops its own
    SYN). It names its table, with that probe as evidence, not the host's firewall; the host
    names it missing, and healthy node1 passes its own checks: both exit 4, naming node2 (issue 65)."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.stateful_firewall(2)
        c.fill_conntrack(2, 0)
        runs = finish_all([start(c, i, args(i), tmp_path) for i in range(3)], CLUSTER_TIMEOUT + GRACE)
    host, node2 = runs[0], runs[2]
    assert node2.rc == 2 and node2.report["faulty_nodes"] == ["node2"], explain(runs)
    (found,) = node2.findings("host.conntrack")
    assert (found["severity"], found["kind"], found["nodes"]) == ("fail", "table_full", [2]), found
    assert found["evidence"][-1].startswith("connect to 198.18.0.10 (ipv4): filtered"), found
    assert not node2.findings("rdzv.reach") and not firewall_blamed(node2.report), explain(runs)
    assert [(f["kind"], f["nodes"]) for f in host.findings("rdzv.join", "fail")] == [("missing", [2])], explain(runs)
    # node2 never reached the store: named by rank (no hostname to exclude it by) by both
    assert [(r.rc, r.report["fault"]["nodes"]) for r in runs[:2]] == [(4, [2])] * 2, explain(runs)


def test_a_table_that_fills_once_a_node_joined_explains_its_mesh_not_a_firewall(cluster, tmp_path):
    """node2 joins with 64 entries of room left; then its table fills (another service's
    connections, which keep it full: an entry that expires is taken again at once), before the
    mesh: every direction into and out of it goes unanswered. The
    host names node2's table, with the packets its kernel dropped and those directions as
    evidence, and no mesh.connect failure asks to open a firewall; node0 and node1 are healthy."""
    size = limit()
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.stateful_firewall(2)
        filler = c.popen(2, [sys.executable, FILL, "64", "--joined", str(PORT), "--wait", str(scaled(30)),
                             "--hold", str(CLUSTER_TIMEOUT + GRACE)])
        line_of(filler, "ready", scaled(60))
        early = [start(c, i, args(i), tmp_path) for i in (0, 2)]
        line_of(filler, "full", scaled(35))   # node2's store connection up, its table full: node1 may come
        runs = finish_all([early[0], start(c, 1, args(1), tmp_path), early[1]], CLUSTER_TIMEOUT + GRACE)
        c.kill(filler)
    host, node2 = runs[0], runs[2]
    assert host.rc == 4 and host.report["faulty_nodes"] == ["node2"], explain(runs)
    (found,) = host.findings("host.conntrack", "fail")
    assert (found["kind"], found["nodes"]) == ("table_full", [2]), found
    assert f"({size} of {size} entries)" in found["summary"] and "went unanswered" in found["summary"], found
    assert "packet(s) dropped for want of an entry meanwhile" in found["evidence"][0], found
    directions = {e.split(":")[0] for e in found["evidence"][1:]}
    assert directions == {"node0 -> node2", "node1 -> node2", "node2 -> node0", "node2 -> node1"}, found
    assert not host.findings("mesh.connect", "fail") and not firewall_blamed(host.report), explain(runs)
    # nor is an interface of node2 blamed: the table dropped the connects, whichever the interface
    assert not [f for f in host.report["findings"] if f["check"].startswith("nic.") and f["severity"] != "pass"]
    assert node2.rc == 2 and [f["kind"] for f in node2.findings("host.conntrack", "fail")] == ["table_full"]
    assert not firewall_blamed(node2.report), explain(runs)
    assert runs[1].rc == 4 and runs[1].report["faulty_nodes"] == ["node2"], explain(runs)


def test_a_table_with_room_for_netcheck_but_not_the_job_is_named_before_the_job_meets_it(cluster, tmp_path):
    """node2 has 150 entries of room: netcheck's own run takes about 15, and passes everywhere;
    the job judged (3 nodes x 8 processes) takes at least 164 there (its 8 store clients, gloo's
    connection from each of its 8 ranks to the 16 elsewhere, 28 between its own)."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        c.stateful_firewall(2)
        c.fill_conntrack(2, 150)
        runs = finish_all([start(c, i, args(i, 8), tmp_path) for i in range(3)], CLUSTER_TIMEOUT + GRACE)
    host = runs[0]
    assert host.rc == 4 and host.report["faulty_nodes"] == ["node2"], explain(runs)
    (found,) = host.findings("host.conntrack", "fail")
    assert (found["kind"], found["nodes"]) == ("no_room", [2]), found
    assert "at least 164" in found["summary"] and "24 ranks, 3 node(s) x 8 process(es)" in found["summary"], found
    assert [f["severity"] for f in host.findings("mesh.connect")] == ["pass"], explain(runs)


def test_the_same_firewall_with_room_in_its_tables_stays_quiet(cluster, tmp_path):
    """node0 and node2 behind the stateful firewall, node2's table holding 1,000 entries of
    another service's: the tables hold the job's connections, and nothing is said but that."""
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        for i in (0, 2):
            c.stateful_firewall(i)
        c.fill_conntrack(2, limit() - 1000)
        runs = finish_all([start(c, i, args(i), tmp_path) for i in range(3)], CLUSTER_TIMEOUT + GRACE)
    assert [r.rc for r in runs] == [0, 0, 0], explain(runs)
    (found,) = runs[0].findings("host.conntrack")
    # node1 has no stateful firewall: its table tracks nothing, and is not judged
    assert (found["severity"], found["nodes"]) == ("pass", [0, 2]), found
    assert re.match(r"node2: nf_conntrack_count 10\d\d of", found["evidence"][1]), found
