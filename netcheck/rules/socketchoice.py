"""What NCCL, gloo and TensorPipe would pick on one node: pure functions over a NicTable.

Every rule mirrors the library source named beside it (NVIDIA/nccl src/misc/socket.cc,
src/os/linux.cc, src/misc/utils.cc, src/bootstrap.cc, src/include/socket.h;
facebookincubator/gloo gloo/transport/tcp/device.cc; pytorch torch/csrc/distributed/
c10d/init.cpp, ProcessGroupGloo.cpp, GlooDeviceFactory.cpp, rpc/tensorpipe_agent.cpp;
pytorch/tensorpipe tensorpipe/transport/uv/utility.cc). No I/O: the caller passes the
table, the environment (merge /etc/nccl.conf into it for NCCL) and the hostname's
getaddrinfo answer. On a node with lo, eno1 and a down ib0, whose hostname resolves to
127.0.1.1:

    nccl_choice(table, {}).reason
      NCCL_SOCKET_IFNAME unset; no running ib* interface; rule ^docker,lo,virbr picks
      eno1 (10.0.0.5)
    gloo_device_addresses(table, {}, ["127.0.1.1"]).reason
      hostname: lo (127.0.1.1): the hostname's first bindable address is loopback (lo
      owns 127.0.0.0/8), so peers would connect to themselves; set GLOO_SOCKET_IFNAME to
      one of: eno1
    validate_setting("GLOO_SOCKET_IFNAME", "10.0.0.5", table).reason
      holds an IP address (10.0.0.5, on eno1); gloo wants interface names and fails with
      "Unable to find address for: 10.0.0.5"
    format_nccl_value([["eno1", "ib0"], ["ens5", "ib0"]])  ->  'ib0'
    format_gloo_values([["eno1"], ["ens5"]])               ->  ['eno1', 'ens5']
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from netcheck.core.nictable import Address, Nic, NicTable

T = TypeVar("T")
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# src/include/socket.h: NCCL parses at most this many list entries and keeps at most this
# many interfaces.
MAX_IFS = 16
# src/misc/socket.cc ncclFindInterfaces, when NCCL_SOCKET_IFNAME is unset: these rules in
# turn, the first that finds anything wins. Older NCCL (2022's socket.cc) had no virbr
# rules: "^docker,lo", then "docker", then "lo".
NCCL_DEFAULT_RULES = ("ib", "NCCL_COMM_ID", "^docker,lo,virbr", "docker", "lo", "virbr")
NCCL_FAMILIES = {"AF_INET": "ipv4", "AF_INET6": "ipv6"}  # others: no filter (socket.cc)
LOOPBACK_V4 = "127.0.0.1"  # torch's and TensorPipe's fallback address
# socket.cc from v2.28.3: "Only consider running interfaces, i.e. UP and physically attached.
# if (!(interface->ifa_flags & IFF_RUNNING)) continue;" (nccl#1798); before, any link.
RUNNING_ONLY_SINCE = (2, 28, 3)
NEWEST = (99,)             # an NCCL whose version is not known here follows the newest rules


@dataclass(frozen=True)
class NcclIfSpec:
    """A parsed NCCL_SOCKET_IFNAME: `^` excludes, `=` matches exact names, else prefixes."""

    prefixes: tuple[str, ...]
    exclude: bool
    exact: bool


@dataclass(frozen=True)
class Pick:
    name: str
    address: str


@dataclass(frozen=True)
class NcclChoice:
    interfaces: tuple[Pick, ...]  # the socket transport's interfaces, NCCL's order, <= 16
    bootstrap: Pick | None        # the one bootstrap listens on; None: NCCL fails at init
    rule: str                     # what chose: the NCCL_SOCKET_IFNAME value or a default rule
    reason: str


@dataclass(frozen=True, kw_only=True)
class GlooDevice:
    interface: str | None
    address: str | None
    loopback: bool          # peers on other nodes cannot reach it
    error: str | None       # the error gloo raises creating this device
    reason: str


@dataclass(frozen=True)
class GlooChoice:
    devices: tuple[GlooDevice, ...]  # one per GLOO_SOCKET_IFNAME entry, else one
    source: str                      # "GLOO_SOCKET_IFNAME" | "hostname"
    reason: str


@dataclass(frozen=True, kw_only=True)
class TpChoice:
    interface: str | None
    address: str | None
    loopback: bool          # peers on other nodes cannot reach it
    fallback: bool          # TensorPipe gave up and uses 127.0.0.1
    reason: str


# --------------------------------------------------------------------------------------
# NCCL


def parse_nccl_ifname(value: str) -> NcclIfSpec:
    # os/linux.cc ncclOsFindInterfaces strips a leading "^", then a leading "=";
    # utils.cc parseStringList then skips one more "^" or "=" (so "=^eth" is "=eth").
    exclude = value.startswith("^")
    value = value[exclude:]
    exact = value.startswith("=")
    value = value[exact:]
    value = value[value[:1] in ("^", "="):]
    # parseStringList: "name:port" keeps the name (the port is parsed, then ignored since
    # findInterfaces matches with port -1); empty names are dropped; 16 entries at most.
    names = [entry.split(":", 1)[0] for entry in value.split(",")]
    return NcclIfSpec(tuple(n for n in names if n)[:MAX_IFS], exclude, exact)


def nccl_matches(spec: NcclIfSpec, name: str) -> bool:
    # utils.cc matchIfList: an empty list matches everything; matchIf compares the whole
    # name when exact, else the name's start against each prefix. The result is then
    # XORed with "^" in ncclOsFindInterfaces.
    if not spec.prefixes:
        hit = True
    elif spec.exact:
        hit = name in spec.prefixes
    else:
        hit = any(name.startswith(p) for p in spec.prefixes)
    return hit != spec.exclude


def nccl_choice(table: NicTable, env: Mapping[str, str], version: tuple[int, ...] = NEWEST) -> NcclChoice:
    """version: the node's NCCL (X, Y, Z), whose rules apply where they changed."""
    family = NCCL_FAMILIES.get(env.get("NCCL_SOCKET_FAMILY", ""))
    value = env.get("NCCL_SOCKET_IFNAME", "")
    running_only = version >= RUNNING_ONLY_SINCE
    # socket.cc ncclFindInterfaces reads the variable only when it is 2+ characters long.
    if len(value) > 1:
        picks = nccl_find(table, parse_nccl_ifname(value), family, running_only)
        rule, why = value, f"NCCL_SOCKET_IFNAME={value}"
    else:
        rule, picks, why = _nccl_default(table, env, family, running_only)
    bootstrap = _nccl_bootstrap(table, env, picks)
    return NcclChoice(picks, bootstrap, rule, _nccl_reason(why, picks, bootstrap, env))


