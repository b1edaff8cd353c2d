"""The report, assembled from what the run learnt; also the one-node reports of `netcheck local`
and `netcheck probe`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from netcheck.core.codec import field_names
from netcheck.core.constants import PHASES
from netcheck.core.deadline import Deadline
from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import (
    HOST,
    LOCAL,
    PROBE,
    Attribution,
    ClusterVerdict,
    Finding,
    Member,
    NodeEntry,
    NodeFacts,
    Reach,
    Report,
    hostnames,
    is_torchrun_worker,
    report_of,
)
from netcheck.core.rdmarecords import RdmaFacts
from netcheck.facts.bounded import call_with_timeout
from netcheck.facts.envinfo import gather_env
from netcheck.facts.launcher import default_run_id, detect_launch
from netcheck.facts.local import gather_facts, usable_gpus
from netcheck.facts.nameservers import lookup_bound, nameserver_look
from netcheck.facts.probe import lookup, reach
from netcheck.phases.state import Run
from netcheck.rules import conntrack as conntrack_rules
from netcheck.rules import env as env_rules
from netcheck.rules import fault as fault_rules
from netcheck.rules import limits as limits_rules
from netcheck.rules import nic as nic_rules
from netcheck.rules import ports as ports_rules
from netcheck.rules import rdma as rdma_rules
from netcheck.rules import reach as reach_rules
from netcheck.rules import run as run_rules
from netcheck.rules.gpubuild import build_findings
from netcheck.rules.registry import impacted

LOCAL_PHASE = PHASES[0]


def build_report(run: Run) -> Report:
    findings = impacted(judged_findings(run))
    members = _members(run)
    fault = run_fault(run, findings)
    by_rank = hostnames(members)
    rec = run.recommendation or nic_rules.Recommendation({}, {}, "")
    return report_of(
        run.role, run.config.run_id, run.rank, findings, dict(run.timings),
        nodes=entries(members), recommend=rec.cluster, recommend_per_node=rec.per_node, env_table=run.env_table,
        bandwidth=run.bandwidth, unfinished=run.unfinished,
        healthy_nodes=_hosts(h for _, h in sorted(by_rank.items()) if h not in fault.hostnames),
        faulty_nodes=fault.hostnames, recommend_note=rec.reason, cluster=run.cluster, fault=fault)


def run_fault(run: Run, findings: Iterable[Finding] | None = None) -> Attribution:
    """Whose fault the run's failures are, from this node's seat; the nodes at fault by name where
    the run knows it: a member's, a node whose facts never came (its visitor record), a missing
    rank's where the launcher listed the hosts (Slurm), a seat's (a joiner's members are itself
    alone, and the roster names every seat), and the nodes at fault never ranked."""
    members = _members(run)
    listed = dict(enumerate(run.config.launch.hostnames))
    seated = run.seat.hostnames if run.seat is not None else {}
    return fault_rules.fault_of(judged_findings(run) if findings is None else findings, _mine(run, members),
                                fault_rules.names_of(hostnames(members), run.lost_names, seated, listed),
                                own_unnamed=run.role != HOST, told=_told(run.cluster),
                                unranked=run.unranked_faulty)


def judged_findings(run: Run) -> list[Finding]:
    """The run's findings as its verdict takes them: a stall of its own applied (rules.run.stood_still)."""
    return run_rules.stood_still(run.findings, run.stall(), _mine(run, _members(run)))


def _told(told: ClusterVerdict | None) -> Attribution | None:
    """The host's word on whose fault it is, as a joiner takes it: not from a host a signal
    stopped (no node is at fault for the stop; this node's own findings say the rest)."""
    return told.fault if told is not None and not told.stopped else None


def _members(run: Run) -> tuple[Member, ...]:
    """The members the report lists: the host's, or this node alone (-1: not seated)."""
    return run.members or ((Member(run.rank if run.rank is not None else -1, run.facts),) if run.facts else ())


def _mine(run: Run, members: tuple[Member, ...]) -> tuple[int, ...]:
    """This node's ranks: its seat (-1 unseated), and under torchrun every rank its host runs (the
    host is what a gate drains)."""
    if run.rank is None:
        return (-1,)
    if run.facts is not None and is_torchrun_worker(run.config.launch):
        return tuple(sorted({run.rank} | {m.rank for m in members if m.facts.hostname == run.facts.hostname}))
    return (run.rank,)


def _hosts(names: Iterable[str]) -> tuple[str, ...]:
    """Hostnames for a scheduler's exclude list, each once: under torchrun a host runs several
    ranks, and one faulty rank makes its host faulty (the host is what a scheduler excludes)."""
    return tuple(dict.fromkeys(names))


