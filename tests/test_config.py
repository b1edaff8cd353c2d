"""config: --rdzv parsing, phase selection and the checks on a whole configuration."""

from __future__ import annotations

import dataclasses
import ipaddress
import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from netcheck.config import (
    NO_ENDPOINT,
    RDZV_REQUIRED,
    Config,
    Outputs,
    UsageError,
    check_config,
    parse_endpoint,
    select_phases,
)
from netcheck.core.budget import MIN_TIMEOUT
from netcheck.core.bwrecords import SweepOptions
from netcheck.core.constants import DEFAULT_PORT, MAX_NODES, MAX_RANKS, PHASES
from netcheck.core.model import Endpoint, Launch

# --- parse_endpoint ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, host, port", [
    ("node0", "node0", 29500),
    ("node0:29501", "node0", 29501),
    ("gpu01.cluster.example:1", "gpu01.cluster.example", 1),
    ("10.0.0.1:65535", "10.0.0.1", 65535),
    ("10.0.0.1", "10.0.0.1", 29500),
    ("[::1]:29400", "::1", 29400),
    ("[::1]", "::1", 29500),
    ("[fe80::1%eth0]:80", "fe80::1%eth0", 80),
    ("[2001:db8::7]:443", "2001:db8::7", 443),
    ("  node0:80  ", "node0", 80),        # pasted with spaces
    ("node0:00080", "node0", 80),         # leading zeros are still port 80
])
def test_parse_endpoint_accepts(text, host, port):
    assert parse_endpoint(text) == Endpoint(host, port)


def test_the_default_port_is_torchs():
    assert DEFAULT_PORT == 29500
    assert parse_endpoint("node0").port == 29500


@pytest.mark.parametrize("text, message", [
    ("node0:0", "--rdzv 'node0:0': port 0 is outside 1-65535"),
    ("node0:70000", "--rdzv 'node0:70000': port 70000 is outside 1-65535"),
    ("node0:65536", "--rdzv 'node0:65536': port 65536 is outside 1-65535"),
    ("[::1]:0", "--rdzv '[::1]:0': port 0 is outside 1-65535"),
    ("node0:", "--rdzv 'node0:': expected HOST:PORT or [IPV6]:PORT"),
    ("[::1]:", "--rdzv '[::1]:': expected HOST:PORT or [IPV6]:PORT"),
    ("[::1", "--rdzv '[::1': expected HOST:PORT or [IPV6]:PORT"),
    ("::1", "--rdzv '::1': expected HOST:PORT or [IPV6]:PORT"),   # v6 needs brackets
    ("a:b:c", "--rdzv 'a:b:c': expected HOST:PORT or [IPV6]:PORT"),
    ("", "--rdzv '': the endpoint is empty: expected HOST:PORT or [IPV6]:PORT"),
    ("   ", "--rdzv '   ': the endpoint is empty: expected HOST:PORT or [IPV6]:PORT"),
    (":29500", "--rdzv ':29500': expected HOST:PORT or [IPV6]:PORT"),
    ("[]:80", "--rdzv '[]:80': expected HOST:PORT or [IPV6]:PORT"),
    ("node0:http", "--rdzv 'node0:http': expected HOST:PORT or [IPV6]:PORT"),
    ("node0:-1", "--rdzv 'node0:-1': expected HOST:PORT or [IPV6]:PORT"),
    ("node0:+80", "--rdzv 'node0:+80': expected HOST:PORT or [IPV6]:PORT"),
    ("node0:٨٠", "--rdzv 'node0:٨٠': expected HOST:PORT or [IPV6]:PORT"),  # Arabic-Indic "80"
    ("[::1]x", "--rdzv '[::1]x': expected HOST:PORT or [IPV6]:PORT"),
])
def test_parse_endpoint_rejects(text, message):
    with pytest.raises(UsageError) as caught:
        parse_endpoint(text)
    assert str(caught.value) == message


def test_a_port_too_long_for_int_is_a_usage_error():
    # int() refuses strings over 4300 digits with a plain ValueError.
    with pytest.raises(UsageError, match="is outside 1-65535$"):
        parse_endpoint("node0:" + "9" * 5000)


def test_endpoint_str_brackets_ipv6_only():
    assert str(Endpoint("node0", 29500)) == "node0:29500"
    assert str(Endpoint("10.0.0.1", 1)) == "10.0.0.1:1"
    assert str(Endpoint("::1", 29500)) == "[::1]:29500"


