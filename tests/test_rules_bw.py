"""The bandwidth rules: bw.stage, bw.wrong, bw.busbw, bw.pair, bw.straggler."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from netcheck.bandwidth.faults import in_flight
from netcheck.bandwidth.sweep import COLLECTIVES, make_row
from netcheck.core.bwrecords import (
    BandwidthResult,
    BusyProcess,
    Fault,
    InFlight,
    NodeLinks,
    Pair,
    RankTime,
    Sweep,
    SweepOptions,
    Unanswered,
    headline,
)
from netcheck.core.meshrecords import FlaggedPaths
from netcheck.core.model import Finding
from netcheck.rules import registry
from netcheck.rules.bw import bandwidth_findings, flagged_skip, stop_explained

NAMES = {0: "node0", 1: "node1", 2: "node2", 3: "node3"}
ALL_REDUCE = COLLECTIVES["all_reduce"]


def rows(n: int, busbw_peak: float, wrong: tuple[int, ...] = ()) -> tuple:
    """Two all_reduce rows over n ranks, the larger peaking at busbw_peak GB/s."""
    out = []
    for size, share in ((1 << 16, 0.5), (1 << 20, 1.0)):
        seconds = size * ALL_REDUCE.factor(n) / (busbw_peak * share * 1e9)
        wrongs = [1 if r in wrong else 0 for r in range(n)]
        out.append(make_row(ALL_REDUCE, size // 4, "float32", n, [seconds] * n, wrongs, True, list(range(n))))
    return tuple(out)


def result(nnodes=3, nproc=1, busbw=1.0, pairs=(), faults=(), failed=None, sweeps=None,
           backend="nccl", **kw) -> BandwidthResult:
    world = nnodes * nproc
    times = tuple(RankTime(r, r // nproc, 100.0) for r in range(world))
    sweeps = sweeps if sweeps is not None else (Sweep("all", "all_reduce", world, 1, rows(world, busbw),
                                                      rank_times=times),)
    reason = "no CUDA: using gloo" if backend == "gloo" else "every rank has CUDA: using nccl"
    options = kw.pop("options", SweepOptions())
    heads = tuple(h for s in sweeps if (h := headline(s, options, 2, nnodes)))
    return BandwidthResult(backend, reason, nnodes, nproc, sweeps, tuple(pairs), failed,
                           "why" if failed else "", tuple(faults), 3.0, headlines=heads, **kw)


def healthy_pairs(slow: set[int] = frozenset(), n: int = 3) -> tuple[Pair, ...]:
    return tuple(Pair(a, b, 1 << 20, 100.0, 0.2 if {a, b} & slow else 1.0)
                 for a in range(n) for b in range(a + 1, n))


def by_check(findings, check):
    return [f for f in findings if f.check == check]


def findings_of(res, line=None, expect=None):
    named = replace(res, hostnames={str(n): h for n, h in NAMES.items()})
    return bandwidth_findings(named, line or {}, expect)


def test_a_healthy_run_passes_every_check_with_the_backend_named():
    found = findings_of(result(pairs=healthy_pairs(), backend="gloo"))
    assert {f.check for f in found} == {registry.BW_STAGE, registry.BW_WRONG, registry.BW_BUSBW,
                                        registry.BW_PAIR, registry.BW_STRAGGLER}
    assert all(f.severity == "pass" for f in found)
    (stage,) = by_check(found, registry.BW_STAGE)
    assert "3 ranks" in stage.summary and "no CUDA: using gloo" in stage.summary


def test_every_finding_is_well_formed():
    cases = [result(pairs=healthy_pairs({2})), result(faults=(Fault(1, 1, 0, "all", "died", "x"),), failed="all"),
             result(sweeps=(Sweep("all", "all_reduce", 3, 1, rows(3, 1.0, wrong=(1,))),))]
    for res in cases:
        found = findings_of(res, {0: 1.0}, 5.0)
        assert found, "a case that gives no finding proves nothing here"
        for f in found:
            assert f.check in registry.BY_ID and f.severity in registry.BY_ID[f.check].severities
            assert all(0 <= n < res.nnodes for n in f.nodes)
            assert f.severity == "pass" or f.fix


# --- bw.stage ----------------------------------------------------------------------------------

RESET = ("RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error [198.18.0.12]:21713: Connection reset by "
         "peer. This is typically caused by a remote worker hanging")
CLOSED = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [198.18.0.11]:37013."
ADDRESSES = tuple(NodeLinks(n, (), (), (f"198.18.0.1{n}",)) for n in range(3))


def test_a_reset_from_a_live_peer_names_the_pair_as_a_path_that_cuts_long_flows():
    """node1's connection to node2 reset on the way; node1's worker failed and ended, closing
    (or resetting, data unread) its connection to node0: that one is the failure's echo."""
    cut_by_closing = CLOSED.replace("198.18.0.11", "198.18.0.12")
    for echo, cut in ((CLOSED, RESET), (RESET.replace("198.18.0.12", "198.18.0.11"), RESET), (CLOSED, cut_by_closing)):
        faults = (Fault(0, 0, 0, "all", "failed", echo), Fault(1, 1, 0, "all", "failed", cut))
        (stage,) = by_check(findings_of(result(faults=faults, failed="all", links=ADDRESSES)), registry.BW_STAGE)
        assert (stage.severity, stage.kind, stage.nodes) == ("fail", "cut_flow", (1, 2))
        assert "node1 and node2" in stage.summary and "cuts long flows" in stage.summary


