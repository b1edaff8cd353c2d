"""Property-based tests (hypothesis) of what netcheck reads from people and files: the
command line (--rdzv, --nnodes MIN:MAX, the sizes of -b/-e), --baseline reports that are
truncated, of another schema or otherwise mangled, and --hash paths that are missing,
unreadable or huge.

The property throughout: bad input gives the one documented error (a usage error, exit 64,
one line; a BaselineError; an "unreadable:" or "incomplete:" hash value), never another
exception, never a hang; good input is read back exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import string
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from netcheck import cli
from netcheck.bandwidth.flags import UNITS, parse_size
from netcheck.cli import build_parser, config_from_args
from netcheck.config import BaselineError, UsageError, load_report
from netcheck.core.bwtext import size_words
from netcheck.core.constants import BW_MAX_BYTES, EXIT_USAGE, LOCAL_TIMEOUT, MAX_BASELINE_BYTES, REPORT_SCHEMA
from netcheck.core.deadline import Deadline
from netcheck.core.errors import UserError
from netcheck.facts.envinfo import gather_env
from netcheck.facts.hashing import hash_path
from netcheck.facts.launcher import LaunchError, parse_nnodes
from netcheck.phases.assemble import local_only
from netcheck.render import text as report
from netcheck.rules.baseline import drift_findings

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20)


# --- the command line ------------------------------------------------------------------------

def usage_of(argv: list[str]) -> tuple[int, str]:
    """netcheck's exit code and stderr for argv, which must fail before any phase runs."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue()


def config_of(argv: list[str]):
    return config_from_args(build_parser().parse_args(argv), {})


@FAST
@given(st.text(max_size=40), st.text(max_size=20))
@example("node0:29500", "2:1")
@example("-x", "1")
@example("[::1]:0", "0:0")
@example("node0", "1:" + "9" * 40)
@example("0", "0\x1f")
def test_any_rdzv_and_nnodes_is_a_config_or_a_usage_error(rdzv, nnodes):
    try:
        config = config_of(["--rdzv", rdzv, "--nnodes", nnodes])
    except UserError as e:   # a UsageError, or a launcher's LaunchError
        assert "\n" not in str(e)
        return
    launch = config.launch
    assert 1 <= config.rdzv.port <= 65535 and config.rdzv.host
    assert 1 <= launch.nnodes_min <= launch.nnodes_max


@FAST
@given(st.text(max_size=40), st.text(max_size=20))
def test_a_bad_command_line_exits_64_with_one_line(rdzv, nnodes):
    """--timeout 0 makes every command line here unusable, whatever else is in it."""
    code, err = usage_of(["--rdzv", rdzv, "--nnodes", nnodes, "--timeout", "0"])
    assert code == EXIT_USAGE
    assert err.startswith("netcheck: error: ") and err.count("\n") == 1, err


COUNT = st.integers(1, 10**9 - 1)   # nine digits at most


@given(COUNT, COUNT, st.sampled_from(["", " ", "  "]))
def test_nnodes_min_max_reads_back_or_names_the_order(a, b, space):
    low, high = sorted((a, b))
    assert parse_nnodes(f"{space}{low}{space}:{high}") == (low, high)
    if low < high:
        with pytest.raises(LaunchError, match="MIN <= MAX"):
            parse_nnodes(f"{high}:{low}")
    with pytest.raises(LaunchError, match="whole numbers"):
        parse_nnodes(f"{low}:{high:010d}")   # ten digits, even if leading zeros


@given(st.integers(1, 1000), st.integers(1, 1000))
def test_a_node_rank_must_be_below_nnodes_max(high, rank):
    argv = ["--rdzv", "node0", "--nnodes", f"1:{high}", "--node-rank", str(rank)]
    if rank < high:
        assert config_of(argv).launch.node_rank == rank
    else:
        with pytest.raises(UsageError, match=f"not below nnodes {high}"):
            config_of(argv)


SIZE_TEXT = st.text(alphabet=string.digits + "kKmMgGbB \t.-+x", max_size=24)


@FAST
@given(st.one_of(st.text(max_size=30), SIZE_TEXT))
@example("9" * 5000)
@example("0")
@example("1T")
@example(f"{(BW_MAX_BYTES >> 30) + 1}G")
def test_any_size_is_bytes_in_range_or_one_user_error(text):
    try:
        value = parse_size("-b", text)
    except UserError as e:
        assert str(e).startswith("-b ") and "\n" not in str(e)
        return
    assert 1 <= value <= BW_MAX_BYTES


@given(st.integers(1, 1 << 14), st.sampled_from(sorted(UNITS)), st.booleans(), st.booleans(),
       st.sampled_from(["", " ", "\t"]))
def test_sizes_read_back_as_nccl_tests_reads_them(n, unit, lower, with_b, space):
    text = f"{space}{n}{space}{unit.lower() if lower else unit}{'B' if with_b else ''}{space}"
    expected = n * UNITS[unit]
    if expected <= BW_MAX_BYTES:
        assert parse_size("-e", text) == expected
    else:
        with pytest.raises(UserError):
            parse_size("-e", text)


