"""Rules for the mesh and nic phases, and the interface settings they prove.

Input: every node's facts (its NicTable and socket settings) and every mesh attempt.
Output: findings and the NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME values
that the mesh showed to carry traffic between every pair, of names that pass the interface-name
rule (core.names): a person pastes them into a shell. Pure: no I/O, no printing.

Longer than 500 lines: NCCL's, gloo's and TensorPipe's interface checks, nic.speed and the export
lines all judge one proof, the interfaces the mesh showed to carry traffic (proven_interfaces), and
read it the same way.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from netcheck.core.meshrecords import BLACKHOLE, Attempt
from netcheck.core.model import FAIL, PASS, RISKS, WARN, Finding, Impact, Member, hostnames
from netcheck.core.names import IFNAME_MAX_BYTES, is_safe_ifname
from netcheck.core.nictable import Nic, NicTable
from netcheck.rules import gloodial, socketchoice, socketsettings
from netcheck.rules import mesh as mesh_rules
from netcheck.rules.hcachoice import nccl_version
from netcheck.rules.majority import split
from netcheck.rules.pernode import every_node, hosts, name_of, node_names, pairs_note, per_node, per_table
from netcheck.rules.registry import (
    MTU_PATH,
    NCCL,
    NIC_GLOO_DEFAULT,
    NIC_IB,
    NIC_MTU,
    NIC_NCCL_DEFAULT,
    NIC_ROUTE,
    NIC_SPEED,
    NIC_TP_DEFAULT,
    ROUTE_UNSAFE_NAME,
)

MTU_PATHS_SHOWN = 8   # narrow paths a nic.mtu finding lists; the rest counted
# Bytes an encapsulation takes of each frame -> its name: a path that many bytes below its
# interfaces runs through that tunnel (the overlays Kubernetes' CNIs set up).
TUNNEL_HEADERS = {50: "VXLAN over IPv4", 70: "VXLAN over IPv6", 20: "IP-in-IP", 24: "GRE"}
SETTINGS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
# nic.nccl_default's word where no node has a GPU: what it stops, no job here meets.
NO_GPU = Impact(NCCL, RISKS, "no node has an NVIDIA GPU, so a job here runs gloo, which this does not stop; it "
                             "stops NCCL, on GPU nodes with these interfaces and settings")


@dataclass(frozen=True)
class Recommendation:
    cluster: dict[str, str]                # variable -> value, the same on every node
    per_node: dict[str, dict[str, str]]    # hostname -> variable -> value, where names differ
    reason: str                            # why there is none, when there is none


def proven_interfaces(members: tuple[Member, ...], attempts: tuple[Attempt, ...],
                      dials: Callable[[int, int], bool] | None = None) -> dict[int, list[str]]:
    """Per node, its interfaces that every peer which tried could reach (right greeting).

    In the node's getifaddrs order, the order NCCL walks them. A node no peer tried (its
    peers died first) is left out: there is no evidence either way, and the rules that
    need proof skip it rather than fail it. `dials(src, dst)`, for a library that dials only
    some directions (gloo): a failed connect counts against its target only where it does.
    """
    # A node that reaches no peer proves nothing about the peers it tried; nor does a path
    # between two ranks of one host (torchrun's workers): it never leaves the host.
    names = hostnames(members)
    _, isolated = mesh_rules.cut_off_nodes(*mesh_rules.tried_and_broken(attempts), names)
    tried, failed = set(), set()
    for a in mesh_rules.leaving_host(names, attempts):
        if a.src not in isolated:
            tried.add((a.dst, a.ifname))
            # A path that loses full-size frames still leads to the peer: the interface is the
            # right one, its MTU is wrong, and mesh.connect names that.
            if not a.connected and (dials is None or dials(a.src, a.dst)):
                failed.add((a.dst, a.ifname, a.src))
    # Proven: every peer that tried reached it once. Looked at again only where a try failed
    # (two sets a target walked 800,000 attempts at 100,000 ranks for the few that do).
    failed_at = {dst for dst, _, _ in failed}
    reached = {(a.dst, a.ifname, a.src) for a in attempts if a.dst in failed_at and a.connected}
    proven = tried - {(dst, ifname) for dst, ifname, src in failed - reached}
    targets = {dst for dst, _ in tried}
    return {m.rank: [n.name for n in m.facts.nics.nics if (m.rank, n.name) in proven]
            for m in members if m.rank in targets}



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
    return [Finding(check=NIC_ROUTE, severity=FAIL, nodes=tuple(unsafe),
                    summary="interface names no *_SOCKET_IFNAME can safely hold on "
                    f"{node_names(sorted(set(unsafe)), names)}: left out of the exports",
                    evidence=per_node(((r, f"{n!r} is not 1 to {IFNAME_MAX_BYTES} letters, digits and ._-")
                                       for r, bad in unsafe.items() for n in bad), names),
                    fix="rename the interface (ip link set dev OLD name NEW); if the node has no such interface, "
                    "what it sent is not netcheck's: take the node out of the job and find what runs there",
                    kind=ROUTE_UNSAFE_NAME)]


def _settings_findings(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """The *_SOCKET_IFNAME each node was given, against its interfaces: a fail, else a warning
    for shared subnets, else a pass with the routes the mesh used. A line per node: torchrun's
    ranks of one host share its settings and interfaces. Where an NCCL environment plugin is
    named, what it sets is not seen: each finding says so."""
    unseen = per_node(((m.rank, f"NCCL_ENV_PLUGIN={value}: NCCL (2.28.7 on) takes settings from that plugin too, "
                                "which netcheck cannot read") for m in members
                       if (value := m.facts.socket_env.get("NCCL_ENV_PLUGIN"))), hostnames(members))
    return [dataclasses.replace(f, evidence=f.evidence + unseen) for f in _settings_judged(members, attempts)]


def _settings_judged(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    names = hostnames(members)
    problems, files = [], set()
    for m in members:
        for var in SETTINGS:
            value = m.facts.socket_env.get(var)
            problem = socketsettings.validate_setting(var, value, m.facts.nics) if value else None
            if problem:
                source = m.facts.socket_env_from.get(var)
                files |= {source} if source else set()
                problems.append((m.rank, f"{var}={value} from {source or 'the environment'}: {problem.reason}"))
    if problems:
        lines = per_node(problems, names)
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        where = f"; the line in {', '.join(sorted(files))} on the node named is where it is set" if files else ""
        return [Finding(check=NIC_ROUTE, severity=FAIL, nodes=tuple(sorted({r for r, _ in problems})),
                        summary=lines[0] + more, evidence=lines,
                        fix="set the variables to interface names that exist on every node; a "
                        f"cluster run's export lines name ones that work{where}")]
    subnets = per_table(members, shared_subnets)
    shared = [(m.rank, text) for m in members for text in subnets[m.rank]]
    if shared:
        return [Finding(check=NIC_ROUTE, severity=WARN, nodes=tuple(sorted({r for r, _ in shared})),
                        summary="two interfaces on one subnet: the kernel may answer from either",
                        evidence=per_node(shared, names),
                        fix="give each interface its own subnet, or pin the libraries to one of "
                        "them with the exports below (nccl#913)")]
    where, routes = every_node(names, names), _routes(names, attempts)
    summary = (f"the interface settings on {where} name interfaces that exist there"
               if any(var in m.facts.socket_env for m in members for var in SETTINGS) else
               f"no *_SOCKET_IFNAME is set on {'any node' if where == 'every node' else where}: each library "
               "picks its own interface")
    return [Finding(check=NIC_ROUTE, severity=PASS, nodes=tuple(m.rank for m in members),
                    summary=summary + ("; -v lists each node's route to its peers" if routes else ""), evidence=routes)]


def shared_subnets(table: NicTable) -> list[str]:
    """Running interfaces with addresses in one IPv4 subnet, as "eth0, eth1 on 10.0.0.0/24"."""
    by_net = defaultdict(list)
    for nic in table.nics:
        if nic.running and nic.kind != "loopback":
            for a in nic.addresses:
                if a.family == "ipv4":
                    by_net[ipaddress.ip_interface(f"{a.address}/{a.prefixlen}").network].append(nic.name)
    return [f"{', '.join(names)} on {net}" for net, names in by_net.items() if len(set(names)) > 1]


def _routes(names: dict[int, str], attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    """The interfaces the kernel used toward peer nodes, a line per node and route: its peers
    named (past NAMES_SHOWN, counted), and the rank pairs where one peer node was reached
    from several ranks. A line per node pair made 800,000 lines of 100,000 sampling ranks."""
    used: dict[tuple[str, str | None, str], set[tuple[int, int]]] = {}
    for a in mesh_rules.leaving_host(names, attempts):
        if a.connected and a.src in names:
            used.setdefault((names[a.src], a.src_ifname, a.ifname), set()).add((a.src, a.dst))
    in_order = sorted(used.items(), key=lambda route: min(route[1]))   # by the first rank pair of each
    return tuple(_route_line(names, src, si, di, pairs) for (src, si, di), pairs in in_order)


def _route_line(names: dict[int, str], src: str, si: str | None, di: str, pairs: set[tuple[int, int]]) -> str:
    peers = sorted({d for _, d in pairs})
    note = pairs_note(pairs) if hosts(peers, names) == 1 else ""
    return f"{src} {si} -> {node_names(peers, names)} {di}{note}"


def nccl_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None) -> list[Finding]:
    """What NCCL's socket bootstrap would pick on each node, checked against the mesh. NCCL runs
    on GPUs only: where no node has one, a job there runs gloo, and the trouble warns."""
    choose = socketchoice.once_per_table(socketchoice.nccl_choice)
    choices = [(m, choose(m.facts.nics, m.facts.socket_env, _nccl_version(m))) for m in members]
    gpus = any(m.facts.gpus for m in members)
    found = _library_finding(
        NIC_NCCL_DEFAULT, FAIL if gpus else WARN, members, proven,
        [(m, _nccl_trouble(m, c, proven)) for m, c in choices],
        "NCCL's interface choice fails", "set NCCL_SOCKET_IFNAME to an interface that reaches every "
        "peer: a cluster run's export lines name one", "NCCL's interface choice", one_machine(members),
        per_node(((m.rank, c.reason) for m, c in choices), hostnames(members)))
    return found if gpus else [dataclasses.replace(f, impact=NO_GPU) if f.severity == WARN else f for f in found]


def _nccl_version(m: Member) -> tuple[int, ...]:
    """The NCCL a job would load on the node (rdma.libnccl), whose rules the emulation follows."""
    return nccl_version(m.facts.rdma.libnccl.version) if m.facts.rdma else socketchoice.NEWEST


def _nccl_trouble(m: Member, choice: socketchoice.NcclChoice, proven: dict[int, list[str]] | None) -> str | None:
    picked = [p.name for p in choice.interfaces]
    if choice.bootstrap is None:
        return f"NCCL finds no socket interface ({choice.reason})"
    if dead := _unproven(proven, m.rank, picked):
        return f"NCCL would use {', '.join(picked)}; {_unreached(dead)} ({choice.reason})"
    return None


def gloo_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None,
                  attempts: tuple[Attempt, ...] = ()) -> list[Finding]:
    """The address gloo would bind on each node: the hostname's, unless GLOO_SOCKET_IFNAME;
    proven as gloo dials, a peer's failed connect counting only where gloo would dial it
    (gloodial: the larger address dials each pair)."""
    alone, choose = one_machine(members, attempts), socketchoice.once_per_table(socketchoice.gloo_device_addresses)
    choices = {m.rank: choose(m.facts.nics, m.facts.socket_env, m.facts.hostname_addresses) for m in members}
    ends = gloodial.ends_of(choices) if proven is not None and attempts else {}
    if ends:
        proven = proven_interfaces(members, attempts, lambda src, dst: not gloodial.never_dials(ends, src, dst))

    def trouble(m: Member) -> str | None:
        choice = choices[m.rank]
        dead = _unproven(proven, m.rank, [d.interface for d in choice.devices if not (d.error or d.loopback)])
        if any(d.error or (d.loopback and not alone) for d in choice.devices):
            return choice.reason
        return f"{choice.reason}; {_unreached(dead)}" if dead else None

    return _library_finding(
        NIC_GLOO_DEFAULT, FAIL, members, proven, [(m, trouble(m)) for m in members],
        "gloo would use an address peers cannot reach", "set GLOO_SOCKET_IFNAME to an interface that "
        "reaches every peer (a cluster run's export lines name one per node), or fix /etc/hosts so the "
        "hostname resolves to the node's real address, not a loopback one (Debian-style images write "
        "127.0.1.1)", "gloo's address", alone, _undialled(hostnames(members), ends, attempts))


def _undialled(names: dict[int, str], ends: gloodial.Ends, attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    """A line per node pair whose failed connects to a gloo interface are in the direction gloo
    never dials: what a pass of gloo's address stands beside (mesh.connect names them)."""
    pairs = dict.fromkeys((name_of(names, a.src), name_of(names, a.dst)) for a in attempts
                          if not a.connected and a.dst in ends and gloodial.never_dials(ends, a.src, a.dst)
                          and a.ifname in {d.interface for d in ends[a.dst]})
    return tuple(f"{src} -> {dst} connects on no gloo interface, a direction gloo never dials: {dst} dials {src} "
                 f"({gloodial.SOURCE}: the larger address dials)" for src, dst in pairs)