def test_a_live_peer_that_ends_after_the_cut_closes_its_other_connections_the_reset_is_the_cut():
    """node3 reset node1's connection on the way (the pairs stage); its own worker then ended with
    the run, closing its idle connections to node0 and node2 (campaign 63203 #60 named node0's)."""
    links = tuple(NodeLinks(n, (), (), (f"198.18.0.1{n}",)) for n in range(4))
    closed, reset = CLOSED.replace("198.18.0.11", "198.18.0.13"), RESET.replace("198.18.0.12", "198.18.0.13")
    faults = (Fault(0, 0, 0, "pairs", "failed", closed), Fault(1, 1, 0, "pairs", "failed", reset),
              Fault(2, 2, 0, "pairs", "failed", closed))
    (stage,) = by_check(findings_of(result(nnodes=4, faults=faults, failed="pairs", links=links)), registry.BW_STAGE)
    assert (stage.kind, stage.nodes) == ("cut_flow", (1, 3)) and "node1 and node3" in stage.summary, stage


def test_where_every_worker_failed_the_one_reset_among_closes_is_the_cut():
    """node1's connection reset on the way, node1's worker ended (closing node0's), node0's
    ended (closing node2's): every node has a fault, the cut is the reset."""
    faults = (Fault(0, 0, 0, "all", "failed", CLOSED), Fault(1, 1, 0, "all", "failed", RESET),
              Fault(2, 2, 0, "all", "failed", CLOSED.replace("198.18.0.11", "198.18.0.10")))
    (stage,) = by_check(findings_of(result(faults=faults, failed="all", links=ADDRESSES)), registry.BW_STAGE)
    assert (stage.kind, stage.nodes) == ("cut_flow", (1, 2))
    # node1, reset by node2 on the way, ended with node0's data unread and reset it in turn:
    # node1's reset is the echo (node1 was itself reset), node2's the cut (CI, test_longflow_cluster).
    echoed = (Fault(0, 0, 0, "all", "failed", RESET.replace("198.18.0.12", "198.18.0.11")), Fault(1, 1, 0, "all",
              "failed", RESET), Fault(2, 2, 0, "all", "failed", CLOSED.replace("198.18.0.11", "198.18.0.10")))
    (stage,) = by_check(findings_of(result(faults=echoed, failed="all", links=ADDRESSES)), registry.BW_STAGE)
    assert (stage.kind, stage.nodes) == ("cut_flow", (1, 2))
    # A ring of resets (0 by 1, 1 by 2, 2 by 0: CI, test_longflow_cluster): the first one heard
    # is the cut, the others its echoes; without the times nothing is claimed.
    ring = tuple(Fault(n, n, 0, "all", "failed", RESET.replace("198.18.0.12", f"198.18.0.1{(n + 1) % 3}"), at=at)
                 for n, at in ((0, 100.02), (1, 100.0), (2, 100.05)))
    (stage,) = by_check(findings_of(result(faults=ring, failed="all", links=ADDRESSES)), registry.BW_STAGE)
    assert (stage.kind, stage.nodes) == ("cut_flow", (1, 2))
    untimed = tuple(replace(f, at=None) for f in ring)
    (stage,) = by_check(findings_of(result(faults=untimed, failed="all", links=ADDRESSES)), registry.BW_STAGE)
    assert stage.kind == ""
    closes_only = (faults[0], faults[2], Fault(1, 1, 0, "all", "failed", CLOSED.replace("198.18.0.11", "198.18.0.12")))
    (stage,) = by_check(findings_of(result(faults=closes_only, failed="all", links=ADDRESSES)), registry.BW_STAGE)
    assert stage.kind == "", "a ring of closes has no first: nothing is claimed"


def dark(node: int, unanswered=(), unreached=()) -> NodeLinks:
    """Node n's links (its address 198.18.0.1n) with the connections it saw unanswered, to
    the nodes given, and the Doors it knocked on in vain."""
    return replace(ADDRESSES[node], unanswered=tuple(Unanswered(f"198.18.0.1{p}", 1, 0, 4) for p in unanswered),
                   unreached=tuple(unreached))


TIMED_OUT = tuple(Fault(n, n, 0, "all", "timeout", "still in stage all at the phase's deadline") for n in range(3))


def test_a_node_at_an_end_of_every_unanswered_connection_is_named_alone():
    """node2's ports went dark after the mesh: every rank timed out; node1's connection to it
    and its to node0 went unanswered, and the knocks on its Door: it alone is named."""
    for links in ((dark(0), dark(1, unanswered=[2]), dark(2, unanswered=[0])),
                  (dark(0, unreached=[2]), dark(1, unreached=[2]), dark(2, unreached=[0, 1])),
                  (dark(0), dark(1), dark(2, unreached=[0, 1]))):
        (stage,) = by_check(findings_of(result(faults=TIMED_OUT, failed="all", links=links)), registry.BW_STAGE)
        assert (stage.severity, stage.kind, stage.nodes) == ("fail", "unanswered", (2,)), links
        assert "node2 stopped answering" in stage.summary and "firewall rule" in stage.fix
        assert stage.evidence[0].startswith("node") and " -> " in stage.evidence[0]