def nccl_find(table: NicTable, spec: NcclIfSpec, family: str | None, running_only: bool = True) -> tuple[Pick, ...]:
    """os/linux.cc ncclOsFindInterfaces: walk getifaddrs, keep each matching interface
    once, with the first address that passes, up to MAX_IFS interfaces."""
    picks: list[Pick] = []
    for nic, addr in getifaddrs_walk(table):
        if len(picks) == MAX_IFS:
            break
        # IFF_RUNNING only from 2.28.3 (RUNNING_ONLY_SINCE); older NCCL took any link.
        if (running_only and not nic.running) or (family and addr.family != family):
            continue
        if addr.family == "ipv6" and ipaddress.ip_address(addr.address).is_loopback:
            continue  # IN6_IS_ADDR_LOOPBACK; IPv4 127.x is not skipped
        if nccl_matches(spec, nic.name) and all(p.name != nic.name for p in picks):
            picks.append(Pick(nic.name, addr.address))
    return tuple(picks)


def _nccl_default(table: NicTable, env: Mapping[str, str], family: str | None,
                  running_only: bool) -> tuple[str, tuple[Pick, ...], str]:
    for rule in NCCL_DEFAULT_RULES:
        if rule == "NCCL_COMM_ID":
            pick = comm_id_subnet_pick(table, env)
            picks: tuple[Pick, ...] = (pick,) if pick else ()
        else:
            picks = nccl_find(table, parse_nccl_ifname(rule), family, running_only)
        if picks:
            return rule, picks, _skipped_rules(rule, env)
    return "", (), "NCCL_SOCKET_IFNAME unset: every default rule"


