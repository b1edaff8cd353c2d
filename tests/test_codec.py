"""codec: every record of netcheck.model through JSON and back; untrusted JSON rejected by path."""

from __future__ import annotations

import dataclasses
import json

import pytest

from netcheck.core import codec, fields
from netcheck.core.bwrecords import BandwidthResult, Fault, Pair, RankTime, Row, Sweep
from netcheck.core.codec import DecodeError
from netcheck.core.constants import MAX_FACTS_BYTES, REPORT_SCHEMA
from netcheck.core.jobrecords import JobView, NodeDesc, RendezvousView, RunState
from netcheck.core.model import (
    Attribution,
    ClockSample,
    ClusterVerdict,
    EnvRow,
    EphemeralPorts,
    Finding,
    Gathering,
    Holder,
    Impact,
    Launch,
    Member,
    NodeEntry,
    NodeFacts,
    NodeResults,
    PortSpan,
    Probe,
    Reach,
    Report,
    Resolution,
    SocketBuffers,
    TcpMem,
    Visitor,
)
from netcheck.core.nictable import Address, IbPort, Nic, NicTable

# --- realistic values -------------------------------------------------------------------------

NICS = NicTable(
    nics=(
        Nic("lo", 1, (Address("ipv4", "127.0.0.1", 8), Address("ipv6", "::1", 128)),
            True, True, 65536, None, "loopback", None),
        Nic("eno1", 2, (Address("ipv4", "10.0.0.5", 24),), True, True, 1500, 1000, "ethernet",
            "3c:ec:ef:01:02:03"),
        Nic("ib0", 4, (Address("ipv4", "10.1.0.5", 16), Address("ipv6", "fe80::ba59:9f03:1a:2b3c", 64)),
            True, True, 2044, 200000, "infiniband", "80:00:00:48:fe:80"),
        Nic("docker0", 5, (Address("ipv4", "172.17.0.1", 16),), True, False, 1500, None, "docker",
            "02:42:ac:11:00:01"),
    ),
    ib_ports=(IbPort("mlx5_0", 1, "ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)", "ib0"),
              IbPort("mlx5_1", 1, "DOWN", "unknown", "", None)),
    default_route_ifname="eno1",
)
SLURM = Launch("slurm", 1, 2, 2, 8, ("gpu01", "gpu02"),
               {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[01-02]"})
ARRIVAL = Launch("arrival", None, None, None, 1)
PROBE_V4 = Probe("10.0.0.1", "ipv4", "open", "connected", 0.0012)
PROBE_V6 = Probe("fd00::1", "ipv6", "filtered", "no answer in 3 s", 3.0)
REACH = Reach("node0", 29500, "open", ("10.0.0.1", "fd00::1"), None, (PROBE_V4, PROBE_V6), 1, 3.0021)
REACH_DNS = Reach("nosuch.example", 29500, "dns", (), "Name or service not known", (), 0, 0.01)
FACTS = NodeFacts(
    run_id="job-7", hostname="gpu02", fqdn="gpu02.cluster.example", hostname_addresses=("10.0.0.5",),
    launch=SLURM, shm_bytes=68719476736, gpus=8, nics=NICS,
    socket_env={"NCCL_SOCKET_IFNAME": "=eno1", "NCCL_IB_HCA": "mlx5_0"}, reach=REACH, version="0.1.0")
HOST_FACTS = dataclasses.replace(FACTS, hostname="gpu01", launch=ARRIVAL, shm_bytes=None, reach=None,
                                 socket_env={}, ports=EphemeralPorts(20000, 60999, (PortSpan(29500, 29500),), 3, 60.0),
                                 buffers=SocketBuffers(TcpMem(4096, 131072, 6291456), TcpMem(4096, 16384, 4194304),
                                                       212992, None, True, False))
RESOLUTION = Resolution(0, "gpu01.cluster.example", ("10.0.0.4",), None)
RESULTS = NodeResults(ClockSample(-0.25, 0.0004),
                      (RESOLUTION, Resolution(2, "gpu03.cluster.example", (), "Name or service not known")))
MEMBER = Member(1, FACTS, RESULTS)
LOST = Member(2, HOST_FACTS)
FINDING = Finding(check="rdzv.reach", severity="fail", nodes=(1,),
                  summary="node0:29500 is filtered from this node: no answer in 3 s",
                  evidence=("fd00::1 (ipv6): filtered, no answer in 3 s, 3.00 s",), fix="open the port",
                  impact=Impact(("launch", "store"), "stops"))
GATHERING = Gathering(
    members=(MEMBER, LOST), expected=3, missing_ranks=(0,), expected_hostnames=("gpu01", "gpu02", "gpu03"),
    duplicates={"1": ("gpu02", "gpu09")}, unseated=("gpu11 claims node rank 7, but nnodes is 3: not seated",),
    foreign=(Visitor("other-run", "gpu07", 0), Visitor("x", "y", None)),
    malformed=("arrival 4: $.hostname: expected str, got int",), waited=30.5)
REPORT = Report(
    run_id="job-7", node_rank=0, role="host", verdict="fail",
    nodes=(NodeEntry(0, "gpu01", "10.0.0.4", HOST_FACTS), NodeEntry(2, "gpu03", "", None)),
    findings=(FINDING, Finding(check="host.clock", severity="pass", nodes=(0, 1), summary="clocks agree",
                               impact=Impact(("launch",), "risks")),
              Finding(check="mesh.connect", severity="fail", nodes=(1, 2),
                      summary="1 of 6 node-to-node directions connect on no interface",
                      impact=Impact(("gloo",), "stops"), cause_nodes=(2,))),
    recommend={"NCCL_SOCKET_IFNAME": "=eno1", "TP_SOCKET_IFNAME": "eno1"},
    recommend_per_node={"gpu01": {"GLOO_SOCKET_IFNAME": "eno1"}, "gpu03": {"GLOO_SOCKET_IFNAME": "ens5"}},
    env_table=(EnvRow("torch.version", "2.13.0", (2,), "gpu03", "fail"),),
    bandwidth=BandwidthResult(
        "gloo", "no CUDA: using gloo", 2, 2,
        (Sweep("all", "all_reduce", 4, 1, (Row(1 << 20, 262144, "float32", "sum", 812.5, 1.29, 1.94, 0),),
               (1 << 24,), (RankTime(3, 1, 830.0),)),),
        (Pair(0, 1, 1 << 24, 9000.0, 1.86),), "all", "rank 3 died",
        (Fault(1, 3, 1, "all", "died", "killed by SIGKILL"),), 7.5),
    timings={"local": 0.125, "reach": 0.0},
    unfinished="rendezvous", healthy_nodes=("gpu01",), faulty_nodes=("gpu02", "gpu03"),
    fault=Attribution("other_nodes", (1, 2), ("gpu02", "gpu03"), "rdzv.reach: node0:29500 is filtered"))
TOLD = ClusterVerdict("fail", "node0:29500 is filtered", (FINDING,), fault=REPORT.fault)

EVERY_RECORD = [
    NICS, NICS.nics[0], NICS.ib_ports[0], NICS.ib_ports[1], NICS.nics[0].addresses[1],
    SLURM, ARRIVAL, PROBE_V4, PROBE_V6, REACH, REACH_DNS, Holder(4242, "python", "python train.py"),
    Holder(None, "?", "(owner not visible: run as root to name it)"), FACTS, HOST_FACTS, RESOLUTION,
    RESULTS, NodeResults(None, ()), ClockSample(0.0, 0.0), MEMBER, LOST, Visitor("job-7", "gpu02", None),
    GATHERING, FINDING, NodeEntry(1, "gpu02", "10.0.0.5", FACTS), REPORT, TOLD,
]


def roundtrip(value):
    return codec.loads(type(value), codec.dumps(value).encode(), MAX_FACTS_BYTES)


@pytest.mark.parametrize("value", EVERY_RECORD, ids=lambda v: type(v).__name__)
def test_every_record_survives_a_round_trip(value):
    back = roundtrip(value)
    assert back == value
    assert type(back) is type(value)


def test_the_round_trip_rebuilds_tuples_and_nested_records_not_lists_and_dicts():
    back = roundtrip(GATHERING)
    assert isinstance(back.members, tuple)
    assert isinstance(back.members[0].facts.nics.nics[2].addresses[1], Address)
    assert back.members[0].facts.nics.nics[2].addresses[1].address == "fe80::ba59:9f03:1a:2b3c"
    assert back.duplicates == {"1": ("gpu02", "gpu09")}
    assert back.members[0].results.clock == ClockSample(-0.25, 0.0004)


def test_a_report_carries_its_schema_and_fills_it_in_when_absent():
    plain = json.loads(codec.dumps(REPORT))
    assert plain["schema"] == REPORT_SCHEMA == "netcheck.report/1"
    del plain["schema"]
    assert codec.loads(Report, json.dumps(plain), MAX_FACTS_BYTES) == REPORT


def test_an_int_where_a_float_belongs_is_accepted_as_a_float():
    back = codec.loads(ClockSample, '{"offset": 2, "error": 0}', 100)
    assert back == ClockSample(2.0, 0.0)
    assert type(back.offset) is float


def test_a_member_omitting_fields_with_defaults_takes_the_defaults():
    plain = json.loads(codec.dumps(MEMBER))
    del plain["results"]
    assert codec.loads(Member, json.dumps(plain), MAX_FACTS_BYTES) == Member(1, FACTS)


def test_a_finding_says_whom_it_stops_and_one_written_before_reads_back_without():
    plain = json.loads(codec.dumps(FINDING))
    assert plain["impact"] == {"on": ["launch", "store"], "effect": "stops", "why": "", "form": ""}
    del plain["impact"]
    assert codec.loads(Finding, json.dumps(plain), MAX_FACTS_BYTES).impact is None


@pytest.mark.parametrize("field, value", [("on", ["launch", "rpc"]), ("effect", "breaks"), ("on", "gloo")])
def test_an_impact_names_only_the_parts_and_effects_of_the_fixed_set(field, value):
    plain = json.loads(codec.dumps(FINDING))
    plain["impact"][field] = value
    with pytest.raises(DecodeError, match=r"\$\.impact\.(on|effect)"):
        codec.loads(Finding, json.dumps(plain), MAX_FACTS_BYTES)


# --- malformed input: DecodeError naming the field --------------------------------------------

def facts_with(path: tuple, value) -> str:
    """FACTS as JSON with the field at `path` replaced (or removed, for value=REMOVE)."""
    plain = json.loads(codec.dumps(FACTS))
    node = plain
    for key in path[:-1]:
        node = node[key]
    if value is REMOVE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return json.dumps(plain)


REMOVE = object()


@pytest.mark.parametrize("path, value, message", [
    (("hostname",), 7, "$.hostname: expected str, got int"),
    (("hostname",), None, "$.hostname: expected str, got NoneType"),
    (("hostname_addresses",), "10.0.0.5", "$.hostname_addresses: expected list, got str"),
    (("hostname_addresses", 0), 10, "$.hostname_addresses[0]: expected str, got int"),
    (("launch", "nproc_per_node"), True, "$.launch.nproc_per_node: expected int, got bool"),
    (("launch", "nproc_per_node"), 8.0, "$.launch.nproc_per_node: expected int, got float"),
    (("launch", "nproc_per_node"), "8", "$.launch.nproc_per_node: expected int, got str"),
    (("launch", "variables"), ["SLURM_NNODES"], "$.launch.variables: expected dict, got list"),
    (("launch", "variables", "SLURM_NNODES"), 2, "$.launch.variables.SLURM_NNODES: expected str, got int"),
    (("nics", "nics", 2, "mtu"), False, "$.nics.nics[2].mtu: expected int, got bool"),
    (("nics", "nics", 1, "addresses", 0, "prefixlen"), "24",
     "$.nics.nics[1].addresses[0].prefixlen: expected int, got str"),
    (("nics", "ib_ports", 0, "port"), 1.5, "$.nics.ib_ports[0].port: expected int, got float"),
    (("reach", "probes", 1, "seconds"), "3.0", "$.reach.probes[1].seconds: expected float, got str"),
    (("reach", "port"), True, "$.reach.port: expected int, got bool"),
    (("nics",), [], "$.nics: expected dict, got list"),
    (("hostname",), REMOVE, "$: missing field 'hostname'"),
    (("launch", "node_rank"), REMOVE, "$.launch: missing field 'node_rank'"),
    (("nics", "nics", 0, "kind"), REMOVE, "$.nics.nics[0]: missing field 'kind'"),
])
def test_malformed_facts_are_rejected_with_the_field_path(path, value, message):
    with pytest.raises(DecodeError) as caught:
        codec.loads(NodeFacts, facts_with(path, value), MAX_FACTS_BYTES)
    assert message in str(caught.value)


@pytest.mark.parametrize("path, value, message", [
    # Optional fields: the error names the path and both options that did not fit.
    (("shm_bytes",), True, "$.shm_bytes: expected int, got bool; $.shm_bytes: expected null, got bool"),
    (("shm_bytes",), "1G", "$.shm_bytes: expected int, got str; $.shm_bytes: expected null, got str"),
    (("launch", "node_rank"), False, "$.launch.node_rank: expected int, got bool; "
                                     "$.launch.node_rank: expected null, got bool"),
    (("nics", "default_route_ifname"), 0, "$.nics.default_route_ifname: expected str, got int; "
                                          "$.nics.default_route_ifname: expected null, got int"),
])
def test_a_wrong_type_in_an_optional_field_names_both_options(path, value, message):
    with pytest.raises(DecodeError) as caught:
        codec.loads(NodeFacts, facts_with(path, value), MAX_FACTS_BYTES)
    assert str(caught.value) == message


def test_a_nested_optional_record_with_a_bad_field_names_the_inner_path():
    with pytest.raises(DecodeError) as caught:
        codec.loads(NodeFacts, facts_with(("reach", "attempts"), "1"), MAX_FACTS_BYTES)
    assert str(caught.value) == ("$.reach.attempts: expected int, got str; "
                                 "$.reach: expected null, got dict")


@pytest.mark.parametrize("text", ["[]", '"facts"', "3", "null", "true"])
def test_a_document_that_is_not_an_object_is_rejected_at_the_root(text):
    with pytest.raises(DecodeError) as caught:
        codec.loads(NodeFacts, text, MAX_FACTS_BYTES)
    assert str(caught.value).startswith("$: expected dict, got ")


def test_a_float_where_an_int_belongs_is_rejected_even_when_whole():
    with pytest.raises(DecodeError, match=r"^\$\.pid: expected int, got float; "):
        codec.loads(Holder, '{"pid": 12.0, "name": "python", "cmdline": ""}', 1000)


def test_a_bool_where_a_float_belongs_is_rejected():
    with pytest.raises(DecodeError, match=r"^\$\.offset: expected float, got bool$"):
        codec.loads(ClockSample, '{"offset": true, "error": 0.1}', 1000)


# --- size, bytes, JSON itself -------------------------------------------------------------------

def test_text_over_the_limit_is_rejected_before_parsing():
    text = codec.dumps(FACTS).encode()
    assert codec.loads(NodeFacts, text, len(text)) == FACTS  # exactly at the limit: fine
    with pytest.raises(DecodeError) as caught:
        codec.loads(NodeFacts, text, len(text) - 1)
    assert str(caught.value) == f"{len(text)} bytes, over the {len(text) - 1}-byte limit"


def test_the_limit_counts_utf8_bytes_not_characters():
    text = json.dumps({"pid": 1, "name": "é" * 600, "cmdline": ""}, ensure_ascii=False)
    assert len(text) < 1000 < len(text.encode())
    with pytest.raises(DecodeError, match="over the 1000-byte limit"):
        codec.loads(Holder, text, 1000)
    assert codec.loads(Holder, text.encode(), 2000).name == "é" * 600


@pytest.mark.parametrize("text", [
    b"\xff\xfe\x00garbage", b"\x80\x81", b"", b"{", b'{"pid": 1,}', "{'pid': 1}", b"\x00",
    b'{"pid": 1} trailing',
])
def test_bytes_that_are_not_json_are_rejected(text):
    with pytest.raises(DecodeError, match="^not JSON: "):
        codec.loads(Holder, text, 1000)


@pytest.mark.parametrize("text", [
    '{"offset": NaN, "error": 0.1}',
    '{"offset": Infinity, "error": 0.1}',
    '{"offset": -Infinity, "error": 0.1}',
    '{"offset": 1e400, "error": 0.1}',
])
def test_nan_and_infinity_are_not_json(text):
    # A NaN clock offset would pass every threshold (every comparison with NaN is false).
    with pytest.raises(DecodeError, match="^not JSON: "):
        codec.loads(ClockSample, text, 1000)


def test_deep_nesting_within_the_size_limit_is_a_decode_error_not_a_crash():
    text = "[" * 200_000 + "]" * 200_000
    assert len(text) < MAX_FACTS_BYTES
    with pytest.raises(DecodeError, match="^not JSON: nested too deeply$"):
        codec.loads(NodeFacts, text, MAX_FACTS_BYTES)


def test_an_integer_too_long_to_convert_is_a_decode_error():
    text = '{"pid": ' + "9" * 5000 + ', "name": "x", "cmdline": ""}'
    with pytest.raises(DecodeError, match="^not JSON: "):
        codec.loads(Holder, text, MAX_FACTS_BYTES)


# --- unknown fields and nothing executed ------------------------------------------------------------

def test_unknown_fields_are_ignored_today():
    # Current behaviour (a newer peer may add fields): extras are dropped, not rejected.
    plain = json.loads(codec.dumps(FACTS))
    plain["extra"] = {"anything": [1, 2]}
    plain["launch"]["__class__"] = "os.system"
    plain["nics"]["nics"][0]["driver"] = "e1000e"
    assert codec.loads(NodeFacts, json.dumps(plain), MAX_FACTS_BYTES) == FACTS


@pytest.mark.parametrize("template", [
    "__import__('os').system('touch {marker}')",
    "!!python/object/apply:os.system ['touch {marker}']",
    "cos\nsystem\n(S'touch {marker}'\ntR.",  # a pickle program, as text
    "${{jndi:ldap://x/{marker}}}",
])
def test_strings_that_look_like_code_stay_strings(template, tmp_path):
    payload = template.format(marker=tmp_path / "executed")
    text = json.dumps({"pid": 1, "name": payload, "cmdline": payload})
    back = codec.loads(Holder, text, 1000)
    assert back == Holder(1, payload, payload)
    assert type(back.name) is str
    assert not (tmp_path / "executed").exists()


def test_a_dict_where_a_record_belongs_never_becomes_anything_but_that_record():
    text = json.dumps({"run_id": {"__reduce__": "os.system"}, "hostname": "h", "node_rank": None})
    with pytest.raises(DecodeError, match=r"^\$\.run_id: expected str, got dict$"):
        codec.loads(Visitor, text, 1000)


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("42", 42), (b"7", 7), ("123456789", 123456789),
    ("", None), ("²", None), ("1²", None), ("-1", None), (" 1", None), ("1" * 10, None), ("9" * 5000, None),
])
def test_small_int_takes_ascii_digits_only_and_at_most_nine(text, value):
    assert codec.small_int(text) == value


