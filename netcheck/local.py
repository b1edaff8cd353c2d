"""Phase 1, local: what this node knows about itself without touching the network."""

from __future__ import annotations

import os
import socket

from netcheck import __version__
from netcheck.model import Launch, NodeFacts, Reach
from netcheck.nics import read_nic_table
from netcheck.probe import call_with_timeout, resolve_addresses

LOOKUP_TIMEOUT = 2.0


def fqdn(timeout: float = LOOKUP_TIMEOUT) -> str:
    """socket.getfqdn(), as torchrun computes the MASTER_ADDR it hands its workers."""
    name, error = call_with_timeout(socket.getfqdn, timeout)
    return name if error is None and name else socket.gethostname()


def shm_bytes(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def gather_facts(run_id: str, launch: Launch, reach: Reach | None) -> NodeFacts:
    hostname = socket.gethostname()
    addresses, _ = resolve_addresses(hostname, LOOKUP_TIMEOUT)
    return NodeFacts(
        run_id=run_id,
        hostname=hostname,
        fqdn=fqdn(),
        hostname_addresses=addresses,
        launch=launch,
        shm_bytes=shm_bytes(),
        nics=read_nic_table(),
        reach=reach,
        version=__version__,
    )
