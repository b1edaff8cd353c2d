"""The text report: what each finding line says about where it points."""

from __future__ import annotations

import dataclasses
import shlex

import builders
from netcheck.core.model import Finding, Impact, NodeEntry, Report
from netcheck.render.text import render_text
from netcheck.rules.registry import impacted

SLOW = Finding(check="bw.straggler", severity="warn", nodes=(0, 1),
               summary="intra-node all_reduce busbw on node0 is slow", fix="look")


def entry(rank: int, hostname: str, source: str) -> NodeEntry:
    facts = builders.facts(hostname, launched=builders.launch(rank, 2, source, nproc=2))
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
    # A host's ranks are listed together, the host named once.
    assert "is slow  [node0: ranks 0, 1]" in text


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
        Finding(check="rdzv.listen", severity="pass", nodes=(0,), summary="the host listens on port 29500"),
        Finding(check="rdzv.join", severity="fail", nodes=missing,
                summary="node ranks 1022-1023 never joined in 30 s; 1022 of 1024 nodes joined",
                evidence=tuple(f"joined: rank {r} {names[r]}" for r in range(1022)), fix="start them", kind="missing"),
        Finding(check="rdzv.join", severity="fail", nodes=lost,
                summary="gpu0017 stopped answering during the mesh phase", fix="look", kind="lost_in_mesh"),
        Finding(check="mesh.connect", severity="fail", nodes=cut,
                summary="2 node(s) cannot be reached from 1017 others",
                evidence=tuple(f"{names[r]} -> {names[c]}: filtered" for c in cut for r in range(1017)),
                fix="open the ports"),
        Finding(check="nic.mtu", severity="pass", nodes=tuple(range(n)),
                summary="both ends of every path agree on MTU"),
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
    assert ("most named (findings): node rank 1022 (1), node rank 1023 (1), gpu0017 (1), gpu0300 (1), gpu0301 (1)"
            in text)
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
    assert text.startswith("netcheck ") and "run id 'job\\x1b[2J'" in text


# --- one node's report: its words ------------------------------------------------------------------

def local_report(rank: int | None = None, source: str = "arrival") -> Report:
    node = entry(-1 if rank is None else rank, "vm", source)
    facts = dataclasses.replace(node.facts, hostname_addresses=("192.0.2.2",), shm_bytes=64 << 20, gpus=0,
                                launch=builders.launch(rank, None, source, **({"SLURM_NODEID": "3"} if rank else {})))
    finding = Finding(check="nic.gloo_default", severity="fail", nodes=(node.rank,),
                      summary="gloo would use an address peers cannot reach on vm",
                      evidence=("vm: hostname: lo (127.0.1.1): loopback",), fix="set GLOO_SOCKET_IFNAME")
    return Report(run_id="local", node_rank=rank, role="local", verdict="fail",
                  nodes=(dataclasses.replace(node, facts=facts),), findings=(finding,), recommend={},
                  recommend_per_node={}, env_table=(), bandwidth=None, timings={}, unfinished=None,
                  healthy_nodes=(), faulty_nodes=())


def test_netcheck_local_speaks_of_this_node_and_shows_what_the_readme_promises():
    text = render_text(local_report())
    assert text.startswith("netcheck 0.1.0 - local: vm - verdict FAIL\n"), text
    assert "node rank ?" not in text and "[node" not in text, "one node's report points at no rank"
    assert "this node: vm (FQDN vm); the hostname resolves to 192.0.2.2" in text
    assert "/dev/shm: 64 MiB; NVIDIA GPUs: none" in text
    assert "launcher: none seen (a cluster run numbers such nodes as they arrive); no node rank or node count " \
           "given; 1 process(es) per node" in text
    assert "interfaces of vm:" in text
    slurm = render_text(local_report(3, "slurm"))
    assert slurm.startswith("netcheck 0.1.0 - local: vm (node rank 3) - verdict FAIL\n")
    assert ("launcher: Slurm; node rank 3, no node count given; 1 process(es)" in slurm
            and "launcher variables: SLURM_NODEID=3" in slurm)


def test_a_probe_header_claims_no_run_and_no_rank():
    rep = dataclasses.replace(local_report(), role="probe", run_id="probe", nodes=(), findings=())
    text = render_text(rep)
    assert text.startswith("netcheck 0.1.0 - probe - verdict FAIL\n") and "rank" not in text


def test_under_torchrun_a_hosts_interfaces_print_once_and_counts_are_of_nodes():
    rep = dataclasses.replace(report("torchrun"), faulty_nodes=("node0",))
    assert render_text(rep, verbose=True).count("interfaces of node0:") == 1
    many = dataclasses.replace(rep, nodes=tuple(entry(r, f"gpu{r // 8}", "torchrun") for r in range(32)),
                               findings=(Finding(check="nic.nccl_default", severity="fail", nodes=tuple(range(8, 16)),
                                                 summary="fails on gpu1"),
                                         Finding(check="host.shm", severity="fail", nodes=(8, 9, 17), summary="small")),
                               healthy_nodes=("gpu0", "gpu3"), faulty_nodes=("gpu1", "gpu2"))
    text = render_text(many)
    assert "32 ranks on 4 nodes: 2 healthy, 2 faulty" in text
    assert "most named (findings): gpu1 (2), gpu2 (1)" in text
    assert "fails on gpu1  [gpu1: ranks 8, 9, 10, 11, 12, 13, 14, 15]" in text


