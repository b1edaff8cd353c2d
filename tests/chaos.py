"""The randomized fault campaign: seeded schedules of faults on namespace clusters, judged by an
oracle written from the catalog (SPEC.md, "How the promises are proven"; issue 20, part C).

    python tests/chaos.py --n 20 --seed 1              # 20 schedules drawn from seed 1
    python tests/chaos.py --seed 1 --schedule 7        # schedule 7 of seed 1 alone (a replay)
    python tests/chaos.py --seed 1 --list --n 50       # the schedules, not run

A schedule is drawn from (seed, index) alone: a launch mode (explicit ranks, one-shot arrival,
torchrun), 3 to 6 nodes and one to three faults from CATALOG (or none: a control). Each fault
says what it does to a *real job* (`Fault.expect`): whether the job breaks, which node is at
fault and under which check and kind the host must name it, which nodes can see it themselves,
the exit codes a signal fixes. The oracle (`judge`) holds every schedule to every promise:
each node ends within --timeout + GRACE, a broken job never lets the host or a node that sees
the fault exit 0, a healthy one passes everywhere, no traceback or C++ trace in any output,
every JSON report valid against the schema, nothing left behind. It never reads netcheck's
prose: check ids, kinds, node ranks and exit codes only (a node that never got a rank is
named by its hostname, the one handle a finding has for it).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import NETNS_ETC, NETNS_RUN, Cluster, NodeSpec  # noqa: E402
from faults import Agent, arrival_args, ranked_args  # noqa: E402
from nodes import GRACE, PORT, NodeRun, finish, read_report, scaled, start  # noqa: E402

# --------------------------------------------------------------------------------------
# time: every figure from nodes.scaled, the suite's one multiplier

# What any netcheck process may take beyond its --timeout, and what a signalled or resumed
# one may take to end: nodes.GRACE, Python's start-up before the deadline starts and its
# shutdown on a busy 2-core machine. The oracle's only allowance.
CHAOS_GRACE = GRACE
# --timeout: the host waits half of it for joiners, and every node imports torch on the same
# 2 busy cores first (5 nodes took 10 s to arrive, under two other test runs): 5 s a node.
def timeout_for(n: int, bandwidth: bool, mode: str) -> float:
    seconds = 12 + 5 * n
    if bandwidth:
        seconds += 15       # the workers import torch too, then the sweep's budget
    if mode == "arrival":
        seconds += JOIN_WINDOW
    return scaled(seconds)


JOIN_WINDOW = 6                 # one-shot mode: the quiet that closes the rendezvous
TORCHRUN_PORT = 29400
# torchrun's agent imports torch and holds its own rendezvous before netcheck starts: the
# netcheck process's --timeout starts that much after the agent's.
TORCHRUN_START = scaled(20)
SMALL_SWEEP = ["-b", "1K", "-e", "1M", "-f", "4", "-w", "1", "-n", "4", "--bw-budget", "4"]
MODES = ("ranked", "arrival", "torchrun")
MODE_WEIGHTS = (4, 3, 1)        # torchrun costs two torch imports a node: drawn less often
FAULT_COUNTS = (0, 1, 2, 3)
COUNT_WEIGHTS = (1, 5, 3, 2)    # a control schedule (no fault) now and then
TRACES = re.compile(r"Traceback \(most recent call last\)|frame #\d|c10::Error|\[c10d\]")
LOST = ("rendezvous", "mesh", "env", "bandwidth", "goodbye")   # rdzv.join lost_in_* phases, in order
PHASES = ("local", "reach", "rendezvous", "mesh", "nic", "env", "bandwidth", "goodbye")


# --------------------------------------------------------------------------------------
# what a fault does to a job: the oracle's input


@dataclass(frozen=True)
class Blame:
    """A finding some node's report must hold: `check` (one of), `kind` (one of, or any),
    naming `node` (the cluster node index, turned into its rank when judged)."""

    node: int
    checks: tuple[str, ...]
    kinds: tuple[str, ...] | None = None
    severity: str = "fail"
    reporter: int | None = None     # None: the host's report; else that node's own
    rank: int | None = None         # the rank to find named, when it is not the node's own


@dataclass
class Expect:
    breaks: bool = False                 # the job as launched cannot run
    warns: bool = False                  # it runs, and a warning is due
    blame: list[Blame] = field(default_factory=list)
    seers: set[int] = field(default_factory=set)        # nodes that see it: never exit 0
    one_of_seers: list[set[int]] = field(default_factory=list)  # at least one of each set exits non-zero
    exit_codes: dict[int, set[int]] = field(default_factory=dict)
    verdicts: dict[int, str] = field(default_factory=dict)
    absent: set[int] = field(default_factory=set)     # never reaches the host's store
    no_report: set[int] = field(default_factory=set)  # cannot write one (SIGKILL)
    resumed: set[int] = field(default_factory=set)    # SIGSTOPped, timed from SIGCONT

    def merge(self, other: "Expect") -> "Expect":
        return Expect(self.breaks or other.breaks, self.warns or other.warns, self.blame + other.blame,
                      self.seers | other.seers, self.one_of_seers + other.one_of_seers,
                      {**self.exit_codes, **other.exit_codes}, {**self.verdicts, **other.verdicts},
                      self.absent | other.absent, self.no_report | other.no_report,
                      self.resumed | other.resumed)


def broken(node: int, *checks: str, kinds: tuple[str, ...] | None = None) -> Expect:
    """The common case: the job breaks, the host names `node`, which must not exit 0."""
    return Expect(breaks=True, blame=[Blame(node, checks, kinds)], seers={0, node})


def missing(node: int, sched: "Schedule") -> Expect:
    """`node` never reaches the store: with a node count the host names it missing; in one-shot
    mode it cannot know of it (SPEC: the one-shot form counts who came), so only the node
    itself is held to it, and the host only when nobody else came at all."""
    expect = Expect(breaks=True, seers={node}, absent={node})
    if sched.mode != "arrival":
        expect.blame.append(Blame(node, ("rdzv.join",), ("missing",)))
        expect.seers.add(0)
    return expect


# --------------------------------------------------------------------------------------
# the catalog: one class per fault, built for real on the cluster


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule. `nodes[0]` is the node at fault; a second node is the one it
    involves (the rank claimed twice, the hostname copied, the name made stale)."""

    nodes: tuple[int, ...]
    params: tuple[tuple[str, object], ...] = ()

    kind: ClassVar[str] = ""
    modes: ClassVar[tuple[str, ...]] = ("ranked", "arrival")
    targets: ClassVar[str] = "joiner"    # joiner | host | any | pair (two joiners) | peer (any, then another)
    alone: ClassVar[bool] = False        # masks the host's view of everything else: drawn by itself
    bandwidth: ClassVar[bool] = False    # needs the data path measured
    max_nodes: ClassVar[int] = 6
    weight: ClassVar[float] = 1.0
    conflicts: ClassVar[tuple[str, ...]] = ()
    removes_node: ClassVar[bool] = False  # a node never takes part (absent, lost): the phases after
                                          # it run without it, and bandwidth does not run at all
    spoils_data_path: ClassVar[bool] = False  # the bandwidth phase cannot measure anything beside it

    @property
    def node(self) -> int:
        return self.nodes[0]

    def param(self, name: str):
        return dict(self.params)[name]

    @classmethod
    def draw_params(cls, rng: random.Random, mode: str) -> tuple[tuple[str, object], ...]:
        return ()

    @classmethod
    def fits(cls, nodes: tuple[int, ...], mode: str) -> bool:
        """Whether the fault can be built on these nodes in this mode."""
        return True

    def describe(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.params)
        return f"{self.kind}(" + ",".join(f"node{n}" for n in self.nodes) + extra + ")"

    # hooks, in the order a run calls them
    def spec(self, i: int, spec: NodeSpec) -> NodeSpec:
        return spec

    def setup(self, c: Cluster, run: "ScheduleRun") -> None:
        pass

    def args(self, i: int, args: list[str]) -> list[str]:
        return args

    def held_back(self) -> set[int]:
        """Nodes not started with the others (`act` starts them)."""
        return set()

    def act(self, run: "ScheduleRun") -> bool:
        """Called every poll while nodes run; True once the fault has done what it does."""
        return True

    def expect(self, sched: "Schedule", run: "ScheduleRun") -> Expect:
        raise NotImplementedError


