"""rules/conntrack.py over ConntrackTable records: each node's table against the entries the job's
connections take there (its store clients, every rank's on the rendezvous host; a connection per
pair of ranks with one there), with the job judged said; a table full (at its limit, or its
kernel dropping packets for want of an entry) explains the connects into and out of it that went
unanswered, in place of the mesh's and the reach probe's firewall. The real table is filled in
tests/test_conntrack_cluster.py."""

from __future__ import annotations

import dataclasses

import pytest

from builders import launch, member, nic
from netcheck.core.meshrecords import Attempt, FullTable, PathCauses
from netcheck.core.model import ConntrackTable, Probe
from netcheck.core.rdmarecords import LibNccl, RdmaFacts, RdmaPort
from netcheck.rules import conntrack, mesh
from netcheck.rules.registry import CONNTRACK_FULL, HOST_CONNTRACK, MESH_CONNECT
from test_rules_nic import failed, ok

LIMIT = 262144
ROOMY = ConntrackTable(1000, LIMIT, 0, 0, 0)
RDMA = RdmaFacts((RdmaPort("mlx5_0", 1, "ACTIVE", "LinkUp", "InfiniBand", "400 Gb/sec", 400.0, None, None, 0, ()),),
                 (), (), False, "", "6.1", LibNccl("system", "/usr/lib/libnccl.so.2", "2.21.5", ""), 0.0)


def node(rank: int, table: ConntrackTable | None = ROOMY, nproc: int = 1, nnodes: int = 3,
         rdma: RdmaFacts | None = None, **given):
    m = member(rank, launched=given.pop("launched", None) or launch(rank, nnodes, nproc=nproc),
               nics=(nic("eth0", f"198.18.0.{10 + rank}/24"),), default="eth0", **given)
    return dataclasses.replace(m, facts=dataclasses.replace(m.facts, conntrack=table, rdma=rdma))


def cluster(table: ConntrackTable, at: int = 2, nproc: int = 1, nodes: int = 3, **given):
    return tuple(node(r, table if r == at else ROOMY, nproc, nodes, **given) for r in range(nodes))


def said(findings):
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


def test_tables_with_room_pass_and_say_the_job_judged_and_its_entries_per_node():
    (found,) = conntrack.table_findings(cluster(ROOMY, nproc=4))
    assert said([found]) == [(HOST_CONNTRACK, "pass", "", (0, 1, 2))]
    assert "the job judged: 12 ranks, 3 node(s) x 4 process(es)" in found.summary
    # node0 hosts the store: every rank's client (12) + 4 x 8 to the other nodes' ranks + 6 between its own
    assert found.evidence[0].startswith("node0: nf_conntrack_count 1000 of nf_conntrack_max 262144 before")
    assert "the job adds at least 50 here: 12 for every rank's store client, 38 for" in found.evidence[0]
    assert "the job adds at least 42 here: 4 for its ranks' store clients, 38 for" in found.evidence[1]


@pytest.mark.parametrize("count, said_", [
    (LIMIT, ("fail", "table_full", (2,))),
    (LIMIT - 2, ("fail", "no_room", (2,))),          # 3 entries there: a store client, two peers
    (LIMIT - 3, ("warn", "nearly_full", (2,))),
    (int(LIMIT * 0.9) - 3, ("pass", "", (0, 1, 2))),
    (int(LIMIT * 0.9) - 2, ("warn", "nearly_full", (2,)))])
def test_a_table_is_judged_by_its_count_and_the_jobs_entries_against_its_limit(count, said_):
    found = conntrack.table_findings(cluster(ConntrackTable(count, LIMIT)))
    assert said(found) == [(HOST_CONNTRACK, *said_)]
    if said_[0] != "pass":
        assert "nf_conntrack_max=524288" in found[0].fix and "CT --notrack" in found[0].fix
        assert "198.18.0.0/24" in found[0].fix, "the node's own subnet, to paste"


