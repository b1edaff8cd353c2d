"""launch.topology: does the launcher's picture of the cluster hold together?

Rules over every node process that reached the rendezvous (seated or not), each with the
launcher variables it saw; where they compare values across nodes, only the seated vote.
The classic mistakes they catch (docs/contract.md, "Failures it knows"): `srun torchrun` with
--ntasks-per-node=8 (eight netchecks on one host, all claiming one node rank), nodes
disagreeing about --nnodes, LOCAL_RANK used where a device index does not exist
(`invalid device ordinal`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from netcheck.core.model import FAIL, PASS, WARN, Finding, NodeFacts, is_torchrun_worker
from netcheck.rules.majority import split
from netcheck.rules.pernode import ranks_note
from netcheck.rules.registry import (
    LAUNCH_CROWDED,
    LAUNCH_DEVICE,
    LAUNCH_NNODES,
    LAUNCH_NPROC,
    LAUNCH_SHARED_GPU,
    LAUNCH_TOPOLOGY,
    LAUNCH_TORCHRUN,
)

Processes = Sequence[tuple[int | None, NodeFacts]]   # (seated rank or None, facts) per arrival

ONE_TASK_FIX = ("start one netcheck (and one torchrun) per node: under Slurm "
                "`srun --ntasks-per-node=1`; torchrun then starts the per-GPU processes itself")


def launch_findings(processes: Processes,
                    devices: dict[int, str] | None = None) -> list[Finding]:
    """`processes`: (seated rank or None, facts) for every arrival; `devices`: seated rank ->
    UUID of the GPU it would drive (`device_uuid`), where the env phase learnt it."""
    findings = (_crowded_hosts(processes) + _nnodes_disagree(processes)
                + _nproc_disagree(processes) + _device_problems(processes)
                + _shared_gpus(processes, devices or {}) + _torchrun_layout(processes))
    if findings:
        return findings
    seated = tuple(sorted(r for r, _ in processes if r is not None))
    hosts = len({f.hostname for _, f in processes})
    return [Finding(check=LAUNCH_TOPOLOGY, severity=PASS, nodes=seated,
                    summary=f"{len(processes)} process(es) on {hosts} "
                    "host(s), laid out as the launcher says; all agree on the cluster's size")]


def task_findings(facts: NodeFacts) -> list[Finding]:
    """This node's own view: Slurm told to start several tasks per node starts that many
    netchecks here, all claiming this node's rank. Said at once, whoever arrives first."""
    tasks = facts.launch.variables.get("SLURM_NTASKS_PER_NODE", "")
    if facts.launch.source != "slurm" or not tasks.isdigit() or int(tasks) <= 1:
        return []
    rank = facts.launch.node_rank
    return [Finding(check=LAUNCH_TOPOLOGY, severity=FAIL, nodes=() if rank is None else (rank,),
                    summary=f"Slurm starts {tasks} tasks per node (SLURM_NTASKS_PER_NODE={tasks}): {tasks} netchecks "
                    f"on {facts.hostname} claim node rank {rank}", fix=ONE_TASK_FIX, kind=LAUNCH_CROWDED)]


def _torchrun_layout(processes: Processes) -> list[Finding]:
    """torchrun workers: each host's ranks contiguous, LOCAL_RANKs unique, as many as
    LOCAL_WORLD_SIZE, one GROUP_RANK per host (the real per-process data; docs/contract.md, launch.topology)."""
    per_host = defaultdict(list)
    for rank, f in processes:
        if is_torchrun_worker(f.launch):
            per_host[f.hostname].append((rank, f.launch.variables))
    laid_out = {host: _host_layout(host, procs) for host, procs in sorted(per_host.items())}
    problems = [text for texts in laid_out.values() for text in texts]
    if not problems:
        return []
    # The ranks of the hosts laid out wrong only: another host's (a client posing as one) blames none here.
    ranks = tuple(sorted(r for host, texts in laid_out.items() if texts for r, _ in per_host[host] if r is not None))
    return [Finding(check=LAUNCH_TOPOLOGY, severity=FAIL, nodes=ranks,
                    summary=f"{len(problems)} problem(s) in how torchrun laid "
                    "out the workers", evidence=tuple(problems), fix="one torchrun per node with the same "
                    "--nproc-per-node, and LOCAL_RANK (not RANK) as the device index", kind=LAUNCH_TORCHRUN)]


def _host_layout(host: str, procs: list[tuple[int | None, dict[str, str]]]) -> list[str]:
    problems = []
    local_ranks = [v.get("LOCAL_RANK") for _, v in procs]
    if len(set(local_ranks)) != len(local_ranks):
        problems.append(f"{host}: LOCAL_RANK repeats: {', '.join(sorted(map(str, local_ranks)))}")
    expected = {v.get("LOCAL_WORLD_SIZE") for _, v in procs}
    if expected != {str(len(procs))}:
        problems.append(f"{host}: {len(procs)} worker(s), "
                        f"LOCAL_WORLD_SIZE says {', '.join(sorted(map(str, expected)))}")
    groups = {v.get("GROUP_RANK") for _, v in procs}
    if len(groups) > 1:
        problems.append(f"{host}: workers disagree on GROUP_RANK: {', '.join(sorted(map(str, groups)))}")
    ranks = sorted(r for r, _ in procs if r is not None)
    if ranks and ranks != list(range(ranks[0], ranks[0] + len(ranks))):
        problems.append(f"{host}: ranks {ranks} are not contiguous")
    return problems


def _crowded_hosts(processes: Processes) -> list[Finding]:
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
                check=LAUNCH_TOPOLOGY, severity=FAIL, nodes=_ranks(procs),
                summary=f"{len(procs)} netcheck processes on {host}{why}: "
                "the launcher started one per task, not one per node",
                evidence=tuple(f"{host}: node rank {f.launch.node_rank}, from {f.launch.source}" for _, f in procs),
                fix=ONE_TASK_FIX, kind=LAUNCH_CROWDED))
    return findings


