"""Where torch's API differs across the supported releases: every seam in one place, each
chosen by detecting the capability, never by comparing version numbers. The versions are
those each behaviour was seen on (the compatibility matrix: 2.1.2, 2.4.1, 2.8.0, 2.13.0, 2.15.0).

- A TCPStore server on a listening socket (master_listen_fd): the libuv backend, the
  default since 2.4, refuses one (NotImplementedError, 2.4.1); 2.8.0 on take it. The
  legacy backend (use_libuv=False, a keyword since 2.1) always does.
- Store.check: absent on 2.1.2 (2.4.1 on have it). compare_set with a sentinel never
  stored answers the same question without writing.
- DistNetworkError: absent on 2.1.2, where a lost store connection is a plain
  RuntimeError carrying the socket's error.
- TCPStore timeouts: whole seconds on 2.1.2 and 2.4.1, where one under 1 s fails the
  connect at once ("timed out after 0s"), the server's connection to itself included;
  2.8.0 on take fractions. Stores are built with at least CONNECT_FLOOR, then set_timeout
  gives them the real one.
- new_group(device_id=): absent on 2.1.2 and 2.4.1, present on 2.8.0 on: without it NCCL
  sets its communicator up lazily, in the first collective.
- Importing torch without numpy (torch does not require it) warns "Failed to initialize
  NumPy" on every release: noise in a report users paste into tickets, silenced.
- torch's own output, none of which may reach the terminal (import_distributed silences it
  all): c10's C++ log, where c10d writes a line and a C++ stack trace ("TCP client failed to
  connect/validate ... frame #0: c10::Error::Error") for every failed store connect and
  request. c10 reads its level from TORCH_CPP_LOG_LEVEL once, as the library loads (2.1.2 on),
  so it is FATAL for the import and the user's value again after it (the env phase compares
  theirs). Python warnings raised in torch's modules, and torch's Python loggers, which
  without a handler print through logging's last resort. What went wrong is in the
  exceptions, whose first line netcheck's findings quote.
"""

from __future__ import annotations

import datetime
import inspect
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from netcheck.core.deadline import Deadline
from netcheck.core.errors import NetcheckError
from netcheck.core.storeerrors import ReplyTimedOut, StoreError, StoreLost

# Never a stored value: netcheck stores JSON text and hex MACs, neither holds a NUL.
_ABSENT = "\x00netcheck:absent\x00"

# The socket errors a store client raises once its connection is gone, as torch without
# DistNetworkError words them (2.1.2: "Connection reset by peer", "Broken pipe", and
# "Socket Timeout" for a reply past SO_RCVTIMEO).
_TIMED_OUT = "Socket Timeout"
_LOST_MESSAGES = ("Connection reset by peer", "Broken pipe", _TIMED_OUT, "Connection refused",
                  "Connection closed", "Failed to recv", "Transport endpoint is not connected")


class TorchUnusable(NetcheckError):
    """This node's torch cannot run netcheck's phases; the message says which and why."""


class TorchSlow(TorchUnusable):
    """torch's import was not done by the deadline of the phase that needs it."""


_loading: threading.Thread | None = None
_loaded: dict[str, Any] = {}   # "dist": the module, or "error": the TorchUnusable the import raised


def start_import() -> None:
    """Import torch.distributed in the background from now, so that waiting for it (seconds of
    CPU on a loaded node) is bounded by the deadline of the phase that needs it. Started once
    the reach probe has answered (it answers before torch loads), after the local phase, which
    reads the environment the import changes for a moment (TORCH_CPP_LOG_LEVEL). A signal still
    stops the run: it lands in the main thread."""
    global _loading
    if _loading is None:
        _loading = threading.Thread(target=_load, name="netcheck-import-torch", daemon=True)
        _loading.start()


def _load() -> None:
    try:
        _loaded["dist"] = _import_distributed()
    except TorchUnusable as e:
        _loaded["error"] = e
    except BaseException as e:  # noqa: BLE001 - said by the phase that waits for it
        _loaded["error"] = TorchUnusable(f"torch's import failed: {type(e).__name__}: {e}")


def import_distributed(deadline: Deadline | None = None) -> ModuleType:
    """torch.distributed. Where start_import began the import, it is waited for until
    `deadline` (TorchSlow past it): Python's import cannot be cut short, but waiting for it
    can, so --timeout bounds the run however long torch takes to load."""
    if _loading is None:
        return _import_distributed()
    started = time.monotonic()
    _loading.join(None if deadline is None else deadline.remaining())
    if _loading.is_alive():
        raise TorchSlow(f"torch's import was still running after {time.monotonic() - started:.1f} s more of "
                        "waiting, at the phase's deadline: this node is loaded (other processes on its CPUs) "
                        "or its filesystem is slow")
    if "error" in _loaded:
        raise _loaded["error"]
    return _loaded["dist"]