# --- the generic rules: every str, int, float and container received ---------------------------------

@pytest.mark.parametrize("char", ["\t", "\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u202e"])
def test_a_str_holds_no_control_character(char):
    with pytest.raises(DecodeError, match=r"^\$\.run_id: '.*' holds a control character \("):
        codec.loads(Visitor, json.dumps({"run_id": f"job{char}7", "hostname": "h", "node_rank": None}), 1000)


@pytest.mark.parametrize("text", ["\ud800", "ok\udfff", "\udc80\udc80"])
def test_a_str_is_valid_unicode_even_where_it_is_free_text(text):
    # A lone surrogate cannot be written out: the report's print would raise UnicodeEncodeError.
    with pytest.raises(DecodeError, match=r"^\$\.cmdline: .* is not valid Unicode \(a lone surrogate at \d+\)$"):
        codec.loads(Holder, json.dumps({"pid": 1, "name": "python", "cmdline": text}), 1000)


def test_free_text_keeps_its_tabs_and_newlines():
    back = codec.loads(Holder, json.dumps({"pid": 1, "name": "py", "cmdline": "python -c 'a\n\tb'"}), 1000)
    assert back.cmdline == "python -c 'a\n\tb'"


def test_an_object_key_is_held_to_the_rules_of_its_type():
    with pytest.raises(DecodeError, match=r"^\$\.socket_env\.NCCL_\\nX: 'NCCL_\\nX' holds a control character"):
        codec.loads(NodeFacts, facts_with(("socket_env",), {"NCCL_\nX": "1"}), MAX_FACTS_BYTES)


