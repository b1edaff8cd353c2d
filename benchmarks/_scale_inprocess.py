"""The host's own work at scale in one process, without sockets or a store (benchmarks/scale.py
--in-process): past the descriptors one machine can connect (20,000 a process here), up to
MAX_RANKS.

The joiners' side is made first, as the simulators (benchmarks/_scale_nodes.py) make it: every
member's facts, visitor record, results, mesh results and env facts, encoded as the store holds
them (bytes each, in this process's memory as the host's store holds them in its own). Then the
host's work, timed stage by stage in process CPU time: each record decoded as the host reads it
(core/codec), and every step the host takes between its reads and writes made by the host's own
functions (hostgather.take_arrival, seating.assign_ranks, hostgather.roster_records,
gathering_of, phases.rendezvous.judge_rendezvous, phases.mesh.judge_attempts and judge_mesh,
phases.nic, phases.env.judge_env, phases.goodbye.judge_launch, build_report, the renderers);
each record the host posts (seat blocks, names, roster, alive list, the mesh's word, the
verdict) encoded, and the ones a joiner reads decoded once as a joiner reads them.

Left out, as only a store or the network makes them: the store's requests, the clock pings
(each member's clock sample is given), the host's own connects (its mesh results are made as
every node's are), the datagram tests of nodes whose facts never came (none is planted), the
addresses connected to the store's port (each node's address, its ranks' connections), stalls,
and the endpoint lookup for missing ranks.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from contextlib import contextmanager
from pathlib import Path

from _scale_nodes import address_of, hostname_of, launch_of, member_address, node_facts
from netcheck.cli import build_parser, config_from_args
from netcheck.cluster import hostgather, mesh, rendezvous
from netcheck.cluster.seating import assign_ranks, rendezvous_closed
from netcheck.cluster.store import Exchange
from netcheck.core import codec, seats
from netcheck.core.constants import MAX_FACTS_BYTES, MAX_VISITOR_BYTES, MESH_SAMPLE_PEERS
from netcheck.core.envfacts import EnvFacts
from netcheck.core.meshrecords import Attempt, MeshDone, MeshResults
from netcheck.core.model import HOST, JOB_VARS, ClockSample, NodeFacts, NodeResults, Resolution, Visitor, exit_of
from netcheck.core.nictable import Address
from netcheck.facts.envinfo import gather_env
from netcheck.facts.local import gather_facts
from netcheck.phases import env as env_phase
from netcheck.phases import goodbye, hostpath, nic
from netcheck.phases import mesh as mesh_phase
from netcheck.phases import rendezvous as rendezvous_phase
from netcheck.phases.assemble import build_report
from netcheck.phases.state import Run, fold, fold_each
from netcheck.render import export
from netcheck.render import text as report_text
from netcheck.rules import run as run_rules

CLOCK_OK, CLOCK_SKEWED = 0.001, 30.0   # seconds a member's clock is off the host's (scale.py plants 30 s)


@dataclasses.dataclass
class Records:
    """What the joiners post, by arrival (the host's node first, the second claimant of a rank
    last) or by rank, as the bytes the host's store holds."""

    facts: list[bytes]
    visitors: list[bytes]
    results: dict[int, bytes]      # arrival -> NodeResults (the lost member posts none)
    mesh: dict[int, bytes]         # rank -> MeshResults
    env: dict[int, bytes]          # rank -> EnvFacts


def with_eth0(facts: NodeFacts, address: str, prefixlen: int) -> NodeFacts:
    """facts with eth0 holding address alone: the host's node, as it is in the socket runs."""
    nics = tuple(dataclasses.replace(n, addresses=(Address("ipv4", address, prefixlen),)) if n.name == "eth0" else n
                 for n in facts.nics.nics)
    return dataclasses.replace(facts, nics=dataclasses.replace(facts.nics, nics=nics))


def host_facts(plan: dict, soft_nofile: int) -> NodeFacts:
    """The host's facts, gathered under the soft descriptor limit the socket runs start it with."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft_nofile, hard))
    try:
        mine = gather_facts(plan["run_id"], launch_of(plan, 0))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return node_facts(with_eth0(mine, plan["host"], plan["prefixlen"]), plan, 0, "node0", plan["host"])


def joiners(plan: dict) -> list[tuple[int, str, str]]:
    """(claimed rank, hostname, address) of every joiner in arrival order, as the simulators start them."""
    ranks = range(1, plan["nodes"] * plan["nproc"])
    came = [(r, hostname_of(plan, r), member_address(plan, r)) for r in ranks if r != plan["faults"].get("missing")]
    return came + [(plan["faults"]["duplicate"], plan["duplicate_hostname"], plan["duplicate_address"])]


def lookups(plan: dict, ring: list[int], fqdns: dict[int, str], rank: int) -> tuple[Resolution, ...]:
    """A member's FQDN lookups past MESH_FULL_UP_TO ranks, drawn as rendezvous.lookup_targets
    draws them (its mesh sample and the host), each answered with the node's own address."""
    peers = sorted(set(mesh.ring_targets(rank, ring, MESH_SAMPLE_PEERS, plan["run_id"])) | {0})
    return tuple(Resolution(r, fqdns[r], (address_of(plan, hostname_of(plan, r)),), None) for r in peers if r != rank)


