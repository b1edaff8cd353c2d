"""The run's own rules (rules/run.py: run.timeout, run.internal, run.skipped, run.stopped, and the
verdict a joiner hears) over hand-built findings."""

from __future__ import annotations

from dataclasses import replace

from netcheck.core.constants import STALL_FAULT_SECONDS
from netcheck.core.model import Finding, Impact, Stall
from netcheck.rules import fault as fault_rules
from netcheck.rules import run as run_rules
from netcheck.rules.registry import impacted


def test_timeout_and_internal_findings():
    assert run_rules.timeout_finding("rendezvous", 60.0) == Finding(
        check="run.timeout", severity="fail", nodes=(),
        summary="the rendezvous phase did not finish within --timeout (60 s)",
        fix="the findings above say what was missing; raise --timeout only if the cluster is merely slow")
    internal = run_rules.internal_finding("mesh", KeyError("eno1"))
    assert (internal.check, internal.severity) == ("run.internal", "fail")
    assert internal.summary == "netcheck could not run the mesh phase: KeyError: 'eno1'"


def test_goodbyes_unheard_for_lack_of_time_do_not_count_as_lost():
    (finding,) = run_rules.unheard_goodbyes({1: "node1", 3: "node3"})
    assert (finding.check, finding.severity, finding.nodes) == ("run.skipped", "warn", ())
    assert "node1, node3 said goodbye; not counted as lost" in finding.summary
    assert run_rules.unheard_goodbyes({}) == []


def test_a_stopped_run_fails_naming_its_signal_and_phase():
    term = run_rules.stopped_finding("SIGTERM", "rendezvous", (0,))
    assert (term.check, term.severity, term.kind, term.nodes) == ("run.stopped", "fail", "sigterm", (0,))
    assert "during the rendezvous phase" in term.summary
    sigint = run_rules.stopped_finding("SIGINT", None, ())
    assert sigint.kind == "sigint" and "before its first phase" in sigint.summary


def test_a_node_that_stood_still_and_then_failed_holds_itself_at_fault():
    lost = Finding(check="rdzv.join", severity="fail", nodes=(0,), summary="the host stopped answering",
                   kind="lost_in_bandwidth")
    own = Finding(check="host.limits", severity="fail", nodes=(1,), summary="a limit of this node's")
    stall = Stall(STALL_FAULT_SECONDS + 7, 12.3)
    frozen, held, kept = run_rules.stood_still([lost, own], stall, (1,))
    assert (frozen.check, frozen.kind, frozen.severity, frozen.nodes) == ("run.stopped", "frozen", "fail", (1,))
    assert "stood still for 12 s, 12 s into it" in frozen.summary
    assert (held.nodes, held.cause_nodes) == ((0,), (1,)) and kept == own   # what it saw of the host is its own
    fault = fault_rules.fault_of([frozen, held, kept], (1,), {0: "node0", 1: "node1"}.get, own_unnamed=True)
    assert (fault.party, fault.nodes, fault.hostnames) == ("this_node", (1,), ("node1",))


def test_a_short_stall_or_a_run_that_passed_is_left_as_it_is():
    lost = Finding(check="rdzv.join", severity="fail", nodes=(0,), summary="lost", kind="lost_in_env")
    slow = Finding(check="bw.pair", severity="warn", nodes=(0,), summary="slow")
    assert run_rules.stood_still([lost], Stall(STALL_FAULT_SECONDS - 0.5, 3.0), (1,)) == [lost]
    assert run_rules.stood_still([slow], Stall(STALL_FAULT_SECONDS + 30, 3.0), (1,)) == [slow]


def test_no_peer_means_not_run_never_passed():
    findings = run_rules.no_peer_findings(["mesh", "nic"])
    assert [(f.check, f.severity, f.kind) for f in findings] == [("run.skipped", "warn", "no_peer")] * 2


def test_the_hosts_verdict_is_told_worst_first_and_bounded():
    findings = [Finding(check="rdzv.join", severity="pass", nodes=(0, 1, 2), summary="3 node(s) joined"),
                Finding(check="nic.mtu", severity="warn", nodes=(1,), summary="odd MTU"),
                Finding(check="mesh.connect", severity="fail", nodes=(2,), summary="node2 is cut off",
                        evidence=tuple(f"line {i}" for i in range(9)))]
    told = run_rules.cluster_verdict(findings)
    assert (told.verdict, told.headline) == ("fail", "node2 is cut off (and 1 more)")
    assert [f.check for f in told.findings] == ["mesh.connect", "nic.mtu"]
    assert len(told.findings[0].evidence) == run_rules.TOLD_EVIDENCE
    many = [Finding(check="rdzv.join", severity="fail", nodes=(i,), summary=f"rank {i} missing") for i in range(100)]
    assert len(run_rules.cluster_verdict(many).findings) == run_rules.TOLD_FINDINGS
    assert run_rules.cluster_verdict(findings[:1]).headline == "every check passed on every node"


def test_a_joiner_keeps_the_hosts_findings_about_itself_once():
    told = run_rules.cluster_verdict([Finding(check="mesh.connect", severity="fail", nodes=(2,),
                                              summary="no peer reaches node2"),
                                      Finding(check="env.mismatch", severity="fail", nodes=(1,),
                                              summary="node1 has another torch"),
                                      Finding(check="rdzv.join", severity="fail", nodes=(3,),
                                              summary="rank 3 never joined")])
    mine = [Finding(check="env.mismatch", severity="fail", nodes=(1,), summary="node1 has another torch"),
            Finding(check="mesh.connect", severity="fail", nodes=(1, 2),
                    summary="1 of 2 directions connect on no interface")]
    kept, findings = run_rules.with_host_verdict(told, (2,), [])
    assert kept.findings == (told.findings[0],) and findings == [told.findings[0]]
    kept, findings = run_rules.with_host_verdict(told, (1,), mine)
    assert kept.findings == () and findings == mine[:1], "said once; the host's attribution wins"
    kept, findings = run_rules.with_host_verdict(told, (0,), [])
    assert findings == [] and kept.verdict == "fail" and "no peer reaches node2" in kept.headline