def _skipped_rules(rule: str, env: Mapping[str, str]) -> str:
    why = ["NCCL_SOCKET_IFNAME unset"]
    if rule != "ib":
        why.append("no running ib* interface")
    if rule not in ("ib", "NCCL_COMM_ID") and len(env.get("NCCL_COMM_ID", "")) > 1:
        why.append("no interface shares NCCL_COMM_ID's subnet")
    return "; ".join(why) + f"; rule {rule}"


def comm_id_subnet_pick(table: NicTable, env: Mapping[str, str]) -> Pick | None:
    """os/linux.cc ncclFindInterfaceMatchSubnet: the first getifaddrs address on the same
    subnet as NCCL_COMM_ID's host, any link state, any family setting. A host given by
    name is not resolved here, so it finds nothing."""
    target = _comm_id_host(env.get("NCCL_COMM_ID", ""))
    if target is None:
        return None
    ip, scope = target
    for nic, addr in getifaddrs_walk(table):
        local = ipaddress.ip_address(addr.address)
        # matchSubnet also compares IPv6 scope ids: a link-local address only matches a
        # "[fe80::x%ifname]" NCCL_COMM_ID naming its own interface.
        if local.version == 6 and local.is_link_local and scope != nic.name:
            continue
        if ip.version == local.version and ip in _network(addr):
            return Pick(nic.name, addr.address)
    return None


def _comm_id_host(value: str) -> tuple[IpAddress, str] | None:
    # socket.cc ncclSocketGetAddrFromString: "[v6%scope]:port", else "<host>:port".
    if value.startswith("["):
        host, _, scope = value[1:].partition("]")[0].partition("%")
    else:
        host, scope = value.split(":", 1)[0], ""
    try:
        return ipaddress.ip_address(host), scope
    except ValueError:
        return None


def _nccl_bootstrap(table: NicTable, env: Mapping[str, str], picks: tuple[Pick, ...]) -> Pick | None:
    # bootstrap.cc bootstrapNetInit: with NCCL_COMM_ID set, bootstrap uses the subnet match
    # alone and never reads NCCL_SOCKET_IFNAME; otherwise the first interface found.
    if "NCCL_COMM_ID" in env:
        return comm_id_subnet_pick(table, env)
    return picks[0] if picks else None


def _nccl_reason(why: str, picks: tuple[Pick, ...], bootstrap: Pick | None, env: Mapping[str, str]) -> str:
    found = f"picks {_picks(picks)}" if picks else "finds no running interface with an address"
    if "NCCL_COMM_ID" in env:
        listen = _picks([bootstrap]) if bootstrap else "none, so NCCL fails at init " \
            "('No usable listening interface found')"
        return f"{why} {found}; bootstrap uses NCCL_COMM_ID's subnet: {listen}"
    if not bootstrap:
        return f"{why} {found}: NCCL fails with 'Bootstrap : no socket interface found'"
    return f"{why} {found}"


def _picks(picks: Iterable[Pick]) -> str:
    return ", ".join(f"{p.name} ({p.address})" for p in picks)


# --------------------------------------------------------------------------------------
# gloo


def gloo_device_addresses(
    table: NicTable, env: Mapping[str, str], hostname_addresses: Sequence[str]
) -> GlooChoice:
    value = env.get("GLOO_SOCKET_IFNAME", "")
    # c10d/init.cpp: the variable counts when 2+ characters long; each comma-separated
    # entry becomes one gloo device (ProcessGroupGloo then runs a context per device).
    if len(value) > 1:
        devices = tuple(_gloo_iface_device(table, n, hostname_addresses) for n in gloo_split(value))
        return GlooChoice(devices, "GLOO_SOCKET_IFNAME", "; ".join(_gloo_line(d) for d in devices))
    device = _hostname_device(table, hostname_addresses, torch_fallback=True)
    return GlooChoice((device,), "hostname", f"hostname: {_gloo_line(device)}")


def gloo_split(value: str) -> list[str]:
    # c10d/init.cpp split(): std::getline on ',' keeps empty entries except a last one.
    parts = value.split(",")
    return parts[:-1] if parts[-1] == "" else parts


