"""A job that hangs mid-run (job.hang): what its ranks' flight recorders say about who is
behind, who issued something else, and who left no trace. Facts in (`HangView`), findings
out; pure.

Per process group, each rank's last collective: the wavefront is the furthest sequence id
any rank issued (the ranks there wait in it); a rank whose last is below it never issued it
(behind); ranks whose collective at a sequence id they share differs in op, sizes or dtype
are out of step (a desync). A rank with no trace at all is named apart: it may have died,
or never recorded.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable

from netcheck.core.hangrecords import Collective, HangView, RankTrace, Refused
from netcheck.core.model import FAIL, PASS, WARN, Finding
from netcheck.rules.registry import (
    HANG_BEHIND,
    HANG_DESYNC,
    HANG_NO_DATA,
    HANG_STUCK,
    JOB_FOREIGN_VALUE,
    JOB_HANG,
    JOB_HOSTILE,
    JOB_HOSTILE_VALUE,
)

SHOWN_RANKS = 16
DEFAULT_GROUP = "0"   # the default process group's name in every dump (its description: default_pg)
BEHIND_FIX = ("the rank(s) behind stopped issuing collectives: their last line and stack say where (a dataloader "
              "stall, an exception caught and swallowed, a branch the other ranks did not take); the others wait "
              "in the collective until the watchdog ends the job (10 min with NCCL, 30 with gloo)")
DESYNC_FIX = ("make the call identical on every rank: a size that depends on the rank's own data, a dtype cast "
              "on one path, or a different collective on another code path")
STUCK_FIX = ("every rank issued the collective and none completed it: not a rank behind but the transport; run "
             "netcheck's preflight on these nodes (mesh.connect, nic.*, NCCL_SOCKET_IFNAME) and look at "
             "NCCL_DEBUG=INFO")


def hang_findings(view: HangView) -> list[Finding]:
    """The refused files (job.hostile), then per group what stops it (job.hang), and the
    ranks with no trace."""
    findings = [_refused_finding(r) for r in view.refused]
    traced = _one_per_rank(view.traces)
    if not traced:
        return findings + [Finding(check=JOB_HANG, severity=WARN, nodes=(),
                                   summary=f"no flight-recorder trace read from {view.source}",
                                   evidence=_ignored(view), fix=_no_data_fix(), kind=HANG_NO_DATA)]
    groups = _by_group(traced)
    problems = [f for name, ranks in sorted(groups.items()) for f in _group_findings(name, ranks, traced)]
    missing = _missing(view, traced)
    if missing:
        # With the traced ranks in step, the silent ones are all that is left to blame: they
        # are where the others wait. Beside a rank behind, they are named apart.
        problems.append(Finding(check=JOB_HANG, severity=WARN if problems else FAIL, nodes=tuple(missing),
                                summary=f"no trace from rank(s) {_ranks(missing)} of {_world(view, traced)}: no dump, "
                                "no answer, or the process is gone" + ("" if problems else "; the traced ranks "
                                                                                "are in step, waiting for them"),
                                evidence=(f"traced: rank(s) {_ranks(traced)}",), fix=_no_data_fix(), kind=HANG_NO_DATA))
    if not problems:
        problems = [Finding(check=JOB_HANG, severity=PASS, nodes=tuple(sorted(traced)),
                            summary=f"every traced rank ({len(traced)}) issued the "
                            f"same last collective in each of {len(groups)} process group(s): none behind or "
                            "out of step",
                            evidence=tuple(_group_line(n, r, traced) for n, r in sorted(groups.items())))]
    first = problems[0]
    return findings + [dataclasses.replace(first, evidence=first.evidence + _ignored(view))] + problems[1:]


def _ignored(view: HangView) -> tuple[str, ...]:
    """The files beside the dumps, said once: a log or a marker is no dump, and no hostile one."""
    if not view.ignored:
        return ()
    named = f"{view.prefix}<rank>" if view.prefix else "<rank>"
    return (f"{view.ignored} other file(s) in {view.source} not read: not named {named} as the dumps are "
            "(--prefix names another prefix)",)


def unread_finding(why: str) -> Finding:
    """--traces names no folder of dumps that reads (missing, not a folder, unreadable): `why`."""
    return Finding(check=JOB_HANG, severity=WARN, nodes=(), summary=f"no trace read: {why}",
                   fix="give --traces the folder the job's dumps are in", kind=HANG_NO_DATA)


def _one_per_rank(traces: tuple[RankTrace, ...]) -> dict[int, RankTrace]:
    """A rank's first trace (a pickle dump sorts before its JSON twin and carries frames)."""
    kept: dict[int, RankTrace] = {}
    for t in traces:
        kept.setdefault(t.rank, t)
    return kept


def _by_group(traced: dict[int, RankTrace]) -> dict[str, dict[int, tuple[Collective, ...]]]:
    """group name -> rank -> its last collectives there (oldest first)."""
    groups: dict[str, dict[int, tuple[Collective, ...]]] = defaultdict(dict)
    for rank, trace in traced.items():
        for tail in trace.groups:
            if tail.last:
                groups[tail.group][rank] = tail.last
    return groups


