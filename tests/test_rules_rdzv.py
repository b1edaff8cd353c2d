"""The rendezvous and run rules (rules/rdzv.py, rules/reach.py, rules/run.py) over hand-built facts: exact
checks, severities, ranks and wording."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from netcheck.core.constants import MAX_STRANGERS, NAMES_SHOWN
from netcheck.rules import reach as reach_rules, rdzv as rdzv_rules, run as run_rules
from netcheck.rules.reach import REACH_FIXES
from netcheck.rules.registry import JOIN_FOREIGN, JOIN_MALFORMED
from netcheck.core.model import (
    ClockSample, Finding, Gathering, Holder, Launch, Member, NodeFacts, NodeResults, Probe,
    Reach, Resolution, Route, Visitor,
)
from netcheck.core.nictable import Address, Nic, NicTable

# --- a three-node cluster ------------------------------------------------------------------------


def nic(name: str, *addrs: str, kind: str = "ethernet") -> Nic:
    parsed = tuple(Address("ipv6" if ":" in a else "ipv4", a, 128 if ":" in a else 24) for a in addrs)
    return Nic(name, 0, parsed, True, True, 1500, 1000, kind, None)


def node_facts(hostname: str, address: str, reach: Reach | None = None) -> NodeFacts:
    nics = NicTable((nic("lo", "127.0.0.1", "::1", kind="loopback"), nic("eno1", address)), (), "eno1")
    return NodeFacts(run_id="netcheck", hostname=hostname, fqdn=f"{hostname}.example",
                     hostname_addresses=(address,), launch=Launch("flags", None, 3, 3, 1), shm_bytes=None, gpus=0,
                     nics=nics, socket_env={}, reach=reach, version="0.1.0")


ADDRESS = {0: "10.0.0.4", 1: "10.0.0.5", 2: "10.0.0.6"}


def resolving(rank: int, addresses: tuple[str, ...] | None = None, error: str | None = None) -> Resolution:
    """What a node saw when it looked up node `rank`'s FQDN; by default the right answer."""
    if addresses is None and error is None:
        addresses = (ADDRESS[rank],)
    return Resolution(rank, f"node{rank}.example", addresses or (), error)


