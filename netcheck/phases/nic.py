"""Phase 5, nic: each library's interface choice on each node, held against what the mesh proved."""

from __future__ import annotations

from netcheck.core.model import HOST
from netcheck.phases.state import Learnt, Run
from netcheck.rules import mesh as mesh_rules
from netcheck.rules import nic as nic_rules
from netcheck.rules.registry_judges import InterfaceRecords, judged


def judge_interfaces(run: Run) -> Learnt:
    """Each library's choice on each node, held against what the mesh proved."""
    members = run.members
    # Only the host hears every node's connects, so only it can prove an interface works;
    # a joiner still checks its own settings and what the libraries would pick.
    host = run.role == HOST
    attempts = mesh_rules.judged_attempts(run.attempts, run.causes)
    seen = nic_rules.proven_interfaces(members, attempts)   # a joiner's: its own connects only
    proven = seen if host and attempts else None
    records = InterfaceRecords(members, attempts, seen, proven)
    findings = judged("nic", records)
    if not host:
        return Learnt(tuple(findings))
    findings += judged("nic.host", records)
    if proven is None:
        return Learnt(tuple(findings))
    findings += judged("nic.proven", records)
    return Learnt(tuple(findings), recommendation=nic_rules.recommendation(members, proven))
