"""--timeout, divided once: the run's deadlines, each share named here and nowhere else.

    0 s                                                                      T (--timeout)
    | local | reach | rendezvous ......................| mesh | nic | env | bandwidth | goodbye | report |
                     the host takes nodes in until                          phases end by T - REPORT_RESERVE
                     JOIN_SHARE x T after its start               the host's goodbye by T - GOODBYE_RESERVE

Every deadline is fixed from the moment the run started, its process's start where netcheck is
the process (cli.entry: the interpreter's and imports' seconds count): a phase asks for the
same point in time however late it asks. A phase after the rendezvous starts only with
MIN_PHASE_SECONDS left before the phases' end, and says so when it cannot. torch's import,
seconds of CPU on a loaded node, starts once the reach probe has answered and is waited for only up to
the deadline of the phase that needs it (cluster.compat.import_distributed), so --timeout
bounds the whole run at every value the command line accepts (MIN_TIMEOUT and up). One share
moves, once, in the reach phase: where this node's lookups are slow, the join lasts longer
(slow_lookups), as the joiners behind a slow resolver come later.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from netcheck.core.constants import MESH_CONNECT_TIMEOUT, MESH_RESULTS_MARGIN, MESH_TRANSFER_TIMEOUT
from netcheck.core.deadline import Deadline

JOIN_SHARE = 0.5         # of --timeout: the host takes nodes in for this share, from its start
REPORT_RESERVE = 2.0     # seconds kept back from every phase, so the report is always written
GOODBYE_RESERVE = 0.5    # the host's goodbye reaches into REPORT_RESERVE: its joiners read its verdict then
MIN_PHASE_SECONDS = 3.0  # a phase with less than this left before the phases' end is skipped, and said so
# The phases that wait on other nodes, and the least each needs to be worth starting: the
# mesh one connect and its full-size frames, and the time to post and collect the results.
# The least --timeout for a run is theirs (of those asked) plus the report's reserve; below
# it the run could only skip what was asked, or time out. (The bandwidth phase skips itself,
# and says so, where --bw-budget does not fit what is left.)
PHASE_SECONDS = {"rendezvous": MIN_PHASE_SECONDS,
                 "mesh": MESH_CONNECT_TIMEOUT + MESH_TRANSFER_TIMEOUT + MESH_RESULTS_MARGIN,
                 "env": MIN_PHASE_SECONDS, "bandwidth": MIN_PHASE_SECONDS}
WAITING_PHASES = tuple(PHASE_SECONDS)
MIN_TIMEOUT = REPORT_RESERVE + sum(PHASE_SECONDS.values())   # every phase, the default
# A joiner's lookups of the endpoint before it can sign in: the reach probe's, then its store
# client's three (the name's AAAA and A, one after the other, and the address it connects to:
# core.names.lookups_per_connect). Where a lookup is slow, the host takes nodes in for that many
# lookups longer than its share.
LOOKUPS_BEFORE_SIGN_IN = 4
# Of a joiner's phases' time left once it lost the host: the blackhole probe's share (a resolve
# and two probes of two waits each: five waits).
BLACKHOLE_PROBE_WAITS = 5
# The bandwidth phase keeps this much of its own deadline for the nodes to exchange their
# accounts once the workers are done, but never more than BW_REPORT_SHARE of it.
BW_REPORT_RESERVE = 3.0
BW_REPORT_SHARE = 0.2


def minimum_timeout(phases: tuple[str, ...]) -> float:
    """The least --timeout that gives each phase asked that waits on other nodes its
    PHASE_SECONDS, and the report its reserve (0 where none waits: the reach probe alone)."""
    waiting = [PHASE_SECONDS[p] for p in WAITING_PHASES if p in phases]
    return REPORT_RESERVE + sum(waiting) if waiting else 0.0


def timeout_help() -> str:
    """--timeout's help (argparse's: a % doubled), the shares from here."""
    return (f"the host takes nodes in for the first {JOIN_SHARE:.0%}% of it, and the last {REPORT_RESERVE:g} s "
            f"are kept for the report; at least {MIN_PHASE_SECONDS:g} s for each phase asked that waits on other "
            f"nodes, {PHASE_SECONDS['mesh']:g} for the mesh ({MIN_TIMEOUT:g} s for all)")


@dataclass(frozen=True)
class TimeBudget:
    """One run's deadlines, from --timeout and the moment it started."""

    timeout: float
    start: float          # time.monotonic() at the run's start
    join_extra: float = 0.0   # past the join's share, where lookups are slow (slow_lookups)
    slow_lookup: float = 0.0  # ... and one lookup's seconds here, then

    @property
    def run(self) -> Deadline:
        return Deadline(self.timeout, start=self.start)

    @property
    def join_seconds(self) -> float:
        """How long after its start the host takes nodes in, at most."""
        return self.timeout * JOIN_SHARE + self.join_extra

    @property
    def join(self) -> Deadline:
        return Deadline(self.join_seconds, start=self.start)

    @property
    def phases(self) -> Deadline:
        """Where every phase ends: the run's end less the report's reserve."""
        return Deadline(max(0.0, self.timeout - REPORT_RESERVE), start=self.start)

    @property
    def goodbye(self) -> Deadline:
        """The goodbye's: past the phases' end, since the host tells its verdict only once its
        phases are done, which may be at their deadline; the report takes milliseconds."""
        return Deadline(max(0.0, self.timeout - GOODBYE_RESERVE), start=self.start)

    def slow_lookups(self, lookup_seconds: float, phases: tuple[str, ...]) -> "TimeBudget":
        """This budget with a join longer than its share where one lookup takes `lookup_seconds`:
        a joiner behind that resolver comes LOOKUPS_BEFORE_SIGN_IN lookups later, and is waited
        for, but never past what leaves the phases asked after the rendezvous their least time."""
        room = self.timeout - minimum_timeout(phases) - self.timeout * JOIN_SHARE
        return replace(self, join_extra=max(0.0, min(LOOKUPS_BEFORE_SIGN_IN * lookup_seconds, room)),
                       slow_lookup=lookup_seconds)

    def blackhole_probe_seconds(self) -> float:
        """Each wait of the probe a joiner makes once it lost the host (full_frames_lost)."""
        return self.phases.remaining() / BLACKHOLE_PROBE_WAITS


def bandwidth_report_reserve(phase_seconds: float) -> float:
    """Of the bandwidth phase's time, what is kept for exchanging the nodes' accounts."""
    return min(BW_REPORT_RESERVE, BW_REPORT_SHARE * phase_seconds)
