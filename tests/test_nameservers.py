"""How long glibc's resolver waits (facts/nameservers.py): resolv.conf read as glibc reads it,
and its wait for each nameserver, a round and a lookup that no nameserver answers."""

from __future__ import annotations

import pytest

from netcheck.facts.nameservers import Resolver, parse_resolver


@pytest.mark.parametrize("text,options,expected", [
    ("", "", Resolver(("127.0.0.1",), 5, 2)),                                   # glibc's defaults
    ("nameserver 10.0.0.53\n", "", Resolver(("10.0.0.53",), 5, 2)),
    ("nameserver 10.0.0.53\noptions timeout:1 attempts:1\n", "", Resolver(("10.0.0.53",), 1, 1)),
    ("nameserver 10.0.0.53\noptions timeout:1\n", "timeout:3 rotate", Resolver(("10.0.0.53",), 3, 2)),
    ("options timeout:90 attempts:9\n", "", Resolver(("127.0.0.1",), 30, 5)),   # RES_MAXRETRANS, RES_MAXRETRY
    ("".join(f"nameserver 10.0.0.{i}\n" for i in range(5)), "", Resolver(("10.0.0.0", "10.0.0.1", "10.0.0.2"), 5, 2)),
])
def test_resolv_conf_is_read_as_glibc_reads_it(text, options, expected):
    assert parse_resolver(text, options) == expected


def test_a_lookup_no_nameserver_answers_waits_every_round_for_every_server():
    """res_send.c's send_dg: the first server the timeout, the one at index i (timeout << i) / count."""
    assert Resolver(("a",), 5, 2).lookup_wait == 10.0
    assert [Resolver(("a", "b"), 5, 1).server_wait(i) for i in range(2)] == [5.0, 5.0]
    three = Resolver(("a", "b", "c"), 5, 2)
    assert [three.server_wait(i) for i in range(3)] == [5.0, 3.0, 6.0]
    assert three.round_wait == 14.0 and three.lookup_wait == 28.0
    assert Resolver(("a", "b", "c"), 1, 1).server_wait(1) == 1.0   # at least a second
