"""torchrun's c10d rendezvous state, decoded without trusting it.

The c10d backend keeps the state under `torch.rendezvous.<run_id>` as base64 of a pickled
`_RendezvousState` (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py,
dynamic_rendezvous.py). The TCPStore has no authentication: whoever reaches the port can
plant a pickle that runs code in whoever loads it, or one built to exhaust the reader. So
it goes through netcheck's bounded decoder (facts.pickled), which admits only the state's
own two classes (as records: torch is never imported), `datetime`'s types and builtin
containers; then every field is checked for type and range here. Anything else is a
ForeignValue, or a HostileValue where it asks for code, never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import urllib.parse
from collections.abc import Callable, Mapping, Sized
from typing import TypeVar

from netcheck.core.constants import MAX_NODES, MAX_RANKS
from netcheck.core.deadline import Deadline
from netcheck.core.fields import MAX_PID, MAX_PROCS_PER_NODE, shown
from netcheck.core.jobrecords import NodeDesc, RendezvousView
from netcheck.facts import pickled

_RENDEZVOUS = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
# The c10d backend's marker for "no state yet" (c10d_rendezvous_backend._NULL_SENTINEL).
NULL_SENTINEL = b"Y2FuaW1hZGFt"
_STATE = pickled.RecordClass("rendezvous state")
_NODE = pickled.RecordClass("node descriptor")
_ADMITTED = {
    (_RENDEZVOUS, "_RendezvousState"): _STATE,
    (_RENDEZVOUS, "_NodeDesc"): _NODE,
    **pickled.DATETIMES,
}
MAX_ADDR = 255        # a DNS name at most (torch's addr is the FQDN, or --local-addr)
INT31 = 1 << 31       # rounds, ranks and local ids are C ints on the writer's side
_UTC = datetime.timezone.utc

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S", bound=Sized)

ForeignValue = pickled.ForeignPickle   # the value is not a rendezvous state netcheck reads; the message says what
HostileValue = pickled.HostilePickle   # ... and it asks for code


def decode_state(raw: bytes, run_id: str, max_bytes: int, deadline: Deadline | None = None) -> RendezvousView | None:
    """The state under torch.rendezvous.<run_id>; None when the backend holds none yet."""
    if len(raw) > max_bytes:
        raise ForeignValue(f"{len(raw)} bytes, over the {max_bytes}-byte limit for a rendezvous state")
    if raw == NULL_SENTINEL:
        return None
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ForeignValue("not base64: not what torchrun's c10d backend writes") from None
    return _view(pickled.decode(data, _ADMITTED, deadline), run_id)


def _view(state: object, run_id: str) -> RendezvousView:
    if not isinstance(state, pickled.Record) or state.kind != _STATE.kind:
        raise ForeignValue(f"a pickled {_kind(state)}, not a rendezvous state")
    fields = state.fields
    participants = _mapping(_field(fields, "participants"), lambda rank: _count(rank, "rank"))
    heartbeats = _mapping(_field(fields, "last_heartbeats"), _time)
    return RendezvousView(
        run_id=run_id, round=_count(_field(fields, "round"), "round"),
        complete=_typed(_field(fields, "complete"), bool), closed=_typed(_field(fields, "closed"), bool),
        deadline=_time(_field(fields, "deadline"), optional=True),
        participants=tuple(sorted(participants)),
        wait_list=_nodes(_field(fields, "wait_list")),
        redundancy_list=_nodes(_field(fields, "redundancy_list")),
        last_heartbeats=tuple(sorted(heartbeats)))


def _field(fields: Mapping[str, object], name: str) -> object:
    if name not in fields:
        raise ForeignValue(f"a rendezvous state without {name}")
    return fields[name]


def _kind(value: object) -> str:
    return value.kind if isinstance(value, pickled.Record) else type(value).__name__


def _typed(value: object, kind: type[T] | tuple[type[T], ...], what: str | None = None) -> T:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ForeignValue(f"a rendezvous state holding a {_kind(value)} where torch keeps "
                           f"{what or getattr(kind, '__name__', 'a set')}")
    return value


def _count(value: object, what: str) -> int:
    """A round, rank or local id: a non-negative C int."""
    number = _typed(value, int, f"a {what}")
    if not 0 <= number < INT31:
        raise ForeignValue(f"a {what} of {number}, outside 0 to 2**31 - 1")
    return number


def _sized(value: object, kind: type[S] | tuple[type[S], ...], what: str) -> S:
    collection = _typed(value, kind, what)
    if len(collection) > MAX_NODES:
        raise ForeignValue(f"{len(collection)} nodes in one list, over netcheck's limit of {MAX_NODES}")
    return collection


def _mapping(value: object, check_item: Callable[[object], R]) -> list[tuple[NodeDesc, R]]:
    """(node, checked item) for every entry of a dict keyed by node descriptors."""
    return [(_node(n), check_item(item)) for n, item in _sized(value, dict, "a dict").items()]


def _nodes(value: object) -> tuple[NodeDesc, ...]:
    return tuple(sorted(_node(n) for n in _sized(value, (set, frozenset), "a set")))


def _node(value: object) -> NodeDesc:
    if not isinstance(value, pickled.Record) or value.kind != _NODE.kind:
        raise ForeignValue(f"a rendezvous state holding a {_kind(value)} where torch keeps a node descriptor")
    fields = value.fields
    for name in ("addr", "pid", "local_id"):
        if name not in fields:
            raise ForeignValue(f"a node descriptor without {name}")
    return NodeDesc(_address(fields["addr"]), _pid(fields["pid"]), _count(fields["local_id"], "local id"))


def _pid(value: object) -> int:
    pid = _typed(value, int, "a pid")
    if not 0 < pid <= MAX_PID:
        raise ForeignValue(f"a pid of {pid}, outside 1 to {MAX_PID} (the kernel's PID_MAX_LIMIT)")
    return pid


def _address(value: object) -> str:
    """A node's address as torch writes it: a name or an IP, printable, at most MAX_ADDR."""
    addr = _typed(value, str, "an address")
    if not 0 < len(addr) <= MAX_ADDR:
        raise ForeignValue(f"a node address of {len(addr)} characters (torch writes 1 to {MAX_ADDR})")
    # isprintable: no Unicode "Other" or "Separator" but the ASCII space, which is refused too.
    if not addr.isprintable() or " " in addr:
        raise ForeignValue("a node address with spaces or control characters, which no host name has")
    return addr


