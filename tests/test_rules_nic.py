"""The mesh and nic rules and the recommendation, over hand-built facts and mesh attempts."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import builders
from netcheck.cluster import mesh
from netcheck.core.meshrecords import ECHOED, Attempt, Transfer, Trial
from netcheck.core.model import Member
from netcheck.core.names import is_safe_ifname
from netcheck.core.nictable import IbPort, Nic
from netcheck.rules import mesh as mesh_rules
from netcheck.rules import nic as nic_rules
from netcheck.rules.registry import impacted


def nic(name: str, address: str | None = None, mtu: int = 1500, speed: int | None = 10000,
        kind: str = "ethernet", running: bool = True) -> Nic:
    return builders.nic(name, *filter(None, [address]), mtu=mtu, speed=speed, kind=kind, running=running)


def member(rank: int, *nics: Nic, env: dict | None = None, ib: tuple[IbPort, ...] = (),
           hostname_addresses: tuple[str, ...] | None = None, gpus: int = 0) -> Member:
    first = next((n.addresses[0].address for n in nics if n.addresses), "127.0.1.1")
    return builders.member(rank, fqdn=f"node{rank}.c", nnodes=3, nics=(builders.LOOPBACK,) + nics, ib=ib,
                           env=env, addresses=hostname_addresses or (first,), gpus=gpus)


def ok(src: int, dst: int, ifname: str, src_ifname: str = "eth0") -> Attempt:
    return Attempt(src, dst, ifname, f"198.18.0.{10 + dst}", "ok", 0.1, src_ifname, "connected")


def failed(src: int, dst: int, ifname: str, outcome: str = "filtered") -> Attempt:
    return Attempt(src, dst, ifname, f"198.19.{dst}.1", outcome, None, None, "no answer in 2 s")


def said(f) -> tuple[str, str, str, tuple[int, ...]]:
    return f.check, f.severity, f.kind, f.nodes


def directions(f) -> list[str]:
    """The broken directions a mesh.connect finding lists, a line each ("node0 -> node1")."""
    return [e.split(":")[0] for e in f.evidence]


def full_mesh(ranks, ifname_of, extra=()) -> tuple[Attempt, ...]:
    return tuple(ok(s, d, ifname_of(d), ifname_of(s)) for s in ranks for d in ranks if s != d) + tuple(extra)


NAMES = {0: "eth0", 1: "ens5", 2: "enp3s0f1"}
THREE = (member(0, nic("eth0", "198.18.0.10")), member(1, nic("ens5", "198.18.0.11")),
         member(2, nic("enp3s0f1", "198.18.0.12")))


def test_proven_interfaces_need_every_peer_that_tried():
    decoy = [failed(0, 1, "ib0"), ok(2, 1, "ib0")]
    members = THREE[:1] + (member(1, nic("ib0", "198.19.1.1"), nic("ens5", "198.18.0.11")),) + THREE[2:]
    proven = nic_rules.proven_interfaces(members, full_mesh(range(3), NAMES.get, decoy))
    assert proven == {0: ["eth0"], 1: ["ens5"], 2: ["enp3s0f1"]}


def test_a_node_that_reaches_no_peer_does_not_unprove_the_peers_it_tried():
    """node2's outbound is cut: its failed connects to node0 and node1 say nothing of them."""
    attempts = tuple((failed if s == 2 else ok)(s, d, NAMES[d]) for s in range(3) for d in range(3) if s != d)
    assert nic_rules.proven_interfaces(THREE, attempts) == {0: ["eth0"], 1: ["ens5"], 2: ["enp3s0f1"]}


def test_recommendation_with_different_names_is_an_exact_nccl_list_and_gloo_per_node():
    proven = {0: ["eth0"], 1: ["ens5"], 2: ["enp3s0f1"]}
    rec = nic_rules.recommendation(THREE, proven)
    assert rec.cluster == {"NCCL_SOCKET_IFNAME": "=eth0,ens5,enp3s0f1"}
    assert rec.per_node == {f"node{r}": {"GLOO_SOCKET_IFNAME": n, "TP_SOCKET_IFNAME": n}
                            for r, n in NAMES.items()}


