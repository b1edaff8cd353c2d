"""The campaign's oracle as pure logic: what a schedule's faults expect together."""

from __future__ import annotations

import os
import pty
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from chaos.catalog import (
    MIDRUN,
    MIDRUN_COMPANIONS,
    ConntrackFull,
    DecoyInterface,
    EphemeralBlocked,
    ForeignRun,
    HostileClient,
    LatePastRoster,
    LoopbackHostname,
    LossyLink,
    MidRun,
    MidRunFirewall,
    MidRunStop,
    MtuBlackhole,
    MtuMismatch,
    OverlayMtu,
    PathFirewall,
    ShapedLink,
    SharedSubnet,
    Signal,
    SlowResolver,
    SmallPortRange,
    WrongPrefix,
    job_ports,
)
from chaos.generator import Schedule, draw_schedule, timeout_for
from chaos.midrun import LINE_LAG, TimedLines
from chaos.oracle import (
    Blame,
    Expect,
    Outcome,
    _judge_blame,
    _judge_fault,
    _judge_verdicts,
    ranks_of,
    reports_of,
    said_exit,
)
from nodes import NodeRun


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



def test_a_port_range_below_the_jobs_need_fails_its_node_and_one_it_fits_only_past_time_wait_warns():
    """Both outcomes of issue 63's small range, by the campaign's layout (one process a node): a
    joiner short of ports joins and is named by the host and by itself, alone at fault; a host
    short of them seats nobody and is alone; a range the job fits only once netcheck's store
    client's port is released (TIME-WAIT) warns on the host, naming the node."""
    short, fits = job_ports() - 1, job_ports()
    draws = {SmallPortRange.draw_params(random.Random(i), "ranked")[0][1] for i in range(200)}
    assert {p < job_ports() for p in draws} == {True, False}
    joiner = SmallPortRange((2,), (("ports", short),))
    e = merged(Schedule(1, 0, "ranked", 3, (joiner,)))
    assert e.breaks and e.seers == {0, 2} and not e.absent and not joiner.removes_node and not joiner.alone
    assert e.at_fault == {2} and [(b.checks, b.kinds, b.reporter) for b in e.blame] == [
        (("host.ports",), ("range_too_small",), None), (("host.ports",), ("range_too_small",), 2)]
    host = SmallPortRange((0,), (("ports", short),))
    assert host.alone and merged(Schedule(1, 0, "ranked", 3, (host,))).seers == {0, 1, 2}
    held = SmallPortRange((1,), (("ports", fits),))
    e = merged(Schedule(1, 0, "arrival", 3, (held,)))
    assert e.warns and not e.breaks and not held.removes_node
    assert [(b.node, b.kinds, b.severity, b.reporter) for b in e.blame] == [(1, ("time_wait",), "warn", None)]


def test_a_slow_resolver_is_named_by_every_node_present_and_lengthens_the_runs_timeout():
    """Every node names its own slow lookup, the host every node's; the --timeout grows by the
    joiners' four lookups (1.8 s late kept both joiners out at the campaign's own 27 s)."""
    slow = SlowResolver((0,), (("late", 2.0),))
    sched = Schedule(1, 0, "ranked", 3, (slow, PathFirewall((2,), (("target", "DROP"),))))
    assert sched.timeout == timeout_for(3, False, "ranked") + 8.0
    e = merged(sched)
    named = {(b.node, b.reporter) for b in e.blame if b.checks == ("rdzv.resolve",)}
    assert named == {(0, None), (0, 0), (1, None), (1, 1)}   # node2 is kept out by its path firewall
    assert all(b.kinds == ("resolver_slow",) and b.severity == "warn" for b in e.blame if b.checks == ("rdzv.resolve",))


