"""An address nobody answers on is not a firewall (issue 35 item 2), on real network namespaces.

The kernel tells them apart: where no machine holds the address, ARP for it goes unanswered
(the neighbour table's INCOMPLETE, then FAILED); behind a firewall that drops the port, the
machine answers ARP and only the SYN goes unanswered. Cases: `netcheck probe` of an address
in the subnet that no node holds, a joiner whose /etc/hosts maps the endpoint's name to such an
address, a joiner with a second interface on the subnet whose route wins and leads nowhere, and
against them a real firewall (DROP on the host), which stays a firewall. Every node has a default
gateway, as real nodes have: it is no evidence of a wrong prefix; the prefix its router
advertises (IPv6) is, where it is narrower than the node's and does not hold the address.
"""

from __future__ import annotations

import pytest

from faults import arrival_args, nodes, ranked_args
from nodes import GRACE, PORT, explain, finish, finish_all, scaled, start

pytestmark = pytest.mark.root_required

NOBODY = "198.18.0.99"   # in the cluster's subnet; no node holds it
NOBODY6 = "2001:2::99"   # in the nodes' IPv6 subnet below; likewise


def probe(c, i: int, target: str, tmp_path):
    return finish(start(c, i, ["probe", target, "--timeout", "3"], tmp_path, bandwidth=True), scaled(10) + GRACE)


def route_lines(finding: dict, address: str) -> list[str]:
    return [e for e in finding["evidence"] if e.startswith(f"{address}: route")]


def test_an_address_no_machine_holds_is_named_and_a_firewall_stays_a_firewall(cluster, tmp_path):
    with cluster(nodes(2)) as c:
        c.drop_inbound(0, PORT)
        for i in (0, 1):
            c.run(i, ["ip", "-6", "addr", "add", f"2001:2::{10 + i}/64", "dev", "eth0", "nodad"], 10)
        nobody = probe(c, 1, f"{NOBODY}:{PORT}", tmp_path)
        nobody6 = probe(c, 1, f"[{NOBODY6}]:{PORT}", tmp_path)
        firewalled = probe(c, 1, f"node0:{PORT}", tmp_path)

    assert nobody.rc == 2, explain([nobody])
    (found,) = nobody.findings("rdzv.reach", "fail")
    assert found["kind"] == "no_machine", found
    (line,) = route_lines(found, NOBODY)
    assert "dev eth0" in line and ("FAILED" in line or "INCOMPLETE" in line), found
    (found6,) = nobody6.findings("rdzv.reach", "fail")   # NDP's word for the same
    assert found6["kind"] == "no_machine" and len(route_lines(found6, NOBODY6)) == 1, found6
    assert firewalled.rc == 2, explain([firewalled])
    (dropped,) = firewalled.findings("rdzv.reach", "fail")
    assert not dropped["kind"] and "firewall" in dropped["fix"], dropped
    (line,) = route_lines(dropped, c.nodes[0].addr)
    assert "neighbour REACHABLE" in line, dropped   # the machine answered ARP: its firewall dropped the port


def test_a_stale_hosts_entry_names_the_file_and_line_on_a_node_with_a_gateway(cluster, tmp_path):
    """Every node has a default gateway, as every real node does: the node's router is no
    evidence that its prefix is wrong, so the stale line is named first, with its fix (issue 63:
    "a prefix wider than the subnet's" was named, the real fix after "where it is the same").
    The node is at fault, ranked or not (one-shot: its finding names no rank, and its report
    named no node faulty, issue 65). The control, the same cluster with the line right, passes."""
    timeout = scaled(14)
    with cluster(nodes(2)) as c:
        assert c.gateways == ["198.18.0.1"]
        hosts = [*c.hosts_lines(1, omit=[0]), f"{NOBODY} node0.cluster node0"]   # node0 moved, the line stayed
        c.write_hosts(1, hosts)
        joiner = finish(start(c, 1, ranked_args(1, 2, timeout), tmp_path), timeout + GRACE)
        unranked = finish(start(c, 1, arrival_args(timeout, scaled(4)), tmp_path), timeout + GRACE)
        c.write_hosts(1, c.hosts_lines(1))
        control = finish_all([start(c, i, ranked_args(i, 2, timeout), tmp_path) for i in range(2)], timeout + GRACE)

    assert joiner.rc == 2, explain([joiner])
    (found,) = joiner.findings("rdzv.reach", "fail")
    assert (found["kind"], found["nodes"]) == ("no_machine", [1]), found
    assert f"node0: /etc/hosts line {len(hosts)}: {hosts[-1]}" in found["evidence"], found
    assert len(route_lines(found, NOBODY)) == 1, found
    assert found["fix"].startswith(f"node0's entry in /etc/hosts on this node is stale (/etc/hosts line {len(hosts)})")
    assert "prefix" not in found["summary"] and "firewall" not in found["fix"], found
    for run in (joiner, unranked):
        assert (run.rc, run.report["fault"]["party"], run.report["faulty_nodes"]) == (2, "this_node", ["node1"]), \
            explain([run])
    (alone,) = unranked.findings("rdzv.reach", "fail")
    assert (alone["kind"], alone["nodes"]) == ("no_machine", []), alone
    assert [r.rc for r in control] == [0, 0], explain(control)


