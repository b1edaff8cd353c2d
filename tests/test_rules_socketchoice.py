"""The NCCL / gloo / TensorPipe emulations, over hand-built NicTables."""

from __future__ import annotations

import pytest

from builders import nic
from netcheck.core.nictable import Nic, NicTable
from netcheck.rules.socketchoice import (
    MAX_IFS,
    gloo_device_addresses,
    nccl_choice,
    nccl_matches,
    parse_nccl_ifname,
    tp_interface,
)


def table(*nics: Nic) -> NicTable:
    return NicTable(nics, (), None)


LO = nic("lo", "127.0.0.1/8", "::1/128", kind="loopback")
ENO1 = nic("eno1", "10.0.0.5/24")
IB0 = nic("ib0", "10.1.0.5/16", "fe80::1/64", kind="infiniband")
DOCKER0 = nic("docker0", "172.17.0.1/16", kind="docker")
VIRBR0 = nic("virbr0", "192.168.122.1/24", kind="bridge")


def names(choice) -> list[str]:
    return [p.name for p in choice.interfaces]


# --------------------------------------------------------------------------------------
# NCCL_SOCKET_IFNAME syntax


@pytest.mark.parametrize(
    "value, prefixes, exclude, exact",
    [
        ("eth,ib", ("eth", "ib"), False, False),
        ("^docker,lo", ("docker", "lo"), True, False),
        ("=eth0,eth1", ("eth0", "eth1"), False, True),
        ("^=eth0", ("eth0",), True, True),
        ("=^eth0", ("eth0",), False, True),        # parseStringList skips the "^": no exclusion
        ("eth0:1234,ib", ("eth0", "ib"), False, False),  # the port is dropped
        (",,eth0,", ("eth0",), False, False),
        (":80,eth0", ("eth0",), False, False),
    ],
)
def test_parse_nccl_ifname(value, prefixes, exclude, exact):
    spec = parse_nccl_ifname(value)
    assert (spec.prefixes, spec.exclude, spec.exact) == (prefixes, exclude, exact)


def test_parse_keeps_at_most_sixteen_entries():
    spec = parse_nccl_ifname(",".join(f"eth{i}" for i in range(20)))
    assert len(spec.prefixes) == MAX_IFS


@pytest.mark.parametrize(
    "value, name, expected",
    [
        ("eth", "eth0", True),
        ("eth", "eth10", True),
        ("eth", "ens5", False),
        ("eth0", "eth0.100", True),       # a plain value is a prefix
        ("=eth0", "eth0.100", False),
        ("=eth0", "eth0", True),
        ("^eth", "ib0", True),
        ("^eth", "eth0", False),
        ("^=eth0", "eth0.100", True),
        ("^=eth0", "eth0", False),
        ("^=", "eth0", False),            # an empty list matches all, then "^" inverts it
        ("=", "eth0", True),
    ],
)
def test_nccl_matches(value, name, expected):
    assert nccl_matches(parse_nccl_ifname(value), name) is expected


# --------------------------------------------------------------------------------------
# NCCL's choice


def test_ib_comes_first_whatever_the_order():
    choice = nccl_choice(table(LO, ENO1, IB0), {})
    assert names(choice) == ["ib0"]
    assert choice.rule == "ib"
    assert choice.bootstrap.address == "10.1.0.5"


def test_default_skips_docker_lo_virbr():
    choice = nccl_choice(table(LO, DOCKER0, VIRBR0, ENO1), {})
    assert names(choice) == ["eno1"]
    assert choice.rule == "^docker,lo,virbr"
    assert "no running ib* interface" in choice.reason


def test_default_exclusion_is_by_prefix_so_lowpan_is_skipped_too():
    lowpan = nic("lowpan0", "10.9.0.1/24")
    assert names(nccl_choice(table(lowpan, ENO1), {})) == ["eno1"]


