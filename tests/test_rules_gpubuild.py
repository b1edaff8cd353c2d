"""rules/gpubuild.py over env fact records (no GPU is present here): a GPU whose capability the
build has no kernel or PTX for, a driver older than torch's CUDA, and a node without CUDA that
is judged on nothing."""

from __future__ import annotations

from netcheck.core.envfacts import EnvFacts
from netcheck.rules.gpubuild import build_findings

NAMES = {r: f"node{r}" for r in range(4)}
H100 = {"gpu.count": "8", "gpu.0.name": "NVIDIA H100 80GB HBM3", "gpu.0.capability": "9.0",
        "torch.version": "2.5.1+cu124", "torch.cuda_build": "12.4", "driver.version": "550.54.15",
        "driver.cuda": "12.4", "torch.arch_list": "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"}


def node(**changes: str) -> EnvFacts:
    return EnvFacts({**H100, **changes})


def said(findings):
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


def test_a_build_that_runs_on_every_nodes_gpus_and_driver_passes():
    (found,) = build_findings({0: node(), 1: node()}, NAMES)
    assert said([found]) == [("gpu.build", "pass", "", (0, 1))] and "capability 9.0" in found.evidence[0]


def test_a_gpu_the_build_has_no_kernel_for_fails_with_the_wheel_to_install():
    """A B200 (capability 10.0) under a cu124 build that stops at sm_90 and carries no PTX."""
    blackwell = node(**{"gpu.0.name": "NVIDIA B200", "gpu.0.capability": "10.0"})
    (found,) = build_findings({0: node(), 1: blackwell}, NAMES)
    assert said([found]) == [("gpu.build", "fail", "no_kernel", (1,))]
    assert "capability 10.0" in found.evidence[0] and "sm_100" in found.fix


def test_ptx_or_a_cubin_of_the_same_major_runs_and_a_lower_minor_cubin_too():
    assert said(build_findings({0: node(**{"gpu.0.capability": "8.9"})}, NAMES))[0][1] == "pass"   # sm_86 cubin
    ptx = node(**{"gpu.0.capability": "10.0", "torch.arch_list": "sm_80 sm_90 compute_90"})
    assert said(build_findings({0: ptx}, NAMES))[0][1] == "pass"


def test_a_driver_of_an_older_major_cuda_fails_and_of_an_older_minor_warns():
    found = build_findings({0: node(**{"driver.cuda": "11.8"}), 1: node(**{"driver.cuda": "12.2"}), 2: node()},
                           NAMES)
    assert said(found) == [("gpu.build", "fail", "driver_too_old", (0,)), ("gpu.build", "warn", "driver_too_old", (1,))]
    assert "runs CUDA 11.8" in found[0].evidence[0] and "CUDA 12.4" in found[0].fix


def test_nodes_without_cuda_are_judged_on_nothing():
    cpu = EnvFacts({"gpu.count": "no CUDA", "torch.version": "2.13.0+cpu", "torch.cuda_build": "none"})
    assert build_findings({0: cpu, 1: cpu}, NAMES) == []
