"""--html and `netcheck report` (issue 37): the page holds what the JSON holds, shows what peers
sent as text, stays small and quick at 4,096 nodes, and works in a real browser.

The browser is Debian's headless Chromium (tests/browser.py, over its DevTools pipe): a page
that logs an error, throws, or asks for anything but itself fails. Screenshots of a 3-node and
a 4,096-node page are kept in pytest's folder for this run (the path is printed; pytest keeps
the last three runs), never committed.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

import nodes
from browser import Browser, chromium
from cluster import NodeSpec
from html_reports import cluster_report, hostname
from netcheck import cli
from netcheck.config import load_report
from netcheck.core.constants import BW_PAIR_SLOW, EXIT_BY_VERDICT, EXIT_USAGE
from netcheck.core.model import EnvRow
from netcheck.render.escape import printable
from netcheck.render.html import ROWS_SHOWN, render_html
from netcheck.render.text import export_lines, render_json, render_text
from test_cli import assert_one_usage_line, run_netcheck

SCALE = 4096
# The page of a 4,096-node report stays under this size. How fast it is written and filtered is
# measured by benchmarks/html_report.py (benchmarks/RESULTS.md), not asserted by a timing test.
SCALE_BYTES = 8 << 20

# What the page shows, read from its DOM: the tests compare it with the JSON.
SNAPSHOT = """(() => {
  const text = (e) => e.textContent;
  const all = (selector) => Array.from(document.querySelectorAll(selector));
  return {
    verdict: document.getElementById("verdict").dataset.verdict,
    findings: all("div.finding").map((f) => [f.closest("article").dataset.check, f.dataset.severity,
                                               f.dataset.kind, f.querySelectorAll(".evidence li").length]),
    nodes: all("#node-table tbody tr").map((r) => Array.from(r.cells).slice(0, 3).map(text)),
    env: all("#env-table tbody tr").map((r) => Array.from(r.cells).slice(0, 3).map(text)),
    exports: (document.getElementById("export-lines") || {textContent: ""}).textContent,
    cells: all("#pairs g.cell").length,
    slowest: all("#slowest-pairs tbody tr").length,
    curves: all("#bandwidth svg polyline").length,
    plateaus: all("#plateaus li").map(text),
    marked: all("#rank-times rect.bar.marked").length,
    stragglers: all("#rank-times .stragglers li").map(text),
    scripts: document.scripts.length,
    whom: all("div.finding").filter((f) => f.querySelector(".scope")).map((f) => [
      f.closest("article").dataset.check, f.querySelector(".scope").textContent, f.dataset.on,
      (f.querySelector(".why") || {textContent: ""}).textContent]),
    shown: all("#node-table tbody tr").filter((r) => !r.hidden).map((r) => r.cells[1].textContent),
  };
})()"""


def filtered(words: str = "", severity: str = "", more: bool = False) -> str:
    """Filter the node table as a person would (then ask for every match, with `more`); the
    hostnames left shown, what the count says, and the milliseconds the filter and the layout
    after it took."""
    return f"""(() => {{
      const started = performance.now();
      const input = document.getElementById("node-filter"), select = document.getElementById("severity-filter");
      input.value = {json.dumps(words)};
      input.dispatchEvent(new Event("input"));
      select.value = {json.dumps(severity)};
      select.dispatchEvent(new Event("change"));
      if ({json.dumps(more)}) document.getElementById("show-all").click();
      document.body.offsetHeight;
      const ms = performance.now() - started;
      const shown = Array.from(document.querySelectorAll("#node-table tbody tr")).filter((r) => !r.hidden);
      const count = document.getElementById("node-count").textContent;
      return {{ms, count, shown: shown.map((r) => r.cells[1].textContent)}};
    }})()"""


SORT_BY_RANK = """(() => {
  const th = document.querySelector("#node-table th");
  th.click(); th.click();
  return Array.from(document.querySelectorAll("#node-table tbody tr")).map((r) => Number(r.cells[0].textContent));
})()"""


@pytest.fixture(scope="module")
def browser():
    if chromium() is None:
        why = "needs headless Chromium (apt package chromium; make test installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI=true, so this is a failure, not a skip", pytrace=False)
        pytest.skip(why)
    with Browser(timeout=nodes.scaled(60)) as b:
        yield b


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("html-screenshots")
    print(f"\nscreenshots of the HTML reports: {folder}")
    return folder


def saved(report, folder: Path) -> Path:
    path = folder / "report.json"
    path.write_text(render_json(report))
    return path


def rendered_again(json_path: Path, *more: str) -> Path:
    """`netcheck report REPORT.json --html PAGE`, in process: the page of a saved report."""
    page = json_path.with_suffix(".html")
    assert cli.main(["report", str(json_path), "--html", str(page), *more]) == EXIT_BY_VERDICT["fail"]
    return page


def expected(report: dict) -> dict:
    """What the page must show, from the JSON alone."""
    return {
        "verdict": report["verdict"],
        "findings": sorted([f["check"], f["severity"], f["kind"], len(f["evidence"])] for f in report["findings"]),
        "nodes": [[str(n["rank"]), n["hostname"], n["address"]] for n in report["nodes"]],
        "env": [[r["key"], r["value"], r["nodes"]] for r in report["env_table"]],
    }


def shown(snapshot: dict) -> dict:
    return {"verdict": snapshot["verdict"], "findings": sorted(snapshot["findings"]), "nodes": snapshot["nodes"],
            "env": snapshot["env"]}


# --- in a browser ---------------------------------------------------------------------------


def test_a_3_node_page_holds_what_its_json_holds_and_loads_clean(browser, artefacts, tmp_path):
    report = cluster_report(3)
    json_path = saved(report, tmp_path)
    page = browser.open(rendered_again(json_path))
    page.screenshot(artefacts / "3-nodes.png")
    assert page.problems() == []
    snapshot = page.evaluate(SNAPSHOT)
    assert shown(snapshot) == expected(json.loads(json_path.read_text()))
    assert snapshot["exports"].splitlines() == export_lines(report)[1:]
    assert "export NCCL_SOCKET_IFNAME==eth0" in snapshot["exports"]
    pairs = report.bandwidth.pairs
    assert snapshot["cells"] == 2 * len(pairs) and snapshot["slowest"] == len(pairs)
    assert snapshot["curves"] == 2   # busbw and time per op, one sweep each
    assert len(snapshot["plateaus"]) == len(report.bandwidth.headlines)
    (straggler,) = [f for f in report.findings if f.check == "bw.straggler"]
    assert snapshot["stragglers"] == list(straggler.evidence) and snapshot["marked"] == 1
    assert snapshot["scripts"] == 1
    (mesh,) = [f for f in report.findings if f.check == "mesh.connect"]
    assert snapshot["whom"] == [
        ["mesh.connect", "NCCL only:", "nccl_socket nccl_rdma", f"why NCCL only: {mesh.impact.why}"],
        ["host.clock", "torchrun's rendezvous:", "launch", ""]], "the rest stop every job, or pass"


def test_a_finding_that_stops_only_some_jobs_is_labelled_with_its_why_and_the_rest_are_not():
    """Issue 64, without a browser: the page says whom a finding stops where that is not every
    job, as the text does, and its rule's why; received text in a why is shown as text."""
    report = cluster_report(3, {2: "<b>c</b>"})
    text = render_html(report)
    assert '<span class="scope">NCCL only:</span> &lt;b&gt;c&lt;/b&gt; cannot be reached from 2 others' in text
    why = "<b>why NCCL only:</b> gloo dials each pair from the larger address: &lt;b&gt;c&lt;/b&gt;'s, the largest"
    assert f'<p class="why">{why}' in text.replace("&#39;", "'")
    assert 'data-effect="risks" data-on="launch"' in text and text.count('class="scope"') == 2


