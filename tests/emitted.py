"""Which checks the suite saw emitted, for the registry's completeness check (conftest).

Every process of the suite (xdist workers included) appends what it sees to its own file
in one folder: the findings of every rule function the registry names, as unit tests call
them, and every finding of every JSON report a real netcheck process wrote.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path

FOLDER_VARIABLE = "NETCHECK_TEST_EMITTED_DIR"


def record(check: str, severity: str, kind: str) -> None:
    folder = os.environ.get(FOLDER_VARIABLE)
    if folder:
        with open(Path(folder) / f"{os.getpid()}.tsv", "a") as out:
            out.write(f"{check}\t{severity}\t{kind}\n")


def record_findings(findings) -> None:
    for f in findings:
        if isinstance(f, dict):
            record(f["check"], f["severity"], f.get("kind", ""))
        else:
            record(f.check, f.severity, f.kind)


def watch_rules() -> None:
    """Record what every rule function the registry names returns (observed, not changed)."""
    from netcheck.rules.registry import CHECKS

    for name in sorted({rule for c in CHECKS for rule in c.rules}):
        module_name, function = name.rsplit(".", 1)
        module = importlib.import_module(f"netcheck.rules.{module_name}")
        rule = getattr(module, function)
        if getattr(rule, "__wrapped__", None):
            continue
        setattr(module, function, _recording(rule))


def _recording(rule):
    @functools.wraps(rule)
    def recorded(*args, **kwargs):
        out = rule(*args, **kwargs)
        record_findings(out if isinstance(out, list) else [out])
        return out
    return recorded


def seen(folder: Path) -> set[tuple[str, str, str]]:
    return {tuple(line.split("\t")) for p in folder.glob("*.tsv")
            for line in p.read_text().splitlines() if line}
