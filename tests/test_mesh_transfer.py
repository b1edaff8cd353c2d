"""The mesh's full-size frame test: how a transfer's trials classify, the blackhole rule over
hand-built attempts, and the echoing listener over loopback (no namespaces needed)."""

from __future__ import annotations

import selectors
import socket
import threading

import pytest

from netcheck.cluster import mesh
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.codec import DecodeError
from netcheck.core.constants import MESH_CONNECT_TIMEOUT, MESH_MAX_CANDIDATES, MESH_TRANSFER_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.meshrecords import Attempt, Candidate, FlaggedPaths, Offer, Transfer, Trial, passed_frame
from netcheck.core.nictable import NicTable
from netcheck.core.storekeys import MESH_OFFER
from netcheck.phases.mesh import _unheard, _usable
from netcheck.rules import mesh as mesh_rules
from netcheck.rules.registry import MESH_BLACKHOLE, MESH_CONNECT

NAMES = {0: "node0", 1: "node1", 2: "node2"}
JUMBO_ECHOED = Transfer(9000, 9000, (Trial(9000, "echoed"),))
SHORT_PORT = Transfer(9000, 9000, (Trial(9000, "lost"), Trial(1500, "echoed")))


@pytest.mark.parametrize("trials, outcome, passed", [
    ((Trial(9000, "echoed"),), "ok", 9000),
    ((Trial(9000, "lost"), Trial(1500, "echoed")), "blackhole", 1500),
    ((Trial(9000, "lost"), Trial(1500, "lost"), Trial(1280, "echoed")), "blackhole", 1280),
    ((Trial(9000, "lost"), Trial(1500, "lost"), Trial(1280, "lost")), "blackhole", 0),  # greeted, nothing more
    ((Trial(9000, "lost"), Trial(1500, "unreached")), "filtered", 0),   # the path went away mid-test
    ((Trial(9000, "closed"),), "refused", 0),                           # the peer hung up
    ((Trial(9000, "lost"), Trial(1500, "closed")), "refused", 0),
    ((Trial(9000, "untried"),), "untried", 0),                          # the phase ended first
    ((Trial(9000, "lost"), Trial(1500, "untried")), "blackhole", 0),    # full size lost after its full time
])
def test_a_transfer_is_classified_by_what_came_back(trials, outcome, passed):
    transfer = Transfer(9000, 9000, trials)
    assert mesh.transfer_outcome(transfer) == outcome
    assert passed_frame(transfer) == passed


def test_the_detail_says_the_size_lost_and_the_size_that_passed():
    assert mesh.transfer_detail(SHORT_PORT) == (f"connected, but 4 frames of 9000 bytes did not come back within "
                                                f"{MESH_TRANSFER_TIMEOUT:g} s; 1500-byte frames did")
    assert mesh.transfer_detail(JUMBO_ECHOED) == "connected; 4 frames of 9000 bytes echoed"


def path(src: int, dst: int, transfer: Transfer = JUMBO_ECHOED) -> Attempt:
    outcome = mesh.transfer_outcome(transfer)
    return Attempt(src, dst, "eth0", f"198.18.0.{10 + dst}", outcome, 0.1, "eth0", mesh.transfer_detail(transfer),
                   transfer)


@pytest.mark.parametrize("field, bad", [("outcome", "black-hole"), ("result", "gone")])
def test_a_peers_attempt_decodes_only_with_the_outcomes_and_trial_results_the_mesh_has(field, bad):
    """The mesh's outcomes are a closed set the codec checks, not a comment: a spelling no node
    writes is refused, naming its field, before a rule matches on it."""
    attempt = path(0, 1, SHORT_PORT)
    assert codec.loads(Attempt, codec.dumps(attempt), 1 << 16) == attempt
    text = codec.dumps(attempt).replace({"outcome": '"blackhole"', "result": '"lost"'}[field], f'"{bad}"')
    with pytest.raises(DecodeError, match=f"{field}: '{bad}' is not one of"):
        codec.loads(Attempt, text, 1 << 16)


