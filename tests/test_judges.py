"""The registry's judges (rules/registry_judges): each names a rule its check lists, the stage
whose records it reads and fields those records hold; and a check added the way the guide says
(docs/development.md, "A check": an id, a rule and a judge's line) runs with no phase edited,
its finding in the report."""

from __future__ import annotations

import dataclasses
import inspect
import time

from netcheck.cli import build_parser, config_from_args
from netcheck.core.model import PASS, WARN, Finding, Impact, NodeFacts
from netcheck.phases.runner import run_check
from netcheck.rules import registry, registry_judges
from netcheck.rules.registry import BY_ID, NO_IMPACT, Check
from netcheck.rules.registry_judges import JUDGES, STAGES, Judge


def test_every_judge_names_a_listed_rule_of_its_check_and_fields_of_its_stage():
    for j in JUDGES:
        check = BY_ID[j.check]
        module = j.rule.__module__.removeprefix("netcheck.rules.")
        assert f"{module}.{j.rule.__name__}" in check.rules, j
        assert j.stage in STAGES, j
        assert set(j.reads) <= {f.name for f in dataclasses.fields(STAGES[j.stage])}, j
        inspect.signature(j.rule).bind(*j.reads)   # the rule takes them, in that order


def test_a_rule_judges_every_stage():
    assert {j.stage for j in JUDGES} == set(STAGES)


STRAY = "test.judged"   # the check this test adds, as a new check would be


def odd_hostname(facts: NodeFacts) -> list[Finding]:
    """A rule as a new check's: this node's hostname, said as a warning."""
    return [Finding(check=STRAY, severity=WARN, nodes=(-1,), summary=f"{facts.hostname} was judged",
                    fix="nothing to fix")]


def test_a_check_added_to_the_registry_runs_with_no_phase_edited(monkeypatch):
    added = Check(STRAY, "local", (WARN,), "a check a test adds", ("test_judges.odd_hostname",), "NodeFacts",
                  ("test_judges.py",), impact=Impact((), NO_IMPACT.effect))
    monkeypatch.setattr(registry, "CHECKS", registry.CHECKS + (added,))
    monkeypatch.setitem(registry.BY_ID, STRAY, added)
    monkeypatch.setattr(registry_judges, "JUDGES", JUDGES + (Judge(STRAY, "local", odd_hostname, ("facts",)),))
    config = config_from_args(build_parser().parse_args(["--rdzv", "198.18.0.1:29500", "--only", "local"]), {})
    outcome = run_check(config, lambda line: None, time.monotonic())
    (said,) = [f for f in outcome.report.findings if f.check == STRAY]
    assert said.severity == WARN and said.summary.endswith("was judged") and said.impact == added.impact
    assert outcome.report.verdict != PASS   # the warning counts: the report is made of it
