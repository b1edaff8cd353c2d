"""The campaign's oracle as pure logic: what a schedule's faults expect together."""

from __future__ import annotations

from chaos.generator import draw_schedule
from chaos.oracle import Expect


def merged(seed: int, index: int) -> Expect:
    sched = draw_schedule(seed, index)
    total = Expect()
    for fault in sched.faults:
        total = total.merge(fault.expect(sched, None))
    return total


def test_a_hostile_client_leaves_the_exit_codes_to_a_fault_that_breaks_the_job():
    """Seed 4242, schedule 9 (campaign 13): a hostile client beside a decoy ib0 and a hostname
    on 127.0.1.1. The client's "exit 0 or 1" overrode the broken job's, and the oracle called
    the host's and the faulty nodes' exit 2 a violation."""
    assert draw_schedule(4242, 9).what() == \
        "arrival n=5: hostile_client(node2 action=push) + decoy_ib0(node3) + hostname_127011(node1)"
    e = merged(4242, 9)
    assert e.breaks and {0, 1, 3} <= e.seers
    assert e.exit_codes == {}   # nothing pins a node's code: the broken job's seers judge it
    assert e.may_warn == set(range(5))
