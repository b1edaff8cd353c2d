"""The text report: what each finding line says about where it points."""

from __future__ import annotations

import dataclasses
import shlex

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


def test_a_thousand_node_report_with_five_faulty_nodes_fits_one_screen_and_names_them_all():
    n, lost, missing, cut = 1024, (17,), (1022, 1023), (300, 301)
    names = {r: f"gpu{r:04d}" for r in range(n)}
    faulty = tuple(names[r] for r in lost + missing + cut)
    findings = (
        Finding("rdzv.listen", "pass", (0,), "the host listens on port 29500"),
        Finding("rdzv.join", "fail", (1022,), "node rank 1022 never joined in 30 s; 1022 of 1024 nodes joined",
                tuple(f"joined: rank {r} {names[r]}" for r in range(1022)), "start it", "missing"),
        Finding("rdzv.join", "fail", (1023,), "node rank 1023 never joined in 30 s; 1022 of 1024 nodes joined",
                tuple(f"joined: rank {r} {names[r]}" for r in range(1022)), "start it", "missing"),
        Finding("rdzv.join", "fail", lost, "gpu0017 stopped answering during the mesh phase", (), "look",
                "lost_in_mesh"),
        Finding("mesh.connect", "fail", cut, "2 node(s) cannot be reached from 1017 others",
                tuple(f"{names[r]} -> {names[c]}: filtered" for c in cut for r in range(1017)), "open the ports"),
        Finding("nic.mtu", "pass", tuple(range(n)), "both ends of every path agree on MTU"),
    )
    rep = Report(run_id="big", node_rank=0, role="host", verdict="fail",
                 nodes=tuple(entry(r, names[r], "flags") for r in range(1022)), findings=findings, recommend={},
                 recommend_per_node={}, env_table=(), bandwidth=None, timings={"rendezvous": 30.0},
                 unfinished=None, healthy_nodes=tuple(names[r] for r in range(1022) if names[r] not in faulty),
                 faulty_nodes=faulty)
    text = render_text(rep)
    assert len(text.splitlines()) <= 60, text
    assert all(name in text for name in faulty), text
    assert "1022 nodes: 1019 healthy, 5 faulty" in text
    assert "... 1018 more (-v, or the JSON)" in text
    assert "PASS  2 more checks: rdzv.listen, nic.mtu (-v for each)" in text
    assert "most named (findings): node rank 1022 (1), node rank 1023 (1), gpu0017 (1), gpu0300 (1), gpu0301 (1)" in text
    assert len(render_text(rep, verbose=True).splitlines()) > 3000, "-v keeps every line"


def test_an_export_value_is_one_shell_word_and_a_hostname_cannot_end_its_comment():
    rep = dataclasses.replace(report("flags"), recommend={"NCCL_SOCKET_IFNAME": "eth0"}, recommend_per_node={
        "node1\nexport LD_PRELOAD=/tmp/x.so": {"GLOO_SOCKET_IFNAME": "eth0$(touch /tmp/x)", "TP_SOCKET_IFNAME": ""}})
    lines = render_text(rep).split("\n")
    assert "# on node1\\x0aexport LD_PRELOAD=/tmp/x.so only:" in lines
    exports = [line for line in lines if line.startswith("export")]
    assert exports == ["export NCCL_SOCKET_IFNAME=eth0", "export GLOO_SOCKET_IFNAME='eth0$(touch /tmp/x)'",
                       "export TP_SOCKET_IFNAME=''"]
    assert [shlex.split(line) for line in exports][1] == ["export", "GLOO_SOCKET_IFNAME=eth0$(touch /tmp/x)"]


def test_a_run_id_is_shown_once_escaped():
    text = render_text(dataclasses.replace(report("flags"), run_id="job\x1b[2J"))
    assert text.startswith("netcheck ") and "run 'job\\x1b[2J'" in text
