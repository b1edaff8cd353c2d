"""host.conntrack: each node's connection-tracking table against the entries the job adds there,
and the failed connects a full table explains before any firewall does.

Where a stateful firewall or NAT runs (iptables' -m conntrack or -m state, nftables' ct, Docker's
and Kubernetes' NAT), netfilter keeps an entry per connection in the node's network namespace
(net.netfilter.nf_conntrack_count), up to the machine's limit (net.netfilter.nf_conntrack_max: set
in the initial namespace, read-only in the others; the count is each namespace's own). A new
connection that finds the table at its limit, and no unanswered entry near its hash to evict, is
dropped: its SYN goes unanswered, in and out, which its peer sees as a firewall's DROP
("filtered"), and the kernel logs "nf_conntrack: table full, dropping packet". An entry outlives
its connection: 120 s in TIME-WAIT; an established one up to 5 days, where it is never closed.

The job adds at least an entry per connection with an end on the node: its ranks' store clients
(every rank's on the rendezvous host, each on its own node) and a connection per pair of ranks
with a rank there (gloo's full mesh; NCCL's peer connections, with their data sockets where
NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS is set). A table at its limit, or whose kernel
dropped packets for want of an entry during netcheck's run, fails (`table_full`), and explains
every direction into or out of that node that got no answer; one that cannot hold the job's
entries beside its count fails (`no_room`); one that holds them only within CONNTRACK_WARN_SHARE
of its limit warns (`nearly_full`). A table that holds no entry at any reading is in no use (no
stateful firewall or NAT in that namespace: netcheck's own connects took none) and is not judged.
Pure: no I/O, no printing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from netcheck.core.fields import MAX_ITEMS
from netcheck.core.meshrecords import FILTERED, Attempt, FullTable
from netcheck.core.model import (
    FAIL,
    PASS,
    WARN,
    ConntrackTable,
    Finding,
    Member,
    NodeFacts,
    Probe,
    hostnames,
    is_torchrun_worker,
    node_address,
)
from netcheck.rules.limits import layout
from netcheck.rules.mesh import unanswered
from netcheck.rules.pernode import name_of, node_names, per_pair, ranks_note
from netcheck.rules.ports import nccl_sockets
from netcheck.rules.rdma import used_ports
from netcheck.rules.registry import CONNTRACK_FULL, CONNTRACK_NEARLY_FULL, CONNTRACK_NO_ROOM, HOST_CONNTRACK

# host.conntrack: a node's connection-tracking table that holds the job's connections beside its
# count only above this share of its limit warns (monitoring's usual line: netdata warns at 90%,
# a burst of other connections or NCCL's sockets beside those counted fills the rest).
CONNTRACK_WARN_SHARE = 0.9

EMPTY = ConntrackTable(0, 0)
READ_AFTER_MESH = "after the mesh's"                      # when the second reading was taken
READ_AT_REACH = "when its own connects went unanswered"


@dataclass(frozen=True)
class Judged:
    """One node's table (under torchrun, a host's ranks together: they share its namespace), read
    before netcheck's connects and, where it got that far, after the mesh's."""

    ranks: tuple[int, ...]
    facts: NodeFacts
    before: ConntrackTable
    after: ConntrackTable | None
    store: int          # entries of the job's store connections here
    pairs: int          # entries of its connections between ranks, one end here
    judged_ranks: int | None   # the job's size this was judged against (None: not known yet)

    @property
    def need(self) -> int:
        return self.store + self.pairs

    @property
    def count(self) -> int:
        """The most entries read: after the mesh, netcheck's own closed connections still hold
        theirs (TIME-WAIT, 120 s) beside the others', as the job started right after meets them."""
        return max(self.before.count, self.after.count if self.after else 0)

    @property
    def limit(self) -> int:
        return (self.after or self.before).limit

    @property
    def dropped(self) -> int:
        """Packets the kernel dropped for want of an entry between the two readings."""
        if self.after is None or self.after.drop is None or self.before.drop is None:
            return 0
        return max(0, self.after.drop - self.before.drop)

    @property
    def full(self) -> bool:
        return self.before.full or (self.after is not None and self.after.full) or self.dropped > 0

    @property
    def short(self) -> bool:
        return not self.full and 0 < self.limit < self.count + self.need

    @property
    def tight(self) -> bool:
        return not (self.full or self.short) and 0 < self.limit * CONNTRACK_WARN_SHARE < self.count + self.need


