"""Every sub-command's settings: one frozen record each, built from the parsed command line and
the environment and checked here, once (`settings`); the modules that run them take checked values.

Messages carry the offending values, so a user-caused error reads as one clear line (a
UsageError: cli says it and exits 64).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from netcheck.bandwidth import flags
from netcheck.bandwidth.flags import BACKENDS, size_text
from netcheck.core import codec
from netcheck.core.budget import PHASE_SECONDS, REPORT_RESERVE, WAITING_PHASES, minimum_timeout
from netcheck.core.bwrecords import SweepOptions
from netcheck.core.constants import (
    DEFAULT_PORT,
    FOUNDATION_PHASES,
    MAX_BASELINE_BYTES,
    MAX_NODES,
    MAX_RANKS,
    PHASES,
    REPORT_SCHEMA,
)
from netcheck.core.errors import UserError
from netcheck.core.fields import MAX_PROCS_PER_NODE, MAX_RUN_ID_CHARS, MAX_SECONDS, is_run_id
from netcheck.core.model import Endpoint, Launch, Report, is_torchrun_worker
from netcheck.facts.launcher import default_run_id, detect_launch, int_var, parse_nnodes, rdzv_from_env
from netcheck.facts.local import usable_gpus
from netcheck.facts.probe import error_text
from netcheck.facts.slurmctl import missing_commands
from netcheck.render import outfile, plot

Env = Mapping[str, str]


class UsageError(UserError):
    """An unusable command line: printed as one line, exit 64."""


# --expect-busbw above this is a typo (a unit off, digits repeated): no interconnect's busbw
# comes near it (NVLink 5 moves 1.8 TB/s per GPU).
MAX_EXPECT_BUSBW = 10_000.0   # GB/s
# --bw-budget below this times nothing (the sweep's smallest size alone takes about this long
# with its warm-up and iterations on a busy node); above it, a typo: a preflight sweep that
# needs an hour is no preflight. (A budget past --timeout is the bandwidth phase's to skip, and
# say so: the default budget outlasts a short --timeout.)
MIN_BW_BUDGET = 0.1           # seconds
MAX_BW_BUDGET = 3600.0        # seconds
LOOK_TIMEOUT_MAX = 3600.0     # seconds: `netcheck probe` and `inspect` look once; longer is a typo
NO_RDZV_IN_ENV = "(no MASTER_ADDR or PET_MASTER_ADDR in the environment)"
RDZV_REQUIRED = f"--rdzv HOST:PORT is required {NO_RDZV_IN_ENV}"
# A command line without an endpoint: every other mistake on it is named first (check_config).
NO_ENDPOINT = Endpoint("", 0)


@dataclass(frozen=True)
class Outputs:
    """Where a run writes its report besides the terminal; None: not asked for. '{rank}' in a
    path becomes the node rank; '-' (--json only) is stdout."""

    json: str | None = None      # --json: the JSON report
    exclude: str | None = None   # --exclude-file: faulty hostnames for `sbatch --exclude`
    prom: str | None = None      # --prom: Prometheus text-format metrics
    plot: str | None = None      # --plot: the bandwidth sweeps and pair matrix as a PNG
    html: str | None = None      # --html: the report as one self-contained web page

    def flags(self) -> tuple[tuple[str, str | None], ...]:
        return (("--json", self.json), ("--exclude-file", self.exclude), ("--prom", self.prom),
                ("--plot", self.plot), ("--html", self.html))

    def for_node(self, node_rank: int | None, hostname: str, worker: bool) -> "Outputs":
        """The paths this node writes: '{rank}' named. Under torchrun every worker runs
        netcheck and rank 0 speaks for the cluster: a worker writes only where the path names
        its rank ("report-{rank}.json"), or to stdout. A node that has no rank (never seated)
        writes "report-unranked-HOSTNAME.json": no other node's file is overwritten."""
        label = str(node_rank) if node_rank is not None else f"unranked-{hostname}"

        def named(path: str | None) -> str | None:
            if path is None or path == "-" or "{rank}" not in path:
                return None if worker and path != "-" else path
            return path.replace("{rank}", label)
        return Outputs(*(named(path) for _, path in self.flags()))

    def check(self) -> None:
        for flag, path in self.flags():
            check_writable(flag, path)


@dataclass(frozen=True)
class MeshPlan:
    """--mesh, parsed: which node pairs the mesh phase connects."""

    sample: int | None   # "sample:K": ring neighbours plus K random peers; None ("full"): every pair


