"""The rendezvous endpoint's checks (rdzv.resolve, rdzv.reach, rdzv.listen): the reach probe,
the endpoint's name and the nodes' nameservers, the host's listen. Facts in, findings out.

Longer than 500 lines: the three checks share the probe's, the route's and the lookup's words
(a reach's evidence quotes its lookup, a resolver's finding its route); the nameservers' half is
the seam a split takes, once the registry names its judges as objects rather than module paths.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from netcheck.core.budget import LOOKUPS_BEFORE_SIGN_IN
from netcheck.core.constants import SLOW_LOOKUP
from netcheck.core.model import (
    FAIL,
    PASS,
    UNANSWERED,
    UNANSWERED_HANDSHAKE,
    UNANSWERED_LOOKUP,
    WARN,
    Endpoint,
    Finding,
    Holder,
    Launch,
    Member,
    Probe,
    Reach,
    Route,
    SilentNameserver,
    SlowNameserver,
    hostnames,
)
from netcheck.core.names import lookups_per_connect
from netcheck.rules.majority import split
from netcheck.rules.pernode import node_names, per_node
from netcheck.rules.rdzv import members_count
from netcheck.rules.registry import (
    JOIN_MISSING,
    LISTEN_FIREWALLED,
    LISTEN_TWO_HOSTS,
    RDZV_JOIN,
    RDZV_LISTEN,
    RDZV_REACH,
    RDZV_RESOLVE,
    REACH_NO_MACHINE,
    REACH_NOT_STORE,
    REACH_SHARED_SUBNET,
    REACH_WRONG_PREFIX,
    RESOLVE_NO_MACHINE,
    RESOLVE_SILENT,
    RESOLVE_SLOW,
)

# The host's rank: where this node's connects reach the host's machine and go no further (a
# refusal, a drop, a process on its port that is no store), what stops them is there (issue 65).
HOST_AT_FAULT = (0,)
REACH_FIXES = {
    "refused": "start netcheck on the host node first (it waits for joiners), check the port "
               "number, and remove any REJECT rule for the port on the host",
    "filtered": "open the port in the host's firewall (iptables/nftables, a cloud security "
                "group) for traffic from this node; where the host's own report names its "
                "connection-tracking table full (host.conntrack), make room there instead: a full "
                "table drops new connections unanswered, as a firewall does",
    "unreachable": "this node has no route to the host: check the address, the subnet and "
                   "the routes (ip route get ADDRESS)",
    "dns": "use an address, or add the name to DNS or /etc/hosts on this node",
    "not_store": "a stale or hung process holds the port on the host node (an earlier job's rank 0, "
                 "a stopped process, another program): stop it there, or pick another port for the "
                 "job and netcheck",
}


def reach_findings(reach: Reach, ranks: tuple[int, ...], holders: tuple[Holder, ...] = (),
                   silent: tuple[SilentNameserver, ...] = (), slow: tuple[SlowNameserver, ...] = (),
                   launch: Launch | None = None) -> list[Finding]:
    """A joiner's own view of HOST:PORT: one rdzv.resolve and one rdzv.reach finding.
    `holders`: the processes listening on the port, where the endpoint is this node's own;
    `silent` and `slow`: this node's nameservers that did not answer, or answered late (a
    name they never answered for is not a name that does not exist); `launch`: the job's
    layout, which a slow lookup costs per rank."""
    endpoint = str(Endpoint(reach.host, reach.port))  # [v6]:port, as --rdzv takes it
    lookup = f"getaddrinfo({reach.host!r}): {reach.resolve_error}"
    if reach.outcome == "dns" and (hidden := out_of_reach(silent, ranks, FAIL, f"{reach.host} does not resolve on "
                                                        "this node", (lookup,))):
        return hidden
    if reach.outcome == "dns" and silent:
        return [Finding(check=RDZV_RESOLVE, severity=FAIL, nodes=ranks,
                        summary=f"{reach.host} does not resolve on this node: its nameserver "
                        f"{_servers(silent)} did not answer (not an answer that the name does not exist)",
                        evidence=(lookup, *_silent_lines(silent)), fix=RESOLVER_FIX, kind=RESOLVE_SILENT)]
    if reach.outcome == "dns" and (cut := cut_short(reach.host, reach.resolve_error, slow, ranks)):
        return cut
    if reach.outcome == "dns":
        return [Finding(check=RDZV_RESOLVE, severity=FAIL, nodes=ranks,
                        summary=f"{reach.host} does not resolve on this node", evidence=(lookup,),
                        fix=REACH_FIXES["dns"])]
    (resolved,) = slow_lookup(reach.host, reach.resolve_seconds, reach.named_in, slow, ranks, launch) or \
        [Finding(check=RDZV_RESOLVE, severity=PASS, nodes=ranks,
                 summary=f"{reach.host} resolves to {', '.join(reach.addresses)}")]
    evidence = tuple(f"{p.address} ({p.family}): {p.outcome}, {p.detail}, {p.seconds:.2f} s"
                     for p in reach.probes) + (f"{reach.attempts} attempt(s) over {_seconds(reach.seconds)}",) + \
        tuple(_route_line(p.address, p.route) for p in reach.probes if p.route)
    if reach.outcome == "open":
        return [resolved, Finding(check=RDZV_REACH, severity=PASS, nodes=ranks,
                                  summary=f"{endpoint} is open from this node", evidence=evidence)]
    if reach.outcome == "not_store":
        return [resolved, _not_store(reach, endpoint, ranks, evidence, holders)]
    if (route := _nobody_there(reach)) is not None:
        return [resolved, _no_machine(reach, route, endpoint, ranks, evidence)]
    summary = _reach_summary(reach, endpoint)
    if reach.outcome == "unreachable" and (routed := _routed(reach)):
        probe, gateway = routed
        return [resolved, Finding(check=RDZV_REACH, severity=FAIL, nodes=ranks,
                                  summary=f"{endpoint} is unreachable from this node: its route "
                                  f"leads via {gateway}, and a router on the way could not deliver to "
                                  f"{probe.address} ({probe.detail})", evidence=evidence,
                                  fix=_routed_fix(reach, probe.address))]
    return [resolved, Finding(check=RDZV_REACH, severity=FAIL, nodes=ranks, summary=summary, evidence=evidence,
                              fix=REACH_FIXES[reach.outcome],
                              cause_nodes=HOST_AT_FAULT if _host_answered(reach) else None)]


def _host_answered(reach: Reach) -> bool:
    """Whether the host's machine (or the router before it) answered this node, so that its link
    works that far and what keeps it out is on the host's side (issue 65): a refusal is a reset
    from there (nothing listens, or a REJECT rule); a filtered connect, where ARP / NDP got the
    next hop's answer for every address (a DROP rule's machine answers ARP). A node whose own link
    is cut gets no answer at all (rdzv.reach no_machine, its own fault)."""
    if reach.outcome == "refused":
        return True
    return reach.outcome == "filtered" and bool(reach.probes) and all(
        p.outcome == "refused" or (p.route is not None and p.route.neighbour_state != "" and
                                   not p.route.nobody_answered) for p in reach.probes)


def _routed(reach: Reach) -> tuple[Probe, str] | None:
    """(the first unreachable probe, its gateway), where the kernel routed it via a gateway that
    answered ARP / NDP: the refusal came from a router on the way, not from this node's own
    table."""
    probe = next((p for p in reach.probes if p.outcome == "unreachable"), None)
    route = probe.route if probe else None
    if probe is None or route is None or route.gateway is None or route.nobody_answered:
        return None
    return probe, route.gateway


def _routed_fix(reach: Reach, address: str) -> str:
    where = f" ({reach.host} comes from {_source(reach)})" if reach.named_in else ""
    return (f"check the address{where}: a router on the way cannot deliver to {address} (a typo, a stale name, an "
            "address of another network, or a machine down behind that router); else the routes past this node "
            f"(ip route get {address}, traceroute {address})")


RESOLVER_FIX = ("repair the nameserver, or name one that answers in /etc/resolv.conf; meanwhile list every node and "
                "the endpoint in /etc/hosts on every node and shorten the wait (options timeout:1 attempts:1 in "
                "/etc/resolv.conf): torch's store looks up the address of every connection, client and server side")


def resolver_findings(silent: tuple[SilentNameserver, ...], ranks: tuple[int, ...],
                      slow: tuple[SlowNameserver, ...] = (), host: str = "", launch: Launch | None = None,
                      on_rank0: bool = False) -> list[Finding]:
    """This node's nameservers that do not answer, or answer late: a warning naming each
    (where it is named, how long a lookup waits for it, what that costs the job's store, whose
    clients connect to `host`), not a fault of the hosts it slows down. `on_rank0`: this node
    serves the job's store."""
    findings = []
    wait = sum(s.lookup_wait for s in silent)
    if hidden := out_of_reach(silent, ranks, WARN, f"every lookup /etc/hosts cannot answer on this node waits up to "
                              f"{wait:g} s, torch's store connections included"):
        findings += hidden
    elif silent:
        findings.append(Finding(check=RDZV_RESOLVE, severity=WARN, nodes=ranks,
                                summary=f"this node's nameserver {_servers(silent)} does not "
                                f"answer: every lookup /etc/hosts cannot answer waits up to {wait:g} s for it, torch's "
                                "store connections included", evidence=_silent_lines(silent), fix=RESOLVER_FIX,
                                kind=RESOLVE_SILENT))
    if slow:
        late = max(s.seconds for s in slow)
        findings.append(Finding(check=RDZV_RESOLVE, severity=WARN, nodes=ranks,
                                summary=f"this node's nameserver {_servers(slow)} answers "
                                f"{late:.1f} s late: every lookup /etc/hosts cannot answer waits that long, and "
                                f"{lookup_cost(host, late, launch, on_rank0)}", evidence=_slow_lines(slow),
                                fix=SLOW_FIX, kind=RESOLVE_SLOW))
    return findings


