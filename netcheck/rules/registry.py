"""Every check netcheck reports, in one table: the single source of check ids and kinds.
Longer than 500 lines: the table is the point, one place to read every id, kind, rule and test;
the judges that run its rules over each stage's records are its other half (registry_judges).

A check id leads here, and from here in one hop each to the rules that build its findings
(`rules`, functions of netcheck.rules: every function that builds a Finding is listed), the
facts they read and the tests that create its fault. A finding's `kind` tells apart the exact
cases one id covers ("never joined", "lost during bandwidth"), so that tests, `--baseline` and
monitoring never parse a summary; each kind declares the severities it can say. Each check
declares whom its findings stop in the job (its `impact`: the launch, the store, gloo, NCCL over
sockets or RDMA, the job's speed; stops, slows or risks), a kind where it differs, and a rule may
narrow one finding's to what the run shows (a direction gloo never dials). Check ids and
kinds are a public contract (README, JSON, runbooks): add, never rename. `netcheck checks`
prints this table; tests/test_registry.py holds the schema, the README, the rules' source (a
Finding built outside a listed rule, or of a kind or severity not declared) and the ids the
suite sees emitted to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from netcheck.core.model import (
    C10D,
    FAIL,
    GLOO,
    LAUNCH,
    NCCL_RDMA,
    NCCL_SOCKET,
    NOTHING,
    PASS,
    RISKS,
    SLOWS,
    SPEED,
    STOPS,
    STORE,
    WARN,
    Finding,
    Impact,
)
from netcheck.core.names import IFNAME_MAX_BYTES

RDZV_RESOLVE = "rdzv.resolve"
RDZV_REACH = "rdzv.reach"
RDZV_LISTEN = "rdzv.listen"
RDZV_JOIN = "rdzv.join"
RDZV_FQDN = "rdzv.fqdn"
HOST_CLOCK = "host.clock"
MESH_CONNECT = "mesh.connect"
NIC_ROUTE = "nic.route"
NIC_NCCL_DEFAULT = "nic.nccl_default"
NIC_GLOO_DEFAULT = "nic.gloo_default"
NIC_TP_DEFAULT = "nic.tp_default"
NIC_MTU = "nic.mtu"
NIC_SPEED = "nic.speed"
NIC_IB = "nic.ib"
ENV_MISMATCH = "env.mismatch"
HOST_LIMITS = "host.limits"
HOST_PORTS = "host.ports"
HOST_BUFFERS = "host.buffers"
HOST_CONNTRACK = "host.conntrack"
GPU_BUILD = "gpu.build"
HOST_SHM = "host.shm"
ENV_FLIGHT_RECORDER = "env.flight_recorder"
LAUNCH_TOPOLOGY = "launch.topology"
LAUNCH_ENDPOINT = "launch.endpoint"
LAUNCH_ENV = "launch.env"
BW_STAGE = "bw.stage"
BW_WRONG = "bw.wrong"
BW_BUSBW = "bw.busbw"
BW_PAIR = "bw.pair"
BW_STRAGGLER = "bw.straggler"
HOST_BUSY = "host.busy"
LINK_HEALTH = "link.health"
BASELINE_DRIFT = "baseline.drift"
RUN_SKIPPED = "run.skipped"
JOB_STORE = "job.store"
JOB_RDZV = "job.rdzv"
JOB_HEARTBEAT = "job.heartbeat"
JOB_RANKS = "job.ranks"
JOB_NCCL = "job.nccl"
JOB_HOSTILE = "job.hostile"
JOB_HANG = "job.hang"
RUN_TIMEOUT = "run.timeout"
RUN_STOPPED = "run.stopped"
RUN_CLUSTER = "run.cluster"
RUN_TORCH = "run.torch"
RUN_INTERNAL = "run.internal"
RDMA_PORT = "rdma.port"
RDMA_GID = "rdma.gid"
RDMA_MTU = "rdma.mtu"
RDMA_GPUDIRECT = "rdma.gpudirect"
RDMA_PCIE = "rdma.pcie"
RDMA_LIBNCCL = "rdma.libnccl"

# rdzv.join's exact findings.
JOIN_MISSING = "missing"
JOIN_ALONE = "alone"
JOIN_DUPLICATE = "duplicate_rank"
JOIN_UNSEATED = "unseated"
JOIN_LATE = "late"
JOIN_FOREIGN = "foreign_run"
JOIN_MALFORMED = "malformed"
JOIN_FAILED = "join_failed"
JOIN_NOT_SEATED = "not_seated"
JOIN_LEFT_BEHIND = "left_behind"
JOIN_SAME_NAME = "duplicate_hostname"
JOIN_INTERFERENCE = "interference"
JOIN_FACTS_LOST = "facts_lost"
JOIN_STORE_STALLED = "store_stalled"
LOST_PHASES = ("rendezvous", "mesh", "env", "bandwidth", "goodbye")

# rdzv.resolve's, rdzv.reach's and rdzv.listen's exact findings.
RESOLVE_SILENT = "resolver_silent"
RESOLVE_SLOW = "resolver_slow"
RESOLVE_ON_HOST = "unresolved_on_rank0"
RESOLVE_NO_MACHINE = "nameserver_no_machine"
REACH_NOT_STORE = "not_store"
REACH_NO_MACHINE = "no_machine"
REACH_WRONG_PREFIX = "prefix_too_wide"
REACH_SHARED_SUBNET = "shared_subnet"
MTU_PATH = "path_mtu"   # nic.mtu's: a path narrower than its ends
BW_CUT_FLOW = "cut_flow"   # bw.stage's: a connection reset on the way between two live nodes
BW_UNANSWERED = "unanswered"   # bw.stage's: one node at an end of every connection left unanswered
BW_PAIR_TOO_SMALL = "too_small"   # bw.pair's: pairs measured at a size that times latency, not bandwidth
BW_PAIR_NOISY = "within_noise"    # bw.pair's: a node slow by no more than the run's own figures moved
LISTEN_FIREWALLED = "firewalled"
LISTEN_TWO_HOSTS = "two_hosts"


LOST_PREFIX = "lost_in_"


def lost_in(phase: str) -> str:
    """The kind of a node lost during `phase` (rdzv.join): e.g. "lost_in_bandwidth"."""
    assert phase in LOST_PHASES, phase
    return LOST_PREFIX + phase


# mesh.connect's exact findings.
MESH_BLACKHOLE = "blackhole"
LIMIT_NOFILE = "nofile"
LIMIT_PEER_SOCKETS = "nofile_peers"
BUILD_ARCH = "no_kernel"
BUILD_DRIVER = "driver_too_old"
JOIN_KEPT_OUT = "kept_out"
ENV_HASH_UNREADABLE = "hash_unreadable"
LIMIT_BACKLOG = "backlog"
LIMIT_MEMLOCK = "memlock"
LIMIT_STACK = "stack"
# host.ports's exact findings.
PORTS_TOO_FEW = "range_too_small"
PORTS_HELD = "time_wait"
PORTS_ENDPOINT = "endpoint_in_range"
# host.buffers's exact findings.
BUFFERS_SHORT = "buffer_short"
BUFFERS_SOCKOPT = "sockopt_capped"
BUFFERS_UNSCALED = "window_unscaled"
# host.conntrack's exact findings.
CONNTRACK_FULL = "table_full"
CONNTRACK_NO_ROOM = "no_room"
CONNTRACK_NEARLY_FULL = "nearly_full"
MESH_TRANSLATED = "translated"
MESH_WRONG_PREFIX = "wrong_prefix"

# nic.route's exact findings.
ROUTE_UNSAFE_NAME = "unsafe_name"

# link.health's exact findings.
LINK_LOSSY_NODE = "lossy_node"
LINK_LOSSY_PATH = "lossy_path"
LINK_FLAP = "carrier_flap"
LINK_ERRORS = "link_errors"

# launch.topology's exact findings.
LAUNCH_CROWDED = "crowded_host"
LAUNCH_NNODES = "nnodes_disagree"
LAUNCH_NPROC = "nproc_disagree"
LAUNCH_DEVICE = "no_device"
LAUNCH_SHARED_GPU = "shared_gpu"
LAUNCH_TORCHRUN = "torchrun_layout"

# launch.endpoint's and launch.env's exact findings.
ENDPOINT_LOOPBACK = "loopback"
ENDPOINT_NOT_RANK0 = "not_rank0"
ENDPOINT_ELSEWHERE = "rank0_elsewhere"
ENDPOINT_UNREACHED = "rank0_unreached"
ENDPOINT_SEVERAL = "several_addresses"
ENV_FLAGS = "flags_vs_env"
ENV_DISAGREE = "variables_disagree"

# env.flight_recorder's exact findings.
FR_OFF = "recorder_off"
FR_NO_DUMP = "no_dump_on_timeout"
FR_NO_ABORT = "watchdog_cannot_abort"

# netcheck inspect's exact findings.
JOB_WAITING = "round_incomplete"
JOB_WAITING_NEXT = "waiting_next_round"
JOB_NOT_STARTED = "no_round"
JOB_NO_SUCH_RUN = "no_such_run"
JOB_NO_RDZV = "no_rendezvous"
JOB_DEAD = "dead"
JOB_LATE = "heartbeat_late"
JOB_EVICTED = "evicted"
JOB_HOSTILE_VALUE = "hostile_value"
JOB_FOREIGN_VALUE = "foreign_value"
JOB_RAS_MISSING = "ranks_missing"
JOB_RAS_ERRORS = "ranks_in_error"
HANG_BEHIND = "behind"
HANG_DESYNC = "desync"
HANG_STUCK = "stuck"
HANG_NO_DATA = "no_trace"

# run.stopped's exact findings.
STOPPED_SIGINT = "sigint"
STOPPED_SIGTERM = "sigterm"
STOPPED_HOST = "host_stopped"
STOPPED_FROZEN = "frozen"

# run.skipped's exact findings.
SKIPPED_PHASE = "phase_skipped"
SKIPPED_GOODBYE = "goodbye_unheard"
SKIPPED_NO_PEER = "no_peer"

# run.torch's exact findings.
TORCH_SLOW = "slow_import"

# rdma.*'s exact findings.
PORT_LINK_LAYER = "link_layer"
PORT_SLOWER = "slower_port"
GID_BAD = "unreachable_gid"
GID_FAMILY = "gid_family"
GID_DIFFERS = "gid_index_differs"
PCIE_ACS = "acs"
PCIE_FAR = "far_nic"
LIB_NOT_TORCHS = "not_torchs"
LIB_VERSIONS = "versions_differ"


# Whom a finding stops (model.PARTS), in the words a report and `netcheck checks` use, and
# what each part and effect means (README, "What a verdict promises about the job").
PART_WORDS = {LAUNCH: "torchrun's rendezvous", STORE: "the store", GLOO: "gloo", NCCL_SOCKET: "NCCL over sockets",
              NCCL_RDMA: "NCCL over RDMA", SPEED: "the job"}
FORM_WORDS = {C10D: "torchrun's c10d rendezvous"}
PART_MEANINGS = {
    LAUNCH: "torchrun's agents and their c10d rendezvous: the endpoint's store, their heartbeats, and the "
            "MASTER_ADDR they hand their workers (rank 0's FQDN): a job torchrun launches",
    STORE: "the TCPStore init_process_group meets at MASTER_ADDR:MASTER_PORT: every job",
    GLOO: "gloo's connections between ranks: a CPU job, and any job's gloo groups",
    NCCL_SOCKET: "NCCL's bootstrap and its socket transport: a GPU job without RDMA",
    NCCL_RDMA: "NCCL over InfiniBand or RoCE (its bootstrap still on sockets): a GPU job with RDMA",
    SPEED: "how fast the job runs, whichever library carries it",
}
EFFECT_MEANINGS = {
    STOPS: "the job fails or hangs there (a fail); a pass: checked, and it does not",
    SLOWS: "the job runs, slower",
    RISKS: "the job runs at this run's size and launch, and would stop at another size, with another launch or "
           "later (a warning of a check that stops says risks)",
    NOTHING: "says nothing of the job's parts: netcheck's own run, a diagnosis aid, TensorPipe (RPC only)",
}
RENDEZVOUS = (LAUNCH, STORE)   # every launch meets one of them first: torchrun's agents, or the store alone
LIBRARIES = (GLOO, NCCL_SOCKET, NCCL_RDMA)
NCCL = (NCCL_SOCKET, NCCL_RDMA)
TCP = (GLOO, NCCL_SOCKET)      # the libraries' data over TCP connections
NO_IMPACT = Impact((), NOTHING)


def parts_words(parts: Iterable[str]) -> str:
    """The parts in words, in the table's order, NCCL's two as one where both are named:
    "gloo, NCCL", "torchrun's rendezvous, the store", "NCCL over RDMA"."""
    named = [p for p in PART_WORDS if p in set(parts)]
    both = all(p in named for p in NCCL)
    return ", ".join("NCCL" if both and p == NCCL_SOCKET else PART_WORDS[p] for p in named
                     if not (both and p == NCCL_RDMA))


def impact_words(impact: Impact) -> str:
    """"stops gloo, NCCL", "slows the job", "nothing of the job's parts"."""
    return f"{impact.effect} {parts_words(impact.on)}" if impact.on else "nothing of the job's parts"


def scope_words(impact: Impact | None) -> str:
    """Whom a finding stops where that is not every job, as a reader of a report scans for it:
    "NCCL only", "gloo only", "torchrun's rendezvous" (a job torchrun launches); "" where every job
    meets it (the store, every library), where it slows or says nothing, or is not said."""
    if impact is None or STORE in impact.on:
        return ""
    if impact.form:
        return f"{FORM_WORDS[impact.form]} only"
    libraries = [p for p in LIBRARIES if p in impact.on]
    if len(libraries) == len(LIBRARIES) or not libraries and LAUNCH not in impact.on:
        return ""
    return parts_words(impact.on) + (" only" if libraries else "")


@dataclass(frozen=True)
class Kind:
    severities: tuple[str, ...]     # what a finding of this kind can say
    meaning: str                    # one line, for runbook writers
    impact: Impact | None = None    # whom it stops, where not as its check says
    # Said by a node of itself with no cause named, it means the node was not tested (netcheck's
    # own deadline came first), not that it is broken: rules.fault holds no node at fault for it.
    untested_on_itself: bool = False


@dataclass(frozen=True)
class Check:
    id: str
    phase: str                      # the phase whose facts it judges (docs/contract.md, "Phases"), or "run"
    severities: tuple[str, ...]     # what it can say, its kinds included
    meaning: str                    # one line, for runbook writers
    rules: tuple[str, ...]          # "module.function" under netcheck.rules that build its findings
    facts: str                      # the facts those rules read
    tests: tuple[str, ...]          # test files that make its findings, faults created for real
    kinds: dict[str, Kind] = field(default_factory=dict)  # empty: the id says it
    impact: Impact = field(kw_only=True)   # whom its findings stop, and how (a kind may say otherwise)


ALL = (PASS, WARN, FAIL)
ONLY_WARN, ONLY_FAIL, WARN_FAIL = (WARN,), (FAIL,), (WARN, FAIL)
CHECKS: tuple[Check, ...] = (
    Check(RDZV_RESOLVE, "reach", ALL,
          "the endpoint's name does not resolve on a node, or to different address families on different nodes, "
          "or only after seconds, or a node's nameserver does not answer or answers late",
          ("reach.reach_findings", "reach.resolve_consistency", "reach.resolver_findings", "reach.slow_lookup",
           "reach.cut_short", "reach.slow_lookups", "reach.out_of_reach", "endpoint.own_endpoint_findings"),
          "Reach (each joiner's lookup of HOST, timed), rank 0's own lookup of HOST, SilentNameserver and "
          "SlowNameserver (each node's query to its nameservers, given the resolver's own wait)",
          ("test_rules_reach.py", "test_rules_endpoint.py", "test_rendezvous_cluster.py", "test_resolver_cluster.py",
           "test_launch_cluster.py"),
          {RESOLVE_SILENT: Kind(WARN_FAIL, "a nameserver of the node's resolv.conf does not answer: every lookup "
                                           "/etc/hosts cannot answer waits for it (fail where the endpoint's name "
                                           "was one)", Impact(RENDEZVOUS, SLOWS)),
           RESOLVE_ON_HOST: Kind(ONLY_FAIL, "the endpoint's name does not resolve on rank 0 itself, which hosts the "
                                            "rendezvous: torch's store there connects its own client by that name"),
           RESOLVE_SLOW: Kind(WARN_FAIL, "a lookup answers, but seconds late (the endpoint's name, or a nameserver "
                                         "of the node's resolv.conf): torch's store looks up every connection's "
                                         "address, so the job starts that much slower per rank (fail where netcheck "
                                         "could not wait for the endpoint's name in the run's time)",
                                         Impact(RENDEZVOUS, SLOWS)),
           RESOLVE_NO_MACHINE: Kind(WARN_FAIL, "a nameserver of the node's resolv.conf went unanswered, and no "
                                               "machine answered ARP / NDP for its address (or its gateway): the "
                                               "node's own network keeps it out (its prefix, a second NIC on the "
                                               "subnet, a wrong address), not a silent server (fail where the "
                                               "endpoint's name was one)", Impact(RENDEZVOUS, SLOWS))},
          impact=Impact(RENDEZVOUS, STOPS)),
    Check(RDZV_REACH, "reach", (PASS, FAIL),
          "a joiner's TCP connect to HOST:PORT and the TCPStore handshake: open, not a store, "
          "refused, filtered or unreachable",
          ("reach.reach_findings", "reach.reach_summary"), "Reach, Probe, Holder (where the port is this node's)",
          ("test_rules_reach.py", "test_rendezvous_cluster.py", "test_faults_cluster.py",
           "test_reach_faults_cluster.py", "test_nobody_there_cluster.py"),
          {REACH_NOT_STORE: Kind(ONLY_FAIL, "something accepts on the port but does not answer as a TCPStore "
                                            "(a hung or stopped process, another program)"),
           REACH_NO_MACHINE: Kind(ONLY_FAIL, "no machine answered ARP / NDP for the address (or its gateway) on "
                                             "the interface the kernel's route takes: a stale name, a wrong or "
                                             "dead address, not a firewall (where the address is right and the "
                                             "node has a router, its prefix is the next to compare)"),
           REACH_WRONG_PREFIX: Kind(ONLY_FAIL, "no machine answered ARP / NDP for an address on the link only by "
                                               "this node's prefix, and the link's own subnet (its router's "
                                               "advertised prefix, its DHCP lease) is narrower and does not hold it: "
                                               "a prefix wider than the subnet's (a router alone is no evidence)"),
           REACH_SHARED_SUBNET: Kind(ONLY_FAIL, "two interfaces share the address's subnet and the route takes the "
                                                "one where no machine answered (a second NIC on the subnet)")},
          impact=Impact(RENDEZVOUS, STOPS)),
    Check(RDZV_LISTEN, "reach", (PASS, FAIL),
          "the host cannot listen on the port (names the process holding it), or cannot reach it itself",
          ("reach.listen_finding", "reach.listen_pass", "reach.firewalled_finding"),
          "Holder (psutil's view of the port), Probe (the host's connect to its own port)",
          ("test_rules_reach.py", "test_rendezvous_cluster.py", "test_reach_faults_cluster.py"),
          {LISTEN_FIREWALLED: Kind(ONLY_FAIL, "the host listens, but its own firewall filters or refuses the port: "
                                              "its store client and every joiner are kept out"),
           LISTEN_TWO_HOSTS: Kind(ONLY_FAIL, "another netcheck on this machine already hosts on the port: two "
                                             "processes were given node rank 0")},
          impact=Impact(RENDEZVOUS, STOPS)),
    Check(RDZV_JOIN, "rendezvous", ALL,
          "who joined and who did not: missing, duplicate, late, foreign or lost nodes",
          ("rdzv.join_findings", "rdzv.same_name_findings", "rdzv.latecomer_findings", "rdzv.lost_findings",
           "rdzv.rendezvous_failure", "rdzv.other_run_failure", "rdzv.left_behind_finding",
           "rdzv.own_store_lost", "rdzv.own_link_down",
           "rdzv.seat_finding",
           "rdzv.hosts_message_refused", "storetrouble.rejected_findings", "rdzv.endpoint_name_taken",
           "rdzv.gone_before_sign_in", "storetrouble.interference_findings", "storetrouble.store_stall_findings",
           "storetrouble.stall_explained", "storetrouble.held_up_findings", "storetrouble.foreign_findings",
           "storetrouble.malformed_findings", "reach.slow_join_explained"),
          "Gathering (the host's), a joiner's seat and the seated names (core.seats), the values a seated "
          "node sent, the endpoint's addresses",
          ("test_rules_rdzv.py", "test_rendezvous_cluster.py", "test_faults_cluster.py",
           "test_hostile_cluster.py"),
          {JOIN_MISSING: Kind(ONLY_FAIL, "a node rank below --nnodes never joined"),
           JOIN_ALONE: Kind(ONLY_FAIL, "without --nnodes, no node besides the host joined"),
           JOIN_DUPLICATE: Kind(ONLY_FAIL, "a node rank claimed by several nodes; the first was seated"),
           JOIN_UNSEATED: Kind(ONLY_FAIL, "a node came with a rank at or above --nnodes, or after every seat was "
                                          "taken"),
           JOIN_LATE: Kind(ONLY_FAIL, "a process came after the roster was posted (said by that process of "
                                      "itself with no cause of its own named: its start-up outlasted netcheck's "
                                      "deadline, untested and not found broken, exit 3)", untested_on_itself=True),
           JOIN_FOREIGN: Kind(ONLY_WARN, "a node of another --rdzv-id used this store"),
           JOIN_MALFORMED: Kind(WARN_FAIL, "a store entry netcheck cannot read (fail where a seated node sent it: "
                                           "that node is named)"),
           JOIN_FAILED: Kind(ONLY_FAIL, "a joiner could not take part: store unreachable, another run id, host gone"),
           JOIN_NOT_SEATED: Kind(ONLY_FAIL, "a joiner got no seat (its rank taken, the cluster full or started)"),
           JOIN_LEFT_BEHIND: Kind(ONLY_FAIL, "a joiner reported back after the host's deadline"),
           JOIN_SAME_NAME: Kind(ONLY_FAIL, "several nodes call themselves by one hostname or FQDN",
                                Impact((LAUNCH,) + NCCL, STOPS)),
           JOIN_FACTS_LOST: Kind(ONLY_FAIL, "a node reached the store (its visitor record came) but its facts never "
                                            "did: a path that drops full-size frames, or it stopped"),
           JOIN_INTERFERENCE: Kind(WARN_FAIL, "another client wrote the run's store keys (a key overwritten, a "
                                              "counter pushed, a list flooded): named with the key and what was "
                                              "seen; fail where it kept this node out"),
           JOIN_STORE_STALLED: Kind(ONLY_WARN, "the host's store left the host's own request unanswered for "
                                               "seconds while clients that are no node of the run were connected "
                                               "to its port (torch's store looks up each connection's name on its "
                                               "one thread): named with their addresses; on a joiner, its own requests "
                                               "that waited one out", Impact(RENDEZVOUS, SLOWS)),
           JOIN_KEPT_OUT: Kind(ONLY_FAIL, "a node that never joined, or stopped answering, while the store was "
                                          "stalled by other clients: kept out by the stall, the cause, so not "
                                          "tested, and not in the faulty nodes or the exclude list"),
           **{lost_in(p): Kind(ONLY_FAIL, f"a seated node stopped answering during the {p} phase")
              for p in LOST_PHASES}},
          impact=Impact(RENDEZVOUS, STOPS)),
    Check(RDZV_FQDN, "rendezvous", ALL,
          "a node cannot resolve another node's FQDN, or resolves it to an address that node lacks: torchrun's "
          "c10d rendezvous hands its workers rank 0's FQDN as MASTER_ADDR (fail where that is the name, the "
          "first in order; warn for another's)",
          ("rdzv.fqdn_findings",), "NodeResults.resolutions, NicTable, every node's FQDN (c10d's rank 0's sorts first)",
          ("test_rules_rdzv.py", "test_rendezvous_cluster.py"),
          impact=Impact((LAUNCH,), STOPS)),
    Check(HOST_CLOCK, "rendezvous", (PASS, WARN),
          "a node's clock is off the host's by more than the threshold",
          ("rdzv.clock_findings",), "NodeResults.clock (store round trips)",
          ("test_rules_rdzv.py",),
          impact=Impact((LAUNCH,), RISKS)),
    Check(MESH_CONNECT, "mesh", (PASS, FAIL),
          "a node-to-node direction that connects on no interface at all, or a path that connects "
          "but loses full-size frames",
          ("mesh.mesh_findings", "mesh.blackhole_findings", "mesh.host_blackhole_finding",
           "mesh.lost_facts_blackhole", "translation.translated_findings", "prefix.wrong_prefix_findings"),
          "Attempt (every connect the mesh made, with its full-size frames echoed or lost); a joiner "
          "that lost the host: the host's store asked a small request and the same in one full frame; "
          "the host, of a node whose facts never came: FrameTest (small and full-size datagrams answered or not); "
          "each node's gloo address (rules.gloodial: which way gloo dials each pair)",
          ("test_rules_mesh.py", "test_mesh_cluster.py", "test_faults_cluster.py", "test_mtu_cluster.py",
           "test_rules_gloodial.py", "test_nat_cluster.py"),
          {MESH_BLACKHOLE: Kind(ONLY_FAIL, "a path-MTU blackhole: the path connects and carries small messages, but "
                                           "frames of the interfaces' MTU vanish (a switch port or tunnel with a "
                                           "smaller MTU between two ends that agree)"),
           MESH_TRANSLATED: Kind(ONLY_FAIL, "a node's address is translated (NAT: a container on a bridge network, a "
                                            "published port) and its peers cannot connect to the addresses it owns"),
           MESH_WRONG_PREFIX: Kind(ONLY_FAIL, "a node's interface has another prefix length than its peers': it takes "
                                              "peers behind a router for its own link (ARP unanswered), or on-link "
                                              "peers for a router's")},
          impact=Impact(LIBRARIES, STOPS)),
    Check(NIC_ROUTE, "nic", ALL,
          "a set *_SOCKET_IFNAME that matches nothing on a node, or holds an address",
          ("nic.route_findings", "nic.unsafe_name_findings"), "NodeFacts.socket_env, NicTable, Attempt",
          ("test_mesh_cluster.py", "test_rules_nic.py"),
          {ROUTE_UNSAFE_NAME: Kind(ONLY_FAIL, "an interface the mesh proved has a name no *_SOCKET_IFNAME can "
                                              f"safely hold (not 1 to {IFNAME_MAX_BYTES} letters, digits and ._-): "
                                              "left out of the exports")},
          impact=Impact(LIBRARIES, STOPS)),
    Check(NIC_NCCL_DEFAULT, "nic", ALL,
          "the interfaces NCCL would pick reach no peer, or there are none (warn where no node has a GPU: a job "
          "there runs gloo)",
          ("nic.nccl_findings",), "NicTable, NodeFacts.socket_env (rules.socketchoice: NCCL's rules), NodeFacts.gpus",
          ("test_mesh_cluster.py", "test_rules_nic.py"),
          impact=Impact(NCCL, STOPS)),
    Check(NIC_GLOO_DEFAULT, "nic", (PASS, FAIL),
          "the address gloo would bind is loopback or reaches no peer that gloo dials it from (the larger address "
          "of each pair dials)",
          ("nic.gloo_findings",), "NodeFacts.hostname_addresses, NicTable, Attempt (as gloo dials: rules.gloodial)",
          ("test_mesh_cluster.py", "test_rules_gloodial.py"),
          impact=Impact((GLOO,), STOPS)),
    Check(NIC_TP_DEFAULT, "nic", (PASS, WARN),
          "the same for TensorPipe (torch.distributed.rpc only, so it warns)",
          ("nic.tp_findings",), "NodeFacts.hostname_addresses, NicTable",
          ("test_mesh_cluster.py", "test_rules_nic.py"),
          impact=NO_IMPACT),
    Check(NIC_MTU, "nic", (PASS, WARN),
          "the two ends of a working path have different MTUs, or the path between them carries less",
          ("nic.mtu_findings",), "NicTable, Attempt (Transfer.path_mtu)",
          ("test_mesh_cluster.py", "test_routed_cluster.py", "test_rules_nic.py"),
          {MTU_PATH: Kind(ONLY_WARN, "the kernel learnt a smaller path MTU than both ends' interfaces while the "
                                     "mesh's full-size frames crossed: an overlay left at its underlay's MTU, a "
                                     "tunnel, a router's narrower link")},
          impact=Impact(LIBRARIES, RISKS)),
    Check(NIC_SPEED, "nic", (PASS, WARN),
          "a node's link is slower than its peers', or its speed unknown where theirs is known",
          ("nic.speed_findings",), "NicTable (speed)", ("test_rules_nic.py",),
          impact=Impact((SPEED,), SLOWS)),
    Check(NIC_IB, "nic", ALL,
          "an InfiniBand port not ACTIVE (fail); nodes with different sets of active ports (warn)",
          ("nic.ib_findings",), "NicTable.ib_ports", ("test_rules_nic.py",),
          impact=Impact((NCCL_RDMA,), STOPS)),
    Check(ENV_MISMATCH, "env", ALL,
          "versions and settings that differ between nodes, and a --hash path a node cannot read",
          ("env.env_findings", "env.hash_findings"), "EnvFacts", ("test_rules_env.py", "test_env_cluster.py"),
          {ENV_HASH_UNREADABLE: Kind(ONLY_FAIL, "a --hash path a node cannot read (a typo, a filesystem not "
                                                "mounted there): nothing was compared on it", NO_IMPACT)},
          impact=Impact((STORE,) + LIBRARIES, STOPS)),
    Check(HOST_LIMITS, "rendezvous", ALL,
          "a process limit the job starts with that it will exhaust: the rendezvous host's descriptors against "
          "its store's connections, its accept queue against the ranks connecting at once, locked memory where "
          "NCCL uses RDMA, an unlimited stack under NCCL before 2.28",
          ("limits.limit_findings",), "ProcessLimits (read before netcheck lifts its own), the layout, RdmaFacts",
          ("test_rules_limits.py", "test_limits_cluster.py", "test_rdma_cluster.py"),
          {LIMIT_NOFILE: Kind(WARN_FAIL, "the rendezvous host's soft descriptor limit is below one per rank and "
                                         "agent plus a bare store's own: its store refuses the rest (EMFILE); "
                                         "a warning where only a training process's own do not fit beside them",
                                         Impact(RENDEZVOUS, STOPS)),
           LIMIT_PEER_SOCKETS: Kind(ONLY_WARN, "a node's soft descriptor limit below a socket to each other "
                                               "rank (gloo's full mesh, NCCL's all-to-all over sockets)",
                                               Impact(TCP, RISKS)),
           LIMIT_BACKLOG: Kind(ONLY_WARN, "the kernel caps the store's accept queue below the connections that "
                                          "come at once at start-up", Impact(RENDEZVOUS, RISKS)),
           LIMIT_MEMLOCK: Kind(WARN_FAIL, "locked memory limited on a node whose NCCL would use RDMA",
                               Impact((NCCL_RDMA,), STOPS)),
           LIMIT_STACK: Kind(WARN_FAIL, "an unlimited stack on a GPU node whose NCCL is older than 2.28",
                             Impact(NCCL, STOPS))},
          impact=Impact(RENDEZVOUS + LIBRARIES, STOPS)),
    Check(HOST_PORTS, "local", ALL,
          "a node's ephemeral port range against the ports the job's processes there hold at once (their "
          "listeners, and their connections to one address: the store, an NCCL peer); the endpoint's port where "
          "the host's kernel may give it to any connection",
          ("ports.range_findings",), "EphemeralPorts (read before netcheck opens a socket), the layout, "
          "NodeFacts.socket_env (NCCL's sockets per connection), RdmaFacts",
          ("test_rules_ports.py", "test_ports_cluster.py"),
          {PORTS_TOO_FEW: Kind(ONLY_FAIL, "the range, less its reserved ports, cannot hold the job's sockets on "
                                          "that node: its store clients fail with EADDRNOTAVAIL (errno 99), its "
                                          "listeners with EADDRINUSE"),
           PORTS_HELD: Kind(ONLY_WARN, "the range holds the job, but not beside the ports closed connections hold "
                                       "for a minute (TIME-WAIT: others' now, netcheck's own once it ends): a job "
                                       "started within that minute may be short"),
           PORTS_ENDPOINT: Kind(ONLY_WARN, "the endpoint's port lies in the rendezvous host's range and is not "
                                           "reserved: any connection may take it first, and the job's store then "
                                           "fails to listen (Address already in use)", Impact(RENDEZVOUS, RISKS))},
          impact=Impact((STORE,) + LIBRARIES, STOPS)),
    Check(HOST_BUFFERS, "nic", ALL,
          "a node whose TCP buffer bounds let one connection carry far less than its paths (their rate times "
          "the mesh's least round trip: the bandwidth-delay product); warn, fail where bw.pair or the plateau "
          "(--expect-busbw) measured that node short beyond doubt",
          ("buffers.buffer_findings",), "SocketBuffers (read as the job's sockets meet them), Attempt (round "
          "trips, interfaces), NicTable (speed), the pair test's median, NodeFacts.socket_env (NCCL's socket "
          "buffers and sockets per peer), RdmaFacts",
          ("test_rules_buffers.py", "test_buffers_cluster.py"),
          {BUFFERS_SHORT: Kind(WARN_FAIL, "tcp_wmem's or tcp_rmem's max (or tcp_rmem's default, receive autotuning "
                                          "off) holds less in flight than the path needs"),
           BUFFERS_SOCKOPT: Kind(WARN_FAIL, "NCCL_SOCKET_SNDBUF / NCCL_SOCKET_RCVBUF ask a socket buffer (capped by "
                                            "net.core.wmem_max / rmem_max) that holds less than the path needs"),
           BUFFERS_UNSCALED: Kind(WARN_FAIL, "tcp_window_scaling off: 64 KiB in flight at most, less than the path "
                                             "needs")},
          impact=Impact(TCP, SLOWS)),
    Check(HOST_CONNTRACK, "local", ALL,
          "a node's connection-tracking table (a stateful firewall's or NAT's, nf_conntrack) full, or without "
          "room for the entries the job's connections take there beside its count: the kernel drops a new "
          "connection it has no entry for unanswered, in and out, which peers see as a firewall's DROP",
          ("conntrack.table_findings", "conntrack.told_findings"),
          "ConntrackTable (nf_conntrack_count, nf_conntrack_max, /proc/net/stat/nf_conntrack's drop counters: read "
          "before netcheck opens a socket, where a connect went unanswered, and after the mesh), the layout, "
          "Attempt and Probe (the connects a full table left unanswered), NodeFacts.socket_env",
          ("test_rules_conntrack.py", "test_conntrack_cluster.py"),
          {CONNTRACK_FULL: Kind(ONLY_FAIL, "the table is at its limit, or its kernel dropped packets for want of an "
                                           "entry during the run: every new connection into and out of the node "
                                           "goes unanswered; the failed connects are its evidence, no firewall's"),
           CONNTRACK_NO_ROOM: Kind(ONLY_FAIL, "the table's room (its limit less its count) is below the entries the "
                                              "job's connections take on that node: those past it are dropped"),
           CONNTRACK_NEARLY_FULL: Kind(ONLY_WARN, "the table holds the job's connections only within 90% of its "
                                                  "limit: a burst of other connections fills it")},
          impact=Impact(RENDEZVOUS + LIBRARIES, STOPS)),
    Check(HOST_SHM, "env", ALL,
          "/dev/shm too small for the node's GPUs",
          ("env.shm_findings",), "EnvFacts (shm.*, gpu.count)", ("test_rules_env.py",),
          impact=Impact(NCCL, STOPS)),
    Check(GPU_BUILD, "env", ALL,
          "torch's build cannot run on a node's own GPUs or driver: no kernel for the GPU's compute "
          "capability, or a driver older than the CUDA torch was built for",
          ("gpubuild.build_findings",), "EnvFacts (torch.arch_list, gpu.*.capability, torch.cuda_build, driver.cuda)",
          ("test_rules_gpubuild.py",),
          {BUILD_ARCH: Kind(ONLY_FAIL, "a GPU whose compute capability the build has neither a kernel nor PTX for"),
           BUILD_DRIVER: Kind(WARN_FAIL, "a driver that runs an older CUDA than torch's build: of another major "
                                         "version (fail) or the same (warn: minor-version compatibility)")},
          impact=Impact(NCCL, STOPS)),
    Check(ENV_FLIGHT_RECORDER, "env", (PASS, WARN),
          "a hang in this job would not be diagnosable on a node: torch's flight recorder off, no dump "
          "on a timeout, or a watchdog that cannot abort a hung collective",
          ("flightrec.flight_recorder_findings",),
          "EnvFacts (var.TORCH_*, var.NCCL_ASYNC_ERROR_HANDLING, torch.version)",
          ("test_rules_env.py", "test_env_cluster.py"),
          {FR_OFF: Kind(ONLY_WARN, "TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE set to 0 (or unset where the "
                                   "node's torch defaults to 0): no rank records its collectives"),
           FR_NO_DUMP: Kind(ONLY_WARN, "nothing is written when the NCCL watchdog fires: TORCH_NCCL_DUMP_ON_TIMEOUT "
                                       "off (or unset before torch 2.7), or the monitoring thread or NCCL's trace "
                                       "buffer off"),
           FR_NO_ABORT: Kind(ONLY_WARN, "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: the watchdog neither aborts the "
                                        "communicator nor stops the process, so a hung collective hangs for good")},
          impact=NO_IMPACT),
    Check(LAUNCH_TOPOLOGY, "rendezvous", ALL,
          "the launch line laid the processes out wrong: one per task, disagreeing counts, devices",
          ("launch.launch_findings", "launch.task_findings"), "NodeFacts.launch of every arrival, EnvFacts (GPU UUIDs)",
          ("test_rules_launch.py", "test_env_cluster.py", "test_torchrun_cluster.py", "test_slurm_cluster.py"),
          {LAUNCH_CROWDED: Kind(ONLY_FAIL, "several netchecks on one host claim one node rank (one per task)"),
           LAUNCH_NNODES: Kind(ONLY_FAIL, "nodes disagree about nnodes"),
           LAUNCH_NPROC: Kind(ONLY_WARN, "nodes disagree about processes per node"),
           LAUNCH_DEVICE: Kind(ONLY_FAIL, "a local rank with no device behind it, or more processes than GPUs",
                               Impact(NCCL, STOPS)),
           LAUNCH_SHARED_GPU: Kind(ONLY_FAIL, "two processes of a host on one GPU UUID", Impact(NCCL, STOPS)),
           LAUNCH_TORCHRUN: Kind(ONLY_FAIL, "torchrun's workers laid out wrong (ranks, LOCAL_RANK, "
                                            "LOCAL_WORLD_SIZE)", Impact((LAUNCH,), STOPS))},
          impact=Impact(RENDEZVOUS, STOPS)),
    Check(LAUNCH_ENDPOINT, "reach", (WARN, FAIL),
          "the launch line points nodes at the wrong place: the endpoint is not rank 0's",
          ("endpoint.endpoint_findings", "endpoint.host_endpoint_findings", "endpoint.own_endpoint_findings",
           "endpoint.reached_addresses"),
          "the endpoint's addresses, NicTable, Launch (node rank, nnodes), the reach probe, rank 0's connect to the "
          "endpoint's addresses it does not hold",
          ("test_rules_endpoint.py", "test_launch_cluster.py"),
          {ENDPOINT_LOOPBACK: Kind(WARN_FAIL, "the endpoint resolves to loopback while more than one node is expected "
                                              "(fail on a joiner it left alone; warn on rank 0, whose missing nodes "
                                              "it would explain)"),
           ENDPOINT_NOT_RANK0: Kind(ONLY_FAIL, "the endpoint is this node's own address, but this node is not rank 0"),
           ENDPOINT_ELSEWHERE: Kind(ONLY_WARN, "this node is rank 0, but owns none of the endpoint's addresses, "
                                               "and nodes are missing (with every node in, it forwards here)"),
           ENDPOINT_UNREACHED: Kind(ONLY_FAIL, "this node is rank 0, owns none of the endpoint's addresses, and "
                                               "nothing answers on the port there from it: its own store client "
                                               "cannot reach the store (said at once)"),
           ENDPOINT_SEVERAL: Kind(ONLY_WARN, "the endpoint resolves to several addresses and nodes reached "
                                             "different ones")},
          impact=Impact(RENDEZVOUS, STOPS)),
    Check(LAUNCH_ENV, "reach", (WARN, FAIL),
          "the launcher's variables disagree: with --rdzv on a node, or between nodes",
          ("endpoint.flags_findings", "endpoint.shared_variable_findings"),
          "Launch.variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE), the endpoint's addresses",
          ("test_rules_endpoint.py", "test_launch_cluster.py"),
          {ENV_FLAGS: Kind(ONLY_WARN, "--rdzv names another place than this node's MASTER_ADDR:MASTER_PORT"),
           ENV_DISAGREE: Kind(ONLY_FAIL, "nodes disagree about MASTER_ADDR, MASTER_PORT or WORLD_SIZE")},
          impact=Impact(RENDEZVOUS, STOPS)),
    Check(BW_STAGE, "bandwidth", (PASS, FAIL),
          "a stage of the bandwidth phase failed; names the stage, node and rank",
          ("bw.stage_findings",), "BandwidthResult (faults, failed stage, each node's addresses)",
          ("test_rules_bw.py", "test_bandwidth_cluster.py", "test_faults_cluster.py"),
          {BW_CUT_FLOW: Kind(ONLY_FAIL, "a worker's connection was reset by a peer's address while that peer's "
                                        "workers ran: a path that cuts long flows (a middlebox's byte, age or "
                                        "idle limit, a full conntrack table); the pair is named"),
           BW_UNANSWERED: Kind(ONLY_FAIL, "the sweep stopped short with one node at an end of every connection "
                                          "left unanswered (resent on timeout, nothing back), two peers or more at "
                                          "the other ends: its ports or link went dark after the mesh passed; "
                                          "that node alone is named")},
          impact=Impact(LIBRARIES, STOPS)),
    Check(BW_WRONG, "bandwidth", (PASS, FAIL),
          "corrupted elements in a collective's result",
          ("bw.wrong_findings",), "BandwidthResult (rows' wrong counts)",
          ("test_rules_bw.py", "test_bandwidth_cluster.py"),
          impact=Impact(LIBRARIES, STOPS)),
    Check(BW_BUSBW, "bandwidth", ALL,
          "the plateau's busbw (the large-message end, with its range) below --expect-busbw (fail, a figure "
          "of the whole cluster: no node named), or far below the line rate with nccl (warn)",
          ("bw.busbw_findings",), "BandwidthResult (sweeps), NIC line rates",
          ("test_rules_bw.py", "test_bandwidth_cluster.py"),
          impact=Impact((SPEED,), SLOWS)),
    Check(BW_PAIR, "bandwidth", ALL,
          "a node whose node-pair bandwidth is well below the median",
          ("bw.pair_findings",), "BandwidthResult (pairs)", ("test_rules_bw.py", "test_bandwidth_cluster.py"),
          {BW_PAIR_NOISY: Kind(ONLY_WARN, "a node's best pair is below half the median node's, but the run's own "
                                          "figures moved more than that gap's worth while measured (a loaded "
                                          "machine, a shared link): slow, not beyond doubt; measure again"),
           BW_PAIR_TOO_SMALL: Kind(ONLY_WARN, "the pairs were measured at a size that times latency, not "
                                              "bandwidth (the budget left no more): no node is judged slow from "
                                              "them")},
          impact=Impact((SPEED,), SLOWS)),
    Check(BW_STRAGGLER, "bandwidth", (PASS, WARN),
          "a rank much slower than the median at the largest size",
          ("bw.straggler_findings",), "BandwidthResult (rank times)", ("test_rules_bw.py",),
          impact=Impact((SPEED,), SLOWS)),
    Check(HOST_BUSY, "bandwidth", (WARN,),
          "a process outside netcheck used a node's CPUs, or held its GPUs, while its bandwidth workers ran (a "
          "leftover job, a busy loop): named with its pid, user, command, share of a CPU and GPUs held; the figures "
          "are affected",
          ("bw.busy_findings",), "BandwidthResult.busy (each node's processes in its network namespace)",
          ("test_rules_bw.py", "test_bandwidth_cluster.py"),
          impact=Impact((SPEED,), SLOWS)),
    Check(LINK_HEALTH, "bandwidth", ALL,
          "the link counters around the bandwidth phase: a node or a path whose TCP connections resent what "
          "they sent (rate and counts), a link whose carrier changed or whose error counters rose; warn, fail where "
          "a figure it spoils fell short beyond doubt (bw.pair's failure, --expect-busbw's)",
          ("link.link_findings", "link._node_finding", "link._path_finding", "link._moved_findings", "link._pass",
           "link.raised"),
          "BandwidthResult.links (each node's counters per stage, its connections' segments by peer)",
          ("test_rules_link.py", "test_link_cluster.py"),
          {LINK_LOSSY_NODE: Kind(WARN_FAIL, "a node whose every judged pair lost segments, its peers' other pairs "
                                            "clean: its own link"),
           LINK_LOSSY_PATH: Kind(WARN_FAIL, "node pairs that lost segments, each end clean with other peers: the "
                                            "path between them"),
           LINK_FLAP: Kind(WARN_FAIL, "a link's carrier (or an InfiniBand port's link) went down and up"),
           LINK_ERRORS: Kind(WARN_FAIL, "a link's error counters rose (CRC, frame, symbol errors; drops past the "
                                        "loss bound)")},
          impact=Impact((SPEED,), SLOWS)),
    Check(BASELINE_DRIFT, "run", (PASS, WARN),
          "with --baseline: what changed since a known-good report",
          ("baseline.drift_findings",), "the baseline Report and this run's", ("test_rules_baseline.py",
                                                                               "test_env_cluster.py"),
          impact=NO_IMPACT),
    Check(JOB_STORE, "inspect", (PASS, FAIL),
          "netcheck inspect: the job's TCPStore answers (with its keys), or nothing does at the endpoint",
          ("job.store_finding",), "JobView (the store read)", ("test_rules_job.py", "test_inspect.py"),
          impact=Impact((STORE,), STOPS)),
    Check(JOB_RDZV, "inspect", ALL,
          "netcheck inspect: torchrun's c10d rendezvous: the round, who joined, who is missing or waiting",
          ("job.rendezvous_findings", "job.eviction_findings"),
          "RendezvousView (decoded safely), RoundKeys (the round's role_info / assigned_ranks keys), --nnodes",
          ("test_rules_job.py", "test_inspect_cluster.py"),
          {JOB_WAITING: Kind(ONLY_FAIL, "the round is not complete: nodes joined, how many are missing, the deadline"),
           JOB_WAITING_NEXT: Kind(ONLY_WARN, "nodes wait for the next round of a complete one"),
           JOB_NOT_STARTED: Kind(ONLY_WARN, "the backend is set up and no node has joined"),
           JOB_NO_SUCH_RUN: Kind(ONLY_FAIL, "no rendezvous for the run id asked for; the store holds others"),
           JOB_NO_RDZV: Kind(ONLY_WARN, "no rendezvous and no process group keys at all"),
           JOB_EVICTED: Kind(ONLY_FAIL, "nodes that completed the current round are no longer among its "
                                        "participants, or are past torchrun's dead limit (every agent drops them on "
                                        "its next read of the state): removed by torchrun after their heartbeat "
                                        "stopped")},
          impact=Impact((LAUNCH,), STOPS)),
    Check(JOB_HEARTBEAT, "inspect", ALL,
          "netcheck inspect: a torchrun agent whose heartbeat is older than the keep-alive (late) or "
          "torchrun's dead-node limit",
          ("job.heartbeat_findings",), "RendezvousView.last_heartbeats, inspect's clock",
          ("test_rules_job.py", "test_inspect_cluster.py"),
          {JOB_DEAD: Kind(ONLY_FAIL, "no heartbeat for over keep-alive interval x attempts (15 s): hung or gone (a "
                                     "round still forming, the wait list; in a complete round it is job.rdzv's "
                                     "evicted)"),
           JOB_LATE: Kind(ONLY_WARN, "a heartbeat older than the keep-alive interval (5 s, 2 s of grace) and inside "
                                     "the dead limit: a missed beat")},
          impact=Impact((LAUNCH,), STOPS)),
    Check(JOB_RANKS, "inspect", ALL,
          "netcheck inspect: a static rendezvous (init_process_group): which ranks never arrived",
          ("job.ranks_findings",), "the default process group's rank keys, --world-size",
          ("test_rules_job.py", "test_inspect.py"),
          impact=Impact((STORE,), STOPS)),
    Check(JOB_NCCL, "inspect", (PASS, FAIL),
          "netcheck inspect: NCCL's RAS on this node: communicators with missing, dead or failing ranks",
          ("job.ras_findings",), "RasView (NCCL_RAS_ADDR, STATUS)", ("test_ras.py",),
          {JOB_RAS_MISSING: Kind(ONLY_FAIL, "ranks missing from a communicator (never joined, or dead)"),
           JOB_RAS_ERRORS: Kind(ONLY_FAIL, "ranks with an async error, an abort, or still initialising")},
          impact=Impact(NCCL, STOPS)),
    Check(JOB_HOSTILE, "inspect", (FAIL,),
          "netcheck inspect: a value in the job's store that is not a rendezvous state, or a trace file "
          "that is not a flight-recorder dump: refused, never run",
          ("job.hostile_findings", "hang.hang_findings"), "the raw value under torch.rendezvous.RUN, trace files",
          ("test_rules_job.py", "test_inspect.py", "test_rules_hang.py"),
          {JOB_HOSTILE_VALUE: Kind(ONLY_FAIL, "a pickle asking for code (a global outside the state's types)"),
           JOB_FOREIGN_VALUE: Kind(ONLY_FAIL, "garbage, the wrong type, or over the size limit")},
          impact=Impact((LAUNCH,), STOPS)),
    Check(JOB_HANG, "inspect", ALL,
          "netcheck inspect: the ranks' flight recorders: a rank behind the collective the others wait in, "
          "ranks out of step, a collective no rank completes, ranks with no trace",
          ("hang.hang_findings", "hang.unread_finding"), "HangView (flight-recorder dumps, --traces DIR)",
          ("test_rules_hang.py", "test_hang_cluster.py"),
          {HANG_BEHIND: Kind(ONLY_FAIL, "rank(s) never issued the collective the others wait in: their last line"),
           HANG_DESYNC: Kind(ONLY_FAIL, "ranks issued different collectives (op, sizes, dtype) at one sequence id"),
           HANG_STUCK: Kind(ONLY_FAIL, "every rank issued the collective and none completed it (NCCL records "
                                       "completion)"),
           HANG_NO_DATA: Kind(WARN_FAIL, "ranks with no trace: no dump, no answer, or the process gone (fail where "
                                         "the traced ranks are in step, waiting for them; warn beside a rank behind "
                                         "or out of step, or where --traces names no folder of dumps)")},
          impact=Impact(LIBRARIES, STOPS)),
    Check(RUN_SKIPPED, "run", (WARN,),
          "a phase left out, and why",
          ("run.skipped_finding", "run.unheard_goodbyes", "run.no_peer_findings"),
          "the run's deadlines, earlier findings and the nodes still in it",
          ("test_rules_run.py", "test_faults_cluster.py"),
          {SKIPPED_PHASE: Kind(ONLY_WARN, "a phase was skipped: nodes missing, too little of --timeout left, or a path "
                                          "it needs loses full-size frames (mesh.connect, blackhole)"),
           SKIPPED_GOODBYE: Kind(ONLY_WARN, "--timeout was spent before some nodes said goodbye; not counted as lost"),
           SKIPPED_NO_PEER: Kind(ONLY_WARN, "the mesh and the interface checks need a peer, and no other node is in "
                                            "the run")},
          impact=NO_IMPACT),
    Check(RUN_TIMEOUT, "run", (FAIL,),
          "a phase did not finish within --timeout",
          ("run.timeout_finding",), "the run's deadline", ("test_rules_run.py", "test_hostile_cluster.py"),
          impact=NO_IMPACT),
    Check(RUN_STOPPED, "run", (WARN, FAIL),
          "a signal ended the node's run before it finished (exit 130 or 143), or ended the host's and the "
          "joiner heard it, or the node's run stood still (stopped, paused) while the others went on: never a pass",
          ("run.stopped_finding", "run.host_stopped_finding", "run.told_stop", "run.frozen_finding"),
          "the signal; the host's ClusterVerdict; the run's longest Stall (facts.stall)",
          ("test_rules_run.py", "test_faults_cluster.py", "test_verdict_cluster.py"),
          {STOPPED_SIGINT: Kind(ONLY_FAIL, "interrupted: SIGINT (Ctrl-C)"),
           STOPPED_SIGTERM: Kind(ONLY_FAIL, "terminated: SIGTERM (scancel, a pod deleted)"),
           STOPPED_HOST: Kind(ONLY_WARN, "a joiner heard the host say a signal stopped it: the run did not finish, "
                                         "and no node is at fault for that (exit 1 unless the host named this node)"),
           STOPPED_FROZEN: Kind(ONLY_FAIL, "this node's run stood still for seconds (SIGSTOP, a paused VM, a machine "
                                           "starved of CPU) and then failed: the node is at fault, and what it saw "
                                           "of the others after the stall is held to it")},
          impact=NO_IMPACT),
    Check(RUN_CLUSTER, "run", (WARN,),
          "a joiner left without the host's verdict on the cluster (the host's findings about a "
          "node become that node's own when heard)",
          ("run.verdict_unheard",), "the host's ClusterVerdict, or its absence", ("test_rules_run.py",),
          impact=NO_IMPACT),
    Check(RUN_TORCH, "run", (FAIL,),
          "this node's torch cannot run the phases that need it, or did not load inside --timeout",
          ("run.torch_finding", "run.torch_slow_finding"), "the import of torch.distributed",
          ("test_cli.py", "test_budget.py"),
          {TORCH_SLOW: Kind(ONLY_FAIL, "torch's import was still running at the deadline of the phase that needs "
                                       "it: a loaded node, or a slow filesystem")},
          impact=NO_IMPACT),
    Check(RUN_INTERNAL, "run", (FAIL,),
          "netcheck failed to run a phase (exit 3): a netcheck bug",
          ("run.internal_finding",), "the exception", ("test_rules_run.py",),
          impact=NO_IMPACT),
)

CHECKS += (
    Check(RDMA_PORT, "env", ALL,
          "the RDMA ports NCCL would use (under NCCL_IB_HCA): link layers that differ between nodes, a port slower "
          "than the same port on its peers; on nodes without RDMA, says so",
          ("rdma.port_findings",), "RdmaFacts.ports, NodeFacts.socket_env (rules.hcachoice: NCCL's rules)",
          ("test_rules_rdma.py", "test_rdma_cluster.py"),
          {PORT_LINK_LAYER: Kind(ONLY_FAIL, "nodes' ports differ in link layer (InfiniBand, RoCE, none)"),
           PORT_SLOWER: Kind(ONLY_WARN, "a port negotiated a lower rate than on its peers: a degraded rail",
                             Impact((NCCL_RDMA,), SLOWS))},
          impact=Impact((NCCL_RDMA,), STOPS)),
    Check(RDMA_GID, "env", ALL,
          "the RoCE GID NCCL would pick (NCCL_IB_GID_INDEX, NCCL_IB_ROCE_VERSION_NUM, NCCL_IB_ADDR_FAMILY)",
          ("rdma.gid_findings",), "RdmaFacts.ports (GID tables), NodeFacts.socket_env, the libnccl's version",
          ("test_rules_rdma.py", "test_rdma_cluster.py"),
          {GID_BAD: Kind(ONLY_FAIL, "the GID is RoCE v1, link-local or empty: peers cannot reach it"),
           GID_FAMILY: Kind(ONLY_FAIL, "nodes would use GIDs of different address families"),
           GID_DIFFERS: Kind(ONLY_WARN, "nodes would pick different GID indexes (each a RoCE v2 GID)")},
          impact=Impact((NCCL_RDMA,), STOPS)),
    Check(RDMA_MTU, "env", (PASS, WARN),
          "RoCE active MTUs (from each netdev's MTU) that differ between nodes",
          ("rdma.mtu_findings",), "RdmaFacts.ports (active_mtu)", ("test_rules_rdma.py", "test_rdma_cluster.py"),
          impact=Impact((NCCL_RDMA,), SLOWS)),
    Check(RDMA_GPUDIRECT, "env", (PASS, WARN),
          "GPUDirect RDMA unavailable on a node with GPUs and RDMA ports: no nvidia-peermem, no dma-buf",
          ("rdma.gpudirect_findings",), "RdmaFacts (peermem, driver, kernel)",
          ("test_rules_rdma.py", "test_rdma_cluster.py"),
          impact=Impact((NCCL_RDMA,), SLOWS)),
    Check(RDMA_PCIE, "env", (PASS, WARN),
          "GPU-NIC placement: ACS redirect on the bridges between a GPU and its nearest NIC, or a nearest NIC "
          "behind the root complex or on another NUMA node",
          ("rdma.pcie_findings",), "RdmaFacts.gpus, RdmaFacts.hcas (PCIe paths, ACS, NUMA)",
          ("test_rules_rdma.py", "test_rdma_cluster.py"),
          {PCIE_ACS: Kind(ONLY_WARN, "ACS redirect on between a GPU and its NIC"),
           PCIE_FAR: Kind(ONLY_WARN, "a GPU's nearest NIC shares no PCIe switch with it, or sits on another NUMA "
                                     "node")},
          impact=Impact((NCCL_RDMA,), SLOWS)),
    Check(RDMA_LIBNCCL, "env", ALL,
          "the libnccl a job would load: another than torch's own (LD_PRELOAD, LD_LIBRARY_PATH), or another "
          "version than on the peers",
          ("rdma.libnccl_findings",), "RdmaFacts.libnccl", ("test_rules_rdma.py",),
          {LIB_NOT_TORCHS: Kind(ONLY_WARN, "LD_PRELOAD or LD_LIBRARY_PATH gives torch another libnccl"),
           LIB_VERSIONS: Kind(ONLY_FAIL, "nodes would load different NCCL versions")},
          impact=Impact(NCCL, STOPS)),
)

BY_ID = {c.id: c for c in CHECKS}
KINDS = tuple(k for c in CHECKS for k in c.kinds)


def untested_on_itself(finding: Finding) -> bool:
    """Whether the finding's kind, said by a node of itself, means untested (Kind.untested_on_itself)."""
    check = BY_ID.get(finding.check)
    return check is not None and finding.kind in check.kinds and check.kinds[finding.kind].untested_on_itself


def declared_impact(check: Check, kind: str = "") -> Impact:
    """Whom a finding of this check and kind stops, as the table says."""
    own = check.kinds[kind].impact if kind in check.kinds else None
    return own or check.impact


def impact_of(finding: Finding) -> Impact | None:
    """Whom the finding stops: its rule's word where it narrowed it to this run, else its check's
    and kind's; a warning promises no stop, so a check that stops, warning, risks. None for a
    check this netcheck does not know (a finding received from another version)."""
    check = BY_ID.get(finding.check)
    if finding.impact is not None or check is None:
        return finding.impact
    declared = declared_impact(check, finding.kind)
    return replace(declared, effect=RISKS) if finding.severity == WARN and declared.effect == STOPS else declared


def impacted(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """The findings, each saying whom it stops (impact_of): as a report or a verdict is made of them."""
    return tuple(f if f.impact is not None else replace(f, impact=impact_of(f)) for f in findings)
