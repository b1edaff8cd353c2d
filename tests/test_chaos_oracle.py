"""The campaign's oracle as pure logic: what a schedule's faults expect together."""

from __future__ import annotations

from chaos.catalog import LatePastRoster, MtuMismatch, PathFirewall, SharedSubnet
from chaos.generator import Schedule, draw_schedule
from chaos.oracle import Expect


def merged(seed: int, index: int) -> Expect:
    sched = draw_schedule(seed, index)
    total = Expect()
    for fault in sched.faults:
        total = total.merge(fault.expect(sched, None))
    return total


def test_a_hostile_client_leaves_the_exit_codes_to_a_fault_that_breaks_the_job():
    """A hostile client beside a decoy ib0 and a hostname on 127.0.1.1 (campaign 13 found it at
    seed 4242, schedule 9, drawn now by seed 4242, schedule 1849). The client's "exit 0 or 1"
    overrode the broken job's, and the oracle called the host's and the faulty nodes' exit 2 a
    violation."""
    assert draw_schedule(4242, 1849).what() == \
        "ranked n=4: decoy_ib0(node3) + hostile_client(node2 action=push) + hostname_127011(node1)"
    e = merged(4242, 1849)
    assert e.breaks and {1, 3} <= e.seers
    assert e.exit_codes == {}   # nothing pins a node's code: the broken job's seers judge it
    assert e.may_warn == set(range(4))


def test_what_a_node_never_seated_cannot_be_compared_with_is_not_expected():
    """Seed 21499, schedule 154 before the catalog grew: node2 past the roster and node1 kept
    out by a path firewall leave the jumbo host with no peer; the oracle expected nic.mtu."""
    faults = (LatePastRoster((2,)), PathFirewall((1,), (("target", "REJECT"),)), MtuMismatch((0,)))
    sched = Schedule(21499, 154, "ranked", 3, faults)
    total = Expect()
    for fault in faults:
        total = total.merge(fault.expect(sched, None))
    assert total.absent == {1, 2}
    assert not [b for b in total.blame if b.checks == ("nic.mtu",)]


def test_jumbo_nodes_left_alone_by_a_node_never_seated_agree_and_warrant_nothing():
    """Seed 1305, schedule 30: two jumbo nodes and a third kept out by a second NIC on its
    subnet: the two that take part agree on their MTU, and the host rightly exits 0."""
    faults = (MtuMismatch((2,)), SharedSubnet((1,)), MtuMismatch((0,)))
    sched = Schedule(1305, 30, "arrival", 3, faults)
    total = Expect()
    for fault in faults:
        total = total.merge(fault.expect(sched, None))
    assert total.seers == {1} and not [b for b in total.blame if b.checks == ("nic.mtu",)]