def _time(value: object, optional: bool = False) -> str | None:
    """ISO 8601 in UTC; torch writes aware UTC datetimes (a naive one is taken as UTC)."""
    if value is None and optional:
        return None
    moment = _typed(value, datetime.datetime, "a datetime")
    offset = moment.utcoffset() or datetime.timedelta(0)
    naive = moment.replace(tzinfo=None)
    # An offset moves a moment at the edge of datetime's range outside it: said, not raised.
    if (offset > datetime.timedelta(0) and naive < datetime.datetime.min + offset) or \
            (offset < datetime.timedelta(0) and naive > datetime.datetime.max + offset):
        raise ForeignValue(f"a time of {naive.isoformat()} at offset {offset}: outside the range of dates")
    return (naive - offset).replace(tzinfo=_UTC).isoformat()


# ---------------------------------------------------------------------------- a round's own keys
# After a round completes, each agent writes torchelastic/role_info/<group rank> and the
# group's rank 0 writes torchelastic/assigned_ranks/<group rank> for every agent, under the
# round's prefix torch.rendezvous.RUN.ROUND/ (torch/distributed/elastic/agent/server/api.py,
# _assign_worker_ranks, 2.13): JSON, never pickled. A worker that starts torch's debug server
# registers debug_server/rank<N> = "http://<hostname>:<port>" (torch/distributed/debug).

def decode_role_info(raw: bytes, group_rank: int) -> int:
    """Its local world size: {"role": str, "rank": <group rank>, "local_world_size": int}."""
    info = _json(raw, dict, "a role_info")
    if info.get("rank") != group_rank or isinstance(info.get("rank"), bool):
        raise ForeignValue(f"a role_info naming rank {shown(info.get('rank'))} under group rank {group_rank}")
    return _bounded_int(info.get("local_world_size"), 1, MAX_PROCS_PER_NODE, "a local world size")


def decode_assigned_ranks(raw: bytes) -> int:
    """Its first worker's global rank: [base global rank, world size, base role rank, role world size]."""
    ranks = _json(raw, list, "an assigned_ranks")
    if len(ranks) != 4:
        raise ForeignValue(f"an assigned_ranks of {len(ranks)} items, not torch's 4")
    return _bounded_int(ranks[0], 0, MAX_RANKS - 1, "a global rank")


def decode_master_addr(raw: bytes) -> str:
    """The round's MASTER_ADDR: where the workers' own store runs (torchrun's rank-0 agent)."""
    try:
        return _address(raw.decode("ascii"))
    except UnicodeDecodeError:
        raise ForeignValue("a MASTER_ADDR that is not ASCII") from None


def decode_master_port(raw: bytes) -> int:
    try:
        return _bounded_int(int(raw.decode("ascii")), 1, 65535, "a port")
    except (UnicodeDecodeError, ValueError):
        raise ForeignValue("a MASTER_PORT that is not a number") from None


def decode_worker_url(raw: bytes) -> str:
    """The host a debug server's URL names (its hostname as the worker saw it)."""
    return decode_debug_server(raw)[0]


def decode_debug_server(raw: bytes) -> tuple[str, int]:
    """(host, port) of a rank's debug server, from its http://HOST:PORT URL."""
    try:
        url = urllib.parse.urlsplit(raw.decode("ascii"))
        host, port = url.hostname, url.port
    except (UnicodeDecodeError, ValueError):
        raise ForeignValue("a debug server URL that is not an ASCII URL") from None
    if url.scheme != "http" or not host or not port:
        raise ForeignValue("a debug server value that is not an http://HOST:PORT URL")
    return _address(host), port


def _json(raw: bytes, kind: type[T], what: str) -> T:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ForeignValue(f"{what} that is not JSON") from None
    if not isinstance(value, kind):
        raise ForeignValue(f"{what} holding a {type(value).__name__}, not a {kind.__name__}")
    return value


def _bounded_int(value: object, low: int, high: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ForeignValue(f"{shown(value)} where torch writes {what} ({low} to {high})")
    return value
