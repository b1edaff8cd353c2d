"""The rendezvous rules (rules/rdzv.py: rdzv.join, rdzv.fqdn, host.clock) over a hand-built three-node
cluster (test_rules_reach and test_rules_run use it too): exact checks, severities, ranks and wording."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import builders
from netcheck.core.constants import MAX_STRANGERS, NAMES_SHOWN
from netcheck.core.model import (
    ClockSample,
    Finding,
    Gathering,
    Impact,
    Launch,
    Member,
    NodeFacts,
    NodeResults,
    Probe,
    Reach,
    Resolution,
    Route,
    Visitor,
)
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules.registry import JOIN_FOREIGN, JOIN_MALFORMED

# --- a three-node cluster ------------------------------------------------------------------------


def node_facts(hostname: str, address: str, reach: Reach | None = None) -> NodeFacts:
    """A node of a three-node cluster launched by flags, its FQDN in example."""
    nics = (builders.nic("lo", "127.0.0.1", "::1/128", kind="loopback", speed=1000),
            builders.nic("eno1", address, speed=1000))
    return builders.facts(hostname, launched=Launch("flags", None, 3, 3, 1), nics=nics, default="eno1",
                          addresses=(address,), fqdn=f"{hostname}.example", reach=reach, run_id="netcheck",
                          version="0.1.0")


ADDRESS = {0: "10.0.0.4", 1: "10.0.0.5", 2: "10.0.0.6"}


def resolving(rank: int, addresses: tuple[str, ...] | None = None, error: str | None = None) -> Resolution:
    """What a node saw when it looked up node `rank`'s FQDN; by default the right answer."""
    if addresses is None and error is None:
        addresses = (ADDRESS[rank],)
    return Resolution(rank, f"node{rank}.example", addresses or (), error)


IN_STEP = ClockSample(0.0, 0.0)   # a clock in step with the host's


def member(rank: int, clock: ClockSample | None = IN_STEP, reach: Reach | None = None,
           lookups: dict[int, Resolution] | None = None, results: bool = True) -> Member:
    """Node `rank`, which by default resolved every other node's FQDN correctly."""
    lookups = lookups or {}
    resolutions = tuple(lookups.get(r, resolving(r)) for r in ADDRESS if r != rank)
    return Member(rank, node_facts(f"node{rank}", ADDRESS[rank], reach),
                  NodeResults(clock, resolutions) if results else None)


def reach(outcome: str, probes: tuple[Probe, ...], addresses=("10.0.0.4",), seconds=3.0, attempts=1,
          host="node0", error=None) -> Reach:
    return Reach(host, 29500, outcome, addresses, error, probes, attempts, seconds)


# --- reach_findings --------------------------------------------------------------------------------


def unanswered(state: str, gateway=None, shared=()) -> Probe:
    route = Route("eth0", "10.0.0.7", gateway, state, shared)
    return Probe("10.0.0.4", "ipv4", "filtered", "no answer in 3 s", 3.0, route)


# --- listen --------------------------------------------------------------------------------------


# --- join_findings ---------------------------------------------------------------------------------


def gathering(members=(), expected=3, missing=(), hostnames=(), duplicates=None, foreign=(), malformed=(),
              waited=1.25, unseated=()) -> Gathering:
    return Gathering(tuple(members), expected, tuple(missing), tuple(hostnames), duplicates or {},
                     tuple(unseated), tuple(foreign), tuple(malformed), waited)


def test_join_all_pass():
    g = gathering((member(0), member(1), member(2)))
    assert rdzv_rules.join_findings(g) == [Finding(check="rdzv.join", severity="pass", nodes=(0, 1, 2),
                                                   summary="3 node(s) joined in 1.2 s, all 3 expected")]


def test_join_pass_says_what_it_covers():
    counted = gathering((member(0), member(1), member(2)))
    arrival = gathering((member(0), member(1)), expected=None)
    assert rdzv_rules.join_findings(counted)[0].summary == "3 node(s) joined in 1.2 s, all 3 expected"
    (passed,) = rdzv_rules.join_findings(arrival)
    assert passed.severity == "pass" and "--nnodes N" in passed.summary and "cannot be named" in passed.summary