def test_no_limit_is_never_full_and_a_table_in_no_use_or_none_is_not_judged():
    assert said(conntrack.table_findings(cluster(ConntrackTable(10 ** 6, 0)))) == [
        (HOST_CONNTRACK, "pass", "", (0, 1, 2))]
    assert conntrack.table_findings(tuple(node(r, None) for r in range(3))) == []
    idle = ConntrackTable(0, LIMIT, 0, 0, 0)   # no stateful firewall there: not even netcheck's connects took one
    assert said(conntrack.table_findings(cluster(idle, at=1))) == [(HOST_CONNTRACK, "pass", "", (0, 2))]
    assert conntrack.table_findings(tuple(node(r, idle) for r in range(3)), {r: idle for r in range(3)}) == []
    # one whose tracking began with netcheck's own connects is judged by its reading after them
    (found,) = conntrack.table_findings(cluster(idle, at=1), {1: ConntrackTable(4, LIMIT, 0, 0, 0)})
    assert found.nodes == (0, 1, 2)


def test_a_table_that_filled_during_the_run_is_full_by_its_reading_after_the_mesh_or_its_drops():
    members = cluster(ROOMY)
    after = {2: ConntrackTable(LIMIT, LIMIT, 0, 0, 0)}
    (found,) = conntrack.table_findings(members, after)
    assert said([found]) == [(HOST_CONNTRACK, "fail", CONNTRACK_FULL, (2,))]
    assert "1000 of nf_conntrack_max 262144 before netcheck's connects, 262144 after the mesh's" in found.evidence[0]
    dropped = {2: ConntrackTable(5000, LIMIT, 37, 0, 0)}   # below the limit when read, dropping meanwhile
    (found,) = conntrack.table_findings(members, dropped)
    assert said([found]) == [(HOST_CONNTRACK, "fail", CONNTRACK_FULL, (2,))]
    assert "37 packet(s) dropped for want of an entry meanwhile" in found.evidence[0]
    assert "filled during netcheck's run: its kernel dropped 37 packet(s) for want of an entry (5000 of" \
        in found.summary
    assert conntrack.full_tables(members, dropped) == (FullTable(2, 5000, LIMIT, 37),)


def test_the_size_judged_is_the_nodes_own_before_the_rendezvous():
    me = (node(1, ConntrackTable(LIMIT - 100, LIMIT), nproc=8, nnodes=4),)
    (found,) = conntrack.table_findings(me, None, (32, 4))
    assert said([found]) == [(HOST_CONNTRACK, "fail", "no_room", (1,))]
    assert "the job judged: 32 ranks, 4 node(s) x 8 process(es)" in found.summary
    assert "at least 228" in found.summary   # 8 store clients + 8 x 24 + 28 between its own 8
    (unknown,) = conntrack.table_findings(me, None, (None, None))
    assert said([unknown]) == [(HOST_CONNTRACK, "warn", "nearly_full", (1,))]
    assert "the number of nodes not known yet" in unknown.summary and "at least 36" in unknown.summary


