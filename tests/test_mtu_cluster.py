"""Jumbo frames on real network namespaces: a switch port that carries less than the nodes'
MTU (FAILURES row 21) is named a path-MTU blackhole by the mesh, and the bandwidth phase
does not spend the run's time on it; jumbo frames everywhere pass."""

from __future__ import annotations

import pytest

from cluster import NodeSpec
from nodes import GRACE, PORT, explain, finish_all, scaled, start

pytestmark = pytest.mark.root_required

JUMBO = 9000


def args(i: int, n: int, timeout: float) -> list[str]:
    return ["--rdzv", f"node0:{PORT}", "--nnodes", str(n), "--node-rank", str(i), "--timeout", str(timeout)]


def test_a_short_switch_port_under_jumbo_frames_is_a_blackhole_and_the_sweep_is_skipped(cluster, tmp_path):
    timeout = scaled(40)
    specs = [NodeSpec(mtu=JUMBO), NodeSpec(mtu=JUMBO), NodeSpec(mtu=JUMBO, port_mtu=1500)]
    with cluster(specs) as c:
        runs = finish_all([start(c, i, args(i, 3, timeout), tmp_path, bandwidth=True) for i in range(3)],
                          timeout + GRACE)
    host = runs[0]
    assert host.rc == 2 and host.seconds < timeout + GRACE, explain(runs)
    (hole,) = host.findings("mesh.connect", "fail")
    assert hole["kind"] == "blackhole" and hole["nodes"] == [2], hole
    assert "node0 (rank 0) eth0 mtu 9000 -> node2 (rank 2) eth0 198.18.0.12 mtu 9000: 9000-byte frames lost, " \
           "1500-byte frames passed" in hole["evidence"]
    assert "on node2: ip link set dev eth0 mtu 1500" in hole["fix"]
    assert runs[2].rc == 2, "the node the host names never exits 0"
    for run in runs:  # every node skips the sweep alike, at once, and says why
        (skipped,) = [f for f in run.findings("run.skipped") if "bandwidth" in f["summary"]]
        assert skipped["kind"] == "phase_skipped" and "lose full-size frames" in skipped["summary"], explain(runs)
        assert run.report["bandwidth"] is None and run.report["timings"]["bandwidth"] < 1.0
        assert not run.findings("bw.stage") and "ran out of time" not in run.stdout


def test_a_joiner_cut_off_by_a_blackhole_at_the_host_names_it_not_a_silent_host(cluster, tmp_path):
    """The host's switch port short under jumbo frames: a joiner whose facts are larger than a
    frame (two more interfaces) gets no answer to their publishing, and once said only 'the
    host stopped answering' (chaos seed 22262, schedule 6). Its store still answers a small
    request, not the same one in a full frame: the joiner names the blackhole."""
    timeout = scaled(30)
    with cluster([NodeSpec(mtu=JUMBO, port_mtu=1500), NodeSpec(mtu=JUMBO)]) as c:
        c.add_decoy(1, "ib0", "198.19.2.1/24")
        c.add_decoy(1, "ib1", "198.19.3.1/24")
        runs = finish_all([start(c, i, args(i, 2, timeout), tmp_path) for i in range(2)], timeout + GRACE)
    joiner = runs[1]
    assert joiner.rc == 2 and joiner.seconds < timeout + GRACE, explain(runs)
    (hole,) = joiner.findings("mesh.connect", "fail")
    assert hole["kind"] == "blackhole" and hole["nodes"] == [0, 1], hole
    assert "ping -M do" in hole["fix"], hole
    assert runs[0].rc == 2, explain(runs)


def test_jumbo_frames_everywhere_pass_the_mesh(cluster, tmp_path):
    timeout = scaled(30)
    with cluster([NodeSpec(mtu=JUMBO) for _ in range(3)]) as c:
        runs = finish_all([start(c, i, args(i, 3, timeout), tmp_path) for i in range(3)], timeout + GRACE)
    assert [r.rc for r in runs] == [0, 0, 0], explain(runs)
    (connect,) = runs[0].findings("mesh.connect")
    assert connect["severity"] == "pass" and f"echo full-size frames (up to {JUMBO} bytes)" in connect["summary"]