def judged(members: tuple[Member, ...], after: Mapping[int, ConntrackTable | None],
           size: tuple[int | None, int | None]) -> list[Judged]:
    """The members whose tables are in use, a node at a time, in rank order: read, and holding an
    entry at some reading (a namespace where no stateful firewall or NAT ever saw a connection
    holds none, netcheck's own included, and drops nothing for want of room)."""
    ranks, nodes = size
    by_host: dict[str, list[Member]] = {}
    for m in members:
        if m.facts.conntrack is not None and (m.facts.conntrack.count or (after.get(m.rank) or EMPTY).count):
            by_host.setdefault(m.facts.hostname, []).append(m)
    out = []
    for ms in by_host.values():
        first = ms[0]
        facts, here = first.facts, tuple(m.rank for m in ms)
        procs = facts.launch.nproc_per_node
        agents = 1 if is_torchrun_worker(facts.launch) else 0
        store = (ranks + (nodes or 1) * agents if 0 in here and ranks else procs + agents)
        per_pair = 1 + (nccl_sockets(facts.socket_env) if facts.gpus and not used_ports(first) else 0)
        pairs = procs * (procs - 1) // 2 + (procs * (ranks - procs) * per_pair if ranks else 0)
        table_after = next((t for r in here if (t := after.get(r)) is not None), None)
        out.append(Judged(here, facts, facts.conntrack, table_after, store, pairs, ranks))  # type: ignore[arg-type]
    return out


def table_findings(members: tuple[Member, ...], after: Mapping[int, ConntrackTable | None] | None = None,
                   size: tuple[int | None, int | None] | None = None, attempts: tuple[Attempt, ...] = (),
                   probes: tuple[Probe, ...] = (), read: str = READ_AFTER_MESH) -> list[Finding]:
    """Every node's table against its share of the job. after: rank -> its table once the mesh's
    connects were made; size: (ranks, nodes) of the job where the members are not all of it (a
    node's own view before the rendezvous; None: not known yet); attempts: the mesh's connects,
    those into or out of a full table quoted as what it did; probes: this node's own connects to
    the endpoint (its reach probe, or the host's to its own port), quoted alike where it is full;
    read: when `after` was read, as the evidence says it."""
    ranks, nodes = size or layout(members)
    every = judged(members, after or {}, (ranks, nodes))
    if not every:
        return []
    names = hostnames(members)
    job = _job(ranks, nodes, every[0].facts)
    findings: list[Finding] = []
    if full := [j for j in every if j.full]:
        at = tuple(r for j in full for r in j.ranks)
        failed = failed_lines(names, {r for j in full for r in j.ranks}, attempts) + _probe_lines(probes)
        first = full[0]
        said = f"; {len(failed)} of netcheck's own connects there went unanswered so" if failed else ""
        findings.append(Finding(
            check=HOST_CONNTRACK, severity=FAIL, nodes=at,
            summary=f"the connection-tracking table of {node_names(at, names)} {_fullness(first)}: "
            "the kernel drops every new connection into and out of it unanswered, as a firewall's DROP looks from "
            f"its peers; the job's store, gloo and NCCL connections there fail or hang ({job}){said}",
            evidence=tuple(_line(j, names, read) for j in full) + failed, fix=_fix(full, members), kind=CONNTRACK_FULL))
    if short := [j for j in every if j.short]:
        at, first = tuple(r for j in short for r in j.ranks), short[0]
        findings.append(Finding(
            check=HOST_CONNTRACK, severity=FAIL, nodes=at,
            summary=f"the connection-tracking table of {node_names(at, names)} has room for "
            f"{first.limit - first.count} more entries ({first.count} of {first.limit}), fewer than the job's "
            f"connections take there (at least {first.need}; {job}): the kernel drops those past its room unanswered, "
            "and they fail or hang until older entries expire", evidence=tuple(_line(j, names, read) for j in short),
            fix=_fix(short, members), kind=CONNTRACK_NO_ROOM))
    if tight := [j for j in every if j.tight]:
        at, first = tuple(r for j in tight for r in j.ranks), tight[0]
        findings.append(Finding(
            check=HOST_CONNTRACK, severity=WARN, nodes=at,
            summary=f"the connection-tracking table of {node_names(at, names)} holds the job's "
            f"connections (at least {first.need} entries beside {first.count} of {first.limit}; {job}) only within "
            f"{CONNTRACK_WARN_SHARE:.0%} of its limit: a burst of other connections, or NCCL's sockets beside the "
            "ones counted, fills it, and new connections are then dropped unanswered",
            evidence=tuple(_line(j, names, read) for j in tight), fix=_fix(tight, members), kind=CONNTRACK_NEARLY_FULL))
    if not findings:
        findings.append(Finding(check=HOST_CONNTRACK, severity=PASS, nodes=tuple(r for j in every for r in j.ranks),
                                summary=f"the connection-tracking tables hold the job's connections ({job})",
                                evidence=tuple(_line(j, names, read) for j in every)))
    return findings


