"""What a received value may be, declared once: the field types of the records peers send.

A record says what a field may hold in its annotation, and codec checks it when it decodes
the record from JSON:

    port: Port                               # Annotated[int, Range(1, 65535, "a port")]
    hostname: Hostname                       # a name DNS allows
    detail: Text                             # free text: control characters allowed
    members: Annotated[tuple[Member, ...], PER_NODE]   # more items than the default cap

The dataclasses stay plain: to_plain, the JSON schema and every reader see an int or a str.
A value that fails is a codec.DecodeError naming its path and why:

    $.port: 70000 is not a port (1-65535)

Beside what a field declares, codec holds every value to the generic rules: a str is valid
Unicode without control characters (unless it is Text), an int fits in 64 bits (also where
a float belongs), a list or an object has at most MAX_ITEMS entries (unless it says more).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Protocol

from netcheck.core.constants import BW_MAX_BYTES, MAX_MEMBERS, MAX_RANKS
from netcheck.core.names import HOSTNAME_MAX_BYTES, IFNAME_MAX_BYTES, is_safe_hostname

# --- limits -------------------------------------------------------------------------------

_NAME_PART = re.compile(r"[A-Za-z0-9._:%-]*")   # a hostname's characters, an address's too
MAX_INT = (1 << 63) - 1      # every int received fits in 64 bits, as in C's int64_t
MIN_INT = -(1 << 63)
MAX_ITEMS = 1024             # entries of a list or object, where the field says no more
MAX_PROCS_PER_NODE = 1024    # --nproc-per-node: a process per core of the largest machines
MAX_PAIRS = MAX_MEMBERS * (MAX_MEMBERS - 1) // 2
MAX_NICS = 4096              # a Kubernetes node's host side holds a veth per pod: hundreds
MAX_MTU = 65536              # loopback's, the largest a link uses (an IP packet holds 65535 bytes)
MAX_IFINDEX = (1 << 31) - 1  # the kernel's ifindex is a positive int
MAX_PID = 1 << 22            # the kernel's PID_MAX_LIMIT
MAX_RUN_ID_CHARS = 128       # --rdzv-id (config.check_config)
MAX_SECONDS = 1e9            # about 31 years: longer than any run, short enough to add up
MAX_GBPS = 1e9               # far beyond any link; keeps averages of thousands finite
MAX_RATIO = 1e9              # a spread or a speed-up: one batch 1e9 times another's is no measurement
MAX_CLOCK_OFFSET = 1e10      # seconds: a clock reset to 1970 is off by 1.7e9, and is told
MAX_ADDRESS_CHARS = 64       # an IPv6 address (45) with a %scope of an interface name (16)
MAX_LINK_ADDRESS_BYTES = 32  # the kernel's MAX_ADDR_LEN
SHOWN_CHARS = 40             # of a received value (or key) quoted in a message
SHOWN_BITS = 128             # an integer longer than this is quoted by its size


# --- what a field may declare -------------------------------------------------------------

class Rule(Protocol):
    """What a field declares beside its type: None when the decoded value is fine, else why not."""

    def why_not(self, value: Any) -> str | None: ...


def shown(value: Any) -> str:
    """A received value as a message quotes it: short, whatever was sent."""
    if isinstance(value, int) and value.bit_length() > SHOWN_BITS:  # its digits would run long
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


@dataclass(frozen=True)
class Range:
    """A number within [low, high], both included."""

    low: float
    high: float
    what: str            # "a port": the message says "70000 is not a port (1-65535)"

    def accepts(self, value: float) -> bool:
        return self.low <= value <= self.high

    def why_not(self, value: float) -> str | None:
        if self.accepts(value):
            return None
        return f"{shown(value)} is not {self.what} ({_span(self.low, self.high)})"


def _span(low: float, high: float) -> str:
    return f"{_number(low)}-{_number(high)}" if low >= 0 else f"{_number(low)} to {_number(high)}"


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True)
class Check:
    """A value that passes test(value); what names such a value for the message."""

    test: Callable[[Any], bool]
    what: str

    @property
    def accepts(self) -> Callable[[Any], bool]:
        return self.test

    def why_not(self, value: Any) -> str | None:
        return None if self.test(value) else f"{shown(value)} is not {self.what}"


def one_of(*choices: str) -> Check:
    return Check(frozenset(choices).__contains__, "one of " + ", ".join(choices))


_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")


def valid_text(text: str) -> str:
    """text with its lone surrogates made U+FFFD: Python reads undecodable bytes of the
    environment and of file names as surrogates, which a peer's decoder refuses (rightly)."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def is_whole_number(text: str) -> bool:
    """ASCII digits, at most 9: "²".isdigit() is true and int() refuses it, as it refuses
    thousands of digits."""
    return bool(_WHOLE_NUMBER.fullmatch(text))


