"""The JSON report's schema file: valid, complete, and true to what netcheck writes.

Every report the namespace-cluster tests read is validated too (`nodes.read_report`); here
the reports of the subcommands, the codec's every-record report, and documents that must
be refused.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import typing

import pytest
from jsonschema import Draft202012Validator, ValidationError

from netcheck.core.constants import LOCAL_TIMEOUT
from netcheck.core.deadline import Deadline
from netcheck.core.model import Report
from netcheck.phases.assemble import local_only, probe_only
from netcheck.render import text as render
from nodes import SCHEMA, SCHEMA_PATH, free_port
from test_codec import REPORT as EVERY_RECORD_REPORT

DEFS = json.loads(SCHEMA_PATH.read_text())["$defs"]


def as_json(rep: Report) -> dict:
    return json.loads(render.render_json(rep))


def records(cls: type, seen: dict[str, type] | None = None) -> dict[str, type]:
    """Every dataclass reachable from cls through its fields' types, by name."""
    seen = {} if seen is None else seen
    seen[cls.__name__] = cls
    for hint in typing.get_type_hints(cls).values():
        for tp in (hint, *_nested_args(hint)):
            if dataclasses.is_dataclass(tp) and tp.__name__ not in seen:
                records(tp, seen)
    return seen


def _nested_args(hint) -> list:
    args = list(typing.get_args(hint))
    return args + [a for arg in args for a in _nested_args(arg)]


def test_the_schema_is_valid_draft_2020_12():
    Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))


@pytest.mark.parametrize("name", sorted(records(Report)))
def test_every_field_of_every_record_is_described_and_nothing_else(name):
    cls = records(Report)[name]
    assert cls is Report or name in DEFS, f"{SCHEMA_PATH.name}: describe {name} under $defs"
    schema = json.loads(SCHEMA_PATH.read_text()) if cls is Report else DEFS[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    assert set(schema["properties"]) == fields
    assert set(schema["required"]) <= fields


def test_the_codec_report_with_every_record_validates():
    SCHEMA.validate(as_json(EVERY_RECORD_REPORT))


def test_netcheck_local_report_validates():
    SCHEMA.validate(as_json(local_only(os.environ, Deadline(LOCAL_TIMEOUT))))


def test_netcheck_probe_report_validates():
    port = free_port()
    SCHEMA.validate(as_json(probe_only("127.0.0.1", port, 1.0)))


def changed(path: tuple, value) -> dict:
    """The codec's report with one value replaced (None as value: the key removed)."""
    doc = copy.deepcopy(as_json(EVERY_RECORD_REPORT))
    *parents, last = path
    target = doc
    for key in parents:
        target = target[key]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize("path, value", [
    (("verdict",), "maybe"),
    (("findings", 0, "severity"), "error"),
    (("findings", 0, "check"), "Reach"),
    (("findings", 0, "colour"), "red"),
    (("findings", 0, "impact"), None),
    (("findings", 0, "impact", "on"), ["gloo", "rpc"]),
    (("findings", 0, "impact", "effect"), "breaks"),
    (("faulty_nodes",), None),
    (("faulty_nodes",), "gpu02,gpu03"),
    (("schema",), "netcheck.report/2"),
    (("surprise",), 1),
    (("timings", "local"), -1),
    (("nodes", 0, "facts", "launch", "source"), "mpi"),
])
def test_documents_that_break_the_contract_are_refused(path, value):
    with pytest.raises(ValidationError):
        SCHEMA.validate(changed(path, value))