def test_recommendation_with_one_name_everywhere_is_one_value():
    members = tuple(member(r, nic("eth0", f"198.18.0.{10 + r}")) for r in range(3))
    rec = nic_rules.recommendation(members, {r: ["eth0"] for r in range(3)})
    assert rec.cluster == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0",
                           "TP_SOCKET_IFNAME": "eth0"} and rec.per_node == {}


def test_no_recommendation_when_a_node_has_no_working_interface():
    rec = nic_rules.recommendation(THREE, {0: ["eth0"], 1: [], 2: ["enp3s0f1"]})
    assert rec.cluster == {} and rec.per_node == {} and "node1" in rec.reason


def test_a_sampled_mesh_tests_every_node_both_ways_with_a_bounded_number_of_connections():
    """sample:8 at 1,024 nodes: each node connects to 10 peers (ring neighbours and 8 drawn),
    is connected to by at least its 2 ring neighbours, and by no more than a few dozen."""
    ranks = list(range(1024))
    out = {r: mesh.targets(r, ranks, 8, "run") for r in ranks}
    inbound = Counter(t for peers in out.values() for t in peers)
    assert {len(peers) for peers in out.values()} == {10}
    assert min(inbound[r] for r in ranks) >= 2 and max(inbound.values()) <= 30, inbound.most_common(3)
    assert all(r not in peers and {(r + 1) % 1024, (r - 1) % 1024} <= set(peers) for r, peers in out.items())


@pytest.mark.parametrize("n", [11, 12, 13, 40])
def test_a_sampled_draw_near_the_ring_size_takes_its_neighbours_and_distinct_others(n):
    ranks = list(range(0, 3 * n, 3))   # ranks need not be 0..n-1
    for i, r in enumerate(ranks):
        peers = mesh.targets(r, ranks, 8, "run")
        assert r not in peers and len(set(peers)) == len(peers) == min(10, n - 1) and set(peers) <= set(ranks)
        assert {ranks[(i + 1) % n], ranks[(i - 1) % n]} <= set(peers)


def test_nccl_default_fails_where_the_pick_reaches_no_peer():
    members = (member(0, nic("eth0", "198.18.0.10"), gpus=8),
               member(1, nic("ib0", "198.19.1.1", kind="infiniband"), nic("eth0", "198.18.0.11"), gpus=8))
    (finding,) = nic_rules.nccl_findings(members, {0: ["eth0"], 1: ["eth0"]})
    assert (finding.severity, finding.nodes, finding.impact) == ("fail", (1,), None), "the registry's: NCCL"
    assert "ib0 not reached by every peer that tried" in finding.evidence[0]
    assert set(impacted([finding])[0].impact.on) == {"nccl_socket", "nccl_rdma"}


def test_a_decoy_ib0_on_nodes_without_a_gpu_warns_for_nccl_and_says_a_job_there_runs_gloo():
    """Issue 64: an ib0 decoy failed nic.nccl_default on nodes with no CUDA, and the gloo job ran.
    NCCL needs a GPU: where no node has one, the trouble is NCCL's on other nodes, not this job's."""
    members = (member(0, nic("eth0", "198.18.0.10")),
               member(1, nic("ib0", "198.19.1.1", kind="infiniband"), nic("eth0", "198.18.0.11")))
    (finding,) = nic_rules.nccl_findings(members, {0: ["eth0"], 1: ["eth0"]})
    assert (finding.severity, finding.nodes) == ("warn", (1,))
    assert finding.impact.on == ("nccl_socket", "nccl_rdma") and finding.impact.effect == "risks"
    assert finding.impact.why.startswith("no node has an NVIDIA GPU, so a job here runs gloo, which this does not stop")
    (passed,) = nic_rules.nccl_findings(members, {0: ["eth0"], 1: ["ib0", "eth0"]})
    assert passed.severity == "pass" and passed.impact is None, "a pass speaks for NCCL, as the registry says"


def test_the_host_passes_a_choice_only_on_the_nodes_a_peers_connect_was_witnessed_to():
    """Chaos seed 8306, schedule 9: every node's connects cut, none witnessed; nic.nccl_default
    passed "looks usable on every node": a pass on no evidence, beside node1's decoy ib0."""
    members = tuple(member(r, nic("eth0", f"198.18.0.1{r}")) for r in range(3))
    assert nic_rules.nccl_findings(members, {}) == []
    assert nic_rules.gloo_findings(members, {}) == []
    (partly,) = nic_rules.nccl_findings(members, {0: ["eth0"], 1: ["eth0"]})
    assert (partly.severity, partly.nodes) == ("pass", (0, 1))
    assert partly.summary.endswith("not tested on node2: no peer's connect there was witnessed (mesh.connect)")


