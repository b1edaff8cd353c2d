"""`netcheck checks`: every check netcheck can report, for runbook writers who alert on ids."""

from __future__ import annotations

from tabulate import tabulate

from netcheck.core import codec
from netcheck.rules.registry import Check, impact_words


def render_checks_text(checks: tuple[Check, ...]) -> str:
    rows = []
    for c in checks:
        rows.append((c.id, c.phase, "/".join(c.severities), impact_words(c.impact), c.meaning))
        rows += [(f"kind {name}", "", "/".join(kind.severities), impact_words(kind.impact) if kind.impact else "",
                  kind.meaning) for name, kind in c.kinds.items()]
    return tabulate(rows, headers=("check", "phase", "severities", "whom it stops", "meaning"),
                    tablefmt="plain") + "\n"


def whom(check: Check) -> str:
    """Whom a check's findings stop, with each kind that says otherwise: the README's column."""
    return "; ".join([impact_words(check.impact)] + [f"`{name}` {impact_words(kind.impact)}"
                                                     for name, kind in check.kinds.items() if kind.impact])


def render_checks_json(checks: tuple[Check, ...]) -> str:
    return codec.dumps(list(checks), indent=2) + "\n"
