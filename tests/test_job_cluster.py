"""The real job (tests/job.py: torchrun, gloo) on namespace clusters: the fate oracle's judge
judged. A healthy cluster runs it to the end (ok, with a busbw), in both of the campaign's shapes
(3 nodes x 1 process, 2 x 4: each of the 8 ranks' lines its own); with node2's ephemeral ports
closed both ways (the catalog's `ephemeral way=both`: only the endpoint's port open to it and from
it) it cannot: failed or hung, decided within its bound.

Both ways, because gloo dials each pair from the larger address to the smaller: node2's own
inbound closed alone (the highest address, which dials every peer and is dialled by none) leaves
this job running (measured: ok, busbw at the control's)."""

from __future__ import annotations

import pytest

from chaos.catalog import EphemeralBlocked
from cluster import NodeSpec
from job import FAILED_GRACE, Launch, classify, job_bound, run_job
from nodes import scaled

pytestmark = pytest.mark.root_required


def test_the_job_runs_on_a_healthy_cluster_in_both_shapes_and_not_with_a_nodes_ephemeral_ports_closed(cluster,
                                                                                                    tmp_path):
    with cluster([NodeSpec() for _ in range(3)]) as c:
        healthy = classify(run_job(c, Launch(3, rdzv="static"), tmp_path), None)
        assert healthy.fate == "ok", healthy.describe()
        assert healthy.busbw > 0 and set(healthy.where.values()) == {"done"}, healthy.record()
        # Nodes 0 and 1 of the same cluster, 4 workers each, torchrun's c10d (its group ranks its own).
        four = classify(run_job(c, Launch(2, rdzv="c10d", nproc=4), tmp_path), None)
        assert four.fate == "ok" and four.busbw > 0 and set(four.where.values()) == {"done"}, four.describe()
        assert sorted(worker.split()[0] for worker in four.where) == ["node0"] * 4 + ["node1"] * 4, four.where

        EphemeralBlocked((2,), (("way", "both"),)).setup(c, None)
        run = run_job(c, Launch(3, rdzv="c10d"), tmp_path)
        closed = classify(run, healthy.busbw)
    assert closed.fate in ("failed", "hung"), closed.describe()
    # Decided within the bound (a failure sooner), the kill of every process included.
    assert run.seconds <= job_bound(3) + FAILED_GRACE + scaled(2), closed.describe()
    # The rendezvous (its endpoint open) let every worker start: they stop in gloo's connect.
    assert "rendezvous (no worker started)" not in closed.where.values(), closed.describe()
