#!/usr/bin/env python3
"""A netcheck report as Kubernetes node labels, the way Google's cluster-health-scanner marks a
node with its result and a time after which the mark no longer counts. It prints the kubectl
command, for `sh` or a person to run:

    netcheck local -q --json /tmp/netcheck.json
    python3 node_labels.py /tmp/netcheck.json "$NODE_NAME" | sh

- the report puts this node itself at fault (its `fault.party` is `this_node`, exit 2): label
  it `netcheck/at-fault=true`, `netcheck/check=` the failing check, `netcheck/valid-until=` the
  report's time (its file's) plus --valid-for, in epoch seconds (a label value holds no colon);
- no check failed (`nobody`): remove the three labels, as the Slurm gate resumes a node;
- anything else (another node at fault, the cluster's failure, netcheck's own): nothing, so a
  node is never marked for a peer's fault, nor cleared by a run that could not judge it.

NODE is the Kubernetes node's name (the downward API's spec.nodeName), which need not be the
hostname in the report. A file that is no netcheck report is one line and exit 64. It imports
netcheck (its report reader), so run it with the Python netcheck is installed in.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from typing import NoReturn

from netcheck.config import BaselineError, load_report
from netcheck.core.model import NOBODY, THIS_NODE, Report

PREFIX = "netcheck/"
KEYS = ("at-fault", "check", "valid-until")
VALID_FOR = 3600   # seconds: an hour, a few of the gates' intervals
# A label value (Kubernetes' validation.IsValidLabelValue): 63 characters at most, alphanumeric at
# both ends, `-_.` between.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")


def label_lines(report: Report, node: str, written: int, valid_for: int) -> list[str]:
    """The kubectl command for `node` given its report, written at `written` (epoch seconds)."""
    party = report.fault.party if report.fault is not None else None
    if party == THIS_NODE:
        labels = {"at-fault": "true", "check": failing_check(report), "valid-until": str(written + valid_for)}
        marks = [f"{PREFIX}{k}={v}" for k, v in labels.items() if v]
        return [shlex.join(["kubectl", "label", "node", node, "--overwrite", *marks])]
    if party == NOBODY:
        return [shlex.join(["kubectl", "label", "node", node, *(f"{PREFIX}{k}-" for k in KEYS)])]
    return []


def failing_check(report: Report) -> str:
    """The check of the failure that puts the node at fault (the fault's `why`, "check: summary");
    "" where it is none a label can hold."""
    check = report.fault.why.split(":", 1)[0] if report.fault is not None else ""
    return check if LABEL_VALUE.fullmatch(check) else ""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # netcheck's usage exit, not argparse's 2
        self.exit(64, f"{self.prog}: error: {message}\n")


def main(argv: list[str]) -> int:
    p = _Parser(prog="node_labels.py", description="netcheck's report as kubectl node labels (this node at fault).")
    p.add_argument("report", metavar="REPORT.json", help="the JSON report of netcheck on this node (--json)")
    p.add_argument("node", metavar="NODE", help="this node's Kubernetes name (spec.nodeName)")
    p.add_argument("--valid-for", type=int, default=VALID_FOR, metavar="S",
                   help=f"seconds the mark counts for after the report was written (default {VALID_FOR})")
    args = p.parse_args(argv)
    if args.valid_for <= 0:
        p.error(f"--valid-for {args.valid_for}: give seconds above 0")
    try:
        report = load_report("REPORT.json", args.report)
    except BaselineError as e:
        print(f"node_labels: {e}", file=sys.stderr)
        return 64
    for line in label_lines(report, args.node, int(os.stat(args.report).st_mtime), args.valid_for):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
