"""host.limits: the job's own process limits held against what the job needs, from its layout.

netcheck raises its own descriptor limit to keep a connection to each node; the job's processes do
not (torch raises no limit anywhere), so a PASS must speak for the limits the job starts
with: those netcheck read before it changed anything (ProcessLimits). The rendezvous host's
store holds a connection per rank and per torchrun agent; a node whose NCCL uses RDMA
registers memory under RLIMIT_MEMLOCK; NCCL before 2.28 crashes under an unlimited stack.
"""

from __future__ import annotations

from netcheck.core.model import FAIL, PASS, WARN, Finding, Member, ProcessLimits, hostnames, is_torchrun_worker
from netcheck.rules.hcachoice import nccl_version
from netcheck.rules.pernode import node_names, per_node
from netcheck.rules.registry import (
    HOST_LIMITS,
    LIMIT_BACKLOG,
    LIMIT_MEMLOCK,
    LIMIT_NOFILE,
    LIMIT_PEER_SOCKETS,
    LIMIT_STACK,
)

# Descriptors a process holds besides one per store connection: a bare store's (torch 2.13's
# TCPStore under a soft limit of 64 refused its 50th client: 14 of its own), and a training
# process's (its libraries, CUDA's device files, NCCL's sockets, a data loader's pipes).
BARE_DESCRIPTORS = 16
PROCESS_DESCRIPTORS = 64
MEMLOCK_FAILS = 8 << 20        # NCCL's RDMA transport fails to register at 64 KiB and 8 MiB (NCCL #1191)
STACK_SAFE_NCCL = (2, 28)      # NCCL 2.27.6 release notes: an unlimited stack crashed it before 2.28
NOFILE_FIX = ("raise the soft limit where the job starts: `ulimit -n {need}` in the job script (the hard limit "
              "allows it), LimitNOFILE= in a systemd unit, PropagateResourceLimits=NOFILE in slurm.conf (or "
              "slurmd's own LimitNOFILE), `docker run --ulimit nofile={need}:{need}`, the container runtime's "
              "default under Kubernetes")
HARD_FIX = ("the hard limit ({hard}) is below it too: raise both as root (/etc/security/limits.conf `nofile`, "
            "LimitNOFILE= for systemd or slurmd, `docker run --ulimit nofile={need}:{need}`)")

Read = tuple[Member, ProcessLimits]   # a member whose limits were read, with them


def limit_findings(members: tuple[Member, ...]) -> list[Finding]:
    """The rendezvous host's descriptors and accept queue against the job's size; every node's
    locked memory (where NCCL would use RDMA) and stack (where it has GPUs)."""
    read = tuple((m, m.facts.limits) for m in members if m.facts.limits is not None)
    host = next((r for r in read if r[0].rank == 0), None)
    ranks, nodes = layout(members)
    findings = (_descriptor_findings(host, ranks, nodes) + _backlog_findings(host, ranks, nodes)) if host else []
    names = hostnames(members)
    return findings + _peer_socket_findings(read, ranks, names) + _memlock_findings(read, names) + \
        _stack_findings(read, names)


def _peer_socket_findings(read: tuple[Read, ...], ranks: int, names: dict[int, str]) -> list[Finding]:
    """Every process's descriptors against a connection to each other rank: gloo connects every
    pair, NCCL's socket transport every peer an all-to-all or send/recv reaches, each with
    NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS sockets (NCCL's documentation: file
    descriptors). A warning: a ring's collectives open only a few."""
    short = [(m, limits, need) for m, limits in read
             if (need := (ranks - 1) * _sockets_per_peer(m) + PROCESS_DESCRIPTORS) > limits.nofile != -1]
    if not short or ranks < 2:
        return []
    nodes = tuple(m.rank for m, _, _ in short)
    return [Finding(check=HOST_LIMITS, severity=WARN, nodes=nodes,
                    summary=f"the soft descriptor limit on {node_names(nodes, names)} is below a "
                    f"connection to each of the job's {ranks - 1} other ranks: gloo, and NCCL's all-to-all or "
                    "send/recv over sockets, fail with EMFILE there",
                    evidence=per_node(((m.rank, f"soft {limits.nofile}, about {need} for a socket to every peer")
                                       for m, limits, need in short), names),
                    fix=NOFILE_FIX.format(need=max(need for _, _, need in short)), kind=LIMIT_PEER_SOCKETS)]


