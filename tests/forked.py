"""netcheck started in a node by forking the test process, whose torch is already loaded.

A node's netcheck run spends about 1.4 CPU-seconds of its ~1.8 loading torch (4 s of wall
clock on a busy 2-core machine), the same bytes every time, and the suite runs hundreds of them.
Here the test process loads torch once, the way netcheck does (`compat.import_distributed`,
quiet), and each node's run is a fork of it that enters the node as `ip netns exec` and
`unshare --uts` would (its network namespace, its /sys, its /etc files, its hostname), then
runs `python -m netcheck` afresh: every netcheck module is imported anew in the child,
nothing of the test's state reaches it. The child is the test's own child, a
`subprocess.Popen` in every way a test uses (pipes, wait, signals, its own session).

What this cannot show, those runs still exec a new interpreter (`nodes.start` decides):
anything that changes how Python or torch start (PYTHON* variables, a wrapper command).
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import os
import runpy
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 1 << 19
MNT_DETACH = 2
NETNS_RUN = Path("/run/netns")
NETNS_ETC = Path("/etc/netns")
# Variables read while Python or torch start: a run that sets one execs a new interpreter.
STARTUP_VARIABLES = ("PYTHON", "TORCH_CPP_LOG_LEVEL", "LD_")

_libc = ctypes.CDLL(None, use_errno=True)


def load_torch() -> None:
    """torch, loaded in this process as netcheck loads it, before any node is forked."""
    from netcheck.cluster import compat
    compat.import_distributed()


def can_fork(env: dict[str, str | None] | None, wrapper: tuple[str, ...]) -> bool:
    return not wrapper and not any(k.startswith(STARTUP_VARIABLES) for k in env or {})


class ForkedNetcheck(subprocess.Popen):
    """`python -m netcheck ARGS` in namespace `ns` with hostname `hostname`, forked."""

    def __init__(self, ns: str, hostname: str, args: list[str], env: dict[str, str], **kw):
        load_torch()
        self._node = (ns, hostname)
        super().__init__([sys.executable, "-m", "netcheck", *args], env=env, start_new_session=True, **kw)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(self._node, list(args), env, cwd, (p2cread, c2pwrite, errwrite))
        self.pid = pid
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)


def _child(node: tuple[str, str], argv: list[str], env: dict[str, str], cwd, stdio: tuple[int, int, int]) -> None:
    """Never returns: the run's exit status, or 127 (and why, on its stderr) where the node
    could not be entered."""
    gc.freeze()   # the test's objects stay as they are: none is finalized (no fd of theirs closed) here
    code = 127
    try:
        os.setsid()
        for target, fd in enumerate(stdio):
            if fd != -1:
                os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        _reset_signals()
        _enter(*node)
        if cwd is not None:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        _show_command_line(argv)
        sys.stdin, sys.stdout, sys.stderr = (open(0, closefd=False), open(1, "w", closefd=False),
                                             open(2, "w", closefd=False))
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        for name in [m for m in sys.modules if m == "netcheck" or m.startswith("netcheck.")]:
            del sys.modules[name]
        code = _run(argv[3:])
    except BaseException:  # noqa: BLE001 - a child says why and exits, whatever it was
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _run(args: list[str]) -> int:
    """`python -m netcheck ARGS` run in this process: its exit status."""
    try:
        sys.argv = ["-m", *args]
        runpy.run_module("netcheck", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    return 0


def _reset_signals() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    # As Python's start-up leaves them.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    faulthandler.disable()   # the test's, on a descriptor the child has closed


def _show_command_line(argv: list[str]) -> None:
    """/proc/self/cmdline as the exec'd run's, which netcheck finds its own processes by (and a
    second netcheck holding the port): written over this process's own argument and
    environment strings as setproctitle(3) does (the kernel then reads one string, spaces
    between the words; psutil splits it). Run after the environment is replaced: nothing
    points at the old strings then."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    arg_start, arg_end, _, env_end = (int(f) for f in fields[45:49])   # stat's fields 48-51
    room = env_end - arg_start - 1
    text = os.fsencode(" ".join(argv))[:room]
    text = text.ljust(arg_end - arg_start, b" ")    # a NUL left at arg_end - 1 would end it there
    ctypes.memmove(arg_start, text + b"\0", len(text) + 1)


def _enter(ns: str, hostname: str) -> None:
    """What `ip netns exec NS unshare --uts` does before it execs: the namespace, a private
    mount namespace with that namespace's /sys and /etc/netns/NS files, and a hostname."""
    fd = os.open(NETNS_RUN / ns, os.O_RDONLY)
    try:
        _check(_libc.setns(fd, CLONE_NEWNET), "setns")
    finally:
        os.close(fd)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    _check(_libc.mount(b"", b"/", b"none", MS_SLAVE | MS_REC, None), "mount --make-rslave /")
    _check(_libc.umount2(b"/sys", MNT_DETACH), "umount /sys")
    _check(_libc.mount(ns.encode(), b"/sys", b"sysfs", 0, None), "mount sysfs")
    etc = NETNS_ETC / ns
    for name in sorted(os.listdir(etc)) if etc.is_dir() else []:
        _check(_libc.mount(bytes(etc / name), f"/etc/{name}".encode(), b"none", MS_BIND, None), f"bind /etc/{name}")
    socket.sethostname(hostname)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