def called(m: Member, hostname: str, fqdn: str | None = None) -> Member:
    return dataclasses.replace(m, facts=dataclasses.replace(m.facts, hostname=hostname, fqdn=fqdn or hostname))


def test_two_nodes_with_one_hostname_are_named_with_their_addresses():
    g = gathering((member(0), called(member(1), "node1"), called(member(2), "node1")))
    (same,) = [f for f in rdzv_rules.join_findings(g) if f.severity == "fail"]
    assert (same.check, same.kind, same.nodes) == ("rdzv.join", "duplicate_hostname", (1, 2))
    assert same.evidence == (f"rank 1: hostname node1, address {ADDRESS[1]}",
                             f"rank 2: hostname node1, address {ADDRESS[2]}")
    assert "hostnamectl" in same.fix


def test_one_machines_processes_share_its_hostname_rightly():
    one = member(1)
    g = gathering((member(0), one, dataclasses.replace(one, rank=2)))
    assert not [f for f in rdzv_rules.join_findings(g) if f.kind == "duplicate_hostname"]


def test_one_fqdn_under_two_hostnames_is_named_too():
    g = gathering((member(0), called(member(1), "a", "gpu.example"), called(member(2), "b", "gpu.example")))
    (same,) = [f for f in rdzv_rules.join_findings(g) if f.severity == "fail"]
    assert same.kind == "duplicate_hostname" and same.nodes == (1, 2) and "FQDN" in same.summary


def test_a_node_whose_visitor_record_came_but_not_its_facts_is_named_by_it_with_the_path_to_look_at():
    """A short switch port under jumbo frames lets a node's few-byte visitor record through and
    never its facts: it reached the store, so 'hostname unknown: it never reached the store'
    would be false; its own report names the blackhole."""
    g = dataclasses.replace(gathering((member(0), member(1)), missing=(2,), waited=20.1),
                            facts_lost=(Visitor("netcheck", "node2", 2, "198.18.0.12"),))
    (lost,) = rdzv_rules.join_findings(g)
    assert (lost.check, lost.severity, lost.kind, lost.nodes) == ("rdzv.join", "fail", "facts_lost", (2,))
    assert "node rank 2 (node2)" in lost.summary and "never reached" not in lost.summary
    assert "mesh.connect blackhole" in lost.fix and "from 198.18.0.12" in lost.evidence[0]


def test_one_shot_nodes_whose_facts_never_came_are_named_by_hostname_and_the_host_is_not_alone():
    """Without a node count a node that came without its facts has no rank: it is named by its
    hostname, in one finding for all of them, and a host that heard only from such nodes did
    not wait alone (chaos seeds 21499/124 and 16547/14)."""
    lost = (Visitor("netcheck", "node2", None, "198.18.0.12"), Visitor("netcheck", "node3", None, None))
    g = dataclasses.replace(gathering((member(0),), expected=None, waited=9.0), facts_lost=lost)
    (found,) = rdzv_rules.join_findings(g)
    assert (found.severity, found.kind, found.nodes) == ("fail", "facts_lost", ())
    assert "node2, node3 reached the store" in found.summary and len(found.evidence) == 2
    assert rdzv_rules.unranked_at_fault(lost, []) == ("node2", "node3")


def test_a_torchrun_nodes_workers_whose_facts_never_came_are_one_line_with_their_ranks():
    """Per node where a person thinks per node: 2,048 x 8 ranks, 400 nodes' facts lost, were 3,131
    evidence lines, eight a node (issue 51)."""
    lost = tuple(Visitor("netcheck", f"sim{r // 8:04d}", r, f"198.18.16.{r // 8}") for r in range(8, 24))
    g = dataclasses.replace(gathering((member(0),), expected=24, waited=9.0), facts_lost=lost)
    (found,) = [f for f in rdzv_rules.join_findings(g) if f.kind == "facts_lost"]
    assert found.nodes == tuple(range(8, 24))
    assert found.evidence == tuple(f"sim{n:04d} (node ranks {8 * n}-{8 * n + 7}) from 198.18.16.{n}: 8 visitor records "
                                   "(under a hundred bytes each) came; their facts (larger than a frame) did not"
                                   for n in (1, 2))


