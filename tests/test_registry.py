"""The check registry is the one source of check ids: the schema, the README and the code
agree with it, each entry leads to real rules and tests, and the layers import downwards.

(That the suite emits every id, with only the declared severities and kinds, is judged by
conftest once the whole suite has passed: see `judge_registry`.)
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from netcheck.core.constants import PHASES
from netcheck.core.model import SEVERITIES
from netcheck.rules.registry import BY_ID, CHECKS, KINDS

REPO = Path(__file__).parents[1]
PACKAGE = REPO / "netcheck"
SCHEMA = json.loads((REPO / "schema" / "netcheck.report.schema.json").read_text())
FINDING = SCHEMA["$defs"]["Finding"]["properties"]


def test_ids_and_kinds_are_unique_and_well_formed():
    assert len(BY_ID) == len(CHECKS)
    assert len(set(KINDS)) == len(KINDS)
    for c in CHECKS:
        assert re.fullmatch(r"[a-z]+(\.[a-z0-9_]+)+", c.id), c.id
        assert c.phase in PHASES + ("run", "inspect"), c
        assert c.severities and set(c.severities) <= set(SEVERITIES), c
        assert all(re.fullmatch(r"[a-z0-9_]+", k) for k in c.kinds), c


def test_the_schema_lists_exactly_the_registry():
    assert FINDING["check"]["enum"] == [c.id for c in CHECKS]
    assert FINDING["kind"]["enum"] == [""] + list(KINDS)


def test_the_readme_check_table_lists_exactly_the_registry():
    text = (REPO / "README.md").read_text()
    table = text[text.index("| check | what it catches | fix |"):]
    table = table[:table.index("\n\n")]
    assert re.findall(r"^\| `([a-z0-9_.]+)` \|", table, re.M) == [c.id for c in CHECKS]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_each_entry_leads_to_rules_that_emit_it_and_tests_that_make_it(check):
    constant = next(name for name, value in vars(importlib.import_module("netcheck.rules.registry")).items()
                    if value == check.id and name.isupper())
    for rule in check.rules:
        module_name, function = rule.rsplit(".", 1)
        module = importlib.import_module(f"netcheck.rules.{module_name}")
        assert callable(getattr(module, function)), rule
        assert constant in Path(module.__file__).read_text(), f"{rule} never names {constant}"
    for test in check.tests:
        text = (REPO / "tests" / test).read_text()
        names = {check.id, constant} | {r.rsplit(".", 1)[1] for r in check.rules}
        assert any(n in text for n in names), f"{test} neither names {check.id} nor calls its rules"


def test_every_kind_is_set_by_its_rules():
    sources = {c.id: "".join(Path(importlib.import_module(f"netcheck.rules.{r.rsplit('.', 1)[0]}").__file__)
                             .read_text() for r in c.rules) for c in CHECKS}
    registry = vars(importlib.import_module("netcheck.rules.registry"))
    for c in CHECKS:
        for kind in c.kinds:
            names = [n for n, v in registry.items() if v == kind and n.isupper()]
            assert any(n in sources[c.id] for n in names) or kind.startswith("lost_in_"), (c.id, kind)


# --- the layers ---------------------------------------------------------------------------

# Lowest first: a module imports only from its own layer or below.
LAYERS = ("core", "facts", "cluster", "bandwidth", "rules", "render", "config", "phases", "cli")
# Rules do no I/O: none of these in a rule module.
IO_MODULES = {"os", "socket", "subprocess", "selectors", "threading", "time", "tempfile", "shutil",
              "psutil", "netifaces", "torch", "signal"}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "netcheck" or len(parts) == 1:
        return len(LAYERS)  # netcheck itself (__version__), __main__: the top
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else len(LAYERS)


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return found


def imports_of(path: Path) -> set[str]:
    """Every module imported anywhere in the file (also inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names
                      if (PACKAGE.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").exists()}
    return found


def test_every_module_sits_in_a_layer():
    for name, _ in modules():
        parts = name.split(".")
        assert len(parts) == 1 or parts[1] in LAYERS + ("__main__",), name


@pytest.mark.parametrize("name,path", modules(), ids=[m for m, _ in modules()])
def test_modules_import_only_their_layer_and_below(name, path):
    upward = sorted(m for m in imports_of(path) if m.startswith("netcheck.") and layer_of(m) > layer_of(name))
    assert not upward, f"{name} imports from above its layer: {upward}"


@pytest.mark.parametrize("name,path", [m for m in modules() if m[0].startswith("netcheck.rules.")],
                         ids=[m for m, _ in modules() if m.startswith("netcheck.rules.")])
def test_rules_do_no_io(name, path):
    tree = ast.parse(path.read_text())
    assert not {m.split(".")[0] for m in imports_of(path)} & IO_MODULES, name
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"open", "print", "input"}, name
