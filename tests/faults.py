"""Fault injection for the cluster tests: a store agent inside a node, triggers, the fault log.

The agent is this file run as a script inside a node (`Agent.start(c, i, ...)`). It
connects a torch TCPStore client to the host's store and watches it, printing one line per
thing that appears, so a test acts at a known point of a run instead of after a guessed
delay; with --flood it also floods every mesh listener whose offer appears. As `hostile` it
plays a foreign client: garbage bytes, silent connections, oversized, wrong-schema and
non-JSON values, another run id's keys, counters pushed far past any cluster.

    python tests/faults.py watch HOST:PORT RUN_ID [--flood SECONDS]
    python tests/faults.py hostile HOST:PORT RUN_ID ACTION,ACTION[,roster,ACTION...]

On the tests' side it offers `Agent` (read the agent's lines with deadlines), `record` (one
JSON line per fault case into $NETCHECK_FAULT_LOG, which scripts/fault_table.py renders as
docs/FAULTS.md) and the checks every fault case shares (`assert_survivor`, `lost_in`).
"""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from cluster import NodeSpec
from forked import ForkedNetcheck
from netcheck.cluster.compat import has_key
from netcheck.core import storekeys as keys
from netcheck.core.rdzvrecords import Hello
from netcheck.core.storekeys import ROOT
from nodes import CLUSTER_TIMEOUT, GRACE, PORT, NodeRun, finish, start

POLL = 0.01
LOG_ENV = "NETCHECK_FAULT_LOG"
NO_FINDING = r"(?!)"   # a `record` focus that matches nothing: the fault leaves no finding


# ---------------------------------------------------------------------------------------
# the agent, inside a node

def _store(endpoint: str, timeout: float = 2 * CLUSTER_TIMEOUT):
    """A client of the host's store, once the store has taken the host's listener over: until
    then the host answers only netcheck's probe and closes other connections, and torch 2.1
    and 2.4 clients give up on the first close where later ones retry (make compat). Waited
    for as long as the longest --timeout a test gives its host (the store comes up after the
    host's torch import: 30 s ran out beside five nodes importing theirs on 2 busy cores)."""
    import datetime

    import torch.distributed as dist

    host, port = endpoint.rsplit(":", 1)
    until = time.monotonic() + timeout
    while True:
        try:
            store = dist.TCPStore(host, int(port), None, False, datetime.timedelta(seconds=timeout))
            has_key(store, ROOT)   # a round trip: torch 2.1's constructor sends nothing
            return store
        except (RuntimeError, OSError):
            if time.monotonic() > until:
                raise
            time.sleep(POLL)


def _say(*words: object) -> None:
    print(*words, flush=True)


class _Keys:
    def __init__(self, run_id: str):
        self.run_id = run_id

    def __call__(self, *parts: object, shared: bool = False) -> str:
        scope = (ROOT,) if shared else (ROOT, self.run_id)
        return "/".join(scope + tuple(str(p) for p in parts))


# Per-roster keys the watcher reports, and the word it prints for each.
WATCHED = ((keys.RESULT, "arrival", "result"), (keys.MESH_OFFER, "rank", "offer"),
           (keys.MESH_RESULT, "rank", "mesh"), (keys.ENV, "rank", "env"), (keys.BYE, "arrival", "bye"))


def watch(endpoint: str, run_id: str, flood_seconds: float | None = None) -> None:
    """One line per event, in the order the store shows them, until the store goes away:

        arrival A HOSTNAME     roster RANK=HOSTNAME@ARRIVAL ...
        result A    offer R    mesh R    env R    bye A    flooding R {counts}
    """
    store, key = _store(endpoint), _Keys(run_id)
    flood = _Flood(flood_seconds) if flood_seconds else None
    _say("connected")
    said: set[str] = set()
    arrivals_read = 0
    roster: list[dict] = []
    try:
        while True:
            for a in range(arrivals_read, store.add(key(keys.ARRIVALS), 0)):
                if not has_key(store, key(keys.NODE, a)):
                    break
                arrivals_read = a + 1
                _say("arrival", a, _hostname(store.get(key(keys.NODE, a))))
            if not roster and has_key(store, key(keys.ROSTER)):
                roster = json.loads(store.get(key(keys.ROSTER)))["entries"]
                _say("roster", " ".join(f"{e['rank']}={e['hostname']}@{e['arrival']}" for e in roster))
            for name, field, word in WATCHED:
                for i in (e[field] for e in roster):
                    if f"{name}/{i}" not in said and has_key(store, key(name, i)):
                        said.add(f"{name}/{i}")
                        _say(word, i)
                        if flood and name == keys.MESH_OFFER:
                            _say("flooding", i, flood.start(json.loads(store.get(key(name, i)))))
            time.sleep(POLL)
    except (RuntimeError, OSError) as e:  # the host's store went away
        _say("gone", type(e).__name__, str(e).strip().splitlines()[0][:300] if str(e).strip() else "")
    if flood:
        _say("flooded", flood.stop())


