"""--html PATH, and `netcheck report --html`: the Report as one page an operator opens in a
browser, for a cluster of three nodes or of thousands.

One self-contained file: its styles, its script and its charts (inline SVG, svg.py) are in
it, and its Content-Security-Policy forbids fetching anything, so it opens the same on an
air-gapped cluster. Jinja2 writes it with autoescaping on: every hostname, interface name and
evidence line came from a peer, and a name carrying `<script>` is shown as text. Strings are
made printable first (escape.printable_copy), as for the terminal, so a bidi override in a
name cannot reorder what the page shows either.

Like the text renderer it decides nothing: the verdict, the findings, who is a straggler and
which pair is slow are the report's; this module only lays them out (grouped, sorted, placed
on axes). A finding that stops only some jobs is labelled as in the text ("NCCL only"), with
its rule's why. The page, top to bottom: the verdict and the findings grouped by check; the nodes
(sortable, filtered by text and by severity); the node pairs (a heatmap with values up to
HEATMAP_UP_TO nodes, else their spread and the slowest); busbw and latency against size;
each rank's time; where the environments differ; the export lines, with a copy button.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from jinja2 import Environment, PackageLoader, StrictUndefined, Template

from netcheck import __version__
from netcheck.core.bwrecords import STAGE_TITLES, BandwidthResult, Sweep
from netcheck.core.bwtext import plateau_text, rate_text, size_words, time_text
from netcheck.core.constants import BW_PAIR_SLOW
from netcheck.core.model import HOST, JOINER, SEVERITIES, Finding, NodeEntry, Report, with_facts
from netcheck.render import svg
from netcheck.render.escape import printable_copy
from netcheck.render.tables import gbps_cell
from netcheck.render.text import export_lines, fault_line, header_line, lossy_pairs
from netcheck.rules.bw import pair_yardstick
from netcheck.rules.registry import BW_PAIR, BW_STRAGGLER, scope_words

# Up to this many nodes the pairs are a matrix with a value in every cell; beyond, a matrix is
# too small to read, and the page shows the pairs' spread and the SLOWEST_PAIRS slowest.
HEATMAP_UP_TO = 24
SLOWEST_PAIRS = 20
# A finding's evidence lines shown at once; the rest (all of them are in the page) unfold.
EVIDENCE_SHOWN = 8
# The node table's rows shown at once, of those the filter matches; a button shows the rest.
# Laying out 4,096 rows takes the browser most of a second, and nobody reads past the first screens.
ROWS_SHOWN = 500
WORST_FIRST = {s: -k for k, s in enumerate(SEVERITIES)}   # fail, warn, pass


@dataclass(frozen=True)
class FindingView:
    finding: Finding
    nodes: str               # "2 (node2), 5 (node5)"
    scope: str = ""          # whom it stops where not every job: "NCCL only" (registry.scope_words)


@dataclass(frozen=True)
class CheckGroup:
    check: str
    severity: str            # the worst of its findings
    findings: tuple[FindingView, ...]


@dataclass(frozen=True)
class NodeRow:
    node: NodeEntry
    role: str
    interfaces: str
    severity: str            # the worst of the findings that name it; "" when none does
    named_by: tuple[tuple[str, str], ...]   # (check, severity) of each warning and failure naming it


@dataclass(frozen=True)
class PairsView:
    count: int
    size: str
    heatmap: svg.Heatmap | None          # up to HEATMAP_UP_TO nodes
    spread: svg.Histogram | None         # beyond
    slowest: tuple[tuple[str, str, str], ...]   # (node, peer, GB/s), slowest first
    named: str                           # the nodes bw.pair names slow
    resent: str = ""                     # the pairs whose connections resent segments, with the share (link.health)


@dataclass(frozen=True)
class RankTimes:
    title: str
    chart: svg.Histogram
    stragglers: tuple[str, ...]          # bw.straggler's evidence: the slow ranks, named


@dataclass(frozen=True)
class BandwidthView:
    result: BandwidthResult
    plateaus: tuple[str, ...]
    busbw: svg.CurveChart | None
    latency: svg.CurveChart | None
    pairs: PairsView | None
    rank_times: tuple[RankTimes, ...]


def render_html(report: Report) -> str:
    shown = printable_copy(report)
    return _template().render(version=__version__, report=shown, header=header_line(shown), fault=fault_line(shown),
                              groups=check_groups(shown), nodes=node_rows(shown), exports=export_lines(shown)[1:],
                              bandwidth=bandwidth_view(shown), severities=SEVERITIES, shown=EVIDENCE_SHOWN,
                              rows_shown=ROWS_SHOWN, gbps=gbps_cell)


@lru_cache(maxsize=1)
def _template() -> Template:
    env = Environment(loader=PackageLoader("netcheck.render", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2")


def check_groups(report: Report) -> list[CheckGroup]:
    """The findings by check, in the report's order within a check; the checks with a failure
    first, then those with a warning, then the passes."""
    names = _names(report)
    by_check: dict[str, list[Finding]] = {}
    for f in report.findings:
        by_check.setdefault(f.check, []).append(f)
    groups = [CheckGroup(check, max((f.severity for f in fs), key=SEVERITIES.index),
                         tuple(FindingView(f, ", ".join(names(r) for r in f.nodes),
                                           scope_words(f.impact) if f.severity != "pass" else "") for f in fs))
              for check, fs in by_check.items()]
    return sorted(groups, key=lambda g: WORST_FIRST[g.severity])


def _names(report: Report) -> Callable[[int], str]:
    hostnames = {n.rank: n.hostname for n in report.nodes}
    return lambda rank: f"{rank} ({hostnames[rank]})" if rank in hostnames else str(rank)


def node_rows(report: Report) -> list[NodeRow]:
    """A row per node: who it is, and the findings that name it."""
    worst: dict[int, str] = {}
    named: dict[int, list[tuple[str, str]]] = {}
    for f in report.findings:
        for rank in dict.fromkeys(f.nodes):
            worst[rank] = max(worst.get(rank, f.severity), f.severity, key=SEVERITIES.index)
            if f.severity != "pass":
                named.setdefault(rank, []).append((f.check, f.severity))
    return [NodeRow(n, _role(report, n), _interfaces(n), worst.get(n.rank, ""),
                    tuple(dict.fromkeys(named.get(n.rank, ())))) for n in with_facts(report.nodes)]


def _role(report: Report, node: NodeEntry) -> str:
    """The node that wrote the report is of its role; in a cluster run rank 0 hosts and the
    others join."""
    if node.rank == report.node_rank or report.role not in (HOST, JOINER):
        return report.role
    return HOST if node.rank == 0 else JOINER


def _interfaces(node: NodeEntry) -> str:
    if node.facts is None:
        return ""
    return "; ".join(f"{nic.name} {' '.join(a.address for a in nic.addresses)}".strip()
                     for nic in node.facts.nics.nics if nic.kind != "loopback")


# --- bandwidth ------------------------------------------------------------------------------

def bandwidth_view(report: Report) -> BandwidthView | None:
    result = report.bandwidth
    if result is None:
        return None
    heads = {(h.stage, h.op): h for h in result.headlines}
    series = [(s, heads.get((s.stage, s.op))) for s in result.sweeps if s.rows]
    buckets = tuple((b, f"DDP bucket ({size_words(b)})")
                    for b in dict.fromkeys(h.bucket_bytes for h in result.headlines if h.bucket_bytes))
    busbw = svg.curve_chart("bus bandwidth; the band: the plateau's sizes", "busbw",
                            [svg.Series(_label(s), tuple((r.size, r.busbw) for r in s.rows),
                                        (h.plateau_from, h.plateau_to) if h else None) for s, h in series],
                            rate_text, svg.RATE_UNITS, buckets)
    latency = svg.curve_chart("time per op", "time per op",
                              [svg.Series(_label(s), tuple((r.size, r.time_us) for r in s.rows)) for s, _ in series],
                              time_text, svg.TIME_UNITS, buckets)
    plateaus = tuple(f"{_label(s)}: {plateau_text(h)}" for s, h in series if h)
    return BandwidthView(result, plateaus, busbw, latency, pairs_view(report, result),
                         tuple(v for s in result.sweeps if (v := rank_times(report, s))))


def _label(sweep: Sweep) -> str:
    return f"{sweep.op}, {STAGE_TITLES[sweep.stage]} ({sweep.ranks} ranks)"


def pairs_view(report: Report, result: BandwidthResult) -> PairsView | None:
    """The pairs' view of the report's bandwidth RESULT, its slow pairs from the report's findings."""
    if not result.pairs:
        return None
    slow = {n for f in report.findings if f.check == BW_PAIR and f.severity != "pass" for n in f.nodes}
    ordered = sorted(result.pairs, key=lambda p: p.busbw)
    nodes = sorted({n for p in result.pairs for n in (p.a, p.b)})
    lost = lossy_pairs(report)
    name = result.node_name
    slowest = tuple((name(p.a), name(p.b), gbps_cell(p.busbw)) for p in ordered[:SLOWEST_PAIRS])
    named = ", ".join(name(n) for n in sorted(slow))
    resent = ", ".join(f"{name(a)} <-> {name(b)} {share:.1%}" for (a, b), share in
                       sorted(lost.items(), key=lambda item: -item[1])[:SLOWEST_PAIRS])
    if len(nodes) > HEATMAP_UP_TO:
        spread = svg.histogram([(p.busbw, p.a in slow or p.b in slow) for p in result.pairs], rate_text, "pairs",
                               "busbw each way", svg.RATE_UNITS)
        return PairsView(len(result.pairs), size_words(result.pairs[0].size), None, spread, slowest, named, resent)
    index = {n: k for k, n in enumerate(nodes)}
    values = {(index[a], index[b]): p.busbw for p in result.pairs for a, b in ((p.a, p.b), (p.b, p.a))}

    def title(i: int, j: int, v: float) -> str:
        share = lost.get((min(nodes[i], nodes[j]), max(nodes[i], nodes[j])))
        return (f"{name(nodes[i])} <-> {name(nodes[j])}: {rate_text(v)} each way"
                + (f", {share:.1%} of segments resent" if share else ""))
    yardstick = pair_yardstick(result)
    cells = svg.heatmap([name(n) for n in nodes], values, gbps_cell, title, yardstick,
                        BW_PAIR_SLOW, f"bw.pair's bound: {100 * BW_PAIR_SLOW:.0f}% of the median node's best pair "
                        f"({rate_text(yardstick)})", {index[n] for n in slow if n in index})
    return PairsView(len(result.pairs), size_words(result.pairs[0].size), cells, None, slowest, named, resent)


def rank_times(report: Report, sweep: Sweep) -> RankTimes | None:
    """The sweep's per-rank times at its largest size as a histogram; the ranks on the nodes
    bw.straggler names are marked, and its evidence names them."""
    if not sweep.rank_times:
        return None
    named = [f for f in report.findings if f.check == BW_STRAGGLER and f.severity != "pass"]
    slow_nodes = {n for f in named for n in f.nodes}
    chart = svg.histogram([(t.time_us, t.node in slow_nodes) for t in sweep.rank_times], time_text, "ranks",
                          "time per op", svg.TIME_UNITS)
    size = size_words(sweep.rows[-1].size) if sweep.rows else "the largest size"
    title = f"{_label(sweep)}: each rank's time per op at {size}"
    return RankTimes(title, chart, tuple(e for f in named for e in f.evidence))
