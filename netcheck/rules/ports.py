"""host.ports: each node's ephemeral port range against the sockets the job holds there at once,
and the endpoint's port inside the rendezvous host's range.

A socket that asks for no port gets one from net.ipv4.ip_local_port_range (IPv6's too), less
net.ipv4.ip_local_reserved_ports. A listener bound to port 0 holds its port alone; a connect()
shares its port with the node's other connections, but not with one to the same address and
port, nor with a listener, nor (for 60 s, TIME-WAIT) with a connection to that address closed
here. So what a node's P processes of the job hold at once is at least their listeners plus
their most connections to one address and port (measured, 3 nodes of a real gloo job: an 8-port
range holds 4 processes a node and not 5, a 4-port range 2 and not 3):

- listeners: gloo's one a process (its Device's Listener binds the device's address, port 0:
  gloo/transport/tcp/device.cc, listener.cc); NCCL's two a rank at least (bootstrap.cc: the
  bootstrap ring's beside the root's, then the proxy's; newer NCCL adds a third, for P2P);
- to one address and port: the job's store, where every rank's TCPStore client connects (and
  torchrun's agent's), or, where NCCL speaks sockets between nodes, one peer connection's
  NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS data sockets beside its control socket, all to
  the one listener the peer opened for it (transport/net_socket.cc; 0 data sockets unless set,
  but on AWS and GCP NICs).

The job opens far more connections than that (gloo's full mesh: one per pair of ranks, dialed by
the larger address), but connections to different peers share ports: the evidence says both
counts. A range short of the job fails it; one that the ports connections closed in the last
minute hold leaves short warns (the kernel releases them within TIME_WAIT_SECONDS).
"""

from __future__ import annotations

from dataclasses import dataclass

from netcheck.core.model import (
    FAIL,
    PASS,
    WARN,
    EphemeralPorts,
    Finding,
    Launch,
    Member,
    NodeFacts,
    hostnames,
    is_torchrun_worker,
)
from netcheck.rules.limits import layout
from netcheck.rules.pernode import node_names, ranks_note
from netcheck.rules.rdma import used_ports
from netcheck.rules.registry import HOST_PORTS, PORTS_ENDPOINT, PORTS_HELD, PORTS_TOO_FEW

TIME_WAIT_SECONDS = 60       # the kernel's TCP_TIMEWAIT_LEN: fixed, no setting changes it
GLOO_LISTENERS = 1           # a process's, a Device's one Listener
NCCL_LISTENERS = 2           # a rank's, at least: its bootstrap ring's, with the root's or the proxy's
NCCL_MAX_SOCKETS = 64        # net_socket.cc's MAX_SOCKETS: NSOCKS_PERTHREAD x SOCKET_NTHREADS is capped there
# The ports netcheck's own connections leave held (TIME-WAIT) for a minute on a node, its sweep
# aside: its store client's (torch's, to the endpoint, as the job's store clients go). Its reach
# probe and mesh dials reset their connections as they close (facts.probe.reset_on_close);
# measured on a node of one interface and a 4-port range: 1 port left in TIME-WAIT after a run
# without the sweep (3 before they reset, and the job started right after failed on gloo's bind).
OWN_PORTS = 1
DEFAULT_RANGE = "32768 60999"   # the kernel's default ip_local_port_range
RANGE_FIX = ("widen the range on {nodes}: `sysctl -w net.ipv4.ip_local_port_range=\"{range}\"` (the kernel's "
             "default; at least {need} ports), and in /etc/sysctl.d to keep it; reserve only the ports that must "
             "stay free (net.ipv4.ip_local_reserved_ports)")


@dataclass(frozen=True)
class Need:
    """The ports one node's share of the job holds at once, and what they are."""

    backend: str        # "gloo" or "NCCL": NCCL where the node has GPUs
    listeners: int      # each a port of its own
    to_one: int         # the most connections to one address and port
    to_what: str        # where those go

    @property
    def ports(self) -> int:
        return self.listeners + self.to_one


def need_of(m: Member, nodes: int | None) -> Need:
    """What m's node holds of the job: its launcher's processes (under torchrun, with the agent's
    own store client); nodes (None: not known yet) tells whether NCCL speaks sockets between nodes."""
    facts = m.facts
    procs = facts.launch.nproc_per_node
    store = procs + (1 if is_torchrun_worker(facts.launch) else 0)
    if not facts.gpus:
        return Need("gloo", GLOO_LISTENERS * procs, store, "the store")
    sockets = nccl_sockets(facts.socket_env) + 1 if nodes and nodes > 1 and not used_ports(m) else 0
    if sockets > store:
        return Need("NCCL", NCCL_LISTENERS * procs, sockets, "a peer's NCCL socket listener")
    return Need("NCCL", NCCL_LISTENERS * procs, store, "the store")