def _gloo_iface_device(table: NicTable, name: str, hostname_addresses: Sequence[str]) -> GlooDevice:
    # device.cc CreateDeviceAttr: an empty interface name means "use the hostname".
    if not name:
        return _hostname_device(table, hostname_addresses, torch_fallback=False)
    # device.cc lookupAddrForIface: the first getifaddrs address of that exact name, of
    # either family, whatever the link state.
    found = next(((n, a) for n, a in getifaddrs_walk(table) if n.name == name), None)
    if found is None:
        return GlooDevice(interface=name, address=None, loopback=False, error=f"Unable to find address for: {name}",
                          reason=f"no interface named {name!r} with an IP address ({interface_names(table)})")
    nic, addr = found
    state = f"{name}'s first address"
    if not nic.running:
        state = f"{name} is not running, so peers cannot reach it"
    return GlooDevice(interface=name, address=addr.address, loopback=_is_loopback(addr.address), error=None,
                      reason=state)


def _hostname_device(table: NicTable, addresses: Sequence[str], torch_fallback: bool) -> GlooDevice:
    # device.cc lookupAddrForHostname: the first getaddrinfo answer that bind(2) accepts;
    # torch checks the same first and falls back to 127.0.0.1 (ProcessGroupGloo.cpp
    # createDefaultDevice, doesHostnameResolveToUsableAddress).
    found, why = first_bindable(table, addresses), "the hostname's first bindable address"
    if found is None and torch_fallback:
        found = first_bindable(table, [LOOPBACK_V4])
        why = f"the hostname has no address here, so torch falls back to {LOOPBACK_V4}, which"
    if found is None:
        return GlooDevice(interface=None, address=None, loopback=False, error="Unable to find address for the hostname",
                          reason="the hostname resolves to no address of this node")
    nic, address = found
    if not _is_loopback(address):
        return GlooDevice(interface=nic.name, address=address, loopback=False, error=None, reason=why)
    return GlooDevice(interface=nic.name, address=address, loopback=True, error=None,
                      reason=_loopback_trap(table, nic, why, "GLOO"))


def _loopback_trap(table: NicTable, nic: Nic, why: str, lib: str) -> str:
    return (f"{why} is loopback ({nic.name} owns {_loopback_nets(nic)}), so peers would "
            f"connect to themselves; set {lib}_SOCKET_IFNAME to one of: {_usable_names(table)}")


def _gloo_line(d: GlooDevice) -> str:
    return f"{d.interface or '?'} ({d.address or d.error}): {d.reason}"


# --------------------------------------------------------------------------------------
# TensorPipe


def tp_interface(
    table: NicTable, env: Mapping[str, str], hostname_addresses: Sequence[str] | None = None
) -> TpChoice:
    """rpc/tensorpipe_agent.cpp guessAddress: TP_SOCKET_IFNAME, set at all (even empty),
    names one interface; else the hostname's first bindable address (None here: not
    resolved). Failing either, TensorPipe logs a warning and uses 127.0.0.1."""
    if "TP_SOCKET_IFNAME" in env:
        return _tp_named(table, env["TP_SOCKET_IFNAME"])
    if hostname_addresses is None:
        return TpChoice(interface=None, address=None, loopback=False, fallback=False,
                        reason="TP_SOCKET_IFNAME unset: the hostname's "
                        "first bindable address (hostname not resolved here)")
    found = first_bindable(table, hostname_addresses)
    if found is None:
        return _tp_fallback(table, "the hostname resolves to no address of this node")
    nic, address = found
    why = "the hostname's first bindable address"
    if _is_loopback(address):
        return TpChoice(interface=nic.name, address=address, loopback=True, fallback=False,
                        reason=_loopback_trap(table, nic, why, "TP"))
    return TpChoice(interface=nic.name, address=address, loopback=False, fallback=False, reason=why)


