"""Command line: parse, validate, run, render. No diagnosis happens here.

    netcheck --rdzv HOST:PORT [--nnodes N|MIN:MAX] [--node-rank K] [--json PATH|-]
    netcheck local                 this node only, no network
    netcheck probe HOST:PORT       the endpoint probe only, without torch
    netcheck report REPORT.json    a saved JSON report rendered again: text, or a page (--html)
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from typing import Callable, Sequence

from netcheck import __version__
from netcheck.bandwidth import flags
from netcheck.config import (
    NO_ENDPOINT,
    NO_RDZV_IN_ENV,
    BaselineError,
    Config,
    Outputs,
    UsageError,
    check_config,
    check_look_timeout,
    load_report,
    parse_endpoint,
    select_phases,
)
from netcheck.core.budget import timeout_help
from netcheck.core.bwrecords import SweepOptions
from netcheck.core.constants import (
    DEFAULT_JOIN_WINDOW,
    DEFAULT_PORT,
    DEFAULT_TIMEOUT,
    DRAIN_PREFIX,
    EXIT_INTERNAL,
    EXIT_PASS,
    EXIT_SIGNALLED,
    EXIT_USAGE,
    INSPECT_TIMEOUT,
    LOCAL_TIMEOUT,
    MESH_FULL_UP_TO,
    MESH_SAMPLE_PEERS,
    PHASES,
    PROBE_TIMEOUT,
    SLURM_CALL_TIMEOUT,
)
from netcheck.core.deadline import Deadline
from netcheck.core.model import HOST, REACH_OUTCOMES, exit_of, is_torchrun_worker
from netcheck.facts.launcher import LaunchError, default_run_id, detect_launch, int_var, parse_nnodes, rdzv_from_env
from netcheck.facts.local import usable_gpus
from netcheck.facts.probe import error_text
from netcheck.facts.started import seconds_since_start
from netcheck.phases import stop
from netcheck.render import export, plot
from netcheck.render import text as report
from netcheck.render.checks import render_checks_json, render_checks_text
from netcheck.render.escape import printable

EPILOG = """\
exit codes, the same on every node and in every mode (the JSON's `fault` says it too): 0 all
pass, 1 warnings only; a failure (2 and up) says whose fault it is: 2 this node's (a gate drains
this node on 2 alone), 3 netcheck's own (an internal error, its deadline spent with no node to
blame, or a report file asked for not written: the text report is still printed), 4 other nodes'
only (named on the report's last line and in faulty_nodes; this node is healthy), 5 the cluster's
as a whole (no node singled out); 64 unusable command line (an output path that cannot be written
included), 130 interrupted, 143 terminated. `probe`, `inspect` and `report` of a report without a
fault exit by the verdict: 0, 1, 2.
subcommands: `netcheck local` (this node only; with --drain, Slurm's HealthCheckProgram),
`netcheck probe HOST:PORT` (reach alone),
`netcheck inspect --rdzv HOST:PORT` (a job that hangs now: who is missing, read-only),
`netcheck checks [--json]` (each check id with its phase, meaning and kinds),
`netcheck report REPORT.json [--html PATH] [--text]` (a saved JSON report rendered again).
"""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting 2: bad command lines exit 64, in one line."""

    def error(self, message: str):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="netcheck", usage=USAGE, description="Preflight network check for multi-node PyTorch: "
                "run the same command on every node.", epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"netcheck {__version__}")
    p.add_argument("--rdzv", metavar="HOST:PORT", help="the endpoint the job will use "
                   f"(torchrun's --rdzv-endpoint, or MASTER_ADDR:MASTER_PORT); default port "
                   f"{DEFAULT_PORT}; [v6addr]:port accepted. Default: MASTER_ADDR/MASTER_PORT "
                   "or PET_MASTER_ADDR/PET_MASTER_PORT from the environment")
    p.add_argument("--nnodes", metavar="N|MIN:MAX", help="number of nodes (torchrun's meaning). "
                   "Default: from Slurm, Kubeflow or torchrun variables; else nodes are "
                   "numbered as they arrive and the host waits for --join-window of quiet")
    p.add_argument("--node-rank", type=int, metavar="K", help="this node's rank; 0 hosts the "
                   "rendezvous. Default: from the launcher's variables, else arrival order")
    p.add_argument("--nproc-per-node", type=int, metavar="P",
                   help="processes per node (default: local GPU count, else 1)")
    p.add_argument("--rdzv-id", metavar="ID", help="keeps runs apart: a node of another run "
                   "is named, never counted in this one (default: $SLURM_JOB_ID, else $TORCHELASTIC_RUN_ID, "
                   "else 'netcheck')")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"bounds the whole run, seconds (default {DEFAULT_TIMEOUT:g}); {timeout_help()}")
    p.add_argument("--join-window", type=float, default=DEFAULT_JOIN_WINDOW, metavar="S",
                   help="without a fixed node count: the host closes the rendezvous once no "
                   f"node has joined for this long (default {DEFAULT_JOIN_WINDOW:g})")
    p.add_argument("--skip", metavar="PHASE[,PHASE]", help=f"phases to skip: {', '.join(PHASES)}")
    p.add_argument("--only", metavar="PHASE[,PHASE]", help="run only these phases")
    p.add_argument("--mesh", metavar="full|sample:K", help="which node pairs the mesh phase "
                   f"connects: every pair (default up to {MESH_FULL_UP_TO} nodes), or ring "
                   f"neighbours plus K random peers per node (default above: sample:{MESH_SAMPLE_PEERS})")
    p.add_argument("--token", metavar="SECRET", help="a secret every node must be given: nodes "
                   "sign what they publish (HMAC-SHA256) and a node without it is not seated. "
                   "Default: $NETCHECK_TOKEN; without one the rendezvous port, like torchrun's, "
                   "is unauthenticated")
    p.add_argument("--hash", action="append", default=[], metavar="PATH", help="a file or "
                   "folder whose content must be the same on every node (code, configs); repeatable")
    p.add_argument("--baseline", metavar="REPORT.json", help="a known-good earlier JSON report: "
                   "say what drifted since (versions, variables, hashes, interfaces, settings)")
    p.add_argument("--json", metavar="PATH|-", help=JSON_HELP + ". '{rank}' in PATH becomes the node "
                   "rank; under torchrun, only rank 0 writes unless PATH has '{rank}'")
    p.add_argument("--exclude-file", metavar="PATH", help="write the faulty hostnames there, "
                   "comma-separated on one line (empty when none), as `sbatch --exclude` "
                   "takes them: sbatch --exclude=\"$(cat PATH)\" ...")
    p.add_argument("--prom", metavar="PATH", help=PROM_HELP)
    p.add_argument("--drain", action="store_true", help=DRAIN_HELP)
    flags.add_arguments(p)
    p.add_argument("--plot", metavar="PATH.png", help="busbw against size and the node-pair "
                   "matrix as a picture (needs matplotlib: pip install 'netcheck[plot]')")
    p.add_argument("--html", metavar="PATH", help=HTML_HELP + "; '{rank}' in PATH as for --json")
    p.add_argument("-q", "--quiet", action="store_true", help="no text report; the exit code says it")
    p.add_argument("-v", "--verbose", action="store_true", help="evidence for passing checks too")
    return p


