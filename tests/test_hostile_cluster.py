"""Hostile input on real network namespaces: foreign clients on the rendezvous port and a
flood of connections to the mesh listeners.

netcheck trusts nothing it receives (docs/contract.md, "Promises"): what a foreign client writes is
reported as a finding, never mixed into the run, never unpickled or executed; the host stays
within its time and memory bounds, and the real nodes are still judged, and pass.
The hostile client is tests/faults.py run as an agent in a node of its own.
"""

from __future__ import annotations

import re

import pytest

from cluster import NETNS_ETC, _write_in_place
from faults import (
    BIG_ARRIVALS,
    GRACE,
    HUGE_BYTES,
    LATE_ARRIVALS,
    NO_FINDING,
    OUTVOTERS,
    OVERSIZED_BYTES,
    PINGS_FLOOD,
    SILENT_CONNECTIONS,
    STRANGERS,
    Agent,
    PeakMemory,
    assert_survivor,
    counted_args,
    finish_each,
    nodes,
    ranked_args,
    record,
    slow_mesh,
)
from netcheck.core.constants import MAX_STRANGERS
from nodes import CLUSTER_TIMEOUT, PORT, start

pytestmark = pytest.mark.root_required

# A host peaks near 270 MiB here, healthy or under every attack below (torch is most of it);
# the promise is 256 MiB above a normal run, and a host that decoded or kept what it was sent
# (a 64 MiB value, a flooded pings list re-read per poll) would go past it at once.
HOST_MEMORY_LIMIT = 528 << 20

# What each hostile action did, and the words of the finding that names it (None: it leaves
# no trace but must not disturb the run).
HOSTILE_BEFORE_THE_LAST_NODE = {
    "garbage": ("garbage bytes (random, 0xff, an HTTP request) on the rendezvous port", None),
    "silent": (f"{SILENT_CONNECTIONS} connections to the rendezvous port that never send a byte", None),
    "oversized": (f"a {OVERSIZED_BYTES >> 20} MiB value as a node's facts (limit 1 MiB)", "byte limit"),
    "huge": (f"a {HUGE_BYTES >> 20} MiB value as a node's facts (TCPStore refuses over 8 MiB)", None),
    "schema": ("JSON of another schema as a node's facts", r"\$\.|missing field"),
    "notjson": ("bytes that are not JSON (a pickle header) as a node's facts", "not JSON"),
    "foreign": ("a visitor of another run id, with that run's keys", "intruder-run"),
    "unwritten": ("an arrival counted and never written", None),
    "arrivals": ("the arrivals counter pushed by 10,000", "counted in by a client that is not a netcheck node"),
    "pings": (f"{PINGS_FLOOD[0]} x {PINGS_FLOOD[1] >> 20} MiB appended to the pings list", "grew past"),
    "strangers": (f"{STRANGERS} visitor records of 4 other runs", "more visitors of 4 other run"),
}
HOSTILE_AFTER_THE_ROSTER = {"counters": ("the shared visitor counter pushed by 1,000,000",
                                         "visitors counts .* but .* were written")}