def _iptables(c: Cluster, i: int, *rule: str) -> None:
    """A rule in node i's INPUT chain, both families where the rule allows."""
    families = ("iptables",) if "-s" in rule else ("iptables", "ip6tables")
    for ipt in families:
        c.run(i, [ipt, "-w", "-A", "INPUT", *rule], timeout=10).check_returncode()


class HostFirewall(Fault):
    """The host's own rule on the endpoint port, loopback included (a rule written as
    `-p tcp --dport 29500 -j DROP`): joiners are kept out, and so is the host's store client."""

    kind = "host_firewall"
    targets = "host"
    alone = True

    @classmethod
    def draw_params(cls, rng, mode):
        return (("target", rng.choice(["DROP", "REJECT"])),)

    def setup(self, c, run):
        target = ["REJECT", "--reject-with", "tcp-reset"] if self.param("target") == "REJECT" else ["DROP"]
        _iptables(c, 0, "-p", "tcp", "--dport", str(PORT), "-j", *target)

    def expect(self, sched, run):
        everyone = set(range(sched.n))
        joiners = everyone - {0}
        return Expect(breaks=True, seers=everyone, absent=joiners,
                      blame=[Blame(0, ("rdzv.listen",), ("firewalled",))]
                      + [Blame(j, ("rdzv.reach",), reporter=j) for j in joiners])


class PathFirewall(Fault):
    """A rule on the host against one joiner's SYNs to the endpoint port (its subnet, its
    rack): that joiner sees filtered (DROP) or refused (REJECT); the others are fine."""

    kind = "path_firewall"
    removes_node = True

    @classmethod
    def draw_params(cls, rng, mode):
        return (("target", rng.choice(["DROP", "REJECT"])),)

    def setup(self, c, run):
        (c.drop_inbound if self.param("target") == "DROP" else c.reject_inbound)(0, PORT, source=self.node)

    def expect(self, sched, run):
        e = missing(self.node, sched)
        e.blame.append(Blame(self.node, ("rdzv.reach",), reporter=self.node))
        return e


class EphemeralBlocked(Fault):
    """The node's firewall lets in the endpoint port only: the ports NCCL and gloo listen on
    are closed to its peers (inbound), or also the peers' closed to it (both ways)."""

    kind = "ephemeral"
    spoils_data_path = True
    targets = "any"

    @classmethod
    def draw_params(cls, rng, mode):
        return (("way", rng.choice(["in", "both"])),)

    def setup(self, c, run):
        c.allow_only_inbound(self.node, [PORT])
        if self.param("way") == "both":
            for i in range(len(c.nodes)):
                if i != self.node:
                    _iptables(c, i, "-s", c.nodes[self.node].addr, "-p", "tcp", "--syn",
                              "!", "--dport", str(PORT), "-j", "DROP")

    def expect(self, sched, run):
        return broken(self.node, "mesh.connect")


class Squatter(Fault):
    """Another process holds the endpoint port on the host: it accepts every connection and
    never says a word (a hung rank 0 of an earlier job, another program on 29500)."""

    kind = "squatter"
    targets = "host"
    alone = True
    CODE = ("import socket,time\ns=socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, "
            "socket.IPV6_V6ONLY, 0)\ns.bind(('::', {port})); s.listen(128); print('ready', flush=True)\n"
            "held=[]\nwhile True: held.append(s.accept())\n")

    def setup(self, c, run):
        proc = c.popen(0, [sys.executable, "-c", self.CODE.format(port=PORT)])
        run.helpers.append(proc)
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"squatter did not start: {proc.stderr.read()}")

    def expect(self, sched, run):
        everyone = set(range(sched.n))
        joiners = everyone - {0}
        return Expect(breaks=True, seers=everyone, absent=joiners,
                      blame=[Blame(0, ("rdzv.listen",))]
                      + [Blame(j, ("rdzv.reach",), ("not_store",), reporter=j) for j in joiners])


