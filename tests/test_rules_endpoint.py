"""launch.endpoint and launch.env: launch lines that point nodes at the wrong place, named by
the node that can see it (rules/endpoint.py over hand-built facts)."""

from __future__ import annotations

import dataclasses

import pytest

import builders
from netcheck.core.model import Endpoint, Member, NodeFacts, Probe, Reach, SilentNameserver
from netcheck.rules.endpoint import (
    endpoint_findings,
    flags_findings,
    host_endpoint_findings,
    own_endpoint_findings,
    points_at_itself,
    reached_addresses,
    shared_variable_findings,
)

ENDPOINT = Endpoint("node1", 29500)


def facts(rank: int | None, address: str = "198.18.0.11", nnodes: int | None = 3, source: str = "flags",
          hostname: str = "node1", **variables: str) -> NodeFacts:
    return builders.facts(hostname, launched=builders.launch(rank, nnodes, source, **variables),
                          nics=(builders.LOOPBACK, builders.nic("eth0", address, index=2, kind="veth")),
                          default="eth0", addresses=(address,))


def kinds(findings) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


# --- the endpoint on the wrong node -----------------------------------------------------------


def test_a_joiner_owning_the_endpoint_with_nothing_listening_names_the_launch_line():
    me = facts(1)
    assert points_at_itself(("198.18.0.11",), me)
    (f,) = endpoint_findings(ENDPOINT, ("198.18.0.11",), me, "refused")
    assert kinds([f]) == [("launch.endpoint", "fail", "not_rank0", (1,))]
    assert f.evidence == ("198.18.0.11 on eth0",)
    assert f.fix.startswith("set --rdzv (MASTER_ADDR) to node rank 0's own address")


def test_a_joiner_owning_the_endpoint_where_a_host_listens_is_a_single_machine_run():
    assert endpoint_findings(ENDPOINT, ("198.18.0.11",), facts(1), "open") == []


def test_rank0_owning_none_of_the_endpoints_addresses_explains_the_missing_nodes():
    me = facts(0, address="198.18.0.10", hostname="node0")
    (f,) = host_endpoint_findings(ENDPOINT, ("198.18.0.11",), me, missing=(1, 2))
    assert kinds([f]) == [("launch.endpoint", "warn", "rank0_elsewhere", (0,))]
    assert f.evidence == ("127.0.0.1 on lo", "198.18.0.10 on eth0")


def test_rank0_elsewhere_with_every_node_in_is_an_address_that_forwards_here():
    me = facts(0, address="198.18.0.10", hostname="node0")
    assert host_endpoint_findings(ENDPOINT, ("198.18.0.11",), me, missing=()) == []


def test_rank0_owning_the_endpoint_is_right():
    assert host_endpoint_findings(ENDPOINT, ("198.18.0.11",), facts(0), missing=(2,)) == []


# --- rank 0's own endpoint, at once ------------------------------------------------------------


def test_rank0_whose_endpoint_does_not_resolve_says_so_with_its_own_address():
    """The README's shape (--rdzv node0 --nnodes 2 --node-rank 0) where node0 is no name here:
    torch's store on rank 0 connects its own client by that name, so the job fails at rank 0."""
    me = facts(0, address="198.18.0.10", hostname="node0")
    (f,) = own_endpoint_findings(Endpoint("node0", 29500), (), "[Errno -2] Name or service not known", me, ())
    assert kinds([f]) == [("rdzv.resolve", "fail", "unresolved_on_rank0", (0,))]
    assert f.evidence == ("getaddrinfo('node0'): [Errno -2] Name or service not known",)
    assert "node0 does not resolve on this node, rank 0" in f.summary and "its own client" in f.summary
    assert "make node0 resolve to this node (node0, 198.18.0.10)" in f.fix
    assert "--rdzv 198.18.0.10:29500 (MASTER_ADDR=198.18.0.10)" in f.fix