def test_hostile_store_clients_are_named_and_the_real_nodes_pass(cluster, tmp_path):
    """A foreign client does its worst before the last real node starts, and pushes the
    visitor counter once the roster is posted."""
    # node2 starts only after the hostile writes, which wait for the host's store: two torch
    # imports in a row inside the host's join deadline (half of this) on a busy machine.
    timeout = 2 * CLUSTER_TIMEOUT
    actions = [*HOSTILE_BEFORE_THE_LAST_NODE, "roster", *HOSTILE_AFTER_THE_ROSTER]
    with cluster(nodes(4)) as c:
        runs = {i: start(c, i, ranked_args(i, 3, timeout), tmp_path, fresh=i == 0) for i in range(2)}
        memory = PeakMemory(runs[0].proc)
        agent = Agent.start(c, 3, "hostile", f"node0:{PORT}", ",".join(actions))
        agent.wait_for_all([f"^did {a} " for a in HOSTILE_BEFORE_THE_LAST_NODE], timeout)
        runs[2] = start(c, 2, ranked_args(2, 3, timeout), tmp_path)
        finish_each(runs.values(), timeout + 10)
        agent.wait_for("^done$", 1)
    roles = {0: "host", 1: "joiner", 2: "joiner, started after the hostile writes"}
    for fault, words in {**HOSTILE_BEFORE_THE_LAST_NODE, **HOSTILE_AFTER_THE_ROSTER}.values():
        record(fault, "rendezvous", timeout, runs.values(), roles, focus=words or NO_FINDING)

    host = assert_survivor(runs[0], timeout, codes=(1,))
    assert [(n["rank"], n["hostname"]) for n in host["nodes"]] == [(0, "node0"), (1, "node1"), (2, "node2")]
    warned = [f for f in host["findings"] if f["severity"] == "warn"]
    assert all(f["check"] == "rdzv.join" for f in warned), host["findings"]
    for fault, words in (*HOSTILE_BEFORE_THE_LAST_NODE.values(), *HOSTILE_AFTER_THE_ROSTER.values()):
        if words:
            assert [f for f in warned if _mentions(f, words)], f"{fault}: not named in {warned}"
    assert host["findings"][-1]["check"] != "run.timeout"
    assert [f["severity"] for f in host["findings"] if f["check"] == "mesh.connect"] == ["pass"]
    assert memory.peak < HOST_MEMORY_LIMIT, f"host peak RSS {memory.peak >> 20} MiB"
    for joiner in (runs[1], runs[2]):
        assert assert_survivor(joiner, timeout, codes=(0,))["verdict"] == "pass"


def _mentions(finding: dict, words: str) -> bool:
    return bool(re.search(words, " ".join([finding["summary"], *finding["evidence"]])))


def test_flood_of_connections_to_the_mesh_listeners(cluster, tmp_path):
    """Every mesh listener is flooded as soon as it is offered (100 connections held open
    that never send, 4 threads connecting and closing), while the other nodes probe it; a
    filtered candidate on the host keeps the mesh open for its 2 s connect timeout."""
    timeout = CLUSTER_TIMEOUT
    flood_seconds = 4
    with cluster(nodes(4)) as c:
        slow_mesh(c, peers=(1, 2))  # not node3, whose flood would wait on the filtered address
        runs = {i: start(c, i, counted_args(3, timeout), tmp_path, fresh=i == 0) for i in range(2)}
        memory = PeakMemory(runs[0].proc)
        agent = Agent.start(c, 3, "watch", f"node0:{PORT}", "--flood", str(flood_seconds))
        agent.wait_for("^connected$", timeout)   # before the last node lets the run go on
        runs[2] = start(c, 2, counted_args(3, timeout), tmp_path)
        ranks = agent.roster(timeout)
        agent.wait_for_all([rf"^flooding {ranks[f'node{node}'][0]} " for node in runs])
        finish_each(runs.values(), timeout + 10)
        counts = agent.wait_for(r"^flooded (.*)$", flood_seconds + GRACE)[1]
    roles = {0: "host", 1: "joiner, flooded", 2: "joiner, flooded"}
    record("flood of connections to the mesh listeners", "mesh", timeout, runs.values(), roles, focus="mesh")

    assert '"held": 0' not in counts and '"churned": 0' not in counts, counts
    host = assert_survivor(runs[0], timeout, codes=(0, 1))
    (mesh,) = [f for f in host["findings"] if f["check"] == "mesh.connect"]
    assert mesh["severity"] == "pass" and mesh["nodes"] == [0, 1, 2], mesh
    assert memory.peak < HOST_MEMORY_LIMIT, f"host peak RSS {memory.peak >> 20} MiB"
    for node in (1, 2):
        assert_survivor(runs[node], timeout, codes=(0,))