def tp_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None,
                attempts: tuple[Attempt, ...] = ()) -> list[Finding]:
    """The address TensorPipe (torch.distributed.rpc) would use on each node. Only RPC
    uses it, not DDP or FSDP, so a bad one warns."""
    alone, choose = one_machine(members, attempts), socketchoice.once_per_table(socketchoice.tp_interface)

    def trouble(m: Member) -> str | None:
        choice = choose(m.facts.nics, m.facts.socket_env, m.facts.hostname_addresses)
        said = f"{choice.interface or '?'} ({choice.address}): {choice.reason}"
        # TensorPipe's silent fallback is loopback too.
        if choice.loopback and not alone:
            return said
        dead = _unproven(proven, m.rank, [choice.interface])
        return f"{said}; {_unreached(dead)}" if dead else None

    return _library_finding(
        NIC_TP_DEFAULT, WARN, members, proven, [(m, trouble(m)) for m in members],
        "TensorPipe (torch.distributed.rpc) would use an address peers cannot reach", "only RPC-based "
        "jobs care: set TP_SOCKET_IFNAME to an interface that reaches every peer (a cluster run's export "
        "lines name one per node)", "TensorPipe's address", alone)


def one_machine(members: tuple[Member, ...], attempts: tuple[Attempt, ...] = ()) -> bool:
    """Whether the nodes are one machine (netcheck nodes on loopback, as the demo runs without
    root): several members with one hostname and the same addresses, or a joiner (one member)
    whose every connect went to an address of its own. Loopback reaches every peer there, and
    no path leaves the machine for an interface setting to choose."""
    def own(m: Member) -> frozenset[str]:
        return frozenset(a.address for n in m.facts.nics.nics for a in n.addresses)

    if len(members) == 1:
        mine = own(members[0])
        return bool(attempts) and all(a.address in mine for a in attempts)
    # The hostnames first: one look tells a cluster of 100,000 ranks from one machine.
    return len(members) > 1 and len({m.facts.hostname for m in members}) == 1 and len({own(m) for m in members}) == 1


