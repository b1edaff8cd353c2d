"""What a process holds, read from /proc: the entries of a folder, a process's open descriptors
and what each one is, this process's sockets. Each reads what is there now: a descriptor closed or
a process gone since the listing is left out, and a folder gone or another user's (without root)
reads as empty."""

from __future__ import annotations

import os


def listed(folder: str | os.PathLike[str]) -> list[str]:
    """The folder's entries, sorted; none where it is gone or unreadable."""
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def fd_targets(pid: int | str = "self") -> dict[int, str]:
    """A process's open descriptors and what each names ("socket:[N]", "/dev/nvidia0", ...)."""
    targets = {}
    for name in listed(f"/proc/{pid}/fd"):
        try:
            targets[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:   # closed since (the listing's own descriptor among them)
            continue
    return targets


def socket_fds() -> set[int]:
    """This process's descriptors that are sockets."""
    return {fd for fd, target in fd_targets().items() if target.startswith("socket:")}
