"""The phases in order, each under its own deadline inside --timeout.

Each phase module gathers its facts, exchanges them and asks the rules for findings, and hands
back what it learnt (state.Learnt); the runner orders them and folds what they hand back. It
prints nothing itself (progress goes through the callback the CLI hands it) and always returns
a report, also when a phase fails, times out or is interrupted.
"""

from __future__ import annotations

from typing import Callable

from netcheck.cluster import compat
from netcheck.cluster.rendezvous import Seat
from netcheck.config import Config
from netcheck.core.budget import PHASE_SECONDS
from netcheck.core.constants import EXIT_SIGNALLED
from netcheck.core.model import HOST, Finding, Member, exit_of
from netcheck.facts.local import gather_facts, hosts_file_names
from netcheck.facts.stall import StallWatch
from netcheck.phases import bandwidth, env, goodbye, hostpath, mesh, nic, reach, rendezvous, stop
from netcheck.phases.agree import agreed
from netcheck.phases.assemble import build_report
from netcheck.phases.state import Learnt, Outcome, Run, fold, fold_each
from netcheck.rules import ports as ports_rules
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules import run as run_rules
from netcheck.rules.registry_judges import LocalRecords, judged


def run_check(config: Config, progress: Callable[[str], None], started: float) -> Outcome:
    run = Run(config, progress, hostpath.ask_host_path, started, hosts_file_names(), StallWatch(started).longest)
    try:
        _run_phases(run)
    except KeyboardInterrupt as e:
        run.stop(e)
    fold(run, goodbye.judge_baseline(run))   # where no goodbye judged it
    report = build_report(run)
    code = EXIT_SIGNALLED + run.stopped_by if run.stopped_by is not None else exit_of(report)
    return Outcome(report, code, run.stopped_by, goodbye.report_out(run, code))



def _run_phases(run: Run) -> None:
    with run.phase("local"):
        run.facts = gather_facts(run.config.run_id, run.config.launch)
        # Said before any phase opens a socket: a node too short of ports for the job is named
        # by itself, whatever becomes of the phases after (the host judges every node's again).
        me = (Member(-1 if run.rank is None else run.rank, run.facts),)
        fold(run, Learnt(tuple(judged("local", LocalRecords(run.facts, me, ports_rules.own_size(run.facts.launch))))))
    if run.facts is None or "reach" not in run.config.phases or not fold_each(run, reach.take_role(run)):
        return
    if run.listener is None and not _reached(run):
        return
    if "rendezvous" not in run.config.phases:
        if run.listener is not None:
            run.listener.close()
        return
    compat.start_import()   # after the probe, which answers before torch loads; waited for to a deadline
    seat = run.seat = fold_each(run, rendezvous.host(run) if run.role == HOST else rendezvous.joiner(run))
    if seat is None or seat.rank is None:
        return
    try:
        _after_rendezvous(run, seat)
    except KeyboardInterrupt as e:
        run.stop(e)  # before the goodbye, which tells (or hears) the verdict
        raise
    except stop.HostStopped:
        pass   # heard in the phase it came in (Run.phase); this node says goodbye and ends
    finally:
        _leave(run, seat)


def _reached(run: Run) -> bool:
    """A joiner's probe of the endpoint (the reach phase): whether it goes on to the rendezvous."""
    with run.phase("reach"):
        through, learnt = reach.reached(run)
        fold(run, learnt)
        return through
    return False   # the phase failed: named in it


def _leave(run: Run, seat: Seat) -> None:
    """The host tells its verdict, then keeps the store up until every joiner has said goodbye;
    a joiner hears the verdict before it says goodbye (phases.goodbye). What needs every phase
    (--baseline, host.buffers) is judged first, so that the joiners it names hear it."""
    fold(run, goodbye.rejected(seat))
    fold(run, goodbye.judge_baseline(run))
    if run.role != HOST:
        if not run.host_lost and run.stopped_by is None and run.cluster is None:
            with run.phase("goodbye"):
                fold(run, goodbye.hear_verdict(run, seat))
        seat.goodbye()
        return
    fold(run, goodbye.judge_buffers(run))
    if run.host_lost:   # its own store stopped answering it: no joiner can hear its verdict
        return
    with run.phase("goodbye"):
        if run.stopped_by is None:
            fold(run, goodbye.launch_judged(run, seat))
        fold(run, goodbye.tell_verdict(run, seat))


def _after_rendezvous(run: Run, seat: Seat) -> None:
    if seat.rank not in run.alive:
        run.findings.append(rdzv_rules.left_behind_finding(run.my_ranks()))
        return
    between_nodes = [p for p in ("mesh", "nic", "bandwidth") if p in run.config.phases]
    if len(run.alive) < 2:
        run.findings += run_rules.no_peer_findings(between_nodes)
        between_nodes = []
    if "mesh" in between_nodes:
        with run.phase("mesh"):
            if _agreed(run, seat, "mesh"):
                fold_each(run, mesh.connect_mesh(run, seat, dict(run.alive)))
    env_go = None
    if "nic" in between_nodes:
        with run.phase("nic"):
            if run.role == HOST and "env" in run.config.phases:
                # Said before the nic rules (2 s at 4,096 nodes): the nodes post their env facts
                # while the host judges interfaces, and it finds them there when it collects.
                env_go = _agreed(run, seat, "env")
            fold(run, nic.judge_interfaces(run))
    if "env" in run.config.phases:
        with run.phase("env"):
            if env_go if env_go is not None else _agreed(run, seat, "env"):
                fold_each(run, env.compare_env(run, seat, dict(run.alive)))
    if "bandwidth" in between_nodes:
        with run.phase("bandwidth"):
            fold_each(run, bandwidth.measure_bandwidth(run, seat))


def _agreed(run: Run, seat: Seat, phase: str) -> bool:
    """Whether every node runs `phase` (agreed: the host's word on its time left), the reason
    where not said."""
    skipped = agreed(run, seat, phase, lambda: _short_of_time(run, phase))
    if skipped is not None:
        fold(run, Learnt((skipped,)))
    return skipped is None


def _short_of_time(run: Run, phase: str) -> Finding | None:
    """Why --timeout leaves a phase too little time to finish (None: it leaves enough): one
    started with nothing left would name live nodes lost for the host's own lack of time. Asked
    of the host alone: its answer is every node's (agreed)."""
    left = run.phase_deadline().remaining()
    if left >= PHASE_SECONDS[phase]:
        return None
    if len(run.alive) < 2:   # the time went to waiting for nodes that never came: that is the cause
        return run_rules.skipped_finding(
            phase, f"only {left:.1f} s of --timeout left: no other node came, and the rendezvous waited for them "
            f"({run.timings.get('rendezvous', 0.0):.1f} s, its share {run.join_seconds:g} s)", run_rules.NO_PEER_FIX)
    return run_rules.skipped_finding(phase, f"only {left:.1f} s of --timeout left", run_rules.SHORT_OF_TIME_FIX)
