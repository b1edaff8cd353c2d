"""job.*: what `netcheck inspect` says of a job's store, over hand-built JobViews."""

from __future__ import annotations

import pytest

from netcheck.core.jobrecords import JobView, NodeDesc, RendezvousView, RoundKeys, RoundMember, RunState
from netcheck.rules.job import (
    eviction_findings,
    heartbeat_findings,
    hostile_findings,
    job_findings,
    live_ranks,
    ranks_findings,
    rendezvous_findings,
    store_finding,
)

NOW = "2026-12-01T08:01:00+00:00"
A, B = NodeDesc("node0.cluster", 101, 0), NodeDesc("node1.cluster", 202, 0)


def view(**fields) -> JobView:
    return JobView(**{"endpoint": "node0:29400", "run_id": "job7", "observed_at": NOW, "seconds": 0.5,
                      "keys": ("torch.rendezvous.job7",), "run_ids": ("job7",), **fields})


def state(participants=((A, 0),), complete=False, heartbeats=((A, "2026-12-01T08:00:58+00:00"),),
          deadline=None, wait=(), closed=False) -> RendezvousView:
    return RendezvousView("job7", 2, complete, closed, deadline, tuple(participants), tuple(wait), (),
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
    assert found[1].evidence[-1] == "waiting for the next round: node5 (pid 9)"


def test_an_unknown_run_id_names_the_ones_in_the_store():
    (f,) = rendezvous_findings(view(run_id="other", runs=(), run_ids=("job7", "job8")))
    assert checks([f]) == [("job.rdzv", "fail", "no_such_run")]
    assert f.summary == "no rendezvous for run id 'other' in this store; it holds run id(s) 'job7', 'job8'"


def test_a_store_without_any_rendezvous_or_ranks_warns():
    (f,) = rendezvous_findings(view(run_id=None, runs=(), run_ids=(), keys=("something",)))
    assert checks([f]) == [("job.rdzv", "warn", "no_rendezvous")]


@pytest.mark.parametrize("age,kind", [(4, ""), (7, ""), (8, "heartbeat_late"), (15, "heartbeat_late"),
                                      (16, "dead")])
def test_a_heartbeat_past_the_keep_alive_is_late_and_past_torchruns_limit_dead(age, kind):
    beat = f"2026-12-01T08:00:{60 - age:02d}+00:00"
    s = state(participants=((A, 0), (B, 1)), heartbeats=((A, "2026-12-01T08:00:59+00:00"), (B, beat)))
    (f,) = heartbeat_findings(view(runs=(RunState("job7", s),)))
    severity = {"": "pass", "heartbeat_late": "warn", "dead": "fail"}[kind]
    assert checks([f]) == [("job.heartbeat", severity, kind)]
    assert f.evidence == ("node0.cluster (pid 101): last heartbeat 1 s ago",
                          f"node1.cluster (pid 202): last heartbeat {age} s ago")
    if kind == "dead":
        assert f.summary.startswith("run 'job7': node1.cluster (pid 202): no heartbeat for over 15 s")
    if kind == "heartbeat_late":
        assert f.summary == (f"run 'job7': node1.cluster (pid 202): last heartbeat {age} s ago, past the 5 s "
                             "keep-alive; torchrun removes a node at 15 s")


def test_a_late_and_a_dead_agent_are_two_findings_and_a_closed_rendezvous_none():
    s = state(participants=((A, 0), (B, 1)), heartbeats=((A, "2026-12-01T08:00:50+00:00"),
                                                          (B, "2026-12-01T08:00:30+00:00")))
    found = heartbeat_findings(view(runs=(RunState("job7", s),)))
    assert checks(found) == [("job.heartbeat", "fail", "dead"), ("job.heartbeat", "warn", "heartbeat_late")]
    assert "node1.cluster" in found[0].summary and "node0.cluster" in found[1].summary
    closed = state(participants=((A, 0), (B, 1)), heartbeats=s.last_heartbeats, complete=True, closed=True)
    (f,) = heartbeat_findings(view(runs=(RunState("job7", closed),)))
    assert checks([f]) == [("job.heartbeat", "pass", "")] and "closed" in f.summary


def evicted_view(*absent: RoundMember, wait=(), round_=2, listed=True) -> JobView:
    s = state(participants=((A, 0),), complete=True, wait=wait)
    ranks = tuple(sorted({0} | {m.group_rank for m in absent}))
    return view(runs=(RunState("job7", s),), rounds=(RoundKeys("job7", round_, ranks, listed, absent),))


def test_a_node_of_the_round_gone_from_its_participants_is_named_evicted_with_its_workers():
    (f,) = eviction_findings(evicted_view(RoundMember(1, 8, 8)))
    assert (f.check, f.severity, f.kind, f.nodes) == ("job.rdzv", "fail", "evicted", (1,))
    assert f.summary == ("run 'job7': group rank 1 of round 2 is no longer among its participants: removed by "
                         "torchrun after its heartbeat stopped (no beat for 15 s)")
    assert f.evidence[0].startswith("group rank 1: worker ranks 8 to 15, host not in the store")
    assert f.evidence[1:] == ("still in round 2: rank 0: node0.cluster (pid 101)",
                              "round 2's keys name group ranks 0, 1")
    assert "look at that node now" in f.fix and "--max-restarts" in f.fix


def test_an_evicted_nodes_host_comes_from_its_workers_debug_server_urls():
    gone = (RoundMember(1, 2, 2, ((2, "node1"), (3, "node1"))), RoundMember(3, 2, 6, (), "role_info/3: garbage"))
    (f,) = eviction_findings(evicted_view(*gone, listed=False))
    assert f.nodes == (1, 3)
    assert f.summary.startswith("run 'job7': group ranks 1, 3 (node1) of round 2 are no longer among")
    assert f.evidence[0] == "group rank 1: worker ranks 2 to 3, on node1 (its workers' debug server URLs)"
    assert f.evidence[1].endswith("; role_info/3: garbage")
    assert f.evidence[-1] == "round 2's keys name group ranks 0, 1, 3 (probed: this torch cannot list keys)"


def test_no_eviction_without_absent_agents_or_for_an_older_round():
    assert eviction_findings(evicted_view()) == []
    assert eviction_findings(evicted_view(RoundMember(1), round_=1)) == []   # the state has moved on


def test_a_participant_past_the_dead_limit_is_evicted_at_once_with_its_host_not_dead_too():
    """Every agent drops it on its next read of the state; the store's copy follows at their
    next heartbeat. Named once, by the cause, with the host the state still holds."""
    s = state(participants=((A, 0), (B, 1)), complete=True,
              heartbeats=((A, "2026-12-01T08:00:58+00:00"), (B, "2026-12-01T08:00:44+00:00")))
    keys = RoundKeys("job7", 2, (0, 1), True, (RoundMember(1, 1, 1),))
    v = view(runs=(RunState("job7", s),), rounds=(keys,))
    assert live_ranks(s, NOW) == {0}
    (f,) = eviction_findings(v)
    assert (f.kind, f.nodes) == ("evicted", (1,))
    assert f.summary.startswith("run 'job7': group rank 1 (node1.cluster) of round 2 is no longer among")
    assert f.evidence[0] == ("group rank 1: worker rank 1, node1.cluster (pid 202): last heartbeat 16 s ago, past "
                             "torchrun's 15 s: every agent drops it at its next read of the state, the store's "
                             "copy at their next heartbeat")
    assert f.evidence[1] == "still in round 2: rank 0: node0.cluster (pid 101)"
    (beat,) = heartbeat_findings(v)
    assert (beat.severity, beat.kind) == ("pass", "")
    assert beat.summary.endswith("; node1.cluster (pid 202): evicted (job.rdzv)")
    assert [f.kind for f in job_findings(v) if f.severity == "fail"] == ["evicted"]


def test_a_closed_rendezvous_evicts_no_one_for_its_silent_heartbeats():
    s = state(participants=((A, 0), (B, 1)), complete=True, closed=True,
              heartbeats=((A, "2026-12-01T08:00:00+00:00"), (B, "2026-12-01T08:00:00+00:00")))
    assert eviction_findings(view(runs=(RunState("job7", s),))) == []


def test_round_keys_that_could_not_be_read_are_said_beside_the_round():
    s = state(participants=((A, 0),), complete=True)
    v = view(runs=(RunState("job7", s),), rounds=(RoundKeys("job7", 2, (), True, error="not read: no answer"),))
    (f,) = rendezvous_findings(v)
    assert f.severity == "pass" and f.evidence[-1] == "round 2's agent keys not read: no answer"


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