def test_an_overlay_left_at_1500_warns_naming_every_node_present_and_nothing_with_one_left():
    e = merged(Schedule(1, 0, "ranked", 3, (OverlayMtu((0,)),)))
    assert e.warns and [(b.node, b.kinds) for b in e.blame] == [(n, ("path_mtu",)) for n in range(3)]
    alone = merged(Schedule(1, 0, "ranked", 2, (OverlayMtu((0,)), PathFirewall((1,), (("target", "DROP"),)))))
    assert not [b for b in alone.blame if b.checks == ("nic.mtu",)]


def _finding(check: str, kind: str, nodes: list[int], severity: str = "fail") -> dict:
    return {"check": check, "kind": kind, "severity": severity, "nodes": nodes, "summary": "", "evidence": []}


def test_a_full_conntrack_table_named_as_a_firewall_is_a_violation():
    """A joiner behind a full table names its table, and no firewall: its own rdzv.reach
    (filtered, "open the host's firewall") beside it is the false cause issue 63 saw."""
    full = ConntrackFull((2,))
    sched = Schedule(1, 0, "ranked", 3, (full,))
    rcs = {0: 2, 1: 0, 2: 2}
    run = SimpleNamespace(runs={i: SimpleNamespace(rc=rc) for i, rc in rcs.items()}, leftovers=[], sched=sched,
                          c=SimpleNamespace(nodes=[SimpleNamespace(addr=f"198.18.0.{10 + i}", hostname=f"node{i}")
                                                   for i in range(3)]),
                          args=lambda i: ["--node-rank", str(i)])
    host = {"findings": [_finding("rdzv.join", "missing", [2])], "nodes": []}
    own = [_finding("host.conntrack", "table_full", [2])]
    for extra, violations in (([], 0), ([_finding("rdzv.reach", "", [2])], 1)):
        o = Outcome(sched, run, [full.expect(sched, None)], reports={0: host, 2: {"findings": own + extra}},
                    host_report=host)
        _judge_verdicts(o, o.expect)
        assert len(o.violations) == violations, o.violations

def _report(party: str, *faulty: int, verdict: str = "fail") -> dict:
    return {"findings": [], "nodes": [], "verdict": verdict, "fault": {"party": party},
            "faulty_nodes": [f"node{n}" for n in faulty]}


def test_whose_fault_each_node_says_is_judged_against_where_the_fault_was_planted():
    """Issue 65: a joiner kept out by the host's firewall is no node at fault (it exits 4, naming
    the host); the host, which cannot see its own rule, may leave itself out (the catalog's
    documented exception). A healthy node named at fault, or exiting 2, is a violation."""
    sched = Schedule(1, 0, "ranked", 3, (PathFirewall((2,), (("target", "DROP"),)),))
    run = SimpleNamespace(runs={i: SimpleNamespace(rc=0) for i in range(3)}, leftovers=[], sched=sched,
                          c=SimpleNamespace(nodes=[SimpleNamespace(addr=f"198.18.0.{10 + i}", hostname=f"node{i}")
                                                   for i in range(3)]),
                          args=lambda i: ["--node-rank", str(i)])
    cases = (({0: _report("other_nodes"), 1: _report("other_nodes"), 2: _report("other_nodes")}, []),
             ({0: _report("other_nodes"), 1: _report("other_nodes"), 2: _report("this_node", 2)},
              ["node2's report: faulty_nodes names node2, not at fault (the faults': node0)",
               "node2: exits this node's fault (2), though the faults are node0's"]),
             ({0: _report("this_node", 0, 1), 1: _report("other_nodes"), 2: _report("other_nodes")},
              ["node0's report: faulty_nodes names node1, not at fault (the faults': node0)"]))
    for reports, violations in cases:
        o = Outcome(sched, run, [f.expect(sched, None) for f in sched.faults], reports=reports, host_report=reports[0])
        _judge_fault(o, o.expect)
        assert o.violations == violations, o.violations
    late = {**_report("this_node", 1), "findings": [_finding("rdzv.join", "late", [1])], "node_rank": 1}
    o = Outcome(sched, run, [f.expect(sched, None) for f in sched.faults],
                reports={0: _report("other_nodes"), 1: late}, host_report=_report("other_nodes"))
    _judge_fault(o, o.expect)
    assert o.violations == ["node1's report: faulty_nodes names node1, not at fault (the faults': node0)",
                            "node1: exits this node's fault (2), though the faults are node0's"], \
        "a joiner that came late was not tested, not found broken: netcheck's deadline (3), never its own fault"
    e = merged(Schedule(1, 0, "ranked", 3, (EphemeralBlocked((1,), (("way", "both"),)),)))
    o = Outcome(sched, run, [e], reports={0: _report("other_nodes", 2)}, host_report=_report("other_nodes", 2))
    _judge_fault(o, e)
    assert o.violations == ["node0's report: faulty_nodes names node2, not at fault (the faults': node1)",
                            "the host's report: faulty_nodes leaves out node1, at fault"], o.violations


