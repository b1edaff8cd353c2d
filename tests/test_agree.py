"""phases/agree.py on a real store: a joiner follows the host's word on a phase, and one whose
own --timeout runs out before that word comes skips the phase, said as such (chaos seed 20612,
schedule 40: it raised TimeoutError, an internal error, exit 3)."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

from netcheck.cli import build_parser, config_from_args
from netcheck.cluster import compat
from netcheck.cluster.rendezvous import Seat
from netcheck.cluster.store import Exchange
from netcheck.core.constants import HOST_WORD_LOOK
from netcheck.core.deadline import Deadline
from netcheck.core.model import Finding
from netcheck.core.storekeys import GO, VERDICT
from netcheck.phases.agree import agreed, host_word
from netcheck.phases.state import Run
from netcheck.phases.stop import HostStopped
from netcheck.rules import run as run_rules


def joiner_on(ex: Exchange, seconds_left: float) -> Run:
    config = config_from_args(build_parser().parse_args(["--rdzv", "127.0.0.1:29500", "--nnodes", "2",
                                                         "--node-rank", "1", "--only", "reach,rendezvous,env"]), {})
    run = Run(config, lambda line: None, lambda run: (False, ()))
    # Started long enough ago that its phases have `seconds_left`.
    spent = run.budget.phases.remaining() - seconds_left
    run.budget = dataclasses.replace(run.budget, start=run.budget.start - spent)
    return run


def test_a_joiner_follows_the_hosts_word_and_skips_a_phase_its_own_time_ran_out_for():
    server = compat.import_distributed().TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10),
                                                  wait_for_workers=False)
    ex = Exchange(server, "netcheck", end=Deadline(60))
    ex.put(ex.key(GO, "mesh"), True)
    run = joiner_on(ex, 5.0)
    assert agreed(run, Seat(ex, 1), "mesh", lambda: None) is None
    run = joiner_on(ex, 0.3)
    skipped = agreed(run, Seat(ex, 1), "env", lambda: None)   # the host never posted it
    assert skipped is not None
    assert (skipped.check, skipped.severity, skipped.kind) == ("run.skipped", "warn", "phase_skipped")
    assert "this node's --timeout ran out before the host's word" in skipped.summary


def test_a_joiner_waiting_for_the_hosts_word_hears_that_a_signal_stopped_the_host():
    """The host, stopped, tells its verdict with the stop instead of the word a joiner waits for:
    the joiner's wait ends within a look (HostStopped), and Run.phase keeps the host's verdict
    and warns run.stopped host_stopped, naming no node. A verdict without a stop is no such word."""
    server = compat.import_distributed().TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10),
                                                  wait_for_workers=False)
    ex = Exchange(server, "netcheck", end=Deadline(60))
    ex.put(ex.key(VERDICT), run_rules.cluster_verdict([Finding(check="nic.mtu", severity="warn", nodes=(1,),
                                                               summary="odd MTU")]))
    with pytest.raises(TimeoutError):
        host_word(ex, ex.key(GO, "env"), Deadline(HOST_WORD_LOOK + 0.5))
    stopped = run_rules.cluster_verdict([run_rules.stopped_finding("SIGINT", "mesh", (0,)),
                                         Finding(check="nic.mtu", severity="warn", nodes=(1,),
                                                 summary="odd MTU")], "SIGINT", "mesh")
    ex.put(ex.key(VERDICT), stopped)
    run, began = joiner_on(ex, 30.0), time.monotonic()
    run.rank = 1
    with pytest.raises(HostStopped), run.phase("env"):
        agreed(run, Seat(ex, 1), "env", lambda: None)
    assert time.monotonic() - began < HOST_WORD_LOOK + 1.0, "within a look, not at the deadline"
    assert run.cluster is not None and run.cluster.stopped == "SIGINT"
    assert [(f.check, f.severity, f.kind, f.nodes) for f in run.findings] == [
        ("nic.mtu", "warn", "", (1,)), ("run.stopped", "warn", "host_stopped", ())]
    assert run.unfinished == "env"
    ex.put(ex.key(GO, "bandwidth"), True)
    assert host_word(ex, ex.key(GO, "bandwidth"), Deadline(5)), "a word that came is read first"
