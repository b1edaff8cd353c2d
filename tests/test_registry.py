"""The check registry is the one source of check ids: the schema, the README and the code
agree with it, each entry leads to real rules and tests, every finding is built in a rule it
lists and with a kind and severity it declares (read from the rules' syntax trees), and the
layers import downwards.

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
from netcheck.core.model import (
    EFFECTS,
    FAIL,
    NCCL_RDMA,
    NCCL_SOCKET,
    NOTHING,
    PARTS,
    PASS,
    RISKS,
    SEVERITIES,
    SLOWS,
    STOPS,
    WARN,
    Finding,
    Impact,
)
from netcheck.render.checks import render_checks_json, render_checks_text, whom
from netcheck.rules.registry import (
    BY_ID,
    CHECKS,
    JOIN_FOREIGN,
    JOIN_LATE,
    KINDS,
    NIC_NCCL_DEFAULT,
    NO_IMPACT,
    PART_MEANINGS,
    PART_WORDS,
    RDZV_JOIN,
    RDZV_REACH,
    Check,
    Kind,
    declared_impact,
    impact_of,
    impacted,
)

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


def test_the_schema_lists_exactly_the_parts_and_effects_an_impact_names():
    impact = SCHEMA["$defs"]["Impact"]["properties"]
    assert impact["on"]["items"]["enum"] == list(PARTS) and impact["effect"]["enum"] == list(EFFECTS)


# --- whom each check's findings stop ------------------------------------------------------------

@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_every_check_and_kind_says_whom_it_stops(check):
    """Each check declares an impact (the dataclass will not build without one), each kind its
    own or its check's; each names parts of the job and an effect from the fixed set, parts
    exactly where it has an effect on them, none twice; a kind declares its own only where it
    differs from its check's."""
    for kind in ("", *check.kinds):
        impact = declared_impact(check, kind)
        assert isinstance(impact, Impact) and impact.effect in EFFECTS and set(impact.on) <= set(PARTS), (kind, impact)
        assert (impact.effect == NOTHING) == (not impact.on) and len(set(impact.on)) == len(impact.on), (kind, impact)
        assert not impact.why, "the table's word needs no why: a rule narrowing one finding's says why"
    assert all(k.impact != check.impact for k in check.kinds.values() if k.impact), check.id


def test_every_part_and_effect_has_its_words():
    assert set(PART_WORDS) == set(PART_MEANINGS) == set(PARTS)


def test_a_finding_says_its_checks_impact_its_kinds_or_its_rules():
    fail = Finding(check=RDZV_REACH, severity=FAIL, nodes=(1,), summary="filtered")
    assert impact_of(fail) == BY_ID[RDZV_REACH].impact
    limits = Finding(check="host.limits", severity=WARN, nodes=(1,), summary="few descriptors", kind="nofile_peers")
    assert impact_of(limits) == BY_ID["host.limits"].kinds["nofile_peers"].impact
    narrowed = Impact((NCCL_SOCKET, NCCL_RDMA), STOPS, "gloo dials the other way")
    assert impact_of(Finding(check="mesh.connect", severity=FAIL, nodes=(1,), summary="x", impact=narrowed)) == narrowed
    assert impacted([fail])[0].impact == BY_ID[RDZV_REACH].impact


def test_a_warning_of_a_check_that_stops_risks_and_one_that_slows_slows():
    """A warning promises no stop (docs/contract.md, "Promises": only a FAIL says the job stops)."""
    warned = impact_of(Finding(check="rdzv.join", severity=WARN, nodes=(), summary="a node of another run",
                               kind="foreign_run"))
    assert (warned.on, warned.effect) == (BY_ID["rdzv.join"].impact.on, RISKS)
    assert impact_of(Finding(check="nic.speed", severity=WARN, nodes=(1,), summary="slower link")).effect == SLOWS