def test_a_node_without_the_token_is_not_seated(cluster, tmp_path):
    """--token: node2 does not have the secret; node1 has it through NETCHECK_TOKEN and
    starts once the host has read node2's unsigned facts (so they are judged before the
    roster, not as a latecomer's). Two torch imports in a row inside the host's join
    deadline (half of --timeout) on a busy machine: twice a cluster's room."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(3)) as c:
        args = counted_args(2, timeout)
        runs = {0: start(c, 0, args + ["--token", "s3cret"], tmp_path), 2: start(c, 2, args, tmp_path)}
        # Someone on the network copies the host's signed facts under a new arrival: a ghost seat.
        replay = Agent.start(c, 2, "hostile", f"node0:{PORT}", "replay")
        Agent.start(c, 0, "watch", f"127.0.0.1:{PORT}").wait_for(r"^arrival \d+ node2$", timeout)
        replay.wait_for("^did replay ", timeout)
        runs[1] = start(c, 1, args, tmp_path, env={"NETCHECK_TOKEN": "s3cret"})
        finish_each(runs.values(), timeout + 10)
    host = assert_survivor(runs[0], timeout, codes=(1,))
    assert [n["hostname"] for n in host["nodes"]] == ["node0", "node1"], host["nodes"]
    rejected = [f for f in host["findings"] if f["check"] == "rdzv.join" and f["severity"] == "warn"]
    assert len(rejected) == 2, rejected    # node2's unsigned facts, and the copy
    assert all("not signed for this key and run with this --token" in f["evidence"][0] for f in rejected)
    assert_survivor(runs[1], timeout, codes=(0,))
    outsider = assert_survivor(runs[2], timeout, codes=(2,))   # not seated: its own fault
    assert any(f["check"] == "rdzv.join" and f["severity"] == "fail" for f in outsider["findings"])


# A client's writes to the run's keys from before the joiner comes (issue 39, cases 1 to 4 and
# 6): the store keys the findings must name, with and without --token.
SHARED, RUN = "netcheck/", "netcheck/netcheck/"
HOSTILE_WRITES = [
    ("push", None, {SHARED + "visitors", RUN + "arrivals"}),
    ("push", "s3cret", {SHARED + "visitors", RUN + "arrivals"}),
    ("push-max", None, {SHARED + "visitors", RUN + "arrivals"}),
    ("push-max", "s3cret", {SHARED + "visitors", RUN + "arrivals"}),
    ("set", None, {SHARED + "visitors", RUN + "arrivals", SHARED + "host", RUN + "roster"}),
    ("set", "s3cret", {SHARED + "visitors", RUN + "arrivals", SHARED + "host", RUN + "roster"}),
    ("replay-hello", "s3cret", {SHARED + "host"}),
    ("big-visitors", None, {SHARED + "visitor/*"}),
    ("flood-pings", None, {SHARED + "pings"}),
    ("flood-pings", "s3cret", {SHARED + "pings"}),
]


@pytest.mark.parametrize("action,token,keys", HOSTILE_WRITES,
                         ids=[f"{a}-{'token' if t else 'open'}" for a, t, _ in HOSTILE_WRITES])
def test_a_clients_writes_to_the_runs_keys_are_named_and_the_honest_joiner_is_seated(cluster, tmp_path, action, token,
                                                                                       keys):
    """A client pushes the counters (once by 10,000; to int64's maximum, where the joiner's own
    add() wraps), sets them and the host's keys to "x" (torch's store closes the connection of
    the next add()), or writes an earlier run's signed hello over the host's: the joiner is
    seated all the same, the interference is named by key, and no node is blamed; 300 visitor
    records of 1 MiB are refused, deleted and counted (case 6); 8 MiB appends to the pings
    list without pause (case 3) leave the joiner without its clock sample, not its seat. The
    host stays within its memory bound, under a live flood too: the list it grows lives in the
    host's store (its process), and was cleared only at the host's next poll, 600 MiB at the
    peak once; from the first flood seen it is cleared every FLOODED_LIST_SWEEP."""
    timeout = 2 * CLUSTER_TIMEOUT   # the joiner starts after the write, which waits for the host's store
    env = {"NETCHECK_TOKEN": token} if token else None
    with cluster(nodes(3)) as c:
        runs = {0: start(c, 0, ranked_args(0, 2, timeout), tmp_path, env=env, fresh=True)}
        memory = PeakMemory(runs[0].proc)
        agent = Agent.start(c, 2, "hostile", f"node0:{PORT}", action, env=env)
        agent.wait_for(f"^did {action} ", timeout)
        runs[1] = start(c, 1, ranked_args(1, 2, timeout), tmp_path, env=env)
        finish_each(runs.values(), timeout + 10)
    record(f"a client's writes to the run's keys: {action}{' (--token)' if token else ''}", "rendezvous", timeout,
           runs.values(), {0: "host", 1: "joiner, started after the write"}, focus="interfered")

    host = assert_survivor(runs[0], timeout, codes=(1,))
    joiner = assert_survivor(runs[1], timeout, codes=(0, 1))
    assert [(n["rank"], n["hostname"]) for n in host["nodes"]] == [(0, "node0"), (1, "node1")]
    findings = host["findings"] + joiner["findings"]
    assert not [f for f in findings if f["severity"] == "fail"], findings
    interference = [f for f in findings if f["kind"] == "interference"]
    assert all(f["check"] == "rdzv.join" and f["severity"] == "warn" and f["nodes"] == [] for f in interference)
    assert keys <= {f["evidence"][0].split(" ")[0] for f in interference}, interference
    assert memory.peak < HOST_MEMORY_LIMIT, f"host peak RSS {memory.peak >> 20} MiB"


def _joiner_after_a_client(c, tmp_path, timeout: float, actions: str, ready: str) -> dict:
    """The host on node0 and a hostile client on node2 doing `actions`; once the client says
    `ready`, the joiner on node1. Returns both runs, ended, once the client has done all."""
    runs = {0: start(c, 0, ranked_args(0, 2, timeout), tmp_path)}
    client = Agent.start(c, 2, "hostile", f"node0:{PORT}", actions)
    client.wait_for(ready, timeout)
    runs[1] = start(c, 1, ranked_args(1, 2, timeout), tmp_path)
    client.wait_for("^done$", timeout)
    finish_each(runs.values(), timeout + 10)
    return runs


def test_a_copy_of_an_honest_nodes_facts_is_named_and_the_node_not_blamed(cluster, tmp_path):
    """Without --token a client takes an arrival number before node1 comes and copies node1's
    facts under it the moment they are there (issue 39): two claims of rank 1 used to fail
    rank 1 as a duplicate rank, blaming the honest node. The copy carries node1's process
    token: named as interference (the store key) and not seated. Where the host read the two
    in one poll, the copy first, the copy took the seat and node1 was turned away: the run is
    denied, and still no node is blamed."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(3)) as c:
        runs = _joiner_after_a_client(c, tmp_path, timeout, "impersonate", "^took arrival ")
    record("a copy of node1's facts under an arrival taken before it", "rendezvous", timeout, runs.values(),
           {0: "host", 1: "joiner, its facts copied"}, focus="interfered")

    host = assert_survivor(runs[0], timeout, codes=(1, 2))
    assert_survivor(runs[1], timeout, codes=(0, 1, 2))
    raised = [f for f in host["findings"] if f["severity"] != "pass"]
    assert not [f for f in raised if f["nodes"]], raised   # no node blamed, rank 1 least of all
    copies = [f for f in raised if f["kind"] == "interference" and "its process's own token" in f["evidence"][0]]
    assert copies and copies[0]["evidence"][0].startswith(RUN + "node/"), raised
    assert not [f for f in raised if f["kind"] == "duplicate_rank"], raised


