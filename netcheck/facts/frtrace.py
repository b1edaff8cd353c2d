"""Flight-recorder dumps, read without trusting them: `netcheck inspect --traces DIR`.

torch writes one file per rank when its watchdog fires (TORCH_NCCL_DUMP_ON_TIMEOUT, at
TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE plus the rank), or when a job
calls torch._C._distributed_c10d._dump_fr_trace() (a pickle) or _dump_fr_trace_json() (JSON).
A pickle runs code in whoever loads it with pickle: these are decoded in limited child
processes with every global refused (facts.frdecode), so a dump is plain dicts, lists,
tuples, strings, numbers, booleans and None, or it is refused, by file name. Each file is
bounded in size and decoding time, all of them together too; a rank's number is taken from
its file's name. Only files named PREFIX<rank> are dumps, as torch's analyzer reads them (its
-p PREFIX; without one, the prefix most files ending in a number share): the log, marker and
leftover files torch's dump folder (by default /tmp) also holds are counted, never judged.
What a decoded dump means is facts.frformat's.
"""

from __future__ import annotations

import os
import re
from collections import Counter

from netcheck.core.deadline import Deadline
from netcheck.core.hangrecords import HangView, RankTrace, Refused
from netcheck.facts.frdecode import decode_files
from netcheck.facts.frformat import MAX_TRACE_BYTES, NotADump

MAX_TRACES_BYTES = 2 << 30      # every file together (1,024 ranks of 2 MB)
MAX_TRACE_FILES = 16_384
MAX_READ_SECONDS = 60.0         # without a deadline (tests, benchmarks)
_NAMED = re.compile(r"(.*?)(\d{1,7})(?:\.json|\.pkl|\.pickle)?")


def read_dumps(folder: str, world_size: int | None = None, deadline: Deadline | None = None,
               prefix: str | None = None) -> HangView:
    """Every dump in FOLDER (named PREFIX<rank>) that reads, and every one refused, each named;
    the other files counted."""
    deadline = deadline or Deadline(MAX_READ_SECONDS)
    names = [n for n in _listed(folder)[:MAX_TRACE_FILES] if os.path.isfile(os.path.join(folder, n))]
    prefix = dump_prefix(names) if prefix is None else prefix
    files, refused, total, ignored = [], [], 0, 0
    for name in names:
        path = os.path.join(folder, name)
        rank = _rank_of(name, prefix)
        if rank is None:
            ignored += 1
            continue
        size = os.path.getsize(path)
        if size > MAX_TRACE_BYTES or total + size > MAX_TRACES_BYTES:
            refused.append(Refused(name, f"{size} bytes, over the {MAX_TRACE_BYTES}-byte limit per dump"
                                   if size > MAX_TRACE_BYTES else "over the limit for all dumps together", False))
            continue
        total += size
        files.append((rank, path))
    results = decode_files(files, deadline)
    traces = [r for r in results if isinstance(r, RankTrace)]
    refused += [r for r in results if isinstance(r, Refused)]
    return HangView(folder, tuple(sorted(traces, key=lambda t: (t.rank, t.source))),
                    tuple(sorted(refused, key=lambda r: r.source)), world_size, prefix, ignored)


def _listed(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError as e:
        raise NotADump(f"{folder}: {e.strerror}") from None


def dump_prefix(names: list[str]) -> str:
    """The prefix most names ending in a number share (the longest of those tied), as torch's
    analyzer guesses it: `nccl_trace_rank_` of nccl_trace_rank_0..7 beside ready0."""
    counts = Counter(m[1] for n in names if (m := _NAMED.fullmatch(n)))
    return max(counts, key=lambda p: (counts[p], len(p)), default="")


def _rank_of(name: str, prefix: str) -> int | None:
    match = _NAMED.fullmatch(name)
    return int(match[2]) if match and match[1] == prefix else None
