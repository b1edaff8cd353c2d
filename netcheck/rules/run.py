"""Findings about the run itself (run.*): a phase skipped, out of time, without a usable
torch, or failed inside netcheck."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from netcheck.core.constants import STALL_FAULT_SECONDS
from netcheck.core.errors import where
from netcheck.core.model import FAIL, PASS, SEVERITIES, WARN, Attribution, ClusterVerdict, Finding, Stall, verdict_of
from netcheck.rules.pernode import node_names
from netcheck.rules.registry import (
    BASELINE_DRIFT,
    BW_STAGE,
    HOST_CONNTRACK,
    HOST_PORTS,
    MESH_CONNECT,
    RDZV_RESOLVE,
    RESOLVE_SLOW,
    RUN_CLUSTER,
    RUN_INTERNAL,
    RUN_SKIPPED,
    RUN_STOPPED,
    RUN_TIMEOUT,
    RUN_TORCH,
    SKIPPED_GOODBYE,
    SKIPPED_NO_PEER,
    SKIPPED_PHASE,
    STOPPED_FROZEN,
    STOPPED_HOST,
    STOPPED_SIGINT,
    STOPPED_SIGTERM,
    TORCH_SLOW,
    impacted,
)

# The host's verdict as joiners hear it stays small at any scale: its worst findings, each with
# a few evidence lines (the host's own report has everything).
TOLD_FINDINGS = 32
TOLD_EVIDENCE = 4

SHORT_OF_TIME_FIX = "raise --timeout: waiting for the nodes above took the rest"
NO_PEER_FIX = ("run netcheck on every node of the job at once (--nnodes N makes an absent node a failure); "
               "--timeout need not change")


def skipped_finding(phase: str, why: str, fix: str = "fix the failures above, then run again") -> Finding:
    """A phase left out: an earlier failure makes it moot, or --timeout has run out."""
    return Finding(check=RUN_SKIPPED, severity=WARN, nodes=(), summary=f"the {phase} phase was skipped: {why}", fix=fix,
                   kind=SKIPPED_PHASE)


NO_PEER_LEFT_OUT = {"bandwidth": "no bandwidth between nodes was measured (a sweep on one node's ranks "
                                  "measures memory, not the network)"}


def no_peer_findings(phases: Sequence[str]) -> list[Finding]:
    """Checks between nodes with no other node to check against: said, never passed."""
    return [Finding(check=RUN_SKIPPED, severity=WARN, nodes=(),
                    summary=f"the {phase} phase was not run: no other node is in the run, "
                    f"so {NO_PEER_LEFT_OUT.get(phase, 'no path between nodes was tested')}", fix=NO_PEER_FIX,
                    kind=SKIPPED_NO_PEER)
            for phase in phases]


def unheard_goodbyes(names: dict[int, str]) -> list[Finding]:
    """Goodbyes the host had no time left to wait for: not counted as lost nodes."""
    if not names:
        return []
    return [Finding(check=RUN_SKIPPED, severity=WARN, nodes=(),
                    summary=f"--timeout was spent before {node_names(names, names)} "
                    "said goodbye; not counted as lost", fix=SHORT_OF_TIME_FIX, kind=SKIPPED_GOODBYE)]


def timeout_finding(phase: str, seconds: float) -> Finding:
    return Finding(check=RUN_TIMEOUT, severity=FAIL, nodes=(),
                   summary=f"the {phase} phase did not finish within --timeout "
                   f"({seconds:g} s)", fix="the findings above say what was missing; raise --timeout "
                   "only if the cluster is merely slow")


def torch_finding(phase: str, why: str, ranks: tuple[int, ...]) -> Finding:
    """The node's own torch is the problem: said as such, not as a netcheck bug or a peer's fault."""
    return Finding(check=RUN_TORCH, severity=FAIL, nodes=ranks,
                   summary=f"the {phase} phase needs torch.distributed: {why}",
                   fix="install a working torch 2.1 or newer in this environment (pip install "
                   "'torch>=2.1'; the README's compatibility table lists the releases tested)")


def torch_slow_finding(phase: str, why: str, ranks: tuple[int, ...]) -> Finding:
    """torch loads, but not inside the run's time: the node's load is the cause, not its torch."""
    return Finding(check=RUN_TORCH, severity=FAIL, nodes=ranks,
                   summary=f"the {phase} phase needs torch.distributed: {why}",
                   fix="see what else runs on this node (top; netcheck's own host.busy names such processes once "
                   "the bandwidth phase runs), or give every node a larger --timeout", kind=TORCH_SLOW)


def internal_finding(phase: str, error: BaseException) -> Finding:
    """netcheck's own error in a phase: its evidence names where it was raised (the innermost
    netcheck frame), as the JSON report keeps it; --debug's log keeps the traceback."""
    place = where(error)
    return Finding(check=RUN_INTERNAL, severity=FAIL, nodes=(), summary=f"netcheck could not run the {phase} phase: "
                   f"{type(error).__name__}: {error}", evidence=(f"raised at {place}",) if place else (),
                   fix="this is a netcheck bug: please report it with the JSON report and the log of the same "
                   "command with --debug (its traceback)")


