"""A launcher's gate, run once the report is out (`--drain`): Slurm's state of each node the
report puts at fault, or of this node after `netcheck local`, changed as rules/gate decides,
through facts/slurmctl's bounded sinfo and scontrol.

`netcheck local --drain` (slurmd's HealthCheckProgram) drains its own node on a failure there
and resumes it once the failure is gone, where netcheck's own reason holds it. A cluster run's
`--drain` acts on the host, whose report covers every node, and only drains: a joiner's view
of its peers is its own (a firewalled node sees every peer fail), and a node the job runs on
is not drained (a healthy node needs nothing).
"""

from __future__ import annotations

from typing import Mapping

from netcheck.core.constants import SLURM_CALL_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.gaterecords import DRAIN, NodeAction
from netcheck.core.model import HOST, LOCAL, Report
from netcheck.facts import slurmctl
from netcheck.rules import gate as gate_rules

GATE_SECONDS = 2 * SLURM_CALL_TIMEOUT   # a node's sinfo and scontrol update


def gate(report: Report, env: Mapping[str, str]) -> list[str]:
    """What was done, a line per node changed; SlurmError where Slurm could not be read or
    refused the change. Each node's read and change are bounded together (GATE_SECONDS)."""
    if report.role == LOCAL:
        return _local(report, env)
    if report.role != HOST:
        return []
    names = gate_rules.scheduler_names(report)
    return [_done(act) for host in gate_rules.nodes_at_fault(report)
            if (act := _act(names.get(host, host), gate_rules.drain_reason(report, host), True, env))]


def _local(report: Report, env: Mapping[str, str]) -> list[str]:
    at_fault = bool(gate_rules.nodes_at_fault(report))
    reason = gate_rules.drain_reason(report, report.nodes[0].hostname) if at_fault else None
    act = _act(slurmctl.node_name(env), reason, gate_rules.complete(report), env)
    return [_done(act)] if act else []


def _act(name: str, reason: str | None, complete: bool, env: Mapping[str, str]) -> NodeAction | None:
    deadline = Deadline(GATE_SECONDS)
    act = gate_rules.action(slurmctl.read_node(name, env, deadline), reason, complete)
    if act is not None:
        slurmctl.apply(act, env, deadline)
    return act


def _done(act: NodeAction) -> str:
    if act.state == DRAIN:
        return f"drained {act.node} in Slurm: {act.reason}"
    return f"resumed {act.node} in Slurm: the failure netcheck drained it for is gone"