def test_gloo_default_fails_on_a_hostname_that_resolves_to_loopback():
    members = (member(0, nic("eth0", "198.18.0.10")),
               member(1, nic("eth0", "198.18.0.11"), hostname_addresses=("127.0.1.1",)))
    (finding,) = nic_rules.gloo_findings(members, None)
    assert (finding.severity, finding.nodes) == ("fail", (1,))
    assert "127.0.1.1" in finding.evidence[0]


def test_nodes_that_are_one_machine_reach_each_other_on_loopback_and_need_no_setting():
    """The demo without root: three netcheck nodes on one host whose name resolves to 127.0.0.1."""
    def on(hostname: str, address: str, rank: int) -> Member:
        return builders.member(rank, hostname, nnodes=3, nics=(builders.LOOPBACK, nic("eth0", address)),
                               addresses=("127.0.0.1",))

    one = tuple(on("vm", "192.0.2.2", r) for r in range(3))
    assert [said(f) for f in nic_rules.gloo_findings(one, {})] == [("nic.gloo_default", "pass", "", (0, 1, 2))]
    assert [f.severity for f in nic_rules.tp_findings(one, {})] == ["pass"]
    rec = nic_rules.recommendation(one, {})
    assert (rec.cluster, rec.per_node) == ({}, {}) and "no path leaves the machine" in rec.reason
    # One name on two machines (a cloned image) is not one machine: loopback reaches no peer there.
    two = (on("vm", "198.18.0.10", 0), on("vm", "198.18.0.11", 1))
    assert [(f.severity, f.nodes) for f in nic_rules.gloo_findings(two, {})] == [("fail", (0, 1))]
    assert "nothing proven" in nic_rules.recommendation(two, {}).reason
    # A joiner knows itself alone: one machine where every connect of its own went to its own address.
    here = [Attempt(1, d, "eth0", "192.0.2.2", "ok", 0.1, "eth0", "connected") for d in (0, 2)]
    assert [f.severity for f in nic_rules.gloo_findings(one[1:2], None, tuple(here))] == ["pass"]
    elsewhere = (dataclasses.replace(here[0], address="198.18.0.10"),) + tuple(here[1:])
    assert [f.severity for f in nic_rules.gloo_findings(one[1:2], None, elsewhere)] == ["fail"]
    assert [f.severity for f in nic_rules.tp_findings(one[1:2], None, ())] == ["warn"], "no connect: no proof"


def test_tp_default_warns_on_loopback_or_an_unproven_interface():
    members = (member(0, nic("eth0", "198.18.0.10"), hostname_addresses=("198.18.0.10",)),
               member(1, nic("eth0", "198.18.0.11"), hostname_addresses=("127.0.1.1",)),
               member(2, nic("eth0", "198.18.0.12"), nic("docker0", "198.19.0.1", kind="virtual"),
                      hostname_addresses=("198.19.0.1",)))
    (finding,) = nic_rules.tp_findings(members, {0: ["eth0"], 1: ["eth0"], 2: ["eth0"]})
    assert (finding.check, finding.severity, finding.nodes) == ("nic.tp_default", "warn", (1, 2))
    assert "127.0.1.1" in finding.evidence[0] and "docker0" in finding.evidence[1]
    (passing,) = nic_rules.tp_findings(members[:1], {0: ["eth0"]})
    assert passing.severity == "pass"


def test_route_fails_on_a_setting_that_names_nothing_here_or_an_address():
    members = (member(0, nic("eth0", "198.18.0.10"), env={"NCCL_SOCKET_IFNAME": "ens5"}),
               member(1, nic("eth0", "198.18.0.11"), env={"GLOO_SOCKET_IFNAME": "198.18.0.11"}))
    (finding,) = nic_rules.route_findings(members, (), {})
    assert (finding.severity, finding.nodes) == ("fail", (0, 1))


