"""The fate oracle as pure logic (tests/job.py's fate, tests/chaos/fate.py's rules): a job's
leavings into its fate, and netcheck's verdict x the job's fate into violations and excuses."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.catalog import CATALOG, LinkFlap, MidRunFirewall, MidRunStop, Signal, Squatter
from chaos.fate import agreement, excuse, render_table, rules, schedule_verdict, speaks_for
from chaos.generator import Schedule
from job import (
    SLOW_SHARE,
    STALL,
    Fate,
    JobRun,
    Launch,
    classify,
    confirm_slow,
    console_error,
    control_busbw,
    export_envs,
    job_bound,
    worker_of,
)
from nodes import scaled

CONTROL = 0.4


def line(rank: int, busbw: float = CONTROL, ok: bool = True, stage: str = "done", error: str | None = None,
         t: float = 100.0) -> dict:
    return {"rank": rank, "ok": ok, "stage": stage, "busbw": busbw, "error": error, "t": t}


def leavings(n=3, lines=None, exits=None, killed="", rdzv="static", nproc=1, **kw) -> JobRun:
    """A launch's leavings; `lines` and `stages` by rank where each node runs one (rank = node)."""
    run = JobRun(Launch(n, rdzv=rdzv, nproc=nproc), seconds=12.0, killed=killed, **kw)
    run.lines = {(r // nproc, r): line(r) for r in range(n * nproc)} if lines is None else workers(lines)
    run.exits = {i: 0 for i in range(n)} if exits is None else exits
    return run


def workers(by_rank: dict) -> dict:
    """Rank-keyed records (one rank a node, rank = node) as the (node, rank) a JobRun keys them by."""
    return {(r, r): v for r, v in by_rank.items()}


# ---------------------------------------------------------------------------------------
# the fate


def test_a_job_whose_every_worker_wrote_ok_is_ok_at_the_slowest_ranks_busbw():
    run = leavings(lines={0: line(0, 0.5), 1: line(1, 0.3), 2: line(2, 0.45)})
    fate = classify(run, CONTROL)
    assert (fate.fate, fate.busbw, fate.first_error) == ("ok", 0.3, None)
    assert fate.where == {"node0": "done", "node1": "done", "node2": "done"}


def test_below_the_share_of_the_control_it_is_slow_and_without_a_control_never():
    slow = CONTROL * SLOW_SHARE * 0.9
    run = leavings(lines={0: line(0), 1: line(1, slow), 2: line(2)})
    assert classify(run, CONTROL).fate == "slow"
    assert classify(run, None).fate == "ok"
    at_share = leavings(lines={0: line(0), 1: line(1, CONTROL * SLOW_SHARE), 2: line(2)})
    assert classify(at_share, CONTROL).fate == "ok"


def test_the_control_is_the_best_healthy_run():
    """Seed 9164 (targeted): one 4-node control at a loaded moment, 0.096 GB/s, where healthy
    jobs beside it ran at 0.45: a crawl at 0.019 passed for ok. The best of the runs is the yardstick."""
    assert control_busbw([Fate("ok", busbw=0.096), Fate("ok", busbw=0.28), Fate("hung")]) == 0.28
    assert control_busbw([Fate("failed"), Fate("hung")]) is None


def test_slow_by_the_campaigns_control_is_slow_only_against_a_healthy_job_measured_after_it():
    """The machine's load moves a healthy job's busbw 7-fold within an hour: a healthy job at a
    loaded moment is slow against a control measured at a quiet one, and not against one measured
    beside it. A crawl is slow against both."""
    loaded = Fate("slow", busbw=0.13, control=0.93)
    assert (confirm_slow(loaded, 0.3).fate, loaded.control_now) == ("ok", 0.3)
    crawl = Fate("slow", busbw=0.03, control=0.93)
    assert confirm_slow(crawl, 0.3).fate == "slow"
    assert confirm_slow(Fate("slow", busbw=0.03), None).fate == "slow"     # no healthy job ran after
    assert confirm_slow(Fate("slow"), 0.3).fate == "slow"     # moving at the bound: no figure to compare
    assert confirm_slow(Fate("ok", busbw=0.5), 0.3).fate == "ok"


def test_the_first_error_is_the_earliest_written_and_wins_over_a_kill():
    """node2 failed in init first; node1's error came later; node0 was killed when the others
    had failed (the harness's FAILED_GRACE): failed, with node2's error."""
    lines = {1: line(1, ok=False, stage="all_reduce 4096 B", error="RuntimeError: Connection closed by peer", t=105.0),
             2: line(2, ok=False, stage="init_process_group", error="RuntimeError: Connection refused", t=101.0)}
    run = leavings(lines=lines, exits={0: None, 1: 1, 2: 1}, killed="failed", exited_at={1: 106.0, 2: 102.0})
    run.stages = workers({0: {"stage": "all_reduce 4096 B"}})
    fate = classify(run, CONTROL)
    assert fate.fate == "failed"
    assert fate.first_error == "node2 rank 2 in init_process_group: RuntimeError: Connection refused"
    assert fate.where["node0"] == "all_reduce 4096 B"


def test_an_agent_that_exits_non_zero_with_no_worker_line_gives_its_consoles_error():
    console = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n    raise X\n"
               "torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying "
               "to connect to (node0, 29500).\n")
    run = leavings(lines={}, exits={0: 0, 1: 1, 2: 0}, consoles={1: console}, exited_at={1: 50.0})
    fate = classify(run, CONTROL)
    assert fate.fate == "failed"
    assert fate.first_error.startswith("node1's torchrun exit 1: torch.distributed.DistNetworkError: The client")
    assert fate.where["node1"] == "rendezvous (no worker started)"


def test_killed_at_the_bound_with_no_error_is_hung_and_says_where_each_node_was():
    run = leavings(lines={}, exits={0: None, 1: None, 2: None}, killed="bound")
    run.stages = workers({0: {"stage": "init_process_group"}, 2: {"stage": "init_process_group"}})
    fate = classify(run, CONTROL)
    assert (fate.fate, fate.first_error) == ("hung", None)
    assert fate.where == {"node0": "init_process_group", "node1": "rendezvous (no worker started)",
                          "node2": "init_process_group"}
    assert "node1 in rendezvous (no worker started)" in fate.describe()


def test_an_error_written_once_the_harness_began_killing_a_hung_job_is_the_kills():
    """Seed 64064, schedule 9: a job hung at the bound; killing node0's worker closed its peers'
    connections, and node3's wrote "Connection closed by peer" before its own kill came."""
    lines = {3: line(3, ok=False, stage="all_reduce 262144 B", error="RuntimeError: Connection closed by peer",
                     t=171.0)}
    run = leavings(lines=lines, exits={0: None, 1: None, 2: None, 3: None}, killed="bound", n=4)
    run.killed_at = 170.5
    fate = classify(run, CONTROL)
    assert (fate.fate, fate.first_error) == ("hung", None)
    assert fate.where["node3"] == "all_reduce 262144 B"


def test_a_job_still_moving_at_the_bound_is_slow_not_hung():
    """Every worker past init and saying a new stage within STALL of the kill: crawling (a shaped
    link's job takes longer than the bound), with the timed all_reduces' figure where all had one."""
    run = leavings(lines={}, exits={0: None, 1: None, 2: None}, killed="bound")
    run.killed_at = 200.0
    run.stages = workers({i: {"stage": "timed all_reduce 4194304 B", "t": 198.0, "busbw": 0.002 + i / 1000}
                          for i in range(3)})
    fate = classify(run, CONTROL)
    assert (fate.fate, fate.busbw) == ("slow", 0.002)
    run.stages[1, 1] = {"stage": "ddp step 1", "t": 199.0}
    assert (classify(run, CONTROL).fate, classify(run, CONTROL).busbw) == ("slow", None)
    run.stages[1, 1] = {"stage": "ddp step 1", "t": 200.0 - STALL - 1}        # stuck
    assert classify(run, CONTROL).fate == "hung"
    run.stages[1, 1] = {"stage": "init_process_group", "t": 199.0}           # never past init
    assert classify(run, CONTROL).fate == "hung"


def test_a_job_whose_every_worker_wrote_its_line_is_judged_by_it_though_an_agent_outlived_the_bound():
    """A 20 Mbit/s link: every worker done just before the bound, an agent still tearing down."""
    run = leavings(lines={i: line(i, 0.003) for i in range(3)}, exits={0: None, 1: 0, 2: None}, killed="bound")
    run.killed_at = 200.0
    assert (classify(run, CONTROL).fate, classify(run, CONTROL).busbw) == ("slow", 0.003)


def test_agents_that_exit_0_with_a_worker_line_missing_failed():
    run = leavings(lines={0: line(0), 2: line(2)})
    fate = classify(run, CONTROL)
    assert (fate.fate, fate.first_error) == ("failed", "node1: its worker wrote no line")


def test_two_nodes_of_four_ranks_are_ok_only_where_all_eight_ran_at_the_slowest_ranks_busbw():
    """torchrun 2 x 4: each worker's line is its own (node{i}.rank{r}), judged over every rank."""
    run = leavings(n=2, nproc=4)
    run.lines[1, 6]["busbw"] = 0.25
    fate = classify(run, CONTROL)
    assert (fate.fate, fate.busbw) == ("ok", 0.25)
    assert fate.where == {f"node{r // 4} rank {r}": "done" for r in range(8)}
    del run.lines[1, 6]
    fate = classify(run, CONTROL)
    assert (fate.fate, fate.first_error) == ("failed", "node1: 1 of its 4 workers wrote no line")
    assert fate.where["node1"] == "rendezvous (1 of 4 workers not started)"


def test_of_four_ranks_a_node_with_one_still_in_init_at_the_bound_is_hung_and_one_erring_fails_the_job():
    run = leavings(n=2, nproc=4, lines={}, exits={0: None, 1: None}, killed="bound")
    run.killed_at = 200.0
    run.stages = {(r // 4, r): {"stage": "timed all_reduce 4194304 B", "t": 198.0, "busbw": 0.1} for r in range(8)}
    assert (classify(run, CONTROL).fate, classify(run, CONTROL).busbw) == ("slow", 0.1)
    run.stages[1, 5] = {"stage": "init_process_group", "t": 199.0}
    assert classify(run, CONTROL).fate == "hung"
    del run.stages[1, 5]      # one worker never said a stage: not moving
    fate = classify(run, CONTROL)
    assert fate.fate == "hung" and fate.where["node1"] == "rendezvous (1 of 4 workers not started)"
    run.lines[0, 2] = line(2, ok=False, stage="ddp step 0", error="RuntimeError: Connection reset", t=150.0)
    assert classify(run, CONTROL).first_error == "node0 rank 2 in ddp step 0: RuntimeError: Connection reset"


def test_a_workers_files_name_its_node_and_rank():
    """Four workers on one node write four files, read as four workers."""
    assert [worker_of(Path(f"/o/node1.rank{r}.json")) for r in (4, 5)] == [(1, 4), (1, 5)]
    assert worker_of(Path("/o/node0.rank3.stage")) == (0, 3)


def test_the_bound_counts_each_torch_import_an_agent_and_a_worker():
    assert job_bound(3) == scaled(60)
    assert job_bound(2, 4) == scaled(80)    # 2 agents and 8 workers


def test_a_wrong_result_is_a_failure():
    run = leavings(lines={0: line(0), 1: line(1, ok=False, error="3 wrong elements"), 2: line(2)})
    assert classify(run, CONTROL).fate == "failed"


def test_the_console_error_is_the_last_exception_line():
    text = ("W1 some warning\nTraceback (most recent call last):\n  File \"a\", line 1\n"
            "    raise RendezvousTimeoutError()\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n")
    assert console_error(text) == "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
    assert console_error("just this\n\n") == "just this"
    assert console_error("") is None


def test_the_export_lines_are_the_recommendation_with_each_nodes_own():
    report = {"recommend": {"NCCL_SOCKET_IFNAME": "=eth0,ens5", "GLOO_SOCKET_IFNAME": "eth0"},
              "recommend_per_node": {"node1": {"GLOO_SOCKET_IFNAME": "ens5"}}}
    assert export_envs(report, ["node0", "node1"]) == (
        {"NCCL_SOCKET_IFNAME": "=eth0,ens5", "GLOO_SOCKET_IFNAME": "eth0"},
        {"NCCL_SOCKET_IFNAME": "=eth0,ens5", "GLOO_SOCKET_IFNAME": "ens5"})
    assert export_envs({"recommend": {}, "recommend_per_node": {}}, ["node0"]) is None
    assert export_envs(None, ["node0"]) is None


def test_the_launch_lines():
    static = Launch(3, ranks=(0, 2, 2)).argv(1, "/o", "/l")
    assert static[static.index("--master-addr"):static.index("--master-addr") + 6] == [
        "--master-addr", "node0", "--master-port", "29500", "--node-rank", "2"]
    c10d = Launch(3, rdzv="c10d", rdzv_ids=("a", "b", "a"), wrappers=((), ("prlimit", "--nofile=64:4096", "--"), ()))
    argv = c10d.argv(1, "/o", "/l")
    assert argv[:3] == ["prlimit", "--nofile=64:4096", "--"]
    assert argv[argv.index("--rdzv-backend"):argv.index("--rdzv-backend") + 6] == [
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0:29500", "--rdzv-id", "b"]
    assert argv[argv.index("--nproc-per-node") + 1] == "1"
    four = Launch(2, nproc=4).argv(1, "/o", "/l")
    assert (four[four.index("--nnodes") + 1], four[four.index("--nproc-per-node") + 1]) == ("2", "4")
    env = Launch(3, envs=({"GLOO_SOCKET_IFNAME": "eth0"},) * 3).env(2)
    assert env["GLOO_SOCKET_IFNAME"] == "eth0" and env["FATE_NODE"] == "2" and env["MASTER_ADDR"] is None


# ---------------------------------------------------------------------------------------
# whom a finding speaks for


def finding(check: str, kind: str = "", nodes=(1,), **extra) -> dict:
    return {"check": check, "kind": kind, "severity": "fail", "nodes": list(nodes), **extra}


def ran(fate="ok", rdzv="static", launch="bare", busbw=CONTROL) -> Fate:
    return Fate(fate, launch, rdzv, busbw=busbw, control=CONTROL)


def did_not_run(fate="failed", launch="bare", error="RuntimeError: Connection refused") -> Fate:
    return Fate(fate, launch, "static", first_error=error if fate == "failed" else None,
                where={"node0": "init_process_group"})


def impact(*on: str, effect: str = "stops", form: str = "") -> dict:
    return {"impact": {"on": list(on), "effect": effect, "why": "", "form": form}}


def test_a_finding_speaks_for_the_parts_its_impact_names_the_launch_with_its_form():
    assert speaks_for(finding("mesh.connect", **impact("gloo", "nccl_socket"))) == [
        ("gloo", "stops"), ("nccl_socket", "stops")]
    assert speaks_for(finding("rdzv.fqdn", **impact("launch", form="c10d"))) == [("launch:c10d", "stops")]
    assert speaks_for(finding("bw.pair", **impact("speed", effect="slows"))) == [("speed", "slows")]


def test_a_finding_that_names_no_part_speaks_for_the_whole_job():
    assert speaks_for(finding("run.internal", **impact(effect="nothing"))) == [("job", "stops")]
    assert speaks_for(finding("mesh.connect")) == [("job", "stops")]


def test_a_finding_for_nccl_or_the_other_launch_form_or_another_size_is_excused_over_a_job_that_ran():
    assert "nccl_socket" in excuse(finding("nic.nccl_default", **impact("nccl_socket", "nccl_rdma")), ran())
    c10d = finding("rdzv.join", "missing", **impact("launch", form="c10d"))
    assert "launch:c10d" in excuse(c10d, ran(rdzv="static"))
    assert excuse(c10d, ran(rdzv="c10d")) is None
    assert "another size" in excuse(finding("host.limits", "nofile_peers", **impact("gloo", effect="risks")), ran())
    # One part this job used is enough to stand against it.
    assert excuse(finding("mesh.connect", **impact("nccl_socket", "gloo")), ran()) is None
    # The launch without a form is every form's.
    assert excuse(finding("launch.topology", **impact("launch")), ran(rdzv="static")) is None


def test_a_speed_finding_stands_over_a_slow_job_and_not_over_one_at_full_speed():
    lossy = finding("link.health", "lossy_node", **impact("speed", effect="slows"))
    assert excuse(lossy, ran("slow", busbw=0.01)).startswith("it slows the job")
    assert excuse(lossy, ran("ok")) is None
    assert excuse(finding("mesh.connect", **impact("gloo", effect="slows")), ran("slow")) is not None


# ---------------------------------------------------------------------------------------
# the verdict x fate rules


def kinds(j) -> list[str]:
    return [v.split(":")[0] for v in j.violations]


@pytest.mark.parametrize("fate", ["failed", "hung", "slow"])
def test_a_pass_over_a_job_that_did_not_run_or_crawled_is_a_false_pass(fate):
    f = ran("slow", busbw=0.01) if fate == "slow" else did_not_run(fate)
    j = rules("pass", [], [f])
    assert kinds(j) == ["false pass"], j.violations


def test_a_pass_over_an_export_launch_that_failed_is_a_false_pass_too():
    j = rules("pass", [], [ran(), did_not_run(launch="export")])
    assert kinds(j) == ["false pass"] and "export" in j.violations[0]


def test_a_pass_after_a_midrun_fault_landed_is_not_judged_and_noted():
    j = rules("pass", [], [did_not_run()], later=["midrun_firewall(node1 ...)"])
    assert j.violations == [] and len(j.notes) == 1


def test_a_fail_over_a_job_that_ran_is_a_false_alarm_unless_excused():
    j = rules("fail", [finding("mesh.connect", nodes=(2,))], [ran()])
    assert kinds(j) == ["false alarm"] and "mesh.connect [2]" in j.violations[0]
    nccl = finding("nic.nccl_default", **impact("nccl_socket", "nccl_rdma"))
    j = rules("fail", [nccl], [ran()])
    assert j.violations == [] and j.excused[0].startswith("nic.nccl_default [1]: it speaks for nccl_rdma, nccl_socket")
    # every FAIL finding is judged: one unexcused is enough
    j = rules("fail", [nccl, finding("rdzv.fqdn", **impact("launch"))], [ran()])
    assert kinds(j) == ["false alarm"] and len(j.excused) == 1


def test_a_fail_over_a_job_that_did_not_run_agrees():
    assert rules("fail", [finding("mesh.connect")], [did_not_run("hung")]).violations == []


def test_a_fail_is_not_judged_where_the_fault_acted_on_netchecks_own_run():
    j = rules("fail", [finding("rdzv.join", "lost_in_mesh")], [ran()], netcheck_only=["signal(node1 ...)"])
    assert j.violations == [] and "not judged" in j.excused[0]


def test_a_warn_stands_over_a_job_that_ran_and_over_one_that_did_not_is_noted():
    assert rules("warn", [], [ran()]).violations == [] and rules("warn", [], [ran()]).notes == []
    j = rules("warn", [], [did_not_run()])
    assert j.violations == [] and j.notes[0].startswith("WARN over a job failed")


def test_an_export_launch_that_fails_where_the_bare_one_ran_broke_it():
    j = rules("fail", [finding("nic.gloo_default", nodes=(2,))], [did_not_run(), ran(launch="export")])
    assert j.violations == []   # the fix works: agreement
    j = rules("warn", [], [ran(), did_not_run(launch="export")])
    assert kinds(j) == ["fix broke"]


def test_no_verdict_is_judged_by_nothing():
    assert rules("none", [finding("mesh.connect")], [ran()]).violations == []
    assert rules("none", [], [did_not_run()]).violations == []


def test_the_agreement_table_counts_verdicts_by_fate_per_launch():
    js = [rules("pass", [], [ran()]), rules("fail", [], [did_not_run(), ran(launch="export")]),
          rules("fail", [], [did_not_run("hung")]), rules("warn", [], [ran("slow")])]
    bare = agreement(js, "bare")
    assert bare["pass"] == {"ok": 1, "slow": 0, "failed": 0, "hung": 0}
    assert bare["fail"] == {"ok": 0, "slow": 0, "failed": 1, "hung": 1}
    assert bare["warn"]["slow"] == 1 and sum(bare["none"].values()) == 0
    assert agreement(js, "export")["fail"]["ok"] == 1
    text = render_table(bare, "t")
    assert text[1].split() == ["verdict", "ok", "slow", "failed", "hung", "total"]
    assert text[2:] == ["PASS             1       0       0       0       1",
                        "WARN             0       1       0       0       1",
                        "FAIL             0       0       1       1       2"]


# ---------------------------------------------------------------------------------------
# the schedule's verdict, and what each fault lets the job meet


def outcome(mode: str, rcs: dict, reports: dict, hung=(), tmp=None, nproc=1):
    runs = {i: SimpleNamespace(rc=rc) for i, rc in rcs.items()}
    sched = Schedule(1, 0, mode, len(rcs), (), nproc=nproc)
    return SimpleNamespace(sched=sched, run=SimpleNamespace(runs=runs, hung=set(hung), tmp=tmp), reports=reports)


def test_the_schedules_verdict_is_the_worst_nodes(tmp_path):
    assert schedule_verdict(outcome("ranked", {0: 0, 1: 0}, {0: {"verdict": "pass"}})) == "pass"
    assert schedule_verdict(outcome("ranked", {0: 0, 1: 2}, {0: {"verdict": "pass"}})) == "fail"
    assert schedule_verdict(outcome("ranked", {0: 1, 1: -9}, {0: {"verdict": "warn"}})) == "none"
    assert schedule_verdict(outcome("ranked", {0: 2, 1: -9}, {0: {"verdict": "fail"}})) == "fail"
    assert schedule_verdict(outcome("ranked", {0: 0, 1: 0}, {0: {"verdict": "pass"}}, hung={1})) == "none"


def test_under_torchrun_the_verdict_is_every_ranks_report_and_a_missing_one_is_none(tmp_path):
    """Seed 64064, schedule 7: node0's hostname on 127.0.1.1, its rank's report not placed on a
    node by address; the agents' exits are torchrun's, not netcheck's."""
    for rank, verdict in enumerate(("fail", "pass", "pass")):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"verdict": verdict, "findings": []}))
    assert schedule_verdict(outcome("torchrun", {0: 1, 1: 1, 2: 1}, {}, tmp=tmp_path)) == "fail"
    (tmp_path / "rank0.json").unlink()
    assert schedule_verdict(outcome("torchrun", {0: 1, 1: 1, 2: 1}, {}, tmp=tmp_path)) == "none"
    for rank in (0, 1, 2):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"verdict": "warn", "findings": []}))
    assert schedule_verdict(outcome("torchrun", {0: 1, 1: 1, 2: 1}, {}, tmp=tmp_path)) == "warn"


def test_under_torchrun_two_nodes_of_four_need_all_eight_ranks_reports(tmp_path):
    for rank in range(8):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"verdict": "pass", "findings": []}))
    two_by_four = outcome("torchrun", {0: 0, 1: 0}, {}, tmp=tmp_path, nproc=4)
    assert schedule_verdict(two_by_four) == "pass"
    (tmp_path / "rank6.json").unlink()
    assert schedule_verdict(two_by_four) == "none"


def test_what_the_job_meets_of_each_fault():
    assert {k.fate for k in CATALOG} == {"met", "netcheck", "later"}
    assert Signal.fate == LinkFlap.fate == MidRunStop.fate == "netcheck"
    assert MidRunFirewall.fate == "later" and Squatter.fate == "met"
