"""export: the exclude list and the Prometheus metrics, over reports made of the real records.

The metrics are read back through `promtool check metrics` and prometheus_client's parser
(tests/prom.py), so a format mistake fails here rather than in a node exporter.
"""

from __future__ import annotations

import dataclasses
import math

import builders
from netcheck import __version__, cli
from netcheck.config import Outputs
from netcheck.core.bwrecords import BandwidthResult, Pair, Row, Sweep, SweepOptions, headline
from netcheck.core.model import Attribution, Finding, NodeEntry, NodeFacts, Report
from netcheck.core.names import is_safe_hostname
from netcheck.render import export
from prom import series

SLURM_HOSTS = ("gpu01", "gpu02", "gpu03")


def facts(hostname: str, rank: int) -> NodeFacts:
    launch = builders.launch(rank, 3, "slurm", 8, SLURM_HOSTS, SLURM_JOB_NODELIST="gpu[01-03]")
    return builders.facts(hostname, run_id="4242", fqdn=f"{hostname}.cluster", addresses=("10.0.0.1",),
                          launched=launch, shm=1 << 30, gpus=8, version=__version__)


def report(findings: tuple[Finding, ...], healthy=("gpu01", "gpu02"), faulty=("gpu03",),
           nodes=(0, 1), timings=None) -> Report:
    """A host's report: gpu03 (rank 2) never joined unless `nodes` says otherwise."""
    entries = tuple(NodeEntry(r, SLURM_HOSTS[r], f"10.0.0.{r + 1}", facts(SLURM_HOSTS[r], r))
                    for r in nodes)
    return Report(run_id="4242", node_rank=0, role="host", verdict="fail", nodes=entries,
                  findings=findings, recommend={}, recommend_per_node={}, env_table=(),
                  bandwidth=None, timings={"local": 0.01, "rendezvous": 12.5} if timings is None else timings,
                  unfinished=None, healthy_nodes=healthy, faulty_nodes=faulty)


MISSING = Finding(check="rdzv.join", severity="fail", nodes=(2,), summary="node rank 2 (gpu03) never joined",
                  fix="start it")
CLOCK = Finding(check="host.clock", severity="warn", nodes=(1,), summary="gpu02's clock is 3.1 s ahead",
                fix="time sync")
PASSED = (Finding(check="rdzv.listen", severity="pass", nodes=(0,), summary="the host listens"),
          Finding(check="rdzv.join", severity="pass", nodes=(0, 1), summary="2 nodes joined"))




# --- exclude list -------------------------------------------------------------------------------


def test_exclude_is_the_faulty_hostnames_comma_separated_on_one_line():
    rep = report((MISSING,), healthy=("gpu01",), faulty=("gpu02", "gpu03", "gpu02"))
    assert export.render_exclude(rep) == "gpu02,gpu03\n"


def test_exclude_is_empty_when_no_node_is_faulty():
    assert export.render_exclude(report(PASSED, healthy=SLURM_HOSTS, faulty=())) == ""


def test_exclude_leaves_out_names_that_would_change_the_lists_meaning():
    rep = report((MISSING,), faulty=("gpu03", "evil,gpu01", "a[1-9]", "two words", ""))
    assert export.render_exclude(rep) == "gpu03\n"


def test_exclude_holds_what_the_hostname_rule_admits_and_nothing_else():
    odd = ("gpu04\n", "gpu05\x1b[0m", "-gpu06", "gpu07-", "a..b", "x" * 64, "gpu\udc80", "gpü")
    rep = report((MISSING,), faulty=("gpu03", "gpu_08", "gpu09.cluster.local") + odd)
    assert export.render_exclude(rep) == "gpu03,gpu_08,gpu09.cluster.local\n"
    assert all(is_safe_hostname(h) for h in ("gpu01", "gpu01.", "1e5", ".".join(["a" * 63] * 3) + ".b" * 30))
    assert not any(is_safe_hostname(h) for h in odd + ("", ".", ".".join(["a" * 63] * 4)))


# --- Prometheus metrics -------------------------------------------------------------------------


def test_verdict_is_a_state_set_and_info_names_role_and_version():
    text = export.render_prom(report(PASSED + (MISSING,)))
    assert series(text, "netcheck_verdict") == {
        (("severity", "pass"),): 0, (("severity", "warn"),): 0, (("severity", "fail"),): 1}
    assert series(text, "netcheck_info") == {(("role", "host"), ("version", __version__)): 1}


