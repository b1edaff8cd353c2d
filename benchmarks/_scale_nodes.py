"""Simulated joiners for benchmarks/scale.py: many nodes in one process, each a real store
client speaking netcheck's real protocol to a real host.

Each node is a generator that makes the store requests a real node makes, in its order,
on its own TCPStore connection, and yields the key it waits for next; one loop polls the
waiting nodes' keys at the interval a real node polls at. Facts, mesh results and env
facts are synthetic but well-formed: one node's real facts (gathered here, in the
simulator's namespace) with the hostname, address and claimed rank changed. Each node has
a real mesh listener, so the host's own connects land. The faults scale.py plants are
made here, as a real node would make them: a node that never comes, one whose mesh port
refuses, one with another torch, one with a skewed clock, a second node claiming a seated node's
rank, and one that stops right after its seat.

With nproc > 1 each simulated node is torchrun's: nproc worker processes, each a member seated
by its global RANK, sharing the node's hostname and address (member m is on node m // nproc).
The host's own node's other workers are simulated in the host's namespace, where its address is.

    python benchmarks/_scale_nodes.py PLAN.json FIRST LAST OUT.json
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck.cluster import mesh, rendezvous  # noqa: E402
from netcheck.cluster.compat import import_distributed  # noqa: E402
from netcheck.cluster.store import Exchange  # noqa: E402
from netcheck.config import parse_mesh  # noqa: E402
from netcheck.core import codec  # noqa: E402
from netcheck.core import storekeys as keys
from netcheck.core.constants import CLOCK_PINGS, MAX_FACTS_BYTES, PING_RETRY, SEAT_BLOCK  # noqa: E402
from netcheck.core.deadline import Deadline  # noqa: E402
from netcheck.core.envfacts import EnvFacts  # noqa: E402
from netcheck.core.meshrecords import Candidate, MeshResults, Offer
from netcheck.core.model import JOB_VARS, ClockSample, Launch, NodeResults, Resolution  # noqa: E402
from netcheck.core.nictable import Address  # noqa: E402
from netcheck.core.seats import RankRuns, Seated, rank_in, ranks_of  # noqa: E402
from netcheck.facts.bounded import Caller  # noqa: E402
from netcheck.facts.envinfo import gather_env  # noqa: E402
from netcheck.facts.listener import allow_a_connection_per_node  # noqa: E402
from netcheck.facts.local import gather_facts  # noqa: E402


class Greeters:
    """Every simulated node's mesh listener, answered by one thread as netcheck answers its own."""

    def __init__(self):
        self.selector = selectors.DefaultSelector()
        self.thread = threading.Thread(target=mesh.serve_greetings, args=(self.selector, threading.Event()),
                                       daemon=True)

    def listen(self, address: str, greeting: bytes) -> int:
        sock = socket.socket()
        sock.bind((address, 0))
        sock.listen(64)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, greeting)
        return sock.getsockname()[1]


class Requests:
    """A store wrapper that counts requests, to report the load the simulated nodes made."""

    count = 0

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        method = getattr(self._store, name)

        def call(*args):
            Requests.count += 1
            return method(*args)
        return call


def launch_of(plan: dict, rank: int) -> Launch:
    """The host's --nnodes N-1:N; or what torchrun exports to worker RANK."""
    nproc = plan["nproc"]
    if nproc == 1:
        return Launch("flags", rank, plan["nodes"] - 1, plan["nodes"], 1)
    world = plan["nodes"] * nproc
    variables = {"RANK": str(rank), "LOCAL_RANK": str(rank % nproc), "WORLD_SIZE": str(world),
                 "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(rank // nproc), "MASTER_ADDR": "node0",
                 "MASTER_PORT": str(plan["port"]), "TORCHELASTIC_RUN_ID": plan["run_id"]}
    return Launch("torchrun", rank, world, world, nproc, variables=variables)


def _sample(text: str) -> int | None:
    """The plan's --mesh ("full" or "sample:K") as mesh.targets takes it."""
    plan = parse_mesh(text)
    return plan.sample if plan else None


def hostname_of(plan: dict, rank: int) -> str:
    node = rank // plan["nproc"]
    return "node0" if node == 0 else f"sim{node:04d}"


def member_address(plan: dict, rank: int) -> str:
    node = rank // plan["nproc"]
    return plan["host"] if node == 0 else plan["addresses"][str(node)]