@pytest.mark.parametrize(
    "nics, expected",
    [
        ((LO, DOCKER0, VIRBR0), ["docker0"]),
        ((VIRBR0, LO), ["lo"]),               # lo before virbr
        ((nic("virbr0", "192.168.122.1/24"),), ["virbr0"]),
    ],
)
def test_last_resort_order_docker_then_lo_then_virbr(nics, expected):
    assert names(nccl_choice(table(*nics), {})) == expected


def test_not_running_interfaces_are_skipped():
    down_ib = nic("ib0", "10.1.0.5/16", kind="infiniband", running=False)
    down_eth = nic("eth0", "10.0.0.4/24", running=False)
    choice = nccl_choice(table(LO, down_ib, down_eth, ENO1), {})
    assert names(choice) == ["eno1"]


def test_nccl_before_2_28_3_takes_interfaces_that_are_not_running():
    # socket.cc gained "if (!(interface->ifa_flags & IFF_RUNNING)) continue;" in v2.28.3
    down_ib = nic("ib0", "10.1.0.5/16", kind="infiniband", running=False)
    assert names(nccl_choice(table(LO, down_ib, ENO1), {}, (2, 27, 7))) == ["ib0"]
    assert names(nccl_choice(table(LO, down_ib, ENO1), {}, (2, 28, 3))) == ["eno1"]


def test_getifaddrs_order_decides_and_ipv4_entries_come_first():
    v6_only = nic("eth0", "fd00::4/64")
    eth1 = nic("eth1", "10.0.1.4/24")
    eth2 = nic("eth2", "10.0.2.4/24")
    choice = nccl_choice(table(LO, v6_only, eth2, eth1), {})
    # getifaddrs lists every IPv4 address before any IPv6 one
    assert names(choice) == ["eth2", "eth1", "eth0"]
    assert choice.bootstrap.name == "eth2"


def test_first_ipv4_address_of_a_dual_stack_interface():
    dual = nic("eth0", "fd00::4/64", "10.0.0.4/24")
    assert nccl_choice(table(dual), {}).interfaces[0].address == "10.0.0.4"


def test_socket_family_filter():
    eth1 = nic("eth1", "10.0.1.4/24")
    dual = nic("eth0", "10.0.0.4/24", "fd00::4/64")
    choice = nccl_choice(table(LO, eth1, dual), {"NCCL_SOCKET_FAMILY": "AF_INET6"})
    assert [(p.name, p.address) for p in choice.interfaces] == [("eth0", "fd00::4")]


def test_unknown_family_value_filters_nothing():
    eth1 = nic("eth1", "10.0.1.4/24")
    assert names(nccl_choice(table(eth1), {"NCCL_SOCKET_FAMILY": "inet"})) == ["eth1"]


def test_ipv6_loopback_is_never_used_but_ipv4_loopback_is():
    env6 = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_SOCKET_FAMILY": "AF_INET6"}
    assert names(nccl_choice(table(LO), env6)) == []
    assert names(nccl_choice(table(LO), {"NCCL_SOCKET_IFNAME": "lo"})) == ["lo"]


def test_at_most_sixteen_interfaces():
    many = [nic(f"eth{i}", f"10.0.{i}.1/24") for i in range(20)]
    assert len(nccl_choice(table(*many), {}).interfaces) == MAX_IFS


def test_socket_ifname_prefix_exact_and_exclusion():
    eth0, eth0_vlan = nic("eth0", "10.0.0.4/24"), nic("eth0.100", "10.100.0.4/24")
    t = table(LO, eth0, eth0_vlan, IB0)
    assert names(nccl_choice(t, {"NCCL_SOCKET_IFNAME": "eth0"})) == ["eth0", "eth0.100"]
    assert names(nccl_choice(t, {"NCCL_SOCKET_IFNAME": "=eth0"})) == ["eth0"]
    assert names(nccl_choice(t, {"NCCL_SOCKET_IFNAME": "^ib,lo"})) == ["eth0", "eth0.100"]
    assert names(nccl_choice(t, {"NCCL_SOCKET_IFNAME": "^=eth0,lo"})) == ["eth0.100", "ib0"]