def _stopped_how(signal_name: str, phase: str | None) -> str:
    how = "terminated by SIGTERM" if signal_name == "SIGTERM" else "interrupted (SIGINT, Ctrl-C)"
    return f"{how} {f'during the {phase} phase' if phase else 'before its first phase'}"


STOPPED_FIX = ("run netcheck again and let it finish (scancel, a deleted pod or Ctrl-C stop it early); no check of "
               "an unfinished run is a pass")


def stopped_finding(signal_name: str, phase: str | None, ranks: tuple[int, ...]) -> Finding:
    """A run ended by a signal proved nothing about what it did not finish: never a pass."""
    return Finding(check=RUN_STOPPED, severity=FAIL, nodes=ranks,
                   summary=f"this node's run was {_stopped_how(signal_name, phase)}: what it "
                   "had learnt is above; nothing after it was checked", fix=STOPPED_FIX,
                   kind=STOPPED_SIGTERM if signal_name == "SIGTERM" else STOPPED_SIGINT)


def stood_still(findings: list[Finding], stall: Stall, mine: tuple[int, ...]) -> list[Finding]:
    """The findings, where this node's run stood still for STALL_FAULT_SECONDS or more and then
    failed: the stall named first, this node's, and every failure that holds another node at
    fault held to this one instead. The others went on without it (the host moved on, a peer's
    deadline passed), so what it then saw of them (a host gone, a sweep that failed) is its
    own stall's, not evidence against them; a gate drains the node that stood still."""
    if stall.seconds < STALL_FAULT_SECONDS or not any(f.severity == FAIL for f in findings):
        return findings
    ranks = tuple(r for r in mine if r >= 0)
    held = [replace(f, cause_nodes=ranks) if f.severity == FAIL and set(f.nodes if f.cause_nodes is None
                                                                      else f.cause_nodes) - set(mine) else f
            for f in findings]
    return [frozen_finding(stall, ranks), *held]


def frozen_finding(stall: Stall, ranks: tuple[int, ...]) -> Finding:
    """This node's run stood still (stood_still): the stall, named as this node's own."""
    return Finding(check=RUN_STOPPED, severity=FAIL, nodes=ranks, kind=STOPPED_FROZEN,
                   summary=f"this node's run stood still for {stall.seconds:.0f} s, {stall.at:.0f} s into it, "
                   "and the other nodes went on without it: what it reported of them after that is its own",
                   evidence=(f"{stall.seconds:.1f} s of wall time with no CPU time spent by this process",),
                   fix="find what stopped this node (a SIGSTOP or a debugger, a paused VM, a machine out of "
                   "memory or CPU: dmesg, the hypervisor's log), then run again")


def host_stopped_finding(told: ClusterVerdict) -> Finding:
    """A joiner that heard the host say a signal stopped it: the run did not finish, so not a
    pass; but nothing was found wrong with any node for it, so a warning that names none (a
    launcher's gate drains no healthy node for a person's Ctrl-C on the host)."""
    return Finding(check=RUN_STOPPED, severity=WARN, nodes=(),
                   summary=f"the host's run was {_stopped_how(told.stopped, told.stopped_in or None)}, "
                   "and this node's ended with it: what it had checked is above; nothing after it was checked, "
                   "and no node is at fault for the stop", fix=STOPPED_FIX, kind=STOPPED_HOST)


