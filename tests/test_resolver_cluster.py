"""A nameserver that never answers (issue 35 item 1, issue 39 case 5), answers late (issue
63), or is turned away by the gateway (issue 49, and under torchrun's 4 ranks a node, issue 64),
on real namespaces.

Every node's /etc/nsswitch.conf asks /etc/hosts, then DNS, as a stock machine does, and its
/etc/resolv.conf names an address in the test subnet that no machine holds: every query to
it waits out the resolver's timeout, the usual state of an isolated cluster whose DNS is
down. /etc/hosts knows every node, so a healthy cluster must pass (a warning naming the
nameserver is right), never blame its host as hung; a name only DNS knows must be said not
to resolve because the nameserver did not answer, not because the name does not exist.
"""

from __future__ import annotations

import pytest

from cluster import NETNS_ETC, NodeSpec, _write_in_place
from faults import Agent, assert_survivor, finish_each, nodes, ranked_args
from nodes import CLUSTER_TIMEOUT, PORT, SKIP_BANDWIDTH, explain, read_report, scaled, start
from test_torchrun_cluster import run_both, torchrun

pytestmark = pytest.mark.root_required

DEAD_NAMESERVER = "198.18.0.250"   # in the nodes' subnet, held by no machine: no answer, ever


def _dead_nameserver(c) -> None:
    """Every node asks /etc/hosts, then DNS, and its DNS is a nameserver that never answers
    (the resolver's own defaults: 5 s a query, 2 attempts)."""
    for node in c.nodes:
        _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
        _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {DEAD_NAMESERVER}\n")


def _silent_resolver(report: dict) -> list[dict]:
    """The node's word on a nameserver that did not answer: silent, or no machine at its address."""
    return [f for f in report["findings"] if f["check"] == "rdzv.resolve"
            and f["kind"] in ("resolver_silent", "nameserver_no_machine")]


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
        assert silent["kind"] == "nameserver_no_machine" and "no machine answered at" in silent["summary"], silent
        assert DEAD_NAMESERVER in silent["evidence"][0] and "/etc/resolv.conf" in silent["evidence"][0]
    host = runs[0].report
    assert [n["hostname"] for n in host["nodes"]] == ["node0", "node1", "node2"]


@pytest.mark.parametrize("machine", [False, True], ids=["no_machine", "drops_dns"])
def test_a_name_only_dns_knows_behind_a_dead_nameserver_is_said_unanswered(cluster, tmp_path, machine):
    """No machine at the nameserver's address: ARP for it went unanswered, and the node says so;
    a machine there that drops DNS (it answers ARP): a silent nameserver, to repair."""
    with cluster(nodes(2)) as c:
        _dead_nameserver(c)
        if machine:
            assert c.run(0, ["iptables", "-A", "INPUT", "-p", "udp", "--dport", "53", "-j", "DROP"], 10).returncode == 0
            for node in c.nodes:
                _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {c.nodes[0].addr}\n")
        run = start(c, 1, ["--rdzv", f"rdzv.example:{PORT}", "--nnodes", "2", "--node-rank", "1",
                           "--timeout", str(CLUSTER_TIMEOUT)], tmp_path)
        finish_each([run], CLUSTER_TIMEOUT + 10)
    report = assert_survivor(run, CLUSTER_TIMEOUT, codes=(2,))   # its own resolver: this node's fault
    (failed,) = [f for f in report["findings"] if f["check"] == "rdzv.resolve" and f["severity"] == "fail"]
    assert failed["kind"] == ("resolver_silent" if machine else "nameserver_no_machine"), failed
    assert failed["nodes"] == [1] and ("repair the nameserver" in failed["fix"]) == machine, failed
    assert any((c.nodes[0].addr if machine else DEAD_NAMESERVER) in line for line in failed["evidence"]), failed


UNROUTED_NAMESERVER = "198.19.250.53"   # on no network the nodes' gateway has a route to


