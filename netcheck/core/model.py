"""The records every phase shares: facts a node gathers, findings the rules make, the report.

Data flows one way: facts (gathered per node, exchanged as JSON) -> findings (made by the
rules in `netcheck.rules`) -> `Report` (rendered by `netcheck.render`). Everything here is a plain frozen
dataclass so `codec` can write it and validate it on the way back in.

Longer than 500 lines: the report and the records it is made of (facts, findings, attribution,
verdict) are read together by every layer, and one module keeps each record's name one import away.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from netcheck.core.bwrecords import BandwidthResult
from netcheck.core.constants import EXIT_BY_FAULT, EXIT_BY_VERDICT, PHASES, REPORT_SCHEMA, STOP_SIGNALS
from netcheck.core.envfacts import EnvFacts
from netcheck.core.fields import (
    FEW,
    MAX_INT,
    PER_NODE,
    PER_NODE_AND_ITEM,
    SHARED,
    Bytes,
    ClockOffset,
    Count,
    Host,
    Hostname,
    IfName,
    IpAddress,
    NodeAddress,
    NodeCount,
    NodeRank,
    NodeRankOrMinusOne,
    Pid,
    Port,
    ProcCount,
    Range,
    RunId,
    Seconds,
    Text,
    WholeNumbersAt,
    one_of,
)
from netcheck.core.hangrecords import HangView
from netcheck.core.jobrecords import JobView
from netcheck.core.nictable import FAMILIES, NicTable
from netcheck.core.rdmarecords import RdmaFacts

PASS, WARN, FAIL = "pass", "warn", "fail"
# Who wrote a report: the rendezvous host (the cluster's report), a joiner (its own view), or
# one of the subcommands that speak for this node alone.
ROLES = HOST, JOINER, LOCAL, PROBE, INSPECT = ("host", "joiner", "local", "probe", "inspect")
Role = Annotated[str, one_of(*ROLES)]
SEVERITIES = (PASS, WARN, FAIL)
Severity = Annotated[str, one_of(*SEVERITIES)]
# A probe's answer; the rules hold a fix for each (rules.reach.REACH_FIXES).
PROBE_OUTCOMES = ("open", "not_store", "refused", "filtered", "unreachable")
REACH_OUTCOMES = PROBE_OUTCOMES + ("dns",)
UNANSWERED = ("filtered", "unreachable")   # a connect nothing answered: the route and neighbour tell why
NOBODY_ANSWERED = ("FAILED", "INCOMPLETE")   # the neighbour table's states where ARP / NDP got no reply
UNANSWERED_HANDSHAKE = "no answer to the TCPStore handshake"   # a not_store probe's detail: silent, not garbage
UNANSWERED_LOOKUP = "no answer to the lookup"   # a lookup netcheck stopped waiting for: no word on the name
Family = Annotated[str, one_of(*FAMILIES)]
Hostnames = Annotated[tuple[Hostname, ...], PER_NODE]
NodeRanks = Annotated[tuple[NodeRank, ...], PER_NODE]   # e.g. the nodes no peer reaches
# Launcher variables that hold a whole number, as the rules read them (facts.launcher's lists).
NUMBER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "SLURM_NNODES",
                    "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "PET_NODE_RANK")
# What every node of one job must agree on, recorded whatever the launcher (launch.env).
JOB_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")
# Whom a finding stops in the job (docs/contract.md, "Promises"): the parts of a job a finding can
# speak for, and how. Like the severities, the registry declares each check's (rules.registry,
# with what each means); a rule may narrow one finding's to what this run shows.
PARTS = LAUNCH, STORE, GLOO, NCCL_SOCKET, NCCL_RDMA, SPEED = (
    "launch", "store", "gloo", "nccl_socket", "nccl_rdma", "speed")
EFFECTS = STOPS, SLOWS, RISKS, NOTHING = ("stops", "slows", "risks", "nothing")
# The one launch form a finding about the launch may speak for alone: torchrun's c10d rendezvous
# (--rdzv-backend c10d) keys its nodes by --rdzv-id and hands its workers rank 0's FQDN; a launch
# given the master's address and each node's rank (static) meets neither.
LAUNCH_FORMS = (C10D,) = ("c10d",)


@dataclass(frozen=True)
class Launch:
    """Where this node's idea of the cluster came from, and what it is."""

    source: str                    # "flags" | "slurm" | "kubeflow" | "torchrun" | "arrival"
    node_rank: NodeRank | None     # the seat claimed: the node rank (under torchrun every
                                   # worker process takes part, seated by its RANK); None:
                                   # numbered in order of arrival
    nnodes_min: NodeCount | None   # None: unknown (arrival numbering, join window decides)
    nnodes_max: NodeCount | None
    nproc_per_node: ProcCount
    # expected hostnames by node rank, when the launcher lists them (Slurm: every node's copy alike)
    hostnames: Annotated[Hostnames, SHARED] = ()
    # the launcher variables seen
    variables: Annotated[dict[str, Text], FEW, WholeNumbersAt(NUMBER_VARIABLES)] = field(default_factory=dict)