# Each picture's axes as drawn (x, y, and a heatmap's colour scale c): the tick labels along
# each axis and the axis's title.
AXES = """Array.from(document.querySelectorAll("#bandwidth svg, #pairs svg, #rank-times svg")).map((svg) =>
  Object.fromEntries(["x", "y", "c"].map((axis) => [axis, {
    ticks: Array.from(svg.querySelectorAll(`text.tick.${axis}`)).map((t) => t.textContent),
    titles: Array.from(svg.querySelectorAll(`text.axis.${axis}`)).map((t) => t.textContent)}])))"""

# The heatmap's cells (their share of the yardstick, outlined or not, the ink their fill takes)
# and its legend.
HEATMAP = """(() => ({
  cells: Array.from(document.querySelectorAll("#pairs g.cell")).map((g) => ({
    share: Number(g.dataset.share), named: g.classList.contains("named"),
    ink: g.querySelector("text").getAttribute("class"), title: g.querySelector("title").textContent})),
  scale: Array.from(document.querySelectorAll("#pairs .colour-scale text.tick")).map((t) => t.textContent),
  bound: document.querySelectorAll("#pairs .colour-scale line.bound").length,
  legend: (document.getElementById("pair-legend") || {textContent: ""}).textContent,
}))()"""


def assert_every_axis_reads(page) -> int:
    """Every axis of every picture on the page has a title, and no two of its tick labels alike;
    an axis of figures says their unit in brackets (a size's label says its own: 64 KiB). The
    number of axes."""
    axes = [(k, axis, a) for k, svg in enumerate(page.evaluate(AXES)) for axis, a in svg.items() if a["ticks"]]
    for k, axis, a in axes:
        assert len(set(a["ticks"])) == len(a["ticks"]) and len(a["titles"]) == 1, (k, axis, a)
        if any(re.fullmatch(r"[\d.]+", t) for t in a["ticks"]):
            assert re.search(r"\(\S[^()]*\)$", a["titles"][0]), (k, axis, a)
    return len(axes)


