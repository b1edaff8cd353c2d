"""rules/gate: whose fault a report says it is, the drain reason, and what a gate does to a Slurm
node as Slurm shows it (never lifting or overwriting a reason another wrote)."""

from __future__ import annotations

import pytest

import builders
from netcheck.core.constants import DRAIN_PREFIX
from netcheck.core.gaterecords import DRAIN, RESUME, NodeAction, SlurmNode
from netcheck.core.model import Finding, NodeEntry, report_of
from netcheck.render.export import render_exclude
from netcheck.rules import gate
from netcheck.rules.gate import DRAIN_REASON_CHARS

ROUTE = Finding(check="nic.route", severity="fail", nodes=(-1,),
                summary="gpu07: NCCL_SOCKET_IFNAME=ib0 matches no running interface", fix="fix")
MEMLOCK = Finding(check="host.limits", severity="fail", nodes=(-1,), summary="locked memory is limited on gpu07",
                  fix="ulimit -l", kind="memlock")
SLOW = Finding(check="rdzv.resolve", severity="warn", nodes=(-1,), summary="a nameserver answers late", fix="fix",
               kind="resolver_slow")
TIMEOUT = Finding(check="run.timeout", severity="fail", nodes=(),
                  summary="the local phase did not finish within --timeout (20 s)", fix="")


def local(*findings: Finding, unfinished: str | None = None):
    me = NodeEntry(-1, "gpu07.cluster", "10.0.0.7", builders.facts("gpu07.cluster"))
    return report_of("local", "local", None, findings, {}, nodes=(me,), unfinished=unfinished)


SLURM = ("gpu01", "gpu02", "gpu03")


def host(findings: tuple[Finding, ...], faulty: tuple[str, ...], joined=(0, 1)):
    """A host's report under Slurm: hostnames are FQDNs, Slurm's node list short names; gpu03
    (rank 2) never joined unless `joined` says otherwise."""
    entries = tuple(NodeEntry(r, f"{SLURM[r]}.cluster", f"10.0.0.{r}", builders.facts(
        f"{SLURM[r]}.cluster", launched=builders.launch(r, 3, "slurm", 1, SLURM))) for r in joined)
    return report_of("host", "4242", 0, findings, {}, nodes=entries, faulty_nodes=faulty)


def test_a_node_local_failure_puts_the_node_at_fault_and_a_warning_or_netchecks_own_failure_does_not():
    assert gate.nodes_at_fault(local(ROUTE, SLOW)) == ("gpu07.cluster",)
    assert gate.nodes_at_fault(local(SLOW)) == ()
    assert gate.nodes_at_fault(local(TIMEOUT, SLOW)) == ()
    assert not gate.complete(local(TIMEOUT, unfinished="local")) and gate.complete(local(ROUTE, SLOW))


def test_a_cluster_report_puts_its_faulty_nodes_at_fault_by_slurms_names():
    missing = Finding(check="rdzv.join", severity="fail", nodes=(2,), summary="node rank 2 (gpu03) never joined",
                      fix="start it", kind="missing")
    rep = host((missing,), faulty=("gpu02.cluster", "gpu03"))
    assert gate.nodes_at_fault(rep) == ("gpu02.cluster", "gpu03")
    assert gate.scheduler_names(rep) == {"gpu01.cluster": "gpu01", "gpu02.cluster": "gpu02"}
    assert render_exclude(rep) == "gpu02,gpu03\n"
    assert gate.drain_reason(rep, "gpu03") == f"{DRAIN_PREFIX} rdzv.join missing: node rank 2 (gpu03) never joined"


def test_the_reason_is_the_first_failure_on_the_node_with_a_count_of_the_rest():
    assert gate.drain_reason(local(SLOW, ROUTE, MEMLOCK), "gpu07.cluster") == (
        "netcheck: nic.route: gpu07: NCCL_SOCKET_IFNAME=ib0 matches no running interface (+1 more)")


def test_a_reason_is_one_bounded_printable_line():
    long = Finding(check="nic.route", severity="fail", nodes=(-1,), summary="x\ny\t" + "z" * 500 + "\x1b[31m",
                   fix="fix")
    reason = gate.drain_reason(local(long), "gpu07.cluster")
    assert len(reason) == DRAIN_REASON_CHARS and reason.isprintable() and reason.endswith("...")
    assert reason.startswith("netcheck: nic.route: x y zzz")


def test_a_cluster_reason_names_the_failure_of_that_node():
    cut = Finding(check="mesh.connect", severity="fail", nodes=(1,), summary="gpu02 cannot be reached from gpu01",
                  fix="open it")
    assert gate.drain_reason(host((cut,), ("gpu02.cluster",)), "gpu02.cluster") == (
        "netcheck: mesh.connect: gpu02 cannot be reached from gpu01")


FAULT = "netcheck: nic.route: ib0 down"


@pytest.mark.parametrize("state, reason, fault, complete, done", [
    ("idle", "none", FAULT, True, NodeAction("n", DRAIN, FAULT)),            # healthy until now: drained
    ("allocated", "none", FAULT, True, NodeAction("n", DRAIN, FAULT)),       # a job on it: draining from now
    ("drained", "bad DIMM", FAULT, True, None),                               # an admin's drain: theirs
    ("down*", "Not responding", FAULT, True, None),                           # Slurm's own: left alone
    ("drained", FAULT, FAULT, True, None),                                    # already so: no churn
    ("drained", "netcheck: host.limits memlock: x", FAULT, True, NodeAction("n", DRAIN, FAULT)),  # another finding
    ("drained", FAULT, None, True, NodeAction("n", RESUME, "")),              # the finding gone: resumed
    ("draining", FAULT, None, True, NodeAction("n", RESUME, "")),
    ("drained", FAULT, None, False, None),                                    # netcheck's own failure: no word
    ("drained", "bad DIMM", None, True, None),                                # never an admin's
    ("drained", "NHC: check_fs_mount failed", None, True, None),              # nor another tool's
    ("idle", "none", None, True, None),                                       # healthy and well: nothing
])
def test_what_a_gate_does_to_a_node(state, reason, fault, complete, done):
    assert gate.action(SlurmNode("n", state, reason), fault, complete) == done