def is_torchrun_worker(launch: Launch) -> bool:
    return launch.source == "torchrun"


@dataclass(frozen=True)
class LinkPrefix:
    """What the link itself says its subnet is, besides the prefix the node is configured with:
    a prefix its router advertises (IPv6, the kernel's `proto ra` route), the address and mask
    of its DHCP lease (IPv4). Read where an address on-link by the node's own prefix went
    unanswered: a narrower subnet that holds the node and not that address is the evidence of a
    prefix wider than the subnet's."""

    network: Text   # the subnet, e.g. "2001:2::/64", or the lease's address with its mask, "10.1.2.7/24"
    source: Text    # what says so: "its router's advertisement", "its DHCP lease"
    detail: Text = ""   # where it was read: the kernel's route, the lease file and its fields


@dataclass(frozen=True)
class Route:
    """The kernel's way to an address that did not answer a connect (ip route get, ip neigh):
    what tells "no machine there" (ARP / NDP unanswered) from "a machine that drops the port"."""

    interface: IfName
    source: IpAddress | None
    gateway: IpAddress | None            # None: the address is on the interface's own subnet
    neighbour_state: Text                # the kernel's word for the next hop (FAILED, REACHABLE, ...), or ""
    # Other interfaces with a route to the address's subnet, the route not taken (a second NIC on it).
    shared: Annotated[tuple[IfName, ...], FEW] = ()
    # Where the route is on-link: the subnet that puts the address there (the interface's prefix),
    # and this node's default gateway, if it has one (a router the address could be behind).
    subnet: Text | None = None
    router: IpAddress | None = None
    # Where the route is on-link and no machine answered: what the link says its subnet is
    # (a router's advertised prefix, a DHCP lease), each with where it was read.
    link: Annotated[tuple[LinkPrefix, ...], FEW] = ()

    @property
    def nobody_answered(self) -> bool:
        """ARP / NDP asked for the next hop and nothing answered (INCOMPLETE: still asking after
        the whole probe timeout)."""
        return self.neighbour_state in NOBODY_ANSWERED


@dataclass(frozen=True)
class Probe:
    """One TCP connect to one resolved address of the rendezvous endpoint."""

    address: IpAddress
    family: Family
    outcome: Annotated[str, one_of(*PROBE_OUTCOMES)]
    detail: Text       # the errno text or what the timeout was
    seconds: Seconds
    route: Route | None = None   # read where the connect went unanswered (filtered, unreachable)
    source: IpAddress | None = None   # this node's own address the connect left from (open)


