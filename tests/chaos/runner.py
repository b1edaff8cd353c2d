"""The runner: one schedule on a namespace cluster (its faults built, its nodes started, the
faults acted while they run, leftovers collected), judged by the oracle; the command line
(`python tests/chaos`, the package's docstring shows it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import chaos
from cluster import NETNS_ETC, NETNS_RUN, Cluster, NodeSpec, netns_pids
from faults import arrival_args, ranked_args
from job import SLOW_SHARE, control_busbw, job_bound, measure_control
from nodes import NodeRun, finish, scaled

from .catalog import MODES, Fault, rack_of
from .fate import agreement, judge_fate, render_table, run_fates
from .generator import JOIN_WINDOW, Schedule, draw_schedule
from .midrun import seen_at, start_timed
from .oracle import CHAOS_GRACE, Outcome, judge, reports_of

TORCHRUN_PORT = 29400
# torchrun's agent imports torch and holds its own rendezvous before netcheck starts: the
# netcheck process's --timeout starts that much after the agent's.
TORCHRUN_START = scaled(20)
SMALL_SWEEP = ["-b", "1K", "-e", "1M", "-f", "4", "-w", "1", "-n", "4", "--bw-budget", "4"]
Controls = dict[tuple[int, int], float | None]   # the healthy job's busbw per (nodes, processes per node)


# --------------------------------------------------------------------------------------
# running one schedule


@dataclass
class ScheduleRun:
    sched: Schedule
    c: Cluster
    tmp: Path
    runs: dict[int, NodeRun] = field(default_factory=dict)
    helpers: list[subprocess.Popen] = field(default_factory=list)
    fault_state: dict[Fault, dict] = field(default_factory=dict)   # a fault's own progress
    stopped: dict[int, NodeRun] = field(default_factory=dict)   # SIGSTOPped, resumed at the end
    stopped_pids: dict[int, list[int]] = field(default_factory=dict)   # beside its group (its workers)
    killed_at_end: set[int] = field(default_factory=set)   # stopped nodes SIGKILLed, not resumed
    resumed_at: dict[int, float] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)   # when the runner first saw each node gone
    notes: list[str] = field(default_factory=list)
    hung: set[int] = field(default_factory=set)
    leftovers: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    fates: list = field(default_factory=list)   # the real job's (job.Fate), bare launch first (--fate)

    def args(self, i: int) -> list[str]:
        s = self.sched
        base = (ranked_args(i, s.n, s.timeout) if s.mode == "ranked"
                else arrival_args(s.timeout, scaled(JOIN_WINDOW)))
        base += SMALL_SWEEP if s.bandwidth else ["--skip", "bandwidth"]
        for f in s.faults:
            base = f.args(i, base)
        return base

    def start_node(self, i: int) -> None:
        if self.sched.mode == "torchrun":
            self.runs[i] = self._start_torchrun(i)
        else:
            # A new interpreter each, as a user's: a fault's random moment may land in torch's import.
            # Its progress lines timed (midrun.TimedLines): the oracle reads when each was seen.
            wrapper = tuple(w for f in self.sched.faults for w in f.wrapper(i))
            self.runs[i] = start_timed(self.c, i, self.args(i), self.tmp, self.sched.bandwidth, wrapper)

    def _start_torchrun(self, i: int) -> NodeRun:
        s = self.sched
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(s.n), "--nproc-per-node", str(s.nproc),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node0:{TORCHRUN_PORT}", "--rdzv-id", "chaos",
                "--rdzv-conf", f"join_timeout={int(TORCHRUN_START)},read_timeout={int(TORCHRUN_START)}",
                "--redirects", "3", "--log-dir", str(self.tmp / f"logs{i}"),
                "-m", "netcheck", "--json", str(self.tmp / "rank{rank}.json"),
                "--timeout", str(s.timeout), "--skip", "bandwidth"]
        return NodeRun(i, self.c.popen(i, argv), self.tmp / f"node{i}-torchrun", time.monotonic())

    def resumed_limit(self, i: int) -> float:
        """When a node SIGSTOPped and then resumed must have ended (monotonic time)."""
        return max(self.runs[i].started + self.sched.timeout, self.resumed_at[i]) + CHAOS_GRACE

    def limit(self, i: int) -> float:
        """How long node i may run, from its start, before it is a hang."""
        extra = TORCHRUN_START if self.sched.mode == "torchrun" else 0.0
        return self.sched.timeout + CHAOS_GRACE + extra


def run_schedule(sched: Schedule, controls: Controls | None = None) -> "Outcome":
    """The schedule on a namespace cluster; with `controls` (--fate: the healthy job's busbw per
    shape), the real job launched there afterwards, its faults still in place."""
    routed = any(f.routed for f in sched.faults)
    specs = [NodeSpec(rack=rack_of(i) if routed else 0) for i in range(sched.n)]
    for f in sched.faults:
        specs = [f.spec(i, s) for i, s in enumerate(specs)]
    tmp = Path(tempfile.mkdtemp(prefix=f"chaos-{sched.seed}-{sched.index}-"))
    with Cluster(specs, racks=2 if routed else 1) as c:
        run = ScheduleRun(sched, c, tmp)
        for f in sched.faults:
            f.setup(c, run)
        held = set().union(*(f.held_back() for f in sched.faults)) if sched.faults else set()
        for i in range(sched.n):
            if i not in held:
                run.start_node(i)
        _drive(run)
        _stop_helpers(run)
        run.leftovers = _left_in_namespaces(c)
        if controls is not None:
            run.fates = run_fates(run, _host_report(run), controls.get(sched.shape))
            _stop_helpers(run)
        prefix = c.prefix
    run.leftovers += _namespaces_left(prefix)
    return Outcome(sched, run, [f.expect(sched, run) for f in sched.faults])


def _drive(run: ScheduleRun) -> None:
    """Act the faults and wait for every node; a node past its limit is killed as a hang."""
    pending = list(run.sched.faults)
    hard_end = time.monotonic() + run.sched.timeout + CHAOS_GRACE + TORCHRUN_START + scaled(30)
    while time.monotonic() < hard_end:
        pending = [f for f in pending if not f.act(run)]
        now = time.monotonic()
        for i, r in run.runs.items():
            if i not in run.ended and r.proc.poll() is not None:
                run.ended[i] = now
        live = [r for i, r in run.runs.items() if r.proc.poll() is None and i not in run.stopped]
        for r in live:
            if time.monotonic() - r.started > run.limit(r.node):
                run.hung.add(r.node)
                run.c.kill(r.proc)
        if not pending and not live:
            break
        time.sleep(0.02)
    _resume_stopped(run)
    for r in run.runs.values():
        if r.proc.poll() is None:
            run.hung.add(r.node)
            run.c.kill(r.proc)
        finish(r, 10)
        # Timed to when it ended, not to when the runner got round to it (after every other node
        # and the stopped ones' resumption).
        r.seconds = run.ended.setdefault(r.node, time.monotonic()) - r.started


def _resume_stopped(run: ScheduleRun) -> None:
    """SIGCONT the stopped nodes once the others are done: a hung process that wakes must
    still end, by its own deadline or at once if that has passed (CHAOS_GRACE either way).
    Those whose fault says so (midrun_stop then=SIGKILL) are SIGKILLed instead."""
    for i, r in run.stopped.items():
        sig = signal.SIGKILL if i in run.killed_at_end else signal.SIGCONT
        run.c.kill(r.proc, sig)
        for pid in run.stopped_pids.get(i, ()):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        run.resumed_at[i] = time.monotonic()
    for i, r in run.stopped.items():
        try:
            r.proc.wait(timeout=10 if i in run.killed_at_end else max(0.1, run.resumed_limit(i) - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.hung.add(i)
            run.c.kill(r.proc)
        run.ended[i] = time.monotonic()


def _host_report(run: ScheduleRun) -> dict | None:
    """The host's JSON report as written (the oracle validates it later), for its export lines."""
    paths = ([run.runs[0].json_path] if run.sched.mode != "torchrun" and 0 in run.runs
             else sorted(run.tmp.glob("rank*.json")))
    for path in paths:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if run.sched.mode != "torchrun" or report.get("role") == "host":
            return report
    return None


