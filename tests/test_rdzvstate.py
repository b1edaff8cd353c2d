"""torchrun's rendezvous state decoded without trusting it: real states pickled by torch's own
classes come out whole; anything else is refused and never executed."""

from __future__ import annotations

import base64
import datetime
import os
import pickle

import pytest
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

from netcheck.core.jobrecords import NodeDesc
from netcheck.facts.rdzvstate import NULL_SENTINEL, ForeignValue, HostileValue, decode_state

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


@pytest.mark.parametrize("protocol", [4, 5])  # what torch writes (pickle.DEFAULT_PROTOCOL)
def test_a_state_pickled_by_torch_decodes_whole(protocol):
    view = decode_state(encoded(real_state(), protocol), "job7", LIMIT)
    a, b = NodeDesc("node0.cluster", 101, 0), NodeDesc("node1.cluster", 202, 0)
    assert (view.run_id, view.round, view.complete, view.closed) == ("job7", 3, False, False)
    assert view.deadline == "2026-12-01T08:00:30+00:00"
    assert view.participants == ((a, 0), (b, 1))
    assert view.wait_list == (NodeDesc("node5", 9, 1),) and view.redundancy_list == ()
    assert view.last_heartbeats == ((a, "2026-12-01T08:00:00+00:00"), (b, "2026-12-01T07:59:00+00:00"))


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
