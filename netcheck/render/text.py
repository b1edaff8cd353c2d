"""Renderers: the same Report as text for a person and as JSON for a runbook.

Renderers decide nothing: the verdict, the ranks at fault and the fixes are in the Report.
The text is rendered from a copy of the Report whose every string is printable (escape), so
the renderer's newlines are the only ones and no control character reaches the terminal.

    netcheck 0.1.0 - run id 'netcheck' - host (node rank 0) - verdict FAIL

    PASS  rdzv.listen  the host listens on port 29500
    FAIL  rdzv.join    node rank 2 (node2) never joined in 30 s; 2 of 3 nodes joined
          fix: start netcheck on that node; ...

A finding that stops only some jobs says whose first ("NCCL only: ...", "torchrun's rendezvous:
..."), and why where its rule narrowed it to this run (registry.scope_words, Finding.impact).
"""

from __future__ import annotations

import shlex
from collections import Counter

from tabulate import tabulate

from netcheck import __version__
from netcheck.core import codec
from netcheck.core.bwrecords import pair_resent
from netcheck.core.bwtext import size_words
from netcheck.core.model import (
    HOST,
    INSPECT,
    JOINER,
    LOCAL,
    NOBODY,
    OTHER_NODES,
    PROBE,
    THIS_NODE,
    WHOLE_CLUSTER,
    NodeEntry,
    Report,
    is_torchrun_worker,
    with_facts,
)
from netcheck.render import tables as bwtables
from netcheck.render.escape import printable_copy
from netcheck.render.outfile import write_file as write_file  # the report's files: render/outfile
from netcheck.rules.registry import LINK_HEALTH, LINK_LOSSY_NODE, LINK_LOSSY_PATH, scope_words

LABELS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}
# A report of a thousand nodes stays one screen: without -v, a finding shows this many of its
# nodes and evidence lines, and the per-node tables print only for clusters this small. The
# JSON, --exclude-file and --prom always hold everything.
SHOWN = 8
TABLES_UP_TO = 16
# Beyond TABLES_UP_TO nodes, without -v: this many evidence lines per finding, and the
# passing checks on one line.
SHOWN_AT_SCALE = 4
# A joiner's bandwidth tables are the host's: every node printing them buries its own findings.
JOINER_TABLES = "# bandwidth: the tables are in the host's report (node rank 0); -v prints them here too"


def render_text(report: Report, verbose: bool = False) -> str:
    report = printable_copy(report)
    lines = [header_line(report)]
    if report.cluster is not None:
        lines.append(f"cluster: {LABELS[report.cluster.verdict]} - {report.cluster.headline} (the host's verdict)")
    lines.append("")
    full = verbose or len(report.nodes) <= TABLES_UP_TO
    lines += _findings(report, verbose, full)
    if report.nodes and report.role == HOST:
        lines += ["", _nodes_table(report)] if full else ["", _nodes_count(report)] + _offenders(report)
    if report.env_table:
        lines += ["", _env_table(report)]
    if report.bandwidth and report.bandwidth.sweeps and report.role == JOINER and not verbose:
        lines += ["", JOINER_TABLES]
    elif report.bandwidth and report.bandwidth.sweeps:
        lines += ["", bwtables.render_text(report.bandwidth, pairs=full, resent=lossy_pairs(report))]
    if report.role == LOCAL:
        lines += [""] + [line for node in report.nodes for line in node_facts(node)]
    for node in _one_per_host(report.nodes) if report.role == LOCAL or verbose else ():
        lines += ["", f"interfaces of {node.hostname}:", nic_table(node)]
    lines += export_lines(report)
    if report.job is not None and report.job.ras is not None and not report.job.ras.answered:
        lines += ["", f"NCCL RAS at {report.job.ras.address}: {report.job.ras.error}"]
    if report.job is not None and not report.job.store_error and report.hang is None:
        lines += ["", NO_LIVE_VIEW]
    if report.timings:
        lines += ["", _footer(report)]
    if said := fault_line(report):
        lines += [said] if report.timings else ["", said]   # the closing line, under the phases
    return "\n".join(lines) + "\n"


