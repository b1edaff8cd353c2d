"""After the phases: joiners say goodbye, the host waits for them and judges the launch over
every process that came."""

from __future__ import annotations

from netcheck.cluster import rendezvous
from netcheck.cluster.store import collect
from netcheck.core.constants import GOODBYE_WAIT, MIN_PHASE_SECONDS
from netcheck.phases.state import Run
from netcheck.rules import launch as launch_rules, rdzv as rdzv_rules, run as run_rules


def _judge_launch(run: Run, seat: rendezvous.Seat) -> None:
    """launch.topology over every process that came, latecomers after the roster included:
    the extra processes of an `srun --ntasks-per-node=8` arrive in no particular order."""
    seen = set(run.arrivals.arrivals)
    rendezvous.poll_arrivals(seat.exchange, run.arrivals)
    ranks = {e.arrival: e.rank for e in seat.roster.entries}
    late = {a: f for a, f in run.arrivals.arrivals.items() if a not in seen}
    run.findings += rdzv_rules.latecomer_findings(list(late.values()), seat.roster)
    devices = {m.rank: uuid for m in run.members
               if m.env and (uuid := launch_rules.device_uuid(m.facts, m.env.values))}
    run.findings += launch_rules.launch_findings(
        [(ranks.get(a), f) for a, f in sorted(run.arrivals.arrivals.items())], devices)


def leave(run: Run, seat: rendezvous.Seat) -> None:
    """Joiners say goodbye; the host keeps the store up until all have (FAILURES row 17)."""
    if run.role != "host":
        seat.goodbye()
        return
    with run.phase("goodbye"):
        arrivals = [e.arrival for e in seat.roster.entries
                    if e.arrival != seat.arrival and e.rank in run.alive]
        deadline = run.phase_deadline(GOODBYE_WAIT)
        # Joiners started their --timeout a little after the host: with the host's time
        # all but spent, a goodbye not yet in says nothing about the node.
        fair = deadline.remaining() >= MIN_PHASE_SECONDS
        gone = collect(seat.exchange, int, rendezvous.BYE, arrivals, deadline)
        silent = {e.rank: e.hostname for e in seat.roster.entries if e.arrival in set(arrivals) - set(gone)}
        run.findings += (rdzv_rules.lost_findings("goodbye", silent, sorted(silent)) if fair
                         else run_rules.unheard_goodbyes(silent))
        _judge_launch(run, seat)
