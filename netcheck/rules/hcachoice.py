"""What NCCL's IB transport would pick on one node: pure functions over its RDMA ports.

Each rule follows NVIDIA/nccl (v2.30 unless a version is named): src/transport/net_ib/init.cc
ncclIbInitDevices (which ports, under NCCL_IB_HCA), src/misc/utils.cc parseStringList and
matchIfList (its syntax), src/transport/net_ib/connect.cc ncclIbGetGidIndex and
ncclUpdateGidIndex (which GID, under NCCL_IB_GID_INDEX, NCCL_IB_ROCE_VERSION_NUM,
NCCL_IB_ADDR_FAMILY and NCCL_IB_ADDR_RANGE). On a RoCE node whose GID table holds fe80::
(v1, v2) then ::ffff:198.18.0.1 (v1, v2):

    ib_ports(ports, {"NCCL_IB_HCA": "=mlx5_0:1"})          -> (mlx5_0 port 1,)
    gid_choice(port, {}, (2, 30, 7)).index                  -> 3 (RoCE v2, IPv4)
    gid_choice(port, {}, (2, 20, 5)).index                  -> 0 (before 2.21: NCCL_IB_GID_INDEX=0)
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from netcheck.core.rdmarecords import ETHERNET, INFINIBAND, ROCE_V1, ROCE_V2, Gid, RdmaPort

MAX_IB_DEVS = 32              # src/transport/net_ib/common.h
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
# NCCL_PARAM(IbGidIndex, "IB_GID_INDEX", -1) from 2.21; 0 before (net_ib.cc, v2.20.5).
AUTO_GID_SINCE = (2, 21, 0)
# NCCL_PARAM(IbRoutableFlidIbGidIndex, "IB_ROUTABLE_FLID_GID_INDEX", 1), from 2.22.
FLID_SINCE = (2, 22, 0)
ROCE_VERSIONS = {ROCE_V1: 1, ROCE_V2: 2}


@dataclass(frozen=True)
class IbHcaSpec:
    """A parsed NCCL_IB_HCA: `^` excludes, `=` matches whole names, else prefixes; `:port`."""

    entries: tuple[tuple[str, int], ...]    # (name or prefix, port; -1: any port)
    exclude: bool
    exact: bool


@dataclass(frozen=True)
class GidPick:
    index: int
    gid: str                  # the GID at that index ("" where the slot is empty)
    type: str                 # its gid_attrs type
    family: str               # "ipv4" | "ipv6"
    problem: str              # "" | "roce_v1" | "link_local" | "unconfigured"
    rule: str                 # what chose it


def parse_ib_hca(value: str | None) -> IbHcaSpec:
    # init.cc: bool searchNot = userIbEnv && userIbEnv[0] == '^'; if (searchNot) userIbEnv++;
    #          bool searchExact = userIbEnv && userIbEnv[0] == '='; if (searchExact) userIbEnv++;
    value = value or ""
    exclude = value.startswith("^")
    value = value[exclude:]
    exact = value.startswith("=")
    value = value[exact:]
    return IbHcaSpec(tuple(_entries(value)), exclude, exact)


def _entries(value: str) -> list[tuple[str, int]]:
    # utils.cc parseStringList: strtok_r on ',' (empty entries vanish), then "name:port";
    # "port ... will default to -1 if absent or empty"; at most maxList (MAX_IB_DEVS) entries.
    found = []
    for entry in (e for e in value.split(",") if e):
        name, _, rest = entry.partition(":")
        port = rest.split(":", 1)[0]
        if name:
            found.append((name, _atoi(port) if port else -1))
    return found[:MAX_IB_DEVS]


def _atoi(text: str) -> int:
    # atoi: an optional sign and the digits that follow; 0 when there are none
    hit = re.match(r"\s*([+-]?[0-9]+)", text)
    return int(hit.group(1)) if hit else 0


def ib_matches(spec: IbHcaSpec, device: str, port: int) -> bool:
    # utils.cc matchIf: "int matchLen = matchExact ? strlen(string) + 1 : strlen(ref);
    # return strncmp(string, ref, matchLen) == 0;" and matchPort: -1 on either side matches;
    # matchIfList: "if (listSize == 0) return true;"; init.cc XORs the result with searchNot.
    if not spec.entries:
        hit = True
    else:
        hit = any((device == name if spec.exact else device.startswith(name)) and (want == -1 or want == port)
                  for name, want in spec.entries)
    return hit != spec.exclude


def ib_ports(ports: tuple[RdmaPort, ...], env: Mapping[str, str]) -> tuple[RdmaPort, ...]:
    """The ports NCCL would use, in its order: "if (portAttr.state != IBV_PORT_ACTIVE) continue;",
    link layer InfiniBand or Ethernet only, then NCCL_IB_HCA; MAX_IB_DEVS at most."""
    spec = parse_ib_hca(env.get("NCCL_IB_HCA"))
    usable = [p for p in ports if p.state == "ACTIVE" and p.link_layer in (INFINIBAND, ETHERNET)
              and ib_matches(spec, p.device, p.port)]
    return tuple(usable[:MAX_IB_DEVS])


def gid_choice(port: RdmaPort, env: Mapping[str, str], version: tuple[int, ...]) -> GidPick:
    """connect.cc ncclIbGetGidIndex for this port under this node's settings and NCCL version."""
    table = {g.index: g for g in port.gids}
    if port.link_layer == INFINIBAND:
        # "for IB, choose GID Index that will have routable FLID if present", else 0.
        flid_index = _int(env.get("NCCL_IB_ROUTABLE_FLID_GID_INDEX"), 1)
        if version >= FLID_SINCE and flid_index < port.gid_table_len and _flid(table.get(flid_index)):
            return _pick(table, flid_index, "a routable FLID")
        return _pick(table, 0, "InfiniBand: index 0")
    default = -1 if version >= AUTO_GID_SINCE else 0
    fixed = _int(env.get("NCCL_IB_GID_INDEX"), default)
    if fixed >= 0:
        why = "NCCL_IB_GID_INDEX" if "NCCL_IB_GID_INDEX" in env else "NCCL before 2.21: index 0"
        return _pick(table, fixed, why)
    family = "ipv6" if env.get("NCCL_IB_ADDR_FAMILY") == "AF_INET6" else "ipv4"
    roce = _int(env.get("NCCL_IB_ROCE_VERSION_NUM"), 2)
    prefix = _addr_range(env.get("NCCL_IB_ADDR_RANGE"), family)
    index = 0
    for candidate in range(1, port.gid_table_len):   # "for (gidIndexNext = 1; ... < gidTblLen; ...)"
        index = _update(table, family, prefix, roce, candidate, index)
    return _pick(table, index, f"automatic (RoCE v{roce}, {family})")


