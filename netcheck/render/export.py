"""Runbook outputs: the exclude list for a scheduler and metrics for Prometheus.

Pure functions over a `Report`, like the text renderer (`render/text.py`); the CLI writes what
they return (`--exclude-file`, `--prom`) with `text.write_file`, atomically.

The exclude list is the nodes at fault, comma-separated on one line, as `sbatch --exclude` and
`scontrol update NodeName=` take them:

    node2,node5

The metrics are Prometheus' text format, for the node exporter's textfile collector:

    # HELP netcheck_verdict The run's verdict: 1 for the severity it reached, 0 for the others.
    # TYPE netcheck_verdict gauge
    netcheck_verdict{severity="pass"} 0
    netcheck_verdict{severity="warn"} 0
    netcheck_verdict{severity="fail"} 1
    netcheck_fault{party="nobody"} 0
    netcheck_fault{party="this_node"} 0
    netcheck_fault{party="other_nodes"} 1
    ...
    netcheck_node_faulty{node="node2",node_rank="2"} 1

Every series about a node carries its node rank beside its hostname: nodes that share a
hostname (every node of a one-machine run, clones of one image) stay distinct series, where a
textfile collector would otherwise serve one of them and drop the rest.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

from netcheck import __version__
from netcheck.core.bwrecords import Headline, avg_busbw
from netcheck.core.model import FAULT_PARTIES, PASS, SEVERITIES, Report
from netcheck.core.names import is_safe_hostname
from netcheck.rules.gate import hostnames_by_rank, nodes_at_fault, scheduler_names

Sample = tuple[dict[str, str], float]


def render_exclude(report: Report) -> str:
    """The nodes at fault, comma-separated on one line, by the names Slurm's node list gives them
    where it does (what `sbatch --exclude` and `scontrol update NodeName=` take: a node whose
    hostname is its FQDN is its NodeName there); empty when there are none. A name that is no
    hostname (a comma, a bracket, a space from a peer's malformed one) would change the list's
    meaning, so it is left out."""
    scheduler = scheduler_names(report)
    names = [n for n in dict.fromkeys(scheduler.get(h, h) for h in nodes_at_fault(report)) if is_safe_hostname(n)]
    return ",".join(names) + "\n" if names else ""


def render_prom(report: Report) -> str:
    """Every metric family, each with its HELP and TYPE lines (all are gauges)."""
    families = (
        ("netcheck_info", "The netcheck that wrote this file, and its role: host (these "
         "metrics cover the whole cluster), joiner (this node's own view), local or probe.",
         [({"role": report.role, "version": __version__}, 1)]),
        ("netcheck_verdict", "The run's verdict: 1 for the severity it reached, 0 for the others.",
         _one_of(report.verdict, {})),
        ("netcheck_fault", "Whose fault the run's failures are, from this node's seat, as its exit code says "
         "it: 1 for the party that holds (this_node: drain this node), 0 for the others.", _fault(report)),
        ("netcheck_check", "Each check's worst severity: 1 for it, 0 for the others.",
         _checks(report)),
        ("netcheck_node_faulty", "1 for a node whose hostname is faulty (it is in the exclude "
         "list), 0 for a healthy one; by hostname and node rank.", _faulty(report)),
        ("netcheck_node_findings", "Warnings and failures that name a node, by check, "
         "severity, hostname and node rank.", _node_findings(report)),
        ("netcheck_phase_seconds", "Seconds each phase took.",
         [({"phase": phase}, seconds) for phase, seconds in report.timings.items()]),
        ("netcheck_bw_busbw_gbps", "Average bus bandwidth of each sweep, GB/s (nccl-tests' "
         "'Avg bus bandwidth'), by collective and stage (all, intra, inter).", _busbw(report)),
        ("netcheck_bw_plateau_busbw_gbps", "Each sweep's plateau: the median busbw of its largest sizes, GB/s "
         "(bw.busbw's headline), by collective and stage.", _headline(report, lambda h: h.plateau_busbw)),
        ("netcheck_bw_plateau_spread_ratio", "How far each sweep's plateau moved while measured: its sizes' "
         "range, or a size's timed batches', over the median (above 0.25: noisy).",
         _headline(report, lambda h: h.spread)),
        ("netcheck_bw_latency_seconds", "Each sweep's time per op at its smallest size (the small-message "
         "latency), by collective and stage.",
         _headline(report, lambda h: None if h.latency_from_us is None else h.latency_from_us / 1e6)),
        ("netcheck_bw_step_seconds", "Seconds of all_reduce a --model-params gradient costs per step in "
         "DDP's buckets (--bucket-mb), at the busbw measured at the bucket size, by stage.",
         _headline(report, lambda h: h.step_s)),
        ("netcheck_bw_pair_busbw_gbps", "Bandwidth between two nodes, GB/s each way, by each "
         "one's hostname and node rank.", _pairs(report)),
    )
    return "".join(_family(name, text, samples) for name, text, samples in families)


def _busbw(report: Report) -> list[Sample]:
    sweeps = report.bandwidth.sweeps if report.bandwidth else ()
    return [({"op": s.op, "stage": s.stage}, avg_busbw(s)) for s in sweeps if s.rows]


def _headline(report: Report, figure: Callable[[Headline], float | None]) -> list[Sample]:
    heads = report.bandwidth.headlines if report.bandwidth else ()
    return [({"op": h.op, "stage": h.stage}, value) for h in heads if (value := figure(h)) is not None]


def _pairs(report: Report) -> list[Sample]:
    if report.bandwidth is None:
        return []
    name = report.bandwidth.hostname   # the node_rank labels keep nodes that share one apart
    return [({"node": name(p.a), "node_rank": str(p.a), "peer": name(p.b), "peer_node_rank": str(p.b)}, p.busbw)
            for p in report.bandwidth.pairs]


def _one_of(severity: str, labels: dict[str, str]) -> list[Sample]:
    """A state set: one sample per severity, 1 for the one that holds."""
    return [({**labels, "severity": s}, int(s == severity)) for s in SEVERITIES]


def _fault(report: Report) -> list[Sample]:
    """A state set over the parties, where the report says whose fault it is (a run's, local's)."""
    party = report.fault.party if report.fault is not None else None
    return [({"party": p}, int(p == party)) for p in FAULT_PARTIES] if party else []


def _checks(report: Report) -> list[Sample]:
    worst: dict[str, str] = {}
    for f in report.findings:
        worst[f.check] = max(worst.get(f.check, PASS), f.severity, key=SEVERITIES.index)
    return [s for check, severity in worst.items() for s in _one_of(severity, {"check": check})]


def _faulty(report: Report) -> list[Sample]:
    """Each node rank whose hostname the report calls healthy or faulty; a hostname with no
    known rank (a peer's, unranked) by its name alone."""
    state = {**{h: 0 for h in report.healthy_nodes}, **{h: 1 for h in report.faulty_nodes}}
    by_rank = hostnames_by_rank(report)
    ranked: list[Sample] = [({"node": h, "node_rank": str(r)}, state[h]) for r, h in sorted(by_rank.items())
                            if h in state]
    known = set(by_rank.values())
    return ranked + [({"node": h}, v) for h, v in state.items() if h not in known]


def _node_findings(report: Report) -> list[Sample]:
    names = hostnames_by_rank(report)
    counts = Counter((f.check, r, f.severity) for f in report.findings if f.severity != PASS for r in f.nodes)
    return [({"check": c, "node": names.get(r, f"rank {r}"), "node_rank": str(r), "severity": s}, k)
            for (c, r, s), k in counts.items()]


def _family(name: str, text: str, samples: Sequence[Sample]) -> str:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
    lines += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def _escape(value: str) -> str:
    # The format carries any UTF-8 exactly, once these three are escaped; a lone surrogate is
    # no UTF-8, so it becomes the text of its escape (\udc80) first.
    utf8 = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return utf8.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))