@dataclass(frozen=True)
class Config:
    """`netcheck --rdzv HOST:PORT ...`, the run on every node."""

    rdzv: Endpoint          # NO_ENDPOINT until check_config, which refuses it last
    launch: Launch
    run_id: str
    timeout: float          # bounds the whole run
    join_window: float      # arrival numbering: the host waits until nobody joined for this long
    phases: tuple[str, ...]  # the phases to run, in order
    mesh: MeshPlan | None   # None: every pair up to MESH_FULL_UP_TO nodes, sampled above
    hash_paths: tuple[str, ...]  # files or folders whose content is compared across nodes
    sweep: SweepOptions     # the bandwidth phase's flags, nccl-tests' names and meaning
    baseline: Report | None  # a known-good earlier report to compare this run with
    token: str | None       # a secret the nodes prove they share (HMAC); None: unauthenticated
    outputs: Outputs
    quiet: bool
    verbose: bool
    drain: bool = False     # --drain: the host drains the nodes at fault (checked: Slurm's commands are there)


@dataclass(frozen=True)
class LocalConfig:
    """`netcheck local`: this node alone."""

    timeout: float
    outputs: Outputs
    quiet: bool
    drain: bool


@dataclass(frozen=True)
class ProbeConfig:
    """`netcheck probe HOST:PORT`: the reach probe alone."""

    endpoint: Endpoint
    timeout: float
    outputs: Outputs
    quiet: bool


@dataclass(frozen=True)
class InspectConfig:
    """`netcheck inspect`: a running job's store (rdzv), its flight-recorder dumps (traces), or both."""

    rdzv: Endpoint | None   # None: --traces alone
    run_id: str | None      # None: every run the store holds
    nnodes: tuple[int, int] | None
    world_size: int | None
    timeout: float
    traces: str | None      # a folder that is there
    prefix: str | None
    preflight: Report | None
    outputs: Outputs
    quiet: bool


@dataclass(frozen=True)
class ReportConfig:
    """`netcheck report REPORT.json`: a saved report rendered again."""

    report: Report
    outputs: Outputs
    text: bool              # the text report on the terminal: without --html, or with --text
    quiet: bool
    verbose: bool


@dataclass(frozen=True)
class ChecksConfig:
    """`netcheck checks`: the registry's checks."""

    json: bool


Settings = Config | LocalConfig | ProbeConfig | InspectConfig | ReportConfig | ChecksConfig


def config_from_args(args: argparse.Namespace, env: Env) -> Config:
    """The run's Config. Every other mistake is found before a missing endpoint: a typo in
    --nnodes is named as such, not as 'no --rdzv' (check_config asks for the endpoint last)."""
    rdzv = args.rdzv if args.rdzv is not None else rdzv_from_env(env)   # --rdzv "" is refused as empty
    launch = detect_launch(env, args.nnodes, args.node_rank, args.nproc_per_node, local_gpus=usable_gpus())
    return check_config(Config(
        rdzv=parse_endpoint(rdzv) if rdzv is not None else NO_ENDPOINT, launch=launch,
        run_id=args.rdzv_id or default_run_id(env),
        timeout=args.timeout, join_window=args.join_window,
        phases=select_phases(args.skip, args.only), mesh=parse_mesh(args.mesh), hash_paths=tuple(args.hash),
        sweep=flags.options_from_args(args),
        baseline=load_report("--baseline", args.baseline) if args.baseline is not None else None,
        token=args.token or env.get("NETCHECK_TOKEN") or None,
        outputs=Outputs(args.json, args.exclude_file, args.prom, _plot_path(args.plot), args.html),
        quiet=args.quiet, verbose=args.verbose, drain=check_drain(args.drain, env)))


def local_config(args: argparse.Namespace, env: Env) -> LocalConfig:
    return LocalConfig(timeout=check_look_timeout(args.timeout), outputs=_outputs(args),
                       quiet=args.quiet, drain=check_drain(args.drain, env))


def probe_config(args: argparse.Namespace, env: Env) -> ProbeConfig:
    outputs = _outputs(args)
    return ProbeConfig(endpoint=parse_endpoint(args.endpoint, "netcheck probe"),   # an argument here, not --rdzv
                       timeout=check_look_timeout(args.timeout), outputs=outputs, quiet=args.quiet)


