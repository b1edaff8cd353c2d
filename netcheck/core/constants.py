"""Every constant netcheck shares between modules: defaults, deadlines, limits (check ids: rules.registry)."""

DEFAULT_PORT = 29500
REPORT_SCHEMA = "netcheck.report/1"

# Phases in the order they run (docs/contract.md, "Phases").
PHASES = ("local", "reach", "rendezvous", "mesh", "nic", "env", "bandwidth")
# Every later phase stands on these: the node's facts, the endpoint reached, the store met.
FOUNDATION_PHASES = ("local", "reach", "rendezvous")

# Exit codes: the monitoring convention (README.md, "Exit codes": non-zero is no pass, 2 and up a
# failure), with whose fault a failure is (core.model.Attribution): a gate drains its node on 2 alone.
EXIT_PASS = 0
EXIT_WARN = 1
EXIT_FAIL = 2            # a failure at this node (a report without a fault: at least one failure)
EXIT_INTERNAL = 3        # netcheck itself: an internal error, its own deadline with no node to blame
EXIT_OTHER_NODES = 4     # failures only at other nodes, named: this node is healthy
EXIT_CLUSTER = 5         # a failure of the cluster as a whole: no node singled out, this one included
EXIT_USAGE = 64
EXIT_SIGNALLED = 128  # + the signal's number: 130 for SIGINT, 143 for SIGTERM
EXIT_BY_VERDICT = {"pass": EXIT_PASS, "warn": EXIT_WARN, "fail": EXIT_FAIL}
EXIT_BY_FAULT = {"this_node": EXIT_FAIL, "netcheck": EXIT_INTERNAL, "other_nodes": EXIT_OTHER_NODES,
                 "cluster": EXIT_CLUSTER}   # "nobody": the verdict's (0 or 1)

# Deadlines, in seconds.
DEFAULT_TIMEOUT = 60.0
DEFAULT_JOIN_WINDOW = 5.0
ARRIVAL_MIN_NODES = 2        # without --nnodes: the host and one joiner at least, or nothing is proven
PROBE_TIMEOUT = 3.0          # a SYN unanswered this long is "filtered"
PROBE_RETRY_INTERVAL = 0.5   # between probes while the host is not listening yet
LOCAL_HOST_GRACE = 5.0       # an endpoint that is the joiner's own address: a host on this machine
                             # listens within this long of its start, else the launch line is wrong
IN_FLIGHT_GRACE = 3.0        # once the seats are full, the host waits this long at most for nodes
                             # that signed in to finish their handshake (clock pings, facts)
GOODBYE_WAIT = 10.0          # the host keeps the store up this long for stragglers
STOP_SIGNALS = ("SIGINT", "SIGTERM")   # what stops a run from outside (phases.stop)
STOPPED_GOODBYE_WAIT = 5.0   # a host stopped by one keeps its store up this long at most (longer only where the
                             # joiners' looks are paced further apart) for the joiners to hear that it was: a
                             # look (HOST_WORD_LOOK) after a mesh connect's timeout (2 s), with room
STALL_TICK = 0.25            # how often the stall watch (facts.stall) looks at the clocks
STALL_FAULT_SECONDS = 5.0    # a node that stood still this long, and then failed, holds itself at fault: the
                             # others went on without it (a store wait outlasts a busy machine's hiccup)
HOST_WORD_LOOK = 1.0         # a joiner waiting for the host's word looks this often for that stop, at least
HOST_WORD_PACES = 4          # ... or every this many of its paced looks for the word (a quarter more requests)
RESULTS_WAIT = 5.0           # nodes' results after the roster: waited for this long at least, then until
RESULTS_QUIET = 3.0          # this long passes with none new: a node that read the roster as the last
                             # result came has its lookups (LOOKUP_TIMEOUT, in parallel) and a second to
                             # post; thousands of nodes post without such silences. (5 s of silence after
                             # the last result kept 4,096 nodes 3 s longer for one lost: RESULTS.md)
STORE_POLL_INTERVAL = 0.05
STORE_LOOKS_PER_SECOND = 20_000   # all nodes' looks for a key together: beyond 1,000 nodes each looks
                                  # less often than every STORE_POLL_INTERVAL (benchmarks/scale.py)
POLL_SLICE = 0.5            # the host's store requests per scan of a counter anyone can push
LOOKUP_TIMEOUT = 2.0         # one name lookup, at least (getaddrinfo in a thread: a hung resolver cannot hold us);
                             # where the hosts database asks DNS, as long as glibc's resolver waits (facts.nameservers)
FRAME_WAIT = 1.0             # the host's wait for a node's kernel to answer one datagram (facts.frames)
STORE_REPLY_TIMEOUT = 5.0    # a store request unanswered this long: the host or the path to it is gone
# A joiner's store request waits this long at most for its link toward the host to get its carrier
# back (Transport._await_carrier): sent without one, it is dropped at the node and answered only once
# the carrier is back, so a flap past STORE_REPLY_TIMEOUT lost the host. With the reply timeout after
# it a flap of ~10 s is ridden out, the host's own bound on a silent node (BW_STUCK_AFTER); a link cut
# for good is named this much later.
CARRIER_WAIT = 5.0
CARRIER_POLL = 0.05          # how often that wait reads the carrier (a sysfs file)