def test_the_sender_of_facts_the_host_refused_is_named_not_called_absent(cluster, tmp_path):
    """node1 signs in as itself, claiming rank 1, and sends facts with a NUL in an address
    (issue 39, case 7): the host names node rank 1 (node1) as the sender of facts it refused,
    not as a node that never reached the store."""
    timeout = CLUSTER_TIMEOUT
    with cluster(nodes(2)) as c:
        runs = {0: start(c, 0, ranked_args(0, 2, timeout), tmp_path)}
        agent = Agent.start(c, 1, "badfacts", f"node0:{PORT}", "1", "2")
        agent.wait_for("^published ", timeout)
        finish_each(runs.values(), timeout + 10)
    host = assert_survivor(runs[0], timeout)
    joins = [(f["severity"], f["kind"], f["nodes"]) for f in host["findings"] if f["check"] == "rdzv.join"]
    assert ("fail", "malformed", [1]) in joins and not [j for j in joins if j[1] == "missing"], joins
    (refused,) = [f for f in host["findings"] if f["kind"] == "malformed" and f["nodes"] == [1]]
    assert refused["evidence"][0].startswith("arrival "), refused


@pytest.mark.parametrize("token", [None, "s3cret"], ids=["open", "token"])
def test_arrivals_past_nnodes_are_summarised_not_kept(cluster, tmp_path, token):
    """A client writes 200 arrivals of valid-looking facts of about a MiB each, claiming node
    ranks past --nnodes, before the joiner comes (issue 39, case 6): the host keeps why each
    was not seated, not the facts (it kept them all, +404 MB); they are told 16 one by one
    and the rest in one finding, naming no node; the honest nodes pass. Under --token the
    unsigned copies are refused instead, and the honest nodes still pass."""
    timeout = 2 * CLUSTER_TIMEOUT   # the joiner starts after the writes, which wait for the host's store
    env = {"NETCHECK_TOKEN": token} if token else None
    with cluster(nodes(3)) as c:
        runs = {0: start(c, 0, ranked_args(0, 2, timeout), tmp_path, env=env, fresh=True)}
        memory = PeakMemory(runs[0].proc)
        agent = Agent.start(c, 2, "hostile", f"node0:{PORT}", "big-arrivals", env=env)
        agent.wait_for("^did big-arrivals ", timeout)
        runs[1] = start(c, 1, ranked_args(1, 2, timeout), tmp_path, env=env)
        finish_each(runs.values(), timeout + 10)
    count, size = BIG_ARRIVALS
    record(f"{count} arrivals of {size >> 20} MiB past --nnodes{' (--token)' if token else ''}", "rendezvous",
           timeout, runs.values(), {0: "host", 1: "joiner, started after the writes"}, focus="rdzv.join")

    host = assert_survivor(runs[0], timeout, codes=(1,) if token else (4,))   # 4: the arrivals', not the host's
    assert_survivor(runs[1], timeout, codes=(0,))
    assert [(n["rank"], n["hostname"]) for n in host["nodes"]] == [(0, "node0"), (1, "node1")]
    raised = [f for f in host["findings"] if f["severity"] != "pass"]
    assert not [f for f in raised if f["nodes"]], raised    # no honest node blamed
    kind = "malformed" if token else "unseated"
    told = [f for f in raised if (f["check"], f["kind"]) == ("rdzv.join", kind)]
    assert told == raised and len(told) == MAX_STRANGERS + 1, raised   # 16 one by one, the rest in one
    assert len(told[-1]["evidence"]) == MAX_STRANGERS, told[-1]
    assert memory.peak < HOST_MEMORY_LIMIT, f"host peak RSS {memory.peak >> 20} MiB"


