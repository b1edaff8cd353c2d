"""The oracle: the promises every schedule is held to, judged from exit codes, JSON reports and
output alone (check ids, kinds, node ranks; never netcheck's prose). Its input is each fault's
`Expect`: what the fault does to a real job.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodes import SPEED_VERDICTS, NodeRun, read_report, scaled

if TYPE_CHECKING:
    from .generator import Schedule
    from .runner import ScheduleRun

# What any netcheck process may take beyond its --timeout, counted from its start, and what a
# resumed one may take to end once its deadline has passed: the oracle's only allowance, one
# figure for every schedule (issue 62). It holds Python's start-up before the deadline starts
# (the budget's clock starts at netcheck's first line: 0.5-1.4 s measured for a new interpreter on
# this 2-core machine, under two busy loops too) and the exit after the report; netcheck keeps
# 2 s of --timeout for its report (core/budget.py REPORT_RESERVE), and no node of the mid-run
# campaigns ended past its --timeout (benchmarks/CHAOS.md, campaigns 45-46, the figures).
CHAOS_GRACE = scaled(3.0)
TRACES = re.compile(r"Traceback \(most recent call last\)|frame #\d|c10::Error|\[c10d\]")
# Whose fault a failure is, as a node's exit code says it and its report's `fault` does (README,
# "Exit codes"): nobody's ends by the verdict.
FAULT_EXIT = {"this_node": 2, "netcheck": 3, "other_nodes": 4, "cluster": 5}
VERDICT_EXIT = {"pass": 0, "warn": 1, "fail": 2}


# --------------------------------------------------------------------------------------
# what a fault does to a job: the oracle's input


@dataclass(frozen=True)
class Blame:
    """A finding some node's report must hold: `check` (one of), `kind` (one of, or any),
    naming `node` (the cluster node index, turned into its ranks when judged)."""

    node: int
    checks: tuple[str, ...]
    kinds: tuple[str, ...] | None = None
    severity: str | tuple[str, ...] = "fail"   # one of these
    reporter: int | None = None     # None: the host's report; else that node's own
    rank: int | None = None         # the rank to find named, when it is not the node's own
    alone: bool = False             # the finding names the node's ranks and no other (checks () : any check)


@dataclass
class Expect:
    breaks: bool = False                 # the job as launched cannot run
    warns: bool = False                  # it runs, and a warning is due
    blame: list[Blame] = field(default_factory=list)
    seers: set[int] = field(default_factory=set)        # nodes that see it: never exit 0
    one_of_seers: list[set[int]] = field(default_factory=list)  # at least one of each set exits non-zero
    exit_codes: dict[int, set[int]] = field(default_factory=dict)
    verdicts: dict[int, str] = field(default_factory=dict)
    absent: set[int] = field(default_factory=set)     # never seated by the host (never reaches its store,
                                                      # or only past the roster)
    no_report: set[int] = field(default_factory=set)  # cannot write one (SIGKILL)
    resumed: set[int] = field(default_factory=set)    # SIGSTOPped, timed from SIGCONT
    # May exit 1 where nothing else in the schedule breaks the job or warrants a warning: a
    # fault whose warning depends on when it lands. Unlike exit_codes it leaves a node's
    # code to the other faults where they break the job.
    may_warn: set[int] = field(default_factory=set)
    # The sweep ran on this machine's two busy cores (a mid-run fault's schedule, which may leave the
    # job whole): a node whose only findings are speed verdicts (nodes.SPEED_VERDICTS) may fail.
    speed_ok: bool = False
    # Findings that must not be there (a false cause: a firewall blamed for a full conntrack
    # table), each as a Blame is found: its reporter's report, its checks and kinds.
    never: list[Blame] = field(default_factory=list)
    # Whose fault it is (issue 65): the nodes where the fault was planted. Every report's
    # faulty_nodes names none but these, each of them exits "this node" (2) where it fails, every
    # other node "other nodes" (4), and the host's failing report names them all. The exceptions,
    # each with its reason: healthy nodes a report may name (`excused`), nodes at fault a report
    # may leave out and that may exit 4 (`unseen`: the evidence never reached that seat).
    at_fault: set[int] = field(default_factory=set)
    excused: dict[int, str] = field(default_factory=dict)
    unseen: dict[int, str] = field(default_factory=dict)

    def merge(self, other: "Expect") -> "Expect":
        return Expect(self.breaks or other.breaks, self.warns or other.warns, self.blame + other.blame,
                      self.seers | other.seers, self.one_of_seers + other.one_of_seers,
                      {**self.exit_codes, **other.exit_codes}, {**self.verdicts, **other.verdicts},
                      self.absent | other.absent, self.no_report | other.no_report,
                      self.resumed | other.resumed, self.may_warn | other.may_warn,
                      self.speed_ok or other.speed_ok, self.never + other.never,
                      self.at_fault | other.at_fault, {**self.excused, **other.excused},
                      {**self.unseen, **other.unseen})


def broken(node: int, *checks: str, kinds: tuple[str, ...] | None = None) -> Expect:
    """The common case: the job breaks, the host names `node`, which must not exit 0, and
    which alone is at fault."""
    return Expect(breaks=True, blame=[Blame(node, checks, kinds)], seers={0, node}, at_fault={node})


# Why a node that never reached the store may be left out of faulty_nodes: the host knows its
# rank at most, never its hostname (unless a launcher lists the hosts, which none here does).
NEVER_CAME = "it never reached the store: the host knows no hostname of it to list"


def missing(node: int, sched: "Schedule") -> Expect:
    """`node` never reaches the store, its own fault: with a node count the host names it
    missing; in one-shot mode it cannot know of it (docs/contract.md, "Phases": the one-shot form
    counts who came), so only the node itself is held to it, and the host only when nobody else
    came at all."""
    expect = Expect(breaks=True, seers={node}, absent={node}, at_fault={node}, unseen={node: NEVER_CAME})
    if sched.mode != "arrival":
        expect.blame.append(Blame(node, ("rdzv.join",), ("missing",)))
        expect.seers.add(0)
    return expect


# --------------------------------------------------------------------------------------
# judging a schedule


@dataclass
class Outcome:
    sched: Schedule
    run: ScheduleRun
    expects: list[Expect]
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reports: dict[int, dict] = field(default_factory=dict)   # node index -> its report (host: the cluster's);
                                                             # under torchrun its lowest rank's
    rank_reports: dict[int, dict] = field(default_factory=dict)   # torchrun: every rank's report, by rank
    host_report: dict | None = None
    fate: object = None     # fate.FateJudgement, where the campaign runs the real job (--fate)

    @property
    def expect(self) -> Expect:
        total = Expect()
        for e in self.expects:
            total = total.merge(e)
        if total.absent >= set(range(1, self.sched.n)):
            # Nobody joins the host: the checks between nodes are not run (run.skipped
            # no_peer), so a fault only they can see leaves no finding of theirs.
            total.blame = [b for b in total.blame if not all(c.startswith(BETWEEN_NODES) for c in b.checks)]
        return total


BETWEEN_NODES = ("mesh.", "nic.")   # checks the mesh and nic phases make, with a peer only


def judge(o: Outcome) -> Outcome:
    """Every promise, for every node of the schedule."""
    e, run = o.expect, o.run
    _read_reports(o)
    for i, r in sorted(run.runs.items()):
        _judge_node(o, e, i, r)
    _judge_verdicts(o, e)
    o.violations += [f"left behind: {x}" for x in run.leftovers]
    return o


def _read_reports(o: Outcome) -> None:
    """Each node's report, validated against the schema (a report that does not validate is a
    violation, and is not read further)."""
    run = o.run
    if run.sched.mode == "torchrun":
        _read_torchrun_reports(o)
        return
    for i, r in run.runs.items():
        if not r.json_path.exists():
            continue
        try:
            o.reports[i] = read_report(r.json_path)
        except Exception as err:  # noqa: BLE001 - jsonschema's or json's: the report is bad
            o.violations.append(f"node{i}: JSON report invalid: {str(err).splitlines()[0][:300]}")
    o.host_report = o.reports.get(0)


def _read_torchrun_reports(o: Outcome) -> None:
    """torchrun mode: one report per process rank (several a node: --nproc-per-node); the host's
    maps addresses to nodes."""
    by_rank = o.rank_reports
    for path in sorted(o.run.tmp.glob("rank*.json")):
        try:
            report = read_report(path)
        except Exception as err:  # noqa: BLE001
            o.violations.append(f"{path.name}: JSON report invalid: {str(err).splitlines()[0][:300]}")
            continue
        by_rank[report["node_rank"]] = report
    o.host_report = next((r for r in by_rank.values() if r["role"] == "host"), None)
    for node in range(o.sched.n):
        if mine := reports_of(o, node):
            o.reports[node] = mine[0]


def reports_of(o: Outcome, node: int) -> list[dict]:
    """Every report netcheck wrote on cluster node `node`: its one, or under torchrun each of its
    ranks' (placed by the host's report, by address)."""
    if o.sched.mode != "torchrun":
        return [o.reports[node]] if node in o.reports else []
    return [o.rank_reports[r] for r in sorted(ranks_of(o, node)) if r in o.rank_reports]


def ranks_of(o: Outcome, node: int) -> set[int]:
    """The ranks the host's report gives cluster node `node` (by its address); in ranked mode
    also the rank its launch line gave it, for a node that never came."""
    ranks = set()
    if o.host_report:
        addr = o.run.c.nodes[node].addr
        ranks = {n["rank"] for n in o.host_report["nodes"] if n["address"] == addr}
    if not ranks and o.sched.mode == "ranked":
        args = o.run.args(node)
        ranks = {int(args[args.index("--node-rank") + 1])}
    return ranks


def _judge_node(o: Outcome, e: Expect, i: int, r: NodeRun) -> None:
    say = o.violations.append
    where = f"node{i} (rc={r.rc}, {r.seconds:.1f} s)"
    if i in o.run.hung:
        resumed = f", or {CHAOS_GRACE:g} s after SIGCONT past it" if i in e.resumed else ""
        say(f"{where}: still running past --timeout + grace ({o.run.limit(i):g} s{resumed}): killed")
    elif i not in e.resumed and r.seconds > o.run.limit(i):
        say(f"{where}: ended past --timeout + grace ({o.run.limit(i):g} s)")
    if r.rc in (3, 64):
        say(f"{where}: exit {r.rc} (netcheck itself: an internal error or its deadline with no node to blame / "
            "unusable command line)")
    if i in e.exit_codes and r.rc not in e.exit_codes[i] and i not in o.run.hung:
        say(f"{where}: exit code {r.rc}, the signal's is {sorted(e.exit_codes[i])}")
    output = _own_output(o, r)
    if m := TRACES.search(output):
        say(f"{where}: torch internals in its output: {_context(output, m)}")
    reports = reports_of(o, i)
    if o.sched.mode != "torchrun" and not reports and i not in e.no_report and not r.json_path.exists():
        say(f"{where}: no JSON report")
    for report in reports:
        if i in e.verdicts and report["verdict"] != e.verdicts[i]:
            say(f"{where}: report verdict {report['verdict']}, expected {e.verdicts[i]}")
        internal = [f for f in report["findings"] if f["check"] == "run.internal"]
        if internal:
            say(f"{where}: run.internal: {internal[0]['summary'][:200]}")
        said = said_exit(report)
        if o.sched.mode != "torchrun" and r.rc in {*VERDICT_EXIT.values(), *FAULT_EXIT.values()} and r.rc != said:
            say(f"{where}: exit {r.rc}, but its report says {said} ({_party(report)}'s fault, verdict "
                f"{report['verdict']})")


def said_exit(report: dict) -> int:
    """The exit code a node's report says it ended with: its fault's, or where nobody is at fault
    its verdict's. (Under torchrun the agent's code is the launcher's, not netcheck's.)"""
    party = _party(report)
    return FAULT_EXIT[party] if party in FAULT_EXIT else VERDICT_EXIT[report["verdict"]]


def _party(report: dict) -> str:
    return (report.get("fault") or {}).get("party", "nobody")


def _own_output(o: Outcome, r: NodeRun) -> str:
    """What netcheck printed on the node. Under torchrun, its workers' logs: the agent's own
    console (its rendezvous, its report of a worker's exit code as a ChildFailedError
    traceback) is the launcher's output, not netcheck's."""
    if o.sched.mode == "torchrun":
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted((o.run.tmp / f"logs{r.node}").glob("**/std*.log")))
    return (r.stdout or "") + "\n" + (r.stderr or "")


def _context(text: str, m: re.Match) -> str:
    return text[max(0, m.start() - 150):m.end() + 150].replace("\n", " | ")


def _judge_verdicts(o: Outcome, e: Expect) -> None:
    say = o.violations.append
    # Under torchrun each node's code is its agent's, which stands for every rank on it: 0 where
    # each of them exited 0, else 1 (a worker's failure; the agent stops its siblings).
    rcs = {i: r.rc for i, r in o.run.runs.items()}
    if e.breaks:
        seers = set(e.seers)
        if o.sched.mode == "arrival" and e.absent >= set(range(1, o.sched.n)):
            seers.add(0)   # nobody came: even the one-shot host knows it is alone
        for i in sorted(seers):
            if rcs.get(i) == 0:
                say(f"node{i}: exit 0, though it can see the fault (or is named for it)")
        for group in e.one_of_seers:
            if all(rcs.get(i) == 0 for i in group):
                say(f"nodes {sorted(group)}: all exit 0, one of them cannot have been seated")
    elif e.warns:
        for i, rc in sorted(rcs.items()):
            if rc not in (0, 1):
                say(f"node{i}: exit {rc}; the fault only warrants a warning")
        if rcs.get(0) != 1:
            say(f"node0 (host): exit {rcs.get(0)}, the fault warrants a warning (exit 1)")
    else:
        for i, rc in sorted(rcs.items()):
            if rc != 0 and i not in e.exit_codes and i not in e.resumed and not (rc == 1 and i in e.may_warn) \
                    and not (rc in (1, 2, 4) and e.speed_ok and _only_speed(o, i)):
                say(f"node{i}: exit {rc}; nothing in this schedule breaks the job (expected 0)")
    for b in e.blame:
        _judge_blame(o, b)
    _judge_fault(o, e)
    for b in e.never:
        report = o.host_report if b.reporter is None else o.reports.get(b.reporter)
        held = [f for f in (report or {}).get("findings", ()) if _is(f, b)]
        if held:
            say(f"node{b.reporter or 0}'s report: {held[0]['severity']} {held[0]['check']} "
                f"{held[0].get('kind', '')} {held[0]['nodes']}, which the fault rules out")


def _judge_fault(o: Outcome, e: Expect) -> None:
    """Whose fault each node says it is, against where the faults were planted (Expect.at_fault):
    a healthy node named at fault, or exiting "this node", is a violation, and so is a node at
    fault left out of the host's failing report or exiting "other nodes", each but for the
    fault's documented exceptions."""
    say, node_of = o.violations.append, _nodes_by_hostname(o)
    for i in sorted(o.run.runs):
        for report in reports_of(o, i):
            blamable = e.at_fault | set(e.excused) | (_speed_named(o, report) if e.speed_ok else set())
            # A hostname two nodes carry (duplicate_hostname) names whichever of them is blamable.
            named = {min(twins & blamable, default=node_of.get(h, h)) if (twins := _carriers(o, h)) else
                     node_of.get(h, h) for h in report.get("faulty_nodes", ())}
            if wrong := sorted(n if isinstance(n, str) else f"node{n}" for n in named - blamable):
                say(f"node{i}'s report: faulty_nodes names {', '.join(wrong)}, not at fault (the faults': "
                    f"{_listed(e.at_fault)})")
            party = _party(report)
            if party == "this_node" and i not in blamable:
                say(f"node{i}: exits this node's fault (2), though the faults are {_listed(e.at_fault)}'s")
            if party == "other_nodes" and i in e.at_fault and i not in e.unseen:
                say(f"node{i}: at fault, and exits other nodes' fault (4)")
    host = o.host_report
    if host and host.get("verdict") == "fail":
        named = {node_of.get(h) for h in host.get("faulty_nodes", ())}
        if left := sorted(e.at_fault - named - set(e.unseen)):
            say(f"the host's report: faulty_nodes leaves out {_listed(left)}, at fault")