class SilentClients(Fault):
    """A foreign client opens 20 connections to the store and never sends a byte (a port
    scanner, a health check): the store must keep serving the nodes. Breaks nothing."""

    kind = "silent_clients"
    weight = 0.5

    def act(self, run):
        run.helpers.append(Agent.start(run.c, self.node, "hostile", f"node0:{PORT}", "silent",
                                       run_id=run.sched.run_id).proc)
        return True

    def expect(self, sched, run):
        return Expect()


class Signal(Fault):
    """A node's netcheck gets SIGKILL, SIGSTOP, SIGTERM or SIGINT at a random moment of a
    random phase (the moment its progress line names the phase, plus a random delay)."""

    kind = "signal"
    targets = "any"
    removes_node = True
    weight = 3.0
    SIGNALS = ("SIGKILL", "SIGSTOP", "SIGTERM", "SIGINT")
    # Faster phases get shorter delays, so the signal lands in the phase more often than not.
    DELAYS = {"local": 0.05, "reach": 0.05, "rendezvous": 3.0, "mesh": 0.1, "env": 0.1, "bandwidth": 2.0}

    @classmethod
    def draw_params(cls, rng, mode):
        phases = [p for p in cls.DELAYS if p != "bandwidth"]
        phase = rng.choice(phases)
        return (("sig", rng.choice(cls.SIGNALS)), ("phase", phase),
                ("delay", round(rng.uniform(0, cls.DELAYS[phase]), 2)))

    @property
    def alone(self) -> bool:  # the host's own signal leaves nobody to name the others' faults
        return self.node == 0

    def act(self, run):
        """Waits for the phase's progress line, then for the delay; then signals, noting the
        phase the victim was in. A victim that ended first was spared (nothing happened)."""
        victim, state = run.runs[self.node], run.fault_state.setdefault(self, {})
        if victim.proc.poll() is not None:
            if "sent" not in state:
                run.notes.append(f"{self.describe()}: node{self.node} ended before the signal")
            return True
        if "due" not in state:
            if f"netcheck: {self.param('phase')}..." not in victim.progress:
                return False
            state["due"] = time.monotonic() + scaled(self.param("delay"))
        if time.monotonic() < state["due"]:
            return False
        if victim.json_path.exists():  # written (atomically) at its very end: a signal now changes nothing it said
            run.notes.append(f"{self.describe()}: node{self.node} had written its report before the signal")
            return True
        sig = getattr(signal, self.param("sig"))
        state["phase"] = _last_phase(victim)
        run.c.kill(victim.proc, sig)
        state["sent"] = time.monotonic()
        run.notes.append(f"{self.param('sig')} sent to node{self.node} in its {state['phase']} phase, "
                         f"{state['sent'] - victim.started:.1f} s after its start")
        if sig == signal.SIGSTOP:
            run.stopped[self.node] = victim
        return True

    def landed_in(self, run) -> str | None:
        return run.fault_state.get(self, {}).get("phase")

    def expect(self, sched, run):
        phase = self.landed_in(run)
        if phase is None:  # the node had ended: nothing happened to the job
            return Expect()
        sig, v = self.param("sig"), self.node
        # A node lost is a broken job; at goodbye, though, the others may have finished with
        # it already, so nobody is bound to have seen it.
        seers = set() if phase == "goodbye" else {0, v} if v else set(range(sched.n))
        if v == 0 and sig in ("SIGTERM", "SIGINT") and phase in ("env", "goodbye"):
            # A host stopped in good order after the mesh: its joiners have run every phase of
            # theirs and hear its verdict (run.stopped) on the way out, as healthy joiners of a
            # failing cluster do; they may pass.
            seers = {0}
        e = Expect(breaks=True, seers=seers)
        if sig == "SIGKILL":
            e.exit_codes[v], e.no_report = {-signal.SIGKILL}, {v}
        elif sig in ("SIGTERM", "SIGINT"):
            e.exit_codes[v] = {128 + getattr(signal, sig)}
            e.verdicts[v] = "fail"
            e.blame.append(Blame(v, ("run.stopped",), (sig.lower(),), reporter=v))
        else:
            e.resumed = {v}
            if phase != "goodbye":
                e.seers.add(v)   # resumed with its host gone or done, or its peers: not a pass
        if v == 0 or phase == "goodbye":
            return e      # a host lost: its joiners see it; a node at goodbye may have said bye
        if PHASES.index(phase) <= PHASES.index("rendezvous"):
            if sched.mode == "arrival":
                e.seers.discard(0)    # one-shot: the host may never have heard of it
                e.absent.add(v)
                return e
            kinds = ("missing", "lost_in_rendezvous") + tuple(f"lost_in_{p}" for p in LOST[1:])
        else:
            kinds = tuple(f"lost_in_{p}" for p in LOST[_lost_index(phase):])
        e.blame.append(Blame(v, ("rdzv.join", "bw.stage"), kinds))
        return e


def _lost_index(phase: str) -> int:
    """The first rdzv.join lost_in_* phase a node lost in `phase` can be named in (nic is
    the host's own computing: the next store exchange is env's)."""
    return LOST.index("env") if phase == "nic" else LOST.index(phase)


def _last_phase(run: NodeRun) -> str:
    said = [ln.removeprefix("netcheck: ").removesuffix("...") for ln in run.progress
            if ln.startswith("netcheck: ") and ln.endswith("...")]
    return next((p for p in reversed(said) if p in PHASES), "local")


class ShapedLink(Fault):
    """The node's link limited to 20 Mbit/s both ways (tc tbf): the job runs at its pace."""

    kind = "shaped_link"
    bandwidth = True
    max_nodes = 4
    weight = 0.5

    def setup(self, c, run):
        c.shape(self.node, "20mbit")

    def expect(self, sched, run):
        return broken(self.node, "bw.pair")