def _import_distributed() -> ModuleType:
    """torch.distributed, imported late and quietly: the probe must answer before torch loads."""
    try:
        with _cpp_log_level("FATAL"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
            _import_numpy_first()
            import torch
            import torch.distributed as dist
    except (ImportError, OSError) as e:  # not installed, or a broken install (a missing .so)
        raise TorchUnusable(f"torch cannot be imported here: {type(e).__name__}: {e}") from None
    if not dist.is_available():
        raise TorchUnusable(f"torch {torch.__version__} is built without torch.distributed") from None
    warnings.filterwarnings("ignore", module=r"torch(\.|$)")
    logging.getLogger("torch").addHandler(logging.NullHandler())
    logging.getLogger("torch").propagate = False
    return dist


def _import_numpy_first() -> None:
    """numpy, where installed, imported before torch is. torch's C++ start-up imports it
    otherwise and clears whatever exception that raises (then warns "Failed to initialize
    NumPy"): a KeyboardInterrupt raised there, by a Ctrl-C or a SIGTERM that lands in those
    seconds, is lost and the run goes on as if never stopped (2.13: one host interrupt in
    three mid-import; none in 58 once numpy was in first). Here it stops the run as anywhere."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass


@contextmanager
def _cpp_log_level(level: str) -> Iterator[None]:
    """TORCH_CPP_LOG_LEVEL at `level` while c10 loads (it reads it then), the user's after."""
    users = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = level
    try:
        yield
    finally:
        if users is None:
            del os.environ["TORCH_CPP_LOG_LEVEL"]
        else:
            os.environ["TORCH_CPP_LOG_LEVEL"] = users


def eager_device(dist: ModuleType, device: object) -> dict[str, object]:
    """new_group's keyword that makes NCCL set up its communicator at once, where it has one."""
    return {"device_id": device} if "device_id" in inspect.signature(dist.new_group).parameters else {}


CONNECT_FLOOR = datetime.timedelta(seconds=1)


def connect_timeout(timeout: datetime.timedelta) -> datetime.timedelta:
    return max(timeout, CONNECT_FLOOR)


def server_store(dist: ModuleType, port: int, timeout: datetime.timedelta, listen_fd: int) -> Any:
    """A TCPStore server that takes over listen_fd (an IPv4/IPv6 socket already listening)."""
    args = ("0.0.0.0", port, None, True, connect_timeout(timeout))
    try:
        store = dist.TCPStore(*args, wait_for_workers=False, master_listen_fd=listen_fd)
    except NotImplementedError:
        # The default (libuv) backend takes no listen fd; the descriptor is still ours.
        store = dist.TCPStore(*args, wait_for_workers=False, master_listen_fd=listen_fd,
                              use_libuv=False)
    store.set_timeout(timeout)
    return store


def has_key(store: Any, key: str) -> bool:
    check = getattr(store, "check", None)
    if check is not None:
        return check([key])
    # compare_set(key, X, X) writes nothing unless the key holds X already (then X again),
    # and answers X when the key is absent, the stored value otherwise.
    return store.compare_set(key, _ABSENT, _ABSENT) != _ABSENT.encode()


def has_keys(store: Any, keys: list[str]) -> bool:
    """Whether every key exists, in one request where the store can (check takes a list)."""
    check = getattr(store, "check", None)
    if check is not None:
        return check(keys)
    return all(has_key(store, k) for k in keys)


def list_keys(store: Any) -> tuple[str, ...] | None:
    """Every key the store lists (torch 2.13 and later); None where this torch cannot list."""
    lister = getattr(store, "list_keys", None)
    return tuple(lister()) if lister is not None else None


def store_error(error: RuntimeError | OSError) -> StoreError:
    """torch's error of a store request as netcheck's (core.storeerrors), its message kept:
    the one place torch's words for it are read."""
    if isinstance(error, StoreError):
        return error
    kind = ReplyTimedOut if reply_timed_out(error) else StoreLost if store_lost(error) else StoreError
    return kind(str(error), error)


def reply_timed_out(error: BaseException) -> bool:
    """A store client's request whose reply did not come within the socket's receive timeout
    (netcheck's SO_RCVTIMEO): not refused, not reset; the store may still be there."""
    if isinstance(error, ReplyTimedOut):
        return True
    return store_lost(error) and _TIMED_OUT in str(error)


def store_lost(error: BaseException) -> bool:
    """A store client's connection broke mid-run: the host died, or the path to it."""
    if isinstance(error, (ConnectionError, StoreLost)):
        return True
    if isinstance(error, StoreError):
        return False
    dist = sys.modules.get("torch.distributed")
    network_error = getattr(dist, "DistNetworkError", None)
    if network_error is not None:
        return isinstance(error, network_error)
    return isinstance(error, RuntimeError) and any(m in str(error) for m in _LOST_MESSAGES)
