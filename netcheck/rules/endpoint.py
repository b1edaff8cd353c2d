"""Launch lines that point nodes at the wrong place (launch.endpoint, launch.env).

Each mistake is named by the node that can see it from its own facts: a node that owns the
endpoint's address but is not rank 0, a loopback endpoint on a multi-node launch, a rank 0
that owns none of the endpoint's addresses, or whose endpoint does not resolve or leads
nowhere from rank 0 itself. What only the cluster can see (nodes reaching
different addresses, launcher variables that differ between nodes) the host names once the
nodes have met.
"""

from __future__ import annotations

from netcheck.core.model import (
    FAIL,
    JOB_VARS,
    WARN,
    Endpoint,
    Finding,
    Member,
    NodeFacts,
    Probe,
    SilentNameserver,
    SlowNameserver,
    hostnames,
    is_torchrun_worker,
)
from netcheck.core.names import is_loopback
from netcheck.core.nictable import address_owners
from netcheck.rules.majority import split
from netcheck.rules.pernode import node_names, per_node
from netcheck.rules.reach import cut_short
from netcheck.rules.registry import (
    ENDPOINT_ELSEWHERE,
    ENDPOINT_LOOPBACK,
    ENDPOINT_NOT_RANK0,
    ENDPOINT_SEVERAL,
    ENDPOINT_UNREACHED,
    ENV_DISAGREE,
    ENV_FLAGS,
    LAUNCH_ENDPOINT,
    LAUNCH_ENV,
    RDZV_RESOLVE,
    RESOLVE_ON_HOST,
    RESOLVE_SILENT,
)

FIX = "set --rdzv (MASTER_ADDR) to node rank 0's own address or hostname, the same on every node"


def points_at_itself(addresses: tuple[str, ...], facts: NodeFacts) -> bool:
    """Whether a node that is not rank 0 has an endpoint that resolves to itself (an address of
    its own, or loopback on a multi-node launch): a refusal there is the launch line's fault,
    not a host slow to start, unless a host on this very machine is about to listen."""
    launch = facts.launch
    if is_torchrun_worker(launch) or launch.node_rank in (None, 0):
        return False
    own, many = address_owners(facts.nics), (launch.nnodes_max or 0) > 1
    return any(is_loopback(a) and many or a in own and not is_loopback(a) for a in addresses)


def endpoint_findings(endpoint: Endpoint, addresses: tuple[str, ...], facts: NodeFacts,
                      outcome: str) -> list[Finding]:
    """What a joiner can tell about the endpoint on its own, once its probe (`outcome`) was
    refused: the endpoint is itself. Said at once; waiting cannot fix a launch line."""
    launch = facts.launch
    if outcome != "refused" or not points_at_itself(addresses, facts):
        return []
    own, rank = address_owners(facts.nics), launch.node_rank
    nodes = () if rank is None else (rank,)   # a node without a rank is named by none
    shown = f"{endpoint.host} resolves to {', '.join(addresses)}"
    nothing = f"and nothing listens on port {endpoint.port} here"
    mine = [a for a in addresses if a in own and not is_loopback(a)]
    if not mine:
        return [Finding(check=LAUNCH_ENDPOINT, severity=FAIL, nodes=nodes,
                        summary=f"{shown}: loopback, while {launch.nnodes_max} nodes "
                        f"are expected; a loopback endpoint reaches only this machine, {nothing}",
                        fix=f"{FIX}; if rank 0 does run on this machine, it listens on another port: give every "
                        f"node rank 0's port (this one was given {endpoint.port})", kind=ENDPOINT_LOOPBACK)]
    return [Finding(check=LAUNCH_ENDPOINT, severity=FAIL, nodes=nodes,
                    summary=f"{shown}, an address of this node ({facts.hostname}, "
                    f"{own[mine[0]]}), but this node is node rank {rank}: rank 0 hosts the rendezvous "
                    f"at the endpoint, {nothing}", evidence=tuple(f"{a} on {own[a]}" for a in mine),
                    fix=f"{FIX}; or start this node as rank 0 (--node-rank 0) and the others with their "
                    "own ranks", kind=ENDPOINT_NOT_RANK0)]