class MtuMismatch(Fault):
    """The node's interface (and its switch port) at MTU 9000, its peers at 1500: TCP's MSS
    keeps the job working, and the difference is worth a warning."""

    kind = "mtu_mismatch"
    targets = "any"
    modes = MODES
    conflicts = ("mtu_blackhole",)

    def spec(self, i, spec):
        return replace(spec, mtu=9000) if i == self.node else spec

    def expect(self, sched, run):
        # The odd ones out are the fewer: jumbo nodes as many as the rest leave the rest
        # named (blamed once, by the first jumbo node's fault); a tie may be named either way.
        jumbo = {f.node for f in sched.faults if f.kind == self.kind}
        rest = set(range(sched.n)) - jumbo
        if len(jumbo) < len(rest):
            odd = {self.node}
        else:
            odd = rest if len(jumbo) > len(rest) and self.node == min(jumbo) else set()
        return Expect(warns=True, blame=[Blame(n, ("nic.mtu",), severity="warn") for n in sorted(odd)], seers={0})


class MtuBlackhole(Fault):
    """Jumbo frames everywhere (MTU 9000 on every node and port) but this node's switch port
    at 1500: small messages pass, full-size frames vanish without an ICMP."""

    kind = "mtu_blackhole"
    targets = "any"
    bandwidth = True
    max_nodes = 4
    weight = 0.5
    conflicts = ("mtu_mismatch",)

    def spec(self, i, spec):
        return replace(spec, mtu=9000)

    def setup(self, c, run):
        port = c.nodes[self.node].port
        subprocess.run(["ip", "netns", "exec", c.switch_ns, "ip", "link", "set", port, "mtu", "1500"],
                       check=True, capture_output=True, timeout=10)

    def expect(self, sched, run):
        return broken(self.node, "mesh.connect", "nic.mtu", kinds=("blackhole",))


class DecoyInterface(Fault):
    """An `ib0` that is up with an address and leads nowhere: NCCL's default picks it first."""

    kind = "decoy_ib0"
    targets = "any"
    modes = MODES

    def setup(self, c, run):
        c.add_decoy(self.node, "ib0", f"198.19.{self.node + 1}.1/24")

    def expect(self, sched, run):
        return broken(self.node, "nic.nccl_default")


class HarmlessBridge(Fault):
    """A docker0 on one node, up and leading nowhere: NCCL skips docker*, gloo binds the
    hostname's address, the mesh finds it carries nothing. Breaks nothing."""

    kind = "docker0"
    targets = "any"
    modes = MODES
    weight = 0.5

    def setup(self, c, run):
        c.add_decoy(self.node, "docker0", "198.19.255.1/24")

    def expect(self, sched, run):
        return Expect()


STALE_ADDR = "198.18.0.250"   # in the nodes' subnet, owned by nobody: ARP goes unanswered


class StaleHosts(Fault):
    """The node's /etc/hosts holds an old address for another node's name: for the host's
    name it cannot reach the endpoint; for a peer's, that peer's FQDN resolves wrong here."""

    kind = "stale_hosts"
    targets = "peer"

    @property
    def removes_node(self) -> bool:  # the host's name made stale: the node never reaches it
        return self.nodes[1] == 0

    def setup(self, c, run):
        j, k = self.nodes
        stale = f"{STALE_ADDR} {c.nodes[k].fqdn} {c.nodes[k].hostname}"
        c.write_hosts(j, [stale, *c.hosts_lines(j, omit=[k])])

    def expect(self, sched, run):
        j, k = self.nodes
        if k == 0:
            e = missing(j, sched)
            e.blame.append(Blame(j, ("rdzv.reach",), reporter=j))
            return e
        e = broken(j, "rdzv.fqdn")
        e.blame.append(Blame(k, ("rdzv.fqdn",)))
        e.seers.add(k)
        return e


class LoopbackHostname(Fault):
    """Debian's stock /etc/hosts: the node's hostname on 127.0.1.1, where gloo then binds."""

    kind = "hostname_127011"
    spoils_data_path = True
    targets = "any"
    modes = MODES

    def setup(self, c, run):
        node = c.nodes[self.node]
        rest = [h for h in c.hosts_lines(self.node) if not h.endswith(f" {node.hostname}")]
        c.write_hosts(self.node, [f"127.0.1.1 {node.fqdn} {node.hostname}", *rest])

    def expect(self, sched, run):
        return broken(self.node, "nic.gloo_default")


class LateWithin(Fault):
    """The node starts a few seconds after the others, well inside the host's join deadline:
    the job would wait for it. Breaks nothing."""

    kind = "late_within"
    modes = ("ranked",)
    targets = "any"

    @classmethod
    def draw_params(cls, rng, mode):
        return (("delay", round(rng.uniform(1.0, 3.0), 1)),)   # scaled when applied: draws stay put

    def held_back(self):
        return {self.node}

    def act(self, run):
        if time.monotonic() - run.started < scaled(self.param("delay")):
            return False
        run.start_node(self.node)
        return True

    def expect(self, sched, run):
        return Expect()


class LatePastRoster(Fault):
    """The node starts only once the host has closed the rendezvous (its progress says mesh):
    too late for the job. With a node count the host names it; one-shot, it cannot wait for it."""

    kind = "late_past_roster"
    removes_node = True

    def held_back(self):
        return {self.node}

    def act(self, run):
        host = run.runs[0]
        if "netcheck: mesh..." not in host.progress and host.proc.poll() is None:
            return False
        run.start_node(self.node)
        return True

    def expect(self, sched, run):
        if sched.mode == "arrival":
            return Expect(breaks=True, seers={self.node}, absent={self.node})
        e = broken(self.node, "rdzv.join", kinds=("missing", "late", "unseated"))
        return e


class ForeignRun(Fault):
    """The node comes with another --rdzv-id: it belongs to another job."""

    kind = "foreign_run"
    removes_node = True

    def args(self, i, args):
        return args + ["--rdzv-id", "other-job"] if i == self.node else args

    def expect(self, sched, run):
        e = missing(self.node, sched)
        e.blame.append(Blame(self.node, ("rdzv.join",), ("join_failed",), reporter=self.node))
        if sched.mode == "arrival":   # the host sees a visitor of another run: a warning at least
            e.blame.append(Blame(self.node, ("rdzv.join",), ("foreign_run",), severity="warn"))
            e.seers.add(0)
        return e