def out_of_reach(silent: tuple[SilentNameserver, ...], ranks: tuple[int, ...], severity: str, lead: str,
                 head: tuple[str, ...] = ()) -> list[Finding]:
    """A silent nameserver where no machine answered ARP / NDP for its address (or its gateway):
    this node's own network keeps it out (its prefix, a second NIC on the subnet), and "repair
    the nameserver" would send its owner to a server that answers everyone else. None where
    every silent nameserver's next hop answered (a server silent indeed). `lead`: what it
    costs here; `head`: evidence before the nameservers'."""
    server = next((s for s in silent if s.route is not None and s.route.nobody_answered), None)
    if server is None or server.route is None:
        return []
    route = server.route
    what, fix = unreached(server.address, route, f"check the nameserver's address in {server.source} (no machine "
                             "holds it: a typo, a server moved or down), or name one that answers", "the nameserver")
    return [Finding(check=RDZV_RESOLVE, severity=severity, nodes=ranks,
                    summary=f"{lead}: its nameserver {server.address} is out of this node's reach: {what}",
                    evidence=(*head, *_silent_lines(silent), _route_line(server.address, route), *_link_lines(route)),
                    fix=fix, kind=RESOLVE_NO_MACHINE)]


SLOW_FIX = ("repair the nameserver, or name one that answers at once in /etc/resolv.conf (torch's store looks up the "
            "address of every connection it makes and takes, as ::ffff:a.b.c.d, which /etc/hosts does not answer); "
            "list the endpoint and every node in /etc/hosts on every node; do not shorten options timeout below its "
            "answer time: its lookups would fail instead of waiting")