@pytest.mark.parametrize("value, fits", [((1 << 63) - 1, True), (-(1 << 63), True), (1 << 63, False),
                                         (-(1 << 63) - 1, False), (10 ** 400, False)])
def test_an_int_fits_in_64_bits(value, fits):
    text = json.dumps([value])
    if fits:
        assert codec.loads(tuple[int, ...], text, 1000) == (value,)
    else:
        with pytest.raises(DecodeError, match=r"^\$\[0\]: .* does not fit in 64 bits$"):
            codec.loads(tuple[int, ...], text, 1000)


def test_a_huge_integer_where_a_float_belongs_is_a_decode_error_not_an_overflow():
    # float() of a 400-digit integer raises OverflowError: it must never be called on one.
    text = '{"offset": ' + "9" * 400 + ', "error": 0}'
    with pytest.raises(DecodeError, match=r"^\$\.offset: an integer of 1329 bits does not fit in 64 bits$"):
        codec.loads(ClockSample, text, 1000)


def test_a_non_finite_float_handed_to_from_plain_is_refused():
    with pytest.raises(DecodeError, match=r"^\$\.offset: nan is not a finite number$"):
        codec.from_plain(ClockSample, {"offset": float("nan"), "error": 0.0})


def test_a_list_or_object_holds_at_most_the_default_number_of_entries():
    too_many = ["10.0.0.5"] * (fields.MAX_ITEMS + 1)
    with pytest.raises(DecodeError, match=r"^\$\.hostname_addresses: 1025 items, expected at most 1024$"):
        codec.loads(NodeFacts, facts_with(("hostname_addresses",), too_many), MAX_FACTS_BYTES)
    env = {f"NCCL_{i}": "1" for i in range(fields.MAX_ITEMS + 1)}
    with pytest.raises(DecodeError, match=r"^\$\.socket_env: 1025 items, expected at most 1024$"):
        codec.loads(NodeFacts, facts_with(("socket_env",), env), MAX_FACTS_BYTES)