class DuplicateRank(Fault):
    """The node claims another joiner's --node-rank (a copied launch line): one rank twice,
    its own never."""

    kind = "duplicate_rank"
    removes_node = True
    modes = ("ranked",)
    targets = "pair"

    def args(self, i, args):
        if i != self.node:
            return args
        at = args.index("--node-rank")
        return args[:at + 1] + [str(self.nodes[1])] + args[at + 2:]

    def expect(self, sched, run):
        j, k = self.nodes
        return Expect(breaks=True, seers={0}, one_of_seers=[{j, k}],
                      blame=[Blame(k, ("rdzv.join",), ("duplicate_rank",)),
                             Blame(j, ("rdzv.join",), ("missing",), rank=j)])


class DuplicateHostname(Fault):
    """The node calls itself by another node's hostname (booted from one image)."""

    kind = "duplicate_hostname"
    spoils_data_path = True
    targets = "peer"
    modes = MODES

    @classmethod
    def fits(cls, nodes, mode):
        # Under torchrun, node0 by another name is no agent's host, and another node called
        # node0 hosts a store of its own (torch's _matches_machine_hostname): torchrun's
        # rendezvous never completes, and no netcheck runs to judge it.
        return mode != "torchrun" or 0 not in nodes

    def spec(self, i, spec):
        # Its name in /etc/hosts stays its own, as DNS would: the endpoint still resolves.
        if i != self.node:
            return spec
        return replace(spec, hostname=f"node{self.nodes[1]}", dns_name=spec.hostname or f"node{i}")

    def expect(self, sched, run):
        j, k = self.nodes
        if sched.mode == "arrival" and k == 0:
            # Called like the endpoint, which resolves to node0: it says so and does not host
            # (torchrun would host a store of its own there); the host never hears of it.
            return Expect(breaks=True, seers={j}, absent={j},
                          blame=[Blame(j, ("rdzv.join",), ("duplicate_hostname",), reporter=j)])
        return Expect(breaks=True, seers={0, j, k},
                      blame=[Blame(n, ("rdzv.join",), ("duplicate_hostname",)) for n in (j, k)])


CATALOG: tuple[type[Fault], ...] = (
    HostFirewall, PathFirewall, EphemeralBlocked, Squatter, SilentClients, Signal, ShapedLink,
    MtuMismatch, MtuBlackhole, DecoyInterface, HarmlessBridge, StaleHosts, LoopbackHostname,
    LateWithin, LatePastRoster, ForeignRun, DuplicateRank, DuplicateHostname)


# --------------------------------------------------------------------------------------
# schedules: drawn from (seed, index) alone


@dataclass(frozen=True)
class Schedule:
    seed: int
    index: int
    mode: str
    n: int
    faults: tuple[Fault, ...]

    @property
    def run_id(self) -> str:
        return "netcheck"

    @property
    def bandwidth(self) -> bool:
        return any(f.bandwidth for f in self.faults)

    @property
    def timeout(self) -> float:
        return timeout_for(self.n, self.bandwidth, self.mode)

    def what(self) -> str:
        """Mode, size and faults: what the draw gave, whatever the time multiplier."""
        faults = " + ".join(f.describe() for f in self.faults) or "no fault (control)"
        return f"{self.mode} n={self.n}: {faults}"

    def describe(self) -> str:
        mode, faults = self.what().split(": ", 1)
        return f"#{self.index} {mode} timeout={self.timeout:g}: {faults}"

    def replay(self) -> str:
        return f"python tests/chaos.py --seed {self.seed} --schedule {self.index}"


def draw_schedule(seed: int, index: int) -> Schedule:
    rng = random.Random(f"netcheck-chaos/{seed}/{index}")
    mode = rng.choices(MODES, MODE_WEIGHTS)[0]
    n = 3 if mode == "torchrun" else rng.randint(3, 6)
    wanted = rng.choices(FAULT_COUNTS, COUNT_WEIGHTS)[0]
    faults: list[Fault] = []
    for _ in range(20 * wanted):
        if len(faults) == wanted:
            break
        fault = _draw_fault(rng, mode, n, faults)
        if fault is not None:
            faults.append(fault)
            if fault.alone:
                break
    if any(f.bandwidth for f in faults):
        n = min(n, min(f.max_nodes for f in faults))
    return Schedule(seed, index, mode, n, tuple(faults))


def _draw_fault(rng: random.Random, mode: str, n: int, chosen: list[Fault]) -> Fault | None:
    """One more fault compatible with those chosen, or None when this draw is not."""
    kinds = [k for k in CATALOG if mode in k.modes]
    cls = rng.choices(kinds, [k.weight for k in kinds])[0]
    taken = {i for f in chosen for i in f.nodes}
    free = [i for i in range(n) if i not in taken]
    nodes = _draw_nodes(rng, cls.targets, free)
    if nodes is None:
        return None
    if not cls.fits(nodes, mode):
        return None
    fault = cls(nodes, cls.draw_params(rng, mode))
    # Explicitly incompatible: a fault that masks the host's view with any other; one fault a
    # node; two that set the cluster's MTUs; the bandwidth faults on more nodes than they fit.
    if chosen and (fault.alone or any(f.alone for f in chosen)):
        return None
    if any(f.kind in fault.conflicts or fault.kind in f.conflicts for f in chosen):
        return None
    # The cluster shrinks to what a bandwidth fault fits: every fault's nodes must be in it,
    # whichever was drawn first.
    fits = min((f.max_nodes for f in (*chosen, fault) if f.bandwidth), default=n)
    if any(max(f.nodes) >= fits for f in (*chosen, fault)):
        return None
    # The bandwidth phase is not run with a node missing (run.skipped), and cannot measure with
    # a node that gloo cannot reach or binds wrong: a data-path fault has no evidence beside those.
    pairs = [(fault, f) for f in chosen] + [(f, fault) for f in chosen]
    if any(a.bandwidth and (b.removes_node or b.spoils_data_path) for a, b in pairs):
        return None
    return fault


def _draw_nodes(rng: random.Random, targets: str, free: list[int]) -> tuple[int, ...] | None:
    joiners = [i for i in free if i != 0]
    if targets == "host":
        return (0,) if 0 in free else None
    if targets == "joiner":
        return (rng.choice(joiners),) if joiners else None
    if targets == "any":
        return (rng.choice(free),) if free else None
    pool = joiners if targets == "pair" else free
    return tuple(rng.sample(pool, 2)) if len(pool) >= 2 else None