def told_stop(findings: list[Finding], heard: str, unheard: str) -> list[Finding]:
    """The host's own run.stopped, with whom it told of the stop before it left (node names)."""
    lines = ((f"told the other nodes on its way out; heard by {heard}",) if heard else ()) + \
        ((f"{unheard} did not say goodbye before it left: each heard of the stop later, or reports the host "
          "lost",) if unheard else ())
    return [replace(f, evidence=f.evidence + lines) if f.check == RUN_STOPPED and f.kind != STOPPED_HOST else f
            for f in findings]


def cluster_verdict(findings: list[Finding], stopped: str = "", stopped_in: str = "",
                    fault: Attribution | None = None) -> ClusterVerdict:
    """What the host tells every joiner before they leave: its verdict in one line, its
    failures and warnings, worst first, and whose fault they are (a healthy joiner names the
    nodes at fault). A host stopped by a signal (`stopped`, in the phase `stopped_in`) says that
    first: its own run.stopped names only itself."""
    bad = sorted((f for f in findings if f.severity != PASS), key=lambda f: -SEVERITIES.index(f.severity))
    verdict = verdict_of(findings)
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    if stopped:
        headline = f"the host's run was {_stopped_how(stopped, stopped_in or None)}: the run did not finish{more}"
    elif not bad:
        headline = "every check passed on every node"
    else:
        headline = f"{bad[0].summary}{more}"
    told = tuple(replace(f, evidence=f.evidence[:TOLD_EVIDENCE]) for f in impacted(bad[:TOLD_FINDINGS]))
    return ClusterVerdict(verdict, headline, told, stopped, stopped_in, fault)


# Checks only the host can attribute: a joiner sees its own connects fail, not whose fault
# that is; once the host's verdict is heard, its attribution replaces the joiner's guess. A
# joiner's own view of its ports and its connection-tracking table, said before its seat, gives
# way to the host's over the job.
HOST_ATTRIBUTES = (MESH_CONNECT, HOST_PORTS, HOST_CONNTRACK)
# Checks every node judges alike from what the phase shared, the host knowing more of their
# cause: a joiner's own gives way to the host's where the host told one, whichever nodes it
# names (the sweep's stop, whose cause the failures before it may be: bw.stop_explained).
HOST_KNOWS_CAUSE = (BW_STAGE,)
# Checks a joiner may judge for itself as well as the host over every node (--baseline given to
# a joiner too): its own finding, of the same severity, stands for the host's (it has every line
# about this node; the host's was cut to TOLD_EVIDENCE).
JUDGED_ON_BOTH = (BASELINE_DRIFT,)
# ... and exact cases of a check a joiner judges for itself as the host does over every node: its
# own slow lookup names its nameserver, the host's gives the seconds it was told.
KINDS_JUDGED_ON_BOTH = ((RDZV_RESOLVE, RESOLVE_SLOW),)


def with_host_verdict(told: ClusterVerdict, ranks: tuple[int, ...],
                      mine: list[Finding]) -> tuple[ClusterVerdict, list[Finding]]:
    """The host's verdict as one joiner keeps it (only the findings that name its own ranks, and
    those that replace its own), and the joiner's findings with it: its own, less the attributions
    the host made better."""
    told_cause = {f.check for f in told.findings if f.check in HOST_KNOWS_CAUSE}
    mine = [f for f in mine if f.check not in told_cause]
    kept = [f for f in mine if f.check not in HOST_ATTRIBUTES]
    own = {(f.check, f.kind, f.summary) for f in kept}
    both = {(f.check, f.severity) for f in kept if f.check in JUDGED_ON_BOTH}
    kinds = {(f.check, f.kind) for f in kept if (f.check, f.kind) in KINDS_JUDGED_ON_BOTH}
    about = tuple(f for f in told.findings if (set(f.nodes) & set(ranks) or f.check in told_cause)
                  and (f.check, f.kind, f.summary) not in own
                  and (f.check, f.severity) not in both and (f.check, f.kind) not in kinds)
    return replace(told, findings=about), kept + list(about)


def verdict_unheard(seconds: float) -> Finding:
    """A joiner that left without the host's verdict cannot vouch that the host found it healthy."""
    return Finding(check=RUN_CLUSTER, severity=WARN, nodes=(),
                   summary=f"the host's verdict did not reach this node in {seconds:.0f} s; "
                   "this report is only this node's own view",
                   fix="read the host's report: it may name this node; raise --timeout if the host "
                   "was still busy")