# Hostnames as RFC 1123 allows them: dot-separated labels of letters, digits and inner hyphens.
LABEL = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?", fullmatch=True)
HOSTNAME = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
HOST = st.one_of(
    HOSTNAME,
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
    st.builds(lambda a, scope: f"{a}%{scope}", st.ip_addresses(v=6, network="fe80::/64").map(str),
              st.sampled_from(["eth0", "ib0", "3"])),
)
PORT = st.integers(min_value=1, max_value=65535)


@given(HOST, PORT)
@example("node0", 29500)
@example("::", 1)
@example("::ffff:10.0.0.1", 65535)
def test_any_valid_endpoint_formats_and_parses_back_to_itself(host, port):
    assert parse_endpoint(str(Endpoint(host, port))) == Endpoint(host, port)


@given(HOST)
def test_a_host_without_a_port_gets_the_default(host):
    text = f"[{host}]" if ":" in host else host
    assert parse_endpoint(text) == Endpoint(host, DEFAULT_PORT)


@given(st.text())
@example("node0:" + "9" * 5000)
@example("[" + "1" * 5000 + "]:" + "1" * 5000)
@example("node0:²")
@example("\x00")
@example("[[::1]]:80")
def test_arbitrary_text_raises_nothing_but_usage_error(text):
    assert_parsed_or_refused(text)


@given(st.text(alphabet=string.digits + ":[]." + "a", max_size=12))
def test_arbitrary_endpoint_like_text_raises_nothing_but_usage_error(text):
    assert_parsed_or_refused(text)


def assert_parsed_or_refused(text: str) -> None:
    """--rdzv text either parses to a usable endpoint or is refused with one UsageError."""
    try:
        endpoint = parse_endpoint(text)
    except UsageError:
        return
    assert 1 <= endpoint.port <= 65535
    assert endpoint.host and endpoint.host == endpoint.host.strip("[]")


# --- select_phases ---------------------------------------------------------------------------------


def test_no_selection_runs_every_phase_in_order():
    assert PHASES == ("local", "reach", "rendezvous", "mesh", "nic", "env", "bandwidth")
    assert select_phases(None, None) == PHASES
    assert select_phases("", "") == PHASES


def test_skip_removes_the_named_phases_and_keeps_the_order():
    assert select_phases("bandwidth,mesh", None) == ("local", "reach", "rendezvous", "nic", "env")
    assert select_phases(" env , ,bandwidth ", None) == ("local", "reach", "rendezvous", "mesh", "nic")


def test_only_keeps_the_named_phases_in_run_order_not_in_the_order_given():
    # ... with the foundation they stand on: a mesh needs the rendezvous to find its peers.
    assert select_phases(None, "bandwidth,reach") == ("local", "reach", "rendezvous", "bandwidth")
    assert select_phases(None, "mesh") == ("local", "reach", "rendezvous", "mesh")
    assert select_phases(None, "reach") == ("local", "reach")
    assert select_phases(None, "local") == ("local",)


def test_skip_of_a_phase_that_later_ones_stand_on_is_refused():
    assert select_phases("rendezvous,mesh,nic,env,bandwidth", None) == ("local", "reach")
    with pytest.raises(UsageError, match=r"^--skip reach: later phases stand on it; to stop early"):
        select_phases("reach", None)
    with pytest.raises(UsageError, match=r"^--skip local, rendezvous: later phases stand on them"):
        select_phases("local,rendezvous", None)


@pytest.mark.parametrize("skip, only, message", [
    ("nosuch", None, "unknown phase nosuch: phases are local, reach, rendezvous, mesh, nic, env, bandwidth"),
    (None, "mesh,bw,net", "unknown phase bw, net: phases are local, reach, rendezvous, mesh, nic, env, "
                          "bandwidth"),
    ("Mesh", None, "unknown phase Mesh: phases are local, reach, rendezvous, mesh, nic, env, bandwidth"),
    ("mesh", "env", "--skip and --only cannot be used together"),
])
def test_select_phases_errors(skip, only, message):
    with pytest.raises(UsageError) as caught:
        select_phases(skip, only)
    assert str(caught.value) == message


# --- check_config ----------------------------------------------------------------------------------