USAGE = ("netcheck [--rdzv HOST:PORT] [--nnodes N] [--node-rank K] [options]   (on every node)\n"
         "       netcheck {local,probe,inspect,checks,report} ...                   (each with -h)")
JSON_HELP = "write the JSON report there ('-': stdout, and the text report goes to stderr)"
PROM_HELP = ("write the verdicts, each check's severity, the faulty nodes and the phase timings there as "
             "Prometheus text-format metrics (netcheck_*), e.g. into the node exporter's textfile collector "
             "directory as netcheck.prom")
HTML_HELP = ("write the report there as one self-contained web page (nothing fetched when opened): findings "
             "by check, a node table to sort and filter, the node-pair heatmap, busbw and latency against size, "
             "each rank's time, where the environments differ, the export lines")


def config_from_args(args: argparse.Namespace, env: os._Environ | dict) -> Config:
    """The validated Config. Every other mistake is found before a missing endpoint: a typo in
    --nnodes is named as such, not as 'no --rdzv' (check_config asks for the endpoint last)."""
    rdzv = args.rdzv if args.rdzv is not None else rdzv_from_env(env)   # --rdzv "" is refused as empty
    try:
        launch = detect_launch(env, args.nnodes, args.node_rank, args.nproc_per_node,
                               local_gpus=usable_gpus())
    except LaunchError as e:
        raise UsageError(str(e)) from None
    return check_config(Config(
        rdzv=parse_endpoint(rdzv) if rdzv is not None else NO_ENDPOINT, launch=launch,
        run_id=args.rdzv_id or default_run_id(env),
        timeout=args.timeout, join_window=args.join_window,
        phases=select_phases(args.skip, args.only), mesh=args.mesh, hash_paths=tuple(args.hash),
        sweep=_sweep_options(args),
        baseline=_baseline(args.baseline), token=args.token or env.get("NETCHECK_TOKEN") or None,
        outputs=Outputs(args.json, args.exclude_file, args.prom, _plot_path(args.plot), args.html),
        quiet=args.quiet, verbose=args.verbose))