def host_endpoint_findings(endpoint: Endpoint, addresses: tuple[str, ...], facts: NodeFacts,
                           missing: tuple[int, ...]) -> list[Finding]:
    """Rank 0's view, once nodes it expected never came: an endpoint that is loopback, or none
    of its own addresses, is where they went instead. (With every node in, the endpoint
    worked for all of them: nodes on one machine, or an address that forwards here.)"""
    if not missing or not addresses or is_torchrun_worker(facts.launch):
        return []
    own = address_owners(facts.nics)
    shown = f"{endpoint.host} resolves to {', '.join(addresses)}"
    if any(is_loopback(a) for a in addresses):
        return [Finding(check=LAUNCH_ENDPOINT, severity=WARN, nodes=(0,),
                        summary=f"{shown}: loopback; nodes on other machines cannot "
                        "reach rank 0 there, which would explain the nodes that never joined",
                        evidence=tuple(f"{a}: loopback" for a in addresses if is_loopback(a)), fix=FIX,
                        kind=ENDPOINT_LOOPBACK)]
    if not any(a in own for a in addresses):
        return [Finding(check=LAUNCH_ENDPOINT, severity=WARN, nodes=(0,),
                        summary=f"this node is rank 0 and hosts the rendezvous, but "
                        f"{shown}, which no interface of {facts.hostname} holds: the nodes that never "
                        "joined looked for rank 0 there", evidence=tuple(f"{a} on {i}" for a, i in sorted(own.items())),
                        fix=f"{FIX}; or give --node-rank 0 to the node that holds it", kind=ENDPOINT_ELSEWHERE)]
    return []


OWN_CLIENT = ("torch's store on rank 0 connects its own client to the endpoint (TCPStore, and torchrun's c10d "
              "rendezvous on the node that hosts it), so the job fails at rank 0 itself")


def own_endpoint_findings(endpoint: Endpoint, addresses: tuple[str, ...], resolve_error: str | None,
                          facts: NodeFacts, probes: tuple[Probe, ...],
                          silent: tuple[SilentNameserver, ...] = (),
                          slow: tuple[SlowNameserver, ...] = ()) -> list[Finding]:
    """Rank 0's own endpoint, judged at once (the reach phase), as the job's rank 0 will use it:
    a name that does not resolve here, or addresses none of which this node holds where nothing
    answers on the port from here (`probes`: this node's connects to them). An address that
    answers is left to the rendezvous: it may forward here (a Service, a load balancer), which
    works, and is named (rank0_elsewhere) only once nodes are missing."""
    mine = _own_address(facts)
    instead = f"give every node --rdzv {Endpoint(mine, endpoint.port)} (MASTER_ADDR={mine})" if mine else FIX
    if not addresses:
        why = f"getaddrinfo({endpoint.host!r}): {resolve_error or 'no address'}"
        if silent:
            return [Finding(check=RDZV_RESOLVE, severity=FAIL, nodes=(0,),
                            summary=f"{endpoint.host} does not resolve on this node, rank 0: its "
                            f"nameserver {', '.join(s.address for s in silent)} did not answer; {OWN_CLIENT}, and the "
                            "other nodes look the name up too", evidence=(why,),
                            fix=f"repair the nameserver, or list {endpoint.host} in /etc/hosts on every node; "
                            f"or {instead}",
                            kind=RESOLVE_SILENT)]
        if cut := cut_short(endpoint.host, resolve_error, slow, (0,), on_rank0=True):
            return cut
        return [Finding(check=RDZV_RESOLVE, severity=FAIL, nodes=(0,),
                        summary=f"{endpoint.host} does not resolve on this node, rank 0, which "
                        f"hosts the rendezvous: {OWN_CLIENT}, and the other nodes cannot find it by that name either",
                        evidence=(why,), fix=f"make {endpoint.host} resolve to this node ({facts.hostname}"
                        f"{', ' + mine if mine else ''}) on every node (DNS, or /etc/hosts), or {instead}",
                        kind=RESOLVE_ON_HOST)]
    if not probes or any(p.outcome == "open" for p in probes):
        return []
    own = address_owners(facts.nics)
    return [Finding(check=LAUNCH_ENDPOINT, severity=FAIL, nodes=(0,),
                    summary=f"this node is rank 0 and hosts the rendezvous, but {endpoint.host} "
                    f"resolves to {', '.join(addresses)}, which no interface of {facts.hostname} holds, and nothing "
                    f"answers on port {endpoint.port} there from this node: {OWN_CLIENT}, and the other nodes look "
                    "for rank 0 there", evidence=tuple(f"{p.address}: {p.outcome}, {p.detail}" for p in probes)
                    + tuple(f"this node: {a} on {i}" for a, i in sorted(own.items()) if not is_loopback(a)),
                    fix=f"{instead}; or give --node-rank 0 to the node that holds {', '.join(addresses)}",
                    kind=ENDPOINT_UNREACHED)]