def slow_lookup(host: str, seconds: float, named_in: str, slow: tuple[SlowNameserver, ...],
                ranks: tuple[int, ...], launch: Launch | None, on_rank0: bool = False) -> list[Finding]:
    """A lookup of the endpoint's name that answered, SLOW_LOOKUP or later: a warning with its
    seconds and what they cost the job (never "does not resolve"); none where it was prompt."""
    if seconds < SLOW_LOOKUP:
        return []
    where = f", from {named_in}" if named_in else ""
    return [Finding(check=RDZV_RESOLVE, severity=WARN, nodes=ranks,
                    summary=f"{host} resolves on this node, but only after {seconds:.1f} s (a slow "
                   f"resolver{_answers_late(slow)}): {lookup_cost(host, seconds, launch, on_rank0)}",
                   evidence=(f"getaddrinfo({host!r}): answered in {seconds:.2f} s{where}", *_slow_lines(slow)),
                   fix=SLOW_FIX, kind=RESOLVE_SLOW)]


def cut_short(host: str, error: str | None, slow: tuple[SlowNameserver, ...],
              ranks: tuple[int, ...], on_rank0: bool = False) -> list[Finding]:
    """A lookup netcheck stopped waiting for at its phase's deadline, behind a nameserver that
    answers late: the name may well resolve, later than this run could wait (not "does not
    resolve"). A failure still: the node was not tested. None otherwise."""
    if not slow or not (error or "").startswith(UNANSWERED_LOOKUP):
        return []
    late = max(s.seconds for s in slow)
    whose = "this node, rank 0" if on_rank0 else "this node"
    return [Finding(check=RDZV_RESOLVE, severity=FAIL, nodes=ranks,
                    summary=f"{host} was not resolved on {whose} in the time this run had for it: "
                   f"its nameserver {_servers(slow)} answers {late:.1f} s late (not an answer that the name does not "
                   "exist)", evidence=(f"getaddrinfo({host!r}): {error}", *_slow_lines(slow)),
                   fix=f"{SLOW_FIX}; or give netcheck a longer --timeout, so that the lookup is waited for",
                    kind=RESOLVE_SLOW)]