def member(rank: int, clock: ClockSample | None = ClockSample(0.0, 0.0), reach: Reach | None = None,
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


def test_reach_open():
    found = reach_rules.reach_findings(reach("open", (Probe("10.0.0.4", "ipv4", "open", "connected", 0.0004),),
                                          seconds=0.0011), (1,))
    assert found == [
        Finding("rdzv.resolve", "pass", (1,), "node0 resolves to 10.0.0.4"),
        Finding("rdzv.reach", "pass", (1,), "node0:29500 is open from this node",
                ("10.0.0.4 (ipv4): open, connected, 0.00 s", "1 attempt(s) over 0.0 s")),
    ]


def test_reach_refused_counts_the_seconds_it_kept_trying():
    probe = Probe("10.0.0.4", "ipv4", "refused", "connection refused: nothing listens there, or a REJECT rule",
                  0.0003)
    found = reach_rules.reach_findings(reach("refused", (probe,), seconds=29.6, attempts=58), (2,))
    assert found[0] == Finding("rdzv.resolve", "pass", (2,), "node0 resolves to 10.0.0.4")
    assert found[1] == Finding(
        "rdzv.reach", "fail", (2,), "node0:29500 refused the connection, 58 attempts over 29.6 s: nothing "
        "listens there",
        ("10.0.0.4 (ipv4): refused, connection refused: nothing listens there, or a REJECT rule, 0.00 s",
         "58 attempt(s) over 29.6 s"),
        REACH_FIXES["refused"])
    assert "start netcheck on the host node first" in found[1].fix


def test_reach_filtered_says_how_long_it_waited():
    probe = Probe("10.0.0.4", "ipv4", "filtered", "no answer in 3 s", 3.0012)
    found = reach_rules.reach_findings(reach("filtered", (probe,), seconds=3.01), (1,))
    assert found[1] == Finding(
        "rdzv.reach", "fail", (1,), "node0:29500 is filtered from this node: no answer in 3.0 s",
        ("10.0.0.4 (ipv4): filtered, no answer in 3 s, 3.00 s", "1 attempt(s) over 3.0 s"),
        REACH_FIXES["filtered"])
    assert "firewall" in found[1].fix


def test_a_probe_summary_says_the_seconds_its_evidence_says():
    """Not "refused for 3 s" beside "6 attempt(s) over 2.5 s": one number, in one precision."""
    probe = Probe("10.0.0.4", "ipv4", "refused", "connection refused", 0.0003)
    (_, refused) = reach_rules.reach_findings(reach("refused", (probe,), seconds=2.5, attempts=6), (1,))
    assert refused.summary == "node0:29500 refused the connection, 6 attempts over 2.5 s: nothing listens there"
    assert refused.evidence[-1] == "6 attempt(s) over 2.5 s"
    (_, once) = reach_rules.reach_findings(reach("refused", (probe,), seconds=0.004), (1,))
    assert once.summary == "node0:29500 refused the connection: nothing listens there"
    slow = Probe("10.0.0.4", "ipv4", "filtered", "no answer in 3 s", 2.6)
    (_, filtered) = reach_rules.reach_findings(reach("filtered", (slow,), seconds=2.6), (1,))
    assert filtered.summary.endswith("no answer in 2.6 s") and filtered.evidence[-1].endswith("over 2.6 s")


def unanswered(state: str, gateway=None, shared=()) -> Probe:
    route = Route("eth0", "10.0.0.7", gateway, state, shared)
    return Probe("10.0.0.4", "ipv4", "filtered", "no answer in 3 s", 3.0, route)


@pytest.mark.parametrize("named_in, fix", [("", "check the address"), ("DNS", "DNS record"),
                                           ("/etc/hosts line 4: 10.0.0.4 node0", "/etc/hosts on this node is stale")])
def test_an_address_where_no_machine_answered_arp_is_not_a_firewall(named_in, fix):
    found = dataclasses.replace(reach("filtered", (unanswered("FAILED"),)), named_in=named_in)
    (_, nobody) = reach_rules.reach_findings(found, (1,))
    assert (nobody.kind, nobody.nodes) == ("no_machine", (1,))
    assert "no machine answered at 10.0.0.4 on eth0" in nobody.summary and fix in nobody.fix
    assert "firewall" not in nobody.fix
    assert "10.0.0.4: route on the interface's subnet, dev eth0, source 10.0.0.7; neighbour FAILED" in nobody.evidence


def test_an_unanswered_gateway_is_named_as_the_gateway():
    (_, nobody) = reach_rules.reach_findings(reach("unreachable", (unanswered("INCOMPLETE", "10.0.0.1"),)), (1,))
    assert nobody.kind == "no_machine" and "no machine answered at 10.0.0.1 (the gateway)" in nobody.summary


def test_a_second_interface_on_the_subnet_names_the_route_it_takes():
    (_, taken) = reach_rules.reach_findings(reach("filtered", (unanswered("INCOMPLETE", shared=("eth1",)),)), (1,))
    assert taken.kind == "shared_subnet" and "the kernel's route takes eth0 (source 10.0.0.7)" in taken.summary
    assert "metric" in taken.fix


def test_a_neighbour_that_answered_keeps_the_firewall():
    (_, dropped) = reach_rules.reach_findings(reach("filtered", (unanswered("REACHABLE"),)), (1,))
    assert not dropped.kind and dropped.fix == REACH_FIXES["filtered"]


def test_reach_unreachable():
    probe = Probe("10.9.0.4", "ipv4", "unreachable", "No route to host", 0.0001)
    found = reach_rules.reach_findings(reach("unreachable", (probe,), addresses=("10.9.0.4",), seconds=0.002), (1,))
    assert found == [
        Finding("rdzv.resolve", "pass", (1,), "node0 resolves to 10.9.0.4"),
        Finding("rdzv.reach", "fail", (1,), "node0:29500 is unreachable from this node: no route",
                ("10.9.0.4 (ipv4): unreachable, No route to host, 0.00 s", "1 attempt(s) over 0.0 s"),
                REACH_FIXES["unreachable"]),
    ]


def test_reach_dns_is_a_resolve_failure_and_no_reach_finding():
    found = reach_rules.reach_findings(
        reach("dns", (), addresses=(), seconds=0.02, attempts=0, host="nosuch.example",
              error="Name or service not known"), (3,))
    assert found == [Finding(
        "rdzv.resolve", "fail", (3,), "nosuch.example does not resolve on this node",
        ("getaddrinfo('nosuch.example'): Name or service not known",),
        "use an address, or add the name to DNS or /etc/hosts on this node")]


def test_reach_lists_every_address_and_probe_of_both_families():
    probes = (Probe("fd00::4", "ipv6", "refused", "connection refused", 0.001),
              Probe("10.0.0.4", "ipv4", "open", "connected", 0.002))
    found = reach_rules.reach_findings(reach("open", probes, addresses=("fd00::4", "10.0.0.4"), seconds=0.5), ())
    assert found[0].summary == "node0 resolves to fd00::4, 10.0.0.4"
    assert found[1].evidence == ("fd00::4 (ipv6): refused, connection refused, 0.00 s",
                                 "10.0.0.4 (ipv4): open, connected, 0.00 s",
                                 "1 attempt(s) over 0.5 s")
    assert found[1].nodes == ()   # `netcheck probe`: no rank


# --- listen --------------------------------------------------------------------------------------


def test_listen_finding_names_the_process_holding_the_port():
    holders = [Holder(4242, "python", "python -m torch.distributed.run train.py"),
               Holder(4243, "python", "python train.py")]
    assert reach_rules.listen_finding(29500, holders, "Address already in use") == Finding(
        "rdzv.listen", "fail", (0,),
        "port 29500 is already in use on the host by pid 4242 (python): python -m torch.distributed.run "
        "train.py; pid 4243 (python): python train.py",
        ("bind: Address already in use",),
        "stop that process (kill 4242) or pick another port for the job and netcheck")


def test_listen_finding_without_holders():
    assert reach_rules.listen_finding(80, [], "Permission denied") == Finding(
        "rdzv.listen", "fail", (0,), "the host cannot listen on port 80: Permission denied", (),
        "pick a free port, or run as a user allowed to bind it")


def test_listen_pass():
    assert reach_rules.listen_pass(29500) == Finding("rdzv.listen", "pass", (0,), "the host listens on port 29500")


def test_reach_summary_names_the_slowest_joiner():
    fast = reach("open", (), seconds=0.01)
    slow = reach("open", (), seconds=1.5)
    members = (member(0), member(1, reach=fast), member(2, reach=slow))
    assert reach_rules.reach_summary(members) == [Finding(
        "rdzv.reach", "pass", (1, 2), "2 node(s) reached node0:29500; slowest node2 in 1.50 s")]
    assert reach_rules.reach_summary((member(0),)) == []


# --- join_findings ---------------------------------------------------------------------------------


def gathering(members=(), expected=3, missing=(), hostnames=(), duplicates=None, foreign=(), malformed=(),
              waited=1.25, unseated=()) -> Gathering:
    return Gathering(tuple(members), expected, tuple(missing), tuple(hostnames), duplicates or {},
                     tuple(unseated), tuple(foreign), tuple(malformed), waited)


def test_join_all_pass():
    g = gathering((member(0), member(1), member(2)))
    assert rdzv_rules.join_findings(g) == [Finding("rdzv.join", "pass", (0, 1, 2),
                                                   "3 node(s) joined in 1.2 s, all 3 expected")]


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


def test_join_missing_node_named_by_the_launchers_hostname():
    g = gathering((member(0), member(1)), missing=(2,), hostnames=("gpu01", "gpu02", "gpu03"), waited=30.2)
    assert rdzv_rules.join_findings(g) == [Finding(
        "rdzv.join", "fail", (2,), "node rank 2 (gpu03) never joined in 30 s; 2 of 3 nodes joined",
        ("joined: rank 0 node0", "joined: rank 1 node1"),
        "start netcheck on that node; if it was started, read its own report "
        "(rdzv.reach / rdzv.resolve say why it could not get here)", "missing")]


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
        "rdzv.join", "fail", (1,), "node rank 1 was claimed by 2 nodes: node1, node1-clone; only the first "
        "was seated", ("node1 claims node rank 1", "node1-clone claims node rank 1"),
        "give every node a distinct --node-rank (torchrun: --node_rank; Slurm: one task per node)",
        "duplicate_rank")]


