"""Renderers: the same Report as text for a person and as JSON for a runbook.

Renderers decide nothing: the verdict, the ranks at fault and the fixes are in the Report.
The text is rendered from a copy of the Report whose every string is printable (escape), so
the renderer's newlines are the only ones and no control character reaches the terminal.

    netcheck 0.1.0 - run 'netcheck' - host (node rank 0) - verdict FAIL

    PASS  rdzv.listen  the host listens on port 29500
    FAIL  rdzv.join    node rank 2 (node2) never joined in 30 s; 2 of 3 nodes joined
          fix: start netcheck on that node; ...
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections import Counter

from tabulate import tabulate

from netcheck import __version__
from netcheck.bandwidth import tables as bwtables
from netcheck.core import codec
from netcheck.core.model import NodeEntry, Report
from netcheck.facts.launcher import is_torchrun_worker
from netcheck.render.escape import printable_copy

LABELS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}
# A report of a thousand nodes stays one screen: without -v, a finding shows this many of its
# nodes and evidence lines, and the per-node tables print only for clusters this small. The
# JSON, --exclude-file and --prom always hold everything.
SHOWN = 8
TABLES_UP_TO = 16
# Beyond TABLES_UP_TO nodes, without -v: this many evidence lines per finding, and the
# passing checks on one line.
SHOWN_AT_SCALE = 4


def render_text(report: Report, verbose: bool = False) -> str:
    report = printable_copy(report)
    lines = [_header(report)]
    if report.cluster is not None:
        lines.append(f"cluster: {LABELS[report.cluster.verdict]} - {report.cluster.headline} (the host's verdict)")
    lines.append("")
    full = verbose or len(report.nodes) <= TABLES_UP_TO
    lines += _findings(report, verbose, full)
    if report.nodes and report.role == "host":
        lines += ["", _nodes_table(report)] if full else ["", _nodes_count(report)] + _offenders(report)
    if report.env_table:
        lines += ["", _env_table(report)]
    if report.bandwidth and report.bandwidth.sweeps:
        lines += ["", bwtables.render_text(report.bandwidth, pairs=full)]
    for node in report.nodes if report.role == "local" or verbose else ():
        lines += ["", f"interfaces of {node.hostname}:", nic_table(node)]
    lines += _exports(report)
    if report.job is not None and report.job.ras is not None and not report.job.ras.answered:
        lines += ["", f"NCCL RAS at {report.job.ras.address}: {report.job.ras.error}"]
    if report.timings:
        lines += ["", _footer(report)]
    return "\n".join(lines) + "\n"


def nic_table(node: NodeEntry) -> str:
    rows = [(n.name, n.kind, "yes" if n.up else "no", "yes" if n.running else "no", n.mtu,
             n.speed_mbps or "?", " ".join(f"{a.address}/{a.prefixlen}" for a in n.addresses))
            for n in node.facts.nics.nics] if node.facts else []
    table = tabulate(rows, headers=("interface", "kind", "up", "running", "mtu", "Mb/s", "addresses"))
    ports = [f"  {p.device} port {p.port}: {p.state}, {p.link_layer}, {p.rate} ({p.netdev or '?'})"
             for p in node.facts.nics.ib_ports] if node.facts else []
    return "\n".join([table] + ports)


def _env_table(report: Report) -> str:
    rows = [(r.key, r.value, r.nodes, r.severity) for r in report.env_table]
    return tabulate(rows, headers=("environment", "value", "nodes", "severity"), maxcolwidths=[None, 60, 40, None])


def _exports(report: Report) -> list[str]:
    if not report.recommend and not report.recommend_per_node:
        return ["", f"# no settings to paste: {report.recommend_note}"] if report.recommend_note else []
    lines = ["", "# proven between every pair of nodes; paste into the job's environment"]
    if report.recommend.get("NCCL_SOCKET_IFNAME", "").startswith("="):
        lines.append("# (NCCL_SOCKET_IFNAME's leading '=' is NCCL's syntax for exact names, not prefixes)")
    if report.recommend:
        lines += ["# on every node:"] + _export_lines(report.recommend)
    for hostname, values in report.recommend_per_node.items():
        lines += [f"# on {hostname} only:"] + _export_lines(values)
    return lines


def _export_lines(values: dict[str, str]) -> list[str]:
    # The rules recommend only names that need no quoting; quoting anyway means no value,
    # whatever its source, can be more than a value once pasted into a shell.
    return [f"export {k}={shlex.quote(v)}" for k, v in values.items()]


def _seat(report: Report) -> str:
    """What a seat is called: under torchrun every worker process is one, by its RANK."""
    return "rank" if any(n.facts and is_torchrun_worker(n.facts.launch) for n in report.nodes) else "node rank"


def _header(report: Report) -> str:
    if report.job is not None:
        run = f"run '{report.job.run_id}'" if report.job.run_id else "every run"
        return f"netcheck {__version__} - inspect {report.job.endpoint} ({run}) - verdict {LABELS[report.verdict]}"
    rank = "?" if report.node_rank is None else report.node_rank
    return (f"netcheck {__version__} - run '{report.run_id}' - {report.role} ({_seat(report)} {rank}) "
            f"- verdict {LABELS[report.verdict]}")


def _findings(report: Report, verbose: bool, full: bool) -> list[str]:
    hostnames = {n.rank: n.hostname for n in report.nodes}
    word = "rank" if _seat(report) == "rank" else "node"
    listed = [f for f in report.findings if full or f.severity != "pass"]
    width = max((len(f.check) for f in listed), default=0)
    lines = []
    for f in listed:
        at = _at(f.nodes, hostnames, word, verbose) if f.severity != "pass" else ""
        lines.append(f"{LABELS[f.severity]}  {f.check:<{width}}  {f.summary}{at}")
        if f.severity != "pass" or verbose:
            shown = f.evidence if verbose else f.evidence[:SHOWN if full else SHOWN_AT_SCALE]
            lines += [f"      {e}" for e in shown]
            if len(shown) < len(f.evidence):
                lines.append(f"      ... {len(f.evidence) - len(shown)} more (-v, or the JSON)")
        if f.fix and f.severity != "pass":
            lines.append(f"      fix: {f.fix}")
    passed = list(dict.fromkeys(f.check for f in report.findings if f.severity == "pass" and not full))
    if passed:
        lines.append(f"PASS  {len(passed)} more checks: {', '.join(passed)} (-v for each)")
    return lines


def _at(ranks: tuple[int, ...], hostnames: dict[int, str], word: str, verbose: bool) -> str:
    if not ranks:
        return ""
    shown = ranks if verbose else ranks[:SHOWN]
    named = [f"{r} ({hostnames[r]})" if r in hostnames else str(r) for r in shown]
    more = f" and {len(ranks) - len(shown)} more" if len(shown) < len(ranks) else ""
    return f"  [{word} {', '.join(named)}{more}]"


def _nodes_count(report: Report) -> str:
    return (f"{len(report.nodes)} nodes: {len(report.healthy_nodes)} healthy, {len(report.faulty_nodes)} faulty "
            "(the table of every node: -v, or the JSON)")


def _offenders(report: Report) -> list[str]:
    """The nodes named by the most findings that are not passes, most first."""
    hostnames = {n.rank: n.hostname for n in report.nodes}
    counts = Counter(r for f in report.findings if f.severity != "pass" for r in f.nodes)
    if not counts:
        return []
    word = "rank" if _seat(report) == "rank" else "node rank"
    top = [f"{hostnames.get(r, f'{word} {r}')} ({n})" for r, n in counts.most_common(SHOWN)]
    more = f" and {len(counts) - len(top)} more" if len(counts) > len(top) else ""
    return [f"most named (findings): {', '.join(top)}{more}"]


def _nodes_table(report: Report) -> str:
    rows = [(n.rank, n.hostname, n.address, n.facts.fqdn if n.facts else "") for n in report.nodes]
    return tabulate(rows, headers=("rank", "hostname", "address", "fqdn"))


def _footer(report: Report) -> str:
    timings = ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items())
    unfinished = f"; {report.unfinished} did not finish" if report.unfinished else ""
    names = report.faulty_nodes[:SHOWN * 4]   # --exclude-file has them all
    more = f" and {len(report.faulty_nodes) - len(names)} more" if len(names) < len(report.faulty_nodes) else ""
    faulty = f"; faulty: {' '.join(names)}{more}" if report.faulty_nodes else ""
    return f"phases: {timings}{unfinished}{faulty}"


def render_json(report: Report) -> str:
    return codec.dumps(report, indent=2) + "\n"


def write_file(path: str, text: str) -> None:
    """Write all or nothing: a half-written report is worse than none."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".netcheck-", suffix=".tmp")
    # mkstemp makes the file private; a report is read by others (the node exporter).
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    try:
        # JSON and Prometheus' text format are UTF-8 whatever the locale says.
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
