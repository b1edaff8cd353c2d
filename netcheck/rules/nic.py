"""Rules for the mesh and nic phases, and the interface settings they prove.

Input: every node's facts (its NicTable and socket settings) and every mesh attempt.
Output: findings and the NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME values
that the mesh showed to carry traffic between every pair, of names that pass the interface-name
rule (core.names): a person pastes them into a shell. Pure: no I/O, no printing.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median

from netcheck.core.constants import MESH_FLAGGED_TOLD
from netcheck.core.majority import split
from netcheck.core.meshrecords import (
    BLACKHOLE, CONNECTED, LOCAL, OK, Attempt, FlaggedPaths, FrameTest, PathCauses, Transfer, Translation,
    passed_frame,
)
from netcheck.core.model import FAIL, PASS, WARN, Finding, Member, Visitor, hostnames
from netcheck.core.names import IFNAME_MAX_BYTES, is_safe_ifname
from netcheck.core.nictable import Nic
from netcheck.rules import socketchoice, prefix, translation
from netcheck.rules.hcachoice import nccl_version
from netcheck.rules.pernode import (
    every_node, hosts, name_of, node_names, pairs_note, per_node, per_pair, ranks_note, same_node,
)
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
    # A node that reaches no peer proves nothing about the peers it tried; nor does a path
    # between two ranks of one host (torchrun's workers): it never leaves the host.
    names = hostnames(members)
    _, isolated = cut_off_nodes(*_directions(attempts), names)
    witnessed = [a for a in attempts if a.src not in isolated and not same_node(names, a.src, a.dst)]
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


def mesh_findings(names: dict[int, str], attempts: tuple[Attempt, ...],
                  causes: PathCauses = PathCauses()) -> list[Finding]:
    """Node pairs (per direction) that connect on no interface at all fail the mesh, those a
    cause explains (a translated address, a wrong prefix) named under it; so do paths that
    connect but lose full-size frames."""
    holes = blackhole_findings(names, attempts)
    # "Every direction connects" is no pass where the connected paths lose large frames.
    return [f for f in _connect_findings(names, attempts, causes) if not (holes and f.severity == PASS)] + holes


def judged_attempts(attempts: tuple[Attempt, ...], causes: PathCauses) -> tuple[Attempt, ...]:
    """The connects that speak of their target's interface: one that failed because of its
    source (a wrong prefix there) says nothing of a healthy target, which keeps its proof."""
    at_fault = {w.rank for w in causes.wrong_prefix} | {t.rank for t in causes.translated}
    explained = _explained(causes, {(a.src, a.dst) for a in attempts})
    return tuple(a for a in attempts if a.dst in at_fault or (a.src, a.dst) not in explained)


def _explained(causes: PathCauses, directions: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """The directions a translation or a wrong prefix explains, of those given."""
    directions = set(directions)
    return translation.explained(causes.translated, directions) | prefix.explained(causes.wrong_prefix, directions)


def path_causes(members: tuple[Member, ...], attempts: tuple[Attempt, ...],
                translated: tuple[Translation, ...]) -> PathCauses:
    """The host's: the translations the rendezvous saw, and the wrong prefixes its members'
    interfaces show between the directions that connect on no interface."""
    return PathCauses(translated, prefix.wrong_prefixes(members, _broken_directions(attempts)))


def _connect_findings(names: dict[int, str], attempts: tuple[Attempt, ...], causes: PathCauses) -> list[Finding]:
    broken, directions = _broken_directions(attempts), {(a.src, a.dst) for a in attempts}
    named = (translation.translated_findings(names, causes.translated, broken)
             + prefix.wrong_prefix_findings(names, causes.wrong_prefix, broken))
    explained = _explained(causes, broken)
    if explained:   # the rest is judged without them: a node they explain is no node nobody reaches
        attempts = tuple(a for a in attempts if (a.src, a.dst) not in explained)
        broken = _broken_directions(attempts)
        if not broken:
            return named
    if broken:
        unreachable, isolated = cut_off_nodes(*_directions(attempts), names)
        ranks = _at_fault(unreachable | isolated, set(broken))
        summary = f"{_counted(names, set(broken), directions)} connect on no interface"
        if unreachable:
            summary += f"; no peer reaches {node_names(sorted(unreachable), names)}"
        if isolated:
            summary += f"; {node_names(sorted(isolated), names)} reach(es) no peer"
        evidence = per_pair(((s, d, "; ".join(f"{a.ifname} {a.address}: {a.outcome} ({a.detail})" for a in tries))
                             for (s, d), tries in sorted(broken.items())), names)
        return named + [Finding(MESH_CONNECT, FAIL, tuple(sorted(ranks)), summary, evidence, MESH_FIX)]
    rtts = [a.rtt_ms for a in attempts if a.rtt_ms is not None]
    idle = _idle_interfaces(names, attempts)
    summary = f"all {_counted(names, directions, directions, every=True)} connect"
    if frames := [a.transfer.trials[0].frame for a in attempts if a.outcome == OK and a.transfer]:
        summary += f" and echo full-size frames (up to {max(frames)} bytes)"
    if rtts:
        summary += f"; median connect {median(rtts):.2f} ms"
    return [Finding(MESH_CONNECT, PASS, tuple(sorted(names)), summary, idle)]


def _counted(names: dict[int, str], some: set[tuple[int, int]], tried: set[tuple[int, int]],
             every: bool = False) -> str:
    """`1 of 2 node-to-node directions`, counted between nodes (a path between two ranks of one
    host never leaves it), with the rank pairs where nodes run several ranks (torchrun)."""
    def between(pairs):
        return {(name_of(names, s), name_of(names, d)) for s, d in pairs if not same_node(names, s, d)}

    nodes, of = between(some), between(tried)
    if not of:   # one host's ranks only: no path between nodes was tested
        return f"{len(some)} direction(s) between ranks on {node_names(sorted({r for p in tried for r in p}), names)}"
    counted = f"{len(nodes)} node-to-node directions" if every else \
        f"{len(nodes)} of {len(of)} node-to-node directions"
    pairs = [p for p in some if not same_node(names, *p)]
    return counted + (f" ({len(pairs)} rank pairs)" if len(pairs) > len(nodes) else "")


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
    # A blackhole is its frames' verdict (mesh.transfer_outcome): each one's transfer with it.
    holes = sorted(((a, a.transfer) for a in attempts if a.outcome == BLACKHOLE and a.transfer is not None),
                   key=lambda h: (h[0].src, h[0].dst, h[0].ifname))
    if not holes:
        return []
    lossy = {(a.src, a.dst) for a, _ in holes}
    unreachable, isolated = cut_off_nodes({(a.src, a.dst) for a in attempts if a.connected}, lossy, names)
    blamed = unreachable | isolated
    ranks = _at_fault(blamed, lossy)
    full = max(t.trials[0].frame for _, t in holes)
    passed = min(passed_frame(t) for _, t in holes)
    where = (f"at {_names(names, blamed)}" if blamed else "between " + ", ".join(dict.fromkeys(
        f"{name_of(names, s)} and {name_of(names, d)}" for s, d in sorted({tuple(sorted(p)) for p in lossy}))))
    shown = _hole_lines(names, holes)
    summary = (f"path-MTU blackhole {where}: {len(shown)} path(s) connect and carry small messages, but "
               f"full-size frames ({full} bytes) vanish; " + (f"{passed}-byte frames pass" if passed else
                                                             "smaller frames too"))
    return [Finding(MESH_CONNECT, FAIL, tuple(sorted(ranks)), summary,
                    shown, _blackhole_fix(names, holes, blamed or ranks,
                                                                              bool(blamed), full, passed),
                    MESH_BLACKHOLE)]


# The two halves of every blackhole's fix, the mesh's and a joiner's that lost the host.
_MEASURE_MTU = "find it with ping -M do -s SIZE {peer}: the largest SIZE that answers, plus 28"


def _jumbo_along(where: str, mtu: int | None = None) -> str:
    return (f"enable jumbo frames{f' (MTU {mtu})' if mtu else ''} along the path: {where}, and any tunnel "
            "or router on the way")


def host_blackhole_finding(ranks: tuple[int, ...], frame: int) -> Finding:
    """A joiner whose store client lost the host, and whose host still answers a small request
    but not one full frame: the path between them is a blackhole (its own report names it)."""
    return Finding(MESH_CONNECT, FAIL, (0,) + ranks,
                   f"path-MTU blackhole between this node and the host: the host's store answers a small "
                   f"request but not the same request in one {frame}-byte frame, so every store message "
                   "or collective larger than a frame between them hangs",
                   (), "set the path's MTU on this node's and the host's interfaces "
                   f"({_MEASURE_MTU.format(peer='HOST')}), or {_jumbo_along('the switch ports between them')}",
                   MESH_BLACKHOLE)


def lost_facts_blackhole(lost: tuple[Visitor, ...], tests: tuple[FrameTest, ...], joined: int) -> list[Finding]:
    """Nodes that reached the store and whose facts never did, where the host's full-size
    datagrams to them vanish and small ones are answered: a path-MTU blackhole, named before
    any node is seated (and so in the one-shot form, where such a node has no rank). Two such
    nodes or more and no other node's facts through: the host's own link is the short one,
    named alone; else each of those nodes' (the others' facts came in over the host's link).
    `joined`: the nodes seated, the host included."""
    holes = [t for t in tests if t.outcome == BLACKHOLE]
    if not holes:
        return []
    ranks = {v.address: v.node_rank for v in lost}
    at_host = len(holes) >= 2 and joined <= 1
    lone = len(holes) == 1 and joined <= 1     # the host and one node: either end's link
    full = max(t.frame for t in holes)
    named = node_names(range(len(holes)), {i: t.hostname for i, t in enumerate(holes)})
    where = "at the host" if at_host else f"between the host and {named}"   # a router between may be the short one
    nodes = {0} if at_host or lone else set()
    nodes |= {r for t in holes if not at_host and (r := ranks.get(t.address)) is not None}
    evidence = tuple(f"{t.hostname} {t.address}: the host's {t.frame}-byte datagrams lost, small ones answered"
                     for t in holes)
    who = "the host's interface" if at_host else "the interfaces of the nodes named"
    return [Finding(MESH_CONNECT, FAIL, tuple(sorted(nodes)),
                    f"path-MTU blackhole {where}: {len(holes)} node(s) reached the store but their facts (larger "
                    f"than a frame) did not, and the host's full-size datagrams ({full} bytes) to them vanish "
                    "while small ones are answered", evidence,
                    f"set the path's MTU on {who} ({_MEASURE_MTU.format(peer='PEER')}), or "
                    f"{_jumbo_along('the switch ports between them')}", MESH_BLACKHOLE)]


def _hole_lines(names: dict[int, str], holes: list[tuple[Attempt, Transfer]]) -> tuple[str, ...]:
    """A line per lossy path between two nodes, the ranks that found it alike listed together."""
    groups: dict[tuple, tuple[list[int], list[int]]] = {}
    for a, t in holes:
        path = (name_of(names, a.src), a.src_ifname or "?", t.src_mtu or "?", name_of(names, a.dst), a.ifname,
                a.address, t.dst_mtu or "?", t.trials[0].frame, passed_frame(t))
        srcs, dsts = groups.setdefault(path, ([], []))
        srcs.append(a.src)
        dsts.append(a.dst)
    return tuple(f"{src} ({_ranks(srcs)}) {sif} mtu {smtu} -> {dst} ({_ranks(dsts)}) {dif} {addr} mtu {dmtu}: "
                 f"{frame}-byte frames lost, " + (f"{passed}-byte frames passed" if passed else
                                                  "only the greeting passed")
                 for (src, sif, smtu, dst, dif, addr, dmtu, frame, passed), (srcs, dsts) in groups.items())


def _ranks(ranks: list[int]) -> str:
    distinct = sorted(set(ranks))
    return f"rank {distinct[0]}" if len(distinct) == 1 else "ranks " + ", ".join(map(str, distinct))


def _blackhole_fix(names: dict[int, str], holes: list[tuple[Attempt, Transfer]], fixed: set[int], one_link: bool,
                   full: int, passed: int) -> str:
    """Either end's interface at the path's MTU is enough (TCP then keeps both directions to
    it), so the command goes to the blamed node alone when there is one."""
    ends = sorted({(a.src, _pasteable(a.src_ifname)) for a, _ in holes if a.src in fixed}
                  | {(a.dst, _pasteable(a.ifname)) for a, _ in holes if a.dst in fixed})
    mtu = str(passed) if passed else "MTU"
    commands = "; ".join(dict.fromkeys(f"on {name_of(names, r)}: ip link set dev {ifname} mtu {mtu}"
                                       for r, ifname in ends))
    measure = "" if passed else f", MTU being the path's ({_MEASURE_MTU.format(peer='PEER')})"
    where = f"the switch port of {_names(names, fixed)}" if one_link else "the switch ports between these nodes"
    return f"set the path's MTU on the interfaces ({commands}{measure}), or {_jumbo_along(where, full)}"


def _pasteable(ifname: str | None) -> str:
    """An interface name for a command a person may paste: IF where it is unknown or fails
    the interface-name rule."""
    return ifname if is_safe_ifname(ifname) else "IF"


def flagged_paths(names: dict[int, str], attempts: tuple[Attempt, ...]) -> FlaggedPaths:
    """The paths behind a failing mesh.connect: those that lose full-size frames, then those
    of directions that connect on no interface (an address that is this node's own, like
    docker0's, aside: it never was a path)."""
    # A line per path between two nodes: torchrun's ranks of one host find the same paths.
    holes = list(dict.fromkeys(_path_text(names, a) for a in attempts if a.outcome == BLACKHOLE))
    broken = [_path_text(names, a) for tries in _broken_directions(attempts).values() for a in tries
              if a.outcome != LOCAL]
    unreachable, isolated = cut_off_nodes(*_directions(attempts), names)
    return FlaggedPaths(len(holes), tuple(dict.fromkeys(holes + broken))[:MESH_FLAGGED_TOLD],
                        tuple(sorted(unreachable | isolated)))


def _path_text(names: dict[int, str], a: Attempt) -> str:
    return f"{name_of(names, a.src)} -> {name_of(names, a.dst)} {a.ifname} ({a.address}): {a.outcome}"


def cut_off_nodes(tried: set[tuple[int, int]], broken: set[tuple[int, int]],
                  names: dict[int, str] | None = None) -> tuple[set[int], set[int]]:
    """(nodes no peer reaches, nodes that reach no peer), each judged only where peers on at
    least two other nodes tried: with one, a broken direction says nothing about which end is
    at fault. A path between two ranks of one host (`names`: torchrun's workers) never leaves
    it, so it neither clears nor blames either."""
    names = names or {}
    into, out_of = defaultdict(set), defaultdict(set)
    for src, dst in tried:
        if not same_node(names, src, dst):
            into[dst].add(src)
            out_of[src].add(dst)
    unreachable = {d for d, srcs in into.items()
                   if hosts(srcs, names) >= 2 and all((s, d) in broken for s in srcs)}
    isolated = {s for s, dsts in out_of.items()
                if hosts(dsts, names) >= 2 and all((s, d) in broken for d in dsts)}
    return unreachable, isolated


def _names(names: dict[int, str], ranks: set[int]) -> str:
    return node_names(sorted(ranks), names)


def _idle_interfaces(names: dict[int, str], attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    """Interfaces that carried nothing between nodes (a docker0 on every host, a dead ib0), a
    line per node and interface (a rank's sibling on its host proves nothing)."""
    outcomes = defaultdict(set)
    for a in attempts:
        if not same_node(names, a.src, a.dst):
            outcomes[(a.dst, a.ifname)].add(a.outcome)
    lines: dict[tuple[str, str, str], list[int]] = {}
    for (d, ifname), seen in sorted(outcomes.items()):
        if not seen & set(CONNECTED):
            lines.setdefault((name_of(names, d), ifname, ", ".join(sorted(seen))), []).append(d)
    return tuple(f"{host}{ranks_note(ranks)} {ifname} carries nothing between nodes: {seen}"
                 for (host, ifname, seen), ranks in lines.items())


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
                    per_node(((r, f"{n!r} is not 1 to {IFNAME_MAX_BYTES} letters, digits and ._-")
                              for r, bad in unsafe.items() for n in bad), names),
                    "rename the interface (ip link set dev OLD name NEW); if the node has no such interface, "
                    "what it sent is not netcheck's: take the node out of the job and find what runs there",
                    ROUTE_UNSAFE_NAME)]


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
            problem = socketchoice.validate_setting(var, value, m.facts.nics) if value else None
            if problem:
                source = m.facts.socket_env_from.get(var)
                files |= {source} if source else set()
                problems.append((m.rank, f"{var}={value} from {source or 'the environment'}: {problem.reason}"))
    if problems:
        lines = per_node(problems, names)
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        where = f"; the line in {', '.join(sorted(files))} on the node named is where it is set" if files else ""
        return [Finding(NIC_ROUTE, FAIL, tuple(sorted({r for r, _ in problems})), lines[0] + more, lines,
                        "set the variables to interface names that exist on every node; a "
                        f"cluster run's export lines name ones that work{where}")]
    shared = [(m.rank, text) for m in members for text in shared_subnets(m.facts.nics)]
    if shared:
        return [Finding(NIC_ROUTE, WARN, tuple(sorted({r for r, _ in shared})),
                        "two interfaces on one subnet: the kernel may answer from either",
                        per_node(shared, names),
                        "give each interface its own subnet, or pin the libraries to one of "
                        "them with the exports below (nccl#913)")]
    where, routes = every_node(names, names), _routes(names, attempts)
    summary = (f"the interface settings on {where} name interfaces that exist there"
               if any(var in m.facts.socket_env for m in members for var in SETTINGS) else
               f"no *_SOCKET_IFNAME is set on {'any node' if where == 'every node' else where}: each library "
               "picks its own interface")
    return [Finding(NIC_ROUTE, PASS, tuple(m.rank for m in members),
                    summary + ("; routes to peers below (-v)" if routes else ""), routes)]


