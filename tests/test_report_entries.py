"""The report's node entries under torchrun: a node's account once, its other ranks pointing at
it (NodeEntry.facts_as), and every reader seeing each rank's facts."""

from __future__ import annotations

import dataclasses

from builders import facts, launch, member, nic
from netcheck.core import codec
from netcheck.core.constants import MAX_BASELINE_BYTES
from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import HOST, Member, Probe, Reach, Report, report_of, with_facts
from netcheck.phases.assemble import entries
from netcheck.render.text import render_text
from netcheck.rules.baseline import drift_findings

ENV = EnvFacts({"torch.version": "2.13.0"}, 1.5)


def worker(rank: int, host: str, *, seconds: float = 0.01, env: EnvFacts = ENV, mtu: int = 1500) -> Member:
    """Rank `rank` of torchrun's 2 workers a node, on host; its own probe of the port took `seconds`."""
    probe = Reach("node0", 29500, "open", ("198.18.0.10",), None,
                  (Probe("198.18.0.10", "ipv4", "open", "connected", seconds),), 1, seconds)
    node = facts(host, launched=launch(rank, 4, "torchrun", nproc=2, RANK=str(rank), LOCAL_RANK=str(rank % 2)),
                 nics=(nic("eth0", f"198.18.0.{10 + rank // 2}", mtu=mtu),), default="eth0", reach=probe)
    return Member(rank, node, env=dataclasses.replace(env, seconds=seconds * 100))


WORKERS = (worker(0, "node0"), worker(1, "node0", seconds=0.02), worker(2, "node1"), worker(3, "node1", seconds=0.3))


def test_a_torchrun_node_s_facts_are_written_once_and_read_back_for_each_rank():
    written = entries(WORKERS)
    assert [(e.rank, e.facts is not None, e.env is not None, e.facts_as) for e in written] == [
        (0, True, True, None), (1, False, False, 0), (2, True, True, None), (3, False, False, 2)]
    report = report_of(HOST, "r", 0, (), {}, nodes=written)
    read = codec.loads(Report, codec.dumps(report), MAX_BASELINE_BYTES)
    assert read.nodes == written
    assert [(e.rank, e.facts.hostname, e.env.values) for e in with_facts(read.nodes)] == [
        (0, "node0", ENV.values), (1, "node0", ENV.values), (2, "node1", ENV.values), (3, "node1", ENV.values)]


def test_a_rank_that_saw_otherwise_keeps_its_own_facts():
    # Another MTU, another environment, a probe that ended otherwise: the rank's own to show.
    other_env = worker(1, "node0", env=EnvFacts({"torch.version": "2.4.1"}))
    other_mtu = worker(3, "node1", mtu=9000)
    refused = worker(1, "node0")
    refused = dataclasses.replace(refused, facts=dataclasses.replace(
        refused.facts, reach=dataclasses.replace(refused.facts.reach, outcome="refused")))
    for odd in (other_env, other_mtu, refused):
        members = tuple(odd if m.rank == odd.rank else m for m in WORKERS)
        written = {e.rank: e for e in entries(members)}
        assert written[odd.rank].facts == odd.facts and written[odd.rank].facts_as is None


def test_nodes_not_launched_by_torchrun_each_keep_their_own():
    # Netcheck nodes sharing one machine (the loopback demo) are nodes, not one node's workers.
    same_machine = tuple(member(r, "vm", nics=(nic("lo", "127.0.0.1/8", kind="loopback"),)) for r in range(3))
    assert all(e.facts is not None and e.facts_as is None for e in entries(same_machine))


def test_readers_see_every_rank_s_facts():
    report = report_of(HOST, "r", 0, (), {}, nodes=entries(WORKERS))
    text = render_text(report, verbose=True)
    assert text.count("interfaces of node0:") == text.count("interfaces of node1:") == 1
    table = text.split("  rank  hostname")[1].splitlines()
    assert [row.split() for row in table[2:6]] == [[str(r), f"node{r // 2}", f"198.18.0.{10 + r // 2}", f"node{r // 2}"]
                                                   for r in range(4)]   # each rank's FQDN
    [drift] = drift_findings(report, entries(WORKERS), {})
    assert drift.severity == "pass" and drift.nodes == (0, 1, 2, 3)
    moved = tuple(worker(r, f"node{r // 2}", mtu=9000 if r >= 2 else 1500) for r in range(4))
    [drift] = drift_findings(report, entries(moved), {})
    assert drift.severity == "warn" and drift.nodes == (2, 3)
    assert drift.evidence == ("node1 (ranks 2, 3): interface eth0: 198.18.0.11, mtu 1500, running -> "
                              "198.18.0.11, mtu 9000, running",)
