"""The host, the store and the report at cluster scale: one real netcheck host, N-1 simulated
joiners (benchmarks/_scale_nodes.py), each a real store client speaking the real protocol.

Two namespaces on the test bridge: node0 runs `netcheck --rdzv node0:29500 --nnodes N
--node-rank 0 --skip bandwidth`; node1 holds one address per simulated node
(198.18.16.0 and up) and runs the simulator processes. Six faults are planted, one node
each: one never comes (rdzv.join missing: the host runs with --nnodes N-1:N and closes the
rendezvous JOIN_WINDOW s after the last arrival), one's mesh port refuses (mesh.connect),
one has another torch (env.mismatch), a second process claims one node's rank
(rdzv.join duplicate_rank), one's clock is 30 s off (host.clock), one stops right after
its seat (rdzv.join lost_in_rendezvous: left out of the host's alive list, so no healthy
node waits for it in the mesh, which that list past 1,024 nodes once failed). `ok` is true only when the
host's report names exactly those nodes, each under its check, and the exclude file and the
.prom file name them too.

With --nproc P (torchrun at scale) every node is torchrun's with P workers, each a member
seated by its RANK (N x P ranks on the host's store), the host rank 0 started with the
variables torchrun exports; the faults are planted on single ranks. No rank is missing there:
torchrun starts no worker before every node's agent has joined, and the host of an exact
WORLD_SIZE would wait out its join share for one (the flag runs cover rdzv.join missing).

The bandwidth phase is skipped: its collectives need a torch worker on every node, which
no simulator can stand in for (RESULTS.md, "Scale", says what that leaves out).

With --in-process (no root, no sockets, no store) the host's own work alone, up to MAX_RANKS,
past the descriptors one machine can connect: every member's records made as the simulators
make them, then decoded and judged by the host's own functions in this one process
(benchmarks/_scale_inprocess.py says what that leaves out). The same faults are planted but
"missing" under --nproc (as above); `cpu_s` is the host's work, stage by stage.

Reproduce, from the repository's root (root; the suite runs --nodes 128):
    .venv/bin/python benchmarks/scale.py --nodes 1024 [--nproc 8] [--json out.json]
and without root (the suite runs --nodes 1280 --nproc 8):
    .venv/bin/python benchmarks/scale.py --nodes 12500 --nproc 8 --in-process [--json out.json]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PORT, PY, REPO, Cluster, NodeSpec, clean_env, machine_facts
from _scale_inprocess import run_in_process

sys.path.insert(0, str(REPO))
from netcheck.config import BaselineError, load_report  # noqa: E402
from netcheck.core.constants import MESH_FULL_UP_TO, MESH_SAMPLE_PEERS  # noqa: E402
from netcheck.rules.limits import BARE_DESCRIPTORS  # noqa: E402

SIM_BASE = ipaddress.ip_address("198.18.16.0")
RUN_ID = "scale"
# The host's command line before netcheck's arguments, per store backend.
HOSTS = {"legacy": ["-m", "netcheck"], "libuv": [str(REPO / "benchmarks" / "_libuv_host.py")]}
FAULTS = ("missing", "mesh", "env", "duplicate", "clock", "lost")   # one node each, spread over the ranks
JOIN_WINDOW = 2       # the host closes the rendezvous this long after the last arrival (one is missing)


def plan_for(nodes: int, mesh: str, nproc: int) -> dict:
    """What every simulator process needs: addresses (one per node), the planted faults' ranks
    (one rank each, never on the host's node)."""
    planted = FAULTS if nproc == 1 else tuple(f for f in FAULTS if f != "missing")
    ranks = nodes * nproc
    spread = [max(nproc, ranks * k // (len(planted) + 1)) for k in range(1, len(planted) + 1)]
    faults = dict(zip(planted, spread))
    if len(set(spread)) != len(planted):
        raise SystemExit(f"--nodes {nodes}: too few nodes for {len(planted)} distinct planted faults (at least 14)")
    return {"nodes": nodes, "nproc": nproc, "run_id": RUN_ID, "host": "198.18.0.10", "port": PORT, "ifname": "eth0",
            "prefixlen": 16, "mesh": mesh, "timeout": 600, "faults": faults,
            "addresses": {str(n): str(SIM_BASE + n) for n in range(1, nodes)},
            "duplicate_hostname": f"sim{faults['duplicate'] // nproc:04d}b", "duplicate_address": str(SIM_BASE + nodes)}


def hostname_of(plan: dict, rank: int) -> str:
    node = rank // plan["nproc"]
    return "node0" if node == 0 else f"sim{node:04d}"


def add_addresses(c: Cluster, plan: dict) -> None:
    addresses = [*plan["addresses"].values(), plan["duplicate_address"]]
    batch = "".join(f"addr add {a}/16 dev eth0\n" for a in addresses)
    subprocess.run(["ip", "-n", c.nodes[1].ns, "-batch", "-"], input=batch, text=True, check=True)
    hosts = [f"{a} sim{int(r):04d}.cluster sim{int(r):04d}" for r, a in plan["addresses"].items()]
    for i in (0, 1):
        c.write_hosts(i, c.hosts_lines(i) + hosts)


TYPICAL_FD_LIMIT = 1024


def typical_fd_limit() -> None:
    """The host starts with the soft descriptor limit many systems give (1,024): netcheck
    must lift it itself to hold a connection per node."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (TYPICAL_FD_LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def limit_short(plan: dict) -> bool:
    """Whether the job's store (a connection per rank and per node's agent) would not fit the
    typical limit the host starts under."""
    return plan["nodes"] * plan["nproc"] + plan["nodes"] + BARE_DESCRIPTORS > TYPICAL_FD_LIMIT


def reap(proc: subprocess.Popen) -> tuple[int, resource.struct_rusage]:
    """Wait for the host; its exit code and its own CPU time and peak RSS."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


def judge(report: dict, plan: dict, exclude: str, prom: str, report_path: Path) -> list[str]:
    """What the host's outputs got wrong about the planted faults (empty: all right), and
    whether its report reads back as a --baseline (a bound below what it holds refuses it)."""
    f, problems = plan["faults"], []
    try:
        load_report("--baseline", str(report_path))
    except BaselineError as e:
        problems.append(str(e))
    named = {"missing": ("rdzv.join", "missing"), "mesh": ("mesh.connect", None), "env": ("env.mismatch", None),
             "duplicate": ("rdzv.join", "duplicate_rank"), "clock": ("host.clock", None),
             "lost": ("rdzv.join", "lost_in_rendezvous")}
    for fault, (check, kind) in named.items():
        if fault not in f:
            continue
        hits = [x for x in report["findings"] if x["check"] == check and x["severity"] != "pass"
                and (kind is None or x.get("kind") == kind) and f[fault] in x["nodes"]]
        if not hits:
            problems.append(f"{fault} (rank {f[fault]}) is not named under {check}")
    # The faulty nodes are those that fail (a skewed clock warns); a missing node's
    # hostname is unknown, so only its rank can be named; of a rank's two claimants, the
    # one seated (whichever came first) is.
    seated = next((n["hostname"] for n in report["nodes"] if n["rank"] == f["duplicate"]), "?")
    expected = {hostname_of(plan, f["mesh"]), hostname_of(plan, f["env"]), hostname_of(plan, f["lost"]), seated}
    # The host starts under the typical soft limit (typical_fd_limit): the job's store on it
    # would refuse clients past it, which host.limits names (netcheck lifted its own).
    if limit_short(plan):
        if not [x for x in report["findings"] if (x["check"], x["severity"], x.get("kind")) ==
                ("host.limits", "fail", "nofile") and x["nodes"] == [0]]:
            problems.append(f"the host's soft descriptor limit ({TYPICAL_FD_LIMIT}) is not named under host.limits")
        expected.add(hostname_of(plan, 0))
    if set(report["faulty_nodes"]) != expected:
        problems.append(f"faulty_nodes {sorted(report['faulty_nodes'])}, expected {sorted(expected)}")
    for name in expected:
        if name not in exclude.split(","):
            problems.append(f"{name} is not in the exclude file")
        if f'"{name}"' not in prom:
            problems.append(f"{name} is not in the .prom file")
    return problems


def host_launch(plan: dict) -> tuple[list[str], dict[str, str]]:
    """The host's launch flags and environment: --nnodes N-1:N, or torchrun's rank 0."""
    nodes, nproc = plan["nodes"], plan["nproc"]
    if nproc == 1:
        return ["--nnodes", f"{nodes - 1}:{nodes}", "--node-rank", "0", "--join-window", str(JOIN_WINDOW)], {}
    return [], {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(nodes * nproc), "LOCAL_WORLD_SIZE": str(nproc),
                "GROUP_RANK": "0", "MASTER_ADDR": "node0", "MASTER_PORT": str(PORT), "TORCHELASTIC_RUN_ID": RUN_ID}


def netcheck_args(plan: dict, mesh: str, report_path: Path, exclude: Path, prom: Path) -> list[str]:
    """The host's netcheck arguments."""
    flags, _ = host_launch(plan)
    return ["--rdzv", f"node0:{PORT}", *flags, "--rdzv-id", RUN_ID, "--timeout", "300", "--mesh", mesh,
            "--skip", "bandwidth", "--json", str(report_path), "--exclude-file", str(exclude), "--prom", str(prom)]


def simulators(plan: dict, procs: int) -> list[tuple[int, int, int]]:
    """(namespace, first rank, last rank + 1) per simulator process: the host's node's other
    workers beside it, every other node's in node1."""
    nproc, ranks = plan["nproc"], plan["nodes"] * plan["nproc"]
    bounds = [nproc + (ranks - nproc) * k // procs for k in range(procs + 1)]
    return ([(0, 1, nproc)] if nproc > 1 else []) + [(1, lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def run(nodes: int, mesh: str, procs: int, store: str, folder: Path, profile: Path | None = None,
        nproc: int = 1) -> dict:
    plan = plan_for(nodes, mesh, nproc)
    (folder / "plan.json").write_text(json.dumps(plan))
    report_path, exclude, prom, log = (folder / n for n in ("host.json", "exclude.txt", "host.prom", "host.log"))
    with Cluster([NodeSpec(), NodeSpec()], subnet="198.18.0.0/16") as c:
        add_addresses(c, plan)
        # Profiled: the host's main thread under cProfile, the netcheck it runs the same.
        host_cmd = [str(REPO / "benchmarks" / "_profiled.py"), str(profile)] if profile else HOSTS[store]
        _, variables = host_launch(plan)
        argv = [PY, *host_cmd, *netcheck_args(plan, mesh, report_path, exclude, prom)]
        with log.open("w") as out:
            host = c.popen(0, argv, env={**clean_env(), **variables}, stdout=out, stderr=subprocess.STDOUT,
                           preexec_fn=typical_fd_limit)
        sims = [c.popen(ns, [PY, str(REPO / "benchmarks" / "_scale_nodes.py"), str(folder / "plan.json"),
                             str(lo), str(hi), str(folder / f"sim{k}.json")], env=clean_env(),
                        stdout=subprocess.DEVNULL, stderr=(folder / f"sim{k}.log").open("w"))
                for k, (ns, lo, hi) in enumerate(simulators(plan, procs))]
        rc, usage = reap(host)
        ended = time.time()
        for k, sim in enumerate(sims):
            if sim.wait(timeout=60) != 0:
                raise SystemExit(f"simulator {k} failed:\n{(folder / f'sim{k}.log').read_text()[-3000:]}")
    outputs = [json.loads((folder / f"sim{k}.json").read_text()) for k in range(len(sims))]
    stamps = {key: sorted(t for o in outputs for t in o["stamps"][key])
              for key in ("arrived", "roster", "results", "alive", "meshed", "done", "bye")}
    report = json.loads(report_path.read_text())
    first, last = stamps["arrived"][0], stamps["arrived"][-1]
    problems = judge(report, plan, exclude.read_text().strip(), prom.read_text(), report_path)
    return {
        "nodes": nodes,
        "nproc": nproc,
        "mesh": mesh,
        "store": store,
        "roster_s": round(stamps["roster"][0] - first, 2),
        # After the last arrival: the last node's results posted, the host's alive list seen.
        "results_after_last_s": round(stamps["results"][-1] - last, 2),
        "alive_after_last_s": round(stamps["alive"][0] - last, 2),
        # The last node's mesh results posted; the host's go-ahead seen (its mesh done).
        "meshed_after_last_s": round(stamps["meshed"][-1] - last, 2),
        "mesh_done_after_last_s": round(stamps["done"][0] - last, 2),
        "report_s": round(report_path.stat().st_mtime - last, 2),
        "total_s": round(ended - first, 2),
        "arrivals_s": round(last - first, 2),
        "host_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "host_peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "store_requests": sum(o["requests"] for o in outputs),
        "store_requests_per_s": round(sum(o["requests"] for o in outputs) / max(1e-3, ended - first)),
        "report_bytes": report_path.stat().st_size,
        "phases": report["timings"],
        "exit_code": rc,
        "verdict": report["verdict"],
        "text_report_lines": len(log.read_text().splitlines()),
        "simulator_errors": sum(len(o["errors"]) for o in outputs),
        "problems": problems,
        "ok": not problems and rc == 2,
    }


def in_process(nodes: int, mesh: str, nproc: int, folder: Path) -> dict:
    """The host's own work on every member's records in this process (_scale_inprocess.py),
    its outputs judged as a socket run's are."""
    plan = plan_for(nodes, mesh, nproc)
    report_path, exclude, prom = (folder / n for n in ("host.json", "exclude.txt", "host.prom"))
    _, variables = host_launch(plan)
    measured = run_in_process(plan, netcheck_args(plan, mesh, report_path, exclude, prom), variables,
                              TYPICAL_FD_LIMIT, folder)
    problems = judge(json.loads(report_path.read_text()), plan, exclude.read_text().strip(), prom.read_text(),
                     report_path)
    if not measured["joiners_see_the_seating"]:
        problems.append("the seating or alive list a joiner decodes is not the host's")
    return {"ok": not problems and measured["exit_code"] == 2, "ranks": nodes * nproc, "nodes": nodes,
            "nproc": nproc, "mesh": mesh, "faults": sorted(plan["faults"]), **measured, "problems": problems}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024, help="cluster size, the host included")
    parser.add_argument("--mesh", default=None, help="--mesh for every node (default: netcheck's own)")
    parser.add_argument("--nproc", type=int, default=1,
                        help="processes per node: above 1, each node is torchrun's with this many workers")
    parser.add_argument("--procs", type=int, default=4, help="simulator processes (besides the host node's workers)")
    parser.add_argument("--store", choices=sorted(HOSTS), default="legacy",
                        help="the host's TCPStore backend: netcheck's own (legacy, on its pre-bound socket) or libuv")
    parser.add_argument("--json", type=Path, help="write the measurements there as one JSON object")
    parser.add_argument("--profile", type=Path, help="profile the host (cProfile, legacy store) into this file")
    parser.add_argument("--in-process", action="store_true",
                        help="no sockets, no store, no root: every member's records made here and fed to the host's "
                             "own functions in this process (up to MAX_RANKS)")
    parser.add_argument("--keep", type=Path, help="keep the host's reports and the simulators' logs in this folder")
    args = parser.parse_args()
    ranks = args.nodes * args.nproc
    mesh = args.mesh or ("full" if ranks <= MESH_FULL_UP_TO else f"sample:{MESH_SAMPLE_PEERS}")
    print(machine_facts(), file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if args.in_process:
            result = in_process(args.nodes, mesh, args.nproc, folder)
        else:
            result = run(args.nodes, mesh, args.procs, args.store, folder, args.profile and args.profile.resolve(),
                         args.nproc)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
