"""This process's resource limits as the job will have them, read at start-up before netcheck
changes any, and the kernel's bounds on a listening socket's accept queue. The job's processes
are started as netcheck was (the same shell, job script, launcher or container), so they
inherit the same limits; torch raises none of them."""

from __future__ import annotations

import resource
from pathlib import Path

from netcheck.core.model import ProcessLimits

# /proc/PID/limits's names for the limits read (the kernel's fs/proc/base.c lnames).
LIMIT_NAMES = {"Max open files": resource.RLIMIT_NOFILE, "Max locked memory": resource.RLIMIT_MEMLOCK,
               "Max stack size": resource.RLIMIT_STACK}


def read_limits(proc: str = "/proc", proc_sys: str = "/proc/sys") -> ProcessLimits:
    """This process's limits from {proc}/self/limits (the kernel's word, as getrlimit's), each
    one that file does not give by getrlimit; the accept queue's caps from proc_sys."""
    read = _proc_limits(proc)
    nofile, nofile_hard = read.get(resource.RLIMIT_NOFILE) or resource.getrlimit(resource.RLIMIT_NOFILE)
    memlock = (read.get(resource.RLIMIT_MEMLOCK) or resource.getrlimit(resource.RLIMIT_MEMLOCK))[0]
    stack = (read.get(resource.RLIMIT_STACK) or resource.getrlimit(resource.RLIMIT_STACK))[0]
    return ProcessLimits(_limit(nofile), _limit(nofile_hard), _limit(memlock), _limit(stack),
                         _sysctl(proc_sys, "net/core/somaxconn"), _sysctl(proc_sys, "net/ipv4/tcp_max_syn_backlog"))


def _proc_limits(proc: str) -> dict[int, tuple[int, int]]:
    """resource -> (soft, hard) from {proc}/self/limits; RLIM_INFINITY for "unlimited"."""
    try:
        lines = Path(proc, "self/limits").read_text().splitlines()
    except OSError:
        return {}
    found: dict[int, tuple[int, int]] = {}
    for line in lines:
        for name, which in LIMIT_NAMES.items():
            if line.startswith(name) and len(words := line[len(name):].split()) >= 2:
                soft, hard = (resource.RLIM_INFINITY if w == "unlimited" else int(w) if w.isdigit() else None
                              for w in words[:2])
                if soft is not None and hard is not None:
                    found[which] = (soft, hard)
    return found


def _limit(value: int) -> int:
    return -1 if value == resource.RLIM_INFINITY else value


def _sysctl(root: str, name: str) -> int | None:
    try:
        value = int(Path(root, name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return value if value >= 0 else None