def node_facts(base, plan: dict, rank: int, hostname: str, address: str):
    """base (gathered here) as seen on that node; the host's node's workers are simulated in
    the host's namespace, whose interfaces are theirs as they are."""
    nics = tuple(dataclasses.replace(n, addresses=(Address("ipv4", address, plan["prefixlen"]),))
                 if n.name == plan["ifname"] and address != plan["host"] else n for n in base.nics.nics)
    launch = launch_of(plan, rank)
    # Each simulated node (each torchrun worker) is a process of its own: one token shared would
    # make copies of them.
    return dataclasses.replace(base, hostname=hostname, fqdn=f"{hostname}.cluster", hostname_addresses=(address,),
                               launch=launch, nics=dataclasses.replace(base.nics, nics=nics),
                               instance=f"{base.instance}-{hostname}-{rank}")


def address_of(plan: dict, hostname: str) -> str:
    """Where a seated node's FQDN resolves: its own address (the second claimant of a rank may
    be the one seated), the host's for the host."""
    if hostname == plan["duplicate_hostname"]:
        return plan["duplicate_address"]
    rank = hostname.removeprefix("sim")
    return plan["addresses"].get(str(int(rank)), plan["host"]) if rank.isdigit() else plan["host"]


def seated_names(data: bytes) -> tuple:
    seated = codec.loads(Seated, data, MAX_FACTS_BYTES)
    return (seated.blocks, *rendezvous.seated_names(seated))


def once(decoded: dict, ex: Exchange, name: keys.Key, decode):
    """What the host posted under name, as every node reads it: each node fetches it, and it
    is decoded once per process (the simulated nodes share its CPUs; a real node has its own)."""
    data = ex.raw(ex.key(name))
    if (name, data) not in decoded:
        decoded[name, data] = decode(data)
    return decoded[name, data]


def go_ahead(ex: Exchange, phase: str):
    """The host's word that every node runs `phase`, waited for and read as phases.agree does
    (the host gives it after its own work of the phase before: the mesh's after the rendezvous
    rules, the env's after its nic rules)."""
    yield ex.key(keys.GO, phase)
    return ex.read(ex.key(keys.GO, phase))


@dataclasses.dataclass
class Asked:
    """A key waited for that is asked for again every PING_RETRY until it comes."""

    key: str
    again: Callable[[], None]
    since: float = dataclasses.field(default_factory=time.monotonic)

    def came(self, ex: Exchange) -> bool:
        if ex.has(self.key):
            return True
        if time.monotonic() - self.since > PING_RETRY:
            self.again()
            self.since = time.monotonic()
        return False


def came(ex: Exchange, key) -> bool:
    """Whether what a node waits for is there: a key, every key of a list, or an Asked one."""
    if isinstance(key, Asked):
        return key.came(ex)
    return ex.has_all(key) if isinstance(key, list) else ex.has(key)