def test_a_shaped_link_with_one_peer_left_in_the_phase_is_not_expected_on_bw_pair():
    """Seed 8306, schedule 83: node2's facts lost on its blackhole left node0 and node1, one pair
    as slow at both ends; bw.pair cannot tell which (link.health named the path)."""
    faults = (ShapedLink((1,)), MtuBlackhole((2,)))
    assert not [b for b in merged(Schedule(8306, 83, "arrival", 3, faults)).blame if b.checks == ("bw.pair",)]
    assert [b.node for b in merged(Schedule(8306, 83, "arrival", 4, faults)).blame if b.checks == ("bw.pair",)] == [1]


# --- faults that land mid-run (issue 62): the rules of catalog.MidRun, from the moments seen ---

GOODBYE = "netcheck: goodbye..."
ROW = "netcheck: bandwidth all all_reduce 1024 B: busbw 0.1 GB/s"


def timed(lines: dict[str, float]) -> TimedLines:
    """Progress lines, each seen at the given time."""
    out = TimedLines()
    for line, at in sorted(lines.items(), key=lambda kv: kv[1]):
        out += [line]
        out.times[-1] = at
    return out


def landed(fault, at: float, lines: dict[int, dict[str, float]], timeout: float = 40.0,
           resumed: dict[int, float] | None = None):
    """A run in which `fault` landed at `at`, each node having shown `lines`."""
    runs = {i: NodeRun(i, None, Path("unused"), 0.0, progress=timed(seen)) for i, seen in lines.items()}
    return SimpleNamespace(fault_state={fault: {"landed": at, "phase": "bandwidth"}}, runs=runs,
                           resumed_at=resumed or {}, sched=SimpleNamespace(timeout=timeout))


def firewall(node: int, ports: str, way: str, phase: str = "workers") -> MidRunFirewall:
    return MidRunFirewall((node,), (("phase", phase), ("delay", 0.5), ("target", "DROP"), ("ports", ports),
                                    ("way", way)))


def stop(node: int, then: str = "SIGCONT") -> MidRunStop:
    return MidRunStop((node,), (("phase", "workers"), ("delay", 0.5), ("what", "node"), ("then", then)))


def named(e: Expect) -> set[tuple[int, int | None]]:
    """(node named, whose report) for every blame, each naming its node alone."""
    assert all(b.alone for b in e.blame)
    return {(b.node, b.reporter) for b in e.blame}


SCHED = Schedule(62, 0, "ranked", 3, ())
SWEPT = {ROW: 9.0}   # a row measured before the fault: the sweep is not what binds


def test_the_hosts_endpoint_cut_before_any_goodbye_binds_every_node_and_names_the_host():
    """The issue's case: a DROP on the host's endpoint port mid-sweep. No joiner can hear the
    verdict, the host cannot read its own store: nobody exits 0, every joiner names the host, and
    the host (which still writes its report) names itself."""
    fault = firewall(0, "endpoint", "in")
    e = fault.expect(SCHED, landed(fault, 10.0, {0: SWEPT, 1: SWEPT, 2: SWEPT}))
    assert e.breaks and e.seers == {0, 1, 2}
    assert named(e) == {(0, 1), (0, 2), (0, None)}


