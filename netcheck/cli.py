"""Command line: parse, build the sub-command's checked settings (config), run, render. No
diagnosis happens here, and no flag's value is checked here: config does that.

    netcheck --rdzv HOST:PORT [--nnodes N|MIN:MAX] [--node-rank K] [--json PATH|-]
    netcheck local                 this node only, no network
    netcheck probe HOST:PORT       the endpoint probe only, without torch
    netcheck report REPORT.json    a saved JSON report rendered again: text, or a page (--html)

Errors are told apart in one place (main): a UserError is one line and exit 64; anything else
is netcheck's own, one line naming where it was raised and exit 3, its traceback in --debug's log.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from typing import Callable, NoReturn, Sequence, TextIO, TypeAlias

from netcheck import __version__
from netcheck.bandwidth import flags
from netcheck.config import (
    ChecksConfig,
    Config,
    InspectConfig,
    LocalConfig,
    Outputs,
    ProbeConfig,
    ReportConfig,
    Settings,
    UsageError,
    config_from_args,
    settings,
)
from netcheck.core.budget import timeout_help
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
from netcheck.core.errors import UserError, described
from netcheck.core.model import HOST, REACH_OUTCOMES, Report, exit_of, is_torchrun_worker
from netcheck.facts.probe import error_text
from netcheck.facts.started import seconds_since_start
from netcheck.phases import stop
from netcheck.render import export, plot
from netcheck.render import text as report
from netcheck.render.checks import render_checks_json, render_checks_text
from netcheck.render.escape import printable

__all__ = ["build_parser", "config_from_args", "entry", "main"]   # config_from_args: the run's record, for tests

log = logging.getLogger(__name__)

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

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


USAGE = ("netcheck [--rdzv HOST:PORT] [--nnodes N] [--node-rank K] [options]   (on every node)\n"
         "       netcheck {local,probe,inspect,checks,report} ...                   (each with -h)")
JSON_HELP = ("write the JSON report there ('-': stdout, and the text report goes to stderr). In the run on "
             "every node, '{rank}' in PATH becomes the node rank; under torchrun, only rank 0 writes unless PATH "
             "has '{rank}'")
PROM_HELP = ("write the verdicts, each check's severity, the faulty nodes and the phase timings there as "
             "Prometheus text-format metrics (netcheck_*), e.g. into the node exporter's textfile collector "
             "directory as netcheck.prom; '{rank}' in PATH as for --json")
HTML_HELP = ("write the report there as one self-contained web page (nothing fetched when opened): findings "
             "by check, a node table to sort and filter, the node-pair heatmap, busbw and latency against size, "
             "each rank's time, where the environments differ, the export lines; '{rank}' in PATH as for --json")
DEBUG_HELP = ("netcheck's own log on stderr, for a bug report: each phase's start and end with its seconds, and "
              "an internal error's traceback (without it, an internal error is one line naming where it happened)")


def output_flags() -> _Parser:
    """The one parent parser of every sub-command that writes a report: its files, how much the
    terminal shows, and netcheck's own log."""
    p = _Parser(add_help=False)
    p.add_argument("--json", metavar="PATH|-", help=JSON_HELP)
    p.add_argument("--html", metavar="PATH", help=HTML_HELP)
    p.add_argument("--prom", metavar="PATH", help=PROM_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help="no text report; the exit code says it")
    p.add_argument("-v", "--verbose", action="store_true", help="evidence for passing checks too (local, probe "
                   "and inspect always show it)")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The run's flags (netcheck with no sub-command) and each sub-command's parser."""
    outputs = output_flags()
    p = _Parser(prog="netcheck", usage=USAGE, description="Preflight network check for multi-node PyTorch: "
                "run the same command on every node.", epilog=EPILOG, parents=[outputs],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"netcheck {__version__}")
    add_run_flags(p)
    commands = p.add_subparsers(dest="command", metavar="{local,probe,inspect,checks,report}",
                                help="a sub-command instead of the run (each with -h; see below)")
    add_local(commands, outputs)
    add_probe(commands, outputs)
    add_inspect(commands, outputs)
    add_checks(commands)
    add_report(commands, outputs)
    return p


def add_run_flags(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--exclude-file", metavar="PATH", help="write the faulty hostnames there, "
                   "comma-separated on one line (empty when none), as `sbatch --exclude` "
                   "takes them: sbatch --exclude=\"$(cat PATH)\" ...")
    p.add_argument("--drain", action="store_true", help=DRAIN_HELP)
    flags.add_arguments(p)
    p.add_argument("--plot", metavar="PATH.png", help="busbw against size and the node-pair "
                   "matrix as a picture (needs matplotlib: pip install 'netcheck[plot]')")


Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"


def add_local(commands: Commands, outputs: _Parser) -> None:
    p = commands.add_parser("local", prog="netcheck local", parents=[outputs], help="this node only", description=(
        "This node only, what it alone can know: interfaces and what NCCL, gloo and TensorPipe would pick, RDMA "
        "ports, the job's process limits (this process's, as the shell, slurmd or the container gives them), its "
        "resolver, its kernel's port range and connection table, and where it has GPUs, torch's build against "
        "them and /dev/shm. No traffic but a query to each nameserver; within --timeout. As Slurm's "
        "HealthCheckProgram: `netcheck local -q --drain`."))
    p.add_argument("--timeout", type=float, default=LOCAL_TIMEOUT, metavar="S", help="bounds the look, "
                   f"seconds (default {LOCAL_TIMEOUT:g}); --drain's Slurm commands take up to "
                   f"{2 * SLURM_CALL_TIMEOUT:g} s more (slurmd kills a HealthCheckProgram at 60 s)")
    p.add_argument("--drain", action="store_true", help=DRAIN_LOCAL_HELP)


def add_probe(commands: Commands, outputs: _Parser) -> None:
    p = commands.add_parser("probe", prog="netcheck probe", parents=[outputs], help="the endpoint's reach alone",
                            description="TCP-connect to HOST:PORT, speak the TCPStore handshake, and classify "
                            f"the answer: {', '.join(REACH_OUTCOMES)}. No torch.")
    p.add_argument("endpoint", metavar="HOST:PORT")
    p.add_argument("--timeout", type=float, default=PROBE_TIMEOUT, metavar="S",
                   help=f"probe timeout, after which no answer means filtered (default {PROBE_TIMEOUT:g})")


def add_inspect(commands: Commands, outputs: _Parser) -> None:
    p = commands.add_parser("inspect", prog="netcheck inspect", parents=[outputs], help="a job that hangs now",
                            description="A job that hangs now: read its TCPStore (never writing to it), decode "
                            "torchrun's rendezvous state safely, ask this node's NCCL RAS, and say who is missing. "
                            "From any node that reaches the endpoint.")
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


def add_checks(commands: Commands) -> None:
    p = commands.add_parser("checks", prog="netcheck checks", help="every check netcheck can report",
                            description="Every check netcheck can report: its id, phase, severities, whom its "
                            "findings stop, meaning and kinds (the exact cases, in a finding's `kind`).")
    p.add_argument("--json", action="store_true", help="as JSON, with the rule, facts and tests of each")


def add_report(commands: Commands, outputs: _Parser) -> None:
    p = commands.add_parser("report", prog="netcheck report", parents=[outputs], help="a saved report again",
                            description="A saved JSON report (--json: the host's, a joiner's, inspect's) rendered "
                            "again, here or elsewhere: as text, or as a web page with --html. The exit code is the "
                            "report's verdict.")
    p.add_argument("report", metavar="REPORT.json")
    p.add_argument("--text", action="store_true", help="the text report too (without --html, it is the default)")


def progress_printer(quiet: bool) -> Callable[[str], None]:
    """Progress lines on stderr, only for a person at a terminal."""
    if quiet or not sys.stderr.isatty():
        return lambda message: None
    return say


def say(message: str) -> None:
    """One line on stderr: a peer's hostname or a store's value in it stays on its line."""
    write_text(sys.stderr, f"netcheck: {printable(message)}\n")
    sys.stderr.flush()


def write_text(stream: TextIO, text: str) -> None:
    """Write what the stream's encoding can carry, the rest as escapes: a name in a script an
    ASCII terminal cannot show is no reason to lose the report to a UnicodeEncodeError."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(text.encode(encoding, "backslashreplace").decode(encoding))