def _speed_named(o: Outcome, report: dict) -> set[int]:
    """The nodes a report's failing speed verdicts name: on this machine's two busy cores a sweep
    may find any node slow (Expect.speed_ok), which names it at fault."""
    ranks = {r for f in report["findings"] if f["severity"] == "fail" and f["check"] in SPEED_VERDICTS
             for r in f["nodes"]}
    return {i for i in range(o.sched.n) if ranks_of(o, i) & ranks}


def _carriers(o: Outcome, hostname: str) -> set[int]:
    """The nodes that carry `hostname` where more than one does (a duplicated hostname), else none."""
    carriers = {i for i, n in enumerate(o.run.c.nodes) if n.hostname == hostname}
    return carriers if len(carriers) > 1 else set()


def _nodes_by_hostname(o: Outcome) -> dict[str, int]:
    """Cluster node index by the hostname the reports give it: each node's own, and where a fault
    gave it another (a container's), the host report's for its ranks."""
    node_of = {n.hostname: i for i, n in enumerate(o.run.c.nodes)}
    for i in range(o.sched.n):
        ranks = ranks_of(o, i) if o.host_report else set()
        node_of.update({n["hostname"]: i for n in (o.host_report or {}).get("nodes", ()) if n["rank"] in ranks})
    return node_of


