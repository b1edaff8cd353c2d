"""Never past --timeout, as a property of the code: every request to torch's store is made on a
thread its caller waits for to a bound (facts.bounded), and every socket netcheck opens has a
timeout. Three walks prove it: the source, for each place a torch store is asked something or
a socket is made (each allowed place says how it is bounded); every method of Exchange, called
for real against a store whose process is stopped; and the Caller itself."""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

from netcheck.cluster.compat import import_distributed
from netcheck.cluster.store import Exchange
from netcheck.core import codec
from netcheck.core.deadline import Deadline
from netcheck.core.storeerrors import StoreError
from netcheck.core.storekeys import Key
from netcheck.facts.bounded import Caller, Overran

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "netcheck"

# torch's store requests, by their method names in every release netcheck supports.
STORE_METHODS = {"set", "get", "add", "multi_get", "multi_set", "append", "check", "num_keys", "delete_key",
                 "wait", "compare_set", "set_timeout", "queue_push", "queue_pop", "list_keys"}

# Each place in the package that asks a torch store something or makes one, and what bounds it.
# Transport._request asks by the method's name (getattr): it is the Caller's, and not listed.
BOUNDED_STORE_SITES = {
    ("bandwidth/worker.py", "Harness.control"):
        "a worker process: its node's Watch kills it when silent (BW_STUCK_AFTER) or at the phase's end",
    ("cluster/jobstore.py", "read_job_store"):
        "inspect's: called only under call_with_timeout (inspect.job._bounded_read, inspect.traces.inspect_live)",
    ("cluster/jobstore.py", "read_round"):
        "inspect's: called only under call_with_timeout (inspect.job)",
    ("cluster/storeconnect.py", "client_try.construct"): "made under call_with_timeout (client_try)",
    ("cluster/compat.py", "server_store"): "made under call_with_timeout (storeconnect.host_store)",
    ("cluster/compat.py", "has_key"): "called through Transport.call, or by jobstore's bounded readers",
    ("cluster/compat.py", "has_keys"): "called through Transport.call",
    ("cluster/compat.py", "list_keys"): "called by jobstore's bounded readers",
}