# netcheck local: the node-local mode, and a launcher's gate on it (Slurm's HealthCheckProgram,
# which slurmd kills after 60 s; node-problem-detector's plugin timeout).
LOCAL_TIMEOUT = 20.0         # the whole look, torch's import and CUDA's start included where the node has GPUs
SLURM_CALL_TIMEOUT = 5.0     # one sinfo or scontrol after it: slurmctld answers in milliseconds, or is not there
DRAIN_PREFIX = "netcheck:"   # a drain reason netcheck wrote starts so, and only such a drain does it lift
                             # (LBNL NHC's convention, "NHC:"): an admin's drain is never resumed

# netcheck inspect: a running job's store, read only.
INSPECT_TIMEOUT = 15.0       # the whole look, torch's import included (seconds of CPU on a loaded node)

# Trust limits on what peers send.
MAX_FACTS_BYTES = 1 << 20
MAX_VISITOR_BYTES = 4 << 10  # a visitor record is a run id, a hostname and a rank
# The largest job netcheck takes, its nodes and its ranks apart, each at the size it was run
# (benchmarks/scale.py; benchmarks/RESULTS.md and docs/how-it-works.md, "Scale"). Nodes: hosts, one
# netcheck each, run at 16,384 over sockets. Ranks: the job's processes, 16,384 nodes of 8; the
# host's own work run at that size in one process (scale.py --in-process), the store on paper
# (torch's libuv TCPStore, documented at 96K ranks; the host's descriptors are host.limits').
MAX_NODES = 16_384
MAX_RANKS = 131_072
# Who takes a seat in netcheck's rendezvous: a node's netcheck, or, under torchrun, every worker
# process, seated by its RANK. What the host keeps per member is bounded by the larger count.
MAX_MEMBERS = max(MAX_NODES, MAX_RANKS)
SEAT_BLOCK = 256             # arrivals a seat record covers: a joiner reads its block, not everyone's seats
ARRIVALS_READ_BATCH = 8      # arrivals' facts the host reads in one request: a few kB each, but
                             # a value is read whole before its size is judged, and TCPStore takes
                             # up to 8 MiB: 64 MiB in the host's memory at worst, as for one value
NEWEST_FIRST = 256           # a scan of a counter looks at its newest numbers first (hostgather.unread)
MAX_STRANGERS = 16           # foreign visitors and rejected entries told one by one; the rest counted
NAMES_SHOWN = 6              # nodes a finding's summary names; the rest counted (its nodes list has all)

# Thresholds.
CLOCK_PINGS = 3
PING_RETRY = 1.0             # a clock ping unanswered this long is sent again
SLOW_LOOKUP = 1.0            # a lookup, or a nameserver's answer, this late is slow (rdzv.resolve resolver_slow)
CLOCK_WAIT = 5.0             # a joiner's clock pings, all of them: past it, it goes on without a sample
# The pings list (19 bytes a ping): past MAX_PINGS_BYTES between two of the host's polls it is a
# flood; answered pings are dropped once it holds PINGS_KEPT_BYTES, as a list kept whole is read
# whole at every poll (a MB at 16,384 members) and passes the store's 8 MiB value at 131,072.
MAX_PINGS_BYTES = 1 << 20
PINGS_KEPT_BYTES = 64 << 10
FLOODED_LIST_SWEEP = 0.02    # a list found flooded is deleted this often from then on (Exchange.keep_clearing)

# Mesh: every pair up to this many nodes, else ring neighbours plus a sample of peers.
MESH_CONNECT_TIMEOUT = 2.0
MESH_FULL_UP_TO = 64
MESH_SAMPLE_PEERS = 8
MESH_PHASE_LIMIT = 20.0
MESH_PACES = 80              # at scale the phase lasts this many of a node's looks at least (Exchange.pace):
                             # 40 s at 10,000 nodes (a look each 0.5 s); MESH_PHASE_LIMIT up to 5,000 nodes
MESH_OFFER_SHARE = 0.5       # of the mesh phase's time, the most spent waiting for peers' offers
MESH_CONNECTS_AT_ONCE = 64   # a node's connects in flight during the mesh (threads)
MESH_ROUTES_READ = 16        # unanswered addresses whose route and neighbour a node reads (two `ip` runs each)
MESH_RESULTS_MARGIN = 2.0    # of the mesh phase's time, kept to post results and collect them
MESH_MAX_CANDIDATES = 64     # (interface, address) pairs a node may offer: 16 interfaces, v4 and v6 twice
# Each connected path echoes this many full-size segments, one at a time (each alone in its
# frame), within MESH_TRANSFER_TIMEOUT: a lost segment's retransmissions (200 ms, 600 ms,
# 1.4 s) fit; a path that drops large frames and no small ones is a path-MTU blackhole.
MESH_TRANSFER_SEGMENTS = 4
MESH_TRANSFER_TIMEOUT = 1.5
# Where full-size frames are lost, smaller ones are tried, each on a fresh connection: the
# Ethernet standard, then IPv6's minimum (below any tunnel's overhead).
MESH_FALLBACK_FRAMES = (1500, 1280)
MESH_FLAGGED_TOLD = 32       # flagged paths the host tells its joiners (blackholes first)

