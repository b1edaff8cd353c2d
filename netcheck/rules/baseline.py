"""--baseline: what drifted since a known-good report, node by node (matched by hostname).

A runbook keeps last week's passing report and asks each new run what changed since:
versions and variables (the env facts), `--hash` contents, interfaces, the recommended
settings. Pure: two reports' data in, findings out.
"""

from __future__ import annotations

from netcheck.core.bwrecords import BandwidthResult, avg_busbw
from netcheck.core.bwtext import rate_text
from netcheck.core.model import PASS, WARN, Finding, NodeEntry, NodeFacts, Report, with_facts
from netcheck.rules.pernode import per_node
from netcheck.rules.registry import BASELINE_DRIFT

BASELINE_BW_DROP = 0.2       # a sweep's average busbw this much below the baseline's is drift


def drift_findings(old: Report, nodes: tuple[NodeEntry, ...], recommend: dict[str, str],
                   bandwidth: BandwidthResult | None = None, whole: bool = True) -> list[Finding]:
    """`whole`: `nodes` are the cluster (the host's report); else one joiner's own view, which
    holds only itself and no recommendation of the cluster's: what it does not hold is no drift."""
    before = {n.hostname: n for n in with_facts(old.nodes)}
    drifted: list[tuple[int, str]] = []
    for node in with_facts(nodes):
        earlier = before.get(node.hostname)
        if earlier is None:
            drifted.append((node.rank, "not in the baseline"))
            continue
        drifted += [(node.rank, text) for text in _node_changes(earlier, node)]
    # A line per node and change: under torchrun a host's ranks drift alike.
    changes = list(per_node(drifted, {n.rank: n.hostname for n in nodes}))
    now = {n.hostname for n in nodes}
    if whole:
        changes += [f"{host}: in the baseline, not in this run" for host in sorted(set(before) - now)]
        changes += [f"recommended {text}" for text in _dict_changes(old.recommend, recommend)]
    changes += _bandwidth_drops(old.bandwidth, bandwidth)
    if not changes:
        return [Finding(check=BASELINE_DRIFT, severity=PASS, nodes=tuple(n.rank for n in nodes),
                        summary=f"nothing drifted since the baseline (run {old.run_id!r})")]
    ranks = tuple(sorted({r for r, _ in drifted if r >= 0}))
    return [Finding(check=BASELINE_DRIFT, severity=WARN, nodes=ranks,
                    summary=f"{len(changes)} change(s) since the baseline "
                    f"(run {old.run_id!r})", evidence=tuple(changes),
                    fix="if the change was not intended, undo it; if it was, rerun and keep this "
                    "report as the new baseline")]


# What a launcher picks afresh for every run, so it differs from any baseline by design:
# torchrun's c10d rendezvous gives its workers a free port of its own as MASTER_PORT.
PER_RUN = {"torchrun": ("var.MASTER_PORT",)}


def _node_changes(old: NodeEntry, new: NodeEntry) -> list[str]:
    fresh = PER_RUN.get(new.facts.launch.source, ()) if new.facts else ()
    old_env = {k: v for k, v in (old.env.values if old.env else {}).items() if k not in fresh}
    new_env = {k: v for k, v in (new.env.values if new.env else {}).items() if k not in fresh}
    changes = _dict_changes(old_env, new_env) if old.env and new.env else []
    if old.facts and new.facts:
        changes += _dict_changes(_interfaces(old.facts), _interfaces(new.facts))
    return changes


def _interfaces(facts: NodeFacts) -> dict[str, str]:
    return {f"interface {n.name}": f"{' '.join(a.address for a in n.addresses) or 'no address'}, "
                                   f"mtu {n.mtu}, {'running' if n.running else 'not running'}"
            for n in facts.nics.nics}


def _dict_changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append(f"{key}: {old.get(key, '(none)')} -> {new.get(key, '(none)')}")
    return out


def _bandwidth_drops(old: BandwidthResult | None, new: BandwidthResult | None) -> list[str]:
    """Sweeps whose average busbw fell by more than BASELINE_BW_DROP since the baseline."""
    if not old or not new:
        return []
    before = {(s.stage, s.op): avg_busbw(s) for s in old.sweeps if s.rows}
    drops = []
    for s in new.sweeps:
        was, now = before.get((s.stage, s.op)), avg_busbw(s) if s.rows else None
        if was and now is not None and now < was * (1 - BASELINE_BW_DROP):
            drops.append(f"{s.op} ({s.stage}) average busbw: {rate_text(was)} -> {rate_text(now)}")
    return drops