@dataclass(frozen=True)
class Reach:
    """A node's view of HOST:PORT before any torch code runs."""

    host: Host
    port: Port
    outcome: Annotated[str, one_of(*REACH_OUTCOMES)]
    addresses: Annotated[tuple[IpAddress, ...], FEW]   # every address HOST resolved to, all families
    resolve_error: Text | None
    probes: Annotated[tuple[Probe, ...], FEW]
    attempts: Count
    seconds: Seconds
    named_in: Text = ""   # where HOST's address came from: "/etc/hosts line N", "DNS", "" for an address
    resolve_seconds: Seconds = 0.0   # how long the lookup of HOST took (to its answer, or to its bound)


@dataclass(frozen=True)
class SilentNameserver:
    """A nameserver this node's resolver asks that did not answer netcheck's query: every name
    lookup /etc/hosts cannot answer waits for it (torch's store client makes one per connect)."""

    address: IpAddress
    source: Text             # the file that names it
    waited: Seconds          # how long netcheck's query waited
    lookup_wait: Seconds     # what one lookup waits for it: the resolver's timeout x attempts
    # The kernel's way to it, read once it went unanswered: where ARP / NDP got no reply, no
    # machine is there to answer (a wrong prefix, a second NIC on its subnet), not a silent server.
    route: Route | None = None


@dataclass(frozen=True)
class SlowNameserver:
    """A nameserver this node's resolver asks that answered netcheck's query, but SLOW_LOOKUP or
    later: every lookup /etc/hosts cannot answer waits about this long for it, torch's store's
    lookup of each connection's address included."""

    address: IpAddress
    source: Text             # the file that names it
    seconds: Seconds         # how long its answer took


@dataclass(frozen=True)
class Holder:
    """A process holding a port (psutil's view)."""

    pid: Pid | None
    name: Text         # the process's own choice (prctl PR_SET_NAME): any bytes
    cmdline: Text


Limit = Annotated[int, Range(-1, MAX_INT, "a resource limit")]   # -1: unlimited (RLIM_INFINITY)


@dataclass(frozen=True)
class ProcessLimits:
    """This process's resource limits as the job's processes will have them: read before
    netcheck changes any (it raises its own descriptor limit to keep a connection to each node).
    A torchrun worker's are its agent's, which the training processes inherit too. The
    kernel's bounds on a listening socket's accept queue beside them (None: unreadable)."""

    nofile: Limit              # soft: what a process may open before EMFILE
    nofile_hard: Limit         # what it may raise its soft limit to unprivileged
    memlock: Limit             # soft, bytes: what RDMA may register (ibv_reg_mr)
    stack: Limit               # soft, bytes: glibc gives new threads this much
    somaxconn: Count | None    # net.core.somaxconn: a listen backlog's cap
    syn_backlog: Count | None  # net.ipv4.tcp_max_syn_backlog: half-open connections' cap


@dataclass(frozen=True)
class PortSpan:
    """The ports low..high, both included."""

    low: Port
    high: Port


@dataclass(frozen=True)
class EphemeralPorts:
    """The ports this node's kernel gives a socket that asks for none (a connect() before any
    bind, a bind to port 0), as this node's network namespace has them, read before netcheck
    opened a socket. IPv6 sockets take theirs from the same net.ipv4 settings."""

    low: Port                  # net.ipv4.ip_local_port_range
    high: Port
    # ip_local_reserved_ports inside the range (never given out), as spans
    reserved: Annotated[tuple[PortSpan, ...], FEW] = ()
    # ports of the range a connection closed but not yet released holds (/proc/net/tcp and
    # tcp6: TIME-WAIT, 60 s in the kernel; FIN-WAIT-2, up to net.ipv4.tcp_fin_timeout)
    closing: Count = 0
    fin_timeout: Seconds | None = None   # net.ipv4.tcp_fin_timeout (None: unreadable)

    @property
    def size(self) -> int:
        return max(0, self.high - self.low + 1)

    @property
    def usable(self) -> int:
        """The ports of the range the kernel gives out: the range less its reserved ports."""
        return max(0, self.size - sum(max(0, s.high - s.low + 1) for s in self.reserved))


