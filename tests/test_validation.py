"""Every received value held to its range (netcheck.core.fields), not only its type.

Per record: a value of the right type but out of range is a DecodeError naming the field and
why, and the values healthy nodes really send pass. Then a fuzzer (hypothesis) over every
received record's fields: wild values (huge integers, NaN, lone surrogates, control
characters, negative ranks, long strings, wrong types) either decode into a record whose
every field keeps its declared range, or are refused with a one-line DecodeError; never
another exception.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import types
import typing
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netcheck.bandwidth.worker import Event
from netcheck.core import codec, fields
from netcheck.core.bwrecords import Fault, InFlight, NodeReport, Pair, RankTime, Row, Sweep, SweepOptions
from netcheck.core.codec import DecodeError
from netcheck.core.constants import LOCAL_TIMEOUT, MAX_FACTS_BYTES, MAX_MEMBERS
from netcheck.core.deadline import Deadline
from netcheck.core.envfacts import EnvFacts
from netcheck.core.meshrecords import Attempt, Candidate, MeshDone, MeshResults, Offer, Transfer, Trial
from netcheck.core.model import (
    ClockSample,
    ClusterVerdict,
    Finding,
    Launch,
    NodeEntry,
    NodeFacts,
    NodeResults,
    Probe,
    Reach,
    Report,
    Resolution,
    Visitor,
)
from netcheck.core.nictable import Address, IbPort, Nic, NicTable
from netcheck.core.rdzvrecords import Hello, Roster, RosterEntry
from netcheck.facts import envinfo
from netcheck.facts.nics import read_nic_table
from netcheck.phases.assemble import local_only, probe_only
from netcheck.render import text as render
from nodes import free_port
from test_codec import FACTS, REPORT, RESULTS

CANDIDATE = Candidate("eth0", "10.0.0.5", 40123, 1500)
OFFER = Offer(1, "0123456789abcdef", (CANDIDATE, Candidate("ib0", "fd00::5", 40124, 2044)))
ATTEMPT = Attempt(0, 1, "eth0", "10.0.0.5", "ok", 0.25, "eno1", "connected",
                  Transfer(1500, 1500, (Trial(1500, "echoed"),)))
ENTRY = RosterEntry(0, 0, "gpu01", "gpu01.cluster.example", "10.0.0.4")
FAULT = Fault(1, 3, 1, "all", "died", "killed by SIGKILL", InFlight("all_reduce", 1 << 20, (2, 3)))
SWEEP = REPORT.bandwidth.sweeps[0]


def replaced(doc, path: tuple, value):
    """doc (JSON data) with the value at path replaced."""
    if not path:
        return value
    doc[path[0]] = replaced(doc[path[0]], path[1:], value)
    return doc


def with_value(record, path: tuple, value) -> str:
    return json.dumps(replaced(json.loads(codec.dumps(record)), path, value))


def refusal(record, path: tuple, value) -> str:
    with pytest.raises(DecodeError) as caught:
        codec.loads(type(record), with_value(record, path, value), MAX_FACTS_BYTES)
    return str(caught.value)


# --- out of range: refused, naming the field and why -------------------------------------------

@pytest.mark.parametrize("record, path, value, message", [
    # the mesh's offers: ports, addresses, names, MTUs, ranks, how many
    (CANDIDATE, ("port",), 70000, "$.port: 70000 is not a port (1-65535)"),
    (CANDIDATE, ("port",), 0, "$.port: 0 is not a port (1-65535)"),
    (CANDIDATE, ("address",), "10.0.0.5\x00", "$.address: '10.0.0.5\\x00' holds a control character"),
    (CANDIDATE, ("address",), "x", "$.address: 'x' is not an IP address"),
    (CANDIDATE, ("address",), "10.0.0.5%eth0", "$.address: '10.0.0.5%eth0' is not an IP address"),
    (CANDIDATE, ("address",), "fe80::1%", "$.address: 'fe80::1%' is not an IP address"),
    (CANDIDATE, ("ifname",), "eth0$(touch /tmp/x)", "$.ifname: 'eth0$(touch /tmp/x)' is not an interface name"),
    (CANDIDATE, ("ifname",), "a" * 16, "is not an interface name"),
    (CANDIDATE, ("ifname",), "é" * 8, "is not an interface name"),   # 16 bytes
    (CANDIDATE, ("ifname",), "..", "$.ifname: '..' is not an interface name"),
    (CANDIDATE, ("mtu",), 70000, "$.mtu: 70000 is not an MTU (0-65536)"),
    (OFFER, ("rank",), -1, f"$.rank: -1 is not a node rank (0-{MAX_MEMBERS - 1})"),
    (OFFER, ("candidates",), [codec.to_plain(CANDIDATE)] * 1025, "$.candidates: 1025 items, expected at most 1024"),
    (ATTEMPT, ("rtt_ms",), -1.0, "$.rtt_ms: -1.0 is not a duration in ms"),
    (ATTEMPT, ("transfer", "trials", 0, "frame"), 1 << 20, "$.transfer.trials[0].frame: 1048576 is not an MTU"),
    (MeshResults(2, (ATTEMPT,)), ("rank",), MAX_MEMBERS,
     f"$.rank: {MAX_MEMBERS} is not a node rank (0-{MAX_MEMBERS - 1})"),
    # the rendezvous: seats, arrivals, names, ids
    (FACTS, ("launch", "node_rank"), -1, f"$.launch.node_rank: -1 is not a node rank (0-{MAX_MEMBERS - 1})"),
    (FACTS, ("launch", "node_rank"), MAX_MEMBERS, f"$.launch.node_rank: {MAX_MEMBERS} is not a node rank"),
    (FACTS, ("launch", "nnodes_max"), 0, f"$.launch.nnodes_max: 0 is not a node count (1-{MAX_MEMBERS})"),
    (FACTS, ("launch", "nproc_per_node"), 0, "$.launch.nproc_per_node: 0 is not a process count"),
    (FACTS, ("launch", "variables"), {"LOCAL_RANK": "²"}, "$.launch.variables: LOCAL_RANK='²' is not a whole number"),
    (FACTS, ("launch", "variables"), {"RANK": "9" * 5000}, "$.launch.variables: RANK='99999"),
    (FACTS, ("launch", "hostnames"), ["gpu01", "gpu 02"], "$.launch.hostnames[1]: 'gpu 02' is not a hostname"),
    (FACTS, ("hostname",), "gpu01\ud800", "$.hostname: 'gpu01\\ud800' is not valid Unicode (a lone surrogate at 5)"),
    (FACTS, ("hostname",), "gpu01\x1b[32mPASS", "$.hostname: 'gpu01\\x1b[32mPASS' holds a control character"),
    (FACTS, ("hostname",), "x" * 254, "is not a hostname"),
    (FACTS, ("hostname",), "-rf", "$.hostname: '-rf' is not a hostname"),
    (FACTS, ("fqdn",), "gpu02;reboot", "$.fqdn: 'gpu02;reboot' is not a hostname or an IP address"),
    (FACTS, ("run_id",), "a/b", "$.run_id: 'a/b' is not a run id (1-128 characters, no '/')"),
    (FACTS, ("run_id",), "", "$.run_id: '' is not a run id"),
    (FACTS, ("hostname_addresses", 0), "x", "$.hostname_addresses[0]: 'x' is not an IP address"),
    (FACTS, ("shm_bytes",), -1, "$.shm_bytes: -1 is not a byte count"),
    (FACTS, ("gpus",), -1, "$.gpus: -1 is not a count"),
    (FACTS, ("reach", "port"), 70000, "$.reach.port: 70000 is not a port (1-65535)"),
    (FACTS, ("reach", "outcome"), "fine", "$.reach.outcome: 'fine' is not one of open, not_store"),
    (FACTS, ("reach", "probes", 0, "seconds"), -0.5, "$.reach.probes[0].seconds: -0.5 is not a duration"),
    (FACTS, ("reach", "probes", 0, "family"), "ipv5", "$.reach.probes[0].family: 'ipv5' is not one of ipv4, ipv6"),
    (FACTS, ("nics", "nics", 0, "name"), "lo\nPASS", "$.nics.nics[0].name: 'lo\\nPASS' holds a control character"),
    (FACTS, ("nics", "nics", 1, "mtu"), 65537, "$.nics.nics[1].mtu: 65537 is not an MTU (0-65536)"),
    (FACTS, ("nics", "nics", 1, "index"), -1, "$.nics.nics[1].index: -1 is not an interface index"),
    (FACTS, ("nics", "nics", 1, "speed_mbps"), 0, "$.nics.nics[1].speed_mbps: 0 is not a link speed in Mb/s"),
    (FACTS, ("nics", "nics", 1, "mac"), "3c:ec:zz", "$.nics.nics[1].mac: '3c:ec:zz' is not a link-layer address"),
    (FACTS, ("nics", "nics", 1, "addresses", 0, "prefixlen"), 129, "prefixlen: 129 is not a prefix length (0-128)"),
    (FACTS, ("nics", "ib_ports", 0, "port"), 256, "$.nics.ib_ports[0].port: 256 is not an HCA port number"),
    (FACTS, ("nics", "default_route_ifname"), "eth/0", "$.nics.default_route_ifname: 'eth/0' is not an interface name"),
    (Visitor("job-7", "gpu02", 1), ("node_rank",), -1, "$.node_rank: -1 is not a node rank"),
    (Hello("job-7", "gpu01", "0.1.0", "ab"), ("hostname",), "gpu01\u202eSSAP", "holds a control character"),
    (ENTRY, ("arrival",), -1, "$.arrival: -1 is not an arrival number (0-9223372036854775807)"),
    (ENTRY, ("rank",), -1, "$.rank: -1 is not a node rank"),
    (ENTRY, ("address",), "x", "$.address: 'x' is not an IP address or empty"),
    (RESULTS, ("clock", "offset"), 10 ** 400, "$.clock.offset: an integer of 1329 bits does not fit in 64 bits"),
    (RESULTS, ("clock", "offset"), -1e11, "$.clock.offset: -100000000000.0 is not a clock offset in seconds"),
    (RESULTS, ("clock", "error"), -0.1, "$.clock.error: -0.1 is not a duration in seconds"),
    (RESULTS, ("resolutions", 0, "rank"), -3, "$.resolutions[0].rank: -3 is not a node rank"),
    (EnvFacts({"torch.version": "2.13.0"}), ("seconds",), -1, "$.seconds: -1.0 is not a duration in seconds"),
    # the bandwidth phase: ranks, stages, kinds, rates, options
    (NodeReport(1, (FAULT,), "gloo", ""), ("node",), MAX_MEMBERS, f"$.node: {MAX_MEMBERS} is not a node rank"),
    (FAULT, ("rank",), -2, "$.rank: -2 is not a rank or -1"),
    (FAULT, ("stage",), "nowhere", "$.stage: 'nowhere' is not one of start, control, data"),
    (FAULT, ("kind",), "exploded", "$.kind: 'exploded' is not one of died, stuck"),
    (FAULT, ("in_flight", "ranks", 1), -1, "$.in_flight.ranks[1]: -1 is not a rank"),
    (SWEEP, ("stage",), "start", "$.stage: 'start' is not one of all, intra, inter"),
    (SWEEP, ("ranks",), 0, "$.ranks: 0 is not a rank count"),
    (SWEEP, ("rows", 0, "busbw"), -1.0, "$.rows[0].busbw: -1.0 is not a bandwidth in GB/s"),
    (SWEEP, ("rows", 0, "busbw"), 1e308, "$.rows[0].busbw: 1e+308 is not a bandwidth in GB/s"),
    (SWEEP, ("rows", 0, "time_us"), 1e30, "$.rows[0].time_us: 1e+30 is not a duration in us"),
    (SWEEP, ("rows", 0, "wrong"), 1 << 64, "$.rows[0].wrong: 18446744073709551616 does not fit in 64 bits"),
    (SWEEP, ("rank_times", 0, "node"), MAX_MEMBERS, f"$.rank_times[0].node: {MAX_MEMBERS} is not a node rank"),
    (Pair(0, 1, 1 << 24, 9000.0, 1.86), ("b",), -1, "$.b: -1 is not a node rank"),
    (SweepOptions(), ("stepfactor",), 1, "$.stepfactor: 1 is not a step factor"),
    (SweepOptions(), ("iters",), 0, "$.iters: 0 is not an iteration count"),
    (SweepOptions(), ("maxbytes",), 1 << 41, "$.maxbytes: 2199023255552 is not a message size"),
    (SweepOptions(), ("budget_s",), float("1e300"), "$.budget_s: 1e+300 is not a duration in seconds"),
    # the host's verdict and a baseline report
    (ClusterVerdict("fail", "x", ()), ("verdict",), "ok", "$.verdict: 'ok' is not one of pass, warn, fail"),
    (REPORT, ("findings", 0, "severity"), "critical", "$.findings[0].severity: 'critical' is not one of pass"),
    (REPORT, ("findings", 0, "nodes", 0), -2, "$.findings[0].nodes[0]: -2 is not a node rank or -1"),
    (REPORT, ("faulty_nodes", 0), "gpu02\n", "$.faulty_nodes[0]: 'gpu02\\n' holds a control character"),
    (REPORT, ("timings", "local"), -1.0, "$.timings.local: -1.0 is not a duration in seconds"),
])
def test_a_value_out_of_range_is_refused_naming_the_field_and_why(record, path, value, message):
    assert message in refusal(record, path, value)


# --- in range: what healthy nodes send passes ---------------------------------------------------

@pytest.mark.parametrize("record, path, value", [
    (CANDIDATE, ("port",), 65535),
    (CANDIDATE, ("mtu",), 0),                          # not known
    (CANDIDATE, ("address",), "fe80::ba59:9f03:1a:2b3c%ib0"),
    (CANDIDATE, ("address",), "fe80::1%2"),            # a scope by number
    (CANDIDATE, ("ifname",), "eth0:1"),                # getifaddrs' label of an alias address
    (CANDIDATE, ("ifname",), "a" * 15),
    (FACTS, ("nics", "nics", 1, "mtu"), 16),           # a CAN link's
    (FACTS, ("nics", "nics", 1, "mac"), "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:2b:3c"),
    (FACTS, ("fqdn",), "fd00::5"),                     # an address where a name may be
    (FACTS, ("fqdn",), "gpu02.cluster.example."),
    (FACTS, ("hostname",), "gpu_02"),
    (FACTS, ("launch", "node_rank"), MAX_MEMBERS - 1),
    (FACTS, ("launch", "variables"), {"LOCAL_RANK": "0", "SLURM_LOCALID": "", "MASTER_ADDR": "gpu01"}),
    (FACTS, ("socket_env",), {"NCCL_DEBUG_SUBSYS": "INIT\tNET"}),  # free text: a tab is kept
    (FACTS, ("reach", "probes", 0, "detail"), "no answer\nin 3 s"),
    (FACTS, ("reach", "host"), "fd00::1"),
    (RESULTS, ("clock", "offset"), -1.7e9),            # a clock reset to 1970 is still told
    (FAULT, ("rank",), -1),                            # the whole node
    (FAULT, ("local_rank",), -1),
    (ENTRY, ("address",), ""),                         # a node with no address at all
    (ENTRY, ("arrival",), 10 ** 12),                   # after someone pushed the arrivals counter
    (REPORT, ("nodes", 0, "rank"), -1),                # the report of a node never seated
    (REPORT, ("findings", 0, "nodes"), list(range(2000))),  # more than MAX_ITEMS: one per node
])
def test_a_value_a_healthy_node_sends_is_accepted(record, path, value):
    text = with_value(record, path, value)
    assert codec.dumps(codec.loads(type(record), text, MAX_FACTS_BYTES)) == codec.dumps(json.loads(text))


def test_a_bare_float_or_int_value_is_bounded_too():
    # The host's clock answer (a float) and a goodbye (an int) are read as bare values.
    with pytest.raises(DecodeError, match=r"^\$: an integer of 1329 bits does not fit in 64 bits$"):
        codec.loads(float, "9" * 400, 1000)
    with pytest.raises(DecodeError, match=r"^\$: 9223372036854775808 does not fit in 64 bits$"):
        codec.loads(int, str(1 << 63), 1000)
    assert codec.loads(float, "1751000000.25", 100) == 1751000000.25


def test_a_message_about_a_long_value_stays_short_and_on_one_line():
    message = refusal(FACTS, ("hostname",), "gpu\n" * 100_000)
    assert "\n" not in message and len(message) < 200


# --- real records pass ----------------------------------------------------------------------------

def round_trip(value):
    return codec.loads(type(value), codec.dumps(value), 64 << 20)


def test_this_machines_nic_table_passes():
    table = read_nic_table()
    assert round_trip(table) == table


def test_this_machines_local_report_passes():
    text = render.render_json(local_only(os.environ, Deadline(LOCAL_TIMEOUT)))
    assert codec.dumps(codec.loads(Report, text, 64 << 20)) == codec.dumps(json.loads(text))


def test_a_probe_report_passes():
    rep = probe_only("127.0.0.1", free_port(), 1.0)
    assert round_trip(rep) == rep


def test_this_machines_environment_passes():
    values = {**envinfo.python_facts(), **envinfo.os_facts(), **envinfo.cpu_facts(),
              **envinfo.var_facts(os.environ), **envinfo.shm_facts()}
    env = EnvFacts(values, 0.5)
    assert round_trip(env) == env


# --- the fuzzer ---------------------------------------------------------------------------------------
# A record drawn in range (each field one of the values its rules admit), then, most of the
# time, one of its values (a leaf, a list, a whole nested record) replaced by a hostile one
# of the right type or by any JSON at all: decoding reaches every field, and every rule is
# tried on a record otherwise sound.

RECEIVED = [
    NodeFacts, Launch, Reach, Probe, NicTable, Nic, Address, IbPort, Visitor, Hello, Roster, RosterEntry,
    NodeResults, Resolution, ClockSample, EnvFacts, Offer, Candidate, MeshResults, Attempt, MeshDone,
    NodeReport, Fault, Event, SweepOptions, Sweep, Row, RankTime, Pair, ClusterVerdict, Finding, NodeEntry,
]
FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
HOSTILE_STRINGS = [
    "", "x", "\ud800", "gpu\udfff", "a\nb", "\t", "\x00", "\x1b[32mPASS", "\x7f", "\x85", "\u2028",
    "\u202e", "²", "9" * 5000, "x" * 300, "eth0$(touch /tmp/x)", "../..", "fe80::1%", "256.0.0.1",
]
HOSTILE_NUMBERS = [-1, -2, 0, 65535, 65536, 70000, MAX_MEMBERS, (1 << 63) - 1, 1 << 63, -(1 << 63) - 1,
                   10 ** 400, 1e308, -1e308, -0.0, float("nan"), float("inf"), True]
# Values that pass the name rules (each rule passes one at least: good_scalars checks).
GOOD_STRINGS = ["gpu01", "gpu01.cluster.example", "10.0.0.1", "fd00::1", "fe80::1%eth0", "eth0", "eth0:1",
                "", "3c:ec:ef:01:02:03", "job-7", "x", "a\tb", "0",
                "fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "0000:18:00.0"]   # a GID, a PCI address (rdmarecords)
GOOD_NUMBERS = [0, 1, 2, 1500, 29500, 0.5, -0.25]
ANY_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                      max_size=3),
                        max_leaves=6)


def split(hint) -> tuple[object, tuple]:
    if typing.get_origin(hint) is typing.Annotated:
        return typing.get_args(hint)[0], hint.__metadata__
    return hint, ()


def rules_of(meta: tuple) -> list:
    return [m for m in meta if hasattr(m, "why_not")]


def cap_of(meta: tuple) -> int:
    return next((m.most for m in meta if isinstance(m, fields.Items)), fields.MAX_ITEMS)


def hints(cls) -> dict:
    return typing.get_type_hints(cls, include_extras=True)


def is_union(origin) -> bool:
    return origin in (typing.Union, types.UnionType)


@functools.cache
def good(hint) -> st.SearchStrategy:
    """JSON for a value of hint that keeps every rule."""
    base, meta = split(hint)
    origin, args = typing.get_origin(base), typing.get_args(base)
    if is_union(origin):
        return st.one_of([good(a) for a in args])
    if origin is tuple:
        if args[-1] is Ellipsis:
            return st.lists(good(args[0]), max_size=3)
        return st.tuples(*map(good, args)).map(list)
    if origin is dict:
        values = st.dictionaries(st.sampled_from(["k", "LOCAL_RANK", "0"]), good(args[1]), max_size=3)
        return values.filter(lambda d: all(r.why_not(d) is None for r in rules_of(meta)))
    if dataclasses.is_dataclass(base):
        return st.fixed_dictionaries({name: good(h) for name, h in hints(base).items()})
    return st.sampled_from(good_scalars(base, meta))


def good_scalars(base, meta: tuple) -> list:
    if base is type(None):
        return [None]
    if base is bool:
        return [True, False]
    rules = rules_of(meta)
    candidates = ([s for s in GOOD_STRINGS + choices(rules) if is_clean(s, is_free(meta))] if base is str
                  else [base(n) for n in GOOD_NUMBERS + bounds(rules) if base is float or n == int(n)])
    fits = [c for c in candidates if all(r.why_not(c) is None for r in rules)]
    assert fits, f"no good value for {base} under {rules}: add one to GOOD_STRINGS"
    return fits


def choices(rules: list) -> list[str]:
    """The values of a fields.one_of rule."""
    return [c for r in rules if isinstance(getattr(getattr(r, "test", None), "__self__", None), frozenset)
            for c in sorted(r.test.__self__)]


def bounds(rules: list) -> list:
    return [b for r in rules if isinstance(r, fields.Range) for b in (r.low, r.high)]


@functools.cache
def hostile(hint) -> st.SearchStrategy:
    """JSON of hint's type (or near it) that breaks a rule, where one can be broken."""
    base, _ = split(hint)
    origin, args = typing.get_origin(base), typing.get_args(base)
    if is_union(origin):
        return st.one_of([hostile(a) for a in args])
    if origin is tuple:
        return st.just([None] * (fields.MAX_ITEMS + 1)) | st.lists(hostile(args[0]), min_size=1, max_size=2)
    if origin is dict:
        return st.dictionaries(st.sampled_from(HOSTILE_STRINGS), hostile(args[1]), min_size=1, max_size=2)
    if dataclasses.is_dataclass(base):
        return st.fixed_dictionaries({name: hostile(h) for name, h in hints(base).items()})
    if base is str:
        return st.sampled_from(HOSTILE_STRINGS) | st.text(st.characters(exclude_categories=()), max_size=20)
    return st.sampled_from(HOSTILE_NUMBERS) | st.integers() | st.floats()