def inspect_config(args: argparse.Namespace, env: Env) -> InspectConfig:
    """Every mistake named before a missing endpoint, as for the run."""
    outputs = _outputs(args)
    rdzv = args.rdzv if args.rdzv is not None else None if args.traces else rdzv_from_env(env)
    endpoint = parse_endpoint(rdzv) if rdzv is not None else None   # an empty --rdzv is named, not skipped
    preflight = load_report("--preflight", args.preflight) if args.preflight is not None else None
    timeout = check_look_timeout(args.timeout)
    nnodes_text = args.nnodes or env.get("PET_NNODES")
    nnodes = parse_nnodes(nnodes_text) if nnodes_text else None
    world = args.world_size if args.world_size is not None else \
        int_var(env, "WORLD_SIZE") if "WORLD_SIZE" in env else None
    if world is not None and world < 1:
        raise UsageError(f"--world-size {world}: must be 1 or more")
    if args.traces is not None:
        _check_traces(args.traces)
    if endpoint is None and not args.traces:   # last: any other mistake is the one to name
        raise UsageError(f"--rdzv HOST:PORT or --traces DIR is required {NO_RDZV_IN_ENV}")
    return InspectConfig(rdzv=endpoint, run_id=args.rdzv_id or env.get("TORCHELASTIC_RUN_ID"), nnodes=nnodes,
                         world_size=world, timeout=timeout, traces=args.traces or None, prefix=args.prefix,
                         preflight=preflight, outputs=outputs, quiet=args.quiet)


def report_config(args: argparse.Namespace, env: Env) -> ReportConfig:
    outputs = _outputs(args)
    return ReportConfig(report=load_report("netcheck report", args.report), outputs=outputs,
                        text=args.text or not args.html, quiet=args.quiet, verbose=args.verbose)


def checks_config(args: argparse.Namespace, env: Env) -> ChecksConfig:
    return ChecksConfig(json=args.json)


# Each sub-command's record from its parsed command line (None: the run itself).
SETTINGS: dict[str | None, Callable[[argparse.Namespace, Env], Settings]] = {
    None: config_from_args, "local": local_config, "probe": probe_config, "inspect": inspect_config,
    "report": report_config, "checks": checks_config}


def settings(args: argparse.Namespace, env: Env = os.environ) -> Settings:
    """The checked record of the sub-command the command line names; a UsageError (or another
    UserError) in one line where it is unusable."""
    return SETTINGS[args.command](args, env)


def _outputs(args: argparse.Namespace) -> Outputs:
    """A sub-command's report files (the output flags every sub-command shares), checked writable."""
    outputs = Outputs(json=args.json, prom=args.prom, html=args.html)
    outputs.check()
    return outputs


def _plot_path(path: str | None) -> str | None:
    if path is not None:
        plot.check_available()
    return path


def check_drain(drain: bool, env: Env) -> bool:
    """--drain where Slurm's commands are: else one line, before anything runs."""
    if drain and (missing := missing_commands(env)):
        raise UsageError(f"--drain: {missing}: run it where Slurm's commands are")
    return drain


def _check_traces(path: str) -> None:
    """--traces names a folder that is there: a typo is a usage error, not a finding."""
    if not os.path.exists(path):
        raise UsageError(f"--traces {path!r}: no such folder")
    if not os.path.isdir(path):
        raise UsageError(f"--traces {path!r}: not a folder: give the folder the ranks' dumps are in")


def parse_mesh(text: str | None) -> MeshPlan | None:
    """--mesh: "full" (every pair) or "sample:K" (ring neighbours plus K random peers)."""
    if text is None or text == "":
        return None
    if text == "full":
        return MeshPlan(None)
    kind, _, count = text.partition(":")
    if kind != "sample" or not re.fullmatch(r"[0-9]{1,9}", count) or int(count) < 1:
        raise UsageError(f"--mesh {text!r}: expected full or sample:K with K >= 1")
    return MeshPlan(int(count))


def parse_endpoint(text: str, named: str = "--rdzv") -> Endpoint:
    """HOST, HOST:PORT, [V6]:PORT or [V6]; the default port is torch's, 29500. named: how a mistake names
    the text (the flag, or `netcheck probe` for its argument)."""
    if not text.strip():
        raise UsageError(f"{named} {text!r}: the endpoint is empty: expected HOST:PORT or [IPV6]:PORT")
    match = re.fullmatch(r"\[([^\[\]]+)\](?::([0-9]*))?|([^:\[\]]+)(?::([0-9]*))?", text.strip())
    if not match or (text.strip().endswith(":")):
        raise UsageError(f"{named} {text!r}: expected HOST:PORT or [IPV6]:PORT")
    host = match.group(1) or match.group(3)
    port_text = match.group(2) if match.group(1) else match.group(4)
    # Over five significant digits is out of range (and int() refuses over 4300 digits).
    if port_text and (len(port_text.lstrip("0")) > 5 or not 1 <= int(port_text) <= 65535):
        raise UsageError(f"{named} {text!r}: port {port_text} is outside 1-65535")
    return Endpoint(host, int(port_text) if port_text else DEFAULT_PORT)


