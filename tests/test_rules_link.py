"""link.health over hand-built link counters: who is named (a node, a path), a flap, errors,
the pass, and what it does to the bandwidth figures' words."""

from __future__ import annotations

from dataclasses import replace

from builders import links_of, moved, node_address
from netcheck.core.bwrecords import PeerSegments, StageLinks
from netcheck.core.constants import LINK_JUDGED_SEGMENTS, LINK_LOSS_MIN
from netcheck.core.model import Finding, report_of
from netcheck.render.tables import pair_matrix
from netcheck.render.text import lossy_pairs
from netcheck.rules import registry
from netcheck.rules.bw import measured_short
from netcheck.rules.link import link_findings, raised
from test_rules_bw import by_check, findings_of, healthy_pairs, result

SENT = 200_000


def name(n: int) -> str:
    return f"node{n}"


def links(lossy: dict[tuple[int, int], float], n: int = 3, sent: int = SENT, stages=None):
    """Every node's counters where each node sent `sent` segments to each peer, and the
    directions in `lossy` resent that share of them."""
    return tuple(links_of(a, [(b, sent, round(sent * lossy.get((a, b), 0.0))) for b in range(n) if b != a],
                          stages=(stages or {}).get(a)) for a in range(n))


def judge(all_links, spoiled=frozenset()):
    return raised(link_findings(result(links=all_links), name), spoiled)


def test_a_node_whose_every_pair_loses_is_named_alone_with_its_rates():
    (f,) = judge(links({(0, 2): 0.02, (1, 2): 0.021}))
    assert (f.check, f.kind, f.severity, f.nodes) == (registry.LINK_HEALTH, registry.LINK_LOSSY_NODE, "warn", (2,))
    assert "4,200 of 200,000 segments resent (2.10%)" in f.summary, f.summary
    assert "node0 -> node2: 4,000 of 200,000 segments resent (2.00%)" in f.evidence


def test_loss_on_one_path_names_that_pair_and_neither_node_alone():
    (f,) = judge(links({(1, 2): 0.02}))
    assert (f.kind, f.nodes) == (registry.LINK_LOSSY_PATH, (1, 2)) and "node1 <-> node2" in f.summary


def test_two_lossy_receivers_are_named_by_the_directions_into_them_and_their_clean_peer_is_not():
    # node1 and node2 both lose what they receive: node0's every pair is lossy too, but what
    # node1 and node2 send it arrives.
    found = judge(links({(0, 1): 0.02, (2, 1): 0.02, (0, 2): 0.02, (1, 2): 0.02}))
    assert sorted((f.kind, f.nodes) for f in found) == [(registry.LINK_LOSSY_NODE, (1,)),
                                                        (registry.LINK_LOSSY_NODE, (2,))], found


def test_every_pair_lossy_both_ways_tells_nobody_apart_and_names_the_pairs():
    every = {(a, b): 0.02 for a in range(3) for b in range(3) if a != b}
    (f,) = judge(links(every))
    assert (f.kind, f.nodes) == (registry.LINK_LOSSY_PATH, (0, 1, 2))


def test_a_node_in_every_lossy_pair_is_named_where_no_clean_pair_was_judged():
    unjudged = {(0, node_address(1)), (1, node_address(0))}   # node0 and node1 barely exchanged
    all_links = tuple(replace(node, peers=tuple(p for p in node.peers if (node.node, p.address) not in unjudged))
                      for node in links({(0, 2): 0.02, (1, 2): 0.02}))
    assert [(f.kind, f.nodes) for f in judge(all_links)] == [(registry.LINK_LOSSY_NODE, (2,))]


def test_two_nodes_cannot_be_told_apart_so_their_path_is_named():
    (f,) = judge(links({(0, 1): 0.05}, n=2))
    assert (f.kind, f.nodes) == (registry.LINK_LOSSY_PATH, (0, 1))


def test_a_clean_run_passes_over_the_pairs_judged_and_a_few_resent_segments_are_no_loss():
    (f,) = judge(links({(0, 1): (LINK_LOSS_MIN - 1) / SENT}))
    assert (f.severity, f.nodes) == ("pass", (0, 1, 2)), f
    assert "over 3 node pair(s) judged, none past 0.1%" in f.summary, f.summary