def _sweep_options(args: argparse.Namespace) -> SweepOptions:
    try:
        return flags.options_from_args(args)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _plot_path(path: str | None) -> str | None:
    if path is not None:
        try:
            plot.check_available()
        except plot.PlotUnavailable as e:
            raise UsageError(str(e)) from None
    return path


def _baseline(path: str | None, flag: str = "--baseline"):
    if path is None:
        return None
    try:
        return load_report(flag, path)
    except BaselineError as e:
        raise UsageError(str(e)) from None


def progress_printer(quiet: bool):
    """Progress lines on stderr, only for a person at a terminal."""
    if quiet or not sys.stderr.isatty():
        return lambda message: None
    return say


def say(message: str) -> None:
    """One line on stderr: a peer's hostname or a store's value in it stays on its line."""
    write_text(sys.stderr, f"netcheck: {printable(message)}\n")
    sys.stderr.flush()


def write_text(stream, text: str) -> None:
    """Write what the stream's encoding can carry, the rest as escapes: a name in a script an
    ASCII terminal cannot show is no reason to lose the report to a UnicodeEncodeError."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(text.encode(encoding, "backslashreplace").decode(encoding))


def main(argv: Sequence[str] | None = None, started: float | None = None) -> int:
    """The command line's answer; --timeout counts from `started` (monotonic), else from now."""
    argv = list(sys.argv[1:] if argv is None else argv)
    started = time.monotonic() if started is None else started
    try:
        if argv[:1] == ["local"]:
            return run_local(argv[1:], started)
        if argv[:1] == ["probe"]:
            return run_probe(argv[1:])
        if argv[:1] == ["checks"]:
            return run_checks(argv[1:])
        if argv[:1] == ["inspect"]:
            return run_inspect(argv[1:], started)
        if argv[:1] == ["report"]:
            return run_report(argv[1:])
        args = build_parser().parse_args(argv)
        config = config_from_args(args, os.environ)
        _check_drain(args.drain)
    except UsageError as e:
        say(f"error: {e}")
        return EXIT_USAGE
    return run_and_render(config, args.drain, started)


def entry() -> None:
    """The process's entry point (the console script, `python -m netcheck`).

    Everything is written and flushed by then, so the process ends at once: the
    interpreter's teardown with torch loaded takes 0.5 s on an idle machine and seconds on
    a loaded one, and a person who pressed Ctrl-C is waiting for the prompt.
    """
    code = main(started=time.monotonic() - seconds_since_start())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_and_render(config: Config, drain: bool, started: float) -> int:
    from netcheck.phases.runner import run_check

    signal.signal(signal.SIGTERM, stop.on_sigterm)
    outcome = run_check(config, progress_printer(config.quiet), started)
    rep = outcome.report
    # Under torchrun every worker runs netcheck: rank 0 speaks for the cluster, the
    # others only when they failed on their own (say, they could not reach the store),
    # and write files only where the path names their rank ("report-{rank}.json").
    worker = is_torchrun_worker(config.launch) and rep.role != HOST
    quiet = config.quiet or (worker and rep.verdict != "fail")
    outputs = config.outputs.for_node(rep.node_rank, socket.gethostname(), worker)
    failed = emit(rep, outputs, quiet, config.verbose)
    outcome.report_out()
    failed += _gate(rep) if drain else []
    if outcome.stopped_by is not None:
        how = "terminated" if outcome.stopped_by == signal.SIGTERM else "interrupted"
        say(f"{how}; the report above holds what was learnt, and its verdict is fail")
    return delivered(outcome.exit_code, failed)


