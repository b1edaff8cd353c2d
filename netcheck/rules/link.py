"""link.health: the link counters read around the bandwidth phase, judged. A crawl has a
cause the kernel counts: TCP resending what a link lost, a NIC counting frames it could not
receive, a carrier that went away and came back.

Who is named comes from the connections, not from a node's totals: each node's workers say
what they sent to each peer address and resent (less what the peer said it already had), so
a direction that lost segments is known by both its ends. A node is named when every pair it
was judged in lost segments while some pair without it ran clean (a node's own link: its
port, cable or NIC); otherwise the lossy pairs are named, each end of which reaches other
peers cleanly (a path between them: a switch port, an uplink, a route). A node's namespace
totals are evidence beside it, never the judge: they also count what other processes sent.

A link that loses segments or flaps does not pass: WARN, and FAIL where a figure it spoils already
fell short (the node's pair below bw.pair's bound, its ranks past bw.straggler's, or the
plateau below --expect-busbw). Rules never print and never touch the network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from netcheck.core.bwrecords import (
    STAGE_NAMES,
    TIMED_STAGES,
    BandwidthResult,
    Moved,
    NodeLinks,
    judged,
    link_directions,
    lossy,
    rate_text,
    summed,
)
from netcheck.core.constants import LINK_LOSS_MIN, LINK_LOSS_RATE
from netcheck.core.model import FAIL, PASS, WARN, Finding
from netcheck.rules.registry import LINK_ERRORS, LINK_FLAP, LINK_HEALTH, LINK_LOSSY_NODE, LINK_LOSSY_PATH

Pair = tuple[int, int]   # (sender, receiver) in a direction; (lower, higher) in a pair
Directions = dict[Pair, tuple[int, int]]   # (sender, receiver) -> (segments sent, resent): link_directions
Names = Callable[[int], str]   # node -> its name
# The counters that say a link went down: an interface's carrier, an InfiniBand port's link.
FLAP_COUNTERS = ("carrier_changes", "link_downed")
DROP_COUNTERS = ("rx_dropped", "tx_dropped")
SHOWN_PAIRS = 4   # lossy pairs named in one summary (the evidence has them all)
FIX_NODE = ("the node's own link loses segments: check its cable or optic, NIC and switch port (ethtool -S for "
            "CRC and symbol errors, the switch's port counters), reseat or replace the part, or exclude the node")
FIX_PATH = ("the path between these nodes loses segments while each reaches others cleanly: check the switch "
            "ports, uplinks and routes between them (a bad inter-switch link or LAG member)")
FIX_FLAP = ("the link went down and up while bandwidth was measured: check the cable or optic and the switch "
            "port's log (flaps, auto-negotiation), and the NIC's firmware; a flap mid-job stalls every collective")
FIX_ERRORS = ("the link counted errors while bandwidth was measured: check the cable or optic, NIC and switch "
              "port (ethtool -S, the switch's port counters; perfquery on InfiniBand)")


def link_findings(result: BandwidthResult, names: Names) -> list[Finding]:
    """link.health over every node's counters, a fault a warning (raised() makes it a failure
    where it spoiled a figure). names: node -> hostname."""
    if not result.links:
        return []
    directions = link_directions(result.links)
    lossy_pairs, clean_pairs = _pairs(directions)
    # What a node's pairs resent while its link went down and up is the flap's, which is named
    # (carrier_flap): called a lossy path beside it, the symptom would pass for a second cause.
    flapped = _flapped(result.links)
    lossy_pairs = {p for p in lossy_pairs if not set(p) & flapped}
    nodes = _lossy_nodes(lossy_pairs, clean_pairs)
    receivers = [n for n in _lossy_receivers(directions) if n not in flapped]
    if len(receivers) < len(result.links):   # every node a lossy receiver tells nobody apart
        nodes += [n for n in receivers if n not in nodes]
    findings = [_node_finding(n, directions, lossy_pairs, clean_pairs, result.links, names) for n in nodes]
    paths = sorted(p for p in lossy_pairs if not set(p) & set(nodes))
    if paths:
        findings.append(_path_finding(paths, directions, names))
    findings += _moved_findings(result.links, names)
    if findings or not clean_pairs:   # no pair judged: no connection moved enough to tell
        return findings
    return [_pass(result.links, directions, clean_pairs)]


def raised(findings: list[Finding], spoiled: frozenset[int]) -> list[Finding]:
    """link.health's warnings, a failure where they name a node whose figures already fell short
    (spoiled: the nodes bw.pair fails; every node where the plateau missed --expect-busbw)."""
    return [replace(f, severity=FAIL) if f.check == LINK_HEALTH and f.severity == WARN and set(f.nodes) & spoiled
            else f for f in findings]


def _either_way(direction: Pair) -> Pair:
    """The pair a direction belongs to: its two nodes, the lower first."""
    a, b = direction
    return (a, b) if a <= b else (b, a)


def _pairs(directions: Directions) -> tuple[set[Pair], set[Pair]]:
    """The node pairs a direction of which lost segments, and those judged clean both ways. One
    clean direction says nothing of the other: a node that loses what it receives sends cleanly
    (chaos seed 1, schedule 1041: node2's one judged direction, out, made its pair with node1
    look clean, and node0, its other peer, was named in its place)."""
    lossy_pairs = {_either_way(d) for d, (s, r) in directions.items() if lossy(s, r)}
    judged_ways: dict[Pair, int] = {}
    for d, (s, r) in directions.items():
        if judged(s, r):
            judged_ways[_either_way(d)] = judged_ways.get(_either_way(d), 0) + 1
    return lossy_pairs, {p for p, ways in judged_ways.items() if ways == 2} - lossy_pairs


def _lossy_receivers(directions: Directions) -> list[int]:
    """Nodes whose inbound directions together lost segments, from two peers or more, where none
    into them was judged clean: a node losing what it receives, told where no single direction
    moved enough to tell (chaos seed 1, schedule 1041: 5% lost, a sweep that crawled, 4 of 177
    and 9 of 171 resent into node2). One peer's direction alone cannot tell the receiver from
    the sender."""
    inbound = summed((b, s, r) for (_, b), (s, r) in directions.items())
    senders: dict[int, int] = {}
    clean_into: set[int] = set()
    for (_, b), (s, r) in directions.items():
        senders[b] = senders.get(b, 0) + (1 if r else 0)
        if judged(s, r) and not lossy(s, r):
            clean_into.add(b)
    return sorted(n for n, (s, r) in inbound.items() if lossy(s, r) and senders[n] >= 2 and n not in clean_into)


def _lossy_nodes(lossy_pairs: set[Pair], clean_pairs: set[Pair]) -> list[int]:
    """Nodes every judged pair of which lost segments, where that tells them from their peers:
    a pair without them ran clean, or they are in every lossy pair (two or more). Where every
    pair lost segments, nobody is told apart: the pairs are named."""
    named = []
    for n in sorted({n for p in lossy_pairs for n in p}):
        if any(n in p for p in clean_pairs):
            continue
        in_every = len(lossy_pairs) >= 2 and all(n in p for p in lossy_pairs)
        if in_every or any(n not in p for p in clean_pairs):
            named.append(n)
    return named


def _node_finding(n: int, directions: Directions, lossy_pairs: set[Pair], clean_pairs: set[Pair],
                  links: tuple[NodeLinks, ...], names: Names) -> Finding:
    peers = sorted({b if a == n else a for (a, b), (_, r) in directions.items() if n in (a, b) and r})
    into = [(p, directions.get((p, n), (0, 0))) for p in peers]
    out = [(p, directions.get((n, p), (0, 0))) for p in peers]
    worst = max(into + out, key=lambda x: _share(*x[1]))[1]
    clean = sorted(p for p in clean_pairs if n not in p)
    beside = (f"; pairs without it ran clean ({', '.join(f'{names(a)} <-> {names(b)}' for a, b in clean[:SHOWN_PAIRS])}"
              f"{'...' if len(clean) > SHOWN_PAIRS else ''})" if clean else "")
    summary = (f"{names(n)}'s link loses segments: {rate_text(*worst)} on its worst direction, with every peer it "
               f"exchanged with ({', '.join(names(p) for p in peers)}){beside}")
    evidence = tuple(_direction_text(p, n, s, names) for p, s in into if s[0]) \
        + tuple(_direction_text(n, p, s, names) for p, s in out if s[0]) + _stage_lines(n, links, names)
    return Finding(check=LINK_HEALTH, severity=WARN, nodes=(n,), summary=summary, evidence=evidence, fix=FIX_NODE,
                   kind=LINK_LOSSY_NODE)


def _path_finding(paths: list[Pair], directions: Directions, names: Names) -> Finding:
    shown = ", ".join(f"{names(a)} <-> {names(b)}" for a, b in paths[:SHOWN_PAIRS])
    more = f" and {len(paths) - SHOWN_PAIRS} more" if len(paths) > SHOWN_PAIRS else ""
    nodes = sorted({n for p in paths for n in p})
    summary = (f"segments lost between {shown}{more}: each end reaches its other peers cleanly, so the path "
               "between them loses them")
    evidence = tuple(_direction_text(a, b, directions[(a, b)], names)
                     for pair in paths for a, b in (pair, pair[::-1]) if directions.get((a, b), (0, 0))[0])
    return Finding(check=LINK_HEALTH, severity=WARN, nodes=tuple(nodes), summary=summary, evidence=evidence,
                   fix=FIX_PATH, kind=LINK_LOSSY_PATH)


def _direction_text(a: int, b: int, sent: tuple[int, int], names: Names) -> str:
    return f"{names(a)} -> {names(b)}: {rate_text(*sent)}"


def _share(segments: int, retransmitted: int) -> float:
    return retransmitted / segments if segments else 0.0


def _stage_lines(n: int, links: tuple[NodeLinks, ...], names: Names) -> tuple[str, ...]:
    """A node's own totals in each timed stage where it resent something (every connection of
    its namespace: a node that loses what it receives resends little itself)."""
    mine = next((node for node in links if node.node == n), None)
    if mine is None:
        return ()
    return tuple(f"{names(n)} during the {STAGE_NAMES[s.stage]} ({s.seconds:g} s): "
                 f"{rate_text(s.segments, s.retransmitted)}, {s.timeouts} retransmission timeout(s)"
                 for s in mine.stages if s.stage in TIMED_STAGES and s.retransmitted)


def _flapped(links: tuple[NodeLinks, ...]) -> set[int]:
    """The nodes whose link went down and up while bandwidth was measured."""
    return {node.node for node in links for s in node.stages for m in s.moved if m.counter in FLAP_COUNTERS}


def _moved_findings(links: tuple[NodeLinks, ...], names: Names) -> list[Finding]:
    """A carrier change or an error counter that rose on a node's link, per node."""
    findings = []
    for node in links:
        flaps = [(s.stage, m) for s in node.stages for m in s.moved if m.counter in FLAP_COUNTERS]
        errors = [(s.stage, m) for s in node.stages for m in s.moved
                  if m.counter not in FLAP_COUNTERS and _error(m)]
        if flaps:
            where = ", ".join(dict.fromkeys(m.where for _, m in flaps))
            findings.append(Finding(check=LINK_HEALTH, severity=WARN, nodes=(node.node,),
                                    summary=f"{names(node.node)}'s {where} went down and up while bandwidth was "
                                    f"measured ({_moves_text(flaps)})", evidence=_moved_lines(flaps), fix=FIX_FLAP,
                                    kind=LINK_FLAP))
        if errors:
            where = ", ".join(dict.fromkeys(m.where for _, m in errors))
            findings.append(Finding(check=LINK_HEALTH, severity=WARN, nodes=(node.node,),
                                    summary=f"{names(node.node)}'s {where} counted errors while bandwidth was measured "
                                    f"({_moves_text(errors)})", evidence=_moved_lines(errors), fix=FIX_ERRORS,
                                    kind=LINK_ERRORS))
    return findings


