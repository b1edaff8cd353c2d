"""The bandwidth phase's pure parts: flags, sizes, budget, busbw maths, data and its check,
round-robin pairing, tables; and the node side's pure helpers (worker environment, event
lines, how a worker's end is classified, whom to blame)."""

from __future__ import annotations

import argparse
import itertools
import math
import signal
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest
import torch

from netcheck.bandwidth.faults import classify, merge_faults, nccl_warning, root_cause, silenced_by
from netcheck.bandwidth.flags import add_arguments, options_from_args, parse_size
from netcheck.bandwidth.orchestrate import Lines, worker_env
from netcheck.bandwidth.sizes import (
    BW_AUTO_MAXBYTES,
    BW_MIN_ITERS,
    Budget,
    Measured,
    pair_size,
    plan_stages,
    planned_sizes,
    round_robin,
    run_sizes,
    size_series,
    stage_budgets,
)
from netcheck.bandwidth.sweep import (
    COLLECTIVES,
    DTYPES,
    NO_CUDA,
    NO_NCCL,
    PAST_VISIBLE,
    bandwidths,
    choose_backend,
    count_wrong,
    fill,
    make_row,
    modulus,
    pattern_pieces,
    ring_sum,
    wrong,
)
from netcheck.bandwidth.worker import MAX_DETAIL, Event
from netcheck.config import check_sweep
from netcheck.core import codec
from netcheck.core.bwrecords import (
    BandwidthResult,
    Fault,
    NodeReport,
    Pair,
    Row,
    Sweep,
    SweepOptions,
    bucket_cost,
    busbw_at,
    headline,
    speedup,
    spread_of,
    still_rising,
)
from netcheck.core.bwtext import plateau_text, progress_bar, step_text
from netcheck.core.errors import UserError
from netcheck.render.tables import pair_matrix, render_text, table_rows


def parse(*argv: str) -> SweepOptions:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return options_from_args(p.parse_args(list(argv)))


# --- busbw maths ---------------------------------------------------------------------------

@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75), ("all_reduce", 1, 0.0),
    ("all_gather", 4, 0.75), ("reduce_scatter", 4, 0.75), ("alltoall", 8, 0.875),
    ("broadcast", 4, 1.0), ("sendrecv", 2, 1.0),
])
def test_busbw_factors_are_nccl_tests(op, n, factor):
    assert COLLECTIVES[op].factor(n) == pytest.approx(factor)


def test_algbw_is_bytes_over_time_and_busbw_scales_it():
    # 1 MiB all_reduce over 4 ranks in 1 ms: algbw 1.048576 GB/s, busbw x 2(n-1)/n.
    algbw, busbw = bandwidths(COLLECTIVES["all_reduce"], (1 << 20) // 4, "float32", 4, 1e-3)
    assert algbw == pytest.approx(1.048576) and busbw == pytest.approx(1.048576 * 1.5)


def test_split_collectives_count_a_chunk_and_size_the_whole():
    # nccl-tests: all_gather's count column is the per-rank chunk, its size the gathered total.
    gather = COLLECTIVES["all_gather"]
    chunk = gather.chunk(1 << 20, "float32", 4)
    assert chunk == (1 << 20) // 16 and gather.bytes(chunk, "float32", 4) == 1 << 20
    assert gather.elements(chunk, 4) == (chunk, 4 * chunk)
    assert COLLECTIVES["reduce_scatter"].elements(chunk, 4) == (4 * chunk, chunk)
    assert COLLECTIVES["alltoall"].elements(chunk, 4) == (4 * chunk, 4 * chunk)
    assert COLLECTIVES["all_reduce"].chunk(100, "float64", 4) == 12


def test_row_averages_times_across_ranks_and_sums_wrong():
    row = make_row(COLLECTIVES["all_reduce"], 1 << 18, "float32", 2, [1e-3, 3e-3], [0, 5], True, [0, 1])
    assert row.time_us == pytest.approx(2000) and row.size == 1 << 20
    assert row.algbw == pytest.approx((1 << 20) / 2e-3 / 1e9, rel=1e-5)
    assert row.wrong == 5 and row.wrong_ranks == (1,) and row.redop == "sum"
    unchecked = make_row(COLLECTIVES["broadcast"], 8, "float32", 2, [1e-3], [0], False, [0])
    assert unchecked.wrong is None and unchecked.redop == "none"


# --- flags and sizes -------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [("8", 8), ("64K", 65536), ("32M", 32 << 20), ("1G", 1 << 30),
                                        ("1g", 1 << 30), ("16MB", 16 << 20), (" 4k ", 4096)])
def test_sizes_take_nccl_tests_suffixes(text, value):
    assert parse_size("-b", text) == value


@pytest.mark.parametrize("text", ["12X", "", "0", "-1", "1.5M", "2T", "M", "99999999999999999G"])
def test_bad_sizes_name_the_flag_and_value(text):
    with pytest.raises(UserError, match=rf"^-e {text!r}: expected a byte count"):
        parse_size("-e", text)


def test_no_flags_give_the_defaults_and_flags_are_read():
    assert parse() == SweepOptions()
    o = parse("-b", "1K", "-e", "1M", "-f", "4", "-w", "0", "-n", "3", "-c", "0", "--op",
              "all_gather,alltoall", "--dtype", "half", "--backend", "gloo", "--expect-busbw", "2.5",
              "--bw-budget", "4")
    assert o == SweepOptions(1024, 1 << 20, 4, 0, 3, False, ("all_gather", "alltoall"), "float16",
                             "gloo", 2.5, 4.0, past_maxbytes=False, iters_by_time=False, few_small_sizes=False,
                             warmup_by_time=False)
    assert parse("--op", "all").op == tuple(COLLECTIVES)
    assert parse("--model-params", "7e9").model_params == 7_000_000_000
    assert parse("--model-params", "70B", "--grad-dtype", "fp32").grad_dtype == "float32"
    assert parse("--model-params", "1.5T").model_params == 1_500_000_000_000
    assert parse("-b", "1K").past_maxbytes and not parse("-e", "1G").past_maxbytes