def test_arrivals_past_nnodes_cannot_outvote_the_honest_nodes_in_the_launch_checks(cluster, tmp_path):
    """A client writes OUTVOTERS arrivals of the host's own facts, renamed, claiming node ranks
    past --nnodes 2 and saying --nnodes 32 and another --nproc-per-node, before the joiner
    comes: never seated but kept whole (the first MAX_STRANGERS are), they used to outvote
    the two honest nodes 16 to 2 in launch.topology, which then named ranks 0 and 1. Only the
    seated vote now: the disagreement names the arrivals by hostname and no node, and the
    honest nodes pass."""
    timeout = 2 * CLUSTER_TIMEOUT   # the joiner starts after the writes, which wait for the host's store
    with cluster(nodes(3)) as c:
        runs = {0: start(c, 0, ranked_args(0, 2, timeout), tmp_path)}
        Agent.start(c, 2, "hostile", f"node0:{PORT}", "outvote").wait_for("^did outvote ", timeout)
        runs[1] = start(c, 1, ranked_args(1, 2, timeout), tmp_path)
        finish_each(runs.values(), timeout + 10)
    record(f"{OUTVOTERS} arrivals past --nnodes saying another --nnodes", "rendezvous", timeout, runs.values(),
           {0: "host", 1: "joiner, started after the writes"}, focus="launch.topology")

    host = assert_survivor(runs[0], timeout)   # the arrivals not seated are a failure, other nodes' (issue 65)
    assert_survivor(runs[1], timeout, codes=(0,))
    assert [(n["rank"], n["hostname"]) for n in host["nodes"]] == [(0, "node0"), (1, "node1")]
    raised = [f for f in host["findings"] if f["severity"] != "pass"]
    assert not [f for f in raised if f["nodes"]], raised    # no honest node blamed
    assert not [f for f in raised if f["check"] == "env.mismatch"], raised
    launch = {(f["kind"], f["severity"]) for f in raised if f["check"] == "launch.topology"}
    assert launch == {("nnodes_disagree", "fail"), ("nproc_disagree", "warn")}, raised
    unseated = [f for f in raised if (f["check"], f["kind"]) == ("rdzv.join", "unseated")]
    assert len(unseated) == OUTVOTERS, raised