# --- --baseline ----------------------------------------------------------------------------

@lru_cache(maxsize=1)
def good_report_text() -> str:
    """A real report of this machine: its NICs and environment, with a recommendation."""
    rep = local_only({}, Deadline(LOCAL_TIMEOUT))
    env = gather_env((), {"NCCL_DEBUG": "INFO"})
    nodes = tuple(dataclasses.replace(n, env=env) for n in rep.nodes)
    rep = dataclasses.replace(rep, run_id="good", nodes=nodes, recommend={"NCCL_SOCKET_IFNAME": "eth0"})
    return report.render_json(rep)


def load_text(data: str | bytes):
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    try:
        return load_report("--baseline", f.name)
    finally:
        os.unlink(f.name)


def assert_baseline_error(data: str | bytes, *words: str) -> None:
    with pytest.raises(BaselineError) as caught:
        load_text(data)
    assert str(caught.value).startswith("--baseline ") and "\n" not in str(caught.value)
    assert all(w in str(caught.value) for w in words), str(caught.value)


def test_the_good_report_loads_and_drifts_nowhere():
    old = load_text(good_report_text())
    assert old.schema == REPORT_SCHEMA and old.nodes[0].env is not None
    (same,) = drift_findings(old, old.nodes, old.recommend)
    assert same.severity == "pass"


@FAST
@given(st.data())
def test_a_truncated_baseline_is_named_as_such(data):
    text = good_report_text()
    cut = data.draw(st.integers(0, len(text.rstrip()) - 1))
    assert_baseline_error(text[:cut], f"not a {REPORT_SCHEMA} report")


@FAST
@given(st.text(max_size=30).filter(lambda s: s != REPORT_SCHEMA))
@example("netcheck.report/2")
@example("netcheck.report/1 ")
def test_another_schema_is_named(schema):
    doc = json.loads(good_report_text())
    doc["schema"] = schema
    assert_baseline_error(json.dumps(doc), "schema", REPORT_SCHEMA)


def paths(value, prefix=()):
    """Every path into a JSON document, the document itself included."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        yield from paths(v, prefix + (k,))


@FAST
@given(st.data(), JSON)
def test_a_mangled_baseline_loads_or_is_a_baseline_error(data, replacement):
    """Any one value of a good report replaced by any JSON: read (and usable for drift), or
    refused with BaselineError; never another exception."""
    doc = json.loads(good_report_text())
    path = data.draw(st.sampled_from(list(paths(doc))))
    if not path:
        doc = replacement
    else:
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = replacement
    try:
        old = load_text(json.dumps(doc))
    except BaselineError as e:
        assert "\n" not in str(e)
        return
    current = load_text(good_report_text())
    assert drift_findings(old, current.nodes, current.recommend)


@FAST
@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
@example(b"\x80\x04\x95pickle")
@example(b'{"schema": "netcheck.report/1"' + b"[" * 100000)
@example(b"NaN")
def test_arbitrary_bytes_are_a_baseline_error(data):
    assert_baseline_error(data)


def test_a_baseline_over_the_size_limit_is_refused_unread(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_BASELINE_BYTES + 4096)   # sparse: no disk used
    with pytest.raises(BaselineError, match="byte limit"):
        load_report("--baseline", str(big))


@pytest.mark.parametrize("name", ["missing.json", "folder", "file/below"])
def test_a_baseline_that_cannot_be_read_is_named(tmp_path, name):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("{}")
    with pytest.raises(BaselineError, match=r"^--baseline .*: "):
        load_report("--baseline", str(tmp_path / name))


# --- --hash --------------------------------------------------------------------------------

NAME = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..", "__pycache__", ".git"))
TREE = st.dictionaries(st.lists(NAME, min_size=1, max_size=3).map(tuple), st.binary(max_size=300),
                       min_size=1, max_size=8)


def write_tree(root: Path, tree: dict[tuple[str, ...], bytes]) -> tuple[int, int]:
    """Write the files (a name that is both a file and a folder keeps the folder); returns
    (files, bytes) written."""
    files = size = 0
    for parts, content in sorted(tree.items(), key=lambda item: -len(item[0])):
        path = root.joinpath(*parts)
        if path.exists() or any(p.is_file() for p in path.parents if root in p.parents):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        files, size = files + 1, size + len(content)
    return files, size


@FAST
@given(TREE)
def test_a_tree_hashes_the_same_anywhere_and_counts_what_it_read(tree):
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        files, size = write_tree(Path(a, "x"), tree)
        write_tree(Path(b, "deeper", "y"), tree)
        value = hash_path(os.path.join(a, "x"))
        assert value == hash_path(os.path.join(b, "deeper", "y"))
        assert value.startswith("sha256 ") and value.endswith(f"({files} files, {size_words(size)})"), value


@FAST
@given(TREE, st.integers(0, 2000))
def test_a_byte_bound_below_the_tree_stops_with_incomplete(tree, max_bytes):
    with tempfile.TemporaryDirectory() as d:
        _, size = write_tree(Path(d), tree)
        value = hash_path(d, max_bytes=max_bytes)
    if size > max_bytes:
        assert value.startswith(f"incomplete: over {size_words(max_bytes)} after "), value
    else:
        assert value.startswith("sha256 "), value


@FAST
@given(TREE, st.data())
def test_one_changed_byte_changes_the_hash(tree, data):
    with tempfile.TemporaryDirectory() as d:
        write_tree(Path(d), tree)
        files = sorted(p for p in Path(d).rglob("*") if p.is_file() and p.stat().st_size)
        if not files:
            return
        before = hash_path(d)
        victim = data.draw(st.sampled_from(files))
        content = bytearray(victim.read_bytes())
        content[data.draw(st.integers(0, len(content) - 1))] ^= 1
        victim.write_bytes(bytes(content))
        assert hash_path(d) != before


@given(st.lists(NAME, min_size=1, max_size=4))
def test_a_missing_path_is_unreadable_not_an_error(parts):
    with tempfile.TemporaryDirectory() as d:
        assert hash_path(os.path.join(d, "missing", *parts)).startswith("unreadable: FileNotFoundError")
        Path(d, "file").write_text("x")
        assert hash_path(os.path.join(d, "file", *parts)).startswith("unreadable: NotADirectoryError")


def test_a_file_that_fails_to_read_is_unreadable():
    # Root reads any file, whatever its mode; /proc/self/mem fails with EIO at offset 0.
    assert hash_path("/proc/self/mem") == "unreadable: OSError: [Errno 5] Input/output error"


def test_a_fifo_or_a_loop_is_never_read(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to("loop")
    started = time.monotonic()
    assert hash_path(str(tmp_path / "fifo")).startswith("unreadable: ")
    assert hash_path(str(tmp_path / "loop")).startswith("unreadable: ")
    assert hash_path(str(tmp_path)).startswith("sha256 ")   # entries recorded by kind, not read
    assert time.monotonic() - started < 1


@given(st.integers(1, 1 << 40), st.integers(0, 1 << 20))
@settings(max_examples=20, deadline=None)
def test_a_huge_file_is_incomplete_at_once(extra, max_bytes):
    """A sparse file past the bound: named by its size, without reading a byte of it."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "huge")
        with open(path, "wb") as f:
            f.truncate(max_bytes + extra)
        started = time.monotonic()
        value = hash_path(path, max_bytes=max_bytes)
        assert time.monotonic() - started < 0.5
    assert value == f"incomplete: over {size_words(max_bytes)}: the file is {size_words(max_bytes + extra)}"