def test_route_warns_on_two_interfaces_in_one_subnet():
    members = (member(0, nic("eth0", "10.0.0.5"), nic("eth1", "10.0.0.6")),)
    (finding,) = nic_rules.route_findings(members, (), {})
    assert finding.severity == "warn" and finding.evidence == ("node0: eth0, eth1 on 10.0.0.0/24",)


def test_mtu_mismatch_names_the_odd_node():
    members = (member(0, nic("eth0", "198.18.0.10")), member(1, nic("eth0", "198.18.0.11", mtu=9000)),
               member(2, nic("eth0", "198.18.0.12")))
    (finding,) = nic_rules.mtu_findings(members, full_mesh(range(3), lambda r: "eth0"))
    assert (finding.severity, finding.nodes) == ("warn", (1,))


def test_mtu_mismatch_between_two_nodes_names_both():
    members = (member(0, nic("eth0", "198.18.0.10")), member(1, nic("eth0", "198.18.0.11", mtu=9000)))
    (finding,) = nic_rules.mtu_findings(members, full_mesh(range(2), lambda r: "eth0"))
    assert (finding.severity, finding.nodes) == ("warn", (0, 1)), "either side could be the wrong one"


def _carrying(attempts: tuple[Attempt, ...], path_mtu: int) -> tuple[Attempt, ...]:
    """The attempts with full-size frames that crossed, on a path the kernel learnt at path_mtu."""
    return tuple(dataclasses.replace(a, transfer=Transfer(1500, 1500, (Trial(1500, ECHOED),), path_mtu))
                 for a in attempts)


def test_an_overlay_left_at_its_underlay_s_mtu_is_named_with_the_overlay_s_fix():
    members = tuple(member(r, nic("vx0", f"198.19.0.{r + 1}")) for r in range(3))
    findings = nic_rules.mtu_findings(members, _carrying(full_mesh(range(3), lambda r: "vx0"), 1450))
    (narrow,) = findings   # the ends agree: no pass beside the warning
    assert (narrow.severity, narrow.kind, narrow.nodes) == ("warn", "path_mtu", (0, 1, 2))
    assert "VXLAN over IPv4" in narrow.summary and "mtu 1450" in narrow.fix
    assert "node0 vx0 -> node1 vx0: interfaces 1500, the path 1450" in narrow.evidence


def test_a_narrow_router_link_is_named_and_a_path_that_carries_its_ends_mtu_is_not():
    members = (member(0, nic("eth0", "198.18.0.10")), member(1, nic("eth0", "198.18.1.11")))
    (narrow,) = nic_rules.mtu_findings(members, _carrying(full_mesh(range(2), lambda r: "eth0"), 1400))
    assert narrow.kind == "path_mtu" and "router or link" in narrow.summary
    (ok_,) = nic_rules.mtu_findings(members, _carrying(full_mesh(range(2), lambda r: "eth0"), 1500))
    assert ok_.severity == "pass"
    (unknown,) = nic_rules.mtu_findings(members, _carrying(full_mesh(range(2), lambda r: "eth0"), 0))
    assert unknown.severity == "pass", "a path MTU not read says nothing"


def test_speed_warns_on_the_slow_node_and_passes_when_nothing_is_known():
    members = (member(0, nic("eth0", "198.18.0.10")), member(1, nic("eth0", "198.18.0.11", speed=1000)))
    (slow,) = nic_rules.speed_findings(members, {0: ["eth0"], 1: ["eth0"]})
    assert (slow.severity, slow.nodes) == ("warn", (1,))
    unknown = tuple(member(r, nic("eth0", f"198.18.0.{10 + r}", speed=None)) for r in range(2))
    assert nic_rules.speed_findings(unknown, {0: ["eth0"], 1: ["eth0"]})[0].severity == "pass"