def entries(members: tuple[Member, ...]) -> tuple[NodeEntry, ...]:
    """A report entry per member; a torchrun worker whose facts and env are its node's lowest
    rank's (what each process reads for itself aside) points at that rank's entry instead."""
    holders: dict[tuple[str, str], Member] = {}
    out = []
    for m in members:   # by rank: the first of a node holds its facts
        holder = holders.setdefault((m.facts.hostname, m.address), m)
        if holder is not m and is_torchrun_worker(m.facts.launch) and alike(holder, m):
            out.append(NodeEntry(m.rank, m.facts.hostname, m.address, None, None, facts_as=holder.rank))
        else:
            out.append(NodeEntry(m.rank, m.facts.hostname, m.address, m.facts, m.env))
    return tuple(out)


# What each of a node's processes reads for itself: its launch (RANK, LOCAL_RANK), its instance,
# its probe of the port, how long its readings took.
_OWN = frozenset({"launch", "instance", "reach", "rdma"})
_SHARED_FACTS = tuple(n for n in field_names(NodeFacts) or () if n not in _OWN)


def alike(a: Member, b: Member) -> bool:
    """Whether b's facts and env are a's but for what each process reads for itself (a probe
    that ended otherwise, or other RDMA readings, are b's own to show)."""
    fa, fb = a.facts, b.facts
    return (all(getattr(fa, n) == getattr(fb, n) for n in _SHARED_FACTS)
            and _probed(fa.reach) == _probed(fb.reach) and _rdma(fa) == _rdma(fb)
            and (None if a.env is None else a.env.values) == (None if b.env is None else b.env.values))


def _probed(reach: Reach | None) -> tuple | None:
    return None if reach is None else (reach.host, reach.port, reach.outcome, reach.addresses, reach.named_in)


def _rdma(facts: NodeFacts) -> RdmaFacts | None:
    return None if facts.rdma is None else dataclasses.replace(facts.rdma, seconds=0.0)


def local_only(env: Mapping[str, str], deadline: Deadline) -> Report:
    """`netcheck local`: what this node alone can know, judged for it alone (nothing is tested
    against peers): its interfaces and what each library would pick here, its RDMA ports, the
    job's limits (this process's: what the shell, slurmd or the container gives what it starts),
    its resolver, its kernel's port range and connection table, and where it has GPUs, torch's
    build against them and /dev/shm. Bounded by `deadline`: a CUDA start that hangs is named, not
    waited out. A node no launcher numbered is not seated."""
    launch = detect_launch(env, None, None, None, local_gpus=usable_gpus())
    facts = gather_facts(default_run_id(env), launch)
    rank = -1 if launch.node_rank is None else launch.node_rank
    silent, slow = nameserver_look(deadline)
    env_facts, unfinished = _gpu_env(facts, env, deadline)
    me = (Member(rank, facts, env=env_facts),)
    by_rank = {rank: env_facts} if env_facts is not None else {}
    names = hostnames(me)
    findings = impacted(nic_rules.route_findings(me, (), {}) + nic_rules.nccl_findings(me, None)
                        + nic_rules.gloo_findings(me, None) + nic_rules.tp_findings(me, None)
                        + nic_rules.ib_findings(me) + rdma_rules.rdma_findings(me) + limits_rules.limit_findings(me)
                        + ports_rules.range_findings(me, None, ports_rules.own_size(launch))
                        + conntrack_rules.table_findings(me, None, ports_rules.own_size(launch))
                        + reach_rules.resolver_findings(silent, (rank,), slow, launch=launch)
                        + build_findings(by_rank, names) + env_rules.shm_findings(by_rank, names)
                        + ([run_rules.timeout_finding(LOCAL_PHASE, deadline.elapsed())] if unfinished else []))
    fault = fault_rules.fault_of(findings, (me[0].rank,), names.get, own_unnamed=True)
    return report_of(LOCAL, LOCAL, launch.node_rank, findings, {LOCAL_PHASE: round(deadline.elapsed(), 3)},
                     nodes=entries(me), unfinished=unfinished, fault=fault, faulty_nodes=fault.hostnames)


def _gpu_env(facts: NodeFacts, env: Mapping[str, str], deadline: Deadline) -> tuple[EnvFacts | None, str | None]:
    """The env facts gpu.build and host.shm judge, where the node has GPUs (torch's import and
    CUDA's start: seconds, and a GPU that hangs there must not hold the look past its deadline),
    and the phase left unfinished where they did not come in time."""
    if not facts.gpus:
        return None, None
    found, error = call_with_timeout(lambda: gather_env((), env), deadline.remaining())
    if isinstance(error, TimeoutError):
        return None, LOCAL_PHASE
    if error is not None:
        raise error
    return found, None


def probe_only(host: str, port: int, timeout: float) -> Report:
    """`netcheck probe HOST:PORT`: one round of the reach probe."""
    found = reach(host, port, Deadline(timeout), probe_timeout=timeout, resolved=lookup(host, port, lookup_bound()))
    findings = impacted(reach_rules.reach_findings(found, ()))
    return report_of(PROBE, PROBE, None, findings, {"reach": found.seconds})