def test_a_huge_folder_stops_at_the_bounds(tmp_path):
    for k in range(4):
        with open(tmp_path / f"part{k}", "wb") as f:
            f.truncate(64 << 20)
    started = time.monotonic()
    assert hash_path(str(tmp_path), max_bytes=100 << 20).startswith("incomplete: over 100 MiB after 1 files")
    assert hash_path(str(tmp_path), max_seconds=0).startswith("incomplete: over 0 s after 0 files")
    assert time.monotonic() - started < 5



# --- scripts/fault_table.py --------------------------------------------------------------------

def fault_table():
    import importlib.util

    path = Path(__file__).parents[1] / "scripts" / "fault_table.py"
    spec = importlib.util.spec_from_file_location("fault_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FINDING = st.tuples(st.sampled_from(["rdzv.join", "mesh.connect"]), st.sampled_from(["warn", "fail"]),
                    st.text(max_size=200)).map(list)
NODE = st.fixed_dictionaries({
    "node": st.sampled_from(["node0", "node1"]), "role": st.text(max_size=30),
    "rc": st.sampled_from([-9, -15, 0, 1, 2, 3, 130]), "seconds": st.floats(0, 100),
    "report": st.booleans(), "unfinished": st.none() | st.sampled_from(["rendezvous", "mesh"]),
    "findings": st.lists(FINDING, max_size=3), "other_findings": st.integers(0, 3)})
CASE = st.fixed_dictionaries({
    "fault": st.text(min_size=1, max_size=60), "phase": st.sampled_from(["rendezvous", "mesh", "env", "x"]),
    "timeout": st.integers(1, 60), "grace": st.just(5.0), "test": st.just("t"),
    "nodes": st.lists(NODE, min_size=1, max_size=3)})


@FAST
@given(st.lists(CASE, max_size=6))
def test_the_fault_table_has_one_intact_row_per_fault(cases):
    """Whatever the log holds (pipes, newlines, reruns of a case), each fault is one table row
    with its five cells."""
    table = fault_table()
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(c) + "\n" for c in cases))
    try:
        text = table.render(table.load(Path(f.name)))
    finally:
        os.unlink(f.name)
    rows = text.split("|---|---|---|---|---|\n", 1)[1].splitlines()
    assert len(rows) == len({c["fault"] for c in cases})
    assert all(re.sub(r"\\.", "", row).count("|") == 6 for row in rows), rows