@pytest.mark.parametrize("healthy", [True, False], ids=["healthy", "one-slow-node"])
def test_every_picture_has_units_on_its_axes_and_distinct_ticks(healthy, browser, artefacts, tmp_path):
    """Close figures (pairs at 1.41 and 1.44 GB/s, ranks within 0.4 ms of 165 ms) and far ones
    (a node at a fifth, a rank at four times), on one machine where every node is `vm`."""
    report = cluster_report(5, {r: "vm" for r in range(5)}, healthy=healthy)
    page = browser.open(rendered_again(saved(report, tmp_path)))
    page.evaluate('document.getElementById("pairs").scrollIntoView()')
    page.screenshot(artefacts / f"axes-{'healthy' if healthy else 'slow'}.png")
    assert page.problems() == []
    # busbw: x, y; time per op: x, y; heatmap: the nodes both ways, its colour scale; per-rank: x, y
    assert assert_every_axis_reads(page) == 9


def test_a_healthy_clusters_heatmap_shows_no_pair_as_bad_and_has_a_legend(browser, tmp_path):
    report = cluster_report(5, healthy=True)
    assert all(f.severity == "pass" for f in report.findings if f.check == "bw.pair")
    page = browser.open(rendered_again(saved(report, tmp_path)))
    heat = page.evaluate(HEATMAP)
    assert len(heat["cells"]) == 2 * len(report.bandwidth.pairs)
    # 1.41 and 1.44 GB/s are both near the top of the scale: light fills, none outlined
    assert all(c["share"] > 0.95 and c["ink"] == "dark" and not c["named"] for c in heat["cells"]), heat
    assert heat["bound"] == 1 and len(set(heat["scale"])) == 3
    assert f"{100 * BW_PAIR_SLOW:.0f}% of the median node's best pair" in heat["legend"]
    assert "Outlined" not in heat["legend"]


