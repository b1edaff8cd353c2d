"""launch.topology's rules over every process's launcher variables (and, for GPUs, its env
facts): the launch mistakes of docs/contract.md, "Failures it knows"."""

from __future__ import annotations

import dataclasses

import builders
from netcheck.core.model import NodeFacts
from netcheck.rules.launch import device_uuid, launch_findings, task_findings


def worker(host: str, rank: int, local: int, nproc: int = 2, gpus: int = 2, **extra: str) -> tuple[int, NodeFacts]:
    """A torchrun worker: RANK, LOCAL_RANK, GROUP_RANK as torchrun sets them."""
    variables = {"RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": "4",
                 "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(rank // nproc), **extra}
    launch = builders.launch(rank, 2, "torchrun", nproc, **variables)
    return rank, builders.facts(host, launched=launch, shm=1 << 30, gpus=gpus)


def env(*uuids: str) -> dict[str, str]:
    return {"gpu.count": str(len(uuids))} | {f"gpu.{i}.uuid": u for i, u in enumerate(uuids)}


TWO_BY_TWO = [worker("a", 0, 0), worker("a", 1, 1), worker("b", 2, 0), worker("b", 3, 1)]


def checks(findings) -> list[tuple[str, str, str, tuple[int, ...]]]:
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


def test_a_sound_torchrun_launch_passes():
    findings = launch_findings(TWO_BY_TWO, {0: "GPU-a0", 1: "GPU-a1", 2: "GPU-b0", 3: "GPU-b1"})
    assert checks(findings) == [("launch.topology", "pass", "", (0, 1, 2, 3))]


def test_two_ranks_on_one_gpu_fail_as_duplicate_gpu():
    (finding,) = launch_findings(TWO_BY_TWO, {0: "GPU-a0", 1: "GPU-a0", 2: "GPU-b0", 3: "GPU-b1"})
    assert checks([finding]) == [("launch.topology", "fail", "shared_gpu", (0, 1))]
    assert finding.evidence == ("a: ranks 0, 1 on GPU-a0",)


def test_the_same_gpu_uuid_on_two_hosts_is_not_shared():
    # A UUID is unique per GPU; equal strings on two hosts (an unreadable placeholder) say nothing.
    (finding,) = launch_findings(TWO_BY_TWO, {0: "GPU-x", 2: "GPU-x"})
    assert finding.severity == "pass"


def test_the_device_a_process_drives_is_its_local_rank_or_its_only_gpu():
    _, second = worker("a", 1, 1)
    assert device_uuid(second, env("GPU-0", "GPU-1")) == "GPU-1"
    assert device_uuid(second, env("GPU-1")) == "GPU-1", "one GPU bound to the task: cuda:0"
    assert device_uuid(second, {"gpu.count": "no CUDA"}) is None
    assert device_uuid(second, env("GPU-0", "unknown")) is None


def test_local_rank_beyond_the_visible_devices_is_invalid_device_ordinal():
    procs = [worker("a", 0, 0, gpus=1), worker("a", 1, 1, gpus=1, CUDA_VISIBLE_DEVICES="0")]
    (finding, *_) = launch_findings(procs)
    assert finding.severity == "fail" and 1 in finding.nodes
    assert any("local rank 1, but only 1 visible device(s)" in e for e in finding.evidence)


def test_workers_laid_out_wrongly_are_each_named():
    procs = [worker("a", 0, 0), worker("a", 2, 0), worker("b", 1, 1), worker("b", 3, 1)]
    (finding,) = [f for f in launch_findings(procs) if f.kind == "torchrun_layout"]
    assert finding.severity == "fail"
    assert "a: LOCAL_RANK repeats: 0, 0" in finding.evidence
    assert "a: ranks [0, 2] are not contiguous" in finding.evidence


def test_more_processes_than_gpus_on_a_host_fail():
    procs = [worker("a", r, r, nproc=4, gpus=2) for r in range(2)]
    findings = launch_findings(procs)
    (short,) = [f for f in findings if f.kind == "no_device"]
    assert checks([short]) == [("launch.topology", "fail", "no_device", (0, 1))]
    assert "a: 4 processes per node for 2 GPU(s): two ranks would share a GPU" in short.evidence


def slurm_task(tasks: str | None) -> NodeFacts:
    variables = {"SLURM_NODEID": "1"} | ({"SLURM_NTASKS_PER_NODE": tasks} if tasks else {})
    return builders.facts("gpu02", launched=builders.launch(1, 2, "slurm", **variables), shm=1 << 30)


def test_several_slurm_tasks_per_node_are_named_by_each_task_at_once():
    (f,) = task_findings(slurm_task("2"))
    assert checks([f]) == [("launch.topology", "fail", "crowded_host", (1,))]


def test_one_slurm_task_per_node_is_no_finding():
    assert task_findings(slurm_task("1")) == [] and task_findings(slurm_task(None)) == []


def test_a_disagreement_under_torchrun_is_a_line_per_host_with_its_ranks():
    processes = TWO_BY_TWO[:2] + [(r, dataclasses.replace(f, launch=dataclasses.replace(f.launch, nnodes_min=3,
                                                                                          nnodes_max=3)))
                                  for r, f in TWO_BY_TWO[2:]]
    (finding,) = [f for f in launch_findings(processes) if f.kind == "nnodes_disagree"]
    assert checks([finding]) == [("launch.topology", "fail", "nnodes_disagree", (0, 1, 2, 3))]
    assert finding.evidence == ("a (ranks 0, 1): 2", "b (ranks 2, 3): 3")