def mesh_results(plan: dict, ring: list[int], sample: int | None, rank: int) -> MeshResults:
    """A member's connects to its sample, as the simulators make them: every one from or to
    the member whose port refuses, refused."""
    bad_rank, attempts = plan["faults"]["mesh"], []
    for t in mesh.ring_targets(rank, ring, sample, plan["run_id"]):
        bad = bad_rank in (rank, t)
        attempts.append(Attempt(rank, t, plan["ifname"], member_address(plan, t), "refused" if bad else "ok",
                                None if bad else 0.1, None if bad else plan["ifname"],
                                "Connection refused" if bad else "connected"))
    return MeshResults(rank, tuple(attempts))


def make_records(plan: dict, host: NodeFacts, sample: int | None) -> Records:
    faults, run_id = plan["faults"], plan["run_id"]
    # The host's node's other workers have its interfaces; node_facts gives every other node its own address.
    base = with_eth0(gather_facts(run_id, launch_of(plan, 1)), plan["host"], plan["prefixlen"])
    came = [host] + [node_facts(base, plan, r, name, address) for r, name, address in joiners(plan)]
    seated = sorted({f.launch.node_rank for f in came if f.launch.node_rank is not None})
    ring = [r for r in seated if r != faults["lost"]]   # the alive list: the lost member never reports back
    fqdns = {r: f"{hostname_of(plan, r)}.cluster" for r in seated}
    results = {}
    for a, f in enumerate(came[:-1]):   # the second claimant of a rank is never seated: no results
        rank = f.launch.node_rank
        if rank != faults["lost"]:
            clock = None if a == 0 else ClockSample(CLOCK_SKEWED if rank == faults["clock"] else CLOCK_OK, 0.0002)
            results[a] = codec.dumps(NodeResults(clock, lookups(plan, ring, fqdns, rank))).encode()
    job = {k: v for k, v in launch_of(plan, 1).variables.items() if k in JOB_VARS}
    env = gather_env((), {**os.environ, **job})
    other = dataclasses.replace(env, values={**env.values, "torch.version": "2.4.1"})
    env_bytes = codec.dumps(env).encode()
    return Records(
        facts=[codec.dumps(f).encode() for f in came],
        visitors=[codec.dumps(rendezvous.visitor_record(f)).encode() for f in came],
        results=results,
        mesh={r: codec.dumps(mesh_results(plan, ring, sample, r)).encode() for r in ring},
        # Each its own bytes, as the store holds each node's value apart.
        env={r: codec.dumps(other).encode() if r == faults["env"] else bytes(bytearray(env_bytes)) for r in ring})