def test_whose_fault_it_is_is_a_state_set_where_the_report_says_it():
    rep = dataclasses.replace(report((MISSING,)), fault=Attribution("other_nodes", (2,), ("gpu03",), "rdzv.join"))
    text = export.render_prom(rep)
    assert 'netcheck_fault{party="other_nodes"} 1' in text and 'netcheck_fault{party="this_node"} 0' in text
    assert "netcheck_fault{" not in export.render_prom(report((MISSING,))), "a report that does not say it"


def test_each_check_reports_its_worst_severity_once():
    checks = series(export.render_prom(report(PASSED + (MISSING, CLOCK))), "netcheck_check")
    worst = {dict(labels)["check"]: dict(labels)["severity"] for labels, v in checks.items() if v == 1}
    assert worst == {"rdzv.listen": "pass", "rdzv.join": "fail", "host.clock": "warn"}
    assert len(checks) == 3 * 3


def test_node_metrics_name_a_missing_node_by_its_slurm_hostname():
    text = export.render_prom(report(PASSED + (MISSING, CLOCK)))
    assert series(text, "netcheck_node_faulty") == {
        (("node", "gpu01"), ("node_rank", "0")): 0, (("node", "gpu02"), ("node_rank", "1")): 0,
        (("node", "gpu03"), ("node_rank", "2")): 1}
    assert series(text, "netcheck_node_findings") == {
        (("check", "rdzv.join"), ("node", "gpu03"), ("node_rank", "2"), ("severity", "fail")): 1,
        (("check", "host.clock"), ("node", "gpu02"), ("node_rank", "1"), ("severity", "warn")): 1}


def test_a_rank_without_a_known_hostname_is_named_by_rank():
    lost = Finding(check="rdzv.join", severity="fail", nodes=(7,), summary="node rank 7 never joined")
    findings = series(export.render_prom(report((lost,))), "netcheck_node_findings")
    assert findings == {(("check", "rdzv.join"), ("node", "rank 7"), ("node_rank", "7"), ("severity", "fail")): 1}


def test_phase_timings_are_seconds_per_phase():
    text = export.render_prom(report(PASSED, timings={"local": 0.125, "reach": 0, "mesh": 1e-05}))
    assert series(text, "netcheck_phase_seconds") == {
        (("phase", "local"),): 0.125, (("phase", "reach"),): 0, (("phase", "mesh"),): 1e-05}


def test_bandwidth_gives_each_sweeps_average_and_each_pair():
    rows = (Row(1 << 20, 262144, "float32", "sum", 800.0, 1.0, 1.5, 0),
            Row(1 << 21, 524288, "float32", "sum", 1500.0, 1.4, 2.1, 0))
    bw = BandwidthResult("gloo", "no CUDA: using gloo", 2, 1, (Sweep("all", "all_reduce", 2, 1, rows),),
                         (Pair(0, 1, 1 << 24, 9000.0, 1.86),), None, "", (), 5.0, {"0": "gpu01", "1": "gpu02"})
    text = export.render_prom(dataclasses.replace(report(PASSED), bandwidth=bw))
    assert series(text, "netcheck_bw_busbw_gbps") == {(("op", "all_reduce"), ("stage", "all")): 1.8}
    assert series(text, "netcheck_bw_pair_busbw_gbps") == {
        (("node", "gpu01"), ("node_rank", "0"), ("peer", "gpu02"), ("peer_node_rank", "1")): 1.86}