def lookup_cost(host: str, seconds: float, launch: Launch | None, on_rank0: bool = False) -> str:
    """What lookups of `seconds` cost the job (torch 2.13's c10d/socket.cpp): a store client looks
    up the endpoint's name (AAAA, then A) and the address it connects to, each rank at every
    connect (lookups_per_connect); rank 0's store looks up each connection it takes, on its
    one thread, so the job's ranks come in one after another, `seconds` apart."""
    ranks = f"each of this node's {launch.nproc_per_node} rank(s)" if launch else "each rank"
    lookups = lookups_per_connect(host)
    what = "the endpoint's AAAA and A, then the address it connects to" if lookups > 1 else \
        "the address it connects to"
    cost = f"{ranks} waits about {lookups * seconds:.0f} s on its store client's lookups ({what}) at every connect"
    if not on_rank0:
        return cost
    job = launch.nnodes_max * launch.nproc_per_node if launch and launch.nnodes_max else None
    served = f"the job's {job} ranks in about {job * seconds:.0f} s" if job else f"about {seconds:.1f} s a rank"
    return f"{cost}; rank 0's store looks up each rank that connects, on its one thread: {served} before the job starts"


def slow_lookups(members: tuple[Member, ...]) -> list[Finding]:
    """The host's view of its joiners' lookups of the endpoint: those that answered late, with
    each node's seconds (its own report names its nameserver)."""
    late = [(m, reach) for m in members if (reach := m.facts.reach) is not None and reach.outcome != "dns"
            and reach.resolve_seconds >= SLOW_LOOKUP]
    if not late:
        return []
    names, worst = hostnames(members), max(reach.resolve_seconds for _, reach in late)
    host, ranks = late[0][1].host, tuple(m.rank for m, _ in late)
    cost = lookup_cost(host, worst, None)
    return [Finding(check=RDZV_RESOLVE, severity=WARN, nodes=ranks,
                    summary=f"{host} resolves only after up to {worst:.1f} s on "
                    f"{node_names(ranks, names)} (a slow resolver): {cost}",
                    evidence=per_node([(m.rank, f"{reach.host} answered in {reach.resolve_seconds:.2f} s"
                                        + (f", from {reach.named_in}" if reach.named_in else ""))
                                       for m, reach in late], names),
                    fix=f"{SLOW_FIX} (each node's own report names its nameserver and its answer time)",
                    kind=RESOLVE_SLOW)]


