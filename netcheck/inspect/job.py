"""`netcheck inspect`: a read-only look into a job that hangs now.

It reads the job's TCPStore as a client (never writing, never joining), decodes torchrun's
rendezvous state without trusting it, asks this node's NCCL RAS, and turns what it saw into
findings; all of it within --timeout.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping
from functools import partial

from netcheck.cluster import compat
from netcheck.cluster.jobstore import StoreRead, arrived_ranks, read_job_store, read_round, rendezvous_runs
from netcheck.config import InspectConfig
from netcheck.core.constants import PROBE_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.jobrecords import JobView, RoundKeys, RunState
from netcheck.core.model import INSPECT, Endpoint, Reach, Report, report_of
from netcheck.core.storeerrors import RendezvousError, first_line
from netcheck.facts.bounded import call_with_timeout
from netcheck.facts.probe import reach
from netcheck.facts.ras import query_ras, ras_address
from netcheck.facts.rdzvstate import ForeignValue, HostileValue, decode_state
from netcheck.rules import job as job_rules
from netcheck.rules import run as run_rules
from netcheck.rules.registry import impacted

MAX_STATE_BYTES = 16 << 20   # a c10d rendezvous state of thousands of nodes is well below this

RAS_SECONDS = 2.0   # RAS answers from this machine, or not at all
DECODE_SECONDS = 2.0  # decoding is given at least this, past a store read that took all of --timeout
                      # (a state of MAX_NODES nodes decodes in about 0.5 s, 1 s on a busy 2-core machine)
ROUND_SECONDS = 1.0   # and a round's own keys this: a few small values (torchrun's evictions)


def inspect_job(endpoint: Endpoint, job: InspectConfig, deadline: Deadline, env: Mapping[str, str]) -> Report:
    """One look at the job's store at `endpoint` (job.rdzv), torchrun's state in it and NCCL's RAS,
    all within `deadline` (--timeout's, which the live look after it shares)."""
    start, timeout = time.monotonic(), deadline.remaining()
    run_id = job.run_id
    view = JobView(str(endpoint), run_id, _now(), 0.0, nnodes=job.nnodes, world_size=job.world_size)
    findings = []
    # A plain connect first: a store that is not there is said at once, and torch never loads.
    found = reach(endpoint.host, endpoint.port, deadline, min(PROBE_TIMEOUT, timeout), wait_while_refused=False)
    try:
        if found.outcome != "open":
            raise RendezvousError(_unreached(found))
        compat.start_import()   # waited for within the deadline: seconds on a loaded node
        compat.import_distributed(deadline)
        read = _bounded_read(endpoint, run_id, deadline)
        runs = tuple(_decoded(read.states, read.unread, Deadline(max(DECODE_SECONDS, deadline.remaining()))))
        view = dataclasses.replace(
            view, observed_at=_now(), keys=read.keys, hidden_keys=read.hidden,
            run_ids=tuple(rendezvous_runs(read.keys)) if read.keys is not None else tuple(read.states),
            runs=runs, arrived_ranks=arrived_ranks(read.keys or ()))
        view = dataclasses.replace(view, rounds=_rounds(endpoint, runs, read.keys, view.observed_at,
                                                        Deadline(max(ROUND_SECONDS, deadline.remaining()))))
    except RendezvousError as e:
        view = dataclasses.replace(view, observed_at=_now(), store_error=str(e))
    except compat.TorchSlow as e:
        findings.append(run_rules.torch_slow_finding("inspect", str(e), ()))
    except compat.TorchUnusable as e:
        findings.append(run_rules.torch_finding("inspect", str(e), ()))
    ras = query_ras(ras_address(env), Deadline(max(1.0, min(RAS_SECONDS, deadline.remaining()))))
    view = dataclasses.replace(view, ras=ras, seconds=round(time.monotonic() - start, 3))
    if not findings:
        findings = job_rules.job_findings(view)
    return report_of(INSPECT, run_id or "inspect", None, impacted(findings), {"inspect": view.seconds}, job=view)


def _bounded_read(endpoint: Endpoint, run_id: str | None, deadline: Deadline) -> StoreRead:
    """The store read in a thread the deadline bounds: a store whose host accepts connections
    and never answers (a hung process) holds a request past every socket timeout torch sets."""
    seconds = deadline.remaining()
    read, error = call_with_timeout(lambda: read_job_store(endpoint.host, endpoint.port, run_id, deadline,
                                                           MAX_STATE_BYTES), seconds)
    if isinstance(error, TimeoutError):
        raise RendezvousError(f"it accepts connections but did not answer in {seconds:.0f} s: the process "
                              "holding the store (rank 0, or torchrun's agent on that node) is hung")
    if isinstance(error, (RendezvousError, compat.TorchUnusable)):
        raise error
    if error is not None:
        raise RendezvousError(f"the store broke off: {type(error).__name__}: {str(error).splitlines()[0]}")
    return read


def _decoded(states: dict[str, bytes], unread: dict[str, str], deadline: Deadline) -> list[RunState]:
    """Every state read, decoded by the deadline; a refusal (unread, foreign, hostile) is said."""
    runs = [RunState(run, None, why) for run, why in sorted(unread.items())]
    for run, raw in sorted(states.items()):
        try:
            runs.append(RunState(run, decode_state(raw, run, MAX_STATE_BYTES, deadline)))
        except HostileValue as e:
            runs.append(RunState(run, None, str(e), hostile=True))
        except ForeignValue as e:
            runs.append(RunState(run, None, str(e)))
    return sorted(runs, key=lambda r: r.run_id)


def _rounds(endpoint: Endpoint, runs: tuple[RunState, ...], keys: tuple[str, ...] | None, now: str,
            deadline: Deadline) -> tuple[RoundKeys, ...]:
    """Each completed round's agents as its keys show them (whom torchrun has removed since, or
    removes now); where the store stops answering now, the round says why and the state stands."""
    rounds = []
    for run in runs:
        state = run.state
        if state is None or not state.complete:
            continue
        members = job_rules.live_ranks(state, now)
        seconds = max(0.1, deadline.remaining())
        found, error = call_with_timeout(partial(read_round, endpoint.host, endpoint.port, run.run_id, state.round,
                                                 members, keys, deadline), seconds)
        if error is not None:
            why = f"no answer in {seconds:.1f} s" if isinstance(error, TimeoutError) else first_line(error)
            found = RoundKeys(run.run_id, state.round, (), keys is not None, error=f"not read: {why}")
        rounds.append(found)
    return tuple(rounds)


def _unreached(found: Reach) -> str:
    if found.outcome == "dns":
        return f"{found.host} does not resolve here ({found.resolve_error})"
    return "; ".join(f"{p.address}: {p.outcome} ({p.detail})" for p in found.probes)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()
