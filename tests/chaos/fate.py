"""The campaign's second oracle (`--fate`): the real job's fate beside netcheck's verdict (docs/contract.md,
"How the promises are tested"; issue 64). After netcheck has run on a schedule's cluster, with its
faults still in place, the job of tests/job.py is launched there the way an operator would: bare,
and with netcheck's export lines where the host's report gives any that gloo reads. Its fate (ok,
slow, failed, hung) is set beside the schedule's verdict, and these rules are held:

  false pass   the verdict is PASS and a launch of the job did not run (failed, hung) or crawled
               (slow): a violation.
  false alarm  the verdict is FAIL, the bare launch ran, and a FAIL finding speaks for something
               this job used (below): a violation. A finding that speaks only for what this job did
               not use is excused, and said so; a speed finding stands over a slow job, not one at
               full speed.
  fix broke    the bare launch ran and the launch with netcheck's export lines did not: a violation.
  WARN may stand over a job that ran; a WARN over a job that did not run is listed, not counted.

The verdict is the worst over the nodes (what a gate over every node sees): each node's report's,
or where it wrote none its exit code's (0 pass, 1 warn, 2 fail, anything else `none`), ordered
pass < warn < none < fail. The findings are every report's FAIL findings.

Whom a finding speaks for: its own word, the report's `impact` (the registry's for its check and
kind, or its rule's narrowed to the run): the parts it stops, slows or risks, and `form` where it
speaks for one launch form alone (torchrun's c10d rendezvous); a finding that names no part speaks
for the whole job. This job uses the launch (in its rendezvous form: static or c10d), the store,
gloo and its speed; it does not use NCCL (over sockets or RDMA). A finding excused:
  - every part it names is one this job did not use (NCCL, the other launch form), or it only
    risks (another size, another launch);
  - else it only slows (or is a speed verdict), and the job was slow.

Where the schedule's faults do not meet the job as they met netcheck, a rule is not applied:
  fate "netcheck": the fault acts on netcheck's own run (a signal, a stop, a late start, a foreign
      client, a flap while it measured): the job meets a healthy cluster, and netcheck's FAIL is about
      its run: false alarms are not judged (false passes are).
  fate "later": the fault lands mid-run and stays (a firewall rule, a link down): the job meets it,
      netcheck may have looked before it landed: false passes are not judged (false alarms are).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable

from job import RAN, Fate, Launch, classify, confirm_slow, control_busbw, export_envs, measure_control, run_job
from nodes import PORT

if TYPE_CHECKING:
    from .generator import Schedule
    from .oracle import Outcome
    from .runner import ScheduleRun

VERDICTS = ("pass", "warn", "none", "fail")     # worst last
RC_VERDICT = {0: "pass", 1: "warn", 2: "fail", 4: "fail", 5: "fail"}   # 4, 5: a failure at other nodes, the cluster
NCCL_SOCKET, NCCL_RDMA, SPEED = "nccl_socket", "nccl_rdma", "speed"   # the report's names (model.PARTS)
NOT_USED = {NCCL_SOCKET, NCCL_RDMA}   # by this job, whatever its launch


# --------------------------------------------------------------------------------------
# whom a finding speaks for


def speaks_for(finding: dict) -> list[tuple[str, str]]:
    """[(part, how)] a finding speaks for, from its impact: "launch:c10d" for the launch where it
    speaks for that form alone; [("job", "stops")] where it names no part (or has no impact)."""
    impact = finding.get("impact") or {}
    form = impact.get("form") or ""
    parts = [f"launch:{form}" if part == "launch" and form else part for part in impact.get("on", ())]
    return [(part, impact["effect"]) for part in parts] or [("job", "stops")]


def excuse(finding: dict, fate: Fate) -> str | None:
    """Why a FAIL finding stands over this job that ran (ok or slow), or None: a false alarm."""
    pairs = speaks_for(finding)
    used = {"job", "launch", "store", "gloo", f"launch:{fate.rdzv}"}

    def meets(whom: str) -> bool:   # a name this job meets (one the oracle cannot place, too)
        return whom in used or whom == SPEED or whom not in KNOWN

    if any(meets(w) and how == "stops" and w != SPEED for w, how in pairs):
        return None
    if any(meets(w) and how != "risks" for w, how in pairs):   # it slows (or is a speed verdict)
        return "it slows the job, and the job was slow" if fate.fate == "slow" else None
    unused = sorted({w for w, how in pairs if not meets(w)})
    risks = sorted({w for w, how in pairs if meets(w) and how == "risks"})
    said = [f"it speaks for {', '.join(unused)}, which this {fate.rdzv} gloo job did not use"] if unused else []
    if risks:
        said.append(f"it risks {', '.join(risks)} only at another size, launch or time")
    return "; ".join(said)


KNOWN = NOT_USED | {"job", "launch", "launch:c10d", "store", "gloo", SPEED}


# --------------------------------------------------------------------------------------
# the verdict


def node_reports(o: "Outcome") -> list[dict]:
    """Every report netcheck wrote in the schedule: each node's, and under torchrun each rank's
    (read from its file: the oracle maps only those whose address it can place to a node)."""
    if o.sched.mode != "torchrun":
        return list(o.reports.values())
    found = []
    for path in sorted(o.run.tmp.glob("rank*.json")):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass   # the first oracle says so
    return found


def schedule_verdict(o: "Outcome") -> str:
    """The worst over the nodes (VERDICTS' order): a node's report's verdict, else its exit code's.
    Under torchrun (a torchrun agent's exit is not netcheck's) every rank's report, `none` where
    one is missing."""
    if o.sched.mode == "torchrun":
        verdicts = [r.get("verdict", "none") for r in node_reports(o)]
        verdicts += ["none"] * (o.sched.ranks - len(verdicts))
    else:
        verdicts = [o.reports[i]["verdict"] if i in o.reports
                    else "none" if i in o.run.hung else RC_VERDICT.get(r.rc, "none")
                    for i, r in o.run.runs.items()]
    return max(verdicts, key=VERDICTS.index, default="none")


def fail_findings(o: "Outcome") -> list[dict]:
    seen, found = set(), []
    for report in [o.host_report, *node_reports(o)]:
        for f in (report or {}).get("findings", ()):
            key = (f["check"], f.get("kind"), tuple(f["nodes"]))
            if f["severity"] == "fail" and key not in seen:
                seen.add(key)
                found.append(f)
    return found


# --------------------------------------------------------------------------------------
# the rules (pure: unit-tested)


@dataclass
class FateJudgement:
    verdict: str
    fates: list[Fate]
    netcheck_only: list[str] = field(default_factory=list)   # faults on netcheck's run alone
    later: list[str] = field(default_factory=list)           # mid-run faults that landed and stay
    violations: list[str] = field(default_factory=list)
    excused: list[str] = field(default_factory=list)         # FAIL findings over a job that ran, and why
    notes: list[str] = field(default_factory=list)

    def record(self) -> dict:
        return {"verdict": self.verdict, "fates": [f.record() for f in self.fates],
                "netcheck_only": self.netcheck_only, "later": self.later,
                "violations": self.violations, "excused": self.excused, "notes": self.notes}


def _label(f: dict) -> str:
    return f"{f['check']}{' ' + f['kind'] if f.get('kind') else ''} {f['nodes']}"


def rules(verdict: str, findings: Iterable[dict], fates: list[Fate], netcheck_only: Iterable[str] = (),
          later: Iterable[str] = ()) -> FateJudgement:
    """The verdict x fate rules of the module's docstring. fates[0] is the bare launch."""
    j = FateJudgement(verdict, list(fates), list(netcheck_only), list(later))
    if not fates:
        return j
    bare = fates[0]
    for fate in fates:
        if verdict == "pass" and fate.fate != "ok":
            if j.later:
                j.notes.append(f"PASS over a job {fate.fate} ({fate.launch}): a fault landed mid-run "
                               f"({', '.join(j.later)}), perhaps after netcheck looked; not judged")
            else:
                j.violations.append(f"false pass: PASS, and the {fate.launch} job {fate.fate}"
                                    + (f" ({fate.first_error})" if fate.first_error else "")
                                    + (f" (busbw {fate.busbw:.3f} of control {fate.control:.3f} GB/s)"
                                       if fate.fate == "slow" and fate.busbw is not None and fate.control else ""))
        if verdict == "warn" and fate.fate not in RAN:
            j.notes.append(f"WARN over a job {fate.fate} ({fate.launch}): "
                           f"{fate.first_error or ', '.join(f'{k} in {v}' for k, v in fate.where.items())}")
    for fate in fates[1:]:
        if bare.ran and not fate.ran and verdict != "pass":   # under a PASS it is a false pass already
            j.violations.append(f"fix broke: the bare job ran ({bare.fate}) and the {fate.launch} one {fate.fate}"
                                + (f" ({fate.first_error})" if fate.first_error else ""))
    if verdict == "fail" and bare.ran:
        for f in findings:
            why = excuse(f, bare)
            if why is not None:
                j.excused.append(f"{_label(f)}: {why}")
            elif j.netcheck_only:
                j.excused.append(f"{_label(f)}: netcheck's own run was disturbed "
                                 f"({', '.join(j.netcheck_only)}); not judged")
            else:
                j.violations.append(f"false alarm: FAIL {_label(f)}, and the bare {bare.rdzv} job ran "
                                    f"({bare.fate}"
                                    + (f", busbw {bare.busbw:.3f} GB/s" if bare.busbw is not None else "") + ")")
    return j


# --------------------------------------------------------------------------------------
# on a schedule's cluster


def job_rdzv(sched: "Schedule") -> str:
    """The rendezvous form the schedule's job is launched with: torchrun's own where netcheck ran
    under torchrun (c10d), else drawn from (seed, index) alone (the schedule's own draw untouched)."""
    if sched.mode == "torchrun":
        return "c10d"
    return random.Random(f"netcheck-fate/{sched.seed}/{sched.index}").choice(("static", "c10d"))


def _arg(args: list[str], flag: str) -> str | None:
    return args[len(args) - 1 - args[::-1].index(flag) + 1] if flag in args else None


def launches(run: "ScheduleRun", host_report: dict | None) -> list[Launch]:
    """The bare launch, and the export launch where the host's report recommends a variable gloo
    reads (GLOO_*: the rest are NCCL's, TensorPipe's or torch's, the same job to gloo). Each node's
    launch line carries what the schedule's faults put in netcheck's (a copied --node-rank, another
    --rdzv-id, a launcher's limit), as the operator's job line would."""
    from .runner import TORCHRUN_PORT  # runner imports this module

    sched, c = run.sched, run.c
    n = sched.n
    if sched.mode == "torchrun":
        endpoint, ranks, ids = f"node0:{TORCHRUN_PORT}", tuple(range(n)), ("job",) * n
    else:
        args = [run.args(i) for i in range(n)]
        endpoint = _arg(args[0], "--rdzv") or f"node0:{PORT}"
        ranks = tuple(int(_arg(a, "--node-rank") or i) for i, a in enumerate(args))
        ids = tuple(f"job-{_arg(a, '--rdzv-id') or 'default'}" for a in args)
    wrappers = tuple(tuple(w for f in sched.faults for w in f.wrapper(i)) for i in range(n))
    bare = Launch(n, job_rdzv(sched), endpoint, "bare", ranks, ids, (), wrappers, sched.nproc)
    out = [bare]
    envs = export_envs(host_report, [node.hostname for node in c.nodes])
    if envs and any(k.startswith("GLOO_") for env in envs for k in env):
        out.append(replace(bare, name="export", envs=envs))
    return out


def run_fates(run: "ScheduleRun", host_report: dict | None, control: float | None) -> list[Fate]:
    """The job's launches on the schedule's cluster, its faults in place (Fault.before_job). A
    launch slow by its figure against the campaign's control is held to a healthy job's measured
    right after it on a clean cluster of its shape (job.confirm_slow), once for the schedule."""
    for f in run.sched.faults:
        f.before_job(run)
    fates = [classify(run_job(run.c, launch, run.tmp), control) for launch in launches(run, host_report)]
    if any(f.fate == "slow" and f.busbw is not None for f in fates):
        now = control_busbw(measure_control(run.sched.n, run.tmp, runs=1, nproc=run.sched.nproc))
        for f in fates:
            confirm_slow(f, now)
    return fates


def judge_fate(o: "Outcome") -> FateJudgement:
    faults = o.sched.faults
    netcheck_only = [f.describe() for f in faults if f.fate == "netcheck"]
    later = [f.describe() for f in faults if f.fate == "later" and "landed" in o.run.fault_state.get(f, {})]
    j = rules(schedule_verdict(o), fail_findings(o), o.run.fates, netcheck_only, later)
    o.violations += j.violations
    return j


# --------------------------------------------------------------------------------------
# the agreement table


def agreement(judgements: Iterable[FateJudgement], launch: str = "bare") -> dict[str, dict[str, int]]:
    table = {v: {f: 0 for f in ("ok", "slow", "failed", "hung")} for v in VERDICTS}
    for j in judgements:
        for fate in j.fates:
            if fate.launch == launch:
                table[j.verdict][fate.fate] += 1
    return table


def render_table(table: dict[str, dict[str, int]], title: str) -> list[str]:
    fates = ("ok", "slow", "failed", "hung")
    lines = [title, f"{'verdict':<10}" + "".join(f"{f:>8}" for f in fates) + f"{'total':>8}"]
    for v in VERDICTS:
        row = table[v]
        if sum(row.values()):
            lines.append(f"{v.upper():<10}" + "".join(f"{row[f]:>8}" for f in fates) + f"{sum(row.values()):>8}")
    return lines
