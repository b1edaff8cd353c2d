"""Phase 2, reach: who hosts, the host's listen before torch is imported, and a joiner's probe
of HOST:PORT."""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Generator

from netcheck.core.budget import TimeBudget
from netcheck.core.constants import LOCAL_HOST_GRACE, PROBE_TIMEOUT, SLOW_LOOKUP
from netcheck.core.deadline import Deadline
from netcheck.core.model import (
    HOST,
    Finding,
    Member,
    NodeFacts,
    Probe,
    SilentNameserver,
    SlowNameserver,
    is_torchrun_worker,
)
from netcheck.core.names import is_loopback
from netcheck.core.nictable import address_owners
from netcheck.facts.conntrack import read_conntrack
from netcheck.facts.listener import PortTaken, listen, port_holders
from netcheck.facts.nameservers import ask_nameservers, lookup_bound, nameserver_look
from netcheck.facts.probe import Lookup, lookup, named_in, probe_all, reach, resolve_addresses
from netcheck.phases.state import Learnt, Run
from netcheck.rules import conntrack as conntrack_rules
from netcheck.rules import endpoint as endpoint_rules
from netcheck.rules import ports as ports_rules
from netcheck.rules import rdzv as rdzv_rules
from netcheck.rules import reach as reach_rules
from netcheck.rules.registry import (
    CONNTRACK_FULL,
    HOST_CONNTRACK,
    RDZV_REACH,
    RESOLVE_NO_MACHINE,
    RESOLVE_SILENT,
    RESOLVE_SLOW,
)


def reached(run: Run) -> tuple[bool, Learnt]:
    """A joiner's probe of the endpoint, run under the reach phase: whether it goes on to the
    rendezvous, and what it learnt. One that points at this very node (its own address, or
    loopback) while it is not rank 0 waits only as long as a host on this machine needs to start
    listening: past that, the launch line is wrong, and waiting cannot fix it."""
    rdzv = run.config.rdzv
    ask_nameservers()   # answered while the endpoint is looked up and probed
    resolved = lookup(rdzv.host, rdzv.port, lookup_bound(run.join_deadline))
    itself = endpoint_rules.points_at_itself(tuple(s[0] for _, s in resolved[0]), run.local_facts)
    found = reach(rdzv.host, rdzv.port, run.join_deadline.within(LOCAL_HOST_GRACE) if itself else run.join_deadline,
                  resolved=resolved, answer_by=_answer_by(run))
    facts = dataclasses.replace(run.local_facts, reach=found)
    silent, slow = nameserver_look(run.join_deadline)
    budget = _slower(run, found.resolve_seconds, slow)
    mistakes = endpoint_rules.endpoint_findings(rdzv, found.addresses, facts, found.outcome)
    # What squats on a port of this very machine can be named here.
    mine = set(found.addresses) & set(address_owners(facts.nics))
    holders = tuple(port_holders(rdzv.port)) if mine and found.outcome == "not_store" else ()
    # A refusal the launch line explains gets its fix, not rdzv.reach's "start the host first".
    own = reach_rules.reach_findings(found, run.my_ranks(), holders, silent, slow, run.config.launch)
    table = _table_explains(run, facts, found.probes) if found.outcome == "filtered" else []
    if table:
        own = [f for f in own if f.check != RDZV_REACH] + table   # its own table dropped them
    findings = [f for f in own if not (mistakes and f.check == RDZV_REACH)] + mistakes \
        + _nameserver_findings(run, own, silent, slow) \
        + _variables_findings(run, facts, found.addresses, (budget or run.budget).join)
    return found.outcome == "open" and not mistakes, Learnt(
        tuple(findings), withdrawn=frozenset((HOST_CONNTRACK,)) if table else frozenset(), facts=facts, budget=budget)


def _nameserver_findings(run: Run, endpoint: list[Finding], silent: tuple[SilentNameserver, ...],
                         slow: tuple[SlowNameserver, ...]) -> list[Finding]:
    """This node's silent and slow nameservers, where the endpoint's own findings (its lookup's
    failure, or its late answer) do not name them already."""
    named = {f.kind for f in endpoint}
    return reach_rules.resolver_findings(() if named & {RESOLVE_SILENT, RESOLVE_NO_MACHINE} else silent, run.my_ranks(),
                                         () if RESOLVE_SLOW in named else slow, run.config.rdzv.host,
                                         run.config.launch, on_rank0=run.role == HOST)


