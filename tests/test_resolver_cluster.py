"""A nameserver that never answers (issue 35 item 1, issue 39 case 5), on real namespaces.

Every node's /etc/nsswitch.conf asks /etc/hosts, then DNS, as a stock machine does, and its
/etc/resolv.conf names an address in the test subnet that no machine holds: every query to
it waits out the resolver's timeout, the usual state of an isolated cluster whose DNS is
down. /etc/hosts knows every node, so a healthy cluster must pass (a warning naming the
nameserver is right), never blame its host as hung; a name only DNS knows must be said not
to resolve because the nameserver did not answer, not because the name does not exist.
"""

from __future__ import annotations

import pytest

from cluster import NETNS_ETC, _write_in_place
from faults import assert_survivor, finish_each, nodes, ranked_args
from nodes import CLUSTER_TIMEOUT, PORT, start

pytestmark = pytest.mark.root_required

DEAD_NAMESERVER = "198.18.0.250"   # in the nodes' subnet, held by no machine: no answer, ever


def _dead_nameserver(c) -> None:
    """Every node asks /etc/hosts, then DNS, and its DNS is a nameserver that never answers
    (the resolver's own defaults: 5 s a query, 2 attempts)."""
    for node in c.nodes:
        _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
        _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {DEAD_NAMESERVER}\n")


def _silent_resolver(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["check"] == "rdzv.resolve" and f["kind"] == "resolver_silent"]


def test_a_healthy_cluster_behind_a_dead_nameserver_passes_and_names_it(cluster, tmp_path):
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(3)) as c:
        _dead_nameserver(c)
        runs = [start(c, i, ranked_args(i, 3, timeout), tmp_path) for i in range(3)]
        finish_each(runs, timeout + 10)
    for run in runs:
        report = assert_survivor(run, timeout, codes=(0, 1))
        assert not [f for f in report["findings"] if f["severity"] == "fail"], report["findings"]
        (silent,) = _silent_resolver(report)
        assert silent["severity"] == "warn" and silent["nodes"] == [report["node_rank"]], silent
        assert DEAD_NAMESERVER in silent["evidence"][0] and "/etc/resolv.conf" in silent["evidence"][0]
    host = runs[0].report
    assert [n["hostname"] for n in host["nodes"]] == ["node0", "node1", "node2"]


def test_a_name_only_dns_knows_behind_a_dead_nameserver_is_said_unanswered(cluster, tmp_path):
    with cluster(nodes(2)) as c:
        _dead_nameserver(c)
        run = start(c, 1, ["--rdzv", f"rdzv.example:{PORT}", "--nnodes", "2", "--node-rank", "1",
                           "--timeout", str(CLUSTER_TIMEOUT)], tmp_path)
        finish_each([run], CLUSTER_TIMEOUT + 10)
    report = assert_survivor(run, CLUSTER_TIMEOUT)
    (failed,) = [f for f in report["findings"] if f["check"] == "rdzv.resolve" and f["severity"] == "fail"]
    assert failed["kind"] == "resolver_silent" and failed["nodes"] == [1], failed
    assert any(DEAD_NAMESERVER in line for line in failed["evidence"]), failed


UNROUTED_NAMESERVER = "198.19.250.53"   # on no network these nodes have a route to


def test_a_healthy_cluster_behind_an_unroutable_nameserver_passes_without_a_word_of_waiting(cluster, tmp_path):
    """resolv.conf names an address no route leads to (an image built elsewhere, an air-gapped
    site): every lookup /etc/hosts cannot answer fails at once, none waits for it, so a healthy
    cluster whose names are all in /etc/hosts exits 0 (issue 49 item 5), unlike a silent one."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(3)) as c:
        for node in c.nodes:
            _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
            _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {UNROUTED_NAMESERVER}\n")
        runs = [start(c, i, ranked_args(i, 3, timeout), tmp_path) for i in range(3)]
        finish_each(runs, timeout + 10)
    for run in runs:
        report = assert_survivor(run, timeout, codes=(0,))
        assert not _silent_resolver(report), report["findings"]
