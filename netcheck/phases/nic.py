"""Phase 5, nic: each library's interface choice on each node, held against what the mesh proved."""

from __future__ import annotations

from netcheck.core.model import HOST
from netcheck.phases.state import Run
from netcheck.rules import mesh as mesh_rules
from netcheck.rules import nic as nic_rules


def judge_interfaces(run: Run) -> None:
    """Each library's choice on each node, held against what the mesh proved."""
    members = run.members
    # Only the host hears every node's connects, so only it can prove an interface works;
    # a joiner still checks its own settings and what the libraries would pick.
    host = run.role == HOST
    attempts = mesh_rules.judged_attempts(run.attempts, run.causes)
    seen = nic_rules.proven_interfaces(members, attempts)   # a joiner's: its own connects only
    proven = seen if host and attempts else None
    run.findings += nic_rules.route_findings(members, attempts, seen)
    run.findings += nic_rules.nccl_findings(members, proven)
    run.findings += nic_rules.gloo_findings(members, proven, attempts)
    run.findings += nic_rules.tp_findings(members, proven, attempts)
    if not host:
        return
    run.findings += nic_rules.ib_findings(members)
    if proven is not None:
        run.findings += nic_rules.mtu_findings(members, attempts)
        run.findings += nic_rules.speed_findings(members, proven)
        run.recommendation = nic_rules.recommendation(members, proven)
