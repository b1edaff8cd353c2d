"""After the phases: joiners say goodbye, the host waits for them and judges the launch over
every process that came, and what needs every phase's measurements (host.buffers). The runner
says the goodbye in this order (runner._leave) and folds what each step hands back."""

from __future__ import annotations

import time
from typing import Callable

from netcheck.cluster import hostgather, rendezvous
from netcheck.cluster.collect import collect
from netcheck.core import codec
from netcheck.core.budget import MIN_PHASE_SECONDS
from netcheck.core.constants import GOODBYE_WAIT, HOST_WORD_LOOK, HOST_WORD_PACES, STOPPED_GOODBYE_WAIT
from netcheck.core.deadline import Deadline
from netcheck.core.model import HOST, is_torchrun_worker
from netcheck.core.rdzvrecords import Roster
from netcheck.core.storeerrors import StoreError
from netcheck.core.storekeys import ARRIVAL_KEYED, BYE, REPORTED, VERDICT
from netcheck.phases.assemble import build_report, judged_findings, run_fault
from netcheck.phases.state import Learnt, Run, heard_verdict
from netcheck.rules import baseline
from netcheck.rules import buffers as buffers_rules
from netcheck.rules import bw as bw_rules
from netcheck.rules import launch as launch_rules
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules import run as run_rules
from netcheck.rules import storetrouble as storetrouble_rules


def launch_judged(run: Run, seat: rendezvous.Seat) -> Learnt:
    """launch.topology over every process that came, latecomers after the roster included:
    the extra processes of an `srun --ntasks-per-node=8` arrive in no particular order.
    Latecomers are all named, but kept whole (for these checks) only up to a count."""
    roster, arrivals = _seated(run, seat)
    hostgather.poll_arrivals(seat.exchange, arrivals)
    return judge_launch(run, arrivals, roster)


def _seated(run: Run, seat: rendezvous.Seat) -> tuple[Roster, hostgather.HostState]:
    """The host's roster and what came: the host is seated (runner: no goodbye for a node without
    a rank) by post_roster, after host_gather, so both are there."""
    assert seat.roster is not None and run.arrivals is not None, "the host said goodbye before its roster"
    return seat.roster, run.arrivals


def judge_launch(run: Run, arrivals: hostgather.HostState, roster: Roster) -> Learnt:
    """launch.topology and the latecomers, over every process the host read (arrivals)."""
    ranks = {e.arrival: e.rank for e in roster.entries}
    devices = {m.rank: uuid for m in run.members
               if m.env and (uuid := launch_rules.device_uuid(m.facts, m.env.values))}
    return Learnt(tuple(rdzv_rules.latecomer_findings(arrivals.latecomers, roster) + launch_rules.launch_findings(
        [(ranks.get(a), f) for a, f in sorted(arrivals.arrivals.items())], devices)))


def judge_baseline(run: Run) -> Learnt:
    """--baseline, once: on the host before it tells its verdict, so that the joiners it names
    hear the drift (and a joiner's own comparison is there to meet the host's); where no
    goodbye is said (a node never seated), at the end of the run."""
    if run.config.baseline is None or run.baseline_judged:
        return Learnt()
    draft = build_report(run)
    return Learnt(tuple(baseline.drift_findings(run.config.baseline, draft.nodes, draft.recommend, draft.bandwidth,
                                                whole=run.role == HOST)), baseline_judged=True)


def judge_buffers(run: Run) -> Learnt:
    """host.buffers, on the host before it tells its verdict: every node's buffers against its
    paths need what every phase measured (the mesh's round trips, the interfaces' rates, the pair
    test and the figures that fell short), and the joiners it names hear it."""
    result = run.bandwidth
    measured = bw_rules.pair_yardstick(result) if result is not None and result.pairs else None
    return Learnt(tuple(buffers_rules.buffer_findings(run.members, run.attempts, run.findings, measured)))


def rejected(seat: rendezvous.Seat) -> Learnt:
    """The values this node refused, each sender named: said before the goodbye."""
    return Learnt(tuple(storetrouble_rules.rejected_findings(_rejected(seat), seat.hostnames)))


def tell_verdict(run: Run, seat: rendezvous.Seat) -> Learnt:
    """The host tells its verdict (launch_judged's findings in it), then keeps the store up until
    every joiner has said goodbye (docs/contract.md, "By design"); those that did not are lost in
    the goodbye, or, where the host's time was all but spent, unheard. A host a signal stopped
    tells that instead."""
    roster, _ = _seated(run, seat)
    arrivals = [e.arrival for e in roster.entries
                if e.arrival != seat.arrival and e.rank in run.alive]
    if run.stopped_by is not None:
        return _tell_stopped(run, seat, roster, arrivals)
    findings = judged_findings(run)   # once: the stall it reads moves on between two reads
    seat.exchange.put(seat.exchange.key(VERDICT), run_rules.cluster_verdict(findings, fault=run_fault(run, findings)))
    deadline = run.goodbye_deadline().within(GOODBYE_WAIT)
    # Joiners started their --timeout a little after the host: with the host's time
    # all but spent, a goodbye not yet in says nothing about the node.
    fair = deadline.remaining() >= MIN_PHASE_SECONDS
    gone = collect(seat.exchange, BYE, arrivals, deadline)
    unheard = set(arrivals) - set(gone)   # once: per entry it was 0.7 s at 4,096 nodes
    silent = {e.rank: e.hostname for e in roster.entries if e.arrival in unheard}
    return Learnt(tuple(rdzv_rules.lost_findings("goodbye", silent, sorted(silent)) if fair
                        else run_rules.unheard_goodbyes(silent)))