def test_one_character_value_is_ignored():
    choice = nccl_choice(table(LO, ENO1, IB0), {"NCCL_SOCKET_IFNAME": "e"})
    assert choice.rule == "ib"


def test_value_matching_nothing_fails_bootstrap():
    choice = nccl_choice(table(LO, ENO1), {"NCCL_SOCKET_IFNAME": "eth"})
    assert choice.interfaces == () and choice.bootstrap is None
    assert "no socket interface found" in choice.reason


# --------------------------------------------------------------------------------------
# NCCL_COMM_ID


ETH1 = nic("eth1", "192.168.1.5/24")


def test_comm_id_subnet_picks_when_no_ib():
    choice = nccl_choice(table(LO, ENO1, ETH1), {"NCCL_COMM_ID": "192.168.1.1:29500"})
    assert choice.rule == "NCCL_COMM_ID"
    assert names(choice) == ["eth1"]
    assert choice.bootstrap.name == "eth1"


def test_comm_id_bootstrap_ignores_socket_ifname_and_ib():
    env = {"NCCL_COMM_ID": "192.168.1.1:29500", "NCCL_SOCKET_IFNAME": "eno1"}
    choice = nccl_choice(table(LO, IB0, ENO1, ETH1), env)
    assert names(choice) == ["eno1"]
    assert choice.bootstrap.name == "eth1"
    assert "bootstrap uses NCCL_COMM_ID's subnet: eth1" in choice.reason
    assert nccl_choice(table(LO, IB0, ETH1), {"NCCL_COMM_ID": "192.168.1.1:1"}).bootstrap.name == "eth1"


def test_comm_id_subnet_match_ignores_link_state():
    down = nic("eth1", "192.168.1.5/24", running=False)
    choice = nccl_choice(table(LO, ENO1, down), {"NCCL_COMM_ID": "192.168.1.1:29500"})
    assert names(choice) == ["eth1"]


def test_comm_id_ipv6():
    eth2 = nic("eth2", "fd00::5/64")
    choice = nccl_choice(table(LO, ENO1, eth2), {"NCCL_COMM_ID": "[fd00::1]:29500"})
    assert choice.bootstrap.name == "eth2"


def test_comm_id_link_local_needs_its_scope():
    assert nccl_choice(table(LO, IB0), {"NCCL_COMM_ID": "[fe80::9]:1"}).bootstrap is None
    assert nccl_choice(table(LO, IB0), {"NCCL_COMM_ID": "[fe80::9%ib0]:1"}).bootstrap.name == "ib0"


def test_comm_id_on_no_local_subnet_fails_bootstrap():
    choice = nccl_choice(table(LO, ENO1), {"NCCL_COMM_ID": "master.example:29500"})
    assert names(choice) == ["eno1"]          # the socket transport falls through
    assert choice.bootstrap is None
    assert "NCCL fails at init" in choice.reason


# --------------------------------------------------------------------------------------
# gloo


def test_gloo_hostname_on_127_0_1_1_is_the_trap():
    choice = gloo_device_addresses(table(LO, ENO1, IB0), {}, ["127.0.1.1", "10.0.0.5"])
    (device,) = choice.devices
    assert (device.interface, device.address, device.loopback, device.error) == ("lo", "127.0.1.1", True, None)
    assert choice.source == "hostname"
    assert "GLOO_SOCKET_IFNAME" in choice.reason and "eno1, ib0" in choice.reason


def test_gloo_hostname_resolving_to_a_real_address():
    (device,) = gloo_device_addresses(table(LO, ENO1), {}, ["10.0.0.5"]).devices
    assert (device.interface, device.loopback) == ("eno1", False)