def test_join_missing_node_named_by_the_launchers_hostname():
    g = gathering((member(0), member(1)), missing=(2,), hostnames=("gpu01", "gpu02", "gpu03"), waited=30.2)
    assert rdzv_rules.join_findings(g) == [Finding(
        check="rdzv.join", severity="fail", nodes=(2,),
        summary="node rank 2 (gpu03) never joined in 30 s; 2 of 3 nodes joined",
        evidence=("joined: rank 0 node0", "joined: rank 1 node1"),
        fix="start netcheck on that node; if it was started, read its own report "
        "(rdzv.reach / rdzv.resolve say why it could not get here)", kind="missing")]


def test_nodes_that_never_joined_are_one_finding_naming_them_all():
    g = gathering((member(0),), missing=(1, 2), waited=10.0)
    assert [(f.severity, f.nodes, f.summary, f.kind) for f in rdzv_rules.join_findings(g)] == [
        ("fail", (1, 2), "node ranks 1-2 (hostnames unknown: they never reached the store) never joined in 10 s; "
                         "1 of 3 nodes joined", "missing")]
    (listed,) = rdzv_rules.join_findings(gathering((member(0),), expected=5, missing=(1, 3, 4),
                                                   hostnames=("gpu01", "gpu02", "gpu03", "gpu04"), waited=10.0))
    assert listed.summary == ("node ranks 1, 3-4 (gpu02, gpu04; 1 hostname(s) unknown) never joined in 10 s; "
                              "1 of 5 nodes joined")
    assert listed.evidence[:3] == ("never joined: node rank 1 gpu02", "never joined: node rank 3 gpu04",
                                   "never joined: node rank 4")
    assert listed.fix.startswith("start netcheck on those nodes")


def test_a_torchrun_node_that_never_started_is_one_finding_for_its_workers():
    """A node of 8 workers missing was 8 findings, each listing every rank that joined; 100
    nodes missing would have been 800."""
    workers = tuple(worker(r, f"node{r // 8}", ADDRESS[0]) for r in range(8))
    missing = tuple(range(8, 8 * 101))
    (found,) = rdzv_rules.join_findings(gathering(workers, expected=8 * 101, missing=missing, waited=30.0))
    assert found.nodes == missing and found.kind == "missing"
    assert found.summary == ("ranks 8-807 (hostnames unknown: they never reached the store) never joined in 30 s; "
                             "8 of 808 ranks joined")
    assert found.evidence == ("never joined: ranks 8-807", "joined: ranks 0-7 node0")   # a line a node, not 808


def test_join_without_a_count_passes_with_one_joiner():
    g = gathering((member(0), member(1)), expected=None)
    assert [(f.severity, f.nodes) for f in rdzv_rules.join_findings(g)] == [("pass", (0, 1))]


def test_join_without_a_count_fails_when_the_host_heard_from_nobody():
    found = rdzv_rules.join_findings(gathering((member(0),), expected=None, waited=6.0))
    # The host is not at fault for the others' absence: no node is named, so none is excluded.
    assert [(f.check, f.severity, f.nodes, f.summary, f.kind) for f in found] == [
        ("rdzv.join", "fail", (), "no other node joined in the 6 s the host waited", "alone")]


def test_join_duplicate_claims_name_every_claimant():
    g = gathering((member(0), member(1), member(2)), duplicates={"1": ("node1", "node1-clone")})
    assert rdzv_rules.join_findings(g) == [Finding(
        check="rdzv.join", severity="fail", nodes=(1,),
        summary="node rank 1 was claimed by 2 nodes: node1, node1-clone; only the first "
        "was seated", evidence=("node1 claims node rank 1", "node1-clone claims node rank 1"),
        fix="give every node a distinct --node-rank (torchrun: --node_rank; Slurm: one task per node)",
        kind="duplicate_rank")]


