"""The host's datagram frame test (facts.frames) against real kernels: loopback answers every
size (its MTU is 65536), and a datagram service that never replies leaves everything
unanswered. The blackhole itself, a switch port shorter than the nodes' MTU, is built in
tests/test_mtu_cluster.py."""

from __future__ import annotations

import socket

from netcheck.core.meshrecords import BLACKHOLE, CARRIED, SILENT, FrameTest
from netcheck.core.model import Visitor
from netcheck.facts.frames import frame_test, frame_tests
from netcheck.rules import mesh as mesh_rules


def test_loopback_carries_full_size_datagrams():
    (found,) = frame_tests([("me", "127.0.0.1")], 1.0)
    assert found == FrameTest("me", "127.0.0.1", 65535, CARRIED)   # the largest IPv4 datagram


def test_a_port_something_serves_silently_tells_nothing_of_frames():
    """A datagram to a port that a process holds and never answers gets no port unreachable:
    silent, never a blackhole."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as quiet:
        quiet.bind(("127.0.0.2", 9))
        assert frame_test("me", "127.0.0.2", 0.2).outcome == SILENT


LOST = (Visitor("netcheck", "node1", None, "198.18.0.11"), Visitor("netcheck", "node2", None, "198.18.0.12"),
        Visitor("netcheck", "node3", 3, "198.18.0.13"))


def hole(v: Visitor, outcome: str = BLACKHOLE) -> FrameTest:
    return FrameTest(v.hostname, v.address, 9000, outcome)


def test_the_hosts_link_is_named_where_every_node_that_came_lost_its_facts():
    (found,) = mesh_rules.lost_facts_blackhole(LOST, tuple(hole(v) for v in LOST), joined=1)
    assert (found.check, found.kind, found.nodes) == ("mesh.connect", "blackhole", (0,))
    assert "at the host" in found.summary and len(found.evidence) == 3


def test_the_nodes_are_named_where_others_facts_came_over_the_hosts_link():
    (found,) = mesh_rules.lost_facts_blackhole(LOST, (hole(LOST[1]), hole(LOST[2]), hole(LOST[0], CARRIED)), joined=3)
    assert found.nodes == (3,) and "between the host and node2, node3" in found.summary
    assert found.evidence[0] == "node2 198.18.0.12: the host's 9000-byte datagrams lost, small ones answered"


def test_one_node_and_the_host_alone_name_both_ends_and_nothing_answered_names_nothing():
    (found,) = mesh_rules.lost_facts_blackhole(LOST[2:], (hole(LOST[2]),), joined=1)
    assert found.nodes == (0, 3) and "between the host and node3" in found.summary
    assert mesh_rules.lost_facts_blackhole(LOST, tuple(hole(v, SILENT) for v in LOST), joined=1) == []