@dataclass(frozen=True)
class WholeNumbersAt:
    """An object whose entries under these keys, where present, are whole numbers written as
    is_whole_number allows, or empty (a variable set to nothing)."""

    keys: tuple[str, ...]

    def why_not(self, value: dict) -> str | None:
        bad = next((k for k in self.keys if value.get(k, "") != "" and not is_whole_number(value[k])), None)
        return None if bad is None else f"{bad}={shown(value[bad])} is not a whole number"


@dataclass(frozen=True)
class Items:
    """A list or object of at most `most` entries, in place of MAX_ITEMS."""

    most: int


@dataclass(frozen=True)
class FreeText:
    """A str that may hold control characters (tabs, newlines of an error or a config file);
    it is still valid Unicode, and escaped wherever it is printed."""


@dataclass(frozen=True)
class Shared:
    """A part that many members' records hold alike (a node's interfaces, read by each of its
    torchrun workers; an environment the whole cluster shares): decoded once per distinct value
    (core.codec), and that one value held for every record that sent it."""


SHARED = Shared()


# Every list or object a record holds declares one of these (tests/test_bounds.py): what it is
# bounds it, never the generic default. FEW: a node's own few (its addresses, variables, a
# sweep's sizes), at the generic cap on purpose.
FEW = Items(MAX_ITEMS)
PER_NIC = Items(MAX_NICS)
PER_NODE = Items(MAX_MEMBERS)   # per member of the rendezvous: a node, or a torchrun rank
PER_RANK = Items(MAX_RANKS)
PER_PAIR = Items(MAX_PAIRS)
PER_NODE_AND_ITEM = Items(MAX_MEMBERS * MAX_ITEMS)   # e.g. a finding per node and interface


# --- names and addresses --------------------------------------------------------------------

def is_kernel_ifname(name: str) -> bool:
    """An interface name the kernel can hold (net/core/dev.c dev_valid_name): 1 to 15
    bytes, no '/' or whitespace, not "." or "..". ':' is allowed: getifaddrs names a
    labelled address "eth0:1". Stricter, for names pasted into a shell: names.is_safe_ifname."""
    return (name.isprintable() and " " not in name and "/" not in name and name not in (".", "..")
            and 0 < len(name.encode()) <= IFNAME_MAX_BYTES)


def is_ip_address(text: str) -> bool:
    """An IPv4 or IPv6 address as getaddrinfo writes it; IPv6 may carry a %scope (an
    interface name or number), as a link-local address does."""
    return len(text) <= MAX_ADDRESS_CHARS and _parses_as_ip(text)


# A node's addresses recur in every record that names it (its facts, its peers' lookups and
# connects): the host of 4,096 nodes checked 102,000 (profiled), and its 4,095 facts decode in
# 0.48 s with this cache, 0.55 s without.
# Only short texts are kept, so the cache stays a few MB whatever peers send.
@functools.lru_cache(maxsize=1 << 16)
def _parses_as_ip(text: str) -> bool:
    address, percent, scope = text.partition("%")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not percent or (ip.version == 6 and is_kernel_ifname(scope))


def is_host(text: str) -> bool:
    return is_safe_hostname(text) or is_ip_address(text)


def is_node_address(text: str) -> bool:
    """An IP address, or "" for a node that has none (model.node_address)."""
    return text == "" or is_ip_address(text)