def nccl_sockets(env: dict[str, str]) -> int:
    """NCCL's data sockets per connection: NSOCKS_PERTHREAD x SOCKET_NTHREADS where both are set
    (one left to NCCL is chosen by the NIC's vendor: 0 threads but on AWS's and GCP's NICs)."""
    nsocks, nthreads = env.get("NCCL_NSOCKS_PERTHREAD", ""), env.get("NCCL_SOCKET_NTHREADS", "")
    if not (nsocks.isdigit() and nthreads.isdigit()):
        return 0
    return min(NCCL_MAX_SOCKETS, int(nsocks[:3]) * int(nthreads[:3]))


def own_size(launch: Launch) -> tuple[int | None, int | None]:
    """(ranks, nodes) of the job as a node's own launcher or flags give it (None: not known yet)."""
    nodes = launch.nnodes_max if launch.nnodes_max == launch.nnodes_min else None
    return (nodes * launch.nproc_per_node if nodes else None), nodes


@dataclass(frozen=True)
class Judged:
    """One node (under torchrun, a host's ranks together: they share its range and its launch)
    with its range and its share of the job."""

    ranks: tuple[int, ...]
    first: Member
    ports: EphemeralPorts
    need: Need
    usable: int          # the range less its reserved ports

    @property
    def short(self) -> bool:
        return self.need.ports > self.usable

    @property
    def held(self) -> bool:
        """The job fits only without the ports closed connections hold (others' now, netcheck's own after it)."""
        return not self.short and self.need.ports + self.ports.closing + OWN_PORTS > self.usable

    @property
    def sweep_short(self) -> bool:
        return self.need.ports * 2 + OWN_PORTS > self.usable - self.ports.closing


def judged(members: tuple[Member, ...], nodes: int | None) -> list[Judged]:
    """The members whose ranges were read, a node at a time, in rank order."""
    by_host: dict[str, list[Member]] = {}
    for m in members:
        if m.facts.ports is not None:
            by_host.setdefault(m.facts.hostname, []).append(m)
    return [Judged(tuple(m.rank for m in ms), ms[0], ports, need_of(ms[0], nodes), ports.usable)
            for ms in by_host.values() if (ports := ms[0].facts.ports) is not None]


def range_findings(members: tuple[Member, ...], endpoint_port: int | None,
                   size: tuple[int | None, int | None] | None = None) -> list[Finding]:
    """Every node's range against its share of the job, and (endpoint_port given) the endpoint's
    port against rank 0's range. size: (ranks, nodes) of the job where the members are not all of
    it (a node's own view in the local phase; nodes None: not known yet)."""
    ranks, nodes = size or layout(members)
    every = judged(members, nodes)
    if not every:
        return []
    names = hostnames(members)

    def evidence(group: list[Judged]) -> tuple[str, ...]:
        return tuple(f"{names.get(j.first.rank, j.first.facts.hostname)}{ranks_note(j.ranks)}: "
                     f"{_shown(j, ranks, nodes)}" for j in group)

    short, held = [j for j in every if j.short], [j for j in every if j.held]
    findings: list[Finding] = []
    if short:
        at = tuple(r for j in short for r in j.ranks)
        findings.append(Finding(
            check=HOST_PORTS, severity=FAIL, nodes=at,
            summary=f"the ephemeral port range of {node_names(at, names)} cannot hold the job's "
            f"sockets there ({_job(ranks, nodes, short[0].first.facts)}): {short[0].usable} usable ports, "
            f"{short[0].need.ports} held at once; the job's store clients there fail with EADDRNOTAVAIL (errno 99, "
            "retried until their timeout) and its listeners with EADDRINUSE", evidence=evidence(short),
            fix=RANGE_FIX.format(nodes=node_names(at, names), range=DEFAULT_RANGE,
                                 need=max(j.need.ports for j in short)), kind=PORTS_TOO_FEW))
    if held:
        at, first = tuple(r for j in held for r in j.ranks), held[0]
        findings.append(Finding(
            check=HOST_PORTS, severity=WARN, nodes=at,
            summary=f"the ephemeral port range of {node_names(at, names)} holds the job's sockets "
            f"({first.need.ports} at once of {first.usable} ports; {_job(ranks, nodes, first.first.facts)}) "
            f"only without the ports closed connections hold for a minute: {first.ports.closing} now, and about "
            f"{OWN_PORTS} of netcheck's own once it ends; a job started within that minute may be short of ports "
            "(EADDRNOTAVAIL, errno 99; gloo falls back to the loopback address)", evidence=evidence(held),
            fix=f"start the job a minute after netcheck (TIME-WAIT holds a closed connection's port "
            f"{TIME_WAIT_SECONDS} s, FIN-WAIT-2 up to net.ipv4.tcp_fin_timeout), or widen the range: " +
            RANGE_FIX.format(nodes=node_names(at, names), range=DEFAULT_RANGE,
                                 need=first.need.ports + first.ports.closing + OWN_PORTS), kind=PORTS_HELD))
    if not findings:
        findings.append(Finding(check=HOST_PORTS, severity=PASS, nodes=tuple(r for j in every for r in j.ranks),
                                summary=f"the ephemeral port ranges hold the job's sockets "
                                f"({_job(ranks, nodes, every[0].first.facts)})", evidence=evidence(every)))
    host = next((j for j in every if 0 in j.ranks), None)
    return findings + (_endpoint_findings(host.ports, endpoint_port, names) if host and endpoint_port else [])