def select_phases(skip: str | None, only: str | None) -> tuple[str, ...]:
    if skip and only:
        raise UsageError("--skip and --only cannot be used together")
    named = [p.strip() for p in (skip or only or "").split(",") if p.strip()]
    unknown = [p for p in named if p not in PHASES]
    if unknown:
        raise UsageError(f"unknown phase {', '.join(unknown)}: phases are {', '.join(PHASES)}")
    if only:
        needed = {f for p in named for f in _standing_on(p)}
        return tuple(p for p in PHASES if p in named or p in needed)
    kept = [p for p in PHASES if p not in named]
    under = [p for p in named if any(p in _standing_on(k) for k in kept)]
    if under:
        raise UsageError(f"--skip {', '.join(under)}: later phases stand on "
                         f"{'it' if len(under) == 1 else 'them'}; to stop early, use --only with the first phases")
    return tuple(kept)


def _standing_on(phase: str) -> tuple[str, ...]:
    """The foundation phases `phase` needs, itself included when it is one: `--only mesh`
    needs the rendezvous to find its peers."""
    if phase in FOUNDATION_PHASES:
        return FOUNDATION_PHASES[:FOUNDATION_PHASES.index(phase) + 1]
    return FOUNDATION_PHASES


def _check_node_size(launch: Launch) -> None:
    """A netcheck a node: its rank and the node count within MAX_NODES, and their processes (the
    job's ranks) within MAX_RANKS."""
    nodes, nproc = launch.nnodes_max, launch.nproc_per_node
    if launch.node_rank is not None and not 0 <= launch.node_rank < MAX_NODES:
        raise UsageError(f"--node-rank {launch.node_rank}: must be 0 to {MAX_NODES - 1}")
    if nodes is None:
        return
    if nodes > MAX_NODES:
        raise UsageError(f"nnodes {nodes} (from {launch.source}): netcheck takes at most {MAX_NODES} nodes "
                         f"(the node bound; ranks up to {MAX_RANKS})")
    if nodes * nproc > MAX_RANKS:
        raise UsageError(f"{nodes} nodes x {nproc} processes = {nodes * nproc} ranks (from {launch.source}): "
                         f"netcheck takes at most {MAX_RANKS} ranks (the rank bound; nodes up to {MAX_NODES})")
    if launch.node_rank is not None and launch.node_rank >= nodes:
        raise UsageError(f"node rank {launch.node_rank} (from {launch.source}) is not below nnodes {nodes}")


