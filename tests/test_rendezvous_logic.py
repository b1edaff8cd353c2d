"""The rendezvous's pure parts: rank assignment by claims and arrival order, a node's address."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import SimpleNamespace

import pytest

import builders
from builders import nic
from faults import wait_until
from netcheck.cluster import compat
from netcheck.cluster.collect import collect
from netcheck.cluster.compat import import_distributed
from netcheck.cluster.hostgather import (
    HostState,
    _answer_pings,
    came_without_facts,
    counter_gaps,
    host_gather,
    poll_arrivals,
    read_visitors,
    unread,
)
from netcheck.cluster.rendezvous import lookup_targets, ping, publish_facts, sign_in
from netcheck.cluster.seating import assign_ranks, rendezvous_closed
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.codec import DecodeError
from netcheck.core.constants import (
    MAX_FACTS_BYTES,
    MAX_MEMBERS,
    MAX_PINGS_BYTES,
    MAX_STRANGERS,
    NEWEST_FIRST,
    PINGS_KEPT_BYTES,
)
from netcheck.core.deadline import Deadline
from netcheck.core.meshrecords import FlaggedPaths, MeshDone
from netcheck.core.model import Finding, Launch, Member, NodeFacts, StoreStall, Visitor, node_address
from netcheck.core.nictable import Nic
from netcheck.core.seats import rank_runs, ranks_of
from netcheck.core.storekeys import ALIVE, ARRIVALS, MESH_DONE, NODE, PINGS, PONG, VISITOR, VISITORS, Key
from netcheck.facts.probe import probe_address
from netcheck.facts.tcptable import hex_address
from netcheck.phases.mesh import _host_word
from netcheck.rules.launch import launch_findings
from netcheck.rules.rdzv import hosts_message_refused, latecomer_findings, lost_findings
from netcheck.rules.storetrouble import held_up_findings, stall_explained, store_stall_findings
from nodes import scaled

# Keys of these tests' own, holding plain numbers: a collected name and a counter.
INTS = Key("result", int)
BEAT = Key("beat", int)


def facts(hostname: str, rank: int | None = None, nics: tuple[Nic, ...] = (), default: str | None = None,
          hostname_addresses: tuple[str, ...] = ()) -> NodeFacts:
    """A node of this run ("netcheck"), its FQDN in example."""
    return builders.facts(hostname, rank=rank, nics=nics, default=default, addresses=hostname_addresses,
                          fqdn=f"{hostname}.example", run_id="netcheck", version="0.1.0")


def arrivals(*nodes: tuple[str, int | None]) -> dict[int, NodeFacts]:
    """Arrival numbers 0, 1, 2... in the order given."""
    return {a: facts(host, rank) for a, (host, rank) in enumerate(nodes)}


# --- assign_ranks --------------------------------------------------------------------------------


def test_claimed_ranks_are_kept():
    ranks, duplicates, extras = assign_ranks(arrivals(("n0", 0), ("n2", 2), ("n1", 1)), 0, 3)
    assert ranks == {0: 0, 1: 2, 2: 1}
    assert duplicates == {}
    assert extras == []


def test_unclaimed_nodes_are_numbered_in_arrival_order_host_first():
    # The host arrived third (arrival 2) but is seated first: rank 0.
    ranks, duplicates, extras = assign_ranks(arrivals(("a", None), ("b", None), ("host", None)), 2, None)
    assert ranks == {2: 0, 0: 1, 1: 2}
    assert (duplicates, extras) == ({}, [])


def test_unclaimed_nodes_take_the_lowest_free_ranks_around_the_claimed_ones():
    nodes = arrivals(("host", 0), ("x", None), ("claims3", 3), ("y", None), ("z", None))
    ranks, duplicates, extras = assign_ranks(nodes, 0, 5)
    assert ranks == {0: 0, 2: 3, 1: 1, 3: 2, 4: 4}
    assert (duplicates, extras) == ({}, [])


def test_the_hosts_claim_wins_over_an_earlier_arrival_claiming_the_same_rank():
    nodes = arrivals(("early", 0), ("host", 0), ("n1", 1))
    ranks, duplicates, extras = assign_ranks(nodes, 1, 3)
    assert ranks == {1: 0, 2: 1}
    assert duplicates == {"0": ("host", "early")}   # host first, then in arrival order
    assert 0 not in ranks and extras == []           # the loser is left unseated, not an extra


def test_a_duplicate_claim_names_both_hostnames_and_leaves_the_later_one_unseated():
    nodes = arrivals(("host", 0), ("gpu1", 1), ("gpu1-clone", 1), ("gpu2", 2))
    ranks, duplicates, extras = assign_ranks(nodes, 0, 3)
    assert ranks == {0: 0, 1: 1, 3: 2}
    assert duplicates == {"1": ("gpu1", "gpu1-clone")}
    assert extras == []


def test_three_claims_on_one_rank_are_all_named_in_arrival_order():
    nodes = arrivals(("host", 0), ("a", 1), ("b", 1), ("c", 1))
    ranks, duplicates, _ = assign_ranks(nodes, 0, 2)
    assert ranks == {0: 0, 1: 1}
    assert duplicates == {"1": ("a", "b", "c")}


def test_unclaimed_nodes_beyond_nnodes_max_become_extras_in_arrival_order():
    nodes = arrivals(("host", None), ("a", None), ("b", None), ("c", None), ("d", None))
    ranks, duplicates, extras = assign_ranks(nodes, 0, 3)
    assert ranks == {0: 0, 1: 1, 2: 2}
    assert extras == [3, 4]
    assert duplicates == {}


def test_claimed_ranks_fill_the_cluster_so_late_unclaimed_nodes_are_extras():
    nodes = arrivals(("host", 0), ("loose", None), ("n1", 1))
    ranks, _, extras = assign_ranks(nodes, 0, 2)
    assert ranks == {0: 0, 2: 1}
    assert extras == [1]


def test_without_nnodes_max_nobody_is_an_extra():
    nodes = arrivals(*((f"n{i}", None) for i in range(12)))
    ranks, _, extras = assign_ranks(nodes, 0, None)
    assert ranks == {i: i for i in range(12)}
    assert extras == []


def test_only_the_host():
    assert assign_ranks(arrivals(("host", None)), 0, 1) == ({0: 0}, {}, [])
    assert assign_ranks(arrivals(("host", 0)), 0, None) == ({0: 0}, {}, [])


def test_the_arrivals_passed_in_are_not_changed():
    nodes = arrivals(("host", 0), ("a", None))
    before = dict(nodes)
    assign_ranks(nodes, 0, 2)
    assert nodes == before


# --- rendezvous_closed: when the host stops waiting -------------------------------------------

WINDOW = 5.0


@pytest.mark.parametrize("seated, low, high, quiet, closed", [
    # --nnodes N: all N seats, whatever the quiet; never the window alone.
    (2, 3, 3, 100.0, False),
    (3, 3, 3, 0.0, True),
    (1, 1, 1, 0.0, True),
    # --nnodes MIN:MAX: all MAX at once; MIN once quiet for the window, not a moment before.
    (4, 2, 4, 0.0, True),
    (2, 2, 4, WINDOW - 0.01, False),
    (2, 2, 4, WINDOW, True),
    (3, 2, 4, WINDOW, True),
    (1, 2, 4, 100.0, False),
    # No count (arrival numbering): someone besides the host, then the window.
    (2, None, None, WINDOW, True),
    (2, None, None, WINDOW - 0.01, False),
    (5, None, None, WINDOW, True),
    (1, None, None, 100.0, False),     # the host alone proves nothing: it waits on
    (0, None, None, 100.0, False),
])
def test_rendezvous_closes_by_torchruns_rules(seated, low, high, quiet, closed):
    assert rendezvous_closed(seated, low, high, quiet, WINDOW) is closed


@pytest.mark.compat
def test_a_host_whose_start_spent_the_join_deadline_still_seats_itself_and_who_came():
    """The join deadline is past before the first poll (a slow torch import): the host
    polls once anyway, and the roster has the host and the node already in the store."""
    server, ex = local_store()
    early = Exchange(import_distributed().TCPStore("127.0.0.1", server.port, None, False,
                                                   timedelta(seconds=10)), "netcheck", end=Deadline(60))
    early.put(early.key(NODE, early.add_to(early.key(ARRIVALS), 1) - 1), facts("early", 1))
    seat, state, _ = host_gather(ex, facts("host", 0), (2, 2), WINDOW, Deadline(0.0))
    assert sorted(f.hostname for f in state.arrivals.values()) == ["early", "host"]
    assert assign_ranks(state.arrivals, seat.arrival, 2)[0] == {0: 1, 1: 0}


@pytest.mark.compat
def test_the_host_hears_out_a_claimant_still_in_its_handshake_when_the_seats_fill():
    """Two nodes claim rank 1; the first publishes its facts, which fills both seats, while the
    second is still pinging the host's clock. The host waits for the second, so both claimants
    are named (it used to close at once and leave the second talking to a closed host)."""
    server, ex = local_store()
    first, second = (Exchange(import_distributed().TCPStore("127.0.0.1", server.port, None, False,
                                                            timedelta(seconds=10)), "netcheck", end=Deadline(60))
                     for _ in range(2))
    sign_in(first, facts("first", 1))
    publish_facts(first, facts("first", 1))
    pinger = sign_in(second, facts("second", 1))
    ping(second, pinger, 0)
    with ThreadPoolExecutor(1) as pool:
        gathered = pool.submit(host_gather, ex, facts("host", 0), (2, 2), WINDOW, Deadline(30.0))
        second.wait(second.key(PONG, pinger, 0), Deadline(30.0))  # the host is polling
        publish_facts(second, facts("second", 1))
        seat, state, _ = gathered.result()
    assert sorted(f.hostname for f in state.arrivals.values()) == ["first", "host", "second"]
    assert assign_ranks(state.arrivals, seat.arrival, 2)[1] == {"1": ("first", "second")}


def local_store():
    """A real TCPStore server on loopback, and an Exchange over it."""
    server = import_distributed().TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10),
                                           wait_for_workers=False)
    return server, Exchange(server, "netcheck", end=Deadline(60))


@pytest.mark.compat
def test_one_ping_scan_answers_every_ping_listed_and_a_cut_short_scan_resumes():
    server, ex = local_store()
    state = HostState({}, [])
    for v in (1, 2, 3):
        ping(ex, v, 0)
    server.append(ex.key(PINGS), "junk²/0,99999999/0,1/²")  # anyone may append: skipped
    ping(ex, 3, 1)
    _answer_pings(ex, state, Deadline(0.0))     # out of time before the first ping
    assert not any(ex.has(ex.key(PONG, v, 0)) for v in (1, 2, 3))
    _answer_pings(ex, state, Deadline(10.0))
    assert all(ex.has(ex.key(PONG, v, k)) for v, k in ((1, 0), (2, 0), (3, 0), (3, 1)))
    assert state.pings_answered == 7


@pytest.mark.compat
@pytest.mark.parametrize("count", [4, 40])  # a few ids are checked together; many, read off the posted list
def test_collect_reads_what_was_posted_and_a_foreign_listing_does_not_end_the_wait(count):
    """An id someone listed without a value stays pending (multi_get would wait for its
    key), and a value that does not decode is absent."""
    server, ex = local_store()
    for i in range(count):
        if i not in (1, 3):
            ex.post(INTS, i, i * 10)
    ex.enlist(ex.listing(INTS), "1")  # listed, never written
    server.append(ex.listing(INTS), "²9")  # junk without commas spoils only itself
    ex.put(ex.key(INTS, 3), "not an int")
    ex.enlist(ex.listing(INTS), "3")
    assert collect(ex, INTS, list(range(count)), Deadline(0.2)) == {
        i: i * 10 for i in range(count) if i not in (1, 3)}


@pytest.mark.compat
def test_collect_with_a_quiet_window_waits_as_long_as_a_few_ids_keep_coming():
    """The quiet window runs from the last value in: a few ids are checked together, which
    sees none until all are in, and so a steady trickle longer in all than the window was
    cut off at it (the host named lost a node that had reported back)."""
    server, ex = local_store()
    writer = Exchange(import_distributed().TCPStore("127.0.0.1", server.port, None, False,
                                                    timedelta(seconds=10)), "netcheck", end=Deadline(60))
    quiet, ids = scaled(1.0), [0, 1, 2, 3]

    def trickle():
        for i in ids:
            time.sleep(quiet / 2)
            writer.post(INTS, i, i)

    with ThreadPoolExecutor(1) as pool:
        pool.submit(trickle)
        assert collect(ex, INTS, ids, Deadline(10 * quiet), quiet=(quiet, quiet)) == {i: i for i in ids}


def test_collect_waits_its_least_from_the_first_look_however_early_the_last_value_came():
    """(LEAST, SILENCE): every node has LEAST seconds from the roster, so one that is still
    looking itself up is not named lost because the others were quick."""
    _, ex = local_store()
    ex.post(INTS, 0, 0)
    least = scaled(1.0)
    started = time.monotonic()
    assert collect(ex, INTS, [0, 1], Deadline(10 * least), quiet=(least, least / 10)) == {0: 0}
    assert time.monotonic() - started >= least


def test_a_visitor_counted_in_but_not_written_hides_none_after_it_and_is_read_later():
    _, ex = local_store()
    state = HostState({}, [])
    ex.add_to(ex.key(VISITORS), 3)
    ex.put(ex.key(VISITOR, 0), Visitor("netcheck", "a", 1), signed=False)
    ex.put(ex.key(VISITOR, 2), Visitor("other", "c", None), signed=False)
    read_visitors(ex, state, Deadline(10.0))
    assert (sorted(state.visitors), state.visitors_seen, state.in_flight("netcheck")) == ([0, 2], 1, 1)
    ex.put(ex.key(VISITOR, 1), Visitor("netcheck", "b", 2), signed=False)
    read_visitors(ex, state, Deadline(10.0))
    assert (state.visitors_seen, state.in_flight("netcheck")) == (3, 2)


def test_a_visitor_that_drew_its_number_at_random_is_read_from_the_listing():
    """Another client set the visitor counter to text (chaos 16547/13): a visitor then takes a
    number at random, which the counter never reaches; it is found by its listing, and its
    record (another run's here) is read, so that it is named."""
    _, ex = local_store()
    state = HostState({}, [])
    ex.put(ex.key(VISITORS), "x", signed=False)
    sign_in(ex, dataclasses.replace(facts("gpu9"), run_id="other-job"))
    read_visitors(ex, state, Deadline(10.0))
    assert [(v.run_id, v.hostname) for v in state.visitors.values()] == [("other-job", "gpu9")]
    assert ex.interference.noted(ex.key(VISITORS))


def test_a_node_whose_facts_never_came_is_told_from_one_whose_facts_came_by_hostname():
    """One-shot form: visitors without a rank, each answered by an arrival of its hostname,
    the rest came without their facts (chaos 21499/124); a record read only after the roster
    is a latecomer's, not lost."""
    _, ex = local_store()
    state = HostState({}, [])
    for name in ("node0", "node1", "node2", "node2", "late"):
        sign_in(ex, facts(name))
    read_visitors(ex, state, Deadline(10.0))
    state.seating_visitors = frozenset(sorted(state.visitors)[:4])
    for a, name in enumerate(("node0", "node2")):
        state.arrived(a, facts(name))
    assert [v.hostname for v in came_without_facts(ex.run_id, state, ())] == ["node1", "node2"]


@pytest.mark.compat
def test_counts_reads_every_counter_at_once_and_a_missing_or_foreign_one_as_zero():
    _, ex = local_store()
    ex.add_to(ex.key(BEAT, 1), 3)
    ex.add_to(ex.key(BEAT, 2), 5)
    assert ex.read_counters([ex.key(BEAT, 1), ex.key(BEAT, 2)]) == [3, 5]
    ex.put(ex.key(BEAT, 4), "x")
    assert ex.read_counters([ex.key(BEAT, n) for n in (1, 2, 3, 4)]) == [3, 5, 0, 0]


# --- node_address ------------------------------------------------------------------------------


@pytest.mark.parametrize("node, address", [
    # The default-route interface's first address (nics list IPv4 before IPv6).
    (facts("n", nics=(nic("lo", "127.0.0.1"), nic("eno1", "10.0.0.5", "fd00::5")), default="eno1",
           hostname_addresses=("10.9.9.9",)), "10.0.0.5"),
    (facts("n", nics=(nic("eno1", "10.0.0.5"), nic("ib0", "10.1.0.5")), default="ib0"), "10.1.0.5"),
    (facts("n", nics=(nic("eth0", "fd00::5"),), default="eth0"), "fd00::5"),
    # The default-route interface has no address: the hostname's resolution.
    (facts("n", nics=(nic("eno1"), nic("eno2", "10.0.0.6")), default="eno1",
           hostname_addresses=("10.0.0.7", "fd00::7")), "10.0.0.7"),
    # No default route at all.
    (facts("n", nics=(nic("eno1", "10.0.0.5"),), default=None, hostname_addresses=("10.0.0.8",)), "10.0.0.8"),
    # The default route names an interface that is not in the table.
    (facts("n", nics=(nic("eno1", "10.0.0.5"),), default="gone0", hostname_addresses=("10.0.0.8",)),
     "10.0.0.8"),
    # Nothing known.
    (facts("n", nics=(nic("eno1", "10.0.0.5"),), default=None), ""),
])
def test_node_address(node, address):
    assert node_address(node) == address
    assert Member(0, node).address == address


@pytest.mark.compat
def test_a_signed_value_copied_under_another_key_or_run_is_refused():
    """--token: a seated node's signed facts copied, MAC and all, under a new arrival (the
    ghost seat), or read under another run's nonce, do not decode; the original does."""
    server, _ = local_store()
    ex = Exchange(server, "netcheck", token="s3cret", end=Deadline(60))
    ex.signer.adopt("a" * 32)
    ex.put(ex.key(NODE, 0), facts("real", 1))
    for suffix in ("", "#mac"):
        server.set(ex.key(NODE, 5) + suffix, server.get(ex.key(NODE, 0) + suffix))
    assert ex.read(ex.key(NODE, 0)).hostname == "real"
    with pytest.raises(DecodeError, match="copied from another key or run"):
        ex.read(ex.key(NODE, 5))
    later = Exchange(server, "netcheck", token="s3cret", end=Deadline(60))
    later.signer.adopt("b" * 32)       # the same run id, started again: another host, another nonce
    with pytest.raises(DecodeError):
        later.read(ex.key(NODE, 0))
    other_run = Exchange(server, "other", token="s3cret", end=Deadline(60))
    other_run.signer.adopt(ex.signer.nonce)
    with pytest.raises(DecodeError):
        other_run.read(ex.key(NODE, 0))


def test_a_pushed_counter_is_scanned_newest_first_and_lazily():
    order = unread(3, 10**12, {10**12 - 2})
    assert [next(order) for _ in range(3)] == [10**12 - 1, 10**12 - 3, 10**12 - 4]
    assert list(unread(0, 5, {1})) == [4, 3, 2, 0]
    assert list(unread(0, NEWEST_FIRST + 2, set()))[-2:] == [0, 1]


@pytest.mark.compat
def test_an_arrival_after_a_pushed_counter_is_read_on_the_next_poll_and_the_push_named():
    """add() of 10,000 to the arrivals counter (anyone can) used to hide every later arrival:
    the host said the node "never reached the store"."""
    server, ex = local_store()
    state = HostState({}, [])
    server.add(ex.key(ARRIVALS), 10_000)
    publish_facts(ex, facts("late", 1))
    poll_arrivals(ex, state)
    assert [f.hostname for f in state.arrivals.values()] == ["late"]
    assert any("counted in by a client that is not a netcheck node" in gap for gap in counter_gaps(ex, state))


@pytest.mark.compat
def test_values_read_in_a_batch_come_decoded_one_at_a_time_and_a_refusal_keeps_nothing_of_the_value():
    """The host reads arrivals ARRIVALS_READ_BATCH to a request; a refused value's error was
    kept with its frames and json's own error (the whole text): a MiB each, a batch at once."""
    server, ex = local_store()
    good, bad, absent = (ex.key(NODE, i) for i in range(3))
    server.set(good, codec.dumps(facts("node1", 1)))
    server.set(bad, b"x" * (512 << 10))   # not JSON, half a MiB
    read = dict(ex.read_each([good, bad, absent]))
    assert list(read) == [good, bad] and read[good].hostname == "node1"
    error = read[bad]
    assert isinstance(error, DecodeError) and str(error).startswith("not JSON")
    assert (error.__traceback__, error.__context__, error.__cause__) == (None, None, None)


@pytest.mark.compat
def test_arrivals_that_can_never_be_seated_are_kept_whole_only_up_to_a_count():
    """--nnodes 2: the host and node1 hold both seats. Past MAX_STRANGERS arrivals that can
    never be seated (a rank past --nnodes, or none once the seats are full), the host keeps
    why each was not seated and deletes its facts from the store (issue 39, case 6: 200 of a
    MiB each cost the host 404 MB); one that may still be seated is kept whole."""
    server, ex = local_store()
    state = HostState({}, [], nnodes_max=2)
    state.host_arrival = publish_facts(ex, facts("host", 0))
    state.arrivals[state.host_arrival] = facts("host", 0)
    state.read.add(state.host_arrival)
    unranked = publish_facts(ex, facts("maybe"))   # the second seat is still free for it
    poll_arrivals(ex, state, seating=True)
    claimants = [publish_facts(ex, facts(f"ghost{i}", 2 + i)) for i in range(MAX_STRANGERS + 3)]
    seated = publish_facts(ex, facts("node1", 1))   # takes the seat "maybe" had: it is out now
    late = publish_facts(ex, facts("late"))
    poll_arrivals(ex, state, seating=True)
    kept = sorted(f.hostname for f in state.arrivals.values())
    assert "node1" in kept and "maybe" in kept and len(kept) == 3 + MAX_STRANGERS, kept
    assert len(state.set_aside) == 4 and "late came after all 2 seats were taken: not seated" in state.set_aside
    assert [a for a in claimants + [seated, unranked, late] if not ex.has(ex.key(NODE, a))] == [
        a for a in claimants + [late] if a not in state.arrivals]
    assert assign_ranks(state.arrivals, state.host_arrival, 2)[0] == {0: 0, seated: 1}


@pytest.mark.compat
def test_latecomers_are_all_named_but_kept_whole_only_up_to_a_count():
    """After the roster every arrival is a latecomer: each is listed (hostname, claim), and
    named one by one up to MAX_STRANGERS, the rest in one count; past MAX_STRANGERS kept whole
    (counted with those set aside while seating) its facts are deleted from the store (they
    were all kept, in the host's memory and its store's, one finding each)."""
    server, ex = local_store()
    state = HostState({}, [], nnodes_max=2)
    state.host_arrival = publish_facts(ex, facts("host", 0))
    state.arrivals[state.host_arrival] = facts("host", 0)
    state.read.add(state.host_arrival)
    publish_facts(ex, facts("node1", 1))
    poll_arrivals(ex, state, seating=True)
    late = [publish_facts(ex, facts(f"late{i}", 1 if i == 0 else None)) for i in range(MAX_STRANGERS + 3)]
    # A poll reads for POLL_SLICE seconds at most, as the host's do: on a loaded machine one poll
    # read 16 of the 19; the host polls again, and so does this test, until every one is read.
    for _ in range(100):
        poll_arrivals(ex, state)
        if len(state.latecomers) == len(late):
            break
    assert state.latecomers == [("late0", 1)] + [(f"late{i}", None) for i in range(1, MAX_STRANGERS + 3)]
    assert len(state.arrivals) == 2 + MAX_STRANGERS
    assert [a for a in late if not ex.has(ex.key(NODE, a))] == late[MAX_STRANGERS:]
    found = latecomer_findings(state.latecomers, SimpleNamespace(hostnames=lambda: {0: "host", 1: "node1"}))
    assert [(f.kind, f.severity, f.nodes) for f in found] == [("late", "fail", ())] * (MAX_STRANGERS + 1)
    assert found[0].summary == "late0 came late and was not seated: node rank 1 was already taken by node1"
    assert found[-1].summary == "3 more came late and were not seated" and len(found[-1].evidence) == 3


def test_arrivals_that_got_no_seat_cannot_outvote_the_seated_in_the_launch_checks():
    """Sixteen arrivals past --nnodes 2 (another client's, kept whole as the first
    MAX_STRANGERS are) saying --nnodes 32 and 4 processes per node: only the seated vote, so
    they are named by hostname and the honest ranks 0 and 1 are not (they were, outvoted 16
    to 2). Under torchrun, a host of theirs laid out wrong names its own ranks only (none)."""
    def node(name: str, rank: int, nnodes: int, nproc: int, source: str = "flags", **variables: str) -> NodeFacts:
        launch = Launch(source, rank, nnodes, nnodes, nproc, variables=variables)
        return dataclasses.replace(facts(name, rank), launch=launch)
    honest = [(0, node("node0", 0, 2, 1)), (1, node("node1", 1, 2, 1))]
    ghosts = [(None, node(f"ghost{i}", 2 + i, 32, 4)) for i in range(MAX_STRANGERS)]
    found = launch_findings(honest + ghosts)
    assert {(f.kind, f.severity, f.nodes) for f in found} == {
        ("nnodes_disagree", "fail", ()), ("nproc_disagree", "warn", ())}, found
    assert "ghost0" in found[0].summary and "node0" not in found[0].summary

    def worker(name: str, rank: int, local: int, per_node: str) -> NodeFacts:
        return node(name, rank, 2, 2, "torchrun", RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE="2",
                    LOCAL_WORLD_SIZE=per_node, GROUP_RANK="0")
    workers = [(0, worker("node0", 0, 0, "2")), (1, worker("node0", 1, 1, "2")), (None, worker("ghost", 2, 0, "4"))]
    (laid_out,) = launch_findings(workers)
    assert (laid_out.kind, laid_out.nodes) == ("torchrun_layout", ()), laid_out


def test_a_store_stall_names_the_clients_that_are_no_node_and_only_them():
    """/proc/net/tcp's addresses (words in host order, IPv4 mapped into IPv6 as IPv4), and the
    stall finding (issue 39, case 5): the nodes' own addresses and loopback are not named, and
    a stall with only them connected is the machine's load, not raised."""
    assert [hex_address(h) for h in ("0100007F", "0000000000000000FFFF00000C0012C6")] == ["127.0.0.1", "198.18.0.12"]
    members = (Member(0, facts("node0", 0, (nic("eth0", "198.18.0.10"),))),
               Member(1, facts("node1", 1, (nic("eth0", "198.18.0.11"),))))
    ours = StoreStall("get netcheck/host", 5.0, {"198.18.0.11": 1, "127.0.0.1": 2})
    assert store_stall_findings((ours,), members) == []
    theirs = StoreStall("has_key netcheck/pings", 3.0, {"198.18.0.11": 1, "198.18.0.12": 4})
    (stalled,) = store_stall_findings((ours, theirs), members)
    assert (stalled.check, stalled.kind, stalled.severity, stalled.nodes) == ("rdzv.join", "store_stalled", "warn", ())
    assert len(stalled.evidence) == 1 and "198.18.0.12 (4)" in stalled.evidence[0]
    assert "198.18.0.11" not in stalled.evidence[0]
    # A node the host knows of (its /etc/hosts, a visitor's record) and never seated is kept
    # out by the stall, not a stranger behind it (issue 49 item 7).
    assert store_stall_findings((ours, theirs), members, {"198.18.0.12": "node2"}) == []


@pytest.mark.compat
def test_answered_pings_are_dropped_once_the_list_outgrows_what_is_kept_and_later_ones_answered():
    """Every member pings CLOCK_PINGS times: kept whole, the list was read whole at every poll
    (a MB at 16,384 members) and passed the store's 8 MiB value at 131,072 (issue 51)."""
    _, ex = local_store()
    state, pings = HostState({}, []), ex.key(PINGS)
    tickets = [f"{t:016x}" for t in range(PINGS_KEPT_BYTES // 19 + 1)]   # "TICKET/0," is 19 bytes
    for t in tickets:
        ping(ex, t, 0)
    _answer_pings(ex, state, Deadline(10.0))
    assert all(ex.has(ex.key(PONG, t, 0)) for t in tickets)
    assert not ex.has(pings) and state.pings_answered == 0 and not ex.interference.notes()
    ping(ex, "ff", 1)
    _answer_pings(ex, state, Deadline(10.0))
    assert ex.has(ex.key(PONG, "ff", 1)) and ex.has(pings)   # under the bound: kept


@pytest.mark.compat
def test_a_pings_list_flooded_past_any_clusters_is_cleared_unread_and_named():
    """64 x 8 MiB appended to the pings list used to be re-read on every poll (1.8 GB RSS);
    past MAX_PINGS_BYTES it is cleared unread, and from then on every FLOODED_LIST_SWEEP
    between the host's polls (a live flood grew it by hundreds of MiB between two); a ping
    asked again, as a joiner asks every PING_RETRY, is answered."""
    server, ex = local_store()
    state, pings, pong = HostState({}, []), ex.key(PINGS), ex.key(PONG, 1, 0)
    ping(ex, 1, 0)
    server.append(pings, "x" * (MAX_PINGS_BYTES + 1))
    _answer_pings(ex, state, Deadline(10.0))
    assert not ex.has(pings)
    assert any("grew past" in line for line in ex.interference.lines()), ex.interference.lines()
    server.append(pings, "x" * (MAX_PINGS_BYTES + 1))   # no poll of the host's: cleared all the same
    wait_until(lambda: not ex.has(pings), scaled(5.0), "the flooded list cleared between the host's polls")
    end = time.monotonic() + scaled(5.0)
    while not ex.has(pong) and time.monotonic() < end:
        ping(ex, 1, 0)
        _answer_pings(ex, state, Deadline(10.0))
    assert ex.has(pong)


@pytest.mark.compat
@pytest.mark.parametrize("nodes", [1100, MAX_MEMBERS])
def test_the_hosts_list_of_who_is_still_here_reads_back_at_every_cluster_size_accepted(nodes):
    """Past 1,024 nodes the joiners refused it (the generic bound of an unannotated list) and
    fell back to every seated node, dead ones included: the regression behind issue 38."""
    _, ex = local_store()
    alive = tuple(r for r in range(1, nodes) if r % 7)   # every seventh lost: runs of six
    ex.put(ex.key(ALIVE), rank_runs(alive))
    assert ranks_of(ex.read(ex.key(ALIVE))) == alive
    flagged = MeshDone(FlaggedPaths(cut_off=alive))
    assert codec.loads(MeshDone, codec.dumps(flagged), MAX_FACTS_BYTES) == flagged


def test_a_message_of_the_hosts_that_a_joiner_refuses_is_a_finding_naming_its_key():
    finding = hosts_message_refused("netcheck/alive", "$: 1099 items, expected at most 1024")
    assert (finding.check, finding.kind, finding.severity) == ("rdzv.join", "malformed", "warn")
    assert "netcheck/alive" in finding.summary and "1099 items" in finding.evidence[0]


@pytest.mark.compat
def test_a_go_ahead_of_the_hosts_that_a_joiner_cannot_read_is_said_not_swallowed():
    """The host's MeshDone refused (a cut_off list past its bound): the joiner goes on with its
    own connects' paths, and says it refused the host's message, naming the key."""
    _, ex = local_store()
    ex.put(ex.key(MESH_DONE), {"flagged": {"cut_off": list(range(MAX_MEMBERS + 1))}})
    done, [finding] = _host_word(ex, Deadline(5.0))
    assert done is None
    assert (finding.check, finding.kind) == ("rdzv.join", "malformed") and ex.key(MESH_DONE) in finding.summary
    assert f"{MAX_MEMBERS + 1} items, expected at most {MAX_MEMBERS}" in finding.evidence[0]


def test_a_node_that_never_joined_during_a_stall_is_named_under_the_stall():
    """A missing rank while the host's store stalled with a stranger connected is the stall's
    doing (issue 39, case 5): named as kept out by the stall (fail, the node), not as missing;
    without a stall, missing stays missing."""
    members = (Member(0, facts("node0", 0, (nic("eth0", "198.18.0.10"),))),)
    stalled = store_stall_findings((StoreStall("get netcheck/host", 9.0, {"198.18.0.12": 3}),), members)
    missing = Finding(check="rdzv.join", severity="fail", nodes=(1,), summary="node rank 1 never joined", fix="",
                      kind="missing")
    (named,) = stall_explained([missing], stalled)
    assert (named.check, named.kind, named.severity, named.nodes) == ("rdzv.join", "kept_out", "fail", (1,))
    assert stall_explained([missing], []) == [missing]
    lost = lost_findings("mesh", {1: "node1"}, [1])
    (named,) = stall_explained(lost, stalled)
    assert (named.kind, named.severity, named.nodes) == ("kept_out", "fail", (1,))
    assert named.summary.startswith("node1 stopped answering during the mesh phase; meanwhile the host's store stalled")


def test_a_joiners_requests_that_waited_out_a_held_up_store_are_a_warning_naming_no_node():
    assert held_up_findings(()) == []
    (held,) = held_up_findings((9.0, 6.5))
    assert (held.check, held.kind, held.severity, held.nodes) == ("rdzv.join", "store_stalled", "warn", ())
    assert "2 time(s), 9 s at the longest" in held.summary and held.evidence == (
        "a request answered after 9 s", "a request answered after 6.5 s")


def test_only_a_reply_past_the_receive_timeout_is_taken_for_a_store_that_may_be_held_up():
    assert compat.reply_timed_out(ConnectionError("Socket Timeout"))
    assert not compat.reply_timed_out(ConnectionError("Connection reset by peer"))
    assert not compat.reply_timed_out(ValueError("Socket Timeout"))


def test_a_store_that_answers_late_is_told_from_one_that_never_answers():
    """A store held up (torch's one thread looking up another client's name) accepts and
    answers late; a hung process accepts and never does. With a deadline to answer by (a
    joiner's), silence is waited on, on the same connection: the late answer is open and
    said as late; silence to the deadline is not_store, and says how long it was waited on."""
    def serve(server: socket.socket, delay: float | None) -> None:
        conn, _ = server.accept()
        conn.recv(64)
        if delay is not None:
            time.sleep(delay)
            conn.sendall(b"\x01")
        time.sleep(2)
        conn.close()

    def probed(delay: float | None, answer_by: float) -> tuple[str, str]:
        with socket.create_server(("127.0.0.1", 0)) as server:
            threading.Thread(target=serve, args=(server, delay), daemon=True).start()
            found = probe_address(socket.AF_INET, server.getsockname(), 0.3, answer_by=Deadline(answer_by))
        return found.outcome, found.detail

    outcome, detail = probed(1.0, 3.0)
    assert outcome == "open" and "late: held up" in detail, detail
    outcome, detail = probed(None, 1.0)
    assert outcome == "not_store" and "no answer to the TCPStore handshake in 1" in detail, detail
    assert "join deadline" in detail, detail


def test_at_scale_every_node_looks_up_the_name_torchruns_c10d_hands_its_workers():
    """Beyond the full mesh each node looks up a sample of FQDNs, and always the one that sorts
    first: torchrun's c10d makes that node rank 0 and hands its FQDN out as MASTER_ADDR."""
    fqdns = {r: f"gpu{1000 - r:04d}.example" for r in range(200)}   # rank 199's sorts first
    for me in (0, 57, 198):
        assert {0, 199} - {me} <= set(lookup_targets(fqdns, me, "run")), "the host's, and the first name's"
    assert len(lookup_targets(fqdns, 57, "run")) < 20