@dataclass(frozen=True)
class TcpMem:
    """net.ipv4.tcp_rmem or tcp_wmem: a TCP socket's buffer, bytes, at its least, when it opens,
    and the most the kernel's autotuning grows it to (a socket that sets SO_RCVBUF / SO_SNDBUF
    is no longer tuned: net.core.rmem_max / wmem_max bound it instead)."""

    min: Bytes
    default: Bytes
    max: Bytes


@dataclass(frozen=True)
class SocketBuffers:
    """The bounds on a TCP connection's buffers in this node's network namespace, as the job's
    sockets meet them (netcheck sets no sysctl): they bound the bytes one connection has in
    flight, so what it carries in a round trip."""

    rmem: TcpMem                 # net.ipv4.tcp_rmem
    wmem: TcpMem                 # net.ipv4.tcp_wmem
    rmem_max: Bytes | None       # net.core.rmem_max: the most SO_RCVBUF gets (None: unreadable)
    wmem_max: Bytes | None       # net.core.wmem_max: the most SO_SNDBUF gets
    window_scaling: bool         # net.ipv4.tcp_window_scaling: off, a window is at most 64 KiB
    moderate_rcvbuf: bool        # net.ipv4.tcp_moderate_rcvbuf: off, a receive buffer stays at rmem.default


@dataclass(frozen=True)
class ConntrackTable:
    """This node's connection-tracking table (netfilter's nf_conntrack), as its network namespace
    has it: where a stateful firewall or NAT runs, every connection in or out takes an entry, and
    a new connection that finds the table at its limit (and no unanswered entry to evict) is
    dropped unanswered. The count is the namespace's own; the limit is the machine's, set in its
    initial namespace and read-only in the others."""

    count: Count                      # net.netfilter.nf_conntrack_count: entries now
    limit: Count                      # net.netfilter.nf_conntrack_max (0: no limit)
    # /proc/net/stat/nf_conntrack, summed over the CPUs (None: unreadable): packets dropped as no
    # entry could be made for them, entries evicted to make room, entries that failed to go in
    drop: Count | None = None
    early_drop: Count | None = None
    insert_failed: Count | None = None

    @property
    def full(self) -> bool:
        return 0 < self.limit <= self.count


@dataclass(frozen=True)
class NodeFacts:
    """What one node knows about itself, published at rendezvous."""

    run_id: RunId
    hostname: Hostname
    fqdn: Host
    hostname_addresses: Annotated[tuple[IpAddress, ...], FEW]   # what gethostname() resolves to here
    launch: Launch
    shm_bytes: Bytes | None
    gpus: Count                           # NVIDIA GPUs the driver lists here (no torch needed)
    nics: Annotated[NicTable, SHARED]     # a torchrun node's workers each read the same
    socket_env: Annotated[dict[str, Text], FEW]   # NCCL_*/GLOO_*/TP_* as the libraries see them here
    reach: Reach | None                   # None on the host, which does not probe itself
    version: str
    rdma: RdmaFacts | None = None         # RDMA ports, GPU-NIC placement, libnccl; None: not read
    instance: Text = ""                   # drawn at random by this process: facts sharing one are a copy
    limits: Annotated[ProcessLimits | None, SHARED] = None   # None: not read (another version)
    ports: Annotated[EphemeralPorts | None, SHARED] = None   # None: not read (another version, no /proc)
    # None: no table to read (nf_conntrack not loaded: nothing tracked), or another version
    conntrack: Annotated[ConntrackTable | None, SHARED] = None
    # socket_env's keys that are not the environment's -> the file they came from (/etc/nccl.conf)
    socket_env_from: Annotated[dict[str, Text], FEW] = field(default_factory=dict)
    buffers: Annotated[SocketBuffers | None, SHARED] = None   # None: not read (another version, no /proc)


@dataclass(frozen=True)
class Resolution:
    """One node's lookup of another node's FQDN (torchrun hands that name out as MASTER_ADDR)."""

    rank: NodeRank
    name: Host
    addresses: Annotated[tuple[IpAddress, ...], FEW]
    error: Text | None


