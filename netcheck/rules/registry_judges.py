"""The registry's other half: which rule judges which stage's records into a check's findings.

A stage is a point in a phase where a set of records is complete (every node's env facts, the
members and the mesh's attempts); its phase gathers the records and asks `judged` for the
findings of every judge listed for it here, in this table's order (the report's). Adding a check
that judges records a stage has already: its id and kinds in registry.py, its rule in the rules/
module of its family, and a line here; no phase changes. A rule that needs what no stage holds
(an I/O at the time, findings it replaces) is called by its phase, and its record is its own.

Kept apart from the check table (registry.py): every rules module imports its ids from there,
and this table imports the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from netcheck.core.envfacts import EnvFacts
from netcheck.core.meshrecords import Attempt
from netcheck.core.model import ConntrackTable, Finding, Member, NodeFacts
from netcheck.rules import conntrack, endpoint, env, flightrec, gpubuild, launch, limits, nic, ports, rdma, rdzv, reach
from netcheck.rules import registry as ids


@dataclass(frozen=True)
class LocalRecords:
    """The local phase's: this node alone, before any socket (its own view of the job's size)."""
    facts: NodeFacts
    members: tuple[Member, ...]                    # this node, ranked -1 where it has no rank yet
    size: tuple[int | None, int | None]            # (ranks, nodes) as its launcher says (ports.own_size)
    endpoint_port: int | None = None               # not judged here: the host judges it with every node's
    tables_after: Mapping[int, ConntrackTable | None] | None = None   # none before the mesh


@dataclass(frozen=True)
class SeatedRecords:
    """The rendezvous's, on the host: every seated node's facts and results."""
    members: tuple[Member, ...]


@dataclass(frozen=True)
class InterfaceRecords:
    """The nic phase's: the members' interfaces and the mesh's attempts (each cause judged)."""
    members: tuple[Member, ...]
    attempts: tuple[Attempt, ...]
    seen: dict[int, list[str]]              # rank -> interfaces its connects proved (a joiner: its own)
    proven: dict[int, list[str]] | None     # the host's, where the mesh ran: every node's


@dataclass(frozen=True)
class EnvRecords:
    """The env phase's, on the host: every node's env facts by rank, and the members with them."""
    envs: Mapping[int, EnvFacts]
    names: Mapping[int, str]                # rank -> hostname of every node asked (a missing one is lost)
    members: tuple[Member, ...]


# Each stage, and the records its judges read.
STAGES: dict[str, type] = {
    "local": LocalRecords,
    "rendezvous": SeatedRecords,
    "nic": InterfaceRecords,          # every node's own view of its interfaces
    "nic.host": InterfaceRecords,     # the host's, over every node
    "nic.proven": InterfaceRecords,   # the host's, where the mesh proved interfaces (proven)
    "env": EnvRecords,
}


@dataclass(frozen=True)
class Judge:
    check: str                               # the check id its findings carry (registry.CHECKS)
    stage: str                               # whose records it judges (STAGES)
    rule: Callable[..., list[Finding]]       # the rule function; listed in its check's `rules`
    reads: tuple[str, ...]                   # the records' fields it is given, in its arguments' order


JUDGES: tuple[Judge, ...] = (
    Judge(ids.LAUNCH_TOPOLOGY, "local", launch.task_findings, ("facts",)),
    Judge(ids.HOST_PORTS, "local", ports.range_findings, ("members", "endpoint_port", "size")),
    Judge(ids.HOST_CONNTRACK, "local", conntrack.table_findings, ("members", "tables_after", "size")),
    Judge(ids.LAUNCH_ENV, "rendezvous", endpoint.shared_variable_findings, ("members",)),
    Judge(ids.RDZV_RESOLVE, "rendezvous", reach.resolve_consistency, ("members",)),
    Judge(ids.RDZV_FQDN, "rendezvous", rdzv.fqdn_findings, ("members",)),
    Judge(ids.HOST_CLOCK, "rendezvous", rdzv.clock_findings, ("members",)),
    Judge(ids.HOST_LIMITS, "rendezvous", limits.limit_findings, ("members",)),
    Judge(ids.NIC_ROUTE, "nic", nic.route_findings, ("members", "attempts", "seen")),
    Judge(ids.NIC_NCCL_DEFAULT, "nic", nic.nccl_findings, ("members", "proven")),
    Judge(ids.NIC_GLOO_DEFAULT, "nic", nic.gloo_findings, ("members", "proven", "attempts")),
    Judge(ids.NIC_TP_DEFAULT, "nic", nic.tp_findings, ("members", "proven", "attempts")),
    Judge(ids.NIC_IB, "nic.host", nic.ib_findings, ("members",)),
    Judge(ids.NIC_MTU, "nic.proven", nic.mtu_findings, ("members", "attempts")),
    Judge(ids.NIC_SPEED, "nic.proven", nic.speed_findings, ("members", "proven")),
    Judge(ids.ENV_MISMATCH, "env", env.env_findings, ("envs", "names")),
    Judge(ids.ENV_MISMATCH, "env", env.hash_findings, ("envs", "names")),
    Judge(ids.HOST_SHM, "env", env.shm_findings, ("envs", "names")),
    Judge(ids.GPU_BUILD, "env", gpubuild.build_findings, ("envs", "names")),
    Judge(ids.ENV_FLIGHT_RECORDER, "env", flightrec.flight_recorder_findings, ("envs", "names")),
    Judge(ids.RDMA_PORT, "env", rdma.port_findings, ("members",)),
    Judge(ids.RDMA_GID, "env", rdma.gid_findings, ("members",)),
    Judge(ids.RDMA_MTU, "env", rdma.mtu_findings, ("members",)),
    Judge(ids.RDMA_GPUDIRECT, "env", rdma.gpudirect_findings, ("members",)),
    Judge(ids.RDMA_PCIE, "env", rdma.pcie_findings, ("members",)),
    Judge(ids.RDMA_LIBNCCL, "env", rdma.libnccl_findings, ("members",)),
)


def judged(stage: str, records: object) -> list[Finding]:
    """The findings of every judge listed for `stage`, over its records, in the table's order."""
    assert isinstance(records, STAGES[stage]), f"{stage} judges {STAGES[stage].__name__}"
    return [f for j in JUDGES if j.stage == stage for f in j.rule(*(getattr(records, n) for n in j.reads))]
