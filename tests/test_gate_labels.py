"""scripts/node_labels.py: Kubernetes node labels from real runs' JSON reports, written only where
the node itself is at fault. No cluster runs here, and no kubectl stands in for one: the lines
are asserted as printed, each label checked against Kubernetes' own rules for a label's key
(a qualified name) and value (apimachinery's validation.IsQualifiedName, IsValidLabelValue)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import NodeSpec
from nodes import PORT, explain, finish, scaled, start

REPO = Path(__file__).parents[1]
SCRIPT = REPO / "scripts" / "node_labels.py"
NODE = "gke-pool-1-7f3a"
# apimachinery/pkg/util/validation: a DNS-1123 subdomain prefix (253 at most), a name of 63 at most.
NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def labels(report: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(report), NODE, *extra], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=scaled(30))


def netcheck(args: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "netcheck", *args, "-q"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=scaled(timeout) + 30)


def valid_label(arg: str) -> bool:
    """`key=value` or `key-` (kubectl's removal) with a key and value Kubernetes accepts."""
    key, value = arg.split("=", 1) if "=" in arg else (arg[:-1], "")
    prefix, _, name = key.rpartition("/")
    return (len(name) <= 63 and NAME.fullmatch(name) is not None and (not prefix or len(prefix) <= 253 and
            PREFIX.fullmatch(prefix) is not None) and len(value) <= 63 and (not value or NAME.fullmatch(value)))


def test_a_node_at_fault_is_labelled_with_its_check_and_a_valid_until_time(tmp_path):
    """netcheck local with NCCL set to an interface that is not there: this node at fault."""
    report = tmp_path / "netcheck.json"
    run = netcheck(["local", "--json", str(report)], {"NCCL_SOCKET_IFNAME": "nosuch0"})
    assert run.returncode == 2, run
    for extra, valid_for in (((), 3600), (("--valid-for", "300"), 300)):
        done = labels(report, *extra)
        until = int(report.stat().st_mtime) + valid_for
        assert done.returncode == 0 and done.stderr == "", done
        assert done.stdout == f"kubectl label node {NODE} --overwrite netcheck/at-fault=true " \
            f"netcheck/check=nic.route netcheck/valid-until={until}\n"
        argv = shlex.split(done.stdout)
        assert argv[:5] == ["kubectl", "label", "node", NODE, "--overwrite"]
        assert all(valid_label(a) for a in argv[5:]), argv


@pytest.mark.root_required
def test_a_node_healthy_beside_a_node_at_fault_is_never_labelled(cluster, tmp_path):
    """A host whose peer never came: the other node at fault (exit 4), this one healthy. Forked
    with torch loaded (tests/forked.py): a loaded machine's import would blame this node."""
    with cluster([NodeSpec()]) as c:
        run = finish(start(c, 0, ["--rdzv", f"node0:{PORT}", "--nnodes", "2", "--node-rank", "0", "--only",
                                  "rendezvous", "--timeout", str(scaled(20))], tmp_path), scaled(20) + 30)
    assert run.rc == 4, explain([run])
    done = labels(run.json_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.root_required
def test_a_node_where_no_check_fails_has_the_labels_removed(cluster, tmp_path):
    """netcheck local on a namespace node: warnings at most, so the labels go, as Slurm's gate
    resumes the node it drained."""
    report = tmp_path / "netcheck.json"
    with cluster([NodeSpec()]) as c:
        run = c.run(0, [sys.executable, "-m", "netcheck", "local", "-q", "--json", str(report)], timeout=scaled(30),
                    cwd=REPO)
    assert run.returncode in (0, 1), run
    done = labels(report)
    assert done.returncode == 0 and done.stdout == \
        f"kubectl label node {NODE} netcheck/at-fault- netcheck/check- netcheck/valid-until-\n", done
    assert all(valid_label(a) for a in shlex.split(done.stdout)[4:])


def test_what_is_no_report_is_one_line_and_exit_64(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    for args in ([str(tmp_path / "x.json")], [str(tmp_path / "missing.json")],
                 [str(tmp_path / "x.json"), "--valid-for", "0"]):
        done = subprocess.run([sys.executable, str(SCRIPT), args[0], NODE, *args[1:]], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=scaled(30))
        assert done.returncode == 64 and done.stdout == "" and len(done.stderr.splitlines()) == 1, done