def test_join_foreign_node_is_a_warning_and_not_mixed_in():
    g = gathering((member(0), member(1), member(2)), foreign=(Visitor("job-8", "other7", 0),))
    assert rdzv_rules.join_findings(g) == [Finding(
        check="rdzv.join", severity="warn", nodes=(),
        summary="other7 joined this store with run id 'job-8'; not mixed into this run",
        fix="two runs share this port: give each job its own port, or the same --rdzv-id if the node "
        "belongs here", kind="foreign_run")]


def test_a_missing_node_that_came_with_another_run_id_is_named_for_torchruns_c10d_rendezvous_alone():
    """Issue 64: a node given another --rdzv-id was `missing`, and a job launched with the
    master's address (which ignores the id) ran. The id keeps apart c10d's rendezvous only."""
    g = gathering((member(0), member(2)), missing=(1,), foreign=(Visitor("job-8", "node1", 1),))
    (finding,) = [f for f in rdzv_rules.join_findings(g) if f.severity != "pass"]
    assert (finding.kind, finding.nodes, finding.severity) == ("missing", (1,), "fail")
    assert finding.summary == "node rank 1 (node1) came with run id 'job-8', another run's: it was not tested " \
                              "with these nodes"
    assert (finding.impact.on, finding.impact.effect, finding.impact.form) == (("launch",), "stops", "c10d")
    # By the hostname the launcher listed for the rank, where the node claimed none (Slurm).
    g = gathering((member(0), member(2)), missing=(1,), hostnames=("node0", "node1", "node2"),
                  foreign=(Visitor("job-8", "node1", None),))
    assert [f.impact.form for f in rdzv_rules.join_findings(g) if f.severity != "pass"] == ["c10d"]


def test_join_malformed_entry_is_a_warning_with_the_reason_as_evidence():
    g = gathering((member(0), member(1), member(2)), malformed=("arrival 3: $.hostname: expected str, got int",))
    assert rdzv_rules.join_findings(g) == [Finding(
        check="rdzv.join", severity="warn", nodes=(), summary="a store entry was rejected as malformed",
        evidence=("arrival 3: $.hostname: expected str, got int",),
        fix="something other than netcheck writes to this port", kind="malformed")]


def test_join_lost_nodes_are_named_together():
    g = gathering((member(0), member(1, results=False), member(2, results=False)))
    assert rdzv_rules.join_findings(g) == [Finding(
        check="rdzv.join", severity="fail", nodes=(1, 2),
        summary="node1, node2 stopped answering during the rendezvous phase",
        fix="that node's netcheck died or hung, or the network path to it broke: look at that node and its link",
        kind="lost_in_rendezvous")]


def test_a_seat_taken_by_a_copy_of_a_nodes_facts_blames_no_node():
    """Another client's copy of node2's facts, read first, took rank 2's seat and never
    reported back (issue 39): the run is denied, but not by node2, which was turned away."""
    g = dataclasses.replace(gathering((member(0), member(1, results=False), member(2, results=False))),
                            copied=(2,))
    lost, copy = rdzv_rules.join_findings(g)
    assert (lost.kind, lost.nodes) == ("lost_in_rendezvous", (1,))
    assert (copy.severity, copy.kind, copy.nodes) == ("fail", "interference", ())
    assert copy.summary.startswith("node rank 2 (node2) was seated on a copy of its facts")


def test_join_everything_at_once_in_a_stable_order():
    g = gathering((member(0), member(1, results=False)), missing=(2,), duplicates={"1": ("node1", "x")},
                  foreign=(Visitor("other", "y", None),), malformed=("bad",))
    found = rdzv_rules.join_findings(g)
    assert [(f.severity, f.nodes, f.kind) for f in found] == [
        ("fail", (2,), "missing"), ("fail", (1,), "duplicate_rank"), ("warn", (), "foreign_run"),
        ("warn", (), "malformed"), ("fail", (1,), "lost_in_rendezvous")]
    assert not any(f.severity == "pass" for f in found)


# --- fqdn_findings ---------------------------------------------------------------------------------