@pytest.mark.parametrize("argv,message", [
    (["-b", "64M", "-e", "32M"], "-b 64M is above -e 32M"),
    (["-f", "1"], "-f 1: the step factor must be 2 or more"),
    (["-n", "0"], "-n 0: at least 1 timed iteration"),
    (["-w", "-1"], "-w -1: warm-up"),
    (["-c", "2"], "-c 2: 0 (no check) or 1"),
    (["--op", "allreduce"], "--op 'allreduce': one or more of all_reduce"),
    (["--dtype", "fp8"], "--dtype 'fp8': one of float32"),
    (["--backend", "cuda"], "--backend cuda: one of auto, nccl, gloo"),
    (["--expect-busbw", "nan"], "--expect-busbw nan: a number of GB/s above 0"),
    (["--expect-busbw", "0"], "--expect-busbw 0: a number of GB/s above 0"),
    (["--bw-budget", "inf"], "--bw-budget inf: 0.1 to 3600 seconds"),
    (["--model-params", "0"], "--model-params '0': expected a positive parameter count"),
    (["--model-params=-7e9"], "--model-params '-7e9': expected a positive parameter count"),
    (["--model-params", "lots"], "--model-params 'lots': expected a positive parameter count"),
    (["--model-params", "nan"], "--model-params 'nan': expected a positive parameter count"),
    (["--grad-dtype", "fp4"], "--grad-dtype 'fp4': one of float32"),
    (["--model-params", "2e15"], "--model-params '2e15': expected a positive parameter count"),
])
def test_bad_options_fail_in_one_line_naming_the_value(argv, message):
    """A value that does not parse fails in options_from_args, one out of bounds in
    config.check_sweep (a UsageError is a ValueError): one line either way."""
    with pytest.raises(UserError) as e:
        check_sweep(parse(*argv))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_without_b_and_f_the_latency_bound_sizes_are_few():
    assert planned_sizes(SweepOptions()) == [8, 64, 512, 4096, 32768] + [(64 << 10) << k for k in range(12)]
    assert planned_sizes(parse("-f", "2")) == size_series(8, 128 << 20, 2)     # nccl-tests' meaning
    assert planned_sizes(parse("-b", "1K")) == size_series(1024, 128 << 20, 2)
    assert planned_sizes(parse("-e", "32K")) == size_series(8, 32 << 10, 2)


def test_size_series_steps_like_nccl_tests():
    assert size_series(8, 128 << 20, 2) == [8 << k for k in range(25)]
    assert size_series(1 << 20, 1 << 20, 2) == [1 << 20]
    assert size_series(1024, 70000, 4) == [1024, 4096, 16384, 65536]


# --- the time budget ---------------------------------------------------------------------------