def _fullness(j: Judged) -> str:
    """How a full table showed itself: at its limit when read, or dropping meanwhile."""
    if j.count >= j.limit:
        return f"is full ({j.count} of {j.limit} entries)"
    return (f"filled during netcheck's run: its kernel dropped {j.dropped} packet(s) for want of an entry "
            f"({j.count} of {j.limit} entries when read)")


def full_tables(members: tuple[Member, ...], after: Mapping[int, ConntrackTable | None]) -> tuple[FullTable, ...]:
    """The nodes whose table was full around the mesh, a record per rank (the host tells them to
    every joiner with the mesh's go-ahead, the first MAX_ITEMS of them): the directions into
    and out of them that went unanswered are theirs to explain."""
    return tuple(FullTable(r, j.count, j.limit, j.dropped)
                 for j in judged(members, after, (None, None)) if j.full for r in j.ranks)[:MAX_ITEMS]


def unanswered_probes(probes: Iterable[Probe]) -> bool:
    """A node's own connects to the endpoint, some unanswered and none answered otherwise (an open
    one aside): what a full table leaves them, as a firewall's DROP would."""
    outcomes = {p.outcome for p in probes} - {"open"}
    return outcomes == {FILTERED}


def told_findings(names: dict[int, str], full: tuple[FullTable, ...], attempts: tuple[Attempt, ...],
                  facts: NodeFacts | None = None) -> list[Finding]:
    """A joiner's word on the full tables the host told it of, where they explain its own
    connects: the same cause as the host's report, with the directions it saw."""
    failed = failed_lines(names, {f.rank for f in full}, attempts) if full else ()
    if not failed:
        return []
    at = tuple(f.rank for f in full)
    first = full[0]
    evidence = tuple(f"{name_of(names, f.rank)}: {f.count} of {f.limit} entries"
                     + (f", {f.dropped} packet(s) dropped for want of an entry during netcheck's run" if f.dropped
                        else "") for f in full) + failed
    how = "is full" if first.count >= first.limit else "filled during netcheck's run"
    return [Finding(check=HOST_CONNTRACK, severity=FAIL, nodes=at,
                    summary=f"the connection-tracking table of {node_names(at, names)} {how} "
                    f"({first.count} of {first.limit} entries, the host's word): the kernel drops every new "
                    "connection into and out of it unanswered, as a firewall's DROP looks from its peers; "
                    f"{len(failed)} of this node's connects went unanswered so", evidence=evidence,
                    fix=_fix_text(node_names(at, names), first.count, first.limit, 0,
                                  subnet_of(facts) if facts else "SUBNET"), kind=CONNTRACK_FULL)]


