"""Rules for the mesh and nic phases, and the interface settings they prove.

Input: every node's facts (its NicTable and socket settings) and every mesh attempt.
Output: findings and the NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME values
that the mesh showed to carry traffic between every pair, of names that pass the interface-name
rule (core.names): a person pastes them into a shell. Pure: no I/O, no printing.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass
from statistics import median

from netcheck.cluster.mesh import CONNECTED, Attempt, passed_frame
from netcheck.core.constants import MESH_FLAGGED_TOLD
from netcheck.core.majority import split
from netcheck.core.model import FAIL, PASS, WARN, Finding, Member, hostnames
from netcheck.core.names import IFNAME_MAX_BYTES, is_safe_ifname
from netcheck.rules import ifselect
from netcheck.rules.registry import (
    MESH_BLACKHOLE, MESH_CONNECT, NIC_GLOO_DEFAULT, NIC_IB, NIC_MTU, NIC_NCCL_DEFAULT, NIC_ROUTE, NIC_SPEED,
    NIC_TP_DEFAULT, ROUTE_UNSAFE_NAME,
)

SETTINGS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
MESH_FIX = ("open the nodes' firewalls to each other for all TCP ports (NCCL and gloo listen "
            "on ephemeral ports, not only the master port), or pin the libraries to an "
            "interface that works with the exports below")


@dataclass(frozen=True)
class Recommendation:
    cluster: dict[str, str]                # variable -> value, the same on every node
    per_node: dict[str, dict[str, str]]    # hostname -> variable -> value, where names differ
    reason: str                            # why there is none, when there is none


def proven_interfaces(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> dict[int, list[str]]:
    """Per node, its interfaces that every peer which tried could reach (right greeting).

    In the node's getifaddrs order, the order NCCL walks them. A node no peer tried (its
    peers died first) is left out: there is no evidence either way, and the rules that
    need proof skip it rather than fail it.
    """
    # A node that reaches no peer proves nothing about the peers it tried.
    _, isolated = cut_off_nodes(*_directions(attempts))
    witnessed = [a for a in attempts if a.src not in isolated]
    tried, reached = defaultdict(set), defaultdict(set)
    for a in witnessed:
        tried[(a.dst, a.ifname)].add(a.src)
        # A path that loses full-size frames still leads to the peer: the interface is the
        # right one, its MTU is wrong, and mesh.connect names that.
        if a.connected:
            reached[(a.dst, a.ifname)].add(a.src)
    targets = {a.dst for a in witnessed}
    return {m.rank: [n.name for n in m.facts.nics.nics
                     if tried[(m.rank, n.name)] and tried[(m.rank, n.name)] == reached[(m.rank, n.name)]]
            for m in members if m.rank in targets}


def mesh_findings(names: dict[int, str], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """Node pairs (per direction) that connect on no interface at all fail the mesh; so do
    paths that connect but lose full-size frames."""
    holes = blackhole_findings(names, attempts)
    # "Every direction connects" is no pass where the connected paths lose large frames.
    return [f for f in _connect_findings(names, attempts) if not (holes and f.severity == PASS)] + holes


def _connect_findings(names: dict[int, str], attempts: tuple[Attempt, ...]) -> list[Finding]:
    broken = _broken_directions(attempts)
    directions = {(a.src, a.dst) for a in attempts}
    if broken:
        unreachable, isolated = cut_off_nodes(*_directions(attempts))
        ranks = _at_fault(unreachable | isolated, set(broken))
        summary = f"{len(broken)} of {len(directions)} node-to-node directions connect on no interface"
        if unreachable:
            summary += f"; no peer reaches {_names(names, unreachable)}"
        if isolated:
            summary += f"; {_names(names, isolated)} reach(es) no peer"
        evidence = tuple(f"{names.get(s, s)} -> {names.get(d, d)}: " + "; ".join(
            f"{a.ifname} {a.address}: {a.outcome} ({a.detail})" for a in tries)
            for (s, d), tries in sorted(broken.items()))
        return [Finding(MESH_CONNECT, FAIL, tuple(sorted(ranks)), summary, evidence, MESH_FIX)]
    rtts = [a.rtt_ms for a in attempts if a.rtt_ms is not None]
    idle = _idle_interfaces(names, attempts)
    summary = f"all {len(directions)} node-to-node directions connect"
    if frames := [a.transfer.trials[0].frame for a in attempts if a.outcome == "ok" and a.transfer]:
        summary += f" and echo full-size frames (up to {max(frames)} bytes)"
    if rtts:
        summary += f"; median connect {median(rtts):.2f} ms"
    return [Finding(MESH_CONNECT, PASS, tuple(sorted(names)), summary, idle)]


def _broken_directions(attempts: tuple[Attempt, ...]) -> dict[tuple[int, int], list[Attempt]]:
    """(src, dst) -> its attempts, for the directions that connect on no interface."""
    by_pair = defaultdict(list)
    for a in attempts:
        by_pair[(a.src, a.dst)].append(a)
    return {pair: tries for pair, tries in by_pair.items() if not any(a.connected for a in tries)}


def _at_fault(blamed: set[int], broken: set[tuple[int, int]]) -> set[int]:
    """A broken direction with a blamed node at one end is that node's fault alone; the rest
    name both ends, as nothing tells which end's firewall (or link) is the cause."""
    return blamed | {r for pair in broken if not blamed & set(pair) for r in pair}