def three_nodes(short: int | None) -> tuple[Attempt, ...]:
    """Every direction between three nodes; those touching `short` lose full-size frames."""
    return tuple(path(s, d, SHORT_PORT if short in (s, d) else JUMBO_ECHOED)
                 for s in range(3) for d in range(3) if s != d)


def test_a_node_whose_every_path_loses_full_frames_is_named_alone_with_the_mtu_fix():
    findings = mesh_rules.mesh_findings(NAMES, three_nodes(short=2))
    (hole,) = findings   # no "every direction connects" pass beside it
    assert (hole.check, hole.severity, hole.kind, hole.nodes) == (MESH_CONNECT, "fail", MESH_BLACKHOLE, (2,))
    assert [e.split(" eth0 ")[0] for e in hole.evidence] == [f"node{s} (rank {s})" for s in (0, 1, 2, 2)]
    assert all(e.endswith(": 9000-byte frames lost, 1500-byte frames passed") for e in hole.evidence)
    assert "node0 (rank 0) eth0 mtu 9000 -> node2 (rank 2) eth0 198.18.0.12 mtu 9000: 9000-byte frames lost, " \
           "1500-byte frames passed" in hole.evidence
    assert "on node2: ip link set dev eth0 mtu 1500" in hole.fix and "switch port of node2" in hole.fix


def test_a_lossy_pair_between_two_nodes_names_both_and_asks_for_the_paths_mtu():
    attempts = (path(0, 1, Transfer(9000, 9000, (Trial(9000, "lost"), Trial(1500, "lost"), Trial(1280, "lost")))),
                path(1, 0))
    (hole,) = mesh_rules.blackhole_findings(NAMES, attempts)
    assert (hole.kind, hole.nodes) == (MESH_BLACKHOLE, (0, 1))
    assert hole.evidence == ("node0 (rank 0) eth0 mtu 9000 -> node1 (rank 1) eth0 198.18.0.11 mtu 9000: 9000-byte "
                             "frames lost, only the greeting passed",)
    assert "ping -M do -s SIZE PEER" in hole.fix


def test_a_healthy_jumbo_mesh_passes_and_says_it_carried_full_frames():
    (connect,) = mesh_rules.mesh_findings(NAMES, three_nodes(short=None))
    assert (connect.check, connect.severity, connect.kind, connect.nodes) == (MESH_CONNECT, "pass", "", (0, 1, 2))
    assert "echo full-size frames (up to 9000 bytes)" in connect.summary   # a pass has no evidence to say it in
    assert mesh_rules.flagged_paths(NAMES, three_nodes(short=None)) == FlaggedPaths()


def test_flagged_paths_put_blackholes_first_and_a_blackholed_interface_stays_proven():
    broken = Attempt(1, 0, "eth0", "198.18.0.10", "filtered", None, None, "no answer in 2 s")
    attempts = (broken, path(0, 1, SHORT_PORT))
    flagged = mesh_rules.flagged_paths(NAMES, attempts)
    assert flagged.blackholes == 1
    assert flagged.paths == ("node0 -> node1 eth0 (198.18.0.11): blackhole",
                             "node1 -> node0 eth0 (198.18.0.10): filtered")


# --- the listener, over loopback ------------------------------------------------------------

@pytest.fixture
def listener():
    """A greeting listener on 127.0.0.1, served as the mesh serves its own; its Offer."""
    selector, stop = selectors.DefaultSelector(), threading.Event()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    selector.register(sock, selectors.EVENT_READ, f"{mesh.GREETING} 1 token\n".encode())
    thread = threading.Thread(target=mesh.serve_greetings, args=(selector, stop), daemon=True)
    thread.start()
    yield Offer(1, "token", (Candidate("lo", "127.0.0.1", sock.getsockname()[1], 1500),))
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and len(selector.get_map()) == 1, "every echo connection is closed"
    selector.close()
    sock.close()


def test_a_stuck_peer_does_not_stall_another_peers_echo(listener):
    c = listener.candidates[0]
    with socket.create_connection((c.address, c.port)) as stuck:
        stuck.setblocking(False)
        try:  # it never reads its echo: it sends until the listener, its echo unsent, reads no more
            while True:
                stuck.send(b"x" * (1 << 16))
        except OSError:  # full (BlockingIOError), or closed past what an echo needs
            pass
        attempt = mesh._attempt(0, listener, c, {}, {}, Deadline(10))
    assert attempt.outcome == "ok", attempt
    assert attempt.transfer.trials == (Trial(1500, "echoed"),)


