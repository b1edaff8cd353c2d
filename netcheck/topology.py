"""launch.topology: does the launcher's picture of the cluster hold together?

Rules over every node process that reached the rendezvous (seated or not), each with the
launcher variables it saw. The classic mistakes they catch (FAILURES rows 4 and 5):
`srun torchrun` with --ntasks-per-node=8 (eight netchecks on one host, all claiming one
node rank), nodes disagreeing about --nnodes, LOCAL_RANK used where a device index does
not exist (`invalid device ordinal`).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from netcheck.constants import LAUNCH_TOPOLOGY
from netcheck.model import FAIL, PASS, WARN, Finding, NodeFacts

ONE_TASK_FIX = ("start one netcheck (and one torchrun) per node: under Slurm "
                "`srun --ntasks-per-node=1`; torchrun then starts the per-GPU processes itself")


def launch_findings(processes: list[tuple[int | None, NodeFacts]]) -> list[Finding]:
    """`processes`: (seated rank or None, facts) for every arrival."""
    findings = (_crowded_hosts(processes) + _nnodes_disagree(processes)
                + _nproc_disagree(processes) + _device_problems(processes))
    if findings:
        return findings
    seated = tuple(sorted(r for r, _ in processes if r is not None))
    return [Finding(LAUNCH_TOPOLOGY, PASS, seated, "one process per node; every node agrees on "
                    "nnodes and processes per node")]


def _crowded_hosts(processes) -> list[Finding]:
    """Several netchecks from one host claiming one node rank: the launcher started one per
    task, not per node. (Distinct ranks on one host are a deliberate single-machine test.)"""
    per_claim = defaultdict(list)
    for rank, facts in processes:
        per_claim[(facts.hostname, facts.launch.node_rank)].append((rank, facts))
    findings = []
    for (host, _), procs in sorted(per_claim.items(), key=lambda item: str(item[0])):
        if len(procs) > 1:
            tasks = procs[0][1].launch.variables.get("SLURM_NTASKS_PER_NODE")
            why = f" (SLURM_NTASKS_PER_NODE={tasks})" if tasks else ""
            findings.append(Finding(
                LAUNCH_TOPOLOGY, FAIL, _ranks(procs), f"{len(procs)} netcheck processes on {host}{why}: "
                "the launcher started one per task, not one per node",
                tuple(f"{host}: node rank {f.launch.node_rank}, from {f.launch.source}" for _, f in procs),
                ONE_TASK_FIX))
    return findings


def _nnodes_disagree(processes) -> list[Finding]:
    views = {(f.launch.nnodes_min, f.launch.nnodes_max) for _, f in processes if f.launch.nnodes_max}
    if len(views) <= 1:
        return []
    return [_disagreement(processes, lambda f: _nnodes_text(f), "nnodes",
                          "give every node the same --nnodes (torchrun) / the same allocation (Slurm)")]


def _nnodes_text(f: NodeFacts) -> str:
    low, high = f.launch.nnodes_min, f.launch.nnodes_max
    return "unset" if high is None else str(high) if low == high else f"{low}:{high}"


def _nproc_disagree(processes) -> list[Finding]:
    if len({f.launch.nproc_per_node for _, f in processes}) <= 1:
        return []
    finding = _disagreement(processes, lambda f: str(f.launch.nproc_per_node), "processes per node",
                            "the same --nproc-per-node everywhere, or nodes with the same GPU count")
    return [Finding(finding.check, WARN, finding.nodes, finding.summary, finding.evidence, finding.fix)]


def _disagreement(processes, view, what: str, fix: str) -> Finding:
    values = Counter(view(f) for _, f in processes)
    common = values.most_common(1)[0][0]
    odd = [(r, f) for r, f in processes if view(f) != common]
    return Finding(LAUNCH_TOPOLOGY, FAIL, _ranks(odd),
                   f"nodes disagree about {what}: {', '.join(f.hostname for _, f in odd)} say "
                   f"{', '.join(sorted({view(f) for _, f in odd}))}; the others {common}",
                   tuple(f"{f.hostname}: {view(f)}" for _, f in processes), fix)


def visible_devices(facts: NodeFacts) -> int | None:
    """GPUs a process there can use: the driver's count, or CUDA_VISIBLE_DEVICES' list."""
    listed = facts.launch.variables.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        count = len([d for d in listed.split(",") if d.strip()])
        return min(count, facts.gpus) if facts.gpus else count
    return facts.gpus or None


def _device_problems(processes) -> list[Finding]:
    bad = []
    for rank, f in processes:
        devices = visible_devices(f)
        local = f.launch.variables.get("LOCAL_RANK") or f.launch.variables.get("SLURM_LOCALID")
        if devices is not None and local is not None and local.isdigit() and int(local) >= devices:
            bad.append((rank, f, f"{f.hostname}: local rank {local}, but only {devices} visible "
                                 "device(s): `invalid device ordinal`"))
        elif f.gpus and f.launch.nproc_per_node > f.gpus:
            bad.append((rank, f, f"{f.hostname}: {f.launch.nproc_per_node} processes per node for "
                                 f"{f.gpus} GPU(s): two ranks would share a GPU"))
    if not bad:
        return []
    return [Finding(LAUNCH_TOPOLOGY, FAIL, _ranks([(r, f) for r, f, _ in bad]),
                    f"{len(bad)} process(es) would address a GPU that is not there, or share one",
                    tuple(text for _, _, text in bad),
                    "use LOCAL_RANK (not RANK) as the device index, and at most one process per "
                    "visible GPU")]


def _ranks(procs) -> tuple[int, ...]:
    return tuple(sorted({r for r, *_ in procs if r is not None}))