class Link:
    """A simulated group: an iteration of `size` takes latency + size / rate, and busbw
    (here simply size / time) rises toward `rate` as latency stops mattering."""

    def __init__(self, latency: float, rate: float):
        self.latency, self.rate = latency, rate
        self.ran: list[tuple[int, int]] = []     # (size, iterations)
        self.warmups: list[int] = []
        self.skipped: list[int] = []

    def measure(self, size: int, iters: int, warmup: int) -> Measured:
        seconds = self.latency + size / self.rate
        self.ran.append((size, iters))
        self.warmups.append(warmup)
        row = Row(size, size // 4, "float32", "sum", seconds * 1e6, size / seconds / 1e9, size / seconds / 1e9, 0)
        return Measured(row, seconds, seconds * (warmup + iters))

    def sweep(self, options: SweepOptions, seconds: float, top: int = 1 << 40) -> "Link":
        self.budget = Budget(seconds, 1e9)
        run_sizes(options, 4, top, self.budget, self.measure, self.skipped.append)
        return self

    def sizes(self) -> list[int]:
        return [s for s, _ in self.ran]


EXPLICIT = SweepOptions(past_maxbytes=False, iters_by_time=False, few_small_sizes=False)


def test_without_w_a_long_size_warms_up_less_and_with_w_every_size_takes_it():
    """128 MiB at 0.45 s an iteration: five warm-ups were 2.3 s of a 6 s budget, the plateau's
    last size; one sets its buffers up as well."""
    link = Link(1e-3, 0.3e9).sweep(SweepOptions(), 60.0)
    assert link.warmups[0] == 5 and link.warmups[-1] == 1 and link.sizes()[-1] >= 128 << 20
    assert set(Link(1e-3, 0.3e9).sweep(SweepOptions(warmup_by_time=False), 60.0).warmups) == {5}


def test_the_spread_is_the_interquartile_range_past_three_values_so_one_slow_batch_moves_it_not():
    assert spread_of([1.0, 1.0, 1.0, 1.0, 9.0]) == 0.0
    assert spread_of([0.9, 1.0, 1.1]) == pytest.approx(0.2)
    assert spread_of([0.8, 0.9, 1.0, 1.1, 1.2]) == pytest.approx(0.2)


def test_a_fast_link_runs_every_size():
    sizes = size_series(8, 128 << 20, 2)
    assert Link(1e-4, 10e9).sweep(EXPLICIT, 10.0).sizes() == sizes


def test_a_slow_link_stops_early_inside_the_budget():
    sizes = size_series(8, 128 << 20, 2)
    link = Link(1e-4, 2.5e6).sweep(EXPLICIT, 2.0)  # 20 Mbit/s
    assert link.budget.spent <= 2.0
    assert link.sizes() == sizes[:len(link.ran)] and 8 < len(link.ran) < len(sizes)
    assert link.sizes()[-1] <= 2.0 * 2.5e6  # nothing larger than the budget could carry
    assert link.skipped == sizes[len(link.ran):]


@pytest.mark.parametrize("latency,rate", [(0.0, 1e6), (5e-3, 1e6), (1e-4, 1e9), (2e-2, 1e5)])
@pytest.mark.parametrize("options", [EXPLICIT, SweepOptions()])
def test_the_budget_is_never_overrun_on_an_affine_link(latency, rate, options):
    # The first step always runs; from then on extrapolation overestimates an affine cost.
    link = Link(latency, rate).sweep(options, 3.0)
    first = (latency + 8 / rate) * (options.warmup_iters + options.iters)
    assert link.budget.spent <= max(3.0, first)


def test_without_n_a_long_iteration_gets_fewer_timed_ones_never_below_the_floor():
    # 100 MB/s: 4 MiB takes 0.042 s an iteration (as predicted from 2 MiB), so 0.5 s holds
    # 11; 16 MiB takes 0.17 s, 0.5 s holds 2 of them: the floor, 5.
    link = Link(1e-4, 1e8).sweep(SweepOptions(), 60.0)
    iters = dict(link.ran)
    assert iters[8] == iters[1 << 20] == 20 and iters[4 << 20] == 11
    assert iters[16 << 20] == BW_MIN_ITERS
    assert all(BW_MIN_ITERS <= i <= 20 for _, i in link.ran)
    assert Link(1e-4, 1e8).sweep(EXPLICIT, 60.0).ran[-1][1] == 20   # -n keeps its meaning


def test_the_mid_sizes_give_up_iterations_so_the_budget_reaches_the_top_sizes_the_headline_is_from():
    # 0.45 GB/s: 128 MiB takes 0.3 s an iteration. With every size's half-second of iterations
    # the 4.8 s sweep ended at 64 MiB; the mid sizes now run fewer and 128 MiB runs its least.
    link = Link(1e-4, 0.45e9).sweep(SweepOptions(past_maxbytes=False), 4.8)
    assert link.sizes()[-1] == 128 << 20 and link.budget.spent <= 4.8
    unhurried = dict(Link(1e-4, 0.45e9).sweep(SweepOptions(past_maxbytes=False), 1e6).ran)
    iters = dict(link.ran)
    assert iters[128 << 20] == BW_MIN_ITERS and iters[1 << 20] == unhurried[1 << 20], "latency-bound sizes keep theirs"
    assert [s for s, i in link.ran if i < unhurried[s]], "some mid size gave up iterations"
    # A link too slow for the top to fit at all keeps every size's counts: it ends where it ends.
    slow = Link(1e-4, 2.5e7).sweep(SweepOptions(past_maxbytes=False), 4.8)
    unhurried = Link(1e-4, 2.5e7).sweep(SweepOptions(past_maxbytes=False), 1e6).ran
    assert slow.ran == unhurried[:len(slow.ran)] and slow.sizes()[-1] < 128 << 20


@pytest.mark.parametrize("latency", [2e-3, 4e-3])
def test_a_latency_bound_start_does_not_hide_the_top_from_the_reserve(latency):
    # gloo on a busy 2-core machine: 4 ms an op below 1 MiB, 0.5 GB/s above. Scaling 512
    # bytes' 4 ms by the bytes put 128 MiB out of reach until 16 MiB, too late to keep its
    # room: the sweep ended at 64 MiB every round (RESULTS.md, 7b943a6). The reserve
    # predicts the top from a latency and a time per byte, and the cut comes in time.
    link = Link(latency, 0.5e9).sweep(SweepOptions(past_maxbytes=False), 4.8)
    assert link.sizes()[-1] == 128 << 20 and not link.skipped and link.budget.spent <= 4.8


class SlowAt(Link):
    """A link on which one size reads `factor` slow (a busy moment)."""

    def __init__(self, latency: float, rate: float, size: int, factor: float):
        super().__init__(latency, rate)
        self.slow, self.factor = size, factor

    def measure(self, size: int, iters: int, warmup: int) -> Measured:
        done = super().measure(size, iters, warmup)
        if size != self.slow:
            return done
        return Measured(done.row, done.op_seconds * self.factor, done.wall * self.factor)


@pytest.mark.parametrize("rate", [0.5e9, 0.7e9, 0.85e9])
def test_the_top_is_reached_though_the_size_below_it_reads_slow(rate):
    # 64 MiB read 30% slow against 32 and 128 MiB on a busy 2-core machine, and the linear
    # bound on 128 MiB (twice that) no longer fit what the reserve had kept (RESULTS.md).
    link = SlowAt(3e-3, rate, 64 << 20, 1.3).sweep(SweepOptions(past_maxbytes=False), 4.8)
    assert link.sizes()[-1] == 128 << 20 and link.budget.spent <= 4.8


def test_the_latency_bound_ramp_runs_its_fewest_iterations_and_the_latency_sizes_keep_theirs():
    # gloo here: 3 ms an op up to 2 MiB, 0.7 GB/s above. The ramp's 25 iterations a size
    # were the room 128 MiB lacked (RESULTS.md, b9b666f).
    link = Link(3e-3, 0.7e9).sweep(SweepOptions(past_maxbytes=False), 4.8)
    iters, warmups = dict(link.ran), dict(zip(link.sizes(), link.warmups))
    ramp = [s for s in link.sizes() if iters[s] == BW_MIN_ITERS and warmups[s] == 1 and s < 8 << 20]
    assert ramp == [128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20]
    assert all(iters[s] == 20 and warmups[s] == 5 for s in link.sizes() if s <= 64 << 10)
    assert link.sizes()[-1] == 128 << 20 and link.budget.spent <= 4.8
    # -n and -w keep their meaning on the ramp too.
    explicit = Link(3e-3, 0.7e9).sweep(SweepOptions(past_maxbytes=False, iters_by_time=False,
                                                    warmup_by_time=False), 1e6)
    assert set(explicit.warmups) == {5} and {i for _, i in explicit.ran} == {20}


@pytest.mark.parametrize("latency", [1e-5, 1e-4, 1e-3, 5e-3])
@pytest.mark.parametrize("rate", [5e7, 7e8, 1e10, 4e11])
def test_no_size_near_the_plateau_is_taken_for_the_ramp(latency, rate):
    # On an affine link a ramp size's busbw is at most about half the rate, so a size that
    # could be in the headline (within BW_PLATEAU_BAND of the top) always keeps its count.
    # (A size under 40 ms an op is predicted at under 80 ms, which by time alone runs more than
    # the fewest: 6 timed iterations or 2 warm-ups.)
    link = Link(latency, rate).sweep(SweepOptions(), 1e6)
    near = [(size, iters, warmup) for (size, iters), warmup in zip(link.ran, link.warmups)
            if size / (latency + size / rate) >= 0.6 * rate and latency + size / rate < 0.04]
    assert near, "the link reaches its plateau"
    assert all((iters, warmup) != (BW_MIN_ITERS, 1) for _, iters, warmup in near), near


def test_without_e_the_sweep_goes_on_while_busbw_rises_and_stops_at_the_plateau():
    # Latency 1 ms at 10 GB/s: at 128 MiB the latency is still 7% of an iteration, and busbw
    # rises past -e's default until a doubling gains under 5%.
    rising = Link(1e-3, 10e9).sweep(SweepOptions(), 1e6)
    assert rising.sizes()[-1] > 128 << 20, "the plateau is above -e's default: go on"
    assert rising.sizes()[-1] <= BW_AUTO_MAXBYTES
    # The last size measured gained little over the one before (the plateau), the one before did.
    rows = [s / (1e-3 + s / 10e9) for s in rising.sizes()]
    assert rows[-1] <= 1.05 * rows[-2] and rows[-2] > 1.05 * rows[-3]
    # With -e the sweep ends there, as nccl-tests does.
    assert Link(1e-3, 10e9).sweep(EXPLICIT, 1e6).sizes()[-1] == 128 << 20
    # A node's memory share caps it, and so does the budget.
    assert Link(1e-3, 10e9).sweep(SweepOptions(), 1e6, top=256 << 20).sizes()[-1] == 256 << 20
    assert Link(1e-3, 10e9).sweep(SweepOptions(), 1.0).sizes()[-1] < 256 << 20


def test_at_the_plateau_by_128m_the_sweep_ends_there():
    assert Link(1e-5, 1e9).sweep(SweepOptions(), 1e6).sizes()[-1] == 128 << 20


def test_budget_shares_and_pair_size():
    assert stage_budgets(10.0, 3, True) == pytest.approx((8.0 / 3, 2.0))   # the pairs a fifth
    assert stage_budgets(10.0, 1, False) == (10.0, 0.0)
    sizes = size_series(1024, 64 << 20, 2)
    # 25 transfers of S at 2.5 MB/s in 1 s: S <= 100 kB, so 64 KiB.
    assert pair_size(sizes, 2.5e6, 1.0, 25) == 65536
    assert pair_size(sizes, 1e12, 1.0, 25) == 64 << 20
    assert pair_size(sizes, 0.0, 1.0, 25) == 1024


@pytest.mark.parametrize("nnodes,nproc,stages", [
    (1, 1, ("all",)), (3, 1, ("all",)), (1, 8, ("all",)), (2, 2, ("all", "intra", "inter")),
])
def test_intra_and_inter_sweeps_only_when_both_exist(nnodes, nproc, stages):
    assert plan_stages(nnodes, nproc) == stages


# --- round-robin pairing -------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(2, 12))
def test_round_robin_meets_every_pair_once(n):
    rounds = round_robin(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes)), "a node twice in one round"
        assert len(r) == n // 2, "odd n: exactly one node rests (the bye) per round"