def test_ib_port_down_fails_and_uneven_hcas_warn():
    up = IbPort("mlx5_0", 1, "ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)", "ib0")
    down = IbPort("mlx5_1", 1, "DOWN", "InfiniBand", "200 Gb/sec (4X HDR)", "ib1")
    members = (member(0, nic("eth0", "198.18.0.10"), ib=(up, up)), member(1, nic("eth0", "198.18.0.11"), ib=(up, down)))
    findings = nic_rules.ib_findings(members)
    # The down port names node1; two nodes whose sets differ have no majority, so both are
    # named as uneven (majority.split's one tie policy). A third node breaks the tie.
    assert [(f.severity, f.nodes) for f in findings] == [("fail", (1,)), ("warn", (0, 1))]
    third = member(2, nic("eth0", "198.18.0.12"), ib=(up, up))
    assert [(f.severity, f.nodes) for f in nic_rules.ib_findings(members + (third,))] == [
        ("fail", (1,)), ("warn", (1,))]


# --- names no export can carry --------------------------------------------------------------

EVIL = "eth0$(touch /tmp/x)"


def test_the_interface_name_rule_admits_what_a_shell_and_the_libraries_take_as_it_stands():
    assert all(is_safe_ifname(n) for n in ("eth0", "enp3s0f1", "eth0.100", "br-1a2b3c4d5e6f", "a", "x" * 15, "..."))
    assert not any(is_safe_ifname(n) for n in ("", ".", "..", "x" * 16, EVIL, "eth0\n", "eth0 ", "eth:0", "ethé",
                                               "eth0,ens5", "=eth0", "^eth0", "eth/0", None))


def test_a_proven_name_that_fails_the_rule_is_left_out_of_the_exports_and_its_node_named():
    members = THREE[:2] + (member(2, nic(EVIL, "198.18.0.12"), nic("enp3s0f1", "198.18.0.13")),)
    proven = {0: ["eth0"], 1: ["ens5"], 2: [EVIL, "enp3s0f1"]}
    rec = nic_rules.recommendation(members, proven)
    assert rec.cluster == {"NCCL_SOCKET_IFNAME": "=eth0,ens5,enp3s0f1"}
    assert rec.per_node["node2"] == {"GLOO_SOCKET_IFNAME": "enp3s0f1", "TP_SOCKET_IFNAME": "enp3s0f1"}
    (finding,) = nic_rules.unsafe_name_findings(members, proven)
    assert (finding.check, finding.severity, finding.kind, finding.nodes) == ("nic.route", "fail", "unsafe_name", (2,))
    assert finding.evidence == (f"node2: {EVIL!r} is not 1 to 15 letters, digits and ._-",)


def test_route_fails_on_an_unsafe_proven_name_instead_of_passing():
    members = THREE[:2] + (member(2, nic(EVIL, "198.18.0.12")),)
    attempts = full_mesh(range(3), {0: "eth0", 1: "ens5", 2: EVIL}.get)
    assert [(f.severity, f.kind, f.nodes)
            for f in nic_rules.route_findings(members, attempts, nic_rules.proven_interfaces(members, attempts))] == [
        ("fail", "unsafe_name", (2,))]
    healthy = full_mesh(range(3), NAMES.get)
    assert [f.severity
            for f in nic_rules.route_findings(THREE, healthy, nic_rules.proven_interfaces(THREE, healthy))] == ["pass"]


def test_no_recommendation_when_a_nodes_only_proven_name_fails_the_rule_says_so():
    members = THREE[:2] + (member(2, nic(EVIL, "198.18.0.12")),)
    rec = nic_rules.recommendation(members, {0: ["eth0"], 1: [], 2: [EVIL]})
    assert rec.cluster == {} and rec.per_node == {}
    assert rec.reason == ("nothing proven to reach node1 from every peer: see mesh.connect; only interface names "
                          "no export can hold are proven on node2: see nic.route")


# --- per node under torchrun: a host's ranks share its interfaces ---------------------------------

def worker(rank: int, host: str, *nics: Nic, gpus: int = 0) -> Member:
    """A torchrun worker process: a member per rank, the host's facts."""
    m = member(rank, *nics, gpus=gpus)
    return Member(rank, dataclasses.replace(m.facts, hostname=host, fqdn=f"{host}.c"))


# 2 nodes x 2 workers (issue 23's run): ranks 0, 1 on node0, 2, 3 on node1; node1 open only on the
# rendezvous port, so nothing reaches node1's eth0 from node0.
WORKERS = tuple(worker(r, f"node{r // 2}", nic("eth0", f"198.18.0.{10 + r // 2}")) for r in range(4))
HOSTS = {r: f"node{r // 2}" for r in range(4)}


