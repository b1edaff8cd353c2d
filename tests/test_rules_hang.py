"""job.hang's rules over hand-built traces, and the dump reader over dump bytes as torch
writes them (plain pickles and JSON) and over hostile, garbled and truncated files."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from netcheck.core.hangrecords import Collective, GroupTail, HangView, RankTrace
from netcheck.facts.frformat import NotADump
from netcheck.facts.frtrace import read_dumps
from netcheck.rules import registry
from netcheck.rules.hang import hang_findings, unread_finding

AR = "gloo:all_reduce"


def call(seq: int, op: str = AR, sizes: str = "[[1000]] -> [[1000]]", line: int = 15, completed=None) -> Collective:
    return Collective(seq, op, sizes, "[\"Float\"]", completed, f"train.py:{line} in step")


def trace(rank: int, *last: Collective, group: str = "0", desc: str = "default_pg", stack: str = "") -> RankTrace:
    return RankTrace(rank, f"trace_rank_{rank}", "", (GroupTail(group, desc, (), tuple(last)),), stack)


def only(findings, check=registry.JOB_HANG):
    (found,) = [f for f in findings if f.check == check]
    return found


def test_a_rank_that_never_issued_the_collective_is_named_with_its_last_line():
    view = HangView("dumps", (trace(0, call(5), call(6, line=15)), trace(1, call(4), call(5, line=9)),
                              trace(2, call(5), call(6, line=15))))
    f = only(hang_findings(view))
    assert (f.severity, f.kind, f.nodes) == ("fail", registry.HANG_BEHIND, (1,))
    assert f.evidence == ("rank 1 (trace_rank_1): last issued #5 gloo:all_reduce at train.py:9 in step",)


def test_a_different_size_at_one_sequence_id_is_a_desync_naming_both_sides():
    view = HangView("dumps", (trace(0, call(5), call(6, sizes="[[1000]] -> [[1000]]")),
                              trace(1, call(5), call(6, sizes="[[2000]] -> [[2000]]", line=17))))
    f = only(hang_findings(view))
    assert (f.severity, f.kind, f.nodes) == ("fail", registry.HANG_DESYNC, (0, 1))
    assert f.evidence == (
        "rank 0 (trace_rank_0): gloo:all_reduce [[1000]] -> [[1000]] [\"Float\"] at train.py:15 in step",
        "rank 1 (trace_rank_1): gloo:all_reduce [[2000]] -> [[2000]] [\"Float\"] at train.py:17 in step")


def test_a_hang_in_a_subgroup_names_that_group():
    sub = dict(group="1", desc="undefined")
    view = HangView("dumps", (trace(0, call(3), **sub), trace(1, call(2), **sub), trace(2, call(3), **sub)))
    f = only(hang_findings(view))
    assert f.kind == registry.HANG_BEHIND and f.nodes == (1,)
    assert f.evidence == ("rank 1 (trace_rank_1): last issued #2 gloo:all_reduce at train.py:15 in step",)
    assert "of process group 1," in f.summary   # the group is said nowhere else (no field holds it)


def test_ranks_with_no_trace_are_the_cause_where_the_others_are_in_step():
    view = HangView("dumps", (trace(0, call(6)), trace(1, call(6))), world_size=4)
    (no_data,) = hang_findings(view)
    assert (no_data.severity, no_data.kind, no_data.nodes) == ("fail", registry.HANG_NO_DATA, (2, 3))


def test_ranks_with_no_trace_are_named_apart_from_ranks_behind():
    view = HangView("dumps", (trace(0, call(6)), trace(1, call(5))), world_size=3)
    behind, no_data = hang_findings(view)
    assert (behind.kind, behind.nodes) == (registry.HANG_BEHIND, (1,))
    assert (no_data.severity, no_data.kind, no_data.nodes) == ("warn", registry.HANG_NO_DATA, (2,))


def test_every_rank_in_a_collective_none_completed_is_the_transport():
    view = HangView("dumps", tuple(trace(r, call(9, op="nccl:all_reduce", completed=False)) for r in range(3)))
    f = only(hang_findings(view))
    assert (f.severity, f.kind, f.nodes) == ("fail", registry.HANG_STUCK, (0, 1, 2))


def test_ranks_in_step_pass_and_gloo_completion_is_not_guessed():
    view = HangView("dumps", tuple(trace(r, call(5), call(6)) for r in range(2)))
    f = only(hang_findings(view))
    assert (f.severity, f.kind, f.nodes) == ("pass", "", (0, 1))
    assert f.evidence == ("process group 0 (default_pg): #6 gloo:all_reduce at train.py:15 in step on rank(s) 0, 1",)


# --- the dump reader -------------------------------------------------------------------------

def entry(seq: int, group: tuple[str, str] = ("0", "default_pg"), state: str = "scheduled") -> dict:
    """One entry as torch 2.13's recorder writes it (gloo)."""
    return {"collective_seq_id": seq, "process_group": group, "profiling_name": AR, "input_sizes": [[1000]],
            "output_sizes": [[1000]], "input_dtypes": ["Float"], "is_p2p": False, "state": state,
            "frames": [{"filename": "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                        "line": 3245, "name": "all_reduce"},
                       {"filename": "/job/train.py", "line": 15, "name": "<module>"}]}


def dump(*seqs: int) -> dict:
    return {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}}, "pg_status": {},
            "entries": [entry(s) for s in seqs]}


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/netcheck-pwned",))


