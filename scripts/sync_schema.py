"""Write the registry's check ids and kinds, and the parts and effects a finding's impact names,
into the report schema's enums.

    python scripts/sync_schema.py

The registry (netcheck/rules/registry.py) is their one source (the parts and effects: model.PARTS
and EFFECTS, which it declares per check); tests/test_registry.py fails when the schema disagrees
with them, and this is how to make it agree.
"""

from __future__ import annotations

import json
from pathlib import Path

from netcheck.core.model import EFFECTS, PARTS
from netcheck.rules.registry import CHECKS, KINDS

SCHEMA = Path(__file__).resolve().parent.parent / "schema" / "netcheck.report.schema.json"


def main() -> None:
    schema = json.loads(SCHEMA.read_text())
    finding = schema["$defs"]["Finding"]["properties"]
    finding["check"]["enum"] = [c.id for c in CHECKS]
    finding["kind"]["enum"] = [""] + list(KINDS)
    impact = schema["$defs"]["Impact"]["properties"]
    impact["on"]["items"]["enum"] = list(PARTS)
    impact["effect"]["enum"] = list(EFFECTS)
    SCHEMA.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
