"""A job that hangs now (job.*): what its store, torchrun's rendezvous state and NCCL's RAS
say about who is missing. Facts in (`JobView`, read by `netcheck inspect`), findings out."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from netcheck.core.jobrecords import JobView, NodeDesc, RasView, RendezvousView, RoundKeys, RoundMember, RunState
from netcheck.core.model import FAIL, PASS, WARN, Finding
from netcheck.rules.registry import (
    JOB_DEAD,
    JOB_EVICTED,
    JOB_FOREIGN_VALUE,
    JOB_HEARTBEAT,
    JOB_HOSTILE,
    JOB_HOSTILE_VALUE,
    JOB_LATE,
    JOB_NCCL,
    JOB_NO_RDZV,
    JOB_NO_SUCH_RUN,
    JOB_NOT_STARTED,
    JOB_RANKS,
    JOB_RAS_ERRORS,
    JOB_RAS_MISSING,
    JOB_RDZV,
    JOB_STORE,
    JOB_WAITING,
    JOB_WAITING_NEXT,
)

KEEP_ALIVE_INTERVAL = 5.0    # torchrun's defaults (dynamic_rendezvous.create_handler): a node
KEEP_ALIVE_MAX_ATTEMPTS = 3  # without a heartbeat for interval x attempts is dead to the others

DEAD_AFTER = KEEP_ALIVE_INTERVAL * KEEP_ALIVE_MAX_ATTEMPTS   # torchrun's own rule (dynamic_rendezvous)
# An agent beats every keep-alive interval (it writes when its last beat is that old, on a timer
# of that period); past it, plus a little for the write itself and a busy agent, a beat was missed.
LATE_GRACE = 2.0
LATE_AFTER = KEEP_ALIVE_INTERVAL + LATE_GRACE
MAX_KEYS_SHOWN = 40


def job_findings(view: JobView) -> list[Finding]:
    if view.store_error:
        return [store_finding(view)] + ras_findings(view.ras)
    return ([store_finding(view)] + hostile_findings(view.runs) + rendezvous_findings(view)
            + eviction_findings(view) + heartbeat_findings(view) + ranks_findings(view) + ras_findings(view.ras))


def store_finding(view: JobView) -> Finding:
    if view.store_error:
        return Finding(check=JOB_STORE, severity=FAIL, nodes=(),
                       summary=f"no TCPStore answers at {view.endpoint}: {view.store_error}",
                       fix="the job's rank 0 (under torchrun: the agent on the --rdzv-endpoint node) is not "
                       "running there, or this is not the job's endpoint: check MASTER_ADDR/MASTER_PORT "
                       "or --rdzv-endpoint, and run `netcheck probe` to it")
    if view.keys is None:
        return Finding(check=JOB_STORE, severity=PASS, nodes=(),
                       summary=f"the job's store at {view.endpoint} answers (this torch cannot "
                       "list its keys: torch 2.13 or later can)")
    shown = tuple(view.keys[:MAX_KEYS_SHOWN]) + ((f"... and {len(view.keys) - MAX_KEYS_SHOWN} more",)
                                                  if len(view.keys) > MAX_KEYS_SHOWN else ())
    hidden = f" (and {view.hidden_keys} it counts but does not list)" if view.hidden_keys else ""
    return Finding(check=JOB_STORE, severity=PASS, nodes=(),
                   summary=f"the job's store at {view.endpoint} answers: {len(view.keys)} "
                   f"key(s){hidden}", evidence=shown)


def hostile_findings(runs: tuple[RunState, ...]) -> list[Finding]:
    return [Finding(check=JOB_HOSTILE, severity=FAIL, nodes=(),
                    summary=f"the value under torch.rendezvous.{r.run_id} was refused, not "
                    f"loaded: {r.refused}", fix="someone wrote a hostile or foreign value to the job's store: "
                    "the store has no authentication, so keep its port on a private network; torchrun "
                    "itself will fail to read it too", kind=JOB_HOSTILE_VALUE if r.hostile else JOB_FOREIGN_VALUE)
            for r in runs if r.refused]


def rendezvous_findings(view: JobView) -> list[Finding]:
    if not view.runs:
        return _no_rendezvous(view)
    return [f for run in view.runs if not run.refused for f in _round_findings(run.run_id, run.state, view)]


def _no_rendezvous(view: JobView) -> list[Finding]:
    others = view.run_ids
    if view.run_id and others:
        return [Finding(check=JOB_RDZV, severity=FAIL, nodes=(),
                        summary=f"no rendezvous for run id {view.run_id!r} in this store; it holds "
                        f"run id(s) {', '.join(map(repr, others))}", fix="give --rdzv-id the job's own "
                        "(torchrun's --rdzv-id, TORCHELASTIC_RUN_ID), or leave it out to read every run",
                        kind=JOB_NO_SUCH_RUN)]
    if view.arrived_ranks or view.keys is None:
        return []  # a static rendezvous (job.ranks speaks), or keys unknown
    what = f" for run id {view.run_id!r}" if view.run_id else ""
    return [Finding(check=JOB_RDZV, severity=WARN, nodes=(),
                    summary=f"the store holds no torchrun rendezvous{what} and no process group "
                    "keys: nothing has arrived yet, or this is not a torch job's store",
                    fix="check that the endpoint is the job's (--rdzv-endpoint, MASTER_ADDR:MASTER_PORT)",
                    kind=JOB_NO_RDZV)]


def _round_findings(run_id: str, state: RendezvousView | None, view: JobView) -> list[Finding]:
    if state is None:
        return [Finding(check=JOB_RDZV, severity=WARN, nodes=(),
                        summary=f"run {run_id!r}: the rendezvous has no round yet (the backend "
                        "is set up, no node has joined)", fix="start the job's nodes", kind=JOB_NOT_STARTED)]
    joined = len(state.participants)
    evidence = tuple(f"rank {rank}: {node}" for node, rank in sorted(state.participants, key=lambda p: p[1]))
    evidence += tuple(f"waiting for the next round: {node}" for node in state.wait_list)
    evidence += tuple(f"spare (beyond max nodes): {node}" for node in state.redundancy_list)
    if state.complete:
        evidence += tuple(f"round {r.round}'s agent keys {r.error}" for r in view.rounds
                          if r.run_id == run_id and r.error)
        findings = [Finding(check=JOB_RDZV, severity=PASS, nodes=(),
                            summary=f"run {run_id!r}: round {state.round} is complete with "
                            f"{joined} node(s){', closed' if state.closed else ''}", evidence=evidence)]
        if state.wait_list:
            findings.append(Finding(
                check=JOB_RDZV, severity=WARN, nodes=(),
                summary=f"run {run_id!r}: {len(state.wait_list)} node(s) wait for the next round: "
                f"{', '.join(map(str, state.wait_list))}", evidence=evidence, fix="they joined after round "
                f"{state.round} closed; torchrun starts a new round only when a member fails or restarts",
                kind=JOB_WAITING_NEXT))
        return findings
    low = view.nnodes[0] if view.nnodes else None
    count = f"{joined} of {low} node(s) joined, {low - joined} missing" if low and low > joined else \
        f"{joined} node(s) joined"
    return [Finding(check=JOB_RDZV, severity=FAIL, nodes=(),
                    summary=f"run {run_id!r}: round {state.round} is not complete: {count}"
                    f"{_deadline_text(state.deadline, view.observed_at)}", evidence=evidence,
                    fix="start the missing nodes with the same --rdzv-endpoint and --rdzv-id; a node that was "
                    "started and is not listed never reached the store: run `netcheck` on it",
                    kind=JOB_WAITING)]


def _deadline_text(deadline: str | None, now: str) -> str:
    if deadline is None:
        return "; it waits for --nnodes' minimum before a deadline starts"
    left = (datetime.datetime.fromisoformat(deadline) - datetime.datetime.fromisoformat(now)).total_seconds()
    return f"; it closes with whoever is there in {left:.0f} s" if left >= 0 else \
        f"; its deadline passed {-left:.0f} s ago"


def live_ranks(state: RendezvousView, now: str) -> frozenset[int]:
    """Group ranks of the participants torchrun's agents still count: each agent drops a node
    whose heartbeat is older than the dead limit on every read of the state
    (dynamic_rendezvous._sanitize), and writes that back with its next heartbeat."""
    stale = {node for node, age in _ages(state, now) if age is None or age > DEAD_AFTER}
    return frozenset(rank for node, rank in state.participants if node not in stale)


def eviction_findings(view: JobView) -> list[Finding]:
    """Agents that completed the current round and are no longer among its participants (their
    round's role_info / assigned_ranks keys hold them, the state's participants do not), or that every agent drops on
    its next read (a heartbeat past the dead limit): torchrun removed them."""
    rounds = {(r.run_id, r.round): r for r in view.rounds}
    findings = []
    for run in view.runs:
        state = run.state
        if state is None or not state.complete:
            continue
        keys = rounds.get((run.run_id, state.round))
        ranks = {rank for _, rank in state.participants}
        removed = sorted(set(keys.group_ranks) - ranks) if keys else []
        live = live_ranks(state, view.observed_at) if not state.closed else ranks
        dropping = [(node, rank) for node, rank in state.participants if rank not in live]
        if removed or dropping:
            findings.append(_eviction(run.run_id, state, keys, removed, dropping, view.observed_at))
    return findings


def _eviction(run_id: str, state: RendezvousView, keys: RoundKeys | None, removed: list[int],
              dropping: list, now: str) -> Finding:
    members = {m.group_rank: m for m in keys.members} if keys else {}
    ages = dict(_ages(state, now))
    ranks = tuple(sorted(removed + [rank for _, rank in dropping]))
    hosts = list(dict.fromkeys([node.addr for node, _ in dropping] +
                               [h for g in removed for _, h in (members[g].hosts if g in members else ())]))
    who = f"group rank{'s' if len(ranks) > 1 else ''} {_ranks(ranks)}" + (f" ({', '.join(hosts)})" if hosts else "")
    lines = {g: f"group rank {g}: {_workers(members.get(g))}, " + _host(members.get(g)) for g in removed}
    lines.update({rank: f"group rank {rank}: {_workers(members.get(rank))}, {node}: last heartbeat "
                  f"{_age(ages.get(node))}, past torchrun's {DEAD_AFTER:g} s: every agent drops it at its next "
                  "read of the state, the store's copy at their next heartbeat" for node, rank in dropping})
    evidence = tuple(lines[g] + _unread(members.get(g)) for g in ranks)
    evidence += tuple(f"still in round {state.round}: rank {rank}: {node}"
                      for node, rank in sorted(state.participants, key=lambda p: p[1]) if rank not in ranks)
    if keys and keys.group_ranks:
        evidence += (f"round {keys.round}'s keys name group ranks {_ranks(keys.group_ranks)}"
                     f"{'' if keys.listed else ' (probed: this torch cannot list keys)'}",)
    return Finding(check=JOB_RDZV, severity=FAIL, nodes=ranks, summary=f"run {run_id!r}: {who} of round {state.round} "
                   f"{'are' if len(ranks) > 1 else 'is'} no longer among its participants: removed by torchrun "
                   f"after its heartbeat stopped (no beat for {DEAD_AFTER:g} s)", evidence=evidence,
                   fix="look at that node now: its torchrun agent stopped beating (hung, stopped, out of memory, "
                   "or cut off from the store), and the job's other workers wait on its ranks until their "
                   "collective timeout (NCCL 10 min, gloo 30 min). Stop the job and start it again without "
                   "the node (or with it, once fixed); with --nnodes MIN:MAX and --max-restarts, torchrun "
                   "restarts the rest in a new round by itself", kind=JOB_EVICTED)


def _workers(m: RoundMember | None) -> str:
    if m is None or m.first_rank is None or m.local_world_size is None:
        return "worker ranks unknown"
    last = m.first_rank + m.local_world_size - 1
    return f"worker rank {m.first_rank}" if last == m.first_rank else f"worker ranks {m.first_rank} to {last}"


def _host(m: RoundMember | None) -> str:
    if m is not None and m.hosts:
        return "on " + ", ".join(dict.fromkeys(host for _, host in m.hosts)) + " (its workers' debug server URLs)"
    return ("host not in the store (torchrun keeps no address of a removed node; a worker running "
            "torch's debug server registers its host)")


def _unread(m: RoundMember | None) -> str:
    return f"; {m.unread}" if m is not None and m.unread else ""


def _ages(state: RendezvousView, now: str) -> list[tuple[NodeDesc, float | None]]:
    moment = datetime.datetime.fromisoformat(now)
    return [(node, (moment - datetime.datetime.fromisoformat(t)).total_seconds() if t else None)
            for node, t in state.last_heartbeats]


def _age(age: float | None) -> str:
    return "none" if age is None else f"{age:.0f} s ago"


def heartbeat_findings(view: JobView) -> list[Finding]:
    findings = []
    for run in view.runs:
        state = run.state
        if state is None or not state.last_heartbeats:
            continue
        if state.closed:
            findings.append(Finding(check=JOB_HEARTBEAT, severity=PASS, nodes=(),
                                    summary=f"run {run.run_id!r}: the rendezvous is closed "
                                    "(the job has ended): its agents no longer beat"))
            continue
        findings += _heartbeats(run.run_id, state, view.observed_at)
    return findings


def _heartbeats(run_id: str, state: RendezvousView, now: str) -> list[Finding]:
    """A participant of a complete round past the dead limit is job.rdzv's (evicted); the others'
    (a round still forming, the wait list) are named dead here."""
    ages = _ages(state, now)
    evidence = tuple(f"{node}: last heartbeat {_age(age)}" for node, age in ages)
    evicting = {node for node, _ in state.participants} if state.complete else set()
    dead = [node for node, age in ages if (age is None or age > DEAD_AFTER) and node not in evicting]
    late = [(node, age) for node, age in ages if age is not None and LATE_AFTER < age <= DEAD_AFTER]
    findings = []
    if dead:
        findings.append(Finding(check=JOB_HEARTBEAT, severity=FAIL, nodes=(),
                                summary=f"run {run_id!r}: {', '.join(map(str, dead))}: no "
                                f"heartbeat for over {DEAD_AFTER:g} s; torchrun counts such a node dead",
                                evidence=evidence,
                                fix="that node's torchrun agent is hung or gone (or its clock is far "
                                "off this one's): look at the node; the others drop it from the round", kind=JOB_DEAD))
    if late:
        findings.append(Finding(
            check=JOB_HEARTBEAT, severity=WARN, nodes=(),
            summary=f"run {run_id!r}: " + ", ".join(f"{node}: last heartbeat {age:.0f} s ago"
                                                    for node, age in late)
            + f", past the {KEEP_ALIVE_INTERVAL:g} s keep-alive; torchrun removes a node at {DEAD_AFTER:g} s",
            evidence=evidence,
            fix="that node's agent missed a keep-alive: it is stalled, stopped or starved of CPU, or "
            "its path to the store is slow; look at it now, before the others evict it", kind=JOB_LATE))
    if not findings:
        gone = [node for node, age in ages if node in evicting and (age is None or age > DEAD_AFTER)]
        findings.append(Finding(check=JOB_HEARTBEAT, severity=PASS, nodes=(),
                                summary=f"run {run_id!r}: every {'other ' if gone else ''}node's "
                                f"agent beat within {LATE_AFTER:g} s (keep-alive {KEEP_ALIVE_INTERVAL:g} s)"
                                + (f"; {', '.join(map(str, gone))}: evicted (job.rdzv)" if gone else ""),
                                evidence=evidence))
    return findings


def ranks_findings(view: JobView) -> list[Finding]:
    """init_process_group's ranks: each writes its address key once it is in; rank 0 hosts
    the store and writes its own only once every rank has come."""
    arrived = set(view.arrived_ranks)
    if not arrived or view.runs:
        return []
    size = view.world_size
    if size is None:
        return [Finding(check=JOB_RANKS, severity=WARN, nodes=(),
                        summary=f"rank(s) {_ranks(arrived)} of the default process group arrived; "
                        "give --world-size (WORLD_SIZE) to name the missing ones")]
    missing = sorted(set(range(1, size)) - arrived) if 0 not in arrived else sorted(set(range(size)) - arrived)
    if not missing:
        return [Finding(check=JOB_RANKS, severity=PASS, nodes=tuple(range(size)),
                        summary=f"all {size} ranks of the default process group "
                        "arrived")]
    return [Finding(check=JOB_RANKS, severity=FAIL, nodes=tuple(missing),
                    summary=f"rank(s) {_ranks(missing)} of {size} never arrived at the "
                    f"default process group; rank 0 hosts the store and waits for them",
                    evidence=(f"arrived: rank(s) {_ranks(arrived | {0})}",),
                    fix="start those ranks with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE; one that was "
                    "started and is missing cannot reach MASTER_ADDR:MASTER_PORT: run `netcheck` there")]


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(ranks)))


def ras_findings(ras: RasView | None) -> list[Finding]:
    if ras is None or not ras.answered:
        return []
    if ras.text:
        return _ras_text(ras)
    trouble, evidence = [], []
    for c in ras.communicators:
        bad = [r for r in c.ranks if r.state != "ok"]
        evidence += [f"communicator {c.hash} ({c.size} ranks): rank {r.rank} on {r.host} (pid {r.pid}): "
                     f"{r.state}" for r in bad]
        trouble += bad
    if not trouble:
        return [Finding(check=JOB_NCCL, severity=PASS, nodes=(),
                        summary=f"NCCL {ras.nccl_version} (RAS at {ras.address}): "
                        f"{len(ras.communicators)} communicator(s), every rank present, no errors")]
    missing = [r for r in trouble if r.state in ("missing", "dead")]
    kind = JOB_RAS_MISSING if missing else JOB_RAS_ERRORS
    what = f"{len(missing)} rank(s) missing" if missing else f"{len(trouble)} rank(s) in error or still initialising"
    return [Finding(check=JOB_NCCL, severity=FAIL, nodes=(), summary=f"NCCL (RAS at {ras.address}): {what}",
                    evidence=tuple(evidence),
                    fix="look at the named ranks' processes and GPUs (a missing rank never joined the "
                    "communicator; a dead one stopped answering)", kind=kind)]


def _ras_text(ras: RasView) -> list[Finding]:
    """NCCL before 2.28.7 answers in text: its table marks trouble in words."""
    words = ("INCOMPLETE", "MISMATCH", "ERROR", "DEAD", "TIMEOUT", "ABORT")
    lines = [ln.strip() for ln in ras.text.splitlines() if any(w in ln for w in words) and ln.strip()]
    if not lines:
        return [Finding(check=JOB_NCCL, severity=PASS, nodes=(),
                        summary=f"NCCL (RAS at {ras.address}) reports no errors")]
    return [Finding(check=JOB_NCCL, severity=FAIL, nodes=(), summary=f"NCCL (RAS at {ras.address}) reports trouble",
                    evidence=tuple(lines[:20]), fix="look at the named ranks' processes and GPUs", kind=JOB_RAS_ERRORS)]