def test_arrivals_after_the_roster_are_named_in_a_count_not_kept(cluster, tmp_path):
    """A client counts LATE_ARRIVALS arrivals of the host's facts, renamed, in once the roster
    is out: latecomers, read by the host's last poll before its verdict. They were kept whole
    there, one finding each; now the first MAX_STRANGERS are named one by one and the rest in
    one count, naming no node, and the facts past those are deleted from the host's store.
    The honest nodes pass, and the host stays within the memory bound. (Padded to a MiB, the
    host's half-second poll reads 8 of them: the time bound already held their memory.)"""
    timeout = 2 * CLUSTER_TIMEOUT   # the joiner starts after the writes, which wait for the host's store
    with cluster(nodes(3)) as c:
        runs = {0: start(c, 0, ranked_args(0, 2, timeout), tmp_path, fresh=True)}
        memory = PeakMemory(runs[0].proc)
        agent = Agent.start(c, 2, "hostile", f"node0:{PORT}", "late-arrivals")
        agent.wait_for("^written$", timeout)
        runs[1] = start(c, 1, ranked_args(1, 2, timeout), tmp_path)
        agent.wait_for("^did late-arrivals ", timeout)
        finish_each(runs.values(), timeout + 10)
    record(f"{LATE_ARRIVALS} arrivals counted in after the roster", "goodbye", timeout, runs.values(),
           {0: "host", 1: "joiner"}, focus="rdzv.join")

    host = assert_survivor(runs[0], timeout)   # the latecomers are a failure, other nodes' (issue 65)
    assert_survivor(runs[1], timeout, codes=(0,))
    assert [(n["rank"], n["hostname"]) for n in host["nodes"]] == [(0, "node0"), (1, "node1")]
    raised = [f for f in host["findings"] if f["severity"] != "pass"]
    assert not [f for f in raised if f["nodes"]], raised    # no honest node blamed
    late = [f for f in raised if (f["check"], f["kind"]) == ("rdzv.join", "late")]
    assert len(late) == MAX_STRANGERS + 1 and len(late[-1]["evidence"]) <= MAX_STRANGERS, late
    assert memory.peak < HOST_MEMORY_LIMIT, f"host peak RSS {memory.peak >> 20} MiB"


SLOW_ZONE = (3, 3.0)   # a stranger's connects, and how late its reverse zone answers (under the resolver's 5 s)