def test_bandwidth_gives_each_sweeps_plateau_latency_and_step():
    rows = (Row(8, 2, "float32", "sum", 95.0, 0.0, 0.0, 0),
            Row(1 << 24, 1 << 22, "float32", "sum", 9000.0, 1.82, 1.82, 0, spread=0.1),
            Row(1 << 25, 1 << 23, "float32", "sum", 18000.0, 1.86, 1.86, 0),
            Row(1 << 26, 1 << 24, "float32", "sum", 36000.0, 1.9, 1.9, 0))
    sweep = Sweep("all", "all_reduce", 2, 1, rows)
    bucket = 25 << 20
    head = headline(sweep, SweepOptions(model_params=100 * bucket // 2, bucket_bytes=bucket), 2, 2)
    bw = BandwidthResult("gloo", "no CUDA: using gloo", 2, 1, (sweep,), (), None, "", (), 5.0, headlines=(head,))
    text = export.render_prom(dataclasses.replace(report(PASSED), bandwidth=bw))
    where = (("op", "all_reduce"), ("stage", "all"))
    assert series(text, "netcheck_bw_plateau_busbw_gbps") == {where: 1.86}
    assert series(text, "netcheck_bw_plateau_spread_ratio") == {where: 0.1}
    assert series(text, "netcheck_bw_latency_seconds") == {where: 95e-6}
    # 100 buckets of 25 MiB, each at the busbw interpolated between 16 and 32 MiB
    at_bucket = 1.82 + (1.86 - 1.82) * math.log2(25 / 16)
    assert series(text, "netcheck_bw_step_seconds") == {where: round(100 * bucket / at_bucket / 1e9, 6)}


def test_nodes_that_share_a_hostname_stay_distinct_series():
    """Every node of a one-machine run is `vm`: each node's series is its own, by node rank
    (series() fails on a repeated one, as a textfile collector drops it)."""
    slow = Finding(check="bw.pair", severity="fail", nodes=(1, 2), summary="vm at best 0.2 GB/s")
    entries = tuple(NodeEntry(r, "vm", "127.0.0.1", builders.facts("vm")) for r in range(3))
    pairs = tuple(Pair(a, b, 1 << 24, 9000.0, 1.4 + a / 10) for a, b in ((0, 1), (0, 2), (1, 2)))
    bw = BandwidthResult("gloo", "no CUDA: using gloo", 3, 1, (), pairs, None, "", (), 5.0,
                         {str(r): "vm" for r in range(3)})
    rep = dataclasses.replace(report((slow,), healthy=(), faulty=("vm",)), nodes=entries, bandwidth=bw)
    text = export.render_prom(rep)
    assert series(text, "netcheck_node_faulty") == {(("node", "vm"), ("node_rank", str(r))): 1 for r in range(3)}
    assert series(text, "netcheck_node_findings") == {
        (("check", "bw.pair"), ("node", "vm"), ("node_rank", str(r)), ("severity", "fail")): 1 for r in (1, 2)}
    assert series(text, "netcheck_bw_pair_busbw_gbps") == {
        (("node", "vm"), ("node_rank", str(p.a)), ("peer", "vm"), ("peer_node_rank", str(p.b))): p.busbw
        for p in pairs}


def test_label_values_from_peers_are_escaped():
    odd = 'gpu"9\\x\nnext'
    text = export.render_prom(report((MISSING,), healthy=(odd,), faulty=()))
    assert series(text, "netcheck_node_faulty") == {(("node", odd),): 0}


def test_a_hostname_no_utf8_can_hold_is_written_as_its_escape(tmp_path):
    prom = tmp_path / "netcheck.prom"
    rep = report((MISSING,), healthy=("gpu\udc80", "nœud"), faulty=())
    cli.emit(rep, Outputs(prom=str(prom)), True, False)
    assert series(prom.read_text(encoding="utf-8"), "netcheck_node_faulty") == {
        (("node", "gpu\\udc80"),): 0, (("node", "nœud"),): 0}


def test_a_report_with_nothing_in_it_still_parses():
    empty = Report(run_id="probe", node_rank=None, role="probe", verdict="pass", nodes=(), findings=(),
                   recommend={}, recommend_per_node={}, env_table=(), bandwidth=None, timings={},
                   unfinished=None, healthy_nodes=(), faulty_nodes=())
    assert series(export.render_prom(empty), "netcheck_verdict")[(("severity", "pass"),)] == 1


# --- the command line -----------------------------------------------------------------------------


def test_flags_reach_the_config():
    args = cli.build_parser().parse_args(["--rdzv", "node0", "--exclude-file", "x.txt", "--prom", "m.prom"])
    config = cli.config_from_args(args, {})
    assert (config.outputs.exclude, config.outputs.prom) == ("x.txt", "m.prom")


def test_emit_writes_both_files_and_replaces_a_stale_exclude_list(tmp_path, capsys):
    exclude, prom = tmp_path / "exclude.txt", tmp_path / "netcheck.prom"
    exclude.write_text("gpu09\n")
    rep = report(PASSED, healthy=SLURM_HOSTS, faulty=())
    cli.emit(rep, Outputs(exclude=str(exclude), prom=str(prom)), True, False)
    assert exclude.read_text() == "" and prom.read_text() == export.render_prom(rep)
    assert capsys.readouterr().out == ""