def _receiver(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _store_functions(tree: ast.Module) -> set[str]:
    """compat's functions that take a store first: each is a request when called."""
    return {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.args.args
            and f.args.args[0].arg == "store"}


def _walk(visit) -> None:
    """visit(path, the function's dotted name, call) for every call in the package."""
    class Visitor(ast.NodeVisitor):
        def __init__(self, module: str):
            self.module, self.stack = module, []

        def visit_ClassDef(self, node):
            self.stack.append(node.name)
            self.generic_visit(node)
            self.stack.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef

        def visit_Call(self, node):
            visit(self.module, ".".join(self.stack), node)
            self.generic_visit(node)

    for path in sorted(PACKAGE.rglob("*.py")):
        Visitor(path.relative_to(PACKAGE).as_posix()).visit(ast.parse(path.read_text()))


def store_sites() -> set[tuple[str, str]]:
    """(module, function) of every place that makes a torch store or asks one something."""
    requests = _store_functions(ast.parse((PACKAGE / "cluster" / "compat.py").read_text()))
    found: set[tuple[str, str]] = set()

    def visit(module: str, function: str, call: ast.Call) -> None:
        f = call.func
        if isinstance(f, ast.Attribute) and (
                f.attr == "TCPStore" or (f.attr in STORE_METHODS and "store" in _receiver(f.value).lower())
                or (f.attr in requests and _receiver(f.value) == "compat")):
            found.add((module, function))
        elif isinstance(f, ast.Name) and f.id in requests and module == "cluster/compat.py":
            found.add((module, function))
        elif isinstance(f, ast.Name) and f.id == "getattr" and len(call.args) >= 2 and \
                "store" in _receiver(call.args[0]).lower() and isinstance(call.args[1], ast.Constant) and \
                call.args[1].value in STORE_METHODS:   # a method looked up to be called
            found.add((module, function))

    _walk(visit)
    return found


def test_every_torch_store_request_is_made_where_a_bound_holds_it():
    found = store_sites()
    assert found - set(BOUNDED_STORE_SITES) == set(), "a store request outside the Caller: bound it, then list it"
    assert set(BOUNDED_STORE_SITES) - found == set(), "listed places that no longer ask the store"


def test_the_walk_finds_a_store_request_written_anywhere(tmp_path, monkeypatch):
    """The walk itself: a module that asks a store directly is caught."""
    planted = PACKAGE / "rules" / "_planted_for_test.py"
    planted.write_text("def peek(store):\n    return store.get('k')\n")
    try:
        assert ("rules/_planted_for_test.py", "peek") in store_sites()
    finally:
        planted.unlink()


# Sockets made with no timeout, and why nothing on them blocks.
UNTIMED_SOCKETS = {"facts/probe.py source_toward": "a datagram socket connected to learn its source: nothing "
                                                   "is sent or received"}


def test_every_socket_netcheck_opens_is_given_a_timeout():
    """A socket made (not a copy of a descriptor) is given a timeout, or made non-blocking, in the
    function that makes it; create_connection is given one."""
    unbounded: list[str] = []

    def visit(module: str, function: str, call: ast.Call) -> None:
        f = call.func
        if not (isinstance(f, ast.Attribute) and _receiver(f.value) == "socket"):
            return
        keywords = {k.arg for k in call.keywords}
        if (f.attr == "create_connection" and "timeout" not in keywords) or (
                f.attr == "socket" and "fileno" not in keywords and not _sets_timeout(module, function)):
            unbounded.append(f"{module} {function}")

    _walk(visit)
    assert sorted(set(unbounded) - set(UNTIMED_SOCKETS)) == []
    assert set(UNTIMED_SOCKETS) <= set(unbounded), "a listed socket that is no longer made: unlist it"


def _sets_timeout(module: str, function: str) -> bool:
    """Whether `function` in `module` gives a socket a timeout (directly, or through a helper of
    the module whose name says it bounds: mesh._bounded) or makes it non-blocking."""
    tree = ast.parse((PACKAGE / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function.split(".")[-1]:
            calls = [c.func for c in ast.walk(node) if isinstance(c, ast.Call)]
            names = {c.attr if isinstance(c, ast.Attribute) else getattr(c, "id", "") for c in calls}
            return bool(names & {"settimeout", "setblocking", "_bounded"})
    return False


# --- the Caller ---------------------------------------------------------------------------

def test_a_call_past_its_bound_is_given_up_and_the_next_one_runs_on_a_new_thread():
    caller, held = Caller("test"), threading.Event()
    began = time.monotonic()
    with pytest.raises(Overran):
        caller.call(held.wait, (), 0.3)
    assert 0.3 <= time.monotonic() - began < 2.0
    assert caller.call(lambda a, b: a + b, (2, 3), 1.0) == 5, "not queued behind the call still held"
    held.set()


def test_a_call_s_own_error_is_raised_in_its_caller():
    with pytest.raises(KeyError):
        Caller("test").call({}.__getitem__, ("missing",), 1.0)


# --- every Exchange method against a stopped store -------------------------------------------

SERVER = """
import datetime, sys
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60), wait_for_workers=False)
print(s.port, flush=True)
sys.stdin.read()
"""

# What each method of Exchange that asks the store is called with here; the others ask nothing.
# torch sends a set or an append and waits for no answer: the kernel takes it, and it returns.
SENT_UNANSWERED = {"put", "put_many", "post", "enlist"}
NO_REQUEST = {"key", "listing", "pace", "stalled_seconds", "clearing", "keep_clearing", "within"}
# Keys of the walk's own: a value, a counter, a list, a collected name.
K, N, L, P = Key("k", int), Key("n", int), Key("l", str), Key("p", int)


def _calls(ex: Exchange, deadline: Deadline) -> dict:
    k = ex.key(K)
    return {
        "put": lambda: ex.put(k, 1), "put_many": lambda: ex.put_many({k: 1}),
        "restore": lambda: ex.restore(at_once=True), "has": lambda: ex.has(k),
        "has_all": lambda: ex.has_all([k]), "add_to": lambda: ex.add_to(ex.key(N), 1),
        "read_counter": lambda: ex.read_counter(ex.key(N)), "read": lambda: ex.read(k),
        "post": lambda: ex.post(P, 1, 1), "enlist": lambda: ex.enlist(ex.key(L), "1"),
        "listed": lambda: ex.listed(ex.key(L), 100), "raw": lambda: ex.raw(k), "drop": lambda: ex.drop(k),
        "posted": lambda: ex.posted(P), "read_counters": lambda: ex.read_counters([ex.key(N)]),
        "read_many": lambda: ex.read_many([k]), "read_each": lambda: list(ex.read_each([k])),
        "wait_read": lambda: ex.wait_read(k, deadline),
        "wait_read_valid": lambda: ex.wait_read_valid(k, deadline), "wait": lambda: ex.wait(k, deadline),
    }


def test_the_walk_of_exchange_covers_every_method():
    public = {name for name, _ in inspect.getmembers(Exchange, inspect.isfunction) if not name.startswith("_")}
    ex = Exchange(None, "netcheck", end=Deadline(1))
    assert set(_calls(ex, Deadline(1))) | NO_REQUEST == public


@pytest.mark.compat
def test_every_exchange_request_ends_by_the_run_s_end_when_the_store_s_process_is_stopped():
    """The host's own case, which torch does not bound: a store client with no receive timeout,
    its server's process stopped (SIGSTOP) once every client is connected. Each method runs on
    an Exchange of its own (one past the end loses the store), all at once, with the run's end
    1.5 s away: each returns or raises a store error by then, give or take a second."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        dist = import_distributed()
        clients = {}
        for name in _calls(Exchange(None, "netcheck", end=Deadline(1)), Deadline(1)):
            store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=60))
            ex = clients[name] = Exchange(store, "netcheck", end=Deadline(60))
            ex.put(ex.key(K), 1, guard=True)   # a value for the reads, and a guarded key for restore
            ex.put(ex.key(N), 1)
        os.kill(server.pid, signal.SIGSTOP)
        end = Deadline(1.5)
        outcomes: dict[str, object] = {}

        def call(name: str) -> None:
            ex = clients[name]
            try:
                with ex.within(end):
                    outcomes[name] = _calls(ex, end)[name]()
            except (StoreError, TimeoutError, codec.DecodeError) as e:
                outcomes[name] = e

        threads = [threading.Thread(target=call, args=(n,), daemon=True) for n in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, end.at + 1.0 - time.monotonic()))
        late = sorted(n for n, t in zip(clients, threads) if t.is_alive())
        assert late == [], f"past the run's end: {late}"
        # A store error of any kind (torch's own wait may time out first on a loaded machine,
        # a store error that is not a loss) or a timeout: each ended by the run's end.
        assert all(isinstance(outcomes[n], (StoreError, TimeoutError)) or (n in SENT_UNANSWERED and outcomes[n] is None)
                   for n in clients), outcomes
    finally:
        server.kill()
        server.wait()
