"""rules/gloodial.py: gloo dials each pair of ranks once, from the larger address to the smaller
(pytorch/gloo gloo/transport/tcp/device.cc, Device::isInitiator: a memcmp of the two addresses),
so a direction that connects on no interface stops gloo only where gloo dials it; NCCL dials both
ways. Issue 64: a one-way firewall and a NAT'd container failed mesh.connect, and the gloo job ran
where the node cut off inbound was the one with the larger address."""

from __future__ import annotations

from builders import LOOPBACK, member, nic
from netcheck.core.meshrecords import OUTBOUND, Attempt, PathCauses, Translation
from netcheck.core.model import NCCL_RDMA, NCCL_SOCKET, STOPS
from netcheck.rules import gloodial
from netcheck.rules import mesh as mesh_rules
from netcheck.rules import nic as nic_rules
from netcheck.rules.registry import impacted

NAMES = {r: f"node{r}" for r in range(3)}


def node(rank: int, address: str, host: str | None = None, env: dict | None = None):
    """A node whose hostname resolves to its eth0 address, where gloo binds."""
    return member(rank, host, nics=(LOOPBACK, nic("eth0", f"{address}/24")), addresses=(address,), env=env)


THREE = tuple(node(r, f"198.18.0.{10 + r}") for r in range(3))


def attempt(src: int, dst: int, cut: set[tuple[int, int]], ifname: str = "eth0") -> Attempt:
    address = f"198.18.0.{10 + dst}"
    if (src, dst) in cut:
        return Attempt(src, dst, ifname, address, "filtered", None, None, "no answer in 2 s")
    return Attempt(src, dst, ifname, address, "ok", 0.1, "eth0", "connected")


def mesh(*cut: tuple[int, int], ranks=range(3)) -> tuple[Attempt, ...]:
    return tuple(attempt(s, d, set(cut)) for s in ranks for d in ranks if s != d)


def test_gloo_compares_addresses_as_numbers_within_a_family():
    ends = gloodial.gloo_ends((node(0, "10.0.0.9"), node(1, "10.0.0.10"), node(2, "fd00::1")))
    assert gloodial.never_dials(ends, 0, 1), "10.0.0.10 is the larger (bytes), whatever the text says"
    assert not gloodial.never_dials(ends, 1, 0)
    assert not gloodial.never_dials(ends, 0, 2) and not gloodial.never_dials(ends, 2, 0), "gloo pairs no families"


def test_a_node_whose_gloo_binds_loopback_tells_nothing_of_its_dialling():
    trapped = member(1, nics=(LOOPBACK, nic("eth0", "198.18.0.11/24")), addresses=("127.0.1.1",))
    assert set(gloodial.gloo_ends((THREE[0], trapped))) == {0}


def test_a_one_way_firewall_gloo_never_dials_stops_nccl_alone_and_says_why():
    """node2 drops node1's connects: gloo's pair of them is dialled by node2 (198.18.0.12, the
    larger), which connects, so a gloo job runs; NCCL's rings need node1 -> node2."""
    (finding,) = mesh_rules.mesh_findings(NAMES, mesh((1, 2)), members=THREE)
    assert (finding.severity, finding.nodes) == ("fail", (1, 2))
    assert finding.impact.on == (NCCL_SOCKET, NCCL_RDMA) and finding.impact.effect == STOPS
    assert finding.impact.why == (
        "gloo dials each pair of ranks once, from the larger address to the smaller (gloo's Device::isInitiator): "
        "here node2 (198.18.0.12) -> node1 (198.18.0.11), which connects, never the way that fails; NCCL dials "
        "both ways")


def test_a_one_way_firewall_in_the_direction_gloo_dials_stops_gloo_too():
    (finding,) = mesh_rules.mesh_findings(NAMES, mesh((2, 1)), members=THREE)
    assert finding.impact is None, "the registry's: every library"
    assert set(impacted([finding])[0].impact.on) == {"gloo", NCCL_SOCKET, NCCL_RDMA}