NO_LIVE_VIEW = ("live collective view: no rank of this job registered a debug server; to see which rank and "
                "line a hang waits on next time, add `from torch.distributed.debug import start_debug_server` and "
                "`start_debug_server(port=0)` after init_process_group (torch 2.13+), and keep torch's flight recorder "
                "on (TORCH_FR_BUFFER_SIZE=2000; with NCCL, TORCH_NCCL_DUMP_ON_TIMEOUT=1 for dumps to read with "
                "--traces)")


def _one_per_host(nodes: tuple[NodeEntry, ...]) -> list[NodeEntry]:
    """A node entry per host: under torchrun a host's ranks share its interfaces. (Two machines
    that share a name, and so differ in their interfaces, are both shown.)"""
    seen, shown = set(), []
    for node in nodes:
        if node.facts_as is not None:   # its node's entry is shown
            continue
        key = (node.hostname, node.facts.nics if node.facts else None)
        if key not in seen:
            seen.add(key)
            shown.append(node)
    return shown


LAUNCHERS = {"flags": "the command line", "slurm": "Slurm", "kubeflow": "Kubeflow (PyTorchJob)",
             "torchrun": "torchrun (a worker process)",
             "arrival": "none seen (a cluster run numbers such nodes as they arrive)"}


def node_facts(node: NodeEntry) -> list[str]:
    """What `netcheck local` learnt of this node besides its interfaces: its names, /dev/shm and
    GPUs, and the launcher's view (README: netcheck local)."""
    f = node.facts
    if f is None:
        return []
    resolves = ", ".join(f.hostname_addresses) or "nothing"
    shm = "unknown" if f.shm_bytes is None else size_words(f.shm_bytes)
    launch = f.launch
    nnodes = None if launch.nnodes_max is None else str(launch.nnodes_max) \
        if launch.nnodes_min == launch.nnodes_max else f"{launch.nnodes_min}:{launch.nnodes_max}"
    given = [f"{word} {value}" for word, value in (("node rank", launch.node_rank), ("nnodes", nnodes))
             if value is not None]
    unknown = [word for word, value in (("node rank", launch.node_rank), ("node count", nnodes)) if value is None]
    seat = ", ".join(given + ([f"no {' or '.join(unknown)} given"] if unknown else []))
    lines = [f"this node: {f.hostname} (FQDN {f.fqdn}); the hostname resolves to {resolves}",
             f"/dev/shm: {shm}; NVIDIA GPUs: {f.gpus or 'none'}",
             f"launcher: {LAUNCHERS.get(launch.source, launch.source)}; {seat}; "
             f"{launch.nproc_per_node} process(es) per node"]
    if launch.variables:
        lines.append("launcher variables: " + " ".join(f"{k}={v}" for k, v in sorted(launch.variables.items())))
    return lines


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