def filtered_node1() -> tuple[Attempt, ...]:
    def attempt(s: int, d: int) -> Attempt:
        address = f"198.18.0.{10 + d // 2}"
        if s // 2 == 0 and d // 2 == 1:
            return Attempt(s, d, "eth0", address, "filtered", None, None, "no answer in 2 s")
        return Attempt(s, d, "eth0", address, "ok", 0.1, "eth0", "connected")
    return tuple(attempt(s, d) for s in range(4) for d in range(4) if s != d)


def test_under_torchrun_a_ranks_sibling_neither_clears_nor_blames_its_node():
    """3 nodes x 2 workers, node2 firewalled: its ranks reach each other on the host, which
    proves nothing about the network; node2 alone is named, as without torchrun."""
    hosts = {r: f"node{r // 2}" for r in range(6)}
    attempts = tuple((failed(s, d, "eth0") if d // 2 == 2 and s // 2 != 2 else ok(s, d, "eth0"))
                     for s in range(6) for d in range(6) if s != d)
    (finding,) = mesh_rules.mesh_findings(hosts, attempts)
    assert finding.nodes == (4, 5), finding
    assert directions(finding) == [f"node{s} -> node2 (ranks {s * 2}, {s * 2 + 1} -> {d})"
                                   for s in (0, 1) for d in (4, 5)]
    members = tuple(worker(r, hosts[r], nic("eth0", f"198.18.0.{10 + r // 2}")) for r in range(6))
    assert nic_rules.proven_interfaces(members, attempts) == {0: ["eth0"], 1: ["eth0"], 2: ["eth0"], 3: ["eth0"],
                                                              4: [], 5: []}


def test_under_torchrun_the_libraries_choices_are_said_once_per_node():
    proven = nic_rules.proven_interfaces(WORKERS, filtered_node1())
    assert proven == {0: ["eth0"], 1: ["eth0"], 2: [], 3: []}
    gpu_workers = tuple(worker(r, f"node{r // 2}", nic("eth0", f"198.18.0.{10 + r // 2}"), gpus=2) for r in range(4))
    (nccl,) = nic_rules.nccl_findings(gpu_workers, proven)
    assert said(nccl) == ("nic.nccl_default", "fail", "", (2, 3))
    assert len(nccl.evidence) == 1 and nccl.evidence[0].startswith(
        "node1 (ranks 2, 3): NCCL would use eth0; eth0 not reached by every peer that tried "
        "(mesh.connect names which) (")
    (gloo,) = nic_rules.gloo_findings(WORKERS, proven)
    assert said(gloo) == ("nic.gloo_default", "fail", "", (2, 3))
    assert gloo.evidence == ("node1 (ranks 2, 3): hostname: eth0 (198.18.0.11): the hostname's first bindable "
                             "address; eth0 not reached by every peer that tried (mesh.connect names which)",)
    (tp,) = nic_rules.tp_findings(WORKERS, proven)
    assert said(tp) == ("nic.tp_default", "warn", "", (2, 3))
    assert len(tp.evidence) == 1 and "eth0 not reached by every peer" in tp.evidence[0]
    rec = nic_rules.recommendation(WORKERS, proven)
    assert rec.reason == "nothing proven to reach node1 from every peer: see mesh.connect"


def test_under_torchrun_routes_are_a_line_per_node_pair():
    healthy = full_mesh(range(4), lambda r: "eth0")
    (route,) = nic_rules.route_findings(WORKERS, healthy, nic_rules.proven_interfaces(WORKERS, healthy))
    assert said(route) == ("nic.route", "pass", "", (0, 1, 2, 3))
    assert route.evidence == ("node0 eth0 -> node1 eth0 (ranks 0, 1 -> 2, 3)",
                              "node1 eth0 -> node0 eth0 (ranks 2, 3 -> 0, 1)")


def test_routes_are_a_line_per_node_and_route_naming_its_peers():
    """800,000 lines of node pairs at 100,000 sampling ranks: a node's route is one line."""
    healthy = full_mesh(range(3), NAMES.__getitem__)
    (route,) = nic_rules.route_findings(THREE, healthy, nic_rules.proven_interfaces(THREE, healthy))
    assert route.evidence[0] == "node0 eth0 -> node1 ens5"
    assert route.evidence[1] == "node0 eth0 -> node2 enp3s0f1"
    four = THREE + (member(3, nic("eth0", "198.18.0.13")),)
    same = full_mesh(range(4), lambda r: "eth0")
    (route,) = nic_rules.route_findings(four, same, nic_rules.proven_interfaces(four, same))
    assert route.evidence == tuple(f"node{s} eth0 -> {', '.join(f'node{d}' for d in range(4) if d != s)} eth0"
                                   for s in range(4))


def test_a_node_with_no_proven_path_has_no_speed_to_warn_about():
    """The mesh fault is mesh.connect's; 'node1: unknown' is no warning about speed."""
    proven = nic_rules.proven_interfaces(WORKERS, filtered_node1())
    (speed,) = nic_rules.speed_findings(WORKERS, proven)
    assert (speed.severity, speed.nodes) == ("pass", (0, 1))
    assert speed.evidence == ("node0 (ranks 0, 1): 10000 Mb/s",
                              "node1 (ranks 2, 3): no path proven, so no link to rate (see mesh.connect)")
    assert nic_rules.speed_findings(WORKERS, {0: [], 1: [], 2: [], 3: []}) == [], "nothing proven: no pass"
    members = (member(0, nic("eth0", "198.18.0.10")), member(1, nic("eth0", "198.18.0.11", speed=None)))
    (unknown,) = nic_rules.speed_findings(members, {0: ["eth0"], 1: ["eth0"]})
    assert (unknown.severity, unknown.nodes) == ("warn", (1,))
    assert unknown.evidence == ("node1: speed unknown", "node0: 10000 Mb/s")


def test_one_node_is_said_as_that_node_not_every_node():
    """netcheck local: one node, nothing tested against peers."""
    me = (member(0, nic("eth0", "198.18.0.10")),)
    set_here = (member(0, nic("eth0", "198.18.0.10"), env={"NCCL_SOCKET_IFNAME": "eth0"}),)
    assert [said(f) for f in nic_rules.nccl_findings(me, None) + nic_rules.route_findings(me, (), {})
            + nic_rules.ib_findings(me) + nic_rules.route_findings(set_here, (), {})] == [
        ("nic.nccl_default", "pass", "", (0,)), ("nic.route", "pass", "", (0,)), ("nic.ib", "pass", "", (0,)),
        ("nic.route", "pass", "", (0,))]
    proven = nic_rules.proven_interfaces(THREE, full_mesh(range(3), NAMES.get))
    assert said(nic_rules.nccl_findings(THREE, proven)[0]) == ("nic.nccl_default", "pass", "", (0, 1, 2))


def test_a_setting_from_nccl_conf_is_named_with_its_file_and_node():
    """/etc/nccl.conf says NCCL_SOCKET_IFNAME=ib0 on a node with no ib0 (issue 49 item 6): the
    finding says the value, where it came from and on which node, and the fix names the file."""
    bad = member(1, nic("eth0", "198.18.0.11"), env={"NCCL_SOCKET_IFNAME": "ib0"})
    bad = dataclasses.replace(bad, facts=dataclasses.replace(bad.facts,
                                                             socket_env_from={"NCCL_SOCKET_IFNAME": "/etc/nccl.conf"}))
    (found,) = nic_rules.route_findings((member(0, nic("eth0", "198.18.0.10")), bad), (), {})
    assert found.severity == "fail" and found.nodes == (1,)
    assert found.summary.startswith("node1: NCCL_SOCKET_IFNAME=ib0 from /etc/nccl.conf: ")
    assert "/etc/nccl.conf" in found.fix


def test_an_nccl_environment_plugin_is_said_to_set_what_netcheck_cannot_see():
    plugged = member(0, nic("eth0", "198.18.0.10"), env={"NCCL_ENV_PLUGIN": "libnccl-env-site.so"})
    (found,) = nic_rules.route_findings((plugged, member(1, nic("eth0", "198.18.0.11"))), (), {})
    assert found.severity == "pass" and found.evidence[-1] == (
        "node0: NCCL_ENV_PLUGIN=libnccl-env-site.so: NCCL (2.28.7 on) takes settings from that plugin too, "
        "which netcheck cannot read")
