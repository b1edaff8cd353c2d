"""The rendezvous endpoint's checks (rdzv.resolve, rdzv.reach, rdzv.listen): the reach probe,
the endpoint's name and the nodes' nameservers, the host's listen. Facts in, findings out."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from netcheck.core.majority import split
from netcheck.core.model import (
    FAIL,
    PASS,
    UNANSWERED,
    UNANSWERED_HANDSHAKE,
    WARN,
    Endpoint,
    Finding,
    Holder,
    Member,
    Probe,
    Reach,
    Route,
    SilentNameserver,
    hostnames,
)
from netcheck.rules.pernode import per_node
from netcheck.rules.rdzv import members_count
from netcheck.rules.registry import (
    LISTEN_FIREWALLED,
    LISTEN_TWO_HOSTS,
    RDZV_LISTEN,
    RDZV_REACH,
    RDZV_RESOLVE,
    REACH_NO_MACHINE,
    REACH_NOT_STORE,
    REACH_SHARED_SUBNET,
    REACH_WRONG_PREFIX,
    RESOLVE_SILENT,
)

REACH_FIXES = {
    "refused": "start netcheck on the host node first (it waits for joiners), check the port "
               "number, and remove any REJECT rule for the port on the host",
    "filtered": "open the port in the host's firewall (iptables/nftables, a cloud security "
                "group) for traffic from this node",
    "unreachable": "this node has no route to the host: check the address, the subnet and "
                   "the routes (ip route get ADDRESS)",
    "dns": "use an address, or add the name to DNS or /etc/hosts on this node",
    "not_store": "a stale or hung process holds the port on the host node (an earlier job's rank 0, "
                 "a stopped process, another program): stop it there, or pick another port for the "
                 "job and netcheck",
}


def reach_findings(reach: Reach, ranks: tuple[int, ...], holders: tuple[Holder, ...] = (),
                   silent: tuple[SilentNameserver, ...] = ()) -> list[Finding]:
    """A joiner's own view of HOST:PORT: one rdzv.resolve and one rdzv.reach finding.
    `holders`: the processes listening on the port, where the endpoint is this node's own;
    `silent`: this node's nameservers that did not answer (a name they never answered for
    is not a name that does not exist)."""
    endpoint = str(Endpoint(reach.host, reach.port))  # [v6]:port, as --rdzv takes it
    if reach.outcome == "dns" and silent:
        return [Finding(RDZV_RESOLVE, FAIL, ranks, f"{reach.host} does not resolve on this node: its nameserver "
                        f"{_servers(silent)} did not answer (not an answer that the name does not exist)",
                        (f"getaddrinfo({reach.host!r}): {reach.resolve_error}", *_silent_lines(silent)),
                        RESOLVER_FIX, RESOLVE_SILENT)]
    if reach.outcome == "dns":
        return [Finding(RDZV_RESOLVE, FAIL, ranks, f"{reach.host} does not resolve on this node",
                        (f"getaddrinfo({reach.host!r}): {reach.resolve_error}",), REACH_FIXES["dns"])]
    resolved = Finding(RDZV_RESOLVE, PASS, ranks,
                       f"{reach.host} resolves to {', '.join(reach.addresses)}")
    evidence = tuple(f"{p.address} ({p.family}): {p.outcome}, {p.detail}, {p.seconds:.2f} s"
                     for p in reach.probes) + (f"{reach.attempts} attempt(s) over {_seconds(reach.seconds)}",) + \
        tuple(_route_line(p.address, p.route) for p in reach.probes if p.route)
    if reach.outcome == "open":
        return [resolved, Finding(RDZV_REACH, PASS, ranks, f"{endpoint} is open from this node", evidence)]
    if reach.outcome == "not_store":
        return [resolved, _not_store(reach, endpoint, ranks, evidence, holders)]
    if (route := _nobody_there(reach)) is not None:
        return [resolved, _no_machine(reach, route, endpoint, ranks, evidence)]
    summary = _reach_summary(reach, endpoint)
    return [resolved, Finding(RDZV_REACH, FAIL, ranks, summary, evidence, REACH_FIXES[reach.outcome])]


RESOLVER_FIX = ("repair the nameserver, or name one that answers in /etc/resolv.conf; meanwhile list every node and "
                "the endpoint in /etc/hosts on every node and shorten the wait (options timeout:1 attempts:1 in "
                "/etc/resolv.conf): torch's store looks up the address of every connection, client and server side")


def resolver_findings(silent: tuple[SilentNameserver, ...], ranks: tuple[int, ...]) -> list[Finding]:
    """This node's nameservers that do not answer: a warning naming each (where it is named,
    how long a lookup waits for it), not a fault of the hosts it slows down."""
    if not silent:
        return []
    wait = sum(s.lookup_wait for s in silent)
    return [Finding(RDZV_RESOLVE, WARN, ranks, f"this node's nameserver {_servers(silent)} does not answer: every "
                    f"lookup /etc/hosts cannot answer waits up to {wait:g} s for it, torch's store connections "
                    "included", _silent_lines(silent), RESOLVER_FIX, RESOLVE_SILENT)]


def _servers(silent: tuple[SilentNameserver, ...]) -> str:
    return ", ".join(s.address for s in silent)


def _silent_lines(silent: tuple[SilentNameserver, ...]) -> tuple[str, ...]:
    return tuple(f"{s.address} (from {s.source}): no answer to a DNS query in {s.waited:g} s; a lookup waits up "
                 f"to {s.lookup_wait:g} s for it (timeout x attempts)" for s in silent)


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
        return Finding(RDZV_REACH, FAIL, ranks, f"{endpoint} accepts connections but did not answer the TCPStore "
                       f"handshake: {detail}", evidence, "read the host's report: a store held up by other clients' "
                       "connections (rdzv.join store_stalled there) answers late, a hung or stopped process never; "
                       + fix, REACH_NOT_STORE)
    return Finding(RDZV_REACH, FAIL, ranks, f"{endpoint} accepts connections but is not a TCPStore: {detail}{held}",
                   evidence, fix, REACH_NOT_STORE)


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
    kernel's route takes (`route`, the first address's); where another interface shares the
    subnet, the route's pick is the cause."""
    probe = reach.probes[0]
    asked = "NDP" if probe.family == "ipv6" else "ARP"
    at = f"{route.gateway} (the gateway)" if route.gateway else probe.address
    where = (f"no machine answered at {at} on {route.interface} ({asked} got no reply: {route.neighbour_state}), "
             "so nothing there can listen or filter")
    lines = evidence + ((f"{reach.host}: {reach.named_in}",) if reach.named_in else ())
    if route.shared:
        both = ", ".join((route.interface,) + route.shared)
        return Finding(RDZV_REACH, FAIL, ranks, f"{endpoint}: {probe.address} is on the subnet of several "
                       f"interfaces ({both}) and the kernel's route takes {route.interface} (source "
                       f"{route.source}), where {where}", lines, _shared_fix(route.interface, probe.address),
                       REACH_SHARED_SUBNET)
    named = f"; {reach.host} resolves to {probe.address} from {_source(reach)}" if reach.named_in else ""
    if route.gateway is None and route.router and route.subnet:
        return Finding(RDZV_REACH, FAIL, ranks, f"{endpoint}: {probe.address} is on {route.interface}'s own link "
                       f"only by this node's prefix ({route.subnet}) and no machine answered {asked} for it there, "
                       f"while this node has a router ({route.router}): a prefix wider than the subnet's takes an "
                       f"address behind that router for the local link{named}", lines,
                       f"compare {route.interface}'s prefix (ip -br addr on this node, {route.source}) with a "
                       "neighbour's on the same switch: where theirs is longer, give this node the same in its network "
                       f"configuration (netplan, ifcfg, DHCP); where it is the same, {_no_machine_fix(reach)}",
                       REACH_WRONG_PREFIX)
    return Finding(RDZV_REACH, FAIL, ranks, f"{endpoint}: {where}{named}", lines, _no_machine_fix(reach),
                   REACH_NO_MACHINE)


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
    return Finding(RDZV_LISTEN, FAIL, (0,),
                   f"the host listens on port {port} but cannot reach it through its own address "
                   f"{', '.join(p.address for p in blocked)} ({seen}): its firewall blocks the port, so joiners "
                   f"will find it {seen} too",
                   tuple(f"{p.address} ({p.family}): {p.outcome}, {p.detail}, {p.seconds:.2f} s" for p in probes),
                   f"open port {port} in the host's firewall, for the job's nodes and for the host itself "
                   f"(iptables -I INPUT -p tcp --dport {port} -j ACCEPT, or the nftables / firewalld / "
                   "security-group equivalent)", LISTEN_FIREWALLED)


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
        return Finding(RDZV_LISTEN, FAIL, (0,), f"port {port} is already held by another netcheck on this machine "
                       f"(pid {hosts[0].pid}), hosting the rendezvous: two processes were given node rank 0",
                       (f"bind: {error}", _named(hosts)),
                       "give each node its own --node-rank (one rank 0 per cluster, on the --rdzv host); if that "
                       "netcheck is left over from an earlier run, stop it first", LISTEN_TWO_HOSTS)
    if holders:
        stop = f"kill {holders[0].pid}" if holders[0].pid is not None else "run netcheck as root to name it"
        return Finding(RDZV_LISTEN, FAIL, (0,), f"port {port} is already in use on the host by {_named(holders)}",
                       (f"bind: {error}",), f"stop that process ({stop}) or pick another "
                       "port for the job and netcheck")
    return Finding(RDZV_LISTEN, FAIL, (0,), f"the host cannot listen on port {port}: {error}",
                   (), "pick a free port, or run as a user allowed to bind it")