def script(rank: int, ex: Exchange, facts, env: EnvFacts, plan: dict, greeters: Greeters, stamps: dict, decoded: dict):
    """One node's rendezvous, mesh, env and goodbye, as the real phases make them."""
    faults = plan["faults"]
    visitor = rendezvous.sign_in(ex, facts)
    yield ex.key(keys.HOST)
    for k in range(CLOCK_PINGS):
        rendezvous.ping(ex, visitor, k)
        # Asked again after PING_RETRY, as measure_clock does: the host drops the pings list it
        # has answered, and a ping appended meanwhile goes with it.
        yield Asked(ex.key(keys.PONG, visitor, k), lambda k=k: rendezvous.ping(ex, visitor, k))
        ex.read(ex.key(keys.PONG, visitor, k), signed=False)
    seat = rendezvous.Seat(ex, rendezvous.publish_facts(ex, facts))
    stamps["arrived"].append(time.time())
    yield ex.key(keys.SEATED)
    blocks, seat.hostnames, seat.fqdns = once(decoded, ex, keys.SEATED, seated_names)
    block = seat.arrival // SEAT_BLOCK
    if block in blocks:
        seat.rank = rank_in(ex.read(ex.key(keys.SEAT, block)), seat.arrival)
    stamps["roster"].append(time.time())
    if seat.rank is None and rank == faults["duplicate"]:
        return  # the claimant of a rank that came second: not seated, it goes
    if seat.rank != rank:
        raise RuntimeError(f"{facts.hostname}: seated as {seat.rank}")
    if rank == faults["lost"]:
        return  # stops after its seat: no results, no goodbye, as a node whose netcheck died there
    offset = 30.0 if rank == faults["clock"] else 0.001
    peers = rendezvous.lookup_targets(seat.fqdns, seat.rank, plan["run_id"])
    lookups = tuple(Resolution(r, fqdn, (address_of(plan, seat.hostnames[r]),), None) for r, fqdn in peers.items())
    ex.post(keys.RESULT, seat.arrival, NodeResults(ClockSample(offset, 0.0002), lookups))
    stamps["results"].append(time.time())
    yield ex.key(keys.ALIVE)
    stamps["alive"].append(time.time())
    alive = once(decoded, ex, keys.ALIVE, lambda data: ranks_of(codec.loads(RankRuns, data, MAX_FACTS_BYTES)))
    if rank not in alive:  # the host gave up on this node: a real one says goodbye and stops
        seat.goodbye()
        return
    if not (yield from go_ahead(ex, "mesh")):
        return
    token = f"t{rank}"
    address = member_address(plan, rank)
    port = 1 if rank == faults["mesh"] else greeters.listen(address, f"{mesh.GREETING} {rank} {token}\n".encode())
    ex.post(keys.MESH_OFFER, rank, Offer(rank, token, (Candidate(plan["ifname"], address, port),)))
    targets = mesh.targets(rank, alive, _sample(plan["mesh"]), plan["run_id"])
    attempts = []
    yield [ex.key(keys.MESH_OFFER, t) for t in targets]
    offers = ex.read_many([ex.key(keys.MESH_OFFER, t) for t in targets])
    for t in targets:
        c = offers[ex.key(keys.MESH_OFFER, t)].candidates[0]
        bad = faults["mesh"] in (rank, t)
        attempts.append(mesh.Attempt(rank, t, c.ifname, c.address, "refused" if bad else "ok", None if bad else 0.1,
                                     None if bad else plan["ifname"], "Connection refused" if bad else "connected"))
    ex.post(keys.MESH_RESULT, rank, MeshResults(rank, tuple(attempts)))
    stamps["meshed"].append(time.time())
    yield ex.key(keys.MESH_DONE)
    stamps["done"].append(time.time())
    if not (yield from go_ahead(ex, "env")):
        return
    mine = env if rank != faults["env"] else dataclasses.replace(env, values={**env.values, "torch.version": "2.4.1"})
    ex.post(keys.ENV, rank, mine)
    seat.goodbye()
    stamps["bye"].append(time.time())


def main() -> None:
    plan_path, first, last, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    plan = json.loads(Path(plan_path).read_text())
    allow_a_connection_per_node()  # a store connection and a mesh listener per node, as netcheck's host lifts it
    dist = import_distributed()
    base = gather_facts(plan["run_id"], launch_of(plan, first))
    # torchrun's variables that are the same on every worker, as the host's environment has them
    job = {k: v for k, v in launch_of(plan, first).variables.items() if k in JOB_VARS}
    env = gather_env((), {**os.environ, **job})
    greeters = Greeters()
    greeters.thread.start()
    nodes = [(r, hostname_of(plan, r), member_address(plan, r)) for r in range(first, last)
             if r != plan["faults"].get("missing")]
    if first <= plan["faults"]["duplicate"] < last:
        nodes.append((plan["faults"]["duplicate"], plan["duplicate_hostname"], plan["duplicate_address"]))
    stores = [dist.TCPStore(plan["host"], plan["port"], None, False, datetime.timedelta(seconds=plan["timeout"]))
              for _ in nodes]
    stamps: dict[str, list[float]] = {k: [] for k in ("arrived", "roster", "results", "alive", "meshed", "done", "bye")}
    errors: list[str] = []
    decoded: dict = {}
    waiting = {}
    caller, end = Caller("simulated-nodes"), Deadline(plan["timeout"])
    for (rank, hostname, address), store in zip(nodes, stores):
        ex = Exchange(Requests(store), plan["run_id"], end=end, caller=caller)
        gen = script(rank, ex, node_facts(base, plan, rank, hostname, address), env, plan, greeters, stamps, decoded)
        waiting[rank, hostname] = (ex, gen, next(gen))  # torchrun's workers share a hostname
    probe = Exchange(None, plan["run_id"], end=end)
    probe.pace(plan["nodes"])
    pause = probe.pause  # a real node's pause between looks, in a cluster this large
    while waiting:  # a round: every waiting node looks once, as each real node would per poll
        started = time.monotonic()
        for name, (ex, gen, key) in list(waiting.items()):
            try:
                if came(ex, key):
                    waiting[name] = (ex, gen, gen.send(None))
            except StopIteration:
                del waiting[name]
            except (RuntimeError, OSError) as e:  # the host went: a real node reports it and ends
                errors.append(f"{name} (waiting for {key}): {e}")
                del waiting[name]
        time.sleep(max(0.0, pause - (time.monotonic() - started)))
    out.write_text(json.dumps({"stamps": stamps, "requests": Requests.count, "errors": errors}))


if __name__ == "__main__":
    main()