def test_round_robin_of_one_node_is_empty():
    assert round_robin(1) == []


# --- data with one correct answer, and the checker ------------------------------------------------

@pytest.mark.parametrize("n,m", [(1, 5), (3, 5), (5, 5), (7, 5), (13, 4), (4, 1 << 20), (2, 1)])
def test_ring_sum_closed_form_matches_brute_force(n, m):
    x = torch.arange(0, 3 * m + 7, dtype=torch.int64)
    brute = sum((x + r) % m for r in range(n))
    assert torch.equal(ring_sum(x, n, m), brute)
    assert ring_sum(11, n, m) == sum((11 + r) % m for r in range(n))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", [1, 2, 4, 64, 1000])
def test_sums_stay_exact_in_every_type(dtype, n):
    m = modulus(dtype, n, reduces=True)
    assert n * (m - 1) <= DTYPES[dtype][1]


def reference(op: str, inputs: list[torch.Tensor], chunk: int) -> list[torch.Tensor]:
    """What each rank must receive, straight from the collective's definition."""
    n = len(inputs)
    total = inputs[0].clone()
    for t in inputs[1:]:
        total += t  # in the type, as the backend adds
    return {
        "all_reduce": lambda: [total.clone() for _ in range(n)],
        "all_gather": lambda: [torch.cat(inputs) for _ in range(n)],
        "reduce_scatter": lambda: [total[r * chunk:(r + 1) * chunk] for r in range(n)],
        "alltoall": lambda: [torch.cat([inputs[s][r * chunk:(r + 1) * chunk] for s in range(n)])
                             for r in range(n)],
        "broadcast": lambda: [inputs[0].clone() for _ in range(n)],
        "sendrecv": lambda: [inputs[(r - 1) % n].clone() for r in range(n)],
    }[op]()