def _tp_named(table: NicTable, name: str) -> TpChoice:
    # uv/utility.cc lookupAddrForIface walks libuv's uv_interface_addresses, which lists
    # only interfaces that are up and running; the first address wins.
    walk = getifaddrs_walk(table)
    hit = next((a for n, a in walk if n.name == name and n.up and n.running), None)
    if hit is None:
        return _tp_fallback(table, f"no up and running interface named {name!r} ({interface_names(table)})")
    return TpChoice(interface=name, address=hit.address, loopback=_is_loopback(hit.address), fallback=False,
                    reason=f"TP_SOCKET_IFNAME={name}")


def _tp_fallback(table: NicTable, why: str) -> TpChoice:
    found = first_bindable(table, [LOOPBACK_V4])
    return TpChoice(interface=found[0].name if found else None, address=LOOPBACK_V4, loopback=True, fallback=True,
                    reason=f"{why}: TensorPipe silently falls back to {LOOPBACK_V4}")


# --------------------------------------------------------------------------------------
# Checking a user's setting


def getifaddrs_walk(table: NicTable) -> Iterator[tuple[Nic, Address]]:
    """Addresses in the order getifaddrs returns them: glibc asks RTM_GETADDR for every
    family, and the kernel dumps all IPv4 addresses (link order) before any IPv6 one.
    So an interface with only IPv6 comes after every interface with IPv4."""
    for family in ("ipv4", "ipv6"):
        for nic in table.nics:
            for addr in nic.addresses:
                if addr.family == family:
                    yield nic, addr


def first_bindable(table: NicTable, addresses: Sequence[str]) -> tuple[Nic, str] | None:
    """The first address bind(2) accepts, with its interface (gloo's and TensorPipe's
    walk over the hostname's getaddrinfo answers)."""
    return next(((nic, a) for a in addresses if (nic := bindable_owner(table, a))), None)


def bindable_owner(table: NicTable, text: str) -> Nic | None:
    """The interface bind(2) would tie an address to, or None when bind fails
    (EADDRNOTAVAIL). An address on a loopback interface makes its whole IPv4 prefix local
    (fib_frontend.c fib_add_ifaddr adds a RTN_LOCAL prefix route), which is why 127.0.1.1
    binds on a stock /etc/hosts; gloo then names the first interface with a 127/8 address
    (device.cc sockaddrToInterfaceName)."""
    address, _, scope = text.partition("%")
    ip = as_ip(address)
    if ip is None or (ip.version == 6 and ip.is_link_local and not scope):
        return None  # a name, or a link-local address without its scope (EINVAL)
    for nic, addr in getifaddrs_walk(table):
        if ipaddress.ip_address(addr.address) == ip and (not scope or scope == nic.name):
            return nic
    for nic, addr in getifaddrs_walk(table):
        if ip.version == 4 and _is_loopback_nic(nic) and ip in _network(addr):
            return nic
    return None


def _is_loopback_nic(nic: Nic) -> bool:
    return nic.kind == "loopback" or any(_is_loopback(a.address) for a in nic.addresses)


def _loopback_nets(nic: Nic) -> str:
    return ", ".join(str(_network(a)) for a in nic.addresses if a.family == "ipv4") or "::1"


def _usable_names(table: NicTable) -> str:
    names = [n.name for n in table.nics if n.running and n.addresses and not _is_loopback_nic(n)]
    return ", ".join(names) or "(none running with an address)"


def _network(addr: Address) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(f"{addr.address}/{addr.prefixlen}", strict=False)


def as_ip(text: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _is_loopback(text: str) -> bool:
    ip = as_ip(text.partition("%")[0])
    return bool(ip and ip.is_loopback)


def interface_names(table: NicTable) -> str:
    return ", ".join(n.name for n in table.nics) or "no interfaces"


Choose = Callable[[NicTable, Mapping[str, str], Any], T]


def once_per_table(choose: Choose[T]) -> Choose[T]:
    """choose(table, settings, extra), once per distinct interface table, settings and extra:
    a torchrun node's ranks hold one table (fields.SHARED), and a library picks alike on each."""
    chosen: dict[tuple, T] = {}

    def once(table: NicTable, env: Mapping[str, str], extra: Any) -> T:
        key = (id(table), tuple(env.items()), extra)   # the tables outlive the rule: an id is theirs alone
        if key not in chosen:
            chosen[key] = choose(table, env, extra)
        return chosen[key]
    return once