def shared_subnets(table) -> list[str]:
    """Running interfaces with addresses in one IPv4 subnet, as "eth0, eth1 on 10.0.0.0/24"."""
    by_net = defaultdict(list)
    for nic in table.nics:
        if nic.running and nic.kind != "loopback":
            for a in nic.addresses:
                if a.family == "ipv4":
                    by_net[ipaddress.ip_interface(f"{a.address}/{a.prefixlen}").network].append(nic.name)
    return [f"{', '.join(names)} on {net}" for net, names in by_net.items() if len(set(names)) > 1]


def _routes(names: dict[int, str], attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    """The interfaces the kernel used toward each peer node, a line per node pair and route."""
    used: dict[tuple[str, str | None, str, str], set[tuple[int, int]]] = {}
    for a in sorted(attempts, key=lambda a: (a.src, a.dst)):
        if a.connected and a.src in names and not same_node(names, a.src, a.dst):
            used.setdefault((names[a.src], a.src_ifname, name_of(names, a.dst), a.ifname), set()).add((a.src, a.dst))
    return tuple(f"{src} {si} -> {dst} {di}{pairs_note(pairs)}" for (src, si, dst, di), pairs in used.items())


def nccl_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None) -> list[Finding]:
    """What NCCL's socket bootstrap would pick on each node, checked against the mesh."""
    choices = [(m, socketchoice.nccl_choice(m.facts.nics, m.facts.socket_env, _nccl_version(m))) for m in members]
    return _library_finding(
        NIC_NCCL_DEFAULT, FAIL, members, proven, [(m, _nccl_trouble(m, c, proven)) for m, c in choices],
        "NCCL's interface choice fails", "set NCCL_SOCKET_IFNAME to an interface that reaches every "
        "peer: a cluster run's export lines name one", "NCCL's interface choice",
        per_node(((m.rank, c.reason) for m, c in choices), hostnames(members)))