def simulate(op: str, n: int, chunk: int, dtype: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(what each rank receives, what the checker expects) for a simulated run."""
    coll = COLLECTIVES[op]
    m = modulus(dtype, n, coll.reduces)
    tdtype = getattr(torch, dtype)
    n_in, n_out = coll.elements(chunk, n)
    inputs = [coll.inputs(torch.arange(n_in), r, n, chunk, m).to(tdtype) for r in range(n)]
    expected = [coll.expected(torch.arange(n_out), r, n, chunk, m).to(tdtype) for r in range(n)]
    return reference(op, inputs, chunk), expected


@pytest.mark.parametrize("op", list(COLLECTIVES))
@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "uint8"])
def test_expected_results_match_the_collectives_definition(op, n, dtype):
    received, expected = simulate(op, n, 37, dtype)
    assert [count_wrong(got, want) for got, want in zip(received, expected)] == [0] * n


@pytest.mark.parametrize("op", list(COLLECTIVES))
def test_checker_counts_a_corrupted_element(op):
    received, expected = simulate(op, 4, 37, "float32")
    received[2][17] += 1
    assert [count_wrong(got, want) for got, want in zip(received, expected)] == [0, 0, 1, 0]


@pytest.mark.parametrize("op", ["all_gather", "alltoall"])
def test_checker_catches_chunks_from_the_wrong_rank(op):
    # Every rank's data differs, so chunks delivered in the wrong places are wrong throughout.
    received, expected = simulate(op, 4, 37, "float32")
    got = received[2]
    got[:37], got[37:74] = got[37:74].clone(), got[:37].clone()
    assert count_wrong(got, expected[2]) == 74


def test_checker_catches_sendrecv_from_the_wrong_peer():
    received, expected = simulate("sendrecv", 4, 37, "float32")
    assert count_wrong(received[2], expected[3]) == 37


@pytest.mark.parametrize("op", list(COLLECTIVES))
@pytest.mark.parametrize("chunk", [37, 1000])
def test_values_said_to_repeat_every_m_elements_do(op, chunk):
    """The check computes a period's values once and compares every period with them."""
    coll, n = COLLECTIVES[op], 3
    m = modulus("uint8", n, coll.reduces)       # 85 or 255: many periods in a small buffer
    index = torch.arange(5 * m + 3)
    for r in range(n):
        assert torch.equal(coll.inputs(index, r, n, chunk, m), coll.inputs(index % m, r, n, chunk, m))
        if coll.periodic:
            assert torch.equal(coll.expected(index, r, n, chunk, m), coll.expected(index % m, r, n, chunk, m))


@pytest.mark.parametrize("numel,period,piece", [(10, 3, 2), (10, 10, 4), (10, 20, 4), (7, 1, 5), (1, 5, 5),
                                                (100, 7, 3)])
def test_pattern_pieces_cover_every_element_once_at_its_place_in_the_period(numel, period, piece):
    seen = []
    for lo, hi, starts in pattern_pieces(numel, period, piece):
        assert hi - lo <= piece
        seen += [(start + k, lo + k) for start in starts for k in range(hi - lo) if start + k < numel]
    assert sorted(seen) == [(i, i % min(period, numel)) for i in range(numel)]


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_the_checker_counts_wrong_elements_in_every_period(op):
    coll, n, chunk, r = COLLECTIVES[op], 3, 5000, 1
    m = modulus("float16", n, coll.reduces)   # 682 or 2048: periods of a small buffer
    got = torch.zeros(coll.elements(chunk, n)[1], dtype=torch.float16)
    period = m if coll.periodic else got.numel()
    fill(torch, got, lambda i: coll.expected(i, r, n, chunk, m), period)
    assert torch.equal(got, coll.expected(torch.arange(got.numel()), r, n, chunk, m).to(torch.float16))
    assert wrong(torch, got, lambda i: coll.expected(i, r, n, chunk, m), period) == 0
    got[[0, m - 1, m, 3 * m + 5, got.numel() - 1]] += 1
    assert wrong(torch, got, lambda i: coll.expected(i, r, n, chunk, m), period) == 5


def test_checker_counts_nan_as_wrong():
    assert count_wrong(torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([1.0, 2.0, 3.0])) == 1


# --- backend choice ---------------------------------------------------------------------------------

def test_backend_is_nccl_only_when_every_rank_has_cuda():
    assert choose_backend("auto", [0] * 4, 2) == ("nccl", "CUDA on every rank: using nccl")
    assert choose_backend("auto", [NO_CUDA] * 4, 2) == ("gloo", "no CUDA: using gloo")
    assert choose_backend("auto", [0, 0, NO_CUDA, NO_CUDA], 2) == \
        ("gloo", "no CUDA on node 1 (rank 2, 3): using gloo")
    assert choose_backend("gloo", [0] * 2, 1) == ("gloo", "--backend gloo")


def test_the_reason_names_which_ranks_cannot_run_nccl_and_why():
    # Slurm --gres=gpu:2 on a node where netcheck started 4 ranks; another node's torch has no NCCL.
    troubles = [0, 0, PAST_VISIBLE, PAST_VISIBLE, NO_NCCL, NO_NCCL, NO_NCCL, NO_NCCL]
    assert choose_backend("auto", troubles, 4) == (
        "gloo", "torch without NCCL on node 1 (rank 4, 5, 6, 7); local rank beyond the visible GPUs "
                "on node 0 (rank 2, 3): using gloo")


def test_nccl_asked_for_without_cuda_names_the_node():
    with pytest.raises(ValueError, match=r"--backend nccl, but no CUDA on node 1 \(rank 3\)"):
        choose_backend("nccl", [0, 0, 0, NO_CUDA], 2)


# --- tables -------------------------------------------------------------------------------------------

def sample_result() -> BandwidthResult:
    coll = COLLECTIVES["all_reduce"]
    rows = tuple(make_row(coll, s // 4, "float32", 4, [s / 1e9], [0, 0, 0, 0], True, [0, 1, 2, 3])
                 for s in (1024, 2048))
    return BandwidthResult("gloo", "no CUDA: using gloo", 2, 2,
                           (Sweep("all", "all_reduce", 4, 1, rows, skipped=(4096,)),
                            Sweep("intra", "all_reduce", 2, 2, rows[:1]), Sweep("inter", "all_reduce", 2, 1, rows)),
                           (Pair(0, 1, 1024, 10.0, 0.1024),), None, "", (), 1.0, {"0": "node0", "1": "node1"})


def test_table_has_nccl_tests_columns_and_the_average_line():
    result = sample_result()
    # 1024 B in 1.024 us: algbw 1 GB/s, busbw 1.5 over 4 ranks.
    assert table_rows(result.sweeps[0])[0] == (1024, 256, "float32", "sum", "1.0", "1.00", "1.50", 0, "0%")
    text = render_text(result)
    assert "size    count    type     redop    time (us)    algbw (GB/s)    busbw (GB/s)    #wrong    spread" in text
    assert "# Avg bus bandwidth : 1.5 GB/s (nccl-tests' mean over every size)" in text
    assert "# skipped to stay inside --bw-budget: 4 KiB" in text
    assert "intra busbw    inter busbw" in text
    assert "node0   -        0.102" in text and "node1   0.102    -" in text


def test_a_sweep_with_a_headline_says_its_plateau_and_latency():
    result = sample_result()
    heads = tuple(headline(s, SweepOptions(), 2, 2) for s in result.sweeps)
    text = render_text(replace(result, headlines=heads))
    assert ("# Plateau           : 1.5 GB/s at 1 KiB-2 KiB (the largest 3 sizes and those next to them "
            "within 10%: their median and range)") in text
    assert "# Latency           : 1.02 us per op at 1 KiB" in text


def test_unchecked_rows_say_n_a():
    rows = (make_row(COLLECTIVES["broadcast"], 8, "int8", 2, [1e-5], [0], False, [0]),)
    assert table_rows(Sweep("all", "broadcast", 2, 1, rows))[0][7] == "N/A"


def test_result_survives_the_json_codec():
    result = sample_result()
    assert codec.loads(BandwidthResult, codec.dumps(result), 1 << 20) == result
    event = Event("sweep", "all", sweep=result.sweeps[0])
    assert codec.loads(Event, codec.dumps(event), 1 << 20) == event


def test_progress_bar_shows_the_budget_spent():
    assert progress_bar(0, 10) == "[--------------------] 0/10 s"
    assert progress_bar(2.5, 10, width=8) == "[##------] 2/10 s"
    assert progress_bar(14, 10, width=4) == "[####] 14/10 s", "past the budget: full, and the real time"


def test_pair_matrix_is_symmetric():
    text = pair_matrix((Pair(0, 1, 8, 1.0, 2.0), Pair(0, 2, 8, 1.0, 0.5), Pair(1, 2, 8, 1.0, 0.25)), str)
    lines = text.splitlines()
    assert lines[2].split() == ["0", "-", "2.00", "0.500"]
    assert lines[4].split() == ["2", "0.500", "0.250", "-"]


# --- node side: environment, event lines, endings, blame ----------------------------------------------

def test_workers_get_torchrun_variables():
    env = worker_env({"PATH": "/bin", "RANK": "9"}, "node0", 29500, node_rank=1, nnodes=3, nproc=4,
                     local_rank=2)
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
        "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    assert env["PATH"] == "/bin" and env["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in worker_env({}, "h", 1, 0, 1, 1, 0)
    assert worker_env({"OMP_NUM_THREADS": "8"}, "h", 1, 0, 1, 2, 0)["OMP_NUM_THREADS"] == "8"
    assert env["NCCL_DEBUG"] == "WARN"
    assert worker_env({"NCCL_DEBUG": "INFO"}, "h", 1, 0, 1, 1, 0)["NCCL_DEBUG"] == "INFO"


def test_event_lines_are_split_and_overlong_ones_dropped():
    lines = Lines(limit=10)
    assert lines.feed(b'{"a"') == [] and lines.feed(b':1}\n{"b":2}\npart') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b"x" * 20) == [] and lines.feed(b"tail\nok\n") == [b"ok"]


@pytest.mark.parametrize("fate,rc,failure,done,kind", [
    ("", 0, "", True, None),
    ("stopped", -9, "", False, None),
    ("", -signal.SIGKILL, "", False, "died"),
    ("", 1, "", False, "died"),
    ("", 1, "RuntimeError: Connection closed by peer", False, "failed"),
    ("stuck", -9, "", False, "stuck"),
    ("timeout", -9, "", False, "timeout"),
])
def test_a_workers_end_is_classified(fate, rc, failure, done, kind):
    verdict = classify(fate, rc, failure, done, "all", ["warning: something", "Traceback: MemoryError"])
    assert (verdict and verdict[0]) == kind
    if kind == "died" and rc < 0:
        assert verdict[1] == "killed by SIGKILL in stage all"
    if kind == "died" and rc > 0:
        assert verdict[1].endswith("status 1 in stage all: Traceback: MemoryError")


# What NCCL 2.28.9 printed with NCCL_DEBUG=WARN for two netcheck nodes on one H200
# (benchmarks/device_h200.sh, step 3), and the exception torch raised for it.
NCCL_DUPLICATE_GPU = ("vm:1163:1163 [0] init.cc:470 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on "
                      "CUDA device 6000")
NCCL_INVALID_USAGE = ("DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, "
                      "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9")


def test_a_failure_carries_nccls_own_warning():
    tail = ["vm:1163:1163 [0] NCCL INFO cudaDriverVersion 13000", NCCL_DUPLICATE_GPU, "Traceback (most recent call):"]
    kind, detail = classify("", 1, NCCL_INVALID_USAGE, False, "data", tail)
    assert kind == "failed"
    assert detail == f"{NCCL_INVALID_USAGE}; NCCL WARN {NCCL_DUPLICATE_GPU.split(' NCCL WARN ')[1]}"
    assert classify("", 1, NCCL_INVALID_USAGE, False, "data", tail[:1]) == ("failed", NCCL_INVALID_USAGE)
    assert nccl_warning(["x NCCL WARN " + "y" * 1000]) == "y" * MAX_DETAIL


def test_a_dead_rank_is_blamed_before_the_peers_it_broke():
    faults = [Fault(0, 0, 0, "all", "failed", "Connection closed by peer"),
              Fault(1, 3, 1, "all", "died", "killed by SIGKILL in stage all"),
              Fault(1, 2, 0, "all", "timeout", "still in stage all")]
    assert root_cause(faults) == ("all", "rank 3 (node 1, local rank 1): killed by SIGKILL in stage all")
    assert root_cause([faults[0], faults[2]])[1].startswith("rank 0 (node 0")
    assert root_cause([]) == (None, "")


def test_nodes_that_never_report_are_named_and_speak_only_for_themselves():
    lie = Fault(0, 0, 0, "all", "died", "node 1 says node 0 died")
    reports = {1: NodeReport(1, (lie, Fault(1, 1, 0, "data", "failed", "nccl")), "gloo", "")}
    merged = merge_faults([], reports, me=0, nnodes=3, stage="inter", store_lost=None)
    assert [(f.node, f.kind) for f in merged] == [(1, "failed"), (2, "silent")]
    assert merged[1].stage == "inter", "where this node's own workers were when node 2 went quiet"
    assert merged[1].detail.startswith("node 2 sent no account of its workers")


def test_a_host_whose_link_went_down_names_itself_for_its_joiners_silence():
    faults = (Fault(1, -1, -1, "all", "silent", "node 1 sent no account"),
              Fault(2, -1, -1, "all", "silent", "node 2 sent no account"), Fault(0, 0, 0, "all", "timeout", "t"))
    kept = silenced_by(faults, 0, "this node's link (eth0) went down")
    assert [(f.node, f.kind) for f in kept] == [(0, "timeout"), (0, "silent")]
    assert kept[1].stage == "all" and kept[1].detail.startswith("this node's link (eth0) went down")
    assert silenced_by(faults[2:], 0, "x") == faults[2:]


def test_a_node_that_lost_the_store_names_the_host_alone_for_the_silence():
    """The others' accounts never came because this node lost the host's store: nothing is
    known of them, so none is named; the store's node is, with why."""
    for me in (0, 2):
        merged = merge_faults([], {}, me=me, nnodes=3, stage="control", store_lost="no answer to add k")
        assert [(f.node, f.kind) for f in merged] == [(0, "silent")]
        assert "no answer to add k" in merged[0].detail


# A worker that could not notice on its own (it never writes, as one wedged in a call
# holding the GIL), whose parent is SIGKILLed so that no clean-up of the parent runs.
ORPHAN = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import os, time; from netcheck.bandwidth.worker import "
                          "_die_with_parent; _die_with_parent(os.getppid()); print('ready', flush=True); "
                          "time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_worker_dies_with_its_sigkilled_parent():
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert parent.stdout.readline().strip() == "ready"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    until = time.monotonic() + 5
    while child.is_running() and child.status() != psutil.STATUS_ZOMBIE and time.monotonic() < until:
        time.sleep(0.05)
    alive = child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    if alive:
        child.kill()
    assert not alive, "the worker outlived its parent"


def test_a_node_that_went_silent_is_blamed_before_the_ranks_whose_reads_from_it_failed():
    faults = [Fault(0, 0, 0, "all", "failed", "Read error [198.18.0.11]: Connection reset by peer"),
              Fault(1, -1, -1, "all", "silent", "node 1 sent no account of its workers")]
    assert root_cause(faults) == ("all", "node 1: node 1 sent no account of its workers")


# --- the headline -----------------------------------------------------------------------------

def swept(busbws: dict[int, float], stage: str = "all", ranks: int = 3) -> Sweep:
    rows = tuple(Row(size, size // 4, "float32", "sum", 10.0 + size / 1e3, b / 1.5, b, 0) for size, b in busbws.items())
    return Sweep(stage, "all_reduce", ranks, 1, rows)


def test_the_plateau_is_the_large_message_end_and_latency_the_small_sizes():
    sweep = swept({8: 0.001, 64 << 10: 0.1, 1 << 20: 0.5, 32 << 20: 0.86, 64 << 20: 0.88, 128 << 20: 0.84})
    h = headline(sweep, SweepOptions(), 2, 3)
    assert (h.plateau_from, h.plateau_to) == (32 << 20, 128 << 20)
    assert h.plateau_busbw == 0.86, "the median of the plateau's sizes"
    assert (h.plateau_low, h.plateau_high) == (0.84, 0.88) and not h.noisy and not h.rising
    assert (h.latency_from_us, h.latency_to_us, h.latency_sizes) == (10.008, 10.0 + 65.536, (8, 64 << 10))
    assert h.step_s is None and h.gradient_bytes is None
    assert headline(Sweep("all", "all_reduce", 3, 1), SweepOptions(), 2, 3) is None


@pytest.mark.parametrize("busbws,plateau,sizes", [
    # make demo on a busy machine: a hump at 2 MiB over a lower large-message end
    ({1 << 20: 0.25, 2 << 20: 0.322, 4 << 20: 0.189, 8 << 20: 0.178, 16 << 20: 0.208}, 0.189, (4 << 20, 16 << 20)),
    ({2 << 20: 0.4, 4 << 20: 0.54, 8 << 20: 0.38, 16 << 20: 0.38, 32 << 20: 0.31}, 0.38, (8 << 20, 32 << 20)),
    # one lucky size among the largest: the median of them, not the spike
    ({16 << 20: 0.74, 32 << 20: 0.75, 64 << 20: 1.01, 128 << 20: 0.78}, 0.765, (16 << 20, 128 << 20)),
    # sizes next to the largest ones within the band join the plateau
    ({4 << 20: 0.5, 8 << 20: 0.83, 16 << 20: 0.85, 32 << 20: 0.86, 64 << 20: 0.86, 128 << 20: 0.84},
     0.85, (8 << 20, 128 << 20)),
])
def test_a_hump_or_a_lucky_size_never_becomes_the_headline(busbws, plateau, sizes):
    h = headline(swept(busbws), SweepOptions(), 2, 3)
    assert (h.plateau_busbw, (h.plateau_from, h.plateau_to)) == (plateau, sizes)
    assert h.plateau_high <= max(busbws.values())


def test_a_plateau_whose_sizes_or_batches_disagree_is_noisy_and_one_still_rising_is_a_floor():
    wide = headline(swept({32 << 20: 0.5, 64 << 20: 1.0, 128 << 20: 0.7}), SweepOptions(), 2, 3)
    assert wide.noisy and wide.spread == pytest.approx(0.5 / 0.7, abs=1e-4)
    batches = tuple(replace(r, spread=0.4) for r in swept({32 << 20: 0.86, 64 << 20: 0.86, 128 << 20: 0.86}).rows)
    assert headline(Sweep("all", "all_reduce", 3, 1, batches), SweepOptions(), 2, 3).noisy
    rising = headline(swept({16 << 20: 0.2, 32 << 20: 0.3, 64 << 20: 0.5, 128 << 20: 0.7}), SweepOptions(), 2, 3)
    assert rising.rising and (rising.plateau_busbw, rising.plateau_from, rising.plateau_high) == (0.5, 32 << 20, 0.7)


def test_a_rise_is_headlined_by_the_top_sizes_median_never_the_top_size_alone():
    """Measured (RESULTS.md, issue 33, 2026-12-05): 32, 64 and 128 MiB read 0.683, 0.735 and
    0.876, two gains in a row, and 128 MiB alone made a headline 15% above a bare loop's, whose
    own 64 and 128 MiB read 0.684 and 0.859 and, over 40 s each, 0.836 and 0.849."""
    h = headline(swept({16 << 20: 0.607, 32 << 20: 0.683, 64 << 20: 0.735, 128 << 20: 0.876}), SweepOptions(), 2, 3)
    assert h.rising and h.plateau_busbw == 0.735 and (h.plateau_from, h.plateau_to) == (32 << 20, 128 << 20)
    assert "still rising at the largest size (a floor)" in plateau_text(h)


def test_one_lucky_top_size_on_a_flat_curve_is_not_a_rise():
    """Measured (RESULTS.md, issue 33): 128 MiB read 8-15% above 16-64 MiB in one round of three
    while the bare loop beside it read flat; as "still rising" it became the headline alone."""
    lucky = {16 << 20: 0.80, 32 << 20: 0.84, 64 << 20: 0.83, 128 << 20: 0.95}
    h = headline(swept(lucky), SweepOptions(), 2, 3)
    assert not h.rising and h.plateau_busbw == pytest.approx(0.835) and h.plateau_from == 16 << 20
    assert not still_rising(swept(lucky).rows)
    assert still_rising(swept({32 << 20: 0.80, 64 << 20: 0.84, 128 << 20: 0.95}).rows), "two gains: a trend"


def test_busbw_at_a_size_is_interpolated_on_a_log_axis_never_the_peak():
    rows = swept({16 << 20: 0.8, 32 << 20: 1.0, 64 << 20: 0.9, 128 << 20: 0.9}).rows
    assert busbw_at(rows, 16 << 20) == 0.8
    assert busbw_at(rows, 24 << 20) == pytest.approx(0.8 + 0.2 * math.log2(1.5))
    assert busbw_at(rows, 1 << 30) == 0.9, "past the largest size: the plateau's"
    assert busbw_at(rows, 1 << 20) == 0.8, "below the smallest: the smallest's"


def test_a_gradient_costs_its_buckets_each_at_the_busbw_of_its_size():
    # A 7e9-parameter bf16 gradient is 14 GB: 534 buckets of 25 MiB and one of 1,510,400 B.
    rows = swept({1 << 20: 0.5, 2 << 20: 0.6, 16 << 20: 0.8, 32 << 20: 0.9, 64 << 20: 0.87}).rows
    bucket, rest = 25 << 20, 14 * 10 ** 9 - 534 * (25 << 20)
    expected = (534 * 2 * bucket * 2 / 3 / (busbw_at(rows, bucket) * 1e9)
                + 2 * rest * 2 / 3 / (busbw_at(rows, rest) * 1e9))
    assert bucket_cost(14 * 10 ** 9, bucket, rows, 3) == pytest.approx(expected)
    h = headline(Sweep("all", "all_reduce", 3, 1, rows), SweepOptions(model_params=7 * 10 ** 9), 2, 3)
    assert (h.model_params, h.grad_dtype, h.gradient_bytes, h.bucket_bytes) == (7 * 10 ** 9, "bfloat16",
                                                                                 14 * 10 ** 9, bucket)
    assert h.step_s == pytest.approx(expected, rel=1e-6)
    assert h.bucket_busbw == pytest.approx(0.8 + 0.1 * math.log2(25 / 16), abs=1e-6)
    # Other collectives do not stand for a gradient's all_reduce.
    assert headline(Sweep("all", "all_gather", 3, 1, rows), SweepOptions(model_params=7 * 10 ** 9), 2, 3).step_s is None


@pytest.mark.parametrize("nodes,c,m,low,high", [
    (3, 2.0, 1.0, 2.0, 3.0),     # 3*2/(2+1), 3*2/max(2,1)
    (3, 1.0, 2.0, 1.0, 1.5),
    (4, 1.0, 9.0, 0.4, 4 / 9),   # slower than one node either way
])
def test_the_speedup_of_n_nodes_lies_between_no_overlap_and_full_overlap(nodes, c, m, low, high):
    assert speedup(nodes, c, m) == pytest.approx((low, high))


def test_step_time_gives_the_all_rank_sweep_its_speedup_in_words():
    rows = swept({16 << 20: 0.9, 32 << 20: 0.9, 64 << 20: 0.9}).rows
    options = SweepOptions(model_params=7 * 10 ** 9, step_time_s=20.0)
    h = headline(Sweep("all", "all_reduce", 3, 1, rows), options, 2, 3)
    m = bucket_cost(14 * 10 ** 9, 25 << 20, rows, 3)
    assert (h.speedup_low, h.speedup_high) == pytest.approx((3 * 20 / (20 + m), 3 * 20 / max(20, m)), abs=1e-4)
    line = step_text(h, 3, 1)
    assert line.startswith("a 7e9-parameter bfloat16 gradient (14 GB) in 25 MiB buckets: ")
    assert "s of all_reduce per step across 3 node(s) (0.9 GB/s at 25 MiB)" in line
    assert line.endswith(f"with a 20 s step on one node, 3 nodes would train {h.speedup_low:.3g}-"
                         f"{h.speedup_high:.3g}x faster than one")
    slow = headline(Sweep("all", "all_reduce", 3, 1, rows), replace(options, step_time_s=1.0), 2, 3)
    assert "3 nodes would train slower than one: talk less" in step_text(slow, 3, 1)