@dataclass(frozen=True)
class ClockSample:
    offset: ClockOffset  # peer clock minus host clock, seconds
    error: Seconds       # half the round trip: the offset is exact within this


@dataclass(frozen=True)
class NodeResults:
    """What a node learnt once it saw the roster."""

    clock: ClockSample | None
    resolutions: Annotated[tuple[Resolution, ...], PER_NODE]


@dataclass(frozen=True)
class Member:
    """One node of the cluster as the host saw it."""

    rank: NodeRankOrMinusOne             # -1: this node, not seated
    facts: NodeFacts
    results: NodeResults | None = None   # None: the node never reported back
    env: EnvFacts | None = None          # None: the env phase did not run or heard nothing

    @property
    def address(self) -> str:
        return node_address(self.facts)


def hostnames(members: Iterable[Member]) -> dict[int, str]:
    """rank -> hostname of the given members."""
    return {m.rank: m.facts.hostname for m in members}


def node_address(facts: NodeFacts) -> str:
    """The address peers reach a node at: its default-route interface's, else its name's."""
    for nic in facts.nics.nics:
        if nic.name == facts.nics.default_route_ifname and nic.addresses:
            return nic.addresses[0].address
    return facts.hostname_addresses[0] if facts.hostname_addresses else ""


@dataclass(frozen=True)
class Visitor:
    """Someone who talked to the store: a node of ours, another run's, or garbage."""

    run_id: RunId
    hostname: Hostname
    node_rank: NodeRank | None
    address: IpAddress | None = None   # the address its connection to the endpoint left from, as it sees it


@dataclass(frozen=True)
class StoreStall:
    """The host's own store request unanswered for `seconds` (torch's store serves everyone on
    one thread, and looks up each connection's name there), and who was connected to the
    store's port meanwhile: address -> connections, as the host's /proc/net/tcp showed them."""

    request: str
    seconds: float
    peers: dict[str, int]


@dataclass(frozen=True)
class Gathering:
    """Everything the rendezvous learnt, as input for the rules."""

    members: Annotated[tuple[Member, ...], PER_NODE]
    expected: NodeCount | None            # nodes the launcher asked for, when fixed
    missing_ranks: Annotated[tuple[NodeRank, ...], PER_NODE]
    expected_hostnames: Hostnames         # by rank, when the launcher listed them
    duplicates: Annotated[dict[str, Hostnames], PER_NODE]  # claimed rank -> hostnames claiming it
    unseated: Annotated[tuple[Text, ...], PER_NODE]   # nodes that came but got no rank, and why
    foreign: Annotated[tuple[Visitor, ...], PER_NODE]
    malformed: Annotated[tuple[Text, ...], PER_NODE]  # what was wrong with entries thrown away
    waited: Seconds
    interference: Annotated[tuple[Text, ...], PER_NODE] = ()  # "KEY what another client left there"
    # missing rank -> "HOSTNAME: why its facts were refused", where its visitor record names it
    refused: Annotated[dict[str, Text], PER_NODE] = field(default_factory=dict)
    # nodes that came (their visitor record did) whose facts never did: the claim of a missing
    # rank, or of none (the one-shot form)
    facts_lost: Annotated[tuple[Visitor, ...], PER_NODE] = ()
    # seated ranks whose facts another client also wrote under an arrival of its own (a copy)
    copied: Annotated[tuple[NodeRank, ...], PER_NODE] = ()


@dataclass(frozen=True)
class Impact:
    """What a finding does to the job: the parts it stops, slows or risks (on), and how
    (effect); `why`, where a rule narrowed its check's to this run, says why in its words;
    `form`, where only one launch form meets it (LAUNCH_FORMS), that form ("": every form)."""

    on: Annotated[tuple[Annotated[str, one_of(*PARTS)], ...], FEW]   # () with effect nothing
    effect: Annotated[str, one_of(*EFFECTS)]
    why: Text = ""
    form: Annotated[str, one_of("", *LAUNCH_FORMS)] = ""


