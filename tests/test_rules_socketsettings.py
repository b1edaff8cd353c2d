"""The *_SOCKET_IFNAME settings (rules/socketsettings.py): a user's value checked against a node's
interfaces, and the recommended values written in each library's syntax. The interfaces are
test_rules_socketchoice's."""

from __future__ import annotations

import pytest

from netcheck.rules.socketsettings import format_gloo_values, format_nccl_value, validate_setting
from test_rules_socketchoice import MAX_IFS, NODE


@pytest.mark.parametrize(
    "var, value, expected",
    [
        ("NCCL_SOCKET_IFNAME", "10.0.0.5", "holds an IP address (10.0.0.5, on eno1)"),
        ("NCCL_SOCKET_IFNAME", "^10.0.0.5:1", "holds an IP address"),
        ("NCCL_SOCKET_IFNAME", "ens", "matches no interface on this node (lo, eno1, ib0, eth9, ifb0)"),
        ("NCCL_SOCKET_IFNAME", "eth,ifb", "matches eth9, ifb0, none running with an IP address"),
        ("NCCL_SOCKET_IFNAME", "e", "ignored"),
        ("GLOO_SOCKET_IFNAME", "10.0.0.5", 'fails with "Unable to find address for: 10.0.0.5"'),
        ("GLOO_SOCKET_IFNAME", "eno", "exact names"),
        ("GLOO_SOCKET_IFNAME", "eno", "did you mean eno1?"),
        ("GLOO_SOCKET_IFNAME", "eno1,ens5", "no interface 'ens5' with an IP address here (lo, eno1"),
        ("GLOO_SOCKET_IFNAME", "eth9", "eth9 is not running"),
        ("GLOO_SOCKET_IFNAME", "ifb0", "no interface 'ifb0' with an IP address"),
        ("GLOO_SOCKET_IFNAME", "eno1,,ib0", "empty entry"),
        ("GLOO_SOCKET_IFNAME", "", "ignored"),
        ("TP_SOCKET_IFNAME", "eno1,ib0", "takes one interface name"),
        ("TP_SOCKET_IFNAME", "10.1.0.5", "holds an IP address (10.1.0.5, on ib0)"),
        ("TP_SOCKET_IFNAME", "eth0", "silently falls back to 127.0.0.1"),
        ("TP_SOCKET_IFNAME", "", "silently falls back to 127.0.0.1"),
        ("TP_SOCKET_IFNAME", "eth9", "eth9 is not running; TensorPipe skips it"),
    ],
)
def test_validate_setting_problems(var, value, expected):
    problem = validate_setting(var, value, NODE)
    assert problem is not None and (problem.var, problem.value) == (var, value)
    assert expected in problem.reason
    assert "\n" not in problem.reason


@pytest.mark.parametrize(
    "var, value",
    [
        ("NCCL_SOCKET_IFNAME", "eno"),
        ("NCCL_SOCKET_IFNAME", "^lo,docker"),
        ("NCCL_SOCKET_IFNAME", "=eno1,ens5"),   # a name missing here may exist on other nodes
        ("GLOO_SOCKET_IFNAME", "eno1,ib0"),
        ("TP_SOCKET_IFNAME", "ib0"),
    ],
)
def test_validate_setting_accepts_working_values(var, value):
    assert validate_setting(var, value, NODE) is None


def test_validate_setting_rejects_other_variables():
    with pytest.raises(ValueError, match="NCCL_IB_HCA"):
        validate_setting("NCCL_IB_HCA", "mlx5", NODE)


@pytest.mark.parametrize(
    "working, every, expected",
    [
        ([["eth0"], ["eth0"]], None, "eth0"),
        ([["eno1"], ["ens5"]], None, "=eno1,ens5"),
        ([["eno1", "ib0"], ["ens5", "ib0"]], None, "ib0"),
        ([["eth0"], ["eth0"]], [["eth0", "eth0.100"], ["eth0"]], "=eth0"),  # the prefix catches eth0.100
        ([["eth0", "eth0.5"], ["eth0"]], None, "eth0"),                    # it catches eth0.5, which works
        ([["a0", "ib0"], ["ib0"], ["b0"]], None, "=ib0,b0"),
        ([["e"], ["e"]], None, "=e"),                                        # 1 character is ignored
        ([["eth0"], ["eth1"]], [["eth0"], ["eth0", "eth1"]], None),          # eth0 exists, unwired, on node 1
        ([["eth0"], []], None, None),
        ([], None, None),
        ([[f"n{i}"] for i in range(MAX_IFS + 1)], None, None),
    ],
)
def test_format_nccl_value(working, every, expected):
    assert format_nccl_value(working, every) == expected


@pytest.mark.parametrize(
    "working, expected",
    [
        ([["eth0", "ib0"], ["ib0", "eth0"]], ["eth0", "eth0"]),
        ([["eno1"], ["ens5"]], ["eno1", "ens5"]),
        ([["eno1"], []], ["eno1", None]),
    ],
)
def test_format_gloo_values(working, expected):
    assert format_gloo_values(working) == expected
