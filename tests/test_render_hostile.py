"""The text report and stderr under strings chosen by an attacker (issue 24): hostnames,
interface names, evidence, visitors' run ids and environment values that carry newlines,
ANSI codes, carriage returns, bidi overrides and lone surrogates.

Whatever they hold, the text has no character a terminal acts on, no line netcheck did not
write, writes to an ASCII or UTF-8 stdout without raising, and its export lines are values
and nothing more for a shell. The JSON keeps every string exact.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import builders
from netcheck import cli
from netcheck.config import Outputs
from netcheck.core.bwrecords import BandwidthResult, Pair, Row, Sweep
from netcheck.core.model import (
    ClusterVerdict,
    EnvRow,
    Finding,
    Gathering,
    Member,
    NodeEntry,
    NodeFacts,
    Report,
    Visitor,
)
from netcheck.core.names import is_safe_ifname
from netcheck.render.escape import printable
from netcheck.render.text import render_json, render_text
from netcheck.rules import nic as nic_rules
from netcheck.rules import rdzv as rdzv_rules

FORGED = "\nPASS  job.rdzv  round 3 is complete: 2 of 2 nodes joined"
HOSTILE = {
    "host0": "node0" + FORGED,
    "host1": "\x1b[32mnode1\x1b[0m\r\x1b[2K",
    "ifname": "eth0$(touch /tmp/x)\n",
    "evidence": "seen\u2028PASS\u202eSSAP\u2066\x85\x7f\x00",
    "run_id": "r\udc80\nWARN",
    "visitor": "ghost\udcff" + FORGED,
    "env": "1\x1b]0;owned\x07",
}
FIELDS = tuple(HOSTILE)


def facts(hostname: str, ifname: str) -> NodeFacts:
    nics = (builders.LOOPBACK, builders.nic(ifname, "198.18.0.10", index=2, speed=10000))
    return builders.facts(hostname, rank=0, nnodes=2, addresses=("198.18.0.10",), nics=nics, default=ifname)


def hostile_report(s: dict[str, str]) -> Report:
    """A host's report with s[field] in every place a peer, a visitor or the environment
    fills: hostnames (node table, findings, exports, bandwidth, faulty list), interface
    names, evidence, run ids, env values, the host's headline. Its shape does not depend
    on the strings, so the lines it renders to must not either."""
    hosts = (s["host0"], s["host1"])
    foreign = rdzv_rules.join_findings(Gathering(
        members=(), expected=None, missing_ranks=(), expected_hostnames=(), duplicates={}, unseated=(),
        foreign=(Visitor(s["visitor"], s["visitor"], 1),), malformed=(), waited=1.0))
    findings = (Finding(check="mesh.connect", severity="fail", nodes=(0, 1),
                        summary=f"{hosts[0]} -> {hosts[1]}: no path",
                        evidence=(s["evidence"], f"{hosts[1]} {s['ifname']}: refused"), fix="open the ports"),
                Finding(check="nic.route", severity="pass", nodes=(0, 1), summary="settings match",
                        evidence=(s["evidence"],))) + tuple(foreign)
    bw = BandwidthResult("gloo", s["evidence"], 2, 1,
                         (Sweep("all", "all_reduce", 2, 1, (Row(1024, 256, "float32", "sum", 61.2, 0.02, 0.03, 0),),
                                note=s["evidence"]),),
                         (Pair(0, 1, 1 << 20, 900.0, 1.1),), None, "", (), 1.0, {"0": hosts[0], "1": hosts[1]})
    return Report(run_id=s["run_id"], node_rank=0, role="host", verdict="fail",
                  nodes=tuple(NodeEntry(r, h, "198.18.0.10", facts(h, s["ifname"])) for r, h in enumerate(hosts)),
                  findings=findings, recommend={"NCCL_SOCKET_IFNAME": "eth0"},
                  recommend_per_node={h: {"GLOO_SOCKET_IFNAME": s["ifname"]} for h in hosts},
                  env_table=(EnvRow(s["env"], s["env"], (0,), s["env"], "fail"),), bandwidth=bw,
                  timings={"mesh": 1.0}, unfinished=None, healthy_nodes=(), faulty_nodes=hosts,
                  recommend_note=s["evidence"],
                  cluster=ClusterVerdict("fail", s["evidence"] + s["host1"], ()))


def placeholders(s: dict[str, str]) -> dict[str, str]:
    """The same report's strings as plain words, equal where the hostile ones are equal and
    empty where they are empty (an empty note is left out)."""
    words = {v: f"p{i}" if v else "" for i, v in enumerate(dict.fromkeys(s.values()))}
    return {k: words[v] for k, v in s.items()}


def assert_safe(text: str) -> None:
    """Every line printable: no C0/C1 control, DEL, separator, format character (bidi) or
    surrogate; so the text is UTF-8 too."""
    bad = [(i, line) for i, line in enumerate(text.split("\n")) if not line.isprintable()]
    assert not bad, bad[:3]
    text.encode("utf-8")


def test_hostile_strings_render_without_a_control_character_or_a_line_of_their_own():
    for verbose in (False, True):
        text = render_text(hostile_report(HOSTILE), verbose)
        assert_safe(text)
        assert not [line for line in text.split("\n") if line.startswith("PASS  job.rdzv")], "a forged line"
        assert text.count("\n") == render_text(hostile_report(placeholders(HOSTILE)), verbose).count("\n")
        assert "\\x1b[32mnode1\\x1b[0m\\x0d\\x1b[2K" in text and "\\udc80" in text and "\\u202e" in text


def test_the_json_keeps_every_string_exact():
    document = json.loads(render_json(hostile_report(HOSTILE)))
    assert document["nodes"][0]["hostname"] == HOSTILE["host0"] and document["run_id"] == HOSTILE["run_id"]
    assert document["recommend_per_node"][HOSTILE["host1"]] == {"GLOO_SOCKET_IFNAME": HOSTILE["ifname"]}


def stream(encoding: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="strict")


def test_the_cli_writes_the_report_to_an_ascii_or_utf8_stdout_without_raising(monkeypatch):
    rep = hostile_report(HOSTILE | {"host1": "nœud-ü-中", "visitor": "gpu\udc80"})
    for encoding in ("ascii", "utf-8"):
        out = stream(encoding)
        monkeypatch.setattr(sys, "stdout", out)
        cli.emit(rep, Outputs(), False, True)
        written = out.buffer.getvalue().decode(encoding)
        assert_safe(written)
        assert ("n\\u0153ud-\\xfc-\\u4e2d" if encoding == "ascii" else "nœud-ü-中") in written


def test_a_stderr_line_with_a_peers_string_stays_one_line(monkeypatch):
    err = stream("ascii")
    monkeypatch.setattr(sys, "stderr", err)
    cli.say(f"mesh: waiting for {HOSTILE['host0']} and nœud\udc80")
    written = err.buffer.getvalue().decode("ascii")
    assert written.count("\n") == 1 and written.endswith("\n")
    assert written == "netcheck: mesh: waiting for node0\\x0aPASS  job.rdzv  round 3 is complete: 2 of 2 " \
                      "nodes joined and n\\u0153ud\\udc80\n"


# --- properties ---------------------------------------------------------------------------------

# Anything, surrogates included, with the characters attacks use drawn often.
CHARS = st.characters(exclude_categories=()) | st.sampled_from("\n\r\t\x00\x1b\x7f\x85\x9b\u2028\u2029\u202e\u2066"
                                                               "\udc80$`'\"\\;|&<>(){}[]*?~# =,")
# Short, so that escaped they stay within the env table's wrapped columns: the count of lines
# below is about newlines, not about a long value wrapping.
HOSTILE_TEXT = st.text(CHARS, max_size=4)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.fixed_dictionaries({field: HOSTILE_TEXT for field in FIELDS}), st.booleans())
def test_any_strings_render_printable_in_as_many_lines_as_plain_ones(s, verbose):
    text = render_text(hostile_report(s), verbose)
    assert_safe(text)
    assert text.count("\n") == render_text(hostile_report(placeholders(s)), verbose).count("\n")
    for line in text.split("\n"):
        if line.startswith("export "):
            assert shlex.split(line) in (["export", "NCCL_SOCKET_IFNAME=eth0"],
                                         ["export", f"GLOO_SOCKET_IFNAME={printable(s['ifname'])}"])


NCCL_VALUE = re.compile(r"=?[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*")


def member(rank: int, ifnames: list[str]) -> Member:
    nics = tuple(builders.nic(n, f"198.18.{rank}.{i + 1}", index=i + 2) for i, n in enumerate(ifnames))
    return builders.member(rank, nnodes=3, nics=nics)


@PROPERTY
@given(st.lists(st.lists(st.text(CHARS, min_size=1, max_size=17) | st.sampled_from(["eth0", "ens5", "ib0"]),
                         min_size=1, max_size=3, unique=True), min_size=2, max_size=3))
def test_any_interface_names_peers_report_give_export_lines_of_safe_names_only(ifnames_per_node):
    members = tuple(member(r, names) for r, names in enumerate(ifnames_per_node))
    rec = nic_rules.recommendation(members, {m.rank: names for m, names in zip(members, ifnames_per_node)})
    rep = Report(run_id="r", node_rank=0, role="host", verdict="pass", nodes=(), findings=(), recommend=rec.cluster,
                 recommend_per_node=rec.per_node, env_table=(), bandwidth=None, timings={}, unfinished=None,
                 healthy_nodes=(), faulty_nodes=(), recommend_note=rec.reason)
    exports = [line for line in render_text(rep).split("\n") if line.startswith("export")]
    for line in exports:
        word, setting = shlex.split(line)
        name, value = setting.split("=", 1)
        assert word == "export" and name in nic_rules.SETTINGS and line == f"export {setting}"
        assert NCCL_VALUE.fullmatch(value) and all(is_safe_ifname(n) for n in value.lstrip("=").split(","))
    safe_everywhere = all(any(is_safe_ifname(n) for n in names) for names in ifnames_per_node)
    assert bool(exports) == safe_everywhere