def _nnodes_disagree(processes: Processes) -> list[Finding]:
    views = {(f.launch.nnodes_min, f.launch.nnodes_max) for _, f in processes if f.launch.nnodes_max}
    if len(views) <= 1:
        return []
    return [_disagreement(processes, lambda f: _nnodes_text(f), "nnodes",
                          "give every node the same --nnodes (torchrun) / the same allocation (Slurm)",
                          LAUNCH_NNODES, FAIL)]


def _nnodes_text(f: NodeFacts) -> str:
    low, high = f.launch.nnodes_min, f.launch.nnodes_max
    return "unset" if high is None else str(high) if low == high else f"{low}:{high}"


def _nproc_disagree(processes: Processes) -> list[Finding]:
    if len({f.launch.nproc_per_node for _, f in processes}) <= 1:
        return []
    return [_disagreement(processes, lambda f: str(f.launch.nproc_per_node), "processes per node",
                          "the same --nproc-per-node everywhere, or nodes with the same GPU count",
                          LAUNCH_NPROC, WARN)]


def _disagreement(processes: Processes, view: Callable[[NodeFacts], str], what: str, fix: str, kind: str,
                  severity: str) -> Finding:
    """Only the seated vote: the majority is theirs. A process that got no seat (a rank past
    --nnodes, a latecomer, or another client posing as one) is named where it differs from
    them, by hostname only: sixteen arrivals of one client saying another --nnodes would
    otherwise outvote two honest nodes and get them named."""
    views = split({r: view(f) for r, f in processes if r is not None})
    odd = [(r, f) for r, f in processes
           if (r in views.odd if r is not None else view(f) != views.majority)]
    others = f"; the others {views.majority}" if views.has_majority else ": no value is the majority"
    # A line per host and view: torchrun's ranks of one host see one launcher.
    lines: dict[tuple[str, str], list[int | None]] = {}
    for rank, f in processes:
        lines.setdefault((f.hostname, view(f)), []).append(rank)
    return Finding(check=LAUNCH_TOPOLOGY, severity=severity, nodes=_ranks(odd),
                   summary=f"nodes disagree about {what}: {', '.join(dict.fromkeys(f.hostname for _, f in odd))} say "
                   f"{', '.join(sorted({view(f) for _, f in odd}))}{others}",
                   evidence=tuple(f"{host}{ranks_note(r for r in ranks if r is not None)}: {seen}"
                                  for (host, seen), ranks in lines.items()), fix=fix, kind=kind)


def visible_devices(facts: NodeFacts) -> int | None:
    """GPUs a process there can use: the driver's count, or CUDA_VISIBLE_DEVICES' list."""
    listed = facts.launch.variables.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        count = len([d for d in listed.split(",") if d.strip()])
        return min(count, facts.gpus) if facts.gpus else count
    return facts.gpus or None


def _device_problems(processes: Processes) -> list[Finding]:
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
    return [Finding(check=LAUNCH_TOPOLOGY, severity=FAIL, nodes=_ranks([(r, f) for r, f, _ in bad]),
                    summary=f"{len(bad)} process(es) would address a GPU that is not there, or share one",
                    evidence=tuple(text for _, _, text in bad),
                    fix="use LOCAL_RANK (not RANK) as the device index, and at most one process per "
                    "visible GPU", kind=LAUNCH_DEVICE)]


def device_uuid(facts: NodeFacts, env: dict[str, str]) -> str | None:
    """The GPU a launched process would drive, from its own env facts: cuda:LOCAL_RANK, or
    cuda:0 when it sees a single GPU (a launcher binding one GPU per task through
    CUDA_VISIBLE_DEVICES). None when it has no local rank or no GPU, or the UUID is unknown."""
    count = env.get("gpu.count", "")
    local = facts.launch.variables.get("LOCAL_RANK") or facts.launch.variables.get("SLURM_LOCALID")
    if not count.isdigit() or int(count) == 0 or local is None or not local.isdigit():
        return None
    uuid = env.get(f"gpu.{0 if count == '1' else int(local)}.uuid")
    return uuid if uuid and uuid != "unknown" else None


def _shared_gpus(processes: Processes, devices: dict[int, str]) -> list[Finding]:
    """(host, GPU) unique: two processes on one GPU fail NCCL's init with `Duplicate GPU
    detected` (docs/contract.md, launch.topology)."""
    hosts = {r: f.hostname for r, f in processes if r is not None}
    users = defaultdict(list)
    for rank, uuid in devices.items():
        if rank in hosts:
            users[(hosts[rank], uuid)].append(rank)
    shared = {key: sorted(ranks) for key, ranks in sorted(users.items()) if len(ranks) > 1}
    if not shared:
        return []
    return [Finding(check=LAUNCH_TOPOLOGY, severity=FAIL,
                    nodes=tuple(sorted(r for ranks in shared.values() for r in ranks)),
                    summary=f"{len(shared)} GPU(s) would be driven by more than one process: "
                    "`Duplicate GPU detected`",
                    evidence=tuple(f"{host}: ranks {', '.join(map(str, ranks))} on {uuid}"
                                   for (host, uuid), ranks in shared.items()),
                    fix="one GPU per process: LOCAL_RANK as the device index, and the same "
                    "CUDA_VISIBLE_DEVICES for every process of a node (or one GPU bound to each)",
                    kind=LAUNCH_SHARED_GPU)]


def _ranks(procs: Processes) -> tuple[int, ...]:
    return tuple(sorted({r for r, *_ in procs if r is not None}))
