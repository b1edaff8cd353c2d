"""torchrun's c10d rendezvous state, decoded without trusting it.

The c10d backend keeps the state under `torch.rendezvous.<run_id>` as base64 of a pickled
`_RendezvousState` (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py,
dynamic_rendezvous.py). The TCPStore has no authentication: whoever reaches the port can
plant a pickle that runs code in whoever loads it. So it is read by an unpickler that admits
only the state's own types, rebuilt as netcheck's stand-ins (torch is never imported),
`datetime`'s types and builtin containers; anything else is refused, never executed.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import io
import pickle

from netcheck.core.jobrecords import NodeDesc, RendezvousView

_RENDEZVOUS = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
# The c10d backend's marker for "no state yet" (c10d_rendezvous_backend._NULL_SENTINEL).
NULL_SENTINEL = b"Y2FuaW1hZGFt"


class ForeignValue(ValueError):
    """The value is not a rendezvous state netcheck can read; the message says what it is."""


class HostileValue(ForeignValue):
    """The value asks the unpickler for something a rendezvous state never holds: code."""


class _State:
    """Stand-in for _RendezvousState: pickle sets its attributes, nothing else runs."""


class _Node:
    """Stand-in for _NodeDesc (addr, pid, local_id)."""


_ALLOWED = {
    (_RENDEZVOUS, "_RendezvousState"): _State,
    (_RENDEZVOUS, "_NodeDesc"): _Node,
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "timezone"): datetime.timezone,
    ("datetime", "timedelta"): datetime.timedelta,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        allowed = _ALLOWED.get((module, name))
        if allowed is None:
            raise HostileValue(f"the pickle asks for {module}.{name}, which a rendezvous state never holds")
        return allowed

    def persistent_load(self, pid):
        raise HostileValue("the pickle asks for a persistent object")


def decode_state(raw: bytes, run_id: str, max_bytes: int) -> RendezvousView | None:
    """The state under torch.rendezvous.<run_id>; None when the backend holds none yet."""
    if len(raw) > max_bytes:
        raise ForeignValue(f"{len(raw)} bytes, over the {max_bytes}-byte limit for a rendezvous state")
    if raw == NULL_SENTINEL:
        return None
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ForeignValue("not base64: not what torchrun's c10d backend writes") from None
    try:
        state = _Unpickler(io.BytesIO(data)).load()
    except HostileValue:
        raise
    except Exception as e:  # noqa: BLE001 - any malformed pickle is a foreign value, said in one line
        raise ForeignValue(f"not a pickle netcheck can read: {type(e).__name__}: {e}") from None
    return _view(state, run_id)


def _view(state, run_id: str) -> RendezvousView:
    if not isinstance(state, _State):
        raise ForeignValue(f"a pickled {type(state).__name__}, not a rendezvous state")
    try:
        participants = _mapping(state.participants, int)
        heartbeats = _mapping(state.last_heartbeats, datetime.datetime)
        return RendezvousView(
            run_id=run_id, round=_typed(state.round, int), complete=_typed(state.complete, bool),
            closed=_typed(state.closed, bool), deadline=_time(state.deadline),
            participants=tuple(sorted((_node(n), r) for n, r in participants.items())),
            wait_list=tuple(sorted(_node(n) for n in _typed(state.wait_list, (set, frozenset)))),
            redundancy_list=tuple(sorted(_node(n) for n in _typed(state.redundancy_list, (set, frozenset)))),
            last_heartbeats=tuple(sorted((_node(n), _time(t)) for n, t in heartbeats.items())))
    except AttributeError as e:
        raise ForeignValue(f"a rendezvous state without {e.name}") from None


def _typed(value, kind):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ForeignValue(f"a rendezvous state holding a {type(value).__name__} where torch keeps "
                           f"{getattr(kind, '__name__', 'a set')}")
    return value


def _mapping(value, item_kind) -> dict:
    for item in _typed(value, dict).values():
        _typed(item, item_kind)
    return value


def _node(value) -> NodeDesc:
    node = _typed(value, _Node)
    try:
        return NodeDesc(_typed(node.addr, str), _typed(node.pid, int), _typed(node.local_id, int))
    except AttributeError as e:
        raise ForeignValue(f"a node descriptor without {e.name}") from None


def _time(value) -> str | None:
    """ISO 8601 in UTC; torch writes aware UTC datetimes (a naive one is taken as UTC)."""
    if value is None:
        return None
    moment = _typed(value, datetime.datetime)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).isoformat()