def _stop_helpers(run: ScheduleRun) -> None:
    for p in run.helpers:
        run.c.kill(p)
        try:
            p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass


SETTLE = 1.0   # a worker killed with its parent (PR_SET_PDEATHSIG) may take a moment to go


def _left_in_namespaces(c: Cluster) -> list[str]:
    """Processes and listening sockets still in the nodes once every netcheck has ended and the
    harness's own helpers are gone: netcheck's leftovers (docs/contract.md, "Promises": nothing outlives its run)."""
    end = time.monotonic() + SETTLE
    while time.monotonic() < end and any(netns_pids(n.ns) for n in c.nodes):
        time.sleep(0.05)
    left = []
    for node in c.nodes:
        for pid in netns_pids(node.ns):
            left.append(f"node{node.index}: process {pid} {_cmdline(pid)}")
        listening = subprocess.run(["ip", "netns", "exec", node.ns, "ss", "-Hltn"], capture_output=True,
                                   text=True).stdout.strip()
        if listening:
            left.append(f"node{node.index}: listening: {' | '.join(listening.splitlines())}")
    return left


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "(gone)"


def _namespaces_left(prefix: str) -> list[str]:
    return [f"namespace left after teardown: {p}" for root in (NETNS_RUN, NETNS_ETC) if root.is_dir()
            for p in root.iterdir() if p.name.startswith(prefix)]


