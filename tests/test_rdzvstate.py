"""torchrun's rendezvous state decoded without trusting it: real states pickled by torch's own
classes come out whole at every protocol; anything else, and every field out of range, is a
ForeignValue (a HostileValue where it asks for code), never executed, never a traceback.

(The decoder's own bounds, corpus and fuzzers: tests/test_pickled.py.)"""

from __future__ import annotations

import base64
import datetime
import os
import pickle
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

from netcheck.core.constants import MAX_NODES
from netcheck.core.jobrecords import NodeDesc
from netcheck.facts.rdzvstate import NULL_SENTINEL, ForeignValue, HostileValue, decode_state
from nodes import scaled

LIMIT = 1 << 20
UTC = datetime.timezone.utc


def encoded(value, protocol: int = pickle.DEFAULT_PROTOCOL) -> bytes:
    return base64.b64encode(pickle.dumps(value, protocol=protocol))


def real_state() -> _RendezvousState:
    state = _RendezvousState()
    a, b, c = _NodeDesc("node0.cluster", 101, 0), _NodeDesc("node1.cluster", 202, 0), _NodeDesc("node5", 9, 1)
    state.round, state.complete = 3, False
    state.deadline = datetime.datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
    state.participants = {a: 0, b: 1}
    state.wait_list = {c}
    state.last_heartbeats = {a: datetime.datetime(2026, 12, 1, 8, 0, 0, tzinfo=UTC),
                             b: datetime.datetime(2026, 12, 1, 7, 59, 0, tzinfo=UTC)}
    return state


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])  # torch writes pickle.DEFAULT_PROTOCOL: 4, 5 from Python 3.14
def test_a_state_pickled_by_torch_decodes_whole(protocol):
    view = decode_state(encoded(real_state(), protocol), "job7", LIMIT)
    a, b = NodeDesc("node0.cluster", 101, 0), NodeDesc("node1.cluster", 202, 0)
    assert (view.run_id, view.round, view.complete, view.closed) == ("job7", 3, False, False)
    assert view.deadline == "2026-12-01T08:00:30+00:00"
    assert view.participants == ((a, 0), (b, 1))
    assert view.wait_list == (NodeDesc("node5", 9, 1),) and view.redundancy_list == ()
    assert view.last_heartbeats == ((a, "2026-12-01T08:00:00+00:00"), (b, "2026-12-01T07:59:00+00:00"))


@pytest.mark.parametrize("protocol", [0, 1])
def test_the_text_protocols_no_torch_writes_are_foreign(protocol):
    with pytest.raises(ForeignValue, match="protocol 2 or later") as caught:
        decode_state(encoded(real_state(), protocol), "job7", LIMIT)
    assert not isinstance(caught.value, HostileValue)