def test_fqdn_all_good():
    assert rdzv_rules.fqdn_findings((member(0), member(1), member(2))) == [
        Finding(check="rdzv.fqdn", severity="pass", nodes=(0, 1, 2),
                summary="every node resolves every other node's FQDN")]


def test_fqdn_unresolvable():
    members = (member(0), member(1, lookups={0: resolving(0, error="Name or service not known")}), member(2))
    assert rdzv_rules.fqdn_findings(members) == [Finding(
        check="rdzv.fqdn", severity="fail", nodes=(0, 1),
        summary="1 FQDN lookup(s) between nodes fail or point elsewhere",
        evidence=("node1 -> node0.example (rank 0): does not resolve (Name or service not known)",),
        fix="torchrun gives its workers rank 0's FQDN as MASTER_ADDR: add every node's FQDN to DNS or "
        "/etc/hosts on every node, with its real address",
        impact=Impact(("launch",), "stops", "torchrun's c10d rendezvous hands every worker rank 0's FQDN as "
                      "MASTER_ADDR, rank 0 being the node whose FQDN sorts first, node0.example, which a lookup here "
                      "gets wrong: its workers fail in init_process_group; a job given the master's address (a "
                      "static rendezvous, MASTER_ADDR an address) never looks these up", "c10d"),
        cause_nodes=(1,))]   # node2 resolves node0 right: node1's lookup is at fault, not node0


def test_a_name_no_peer_resolves_is_the_fault_of_the_node_whose_name_it_is():
    """Every peer fails on node0's name, and two look it up: the name is what the failed lookups
    have in common (its DNS record missing, a container's own hostname), so node0 is at fault and
    the lookers are not (issue 65). With one looker, nothing tells: both ends stay at fault."""
    unknown = resolving(0, error="Name or service not known")
    (finding,) = rdzv_rules.fqdn_findings((member(0), member(1, lookups={0: unknown}), member(2, lookups={0: unknown})))
    assert (finding.nodes, finding.cause_nodes) == ((0, 1, 2), (0,))
    (finding,) = [f for f in rdzv_rules.fqdn_findings((member(0), member(1, lookups={0: unknown})))
                  if f.severity == "fail"]
    assert finding.cause_nodes is None, finding


def test_rank_0s_unknown_name_fails_apart_from_a_stale_line_for_another_peer_which_warns():
    """Campaign 63204 #65: every peer fails on node0's name (c10d's rank 0: a container's
    hostname), and node2 alone has a stale line for node1. The failure is node0's name, its own
    fault; node2's stale line only risks the launch, and is not held at fault for the failure."""
    unknown = resolving(0, error="Name or service not known")
    stale = resolving(1, error="Name or service not known")
    members = (member(0), member(1, lookups={0: unknown}), member(2, lookups={0: unknown, 1: stale}))
    fail, warn = rdzv_rules.fqdn_findings(members)
    assert (fail.severity, fail.nodes, fail.cause_nodes) == ("fail", (0, 1, 2), (0,))
    assert (warn.severity, warn.nodes, warn.impact.effect) == ("warn", (1, 2), "risks")


def test_a_stale_name_of_a_node_c10d_does_not_make_rank_0_risks_torchruns_rendezvous():
    """Issue 64: a stale peer name failed rdzv.fqdn, and a job given the master's address ran.
    torchrun's c10d hands out rank 0's FQDN alone, rank 0 the node whose FQDN sorts first: a
    wrong answer for another node's name stops that job only where that node comes first."""
    members = (member(0), member(1, lookups={2: resolving(2, error="Name or service not known")}), member(2))
    (finding,) = rdzv_rules.fqdn_findings(members)
    assert (finding.severity, finding.nodes, finding.cause_nodes) == ("warn", (1, 2), (1,))
    assert (finding.impact.on, finding.impact.effect) == (("launch",), "risks")
    assert "rank 0 being the node whose FQDN sorts first, node0.example, which resolves right where looked up: " \
           "it stops that job only where a node named here sorts first" in finding.impact.why


