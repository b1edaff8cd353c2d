"""Phase 7, bandwidth: timed collectives across every node's workers, on the host's store."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator

from netcheck.bandwidth.faults import silenced_by
from netcheck.bandwidth.orchestrate import run_bandwidth
from netcheck.cluster import rendezvous
from netcheck.core.bwrecords import NODE_GONE, BandwidthResult
from netcheck.core.constants import BW_STARTUP_SECONDS, HOST_WORD_LOOK, HOST_WORD_PACES
from netcheck.core.model import HOST, Finding, is_torchrun_worker
from netcheck.phases.agree import agreed, wait_stopped_word
from netcheck.phases.state import Learnt, Lost, Run, seated_rank
from netcheck.phases.stop import HostStopped
from netcheck.rules import bw as bw_rules
from netcheck.rules import nic as nic_rules
from netcheck.rules import ports as ports_rules
from netcheck.rules import rdma as rdma_rules
from netcheck.rules import run as run_rules


def measure_bandwidth(run: Run, seat: rendezvous.Seat) -> Generator[Learnt, None, None]:
    """Timed collectives across every node's workers, on the host's store.

    Worker ranks are node_rank * nproc + local_rank, so the phase needs every seat 0..N-1
    alive; with a node lost, the findings already name it and the sweep would only wait
    for it. Under torchrun each worker process is a seat and starts one worker of its own.
    """
    launch = run.config.launch
    seats = sorted(seat.hostnames)
    expected = launch.nnodes_min or len(seats)
    if seats != list(range(len(seats))) or len(seats) < expected:   # the seats: every node's alike
        if run.role == HOST:  # where the missing nodes are named
            yield Learnt((_absent(),))
        return
    # Every node skips alike: a joiner knows the host's flagged paths (phases.MeshDone).
    if skipped := bw_rules.flagged_skip(run.flagged, dict(run.alive)):
        yield Learnt((skipped,))
        return
    # A node lost is the host's to know (a joiner past its own env phase has not heard): its
    # word says so, or the joiners wait in this phase for a sweep the host never starts.
    if skipped := agreed(run, seat, "bandwidth", lambda: (_absent() if set(run.alive) != set(seats) else None)
                         or _ports_short(run) or _short_of_time(run)):
        yield Learnt((skipped,))
        return
    # The phase numbers nodes; the report's `nodes` are seats. Under torchrun each worker
    # process is a seat: the phase runs per host, from LOCAL_RANK 0, node-numbered by
    # GROUP_RANK, and node n's processes are ranks n*P .. n*P+P-1 (torchrun's numbering).
    if is_torchrun_worker(launch):
        if launch.variables.get("LOCAL_RANK") != "0":
            return
        node, per_node = int(launch.variables["GROUP_RANK"]), launch.nproc_per_node
    else:
        node, per_node = seated_rank(seat), 1
    nnodes = len(seats) // per_node
    if nnodes < 2:  # torchrun's workers of one host: seats, and no other node
        yield Learnt(tuple(run_rules.no_peer_findings(["bandwidth"])))
        return
    result = run_bandwidth(seat.exchange, run.config.rdzv.host, run.config.rdzv.port, node, nnodes,
                           launch.nproc_per_node, run.config.sweep, run.phase_deadline().remaining(),
                           run.progress)
    if run.role != HOST and _host_node_stopped(result):
        # The host's own account says a signal stopped it: its verdict says so next. Heard, it
        # ends this node's phases (HostStopped) without blaming the host's node for the stop.
        ex = seat.exchange
        told = wait_stopped_word(ex, run.phase_deadline().within(2 * max(HOST_WORD_LOOK, HOST_WORD_PACES * ex.pause)))
        if told is not None:
            raise HostStopped(told)
    lost = seat.exchange.lost   # the phase carries on without the store, so nothing raised
    store_lost = run.store_lost_findings("bandwidth", lost) if lost else ()
    seats_of = {n: tuple(range(n * per_node, (n + 1) * per_node)) for n in range(nnodes)}
    gone = sorted(r for f in result.faults if f.kind in NODE_GONE for r in seats_of[f.node])
    if gone and (down := run.own_links_down()):   # their silence is this node's link's (the host's too)
        result = dataclasses.replace(result, faults=silenced_by(result.faults, node, f"this node's link "
                                                                 f"({', '.join(down)}) went down"))
    seat_names, rates = seat.hostnames, _line_rates(run)
    measured = dataclasses.replace(result, hostnames={str(n): seat_names[s[0]] for n, s in seats_of.items()})
    yield Learnt(bandwidth=measured)   # every row measured, kept in the report whatever becomes of the rules
    findings = bw_rules.bandwidth_findings(measured, {n: rates.get(s[0]) for n, s in seats_of.items()},
                                         run.config.sweep.expect_busbw, run.flagged.paths,
                                         {n: _fabric(run, s[0]) for n, s in seats_of.items()})
    seated = [dataclasses.replace(f, nodes=tuple(r for n in f.nodes for r in seats_of[n])) for f in findings]
    explained = bw_rules.stop_explained(seated, measured, run.findings + list(store_lost))
    # A node whose account never came is gone, as in any other phase (unless the host's own store went).
    gone_here = Lost("bandwidth", seat_names, tuple(gone)) if run.role == HOST and not (run.host_lost or lost) else None
    yield Learnt(store_lost + tuple(explained), lost=gone_here, host_lost=True if lost else None)


def _host_node_stopped(result: BandwidthResult) -> bool:
    """Whether the host's node (bandwidth node 0, whose phase the host runs) told the others
    that it was stopped (orchestrate: a node's account on its way out)."""
    return any(f.node == 0 and f.rank == -1 and f.kind == "stopped" for f in result.faults)


def _absent() -> Finding:
    """The sweep left out for a node lost: its own finding names it."""
    return run_rules.skipped_finding("bandwidth", "not every node rank is present")


def _ports_short(run: Run) -> Finding | None:
    """The host's answer, every node's (agreed): why not every node's ephemeral ports hold the
    sweep's workers and, after them, the job's own (None: they do). Run regardless, a sweep short
    of ports fails in its gloo stage naming the healthy nodes, and leaves the job short for a minute."""
    why = ports_rules.sweep_short(run.members)
    return run_rules.skipped_finding(
        "bandwidth", why, "widen that node's ephemeral port range (host.ports says how), then run again to "
        "measure bandwidth") if why else None


def _short_of_time(run: Run) -> Finding | None:
    """The host's answer, every node's (agreed): why what is left does not hold the sweep (None: it does)."""
    left, needed = run.phase_deadline().remaining(), run.config.sweep.budget_s + BW_STARTUP_SECONDS
    if left >= needed:
        return None
    return run_rules.skipped_finding("bandwidth", f"{left:.0f} s of --timeout left, the sweep needs about "
                                     f"{needed:.0f} s", "raise --timeout (or lower --bw-budget)")


def _fabric(run: Run, rank: int) -> float | None:
    """Gb/s of the RDMA ports NCCL would use on the seat's node (None: none)."""
    return next((rdma_rules.fabric_gbps(m) for m in run.members if m.rank == rank), None)


def _line_rates(run: Run) -> dict[int, float | None]:
    """Gbit/s of the interface each seat's traffic to its peers leaves by (None: unknown)."""
    rates = {}
    for m in run.members:
        mbps = nic_rules.used_speed(m, {a.src_ifname for a in run.attempts if a.src == m.rank and a.connected})
        rates[m.rank] = mbps / 1000 if mbps else None
    return rates
