"""`netcheck checks`: every check netcheck can report, for runbook writers who alert on ids."""

from __future__ import annotations

from tabulate import tabulate

from netcheck.core import codec
from netcheck.rules.registry import Check


def render_checks_text(checks: tuple[Check, ...]) -> str:
    rows = []
    for c in checks:
        rows.append((c.id, c.phase, "/".join(c.severities), c.meaning))
        rows += [(f"kind {name}", "", "/".join(kind.severities), kind.meaning) for name, kind in c.kinds.items()]
    return tabulate(rows, headers=("check", "phase", "severities", "meaning"), tablefmt="plain") + "\n"


def render_checks_json(checks: tuple[Check, ...]) -> str:
    return codec.dumps(list(checks), indent=2) + "\n"
