"""phases/agree.py on a real store: a joiner follows the host's word on a phase, and one whose
own --timeout runs out before that word comes skips the phase, said as such (chaos seed 20612,
schedule 40: it raised TimeoutError, an internal error, exit 3)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from netcheck.cli import build_parser, config_from_args
from netcheck.cluster.rendezvous import Seat
from netcheck.cluster.store import Exchange
from netcheck.core import compat
from netcheck.core.deadline import Deadline
from netcheck.core.storekeys import GO
from netcheck.phases.agree import agreed
from netcheck.phases.state import Run


def joiner_on(ex: Exchange, seconds_left: float) -> Run:
    config = config_from_args(build_parser().parse_args(["--rdzv", "127.0.0.1:29500", "--nnodes", "2",
                                                         "--node-rank", "1", "--only", "reach,rendezvous,env"]), {})
    run = Run(config, lambda line: None, lambda run: False)
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
    assert agreed(run, Seat(ex, 1), "mesh", lambda: False) and not run.findings
    run = joiner_on(ex, 0.3)
    assert not agreed(run, Seat(ex, 1), "env", lambda: True)   # the host never posted it
    (skipped,) = run.findings
    assert (skipped.check, skipped.severity, skipped.kind) == ("run.skipped", "warn", "phase_skipped")
    assert "this node's --timeout ran out before the host's word" in skipped.summary
