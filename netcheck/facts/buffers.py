"""The bounds on a TCP connection's buffers in this node's network namespace: what one connection
of the job can have in flight. netcheck sets none of them, so what it reads is what the job's
sockets meet. The net.ipv4 ones are the namespace's own; net.core's rmem_max and wmem_max are the
machine's (a container sees them read-only, or not at all on older kernels: then None).

    tcp_rmem 4096 131072 33554432, tcp_wmem 4096 16384 4194304, rmem_max 4194304, wmem_max 4194304,
    window scaling on, receive autotuning on
"""

from __future__ import annotations

from pathlib import Path

from netcheck.core.model import SocketBuffers, TcpMem


def read_buffers(proc_sys: str = "/proc/sys") -> SocketBuffers | None:
    """This namespace's buffer bounds; None where tcp_rmem or tcp_wmem cannot be read. A switch
    that cannot be read is taken as the kernel's default: on."""
    rmem, wmem = _tcp_mem(proc_sys, "net/ipv4/tcp_rmem"), _tcp_mem(proc_sys, "net/ipv4/tcp_wmem")
    if rmem is None or wmem is None:
        return None
    return SocketBuffers(rmem, wmem, _number(proc_sys, "net/core/rmem_max"), _number(proc_sys, "net/core/wmem_max"),
                         _number(proc_sys, "net/ipv4/tcp_window_scaling") != 0,
                         _number(proc_sys, "net/ipv4/tcp_moderate_rcvbuf") != 0)


def _tcp_mem(root: str, name: str) -> TcpMem | None:
    """"4096 131072 6291456" as its three sizes (None: unreadable, or not three sizes)."""
    try:
        words = Path(root, name).read_text().split()
    except OSError:
        return None
    if len(words) != 3 or not all(w.isdigit() for w in words):
        return None
    return TcpMem(*(int(w) for w in words))


def _number(root: str, name: str) -> int | None:
    try:
        text = Path(root, name).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