# --------------------------------------------------------------------------------------
# the campaign


def run_and_judge(sched: Schedule, controls: Controls | None = None) -> Outcome:
    t0 = time.monotonic()
    try:
        o = judge(run_schedule(sched, controls))
        if controls is not None:
            o.fate = judge_fate(o)
    except Exception as err:  # noqa: BLE001 - the harness itself failed: say so, as a violation
        dummy = ScheduleRun(sched, None, Path("."))  # type: ignore[arg-type]
        o = Outcome(sched, dummy, [], [f"harness error: {type(err).__name__}: {err}"])
    o.seconds = time.monotonic() - t0
    if not o.violations and o.run.tmp != Path("."):
        shutil.rmtree(o.run.tmp, ignore_errors=True)   # a failing schedule's reports are kept
    return o


def summary(outcomes: list[Outcome], seed: int) -> str:
    by_mode = Counter(o.sched.mode for o in outcomes)
    bad_mode = Counter(o.sched.mode for o in outcomes if o.violations)
    kinds = Counter(f.kind for o in outcomes for f in o.sched.faults) + Counter(
        "(none)" for o in outcomes if not o.sched.faults)
    bad_kind = Counter(f.kind for o in outcomes if o.violations for f in o.sched.faults) + Counter(
        "(none)" for o in outcomes if o.violations and not o.sched.faults)
    lines = ["", f"{'mode':<22}{'schedules':>10}{'violating':>10}"]
    lines += [f"{m:<22}{by_mode[m]:>10}{bad_mode[m]:>10}" for m in MODES if by_mode[m]]
    lines += ["", f"{'fault kind':<22}{'schedules':>10}{'violating':>10}"]
    lines += [f"{k:<22}{n:>10}{bad_kind[k]:>10}" for k, n in sorted(kinds.items())]
    lines += fate_summary(outcomes)
    total = sum(len(o.violations) for o in outcomes)
    lines += ["", f"seed {seed}: {len(outcomes)} schedules, {sum(1 for o in outcomes if o.violations)} "
                  f"with violations, {total} violations, {sum(o.seconds for o in outcomes):.0f} s"]
    return "\n".join(lines)


def fate_summary(outcomes: list[Outcome]) -> list[str]:
    """The agreement tables (verdict x the job's fate, per launch) and the fate oracle's counts."""
    judged = [o.fate for o in outcomes if o.fate is not None]
    if not judged:
        return []
    lines = [""]
    for launch in ("bare", "export"):
        table = agreement(judged, launch)
        if any(sum(row.values()) for row in table.values()):
            title = ("the job launched bare (gloo; the launch the verdict speaks for)" if launch == "bare"
                     else "the job launched with netcheck's export lines (where they set a GLOO_ variable)")
            lines += render_table(table, f"agreement, {title}:") + [""]
    count = Counter(v.split(":")[0] for j in judged for v in j.violations)
    lines.append(f"fate oracle: {count['false pass']} false pass, {count['false alarm']} false alarm, "
                 f"{count['fix broke']} fix broke; {sum(len(j.excused) for j in judged)} FAIL findings excused "
                 f"over a job that ran; {sum(len(j.notes) for j in judged)} notes (WARN over a job that did not "
                 f"run, PASS after a mid-run fault)")
    return lines


def replay(o: Outcome) -> str:
    return o.sched.replay() + (" --fate" if o.fate is not None else "")


