"""How long glibc's resolver waits (facts/nameservers.py): resolv.conf read as glibc reads it,
and its wait for each nameserver, a round and a lookup that no nameserver answers."""

from __future__ import annotations

import pytest

from netcheck.facts.nameservers import Resolver, _ask_nameserver, parse_resolver


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


def test_a_lookup_waits_every_round_for_the_servers_that_do_not_answer_it():
    """An ICMP error a router rations leaves a query as unanswered as a silent server's."""
    three = Resolver(("a", "b", "c"), 5, 2)
    assert three.wait_for({"b"}) == 6.0 and three.wait_for({"a", "c"}) == 22.0 and three.wait_for(set()) == 0.0


def test_a_refusal_on_loopback_is_not_rationed():
    """The kernel rations no ICMP error on loopback: a local nameserver's refusal comes every time
    (or it answers: either way no lookup waits for it)."""
    answered: dict[str, float | None] = {}
    unreachable: set[str] = set()
    _ask_nameserver("127.0.0.1", 2.0, answered, unreachable, {})
    assert unreachable == set() and answered["127.0.0.1"] is not None