def test_a_joiners_rule_after_both_goodbye_lines_binds_nobody():
    """Landed once the host and the joiner were both in their goodbye: the joiner may have heard
    the verdict, the host its goodbye. Only the promises of every schedule hold."""
    fault = firewall(1, "all", "both", "goodbye")
    e = fault.expect(SCHED, landed(fault, 20.0, {0: {**SWEPT, GOODBYE: 18.0}, 1: {**SWEPT, GOODBYE: 18.5},
                                                 2: {**SWEPT, GOODBYE: 18.4}}))
    assert e.breaks and not e.seers and not e.blame


def test_a_joiner_cut_before_its_own_goodbye_line_never_passes_and_the_host_only_where_its_goodbye_is_cut():
    """Between the host's goodbye line and the joiner's: the joiner has not asked for the verdict,
    so cannot hear it. An INPUT rule lets its goodbye out (the host may have all it needs); an
    OUTPUT rule does not, and the host must then name it. The margin (LINE_LAG) is given away: a
    rule in place 0.3 s before the line binds nobody."""
    lines = {0: {**SWEPT, GOODBYE: 18.0}, 1: {**SWEPT, GOODBYE: 19.0}, 2: {**SWEPT, GOODBYE: 18.1}}
    for way, seers, blamed in (("in", {1}, set()), ("out", {0, 1}, {(1, None)}), ("both", {0, 1}, {(1, None)})):
        fault = firewall(1, "endpoint", way, "goodbye")
        e = fault.expect(SCHED, landed(fault, 18.2, lines))
        assert (e.seers, named(e)) == (seers, blamed), way
    fault = firewall(1, "endpoint", "out", "goodbye")
    e = fault.expect(SCHED, landed(fault, 19.0 - LINE_LAG + 0.2, lines))
    assert not e.seers and not e.blame


def test_the_sweeps_ports_cut_binds_the_host_and_the_victim_only_before_the_first_row():
    fault = firewall(2, "ephemeral", "in", "env")
    e = fault.expect(SCHED, landed(fault, 5.0, {0: {ROW: 9.0}, 1: {ROW: 9.1}, 2: {}}))
    assert e.seers == {0, 2} and named(e) == {(2, None)}
    e = fault.expect(SCHED, landed(fault, 10.0, {0: {ROW: 9.0}, 1: {ROW: 9.1}, 2: {}}))
    assert not e.seers and not e.blame   # the sweep may be done with those ports: nothing binds
    # No row at all (the phase skipped, or cut short): once a node is in its goodbye, no sweep is ahead.
    e = fault.expect(SCHED, landed(fault, 10.0, {0: {GOODBYE: 9.0}, 1: {GOODBYE: 9.1}, 2: {GOODBYE: 9.2}}))
    assert not e.seers and not e.blame


def test_a_joiner_stopped_while_it_polls_for_the_verdict_binds_the_host_alone():
    """Stopped after its goodbye line: the host's answer may wait in its socket buffer and be read
    once it is resumed, so it may pass; the host never gets its goodbye, and names it."""
    fault = stop(1)
    e = fault.expect(SCHED, landed(fault, 17.5, {0: {**SWEPT, GOODBYE: 19.0}, 1: {**SWEPT, GOODBYE: 17.0},
                                                 2: {**SWEPT, GOODBYE: 17.1}}))
    assert e.seers == {0} and named(e) == {(1, None)} and e.resumed == {1}