def failed_lines(names: dict[int, str], full: set[int], attempts: tuple[Attempt, ...]) -> tuple[str, ...]:
    """The mesh's directions into or out of a full table that got no answer, a line each."""
    broken: dict[tuple[int, int], list[Attempt]] = {}
    for a in attempts:
        if a.src in full or a.dst in full:
            broken.setdefault((a.src, a.dst), []).append(a)
    connected = {d for d, tries in broken.items() if any(a.connected for a in tries)}
    return per_pair(((s, d, "; ".join(f"{a.ifname} {a.address}: {a.outcome} ({a.detail})" for a in tries))
                     for (s, d), tries in sorted(broken.items()) if (s, d) not in connected and unanswered(tries)),
                    names)


def _probe_lines(probes: tuple[Probe, ...]) -> tuple[str, ...]:
    return tuple(f"connect to {p.address} ({p.family}): {p.outcome}, {p.detail}" for p in probes
                 if p.outcome == FILTERED)


def _line(j: Judged, names: dict[int, str], when: str) -> str:
    """One node's line: its table before and after netcheck's connects, what the kernel dropped
    meanwhile, and the job's entries there counted."""
    b, a = j.before, j.after
    read = f"nf_conntrack_count {b.count} of nf_conntrack_max {b.limit or 'unlimited'} before netcheck's connects"
    if a is not None:
        read += f", {a.count} {when}"
        if j.dropped:
            read += f"; {j.dropped} packet(s) dropped for want of an entry meanwhile"
        if a.early_drop is not None and b.early_drop is not None and a.early_drop > b.early_drop:
            read += f"; {a.early_drop - b.early_drop} unanswered entries evicted to make room"
    procs = j.facts.launch.nproc_per_node
    where = "every rank's store client" if 0 in j.ranks and j.judged_ranks else "its ranks' store clients"
    mesh = (f"a connection per pair of ranks with one here ({procs} process(es) x {j.judged_ranks - procs} "
            f"rank(s) elsewhere, and between its own)" if j.judged_ranks else
            "a connection per pair of its own ranks (the other nodes' not known yet)")
    return (f"{name_of(names, j.ranks[0])}{ranks_note(j.ranks)}: {read}; the job adds at least {j.need} here: "
            f"{j.store} for {where}, {j.pairs} for {mesh}")


def _fix(tables: list[Judged], members: tuple[Member, ...]) -> str:
    most = max(tables, key=lambda j: j.count + j.need)
    names = hostnames(members)
    where = node_names([r for j in tables for r in j.ranks], names)
    return _fix_text(where, most.count, most.limit, most.need, subnet_of(most.facts))


def _fix_text(where: str, count: int, limit: int, need: int, subnet: str) -> str:
    target = max(limit * 2, count + need, 1)
    raised = 1 << (target - 1).bit_length()   # the power of two at or above: twice the limit, or the job's room
    return (f"make room on {where}: raise the machine's limit (`sysctl -w net.netfilter.nf_conntrack_max={raised}` "
            "in its initial namespace, a container's host for a container, and in /etc/sysctl.d to keep it), or "
            "let finished connections go sooner (net.netfilter.nf_conntrack_tcp_timeout_time_wait, "
            "..._tcp_timeout_established), or exempt the job's traffic from tracking: "
            f"`iptables -t raw -I PREROUTING -s {subnet} -j CT --notrack; iptables -t raw -I OUTPUT -d {subnet} "
            f"-j CT --notrack; iptables -I INPUT -s {subnet} -m conntrack --ctstate UNTRACKED -j ACCEPT`; "
            "`conntrack -S` and `conntrack -L` show what fills it")


def subnet_of(facts: NodeFacts) -> str:
    """The node's own subnet (its peers' address's interface, IPv4), for a rule a person pastes;
    SUBNET where it is not known."""
    address = node_address(facts)
    for nic in facts.nics.nics:
        for a in nic.addresses:
            if a.address == address and a.family == "ipv4":
                return str(ipaddress.ip_interface(f"{a.address}/{a.prefixlen}").network)
    return "SUBNET"


def _job(ranks: int | None, nodes: int | None, facts: NodeFacts) -> str:
    """The job's size as judged: ranks, nodes, processes per node."""
    procs = facts.launch.nproc_per_node
    if ranks is None or nodes is None:
        return f"{procs} process(es) on this node; the number of nodes not known yet"
    return f"the job judged: {ranks} ranks, {nodes} node(s) x {procs} process(es)"