def test_a_peer_that_reads_only_the_greeting_still_gets_it(listener):
    c = listener.candidates[0]
    with socket.create_connection((c.address, c.port), timeout=2) as sock:
        assert sock.recv(64) == f"{mesh.GREETING} 1 token\n".encode()


def test_a_clamped_connection_echoes_frames_of_that_size(listener):
    assert mesh._echo_fresh(listener, listener.candidates[0], 1280, Deadline(5)) == "echoed"


def test_an_offer_under_another_ranks_key_or_with_too_many_candidates_is_refused_and_named():
    """A mesh offer of 1,500 candidates that never greet used to cost 48 s of a 20 s run (64
    connects at a time x 2 s); it is refused, its sender named, and not waited for as lost."""
    ex = Exchange(None, "netcheck", end=Deadline(60))
    one = (Candidate("eth0", "198.18.0.11", 4242),)
    offers = {1: Offer(1, "t", one), 2: Offer(1, "t", one),
              3: Offer(3, "t", one * (MESH_MAX_CANDIDATES + 1))}
    assert list(_usable(ex, offers)) == [1]
    assert [(key, i) for key, i, _ in ex.interference.refusals()] == [(MESH_OFFER, 2), (MESH_OFFER, 3)]
    assert "over the 64 a node may offer" in (ex.interference.refused(MESH_OFFER, 3) or "")
    assert _unheard(ex, MESH_OFFER, [1, 2, 3, 4], _usable(ex, offers)) == [4]


def test_an_untried_direction_fails_the_mesh_and_never_passes_it():
    """The phase's deadline came before any of node0's connects to node1: no evidence that the
    path works, so no pass."""
    untried = Attempt(0, 1, "eth0", "198.18.0.11", mesh.UNTRIED, None, None, "not tried")
    attempts = tuple(path(s, d) for s, d in ((1, 0), (0, 2), (2, 0), (1, 2), (2, 1))) + (untried,)
    (finding,) = mesh_rules.mesh_findings(NAMES, attempts)
    assert (finding.check, finding.severity) == (MESH_CONNECT, "fail")
    assert "node0 -> node1: eth0 198.18.0.11: untried (not tried)" in finding.evidence


@pytest.fixture
def silent_peers():
    """Three peers whose 64 candidates each complete the handshake (the kernel's backlog) and
    never greet: the connects a lying peer would offer."""
    socks = []
    for _ in range(3):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        socks.append(sock)
    yield {2 + i: Offer(2 + i, "token", (Candidate("lo", "127.0.0.1", s.getsockname()[1], 1500),)
                             * MESH_MAX_CANDIDATES) for i, s in enumerate(socks)}
    for sock in socks:
        sock.close()


def test_connects_to_many_silent_candidates_end_with_the_phase_and_the_honest_peer_is_tried_first(
        listener, silent_peers):
    """192 silent candidates at 64 at a time x 2 s would take 6 s: the deadline (3 s) ends
    them, those it cut or never started are "untried", and the honest peer, whose candidate
    comes first in the interleaved order, is proven."""
    offers = {1: listener, **silent_peers}
    deadline = Deadline(3 * MESH_CONNECT_TIMEOUT / 2)
    attempts = mesh.probe_peers(0, offers, sorted(offers), NicTable((), (), None), deadline)
    assert deadline.elapsed() < deadline.at - deadline.start + MESH_CONNECT_TIMEOUT, "outlived its deadline"
    by_peer = {p: [a.outcome for a in attempts if a.dst == p] for p in offers}
    assert by_peer[1] == ["ok"]
    silent = [o for p in silent_peers for o in by_peer[p]]
    assert len(silent) == 3 * MESH_MAX_CANDIDATES and "ok" not in silent
    assert mesh.UNTRIED in silent and set(silent) <= {"filtered", mesh.UNTRIED}
