"""An interface's DHCP lease, as its DHCP client saved it: the address and subnet mask the
network's DHCP server handed out, that is the subnet as the network sees it. Read only where an
address on-link by the node's own prefix went unanswered: a lease narrower than that prefix
is the evidence that the prefix is wider than the subnet's (rules.reach).

The clients and their files: systemd-networkd (/run/systemd/netif/leases/IFINDEX, KEY=VALUE
lines), NetworkManager's internal client (the same format, internal-UUID-IFACE.lease), and
ISC dhclient (`lease { ... }` blocks, the last for the interface wins: dhclient*.leases on
Debian, dhclient-*.lease on Red Hat and under NetworkManager). A lease that has expired is
not the network's word any more and is skipped. Stdlib only, read-only, bounded.
"""

from __future__ import annotations

import calendar
import ipaddress
import os
import re
import socket
import time
from pathlib import Path

from netcheck.core.model import LinkPrefix

NETWORKD = "run/systemd/netif/leases"
NETWORK_MANAGER = "var/lib/NetworkManager"
DHCLIENT = ("var/lib/dhcp", "var/lib/dhclient")
READ_BYTES = 256 * 1024   # a dhclient.leases appends each renewal: its end holds the newest
MAX_FILES = 16


def lease_prefixes(interface: str, root: str = "/", now: float | None = None) -> tuple[LinkPrefix, ...]:
    """The subnets INTERFACE's unexpired DHCP leases give ("ADDRESS/PREFIX" of the leased
    address), each with the file it came from; none where no client keeps one."""
    now = time.time() if now is None else now
    found = []
    for path, form in _lease_files(interface, Path(root))[:MAX_FILES]:
        text = _tail(path)
        lease = _networkd(text, path, now) if form == "networkd" else _dhclient(text, interface, now)
        if lease is not None:
            address, mask = lease
            try:
                network = ipaddress.ip_interface(f"{address}/{mask}")
            except ValueError:
                continue
            shown = path if str(path).startswith("/") else f"/{path}"
            found.append(LinkPrefix(str(network), "its DHCP lease", f"{shown}: address {address}, subnet mask {mask}"))
    return tuple(dict.fromkeys(found))


def _lease_files(interface: str, root: Path) -> list[tuple[Path, str]]:
    files: list[tuple[Path, str]] = []
    try:
        index = socket.if_nametoindex(interface)
    except OSError:
        index = None
    if index is not None:
        files.append((root / NETWORKD / str(index), "networkd"))
    for name in _names(root / NETWORK_MANAGER):
        if name.endswith(f"-{interface}.lease"):
            form = "networkd" if name.startswith("internal-") else "dhclient"
            files.append((root / NETWORK_MANAGER / name, form))
    for folder in DHCLIENT:
        for name in _names(root / folder):
            if name.startswith("dhclient") and ".lease" in name and not name.startswith("dhclient6"):
                files.append((root / folder / name, "dhclient"))
    return [(p, form) for p, form in files if p.is_file()]


def _names(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - READ_BYTES))
            return f.read(READ_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _networkd(text: str, path: Path, now: float) -> tuple[str, str] | None:
    """(ADDRESS, NETMASK) of a networkd-format lease; None where either is missing or the lease
    ran out (written at the file's mtime, valid LIFETIME seconds from then)."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    address, mask = values.get("ADDRESS", "").strip(), values.get("NETMASK", "").strip()
    if not address or not mask:
        return None
    lifetime = values.get("LIFETIME", "").strip()
    try:
        if lifetime.isdigit() and os.stat(path).st_mtime + int(lifetime) < now:
            return None
    except OSError:
        return None
    return address, mask


_BLOCK = re.compile(r"lease\s*\{(.*?)\}", re.S)
_FIELD = re.compile(r"^\s*((?:option\s+)?[\w-]+)\s+([^;]*);", re.M)   # `option subnet-mask M;`, `expire ...;`


def _dhclient(text: str, interface: str, now: float) -> tuple[str, str] | None:
    """(fixed-address, subnet-mask) of the last unexpired `lease { }` block for INTERFACE."""
    for block in reversed(_BLOCK.findall(text)):
        fields = {" ".join(key.split()): value.strip().strip('"') for key, value in _FIELD.findall(block)}
        if fields.get("interface") not in (None, interface):
            continue
        address, mask = fields.get("fixed-address"), fields.get("option subnet-mask")
        if not address or not mask:
            continue
        if _expired(fields.get("expire", "never"), now):
            continue
        return address, mask
    return None


def _expired(expire: str, now: float) -> bool:
    """dhclient's `expire`: `never`, `epoch SECONDS` (db-time-format local), or `W YYYY/MM/DD
    HH:MM:SS` in UTC. An expiry it cannot read is taken as not passed."""
    words = expire.split()
    if not words or words[0] == "never":
        return False
    if words[0] == "epoch" and len(words) > 1 and words[1].isdigit():
        return int(words[1]) < now
    try:
        when = time.strptime(" ".join(words[1:3]), "%Y/%m/%d %H:%M:%S")
    except ValueError:
        return False
    return calendar.timegm(when) < now