def test_c10d_makes_rank_0_the_node_whose_fqdn_sorts_first_not_netchecks_host():
    host, peer = member(0), member(1)
    host = dataclasses.replace(host, facts=dataclasses.replace(host.facts, fqdn="gpu-b.example"))
    peer = dataclasses.replace(peer, facts=dataclasses.replace(peer.facts, fqdn="gpu-a.example"))
    assert rdzv_rules.c10d_rank0((host, peer)) == "gpu-a.example"


def test_fqdn_lookup_netcheck_stopped_waiting_for_is_not_said_to_not_resolve():
    """A lookup cut short at netcheck's bound (a slow or silent resolver) is no answer about the name."""
    members = (member(0), member(1, lookups={0: resolving(0, error="no answer to the lookup in 2 s")}), member(2))
    (finding,) = rdzv_rules.fqdn_findings(members)
    assert finding.evidence == ("node1 -> node0.example (rank 0): not answered in time (no answer to the lookup in "
                                "2 s), not an answer that the name does not exist",)


def test_a_joiner_past_the_join_behind_a_slow_resolver_names_it():
    slow = rdzv_rules.gone_before_sign_in(31.0, 26.5, 40.0, (2,), "", lookup_seconds=4.0)
    assert "its lookups take 4.0 s each (a slow resolver: rdzv.resolve resolver_slow)" in slow.summary
    assert slow.fix.startswith("repair this node's resolver")
    prompt = rdzv_rules.gone_before_sign_in(31.0, 20.0, 40.0, (2,), "")
    assert "resolver" not in prompt.summary and prompt.kind == slow.kind == "late"


def test_fqdn_resolving_to_127_0_1_1_is_wrong():
    # Debian's /etc/hosts maps the hostname to 127.0.1.1: the peer then talks to itself.
    members = (member(0, lookups={2: resolving(2, ("127.0.1.1",))}), member(1), member(2))
    found = rdzv_rules.fqdn_findings(members)
    assert [(f.check, f.severity, f.nodes) for f in found] == [("rdzv.fqdn", "warn", (0, 2))]
    assert found[0].evidence == (
        "node0 -> node2.example (rank 2): resolves to 127.0.1.1, none of them that node's own address",)


def test_fqdn_resolving_to_a_loopback_address_the_node_has_is_still_wrong():
    # Every node has 127.0.0.1 on lo; it is "its own" but no peer reaches it there.
    members = (member(0), member(1), member(2, lookups={0: resolving(0, ("127.0.0.1", "::1"))}))
    found = rdzv_rules.fqdn_findings(members)
    assert found[0].nodes == (0, 2)
    assert found[0].evidence == (
        "node2 -> node0.example (rank 0): resolves to 127.0.0.1, ::1, none of them that node's own address",)


def test_fqdn_resolving_to_another_nodes_address_is_wrong():
    members = (member(0), member(1, lookups={2: resolving(2, ("10.0.0.4",))}),
               member(2, lookups={1: resolving(1, ("10.0.0.99",))}))
    found = rdzv_rules.fqdn_findings(members)
    assert found[0].summary == "2 FQDN lookup(s) between nodes fail or point elsewhere"
    assert found[0].nodes == (1, 2)
    assert found[0].evidence == (
        "node1 -> node2.example (rank 2): resolves to 10.0.0.4, none of them that node's own address",
        "node2 -> node1.example (rank 1): resolves to 10.0.0.99, none of them that node's own address")


def test_fqdn_one_right_address_among_several_is_enough():
    members = (member(0, lookups={1: resolving(1, ("127.0.1.1", "10.0.0.5"))}), member(1), member(2))
    assert rdzv_rules.fqdn_findings(members)[0].severity == "pass"


def test_fqdn_nodes_on_one_machine_may_resolve_to_loopback():
    # Two netcheck processes on one machine (a loopback run) have identical interface tables.
    facts = node_facts("box", "10.0.0.4")
    members = (Member(0, facts, NodeResults(None, (Resolution(1, "box.example", ("127.0.1.1",), None),))),
               Member(1, facts, NodeResults(None, (Resolution(0, "box.example", ("127.0.1.1",), None),))))
    assert rdzv_rules.fqdn_findings(members) == [
        Finding(check="rdzv.fqdn", severity="pass", nodes=(0, 1),
                summary="every node resolves every other node's FQDN")]