def _endpoint_findings(ports: EphemeralPorts, port: int, names: dict[int, str]) -> list[Finding]:
    """The store listens on the endpoint's port when the job starts: a port of the host's range
    not reserved may be any connection's by then (each connect() draws from the range)."""
    if not ports.low <= port <= ports.high or any(s.low <= port <= s.high for s in ports.reserved):
        return []
    host = node_names((0,), names)
    return [Finding(check=HOST_PORTS, severity=WARN, nodes=(0,),
                    summary=f"the endpoint's port {port} lies in the ephemeral port range of "
                    f"{host} ({ports.low}-{ports.high}) and is not reserved: any connection there may take it "
                    "before the job's store listens on it, which then fails: Address already in use",
                    evidence=(f"{host}: ip_local_port_range {ports.low}-{ports.high}, the endpoint's port {port} "
                              "not in ip_local_reserved_ports",),
                    fix=f"reserve it on {host}: `sysctl -w net.ipv4.ip_local_reserved_ports={port}` (and in "
                    f"/etc/sysctl.d to keep it), or give --rdzv and the job a port outside {ports.low}-{ports.high}",
                    kind=PORTS_ENDPOINT)]


def sweep_short(members: tuple[Member, ...]) -> str:
    """Why netcheck's bandwidth sweep would leave a node's job short of ports ("" where it would
    not): the sweep's workers hold what the job holds, and their closed connections hold their
    ports for a minute after; beside netcheck's own, the job must still find its own after it."""
    short = [j for j in judged(members, layout(members)[1]) if j.sweep_short]
    if not short:
        return ""
    first = short[0]
    where = node_names([r for j in short for r in j.ranks], hostnames(members))
    return (f"the ephemeral port range of {where} ({first.usable - first.ports.closing} ports free) cannot "
            f"hold the sweep's workers ({first.need.ports} ports at once, as the job) and leave the job its own after "
            f"them: a closed connection holds its port {TIME_WAIT_SECONDS} s (host.ports)")


def _shown(j: Judged, ranks: int | None, nodes: int | None) -> str:
    """One node's line: its range, and the job's sockets there counted two ways."""
    ports, need, procs = j.ports, j.need, j.first.facts.launch.nproc_per_node
    reserved = ports.size - j.usable
    mesh = f", {procs} x {ranks - 1} connections of {need.backend}'s full mesh" if ranks and ranks > 1 else ""
    return (f"ip_local_port_range {ports.low}-{ports.high}: {ports.size} ports"
            + (f", {reserved} reserved" if reserved else "")
            + (f", {ports.closing} held by closed connections" if ports.closing else "")
            + f"; the job here: {procs} process(es){mesh}; held at once: {need.listeners} listener(s) "
            f"({need.backend}'s) + {need.to_one} connection(s) to {need.to_what} = {need.ports} port(s) "
            "(connections to different peers share ports)")


def _job(ranks: int | None, nodes: int | None, facts: NodeFacts) -> str:
    """The job's size as judged: ranks, nodes, processes per node."""
    procs = facts.launch.nproc_per_node
    if ranks is None or nodes is None:
        return f"{procs} process(es) on this node; the number of nodes not known yet"
    return f"the job judged: {ranks} ranks, {nodes} node(s) x {procs} process(es)"
