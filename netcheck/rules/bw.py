"""Rules for the bandwidth phase: a BandwidthResult in, findings out.

    bw.stage      the stages ran (backend and why), or which stage stopped, where and why
                  (at the deadline: the collective, size and ranks in flight, and the paths
                  the mesh flagged)
    bw.wrong      corrupted elements, with the ranks that received them
    bw.busbw      below --expect-busbw, or far below the line rate of the NICs in use
    bw.pair       a node whose best pair runs well below the other nodes' (named)
    bw.straggler  a rank (or a node's intra-node sweep) far slower than the rest
    host.busy     a process outside netcheck using a node's CPUs, or holding its GPUs, while the sweep ran
    link.health   the link counters around the phase (rules/link.py)

Rules never print and never touch the network.

Longer than 500 lines: six checks judge one BandwidthResult through the same readings (node names,
the culprits, the paths the mesh flagged, the headline sweep); link.health, which reads only the
link counters, is rules/link.py's.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import replace

from netcheck.core.bwrecords import (
    STAGE_NAMES,
    STAGE_TITLES,
    BandwidthResult,
    BusyProcess,
    Fault,
    Headline,
    InFlight,
    Sweep,
    Unanswered,
    culprits,
    first_culprit,
    peak_busbw,
    unanswered_directions,
)
from netcheck.core.bwtext import plateau_text, rate_text, size_words, sizes_text, step_text, time_text
from netcheck.core.constants import BW_LATENCY_MAXBYTES, BW_PAIR_SLOW
from netcheck.core.meshrecords import FlaggedPaths
from netcheck.core.model import FAIL, GLOO, NCCL_RDMA, NCCL_SOCKET, PASS, STOPS, WARN, Finding
from netcheck.rules import run as run_rules
from netcheck.rules.fault import RUNS_OWN, at_fault
from netcheck.rules.link import link_findings, raised
from netcheck.rules.pernode import ranks_text
from netcheck.rules.registry import (
    BW_BUSBW,
    BW_CUT_FLOW,
    BW_PAIR,
    BW_PAIR_NOISY,
    BW_PAIR_TOO_SMALL,
    BW_STAGE,
    BW_STRAGGLER,
    BW_UNANSWERED,
    BW_WRONG,
    HOST_BUSY,
    impact_of,
)

BW_STRAGGLER_RATIO = 1.5     # bw.straggler: a rank this many times slower than the median
BW_LINE_RATE_WARN = 0.25     # bw.busbw: busbw below this share of the slowest used NIC's line rate

SHOWN_PATHS = 4    # flagged paths named in a one-line summary (the mesh.connect finding has them all)
# gloo's words for a connection ended from its peer's address (tcp/pair.cc): "Connection closed by
# peer [ADDR]:PORT" (a FIN) or "Read error [ADDR]:PORT: Connection reset by peer" (a reset); a
# middlebox's REJECT gives either, as seen on the namespace tests. IPv6 addresses as well.
ENDED_BY = re.compile(r"Connection closed by peer \[([0-9A-Fa-f.:]+)\]"
                      r"|\[([0-9A-Fa-f.:]+)\]:\d+: Connection reset by peer")
FIXES = {
    "died": "the worker process died: look at that node's kernel log (dmesg: the OOM killer?) "
            "and its GPU; the rows measured before it are kept",
    "stuck": "the rank stopped responding: look for a hung GPU (nvidia-smi), a process in D "
             "state, or a stopped job on that node",
    "silent": "run netcheck on every node; that node's own report says where it stopped",
    "stopped": "that node's netcheck was stopped (Ctrl-C, scancel, a pod deleted): run it again "
               "on every node",
    "start": "the worker could not start or reach the host's store: the detail says why (a "
             "broken torch install, or the host's netcheck gone)",
    "control": "gloo could not connect the ranks: check mesh.connect and nic.gloo_default, and "
               "set GLOO_SOCKET_IFNAME as recommended",
    "data": "the data backend did not start: check nic.nccl_default and set NCCL_SOCKET_IFNAME as "
            "recommended; NCCL_DEBUG=INFO says more",
    "sweep": "a collective failed mid-sweep: the evidence names the peer that went away",
}
# NCCL's WARN line (in a failure's detail) where it names a cause with a fix of its own
# (docs/contract.md: launch.topology, nic.route); any other keeps its stage's fix.
NCCL_WARN_FIXES = (
    ("Duplicate GPU detected", "two ranks drive one GPU, which NCCL refuses: one GPU per process (LOCAL_RANK as "
     "the device index, at most one process per visible GPU); netcheck nodes sharing a machine need GPUs of their "
     "own (CUDA_VISIBLE_DEVICES), or NCCL_HOSTID set apart to be taken for two hosts"),
    ("no socket interface found", "NCCL_SOCKET_IFNAME matches no interface on that node: check nic.route and "
     "set it as recommended"),
)


def bandwidth_findings(result: BandwidthResult, line_rate_gbps: dict[int, float | None],
                       expect_busbw: float | None, flagged: tuple[str, ...] = (),
                       fabric_gbps: dict[int, float | None] | None = None) -> list[Finding]:
    """Every bandwidth check, cluster-wide.

    Nodes are named by result.node_name. line_rate_gbps: node rank -> the link speed, in
    Gbit/s, of the interface its inter-node traffic uses (None: unknown, as on virtual
    links). expect_busbw: --expect-busbw, in GB/s (nccl-tests' unit), or None. flagged:
    the paths mesh.connect failed, one line each (nic.path_text). fabric_gbps: node rank ->
    the summed rate of the RDMA ports NCCL would use there (rdma.fabric_gbps), the ceiling on nccl.
    """
    names = _Names(result)
    links = link_findings(result, names.node)
    # None: nothing judged (no counters, or too little moved to tell), so nothing said of loss.
    troubled = sorted({n for f in links if f.severity != PASS for n in f.nodes}) if links else None
    found = (stage_findings(result, names, flagged) + wrong_findings(result, names)
             + busbw_findings(result, names, _ceiling(result, line_rate_gbps, fabric_gbps), expect_busbw, troubled)
             + pair_findings(result, names) + straggler_findings(result, names) + busy_findings(result, names))
    return found + raised(links, frozenset(measured_short(found, range(result.nnodes))))


def measured_short(findings: list[Finding], nodes: Iterable[int]) -> dict[int, str]:
    """node -> the check that measured its figures short beyond doubt: the nodes bw.pair fails;
    every node where the plateau missed --expect-busbw (a figure of the whole cluster). What makes
    a loss (link.health) or small buffers (host.buffers) a failure. A warning's figure is not
    enough (a straggling rank, a pair slow within the run's noise): 2% loss beside a rank 1.6x the
    median's on a loaded machine failed, and the job ran at the control's speed (campaign 64101 #45)."""
    short = {n: BW_PAIR for f in findings if f.check == BW_PAIR and f.severity == FAIL for n in f.nodes}
    if any(f.check == BW_BUSBW and f.severity == FAIL for f in findings):
        short.update((n, BW_BUSBW) for n in nodes if n not in short)
    return short


def _ceiling(result: BandwidthResult, line_rate_gbps: dict[int, float | None],
             fabric_gbps: dict[int, float | None] | None) -> dict[int, float | None]:
    """On nccl with RDMA ports on every node, their rate (NCCL moves the data there), else the NIC's."""
    fabric = fabric_gbps or {}
    rdma = result.backend == "nccl" and fabric and all(fabric.get(n) for n in line_rate_gbps)
    return fabric if rdma else line_rate_gbps


class _Names:
    def __init__(self, result: BandwidthResult):
        self.result = result

    def node(self, n: int) -> str:
        return self.result.node_name(n)

    def rank(self, f: Fault) -> str:
        return f"rank {f.rank} ({self.node(f.node)}, local rank {f.local_rank})" if f.rank >= 0 \
            else self.node(f.node)


# --- bw.stage -----------------------------------------------------------------------------

def flagged_skip(flagged: FlaggedPaths, names: dict[int, str]) -> Finding | None:
    """The phase left out where the mesh found a cause it would only time out on: paths that
    lose full-size frames (every collective across one sends full segments), or a node no peer
    reaches or that reaches no peer (every collective with it waits for a connect)."""
    if flagged.blackholes:
        shown = flagged.paths[:min(flagged.blackholes, SHOWN_PATHS)]
        more = f"; {flagged.blackholes - len(shown)} more" if flagged.blackholes > len(shown) else ""
        return run_rules.skipped_finding(
            "bandwidth", f"the mesh found {flagged.blackholes} path(s) that lose full-size frames ("
            + "; ".join(shown) + more + "): every collective across them would hang until the deadline",
            "fix the path MTU first (mesh.connect, blackhole), then run again")
    if flagged.cut_off:
        nodes = ", ".join(names.get(r, f"node rank {r}") for r in flagged.cut_off)
        return run_rules.skipped_finding(
            "bandwidth", f"the mesh found {nodes} cut off from its peers on every interface: every "
            "collective with it would wait for a connection until the deadline",
            "open the firewall between the nodes first (mesh.connect), then run again")
    return None


def stage_findings(result: BandwidthResult, names: _Names, flagged: tuple[str, ...] = ()) -> list[Finding]:
    if result.failed_stage is None:
        world = result.nnodes * result.nproc_per_node
        return [Finding(check=BW_STAGE, severity=PASS, nodes=tuple(range(result.nnodes)),
                        summary=f"every stage ran on {world} ranks ({result.nnodes} nodes x "
                        f"{result.nproc_per_node}); backend {result.backend}: {result.backend_reason}")]
    blamed, first = culprits(result.faults), first_culprit(result.faults)
    assert first is not None, "failed_stage is its first culprit's stage (bandwidth.faults.root_cause)"
    cut = cut_flow(result)
    measured = sum(len(s.rows) for s in result.sweeps)
    evidence = tuple(f"{names.rank(f)}, stage {f.stage}: {f.kind}: {f.detail}"
                     + (f"; in flight: {_in_flight_text(f.in_flight)}" if f.in_flight else "")
                     for f in result.faults)
    evidence += (f"kept: {measured} rows measured before it stopped",)
    evidence += tuple(f"flagged by the mesh: {p}" for p in flagged)
    if result.backend:
        evidence += (f"backend {result.backend}: {result.backend_reason}",)
    dark = unanswered_node(result)
    if dark is not None:
        return [_unanswered_finding(result, result.failed_stage, dark, evidence)]
    if cut is not None:
        a, b = sorted(cut)
        pair = f"{result.node_name(a)} and {result.node_name(b)}"
        return [Finding(check=BW_STAGE, severity=FAIL, nodes=(a, b),
                        summary=f"bandwidth stopped in the {STAGE_NAMES[result.failed_stage]} stage: "
                        f"the connection between {pair} was cut mid-transfer (closed or reset from "
                        f"{result.node_name(cut[1])}'s address while its workers ran): a path that cuts long flows",
                        evidence=evidence,
                        fix=f"look at what sits between {pair}: a firewall, NAT or load balancer with a limit on a "
                        "connection's bytes, age or idle time, or a full conntrack table; the mesh's short "
                        "connections pass it, a job's long ones do not", kind=BW_CUT_FLOW)]
    return [Finding(check=BW_STAGE, severity=FAIL, nodes=tuple(sorted({f.node for f in blamed})),
                    summary=f"bandwidth stopped in the {STAGE_NAMES[result.failed_stage]} stage: "
                    f"{names.rank(first)} {_what(first)}", evidence=evidence, fix=_fix(first, flagged))]


# A sweep's culprits whose errors name no one: a worker's failed connect or collective, a timeout
# (a worker that died, hung or went silent names its own node).
NAMING_NO_ONE = ("failed", "timeout")


def stop_explained(findings: list[Finding], result: BandwidthResult, before: list[Finding]) -> list[Finding]:
    """The sweep's stop (bw.stage, naming the nodes whose workers failed) as a symptom of the
    failures found before it, where those stop what the failed stage runs on (gloo for the workers'
    start and control plane, else the data backend) and hold nodes at fault, and the workers only
    failed or timed out: a gloo address peers cannot reach, a direction a firewall drops, a range
    short of ports stop the sweep's connects as they stop the job's. Its nodes stay (they met it);
    its cause is those failures' nodes."""
    stage = result.failed_stage
    if stage is None or any(f.kind not in NAMING_NO_ONE for f in culprits(result.faults)):
        return findings
    parts = {GLOO} if stage in ("start", "control") or result.backend != "nccl" else {NCCL_SOCKET, NCCL_RDMA}
    causes = tuple(sorted({r for f in before if f.severity == FAIL and f.check not in RUNS_OWN
                           and _stops(f, parts) for r in at_fault(f)}))
    if not causes:
        return findings
    return [replace(f, cause_nodes=causes) if f.check == BW_STAGE and f.severity == FAIL and not f.kind else f
            for f in findings]


def _stops(f: Finding, parts: set[str]) -> bool:
    impact = impact_of(f)
    return impact is not None and impact.effect == STOPS and bool(parts & set(impact.on))


def unanswered_node(result: BandwidthResult) -> int | None:
    """The node at one end of every connection left unanswered when the workers stopped short,
    where that tells it apart (two peers or more at the other ends) and every culprit only
    waited or failed (none died, hung or went silent: those name themselves). A firewall rule
    or a link that went dark after the mesh passed leaves each rank in a collective that never
    ends, its error a timeout that names no one; the kernel's connections name the node."""
    if any(f.kind not in ("timeout", "failed") for f in culprits(result.faults)):
        return None
    directions = unanswered_directions(result.links)
    if not directions:
        return None
    common = set.intersection(*({a, b} for a, b in directions))
    others = {n for d in directions for n in d} - common
    return common.pop() if len(common) == 1 and len(others) >= 2 else None


def _unanswered_finding(result: BandwidthResult, stage: str, node: int, evidence: tuple[str, ...]) -> Finding:
    directions = unanswered_directions(result.links)
    name = result.node_name(node)
    into = sorted(a for a, b in directions if b == node)
    lines = tuple(f"{result.node_name(a)} -> {result.node_name(b)}: {_unanswered_text(u)}"
                  for (a, b), u in sorted(directions.items()))
    summary = (f"bandwidth stopped in the {STAGE_NAMES[stage]} stage: {name} stopped answering: "
               f"every connection left unanswered runs to or from it ({len(into)} peer(s) waited on it"
               f"{', and it on its peers' if any(a == node for a, _ in directions) else ''}), after the mesh "
               "had passed")
    fix = (f"something on {name} changed after the mesh passed: a firewall rule (iptables -S, nft list ruleset: "
           "a security agent or a configuration push), its link or its routes; the job's connections to it "
           "would hang the same way. Fix it, or exclude the node")
    return Finding(check=BW_STAGE, severity=FAIL, nodes=(node,), summary=summary, evidence=lines + evidence, fix=fix,
                   kind=BW_UNANSWERED)


def _unanswered_text(u: Unanswered | None) -> str:
    if u is None:
        return "a new connection to its listening port, once the sweep stopped, was not answered"
    return (f"{u.connections} connection(s) unanswered"
            + (f" ({u.connecting} still connecting)" if u.connecting else "")
            + f", {u.timeouts} retransmission timeouts in a row")


def cut_flow(result: BandwidthResult) -> tuple[int, int] | None:
    """(node, peer) of the connection a path cut, where every fault is a worker's connection
    ended from a peer's address (no worker died, hung or failed otherwise). A worker that
    fails ends its process, whose other connections close in turn (reset where data was
    unread), so the cut is the one ended from a node whose workers all ran on; where each
    node's worker failed (the echoes came round), the one connection reset among closes. A
    middlebox's REJECT resets; a worker that ends closes. None where no fault says so."""
    owners = {address: links.node for links in result.links for address in links.addresses}
    ended: list[tuple[int, int, bool, float | None]] = []   # (node, the peer it names, whether reset, when)
    for f in result.faults:
        said = ENDED_BY.search(f.detail) if f.kind == "failed" else None
        peer = owners.get(said.group(1) or said.group(2)) if said else None
        if said is None or peer is None or peer == f.node:
            return None   # something else explains it
        ended.append((f.node, peer, said.group(2) is not None, f.at))
    faulted = {node for node, _, _, _ in ended}
    unfaulted = [(node, peer) for node, peer, _, _ in ended if peer not in faulted]
    resets = [(node, peer, at) for node, peer, reset, at in ended if reset]
    # A worker reset on the way fails and ends, resetting in turn a peer whose data it had not
    # read: that reset is an echo, from a node that was itself reset. The cut's came from a node
    # nobody reset; where the echoes came round to it too (a ring of resets), it came first.
    reset = {node for node, _, _ in resets}
    first = [(node, peer) for node, peer, _ in resets if peer not in reset]
    timed = sorted((at, node, peer) for node, peer, at in resets if at is not None)
    if unfaulted:
        # The live peer's worker ends in turn (the run stops), closing its other connections: the
        # cut among them is the one reset, the earliest where several were (campaign 63203 #60:
        # node3 reset node2's in the pairs stage, then closed node0's and node1's idle ones).
        cut = sorted((at is None, at or 0.0, node, peer) for node, peer, reset, at in ended
                     if reset and peer not in faulted)
        return (cut[0][2], cut[0][3]) if cut else unfaulted[0]
    if len(resets) == 1:
        return resets[0][:2]
    if len(first) == 1:
        return first[0]
    return timed[0][1:] if resets and len(timed) == len(resets) else None


def _what(f: Fault) -> str:
    if f.kind == "timeout":
        # At the deadline the sweep is inside a collective that never completed: say which.
        doing = f"{_in_flight_text(f.in_flight)}, which" if f.in_flight else "its stage, which"
        return f"was in {doing} had not completed at the phase's deadline"
    return {"died": "died", "stuck": "hung", "silent": "never reported",
            "stopped": "was stopped"}.get(f.kind, "failed") + f" ({f.detail})"


def _in_flight_text(f: InFlight) -> str:
    if f.op == "new_group":
        return f"the stage's process group setup among {_ranks_text(f.ranks)}"
    size = f" of {size_words(f.size)}" if f.size else ""
    return f"{f.op}{size} among {_ranks_text(f.ranks)}"


def _ranks_text(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks_text(ranks)}"


def _fix(f: Fault, flagged: tuple[str, ...]) -> str:
    if f.kind == "timeout":
        return _timeout_fix(flagged)
    if f.kind != "failed":
        return FIXES[f.kind]
    said = next((fix for words, fix in NCCL_WARN_FIXES if f"NCCL WARN {words}" in f.detail), None)
    return said or FIXES.get(f.stage, FIXES["sweep"])


def _timeout_fix(flagged: tuple[str, ...]) -> str:
    """A sweep within its budget that meets the deadline is stuck in a collective, not short
    of time (the budget stops a slow sweep early): the cause is on the path, not in --timeout."""
    if flagged:
        return (f"the mesh flagged {len(flagged)} path(s) between these nodes (the evidence lists them): a "
                "collective across one waits until the deadline whatever --timeout is; fix them first "
                "(mesh.connect)")
    return ("the collective in flight hung: the mesh flagged no path (where it was skipped, run it: it "
            "tests every path with full-size frames), so look at the ranks in flight: a stopped or overloaded "
            "process, their link (bw.pair, ethtool -S for errors), the "
            "interface they use (NCCL_DEBUG=INFO names the peer waited on); a bigger --timeout helps only "
            "if the sizes before it already took seconds each")


# --- bw.wrong -------------------------------------------------------------------------------

def wrong_findings(result: BandwidthResult, names: _Names) -> list[Finding]:
    checked = [(s, r, r.wrong) for s in result.sweeps for r in s.rows if r.wrong is not None]
    if not checked:
        return []
    bad = [(s, r) for s, r, wrong in checked if wrong]
    if not bad:
        return [Finding(check=BW_WRONG, severity=PASS, nodes=tuple(range(result.nnodes)),
                        summary=f"0 wrong elements in {len(checked)} checked results")]
    nproc = result.nproc_per_node
    nodes = tuple(sorted({rank // nproc for _, r in bad for rank in r.wrong_ranks}))
    evidence = tuple(f"{s.op} {s.stage} {r.size} B: {r.wrong} wrong on rank(s) "
                     f"{', '.join(str(k) for k in r.wrong_ranks)}" for s, r in bad)
    return [Finding(check=BW_WRONG, severity=FAIL, nodes=nodes,
                    summary=f"{sum(wrong for _, _, wrong in checked)} corrupted elements received on "
                    f"{', '.join(names.node(n) for n in nodes)}", evidence=evidence,
                    fix="data changed in transit or on the device: check GPU memory errors (nvidia-smi "
                    "-q -d ECC, dcgmi diag), NIC firmware and cabling, then rerun with -c 1")]


# --- bw.busbw -------------------------------------------------------------------------------

def busbw_findings(result: BandwidthResult, names: _Names, line_rate_gbps: dict[int, float | None],
                   expect_busbw: float | None, troubled: list[int] | None = None) -> list[Finding]:
    """The all-rank sweeps' plateau: judged against --expect-busbw and the NICs' line rate;
    a pass names it with its range and sizes, the latency and per-step figures beside it.
    A cluster-wide figure names no node: bw.pair, bw.straggler and host.busy do, where their
    evidence isolates one."""
    heads = [h for h in result.headlines if h.stage == "all"]
    if not heads:
        return []
    if result.failed_stage == "all":
        return [_unfinished(result, heads)]
    findings = [_expect_finding(result, h, expect_busbw) for h in heads] if expect_busbw else []
    line = _line_rate_finding(result, names, line_rate_gbps)
    findings += [line] if line else []
    if not any(f.severity != PASS for f in findings):
        best = max(heads, key=lambda h: h.plateau_busbw)
        findings = [Finding(check=BW_BUSBW, severity=PASS, nodes=tuple(range(result.nnodes)),
                            summary=_headline_text(best, result.backend) + _trust(best, result, names, troubled),
                            evidence=_cut_short(result, best) + tuple(f.summary for f in findings) + _figures(result))]
    return findings


def _unfinished(result: BandwidthResult, heads: list[Headline]) -> Finding:
    """A sweep that a fault stopped measured its small sizes only: what it reached is no
    plateau, and no figure passes from it (a 16 KB/s "plateau" at 64 bytes once did)."""
    sweep = _sweep_of(result, heads[0])
    return Finding(check=BW_BUSBW, severity=WARN, nodes=(),
                   summary=f"no plateau to judge: the sweep across all ranks stopped at "
                   f"{size_words(max(r.size for r in sweep.rows))} (bw.stage says why)", evidence=_largest_rows(sweep),
                   fix="mend what bw.stage names and run again: the busbw a job gets is measured at its large sizes")


def _trust(h: Headline, result: BandwidthResult, names: _Names, troubled: list[int] | None) -> str:
    """What the figure was measured beside: the busy processes seen (host.busy) and the links
    that lost segments or counted errors (link.health), the likely causes of a noisy one.
    troubled: the nodes link.health names (None: no node's counters were read)."""
    busy = sorted({p.node for p in result.busy})
    causes = []
    if busy:
        # By hostname: nodes on one machine see the same processes (busy_findings says them once).
        causes.append(f"{', '.join(dict.fromkeys(result.hostname(n) for n in busy))} ran other work (host.busy)")
    if troubled:
        nodes = ", ".join(dict.fromkeys(names.node(n) for n in troubled))
        causes.append(f"the links of {nodes} lost segments, went down or counted errors (link.health)")
    if causes:
        return "; measured while " + " and ".join(causes)
    if not h.noisy:
        return ""
    counted = " and no lossy link or link error was seen (link.health)" if troubled is not None else ""
    return (f"; no busy process was seen on the nodes (host.busy){counted}: look for load netcheck cannot see, "
            "other containers or VMs on the machines, traffic on a shared link")


def _cut_short(result: BandwidthResult, h: Headline) -> tuple[str, ...]:
    """A line where the budget ended the sweep while busbw still rose: the plateau is a floor."""
    sweep = _sweep_of(result, h)
    if not sweep.skipped or not h.rising:
        return ()
    skipped = sizes_text(sweep.skipped[0], sweep.skipped[-1])
    return (f"the sweep reached {size_words(h.plateau_to)} in --bw-budget ({skipped} "
            "skipped) while busbw still rose: a larger --bw-budget measures further",)


def _sweep_of(result: BandwidthResult, h: Headline) -> Sweep:
    return next(s for s in result.sweeps if (s.stage, s.op) == (h.stage, h.op))


def _headline_text(h: Headline, backend: str) -> str:
    text = f"{h.op} busbw plateau over {h.ranks} ranks ({backend}): {plateau_text(h)}"
    if h.latency_from_us is not None and h.latency_to_us is not None:   # measured together
        lo, hi = h.latency_sizes
        text += f"; latency {time_text(h.latency_from_us)} per op at {size_words(lo)}"
        text += f", {time_text(h.latency_to_us)} at {size_words(hi)}" if hi != lo else ""
    return text


def _figures(result: BandwidthResult) -> tuple[str, ...]:
    """The other stages' plateaus (inside a node, one rank per node), and the per-step cost of
    a gradient all_reduce in each stage, where --model-params asked for it."""
    lines = tuple(f"{STAGE_TITLES[h.stage]}: {_headline_text(h, result.backend)}"
                  for h in result.headlines if h.stage != "all")
    return lines + tuple(step_text(h, result.nnodes, result.nproc_per_node)
                         for h in result.headlines if h.step_s is not None)


def _expect_finding(result: BandwidthResult, h: Headline, expect: float) -> Finding:
    summary = (f"{h.op} busbw plateau over {h.ranks} ranks: {plateau_text(h)}; "
               f"{100 * h.plateau_busbw / expect:.0f}% of --expect-busbw {expect:g} GB/s")
    if h.plateau_busbw >= expect:
        return Finding(check=BW_BUSBW, severity=PASS, nodes=tuple(range(result.nnodes)), summary=summary)
    return Finding(check=BW_BUSBW, severity=FAIL, nodes=(), summary=summary,
                   evidence=_largest_rows(_sweep_of(result, h)) + _cut_short(result, h)
                   + _figures(result),
                   fix="a figure of the whole cluster: find the slow link (bw.pair, nic.speed, the NCCL_SOCKET_IFNAME "
                   "in use) or the busy node (host.busy) before blaming the job; lower --expect-busbw only if the "
                   "hardware cannot do more")


def _line_rate_finding(result: BandwidthResult, names: _Names,
                       line_rate_gbps: dict[int, float | None]) -> Finding | None:
    """busbw over the network against the slowest used NIC (busbw is comparable to it)."""
    if result.nnodes < 2:
        return None
    sweep = next((s for s in result.sweeps if s.stage == "inter" and s.rows), None) \
        or next(s for s in result.sweeps if s.stage == "all" and s.rows)
    known = {n: r for n, r in line_rate_gbps.items() if r}
    if not known:
        return None
    slowest = min(known, key=known.__getitem__)
    line = known[slowest] / 8  # Gbit/s -> GB/s
    efficiency = peak_busbw(sweep) / line
    summary = (f"{sweep.op} busbw over the network peaks at {rate_text(peak_busbw(sweep))}, "
               f"{100 * efficiency:.0f}% of the slowest NIC's line rate ({names.node(slowest)}: "
               f"{known[slowest]:g} Gb/s = {rate_text(line)})")
    if efficiency >= BW_LINE_RATE_WARN:
        return Finding(check=BW_BUSBW, severity=PASS, nodes=tuple(sorted(known)), summary=summary)
    if result.backend != "nccl":
        # gloo on CPUs is bound by the CPUs far below any NIC's rate: a number, not a warning.
        return Finding(check=BW_BUSBW, severity=PASS, nodes=tuple(sorted(known)),
                       summary=summary + " (gloo: far below NCCL's)")
    return Finding(check=BW_BUSBW, severity=WARN, nodes=(), summary=summary, evidence=_largest_rows(sweep),
                   fix="traffic may take a slower interface than the one rated (check NCCL_SOCKET_IFNAME "
                   "against nic.route), or the link negotiated down: compare ethtool on both ends")


def _largest_rows(sweep: Sweep) -> tuple[str, ...]:
    return tuple(f"{r.size} B: time {r.time_us:.1f} us, algbw {rate_text(r.algbw)}, busbw {rate_text(r.busbw)}"
                 for r in sweep.rows[-3:])


# --- bw.pair --------------------------------------------------------------------------------

def best_pairs(result: BandwidthResult) -> dict[int, float]:
    """Each measured node's best pair: its own link's speed when its peers are healthy."""
    return {n: max(p.busbw for p in result.pairs if n in (p.a, p.b)) for n in range(result.nnodes)
            if any(n in (p.a, p.b) for p in result.pairs)}


def pair_yardstick(result: BandwidthResult) -> float:
    """What bw.pair measures a node against: the median node's best pair (its bound is
    BW_PAIR_SLOW of it). The HTML heatmap's scale reads against it too. Needs result.pairs."""
    return statistics.median(best_pairs(result).values())


def pair_findings(result: BandwidthResult, names: _Names) -> list[Finding]:
    if not result.pairs:
        return []
    evidence = tuple(f"{names.node(p.a)} <-> {names.node(p.b)}: {rate_text(p.busbw)} each way"
                     for p in result.pairs)
    everyone = tuple(range(result.nnodes))
    if result.nnodes < 3:
        return [Finding(check=BW_PAIR, severity=PASS, nodes=everyone,
                        summary=f"{len(result.pairs)} node pair measured; with two "
                        "nodes a slow node cannot be told from its peer", evidence=evidence)]
    best = best_pairs(result)
    median = statistics.median(best.values())
    slow = tuple(n for n, b in sorted(best.items()) if b < BW_PAIR_SLOW * median)
    noise = pair_noise(result)
    sure = tuple(n for n in slow if best[n] < BW_PAIR_SLOW * median / (1 + noise))
    size = max(p.size for p in result.pairs)
    swept = max((r.size for s in result.sweeps for r in s.rows), default=0)
    if size < BW_LATENCY_MAXBYTES and swept < BW_LATENCY_MAXBYTES:
        # The pairs are sized from the sweep's pace: a sweep slowed to a crawl at small sizes (a
        # lossy link's retransmission waits, a loaded CPU) leaves them a few hundred bytes, whose
        # times are latency; a node slow there is not slow in bandwidth. A slow link's sweep
        # reaches its large sizes, and its pairs, however small, are paced by the link.
        behind = "; ".join(f"{names.node(n)} at best {rate_text(best[n])}" for n in slow)
        return [Finding(check=BW_PAIR, severity=WARN, nodes=everyone,
                        summary=f"{len(result.pairs)} node pairs measured at {size_words(size)} only, "
                        f"sized from a sweep that stopped at {size_words(swept)} (the budget left no more): a size "
                        "that times latency, not bandwidth; no node is judged slow from them",
                        evidence=evidence + ((f"slowest at that size: {behind}",) if behind else ()),
                        fix="give the sweep more time (--bw-budget) once what slowed it is fixed (link.health, "
                        "host.busy name a lossy link or a busy CPU)", kind=BW_PAIR_TOO_SMALL)]
    if not slow:
        pairs_median = statistics.median(p.busbw for p in result.pairs)
        return [Finding(check=BW_PAIR, severity=PASS, nodes=everyone,
                        summary=f"{len(result.pairs)} node pairs, median {rate_text(pairs_median)}; "
                        f"every node's best pair within {100 * BW_PAIR_SLOW:.0f}% of the median node's best "
                        f"({rate_text(median)})", evidence=evidence)]
    findings = []
    if sure:
        detail = ", ".join(f"{names.node(n)} at best {rate_text(best[n])}" for n in sure)
        findings.append(Finding(check=BW_PAIR, severity=FAIL, nodes=sure,
                                summary=f"{detail}; the median node's best pair reaches "
                                f"{rate_text(median)}", evidence=evidence,
                                fix="every collective runs at the slowest node's pace: "
                                "check that node's link speed and errors (ethtool -S), its cabling and switch port, "
                                "and the interface its traffic takes (nic.route); or exclude it"))
    if doubtful := tuple(n for n in slow if n not in sure):
        detail = ", ".join(f"{names.node(n)} at best {rate_text(best[n])}" for n in doubtful)
        findings.append(Finding(check=BW_PAIR, severity=WARN, nodes=doubtful,
                                summary=f"{detail}, below half the median node's best pair "
                                f"({rate_text(median)}), while this run's own figures moved {noise:.0%} as they were "
                                "measured: slow, but not beyond what the measurement's noise spans", evidence=evidence,
                                fix="measure again once the machines are quiet (host.busy and bw.busbw say what moved "
                                "the figures); a node slow again is slow", kind=BW_PAIR_NOISY))
    return findings


def pair_noise(result: BandwidthResult) -> float:
    """How far this run's figures moved while measured (the widest spread of a sweep's plateau,
    where noisy): a node must fall this much further below the median to be slow beyond doubt.
    0 where the figures held still (every slow pair then judged as measured)."""
    return max((h.spread for h in result.headlines if h.noisy), default=0.0)


# --- bw.straggler ---------------------------------------------------------------------------

def straggler_findings(result: BandwidthResult, names: _Names) -> list[Finding]:
    findings = [f for s in result.sweeps if s.stage == "all" for f in _slow_ranks(s, names)]
    findings += [f for s in result.sweeps if s.stage == "intra" for f in _slow_intra(s, names)]
    if findings or not any(s.rank_times for s in result.sweeps):
        return findings
    return [Finding(check=BW_STRAGGLER, severity=PASS, nodes=tuple(range(result.nnodes)),
                    summary="no rank or node ran more than "
                    f"{BW_STRAGGLER_RATIO:g}x slower than the median")]


def _slow_ranks(sweep: Sweep, names: _Names) -> list[Finding]:
    if len(sweep.rank_times) < 2:
        return []
    median = statistics.median(t.time_us for t in sweep.rank_times)
    slow = [t for t in sweep.rank_times if t.time_us > BW_STRAGGLER_RATIO * median]
    if not slow:
        return []
    return [Finding(check=BW_STRAGGLER, severity=WARN, nodes=tuple(sorted({t.node for t in slow})),
                    summary=f"{len(slow)} rank(s) took over {BW_STRAGGLER_RATIO:g}x the median time in "
                    f"{sweep.op} at {sweep.rows[-1].size} B",
                    evidence=tuple(f"rank {t.rank} ({names.node(t.node)}): {t.time_us:.1f} us, median "
                                   f"{median:.1f} us" for t in slow),
                    fix="a slow rank holds every collective back: check its CPU/GPU load, clocks "
                    "and NUMA placement")]


def _slow_intra(sweep: Sweep, names: _Names) -> list[Finding]:
    if len(sweep.node_busbw) < 2:
        return []
    median = statistics.median(sweep.node_busbw.values())
    slow = {int(n): b for n, b in sweep.node_busbw.items() if b < BW_PAIR_SLOW * median}
    if not slow:
        return []
    return [Finding(check=BW_STRAGGLER, severity=WARN, nodes=tuple(sorted(slow)),
                    summary=f"intra-node {sweep.op} busbw on {', '.join(names.node(n) for n in sorted(slow))} "
                    f"is below {100 * BW_PAIR_SLOW:.0f}% of the median node ({rate_text(median)})",
                    evidence=tuple(f"{names.node(int(n))}: {rate_text(b)}"
                                   for n, b in sorted(sweep.node_busbw.items())),
                    fix="inside that node the ranks talk slowly: check GPU topology (nvidia-smi topo -m), "
                    "PCIe/NVLink state, /dev/shm size and CPU load")]


# --- host.busy ------------------------------------------------------------------------------

def busy_findings(result: BandwidthResult, names: _Names) -> list[Finding]:
    """A node whose CPUs another process used while the workers ran: the likeliest cause of a
    slow rank or a noisy figure, named before the job pays for it. None said where no node
    looked (the phase stopped before its workers ran)."""
    by_node: dict[int, list[BusyProcess]] = {}
    for p in result.busy:
        by_node.setdefault(p.node, []).append(p)
    # Nodes on one machine (several netcheck nodes on a host) see the same processes: said once.
    by_host: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for node, procs in sorted(by_node.items()):
        by_host.setdefault((result.hostname(node), tuple(_busy_text(p) for p in procs)), []).append(node)
    return [Finding(check=HOST_BUSY, severity=WARN, nodes=tuple(nodes), summary=f"{host}: {lines[0]}"
                    + (f" and {len(lines) - 1} more process(es)" if len(lines) > 1 else "")
                    + f"; {'they' if len(lines) > 1 else 'it'} {_what_they_used(by_node[nodes[0]])} while bandwidth "
                    "was measured: the figures are affected",
                    evidence=lines,
                    fix="stop it if it is a leftover of an earlier job (kill the pid), or move it, or exclude the "
                    "node: every collective waits for that node's slowest rank")
            for (host, lines), nodes in by_host.items()]


def _busy_text(p: BusyProcess) -> str:
    gpus = f", holding GPU {', '.join(map(str, p.gpus))}" if p.gpus else ""
    return f"pid {p.pid} ({p.user}) `{p.command}` at {p.cpu_share:.0%} of a CPU{gpus}"


def _what_they_used(procs: list[BusyProcess]) -> str:
    gpus = any(p.gpus for p in procs)
    cpus = any(not p.gpus for p in procs)
    return " and ".join(["used the node's CPUs"] * cpus + ["held its GPUs"] * gpus)