def test_fqdn_ignores_nodes_that_never_reported_back():
    members = (member(0), member(1, results=False), member(2))
    assert rdzv_rules.fqdn_findings(members)[0].severity == "pass"


# --- clock_findings --------------------------------------------------------------------------------


@pytest.mark.parametrize("offset, error, skewed", [
    (0.0, 0.0, False),
    (1.999, 0.0, False),
    (2.0, 0.0, False),         # the threshold itself is still fine
    (2.001, 0.0, True),
    (-2.5, 0.0, True),         # behind the host counts the same as ahead
    (2.5, 0.5, False),         # within the error margin: 2.5 - 0.5 = 2.0, not more
    (2.5, 0.4, True),          # 2.1 for certain
    (-3.0, 1.5, False),
])
def test_clock_threshold_allows_the_error_margin(offset, error, skewed):
    found = rdzv_rules.clock_findings((member(0), member(1, clock=ClockSample(offset, error))))
    assert len(found) == 1
    assert found[0].check == "host.clock"
    assert found[0].severity == ("warn" if skewed else "pass")
    assert found[0].nodes == ((1,) if skewed else (0, 1))


def test_clock_warning_wording():
    members = (member(0), member(1, clock=ClockSample(-3.25, 0.0125)), member(2, clock=ClockSample(5.0, 0.001)))
    assert rdzv_rules.clock_findings(members) == [Finding(
        check="host.clock", severity="warn", nodes=(1, 2),
        summary="node1, node2: clock off the host's by more than 2 s",
        evidence=("node1: -3.250 s (+/- 0.013 s)", "node2: +5.000 s (+/- 0.001 s)"),
        fix="run chrony or ntpd against one time source on every node")]


def test_clock_pass_wording_and_nodes_without_a_sample():
    members = (member(0), member(1, clock=None), member(2, results=False))
    assert rdzv_rules.clock_findings(members) == [
        Finding(check="host.clock", severity="pass", nodes=(0, 1, 2),
                summary="clocks agree with the host's within 2 s")]


# --- resolve_consistency -----------------------------------------------------------------------------


def reached(*addresses: str) -> Reach:
    return reach("open", (), addresses=addresses)


def renamed(m: Member, rank: int) -> Member:
    """Another node like m, as rank `rank` with hostname node{rank}."""
    return dataclasses.replace(m, rank=rank, facts=dataclasses.replace(m.facts, hostname=f"node{rank}"))


# --- the small ones ----------------------------------------------------------------------------------


def test_seat_finding():
    assert rdzv_rules.seat_finding(2, 3, "node2") == Finding(check="rdzv.join", severity="pass", nodes=(2,),
                                                             summary="joined as node rank 2 of 3")
    assert rdzv_rules.seat_finding(2, 3, "node2", 3).summary == "joined as node rank 2 of 3"
    # --nnodes 3 with two started: the joiner's count is the host's, not "of 2".
    assert rdzv_rules.seat_finding(1, 2, "node1", 3).summary == (
        "joined as node rank 1; 2 of 3 expected nodes joined (the host's report names the missing)")
    unseated = rdzv_rules.seat_finding(None, 3, "node9")
    assert (unseated.severity, unseated.nodes) == ("fail", ())
    assert unseated.summary == ("node9 was not seated: its rank was taken, or the cluster was full or had "
                                "already started")