def _unroutable_nameserver(c) -> None:
    for node in c.nodes:
        _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
        _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {UNROUTED_NAMESERVER}\n")


def test_a_healthy_cluster_behind_an_unroutable_nameserver_passes_without_a_word_of_waiting(cluster, tmp_path):
    """resolv.conf names an address no route leads to (an image built elsewhere, an air-gapped
    site; the nodes' gateway answers "network unreachable" for it): every lookup /etc/hosts
    cannot answer fails at once, none waits for it, so a healthy
    cluster whose names are all in /etc/hosts exits 0 (issue 49 item 5), unlike a silent one."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(3)) as c:
        _unroutable_nameserver(c)
        runs = [start(c, i, ranked_args(i, 3, timeout), tmp_path) for i in range(3)]
        finish_each(runs, timeout + 10)
    for run in runs:
        report = assert_survivor(run, timeout, codes=(0,))
        assert not _silent_resolver(report), report["findings"]


def test_four_ranks_a_node_behind_an_unroutable_nameserver_all_join(cluster, tmp_path):
    """The same nameserver under torchrun, 2 nodes x 4 ranks: the gateway sends a node 5 "network
    unreachable"s, then one a second (Linux's route.error_cost), and the 4 ranks' store clients
    look up at once, so most of their lookups wait out the resolver's 5 s: a store client given
    5 s in all gave up (rdzv.join join_failed, the campaign's seed 64, schedule 69), where the job's
    own clients waited and it ran. Every rank joins: a pass."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(2)) as c:
        _unroutable_nameserver(c)
        results = run_both(c, torchrun(tmp_path, "--timeout", str(timeout), *SKIP_BANDWIDTH, nproc=4),
                           timeout=timeout + scaled(40))
    report = read_report(tmp_path / "rank0.json")
    assert not [f for f in report["findings"] if f["severity"] == "fail"], report["findings"]
    assert [rc for *_, rc in results] == [0, 0], [out[-2000:] for out, *_ in results]


LATE = 4.0   # how late the nameserver answers every query: under the resolver's 5 s, so each lookup succeeds


def _late_nameserver(c, timeout: float, late: float) -> None:
    """Every node asks /etc/hosts, then DNS, and its nameserver (node3) answers every query
    `late` s late. /etc/hosts knows each node by its hostname, but the endpoint's name
    (node0.cluster) only DNS knows: every node looks it up there (issue 63)."""
    for node in c.nodes[:3]:
        _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
        _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {c.nodes[3].addr}\n")
        c.write_hosts(node.index, [*c.hosts_lines(node.index, omit=[0]), f"{c.nodes[0].addr} node0"])
    Agent.start(c, 3, "late-nameserver", "0.0.0.0:53", f"node0.cluster={c.nodes[0].addr}",
                str(late)).wait_for("^serving$", timeout)


def _slow_resolver(report: dict) -> list[dict]:
    return [f for f in report["findings"] if (f["check"], f["kind"]) == ("rdzv.resolve", "resolver_slow")]


@pytest.mark.parametrize("late", [LATE, 0.0], ids=["late", "prompt"])
def test_a_nameserver_that_answers_late_is_named_slow_and_every_node_joins(cluster, tmp_path, late):
    """A nameserver that answers every lookup, 4 s late (issue 63): the joiners said
    "node0.cluster does not resolve" after 3 s and left, and the host named them missing. The
    name resolves, slowly, and torch's store joins by it (its client looks up the name's AAAA
    and A and the address it connects to). Every node joins and is seated; each names the slow
    nameserver with its seconds and what it costs the job's startup (a warning, exit 1), and no
    node is "missing" or said not to resolve. Its control, a prompt nameserver, passes."""
    timeout = CLUSTER_TIMEOUT
    with cluster(nodes(4)) as c:
        _late_nameserver(c, timeout, late)
        runs = [start(c, i, ["--rdzv", f"node0.cluster:{PORT}", "--nnodes", "3", "--node-rank", str(i),
                             "--timeout", str(timeout)], tmp_path) for i in range(3)]
        finish_each(runs, timeout + 10)
    reports = [assert_survivor(run, timeout, codes=(1,) if late else (0,)) for run in runs]
    host = reports[0]
    assert [n["hostname"] for n in host["nodes"]] == ["node0", "node1", "node2"]
    for report in reports:
        rank = report["node_rank"]
        assert not [f for f in report["findings"] if f["severity"] == "fail"], report["findings"]
        if not late:
            assert not _slow_resolver(report), report["findings"]
            continue
        assert not [f for f in report["findings"] if f["severity"] != "pass"
                    and (f["check"], f["kind"]) != ("rdzv.resolve", "resolver_slow")], report["findings"]
        own = [f for f in _slow_resolver(report) if f["nodes"] == [rank]]
        assert len(own) == 1 and own[0]["severity"] == "warn", report["findings"]
        assert c.nodes[3].addr in own[0]["summary"] and "node0.cluster" in own[0]["summary"], own
        assert any(line.startswith("getaddrinfo('node0.cluster'): answered in 4.") for line in own[0]["evidence"]), own
        if rank:   # each joiner's lookup, timed, in the facts the host holds
            assert host["nodes"][rank]["facts"]["reach"]["resolve_seconds"] >= LATE - 0.5, host["nodes"][rank]
    if late:   # the host's word over its joiners: their seconds, each
        (joiners,) = [f for f in _slow_resolver(host) if f["nodes"] == [1, 2]]
        assert all("node0.cluster answered in 4." in line for line in joiners["evidence"]), joiners


def test_a_nameserver_the_nodes_prefix_hides_is_named_with_the_prefix_not_as_silent(cluster, tmp_path):
    """Campaign 63204 #32 (issue 63): node2, configured /16 where the racks are /24, takes the
    other rack's addresses for its own link; its nameserver, on node0 in that rack, answers every
    other node, and ARP for it goes unanswered here. It was "did not answer ... repair the
    nameserver": it is out of the node's reach, the prefix the thing to compare. Its control,
    node1 beside it with the rack's prefix, resolves the endpoint's name there and joins."""
    timeout = CLUSTER_TIMEOUT
    with cluster([NodeSpec(rack=0), NodeSpec(rack=1), NodeSpec(rack=1, prefixlen=16)], racks=2) as c:
        nameserver = c.nodes[0].addr
        for node in c.nodes:
            _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
            _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {nameserver}\n")
            # node0.cluster, the endpoint's name, only its nameserver knows
            c.write_hosts(node.index, [*c.hosts_lines(node.index, omit=[0]), f"{nameserver} node0"])
        Agent.start(c, 0, "late-nameserver", "0.0.0.0:53", f"node0.cluster={nameserver}", "0").wait_for(
            "^serving$", timeout)
        runs = [start(c, i, ["--rdzv", f"node0.cluster:{PORT}", "--nnodes", "3", "--node-rank", str(i),
                             "--timeout", str(timeout), *SKIP_BANDWIDTH], tmp_path) for i in range(3)]
        finish_each(runs, timeout + 10)
    assert [r.rc for r in runs] == [4, 4, 2] and runs[2].report["faulty_nodes"] == ["node2"], explain(runs)
    (hidden,) = runs[2].findings("rdzv.resolve", "fail")
    assert (hidden["kind"], hidden["nodes"]) == ("nameserver_no_machine", [2]), hidden
    assert f"its nameserver {nameserver} is out of this node's reach: no machine answered at {nameserver} on eth0 " \
           "(ARP got no reply" in hidden["summary"], hidden
    assert "its prefix (198.18.0.0/16)" in hidden["fix"] and "repair the nameserver" not in hidden["fix"], hidden
    assert not runs[2].findings("rdzv.reach"), runs[2].report["findings"]
    (resolved,) = runs[1].findings("rdzv.resolve")
    assert resolved["severity"] == "pass" and nameserver in resolved["summary"], resolved