def delivered(code: int, failed: list[str]) -> int:
    """The exit code once the files are written: a report file asked for and not written, or a
    --drain Slurm refused, is netcheck's own failure (3) whatever the verdict or whose fault, so no
    gate takes a pass, or a stale file left there by an earlier run, for this run's word; a
    signal's code stays the signal's."""
    return EXIT_INTERNAL if failed and code < EXIT_SIGNALLED else code


def emit(rep, outputs: Outputs, quiet: bool, verbose: bool) -> list[str]:
    """The report: its files and, unless quiet, the text on the terminal. A file that cannot be
    written (its place became unwritable during the run) loses nothing: the text is printed,
    quiet or not, and one line per file says which was not written. Returns those lines."""
    text_out = sys.stderr if outputs.json == "-" else sys.stdout
    if outputs.json == "-":
        sys.stdout.write(report.render_json(rep))
    written, failed = [], []
    for flag, path, render in _report_files(rep, outputs):
        try:
            report.write_file(path, render())
            written.append(flag)
        except OSError as e:
            failed.append(f"{flag} {path}: not written ({error_text(e)}); the report is the text above")
    if not quiet or failed:
        write_text(text_out, report.render_text(rep, verbose))
        text_out.flush()
    if not quiet:
        if "--html" in written:
            say(f"the HTML report is in {outputs.html}")
        if "--plot" in written:
            say(f"the bandwidth plot is in {outputs.plot}")
    for line in failed:
        say(f"error: {line}")
    text_out.flush()
    return failed


def _report_files(rep, outputs: Outputs) -> list[tuple[str, str, Callable[[], str | bytes]]]:
    """(flag, path, renderer) of each file asked for; the plot where the bandwidth phase swept."""
    files: list[tuple[str, str, Callable[[], str | bytes]]] = []
    if outputs.json and outputs.json != "-":
        files.append(("--json", outputs.json, lambda: report.render_json(rep)))
    if outputs.exclude:
        files.append(("--exclude-file", outputs.exclude, lambda: export.render_exclude(rep)))
    if outputs.prom:
        files.append(("--prom", outputs.prom, lambda: export.render_prom(rep)))
    if outputs.plot and rep.bandwidth and rep.bandwidth.sweeps:
        files.append(("--plot", outputs.plot, lambda: plot.render_png(rep.bandwidth)))
    if outputs.html:
        def page() -> str:
            from netcheck.render.html import render_html  # Jinja2's import only where a page is asked for

            return render_html(rep)
        files.append(("--html", outputs.html, page))
    return files


def run_local(argv: list[str], started: float) -> int:
    p = _Parser(prog="netcheck local", description="This node only, what it alone can know: interfaces and "
                "what NCCL, gloo and TensorPipe would pick, RDMA ports, the job's process limits (this process's, "
                "as the shell, slurmd or the container gives them), its resolver, its kernel's port range and "
                "connection table, and where it has GPUs, torch's build against them and /dev/shm. No traffic "
                "but a query to each nameserver; within --timeout. As Slurm's HealthCheckProgram: "
                "`netcheck local -q --drain`.")
    p.add_argument("--json", metavar="PATH|-", help=JSON_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help="no text report; the exit code says it")
    p.add_argument("-v", "--verbose", action="store_true", help="accepted as by netcheck itself: "
                   "this report always shows the evidence of passing checks")
    p.add_argument("--html", metavar="PATH", help=HTML_HELP)
    p.add_argument("--prom", metavar="PATH", help=PROM_HELP)
    p.add_argument("--timeout", type=float, default=LOCAL_TIMEOUT, metavar="S", help="bounds the look, "
                   f"seconds (default {LOCAL_TIMEOUT:g}); --drain's Slurm commands take up to "
                   f"{2 * SLURM_CALL_TIMEOUT:g} s more (slurmd kills a HealthCheckProgram at 60 s)")
    p.add_argument("--drain", action="store_true", help=DRAIN_LOCAL_HELP)
    args = p.parse_args(argv)
    outputs = Outputs(json=args.json, prom=args.prom, html=args.html)
    outputs.check()
    timeout = check_look_timeout(args.timeout)
    _check_drain(args.drain)
    from netcheck.phases.assemble import local_only

    rep = local_only(os.environ, Deadline(timeout, start=started))
    failed = emit(rep, outputs, args.quiet, True)
    return delivered(exit_of(rep), failed + (_gate(rep) if args.drain else []))


