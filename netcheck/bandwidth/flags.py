"""The bandwidth phase's flags, nccl-tests' names and meaning (-b -e -f -n -w -c, --op, --dtype,
--backend, --expect-busbw, --bw-budget, --model-params ...): added to a parser and parsed into
SweepOptions. A value that does not parse fails here in one line (a UserError); what the values may be
(bounds, combinations) is config.check_sweep's to say."""

from __future__ import annotations

import argparse
import math
import re
from typing import TypeVar

from netcheck.bandwidth.sweep import COLLECTIVES, DTYPES
from netcheck.core.bwrecords import SweepOptions
from netcheck.core.constants import (
    BW_DEFAULT_BUDGET,
    BW_DEFAULT_ITERS,
    BW_DEFAULT_MAXBYTES,
    BW_DEFAULT_MINBYTES,
    BW_DEFAULT_STEPFACTOR,
    BW_DEFAULT_WARMUP,
    BW_MAX_BYTES,
    DDP_BUCKET_BYTES,
)
from netcheck.core.errors import UserError

MAX_MODEL_PARAMS = 10 ** 15  # --model-params above this is a typo, not a model

BACKENDS = ("auto", "nccl", "gloo")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}   # nccl-tests' parsesize: powers of 1024

T = TypeVar("T")

DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "int": "int32",
                 "char": "int8", "bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "fp64": "float64"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bandwidth flags, on an argparse parser (values are checked by options_from_args)."""
    g = parser.add_argument_group("bandwidth", "nccl-tests' flags, with nccl-tests' meaning")
    g.add_argument("-b", "--minbytes", metavar="SIZE",
                   help=f"smallest size, bytes; K/M/G suffixes (default {size_text(BW_DEFAULT_MINBYTES)})")
    g.add_argument("-e", "--maxbytes", metavar="SIZE", help="largest size (default "
                   f"{size_text(BW_DEFAULT_MAXBYTES)}; sizes that would overrun --bw-budget are skipped)")
    g.add_argument("-f", "--stepfactor", type=int, metavar="F",
                   help=f"multiply the size by F each step (default {BW_DEFAULT_STEPFACTOR})")
    g.add_argument("-w", "--warmup_iters", type=int, metavar="N",
                   help=f"untimed iterations per size (default {BW_DEFAULT_WARMUP})")
    g.add_argument("-n", "--iters", type=int, metavar="N",
                   help=f"timed iterations per size (default {BW_DEFAULT_ITERS})")
    g.add_argument("-c", "--check", type=int, metavar="0|1",
                   help="verify results and count wrong elements (default 1)")
    g.add_argument("--op", metavar="OP[,OP]", help=f"collectives: {', '.join(COLLECTIVES)}, "
                   "or all (default all_reduce)")
    g.add_argument("--dtype", metavar="TYPE", help=f"element type: {', '.join(DTYPES)} (default float32)")
    g.add_argument("--backend", metavar="auto|nccl|gloo",
                   help="auto: nccl when every rank has a CUDA device, else gloo (default auto)")
    g.add_argument("--expect-busbw", type=float, metavar="GBPS",
                   help="fail bw.busbw when the all-rank plateau's busbw (its headline) is below this many GB/s")
    g.add_argument("--model-params", metavar="N",
                   help="a model's parameter count (7e9, 70B): the seconds of all_reduce its gradient "
                   "costs per training step, in DDP's buckets, at the busbw measured at the bucket size")
    g.add_argument("--grad-dtype", metavar="TYPE",
                   help="the gradient's element type for --model-params (default bfloat16)")
    g.add_argument("--bucket-mb", type=float, metavar="MB",
                   help="DDP's bucket_cap_mb for --model-params: the gradient is all-reduced in buckets "
                   f"of this many MiB (default {DDP_BUCKET_BYTES >> 20}, DDP's)")
    g.add_argument("--step-time", type=float, metavar="S",
                   help="with --model-params: one training step's seconds on a single node (same "
                   "per-node batch); says how much faster these nodes would train than one")
    g.add_argument("--bw-budget", type=float, metavar="S",
                   help="seconds the timed sweeps and pair rounds may take together, counted once "
                   "every worker is up; worker start-up (importing torch, joining the process "
                   f"groups: a few seconds) comes before it (default {BW_DEFAULT_BUDGET:g})")