def test_nccls_data_sockets_count_where_set_and_its_rdma_does_not_use_sockets():
    env = {"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "2"}
    (found,) = conntrack.table_findings(cluster(ROOMY, nproc=2, gpus=2, env=env))
    # 2 processes x 4 ranks elsewhere x (a connection + 8 data sockets) + 1 between its own two
    assert "the job adds at least 75 here: 2 for its ranks' store clients, 73 for" in found.evidence[1]
    rdma = conntrack.table_findings(cluster(ROOMY, nproc=2, gpus=2, env=env, rdma=RDMA))[0]
    assert "the job adds at least 11 here: 2 for its ranks' store clients, 9 for" in rdma.evidence[1]


def test_torchrun_ranks_of_one_host_are_one_table():
    ranks = tuple(node(r, ROOMY, hostname=f"host{r // 2}", launched=launch(r, 4, "torchrun", nproc=2))
                  for r in range(4))
    (found,) = conntrack.table_findings(ranks)
    assert [line.split(":")[0] for line in found.evidence] == ["host0 (ranks 0, 1)", "host1 (ranks 2, 3)"]
    assert "the job adds at least 11 here: 6 for every rank's store client" in found.evidence[0]


def mesh_of_three(full: int) -> tuple[Attempt, ...]:
    return tuple((failed if full in (s, d) else ok)(s, d, "eth0") for s in range(3) for d in range(3) if s != d)


def test_a_full_table_explains_the_unanswered_directions_into_and_out_of_it_and_no_firewall_is_named():
    members, attempts = cluster(ROOMY), mesh_of_three(2)
    after = {r: ConntrackTable(LIMIT if r == 2 else 1000, LIMIT, 12 if r == 2 else 0, 0, 0) for r in range(3)}
    full = conntrack.full_tables(members, after)
    causes = mesh.path_causes(members, attempts, (), full)
    names = {r: f"node{r}" for r in range(3)}
    assert mesh.mesh_findings(names, attempts, causes) == [], "no mesh.connect finding: the table's"
    (found,) = conntrack.table_findings(members, after, attempts=attempts)
    assert said([found]) == [(HOST_CONNTRACK, "fail", CONNTRACK_FULL, (2,))]
    assert "4 of netcheck's own connects there went unanswered" in found.summary
    assert [e.split(":")[0] for e in found.evidence[1:]] == ["node0 -> node2", "node1 -> node2", "node2 -> node0",
                                                             "node2 -> node1"]
    assert "firewall" not in found.fix
    # the nic phase leaves the full table's silence out both ways: no interface of either end is to blame
    judged = mesh.judged_attempts(attempts, causes)
    assert {(a.src, a.dst) for a in judged} == {(0, 1), (1, 0)}


def test_a_refused_direction_is_not_the_tables_and_keeps_its_firewall():
    attempts = tuple(failed(s, d, "eth0", "refused") if (s, d) == (0, 2) else
                     (failed if 2 in (s, d) else ok)(s, d, "eth0") for s in range(3) for d in range(3) if s != d)
    causes = PathCauses(full_tables=(FullTable(2, LIMIT, LIMIT),))
    (left,) = mesh.mesh_findings({r: f"node{r}" for r in range(3)}, attempts, causes)
    assert (left.check, left.severity) == (MESH_CONNECT, "fail") and "node0 -> node2" in left.evidence[0]
    assert len(left.evidence) == 1


def test_a_joiner_names_the_full_table_the_host_told_it_of_with_its_own_connects():
    attempts = (failed(1, 2, "eth0"), ok(1, 0, "eth0"))
    names = {r: f"node{r}" for r in range(3)}
    (found,) = conntrack.told_findings(names, (FullTable(2, LIMIT, LIMIT, 5),), attempts, node(1).facts)
    assert said([found]) == [(HOST_CONNTRACK, "fail", CONNTRACK_FULL, (2,))]
    assert found.evidence == ("node2: 262144 of 262144 entries, 5 packet(s) dropped for want of an entry during "
                              "netcheck's run", "node1 -> node2: eth0 198.19.2.1: filtered (no answer in 2 s)")
    assert conntrack.told_findings(names, (FullTable(2, LIMIT, LIMIT),), (ok(1, 0, "eth0"),)) == []


def test_a_nodes_own_unanswered_probes_are_its_full_tables_evidence():
    probe = Probe("198.18.0.10", "ipv4", "filtered", "no answer in 3 s", 3.0)
    assert conntrack.unanswered_probes((probe,))
    assert not conntrack.unanswered_probes((probe, dataclasses.replace(probe, outcome="refused")))
    (found,) = conntrack.table_findings((node(0, ConntrackTable(LIMIT, LIMIT)),), None, (3, 3), probes=(probe,))
    assert said([found]) == [(HOST_CONNTRACK, "fail", CONNTRACK_FULL, (0,))]
    assert found.evidence[-1] == "connect to 198.18.0.10 (ipv4): filtered, no answer in 3 s"
