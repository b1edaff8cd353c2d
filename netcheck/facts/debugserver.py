"""The live collective view: every rank's flight recorder and Python stack, from torch's debug
server (torch 2.13: `torch.distributed.debug.start_debug_server()` in the training script).

Each rank's worker server writes its URL to the job's store under `debug_server/rank<N>`
(`http://<hostname>:<port>`) and answers POST `/handler/fr_trace_json` (the CPU recorder;
`/handler/fr_trace_nccl_json` for NCCL's) and POST `/handler/dump_traceback` (every thread's
stack, faulthandler's format). Read-only: nothing is written to the store, nothing asked of a
rank beyond those read handlers; every fetch is bounded in time and size, all of them run at
once, and a rank that does not answer in time is named, never waited for past the deadline.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from netcheck.cluster.storewire import WireError, get_bounded
from netcheck.core.deadline import Deadline
from netcheck.core.fields import is_host
from netcheck.core.hangrecords import HangView, RankTrace
from netcheck.facts.frdecode import MAX_TRACE_BYTES, NotADump
from netcheck.facts.frtrace import trace_of, user_frame

URL_KEY = re.compile(r"^debug_server/rank(\d{1,7})$")
MAX_URL_BYTES = 512
MAX_STACK_BYTES = 1 << 20
FETCH_SECONDS = 3.0          # one handler of one rank
MAX_FETCHES = 64             # at once
TRACE_HANDLERS = ("/handler/fr_trace_nccl_json", "/handler/fr_trace_json")   # NCCL's first: it records completion
_URL = re.compile(r"^http://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")
_STACK_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+) in (.*)$')


def debug_urls(keys: tuple[str, ...] | None, store_host: str, store_port: int,
               deadline: Deadline) -> dict[int, str]:
    """rank -> its worker server's URL, from the store's debug_server keys (read bounded)."""
    urls = {}
    for key in keys or ():
        match = URL_KEY.match(key)
        if not match or deadline.expired():
            continue
        try:
            value = get_bounded(store_host, store_port, key, MAX_URL_BYTES, deadline.within(FETCH_SECONDS))
        except WireError:
            continue
        url = (value.data or b"").decode("utf-8", "replace")
        found = _URL.match(url)
        if found and is_host(found[1].strip("[]")) and 0 < int(found[2]) < 65536:
            urls[int(match[1])] = url
    return urls


def worker_store(keys: tuple[str, ...] | None, store_host: str, store_port: int,
                 deadline: Deadline) -> tuple[str, int] | None:
    """Where torchrun's workers keep their process group's store (the round's MASTER_ADDR and
    MASTER_PORT keys), when it is not the rendezvous store itself; None if the keys say nothing."""
    named = {k.rsplit("/", 1)[1]: k for k in keys or () if k.endswith(("/MASTER_ADDR", "/MASTER_PORT"))}
    if len(named) != 2:
        return None
    try:
        addr, port = (get_bounded(store_host, store_port, named[n], MAX_URL_BYTES, deadline.within(FETCH_SECONDS))
                      for n in ("MASTER_ADDR", "MASTER_PORT"))
    except WireError:
        return None
    host = (addr.data or b"").decode("utf-8", "replace")
    number = (port.data or b"").decode("utf-8", "replace")
    if not is_host(host) or not number.isdigit() or not 0 < int(number) < 65536:
        return None
    return None if (host, int(number)) == (store_host, store_port) else (host, int(number))


def live_view(urls: dict[int, str], deadline: Deadline) -> HangView:
    """Every rank's recorder and stack, fetched at once. A rank that does not answer in time,
    or answers nonsense, has no trace: the rules name it with the ranks that left none."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_FETCHES, len(urls)))) as pool:
        answers = list(pool.map(lambda item: _rank_view(*item, deadline), sorted(urls.items())))
    return HangView("live", tuple(a for a in answers if a is not None), (), max(urls) + 1)


def _rank_view(rank: int, url: str, deadline: Deadline) -> RankTrace | None:
    host = _URL.match(url)[1].strip("[]")
    try:
        dump = _trace(url, deadline)
        stack = _post(url + "/handler/dump_traceback", MAX_STACK_BYTES, deadline).decode("utf-8", "replace")
        return trace_of(rank, url, dump, host, _stack_top(stack))
    except (NotADump, OSError, ValueError):   # urllib's errors and its timeouts are OSErrors
        return None


def _trace(url: str, deadline: Deadline) -> object:
    """The rank's recorder as JSON: NCCL's where the rank has one, else the CPU one."""
    last: Exception | None = None
    for handler in TRACE_HANDLERS:
        try:
            data = _post(url + handler, MAX_TRACE_BYTES, deadline)
        except urllib.error.HTTPError as e:   # no NCCL recorder on this rank
            last = e
            continue
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise NotADump(f"{handler} answered what is not JSON") from None
    raise NotADump(f"no recorder answered: {last}")


def _post(url: str, max_bytes: int, deadline: Deadline) -> bytes:
    seconds = min(FETCH_SECONDS, deadline.remaining())
    if seconds <= 0:
        raise TimeoutError("--timeout was spent")
    request = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=seconds) as answer:   # noqa: S310 - http only (_URL)
        data = answer.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise NotADump(f"an answer over {max_bytes} bytes")
    return data


def _stack_top(text: str) -> str:
    """The main thread's innermost frame in the program (faulthandler's format: most recent
    call first; the main thread's block is the one whose frames reach '<module>')."""
    blocks = text.split("\n\n")
    main = next((b for b in blocks if "in <module>" in b), "")
    frames = [{"filename": m[1], "line": m[2], "name": m[3]}
              for m in (_STACK_FRAME.match(line) for line in main.splitlines()) if m]
    return user_frame(frames)