def test_a_field_that_holds_one_entry_per_node_takes_more():
    finding = {"check": "rdzv.join", "severity": "fail", "nodes": list(range(5000)), "summary": "s"}
    assert len(codec.loads(Finding, json.dumps(finding), MAX_FACTS_BYTES).nodes) == 5000


def test_a_pair_is_exactly_two():
    assert codec.loads(tuple[int, int], "[1, 2]", 100) == (1, 2)
    with pytest.raises(DecodeError, match=r"^\$: 3 items, expected exactly 2$"):
        codec.loads(tuple[int, int], "[1, 2, 3]", 100)
    with pytest.raises(DecodeError, match=r"^\$\[1\]: expected int, got str$"):
        codec.loads(tuple[int, int], '[1, "2"]', 100)


def test_an_inspect_view_with_participants_survives_a_round_trip():
    agent = NodeDesc("gpu01.cluster.example", 4242, 0)
    state = RendezvousView("job-7", 3, True, False, None, ((agent, 0),), (), (), ((agent, "2025-01-01T00:00:00"),))
    view = JobView("gpu01:29500", "job-7", "2025-01-01T00:00:01", 0.5, runs=(RunState("job-7", state),),
                   nnodes=(1, 2))
    assert roundtrip(view) == view


def test_a_long_key_is_cut_short_in_the_path():
    with pytest.raises(DecodeError) as caught:
        codec.loads(NodeFacts, facts_with(("socket_env",), {"K" * 5000: 7}), MAX_FACTS_BYTES)
    assert len(str(caught.value)) < 200