def slow_join_explained(findings: list[Finding], lookup_seconds: float, join_seconds: float) -> list[Finding]:
    """Nodes that never joined while the host's own lookups took `lookup_seconds` each: named with
    that likely cause, not as missing alone. A joiner behind the same resolver makes
    LOOKUPS_BEFORE_SIGN_IN lookups before it can sign in, and the join, longer for them
    (`join_seconds`), may still have closed first; its own report says (rdzv.resolve resolver_slow,
    or rdzv.join late). Still a failure: the node was not tested."""
    if lookup_seconds < SLOW_LOOKUP:
        return findings
    cost = LOOKUPS_BEFORE_SIGN_IN * lookup_seconds
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=f.nodes,
                    summary=f"{f.summary}; this node's lookups take {lookup_seconds:.1f} s each (a "
                    f"slow resolver), so a node behind it spends about {cost:.0f} s on lookups before it can sign in, "
                    f"and the host waited {join_seconds:.0f} s", evidence=f.evidence,
                    fix=f"read each such node's own report (rdzv.resolve resolver_slow); {SLOW_FIX}; or give netcheck "
                    "a longer --timeout (the host takes nodes in for half of it, and longer where lookups are slow)",
                    kind=JOIN_MISSING) if f.kind == JOIN_MISSING else f for f in findings]


def _answers_late(slow: tuple[SlowNameserver, ...]) -> str:
    return f": its nameserver {_servers(slow)} answers {max(s.seconds for s in slow):.1f} s late" if slow else ""


def _servers(servers: tuple[SilentNameserver, ...] | tuple[SlowNameserver, ...]) -> str:
    return ", ".join(s.address for s in servers)


def _silent_lines(silent: tuple[SilentNameserver, ...]) -> tuple[str, ...]:
    return tuple(f"{s.address} (from {s.source}): no answer to a DNS query in {s.waited:g} s; a lookup waits up "
                 f"to {s.lookup_wait:g} s for it (timeout x attempts)" for s in silent)


def _slow_lines(slow: tuple[SlowNameserver, ...]) -> tuple[str, ...]:
    return tuple(f"{s.address} (from {s.source}): answered a DNS query in {s.seconds:.2f} s" for s in slow)


def _not_store(reach: Reach, endpoint: str, ranks: tuple[int, ...], evidence: tuple[str, ...],
               holders: tuple[Holder, ...]) -> Finding:
    """Something accepts on the port and does not speak TCPStore: a torch client would hang
    on it, so it is named, with the process where this node can see it."""
    detail = next(p.detail for p in reach.probes if p.outcome == "not_store")
    held = f"; held by {_named(holders)}" if holders else ""
    fix = REACH_FIXES["not_store"]
    if holders and holders[0].pid is not None:
        fix = f"stop that process (kill {holders[0].pid}), or pick another port for the job and netcheck"
    if detail.startswith(UNANSWERED_HANDSHAKE) and not holders:   # what it saw, not a cause it cannot see
        return Finding(check=RDZV_REACH, severity=FAIL, nodes=ranks,
                       summary=f"{endpoint} accepts connections but did not answer the TCPStore "
                       f"handshake: {detail}", evidence=evidence,
                       fix="read the host's report: a store held up by other clients' "
                       "connections (rdzv.join store_stalled there) answers late, a hung or stopped process never; "
                       + fix, kind=REACH_NOT_STORE, cause_nodes=HOST_AT_FAULT)
    return Finding(check=RDZV_REACH, severity=FAIL, nodes=ranks,
                   summary=f"{endpoint} accepts connections but is not a TCPStore: {detail}{held}",
                   evidence=evidence, fix=fix, kind=REACH_NOT_STORE, cause_nodes=HOST_AT_FAULT)