def _sockets_per_peer(m: Member) -> int:
    """NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS where set (NCCL picks 1 x 1 but on some
    clouds' NICs), gloo's one."""
    env = m.facts.socket_env
    return max(1, _whole(env.get("NCCL_NSOCKS_PERTHREAD")) * _whole(env.get("NCCL_SOCKET_NTHREADS")))


def _whole(text: str | None) -> int:
    return int(text) if text and text.isdigit() and 0 < int(text) <= 64 else 1


def layout(members: tuple[Member, ...]) -> tuple[int, int]:
    """(ranks, nodes) of the job: under torchrun each member is a rank; else each is a node
    that starts --nproc-per-node processes."""
    nodes = len(set(hostnames(members).values())) or 1
    if any(is_torchrun_worker(m.facts.launch) for m in members):
        return len(members), nodes
    return sum(m.facts.launch.nproc_per_node for m in members), len(members)


def _descriptor_findings(read: Read, ranks: int, nodes: int) -> list[Finding]:
    """A failure where the store alone cannot hold a connection per rank and agent; a warning
    where it can only without what a training process holds of its own."""
    host, limits = read
    need, least = ranks + nodes + PROCESS_DESCRIPTORS, ranks + nodes + BARE_DESCRIPTORS
    shown = (f"{host.facts.hostname}: soft {_text(limits.nofile)}, hard {_text(limits.nofile_hard)}; the job's store "
             f"holds {ranks} rank(s) + {nodes} torchrun agent(s), beside {BARE_DESCRIPTORS} (a bare store) to "
             f"{PROCESS_DESCRIPTORS} (a training process) of its process's own",)
    if limits.nofile == -1 or limits.nofile >= need:
        return [Finding(check=HOST_LIMITS, severity=PASS, nodes=(host.rank,),
                        summary=f"the rendezvous host's descriptor limit "
                        f"({_text(limits.nofile)}) holds the job's store ({ranks} ranks on {nodes} node(s))",
                        evidence=shown)]
    fix = NOFILE_FIX.format(need=need)
    if limits.nofile_hard != -1 and limits.nofile_hard < need:
        fix = HARD_FIX.format(hard=limits.nofile_hard, need=need)
    if limits.nofile < least:
        return [Finding(check=HOST_LIMITS, severity=FAIL, nodes=(host.rank,),
                        summary=f"the rendezvous host's soft descriptor limit is "
                        f"{limits.nofile}, below the {least} the job's store needs ({ranks} ranks on {nodes} node(s) "
                        "connect to it): the clients past the limit are refused (EMFILE)", evidence=shown, fix=fix,
                        kind=LIMIT_NOFILE)]
    return [Finding(check=HOST_LIMITS, severity=WARN, nodes=(host.rank,),
                    summary=f"the rendezvous host's soft descriptor limit ({limits.nofile}) "
                    f"holds the job's store ({ranks} ranks on {nodes} node(s)) only if its process opens under "
                    f"{limits.nofile - ranks - nodes} files of its own; a training process (CUDA, NCCL, data "
                    f"loaders) takes about {PROCESS_DESCRIPTORS}", evidence=shown, fix=fix, kind=LIMIT_NOFILE)]