# Environment phase (facts.envinfo / rules.env).
HASH_MAX_BYTES = 1 << 30     # --hash reads at most this much per path, then says "incomplete"
HASH_MAX_SECONDS = 10.0      # ... and spends at most this long per path

# --baseline: drift since a known-good report.
# A report of MAX_NODES nodes must read back as a baseline: a node's entry and its share of the
# findings measured 4-6 KB at scale (benchmarks/scale.py, simulated facts; under torchrun a node's
# account is written once, NodeEntry.facts_as); a real node's interfaces and probes take more.
REPORT_BYTES_PER_NODE = 16 << 10
# Python's collector thresholds on the host, which holds every rank's records until its report,
# none of them in a reference cycle: at the defaults (700, 10, 10) the collector walked them over
# and over, a sixth of the host's CPU at 50,000 ranks (benchmarks/RESULTS.md); these left its
# memory as it was.
HOST_GC_THRESHOLDS = (100_000, 50, 100)
MAX_BASELINE_BYTES = MAX_NODES * REPORT_BYTES_PER_NODE   # 256 MiB
ENV_PHASE_LIMIT = HASH_MAX_SECONDS + 20.0   # hashing bounded, plus the torch/CUDA queries

# Bandwidth phase (the bandwidth package / rules.bw).
BW_DEFAULT_MINBYTES = 8      # -b, as nccl-tests' README runs it (-b 8 -e 128M -f 2)
BW_DEFAULT_MAXBYTES = 128 << 20   # -e
BW_DEFAULT_STEPFACTOR = 2    # -f
BW_DEFAULT_WARMUP = 5        # -w, nccl-tests' default
BW_DEFAULT_ITERS = 20        # -n, nccl-tests' default
BW_DEFAULT_BUDGET = 6.0      # --bw-budget: seconds the timed sweeps may take together, once workers are up
                             # (6 keeps a default 3-node run near 15 s here: benchmarks/RESULTS.md)
BW_MAX_BYTES = 1 << 40       # -b/-e above this are typos, not sizes
# The plateau, the headline figure: the largest BW_PLATEAU_TOP sizes measured (the message
# sizes of a real job's gradient buckets), and the smaller sizes next to them whose busbw is
# within BW_PLATEAU_BAND of those sizes' median; the headline is the median of them all. A
# hump at cache-sized messages, or one lucky size, is outside the band and never the headline.
BW_PLATEAU_TOP = 3
BW_PLATEAU_BAND = 0.10
BW_BUSY_SHOWN = 5            # busy processes named per node (the busiest first)
DDP_BUCKET_BYTES = 25 << 20  # --bucket-mb's default: DDP's bucket_cap_mb (25 MiB)
BW_LATENCY_MAXBYTES = 64 << 10   # the latency figure: time per op at sizes up to this
BW_LATENCY_STEP = 8          # without -b and -f, the sizes below it step by this (8 64 512 4K 32K 64K):
                             # each costs about the same time, so the budget goes to the plateau
BW_STUCK_AFTER = 10.0        # a worker silent this long is hung (stopped, or stuck holding the GIL)
BW_CUDA_START_AFTER = 60.0   # ... or this long while it starts the CUDA driver (seconds without
                             # persistence mode, GIL held); the phase's deadline still bounds it
BW_PAIR_SLOW = 0.5           # bw.pair: a node whose best pair runs below this share of the median
BW_STARTUP_SECONDS = 8.0    # workers start, import torch and join before the first sweep
# link.health: the link counters around the bandwidth phase (facts/linkcounters.py). A clean link
# loses nothing: a direction's loss is its resends less the D-SACKs, never more than the segments
# its receiver did not receive, and a healthy namespace cluster's directions read 0 or 1 lost of
# up to 1.3 million segments, quiet or loaded (benchmarks/link_under_load.py; resends alone read
# 0.05-0.14% there: a loaded machine reorders what it forwards). A cable,
# optic or port that loses 0.1% of what crosses it already holds TCP back, and gets worse; at 5%
# a small message's loss waits out a retransmission timeout, and a gloo sweep of 4 s moves only
# ~300 segments a node (issue 50): ten resent and more are the evidence there is.
LINK_LOSS_RATE = 0.001       # segments sent again over segments sent, on a connection or a node
LINK_LOSS_MIN = 10           # ... and at least this many: a clean run's paths resend none, or a few
                             # dozen of millions in one stall that D-SACKs did not account for
# A peer's connections judged (lossy or clean) only where they sent this many segments: fewer
# could not show LINK_LOSS_MIN resent at LINK_LOSS_RATE.
LINK_JUDGED_SEGMENTS = int(LINK_LOSS_MIN / LINK_LOSS_RATE)
