"""The rendezvous endpoint's rules (rules/reach.py: rdzv.resolve, rdzv.reach, rdzv.listen) over
hand-built facts: exact checks, severities, ranks and wording. The three-node cluster is
test_rules_rdzv's."""

from __future__ import annotations

import dataclasses

import pytest

from builders import launch
from netcheck.core.model import (
    Finding,
    Holder,
    LinkPrefix,
    Member,
    Probe,
    Reach,
    Route,
    SilentNameserver,
    SlowNameserver,
)
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules import reach as reach_rules
from netcheck.rules import run as run_rules
from netcheck.rules.reach import REACH_FIXES
from test_rules_rdzv import ADDRESS, gathering, member, reach, reached, renamed, unanswered, worker


def test_reach_open():
    found = reach_rules.reach_findings(reach("open", (Probe("10.0.0.4", "ipv4", "open", "connected", 0.0004),),
                                          seconds=0.0011), (1,))
    assert found == [
        Finding(check="rdzv.resolve", severity="pass", nodes=(1,), summary="node0 resolves to 10.0.0.4"),
        Finding(check="rdzv.reach", severity="pass", nodes=(1,), summary="node0:29500 is open from this node",
                evidence=("10.0.0.4 (ipv4): open, connected, 0.00 s", "1 attempt(s) over 0.0 s")),
    ]


def test_reach_refused_counts_the_seconds_it_kept_trying():
    probe = Probe("10.0.0.4", "ipv4", "refused", "connection refused: nothing listens there, or a REJECT rule",
                  0.0003)
    found = reach_rules.reach_findings(reach("refused", (probe,), seconds=29.6, attempts=58), (2,))
    assert found[0] == Finding(check="rdzv.resolve", severity="pass", nodes=(2,), summary="node0 resolves to 10.0.0.4")
    assert found[1] == Finding(
        check="rdzv.reach", severity="fail", nodes=(2,),
        summary="node0:29500 refused the connection, 58 attempts over 29.6 s: nothing "
        "listens there",
        evidence=("10.0.0.4 (ipv4): refused, connection refused: nothing listens there, or a REJECT rule, 0.00 s",
                  "58 attempt(s) over 29.6 s"),
        fix=REACH_FIXES["refused"], cause_nodes=(0,))
    assert "start netcheck on the host node first" in found[1].fix


@pytest.mark.parametrize("state, host", [("REACHABLE", (0,)), ("STALE", (0,)), ("", None)])
def test_a_connect_the_hosts_machine_drops_is_the_hosts_fault(state, host):
    """ARP answered for the host and its port went unanswered: this node's link works as far as
    the host's machine, so what drops it is there (issue 65); without the neighbour's word
    nothing tells, and the finding stays this node's."""
    (_, dropped) = reach_rules.reach_findings(reach("filtered", (unanswered(state),)), (2,))
    assert (dropped.nodes, dropped.cause_nodes) == ((2,), host), dropped


def test_reach_filtered_says_how_long_it_waited():
    probe = Probe("10.0.0.4", "ipv4", "filtered", "no answer in 3 s", 3.0012)
    found = reach_rules.reach_findings(reach("filtered", (probe,), seconds=3.01), (1,))
    assert found[1] == Finding(
        check="rdzv.reach", severity="fail", nodes=(1,),
        summary="node0:29500 is filtered from this node: no answer in 3.0 s",
        evidence=("10.0.0.4 (ipv4): filtered, no answer in 3 s, 3.00 s", "1 attempt(s) over 3.0 s"),
        fix=REACH_FIXES["filtered"])
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
        Finding(check="rdzv.resolve", severity="pass", nodes=(1,), summary="node0 resolves to 10.9.0.4"),
        Finding(check="rdzv.reach", severity="fail", nodes=(1,),
                summary="node0:29500 is unreachable from this node: no route",
                evidence=("10.9.0.4 (ipv4): unreachable, No route to host, 0.00 s", "1 attempt(s) over 0.0 s"),
                fix=REACH_FIXES["unreachable"]),
    ]