def test_rank0_whose_endpoint_does_not_resolve_for_a_silent_nameserver_names_it():
    silent = (SilentNameserver("10.9.9.9", "/etc/resolv.conf", 2.0, 10.0),)
    (f,) = own_endpoint_findings(Endpoint("node0", 29500), (), "timed out", facts(0), (), silent)
    assert kinds([f]) == [("rdzv.resolve", "fail", "resolver_silent", (0,))]
    assert "nameserver 10.9.9.9 did not answer" in f.summary


def test_rank0_whose_endpoint_leads_nowhere_from_itself_fails_at_once():
    """Addresses none of which rank 0 holds, where nothing answers on the port from rank 0: its
    own store client cannot reach the store, whoever else comes."""
    me = facts(0, address="198.18.0.10", hostname="node0")
    refused = Probe("198.18.0.11", "ipv4", "refused", "connection refused", 0.0)
    (f,) = own_endpoint_findings(ENDPOINT, ("198.18.0.11",), None, me, (refused,))
    assert kinds([f]) == [("launch.endpoint", "fail", "rank0_unreached", (0,))]
    assert f.evidence == ("198.18.0.11: refused, connection refused", "this node: 198.18.0.10 on eth0")
    assert "--node-rank 0 to the node that holds 198.18.0.11" in f.fix


def test_rank0_whose_endpoint_answers_elsewhere_waits_for_the_rendezvous():
    """An address rank 0 does not hold that answers may forward here (a Service, a load
    balancer): that works, and rank0_elsewhere speaks only once nodes are missing."""
    me = facts(0, address="198.18.0.10", hostname="node0")
    opened = Probe("10.96.0.7", "ipv4", "open", "connected", 0.0)
    assert own_endpoint_findings(ENDPOINT, ("10.96.0.7",), None, me, (opened,)) == []
    assert own_endpoint_findings(ENDPOINT, ("198.18.0.10",), None, me, ()) == [], "its own address: not probed"


@pytest.mark.parametrize("rank", [None, 2])
def test_an_endpoint_elsewhere_says_nothing_to_a_joiner(rank):
    """A joiner whose endpoint is another machine: rdzv.reach speaks for it."""
    me = facts(rank, address="198.18.0.12")
    assert not points_at_itself(("198.18.0.11",), me)
    assert endpoint_findings(ENDPOINT, ("198.18.0.11",), me, "refused") == []


# --- loopback ---------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.1.1", "::1"])
def test_a_loopback_endpoint_on_a_multi_node_launch_fails_the_joiner(address):
    me = facts(1)
    assert points_at_itself((address,), me)
    (f,) = endpoint_findings(Endpoint("localhost", 29500), (address,), me, "refused")
    assert kinds([f]) == [("launch.endpoint", "fail", "loopback", (1,))]
    # Rank 0 on this machine with another port is the other slip that looks so: the port is named.
    assert "give every node rank 0's port (this one was given 29500)" in f.fix


def test_a_loopback_endpoint_warns_rank0_only_when_nodes_are_missing():
    """Every node in through loopback: they all run on this machine, and that works."""
    (f,) = host_endpoint_findings(Endpoint("localhost", 29500), ("127.0.0.1",), facts(0), missing=(1,))
    assert kinds([f]) == [("launch.endpoint", "warn", "loopback", (0,))]
    assert host_endpoint_findings(Endpoint("localhost", 29500), ("127.0.0.1",), facts(0), missing=()) == []


@pytest.mark.parametrize("nnodes", [1, None])
def test_a_loopback_endpoint_on_one_node_or_an_unknown_count_is_no_mistake(nnodes):
    me = facts(1 if nnodes is None else 0, nnodes=nnodes)
    assert not points_at_itself(("127.0.0.1",), me)
    assert endpoint_findings(Endpoint("localhost", 29500), ("127.0.0.1",), me, "refused") == []


