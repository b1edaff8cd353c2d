"""The campaign's oracle as pure logic: what a schedule's faults expect together."""

from __future__ import annotations

from types import SimpleNamespace

from chaos.catalog import (
    DecoyInterface,
    EphemeralBlocked,
    ForeignRun,
    HostileClient,
    LatePastRoster,
    LoopbackHostname,
    LossyLink,
    MtuBlackhole,
    MtuMismatch,
    PathFirewall,
    ShapedLink,
    SharedSubnet,
    Signal,
    WrongPrefix,
)
from chaos.generator import Schedule
from chaos.oracle import Expect


def merged(sched: Schedule) -> Expect:
    total = Expect()
    for fault in sched.faults:
        total = total.merge(fault.expect(sched, None))
    return total


def test_a_hostile_client_leaves_the_exit_codes_to_a_fault_that_breaks_the_job():
    """A hostile client beside a decoy ib0 and a hostname on 127.0.1.1 (campaign 13 found it at
    seed 4242, schedule 9). The client's "exit 0 or 1" overrode the broken job's, and the
    oracle called the host's and the faulty nodes' exit 2 a violation."""
    faults = (DecoyInterface((3,)), HostileClient((2,), (("action", "push"),)), LoopbackHostname((1,)))
    sched = Schedule(4242, 9, "ranked", 4, faults)
    assert sched.what() == \
        "ranked n=4: decoy_ib0(node3) + hostile_client(node2 action=push) + hostname_127011(node1)"
    e = merged(sched)
    assert e.breaks and {1, 3} <= e.seers
    assert e.exit_codes == {}   # nothing pins a node's code: the broken job's seers judge it
    assert e.may_warn == set(range(4))


def test_a_lossy_link_never_passes_and_names_the_node_or_the_path():
    node = LossyLink((2, 1), (("share", 0.02), ("path", False)))
    path = LossyLink((2, 1), (("share", 0.02), ("path", True)))
    e = merged(Schedule(1, 0, "ranked", 3, (node,)))
    assert e.breaks and e.seers == {0, 2}
    assert [(b.node, b.kinds, b.severity) for b in e.blame] == [(2, ("lossy_node", "lossy_path"), ("warn", "fail"))]
    e = merged(Schedule(1, 0, "ranked", 3, (path,)))
    assert e.seers == {0, 1, 2} and [(b.node, b.kinds) for b in e.blame] == [(1, ("lossy_path",)),
                                                                             (2, ("lossy_path",))]


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


def test_a_node_stopped_in_its_rendezvous_may_be_named_for_facts_that_never_came():
    """Seed 71206, schedule 48: SIGTERM 3.3 s into node2's rendezvous, after its visitor record
    and before its facts; the host named it rdzv.join facts_lost, which the oracle refused."""
    sig = Signal((2,), (("sig", "SIGTERM"), ("phase", "rendezvous"), ("delay", 2.44)))
    run = SimpleNamespace(fault_state={sig: {"phase": "rendezvous"}})   # where the signal landed
    e = sig.expect(Schedule(71206, 48, "ranked", 4, (sig,)), run)
    (joined,) = [b for b in e.blame if b.checks == ("rdzv.join", "bw.stage")]
    assert joined.node == 2 and {"missing", "facts_lost", "lost_in_rendezvous"} <= set(joined.kinds)


def test_a_wrong_prefix_with_the_other_rack_kept_out_is_not_expected_to_show():
    """Seed 8306, schedule 36: node2's /16 in the host's rack, node1 past the roster and node3 of
    another run: no node of the other rack took part, node2 reached every peer it had."""
    faults = (WrongPrefix((2,)), LatePastRoster((1,)), ForeignRun((3,)))
    sched = Schedule(8306, 36, "ranked", 4, faults)
    assert not [b for b in merged(sched).blame if b.node == 2]
    seen = merged(Schedule(8306, 36, "ranked", 4, (WrongPrefix((2,)), LatePastRoster((1,)))))
    assert [(b.node, b.checks) for b in seen.blame if b.node == 2] == [(2, ("mesh.connect",))]


def test_a_decoy_that_no_witnessed_connect_can_tell_is_not_expected():
    """Seed 8306, schedule 9: ephemeral firewalls both ways on node0 and node2 leave every node
    reaching none; node1's decoy ib0 cannot be told from their connects."""
    both = (("way", "both"),)
    faults = (EphemeralBlocked((2,), both), DecoyInterface((1,)), EphemeralBlocked((0,), both))
    assert not [b for b in merged(Schedule(8306, 9, "arrival", 3, faults)).blame if b.node == 1]
    one = (EphemeralBlocked((2,), both), DecoyInterface((1,)))   # node0 reaches node1: it tells
    assert [b.checks for b in merged(Schedule(8306, 9, "arrival", 3, one)).blame if b.node == 1] == \
        [("nic.nccl_default",)]


def test_a_shaped_link_with_one_peer_left_in_the_phase_is_not_expected_on_bw_pair():
    """Seed 8306, schedule 83: node2's facts lost on its blackhole left node0 and node1, one pair
    as slow at both ends; bw.pair cannot tell which (link.health named the path)."""
    faults = (ShapedLink((1,)), MtuBlackhole((2,)))
    assert not [b for b in merged(Schedule(8306, 83, "arrival", 3, faults)).blame if b.checks == ("bw.pair",)]
    assert [b.node for b in merged(Schedule(8306, 83, "arrival", 4, faults)).blame if b.checks == ("bw.pair",)] == [1]