def _group_findings(name: str, tails: dict[int, tuple[Collective, ...]],
                    traced: dict[int, RankTrace]) -> list[Finding]:
    label = _group_label(name, traced)
    front = max(t[-1].seq for t in tails.values())
    at_front = {r: t[-1] for r, t in tails.items() if t[-1].seq == front}
    behind = {r: t[-1] for r, t in tails.items() if t[-1].seq < front}
    findings = []
    desync = _first_desync(tails)
    if desync:
        seq, sides = desync
        ranks = tuple(sorted(r for rs in sides.values() for r in rs))
        findings.append(Finding(check=JOB_HANG, severity=FAIL, nodes=ranks,
                                summary=f"ranks issued different collectives as #{seq} of {label}: "
                                + "; ".join(f"rank(s) {_ranks(rs)} {_call(c)}" for c, rs in sides.items()),
                                evidence=tuple(f"rank {r} ({_host(traced, r)}): {_call(c)} at {_line(traced, r, c)}"
                                               for c, rs in sides.items() for r in rs),
                                fix=DESYNC_FIX, kind=HANG_DESYNC))
    if behind:
        first, wait = next(iter(at_front.items()))
        findings.append(Finding(
            check=JOB_HANG, severity=FAIL, nodes=tuple(sorted(behind)),
            summary=f"rank(s) {_ranks(behind)} never issued {wait.op} #{front} of {label}, which rank(s) "
            f"{_ranks(at_front)} wait in ({_line(traced, first, wait)})",
            evidence=tuple(f"rank {r} ({_host(traced, r)}): last issued #{c.seq} {c.op}"
                           + (f" at {c.where}" if c.where else "")
                           + (f"; its stack: {traced[r].stack}" if traced[r].stack else "")
                           for r, c in sorted(behind.items())), fix=BEHIND_FIX, kind=HANG_BEHIND))
    elif not desync and len(at_front) > 1 and all(c.completed is False for c in at_front.values()):
        first, wait = next(iter(at_front.items()))
        findings.append(Finding(check=JOB_HANG, severity=FAIL, nodes=tuple(sorted(at_front)),
                                summary=f"every rank of {label} ({_ranks(at_front)}) issued {wait.op} #{front} "
                                f"({_line(traced, first, wait)}) and none completed it", fix=STUCK_FIX,
                                kind=HANG_STUCK))
    return findings


def _first_desync(tails: dict[int, tuple[Collective, ...]]) -> tuple[int, dict[Collective, list[int]]] | None:
    """The first sequence id two ranks both issued with a different op, sizes or dtype:
    (that id, each distinct call -> the ranks that made it)."""
    by_seq: dict[int, dict[tuple[str, str, str], list[tuple[int, Collective]]]] = defaultdict(lambda: defaultdict(list))
    for rank, tail in tails.items():
        for c in tail:
            by_seq[c.seq][(c.op, c.sizes, c.dtypes)].append((rank, c))
    for seq in sorted(by_seq):
        calls = by_seq[seq]
        if len(calls) > 1:
            return seq, {made[0][1]: sorted(r for r, _ in made) for made in calls.values()}
    return None


def _missing(view: HangView, traced: dict[int, RankTrace]) -> list[int]:
    listed = {r for t in traced.values() for g in t.groups for r in g.ranks}
    world = range(_world(view, traced))
    return sorted((set(world) | listed) - set(traced))


def _world(view: HangView, traced: dict[int, RankTrace]) -> int:
    return view.world_size or max(traced) + 1


def _group_label(name: str, traced: dict[int, RankTrace]) -> str:
    desc = next((g.desc for t in traced.values() for g in t.groups if g.group == name and g.desc), "")
    return f"process group {name}" + (f" ({desc})" if desc and desc != "undefined" else "")


def _group_line(name: str, tails: dict[int, tuple[Collective, ...]], traced: dict[int, RankTrace]) -> str:
    last = next(iter(tails.values()))[-1]
    rank = next(iter(tails))
    return (f"{_group_label(name, traced)}: #{last.seq} {last.op} at {_line(traced, rank, last)} "
            f"on rank(s) {_ranks(tails)}")


def _line(traced: dict[int, RankTrace], rank: int, c: Collective) -> str:
    """Where the rank called it: the recorder's frame (dumps), else its stack (live)."""
    return c.where or traced[rank].stack or "line unknown"


def _call(c: Collective) -> str:
    return f"{c.op} {c.sizes} {c.dtypes}"


def _host(traced: dict[int, RankTrace], rank: int) -> str:
    return traced[rank].host or traced[rank].source


def _ranks(ranks: Iterable[int]) -> str:
    shown = sorted(ranks)
    more = f", ... ({len(shown)} in all)" if len(shown) > SHOWN_RANKS else ""
    return ", ".join(map(str, shown[:SHOWN_RANKS])) + more


def _refused_finding(r: Refused) -> Finding:
    return Finding(check=JOB_HOSTILE, severity=FAIL, nodes=(),
                   summary=f"the trace file {r.source} was refused, not loaded: {r.reason}",
                   fix="a flight-recorder dump is plain data: a pickle asking for code was written by something else "
                   "(do not load it with pickle, or torch's fr_trace); a truncated or garbled one was cut off "
                   "while written (the rank died mid-dump): its rank counts as without a trace",
                   kind=JOB_HOSTILE_VALUE if r.hostile else JOB_FOREIGN_VALUE)


def _no_data_fix() -> str:
    return ("a rank without a trace died before it could dump (its node's logs, dmesg) or ran without the flight "
            "recorder: set TORCH_FR_BUFFER_SIZE=2000 (older torch: TORCH_NCCL_TRACE_BUFFER_SIZE) and, with NCCL, "
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1 in the job's environment (env.flight_recorder checks them before launch)")