def test_unanswered_connections_that_name_no_one_node_leave_the_timeouts_as_they_are():
    # One pair's connections only: either end may be the one gone dark.
    two = (dark(0, unanswered=[2]), dark(1), dark(2, unreached=[0]))
    # Every node at an end of some, none of all: a ring of them (the whole fabric, a switch).
    apart = (dark(0, unanswered=[1]), dark(1, unanswered=[2]), dark(2, unanswered=[0]))
    for links in (two, apart, ADDRESSES):
        (stage,) = by_check(findings_of(result(faults=TIMED_OUT, failed="all", links=links)), registry.BW_STAGE)
        assert (stage.kind, stage.nodes) == ("", (0, 1, 2)), links
    # A worker that died names itself: the connections to it go unanswered because it died.
    died = (TIMED_OUT[0], TIMED_OUT[1], Fault(2, 2, 0, "all", "died", "killed by SIGKILL"))
    links = (dark(0, unanswered=[2]), dark(1, unanswered=[2]), dark(2))
    (stage,) = by_check(findings_of(result(faults=died, failed="all", links=links)), registry.BW_STAGE)
    assert (stage.kind, stage.nodes) == ("", (2,))


def test_a_reset_from_a_peer_whose_worker_died_is_the_death_not_the_path():
    faults = (Fault(1, 1, 0, "all", "failed", RESET), Fault(2, 2, 0, "all", "died", "killed by SIGKILL"))
    (stage,) = by_check(findings_of(result(faults=faults, failed="all", links=ADDRESSES)), registry.BW_STAGE)
    assert stage.kind == "" and stage.nodes == (2,)


def test_a_sweep_a_fault_stopped_passes_no_busbw_whatever_its_small_sizes_measured():
    """The rows before the fault are small sizes: no plateau, so bw.busbw warns (never a pass on
    what was not measured) and bw.stage names the fault."""
    stopped = result(faults=(Fault(1, 1, 0, "all", "failed", "Connection reset by peer"),), failed="all")
    (busbw,) = by_check(findings_of(stopped, {0: 1.0}, 0.5), registry.BW_BUSBW)
    assert busbw.severity == "warn" and busbw.nodes == ()
    assert "stopped at 1 MiB" in busbw.summary and "bw.stage" in busbw.summary
    assert by_check(findings_of(stopped), registry.BW_STAGE)[0].severity == "fail"
    finished_later = result(faults=(Fault(1, 1, 0, "pairs", "failed", "x"),), failed="pairs")
    assert by_check(findings_of(finished_later), registry.BW_BUSBW)[0].severity == "pass", \
        "a sweep that finished before a later stage failed keeps its figure"


def test_a_dead_worker_is_named_with_its_node_and_the_rows_kept():
    faults = (Fault(0, 0, 0, "all", "failed", "RuntimeError: Connection closed by peer"),
              Fault(1, 3, 1, "all", "died", "killed by SIGKILL in stage all"))
    (stage,) = by_check(findings_of(result(nnodes=2, nproc=2, faults=faults, failed="all")), registry.BW_STAGE)
    assert stage.severity == "fail" and stage.nodes == (1,)
    assert stage.summary.startswith("bandwidth stopped in the sweep across all ranks stage: rank 3 "
                                    "(node1, local rank 1) died (killed by SIGKILL")
    assert "kept: 2 rows measured before it stopped" in stage.evidence
    assert any(e.startswith("rank 0 (node0, local rank 0), stage all: failed") for e in stage.evidence)
    assert "dmesg" in stage.fix


def test_a_failed_data_stage_points_at_nccl_settings():
    faults = (Fault(1, 1, 0, "data", "failed", "ValueError: --backend nccl, but no CUDA device"),)
    (stage,) = by_check(findings_of(result(nnodes=2, faults=faults, failed="data", sweeps=())), registry.BW_STAGE)
    assert stage.nodes == (1,) and "data backend init" in stage.summary and "NCCL_SOCKET_IFNAME" in stage.fix


