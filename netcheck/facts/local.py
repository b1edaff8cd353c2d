"""Phase 1, local: what this node knows about itself without touching the network."""

from __future__ import annotations

import os
import socket
from typing import Mapping

from netcheck import __version__
from netcheck.core.constants import LOOKUP_TIMEOUT, MAX_FACTS_BYTES
from netcheck.core.fields import valid_text
from netcheck.core.model import Launch, NodeFacts
from netcheck.facts.nics import read_nic_table
from netcheck.facts.probe import call_with_timeout, resolve_addresses

SOCKET_ENV_PREFIXES = ("NCCL_", "GLOO_", "TP_")


def fqdn(timeout: float = LOOKUP_TIMEOUT) -> str:
    """socket.getfqdn(), as torchrun computes the MASTER_ADDR it hands its workers."""
    name, error = call_with_timeout(socket.getfqdn, timeout)
    return name if error is None and name else socket.gethostname()


def shm_bytes(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def socket_env(env: Mapping[str, str], home: str = "~") -> dict[str, str]:
    """NCCL_*, GLOO_* and TP_* settings as the libraries see them on this node.

    NCCL also reads KEY=VALUE lines from ~/.nccl.conf (or $NCCL_CONF_FILE) and
    /etc/nccl.conf, without overriding the environment (NCCL src/misc/param.cc initEnv).
    """
    values = {k: valid_text(v) for k, v in env.items() if k.startswith(SOCKET_ENV_PREFIXES)}
    user_conf = env.get("NCCL_CONF_FILE") or os.path.join(os.path.expanduser(home), ".nccl.conf")
    for path in (user_conf, "/etc/nccl.conf"):
        for key, value in _conf_lines(path):
            values.setdefault(key, value)
    return values


def _conf_lines(path: str) -> list[tuple[str, str]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(MAX_FACTS_BYTES // 4).splitlines()
    except OSError:
        return []
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
    return [(k.strip(), v.strip()) for k, v in pairs if k.strip().startswith("NCCL_")]


def driver_gpus(proc: str = "/proc") -> int:
    """GPUs the NVIDIA driver lists, read without CUDA or torch (0 without the driver)."""
    try:
        return len(os.listdir(os.path.join(proc, "driver/nvidia/gpus")))
    except OSError:
        return 0


def gather_facts(run_id: str, launch: Launch) -> NodeFacts:
    """This node's facts; `reach` is filled in by the reach phase, which runs after."""
    hostname = socket.gethostname()
    addresses, _ = resolve_addresses(hostname, LOOKUP_TIMEOUT)
    return NodeFacts(
        run_id=run_id,
        hostname=hostname,
        fqdn=fqdn(),
        hostname_addresses=addresses,
        launch=launch,
        shm_bytes=shm_bytes(),
        gpus=driver_gpus(),
        nics=read_nic_table(),
        socket_env=socket_env(os.environ),
        reach=None,
        version=__version__,
    )