def export_lines(report: Report) -> list[str]:
    """The export block: a blank line, then the lines to paste (or why there are none)."""
    if not report.recommend and not report.recommend_per_node:
        return ["", f"# no settings to paste: {report.recommend_note}"] if report.recommend_note else []
    names = {k for values in (report.recommend, *report.recommend_per_node.values()) for k in values}
    lines = [""]
    if any(k.endswith("_SOCKET_IFNAME") for k in names):
        lines.append("# proven between every pair of nodes; paste into the job's environment")
    if any(k.startswith("NCCL_IB_") for k in names):
        lines.append("# NCCL_IB_*: read from every node's RDMA ports with NCCL's own rules, not proven by RDMA traffic")
        if report.recommend_note:
            lines.append(f"# no interface settings: {report.recommend_note}")
    exact = [k for k in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA") if report.recommend.get(k, "").startswith("=")]
    if exact:
        lines.append(f"# ({' and '.join(exact)}: a leading '=' is NCCL's syntax for exact names, not prefixes)")
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
    """What a seat is called: under torchrun every worker process is one, by its RANK; a
    hung job's findings name its ranks."""
    if report.role == INSPECT or any(n.facts and is_torchrun_worker(n.facts.launch) for n in report.nodes):
        return "rank"
    return "node rank"


def header_line(report: Report) -> str:
    """The report's first line: version, the run's id (--rdzv-id), role, verdict."""
    verdict = f"verdict {LABELS[report.verdict]}"
    if report.job is not None:
        run = f"run id '{report.job.run_id}'" if report.job.run_id else "every run"
        return f"netcheck {__version__} - inspect {report.job.endpoint} ({run}) - {verdict}"
    if report.role == PROBE:   # one probe from this node: no run, no rank
        return f"netcheck {__version__} - probe - {verdict}"
    if report.hang is not None:   # dumps alone: no store, no run
        return f"netcheck {__version__} - inspect --traces {report.hang.source} - {verdict}"
    if report.role == LOCAL:   # this node alone: its name, and its rank where a launcher gave one
        seat = "" if report.node_rank is None else f" ({_seat(report)} {report.node_rank})"
        return f"netcheck {__version__} - local: {', '.join(n.hostname for n in report.nodes)}{seat} - {verdict}"
    rank = "?" if report.node_rank is None else report.node_rank
    return (f"netcheck {__version__} - run id '{report.run_id}' - {report.role} ({_seat(report)} {rank}) "
            f"- {verdict}")


def _findings(report: Report, verbose: bool, full: bool) -> list[str]:
    hostnames = {n.rank: n.hostname for n in report.nodes}
    word = "rank" if _seat(report) == "rank" else "node"
    listed = [f for f in report.findings if full or f.severity != "pass"]
    width = max((len(f.check) for f in listed), default=0)
    lines = []
    alone = report.role in (LOCAL, PROBE)   # one node's report: it points at that node
    for f in listed:
        at = _at(f.nodes, hostnames, word, verbose) if f.severity != "pass" and not alone else ""
        scope = scope_words(f.impact) if f.severity != "pass" else ""
        lines.append(f"{LABELS[f.severity]}  {f.check:<{width}}  {scope + ': ' if scope else ''}{f.summary}{at}")
        if f.severity != "pass" or verbose:
            shown = f.evidence if verbose else f.evidence[:SHOWN if full else SHOWN_AT_SCALE]
            lines += [f"      {e}" for e in shown]
            if len(shown) < len(f.evidence):
                lines.append(f"      ... {len(f.evidence) - len(shown)} more (-v, or the JSON)")
            if f.impact and f.impact.why:
                lines.append(f"      why{' ' + scope if scope else ''}: {f.impact.why}")
        if f.fix and f.severity != "pass":
            lines.append(f"      fix: {f.fix}")
    passed = list(dict.fromkeys(f.check for f in report.findings if f.severity == "pass" and not full))
    if passed:
        lines.append(f"PASS  {len(passed)} more checks: {', '.join(passed)} (-v for each)")
    return lines


def _at(ranks: tuple[int, ...], hostnames: dict[int, str], word: str, verbose: bool) -> str:
    """`[node 0 (node0), 2 (node2)]`; under torchrun a host's ranks together:
    `[node1: ranks 2, 3]`, or `[node0: rank 0; node1: ranks 2, 3]`."""
    if not ranks:
        return ""
    shown = ranks if verbose else ranks[:SHOWN]
    more = f" and {len(ranks) - len(shown)} more" if len(shown) < len(ranks) else ""
    if word == "rank":
        hosts: dict[str, list[int]] = {}
        for r in shown:
            hosts.setdefault(hostnames.get(r, ""), []).append(r)
        # Hosts this report knows first; a joiner's other ranks (hosts unknown to it) last.
        named = [f"{host + ': ' if host else ''}rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
                 for host, rs in sorted(hosts.items(), key=lambda item: not item[0])]
        return f"  [{'; '.join(named)}{more}]"
    named = [f"{r} ({hostnames[r]})" if r in hostnames else str(r) for r in shown]
    return f"  [{word} {', '.join(named)}{more}]"


def _nodes_count(report: Report) -> str:
    hosts = len({n.hostname for n in report.nodes})
    counted = f"{hosts} nodes" if hosts == len(report.nodes) else f"{len(report.nodes)} ranks on {hosts} nodes"
    return (f"{counted}: {len(report.healthy_nodes)} healthy, {len(report.faulty_nodes)} faulty "
            "(the table of every node: -v, or the JSON)")


def _offenders(report: Report) -> list[str]:
    """The nodes named by the most findings that are not passes, most first."""
    hostnames = {n.rank: n.hostname for n in report.nodes}
    word = "rank" if _seat(report) == "rank" else "node rank"
    # A finding counts once for a host, however many of its ranks it names (torchrun).
    counts = Counter(name for f in report.findings if f.severity != "pass"
                     for name in dict.fromkeys(hostnames.get(r, f"{word} {r}") for r in f.nodes))
    if not counts:
        return []
    top = [f"{name} ({n})" for name, n in counts.most_common(SHOWN)]
    more = f" and {len(counts) - len(top)} more" if len(counts) > len(top) else ""
    return [f"most named (findings): {', '.join(top)}{more}"]


def _nodes_table(report: Report) -> str:
    rows = [(n.rank, n.hostname, n.address, n.facts.fqdn if n.facts else "") for n in with_facts(report.nodes)]
    return tabulate(rows, headers=("rank", "hostname", "address", "fqdn"))


def _footer(report: Report) -> str:
    timings = ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items())
    unfinished = f"; {report.unfinished} did not finish" if report.unfinished else ""
    names = report.faulty_nodes[:SHOWN * 4]   # --exclude-file has them all
    more = f" and {len(report.faulty_nodes) - len(names)} more" if len(names) < len(report.faulty_nodes) else ""
    faulty = f"; faulty: {' '.join(names)}{more}" if report.faulty_nodes else ""
    return f"phases: {timings}{unfinished}{faulty}"