DRAIN_LOCAL_HELP = (f"Slurm's gate: drain this node (scontrol update State=DRAIN Reason=\"{DRAIN_PREFIX} ...\") "
                    "where a check fails on it, and resume it once none does, only where a reason netcheck wrote "
                    "holds it (an admin's drain is left alone). The node is $SLURMD_NODENAME, else the short "
                    "hostname")
DRAIN_HELP = (f"Slurm's gate: the host drains each node the report puts at fault (scontrol update State=DRAIN "
              f"Reason=\"{DRAIN_PREFIX} ...\"), by the name Slurm's node list gives it; a node already holding "
              "another reason is left alone")


def _check_drain(drain: bool) -> None:
    """--drain where Slurm's commands are: else one line, before anything runs."""
    from netcheck.facts.slurmctl import missing_commands

    if drain and (missing := missing_commands(os.environ)):
        raise UsageError(f"--drain: {missing}: run it where Slurm's commands are")


def _gate(rep) -> list[str]:
    """--drain: what the gate did, said; what it could not do, returned as a failure (exit 3)."""
    from netcheck.facts.slurmctl import SlurmError
    from netcheck.phases.gate import gate

    try:
        for line in gate(rep, os.environ):
            say(line)
    except SlurmError as e:
        say(f"error: --drain: {e}")
        return [str(e)]
    return []


def run_probe(argv: list[str]) -> int:
    p = _Parser(prog="netcheck probe", description="TCP-connect to HOST:PORT, speak the TCPStore "
                f"handshake, and classify the answer: {', '.join(REACH_OUTCOMES)}. No torch.")
    p.add_argument("endpoint", metavar="HOST:PORT")
    p.add_argument("--timeout", type=float, default=PROBE_TIMEOUT, metavar="S",
                   help=f"probe timeout, after which no answer means filtered (default {PROBE_TIMEOUT:g})")
    p.add_argument("--json", metavar="PATH|-", help=JSON_HELP)
    p.add_argument("--html", metavar="PATH", help=HTML_HELP)
    args = p.parse_args(argv)
    outputs = Outputs(json=args.json, html=args.html)
    outputs.check()
    endpoint = parse_endpoint(args.endpoint, "netcheck probe")   # an argument here, not --rdzv
    timeout = check_look_timeout(args.timeout)
    from netcheck.phases.assemble import probe_only

    rep = probe_only(endpoint.host, endpoint.port, timeout)
    return delivered(exit_of(rep), emit(rep, outputs, False, True))