def test_a_shared_part_is_decoded_once_and_held_once_for_every_record_that_sent_it():
    # A torchrun node's 8 workers send one interface table each: the host keeps one.
    first = codec.loads(NodeFacts, codec.dumps(FACTS), MAX_FACTS_BYTES)
    second = codec.loads(NodeFacts, codec.dumps(dataclasses.replace(FACTS, hostname="gpu03")), MAX_FACTS_BYTES)
    assert first.nics == NICS and second.nics is first.nics
    other = dataclasses.replace(NICS, default_route_ifname="ib0")
    assert codec.loads(NodeFacts, codec.dumps(dataclasses.replace(FACTS, nics=other)), MAX_FACTS_BYTES).nics == other


def test_a_malformed_shared_part_is_refused_with_its_path_after_a_good_one_was_kept():
    codec.loads(NodeFacts, codec.dumps(FACTS), MAX_FACTS_BYTES)
    with pytest.raises(DecodeError, match=r"\$\.nics\.nics\[0\]\.mtu: expected int, got str"):
        codec.loads(NodeFacts, facts_with(("nics", "nics", 0, "mtu"), "1500"), MAX_FACTS_BYTES)
    # true is not 1: a value sent with another type is another key, and refused.
    with pytest.raises(DecodeError, match=r"\$\.nics\.nics\[0\]\.up: expected bool"):
        codec.loads(NodeFacts, facts_with(("nics", "nics", 0, "up"), 1), MAX_FACTS_BYTES)


