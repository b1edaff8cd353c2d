"""Two racks on two subnets, a router each and a core link between them (the leaf-spine layout
most datacenters route), built for real: healthy, it passes; a core link narrower than the
nodes' jumbo frames is routed path-MTU discovery, no blackhole, until the routers' ICMP is
filtered; a node configured /16 where the racks are /24 is named alone as the cause, with its
prefix and the on-link routes its kernel took (by its peers' prefixes; where it cannot reach the
host, by its DHCP lease's, its router being no evidence), and a DROP firewall is still a firewall."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster import NodeSpec
from nodes import GRACE, PORT, bind_mounted, explain, finish, finish_all, scaled, start

pytestmark = pytest.mark.root_required

NETWORKD_LEASES = Path("/run/systemd/netif/leases")   # systemd-networkd's, one file per interface index


def args(i: int, n: int, timeout: float, *extra: str) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(timeout), *extra]


def racked(*racks: int, **spec) -> list[NodeSpec]:
    return [NodeSpec(rack=r, **spec) for r in racks]


def run_all(c, n: int, tmp_path, *extra: str):
    timeout = scaled(30)
    return finish_all([start(c, i, args(i, n, timeout, *extra), tmp_path) for i in range(n)], timeout + GRACE)


def test_a_healthy_routed_fabric_passes(cluster, tmp_path):
    with cluster(racked(0, 0, 1, 1), racks=2) as c:
        runs = run_all(c, 4, tmp_path, "--skip", "bandwidth")
    assert [r.rc for r in runs] == [0, 0, 0, 0], explain(runs)


def test_routed_path_mtu_discovery_is_no_blackhole_and_filtered_icmp_is_one(cluster, tmp_path):
    """Jumbo frames in both racks, a 1500-byte core link: the router says 'fragmentation
    needed' and TCP sends smaller segments: no blackhole, but the paths between the racks
    carry 1500 where the nodes send 9000, named from the path MTU the kernel learnt (a
    warning: the job runs); with that ICMP dropped, full-size frames vanish between the racks
    (a blackhole)."""
    with cluster(racked(0, 0, 1, 1, mtu=9000), racks=2, core_mtu=1500) as c:
        runs = run_all(c, 4, tmp_path, "--skip", "bandwidth")
    assert [r.rc for r in runs] == [1, 1, 1, 1], explain(runs)
    (narrow,) = runs[0].findings("nic.mtu", "warn")
    assert (narrow["kind"], narrow["nodes"]) == ("path_mtu", [0, 1, 2, 3]), explain(runs)
    assert "router or link" in narrow["summary"] and "1500" in narrow["fix"], explain(runs)
    assert not runs[0].findings("mesh.connect", "fail"), explain(runs)
    with cluster(racked(0, 0, 1, 1, mtu=9000), racks=2, core_mtu=1500) as c:
        c.filter_frag_needed()
        runs = run_all(c, 4, tmp_path, "--skip", "bandwidth")
    (hole,) = runs[0].findings("mesh.connect", "fail")
    assert hole["kind"] == "blackhole" and set(hole["nodes"]) == {2, 3}, explain(runs)
    # node2 and node3 lost the host (their facts, larger than a frame, never came): each names
    # the path between itself and the host, and is at fault by its own word
    assert [(r.rc, r.report["faulty_nodes"]) for r in runs] == [(4, ["node2", "node3"])] * 2 + \
        [(2, ["node2"]), (2, ["node3"])], explain(runs)


def test_a_node_with_a_wider_prefix_than_its_rack_is_named_alone_with_its_prefix(cluster, tmp_path):
    specs = racked(0, 0, 0, 1, 1)
    specs[2] = NodeSpec(rack=0, prefixlen=16)
    with cluster(specs, racks=2) as c:
        runs = run_all(c, 5, tmp_path, "--skip", "bandwidth")
    host, node2 = runs[0], runs[2]
    for report in (host, node2):
        (wrong,) = report.findings("mesh.connect", "fail")
        assert (wrong["kind"], wrong["nodes"]) == ("wrong_prefix", [2]), explain(runs)
        assert "198.18.0.12/16" in wrong["summary"] and "/24" in wrong["summary"], wrong
        assert "route on-link on eth0, neighbour" in " ".join(wrong["evidence"]), wrong
        assert "firewall" not in wrong["fix"] and "198.18.0.12/24" in wrong["fix"], wrong
    for f in host.report["findings"]:   # no healthy node is blamed, nor said to reach no peer
        assert f["severity"] == "pass" or f["nodes"] == [2], f
        assert "reaches no peer" not in " ".join([f["summary"], *f["evidence"]]), f
    # node2 alone at fault (issue 65): the healthy host, and every other node, exit 4 naming it
    assert [(r.rc, r.report["faulty_nodes"]) for r in runs] == [(4, ["node2"])] * 2 + [(2, ["node2"])] + \
        [(4, ["node2"])] * 2, explain(runs)


def test_a_node_whose_prefix_hides_the_host_behind_its_router_says_so_where_its_lease_says_the_subnet(
        cluster, tmp_path):
    """The host in the other rack: the /16 node asks ARP for the host's address on its own link,
    unanswered. Its router alone is no evidence of its prefix (every node has one; a stale name
    looks the same): the address comes first, the prefix next. With its DHCP lease saying
    /24 (the network's own word; the /16 configured by hand), the prefix is named, with the lease
    and the /24 to give it."""
    specs = racked(1, 0, 0, 1)
    specs[2] = NodeSpec(rack=0, prefixlen=16)
    with cluster(specs, racks=2) as c:
        timeout = scaled(14)
        alone = finish(start(c, 2, args(2, 4, timeout), tmp_path), timeout + GRACE)
        index = c.run(2, ["cat", "/sys/class/net/eth0/ifindex"], 10).stdout.strip()
        leases, leased = tmp_path / "leases", None
        leases.mkdir()
        (leases / index).write_text("# This is private data. Do not parse.\nADDRESS=198.18.0.12\n"
                                    "NETMASK=255.255.255.0\nROUTER=198.18.0.1\nLIFETIME=86400\n")
        if NETWORKD_LEASES.is_dir():   # the place to show it at: a machine without networkd lacks it
            leased = finish(start(c, 2, args(2, 4, timeout), tmp_path,
                                  wrapper=bind_mounted(leases, NETWORKD_LEASES)), timeout + GRACE)

    assert alone.rc == 2, explain([alone])
    (reach,) = alone.findings("rdzv.reach", "fail")
    assert reach["kind"] == "no_machine" and "prefix" not in reach["summary"], reach
    fix = reach["fix"]
    assert fix.startswith("node0's entry in /etc/hosts on this node is stale"), reach
    assert fix.index("stale") < fix.index("its prefix (198.18.0.0/16)") and "198.18.0.1" in fix, reach
    if leased is None:
        pytest.skip(f"{NETWORKD_LEASES} is not on this machine: no place to show the node its lease at")
    assert leased.rc == 2, explain([leased])
    (wide,) = leased.findings("rdzv.reach", "fail")
    assert wide["kind"] == "prefix_too_wide" and "this node's prefix (198.18.0.0/16)" in wide["summary"], wide
    assert "the link's subnet is 198.18.0.0/24 (its DHCP lease)" in wide["summary"], wide
    assert "behind its router (198.18.0.1)" in wide["summary"], wide
    assert wide["fix"].startswith("give eth0 the subnet's prefix (198.18.0.12/24)") and "firewall" not in wide["fix"]
    assert f"eth0's link: 198.18.0.12/24, from its DHCP lease ({NETWORKD_LEASES}/{index}: address 198.18.0.12, " \
           "subnet mask 255.255.255.0)" in wide["evidence"], wide


def test_a_drop_firewall_on_a_routed_fabric_is_still_called_filtered(cluster, tmp_path):
    with cluster(racked(0, 0, 1, 1), racks=2) as c:
        c.drop_inbound(3, source=1)
        runs = run_all(c, 4, tmp_path, "--skip", "bandwidth")
    # node3's own firewall drops node1's connects (node1 reaches it the other way): node3's fault
    assert [(r.rc, r.report["faulty_nodes"]) for r in runs] == [(4, ["node3"])] * 3 + [(2, ["node3"])], explain(runs)
    (cut,) = runs[0].findings("mesh.connect", "fail")
    assert cut["kind"] == "" and "filtered" in " ".join(cut["evidence"]) and "firewall" in cut["fix"], explain(runs)
