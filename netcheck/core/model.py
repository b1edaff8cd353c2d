"""The records every phase shares: facts a node gathers, findings the rules make, the report.

Data flows one way: facts (gathered per node, exchanged as JSON) -> findings (made by the
rules in `netcheck.rules`) -> `Report` (rendered by `netcheck.render`). Everything here is a plain frozen
dataclass so `codec` can write it and validate it on the way back in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from netcheck.core.bwrecords import BandwidthResult
from netcheck.core.constants import REPORT_SCHEMA
from netcheck.core.envfacts import EnvFacts
from netcheck.core.jobrecords import JobView
from netcheck.core.nictable import NicTable

PASS, WARN, FAIL = "pass", "warn", "fail"
SEVERITIES = (PASS, WARN, FAIL)


@dataclass(frozen=True)
class Launch:
    """Where this node's idea of the cluster came from, and what it is."""

    source: str                    # "flags" | "slurm" | "kubeflow" | "torchrun" | "arrival"
    node_rank: int | None          # the seat claimed: the node rank (under torchrun every
                                   # worker process takes part, seated by its RANK); None:
                                   # numbered in order of arrival
    nnodes_min: int | None         # None: unknown (arrival numbering, join window decides)
    nnodes_max: int | None
    nproc_per_node: int
    hostnames: tuple[str, ...] = ()  # expected hostnames by node rank, when the launcher lists them
    variables: dict[str, str] = field(default_factory=dict)  # the launcher variables seen


@dataclass(frozen=True)
class Probe:
    """One TCP connect to one resolved address of the rendezvous endpoint."""

    address: str
    family: str        # "ipv4" | "ipv6"
    outcome: str       # "open" | "not_store" | "refused" | "filtered" | "unreachable"
    detail: str        # the errno text or what the timeout was
    seconds: float


@dataclass(frozen=True)
class Reach:
    """A node's view of HOST:PORT before any torch code runs."""

    host: str
    port: int
    outcome: str                   # "open" | "not_store" | "refused" | "filtered" | "unreachable" | "dns"
    addresses: tuple[str, ...]     # every address HOST resolved to, all families
    resolve_error: str | None
    probes: tuple[Probe, ...]
    attempts: int
    seconds: float


@dataclass(frozen=True)
class Holder:
    """A process holding a port (psutil's view)."""

    pid: int | None
    name: str
    cmdline: str


@dataclass(frozen=True)
class NodeFacts:
    """What one node knows about itself, published at rendezvous."""

    run_id: str
    hostname: str
    fqdn: str
    hostname_addresses: tuple[str, ...]   # what gethostname() resolves to here
    launch: Launch
    shm_bytes: int | None
    gpus: int                             # NVIDIA GPUs the driver lists here (no torch needed)
    nics: NicTable
    socket_env: dict[str, str]            # NCCL_*/GLOO_*/TP_* as the libraries see them here
    reach: Reach | None                   # None on the host, which does not probe itself
    version: str


@dataclass(frozen=True)
class Resolution:
    """One node's lookup of another node's FQDN (torchrun hands that name out as MASTER_ADDR)."""

    rank: int
    name: str
    addresses: tuple[str, ...]
    error: str | None


@dataclass(frozen=True)
class ClockSample:
    offset: float      # peer clock minus host clock, seconds
    error: float       # half the round trip: the offset is exact within this


@dataclass(frozen=True)
class NodeResults:
    """What a node learnt once it saw the roster."""

    clock: ClockSample | None
    resolutions: tuple[Resolution, ...]


@dataclass(frozen=True)
class Member:
    """One node of the cluster as the host saw it."""

    rank: int
    facts: NodeFacts
    results: NodeResults | None = None   # None: the node never reported back
    env: EnvFacts | None = None          # None: the env phase did not run or heard nothing

    @property
    def address(self) -> str:
        return node_address(self.facts)


def hostnames(members) -> dict[int, str]:
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

    run_id: str
    hostname: str
    node_rank: int | None


@dataclass(frozen=True)
class Gathering:
    """Everything the rendezvous learnt, as input for the rules."""

    members: tuple[Member, ...]
    expected: int | None                  # nodes the launcher asked for, when fixed
    missing_ranks: tuple[int, ...]
    expected_hostnames: tuple[str, ...]   # by rank, when the launcher listed them
    duplicates: dict[str, tuple[str, ...]]  # claimed rank -> hostnames claiming it
    unseated: tuple[str, ...]             # nodes that came but got no rank, and why
    foreign: tuple[Visitor, ...]
    malformed: tuple[str, ...]            # what was wrong with entries that were thrown away
    waited: float


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str                  # PASS | WARN | FAIL
    nodes: tuple[int, ...]         # node ranks at fault (for pass: the ranks checked)
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str = ""
    kind: str = ""                 # which exact case of the check (rules.registry); "" when the id says it


@dataclass(frozen=True)
class ClusterVerdict:
    """The host's verdict as it tells the joiners before they leave: its failures and warnings,
    so that a node the host finds faulty learns it (its exit code and its pod's status)."""

    verdict: str                   # the host's: PASS | WARN | FAIL
    headline: str                  # one line: the first failure or warning, and how many more
    findings: tuple[Finding, ...]  # in the message, every failure and warning (bounded); in a
                                   # joiner's report, those that name its own ranks


@dataclass(frozen=True)
class EnvRow:
    """One row of the env table: a key, one of its values, and the nodes that have it."""

    key: str
    value: str
    ranks: tuple[int, ...]
    nodes: str          # "node3", "the other 7", "all 8"
    severity: str       # fail | warn | info for a differing key; "same" when every node agrees


@dataclass(frozen=True)
class NodeEntry:
    rank: int
    hostname: str
    address: str
    facts: NodeFacts | None
    env: EnvFacts | None = None


@dataclass(frozen=True)
class Report:
    run_id: str
    node_rank: int | None
    role: str                      # "host" | "joiner" | "local" | "probe" | "inspect"
    verdict: str
    nodes: tuple[NodeEntry, ...]
    findings: tuple[Finding, ...]
    recommend: dict[str, str]                     # variable -> value, for every node
    recommend_per_node: dict[str, dict[str, str]]  # hostname -> variable -> value
    env_table: tuple[EnvRow, ...]                 # differing keys; every key with -v
    bandwidth: BandwidthResult | None             # None: the bandwidth phase did not run
    timings: dict[str, float]
    unfinished: str | None         # the phase that did not finish, if any
    healthy_nodes: tuple[str, ...]
    faulty_nodes: tuple[str, ...]
    recommend_note: str = ""       # why there are no settings to recommend, when there are none
    job: JobView | None = None     # netcheck inspect: what the job's store and NCCL's RAS showed
    cluster: ClusterVerdict | None = None  # a joiner's: the host's verdict, when it was heard
    schema: str = REPORT_SCHEMA


def verdict_of(findings: tuple[Finding, ...] | list[Finding]) -> str:
    severities = {f.severity for f in findings}
    return FAIL if FAIL in severities else WARN if WARN in severities else PASS


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
