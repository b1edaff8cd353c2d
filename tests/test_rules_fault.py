"""Whose fault a run's failures are (rules.fault): the rule behind the exit code, `fault` and
`faulty_nodes`, over findings alone. The namespace tests create each fault for real and read
each node's exit code (test_mesh_cluster, test_mtu_cluster, test_ports_cluster, ...)."""

from __future__ import annotations

import dataclasses

import pytest

from netcheck.core.model import Attribution, Finding, exit_of, report_of
from netcheck.render.html import render_html
from netcheck.render.text import fault_line, render_text
from netcheck.rules import fault as fault_rules
from netcheck.rules import run as run_rules

NAMES = {0: "node0", 1: "node1", 2: "node2"}.get


def fail(check: str, *nodes: int, cause: tuple[int, ...] | None = None, kind: str = "") -> Finding:
    return Finding(check=check, severity="fail", nodes=nodes, summary=f"{check} failed", kind=kind, cause_nodes=cause)


def said(fault: Attribution) -> tuple[str, tuple[int, ...], tuple[str, ...]]:
    return fault.party, fault.nodes, fault.hostnames


def host_fault(*findings: Finding) -> Attribution:
    return fault_rules.fault_of(findings, (0,), NAMES, own_unnamed=False)


def test_the_healthy_host_beside_a_faulty_node_blames_that_node_not_itself():
    fault = host_fault(fail("nic.gloo_default", 1))
    assert said(fault) == ("other_nodes", (1,), ("node1",))
    assert fault.why == "nic.gloo_default: nic.gloo_default failed"


def test_an_interface_unproven_only_by_the_meshs_cause_is_that_causes_fault():
    """node2 fails both ways with node0 and node1 (node2 is the cause): gloo's address on node1,
    which node2 never reached, is unproven because of node2; a node the mesh itself holds at
    fault, or names for another reason, stays named (issue 65)."""
    mesh = fail("mesh.connect", 0, 1, 2, cause=(2,))
    assert said(host_fault(mesh, fail("nic.gloo_default", 0, 1))) == ("other_nodes", (2,), ("node2",))
    assert said(host_fault(mesh, fail("nic.gloo_default", 2))) == ("other_nodes", (2,), ("node2",))
    assert said(host_fault(fail("mesh.connect", 1, 2, cause=(2,)), fail("nic.gloo_default", 0))) == \
        ("this_node", (0, 2), ("node0", "node2")), "node0 is no end of the mesh's broken directions"


def test_directions_to_a_node_lost_mid_run_are_that_nodes_fault():
    """node2's cable is pulled during the mesh: the host names it lost, and the directions between
    them that broke name both ends; the lost node broke them (issue 65). Where the mesh names two
    nodes that were not lost, a direction between them may be broken too: both stay named."""
    lost = fail("rdzv.join", 2, kind="lost_in_mesh")
    assert said(host_fault(lost, fail("mesh.connect", 0, 2))) == ("other_nodes", (2,), ("node2",))
    assert said(host_fault(lost, fail("mesh.connect", 0, 1, 2))) == \
        ("this_node", (0, 1, 2), ("node0", "node1", "node2"))


def test_a_node_a_failure_names_is_at_fault_whatever_else_is():
    assert said(host_fault(fail("mesh.connect", 0, 2), fail("nic.gloo_default", 1))) == \
        ("this_node", (0, 1, 2), ("node0", "node1", "node2"))


def test_a_cause_named_beside_its_symptoms_holds_the_cause_alone_at_fault():
    """node1's firewall drops node2's connects: the mesh names both ends, the cause node1; the
    sweep's stop names node0 and node2, whose workers met it."""
    fault = host_fault(fail("mesh.connect", 1, 2, cause=(1,)), fail("bw.stage", 0, 2, cause=(1,)))
    assert said(fault) == ("other_nodes", (1,), ("node1",))
    node2 = fault_rules.fault_of([fail("bw.stage", 0, 2, cause=(1,))], (2,), NAMES, own_unnamed=True)
    assert node2.party == "other_nodes", "a symptom is no fault of the node that met it"


def test_a_failure_naming_no_node_is_the_clusters_on_the_host_and_its_own_on_a_joiner():
    alone = fail("rdzv.join", kind="alone")
    assert said(host_fault(alone)) == ("cluster", (), ())
    unseated = fault_rules.fault_of([fail("rdzv.reach", kind="no_machine")], (-1,), {-1: "node2"}.get,
                                    own_unnamed=True)
    assert said(unseated) == ("this_node", (-1,), ("node2",)), "a joiner's unranked finding is its own"


def test_arrivals_the_host_could_not_seat_are_other_nodes_not_the_cluster():
    late = fail("rdzv.join", kind="late")
    assert said(host_fault(late)) == ("other_nodes", (), ())
    assert host_fault(fail("launch.topology", kind="nnodes_disagree")).party == "other_nodes"
    own = fault_rules.fault_of([late], (-1,), {-1: "node5"}.get, own_unnamed=True)
    assert said(own) == ("netcheck", (), ()), "the latecomer's own report: not tested, not found broken"
    ranked = fault_rules.fault_of([fail("rdzv.join", 1, kind="late")], (1,), {1: "node1"}.get, own_unnamed=True)
    assert ranked.party == "netcheck", "a ranked joiner past the join share: netcheck's deadline, not its fault"
    resolver = fail("rdzv.join", 1, cause=(1,), kind="late")   # its own slow resolver, named as the cause
    assert fault_rules.fault_of([resolver], (1,), {1: "node1"}.get, own_unnamed=True).party == "this_node"