def _unproven(proven: dict[int, list[str]] | None, rank: int, names: Sequence[str | None]) -> list[str | None]:
    """The names the mesh did not prove on this node; none where it has no proof (a joiner)."""
    if proven is None or rank not in proven:
        return []
    return [n for n in names if n not in proven[rank]]


def _unreached(dead: list[str | None]) -> str:
    """Of interfaces some peer that tried could not reach (mesh.connect names which): not that
    they reach no peer, which is false where they reach some."""
    return f"{', '.join(n or '?' for n in dead)} not reached by every peer that tried (mesh.connect names which)"


def _library_finding(check: str, severity: str, members: tuple[Member, ...], proven: dict[int, list[str]] | None,
                     troubles: list[tuple[Member, str | None]], summary: str, fix: str, subject: str,
                     alone: bool, passed_evidence: tuple[str, ...] = ()) -> list[Finding]:
    """One library's choice judged node by node: the nodes with trouble (a line per node), else
    a pass that says whether the mesh tested the choice or only this node's tables were read."""
    names = hostnames(members)
    bad = [(m.rank, text) for m, text in troubles if text]
    if bad:
        return [Finding(check=check, severity=severity, nodes=tuple(r for r, _ in bad),
                        summary=f"{summary} on {node_names((r for r, _ in bad), names)}", evidence=per_node(bad, names),
                        fix=fix)]
    if proven is None or alone:   # a joiner's own tables; nodes on one machine, where no path leaves it
        why = "one machine: no path leaves it" if alone else "not tested against peers here"
        return [Finding(check=check, severity=PASS, nodes=tuple(m.rank for m in members),
                        summary=f"{subject} looks usable on {every_node(names, names)} ({why})",
                        evidence=passed_evidence)]
    # The host passes the nodes some peer's connects were witnessed to, and no other: where the
    # mesh proved nothing of a node (every node reaching none, chaos seed 8306, schedule 9),
    # mesh.connect says why, and a pass would stand on no evidence.
    judged = [m.rank for m in members if m.rank in proven]
    if not judged:
        return []
    unjudged = [m.rank for m in members if m.rank not in proven]
    passed = f"{subject} works on {every_node(judged, names) if not unjudged else node_names(judged, names)}" + (
        f"; not tested on {node_names(unjudged, names)}: no peer's connect there was witnessed (mesh.connect)"
        if unjudged else "")
    return [Finding(check=check, severity=PASS, nodes=tuple(judged), summary=passed, evidence=passed_evidence)]


