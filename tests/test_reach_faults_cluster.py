"""The endpoint's faults that a TCP connect alone cannot tell, on real network namespaces: a
squatter that accepts and never answers, the host's own firewall on its port, a host lost
between a joiner's probe and its store connect, and a joiner that gets to its store connect
only after the host has closed the rendezvous and ended.

Each is named under its own check and kind within seconds, ends with exit 2 on the node at
fault and 4 on a joiner the host's machine keeps out (not 3, not a hang), and prints nothing of
torch's internals (no traceback, no C++ frame).
"""

from __future__ import annotations

import signal
import sys
import time

import pytest

from faults import finish_each, lost_in, nodes, ranked_args, signal_and_finish
from netcheck.core.budget import JOIN_SHARE
from nodes import GRACE, PORT, explain, finish, scaled, start

pytestmark = pytest.mark.root_required

# Accepts every connection and holds it without a byte: a hung earlier rank 0, another program.
SQUATTER = ("import socket\n"
            "s = socket.create_server(('0.0.0.0', 29500), backlog=64)\n"
            "print('ready', flush=True)\n"
            "held = []\n"
            "while True:\n"
            "    held.append(s.accept()[0])\n")


def assert_quiet(run) -> None:
    for text in (run.stdout, run.stderr):
        assert "Traceback" not in text and "frame #" not in text and "[c10d]" not in text, explain([run])


def test_a_squatter_that_accepts_and_never_answers_is_named_not_waited_on(cluster, tmp_path):
    """A torch client would sit in TCPStore's constructor for as long as the squatter lives."""
    timeout = scaled(20)
    with cluster(nodes(2)) as c:
        squatter = c.popen(0, [sys.executable, "-c", SQUATTER])
        assert squatter.stdout.readline().strip() == "ready"
        runs = [start(c, 0, ranked_args(0, 3, timeout), tmp_path),   # the host: the port is taken
                start(c, 0, ranked_args(1, 3, timeout), tmp_path),   # a joiner on the squatter's machine
                start(c, 1, ranked_args(2, 3, timeout), tmp_path)]   # a joiner elsewhere
        finish_each(runs, timeout + GRACE)
        c.kill(squatter)

    host, near, far = runs
    # The squatter is on the host's machine: the host's fault, which the joiners name (issue 65).
    assert [r.rc for r in runs] == [2, 4, 4], explain(runs)
    (taken,) = host.findings("rdzv.listen", "fail")
    assert f"pid {squatter.pid}" in taken["summary"], taken
    for joiner, rank in ((near, 1), (far, 2)):
        assert joiner.seconds < timeout / 2, f"named within seconds, not at the deadline\n{explain([joiner])}"
        (squat,) = joiner.findings("rdzv.reach", "fail")
        assert (squat["kind"], squat["nodes"], squat["cause_nodes"]) == ("not_store", [rank], [0]), squat
        assert "no answer to the TCPStore handshake" in squat["summary"], squat
        assert joiner.report["unfinished"] is None
        assert_quiet(joiner)
    # Where the squatter is on this very machine, the joiner names it, pid and command.
    (squat,) = near.findings("rdzv.reach", "fail")
    assert f"pid {squatter.pid}" in squat["summary"] and "create_server" in squat["summary"], squat
    assert f"kill {squatter.pid}" in squat["fix"], squat


@pytest.mark.parametrize("target", ["DROP", "REJECT"])
def test_the_hosts_own_firewall_on_its_port_is_named_not_an_internal_error(cluster, tmp_path, target):
    """A rule for the port in the host's INPUT chain (loopback not spared, as most rules are
    written) blocks the host's own store client too, and every joiner."""
    timeout = scaled(14)   # the least --timeout for rendezvous, mesh and env is 13.5 s
    reject = ["--reject-with", "tcp-reset"] if target == "REJECT" else []
    with cluster(nodes(2)) as c:
        c.run(0, ["iptables", "-w", "-A", "INPUT", "-p", "tcp", "--dport", str(PORT), "-j", target, *reject], 10)
        host = finish(start(c, 0, ranked_args(0, 2, timeout), tmp_path), timeout + GRACE)

    assert host.rc == 2, explain([host])
    (blocked,) = host.findings("rdzv.listen", "fail")
    assert (blocked["kind"], blocked["nodes"]) == ("firewalled", [0]), blocked
    outcome = "filtered" if target == "DROP" else "refused"
    assert f"will find it {outcome}" in blocked["summary"] and "198.18.0.10" in blocked["summary"], blocked
    assert f"--dport {PORT} -j ACCEPT" in blocked["fix"], blocked
    assert not host.findings("run.internal") and host.report["unfinished"] is None
    assert host.seconds < scaled(3) + GRACE, "said after one probe timeout, before torch is imported"
    assert_quiet(host)


