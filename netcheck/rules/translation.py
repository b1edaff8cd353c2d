"""A node's addresses as its peers see them, rewritten on the way (NAT): a container on
Docker's default bridge (its connections masqueraded to the machine's address), or a host whose
port is published (`docker run -p`: a DNAT on the machine). The rendezvous works through either;
NCCL does not, since each rank connects to the addresses the others own and advertise, and
gloo only where it dials out of the translated node (its address the larger: rules.gloodial).
A node's failed connects are explained by its translation before any firewall is named.
"""

from __future__ import annotations

from collections.abc import Iterable

from netcheck.core.meshrecords import INBOUND, OUTBOUND, Attempt, Translation
from netcheck.core.model import FAIL, Finding, Member, Visitor
from netcheck.core.names import is_loopback
from netcheck.core.nictable import address_owners
from netcheck.rules import gloodial
from netcheck.rules.pernode import name_of, per_pair
from netcheck.rules.registry import MESH_CONNECT, MESH_TRANSLATED

FIX = ("run the job on the machines' own network: `docker run --network host` (Kubernetes: `hostNetwork: true`); "
       "NCCL connects to each rank's own address, both ways, and cannot work through NAT, nor can gloo wherever a "
       "peer dials the translated node: publishing more ports does not fix it")


def translations(members: tuple[Member, ...], seen: dict[str, int],
                 visitors: tuple[Visitor, ...]) -> tuple[Translation, ...]:
    """The host's view: `seen` is every address connected to the store's port (the host's own
    /proc/net/tcp, read while the joiners wait on the store), `visitors` every visitor record
    (of this run or another: their addresses are their own, no translation's). A joiner none
    of whose addresses is among them, while some address there is owned by no node nor
    visitor, left translated (outbound); the host, where the joiners reached it at an address
    it does not own, is reached translated (inbound)."""
    host = next((m for m in members if m.rank == 0), None)
    inbound = _inbound(host, members) if host else None
    return tuple(_outbound(members, seen, visitors)) + ((inbound,) if inbound else ())


def _own(m: Member) -> tuple[str, ...]:
    return tuple(a for a in address_owners(m.facts.nics) if not is_loopback(a))


def _outbound(members: tuple[Member, ...], seen: dict[str, int], visitors: tuple[Visitor, ...]) -> list[Translation]:
    # A visitor's own address is its own view: the masqueraded node's is the one inside.
    owned = {a for m in members for a in address_owners(m.facts.nics)} | {v.address for v in visitors if v.address}
    strangers = tuple(sorted(a for a in seen if a not in owned and not is_loopback(a)))
    if not strangers:
        return []
    return [Translation(m.rank, OUTBOUND, _own(m), strangers) for m in members
            if m.rank != 0 and m.results is not None and _left_from(m) and not set(_own(m)) & set(seen)]


def _left_from(m: Member) -> str | None:
    """The address the node's probe of the endpoint left from, where it is not loopback (nodes
    of one machine meeting on loopback are seen from it, whatever they own)."""
    probe = next((p for p in m.facts.reach.probes if p.outcome == "open"), None) if m.facts.reach else None
    return probe.source if probe and probe.source and not is_loopback(probe.address) else None


def _inbound(host: Member, members: tuple[Member, ...]) -> Translation | None:
    reached = sorted({p.address for m in members if m.facts.reach for p in m.facts.reach.probes
                      if p.outcome == "open" and not is_loopback(p.address)})
    own = address_owners(host.facts.nics)
    foreign = tuple(a for a in reached if a not in own)
    return Translation(0, INBOUND, _own(host), foreign) if foreign else None


def explained(translated: tuple[Translation, ...], broken: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """The failed directions into a translated node: its own addresses are hidden behind the
    translation, which explains them before any firewall does."""
    into = {t.rank for t in translated}
    return {d for d in broken if d[1] in into}


def translated_findings(names: dict[int, str], translated: tuple[Translation, ...],
                        broken: dict[tuple[int, int], list[Attempt]], ends: gloodial.Ends,
                        attempts: tuple[Attempt, ...]) -> list[Finding]:
    """A finding per translated node that some peer could not connect to: NCCL's alone where
    gloo dials out of it to every such peer (its address the larger), through the translation
    as the rendezvous does (`ends`, `attempts`: gloodial.nccl_only)."""
    findings = []
    for t in translated:
        into = sorted(d for d in explained((t,), broken))
        if into:
            findings.append(Finding(check=MESH_CONNECT, severity=FAIL, nodes=(t.rank,),
                                    summary=_summary(names, t, len(into)),
                                    evidence=per_pair(((s, d, "; ".join(f"{a.ifname} {a.address}: {a.outcome} "
                                                                         f"({a.detail})" for a in broken[(s, d)]))
                                                       for s, d in into), names),
                                    fix=FIX, kind=MESH_TRANSLATED,
                                    impact=gloodial.nccl_only(names, ends, into, attempts)))
    return findings


def _summary(names: dict[int, str], t: Translation, into: int) -> str:
    name, owns, seen = name_of(names, t.rank), ", ".join(t.owns) or "no address", ", ".join(t.seen)
    if t.way == INBOUND:
        how = (f"{name} hosts the rendezvous but is reached at {seen}, an address it does not own (it owns {owns}): "
               "a port published through NAT")
    else:
        how = (f"{name}'s connections are translated (NAT): the host saw none from its own addresses ({owns}), "
               f"and connections from {seen}, which no node owns")
    return f"{how}; {into} direction(s) into it connect on no interface, as NCCL's would not (and gloo's, where " \
           "gloo dials into it)"