def test_both_directions_cut_stop_gloo():
    (finding,) = mesh_rules.mesh_findings(NAMES, mesh((1, 2), (2, 1)), members=THREE)
    assert finding.impact is None


def test_where_gloo_dials_the_other_way_on_another_interface_than_its_own_it_is_not_spared():
    """gloo dials node1's gloo interface (eth0); node2 reached node1 only on another."""
    attempts = tuple(a for a in mesh((1, 2)) if (a.src, a.dst) != (2, 1)) + (attempt(2, 1, set(), "eth1"),)
    (finding,) = mesh_rules.mesh_findings(NAMES, attempts, members=THREE)
    assert finding.impact is None


def test_a_joiner_knowing_only_itself_narrows_nothing():
    (finding,) = mesh_rules.mesh_findings(NAMES, mesh((1, 2)), members=THREE[1:2])
    assert finding.impact is None


def test_under_torchrun_the_why_names_each_node_pair_once():
    hosts = {r: f"node{r // 2}" for r in range(4)}
    workers = tuple(node(r, f"198.18.0.{10 + r // 2}", host=hosts[r]) for r in range(4))
    cut = {(s, d) for s in (0, 1) for d in (2, 3)}
    attempts = tuple(Attempt(s, d, "eth0", f"198.18.0.{10 + d // 2}", "filtered" if (s, d) in cut else "ok",
                             None if (s, d) in cut else 0.1, "eth0", "x") for s in range(4) for d in range(4) if s != d)
    (finding,) = mesh_rules.mesh_findings(hosts, attempts, members=workers)
    assert "here node1 (198.18.0.11) -> node0 (198.18.0.10), which connects," in finding.impact.why


def test_gloos_address_passes_where_only_a_direction_it_never_dials_fails():
    """The one-way firewall again: nic.gloo_default no longer calls node2's eth0 unreached, as
    gloo never dials node1 -> node2; it says why beside its pass. NCCL's choice still fails."""
    attempts = mesh((1, 2))
    proven = nic_rules.proven_interfaces(THREE, attempts)
    (gloo,) = nic_rules.gloo_findings(THREE, proven, attempts)
    assert gloo.severity == "pass", gloo
    assert gloo.evidence == ("node1 -> node2 connects on no gloo interface, a direction gloo never dials: node2 "
                             "dials node1 (gloo's Device::isInitiator: the larger address dials)",)
    (nccl,) = nic_rules.nccl_findings(THREE, proven)
    assert nccl.severity != "pass" and nccl.nodes == (2,)
    (other_way,) = nic_rules.gloo_findings(THREE, nic_rules.proven_interfaces(THREE, mesh((2, 1))), mesh((2, 1)))
    assert (other_way.severity, other_way.nodes) == ("fail", (1,))


def test_a_translated_node_whose_address_is_the_larger_stops_nccl_alone():
    """A container behind NAT: no peer reaches its own address, and it dials out through the
    masquerade as the rendezvous does. gloo dials out of it where its address sorts above its peers'."""
    names = {0: "node0", 1: "node1", 2: "c0ffee2"}

    def natted(own: str):
        members = (*THREE[:2], node(2, own, host="c0ffee2"))
        attempts = tuple(Attempt(s, d, "eth0", own if d == 2 else f"198.18.0.{10 + d}",
                                 "unreachable" if d == 2 else "ok", None if d == 2 else 0.1, "eth0", "x")
                         for s in range(3) for d in range(3) if s != d)
        nat = Translation(2, OUTBOUND, (own,), ("198.18.0.12",))
        (finding,) = mesh_rules.mesh_findings(names, attempts, PathCauses((nat,)), members)
        return finding

    above = natted("198.19.200.2")
    assert above.kind == "translated" and above.impact.on == (NCCL_SOCKET, NCCL_RDMA)
    assert "c0ffee2 (198.19.200.2) -> node0 (198.18.0.10), c0ffee2 (198.19.200.2) -> node1 (198.18.0.11)" \
        in above.impact.why
    below = natted("172.17.0.2")
    assert below.kind == "translated" and below.impact is None, "its peers dial it: gloo stops too"
