"""This process's resource limits as the job will have them, read at start-up before netcheck
changes any, and the kernel's bounds on a listening socket's accept queue. The job's processes
are started as netcheck was (the same shell, job script, launcher or container), so they
inherit the same limits; torch raises none of them."""

from __future__ import annotations

import resource
from pathlib import Path

from netcheck.core.model import ProcessLimits


def read_limits(proc_sys: str = "/proc/sys") -> ProcessLimits:
    nofile, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return ProcessLimits(_limit(nofile), _limit(nofile_hard), _limit(resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]),
                         _limit(resource.getrlimit(resource.RLIMIT_STACK)[0]),
                         _sysctl(proc_sys, "net/core/somaxconn"), _sysctl(proc_sys, "net/ipv4/tcp_max_syn_backlog"))


def _limit(value: int) -> int:
    return -1 if value == resource.RLIM_INFINITY else value


def _sysctl(root: str, name: str) -> int | None:
    try:
        value = int(Path(root, name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return value if value >= 0 else None