def test_a_verdict_not_heard_is_no_pass():
    unheard = run_rules.verdict_unheard(8.2)
    assert (unheard.check, unheard.severity) == ("run.cluster", "warn") and "8 s" in unheard.summary


def test_a_joiners_own_drift_stands_for_the_hosts_where_they_agree():
    """--baseline on a joiner too: its own baseline.drift (every line about itself) stands for
    the host's of the same severity; one the joiner judged otherwise is taken as well, so a
    node the host warns about never passes."""
    hosts = Finding(check="baseline.drift", severity="warn", nodes=(0, 1, 2),
                    summary="3 change(s) since the baseline (run 'a')", evidence=("node1: x",))
    told = run_rules.cluster_verdict([hosts])
    hosts = impacted([hosts])[0]   # as told: saying whom it stops
    own = Finding(check="baseline.drift", severity="warn", nodes=(1,),
                  summary="2 change(s) since the baseline (run 'a')", evidence=("node1: x", "node1: y"))
    kept, findings = run_rules.with_host_verdict(told, (1,), [own])
    assert findings == [own] and kept.findings == ()
    calm = Finding(check="baseline.drift", severity="pass", nodes=(1,),
                   summary="nothing drifted since the baseline (run 'a')")
    kept, findings = run_rules.with_host_verdict(told, (1,), [calm])
    assert findings == [calm, hosts] and kept.findings == (hosts,)
    kept, findings = run_rules.with_host_verdict(told, (2,), [])
    assert findings == [hosts] and kept.verdict == "warn", "a joiner without --baseline takes the host's"


def test_a_stopped_host_says_so_first_and_its_joiners_warn_naming_nobody():
    """A host stopped by a signal tells it (ClusterVerdict.stopped); a joiner that hears it warns
    under run.stopped, naming no node: the run did not finish, and nobody is at fault for it."""
    findings = [run_rules.stopped_finding("SIGINT", "mesh", (0,)),
                Finding(check="nic.mtu", severity="warn", nodes=(2,), summary="odd MTU")]
    told = run_rules.cluster_verdict(findings, "SIGINT", "mesh")
    assert (told.verdict, told.stopped, told.stopped_in) == ("fail", "SIGINT", "mesh")
    assert told.headline == ("the host's run was interrupted (SIGINT, Ctrl-C) during the mesh phase: "
                             "the run did not finish (and 1 more)")
    heard = run_rules.host_stopped_finding(told)
    assert (heard.check, heard.severity, heard.kind, heard.nodes) == ("run.stopped", "warn", "host_stopped", ())
    assert "interrupted (SIGINT, Ctrl-C) during the mesh phase" in heard.summary
    term = run_rules.host_stopped_finding(run_rules.cluster_verdict(findings, "SIGTERM", "bandwidth"))
    assert "terminated by SIGTERM during the bandwidth phase" in term.summary
    assert run_rules.cluster_verdict(findings).stopped == "", "a host that finished says no stop"


def test_the_stopped_host_says_whom_it_told():
    findings = [run_rules.stopped_finding("SIGTERM", "env", (0,)), Finding(check="rdzv.join", severity="pass",
                                                                           nodes=(0, 1), summary="joined")]
    (told, joined) = run_rules.told_stop(findings, "node1, node2", "node3")
    assert told.evidence == ("told the other nodes on its way out; heard by node1, node2",
                             "node3 did not say goodbye before it left: each heard of the stop later, or reports "
                             "the host lost")
    assert joined == findings[1]
    (alone,) = run_rules.told_stop(findings[:1], "", "")
    assert alone.evidence == ()


def test_the_verdict_a_host_tells_says_whom_each_finding_stops():
    """A joiner takes the host's findings about it as its own: they come saying whom they stop,
    the host's rule's word included (a joiner cannot tell which way gloo dials)."""
    narrowed = Impact(("nccl_socket", "nccl_rdma"), "stops", "gloo dials the other way")
    cut = Finding(check="mesh.connect", severity="fail", nodes=(1, 2),
                  summary="1 of 6 directions connect on no interface", impact=narrowed)
    late = Finding(check="host.clock", severity="warn", nodes=(1,), summary="node1's clock is 3 s off")
    told = run_rules.cluster_verdict([cut, late])
    assert [f.impact for f in told.findings] == [narrowed, Impact(("launch",), "risks")]


def test_a_joiners_own_sweep_stop_gives_way_to_the_hosts_which_knows_its_cause():
    """Every node judges the sweep's stop from the same accounts; the host alone knows the
    failures before it that explain it (node1's gloo address): its bw.stage, with node1 the
    cause, replaces the joiner's own, whichever nodes it names."""
    stop = Finding(check="bw.stage", severity="fail", nodes=(0, 2),
                   summary="bandwidth stopped in the gloo control plane stage")
    told = run_rules.cluster_verdict([replace(stop, cause_nodes=(1,)),
                                      Finding(check="nic.gloo_default", severity="fail", nodes=(1,),
                                              summary="gloo would use 127.0.1.1")])
    kept, findings = run_rules.with_host_verdict(told, (2,), [stop])
    assert [(f.check, f.nodes, f.cause_nodes) for f in findings] == [("bw.stage", (0, 2), (1,))]
    kept, findings = run_rules.with_host_verdict(run_rules.cluster_verdict([]), (2,), [stop])
    assert findings == [stop], "no stop told: its own stands"
