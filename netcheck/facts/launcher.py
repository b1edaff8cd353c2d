"""The cluster's shape as the launcher describes it: flags first, then Slurm, Kubeflow, torchrun.

Each launcher names nnodes and this node's rank in its own variables; this module reads
them once into a `Launch` record, so the rest of netcheck never looks at the environment
for topology.
"""

from __future__ import annotations

import re
from typing import Mapping

from netcheck.core.errors import UserError
from netcheck.core.fields import valid_text
from netcheck.core.model import JOB_VARS, Launch

SLURM_VARS = ("SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST", "SLURM_JOB_ID",
              "SLURM_NTASKS_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID")
KUBEFLOW_VARS = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                 "PET_NPROC_PER_NODE")
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")
DEVICE_VARS = ("CUDA_VISIBLE_DEVICES",)


def default_run_id(env: Mapping[str, str]) -> str:
    """The run id when --rdzv-id is not given: the launcher's job id, else "netcheck"."""
    return env.get("SLURM_JOB_ID") or env.get("TORCHELASTIC_RUN_ID") or "netcheck"


class LaunchError(UserError):
    """The launcher's variables contradict themselves (a user-fixable error)."""


def parse_nnodes(text: str) -> tuple[int, int]:
    """torchrun's --nnodes: "N" or "MIN:MAX"."""
    # str.strip() takes more than int() ignores ("\x1f"): int() gets the stripped text.
    parts = [p.strip() for p in text.split(":")]
    # ASCII digits only ("²".isdigit() is true, and int() refuses it); at most 9 of them.
    if len(parts) > 2 or not all(re.fullmatch(r"[0-9]{1,9}", p) for p in parts):
        raise LaunchError(f"--nnodes {text!r}: expected N or MIN:MAX with whole numbers")
    low, high = int(parts[0]), int(parts[-1])
    if low < 1 or high < low:
        raise LaunchError(f"--nnodes {text!r}: need 1 <= MIN <= MAX")
    return low, high


_RANGE = r"[0-9]{1,9}(?:-[0-9]{1,9})?"
_HOST_ITEM = rf"[^\[\]]*(?:\[{_RANGE}(?:,{_RANGE})*\][^\[\]]*)*"  # name[1-3,7]suffix[0-1]...


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's compressed host list: "gpu[01-03,07],login1" -> gpu01 gpu02 gpu03 gpu07 login1.

    Several bracketed ranges in one name multiply out ("rack[1-2]n[1-2]"), as in Slurm.
    Raises LaunchError on anything else (a bracket left open, a range that is not numbers).
    """
    hosts: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*|\[", text):
        if item.startswith("[") or not re.fullmatch(_HOST_ITEM, item):
            raise LaunchError(f"{text!r} is not a Slurm host list (near {item!r})")
        hosts.extend(_expand_host(item))
    return tuple(hosts)


# Slurm's own bound (hostlist.c MAX_RANGE): a larger range is taken for an error.
MAX_HOSTS = 64 * 1024


def _expand_host(item: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if not match:
        return [item]
    prefix, ranges, rest = match.groups()
    numbers: list[str] = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise LaunchError(f"{item!r}: the range {part} runs backwards")
        if len(numbers) + last - first >= MAX_HOSTS:
            raise LaunchError(f"{item!r}: more than {MAX_HOSTS} hosts")
        numbers.extend(f"{n:0{len(low)}d}" for n in range(first, last + 1))
    tails = _expand_host(rest)
    if len(numbers) * len(tails) > MAX_HOSTS:
        raise LaunchError(f"{item!r}: more than {MAX_HOSTS} hosts")
    return [f"{prefix}{n}{tail}" for n in numbers for tail in tails]


def detect_launch(env: Mapping[str, str], nnodes: str | None, node_rank: int | None,
                  nproc_per_node: int | None, local_gpus: int) -> Launch:
    """Flags win; otherwise the first launcher whose variables are present."""
    nproc = nproc_per_node if nproc_per_node is not None else local_gpus or 1
    if nnodes is not None or node_rank is not None:
        low, high = parse_nnodes(nnodes) if nnodes is not None else (None, None)
        return Launch("flags", node_rank, low, high, nproc, variables=_seen(env, ()))
    for reader in (_from_slurm, _from_kubeflow, _from_torchrun):
        launch = reader(env, nproc)
        if launch:
            return launch
    return Launch("arrival", None, None, None, nproc)


def _seen(env: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    wanted = (names or SLURM_VARS + KUBEFLOW_VARS + TORCHRUN_VARS) + DEVICE_VARS + JOB_VARS
    return {k: valid_text(env[k]) for k in dict.fromkeys(wanted) if k in env}


def int_var(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise LaunchError(f"{name}={env[name]!r} is not a whole number") from None


def _from_slurm(env: Mapping[str, str], nproc: int) -> Launch | None:
    if "SLURM_NNODES" not in env or "SLURM_NODEID" not in env:
        return None
    n = int_var(env, "SLURM_NNODES")
    try:
        hosts = expand_hostlist(env.get("SLURM_JOB_NODELIST", ""))
    except LaunchError:
        hosts = ()  # the names are a nicety (naming missing nodes): unknown, never guessed
    return Launch("slurm", int_var(env, "SLURM_NODEID"), n, n, nproc,
                  hosts if len(hosts) == n else (), _seen(env, SLURM_VARS))


def _from_kubeflow(env: Mapping[str, str], nproc: int) -> Launch | None:
    if "PET_NNODES" not in env or "PET_NODE_RANK" not in env:
        return None
    low, high = parse_nnodes(env["PET_NNODES"])
    return Launch("kubeflow", int_var(env, "PET_NODE_RANK"), low, high, nproc,
                  variables=_seen(env, KUBEFLOW_VARS))


def _from_torchrun(env: Mapping[str, str], nproc: int) -> Launch | None:
    """A torchrun worker: every worker process takes part, seated by its global RANK."""
    if "GROUP_RANK" not in env or "WORLD_SIZE" not in env or "RANK" not in env:
        return None
    per_node = int_var(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else nproc
    world = int_var(env, "WORLD_SIZE")
    int_var(env, "GROUP_RANK")  # checked here: launch.topology compares it across processes
    return Launch("torchrun", int_var(env, "RANK"), world, world, per_node,
                  variables=_seen(env, TORCHRUN_VARS))


def rdzv_from_env(env: Mapping[str, str]) -> str | None:
    """The endpoint a launcher already exported, as HOST:PORT, when --rdzv is not given."""
    for addr, port in (("MASTER_ADDR", "MASTER_PORT"), ("PET_MASTER_ADDR", "PET_MASTER_PORT")):
        host = env.get(addr, "").strip("[]")
        if host:
            host = f"[{host}]" if ":" in host else host
            return f"{host}:{env[port]}" if env.get(port) else host
    return None
