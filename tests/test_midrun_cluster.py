"""A firewall rule that lands mid-run, once the sweep's workers are up (issue 62's "Done when").

Three nodes on namespaces, --timeout 20, the bandwidth phase on: once the victim's bandwidth
workers have joined the store (they hold a connection to the endpoint port), a DROP rule lands in
its INPUT chain, as a configuration push or a security agent writes one (`iptables -I INPUT -p
tcp --dport 29500 -j DROP` and the same for --sport; or every packet), loopback included: on the
host it cuts its own store client too. Each case asserts the promise an operator's runbook leans
on, the campaign oracle's (tests/chaos/oracle.py) for a fault that lands before the sweep has
measured: every node ends within --timeout + CHAOS_GRACE of its start, none exits 0 (nor 3),
each writes a valid report, and the node at fault is named alone in a failing finding: by the
host where a joiner is the victim, by every joiner where it is the host (and by the host itself,
which still writes its report).
"""

from __future__ import annotations

import pytest

from chaos.midrun import land_rules, workers_up
from chaos.oracle import CHAOS_GRACE
from faults import finish_each, nodes, ranked_args, wait_until
from nodes import PORT, scaled, start

pytestmark = pytest.mark.root_required

TIMEOUT = scaled(20)
N = 3


def named_alone(report: dict, rank: int) -> bool:
    return any(f["severity"] == "fail" and f["nodes"] == [rank] for f in report["findings"])


def ends(runs) -> str:
    return "; ".join(f"node{r.node} exit {r.rc} after {r.seconds:.1f} s" for r in runs)


def failures(report: dict) -> list:
    return [(f["check"], f["kind"], f["nodes"]) for f in report["findings"] if f["severity"] != "pass"]


@pytest.mark.parametrize("victim,ports", [(0, "endpoint"), (1, "endpoint"), (0, "all"), (1, "all")],
                         ids=["host-endpoint", "joiner-endpoint", "host-all-ports", "joiner-all-ports"])
def test_a_drop_rule_once_the_workers_are_up_ends_every_node_in_time(cluster, tmp_path, victim, ports):
    with cluster(nodes(N)) as c:
        runs = [start(c, i, ranked_args(i, N, TIMEOUT), tmp_path, bandwidth=True, terminal=True) for i in range(N)]
        wait_until(lambda: workers_up(runs[victim].proc.pid, PORT) or runs[victim].proc.poll() is not None,
                   TIMEOUT, f"node{victim}'s workers on the store")
        assert runs[victim].proc.poll() is None, f"node{victim} ended before its workers were up"
        land_rules(c, victim, ("INPUT",), ports, "DROP", PORT)
        # Long enough to see how far past its bound a node runs, not only that it does.
        finish_each(runs, TIMEOUT + scaled(60))
    print(f"node{victim} {ports}: {ends(runs)}")   # pytest -s: what the grace is measured against
    late = [r for r in runs if r.seconds > TIMEOUT + CHAOS_GRACE]
    assert not late, f"past --timeout {TIMEOUT:g} + {CHAOS_GRACE:g} s: {ends(late)} ({ends(runs)})"
    assert not [r for r in runs if r.rc in (0, 3, 64)], ends(runs)
    reports = {r.node: r.report for r in runs}   # each validated against the schema
    assert not [r for r in runs if "Traceback" in r.stderr], ends(runs)
    if victim == 0:
        for j in range(1, N):
            assert named_alone(reports[j], 0), (j, failures(reports[j]))
    assert named_alone(reports[0], victim), failures(reports[0])


def test_the_host_s_own_link_down_mid_sweep_names_the_host_not_its_joiners(cluster, tmp_path):
    """The host's cable pulled once its workers are up: every joiner goes quiet for the host at
    once. Its report names its own link (node 0), not the joiners as lost; the joiners name the
    host; every node ends in time and none exits 0."""
    with cluster(nodes(N)) as c:
        runs = [start(c, i, ranked_args(i, N, TIMEOUT), tmp_path, bandwidth=True, terminal=True) for i in range(N)]
        wait_until(lambda: workers_up(runs[0].proc.pid, PORT) or runs[0].proc.poll() is not None,
                   TIMEOUT, "node0's workers on the store")
        c.cut_link(0)
        finish_each(runs, TIMEOUT + scaled(60))
    late = [r for r in runs if r.seconds > TIMEOUT + CHAOS_GRACE]
    assert not late and not [r for r in runs if r.rc in (0, 3, 64)], ends(runs)
    reports = {r.node: r.report for r in runs}
    lost = [f for f in reports[0]["findings"] if f["check"] == "rdzv.join" and f["severity"] == "fail"]
    assert [f["nodes"] for f in lost] == [[0]] and "link" in lost[0]["summary"], failures(reports[0])
    blamed = {n for f in reports[0]["findings"] if f["severity"] == "fail" for n in f["nodes"]}
    assert blamed == {0}, failures(reports[0])   # bw.stage too: the joiners' silence was its link's
    for j in range(1, N):
        assert named_alone(reports[j], 0), (j, failures(reports[j]))


@pytest.mark.parametrize("chains", [("INPUT",), ("OUTPUT",)], ids=["in", "out"])
def test_a_joiner_s_data_ports_going_dark_mid_sweep_names_that_joiner(cluster, tmp_path, chains):
    """A joiner's every TCP port but the endpoint's (and UDP) dropped once its workers are up,
    in or out: the mesh had passed, the store still answers, and every rank's collective waits
    to the deadline on a timeout that names no one. The connections left unanswered do: the
    host names the joiner alone (bw.stage unanswered), not every node (chaos seed 7162, #14)."""
    victim = 2
    with cluster(nodes(N)) as c:
        runs = [start(c, i, ranked_args(i, N, TIMEOUT), tmp_path, bandwidth=True, terminal=True) for i in range(N)]
        wait_until(lambda: workers_up(runs[victim].proc.pid, PORT) or runs[victim].proc.poll() is not None,
                   TIMEOUT, f"node{victim}'s workers on the store")
        assert runs[victim].proc.poll() is None, f"node{victim} ended before its workers were up"
        land_rules(c, victim, chains, "ephemeral", "DROP", PORT)
        finish_each(runs, TIMEOUT + scaled(60))
    late = [r for r in runs if r.seconds > TIMEOUT + CHAOS_GRACE]
    assert not late and not [r for r in runs if r.rc in (0, 3, 64)], ends(runs)
    host = runs[0].report
    stage = [(f["kind"], f["nodes"]) for f in host["findings"] if f["check"] == "bw.stage" and f["severity"] == "fail"]
    assert stage == [("unanswered", [victim])], failures(host)
    assert host["faulty_nodes"] == [f"node{victim}"], (host["faulty_nodes"], failures(host))