def test_a_sweep_stopped_by_a_failure_found_before_it_holds_that_failures_nodes_at_fault():
    """node1's gloo address is one peers cannot reach (127.0.1.1): node0's and node2's workers fail
    gloo's connect and are named; its cause is node1's. A worker that died names itself still, and
    a failure that stops neither gloo nor the sweep's backend explains nothing."""
    faults = (Fault(0, 0, 0, "control", "failed", "RuntimeError: Gloo connectFullMesh failed"),
              Fault(2, 2, 0, "control", "failed", "RuntimeError: Gloo connectFullMesh failed"))
    res = result(faults=faults, failed="control", sweeps=(), backend="gloo")
    stops_gloo = Finding(check="nic.gloo_default", severity="fail", nodes=(1,),
                         summary="gloo would use an address peers cannot reach on node1")
    found = stop_explained(findings_of(res), res, [stops_gloo])
    (stage,) = by_check(found, registry.BW_STAGE)
    assert (stage.nodes, stage.cause_nodes) == ((0, 2), (1,))
    short = Finding(check="host.ports", severity="fail", nodes=(1,),
                    summary="the ephemeral port range of node1 cannot hold the job's sockets",
                    kind="range_too_small")
    (stage,) = by_check(stop_explained(findings_of(res), res, [short]), registry.BW_STAGE)
    assert stage.cause_nodes == (1,), "a node out of ports stops the others' connects to it"
    clock = Finding(check="host.clock", severity="fail", nodes=(1,), summary="node1's clock is 30 s off")
    (stage,) = by_check(stop_explained(findings_of(res), res, [clock]), registry.BW_STAGE)
    assert stage.cause_nodes is None
    died = replace(res, faults=(Fault(2, 2, 0, "control", "died", "killed by SIGKILL"),))
    (stage,) = by_check(stop_explained(findings_of(died), died, [stops_gloo]), registry.BW_STAGE)
    assert (stage.nodes, stage.cause_nodes) == ((2,), None)


def test_nccls_own_warning_chooses_the_fix():
    """Two ranks on one GPU fail NCCL's init with "invalid usage"; its WARN line (in the
    detail, from the worker's stderr) names the cause, whose fix is not an interface."""
    detail = ("DistBackendError: NCCL error in: NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for "
              "details); NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 6000")
    faults = (Fault(0, 0, 0, "data", "failed", detail), Fault(1, 1, 0, "data", "failed", detail))
    (stage,) = by_check(findings_of(result(nnodes=2, faults=faults, failed="data", sweeps=())), registry.BW_STAGE)
    assert "Duplicate GPU detected" in stage.summary
    assert "one GPU per process" in stage.fix and "NCCL_SOCKET_IFNAME" not in stage.fix


def test_a_node_that_never_reported_is_named():
    faults = (Fault(2, -1, -1, "start", "silent", "node 2 did not report"),
              Fault(0, 0, 0, "control", "timeout", "still in stage control"))
    (stage,) = by_check(findings_of(result(faults=faults, failed="start", sweeps=())), registry.BW_STAGE)
    assert stage.nodes == (2,) and "node2 never reported" in stage.summary


HOLE = "node0 -> node2 eth0 (198.18.0.12): blackhole"


def stuck_at_deadline(flagged=()):
    """Every rank of three still in the same all_reduce at the phase's deadline."""
    faults = tuple(Fault(n, n, 0, "all", "timeout", "still in stage all at the phase's deadline",
                         InFlight("all_reduce", 4 << 20, (0, 1, 2))) for n in range(3))
    res = replace(result(faults=faults, failed="all"), hostnames={str(n): h for n, h in NAMES.items()})
    (stage,) = by_check(bandwidth_findings(res, {}, None, flagged), registry.BW_STAGE)
    return stage


def test_a_sweep_stopped_at_its_deadline_names_the_collective_in_flight_and_the_flagged_paths():
    stage = stuck_at_deadline((HOLE,))
    assert stage.severity == "fail" and stage.nodes == (0, 1, 2)
    assert "all_reduce of 4 MiB among ranks 0-2" in stage.summary and "ran out of time" not in stage.summary
    assert f"flagged by the mesh: {HOLE}" in stage.evidence
    assert "mesh.connect" in stage.fix and "--timeout" in stage.fix and "more time" not in stage.fix


def test_without_flagged_paths_the_deadline_fix_looks_at_the_ranks_not_at_more_time():
    stage = stuck_at_deadline()
    assert not any(e.startswith("flagged by the mesh") for e in stage.evidence)
    assert stage.fix.startswith("the collective in flight hung") and "give the run more time" not in stage.fix


def test_the_sweep_is_skipped_where_the_mesh_found_a_blackhole_and_runs_otherwise():
    assert flagged_skip(FlaggedPaths(), {}) is None
    assert flagged_skip(FlaggedPaths(0, ("node0 -> node1 eth0 (198.18.0.11): filtered",)), {}) is None
    skipped = flagged_skip(FlaggedPaths(6, (HOLE,) * 6), {})
    assert (skipped.check, skipped.severity, skipped.kind) == (registry.RUN_SKIPPED, "warn", registry.SKIPPED_PHASE)
    assert "the bandwidth phase was skipped" in skipped.summary and HOLE in skipped.summary
    assert "2 more" in skipped.summary and "path MTU" in skipped.fix


OPTIONS = SweepOptions(minbytes=1 << 10, maxbytes=1 << 20, stepfactor=4, few_small_sizes=False)  # 1K 4K 16K 64K 256K 1M


