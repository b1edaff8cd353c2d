"""--timeout's shares (netcheck.core.budget): one table, for several values and phase sets."""

from __future__ import annotations

import dataclasses

import pytest

import nodes
from cluster import NodeSpec
from netcheck.config import UsageError, check_config, select_phases
from netcheck.core.budget import (
    GOODBYE_RESERVE,
    JOIN_SHARE,
    LOOKUPS_BEFORE_SIGN_IN,
    MIN_TIMEOUT,
    PHASE_SECONDS,
    REPORT_RESERVE,
    TimeBudget,
    minimum_timeout,
    timeout_help,
)
from test_config import GOOD


@pytest.mark.parametrize("timeout,join,phases,goodbye", [
    (5.0, 2.5, 3.0, 4.5),
    (6.0, 3.0, 4.0, 5.5),
    (10.0, 5.0, 8.0, 9.5),
    (60.0, 30.0, 58.0, 59.5),
])
def test_every_deadline_is_a_share_of_timeout_fixed_at_the_start(timeout, join, phases, goodbye):
    budget = TimeBudget(timeout, start=100.0)
    assert (budget.run.at, budget.join.at, budget.phases.at, budget.goodbye.at) == (
        100.0 + timeout, 100.0 + join, 100.0 + phases, 100.0 + goodbye)
    assert (join, phases, goodbye) == (timeout * JOIN_SHARE, timeout - REPORT_RESERVE, timeout - GOODBYE_RESERVE)


@pytest.mark.parametrize("only,least", [
    ("reach", 0.0),                  # the probe alone waits on no other node
    ("rendezvous", 5.0),             # 3 s for it, 2 s for the report
    ("mesh", 10.5),                  # the rendezvous under it, and a connect, frames and results
    ("env", 8.0),
    ("bandwidth", 8.0),
    (None, MIN_TIMEOUT),             # every phase: 16.5 s
])
def test_the_least_timeout_is_each_waiting_phase_asked_and_the_report(only, least):
    phases = select_phases(None, only)
    assert minimum_timeout(phases) == least
    config = GOOD.__class__(**{**GOOD.__dict__, "phases": phases})
    assert check_config(dataclasses.replace(config, timeout=max(least, 0.5))).phases == phases
    if least:
        with pytest.raises(UsageError, match=f"--timeout {least - 0.5:g}: at least {least:g} seconds for the phases"):
            check_config(dataclasses.replace(config, timeout=least - 0.5))


def test_slow_lookups_lengthen_the_join_by_a_joiners_lookups_within_the_later_phases_least():
    """Behind a resolver answering in 4 s a joiner signs in four lookups later (issue 63): the
    join is that much longer, but never eats the least the later phases asked need."""
    budget = TimeBudget(100.0, start=100.0)
    phases = select_phases(None, None)
    slow = budget.slow_lookups(4.0, phases)
    assert slow.join.at == budget.join.at + LOOKUPS_BEFORE_SIGN_IN * 4.0 and slow.slow_lookup == 4.0
    assert (slow.run.at, slow.phases.at, slow.goodbye.at) == (budget.run.at, budget.phases.at, budget.goodbye.at)
    tight = TimeBudget(40.0, start=100.0).slow_lookups(4.0, phases)
    assert tight.join.at == 100.0 + 40.0 - minimum_timeout(phases)
    assert TimeBudget(MIN_TIMEOUT, start=100.0).slow_lookups(4.0, phases).join_extra == 0.0


def test_the_help_quotes_the_shares_from_the_budget():
    assert timeout_help().startswith(f"the host takes nodes in for the first {JOIN_SHARE:.0%}% of it, and the last "
                                     f"{REPORT_RESERVE:g} s are kept for the report; at least 3 s for each phase")
    assert timeout_help().endswith(f"{PHASE_SECONDS['mesh']:g} for the mesh ({MIN_TIMEOUT:g} s for all)")


# --- on namespace nodes ---------------------------------------------------------------------------

@pytest.mark.root_required
def test_a_lone_host_at_the_least_timeout_ends_inside_it_and_blames_the_absent_nodes_not_time(cluster, tmp_path):
    """Before, a lone host at --timeout 6 ran 10 s (torch's import came on top of every deadline)
    and said run.timeout for phases that never ran, and 'raise --timeout' where no node came."""
    with cluster([NodeSpec()]) as c:
        (host,) = nodes.finish_all([nodes.start(c, 0, ["--rdzv", "node0:29500", "--timeout", f"{MIN_TIMEOUT:g}"],
                                                tmp_path, bandwidth=True)], MIN_TIMEOUT + nodes.GRACE)
    report = host.report
    assert host.seconds < MIN_TIMEOUT + nodes.GRACE, "Python's start-up aside, --timeout bounds the run"
    assert not host.findings("run.timeout"), nodes.explain([host])
    assert not [f for f in report["findings"] if "raise --timeout" in f["fix"]], nodes.explain([host])
    # The host's store needs torch: on a loaded node its import may not be done in time, and that is said.
    alone = [f for f in host.findings("rdzv.join") if f["kind"] == "alone"]
    slow = [f for f in host.findings("run.torch") if f["kind"] == "slow_import"]
    assert alone or slow, nodes.explain([host])


@pytest.mark.root_required
def test_only_the_mesh_below_its_least_timeout_is_refused_and_at_it_ends_inside_it(cluster, tmp_path):
    """--timeout 6 --only mesh ran 16 s on a busy machine and blamed time; 6 s cannot hold the
    rendezvous and the mesh, so it is a usage error naming the least, 10.5 s, which ends in time.
    At the least, the host and the joiner run the mesh or skip it together (phases.agree): one
    skipping what the other ran was named lost in it."""
    def args(i: int, timeout: float) -> list[str]:
        return ["--rdzv", "node0:29500", "--nnodes", "2", "--node-rank", str(i), "--timeout", f"{timeout:g}",
                "--only", "mesh"]

    least = minimum_timeout(select_phases(None, "mesh"))
    with cluster([NodeSpec(), NodeSpec()]) as c:
        (refused,) = nodes.finish_all([nodes.start(c, 0, args(0, 6), tmp_path)], nodes.GRACE)
        runs = nodes.finish_all([nodes.start(c, i, args(i, least), tmp_path) for i in range(2)], least + nodes.GRACE)
    assert refused.rc == 64 and f"--timeout 6: at least {least:g} seconds for the phases asked" in refused.stderr
    assert all(r.seconds < least + nodes.GRACE for r in runs), [r.seconds for r in runs]
    host = runs[0]
    assert not host.findings("run.timeout"), nodes.explain(runs)
    if host.rc == 0:   # the mesh ran and passed
        assert host.findings("mesh.connect", "pass"), nodes.explain(runs)
    else:              # a loaded machine: the joiner came late, torch loaded slowly, or the rendezvous left too little
        said = {(f["check"], f["kind"]) for f in host.report["findings"] if f["severity"] != "pass"}
        late = {("rdzv.join", "missing"), ("rdzv.join", "facts_lost"), ("run.torch", "slow_import"),
                ("run.skipped", "phase_skipped")}
        assert said & late, nodes.explain(runs)
    assert not [f for f in host.findings("rdzv.join") if f["kind"].startswith("lost_in")], nodes.explain(runs)