def mtu_findings(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """The two ends of each working path should agree on MTU (docs/contract.md: nic.mtu), and the path
    between them carry what they send."""
    ends = _mtu_ends(members, attempts)
    narrow = _narrow_paths(members, attempts)
    return ends + narrow if not narrow or ends[0].severity != PASS else narrow


def _narrow_paths(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """Connected paths on which the kernel learnt a smaller MTU than both ends' interfaces
    (path-MTU discovery, during the mesh's full-size frames): an overlay left at its
    underlay's MTU (VXLAN takes 50 bytes of each frame), a tunnel, or a router's narrower
    link. TCP learns it and resends, so the job runs; every full-size frame it sends to a new
    peer is dropped first, and what does no path-MTU discovery (RoCE) does not adapt."""
    names = hostnames(members)
    paths: dict[tuple[str, str, str, str], tuple[int, int]] = {}
    ranks: set[int] = set()
    for a in attempts:
        t = a.transfer
        if not a.connected or t is None or not t.path_mtu or a.src_ifname is None:
            continue
        sent = min((m for m in (t.src_mtu, t.dst_mtu) if m), default=0)
        if t.path_mtu < sent:
            paths[(names[a.src], a.src_ifname, names[a.dst], a.ifname)] = (sent, t.path_mtu)
            ranks |= {a.src, a.dst}
    if not paths:
        return []
    learnt = sorted({p for _, p in paths.values()})
    tunnels = sorted({TUNNEL_HEADERS[s - p] for s, p in paths.values() if s - p in TUNNEL_HEADERS})
    lines = [f"{h} {i} -> {dh} {di}: interfaces {sent}, the path {path}"
             for (h, i, dh, di), (sent, path) in sorted(paths.items())]
    shown = lines[:MTU_PATHS_SHOWN] + ([f"and {len(lines) - MTU_PATHS_SHOWN} more path(s)"]
                                       if len(lines) > MTU_PATHS_SHOWN else [])
    if tunnels:
        where = (f"what each frame lost is the header of {' or '.join(tunnels)}: an overlay or tunnel left at "
                 "its underlay's MTU")
        fix = (f"set the overlay interface's MTU to the path's ({learnt[0]}) on every node: ip link set dev IF mtu "
               f"{learnt[0]}, or the CNI's MTU setting (flannel, Calico), so no frame is sent too large")
    else:
        where = "a router or link between them carries less than the nodes' interfaces"
        fix = (f"raise the MTU of the links between them to the interfaces', or set the interfaces to the path's "
               f"({learnt[0]}): ip link set dev IF mtu {learnt[0]}")
    return [Finding(check=NIC_MTU, severity=WARN, nodes=tuple(sorted(ranks)),
                    summary=f"{len(paths)} path(s) carry smaller frames than their "
                    f"interfaces send ({', '.join(map(str, learnt))} bytes, learnt from the network): {where}; TCP "
                    "resends each full-size frame smaller, RoCE does not adapt", evidence=tuple(shown), fix=fix,
                    kind=MTU_PATH)]


def _mtu_ends(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """The two ends of each working path agree on MTU."""
    nics: dict[int, dict[str | None, Nic]] = per_table(members, lambda table: {n.name: n for n in table.nics})
    names = hostnames(members)
    none: dict[str | None, Nic] = {}   # a rank whose facts never came
    pairs = set()
    for a in attempts:
        if not a.connected:
            continue
        src, dst = nics.get(a.src, none).get(a.src_ifname), nics.get(a.dst, none).get(a.ifname)
        if src and dst and src.mtu != dst.mtu:
            pairs.add(tuple(sorted([(names[a.src], src.name, src.mtu), (names[a.dst], dst.name, dst.mtu)])))
    if not pairs:
        # A path between two nodes, however many of their ranks found it (torchrun).
        holes = len({(names.get(a.src), a.src_ifname, names.get(a.dst), a.ifname)
                     for a in attempts if a.outcome == BLACKHOLE})
        # Agreeing ends prove nothing about a switch port between them: say so where the mesh found one.
        return [Finding(check=NIC_MTU, severity=PASS, nodes=tuple(names),
                        summary="both ends of every path agree on MTU" + (
            f"; {holes} path(s) between them carry less: see mesh.connect" if holes else ""))]
    odd = _odd_nodes(members, {(h, i): mtu for pair in pairs for h, i, mtu in pair})
    return [Finding(check=NIC_MTU, severity=WARN, nodes=odd,
                    summary=f"MTU differs along {len(pairs)} path(s): small messages "
                    "work, large ones can stall", evidence=tuple(f"{a[0]} {a[1]} mtu {a[2]} <-> {b[0]} {b[1]} "
                                                                 f"mtu {b[2]}" for a, b in sorted(pairs)),
                    fix="set the same MTU on every node's interface (ip link set dev IF mtu N) and the "
                    "switch ports between them")]


def _odd_nodes(members: tuple[Member, ...], mtu_by_iface: dict[tuple[str, str], int]) -> tuple[int, ...]:
    """The nodes whose MTU differs from the most common one; every node on a mismatched
    path when no MTU is more common than the others (two nodes: either could be wrong)."""
    odd_hosts = {h for h, _ in split(mtu_by_iface).odd}
    return tuple(m.rank for m in members if m.facts.hostname in odd_hosts)


def speed_findings(members: tuple[Member, ...], proven: dict[int, list[str]]) -> list[Finding]:
    """Link speed of the interfaces each node uses: one slow node paces every collective. A
    node with no proven interface is mesh.connect's to name: its speed says nothing here."""
    names = hostnames(members)
    speeds = {m.rank: used_speed(m, proven[m.rank]) for m in members if proven.get(m.rank)}
    known = {r: s for r, s in speeds.items() if s is not None}
    unproven = per_node(((m.rank, "no path proven, so no link to rate (see mesh.connect)")
                         for m in members if m.rank in proven and not proven[m.rank]), names)

    def lines(ranks: Iterable[int]) -> tuple[str, ...]:
        return per_node(((r, f"{speeds[r]} Mb/s" if speeds[r] else "speed unknown") for r in ranks), names)

    if not speeds:
        return []   # nothing proven: no link to judge, and no pass
    if not known:
        return [Finding(check=NIC_SPEED, severity=PASS, nodes=tuple(speeds),
                        summary="link speeds are not reported (virtual "
                        "interfaces); the bandwidth phase measures them", evidence=lines(sorted(speeds)) + unproven)]
    fastest = max(known.values())
    slower = [r for r, s in sorted(speeds.items()) if s is not None and s < fastest]
    unknown = [r for r, s in sorted(speeds.items()) if s is None]
    if not slower and not unknown:
        return [Finding(check=NIC_SPEED, severity=PASS, nodes=tuple(speeds),
                        summary=f"{_all_at(names, speeds)} {fastest} Mb/s", evidence=lines(sorted(speeds)) + unproven)]
    said = []
    if slower:
        said.append(f"{node_names(slower, names)}: link slower than its peers' {fastest} Mb/s")
    if unknown:
        said.append(f"{node_names(unknown, names)}: link speed not reported, beside peers at {fastest} Mb/s")
    odd = slower + unknown
    return [Finding(check=NIC_SPEED, severity=WARN, nodes=tuple(sorted(odd)), summary="; ".join(said),
                    evidence=lines(sorted(speeds, key=lambda r: (r not in odd, r))) + unproven,
                    fix="check cabling, autonegotiation (ethtool IF) and the switch port")]


def _all_at(names: dict[int, str], speeds: dict[int, int | None]) -> str:
    where = every_node(speeds, names)
    return f"{where}'s link runs at" if where != "every node" else "every node's link runs at"


def used_speed(m: Member, names: Iterable[str | None]) -> int | None:
    """Mb/s of the fastest of these interfaces of a node that reports a speed; None: none does."""
    nics = {n.name: n for n in m.facts.nics.nics}
    speeds = [nics[name].speed_mbps for name in names if name in nics]
    return max((s for s in speeds if s), default=None)


def ib_findings(members: tuple[Member, ...]) -> list[Finding]:
    """HCA ports that are not ACTIVE, and nodes whose active HCA ports differ from the rest."""
    names = hostnames(members)
    down = [(m.rank, f"{p.device} port {p.port}: {p.state}") for m in members
            for p in m.facts.nics.ib_ports if p.state != "ACTIVE"]
    active = {m.rank: sorted((p.link_layer, p.rate) for p in m.facts.nics.ib_ports if p.state == "ACTIVE")
              for m in members}
    findings = []
    if down:
        lines = per_node(down, names)   # a line per port: a host's ranks share its HCAs
        findings.append(Finding(check=NIC_IB, severity=FAIL, nodes=tuple(sorted({r for r, _ in down})),
                                summary=f"{len(lines)} InfiniBand port(s) not active", evidence=lines,
                                fix="check the cable and the subnet manager (ibstat), or exclude the HCA "
                                "with NCCL_IB_HCA"))
    odd = split({r: tuple(v) for r, v in active.items()}).odd
    if odd:
        findings.append(Finding(check=NIC_IB, severity=WARN, nodes=odd,
                                summary="nodes have different sets of active InfiniBand "
                                "ports",
                                evidence=per_node(((r, f"{len(v)} active {v}") for r, v in sorted(active.items())),
                                                  names),
                                fix="uneven HCAs make NCCL fall back or fail: make every node's ports alike"))
    if not findings:
        count = sum({names[r]: len(v) for r, v in active.items()}.values())
        where = every_node(names, names)
        if where == "every node":
            summary = f"{count} active InfiniBand port(s), alike on every node" if count else \
                "no InfiniBand ports on any node"
        else:
            summary = f"{count} active InfiniBand port(s) on {where}" if count else f"no InfiniBand ports on {where}"
        findings.append(Finding(check=NIC_IB, severity=PASS, nodes=tuple(names), summary=summary))
    return findings


def recommendation(members: tuple[Member, ...], proven: dict[int, list[str]]) -> Recommendation:
    """Settings the mesh proved, in each library's syntax, of names that pass the
    interface-name rule; none when some node has no such interface."""
    lists = [[n for n in proven.get(m.rank, []) if is_safe_ifname(n)] for m in members]
    if one_machine(members):
        return Recommendation({}, {}, f"every node runs on {members[0].facts.hostname}: no path leaves the machine, "
                                      "so no interface setting is needed")
    if not members or not all(lists):
        return Recommendation({}, {}, _no_recommendation(members, lists, proven))
    everything = [[n.name for n in m.facts.nics.nics] for m in members]
    cluster: dict[str, str] = {}
    nccl = socketsettings.format_nccl_value(lists, everything)
    if nccl:
        cluster["NCCL_SOCKET_IFNAME"] = nccl
    gloo = socketsettings.format_gloo_values(lists)
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
    unproven = list(dict.fromkeys(m.facts.hostname for m in stuck if not proven.get(m.rank)))
    unsafe = list(dict.fromkeys(m.facts.hostname for m in stuck if proven.get(m.rank)))
    reasons = []
    if unproven:
        reasons.append(f"nothing proven to reach {', '.join(unproven)} from every peer: see mesh.connect")
    if unsafe:
        reasons.append(f"only interface names no export can hold are proven on {', '.join(unsafe)}: see nic.route")
    return "; ".join(reasons)