def _tell_stopped(run: Run, seat: rendezvous.Seat, roster: Roster, arrivals: list[int]) -> Learnt:
    """A host a signal stopped tells the joiners so on its way out (its verdict, saying the
    stop), and keeps its store up, briefly, until they have said goodbye: each ends its phases
    at its next look (agree.host_word), names nobody for the stop, and is not named lost here.
    One that does not say goodbye in time loses the host, and says so, as before."""
    assert run.stopped_by is not None
    ex = seat.exchange
    ex.put(ex.key(VERDICT), run_rules.cluster_verdict(run.findings, run.stopped_by.name, run.stopped_in or "",
                                                      run_fault(run)))
    wait = max(STOPPED_GOODBYE_WAIT, 2 * max(HOST_WORD_LOOK, HOST_WORD_PACES * ex.pause))
    gone = set(collect(ex, BYE, arrivals, run.goodbye_deadline().within(wait)))
    names = {e.arrival: e.hostname for e in roster.entries}
    heard = [names[a] for a in arrivals if a in gone]
    unheard = [names[a] for a in arrivals if a not in gone]
    return Learnt(earlier=tuple(run_rules.told_stop(run.findings, _listed(heard), _listed(unheard))))


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


SHOWN_NAMES = 8   # nodes named in a line about whom a stopped host told (the rest counted)


def _rejected(seat: rendezvous.Seat) -> list[tuple[int | None, str, str]]:
    """(the sender's rank, key, why) of each value this node refused; the rendezvous' own
    keys are posted under the sender's arrival number, the later phases' under its rank. Only
    the host reads values posted under an arrival number, and only it holds the roster."""
    ex = seat.exchange
    by_arrival = {e.arrival: e.rank for e in seat.roster.entries} if seat.roster else {}
    return [(by_arrival.get(i) if key in ARRIVAL_KEYED else i, ex.key(key, i), why)
            for key, i, why in ex.interference.refusals()]


def hear_verdict(run: Run, seat: rendezvous.Seat) -> Learnt:
    """The host's findings about this node become its own: a node the host names faulty
    never exits 0 (under Kubernetes each pod's status is what an operator sees)."""
    # As long as the run allows: the host may still be waiting out nodes lost in a phase, and
    # it tells its verdict before its own deadline, which ends before this node's.
    ex, deadline, since = seat.exchange, run.goodbye_deadline(), time.monotonic()
    try:
        told = ex.wait_read(ex.key(VERDICT), deadline)
    except (TimeoutError, codec.DecodeError):
        return Learnt((run_rules.verdict_unheard(time.monotonic() - since),))
    # One that says a signal stopped the host: the phases ended here without word of it (the
    # bandwidth phase's own abort), and the stop is said.
    return heard_verdict(run, told)


def report_out(run: Run, exit_code: int) -> Callable[[], None]:
    """What this process does once its report is written. Under torchrun a worker that exits
    non-zero stops every worker of its node at once (the agent's FAILED state; with
    --max-restarts it restarts them all): a joiner that fails before the host has written
    its report would cut the cluster's report off, mid-goodbye or mid-write. So there the
    host says when its report is out, and a failing joiner waits for that before it exits."""
    seat = run.seat
    if seat is None or seat.rank is None or not is_torchrun_worker(run.config.launch):
        return lambda: None
    if run.role == HOST:
        return lambda: _say_reported(seat)
    if exit_code == 0 or run.host_lost or run.stopped_by is not None:
        return lambda: None
    return lambda: _wait_reported(seat, Deadline(run.deadline.remaining()))


def _say_reported(seat: rendezvous.Seat) -> None:
    try:
        seat.exchange.put(seat.exchange.key(REPORTED), 1)
    except StoreError:
        pass  # the store is gone (the agent ended): so are the joiners waiting on it


def _wait_reported(seat: rendezvous.Seat, deadline: Deadline) -> None:
    """Until the host has written its report, its store is gone (it hosted the store and
    ended), or --timeout is spent; the agent's SIGTERM, once the host failed, ends it too:
    this node's report is written already."""
    try:
        seat.exchange.wait(seat.exchange.key(REPORTED), deadline)
    except (TimeoutError, StoreError, KeyboardInterrupt):
        pass