def _nccl_version(m: Member) -> tuple[int, ...]:
    """The NCCL a job would load on the node (rdma.libnccl), whose rules the emulation follows."""
    return nccl_version(m.facts.rdma.libnccl.version) if m.facts.rdma else socketchoice.NEWEST


def _nccl_trouble(m: Member, choice: socketchoice.NcclChoice, proven) -> str | None:
    picked = [p.name for p in choice.interfaces]
    if choice.bootstrap is None:
        return f"NCCL finds no socket interface ({choice.reason})"
    if dead := _unproven(proven, m.rank, picked):
        return f"NCCL would use {', '.join(picked)}; {_unreached(dead)} ({choice.reason})"
    return None


def gloo_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None,
                  attempts: tuple[Attempt, ...] = ()) -> list[Finding]:
    """The address gloo would bind on each node: the hostname's, unless GLOO_SOCKET_IFNAME."""
    alone = one_machine(members, attempts)

    def trouble(m: Member) -> str | None:
        choice = socketchoice.gloo_device_addresses(m.facts.nics, m.facts.socket_env, list(m.facts.hostname_addresses))
        dead = _unproven(proven, m.rank, [d.interface for d in choice.devices if not (d.error or d.loopback)])
        if any(d.error or (d.loopback and not alone) for d in choice.devices):
            return choice.reason
        return f"{choice.reason}; {_unreached(dead)}" if dead else None

    return _library_finding(
        NIC_GLOO_DEFAULT, FAIL, members, proven, [(m, trouble(m)) for m in members],
        "gloo would use an address peers cannot reach", "set GLOO_SOCKET_IFNAME to an interface that "
        "reaches every peer (a cluster run's export lines name one per node), or fix /etc/hosts so the "
        "hostname resolves to the node's real address, not a loopback one (Debian-style images write "
        "127.0.1.1)", "gloo's address")