def _slow_reverse_zone(c, timeout: float, late: float = SLOW_ZONE[1]) -> None:
    """node0 (the host's) asks /etc/hosts, which does not list node2, then a nameserver on
    node3 that answers node2's reverse zone `late` (the resolver waiting past it)."""
    host_etc = NETNS_ETC / c.nodes[0].ns
    _write_in_place(host_etc / "nsswitch.conf", "hosts: files dns\n")
    _write_in_place(host_etc / "resolv.conf", f"nameserver {c.nodes[3].addr}\noptions timeout:{int(late) + 3}\n")
    c.write_hosts(0, c.hosts_lines(0, omit=[2]))
    Agent.start(c, 3, "nameserver", "0.0.0.0:53", c.nodes[2].addr, str(late)).wait_for("^serving$", timeout)


def _stalled_host(c, tmp_path, timeout: float, stranger_says: str):
    """The host on node0 behind _slow_reverse_zone; node2 connects to the store's port
    SLOW_ZONE times. Returns the host's run once node2's client has printed `stranger_says`."""
    _slow_reverse_zone(c, timeout)
    host = start(c, 0, ranked_args(0, 2, timeout), tmp_path)
    Agent.start(c, 2, "connects", f"node0:{PORT}", str(SLOW_ZONE[0])).wait_for(stranger_says, timeout)
    return host


# When the joiner starts: once the store answers again, or while the stranger holds it up.
JOINER_STARTS = {"after the stall": "^answered$", "during the stall": "^connected "}


@pytest.mark.parametrize("when", sorted(JOINER_STARTS))
def test_a_store_stalled_by_a_strangers_reverse_zone_is_named_and_no_node_blamed(cluster, tmp_path, when):
    """torch 2.13's store looks up the name of each connection it accepts, on its one thread
    (issue 39, case 5). The host's resolver asks /etc/hosts, then a nameserver (node3) that
    answers at once, but the reverse zone of node2, which the host's /etc/hosts does not
    list, 3 s late: node2's store client and three plain connects hold the store up about
    12 s while the host gathers. The host waits it out (its own reads used to end the run
    as run.internal) and names the stall with node2's address and no node. A joiner started
    after it is seated and passes; one started during it used to call the port "not a
    TCPStore" after 3 s (and the host named it as never joined): it now waits for the
    store's answer on the same connection (to its join deadline), says the answer came
    late, is seated and passes."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(4)) as c:
        runs = {0: _stalled_host(c, tmp_path, timeout, JOINER_STARTS[when])}
        runs[1] = start(c, 1, ranked_args(1, 2, timeout), tmp_path)
        finish_each(runs.values(), timeout + 10)
    record(f"a joiner comes {when} a stranger's late reverse DNS zone held up the store", "rendezvous",
           timeout, runs.values(), {0: "host", 1: f"joiner, started {when}"}, focus="rdzv")

    host = assert_survivor(runs[0], timeout, codes=(1,))
    joiner = assert_survivor(runs[1], timeout, codes=(0,))
    assert [(n["rank"], n["hostname"]) for n in host["nodes"]] == [(0, "node0"), (1, "node1")]
    raised = [f for f in host["findings"] if f["severity"] != "pass"]
    assert not [f for f in raised if f["nodes"]], raised    # no honest node blamed
    (stalled,) = [f for f in raised if (f["check"], f["kind"]) == ("rdzv.join", "store_stalled")]
    assert stalled["severity"] == "warn" and stalled["nodes"] == [], stalled
    assert all(c.nodes[1].addr not in line for line in stalled["evidence"]), stalled
    if when == "after the stall":
        assert all(c.nodes[2].addr in line for line in stalled["evidence"]), stalled
    else:
        (reached,) = [f for f in joiner["findings"] if f["check"] == "rdzv.reach"]
        assert reached["severity"] == "pass" and any("late: held up" in e for e in reached["evidence"]), reached


def test_a_seated_joiner_waits_out_a_stall_and_does_not_take_the_host_for_lost(cluster, tmp_path):
    """The stall as above, one connect answered 12 s late, from the moment the host has posted
    the seats: the joiner's next store request goes unanswered past the reply timeout (5 s)
    whatever order the store's thread takes its work in (four of 3 s each let requests through
    between them now and then), which
    used to name the host lost, a FAIL on a sound host, and the host named the joiner lost.
    The host's port still takes connections, so the joiner waits the stall out on a new
    connection and says so. The host names the stall, and does not count it as the joiner's
    silence (it went on without the joiner when the stall outlasted its wait for results).
    Once in a fresh-clone suite (three workers and a busy loop beside them) the joiner sat the
    stall out in its rendezvous without a request unanswered for 5 s, so it had nothing of its
    own to name and passed, rightly: what it must never do is take the host for lost, and
    where it waited one out, it says so."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(4)) as c:
        _slow_reverse_zone(c, timeout, late=12.0)
        # Its own store client first (its connect holds the store up too), then the joiner:
        # the seats cannot come before the stranger waits for them.
        runs = _joiner_after_a_client(c, tmp_path, timeout, "seated,connects=1", "^waiting for the seats$")
    record("a seated joiner while a stranger's late reverse DNS zone stalls the store", "rendezvous", timeout,
           runs.values(), {0: "host", 1: "joiner, seated before the stall"}, focus="rdzv")

    host = assert_survivor(runs[0], timeout, codes=(1,))
    joiner = assert_survivor(runs[1], timeout, codes=(0, 1))
    findings = host["findings"] + joiner["findings"]
    raised = [f for f in findings if f["severity"] != "pass"]
    assert all(f["kind"] == "store_stalled" and f["nodes"] == [] for f in raised), raised   # nobody lost or blamed
    assert [f for f in host["findings"] if f["severity"] == "warn" and c.nodes[2].addr in f["summary"]], raised
    held = [f for f in joiner["findings"] if f["kind"] == "store_stalled"]
    assert len(held) == (runs[1].rc == 1), held
    assert all(f["severity"] == "warn" and "waited out on a new connection" in f["summary"] for f in held), held