def _hostname(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["hostname"]).split()[0] or "?"
    except (ValueError, KeyError, TypeError, IndexError):
        return "?"


class _Flood:
    """Connections to mesh listeners: 100 held open per candidate that never send a byte,
    and 4 threads per candidate connecting and closing as fast as they can."""

    HELD, CHURN = 100, 4

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.until: float | None = None
        self.counts = {"held": 0, "churned": 0, "failed": 0}
        self.held: list[socket.socket] = []

    def start(self, offer: dict) -> str:
        """Starts the flood on threads and returns at once: the watch loop must see the next
        node's offer while the mesh is still open."""
        self.until = self.until or time.monotonic() + self.seconds
        for c in offer["candidates"]:
            target = (c["address"], c["port"])
            threading.Thread(target=self._hold, args=(target,), daemon=True).start()
            for _ in range(self.CHURN):
                threading.Thread(target=self._churn, args=(target,), daemon=True).start()
        return json.dumps(self.counts)

    def _hold(self, target: tuple[str, int]) -> None:
        for _ in range(self.HELD):
            self._connect(target, "held", keep=True)

    def _connect(self, target: tuple[str, int], counter: str, keep: bool = False) -> None:
        try:
            sock = socket.create_connection(target, timeout=1.0)
            self.counts[counter] += 1
            self.held.append(sock) if keep else sock.close()
        except OSError:
            self.counts["failed"] += 1
            time.sleep(0.01)

    def _churn(self, target: tuple[str, int]) -> None:
        while time.monotonic() < self.until:
            self._connect(target, "churned")

    def stop(self) -> str:
        self.until = 0.0
        for sock in self.held:
            sock.close()
        return json.dumps(self.counts)


# Hostile store writes. Each returns what it did in a few words.

def _bump_and_write(store, key: _Keys, value: bytes) -> int:
    arrival = store.add(key(keys.ARRIVALS), 1) - 1
    store.set(key(keys.NODE, arrival), value)
    return arrival


OVERSIZED_BYTES = 4 << 20   # over netcheck's 1 MiB limit, under the store's own 8 MiB
HUGE_BYTES = 64 << 20       # over the store's own limit


def _facts_of(size: int) -> bytes:
    return b'{"hostname": "' + b"x" * size + b'"}'


def hostile_oversized(store, key: _Keys) -> str:
    """A value over netcheck's limit as a node's facts: counted as an arrival, then rejected."""
    return f"arrival {_bump_and_write(store, key, _facts_of(OVERSIZED_BYTES))}: {OVERSIZED_BYTES} bytes"


def hostile_huge(store, key: _Keys) -> str:
    """64 MiB as a node's facts, on a connection of its own: TCPStore itself refuses values
    over 8 MiB and drops the connection, so the host never holds them."""
    try:
        _bump_and_write(_store(f"{store.host}:{store.port}"), key, _facts_of(HUGE_BYTES))
    except (RuntimeError, OSError) as e:
        return f"{HUGE_BYTES} bytes refused by the store: {str(e).splitlines()[0][:80]}"
    return f"{HUGE_BYTES} bytes accepted by the store"


def hostile_schema(store, key: _Keys) -> str:
    """Small JSON of another shape: a facts schema this netcheck does not know."""
    doc = {"schema": "netcheck.facts/999", "run_id": key.run_id, "hostname": 42, "launch": "x"}
    return f"arrival {_bump_and_write(store, key, json.dumps(doc).encode())}: wrong schema"


def hostile_notjson(store, key: _Keys) -> str:
    pickled = b"\x80\x04\x95 a pickle header, never to be unpickled \x00\xff"
    return f"arrival {_bump_and_write(store, key, pickled)}: not JSON"


def hostile_foreign(store, key: _Keys) -> str:
    """A visitor of another run, with that run's own keys written beside ours."""
    other = _Keys("intruder-run")
    visitor = store.add(key(keys.VISITORS, shared=True), 1) - 1
    store.set(key(keys.VISITOR, visitor, shared=True),
              json.dumps({"run_id": other.run_id, "hostname": "intruder", "node_rank": 0}))
    store.add(other(keys.ARRIVALS), 1)
    store.set(other(keys.NODE, 0), json.dumps({"hostname": "intruder"}))
    return f"visitor {visitor}: run id {other.run_id}"


def hostile_unwritten(store, key: _Keys) -> str:
    """An arrival counted and never written: the nodes after it must still be read."""
    return f"arrival {store.add(key(keys.ARRIVALS), 1) - 1}: counted, never written"


def hostile_arrivals(store, key: _Keys) -> str:
    """The arrivals counter pushed by 10,000: the nodes after it used to be unreadable."""
    return f"arrivals counter at {store.add(key(keys.ARRIVALS), 10_000)}"