def test_gloo_skips_addresses_it_cannot_bind():
    (device,) = gloo_device_addresses(table(LO, ENO1), {}, ["10.9.9.9", "fe80::1", "10.0.0.5"]).devices
    assert device.address == "10.0.0.5"


def test_gloo_hostname_not_local_falls_back_to_loopback():
    choice = gloo_device_addresses(table(LO, ENO1), {}, ["10.9.9.9"])
    (device,) = choice.devices
    assert (device.interface, device.address, device.loopback) == ("lo", "127.0.0.1", True)
    assert "falls back to 127.0.0.1" in choice.reason


def test_gloo_comma_list_means_several_devices_in_that_order():
    choice = gloo_device_addresses(table(LO, ENO1, IB0), {"GLOO_SOCKET_IFNAME": "ib0,eno1"}, [])
    assert [(d.interface, d.address) for d in choice.devices] == [("ib0", "10.1.0.5"), ("eno1", "10.0.0.5")]
    assert choice.source == "GLOO_SOCKET_IFNAME"


def test_gloo_empty_entry_uses_the_hostname_and_a_trailing_comma_is_dropped():
    env = {"GLOO_SOCKET_IFNAME": "eno1,,ib0,"}
    devices = gloo_device_addresses(table(LO, ENO1, IB0), env, ["10.0.0.5"]).devices
    assert [d.interface for d in devices] == ["eno1", "eno1", "ib0"]


@pytest.mark.parametrize("value", ["eth", "10.0.0.5", "^eno1"])
def test_gloo_takes_exact_names_only(value):
    (device,) = gloo_device_addresses(table(LO, ENO1), {"GLOO_SOCKET_IFNAME": value}, []).devices
    assert device.error == f"Unable to find address for: {value}"


def test_gloo_one_character_value_is_ignored():
    assert gloo_device_addresses(table(LO, ENO1), {"GLOO_SOCKET_IFNAME": "e"}, ["10.0.0.5"]).source == "hostname"


def test_gloo_interface_first_address_any_family_any_state():
    v6 = nic("eth0", "fd00::4/64", running=False)
    (device,) = gloo_device_addresses(table(LO, v6), {"GLOO_SOCKET_IFNAME": "eth0"}, []).devices
    assert (device.address, device.error) == ("fd00::4", None)
    assert "not running" in device.reason


# --------------------------------------------------------------------------------------
# TensorPipe


def test_tp_unset_uses_the_hostname():
    assert tp_interface(table(LO, ENO1), {}, ["10.0.0.5"]).interface == "eno1"
    trap = tp_interface(table(LO, ENO1), {}, ["127.0.1.1"])
    assert (trap.interface, trap.loopback, trap.fallback) == ("lo", True, False)
    assert "TP_SOCKET_IFNAME to one of: eno1" in trap.reason
    assert tp_interface(table(LO, ENO1), {}, ["10.9.9.9"]).fallback
    unresolved = tp_interface(table(LO, ENO1), {})
    assert unresolved.address is None and "not resolved" in unresolved.reason


def test_tp_named_interface():
    choice = tp_interface(table(LO, ENO1), {"TP_SOCKET_IFNAME": "eno1"})
    assert (choice.interface, choice.address, choice.fallback) == ("eno1", "10.0.0.5", False)


@pytest.mark.parametrize("value", ["ib0", "eno1,ib0", "", "eth"])
def test_tp_falls_back_to_loopback_silently(value):
    down_ib = nic("ib0", "10.1.0.5/16", running=False)
    choice = tp_interface(table(LO, ENO1, down_ib), {"TP_SOCKET_IFNAME": value})
    assert (choice.address, choice.fallback) == ("127.0.0.1", True)


# --------------------------------------------------------------------------------------
# validate_setting

NODE = table(LO, ENO1, IB0, nic("eth9", "10.9.0.1/24", running=False), nic("ifb0"))


# --------------------------------------------------------------------------------------
# Recommendations


