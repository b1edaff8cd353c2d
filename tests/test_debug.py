"""netcheck's own failures kept for the person who reports them: one error root, an internal
error named where it happened, and --debug's log (each phase's start and end, the traceback).

The internal error is forced for real: an RDMA device whose `device` link in sysfs is a symlink
loop (the suite's sysfs fixture tree, read through facts.local's test hook). Python 3.11's
Path.resolve(strict=True) raises RuntimeError for a loop, which facts.rdma does not expect.
Whoever teaches facts.rdma to expect it must give these tests another real input that reaches
an unexpected exception.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import netcheck
from netcheck import cli, config
from netcheck.core.constants import EXIT_INTERNAL, EXIT_USAGE
from netcheck.core.errors import NetcheckError, UserError, described, where
from netcheck.facts.local import RDMA_ROOT_HOOK
from sysfs_fixtures import build
from test_cli import assert_one_usage_line, subprocess_env

REPO = Path(__file__).resolve().parent.parent
# Where the loop is met: the line of facts.rdma that resolves a device's link.
RESOLVE = "path = device.resolve(strict=True)"


def resolve_line() -> int:
    lines = (REPO / "netcheck/facts/rdma.py").read_text().splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if line.strip() == RESOLVE]
    return number


@pytest.fixture
def looped_sysfs(tmp_path: Path) -> Path:
    """An HGX node's sysfs whose first HCA's `device` link points at itself, round a loop."""
    root = build(tmp_path / "fx", "hgx")
    hca = sorted((root / "sys/class/infiniband").iterdir())[0]
    device = hca / "device"
    device.unlink()
    device.symlink_to("loop")
    (hca / "loop").symlink_to("device")
    return root


def netcheck_run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "netcheck", *args], cwd=REPO,
                          env={**subprocess_env(), RDMA_ROOT_HOOK: str(root)}, capture_output=True, text=True,
                          timeout=60)


def test_an_internal_error_in_a_phase_is_a_finding_naming_where_and_debug_keeps_its_traceback(looped_sysfs, tmp_path):
    """A one-node run of the local phase (loopback, nothing sent): run.internal, exit 3; its
    evidence names the module, function and line; --debug's log has the phases and the traceback."""
    path = tmp_path / "report.json"
    done = netcheck_run(looped_sysfs, "--rdzv", "127.0.0.1:29500", "--nnodes", "1", "--node-rank", "0",
                        "--only", "local", "--timeout", "30", "--json", str(path), "--debug")
    assert done.returncode == EXIT_INTERNAL, done.stdout + done.stderr
    report = json.loads(path.read_text())
    (internal,) = [f for f in report["findings"] if f["check"] == "run.internal"]
    assert internal["summary"].startswith("netcheck could not run the local phase: RuntimeError: Symlink loop")
    assert internal["evidence"] == [f"raised at netcheck.facts.rdma:_place:{resolve_line()}"]
    assert "--debug" in internal["fix"] and report["fault"]["party"] == "netcheck"
    log = done.stderr
    assert "netcheck.phases.state: phase local: start" in log and "phase local: end, " in log, log
    assert "Traceback (most recent call last)" in log and f'rdma.py", line {resolve_line()}, in _place' in log, log
    assert "Traceback" not in done.stdout and "netcheck debug:" not in done.stdout


def test_an_internal_error_outside_a_phase_is_one_line_naming_where_exit_3(looped_sysfs):
    """`netcheck local` reads the same tree outside any phase: cli's one boundary says it in one
    line (not a traceback), exit 3; with --debug the traceback is there too."""
    done = netcheck_run(looped_sysfs, "local", "--timeout", "30")
    assert done.returncode == EXIT_INTERNAL, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("netcheck: error: internal error: RuntimeError: Symlink loop from "), done.stderr
    assert f"(at netcheck.facts.rdma:_place:{resolve_line()}); a netcheck bug" in done.stderr
    debugged = netcheck_run(looped_sysfs, "local", "--timeout", "30", "--debug")
    assert debugged.returncode == EXIT_INTERNAL
    assert "netcheck debug: " in debugged.stderr and "Traceback (most recent call last)" in debugged.stderr
    assert debugged.stderr.splitlines()[-1] == done.stderr.rstrip("\n")


def test_without_debug_nothing_of_the_log_reaches_the_terminal(capsys):
    assert cli.main(["checks"]) == 0
    cli.main(["report", "/nonexistent/r.json", "--debug"])
    assert "netcheck debug:" not in capsys.readouterr().err
    cli.start_log(False)
    import logging

    logging.getLogger("netcheck.phases.state").warning("not shown")
    assert capsys.readouterr().err == ""


def test_where_names_the_innermost_netcheck_frame_and_described_is_one_line():
    with pytest.raises(config.UsageError) as caught:
        config.parse_mesh("ring")
    place = where(caught.value)
    assert place is not None and place.startswith("netcheck.config:parse_mesh:")
    assert described(caught.value) == f"UsageError: --mesh 'ring': expected full or sample:K with K >= 1 (at {place})"
    assert where(ValueError("never raised")) is None
    assert described(KeyError("a\nb")) == "KeyError: 'a\\nb'"


@pytest.mark.parametrize("argv, message", [
    (["--json", "-", "local"], "local: the sub-command comes first: netcheck local [options]"),
    (["--rdzv", "node0", "probe", "node0"], "probe: the sub-command comes first: netcheck probe [options]"),
    (["--mesh", "sample:²", "--rdzv", "node0"], "--mesh 'sample:²': expected full or sample:K with K >= 1"),
    (["report", "/nonexistent/r.json"], "netcheck report /nonexistent/r.json: No such file or directory"),
])
def test_usage_errors_of_the_shared_parser_exit_64_in_one_line(argv, message, capsys):
    assert cli.main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert_one_usage_line(captured.err, captured.out, message)


def test_every_exception_class_netcheck_defines_has_the_one_root():
    """The root lets cli tell netcheck's errors from anything else in one place; a user's error
    is a UserError (exit 64), never a bare ValueError. (stop.Terminated, SIGTERM, is a
    KeyboardInterrupt as SIGINT's is, outside Exception on purpose: no `except Exception` takes it.)"""
    found = {}
    for module in pkgutil.walk_packages(netcheck.__path__, "netcheck."):
        if module.name == "netcheck.__main__":   # importing it runs netcheck
            continue
        loaded = importlib.import_module(module.name)
        found |= {f"{module.name}.{name}": value for name, value in vars(loaded).items()
                  if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == module.name}
    assert len(found) >= 21, sorted(found)
    assert [name for name, kind in found.items() if not issubclass(kind, NetcheckError)] == []
    users = {name.rsplit(".", 1)[1] for name, kind in found.items() if issubclass(kind, UserError)}
    assert {"UsageError", "BaselineError", "LaunchError", "PlotUnavailable", "UserError"} <= users
