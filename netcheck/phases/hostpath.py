"""A joiner that lost its host looks at the path to it, once, as soon as it is lost: a path
that drops full-size frames looks just so from here (the host's store answers a small request,
a large value hangs), and it is named a blackhole unless the mesh named it already.

The run's state (phases.state.Run) names the loss; this is the I/O it hands the look to.
"""

from __future__ import annotations

from netcheck.core.constants import PROBE_TIMEOUT
from netcheck.core.model import Finding
from netcheck.facts.probe import FULL_FRAME, full_frames_lost
from netcheck.phases.state import Run
from netcheck.rules import mesh as mesh_rules
from netcheck.rules.registry import MESH_BLACKHOLE


def ask_host_path(run: Run) -> tuple[bool, tuple[Finding, ...]]:
    """The host just stopped answering: whether a blackhole lies between this node and it (named
    by the mesh, or now), and the finding that names it now."""
    if any(f.kind == MESH_BLACKHOLE and 0 in f.nodes for f in run.findings):  # by the mesh
        return True, ()
    if _full_frames_lost(run):
        # Either end's link may be the short one: this node's named too, unseated (-1) or not.
        return True, (mesh_rules.host_blackhole_finding(run.my_ranks() or (-1,), FULL_FRAME),)
    return False, ()


def _full_frames_lost(run: Run) -> bool:
    """Within what the deadline leaves before the report (a resolve and two probes of two
    waits each)."""
    seconds = min(PROBE_TIMEOUT, run.budget.blackhole_probe_seconds())
    rdzv = run.config.rdzv
    return seconds >= 0.2 and full_frames_lost(rdzv.host, rdzv.port, seconds)