def test_the_size_in_flight_is_the_one_after_the_last_reported():
    two_done = Sweep("all", "all_reduce", 4, 1, rows(4, 1.0))  # two rows (64K and 1M in the helper)
    assert in_flight("all", two_done, (), 0, 2, 2, OPTIONS) == InFlight("all_reduce", 16 << 10, (0, 1, 2, 3))
    skipped = replace(two_done, skipped=(1 << 20,) * 4)   # every size accounted for: between sweeps
    assert in_flight("all", skipped, (), 0, 2, 2, OPTIONS) is None
    # Without -e, a sweep that ran every size may go on past the last: the next one is in flight.
    all_ran = replace(two_done, rows=two_done.rows * 3)
    assert in_flight("all", all_ran, (), 0, 2, 2, OPTIONS) == InFlight("all_reduce", 4 << 20, (0, 1, 2, 3))
    assert in_flight("all", all_ran, (), 0, 2, 2, replace(OPTIONS, past_maxbytes=False)) is None
    assert in_flight("intra", two_done, (), 1, 2, 2, OPTIONS) == InFlight("new_group", 0, (2, 3))
    assert in_flight("control", None, (), 0, 2, 2, OPTIONS) is None


def test_the_pair_in_flight_is_this_nodes_pair_of_the_next_round():
    first_round = (Pair(0, 3, 1 << 16, 10.0, 1.0), Pair(1, 2, 1 << 16, 10.0, 1.0))  # round_robin(4)'s first
    assert in_flight("pairs", None, first_round, 2, 4, 2, OPTIONS) == InFlight("sendrecv", 1 << 16, (0, 4))
    assert in_flight("pairs", None, (), 1, 4, 2, OPTIONS) == InFlight("sendrecv", 0, (2, 4))


# --- bw.wrong -----------------------------------------------------------------------------------

def test_corrupted_elements_fail_and_name_the_receiving_node():
    sweeps = (Sweep("all", "all_reduce", 4, 1, rows(4, 1.0, wrong=(3,))),)
    (wrong,) = by_check(findings_of(result(nnodes=2, nproc=2, sweeps=sweeps)), registry.BW_WRONG)
    assert wrong.severity == "fail" and wrong.nodes == (1,)
    assert wrong.summary == "2 corrupted elements received on node1"
    assert wrong.evidence[0] == "all_reduce all 65536 B: 1 wrong on rank(s) 3"


def test_unchecked_runs_say_nothing_about_corruption():
    unchecked = tuple(replace(r, wrong=None) for r in rows(3, 1.0))
    assert not by_check(findings_of(result(sweeps=(Sweep("all", "all_reduce", 3, 1, unchecked),))),
                        registry.BW_WRONG)


# --- bw.busbw -----------------------------------------------------------------------------------

def test_busbw_below_the_expectation_fails_with_the_efficiency():
    (busbw,) = by_check(findings_of(result(busbw=0.5), expect=2.0), registry.BW_BUSBW)
    assert busbw.severity == "fail"
    assert busbw.summary == ("all_reduce busbw plateau over 3 ranks: 0.375 GB/s (0.25-0.5) at 64 KiB-1 MiB, still "
                             "rising at the largest size (a floor); 19% of --expect-busbw 2 GB/s")
    assert busbw.nodes == (), "a figure of the whole cluster names no node: the exclude file would list them all"


def test_busbw_at_the_expectation_passes():
    (busbw,) = by_check(findings_of(result(busbw=3.0), expect=2.0), registry.BW_BUSBW)
    assert busbw.severity == "pass" and "112% of --expect-busbw" in busbw.evidence[0]


def test_busbw_far_below_the_line_rate_warns_against_the_slowest_nic():
    line = {0: 100.0, 1: 25.0, 2: None}  # 25 Gb/s = 3.125 GB/s; 0.5 GB/s is 16% of it
    (busbw,) = by_check(findings_of(result(busbw=0.5), line), registry.BW_BUSBW)
    assert busbw.severity == "warn" and "16% of the slowest NIC's line rate (node1: 25 Gb/s" in busbw.summary
    assert busbw.nodes == (), "a figure of the whole cluster: no node is excluded for it"
    (ok,) = by_check(findings_of(result(busbw=3.0), line), registry.BW_BUSBW)
    assert ok.severity == "pass" and "96% of the slowest NIC's line rate" in ok.evidence[0]


def test_gloo_far_below_the_line_rate_is_a_number_not_a_warning():
    line = {0: 100.0, 1: 25.0, 2: None}
    (busbw,) = by_check(findings_of(result(busbw=0.5, backend="gloo"), line), registry.BW_BUSBW)
    assert busbw.severity == "pass" and "16% of the slowest NIC's line rate" in busbw.evidence[0]


def test_line_rate_uses_the_inter_node_sweep_and_needs_several_nodes():
    sweeps = (Sweep("all", "all_reduce", 4, 1, rows(4, 3.0)), Sweep("inter", "all_reduce", 2, 1, rows(2, 0.1)))
    (busbw,) = by_check(findings_of(result(nnodes=2, nproc=2, sweeps=sweeps), {0: 10.0, 1: 10.0}), registry.BW_BUSBW)
    assert busbw.severity == "warn" and "8% of the slowest" in busbw.summary
    one_node = findings_of(result(nnodes=1, busbw=0.01), {0: 100.0})
    assert [f.severity for f in by_check(one_node, registry.BW_BUSBW)] == ["pass"]