def test_join_foreign_node_is_a_warning_and_not_mixed_in():
    g = gathering((member(0), member(1), member(2)), foreign=(Visitor("job-8", "other7", 0),))
    assert rdzv_rules.join_findings(g) == [Finding(
        "rdzv.join", "warn", (), "other7 joined this store with run id 'job-8'; not mixed into this run", (),
        "two runs share this port: give each job its own port, or the same --rdzv-id if the node "
        "belongs here", "foreign_run")]


def test_join_malformed_entry_is_a_warning_with_the_reason_as_evidence():
    g = gathering((member(0), member(1), member(2)), malformed=("arrival 3: $.hostname: expected str, got int",))
    assert rdzv_rules.join_findings(g) == [Finding(
        "rdzv.join", "warn", (), "a store entry was rejected as malformed",
        ("arrival 3: $.hostname: expected str, got int",), "something other than netcheck writes to this port",
        "malformed")]


def test_join_lost_nodes_are_named_together():
    g = gathering((member(0), member(1, results=False), member(2, results=False)))
    assert rdzv_rules.join_findings(g) == [Finding(
        "rdzv.join", "fail", (1, 2), "node1, node2 stopped answering during the rendezvous phase", (),
        "that node's netcheck died or hung, or the network path to it broke: look at that node and its link",
        "lost_in_rendezvous")]


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
        Finding("rdzv.fqdn", "pass", (0, 1, 2), "every node resolves every other node's FQDN")]