def _listed(nodes) -> str:
    return ", ".join(f"node{n}" for n in sorted(nodes)) or "nobody"


def _is(f: dict, b: Blame) -> bool:
    """Whether finding f is one of Blame b's checks, kinds and severities."""
    severities = (b.severity,) if isinstance(b.severity, str) else b.severity
    return (not b.checks or f["check"] in b.checks) and (not b.kinds or f.get("kind") in b.kinds) \
        and f["severity"] in severities


def _only_speed(o: Outcome, i: int) -> bool:
    """Whether node i's report (and the host's, which a joiner repeats) raises nothing but speed verdicts."""
    reports = [*reports_of(o, i), *([o.host_report] if o.host_report else [])]
    return bool(reports) and all(f["check"] in SPEED_VERDICTS for r in reports for f in r["findings"]
                                 if f["severity"] != "pass")


def _judge_blame(o: Outcome, b: Blame) -> None:
    reporter = 0 if b.reporter is None else b.reporter
    # A node's own finding, under torchrun, in any of its ranks' reports.
    reports = [o.host_report] if b.reporter is None else reports_of(o, b.reporter)
    findings = [f for report in reports if report for f in report["findings"]]
    severities = (b.severity,) if isinstance(b.severity, str) else b.severity
    kinds = f" kind {'/'.join(b.kinds)}" if b.kinds else ""
    want = f"{'/'.join(severities)} {'/'.join(b.checks) or 'finding'}{kinds} naming node{b.node}" + (
        " alone" if b.alone else "")
    if not any(reports):
        if not (b.reporter is None and o.run.runs[0].rc == -signal.SIGKILL):
            o.violations.append(f"node{reporter}: no report to hold {want}")
        return
    ranks = ({b.rank} if b.rank is not None else ranks_of(o, b.node)) if b.reporter is None or b.alone else None
    hostname = o.run.c.nodes[b.node].hostname
    for f in findings:
        if not _is(f, b):
            continue
        if b.alone:
            if ranks and f["nodes"] and set(f["nodes"]) <= ranks:
                return
            continue
        if b.reporter is not None or (ranks and ranks & set(f["nodes"])) or \
                (not ranks and hostname in " ".join([f["summary"], *f["evidence"]])):
            return
    got = sorted({(f["check"], f["severity"], f.get("kind", ""), tuple(f["nodes"]))
                  for f in findings if f["severity"] != "pass"})
    o.violations.append(f"node{reporter}'s report: expected {want} (rank {sorted(ranks) if ranks else '?'}); "
                        f"it has {got}")