PINGS_FLOOD = (4, 4 << 20)   # appends of this many bytes each: past MAX_PINGS_BYTES, under the store's limit


def hostile_pings(store, key: _Keys) -> str:
    """The shared pings list grown by megabytes: the host used to re-read it on every poll."""
    count, size = PINGS_FLOOD
    for _ in range(count):
        store.append(key(keys.PINGS, shared=True), "9/9," * (size // 4))
    return f"{count} x {size >> 20} MiB appended to the pings list"


STRANGERS = 100


def hostile_strangers(store, key: _Keys) -> str:
    """Visitor records of many other runs: counted and summarised, not one finding each."""
    for i in range(STRANGERS):
        visitor = store.add(key(keys.VISITORS, shared=True), 1) - 1
        store.set(key(keys.VISITOR, visitor, shared=True),
                  json.dumps({"run_id": f"stranger-run-{i % 4}", "hostname": f"stranger{i}", "node_rank": None}))
    return f"{STRANGERS} visitors of 4 other runs"


def hostile_replay(store, key: _Keys) -> str:
    """--token: the first arrival's signed facts, MAC and all, copied under a new arrival
    (a ghost seat): the MAC binds the key, so the copy is refused."""
    store.wait([key(keys.NODE, 0), key(keys.NODE, 0) + keys.MAC_SUFFIX])
    ghost = store.add(key(keys.ARRIVALS), 1) - 1
    for suffix in ("", keys.MAC_SUFFIX):
        store.set(key(keys.NODE, ghost) + suffix, store.get(key(keys.NODE, 0) + suffix))
    return f"arrival {ghost}: a copy of arrival 0"


def hostile_impersonate(store, key: _Keys) -> str:
    """Without --token: an arrival number taken before the next node comes, then that node's
    facts copied under it byte for byte the moment they are there: the copy holds the lower
    number, so a host that reads both in one poll reads the copy first."""
    mine = store.add(key(keys.ARRIVALS), 1) - 1
    _say("took arrival", mine)   # the test starts the node now: it takes the next number
    theirs = key(keys.NODE, mine + 1)
    store.wait([theirs])
    store.set(key(keys.NODE, mine), store.get(theirs))
    return f"arrival {mine}: a copy of arrival {mine + 1}"


def hostile_counters(store, key: _Keys) -> str:
    """The shared visitor counter pushed a million past any real cluster."""
    return f"visitor counter at {store.add(key(keys.VISITORS, shared=True), 1_000_000)}"


INT64_MAX = (1 << 63) - 1


def hostile_push(store, key: _Keys) -> str:
    """Both shared counters pushed once by 10,000 before a node comes: its numbers come from
    past the push (the host used to answer pings only from visitor numbers below 10,000)."""
    return (f"visitors at {store.add(key(keys.VISITORS, shared=True), 10_000)}, "
            f"arrivals at {store.add(key(keys.ARRIVALS), 10_000)}")


def hostile_push_max(store, key: _Keys) -> str:
    """Both counters pushed to int64's maximum: the next node's own add() wraps negative."""
    said = []
    for counter in (key(keys.VISITORS, shared=True), key(keys.ARRIVALS)):
        said.append(f"{counter} at {store.add(counter, INT64_MAX - store.add(counter, 0))}")
    return ", ".join(said)


def hostile_set(store, key: _Keys) -> str:
    """One set() each on both counters ("x": torch's store closes the connection of whoever
    add()s to it next), the host's hello and the roster (before the host posts its own)."""
    written = (key(keys.VISITORS, shared=True), key(keys.ARRIVALS), key(keys.HOST, shared=True), key(keys.ROSTER))
    for k in written:
        store.set(k, "x")
    return "x under " + " ".join(written)


def hostile_replay_hello(store, key: _Keys) -> str:
    """--token: a hello of an earlier run of this id and token (as one saved from it would be:
    signed by that run's host under that run's nonce, made here with the token in
    $NETCHECK_TOKEN) written over this host's hello before the next node comes."""
    from netcheck.cluster.store import Exchange
    from netcheck.core.deadline import Deadline

    store.wait([key(keys.HOST, shared=True)])   # over it, not before it
    earlier = Exchange(store, key.run_id, os.environ["NETCHECK_TOKEN"], end=Deadline(60))
    earlier.signer.adopt("0" * 32)
    earlier.put(earlier.key(keys.HOST), Hello(key.run_id, "node0", "earlier", earlier.signer.nonce))
    return f"a hello signed under nonce {earlier.signer.nonce}"


BIG_VISITORS = (300, 1 << 20)   # foreign visitor records of a MiB each: 300 MiB the host's store held


def hostile_big_visitors(store, key: _Keys) -> str:
    """Visitor records far over a visitor record's size: refused by the host, which used to
    keep them in its store all the same (its memory)."""
    count, size = BIG_VISITORS
    for _ in range(count):
        store.set(key(keys.VISITOR, store.add(key(keys.VISITORS, shared=True), 1) - 1, shared=True), "x" * size)
    return f"{count} visitor records of {size >> 20} MiB"


LIVE_FLOOD_BYTES = (8 << 20) - (64 << 10)   # one append just under the store's 8 MiB request limit


def hostile_flood_pings(store, key: _Keys) -> str:
    """Appends of 8 MiB to the shared pings list without pause, on a thread and a connection
    of their own, until the agent is killed: the host used to clear the list unread whenever
    it grew past 1 MiB, and with it the nodes' own pings, every time."""
    flooder = _store(f"{store.host}:{store.port}")
    junk = "9/9," * (LIVE_FLOOD_BYTES // 4)

    def flood():
        while True:
            flooder.append(key(keys.PINGS, shared=True), junk)

    threading.Thread(target=flood, daemon=True).start()
    return f"appending {LIVE_FLOOD_BYTES >> 20} MiB at a time to the pings list"


def hostile_garbage(endpoint: str) -> str:
    """Bytes that are no TCPStore request, on three connections."""
    host, port = endpoint.rsplit(":", 1)
    sent = 0
    for payload in (os.urandom(64 << 10), b"\xff" * 4096, b"GET / HTTP/1.0\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            try:
                s.sendall(payload)
                sent += len(payload)
                s.settimeout(1.0)
                s.recv(1024)
            except OSError:
                pass
    return f"{sent} bytes on 3 connections"


SILENT_CONNECTIONS = 20


def hold_silent(endpoint: str) -> list[socket.socket]:
    """Connections that open and never send a byte; held until the agent is killed."""
    host, port = endpoint.rsplit(":", 1)
    return [socket.create_connection((host, int(port)), timeout=5) for _ in range(SILENT_CONNECTIONS)]


def _ghost(host: dict, i: int, launch: dict) -> dict:
    """The host's facts as arrival i of a client that is no netcheck node: renamed, under
    `launch`, with a process token of its own (it draws them, as a copier would not)."""
    return {**host, "hostname": f"ghost{i}", "instance": f"ghost{i}", "launch": launch}


BIG_ARRIVALS = (200, 1 << 20)   # arrivals past --nnodes, of about a MiB of facts each: 404 MB the host kept


def hostile_big_arrivals(store, key: _Keys) -> str:
    """Arrivals of valid-looking facts (the host's own, renamed and padded to about a MiB, the
    facts' limit) claiming node ranks past --nnodes: never to be seated, and the host used to
    keep every one whole until the roster, in its memory and its store's."""
    store.wait([key(keys.NODE, 0)])
    host = json.loads(store.get(key(keys.NODE, 0)))
    past, (count, size) = host["launch"]["nnodes_max"], BIG_ARRIVALS
    for i in range(count):
        doc = _ghost(host, i, {**host["launch"], "node_rank": past + i})
        doc["socket_env"] = {**host["socket_env"], "NCCL_DEBUG_FILE": ""}
        doc["socket_env"]["NCCL_DEBUG_FILE"] = "x" * (size - len(json.dumps(doc)) - 4096)  # under the limit
        _bump_and_write(store, key, json.dumps(doc).encode())
    return f"{count} arrivals of {size >> 20} MiB claiming node ranks {past} to {past + count - 1}"


LATE_ARRIVALS = 200   # of the host's own facts, renamed: a few KiB each, all read in one poll of the host's


def hostile_late_arrivals(store, key: _Keys) -> str:
    """LATE_ARRIVALS arrivals counted in after the roster: latecomers, which the host used to
    keep whole, one finding each. A run's last poll comes under a second after its roster:
    so the facts are written first, under the arrival numbers past the run's --nnodes seats
    (one per honest node), which the counter has not reached yet (the host reads only what
    is counted), and counted in by one add() once the roster is out. Not padded: the host
    reads half a second of arrivals per poll, under ten of a MiB each."""
    store.wait([key(keys.NODE, 0)])
    host = json.loads(store.get(key(keys.NODE, 0)))
    seats = host["launch"]["nnodes_max"]
    for i in range(LATE_ARRIVALS):
        doc = _ghost(host, i, {**host["launch"], "node_rank": seats + i})
        store.set(key(keys.NODE, seats + i), json.dumps(doc).encode())
    _say("written")
    store.wait([key(keys.ROSTER)])
    counted = store.add(key(keys.ARRIVALS), LATE_ARRIVALS)
    return f"{LATE_ARRIVALS} arrivals counted in after the roster (the counter at {counted})"


OUTVOTERS = 16   # arrivals past --nnodes kept whole (MAX_STRANGERS): eight times the honest nodes' votes


def hostile_outvote(store, key: _Keys) -> str:
    """Arrivals of the host's own facts, renamed, claiming node ranks past --nnodes and
    saying another --nnodes and --nproc-per-node: never seated, but kept whole (the first
    MAX_STRANGERS are) for the launch checks, where they used to outvote the honest nodes."""
    store.wait([key(keys.NODE, 0)])
    host = json.loads(store.get(key(keys.NODE, 0)))
    past, nnodes = host["launch"]["nnodes_max"], 2 * OUTVOTERS
    launch = {**host["launch"], "nnodes_min": nnodes, "nnodes_max": nnodes,
              "nproc_per_node": host["launch"]["nproc_per_node"] + 3}
    for i in range(OUTVOTERS):
        doc = _ghost(host, i, {**launch, "node_rank": past + i})
        _bump_and_write(store, key, json.dumps(doc).encode())
    return f"{OUTVOTERS} arrivals claiming node ranks {past} to {past + OUTVOTERS - 1} of --nnodes {nnodes}"


HOSTILE = {"oversized": hostile_oversized, "huge": hostile_huge, "schema": hostile_schema,
           "notjson": hostile_notjson, "foreign": hostile_foreign, "unwritten": hostile_unwritten,
           "counters": hostile_counters, "arrivals": hostile_arrivals, "pings": hostile_pings,
           "strangers": hostile_strangers, "replay": hostile_replay, "push": hostile_push,
           "push-max": hostile_push_max, "set": hostile_set, "replay-hello": hostile_replay_hello,
           "flood-pings": hostile_flood_pings, "big-visitors": hostile_big_visitors,
           "big-arrivals": hostile_big_arrivals, "outvote": hostile_outvote,
           "late-arrivals": hostile_late_arrivals, "impersonate": hostile_impersonate}


def hostile(endpoint: str, run_id: str, actions: list[str]) -> None:
    """Do the actions once the host's store answers; `roster` and `seated` wait for that key
    first, `connects=N` connects N times to the port (plain_connects). Says `did ACTION ...`
    for each and `done` at the end, then holds on until killed."""
    store, key = _store(endpoint), _Keys(run_id)
    store.wait([key(keys.HOST, shared=True)])
    held = []
    for action in actions:
        if action == "roster":
            store.wait([key(keys.ROSTER)])
            _say("roster")
        elif action == "seated":  # the host has posted who is seated
            _say("waiting for the seats")
            store.wait([key(keys.SEATED)])
            _say("seated")
        elif action.startswith("connects="):
            _say("did connects", plain_connects(endpoint, int(action.partition("=")[2])))
        elif action == "garbage":
            _say("did garbage", hostile_garbage(endpoint))
        elif action == "silent":
            held += hold_silent(endpoint)
            _say("did silent", f"{len(held)} connections open, nothing sent")
        else:
            _say("did", action, HOSTILE[action](store, key))
    _say("done")
    while True:  # the silent connections stay open; the test kills the agent
        time.sleep(1)


def stall(endpoint: str, run_id: str, node_rank: int, nnodes: int) -> None:
    """A node that takes its seat with netcheck's own rendezvous and posts its result, then
    stops taking part: it never offers its mesh listeners. Says `seated RANK`, then holds on
    until killed (its store connection stays open, as a hung process's would)."""
    from netcheck.cluster.rendezvous import join
    from netcheck.core.deadline import Deadline
    from netcheck.core.model import Launch
    from netcheck.facts.local import gather_facts

    facts = gather_facts(run_id, Launch("flags", node_rank, nnodes, nnodes, 1))
    seat, _ = join(_store(endpoint), facts, Deadline(60), Deadline(60))
    _say("seated", seat.rank)
    while True:
        time.sleep(1)


def bad_facts(endpoint: str, run_id: str, node_rank: int, nnodes: int) -> None:
    """A node that signs in as itself (its visitor record names it and the rank it claims)
    and publishes its facts with a NUL in an address: the host refuses them, and must name
    this node as their sender, not as one that never reached the store. Says `published A`,
    then holds on until killed."""
    from netcheck.cluster import rendezvous
    from netcheck.cluster.store import Exchange
    from netcheck.core import codec
    from netcheck.core.deadline import Deadline
    from netcheck.core.model import Launch
    from netcheck.facts.local import gather_facts

    facts = gather_facts(run_id, Launch("flags", node_rank, nnodes, nnodes, 1))
    store, key = _store(endpoint), _Keys(run_id)
    ex = Exchange(store, run_id, end=Deadline(60))
    rendezvous.sign_in(ex, facts)
    rendezvous.check_run_id(ex, Deadline(60))
    spoilt = json.loads(codec.dumps(facts))
    spoilt["hostname_addresses"] = ["198.18.0.11\u0000"]
    _say("published", _bump_and_write(store, key, json.dumps(spoilt).encode()))
    while True:
        time.sleep(1)


def nameserver(slow_address: str, delay: float) -> None:
    """A nameserver on UDP 53 that answers every query at once with NXDOMAIN, but the reverse
    zone of one address late (after `delay` s, under the resolver's 5 s): a zone its owner
    makes stall. A late answer is still an answer, so glibc's getnameinfo succeeds (with the
    number) and torch's store never stops asking. Says `serving`, then one `query NAME`
    per query, until killed."""
    zone = ".".join(reversed(slow_address.split("."))) + ".in-addr.arpa"
    for sock, query, asker, name, end in _queries():
        late = delay if name.lower() == zone else 0.0
        threading.Timer(late, sock.sendto, (_nxdomain(query, end), asker)).start()


def late_nameserver(records: str, delay: float) -> None:
    """A nameserver on UDP 53 that answers every query, each `delay` s late (under the
    resolver's timeout, so every lookup succeeds, slowly): an A record for each NAME=ADDRESS of
    `records` (comma-separated), no record of another type for those names, "no such name"
    for any other (reverse zones included). Says `serving`, then `query NAME` per query."""
    known = dict(pair.split("=", 1) for pair in records.split(",") if pair)
    for sock, query, asker, name, end in _queries():
        qtype = int.from_bytes(query[end - 4:end - 2], "big")
        address = known.get(name.lower())
        if address is None:
            answer = _nxdomain(query, end)
        elif qtype == 1:   # A
            answer = (query[:2] + b"\x81\x80" + b"\x00\x01\x00\x01\x00\x00\x00\x00" + query[12:end]
                      + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + socket.inet_aton(address))
        else:              # the name exists, with no record of that type
            answer = query[:2] + b"\x81\x80" + b"\x00\x01\x00\x00\x00\x00\x00\x00" + query[12:end]
        threading.Timer(delay, sock.sendto, (answer, asker)).start()


def _queries():
    """(socket, query, asker, name, where its question ends) of each query to a nameserver on
    UDP 53, said as `query NAME` once `serving` was."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 53))
    _say("serving")
    while True:
        query, asker = sock.recvfrom(512)
        name, end = _question(query)
        _say("query", name)
        yield sock, query, asker, name, end


def _question(query: bytes) -> tuple[str, int]:
    """The name a DNS query asks about, and where its question ends."""
    at, labels = 12, []
    while at < len(query) and query[at]:
        labels.append(query[at + 1:at + 1 + query[at]].decode(errors="replace"))
        at += 1 + query[at]
    return ".".join(labels), at + 5


def _nxdomain(query: bytes, end: int) -> bytes:
    """The answer "no such name" to a query: its id, response flags with rcode 3, its question."""
    return query[:2] + b"\x81\x83" + b"\x00\x01\x00\x00\x00\x00\x00\x00" + query[12:end]


def plain_connects(endpoint: str, count: int) -> int:
    """`count` connects to the port, each closed at once (no byte sent); how many were taken."""
    host, port = endpoint.rsplit(":", 1)
    made = 0
    for _ in range(count):
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            made += 1
        except OSError:
            pass
    return made


def connects(endpoint: str, count: int) -> None:
    """A stranger: once the host's store answers, `count` plain connects to its port, each
    closed at once (no byte sent), then a store client of its own: the store accepts in
    order, so it answers once the store has dealt with every connect before it. Says
    `connected N`, then `answered`, then holds on until killed."""
    _store(endpoint)
    _say("connected", plain_connects(endpoint, count))
    has_key(_store(endpoint), ROOT)
    _say("answered")
    while True:
        time.sleep(1)


def _main(argv: list[str]) -> None:
    command, endpoint, run_id, *rest = argv
    if command == "watch":
        watch(endpoint, run_id, float(rest[1]) if rest[:1] == ["--flood"] else None)
    elif command == "hostile":
        hostile(endpoint, run_id, rest[0].split(","))
    elif command == "stall":
        stall(endpoint, run_id, int(rest[0]), int(rest[1]))
    elif command == "badfacts":
        bad_facts(endpoint, run_id, int(rest[0]), int(rest[1]))
    elif command == "nameserver":
        nameserver(rest[0], float(rest[1]))
    elif command == "late-nameserver":
        late_nameserver(rest[0], float(rest[1]))
    elif command == "connects":
        connects(endpoint, int(rest[0]))
    else:
        raise SystemExit(f"unknown command {command}")


# ---------------------------------------------------------------------------------------
# the tests' side

class Agent:
    """An agent process in a node; its lines are read on a thread so waits have deadlines."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    @classmethod
    def start(cls, c, i: int, command: str, endpoint: str, *rest: str, run_id: str = "netcheck",
              env: dict | None = None) -> "Agent":
        # A new interpreter, not a fork: a forked watcher twice sat in torch's store client for
        # 80 s without a word, in full suites only (cause not found; exec'd, never).
        return cls(c.popen(i, [sys.executable, str(Path(__file__).resolve()), command, endpoint, run_id, *rest],
                           env=env))

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # EOF

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match:
        """The first line from now on that matches `pattern` (a regex), within `timeout`."""
        end = time.monotonic() + timeout
        regex = re.compile(pattern)
        while (left := end - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self.lines.put(None)
                break
            self.seen.append(line)
            if m := regex.search(line):
                return m
        raise AssertionError(f"agent: no line matching {pattern!r} within {timeout} s; it said "
                             f"{self.seen}; stderr: {self._stderr()}")

    def wait_for_all(self, patterns: list[str], timeout: float = 30.0) -> None:
        """Lines matching every one of `patterns`, in any order, within `timeout`."""
        end = time.monotonic() + timeout
        left = list(patterns)
        while left:
            line = self.wait_for("|".join(f"(?:{p})" for p in left), end - time.monotonic()).string
            left = [p for p in left if not re.search(p, line)]

    def roster(self, timeout: float = 30.0) -> dict[str, tuple[int, int]]:
        """hostname -> (rank, arrival), once the host has posted the roster."""
        line = self.wait_for(r"^roster ", timeout).string
        return {h: (int(r), int(a)) for r, h, a in re.findall(r"(\d+)=(\S+)@(\d+)", line)}

    def _stderr(self) -> str:
        return "(still running)" if self.proc.poll() is None else self.proc.stderr.read()[-2000:]


def arrival_args(timeout: float, join_window: float) -> list[str]:
    """No ranks: nodes are numbered as they arrive and the host waits for a quiet window."""
    return ["--rdzv", f"node0:{PORT}", "--join-window", str(join_window), "--timeout", str(timeout)]


def counted_args(n: int, timeout: float) -> list[str]:
    """--nnodes without ranks: numbered as they arrive, and the host closes once all n are
    in (an event, whatever the machine's speed), not after a quiet window."""
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--timeout", str(timeout)]


def ranked_args(i: int, n: int, timeout: float) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(timeout)]


def nodes(n: int) -> list[NodeSpec]:
    return [NodeSpec() for _ in range(n)]


def slow_mesh(c, host: int = 0, address: str = "198.19.7.1", peers: tuple[int, ...] | None = None) -> None:
    """Keep every node in the mesh for the connect timeout (2 s): the host gets a bridge
    (docker7, which NCCL skips) whose address the others route to, and drops the SYNs to
    it, so each peer's connect to that candidate waits out its deadline. Faults then land
    while the mesh runs, whatever the machine's speed."""
    c.add_decoy(host, "docker7", f"{address}/32")
    c.run(host, ["iptables", "-w", "-A", "INPUT", "-d", address, "-p", "tcp", "--syn", "-j", "DROP"], 10)
    for i in range(len(c.nodes)) if peers is None else peers:
        if i != host:
            c.run(i, ["ip", "route", "add", f"{address}/32", "via", c.nodes[host].addr], 10)


def opened_under(pid: int, folder: str) -> bool:
    """Whether the process has a file under `folder` open (as its mount namespace names it)."""
    try:
        return any(f.path.startswith(folder) for f in psutil.Process(pid).open_files())
    except psutil.NoSuchProcess:
        return False


def dropped_from(c, i: int) -> dict[str, int]:
    """Packets node i's firewall has dropped so far, by source address (iptables counters)."""
    out = subprocess.run(["ip", "netns", "exec", c.nodes[i].ns, "iptables", "-L", "INPUT", "-v", "-x", "-n"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines()[2:] if line.split()[2:3] == ["DROP"]]
    return {r[7]: int(r[0]) for r in rows}


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02):
    """Poll `predicate` until it returns something true; fail the test after `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := predicate():
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s")


def finish_each(runs, timeout: float):
    """Wait for every run, each timed when it ends rather than when the test gets to it;
    a run still going after `timeout` is killed and fails the test as a hang."""
    end = time.monotonic() + timeout
    pending = list(runs)
    while pending and time.monotonic() < end:
        for run in [r for r in pending if r.proc.poll() is not None]:
            finish(run, 10)
            pending.remove(run)
        time.sleep(0.05)
    for run in pending:
        run.proc.kill()
        run.stderr = run.proc.communicate()[1] or "\n".join(run.progress)
        raise AssertionError(f"netcheck on node{run.node} still ran {timeout} s after the test "
                             f"began waiting for it: a hang\n{run.stderr[-3000:]}")
    return runs


def signal_and_finish(c, run, sig: int, within: float):
    """Send `sig` to a node's netcheck and wait for it to end, which must take under `within` s."""
    sent = time.monotonic()
    c.kill(run.proc, sig)
    finish_each([run], within)
    return time.monotonic() - sent


class PeakMemory:
    """The high-water mark of a process's resident memory (VmHWM), sampled on a thread
    until the process ends; the last sample holds the peak of its whole life."""

    def __init__(self, proc: subprocess.Popen):
        # A fork's high-water mark starts at its parent's: only a fresh process has its own.
        assert not isinstance(proc, ForkedNetcheck), "a process whose memory is measured must be started fresh"
        self.pid, self.peak = proc.pid, 0
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            if m := re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE):
                self.peak = max(self.peak, int(m[1]) << 10)
            time.sleep(0.1)


def lost_in(report: dict) -> dict[str, set[int]]:
    """phase -> the ranks a report names lost in it (rdzv.join, kind lost_in_PHASE)."""
    out: dict[str, set[int]] = {}
    for f in report["findings"]:
        if f["check"] == "rdzv.join" and f["kind"].startswith("lost_in_"):
            out.setdefault(f["kind"].removeprefix("lost_in_"), set()).update(f["nodes"])
    return out


def assert_survivor(run, timeout: float, codes: tuple[int, ...] = (4,)) -> dict:
    """A node that was not the fault's target: it ended on its own within --timeout + GRACE,
    with an expected exit code (by default 4: another node is at fault), no traceback, no
    internal error, and a valid JSON report."""
    detail = f"node{run.node} rc={run.rc} after {run.seconds:.1f} s\n{run.stdout}\n{run.stderr}"
    assert run.seconds <= timeout + GRACE, detail
    assert run.rc in codes, detail
    assert "Traceback" not in run.stderr, detail
    report = run.report  # validated against the schema
    assert not [f for f in report["findings"] if f["check"] == "run.internal"], detail
    return report


def assert_interrupted(run, phase: str) -> dict:
    """Ctrl-C: the report so far on stdout and in the JSON, exit 130, no traceback."""
    detail = f"node{run.node} rc={run.rc}\n{run.stdout}\n{run.stderr}"
    assert run.rc == 130 and "Traceback" not in run.stderr, detail
    assert "interrupted" in run.stderr and "verdict" in run.stdout, detail
    report = run.report
    assert report["unfinished"] == phase and phase in report["timings"], report
    assert_stopped(report, "sigint")
    return report


def assert_stopped(report: dict, kind: str) -> None:
    """A run a signal ended is a fail, and says so under run.stopped, naming its phase."""
    stopped = [f for f in report["findings"] if f["check"] == "run.stopped"]
    assert report["verdict"] == "fail" and [f["kind"] for f in stopped] == [kind], report["findings"]
    assert report["unfinished"] is None or report["unfinished"] in stopped[0]["summary"], stopped


# ---------------------------------------------------------------------------------------
# the fault log: one JSON line per fault case, rendered by scripts/fault_table.py

def record(fault: str, phase: str, timeout: float, runs, roles: dict[int, str],
           focus: str | None = None) -> None:
    """Append what every node reported in one fault case to $NETCHECK_FAULT_LOG, if set.

    `roles` names each node's part ("host", "joiner", "victim: SIGKILL at arrival", ...).
    Every warning and failure is kept; with `focus` (a regex), only those whose check,
    summary or evidence match it, the others counted.
    """
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    entry = {"fault": fault, "phase": phase, "timeout": timeout, "grace": GRACE,
             "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
             "nodes": [_node_entry(r, roles.get(r.node, ""), focus) for r in runs]}
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def _node_entry(run, role: str, focus: str | None) -> dict:
    entry = {"node": f"node{run.node}", "role": role, "rc": run.rc, "seconds": round(run.seconds, 1)}
    try:
        report = json.loads(run.json_path.read_text())
    except (OSError, ValueError):
        return {**entry, "report": False, "findings": [], "other_findings": 0}
    raised = [f for f in report["findings"] if f["severity"] != "pass"]
    shown = [f for f in raised if focus is None
             or re.search(focus, " ".join([f["check"], f["summary"], *f["evidence"]]))]
    return {**entry, "report": True, "rank": report["node_rank"], "unfinished": report["unfinished"],
            "findings": [[f["check"], f["severity"], f["summary"], *f["evidence"][:1]] for f in shown],
            "other_findings": len(raised) - len(shown)}


if __name__ == "__main__":
    _main(sys.argv[1:])


LOCAL_STORE = f"127.0.0.1:{PORT}"   # the host's store, as a watch agent on the host's node reaches it


def start_watched(c, count: int, args, tmp) -> tuple[dict[int, NodeRun], "Agent"]:
    """Nodes 0..count-1 started with `args` (the same for all, or a function of the node), and
    a watch agent on the host's store: every fault case's opening."""
    runs = {i: start(c, i, args(i) if callable(args) else args, tmp) for i in range(count)}
    return runs, Agent.start(c, 0, "watch", LOCAL_STORE)

