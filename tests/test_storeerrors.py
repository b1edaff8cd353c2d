"""torch's store errors, translated once into netcheck's family (core.storeerrors): the kind
each is, and the words kept."""

from __future__ import annotations

import pytest

from netcheck.cluster import compat
from netcheck.cluster.storewire import WireError
from netcheck.core.storeerrors import (
    ConnectTimedOut,
    Interfered,
    RendezvousError,
    ReplyTimedOut,
    StoreError,
    StoreLost,
    first_line,
)


def _network_error(text: str) -> RuntimeError:
    """torch's own lost-connection error (a plain RuntimeError on a torch without it)."""
    return getattr(compat.import_distributed(), "DistNetworkError", RuntimeError)(text)


@pytest.mark.parametrize("make, kind", [
    (lambda: _network_error("recvValue failed: Socket Timeout\nException raised from ..."), ReplyTimedOut),
    (lambda: _network_error("Connection reset by peer"), StoreLost),
    (lambda: ConnectionResetError(104, "Connection reset by peer"), StoreLost),
    (lambda: RuntimeError("key foo has no value: wait timeout after 30 ms"), StoreError),
])
def test_a_torch_error_becomes_netchecks_with_its_words(make, kind):
    torch_error = make()
    error = compat.store_error(torch_error)
    assert type(error) is kind and error.original is torch_error
    assert first_line(error) == first_line(torch_error)
    assert compat.store_lost(error) == compat.store_lost(torch_error)
    assert compat.reply_timed_out(error) == compat.reply_timed_out(torch_error)


def test_an_empty_message_is_named_by_torchs_type():
    assert first_line(compat.store_error(RuntimeError(""))) == "RuntimeError"


def test_netchecks_own_errors_fit_the_family():
    assert compat.store_error(WireError("gone")).__class__ is WireError
    assert isinstance(WireError("gone"), StoreLost) and isinstance(WireError("gone"), ConnectionError)
    assert isinstance(Interfered("k", "holds 'x'"), StoreError) and isinstance(Interfered("k", "x"), RendezvousError)
    assert not compat.store_lost(ConnectTimedOut("no answer")) and not compat.store_lost(Interfered("k", "x"))