def start_log(debug: bool) -> None:
    """--debug: netcheck's loggers on stderr; else they go nowhere (not even logging's last-resort
    handler). torch's loggers are left as they are: the terminal holds netcheck's words alone."""
    root = logging.getLogger("netcheck")
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.propagate = False
    to: logging.Handler = logging.NullHandler()
    if debug:
        to = logging.StreamHandler(sys.stderr)
        to.setFormatter(logging.Formatter("netcheck debug: %(asctime)s %(name)s: %(message)s"))
    root.addHandler(to)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)


def main(argv: Sequence[str] | None = None, started: float | None = None) -> int:
    """The command line's answer; --timeout counts from `started` (monotonic), else from now.
    The one place an error becomes a line and an exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    started = time.monotonic() if started is None else started
    try:
        args = build_parser().parse_args(argv)
        start_log(getattr(args, "debug", False))   # `checks` has no log to keep
        _command_first(argv, args.command)
        return run(settings(args), started)
    except UserError as e:
        say(f"error: {e}")
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - the command line's boundary: netcheck's own error, said in one line
        log.debug("internal error", exc_info=e)
        say(f"error: internal error: {described(e)}; a netcheck bug: please report it with this line "
            "and the log of the same command with --debug")
        return EXIT_INTERNAL


def _command_first(argv: list[str], command: str | None) -> None:
    """A sub-command's flags follow it: the run's flags before it would be dropped unsaid."""
    if command is not None and argv[0] != command:
        raise UsageError(f"{command}: the sub-command comes first: netcheck {command} [options]")


def run(config: Settings, started: float) -> int:
    """The sub-command's run, by its settings' record."""
    if isinstance(config, Config):
        return run_and_render(config, started)
    if isinstance(config, LocalConfig):
        return run_local(config, started)
    if isinstance(config, ProbeConfig):
        return run_probe(config)
    if isinstance(config, InspectConfig):
        return run_inspect(config, started)
    if isinstance(config, ReportConfig):
        return run_report(config)
    return run_checks(config)


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


def run_and_render(config: Config, started: float) -> int:
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
    failed += _gate(rep) if config.drain else []
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


def emit(rep: Report, outputs: Outputs, quiet: bool, verbose: bool) -> list[str]:
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


def _report_files(rep: Report, outputs: Outputs) -> list[tuple[str, str, Callable[[], str | bytes]]]:
    """(flag, path, renderer) of each file asked for; the plot where the bandwidth phase swept."""
    files: list[tuple[str, str, Callable[[], str | bytes]]] = []
    if outputs.json and outputs.json != "-":
        files.append(("--json", outputs.json, lambda: report.render_json(rep)))
    if outputs.exclude:
        files.append(("--exclude-file", outputs.exclude, lambda: export.render_exclude(rep)))
    if outputs.prom:
        files.append(("--prom", outputs.prom, lambda: export.render_prom(rep)))
    if outputs.plot and rep.bandwidth and rep.bandwidth.sweeps:
        bandwidth = rep.bandwidth
        files.append(("--plot", outputs.plot, lambda: plot.render_png(bandwidth)))
    if outputs.html:
        def page() -> str:
            from netcheck.render.html import render_html  # Jinja2's import only where a page is asked for

            return render_html(rep)
        files.append(("--html", outputs.html, page))
    return files


def run_local(config: LocalConfig, started: float) -> int:
    from netcheck.phases.assemble import local_only

    rep = local_only(os.environ, Deadline(config.timeout, start=started))
    failed = emit(rep, config.outputs, config.quiet, True)
    return delivered(exit_of(rep), failed + (_gate(rep) if config.drain else []))


DRAIN_LOCAL_HELP = (f"Slurm's gate: drain this node (scontrol update State=DRAIN Reason=\"{DRAIN_PREFIX} ...\") "
                    "where a check fails on it, and resume it once none does, only where a reason netcheck wrote "
                    "holds it (an admin's drain is left alone). The node is $SLURMD_NODENAME, else the short "
                    "hostname")
DRAIN_HELP = (f"Slurm's gate: the host drains each node the report puts at fault (scontrol update State=DRAIN "
              f"Reason=\"{DRAIN_PREFIX} ...\"), by the name Slurm's node list gives it; a node already holding "
              "another reason is left alone")


def _gate(rep: Report) -> list[str]:
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


def run_probe(config: ProbeConfig) -> int:
    from netcheck.phases.assemble import probe_only

    rep = probe_only(config.endpoint.host, config.endpoint.port, config.timeout)
    return delivered(exit_of(rep), emit(rep, config.outputs, config.quiet, True))


def run_inspect(config: InspectConfig, started: float) -> int:
    """One look, one --timeout: the store, the live view and the dumps share it."""
    from netcheck.inspect.job import inspect_job
    from netcheck.inspect.traces import inspect_live, inspect_traces

    rep, deadline = None, Deadline(config.timeout, start=started)
    if config.rdzv is not None:
        rep = inspect_job(config.rdzv, config, deadline, os.environ)
        rep = inspect_live(rep, config.rdzv, deadline) if not config.traces else rep
    if config.traces:
        hosts = {n.rank: n.hostname for n in config.preflight.nodes} if config.preflight else {}
        rep = inspect_traces(config.traces, config.world_size, deadline, rep, hosts, config.prefix)
    assert rep is not None, "neither --rdzv nor --traces: config refused it"
    return delivered(exit_of(rep), emit(rep, config.outputs, config.quiet, True))


def run_report(config: ReportConfig) -> int:
    quiet = config.quiet or not config.text
    failed = emit(config.report, config.outputs, quiet=quiet, verbose=config.verbose)
    if quiet and not config.quiet and not failed:   # emit says where the page is only beside the text
        say(f"the HTML report is in {config.outputs.html}")
    return delivered(exit_of(config.report), failed)


def run_checks(config: ChecksConfig) -> int:
    from netcheck.rules.registry import CHECKS

    sys.stdout.write(render_checks_json(CHECKS) if config.json else render_checks_text(CHECKS))
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