def _nobody_there(reach: Reach) -> Route | None:
    """The first address's route, where every address went unanswered and, for each, ARP / NDP
    got no reply from the next hop: no machine is there to run a firewall (a firewall's machine
    answers ARP, then drops). None otherwise, and where there was no address to probe."""
    silent = [p.route for p in reach.probes if p.route is not None and p.route.nobody_answered]
    if reach.outcome in UNANSWERED and silent and len(silent) == len(reach.probes):
        return silent[0]
    return None


def _no_machine(reach: Reach, route: Route, endpoint: str, ranks: tuple[int, ...],
                evidence: tuple[str, ...]) -> Finding:
    """No machine answered at the endpoint's address (or its gateway) on the interface the
    kernel's route takes (`route`, the first address's): unreached says why."""
    address = reach.probes[0].address
    lines = evidence + ((f"{reach.host}: {reach.named_in}",) if reach.named_in else ()) + _link_lines(route)
    what, fix = unreached(address, route, _no_machine_fix(reach), "the host node")
    kind = REACH_SHARED_SUBNET if route.shared else REACH_WRONG_PREFIX if wider_than_link(route, address) else \
        REACH_NO_MACHINE
    named = f"; {reach.host} resolves to {address} from {_source(reach)}" \
        if reach.named_in and kind != REACH_SHARED_SUBNET else ""
    return Finding(check=RDZV_REACH, severity=FAIL, nodes=ranks, summary=f"{endpoint}: {what}{named}", evidence=lines,
                   fix=fix, kind=kind)


def unreached(address: str, route: Route, address_fix: str, holder: str) -> tuple[str, str]:
    """(what, the fix) where no machine answered ARP / NDP at ADDRESS (or its
    gateway) on the interface ROUTE takes; `address_fix`: the fix where the address itself is
    wrong; `holder`: the machine meant to hold it. Where another interface shares the subnet,
    the route's pick is the cause. An address on the node's own subnet that nobody answers is a
    stale or wrong address first; a prefix wider than the subnet's only where the link says its
    subnet is narrower and does not hold the address (wider_than_link), never for the node's
    router alone: every node has one."""
    asked = "NDP" if ":" in address else "ARP"
    at = f"{route.gateway} (the gateway)" if route.gateway else address
    where = (f"no machine answered at {at} on {route.interface} ({asked} got no reply: {route.neighbour_state}), "
             "so nothing there can listen or filter")
    if route.shared:
        both = ", ".join((route.interface,) + route.shared)
        return (f"{address} is on the subnet of several interfaces ({both}) and the kernel's route takes "
                f"{route.interface} (source {route.source}), where {where}", _shared_fix(route.interface, address))
    if (link := wider_than_link(route, address)) is not None:
        subnet, said = link
        beyond = f"behind its router ({route.router})" if route.router else "on another link"
        own = f"{route.source}/{subnet.prefixlen}" if route.source else f"its address with /{subnet.prefixlen}"
        return (f"{address} is on {route.interface}'s own link only by this node's prefix ({route.subnet}) and no "
                f"machine answered {asked} for it there, while the link's subnet is {subnet} ({said}), which does not "
                f"hold it: a prefix wider than the subnet's takes an address {beyond} for the local link",
                f"give {route.interface} the subnet's prefix ({own}) in this node's network configuration (netplan, "
                "ifcfg, NetworkManager; where DHCP gives the address, drop the static one), so that the address goes "
                f"to the router; if it still does not answer, {address_fix}")
    return where, address_fix + _prefix_next(route, holder)


def _link_lines(route: Route) -> tuple[str, ...]:
    return tuple(f"{route.interface}'s link: {lp.network}, from {lp.source}" + (f" ({lp.detail})" if lp.detail else "")
                 for lp in route.link)