GOOD = Config(
    rdzv=Endpoint("node0", 29500),
    launch=Launch("flags", 1, 2, 2, 8),
    run_id="netcheck",
    timeout=60.0,
    join_window=5.0,
    phases=PHASES,
    mesh=None,
    hash_paths=(),
    sweep=SweepOptions(),
    baseline=None,
    token=None,
    outputs=Outputs(),
    quiet=False,
    verbose=False,
)


EXPECT_RANGE = "a number of GB/s above 0 and at most 10000 (no interconnect comes near it)"
BUDGET_RANGE = "0.1 to 3600 seconds"


def with_sweep(**changes) -> Config:
    return dataclasses.replace(GOOD, sweep=dataclasses.replace(GOOD.sweep, **changes))


def test_the_bandwidth_numbers_take_what_a_run_can_mean():
    assert check_config(with_sweep(expect_busbw=1800.0, budget_s=0.1)).sweep.expect_busbw == 1800.0
    assert check_config(with_sweep(budget_s=3600.0)).sweep.budget_s == 3600.0
    # A budget past --timeout is the bandwidth phase's to skip and say so: the default outlasts the least --timeout.
    assert check_config(dataclasses.replace(GOOD, timeout=MIN_TIMEOUT)).sweep.budget_s == 6.0


def with_launch(**changes) -> Config:
    return dataclasses.replace(GOOD, launch=dataclasses.replace(GOOD.launch, **changes))


def test_a_good_config_is_returned_unchanged():
    assert check_config(GOOD) is GOOD
    arrival = dataclasses.replace(GOOD, launch=Launch("arrival", None, None, None, 1))
    assert check_config(arrival) is arrival
    assert check_config(with_launch(node_rank=1, nnodes_min=1, nnodes_max=4)).launch.node_rank == 1
    assert check_config(dataclasses.replace(GOOD, run_id="x" * 128)).run_id == "x" * 128


