"""What an interface's link says its subnet is (facts/leases.py, facts/routes.link_prefixes):
DHCP leases as networkd, NetworkManager and dhclient save them, expired ones skipped, and the
prefixes a router advertises (the kernel's `proto ra` routes), from files and command output
built here."""

from __future__ import annotations

import os
import socket
import time

from netcheck.core.model import LinkPrefix
from netcheck.facts import leases, routes

NOW = 1_750_000_000.0


def write(path, text: str, mtime: float = NOW) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_a_networkd_lease_gives_the_address_with_its_mask(tmp_path):
    index = socket.if_nametoindex("lo")
    write(tmp_path / leases.NETWORKD / str(index), "# This is private data. Do not parse.\nADDRESS=10.1.2.7\n"
          "NETMASK=255.255.255.0\nROUTER=10.1.2.1\nLIFETIME=3600\n")
    (found,) = leases.lease_prefixes("lo", str(tmp_path), now=NOW + 60)
    assert found == LinkPrefix("10.1.2.7/24", "its DHCP lease",
                               f"{tmp_path}/{leases.NETWORKD}/{index}: address 10.1.2.7, subnet mask 255.255.255.0")
    assert leases.lease_prefixes("lo", str(tmp_path), now=NOW + 3601) == ()   # ran out: not the network's word


def test_network_managers_leases_in_both_formats(tmp_path):
    folder = tmp_path / leases.NETWORK_MANAGER
    write(folder / "internal-1234-eth0.lease", "ADDRESS=10.1.2.7\nNETMASK=255.255.254.0\n")
    write(folder / "dhclient-5678-eth0.lease", 'lease {\n  interface "eth0";\n  fixed-address 10.1.2.7;\n'
          "  option subnet-mask 255.255.255.128;\n  expire never;\n}\n")
    write(folder / "internal-1234-eth1.lease", "ADDRESS=10.9.0.7\nNETMASK=255.255.255.0\n")
    found = leases.lease_prefixes("eth0", str(tmp_path), now=NOW)
    assert [f.network for f in found] == ["10.1.2.7/25", "10.1.2.7/23"]


def test_dhclients_last_unexpired_lease_for_the_interface_wins(tmp_path):
    text = "\n".join([
        'lease {\n  interface "eth0";\n  fixed-address 10.1.2.7;\n  option subnet-mask 255.255.0.0;\n'
        "  expire 1 2020/01/06 10:00:00;\n}",
        'lease {\n  interface "eth0";\n  fixed-address 10.1.2.7;\n  option  subnet-mask 255.255.255.0;\n'
        f"  expire epoch {int(NOW) + 600}; # in ten minutes\n}}",
        'lease {\n  interface "eth1";\n  fixed-address 10.9.0.7;\n  option subnet-mask 255.255.255.0;\n}',
        'lease {\n  interface "eth0";\n  fixed-address 10.1.2.7;\n  option subnet-mask 255.255.255.240;\n'
        "  expire 3 2025/06/11 00:00:00;\n}",   # before NOW: expired
    ])
    write(tmp_path / "var/lib/dhcp/dhclient.leases", text)
    write(tmp_path / "var/lib/dhcp/dhclient6.leases", "lease6 { }")
    (found,) = leases.lease_prefixes("eth0", str(tmp_path), now=NOW)
    assert found == LinkPrefix("10.1.2.7/24", "its DHCP lease",
                               f"{tmp_path}/var/lib/dhcp/dhclient.leases: address 10.1.2.7, subnet mask 255.255.255.0")


def test_no_lease_and_unreadable_ones_give_nothing(tmp_path):
    assert leases.lease_prefixes("eth0", str(tmp_path)) == ()
    write(tmp_path / "var/lib/dhclient/dhclient-eth0.leases", "lease {\n  fixed-address 10.1.2.7;\n}\n")
    write(tmp_path / leases.NETWORK_MANAGER / "internal-1-eth0.lease", "ADDRESS=10.1.2.7\nNETMASK=nonsense\n")
    assert leases.lease_prefixes("eth0", str(tmp_path), now=time.time()) == ()


def test_the_prefixes_a_router_advertises_are_the_routes_that_expire_with_it(monkeypatch):
    asked = []

    def ip_lines(*args):
        asked.append(args)
        return ["2001:db8::/64 proto kernel metric 256 expires 86390sec pref medium",   # the kernel's, from an RA
                "2001:db8::/48 proto kernel metric 256 pref medium",                 # the node's own address's
                "2001:db8:2::/64 proto ra metric 100 pref medium",                   # NetworkManager's, from an RA
                "fe80::/64 proto kernel metric 256 pref medium",
                "default via fe80::1 proto ra metric 1024 expires 1790sec hoplimit 64 pref medium",
                "2001:db8:1::/64 via fe80::1 proto ra metric 1024 pref medium"]   # a route option: not on-link

    monkeypatch.setattr(routes, "_ip_lines", ip_lines)
    found = routes.link_prefixes("eth0", "-6")
    assert asked == [("-6", "route", "show", "table", "main", "dev", "eth0")]
    ra = "its router's advertisement"
    assert found == (LinkPrefix("2001:db8::/64", ra, "ip -6 route: 2001:db8::/64 dev eth0 proto kernel metric 256 "
                                                     "expires 86390sec pref medium"),
                     LinkPrefix("2001:db8:2::/64", ra, "ip -6 route: 2001:db8:2::/64 dev eth0 proto ra metric 100 "
                                                       "pref medium"))
