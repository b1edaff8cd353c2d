"""Blocking calls that cannot outlast their bound, whatever the callee does: the one way
netcheck calls into torch's store or a lookup ("never past --timeout").

A call into C (torch's store client, getaddrinfo) cannot be interrupted from Python, and its
own timeouts fall short: a store request over a port that a firewall rule has closed since the
rendezvous sits in recv for as long as TCP retries (minutes, on the host's own client, which
has no receive timeout). So the call runs on a daemon thread, and its caller waits for it at
most its bound; past it, the thread is abandoned where it is (a daemon thread never holds up
the exit) and the caller is told. torch releases the GIL in its store calls, so the waiting
caller runs.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from netcheck.core.errors import NetcheckError


def call_with_timeout(fn: Callable[[], Any], timeout: float) -> tuple[Any, BaseException | None]:
    """Run one blocking call on a thread of its own: (result, error), or (None, TimeoutError)
    where it did not return within `timeout`."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except Exception as e:  # noqa: BLE001 - handed to the caller, who names it
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return None, TimeoutError(f"no answer in {timeout:g} s")
    return box.get("result"), box.get("error")


class Overran(NetcheckError, TimeoutError):
    """A call did not return within its bound; its thread was left where it was."""


class Caller:
    """One daemon thread that makes an owner's blocking calls in turn, each waited for at most
    its bound: a thread per call cost 80 us, a hand-over to this one 6 us (a store request
    takes 22: benchmarks/RESULTS.md). After an overrun its thread is left inside the call, and
    the next call starts a new one."""

    def __init__(self, name: str):
        self.name = name
        self._jobs: queue.SimpleQueue | None = None

    def call(self, fn: Callable[..., Any], args: tuple, seconds: float) -> Any:
        """fn(*args)'s result, or its error raised here; Overran past `seconds`."""
        jobs = self._jobs
        if jobs is None:
            jobs = self._jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(jobs,), name=self.name, daemon=True).start()
        box: list = []
        done = threading.Event()
        jobs.put((fn, args, box, done))
        if not done.wait(max(0.0, seconds)):
            self._jobs = None
            jobs.put(None)   # the abandoned thread ends there, should its call ever return
            raise Overran(f"no answer in {seconds:.1f} s")
        ok, value = box[0]
        if ok:
            return value
        raise value


def _serve(jobs: queue.SimpleQueue) -> None:
    while (job := jobs.get()) is not None:
        fn, args, box, done = job
        try:
            box.append((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            box.append((False, e))
        done.set()
