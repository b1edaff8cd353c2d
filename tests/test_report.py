"""The text report: what each finding line says about where it points."""

from __future__ import annotations

import dataclasses

from netcheck.core.model import Finding, Launch, NodeEntry, NodeFacts, Report

from netcheck.core.nictable import NicTable
from netcheck.render.text import render_text

SLOW = Finding("bw.straggler", "warn", (0, 1), "intra-node all_reduce busbw on node0 is slow", (), "look")


def entry(rank: int, hostname: str, source: str) -> NodeEntry:
    facts = NodeFacts(run_id="r", hostname=hostname, fqdn=hostname, hostname_addresses=(),
                      launch=Launch(source, rank, 2, 2, 2), shm_bytes=None, gpus=0,
                      nics=NicTable((), (), None), socket_env={}, reach=None, version="0")
    return NodeEntry(rank, hostname, "198.18.0.10", facts)


def report(source: str) -> Report:
    return Report(run_id="r", node_rank=0, role="host", verdict="warn",
                  nodes=(entry(0, "node0", source), entry(1, "node0" if source == "torchrun" else "node1", source)),
                  findings=(SLOW,), recommend={}, recommend_per_node={}, env_table=(), bandwidth=None,
                  timings={}, unfinished=None, healthy_nodes=(), faulty_nodes=())


def test_findings_point_at_node_ranks_with_their_hostnames():
    text = render_text(report("flags"))
    assert "host (node rank 0)" in text
    assert "is slow  [node 0 (node0), 1 (node1)]" in text


def test_under_torchrun_findings_point_at_process_ranks():
    text = render_text(report("torchrun"))
    assert "host (rank 0)" in text
    assert "is slow  [rank 0 (node0), 1 (node0)]" in text


def test_a_passing_finding_points_nowhere():
    text = render_text(dataclasses.replace(report("flags"), findings=(dataclasses.replace(SLOW, severity="pass"),)))
    assert "[node" not in text


def test_an_exact_nccl_list_is_explained_where_it_is_pasted_from():
    rep = dataclasses.replace(report("flags"), recommend={"NCCL_SOCKET_IFNAME": "=eth0,ens5"})
    text = render_text(rep)
    assert "'=' is NCCL's syntax for exact names" in text and "export NCCL_SOCKET_IFNAME==eth0,ens5" in text
    plain = render_text(dataclasses.replace(rep, recommend={"NCCL_SOCKET_IFNAME": "eth0"}))
    assert "exact names" not in plain


def test_no_settings_to_paste_says_why():
    text = render_text(dataclasses.replace(report("flags"), recommend_note="nothing proven to reach node1"))
    assert "# no settings to paste: nothing proven to reach node1" in text
    assert "no settings to paste" not in render_text(report("flags"))