def _slower(run: Run, lookup_seconds: float, slow: tuple[SlowNameserver, ...]) -> TimeBudget | None:
    """Where this node's lookups are slow (the endpoint's, or its nameserver's answer), the join
    lasts longer: the joiners behind that resolver come later (TimeBudget.slow_lookups). None:
    they are not slow."""
    seconds = max([lookup_seconds, *(s.seconds for s in slow)])
    return run.budget.slow_lookups(seconds, run.config.phases) if seconds >= SLOW_LOOKUP else None


def _answer_by(run: Run) -> Deadline:
    """How long a silent store is waited on: a store held up by another client answers late
    (facts.probe.store_answer), a hung process never. Up to a probe's timeout before the
    join deadline: an answer past that leaves no time to sign in before the host closes."""
    return Deadline(max(0.0, run.join_deadline.remaining() - PROBE_TIMEOUT))


def take_role(run: Run) -> Generator[Learnt, None, bool]:
    """Rank 0 hosts; without ranks, the node that owns the rendezvous address does.

    The host listens at once, before torch is imported, so early joiners queue instead
    of being refused; under torchrun, rank 0 hosts on the agent's own store instead
    (torchrun shares its rendezvous store with its workers). Two nodes on one machine (a
    loopback test) cannot both listen: the second finds netcheck holding the port and
    joins instead. False: this node was to host and cannot.
    """
    launch = run.config.launch
    rank = launch.node_rank
    if rank not in (None, 0):
        return True
    if rank is None:
        addresses, named = _rdzv_addresses(run), _called_like_the_endpoint(run)
        if named and addresses and not (_owned(run, addresses) or _loopback(addresses)):
            # torchrun would host its store here, by name, apart from the node that has it.
            yield Learnt((rdzv_rules.endpoint_name_taken(run.config.rdzv.host, addresses),))
            return False
        if not (named or _owned(run, addresses)):
            return True
    hosts = Learnt(role=HOST, rank=0)
    if is_torchrun_worker(launch) and launch.variables.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        yield hosts
        return True
    with run.phase("reach"):
        try:
            ask_nameservers()   # answered while the endpoint is looked up and listened on
            resolved = lookup(run.config.rdzv.host, run.config.rdzv.port, lookup_bound(run.join_deadline))
            listener = listen(run.config.rdzv.port, ipv4_only={f for f, _ in resolved[0]} == {socket.AF_INET})
        except PortTaken as taken:
            if rank is None and any("netcheck" in h.cmdline for h in taken.holders):
                return True   # netcheck hosts on this machine already: this node joins it
            yield dataclasses.replace(hosts, findings=(reach_rules.listen_finding(taken.port, taken.holders,
                                                                                  str(taken.strerror)),))
            return False
        yield hosts
        own = _own_connect(run, resolved[0])
        if any(p.outcome != "open" for p in own):
            listener.close()
            # Its own full table, where that is why, in place of the local phase's word on it.
            table = _table_explains(run, run.local_facts, own)
            yield Learnt(tuple(table or [reach_rules.firewalled_finding(run.config.rdzv.port, own)]),
                         withdrawn=frozenset((HOST_CONNTRACK,)) if table else frozenset())
            return False
        yield Learnt((reach_rules.listen_pass(run.config.rdzv.port),), listener=listener)
        silent, slow = nameserver_look(run.join_deadline)
        yield Learnt(budget=_slower(run, resolved[2], slow))
        own_endpoint = _own_endpoint_findings(run, resolved, silent, slow)
        late = reach_rules.slow_lookup(run.config.rdzv.host, resolved[2], named_in(run.config.rdzv.host), slow,
                                       run.my_ranks(), run.config.launch, on_rank0=True) if resolved[0] else []
        yield Learnt(tuple(_nameserver_findings(run, late + own_endpoint, silent, slow) + late + own_endpoint
                           + _variables_findings(run, run.local_facts, tuple(s[0] for _, s in resolved[0]),
                                                 run.join_deadline)))
        return True
    return False