# --- bw.pair -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,slow", [(3, {2}), (4, {1}), (5, {0}), (4, {2, 3})])
def test_a_node_whose_pairs_are_slow_is_named(n, slow):
    (pair,) = by_check(findings_of(result(nnodes=n, pairs=healthy_pairs(slow, n))), registry.BW_PAIR)
    assert pair.severity == "fail" and pair.nodes == tuple(sorted(slow))
    assert f"{NAMES[min(slow)]} at best 0.2 GB/s" in pair.summary


def test_two_nodes_cannot_tell_which_is_slow():
    (pair,) = by_check(findings_of(result(nnodes=2, pairs=healthy_pairs({1}, 2))), registry.BW_PAIR)
    assert pair.severity == "pass" and "cannot be told" in pair.summary


def test_noise_within_the_threshold_passes():
    pairs = (Pair(0, 1, 1 << 20, 1.0, 1.0), Pair(0, 2, 1 << 20, 1.0, 0.7), Pair(1, 2, 1 << 20, 1.0, 0.6))
    (pair,) = by_check(findings_of(result(pairs=pairs)), registry.BW_PAIR)
    assert pair.severity == "pass"


def noisy(res: BandwidthResult, spread: float) -> BandwidthResult:
    return replace(res, headlines=tuple(replace(h, spread=spread, noisy=True) for h in res.headlines))


def test_a_node_slow_by_no_more_than_the_runs_own_noise_is_a_warning_and_one_far_slower_fails():
    """Campaign 64102 #11, a healthy cluster on a machine at load 15: node3's best pair 0.193 GB/s
    against a median of 0.603 while the run's all_reduce plateau moved 123%; bw.pair failed node3
    and the job ran. Below half the median by more than the noise is slow beyond doubt (a 20 Mbit/s
    link: 240 times slower)."""
    pairs = (Pair(0, 3, 1 << 20, 1.0, 0.131), Pair(1, 2, 1 << 20, 1.0, 0.599), Pair(0, 2, 1 << 20, 1.0, 0.607),
             Pair(1, 3, 1 << 20, 1.0, 0.193), Pair(0, 1, 1 << 20, 1.0, 0.0915), Pair(2, 3, 1 << 20, 1.0, 0.0952))
    (pair,) = by_check(findings_of(noisy(result(nnodes=4, pairs=pairs), 1.23)), registry.BW_PAIR)
    assert (pair.severity, pair.kind, pair.nodes) == ("warn", registry.BW_PAIR_NOISY, (3,)), pair
    assert "moved 123%" in pair.summary, pair.summary
    (pair,) = by_check(findings_of(result(nnodes=4, pairs=pairs)), registry.BW_PAIR)   # the figures held still
    assert (pair.severity, pair.nodes) == ("fail", (3,)), pair
    shaped = healthy_pairs({2}, 4)
    shaped = tuple(replace(p, busbw=0.0025) if 2 in (p.a, p.b) else p for p in shaped)
    (pair,) = by_check(findings_of(noisy(result(nnodes=4, pairs=shaped), 1.23)), registry.BW_PAIR)
    assert (pair.severity, pair.nodes) == ("fail", (2,)), pair


