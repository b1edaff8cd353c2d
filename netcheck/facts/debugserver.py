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

from netcheck.core.deadline import Deadline
from netcheck.core.hangrecords import HangView, RankTrace
from netcheck.facts.frformat import MAX_TRACE_BYTES, NotADump, trace_of, user_frame

MAX_STACK_BYTES = 1 << 20
FETCH_SECONDS = 3.0          # one handler of one rank
MAX_FETCHES = 64             # at once
TRACE_HANDLERS = ("/handler/fr_trace_nccl_json", "/handler/fr_trace_json")   # NCCL's first: it records completion
_STACK_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+) in (.*)$')


def live_view(servers: dict[int, tuple[str, int]], deadline: Deadline) -> HangView:
    """Every rank's recorder and stack from its debug server (rank -> host, port, as the job's
    store registers them), fetched at once. A rank that does not answer in time, or answers
    nonsense, has no trace: the rules name it with the ranks that left none."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_FETCHES, len(servers)))) as pool:
        answers = list(pool.map(lambda item: _rank_view(item[0], item[1][0], item[1][1], deadline),
                                sorted(servers.items())))
    return HangView("live", tuple(a for a in answers if a is not None), (), max(servers) + 1)


def _rank_view(rank: int, host: str, port: int, deadline: Deadline) -> RankTrace | None:
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
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
    with urllib.request.urlopen(request, timeout=seconds) as answer:   # noqa: S310 - http, host and port checked
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