def _backlog_findings(read: Read, ranks: int, nodes: int) -> list[Finding]:
    """Every rank connects to the store at once at start-up; a listen backlog the kernel caps
    below that overflows, and clients are reset and retry (pytorch/pytorch#129261)."""
    host, limits = read
    caps = [c for c in (limits.somaxconn, limits.syn_backlog) if c is not None]
    if not caps or ranks + nodes <= min(caps):
        return []
    return [Finding(check=HOST_LIMITS, severity=WARN, nodes=(host.rank,),
                    summary=f"the rendezvous host's accept queue is capped at {min(caps)} "
                    f"(net.core.somaxconn {limits.somaxconn}, net.ipv4.tcp_max_syn_backlog {limits.syn_backlog}), "
                    f"and {ranks + nodes} connections come at once at start-up: the rest are reset and retry",
                    fix=f"sysctl -w net.core.somaxconn={ranks + nodes} net.ipv4.tcp_max_syn_backlog={ranks + nodes} "
                    "on the rendezvous host (and in /etc/sysctl.d to keep it)", kind=LIMIT_BACKLOG)]


def _memlock_findings(read: tuple[Read, ...], names: dict[int, str]) -> list[Finding]:
    """Nodes with an active RDMA port (NCCL's IB / RoCE transport registers its buffers)
    whose locked-memory limit is not unlimited, as NCCL's documentation asks: a failure at
    the sizes NCCL's own reports fail with, else a warning."""
    rdma = [r for r in read if r[0].facts.rdma and any(p.state == "ACTIVE" for p in r[0].facts.rdma.ports)]
    short = [r for r in rdma if r[1].memlock != -1]
    failing = [r for r in short if r[1].memlock <= MEMLOCK_FAILS]
    return ([_memlock_finding(FAIL, failing, names)] if failing else []) + \
        ([_memlock_finding(WARN, rest, names)] if (rest := [m for m in short if m not in failing]) else [])


def _memlock_finding(severity: str, group: list[Read], names: dict[int, str]) -> Finding:
    ranks = tuple(m.rank for m, _ in group)
    return Finding(check=HOST_LIMITS, severity=severity, nodes=ranks,
                   summary=f"locked memory is limited on {node_names(ranks, names)}, whose "
                   "NCCL would use RDMA: registering its buffers fails (ibv_reg_mr, ibv_create_cq) where they "
                   "exceed it",
                   evidence=per_node(((m.rank, f"memlock {_text(limits.memlock)}") for m, limits in group), names),
                   fix="`ulimit -l unlimited` where the job starts (limits.conf `memlock`, LimitMEMLOCK=infinity for "
                   "systemd or slurmd, PropagateResourceLimits=MEMLOCK, `docker run --ulimit memlock=-1`)",
                   kind=LIMIT_MEMLOCK)


def _stack_findings(read: tuple[Read, ...], names: dict[int, str]) -> list[Finding]:
    """Nodes with GPUs under an unlimited stack: glibc then gives NCCL's threads 2 MiB stacks,
    which crashes NCCL before 2.28. A failure where the libnccl the node would load is older;
    a warning where its version is not known."""
    unlimited = [m for m, limits in read if m.facts.gpus and limits.stack == -1]
    old = [m for m in unlimited if _libnccl(m) and nccl_version(_libnccl(m)) < STACK_SAFE_NCCL]
    unknown = [m for m in unlimited if not _libnccl(m)]
    return ([_stack_finding(FAIL, old, "is", names)] if old else []) + \
        ([_stack_finding(WARN, unknown, "may be", names)] if unknown else [])


def _stack_finding(severity: str, group: list[Member], verb: str, names: dict[int, str]) -> Finding:
    ranks = tuple(m.rank for m in group)
    return Finding(check=HOST_LIMITS, severity=severity, nodes=ranks,
                   summary=f"the stack is unlimited on {node_names(ranks, names)}, whose NCCL "
                   f"{verb} older than 2.28: it crashes there (glibc gives its threads 2 MiB stacks)",
                   evidence=per_node(((m.rank, f"stack unlimited, libnccl {_libnccl(m) or 'not found'}")
                                      for m in group), names),
                   fix="a finite stack where the job starts (`ulimit -s 8192`), or NCCL 2.28 or newer",
                   kind=LIMIT_STACK)


def _libnccl(m: Member) -> str:
    return m.facts.rdma.libnccl.version if m.facts.rdma else ""


def _text(limit: int) -> str:
    return "unlimited" if limit == -1 else str(limit)

