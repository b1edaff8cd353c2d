"""Phase 6, env.flight_recorder: whether a hang on each node would be diagnosable.

Pure rules over {node rank: EnvFacts}: per node (a host's ranks share its environment), whether
torch's flight recorder is on, a collective the NCCL watchdog times out would be dumped, and the
watchdog may abort it; one warning per cause and set of nodes, its fix the export lines.
Differences between nodes are env.mismatch's (rules/env.py).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import PASS, WARN, Finding
from netcheck.rules.env import version_key
from netcheck.rules.pernode import every_node, node_names, per_node
from netcheck.rules.registry import ENV_FLIGHT_RECORDER, FR_NO_ABORT, FR_NO_DUMP, FR_OFF

T = TypeVar("T")

# Whether a hang would be diagnosable, from the variables torch reads (torch 2.13's
# c10d/FlightRecorder.hpp, ProcessGroupNCCL.hpp and Utils.hpp): where a setting has two names,
# the first one set wins; a bool is y/yes/t/true/1 or n/no/f/false/0; anything else stops torch.

FR_BUFFER = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
ASYNC_ERROR = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
FR_ENTRIES = 2000               # torch's own default where the recorder is on by default
FR_FROM = (2, 2)                # the recorder, its dump on timeout and the TORCH_ names (pytorch#110960,
                                # #114615): torch 2.1 reads NCCL_ASYNC_ERROR_HANDLING alone
FR_ON_FROM = (2, 11)            # the recorder's default became 2000 (pytorch#172843, January 2026); 0 before
DUMP_ON_FROM = (2, 7)           # TORCH_NCCL_DUMP_ON_TIMEOUT's default became true (pytorch#143446)
_TRUE, _FALSE = ("y", "yes", "t", "true", "1"), ("n", "no", "f", "false", "0")


@dataclass(frozen=True, kw_only=True)
class _Gap:
    kind: str
    line: str               # the node's evidence line
    exports: tuple[str, ...]


def flight_recorder_findings(facts_by_rank: Mapping[int, EnvFacts],
                             hostnames: Mapping[int, str]) -> list[Finding]:
    """env.flight_recorder: per node (a host's ranks share its environment), whether its flight
    recorder is on, a timeout would be dumped and the watchdog may abort a hung collective; one
    finding per cause and set of nodes, its fix the export lines (before torch 2.2, an upgrade).
    Differences between nodes are env.mismatch's."""
    names = {r: hostnames.get(r) or f"rank {r}" for r in facts_by_rank}
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, str]]] = defaultdict(list)
    for rank, facts in sorted(facts_by_rank.items()):
        for gap in diagnosability_gaps(facts.values):
            groups[(gap.kind, gap.exports)].append((rank, gap.line))
    findings = [_gap_finding(kind, exports, lines, names) for (kind, exports), lines in groups.items()]
    if not findings and facts_by_rank:
        ranks = tuple(sorted(facts_by_rank))
        findings.append(Finding(check=ENV_FLIGHT_RECORDER, severity=PASS, nodes=ranks,
                                summary=f"a hang would be diagnosable on "
                                f"{every_node(ranks, names)}: flight recorder on, a dump on the NCCL watchdog's "
                                "timeout, a watchdog able to abort a hung collective"))
    return findings


def diagnosability_gaps(values: Mapping[str, str]) -> list[_Gap]:
    key = version_key(values.get("torch.version", ""))
    torch = f"torch {values['torch.version']}" if key else "torch unknown"
    release = key[0] if key else (0,)
    if (0,) < release < FR_FROM:
        # Nothing to set: no variable makes this torch record or dump (the fix is an upgrade).
        return [_Gap(kind=FR_OFF, line=f"{torch} has no flight recorder (torch 2.2 and later have one)",
                     exports=())] + \
            _abort_gaps(values, ASYNC_ERROR[1:], "1")
    gaps = []
    name, entries = _setting(values, FR_BUFFER, FR_ENTRIES if release >= FR_ON_FROM else 0, _integer)
    if entries is None or entries <= 0:
        what = (f"{name}={values[f'var.{name}']}" if name
                else f"{' and '.join(FR_BUFFER)} unset ({torch}: off unless set)")
        gaps.append(_Gap(kind=FR_OFF, line=what + (", not a number torch reads" if name and entries is None else ""),
                         exports=(f"export {name or _fr_name(release)}={FR_ENTRIES}",)))
    return gaps + _dump_gaps(values, release, torch, entries) + _abort_gaps(values, ASYNC_ERROR, "3")


