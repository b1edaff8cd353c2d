"""`netcheck inspect --traces DIR`: a hung job's flight-recorder dumps, read post-mortem.

No store and no torch: the dumps are files, read through the bounded decoder within
--timeout, and judged by rules.hang. With --rdzv too, the findings join the store's."""

from __future__ import annotations

import dataclasses
import time

from netcheck.core.deadline import Deadline
from netcheck.core.model import WARN, Finding, Report, verdict_of
from netcheck.facts.frtrace import NotADump, read_dumps
from netcheck.rules import hang as hang_rules
from netcheck.rules.registry import HANG_NO_DATA, JOB_HANG


def inspect_traces(folder: str, world_size: int | None, timeout: float, report: Report | None = None) -> Report:
    """The dumps' findings, alone or added to the store's report."""
    start = time.monotonic()
    try:
        view = read_dumps(folder, world_size, Deadline(timeout))
        findings = tuple(hang_rules.hang_findings(view))
    except NotADump as e:
        view, findings = None, (Finding(JOB_HANG, WARN, (), f"no trace read: {e}", (),
                                        "give --traces the folder the job's dumps are in", HANG_NO_DATA),)
    seconds = round(time.monotonic() - start, 3)
    if report is None:
        return Report(run_id="inspect", node_rank=None, role="inspect", verdict=verdict_of(findings), nodes=(),
                      findings=findings, recommend={}, recommend_per_node={}, env_table=(), bandwidth=None,
                      timings={"traces": seconds}, unfinished=None, healthy_nodes=(), faulty_nodes=(), hang=view)
    merged = report.findings + findings
    return dataclasses.replace(report, findings=merged, verdict=verdict_of(merged), hang=view,
                               timings={**report.timings, "traces": seconds})
