"""facts/procfds on this process's own descriptors: real sockets and files, opened and closed."""

from __future__ import annotations

import os
import socket

from netcheck.facts.procfds import fd_targets, listed, socket_fds


def test_a_socket_is_listed_while_open_and_not_after():
    a, b = socket.socketpair()
    with a, b:
        assert {a.fileno(), b.fileno()} <= socket_fds()
        fd = a.fileno()
    assert fd not in socket_fds()


def test_a_file_is_no_socket_and_its_target_is_its_path(tmp_path):
    path = tmp_path / "f"
    with open(path, "w") as f:
        assert fd_targets()[f.fileno()] == str(path)
        assert f.fileno() not in socket_fds()


def test_a_process_is_read_by_its_pid():
    a, b = socket.socketpair()
    with a, b:
        assert fd_targets(os.getpid())[a.fileno()].startswith("socket:[")


def test_a_folder_that_is_gone_lists_nothing(tmp_path):
    (tmp_path / "b").touch()
    (tmp_path / "a").touch()
    assert listed(tmp_path) == ["a", "b"]
    assert listed(tmp_path / "gone") == []
