"""torch's flight-recorder dump format, as netcheck reads it: one rank's decoded dump (plain
dicts, lists and strings, from a file by facts.frdecode or live by facts.debugserver) made into
its last collectives per process group. Pure: no file, no process, no network.

The format (torch 2.5 on; version "2.10" in 2.13): {"version", "pg_config": {name: {"name",
"desc", "ranks": "[0, 1]"}}, "pg_status", "entries": [{"collective_seq_id", "process_group":
(name, desc), "profiling_name", "input_sizes", "input_dtypes", "output_sizes", "state",
"frames": [{"filename", "line", "name"}], "is_p2p", ...}]}.
"""

from __future__ import annotations

import json
import re

from netcheck.core.errors import NetcheckError
from netcheck.core.hangrecords import HANG_TAIL, Collective, GroupTail, RankTrace

MAX_TRACE_BYTES = 16 << 20      # one rank's dump: a 20,000-entry NCCL ring is about 10 MB
# Where a frame is torch's own: the user's line is the innermost frame outside these.
_LIBRARY = re.compile(r"[/\\](torch|site-packages|dist-packages)[/\\]|^<frozen ")
_COMPLETED: dict[str | None, bool] = {"completed": True, "scheduled": False, "started": False}


class NotADump(NetcheckError, ValueError):
    """A file that is no flight-recorder dump netcheck reads: the message says why."""


def trace_of(rank: int, source: str, dump: object, host: str = "", stack: str = "") -> RankTrace:
    """One rank's decoded dump as its last collectives per group; NotADump where it is not one."""
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise NotADump("not a flight-recorder dump: no list of entries")
    return RankTrace(rank, source, host, _groups(dump), stack)


def _groups(dump: dict) -> tuple[GroupTail, ...]:
    """Each group's last HANG_TAIL collectives; only those are looked at closely (a ring
    holds thousands of entries, and a thousand ranks' dumps are read at once)."""
    tails: dict[str, list[dict]] = {}
    descs: dict[str, str] = {}
    for entry in dump.get("entries") or ():
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        name, desc = _group_of(entry.get("process_group"))
        if name is None:
            raise NotADump("an entry without a process group")
        descs[name] = desc
        tail = tails.setdefault(name, [])
        tail.append(entry)
        if len(tail) > 2 * HANG_TAIL:
            del tail[:-HANG_TAIL]
    ranks = _group_ranks(dump.get("pg_config"))
    return tuple(GroupTail(name, descs[name], ranks.get(name, ranks.get(descs[name], ())),
                           tuple(sorted(map(_collective, tail[-HANG_TAIL:]), key=lambda c: c.seq)))
                 for name, tail in sorted(tails.items()))


def _group_of(value: object) -> tuple[str | None, str]:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None, ""


def _collective(entry: dict) -> Collective:
    seq = entry.get("collective_seq_id")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise NotADump("an entry without a sequence id")
    state = entry.get("state")
    # gloo's recorder leaves every entry "scheduled": its completion is not recorded.
    op = _text(entry.get("profiling_name"))
    completed = None if op.startswith("gloo:") else _COMPLETED.get(state)
    sizes = f"{_text(entry.get('input_sizes'))} -> {_text(entry.get('output_sizes'))}"
    return Collective(seq, op, sizes, _text(entry.get("input_dtypes")), completed, user_frame(entry.get("frames")))


def user_frame(frames: object) -> str:
    """The innermost frame outside torch: the line of the program that called it."""
    if not isinstance(frames, list):
        return ""
    for frame in frames:
        if isinstance(frame, dict) and not _LIBRARY.search(_text(frame.get("filename"))):
            return f"{_text(frame.get('filename'))}:{_text(frame.get('line'))} in {_text(frame.get('name'))}"
    return ""


def _group_ranks(config: object) -> dict[str, tuple[int, ...]]:
    """name -> its global ranks, where pg_config lists them ("[0, 1]"; gloo writes "[]")."""
    if not isinstance(config, dict):
        return {}
    ranks = {}
    for name, group in config.items():
        text = group.get("ranks") if isinstance(group, dict) else None
        listed = (tuple(int(r) for r in re.findall(r"\d+", text))
                  if isinstance(text, str) and len(text) < 1 << 20 else ())
        if listed and isinstance(name, str):
            ranks[name] = listed
    return ranks


def _text(value: object) -> str:
    """A value of the dump as text, whatever its type (the dump's writer chose it)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:200]