def tp_findings(members: tuple[Member, ...], proven: dict[int, list[str]] | None,
                attempts: tuple[Attempt, ...] = ()) -> list[Finding]:
    """The address TensorPipe (torch.distributed.rpc) would use on each node. Only RPC
    uses it, not DDP or FSDP, so a bad one warns."""
    alone = one_machine(members, attempts)

    def trouble(m: Member) -> str | None:
        choice = socketchoice.tp_interface(m.facts.nics, m.facts.socket_env, list(m.facts.hostname_addresses))
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
        "lines name one per node)", "TensorPipe's address")


def one_machine(members: tuple[Member, ...], attempts: tuple[Attempt, ...] = ()) -> bool:
    """Whether the nodes are one machine (netcheck nodes on loopback, as the demo runs without
    root): several members with one hostname and the same addresses, or a joiner (one member)
    whose every connect went to an address of its own. Loopback reaches every peer there, and
    no path leaves the machine for an interface setting to choose."""
    own = [frozenset(a.address for n in m.facts.nics.nics for a in n.addresses) for m in members]
    if len(members) == 1:
        return bool(attempts) and all(a.address in own[0] for a in attempts)
    return len(members) > 1 and len({(m.facts.hostname, addresses) for m, addresses in zip(members, own)}) == 1


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
                     passed_evidence: tuple[str, ...] = ()) -> list[Finding]:
    """One library's choice judged node by node: the nodes with trouble (a line per node), else
    a pass that says whether the mesh tested the choice or only this node's tables were read."""
    names = hostnames(members)
    bad = [(m.rank, text) for m, text in troubles if text]
    if bad:
        return [Finding(check, severity, tuple(r for r, _ in bad),
                        f"{summary} on {node_names((r for r, _ in bad), names)}", per_node(bad, names), fix)]
    where = every_node(names, names)
    tested = proven is not None and all(m.rank in proven for m in members)
    passed = f"{subject} works on {where}" if tested else \
        f"{subject} looks usable on {where} (not tested against peers here)"
    return [Finding(check, PASS, tuple(m.rank for m in members), passed, passed_evidence)]


