"""NCCL's IB choices (rules.hcachoice) and the RDMA rules, over fixture trees of GPU nodes read by
facts.rdma (tests/sysfs_fixtures.py): each fault of the catalog applied to one node of three."""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from pathlib import Path

import pytest

import builders
from netcheck.core.rdmarecords import Gid, LibNccl
from netcheck.facts.nics import roce_active_mtu
from netcheck.facts.rdma import acs_state, libnccl_choice, read_rdma
from netcheck.rules import rdma as rdma_rules
from netcheck.rules.hcachoice import gid_choice, ib_matches, ib_ports, parse_ib_hca
from sysfs_fixtures import build, fake_libnccl

TORCHS = LibNccl("torch", "/venv/nvidia/nccl/lib/libnccl.so.2", "2.21.5", "/venv/nvidia/nccl/lib/libnccl.so.2")


@functools.cache
def rdma_of(layout: str, rank: int, faults: tuple[str, ...]):
    """facts.rdma's reading of a fixture tree, built once per session for each node it is
    asked for (an HGX tree is about 2,000 files: building it was most of these tests' time);
    the facts are frozen, so the tests share them."""
    with tempfile.TemporaryDirectory(prefix="netcheck-rdma-") as folder:
        root = build(Path(folder), layout, rank, faults)
        return dataclasses.replace(read_rdma(str(root / "sys"), str(root / "proc"), {}), libnccl=TORCHS)


def node(rank: int, layout: str, faults: tuple[str, ...] = (), env: dict | None = None):
    m = builders.member(rank, env=env or {})
    return dataclasses.replace(m, facts=dataclasses.replace(m.facts, rdma=rdma_of(layout, rank, faults)))


def cluster(layout: str, faults: tuple[str, ...] = (), env1: dict | None = None):
    """Three nodes of one layout; the faults and env1 on node1."""
    return tuple(node(r, layout, faults if r == 1 else (), env1 if r == 1 else None) for r in range(3))


def said(findings, check: str) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(f.severity, f.kind, f.nodes) for f in findings if f.check == check]


# --- NCCL_IB_HCA ----------------------------------------------------------------------------

def test_ib_hca_syntax_follows_nccl():
    # init.cc: searchNot = userIbEnv[0] == '^'; then searchExact = userIbEnv[0] == '='
    spec = parse_ib_hca("^=mlx5_1:1,,mlx5_2")
    assert (spec.exclude, spec.exact, spec.entries) == (True, True, (("mlx5_1", 1), ("mlx5_2", -1)))
    # matchIf: "matchLen = matchExact ? strlen(string) + 1 : strlen(ref)": a prefix unless exact
    assert ib_matches(parse_ib_hca("mlx5_1"), "mlx5_10", 1)
    assert not ib_matches(parse_ib_hca("=mlx5_1"), "mlx5_10", 1)
    # matchPort: -1 on either side matches; a named port only itself
    assert not ib_matches(parse_ib_hca("mlx5_0:2"), "mlx5_0", 1)
    # matchIfList: "if (listSize == 0) return true;", XORed with searchNot
    assert ib_matches(parse_ib_hca(""), "mlx5_0", 1) and not ib_matches(parse_ib_hca("^mlx5"), "mlx5_0", 1)


def test_nccl_uses_active_ports_that_match():
    ports = node(0, "hgx", ("port_down",)).facts.rdma.ports
    # "if (portAttr.state != IBV_PORT_ACTIVE) continue;"
    assert [p.device for p in ib_ports(ports, {})] == [f"mlx5_{i}" for i in range(10) if i != 3]
    assert [p.device for p in ib_ports(ports, {"NCCL_IB_HCA": "^mlx5_8,mlx5_9"})] == \
        [f"mlx5_{i}" for i in range(8) if i != 3]


# --- the GID index --------------------------------------------------------------------------