def test_pairs_measured_at_a_latency_size_judge_no_node_and_say_so():
    """A sweep slowed by a lossy link left the pairs 512 bytes: node2's pairs ran at a third of
    the others', which is latency, not bandwidth (issue 63: bw.pair FAILed node2 from them while
    the job's 64 MiB busbw was above the healthy control's)."""
    pairs = (Pair(0, 1, 512, 1.0, 0.03), Pair(0, 2, 512, 1.0, 0.01), Pair(1, 2, 512, 1.0, 0.01))
    small = tuple(make_row(ALL_REDUCE, size // 4, "float32", 3, [0.07] * 3, [0] * 3, True, [0, 1, 2])
                  for size in (8, 64, 512, 4096))
    crawled = (Sweep("all", "all_reduce", 3, 1, small),)
    (pair,) = by_check(findings_of(result(pairs=pairs, sweeps=crawled)), registry.BW_PAIR)
    assert (pair.severity, pair.kind, pair.nodes) == ("warn", registry.BW_PAIR_TOO_SMALL, (0, 1, 2))
    assert "512 bytes only" in pair.summary and "stopped at 4 KiB" in pair.summary, pair.summary
    assert any(line.startswith("slowest at that size: node2") for line in pair.evidence), pair.evidence
    # A slow link's sweep reaches its large sizes: its small pairs are paced by the link, and judged.
    (pair,) = by_check(findings_of(result(pairs=pairs)), registry.BW_PAIR)
    assert (pair.severity, pair.nodes) == ("fail", (2,)), pair


# --- bw.straggler ----------------------------------------------------------------------------------

def test_a_slow_rank_is_a_straggler():
    times = (RankTime(0, 0, 100.0), RankTime(1, 0, 110.0), RankTime(2, 1, 400.0), RankTime(3, 1, 105.0))
    sweeps = (Sweep("all", "all_reduce", 4, 1, rows(4, 1.0), rank_times=times),)
    (slow,) = by_check(findings_of(result(nnodes=2, nproc=2, sweeps=sweeps)), registry.BW_STRAGGLER)
    assert slow.severity == "warn" and slow.nodes == (1,) and slow.evidence[0].startswith("rank 2 (node1)")


def test_a_node_slow_inside_is_a_straggler():
    sweeps = (Sweep("all", "all_reduce", 6, 1, rows(6, 1.0)),
              Sweep("intra", "all_reduce", 2, 3, rows(2, 1.0), node_busbw={"0": 1.0, "1": 0.2, "2": 0.9}))
    (slow,) = by_check(findings_of(result(nproc=2, sweeps=sweeps)), registry.BW_STRAGGLER)
    assert slow.nodes == (1,) and "intra-node all_reduce busbw on node1" in slow.summary


def test_a_node_cut_off_by_the_mesh_skips_the_sweep_instead_of_timing_out_on_it():
    """The campaign's seed 2: ephemeral ports closed on node2 and the sweep ran into its
    deadline in gloo's control plane, naming the ranks that waited for node2."""
    skipped = flagged_skip(FlaggedPaths(0, ("node0 -> node2 eth0 (198.18.0.12): filtered",), (2,)),
                           {0: "node0", 1: "node1", 2: "node2"})
    assert (skipped.check, skipped.kind) == ("run.skipped", "phase_skipped")
    assert "node2 cut off" in skipped.summary and "firewall" in skipped.fix


def test_the_pass_names_the_plateau_the_latency_and_the_cost_per_step():
    """2 nodes x 2 ranks: the all-rank plateau heads the finding; the intra and inter
    plateaus, and a 7e9-parameter bf16 gradient's all_reduce per step, come beside it."""
    sweeps = (Sweep("all", "all_reduce", 4, 1, rows(4, 0.9)), Sweep("intra", "all_reduce", 2, 2, rows(2, 4.0)),
              Sweep("inter", "all_reduce", 2, 1, rows(2, 1.0)))
    res = result(nnodes=2, nproc=2, sweeps=sweeps, backend="gloo", options=SweepOptions(model_params=7 * 10 ** 9))
    (busbw,) = by_check(findings_of(res), registry.BW_BUSBW)
    assert busbw.severity == "pass"
    assert busbw.summary.startswith("all_reduce busbw plateau over 4 ranks (gloo): 0.675 GB/s (0.45-0.9) at "
                                    "64 KiB-1 MiB, still rising")
    # 64K is the only latency-bound size here (1M is past them): one latency figure.
    assert re.search(r"; latency [\d.]+ (us|ms) per op at 64 KiB$", busbw.summary), busbw.summary
    # 25 MiB buckets are past the largest size measured: each at the plateau's busbw, the
    # headline's floor where busbw still rose (one figure for the curve, not the top size's).
    step = 2 * 14e9 * 3 / 4 / 0.675e9
    assert (f"a 7e9-parameter bfloat16 gradient (14 GB) in 25 MiB buckets: {step:.3g} s of all_reduce per step "
            "across 2 node(s) (4 ranks) (0.675 GB/s at 25 MiB)") in busbw.evidence
    assert busbw.evidence[0].startswith(
        "inside each node: all_reduce busbw plateau over 2 ranks (gloo): 3 GB/s (2-4) at 64 KiB-1 MiB, still rising")
    assert any(e.startswith("a 7e9-parameter bfloat16 gradient (14 GB) in 25 MiB buckets: ")
               and "inside a node (2 ranks)" in e for e in busbw.evidence)


def test_expect_busbw_judges_the_plateau_not_a_lucky_peak():
    # The plateau is the large-message end (8-32 MiB around 1 GB/s), never the 1 MiB row: a
    # run whose plateau is those three sizes passes 0.95 and fails 1.05.
    flat = tuple(make_row(ALL_REDUCE, s // 4, "float32", 3, [s * ALL_REDUCE.factor(3) / (b * 1e9)] * 3, [0] * 3,
                          True, [0, 1, 2])
                 for s, b in ((1 << 20, 0.5), (8 << 20, 0.98), (16 << 20, 1.0), (32 << 20, 0.99)))
    res = result(sweeps=(Sweep("all", "all_reduce", 3, 1, flat),))
    (ok,) = by_check(findings_of(res, expect=0.95), registry.BW_BUSBW)
    assert ok.severity == "pass" and "0.99 GB/s (0.98-1) at 8 MiB-32 MiB" in ok.evidence[0]
    (low,) = by_check(findings_of(res, expect=1.05), registry.BW_BUSBW)
    assert low.severity == "fail" and "94% of --expect-busbw 1.05 GB/s" in low.summary


def test_a_plateau_at_the_largest_size_the_budget_allowed_is_said_to_be_a_floor():
    cut = Sweep("all", "all_reduce", 3, 1, rows(3, 1.0), skipped=(2 << 20, 4 << 20))
    (ok,) = by_check(findings_of(result(sweeps=(cut,))), registry.BW_BUSBW)
    assert ok.severity == "pass" and ok.evidence[0] == (
        "the sweep reached 1 MiB in --bw-budget (2 MiB-4 MiB skipped) while busbw still rose: a larger --bw-budget "
        "measures further")
    (low,) = by_check(findings_of(result(sweeps=(cut,)), expect=2.0), registry.BW_BUSBW)
    assert low.severity == "fail" and low.evidence[-1].startswith("the sweep reached 1 MiB in --bw-budget")
    # Not where nothing was skipped, nor where the sweep went past its fastest size.
    whole = replace(cut, skipped=())
    assert not any("--bw-budget" in e for f in findings_of(result(sweeps=(whole,))) for e in f.evidence)
    falling = replace(cut, rows=tuple(reversed([replace(r, size=s) for r, s in zip(cut.rows, (1 << 20, 1 << 16))])))
    assert not any("--bw-budget" in e for f in findings_of(result(sweeps=(falling,))) for e in f.evidence)


# --- host.busy, and the figures it affects -----------------------------------------------------

def test_a_busy_process_is_named_per_node_and_marks_the_figure_it_was_measured_beside():
    loops = (BusyProcess(2, 4242, "alice", "python -c while True: pass", 0.98),
             BusyProcess(2, 4343, "root", "python train.py --resume", 0.6))
    found = findings_of(result(pairs=healthy_pairs(), busy=loops))
    (busy,) = by_check(found, registry.HOST_BUSY)
    assert (busy.severity, busy.nodes) == ("warn", (2,))
    assert busy.summary.startswith("node2: pid 4242 (alice) `python -c while True: pass` at 98% of a CPU and 1 more")
    assert busy.evidence[1] == "pid 4343 (root) `python train.py --resume` at 60% of a CPU"
    (busbw,) = by_check(found, registry.BW_BUSBW)
    assert busbw.summary.endswith("measured while node2 ran other work (host.busy)")
    assert not by_check(findings_of(result(pairs=healthy_pairs())), registry.HOST_BUSY), "none seen: none said"


def test_nodes_on_one_machine_that_see_the_same_processes_say_them_once_and_a_gpu_holder_names_its_gpus():
    """Three netcheck nodes on one host (the demo on loopback) each see that host's processes."""
    seen = (BusyProcess(0, 4242, "alice", "python train.py", 0.0, (3,)), BusyProcess(0, 4343, "bob", "make", 0.9))
    busy = tuple(replace(p, node=n) for n in range(3) for p in seen)
    found = bandwidth_findings(result(pairs=healthy_pairs(), busy=busy, hostnames={str(n): "vm" for n in range(3)}),
                               {}, None)
    (one,) = by_check(found, registry.HOST_BUSY)
    assert one.nodes == (0, 1, 2)
    assert one.evidence == ("pid 4242 (alice) `python train.py` at 0% of a CPU, holding GPU 3",
                            "pid 4343 (bob) `make` at 90% of a CPU")
    assert one.summary.endswith(" GPU 3 and 1 more process(es); they used the node's CPUs and held its GPUs while "
                                "bandwidth was measured: the figures are affected")
    (busbw,) = by_check(found, registry.BW_BUSBW)
    assert busbw.summary.endswith("measured while vm ran other work (host.busy)")


def test_a_noisy_plateau_with_no_busy_process_says_none_was_seen():
    noisy = tuple(replace(r, spread=0.5) for r in rows(3, 1.0))
    (busbw,) = by_check(findings_of(result(sweeps=(Sweep("all", "all_reduce", 3, 1, noisy),))), registry.BW_BUSBW)
    assert "noisy: moved 50% while measured" in busbw.summary
    assert "no busy process was seen on the nodes (host.busy)" in busbw.summary


def test_the_pairs_median_is_the_pairs():
    pairs = (Pair(0, 1, 1 << 20, 1.0, 0.916), Pair(0, 2, 1 << 20, 1.0, 0.711), Pair(1, 2, 1 << 20, 1.0, 0.861))
    (ok,) = by_check(findings_of(result(pairs=pairs)), registry.BW_PAIR)
    assert ok.summary.startswith("3 node pairs, median 0.861 GB/s; every node's best pair within 50% of the median "
                                 "node's best (0.916 GB/s)")


def test_nodes_sharing_a_hostname_are_named_with_their_rank_and_the_others_by_name_alone():
    """Every node of a one-machine run is `vm`: "vm <-> vm" in a pair's evidence said nothing."""
    shared = result(pairs=(Pair(0, 1, 1 << 20, 1.0, 0.1), Pair(0, 2, 1 << 20, 1.0, 0.1), Pair(1, 2, 1 << 20, 1.0, 1.0)),
                    hostnames={"0": "vm", "1": "vm", "2": "gpu7"})
    assert [shared.node_name(n) for n in range(4)] == ["vm (node 0)", "vm (node 1)", "gpu7", "node 3"]
    (slow,) = [f for f in bandwidth_findings(shared, {}, None) if f.check == registry.BW_PAIR and f.severity != "pass"]
    assert "vm (node 0)" in slow.summary and "vm (node 0) <-> vm (node 1)" in " ".join(slow.evidence), slow