def test_connections_too_small_to_judge_pass_nothing():
    assert judge(links({}, sent=LINK_JUDGED_SEGMENTS - 1)) == []


def test_a_spoiled_figure_makes_the_loss_a_failure():
    (f,) = judge(links({(0, 2): 0.02, (1, 2): 0.02}), spoiled=frozenset({2}))
    assert f.severity == "fail"


def test_a_flap_and_errors_are_named_with_the_interface_and_drops_only_past_the_loss_bound():
    stages = {1: (StageLinks("all", 3.0, SENT, 0, 0, (moved("eth0", "carrier_changes", 2),
                                                     moved("eth0", "rx_dropped", 3, packets=SENT))),),
              2: (StageLinks("pairs", 1.0, SENT, 0, 0, (moved("mlx5_0/1", "symbol_error", 7),
                                                       moved("eth1", "rx_dropped", 500, packets=SENT))),)}
    found = judge(links({}, stages=stages))
    assert {(f.kind, f.nodes) for f in found} == {(registry.LINK_FLAP, (1,)), (registry.LINK_ERRORS, (2,))}
    flap = next(f for f in found if f.kind == registry.LINK_FLAP)
    assert "node1's eth0 went down and up" in flap.summary
    errors = next(f for f in found if f.kind == registry.LINK_ERRORS)
    assert "mlx5_0/1 symbol_error +7, eth1 rx_dropped +500" in errors.summary, errors.summary


def test_what_a_flapped_node_s_pairs_resent_is_the_flap_s_not_a_lossy_path():
    # Chaos seed 8306, schedule 113: node3's link flapped for a second; its pairs' resends
    # (0.38%) were named a lossy path beside the flap, a second cause that was not there.
    stages = {2: (StageLinks("all", 3.0, SENT, 0, 0, (moved("eth0", "carrier_changes", 2),)),)}
    found = judge(links({(0, 2): 0.004, (2, 0): 0.004}, stages=stages))
    assert [(f.kind, f.nodes) for f in found] == [(registry.LINK_FLAP, (2,))]
    found = judge(links({(0, 1): 0.02, (0, 2): 0.004}, stages=stages))   # loss elsewhere is still named
    assert {(f.kind, f.nodes) for f in found} == {(registry.LINK_FLAP, (2,)), (registry.LINK_LOSSY_NODE, (0,))}


def received(all_links, missed: dict[tuple[int, int], float]):
    """The counters with each node's connections saying what they received from each peer: all
    the peer sent, less the share `missed` of the directions in it."""
    def node_of(peer: PeerSegments) -> int:
        return int(peer.address.rsplit(".", 1)[1]) - 10

    sent = {(node.node, node_of(p)): p.segments for node in all_links for p in node.peers}
    return tuple(replace(node, peers=tuple(
        replace(p, received=round(sent[(node_of(p), node.node)] * (1 - missed.get((node_of(p), node.node), 0))))
        for p in node.peers)) for node in all_links)


def test_resends_a_receiver_had_received_are_no_loss_and_what_it_missed_is():
    # A path that reorders: every direction resent 0.3% more than the D-SACKs told, all of which
    # arrived (the receivers received all that was sent): no loss.
    reordered = links({(a, b): 0.003 for a in range(3) for b in range(3) if a != b})
    (f,) = judge(received(reordered, {}))
    assert f.severity == "pass", f
    # One of them lost 2% on the way as well: the receiver missed that, and only that is lost.
    lossy = links({(a, b): 0.003 if (a, b) != (1, 2) else 0.023 for a in range(3) for b in range(3) if a != b})
    (f,) = judge(received(lossy, {(1, 2): 0.02}))
    assert (f.kind, f.nodes) == (registry.LINK_LOSSY_PATH, (1, 2)), f
    assert "node1 -> node2: 4,000 of 200,000 segments resent (2.00%)" in f.evidence, f.evidence
    # A receiver whose connections were not read leaves the sender's resends as they are.
    (f,) = judge(reordered)
    assert (f.kind, f.nodes) == (registry.LINK_LOSSY_PATH, (0, 1, 2)), f