def test_the_cluster_as_a_whole_comes_before_other_nodes_and_after_this_node():
    assert host_fault(fail("rdzv.join", kind="alone"), fail("nic.gloo_default", 1)).party == "cluster"
    assert host_fault(fail("rdzv.join", kind="alone"), fail("nic.gloo_default", 0)).party == "this_node"


def test_a_node_kept_out_by_the_stalled_store_is_no_nodes_fault():
    kept = fail("rdzv.join", 2, cause=(), kind="kept_out")
    assert said(host_fault(kept)) == ("cluster", (), ())


def test_netchecks_own_failures_blame_no_node():
    internal = Finding(check="run.internal", severity="fail", nodes=(),
                       summary="netcheck could not run the mesh phase: KeyError: 3")
    timeout = Finding(check="run.timeout", severity="fail", nodes=(),
                      summary="the mesh phase did not finish within --timeout (30 s)")
    stopped = Finding(check="run.stopped", severity="fail", nodes=(0,), summary="this node's run was interrupted",
                      kind="sigint")
    assert host_fault(internal, fail("nic.gloo_default", 0)).party == "netcheck", "an internal error comes first"
    assert said(host_fault(timeout)) == ("netcheck", (), ())
    assert said(host_fault(timeout, fail("rdzv.join", 2, kind="lost_in_mesh"))) == ("other_nodes", (2,), ("node2",)), \
        "the deadline a lost node spent is that node's"
    assert said(host_fault(stopped)) == ("this_node", (0,), ("node0",)), "a stopped run is not vouched for"


def test_warnings_are_nobodys_fault():
    assert said(host_fault(Finding(check="nic.mtu", severity="warn", nodes=(1,),
                                   summary="odd MTU"))) == ("nobody", (), ())


def test_a_joiner_names_the_nodes_the_host_found_at_fault():
    told = host_fault(fail("mesh.connect", 1, 2, cause=(1,)))
    healthy = fault_rules.fault_of([], (2,), {2: "node2"}.get, own_unnamed=True, told=told)
    assert said(healthy) == ("other_nodes", (1,), ("node1",)) and healthy.why.startswith("the host's word: ")
    faulty = fault_rules.fault_of([fail("mesh.connect", 1, 2, cause=(1,))], (1,), {1: "node1"}.get,
                                  own_unnamed=True, told=told)
    assert said(faulty) == ("this_node", (1,), ("node1",))
    whole = fault_rules.fault_of([], (2,), {2: "node2"}.get, own_unnamed=True, told=host_fault(fail("bw.busbw")))
    assert whole.party == "cluster"
    at_host = fault_rules.fault_of([], (1,), {1: "node1"}.get, own_unnamed=True,
                                   told=host_fault(fail("nic.gloo_default", 0)))
    assert said(at_host) == ("other_nodes", (0,), ("node0",)), "the host's this_node is another node to a joiner"


def test_the_host_tells_its_fault_with_its_verdict():
    fault = host_fault(fail("nic.gloo_default", 1))
    assert run_rules.cluster_verdict([fail("nic.gloo_default", 1)], fault=fault).fault == fault


def test_nodes_at_fault_never_ranked_are_named_by_hostname():
    fault = fault_rules.fault_of([fail("mesh.connect", kind="blackhole")], (0,), NAMES, own_unnamed=False,
                                 unranked=("node7",))
    assert said(fault) == ("other_nodes", (), ("node7",)), "the blackhole names node7, which has no rank"
    assert said(fault_rules.fault_of([], (0,), NAMES, own_unnamed=False, unranked=("node7",))) == \
        ("other_nodes", (), ("node7",))
    joiner = fault_rules.fault_of([], (1,), {1: "node1"}.get, own_unnamed=True, told=fault)
    assert said(joiner) == ("other_nodes", (), ("node7",)), "a healthy joiner names it from the host's word"


@pytest.mark.parametrize("party, code", [("nobody", 1), ("this_node", 2), ("netcheck", 3), ("other_nodes", 4),
                                         ("cluster", 5)])
def test_the_exit_code_says_whose_fault_it_is(party, code):
    report = report_of("host", "r", 0, (Finding(check="nic.mtu", severity="warn", nodes=(1,), summary="odd MTU"),), {},
                       fault=Attribution(party, (), (), ""))
    assert exit_of(report) == code
    assert exit_of(dataclasses.replace(report, fault=None)) == 1, "without a fault: the verdict's"


def test_the_text_report_ends_saying_whose_fault_it_is():
    nodes = (fail("nic.gloo_default", 2),)
    rep = report_of("host", "r", 0, nodes, {"local": 0.1}, faulty_nodes=("node2",),
                    fault=host_fault(*nodes))
    rep = dataclasses.replace(rep, fault=dataclasses.replace(rep.fault, hostnames=("node2",)))
    assert render_text(rep).splitlines()[-1] == "fault: another node: node2 (node rank 2); this node is healthy"
    assert '<p id="fault">fault: another node: node2 (node rank 2); this node is healthy</p>' in render_html(rep)
    mine = report_of("joiner", "r", 2, nodes, {}, fault=Attribution("this_node", (2,), ("node2",), "x: y"))
    assert fault_line(mine) == "fault: this node: x: y"
    two = Attribution("other_nodes", (1, 2), ("node1", "node2"), "")
    assert fault_line(dataclasses.replace(mine, fault=two)) == \
        "fault: other nodes: node1, node2 (node ranks 1, 2); this node is healthy"
    assert fault_line(dataclasses.replace(mine, fault=Attribution("nobody", (), (), ""))) == ""
