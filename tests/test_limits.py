"""facts/limits.py: the limits as the kernel states them in /proc/self/limits, what that file
leaves out read by getrlimit, and the accept queue's caps."""

from __future__ import annotations

import resource

from netcheck.facts.limits import read_limits


def test_limits_are_read_from_the_proc_tree_and_the_rest_from_getrlimit(tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "self/limits").write_text("Limit Soft Limit Hard Limit Units\n"
                                          "Max locked memory 65536 65536 bytes\n"
                                          "Max stack size unlimited unlimited bytes\n")
    (tmp_path / "sys/net/core").mkdir(parents=True)
    (tmp_path / "sys/net/core/somaxconn").write_text("4096\n")
    limits = read_limits(str(tmp_path), str(tmp_path / "sys"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert (limits.memlock, limits.stack, limits.somaxconn, limits.syn_backlog) == (65536, -1, 4096, None)
    assert (limits.nofile, limits.nofile_hard) == (soft, -1 if hard == resource.RLIM_INFINITY else hard)


def test_this_process_limits_match_getrlimit():
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert read_limits().nofile == (-1 if soft == resource.RLIM_INFINITY else soft)