def _abort_gaps(values: Mapping[str, str], names: tuple[str, ...], mode: str) -> list[_Gap]:
    """The watchdog told to leave a timed-out collective alone; `mode` the one to set instead."""
    name, value = _setting(values, names, None, _integer)
    if name and value == 0:
        return [_Gap(kind=FR_NO_ABORT, line=f"{name}=0: no handling of a timed-out or failed collective",
                     exports=(f"export {names[0]}={mode}",))]
    return []


def _dump_gaps(values: Mapping[str, str], release: tuple[int, ...], torch: str, entries: int | None) -> list[_Gap]:
    """What keeps the NCCL watchdog from writing every rank's recorder when a collective times out."""
    lines, exports = [], []
    name, dump = _setting(values, ("TORCH_NCCL_DUMP_ON_TIMEOUT",), release >= DUMP_ON_FROM, _boolean)
    if not dump:
        lines.append(f"TORCH_NCCL_DUMP_ON_TIMEOUT={values[f'var.{name}']}" if name else
                     f"TORCH_NCCL_DUMP_ON_TIMEOUT unset ({torch}: off unless set)")
        exports.append("export TORCH_NCCL_DUMP_ON_TIMEOUT=1")
    name, monitoring = _setting(values, ("TORCH_NCCL_ENABLE_MONITORING",), True, _boolean)
    if not monitoring:
        lines.append(f"TORCH_NCCL_ENABLE_MONITORING={values[f'var.{name}']}: the thread that dumps is off")
        exports.append("export TORCH_NCCL_ENABLE_MONITORING=1")
    name, nccl_entries = _setting(values, FR_BUFFER[1:], FR_ENTRIES, _integer)
    if name and (nccl_entries or 0) <= 0 and (entries or 0) > 0:
        lines.append(f"{name}={values[f'var.{name}']}: NCCL's process group dumps only when this name is over 0")
        exports.append(f"export {name}={FR_ENTRIES}")
    return [_Gap(kind=FR_NO_DUMP, line="; ".join(lines), exports=tuple(exports))] if lines else []


def _setting(values: Mapping[str, str], names: tuple[str, ...], default: T | None,
             parse: Callable[[str], T | None]) -> tuple[str | None, T | None]:
    """(the name torch reads, its value parsed; None where torch refuses it), or (None, default)."""
    for name in names:
        if f"var.{name}" in values:
            return name, parse(values[f"var.{name}"])
    return None, default


def _integer(text: str) -> int | None:
    """As std::stoi reads it: leading spaces, a sign and digits; the rest ignored."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match[1]) if match else None


def _boolean(text: str) -> bool | None:
    text = text.lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _fr_name(release: tuple[int, ...]) -> str:
    """The name to set: the older one is the only one torch read before the recorder's own."""
    return FR_BUFFER[0] if release >= FR_ON_FROM else FR_BUFFER[1]


UPGRADE = ("upgrade torch on those nodes to 2.2 or later (the job's torch): its flight recorder then records "
           "with TORCH_NCCL_TRACE_BUFFER_SIZE=2000, and from torch 2.11 by default")

_GAP_SUMMARY = {
    FR_OFF: "torch's flight recorder is off on {nodes}: a hang there leaves no record of the collectives "
            "each rank issued",
    FR_NO_DUMP: "nothing would be dumped on {nodes} when the NCCL watchdog times out a collective: the "
                "ranks' flight recorders die with the job",
    FR_NO_ABORT: "the NCCL watchdog cannot abort a hung collective on {nodes} (async error handling "
                 "set to 0): the job hangs for good instead of failing",
}


def _gap_finding(kind: str, exports: tuple[str, ...], lines: list[tuple[int, str]],
                 names: Mapping[int, str]) -> Finding:
    ranks = tuple(sorted({r for r, _ in lines}))
    nodes = node_names(ranks, names)
    fix = "; ".join(exports) + " (in the job's environment on those nodes, before torchrun or the job " \
        "starts)" if exports else UPGRADE
    return Finding(check=ENV_FLIGHT_RECORDER, severity=WARN, nodes=ranks,
                   summary=_GAP_SUMMARY[kind].format(nodes=nodes), evidence=per_node(lines, names), fix=fix, kind=kind)
