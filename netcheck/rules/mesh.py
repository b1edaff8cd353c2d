"""mesh.connect: which node-to-node directions connect, on which interfaces, and why the others
do not: a path that loses full-size frames (a blackhole), a path cause the kernel shows
(a translated address, a wrong prefix, a full connection-tracking table: rules.translation,
rules.prefix and rules.conntrack), or a firewall;
the paths the later phases must not run into (FlaggedPaths). Input: every node's facts and
every mesh attempt. Pure: no I/O, no printing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator
from statistics import median

from netcheck.core.constants import MESH_FLAGGED_TOLD
from netcheck.core.meshrecords import (
    BLACKHOLE,
    CONNECTED,
    FILTERED,
    LOCAL,
    OK,
    UNTRIED,
    Attempt,
    FlaggedPaths,
    FrameTest,
    FullTable,
    PathCauses,
    Transfer,
    Translation,
    passed_frame,
)
from netcheck.core.model import FAIL, PASS, Finding, Member, Visitor
from netcheck.core.names import is_safe_ifname
from netcheck.rules import gloodial, prefix, translation
from netcheck.rules.pernode import hosts, name_of, node_names, per_pair, ranks_note, same_node
from netcheck.rules.registry import MESH_BLACKHOLE, MESH_CONNECT

NO_CAUSES = PathCauses()   # no failed connect explained by a path cause
MESH_FIX = ("open the nodes' firewalls to each other for all TCP ports (NCCL and gloo listen "
            "on ephemeral ports, not only the master port), or pin the libraries to an "
            "interface that works with the exports below")


def mesh_findings(names: dict[int, str], attempts: tuple[Attempt, ...],
                  causes: PathCauses = NO_CAUSES, members: tuple[Member, ...] = (),
                  lost: Collection[int] = ()) -> list[Finding]:
    """Node pairs (per direction) that connect on no interface at all fail the mesh, those a
    cause explains (a translated address, a wrong prefix) named under it, and those a full
    connection-tracking table left unanswered left to host.conntrack, which names the table
    with them as its evidence; paths that connect but lose full-size frames fail it too.
    `members`: the nodes whose facts are known, for the address gloo binds on each: a failure
    only in directions gloo never dials stops NCCL alone. `lost`: the nodes whose results never
    came (the host's rdzv.join lost_in_mesh), each its directions' cause, as a node no peer
    reaches is: its own connects, the other way, are unknown."""
    holes = blackhole_findings(names, attempts)
    # "Every direction connects" is no pass where the connected paths lose large frames.
    return [f for f in _connect_findings(names, attempts, causes, members, set(lost))
            if not (holes and f.severity == PASS)] + holes


def judged_attempts(attempts: tuple[Attempt, ...], causes: PathCauses) -> tuple[Attempt, ...]:
    """The connects that speak of their target's interface: one that failed because of its
    source (a wrong prefix there) says nothing of a healthy target, which keeps its proof. One
    a full connection-tracking table left unanswered says nothing of either end's interface (the
    table dropped it, whichever the interface): left out both ways."""
    if not causes.wrong_prefix and not causes.translated and not causes.full_tables:
        return attempts   # the same attempts: each rule's directions made once
    at_fault = {w.rank for w in causes.wrong_prefix} | {t.rank for t in causes.translated}
    explained = _explained(causes, {(a.src, a.dst) for a in attempts}, _broken_directions(attempts))
    dropped = full_table_explained(causes.full_tables, _broken_directions(attempts))
    return tuple(a for a in attempts if (a.dst in at_fault and (a.src, a.dst) not in dropped)
                 or (a.src, a.dst) not in explained)


def _explained(causes: PathCauses, directions: Iterable[tuple[int, int]],
               broken: dict[tuple[int, int], list[Attempt]]) -> set[tuple[int, int]]:
    """The directions a translation or a wrong prefix explains, of those given, and those of
    the broken ones a full table left unanswered."""
    directions = set(directions)
    return translation.explained(causes.translated, directions) | prefix.explained(causes.wrong_prefix, directions) \
        | full_table_explained(causes.full_tables, broken)


def full_table_explained(full: tuple[FullTable, ...],
                         broken: dict[tuple[int, int], list[Attempt]]) -> set[tuple[int, int]]:
    """The directions that connect on no interface with a full connection-tracking table at an
    end (rules.conntrack) and nothing but silence on any: the table drops their SYNs as a
    firewall's DROP would (a refusal, or a missing route, is another cause's)."""
    at = {f.rank for f in full}
    return {d for d, tries in broken.items() if (d[0] in at or d[1] in at) and unanswered(tries)} if at else set()


def unanswered(tries: Iterable[Attempt]) -> bool:
    """Connects that got no answer at all: one filtered at least, the rest filtered or untried."""
    outcomes = {a.outcome for a in tries}
    return FILTERED in outcomes and outcomes <= {FILTERED, UNTRIED}


def path_causes(members: tuple[Member, ...], attempts: tuple[Attempt, ...],
                translated: tuple[Translation, ...], full: tuple[FullTable, ...] = ()) -> PathCauses:
    """The host's: the translations the rendezvous saw, the wrong prefixes its members'
    interfaces show between the directions that connect on no interface, and the nodes whose
    connection-tracking table was full around the mesh (rules.conntrack.full_tables)."""
    return PathCauses(translated, prefix.wrong_prefixes(members, _broken_directions(attempts)), full)


def _connect_findings(names: dict[int, str], attempts: tuple[Attempt, ...], causes: PathCauses,
                      members: tuple[Member, ...], lost: set[int]) -> list[Finding]:
    broken, directions = _broken_directions(attempts), _directions(attempts)[0]
    ends = gloodial.gloo_ends(members) if broken else {}   # read only where some direction failed
    named = (translation.translated_findings(names, causes.translated, broken, ends, attempts)
             + prefix.wrong_prefix_findings(names, causes.wrong_prefix, broken))
    explained = _explained(causes, broken, broken)
    if explained:   # the rest is judged without them: a node they explain is no node nobody reaches
        attempts = tuple(a for a in attempts if (a.src, a.dst) not in explained)
        broken = _broken_directions(attempts)
        if not broken:
            return named
    if broken:
        tried, cut = tried_and_broken(attempts)
        unreachable, isolated = cut_off_nodes(tried, cut, names)
        blamed = unreachable | isolated | (lost & {r for pair in cut for r in pair})
        ranks = _at_fault(blamed, cut)
        common = set() if blamed else common_end(cut, names)
        cause = common or _causes(blamed, cut, tried)
        summary = f"{_counted(names, set(broken), directions)} connect on no interface"
        if unreachable:
            summary += f"; no peer reaches {node_names(sorted(unreachable), names)}"
        if isolated:
            summary += f"; {node_names(sorted(isolated), names)} reach(es) no peer"
        summary += _whose(names, cut, common, cause)
        evidence = per_pair(((s, d, "; ".join(f"{a.ifname} {a.address}: {a.outcome} ({a.detail})" for a in tries))
                             for (s, d), tries in sorted(broken.items())), names)
        return named + [Finding(check=MESH_CONNECT, severity=FAIL, nodes=tuple(sorted(ranks)), summary=summary,
                                evidence=evidence, fix=MESH_FIX,
                                impact=gloodial.nccl_only(names, ends, broken, attempts),
                                cause_nodes=tuple(sorted(cause)) if cause != ranks else None)]
    rtts = [a.rtt_ms for a in attempts if a.rtt_ms is not None]
    idle = _idle_interfaces(names, attempts)
    summary = f"all {_counted(names, directions, directions, every=True)} connect"
    if frames := [a.transfer.trials[0].frame for a in attempts if a.outcome == OK and a.transfer]:
        summary += f" and echo full-size frames (up to {max(frames)} bytes)"
    if rtts:
        summary += f"; median connect {median(rtts):.2f} ms"
    return [Finding(check=MESH_CONNECT, severity=PASS, nodes=tuple(sorted(names)), summary=summary, evidence=idle)]


def _counted(names: dict[int, str], some: set[tuple[int, int]], tried: set[tuple[int, int]],
             every: bool = False) -> str:
    """`1 of 2 node-to-node directions`, counted between nodes (a path between two ranks of one
    host never leaves it), with the rank pairs where nodes run several ranks (torchrun)."""
    def between(pairs: Iterable[tuple[int, int]]) -> tuple[set[tuple[str, str]], int]:
        """(the node pairs these rank pairs join, how many rank pairs leave their host): one
        pass over up to 800,000 directions, same_node and name_of written out."""
        nodes, leaving = set(), 0
        for s, d in pairs:
            a, b = names.get(s), names.get(d)
            if s != d and a is not None and a == b:   # two ranks of one host
                continue
            leaving += 1
            nodes.add((f"rank {s}" if a is None else a, f"rank {d}" if b is None else b))
        return nodes, leaving

    nodes, pairs = between(some)
    of = nodes if some is tried else between(tried)[0]
    if not of:   # one host's ranks only: no path between nodes was tested
        return f"{len(some)} direction(s) between ranks on {node_names(sorted({r for p in tried for r in p}), names)}"
    counted = f"{len(nodes)} node-to-node directions" if every else \
        f"{len(nodes)} of {len(of)} node-to-node directions"
    return counted + (f" ({pairs} rank pairs)" if pairs > len(nodes) else "")


def _broken_directions(attempts: tuple[Attempt, ...]) -> dict[tuple[int, int], list[Attempt]]:
    """(src, dst) -> its attempts, for the directions that connect on no interface."""
    return _directions(attempts)[1]


def _directions(attempts: tuple[Attempt, ...]) -> tuple[set[tuple[int, int]], dict[tuple[int, int], list[Attempt]]]:
    """(every direction tried, the attempts of those that connected on no interface, by
    direction), made once for the attempts the host's mesh, nic and bandwidth rules each ask
    about: at 100,000 ranks, 800,000 attempts walked three times a rule cost seconds. Kept for
    the last attempts only (held, so their identity is theirs alone); a rule never changes what
    it is given."""
    if _last[0] is not attempts:
        tried = {(a.src, a.dst) for a in attempts}
        # Looked at again only where a try failed: most directions connect on their first.
        failed = {(a.src, a.dst) for a in attempts if not a.connected}
        connected = {(a.src, a.dst) for a in attempts if a.connected and (a.src, a.dst) in failed}
        broken: dict[tuple[int, int], list[Attempt]] = defaultdict(list)
        for a in attempts if failed - connected else ():
            if (a.src, a.dst) in failed and (a.src, a.dst) not in connected:
                broken[(a.src, a.dst)].append(a)
        _last[:] = [attempts, (tried, dict(broken))]
    return _last[1]


_last: list = [None, None]


def leaving_host(names: dict[int, str], attempts: Iterable[Attempt]) -> Iterator[Attempt]:
    """The attempts whose path leaves its host: not same_node's (two ranks of one host), its
    test written out for the 800,000 attempts of 100,000 ranks."""
    for a in attempts:
        src, dst = a.src, a.dst
        if src == dst or src not in names or names[src] != names.get(dst):
            yield a


def _at_fault(blamed: set[int], broken: set[tuple[int, int]]) -> set[int]:
    """A broken direction with a blamed node at one end is that node's fault alone; the rest
    name both ends, as nothing tells which end's firewall (or link) is the cause."""
    return blamed | {r for pair in broken if not blamed & set(pair) for r in pair}