@pytest.mark.parametrize("launch", [
    # torchrun's WORLD_SIZE is ranks, not nodes: 2,048 nodes of 8 (issue 51: refused as 16,384 nodes).
    dict(source="torchrun", node_rank=16_383, nnodes_min=16_384, nnodes_max=16_384, nproc_per_node=8),
    dict(source="torchrun", node_rank=0, nnodes_min=MAX_RANKS, nnodes_max=MAX_RANKS, nproc_per_node=8),
    dict(node_rank=MAX_NODES - 1, nnodes_min=MAX_NODES, nnodes_max=MAX_NODES, nproc_per_node=MAX_RANKS // MAX_NODES),
])
def test_the_largest_jobs_within_both_bounds_are_taken(launch):
    assert check_config(with_launch(**launch)).launch == dataclasses.replace(GOOD.launch, **launch)


@pytest.mark.parametrize("config, message", [
    (dataclasses.replace(GOOD, timeout=-1.0), "--timeout -1: must be more than 0 seconds, and finite"),
    (dataclasses.replace(GOOD, timeout=0.0), "--timeout 0: must be more than 0 seconds, and finite"),
    (dataclasses.replace(GOOD, timeout=float("nan")), "--timeout nan: must be more than 0 seconds, and finite"),
    (dataclasses.replace(GOOD, timeout=float("inf")), "--timeout inf: must be more than 0 seconds, and finite"),
    (dataclasses.replace(GOOD, join_window=0.0), "--join-window 0: must be more than 0 seconds, and finite"),
    (dataclasses.replace(GOOD, join_window=float("nan")),
     "--join-window nan: must be more than 0 seconds, and finite"),
    (with_launch(node_rank=-1), f"--node-rank -1: must be 0 to {MAX_NODES - 1}"),
    # Nodes and ranks apart: each bound named where it is met.
    (with_launch(nnodes_min=MAX_NODES + 1, nnodes_max=MAX_NODES + 1),
     f"nnodes {MAX_NODES + 1} (from flags): netcheck takes at most {MAX_NODES} nodes (the node bound; ranks up to "
     f"{MAX_RANKS})"),
    (with_launch(nnodes_min=MAX_NODES, nnodes_max=MAX_NODES, nproc_per_node=16),
     f"{MAX_NODES} nodes x 16 processes = {MAX_NODES * 16} ranks (from flags): netcheck takes at most {MAX_RANKS} "
     f"ranks (the rank bound; nodes up to {MAX_NODES})"),
    (with_launch(source="torchrun", node_rank=0, nnodes_min=200_000, nnodes_max=200_000, nproc_per_node=8),
     f"200000 ranks (from torchrun: WORLD_SIZE 200000 / LOCAL_WORLD_SIZE 8 = 25000 nodes): netcheck takes at most "
     f"{MAX_RANKS} ranks (the rank bound; nodes up to {MAX_NODES})"),
    (with_launch(source="torchrun", node_rank=0, nnodes_min=MAX_RANKS, nnodes_max=MAX_RANKS, nproc_per_node=4),
     f"{MAX_RANKS // 4} nodes (from torchrun: WORLD_SIZE {MAX_RANKS} / LOCAL_WORLD_SIZE 4 = {MAX_RANKS // 4} nodes): "
     f"netcheck takes at most {MAX_NODES} nodes (the node bound; ranks up to {MAX_RANKS})"),
    (with_launch(source="torchrun", node_rank=16, nnodes_min=16, nnodes_max=16, nproc_per_node=8),
     "RANK 16 (from torchrun) is not below WORLD_SIZE 16"),
    (with_launch(node_rank=2), "node rank 2 (from flags) is not below nnodes 2"),
    (with_launch(source="slurm", node_rank=5, nnodes_min=4, nnodes_max=4),
     "node rank 5 (from slurm) is not below nnodes 4"),
    (with_launch(nproc_per_node=0), "--nproc-per-node 0: must be 1 to 1024"),
    (dataclasses.replace(GOOD, run_id="a/b"), "--rdzv-id 'a/b': 1-128 characters, no '/'"),
    (dataclasses.replace(GOOD, run_id=""), "--rdzv-id '': 1-128 characters, no '/'"),
    (dataclasses.replace(GOOD, run_id="x" * 129), f"--rdzv-id '{'x' * 129}': 1-128 characters, no '/'"),
    # The bandwidth numbers, held to what a run can mean however the Config was made.
    (with_sweep(expect_busbw=float("nan")), f"--expect-busbw nan: {EXPECT_RANGE}"),
    (with_sweep(expect_busbw=float("inf")), f"--expect-busbw inf: {EXPECT_RANGE}"),
    (with_sweep(expect_busbw=0.0), f"--expect-busbw 0: {EXPECT_RANGE}"),
    (with_sweep(expect_busbw=-2.5), f"--expect-busbw -2.5: {EXPECT_RANGE}"),
    (with_sweep(expect_busbw=1e5), f"--expect-busbw 100000: {EXPECT_RANGE}"),
    (with_sweep(budget_s=float("nan")), f"--bw-budget nan: {BUDGET_RANGE}"),
    (with_sweep(budget_s=float("inf")), f"--bw-budget inf: {BUDGET_RANGE}"),
    (with_sweep(budget_s=-1.0), f"--bw-budget -1: {BUDGET_RANGE}"),
    (with_sweep(budget_s=0.01), f"--bw-budget 0.01: {BUDGET_RANGE}"),
    (with_sweep(budget_s=3601.0), f"--bw-budget 3601: {BUDGET_RANGE}"),
    # With every other value right, a missing endpoint is the mistake; with another one, not.
    (dataclasses.replace(GOOD, rdzv=NO_ENDPOINT), RDZV_REQUIRED),
    (dataclasses.replace(GOOD, rdzv=NO_ENDPOINT, timeout=-1.0),
     "--timeout -1: must be more than 0 seconds, and finite"),
])
def test_check_config_errors(config, message):
    with pytest.raises(UsageError) as caught:
        check_config(config)
    assert str(caught.value) == message


def test_an_ipv6_literal_host_is_kept_without_brackets():
    endpoint = parse_endpoint("[2001:db8::7]:29500")
    assert ipaddress.ip_address(endpoint.host) == ipaddress.ip_address("2001:db8::7")


def test_outputs_name_the_rank_and_a_node_without_one_by_its_hostname():
    outputs = Outputs(json="r-{rank}.json", html="page.html", exclude="x.txt")
    assert outputs.for_node(3, "gpu7", worker=False) == Outputs(json="r-3.json", html="page.html", exclude="x.txt")
    assert outputs.for_node(None, "gpu7", worker=False).json == "r-unranked-gpu7.json"
    # A torchrun worker other than rank 0 writes only where the path names its rank (or stdout).
    assert outputs.for_node(5, "gpu7", worker=True) == Outputs(json="r-5.json")
    assert Outputs(json="-").for_node(5, "gpu7", worker=True) == Outputs(json="-")
