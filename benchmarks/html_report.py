"""The HTML report at scale (issue 37): a 4,096-node host report (tests/html_reports.py: every
node with its interfaces, a dozen passing checks naming every node, a bandwidth result with
4,096 rank times and 8,192 node pairs) saved as JSON, then `netcheck report REPORT.json --html
PAGE` as a user runs it (Python's start-up and the JSON's decoding included), and the page
opened in headless Chromium: the time to its load event, and the node table's filters.

Reproduce, from the repository's root (Debian's chromium installed; no root needed):
    .venv/bin/python benchmarks/html_report.py [--nodes 4096] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PY, REPO, machine_facts
from browser import Browser
from html_reports import cluster_report, hostname
from netcheck.render.text import render_json
from test_html import filtered


def timed_render(json_path: Path, page: Path) -> float:
    started = time.monotonic()
    subprocess.run([PY, "-m", "netcheck", "report", str(json_path), "--html", str(page)], cwd=REPO, check=False)
    return time.monotonic() - started


def browse(page: Path, nodes: int) -> dict[str, float]:
    """One fresh browser: the page's load, then each filter a person would try, in ms."""
    with Browser(timeout=120) as b:
        tab = b.open(page)
        assert tab.problems() == [], tab.problems()
        figures = {"load": tab.load_seconds * 1000}
        for name, script in (("one node", filtered(hostname(nodes - 1))), ("failing", filtered(severity="fail")),
                             ("first 500 again", filtered()), ("show all", filtered(more=True))):
            figures[name] = tab.evaluate(script)["ms"]
        return figures


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(machine_facts())
    with tempfile.TemporaryDirectory() as folder:
        json_path, page = Path(folder) / "report.json", Path(folder) / "report.html"
        json_path.write_text(render_json(cluster_report(args.nodes)))
        renders = [timed_render(json_path, page) for _ in range(args.rounds)]
        runs = [browse(page, args.nodes) for _ in range(args.rounds)]
        sizes = json_path.stat().st_size / 1e6, page.stat().st_size / 1e6
    print(f"{args.nodes} nodes: JSON {sizes[0]:.1f} MB, page {sizes[1]:.2f} MB")
    print(f"netcheck report --html: {spread(renders, 's', '.2f')}")
    for name in runs[0]:
        print(f"{name}: {spread([r[name] for r in runs], 'ms', '.0f')}")


def spread(values: list[float], unit: str, form: str) -> str:
    return f"median {statistics.median(values):{form}} {unit} ({', '.join(f'{v:{form}}' for v in values)})"


if __name__ == "__main__":
    main()