def test_a_second_interface_on_the_subnet_whose_route_leads_nowhere(cluster, tmp_path):
    """A storage NIC given the nodes' subnet by DHCP, its route's metric lower than eth0's."""
    timeout = scaled(14)
    with cluster(nodes(2)) as c:
        c.add_decoy(1, "stor0", "198.18.0.200/24")
        for dev, src, metric in (("stor0", "198.18.0.200", "10"), ("eth0", c.nodes[1].addr, "100")):
            c.run(1, ["ip", "route", "del", "198.18.0.0/24", "dev", dev], 10)
            c.run(1, ["ip", "route", "add", "198.18.0.0/24", "dev", dev, "src", src, "metric", metric], 10)
        joiner = finish(start(c, 1, ranked_args(1, 2, timeout), tmp_path), timeout + GRACE)

    assert joiner.rc == 2, explain([joiner])
    (found,) = joiner.findings("rdzv.reach", "fail")
    assert (found["kind"], found["nodes"]) == ("shared_subnet", [1]), found
    (line,) = route_lines(found, c.nodes[0].addr)
    assert "dev stor0, source 198.18.0.200" in line and "eth0 also routes that subnet" in line, found


def test_a_prefix_wider_than_the_one_its_router_advertises_is_named_and_the_right_one_is_not(cluster, tmp_path):
    """IPv6: the gateway advertises 2001:2::/64 (a router advertisement, as radvd sends); node1
    is configured 2001:2::11/48, so an address of another /64 is on its link by its own prefix
    alone, and NDP for it goes unanswered: a prefix wider than the subnet's, named with the
    router's word for the subnet. The controls: node0, configured /64 as advertised, sends the
    same address to its router, which has no route there (no prefix named); and an address of
    the advertised /64 itself that nobody holds is a wrong address, not a wide prefix."""
    behind = "[2001:2:0:1::10]:29500"   # another subnet, behind the router
    with cluster(nodes(2)) as c:
        for i, prefix in ((0, 64), (1, 48)):
            c.run(i, ["ip", "-6", "addr", "add", f"2001:2::{10 + i}/{prefix}", "dev", "eth0", "nodad"], 10)
        c.advertise_prefix("2001:2::/64")
        wide = probe(c, 1, behind, tmp_path)
        right = probe(c, 0, behind, tmp_path)
        nobody = probe(c, 1, f"[{NOBODY6}]:{PORT}", tmp_path)

    assert wide.rc == 2, explain([wide])
    (found,) = wide.findings("rdzv.reach", "fail")
    assert found["kind"] == "prefix_too_wide", found
    assert "this node's prefix (2001:2::/48)" in found["summary"], found
    assert "the link's subnet is 2001:2::/64 (its router's advertisement)" in found["summary"], found
    assert found["fix"].startswith("give eth0 the subnet's prefix (2001:2::11/64)"), found
    assert any(e.startswith("eth0's link: 2001:2::/64, from its router's advertisement (ip -6 route: 2001:2::/64 "
                            "dev eth0") for e in found["evidence"]), found
    (routed,) = right.findings("rdzv.reach", "fail")
    assert routed["kind"] == "" and "a router on the way could not deliver" in routed["summary"], routed
    assert "prefix" not in routed["summary"] + routed["fix"], routed
    (stale,) = nobody.findings("rdzv.reach", "fail")
    assert stale["kind"] == "no_machine" and "prefix" not in stale["summary"], stale