def options_from_args(args: argparse.Namespace) -> SweepOptions:
    """SweepOptions from parsed flags; UserError with one line naming a value that does not
    parse. What the values may be is config.check_sweep's to say."""
    d = SweepOptions()
    if args.check not in (None, 0, 1):
        raise UserError(f"-c {args.check}: 0 (no check) or 1 (check)")
    return SweepOptions(
        minbytes=parse_size("-b", args.minbytes) if args.minbytes is not None else d.minbytes,
        maxbytes=parse_size("-e", args.maxbytes) if args.maxbytes is not None else d.maxbytes,
        stepfactor=_pick(args.stepfactor, d.stepfactor),
        warmup_iters=_pick(args.warmup_iters, d.warmup_iters),
        iters=_pick(args.iters, d.iters), check=bool(_pick(args.check, 1)), warmup_by_time=args.warmup_iters is None,
        op=parse_ops(args.op) if args.op is not None else d.op,
        dtype=parse_dtype(args.dtype) if args.dtype is not None else d.dtype,
        backend=_pick(args.backend, d.backend), expect_busbw=args.expect_busbw,
        budget_s=_pick(args.bw_budget, d.budget_s),
        past_maxbytes=args.maxbytes is None, iters_by_time=args.iters is None,
        few_small_sizes=args.minbytes is None and args.stepfactor is None,
        model_params=parse_count("--model-params", args.model_params) if args.model_params is not None else None,
        grad_dtype=parse_dtype(args.grad_dtype, "--grad-dtype") if args.grad_dtype is not None else d.grad_dtype,
        bucket_bytes=parse_bucket(args.bucket_mb) if args.bucket_mb is not None else d.bucket_bytes,
        step_time_s=args.step_time)


def _pick(value: T | None, default: T) -> T:
    return default if value is None else value


def parse_bucket(mib: float) -> int:
    """--bucket-mb, in MiB as DDP's bucket_cap_mb counts them -> bytes."""
    if not (math.isfinite(mib) and 1 <= mib * (1 << 20) <= BW_MAX_BYTES):
        raise UserError(f"--bucket-mb {mib:g}: a bucket of more than 0 MiB, as DDP's bucket_cap_mb (25 by default)")
    return round(mib * (1 << 20))


def parse_size(flag: str, text: str) -> int:
    """'8', '64K', '32M', '1G' (powers of 1024, as nccl-tests reads them) -> bytes."""
    match = re.fullmatch(r"\s*(\d{1,16})\s*([KMG]?)B?\s*", str(text), re.IGNORECASE)
    value = int(match[1]) * UNITS[match[2].upper()] if match else 0
    if not match or not 1 <= value <= BW_MAX_BYTES:
        raise UserError(f"{flag} {text!r}: expected a byte count from 1 to "
                         f"{size_text(BW_MAX_BYTES)}, such as 8, 64K, 32M or 1G")
    return value


def parse_ops(text: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return tuple(COLLECTIVES)
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown or not names:
        raise UserError(f"--op {text!r}: one or more of {', '.join(COLLECTIVES)}, or all")
    return tuple(dict.fromkeys(names))


def parse_dtype(text: str, flag: str = "--dtype") -> str:
    name = DTYPE_ALIASES.get(text.strip().lower(), text.strip().lower())
    if name not in DTYPES:
        raise UserError(f"{flag} {text!r}: one of {', '.join(DTYPES)}")
    return name


COUNT_UNITS = {"": 1, "K": 10 ** 3, "M": 10 ** 6, "B": 10 ** 9, "G": 10 ** 9, "T": 10 ** 12}


def parse_count(flag: str, text: str) -> int:
    """'7e9', '7000000000', '70B', '1.5T' (powers of 1000, as model sizes are named) -> a
    positive whole count, at most MAX_MODEL_PARAMS."""
    match = re.fullmatch(r"\s*(\d{1,16}(?:\.\d{1,6})?(?:e\d{1,2})?)\s*([KMBGT]?)\s*", str(text), re.IGNORECASE)
    value = float(match[1]) * COUNT_UNITS[match[2].upper()] if match else 0.0
    if not match or not 1 <= value <= MAX_MODEL_PARAMS:
        raise UserError(f"{flag} {text!r}: expected a positive parameter count such as 7e9, 70B or 1.5T")
    return round(value)


def size_text(n: int) -> str:
    """A size as -b and -e take it: `64K`, `128M`, `1000`."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