def common_end(broken: set[tuple[int, int]], names: dict[int, str]) -> set[int]:
    """The ranks of the one node at an end of every broken direction, where those join it to
    two other nodes or more (issue 65): each of those peers connects with the rest, so the
    node they share is the cause. None where the directions join one pair of nodes only
    (nothing tells which end drops the other) or no node is common to them all."""
    pairs = {frozenset((name_of(names, s), name_of(names, d))) for s, d in broken if not same_node(names, s, d)}
    common = frozenset.intersection(*pairs) if pairs else frozenset()
    if len(common) != 1 or len({n for p in pairs for n in p} - common) < 2:
        return set()
    return {r for pair in broken for r in pair if name_of(names, r) in common}


def _whose(names: dict[int, str], broken: set[tuple[int, int]], common: set[int], cause: set[int]) -> str:
    """Why the nodes at fault are those: the node common to every broken direction, or, where
    the directions join one pair of nodes both ways, both ends: nothing tells which."""
    if common:
        return f"; {node_names(sorted(common), names)} is at an end of every one, and its peers connect with the rest"
    ends = {name_of(names, r) for r in cause}
    if len(ends) == 2 and all((d, s) in broken for s, d in broken):
        return "; both ends named: one pair of nodes fails both ways, and nothing tells which end drops the other"
    return ""