def test_reach_dns_is_a_resolve_failure_and_no_reach_finding():
    found = reach_rules.reach_findings(
        reach("dns", (), addresses=(), seconds=0.02, attempts=0, host="nosuch.example",
              error="Name or service not known"), (3,))
    assert found == [Finding(
        check="rdzv.resolve", severity="fail", nodes=(3,), summary="nosuch.example does not resolve on this node",
        evidence=("getaddrinfo('nosuch.example'): Name or service not known",),
        fix="use an address, or add the name to DNS or /etc/hosts on this node")]


def test_reach_lists_every_address_and_probe_of_both_families():
    probes = (Probe("fd00::4", "ipv6", "refused", "connection refused", 0.001),
              Probe("10.0.0.4", "ipv4", "open", "connected", 0.002))
    found = reach_rules.reach_findings(reach("open", probes, addresses=("fd00::4", "10.0.0.4"), seconds=0.5), ())
    assert found[0].summary == "node0 resolves to fd00::4, 10.0.0.4"
    assert found[1].evidence == ("fd00::4 (ipv6): refused, connection refused, 0.00 s",
                                 "10.0.0.4 (ipv4): open, connected, 0.00 s",
                                 "1 attempt(s) over 0.5 s")
    assert found[1].nodes == ()   # `netcheck probe`: no rank


def test_listen_finding_names_the_process_holding_the_port():
    holders = [Holder(4242, "python", "python -m torch.distributed.run train.py"),
               Holder(4243, "python", "python train.py")]
    assert reach_rules.listen_finding(29500, holders, "Address already in use") == Finding(
        check="rdzv.listen", severity="fail", nodes=(0,),
        summary="port 29500 is already in use on the host by pid 4242 (python): python -m torch.distributed.run "
        "train.py; pid 4243 (python): python train.py",
        evidence=("bind: Address already in use",),
        fix="stop that process (kill 4242) or pick another port for the job and netcheck")


def test_listen_finding_without_holders():
    assert reach_rules.listen_finding(80, [], "Permission denied") == Finding(
        check="rdzv.listen", severity="fail", nodes=(0,),
        summary="the host cannot listen on port 80: Permission denied",
        fix="pick a free port, or run as a user allowed to bind it")


def test_listen_pass():
    assert reach_rules.listen_pass(29500) == Finding(check="rdzv.listen", severity="pass", nodes=(0,),
                                                     summary="the host listens on port 29500")


def test_reach_summary_names_the_slowest_joiner():
    fast = reach("open", (), seconds=0.01)
    slow = reach("open", (), seconds=1.5)
    members = (member(0), member(1, reach=fast), member(2, reach=slow))
    assert reach_rules.reach_summary(members) == [Finding(
        check="rdzv.reach", severity="pass", nodes=(1, 2),
        summary="2 node(s) reached node0:29500; slowest node2 in 1.50 s")]
    assert reach_rules.reach_summary((member(0),)) == []


def test_resolve_consistency_same_family_everywhere_says_nothing():
    members = (member(0), member(1, reach=reached("10.0.0.4")), member(2, reach=reached("10.0.0.4")))
    assert reach_rules.resolve_consistency(members) == []
    both = (member(1, reach=reached("10.0.0.4", "fd00::4")), member(2, reach=reached("fd00::4", "10.0.0.4")))
    assert reach_rules.resolve_consistency(both) == []


