"""The Doors knocked on where a sweep stops short (bandwidth/doors.py): real listeners on
loopback, one open and one closed, and the addresses that say nothing of a peer."""

from __future__ import annotations

import socket

from netcheck.bandwidth.doors import door_of, open_door, unreached
from netcheck.core.bwrecords import Door
from netcheck.core.deadline import Deadline
from netcheck.facts.linkcounters import own_addresses


def closed_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]


def test_a_door_that_answers_is_reached_and_one_that_does_not_is_named():
    door = open_door()
    assert door is not None
    try:
        port = door_of(1, door).port
        doors = {1: Door(1, ("127.0.0.1",), port), 2: Door(2, ("127.0.0.2",), closed_port())}
        assert unreached(doors, Deadline(5)) == (2,)
        # No time left to knock: nothing learnt, nobody named.
        assert unreached(doors, Deadline(0)) == ()
    finally:
        door.close()


def test_addresses_that_say_nothing_of_the_peer_are_not_knocked_on():
    shared = {1: Door(1, ("127.0.0.3",), closed_port()), 2: Door(2, ("127.0.0.3",), closed_port())}
    mine = {1: Door(1, own_addresses(), closed_port())}
    link_local = {1: Door(1, ("fe80::1",), closed_port())}
    for doors in (shared, mine, link_local):
        assert unreached(doors, Deadline(5)) == (), doors