# --------------------------------------------------------------------------------------
# running one schedule


@dataclass
class ScheduleRun:
    sched: Schedule
    c: Cluster
    tmp: Path
    runs: dict[int, NodeRun] = field(default_factory=dict)
    helpers: list[subprocess.Popen] = field(default_factory=list)
    fault_state: dict[Fault, dict] = field(default_factory=dict)   # a fault's own progress
    stopped: dict[int, NodeRun] = field(default_factory=dict)   # SIGSTOPped, resumed at the end
    resumed_at: dict[int, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hung: set[int] = field(default_factory=set)
    leftovers: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def args(self, i: int) -> list[str]:
        s = self.sched
        base = (ranked_args(i, s.n, s.timeout) if s.mode == "ranked"
                else arrival_args(s.timeout, scaled(JOIN_WINDOW)))
        base += SMALL_SWEEP if s.bandwidth else ["--skip", "bandwidth"]
        for f in s.faults:
            base = f.args(i, base)
        return base

    def start_node(self, i: int) -> None:
        if self.sched.mode == "torchrun":
            self.runs[i] = self._start_torchrun(i)
        else:
            self.runs[i] = start(self.c, i, self.args(i), self.tmp, bandwidth=self.sched.bandwidth, terminal=True)

    def _start_torchrun(self, i: int) -> NodeRun:
        s = self.sched
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(s.n), "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node0:{TORCHRUN_PORT}", "--rdzv-id", "chaos",
                "--rdzv-conf", f"join_timeout={int(TORCHRUN_START)},read_timeout={int(TORCHRUN_START)}",
                "--redirects", "3", "--log-dir", str(self.tmp / f"logs{i}"),
                "-m", "netcheck", "--json", str(self.tmp / "rank{rank}.json"),
                "--timeout", str(s.timeout), "--skip", "bandwidth"]
        return NodeRun(i, self.c.popen(i, argv), self.tmp / f"node{i}-torchrun", time.monotonic())

    def resumed_limit(self, i: int) -> float:
        """When a node SIGSTOPped and then resumed must have ended (monotonic time)."""
        return max(self.runs[i].started + self.sched.timeout, self.resumed_at[i]) + CHAOS_GRACE

    def limit(self, i: int) -> float:
        """How long node i may run, from its start, before it is a hang."""
        extra = TORCHRUN_START if self.sched.mode == "torchrun" else 0.0
        return self.sched.timeout + CHAOS_GRACE + extra


def run_schedule(sched: Schedule) -> "Outcome":
    specs = [NodeSpec() for _ in range(sched.n)]
    for f in sched.faults:
        specs = [f.spec(i, s) for i, s in enumerate(specs)]
    tmp = Path(tempfile.mkdtemp(prefix=f"chaos-{sched.seed}-{sched.index}-"))
    with Cluster(specs) as c:
        run = ScheduleRun(sched, c, tmp)
        for f in sched.faults:
            f.setup(c, run)
        held = set().union(*(f.held_back() for f in sched.faults)) if sched.faults else set()
        for i in range(sched.n):
            if i not in held:
                run.start_node(i)
        _drive(run)
        _stop_helpers(run)
        run.leftovers = _left_in_namespaces(c)
        prefix = c.prefix
    run.leftovers += _namespaces_left(prefix)
    return Outcome(sched, run, [f.expect(sched, run) for f in sched.faults])


def _drive(run: ScheduleRun) -> None:
    """Act the faults and wait for every node; a node past its limit is killed as a hang."""
    pending = list(run.sched.faults)
    hard_end = time.monotonic() + run.sched.timeout + CHAOS_GRACE + TORCHRUN_START + scaled(30)
    while time.monotonic() < hard_end:
        pending = [f for f in pending if not f.act(run)]
        live = [r for i, r in run.runs.items() if r.proc.poll() is None and i not in run.stopped]
        for r in live:
            if time.monotonic() - r.started > run.limit(r.node):
                run.hung.add(r.node)
                run.c.kill(r.proc)
        if not pending and not live:
            break
        time.sleep(0.02)
    _resume_stopped(run)
    for r in run.runs.values():
        if r.proc.poll() is None:
            run.hung.add(r.node)
            run.c.kill(r.proc)
        finish(r, 10)