def places(doc, hint, path: tuple = ()) -> list[tuple[tuple, object]]:
    """(path, hint) of every value in a document good() drew: each a place for a hostile one."""
    base, _ = split(hint)
    origin, args = typing.get_origin(base), typing.get_args(base)
    if is_union(origin):
        return places(doc, next(a for a in args if holds(doc, a)), path)
    here = [(path, hint)]
    if origin is tuple:
        items = args if args[-1] is not Ellipsis else [args[0]] * len(doc)
        return here + [p for i, (v, a) in enumerate(zip(doc, items)) for p in places(v, a, path + (i,))]
    if origin is dict:
        return here + [p for k, v in doc.items() for p in places(v, args[1], path + (k,))]
    if dataclasses.is_dataclass(base):
        return here + [p for name, h in hints(base).items() for p in places(doc[name], h, path + (name,))]
    return here


def holds(doc, hint) -> bool:
    """Whether doc is JSON of hint's kind (which option of a union good() drew)."""
    base, _ = split(hint)
    origin = typing.get_origin(base)
    if origin is tuple:
        return isinstance(doc, list)
    if origin is dict or dataclasses.is_dataclass(base):
        return isinstance(doc, dict)
    return doc is None if base is type(None) else isinstance(doc, base)


def violations(value, hint, where: str = "$") -> list[str]:
    """Where a decoded value breaks its declared range or a generic rule: the property is none."""
    base, meta = split(hint)
    origin, args = typing.get_origin(base), typing.get_args(base)
    if is_union(origin):
        found = [violations(value, a, where) for a in args]
        return [] if any(not v for v in found) else [f for v in found for f in v]
    shape = shape_violations(value, base, origin, args, meta, where)
    if shape:
        return shape
    return [f"{where}: {r.why_not(value)}" for r in rules_of(meta) if r.why_not(value) is not None]


