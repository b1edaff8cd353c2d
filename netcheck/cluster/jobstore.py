"""A running job's TCPStore, read and never written: `netcheck inspect`'s only contact with it.

The client is created without a world size, so it does not count itself into the store's
`init/` counter (the only thing a plain TCPStore client can add); every key is checked
before it is read, so nothing waits on a key that may not exist. Values are read with
netcheck's own bounded GET (storewire): one over the limit is refused by its length, unread.
Keys torch writes that say who arrived (torch 2.13, seen on real runs):

    torch.rendezvous.RUN                  torchrun's c10d state (base64 of a pickle)
    torch.rendezvous.RUN.ROUND/...        that round's MASTER_ADDR/PORT, agents' ranks
    default_pg/0//cpu//0/RANK             a rank of init_process_group (gloo) that arrived
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from netcheck.cluster.store import RendezvousError, client_store
from netcheck.cluster.storewire import WireError, get_bounded
from netcheck.core import compat
from netcheck.core.deadline import Deadline

RDZV_PREFIX = "torch.rendezvous."
MAX_RUNS = 16                 # rendezvous states read at most (the counter of runs is anyone's)
MAX_READ_BYTES = 32 << 20     # of all runs' states together: an honest store holds one per run,
                              # under 2 MiB at MAX_NODES; past this, later runs are not read
# A rank's address key of the default process group: default_pg/<n>//<device>//<n>/<rank>.
RANK_KEY = re.compile(r"default_pg/\d+//[a-z]+//\d+/(\d+)")


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


def rendezvous_runs(keys) -> list[str]:
    """Run ids with a c10d state among the keys (a round's own keys have a '/' in them)."""
    return sorted(k[len(RDZV_PREFIX):] for k in keys if k.startswith(RDZV_PREFIX) and "/" not in k)


def arrived_ranks(keys) -> tuple[int, ...]:
    return tuple(sorted({int(m[1]) for k in keys if (m := RANK_KEY.fullmatch(k))}))