def _resume_stopped(run: ScheduleRun) -> None:
    """SIGCONT the stopped nodes once the others are done: a hung process that wakes must
    still end, by its own deadline or at once if that has passed (CHAOS_GRACE either way)."""
    for i, r in run.stopped.items():
        run.c.kill(r.proc, signal.SIGCONT)
        run.resumed_at[i] = time.monotonic()
    for i, r in run.stopped.items():
        try:
            r.proc.wait(timeout=max(0.1, run.resumed_limit(i) - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.hung.add(i)
            run.c.kill(r.proc)


def _stop_helpers(run: ScheduleRun) -> None:
    for p in run.helpers:
        run.c.kill(p)
        try:
            p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass


SETTLE = 1.0   # a worker killed with its parent (PR_SET_PDEATHSIG) may take a moment to go


def _left_in_namespaces(c: Cluster) -> list[str]:
    """Processes and listening sockets still in the nodes once every netcheck has ended and the
    harness's own helpers are gone: netcheck's leftovers (SPEC: it leaves nothing behind)."""
    end = time.monotonic() + SETTLE
    while time.monotonic() < end and any(_netns_pids(n.ns) for n in c.nodes):
        time.sleep(0.05)
    left = []
    for node in c.nodes:
        for pid in _netns_pids(node.ns):
            left.append(f"node{node.index}: process {pid} {_cmdline(pid)}")
        listening = subprocess.run(["ip", "netns", "exec", node.ns, "ss", "-Hltn"], capture_output=True,
                                   text=True).stdout.strip()
        if listening:
            left.append(f"node{node.index}: listening: {' | '.join(listening.splitlines())}")
    return left


def _netns_pids(ns: str) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "(gone)"


def _namespaces_left(prefix: str) -> list[str]:
    return [f"namespace left after teardown: {p}" for root in (NETNS_RUN, NETNS_ETC) if root.is_dir()
            for p in root.iterdir() if p.name.startswith(prefix)]


# --------------------------------------------------------------------------------------
# the oracle


@dataclass
class Outcome:
    sched: Schedule
    run: ScheduleRun
    expects: list[Expect]
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reports: dict[int, dict] = field(default_factory=dict)   # node index -> its report (host: the cluster's)
    host_report: dict | None = None

    @property
    def expect(self) -> Expect:
        total = Expect()
        for e in self.expects:
            total = total.merge(e)
        if total.absent >= set(range(1, self.sched.n)):
            # Nobody joins the host: the checks between nodes are not run (run.skipped
            # no_peer), so a fault only they can see leaves no finding of theirs.
            total.blame = [b for b in total.blame if not all(c.startswith(BETWEEN_NODES) for c in b.checks)]
        return total


BETWEEN_NODES = ("mesh.", "nic.")   # checks the mesh and nic phases make, with a peer only


def judge(o: Outcome) -> Outcome:
    """Every promise, for every node of the schedule."""
    e, run = o.expect, o.run
    _read_reports(o)
    for i, r in sorted(run.runs.items()):
        _judge_node(o, e, i, r)
    _judge_verdicts(o, e)
    o.violations += [f"left behind: {x}" for x in run.leftovers]
    return o


def _read_reports(o: Outcome) -> None:
    """Each node's report, validated against the schema (a report that does not validate is a
    violation, and is not read further)."""
    run = o.run
    if run.sched.mode == "torchrun":
        _read_torchrun_reports(o)
        return
    for i, r in run.runs.items():
        if not r.json_path.exists():
            continue
        try:
            o.reports[i] = read_report(r.json_path)
        except Exception as err:  # noqa: BLE001 - jsonschema's or json's: the report is bad
            o.violations.append(f"node{i}: JSON report invalid: {str(err).splitlines()[0][:300]}")
    o.host_report = o.reports.get(0)


def _read_torchrun_reports(o: Outcome) -> None:
    """torchrun mode: one report per process rank; the host's maps addresses to nodes."""
    by_rank = {}
    for path in sorted(o.run.tmp.glob("rank*.json")):
        try:
            report = read_report(path)
        except Exception as err:  # noqa: BLE001
            o.violations.append(f"{path.name}: JSON report invalid: {str(err).splitlines()[0][:300]}")
            continue
        by_rank[report["node_rank"]] = report
    o.host_report = next((r for r in by_rank.values() if r["role"] == "host"), None)
    if o.host_report is None:
        return
    addr_to_node = {n.addr: n.index for n in o.run.c.nodes}
    for entry in o.host_report["nodes"]:
        node = addr_to_node.get(entry["address"])
        if node is not None and entry["rank"] in by_rank:
            o.reports.setdefault(node, by_rank[entry["rank"]])


def ranks_of(o: Outcome, node: int) -> set[int]:
    """The ranks the host's report gives cluster node `node` (by its address); in ranked mode
    also the rank its launch line gave it, for a node that never came."""
    ranks = set()
    if o.host_report:
        addr = o.run.c.nodes[node].addr
        ranks = {n["rank"] for n in o.host_report["nodes"] if n["address"] == addr}
    if not ranks and o.sched.mode == "ranked":
        args = o.run.args(node)
        ranks = {int(args[args.index("--node-rank") + 1])}
    return ranks


def _judge_node(o: Outcome, e: Expect, i: int, r: NodeRun) -> None:
    say = o.violations.append
    where = f"node{i} (rc={r.rc}, {r.seconds:.1f} s)"
    if i in o.run.hung:
        resumed = f", or {CHAOS_GRACE:g} s after SIGCONT past it" if i in e.resumed else ""
        say(f"{where}: still running past --timeout + grace ({o.run.limit(i):g} s{resumed}): killed")
    elif i not in e.resumed and r.seconds > o.run.limit(i):
        say(f"{where}: ended past --timeout + grace ({o.run.limit(i):g} s)")
    if r.rc in (3, 64):
        say(f"{where}: exit {r.rc} (internal error / unusable command line)")
    if i in e.exit_codes and r.rc not in e.exit_codes[i] and i not in o.run.hung:
        say(f"{where}: exit code {r.rc}, the signal's is {sorted(e.exit_codes[i])}")
    output = _own_output(o, r)
    if m := TRACES.search(output):
        say(f"{where}: torch internals in its output: {_context(output, m)}")
    report = o.reports.get(i)
    if o.sched.mode != "torchrun" and report is None and i not in e.no_report and not r.json_path.exists():
        say(f"{where}: no JSON report")
    if report is not None:
        if i in e.verdicts and report["verdict"] != e.verdicts[i]:
            say(f"{where}: report verdict {report['verdict']}, expected {e.verdicts[i]}")
        internal = [f for f in report["findings"] if f["check"] == "run.internal"]
        if internal:
            say(f"{where}: run.internal: {internal[0]['summary'][:200]}")


def _own_output(o: Outcome, r: NodeRun) -> str:
    """What netcheck printed on the node. Under torchrun, its workers' logs: the agent's own
    console (its rendezvous, its report of a worker's exit code as a ChildFailedError
    traceback) is the launcher's output, not netcheck's."""
    if o.sched.mode == "torchrun":
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted((o.run.tmp / f"logs{r.node}").glob("**/std*.log")))
    return (r.stdout or "") + "\n" + (r.stderr or "")


def _context(text: str, m: re.Match) -> str:
    return text[max(0, m.start() - 150):m.end() + 150].replace("\n", " | ")


def _judge_verdicts(o: Outcome, e: Expect) -> None:
    say = o.violations.append
    rcs = {i: r.rc for i, r in o.run.runs.items()}
    if e.breaks:
        seers = set(e.seers)
        if o.sched.mode == "arrival" and e.absent >= set(range(1, o.sched.n)):
            seers.add(0)   # nobody came: even the one-shot host knows it is alone
        for i in sorted(seers):
            if rcs.get(i) == 0:
                say(f"node{i}: exit 0, though it can see the fault (or is named for it)")
        for group in e.one_of_seers:
            if all(rcs.get(i) == 0 for i in group):
                say(f"nodes {sorted(group)}: all exit 0, one of them cannot have been seated")
    elif e.warns:
        for i, rc in sorted(rcs.items()):
            if rc not in (0, 1):
                say(f"node{i}: exit {rc}; the fault only warrants a warning")
        if rcs.get(0) != 1:
            say(f"node0 (host): exit {rcs.get(0)}, the fault warrants a warning (exit 1)")
    else:
        for i, rc in sorted(rcs.items()):
            if rc != 0 and i not in e.exit_codes and i not in e.resumed:
                say(f"node{i}: exit {rc}; nothing in this schedule breaks the job (expected 0)")
    for b in e.blame:
        _judge_blame(o, b)


def _judge_blame(o: Outcome, b: Blame) -> None:
    reporter = 0 if b.reporter is None else b.reporter
    report = o.host_report if b.reporter is None else o.reports.get(b.reporter)
    want = (f"{b.severity} {'/'.join(b.checks)}" + (f" kind {'/'.join(b.kinds)}" if b.kinds else "")
            + f" naming node{b.node}")
    if report is None:
        if not (b.reporter is None and o.run.runs[0].rc == -signal.SIGKILL):
            o.violations.append(f"node{reporter}: no report to hold {want}")
        return
    ranks = ({b.rank} if b.rank is not None else ranks_of(o, b.node)) if b.reporter is None else None
    hostname = o.run.c.nodes[b.node].hostname
    for f in report["findings"]:
        if f["check"] not in b.checks or f["severity"] != b.severity:
            continue
        if b.kinds and f.get("kind") not in b.kinds:
            continue
        if b.reporter is not None or (ranks and ranks & set(f["nodes"])) or \
                (not ranks and hostname in " ".join([f["summary"], *f["evidence"]])):
            return
    got = sorted({(f["check"], f["severity"], f.get("kind", ""), tuple(f["nodes"]))
                  for f in report["findings"] if f["severity"] != "pass"})
    o.violations.append(f"node{reporter}'s report: expected {want} (rank {sorted(ranks) if ranks else '?'}); "
                        f"it has {got}")


# --------------------------------------------------------------------------------------
# the runner


def run_and_judge(sched: Schedule) -> Outcome:
    t0 = time.monotonic()
    try:
        o = judge(run_schedule(sched))
    except Exception as err:  # noqa: BLE001 - the harness itself failed: say so, as a violation
        dummy = ScheduleRun(sched, None, Path("."))  # type: ignore[arg-type]
        o = Outcome(sched, dummy, [], [f"harness error: {type(err).__name__}: {err}"])
    o.seconds = time.monotonic() - t0
    if not o.violations and o.run.tmp != Path("."):
        shutil.rmtree(o.run.tmp, ignore_errors=True)   # a failing schedule's reports are kept
    return o


def summary(outcomes: list[Outcome], seed: int) -> str:
    by_mode = Counter(o.sched.mode for o in outcomes)
    bad_mode = Counter(o.sched.mode for o in outcomes if o.violations)
    kinds = Counter(f.kind for o in outcomes for f in o.sched.faults) + Counter(
        "(none)" for o in outcomes if not o.sched.faults)
    bad_kind = Counter(f.kind for o in outcomes if o.violations for f in o.sched.faults) + Counter(
        "(none)" for o in outcomes if o.violations and not o.sched.faults)
    lines = ["", f"{'mode':<22}{'schedules':>10}{'violating':>10}"]
    lines += [f"{m:<22}{by_mode[m]:>10}{bad_mode[m]:>10}" for m in MODES if by_mode[m]]
    lines += ["", f"{'fault kind':<22}{'schedules':>10}{'violating':>10}"]
    lines += [f"{k:<22}{n:>10}{bad_kind[k]:>10}" for k, n in sorted(kinds.items())]
    total = sum(len(o.violations) for o in outcomes)
    lines += ["", f"seed {seed}: {len(outcomes)} schedules, {sum(1 for o in outcomes if o.violations)} "
                  f"with violations, {total} violations, {sum(o.seconds for o in outcomes):.0f} s"]
    return "\n".join(lines)


def print_outcome(o: Outcome) -> None:
    status = "ok" if not o.violations else f"{len(o.violations)} VIOLATION(S)"
    print(f"{o.sched.describe()} -> {status} ({o.seconds:.1f} s)", flush=True)
    if o.violations:
        rcs = " ".join(f"node{i}={r.rc}/{r.seconds:.1f}s" for i, r in sorted(o.run.runs.items()))
        print(f"    exits: {rcs}")
        for note in o.run.notes:
            print(f"    note: {note}")
        for v in o.violations:
            print(f"    - {v}")
        print(f"    reports: {o.run.tmp}")
        print(f"    replay: {o.sched.replay()}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20, help="schedules to run (default 20)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--schedule", type=int, action="append", help="run only this index (repeatable)")
    p.add_argument("--list", action="store_true", help="print the schedules, run nothing")
    p.add_argument("--json", type=Path, help="write every outcome there (for the notes)")
    a = p.parse_args(argv)
    indexes = a.schedule if a.schedule else range(a.n)
    schedules = [draw_schedule(a.seed, i) for i in indexes]
    if a.list:
        print("\n".join(s.describe() for s in schedules))
        return 0
    outcomes = []
    for s in schedules:
        outcomes.append(run_and_judge(s))
        print_outcome(outcomes[-1])
    print(summary(outcomes, a.seed))
    if a.json:
        a.json.write_text(json.dumps([outcome_record(o) for o in outcomes], indent=1))
    return 1 if any(o.violations for o in outcomes) else 0


def outcome_record(o: Outcome) -> dict:
    return {"schedule": o.sched.describe(), "replay": o.sched.replay(), "seconds": round(o.seconds, 1),
            "violations": o.violations, "notes": o.run.notes,
            "exits": {f"node{i}": [r.rc, round(r.seconds, 1)] for i, r in sorted(o.run.runs.items())},
            "findings": {f"node{i}": sorted({f"{f['severity']} {f['check']} {f.get('kind', '')} {f['nodes']}"
                                             for f in rep["findings"] if f["severity"] != "pass"})
                         for i, rep in sorted(o.reports.items())}}


if __name__ == "__main__":
    sys.exit(main())
