"""Shared pytest fixtures and markers.

Each concern lives in its own section of small functions so more can be added beside it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

import emitted
from cluster import Cluster, NodeSpec, namespaces_supported
from forked import load_torch

# --------------------------------------------------------------------------------------
# root_required: tests that need root and network namespaces.
# Skipped on a developer's machine without root; under CI=true a missing capability is a
# failure, so a misconfigured CI runner cannot silently skip the cluster tests.

ROOT_MARKER = "root_required"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{ROOT_MARKER}: needs root and network namespaces (skipped without them, "
        "a failure when CI=true)",
    )
    config.addinivalue_line(
        "markers",
        "compat: touches every torch seam (store, process groups, torchrun, a host lost "
        "mid-run); `make compat` runs these under each torch release of the matrix",
    )
    start_recording_checks(config)
    # Before the test modules that import torch are collected: loaded as netcheck loads it,
    # quiet, so the node runs forked from this process are what a netcheck process is.
    load_torch()


def require_namespaces() -> None:
    """Skip (or fail under CI=true) when simulated clusters cannot be built here."""
    if namespaces_supported():
        return
    why = "needs root with working `ip netns`, unshare, iptables, ip6tables, tc and sysctl"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; CI=true, so this is a failure, not a skip", pytrace=False)
    pytest.skip(why)


def pytest_runtest_setup(item):
    if item.get_closest_marker(ROOT_MARKER):
        require_namespaces()


def pytest_collection_modifyitems(items):
    """The modules with cluster tests first (10-40 s a test), the unit tests' after them, each
    module's tests together (its fixtures are built once): the workers end together on short
    tests, not one of them on a long test begun last."""
    clusters = {item.path for item in items if item.get_closest_marker(ROOT_MARKER)}
    items.sort(key=lambda item: item.path not in clusters)


# --------------------------------------------------------------------------------------
# cluster: a factory of simulated clusters, every one torn down at the end of the test
# whatever happened in it. Use `with cluster([NodeSpec(), NodeSpec(ifname="ens5")]) as c:`
# or `c = cluster([...]).up()`.


@pytest.fixture
def cluster():
    require_namespaces()
    made: list[Cluster] = []

    def make(specs: list[NodeSpec], **kw) -> Cluster:
        c = Cluster(specs, **kw)
        made.append(c)
        return c

    yield make
    _down_all(made)


def _down_all(clusters: list[Cluster]) -> None:
    errors = []
    for c in clusters:
        try:
            c.down()
        except Exception as e:  # noqa: BLE001 - tear the others down before reporting it
            errors.append(e)
    if errors:
        raise errors[0]


# --------------------------------------------------------------------------------------
# watchdog (root_required tests): no netcheck process, bandwidth worker or listening
# socket of one may outlive the test (docs/contract.md, "Promises": nothing of netcheck outlives
# its run). Every process a test starts inherits NETCHECK_WATCHDOG=<tag> from the
# environment, and so do their children, orphans included, which is how they are found
# whoever their parent is now, while other tests' netchecks running beside (pytest-xdist,
# another session) are left alone. The check runs just before a cluster is torn down (the
# teardown SIGKILLs everything in the namespaces, which would hide a straggler) and once
# more after the test. Stragglers are killed, and the test fails with their command lines,
# ages and listening ports.

WATCHDOG_ENV = "NETCHECK_WATCHDOG"
NETCHECK_PROCESS = ("-m netcheck", "netcheck.bandwidth.worker")


@pytest.fixture(autouse=True)
def netcheck_watchdog(request, monkeypatch):
    if not request.node.get_closest_marker(ROOT_MARKER):
        yield
        return
    tag = f"{os.getpid()}-{uuid.uuid4().hex}"
    monkeypatch.setenv(WATCHDOG_ENV, tag)
    stragglers: list[str] = []
    tear_down = Cluster.down

    def checked_down(self):
        stragglers.extend(kill_stragglers(tag))
        tear_down(self)

    monkeypatch.setattr(Cluster, "down", checked_down)
    yield
    stragglers.extend(kill_stragglers(tag))
    if stragglers:
        pytest.fail("netcheck processes outlived the test (now killed):\n  " + "\n  ".join(stragglers),
                    pytrace=False)


def kill_stragglers(tag: str) -> list[str]:
    """Every live netcheck process carrying `tag`, described and then SIGKILLed."""
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if proc.info["status"] == psutil.STATUS_ZOMBIE or not any(m in cmdline for m in NETCHECK_PROCESS):
            continue
        try:
            if proc.environ().get(WATCHDOG_ENV) != tag:
                continue
            ports = listening_ports(proc.pid)
            proc.kill()
        except psutil.NoSuchProcess:
            continue
        age = time.time() - proc.info["create_time"]
        found.append(f"pid {proc.pid}, {age:.0f} s old, listening on {ports or 'nothing'}: {cmdline[:300]}")
    return found


def listening_ports(pid: int) -> list[int]:
    """TCP ports a process listens on, read in its own network namespace (psutil reads the
    caller's /proc/net, which does not show a cluster node's sockets)."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return []
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        ports.update(int(r[1].rsplit(":", 1)[1], 16) for r in rows if r[3] == "0A" and r[9] in inodes)
    return sorted(ports)


# --------------------------------------------------------------------------------------
# The registry against the suite: every check id netcheck declares is emitted somewhere in
# the suite, with only the kinds the registry gives it and the severities it gives them. Judged
# once the whole suite has passed (a subset, -k or -m proves nothing about the rest).


def start_recording_checks(config) -> None:
    if not hasattr(config, "workerinput"):  # the controller: one folder, inherited by workers
        os.environ[emitted.FOLDER_VARIABLE] = tempfile.mkdtemp(prefix="netcheck-emitted-")
    emitted.watch_rules()


def _whole_suite(session) -> bool:
    o = session.config.option
    return (session.config.args_source == pytest.Config.ArgsSource.TESTPATHS and not o.keyword
            and not o.markexpr and not getattr(o, "lf", False) and not o.deselect)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):
        return
    folder = Path(os.environ[emitted.FOLDER_VARIABLE])
    seen = emitted.seen(folder)
    shutil.rmtree(folder, ignore_errors=True)
    if exitstatus == 0 and _whole_suite(session):
        judge_registry(session, seen)


def judge_registry(session, seen: set[tuple[str, str, str]]) -> None:
    from netcheck.rules.registry import BY_ID

    problems = [f"{c}: never emitted by any test" for c in sorted(set(BY_ID) - {s[0] for s in seen})]
    for check, severity, kind in sorted(seen):
        entry = BY_ID.get(check)
        if entry is None:
            problems.append(f"{check}: emitted, not in the registry")
        elif kind and kind not in entry.kinds:
            problems.append(f"{check} kind {kind!r}: not declared in the registry")
        elif severity not in (entry.kinds[kind].severities if kind else entry.severities):
            problems.append(f"{check} {severity} {kind!r}: not declared in the registry")
    if problems:
        session.config.get_terminal_writer().line(
            "rules/registry.py against the suite:\n  " + "\n  ".join(problems), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