def _causes(blamed: set[int], broken: set[tuple[int, int]], tried: set[tuple[int, int]]) -> set[int]:
    """The nodes whose fault the broken directions are: a blamed node's own; a direction broken
    one way only (its reverse connects), its target's: the source reaches that machine the other
    way, so what drops the connect is the target's inbound firewall (whose listeners
    nic.nccl_default names unreachable); the rest, both ends'."""
    causes = set(blamed)
    for src, dst in broken:
        if not blamed & {src, dst}:
            causes |= {dst} if (dst, src) in tried and (dst, src) not in broken else {src, dst}
    return causes


def tried_and_broken(attempts: tuple[Attempt, ...]) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(every direction tried, the directions that connected on no interface)."""
    tried, broken = _directions(attempts)
    return tried, set(broken)


def blackhole_findings(names: dict[int, str], attempts: tuple[Attempt, ...]) -> list[Finding]:
    """Paths that connect and carry small messages but lose full-size frames: a path-MTU
    blackhole (docs/contract.md: mesh.connect). Both ends say MTU 9000, a switch port or tunnel between
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
    return [Finding(check=MESH_CONNECT, severity=FAIL, nodes=tuple(sorted(ranks)), summary=summary,
                    evidence=shown, fix=_blackhole_fix(names, holes, blamed or ranks,
                                                                                           bool(blamed), full, passed),
                    kind=MESH_BLACKHOLE)]


