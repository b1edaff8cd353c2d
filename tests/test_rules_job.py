"""job.*: what `netcheck inspect` says of a job's store, over hand-built JobViews."""

from __future__ import annotations

import pytest

from netcheck.core.jobrecords import JobView, NodeDesc, RendezvousView, RunState
from netcheck.rules.job import (
    heartbeat_findings, hostile_findings, job_findings, ranks_findings, rendezvous_findings, store_finding,
)

NOW = "2026-12-01T08:01:00+00:00"
A, B = NodeDesc("node0.cluster", 101, 0), NodeDesc("node1.cluster", 202, 0)


def view(**fields) -> JobView:
    return JobView(**{"endpoint": "node0:29400", "run_id": "job7", "observed_at": NOW, "seconds": 0.5,
                      "keys": ("torch.rendezvous.job7",), "run_ids": ("job7",), **fields})


def state(participants=((A, 0),), complete=False, heartbeats=((A, "2026-12-01T08:00:58+00:00"),),
          deadline=None, wait=()) -> RendezvousView:
    return RendezvousView("job7", 2, complete, False, deadline, tuple(participants), tuple(wait), (),
                          tuple(heartbeats))


def checks(findings):
    return [(f.check, f.severity, f.kind) for f in findings]


def test_a_store_that_does_not_answer_is_one_failure():
    (f,) = job_findings(view(store_error="198.18.0.10: refused (connection refused)", keys=None, run_ids=()))
    assert (f.check, f.severity) == ("job.store", "fail") and "refused" in f.summary


def test_a_round_waiting_for_nodes_names_who_joined_and_how_many_are_missing():
    (f,) = rendezvous_findings(view(runs=(RunState("job7", state()),), nnodes=(2, 2)))
    assert checks([f]) == [("job.rdzv", "fail", "round_incomplete")]
    assert f.summary == ("run 'job7': round 2 is not complete: 1 of 2 node(s) joined, 1 missing; it waits for "
                         "--nnodes' minimum before a deadline starts")
    assert f.evidence == ("rank 0: node0.cluster (pid 101)",)


def test_a_round_in_its_last_call_says_when_it_closes():
    s = state(participants=((A, 0), (B, 1)), deadline="2026-12-01T08:01:20+00:00")
    (f,) = rendezvous_findings(view(runs=(RunState("job7", s),), nnodes=(2, 4)))
    assert f.summary.endswith("2 node(s) joined; it closes with whoever is there in 20 s")


def test_a_complete_round_passes_and_latecomers_wait_for_the_next():
    s = state(participants=((A, 0), (B, 1)), complete=True, wait=(NodeDesc("node5", 9, 0),))
    found = rendezvous_findings(view(runs=(RunState("job7", s),)))
    assert checks(found) == [("job.rdzv", "pass", ""), ("job.rdzv", "warn", "waiting_next_round")]
    assert "node5 (pid 9)" in found[1].summary


def test_an_unknown_run_id_names_the_ones_in_the_store():
    (f,) = rendezvous_findings(view(run_id="other", runs=(), run_ids=("job7", "job8")))
    assert checks([f]) == [("job.rdzv", "fail", "no_such_run")]
    assert f.summary == "no rendezvous for run id 'other' in this store; it holds run id(s) 'job7', 'job8'"


def test_a_store_without_any_rendezvous_or_ranks_warns():
    (f,) = rendezvous_findings(view(run_id=None, runs=(), run_ids=(), keys=("something",)))
    assert checks([f]) == [("job.rdzv", "warn", "no_rendezvous")]


@pytest.mark.parametrize("age,dead", [(14, False), (16, True)])
def test_a_heartbeat_older_than_torchruns_limit_is_a_dead_node(age, dead):
    beat = f"2026-12-01T08:00:{60 - age:02d}+00:00"
    s = state(participants=((A, 0), (B, 1)), heartbeats=((A, "2026-12-01T08:00:59+00:00"), (B, beat)))
    (f,) = heartbeat_findings(view(runs=(RunState("job7", s),)))
    assert checks([f]) == ([("job.heartbeat", "fail", "dead")] if dead else [("job.heartbeat", "pass", "")])
    assert f.evidence == ("node0.cluster (pid 101): last heartbeat 1 s ago",
                          f"node1.cluster (pid 202): last heartbeat {age} s ago")
    if dead:
        assert f.summary.startswith("run 'job7': node1.cluster (pid 202): no heartbeat for over 15 s")


def test_refused_values_are_hostile_or_foreign_findings():
    runs = (RunState("evil", None, "the pickle asks for posix.system", hostile=True),
            RunState("junk", None, "not base64"))
    assert checks(hostile_findings(runs)) == [("job.hostile", "fail", "hostile_value"),
                                              ("job.hostile", "fail", "foreign_value")]


def test_a_static_rendezvous_names_the_ranks_that_never_arrived():
    (f,) = ranks_findings(view(run_id=None, runs=(), run_ids=(), arrived_ranks=(1, 3), world_size=5))
    assert (f.check, f.severity, f.nodes) == ("job.ranks", "fail", (2, 4))
    assert f.evidence == ("arrived: rank(s) 0, 1, 3",)
    (done,) = ranks_findings(view(run_id=None, runs=(), run_ids=(), arrived_ranks=(0, 1, 2), world_size=3))
    assert done.severity == "pass"
    (unknown,) = ranks_findings(view(run_id=None, runs=(), run_ids=(), arrived_ranks=(1,)))
    assert unknown.severity == "warn" and "--world-size" in unknown.summary


def test_the_store_finding_lists_the_keys_and_the_hidden_count():
    f = store_finding(view(keys=("a", "b"), hidden_keys=1))
    assert f.summary == "the job's store at node0:29400 answers: 2 key(s) (and 1 it counts but does not list)"
    assert f.evidence == ("a", "b")