def big_state(nodes: int) -> _RendezvousState:
    state = _RendezvousState()
    descs = [_NodeDesc(f"node{i:05d}.a-long-cluster-name.example.com", 100_000 + i, 0) for i in range(nodes)]
    state.round, state.deadline = 12_345, datetime.datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
    state.participants = {d: rank for rank, d in enumerate(descs)}
    state.wait_list, state.redundancy_list = set(descs[:nodes // 10]), set(descs[-nodes // 10:])
    state.last_heartbeats = {d: datetime.datetime(2026, 12, 1, 8, 0, i % 60, i, tzinfo=UTC)
                             for i, d in enumerate(descs)}
    return state


@pytest.mark.parametrize("protocol", [2, 4])  # the most verbose, and torch's default
def test_a_state_of_max_nodes_decodes_within_the_limits(protocol):
    raw = encoded(big_state(MAX_NODES), protocol)
    start = time.process_time()   # CPU seconds: the decoder's work, not a busy machine's wall clock
    view = decode_state(raw, "job7", 16 << 20)
    assert time.process_time() - start < scaled(3)
    assert len(view.participants) == MAX_NODES and len(view.wait_list) == MAX_NODES // 10


def test_the_backends_empty_marker_is_no_state():
    assert decode_state(NULL_SENTINEL, "job7", LIMIT) is None


class Canary:
    """Creates a file when unpickled: proof of execution."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mknod, (self.path,))


@pytest.mark.parametrize("make", [
    lambda path: Canary(path),
    lambda path: {"participants": Canary(path)},                                # nested in a container
    lambda path: [real_state(), Canary(path)],
])
def test_a_pickle_that_would_run_code_is_refused_and_never_runs(tmp_path, make):
    canary = tmp_path / "canary"
    with pytest.raises(HostileValue, match="posix.mknod|os.mknod"):
        decode_state(encoded(make(str(canary))), "job7", LIMIT)
    assert not canary.exists()


def test_a_global_hidden_behind_an_allowed_module_name_is_refused():
    data = (b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x08datetime\x8c\x06sys.os\x93.")
    with pytest.raises(HostileValue):
        decode_state(base64.b64encode(data), "job7", LIMIT)


@pytest.mark.parametrize("raw,words", [
    (b"not base64 at all!", "not base64"),
    (base64.b64encode(b"\x80\x04garbage"), "not a pickle netcheck can read"),
    (encoded([1, 2, 3]), "a pickled list, not a rendezvous state"),
    (encoded({"round": 1}), "a pickled dict"),
])
def test_garbage_and_the_wrong_type_are_foreign(raw, words):
    with pytest.raises(ForeignValue, match=words) as caught:
        decode_state(raw, "job7", LIMIT)
    assert not isinstance(caught.value, HostileValue)


def test_a_state_with_the_wrong_field_types_is_foreign():
    state = real_state()
    state.participants = {"node0": "zero"}
    with pytest.raises(ForeignValue, match="rendezvous state holding a str"):
        decode_state(encoded(state), "job7", LIMIT)


def test_an_oversized_value_is_refused_before_decoding():
    with pytest.raises(ForeignValue, match="over the 1048576-byte limit"):
        decode_state(b"A" * (LIMIT + 4), "job7", LIMIT)


def with_fields(**fields) -> bytes:
    state = real_state()
    for name, value in fields.items():
        setattr(state, name, value)
    return encoded(state)


def with_node(addr="node9", pid=7, local_id=0) -> bytes:
    node = _NodeDesc.__new__(_NodeDesc)
    object.__setattr__(node, "addr", addr)
    object.__setattr__(node, "pid", pid)
    object.__setattr__(node, "local_id", local_id)
    return with_fields(wait_list={node})


@pytest.mark.parametrize("raw,words", [
    (with_fields(round=10**5000), "integer of 2077 bytes"),
    (with_fields(round=1 << 31), "round of 2147483648"),
    (with_fields(round=-1), "round of -1"),
    (with_fields(round="3"), "holding a str where torch keeps a round"),
    (with_fields(complete=1), "holding a int where torch keeps bool"),
    (with_fields(participants={_NodeDesc("node0", 1, 0): -1}), "rank of -1"),
    (with_node(pid=0), "pid of 0"),
    (with_node(pid=-5), "pid of -5"),
    (with_node(pid=(1 << 22) + 1), "pid of 4194305"),
    (with_node(local_id=-1), "local id of -1"),
    (with_node(addr="node1\nPASS job.rdzv"), "control characters"),
    (with_node(addr="\x1b[32mnode1"), "control characters"),
    (with_node(addr="node 1"), "spaces"),
    (with_node(addr="\u202enode1"), "control characters"),
    (with_node(addr=""), "0 characters"),
    (with_node(addr="n" * 256), "256 characters"),
    (with_node(addr=b"node1"), "holding a bytes where torch keeps an address"),
    (with_fields(wait_list=[_NodeDesc("node0", 1, 0)]), "holding a list where torch keeps a set"),
    (with_fields(last_heartbeats={_NodeDesc("node0", 1, 0): 5}), "holding a int where torch keeps a datetime"),
])
def test_a_field_out_of_range_is_foreign(raw, words):
    with pytest.raises(ForeignValue, match=words) as caught:
        decode_state(raw, "job7", LIMIT)
    assert not isinstance(caught.value, HostileValue) and "\n" not in str(caught.value)


@pytest.mark.parametrize("moment", [
    datetime.datetime.min.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=23, minutes=59))),
    datetime.datetime.max.replace(tzinfo=datetime.timezone(-datetime.timedelta(hours=23, minutes=59))),
])
def test_a_time_that_leaves_the_range_of_dates_in_utc_is_foreign(moment):
    with pytest.raises(ForeignValue, match="outside the range of dates"):
        decode_state(with_fields(deadline=moment), "job7", LIMIT)


def test_times_come_out_in_utc_and_a_naive_one_is_taken_as_utc():
    east = datetime.timezone(datetime.timedelta(hours=5, minutes=30), "IST")
    view = decode_state(with_fields(deadline=datetime.datetime(2026, 12, 1, 13, 30, tzinfo=east),
                                    last_heartbeats={_NodeDesc("node0", 1, 0): datetime.datetime(2026, 1, 1, 0, 0)}),
                        "job7", LIMIT)
    assert view.deadline == "2026-12-01T08:00:00+00:00"
    assert view.last_heartbeats[0][1] == "2026-01-01T00:00:00+00:00"


def test_a_state_without_a_field_is_foreign():
    state = real_state()
    del state.closed
    with pytest.raises(ForeignValue, match="without closed"):
        decode_state(encoded(state), "job7", LIMIT)


def test_build_on_the_state_class_is_hostile_and_poisons_no_later_decode():
    # The attack on the old unpickler: BUILD on the admitted class itself, so that a genuine
    # state decoded later (under another run id) read this value's fields.
    module, name = b"torch.distributed.elastic.rendezvous.dynamic_rendezvous", b"_RendezvousState"
    poison = (pickle.PROTO + b"\x04" + pickle.SHORT_BINUNICODE + bytes([len(module)]) + module
              + pickle.SHORT_BINUNICODE + bytes([len(name)]) + name + pickle.STACK_GLOBAL
              + pickle.EMPTY_DICT + pickle.MARK + pickle.SHORT_BINUNICODE + b"\x05round" + pickle.BININT1 + b"\x63"
              + pickle.SHORT_BINUNICODE + b"\x08complete" + pickle.NEWTRUE + pickle.SETITEMS
              + pickle.BUILD + pickle.STOP)
    with pytest.raises(HostileValue, match="change to the class"):
        decode_state(base64.b64encode(poison), "evil", LIMIT)
    view = decode_state(encoded(real_state()), "job7", LIMIT)
    assert (view.round, view.complete) == (3, False)


OFFSETS = st.timedeltas(-datetime.timedelta(hours=23, minutes=59), datetime.timedelta(hours=23, minutes=59))
MOMENTS = st.datetimes(timezones=st.none() | st.builds(datetime.timezone, OFFSETS))
ANY = (st.integers() | st.integers(-2, 1 << 32) | st.text(max_size=300) | st.binary(max_size=8) | st.none()
       | st.booleans() | st.floats() | MOMENTS | st.tuples(st.integers()))   # hashable: the node is a key
C_INT = st.integers(0, (1 << 31) - 1)
VALID = {"round": C_INT, "complete": st.booleans(), "deadline": st.none() | MOMENTS,
         "addr": st.text("abcdefghijklmnopqrstuvwxyz0123456789.-", min_size=1, max_size=255),
         "pid": st.integers(1, 1 << 22), "local_id": C_INT, "rank": C_INT, "heartbeat": MOMENTS}


@st.composite
def state_fields(draw) -> dict:
    """Valid fields but one (or none), which may be anything."""
    fuzzed = draw(st.sampled_from([*VALID, None]))
    return {name: draw(ANY if name == fuzzed else valid) for name, valid in VALID.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=state_fields(), protocol=st.sampled_from([2, 3, 4, 5]))
def test_any_field_values_decode_in_range_or_are_foreign(fields, protocol):
    node = _NodeDesc.__new__(_NodeDesc)
    for name in ("addr", "pid", "local_id"):
        object.__setattr__(node, name, fields[name])
    state = real_state()
    state.round, state.complete, state.deadline = fields["round"], fields["complete"], fields["deadline"]
    state.participants, state.last_heartbeats = {node: fields["rank"]}, {node: fields["heartbeat"]}
    try:
        view = decode_state(encoded(state, protocol), "job7", LIMIT)
    except ForeignValue as e:
        assert "\n" not in str(e)
        return
    (desc, rank), = view.participants
    assert 0 <= view.round < 1 << 31 and 0 <= rank < 1 << 31 and 0 < desc.pid <= 1 << 22
    assert desc.addr.isprintable() and " " not in desc.addr and len(desc.addr) <= 255
    assert view.last_heartbeats[0][1].endswith("+00:00")