def wider_than_link(route: Route, address: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str] | None:
    """(the link's subnet, where it was read) where ROUTE put ADDRESS on-link by the node's
    prefix, and what the link says its subnet is (a router's advertised prefix, a DHCP lease)
    is narrower, holds the node's own address, and not ADDRESS: the node's prefix is wider than
    the subnet's. None without such evidence (the router's mere presence is none)."""
    if route.gateway is not None or not route.subnet:
        return None
    try:
        mine, target = ipaddress.ip_network(route.subnet, strict=False), ipaddress.ip_address(address.split("%")[0])
        source = ipaddress.ip_address(route.source) if route.source else None
    except ValueError:
        return None
    for lp in route.link:
        try:
            subnet = ipaddress.ip_interface(lp.network).network
        except ValueError:
            continue
        if subnet.version != mine.version or subnet.prefixlen <= mine.prefixlen or subnet.network_address not in mine:
            continue
        if target not in subnet and (source is None or source in subnet):
            return subnet, lp.source
    return None


def _prefix_next(route: Route, holder: str) -> str:
    """Where the address is on-link by the node's own prefix and the node has a router: the
    prefix is the next thing to compare, once the address is known right (no evidence read
    here said the prefix was wrong, or it would be named first)."""
    if route.gateway is not None or not route.router or not route.subnet:
        return ""
    return (f"; where the address is right ({holder} holds it), this node takes it for {route.interface}'s own "
            f"link by its prefix ({route.subnet}) rather than sending it to its router ({route.router}): compare "
            "that prefix with a neighbour's on the same switch (ip -br addr), and where theirs is longer give this "
            "node the same (netplan, ifcfg, DHCP)")


def _shared_fix(interface: str, address: str) -> str:
    return (f"send the subnet through the interface wired to the other nodes: take {interface}'s address off "
            f"that subnet, or give its route a higher metric (ip route show match {address} lists the routes; "
            f"ip route get {address} shows the kernel's pick)")


def _source(reach: Reach) -> str:
    return "DNS" if reach.named_in == "DNS" else reach.named_in.split(":")[0]


def _route_line(address: str, r: Route) -> str:
    hop = f"via {r.gateway}" if r.gateway else "on the interface's subnet"
    shared = f"; {', '.join(r.shared)} also routes that subnet" if r.shared else ""
    return f"{address}: route {hop}, dev {r.interface}, source {r.source}; neighbour {r.neighbour_state}{shared}"


def _no_machine_fix(reach: Reach) -> str:
    if reach.named_in == "DNS":
        return (f"{reach.host}'s DNS record points where no machine is: correct it, or give --rdzv the host node's "
                "address; if the host node is down, start it")
    if reach.named_in:
        return (f"{reach.host}'s entry in /etc/hosts on this node is stale ({_source(reach)}): set it to the host "
                "node's address (ip -br addr on that node), or give --rdzv that address")
    return ("check the address: no machine holds it (a typo, or the host node down or moved); give --rdzv the host "
            "node's address (ip -br addr on that node)")


def _named(holders: Sequence[Holder]) -> str:
    return "; ".join(f"pid {h.pid} ({h.name}): {h.cmdline}" for h in holders)


def firewalled_finding(port: int, probes: tuple[Probe, ...]) -> Finding:
    """The host listens, but its own connect to its port is filtered or refused: a firewall rule
    on the host for the port, which keeps out the store's own client as well as every joiner."""
    blocked = [p for p in probes if p.outcome != "open"]
    seen = " / ".join(sorted({p.outcome for p in blocked}))
    return Finding(check=RDZV_LISTEN, severity=FAIL, nodes=(0,),
                   summary=f"the host listens on port {port} but cannot reach it through its own address "
                   f"{', '.join(p.address for p in blocked)} ({seen}): its firewall blocks the port, so joiners "
                   f"will find it {seen} too",
                   evidence=tuple(f"{p.address} ({p.family}): {p.outcome}, {p.detail}, {p.seconds:.2f} s"
                                  for p in probes),
                   fix=f"open port {port} in the host's firewall, for the job's nodes and for the host itself "
                   f"(iptables -I INPUT -p tcp --dport {port} -j ACCEPT, or the nftables / firewalld / "
                   "security-group equivalent)", kind=LISTEN_FIREWALLED)