def test_a_joiner_the_stall_outlasts_is_named_under_the_stall_not_as_missing(cluster, tmp_path):
    """The stall as above, and a joiner with the least --timeout (17 s: it waits for the
    store's answer to 5.5 s after its start, a probe's timeout before its join deadline),
    started during it: the stall outlasts its wait, and it says the store did not answer in
    that time. The host, which never heard from it, names it under the stall (kind
    kept_out, fail; not in the faulty nodes), not as a node that never joined."""
    timeout = 2 * CLUSTER_TIMEOUT
    with cluster(nodes(4)) as c:
        runs = {0: _stalled_host(c, tmp_path, timeout, "^connected ")}
        runs[1] = start(c, 1, ranked_args(1, 2, 17), tmp_path)
        finish_each(runs.values(), timeout + 10)
    record("a joiner with --timeout 17 comes while a stranger's late reverse DNS zone stalls the store", "reach",
           timeout, runs.values(), {0: "host", 1: "joiner, started during the stall"}, focus="rdzv")

    host = assert_survivor(runs[0], timeout, codes=(5,))   # kept out by a stranger's stall: no node's fault
    joiner = assert_survivor(runs[1], 17, codes=(4,))   # its store unanswered: the host's side (issue 65)
    joins = [(f["kind"], f["severity"], f["nodes"]) for f in host["findings"] if f["check"] == "rdzv.join"]
    assert ("kept_out", "fail", [1]) in joins and not [j for j in joins if j[0] == "missing"], joins
    (reached,) = [f for f in joiner["findings"] if f["check"] == "rdzv.reach"]
    assert (reached["kind"], reached["severity"], reached["nodes"]) == ("not_store", "fail", [1]), reached
    assert "did not answer the TCPStore handshake" in reached["summary"], reached   # what it saw, no guess
    assert "node1" not in host["faulty_nodes"], host["faulty_nodes"]   # kept out, not faulty (issue 49 item 7)
    (stalled,) = [f for f in host["findings"] if f["kind"] == "store_stalled"]
    assert c.nodes[1].addr not in stalled["summary"], stalled   # a node /etc/hosts knows is no stranger
