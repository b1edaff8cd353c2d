"""Phase 1, local: what this node knows about itself without touching the network."""

from __future__ import annotations

import os
import secrets
import socket
from typing import Mapping

from netcheck import __version__
from netcheck.core.constants import LOOKUP_TIMEOUT, MAX_FACTS_BYTES
from netcheck.core.fields import valid_text
from netcheck.core.model import Launch, NodeFacts
from netcheck.facts.bounded import call_with_timeout
from netcheck.facts.buffers import read_buffers
from netcheck.facts.conntrack import read_conntrack
from netcheck.facts.limits import read_limits
from netcheck.facts.nics import read_nic_table
from netcheck.facts.ports import read_ports
from netcheck.facts.probe import resolve_addresses
from netcheck.facts.rdma import read_rdma

INSTANCE_BYTES = 8           # a node's facts carry this many random bytes, its process's own (NodeFacts.instance)

SOCKET_ENV_PREFIXES = ("NCCL_", "GLOO_", "TP_")
# A test hook, documented as one: a folder holding sys/ and proc/ fixture trees that the RDMA
# and GPU readers (and nic.ib's) read instead of /sys and /proc, so that namespace tests can
# give each node the layout of a GPU node. Interfaces are still this namespace's own.
RDMA_ROOT_HOOK = "NETCHECK_TEST_RDMA_ROOT"


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


def socket_env(env: Mapping[str, str], home: str = "~") -> tuple[dict[str, str], dict[str, str]]:
    """NCCL_*, GLOO_* and TP_* settings as the libraries see them on this node, and where each
    that is not the environment's came from (key -> file).

    NCCL also reads KEY=VALUE lines from ~/.nccl.conf (or $NCCL_CONF_FILE) and
    /etc/nccl.conf, without overriding the environment (NCCL src/misc/param.cc initEnv).
    """
    values = {k: valid_text(v) for k, v in env.items() if k.startswith(SOCKET_ENV_PREFIXES)}
    sources: dict[str, str] = {}
    user_conf = env.get("NCCL_CONF_FILE") or os.path.join(os.path.expanduser(home), ".nccl.conf")
    for path in (user_conf, "/etc/nccl.conf"):
        for key, value in _conf_lines(path):
            if key not in values:
                values[key], sources[key] = value, path
    return values, sources


def _conf_lines(path: str) -> list[tuple[str, str]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(MAX_FACTS_BYTES // 4).splitlines()
    except OSError:
        return []
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
    return [(k.strip(), v.strip()) for k, v in pairs if k.strip().startswith("NCCL_")]


def usable_gpus(env: Mapping[str, str] = os.environ, proc: str = "/proc", dev: str = "/dev") -> int:
    """GPUs this process may use, read without CUDA or torch (which would start the driver):
    those the NVIDIA driver lists, less those whose device node this process cannot open
    (a cgroup's or a container's devices: Slurm --gres=gpu:4 on an 8-GPU node), and no more
    than CUDA_VISIBLE_DEVICES names."""
    try:
        listed = len(os.listdir(os.path.join(proc, "driver/nvidia/gpus")))
    except OSError:
        return 0
    return min(listed, _openable_gpu_nodes(dev), _cuda_visible(env.get("CUDA_VISIBLE_DEVICES"), listed))


def _openable_gpu_nodes(dev: str) -> int:
    count = 0
    for name in _gpu_nodes(dev):
        try:
            os.close(os.open(os.path.join(dev, name), os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK))
            count += 1
        except OSError:
            continue  # EPERM: the cgroup denies it
    return count


def _gpu_nodes(dev: str) -> list[str]:
    try:
        return [n for n in os.listdir(dev) if n.startswith("nvidia") and n[6:].isdigit()]
    except OSError:
        return []


def _cuda_visible(value: str | None, listed: int) -> int:
    """How many devices CUDA_VISIBLE_DEVICES leaves: CUDA reads the list up to its first
    entry that names no device (an index out of range, -1, a typo) and ignores the rest."""
    if value is None:
        return listed
    count = 0
    for entry in (e.strip() for e in value.split(",")):
        if not (entry.isdigit() and int(entry) < listed) and not entry.startswith(("GPU-", "MIG-")):
            break
        count += 1
    return count


def gather_facts(run_id: str, launch: Launch) -> NodeFacts:
    """This node's facts; `reach` is filled in by the reach phase, which runs after."""
    sysfs, proc = rdma_roots(os.environ)
    ports = read_ports(proc)   # first: before this process opens a socket (a lookup's included)
    conntrack = read_conntrack()   # this namespace's table, before netcheck's connections take entries
    hostname = socket.gethostname()
    addresses, _ = resolve_addresses(hostname, LOOKUP_TIMEOUT)
    settings, sources = socket_env(os.environ)
    return NodeFacts(
        run_id=run_id,
        hostname=hostname,
        fqdn=fqdn(),
        hostname_addresses=addresses,
        launch=launch,
        shm_bytes=shm_bytes(),
        gpus=usable_gpus(),
        nics=read_nic_table(ib_sysfs=sysfs),
        socket_env=settings,
        socket_env_from=sources,
        reach=None,
        version=__version__,
        rdma=read_rdma(sysfs, proc),
        instance=secrets.token_hex(INSTANCE_BYTES),
        limits=read_limits(proc),   # before the reach phase lifts this process's descriptor limit
        ports=ports,
        buffers=read_buffers(),
        conntrack=conntrack,
    )


def hosts_file_names(path: str = "/etc/hosts") -> dict[str, str]:
    """address -> the first name /etc/hosts gives it: the machines this node knows by name
    (a node the host never heard from is still known there)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(MAX_FACTS_BYTES).splitlines()
    except OSError:
        return {}
    names: dict[str, str] = {}
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) >= 2:
            names.setdefault(words[0], words[1])
    return names


def rdma_roots(env: Mapping[str, str]) -> tuple[str, str]:
    """Where the RDMA readers read sysfs and proc: /sys and /proc, or the test hook's trees."""
    root = env.get(RDMA_ROOT_HOOK)
    return (os.path.join(root, "sys"), os.path.join(root, "proc")) if root else ("/sys", "/proc")
