"""A running job's TCPStore, read and never written: `netcheck inspect`'s only contact with it.

The client is created without a world size, so it does not count itself into the store's
`init/` counter (the only thing a plain TCPStore client can add); every key is checked
before it is read, so nothing waits on a key that may not exist. Values are read with
netcheck's own bounded GET (storewire): one over the limit is refused by its length, unread.
Keys torch writes that say who arrived (torch 2.13, seen on real runs):

    torch.rendezvous.RUN                  torchrun's c10d state (base64 of a pickle)
    torch.rendezvous.RUN.ROUND/...        that round's MASTER_ADDR/PORT, agents' ranks:
        torchelastic/role_info/G          agent G's worker count (JSON), once the round completed
        torchelastic/assigned_ranks/G     its workers' first global rank (JSON, written by G 0)
    default_pg/0//cpu//0/RANK             a rank of init_process_group (gloo) that arrived

and in the workers' own store, at the round's MASTER_ADDR:MASTER_PORT (the rank-0 agent's, not
the rendezvous endpoint: torchrun hands it to the workers):

    debug_server/rankN                    rank N's debug server: http://HOSTNAME:PORT
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from netcheck.cluster import compat
from netcheck.cluster.storeconnect import client_store
from netcheck.cluster.storewire import Wire, WireError, get_bounded
from netcheck.core.constants import MAX_NODES
from netcheck.core.deadline import Deadline
from netcheck.core.jobrecords import RoundKeys, RoundMember
from netcheck.core.storeerrors import RendezvousError
from netcheck.facts.rdzvstate import (
    ForeignValue,
    decode_assigned_ranks,
    decode_debug_server,
    decode_master_addr,
    decode_master_port,
    decode_role_info,
    decode_worker_url,
)

RDZV_PREFIX = "torch.rendezvous."
MAX_RUNS = 16                 # rendezvous states read at most (the counter of runs is anyone's)
MAX_READ_BYTES = 32 << 20     # of all runs' states together: an honest store holds one per run,
                              # under 2 MiB at MAX_NODES; past this, later runs are not read
# A rank's address key of the default process group: default_pg/<n>//<device>//<n>/<rank>.
RANK_KEY = re.compile(r"default_pg/\d+//[a-z]+//\d+/(\d+)")
# A round's agent keys, after its prefix torch.rendezvous.RUN.ROUND/.
ROUND_KEY = re.compile(r"torchelastic/(?:role_info|assigned_ranks)/(\d+)")
DEBUG_SERVER_KEY = "debug_server/rank{}"
DEBUG_SERVER_RANK = re.compile(r"debug_server/rank(\d{1,7})")
MASTER_KEY = re.compile(r"torch\.rendezvous\.(.+)\.(\d{1,9})/MASTER_ADDR")
MAX_ROUND_VALUE = 4096        # role_info and assigned_ranks are tens of bytes of JSON
MAX_URL_BYTES = 512           # http://HOSTNAME:PORT

T = TypeVar("T")
Exists = Callable[[str], bool]   # whether a key is in the store (listed, or asked)
MAX_HOSTS_READ = 64           # debug server URLs read per agent asked about (its first workers')


@dataclass(frozen=True)
class StoreRead:
    keys: tuple[str, ...] | None          # None: this torch cannot list keys
    hidden: int                           # keys the store counts but does not list (init/)
    states: dict[str, bytes]              # run id -> raw value of torch.rendezvous.RUN
    unread: dict[str, str]                # run id -> why its state was not read (its size)


def read_job_store(host: str, port: int, run_id: str | None, deadline: Deadline, max_value: int) -> StoreRead:
    """Raises RendezvousError when no store answers in time."""
    store = client_store(host, port, deadline)
    keys = compat.list_keys(store)
    hidden = max(0, store.num_keys() - len(keys)) if keys is not None else 0
    runs = [run_id] if run_id else rendezvous_runs(keys or ())[:MAX_RUNS]
    states, unread, left = {}, {}, MAX_READ_BYTES
    for run in runs:
        key = RDZV_PREFIX + run
        if deadline.expired() or not compat.has_key(store, key):
            continue
        try:
            value = get_bounded(host, port, key, min(max_value, left), deadline)
        except WireError as e:
            raise RendezvousError(str(e)) from None
        if value.data is None:
            unread[run] = _unread_reason(value.size, max_value)
        else:
            states[run] = value.data
            left -= value.size
    return StoreRead(keys, hidden, states, unread)


def _unread_reason(size: int, max_value: int) -> str:
    if size > max_value:
        return f"{size} bytes, over the {max_value}-byte limit for a rendezvous state"
    return f"{size} bytes, past the {MAX_READ_BYTES} bytes inspect reads of all runs' states together"


def rendezvous_runs(keys: Iterable[str]) -> list[str]:
    """Run ids with a c10d state among the keys (a round's own keys have a '/' in them)."""
    return sorted(k[len(RDZV_PREFIX):] for k in keys if k.startswith(RDZV_PREFIX) and "/" not in k)


def arrived_ranks(keys: Iterable[str]) -> tuple[int, ...]:
    return tuple(sorted({int(m[1]) for k in keys if (m := RANK_KEY.fullmatch(k))}))


def round_prefix(run_id: str, round_: int) -> str:
    return f"{RDZV_PREFIX}{run_id}.{round_}/"


def round_group_ranks(keys: Iterable[str], run_id: str, round_: int) -> tuple[int, ...]:
    """Group ranks with a role_info or assigned_ranks key in that round."""
    prefix = round_prefix(run_id, round_)
    return tuple(sorted({int(m[1]) for k in keys if k.startswith(prefix)
                         and (m := ROUND_KEY.fullmatch(k[len(prefix):]))}))


def read_round(host: str, port: int, run_id: str, round_: int, live: frozenset[int],
               keys: tuple[str, ...] | None, deadline: Deadline) -> RoundKeys:
    """The round's agents as its keys show them, and what the store says of each but the `live`
    group ranks (the participants whose heartbeat is fresh). Without a key listing, role_info keys
    are probed (an agent's rank is below the round's size, and each wrote its own). Raises
    RendezvousError, WireError."""
    listed, store = frozenset(keys or ()), None if keys is not None else client_store(host, port, deadline)
    exists = (lambda key: key in listed) if keys is not None else (lambda key: compat.has_key(store, key))
    prefix = round_prefix(run_id, round_)
    ranks = round_group_ranks(keys, run_id, round_) if keys is not None else \
        tuple(range(_probe_count(lambda g: exists(f"{prefix}torchelastic/role_info/{g}"), deadline)))
    asked = [g for g in ranks if g not in live]
    wire, workers = Wire(host, port), None
    try:
        workers, why = _workers_store(wire, exists, prefix, deadline) if asked else (None, "")
        members = tuple(_member(wire, workers, why, exists, prefix, g, deadline) for g in asked)
    finally:
        wire.close()
        if workers is not None:
            workers.close()
    return RoundKeys(run_id, round_, ranks, keys is not None, members)


def _workers_store(wire: Wire, exists: Exists, prefix: str, deadline: Deadline) -> tuple[Wire | None, str]:
    """A connection to the workers' store (the round's MASTER_ADDR:MASTER_PORT), or why not."""
    addr, why = _read(wire, exists, f"{prefix}MASTER_ADDR", MAX_URL_BYTES, decode_master_addr, deadline)
    port, why_port = _read(wire, exists, f"{prefix}MASTER_PORT", MAX_URL_BYTES, decode_master_port, deadline)
    if addr is None or port is None:
        return None, f"the workers' store: MASTER_ADDR {why or 'read'}, MASTER_PORT {why_port or 'read'}"
    return Wire(addr, port), ""


def _probe_count(exists: Callable[[int], bool], deadline: Deadline) -> int:
    """How many of 0, 1, 2, ... exist, when they exist from 0 up without a gap: a doubling
    search, then a halving one (about 2 log2(n) requests)."""
    if not exists(0):
        return 0
    low, high = 0, 1            # exists(low); high is the first index not yet known to exist
    while high < MAX_NODES and exists(high) and not deadline.expired():
        low, high = high, min(2 * high, MAX_NODES)
    while high - low > 1 and not deadline.expired():
        middle = (low + high) // 2
        low, high = (middle, high) if exists(middle) else (low, middle)
    return low + 1


def _member(wire: Wire, workers: Wire | None, why_not: str, exists: Exists, prefix: str, group_rank: int,
            deadline: Deadline) -> RoundMember:
    """What the store holds of one agent: its worker count, first global rank, workers' hosts."""
    unread, values = [], dict[str, int | None]()
    for name, decode in (("role_info", lambda raw: decode_role_info(raw, group_rank)),
                         ("assigned_ranks", decode_assigned_ranks)):
        key = f"{prefix}torchelastic/{name}/{group_rank}"
        values[name], why = _read(wire, exists, key, MAX_ROUND_VALUE, decode, deadline)
        if why:
            unread.append(f"{name}/{group_rank}: {why}")
    count, first = values["role_info"], values["assigned_ranks"]
    hosts: list[tuple[int, str]] = []
    if count is not None and first is not None:
        if workers is None:
            unread.append(why_not)
        else:
            hosts, why = _worker_hosts(workers, first, count, deadline)
            unread += [why] if why else []
    return RoundMember(group_rank, count, first, tuple(hosts), "; ".join(unread))


def _worker_hosts(workers: Wire, first: int, count: int, deadline: Deadline) -> tuple[list[tuple[int, str]], str]:
    """(global rank, host) for each of the agent's workers whose debug server registered a URL.
    A key not there reads as empty (libuv) or closes the connection (the legacy store)."""
    hosts: list[tuple[int, str]] = []
    for rank in range(first, first + min(count, MAX_HOSTS_READ)):
        key = DEBUG_SERVER_KEY.format(rank)
        if deadline.expired():
            return hosts, f"{key}: not read: --timeout was spent"
        try:
            value = workers.get(key, MAX_URL_BYTES, deadline)
        except WireError as e:
            if "broke off" in str(e):
                continue                      # the legacy store's answer to a key it lacks
            return hosts, f"the workers' store at {workers.host}:{workers.port}: {e}"
        if value.data:
            try:
                hosts.append((rank, decode_worker_url(value.data)))
            except ForeignValue as e:
                return hosts, f"{key}: {e}"
    return hosts, ""


def _read(wire: Wire, exists: Exists, key: str, limit: int, decode: Callable[[bytes], T], deadline: Deadline,
          absent_ok: bool = False) -> tuple[T | None, str]:
    """(decoded value, "") or (None, why not); a key that is not there is never asked for."""
    if deadline.expired():
        return None, "not read: --timeout was spent"
    if not exists(key):
        return None, "" if absent_ok else "not in the store"
    value = wire.get(key, limit, deadline)
    if value.data is None:
        return None, f"{value.size} bytes, over the {limit}-byte limit"
    try:
        return decode(value.data), ""
    except ForeignValue as e:
        return None, str(e)


def debug_servers(host: str, port: int, keys: tuple[str, ...] | None, deadline: Deadline) -> dict[int, tuple[str, int]]:
    """rank -> (host, port) of its debug server, as registered in this store or, under torchrun,
    in the workers' store that the newest round's MASTER_ADDR and MASTER_PORT name. Read-only
    and bounded; a value that is no URL is left out. Raises RendezvousError, WireError."""
    wire = Wire(host, port)
    try:
        servers = _registered(wire, keys, deadline)
        rounds = sorted((int(m[2]), m[1]) for k in keys or () if (m := MASTER_KEY.fullmatch(k)))
        if servers or not rounds:
            return servers
        round_, run_id = rounds[-1]
        listed = frozenset(keys or ())   # keys were listed: rounds came from them
        workers, _ = _workers_store(wire, listed.__contains__, round_prefix(run_id, round_), deadline)
    finally:
        wire.close()
    if workers is None:
        return {}
    try:
        return _registered(workers, read_job_store(workers.host, workers.port, "", deadline, MAX_URL_BYTES).keys,
                           deadline)
    finally:
        workers.close()


def _registered(wire: Wire, keys: tuple[str, ...] | None, deadline: Deadline) -> dict[int, tuple[str, int]]:
    servers = {}
    for key in keys or ():
        match = DEBUG_SERVER_RANK.fullmatch(key)
        if not match:
            continue
        server, _ = _read(wire, lambda _: True, key, MAX_URL_BYTES, decode_debug_server, deadline)
        if server is not None:
            servers[int(match[1])] = server
    return servers