def fault_line(report: Report) -> str:
    """Whose fault the failures are, in words, as the exit code says it ("" where nobody's)."""
    fault = report.fault
    if fault is None or fault.party == NOBODY:
        return ""
    if fault.party == THIS_NODE:
        me = next((n.hostname for n in report.nodes if n.rank == report.node_rank or n.rank == -1), "")
        return f"fault: this node{f' ({me})' if me else ''}: {fault.why}"
    if fault.party == OTHER_NODES:
        names = fault.hostnames[:SHOWN * 4]   # --exclude-file has them all
        more = f" and {len(fault.hostnames) - len(names)} more" if len(names) < len(fault.hostnames) else ""
        ranks = [r for r in fault.nodes if r >= 0]
        seat = f"{_seat(report)}{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:SHOWN * 4]))}" \
            if ranks else ""
        who = ("another node" if len(fault.hostnames) == 1 or (not fault.hostnames and len(ranks) == 1)
               else "other nodes")
        named = f"{', '.join(names)}{more}" + (f" ({seat})" if names and seat else seat)
        return f"fault: {who}: {named}; this node is healthy"
    if fault.party == WHOLE_CLUSTER:
        return f"fault: the cluster as a whole, no node singled out: {fault.why}"
    return f"fault: netcheck itself: {fault.why}"


def render_json(report: Report) -> str:
    return codec.dumps(report, indent=2) + "\n"


def lossy_pairs(report: Report) -> dict[tuple[int, int], float]:
    """The node pairs link.health names (a lossy node's pairs, a lossy path's), with the share of
    segments their connections resent: what the pair table and the page mark. The findings
    decide; a pair link.health did not name is not marked, whatever it resent."""
    if report.bandwidth is None:
        return {}
    named = [f for f in report.findings if f.check == LINK_HEALTH and f.kind in (LINK_LOSSY_NODE, LINK_LOSSY_PATH)]
    return {(a, b): share for (a, b), share in pair_resent(report.bandwidth.links).items()
            if any((f.kind == LINK_LOSSY_NODE and f.nodes[0] in (a, b))
                   or (f.kind == LINK_LOSSY_PATH and {a, b} <= set(f.nodes)) for f in named)}