# --- the bandwidth table: rates a person reads -----------------------------------------------------

def test_bandwidth_cells_are_numbers_in_gb_s_and_never_scientific_notation():
    from netcheck.core.bwrecords import BandwidthResult, Row, Sweep
    from netcheck.core.bwtext import rate_text
    from netcheck.render.tables import gbps_cell, sweep_text

    assert [gbps_cell(v) for v in (12.345, 0.5, 0.0251, 0.0025, 6e-06, 1e-09, 0.0)] == [
        "12.35", "0.500", "0.0251", "0.00250", "0.00000600", "0.00000000100", "0"]
    assert [rate_text(v) for v in (12.345, 0.0025, 6e-06)] == ["12.3 GB/s", "2.5 MB/s", "6 KB/s"]
    rows = (Row(8, 2, "float32", "sum", 1310.4, 6.1e-06, 9.2e-06, 0), Row(1 << 20, 1 << 18, "float32", "sum",
                                                                         700.0, 1.5, 2.25, 0))
    sweep = Sweep("all", "all_reduce", 4, 1, rows)
    result = BandwidthResult("gloo", "no CUDA: using gloo", 2, 2, (sweep,), (), None, "", (), 1.0)
    text = sweep_text(sweep, result)
    assert "e-0" not in text and "0.00000610" in text and "0.00000920" in text and "KB/s" not in text
    assert "# Avg bus bandwidth : 1.13 GB/s" in text


def test_an_inspect_without_a_live_view_says_how_to_get_one_and_one_with_it_does_not():
    from netcheck.core.hangrecords import HangView
    from netcheck.core.jobrecords import JobView

    looked = dataclasses.replace(report("flags"), role="inspect", nodes=(),
                                 job=JobView("node0:29500", None, "now", 0.1))
    assert "live collective view: no rank of this job registered a debug server" in render_text(looked)
    assert "start_debug_server(port=0)" in render_text(looked)
    seen = dataclasses.replace(looked, hang=HangView("live", ()))
    assert "live collective view" not in render_text(seen)
    unreached = dataclasses.replace(looked, job=JobView("node0:29500", None, "now", 0.1, store_error="refused"))
    assert "live collective view" not in render_text(unreached)


def test_a_joiner_points_at_the_hosts_bandwidth_tables_and_prints_them_with_v():
    """Every joiner printing the cluster's tables buries its own findings (issue 53)."""
    from html_reports import cluster_report
    from netcheck.render.text import JOINER_TABLES

    host = cluster_report(3)
    joiner = dataclasses.replace(host, role="joiner", node_rank=1)
    assert "# Avg bus bandwidth" in render_text(host) and JOINER_TABLES not in render_text(host)
    assert JOINER_TABLES in render_text(joiner) and "# Avg bus bandwidth" not in render_text(joiner)
    assert "# Avg bus bandwidth" in render_text(joiner, verbose=True)


# --- whom a finding stops (issue 64) ---------------------------------------------------------------

ONE_WAY = Finding(check="mesh.connect", severity="fail", nodes=(1, 2),
                  summary="1 of 6 node-to-node directions connect on no interface",
                  evidence=("node1 -> node2: eth0 198.18.0.12: filtered (no answer in 2 s)",), fix="open the firewalls",
                  impact=Impact(("nccl_socket", "nccl_rdma"), "stops", "gloo dials node2 -> node1, which connects"))
FILTERED = Finding(check="rdzv.reach", severity="fail", nodes=(1,), summary="node0:29500 is filtered",
                   fix="open the port")


def with_findings(*findings: Finding) -> Report:
    return dataclasses.replace(report("flags"), findings=impacted(findings), verdict="fail")


def test_a_finding_that_stops_only_nccl_says_so_first_and_why_before_its_fix():
    lines = render_text(with_findings(ONE_WAY)).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("FAIL"))
    assert lines[at].startswith("FAIL  mesh.connect  NCCL only: 1 of 6 node-to-node directions")
    assert lines[at + 2:at + 4] == ["      why NCCL only: gloo dials node2 -> node1, which connects",
                                    "      fix: open the firewalls"]


def test_a_finding_every_job_meets_and_a_pass_carry_no_label():
    text = render_text(with_findings(FILTERED, dataclasses.replace(ONE_WAY, severity="pass")))
    assert "FAIL  rdzv.reach    node0:29500 is filtered" in text
    assert "PASS  mesh.connect  1 of 6" in text and "only" not in text and "why" not in text


def test_a_stale_peer_name_is_torchruns_rendezvous_and_gpu_checks_are_nccls():
    text = render_text(with_findings(Finding(check="rdzv.fqdn", severity="warn", nodes=(1, 2),
                                             summary="1 FQDN lookup(s) fail"),
                                     Finding(check="host.shm", severity="fail", nodes=(1,),
                                             summary="/dev/shm is 64 MiB")))
    assert "WARN  rdzv.fqdn  torchrun's rendezvous: 1 FQDN lookup(s) fail" in text
    assert "FAIL  host.shm   NCCL only: /dev/shm is 64 MiB" in text


def test_a_report_written_before_findings_said_whom_renders_as_it_did():
    old = dataclasses.replace(report("flags"), findings=(dataclasses.replace(ONE_WAY, impact=None),))
    assert "FAIL  mesh.connect  1 of 6 node-to-node directions" in render_text(old)