def test_torchrun_workers_are_left_alone():
    me = facts(1, source="torchrun")
    assert not points_at_itself(("127.0.0.1",), me)
    assert endpoint_findings(Endpoint("localhost", 29500), ("127.0.0.1",), me, "refused") == []


# --- several addresses ------------------------------------------------------------------------


def member(rank: int, reached: str | None, hostname: str | None = None, **variables: str) -> Member:
    f = facts(rank, address=f"198.18.0.{10 + rank}", hostname=hostname or f"node{rank}", **variables)
    if reached is not None:
        probes = (Probe(reached, "ipv4", "open", "connected", 0.001),)
        f = dataclasses.replace(f, reach=Reach("head", 29500, "open", ("198.18.0.10", "198.18.1.10"),
                                               None, probes, 1, 0.01))
    return Member(rank, f)


def test_nodes_reaching_different_addresses_of_the_endpoint_are_named():
    members = (member(0, None), member(1, "198.18.0.10"), member(2, "198.18.0.10"), member(3, "198.18.1.10"))
    (f,) = reached_addresses(members)
    assert kinds([f]) == [("launch.endpoint", "warn", "several_addresses", (3,))]
    assert f.evidence == ("node1: 198.18.0.10", "node2: 198.18.0.10", "node3: 198.18.1.10")


def test_nodes_reaching_one_address_are_fine():
    assert reached_addresses((member(0, None), member(1, "198.18.0.10"), member(2, "198.18.0.10"))) == []


# --- launch.env ---------------------------------------------------------------------------------


def test_flags_and_master_addr_naming_different_places_warn():
    me = facts(1, MASTER_ADDR="node9", MASTER_PORT="29500")
    (f,) = flags_findings(ENDPOINT, ("198.18.0.11",), ("198.18.0.19",), me)
    assert kinds([f]) == [("launch.env", "warn", "flags_vs_env", (1,))]
    assert f.evidence == ("--rdzv node1:29500: 198.18.0.11", "MASTER_ADDR node9: 198.18.0.19")


@pytest.mark.parametrize("variables,master", [
    ({"MASTER_ADDR": "198.18.0.11", "MASTER_PORT": "29500"}, ("198.18.0.11",)),   # a name and its address
    ({"MASTER_ADDR": "node1"}, ("198.18.0.11",)),                                  # no port: torch's default
    ({}, ()),
])
def test_flags_and_master_addr_naming_one_place_agree(variables, master):
    assert flags_findings(ENDPOINT, ("198.18.0.11",), master, facts(1, **variables)) == []


def test_another_master_port_on_the_same_host_warns():
    (f,) = flags_findings(ENDPOINT, ("198.18.0.11",), ("198.18.0.11",), facts(1, MASTER_ADDR="node1",
                                                                             MASTER_PORT="29400"))
    assert kinds([f]) == [("launch.env", "warn", "flags_vs_env", (1,))]


def test_nodes_disagreeing_about_master_addr_or_world_size_fail_the_odd_ones():
    members = (member(0, None, MASTER_ADDR="node0", WORLD_SIZE="24"),
               member(1, None, MASTER_ADDR="node0", WORLD_SIZE="24"),
               member(2, None, MASTER_ADDR="node1", WORLD_SIZE="16"))
    found = shared_variable_findings(members)
    assert kinds(found) == [("launch.env", "fail", "variables_disagree", (2,))] * 2
    assert found[0].evidence == ("node0: MASTER_ADDR=node0", "node1: MASTER_ADDR=node0", "node2: MASTER_ADDR=node1")
    assert found[1].evidence == ("node0: WORLD_SIZE=24", "node1: WORLD_SIZE=24", "node2: WORLD_SIZE=16")


def test_nodes_that_agree_or_leave_a_variable_unset_are_fine():
    members = (member(0, None, MASTER_PORT="29500"), member(1, None), member(2, None, MASTER_PORT="29500"))
    assert shared_variable_findings(members) == []
