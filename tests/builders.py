"""One builder for the records the unit tests feed to rules and renderers: a node's facts, its
interfaces and its launch, with what a test is not about filled in plainly, so that each test
names only what it is about.

    facts("gpu01", rank=1, nnodes=3, nics=(nic("eth0", "10.0.0.5/24"),), default="eth0")
    member(2, nics=(nic("ib0", "10.1.0.2", kind="infiniband"),), env={"NCCL_SOCKET_IFNAME": "ib0"})
"""

from __future__ import annotations

from netcheck.core.bwrecords import Moved, NodeLinks, PeerSegments, StageLinks
from netcheck.core.model import Launch, Member, NodeFacts, Reach
from netcheck.core.nictable import Address, IbPort, Nic, NicTable


def address(text: str) -> Address:
    """"10.0.0.5/24", "fd00::5/64", or an address alone (/24 for IPv4, /64 for IPv6)."""
    ip, _, prefix = text.partition("/")
    family = "ipv6" if ":" in ip else "ipv4"
    return Address(family, ip, int(prefix) if prefix else 64 if family == "ipv6" else 24)


def nic(name: str, *addresses: str, index: int = 0, mtu: int = 1500, speed: int | None = None,
        kind: str = "ethernet", running: bool = True) -> Nic:
    """An interface, up, with its addresses in the order given (see `address`)."""
    return Nic(name, index, tuple(address(a) for a in addresses), running, running, mtu, speed, kind, None)


LOOPBACK = nic("lo", "127.0.0.1/8", index=1, mtu=65536, kind="loopback")


def launch(rank: int | None = None, nnodes: int | None = None, source: str | None = None, nproc: int = 1,
           hostnames: tuple[str, ...] = (), **variables: str) -> Launch:
    """A launch line's view: `nnodes` both the least and the most; by flags when a rank is
    given, else numbered by arrival."""
    source = source or ("flags" if rank is not None else "arrival")
    return Launch(source, rank, nnodes, nnodes, nproc, hostnames, variables)


def facts(hostname: str = "node0", *, rank: int | None = None, nnodes: int | None = None,
          source: str | None = None, launched: Launch | None = None, nics: tuple[Nic, ...] = (),
          default: str | None = None, ib: tuple[IbPort, ...] = (), addresses: tuple[str, ...] = (),
          fqdn: str | None = None, env: dict[str, str] | None = None, reach: Reach | None = None,
          gpus: int = 0, shm: int | None = None, run_id: str = "r", version: str = "0") -> NodeFacts:
    """A node's facts: its launch from `rank`, `nnodes` and `source` unless `launched` is given;
    `addresses` what its hostname resolves to; `env` its NCCL_*/GLOO_* settings."""
    return NodeFacts(run_id=run_id, hostname=hostname, fqdn=fqdn or hostname, hostname_addresses=addresses,
                     launch=launched or launch(rank, nnodes, source), shm_bytes=shm, gpus=gpus,
                     nics=NicTable(nics, ib, default), socket_env=env or {}, reach=reach, version=version)


def member(rank: int, hostname: str | None = None, **given) -> Member:
    """Node `rank` as the host saw it, called node<rank> unless named; `given` as for `facts`."""
    return Member(rank, facts(hostname or f"node{rank}", rank=rank, **given))


def node_address(n: int) -> str:
    """Node n's address in the hand-built link counters."""
    return f"198.18.0.{10 + n}"


def links_of(node: int, peers: list[tuple[int, int, int]], stages=None) -> NodeLinks:
    """A node's link counters: peers as (node, segments sent to it, resent)."""
    sent, resent = sum(s for _, s, _ in peers), sum(r for _, _, r in peers)
    return NodeLinks(node, stages or (StageLinks("all", 3.0, sent, resent),),
                     tuple(PeerSegments(node_address(b), s, r) for b, s, r in peers), (node_address(node),))


def moved(where: str, counter: str, by: int, packets: int = 0) -> Moved:
    return Moved(where, counter, by, packets)