def _check_torchrun_size(launch: Launch) -> None:
    """torchrun's workers, each a member seated by its RANK: WORLD_SIZE ranks within MAX_RANKS, on
    WORLD_SIZE / LOCAL_WORLD_SIZE nodes within MAX_NODES."""
    ranks, nproc, rank = launch.nnodes_max or 0, launch.nproc_per_node, launch.node_rank
    nodes = -(-ranks // nproc)
    shape = f"from torchrun: WORLD_SIZE {ranks} / LOCAL_WORLD_SIZE {nproc} = {nodes} nodes"
    if ranks > MAX_RANKS:
        raise UsageError(f"{ranks} ranks ({shape}): netcheck takes at most {MAX_RANKS} ranks "
                         f"(the rank bound; nodes up to {MAX_NODES})")
    if nodes > MAX_NODES:
        raise UsageError(f"{nodes} nodes ({shape}): netcheck takes at most {MAX_NODES} nodes "
                         f"(the node bound; ranks up to {MAX_RANKS})")
    if rank is not None and not 0 <= rank < ranks:
        raise UsageError(f"RANK {rank} (from torchrun) is not below WORLD_SIZE {ranks}")


def check_config(config: Config) -> Config:
    launch = config.launch
    # NaN compares false with everything: a NaN deadline never expires (the "never hangs" promise).
    if not (config.timeout > 0 and math.isfinite(config.timeout)):
        raise UsageError(f"--timeout {config.timeout:g}: must be more than 0 seconds, and finite")
    if config.timeout < (least := minimum_timeout(config.phases)):
        waiting = ", ".join(f"{p} {PHASE_SECONDS[p]:g} s" for p in WAITING_PHASES if p in config.phases)
        raise UsageError(f"--timeout {config.timeout:g}: at least {least:g} seconds for the phases asked ({waiting}, "
                         f"and {REPORT_RESERVE:g} s for the report); --only or --skip fewer phases to go below it")
    if not (config.join_window > 0 and math.isfinite(config.join_window)):
        raise UsageError(f"--join-window {config.join_window:g}: must be more than 0 seconds, "
                         "and finite")
    if not 1 <= launch.nproc_per_node <= MAX_PROCS_PER_NODE:
        raise UsageError(f"--nproc-per-node {launch.nproc_per_node}: must be 1 to {MAX_PROCS_PER_NODE}")
    if is_torchrun_worker(launch):
        _check_torchrun_size(launch)
    else:
        _check_node_size(launch)
    if not is_run_id(config.run_id):
        raise UsageError(f"--rdzv-id {config.run_id!r}: 1-{MAX_RUN_ID_CHARS} characters, no '/'")
    check_sweep(config.sweep)
    config.outputs.check()
    # Last: every other mistake on the command line is the one to name, not a missing endpoint.
    if config.rdzv == NO_ENDPOINT:
        raise UsageError(RDZV_REQUIRED)
    return config


def check_sweep(o: SweepOptions) -> None:
    """The bandwidth flags within what a run can mean, each flag checked here alone (their
    values parsed by bandwidth.flags.options_from_args). NaN compares false with everything
    (a NaN budget never runs out), and infinity never ends."""
    if o.minbytes > o.maxbytes:
        raise UsageError(f"-b {size_text(o.minbytes)} is above -e {size_text(o.maxbytes)}")
    if o.stepfactor < 2:
        raise UsageError(f"-f {o.stepfactor}: the step factor must be 2 or more")
    if o.iters < 1:
        raise UsageError(f"-n {o.iters}: at least 1 timed iteration")
    if o.warmup_iters < 0:
        raise UsageError(f"-w {o.warmup_iters}: warm-up iterations cannot be negative")
    if o.backend not in BACKENDS:
        raise UsageError(f"--backend {o.backend}: one of {', '.join(BACKENDS)}")
    expect, budget = o.expect_busbw, o.budget_s
    if expect is not None and not (0 < expect <= MAX_EXPECT_BUSBW and math.isfinite(expect)):
        raise UsageError(f"--expect-busbw {expect:g}: a number of GB/s above 0 and at most "
                         f"{MAX_EXPECT_BUSBW:g} (no interconnect comes near it)")
    if not (MIN_BW_BUDGET <= budget <= MAX_BW_BUDGET and math.isfinite(budget)):
        raise UsageError(f"--bw-budget {budget:g}: {MIN_BW_BUDGET:g} to {MAX_BW_BUDGET:g} seconds")
    if o.step_time_s is not None and not (0 < o.step_time_s <= MAX_SECONDS):
        raise UsageError(f"--step-time {o.step_time_s:g}: a training step's seconds, more than 0")
    if o.step_time_s is not None and o.model_params is None:
        raise UsageError("--step-time needs --model-params: the speed-up weighs the step against its gradient's "
                         "all_reduce")


def check_look_timeout(seconds: float) -> float:
    """--timeout of `netcheck probe` and `netcheck inspect`: one look, bounded."""
    if not 0 < seconds < LOOK_TIMEOUT_MAX:
        raise UsageError(f"--timeout {seconds:g}: must be more than 0 and below {LOOK_TIMEOUT_MAX:g} seconds")
    return seconds


def check_writable(flag: str, path: str | None) -> None:
    """Fail before the run, not after it, when a report could not be written: every output
    flag of every sub-command comes here (Outputs.check), and render.outfile says why."""
    if path is None or path == "-" and flag == "--json":
        return
    if path == "-":   # a page is opened from a file; stdout holds the text report
        raise UsageError(f"{flag} -: the page is written to a file: give its path" if flag == "--html" else
                         f"{flag} -: only --json writes to stdout: give a file's path")
    trouble = outfile.problem(path.replace("{rank}", "0"))
    if trouble is not None:
        raise UsageError(f"{flag} {path}: {trouble}" if path else f"{flag} '': {trouble}")


class BaselineError(UserError):
    """The baseline file cannot be used; the message says why in one line."""


def load_report(flag: str, path: str) -> Report:
    """An earlier JSON report netcheck wrote (--baseline, --preflight); BaselineError in one line."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_BASELINE_BYTES + 1)
    except OSError as e:
        raise BaselineError(f"{flag} {path}: {error_text(e)}") from None
    try:
        report = codec.loads(Report, text, MAX_BASELINE_BYTES)
    except codec.DecodeError as e:
        raise BaselineError(f"{flag} {path}: not a {REPORT_SCHEMA} report ({e})") from None
    if report.schema != REPORT_SCHEMA:
        raise BaselineError(f"{flag} {path}: schema {report.schema!r}, this netcheck reads "
                            f"{REPORT_SCHEMA!r}")
    return report