def _directions(attempts: tuple[Attempt, ...]) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(every direction tried, the directions that connected on no interface)."""
    tried = {(a.src, a.dst) for a in attempts}
    return tried, tried - {(a.src, a.dst) for a in attempts if a.connected}


def blackhole_findings(names: dict[int, str], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """Paths that connect and carry small messages but lose full-size frames: a path-MTU
    blackhole (FAILURES row 21). Both ends say MTU 9000, a switch port or tunnel between
    them carries less, and no ICMP says so: every collective that sends a full segment over
    the path hangs. A node all of whose paths (two peers or more, in or out) lose them is
    the one whose link is short; otherwise both ends of each path are named."""
    holes = sorted((a for a in attempts if a.outcome == "blackhole"), key=lambda a: (a.src, a.dst, a.ifname))
    if not holes:
        return []
    lossy = {(a.src, a.dst) for a in holes}
    unreachable, isolated = cut_off_nodes({(a.src, a.dst) for a in attempts if a.connected}, lossy)
    blamed = unreachable | isolated
    ranks = _at_fault(blamed, lossy)
    full = max(a.transfer.trials[0].frame for a in holes)
    passed = min(passed_frame(a.transfer) for a in holes)
    where = (f"at {_names(names, blamed)}" if blamed else "between " + ", ".join(
        f"{names.get(s, s)} and {names.get(d, d)}" for s, d in sorted({tuple(sorted(p)) for p in lossy})))
    summary = (f"path-MTU blackhole {where}: {len(holes)} path(s) connect and carry small messages, but "
               f"full-size frames ({full} bytes) vanish; " + (f"{passed}-byte frames pass" if passed else
                                                             "smaller frames too"))
    return [Finding(MESH_CONNECT, FAIL, tuple(sorted(ranks)), summary,
                    tuple(_hole_text(names, a) for a in holes), _blackhole_fix(names, holes, blamed or ranks,
                                                                              bool(blamed), full, passed),
                    MESH_BLACKHOLE)]


def _hole_text(names: dict[int, str], a: Attempt) -> str:
    t = a.transfer
    passed = passed_frame(t)
    return (f"{names.get(a.src, a.src)} (rank {a.src}) {a.src_ifname or '?'} mtu {t.src_mtu or '?'} -> "
            f"{names.get(a.dst, a.dst)} (rank {a.dst}) {a.ifname} {a.address} mtu {t.dst_mtu or '?'}: "
            f"{t.trials[0].frame}-byte frames lost, " + (f"{passed}-byte frames passed" if passed else
                                                        "only the greeting passed"))


def _blackhole_fix(names: dict[int, str], holes: list[Attempt], fixed: set[int], one_link: bool,
                   full: int, passed: int) -> str:
    """Either end's interface at the path's MTU is enough (TCP then keeps both directions to
    it), so the command goes to the blamed node alone when there is one."""
    ends = sorted({(a.src, _pasteable(a.src_ifname)) for a in holes if a.src in fixed}
                  | {(a.dst, _pasteable(a.ifname)) for a in holes if a.dst in fixed})
    mtu = str(passed) if passed else "MTU"
    commands = "; ".join(f"on {names.get(r, r)}: ip link set dev {ifname} mtu {mtu}" for r, ifname in ends)
    measure = "" if passed else (", MTU being the path's (find it with ping -M do -s SIZE PEER: the "
                                 "largest SIZE that answers, plus 28)")
    where = f"the switch port of {_names(names, fixed)}" if one_link else "the switch ports between these nodes"
    return (f"set the path's MTU on the interfaces ({commands}{measure}), or enable jumbo frames (MTU {full}) "
            f"along the path: {where}, and any tunnel or router on the way")


def _pasteable(ifname: str | None) -> str:
    """An interface name for a command a person may paste: IF where it is unknown or fails
    the interface-name rule."""
    return ifname if is_safe_ifname(ifname) else "IF"


@dataclass(frozen=True)
class FlaggedPaths:
    """The paths mesh.connect failed, for the phases after it. Small on purpose: the host
    tells it to every joiner, and a message larger than a frame does not cross a blackhole."""

    blackholes: int = 0             # how many lose full-size frames
    paths: tuple[str, ...] = ()     # a line each, blackholes first, at most MESH_FLAGGED_TOLD
    cut_off: tuple[int, ...] = ()   # nodes no peer reaches, or that reach no peer (cut_off_nodes)


def flagged_paths(names: dict[int, str], attempts: tuple[Attempt, ...]) -> FlaggedPaths:
    """The paths behind a failing mesh.connect: those that lose full-size frames, then those
    of directions that connect on no interface (an address that is this node's own, like
    docker0's, aside: it never was a path)."""
    holes = [a for a in attempts if a.outcome == "blackhole"]
    broken = [a for tries in _broken_directions(attempts).values() for a in tries if a.outcome != "local"]
    unreachable, isolated = cut_off_nodes(*_directions(attempts))
    return FlaggedPaths(len(holes), tuple(_path_text(names, a) for a in (holes + broken)[:MESH_FLAGGED_TOLD]),
                        tuple(sorted(unreachable | isolated)))


def _path_text(names: dict[int, str], a: Attempt) -> str:
    return f"{names.get(a.src, a.src)} -> {names.get(a.dst, a.dst)} {a.ifname} ({a.address}): {a.outcome}"


def cut_off_nodes(tried: set[tuple[int, int]], broken: set[tuple[int, int]]) -> tuple[set[int], set[int]]:
    """(nodes no peer reaches, nodes that reach no peer), each judged only where at least two
    peers tried: with one, a broken direction says nothing about which end is at fault."""
    into, out_of = defaultdict(set), defaultdict(set)
    for src, dst in tried:
        into[dst].add(src)
        out_of[src].add(dst)
    unreachable = {d for d, srcs in into.items() if len(srcs) >= 2 and all((s, d) in broken for s in srcs)}
    isolated = {s for s, dsts in out_of.items() if len(dsts) >= 2 and all((s, d) in broken for d in dsts)}
    return unreachable, isolated


def _names(names: dict[int, str], ranks: set[int]) -> str:
    return ", ".join(names.get(r, str(r)) for r in sorted(ranks))


def _idle_interfaces(names: dict[int, str], attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    """Interfaces that carried nothing between nodes (a docker0 on every host, a dead ib0)."""
    outcomes = defaultdict(set)
    for a in attempts:
        outcomes[(a.dst, a.ifname)].add(a.outcome)
    return tuple(f"{names.get(d, d)} {ifname} carries nothing between nodes: {', '.join(sorted(o))}"
                 for (d, ifname), o in sorted(outcomes.items()) if not o & set(CONNECTED))


def route_findings(members: tuple[Member, ...], attempts: tuple[Attempt, ...],
                   proven: dict[int, list[str]]) -> list[Finding]:
    """The user's own interface settings, held against each node's real interfaces; and the
    interfaces the mesh proved (proven_interfaces) whose names no setting can safely hold."""
    unsafe = unsafe_name_findings(members, proven)
    # "Settings match" is no pass where a proven interface cannot be named in one.
    return [f for f in _settings_findings(members, attempts) if not (unsafe and f.severity == PASS)] + unsafe


def unsafe_name_findings(members: tuple[Member, ...], proven: dict[int, list[str]]) -> list[Finding]:
    """Proven interfaces whose names fail the interface-name rule: a node that lies about its
    interfaces, or one named so that an export line pasted into a shell would do more than
    set a variable. The exports leave them out (recommendation); the node is named."""
    names = hostnames(members)
    unsafe = {r: bad for r, ifnames in sorted(proven.items())
              if (bad := [n for n in ifnames if not is_safe_ifname(n)])}
    if not unsafe:
        return []
    return [Finding(NIC_ROUTE, FAIL, tuple(unsafe),
                    f"interface names no *_SOCKET_IFNAME can safely hold on {_names(names, set(unsafe))}: "
                    "left out of the exports",
                    tuple(f"{names.get(r, r)}: {n!r} is not 1 to {IFNAME_MAX_BYTES} letters, digits and ._-"
                          for r, bad in unsafe.items() for n in bad),
                    "rename the interface (ip link set dev OLD name NEW); if the node has no such interface, "
                    "what it sent is not netcheck's: take the node out of the job and find what runs there",
                    ROUTE_UNSAFE_NAME)]


def _settings_findings(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """The *_SOCKET_IFNAME each node was given, against its interfaces: a fail, else a warning
    for shared subnets, else a pass with the routes the mesh used."""
    problems = []
    for m in members:
        for var in SETTINGS:
            value = m.facts.socket_env.get(var)
            problem = ifselect.validate_setting(var, value, m.facts.nics) if value else None
            if problem:
                problems.append((m, f"{m.facts.hostname}: {var}={value}: {problem.reason}"))
    if problems:
        return [Finding(NIC_ROUTE, FAIL, tuple(sorted({m.rank for m, _ in problems})),
                        f"{len(problems)} interface setting(s) do not work on their node",
                        tuple(text for _, text in problems),
                        "set the variables to interface names that exist on every node; a "
                        "cluster run's export lines name ones that work")]
    shared = [(m, text) for m in members for text in shared_subnets(m.facts.nics)]
    if shared:
        return [Finding(NIC_ROUTE, WARN, tuple(sorted({m.rank for m, _ in shared})),
                        "two interfaces on one subnet: the kernel may answer from either",
                        tuple(f"{m.facts.hostname}: {text}" for m, text in shared),
                        "give each interface its own subnet, or pin the libraries to one of "
                        "them with the exports below (nccl#913)")]
    return [Finding(NIC_ROUTE, PASS, tuple(m.rank for m in members),
                    "interface settings match every node's interfaces; routes to peers below (-v)",
                    _routes(members, attempts))]


def shared_subnets(table) -> list[str]:
    """Running interfaces with addresses in one IPv4 subnet, as "eth0, eth1 on 10.0.0.0/24"."""
    by_net = defaultdict(list)
    for nic in table.nics:
        if nic.running and nic.kind != "loopback":
            for a in nic.addresses:
                if a.family == "ipv4":
                    by_net[ipaddress.ip_interface(f"{a.address}/{a.prefixlen}").network].append(nic.name)
    return [f"{', '.join(names)} on {net}" for net, names in by_net.items() if len(set(names)) > 1]


def _routes(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    names = hostnames(members)
    used = sorted({(a.src, a.src_ifname, a.dst, a.ifname) for a in attempts
                   if a.connected and a.src in names})
    return tuple(f"{names[s]} {si} -> {names.get(d, f'rank {d}')} {di}" for s, si, d, di in used)


def nccl_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None) -> list[Finding]:
    """What NCCL's socket bootstrap would pick on each node, checked against the mesh."""
    choices = [(m, ifselect.nccl_choice(m.facts.nics, m.facts.socket_env)) for m in members]
    return _library_finding(
        NIC_NCCL_DEFAULT, FAIL, members, [(m, _nccl_trouble(m, c, proven)) for m, c in choices],
        "NCCL's interface choice fails", "set NCCL_SOCKET_IFNAME to an interface that reaches every "
        "peer: a cluster run's export lines name one", "NCCL's interface choice works on every node",
        tuple(f"{m.facts.hostname}: {c.reason}" for m, c in choices))


def _nccl_trouble(m: Member, choice: ifselect.NcclChoice, proven) -> str | None:
    picked = [p.name for p in choice.interfaces]
    if choice.bootstrap is None:
        return f"{m.facts.hostname}: NCCL finds no socket interface ({choice.reason})"
    if dead := _unproven(proven, m.rank, picked):
        return (f"{m.facts.hostname}: NCCL would use {', '.join(picked)}; {', '.join(dead)} reaches no "
                f"peer ({choice.reason})")
    return None


def gloo_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None) -> list[Finding]:
    """The address gloo would bind on each node: the hostname's, unless GLOO_SOCKET_IFNAME."""
    def trouble(m: Member) -> str | None:
        choice = ifselect.gloo_device_addresses(m.facts.nics, m.facts.socket_env, list(m.facts.hostname_addresses))
        bad = any(d.error or d.loopback or _unproven(proven, m.rank, [d.interface]) for d in choice.devices)
        return f"{m.facts.hostname}: {choice.reason}" if bad else None

    return _library_finding(
        NIC_GLOO_DEFAULT, FAIL, members, [(m, trouble(m)) for m in members],
        "gloo would use an address peers cannot reach", "set GLOO_SOCKET_IFNAME to an interface that "
        "reaches every peer (a cluster run's export lines name one per node), or fix /etc/hosts so the "
        "hostname resolves to the node's real address, not 127.0.1.1", "gloo's address works on every node")


def tp_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None) -> list[Finding]:
    """The address TensorPipe (torch.distributed.rpc) would use on each node. Only RPC
    uses it, not DDP or FSDP, so a bad one warns."""
    def trouble(m: Member) -> str | None:
        choice = ifselect.tp_interface(m.facts.nics, m.facts.socket_env, list(m.facts.hostname_addresses))
        # TensorPipe's silent fallback is loopback too.
        bad = choice.loopback or _unproven(proven, m.rank, [choice.interface])
        return f"{m.facts.hostname}: {choice.interface or '?'} ({choice.address}): {choice.reason}" \
            if bad else None

    return _library_finding(
        NIC_TP_DEFAULT, WARN, members, [(m, trouble(m)) for m in members],
        "TensorPipe (torch.distributed.rpc) would use an address peers cannot reach", "only RPC-based "
        "jobs care: set TP_SOCKET_IFNAME to an interface that reaches every peer (a cluster run's export "
        "lines name one per node)", "TensorPipe's address works on every node")


def _unproven(proven: dict[int, list[str]] | None, rank: int, names: list[str | None]) -> list[str | None]:
    """The names the mesh did not prove on this node; none where it has no proof (a joiner)."""
    if proven is None or rank not in proven:
        return []
    return [n for n in names if n not in proven[rank]]


def _library_finding(check: str, severity: str, members: tuple[Member, ...],
                     troubles: list[tuple[Member, str | None]], summary: str, fix: str, passed: str,
                     passed_evidence: tuple[str, ...] = ()) -> list[Finding]:
    """One library's choice judged node by node: the nodes with trouble, else a pass."""
    bad = [(m, text) for m, text in troubles if text]
    if not bad:
        return [Finding(check, PASS, tuple(m.rank for m in members), passed, passed_evidence)]
    return [Finding(check, severity, tuple(m.rank for m, _ in bad),
                    f"{summary} on {', '.join(m.facts.hostname for m, _ in bad)}", tuple(t for _, t in bad), fix)]


def mtu_findings(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """The two ends of each working path should agree on MTU (FAILURES row 13)."""
    nic = {(m.rank, n.name): n for m in members for n in m.facts.nics.nics}
    names = hostnames(members)
    pairs = set()
    for a in attempts:
        src, dst = nic.get((a.src, a.src_ifname)), nic.get((a.dst, a.ifname))
        if a.connected and src and dst and src.mtu != dst.mtu:
            pairs.add(tuple(sorted([(names[a.src], src.name, src.mtu), (names[a.dst], dst.name, dst.mtu)])))
    if not pairs:
        holes = sum(a.outcome == "blackhole" for a in attempts)
        # Agreeing ends prove nothing about a switch port between them: say so where the mesh found one.
        return [Finding(NIC_MTU, PASS, tuple(names), "both ends of every path agree on MTU" + (
            f"; {holes} path(s) between them carry less: see mesh.connect" if holes else ""))]
    odd = _odd_nodes(members, {(h, i): mtu for pair in pairs for h, i, mtu in pair})
    return [Finding(NIC_MTU, WARN, odd, f"MTU differs along {len(pairs)} path(s): small messages "
                    "work, large ones can stall", tuple(f"{a[0]} {a[1]} mtu {a[2]} <-> {b[0]} {b[1]} "
                                                        f"mtu {b[2]}" for a, b in sorted(pairs)),
                    "set the same MTU on every node's interface (ip link set dev IF mtu N) and the "
                    "switch ports between them")]


def _odd_nodes(members: tuple[Member, ...], mtu_by_iface: dict[tuple[str, str], int]) -> tuple[int, ...]:
    """The nodes whose MTU differs from the most common one; every node on a mismatched
    path when no MTU is more common than the others (two nodes: either could be wrong)."""
    odd_hosts = {h for h, _ in split(mtu_by_iface).odd}
    return tuple(m.rank for m in members if m.facts.hostname in odd_hosts)


def speed_findings(members: tuple[Member, ...], proven: dict[int, list[str]]) -> list[Finding]:
    """Link speed of the interfaces each node uses: one slow node paces every collective."""
    speeds = {m.rank: used_speed(m, proven[m.rank]) for m in members if m.rank in proven}
    known = {r: s for r, s in speeds.items() if s is not None}
    names = hostnames(members)
    def line(r: int) -> str:
        return f"{names[r]}: {f'{speeds[r]} Mb/s' if speeds[r] else 'unknown'}"

    evidence = tuple(line(r) for r in sorted(speeds))
    if not known:
        return [Finding(NIC_SPEED, PASS, tuple(speeds), "link speeds are not reported (virtual "
                        "interfaces); the bandwidth phase measures them", evidence)]
    fastest = max(known.values())
    slow = tuple(r for r, s in speeds.items() if s is None or s < fastest)
    if not slow:
        return [Finding(NIC_SPEED, PASS, tuple(names), f"every node's link runs at {fastest} Mb/s", evidence)]
    slow_first = tuple(line(r) for r in sorted(speeds, key=lambda r: (r not in slow, r)))
    return [Finding(NIC_SPEED, WARN, slow, f"{', '.join(names[r] for r in slow)}: link slower than "
                    f"its peers' {fastest} Mb/s, or unknown", slow_first,
                    "check cabling, autonegotiation (ethtool IF) and the switch port")]


def used_speed(m: Member, names) -> int | None:
    """Mb/s of the fastest of these interfaces of a node that reports a speed; None: none does."""
    nics = {n.name: n for n in m.facts.nics.nics}
    speeds = [nics[name].speed_mbps for name in names if name in nics]
    return max((s for s in speeds if s), default=None)


def ib_findings(members: tuple[Member, ...]) -> list[Finding]:
    """HCA ports that are not ACTIVE, and nodes whose active HCA ports differ from the rest."""
    names = hostnames(members)
    down = [(m, p) for m in members for p in m.facts.nics.ib_ports if p.state != "ACTIVE"]
    active = {m.rank: sorted((p.link_layer, p.rate) for p in m.facts.nics.ib_ports if p.state == "ACTIVE")
              for m in members}
    findings = []
    if down:
        findings.append(Finding(NIC_IB, FAIL, tuple(sorted({m.rank for m, _ in down})),
                                f"{len(down)} InfiniBand port(s) not active",
                                tuple(f"{names[m.rank]} {p.device} port {p.port}: {p.state}" for m, p in down),
                                "check the cable and the subnet manager (ibstat), or exclude the HCA "
                                "with NCCL_IB_HCA"))
    odd = split({r: tuple(v) for r, v in active.items()}).odd
    if odd:
        findings.append(Finding(NIC_IB, WARN, odd, "nodes have different sets of active InfiniBand "
                                "ports", tuple(f"{names[r]}: {len(v)} active {v}" for r, v in sorted(active.items())),
                                "uneven HCAs make NCCL fall back or fail: make every node's ports alike"))
    if not findings:
        count = sum(len(v) for v in active.values())
        findings.append(Finding(NIC_IB, PASS, tuple(names), f"{count} active InfiniBand port(s), alike "
                                "on every node" if count else "no InfiniBand ports on any node"))
    return findings


def recommendation(members: tuple[Member, ...], proven: dict[int, list[str]]) -> Recommendation:
    """Settings the mesh proved, in each library's syntax, of names that pass the
    interface-name rule; none when some node has no such interface."""
    lists = [[n for n in proven.get(m.rank, []) if is_safe_ifname(n)] for m in members]
    if not members or not all(lists):
        return Recommendation({}, {}, _no_recommendation(members, lists, proven))
    everything = [[n.name for n in m.facts.nics.nics] for m in members]
    cluster: dict[str, str] = {}
    nccl = ifselect.format_nccl_value(lists, everything)
    if nccl:
        cluster["NCCL_SOCKET_IFNAME"] = nccl
    gloo = ifselect.format_gloo_values(lists)
    per_node: dict[str, dict[str, str]] = {}
    if len(set(gloo)) == 1 and gloo[0]:
        cluster.update(GLOO_SOCKET_IFNAME=gloo[0], TP_SOCKET_IFNAME=gloo[0])
    else:
        per_node = {m.facts.hostname: {"GLOO_SOCKET_IFNAME": g, "TP_SOCKET_IFNAME": g}
                    for m, g in zip(members, gloo) if g}
    if not nccl:
        for m, names in zip(members, lists):
            per_node.setdefault(m.facts.hostname, {})["NCCL_SOCKET_IFNAME"] = "=" + names[0]
    return Recommendation(cluster, per_node, "")


def _no_recommendation(members: tuple[Member, ...], lists: list[list[str]], proven: dict[int, list[str]]) -> str:
    """Why there are no settings: nodes the mesh proved nothing on, nodes whose proven names fail the rule."""
    stuck = [m for m, names in zip(members, lists) if not names]
    unproven = [m.facts.hostname for m in stuck if not proven.get(m.rank)]
    unsafe = [m.facts.hostname for m in stuck if proven.get(m.rank)]
    reasons = []
    if unproven:
        reasons.append(f"nothing proven to reach {', '.join(unproven)} from every peer: see mesh.connect")
    if unsafe:
        reasons.append(f"only interface names no export can hold are proven on {', '.join(unsafe)}: see nic.route")
    return "; ".join(reasons)