def test_a_slow_node_stands_out_in_the_heatmap(browser, tmp_path):
    report = cluster_report(5)
    (pair,) = [f for f in report.findings if f.check == "bw.pair"]
    assert pair.severity == "fail" and pair.nodes == (5 // 3,)
    page = browser.open(rendered_again(saved(report, tmp_path)))
    heat = page.evaluate(HEATMAP)
    slow_name = hostname(5 // 3)
    slow = [c for c in heat["cells"] if slow_name in c["title"].split(":")[0].split(" <-> ")]
    rest = [c for c in heat["cells"] if c not in slow]
    assert len(slow) == 2 * 4 and rest
    assert all(c["share"] < BW_PAIR_SLOW and c["named"] and c["ink"] == "light" for c in slow), slow
    assert all(c["share"] >= BW_PAIR_SLOW and not c["named"] for c in rest), rest
    assert "Outlined: a pair of a node bw.pair names" in heat["legend"]


SAID_STATUS = """new Promise((done) => {
  const status = document.getElementById("copy-status");
  const look = () => status.textContent ? done(status.textContent) : setTimeout(look, 20);
  look();
})"""


def test_the_node_table_filters_by_words_and_severity_and_sorts(browser, tmp_path):
    report = cluster_report(5)
    page = browser.open(rendered_again(saved(report, tmp_path)))
    assert page.evaluate(filtered("sim0003"))["shown"] == ["sim0003"]
    assert page.evaluate(filtered("198.18.16.2 eth0"))["shown"] == ["sim0002"]
    assert page.evaluate(filtered(severity="fail"))["shown"] == sorted(report.faulty_nodes)
    warned = {report.nodes[r].hostname for f in report.findings if f.severity == "warn" for r in f.nodes}
    assert set(page.evaluate(filtered(severity="warn"))["shown"]) == warned - set(report.faulty_nodes)
    assert page.evaluate(filtered("mesh.connect", "fail"))["shown"] == [hostname(4)]
    assert page.evaluate(filtered())["shown"] == [hostname(r) for r in range(5)]
    assert page.evaluate(SORT_BY_RANK) == [4, 3, 2, 1, 0]
    page.evaluate('document.getElementById("copy-exports").click()')
    # The clipboard answers through a promise: the status is waited for, not read at once.
    assert page.evaluate(SAID_STATUS) in ("copied", "select the lines and copy them")
    assert page.problems() == []


HOSTILE = {1: '<script>alert("owned")</script><img src="https://198.18.0.99/x.png">',
           2: 'node2\u202e"><b onmouseover=alert(1)>x'}


def test_a_hostile_name_renders_as_text(browser, tmp_path):
    """Hostnames in the run's own report, as --html renders it (the codec admits no such
    hostname from a peer or a file), and a variable's value in a saved one."""
    report = cluster_report(3, HOSTILE)
    text = render_html(report)
    assert text.count("<script") == 1 and "<img" not in text and "<b " not in text
    (tmp_path / "hostile.html").write_text(text, encoding="utf-8")
    page = browser.open(tmp_path / "hostile.html")
    assert page.problems() == []      # no script ran, no image was asked for
    snapshot = page.evaluate(SNAPSHOT)
    assert snapshot["scripts"] == 1
    assert [row[1] for row in snapshot["nodes"]] == [hostname(0), HOSTILE[1], printable(HOSTILE[2])]
    assert page.evaluate("document.querySelectorAll('img, [onmouseover]').length") == 0
    assert page.evaluate(filtered("<script>"))["shown"] == [HOSTILE[1]]
    hostile_value = EnvRow("env.NCCL_DEBUG", HOSTILE[1], (1,), "sim0001", "warn")
    saved_report = replace(cluster_report(3), env_table=(hostile_value,))
    page = browser.open(rendered_again(saved(saved_report, tmp_path)))
    assert page.problems() == []
    assert page.evaluate(SNAPSHOT)["env"] == [["env.NCCL_DEBUG", HOSTILE[1], "sim0001"]]


def test_a_4096_node_page_stays_small_and_filters_to_what_was_asked(browser, artefacts, tmp_path):
    json_path = saved(cluster_report(SCALE), tmp_path)
    started = time.monotonic()
    html_path = rendered_again(json_path)   # the JSON read back through the codec, then the page
    seconds = time.monotonic() - started
    size = html_path.stat().st_size
    page = browser.open(html_path)
    page.screenshot(artefacts / f"{SCALE}-nodes.png")
    print(f"\n{SCALE} nodes: JSON {json_path.stat().st_size / 1e6:.1f} MB, page {size / 1e6:.2f} MB written in "
          f"{seconds:.2f} s, loaded in {page.load_seconds:.2f} s")
    assert size < SCALE_BYTES
    assert page.problems() == []
    snapshot = page.evaluate(SNAPSHOT)
    assert shown(snapshot) == expected(json.loads(json_path.read_text()))
    assert snapshot["cells"] == 0 and snapshot["slowest"] == 20    # the pairs' spread, not a 4096 x 4096 matrix
    assert len(snapshot["shown"]) == ROWS_SHOWN
    assert page.evaluate('document.getElementById("node-count").textContent') == \
        f"{ROWS_SHOWN} of {SCALE} shown, {SCALE} match"
    one = page.evaluate(filtered(hostname(SCALE - 1)))
    failing = page.evaluate(filtered(severity="fail"))
    first = page.evaluate(filtered())
    every = page.evaluate(filtered(more=True))
    print(f"filters: {one['ms']:.0f} ms to one node, {failing['ms']:.0f} ms to the failing, {first['ms']:.0f} ms "
          f"back to the first {ROWS_SHOWN}, {every['ms']:.0f} ms to show all {SCALE}")
    assert one["shown"] == [hostname(SCALE - 1)] and len(failing["shown"]) == 2
    assert first["shown"] == [hostname(r) for r in range(ROWS_SHOWN)]
    assert first["count"] == f"{ROWS_SHOWN} of {SCALE} shown, {SCALE} match"
    assert len(every["shown"]) == SCALE and every["count"] == f"{SCALE} of {SCALE} shown"


# --- the command line -------------------------------------------------------------------------


def test_report_renders_a_saved_report_as_text_by_default_with_the_verdicts_exit_code(tmp_path, capsys):
    report = cluster_report(3)
    assert cli.main(["report", str(saved(report, tmp_path))]) == EXIT_BY_VERDICT[report.verdict]
    assert capsys.readouterr().out == render_text(report)
    page = rendered_again(saved(report, tmp_path), "--text")
    assert capsys.readouterr().out == render_text(report)
    assert page.read_text(encoding="utf-8") == render_html(report)


@pytest.mark.parametrize("content, message", [
    (b"{", "not a netcheck.report/1 report"),
    (b'{"schema": "netcheck.report/1"}', "not a netcheck.report/1 report"),
    (b"\xff\xfe", "not a netcheck.report/1 report"),
])
def test_report_of_a_malformed_file_is_one_line_and_exit_64(content, message, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert cli.main(["report", str(path), "--html", str(tmp_path / "x.html")]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out)
    assert f"netcheck report {path}: {message}" in err
    assert not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("argv, message", [
    (["report"], "the following arguments are required: REPORT.json"),
    (["report", "/nonexistent/r.json"], "netcheck report /nonexistent/r.json: No such file or directory"),
    (["report", "r.json", "--html", "/nonexistent/p.html"],
     "--html /nonexistent/p.html: the folder /nonexistent does not exist"),
    (["report", "r.json", "--html", "-"], "--html -: the page is written to a file: give its path"),
    (["--rdzv", "node0", "--html", "-"], "--html -: the page is written to a file: give its path"),
    (["--rdzv", "node0", "--html", "/nonexistent/p.html"],
     "--html /nonexistent/p.html: the folder /nonexistent does not exist"),
])
def test_html_usage_errors_exit_64(argv, message, capsys):
    assert cli.main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out)
    assert message in err


@pytest.mark.parametrize("command, args, checks", [
    ("inspect", ("--rdzv", "127.0.0.1:{port}", "--timeout", "3"), ["job.store"]),
    ("probe", ("127.0.0.1:{port}", "--timeout", "1"), ["rdzv.resolve", "rdzv.reach"]),
    ("local", (), None),
])
def test_every_command_that_reports_writes_its_page(command, args, checks, tmp_path):
    """inspect, probe and local write the page of the report they print, as a run does."""
    page, json_path = tmp_path / f"{command}.html", tmp_path / f"{command}.json"
    port = nodes.free_port()
    done = run_netcheck(command, *(a.format(port=port) for a in args), "--html", str(page), "--json", str(json_path))
    report = nodes.read_report(json_path)
    assert done.returncode == EXIT_BY_VERDICT[report["verdict"]], done.stderr
    assert f"the HTML report is in {page}" in done.stderr
    assert page.read_text(encoding="utf-8") == render_html(load_report("--json", str(json_path)))
    if checks is not None:   # local's checks are this machine's
        assert [f["check"] for f in report["findings"]] == checks


# --- a real cluster ---------------------------------------------------------------------------


@pytest.mark.root_required
def test_host_and_joiners_write_their_pages_from_a_real_run(cluster, browser, tmp_path):
    """Three namespace nodes with the bandwidth phase: each node's page is its own report's,
    and the host's shows the measured curves, pairs and per-rank times, clean in a browser."""
    args = lambda i: ["--rdzv", "node0:29500", "--nnodes", "3", "--node-rank", str(i),  # noqa: E731
                      "--timeout", str(nodes.scaled(60)), "--html", str(tmp_path / f"node{i}.html")]
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        runs = nodes.finish_all([nodes.start(c, i, args(i), tmp_path, bandwidth=True) for i in range(3)], 120)
    for r in runs:   # a healthy cluster's, but for what a busy machine makes of its speed
        judged = {f["check"] for f in r.report["findings"] if f["severity"] != "pass"}
        assert judged <= nodes.SPEED_VERDICTS and (r.rc == 0) == (not judged), nodes.explain(runs)
    for r in runs:
        report = load_report("--json", str(r.json_path))
        assert report.role == ("host" if r.node == 0 else "joiner")
        assert (tmp_path / f"node{r.node}.html").read_text(encoding="utf-8") == render_html(report)
    page = browser.open(tmp_path / "node0.html")
    assert page.problems() == []
    snapshot = page.evaluate(SNAPSHOT)
    assert shown(snapshot) == expected(runs[0].report)
    assert snapshot["curves"] >= 2 and snapshot["cells"] == 6 and snapshot["plateaus"]
    assert page.evaluate("document.querySelectorAll('#rank-times rect.bar').length") > 0