def _own_address(facts: NodeFacts) -> str:
    """The address to offer in a fix: the default route's interface's first, else any but loopback."""
    own = [(i, a) for a, i in address_owners(facts.nics).items() if not is_loopback(a)]
    ranked = sorted(own, key=lambda ia: (ia[0] != facts.nics.default_route_ifname, ":" in ia[1]))
    return ranked[0][1] if ranked else ""


def reached_addresses(members: tuple[Member, ...]) -> list[Finding]:
    """The endpoint resolving to several addresses, and the nodes reaching different ones:
    the workers would meet at one store or another by chance of resolution order."""
    found = {m.rank: next((p.address for p in m.facts.reach.probes if p.outcome == "open"), None)
             for m in members if m.facts.reach}
    used = {r: a for r, a in found.items() if a}
    if len(set(used.values())) <= 1:
        return []
    names, host = hostnames(members), next(m.facts.reach.host for m in members if m.facts.reach)
    return [Finding(check=LAUNCH_ENDPOINT, severity=WARN, nodes=split(used).odd,
                    summary=f"{host} resolves to several addresses and "
                    f"the nodes reached different ones: {', '.join(sorted(set(used.values())))}",
                    evidence=per_node(sorted(used.items()), names),
                    fix="use one address in --rdzv (MASTER_ADDR), or one answer for the name everywhere",
                    kind=ENDPOINT_SEVERAL)]


def flags_findings(endpoint: Endpoint, endpoint_addresses: tuple[str, ...],
                   master_addresses: tuple[str, ...], facts: NodeFacts) -> list[Finding]:
    """--rdzv given on the command line, and the node's MASTER_ADDR:MASTER_PORT naming another
    place: netcheck checks one endpoint while the job's init_process_group uses the other.
    Names compare by what they resolve to (a hostname and its address are one place)."""
    variables = facts.launch.variables
    if is_torchrun_worker(facts.launch) or "MASTER_ADDR" not in variables:
        return []
    port = variables.get("MASTER_PORT", "")
    same_host = (variables["MASTER_ADDR"].strip("[]") == endpoint.host
                 or bool(set(master_addresses) & set(endpoint_addresses)))
    if same_host and port in ("", str(endpoint.port)):
        return []
    master = f"{variables['MASTER_ADDR']}:{port}" if port else variables["MASTER_ADDR"]
    rank = facts.launch.node_rank
    return [Finding(check=LAUNCH_ENV, severity=WARN, nodes=() if rank is None else (rank,),
                    summary=f"this node checks {endpoint} (--rdzv), but its MASTER_ADDR/MASTER_PORT say {master}: "
                    "init_process_group uses those", evidence=(f"--rdzv {endpoint}: {', '.join(endpoint_addresses)}",
                                                     f"MASTER_ADDR {variables['MASTER_ADDR']}: "
                                                     f"{', '.join(master_addresses) or 'does not resolve'}"),
                    fix="check the endpoint the job will use: drop --rdzv (netcheck then reads MASTER_ADDR and "
                    "MASTER_PORT), or fix the variables", kind=ENV_FLAGS)]


def shared_variable_findings(members: tuple[Member, ...]) -> list[Finding]:
    """MASTER_ADDR, MASTER_PORT and WORLD_SIZE are one job's: every node that sets one must
    set the same value (a node with another MASTER_ADDR waits at another store)."""
    names, findings = hostnames(members), []
    for var in JOB_VARS:
        values = {m.rank: m.facts.launch.variables[var] for m in members if var in m.facts.launch.variables}
        views = split(values)
        if not views.odd:
            continue
        others = f"; the others {views.majority}" if views.has_majority else ": no value is the majority"
        findings.append(Finding(
            check=LAUNCH_ENV, severity=FAIL, nodes=views.odd,
            summary=f"nodes disagree about {var}: {node_names(views.odd, names)} "
            f"say {', '.join(sorted({values[r] for r in views.odd}))}{others}",
            evidence=per_node(((r, f"{var}={v}") for r, v in sorted(values.items())), names),
            fix=f"export the same {var} on every node (the launch script's line that sets it)", kind=ENV_DISAGREE))
    return findings