def mtu_findings(members: tuple[Member, ...], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """The two ends of each working path should agree on MTU (FAILURES row 13)."""
    nic: dict[tuple[int, str | None], Nic] = {(m.rank, n.name): n for m in members for n in m.facts.nics.nics}
    names = hostnames(members)
    pairs = set()
    for a in attempts:
        src, dst = nic.get((a.src, a.src_ifname)), nic.get((a.dst, a.ifname))
        if a.connected and src and dst and src.mtu != dst.mtu:
            pairs.add(tuple(sorted([(names[a.src], src.name, src.mtu), (names[a.dst], dst.name, dst.mtu)])))
    if not pairs:
        # A path between two nodes, however many of their ranks found it (torchrun).
        holes = len({(names.get(a.src), a.src_ifname, names.get(a.dst), a.ifname)
                     for a in attempts if a.outcome == BLACKHOLE})
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
    """Link speed of the interfaces each node uses: one slow node paces every collective. A
    node with no proven interface is mesh.connect's to name: its speed says nothing here."""
    names = hostnames(members)
    speeds = {m.rank: used_speed(m, proven[m.rank]) for m in members if proven.get(m.rank)}
    known = {r: s for r, s in speeds.items() if s is not None}
    unproven = per_node(((m.rank, "no path proven, so no link to rate (see mesh.connect)")
                         for m in members if m.rank in proven and not proven[m.rank]), names)

    def lines(ranks) -> tuple[str, ...]:
        return per_node(((r, f"{speeds[r]} Mb/s" if speeds[r] else "speed unknown") for r in ranks), names)

    if not speeds:
        return []   # nothing proven: no link to judge, and no pass
    if not known:
        return [Finding(NIC_SPEED, PASS, tuple(speeds), "link speeds are not reported (virtual "
                        "interfaces); the bandwidth phase measures them", lines(sorted(speeds)) + unproven)]
    fastest = max(known.values())
    slower = [r for r, s in sorted(speeds.items()) if s is not None and s < fastest]
    unknown = [r for r, s in sorted(speeds.items()) if s is None]
    if not slower and not unknown:
        return [Finding(NIC_SPEED, PASS, tuple(speeds), f"{_all_at(names, speeds)} {fastest} Mb/s",
                        lines(sorted(speeds)) + unproven)]
    said = []
    if slower:
        said.append(f"{node_names(slower, names)}: link slower than its peers' {fastest} Mb/s")
    if unknown:
        said.append(f"{node_names(unknown, names)}: link speed not reported, beside peers at {fastest} Mb/s")
    odd = slower + unknown
    return [Finding(NIC_SPEED, WARN, tuple(sorted(odd)), "; ".join(said),
                    lines(sorted(speeds, key=lambda r: (r not in odd, r))) + unproven,
                    "check cabling, autonegotiation (ethtool IF) and the switch port")]


def _all_at(names: dict[int, str], speeds: dict[int, int | None]) -> str:
    where = every_node(speeds, names)
    return f"{where}'s link runs at" if where != "every node" else "every node's link runs at"


def used_speed(m: Member, names) -> int | None:
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
        findings.append(Finding(NIC_IB, FAIL, tuple(sorted({r for r, _ in down})),
                                f"{len(lines)} InfiniBand port(s) not active", lines,
                                "check the cable and the subnet manager (ibstat), or exclude the HCA "
                                "with NCCL_IB_HCA"))
    odd = split({r: tuple(v) for r, v in active.items()}).odd
    if odd:
        findings.append(Finding(NIC_IB, WARN, odd, "nodes have different sets of active InfiniBand "
                                "ports", per_node(((r, f"{len(v)} active {v}") for r, v in sorted(active.items())),
                                                  names),
                                "uneven HCAs make NCCL fall back or fail: make every node's ports alike"))
    if not findings:
        count = sum({names[r]: len(v) for r, v in active.items()}.values())
        where = every_node(names, names)
        if where == "every node":
            summary = f"{count} active InfiniBand port(s), alike on every node" if count else \
                "no InfiniBand ports on any node"
        else:
            summary = f"{count} active InfiniBand port(s) on {where}" if count else f"no InfiniBand ports on {where}"
        findings.append(Finding(NIC_IB, PASS, tuple(names), summary))
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
    nccl = socketchoice.format_nccl_value(lists, everything)
    if nccl:
        cluster["NCCL_SOCKET_IFNAME"] = nccl
    gloo = socketchoice.format_gloo_values(lists)
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
