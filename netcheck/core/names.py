"""What a name received from a peer may be: the one definition of a safe interface name and of
a safe hostname, for the rules that recommend names and the code that validates records.

    is_safe_ifname("eth0.100")              True
    is_safe_ifname("eth0$(touch /tmp/x)")   False: a shell would run it, were it pasted
    is_safe_hostname("gpu01.cluster.local") True
    is_safe_hostname("gpu01\\nPASS")         False

Both are stricter than what a peer can send, and on purpose: an interface name that passes
can be pasted into a shell unquoted and matched by NCCL and gloo as it stands; a hostname
that passes can go into a scheduler's node list or a report line as it stands.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TypeGuard

# IFNAMSIZ is 16 with the terminating NUL; the kernel allows more characters than these
# (anything but '/', ':' and whitespace), but no real interface needs them.
IFNAME_MAX_BYTES = 15
_IFNAME = re.compile(rf"[A-Za-z0-9._-]{{1,{IFNAME_MAX_BYTES}}}")

# RFC 1123 labels (letters, digits, hyphens inside; underscores tolerated, as some sites
# use them), 63 bytes a label, 253 bytes a name not counting a final root dot.
HOSTNAME_MAX_BYTES = 253
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


def is_safe_ifname(name: object) -> TypeGuard[str]:
    """An interface name of 1 to 15 ASCII letters, digits and `._-`, other than "." and ".."."""
    return isinstance(name, str) and bool(_IFNAME.fullmatch(name)) and name not in (".", "..")


def is_safe_hostname(name: object) -> bool:
    """A hostname as DNS allows it: dot-separated labels of letters, digits and hyphens (and
    underscores), at most 253 bytes."""
    return (isinstance(name, str) and len(name.rstrip(".")) <= HOSTNAME_MAX_BYTES
            and bool(_HOSTNAME.fullmatch(name)))


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 and ::1 (127.0.1.1, Debian's hostname line, among them); False for text that
    is no address (a name, a scope-suffixed link-local)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def lookups_per_connect(host: str) -> int:
    """The lookups a torch store client makes to connect to HOST (torch 2.13, c10d/socket.cpp):
    for a name, getaddrinfo(AF_INET6, AI_V4MAPPED | AI_ALL), which glibc answers with a query for
    its AAAA, then one for its A, one after the other; then, for any host, getnameinfo of the
    address it connects to. Each waits on a slow nameserver where /etc/hosts does not answer."""
    try:
        ipaddress.ip_address(host.split("%")[0])
        return 1
    except ValueError:
        return 3