def test_a_host_stopped_mid_sweep_binds_itself_only_when_resumed_past_its_timeout():
    fault = stop(0)
    lines = {0: SWEPT, 1: SWEPT, 2: SWEPT}
    late = fault.expect(SCHED, landed(fault, 12.0, lines, timeout=40.0, resumed={0: 41.0}))
    assert late.seers == {0, 1, 2} and named(late) == {(0, 1), (0, 2)}   # it cannot see its own stop
    early = fault.expect(SCHED, landed(fault, 12.0, lines, timeout=40.0, resumed={0: 30.0}))
    assert early.seers == {1, 2}
    killed = stop(0, "SIGKILL")
    e = killed.expect(SCHED, landed(killed, 12.0, lines))
    assert e.exit_codes == {0: {-signal.SIGKILL}} and e.no_report == {0} and e.resumed == {0}


def test_a_fault_that_never_landed_expects_a_healthy_run_but_for_speed_verdicts():
    fault = firewall(1, "all", "both")
    e = fault.expect(SCHED, SimpleNamespace(fault_state={}, runs={}))
    assert not e.breaks and not e.seers and e.speed_ok


def test_the_midrun_campaign_draws_a_midrun_fault_in_most_schedules_and_only_companions_beside_it():
    schedules = [draw_schedule(62, i, midrun=True) for i in range(300)]
    with_midrun = [s for s in schedules if any(isinstance(f, MidRun) for f in s.faults)]
    assert len(with_midrun) > 0.7 * len(schedules)
    for s in with_midrun:
        kinds = [f.kind for f in s.faults]
        assert sum(isinstance(f, MidRun) for f in s.faults) == 1, s.what()
        assert set(kinds) - {k.kind for k in MIDRUN} <= set(MIDRUN_COMPANIONS), s.what()
        assert s.mode != "torchrun" and s.n <= 4 and s.bandwidth, s.what()
        assert s.replay().endswith("--midrun")


def test_the_draw_gives_sizes_up_to_8_the_smaller_more_often_and_both_torchrun_shapes():
    schedules = [draw_schedule(64, i) for i in range(2000)]
    sizes = Counter(s.n for s in schedules if s.mode != "torchrun" and not s.bandwidth)
    assert set(sizes) == set(range(3, 9)) and sizes[3] > sizes[5] > sizes[8] > 0, sizes
    assert {s.nproc for s in schedules if s.mode != "torchrun"} == {1}
    shapes = Counter(s.shape for s in schedules if s.mode == "torchrun")
    assert set(shapes) == {(3, 1), (2, 4)} and min(shapes.values()) > 0.3 * sum(shapes.values()), shapes
    two_by_four = next(s for s in schedules if s.shape == (2, 4))
    assert two_by_four.what().startswith("torchrun n=2x4: ") and "torchrun n=2x4 timeout=" in two_by_four.describe()
    assert draw_schedule(64, 7).what() == schedules[7].what()   # (seed, index) alone
    # On 2 nodes only what fits 2 (duplicate_hostname wants two nodes beside node0 under torchrun).
    on_two = {f.kind for s in schedules if s.n == 2 for f in s.faults}
    assert "duplicate_hostname" not in on_two and {"hostname_127011", "decoy_ib0", "mtu_mismatch"} <= on_two, on_two
    for s in schedules:
        # Every fault on a node of the cluster: none that needs 3 nodes drawn onto 2.
        assert all(max(f.nodes) < s.n for f in s.faults), s.what()
        assert all(s.mode in f.modes for f in s.faults), s.what()


def test_the_timeout_counts_each_ranks_torch_import():
    assert timeout_for(8, False, "torchrun") == timeout_for(8, False, "ranked")
    two_by_four = Schedule(1, 0, "torchrun", 2, (), nproc=4)
    assert two_by_four.timeout == timeout_for(8, False, "torchrun") > Schedule(1, 0, "torchrun", 3, ()).timeout