def reach_summary(members: tuple[Member, ...]) -> list[Finding]:
    """The host's view of reach: every node that got here reached the port, and how fast."""
    reached = [(m, reach) for m in members if (reach := m.facts.reach) is not None]
    if not reached:
        return []
    joiners = tuple(m for m, _ in reached)
    slowest, reach = max(reached, key=lambda mr: mr[1].seconds)
    return [Finding(RDZV_REACH, PASS, tuple(m.rank for m in joiners),
                    f"{members_count(joiners)} reached {reach.host}:{reach.port}; slowest "
                    f"{slowest.facts.hostname} in {reach.seconds:.2f} s")]


def listen_pass(port: int) -> Finding:
    return Finding(RDZV_LISTEN, PASS, (0,), f"the host listens on port {port}")



def resolve_consistency(members: tuple[Member, ...]) -> list[Finding]:
    """HOST resolving to IPv6 on some nodes and IPv4 on others breaks NCCL (FAILURES row 14)."""
    families = {m.rank: _families(m.facts.reach.addresses) for m in members if m.facts.reach}
    odd = split(families).odd
    if not odd:
        return []
    hostname = hostnames(members)
    return [Finding(RDZV_RESOLVE, WARN, odd,
                    "the rendezvous host resolves to different address families across nodes",
                    per_node(sorted(families.items()), hostname),
                    "give the host one address family everywhere (use an address, or fix "
                    "/etc/hosts and DNS so every node gets the same answer)")]


def _families(addresses: tuple[str, ...]) -> str:
    return "+".join(sorted({f"ipv{ipaddress.ip_address(a).version}" for a in addresses})) or "none"