# The two halves of every blackhole's fix, the mesh's and a joiner's that lost the host.
_MEASURE_MTU = "find it with ping -M do -s SIZE {peer}: the largest SIZE that answers, plus 28"


def _jumbo_along(where: str, mtu: int | None = None) -> str:
    return (f"enable jumbo frames{f' (MTU {mtu})' if mtu else ''} along the path: {where}, and any tunnel "
            "or router on the way")


def host_blackhole_finding(ranks: tuple[int, ...], frame: int) -> Finding:
    """A joiner whose store client lost the host, and whose host still answers a small request
    but not one full frame: the path between them is a blackhole (its own report names it)."""
    return Finding(check=MESH_CONNECT, severity=FAIL, nodes=(0,) + ranks,
                   summary=f"path-MTU blackhole between this node and the host: the host's store answers a small "
                   f"request but not the same request in one {frame}-byte frame, so every store message "
                   "or collective larger than a frame between them hangs",
                   fix="set the path's MTU on this node's and the host's interfaces "
                   f"({_MEASURE_MTU.format(peer='HOST')}), or {_jumbo_along('the switch ports between them')}",
                   kind=MESH_BLACKHOLE)


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
    return [Finding(check=MESH_CONNECT, severity=FAIL, nodes=tuple(sorted(nodes)),
                    summary=f"path-MTU blackhole {where}: {len(holes)} node(s) reached the store but their facts "
                    f"(larger than a frame) did not, and the host's full-size datagrams ({full} bytes) to them vanish "
                    "while small ones are answered", evidence=evidence,
                    fix=f"set the path's MTU on {who} ({_MEASURE_MTU.format(peer='PEER')}), or "
                    f"{_jumbo_along('the switch ports between them')}", kind=MESH_BLACKHOLE)]


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
    unreachable, isolated = cut_off_nodes(*tried_and_broken(attempts), names)
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
    # Only a node at one end of a broken direction can be cut off: the rest are not looked at.
    ends = {r for pair in broken for r in pair}
    into, out_of = defaultdict(set), defaultdict(set)
    for src, dst in tried:
        if (src in ends or dst in ends) and not same_node(names, src, dst):
            into[dst].add(src)
            out_of[src].add(dst)
    unreachable = {d for d, srcs in into.items()
                   if d in ends and all((s, d) in broken for s in srcs) and hosts(srcs, names) >= 2}
    isolated = {s for s, dsts in out_of.items()
                if s in ends and all((s, d) in broken for d in dsts) and hosts(dsts, names) >= 2}
    return unreachable, isolated


def _names(names: dict[int, str], ranks: set[int]) -> str:
    return node_names(sorted(ranks), names)


def _idle_interfaces(names: dict[int, str], attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    """Interfaces that carried nothing between nodes (a docker0 on every host, a dead ib0), a
    line per node and interface (a rank's sibling on its host proves nothing)."""
    # The interfaces a try failed on, then those of them some try connected to: most connect.
    failed = {(a.dst, a.ifname) for a in attempts if not a.connected}
    failed_at = {dst for dst, _ in failed}
    outcomes = defaultdict(set)
    for a in leaving_host(names, (a for a in attempts if a.dst in failed_at)):
        outcomes[(a.dst, a.ifname)].add(a.outcome)
    lines: dict[tuple[str, str, str], list[int]] = {}
    for (d, ifname), seen in sorted(outcomes.items()):
        if not seen & set(CONNECTED):
            lines.setdefault((name_of(names, d), ifname, ", ".join(sorted(seen))), []).append(d)
    return tuple(f"{host}{ranks_note(ranks)} {ifname} carries nothing between nodes: {seen}"
                 for (host, ifname, seen), ranks in lines.items())

