"""The report, assembled from what the run learnt; also the one-node reports of `netcheck local`
and `netcheck probe`."""

from __future__ import annotations

from netcheck.core.deadline import Deadline
from netcheck.core.model import FAIL, LOCAL, PROBE, Member, NodeEntry, Report, hostnames, report_of
from netcheck.facts.launcher import default_run_id, detect_launch
from netcheck.facts.local import gather_facts, usable_gpus
from netcheck.facts.probe import reach
from netcheck.phases.state import Run
from netcheck.rules import nic as nic_rules
from netcheck.rules import rdma as rdma_rules
from netcheck.rules import reach as reach_rules
from netcheck.rules.registry import JOIN_KEPT_OUT


def build_report(run: Run) -> Report:
    findings = tuple(run.findings)
    members = run.members or ((Member(run.rank if run.rank is not None else -1, run.facts),)
                              if run.facts else ())
    # A node the store's stall kept out was not tested: not faulty, and not excluded for it.
    faulty_ranks = {r for f in findings if f.severity == FAIL and f.kind != JOIN_KEPT_OUT for r in f.nodes}
    by_rank = hostnames(members)
    missing = _missing_hostnames(run, faulty_ranks, by_rank)
    rec = run.recommendation or nic_rules.Recommendation({}, {}, "")
    faulty = _hosts([*(h for r, h in sorted(by_rank.items()) if r in faulty_ranks), *missing, *run.unranked_faulty])
    return report_of(
        run.role, run.config.run_id, run.rank, findings, dict(run.timings),
        nodes=entries(members), recommend=rec.cluster, recommend_per_node=rec.per_node, env_table=run.env_table,
        bandwidth=run.bandwidth, unfinished=run.unfinished,
        healthy_nodes=_hosts(h for _, h in sorted(by_rank.items()) if h not in faulty),
        faulty_nodes=faulty, recommend_note=rec.reason, cluster=run.cluster)


def _hosts(names) -> tuple[str, ...]:
    """Hostnames for a scheduler's exclude list, each once: under torchrun a host runs several
    ranks, and one faulty rank makes its host faulty (the host is what a scheduler excludes)."""
    return tuple(dict.fromkeys(names))


def entries(members: tuple[Member, ...]) -> tuple[NodeEntry, ...]:
    return tuple(NodeEntry(m.rank, m.facts.hostname, m.address, m.facts, m.env) for m in members)


def _missing_hostnames(run: Run, faulty: set[int], by_rank: dict[int, str]) -> tuple[str, ...]:
    """Faulty ranks that never joined, named when the launcher listed the hosts (Slurm)."""
    hosts = run.config.launch.hostnames
    return tuple(hosts[r] for r in sorted(faulty) if r not in by_rank and r < len(hosts))


def local_only(env) -> Report:
    """`netcheck local`: this node's interfaces and what each library would pick here, judged for
    this node alone (nothing is tested against peers). A node no launcher numbered is not seated."""
    launch = detect_launch(env, None, None, None, local_gpus=usable_gpus())
    facts = gather_facts(default_run_id(env), launch)
    me = (Member(-1 if launch.node_rank is None else launch.node_rank, facts),)
    findings = tuple(nic_rules.route_findings(me, (), {}) + nic_rules.nccl_findings(me, None)
                     + nic_rules.gloo_findings(me, None) + nic_rules.tp_findings(me, None)
                     + nic_rules.ib_findings(me) + rdma_rules.rdma_findings(me))
    return report_of(LOCAL, LOCAL, launch.node_rank, findings, {}, nodes=entries(me))


def probe_only(host: str, port: int, timeout: float) -> Report:
    """`netcheck probe HOST:PORT`: one round of the reach probe."""
    found = reach(host, port, Deadline(timeout), probe_timeout=timeout)
    findings = tuple(reach_rules.reach_findings(found, ()))
    return report_of(PROBE, PROBE, None, findings, {"reach": found.seconds})