# Keyword-only: four of its fields are strings side by side, which a positional call would swap unseen.
@dataclass(frozen=True, kw_only=True)
class Finding:
    check: str
    severity: Severity
    # node ranks at fault (for pass: the ranks checked)
    nodes: Annotated[tuple[NodeRankOrMinusOne, ...], PER_NODE]
    summary: Text
    # a line per node, or per direction of the mesh (a node and each peer it tried: 40,922
    # at 4,096 sampled nodes), so the report a large cluster writes reads back (--baseline)
    evidence: Annotated[tuple[Text, ...], PER_NODE_AND_ITEM] = ()
    fix: Text = ""
    kind: str = ""                 # which exact case of the check (rules.registry); "" when the id says it
    # whom it stops: the registry's for its check and kind (registry.impacted, as a report is
    # made), unless its rule narrowed it; None only in a report written before it was said
    impact: Impact | None = None
    # Where the nodes named are more than the nodes at fault: the node ranks of the cause (a node
    # whose inbound firewall drops a peer's connects, a stale name on the node that looks it up),
    # the others named having only met its symptom; None where every node named is at fault.
    cause_nodes: Annotated[tuple[NodeRankOrMinusOne, ...], PER_NODE] | None = None


# Whose fault a run's failures are (docs/contract.md, "Promises"), each with its exit code
# (core.constants.EXIT_BY_FAULT): nobody (a pass, or warnings only), this node, other nodes (named;
# this one is healthy), the cluster as a whole (no node singled out), or netcheck itself (an internal
# error, its own deadline, a stop).
FAULT_PARTIES = NOBODY, THIS_NODE, OTHER_NODES, WHOLE_CLUSTER, NETCHECK = (
    "nobody", "this_node", "other_nodes", "cluster", "netcheck")


@dataclass(frozen=True)
class Stall:
    """The longest stretch this node's run stood still: wall time with no CPU time in it (its
    processes stopped, its machine paused or starved), and when it began in the run."""

    seconds: float = 0.0
    at: float = 0.0    # seconds into the run


@dataclass(frozen=True)
class Attribution:
    """Whose fault this run's failures are, from this node's seat: what its exit code says, so
    that a launcher's gate drains only the node at fault (rules.fault decides it)."""

    party: Annotated[str, one_of(*FAULT_PARTIES)]
    nodes: Annotated[tuple[NodeRankOrMinusOne, ...], PER_NODE]   # the node ranks at fault (-1: this node, unseated)
    hostnames: Hostnames       # the nodes at fault by name, where known (the report's faulty_nodes)
    why: Text = ""             # the first failure that makes it so: "check: summary"


@dataclass(frozen=True)
class ClusterVerdict:
    """The host's verdict as it tells the joiners before they leave: its failures and warnings,
    so that a node the host finds faulty learns it (its exit code and its pod's status)."""

    verdict: Severity              # the host's
    headline: Text                 # one line: the first failure or warning, and how many more
    findings: Annotated[tuple[Finding, ...], FEW]  # in the message, every failure and warning (bounded); in a
                                   # joiner's report, those that name its own ranks
    # A host stopped by a signal tells it on its way out: the run did not finish, and no node is at
    # fault for that. The signal ("" when the host finished) and the phase it came in.
    stopped: Annotated[str, one_of("", *STOP_SIGNALS)] = ""
    stopped_in: Annotated[str, one_of("", *PHASES, "goodbye")] = ""
    # Whose fault the host found the failures (its party is the host's own: this_node is the host),
    # so that a healthy joiner names the nodes at fault, not only its own findings; None from a host
    # that did not say it.
    fault: Attribution | None = None


@dataclass(frozen=True)
class EnvRow:
    """One row of the env table: a key, one of its values, and the nodes that have it."""

    key: str
    value: Text
    ranks: Annotated[tuple[NodeRankOrMinusOne, ...], PER_NODE]
    nodes: str          # "node3", "the other 7", "all 8"
    severity: str       # fail | warn | info for a differing key; "same" when every node agrees