def test_fqdn_unresolvable():
    members = (member(0), member(1, lookups={0: resolving(0, error="Name or service not known")}), member(2))
    assert rdzv_rules.fqdn_findings(members) == [Finding(
        "rdzv.fqdn", "fail", (0, 1), "1 FQDN lookup(s) between nodes fail or point elsewhere",
        ("node1 -> node0.example (rank 0): does not resolve (Name or service not known)",),
        "torchrun hands workers rank 0's FQDN as MASTER_ADDR: add every node's FQDN to DNS or "
        "/etc/hosts on every node, with its real address")]


def test_fqdn_resolving_to_127_0_1_1_is_wrong():
    # Debian's /etc/hosts maps the hostname to 127.0.1.1: the peer then talks to itself.
    members = (member(0, lookups={2: resolving(2, ("127.0.1.1",))}), member(1), member(2))
    found = rdzv_rules.fqdn_findings(members)
    assert [(f.check, f.severity, f.nodes) for f in found] == [("rdzv.fqdn", "fail", (0, 2))]
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
        Finding("rdzv.fqdn", "pass", (0, 1), "every node resolves every other node's FQDN")]


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
        "host.clock", "warn", (1, 2), "node1, node2: clock off the host's by more than 2 s",
        ("node1: -3.250 s (+/- 0.013 s)", "node2: +5.000 s (+/- 0.001 s)"),
        "run chrony or ntpd against one time source on every node")]


def test_clock_pass_wording_and_nodes_without_a_sample():
    members = (member(0), member(1, clock=None), member(2, results=False))
    assert rdzv_rules.clock_findings(members) == [
        Finding("host.clock", "pass", (0, 1, 2), "clocks agree with the host's within 2 s")]


# --- resolve_consistency -----------------------------------------------------------------------------


def reached(*addresses: str) -> Reach:
    return reach("open", (), addresses=addresses)


def test_resolve_consistency_same_family_everywhere_says_nothing():
    members = (member(0), member(1, reach=reached("10.0.0.4")), member(2, reach=reached("10.0.0.4")))
    assert reach_rules.resolve_consistency(members) == []
    both = (member(1, reach=reached("10.0.0.4", "fd00::4")), member(2, reach=reached("fd00::4", "10.0.0.4")))
    assert reach_rules.resolve_consistency(both) == []


def renamed(m: Member, rank: int) -> Member:
    """Another node like m, as rank `rank` with hostname node{rank}."""
    return dataclasses.replace(m, rank=rank, facts=dataclasses.replace(m.facts, hostname=f"node{rank}"))