@pytest.mark.parametrize("env, version, index, problem", [
    ({}, (2, 30, 7), 3, ""),                                       # RoCE v2, IPv4: the one that works
    ({}, (2, 20, 5), 0, "link_local"),                             # NCCL_PARAM(IbGidIndex, ..., 0) before 2.21
    ({"NCCL_IB_GID_INDEX": "1"}, (2, 30, 7), 1, "link_local"),     # "if (*gidIndex >= 0) return"
    ({"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, (2, 30, 7), 5, ""),
    ({"NCCL_IB_ROCE_VERSION_NUM": "1"}, (2, 30, 7), 2, "roce_v1"),
    ({"NCCL_IB_ADDR_RANGE": "198.19.0.0/16"}, (2, 30, 7), 0, "link_local"),   # no GID in the range
])
def test_gid_index_follows_ncclIbGetGidIndex(env, version, index, problem):
    port = node(0, "roce").facts.rdma.ports[0]
    pick = gid_choice(port, env, version)
    assert (pick.index, pick.problem) == (index, problem), pick


def test_a_port_with_no_ipv4_address_leaves_nccl_on_the_link_local_gid():
    port = node(0, "roce", ("no_ipv4",)).facts.rdma.ports[0]
    assert (gid_choice(port, {}, (2, 30, 7)).index, gid_choice(port, {}, (2, 30, 7)).problem) == (0, "link_local")


# --- the rules ------------------------------------------------------------------------------

def test_healthy_hgx_nodes_pass_and_the_recommendation_names_the_rails():
    members = cluster("hgx")
    findings = rdma_rules.rdma_findings(members)
    assert {f.check: f.severity for f in findings} == {
        "rdma.port": "pass", "rdma.gpudirect": "pass", "rdma.pcie": "pass", "rdma.libnccl": "pass"}
    rec = rdma_rules.ib_recommendation(members, None)
    # the storage ports (mlx5_8, mlx5_9) are no GPU's nearest: left out
    assert rec.cluster == {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}:1" for i in range(8))}
    assert rdma_rules.fabric_gbps(members[0]) == 4000   # all 10 NDR ports NCCL would use unset


def test_cpu_nodes_say_there_is_no_rdma_device_in_one_line():
    members = cluster("cpu")
    findings = rdma_rules.rdma_findings(members)
    assert said(findings, "rdma.port") == [("pass", "", (0, 1, 2))] and len(findings) == 1
    assert "no RDMA device" in findings[0].summary
    assert rdma_rules.ib_recommendation(members, None).cluster == {}


@pytest.mark.parametrize("layout, fault, check, expected", [
    ("hgx", "slow_port", "rdma.port", [("warn", "slower_port", (1,))]),
    ("hgx", "ethernet", "rdma.port", [("fail", "link_layer", (1,))]),
    ("hgx", "no_peermem", "rdma.gpudirect", [("warn", "", (1,))]),
    ("hgx", "acs", "rdma.pcie", [("warn", "acs", (1,))]),
    ("hgx", "far_nic", "rdma.pcie", [("warn", "far_nic", (1,))]),
    ("roce", "no_ipv4", "rdma.gid", [("fail", "unreachable_gid", (1,))]),
    ("roce", "roce_mtu", "rdma.mtu", [("warn", "", (1,))]),
])
def test_each_fault_is_named_on_its_node(layout, fault, check, expected):
    findings = rdma_rules.rdma_findings(cluster(layout, (fault,)))
    assert said(findings, check) == expected, [f for f in findings if f.check == check]
    others = [f for f in findings if f.check != check and f.severity != "pass"]
    assert not others, others


def test_the_recommendation_keeps_one_link_layer():
    members = cluster("hgx")
    roce = [dataclasses.replace(p, link_layer="Ethernet") if p.device == "mlx5_9" else p
            for p in members[0].facts.rdma.ports]
    members = tuple(dataclasses.replace(m, facts=dataclasses.replace(m.facts, rdma=dataclasses.replace(
        m.facts.rdma, ports=tuple(roce), gpus=()))) for m in members)     # no GPUs: every active port a candidate
    assert rdma_rules.ib_hca_value(members) == "=" + ",".join(f"mlx5_{i}:1" for i in range(9))


def test_a_port_down_leaves_its_rail_out_of_the_recommendation():
    rec = rdma_rules.ib_recommendation(cluster("hgx", ("port_down",)), None)
    assert rec.cluster["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8) if i != 3)


def test_a_gid_of_another_family_on_one_node_fails():
    members = cluster("roce", env1={"NCCL_IB_ADDR_FAMILY": "AF_INET6"})
    assert said(rdma_rules.gid_findings(members), "rdma.gid") == [("fail", "gid_family", (1,))]
    # node1 asks for IPv6: no one index holds a good GID of each node's family
    assert rdma_rules.gid_index_values(members) == (None, {"node0": 3, "node1": 5, "node2": 3})


def test_gid_indexes_that_differ_warn_and_are_pinned_per_node():
    members = list(cluster("roce"))
    moved = lambda g: dataclasses.replace(g, index=g.index + 4) if g.index in (2, 3) else g  # noqa: E731
    port = members[1].facts.rdma.ports[0]
    ports = (dataclasses.replace(port, gids=tuple(moved(g) for g in port.gids)),) + members[1].facts.rdma.ports[1:]
    ports = tuple(dataclasses.replace(p, gids=tuple(moved(g) for g in p.gids)) for p in ports)
    members[1] = dataclasses.replace(members[1], facts=dataclasses.replace(
        members[1].facts, rdma=dataclasses.replace(members[1].facts.rdma, ports=ports)))
    assert said(rdma_rules.gid_findings(tuple(members)), "rdma.gid") == [("warn", "gid_index_differs", (1,))]
    rec = rdma_rules.ib_recommendation(tuple(members), None)
    assert "NCCL_IB_GID_INDEX" not in rec.cluster
    assert {h: v["NCCL_IB_GID_INDEX"] for h, v in rec.per_node.items()} == {"node0": "3", "node1": "7", "node2": "3"}


def test_a_bad_gid_on_every_node_is_fixed_by_one_index():
    members = cluster("roce", env1={"NCCL_IB_GID_INDEX": "0"})
    assert said(rdma_rules.gid_findings(members), "rdma.gid") == [("fail", "unreachable_gid", (1,))]
    assert rdma_rules.ib_recommendation(members, None).cluster["NCCL_IB_GID_INDEX"] == "3"


def test_open_kernel_modules_give_dma_buf_without_peermem():
    members = cluster("roce")
    bare = tuple(dataclasses.replace(m, facts=dataclasses.replace(
        m.facts, rdma=dataclasses.replace(m.facts.rdma, peermem=False))) for m in members)
    assert said(rdma_rules.gpudirect_findings(bare), "rdma.gpudirect") == [("pass", "", (0, 1, 2))]


def test_another_libnccl_on_the_library_path_is_named(tmp_path):
    folder = fake_libnccl(tmp_path / "lib", "2.19.3")
    lib = libnccl_choice({"LD_LIBRARY_PATH": f"/nonexistent:{folder}"}, TORCHS.path)
    assert (lib.source, lib.version, lib.torch_path) == ("LD_LIBRARY_PATH", "2.19.3", TORCHS.path)
    members = list(cluster("hgx"))
    members[1] = dataclasses.replace(members[1], facts=dataclasses.replace(
        members[1].facts, rdma=dataclasses.replace(members[1].facts.rdma, libnccl=lib)))
    assert said(rdma_rules.libnccl_findings(tuple(members)), "rdma.libnccl") == [
        ("fail", "versions_differ", (1,)), ("warn", "not_torchs", (1,))]


def test_acs_reads_the_extended_capability_list(tmp_path):
    root = build(tmp_path / "n", "hgx", 0, ("acs",))
    states = {b.address: b.acs for g in read_rdma(str(root / "sys"), str(root / "proc"), {}).gpus for b in g.bridges}
    assert states["0000:12:00.0"] == "on" and states["0000:22:00.0"] == "off"
    short = tmp_path / "config"
    short.write_bytes(bytes(64))        # what a non-root reader gets
    assert acs_state(short) == "unread"


def test_a_gid_table_entry_of_the_fixture_is_what_sysfs_writes():
    port = node(0, "roce").facts.rdma.ports[0]
    assert port.gids[3] == Gid(3, "0000:0000:0000:0000:0000:ffff:c612:0001", "RoCE v2", "ens0np0")
    assert (port.active_mtu, port.gid_table_len) == (4096, 255)


def test_busbw_on_nccl_is_judged_against_the_rdma_ports_of_the_slowest_node():
    from dataclasses import replace

    from netcheck.rules.bw import bandwidth_findings
    from test_rules_bw import NAMES, result

    line, fabric = {0: 100.0, 1: 100.0, 2: 100.0}, {0: 3200.0, 1: 3200.0, 2: 1600.0}   # 1600 Gb/s = 200 GB/s

    def busbw(backend: str, rates):
        res = replace(result(busbw=40.0, backend=backend), hostnames={str(n): h for n, h in NAMES.items()})
        return next(f for f in bandwidth_findings(res, line, None, (), rates) if f.check == "bw.busbw")

    judged = busbw("nccl", fabric)
    assert judged.severity == "warn" and "20% of" in judged.summary and "1600 Gb/s" in judged.summary, judged
    assert busbw("nccl", None).severity == "pass"                   # the sockets' 100 Gb/s: 320%
    assert busbw("gloo", fabric).severity == "pass"                 # gloo never moves data over RDMA
    assert busbw("nccl", {0: 3200.0, 1: None, 2: 1600.0}).severity == "pass"   # a node without: the NICs'


def test_the_loader_order_and_a_wheels_version(tmp_path):
    wheel = fake_wheel(tmp_path / "site", "2.21.5")
    preload = fake_libnccl(tmp_path / "pre", "2.18.1") / "libnccl.so.2"
    other = fake_libnccl(tmp_path / "other", "2.19.3")
    assert libnccl_choice({}, str(wheel)) == LibNccl("torch", str(wheel), "2.21.5", str(wheel))
    # ld.so(8): LD_PRELOAD first, then LD_LIBRARY_PATH, before libtorch_cuda.so's DT_RUNPATH
    chosen = libnccl_choice({"LD_PRELOAD": f"libfoo.so {preload}", "LD_LIBRARY_PATH": str(other)}, str(wheel))
    assert (chosen.source, chosen.version) == ("LD_PRELOAD", "2.18.1")
    assert libnccl_choice({}, "") == LibNccl("none", "", "", "")


def fake_wheel(site, version: str):
    """torch's nvidia-nccl wheel as pip lays it out: site/nvidia/nccl/lib/libnccl.so.2 and its dist-info."""
    lib = site / "nvidia/nccl/lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"")
    (site / f"nvidia_nccl_cu12-{version}.dist-info").mkdir()
    return lib / "libnccl.so.2"


@pytest.mark.parametrize("netdev_mtu, active", [(9000, 4096), (4200, 4096), (4191, 2048), (1500, 1024), (300, None)])
def test_roce_active_mtu_is_the_largest_ib_mtu_the_netdev_holds(netdev_mtu, active):
    # include/rdma/ib_addr.h iboe_get_mtu: 96 bytes of headers, then 4096, 2048, 1024, 512, 256
    assert roce_active_mtu(netdev_mtu) == active