def test_a_host_lost_before_the_joiner_connects_its_store_is_said_at_once(cluster, tmp_path):
    """The host is interrupted right after the joiner's probe heard it, while the joiner
    imports torch: its store client then finds nothing listening. Once, torch's constructor
    retried that refusal to the deadline (25 s, a c10d stack trace per try)."""
    timeout = scaled(30)
    with cluster(nodes(3)) as c:
        host = start(c, 0, ranked_args(0, 3, timeout), tmp_path, terminal=True)
        host.wait_for_progress("netcheck: rendezvous", timeout)
        joiner = start(c, 1, ranked_args(1, 3, timeout), tmp_path, terminal=True, fresh=True)
        joiner.wait_for_progress("netcheck: rendezvous", timeout)   # reach passed: the host answered
        signal_and_finish(c, host, signal.SIGINT, within=scaled(3))
        gone = time.monotonic()
        finish_each([joiner], timeout)
        took = time.monotonic() - gone

    assert joiner.rc == 4, explain([host, joiner])   # the host is at fault from here: it stopped answering
    # The rest of the joiner's torch import is in it (seconds on a busy machine); after that
    # its store client finds the port refused and stops at once.
    assert took < scaled(5) + GRACE, f"{took:.1f} s after the host was gone\n{explain([joiner])}"
    report = joiner.report
    assert lost_in(report) == {"rendezvous": {0}}, report["findings"]
    (lost,) = [f for f in report["findings"] if f["check"] == "rdzv.join"]
    assert lost["kind"] == "lost_in_rendezvous", lost
    (seen,) = lost["evidence"]   # the cause, once: not the summary again
    assert seen.startswith("this node's store client: ") and "refused" in seen, lost
    assert "stopped answering" not in seen and "is gone" not in seen, lost
    assert_quiet(joiner)


def test_a_joiner_that_comes_to_sign_in_after_the_hosts_join_deadline_came_late(cluster, tmp_path):
    """The joiner's probe heard the host; then the joiner is held (SIGSTOP) in its torch import,
    as on a loaded node, until the host has waited its join share, named it missing and
    ended, and the joiner's own join share is over too. It came late: "the host stopped
    answering" would send the user to a host that did its job. And it stood still (a stop, not a
    slow import, which spends CPU time): its own fault, exit 2, where an arrival late for a slow
    start alone is netcheck's deadline, exit 3 (test_rules_fault)."""
    timeout = scaled(30)
    join_share = timeout * JOIN_SHARE   # how long after its start the host takes nodes in
    with cluster(nodes(2)) as c:
        host = start(c, 0, ranked_args(0, 2, timeout), tmp_path)
        joiner = start(c, 1, ranked_args(1, 2, timeout), tmp_path, terminal=True, fresh=True)
        joiner.wait_for_progress("netcheck: rendezvous", timeout)   # reach passed: the host answered
        c.kill(joiner.proc, signal.SIGSTOP)
        # The joiner's clock started before it printed that line: its own join share is over
        # this long after the line was seen (a guess of its start-up time was not, under load).
        share_over = time.monotonic() + join_share
        finish_each([host], timeout + GRACE)
        time.sleep(max(0.0, share_over - time.monotonic()))
        c.kill(joiner.proc, signal.SIGCONT)
        finish_each([joiner], timeout)

    missing = [f for f in host.report["findings"] if f["kind"] == "missing"]
    assert [f["nodes"] for f in missing] == [[1]], host.report["findings"]
    assert joiner.rc == 2, explain([host, joiner])
    report = joiner.report
    assert not lost_in(report), report["findings"]
    stood = report["findings"][0]
    assert (stood["check"], stood["kind"], stood["nodes"]) == ("run.stopped", "frozen", [1]), report["findings"]
    joins = [f for f in report["findings"] if f["check"] == "rdzv.join"]
    assert len(joins) == 1, report["findings"]
    (late,) = joins
    assert (late["kind"], late["severity"], late["nodes"]) == ("late", "fail", [1]), late
    assert f"past the host's join deadline ({join_share:g} s after its start with --timeout {timeout:g})" \
        in late["summary"], late
    assert "refused" in late["evidence"][0], late
