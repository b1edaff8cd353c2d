"""launcher: --nnodes, Slurm host lists, and which launcher's variables describe the cluster."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netcheck.core.model import Launch
from netcheck.facts.launcher import MAX_HOSTS, LaunchError, detect_launch, expand_hostlist, parse_nnodes, rdzv_from_env

# --- parse_nnodes --------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("3", (3, 3)),
    ("1", (1, 1)),
    ("1:4", (1, 4)),
    ("2:2", (2, 2)),
    (" 2 ", (2, 2)),
    ("007", (7, 7)),
])
def test_parse_nnodes(text, expected):
    assert parse_nnodes(text) == expected


@pytest.mark.parametrize("text, message", [
    ("0", "--nnodes '0': need 1 <= MIN <= MAX"),
    ("0:2", "--nnodes '0:2': need 1 <= MIN <= MAX"),
    ("4:2", "--nnodes '4:2': need 1 <= MIN <= MAX"),
    ("a", "--nnodes 'a': expected N or MIN:MAX with whole numbers"),
    ("1:2:3", "--nnodes '1:2:3': expected N or MIN:MAX with whole numbers"),
    ("", "--nnodes '': expected N or MIN:MAX with whole numbers"),
    (":", "--nnodes ':': expected N or MIN:MAX with whole numbers"),
    ("1:", "--nnodes '1:': expected N or MIN:MAX with whole numbers"),
    ("-1", "--nnodes '-1': expected N or MIN:MAX with whole numbers"),
    ("+2", "--nnodes '+2': expected N or MIN:MAX with whole numbers"),
    ("2.0", "--nnodes '2.0': expected N or MIN:MAX with whole numbers"),
    ("²", "--nnodes '²': expected N or MIN:MAX with whole numbers"),    # isdigit() says yes
    ("1:³", "--nnodes '1:³': expected N or MIN:MAX with whole numbers"),
    ("٣", "--nnodes '٣': expected N or MIN:MAX with whole numbers"),    # Arabic-Indic 3
])
def test_parse_nnodes_errors(text, message):
    with pytest.raises(LaunchError) as caught:
        parse_nnodes(text)
    assert str(caught.value) == message


def test_parse_nnodes_refuses_a_number_too_long_for_int():
    with pytest.raises(LaunchError, match="expected N or MIN:MAX with whole numbers"):
        parse_nnodes("9" * 5000)


# --- expand_hostlist -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, hosts", [
    ("single", ("single",)),
    ("node[0-2]", ("node0", "node1", "node2")),
    ("gpu[01-03,07],login1", ("gpu01", "gpu02", "gpu03", "gpu07", "login1")),
    ("node[1-10]", tuple(f"node{i}" for i in range(1, 11))),       # no padding: width of "1"
    ("node[08-11]", ("node08", "node09", "node10", "node11")),      # padding kept through the carry
    ("a,b", ("a", "b")),
    ("n[1-2],m[5]", ("n1", "n2", "m5")),
    ("gpu-a100-[1-2]-ib", ("gpu-a100-1-ib", "gpu-a100-2-ib")),
    # Several ranges in one name multiply out (slurm.conf: "rack[0-63]_blade[0-41]").
    ("a[1-2]b[3-4]", ("a1b3", "a1b4", "a2b3", "a2b4")),
    ("rack[0-1]_blade[7]", ("rack0_blade7", "rack1_blade7")),
    ("", ()),
])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, message", [
    ("n[a-b]", "'n[a-b]' is not a Slurm host list (near 'n[a-b]')"),
    ("n[]", "'n[]' is not a Slurm host list (near 'n[]')"),
    ("n[0-2", "'n[0-2' is not a Slurm host list (near '[')"),
    ("n[1-2]]", "'n[1-2]]' is not a Slurm host list (near 'n[1-2]]')"),
    ("[1-2]", "'[1-2]' is not a Slurm host list (near '[')"),
    ("n[3-1]", "'n[3-1]': the range 3-1 runs backwards"),
    (f"n[1-{MAX_HOSTS + 1}]", f"'n[1-{MAX_HOSTS + 1}]': more than {MAX_HOSTS} hosts"),
    ("a[1-300]b[1-300]", f"'a[1-300]b[1-300]': more than {MAX_HOSTS} hosts"),
])
def test_expand_hostlist_rejects_what_slurm_would_not_write(text, message):
    with pytest.raises(LaunchError) as caught:
        expand_hostlist(text)
    assert str(caught.value) == message


RANGE = st.tuples(st.integers(0, 500), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1]))


@given(st.lists(RANGE, min_size=1, max_size=6), st.integers(1, 4),
       st.sampled_from(["gpu", "node-", "rack1n"]), st.sampled_from(["", "-ib"]))
def test_a_generated_range_list_expands_to_the_right_count(ranges, width, prefix, suffix):
    spec = ",".join(f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}" for lo, hi in ranges)
    hosts = expand_hostlist(f"{prefix}[{spec}]{suffix},login1")
    assert len(hosts) == sum(hi - lo + 1 for lo, hi in ranges) + 1
    assert hosts[-1] == "login1"
    expected = [f"{prefix}{n:0{width}d}{suffix}" for lo, hi in ranges for n in range(lo, hi + 1)]
    assert list(hosts[:-1]) == expected


# --- detect_launch -------------------------------------------------------------------------------

SLURM = {"SLURM_NNODES": "3", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[01-03]",
         "SLURM_JOB_ID": "4242", "SLURM_PROCID": "1"}
KUBEFLOW = {"PET_NNODES": "1:4", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "job-master-0",
            "PET_MASTER_PORT": "23456"}
TORCHRUN = {"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8",
            "GROUP_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29400"}


def test_nothing_in_the_environment_means_arrival_order():
    assert detect_launch({"HOME": "/root"}, None, None, None, local_gpus=0) == \
        Launch("arrival", None, None, None, 1)
    assert detect_launch({}, None, None, None, local_gpus=4) == Launch("arrival", None, None, None, 4)


def test_flags_win_over_every_launcher():
    env = {**SLURM, **KUBEFLOW, **TORCHRUN}
    launch = detect_launch(env, "2", 1, 2, local_gpus=8)
    assert (launch.source, launch.node_rank, launch.nnodes_min, launch.nnodes_max, launch.nproc_per_node) \
        == ("flags", 1, 2, 2, 2)
    assert launch.hostnames == ()
    assert launch.variables == env   # everything a launcher set is recorded, for the report


def test_a_node_rank_alone_is_flags_with_the_node_count_unknown():
    launch = detect_launch(SLURM, None, 0, None, local_gpus=0)
    assert (launch.source, launch.node_rank, launch.nnodes_min, launch.nnodes_max) == ("flags", 0, None, None)


def test_nnodes_alone_is_flags_with_the_rank_from_arrival():
    launch = detect_launch({}, "1:4", None, None, local_gpus=0)
    assert (launch.source, launch.node_rank, launch.nnodes_min, launch.nnodes_max) == ("flags", None, 1, 4)


def test_an_empty_nnodes_flag_is_an_error_not_unset():
    with pytest.raises(LaunchError, match="^--nnodes '': expected N or MIN:MAX"):
        detect_launch({}, "", None, None, local_gpus=0)


def test_slurm_wins_over_kubeflow_and_torchrun():
    launch = detect_launch({**SLURM, **KUBEFLOW, **TORCHRUN}, None, None, None, local_gpus=8)
    # The job's variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE) are recorded whatever the launcher.
    job = {k: TORCHRUN[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")}
    assert launch == Launch("slurm", 1, 3, 3, 8, ("gpu01", "gpu02", "gpu03"), {**SLURM, **job})


def test_kubeflow_wins_over_torchrun():
    launch = detect_launch({**KUBEFLOW, **TORCHRUN}, None, None, None, local_gpus=0)
    job = {k: TORCHRUN[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")}
    assert launch == Launch("kubeflow", 2, 1, 4, 1, (), {**KUBEFLOW, **job})


def test_every_torchrun_worker_is_seated_by_its_global_rank():
    launch = detect_launch(TORCHRUN, None, None, None, local_gpus=0)
    assert launch == Launch("torchrun", 9, 16, 16, 8, (), TORCHRUN)


def test_torchrun_without_local_world_size_uses_nproc_per_node():
    env = {k: v for k, v in TORCHRUN.items() if k != "LOCAL_WORLD_SIZE"}
    launch = detect_launch(env, None, None, 4, local_gpus=0)
    assert (launch.nnodes_min, launch.nnodes_max, launch.nproc_per_node) == (16, 16, 4)


def test_a_single_torchrun_worker():
    env = {"RANK": "0", "GROUP_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    assert detect_launch(env, None, None, None, local_gpus=0) == \
        Launch("torchrun", 0, 1, 1, 1, (), env)


def test_torchrun_needs_the_global_rank():
    env = {"GROUP_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    assert detect_launch(env, None, None, None, local_gpus=0).source == "arrival"


def test_a_launcher_needs_both_its_count_and_its_rank():
    assert detect_launch({"SLURM_NNODES": "2"}, None, None, None, 0).source == "arrival"
    assert detect_launch({"SLURM_NODEID": "0"}, None, None, None, 0).source == "arrival"
    assert detect_launch({"PET_NNODES": "2"}, None, None, None, 0).source == "arrival"
    assert detect_launch({"WORLD_SIZE": "8", "RANK": "0"}, None, None, None, 0).source == "arrival"
    # A half-set Slurm falls through to the next launcher, not to arrival.
    assert detect_launch({"SLURM_NNODES": "2", **TORCHRUN}, None, None, None, 0).source == "torchrun"


@pytest.mark.parametrize("nodelist, hostnames", [
    ("gpu[01-03]", ("gpu01", "gpu02", "gpu03")),
    ("gpu[01-02],login1", ("gpu01", "gpu02", "login1")),
    ("gpu[01-02]", ()),             # two names for three nodes: not trusted
    ("gpu[01-04]", ()),             # four names for three nodes
    ("", ()),
    ("gpu[01-03", ()),              # malformed: the names are unknown, the launch still works
    ("gpu[a-c]", ()),
])
def test_slurm_hostnames_only_when_the_list_matches_slurm_nnodes(nodelist, hostnames):
    env = {**SLURM, "SLURM_JOB_NODELIST": nodelist}
    launch = detect_launch(env, None, None, None, local_gpus=0)
    assert (launch.source, launch.node_rank, launch.nnodes_max) == ("slurm", 1, 3)
    assert launch.hostnames == hostnames


def test_slurm_without_a_nodelist_has_no_hostnames():
    env = {"SLURM_NNODES": "1", "SLURM_NODEID": "0"}
    assert detect_launch(env, None, None, None, 0) == Launch("slurm", 0, 1, 1, 1, (), env)


def test_nproc_per_node_flag_zero_is_kept_for_the_config_check_to_refuse():
    # `0 or local_gpus or 1` used to turn an explicit 0 into 1 silently.
    assert detect_launch({}, None, None, 0, local_gpus=8).nproc_per_node == 0
    assert detect_launch({}, None, None, None, local_gpus=8).nproc_per_node == 8
    assert detect_launch({}, None, None, None, local_gpus=0).nproc_per_node == 1


@pytest.mark.parametrize("env, message", [
    ({**SLURM, "SLURM_NNODES": "three"}, "SLURM_NNODES='three' is not a whole number"),
    ({**SLURM, "SLURM_NODEID": ""}, "SLURM_NODEID='' is not a whole number"),
    ({**SLURM, "SLURM_NODEID": "1.0"}, "SLURM_NODEID='1.0' is not a whole number"),
    ({**KUBEFLOW, "PET_NODE_RANK": "x"}, "PET_NODE_RANK='x' is not a whole number"),
    ({**KUBEFLOW, "PET_NNODES": "4:1"}, "--nnodes '4:1': need 1 <= MIN <= MAX"),
    ({**TORCHRUN, "WORLD_SIZE": "sixteen"}, "WORLD_SIZE='sixteen' is not a whole number"),
    ({**TORCHRUN, "LOCAL_WORLD_SIZE": "8 gpus"}, "LOCAL_WORLD_SIZE='8 gpus' is not a whole number"),
    ({**TORCHRUN, "GROUP_RANK": "None"}, "GROUP_RANK='None' is not a whole number"),
])
def test_a_launcher_variable_that_is_not_an_integer_is_a_launch_error(env, message):
    with pytest.raises(LaunchError) as caught:
        detect_launch(env, None, None, None, local_gpus=0)
    assert str(caught.value) == message


# --- rdzv_from_env --------------------------------------------------------------------------------


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"MASTER_PORT": "29500"}, None),
    ({"MASTER_ADDR": ""}, None),
    ({"MASTER_ADDR": "node0", "MASTER_PORT": "29400"}, "node0:29400"),
    ({"MASTER_ADDR": "node0"}, "node0"),                      # the default port applies later
    ({"MASTER_ADDR": "node0", "MASTER_PORT": ""}, "node0"),
    ({"MASTER_ADDR": "fd00::1", "MASTER_PORT": "29400"}, "[fd00::1]:29400"),
    ({"MASTER_ADDR": "::1"}, "[::1]"),
    ({"PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456"}, "job-master-0:23456"),
    ({"PET_MASTER_ADDR": "fd00::2", "PET_MASTER_PORT": "23456"}, "[fd00::2]:23456"),
    # torchrun's own variables win over Kubeflow's
    ({"MASTER_ADDR": "node0", "MASTER_PORT": "1", "PET_MASTER_ADDR": "pet", "PET_MASTER_PORT": "2"},
     "node0:1"),
    ({"MASTER_ADDR": "", "PET_MASTER_ADDR": "pet"}, "pet"),
])
def test_rdzv_from_env(env, expected):
    assert rdzv_from_env(env) == expected


def test_rdzv_from_env_output_parses_as_an_endpoint():
    from netcheck.config import parse_endpoint
    from netcheck.core.model import Endpoint

    assert parse_endpoint(rdzv_from_env({"MASTER_ADDR": "fd00::1", "MASTER_PORT": "29400"})) == \
        Endpoint("fd00::1", 29400)
    assert parse_endpoint(rdzv_from_env({"MASTER_ADDR": "::1"})) == Endpoint("::1", 29500)