def is_link_address(text: str) -> bool:
    """A link-layer address as sysfs writes it: hex bytes between colons ("3c:ec:ef:01:02:03")."""
    parts = text.split(":")
    return len(parts) <= MAX_LINK_ADDRESS_BYTES and all(
        len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p) for p in parts)


def is_name_part(text: str) -> bool:
    """What a hostname or an address may start or end with around its number (core.seats)."""
    return len(text) <= HOSTNAME_MAX_BYTES and _NAME_PART.fullmatch(text) is not None


def is_run_id(text: str) -> bool:
    return 0 < len(text) <= MAX_RUN_ID_CHARS and "/" not in text


# --- the types records use -------------------------------------------------------------------

Text = Annotated[str, FreeText()]
Hostname = Annotated[str, Check(is_safe_hostname, "a hostname")]
Host = Annotated[str, Check(is_host, "a hostname or an IP address")]   # what a name may resolve to
IpAddress = Annotated[str, Check(is_ip_address, "an IP address")]
NamePart = Annotated[str, Check(is_name_part, "part of a hostname")]
NodeAddress = Annotated[str, Check(is_node_address, "an IP address or empty")]
IfName = Annotated[str, Check(is_kernel_ifname, "an interface name")]
LinkAddress = Annotated[str, Check(is_link_address, "a link-layer address")]
RunId = Annotated[str, Check(is_run_id, f"a run id (1-{MAX_RUN_ID_CHARS} characters, no '/')")]

Port = Annotated[int, Range(1, 65535, "a port")]
# A member's seat: a node rank, or under torchrun a worker's RANK (constants.MAX_MEMBERS).
NodeRank = Annotated[int, Range(0, MAX_MEMBERS - 1, "a node rank")]
NodeRankOrMinusOne = Annotated[int, Range(-1, MAX_MEMBERS - 1, "a node rank or -1")]
# A counter's value: anyone may push the store's counter, so honest nodes may come far past MAX_MEMBERS.
Arrival = Annotated[int, Range(0, MAX_INT, "an arrival number")]
NodeCount = Annotated[int, Range(1, MAX_MEMBERS, "a node count")]
Rank = Annotated[int, Range(0, MAX_RANKS - 1, "a rank")]
RankOrMinusOne = Annotated[int, Range(-1, MAX_RANKS - 1, "a rank or -1")]
LocalRankOrMinusOne = Annotated[int, Range(-1, MAX_PROCS_PER_NODE - 1, "a local rank or -1")]
ProcCount = Annotated[int, Range(1, MAX_PROCS_PER_NODE, "a process count")]
GroupSize = Annotated[int, Range(1, MAX_RANKS, "a rank count")]
Count = Annotated[int, Range(0, MAX_INT, "a count")]
Bytes = Annotated[int, Range(0, MAX_INT, "a byte count")]
MessageSize = Annotated[int, Range(1, BW_MAX_BYTES, "a message size")]
Mtu = Annotated[int, Range(0, MAX_MTU, "an MTU")]   # 0: not known; below 68 on links without IP (CAN: 16)
IfIndex = Annotated[int, Range(0, MAX_IFINDEX, "an interface index")]   # 0: not known
PrefixLen = Annotated[int, Range(0, 128, "a prefix length")]
Mbps = Annotated[int, Range(1, MAX_INT, "a link speed in Mb/s")]
Pid = Annotated[int, Range(1, MAX_PID, "a process id")]
PidOrMinusOne = Annotated[int, Range(-1, MAX_PID, "a process id or -1")]

Seconds = Annotated[float, Range(0, MAX_SECONDS, "a duration in seconds")]
Millis = Annotated[float, Range(0, MAX_SECONDS * 1e3, "a duration in ms")]
Micros = Annotated[float, Range(0, MAX_SECONDS * 1e6, "a duration in us")]
Gbps = Annotated[float, Range(0, MAX_GBPS, "a bandwidth in GB/s")]
Ratio = Annotated[float, Range(0, MAX_RATIO, "a ratio")]
ClockOffset = Annotated[float, Range(-MAX_CLOCK_OFFSET, MAX_CLOCK_OFFSET, "a clock offset in seconds")]