def test_resolve_consistency_v6_on_one_node_v4_on_the_others():
    members = (member(0), member(1, reach=reached("10.0.0.4")), member(2, reach=reached("fd00::4")),
               renamed(member(1, reach=reached("10.0.0.4")), 3))
    assert reach_rules.resolve_consistency(members) == [Finding(
        "rdzv.resolve", "warn", (2,), "the rendezvous host resolves to different address families across nodes",
        ("node1: ipv4", "node2: ipv6", "node3: ipv4"),
        "give the host one address family everywhere (use an address, or fix /etc/hosts and DNS so "
        "every node gets the same answer)")]


def test_resolve_consistency_dual_stack_against_v4_only():
    members = (member(1, reach=reached("10.0.0.4", "fd00::4")), member(2, reach=reached("10.0.0.4")),
               renamed(member(2, reach=reached("10.0.0.4")), 3))
    found = reach_rules.resolve_consistency(members)
    assert [(f.severity, f.nodes) for f in found] == [("warn", (1,))]
    assert found[0].evidence == ("node1: ipv4+ipv6", "node2: ipv4", "node3: ipv4")


def test_resolve_consistency_ignores_the_host_which_does_not_probe():
    members = (member(0), member(1, reach=reached("fd00::4")))
    assert reach_rules.resolve_consistency(members) == []


# --- the small ones ----------------------------------------------------------------------------------


def test_seat_finding():
    assert rdzv_rules.seat_finding(2, 3, "node2") == Finding("rdzv.join", "pass", (2,), "joined as node rank 2 of 3")
    assert rdzv_rules.seat_finding(2, 3, "node2", 3).summary == "joined as node rank 2 of 3"
    # --nnodes 3 with two started: the joiner's count is the host's, not "of 2".
    assert rdzv_rules.seat_finding(1, 2, "node1", 3).summary == (
        "joined as node rank 1; 2 of 3 expected nodes joined (the host's report names the missing)")
    unseated = rdzv_rules.seat_finding(None, 3, "node9")
    assert (unseated.severity, unseated.nodes) == ("fail", ())
    assert unseated.summary == ("node9 was not seated: its rank was taken, or the cluster was full or had "
                                "already started")


def test_timeout_and_internal_findings():
    assert run_rules.timeout_finding("rendezvous", 60.0) == Finding(
        "run.timeout", "fail", (), "the rendezvous phase did not finish within --timeout (60 s)", (),
        "the findings above say what was missing; raise --timeout only if the cluster is merely slow")
    internal = run_rules.internal_finding("mesh", KeyError("eno1"))
    assert (internal.check, internal.severity) == ("run.internal", "fail")
    assert internal.summary == "netcheck could not run the mesh phase: KeyError: 'eno1'"


def test_goodbyes_unheard_for_lack_of_time_do_not_count_as_lost():
    (finding,) = run_rules.unheard_goodbyes({1: "node1", 3: "node3"})
    assert (finding.check, finding.severity, finding.nodes) == ("run.skipped", "warn", ())
    assert "node1, node3 said goodbye; not counted as lost" in finding.summary
    assert run_rules.unheard_goodbyes({}) == []


def test_an_ipv6_endpoint_is_named_as_rdzv_takes_it():
    probe = Probe("::1", "ipv6", "refused", "connection refused", 0.0001)
    found = reach_rules.reach_findings(dataclasses.replace(reach("refused", (probe,), seconds=2.0), host="::1"), (1,))
    assert found[1].summary.startswith("[::1]:29500 refused the connection")


def test_a_stopped_run_fails_naming_its_signal_and_phase():
    term = run_rules.stopped_finding("SIGTERM", "rendezvous", (0,))
    assert (term.check, term.severity, term.kind, term.nodes) == ("run.stopped", "fail", "sigterm", (0,))
    assert "during the rendezvous phase" in term.summary
    sigint = run_rules.stopped_finding("SIGINT", None, ())
    assert sigint.kind == "sigint" and "before its first phase" in sigint.summary


def test_no_peer_means_not_run_never_passed():
    findings = run_rules.no_peer_findings(["mesh", "nic"])
    assert [(f.check, f.severity, f.kind) for f in findings] == [("run.skipped", "warn", "no_peer")] * 2