def test_under_torchrun_a_node_is_each_of_its_ranks():
    """2 nodes x 4 processes: the host's report lists 8 ranks, 4 at each node's address; a finding
    naming any of node1's ranks names node1, and node1's own finding is in any of its ranks' reports."""
    nodes = [SimpleNamespace(addr=f"198.18.0.{10 + i}", hostname=f"node{i}") for i in range(2)]
    sched = Schedule(1, 0, "torchrun", 2, (LoopbackHostname((1,)),), nproc=4)
    o = Outcome(sched, SimpleNamespace(c=SimpleNamespace(nodes=nodes), runs={}), [])
    fail = {"check": "nic.gloo_default", "kind": "", "severity": "fail", "nodes": [4, 5, 6, 7],
            "summary": "", "evidence": []}
    o.host_report = {"role": "host", "findings": [fail],
                     "nodes": [{"rank": r, "address": nodes[r // 4].addr} for r in range(8)]}
    o.rank_reports = {r: {"node_rank": r, "findings": []} for r in range(8)}
    o.rank_reports[6]["findings"] = [{**fail, "check": "rdzv.reach", "nodes": [6]}]
    assert ranks_of(o, 0) == {0, 1, 2, 3} and ranks_of(o, 1) == {4, 5, 6, 7}
    assert [r["node_rank"] for r in reports_of(o, 1)] == [4, 5, 6, 7]
    _judge_blame(o, Blame(1, ("nic.gloo_default",)))
    _judge_blame(o, Blame(1, ("nic.gloo_default",), alone=True))
    _judge_blame(o, Blame(1, ("rdzv.reach",), reporter=1))
    assert o.violations == []
    _judge_blame(o, Blame(0, ("nic.gloo_default",)))
    _judge_blame(o, Blame(0, ("rdzv.reach",), reporter=0))
    assert len(o.violations) == 2, o.violations


LINE_PRINTER = ("import sys, time\nfor i in range(200):\n"
                "    sys.stderr.write(f'at {time.monotonic()!r}\\n'); sys.stderr.flush(); time.sleep(0.01)\n")


def test_a_line_is_seen_well_within_LINE_LAG():
    """The oracle's margin: a line printed on a pty (as netcheck's progress is, to a terminal) is
    seen by the runner's reader thread, timed, while the runner works beside it under the GIL.
    CLOCK_MONOTONIC is the machine's: the printer's stamp and the reader's compare. Measured at
    most 0.017 s alone and 0.032 s under two busy loops (200 lines)."""
    reader, writer = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", LINE_PRINTER], stderr=writer, stdin=subprocess.DEVNULL)
    os.close(writer)
    run = NodeRun(0, proc, Path("unused"), time.monotonic(), progress=TimedLines())
    thread = threading.Thread(target=run.read_terminal, args=(reader,), daemon=True)
    thread.start()
    while proc.poll() is None:
        busy_until = time.monotonic() + 0.015   # the runner's own work between its polls
        while time.monotonic() < busy_until:
            pass
        time.sleep(0.02)
    thread.join(5)
    lags = [seen - float(line.split()[1]) for line, seen in zip(run.progress, run.progress.times)
            if line.startswith("at ")]
    assert len(lags) == 200 and max(lags) < LINE_LAG / 2, max(lags)


def test_a_nodes_exit_code_is_what_its_report_says_whose_fault_it_is():
    """The oracle holds every node's exit code to its report's `fault` (README, "Exit codes"):
    the healthy node beside a faulty one exits 4, and where nobody is at fault, the verdict's."""
    def report(party: str, verdict: str = "fail") -> dict:
        return {"verdict": verdict, "fault": {"party": party, "nodes": [], "hostnames": [], "why": ""}}

    assert [said_exit(report(p)) for p in ("this_node", "netcheck", "other_nodes", "cluster")] == [2, 3, 4, 5]
    assert said_exit(report("nobody", "warn")) == 1 and said_exit(report("nobody", "pass")) == 0
    assert said_exit({"verdict": "fail", "fault": None}) == 2, "a report without a fault: its verdict's"