def _update(table: dict[int, Gid], family: str, prefix: ipaddress.IPv6Network | None, roce: int, candidate: int,
            index: int) -> int:
    """ncclUpdateGidIndex, line by line."""
    gid, cand = _text(table, index), _text(table, candidate)
    in_range = prefix is None or _address(cand) in prefix   # matchGidAddrPrefix
    # if (gidCandidateFam != gidFam && gidCandidateFam == usrFam && gidCandidateMatchSubnet)
    if gid_family(cand) != gid_family(gid) and gid_family(cand) == family and in_range:
        return candidate
    # if (gidCandidateFam != usrFam || !validGid(&gidCandidate) || !gidCandidateMatchSubnet) return
    if gid_family(cand) != family or not valid_gid(cand) or not in_range:
        return index
    # if ((gidRoceVerNum != gidRoceVerNumCandidate || !validGid(&gid)) && gidRoceVerNumCandidate == usrRoceVer)
    mine, theirs = _roce(table, index), _roce(table, candidate)
    return candidate if (mine != theirs or not valid_gid(gid)) and theirs == roce else index


def gid_family(gid: str) -> str:
    """getGidAddrFamily: an IPv4-mapped GID (::ffff:a.b.c.d, or ff0e::ffff:... multicast) is AF_INET."""
    raw = _address(gid).packed
    mapped = raw[:10] == bytes(10) and raw[10:12] == b"\xff\xff"
    multicast = raw[:4] == b"\xff\x0e\x00\x00" and raw[4:10] == bytes(6) and raw[10:12] == b"\xff\xff"
    return "ipv4" if mapped or multicast else "ipv6"


def valid_gid(gid: str) -> bool:
    """validGid = configuredGid && !linkLocalGid: not ::, not fe80:: alone, not fe80::/64."""
    return _problem(gid) == ""


def _problem(gid: str) -> str:
    raw = _address(gid).packed
    if raw[4:] == bytes(12) and raw[:4] in (bytes(4), b"\xfe\x80\x00\x00"):
        return "unconfigured"     # configuredGid: "(s6_addr32[0] | trailer) == 0" or fe80 with a zero trailer
    if raw[:8] == b"\xfe\x80" + bytes(6):
        return "link_local"       # linkLocalGid: s6_addr32[0] == fe800000 && s6_addr32[1] == 0
    return ""


def _pick(table: dict[int, Gid], index: int, rule: str) -> GidPick:
    entry = table.get(index)
    gid = _text(table, index)
    problem = _problem(gid)
    if not problem and entry is not None and entry.type == ROCE_V1:
        problem = "roce_v1"
    return GidPick(index, entry.gid if entry else "", entry.type if entry else "", gid_family(gid), problem, rule)


def _text(table: dict[int, Gid], index: int) -> str:
    entry = table.get(index)
    return entry.gid if entry else EMPTY_GID


def _roce(table: dict[int, Gid], index: int) -> int | None:
    # ncclIbRoceGetVersionNum reads gid_attrs/types/<index>: "IB/RoCE v1" -> 1, "RoCE v2" -> 2
    entry = table.get(index)
    return ROCE_VERSIONS.get(entry.type) if entry else None


def _flid(entry: Gid | None) -> bool:
    # ncclIbExtractFlid: ntohs of the GID's bytes 4-5
    return entry is not None and _address(entry.gid).packed[4:6] != b"\x00\x00"


def _address(gid: str) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(gid)


def _addr_range(value: str | None, family: str) -> ipaddress.IPv6Network | None:
    """envIbAddrRange: "address/bits" in the chosen family; anything else is no range.
    For AF_INET the GID's last 32 bits are compared, so an IPv4 range holds the mapped address."""
    if not value or "/" not in value:
        return None
    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        return None
    if (net.version == 4) != (family == "ipv4"):
        return None
    if isinstance(net, ipaddress.IPv4Network):
        return ipaddress.IPv6Network(f"::ffff:{net.network_address}/{96 + net.prefixlen}", strict=False)
    return net


def _int(value: str | None, default: int) -> int:
    # NCCL_PARAM reads with strtoll; an unreadable value keeps the default
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


def nccl_version(text: str) -> tuple[int, ...]:
    """"2.21.5" -> (2, 21, 5); unknown: the newest rules (an empty text)."""
    try:
        return tuple(int(x) for x in text.split(".")[:3]) if text else (99,)
    except ValueError:
        return (99,)
