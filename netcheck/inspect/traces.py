"""A hung job's flight recorders, judged by rules.hang: live from torch's debug server, found
through the job's store (`netcheck inspect --rdzv`), or post-mortem from dump files
(`--traces DIR`: no store and no torch). Either joins the store's findings."""

from __future__ import annotations

import dataclasses
import time

from netcheck.cluster.jobstore import debug_servers
from netcheck.cluster.storewire import WireError
from netcheck.core.deadline import Deadline
from netcheck.core.hangrecords import HangView
from netcheck.core.model import INSPECT, Endpoint, Finding, Report, report_of, verdict_of
from netcheck.core.storeerrors import RendezvousError
from netcheck.facts.bounded import call_with_timeout
from netcheck.facts.debugserver import live_view
from netcheck.facts.frformat import NotADump
from netcheck.facts.frtrace import read_dumps
from netcheck.rules import hang as hang_rules
from netcheck.rules.registry import impacted


def inspect_traces(folder: str, world_size: int | None, deadline: Deadline, report: Report | None = None,
                   hosts: dict[int, str] | None = None, prefix: str | None = None) -> Report:
    """The dumps' findings, alone or added to the store's report; `hosts` (rank -> hostname, from
    the job's preflight report) names each rank's host, which dumps do not say."""
    start = time.monotonic()
    try:
        view = with_hosts(read_dumps(folder, world_size, deadline, prefix), hosts or {})
        findings = tuple(hang_rules.hang_findings(view))
    except NotADump as e:
        view, findings = None, (hang_rules.unread_finding(str(e)),)
    seconds = round(time.monotonic() - start, 3)
    if report is None:
        return report_of(INSPECT, "inspect", None, impacted(findings), {"traces": seconds}, hang=view)
    return _joined(report, view, findings, "traces", seconds)


def with_hosts(view: HangView, hosts: dict[int, str]) -> HangView:
    traces = tuple(dataclasses.replace(t, host=t.host or hosts.get(t.rank, "")) for t in view.traces)
    return dataclasses.replace(view, traces=traces)


def inspect_live(report: Report, endpoint: Endpoint, deadline: Deadline) -> Report:
    """The ranks' recorders and stacks from the job's debug servers, where the store names
    any, within what is left of the look's deadline; the report as it was where it names none."""
    start = time.monotonic()
    # On a thread: the workers' store it may connect to is a torch client, which a hung
    # process holds past every socket timeout torch sets.
    servers, error = call_with_timeout(
        lambda: debug_servers(endpoint.host, endpoint.port, report.job.keys if report.job else None, deadline),
        deadline.remaining())
    if error is not None and not isinstance(error, (RendezvousError, WireError, TimeoutError)):
        raise error
    if not servers:
        return report
    view = live_view(servers, deadline)
    return _joined(report, view, tuple(hang_rules.hang_findings(view)), "live", round(time.monotonic() - start, 3))


def _joined(report: Report, view: HangView | None, findings: tuple[Finding, ...], step: str,
            seconds: float) -> Report:
    merged = report.findings + impacted(findings)
    return dataclasses.replace(report, findings=merged, verdict=verdict_of(merged), hang=view,
                               timings={**report.timings, step: seconds})