def _table_explains(run: Run, facts: NodeFacts, probes: tuple[Probe, ...]) -> list[Finding]:
    """This node's own connects went unanswered: where its connection-tracking table is full
    (read now, or before netcheck's first socket) and nothing but silence came, the table is the
    cause, named with them, to stand in place of the local phase's view of it (host.conntrack's
    earlier findings withdrawn); [] where it is not."""
    if not conntrack_rules.unanswered_probes(probes):
        return []
    me = (Member(-1 if run.rank is None else run.rank, facts),)
    found = conntrack_rules.table_findings(me, {me[0].rank: read_conntrack()}, ports_rules.own_size(run.config.launch),
                                           probes=probes, read=conntrack_rules.READ_AT_REACH)
    return found if any(f.kind == CONNTRACK_FULL for f in found) else []


def _own_endpoint_findings(run: Run, resolved: Lookup, silent: tuple[SilentNameserver, ...],
                           slow: tuple[SlowNameserver, ...]) -> list[Finding]:
    """The endpoint as the job's rank 0 will use it, judged at once: torch's store there connects
    its own client to it. A name that does not resolve here is said; addresses none of which
    this node holds are connected to, as that client would (loopback aside: it reaches here)."""
    entries, error, _ = resolved
    owned = address_owners(run.local_facts.nics)
    elsewhere = [(f, sa) for f, sa in entries if sa[0] not in owned and not is_loopback(sa[0])]
    probes = probe_all(elsewhere, PROBE_TIMEOUT, handshake=False) if entries and len(elsewhere) == len(entries) else ()
    return endpoint_rules.own_endpoint_findings(run.config.rdzv, tuple(sa[0] for _, sa in entries), error,
                                                run.local_facts, probes, silent, slow)


def _own_connect(run: Run, resolved: list[tuple[int, tuple]]) -> tuple[Probe, ...]:
    """The host's connect to its own port, through the endpoint's addresses it owns (loopback
    where it owns none: where the store's own client connects). A firewall rule for the port
    on the host blocks these too (local traffic crosses the INPUT chain on lo), and with them
    the store's own client: torch then fails deep in the store's constructor."""
    owned = address_owners(run.local_facts.nics)
    mine = [(family, sockaddr) for family, sockaddr in resolved if sockaddr[0] in owned]
    return probe_all(mine or [(socket.AF_INET, ("127.0.0.1", run.config.rdzv.port))], PROBE_TIMEOUT,
                     handshake=False)


# Without ranks the node the endpoint names hosts, as torchrun decides who hosts its c10d
# store (torch.distributed.elastic.rendezvous.utils._matches_machine_hostname): this machine's
# hostname or FQDN, or an address it holds. By name too: Debian's stock /etc/hosts puts the
# hostname on 127.0.1.1, which no interface holds, and torchrun still hosts there.

def _called_like_the_endpoint(run: Run) -> bool:
    return run.config.rdzv.host in (run.local_facts.hostname, run.local_facts.fqdn)


def _rdzv_addresses(run: Run) -> tuple[str, ...]:
    return tuple(resolve_addresses(run.config.rdzv.host, lookup_bound(run.join_deadline))[0])


def _owned(run: Run, addresses: tuple[str, ...]) -> bool:
    own = address_owners(run.local_facts.nics)
    return any(a in own for a in addresses)


def _loopback(addresses: tuple[str, ...]) -> bool:
    return any(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def _variables_findings(run: Run, facts: NodeFacts, endpoint_addresses: tuple[str, ...],
                        join: Deadline) -> list[Finding]:
    """launch.env on this node: MASTER_ADDR looked up (within the join's deadline) only when it is
    spelt differently."""
    master = facts.launch.variables.get("MASTER_ADDR", "").strip("[]")
    same = not master or master == run.config.rdzv.host
    master_addresses = endpoint_addresses if same else resolve_addresses(master, lookup_bound(join))[0]
    return endpoint_rules.flags_findings(run.config.rdzv, endpoint_addresses, master_addresses, facts)