def print_outcome(o: Outcome, verbose: bool = False) -> None:
    status = "ok" if not o.violations else f"{len(o.violations)} VIOLATION(S)"
    print(f"{o.sched.describe()} -> {status} ({o.seconds:.1f} s)", flush=True)
    if o.fate is not None:
        print(f"    verdict {o.fate.verdict.upper()}; job " + " | ".join(f.describe() for f in o.fate.fates))
        for said in o.fate.excused + o.fate.notes:
            print(f"    fate: {said}")
    if verbose and not o.violations:
        record = outcome_record(o)
        for note in o.run.notes:
            print(f"    note: {note}")
        for node, (rc, seconds) in record["exits"].items():
            print(f"    {node} exit {rc} at {seconds} s: {'; '.join(record['findings'].get(node, ())) or '-'}")
    if o.violations:
        rcs = " ".join(f"node{i}={r.rc}/{r.seconds:.1f}s" for i, r in sorted(o.run.runs.items()))
        print(f"    exits: {rcs}")
        for note in o.run.notes:
            print(f"    note: {note}")
        for v in o.violations:
            print(f"    - {v}")
        print(f"    reports: {o.run.tmp}")
        print(f"    replay: {replay(o)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=chaos.__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20, help="schedules to run (default 20)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--schedule", type=int, action="append", help="run only this index (repeatable)")
    p.add_argument("--list", action="store_true", help="print the schedules, run nothing")
    p.add_argument("--midrun", action="store_true",
                   help="draw most schedules around a fault that lands mid-run (issue 62's campaign)")
    p.add_argument("--json", type=Path, help="write every outcome there (for the notes)")
    p.add_argument("-v", "--verbose", action="store_true", help="each node's exit and findings, passing or not")
    p.add_argument("--fate", action="store_true",
                   help="after netcheck, launch the real job (torchrun, gloo) on each schedule's cluster, faults "
                        "in place, and judge the verdict by its fate (fate.py; a healthy control job per shape "
                        "(nodes x processes) first; each schedule takes 20-60 s more, up to two job bounds where "
                        "it hangs)")
    a = p.parse_args(argv)
    indexes = a.schedule if a.schedule else range(a.n)
    schedules = [draw_schedule(a.seed, i, midrun=a.midrun) for i in indexes]
    if a.list:
        print("\n".join(s.describe() for s in schedules))
        return 0
    controls = measure_controls(sorted({s.shape for s in schedules})) if a.fate else None
    outcomes = []
    for s in schedules:
        outcomes.append(run_and_judge(s, controls))
        print_outcome(outcomes[-1], a.verbose)
        if a.json:   # after each schedule: a campaign stopped halfway keeps what it ran
            a.json.write_text(json.dumps(campaign_record(outcomes, controls), indent=1))
    print(summary(outcomes, a.seed))
    return 1 if any(o.violations for o in outcomes) else 0


def measure_controls(shapes: list[tuple[int, int]]) -> Controls:
    """The healthy job's busbw for each shape (nodes, processes per node) the campaign draws,
    measured first (the best of job.CONTROL_RUNS runs): the yardstick of "slow" (job.SLOW_SHARE of
    it). A control none of whose runs ran leaves slowness at that shape unjudged (None), and says so."""
    controls: Controls = {}
    for n, nproc in shapes:
        tmp = Path(tempfile.mkdtemp(prefix=f"chaos-control-{n}x{nproc}-"))
        fates = measure_control(n, tmp, nproc=nproc)
        best = controls[n, nproc] = control_busbw(fates)
        print(f"fate: healthy control, {n} nodes x {nproc} process{'es' if nproc > 1 else ''}: "
              + (f"{best:.3f} GB/s, the best of " if best else "none of ")
              + " | ".join(f.describe() for f in fates)
              + ("" if best else " -- slowness is not judged at this shape"), flush=True)
        if best:
            shutil.rmtree(tmp, ignore_errors=True)
    return controls


def campaign_record(outcomes: list[Outcome], controls: Controls | None):
    """--json's document: the outcomes' list; with --fate, beside the controls and the tables."""
    records = [outcome_record(o) for o in outcomes]
    if controls is None:
        return records
    judged = [o.fate for o in outcomes if o.fate is not None]
    return {"schedules": records,
            "fate": {"controls": {f"{n}x{p}": v for (n, p), v in controls.items()}, "slow_share": SLOW_SHARE,
                     "bound": {f"{n}x{p}": job_bound(n, p) for n, p in controls},
                     "agreement": {launch: agreement(judged, launch) for launch in ("bare", "export")}}}


def outcome_record(o: Outcome) -> dict:
    return {"schedule": o.sched.describe(), "replay": replay(o), "seconds": round(o.seconds, 1),
            **({"fate": o.fate.record()} if o.fate is not None else {}),
            "violations": o.violations, "notes": o.run.notes,
            # Past --timeout (s) each node ended, and how long its Python took to its first line (its
            # deadline starts then): the grace's measurements. Stopped nodes are timed from SIGCONT.
            "overrun": {f"node{i}": round(r.seconds - o.sched.timeout, 2) for i, r in sorted(o.run.runs.items())
                        if i not in o.run.stopped},
            "startup": {f"node{i}": round(seen_at(r, "netcheck: local...") - r.started, 2)
                        for i, r in sorted(o.run.runs.items()) if seen_at(r, "netcheck: local...") < math.inf},
            "after_sigcont": {f"node{i}": round(o.run.ended[i] - at, 2) for i, at in sorted(o.run.resumed_at.items())
                              if i in o.run.ended and i not in o.run.killed_at_end},
            "exits": {f"node{i}": [r.rc, round(r.seconds, 1)] for i, r in sorted(o.run.runs.items())},
            "findings": {f"node{i}": sorted({f"{f['severity']} {f['check']} {f.get('kind', '')} {f['nodes']}"
                                             for rep in reports_of(o, i) for f in rep["findings"]
                                             if f["severity"] != "pass"})
                         for i in sorted(o.reports)}}