def run_inspect(argv: list[str], started: float) -> int:
    p = _Parser(prog="netcheck inspect", description="A job that hangs now: read its TCPStore (never "
                "writing to it), decode torchrun's rendezvous state safely, ask this node's NCCL RAS, "
                "and say who is missing. From any node that reaches the endpoint.")
    p.add_argument("--rdzv", metavar="HOST:PORT", help="the job's endpoint: torchrun's --rdzv-endpoint, "
                   "or MASTER_ADDR:MASTER_PORT for init_process_group (default: from the environment)")
    p.add_argument("--rdzv-id", metavar="ID", help="torchrun's --rdzv-id (default: $TORCHELASTIC_RUN_ID, "
                   "else every run the store holds)")
    p.add_argument("--nnodes", metavar="N|MIN:MAX", help="the job's --nnodes, to count the missing nodes "
                   "(default: $PET_NNODES)")
    p.add_argument("--world-size", type=int, metavar="N", help="init_process_group's world size, to name "
                   "the missing ranks of a static rendezvous (default: $WORLD_SIZE)")
    p.add_argument("--timeout", type=float, default=INSPECT_TIMEOUT, metavar="S",
                   help=f"bounds the whole look, seconds (default {INSPECT_TIMEOUT:g}): torch's import, the store, "
                   "the ranks' debug servers and the dumps")
    p.add_argument("--traces", metavar="DIR", help="a folder of the job's flight-recorder dumps (pickle or "
                   "JSON, one per rank, the rank in the file's name): who is behind, out of step, or silent; "
                   "read without torch and without running anything in them")
    p.add_argument("--prefix", metavar="PREFIX", help="--traces: the dumps' file names before the rank, as torch's "
                   "analyzer takes -p (default: the prefix most files ending in a number share); other files "
                   "are counted, not read")
    p.add_argument("--preflight", metavar="REPORT.json", help="the job's preflight report (netcheck --json), "
                   "to name each rank of --traces by its host")
    p.add_argument("--json", metavar="PATH|-", help=JSON_HELP)
    p.add_argument("--prom", metavar="PATH", help=PROM_HELP)
    p.add_argument("--html", metavar="PATH", help=HTML_HELP)
    args = p.parse_args(argv)
    outputs = Outputs(json=args.json, prom=args.prom, html=args.html)
    outputs.check()
    env = os.environ
    rdzv = args.rdzv if args.rdzv is not None else None if args.traces else rdzv_from_env(env)
    if rdzv is not None:
        parse_endpoint(rdzv)   # an empty or malformed --rdzv is named before anything is read
    preflight = _baseline(args.preflight, "--preflight")
    timeout = check_look_timeout(args.timeout)
    try:
        nnodes = parse_nnodes(args.nnodes or env["PET_NNODES"]) if args.nnodes or env.get("PET_NNODES") else None
        world = args.world_size if args.world_size is not None else \
            int_var(env, "WORLD_SIZE") if "WORLD_SIZE" in env else None
    except LaunchError as e:
        raise UsageError(str(e)) from None
    if world is not None and world < 1:
        raise UsageError(f"--world-size {world}: must be 1 or more")
    if args.traces is not None:
        _check_traces(args.traces)
    if rdzv is None and not args.traces:   # last: any other mistake is the one to name
        raise UsageError(f"--rdzv HOST:PORT or --traces DIR is required {NO_RDZV_IN_ENV}")
    from netcheck.inspect.job import inspect_job
    from netcheck.inspect.traces import inspect_live, inspect_traces

    rep, deadline = None, Deadline(timeout, start=started)   # one look, one --timeout: store, live view and dumps
    if rdzv:
        endpoint = parse_endpoint(rdzv)
        rep = inspect_job(endpoint, args.rdzv_id or env.get("TORCHELASTIC_RUN_ID"), nnodes, world, deadline, env)
        rep = inspect_live(rep, endpoint, deadline) if not args.traces else rep
    if args.traces:
        hosts = {n.rank: n.hostname for n in preflight.nodes} if preflight else {}
        rep = inspect_traces(args.traces, world, deadline, rep, hosts, args.prefix)
    assert rep is not None, "neither --rdzv nor --traces: refused above"
    return delivered(exit_of(rep), emit(rep, outputs, False, True))


def _check_traces(path: str) -> None:
    """--traces names a folder that is there: a typo is a usage error, not a finding."""
    if not os.path.exists(path):
        raise UsageError(f"--traces {path!r}: no such folder")
    if not os.path.isdir(path):
        raise UsageError(f"--traces {path!r}: not a folder: give the folder the ranks' dumps are in")


def run_report(argv: list[str]) -> int:
    p = _Parser(prog="netcheck report", description="A saved JSON report (--json: the host's, a joiner's, "
                "inspect's) rendered again, here or elsewhere: as text, or as a web page with --html. The exit "
                "code is the report's verdict.")
    p.add_argument("report", metavar="REPORT.json")
    p.add_argument("--html", metavar="PATH", help=HTML_HELP)
    p.add_argument("--text", action="store_true", help="the text report too (without --html, it is the default)")
    args = p.parse_args(argv)
    outputs = Outputs(html=args.html)
    outputs.check()
    rep = _baseline(args.report, "netcheck report")
    text = args.text or not args.html
    failed = emit(rep, outputs, quiet=not text, verbose=False)
    if not text and not failed:   # emit says where the page is only beside the text
        say(f"the HTML report is in {args.html}")
    return delivered(exit_of(rep), failed)


def run_checks(argv: list[str]) -> int:
    p = _Parser(prog="netcheck checks", description="Every check netcheck can report: its id, "
                "phase, severities, whom its findings stop, meaning and kinds (the exact cases, in a finding's "
                "`kind`).")
    p.add_argument("--json", action="store_true", help="as JSON, with the rule, facts and tests of each")
    args = p.parse_args(argv)
    from netcheck.rules.registry import CHECKS

    sys.stdout.write(render_checks_json(CHECKS) if args.json else render_checks_text(CHECKS))
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