def test_a_flood_of_foreign_visitors_and_rejected_entries_is_counted_not_listed():
    """300 foreign records and 300 rejected entries: the first MAX_STRANGERS of each named,
    the rest in one finding each, so the report stays the size of a report."""
    foreign = tuple(Visitor(f"run{i % 3}", f"intruder{i}", None) for i in range(300))
    malformed = tuple(f"arrival {i}: not JSON" for i in range(300))
    findings = rdzv_rules.join_findings(gathering([member(0)], expected=None, foreign=foreign, malformed=malformed))
    kinds = Counter(f.kind for f in findings)
    assert kinds[JOIN_FOREIGN] == kinds[JOIN_MALFORMED] == MAX_STRANGERS + 1
    (more,) = [f for f in findings if f.summary.startswith(f"{300 - MAX_STRANGERS} more visitors of 3 other")]
    assert more.evidence == ("run id 'run0'", "run id 'run1'", "run id 'run2'")
    (rejected,) = [f for f in findings if f.summary.startswith(f"{300 - MAX_STRANGERS} more store entries")]
    assert len(rejected.evidence) == MAX_STRANGERS


# --- per node under torchrun: every worker process is a member ----------------------------------


def worker(rank: int, host: str, address: str, **kw) -> Member:
    """A torchrun worker: seated by its RANK, on a host it shares (facts and all) with its siblings."""
    m = member(next(r for r, a in ADDRESS.items() if a == address), **kw)
    launch = dataclasses.replace(m.facts.launch, source="torchrun")
    return Member(rank, dataclasses.replace(m.facts, hostname=host, fqdn=f"{host}.example", launch=launch), m.results)


def test_a_summary_names_a_few_nodes_and_counts_the_rest_its_nodes_list_has_all():
    """1,024 torchrun nodes lost at once made one summary line of 11,000 characters."""
    names = {r: f"sim{r // 8:04d}" for r in range(8 * 1024)}
    (lost,) = rdzv_rules.lost_findings("rendezvous", names, list(names))
    shown = ", ".join(f"sim{n:04d}" for n in range(NAMES_SHOWN))
    assert lost.summary == f"{shown} and {1024 - NAMES_SHOWN} more nodes stopped answering during the rendezvous phase"
    assert lost.nodes == tuple(names)


def test_under_torchrun_a_failed_lookup_is_a_line_per_host():
    wrong = {1: resolving(1, ("127.0.1.1",))}
    first = member(0, lookups=wrong)
    members = (first, dataclasses.replace(first, rank=3), member(1), member(2))
    (found,) = rdzv_rules.fqdn_findings(members)
    assert found.evidence == ("node0 (ranks 0, 3) -> node1.example (rank 1): resolves to 127.0.1.1, none of them "
                              "that node's own address",)
    assert found.summary.startswith("1 FQDN lookup(s)")


def test_under_torchrun_a_skewed_clock_is_said_once_per_host():
    skewed = [worker(r, "node1", ADDRESS[1], clock=ClockSample(5.0 + r / 100, 0.01 * r)) for r in (2, 3)]
    members = (member(0), *skewed)
    (clock,) = rdzv_rules.clock_findings(members)
    assert clock.nodes == (2, 3) and clock.summary.startswith("node1: clock off")
    assert clock.evidence == ("node1: +5.020 s (+/- 0.020 s)",)


def test_a_host_lost_while_this_nodes_own_link_is_down_is_this_nodes_fault():
    """A joiner's cable pulled: the host goes quiet for it, and its own link, down, is the cause
    (issue 65), named in the summary and the fix."""
    (lost,) = rdzv_rules.lost_findings("mesh", {0: "the host"}, [0], own_down=("eth0",), mine=(2,))
    assert (lost.nodes, lost.cause_nodes, lost.kind) == ((0,), (2,), "lost_in_mesh"), lost
    assert lost.summary == "the host stopped answering during the mesh phase: this node's own link (eth0) is down"
    assert "this node's cable" in lost.fix
    (up,) = rdzv_rules.lost_findings("mesh", {0: "the host"}, [0], mine=(2,))
    assert up.cause_nodes is None, "its link up: nothing says it is its own"


def test_a_lost_host_is_named_with_what_the_store_client_saw_once():
    (lost,) = rdzv_rules.lost_findings("mesh", {0: "the host"}, [0], "Connection reset by peer")
    assert lost.summary == "the host stopped answering during the mesh phase"
    assert lost.evidence == ("this node's store client: Connection reset by peer",)
    (silent,) = rdzv_rules.lost_findings("mesh", {0: "the host"}, [0])
    assert silent.evidence == ()