def shape_violations(value, base, origin, args, meta, where: str) -> list[str]:
    if not isinstance(value, origin or base):
        return [f"{where}: {value!r} is no {base}"]
    if origin is tuple:
        items = args if args[-1] is not Ellipsis else [args[0]] * len(value)
        too_long = [f"{where}: {len(value)} items"] if len(value) > cap_of(meta) else []
        return too_long + [f for i, (v, a) in enumerate(zip(value, items)) for f in violations(v, a, f"{where}[{i}]")]
    if origin is dict:
        too_long = [f"{where}: {len(value)} items"] if len(value) > cap_of(meta) else []
        return too_long + [f for k, v in value.items()
                           for f in violations(k, args[0], where) + violations(v, args[1], f"{where}.{k}")]
    if dataclasses.is_dataclass(base):
        return [f for name, h in hints(base).items() for f in violations(getattr(value, name), h, f"{where}.{name}")]
    if base is str:
        return [] if is_clean(value, is_free(meta)) else [f"{where}: {value!r}"]
    if base is int:
        return [] if type(value) is int and fields.MIN_INT <= value <= fields.MAX_INT else [f"{where}: {value!r}"]
    if base is float:
        return [] if type(value) is float and math.isfinite(value) else [f"{where}: {value!r}"]
    return []