def test_a_finding_of_a_check_this_version_does_not_know_says_nothing_of_whom():
    assert impact_of(Finding(check="future.check", severity=FAIL, nodes=(1,), summary="x")) is None
    assert impacted([Finding(check="future.check", severity=FAIL, nodes=(1,), summary="x")])[0].impact is None


def test_nccl_default_speaks_for_nccl_alone():
    assert set(BY_ID[NIC_NCCL_DEFAULT].impact.on) == {NCCL_SOCKET, NCCL_RDMA}


def test_netcheck_checks_says_whom_each_check_and_kind_stops():
    lines = render_checks_text(CHECKS).splitlines()
    assert "whom it stops" in lines[0]
    assert re.match(r"nic\.nccl_default +nic +pass/warn/fail +stops NCCL +the interfaces NCCL", next(
        line for line in lines if line.startswith("nic.nccl_default")))
    assert re.match(r"kind store_stalled +warn +slows torchrun's rendezvous, the store +", next(
        line for line in lines if line.startswith("kind store_stalled")))
    plain = json.loads(render_checks_json(CHECKS))
    assert plain[0]["impact"] == {"on": ["launch", "store"], "effect": "stops", "why": "", "form": ""}


def readme_table(header: str) -> str:
    text = (REPO / "README.md").read_text()
    table = text[text.index(header):]
    return table[:table.index("\n\n")]


def test_the_readme_check_table_lists_exactly_the_registry_and_whom_each_stops():
    table = readme_table("| check | whom it stops | what it catches | fix |")
    assert re.findall(r"^\| `([a-z0-9_.]+)` \|", table, re.M) == [c.id for c in CHECKS]
    assert re.findall(r"^\| `[a-z0-9_.]+` \| ([^|]+) \|", table, re.M) == [whom(c) for c in CHECKS]


def test_the_readme_names_every_part_a_finding_can_stop():
    table = readme_table("| part (`on`) | what it is | a job that meets it |")
    assert re.findall(r"^\| `([a-z_]+)` \|", table, re.M) == list(PARTS)


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



# --- every finding built in a listed rule ---------------------------------------------------
# A rule function listed in the registry, and the module's own functions it calls, are where
# findings are made: a `Finding(` anywhere else (a phase, an unlisted function) is one the
# registry, `netcheck checks` and the README cannot know of.

REGISTRY = vars(importlib.import_module("netcheck.rules.registry"))
LISTED = {rule for c in CHECKS for rule in c.rules}
# The names a rule says a check, kind or severity with, and what they are.
NAMED = {n: v for n, v in REGISTRY.items() if n.isupper() and isinstance(v, str)} | {
    "PASS": PASS, "WARN": WARN, "FAIL": FAIL}
FINDING_FIELDS = {"check": 0, "severity": 1, "kind": 6}   # Finding's fields, by position


def called(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def makes_finding(call: ast.Call) -> bool:
    """Finding(...), or a replace() of a finding's check, severity or kind."""
    return called(call) == "Finding" or called(call) == "replace" and bool(
        {k.arg for k in call.keywords} & set(FINDING_FIELDS))


def built_in(node: ast.AST) -> list[ast.Call]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and makes_finding(c)]


