"""gpu.build: each node's torch build against its own GPUs and driver. env.mismatch compares
nodes with each other; a build can agree everywhere and still not run on a node's hardware:
a GPU whose compute capability the build carries no kernel for ("no kernel image is available
for execution on the device"), or a driver older than the CUDA the build was made with ("CUDA
driver version is insufficient"). Read from the env facts where CUDA is present; a node
without CUDA is not judged (nothing is passed that was not seen).
"""

from __future__ import annotations

from collections.abc import Mapping

from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import FAIL, PASS, WARN, Finding
from netcheck.rules.pernode import node_names, per_node
from netcheck.rules.registry import BUILD_ARCH, BUILD_DRIVER, GPU_BUILD

ARCH_FIX = ("install a torch build made for this GPU (a wheel whose CUDA tag lists sm_{cc}: a newer torch, or "
            "the index of a newer CUDA, e.g. --index-url https://download.pytorch.org/whl/cu128)")
DRIVER_FIX = ("install an NVIDIA driver that runs CUDA {build} (nvidia-smi's \"CUDA Version\" must be at least "
              "that), or a torch wheel built for the CUDA this driver runs ({driver})")


def build_findings(facts_by_rank: Mapping[int, EnvFacts], hostnames: Mapping[int, str]) -> list[Finding]:
    """A failure per kind naming the nodes whose GPUs the build cannot run on; a pass over the
    nodes with GPUs where none; nothing where no node has CUDA."""
    judged = {r: f.values for r, f in sorted(facts_by_rank.items()) if _capabilities(f.values)}
    if not judged:
        return []
    arch = [(r, line) for r, v in judged.items() if (line := _arch_problem(v))]
    driver = {r: _driver_problem(v) for r, v in judged.items()}
    old, minor = ([(r, p[1]) for r, p in driver.items() if p and p[0] == sev] for sev in (FAIL, WARN))
    findings = []
    if arch:
        ranks = tuple(r for r, _ in arch)
        cc = judged[ranks[0]].get("gpu.0.capability", "").replace(".", "")
        findings.append(Finding(check=GPU_BUILD, severity=FAIL, nodes=ranks,
                                summary=f"torch's build carries no kernel for the GPUs on "
                                f"{node_names(ranks, hostnames)}: every CUDA kernel fails there (no kernel image is "
                                "available for execution on the device)", evidence=per_node(arch, hostnames),
                                fix=ARCH_FIX.format(cc=cc), kind=BUILD_ARCH))
    if old:
        findings.append(_driver_finding(FAIL, old, judged, hostnames, "older than the CUDA torch was built for: "
                                        "CUDA does not start (CUDA driver version is insufficient)"))
    if minor:
        findings.append(_driver_finding(WARN, minor, judged, hostnames, "of the same major version but older than "
                                        "torch's CUDA: minor-version compatibility runs it, but PTX JIT and newer "
                                        "APIs fail"))
    if not findings:
        findings.append(Finding(check=GPU_BUILD, severity=PASS, nodes=tuple(judged),
                                summary=f"torch's build runs on the GPUs and driver of "
                                f"{node_names(tuple(judged), hostnames)}",
                                evidence=per_node(((r, _seen(v)) for r, v in judged.items()), hostnames)))
    return findings


def _driver_finding(severity: str, lines: list[tuple[int, str]], judged: Mapping[int, Mapping[str, str]],
                    hostnames: Mapping[int, str], why: str) -> Finding:
    ranks = tuple(r for r, _ in lines)
    first = judged[ranks[0]]
    return Finding(check=GPU_BUILD, severity=severity, nodes=ranks,
                   summary=f"the NVIDIA driver on {node_names(ranks, hostnames)} is {why}",
                   evidence=per_node(lines, hostnames), fix=DRIVER_FIX.format(build=first.get("torch.cuda_build", "?"),
                                         driver=first.get("driver.cuda", "?")),
                   kind=BUILD_DRIVER)


def _capabilities(values: Mapping[str, str]) -> list[tuple[int, int]]:
    """Each GPU's compute capability as (major, minor); none where CUDA is absent."""
    found = []
    for key, value in values.items():
        if key.startswith("gpu.") and key.endswith(".capability") and (cc := _pair(value)):
            found.append(cc)
    return found


def _arch_problem(values: Mapping[str, str]) -> str | None:
    """Where no GPU of the node can run the build: a cubin runs on its own major version at
    that minor or above, PTX JIT-compiles for its capability or above."""
    arch = values.get("torch.arch_list", "").split()
    cubins = [cc for a in arch if a.startswith("sm_") and (cc := _arch_pair(a[3:]))]
    ptx = [cc for a in arch if a.startswith("compute_") and (cc := _arch_pair(a[8:]))]
    bad = sorted({cc for cc in _capabilities(values)
                  if not any(c[0] == cc[0] and c[1] <= cc[1] for c in cubins) and not any(p <= cc for p in ptx)})
    if not bad or not arch:
        return None
    return (f"GPU capability {', '.join(f'{a}.{b}' for a, b in bad)} ({values.get('gpu.0.name', 'GPU')}); torch "
            f"{values.get('torch.version', '?')} carries {' '.join(arch)}")


def _driver_problem(values: Mapping[str, str]) -> tuple[str, str] | None:
    build, driver = _pair(values.get("torch.cuda_build", "")), _pair(values.get("driver.cuda", ""))
    if not build or not driver or driver >= build:
        return None
    severity = FAIL if driver[0] < build[0] else WARN
    return severity, (f"driver {values.get('driver.version', '?')} runs CUDA {values['driver.cuda']}; torch "
                      f"{values.get('torch.version', '?')} was built for CUDA {values['torch.cuda_build']}")


def _seen(values: Mapping[str, str]) -> str:
    ccs = ", ".join(sorted({f"{a}.{b}" for a, b in _capabilities(values)}))
    return (f"capability {ccs}, torch {values.get('torch.version', '?')} ({values.get('torch.arch_list', '?')}), "
            f"driver CUDA {values.get('driver.cuda', '?')}")


def _pair(text: str) -> tuple[int, int] | None:
    """"12.4" -> (12, 4)."""
    major, _, minor = text.partition(".")
    return (int(major), int(minor.split(".")[0] or 0)) if major.isdigit() and minor.split(".")[0].isdigit() else None


def _arch_pair(digits: str) -> tuple[int, int] | None:
    """"90" -> (9, 0), "100a" -> (10, 0): the last digit is the minor."""
    digits = digits.rstrip("abf")
    return (int(digits[:-1]), int(digits[-1])) if len(digits) >= 2 and digits.isdigit() else None
