"""A launcher's gate on a report: the nodes at fault, the reason a scheduler records for each,
and what to do to a Slurm node given how Slurm shows it now. No I/O: `facts/slurmctl` reads the
node and runs the action, `phases/gate` puts the two together.

Whose fault a report says it is, read in one place (`nodes_at_fault`): a node-local report
(`netcheck local`) blames its node for any failure but netcheck's own (a `run.*` check: its
deadline, an internal error); a cluster report blames the hostnames in `faulty_nodes`.

A gate drains with a reason that starts with DRAIN_PREFIX and lifts only such drains (LBNL
NHC's convention): a node an admin drained, or Slurm took down, keeps its reason and its state
whatever netcheck finds, and a run that did not finish (its own failure) changes nothing.
"""

from __future__ import annotations

from netcheck.core.constants import DRAIN_PREFIX
from netcheck.core.gaterecords import DRAIN, NO_REASON, RESUME, NodeAction, SlurmNode
from netcheck.core.model import FAIL, LOCAL, Finding, Report
from netcheck.rules.registry import BY_ID

DRAIN_REASON_CHARS = 200     # `scontrol show node` prints it whole; sinfo -R shows the first 20 by default

RUN_PHASE = "run"   # the registry's phase of the checks about netcheck's own run


def nodes_at_fault(report: Report) -> tuple[str, ...]:
    """The hostnames a gate acts on: this node's where a node-local report failed on it, the
    cluster report's faulty nodes otherwise."""
    if report.role == LOCAL:
        return (report.nodes[0].hostname,) if report.nodes and _node_failures(report) else ()
    return report.faulty_nodes


def complete(report: Report) -> bool:
    """Whether the report holds all the evidence it set out to read: a run that did not finish,
    or failed inside netcheck, clears no node."""
    return report.unfinished is None and not any(f.severity == FAIL and _is_own(f) for f in report.findings)


def drain_reason(report: Report, host: str) -> str:
    """`netcheck: CHECK KIND: SUMMARY` of the first failure naming `host` (of a node-local
    report: its first failure), with how many more there are; one printable line, bounded."""
    failures = _failures_of(report, host)
    if not failures:
        return f"{DRAIN_PREFIX} at fault in netcheck run {report.run_id}"[:DRAIN_REASON_CHARS]
    first = failures[0]
    more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    head = f"{DRAIN_PREFIX} {first.check}{' ' + first.kind if first.kind else ''}: "
    room = DRAIN_REASON_CHARS - len(head) - len(more)
    summary = _printable(first.summary)
    summary = summary if len(summary) <= room else summary[:room - 3] + "..."
    return head + summary + more


def action(node: SlurmNode, reason: str | None, evidence_complete: bool) -> NodeAction | None:
    """What a gate does to `node`: drain it with `reason` where it is at fault (reason given) and
    holds no reason of another's, or a reason of netcheck's that says otherwise; resume it where
    it is not at fault, the report is complete, and netcheck's own reason holds it; else nothing."""
    ours = node.reason.startswith(DRAIN_PREFIX)
    held = node.reason not in ("", NO_REASON)
    if reason is not None:
        return NodeAction(node.name, DRAIN, reason) if not held or (ours and node.reason != reason) else None
    return NodeAction(node.name, RESUME, "") if ours and evidence_complete else None


def scheduler_names(report: Report) -> dict[str, str]:
    """hostname -> the name the launcher gave that node (Slurm's node list, by node rank), where
    the two differ (a host whose hostname is its FQDN, Slurm's NodeName its short name)."""
    listed = launcher_hostnames(report)
    return {n.hostname: listed[n.rank] for n in report.nodes if 0 <= n.rank < len(listed)}


def hostnames_by_rank(report: Report) -> dict[int, str]:
    """The launcher's list of hostnames (Slurm's node list), then the nodes that joined."""
    return {**dict(enumerate(launcher_hostnames(report))), **{n.rank: n.hostname for n in report.nodes}}


def launcher_hostnames(report: Report) -> tuple[str, ...]:
    return next((n.facts.launch.hostnames for n in report.nodes if n.facts and n.facts.launch.hostnames), ())


def _failures_of(report: Report, host: str) -> list[Finding]:
    if report.role == LOCAL:
        return _node_failures(report)
    ranks = {r for r, h in hostnames_by_rank(report).items() if h == host} | \
        {r for r, h in enumerate(launcher_hostnames(report)) if h == host}
    return [f for f in _node_failures(report) if ranks & set(f.nodes)]


def _node_failures(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity == FAIL and not _is_own(f)]


def _is_own(finding: Finding) -> bool:
    check = BY_ID.get(finding.check)
    return check is not None and check.phase == RUN_PHASE


def _printable(text: str) -> str:
    """One line of printable characters: a reason is one field of Slurm's node record."""
    return "".join(ch if ch.isprintable() else "?" for ch in " ".join(text.split()))