def functions_of(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def reach(name: str, functions: dict[str, ast.FunctionDef], beyond: set[str] = frozenset()) -> set[str]:
    """`name` and every function of its module it calls (or hands on), theirs too; those in
    `beyond` are neither entered nor counted."""
    seen, todo = set(), [name]
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo += [n.id for n in ast.walk(functions[f]) if isinstance(n, ast.Name) and n.id in functions
                     and n.id not in beyond]
    return seen


def unlisted_findings(root: Path, listed: set[str]) -> list[str]:
    """Every finding built under the package at `root` where the registry (`listed`, its
    "module.function" under rules/) cannot see it: outside rules/, outside a module-level
    function, in a public function not listed (one that only calls listed rules is their sum),
    or in a private one no listed rule calls."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        functions = functions_of(tree)
        builds = {name for name, f in functions.items() if built_in(f)}
        inside = {id(c) for name in builds for c in built_in(functions[name])}
        problems += [f"{module}:{c.lineno}: a finding built outside a function" for c in built_in(tree)
                     if id(c) not in inside]
        if not module.startswith("rules."):
            problems += [f"{module}.{name}: builds a finding outside netcheck.rules" for name in sorted(builds)]
            continue
        rules = {name for name in functions if f"{module[6:]}.{name}" in listed}
        reached = {f for name in rules for f in reach(name, functions)}
        for name in sorted(set(functions) - rules):
            if not name.startswith("_") and reach(name, functions, rules) & builds:
                problems.append(f"{module}.{name}: builds findings and is not in the registry")
            elif name in builds and name not in reached:
                problems.append(f"{module}.{name}: builds findings and no listed rule calls it")
    return problems


def test_every_finding_is_built_in_a_rule_the_registry_lists():
    assert unlisted_findings(PACKAGE, LISTED) == []


def test_a_finding_built_outside_the_registry_is_caught(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "phases").mkdir()
    (tmp_path / "rules" / "planted.py").write_text(
        "from netcheck.core.model import FAIL, Finding\n\n"
        "def listed():\n    return [_helper(), Finding('x.y', FAIL, (), 'listed')]\n\n"
        "def _helper():\n    return Finding('x.y', FAIL, (), 'called by a listed rule')\n\n"
        "def unlisted():\n    return Finding('x.y', FAIL, (), 'missed')\n\n"
        "def _orphan():\n    return Finding('x.y', FAIL, (), 'called by no listed rule')\n\n"
        "def calls_orphan():\n    return [_orphan()]\n\n"
        "def every_finding():\n    return listed()\n\n"
        "class Odd:\n    def method(self):\n        return Finding('x.y', FAIL, (), 'in a class')\n")
    (tmp_path / "phases" / "planted.py").write_text(
        "import dataclasses\nfrom netcheck.core.model import WARN, Finding\n\n"
        "def phase(f):\n    return [Finding('x.y', WARN, (), 'in a phase'), dataclasses.replace(f, severity=WARN)]\n")
    assert unlisted_findings(tmp_path, {"planted.listed"}) == [
        "phases.planted.phase: builds a finding outside netcheck.rules",
        "rules.planted:23: a finding built outside a function",
        "rules.planted._orphan: builds findings and no listed rule calls it",
        "rules.planted.calls_orphan: builds findings and is not in the registry",
        "rules.planted.unlisted: builds findings and is not in the registry",
    ]


# --- and each with the kinds and severities its check declares -------------------------------

Values = "frozenset[str] | None"   # what an expression can be; None: not known from the source


def values(expr: ast.expr | None, function: ast.FunctionDef, bound: dict[str, Values]) -> Values:
    """The strings `expr` can be inside `function`, its parameters `bound` by the caller: a
    literal, a name of the registry's or PASS/WARN/FAIL, a local set from those (`x = A if c else
    B`, `for x in (A, B)`), or a parameter."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return frozenset({expr.value})
    if isinstance(expr, ast.IfExp):
        return union(values(e, function, bound) for e in (expr.body, expr.orelse))
    if isinstance(expr, (ast.Tuple, ast.List)):
        return union(values(e, function, bound) for e in expr.elts)
    if not isinstance(expr, ast.Name):
        return None
    if expr.id in bound:
        return bound[expr.id]
    local = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign) and
             any(isinstance(t, ast.Name) and t.id == expr.id for t in n.targets)]
    local += [n.iter for n in ast.walk(function) if isinstance(n, ast.For) and
              isinstance(n.target, ast.Name) and n.target.id == expr.id]
    if local:
        return union(values(e, function, bound) for e in local)
    return frozenset({NAMED[expr.id]}) if expr.id in NAMED else None


def union(sets) -> Values:
    sets = list(sets)
    return None if any(s is None for s in sets) else frozenset().union(*sets)


def bind(call: ast.Call, callee: ast.FunctionDef, caller: ast.FunctionDef, bound: dict[str, Values]) -> dict:
    """The callee's parameters as this call sets them (or their defaults)."""
    spec = callee.args
    params = [p.arg for p in spec.posonlyargs + spec.args]
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(k.arg is None for k in call.keywords):
        return {p: None for p in params + [p.arg for p in spec.kwonlyargs]}   # *args, **kwargs: not known
    defaults = dict(zip(params[len(params) - len(spec.defaults):], spec.defaults))
    defaults |= {p.arg: d for p, d in zip(spec.kwonlyargs, spec.kw_defaults) if d is not None}
    return ({p: values(d, callee, {}) for p, d in defaults.items()}
            | {p: values(arg, caller, bound) for p, arg in zip(params, call.args)}
            | {k.arg: values(k.value, caller, bound) for k in call.keywords})


def given(call: ast.Call) -> dict[str, ast.expr]:
    """The check, severity and kind a Finding(...) or replace(...) call sets."""
    fields = {}
    if called(call) == "Finding":
        fields = {f: call.args[i] for f, i in FINDING_FIELDS.items() if i < len(call.args)}
        fields.setdefault("kind", ast.Constant(""))
    return fields | {k.arg: k.value for k in call.keywords if k.arg in FINDING_FIELDS}


def emitted(name: str, functions: dict[str, ast.FunctionDef], bound: dict[str, Values], depth: int = 0):
    """(line, check, severity, kind) of each finding `name` builds, itself or through the
    module's `functions` it calls (followed call by call, with their arguments), as values()."""
    function = functions[name]
    for call in (c for c in ast.walk(function) if isinstance(c, ast.Call)):
        if makes_finding(call):
            fields = given(call)
            yield (call.lineno, *(values(fields.get(f), function, bound) for f in FINDING_FIELDS))
        elif isinstance(call.func, ast.Name) and call.func.id in functions and call.func.id != name and depth < 8:
            callee = functions[call.func.id]
            if any(built_in(functions[f]) for f in reach(callee.name, functions)):
                yield from emitted(callee.name, functions, bind(call, callee, function, bound), depth + 1)


def rule_functions(rule: str, root: Path = PACKAGE, checks: tuple[Check, ...] = CHECKS) -> dict[str, ast.FunctionDef]:
    """The functions of the rule's module, less the other listed rules (each is judged on its own)."""
    module = rule.rsplit(".", 1)[0]
    listed = {r for c in checks for r in c.rules} - {rule}
    return {n: f for n, f in functions_of(ast.parse((root / "rules" / f"{module}.py").read_text())).items()
            if f"{module}.{n}" not in listed}


def rule_problems(rule: str, root: Path = PACKAGE, checks: tuple[Check, ...] = CHECKS) -> list[str]:
    """Where the rule (with the module's functions it calls) names a kind its checks do not
    declare, or builds a finding of a check that does not list it, or of a kind or severity
    its check does not declare (a kind's own severities where the finding has one)."""
    name = rule.rsplit(".", 1)[1]
    functions = rule_functions(rule, root, checks)
    own = {c.id: c for c in checks if rule in c.rules}
    declared = {k for c in own.values() for k in c.kinds}
    named = {n.id for f in reach(name, functions) for n in ast.walk(functions[f]) if isinstance(n, ast.Name)}
    problems = [f"{rule} names kind {NAMED[n]!r}" for n in sorted(named) if NAMED.get(n) in set(KINDS) - declared]
    # Where the source cannot tell a finding's severity: those the rule names; its kind (made
    # from data): each of those the rule names, else none (the suite's run judges those).
    said = frozenset(NAMED[n] for n in named & {"PASS", "WARN", "FAIL"})
    said_kinds = frozenset(NAMED[n] for n in named if NAMED.get(n) in declared) or frozenset({""})
    for line, ids, severities, kinds in emitted(name, functions, {}):
        for check in sorted(ids or own):
            entry = own.get(check)
            if entry is None:
                problems.append(f"{rule}:{line}: a {check} finding, and {check} does not list {rule}")
                continue
            for kind in sorted(kinds or said_kinds):
                if kind and kind not in entry.kinds:
                    problems.append(f"{rule}:{line}: kind {kind!r}, which {check} does not declare")
                    continue
                allowed = entry.kinds[kind].severities if kind else entry.severities
                problems += [f"{rule}:{line}: a {s} {check} finding{f' ({kind})' if kind else ''}, not declared"
                             for s in sorted((severities or said) - set(allowed))]
    return sorted(problems)


@pytest.mark.parametrize("rule", sorted(LISTED))
def test_each_rule_builds_only_the_kinds_and_severities_its_check_declares(rule):
    assert rule_problems(rule) == []


def test_the_walk_judges_every_finding_the_rules_build():
    judged = {(rule.split(".")[0], e[0]) for rule in LISTED
              for e in emitted(rule.split(".")[1], rule_functions(rule), {})}
    built = {(p.stem, c.lineno) for p in (PACKAGE / "rules").glob("*.py") for c in built_in(ast.parse(p.read_text()))}
    assert built and built <= judged, sorted(built - judged)


def test_a_kind_or_severity_the_registry_does_not_declare_is_caught(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "planted.py").write_text(
        "from netcheck.core.model import FAIL, WARN, Finding\n"
        "from netcheck.rules.registry import JOIN_FOREIGN, JOIN_LATE, MESH_BLACKHOLE, MESH_CONNECT, RDZV_JOIN\n\n"
        "def rule(seated):\n"
        "    return [_told(WARN, JOIN_FOREIGN), _told(FAIL if seated else WARN, JOIN_FOREIGN),\n"
        "            _told(FAIL, JOIN_LATE), Finding(MESH_CONNECT, FAIL, (), 'x', (), '', MESH_BLACKHOLE)]\n\n"
        "def _told(severity, kind):\n"
        "    return Finding(RDZV_JOIN, severity, (), 'x', (), '', kind)\n")
    join = Check(RDZV_JOIN, "rendezvous", (PASS, WARN), "", ("planted.rule",), "", (),
                 {JOIN_FOREIGN: Kind((WARN,), ""), JOIN_LATE: Kind((WARN,), "")}, impact=NO_IMPACT)
    assert rule_problems("planted.rule", tmp_path, (join,)) == [
        "planted.rule names kind 'blackhole'",
        "planted.rule:6: a mesh.connect finding, and mesh.connect does not list planted.rule",
        "planted.rule:9: a fail rdzv.join finding (foreign_run), not declared",
        "planted.rule:9: a fail rdzv.join finding (late), not declared",
    ]


# --- the layers ---------------------------------------------------------------------------

# Lowest first: a module imports only from its own layer or below. Rules sit on core alone:
# the records they judge and the words they say them in are core's, never what moves them.
LAYERS = ("core", "rules", "facts", "cluster", "bandwidth", "render", "config", "phases", "inspect", "cli")
# Rules do no I/O and draw no tables: none of these in a rule module.
IO_MODULES = {"os", "socket", "subprocess", "selectors", "threading", "time", "tempfile", "shutil",
              "psutil", "netifaces", "torch", "signal", "tabulate", "matplotlib"}


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


def test_no_module_imports_itself_around_a_circle():
    known = dict(modules())
    graph = {m: sorted(i for i in imports_of(p) if i in known and i != m) for m, p in known.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, " -> ".join(path[path.index(module):] + [module])
        if module not in done:
            for imported in graph[module]:
                visit(imported, path + [module])
            done.add(module)

    for module in sorted(graph):
        visit(module, [])


@pytest.mark.parametrize("name,path", [m for m in modules() if m[0].startswith("netcheck.rules.")],
                         ids=[m for m, _ in modules() if m.startswith("netcheck.rules.")])
def test_rules_do_no_io(name, path):
    tree = ast.parse(path.read_text())
    assert not {m.split(".")[0] for m in imports_of(path)} & IO_MODULES, name
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"open", "print", "input"}, name


def inline_store_keys(source: str) -> list[str]:
    """Store keys named outside core.storekeys: a Key made (its name and record type said
    there alone), or a string literal where a key goes (Exchange.key, .post, collect)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        name_arg = node.args[1] if callee == "collect" and len(node.args) > 1 else node.args[0]
        if callee == "Key" or (callee in ("key", "post", "collect") and isinstance(name_arg, ast.Constant)
                               and isinstance(name_arg.value, str)):
            shown = name_arg.value if isinstance(name_arg, ast.Constant) else ast.unparse(name_arg)
            found.append(f"line {node.lineno}: {callee}({shown!r})")
    return found


def test_every_store_key_is_named_in_one_place():
    for name, path in modules():
        if name != "netcheck.core.storekeys":
            assert not inline_store_keys(path.read_text()), (name, inline_store_keys(path.read_text()))
    planted = ('ex.post("bw/node", 1, report)\ncollect(ex, "bye", [1], d)\nex.key(keys.ROSTER)\n'
               'collect(ex, ENV, [1], d)\nLATE = Key("late", int)\n')
    assert inline_store_keys(planted) == ["line 1: post('bw/node')", "line 2: collect('bye')",
                                          "line 5: Key('late')"]


def exchange_writes(source: str) -> list[str]:
    """Assignments into an Exchange's state (`ex.ATTR = `, `ex.interference.x[k] = `,
    `seat.exchange.ATTR = `): its parts change only through their own methods."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            chain = target
            names = []
            while isinstance(chain, (ast.Attribute, ast.Subscript)):
                names += [chain.attr] if isinstance(chain, ast.Attribute) else []
                chain = chain.value
            if names and ("exchange" in names[1:] or (isinstance(chain, ast.Name) and chain.id == "ex")):
                found.append(f"line {node.lineno}: {ast.unparse(target)}")
    return found


# The Exchange and its parts: the modules that hold its state.
EXCHANGE_MODULES = {"netcheck.cluster.store", "netcheck.cluster.storetransport", "netcheck.cluster.storesigner",
                    "netcheck.cluster.interference"}


def test_no_module_writes_an_exchanges_state():
    for name, path in modules():
        if name not in EXCHANGE_MODULES:
            assert not exchange_writes(path.read_text()), (name, exchange_writes(path.read_text()))
    planted = ('ex.nonce = "x"\nex.interfered[k] = "y"\nseat.exchange.watch = w\nex.pause += 1\n'
               'seat.rank = 1\nex.interference.note(k, "z")\n')
    assert exchange_writes(planted) == ["line 1: ex.nonce", "line 2: ex.interfered[k]",
                                        "line 3: seat.exchange.watch", "line 4: ex.pause"]


def test_the_development_guide_names_every_module():
    """docs/development.md's table names each module in its layer's rows: a newcomer finds a
    new module where it lives."""
    guide = (REPO / "docs" / "development.md").read_text()
    rows: dict[str, str] = {}
    layer = ""
    for line in guide.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[0] not in ("layer", "---"):
            layer = cells[0].strip("`") or layer
            rows[layer] = rows.get(layer, "") + " " + cells[1]
    missing = []
    for name, path in modules():
        parts = name.split(".")
        if len(parts) == 3:
            folder, module = parts[1] + "/", parts[2]
            if f"`{module}`" not in rows.get(folder, ""):
                missing.append(f"{folder}{module}")
        elif len(parts) == 2 and parts[1] not in ("__main__",) and not path.name == "__init__.py":
            if f"{parts[1]}.py" not in rows:
                missing.append(f"{parts[1]}.py")
    assert not missing, f"not in docs/development.md's table: {missing}"
