"""Addresses translated between a node and its peers (NAT), built for real: a container on
Docker's default bridge (its own namespace behind a veth on the machine, masqueraded), and a
host in such a container with only the rendezvous port published (a DNAT). The rendezvous
works through both; NCCL and gloo would hang. Each is named as the translation it is, with
host networking as the fix, and no firewall is blamed. The container's own address (198.19.200.2)
sorts above its peers': gloo, which dials each pair from the larger address, dials out of it
through the translation, so the finding stops NCCL alone, and says why (issue 64)."""

from __future__ import annotations

import pytest

from cluster import NodeSpec
from job import Launch, classify, run_job
from nodes import GRACE, PORT, explain, finish_all, scaled, start

pytestmark = pytest.mark.root_required


def args(i: int, n: int, timeout: float) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(timeout),
            "--skip", "bandwidth"]


def translated(run) -> dict:
    (found,) = [f for f in run.findings("mesh.connect", "fail")]
    assert found["kind"] == "translated" and "--network host" in found["fix"], found
    assert "firewall" not in found["fix"] and "firewall" not in found["summary"], found
    assert found["impact"]["on"] == ["nccl_socket", "nccl_rdma"] and "Device::isInitiator" in found["impact"]["why"]
    return found


def test_a_joiner_in_a_bridged_container_is_named_translated_not_firewalled(cluster, tmp_path):
    timeout = scaled(30)
    with cluster([NodeSpec() for _ in range(3)]) as c:
        c.containerize(2, "c0ffee2")
        runs = finish_all([start(c, i, args(i, 3, timeout), tmp_path) for i in range(3)], timeout + GRACE)
        job = classify(run_job(c, Launch(3), tmp_path), None)   # gloo dials out of the container: it runs
    assert job.fate == "ok", job.describe()
    host = runs[0]
    # The container is at fault (its hostname no peer resolves, its connections translated); the
    # host and node1 beside it are healthy (issue 65).
    assert [r.rc for r in runs] == [4, 4, 2], explain(runs)
    found = translated(host)
    assert found["nodes"] == [2] and "198.18.0.12" in found["summary"] and "198.19.200.2" in found["summary"], found
    assert "198.19.200.2: unreachable" in " ".join(found["evidence"]), found
    for run in runs:
        assert not [f for f in run.report["findings"] if "firewall" in f["fix"]], explain(runs)


def test_a_host_in_a_container_with_its_port_published_is_named_translated(cluster, tmp_path):
    timeout = scaled(30)
    with cluster([NodeSpec() for _ in range(3)]) as c:
        c.containerize(0, "c0ffee0", publish=PORT)
        runs = finish_all([start(c, i, args(i, 3, timeout), tmp_path) for i in range(3)], timeout + GRACE)
    assert [r.rc for r in runs] == [2, 4, 4], explain(runs)   # the container host's fault alone (issue 65)
    found = translated(runs[0])
    assert found["nodes"] == [0] and "reached at 198.18.0.10" in found["summary"], found
    assert "198.19.200.2: unreachable" in " ".join(found["evidence"]), found
    for run in runs:   # nobody is sent to open a firewall
        assert not [f for f in run.report["findings"] if "firewall" in f["fix"]], explain(runs)