def test_an_address_two_nodes_hold_names_neither():
    shared = tuple(replace(node, addresses=node.addresses + ("198.19.255.1",),
                           peers=node.peers + (PeerSegments("198.19.255.1", SENT, SENT // 10),)) for node in links({}))
    (f,) = judge(shared)
    assert f.severity == "pass"


def test_the_plateau_names_the_lossy_link_and_a_clean_noisy_one_says_no_loss_was_counted():
    lossy = findings_of(result(pairs=healthy_pairs(), links=links({(0, 2): 0.02, (1, 2): 0.02})))
    (busbw,) = by_check(lossy, registry.BW_BUSBW)
    assert busbw.summary.endswith("measured while the links of node2 lost segments, went down or counted errors "
                                  "(link.health)"), busbw.summary
    assert [f.nodes for f in by_check(lossy, registry.LINK_HEALTH)] == [(2,)]
    noisy = result(pairs=healthy_pairs(), links=links({}))
    noisy = replace(noisy, headlines=tuple(replace(h, noisy=True) for h in noisy.headlines))
    (busbw,) = by_check(findings_of(noisy), registry.BW_BUSBW)
    assert "no busy process was seen on the nodes (host.busy) and no lossy link or link error was seen" in busbw.summary


def test_a_slow_pair_makes_its_lossy_node_fail():
    found = findings_of(result(pairs=healthy_pairs({2}), links=links({(0, 2): 0.02, (1, 2): 0.02})))
    (f,) = by_check(found, registry.LINK_HEALTH)
    assert (f.severity, f.nodes) == ("fail", (2,))


def test_the_pair_table_and_the_page_mark_the_pairs_link_health_names_and_no_other():
    res = replace(result(pairs=healthy_pairs(), links=links({(0, 2): 0.02, (1, 2): 0.02, (0, 1): 0.00001})),
                  hostnames={str(n): name(n) for n in range(3)})
    report = report_of("host", "r", 0, tuple(judge(res.links)), {}, bandwidth=res)
    marked = lossy_pairs(report)
    assert set(marked) == {(0, 2), (1, 2)}, marked   # (0, 1) resent a little: not named, not marked
    text = pair_matrix(res.pairs, name, marked)
    assert text.count("(2.0% resent)") == 4 and text.count("resent") == 4, text   # both cells of two pairs
    clean = report_of("host", "r", 0, tuple(judge(links({}))), {}, bandwidth=result(links=links({})))
    assert lossy_pairs(clean) == {}


def test_one_clean_direction_does_not_clear_a_pair_and_the_receiver_is_named():
    """Chaos seed 1, schedule 1041: node2 loses what it receives; node0 -> node2 is the only lossy
    direction, node2 -> node1 is clean and judged, node1 -> node2 too small to judge alone.
    node2 -> node1 says nothing of node1 -> node2: node0 is not named; what both peers resent
    into node2 names it."""
    three = (links_of(0, [(2, 12_437, 409)]), links_of(1, [(2, 3_700, 5)]), links_of(2, [(1, 12_065, 0)]))
    (f,) = judge(three)
    assert (f.kind, f.nodes) == (registry.LINK_LOSSY_NODE, (2,)), f


def test_a_crawl_too_small_to_judge_a_direction_still_names_the_node_its_peers_lost_into():
    """The same at 5% where the sweep crawled: 4 of 177 and 9 of 171 resent into node2."""
    three = (links_of(0, [(2, 177, 4)]), links_of(1, [(2, 171, 9)]), links_of(2, []))
    (f,) = judge(three)
    assert (f.kind, f.nodes) == (registry.LINK_LOSSY_NODE, (2,)), f


def test_a_straggling_rank_beside_a_lossy_path_leaves_the_loss_a_warning():
    """Campaign 64101 #45: 2% lost between node1 and node2, rank 1 at 1.6x the median's time on
    a machine at load 15, link.health failed, and the job ran at the control's speed. Only a
    failure of a figure (bw.pair's, --expect-busbw's) makes a loss a failure."""
    straggler = Finding(check="bw.straggler", severity="warn", nodes=(1,), summary="slow rank")
    assert measured_short([straggler], range(3)) == {}
    (f,) = judge(links({(1, 2): 0.02}), spoiled=frozenset(measured_short([straggler], range(3))))
    assert f.severity == "warn", f