def test_the_hosts_verdict_is_told_worst_first_and_bounded():
    findings = [Finding("rdzv.join", "pass", (0, 1, 2), "3 node(s) joined"),
                Finding("nic.mtu", "warn", (1,), "odd MTU"),
                Finding("mesh.connect", "fail", (2,), "node2 is cut off", tuple(f"line {i}" for i in range(9)))]
    told = run_rules.cluster_verdict(findings)
    assert (told.verdict, told.headline) == ("fail", "node2 is cut off (and 1 more)")
    assert [f.check for f in told.findings] == ["mesh.connect", "nic.mtu"]
    assert len(told.findings[0].evidence) == run_rules.TOLD_EVIDENCE
    many = [Finding("rdzv.join", "fail", (i,), f"rank {i} missing") for i in range(100)]
    assert len(run_rules.cluster_verdict(many).findings) == run_rules.TOLD_FINDINGS
    assert run_rules.cluster_verdict(findings[:1]).headline == "every check passed on every node"


def test_a_joiner_keeps_the_hosts_findings_about_itself_once():
    told = run_rules.cluster_verdict([Finding("mesh.connect", "fail", (2,), "no peer reaches node2"),
                                      Finding("env.mismatch", "fail", (1,), "node1 has another torch"),
                                      Finding("rdzv.join", "fail", (3,), "rank 3 never joined")])
    mine = [Finding("env.mismatch", "fail", (1,), "node1 has another torch"),
            Finding("mesh.connect", "fail", (1, 2), "1 of 2 directions connect on no interface")]
    kept, findings = run_rules.with_host_verdict(told, (2,), [])
    assert kept.findings == (told.findings[0],) and findings == [told.findings[0]]
    kept, findings = run_rules.with_host_verdict(told, (1,), mine)
    assert kept.findings == () and findings == mine[:1], "said once; the host's attribution wins"
    kept, findings = run_rules.with_host_verdict(told, (0,), [])
    assert findings == [] and kept.verdict == "fail" and "no peer reaches node2" in kept.headline


def test_a_verdict_not_heard_is_no_pass():
    unheard = run_rules.verdict_unheard(8.2)
    assert (unheard.check, unheard.severity) == ("run.cluster", "warn") and "8 s" in unheard.summary


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


def test_netcheck_nodes_sharing_a_machine_are_counted_as_nodes_on_it():
    """Two nodes given --node-rank 0 and 1 on one machine are two nodes, not one node of 2 ranks."""
    alike = tuple(Member(r, dataclasses.replace(member(0).facts, reach=reach("open", ())), member(0).results)
                  for r in range(2))
    (joined,) = rdzv_rules.join_findings(gathering(alike, expected=2))
    assert joined.summary.startswith("2 node(s) on one machine (node0) joined in ")
    (summary,) = reach_rules.reach_summary(alike)
    assert summary.summary.startswith("2 node(s) on one machine (node0) reached node0:29500")


def test_under_torchrun_the_rendezvous_counts_and_names_nodes_once():
    workers = tuple(worker(r, f"node{r // 2}", ADDRESS[r // 2]) for r in range(4))
    reached = tuple(dataclasses.replace(w, facts=dataclasses.replace(w.facts, reach=reach("open", ())))
                    for w in workers)
    (summary,) = reach_rules.reach_summary(reached)
    assert summary.summary.startswith("2 node(s) (4 ranks) reached node0:29500")
    (joined,) = rdzv_rules.join_findings(gathering(workers, expected=4))
    assert joined.summary.startswith("2 node(s) (4 ranks) joined in ")
    (lost,) = rdzv_rules.lost_findings("mesh", {2: "node1", 3: "node1"}, [2, 3])
    assert lost.summary == "node1 stopped answering during the mesh phase" and lost.nodes == (2, 3)
    (goodbye,) = run_rules.unheard_goodbyes({2: "node1", 3: "node1"})
    assert goodbye.summary.startswith("--timeout was spent before node1 said goodbye")


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


def test_a_lost_host_is_named_with_what_the_store_client_saw_once():
    (lost,) = rdzv_rules.lost_findings("mesh", {0: "the host"}, [0], "Connection reset by peer")
    assert lost.summary == "the host stopped answering during the mesh phase"
    assert lost.evidence == ("this node's store client: Connection reset by peer",)
    (silent,) = rdzv_rules.lost_findings("mesh", {0: "the host"}, [0])
    assert silent.evidence == ()