def _reach_summary(reach: Reach, endpoint: str) -> str:
    if reach.outcome == "refused":
        tries = f", {reach.attempts} attempts over {_seconds(reach.seconds)}" if reach.attempts > 1 else ""
        return f"{endpoint} refused the connection{tries}: nothing listens there"
    if reach.outcome == "filtered":
        waited = max(p.seconds for p in reach.probes if p.outcome == "filtered")
        return f"{endpoint} is filtered from this node: no answer in {_seconds(waited)}"
    return f"{endpoint} is unreachable from this node: no route"


def _seconds(seconds: float) -> str:
    """A probe's time as the evidence gives it too: the summary and its evidence say one number."""
    return f"{seconds:.1f} s"


def listen_finding(port: int, holders: list[Holder], error: str) -> Finding:
    hosts = [h for h in holders if "netcheck" in h.cmdline]
    if hosts:   # a second rank 0, not a squatter: killing the first would only swap them
        return Finding(check=RDZV_LISTEN, severity=FAIL, nodes=(0,),
                       summary=f"port {port} is already held by another netcheck on this machine "
                       f"(pid {hosts[0].pid}), hosting the rendezvous: two processes were given node rank 0",
                       evidence=(f"bind: {error}", _named(hosts)),
                       fix="give each node its own --node-rank (one rank 0 per cluster, on the --rdzv host); if that "
                       "netcheck is left over from an earlier run, stop it first", kind=LISTEN_TWO_HOSTS)
    if holders:
        stop = f"kill {holders[0].pid}" if holders[0].pid is not None else "run netcheck as root to name it"
        return Finding(check=RDZV_LISTEN, severity=FAIL, nodes=(0,),
                       summary=f"port {port} is already in use on the host by {_named(holders)}",
                       evidence=(f"bind: {error}",), fix=f"stop that process ({stop}) or pick another "
                       "port for the job and netcheck")
    return Finding(check=RDZV_LISTEN, severity=FAIL, nodes=(0,),
                   summary=f"the host cannot listen on port {port}: {error}",
                   fix="pick a free port, or run as a user allowed to bind it")


def reach_summary(members: tuple[Member, ...]) -> list[Finding]:
    """The host's view of reach: every node that got here reached the port, and how fast."""
    reached = [(m, reach) for m in members if (reach := m.facts.reach) is not None]
    if not reached:
        return []
    joiners = tuple(m for m, _ in reached)
    slowest, reach = max(reached, key=lambda mr: mr[1].seconds)
    return [Finding(check=RDZV_REACH, severity=PASS, nodes=tuple(m.rank for m in joiners),
                    summary=f"{members_count(joiners)} reached {reach.host}:{reach.port}; slowest "
                    f"{slowest.facts.hostname} in {reach.seconds:.2f} s")]


def listen_pass(port: int) -> Finding:
    return Finding(check=RDZV_LISTEN, severity=PASS, nodes=(0,), summary=f"the host listens on port {port}")



def resolve_consistency(members: tuple[Member, ...]) -> list[Finding]:
    """HOST resolving to IPv6 on some nodes and IPv4 on others breaks NCCL (docs/contract.md: rdzv.resolve)."""
    families = {m.rank: _families(m.facts.reach.addresses) for m in members if m.facts.reach}
    odd = split(families).odd
    if not odd:
        return []
    hostname = hostnames(members)
    return [Finding(check=RDZV_RESOLVE, severity=WARN, nodes=odd,
                    summary="the rendezvous host resolves to different address families across nodes",
                    evidence=per_node(sorted(families.items()), hostname),
                    fix="give the host one address family everywhere (use an address, or fix "
                    "/etc/hosts and DNS so every node gets the same answer)")]


def _families(addresses: tuple[str, ...]) -> str:
    return "+".join(sorted({f"ipv{ipaddress.ip_address(a).version}" for a in addresses})) or "none"