def test_resolve_consistency_v6_on_one_node_v4_on_the_others():
    members = (member(0), member(1, reach=reached("10.0.0.4")), member(2, reach=reached("fd00::4")),
               renamed(member(1, reach=reached("10.0.0.4")), 3))
    assert reach_rules.resolve_consistency(members) == [Finding(
        check="rdzv.resolve", severity="warn", nodes=(2,),
        summary="the rendezvous host resolves to different address families across nodes",
        evidence=("node1: ipv4", "node2: ipv6", "node3: ipv4"),
        fix="give the host one address family everywhere (use an address, or fix /etc/hosts and DNS so "
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


def test_an_ipv6_endpoint_is_named_as_rdzv_takes_it():
    probe = Probe("::1", "ipv6", "refused", "connection refused", 0.0001)
    found = reach_rules.reach_findings(dataclasses.replace(reach("refused", (probe,), seconds=2.0), host="::1"), (1,))
    assert found[1].summary.startswith("[::1]:29500 refused the connection")


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


# --- slow lookups (issue 63) ----------------------------------------------------------------------

LATE_NAMESERVER = SlowNameserver("10.9.9.53", "/etc/resolv.conf", 4.0)
OPEN = (Probe("10.0.0.4", "ipv4", "open", "connected", 0.0004),)


def _looked_up(seconds: float, outcome: str = "open", error: str | None = None) -> Reach:
    found = reach(outcome, OPEN if outcome == "open" else (), addresses=() if error else ("10.0.0.4",), error=error)
    return dataclasses.replace(found, resolve_seconds=seconds, named_in="DNS")


def test_a_lookup_that_answers_late_is_slow_with_its_seconds_and_cost_never_unresolved():
    """A name answered in 4 s resolves: a warning with the seconds and what torch's store pays per
    rank (the name's AAAA and A, then the address: three lookups), and the reach probe judged."""
    resolved, reached_ = reach_rules.reach_findings(_looked_up(4.0), (1,), slow=(LATE_NAMESERVER,),
                                                    launch=launch(1, 2, nproc=2))
    assert (resolved.check, resolved.severity, resolved.kind, resolved.nodes) == \
        ("rdzv.resolve", "warn", "resolver_slow", (1,))
    assert "only after 4.0 s" in resolved.summary and "10.9.9.53 answers 4.0 s late" in resolved.summary
    assert "each of this node's 2 rank(s) waits about 12 s" in resolved.summary
    assert "does not resolve" not in resolved.summary
    assert resolved.evidence == ("getaddrinfo('node0'): answered in 4.00 s, from DNS",
                                 "10.9.9.53 (from /etc/resolv.conf): answered a DNS query in 4.00 s")
    assert reached_.check == "rdzv.reach" and reached_.severity == "pass"


def test_a_prompt_lookup_passes_and_an_address_costs_one_lookup_a_connect():
    (resolved, _) = reach_rules.reach_findings(_looked_up(0.9), (1,))
    assert resolved == Finding(check="rdzv.resolve", severity="pass", nodes=(1,), summary="node0 resolves to 10.0.0.4")
    assert "waits about 4 s" in reach_rules.lookup_cost("10.0.0.4", 4.0, None)
    assert "waits about 12 s" in reach_rules.lookup_cost("node0", 4.0, None)


def test_rank0_says_what_its_store_pays_for_the_jobs_ranks_one_after_another():
    """torch's store looks up each connection it takes on its one thread: 16 ranks x 4 s."""
    (own,) = reach_rules.slow_lookup("node0", 4.0, "DNS", (LATE_NAMESERVER,), (0,), launch(0, 2, nproc=8),
                                     on_rank0=True)
    assert "rank 0's store looks up each rank that connects, on its one thread: the job's 16 ranks in about 64 s" \
        in own.summary


def test_a_lookup_cut_short_by_the_run_behind_a_late_nameserver_is_not_a_name_that_does_not_exist():
    """netcheck stopped waiting at its deadline: the name may resolve, later; a failure (the node
    was not tested) under resolver_slow, with a longer --timeout in the fix."""
    cut = _looked_up(3.0, "dns", error="no answer to the lookup in 3 s")
    (failed,) = reach_rules.reach_findings(cut, (2,), slow=(LATE_NAMESERVER,))
    assert (failed.severity, failed.kind) == ("fail", "resolver_slow")
    assert "not an answer that the name does not exist" in failed.summary and "--timeout" in failed.fix
    # A late answer that the name does not exist is just that.
    gone = _looked_up(4.0, "dns", error="Name or service not known")
    (failed,) = reach_rules.reach_findings(gone, (2,), slow=(LATE_NAMESERVER,))
    assert failed.summary == "node0 does not resolve on this node" and failed.kind == ""


def test_a_late_nameserver_is_named_slow_and_a_silent_one_silent():
    silent = SilentNameserver("10.9.9.54", "/etc/resolv.conf", 5.0, 10.0)
    quiet, late = reach_rules.resolver_findings((silent,), (0,), (LATE_NAMESERVER,), "node0", launch(0, 3),
                                                on_rank0=True)
    assert (quiet.kind, quiet.severity) == ("resolver_silent", "warn") and "10.9.9.54 does not answer" in quiet.summary
    assert (late.kind, late.severity) == ("resolver_slow", "warn") and "10.9.9.53 answers 4.0 s late" in late.summary
    assert "the job's 3 ranks in about 12 s" in late.summary
    assert reach_rules.resolver_findings((), (0,)) == []


def test_the_host_names_the_joiners_whose_lookup_was_slow_with_each_ones_seconds():
    members = (member(0), member(1, reach=_looked_up(4.2)), member(2, reach=_looked_up(0.01)))
    (late,) = reach_rules.slow_lookups(members)
    assert (late.kind, late.severity, late.nodes) == ("resolver_slow", "warn", (1,))
    assert late.evidence == ("node1: node0 answered in 4.20 s, from DNS",)
    assert reach_rules.slow_lookups((member(0), member(2, reach=_looked_up(0.01)))) == []


def test_nodes_missing_behind_the_hosts_slow_resolver_are_named_with_it():
    """Never "missing" with no cause where the host's own lookups were slow."""
    findings = rdzv_rules.join_findings(gathering((member(0), member(1)), missing=(2,)))
    (missing,) = reach_rules.slow_join_explained(findings, 4.0, 26.5)
    assert (missing.kind, missing.nodes) == ("missing", (2,))
    assert "lookups take 4.0 s each (a slow resolver)" in missing.summary and "about 16 s" in missing.summary
    assert "resolver_slow" in missing.fix
    assert reach_rules.slow_join_explained(findings, 0.01, 20.0) == findings


def test_a_joiner_keeps_its_own_slow_lookup_for_the_hosts():
    """Its own names the nameserver; the host's, over every node, only its seconds."""
    mine = reach_rules.slow_lookup("node0", 4.0, "DNS", (LATE_NAMESERVER,), (1,), None)
    told = run_rules.cluster_verdict(reach_rules.slow_lookups((member(0), member(1, reach=_looked_up(4.0)))))
    _, kept = run_rules.with_host_verdict(told, (1,), mine)
    assert kept == mine


# --- an address on the node's own subnet nobody answers: stale first, a wide prefix on evidence -----


def on_link(state="FAILED", address="10.0.0.4", subnet="10.0.0.0/24", router="10.0.0.1", link=(),
            source="10.0.0.7", family="ipv4") -> Reach:
    route = Route("eth0", source, None, state, (), subnet, router, link)
    probe = Probe(address, family, "filtered", "no answer in 3 s", 3.0, route)
    return dataclasses.replace(reach("filtered", (probe,), addresses=(address,)),
                               named_in="/etc/hosts line 4: 10.0.0.4 node0")


def test_a_stale_hosts_entry_on_a_node_with_a_router_is_a_stale_entry_first():
    """Every real node has a default gateway: its presence alone says nothing of the prefix
    (issue 63). The address is named first, the prefix after, as the next thing to compare."""
    (_, nobody) = reach_rules.reach_findings(on_link(), (1,))
    assert (nobody.kind, nobody.nodes) == ("no_machine", (1,))
    assert "no machine answered at 10.0.0.4 on eth0 (ARP got no reply: FAILED)" in nobody.summary
    assert "prefix" not in nobody.summary and "/etc/hosts line 4" in nobody.summary
    assert nobody.fix.startswith("node0's entry in /etc/hosts on this node is stale (/etc/hosts line 4)")
    stale, then = nobody.fix.index("is stale"), nobody.fix.index("where the address is right")
    assert stale < then and "its prefix (10.0.0.0/24)" in nobody.fix[then:] and "10.0.0.1" in nobody.fix[then:]
    assert "firewall" not in nobody.fix


def test_without_a_router_the_fix_says_nothing_of_the_prefix():
    (_, nobody) = reach_rules.reach_findings(on_link(router=None), (1,))
    assert nobody.kind == "no_machine" and "prefix" not in nobody.fix


LEASE = LinkPrefix("10.0.0.7/24", "its DHCP lease",
                   "/run/systemd/netif/leases/2: address 10.0.0.7, subnet mask 255.255.255.0")


def test_a_prefix_wider_than_the_leased_subnet_is_named_with_its_lease():
    """The node is configured /16, its DHCP lease says /24, and the address is in the /16 only:
    the prefix is the cause, named with the lease, its fix first and the address's after."""
    found = on_link(address="10.0.1.10", subnet="10.0.0.0/16", link=(LEASE,))
    (_, wide) = reach_rules.reach_findings(found, (1,))
    assert (wide.kind, wide.nodes) == ("prefix_too_wide", (1,))
    assert "only by this node's prefix (10.0.0.0/16)" in wide.summary and "10.0.0.0/24" in wide.summary
    assert "the link's subnet is 10.0.0.0/24 (its DHCP lease)" in wide.summary
    assert "behind its router (10.0.0.1)" in wide.summary
    assert wide.fix.startswith("give eth0 the subnet's prefix (10.0.0.7/24)")
    assert wide.fix.index("10.0.0.7/24") < wide.fix.index("/etc/hosts") and "firewall" not in wide.fix
    assert f"eth0's link: 10.0.0.7/24, from its DHCP lease ({LEASE.detail})" in wide.evidence


@pytest.mark.parametrize("address, subnet, link", [
    ("10.0.0.99", "10.0.0.0/16", (LEASE,)),                     # the lease's subnet holds it: a stale address
    ("10.0.1.10", "10.0.0.0/24", (LinkPrefix("10.0.0.7/24", "lease"),)),   # the same prefix: nothing wider
    ("10.0.1.10", "10.0.0.0/16", (LinkPrefix("10.0.0.7/8", "lease"),)),    # the lease is wider still
    ("10.0.1.10", "10.0.0.0/16", (LinkPrefix("10.0.9.7/24", "lease"),)),   # a lease of another subnet
    ("10.0.1.10", "10.0.0.0/16", (LinkPrefix("fd00::/64", "ra"),)),        # of the other family
    ("10.0.1.10", "10.0.0.0/16", (LinkPrefix("garbage", "ra"),)),          # unreadable: no evidence
])
def test_no_evidence_of_a_narrower_link_leaves_the_address_first(address, subnet, link):
    (_, nobody) = reach_rules.reach_findings(on_link(address=address, subnet=subnet, link=link), (1,))
    assert nobody.kind == "no_machine", nobody
    assert nobody.fix.startswith("node0's entry in /etc/hosts on this node is stale")


def test_a_prefix_wider_than_the_routers_advertised_one_is_named_without_a_name():
    """IPv6: the router advertises 2001:db8::/64, the node is configured /48; probed by address."""
    ra = LinkPrefix("2001:db8::/64", "its router's advertisement", "ip -6 route: 2001:db8::/64 dev eth0 proto ra")
    found = dataclasses.replace(on_link(address="2001:db8:0:1::10", subnet="2001:db8::/48", router="fe80::1",
                                        link=(ra,), source="2001:db8::7", family="ipv6"), named_in="")
    (_, wide) = reach_rules.reach_findings(found, ())
    assert wide.kind == "prefix_too_wide" and "NDP" in wide.summary
    assert "the link's subnet is 2001:db8::/64 (its router's advertisement)" in wide.summary
    assert wide.fix.startswith("give eth0 the subnet's prefix (2001:db8::7/64)") and "check the address" in wide.fix


def test_evidence_without_a_router_says_the_address_is_of_another_link():
    (_, wide) = reach_rules.reach_findings(on_link(address="10.0.1.10", subnet="10.0.0.0/16", router=None,
                                                   link=(LEASE,)), (1,))
    assert wide.kind == "prefix_too_wide" and "on another link" in wide.summary


def test_an_address_a_router_could_not_deliver_to_is_not_this_nodes_missing_route():
    """Every node has a default gateway: an address of no network it routes is sent there, and
    the router answers "network unreachable"; the summary says so, not "no route"."""
    route = Route("eth0", "10.0.0.7", "10.0.0.1", "REACHABLE")
    probe = Probe("10.9.0.4", "ipv4", "unreachable", "Network is unreachable", 0.001, route)
    found = dataclasses.replace(reach("unreachable", (probe,), addresses=("10.9.0.4",)),
                                named_in="/etc/hosts line 4: 10.9.0.4 node0")
    (_, routed) = reach_rules.reach_findings(found, (1,))
    assert routed.summary == ("node0:29500 is unreachable from this node: its route leads via 10.0.0.1, and a router "
                              "on the way could not deliver to 10.9.0.4 (Network is unreachable)")
    assert routed.fix.startswith("check the address (node0 comes from /etc/hosts line 4)")
    assert "traceroute 10.9.0.4" in routed.fix


def hidden_nameserver(state: str = "FAILED", link: tuple[LinkPrefix, ...] = (),
                      shared: tuple[str, ...] = ()) -> SilentNameserver:
    """A nameserver on another rack (10.0.1.53) that this node, configured /16 where the racks
    are /24, takes for its own link: its query went unanswered, and ARP with it."""
    route = Route("eth0", "10.0.0.7", None, state, shared, "10.0.0.0/16", "10.0.0.1", link)
    return SilentNameserver("10.0.1.53", "/etc/resolv.conf", 5.0, 10.0, route)


def test_a_nameserver_no_machine_answered_arp_for_is_the_nodes_network_not_the_server():
    """Issue 63 (campaign 63204 #32): "repair the nameserver" sent the user to a server that
    answered every other node; this node's prefix put its address on a link where nobody is."""
    gone = reach("dns", (), addresses=(), host="node0.cluster", error="Temporary failure in name resolution")
    (failed,) = reach_rules.reach_findings(gone, (7,), silent=(hidden_nameserver(),))
    assert (failed.check, failed.severity, failed.kind, failed.nodes) == \
        ("rdzv.resolve", "fail", "nameserver_no_machine", (7,))
    assert failed.summary.startswith("node0.cluster does not resolve on this node: its nameserver 10.0.1.53 is out "
                                     "of this node's reach: no machine answered at 10.0.1.53 on eth0 (ARP got no "
                                     "reply: FAILED)")
    assert failed.fix.startswith("check the nameserver's address in /etc/resolv.conf")
    assert "its prefix (10.0.0.0/16)" in failed.fix and "its router (10.0.0.1)" in failed.fix
    assert "repair the nameserver" not in failed.fix
    assert "10.0.1.53: route on the interface's subnet, dev eth0, source 10.0.0.7; neighbour FAILED" in failed.evidence
    (warned,) = reach_rules.resolver_findings((hidden_nameserver(),), (7,))
    assert (warned.kind, warned.severity) == ("nameserver_no_machine", "warn") and "waits up to 10 s" in warned.summary


def test_a_nameserver_hidden_by_a_prefix_wider_than_the_lease_names_the_prefix_first():
    (wide,) = reach_rules.resolver_findings((hidden_nameserver(link=(LEASE,)),), (7,))
    assert wide.kind == "nameserver_no_machine" and "only by this node's prefix (10.0.0.0/16)" in wide.summary
    assert wide.fix.startswith("give eth0 the subnet's prefix (10.0.0.7/24)")
    assert f"eth0's link: 10.0.0.7/24, from its DHCP lease ({LEASE.detail})" in wide.evidence
    (taken,) = reach_rules.resolver_findings((hidden_nameserver(shared=("eth1",)),), (7,))
    assert taken.kind == "nameserver_no_machine" and "several interfaces (eth0, eth1)" in taken.summary
    assert "metric" in taken.fix


@pytest.mark.parametrize("state", ["REACHABLE", "STALE"])
def test_a_nameserver_whose_machine_answered_arp_is_silent_as_before(state):
    silent = (hidden_nameserver(state),)
    (quiet,) = reach_rules.resolver_findings(silent, (7,))
    assert quiet.kind == "resolver_silent" and quiet.fix == reach_rules.RESOLVER_FIX
    gone = reach("dns", (), addresses=(), host="node0.cluster", error="Temporary failure in name resolution")
    (failed,) = reach_rules.reach_findings(gone, (7,), silent=silent)
    assert (failed.kind, failed.severity) == ("resolver_silent", "fail")
