"""The alerting rules shipped beside netcheck's metrics (scripts/netcheck.rules.yml), run by
Prometheus's own rule engine: `promtool check rules`, and `promtool test rules` fed the series
of real runs' files as a real node exporter serves them, each with the `instance` and `job`
labels Prometheus adds at the scrape. Only the values are the test's (a pair's bandwidth, the
file's age on promtool's clock, which starts at 0): a metric or label the rules name that
netcheck stops writing fails here.

The runs: `netcheck local` on this machine with NCCL set to an interface that is not there (its
node at fault); on three namespace nodes, a healthy run with its bandwidth phase (the host's file
holds the node pairs), then node0 hosting a run nobody joins (the cluster at fault, no node).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cluster import Cluster, NodeSpec
from conftest import require_namespaces
from nodes import PORT, explain, finish, finish_all, scaled, start
from prom import PROMTOOL, require, served
from sharedrun import watched

REPO = Path(__file__).parents[1]
RULES = REPO / "scripts" / "netcheck.rules.yml"
PAIR = "netcheck_bw_pair_busbw_gbps"
MTIME = "node_textfile_mtime_seconds"
STEPS = 30   # minutes of samples each test case feeds, one a minute


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


ALERTS = [r["alert"] for r in rules()]


def rule(alert: str) -> dict:
    return next(r for r in rules() if r["alert"] == alert)


def scrape(run: subprocess.CompletedProcess | None, folder: Path, instance: str) -> list[Series]:
    """netcheck's series and the exporter's mtime of its file, as Prometheus stores them from
    a node exporter at `instance` serving `folder`."""
    body, _ = served(folder)
    kept = [Series(s.name, {**s.labels, "instance": instance, "job": "node"}, s.value)
            for family in text_string_to_metric_families(body) for s in family.samples
            if s.name.startswith("netcheck_") or s.name == MTIME]
    assert any(s.name == MTIME for s in kept) and any(s.name.startswith("netcheck_") for s in kept), (body, run)
    return kept


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> list[Series]:
    """`netcheck local` with NCCL set to an interface that is not there: its node at fault."""
    folder = tmp_path_factory.mktemp("local")
    done = subprocess.run([sys.executable, "-m", "netcheck", "local", "-q", "--prom", str(folder / "netcheck.prom")],
                          cwd=REPO, env={**os.environ, "NCCL_SOCKET_IFNAME": "nosuch0"}, capture_output=True,
                          text=True, timeout=scaled(60))
    assert done.returncode == 2, done
    return scrape(done, folder, "node1:9100")


@pytest.fixture(scope="module")
def cluster_runs(tmp_path_factory) -> dict[str, list[Series]]:
    """On three namespace nodes: a healthy run (warnings at most: a loaded machine's) with its
    bandwidth (the host's file, `pairs`), then node0 hosting a run nobody joins (`alone`)."""
    require_namespaces()
    tmp = tmp_path_factory.mktemp("cluster")
    files = {name: tmp / name / "netcheck.prom" for name in ("pairs", "alone")}
    for f in files.values():
        f.parent.mkdir()
    # The sweep's workers start new interpreters that load torch: a loaded machine's take a while.
    timeout = scaled(60)
    with Cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c, watched():
        args = lambda i: ["--rdzv", f"node0:{PORT}", "--nnodes", "3", "--node-rank", str(i), "--timeout",  # noqa: E731
                          str(timeout), "--bw-budget", "3", *(["--prom", str(files["pairs"])] if i == 0 else [])]
        runs = finish_all([start(c, i, args(i), tmp, bandwidth=True) for i in range(3)], timeout + 30)
        alone = finish(start(c, 0, ["--rdzv", f"node0:{PORT + 1}", "--only", "rendezvous", "--timeout",
                                    str(scaled(20)), "--prom", str(files["alone"])], tmp), timeout)
    assert [r.rc <= 1 for r in runs] == [True] * 3 and alone.rc == 5, explain([*runs, alone])
    return {name: scrape(None, f.parent, "node0:9100") for name, f in files.items()}


def selector(s: Series) -> str:
    labels = ",".join(f'{k}="{escaped(v)}"' for k, v in sorted(s.labels.items()))
    return f"{s.name}{{{labels}}}"


def escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def fed(series: list[Series], value=lambda s: s.value) -> list[dict]:
    """promtool's input_series: each series held at its value (or the one `value` gives it) for
    STEPS minutes."""
    return [{"series": selector(s), "values": f"{go_number(value(s))}x{STEPS}"} for s in series]


def go_number(value: float) -> str:
    """A float as Go prints it (`{{ $value }}`) and promtool reads it: 1 for 1.0."""
    return str(int(value)) if value == int(value) and abs(value) < 1e21 else repr(value)


def expected(alert: str, s: Series, value: float | None = None) -> dict:
    """The alert `s` raises: its labels (the series' with the rule's) and its summary rendered
    from the rule's own template; a label the template names that the series lacks fails."""
    r = rule(alert)
    labels = dict(s.labels)

    def render(template: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
        return text.replace("{{ $value }}", go_number(value if value is not None else s.value))

    summary = render(r["annotations"]["summary"])
    assert "{{" not in summary, summary
    return {"exp_labels": {**labels, **r["labels"]}, "exp_annotations": {"summary": summary}}


def promtool_test(tmp_path: Path, cases: list[dict]) -> None:
    tests = tmp_path / "netcheck.rules.test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m",
                                     "tests": [{"interval": "1m", **c} for c in cases]}, sort_keys=False))
    done = subprocess.run([require(PROMTOOL, "promtool"), "test", "rules", str(tests)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def alerts(at: str, alert: str, exp: list[dict]) -> dict:
    return {"eval_time": at, "alertname": alert, "exp_alerts": exp}


def named(series: list[Series], name: str) -> list[Series]:
    return [s for s in series if s.name == name]


def test_promtool_accepts_the_rules():
    done = subprocess.run([require(PROMTOOL, "promtool"), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and f"SUCCESS: {len(ALERTS)} rules found" in done.stdout, done.stdout + done.stderr


def test_a_node_at_fault_alerts_by_its_name(local, tmp_path):
    (at_fault,) = [s for s in named(local, "netcheck_node_faulty") if s.value == 1]
    promtool_test(tmp_path, [
        {"input_series": fed(local),
         "alert_rule_test": [alerts("5m", "NetcheckNodeAtFault", [expected("NetcheckNodeAtFault", at_fault)]),
                             alerts("5m", "NetcheckFailedNoNodeAtFault", [])]}])


def test_a_report_older_than_three_intervals_alerts_and_a_fresh_one_does_not(local, tmp_path):
    """The file written at promtool's time 0: until 900 s no alert, past it the alert names it."""
    (mtime,) = named(local, MTIME)
    promtool_test(tmp_path, [
        {"input_series": fed(local, lambda s: 0.0 if s.name == MTIME else s.value),
         "alert_rule_test": [alerts("15m", "NetcheckReportStale", []),
                             alerts("16m", "NetcheckReportStale", [expected("NetcheckReportStale", mtime)])]}])


@pytest.mark.root_required
def test_a_failure_that_is_no_nodes_alerts_apart_and_a_healthy_run_raises_nothing(cluster_runs, tmp_path):
    """The host nobody joined: the cluster's failure, and no node named; the healthy run (its pairs
    at the bandwidth they ran at): no alert at all."""
    (cluster,) = [s for s in named(cluster_runs["alone"], "netcheck_fault") if s.value == 1]
    assert cluster.labels["party"] == "cluster"
    quiet = [alerts("5m", name, []) for name in ALERTS if name != "NetcheckPairSlow"]
    promtool_test(tmp_path, [
        {"input_series": fed(cluster_runs["alone"]),
         "alert_rule_test": [alerts("5m", "NetcheckNodeAtFault", []),
                             alerts("5m", "NetcheckFailedNoNodeAtFault",
                                    [expected("NetcheckFailedNoNodeAtFault", cluster)])]},
        {"input_series": fed(cluster_runs["pairs"], lambda s: 10.0 if s.name == PAIR else s.value),
         "alert_rule_test": quiet + [alerts("5m", "NetcheckPairSlow", [])]}])


@pytest.mark.root_required
def test_a_pair_below_half_the_runs_median_pair_alerts(cluster_runs, tmp_path):
    pairs = named(cluster_runs["pairs"], PAIR)
    assert len(pairs) == 3, cluster_runs["pairs"]
    slow = pairs[0]
    gbps = {selector(p): 1.0 if p is slow else 10.0 for p in pairs}
    assert gbps[selector(slow)] < 0.5 * statistics.median(gbps.values())
    promtool_test(tmp_path, [
        {"input_series": fed(cluster_runs["pairs"], lambda s: gbps[selector(s)] if s.name == PAIR else s.value),
         "alert_rule_test": [alerts("5m", "NetcheckPairSlow", [expected("NetcheckPairSlow", slow, 1.0)])]}])