def is_free(meta: tuple) -> bool:
    return any(isinstance(m, fields.FreeText) for m in meta)


def is_clean(text: str, free: bool) -> bool:
    """Valid Unicode; and, unless free text, no control character, line separator or bidi override."""
    if any(unicodedata.category(c) == "Cs" for c in text):
        return False
    return free or not any(unicodedata.category(c) == "Cc" or c in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                           "\u2066\u2067\u2068\u2069" for c in text)


@pytest.mark.parametrize("cls", RECEIVED, ids=lambda c: c.__name__)
@FUZZ
@given(data=st.data())
def test_wild_fields_decode_within_their_ranges_or_are_refused(cls, data):
    doc = data.draw(good(cls))
    hostile_one = data.draw(st.integers(0, 4)) > 0
    if hostile_one:
        path, hint = data.draw(st.sampled_from(places(doc, cls)))
        doc = replaced(doc, path, data.draw(hostile(hint) | ANY_JSON))
    try:
        record = codec.loads(cls, json.dumps(doc), MAX_FACTS_BYTES)
    except DecodeError as e:
        assert hostile_one, f"a record in range was refused: {e}"
        assert "\n" not in str(e)
        return
    assert violations(record, cls) == []


@pytest.mark.parametrize("cls", [Candidate, Visitor, RosterEntry, ClockSample, Resolution, Fault, Address],
                         ids=lambda c: c.__name__)
@FUZZ
@given(data=st.data())
def test_any_instance_comes_back_equal_or_is_refused(cls, data):
    # from_type ignores the ranges: whatever it builds, codec keeps or refuses whole.
    value = data.draw(st.from_type(cls))
    try:
        back = codec.loads(cls, codec.dumps(value), MAX_FACTS_BYTES)
    except DecodeError:
        return
    assert back == value and violations(back, cls) == []


@FUZZ
@given(st.binary(max_size=300) | st.text(st.characters(exclude_categories=()), max_size=300))
def test_any_bytes_are_a_record_or_a_decode_error(text):
    try:
        codec.loads(NodeFacts, text, MAX_FACTS_BYTES)
    except DecodeError as e:
        assert "\n" not in str(e)