class Stages:
    """Each stage's process CPU time; their sum is the host's work."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        started = time.process_time()
        try:
            yield
        finally:
            self.seconds[name] = round(time.process_time() - started, 3)


def host_config(argv: list[str], env: dict[str, str]):
    return config_from_args(build_parser().parse_args(argv), env)


def seat_everyone(run: Run, records: Records, ex: Exchange) -> hostgather.HostState:
    """The host's poll of the arrivals, every one there at once: visitors and facts decoded and
    taken as host_gather takes them (the host's arrival first)."""
    high = run.config.launch.nnodes_max
    state = hostgather.HostState({}, [], nnodes_max=high, host_arrival=0)
    for v, data in enumerate(records.visitors):
        state.visitors[v] = codec.loads(Visitor, data, MAX_VISITOR_BYTES)
    state.visitors_seen = len(records.visitors)
    for a, data in enumerate(records.facts):
        hostgather.take_arrival(ex, state, a, codec.loads(NodeFacts, data, MAX_FACTS_BYTES), seating=True)
    state.seating_visitors = frozenset(state.visitors)
    return state


def joiners_view(posted: hostgather.RosterRecords, alive: bytes) -> tuple[dict[int, str], tuple[int, ...]]:
    """What a joiner reads of the seating and the alive list, decoded as it decodes them."""
    names, _ = rendezvous.seated_names(codec.loads(seats.Seated, codec.dumps(posted.seated), MAX_FACTS_BYTES))
    return names, seats.ranks_of(codec.loads(seats.RankRuns, alive, MAX_FACTS_BYTES))


def host_work(run: Run, records: Records, stages: Stages, folder: Path) -> tuple[dict, str]:
    """Every host step from the arrivals to the written outputs; the JSON report's path and the text report."""
    cfg, launch = run.config, run.config.launch
    # No store: named only where another client interfered, which none does.
    ex = Exchange(None, cfg.run_id, end=run.deadline)
    expected = (launch.nnodes_min, launch.nnodes_max)
    hostgather.hold_records()
    with run.phase("rendezvous"):
        with stages.stage("seating"):
            state = run.arrivals = seat_everyone(run, records, ex)
            ranks, duplicates, extras = assign_ranks(state.arrivals, 0, launch.nnodes_max)
            assert rendezvous_closed(len(ranks), *expected, cfg.join_window, cfg.join_window)
            posted = hostgather.roster_records(state.arrivals, ranks)
            encoded = [codec.dumps(b) for b in posted.blocks.values()] + [codec.dumps(posted.seated),
                                                                           codec.dumps(posted.roster)]
        with stages.stage("rendezvous_rules"):
            results = {a: codec.loads(NodeResults, data, MAX_FACTS_BYTES) for a, data in records.results.items()}
            gathered = hostgather.gathering_of(posted.roster, state, results, duplicates, extras, expected,
                                               launch.hostnames, 0.0, cfg.run_id)
            run.members = gathered.members
            alive = codec.dumps(seats.rank_runs(rendezvous_phase.alive_ranks(run.members))).encode()
            hostnames = posted.roster.hostnames()
            run.alive = rendezvous_phase.seated_of(hostnames, rendezvous_phase.alive_ranks(run.members))
            peers: dict[str, int] = {}
            for m in run.members:   # each rank's connection to the store, from its node's address
                peers[m.address] = peers.get(m.address, 0) + 1
            fold(run, rendezvous_phase.judge_rendezvous(run, gathered, (), peers, lambda: [], lambda: []))
    names = dict(run.alive)
    with stages.stage("mesh"), run.phase("mesh"):
        mine = {r: codec.loads(MeshResults, records.mesh[r], MAX_FACTS_BYTES) for r in names if r in records.mesh}
        paths = mesh_phase.judge_attempts(run, names, mesh_phase.own_attempts(mine), mine)
        encoded.append(codec.dumps(MeshDone(paths.flagged, paths.causes)))
        fold(run, mesh_phase.judge_mesh(run, names, paths, [r for r in sorted(names) if r not in mine]))
    with stages.stage("nic"), run.phase("nic"):
        fold(run, nic.judge_interfaces(run))
    with stages.stage("env"), run.phase("env"):
        envs = {r: codec.loads(EnvFacts, records.env[r], MAX_FACTS_BYTES) for r in names if r in records.env}
        fold_each(run, env_phase.judge_env(run, envs, names))
    with stages.stage("goodbye"), run.phase("goodbye"):
        fold(run, goodbye.judge_launch(run, state, posted.roster))
        encoded.append(codec.dumps(run_rules.cluster_verdict(run.findings)))
    with stages.stage("report"):
        rep = build_report(run)
    with stages.stage("render"):
        text = report_text.render_text(rep, cfg.verbose)
        report_text.write_file(str(folder / "host.json"), report_text.render_json(rep))
        report_text.write_file(str(folder / "exclude.txt"), export.render_exclude(rep))
        report_text.write_file(str(folder / "host.prom"), export.render_prom(rep))
    seen, alive_seen = joiners_view(posted, alive)
    view = {"posted_bytes": sum(len(e) for e in encoded), "alive_bytes": len(alive),
            "joiners_see_the_seating": seen == hostnames and set(alive_seen) == set(names),
            "exit_code": exit_of(rep), "verdict": rep.verdict, "seated": len(posted.roster.entries)}
    return view, text


def run_in_process(plan: dict, argv: list[str], variables: dict[str, str], soft_nofile: int, folder: Path) -> dict:
    """The joiners' records made, then the host's work on them; what it cost and what it wrote."""
    started = time.process_time()
    host = host_facts(plan, soft_nofile)
    config = host_config(argv, variables)
    ranks = plan["nodes"] * plan["nproc"]
    sample = config.mesh.sample if config.mesh else mesh.default_mode(ranks)
    records = make_records(plan, host, sample)
    records_s = round(time.process_time() - started, 2)
    run = Run(config, lambda _: None, hostpath.ask_host_path)
    run.role, run.facts = HOST, host
    stages = Stages()
    view, text = host_work(run, records, stages, folder)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"records_cpu_s": records_s, "cpu_s": round(sum(stages.seconds.values()), 2),
            "stages_cpu_s": stages.seconds, "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "text_report_lines": len(text.splitlines()), "phases": dict(run.timings), **view}