def _record_fields(cls, seen):
    """Every (record, field type) reachable from cls, and the types its fields' lists hold."""
    import typing
    if cls in seen or not dataclasses.is_dataclass(cls):
        return
    seen.add(cls)
    for tp in typing.get_type_hints(cls, include_extras=True).values():
        stack = [tp]
        while stack:
            t = stack.pop()
            if t is not Ellipsis:
                yield cls, t
            stack += typing.get_args(t) if typing.get_origin(t) is not typing.Annotated else typing.get_args(t)[:1]
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                yield from _record_fields(t, seen)


def _kept(tp):
    test = codec._kept_test(tp)
    if test is None:
        return lambda value: False
    return codec._compiled("kept", ["def kept(value):", f"return {test.expression.format(v='value', check='check')}"],
                           {"check": test.check}, "<test>")


@pytest.mark.parametrize("value", ["", "eth0", "198.18.0.1", "gpu01.cluster", "ok", "a\tb", "a\nb", "\x1b[32m",
                                   "\u00e9", "\u202e", "x" * 300, 0, 1, -1, 65535, 1 << 63, -(1 << 63) - 1, True,
                                   False, 0.5, -0.5, 1e308, None, [], {}])
def test_a_value_passed_as_it_is_is_one_its_decoder_returns_unchanged(value):
    # The fast test written into each record's decoder (codec._kept_test) may only ever agree
    # with the field's decoder.
    from netcheck.core.meshrecords import MeshDone, MeshResults
    from netcheck.core.model import Visitor
    seen: set = set()
    kept = 0
    for cls, tp in [f for root in (Report, NodeResults, MeshResults, MeshDone, Visitor)
                    for f in _record_fields(root, seen)]:
        if _kept(tp)(value):
            kept += 1
            decoded = codec._decoder(tp)(value, "$")
            assert decoded == value and type(decoded) is type(value), (cls.__name__, tp, value)
    if value in ("eth0", 1, 0.5, None):
        assert kept, "the fast test keeps the common case"