def _error(m: Moved) -> bool:
    """Whether a counter's rise is a fault: any error; drops only past the loss bound."""
    if m.counter not in DROP_COUNTERS:
        return True
    return m.by >= LINK_LOSS_MIN and m.by >= LINK_LOSS_RATE * m.packets


def _moves_text(moves: list[tuple[str, Moved]]) -> str:
    totals: dict[tuple[str, str], int] = {}
    for _, m in moves:
        totals[(m.where, m.counter)] = totals.get((m.where, m.counter), 0) + m.by
    return ", ".join(f"{where} {counter} +{by}" for (where, counter), by in totals.items())


def _moved_lines(moves: list[tuple[str, Moved]]) -> tuple[str, ...]:
    return tuple(f"during the {STAGE_NAMES[stage]}: {m.where} {m.counter} +{m.by}"
                 + (f" of {m.packets:,} packets" if m.counter in DROP_COUNTERS else "") for stage, m in moves)


def _pass(links: tuple[NodeLinks, ...], directions: Directions, clean_pairs: set[Pair]) -> Finding:
    sent = sum(s for s, _ in directions.values())
    resent = sum(r for _, r in directions.values())
    nodes = tuple(sorted(node.node for node in links))
    return Finding(check=LINK_HEALTH, severity=PASS, nodes=nodes,
                   summary=f"no lossy link on {len(nodes)} node(s): {rate_text(sent, resent)} over {len(clean_pairs)} "
                   f"node pair(s) judged, none past {LINK_LOSS_RATE:.1%}; no carrier change or error counter rose")
