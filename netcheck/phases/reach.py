"""Phase 2, reach: who hosts, the host's listen before torch is imported, and a joiner's probe
of HOST:PORT."""

from __future__ import annotations

import dataclasses

from netcheck.core.constants import LOOKUP_TIMEOUT
from netcheck.core.nictable import address_owners
from netcheck.facts.launcher import is_torchrun_worker
from netcheck.facts.probe import PortTaken, listen, reach, resolve_addresses
from netcheck.phases.state import Run
from netcheck.rules import rdzv as rdzv_rules


def reached(run: Run) -> bool:
    with run.phase("reach"):
        found = reach(run.config.rdzv.host, run.config.rdzv.port, run.join_deadline)
        run.facts = dataclasses.replace(run.facts, reach=found)
        run.findings += rdzv_rules.reach_findings(found, run.my_ranks())
    return bool(run.facts.reach) and run.facts.reach.outcome == "open"


def take_role(run: Run) -> bool:
    """Rank 0 hosts; without ranks, the node that owns the rendezvous address does.

    The host listens at once, before torch is imported, so early joiners queue instead
    of being refused; under torchrun, rank 0 hosts on the agent's own store instead
    (torchrun shares its rendezvous store with its workers). Two nodes on one machine (a
    loopback test) cannot both listen: the second finds netcheck holding the port and
    joins instead. False: this node was to host and cannot.
    """
    launch = run.config.launch
    rank = launch.node_rank
    if rank not in (None, 0) or (rank is None and not _rdzv_is_local(run)):
        return True
    run.role, run.rank = "host", 0
    if is_torchrun_worker(launch) and launch.variables.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return True
    with run.phase("reach"):
        try:
            run.listener = listen(run.config.rdzv.port)
            run.findings.append(rdzv_rules.listen_pass(run.config.rdzv.port))
            return True
        except PortTaken as taken:
            if rank is None and any("netcheck" in h.cmdline for h in taken.holders):
                run.role, run.rank = "joiner", None
                return True
            run.findings.append(rdzv_rules.listen_finding(taken.port, taken.holders, taken.strerror))
    return False


def _rdzv_is_local(run: Run) -> bool:
    addresses, _ = resolve_addresses(run.config.rdzv.host, LOOKUP_TIMEOUT)
    own = address_owners(run.facts.nics)
    return any(a in own for a in addresses)