def test_dumps_as_torch_writes_them_are_read_and_the_hostile_ones_refused_by_name(tmp_path):
    (tmp_path / "trace_rank_0").write_bytes(pickle.dumps(dump(5, 6), protocol=2))
    (tmp_path / "trace_rank_1.json").write_text(json.dumps(dump(4, 5)))
    (tmp_path / "trace_rank_2").write_bytes(pickle.dumps({"entries": [Evil()]}, protocol=4))
    (tmp_path / "trace_rank_3").write_bytes(b"\x00garbage\xff" * 10)
    (tmp_path / "trace_rank_4").write_bytes(pickle.dumps(dump(5, 6), protocol=2)[:-40])
    (tmp_path / "notes.txt").write_text("not a rank's file")
    view = read_dumps(str(tmp_path), world_size=6)
    assert [t.rank for t in view.traces] == [0, 1]
    assert view.traces[0].groups[0].last[-1] == Collective(6, AR, "[[1000]] -> [[1000]]", '["Float"]', None,
                                                           "/job/train.py:15 in <module>")
    refused = {r.source: r for r in view.refused}
    assert set(refused) == {"trace_rank_2", "trace_rank_3", "trace_rank_4"}
    assert refused["trace_rank_2"].hostile and "posix.system" in refused["trace_rank_2"].reason
    assert not refused["trace_rank_3"].hostile and not refused["trace_rank_4"].hostile
    assert not os.path.exists("/tmp/netcheck-pwned")

    findings = hang_findings(view)
    hostile = [f for f in findings if f.check == registry.JOB_HOSTILE]
    assert sorted((f.kind, f.summary.split()[3]) for f in hostile) == [
        (registry.JOB_FOREIGN_VALUE, "trace_rank_3"), (registry.JOB_FOREIGN_VALUE, "trace_rank_4"),
        (registry.JOB_HOSTILE_VALUE, "trace_rank_2")]
    behind = [f for f in findings if f.kind == registry.HANG_BEHIND]
    assert [f.nodes for f in behind] == [(1,)]
    (no_data,) = [f for f in findings if f.kind == registry.HANG_NO_DATA]
    assert no_data.nodes == (2, 3, 4, 5)


def test_a_folder_of_nothing_readable_says_so(tmp_path):
    (tmp_path / "trace_rank_0").write_bytes(b"")
    view = read_dumps(str(tmp_path))
    findings = hang_findings(view)
    assert [(f.check, f.severity) for f in findings] == [(registry.JOB_HOSTILE, "fail"), (registry.JOB_HANG, "warn")]


def test_a_traces_path_that_is_no_folder_warns(tmp_path):
    with pytest.raises(NotADump) as refused:
        read_dumps(str(tmp_path / "absent"))
    f = unread_finding(str(refused.value))
    assert (f.check, f.severity, f.kind, f.nodes) == (registry.JOB_HANG, "warn", registry.HANG_NO_DATA, ())


@pytest.mark.parametrize("size", [17 << 20])
def test_a_dump_over_the_size_limit_is_refused_unread(tmp_path, size):
    with open(tmp_path / "trace_rank_0", "wb") as f:
        f.truncate(size)
    (refused,) = read_dumps(str(tmp_path)).refused
    assert "over the" in refused.reason


MEMO_BOMB = b"\x80\x02N" + b"r\xff\xff\xff\x7f" + b"."          # LONG_BINPUT at index 2**31-1: gigabytes of memo
DEEP_SET = b"\x80\x04\x8f(" + b")" + b"\x85" * 150_000 + b"\x90."   # a tuple 150,000 deep in a set: its hash
                                                                    # overflows C's stack


@pytest.mark.parametrize("name,data", [("trace_rank_0", MEMO_BOMB), ("trace_rank_1", DEEP_SET)])
def test_a_pickle_built_to_exhaust_its_reader_is_refused_and_the_rest_still_read(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)
    (tmp_path / "trace_rank_7").write_bytes(pickle.dumps(dump(5, 6), protocol=2))
    view = read_dumps(str(tmp_path))
    assert [t.rank for t in view.traces] == [7]
    (refused,) = view.refused
    assert refused.source == name and not refused.hostile, refused


def test_other_files_beside_the_dumps_are_counted_once_and_never_called_hostile(tmp_path):
    """torch writes its dumps into a folder that holds other things (/tmp by default): a log,
    an empty marker ending in a number, a binary leftover. Before, `ready0` was a hostile dump."""
    (tmp_path / "trace_rank_0").write_bytes(pickle.dumps(dump(5, 6), protocol=2))
    (tmp_path / "trace_rank_1").write_bytes(pickle.dumps(dump(5, 6), protocol=2))
    (tmp_path / "train.log").write_text("step 100 loss 1.9\n")
    (tmp_path / "ready0").write_bytes(b"")
    (tmp_path / "core.12345").write_bytes(b"\x7fELF\x00\x01" * 50)
    view = read_dumps(str(tmp_path))
    assert ([t.rank for t in view.traces], view.refused, view.prefix, view.ignored) == ([0, 1], (), "trace_rank_", 3)
    findings = hang_findings(view)
    assert not [f for f in findings if f.check == registry.JOB_HOSTILE]
    (judged,) = [f for f in findings if f.check == registry.JOB_HANG]
    assert judged.severity == "pass" and judged.evidence[-1].startswith(f"3 other file(s) in {tmp_path} not read")
    # A prefix given picks those files alone, as torch's analyzer's -p does.
    assert read_dumps(str(tmp_path), prefix="ready").traces == ()