@dataclass(frozen=True)
class NodeEntry:
    rank: NodeRankOrMinusOne       # -1: this node, not seated
    hostname: Hostname
    address: NodeAddress
    facts: NodeFacts | None        # None: never came, or held by the rank facts_as names
    env: EnvFacts | None = None
    # Under torchrun, the lowest rank of this rank's node whose entry holds the facts and env this
    # rank's are (but for its own launch, probe and reading times): a node's account once, not 8
    # times (a report of 100,000 ranks was 388 MB). None: this entry holds its own.
    facts_as: NodeRank | None = None


def with_facts(nodes: tuple[NodeEntry, ...]) -> tuple[NodeEntry, ...]:
    """nodes, each holding its facts and env: those written once a node filled in from the
    entry that holds them."""
    held = {n.rank: n for n in nodes if n.facts_as is None}
    return tuple(n if n.facts_as is None or n.facts_as not in held else
                 replace(n, facts=held[n.facts_as].facts, env=held[n.facts_as].env) for n in nodes)


@dataclass(frozen=True)
class Report:
    run_id: str                    # a run id, or inspect's: torchrun's, whatever it is
    node_rank: NodeRank | None
    role: Role
    verdict: Severity
    nodes: Annotated[tuple[NodeEntry, ...], PER_NODE]
    findings: Annotated[tuple[Finding, ...], PER_NODE_AND_ITEM]
    recommend: Annotated[dict[str, str], FEW]     # variable -> value, for every node
    # hostname -> variable -> value
    recommend_per_node: Annotated[dict[Hostname, Annotated[dict[str, str], FEW]], PER_NODE]
    env_table: Annotated[tuple[EnvRow, ...], PER_NODE_AND_ITEM]   # differing keys; every key with -v
    bandwidth: BandwidthResult | None             # None: the bandwidth phase did not run
    timings: Annotated[dict[str, Seconds], FEW]
    unfinished: str | None         # the phase that did not finish, if any
    healthy_nodes: Hostnames
    faulty_nodes: Hostnames
    recommend_note: Text = ""       # why there are no settings to recommend, when there are none
    job: JobView | None = None     # netcheck inspect: what the job's store and NCCL's RAS showed
    cluster: ClusterVerdict | None = None  # a joiner's: the host's verdict, when it was heard
    hang: HangView | None = None   # netcheck inspect --traces: the ranks' flight recorders
    # Whose fault the failures are, as the exit code says it; None for inspect's and probe's reports
    # (their exit code is the verdict's) and in a report written before it was said.
    fault: Attribution | None = None
    schema: str = REPORT_SCHEMA


def report_of(role: str, run_id: str, node_rank: int | None, findings: tuple[Finding, ...],
              timings: dict[str, float], **parts: Any) -> Report:
    """The one way a Report is made: its verdict from its findings, and what the run did not
    reach (nodes, recommendations, bandwidth...) empty unless given."""
    empty: dict[str, Any] = dict(nodes=(), recommend={}, recommend_per_node={}, env_table=(), bandwidth=None,
                                 unfinished=None, healthy_nodes=(), faulty_nodes=())
    return Report(run_id=run_id, node_rank=node_rank, role=role, verdict=verdict_of(findings), findings=findings,
                  timings=timings, **{**empty, **parts})


def verdict_of(findings: tuple[Finding, ...] | list[Finding]) -> str:
    severities = {f.severity for f in findings}
    return FAIL if FAIL in severities else WARN if WARN in severities else PASS


def exit_of(report: Report) -> int:
    """The exit code a report gives: whose fault its failures are where it says (a run's, `netcheck
    local`'s), else its verdict's (probe's, inspect's, a report written before the fault was said)."""
    fault = report.fault
    return EXIT_BY_FAULT[fault.party] if fault is not None and fault.party != NOBODY \
        else EXIT_BY_VERDICT[report.verdict]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
